// Two-micro-batch overlap: per layer, the two halves' communication runs while the other half computes.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/engine/random.h"
#include "sim/scenario/profile_io.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/step/micro_batch_split.h"
#include "sim/serving/step/serving_models.h"
#include "sim/serving/step/step_planner.h"

using namespace moesim;

namespace {
// 4 GPUs on 2 nodes, 8 experts of which every token picks all 8: every layer sees identical counts, so a
// layer's compute and communication are the same in every layer.
ScenarioSpec spec(bool overlap) {
  Json j = Json::parse(R"({
    "model": {"num_layers": 4, "hidden": 4096, "vocab": 1000, "attention": "gqa", "num_heads": 32,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 8, "top_k": 8, "expert_inter": 1024},
    "cluster": {"gpu": "h100-sxm", "nodes": 2, "gpus_per_node": 2},
    "deployment": {"ep_size": 4, "max_batched_tokens": 8192},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 8}, "output_tokens": {"kind": "fixed", "tokens": 8}},
    "run": {"requests": 1}})");
  j["deployment"]["two_batch_overlap"] = overlap;
  return parse_scenario(j, "").spec;
}

std::vector<GroupBatch> decode(std::int64_t seqs) {
  GroupBatch b;
  b.decode_seqs = seqs;
  b.decode_context_tokens = static_cast<double>(seqs) * 512;
  b.sampled_seqs = seqs;
  return std::vector<GroupBatch>(4, b);
}

StepPlan plan(bool overlap, std::int64_t seqs) {
  const ScenarioSpec s = spec(overlap);
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity pop(PopularitySpec{}, s.model.moe_layers(), 8, 8, Rng(1));
  StepPlanner planner(s, gpu, fabric, pop, Rng(2));
  return planner.plan(decode(seqs), Time{});
}
}  // namespace

TEST_CASE("without overlap nothing is hidden and the step is the sum of its parts") {
  const StepPlan p = plan(false, 256);
  REQUIRE(p.comm_hidden == Duration::zero());
  REQUIRE(p.total == p.part(StepPart::kAttention) + p.part(StepPart::kLayerKernels) +
                         p.part(StepPart::kDenseFfn) + p.part(StepPart::kExperts) +
                         p.part(StepPart::kDispatch) + p.part(StepPart::kCombine) +
                         p.part(StepPart::kLmHead));
}

TEST_CASE("one overlapped layer by hand: four stages, compute slowed by the SMs communication holds") {
  // Micro-batch A (the larger half) and B; times in microseconds: attention P, dispatch D, experts E,
  // combine M. DeepEP normal kernels hold 24 of the 132 SMs of an H800 while they run.
  const auto us = [](double x) { return Duration::from_us(x); };
  const double held = 24.0 / 132.0;
  const double pa = 120, pb = 100, da = 90, db = 75, ea = 140, eb = 110, ma = 160, mb = 130;
  // Stage by stage: (P_B beside D_A), (E_A beside D_B), (E_B beside M_A), (next P_A beside M_B); each
  // lasts max(comm, work + comm x 24/132).
  const auto stage = [&](double w, double c) { return std::max(c, w + c * held); };
  const double s1 = stage(pb, da), s2 = stage(ea, db), s3 = stage(eb, ma), s4 = stage(pa, mb);
  CHECK(s1 == Approx(100 + 90 * held));  // compute-bound: slowed by the held SMs
  CHECK(s3 == Approx(160));              // 110 + 160 x 24/132 = 139.1 < 160: communication-bound
  const double layer = s1 + s2 + s3 + s4;
  double exposed = 0;
  double hidden = 0;
  double got = 0;
  for (const auto& [w, c] : {std::pair{pb, da}, std::pair{ea, db}, std::pair{eb, ma}, std::pair{pa, mb}}) {
    const OverlapStage o = overlap_stage(us(w), us(c), held);
    CHECK(o.time.us() == Approx(stage(w, c)).epsilon(1e-6));
    CHECK(o.exposed + o.hidden == us(c));
    exposed += o.exposed.us();
    hidden += o.hidden.us();
    got += o.time.us();
  }
  CHECK(got == Approx(layer).epsilon(1e-6));
  // The parts add up: compute at full speed plus exposed communication.
  CHECK(pa + pb + ea + eb + exposed == Approx(layer).epsilon(1e-6));
  CHECK(hidden == Approx(da + db + ma + mb - exposed).epsilon(1e-6));
  // Above the perfect-overlap bound max(compute, communication) = max(470, 455) = 470.
  CHECK(layer > std::max(pa + pb + ea + eb, da + db + ma + mb));
  // Without held SMs (low-latency kernels with the receive hook) only the stage imbalance remains.
  const double free_layer = std::max(da, pb) + std::max(db, ea) + std::max(ma, eb) + std::max(mb, pa);
  double got_free = 0;
  for (const auto& [w, c] : {std::pair{pb, da}, std::pair{ea, db}, std::pair{eb, ma}, std::pair{pa, mb}})
    got_free += overlap_stage(us(w), us(c), 0.0).time.us();
  CHECK(got_free == Approx(free_layer).epsilon(1e-6));
  CHECK(free_layer < layer);
}

