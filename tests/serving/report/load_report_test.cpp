// Steady-state measurement, overload, drops and the drain bound: what a run says about its load.
#include <catch2/catch.hpp>
#include <string>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/report/report.h"
#include "sim/serving/runtime/serving_simulation.h"

using namespace moesim;

namespace {

const std::string kTiny = MOESIM_SOURCE_DIR "/scenarios/tiny/tiny_poisson_ep4.json";

// Fixed lengths so that the offered token rate is exactly rate x output tokens.
Report run(double rate, double duration_s, std::vector<std::string> more = {}) {
  std::vector<std::string> o{"workload.arrival.rate_per_s=" + std::to_string(rate),
                             "workload.prompt_tokens={\"kind\":\"fixed\",\"tokens\":256}",
                             "workload.output_tokens={\"kind\":\"fixed\",\"tokens\":32}",
                             "run.requests=0",
                             "run.duration_s=" + std::to_string(duration_s),
                             "run.warmup_s=2"};
  o.insert(o.end(), more.begin(), more.end());
  const LoadedScenario sc = load_scenario(kTiny, o);
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  return simulate(sc.spec, gpu);
}

bool has_alert(const Report& r, const std::string& words) {
  for (const std::string& a : r.alerts) {
    if (a.find(words) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("below capacity the steady window's output rate is the offered rate, whatever the run length") {
  // Flow conservation: in steady state tokens leave as fast as they are offered, rate x 32 per second;
  // the window ends at the last arrival, so the drain does not dilute it (Poisson count error ~ 1/sqrt(n)).
  for (const double duration : {20.0, 60.0}) {
    const Report r = run(20, duration);
    INFO("duration " << duration);
    REQUIRE(r.window_kind == "steady");
    REQUIRE(r.window_s == Approx(duration - 2.0).epsilon(0.02));
    REQUIRE(r.output_tokens_per_s == Approx(20.0 * 32.0).epsilon(0.12));
    REQUIRE_FALSE(r.overloaded);
    REQUIRE_FALSE(has_alert(r, "overloaded"));
    REQUIRE(r.drain_s >= 0);
  }
}

TEST_CASE("far above capacity the queue grows through the window and the run says it is overloaded") {
  const Report r = run(2000, 20);
  REQUIRE(r.overloaded);
  // Flow balance: past the transient the number in system grows at the arrival rate less the rate served.
  REQUIRE(r.trend.p_growth < 0.01);
  REQUIRE(r.trend.arrival_rate == Approx(2000).epsilon(0.05));
  REQUIRE(r.trend.slope_per_s == Approx(r.trend.arrival_rate - r.requests_per_s).epsilon(0.1));
  REQUIRE(has_alert(r, "overloaded"));
  REQUIRE(r.drain_s > 0);
  // Throughput is the service rate, well below the offered 2000 x 32 tokens/s.
  REQUIRE(r.output_tokens_per_s < 0.5 * 2000 * 32);
}

TEST_CASE("drops are counted by reason and raise an alert") {
  const Report r = run(2000, 10, {"deployment.max_waiting_requests=8"});
  REQUIRE(r.requests_dropped > 0);
  REQUIRE(r.dropped_queue_full == r.requests_dropped);
  REQUIRE(r.dropped_too_long == 0);
  REQUIRE(r.requests_finished + r.requests_dropped == r.requests_arrived);
  REQUIRE(has_alert(r, "of requests were dropped"));
}

TEST_CASE("run.max_drain_s stops the drain and reports what was left unfinished") {
  const Report full = run(2000, 10);
  const Report cut = run(2000, 10, {"run.max_drain_s=1"});
  REQUIRE(full.requests_unfinished == 0);
  REQUIRE(cut.requests_unfinished > 0);
  REQUIRE(cut.requests_finished + cut.requests_dropped + cut.requests_unfinished == cut.requests_arrived);
  REQUIRE(cut.drain_s == Approx(1.0).margin(1e-9));
  REQUIRE(has_alert(cut, "still in the system"));
}

TEST_CASE("when every request arrives at once the whole run is the window") {
  // About 100 requests within 0.1 ms (a burst, shorter than one step), drained afterwards.
  const Report r = run(1e6, 1e-4, {"run.warmup_s=0"});
  REQUIRE(r.window_kind == "whole run");
  REQUIRE(r.window_s == Approx(r.sim_end_s));
  REQUIRE(r.output_tokens_per_s == Approx(static_cast<double>(r.output_tokens) / r.sim_end_s));
}

TEST_CASE("a burst's SLA counts cover every finished request of the whole run") {
  // A TTFT limit no request can meet (1 us, below one step) and one every request meets (an hour): the
  // counts are all the finished requests over the limit, then none; each request has 32 output tokens, so
  // each has a TPOT.
  for (const auto& [ttft_ms, all_over] : {std::pair<const char*, bool>{"0.001", true}, {"3600000", false}}) {
    const Report r = run(1e6, 1e-4, {"run.warmup_s=0", std::string("sla.ttft_ms=") + ttft_ms});
    REQUIRE(r.window_kind == "whole run");
    CHECK(r.sla_requests == r.requests_finished);
    CHECK(r.sla_tpot_requests == r.requests_finished);
    CHECK(r.sla_ttft_over == (all_over ? r.requests_finished : 0));
  }
}

TEST_CASE("the overload alert says when the window never settled, where growth may be the fill") {
  Report r;
  r.overloaded = true;
  r.in_system_start = 10;
  r.in_system_end = 50;
  auto overload_alert = [](const Report& x) {
    for (const std::string& a : evaluate_alerts(x)) {
      if (a.rfind("overloaded:", 0) == 0) return a;
    }
    return std::string();
  };
  REQUIRE_FALSE(overload_alert(r).empty());
  CHECK(overload_alert(r).find("still filling up") == std::string::npos);
  r.mser_at_bound = true;
  CHECK(overload_alert(r).find("still filling up") != std::string::npos);
  r.overloaded = false;
  CHECK(overload_alert(r).empty());
}
