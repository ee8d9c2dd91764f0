// Deployment search: the Pareto front on hand-made points, the SPEC's strictness (a malformed SPEC names
// its key), and on a toy space small enough to simulate every legal deployment, the search's front against
// the exhaustive front computed here by independent capacity searches; the CLI's outputs are the same
// bytes when the search resumes from its folder with another thread count.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "sim/app/capacity_search.h"
#include "sim/app/deployment_search.h"
#include "sim/engine/check.h"
#include "sim/engine/random.h"
#include "sim/scenario/profile_io.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/scenario/search_spec_parser.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "tests/app/cli_support.h"

using namespace moesim;
namespace fs = std::filesystem;

namespace {

struct Tmp : moesim_test::TempDir {
  Tmp() : TempDir("moesim-search-test-") {}
};

const std::string kTinySpec = std::string(MOESIM_SOURCE_DIR) + "/scenarios/search/tiny_search.json";

// The message of the InputError a SPEC raises, or "" when it parses.
std::string spec_error(const Json& j) {
  try {
    (void)parse_search_spec(j);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// The front of `pts` by brute force: a point is on it when no other point has at least its x and y with
// one of them larger (of identical points, the first).
std::set<std::size_t> brute_front(const std::vector<FrontPoint>& pts) {
  std::set<std::size_t> out;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    bool dom = false;
    for (std::size_t j = 0; j < pts.size(); ++j) {
      if (j == i) continue;
      const bool strictly =
          (pts[j].x > pts[i].x && pts[j].y >= pts[i].y) || (pts[j].x >= pts[i].x && pts[j].y > pts[i].y);
      const bool same_earlier = pts[j].x == pts[i].x && pts[j].y == pts[i].y && j < i;
      dom = dom || strictly || same_earlier;
    }
    if (!dom) out.insert(i);
  }
  return out;
}

}  // namespace

TEST_CASE("the Pareto front keeps exactly the points no other point dominates") {
  // A staircase 1..5 on x with y falling, plus points under it and a duplicate of a stair.
  std::vector<FrontPoint> pts{{1, 50}, {2, 40},  {3, 30}, {4, 20},  {5, 10},
                              {2, 30}, {4.5, 5}, {3, 30}, {0.5, 50}};
  const std::vector<std::size_t> f = pareto_front(pts);
  CHECK(f == std::vector<std::size_t>{0, 1, 2, 3, 4});  // sorted by x; the duplicate (7) and (8) lose
  CHECK(std::set<std::size_t>(f.begin(), f.end()) == brute_front(pts));
  // Random clouds against the brute force.
  Rng rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<FrontPoint> cloud;
    for (int i = 0; i < 30; ++i) {
      cloud.push_back(FrontPoint{.x = std::floor(rng.uniform() * 8), .y = std::floor(rng.uniform() * 8)});
    }
    const std::vector<std::size_t> g = pareto_front(cloud);
    REQUIRE(std::set<std::size_t>(g.begin(), g.end()) == brute_front(cloud));
  }
}

TEST_CASE("a malformed search SPEC names the key that is wrong") {
  const Json good = load_json_file(kTinySpec);
  REQUIRE(spec_error(good).empty());
  Json j = good;
  j["space"]["engines"] = Json::array({"vllm", "vllmm"});
  CHECK_THAT(spec_error(j), Catch::StartsWith("space.engines[1]: unknown value \"vllmm\""));
  j = good;
  j["space"]["max_batch_sise"] = Json::array({8});
  CHECK_THAT(spec_error(j), Catch::StartsWith("space.max_batch_sise: unknown key"));
  j = good;
  j["cluster"]["nodes"] = Json{{"min", 4}, {"max", 2}};
  CHECK_THAT(spec_error(j), Catch::StartsWith("cluster.nodes.max: must be at least nodes.min"));
  j = good;
  j["space"]["pool_shapes"] = Json::array({"colocated", "2x1"});
  CHECK_THAT(spec_error(j), Catch::StartsWith("space.pool_shapes[1]: \"2x1\" is not a pool shape"));
  j = good;
  j["deployment"] = Json{{"ep_size", 4}};
  CHECK_THAT(spec_error(j), Catch::StartsWith("deployment.ep_size: is set by the search"));
  j = good;
  j["experts"] = Json{{"redundant_experts", 8}};
  CHECK_THAT(spec_error(j), Catch::StartsWith("experts.redundant_experts: is set by the search"));
  j = good;
  j.erase("sla");
  CHECK_THAT(spec_error(j), Catch::StartsWith("sla: required key is missing"));
  j = good;
  j["space"]["mtp"] = Json::array({1});
  CHECK_THAT(spec_error(j), Catch::StartsWith("space.mtp[0]: expected true or false"));
  j = good;
  j["verify"]["replications"] = 8;
  j["verify"]["max_replications"] = 4;
  CHECK_THAT(spec_error(j),
             Catch::StartsWith("verify.max_replications: must be at least verify.replications"));
  j = good;
  j["verify"]["replications"] = 1;  // no spread from one run
  CHECK_THAT(spec_error(j), Catch::StartsWith("verify.replications:"));

  // The CLI: one line naming the key, exit 2.
  Tmp t;
  j = good;
  j["space"]["attention_tp"] = Json::array({1, "two"});
  const fs::path bad = t.dir / "bad.json";
  std::ofstream(bad) << j.dump(2);
  const auto r = moesim_test::run_moesim(t, "search " + bad.string() + " --out " + (t.dir / "o").string());
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("moesim: error: space.attention_tp[1]: expected an integer"));
  // A scenario section the scenario parser refuses names the same key as in the SPEC.
  j = good;
  j["workload"]["arrival"]["rate_per_sec"] = 3;
  std::ofstream(bad) << j.dump(2);
  const auto r2 = moesim_test::run_moesim(t, "search " + bad.string() + " --out " + (t.dir / "o").string());
  CHECK(r2.code == 2);
  CHECK_THAT(r2.err, Catch::Contains("workload.arrival.rate_per_sec: unknown key"));
}

