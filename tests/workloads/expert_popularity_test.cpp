#include "workloads/expert_popularity.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <vector>

using namespace moesim;

TEST_CASE("a Zipf law is normalised and decreasing") {
  const auto p = zipf_probabilities(100, 1.2);
  REQUIRE(std::accumulate(p.begin(), p.end(), 0.0) == Approx(1.0));
  REQUIRE(std::is_sorted(p.rbegin(), p.rend()));
  // p_1 / p_2 = 2^s
  REQUIRE(p[0] / p[1] == Approx(std::pow(2.0, 1.2)));
}

TEST_CASE("capping for top-k keeps the sum and bounds every probability by 1/k") {
  auto p = zipf_probabilities(64, 2.0);
  cap_for_top_k(p, 8);
  REQUIRE(std::accumulate(p.begin(), p.end(), 0.0) == Approx(1.0));
  for (const double x : p) REQUIRE(x <= 1.0 / 8 + 1e-12);
}

TEST_CASE("the fitted exponent gives the top 20% of experts 80% of the slots") {
  const int n = 256;
  const double s = zipf_exponent_for_top_share(n, 8, 0.2, 0.8);
  auto p = zipf_probabilities(n, s);
  cap_for_top_k(p, 8);
  // Independent check: sum the 51 largest probabilities by hand.
  std::vector<double> sorted = p;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  double top = 0;
  for (int i = 0; i < 51; ++i) top += sorted[static_cast<std::size_t>(i)];
  REQUIRE(top == Approx(0.8).epsilon(1e-3));
}

TEST_CASE("uniform popularity gives every expert 1/n") {
  const ExpertPopularity pop(PopularitySpec{}, 3, 16, 4, Rng(1));
  for (int l = 0; l < 3; ++l) {
    for (const double x : pop.layer(l)) REQUIRE(x == Approx(1.0 / 16));
  }
}

TEST_CASE("which experts are hot differs per layer but the law is the same") {
  PopularitySpec spec{.kind = PopularitySpec::Kind::kZipf, .zipf_exponent = 1.0, .shuffle_per_layer = true};
  const ExpertPopularity pop(spec, 4, 64, 8, Rng(3));
  const auto hottest = [&](int l) {
    const auto row = pop.layer(l);
    return std::max_element(row.begin(), row.end()) - row.begin();
  };
  REQUIRE((hottest(0) != hottest(1) || hottest(1) != hottest(2) || hottest(2) != hottest(3)));
  std::vector<double> a(pop.layer(0).begin(), pop.layer(0).end());
  std::vector<double> b(pop.layer(3).begin(), pop.layer(3).end());
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  REQUIRE(a == b);
}

TEST_CASE("routing counts sum to tokens x top-k and never exceed the token count") {
  PopularitySpec spec{.kind = PopularitySpec::Kind::kZipf, .zipf_exponent = 1.4};
  const ExpertPopularity pop(spec, 1, 256, 8, Rng(5));
  RoutingSampler sampler(256);
  Rng rng(9);
  std::vector<std::int32_t> counts(256);
  for (const std::int64_t tokens : {1, 3, 17, 128, 1000, 8192, 65536}) {
    for (int rep = 0; rep < 20; ++rep) {
      sampler.sample(pop.layer(0), tokens, 8, rng, counts);
      const std::int64_t sum = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
      REQUIRE(sum == tokens * 8);
      for (const auto c : counts) {
        REQUIRE(c >= 0);
        REQUIRE(c <= tokens);
      }
    }
  }
}

TEST_CASE("routing counts have the means and variances of per-token expert inclusion") {
  // A token includes expert i with probability pi_i = k p_i, independently across tokens:
  // E[c_i] = T pi_i, Var[c_i] = T pi_i (1 - pi_i), for hot and cold experts alike.
  const int experts = 64;
  auto p = zipf_probabilities(experts, 1.0);
  cap_for_top_k(p, 4);
  RoutingSampler sampler(experts);
  Rng rng(21);
  std::vector<std::int32_t> counts(experts);
  const std::int64_t tokens = 500;
  std::vector<double> sum(experts, 0.0);
  std::vector<double> sq(experts, 0.0);
  const int reps = 20000;
  for (int r = 0; r < reps; ++r) {
    sampler.sample(p, tokens, 4, rng, counts);
    for (int e = 0; e < experts; ++e) {
      sum[static_cast<std::size_t>(e)] += counts[static_cast<std::size_t>(e)];
      sq[static_cast<std::size_t>(e)] +=
          double(counts[static_cast<std::size_t>(e)]) * counts[static_cast<std::size_t>(e)];
    }
  }
  for (const int e : {0, 1, 5, 20, 63}) {
    const auto i = static_cast<std::size_t>(e);
    const double mean = sum[i] / reps;
    const double var = sq[i] / reps - mean * mean;
    const double pi = 4 * p[i];
    CHECK(mean == Approx(500 * pi).epsilon(0.02));
    CHECK(var == Approx(500 * pi * (1 - pi)).epsilon(0.08));
  }
}

