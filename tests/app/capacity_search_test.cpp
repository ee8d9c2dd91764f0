// Capacity at SLA: the bracketing search against predicates with a known threshold, the capacity of a toy
// scenario checked by probing both sides of it with independent runs, and the CLI (run/compare
// --capacity, best-value marks only for columns that meet their SLA).
#include "sim/app/capacity_search.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "sim/engine/check.h"
#include "sim/scenario/json_reader.h"
#include "sim/scenario/profile_io.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "tests/app/cli_support.h"

using namespace moesim;
namespace fs = std::filesystem;

namespace {

struct Tmp : moesim_test::TempDir {
  Tmp() : TempDir("moesim-capacity-test-") {}
};

// A toy MoE on 2 H100s with Poisson arrivals over 2 s and a tight SLA: a probe takes well under a second.
Json toy(double rate_per_s) {
  const Json model = {{"num_layers", 2}, {"hidden", 1024},     {"vocab", 1000},   {"attention", "gqa"},
                      {"num_heads", 8},  {"num_kv_heads", 8},  {"head_dim", 128}, {"routed_experts", 8},
                      {"top_k", 2},      {"expert_inter", 512}};
  return Json{
      {"name", "toy-capacity"},
      {"model", model},
      {"cluster", {{"gpu", "h100-sxm"}, {"nodes", 1}, {"gpus_per_node", 2}}},
      {"deployment", {{"ep_size", 2}, {"max_batch_size", 16}}},
      {"workload",
       {{"arrival", {{"kind", "poisson"}, {"rate_per_s", rate_per_s}}},
        {"prompt_tokens", {{"kind", "fixed"}, {"tokens", 256}}},
        {"output_tokens", {{"kind", "fixed"}, {"tokens", 16}}}}},
      {"sla", {{"ttft_ms", 20}, {"tpot_ms", 5}}},
      {"run", {{"seed", 3}, {"duration_s", 2}, {"warmup_s", 0.5}}},
  };
}

bool holds_at(const ScenarioSpec& spec, double rate) {
  const auto gpu = make_gpu_cost_model(spec.cluster.gpu);
  return sla_holds(simulate(with_arrival_rate(spec, rate), *gpu));
}

}  // namespace

TEST_CASE("the capacity search finds a known threshold within its tolerance, from below and from above") {
  const double threshold = 37.3;
  for (const double start : {1.0, 10.0, 37.3, 500.0, 90000.0}) {
    INFO("start " << start);
    int calls = 0;
    const CapacityBracket b = find_capacity(
        start,
        [&](double rate) {
          ++calls;
          return rate <= threshold;
        },
        CapacitySearchSettings{.rel_tol = 0.01});
    CHECK(b.holds_req_s <= threshold);
    CHECK(b.fails_req_s > threshold);
    CHECK(b.fails_req_s - b.holds_req_s <= 0.01 * b.holds_req_s);
    CHECK(b.probes == calls);
    // Doubling (or halving) to a bracket within a factor 2, then bisection to 1%: log2(start / threshold)
    // + 1 probes to bracket and at most log2(1 / 0.01) + 1 = 8 to bisect.
    CHECK(calls <= static_cast<int>(std::ceil(std::abs(std::log2(start / threshold)))) + 2 + 8);
  }
}

TEST_CASE("with probes undecided near the limit the capacity is an interval around them, from both ends") {
  // Meets up to 30 req/s, undecided on (30, 36) (the SLA metric at its limit), fails from 36 on.
  for (const double start : {1.0, 33.0, 500.0}) {
    INFO("start " << start);
    const CapacityBracket b = find_capacity(
        start, std::function<SlaVerdict(double)>([](double rate) {
          return rate <= 30 ? SlaVerdict::kMeets : rate < 36 ? SlaVerdict::kUndecided : SlaVerdict::kFails;
        }),
        CapacitySearchSettings{.rel_tol = 0.01});
    CHECK(b.holds_req_s <= 30);
    CHECK(b.holds_req_s >= 30 / 1.01);
    CHECK(b.fails_req_s >= 36);
    CHECK(b.fails_req_s <= 36 * 1.01);
    REQUIRE_FALSE(b.undecided.empty());
    for (const double u : b.undecided) {
      CHECK(u > 30);
      CHECK(u < 36);
    }
  }
}

