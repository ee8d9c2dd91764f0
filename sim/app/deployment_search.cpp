#include "sim/app/deployment_search.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "sim/app/capacity_search.h"
#include "sim/app/task_pool.h"
#include "sim/engine/check.h"
#include "sim/engine/random.h"
#include "sim/scenario/profile_io.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/features/speculative.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/step/serving_models.h"
#include "sim/serving/step/step_planner.h"

namespace moesim {

namespace {

std::string fixed(double x, int digits) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(digits);
  o << x;
  return o.str();
}

// ---- Enumeration ------------------------------------------------------------------------------------

// EP sizes that tile `instance_gpus` GPUs per pipeline stage: a divisor of a node or whole nodes.
std::vector<int> default_ep_sizes(int stage_gpus, int gpus_per_node) {
  std::vector<int> out;
  for (int e = 1; e <= stage_gpus; ++e) {
    const bool tiles = e <= gpus_per_node ? gpus_per_node % e == 0 : e % gpus_per_node == 0;
    if (tiles && stage_gpus % e == 0) out.push_back(e);
  }
  return out;
}

Json candidate_json(const SearchSpec& s, const CandidateAxes& a) {
  Json dep = s.deployment.is_null() ? Json::object() : s.deployment;
  dep["ep_size"] = a.ep_size;
  dep["attention"] = Json{{"tp", a.attention_tp}};
  dep["engine"] = a.engine;
  if (a.pipeline_stages > 1) dep["pipeline"] = Json{{"stages", a.pipeline_stages}};
  if (a.expert_tp > 1) dep["expert_tp_size"] = a.expert_tp;
  dep["max_batch_size"] = a.max_batch_size;
  dep["max_batched_tokens"] = a.max_batched_tokens;
  if (a.two_batch_overlap) dep["two_batch_overlap"] = true;
  // MTP: DeepSeek-V3's published module (one draft token accepted 85% of the time).
  if (a.mtp) dep["speculative"] = "deepseek-v3-mtp";
  if (!a.shape.colocated()) {
    dep["pools"] = Json::array({Json{{"role", "prefill"}, {"instances", a.shape.prefill}},
                                Json{{"role", "decode"}, {"instances", a.shape.decode}}});
  }
  Json cluster{{"gpu", s.gpu}, {"nodes", a.nodes}, {"gpus_per_node", s.gpus_per_node}};
  if (!s.fabric.is_null()) cluster["fabric"] = s.fabric;
  Json j{{"name", s.name + "-" + a.label()},
         {"description", "Candidate of moesim search " + s.name + ": " + a.label()},
         {"model", s.model},
         {"precision", Json{{"weights", a.weights}, {"kv_cache", a.kv_cache}}},
         {"cluster", cluster},
         {"deployment", dep},
         {"workload", s.workload},
         {"sla", s.sla},
         {"run", s.run}};
  Json experts = s.experts.is_null() ? Json::object() : s.experts;
  if (a.redundant_experts > 0) {
    experts["placement"] = "eplb";
    experts["redundant_experts"] = a.redundant_experts;
  }
  if (!experts.empty()) j["experts"] = experts;
  return j;
}

// The instance shapes (EP size per stage) of one node count, pool shape and stage count.
std::vector<int> instance_ep_sizes(const SearchSpec& s, int gpus, const PoolShape& shape, int stages) {
  const int instances = shape.colocated() ? 1 : shape.prefill + shape.decode;
  if (gpus % instances != 0) return {};
  const int per_instance = gpus / instances;
  if (per_instance % stages != 0) return {};
  std::vector<int> eps;
  if (shape.colocated()) {
    eps = default_ep_sizes(per_instance / stages, s.gpus_per_node);
  } else {
    eps.push_back(per_instance / stages);  // an xPyD instance is one EP group per stage
  }
  if (!s.space.ep_sizes.empty()) {
    std::erase_if(eps, [&](int e) {
      return std::find(s.space.ep_sizes.begin(), s.space.ep_sizes.end(), e) == s.space.ep_sizes.end();
    });
  }
  // Colocated: ep x stages must tile the cluster (an instance count).
  if (shape.colocated()) std::erase_if(eps, [&](int e) { return gpus % (e * stages) != 0; });
  return eps;
}

// ---- Static step model --------------------------------------------------------------------------------

double mean_step_s(StandalonePlanner& planner, Time& clock, std::span<const GroupBatch> groups, int steps) {
  double total = 0;
  for (int i = 0; i < steps; ++i) {
    const StepPlan& sp = planner.plan(groups, clock);
    clock += sp.total;
    total += sp.total.seconds();
  }
  return total / steps;
}

constexpr int kStaticSteps = 3;  // planner steps averaged per static figure (routing is sampled)

}  // namespace