TEST_CASE("one overlapped layer by hand under an SM partition: compute on the SMs communication leaves") {
  // DeepEP normal kernels as DeepSeek's prefill profile runs them: computation on 108 SMs, communication on
  // 24, for the whole overlapped schedule. The SM-bound work (attention, experts) runs at 108/132 of its
  // speed whether or not communication runs beside it; the memory-bound small kernels at their own.
  const auto us = [](double x) { return Duration::from_us(x); };
  const double held = 24.0 / 132.0;
  // Work W, small kernels K and communication C of each stage, microseconds.
  struct Stage {
    double w, k, c;
  };
  const Stage stages[] = {{100, 20, 90}, {140, 10, 75}, {110, 10, 200}, {120, 20, 20}};
  double layer = 0;
  for (const Stage& st : stages) {
    const OverlapStage o = partitioned_stage(us(st.w), us(st.k), us(st.c), held);
    const double t = std::max(st.c, st.w * 132.0 / 108.0 + st.k);
    CHECK(o.time.us() == Approx(t).epsilon(1e-6));
    CHECK(o.exposed.us() == Approx(t - st.w - st.k).epsilon(1e-6));
    CHECK(o.contention.us() == Approx(t - std::max(st.c, st.w + st.k)).epsilon(1e-6));
    layer += t;
  }
  // Stage 1: 100 x 132/108 + 20 = 142.2 > 90: compute-bound, 22.2 us lost to the partition; the phase
  // model (SMs held only while communication runs) loses 90 x 24/132 = 16.4 us.
  CHECK(partitioned_stage(us(100), us(20), us(90), held).time.us() == Approx(100 * 132.0 / 108 + 20));
  CHECK(overlap_stage(us(120), us(90), held).time.us() == Approx(120 + 90 * held));
  // Stage 3: communication-bound, the partition costs nothing: 200 us, everything hidden but 80 us.
  const OverlapStage s3 = partitioned_stage(us(110), us(10), us(200), held);
  CHECK(s3.time.us() == Approx(200));
  CHECK(s3.hidden.us() == Approx(120));
  CHECK(s3.contention == Duration::zero());
  // Stage 4: 20 us of communication beside 120 x 132/108 + 20 = 166.7 us: the partition costs 26.7 us,
  // more than the communication itself; nothing is counted hidden below zero.
  const OverlapStage s4 = partitioned_stage(us(120), us(20), us(20), held);
  CHECK(s4.exposed.us() == Approx(120 * 132.0 / 108 - 120));
  CHECK(s4.hidden == Duration::zero());
  CHECK(layer == Approx(142.22222 + 181.11111 + 200 + 166.66667).epsilon(1e-6));
  // No SMs held: the plain overlap max(comm, work + small kernels); every SM held: no overlap at all.
  CHECK(partitioned_stage(us(100), us(20), us(90), 0.0).time.us() == Approx(120));
  CHECK(partitioned_stage(us(100), us(20), us(90), 1.0).time.us() == Approx(210));
}

TEST_CASE("normal kernels partition the SMs for the whole layer, low-latency kernels only while they run") {
  // Prefill of 2,048 tokens per group. Under the partition every stage lasts at least its SM-bound work at
  // 108/132 of the SMs plus its small kernels, so the MoE layers take at least (attention + experts) x
  // 132/108 + small kernels (the test model has no dense layers; the LM head is its own part).
  std::vector<GroupBatch> groups(4);
  for (GroupBatch& b : groups) {
    b.prefill_tokens = 2048;
    b.prefill_pairs = 4 * 512.0 * 513 / 2;
    b.prefill_kv_tokens = 2048;
    b.sampled_seqs = 4;
  }
  const auto step = [&](const char* mode) {
    ScenarioSpec s = spec(true);
    s.deployment.all_to_all_mode =
        std::string(mode) == "ll" ? AllToAllMode::kLowLatency : AllToAllMode::kHighThroughput;
    s.deployment.comm_sms = 24;  // the same SM count in both modes (H100: 132 SMs)
    const RooflineCostModel gpu(s.cluster.gpu);
    const Fabric fabric(s.cluster.fabric);
    const ExpertPopularity pop(PopularitySpec{}, s.model.moe_layers(), 8, 8, Rng(1));
    StepPlanner planner(s, gpu, fabric, pop, Rng(2));
    return planner.plan(groups, Time{});
  };
  const StepPlan ht = step("ht");
  const StepPlan ll = step("ll");
  REQUIRE(spec(true).cluster.gpu.sms == 132);
  const auto bound = [](const StepPlan& p) {
    return (p.part(StepPart::kAttention) + p.part(StepPart::kExperts)).seconds() * 132.0 / 108.0 +
           p.part(StepPart::kLayerKernels).seconds();
  };
  const double ht_moe = (ht.total - ht.part(StepPart::kLmHead)).seconds();
  CHECK(ht_moe >= bound(ht) * (1 - 1e-9));
  // The same compute: the modes differ in communication only.
  CHECK(ht.part(StepPart::kExperts) == ll.part(StepPart::kExperts));
  CHECK(ht.part(StepPart::kAttention) == ll.part(StepPart::kAttention));
  // The partition's cost is reported as SM contention, within the exposed communication.
  REQUIRE(ht.comm_sm_contention > Duration::zero());
  REQUIRE(ht.comm_sm_contention <= ht.part(StepPart::kDispatch) + ht.part(StepPart::kCombine));
}

