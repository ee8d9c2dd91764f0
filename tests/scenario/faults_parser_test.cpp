// The faults section: given failures, MTBFs and the policies parse into FaultsSpec, and bad keys are
// refused with their JSON path.
#include "sim/scenario/faults_parser.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "sim/scenario/scenario_parser.h"

using namespace moesim;

namespace {

// Two nodes of four GPUs, one EP8 instance, with a GPU failure at 5 s.
Json base() {
  return Json::parse(R"({
    "model": "qwen3-30b-a3b",
    "cluster": {"gpu": "h100-sxm", "nodes": 2, "gpus_per_node": 4},
    "deployment": {"ep_size": 8},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 5},
                 "prompt_tokens": {"kind": "fixed", "tokens": 100},
                 "output_tokens": {"kind": "fixed", "tokens": 10}},
    "run": {"requests": 10},
    "faults": {"events": [{"at_s": 5, "gpu": 3}]}})");
}

std::string error_of(const std::vector<std::string>& overrides) {
  try {
    Json j = base();
    for (const auto& o : overrides) apply_override(j, o);
    (void)parse_scenario(j, "");
    return "";
  } catch (const InputError& e) {
    return e.what();
  }
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

TEST_CASE("faults parse into failures in time order, MTBFs in seconds and the recovery policies") {
  Json j = base();
  apply_override(j, R"(faults={"events": [{"at_s": 9, "node": 1}, {"at_s": 2, "link_node": 0,
      "bandwidth_factor": 0.25, "duration_s": 30}], "mtbf": {"gpu_hours": 1000}, "in_flight": "fail",
      "recovery": "replace", "replacement_s": 600, "detect_s": 10, "weights_from": "host_dram",
      "engine_start_s": 20})");
  const FaultsSpec f = parse_scenario(j, "").spec.faults;
  REQUIRE(f.events.size() == 2);
  CHECK(f.events[0].kind == FaultKind::kLink);  // sorted by time
  CHECK(f.events[0].bandwidth_factor == 0.25);
  CHECK(f.events[0].duration == Duration::from_seconds(30));
  CHECK(f.events[1].kind == FaultKind::kNode);
  CHECK(f.events[1].target == 1);
  CHECK(f.gpu_mtbf_s == 1000 * 3600.0);
  CHECK(f.node_mtbf_s == 0);
  CHECK(f.in_flight == InFlightPolicy::kFail);
  CHECK(f.recovery == RecoveryPolicy::kReplace);
  CHECK(f.replacement == Duration::from_seconds(600));
  CHECK(f.detection == Duration::from_seconds(10));
  CHECK(f.reload_from_set);
  CHECK(static_cast<WeightSource>(f.weights_from) == WeightSource::kHostDram);
  CHECK(f.engine_start == Duration::from_seconds(20));
  CHECK(f.cuda_graph_capture == Duration::zero());
  CHECK(f.enabled());
  // The defaults: recompute, re-shard, no detection delay, the reload as a scale-up's.
  const FaultsSpec d = parse_scenario(base(), "").spec.faults;
  CHECK(d.in_flight == InFlightPolicy::kRecompute);
  CHECK(d.recovery == RecoveryPolicy::kReshard);
  CHECK_FALSE(d.reload_from_set);
}

TEST_CASE("bad fault keys are refused naming their JSON path") {
  CHECK(starts_with(error_of({R"(faults.events=[{"at_s": 1, "gpu": 8}])"}), "faults.events[0].gpu"));  // 0..7
  CHECK(starts_with(error_of({R"(faults.events=[{"at_s": 1, "node": 2}])"}), "faults.events[0].node"));
  CHECK(starts_with(error_of({R"(faults.events=[{"at_s": 1}])"}), "faults.events[0]: give exactly one of"));
  CHECK(starts_with(error_of({R"(faults.events=[{"at_s": 1, "gpu": 0, "node": 0}])"}),
                    "faults.events[0]: give exactly one of"));
  CHECK(starts_with(error_of({R"(faults.events=[{"at_s": -1, "gpu": 0}])"}), "faults.events[0].at_s"));
  CHECK(starts_with(error_of({R"(faults.events=[{"at_s": 1, "gpu": 0, "gpus": 1}])"}),
                    "faults.events[0].gpus: unknown key"));
  CHECK(starts_with(error_of({R"(faults.events=[{"at_s": 1, "link_node": 0, "bandwidth_factor": 0}])"}),
                    "faults.events[0].bandwidth_factor"));
  CHECK(starts_with(error_of({"faults.events=3"}), "faults.events: expected an array"));
  CHECK(starts_with(error_of({"faults.in_flight=\"retry\""}), "faults.in_flight: unknown policy \"retry\""));
  CHECK(starts_with(error_of({"faults.recovery=\"pray\""}), "faults.recovery: unknown policy \"pray\""));
  CHECK(starts_with(error_of({"faults.replacement_s=5"}), "faults.replacement_s: only with recovery"));
  CHECK(starts_with(error_of({"faults.weights_from=\"s3\""}), "faults.weights_from: unknown source \"s3\""));
  CHECK(starts_with(error_of({"faults.mtbf={\"gpu_hour\": 5}"}), "faults.mtbf.gpu_hour: unknown key"));
  CHECK(starts_with(error_of({"faults.mtbf={}"}), "faults.mtbf: give at least one of"));
  CHECK(starts_with(error_of({"faults.mtbf={\"gpu_hours\": -1}"}), "faults.mtbf.gpu_hours"));
  CHECK(starts_with(error_of({"faults.detect=1"}), "faults.detect: unknown key"));
  CHECK(starts_with(error_of({"faults.spread_copies=true"}), "faults.spread_copies: applies to EPLB"));
  CHECK(
      starts_with(error_of({"faults.weights_from=\"peer_network\""}), "faults.weights_from: a reload from"));
  CHECK(starts_with(error_of({"faults={}"}), "faults: give events or mtbf"));
  CHECK(error_of({}).empty());
}
