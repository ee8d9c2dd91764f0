// moesim's CUDA reference kernels for the MoE layer's local work on one GPU: the grouped SwiGLU expert FFN
// (x[T_e,H] @ W13[H,2I] -> silu(a)*b -> @ W2[I,H] for every local expert, each with its own token count),
// and token permute/unpermute (local sides of dispatch and combine). BF16 activations, FP32 accumulation,
// BF16 or FP8 (E4M3, one scale per expert) weights. Header-only so that the timing harness builds with nvcc
// alone; checked against hwmodels/cuda_cpu_reference.h (tests/cuda) and the harness's own CPU loop.
// They are plain tiled kernels (no tensor cores): correct references first, timed to show the gap to cuBLAS.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace moesim::cuda {

using bf16 = __nv_bfloat16;
using fp8 = __nv_fp8_e4m3;

constexpr int kTileM = 32;  // tokens per block
constexpr int kTileN = 32;  // output columns per block
constexpr int kTileK = 32;
constexpr int kRowsPerThread = 4;  // block = kTileN x (kTileM / kRowsPerThread) threads

__device__ __forceinline__ float to_float(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(fp8 v) { return static_cast<float>(v); }
__device__ __forceinline__ float silu(float a) { return a / (1.0f + __expf(-a)); }

// Grouped GEMM over experts. Expert e owns rows [offsets[e], offsets[e+1]) of `in` ([rows, k]) and `out`;
// its weights are w + e * w_expert_stride, row-major [k, w_cols], times w_scale[e] (nullptr: 1).
// kSwiGlu: out[r, j] = silu(in @ W[:, j]) * (in @ W[:, n + j]) for j < n (W has 2n columns);
// else out[r, j] = in @ W[:, j]. Grid: (ceil(max rows / kTileM), ceil(n / kTileN), experts).
template <typename W, bool kSwiGlu>
__global__ void grouped_gemm_kernel(const bf16* __restrict__ in, const W* __restrict__ w,
                                    const float* __restrict__ w_scale, bf16* __restrict__ out,
                                    const int* __restrict__ offsets, int k, int n,
                                    long long w_expert_stride) {
  const int e = blockIdx.z;
  const int begin = offsets[e];
  const int rows = offsets[e + 1] - begin;
  const int row0 = blockIdx.x * kTileM;
  if (row0 >= rows) return;  // zero-token experts and tiles past this expert's tokens
  const int col = blockIdx.y * kTileN + threadIdx.x;
  const int w_cols = kSwiGlu ? 2 * n : n;
  const W* we = w + static_cast<long long>(e) * w_expert_stride;
  const float scale = w_scale != nullptr ? w_scale[e] : 1.0f;

  __shared__ float xs[kTileM][kTileK + 1];
  __shared__ float wa[kTileK][kTileN];
  __shared__ float wb[kTileK][kTileN];
  float acc_a[kRowsPerThread] = {};
  float acc_b[kRowsPerThread] = {};
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int threads = blockDim.x * blockDim.y;

  for (int k0 = 0; k0 < k; k0 += kTileK) {
    for (int i = tid; i < kTileM * kTileK; i += threads) {
      const int r = i / kTileK;
      const int c = i % kTileK;
      const bool ok = row0 + r < rows && k0 + c < k;
      xs[r][c] = ok ? to_float(in[static_cast<long long>(begin + row0 + r) * k + k0 + c]) : 0.0f;
    }
    for (int i = tid; i < kTileK * kTileN; i += threads) {
      const int r = i / kTileN;
      const int c = i % kTileN;
      const int gc = blockIdx.y * kTileN + c;
      const bool ok = k0 + r < k && gc < n;
      const long long base = static_cast<long long>(k0 + r) * w_cols;
      wa[r][c] = ok ? to_float(we[base + gc]) * scale : 0.0f;
      if (kSwiGlu) wb[r][c] = ok ? to_float(we[base + n + gc]) * scale : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < kTileK; ++kk) {
      const float a = wa[kk][threadIdx.x];
      const float b = kSwiGlu ? wb[kk][threadIdx.x] : 0.0f;
#pragma unroll
      for (int j = 0; j < kRowsPerThread; ++j) {
        const float xv = xs[threadIdx.y * kRowsPerThread + j][kk];
        acc_a[j] += xv * a;
        if (kSwiGlu) acc_b[j] += xv * b;
      }
    }
    __syncthreads();
  }
  if (col >= n) return;
#pragma unroll
  for (int j = 0; j < kRowsPerThread; ++j) {
    const int r = row0 + threadIdx.y * kRowsPerThread + j;
    if (r >= rows) continue;
    const float v = kSwiGlu ? silu(acc_a[j]) * acc_b[j] : acc_a[j];
    out[static_cast<long long>(begin + r) * n + col] = __float2bfloat16(v);
  }
}

// The whole expert FFN for all local experts: up GEMM fused with SwiGLU into `act` ([rows, inter], BF16),
// then the down GEMM into `y` ([rows, hidden]). `max_tokens` bounds every expert's token count.
template <typename W>
inline void launch_expert_ffn(const bf16* x, const W* w13, const float* w13_scale, const W* w2,
                              const float* w2_scale, bf16* act, bf16* y, const int* offsets, int experts,
                              int max_tokens, int hidden, int inter, cudaStream_t stream) {
  if (experts == 0 || max_tokens == 0) return;
  const dim3 block(kTileN, kTileM / kRowsPerThread);
  const unsigned tiles_m = static_cast<unsigned>((max_tokens + kTileM - 1) / kTileM);
  const dim3 up(tiles_m, static_cast<unsigned>((inter + kTileN - 1) / kTileN),
                static_cast<unsigned>(experts));
  grouped_gemm_kernel<W, true>
      <<<up, block, 0, stream>>>(x, w13, w13_scale, act, offsets, hidden, inter, 2LL * hidden * inter);
  const dim3 down(tiles_m, static_cast<unsigned>((hidden + kTileN - 1) / kTileN),
                  static_cast<unsigned>(experts));
  grouped_gemm_kernel<W, false><<<down, block, 0, stream>>>(act, w2, w2_scale, y, offsets, inter, hidden,
                                                            static_cast<long long>(inter) * hidden);
}

// Permute (local side of dispatch): out[r, :] = x[src_token[r], :] for r < rows; rows are grouped by
// destination expert (hwmodels/cuda_cpu_reference.h, routing_index, builds src_token). 16-byte vectors.
__global__ void permute_kernel(const bf16* __restrict__ x, const int* __restrict__ src_token,
                               bf16* __restrict__ out, int rows, int hidden) {
  const int vecs = hidden / 8;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
       i < static_cast<long long>(rows) * vecs; i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long r = i / vecs;
    const long long v = i % vecs;
    reinterpret_cast<uint4*>(out)[r * vecs + v] =
        reinterpret_cast<const uint4*>(x)[static_cast<long long>(src_token[r]) * vecs + v];
  }
}

