// Per-request expert affinity (workload.expert_popularity.request_affinity_sd): a request's tokens prefer
// their own experts (its topic), so a step's expert law deviates from the population's, which is what EPLB
// sees, by an amount that shrinks with the requests sharing the step.
//
// Model. Request r routes its t_r tokens of a layer by p_r = p x a_r, with a_r,e = exp(sigma Z_r,e -
// sigma^2 / 2) independent log-normal per expert (mean 1: the population law p is the average over
// requests). Given the step's requests, expert e's count C_e over the step's T = sum_r t_r tokens has, with
// pi = top_k p_e and V = exp(sigma^2) - 1,
//   Var(C_e) = T pi (1 - pi) + pi^2 V sum_r t_r (t_r - 1)
// (the law of total variance per request: t_r pi (1 - pi) + (t_r^2 - t_r) Var(pi a_r,e)). A one-token
// request adds nothing beyond the multinomial: its token is a draw from E[p_r] = p.
// The step draws its counts from one law q = normalise(p x exp(s Z - s^2 / 2)), one standard normal Z per
// expert and layer: that draw's variance is T pi (1 - pi) + pi^2 v (T^2 - T) with v = exp(s^2) - 1, so the
// two agree when
//   exp(s^2) - 1 = (exp(sigma^2) - 1) x sum_r t_r (t_r - 1) / (T (T - 1)).
// (Matching the mixture of laws instead, sum_r w_r^2 with w_r = t_r / T, would count a decode step's
// multinomial noise a second time.) Normalisation and the top-k cap are left out of the matching; they move
// the mean and variance by O(sum p^2) relative, more for a heavy tail: at sigma = 1 over 64 equal experts
// a normalised request's count variance is 16% below the formula, at sigma = 0.6 over 128 under 3%
// (tests/workloads/request_affinity_test.cpp).
#pragma once

#include <span>
#include <vector>

#include "sim/engine/random.h"

namespace moesim {

// The step law's log-sd s for per-request log-sd `sigma`, `request_token_pairs` = sum_r t_r (t_r - 1) over
// the step's requests and `tokens` = T. 0 when sigma is 0, no request has two tokens or T < 2.
[[nodiscard]] double step_affinity_sd(double sigma, double request_token_pairs, double tokens);

// The step law q of `p` at log-sd `s` (above), capped for top-k (cap_for_top_k), into `out` (resized to
// p's size). Draws one standard normal per expert from `rng`.
void perturb_popularity(std::span<const double> p, double s, int top_k, Rng& rng, std::vector<double>& out);

}  // namespace moesim
