// End-to-end runs of scenarios/tiny/*.json: conservation, determinism, and a step time computed by hand.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <set>
#include <string>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/runtime/serving_simulation.h"

using namespace moesim;

namespace {
std::string tiny(const char* name) { return std::string(MOESIM_SOURCE_DIR) + "/scenarios/tiny/" + name; }

Report run(const std::string& file, const std::vector<std::string>& overrides = {}, int threads = 1) {
  const LoadedScenario sc = load_scenario(file, overrides);
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  return simulate(sc.spec, gpu, nullptr, threads);
}

// The roofline formula, written out independently of the cost model: overhead per kernel plus the
// larger of memory time and compute time at the achievable fractions of the datasheet peaks.
struct HandRoofline {
  GpuSpec g;
  [[nodiscard]] double time(double bytes, double flops, int kernels) const {
    return kernels * g.kernel_overhead.seconds() +
           std::max(bytes / (g.hbm_bytes_per_s * g.mem_efficiency),
                    flops / (g.bf16_flops_per_s * g.compute_efficiency));
  }
  [[nodiscard]] double gemm(double m, double n, double k) const {
    return time(2.0 * k * n + 2.0 * (m * k + m * n), 2.0 * m * n * k, 1);
  }
  [[nodiscard]] double ffn(double t, double h, double i) const {
    return time(3.0 * h * i * 2.0 + 2.0 * (2.0 * t * h + 3.0 * t * i), 6.0 * t * h * i, 3);
  }
};
}  // namespace

TEST_CASE("a closed loop with fixed lengths and top-k = all experts matches the step time computed by hand") {
  const LoadedScenario sc = load_scenario(tiny("tiny_model_closed_loop.json"), {});
  const HandRoofline hr{sc.spec.cluster.gpu};
  // Toy model: 2 MoE layers, hidden 1024, GQA 8 heads x 128 (8 KV heads), 4 experts of 512, top-4,
  // vocab 1000, BF16 everywhere, one GPU. 4 users, prompt 32, output 8, think time 0.
  const double h = 1024;
  const double qkv_n = 1024 + 2 * 1024;  // the fused QKV projection's columns (8 + 2 x 8 heads x 128)
  const double kv_bytes_per_token_layer = 2.0 * 8 * 128 * 2.0;
  const double flops_per_pair = 4.0 * 8 * 128;
  const double qo_bytes_per_token = 2.0 * 8 * 128 * 2.0;  // Q in and O out of the attention core, BF16
  const int users = 4;
  // Experts: the default engine (vllm) runs the 4 experts as one grouped launch (3 kernels: weights of
  // all 4, every (token, expert) pair), its Triton fused_moe at 4 to 128 rows per expert: the roofline
  // time x (1.00 + 0.98 + 0.97 + 1.04 + 1.00 + 0.96 + 0.95) / 7 = 0.985714 (vLLM PR 19983, docs/
  // validation/engine_kernel_sources.md). Its small kernels (docs/engines.md): 2 fused add+RMSNorm (x and
  // residual in and out), 1 KV write, 1 rotary, 1 top-k softmax, 1 align (sort), 1 unpermute sum.
  auto layer = [&](double tokens, double attn_bytes, double attn_flops) {
    const double pairs = 4 * tokens;
    const double act = tokens * h * 2;
    const double grouped =
        0.985714 * hr.time(4 * 3.0 * h * 512 * 2.0 + 2.0 * (2.0 * pairs * h + 3.0 * pairs * 512),
                           6.0 * pairs * h * 512, 3);
    // Rotary reads and writes the (8 + 8) x 128 query and key columns: 4 x 2,048 B = 4 x act per token.
    const double small = hr.time(2 * 4 * act, 0, 2) + hr.time(2 * tokens * kv_bytes_per_token_layer, 0, 1) +
                         hr.time(tokens * (8 + 8) * 128 * 4.0, 0, 1) +
                         hr.time(tokens * 4 * 4.0 + pairs * 8.0, 0, 1) + hr.time(pairs * 16.0, 0, 1) +
                         hr.time(pairs * h * 2 + act, 0, 1);
    // Projections: fused QKV [h -> 3072] and O [1024 -> h], two GEMMs.
    return hr.gemm(tokens, qkv_n, h) + hr.gemm(tokens, h, 1024) + hr.time(attn_bytes, attn_flops, 1) +
           hr.gemm(tokens, 4, h) + grouped + small;
  };
  const double lm_head = hr.gemm(users, 1000, h);
  // Prefill step: 4 prompts of 32 tokens; causal pairs 32*33/2 per prompt.
  const double prefill = 2.0 * layer(4 * 32, 4 * 32 * (kv_bytes_per_token_layer + qo_bytes_per_token),
                                     4 * 528 * flops_per_pair) +
                         lm_head;
  // Decode step j = 1..7 reads a context of 32 + j tokens per sequence.
  double decode_sum = 0;
  for (int j = 1; j <= 7; ++j) {
    const double ctx = users * (32.0 + j);
    decode_sum += 2.0 * layer(users, ctx * kv_bytes_per_token_layer + users * qo_bytes_per_token,
                              ctx * flops_per_pair) +
                  lm_head;
  }
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  const Report r = simulate(sc.spec, gpu);
  REQUIRE(r.requests_finished == 40);
  REQUIRE(r.steps == 10 * 8);
  CHECK(r.ttft.mean == Approx(prefill).epsilon(1e-6));
  CHECK(r.tpot.mean == Approx(decode_sum / 7).epsilon(1e-6));
  CHECK(r.e2e.mean == Approx(prefill + decode_sum).epsilon(1e-6));
  CHECK(r.sim_end_s == Approx(10 * (prefill + decode_sum)).epsilon(1e-6));
  CHECK(r.all_to_all_share() == 0.0);
}

