// Profile and measurement I/O, the choice between profile and roofline, and the committed H200 profile
// checked against the shared measurements it was fitted from.
#include "sim/scenario/profile_io.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "hwmodels/calibration_fit.h"
#include "hwmodels/engine_profile.h"
#include "hwmodels/layer_kernels.h"

namespace moesim {
namespace {

const std::filesystem::path kH200 = std::filesystem::path(MOESIM_SHARED_DIR) / "calibration" / "h200";

// Every file in the shared H200 directory, as `moesim calibrate --fit ../shared/calibration/h200/*.json`.
Measurements h200_measurements() {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(kH200)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return read_measurements(files);
}

FitOptions h200_options(const Measurements& m) {
  FitOptions opt;
  opt.prior_bytes_per_s = m.copy_bytes_per_s;
  opt.prior_flops_per_s = m.bf16_flops_per_s;
  opt.prior_rate_scale = m.rate_scale;
  return opt;
}

GpuProfile small_profile() {
  GpuProfile p;
  p.gpu = "test-gpu";
  p.origin = "line one\nline two";
  p.rate_scale = {{Precision::kFP8, 1.8}};
  p.fits.push_back({.op = CostOp::kGemm,
                    .precision = Precision::kBF16,
                    .shape_a = 0,
                    .shape_b = 0,
                    .params = {.fixed_s = 5e-6, .bytes_per_s = 4e12, .flops_per_s = 7.5e14, .sharpness = 3}});
  p.fits.push_back(
      {.op = CostOp::kExpertFfn,
       .precision = Precision::kFP8,
       .shape_a = 7168,
       .shape_b = 2048,
       .params = {.fixed_s = 1.2e-5, .bytes_per_s = 3.6e12, .flops_per_s = 1.2e15, .sharpness = 2.5}});
  CalibrationPoint pt;
  pt.op = CostOp::kGemm;
  pt.sweep = "gemm N=1 K=2";
  pt.label = "M=1";
  pt.shape_a = 1;
  pt.shape_b = 2;
  pt.bytes = 100;
  pt.flops = 4;
  pt.seconds = 7e-6;
  pt.parts_s = {3e-6, 4e-6};
  pt.is_anomaly = true;
  p.points.push_back(pt);
  return p;
}

std::string error_of(std::string_view json) {
  try {
    (void)parse_profile(json, "bad.json");
  } catch (const ProfileError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a profile survives a JSON round trip") {
  const GpuProfile a = small_profile();
  const GpuProfile b = parse_profile(profile_to_json(a), "round.json");
  CHECK(b.gpu == a.gpu);
  CHECK(b.origin == a.origin);
  REQUIRE(b.fits.size() == 2);
  CHECK(b.fits[1].op == CostOp::kExpertFfn);
  CHECK(b.fits[1].precision == Precision::kFP8);
  CHECK(b.fits[1].shape_a == 7168);
  CHECK(b.fits[1].params.fixed_s == Approx(1.2e-5));
  CHECK(b.fits[1].params.bytes_per_s == Approx(3.6e12));
  CHECK(b.fits[1].params.flops_per_s == Approx(1.2e15));
  CHECK(b.fits[1].params.sharpness == Approx(2.5));
  CHECK(b.rate_scale_of(Precision::kFP8) == Approx(1.8));
  REQUIRE(b.points.size() == 1);
  CHECK(b.points[0].seconds == Approx(7e-6));
  CHECK(b.points[0].parts_s.size() == 2);
  CHECK(b.points[0].is_anomaly);
  CHECK(b.points[0].shape_b == 2);
}

TEST_CASE("bad profile input names the file and the JSON path") {
  CHECK(error_of("{\"gpu\": \"x\", \"fits\": [], \"colour\": 1}").find("bad.json: colour: unknown key") == 0);
  CHECK(error_of("{\"gpu\": \"x\", \"fits\": [{\"op\": \"gemm\", \"precision\": \"bf16\", \"fixed_us\": 1, "
                 "\"mem_gb_per_s\": -4, \"compute_tflop_per_s\": 700, \"sharpness\": 3}]}")
            .find("bad.json: fits[0].mem_gb_per_s:") == 0);
  CHECK(error_of("{\"gpu\": \"x\", \"fits\": [{\"op\": \"gemv\"}]}").find("fits[0].op") != std::string::npos);
  CHECK(error_of("{\"fits\": []}").find("bad.json: gpu: missing") == 0);
  CHECK(error_of("{not json").find("bad.json: not valid JSON") == 0);
}

TEST_CASE("bad measurement files name the file and the place") {
  Measurements m;
  CHECK_THROWS_WITH(add_measurements(m, "{\"rows\": [{\"M\": 1, \"N\": 2}]}", "g.json"),
                    Catch::Contains("g.json: rows[0].K: missing"));
  CHECK_THROWS_WITH(add_measurements(m, "{\"hello\": 1}", "x.json"), Catch::Contains("x.json"));
  CHECK_THROWS_WITH(add_measurements(m,
                                     "kernel,precision,experts,tokens_per_expert,hidden,inter,median_us\n"
                                     "expert_ffn,bf16,8,x,7168,2048,10\n",
                                     "k.csv"),
                    Catch::Contains("k.csv:2:"));
}

TEST_CASE("a layer-op file (hwmodels/cuda/layer_ops_sweep.py) is read apart from the fitted points") {
  const std::string config =
      "\"config\": {\"hidden\": 4096, \"q_heads\": 32, \"kv_heads\": 8, \"head_dim\": 128, "
      "\"experts\": 8, \"top_k\": 2, \"expert_inter\": 14336}";
  Measurements m;
  add_measurements(m,
                   "{" + config +
                       ", \"ops\": [{\"B\": 4, \"L\": 512, \"op\": \"sdpa\", \"us\": 50.5, "
                       "\"kernels\": 3}], \"grouped_by_touched\": [{\"B\": 4, \"touched\": 5, \"us\": 700}]}",
                   "ops.json");
  CHECK(m.points.empty());
  REQUIRE(m.layer_ops.ops.size() == 1);
  CHECK(m.layer_ops.ops[0].op == "sdpa");
  CHECK(m.layer_ops.ops[0].seconds == Approx(50.5e-6));
  CHECK(m.layer_ops.ops[0].kernels == 3);
  REQUIRE(m.layer_ops.grouped.size() == 1);
  CHECK(m.layer_ops.grouped[0].touched == 5);
  CHECK(m.layer_ops.model.expert_inter == 14336);
  Measurements bad;
  CHECK_THROWS_WITH(add_measurements(bad,
                                     "{" + config +
                                         ", \"ops\": [{\"B\": 4, \"L\": 512, \"op\": \"sdpa\", "
                                         "\"us\": 50, \"kernels\": 1.5}], \"grouped_by_touched\": []}",
                                     "ops.json"),
                    Catch::Contains("ops.json: ops[0].kernels: is not a count"));
}

TEST_CASE("harness CSV rows become per-expert points") {
  Measurements m;
  add_measurements(m,
                   "kernel,precision,experts,tokens_per_expert,hidden,inter,median_us,min_us,max_us,repeats\n"
                   "expert_ffn,fp8,8,64,7168,2048,400,390,410,20\n"
                   "permute,bf16,8,64,7168,0,12,11,13,20\n",
                   "k.csv");
  REQUIRE(m.points.size() == 2);
  const BytesFlops bf = work_bytes_flops(
      ExpertFfnWork{.tokens = 64, .hidden = 7168, .inter = 2048, .weights = Precision::kFP8});
  CHECK(m.points[0].op == CostOp::kExpertFfn);
  CHECK(m.points[0].precision == Precision::kFP8);
  CHECK(m.points[0].seconds == Approx(400e-6 / 8));
  CHECK(m.points[0].bytes == Approx(bf.bytes));
  CHECK(m.points[1].op == CostOp::kPermute);
  CHECK(m.points[1].bytes == Approx(2.0 * 2.0 * 8 * 64 * 7168));
}

TEST_CASE("the shared H200 files are read with the work conventions of the cost model") {
  const Measurements m = h200_measurements();
  CHECK(m.copy_bytes_per_s == Approx(4221.015067812228e9));
  CHECK(m.rate_scale.size() == 1);
  const auto gemm = std::find_if(m.points.begin(), m.points.end(),
                                 [](const CalibrationPoint& p) { return p.op == CostOp::kGemm; });
  REQUIRE(gemm != m.points.end());
  CHECK(gemm->sweep == "gemm N=4096 K=7168");
  CHECK(gemm->flops == Approx(2.0 * 1 * 4096 * 7168));
  // Two BF16 shapes and one FP8 shape of 14 token counts each.
  CHECK(std::count_if(m.points.begin(), m.points.end(),
                      [](const CalibrationPoint& p) { return p.op == CostOp::kExpertFfn; }) == 42);
  CHECK(std::count_if(m.points.begin(), m.points.end(), [](const CalibrationPoint& p) {
          return p.op == CostOp::kExpertFfn && p.precision == Precision::kFP8;
        }) == 14);
}

TEST_CASE(
    "every shared H200 file is read: the MoE layer both ways, permute, FP8 experts, whole-model steps") {
  const Measurements m = h200_measurements();
  auto count = [&](CostOp op) {
    return std::count_if(m.points.begin(), m.points.end(),
                         [&](const CalibrationPoint& p) { return p.op == op; });
  };
  CHECK(count(CostOp::kGroupedExperts) == 10);
  CHECK(count(CostOp::kExpertLoop) == 10);
  CHECK(count(CostOp::kPermute) == 3);
  CHECK(count(CostOp::kUnpermute) == 3);
  CHECK(m.steps.size() == 20);  // 16 decode, 4 prefill
  CHECK(m.step_model.experts == 8);
  CHECK(m.step_model.top_k == 2);
  // A grouped point carries its count vector; its work is the touched experts' weights and every pair.
  const auto g = std::find_if(m.points.begin(), m.points.end(),
                              [](const CalibrationPoint& p) { return p.op == CostOp::kGroupedExperts; });
  REQUIRE(g != m.points.end());
  REQUIRE(g->counts.size() == 32);
  std::int64_t pairs = 0;
  std::int64_t touched = 0;
  for (const auto c : g->counts) {
    pairs += c;
    touched += c > 0 ? 1 : 0;
  }
  CHECK(g->flops == Approx(6.0 * double(pairs) * 7168 * 2048));
  // The touched experts' weights are counted stretched by the grouped kernel's SM under-fill at these counts
  // (hwmodels/grouped_gemm_tiles.h). This point (uniform, T=8): 3 experts of one row on 132 SMs, 64x128
  // tiles, 2 M tiles each (cluster): up N=4096 -> 3 x 2 x 32 = 192 tiles in 2 waves (264 slots), down
  // N=7168 -> 3 x 2 x 56 = 336 tiles in 3 waves (396 slots); weighted 2:1 by weight bytes.
  REQUIRE(touched == 3);
  REQUIRE(pairs == 3);
  const double stretch = (2.0 * 264.0 / 192.0 + 396.0 / 336.0) / 3.0;
  CHECK(g->bytes == Approx(stretch * double(touched) * 3 * 7168 * 2048 * 2 +
                           2.0 * (2.0 * double(pairs) * 7168 + 3.0 * double(pairs) * 2048)));
}

TEST_CASE(
    "the committed H200 profile reproduces the shared measurements: median <= 5%, max <= 15% per sweep") {
  const auto profile = find_profile("h200-sxm");
  REQUIRE(profile.has_value());
  Measurements m = h200_measurements();
  flag_anomalies(m.points, FitOptions{}.anomaly_tolerance);
  const auto rows = residual_report(*profile, m.points);
  // 2 BF16 + 1 FP8 expert shapes, 7 GEMM shapes, decode, prefill, grouped and loop x 2 laws, permute,
  // unpermute.
  REQUIRE(rows.size() == 18);
  int anomalies = 0;
  for (const auto& r : rows) {
    INFO(r.sweep);
    CHECK(r.median_rel_error <= 0.05);
    CHECK(r.max_rel_error <= 0.15);
    anomalies += r.anomalies;
  }
  // Library heuristics that pick a slow kernel (CALIBRATION.md lists them: 3 BF16, and FP8 below 32 rows
  // slower than at 32); more would mean a wrong rule.
  CHECK(anomalies <= 8);
}

TEST_CASE("the committed H200 profile is what the fitter makes of the shared measurements") {
  const auto committed = find_profile("h200-sxm");
  REQUIRE(committed.has_value());
  Measurements m = h200_measurements();
  const FitOptions opt = h200_options(m);
  flag_anomalies(m.points, opt.anomaly_tolerance);
  auto fits = fit_all(m.points, opt);
  // The small-kernel fixed cost is platform.json's tiny kernel in a CUDA graph, not a fit.
  const OperationFit* c_small = committed->find_fit(CostOp::kSmallKernel, Precision::kBF16);
  REQUIRE(c_small != nullptr);
  CHECK(m.graph_launch_s > 0);
  CHECK(c_small->params.fixed_s == Approx(m.graph_launch_s).epsilon(1e-9));
  REQUIRE(fits.size() + 1 == committed->fits.size());
  for (const auto& f : fits) {
    const OperationFit* c = committed->find_fit(f.op, f.precision, f.shape_a, f.shape_b);
    REQUIRE(c != nullptr);
    CHECK(c->shape_a == f.shape_a);
    CHECK(f.params.fixed_s == Approx(c->params.fixed_s).epsilon(1e-3));
    CHECK(f.params.bytes_per_s == Approx(c->params.bytes_per_s).epsilon(1e-3));
    CHECK(f.params.flops_per_s == Approx(c->params.flops_per_s).epsilon(1e-3));
  }
}

TEST_CASE("leaving one expert or GEMM shape out, the rest predict it within 10% median") {
  Measurements m = h200_measurements();
  const FitOptions opt = h200_options(m);
  flag_anomalies(m.points, opt.anomaly_tolerance);
  for (const char* sweep :
       {"expert_ffn deepseek_v3 H=7168 I=2048", "expert_ffn mixtral_8x7b H=4096 I=14336",
        "gemm N=4096 K=7168", "gemm N=7168 K=2048", "gemm N=1536 K=7168", "gemm N=24576 K=1536",
        "gemm N=7168 K=16384", "gemm N=2048 K=2048", "gemm N=129280 K=7168",
        "grouped_experts H=7168 I=2048 E=32 uniform", "grouped_experts H=7168 I=2048 E=32 zipf80_20"}) {
    INFO(sweep);
    CHECK(leave_one_out(m.points, sweep, opt).median_rel_error <= 0.10);
  }
}

namespace {
// The composed Mixtral-8x7B steps' relative errors (decode sorted, prefill as listed) under the committed
// profile: held-out steps, since nothing of the profile is fitted on them.
struct StepErrors {
  std::vector<double> decode;
  std::vector<double> prefill;
};
StepErrors mixtral_step_errors() {
  const auto profile = find_profile("h200-sxm");
  REQUIRE(profile.has_value());
  const Measurements m = h200_measurements();
  GpuSpec fallback;
  fallback.name = "h200-sxm";
  const ProfileCostModel model(*profile, fallback, "h200");
  const EngineProfile engine = engine_profile(EngineKind::kPytorchGraph);
  StepErrors out;
  for (const auto& s : m.steps) {
    const double e = std::abs(
        compose_step(model, m.step_model, engine, s.step, m.step_l2_bytes).seconds() / s.seconds - 1);
    (s.step.is_prefill ? out.prefill : out.decode).push_back(e);
  }
  std::sort(out.decode.begin(), out.decode.end());
  return out;
}
}  // namespace

TEST_CASE("the committed H200 profile composes the held-out Mixtral-8x7B steps: every step within 15%") {
  // The bound on held-out steps, max within 15%; the small-kernel cost is platform.json's.
  const StepErrors e = mixtral_step_errors();
  REQUIRE(e.decode.size() == 16);
  REQUIRE(e.prefill.size() == 4);
  for (const double x : e.decode) CHECK(x <= 0.15);
  for (const double x : e.prefill) CHECK(x <= 0.15);
}

TEST_CASE("the held-out Mixtral-8x7B decode steps: median within 5%, the held-out target, not met yet",
          "[!shouldfail]") {
  // VALIDATION.md, "What the fitted constant stood for": a residual per layer that no measured kernel
  // shows (47 us at B=1, ~100 at B=4 and 16) leaves the decode steps too fast; none of the four mechanisms
  // tested there carries its shape. This test starts passing when it is found.
  const StepErrors e = mixtral_step_errors();
  REQUIRE(e.decode.size() == 16);
  CHECK(0.5 * (e.decode[7] + e.decode[8]) <= 0.05);
}

TEST_CASE("a grouped launch beats the loop of single-expert kernels where the fixed costs dominate") {
  const auto profile = find_profile("h200-sxm");
  REQUIRE(profile.has_value());
  GpuSpec fallback;
  fallback.name = "h200-sxm";
  const ProfileCostModel model(*profile, fallback, "h200");
  // 128 small experts (H=2048, I=768) with 4 tokens each: one fixed cost against 128 of them.
  const Duration grouped =
      model.grouped_experts({.experts = 128, .tokens = 512, .hidden = 2048, .inter = 768});
  Duration loop = Duration::zero();
  for (int e = 0; e < 128; ++e)
    loop += model.expert_ffn({.tokens = 4, .hidden = 2048, .inter = 768, .in_loop = true});
  CHECK(grouped < loop.scaled(0.5));
  // The loop's kernels overlap their launches: cheaper than the same kernels timed alone.
  CHECK(model.expert_ffn({.tokens = 4, .hidden = 2048, .inter = 768, .in_loop = true}) <
        model.expert_ffn({.tokens = 4, .hidden = 2048, .inter = 768}));
}

TEST_CASE("a GPU with an embedded profile gets the profile model, others the roofline") {
  GpuSpec h200;
  h200.name = "h200-sxm";
  h200.hbm_bytes_per_s = 4.8e12;
  h200.bf16_flops_per_s = 989e12;
  CHECK(make_gpu_cost_model(h200)->source().find("profile hwmodels/profiles/h200-sxm.json") == 0);
  GpuSpec other = h200;
  other.name = "no-such-gpu";
  CHECK(make_gpu_cost_model(other)->source().find("roofline") == 0);
  CHECK_FALSE(find_profile("no-such-gpu").has_value());
  CHECK(find_profile("H200 SXM").has_value());
}

TEST_CASE("the H200 profile costs a memory-bound DeepSeek-V3 expert near its measured 35 us") {
  GpuSpec h200;
  h200.name = "h200-sxm";
  const auto model = make_gpu_cost_model(h200);
  const ExpertFfnWork w{.tokens = 1, .hidden = 7168, .inter = 2048, .weights = Precision::kBF16};
  // shared/calibration/h200/README.md: 88 MB of expert weights in ~35 us.
  CHECK(model->expert_ffn(w).us() == Approx(35.0).epsilon(0.1));
  ExpertFfnWork fp8 = w;
  fp8.weights = Precision::kFP8;
  CHECK(model->expert_ffn(fp8) < model->expert_ffn(w));
}

}  // namespace moesim
