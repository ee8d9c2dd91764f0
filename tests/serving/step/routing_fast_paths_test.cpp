// The fast routing paths (per-GPU bin sums, binned draws of hot experts with cold tallies) held to the exact
// per-expert draw at the planner level: the law of what the expert cost reads per rank (routed pairs and
// touched experts, per micro-batch) must be the exact draw's, not only its mean.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/step/serving_models.h"
#include "sim/serving/step/step_planner.h"

using namespace moesim;

namespace {

// Per (rank, micro-batch) samples of one quantity, one per step.
struct Samples {
  std::vector<std::vector<double>> by_rank;
  void add(std::size_t series, double x) {
    if (by_rank.size() <= series) by_rank.resize(series + 1);
    by_rank[series].push_back(x);
  }
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (const double x : v) s += x;
  return s / double(v.size());
}

double variance(const std::vector<double>& v) {
  const double m = mean(v);
  double s = 0;
  for (const double x : v) s += (x - m) * (x - m);
  return s / double(v.size() - 1);
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * double(v.size() - 1))];
}

// Per series (one rank and micro-batch): the mean within 4 standard errors plus half a unit of rounding, and
// the variance within 25% where it exceeds one (4 standard errors of a variance ratio at 1,200 samples of a
// near-normal count are about 23%). Over the series: the median variance ratio within 12% (a shift of the
// whole law, which single series' noise hides), and the 95th and 99th percentiles of the pooled samples
// within 3% plus one unit. Measured: routed pairs' variance ratios 0.88-1.12 (medians 0.97-1.03); touched
// experts' medians 0.91-0.97 under the per-rank Gaussian sums (RoutingSampler::sample_bin_sums, decode
// steps), 0.99 under sample_binned (two-batch overlap).
void check_same_law(const Samples& fast, const Samples& exact, const char* what) {
  INFO(what);
  REQUIRE(fast.by_rank.size() == exact.by_rank.size());
  std::vector<double> pooled_fast;
  std::vector<double> pooled_exact;
  std::vector<double> ratios;
  for (std::size_t r = 0; r < fast.by_rank.size(); ++r) {
    const auto& f = fast.by_rank[r];
    const auto& e = exact.by_rank[r];
    INFO("series " << r << ": mean " << mean(f) << " vs " << mean(e) << ", variance " << variance(f) << " vs "
                   << variance(e));
    const double se = std::sqrt(variance(f) / double(f.size()) + variance(e) / double(e.size()));
    CHECK(std::abs(mean(f) - mean(e)) <= 4 * se + 0.5);
    if (variance(e) > 1.0) {
      CHECK(variance(f) == Approx(variance(e)).epsilon(0.25));
      ratios.push_back(variance(f) / variance(e));
    }
    pooled_fast.insert(pooled_fast.end(), f.begin(), f.end());
    pooled_exact.insert(pooled_exact.end(), e.begin(), e.end());
  }
  if (!ratios.empty()) CHECK(quantile(ratios, 0.5) == Approx(1.0).margin(0.12));
  for (const double q : {0.95, 0.99}) {
    INFO("quantile " << q);
    const double qe = quantile(pooled_exact, q);
    CHECK(std::abs(quantile(pooled_fast, q) - qe) <= 0.03 * qe + 1.0);
  }
}

struct Variant {
  const char* name;
  std::vector<std::string> sets;
};

}  // namespace

TEST_CASE("every fast routing path draws the exact draw's law of per-rank loads and touched experts") {
  // DeepSeek-V3 on EP16 (256 experts, top-8, Pareto popularity): the last MoE layer of each of 1,200 steps,
  // drawn by the fast path (57 of 58 layers are binned each step) and by the exact per-expert draw.
  const std::vector<Variant> variants = {
      {"contiguous placement", {}},
      {"two-batch overlap", {"deployment.two_batch_overlap=true"}},
      {"EPLB, one redundant slot per GPU",
       {"experts.placement=\"eplb\"", "experts.redundant_slots_per_gpu=1"}},
      {"drifting popularity", {"workload.expert_popularity.drift={\"half_life_s\":30}"}},
  };
  for (const Variant& v : variants) {
    for (const bool prefill : {false, true}) {
      INFO(v.name << (prefill ? ", a prefill chunk in the batch" : ", decode only"));
      const LoadedScenario sc = load_scenario(
          std::string(MOESIM_SOURCE_DIR) + "/scenarios/reference/deepseek_v3_2x8xh200_ep16_1h.json", v.sets);
      const RooflineCostModel gpu(sc.spec.cluster.gpu);
      const RandomStreams streams(7);
      ServingModels models(sc.spec, streams);
      auto fast = models.make_standalone(gpu, Rng(11));
      auto exact = models.make_standalone(gpu, Rng(12));
      exact->set_binned_routing(false);
      REQUIRE(fast->binned_routing());
      std::vector<GroupBatch> batches(16);
      for (GroupBatch& b : batches) {
        b.decode_seqs = 24;
        b.decode_context_tokens = 24.0 * 1500;
        b.sampled_seqs = 24;
      }
      if (prefill) {
        batches[5].prefill_tokens = 1536;
        batches[5].prefill_pairs = 1536.0 * 768;
        batches[5].prefill_kv_tokens = 1536;
      }
      const int ranks = sc.spec.deployment.expert_ranks();
      Samples pairs[2];
      Samples touched[2];
      for (int step = 0; step < 1200; ++step) {
        models.advance_to(Time::at(Duration::from_ms(50.0 * step)));
        int w = 0;
        for (StandalonePlanner* pl : {&fast, &exact}) {
          (void)pl->plan(batches, Time{});
          const ExpertCost& c = (*pl)->expert_cost();
          for (int r = 0; r < ranks; ++r) {
            pairs[w].add(static_cast<std::size_t>(r), c.pairs(r));
            for (int h = 0; h < 2; ++h)
              touched[w].add(static_cast<std::size_t>(2 * r + h), double(c.touched(r, h)));
          }
          ++w;
        }
      }
      check_same_law(pairs[0], pairs[1], "routed pairs per rank");
      check_same_law(touched[0], touched[1], "touched experts per rank and micro-batch");
    }
  }
}