TEST_CASE("the share of routed tokens on the top 20% of experts follows the configured law") {
  const int experts = 256;
  const double s = zipf_exponent_for_top_share(experts, 8, 0.2, 0.8);
  const ExpertPopularity pop(PopularitySpec{.kind = PopularitySpec::Kind::kZipf, .zipf_exponent = s}, 1,
                             experts, 8, Rng(2));
  // The top 20% by configured probability, identified independently of the sampler.
  std::vector<int> order(experts);
  std::iota(order.begin(), order.end(), 0);
  const auto row = pop.layer(0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return row[static_cast<std::size_t>(a)] > row[static_cast<std::size_t>(b)];
  });
  RoutingSampler sampler(experts);
  Rng rng(4);
  std::vector<std::int32_t> counts(experts);
  double top = 0;
  double all = 0;
  for (int r = 0; r < 200; ++r) {
    sampler.sample(row, 2048, 8, rng, counts);
    for (int i = 0; i < 51; ++i) top += counts[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])];
    all += 2048.0 * 8;
  }
  REQUIRE(top / all == Approx(0.8).epsilon(0.01));
}

TEST_CASE("an expert every token must pick gets exactly one copy of every token") {
  // Top-4 of 4 experts: inclusion probability 1, so each count is T with no noise.
  const std::vector<double> p(4, 0.25);
  RoutingSampler sampler(4);
  Rng rng(1);
  std::vector<std::int32_t> counts(4);
  for (const std::int64_t t : {1, 4, 100, 5000}) {
    sampler.sample(p, t, 4, rng, counts);
    for (const auto c : counts) REQUIRE(c == t);
  }
}

TEST_CASE("cold experts get Poisson counts: P(0) = e^-m, mean, variance and third moment m") {
  // 5 cold experts with means across the sampler's grid of means (and between its points), 10 hot ones
  // (inclusion probability above 8 / T) that absorb the rest. Top-1, T = 100.
  const std::vector<double> cold_means = {0.1, 0.3, 1.13, 3.9, 7.6};
  const std::int64_t tokens = 100;
  std::vector<double> p;
  double cold_mass = 0;
  for (const double m : cold_means) {
    p.push_back(m / tokens);
    cold_mass += m / tokens;
  }
  for (int i = 0; i < 10; ++i) p.push_back((1.0 - cold_mass) / 10);
  RoutingSampler sampler(static_cast<int>(p.size()));
  const auto layer = RoutingSampler::prepare(p, 1);
  Rng rng(17);
  std::vector<std::int32_t> counts(p.size());
  const int reps = 200000;
  std::vector<double> s1(cold_means.size()), s2(cold_means.size()), s3(cold_means.size()),
      zeros(cold_means.size());
  for (int r = 0; r < reps; ++r) {
    sampler.sample(layer, tokens, rng, counts);
    for (std::size_t i = 0; i < cold_means.size(); ++i) {
      const double c = counts[i];
      s1[i] += c;
      s2[i] += c * c;
      s3[i] += c * c * c;
      zeros[i] += c == 0 ? 1 : 0;
    }
  }
  for (std::size_t i = 0; i < cold_means.size(); ++i) {
    const double m = cold_means[i];
    const double mean = s1[i] / reps;
    const double var = s2[i] / reps - mean * mean;
    const double third = s3[i] / reps - 3 * mean * s2[i] / reps + 2 * mean * mean * mean;
    // Tolerances: 4 to 5 standard errors from the Poisson's central moments (mu2 = mu3 = m,
    // mu4 = m + 3 m^2, mu6 = m + 25 m^2 + 15 m^3).
    const double n = reps;
    const double p0 = std::exp(-m);
    CHECK(mean == Approx(m).margin(4 * std::sqrt(m / n)));
    CHECK(var == Approx(m).margin(4 * std::sqrt((m + 2 * m * m) / n)));
    CHECK(third == Approx(m).margin(5 * std::sqrt((m + 25 * m * m + 15 * m * m * m - m * m) / n)));
    CHECK(zeros[i] / n == Approx(p0).margin(4 * std::sqrt(p0 * (1 - p0) / n)));
  }
}