// One pool's planner, as `moesim plan` wires it (capacity_plan.cpp add_rows).
struct PoolPlanner {
  std::unique_ptr<ScenarioSpec> view;
  std::unique_ptr<RandomStreams> streams;
  std::unique_ptr<ServingModels> models;
  StandalonePlanner planner;
  Time clock;
  PoolPlanner(const ScenarioSpec& s, const PoolSpec& p, const GpuCostModel& gpu)
      : view(std::make_unique<ScenarioSpec>(s.disaggregated() ? s.pool_view(p) : s)),
        streams(std::make_unique<RandomStreams>(s.run.seed)),
        models(std::make_unique<ServingModels>(*view, *streams)),
        planner(models->make_standalone(gpu, streams->stream("plan-routing"))) {}
  [[nodiscard]] int groups() const { return view->deployment.attention_dp; }

  // A decode step of `b` sequences per group at context `ctx` (k draft tokens each under speculation;
  // the planner adds the draft passes itself).
  double decode_s(double b, double ctx, int k) {
    const auto n = static_cast<std::int64_t>(std::llround(b));
    double draft_pairs = 0;
    for (int i = 1; i <= k; ++i) draft_pairs += ctx + i;
    std::vector<GroupBatch> g(static_cast<std::size_t>(groups()),
                              GroupBatch{.decode_seqs = n,
                                         .decode_context_tokens = static_cast<double>(n) * ctx,
                                         .sampled_seqs = n * (k + 1),
                                         .decode_draft_tokens = n * k,
                                         .decode_draft_pairs = static_cast<double>(n) * draft_pairs,
                                         .request_token_pairs = static_cast<double>(n) * k * (k + 1)});
    return mean_step_s(planner, clock, g, kStaticSteps);
  }
  // Chunked prefill's mixed step: `b` decode sequences as decode_s plus `chunk` prefill tokens per group
  // from a prompt of `prompt` tokens, a chunk attending on average to half the prompt before it.
  double mixed_s(double b, double ctx, int k, double chunk, double prompt) {
    const auto n = static_cast<std::int64_t>(std::llround(b));
    const auto c = static_cast<std::int64_t>(std::llround(chunk));
    double draft_pairs = 0;
    for (int i = 1; i <= k; ++i) draft_pairs += ctx + i;
    const double before = 0.5 * std::max(0.0, prompt - chunk);
    std::vector<GroupBatch> g(
        static_cast<std::size_t>(groups()),
        GroupBatch{.decode_seqs = n,
                   .decode_context_tokens = static_cast<double>(n) * ctx,
                   .prefill_tokens = c,
                   .prefill_pairs = static_cast<double>(c) * before +
                                    static_cast<double>(c) * static_cast<double>(c + 1) / 2.0,
                   .prefill_kv_tokens = before + static_cast<double>(c),
                   .sampled_seqs = n * (k + 1),
                   .decode_draft_tokens = n * k,
                   .decode_draft_pairs = static_cast<double>(n) * draft_pairs,
                   .request_token_pairs = static_cast<double>(n) * k * (k + 1) +
                                          static_cast<double>(c) * static_cast<double>(c - 1)});
    return mean_step_s(planner, clock, g, kStaticSteps);
  }
  // A step of `chunk` prefill tokens per group, whole prompts of `prompt` tokens (one chunk when longer),
  // as plan's prefill row.
  double prefill_s(std::int64_t chunk, double prompt) {
    const double p = std::min(prompt, static_cast<double>(chunk));
    const double n = static_cast<double>(chunk) / p;
    std::vector<GroupBatch> g(static_cast<std::size_t>(groups()),
                              GroupBatch{.prefill_tokens = chunk,
                                         .prefill_pairs = n * p * (p + 1) / 2,
                                         .prefill_kv_tokens = n * p,
                                         .sampled_seqs = std::max<std::int64_t>(1, std::llround(n)),
                                         .request_token_pairs = n * p * (p - 1)});
    return mean_step_s(planner, clock, g, kStaticSteps);
  }
};

namespace {

struct Lengths {
  double prompt = 0;
  double output = 0;
};

// Decode sequences per group: the cap, or what the KV pool holds at the mean occupancy of a sequence
// over its life (prompt + half the output: PagedAttention allocates blocks as tokens come, Kwon et al.,
// SOSP 2023).
double decode_batch(const DeploymentSpec& d, const MemoryPlan& m, const Lengths& l, bool& kv_limited) {
  const double by_kv = std::floor(static_cast<double>(m.kv_tokens_per_group) / (l.prompt + 0.5 * l.output));
  kv_limited = by_kv < d.max_batch_size;
  return std::min<double>(d.max_batch_size, by_kv);
}

}  // namespace

std::string CandidateAxes::label() const {
  std::string s = std::to_string(gpus) + "gpu-" + shape.label() + "-ep" + std::to_string(ep_size) + "-tp" +
                  std::to_string(attention_tp);
  if (expert_tp > 1) s += "-etp" + std::to_string(expert_tp);
  if (pipeline_stages > 1) s += "-pp" + std::to_string(pipeline_stages);
  if (redundant_experts > 0) s += "-r" + std::to_string(redundant_experts);
  s += "-" + engine + "-" + weights + "-kv" + kv_cache;
  if (two_batch_overlap) s += "-tbo";
  if (mtp) s += "-mtp";
  s += "-t" + std::to_string(max_batched_tokens) + "-b" + std::to_string(max_batch_size);
  return s;
}

