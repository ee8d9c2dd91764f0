// GPU test: the CUDA kernels (hwmodels/cuda/moe_kernels.cuh) against the Eigen CPU references
// (hwmodels/cuda_cpu_reference.h) on fresh random inputs, with ragged and zero-token experts, BF16 and FP8
// weights, and outputs poisoned with NaN before each run so that an unwritten element fails.
// Exits 77 (ctest: skipped) when no GPU is present.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <type_traits>
#include <vector>

#include "hwmodels/cuda/moe_kernels.cuh"
#include "hwmodels/cuda_cpu_reference.h"

namespace {

using moesim::cuda::bf16;
using moesim::cuda::fp8;

int failures = 0;

void expect(bool ok, const char* what, double detail) {
  std::printf("%s: %s (%.3g)\n", ok ? "ok  " : "FAIL", what, detail);
  if (!ok) ++failures;
}

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::printf("FAIL: %s: %s\n", what, cudaGetErrorString(e));
    ++failures;
  }
}

template <typename T>
T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  cuda_ok(cudaMalloc(&d, h.size() * sizeof(T) + 16), "cudaMalloc");
  cuda_ok(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return d;
}

std::vector<float> download(const bf16* d, size_t n) {
  std::vector<bf16> h(n);
  cuda_ok(cudaMemcpy(h.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost), "download");
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

bf16* poisoned(size_t n) {
  bf16* d = nullptr;
  cuda_ok(cudaMalloc(&d, n * sizeof(bf16)), "cudaMalloc");
  cuda_ok(cudaMemset(d, 0xFF, n * sizeof(bf16)), "poison");  // NaN in BF16
  return d;
}

// Relative error against max(|ref|, floor): BF16 keeps 8 bits (2^-8 = 0.4%); two roundings plus FP32
// summation-order effects stay well under 2%.
double worst_error(const std::vector<float>& got, const std::vector<float>& ref, double floor) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    worst = std::max(worst, std::abs(double(got[i]) - ref[i]) / std::max(std::abs(double(ref[i])), floor));
  }
  return worst;
}

template <typename W>
void expert_ffn_case(const char* name, const std::vector<int>& counts, int hidden, int inter,
                     std::mt19937& rng) {
  const int experts = static_cast<int>(counts.size());
  std::vector<int> offsets = {0};
  for (int c : counts) offsets.push_back(offsets.back() + c);
  const int rows = offsets.back();
  const int max_tokens = *std::max_element(counts.begin(), counts.end());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const bool is_fp8 = std::is_same<W, fp8>::value;
  std::vector<bf16> x(size_t(rows) * hidden);
  std::vector<float> xf(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = __float2bfloat16(u(rng));
    xf[i] = __bfloat162float(x[i]);
  }
  std::vector<W> w13(size_t(experts) * hidden * 2 * inter);
  std::vector<W> w2(size_t(experts) * inter * hidden);
  std::vector<float> s13(experts, 1.0f), s2(experts, 1.0f);
  std::vector<std::vector<float>> f13(experts), f2(experts);
  for (int e = 0; e < experts; ++e) {
    if (is_fp8) {
      s13[e] = 0.02f * float(1 + e % 3);
      s2[e] = 0.03f * float(1 + e % 2);
    }
    const float range = is_fp8 ? 4.0f : 0.1f;
    for (size_t i = 0; i < size_t(hidden) * 2 * inter; ++i) {
      W& w = w13[size_t(e) * hidden * 2 * inter + i];
      w = W(u(rng) * range);
      f13[e].push_back(static_cast<float>(w) * s13[e]);
    }
    for (size_t i = 0; i < size_t(inter) * hidden; ++i) {
      W& w = w2[size_t(e) * inter * hidden + i];
      w = W(u(rng) * range);
      f2[e].push_back(static_cast<float>(w) * s2[e]);
    }
  }
  bf16* dx = upload(x);
  W* dw13 = upload(w13);
  W* dw2 = upload(w2);
  float* ds13 = upload(s13);
  float* ds2 = upload(s2);
  int* doff = upload(offsets);
  bf16* dact = poisoned(size_t(std::max(rows, 1)) * inter);
  bf16* dy = poisoned(size_t(std::max(rows, 1)) * hidden);
  moesim::cuda::launch_expert_ffn<W>(dx, dw13, ds13, dw2, ds2, dact, dy, doff, experts, max_tokens, hidden,
                                     inter, 0);
  cuda_ok(cudaDeviceSynchronize(), "expert_ffn");
  const auto ref = moesim::expert_ffn_reference(xf, offsets, f13, f2, hidden, inter);
  const auto got = download(dy, size_t(rows) * hidden);
  expect(worst_error(got, ref, 0.05) < 0.03, name, worst_error(got, ref, 0.05));
  for (void* p :
       {(void*)dx, (void*)dw13, (void*)dw2, (void*)ds13, (void*)ds2, (void*)doff, (void*)dact, (void*)dy})
    cudaFree(p);
}

