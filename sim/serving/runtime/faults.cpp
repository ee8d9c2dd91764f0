// Failures in the loop: coverage of lost ranks by redundant expert copies, the failure schedule, the tally.
#include "sim/serving/runtime/faults.h"

#include <algorithm>
#include <cmath>

#include "sim/engine/check.h"

namespace moesim {

namespace {
constexpr double kMaxFaultS = 1e6;  // the longest run a scenario simulates (run.duration_s's bound)
}  // namespace

bool experts_covered(const Placement& p, std::span<const char> lost) {
  MOESIM_CHECK(lost.size() == static_cast<std::size_t>(p.gpus()), "one flag per rank of the placement");
  for (int l = 0; l < p.layers(); ++l) {
    for (int e = 0; e < p.experts(); ++e) {
      bool kept = false;
      for (const int slot : p.slots_of(l, e))
        kept = kept || lost[static_cast<std::size_t>(p.gpu_of_slot(slot))] == 0;
      if (!kept) return false;
    }
  }
  return true;
}

namespace {

bool holds(std::span<const int> slots, int per_gpu, int gpu, int expert) {
  for (int i = gpu * per_gpu; i < (gpu + 1) * per_gpu; ++i) {
    if (slots[static_cast<std::size_t>(i)] == expert) return true;
  }
  return false;
}

// Swaps one duplicate of GPU g's slot `dup` with another GPU's slot; false when none fits.
bool move_duplicate(std::span<int> slots, int per_gpu, int gpus, int g, int dup) {
  const int e = slots[static_cast<std::size_t>(dup)];
  for (int k = 1; k < gpus; ++k) {
    const int h = (g + k) % gpus;
    if (holds(slots, per_gpu, h, e)) continue;
    for (int t = h * per_gpu; t < (h + 1) * per_gpu; ++t) {
      const int f = slots[static_cast<std::size_t>(t)];
      if (holds(slots, per_gpu, g, f)) continue;
      std::swap(slots[static_cast<std::size_t>(dup)], slots[static_cast<std::size_t>(t)]);
      return true;
    }
  }
  return false;
}

}  // namespace

void spread_copies(Placement& p) {
  const int per_gpu = p.slots_per_gpu();
  for (int l = 0; l < p.layers(); ++l) {
    const std::span<int> slots = p.mutable_phy2log(l);
    for (int g = 0; g < p.gpus(); ++g) {
      for (int i = g * per_gpu; i < (g + 1) * per_gpu; ++i) {
        for (int j = g * per_gpu; j < i; ++j) {
          if (slots[static_cast<std::size_t>(j)] != slots[static_cast<std::size_t>(i)]) continue;
          (void)move_duplicate(slots, per_gpu, p.gpus(), g, i);
          break;
        }
      }
    }
  }
  p.finalize();
}

FaultSchedule::FaultSchedule(const FaultsSpec& spec, int gpus, int nodes, const RandomStreams& streams)
    : spec_(spec) {
  const auto add = [&](FaultKind kind, int components, double mtbf_s, std::uint64_t index) {
    if (mtbf_s <= 0 || components <= 0) return;
    Process& p = processes_.emplace_back(Process{.kind = kind,
                                                 .components = components,
                                                 .rate_per_s = components / mtbf_s,
                                                 .rng = streams.stream("faults", index),
                                                 .pending = std::nullopt});
    draw(p, Time{});
  };
  add(FaultKind::kGpu, gpus, spec.gpu_mtbf_s, 0);
  add(FaultKind::kNode, nodes, spec.node_mtbf_s, 1);
  add(FaultKind::kLink, nodes, spec.link_mtbf_s, 2);
}

// The next failure of `p`'s components after `after`: an exponential gap (sample_exponential), then the
// component, uniform. None past the clock's range (kMaxFaultS).
void FaultSchedule::draw(Process& p, Time after) {
  const double gap_s = sample_exponential(p.rng, p.rate_per_s);
  if (after.seconds() + gap_s > kMaxFaultS) {
    p.pending = std::nullopt;
    return;
  }
  const auto which =
      static_cast<int>(std::min<std::uint64_t>(static_cast<std::uint64_t>(p.rng.uniform() * p.components),
                                               static_cast<std::uint64_t>(p.components - 1)));
  FaultEvent e;
  e.kind = p.kind;
  e.target = which;
  e.at = after + Duration::from_seconds(gap_s);
  if (p.kind == FaultKind::kLink) {
    e.duration = spec_.link_duration;
    e.bandwidth_factor = spec_.link_bandwidth_factor;
  }
  p.pending = e;
}

std::optional<FaultEvent> FaultSchedule::next() {
  // The earliest of the given events and every process's pending draw (ties: given first, then in
  // process order).
  std::optional<FaultEvent> best;
  Process* from = nullptr;
  if (given_ < spec_.events.size()) best = spec_.events[given_];
  for (Process& p : processes_) {
    if (p.pending && (!best || p.pending->at < best->at)) {
      best = p.pending;
      from = &p;
    }
  }
  if (!best) return std::nullopt;
  if (from != nullptr) {
    draw(*from, best->at);
  } else {
    ++given_;
  }
  return best;
}

FaultTracker::FaultTracker(const FaultsSpec& spec, double sla_percentile, Duration ttft_limit,
                           Duration tpot_limit)
    : spec_(spec), percentile_(sla_percentile), ttft_limit_(ttft_limit), tpot_limit_(tpot_limit) {
  report_.enabled = true;
  report_.in_flight = spec.in_flight == InFlightPolicy::kRecompute ? "recompute" : "fail";
  report_.recovery = spec.recovery == RecoveryPolicy::kReshard ? "reshard" : "replace";
}

void FaultTracker::add_instance(int gpus, int groups, int tp) {
  Instance& i = inst_.emplace_back();
  i.lost.assign(static_cast<std::size_t>(gpus), 0);
  i.group_lost.assign(static_cast<std::size_t>(groups), 0);
  i.tp = tp;
  ranks_ += groups;
}

int FaultTracker::ranks_out() const {
  int n = 0;
  for (const Instance& i : inst_) {
    n += i.down ? static_cast<int>(i.group_lost.size())
                : static_cast<int>(std::count(i.group_lost.begin(), i.group_lost.end(), 1));
  }
  return n;
}

void FaultTracker::ranks_changed(Time now) {
  out_rank_s_ += out_ * (now - out_since_).seconds();
  out_since_ = now;
  out_ = ranks_out();
}

int FaultTracker::lose_rank(int replica, int rank, Time now) {
  Instance& i = inst_[static_cast<std::size_t>(replica)];
  i.lost[static_cast<std::size_t>(rank)] = 1;
  const int group = rank / i.tp;
  if (group >= static_cast<int>(i.group_lost.size())) return -1;
  i.group_lost[static_cast<std::size_t>(group)] = 1;
  ranks_changed(now);
  return group;
}

void FaultTracker::set_down(int replica, Time now) {
  inst_[static_cast<std::size_t>(replica)].down = true;
  ranks_changed(now);
}

void FaultTracker::set_up(int replica, bool replaced, Time now) {
  Instance& i = inst_[static_cast<std::size_t>(replica)];
  i.down = false;
  if (replaced) {
    std::fill(i.lost.begin(), i.lost.end(), 0);
    std::fill(i.group_lost.begin(), i.group_lost.end(), 0);
  }
  ranks_changed(now);
}

FaultRecord& FaultTracker::record(const FaultEvent& e, int replica, const char* outcome) {
  ++report_.failures;
  FaultRecord& r = report_.records.emplace_back();
  r.kind = to_string(e.kind);
  r.target = e.target;
  r.at_s = e.at.seconds();
  r.replica = replica;
  r.outcome = outcome;
  r.recovered_s = r.at_s;
  const std::string o = outcome;
  if (o == "continued") ++report_.continued;
  if (o == "restarted") ++report_.restarts;
  if (o == "continued" || o == "restarted")
    windows_.emplace_back(e.at, o == "continued" ? e.at + spec_.sla_window : Time::never());
  return r;
}

void FaultTracker::on_recovered(std::size_t record, Time recovered) {
  FaultRecord& r = report_.records[record];
  r.recovered_s = recovered.seconds();
  const Time at = Time{} + Duration::from_seconds(r.at_s);
  for (auto& w : windows_) {
    if (w.second == Time::never() && w.first <= at) w.second = recovered + spec_.sla_window;
  }
}

// TTFT and TPOT as the recorder defines them (MetricsRecorder::on_finished).
void FaultTracker::on_finished(const Request& r, Time now) {
  const bool inside = std::any_of(windows_.begin(), windows_.end(),
                                  [now](const auto& w) { return w.first <= now && now <= w.second; });
  if (!inside) return;
  ++report_.recovery_finished;
  const Duration ttft = r.first_token - r.arrival;
  ttft_.add(ttft.seconds());
  bool over = ttft > ttft_limit_;
  if (r.output > 1) {
    const double tpot = (r.last_token - r.first_token).seconds() / static_cast<double>(r.output - 1);
    tpot_.add(tpot);
    over = over || tpot > tpot_limit_.seconds();
  }
  if (over) ++report_.recovery_sla_violations;
}

FaultsReport FaultTracker::report(Time end) const {
  FaultsReport out = report_;
  const double out_rank_s = out_rank_s_ + out_ * (end - out_since_).seconds();
  const double all = static_cast<double>(ranks_) * (end - Time{}).seconds();
  out.availability = all > 0 ? 1.0 - out_rank_s / all : 1.0;
  out.recovery_ttft_p_s = ttft_.percentile(percentile_);
  out.recovery_tpot_p_s = tpot_.percentile(percentile_);
  double sum = 0;
  int n = 0;
  for (const FaultRecord& r : out.records) {
    if (r.outcome != "restarted") continue;
    const double took = r.recovered_s - r.at_s;
    sum += took;
    ++n;
    out.recovery_max_s = std::max(out.recovery_max_s, took);
  }
  out.recovery_mean_s = n > 0 ? sum / n : 0.0;
  return out;
}

}  // namespace moesim