namespace {
// A replication with `over` of `n` requests over the TTFT limit, none over the TPOT limit.
Report run_with(std::int64_t over, std::int64_t n) {
  Report r;
  r.sla_percentile = 99;
  r.requests_measured = n;
  r.sla_requests = r.sla_tpot_requests = n;
  r.sla_ttft_over = over;
  return r;
}
std::vector<Report> runs_with(const std::vector<std::int64_t>& over, std::int64_t n) {
  std::vector<Report> out;
  for (const std::int64_t k : over) out.push_back(run_with(k, n));
  return out;
}
}  // namespace

TEST_CASE("a probe meets when a new run is predicted to meet, fails when the long-run share is over") {
  // P99: at most 1% of requests over each limit. Four runs of 5,000 requests; t(0.975, 3) = 3.1824.
  // Shares 0.4, 0.5, 0.6, 0.5%: mean 0.5%, s = sqrt(0.02 / 3) = 0.08165%; one new run's 95% prediction
  // bound 0.5 + 3.1824 x 0.08165 x sqrt(1 + 1/4) = 0.7905%.
  ProbeStats p = probe_stats(runs_with({20, 25, 30, 25}, 5000));
  CHECK(p.allowed_share == Approx(0.01));
  CHECK(p.ttft.mean == Approx(0.005));
  CHECK(p.ttft.run_hi == Approx(0.007905).epsilon(1e-3));
  CHECK(sla_verdict(p) == SlaVerdict::kMeets);
  // The same mean, spread wider (0.2, 0.5, 0.8, 0.5%: s = 0.2449%): a new run may reach 0.5 + 3.1824 x
  // 0.2449 x 1.118 = 1.371%, over the 1% allowed, while the mean is at least 0.5 - 3.1824 x 0.2449 / 2 =
  // 0.110%: neither decided.
  p = probe_stats(runs_with({10, 25, 40, 25}, 5000));
  CHECK(p.ttft.run_hi == Approx(0.01371).epsilon(1e-3));
  CHECK(p.ttft.mean_lo == Approx(0.00110).epsilon(1e-2));
  CHECK(sla_verdict(p) == SlaVerdict::kUndecided);
  // Shares 1.6, 2.0, 2.4, 2.0% (s = 0.3266%): the long-run share is at least 2.0 - 3.1824 x 0.3266 / 2 =
  // 1.480% (the binomial bound of 400 in 20,000 is about 1.81%, the wider one is kept): fails.
  p = probe_stats(runs_with({80, 100, 120, 100}, 5000));
  CHECK(p.ttft.mean_lo == Approx(0.01480).epsilon(1e-3));
  CHECK(sla_verdict(p) == SlaVerdict::kFails);
  // None over the limit: the runs agree exactly, and the exact binomial bound of the pooled counts decides.
  // 0 of 400 requests: 1 - 0.025^(1/400) = 0.918%, under 1%; 0 of 200: 1.83%, undecided.
  p = probe_stats(runs_with({0, 0, 0, 0}, 100));
  CHECK(p.ttft.run_hi == Approx(1 - std::pow(0.025, 1.0 / 400)));
  CHECK(sla_verdict(p) == SlaVerdict::kMeets);
  CHECK(sla_verdict(probe_stats(runs_with({0, 0, 0, 0}, 50))) == SlaVerdict::kUndecided);
  // A run that dropped requests fails the probe; most runs overloaded fail it, some leave it undecided;
  // a run in its transient leaves it undecided unless a share is over with confidence anyway.
  std::vector<Report> runs = runs_with({20, 25, 30, 25}, 5000);
  runs[1].requests_dropped = 1;
  CHECK(sla_verdict(probe_stats(runs)) == SlaVerdict::kFails);
  runs = runs_with({20, 25, 30, 25}, 5000);
  runs[0].overloaded = true;
  CHECK(sla_verdict(probe_stats(runs)) == SlaVerdict::kUndecided);
  runs[1].overloaded = runs[2].overloaded = true;
  CHECK(sla_verdict(probe_stats(runs)) == SlaVerdict::kFails);
  runs = runs_with({20, 25, 30, 25}, 5000);
  runs[3].mser_at_bound = true;
  CHECK(sla_verdict(probe_stats(runs)) == SlaVerdict::kUndecided);
  runs = runs_with({80, 100, 120, 100}, 5000);
  runs[3].mser_at_bound = true;
  CHECK(sla_verdict(probe_stats(runs)) == SlaVerdict::kFails);
}