void permute_case(int tokens, int top_k, int experts, int hidden, std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, experts - 2);  // the last expert gets no token
  std::vector<int> ids(size_t(tokens) * top_k);
  for (auto& e : ids) e = pick(rng);
  const moesim::RoutingIndex r = moesim::routing_index(ids, tokens, top_k, experts);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<bf16> x(size_t(tokens) * hidden);
  std::vector<float> xf(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = __float2bfloat16(u(rng));
    xf[i] = __bfloat162float(x[i]);
  }
  std::vector<float> w(ids.size());
  for (auto& v : w) v = 0.5f + 0.25f * u(rng);
  const int rows = tokens * top_k;
  bf16* dx = upload(x);
  int* dsrc = upload(r.src_token);
  int* drow = upload(r.row_of);
  float* dw = upload(w);
  bf16* dp = poisoned(size_t(rows) * hidden);
  bf16* dy = poisoned(size_t(tokens) * hidden);
  moesim::cuda::launch_permute(dx, dsrc, dp, rows, hidden, 0);
  moesim::cuda::launch_unpermute(dp, drow, dw, dy, tokens, top_k, hidden, 0);
  cuda_ok(cudaDeviceSynchronize(), "permute/unpermute");
  const auto p_ref = moesim::permute_reference(xf, r.src_token, hidden);
  const auto p_got = download(dp, size_t(rows) * hidden);
  expect(worst_error(p_got, p_ref, 1e-30) == 0, "permute copies rows exactly",
         worst_error(p_got, p_ref, 1e-30));
  const auto y_ref = moesim::unpermute_reference(p_ref, r.row_of, w, tokens, top_k, hidden);
  const auto y_got = download(dy, size_t(tokens) * hidden);
  expect(worst_error(y_got, y_ref, 0.05) < 0.01, "unpermute sums weighted rows",
         worst_error(y_got, y_ref, 0.05));
  for (void* q : {(void*)dx, (void*)dsrc, (void*)drow, (void*)dw, (void*)dp, (void*)dy}) cudaFree(q);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  std::mt19937 rng(std::random_device{}());
  // Ragged counts, zero-token experts, a count above one tile (32) and one not a multiple of it.
  const std::vector<int> counts = {3, 0, 45, 1, 0, 64, 7, 0};
  expert_ffn_case<bf16>("expert FFN, BF16 weights, ragged and empty experts", counts, 96, 80, rng);
  expert_ffn_case<fp8>("expert FFN, FP8 weights with per-expert scales", counts, 96, 80, rng);
  expert_ffn_case<bf16>("expert FFN, shapes not multiples of the tile", {5, 33}, 72, 50, rng);
  permute_case(257, 8, 32, 128, rng);
  permute_case(1, 1, 4, 8, rng);
  std::printf("%s\n", failures == 0 ? "all passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
