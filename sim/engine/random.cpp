#include "sim/engine/random.h"

#include <algorithm>
#include <cmath>

namespace moesim {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t hash_name(std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (const char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::uint64_t Rng::below(std::uint64_t n) {
  if (n <= 1) return 0;
  // Lemire's nearly-divisionless method would be faster; rejection keeps it simple and exact.
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  std::uint64_t x;
  do {
    x = gen_();
  } while (x >= limit);
  return x % n;
}

Rng RandomStreams::stream(std::string_view name) const {
  return Rng(splitmix64(seed_ ^ splitmix64(hash_name(name))));
}

Rng RandomStreams::stream(std::string_view name, std::uint64_t index) const {
  return Rng(splitmix64(splitmix64(seed_ ^ splitmix64(hash_name(name))) + index));
}

double sample_exponential(Rng& rng, double rate) { return -std::log(rng.uniform_pos()) / rate; }

double sample_normal(Rng& rng) { return rng.normal(); }

double Rng::normal() {
  // Marsaglia polar method; each accepted pair gives two independent normals, the second is kept.
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  for (;;) {
    const double u = 2.0 * uniform() - 1.0;
    const double v = 2.0 * uniform() - 1.0;
    const double s = u * u + v * v;
    if (s > 0.0 && s < 1.0) {
      const double f = std::sqrt(-2.0 * std::log(s) / s);
      spare_ = v * f;
      has_spare_ = true;
      return u * f;
    }
  }
}

double sample_lognormal(Rng& rng, double mu, double sigma) {
  return std::exp(mu + sigma * sample_normal(rng));
}

double sample_gamma(Rng& rng, double shape, double scale) {
  if (shape < 1.0) {
    // Boost to shape+1 and scale by U^(1/shape) (Marsaglia-Tsang, section 6).
    const double g = sample_gamma(rng, shape + 1.0, 1.0);
    return scale * g * std::pow(rng.uniform_pos(), 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x;
    double v;
    do {
      x = sample_normal(rng);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = rng.uniform_pos();
    if (u < 1.0 - 0.0331 * x * x * x * x) return scale * d * v;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return scale * d * v;
  }
}

std::int64_t sample_binomial(Rng& rng, std::int64_t n, double p) {
  return sample_binomial_with(rng, n, p, [&rng] { return sample_normal(rng); });
}

}  // namespace moesim
