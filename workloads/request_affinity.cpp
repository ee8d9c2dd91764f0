#include "workloads/request_affinity.h"

#include <cmath>

#include "workloads/expert_popularity.h"

namespace moesim {

double step_affinity_sd(double sigma, double request_token_pairs, double tokens) {
  if (sigma <= 0 || request_token_pairs <= 0 || tokens < 2) return 0.0;
  const double share = request_token_pairs / (tokens * (tokens - 1.0));  // in (0, 1]
  return std::sqrt(std::log1p(std::expm1(sigma * sigma) * share));
}

void perturb_popularity(std::span<const double> p, double s, int top_k, Rng& rng, std::vector<double>& out) {
  out.resize(p.size());
  const double shift = 0.5 * s * s;
  double sum = 0;
  for (std::size_t e = 0; e < p.size(); ++e) {
    out[e] = p[e] * std::exp(s * rng.normal() - shift);
    sum += out[e];
  }
  for (double& x : out) x /= sum;
  cap_for_top_k(out, top_k);
}

}  // namespace moesim