TEST_CASE("with overlap the step's parts add up and the gain stays below the perfect-overlap bound") {
  const StepPlan p = plan(true, 256);
  // The small kernels are their own part: those before dispatch and those beside the experts.
  const Duration compute =
      p.part(StepPart::kAttention) + p.part(StepPart::kExperts) + p.part(StepPart::kLayerKernels);
  const Duration exposed = p.part(StepPart::kDispatch) + p.part(StepPart::kCombine);
  const Duration comm = exposed + p.comm_hidden;  // issued
  REQUIRE(p.comm_hidden > Duration::zero());
  REQUIRE(p.part(StepPart::kLayerKernels) > Duration::zero());
  REQUIRE(p.total == compute + exposed + p.part(StepPart::kDenseFfn) + p.part(StepPart::kLmHead));
  // Perfect overlap would take max(compute, comm) per layer; SM sharing and unequal stages cost more.
  REQUIRE(p.total > max(compute, comm) + p.part(StepPart::kDenseFfn) + p.part(StepPart::kLmHead));
  REQUIRE(p.comm_sm_contention > Duration::zero());
  REQUIRE(p.comm_sm_contention <= exposed);
}

TEST_CASE(
    "under overlap each micro-batch's small kernels are their own part, the unpermute beside its experts") {
  // 256 sequences per group: micro-batches of T = 128 tokens, 1,024 (token, expert) pairs. The default
  // engine (vllm, BF16) launches per micro-batch and layer, before dispatch: 2 fused add+RMSNorms (x and
  // residual read and written, 4 [T, H] BF16 matrices each), the KV write (2 x T x 8 KV heads x 128 x 2 B),
  // rotary ((32 + 8) x 128 columns read and written), topk_softmax (T x 8 logits of 4 B, 8 B a pair) and
  // the align (16 B a pair); beside its experts the gather-sum of 8 BF16 rows a token into [T, H].
  const ScenarioSpec s = spec(true);
  const GpuSpec& g = s.cluster.gpu;  // H100: 3.35 TB/s at 0.75 of it, 2 us a launch
  const auto kernel = [&](double bytes, int launches) {
    return launches * g.kernel_overhead.seconds() + bytes / (g.hbm_bytes_per_s * g.mem_efficiency);
  };
  const double t = 128;
  const double pairs = t * 8;
  const double act = t * 4096 * 2;
  const double before = 2 * kernel(4 * act, 1) + kernel(2 * t * 8 * 128 * 2.0 * 2, 1) +
                        kernel(t * 40 * 128 * 4.0, 1) + kernel(t * 8 * 4.0 + pairs * 8, 1) +
                        kernel(pairs * 16, 1);
  const double beside = kernel(pairs * 4096 * 2.0 + act, 1);
  const StepPlan p = plan(true, 256);
  // 4 MoE layers, two equal micro-batches.
  CHECK(p.part(StepPart::kLayerKernels).seconds() == Approx(4 * 2 * (before + beside)).epsilon(1e-6));
  // Without overlap the whole batch's kernels, once a layer: the same kinds at twice the tokens.
  const double whole = 2 * kernel(8 * act, 1) + kernel(2 * 2 * t * 8 * 128 * 2.0 * 2, 1) +
                       kernel(2 * t * 40 * 128 * 4.0, 1) + kernel(2 * (t * 8 * 4.0 + pairs * 8), 1) +
                       kernel(2 * pairs * 16, 1) + kernel(2 * (pairs * 4096 * 2.0 + act), 1);
  CHECK(plan(false, 256).part(StepPart::kLayerKernels).seconds() == Approx(4 * whole).epsilon(1e-6));
}

TEST_CASE("odd sequence counts make unequal micro-batches") {
  // 3 sequences per group: A takes 2, B 1. A's experts see twice B's tokens, so the step costs more than
  // with 4 sequences split 2 + 2 minus one sequence's share would suggest; B still runs its own kernels.
  const StepPlan odd = plan(true, 3);
  const StepPlan even = plan(true, 4);
  REQUIRE(odd.total < even.total);
  REQUIRE(odd.part(StepPart::kExperts) > plan(false, 3).part(StepPart::kExperts));
}