TEST_CASE("the multinomial sampler has the multinomial's means, variances and covariances") {
  // Multinomial(n, p): E[c_i] = n p_i, Var[c_i] = n p_i (1 - p_i), Cov[c_i, c_j] = -n p_i p_j. Both regimes:
  // categorical draws (n <= kDirectTrials) and Gaussian / Poisson cells (n above).
  const std::vector<double> p = {0.45, 0.2, 0.15, 0.1, 0.06, 0.03, 0.01};
  const auto layer = RoutingSampler::prepare_multinomial(p);
  RoutingSampler sampler(static_cast<int>(p.size()));
  for (const std::int64_t n : {std::int64_t{12}, RoutingSampler::kDirectTrials, std::int64_t{400}}) {
    Rng rng(static_cast<std::uint64_t>(n));
    std::vector<std::int32_t> counts(p.size());
    std::vector<double> s1(p.size(), 0.0), s2(p.size(), 0.0);
    double s01 = 0;
    const int reps = 40000;
    for (int r = 0; r < reps; ++r) {
      sampler.sample_multinomial(layer, n, rng, counts);
      REQUIRE(std::accumulate(counts.begin(), counts.end(), std::int64_t{0}) == n);
      for (std::size_t i = 0; i < p.size(); ++i) {
        s1[i] += counts[i];
        s2[i] += double(counts[i]) * counts[i];
      }
      s01 += double(counts[0]) * counts[1];
    }
    const double nd = static_cast<double>(n);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double mean = s1[i] / reps;
      const double var = s2[i] / reps - mean * mean;
      const double want_var = nd * p[i] * (1 - p[i]);
      // Five standard errors of the mean; the variance within 6% plus the rounding's 1/12 for the
      // Gaussian cells (and the Poisson cells' n p against n p (1 - p)).
      CHECK(mean == Approx(nd * p[i]).margin(5 * std::sqrt(want_var / reps)));
      CHECK(var == Approx(want_var).epsilon(0.06).margin(n > RoutingSampler::kDirectTrials ? 0.1 : 0.0));
    }
    const double cov = s01 / reps - (s1[0] / reps) * (s1[1] / reps);
    CHECK(cov == Approx(-nd * p[0] * p[1]).epsilon(0.1));
  }
}

