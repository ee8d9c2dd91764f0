// One cost model for every GPU: profiles derived from the H200 fit by datasheet ratios, and the property
// that the same deployment is never slower on an H200 than on an H100 (every reference scenario).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hwmodels/fabric.h"
#include "hwmodels/profile_cost_model.h"
#include "sim/scenario/profile_io.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/step/step_planner.h"
#include "workloads/expert_popularity.h"

namespace moesim {
namespace {

ScenarioSpec scenario_on(const std::string& file, const std::string& gpu) {
  return load_scenario(file, {"cluster.gpu=\"" + gpu + "\""}).spec;
}

// The H200 profile moved to `gpu`: every fit's memory term scaled by `memory`, its compute by `compute` of
// its precision (checked where that is set), its fixed cost kept.
void check_derived_from_h200(const std::string& gpu, double memory,
                             const std::function<std::optional<double>(Precision)>& compute) {
  const auto h200 = find_profile("h200-sxm");
  REQUIRE(h200.has_value());
  const ScenarioSpec a = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "h200-sxm");
  const ScenarioSpec b = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", gpu);
  const GpuProfile derived = derive_profile(*h200, a.cluster.gpu, b.cluster.gpu);
  REQUIRE(derived.fits.size() == h200->fits.size());
  for (std::size_t i = 0; i < derived.fits.size(); ++i) {
    const RooflineFit& r = h200->fits[i].params;
    const RooflineFit& d = derived.fits[i].params;
    CHECK(d.bytes_per_s == Approx(r.bytes_per_s * memory));
    if (const auto f = compute(h200->fits[i].precision)) CHECK(d.flops_per_s == Approx(r.flops_per_s * *f));
    CHECK(d.fixed_s == r.fixed_s);
  }
}

std::vector<std::string> reference_scenarios() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(MOESIM_SOURCE_DIR) /
                                                           "scenarios/reference")) {
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// One decode step (32 sequences per attention group at 2,000 cached tokens) and one prefill step (a
// 2,048-token chunk per group), same routing draws on both GPUs.
// The experts-in-the-loop mechanisms are left off (a co-activation model belongs to the simulation).
Duration step_cost(ScenarioSpec s, bool prefill) {
  s.experts = ExpertsSpec{};
  const auto gpu = make_gpu_cost_model(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity pop(s.workload.popularity, s.model.moe_layers(), s.model.routed_experts,
                             s.model.top_k, Rng(7));
  StepPlanner planner(s, *gpu, fabric, pop, Rng(11));
  GroupBatch b;
  if (prefill) {
    b.prefill_tokens = 2048;
    b.prefill_pairs = 2048.0 * 2049.0 / 2.0;
    b.prefill_kv_tokens = 2048;
    b.sampled_seqs = 1;
  } else {
    b.decode_seqs = 32;
    b.decode_context_tokens = 32.0 * 2000.0;
    b.sampled_seqs = 32;
  }
  const std::vector<GroupBatch> groups(static_cast<std::size_t>(s.deployment.attention_dp), b);
  return planner.plan(groups, Time{}).total;
}

// The error loading the default scenario with `gpu` as cluster.gpu gives ("" when it loads).
std::string gpu_error(const std::string& gpu) {
  try {
    (void)load_scenario(MOESIM_SOURCE_DIR "/scenarios/default.json", {"cluster.gpu=" + gpu});
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Rate a GEMM of m x n x k reaches, in FLOP/s. At 65536 x 16384 x 16384 the compute term is ~30x the
// memory term and ~5,000x the fixed cost, so the rate is the compute asymptote to 0.1%.
double large_gemm_rate(const GpuCostModel& model, Precision weights) {
  const GemmWork w{.m = 65536, .n = 16384, .k = 16384, .weights = weights};
  return 2.0 * 65536.0 * 16384.0 * 16384.0 / model.gemm(w).seconds();
}

}  // namespace

TEST_CASE("an H100 profile is the H200 fit with memory terms scaled by 3.35/4.8 and compute by 989/989") {
  check_derived_from_h200("h100-sxm", 3.35 / 4.8, [](Precision) { return std::optional<double>(1.0); });
  const ScenarioSpec b = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "h100-sxm");
  const auto model = make_gpu_cost_model(b.cluster.gpu);
  CHECK(model->source().find("profile hwmodels/profiles/h200-sxm.json scaled to h100-sxm") == 0);
}

TEST_CASE("Blackwell profiles apply the H200 fit's efficiencies to the Blackwell datasheet and say so") {
  const ScenarioSpec h200 = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "h200-sxm");
  const ScenarioSpec b200 = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "b200");
  const auto model = make_gpu_cost_model(b200.cluster.gpu);
  CHECK(model->source().find("efficiencies on the datasheet of b200") != std::string::npos);
  // A memory-bound GEMM: HBM bandwidth ratio 8 / 4.8 on the memory term, same fixed cost.
  const auto h = make_gpu_cost_model(h200.cluster.gpu);
  const GemmWork w{.m = 1, .n = 129280, .k = 7168};
  CHECK(model->gemm(w) < h->gemm(w));
  for (const char* gpu : {"h800-sxm", "h20", "gb200", "gb300"}) {
    INFO(gpu);
    const ScenarioSpec s = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", gpu);
    CHECK(make_gpu_cost_model(s.cluster.gpu)->source().find("profile") == 0);
  }
}