TEST_CASE("a probe's replications have their own seeds, the first the scenario's") {
  CHECK(replication_seed(7, 0) == 7);
  std::vector<std::uint64_t> seen;
  for (const std::uint64_t seed : {0ULL, 1ULL, 2ULL, 7ULL}) {
    for (int k = 1; k < 64; ++k) {
      const std::uint64_t s = replication_seed(seed, k);
      CHECK(s < (1ULL << 53));  // exact in a JSON reader's double
      CHECK(s == replication_seed(seed, k));
      seen.push_back(s);
    }
  }
  std::sort(seen.begin(), seen.end());
  CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());  // seeds 1-2 share no run
}

TEST_CASE("the capacity search says so when the SLA never holds or always holds") {
  const CapacitySearchSettings s{.rel_tol = 0.02, .max_probes = 60, .max_factor = 1e3};
  CHECK_THROWS_AS(find_capacity(
                      5, [](double) { return false; }, s),
                  InputError);
  CHECK_THROWS_AS(find_capacity(
                      5, [](double) { return true; }, s),
                  InputError);
}

TEST_CASE("the capacity of a toy scenario lies where its SLA flips, checked by independent runs") {
  const ScenarioSpec spec = parse_scenario(toy(50), "").spec;
  const auto gpu = make_gpu_cost_model(spec.cluster.gpu);
  const CapacityResult c = capacity_at_sla(spec, *gpu, CapacitySearchSettings{.rel_tol = 0.02});
  INFO("capacity " << c.bracket.holds_req_s << " fails at " << c.bracket.fails_req_s);
  REQUIRE(c.bracket.holds_req_s > 0);
  CHECK(c.bracket.fails_req_s > c.bracket.holds_req_s);
  // Independent runs (seeds no probe used): at the capacity a run meets the SLA with 95% probability at
  // least (its prediction bound), so 20 runs miss it at most twice but with probability 7.5% (binomial,
  // p = 0.05; the bound is two-sided 95%, one-sided 97.5%, so 1.4% at its level); at the lowest failing rate
  // the long-run share is over the limit, so the share pooled over 20 runs is over it.
  int met = 0;
  std::int64_t over = 0, counted = 0;
  for (std::uint64_t seed = 1000; seed < 1020; ++seed) {
    ScenarioSpec s = with_arrival_rate(spec, c.bracket.holds_req_s);
    s.run.seed = seed;
    met += sla_holds(simulate(s, *gpu)) ? 1 : 0;
    s = with_arrival_rate(spec, c.bracket.fails_req_s);
    s.run.seed = seed;
    const Report r = simulate(s, *gpu);
    over += std::max(r.sla_ttft_over, r.sla_tpot_over);
    counted += r.sla_requests;
  }
  CHECK(met >= 18);
  CHECK(static_cast<double>(over) / static_cast<double>(counted) > 0.01);
  // Monotone around it: well below holds, well above fails.
  CHECK(holds_at(spec, 0.5 * c.bracket.holds_req_s));
  CHECK_FALSE(holds_at(spec, 2.0 * c.bracket.fails_req_s));
  // The reported run is the one at the capacity with the scenario's seed; the probe log holds every probe.
  CHECK(c.at_capacity.seed == spec.run.seed);
  CHECK(c.at_capacity.requests_measured > 0);
  CHECK(static_cast<int>(c.probes.size()) == c.bracket.probes);
  for (const ProbeRecord& p : c.probes) {
    CHECK(p.stats.runs >= 4);
    if (p.rate_req_s == c.bracket.holds_req_s) CHECK(p.verdict == SlaVerdict::kMeets);
  }
}

TEST_CASE("with a tight SLA the capacity sits just below the saturation rate an overloaded run serves") {
  // Queueing: offered more than its service rate mu, a deployment serves mu and its queue grows by
  // (lambda - mu) per second; an overload of share e builds e x 2 s of delay in a 2 s probe, past the 20 ms
  // TTFT limit once e > 1%. So the capacity at SLA lies below mu (plus that 1% and the 2% bracket), and
  // the batching deployment keeps its SLA up to a good share of mu (the lower bound is a loose guard).
  const ScenarioSpec spec = parse_scenario(toy(50), "").spec;
  const auto gpu = make_gpu_cost_model(spec.cluster.gpu);
  const Report overloaded = simulate(with_arrival_rate(spec, 30000), *gpu);
  REQUIRE_FALSE(overloaded.sla_met);
  const double mu_req_s = overloaded.output_tokens_per_s / 16;  // 16 output tokens per request
  const CapacityResult c = capacity_at_sla(spec, *gpu, CapacitySearchSettings{.rel_tol = 0.02});
  INFO("capacity " << c.bracket.holds_req_s << " req/s, saturation " << mu_req_s << " req/s");
  CHECK(c.bracket.holds_req_s <= 1.03 * mu_req_s);
  CHECK(c.bracket.holds_req_s >= 0.8 * mu_req_s);
}