TEST_CASE("every request finishes or is dropped and output tokens equal tokens asked") {
  for (const char* f : {"tiny_poisson_ep4.json", "tiny_two_nodes.json", "tiny_model_closed_loop.json"}) {
    const Report r = run(tiny(f));
    INFO(f);
    REQUIRE(r.requests_arrived > 0);
    REQUIRE(r.requests_finished + r.requests_dropped == r.requests_arrived);
    REQUIRE(r.output_tokens == r.output_tokens_asked);
    REQUIRE(r.steps > 0);
  }
}

TEST_CASE("the same seed gives the same report and fingerprint, another seed does not") {
  const Report a = run(tiny("tiny_poisson_ep4.json"));
  const Report b = run(tiny("tiny_poisson_ep4.json"));
  REQUIRE(a.fingerprint == b.fingerprint);
  REQUIRE(a.ttft.p99 == b.ttft.p99);
  REQUIRE(a.output_tokens_per_s == b.output_tokens_per_s);
  REQUIRE(a.mean_step_s == b.mean_step_s);
  const Report c = run(tiny("tiny_poisson_ep4.json"), {"run.seed=12"});
  REQUIRE(c.fingerprint != a.fingerprint);
}

TEST_CASE("step plans on several threads give the same report as on one") {
  // Four replicas of EP4; the second case adds EPLB with rebalancing and expert tiers (per-planner state that
  // a worker thread mutates); the third is 2P2D with every instance over two nodes, so KV transfers and the
  // All-to-Alls share NICs (state the event loop reads while plans run). 7 threads: more than replicas.
  const std::vector<std::vector<std::string>> cases = {
      {"cluster.gpus_per_node=16"},
      {"cluster.gpus_per_node=16", "experts.placement=\"eplb\"", "experts.redundant_slots_per_gpu=1",
       "experts.rebalance.every_steps=20",
       "experts.tiers={\"hbm_expert_gib\":8,\"cold_home\":\"host_dram\"}"},
      {"cluster.nodes=8", "cluster.gpus_per_node=2",
       "deployment.pools=[{\"role\":\"prefill\",\"instances\":2},{\"role\":\"decode\",\"instances\":2}]"}};
  for (const auto& ov : cases) {
    const Report one = run(tiny("tiny_poisson_ep4.json"), ov, 1);
    REQUIRE(one.replicas == 4);  // threads are used from 4 replicas on
    REQUIRE((one.disaggregation.kv_transfers > 0) == (ov.size() == 3));
    for (const int threads : {2, 7}) {
      const Report many = run(tiny("tiny_poisson_ep4.json"), ov, threads);
      INFO(threads << " threads, " << ov.size() << " overrides");
      CHECK(many.fingerprint == one.fingerprint);
      CHECK(many.events == one.events);
      CHECK(many.steps == one.steps);
      CHECK(many.ttft.p99 == one.ttft.p99);
      CHECK(many.tpot.p99 == one.tpot.p99);
      CHECK(many.output_tokens_per_s == one.output_tokens_per_s);
      CHECK(many.mean_step_s == one.mean_step_s);
      CHECK(many.gpu_mean.busy == one.gpu_mean.busy);
      CHECK(many.experts.rebalances == one.experts.rebalances);
      CHECK(many.experts.host_loads == one.experts.host_loads);
      CHECK(many.experts.stall_s == one.experts.stall_s);
      CHECK(many.disaggregation.kv_transfers == one.disaggregation.kv_transfers);
      CHECK(many.disaggregation.kv_transfer_s == one.disaggregation.kv_transfer_s);
    }
  }
}