TEST_CASE(
    "the A100 profile is the H200 fit moved by the A100 datasheet: memory x 2.039/4.8, BF16 x 312/989") {
  const ScenarioSpec b = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "a100-sxm");
  CHECK(b.cluster.gpu.hbm_bytes == Approx(80e9));
  // No FP8 tensor cores: FP8 weights are costed at the BF16 rate (weight-only).
  CHECK(b.cluster.gpu.peak_flops(Precision::kFP8) == b.cluster.gpu.peak_flops(Precision::kBF16));
  check_derived_from_h200("a100-sxm", 2.039 / 4.8, [](Precision p) {
    return p == Precision::kBF16 ? std::optional<double>(312.0 / 989) : std::nullopt;
  });
  const auto model = make_gpu_cost_model(b.cluster.gpu);
  CHECK(model->source().find("efficiencies on the datasheet of a100-sxm") != std::string::npos);
}

// B200's catalog entry (scenarios/catalog/gpus.json `measured`): GEMM efficiencies 0.638 BF16, 0.566 FP8,
// 0.434 FP4 of its 2250 / 4500 / 9000 TFLOP/s datasheet (vLLM's SM100 GEMM benchmarks).
TEST_CASE("a B200 profile reaches its measured GEMM efficiency times its datasheet peak on a large GEMM") {
  const ScenarioSpec b200 = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "b200");
  const auto model = make_gpu_cost_model(b200.cluster.gpu);
  CHECK(large_gemm_rate(*model, Precision::kBF16) == Approx(0.638 * 2250e12).epsilon(1e-3));
  CHECK(large_gemm_rate(*model, Precision::kFP8) == Approx(0.566 * 4500e12).epsilon(1e-3));
  CHECK(large_gemm_rate(*model, Precision::kFP4) == Approx(0.434 * 9000e12).epsilon(1e-3));
  CHECK(model->source().find("measured on b200, not ratios: gemm_eff_bf16, gemm_eff_fp8, gemm_eff_fp4, "
                             "hbm_tb_per_s") != std::string::npos);
  // The H200 fit on its own datasheet, for contrast: the ratio path gave B200 the H200's 0.78 of BF16 peak.
  const ScenarioSpec h200 = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "h200-sxm");
  const double h200_eff = large_gemm_rate(*make_gpu_cost_model(h200.cluster.gpu), Precision::kBF16) / 989e12;
  CHECK(h200_eff > 0.7);
  CHECK(h200_eff < 0.8);
}

// Memory-bound kernels move by the measured copy bandwidths (B200 6.0 TB/s, the H200's own copy ceiling
// 4.221 TB/s, both counting read and write), not by the datasheets' 8 / 4.8.
TEST_CASE("a large memory-bound kernel on B200 is faster than on H200 by the measured copy bandwidths") {
  const ScenarioSpec b200 = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "b200");
  const ScenarioSpec h200 = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "h200-sxm");
  const auto b = make_gpu_cost_model(b200.cluster.gpu);
  const auto h = make_gpu_cost_model(h200.cluster.gpu);
  for (const MemoryKernel k : {MemoryKernel::kElementwise, MemoryKernel::kGather}) {
    // 64 GB: about 15 ms on H200, against fixed costs of 4-14 us (0.1%).
    const double ratio = b->memory_kernel(k, 64e9).seconds() / h->memory_kernel(k, 64e9).seconds();
    CHECK(ratio == Approx(4.221 / 6.0).epsilon(2e-3));
  }
}