TEST_CASE("capacity search refuses closed-loop arrivals and recorded traces, naming the key") {
  Json j = toy(10);
  j["workload"]["arrival"] = Json{{"kind", "closed_loop"}, {"users", 4}};
  const ScenarioSpec spec = parse_scenario(j, "").spec;
  try {
    (void)arrival_rate_per_s(spec);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains("workload.arrival.kind") && Catch::Contains("poisson or gamma"));
  }
}

TEST_CASE(
    "compare marks the best only among columns that meet their SLA, and --capacity compares them there") {
  const Tmp t;
  const fs::path light = t.dir / "light.json";
  const fs::path heavy = t.dir / "heavy.json";
  std::ofstream(light) << toy(20).dump();
  std::ofstream(heavy) << toy(30000).dump();  // overloaded: more throughput, SLA violated
  const auto r = moesim_test::run_moesim(
      t, "compare " + light.string() + " " + heavy.string() + " -j 2 --out " + (t.dir / "c").string());
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  const Json j = load_json_file((t.dir / "c" / "compare.json").string());
  CHECK(j["columns"][0]["meets_sla"] == true);
  CHECK(j["columns"][1]["meets_sla"] == false);
  for (const Json& row : j["rows"]) {
    if (row["metric"] != "output_tok_s") continue;
    REQUIRE(row["values"][1].get<double>() > row["values"][0].get<double>());  // overload serves more...
    CHECK(row["best"] == Json::array({0}));                                    // ...but is not marked
  }
  CHECK_THAT(r.out, Catch::Contains("heavy does not meet its SLA"));

  const auto cap =
      moesim_test::run_moesim(t, "compare " + light.string() + " " + heavy.string() +
                                     " --capacity --seeds 2 -j 2 --out " + (t.dir / "cap").string());
  INFO(cap.out << cap.err);
  REQUIRE(cap.code == 0);
  CHECK_THAT(cap.out, Catch::Contains("capacity_req_s (+)") && Catch::Contains("\u00b1"));
  const Json jc = load_json_file((t.dir / "cap" / "compare.json").string());
  // The same scenario apart from the offered load the searches start from: the bisections take other
  // paths, so the capacities may differ, but both intervals hold the long-run capacity and so overlap.
  CHECK(jc["rows"][1]["metric"] == "capacity_req_s");
  CHECK(jc["rows"][2]["metric"] == "capacity_fails_req_s");
  for (int col : {0, 1}) {
    CHECK(jc["rows"][1]["values"][col].get<double>() < jc["rows"][2]["values"][1 - col].get<double>());
  }
  CHECK(jc["columns"][1]["meets_sla"] == true);
  // The interval's other end beside it: the mean over the seeds of the lowest rate each search saw fail.
  CHECK(jc["rows"][2]["metric"] == "capacity_fails_req_s");
  CHECK_THAT(cap.out, Catch::Contains("capacity_fails_req_s"));
  double fails_sum = 0;
  for (const Json& rep : jc["columns"][0]["replications"])
    fails_sum += rep["capacity_fails_req_s"].get<double>();
  CHECK(jc["rows"][2]["values"][0].get<double>() == Approx(fails_sum / 2));
  CHECK(jc["rows"][2]["values"][0].get<double>() > jc["rows"][1]["values"][0].get<double>());
  for (const Json& rep : jc["columns"][0]["replications"]) {
    const double capacity = rep["capacity_req_s"].get<double>();
    // The interval's ends are probes that met and failed; every probe between them stayed undecided.
    const Json& c = rep["report"]["capacity"];
    CHECK(c["meets_req_s"].get<double>() == capacity);
    int ends = 0;
    for (const Json& p : c["probe_log"]) {
      const double rate = p["rate_req_s"].get<double>();
      if (rate == capacity) ends += p["verdict"] == "meets" ? 1 : 0;
      if (rate == rep["capacity_fails_req_s"].get<double>()) ends += p["verdict"] == "fails" ? 1 : 0;
      if (rate > capacity && rate < rep["capacity_fails_req_s"].get<double>())
        CHECK(p["verdict"] == "undecided");
      CHECK(p["runs"].get<int>() >= 4);
    }
    CHECK(ends == 2);
  }
}

