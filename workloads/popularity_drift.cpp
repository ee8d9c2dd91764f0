#include "workloads/popularity_drift.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

#include "sim/engine/check.h"

namespace moesim {

DriftingPopularity::DriftingPopularity(const ExpertPopularity& base, DriftSpec spec, Rng rng)
    : layers_(base.layers()),
      n_(static_cast<std::size_t>(base.experts())),
      spec_(std::move(spec)),
      rng_(rng) {
  MOESIM_CHECK(spec_.half_life_s >= 0 && spec_.update_interval_s >= 0, "drift times must be non-negative");
  MOESIM_CHECK(std::is_sorted(spec_.phase_times_s.begin(), spec_.phase_times_s.end()),
               "phase times must ascend");
  if (spec_.update_interval_s == 0) spec_.update_interval_s = spec_.half_life_s / 64;
  const std::size_t total = static_cast<std::size_t>(layers_) * n_;
  sorted_.resize(total);
  score_.resize(total);
  probs_.resize(total);
  ranked_.resize(n_);
  std::vector<int> order(n_);
  std::vector<double> draws(n_);
  for (int l = 0; l < layers_; ++l) {
    const auto row = base.layer(l);
    const std::size_t off = static_cast<std::size_t>(l) * n_;
    std::copy(row.begin(), row.end(), probs_.begin() + static_cast<std::ptrdiff_t>(off));
    std::copy(row.begin(), row.end(), sorted_.begin() + static_cast<std::ptrdiff_t>(off));
    std::sort(sorted_.begin() + static_cast<std::ptrdiff_t>(off),
              sorted_.begin() + static_cast<std::ptrdiff_t>(off + n_), std::greater<>());
    // Initial scores: standard normals, the largest given to the most popular expert, so the ranking by
    // score is the base's ranking (ties in the base: lower id ranks first).
    for (double& d : draws) d = sample_normal(rng_);
    std::sort(draws.begin(), draws.end(), std::greater<>());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return row[static_cast<std::size_t>(a)] > row[static_cast<std::size_t>(b)];
    });
    for (std::size_t r = 0; r < n_; ++r) score_[off + static_cast<std::size_t>(order[r])] = draws[r];
  }
  next_update_ = spec_.half_life_s > 0 ? spec_.update_interval_s : std::numeric_limits<double>::infinity();
}

void DriftingPopularity::step_scores(double dt) {
  if (spec_.half_life_s <= 0 || dt <= 0) return;
  // Exact OU transition over dt: x <- a x + sqrt(1 - a^2) N(0, 1), a = 2^(-dt / half_life).
  const double a = std::exp2(-dt / spec_.half_life_s);
  const double b = std::sqrt(1.0 - a * a);
  for (double& x : score_) x = a * x + b * sample_normal(rng_);
}

void DriftingPopularity::redraw_scores() {
  for (double& x : score_) x = sample_normal(rng_);
}

namespace {

// An unsigned key that ascends as the score descends (-0 and +0 equal, as they compare).
std::uint64_t descending_key(double score) {
  const auto b = std::bit_cast<std::uint64_t>(score + 0.0);
  constexpr std::uint64_t kSign = std::uint64_t{1} << 63;
  const std::uint64_t ascending = (b & kSign) != 0 ? ~b : b | kSign;
  return ~ascending;
}

}  // namespace

void DriftingPopularity::rerank() {
  // Ranking by descending score, ties by ascending expert: an LSD radix sort of the keys, one byte per
  // pass and stable, from expert order. The same order as a comparison sort by (score, expert), without
  // its mispredicted comparisons (this runs per layer on every update).
  ++version_;
  if (n_ == 0) return;
  ranked_tmp_.resize(n_);
  std::array<std::array<std::uint32_t, 256>, 8> count{};
  for (int l = 0; l < layers_; ++l) {
    const std::size_t off = static_cast<std::size_t>(l) * n_;
    for (auto& c : count) c.fill(0);
    for (std::size_t e = 0; e < n_; ++e) {
      const std::uint64_t key = descending_key(score_[off + e]);
      ranked_[e] = {key, static_cast<int>(e)};
      for (std::size_t b = 0; b < 8; ++b) ++count[b][(key >> (8 * b)) & 0xff];
    }
    Ranked* src = ranked_.data();
    Ranked* dst = ranked_tmp_.data();
    for (std::size_t b = 0; b < 8; ++b) {
      auto& c = count[b];
      if (c[(src[0].key >> (8 * b)) & 0xff] == n_) continue;  // one value of this byte: order unchanged
      std::uint32_t at = 0;
      for (auto& x : c) {
        const std::uint32_t k = x;
        x = at;
        at += k;
      }
      for (std::size_t i = 0; i < n_; ++i) dst[c[(src[i].key >> (8 * b)) & 0xff]++] = src[i];
      std::swap(src, dst);
    }
    for (std::size_t r = 0; r < n_; ++r)
      probs_[off + static_cast<std::size_t>(src[r].expert)] = sorted_[off + r];
  }
}

void DriftingPopularity::advance_to(double t_seconds) {
  MOESIM_CHECK(t_seconds >= now_, "time does not go backwards");
  now_ = t_seconds;
  const bool phase_due =
      next_phase_ < spec_.phase_times_s.size() && spec_.phase_times_s[next_phase_] <= t_seconds;
  if (!phase_due && t_seconds < next_update_) return;
  while (next_phase_ < spec_.phase_times_s.size() && spec_.phase_times_s[next_phase_] <= t_seconds) {
    const double tp = spec_.phase_times_s[next_phase_++];
    redraw_scores();  // a new domain: what happened before the switch no longer matters
    last_step_ = tp;
  }
  step_scores(t_seconds - last_step_);
  last_step_ = t_seconds;
  if (spec_.half_life_s > 0) next_update_ = t_seconds + spec_.update_interval_s;
  rerank();
}

}  // namespace moesim