// GB300 carries B200's measured efficiencies as fractions of its own peaks (2500 / 5000 TFLOP/s BF16 / FP8),
// except NVFP4: B200's measured 3904.3 TFLOP/s moved by the SM100 path's peak, 10000 / 9000, over GB300's
// 15000 (scenarios/catalog/gpus.json gb300.measured.gemm_eff_fp4 = 0.289).
TEST_CASE(
    "a GB300 profile reaches B200's measured GEMM efficiencies of its own peaks, NVFP4 at B200's rate") {
  const ScenarioSpec s = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "gb300");
  const auto model = make_gpu_cost_model(s.cluster.gpu);
  CHECK(large_gemm_rate(*model, Precision::kBF16) == Approx(0.638 * 2500e12).epsilon(1e-3));
  CHECK(large_gemm_rate(*model, Precision::kFP8) == Approx(0.566 * 5000e12).epsilon(1e-3));
  CHECK(large_gemm_rate(*model, Precision::kFP4) == Approx(3904.3e12 * 10000.0 / 9000.0).epsilon(2e-3));
  CHECK(model->source().find("measured on gb300, not ratios: gemm_eff_bf16, gemm_eff_fp8, gemm_eff_fp4, "
                             "hbm_tb_per_s") != std::string::npos);
}

// H20's grouped FP8 efficiency 0.870 of 296 TFLOP/s (SGLang's CUTLASS grouped GEMM): the grouped fit's
// compute asymptote; its memory term, fixed cost and sharpness are the H200 fit's moved by the datasheet
// HBM ratio 4.0 / 4.8 (no H20 bandwidth measurement), so the time follows the fit's formula with those.
TEST_CASE("an H20 grouped FP8 launch follows the H200 grouped fit with the measured H20 efficiency") {
  const auto h200 = find_profile("h200-sxm");
  REQUIRE(h200.has_value());
  const OperationFit* ref = h200->find_fit(CostOp::kGroupedExperts, Precision::kBF16);
  REQUIRE(ref != nullptr);
  const ScenarioSpec s = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "h20");
  const auto model = make_gpu_cost_model(s.cluster.gpu);
  const GroupedExpertsWork w{
      .experts = 32, .tokens = 65536, .hidden = 7168, .inter = 2048, .weights = Precision::kFP8};
  const double bytes = 32.0 * 3 * 7168 * 2048 * 1 + 2.0 * (2.0 * 65536 * 7168 + 3.0 * 65536 * 2048);
  const double t_mem = bytes / (ref->params.bytes_per_s * 4.0 / 4.8);
  const double t_compute = 6.0 * 65536 * 7168 * 2048 / (0.870 * 296e12);
  const double p = ref->params.sharpness;
  const double expected =
      ref->params.fixed_s + std::pow(std::pow(t_mem, p) + std::pow(t_compute, p), 1.0 / p);
  CHECK(model->grouped_experts(w).seconds() == Approx(expected).epsilon(1e-6));
}

// The H200 attention fit's time for `w` with its memory term moved by `memory` and compute at `flops_per_s`.
double h200_attention_s(const GpuProfile& h200, CostOp op, double bytes, double flops, double memory,
                        double flops_per_s) {
  const OperationFit* r = h200.find_fit(op, Precision::kBF16);
  REQUIRE(r != nullptr);
  const double t_mem = bytes / (r->params.bytes_per_s * memory);
  const double p = r->params.sharpness;
  return r->params.fixed_s + std::pow(std::pow(t_mem, p) + std::pow(flops / flops_per_s, p), 1.0 / p);
}