// Unpermute (local side of combine): y[t, :] = sum_j weight[t, j] * expert_out[row_of[t * top_k + j], :],
// FP32 accumulation, BF16 result.
__global__ void unpermute_kernel(const bf16* __restrict__ expert_out, const int* __restrict__ row_of,
                                 const float* __restrict__ weight, bf16* __restrict__ y, int tokens,
                                 int top_k, int hidden) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
       i < static_cast<long long>(tokens) * hidden; i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long t = i / hidden;
    const long long h = i % hidden;
    float acc = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      acc += weight[t * top_k + j] *
             __bfloat162float(expert_out[static_cast<long long>(row_of[t * top_k + j]) * hidden + h]);
    }
    y[i] = __float2bfloat16(acc);
  }
}

inline unsigned grid_for(long long work, int block) {
  const long long blocks = (work + block - 1) / block;
  return static_cast<unsigned>(blocks < 132LL * 16 ? (blocks > 0 ? blocks : 1) : 132LL * 16);
}

// hidden must be a multiple of 8 (every catalog model's is).
inline void launch_permute(const bf16* x, const int* src_token, bf16* out, int rows, int hidden,
                           cudaStream_t s) {
  if (rows == 0) return;
  permute_kernel<<<grid_for(static_cast<long long>(rows) * (hidden / 8), 256), 256, 0, s>>>(x, src_token, out,
                                                                                            rows, hidden);
}

inline void launch_unpermute(const bf16* expert_out, const int* row_of, const float* weight, bf16* y,
                             int tokens, int top_k, int hidden, cudaStream_t s) {
  if (tokens == 0) return;
  unpermute_kernel<<<grid_for(static_cast<long long>(tokens) * hidden, 256), 256, 0, s>>>(
      expert_out, row_of, weight, y, tokens, top_k, hidden);
}

}  // namespace moesim::cuda