namespace {

// Advances a mixed-radix counter (the last digit fastest); false after the last combination.
template <std::size_t N>
bool advance(std::array<std::size_t, N>& digit, const std::array<std::size_t, N>& size) {
  for (std::size_t k = N; k-- > 0;) {
    if (++digit[k] < size[k]) return true;
    digit[k] = 0;
  }
  return false;
}

}  // namespace

std::vector<Candidate> enumerate_candidates(const SearchSpec& spec) {
  std::vector<Candidate> out;
  const SearchSpace& sp = spec.space;
  // The axes inside one instance shape, the batch cap fastest (the static pass groups by it).
  const std::array<std::size_t, 10> size{
      sp.attention_tp.size(),      sp.expert_tp.size(), sp.redundant_experts.size(),
      sp.engines.size(),           sp.weights.size(),   sp.kv_cache.size(),
      sp.two_batch_overlap.size(), sp.mtp.size(),       sp.max_batched_tokens.size(),
      sp.max_batch_size.size()};
  for (const int nodes : spec.nodes) {
    const int gpus = nodes * spec.gpus_per_node;
    for (const PoolShape& shape : sp.pool_shapes) {
      for (const int stages : sp.pipeline_stages) {
        for (const int ep : instance_ep_sizes(spec, gpus, shape, stages)) {
          std::array<std::size_t, 10> d{};
          do {
            Candidate c;
            c.axes = CandidateAxes{.nodes = nodes,
                                   .gpus = gpus,
                                   .shape = shape,
                                   .ep_size = ep,
                                   .attention_tp = sp.attention_tp[d[0]],
                                   .expert_tp = sp.expert_tp[d[1]],
                                   .pipeline_stages = stages,
                                   .redundant_experts = sp.redundant_experts[d[2]],
                                   .engine = sp.engines[d[3]],
                                   .weights = sp.weights[d[4]],
                                   .kv_cache = sp.kv_cache[d[5]],
                                   .two_batch_overlap = sp.two_batch_overlap[d[6]],
                                   .mtp = sp.mtp[d[7]],
                                   .max_batched_tokens = sp.max_batched_tokens[d[8]],
                                   .max_batch_size = sp.max_batch_size[d[9]]};
            c.scenario = candidate_json(spec, c.axes);
            out.push_back(std::move(c));
          } while (advance(d, size));
        }
      }
    }
  }
  return out;
}

StaticModel::StaticModel(const ScenarioSpec& s, const GpuCostModel& gpu)
    : s_(s),
      pools_(s.pool_specs()),
      mem_(deployed_memory_plans(s, gpu)),
      prompt_(std::max(1.0, mean_length(s.workload.prompt))),
      output_(std::max(1.0, mean_length(s.workload.output))),
      draft_tokens_(s.production.speculative ? s.production.speculative->draft_tokens : 0),
      tokens_per_step_(s.production.speculative ? expected_tokens_per_step(*s.production.speculative) : 1.0) {
  decode_ = std::make_unique<PoolPlanner>(s, pools_.back(), gpu);
  if (pools_.size() > 1) prefill_ = std::make_unique<PoolPlanner>(s, pools_.front(), gpu);
  PoolPlanner& pf = prefill_ ? *prefill_ : *decode_;
  const std::int64_t chunk = pools_.front().deployment.max_batched_tokens;
  prefill_step_s_ = pf.prefill_s(chunk, prompt_);
  prefill_s_per_token_ = prefill_step_s_ / static_cast<double>(chunk * pf.groups());
  ttft_s_ = std::ceil(prompt_ / static_cast<double>(chunk)) * prefill_step_s_;
}

StaticModel::~StaticModel() = default;

double StaticModel::decode_s(double b) {
  const auto key = std::llround(b);
  const auto it = decode_memo_.find(key);
  if (it != decode_memo_.end()) return it->second;
  const double ctx = prompt_ + 0.5 * output_;  // a decoding sequence's mean context over its life
  const auto n = static_cast<double>(key);
  // Colocated: each step also carries the prefill that sustains its batch, prompt/output tokens per
  // emitted token (Sarathi-Serve's chunked prefill, OSDI 2024: decodes piggyback on prefill chunks).
  const double t = s_.disaggregated()
                       ? decode_->decode_s(n, ctx, draft_tokens_)
                       : decode_->mixed_s(n, ctx, draft_tokens_, prefill_tokens_per_seq_step() * n, prompt_);
  decode_memo_.emplace(key, t);
  return t;
}

// The largest batch in [1, hi] whose step meets `tpot_s` per emitted token (steps grow with the batch);
// 0 when even one sequence does not.
double StaticModel::batch_meeting_tpot(double hi, double tpot_s) {
  auto ok = [&](double b) { return decode_s(b) / tokens_per_step_ <= tpot_s; };
  if (ok(hi)) return hi;
  if (!ok(1)) return 0;
  double lo = 1;
  while (hi - lo > 1) {
    const double mid = std::floor(0.5 * (lo + hi));
    (ok(mid) ? lo : hi) = mid;
  }
  return lo;
}

