// Deployment search (`moesim search`): every legal deployment of a SPEC's model on its GPUs, costed first
// by the static step model (the step planner that `moesim plan` uses, at a steady batch, no queueing), then
// the static Pareto front of output tokens/s per GPU against tokens/s per user verified by discrete-event
// capacity searches under the SLA. Each pruned point keeps why. The results are a pure function of the
// SPEC (and its run seed): thread count and resumption change nothing but the wall time.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hwmodels/gpu_cost_model.h"
#include "sim/app/capacity_search.h"
#include "sim/scenario/json_reader.h"
#include "sim/scenario/search_spec_parser.h"
#include "sim/serving/spec/memory_plan.h"
#include "sim/serving/spec/scenario_spec.h"

namespace moesim {

// The axes of one candidate (what the tables and CSV print).
struct CandidateAxes {
  int nodes = 0;
  int gpus = 0;
  PoolShape shape;
  int ep_size = 0;
  int attention_tp = 0;
  int expert_tp = 0;
  int pipeline_stages = 0;
  int redundant_experts = 0;
  std::string engine;
  std::string weights;
  std::string kv_cache;
  bool two_batch_overlap = false;
  bool mtp = false;
  std::int64_t max_batched_tokens = 0;
  int max_batch_size = 0;
  [[nodiscard]] std::string label() const;
};

// The static step model's steady state: every attention group at its decode batch (the cap, what its KV
// pool holds at the mean context, or what the token budget holds beside the prefill that sustains it; then
// the largest batch whose step meets the SLA's TPOT). Colocated, each step also carries that prefill;
// disaggregated, the prefill pool's rate and the decode pool's rate are in series. No queueing, no batch
// formation, mean lengths.
struct StaticFigures {
  double decode_batch = 0;    // sequences per attention group
  bool kv_limited = false;    // the KV pool, not the cap, sets the batch
  double decode_step_s = 0;   // one decode step at that batch (draft passes included under MTP)
  double prefill_step_s = 0;  // one step of a full token budget of prefill per group
  double tokens_per_s_per_gpu = 0;
  double tokens_per_s_per_user = 0;
  double tpot_s = 0;
  double ttft_s = 0;
  double capacity_req_s = 0;  // whole cluster
  std::string limit;          // what bounds the static throughput
};

// The discrete-event verification: capacity at the SLA and the figures of the run at that rate.
struct SimFigures {
  bool done = false;
  std::string error;  // the capacity search failed (e.g. the SLA holds at no rate)
  double capacity_req_s = 0;
  double fails_req_s = 0;
  int probes = 0;
  double tokens_per_s_per_gpu = 0;
  double tokens_per_s_per_user = 0;  // 1 / mean TPOT
  double ttft_p_s = 0;               // at the SLA percentile
  double tpot_p_s = 0;
  double gpu_hours_per_million_tokens = 0;
  std::string limited_by;
  std::string limited_why;
};

// The simulated figures as search.json and the resume files write them (one writer), and back; the reader
// throws on a missing or mistyped figure (a file of another version).
[[nodiscard]] Json sim_figures_json(const SimFigures& f);
[[nodiscard]] SimFigures sim_figures_from_json(const Json& j);

// Where a candidate ended: the stage that pruned it, or "simulated" / "front".
struct Candidate {
  CandidateAxes axes;
  Json scenario;       // ready to run (the arrival rate of the SPEC's workload)
  std::string status;  // illegal, memory, static-sla, static-dominated, bound-dominated, budget,
                       // simulated, sim-failed, front
  std::string why;
  bool has_static = false;
  StaticFigures st;
  SimFigures sim;
};

struct SearchOptions {
  unsigned jobs = 0;
  std::filesystem::path out_dir;                     // also the resume cache (points/)
  std::function<void(const std::string&)> progress;  // one line per event (stderr)
};

struct SearchResult {
  std::vector<Candidate> candidates;  // enumeration order
  std::vector<std::size_t> front;     // simulated Pareto front, by tokens/s per user ascending
  std::vector<std::size_t> static_front;
  int rounds = 0;
  std::size_t recommended = static_cast<std::size_t>(-1);  // none when nothing held its SLA
  std::string recommendation_note;
  bool output_rank = true;  // under mpirun: only rank 0 writes the outputs
};

// Every combination of the SPEC's axes, as candidate scenarios (no check yet), in a fixed order.
std::vector<Candidate> enumerate_candidates(const SearchSpec& spec);

// The static step model of one deployment, any batch cap: the pools' planners (as `moesim plan` wires
// them), their memory plans and the prefill cost, built once; decode steps are memoised by batch. The
// figures depend on the order of calls (routing is sampled from the planners' streams), which callers keep
// fixed.
struct PoolPlanner;
class StaticModel {
 public:
  StaticModel(const ScenarioSpec& s, const GpuCostModel& gpu);  // every pool fits
  ~StaticModel();
  StaticModel(const StaticModel&) = delete;
  StaticModel& operator=(const StaticModel&) = delete;
  StaticFigures figures(int max_batch_size);

 private:
  double decode_s(double batch);
  double batch_meeting_tpot(double hi, double tpot_s);
  // Prefill tokens per decode sequence and step that keep a colocated batch full: prompt / output x the
  // tokens a sequence emits per step.
  [[nodiscard]] double prefill_tokens_per_seq_step() const { return prompt_ / output_ * tokens_per_step_; }
  const ScenarioSpec& s_;
  std::vector<PoolSpec> pools_;
  std::vector<MemoryPlan> mem_;
  double prompt_ = 0;
  double output_ = 0;
  int draft_tokens_ = 0;
  double tokens_per_step_ = 1;
  std::unique_ptr<PoolPlanner> decode_;
  std::unique_ptr<PoolPlanner> prefill_;  // disaggregated only
  double prefill_step_s_ = 0;
  double prefill_s_per_token_ = 0;
  double ttft_s_ = 0;
  std::map<long long, double> decode_memo_;
};

// Static figures of a parsed candidate scenario (every pool fits) at its own batch cap.
StaticFigures static_figures(const ScenarioSpec& s, const GpuCostModel& gpu);

// Indices of the points not dominated by another (more or equal on both axes and more on one; of equal
// points the first index), sorted by y then x ascending.
struct FrontPoint {
  double x = 0;  // tokens/s per user
  double y = 0;  // tokens/s per GPU
};
std::vector<std::size_t> pareto_front(const std::vector<FrontPoint>& points);

SearchResult run_search(const SearchSpec& spec, const SearchOptions& options);

// The capacity search a verification runs: verify's tolerance and replications, the lower end narrowed.
CapacitySearchSettings capacity_settings(const VerifySettings& v);

}  // namespace moesim
