// Failures in the loop (scenario key `faults`): what fails and when, what happens to the requests on a
// failed instance, how an EP group that lost an expert recovers, and what the report says about it. The
// mechanisms are in faults.h; the cluster acts on them (cluster_operations.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/engine/time.h"

namespace moesim {

// A GPU, a whole node (its GPUs at once), or a node's NIC (every GPU of the node on its network path)
// running at a fraction of its bandwidth for a while.
enum class FaultKind : std::uint8_t { kGpu, kNode, kLink };
[[nodiscard]] inline const char* to_string(FaultKind k) {
  return k == FaultKind::kGpu ? "gpu" : k == FaultKind::kNode ? "node" : "link";
}

struct FaultEvent {
  FaultKind kind = FaultKind::kGpu;
  int target = 0;  // GPU index of the cluster, or node index (node and link)
  Time at;
  Duration duration;            // kLink: how long the NIC stays degraded
  double bandwidth_factor = 1;  // kLink: the share of its bandwidth the NIC keeps, in (0, 1]
};

// Requests on a failed instance or attention rank: recomputed elsewhere (they re-enter routing and are
// prefilled again, prompt and tokens already generated, as vLLM's recompute preemption does), or failed.
enum class InFlightPolicy : std::uint8_t { kRecompute, kFail };
// An EP group whose lost GPUs held an expert no other GPU holds: it stops, then
// - kReshard: restarts at once on its remaining GPUs (the lost GPUs' attention ranks stay out), every
//   remaining GPU reloading its weights for the new placement;
// - kReplace: waits `replacement` for spare GPUs, then restarts on a full set (every GPU reloading).
enum class RecoveryPolicy : std::uint8_t { kReshard, kReplace };

struct FaultsSpec {
  std::vector<FaultEvent> events;  // at given times, sorted by time
  // Mean time between failures of one GPU, one node, one node's NIC, in seconds (hours in the scenario, past
  // the clock's range); zero: none drawn. Failures are exponential per component, drawn from the run's
  // seed (stream "faults").
  double gpu_mtbf_s = 0, node_mtbf_s = 0, link_mtbf_s = 0;
  Duration link_duration = Duration::from_seconds(300.0);  // of a drawn NIC degradation
  double link_bandwidth_factor = 0.5;
  InFlightPolicy in_flight = InFlightPolicy::kRecompute;
  RecoveryPolicy recovery = RecoveryPolicy::kReshard;
  Duration detection;            // from the failure to the restart's start (health check, NCCL timeout)
  Duration replacement;          // kReplace: for spare GPUs to join
  bool reload_from_set = false;  // the reload's path and fixed costs given here (else deployment.autoscale's)
  int weights_from = 0;          // a WeightSource (scenario_spec.h), as an int to keep this header alone
  Duration engine_start, cuda_graph_capture;
  // EPLB's copies of one expert on distinct GPUs where a swap allows (faults.h spread_copies), so that
  // redundant slots cover a lost GPU.
  bool spread_copies = false;
  // The SLA figures "during recovery" are those of the requests finishing from a failure to this long
  // after its recovery ends (the backlog built during the outage drains in it).
  Duration sla_window = Duration::from_seconds(60.0);
  [[nodiscard]] bool enabled() const {
    return !events.empty() || gpu_mtbf_s > 0 || node_mtbf_s > 0 || link_mtbf_s > 0;
  }
};

// One failure as the run handled it.
struct FaultRecord {
  std::string kind;  // gpu, node, link
  int target = 0;
  double at_s = 0;
  int replica = -1;        // the instance hit (-1: none running there, or a link)
  std::string outcome;     // "continued" (redundant experts cover it), "restarted", "idle", "degraded link"
  double recovered_s = 0;  // when the instance took requests again (continued: at_s)
  std::int64_t requests_hit = 0;
};

struct FaultsReport {
  bool enabled = false;
  std::string in_flight;  // recompute or fail
  std::string recovery;   // reshard or replace
  std::int64_t failures = 0;
  std::int64_t continued = 0;  // covered by redundant experts: the instance went on without a restart
  std::int64_t restarts = 0;
  std::int64_t requests_recomputed = 0;
  std::int64_t requests_failed = 0;
  std::int64_t tokens_recomputed = 0;  // KV tokens lost and computed again
  std::int64_t tokens_lost = 0;        // KV tokens lost with failed requests
  // Time-weighted share of the attention ranks taking requests, over the run.
  double availability = 1;
  double recovery_mean_s = 0;  // from failure to taking requests again, over the restarts
  double recovery_max_s = 0;
  // The requests finishing during recovery (FaultsSpec::sla_window): SLA percentile figures and violations.
  std::int64_t recovery_finished = 0;
  double recovery_ttft_p_s = 0;
  double recovery_tpot_p_s = 0;
  std::int64_t recovery_sla_violations = 0;
  std::vector<FaultRecord> records;
};

}  // namespace moesim