TEST_CASE("binned routing draws the law of the per-expert sampler's per-bin sums") {
  // 64 experts (top-4) in 8 bins of 8 (a shuffled placement). Zipf 1.0 at 500 tokens: the experts with
  // T pi < 8 are cold (drawn one by one), the others hot (summed per bin). Uniform at 50 tokens: every expert
  // is cold (T pi = 3.1) and the cold ones absorb the residual. Zipf at 6 and 15 tokens: bins where it takes
  // under RoutingSampler::kSplitMean draws per cold expert spread a Poisson total over their cold experts
  // (at 15 tokens beside a hot expert, whose picks are drawn again); uniform at 15 tokens, every bin (its
  // total of mean 7.5 drawn in two parts). The per-bin totals, hot and cold together, must have sample()'s
  // means and variances; every draw sums to T k; with hot experts (which absorb the rounding residual) each
  // bin's touched cold experts average sum (1 - e^-m) over its cold experts of mean m = T k p.
  const int experts = 64;
  const int bins = 8;
  const int k = 4;
  struct Case {
    std::vector<double> p;
    std::int64_t tokens;
  };
  auto zipf = zipf_probabilities(experts, 1.0);
  cap_for_top_k(zipf, k);
  const std::vector<double> uniform(experts, 1.0 / experts);
  const std::vector<Case> cases = {{zipf, 500}, {uniform, 50}, {zipf, 6}, {zipf, 15}, {uniform, 15}};
  std::vector<int> bin_of(experts);
  for (int e = 0; e < experts; ++e) bin_of[static_cast<std::size_t>(e)] = (e * 5 + e / 8) % bins;
  for (const Case& c : cases) {
    const std::vector<double>& p = c.p;
    const std::int64_t tokens = c.tokens;
    INFO("tokens " << tokens);
    const auto layer = RoutingSampler::prepare(p, k);
    const auto binned = RoutingSampler::bin(layer, bin_of, bins);
    RoutingSampler sampler(experts);
    Rng rng(5);
    std::vector<std::int32_t> counts(experts);
    std::vector<std::int64_t> bin_pairs(bins);
    std::vector<std::int32_t> bin_hot(bins);
    // A tally of three kinds of fields (non-decreasing in the count): count and its square; touched, at
    // least two, at least three. Each bin's sum is checked against the counts drawn.
    std::vector<RoutingSampler::Tally> tally(RoutingSampler::kTallyCounts);
    for (std::size_t n = 0; n < tally.size(); ++n)
      tally[n] = {.a = n | (n * n) << 32,
                  .b = std::uint64_t{n > 0} | std::uint64_t{n > 1} << 21 | std::uint64_t{n > 2} << 42};
    std::vector<RoutingSampler::Tally> bin_cold(bins);
    // Which experts are hot, independently of the sampler: T pi >= RoutingSampler::kColdMean or pi >= 0.1
    // (pi = k p), counted per bin.
    std::vector<int> hot_per_bin(bins, 0);
    for (int e = 0; e < experts; ++e) {
      const double pi = k * p[static_cast<std::size_t>(e)];
      if (double(tokens) * pi >= RoutingSampler::kColdMean || pi >= 0.1)
        ++hot_per_bin[static_cast<std::size_t>(bin_of[static_cast<std::size_t>(e)])];
    }
    const int reps = 20000;
    std::vector<double> sum_a(bins, 0.0), sq_a(bins, 0.0), sum_b(bins, 0.0), sq_b(bins, 0.0);
    std::vector<double> touched_a(bins, 0.0);
    for (int r = 0; r < reps; ++r) {
      std::fill(counts.begin(), counts.end(), 0);
      sampler.sample_binned(layer, binned, tokens, rng, counts, bin_pairs, bin_hot, tally, bin_cold);
      std::vector<double> total(bin_pairs.begin(), bin_pairs.end());
      std::int64_t all = 0;
      for (int b = 0; b < bins; ++b) {  // the cold experts' counts follow each bin's hot ones in bins.at
        const auto i = static_cast<std::size_t>(b);
        REQUIRE(bin_hot[i] == hot_per_bin[i]);
        std::uint64_t sum = 0, squares = 0, touched = 0, two = 0, three = 0;
        for (int j = binned.begin[i] + bin_hot[i]; j < binned.begin[i + 1]; ++j) {
          const int e = layer.order[static_cast<std::size_t>(binned.at[static_cast<std::size_t>(j)])];
          REQUIRE(bin_of[static_cast<std::size_t>(e)] == b);
          const auto n = static_cast<std::uint64_t>(counts[static_cast<std::size_t>(j)]);
          total[i] += double(n);
          sum += n;
          squares += n * n;
          touched += n > 0 ? 1 : 0;
          two += n > 1 ? 1 : 0;
          three += n > 2 ? 1 : 0;
        }
        const std::uint64_t low32 = 0xffffffffU, low21 = (1U << 21) - 1;
        REQUIRE((bin_cold[i].a & low32) == sum);
        REQUIRE((bin_cold[i].a >> 32) == squares);
        REQUIRE((bin_cold[i].b & low21) == touched);
        REQUIRE(((bin_cold[i].b >> 21) & low21) == two);
        REQUIRE((bin_cold[i].b >> 42) == three);
        touched_a[i] += double(touched);
        all += static_cast<std::int64_t>(total[i]);
        sum_a[i] += total[i];
        sq_a[i] += total[i] * total[i];
      }
      REQUIRE(all == tokens * k);
      sampler.sample(layer, tokens, rng, counts);
      std::vector<double> per_bin(bins, 0.0);
      for (int e = 0; e < experts; ++e)
        per_bin[static_cast<std::size_t>(bin_of[static_cast<std::size_t>(e)])] +=
            counts[static_cast<std::size_t>(e)];
      for (int b = 0; b < bins; ++b) {
        const auto i = static_cast<std::size_t>(b);
        sum_b[i] += per_bin[i];
        sq_b[i] += per_bin[i] * per_bin[i];
      }
    }
    for (int b = 0; b < bins; ++b) {
      const auto i = static_cast<std::size_t>(b);
      const double mean_a = sum_a[i] / reps;
      const double mean_b = sum_b[i] / reps;
      double expected = 0;
      for (int e = 0; e < experts; ++e) {
        if (bin_of[static_cast<std::size_t>(e)] == b)
          expected += double(tokens) * k * p[static_cast<std::size_t>(e)];
      }
      // At 6 tokens the hot experts' counts are capped at T (pi up to 0.84), which both samplers do: their
      // bins' means agree with each other but not with T k p.
      CHECK(mean_a == Approx(mean_b).epsilon(0.02));
      if (tokens >= 50) {
        CHECK(mean_a == Approx(expected).epsilon(0.01));
        CHECK(mean_b == Approx(expected).epsilon(0.01));
      }
      // Variances of bin sums (about 250 with sd 12, or 25 with sd 4.6): 20,000 draws estimate each to 1-2%.
      CHECK(sq_a[i] / reps - mean_a * mean_a == Approx(sq_b[i] / reps - mean_b * mean_b).epsilon(0.06));
      if (c.p == uniform) continue;  // every expert cold: they absorb the residual
      double touched = 0;
      for (int e = 0; e < experts; ++e) {
        const double m = double(tokens) * k * p[static_cast<std::size_t>(e)];
        if (bin_of[static_cast<std::size_t>(e)] == b && m < RoutingSampler::kColdMean &&
            m / double(tokens) < 0.1)
          touched += 1 - std::exp(-m);
      }
      // Binomial-like counts over 20,000 draws: 2% (or 0.02 experts when almost none is touched).
      CHECK(touched_a[i] / reps == Approx(touched).epsilon(0.02).margin(0.02));
    }
  }
}

