// TensorRT-LLM's trtllm-gen MLA decode kernel (hwmodels/attention_kernel.h): the engines that run it, its
// cost from the rate measured in NVIDIA's GB200 trace (docs/validation/blackwell_sources.md B11), and the
// GPUs and formats it leaves alone.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <utility>

#include "hwmodels/engine_profile.h"
#include "sim/engine/check.h"
#include "sim/scenario/profile_io.h"
#include "sim/scenario/scenario_parser.h"

using namespace moesim;

namespace {

const std::string kDefault = std::string(MOESIM_SOURCE_DIR) + "/scenarios/default.json";

GpuSpec gpu_named(const std::string& gpu) {
  return load_scenario(kDefault, {"cluster.gpu=\"" + gpu + "\""}).spec.cluster.gpu;
}

// DeepSeek MLA decode of `seqs` sequences of `context` cached tokens at 128 heads, as the step planner counts
// it: QK^T over 576 and PV over 512 dims per head and cached token (2 flops each), the 576-wide KV cache at
// `kv_bytes` per element, Q (576) and O (512) of every head in BF16.
AttentionWork mla_decode(double seqs, double context, double kv_bytes, Precision kv,
                         DecodeAttentionKernel kernel) {
  const double tokens = seqs * context;
  return {.bytes = tokens * 576 * kv_bytes + seqs * 128 * (576 + 512) * 2.0,
          .flops = tokens * 2 * 128 * (576 + 512),
          .is_prefill = false,
          .kv = kv,
          .kernel = kernel};
}

}  // namespace

// The trace's step: 1,024 sequences holding 2,088,960 tokens (the log's #token). Its kernel took 187.568 us
// (median of 244 launches); the catalog's 0.6204 of GB200's 5,000 TFLOP/s FP8 is that run rounded to four
// digits. Bytes: 2,088,960 x 576 + 1,024 x 128 x 1,088 x 2 = 1.4885 GB, 186.06 us at 8 TB/s: under the
// compute time, so the flops decide.
TEST_CASE("the trtllm-gen FP8 MLA decode costs the trace's flops at its measured rate") {
  const auto gb200 = make_gpu_cost_model(gpu_named("gb200"));
  const AttentionWork trace = mla_decode(1024, 2040, 1, Precision::kFP8, DecodeAttentionKernel::kTrtllmGen);
  const double flops = 2088960.0 * 2 * 128 * 1088;
  CHECK(trace.flops == Approx(581.834e9).epsilon(1e-6));
  CHECK(trace.bytes / 8e12 < flops / (0.6204 * 5000e12));
  CHECK(gb200->attention(trace).seconds() == Approx(flops / (0.6204 * 5000e12)).epsilon(1e-9));
  CHECK(gb200->attention(trace).seconds() == Approx(187.568e-6).epsilon(1e-4));
  // B200: the same fraction of its 4,500 TFLOP/s FP8 peak.
  const auto b200 = make_gpu_cost_model(gpu_named("b200"));
  CHECK(b200->attention(trace).seconds() == Approx(flops / (0.6204 * 4500e12)).epsilon(1e-9));
  // Few cached tokens per sequence: Q and O dominate the bytes, and the datasheet HBM rate decides.
  const AttentionWork short_ctx = mla_decode(1024, 16, 1, Precision::kFP8, DecodeAttentionKernel::kTrtllmGen);
  const double bytes = 1024.0 * 16 * 576 + 1024.0 * 128 * 1088 * 2;
  CHECK(gb200->attention(short_ctx).seconds() == Approx(bytes / 8e12).epsilon(1e-9));
  // The same work on the fitted kernel (CUTLASS MLA's BF16 rate, whose compute asymptote on GB200 is 703.1
  // TFLOP/s, B8): slower than its flops at that asymptote, over four times the trtllm-gen kernel.
  AttentionWork fitted = trace;
  fitted.kernel = DecodeAttentionKernel::kFitted;
  CHECK(gb200->attention(fitted).seconds() > flops / 703.1e12);
  CHECK(gb200->attention(fitted).seconds() > 4 * gb200->attention(trace).seconds());
}

// Without an FP8 KV cache, on Hopper (no trtllm-gen cubins: no figure in the catalog) and in prefill the
// engine's trtllm-gen choice costs exactly what the fit does.
TEST_CASE("the trtllm-gen choice leaves BF16 KV, prefill and Hopper on the fit") {
  for (const std::string gpu : {"gb200", "h200-sxm", "h100-sxm"}) {
    const auto model = make_gpu_cost_model(gpu_named(gpu));
    for (const auto& [kv, bytes] : {std::pair{Precision::kBF16, 2.0}, std::pair{Precision::kFP8, 1.0}}) {
      if (gpu == "gb200" && kv == Precision::kFP8) continue;
      const AttentionWork gen = mla_decode(256, 2050, bytes, kv, DecodeAttentionKernel::kTrtllmGen);
      AttentionWork fit = gen;
      fit.kernel = DecodeAttentionKernel::kFitted;
      CHECK(model->attention(gen).seconds() == model->attention(fit).seconds());
    }
    AttentionWork prefill{.bytes = 1e9, .flops = 1e15, .is_prefill = true, .kv = Precision::kFP8};
    const double fit_s = model->attention(prefill).seconds();
    prefill.kernel = DecodeAttentionKernel::kTrtllmGen;
    CHECK(model->attention(prefill).seconds() == fit_s);
  }
}

TEST_CASE(
    "engines choose their decode attention kernel and deployment.decode_attention_kernel overrides it") {
  CHECK(engine_profile(EngineKind::kTrtllm).decode_attention == DecodeAttentionKernel::kFitted);
  CHECK(engine_profile(EngineKind::kSglang).decode_attention == DecodeAttentionKernel::kTrtllmGen);
  CHECK(engine_profile(EngineKind::kVllm).decode_attention == DecodeAttentionKernel::kFitted);
  CHECK(engine_profile(EngineKind::kPytorchGraph).decode_attention == DecodeAttentionKernel::kFitted);
  const LoadedScenario set = load_scenario(
      kDefault, {"deployment.engine=\"sglang\"", "deployment.decode_attention_kernel=\"fitted\""});
  CHECK(set.spec.deployment.engine.decode_attention == DecodeAttentionKernel::kFitted);
  CHECK_THROWS_WITH(
      load_scenario(kDefault, {"deployment.decode_attention_kernel=\"flashmla\""}),
      Catch::Contains("deployment.decode_attention_kernel") && Catch::Contains("known: fitted, trtllm_gen"));
}

// A measured run whose bytes the datasheet HBM could not move in its time (at 0.6 of B200's 4,500 TFLOP/s,
// 100 GFLOP take 37 us; 1 TB at 8 TB/s take 125 ms) is refused, naming the key.
TEST_CASE("a trtllm-gen run faster than the datasheet HBM allows is one error naming its path") {
  CHECK_THROWS_WITH(
      load_scenario(kDefault,
                    {R"(cluster.gpu={"base": "b200", "measured": {"attention_decode_trtllm_gen_eff_fp8":
                                 {"value": 0.6, "source": "x", "at": {"gb": 1000, "gflop": 100}}}})"}),
      Catch::Contains("cluster.gpu.measured.attention_decode_trtllm_gen_eff_fp8") &&
          Catch::Contains("faster than the datasheet HBM"));
  CHECK_NOTHROW(load_scenario(
      kDefault, {R"(cluster.gpu={"base": "b200", "measured": {"attention_decode_trtllm_gen_eff_fp8":
                                 {"value": 0.6, "source": "x", "at": {"gb": 0.1, "gflop": 100}}}})"}));
}