TEST_CASE("overlap pays off when a large batch crosses nodes and costs compute efficiency at a small one") {
  const StepPlan off_large = plan(false, 1024);
  const StepPlan on_large = plan(true, 1024);
  REQUIRE(on_large.comm_hidden > Duration::zero());
  REQUIRE(on_large.total < off_large.total);
  // Halves read every expert's weights twice: the expert FFN time of the two halves is never less than
  // that of the whole batch.
  REQUIRE(on_large.part(StepPart::kExperts) >= off_large.part(StepPart::kExperts));
  const StepPlan off_small = plan(false, 2);
  const StepPlan on_small = plan(true, 2);
  REQUIRE(on_small.part(StepPart::kExperts) > off_small.part(StepPart::kExperts));
  // One sequence per group: micro-batch B is empty and the experts cost what the whole batch costs.
  REQUIRE(plan(true, 1).part(StepPart::kExperts) == plan(false, 1).part(StepPart::kExperts));
}

TEST_CASE("a run's report gives hidden and exposed communication and the SM contention within the exposed") {
  const auto run = [](const char* overlap, const char* sms) {
    const LoadedScenario sc =
        load_scenario(std::string(MOESIM_SOURCE_DIR) + "/scenarios/tiny/tiny_poisson_ep4.json",
                      {std::string("deployment.two_batch_overlap=") + overlap, sms});
    const RooflineCostModel gpu(sc.spec.cluster.gpu);
    return simulate(sc.spec, gpu);
  };
  const Report off = run("false", "run.seed=1");
  const Report on = run("true", "deployment.comm_sms=24");
  CHECK(off.comm_hidden_share == 0.0);
  CHECK(off.comm_sm_contention_share == 0.0);
  REQUIRE(on.comm_hidden_share > 0.0);
  REQUIRE(on.all_to_all_share() > 0.0);  // the exposed rest
  REQUIRE(on.comm_sm_contention_share > 0.0);
  REQUIRE(on.comm_sm_contention_share <= on.all_to_all_share());
  double parts = 0;
  for (const double x : on.part_share) parts += x;
  REQUIRE(parts == Approx(1.0));
  // No SMs held (low-latency kernels with the receive hook): nothing is lost to contention.
  REQUIRE(run("true", "deployment.comm_sms=0").comm_sm_contention_share == 0.0);
}

namespace {
// The overlap gain of one deployment at one batch per GPU: tokens/s with two-batch overlap over tokens/s
// without, from the step planner with the calibrated GPU profile (as `moesim plan` costs its rows).
struct OverlapRow {
  double off_ms = 0;
  double on_ms = 0;
};

OverlapRow overlap_gain(const std::string& scenario, std::vector<std::string> set, const GroupBatch& b) {
  OverlapRow row;
  for (const bool on : {false, true}) {
    std::vector<std::string> s = set;
    s.push_back(std::string("deployment.two_batch_overlap=") + (on ? "true" : "false"));
    const LoadedScenario sc = load_scenario(std::string(MOESIM_SOURCE_DIR) + "/" + scenario, s);
    const auto gpu = make_gpu_cost_model(sc.spec.cluster.gpu);
    const RandomStreams streams(sc.spec.run.seed);
    const ServingModels models(sc.spec, streams);
    auto planner = models.make_standalone(*gpu, streams.stream("plan-routing"));
    const std::vector<GroupBatch> groups(static_cast<std::size_t>(sc.spec.deployment.attention_dp), b);
    Time clock;
    double total = 0;
    constexpr int kSteps = 8;
    for (int i = 0; i < kSteps; ++i) {
      const StepPlan& p = planner.plan(groups, clock);
      clock += p.total;
      total += p.total.seconds();
    }
    (on ? row.on_ms : row.off_ms) = total / kSteps * 1e3;
  }
  return row;
}

// A prefill batch of `tokens` per GPU: prompts of 4,096 tokens, whole (one prompt's first chunk where the
// budget is smaller), its chunks one by one (the engine splits micro-batches by them); request_token_pairs
// for the per-request affinity (sum over prompts of t (t - 1)).
GroupBatch prefill_batch(std::int64_t tokens) {
  static const std::vector<PrefillChunk> kChunks(4, PrefillChunk{.tokens = 4096, .prefix = 0});
  static const PrefillChunk kFirst[] = {{.tokens = 2048, .prefix = 0}};
  GroupBatch b;
  const double prompt = std::min<double>(4096, static_cast<double>(tokens));
  const double prompts = static_cast<double>(tokens) / prompt;
  REQUIRE((tokens == 2048 || tokens % 4096 == 0));
  b.prefill_chunks = tokens == 2048
                         ? std::span<const PrefillChunk>(kFirst)
                         : std::span<const PrefillChunk>(kChunks).first(static_cast<std::size_t>(prompts));
  b.prefill_tokens = tokens;
  b.prefill_pairs = prompts * prompt * (prompt + 1) / 2;
  b.prefill_kv_tokens = static_cast<double>(tokens);
  b.sampled_seqs = static_cast<std::int64_t>(prompts);
  b.request_token_pairs = prompts * prompt * (prompt - 1);
  return b;
}

// SGLang's prefill deployment (lmsys.org 2025-05-05): engine sglang, EPLB with 32 redundant experts (288
// slots), the popularity calibrated to TensorRT-LLM's measured by-rank imbalance and the per-request
// affinity fitted to SGLang's 1.18x loss against perfect balance (VALIDATION_CLUSTER.md "Per-batch skew";
// fitted on that loss, not on overlap gains). "uniform" replaces the popularity by uniform routing, their
// "simulated perfect EPLB".
std::vector<std::string> sglang_prefill(std::int64_t tokens, bool uniform) {
  std::vector<std::string> s{"deployment.max_batched_tokens=" + std::to_string(tokens),
                             "deployment.engine=\"sglang\"", "experts.placement=\"eplb\"",
                             "experts.redundant_experts=32"};
  s.emplace_back(uniform ? R"(workload.expert_popularity={"kind":"uniform"})"
                         : R"(workload.expert_popularity={"kind":"calibrated","imbalance_ratio":1.564,)"
                           R"("tokens_per_iteration":4096,"ranks":32,"request_affinity_sd":2.15})");
  return s;
}
}  // namespace

