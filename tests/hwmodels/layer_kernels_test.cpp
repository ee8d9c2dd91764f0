// The small kernels of a layer per engine profile, and their time.
#include "hwmodels/layer_kernels.h"

#include <catch2/catch.hpp>

#include "hwmodels/roofline_cost_model.h"

namespace moesim {
namespace {

int launches(const LayerKernelShape& s, std::int64_t tokens, EngineKind kind) {
  SmallKernelList list{};
  const std::size_t n = layer_small_kernels(s, tokens, engine_profile(kind), list);
  int sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += list[i].launches;
  return sum;
}

const LayerKernelShape kMixtral{
    .hidden = 4096, .kv_bytes_per_token = 2.0 * 8 * 128 * 2, .top_k = 2, .experts = 8};

}  // namespace

TEST_CASE(
    "the measured PyTorch step runs about two dozen small kernels per MoE layer, a fused engine a third") {
  // shared/calibration/h200/README.md: "about two dozen small kernels per layer".
  CHECK(launches(kMixtral, 16, EngineKind::kPytorchGraph) == 23);
  // vLLM: two fused add+norms, one KV write, rotary, topk_softmax, moe_align_block_size, moe_sum.
  CHECK(launches(kMixtral, 16, EngineKind::kVllm) == 7);
  // trtllm keeps its permute as a kernel (expandInputRows).
  CHECK(launches(kMixtral, 16, EngineKind::kTrtllm) == 8);
  LayerKernelShape dense = kMixtral;
  dense.moe = false;
  CHECK(launches(dense, 16, EngineKind::kPytorchGraph) == 6);
}

TEST_CASE("small-kernel time is a fixed cost per launch plus bytes at the achievable bandwidth") {
  GpuSpec g;
  g.name = "test";
  g.hbm_bytes_per_s = 4e12;
  g.bf16_flops_per_s = 1e15;
  g.mem_efficiency = 0.5;
  g.kernel_overhead = Duration::from_us(3.0);
  const RooflineCostModel gpu(g);
  const EngineProfile e = engine_profile(EngineKind::kPytorchGraph);
  SmallKernelList list{};
  const std::int64_t t = 1000;
  const std::size_t n = layer_small_kernels(kMixtral, t, e, list);
  double expect_s = 0;
  for (std::size_t i = 0; i < n; ++i) expect_s += list[i].launches * 3e-6 + list[i].bytes / (4e12 * 0.5);
  CHECK(layer_small_kernels_time(gpu, kMixtral, t, e).seconds() == Approx(expect_s).epsilon(1e-6));
  // Residual adds read two [T, H] BF16 matrices and write one.
  bool found = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (list[i].name != "residual_add") continue;
    found = true;
    CHECK(list[i].bytes == Approx(2 * 3.0 * t * 4096 * 2));
  }
  CHECK(found);
  CHECK(layer_small_kernels_time(gpu, kMixtral, 0, e) == Duration::zero());
}

TEST_CASE("a row gather reads its source once when it fits in L2, else once per copy") {
  const double row = 7168 * 2;
  CHECK(gather_bytes(128, 8, row, 60e6) == Approx(128 * 8 * row + 128 * row));
  CHECK(gather_bytes(8192, 8, row, 60e6) == Approx(2 * 8192 * 8 * row));
  CHECK(gather_bytes(128, 8, row, 0) == Approx(2 * 128 * 8 * row));
}

}  // namespace moesim