StaticFigures StaticModel::figures(int max_batch_size) {
  StaticFigures f;
  f.prefill_step_s = prefill_step_s_;
  f.ttft_s = ttft_s_;
  DeploymentSpec dd = pools_.back().deployment;
  dd.max_batch_size = max_batch_size;
  const Lengths l{.prompt = prompt_, .output = output_};
  const double e = tokens_per_step_;
  double b = decode_batch(dd, mem_.back(), l, f.kv_limited);
  f.limit = f.kv_limited ? "KV pool (batch " + fixed(b, 0) + ")" : "batch cap";
  if (!s_.disaggregated()) {
    // The token budget holds the batch and the prefill that sustains it.
    const double by_budget =
        std::floor(static_cast<double>(dd.max_batched_tokens) / (1 + prefill_tokens_per_seq_step()));
    if (by_budget < b) {
      b = by_budget;
      f.limit = "token budget (batch " + fixed(b, 0) + ")";
    }
  }
  if (b < 1) {
    f.limit = f.kv_limited ? "KV pool holds no mean request" : "token budget holds no sequence";
    return f;
  }
  f.decode_step_s = decode_s(b);
  if (f.decode_step_s / e > s_.sla.tpot.seconds()) {
    // The capacity search lowers the load until TPOT holds: the batch the SLA allows.
    b = batch_meeting_tpot(b, s_.sla.tpot.seconds());
    f.limit = "TPOT (batch " + fixed(b, 0) + " of " + std::to_string(max_batch_size) + ")";
    if (b < 1) return f;
    f.decode_step_s = decode_s(b);
  }
  f.decode_batch = b;
  f.tpot_s = f.decode_step_s / e;
  f.tokens_per_s_per_user = 1 / f.tpot_s;
  const double groups = decode_->groups();
  const double gpus = s_.cluster.total_gpus();
  if (!s_.disaggregated()) {
    f.tokens_per_s_per_gpu = b * groups * e / f.decode_step_s / dd.gpus_per_instance();
    f.capacity_req_s = f.tokens_per_s_per_gpu * gpus / output_;
    return f;
  }
  // Disaggregated: prefill and decode pools in series, the slower sets the rate (DistServe, OSDI 2024,
  // sizes its pools by the same per-phase rates).
  const double prefill_req_s = pools_.front().instances / (prompt_ * prefill_s_per_token_);
  const double decode_req_s = pools_.back().instances * b * groups * e / f.decode_step_s / output_;
  f.capacity_req_s = std::min(prefill_req_s, decode_req_s);
  if (prefill_req_s < decode_req_s) f.limit = "prefill pool";
  f.tokens_per_s_per_gpu = f.capacity_req_s * output_ / gpus;
  return f;
}

StaticFigures static_figures(const ScenarioSpec& s, const GpuCostModel& gpu) {
  StaticModel m(s, gpu);
  return m.figures(s.pool_specs().back().deployment.max_batch_size);
}

std::vector<std::size_t> pareto_front(const std::vector<FrontPoint>& pts) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    bool dominated = false;
    for (std::size_t j = 0; j < pts.size() && !dominated; ++j) {
      if (j == i) continue;
      const bool ge = pts[j].x >= pts[i].x && pts[j].y >= pts[i].y;
      const bool equal = pts[j].x == pts[i].x && pts[j].y == pts[i].y;
      dominated = ge && (!equal || j < i);
    }
    if (!dominated) out.push_back(i);
  }
  std::sort(out.begin(), out.end(),
            [&](std::size_t a, std::size_t b) { return pts[a].x != pts[b].x ? pts[a].x < pts[b].x : a < b; });
  return out;
}

CapacitySearchSettings capacity_settings(const VerifySettings& v) {
  CapacitySearchSettings st;
  st.rel_tol = v.capacity_tol;
  st.replications = v.replications;
  st.max_replications = v.max_replications;
  st.narrow_fails = false;
  return st;
}