// B200's measured attention (catalog `measured`): sgl-kernel's CUTLASS MLA decode ran 256 x 8,192 tokens at
// 128 heads, 2.48722 GB and 584.116 GFLOP, at 0.2294 of the 2250 TFLOP/s BF16 peak: 584.116e9 / (0.2294 x
// 2250e12) = 1.1317 ms. The decode fit keeps the H200 fit's memory (x 6.0 / 4.221), fixed cost and sharpness
// and takes that run in that time; its compute rate is the one solving the fit's formula there. Prefill:
// FlashMLA's 1460 TFLOP/s, 0.649 of the peak, is the compute asymptote. GB200 applies them to its 2500.
TEST_CASE("a measured attention run takes its measured time in the derived fit, the H200 fit's shape kept") {
  const auto h200 = find_profile("h200-sxm");
  REQUIRE(h200.has_value());
  const OperationFit* hd = h200->find_fit(CostOp::kAttentionDecode, Precision::kBF16);
  REQUIRE(hd != nullptr);
  const double memory = 6.0 / 4.221;
  const AttentionWork run{.bytes = 2.48722e9, .flops = 584.116e9, .is_prefill = false};
  // DeepSeek-V3 decode of 512 sequences of 2,050 tokens: 1,152 bytes and 2 x 128 x 1,088 flops a token.
  const double pairs = 512.0 * 2050;
  const AttentionWork decode{.bytes = pairs * 1152, .flops = pairs * 2 * 128 * 1088, .is_prefill = false};
  // A causal 16K-token prefill at 128 heads of 192 / 128: 16384^2 / 2 pairs of 2 x 128 x 320 flops.
  const double causal = 16384.0 * 16384 / 2;
  const AttentionWork prefill{
      .bytes = 16384.0 * 128 * 448 * 2, .flops = causal * 2 * 128 * 320, .is_prefill = true};
  for (const auto& [gpu, peak] : {std::pair{"b200", 2250e12}, std::pair{"gb200", 2500e12}}) {
    const ScenarioSpec s = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", gpu);
    const auto model = make_gpu_cost_model(s.cluster.gpu);
    const double t_run = 584.116e9 / (0.2294 * peak);
    CHECK(model->attention(run).seconds() == Approx(t_run).epsilon(1e-6));
    // The rate from the fit's formula at the run: (t - fixed)^p = t_mem^p + (flops / rate)^p.
    const double p = hd->params.sharpness;
    const double t_mem = run.bytes / (hd->params.bytes_per_s * memory);
    const double rate =
        run.flops / std::pow(std::pow(t_run - hd->params.fixed_s, p) - std::pow(t_mem, p), 1.0 / p);
    CHECK(rate > 0.2294 * peak);  // the run was not purely compute-bound
    CHECK(model->attention(decode).seconds() ==
          Approx(h200_attention_s(*h200, CostOp::kAttentionDecode, decode.bytes, decode.flops, memory, rate))
              .epsilon(1e-6));
    CHECK(model->attention(prefill).seconds() ==
          Approx(h200_attention_s(*h200, CostOp::kAttentionPrefill, prefill.bytes, prefill.flops, memory,
                                  0.649 * peak))
              .epsilon(1e-6));
  }
}

// FP8 KV: no FP8 attention rate is in the catalog (SGLang's "up to 1.8x" is a bound,
// docs/validation/blackwell_sources.md B10), so the BF16 decode fit costs the halved bytes the caller counts.
// On a hand-set FP8 efficiency of 0.2 of B200's 4500 TFLOP/s FP8 peak (an asymptote: no `at`), QK^T and PV
// run at that rate; prefill keeps its BF16 fit, unscaled; H200 has no FP8 attention fit: its BF16 fit.
TEST_CASE("an FP8 KV cache runs decode attention on an FP8 fit only where one is measured") {
  const auto h200 = find_profile("h200-sxm");
  REQUIRE(h200.has_value());
  const OperationFit* hd = h200->find_fit(CostOp::kAttentionDecode, Precision::kBF16);
  REQUIRE(hd != nullptr);
  const double pairs = 512.0 * 2050;
  const AttentionWork bf16{.bytes = pairs * 1152, .flops = pairs * 2 * 128 * 1088, .is_prefill = false};
  const AttentionWork fp8{
      .bytes = pairs * 576, .flops = pairs * 2 * 128 * 1088, .is_prefill = false, .kv = Precision::kFP8};
  const AttentionWork prefill{.bytes = 1e9, .flops = 1e15, .is_prefill = true};
  AttentionWork prefill_fp8 = prefill;
  prefill_fp8.kv = Precision::kFP8;
  ScenarioSpec b200 = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "b200");
  const auto catalog_b200 = make_gpu_cost_model(b200.cluster.gpu);
  CHECK(catalog_b200->attention(fp8).seconds() < catalog_b200->attention(bf16).seconds());
  b200.cluster.gpu.measured.attention_decode_eff_fp8 = {.value = 0.2, .source = "hand-set for the test"};
  const auto b = make_gpu_cost_model(b200.cluster.gpu);
  CHECK(b->attention(fp8).seconds() == Approx(h200_attention_s(*h200, CostOp::kAttentionDecode, fp8.bytes,
                                                               fp8.flops, 6.0 / 4.221, 0.2 * 4500e12))
                                           .epsilon(1e-6));
  CHECK(b->attention(bf16).seconds() == Approx(catalog_b200->attention(bf16).seconds()).epsilon(1e-9));
  CHECK(b->attention(prefill_fp8).seconds() == Approx(b->attention(prefill).seconds()).epsilon(1e-9));
  // Compute-bound without memory: the fixed cost plus the flops at the measured rate.
  const AttentionWork flops_only{.bytes = 0, .flops = 1e12, .is_prefill = false, .kv = Precision::kFP8};
  CHECK(b->attention(flops_only).seconds() ==
        Approx(hd->params.fixed_s + 1e12 / (0.2 * 4500e12)).epsilon(1e-6));
  const ScenarioSpec h200_spec = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "h200-sxm");
  CHECK(make_gpu_cost_model(h200_spec.cluster.gpu)->attention(fp8).seconds() ==
        Approx(hd->params.seconds(fp8.bytes, fp8.flops)).epsilon(1e-6));
  // A run faster than the fit's memory time and fixed cost allows cannot be taken: one error naming it.
  b200.cluster.gpu.measured.attention_decode_eff = {
      .value = 0.5, .source = "hand-set", .at_bytes = 100e9, .at_flops = 1e12};
  CHECK_THROWS_WITH(
      derive_profile(*h200, h200_spec.cluster.gpu, b200.cluster.gpu),
      Catch::Contains("b200.measured.attention_decode_eff_bf16.at: the measured run is faster"));
}