TEST_CASE("crossing nodes puts All-to-All on the critical path") {
  const Report r = run(tiny("tiny_two_nodes.json"));
  REQUIRE(r.all_to_all_share() > 0.0);
  REQUIRE(r.nic_bytes_per_step > 0.0);
  REQUIRE(r.share(StepPart::kDispatch) > 0.0);
  REQUIRE(r.share(StepPart::kCombine) > 0.0);
}

TEST_CASE("a KV cache too small for the load preempts and still finishes every request") {
  // Squeeze the KV pool: the 30B model's weights take ~15 GB per GPU of 4; leave a few thousand tokens
  // (0.31: at 0.33 the load sat at the edge, 0 or 1 preemptions, and a 1% change of expert cost moved it).
  const Report r = run(tiny("tiny_poisson_ep4.json"),
                       {"deployment.kv_cache_memory_fraction=0.31", "deployment.max_batch_size=512",
                        "deployment.max_batched_tokens=8192", "workload.arrival.rate_per_s=400"});
  REQUIRE(r.preemptions > 0);
  REQUIRE(r.requests_finished + r.requests_dropped == r.requests_arrived);
  REQUIRE(r.output_tokens == r.output_tokens_asked);
}

TEST_CASE("a bounded waiting queue drops requests and reports them") {
  const Report r = run(tiny("tiny_poisson_ep4.json"),
                       {"deployment.max_waiting_requests=1", "workload.arrival.rate_per_s=2000"});
  REQUIRE(r.requests_dropped > 0);
  REQUIRE(r.requests_finished + r.requests_dropped == r.requests_arrived);
}

TEST_CASE("SLA violations are counted against the configured limits") {
  const Report loose = run(tiny("tiny_poisson_ep4.json"), {"sla.ttft_ms=100000", "sla.tpot_ms=100000"});
  REQUIRE(loose.sla_violation_rate == 0.0);
  REQUIRE(loose.sla_met);
  REQUIRE(loose.goodput_requests_per_s ==
          Approx(static_cast<double>(loose.requests_measured) / loose.window_s));
  const Report tight = run(tiny("tiny_poisson_ep4.json"), {"sla.tpot_ms=0.001"});
  REQUIRE(tight.sla_violation_rate == 1.0);
  REQUIRE_FALSE(tight.sla_met);
  REQUIRE(tight.goodput_requests_per_s == 0.0);
  REQUIRE(std::find_if(tight.alerts.begin(), tight.alerts.end(), [](const std::string& a) {
            return a.find("TPOT") != std::string::npos;
          }) != tight.alerts.end());
}

TEST_CASE("a warm-up that covers the whole run is reported, not silently empty") {
  const Report r = run(tiny("tiny_poisson_ep4.json"), {"run.warmup_s=1000"});
  REQUIRE(r.requests_measured == 0);
  REQUIRE(r.requests_finished == r.requests_arrived);
  REQUIRE(std::find_if(r.alerts.begin(), r.alerts.end(), [](const std::string& a) {
            return a.find("no request was measured") != std::string::npos;
          }) != r.alerts.end());
}

TEST_CASE("with several replicas every attention group receives requests") {
  // 8 GPUs as two EP4 replicas of four attention groups each; the router must use all eight groups.
  for (const char* admission : {"", "experts.admission=gpu_load_aware"}) {
    std::vector<std::string> ov = {"cluster.gpus_per_node=8", "deployment.ep_size=4"};
    if (*admission != '\0') ov.emplace_back(admission);
    const LoadedScenario sc = load_scenario(tiny("tiny_poisson_ep4.json"), ov);
    struct Groups final : SimulationObserver {
      std::set<std::pair<int, int>> seen;
      void on_step(const StepRecord&) override {}
      void on_request(const RequestRecord& r) override { seen.insert({r.replica, r.group}); }
    } groups;
    const RooflineCostModel gpu(sc.spec.cluster.gpu);
    const Report r = simulate(sc.spec, gpu, &groups);
    INFO(admission);
    REQUIRE(r.replicas == 2);
    REQUIRE(groups.seen.size() == 8);
  }
}

// The fingerprint hashes (time, phase, sequence) of every executed event. Pinned here so that any change
// of behaviour shows up as a failing test and is made on purpose: when a change is intended, update the
// value and say why in the commit.
TEST_CASE("the tiny scenarios' fingerprints are pinned") {
  const auto fp = [](const char* f) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(run(tiny(f)).fingerprint));
    return std::string(buf);
  };
  CHECK(fp("tiny_model_closed_loop.json") == "56ec33379942baeb");
  CHECK(fp("tiny_poisson_ep4.json") == "e1f30272fc3908c9");
  CHECK(fp("tiny_two_nodes.json") == "9c027537ed3f6ca9");
}