namespace {

// ---- Checking, static pass, verification rounds -----------------------------------------------------

// Parses a candidate and checks that every pool fits (as `validate` decides); the reason otherwise.
// `gpu` is made from the first parsed candidate (every candidate has the SPEC's GPU) and reused.
std::unique_ptr<ScenarioSpec> check_candidate(Candidate& c, std::unique_ptr<GpuCostModel>& gpu) {
  try {
    LoadedScenario sc = parse_scenario(c.scenario, ".");
    try {
      if (!gpu) gpu = make_gpu_cost_model(sc.spec.cluster.gpu);
      check_deployment_fits(sc.spec, *gpu);
    } catch (const InputError& e) {
      c.status = "memory";
      c.why = e.what();
      return nullptr;
    }
    return std::make_unique<ScenarioSpec>(std::move(sc.spec));
  } catch (const InputError& e) {
    c.status = "illegal";
    c.why = e.what();
    return nullptr;
  }
}

// The static figures of a legal candidate and whether they pass the SLA as far as a static model can tell.
void judge_static(Candidate& c, const ScenarioSpec& spec, StaticModel& model) {
  c.st = model.figures(c.axes.max_batch_size);
  c.has_static = true;
  const double tpot = spec.sla.tpot.seconds();
  const double ttft = spec.sla.ttft.seconds();
  if (c.st.decode_batch < 1 && c.st.limit.rfind("KV", 0) == 0) {
    c.status = "memory";
    c.why = "the KV pool of a group holds no request of mean length";
  } else if (c.st.decode_batch < 1 && c.st.limit.rfind("token budget", 0) == 0) {
    c.status = "illegal";
    c.why = "the token budget (max_batched_tokens " + std::to_string(c.axes.max_batched_tokens) +
            ") holds no decode sequence beside the prefill that keeps it busy";
  } else if (c.st.decode_batch < 1) {
    c.status = "static-sla";
    c.why =
        "the static TPOT exceeds the SLA's " + fixed(tpot * 1e3, 0) + " ms even at one sequence per group";
  } else if (c.st.ttft_s > ttft) {
    c.status = "static-sla";
    c.why = "static TTFT (prefill of the mean prompt, no queueing) " + fixed(c.st.ttft_s * 1e3, 0) +
            " ms exceeds the SLA's " + fixed(ttft * 1e3, 0) + " ms";
  } else {
    c.status = "static-ok";
  }
}

// Runs of consecutive candidates that differ only in the batch cap (the innermost axis): one static model
// each.
std::vector<std::pair<std::size_t, std::size_t>> cap_groups(const std::vector<Candidate>& cs) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  auto stem = [](const CandidateAxes& a) {
    CandidateAxes b = a;
    b.max_batch_size = 0;
    return b.label();
  };
  for (std::size_t i = 0; i < cs.size();) {
    std::size_t j = i + 1;
    const std::string key = stem(cs[i].axes);
    while (j < cs.size() && stem(cs[j].axes) == key) ++j;
    out.emplace_back(i, j);
    i = j;
  }
  return out;
}

// Parse, fit and static figures of every candidate on `jobs` threads (a group of caps per task, each
// writing only its own entries, in a fixed order).
void static_pass(std::vector<Candidate>& cs, unsigned jobs, const SearchOptions& o) {
  const auto groups = cap_groups(cs);
  std::atomic<std::size_t> next{0};
  std::size_t done = 0;
  std::size_t reported = 0;
  std::mutex io;
  const auto start = std::chrono::steady_clock::now();
  auto worker = [&] {
    std::unique_ptr<GpuCostModel> gpu;  // outlives the planners that hold it
    for (std::size_t g = next++; g < groups.size(); g = next++) {
      std::unique_ptr<ScenarioSpec> first;
      std::unique_ptr<StaticModel> model;
      for (std::size_t i = groups[g].first; i < groups[g].second; ++i) {
        std::unique_ptr<ScenarioSpec> spec = check_candidate(cs[i], gpu);
        if (!spec) continue;
        if (!model) {
          first = std::move(spec);
          model = std::make_unique<StaticModel>(*first, *gpu);
        }
        judge_static(cs[i], *first, *model);
      }
      const std::lock_guard<std::mutex> lock(io);
      done += groups[g].second - groups[g].first;
      if (o.progress && (done >= reported + 500 || done == cs.size())) {
        reported = done;
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        o.progress("static: " + std::to_string(done) + "/" + std::to_string(cs.size()) +
                   " candidates costed (" + fixed(el, 1) + " s, ~" +
                   fixed(el / static_cast<double>(done) * static_cast<double>(cs.size() - done), 0) +
                   " s left)");
      }
    }
  };
  const unsigned n = std::max(1u, std::min<unsigned>(jobs, static_cast<unsigned>(groups.size())));
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
}

// The capacity search at the SLA from a start rate near the static capacity; figures of the run there.
SimFigures simulate_candidate(const Json& scenario, double start_req_s, const VerifySettings& v) {
  SimFigures f;
  f.done = true;
  try {
    const LoadedScenario sc = parse_scenario(scenario, ".");
    const auto gpu = make_gpu_cost_model(sc.spec.cluster.gpu);
    const CapacityResult r =
        capacity_at_sla(with_arrival_rate(sc.spec, start_req_s), *gpu, capacity_settings(v));
    const Report& rep = r.at_capacity;
    f.capacity_req_s = r.bracket.holds_req_s;
    f.fails_req_s = r.bracket.fails_req_s;
    f.probes = r.bracket.probes;
    f.tokens_per_s_per_gpu = rep.output_tokens_per_s_per_gpu;
    f.tokens_per_s_per_user = rep.tpot.mean > 0 ? 1 / rep.tpot.mean : 0;
    f.ttft_p_s = rep.sla_ttft_at_percentile;
    f.tpot_p_s = rep.sla_tpot_at_percentile;
    f.gpu_hours_per_million_tokens =
        rep.output_tokens_per_s_per_gpu > 0 ? 1e6 / (3600 * rep.output_tokens_per_s_per_gpu) : 0;
    f.limited_by = rep.limit.name;
    f.limited_why = rep.limit.why;
  } catch (const InputError& e) {
    f.error = e.what();
  }
  return f;
}