// The table of VALIDATION_CLUSTER.md "Two-batch overlap" (run: build/tests/test_serving "[.overlap-table]").
TEST_CASE("overlap gain against batch per GPU, decode EP72 and prefill EP32 on H100", "[.overlap-table]") {
  std::printf(
      "| phase | deployment | per GPU | step off ms | step on ms | gain |\n|---|---|---|---|---|---|\n");
  const std::vector<std::string> decode_set{"cluster.gpu=h100-sxm", "cluster.nvlink_gb_per_s=450"};
  for (const std::int64_t seqs : {16, 32, 64, 128, 256}) {
    GroupBatch b;
    b.decode_seqs = seqs;
    b.decode_context_tokens = static_cast<double>(seqs) * 2000;
    b.sampled_seqs = seqs;
    const OverlapRow r = overlap_gain("scenarios/reference/dsv3_decode_ep72.json", decode_set, b);
    std::printf("| decode | EP72 9x8 H100 LL, context 2000 | %lld seqs | %.2f | %.2f | %+.1f%% |\n",
                static_cast<long long>(seqs), r.off_ms, r.on_ms, (r.off_ms / r.on_ms - 1) * 100);
  }
  const char* ep32 = "scenarios/reference/topology_dsv3_4x8xh100_ep32.json";
  const auto row = [](const char* deployment, std::int64_t tokens, const OverlapRow& r) {
    std::printf("| prefill | %s | %lld tokens | %.2f | %.2f | %+.1f%% |\n", deployment,
                static_cast<long long>(tokens), r.off_ms, r.on_ms, (r.off_ms / r.on_ms - 1) * 100);
  };
  for (const std::int64_t tokens : {2048, 4096, 8192, 16384})
    row("EP32 4x8 H100 HT, prompts of 4,096", tokens,
        overlap_gain(ep32, {"deployment.max_batched_tokens=" + std::to_string(tokens)},
                     prefill_batch(tokens)));
  for (const std::int64_t tokens : {2048, 4096, 8192, 16384})
    row("EP32 HT, sglang, EPLB 288, sigma 2.15", tokens,
        overlap_gain(ep32, sglang_prefill(tokens, false), prefill_batch(tokens)));
  for (const std::int64_t tokens : {4096, 16384})
    row("EP32 HT, sglang, uniform routing", tokens,
        overlap_gain(ep32, sglang_prefill(tokens, true), prefill_batch(tokens)));
}

