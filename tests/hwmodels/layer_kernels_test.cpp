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

// 4 TB/s at half efficiency (2 TB/s achievable) and 3 us a launch: the figures the expected times use.
GpuSpec test_gpu() {
  GpuSpec g;
  g.name = "test";
  g.hbm_bytes_per_s = 4e12;
  g.bf16_flops_per_s = 1e15;
  g.mem_efficiency = 0.5;
  g.kernel_overhead = Duration::from_us(3.0);
  return g;
}

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
  const GpuSpec g = test_gpu();
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

TEST_CASE("a composed step is its parts: the layer's parts times the layers, plus the head once") {
  const GqaMoeShape mixtral{.hidden = 4096,
                            .layers = 32,
                            .q_heads = 32,
                            .kv_heads = 8,
                            .head_dim = 128,
                            .experts = 8,
                            .top_k = 2,
                            .expert_inter = 14336,
                            .vocab = 32000};
  // Per token: K and V of 8 heads x 128 in BF16 = 4,096 B; rotary over (32 + 8) x 128 = 5,120 columns.
  const LayerKernelShape s = gqa_moe_layer_shape(mixtral, 60e6);
  CHECK(s.kv_bytes_per_token == 4096.0);
  CHECK(s.rotary_elements == 5120.0);
  CHECK(s.l2_bytes == 60e6);
  CHECK(launches(s, 1, EngineKind::kPytorchGraph) == 23);
  const RooflineCostModel gpu(test_gpu());
  const EngineProfile e = engine_profile(EngineKind::kPytorchGraph);
  const StepCase c{.batch = 4, .context = 512, .tokens = 4, .experts_touched = 5.5};
  const ComposedStep p = compose_step_by_part(gpu, mixtral, e, c, 60e6);
  CHECK(p.layers == 32);
  CHECK(p.small.sum() == layer_small_kernels_time(gpu, s, 4, e));
  CHECK(p.experts == step_layer_experts(gpu, mixtral, e, c));
  CHECK(p.layer() == p.gemms + p.attention + p.experts + p.small.sum());
  CHECK(p.total() == p.layer() * 32 + p.head);
  CHECK(p.total() == compose_step(gpu, mixtral, e, c, 60e6));
  // The head: one RMSNorm over 4 rows (2 x 2 x 4 x 4,096 B: read and write) at 3 us a launch and 2 TB/s,
  // and the LM-head GEMM.
  CHECK(p.head.seconds() ==
        Approx(3e-6 + 4.0 * 4 * 4096 / 2e12 + gpu.gemm({.m = 4, .n = 32000, .k = 4096}).seconds())
            .epsilon(1e-6));
}

}  // namespace moesim