TEST_CASE("run --capacity prints the capacity with the throughput per GPU and cost at that rate") {
  const Tmp t;
  const fs::path f = t.dir / "toy.json";
  std::ofstream(f) << toy(50).dump();
  const auto r =
      moesim_test::run_moesim(t, "run " + f.string() + " --capacity --out " + (t.dir / "o").string());
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("capacity_req_s") && Catch::Contains("output_tok_s_per_gpu") &&
                        Catch::Contains("gpu_hours_per_million_output_tokens"));
  // The probes' replications on two threads: the same file.
  const auto r1 =
      moesim_test::run_moesim(t, "run " + f.string() + " --capacity -j 1 --out " + (t.dir / "o1").string());
  REQUIRE(r1.code == 0);
  const auto r2 =
      moesim_test::run_moesim(t, "run " + f.string() + " --capacity -j 2 --out " + (t.dir / "o2").string());
  REQUIRE(r2.code == 0);
  CHECK(moesim_test::slurp(t.dir / "o1" / "replications.json") ==
        moesim_test::slurp(t.dir / "o2" / "replications.json"));
  const Json j = load_json_file((t.dir / "o" / "replications.json").string());
  const Json& rep = j["replications"][0];
  // Cost at capacity from the report's own throughput: GPU-hours per million output tokens.
  const double tok_s = rep["report"]["throughput"]["output_tokens_per_s"].get<double>();
  CHECK(j["summary"]["gpu_hours_per_million_output_tokens"]["mean"].get<double>() ==
        Approx(2 / (tok_s * 3600) * 1e6));
  const auto closed = moesim_test::run_moesim(
      t, "run scenarios/tiny/tiny_model_closed_loop.json --capacity --out " + (t.dir / "x").string());
  CHECK(closed.code == 2);
  CHECK_THAT(closed.err, Catch::Contains("workload.arrival.kind"));
  // A request cap would make faster probes shorter bursts rather than heavier loads.
  const auto capped = moesim_test::run_moesim(
      t, "run " + f.string() + " --capacity --set run.requests=100 --out " + (t.dir / "y").string());
  CHECK(capped.code == 2);
  CHECK_THAT(capped.err, Catch::Contains("run.requests"));
}

TEST_CASE("sweep marks the best of a column only among the points that meet their SLA") {
  const Tmp t;
  const fs::path f = t.dir / "toy.json";
  std::ofstream(f) << toy(20).dump();
  const auto r = moesim_test::run_moesim(t, "sweep " + f.string() +
                                                " --set workload.arrival.rate_per_s=20,30000 -j 2 --out " +
                                                (t.dir / "s").string());
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  std::istringstream lines(r.out);
  std::string light;
  std::string heavy;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream cells(line);
    std::string rate;
    cells >> rate;
    if (rate == "20") light = line;
    if (rate == "30000") heavy = line;
  }
  REQUIRE_FALSE(light.empty());
  REQUIRE_FALSE(heavy.empty());
  // The overloaded point serves more tokens per GPU but misses its SLA: it gets no mark at all.
  CHECK(heavy.find('*') == std::string::npos);
  CHECK(light.find('*') != std::string::npos);
  const Json j = load_json_file((t.dir / "s" / "sweep.json").string());
  CHECK(j["rows"][1]["report"]["throughput"]["output_tokens_per_s"].get<double>() >
        j["rows"][0]["report"]["throughput"]["output_tokens_per_s"].get<double>());
  CHECK(j["rows"][1]["report"]["sla"]["met"] == false);
}

