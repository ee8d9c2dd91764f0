// Named random streams from one seed, and our own samplers on xoshiro256** (the standard
// distributions differ between library versions; ours give the same draws everywhere). A stream's seed
// depends only on the run seed and its name, so adding a consumer never shifts another's draws.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace moesim {

std::uint64_t splitmix64(std::uint64_t x);

// xoshiro256** 1.0 (Blackman and Vigna, "Scrambled linear pseudorandom number generators", ACM TOMS 2021):
// 256 bits of state, period 2^256 - 1, passes BigCrush. A draw is a few shifts, rotations and one
// multiply; std::mt19937_64's block refill was a tenth of a serving step's cost. Seeded by running
// splitmix64 from the seed, as its authors recommend (the state is then never all zero).
class Xoshiro256ss {
 public:
  explicit Xoshiro256ss(std::uint64_t seed) {
    for (std::uint64_t& w : s_) {
      w = splitmix64(seed);  // the i-th output of a splitmix64 generator started at `seed`
      seed += 0x9e3779b97f4a7c15ULL;
    }
  }
  // From a raw state (not all zero).
  Xoshiro256ss(std::uint64_t s0, std::uint64_t s1, std::uint64_t s2, std::uint64_t s3) : s_{s0, s1, s2, s3} {}
  std::uint64_t operator()() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

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
  Xoshiro256ss gen_;
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

// Samplers. All take the generator by reference and consume a documented number of draws.
double sample_exponential(Rng& rng, double rate);
double sample_normal(Rng& rng);  // standard normal, Marsaglia polar method
double sample_lognormal(Rng& rng, double mu, double sigma);
double sample_gamma(Rng& rng, double shape, double scale);  // Marsaglia-Tsang (2000)
// Binomial(n, p): inversion when n*min(p,1-p) < 16 (exact for n < 64, its Poisson limit above), else the
// normal approximation rounded to the nearest integer and clamped to [0, n] (error O(1/sqrt(n p (1-p))),
// below the resolution of a step cost).
std::int64_t sample_binomial(Rng& rng, std::int64_t n, double p);
// The same rules with the standard normal from `normal()` (a caller with a cheaper source of normals, e.g. a
// quantile table); the inversion draws one rng.uniform(). One call of one or the other, never both.
template <class Normal>
std::int64_t sample_binomial_with(Rng& rng, std::int64_t n, double p, Normal&& normal) {
  if (n <= 0 || p <= 0.0) return 0;
  if (p >= 1.0) return n;
  const bool flip = p > 0.5;
  const double q = flip ? 1.0 - p : p;
  const double nd = static_cast<double>(n);
  const double mean = nd * q;
  std::int64_t k = 0;
  if (mean >= 16.0) {
    const double x = std::floor(mean + std::sqrt(mean * (1.0 - q)) * normal() + 0.5);
    k = static_cast<std::int64_t>(std::clamp(x, 0.0, nd));
  } else if (n < 64) {
    // Inversion: walk the CDF from k = 0 (about mean + 1 steps), (1 - q)^n by squaring, 1/k from a table.
    static constexpr auto kInv = [] {
      std::array<double, 65> r{};
      for (std::size_t i = 1; i < r.size(); ++i) r[i] = 1.0 / static_cast<double>(i);
      return r;
    }();
    double u = rng.uniform();
    const double s = q / (1.0 - q);
    double prob = 1.0;
    double base = 1.0 - q;
    for (std::int64_t e = n; e > 0; e >>= 1, base *= base) {
      if ((e & 1) != 0) prob *= base;
    }
    while (u > prob && k < n) {
      u -= prob;
      prob *= s * static_cast<double>(n - k) * kInv[static_cast<std::size_t>(k + 1)];
      ++k;
    }
  } else {
    // For large n the Poisson limit (P0 = e^-mean) replaces the exact (1-q)^n, equal to it within O(q).
    double u = rng.uniform();
    double prob = std::exp(-mean);
    while (u > prob && k < n) {
      u -= prob;
      ++k;
      prob *= mean / static_cast<double>(k);
      if (prob <= 0.0) break;
    }
  }
  return flip ? n - k : k;
}

}  // namespace moesim