TEST_CASE("a split of hot experts kept between calls follows the token count up and down") {
  // The caller keeps each layer's split between calls and the sampler moves it by the experts that changed
  // side, for the binned draw and for the bin sums' law alike. After every call of a walk over token counts
  // (up, down, back to the start), each bin's count of hot experts must be what an independent count gives:
  // T pi >= RoutingSampler::kColdMean or pi >= 0.1.
  const int experts = 64;
  const int bins = 8;
  const int k = 4;
  auto p = zipf_probabilities(experts, 1.0);
  cap_for_top_k(p, k);
  std::vector<int> bin_of(experts);
  for (int e = 0; e < experts; ++e) bin_of[static_cast<std::size_t>(e)] = (e * 5 + e / 8) % bins;
  const auto layer = RoutingSampler::prepare(p, k);
  const auto binned = RoutingSampler::bin(layer, bin_of, bins);
  RoutingSampler sampler(experts);
  Rng rng(9);
  std::vector<std::int32_t> counts(experts);
  std::vector<std::int64_t> bin_pairs(bins);
  std::vector<std::int32_t> bin_hot(bins);
  std::vector<RoutingSampler::Tally> tally(RoutingSampler::kTallyCounts);
  std::vector<RoutingSampler::Tally> bin_cold(bins);
  std::vector<RoutingSampler::ColdSums> sums(bins);
  std::size_t split_for = RoutingSampler::kNoSplit;
  for (const std::int64_t tokens : {40, 41, 90, 400, 2000, 5000, 300, 60, 2, 0, 700, 40}) {
    INFO("tokens " << tokens);
    sampler.sample_binned(layer, binned, tokens, rng, counts, bin_pairs, bin_hot, tally, bin_cold, split_for);
    std::vector<int> hot_per_bin(bins, 0);
    for (int e = 0; e < experts && tokens > 0; ++e) {
      const double pi = k * p[static_cast<std::size_t>(e)];
      if (double(tokens) * pi >= RoutingSampler::kColdMean || pi >= 0.1)
        ++hot_per_bin[static_cast<std::size_t>(bin_of[static_cast<std::size_t>(e)])];
    }
    for (int b = 0; b < bins; ++b)
      CHECK(bin_hot[static_cast<std::size_t>(b)] == hot_per_bin[static_cast<std::size_t>(b)]);
    // The bin sums' law derived at one count more takes its split from the same kept one.
    RoutingSampler::BinLaw law;
    sampler.sample_bin_sums(layer, binned, tokens + 1, rng, law, bin_pairs, sums, bin_hot, split_for);
    std::vector<int> hot_above(bins, 0);
    for (int e = 0; e < experts; ++e) {
      const double pi = k * p[static_cast<std::size_t>(e)];
      if (double(tokens + 1) * pi >= RoutingSampler::kColdMean || pi >= 0.1)
        ++hot_above[static_cast<std::size_t>(bin_of[static_cast<std::size_t>(e)])];
    }
    for (int b = 0; b < bins; ++b) {
      CHECK(law.bin_hot[static_cast<std::size_t>(b)] == hot_above[static_cast<std::size_t>(b)]);
      CHECK(bin_hot[static_cast<std::size_t>(b)] == hot_above[static_cast<std::size_t>(b)]);
    }
  }
}

