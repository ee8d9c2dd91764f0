// Popularity that drifts like production traffic: per layer, the shape of the popularity law stays fixed
// (the base's sorted probabilities) while which expert holds which rank changes, continuously (a half-life)
// and abruptly at phase changes (a new traffic domain, a fresh permutation).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sim/engine/random.h"
#include "workloads/expert_popularity.h"

namespace moesim {

struct DriftSpec {
  // Continuous drift: each expert has a latent score following an Ornstein-Uhlenbeck process; experts are
  // ranked by score and get the base probability of their rank. The scores' autocorrelation halves every
  // half_life_s of simulated time: corr(t, t + h) = 2^(-h / half_life_s). 0 disables continuous drift.
  double half_life_s = 0;
  // Scores are updated at most once per update_interval_s (0: half_life_s / 64), so advance_to is a
  // comparison when nothing is due. The OU step is exact for any elapsed time.
  double update_interval_s = 0;
  // Ascending times at which every layer switches to fresh, independent scores (a new domain).
  std::vector<double> phase_times_s{};
};

class DriftingPopularity final {
 public:
  // Starts with exactly the base's probabilities at t = 0.
  DriftingPopularity(const ExpertPopularity& base, DriftSpec spec, Rng rng);

  // Moves simulated time forward (t never decreases). O(1) when no update or phase is due, else
  // O(layers x experts log experts).
  void advance_to(double t_seconds);

  [[nodiscard]] std::span<const double> layer(int l) const {
    return {probs_.data() + static_cast<std::size_t>(l) * n_, n_};
  }
  // Layer l's probabilities in descending order: the layer's probabilities are always a permutation of it.
  [[nodiscard]] std::span<const double> sorted(int l) const {
    return {sorted_.data() + static_cast<std::size_t>(l) * n_, n_};
  }
  [[nodiscard]] int layers() const { return layers_; }
  [[nodiscard]] int experts() const { return static_cast<int>(n_); }
  // Increments whenever the probabilities change: lets callers cache derived quantities.
  [[nodiscard]] std::uint64_t version() const { return version_; }

 private:
  void step_scores(double dt);
  void redraw_scores();
  void rerank();

  int layers_;
  std::size_t n_;
  DriftSpec spec_;
  Rng rng_;
  std::vector<double> sorted_;  // [layer][rank] base probabilities, descending
  std::vector<double> score_;   // [layer][expert]
  std::vector<double> probs_;   // [layer][expert]
  struct Ranked {
    std::uint64_t key;  // orders as the score descends (rerank)
    int expert;
  };
  std::vector<Ranked> ranked_;  // rerank scratch, and the radix sort's second buffer
  std::vector<Ranked> ranked_tmp_;
  double now_ = 0;
  double last_step_ = 0;
  double next_update_ = 0;
  std::size_t next_phase_ = 0;
  std::uint64_t version_ = 0;
};

}  // namespace moesim