// FNV-1a of the text: the resume file of a point, by what defines its simulation.
std::string text_key(const std::string& text) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Simulates (or reads back from the output folder) one point; the result as JSON text.
std::string verify_point(const Candidate& c, const SearchSpec& spec, const std::filesystem::path& dir) {
  const double start = std::max(1e-3, 0.8 * c.st.capacity_req_s);
  // Everything the point's figures depend on: a folder of another version's points is simulated again.
  const Json key{{"scenario", c.scenario},
                 {"start_req_s", start},
                 {"capacity_tol", spec.verify.capacity_tol},
                 {"replications", {spec.verify.replications, spec.verify.max_replications}},
                 {"capacity_method", "replications"}};
  const std::string key_text = key.dump();
  const std::filesystem::path file = dir / "points" / (text_key(key_text) + ".json");
  if (std::filesystem::exists(file)) {
    try {
      const Json saved = load_json_file(file.string());
      // Read back only what this version can read in full (sim_from_json throws on a missing or mistyped
      // figure, e.g. a folder written by another version), so that a stale file is simulated again here
      // rather than failing later, when the figures are assembled.
      if (saved.at("key") == key) {
        (void)sim_figures_from_json(saved.at("sim"));
        return saved.at("sim").dump();
      }
    } catch (const std::exception&) {  // a partial, foreign or older-format file: simulate again
    }
  }
  const Json sim = sim_figures_json(simulate_candidate(c.scenario, start, spec.verify));
  std::filesystem::create_directories(file.parent_path());
  const std::filesystem::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << Json{{"key", key}, {"sim", sim}}.dump() << "\n";
  }
  std::filesystem::rename(tmp, file);  // whole files only: an interrupted search leaves no half point
  return sim.dump();
}

FrontPoint static_point(const Candidate& c) {
  return FrontPoint{.x = c.st.tokens_per_s_per_user, .y = c.st.tokens_per_s_per_gpu};
}
FrontPoint sim_point(const Candidate& c) {
  return FrontPoint{.x = c.sim.tokens_per_s_per_user, .y = c.sim.tokens_per_s_per_gpu};
}
bool simulated_ok(const Candidate& c) {
  return c.sim.done && c.sim.error.empty() && c.sim.capacity_req_s > 0;
}

// The simulated front: indices into cs.
std::vector<std::size_t> simulated_front(const std::vector<Candidate>& cs) {
  std::vector<std::size_t> ids;
  std::vector<FrontPoint> pts;
  for (std::size_t i = 0; i < cs.size(); ++i) {
    if (simulated_ok(cs[i])) {
      ids.push_back(i);
      pts.push_back(sim_point(cs[i]));
    }
  }
  std::vector<std::size_t> out;
  for (const std::size_t k : pareto_front(pts)) out.push_back(ids[k]);
  return out;
}

// The most favourable simulated/static ratio seen on each axis among the simulated points of the same
// family (colocated, or disaggregated: the static model errs alike within one), else among all, else 1.
FrontPoint best_ratios(const std::vector<Candidate>& cs, bool colocated) {
  FrontPoint fam{.x = 0, .y = 0};
  FrontPoint all{.x = 0, .y = 0};
  for (const Candidate& c : cs) {
    if (!simulated_ok(c) || c.st.tokens_per_s_per_user <= 0 || c.st.tokens_per_s_per_gpu <= 0) continue;
    const double rx = c.sim.tokens_per_s_per_user / c.st.tokens_per_s_per_user;
    const double ry = c.sim.tokens_per_s_per_gpu / c.st.tokens_per_s_per_gpu;
    all = FrontPoint{.x = std::max(all.x, rx), .y = std::max(all.y, ry)};
    if (c.axes.shape.colocated() == colocated)
      fam = FrontPoint{.x = std::max(fam.x, rx), .y = std::max(fam.y, ry)};
  }
  if (fam.x > 0) return fam;
  return all.x > 0 ? all : FrontPoint{.x = 1, .y = 1};
}

// The index of a front point that dominates `p`, or -1.
std::ptrdiff_t dominator(const std::vector<Candidate>& cs, const std::vector<std::size_t>& front,
                         FrontPoint p) {
  for (const std::size_t f : front) {
    const FrontPoint q = sim_point(cs[f]);
    if (q.x >= p.x && q.y >= p.y) return static_cast<std::ptrdiff_t>(f);
  }
  return -1;
}

// The optimistic figures of an unsimulated point: static times the best ratios seen, plus the margin.
FrontPoint bound_of(const Candidate& c, FrontPoint ratios, double margin) {
  return FrontPoint{.x = c.st.tokens_per_s_per_user * ratios.x * (1 + margin),
                    .y = c.st.tokens_per_s_per_gpu * ratios.y * (1 + margin)};
}

std::string point_text(FrontPoint p) {
  return fixed(p.x, 1) + " tok/s/user, " + fixed(p.y, 1) + " tok/s/GPU";
}

// The next round: the static front of the unsimulated points whose bound the simulated front does not
// dominate.
std::vector<std::size_t> next_round(const std::vector<Candidate>& cs, const SearchSpec& spec) {
  const std::vector<std::size_t> front = simulated_front(cs);
  const FrontPoint ratios[2] = {best_ratios(cs, false), best_ratios(cs, true)};
  std::vector<std::size_t> open;
  std::vector<FrontPoint> pts;
  for (std::size_t i = 0; i < cs.size(); ++i) {
    const Candidate& c = cs[i];
    if (c.status != "static-ok" || c.sim.done) continue;
    const FrontPoint r = ratios[c.axes.shape.colocated() ? 1 : 0];
    if (dominator(cs, front, bound_of(c, r, spec.verify.margin)) >= 0) continue;
    open.push_back(i);
    pts.push_back(static_point(c));
  }
  std::vector<std::size_t> out;
  for (const std::size_t k : pareto_front(pts)) out.push_back(open[k]);
  return out;
}