namespace moesim {
namespace {
// DeepSeek-V3 (config.json: hidden 7168, 128 heads, q_lora 1536, kv_lora 512, qk_nope 128, qk_rope 64,
// v 128, 256 experts, top 8, moe_intermediate 2048) on an H100 (50 MB L2) under SGLang with DeepEP normal
// dispatch and DeepGEMM: every projection and expert in FP8.
LayerKernelShape dsv3_fp8() {
  LayerKernelShape s{.hidden = 7168,
                     .kv_bytes_per_token = (512 + 64) * 2.0,
                     .top_k = 8,
                     .experts = 256,
                     .moe = true,
                     .l2_bytes = 50e6};
  s.rotary_elements = 128 * 64 + 64;
  s.inner_norm_elements = 1536 + 512;
  s.inner_norm_launches = 2;
  // Inputs of q_a+kv_a (7168), q_b (1536), kv_b (512), o (16384), the shared expert's up (7168) and down
  // (2048), and the routed up GEMM's (7168, quantised before dispatch).
  s.quant_elements = 7168 + 1536 + 512 + 16384 + 7168 + 2048 + 7168;
  s.quant_launches = 7;
  s.expert_quant_elements = 2048;  // the routed down GEMM's input, per pair
  s.expert_quant_launches = 1;
  s.permute_row_bytes = 7168 * (1 + 1.0 / 32);  // FP8 rows with one FP32 scale per 128
  return s;
}

const SmallKernel* find(const SmallKernelList& list, std::size_t n, std::string_view name) {
  for (std::size_t i = 0; i < n; ++i) {
    if (list[i].name == name) return &list[i];
  }
  return nullptr;
}
}  // namespace

TEST_CASE("an FP8 prefill layer quantises every GEMM input and permutes the received rows for DeepGEMM") {
  const LayerKernelShape s = dsv3_fp8();
  const EngineProfile e = engine_profile(EngineKind::kSglang);
  SmallKernelList list{};
  const double t = 8192;
  const std::size_t n = layer_small_kernels(s, 8192, e, list);
  // Quantisation: BF16 read (2 B), FP8 written (1 B), one FP32 scale per 128 elements (4/128 B).
  const SmallKernel* q = find(list, n, "fp8_act_quant");
  REQUIRE(q != nullptr);
  CHECK(q->launches == 7);
  CHECK(q->bytes == Approx(t * 41984 * 3.03125));
  CHECK_FALSE(q->expert_side);
  const SmallKernel* eq = find(list, n, "fp8_expert_quant");
  REQUIRE(eq != nullptr);
  CHECK(eq->bytes == Approx(t * 8 * 2048 * 3.03125));
  CHECK(eq->expert_side);
  // 8,192 x 7,392 B = 60.6 MB of received rows exceed the 50 MB L2: each of the 8 copies reads its row.
  const SmallKernel* p = find(list, n, "permute_contiguous");
  REQUIRE(p != nullptr);
  CHECK(p->bytes == Approx(2 * t * 8 * 7392));
  CHECK(p->kind == MemoryKernel::kGather);
  CHECK(p->expert_side);
  // MLA's q_a and kv_a layernorms read and write 1,536 + 512 BF16 columns; rotary touches 128 heads x 64
  // query columns and the shared 64-column key.
  CHECK(find(list, n, "inner_rms_norm")->bytes == Approx(t * 2048 * 4));
  CHECK(find(list, n, "rotary")->bytes == Approx(t * (128 * 64 + 64) * 4));
  // SGLang gathers the weighted rows in ep_gather: no separate weight multiply, no BF16 permute.
  CHECK(find(list, n, "routing_weight_mul") == nullptr);
  CHECK(find(list, n, "permute_gather") == nullptr);
}

TEST_CASE("small-kernel time splits into the part before dispatch and the part beside the experts") {
  const GpuSpec g = test_gpu();
  const RooflineCostModel gpu(g);
  const EngineProfile e = engine_profile(EngineKind::kSglang);
  const LayerKernelShape s = dsv3_fp8();
  SmallKernelList list{};
  const std::size_t n = layer_small_kernels(s, 4096, e, list);
  double before = 0;
  double beside = 0;
  for (std::size_t i = 0; i < n; ++i)
    (list[i].expert_side ? beside : before) += list[i].launches * 3e-6 + list[i].bytes / 2e12;
  const SmallKernelTimes times = layer_small_kernel_times(gpu, s, 4096, e);
  CHECK(times.attention_side.seconds() == Approx(before).epsilon(1e-6));
  CHECK(times.expert_side.seconds() == Approx(beside).epsilon(1e-6));
  // Beside the experts: permute (4,096 x 7,392 B = 30.3 MB of received rows fit the 50 MB L2: read once,
  // written 8 times), down-input quantisation, unpermute (T x 8 BF16 rows read, T written).
  const double rows = 4096.0 * 8;
  const double expect =
      3 * 3e-6 + ((rows + 4096) * 7392 + rows * 2048 * 3.03125 + rows * 14336 + 4096.0 * 14336) / 2e12;
  CHECK(times.expert_side.seconds() == Approx(expect).epsilon(1e-6));
  CHECK(layer_small_kernels_time(gpu, s, 4096, e) == times.sum());
}

TEST_CASE("MLA prefill writes every head's expanded key from its nope columns and the shared rope key") {
  // Per token: read 128 x 128 + 64 BF16, write 128 x 192 BF16.
  CHECK(mla_key_build_bytes({.heads = 128, .qk_nope = 128, .qk_rope = 64}, 1000) ==
        Approx(1000 * 2.0 * (128 * 128 + 64 + 128 * 192)));
  CHECK(mla_key_build_bytes({.heads = 16, .qk_nope = 128, .qk_rope = 64}, 0) == 0);
}

}  // namespace moesim