// SGLang's ablation on 9x8 H100 (lmsys.org 2025-05-05, "Ablation Study: Two-batch Overlap"), held out from
// the costs (the low-latency kernels' SM share comes from the same post's kernel breakdown, not from these
// gains): decode -27% at 32 tokens per GPU, break-even between 64 and 128, +25.5% at 256; prefill +27% to
// +35% at equal tokens per GPU.
TEST_CASE("overlap gain against batch per GPU follows SGLang's published ablation") {
  const std::vector<std::string> h100{"cluster.gpu=h100-sxm", "cluster.nvlink_gb_per_s=450"};
  const auto decode_gain = [&](std::int64_t seqs) {
    GroupBatch b;
    b.decode_seqs = seqs;
    b.decode_context_tokens = static_cast<double>(seqs) * 2000;
    b.sampled_seqs = seqs;
    const OverlapRow r = overlap_gain("scenarios/reference/dsv3_decode_ep72.json", h100, b);
    return r.off_ms / r.on_ms - 1;
  };
  CHECK(decode_gain(32) == Approx(-0.27).margin(0.10));
  CHECK(decode_gain(64) < 0.0);
  CHECK(decode_gain(128) > 0.0);
  CHECK(decode_gain(256) == Approx(0.255).margin(0.10));
  // Prefill in SGLang's own deployment (engine, EPLB, its measured imbalance), at 8,192 tokens per GPU.
  const OverlapRow r = overlap_gain("scenarios/reference/topology_dsv3_4x8xh100_ep32.json",
                                    sglang_prefill(8192, false), prefill_batch(8192));
  CHECK(r.off_ms / r.on_ms - 1 == Approx(0.31).margin(0.10));
}

TEST_CASE("a micro-batch's attention is its own tokens' causal pairs: one prompt split in the middle") {
  // One prompt of 4,096 tokens. SGLang: no sequence boundary (A would hold 0 tokens, under 48%), so the
  // two-chunk split at 4,096 / 2 = 2,048; vLLM: num_tokens // 2 = 2,048. A's 2,048 tokens attend to
  // 2,048 x 2,049 / 2 pairs; B's 2,048 tokens to the 2,048 before them and causally among themselves:
  // 2,048 x 2,048 + 2,048 x 2,049 / 2. B reads 4,096 tokens of KV, A 2,048.
  const PrefillChunk prompt[] = {{.tokens = 4096, .prefix = 0}};
  GroupBatch b{.prefill_tokens = 4096, .prefill_pairs = 4096.0 * 4097 / 2, .prefill_kv_tokens = 4096};
  b.prefill_chunks = prompt;
  for (const EngineKind e : {EngineKind::kSglang, EngineKind::kVllm, EngineKind::kTrtllm}) {
    const auto [a, c] = split_micro_batch(b, e);
    CHECK(a.prefill_tokens == 2048);
    CHECK(c.prefill_tokens == 2048);
    CHECK(a.prefill_pairs == 2048.0 * 2049 / 2);
    CHECK(c.prefill_pairs == 2048.0 * 2048 + 2048.0 * 2049 / 2);
    CHECK(a.prefill_pairs + c.prefill_pairs == b.prefill_pairs);
    CHECK(c.prefill_pairs / a.prefill_pairs == Approx(1 + 2 * 2048.0 / 2049));  // 2.999, "about 3x"
    CHECK(a.prefill_kv_tokens == 2048);
    CHECK(c.prefill_kv_tokens == 4096);
  }
  // The same prompt as a later chunk: 1,000 tokens after 3,000 cached. A: 500 x 3,000 + 500 x 501 / 2;
  // B: 500 x 3,500 + 500 x 501 / 2.
  const PrefillChunk later[] = {{.tokens = 1000, .prefix = 3000}};
  GroupBatch l{.prefill_tokens = 1000};
  l.prefill_chunks = later;
  const auto [la, lb] = split_micro_batch(l, EngineKind::kSglang);
  CHECK(la.prefill_pairs == 500.0 * 3000 + 500.0 * 501 / 2);
  CHECK(lb.prefill_pairs == 500.0 * 3500 + 500.0 * 501 / 2);
  CHECK(lb.prefill_kv_tokens == 4000);
}

