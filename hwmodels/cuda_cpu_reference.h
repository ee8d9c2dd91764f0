// CPU references for the CUDA kernels in hwmodels/cuda/moe_kernels.cuh (grouped SwiGLU expert FFN, token
// permute/unpermute) and the routing index they share. Plain float vectors in, so the GPU test (nvcc) can
// call them without seeing Eigen, which stays in the .cpp. Values are rounded to BF16 where the kernels
// store BF16, so kernel and reference differ only by FP32 summation order.
#pragma once

#include <cstdint>
#include <vector>

namespace moesim {

// Round to the nearest BF16 value (ties to even), returned as float.
[[nodiscard]] float round_to_bf16(float v);

// Where each routed (token, choice) goes when rows are grouped by expert, tokens in increasing order:
// offsets[e]..offsets[e+1] are expert e's rows, src_token[row] the token a row copies, row_of[t*k+j] the
// row of token t's j-th choice. Experts nobody chose have empty ranges.
struct RoutingIndex {
  std::vector<int> offsets;    // experts + 1
  std::vector<int> src_token;  // rows = tokens * top_k
  std::vector<int> row_of;     // tokens * top_k
};
[[nodiscard]] RoutingIndex routing_index(const std::vector<int>& topk_expert, int tokens, int top_k,
                                         int experts);

// Expert FFN of every expert on its rows of x ([rows, hidden], grouped by `offsets`):
// y = round(round(silu(x W13[:, :I]) * (x W13[:, I:])) W2). w13[e] is [hidden, 2*inter] row-major, w2[e]
// is [inter, hidden] row-major, already dequantised (FP8 values times their scale).
[[nodiscard]] std::vector<float> expert_ffn_reference(const std::vector<float>& x,
                                                      const std::vector<int>& offsets,
                                                      const std::vector<std::vector<float>>& w13,
                                                      const std::vector<std::vector<float>>& w2, int hidden,
                                                      int inter);

// out[r, :] = x[src_token[r], :].
[[nodiscard]] std::vector<float> permute_reference(const std::vector<float>& x,
                                                   const std::vector<int>& src_token, int hidden);

// y[t, :] = round(sum_j weight[t*k+j] * expert_out[row_of[t*k+j], :]).
[[nodiscard]] std::vector<float> unpermute_reference(const std::vector<float>& expert_out,
                                                     const std::vector<int>& row_of,
                                                     const std::vector<float>& weight, int tokens, int top_k,
                                                     int hidden);

}  // namespace moesim