// FP4 routed experts: Blackwell runs them on its FP4 tensor cores (rate relative to BF16 = 0.434 x 9000 /
// (0.638 x 2250) = 2.72 from the measured efficiencies); Hopper has none and dequantises them to BF16
// (rate 1), reading half the bytes of FP8.
TEST_CASE("FP4 experts run at the FP4 rate on Blackwell and weight-only at the BF16 rate on Hopper") {
  const auto h200 = find_profile("h200-sxm");
  REQUIRE(h200.has_value());
  const ScenarioSpec ref = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "h200-sxm");
  const ScenarioSpec b200 = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "b200");
  const ScenarioSpec h20 = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "h20");
  CHECK(derive_profile(*h200, ref.cluster.gpu, b200.cluster.gpu).rate_scale_of(Precision::kFP4) ==
        Approx(0.434 * 9000 / (0.638 * 2250)));
  CHECK(derive_profile(*h200, ref.cluster.gpu, h20.cluster.gpu).rate_scale_of(Precision::kFP4) == 1.0);
  auto grouped = [](const ScenarioSpec& s, Precision q, std::int64_t tokens) {
    const GroupedExpertsWork w{.experts = 32, .tokens = tokens, .hidden = 7168, .inter = 2048, .weights = q};
    return make_gpu_cost_model(s.cluster.gpu)->grouped_experts(w).seconds();
  };
  // Compute-bound (2,048 rows per expert): B200 FP4 beats FP8. H100 FP4 follows the H200 grouped fit at the
  // BF16 compute rate (989 / 989) with FP4's half-byte weights and the HBM ratio 3.35 / 4.8.
  CHECK(grouped(b200, Precision::kFP4, 65536) < 0.7 * grouped(b200, Precision::kFP8, 65536));
  const ScenarioSpec h100 = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "h100-sxm");
  const OperationFit* fit = h200->find_fit(CostOp::kGroupedExperts, Precision::kBF16);
  REQUIRE(fit != nullptr);
  const double bytes = 32.0 * 3 * 7168 * 2048 * 0.5 + 2.0 * (2.0 * 65536 * 7168 + 3.0 * 65536 * 2048);
  const double t_mem = bytes / (fit->params.bytes_per_s * 3.35 / 4.8);
  const double t_compute = 6.0 * 65536 * 7168 * 2048 / fit->params.flops_per_s;
  const double p = fit->params.sharpness;
  CHECK(grouped(h100, Precision::kFP4, 65536) ==
        Approx(fit->params.fixed_s + std::pow(std::pow(t_mem, p) + std::pow(t_compute, p), 1.0 / p))
            .epsilon(1e-6));
  CHECK(grouped(h100, Precision::kFP4, 65536) > grouped(h100, Precision::kFP8, 65536));
  // Memory-bound (one row per expert): FP4 reads half of FP8's weight bytes on either.
  CHECK(grouped(h100, Precision::kFP4, 32) < grouped(h100, Precision::kFP8, 32));
}

