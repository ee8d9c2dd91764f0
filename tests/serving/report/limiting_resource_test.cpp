// limiting_resource: which resource the summary names, from hand-built reports where each rule's figures
// are set on purpose.
#include <catch2/catch.hpp>

#include "sim/serving/report/report.h"

namespace moesim {
namespace {

// A measured run that meets its SLA with room everywhere: TPOT at 50% of its limit, TTFT at 25%, the KV
// pool's peak at 10%.
Report healthy() {
  Report r;
  r.requests_measured = 100;
  r.sla_percentile = 99;
  r.sla_tpot_s = 0.100;
  r.sla_tpot_at_percentile = 0.050;
  r.sla_ttft_s = 2.0;
  r.sla_ttft_at_percentile = 0.5;
  r.memory.kv_pool = 100.0;
  r.memory.kv_peak_used = 10.0;
  r.mean_step_s = 0.040;
  r.mean_batch_tokens = 300;
  r.part_share[static_cast<std::size_t>(StepPart::kAttention)] = 0.3;
  r.part_share[static_cast<std::size_t>(StepPart::kExperts)] = 0.6;
  r.part_share[static_cast<std::size_t>(StepPart::kDispatch)] = 0.1;
  return r;
}

}  // namespace

TEST_CASE("a run within its SLA names the limit nearest to being reached") {
  Report r = healthy();
  // TPOT at 0.5 of its limit is nearer than TTFT (0.25) and the KV peak (0.1).
  LimitingResource l = limiting_resource(r);
  CHECK(l.name == "step_time");
  CHECK(l.why.find("the SLA holds") != std::string::npos);
  CHECK(l.why.find("50.0% of its limit") != std::string::npos);
  CHECK(l.why.find("experts 60.0% of the step") != std::string::npos);  // the largest part
  r.sla_ttft_at_percentile = 1.6;                                       // 80% of 2 s
  CHECK(limiting_resource(r).name == "first_token");
  r.memory.kv_peak_used = 90.0;  // 90% of the pool
  CHECK(limiting_resource(r).name == "kv_cache");
}

TEST_CASE("a failed SLA names the latency that fails, TPOT before TTFT") {
  Report r = healthy();
  r.sla_ttft_at_percentile = 2.5;
  CHECK(limiting_resource(r).name == "first_token");
  r.sla_tpot_at_percentile = 0.2;
  const LimitingResource l = limiting_resource(r);
  CHECK(l.name == "step_time");
  CHECK(l.why.find("P99 TPOT 200.00 ms is over 100.00 ms") != std::string::npos);
}

TEST_CASE("overload names GPU time, and a full KV pool or preemptions name KV memory before anything") {
  Report r = healthy();
  r.sla_tpot_at_percentile = 0.3;
  r.overloaded = true;
  CHECK(limiting_resource(r).name == "gpu_time");
  r.preemptions = 3;
  CHECK(limiting_resource(r).name == "kv_cache");
  r.preemptions = 0;
  r.memory.kv_peak_used = 95.0;  // the 95% threshold is inclusive
  CHECK(limiting_resource(r).name == "kv_cache");
  r.memory.kv_peak_used = 94.0;
  CHECK(limiting_resource(r).name == "gpu_time");
}

TEST_CASE("a run with no measured request names no resource") {
  Report r = healthy();
  r.requests_measured = 0;
  CHECK(limiting_resource(r).name == "none");
}

}  // namespace moesim
