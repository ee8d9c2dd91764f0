// Speculative decoding and multi-token prediction (DeepSeek-V3 MTP): per step a sequence verifies k draft
// tokens in the target model (k + 1 positions), and accepts a prefix of them plus one token of its own.
// Pure functions of the spec: expected tokens per step, a sampler of accepted tokens, the verify width,
// the checklist alert. The step planner costs the positions; the draft (MTP module or draft model) is
// costed as its own work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/engine/random.h"
#include "sim/serving/spec/model_spec.h"

namespace moesim {

enum class DraftKind { kMtp, kModel };

struct SpeculativeSpec {
  int draft_tokens = 1;  // k
  // acceptance[i]: probability that draft token i + 1 is accepted given that tokens 1..i were (size k).
  std::vector<double> acceptance;
  DraftKind draft = DraftKind::kMtp;
  std::string draft_model_name;  // kModel: the catalog name (or "custom")
  ModelSpec draft_model;         // kModel: its shape
};

// The seed's checklist: speculative decoding pays off when acceptance exceeds 60%.
constexpr double kSpeculativeAcceptanceAlert = 0.6;

// Probability that the first i draft tokens are all accepted: prod_{j <= i} a_j (i = 0..k).
[[nodiscard]] double prefix_acceptance(const SpeculativeSpec& s, int i);
// Tokens a sequence emits per step: accepted drafts plus the target's own next token,
// E = 1 + sum_{i=1..k} prod_{j<=i} a_j (Leviathan et al., ICML 2023, eq. 1 with per-position rates).
[[nodiscard]] double expected_tokens_per_step(const SpeculativeSpec& s);
// Its variance, from the distribution P(N = 1 + m) = prefix_acceptance(m) (1 - a_{m+1}), P(N = k + 1) =
// prefix_acceptance(k).
[[nodiscard]] double tokens_per_step_variance(const SpeculativeSpec& s);
// Accepted drafts / drafted tokens: (E - 1) / k, the acceptance rate the checklist compares with 60%.
[[nodiscard]] double mean_acceptance_rate(const SpeculativeSpec& s);
[[nodiscard]] bool acceptance_below_alert(const SpeculativeSpec& s);
// Positions each sequence adds to the target model's verify step (the current token and k drafts).
[[nodiscard]] int verify_positions_per_sequence(const SpeculativeSpec& s);
// Tokens one sequence emits in one step, in [1, k + 1]: one uniform draw per draft position tried
// (at most k draws), from the caller's named stream.
[[nodiscard]] int sample_tokens_per_step(const SpeculativeSpec& s, Rng& rng);

}  // namespace moesim