// No Blackwell launch cost is published yet; the mechanism, on a hand-set figure: a tiny kernel in a CUDA
// graph at 2.0 us against the H200's measured 1.163 us moves every fixed cost by +0.837 us.
TEST_CASE("a measured launch cost moves every fixed cost by its difference from the reference's") {
  const auto h200 = find_profile("h200-sxm");
  REQUIRE(h200.has_value());
  const ScenarioSpec ref = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "h200-sxm");
  ScenarioSpec b200 = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "b200");
  b200.cluster.gpu.measured.launch_s = {.value = 2.0e-6, .source = "hand-set for the test"};
  const GpuProfile derived = derive_profile(*h200, ref.cluster.gpu, b200.cluster.gpu);
  for (const OperationFit& f : derived.fits) {
    const OperationFit* r = h200->find_fit(f.op, f.precision, f.shape_a, f.shape_b);
    // B200's FP8 decode attention fit is its BF16 one at the measured FP8 rate: the BF16 fixed cost.
    if (r == nullptr) r = h200->find_fit(f.op, Precision::kBF16, f.shape_a, f.shape_b);
    REQUIRE(r != nullptr);
    CHECK(f.params.fixed_s == Approx(r->params.fixed_s + 0.837e-6).epsilon(1e-9));
  }
  CHECK(derived.origin.find("launch measured 2 us against 1.16 us") != std::string::npos);
  CHECK(derived.origin.find("measured.launch_us: hand-set for the test") != std::string::npos);
}

TEST_CASE("a measured figure that cannot hold is one error naming its catalog path") {
  CHECK(gpu_error(R"({"base": "b200", "measured": {"gemm_eff_fp8": {"value": 1.5, "source": "x"}}})")
            .find("cluster.gpu.measured.gemm_eff_fp8.value: must be at most 1") != std::string::npos);
  CHECK(gpu_error(R"({"base": "b200", "measured": {"hbm_tb_per_s": {"value": 9}}})")
            .find("cluster.gpu.measured.hbm_tb_per_s") != std::string::npos);
  CHECK(gpu_error(R"({"base": "b200", "measured": {"hbm_tb_per_s": {"value": 9, "source": "x"}}})")
            .find("cluster.gpu.measured.hbm_tb_per_s.value: must be at most 8") != std::string::npos);
  CHECK(gpu_error(R"({"base": "b200", "measured": {"gemm_eff_int8": {"value": 0.5, "source": "x"}}})")
            .find("cluster.gpu.measured") != std::string::npos);
  CHECK(gpu_error(R"({"base": "h20", "measured": {"gemm_eff_fp4": {"value": 0.5, "source": "x"}}})")
            .find("cluster.gpu.measured.gemm_eff_fp4: the GPU has no tensor cores for this format") !=
        std::string::npos);
  CHECK(
      gpu_error(
          R"({"base": "a100-sxm", "measured": {"attention_decode_eff_fp8": {"value": 0.2, "source": "x"}}})")
          .find("cluster.gpu.measured.attention_decode_eff_fp8: the GPU has no tensor cores") !=
      std::string::npos);
  CHECK(gpu_error(R"({"base": "b200", "measured": {"attention_decode_eff_bf16": {"value": 0.2, "source": "x",
                  "at": {"gb": 1}}}})")
            .find("cluster.gpu.measured.attention_decode_eff_bf16.at.gflop") != std::string::npos);
  CHECK(
      gpu_error(R"({"base": "b200", "measured": {"gemm_eff_bf16": {"value": 0.2, "source": "x", "at": {}}}})")
          .find("cluster.gpu.measured.gemm_eff_bf16") != std::string::npos);
  // A measured bandwidth needs the reference's own to be a ratio of like with like.
  const auto h200 = find_profile("h200-sxm");
  REQUIRE(h200.has_value());
  ScenarioSpec ref = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "h200-sxm");
  const ScenarioSpec b200 = scenario_on(MOESIM_SOURCE_DIR "/scenarios/default.json", "b200");
  ref.cluster.gpu.measured.hbm_bytes_per_s = {};
  CHECK_THROWS_WITH(derive_profile(*h200, ref.cluster.gpu, b200.cluster.gpu),
                    Catch::Contains("b200.measured.hbm_tb_per_s: needs the reference h200-sxm"));
}

TEST_CASE("the same deployment is never slower on an H200 than on an H100, for every reference scenario") {
  for (const std::string& file : reference_scenarios()) {
    INFO(file);
    const ScenarioSpec h200 = scenario_on(file, "h200-sxm");
    const ScenarioSpec h100 = scenario_on(file, "h100-sxm");
    for (const bool prefill : {false, true}) {
      CHECK(step_cost(h200, prefill) <= step_cost(h100, prefill));
    }
  }
}

}  // namespace moesim