TEST_CASE("several prompts: SGLang splits at a sequence boundary, vLLM at half the tokens") {
  // Prompts of 1,000, 3,000, 2,000 and 2,000 tokens (8,000). SGLang's boundaries leave A 1,000, 4,000
  // (|4,000 - 4,000| = 0, the minimum), 6,000: it splits after the second prompt, within [0.48, 0.52], so A
  // holds prompts 1-2 and B prompts 3-4, each with its own prompts' pairs. vLLM splits at 4,000 as well.
  const PrefillChunk chunks[] = {{.tokens = 1000}, {.tokens = 3000}, {.tokens = 2000}, {.tokens = 2000}};
  GroupBatch b{.prefill_tokens = 8000};
  b.prefill_chunks = chunks;
  const auto tri = [](double n) { return n * (n + 1) / 2; };
  for (const EngineKind e : {EngineKind::kSglang, EngineKind::kVllm}) {
    const auto [a, c] = split_micro_batch(b, e);
    CHECK(a.prefill_tokens == 4000);
    CHECK(a.prefill_pairs == tri(1000) + tri(3000));
    CHECK(c.prefill_pairs == tri(2000) + tri(2000));
    CHECK(a.prefill_kv_tokens == 4000);
  }
  // Prompts of 3,000, 1,000 and 4,000: SGLang's boundaries leave A 3,000 (diff 2,000), 4,000 (diff 0):
  // the split falls after the second prompt. Prompts of 3,000 and 5,000: the only boundary leaves A 3,000
  // = 37.5% < 48%, so SGLang splits the second prompt at 4,000: A = 3,000 + its first 1,000 tokens, B its
  // last 4,000 after 1,000 cached: 4,000 x 1,000 + 4,000 x 4,001 / 2 pairs, 5,000 of KV.
  const PrefillChunk uneven[] = {{.tokens = 3000}, {.tokens = 5000}};
  GroupBatch u{.prefill_tokens = 8000};
  u.prefill_chunks = uneven;
  CHECK(prefill_split_tokens(uneven, EngineKind::kSglang) == 4000);
  const auto [ua, ub] = split_micro_batch(u, EngineKind::kSglang);
  CHECK(ua.prefill_pairs == tri(3000) + tri(1000));
  CHECK(ub.prefill_pairs == 4000.0 * 1000 + tri(4000));
  CHECK(ub.prefill_kv_tokens == 5000);
  const PrefillChunk three[] = {{.tokens = 3000}, {.tokens = 1000}, {.tokens = 4000}};
  CHECK(prefill_split_tokens(three, EngineKind::kSglang) == 4000);
  // Odd tokens: vLLM's A takes num_tokens // 2.
  const PrefillChunk odd[] = {{.tokens = 4097}};
  CHECK(prefill_split_tokens(odd, EngineKind::kVllm) == 2048);
  CHECK(prefill_split_tokens(odd, EngineKind::kSglang) == 2048);
}

TEST_CASE("a decode batch splits as before: halves of the sequences, contexts in proportion") {
  // 5 sequences of 100-token contexts with 2 drafts each: A takes 3 (the odd one), B 2.
  const GroupBatch b{.decode_seqs = 5,
                     .decode_context_tokens = 500,
                     .sampled_seqs = 15,
                     .decode_draft_tokens = 10,
                     .decode_draft_pairs = 5 * (2 * 100.0 + 3)};
  for (const EngineKind e : {EngineKind::kSglang, EngineKind::kVllm}) {
    const auto [a, c] = split_micro_batch(b, e);
    CHECK(a.decode_seqs == 3);
    CHECK(c.decode_seqs == 2);
    CHECK(a.decode_context_tokens == Approx(300));
    CHECK(c.decode_context_tokens == Approx(200));
    CHECK(a.decode_draft_tokens == 6);
    CHECK(c.decode_draft_pairs == Approx(2 * 203.0));
    CHECK(a.prefill_tokens + c.prefill_tokens == 0);
  }
  // Without its chunks a prefill batch halves its tokens and pairs (the offline planners' batches).
  const GroupBatch p{.prefill_tokens = 4097, .prefill_pairs = 1000, .prefill_kv_tokens = 4097};
  const auto [pa, pb] = split_micro_batch(p, EngineKind::kSglang);
  CHECK(pa.prefill_tokens == 2049);
  CHECK(pa.prefill_pairs == Approx(1000.0 * 2049 / 4097));
  CHECK(pb.prefill_kv_tokens == Approx(4097.0 * 2048 / 4097));
}

TEST_CASE("each micro-batch's stage carries its own attention: one prompt split in the middle") {
  // One prompt of 4,096 tokens per group under two-batch overlap, engine sglang: with its chunk the planner
  // splits it at 2,048 and B attends over A's half (3x A's pairs); without, both halves carry half the
  // pairs. The roofline's prefill attention is FLOP-bound here, so the step's attention (A's + B's) is the
  // same. B's attention runs beside A's dispatch (stage 1), A's beside B's combine (stage 4); under the SM
  // partition a compute-bound stage exposes its work x 24/108 as dispatch or combine, so more of the
  // exposed time moves to dispatch. Every stage of this small model is compute-bound, so the layer's sum,
  // hence the step, does not move: the split costs only where it makes a stage communication-bound.
  const PrefillChunk prompt[] = {{.tokens = 4096, .prefix = 0}};
  const auto step = [&](bool chunks) {
    ScenarioSpec s = spec(true);
    s.deployment.engine = engine_profile(EngineKind::kSglang);
    std::vector<GroupBatch> groups(4, GroupBatch{.prefill_tokens = 4096,
                                                 .prefill_pairs = 4096.0 * 4097 / 2,
                                                 .prefill_kv_tokens = 4096,
                                                 .sampled_seqs = 1});
    if (chunks)
      for (GroupBatch& b : groups) b.prefill_chunks = prompt;
    const RooflineCostModel gpu(s.cluster.gpu);
    const Fabric fabric(s.cluster.fabric);
    const ExpertPopularity pop(PopularitySpec{}, s.model.moe_layers(), 8, 8, Rng(1));
    StepPlanner planner(s, gpu, fabric, pop, Rng(2));
    return planner.plan(groups, Time{});
  };
  const StepPlan split = step(true);
  const StepPlan equal = step(false);
  CHECK(split.part(StepPart::kAttention).seconds() == Approx(equal.part(StepPart::kAttention).seconds()));
  CHECK(split.part(StepPart::kExperts) == equal.part(StepPart::kExperts));
  CHECK(split.part(StepPart::kDispatch) > equal.part(StepPart::kDispatch));
  CHECK(split.part(StepPart::kCombine) < equal.part(StepPart::kCombine));
  CHECK(split.total.seconds() == Approx(equal.total.seconds()));
}