TEST_CASE("a bin's alias table picks each entry with its share of the bin's pi") {
  // Walker's table: column c (of n) is kept with probability cut / 2^32, else its alias is taken, so entry
  // j's probability is (1/n) (keep_j + sum over columns aliased to j of 1 - keep_c); it must equal
  // pi_j / (the bin's sum of pi) to the 2^-32 of the cuts. Zipf 1.2 over 60 experts in 7 uneven bins, a
  // bin of one expert and a bin with a zero-probability expert included.
  std::vector<double> p = zipf_probabilities(60, 1.2);
  p[59] = 0;
  const auto layer = RoutingSampler::prepare(p, 1);
  std::vector<int> bin_of(60);
  for (int e = 0; e < 60; ++e) bin_of[static_cast<std::size_t>(e)] = e == 7 ? 6 : (e * 7 + 3) % 6;
  const auto bins = RoutingSampler::bin(layer, bin_of, 7);
  for (int b = 0; b < bins.count; ++b) {
    const auto first = static_cast<std::size_t>(bins.begin[static_cast<std::size_t>(b)]);
    const auto n = static_cast<std::size_t>(bins.begin[static_cast<std::size_t>(b) + 1]) - first;
    INFO("bin " << b << " of " << n << " entries");
    double mass = 0;
    for (std::size_t j = 0; j < n; ++j) mass += bins.pi[first + j];
    std::vector<double> share(n, 0.0);
    for (std::size_t c = 0; c < n; ++c) {
      const double keep = static_cast<double>(bins.alias_cut[first + c]) * 0x1.0p-32;
      const auto a = static_cast<std::size_t>(bins.alias[first + c]);
      REQUIRE(a < n);
      share[c] += keep / static_cast<double>(n);
      share[a] += (1 - keep) / static_cast<double>(n);
    }
    for (std::size_t j = 0; j < n; ++j) CHECK(share[j] == Approx(bins.pi[first + j] / mass).margin(1e-9));
  }
}

TEST_CASE("cold Poisson draws equal a direct inversion of the Poisson law") {
  // poisson_cold(m, bits) = Poisson(mu) inverted at the high 32 bits + Poisson(m - mu) at the low 32 bits,
  // mu = floor(4 m) / 4. The reference inverts both from e^-mu and the pmf's recurrence directly (no table,
  // no guide buckets): the guide's buckets that skip the comparison must give the same value. Ties within
  // rounding of a CDF value are about 1e-14 likely per draw.
  auto invert = [](double mu, double u) {
    double p = std::exp(-mu);
    double cdf = p;
    int k = 0;
    while (u >= cdf && k < 200) {
      ++k;
      p *= mu / k;
      cdf += p;
    }
    return k;
  };
  Rng rng(11);
  int mismatches = 0;
  double sum = 0;
  const int draws = 200000;
  for (int i = 0; i < draws; ++i) {
    const double m = 8.0 * rng.uniform();
    const std::uint64_t bits = rng.next_u64();
    const double mu = std::floor(4.0 * m) / 4.0;
    const int expected = invert(mu, static_cast<double>(bits >> 32) * 0x1.0p-32) +
                         invert(m - mu, static_cast<double>(bits & 0xffffffffU) * 0x1.0p-32);
    const int got = poisson_cold(m, bits);
    mismatches += got != expected ? 1 : 0;
    sum += got;
  }
  CHECK(mismatches == 0);
  // Mean over uniform means on [0, 8): 4, sd of the average about 0.0073.
  CHECK(sum / draws == Approx(4.0).margin(0.04));
}

