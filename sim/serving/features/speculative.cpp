#include "sim/serving/features/speculative.h"

#include "sim/engine/check.h"

namespace moesim {

double prefix_acceptance(const SpeculativeSpec& s, int i) {
  MOESIM_CHECK(i >= 0 && i <= s.draft_tokens && static_cast<int>(s.acceptance.size()) == s.draft_tokens,
               "speculative: acceptance needs one rate per draft position");
  double p = 1.0;
  for (int j = 0; j < i; ++j) p *= s.acceptance[static_cast<std::size_t>(j)];
  return p;
}

double expected_tokens_per_step(const SpeculativeSpec& s) {
  double e = 1.0;
  for (int i = 1; i <= s.draft_tokens; ++i) e += prefix_acceptance(s, i);
  return e;
}

double tokens_per_step_variance(const SpeculativeSpec& s) {
  double mean = 0;
  double square = 0;
  for (int m = 0; m <= s.draft_tokens; ++m) {
    const double stop = m < s.draft_tokens ? 1.0 - s.acceptance[static_cast<std::size_t>(m)] : 1.0;
    const double p = prefix_acceptance(s, m) * stop;
    mean += p * (1 + m);
    square += p * (1 + m) * (1 + m);
  }
  return square - mean * mean;
}

double mean_acceptance_rate(const SpeculativeSpec& s) {
  return s.draft_tokens > 0 ? (expected_tokens_per_step(s) - 1.0) / s.draft_tokens : 0.0;
}

bool acceptance_below_alert(const SpeculativeSpec& s) {
  return mean_acceptance_rate(s) < kSpeculativeAcceptanceAlert;
}

int verify_positions_per_sequence(const SpeculativeSpec& s) { return s.draft_tokens + 1; }

int sample_tokens_per_step(const SpeculativeSpec& s, Rng& rng) {
  int n = 1;
  for (const double a : s.acceptance) {
    if (rng.uniform() >= a) break;
    ++n;
  }
  return n;
}

}  // namespace moesim
