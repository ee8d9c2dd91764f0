#include "sim/scenario/faults_parser.h"

#include <algorithm>
#include <string>

namespace moesim {

namespace {

constexpr double kMaxSeconds = 1e6;  // simulated time a run holds (as scenario_parser.cpp)
constexpr double kMaxHours = 1e9;

// faults.events[i]: {"at_s", and one of "gpu", "node", "link_node" (with "bandwidth_factor", "duration_s")}.
FaultEvent parse_event(JsonReader& r, const ScenarioSpec& s) {
  FaultEvent e;
  e.at = Time{} + Duration::from_seconds(r.bounded("at_s", 0.0, 0.0, kMaxSeconds));
  const int given = (r.has("gpu") ? 1 : 0) + (r.has("node") ? 1 : 0) + (r.has("link_node") ? 1 : 0);
  if (given != 1) r.fail("", "give exactly one of gpu, node, link_node (what fails)");
  const int nodes = s.cluster.nodes;
  if (r.has("gpu")) {
    e.kind = FaultKind::kGpu;
    e.target = r.int_in("gpu", 0, s.cluster.total_gpus() - 1);
  } else if (r.has("node")) {
    e.kind = FaultKind::kNode;
    e.target = r.int_in("node", 0, nodes - 1);
  } else {
    e.kind = FaultKind::kLink;
    e.target = r.int_in("link_node", 0, nodes - 1);
    e.bandwidth_factor = r.fraction("bandwidth_factor", 0.5);
    e.duration = Duration::from_seconds(r.bounded("duration_s", 300.0, 1e-6, kMaxSeconds));
  }
  r.finish();
  return e;
}

WeightSource parse_source(JsonReader& r, const ScenarioSpec& s) {
  const std::string from = r.string("weights_from");
  for (const WeightSource w : {WeightSource::kNvme, WeightSource::kHostDram, WeightSource::kPeerNvlink,
                               WeightSource::kPeerNetwork}) {
    if (from != to_string(w)) continue;
    if (w == WeightSource::kPeerNvlink && s.cluster.gpus_per_node < 2)
      r.fail("weights_from", "peer_nvlink needs two GPUs in an NVLink domain");
    return w;
  }
  r.fail("weights_from",
         "unknown source \"" + from + "\" (known: nvme, host_dram, peer_nvlink, peer_network)");
}

void parse_mtbf(JsonReader& r, FaultsSpec& f) {
  auto m = r.optional_object("mtbf");
  if (!m) return;
  f.gpu_mtbf_s = m->bounded("gpu_hours", 0.0, 0.0, kMaxHours) * 3600.0;
  f.node_mtbf_s = m->bounded("node_hours", 0.0, 0.0, kMaxHours) * 3600.0;
  f.link_mtbf_s = m->bounded("link_hours", 0.0, 0.0, kMaxHours) * 3600.0;
  f.link_bandwidth_factor = m->fraction("link_bandwidth_factor", 0.5);
  f.link_duration = Duration::from_seconds(m->bounded("link_duration_s", 300.0, 1e-6, kMaxSeconds));
  m->finish();
  if (f.gpu_mtbf_s <= 0 && f.node_mtbf_s <= 0 && f.link_mtbf_s <= 0)
    m->fail("", "give at least one of gpu_hours, node_hours, link_hours");
}

}  // namespace

FaultsSpec parse_faults(JsonReader& r, const ScenarioSpec& s) {
  FaultsSpec f;
  if (r.has("events")) {
    const Json& arr = r.raw("events");
    const std::string path = r.path_of("events");
    if (!arr.is_array()) throw InputError(path, "expected an array of failures, got " + json_type_name(arr));
    for (std::size_t i = 0; i < arr.size(); ++i) {
      const std::string at = path + "[" + std::to_string(i) + "]";
      if (!arr[i].is_object()) throw InputError(at, "expected an object, got " + json_type_name(arr[i]));
      JsonReader e(arr[i], at);
      f.events.push_back(parse_event(e, s));
    }
    std::stable_sort(f.events.begin(), f.events.end(),
                     [](const FaultEvent& a, const FaultEvent& b) { return a.at < b.at; });
  }
  parse_mtbf(r, f);
  if (!f.enabled()) r.fail("", "give events or mtbf (what fails)");
  const std::string in_flight = r.string("in_flight", "recompute");
  if (in_flight == "fail") {
    f.in_flight = InFlightPolicy::kFail;
  } else if (in_flight != "recompute") {
    r.fail("in_flight", "unknown policy \"" + in_flight + "\" (known: recompute, fail)");
  }
  const std::string recovery = r.string("recovery", "reshard");
  if (recovery == "replace") {
    f.recovery = RecoveryPolicy::kReplace;
  } else if (recovery != "reshard") {
    r.fail("recovery", "unknown policy \"" + recovery + "\" (known: reshard, replace)");
  }
  f.detection = Duration::from_seconds(r.bounded("detect_s", 0.0, 0.0, kMaxSeconds));
  f.replacement = Duration::from_seconds(r.bounded("replacement_s", 0.0, 0.0, kMaxSeconds));
  if (r.has("replacement_s") && f.recovery != RecoveryPolicy::kReplace)
    r.fail("replacement_s", "only with recovery \"replace\"");
  f.spread_copies = r.boolean("spread_copies", false);
  if (f.spread_copies && s.experts.placement != PlacementPolicy::kEplb)
    r.fail("spread_copies", "applies to EPLB's redundant copies: set experts.placement \"eplb\"");
  f.sla_window = Duration::from_seconds(r.bounded("sla_window_s", 60.0, 0.0, kMaxSeconds));
  WeightSource from = s.autoscale.weights_from;
  if (r.has("weights_from") || r.has("engine_start_s") || r.has("cuda_graph_capture_s")) {
    f.reload_from_set = true;
    from = r.has("weights_from") ? parse_source(r, s) : from;
    f.weights_from = static_cast<int>(from);
    f.engine_start = Duration::from_seconds(r.bounded("engine_start_s", 0.0, 0.0, kMaxSeconds));
    f.cuda_graph_capture = Duration::from_seconds(r.bounded("cuda_graph_capture_s", 0.0, 0.0, kMaxSeconds));
  }
  if (from == WeightSource::kPeerNetwork) {
    for (const PoolSpec& p : s.pool_specs()) {
      if (p.instances < 2)
        r.fail(r.has("weights_from") ? "weights_from" : "",
               "a reload from peer_network needs a second instance in every pool (a pool has one)");
    }
  }
  bool migration = s.deployment.kv_migration.enabled();
  for (const PoolSpec& p : s.pools) migration = migration || p.deployment.kv_migration.enabled();
  if (migration)
    r.fail("",
           "failures are not modelled with deployment.kv_migration (a migration could land on a failed "
           "instance); remove one of them");
  r.finish();
  return f;
}

}  // namespace moesim