TEST_CASE("per-bin cold sums without a draw per expert follow the law of drawing each cold expert") {
  // sample_bin_sums() replaces the cold experts' Poisson draws of sample_binned() by a Gaussian with their
  // exact moments. Both are drawn 20,000 times on the same bins; each bin's pairs and touched experts (hot
  // and cold together) must have the same means, variances and covariance, and the slowest bin of a grouped
  // launch (touched + pairs / 16, weights read and tokens computed) the same mean and 99th percentile.
  struct Case {
    std::vector<double> p;
    int top_k;
    int bins;
    std::int64_t tokens;
  };
  auto pareto = zipf_probabilities(256, zipf_exponent_for_top_share(256, 8, 0.2, 0.8));
  cap_for_top_k(pareto, 8);
  auto zipf = zipf_probabilities(64, 1.0);
  cap_for_top_k(zipf, 4);
  // Where the planner uses it: at least RoutingSampler::kSumsMinMean pairs per expert on average.
  const std::vector<Case> cases = {{pareto, 8, 8, 128},  {pareto, 8, 8, 180},
                                   {pareto, 8, 16, 256}, {pareto, 8, 8, 1024},
                                   {zipf, 4, 8, 500},    {std::vector<double>(256, 1.0 / 256), 8, 8, 128}};
  for (const Case& c : cases) {
    const int experts = static_cast<int>(c.p.size());
    const auto nb = static_cast<std::size_t>(c.bins);
    INFO(experts << " experts, top-" << c.top_k << ", " << c.bins << " bins, " << c.tokens << " tokens");
    std::vector<int> bin_of(static_cast<std::size_t>(experts));
    for (int e = 0; e < experts; ++e) bin_of[static_cast<std::size_t>(e)] = (e * 5 + e / c.bins) % c.bins;
    const auto layer = RoutingSampler::prepare(c.p, c.top_k);
    const auto binned = RoutingSampler::bin(layer, bin_of, c.bins);
    RoutingSampler sampler(experts);
    Rng rng(11);
    std::vector<std::int32_t> counts(static_cast<std::size_t>(experts));
    std::vector<std::int64_t> bin_pairs(nb);
    std::vector<std::int32_t> bin_hot(nb);
    std::vector<RoutingSampler::Tally> tally(RoutingSampler::kTallyCounts);
    for (std::size_t n = 0; n < tally.size(); ++n) tally[n] = {.a = n, .b = std::uint64_t{n > 0}};
    std::vector<RoutingSampler::Tally> bin_cold(nb);
    std::vector<RoutingSampler::ColdSums> sums(nb);
    RoutingSampler::BinLaw law;
    const int reps = 20000;
    struct Moments {
      std::vector<double> p, pp, u, uu, pu;
      std::vector<double> slowest;
    };
    Moments m[2];
    for (Moments& x : m) {
      for (auto* v : {&x.p, &x.pp, &x.u, &x.uu, &x.pu}) v->assign(nb, 0.0);
    }
    for (int r = 0; r < reps; ++r) {
      for (int w = 0; w < 2; ++w) {
        std::int64_t all = 0;
        double slowest = 0;
        if (w == 0) {
          sampler.sample_binned(layer, binned, c.tokens, rng, counts, bin_pairs, bin_hot, tally, bin_cold);
        } else {
          sampler.sample_bin_sums(layer, binned, c.tokens, rng, law, bin_pairs, sums);
        }
        for (std::size_t k = 0; k < nb; ++k) {
          const double pairs =
              double(bin_pairs[k]) + (w == 0 ? double(bin_cold[k].a) : double(sums[k].pairs));
          const double touched = w == 0 ? double(bin_hot[k]) + double(bin_cold[k].b)
                                        : double(law.bin_hot[k]) + double(sums[k].touched);
          if (w == 1) REQUIRE(sums[k].touched <= sums[k].pairs);
          m[w].p[k] += pairs;
          m[w].pp[k] += pairs * pairs;
          m[w].u[k] += touched;
          m[w].uu[k] += touched * touched;
          m[w].pu[k] += pairs * touched;
          all += static_cast<std::int64_t>(pairs);
          slowest = std::max(slowest, touched + pairs / 16);
        }
        REQUIRE(all == c.tokens * c.top_k);
        m[w].slowest.push_back(slowest);
      }
    }
    for (std::size_t k = 0; k < nb; ++k) {
      double mean_p[2], mean_u[2], var_p[2], var_u[2], cov[2];
      for (int w = 0; w < 2; ++w) {
        mean_p[w] = m[w].p[k] / reps;
        mean_u[w] = m[w].u[k] / reps;
        var_p[w] = m[w].pp[k] / reps - mean_p[w] * mean_p[w];
        var_u[w] = m[w].uu[k] / reps - mean_u[w] * mean_u[w];
        cov[w] = m[w].pu[k] / reps - mean_p[w] * mean_u[w];
      }
      INFO("bin " << k << ": pairs " << mean_p[0] << " / " << mean_p[1] << " var " << var_p[0] << " / "
                  << var_p[1] << "; touched " << mean_u[0] << " / " << mean_u[1] << " var " << var_u[0]
                  << " / " << var_u[1] << "; cov " << cov[0] << " / " << cov[1]);
      CHECK(mean_p[1] == Approx(mean_p[0]).epsilon(0.01));
      CHECK(mean_u[1] == Approx(mean_u[0]).epsilon(0.01));
      // Variances to 6% for pairs, 10% for touched; when touched is nearly every cold expert (a law on one
      // or two values, variance below 1, which random rounding only approaches) to 0.05 (rounding adds up
      // to 1/4).
      CHECK(var_p[1] == Approx(var_p[0]).epsilon(0.06));
      CHECK(var_u[1] == Approx(var_u[0]).epsilon(0.1).margin(var_u[0] < 1 ? 0.05 : 0.0));
      // Correlation of pairs and touched to 0.05 (it ranges from 0 when every cold expert is touched to
      // about 0.6 at 128 tokens).
      const auto corr = [&](int w) {
        return var_p[w] > 0 && var_u[w] > 0 ? cov[w] / std::sqrt(var_p[w] * var_u[w]) : 0.0;
      };
      CHECK(corr(1) == Approx(corr(0)).margin(0.05));
    }
    for (Moments& x : m) std::sort(x.slowest.begin(), x.slowest.end());
    const auto p99 = static_cast<std::size_t>(0.99 * reps);
    const double mean0 = std::accumulate(m[0].slowest.begin(), m[0].slowest.end(), 0.0) / reps;
    const double mean1 = std::accumulate(m[1].slowest.begin(), m[1].slowest.end(), 0.0) / reps;
    INFO("slowest bin: mean " << mean0 << " / " << mean1 << ", p99 " << m[0].slowest[p99] << " / "
                              << m[1].slowest[p99]);
    CHECK(mean1 == Approx(mean0).epsilon(0.005));
    CHECK(m[1].slowest[p99] == Approx(m[0].slowest[p99]).epsilon(0.02));
  }
}