TEST_CASE("on a toy space the search's front equals the front of simulating every legal deployment") {
  Tmp t;
  const SearchSpec spec = load_search_spec(kTinySpec);
  SearchOptions o;
  o.jobs = 2;
  o.out_dir = t.dir / "search";
  const SearchResult r = run_search(spec, o);

  // Exhaustive: every deployment that parses and fits, each by its own capacity search at the SLA, from
  // the start rate the search uses (the static capacity x 0.8) so that both probe the same rates.
  std::vector<std::size_t> legal;
  std::vector<FrontPoint> pts;
  int simulated_by_search = 0;
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const Candidate& c = r.candidates[i];
    simulated_by_search += c.sim.done ? 1 : 0;
    LoadedScenario sc;
    try {
      sc = parse_scenario(c.scenario, ".");
      check_deployment_fits(sc.spec, *make_gpu_cost_model(sc.spec.cluster.gpu));
    } catch (const InputError&) {
      CHECK((c.status == "illegal" || c.status == "memory"));
      continue;
    }
    const double start = c.has_static && c.st.capacity_req_s > 0 ? 0.8 * c.st.capacity_req_s : 1.0;
    const CapacitySearchSettings st = capacity_settings(spec.verify);
    try {
      const CapacityResult cr =
          capacity_at_sla(with_arrival_rate(sc.spec, start), *make_gpu_cost_model(sc.spec.cluster.gpu), st);
      legal.push_back(i);
      pts.push_back(
          FrontPoint{.x = 1 / cr.at_capacity.tpot.mean, .y = cr.at_capacity.output_tokens_per_s_per_gpu});
      if (c.sim.done) {
        // The search's own run of this point is the same run.
        CHECK(c.sim.capacity_req_s == cr.bracket.holds_req_s);
        CHECK(c.sim.tokens_per_s_per_gpu == cr.at_capacity.output_tokens_per_s_per_gpu);
      }
    } catch (const InputError&) {
      // The SLA holds at no rate: not on any front.
    }
  }
  std::set<std::string> exhaustive;
  for (const std::size_t k : pareto_front(pts)) exhaustive.insert(r.candidates[legal[k]].axes.label());
  std::set<std::string> searched;
  for (const std::size_t f : r.front) searched.insert(r.candidates[f].axes.label());
  INFO("legal " << legal.size() << ", simulated by the search " << simulated_by_search);
  CHECK(legal.size() >= 8);
  CHECK(!exhaustive.empty());
  CHECK(searched == exhaustive);
  // The search simulated only a part of the legal space (the point of the static pass).
  CHECK(simulated_by_search < static_cast<int>(legal.size()));
  // Every candidate says where it ended, and the pruned ones why.
  for (const Candidate& c : r.candidates) {
    CHECK(!c.status.empty());
    if (c.status != "front" && c.status != "simulated") CHECK(!c.why.empty());
  }
}

TEST_CASE("search writes the same files when it resumes from its folder with another thread count") {
  Tmp t;
  // The toy SPEC with FP8 weights only: half its space, still several verification rounds to resume.
  Json narrowed = load_json_file(kTinySpec);
  narrowed["space"]["weights"] = Json::array({"fp8"});
  const std::string spec = (t.dir / "spec.json").string();
  std::ofstream(spec) << narrowed.dump(2);
  const std::string out = (t.dir / "s").string();
  const auto a = moesim_test::run_moesim(t, "search " + spec + " -j 2 --out " + out);
  REQUIRE(a.code == 0);
  CHECK_THAT(a.out, Catch::Contains("Recommended:"));
  CHECK_THAT(a.err, Catch::Contains("front so far"));
  const std::string json1 = moesim_test::slurp(t.dir / "s" / "search.json");
  const std::string csv1 = moesim_test::slurp(t.dir / "s" / "search.csv");
  const auto b = moesim_test::run_moesim(t, "search " + spec + " -j 1 --out " + out);
  REQUIRE(b.code == 0);
  CHECK(moesim_test::slurp(t.dir / "s" / "search.json") == json1);
  CHECK(moesim_test::slurp(t.dir / "s" / "search.csv") == csv1);
  CHECK(b.out == a.out);
  // A resume file written by another version (a figure under another name) is simulated again, not a crash.
  std::filesystem::path stale;
  Json old_format;
  for (const auto& e : std::filesystem::directory_iterator(t.dir / "s" / "points")) {
    const Json saved = Json::parse(moesim_test::slurp(e.path()));
    if (saved.at("sim").contains("ttft_at_percentile_s")) {
      stale = e.path();
      old_format = saved;
    }
  }
  REQUIRE(!stale.empty());
  old_format["sim"]["ttft_p_s"] = old_format["sim"]["ttft_at_percentile_s"];  // the previous key name
  old_format["sim"].erase("ttft_at_percentile_s");
  std::ofstream(stale) << old_format.dump() << "\n";
  const auto c = moesim_test::run_moesim(t, "search " + spec + " -j 1 --out " + out);
  REQUIRE(c.code == 0);
  CHECK(moesim_test::slurp(t.dir / "s" / "search.json") == json1);
  // Each front point is a scenario that runs as is.
  const Json doc = Json::parse(json1);
  REQUIRE(!doc.at("front").empty());
  const std::string file = doc.at("front")[0].at("scenario_file").get<std::string>();
  const auto v = moesim_test::run_moesim(t, "validate " + (t.dir / "s" / file).string());
  CHECK(v.code == 0);
}
