// Failures in the loop (fault_spec.h): whether redundant expert copies cover a lost GPU (a policy over the
// placement), when the next failure comes (the scenario's times, or exponential draws from an MTBF per
// component), and the run's fault state and tally behind report.json's `faults`. The cluster acts on them
// (cluster_operations.cpp: evicts, halts, reloads, resumes).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "sim/engine/random.h"
#include "sim/engine/time.h"
#include "sim/serving/experts/placement.h"
#include "sim/serving/report/latency_histogram.h"
#include "sim/serving/runtime/request.h"
#include "sim/serving/spec/fault_spec.h"

namespace moesim {

// Whether every expert of every layer keeps a slot on a rank not in `lost` (one flag per rank of the
// placement): then its tokens go to the surviving copies (EPLB splits an expert's tokens over its copies)
// and the EP group can go on without the lost ranks. O(layers x slots).
[[nodiscard]] bool experts_covered(const Placement& p, std::span<const char> lost);

// Moves copies so that no GPU holds two copies of one expert where a swap can avoid it
// (faults.spread_copies): EPLB packs replicas by load alone and can put an expert's copies on one GPU (with
// equal loads it puts both copies of every expert together), which then covers nothing. For each GPU with a
// duplicate, the first other GPU (in index order from the next) that holds a slot of an expert the first
// lacks and lacks the duplicate swaps that slot for it. Slots per GPU are kept; GPU loads move by the swapped
// experts' load differences. Deterministic; O(layers x slots^2) at placement time, not per step.
void spread_copies(Placement& p);

// The failures of a run in time order: the scenario's events merged with draws from the MTBFs. Each kind
// is a Poisson process over its components (a GPU's failures at rate 1/mtbf, so the cluster's at
// components/mtbf), its component uniform among them: the superposition of independent exponential
// lifetimes, renewed at each failure (a repaired or replaced component fails again at the same rate).
class FaultSchedule {
 public:
  FaultSchedule(const FaultsSpec& spec, int gpus, int nodes, const RandomStreams& streams);
  // The next failure at or after the last one returned; nullopt when none is left.
  [[nodiscard]] std::optional<FaultEvent> next();

 private:
  struct Process {
    FaultKind kind;
    int components;
    double rate_per_s;  // components / mtbf
    Rng rng;
    std::optional<FaultEvent> pending;
  };
  void draw(Process& p, Time after);
  const FaultsSpec& spec_;
  std::size_t given_ = 0;
  std::vector<Process> processes_;
};

// The run's fault state per instance and its tally. Ranks are GPU indices inside an instance.
class FaultTracker {
 public:
  FaultTracker(const FaultsSpec& spec, double sla_percentile, Duration ttft_limit, Duration tpot_limit);
  // One instance of `gpus` GPUs whose attention ranks are `groups` groups of `tp` GPUs (GPUs beyond
  // groups x tp, pipeline stages, belong to no rank).
  void add_instance(int gpus, int groups, int tp);

  [[nodiscard]] bool down(int replica) const { return inst_[static_cast<std::size_t>(replica)].down; }
  [[nodiscard]] bool group_lost(int replica, int group) const {
    return inst_[static_cast<std::size_t>(replica)].group_lost[static_cast<std::size_t>(group)] != 0;
  }
  [[nodiscard]] bool takes_requests(int replica, int group) const {
    return !down(replica) && !group_lost(replica, group);
  }
  [[nodiscard]] std::span<const char> lost_ranks(int replica) const {
    return inst_[static_cast<std::size_t>(replica)].lost;
  }
  // Marks `rank` of `replica` lost at `now`; returns the attention group it served (-1: none).
  int lose_rank(int replica, int rank, Time now);
  // The instance stops taking requests (a restart is on its way).
  void set_down(int replica, Time now);
  // It takes requests again; with `replaced`, its lost GPUs are back.
  void set_up(int replica, bool replaced, Time now);

  // The requests the cluster evicted and what became of them.
  void on_recomputed(const Request& r) {
    ++report_.requests_recomputed, report_.tokens_recomputed += r.computed;
  }
  void on_failed(const Request& r) { ++report_.requests_failed, report_.tokens_lost += r.computed; }
  [[nodiscard]] std::int64_t failed() const { return report_.requests_failed; }
  // A request finished at `now`: its latencies count for recovery when within a recovery window.
  void on_finished(const Request& r, Time now);

  // Records failure `e` of `replica` (-1: none) with its outcome: "continued", "restarted", "restarting",
  // "idle" or "degraded link"; a continued or restarted one opens a recovery window (sla_window).
  FaultRecord& record(const FaultEvent& e, int replica, const char* outcome);
  // The restart of record `record` (an index) ended at `recovered`: its window closes sla_window later.
  void on_recovered(std::size_t record, Time recovered);
  [[nodiscard]] std::size_t records() const { return report_.records.size(); }

  // The report at the end of a run at `end`.
  [[nodiscard]] FaultsReport report(Time end) const;

 private:
  struct Instance {
    std::vector<char> lost;        // per GPU
    std::vector<char> group_lost;  // per attention group
    int tp = 1;
    bool down = false;
  };
  // Ranks not taking requests changes at `now`: the availability integral up to it.
  void ranks_changed(Time now);
  [[nodiscard]] int ranks_out() const;

  const FaultsSpec& spec_;
  double percentile_;
  Duration ttft_limit_, tpot_limit_;
  std::vector<Instance> inst_;
  int ranks_ = 0;
  int out_ = 0;
  Time out_since_;
  double out_rank_s_ = 0;  // integral of ranks out over time
  // Recovery windows [failure, recovered + sla_window] as closed so far and open (recovered unknown yet).
  std::vector<std::pair<Time, Time>> windows_;
  LatencyHistogram ttft_, tpot_;
  FaultsReport report_;
};

}  // namespace moesim