TEST_CASE("a run hands the planner each step's prefill chunks: a prompt in two chunks, each split causally") {
  // One request of 1,500 prompt tokens on one attention group (TP 4) with a budget of 1,024 tokens a step,
  // engine sglang: step 1 prefills the chunk [0, 1024), split 512 + 512 with B attending over A's half;
  // step 2 the chunk of 476 after 1,024 in the KV cache, whose end samples the first token. Every token
  // picks all 8 experts, so routing draws nothing and the run's steps cost what the planner costs for those
  // two chunks: TTFT = plan 1 + plan 2. At this size a stage is communication-bound, so the causal split
  // costs more than equal halves would: the run must have seen the chunks.
  Json j = Json::parse(R"({
    "model": {"num_layers": 4, "hidden": 4096, "vocab": 1000, "attention": "gqa", "num_heads": 32,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 8, "top_k": 8, "expert_inter": 1024},
    "cluster": {"gpu": "h100-sxm", "nodes": 2, "gpus_per_node": 2},
    "deployment": {"ep_size": 4, "attention": {"dp": 1, "tp": 4}, "max_batched_tokens": 1024,
                   "two_batch_overlap": true, "engine": "sglang"},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 1500}, "output_tokens": {"kind": "fixed", "tokens": 2}},
    "run": {"requests": 1}})");
  const ScenarioSpec s = parse_scenario(j, "").spec;
  const RooflineCostModel gpu(s.cluster.gpu);
  const RandomStreams streams(s.run.seed);
  const ServingModels models(s, streams);
  const PrefillChunk first[] = {{.tokens = 1024, .prefix = 0}};
  const PrefillChunk second[] = {{.tokens = 476, .prefix = 1024}};
  GroupBatch b1{.prefill_tokens = 1024, .prefill_pairs = 1024.0 * 1025 / 2, .prefill_kv_tokens = 1024};
  GroupBatch b2{.prefill_tokens = 476,
                .prefill_pairs = 476.0 * 1024 + 476.0 * 477 / 2,
                .prefill_kv_tokens = 1500,
                .sampled_seqs = 1};
  const auto ttft = [&](bool chunks) {
    b1.prefill_chunks = chunks ? std::span<const PrefillChunk>(first) : std::span<const PrefillChunk>{};
    b2.prefill_chunks = chunks ? std::span<const PrefillChunk>(second) : std::span<const PrefillChunk>{};
    auto planner = models.make_standalone(gpu, streams.stream("plan-routing"));
    const Duration step1 = planner.plan(std::span(&b1, 1), Time{}).total;
    return step1 + planner.plan(std::span(&b2, 1), Time{} + step1).total;
  };
  const Report r = simulate(s, gpu);
  REQUIRE(r.requests_finished == 1);
  CHECK(r.ttft.mean == Approx(ttft(true).seconds()).epsilon(1e-9));
  CHECK(ttft(true) > ttft(false));
}

TEST_CASE(
    "attention-DP balancing under two-batch overlap: held contexts leave the step's chunks, every request "
    "ends") {
  // TensorRT-LLM's balancing drops held contexts from the step after the batches were formed; the chunks the
  // planner splits must follow (they are gathered after the balance). Eight requests arrive at once on two
  // attention ranks; each must finish with its prompt prefilled once.
  Json j = Json::parse(R"({
    "model": {"num_layers": 4, "hidden": 4096, "vocab": 1000, "attention": "gqa", "num_heads": 32,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 8, "top_k": 2, "expert_inter": 1024},
    "cluster": {"gpu": "h100-sxm", "nodes": 2, "gpus_per_node": 2},
    "deployment": {"ep_size": 4, "attention": {"dp": 2, "tp": 2}, "max_batched_tokens": 2048,
                   "two_batch_overlap": true, "engine": "trtllm", "scheduler": "trtllm",
                   "adp_balance": {"batching_wait_iters": 3, "timeout_iters": 9}},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 50},
                 "prompt_tokens": {"kind": "fixed", "tokens": 700}, "output_tokens": {"kind": "fixed", "tokens": 20}},
    "run": {"requests": 8}})");
  const ScenarioSpec s = parse_scenario(j, "").spec;
  const RooflineCostModel gpu(s.cluster.gpu);
  const Report r = simulate(s, gpu);
  CHECK(r.requests_finished == 8);
}