std::string front_summary(const std::vector<Candidate>& cs) {
  const std::vector<std::size_t> f = simulated_front(cs);
  std::string s = "front so far: " + std::to_string(f.size()) + " point(s)";
  for (const std::size_t i : f) s += "\n    " + point_text(sim_point(cs[i])) + "  " + cs[i].axes.label();
  return s;
}

// Final statuses of the points the rounds left unsimulated, and of the simulated ones.
void settle(std::vector<Candidate>& cs, const SearchSpec& spec, const std::vector<std::size_t>& front,
            bool budget_hit) {
  const FrontPoint family_ratios[2] = {best_ratios(cs, false), best_ratios(cs, true)};
  for (std::size_t i = 0; i < cs.size(); ++i) {
    Candidate& c = cs[i];
    const FrontPoint ratios = family_ratios[c.axes.shape.colocated() ? 1 : 0];
    if (c.sim.done) {
      c.status = !c.sim.error.empty() ? "sim-failed" : "simulated";
      if (!c.sim.error.empty()) c.why = c.sim.error;
      continue;
    }
    if (c.status != "static-ok") continue;
    const FrontPoint b = bound_of(c, ratios, spec.verify.margin);
    const std::ptrdiff_t d = dominator(cs, front, b);
    if (d >= 0) {
      c.status = "bound-dominated";
      c.why = "static x best simulated/static ratios of its family (x" + fixed(ratios.x, 2) + " per user, x" +
              fixed(ratios.y, 2) + " per GPU) + " + fixed(100 * spec.verify.margin, 0) +
              "% = " + point_text(b) + ", below front point " + cs[static_cast<std::size_t>(d)].axes.label() +
              " (" + point_text(sim_point(cs[static_cast<std::size_t>(d)])) + ")";
    } else {
      c.status = "budget";
      c.why = budget_hit ? "not verified: verify.max_points simulations spent" : "not verified";
    }
  }
  for (const std::size_t f : front) cs[f].status = "front";
}

// The front point with the most tokens/s per GPU at the target tokens/s per user (or faster).
void recommend(SearchResult& r, double target) {
  std::size_t best = static_cast<std::size_t>(-1);
  for (const std::size_t f : r.front) {
    const Candidate& c = r.candidates[f];
    if (c.sim.tokens_per_s_per_user + 1e-12 < target) continue;
    if (best == static_cast<std::size_t>(-1) ||
        c.sim.tokens_per_s_per_gpu > r.candidates[best].sim.tokens_per_s_per_gpu)
      best = f;
  }
  if (best == static_cast<std::size_t>(-1) && !r.front.empty()) {
    best = r.front.back();  // the fastest per user
    r.recommendation_note = "no front point reaches " + fixed(target, 1) +
                            " tokens/s per user; the fastest per user is recommended";
  }
  r.recommended = best;
}

}  // namespace

// The SPEC's scenario sections (workload, sla, run, experts, base deployment, model, GPU) checked once
// by the scenario parser under the simplest deployment (EP1 on the first node count): a typo there is one
// error naming its key, not a reason repeated on every candidate.
void check_scenario_sections(const SearchSpec& spec) {
  CandidateAxes a{.nodes = spec.nodes.front(),
                  .gpus = spec.nodes.front() * spec.gpus_per_node,
                  .shape = PoolShape{},
                  .ep_size = 1,
                  .attention_tp = 1,
                  .expert_tp = 1,
                  .pipeline_stages = 1,
                  .redundant_experts = 0,
                  .engine = spec.space.engines.front(),
                  .weights = spec.space.weights.front(),
                  .kv_cache = spec.space.kv_cache.front(),
                  .two_batch_overlap = false,
                  .mtp = false,
                  .max_batched_tokens = spec.space.max_batched_tokens.front(),
                  .max_batch_size = spec.space.max_batch_size.front()};
  const LoadedScenario sc = parse_scenario(candidate_json(spec, a), ".");
  (void)arrival_rate_per_s(sc.spec);  // capacity searches vary an open arrival rate
  if (sc.spec.run.duration.seconds() <= 0 || sc.spec.run.requests > 0) {
    throw InputError("run",
                     "the verification runs capacity searches: give run.duration_s (arrivals over a "
                     "fixed time) and no run.requests");
  }
}

