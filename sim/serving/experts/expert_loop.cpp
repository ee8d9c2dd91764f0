#include "sim/serving/experts/expert_loop.h"

#include <algorithm>
#include <cmath>

#include "sim/engine/check.h"
#include "sim/serving/runtime/faults.h"
#include "sim/serving/step/step_planner.h"

namespace moesim {

namespace {

std::vector<double> flat_probs(int layers, int experts, auto&& probs) {
  std::vector<double> w(static_cast<std::size_t>(layers) * static_cast<std::size_t>(experts));
  for (int l = 0; l < layers; ++l) {
    const auto p = probs(l);
    std::copy(p.begin(), p.end(), w.begin() + static_cast<std::ptrdiff_t>(l) * experts);
  }
  return w;
}

}  // namespace

Placement initial_placement(const ScenarioSpec& s) {
  const int layers = s.model.moe_layers();
  const int experts = s.model.routed_experts;
  const int ep = s.deployment.expert_ranks();
  if (experts % ep == 0) return contiguous_placement(layers, experts, ep);
  Placement p(layers, experts, ep, s.experts.slots_per_gpu(experts, ep));
  for (int l = 0; l < layers; ++l) {
    const auto slots = p.mutable_phy2log(l);
    for (std::size_t i = 0; i < slots.size(); ++i)
      slots[i] = static_cast<int>(i % static_cast<std::size_t>(experts));
  }
  p.finalize();
  return p;
}

int replica_nodes(const ScenarioSpec& s) {
  const int ep = s.deployment.ep_size;
  return std::max(1, ep / std::min(ep, s.cluster.gpus_per_node));
}

ExpertLoop::ExpertLoop(const ScenarioSpec& s, const Fabric& fabric,
                       std::function<std::span<const double>(int)> probs,
                       const CoactivationModel* coactivation)
    : s_(s),
      fabric_(fabric),
      probs_(std::move(probs)),
      coact_(coactivation),
      layers_(s.model.moe_layers()),
      experts_(s.model.routed_experts),
      ranks_(s.deployment.expert_ranks()),
      gpus_(s.deployment.ep_size),
      etp_(s.deployment.expert_tp),
      nodes_(replica_nodes(s)),
      placement_(initial_placement(s)) {
  const ModelSpec& m = s_.model;
  const ExpertsSpec& x = s_.experts;
  const int layers = layers_;
  const int experts = experts_;
  const auto le = static_cast<std::size_t>(layers) * static_cast<std::size_t>(experts);
  const auto& by_layer = probs_;
  switch (x.placement) {
    case PlacementPolicy::kContiguous:
      break;
    case PlacementPolicy::kRoundRobin:
      placement_ = round_robin_placement(layers, experts, ranks_);
      break;
    case PlacementPolicy::kEplb:
      placement_ = eplb_placement(flat_probs(layers, experts, by_layer), layers, experts,
                                  EplbSpec{.physical_slots = experts + x.redundant_experts,
                                           .groups = x.eplb_groups,
                                           .nodes = nodes_,
                                           .gpus = ranks_});
      if (s_.faults.spread_copies) spread_copies(placement_);
      break;
    case PlacementPolicy::kCoactivation:
      MOESIM_CHECK(coact_ != nullptr, "co-activation placement needs a co-activation model");
      placement_ = coactivation_placement(*coact_, flat_probs(layers, experts, by_layer), m.top_k, ranks_,
                                          x.partition);
      break;
  }
  if (x.reroute_threshold > 0) rerouter_ = std::make_unique<Rerouter>(ranks_, placement_.slots_per_gpu());
  hotness_.assign(le, Hotness::kHot);
  precision_.assign(le, s_.precision.routed_experts);
  copy_bytes_.assign(
      le, static_cast<std::int64_t>(m.expert_params() * bytes_per_element(s_.precision.routed_experts)));
  if (!x.needs_stats()) return;
  stats_ = std::make_unique<ExpertStats>(layers, experts, coact_ != nullptr ? coact_->groups() : 1, x.stats);
  // Warm start: the statistics begin at the expected counts of a 4096-token batch (a serving system has
  // history from earlier traffic), so the first classification already follows the popularity.
  std::vector<std::int32_t> expected(static_cast<std::size_t>(experts));
  for (int l = 0; l < layers; ++l) {
    const auto p = probs_(l);
    for (int e = 0; e < experts; ++e) {
      expected[static_cast<std::size_t>(e)] =
          static_cast<std::int32_t>(std::lround(p[static_cast<std::size_t>(e)] * m.top_k * 4096.0));
    }
    stats_->observe(l, expected);
  }
  reclassify(nullptr);
  if (x.tiers.enabled) setup_tiers();
}

// Hot/warm/cold from the EWMA; under quantisation each expert's precision (and copy size) follows its
// class (seed section 5); under tiers the caches re-pin hot copies and evict cold ones.
void ExpertLoop::reclassify(ExpertLoopEvents* events) {
  const ExpertsSpec& x = s_.experts;
  const int experts = s_.model.routed_experts;
  const std::int64_t params = static_cast<std::int64_t>(s_.model.expert_params());
  for (int l = 0; l < s_.model.moe_layers(); ++l) {
    const auto off = static_cast<std::size_t>(l * experts);
    const std::span<Hotness> row(hotness_.data() + off, static_cast<std::size_t>(experts));
    stats_->classify(l, row);
    if (x.quantization) {
      for (int e = 0; e < experts; ++e) {
        const auto i = off + static_cast<std::size_t>(e);
        precision_[i] = expert_precision(x.quant, ExpertKind::kRouted, hotness_[i]);
        copy_bytes_[i] = expert_copy_bytes(x.quant, params, precision_[i]);
      }
    }
    if (caches_.empty()) continue;
    for (auto& cache : caches_) {
      for (int e = 0; e < experts; ++e) {
        const ExpertKey key{l, e};
        if (!cache.holds(key)) continue;
        const auto i = off + static_cast<std::size_t>(e);
        const Hotness h = hotness_[i];
        if (cache.hotness(key) != h) cache.set_hotness(key, h, evicted_);
        // Stored as setup_tiers() would register it now: at its class's precision, in its class's home.
        cache.set_format(key, precision_[i], copy_bytes_[i],
                         h == Hotness::kCold ? s_.experts.tiers.cold_home : s_.experts.tiers.warm_home,
                         evicted_);
      }
    }
    if (events != nullptr) events->evictions += static_cast<std::int64_t>(evicted_.size());
    evicted_.clear();
  }
}

// Registers every copy the replica's GPUs hold: hot copies pinned in HBM and warm ones admitted while
// the expert budget lasts (warm start), homes by class (hot/warm: warm_home, cold: cold_home).
void ExpertLoop::setup_tiers() {
  const TiersSpec& t = s_.experts.tiers;
  const int experts = s_.model.routed_experts;
  const int layers = s_.model.moe_layers();
  const ExpertCacheSpec cs{.hbm_bytes = static_cast<std::int64_t>(t.hbm_expert_bytes),
                           .staging_bytes = static_cast<std::int64_t>(t.staging_bytes),
                           .prefetch_window_batches = t.prefetch_window_batches,
                           .prefetch_threshold = t.prefetch_threshold};
  caches_.clear();
  caches_.reserve(static_cast<std::size_t>(gpus_));
  if (!loader_) loader_ = std::make_unique<ExpertLoader>(t.loader, host_link_of(fabric_.spec()), gpus_);
  load_done_.assign(static_cast<std::size_t>(gpus_), Time{});
  last_ffn_.assign(static_cast<std::size_t>(gpus_), Duration::zero());
  loaded_.assign(static_cast<std::size_t>(gpus_), 0);
  // Copies are registered layer by layer in slot order, so that a layer's copies on a GPU are neighbours in
  // its cache (the planner reads them together); then hot copies are admitted before warm ones while the
  // expert budget lasts (an expert with two slots on one GPU is one copy; admitting it again changes nothing:
  // it is resident, or the budget that refused it has only shrunk).
  const auto per = static_cast<std::size_t>(placement_.slots_per_gpu());
  for (int g = 0; g < gpus_; ++g) {
    ExpertCache& cache = caches_.emplace_back(layers, experts, cs);
    for (int l = 0; l < layers; ++l) {
      for (const int e : placement_.phy2log(l).subspan(static_cast<std::size_t>(g) * per, per)) {
        if (e == Placement::kVacant) continue;
        const auto i = static_cast<std::size_t>(l * experts + e);
        if (cache.holds({l, e})) continue;
        cache.add_copy({l, e}, copy_bytes_[i], hotness_[i] == Hotness::kCold ? t.cold_home : t.warm_home,
                       precision_[i], hotness_[i]);
      }
    }
    for (const Hotness pass : {Hotness::kHot, Hotness::kWarm}) {
      for (int l = 0; l < layers; ++l) {
        for (const int e : placement_.phy2log(l).subspan(static_cast<std::size_t>(g) * per, per)) {
          if (e == Placement::kVacant) continue;
          const auto i = static_cast<std::size_t>(l * experts + e);
          if (hotness_[i] == pass && cache.hbm_free() >= copy_bytes_[i]) (void)cache.admit({l, e}, evicted_);
        }
      }
    }
  }
  const int slots = placement_.slots();
  copy_of_slot_.assign(static_cast<std::size_t>(layers) * static_cast<std::size_t>(slots), -1);
  for (int l = 0; l < layers; ++l) {
    const auto p2l = placement_.phy2log(l);
    for (int slot = 0; slot < slots; ++slot) {
      const int g = placement_.gpu_of_slot(slot);
      if (g >= gpus_ || p2l[static_cast<std::size_t>(slot)] == Placement::kVacant) continue;
      copy_of_slot_[static_cast<std::size_t>(l * slots + slot)] =
          caches_[static_cast<std::size_t>(g)].copy_id({l, p2l[static_cast<std::size_t>(slot)]});
    }
  }
  single_copy_.assign(static_cast<std::size_t>(layers) * static_cast<std::size_t>(experts), -1);
  for (int l = 0; l < layers; ++l) {
    for (int e = 0; e < experts; ++e) {
      const auto copies = placement_.slots_of(l, e);
      if (copies.size() == 1)
        single_copy_[static_cast<std::size_t>(l * experts + e)] =
            copy_of_slot_[static_cast<std::size_t>(l * slots + copies[0])];
    }
  }
  evicted_.clear();
}

// The experts of this layer on GPU g wait for a copy whose bytes arrive at `done` (then run its FFN).
void ExpertLoop::wait_for_copy(std::size_t g, Time done, Duration ffn) {
  if (loaded_[g] == 0 || done > load_done_[g]) {
    load_done_[g] = done;
    last_ffn_[g] = ffn;
    loaded_[g] = 1;
  }
}

// A copy that ExpertCache::hit() found neither resident nor staged: the cache says what to load, and the
// load queues on the GPU's host link / NVMe array. Returns when the copy's bytes are in HBM.
Time ExpertLoop::miss_copy(int gpu, int copy, std::int32_t tokens, Time request, StepPlan& plan) {
  ExpertCache& cache = caches_[static_cast<std::size_t>(gpu)];
  const CacheAccess a = cache.access_miss(copy, tokens, evicted_);
  plan.evictions += static_cast<std::int64_t>(evicted_.size());
  evicted_.clear();
  if (a.outcome == CacheOutcome::kHit) {
    ++plan.hbm_hits;
    return cache.ready(copy);
  }
  const Time done = loader_->load(gpu, a.source, a.bytes, request);
  if (a.source == Tier::kNvme) {
    ++plan.nvme_loads;
    plan.nvme_bytes += double(a.bytes);
  } else {
    ++plan.host_loads;
    plan.host_bytes += double(a.bytes);
  }
  if (a.outcome == CacheOutcome::kLoaded) cache.set_ready(copy, done);
  return done;
}

Placement ExpertLoop::eplb_rebalance() const {
  const ExpertsSpec& x = s_.experts;
  const int layers = s_.model.moe_layers();
  const int experts = s_.model.routed_experts;
  const std::vector<double> load = flat_probs(layers, experts, [&](int l) { return stats_->load(l); });
  if (lost_.empty()) {
    Placement next = eplb_placement(
        load, layers, experts,
        EplbSpec{
            .physical_slots = placement_.slots(), .groups = x.eplb_groups, .nodes = nodes_, .gpus = ranks_});
    if (s_.faults.spread_copies) spread_copies(next);
    return next;
  }
  // The survivors' slots as one EPLB problem (the global policy: their count need not split into nodes), then
  // laid out on the surviving ranks in order, the lost ranks' slots vacant.
  const int per = placement_.slots_per_gpu();
  const auto live = static_cast<int>(std::count(lost_.begin(), lost_.end(), 0));
  Placement part = eplb_placement(load, layers, experts,
                                  EplbSpec{.physical_slots = per * live,
                                           .groups = x.eplb_groups,
                                           .nodes = 1,
                                           .gpus = live,
                                           .force_global = true});
  if (s_.faults.spread_copies) spread_copies(part);
  Placement next(layers, experts, ranks_, per);
  for (int l = 0; l < layers; ++l) {
    const auto from = part.phy2log(l);
    const auto to = next.mutable_phy2log(l);
    std::size_t taken = 0;
    for (std::size_t s = 0; s < to.size(); ++s) {
      const bool lost = lost_[static_cast<std::size_t>(next.gpu_of_slot(static_cast<int>(s)))] != 0;
      to[s] = lost ? Placement::kVacant : from[taken++];
    }
  }
  next.finalize();
  return next;
}

void ExpertLoop::set_lost_ranks(std::span<const char> lost) {
  MOESIM_CHECK(lost.size() == static_cast<std::size_t>(ranks_), "one flag per expert-parallel rank");
  if (std::none_of(lost.begin(), lost.end(), [](char c) { return c != 0; })) {
    if (!whole_) return;
    placement_ = std::move(*whole_);
    whole_.reset();
    lost_.clear();
  } else {
    if (!whole_) whole_ = placement_;
    lost_.assign(lost.begin(), lost.end());
    placement_ = without_gpus(placement_, lost);
  }
  ++placement_version_;
  if (!caches_.empty()) setup_tiers();
}

// New placement from the online statistics (EPLB or co-activation partition); the weights of every copy
// that lands on a GPU that did not hold it cross the fabric from a GPU that did (or a fixed pause).
void ExpertLoop::rebalance(ExpertLoopEvents& events) {
  const ExpertsSpec& x = s_.experts;
  const int layers = s_.model.moe_layers();
  const int experts = s_.model.routed_experts;
  Placement next = placement_;
  if (x.placement == PlacementPolicy::kEplb) {
    next = eplb_rebalance();
  } else if (x.placement == PlacementPolicy::kCoactivation && coact_ != nullptr) {
    // One slot per expert: no loss is ever covered, so no rank is lost here.
    MOESIM_CHECK(lost_.empty(), "a co-activation placement without redundant slots lost a rank");
    std::vector<double> affinity(static_cast<std::size_t>(experts) * static_cast<std::size_t>(experts));
    for (int l = 0; l < layers; ++l) {
      stats_->coactivation(l, *coact_, s_.model.top_k, true, affinity);
      partition_layer(stats_->load(l), affinity, ranks_, x.partition, next.mutable_phy2log(l));
    }
    next.finalize();
  } else {
    return;
  }
  const auto g = static_cast<std::size_t>(ranks_);
  std::vector<double> bytes_from(g * g, 0.0);  // [dst][src] ranks
  double moved = 0;
  for (int l = 0; l < layers; ++l) {
    const auto slots = next.phy2log(l);
    for (int slot = 0; slot < next.slots(); ++slot) {
      const int e = slots[static_cast<std::size_t>(slot)];
      if (e == Placement::kVacant) continue;
      const int dst = next.gpu_of_slot(slot);
      const auto old = placement_.slots_of(l, e);
      bool held = false;
      for (const int o : old) held = held || placement_.gpu_of_slot(o) == dst;
      if (held) continue;
      const double b = double(copy_bytes_[static_cast<std::size_t>(l * experts + e)]);
      bytes_from[static_cast<std::size_t>(dst) * g +
                 static_cast<std::size_t>(placement_.gpu_of_slot(old[0]))] += b;
      moved += b;
    }
  }
  Duration pause = Duration::zero();
  if (x.rebalance.cost == RebalanceSpec::Cost::kPause) {
    pause = x.rebalance.pause;
  } else {
    // Each GPU receives its new copies one source after another; GPUs receive in parallel (under
    // expert TP, GPU i of a rank receives its 1/expert_tp shard from GPU i of the source rank).
    for (int dst = 0; dst < ranks_; ++dst) {
      Duration in = Duration::zero();
      for (int src = 0; src < ranks_; ++src) {
        const double b = bytes_from[static_cast<std::size_t>(dst) * g + static_cast<std::size_t>(src)];
        if (b > 0) in += fabric_.transfer(b / etp_, src * etp_, dst * etp_);
      }
      pause = max(pause, in);
    }
  }
  events.rebalance_pause += pause;
  events.rebalance_bytes += moved;
  ++events.rebalances;
  placement_ = std::move(next);
  ++placement_version_;
  if (!caches_.empty()) setup_tiers();
}

// The layer's copies one by one, when each has state of its own: its expert's precision (quantisation) and,
// under tiers, its residency (a copy that is not resident and ready at `request` is late: the engine runs it
// once its load lands). Each goes to the expert cost as the engine launches it. Returns the largest count.
std::int32_t ExpertLoop::cost_copies(int layer, std::span<const std::int32_t> layer_counts,
                                     std::span<const int> single_gpus, double half_a, Time request,
                                     ExpertCost& cost, QualityProxy& quality, StepPlan& plan) {
  const int experts = s_.model.routed_experts;
  const bool tiers = !caches_.empty();
  const bool quant = s_.experts.quantization;
  const auto replicas = placement_.replicas(layer);
  const std::size_t base = static_cast<std::size_t>(layer) * static_cast<std::size_t>(experts);
  const int* copy_of_slot = tiers ? copy_of_slot_.data() + static_cast<std::size_t>(layer) *
                                                               static_cast<std::size_t>(placement_.slots())
                                  : nullptr;
  const std::int32_t* counts = layer_counts.data();
  const Precision* precision = precision_.data() + base;
  const std::int64_t* copy_bytes = copy_bytes_.data() + base;
  const int* single_gpu = single_gpus.data() + base;
  const int* single_copy = tiers ? single_copy_.data() + base : nullptr;
  ExpertCache* caches = caches_.data();
  const bool grouped = cost.grouped();
  std::int64_t uses = 0;
  std::int64_t hits = 0;
  std::int32_t max_count = 0;
  for (int e = 0; e < experts; ++e) {
    const auto u = static_cast<std::size_t>(e);
    const std::int32_t c = counts[u];
    if (c == 0) continue;
    max_count = std::max(max_count, c);
    const Precision p = precision[u];
    if (quant) quality.add(p, c);
    // A rank's GPUs hold 1/etp of each copy (division by 1 skipped: it is exact).
    const double bytes = etp_ == 1 ? double(copy_bytes[u]) : double(copy_bytes[u]) / etp_;
    const auto copy = [&](int gpu, int id, std::int32_t share) __attribute__((always_inline)) {
      // Under two-batch overlap each micro-batch runs the expert on its own share of the tokens.
      const std::int32_t a = micro_batch_a(share, half_a);
      if (!tiers) {
        cost.add_copy(gpu, p, a, share - a, bytes);
        return;
      }
      const auto g = static_cast<std::size_t>(gpu);
      ExpertCache& cache = caches[g];
      ++uses;
      // A resident copy that is ready (the common case) is decided inline.
      Time done = request;
      if (cache.hit(id, share)) {
        ++hits;
        done = cache.ready(id);  // a prefetch may still be on its way
      } else {
        done = miss_copy(gpu, id, share, request, plan);
      }
      const bool late = done > request;
      cost.add_copy(gpu, p, a, share - a, bytes, late);
      if (!late) return;
      // A per-expert loop runs this copy's FFN after its bytes land.
      const Duration ffn = grouped ? Duration::zero() : cost.expert_ffn(a, p) + cost.expert_ffn(share - a, p);
      wait_for_copy(g, done, ffn);
    };
    if (single_gpu[u] >= 0) {  // the common case: one copy takes every token
      copy(single_gpu[u], tiers ? single_copy[u] : -1, c);
      continue;
    }
    const auto copies = placement_.slots_of(layer, e);
    const int reps = replicas[u];
    for (std::size_t r = 0; r < copies.size(); ++r) {
      const std::int32_t share = replica_share(c, reps, static_cast<int>(r));
      if (share != 0) copy(placement_.gpu_of_slot(copies[r]), tiers ? copy_of_slot[copies[r]] : -1, share);
    }
  }
  plan.expert_uses += uses;
  plan.hbm_hits += hits;
  return max_count;
}

// A rank computes its ready experts while loads arrive. A per-expert loop ends at max(compute, the last load
// + that expert's FFN); a grouped engine runs its late copies as launches of their own once the last load
// lands: max(ready launches, the last load) + late launches. The layer's stall is how much later its slowest
// rank ends than without loads.
Duration ExpertLoop::layer_stall(Time experts_start, Duration experts_max, const ExpertCost& cost) {
  Duration with_loads = experts_max;
  for (int g = 0; g < ranks_; ++g) {
    const auto gi = static_cast<std::size_t>(g);
    if (loaded_[gi] == 0) continue;
    loaded_[gi] = 0;
    const Duration wait = max(Duration::zero(), load_done_[gi] - experts_start);
    const Duration end = cost.grouped() ? max(cost.ready_time(g), wait) + cost.late_time(g)
                                        : max(cost.time(g), wait + last_ffn_[gi]);
    with_loads = max(with_loads, end);
  }
  return with_loads - experts_max;
}

// After the step: the imbalance the rebalance threshold watches; under tiers, the batch ends (staging
// freed) and warm copies whose recent count passed the threshold are prefetched in the background.
ExpertLoopEvents ExpertLoop::end_step(Time step_end, double gpu_imbalance) {
  ExpertLoopEvents out;
  imbalance_sum_ += gpu_imbalance;
  ++imbalance_steps_;
  if (caches_.empty()) return out;
  for (int g = 0; g < gpus_; ++g) {
    ExpertCache& cache = caches_[static_cast<std::size_t>(g)];
    cache.end_batch();
    if (!s_.experts.tiers.prefetch) continue;
    cache.prefetch_candidates(candidates_);
    for (const ExpertKey key : candidates_) {
      const CacheAccess a = cache.admit(key, evicted_);
      if (a.outcome != CacheOutcome::kLoaded) continue;
      const Time done = loader_->load(g, a.source, a.bytes, step_end);
      cache.set_ready(cache.copy_id(key), done);
      ++out.prefetches;
      (a.source == Tier::kNvme ? out.nvme_bytes : out.host_bytes) += double(a.bytes);
    }
    candidates_.clear();
    out.evictions += static_cast<std::int64_t>(evicted_.size());
    evicted_.clear();
  }
  return out;
}

ExpertLoopEvents ExpertLoop::begin_step() {
  const ExpertsSpec& x = s_.experts;
  ExpertLoopEvents out;
  ++steps_;
  if (stats_ && (x.tiers.enabled || x.quantization) && x.tiers.reclassify_every_steps > 0 &&
      steps_ % x.tiers.reclassify_every_steps == 0) {
    reclassify(&out);
  }
  const RebalanceSpec& r = x.rebalance;
  if (!stats_ || !r.enabled()) return out;
  bool due = r.every_steps > 0 && steps_ - last_rebalance_ >= r.every_steps;
  if (r.imbalance_threshold > 0 && imbalance_steps_ >= r.check_steps) {
    due = due || imbalance_sum_ / double(imbalance_steps_) > r.imbalance_threshold;
    imbalance_sum_ = 0;
    imbalance_steps_ = 0;
  }
  if (!due) return out;
  last_rebalance_ = steps_;
  rebalance(out);
  return out;
}

double ExpertLoop::routed_expert_bytes_per_gpu() const {
  const TiersSpec& t = s_.experts.tiers;
  if (t.enabled) return t.hbm_expert_bytes + t.staging_bytes;
  const auto per = static_cast<std::size_t>(placement_.slots_per_gpu());
  double most = 0;
  for (int g = 0; g < ranks_; ++g) {
    double sum = 0;
    for (int l = 0; l < layers_; ++l) {
      for (const int e : placement_.phy2log(l).subspan(static_cast<std::size_t>(g) * per, per))
        sum += e == Placement::kVacant ? 0.0 : copy_bytes(l, e);
    }
    most = std::max(most, sum / etp_);
  }
  return most;
}

void ExpertLoop::observe(int layer, std::span<std::int32_t> counts,
                         std::span<const std::int64_t> group_tokens, std::int64_t tokens, StepPlan& plan) {
  if (stats_) {
    stats_->observe(layer, counts);
    if (coact_ != nullptr) stats_->observe_groups(layer, group_tokens);
  }
  if (rerouter_) {
    plan.rerouted +=
        rerouter_->apply(placement_, layer, probs_(layer), tokens, s_.experts.reroute_threshold, counts)
            .rerouted;
  }
}

}  // namespace moesim
