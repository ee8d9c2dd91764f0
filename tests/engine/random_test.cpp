#include "sim/engine/random.h"

#include <catch2/catch.hpp>
#include <cmath>

using namespace moesim;

TEST_CASE("named streams are independent of each other and of creation order") {
  const RandomStreams s(7);
  Rng a1 = s.stream("a");
  Rng b = s.stream("b");
  Rng a2 = s.stream("a");
  const auto x = a1.next_u64();
  REQUIRE(x == a2.next_u64());
  REQUIRE(x != b.next_u64());
  REQUIRE(s.stream("a", 1).next_u64() != s.stream("a", 2).next_u64());
}

TEST_CASE("the generator is xoshiro256** seeded by splitmix64, as published") {
  // Blackman and Vigna's reference: from the state {1, 2, 3, 4} the first outputs are 11520 (= rotl(2 * 5, 7)
  // * 9), 0 (s[1] is 0 after the first update), then 1509978240 and 1215971899390074240.
  Xoshiro256ss g(1, 2, 3, 4);
  REQUIRE(g() == 11520U);
  REQUIRE(g() == 0U);
  REQUIRE(g() == 1509978240U);
  REQUIRE(g() == 1215971899390074240U);
  // SplitMix64 started at 0 first gives 0xe220a8397b1dcdaf (Steele, Lea and Flood 2014, Vigna's
  // splitmix64.c); seeding takes its first four outputs as the state.
  REQUIRE(splitmix64(0) == 0xe220a8397b1dcdafULL);
  Xoshiro256ss seeded(0);
  Xoshiro256ss direct(splitmix64(0), splitmix64(0x9e3779b97f4a7c15ULL), splitmix64(2 * 0x9e3779b97f4a7c15ULL),
                      splitmix64(3 * 0x9e3779b97f4a7c15ULL));
  for (int i = 0; i < 8; ++i) REQUIRE(seeded() == direct());
}

namespace {
template <typename F>
std::pair<double, double> moments(F&& draw, int n) {
  double sum = 0;
  double sq = 0;
  for (int i = 0; i < n; ++i) {
    const double x = draw();
    sum += x;
    sq += x * x;
  }
  const double mean = sum / n;
  return {mean, sq / n - mean * mean};
}
}  // namespace

TEST_CASE("samplers have the moments of their laws") {
  Rng rng(123);
  const int n = 200000;
  auto [em, ev] = moments([&] { return sample_exponential(rng, 2.0); }, n);
  CHECK(em == Approx(0.5).epsilon(0.01));
  CHECK(ev == Approx(0.25).epsilon(0.03));
  auto [nm, nv] = moments([&] { return sample_normal(rng); }, n);
  CHECK(std::abs(nm) < 0.01);
  CHECK(nv == Approx(1.0).epsilon(0.02));
  // Gamma(k, theta): mean k theta, variance k theta^2, also for k < 1.
  for (const double k : {0.5, 2.0, 7.5}) {
    auto [gm, gv] = moments([&] { return sample_gamma(rng, k, 3.0); }, n);
    CHECK(gm == Approx(3.0 * k).epsilon(0.02));
    CHECK(gv == Approx(9.0 * k).epsilon(0.04));
  }
  // Lognormal: mean exp(mu + sigma^2/2).
  auto [lm, lv] = moments([&] { return sample_lognormal(rng, 1.0, 0.5); }, n);
  CHECK(lm == Approx(std::exp(1.125)).epsilon(0.01));
  (void)lv;
}

TEST_CASE("binomial draws have mean np and variance np(1-p) on both sides of the method switch") {
  Rng rng(9);
  for (const auto& [n, p] :
       std::vector<std::pair<std::int64_t, double>>{{10, 0.3}, {1000, 0.01}, {5000, 0.2}, {200, 0.9}}) {
    auto [m, v] = moments([&] { return static_cast<double>(sample_binomial(rng, n, p)); }, 100000);
    const double nd = static_cast<double>(n);
    CHECK(m == Approx(nd * p).epsilon(0.01));
    CHECK(v == Approx(nd * p * (1 - p)).epsilon(0.05));
  }
  REQUIRE(sample_binomial(rng, 0, 0.5) == 0);
  REQUIRE(sample_binomial(rng, 17, 1.0) == 17);
}