SearchResult run_search(const SearchSpec& spec, const SearchOptions& options) {
  check_scenario_sections(spec);
  // Under mpirun every rank runs the static pass and the rounds' bookkeeping (cheap and deterministic),
  // the verifications are spread over the ranks, and every rank receives every round's results, so that
  // all decide the next round alike; rank 0 reports and writes.
  TaskPool pool(options.jobs);
  SearchOptions o = options;
  SearchResult r;
  r.output_rank = pool.is_output_rank();
  if (!r.output_rank) o.progress = nullptr;
  r.candidates = enumerate_candidates(spec);
  if (r.candidates.empty()) {
    throw InputError("space",
                     "no deployment tiles the cluster: check cluster.nodes, space.ep_sizes, "
                     "space.pipeline_stages and space.pool_shapes");
  }
  if (o.progress)
    o.progress("search " + spec.name + ": " + std::to_string(r.candidates.size()) + " candidate deployments");
  const unsigned jobs = o.jobs > 0 ? o.jobs : std::max(1u, std::thread::hardware_concurrency());
  std::vector<Candidate>& cs = r.candidates;
  static_pass(cs, jobs, o);
  {
    std::vector<std::size_t> ok;
    std::vector<FrontPoint> pts;
    for (std::size_t i = 0; i < cs.size(); ++i) {
      if (cs[i].status == "static-ok") {
        ok.push_back(i);
        pts.push_back(static_point(cs[i]));
      }
    }
    for (const std::size_t k : pareto_front(pts)) r.static_front.push_back(ok[k]);
    if (o.progress) {
      o.progress("static: " + std::to_string(ok.size()) +
                 " candidates pass the static SLA check; static front " +
                 std::to_string(r.static_front.size()) + " points");
    }
  }
  int simulated = 0;
  bool budget_hit = false;
  for (std::vector<std::size_t> round = r.static_front; !round.empty(); round = next_round(cs, spec)) {
    const int left = spec.verify.max_points - simulated;
    if (left <= 0) {
      budget_hit = true;
      break;
    }
    if (static_cast<int>(round.size()) > left) {
      // The points with the most static tokens/s per GPU first (ties by enumeration order).
      std::stable_sort(round.begin(), round.end(), [&](std::size_t a, std::size_t b) {
        return cs[a].st.tokens_per_s_per_gpu > cs[b].st.tokens_per_s_per_gpu;
      });
      round.resize(static_cast<std::size_t>(left));
      std::sort(round.begin(), round.end());
      budget_hit = true;
    }
    ++r.rounds;
    if (o.progress) {
      o.progress("round " + std::to_string(r.rounds) + ": verifying " + std::to_string(round.size()) +
                 " point(s) by capacity search (" + std::to_string(simulated) + " of at most " +
                 std::to_string(spec.verify.max_points) + " done)");
    }
    const std::vector<std::string> out = pool.run(
        round.size(), [&](std::size_t k) { return verify_point(cs[round[k]], spec, o.out_dir); },
        [&](std::size_t k, const std::string& res) {
          const SimFigures f = sim_figures_from_json(Json::parse(res));
          return cs[round[k]].axes.label() + ": " +
                 (f.error.empty()
                      ? fixed(f.capacity_req_s, 2) + " req/s, " +
                            point_text(FrontPoint{.x = f.tokens_per_s_per_user, .y = f.tokens_per_s_per_gpu})
                      : "failed: " + f.error);
        },
        true);
    for (std::size_t k = 0; k < round.size(); ++k)
      cs[round[k]].sim = sim_figures_from_json(Json::parse(out[k]));
    simulated += static_cast<int>(round.size());
    if (o.progress) o.progress(front_summary(cs));
    if (budget_hit) break;
  }
  r.front = simulated_front(cs);
  settle(cs, spec, r.front, budget_hit);
  recommend(r, spec.target_tokens_per_s_per_user);
  return r;
}

Json sim_figures_json(const SimFigures& f) {
  if (!f.error.empty()) return Json{{"error", f.error}};
  return Json{{"capacity_req_s", f.capacity_req_s},
              {"fails_req_s", f.fails_req_s},
              {"probes", f.probes},
              {"tokens_per_s_per_gpu", f.tokens_per_s_per_gpu},
              {"tokens_per_s_per_user", f.tokens_per_s_per_user},
              {"ttft_at_percentile_s", f.ttft_p_s},
              {"tpot_at_percentile_s", f.tpot_p_s},
              {"gpu_hours_per_million_tokens", f.gpu_hours_per_million_tokens},
              {"limited_by", f.limited_by},
              {"limited_why", f.limited_why}};
}

SimFigures sim_figures_from_json(const Json& j) {
  SimFigures f;
  f.done = true;
  if (j.contains("error")) {
    f.error = j.at("error").get<std::string>();
    return f;
  }
  f.capacity_req_s = j.at("capacity_req_s").get<double>();
  f.fails_req_s = j.at("fails_req_s").get<double>();
  f.probes = j.at("probes").get<int>();
  f.tokens_per_s_per_gpu = j.at("tokens_per_s_per_gpu").get<double>();
  f.tokens_per_s_per_user = j.at("tokens_per_s_per_user").get<double>();
  f.ttft_p_s = j.at("ttft_at_percentile_s").get<double>();
  f.tpot_p_s = j.at("tpot_at_percentile_s").get<double>();
  f.gpu_hours_per_million_tokens = j.at("gpu_hours_per_million_tokens").get<double>();
  f.limited_by = j.at("limited_by").get<std::string>();
  f.limited_why = j.at("limited_why").get<std::string>();
  return f;
}

}  // namespace moesim
