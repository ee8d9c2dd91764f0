// Named random streams from one seed, and our own samplers on std::mt19937_64 (the standard
// distributions differ between library versions; ours give the same draws everywhere). A stream's seed
// depends only on the run seed and its name, so adding a consumer never shifts another's draws.
#pragma once

#include <cstdint>
#include <random>
#include <string_view>

namespace moesim {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : gen_(seed) {}
  std::uint64_t next_u64() { return gen_(); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  // Uniform in (0, 1]: safe for log().
  double uniform_pos() { return (static_cast<double>(gen_() >> 11) + 1.0) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  std::uint64_t below(std::uint64_t n);
  // Standard normal (Marsaglia polar method, pairs cached).
  double normal();

 private:
  std::mt19937_64 gen_;
  double spare_ = 0;
  bool has_spare_ = false;
};

// Derives per-name streams from a run seed.
class RandomStreams {
 public:
  explicit RandomStreams(std::uint64_t seed) : seed_(seed) {}
  [[nodiscard]] Rng stream(std::string_view name) const;
  [[nodiscard]] Rng stream(std::string_view name, std::uint64_t index) const;
  [[nodiscard]] std::uint64_t seed() const { return seed_; }

 private:
  std::uint64_t seed_;
};

std::uint64_t hash_name(std::string_view name);
std::uint64_t splitmix64(std::uint64_t x);

// Samplers. All take the generator by reference and consume a documented number of draws.
double sample_exponential(Rng& rng, double rate);
double sample_normal(Rng& rng);  // standard normal, Marsaglia polar method
double sample_lognormal(Rng& rng, double mu, double sigma);
double sample_gamma(Rng& rng, double shape, double scale);  // Marsaglia-Tsang (2000)
// Binomial(n, p): inversion when n*min(p,1-p) < 16 (exact for n < 64, its Poisson limit above), else the
// normal approximation rounded to the nearest integer and clamped to [0, n] (error O(1/sqrt(n p (1-p))),
// below the resolution of a step cost).
std::int64_t sample_binomial(Rng& rng, std::int64_t n, double p);

}  // namespace moesim