TEST_CASE("the token-count grid brackets every count within 1/32 of it") {
  std::int64_t last = -1;
  for (std::int64_t i = 0; i < 32 * 20; ++i) {
    const std::int64_t p = RoutingSampler::grid_point(i);
    REQUIRE(p > last);  // increasing
    REQUIRE(RoutingSampler::grid_index(p) == i);
    last = p;
  }
  for (std::int64_t t = 0; t < 200000; t += 1 + t / 97) {
    const std::int64_t i = RoutingSampler::grid_index(t);
    const std::int64_t below = RoutingSampler::grid_point(i);
    const std::int64_t above = RoutingSampler::grid_point(i + 1);
    INFO(t << " between " << below << " and " << above);
    REQUIRE(below <= t);
    REQUIRE(t < above);
    REQUIRE(above - below <= std::max<std::int64_t>(1, below / RoutingSampler::kGridPerOctave));
  }
}

TEST_CASE("a law interpolated on the moment grid is the law summed over the cold experts") {
  // Each bin's cold moments are sums of e^-m, e^-m (1 - e^-m) and m e^-m over experts of mean m = T pi.
  // Linear in T between grid points T and T (1 + 1/32), each term is off by at most (m / 32)^2 / 8 times
  // the largest |m^2 d2/dm2| of the three (0.54 for m e^-m): 6.6e-5 per expert; an expert turning hot
  // between the points adds up to e^-8 = 3.4e-4. With up to 32 cold experts per bin: 3e-3.
  auto pareto = zipf_probabilities(256, zipf_exponent_for_top_share(256, 8, 0.2, 0.8));
  cap_for_top_k(pareto, 8);
  struct Case {
    std::vector<double> p;
    int bins;
  };
  for (const Case& c : {Case{pareto, 8}, Case{pareto, 16}, Case{std::vector<double>(256, 1.0 / 256), 8}}) {
    const auto nb = static_cast<std::size_t>(c.bins);
    std::vector<int> bin_of(256);
    for (int e = 0; e < 256; ++e) bin_of[static_cast<std::size_t>(e)] = (e * 5 + e / c.bins) % c.bins;
    const auto layer = RoutingSampler::prepare(c.p, 8);
    const auto plain = RoutingSampler::bin(layer, bin_of, c.bins);
    auto gridded = plain;
    REQUIRE(!gridded.grid.empty());
    RoutingSampler sampler(256);
    Rng rng(3);
    std::vector<std::int64_t> bin_pairs(nb);
    std::vector<RoutingSampler::ColdSums> sums(nb);
    int compared = 0;
    for (std::int64_t tokens = 128; tokens < 6000; tokens += 7 + tokens / 16) {
      if (!RoutingSampler::use_bin_sums(layer, plain, tokens)) continue;
      RoutingSampler::fill_moment_grid(layer, gridded, tokens);
      RoutingSampler::BinLaw exact, interpolated;
      sampler.sample_bin_sums(layer, plain, tokens, rng, exact, bin_pairs, sums);
      sampler.sample_bin_sums(layer, gridded, tokens, rng, interpolated, bin_pairs, sums);
      REQUIRE(interpolated.bin_hot == exact.bin_hot);
      for (std::size_t k = 0; k < nb; ++k) {
        const auto& a = exact.cold[k];
        const auto& b = interpolated.cold[k];
        INFO(c.bins << " bins, " << tokens << " tokens, bin " << k << ": touched " << a.touched << " / "
                    << b.touched << ", slope x lambda " << a.slope * a.lambda << " / " << b.slope * b.lambda
                    << ", touched sd " << a.touched_sd << " / " << b.touched_sd);
        REQUIRE(b.experts == a.experts);
        REQUIRE(b.lambda == a.lambda);
        CHECK(b.touched == Approx(a.touched).margin(3e-3));
        CHECK(b.slope * b.lambda == Approx(a.slope * a.lambda).margin(3e-3));
        // The conditional variance is e1 - e2 - slope me - 1/6: off by 3e-3 for each of two sums.
        CHECK(double(b.touched_sd) * b.touched_sd ==
              Approx(double(a.touched_sd) * a.touched_sd).margin(1e-2));
      }
      ++compared;
    }
    CHECK(compared >= 5);
  }
}
