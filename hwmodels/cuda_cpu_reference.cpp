#include "hwmodels/cuda_cpu_reference.h"

#include <Eigen/Dense>
#include <cmath>
#include <cstring>

#include "sim/engine/check.h"

namespace moesim {

namespace {
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
}  // namespace

float round_to_bf16(float v) {
  if (std::isnan(v)) return v;
  std::uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  // Round to nearest even on the 16 bits dropped (as __float2bfloat16).
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  bits &= 0xFFFF0000u;
  float out = 0;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

RoutingIndex routing_index(const std::vector<int>& topk_expert, int tokens, int top_k, int experts) {
  MOESIM_CHECK(static_cast<int>(topk_expert.size()) == tokens * top_k,
               "topk_expert must hold tokens * top_k ids");
  RoutingIndex r;
  r.offsets.assign(static_cast<std::size_t>(experts) + 1, 0);
  for (int e : topk_expert) {
    MOESIM_CHECK(e >= 0 && e < experts, "expert id out of range");
    ++r.offsets[static_cast<std::size_t>(e) + 1];
  }
  for (int e = 0; e < experts; ++e)
    r.offsets[static_cast<std::size_t>(e) + 1] += r.offsets[static_cast<std::size_t>(e)];
  std::vector<int> next(r.offsets.begin(), r.offsets.end() - 1);
  r.src_token.assign(topk_expert.size(), 0);
  r.row_of.assign(topk_expert.size(), 0);
  for (int t = 0; t < tokens; ++t) {
    for (int j = 0; j < top_k; ++j) {
      const auto slot = static_cast<std::size_t>(t * top_k + j);
      const int row = next[static_cast<std::size_t>(topk_expert[slot])]++;
      r.src_token[static_cast<std::size_t>(row)] = t;
      r.row_of[slot] = row;
    }
  }
  return r;
}

std::vector<float> expert_ffn_reference(const std::vector<float>& x, const std::vector<int>& offsets,
                                        const std::vector<std::vector<float>>& w13,
                                        const std::vector<std::vector<float>>& w2, int hidden, int inter) {
  const int rows = offsets.back();
  MOESIM_CHECK(x.size() == static_cast<std::size_t>(rows) * static_cast<std::size_t>(hidden),
               "x must be [rows, hidden]");
  std::vector<float> y(x.size(), 0.0f);
  const ConstMap xs(x.data(), rows, hidden);
  Eigen::Map<RowMatrix> ys(y.data(), rows, hidden);
  for (std::size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int begin = offsets[e];
    const int n = offsets[e + 1] - begin;
    if (n == 0) continue;
    const ConstMap up(w13[e].data(), hidden, 2 * inter);
    const ConstMap down(w2[e].data(), inter, hidden);
    const RowMatrix ab = xs.middleRows(begin, n) * up;
    const auto a = ab.leftCols(inter).array();
    const auto b = ab.rightCols(inter).array();
    const RowMatrix act =
        (a / (1.0f + (-a).exp()) * b).unaryExpr([](float v) { return round_to_bf16(v); }).matrix();
    ys.middleRows(begin, n) = (act * down).unaryExpr([](float v) { return round_to_bf16(v); });
  }
  return y;
}

std::vector<float> permute_reference(const std::vector<float>& x, const std::vector<int>& src_token,
                                     int hidden) {
  const auto h = static_cast<Eigen::Index>(hidden);
  const ConstMap xs(x.data(), static_cast<Eigen::Index>(x.size()) / h, h);
  std::vector<float> out(src_token.size() * static_cast<std::size_t>(hidden));
  Eigen::Map<RowMatrix> os(out.data(), static_cast<Eigen::Index>(src_token.size()), h);
  for (std::size_t r = 0; r < src_token.size(); ++r)
    os.row(static_cast<Eigen::Index>(r)) = xs.row(src_token[r]);
  return out;
}

std::vector<float> unpermute_reference(const std::vector<float>& expert_out, const std::vector<int>& row_of,
                                       const std::vector<float>& weight, int tokens, int top_k, int hidden) {
  const auto h = static_cast<Eigen::Index>(hidden);
  const ConstMap eo(expert_out.data(), static_cast<Eigen::Index>(expert_out.size()) / h, h);
  std::vector<float> y(static_cast<std::size_t>(tokens) * static_cast<std::size_t>(hidden));
  Eigen::Map<RowMatrix> ys(y.data(), tokens, h);
  for (int t = 0; t < tokens; ++t) {
    Eigen::RowVectorXf acc = Eigen::RowVectorXf::Zero(h);
    for (int j = 0; j < top_k; ++j) {
      const auto slot = static_cast<std::size_t>(t * top_k + j);
      acc += weight[slot] * eo.row(row_of[slot]);
    }
    ys.row(t) = acc.unaryExpr([](float v) { return round_to_bf16(v); });
  }
  return y;
}

}  // namespace moesim