TEST_CASE("a probe undecided on runs too short for their percentile runs longer, not more often") {
  // The toy's first probe, 20 req/s for 2 s (1.5 s measured), holds about 30 requests a run, whose P99
  // rests on 0.3 of them: far fewer than kMinTailRequests. With none over the limit, 4 runs can meet only
  // once the pooled count n has 1 - 0.025^(1/n) <= 1%, n >= 367, about 92 a run: not at 2 s (30) nor at 4 s
  // (70), at 8 s (150). So it meets on 4 runs of at least 4 x 2 s, not on 8 runs of 2 s; every undecided
  // probe on such short runs ran at the length cap (8 x 2 s).
  const ScenarioSpec spec = parse_scenario(toy(20), "").spec;
  const auto gpu = make_gpu_cost_model(spec.cluster.gpu);
  const CapacitySearchSettings settings{.rel_tol = 0.05};
  const CapacityResult c = capacity_at_sla(spec, *gpu, settings);
  REQUIRE_FALSE(c.probes.empty());
  const ProbeRecord& first = c.probes.front();
  INFO("first probe: " << first.duration_s << " s, " << first.stats.runs << " runs, "
                       << first.stats.requests_per_run << " requests a run");
  CHECK(first.rate_req_s == 20);
  CHECK(first.verdict == SlaVerdict::kMeets);
  CHECK(first.duration_s >= 4 * spec.run.duration.seconds());
  CHECK(first.stats.runs == settings.replications);
  for (const ProbeRecord& p : c.probes) {
    if (p.verdict == SlaVerdict::kUndecided &&
        p.stats.requests_per_run * p.stats.allowed_share < kMinTailRequests) {
      CHECK(p.duration_s == Approx(spec.run.duration.seconds() * settings.max_probe_factor));
    }
  }
}

TEST_CASE("run --capacity under run.measure mlperf_server decides each rate by one run's loadgen verdict") {
  const Tmp t;
  const fs::path f = t.dir / "toy.json";
  Json j = toy(50);
  j["run"] = {{"seed", 3}, {"duration_s", 30}, {"measure", "mlperf_server"}};
  std::ofstream(f) << j.dump();
  const auto r =
      moesim_test::run_moesim(t, "run " + f.string() + " --capacity -j 1 --out " + (t.dir / "o").string());
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("loadgen VALID at") && Catch::Contains("one run each"));
  const Json out = load_json_file((t.dir / "o" / "replications.json").string());
  const Json& rep = out["replications"][0]["report"];
  const Json& c = rep["capacity"];
  for (const Json& p : c["probe_log"]) {
    CHECK(p["runs"].get<int>() == 1);
    CHECK(p["verdict"].get<std::string>() != "undecided");
  }
  // The run at capacity is VALID by loadgen's rules, and its completed tokens/s is its tokens over the final
  // query's completion.
  const Json& l = rep["loadgen"];
  CHECK(l["valid"].get<bool>());
  CHECK(l["tokens_per_s"].get<double>() ==
        Approx(l["tokens"].get<double>() / l["final_query_done_s"].get<double>()));
  CHECK(l["queries_completed"].get<std::int64_t>() == l["queries_issued"].get<std::int64_t>());
}

TEST_CASE(
    "run --capacity --seeds under mlperf_server reports loadgen's figure and the capacity over the seeds") {
  const Tmp t;
  const fs::path f = t.dir / "toy.json";
  Json j = toy(50);
  j["run"] = {{"seed", 3}, {"duration_s", 30}, {"measure", "mlperf_server"}};
  std::ofstream(f) << j.dump();
  const auto r = moesim_test::run_moesim(
      t, "run " + f.string() + " --capacity --seeds 2 -j 1 --out " + (t.dir / "o").string());
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  // Each seed's search is its own: the summary's range and mean are those of the two searches' results,
  // recomputed here from replications.json (per GPU = loadgen's completed tokens/s over the run's GPUs).
  const Json out = load_json_file((t.dir / "o" / "replications.json").string());
  REQUIRE(out["replications"].size() == 2);
  std::vector<double> rates, per_gpu;
  for (const Json& rep : out["replications"]) {
    rates.push_back(rep["capacity_req_s"].get<double>());
    per_gpu.push_back(rep["report"]["loadgen"]["tokens_per_s"].get<double>() /
                      rep["report"]["gpus"].get<double>());
  }
  const auto value_after = [&](const std::string& label) {
    const std::size_t at = r.out.find(label);
    REQUIRE(at != std::string::npos);
    return std::stod(r.out.substr(at + label.size()));
  };
  const std::size_t at = r.out.find("capacity_req_s range");
  REQUIRE(at != std::string::npos);
  double lo = 0, hi = 0;
  REQUIRE(std::sscanf(r.out.c_str() + at, "capacity_req_s range %lf to %lf", &lo, &hi) == 2);
  CHECK(lo == Approx(std::min(rates[0], rates[1])).margin(5e-4));
  CHECK(hi == Approx(std::max(rates[0], rates[1])).margin(5e-4));
  const double mean = (per_gpu[0] + per_gpu[1]) / 2;
  CHECK(value_after("loadgen_tok_s_per_gpu") == Approx(mean).margin(0.05));
  CHECK_THAT(r.out, Catch::Contains("over 2 seed(s)"));
}
