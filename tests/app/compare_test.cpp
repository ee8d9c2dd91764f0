// `moesim compare` through the real binary: files side by side, --set lists as columns and grids, the
// JSON and CSV outputs, the best-of-row marks, the cost row, and errors that name what to fix.
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "sim/scenario/json_reader.h"
#include "tests/app/cli_support.h"

using namespace moesim;
namespace fs = std::filesystem;

namespace {

using moesim_test::Result;
using moesim_test::run_moesim;
using moesim_test::slurp;

struct Tmp : moesim_test::TempDir {
  Tmp() : TempDir("moesim-compare-test-") {}
};

// A toy MoE on one or two nodes of 2 H100s, a handful of requests: a run takes milliseconds.
Json tiny(int nodes, const char* fabric = nullptr) {
  const Json model = {{"num_layers", 2}, {"hidden", 1024},     {"vocab", 1000},   {"attention", "gqa"},
                      {"num_heads", 8},  {"num_kv_heads", 8},  {"head_dim", 128}, {"routed_experts", 8},
                      {"top_k", 2},      {"expert_inter", 512}};
  Json cluster = {{"gpu", "h100-sxm"}, {"nodes", nodes}, {"gpus_per_node", 2}};
  if (fabric) cluster["fabric"] = {{"base", fabric}, {"gpus_per_node", 2}, {"nics_per_node", 2}};
  return Json{
      {"name", "tiny-compare"},
      {"model", model},
      {"cluster", cluster},
      {"deployment", {{"ep_size", 2 * nodes}}},
      {"workload",
       {{"arrival", {{"kind", "closed_loop"}, {"users", 4}}},
        {"prompt_tokens", {{"kind", "fixed"}, {"tokens", 32}}},
        {"output_tokens", {{"kind", "fixed"}, {"tokens", 8}}}}},
      {"run", {{"seed", 1}, {"requests", 12}}},
  };
}

fs::path write(const fs::path& p, const Json& j) {
  std::ofstream(p) << j.dump(2);
  return p;
}

const Json& row(const Json& j, const std::string& metric) {
  for (const Json& r : j["rows"]) {
    if (r["metric"] == metric) return r;
  }
  FAIL("no row " << metric);
  static const Json none;
  return none;
}

}  // namespace

TEST_CASE("compare puts two scenario files side by side and writes compare.json and compare.csv") {
  const Tmp t;
  const fs::path a = write(t.dir / "one_node.json", tiny(1));
  const fs::path b = write(t.dir / "two_nodes.json", tiny(2));
  const Result r = run_moesim(t, "compare " + a.string() + " " + b.string() + " -j 2 --out " +
                                     (t.dir / "out").string() + " --json " + (t.dir / "c.json").string());
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("one_node") && Catch::Contains("two_nodes") &&
                        Catch::Contains("gpu_hours_per_million_output_tokens") && Catch::Contains("*"));
  REQUIRE(fs::exists(t.dir / "out" / "compare.json"));
  REQUIRE(fs::exists(t.dir / "out" / "compare.csv"));
  const Json j = load_json_file((t.dir / "c.json").string());
  CHECK(j == load_json_file((t.dir / "out" / "compare.json").string()));
  REQUIRE(j["columns"].size() == 2);
  CHECK(j["columns"][0]["label"] == "one_node");
  CHECK(j["columns"][1]["label"] == "two_nodes");
  CHECK(j["columns"][0]["report"]["gpus"] == 2);
  CHECK(j["columns"][1]["report"]["gpus"] == 4);
  // The cost row is GPUs / (output tokens per second x 3600 s/h) x 1e6 tokens.
  const Json& cost = row(j, "gpu_hours_per_million_output_tokens");
  const Json& tput = row(j, "output_tok_s");
  for (int c = 0; c < 2; ++c) {
    const double gpus = c == 0 ? 2.0 : 4.0;
    CHECK(cost["values"][c].get<double>() == Approx(gpus / (tput["values"][c].get<double>() * 3600.0) * 1e6));
  }
  // A lower-is-better row marks the column with the lowest value. (The two columns' shares are within 2%
  // of each other, 0.42 and 0.43 with the fit's kernel: which one is lower is not the point here.)
  const Json& share = row(j, "all_to_all_share");
  CHECK(share["better"] == "lower");
  const double s0 = share["values"][0].get<double>();
  const double s1 = share["values"][1].get<double>();
  REQUIRE(s0 != s1);
  CHECK(share["best"] == Json::array({s0 < s1 ? 0 : 1}));
  // The CSV has a header and one line per column.
  const std::string csv = slurp(t.dir / "out" / "compare.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 3);
}

TEST_CASE("a list in one --set makes one column per value and several lists make a grid") {
  const Tmp t;
  const fs::path f = write(t.dir / "s.json", tiny(1));
  const Result one = run_moesim(
      t, "compare " + f.string() + " --set deployment.max_batch_size=1,4 --out " + (t.dir / "o1").string());
  INFO(one.out << one.err);
  REQUIRE(one.code == 0);
  const Json j1 = load_json_file((t.dir / "o1" / "compare.json").string());
  REQUIRE(j1["columns"].size() == 2);
  CHECK(j1["columns"][0]["label"] == "deployment.max_batch_size=1");
  CHECK(j1["columns"][1]["label"] == "deployment.max_batch_size=4");
  CHECK(j1["columns"][1]["scenario"]["deployment"]["max_batch_size"] == 4);
  // Batch 4 serves 4 users at once, batch 1 one at a time: more output tokens per second per GPU.
  CHECK(row(j1, "output_tok_s_per_gpu")["best"] == Json::array({1}));

  const Result grid =
      run_moesim(t, "compare " + f.string() +
                        " --set deployment.max_batch_size=1,4 --set workload.arrival.users=2,4,8"
                        " --set run.requests=8 --seed 7 -j 3 --out " +
                        (t.dir / "o2").string());
  INFO(grid.out << grid.err);
  REQUIRE(grid.code == 0);
  const Json j2 = load_json_file((t.dir / "o2" / "compare.json").string());
  REQUIRE(j2["columns"].size() == 6);
  // Grid order: the first --set varies slowest; one-value --set lists are plain overrides, not labels.
  CHECK(j2["columns"][0]["label"] == "deployment.max_batch_size=1 workload.arrival.users=2");
  CHECK(j2["columns"][5]["label"] == "deployment.max_batch_size=4 workload.arrival.users=8");
  for (const Json& c : j2["columns"]) {
    CHECK(c["scenario"]["run"]["requests"] == 8);
    CHECK(c["scenario"]["run"]["seed"] == 7);
  }
}

TEST_CASE("compare output is the same whatever the number of threads") {
  const Tmp t;
  const fs::path f = write(t.dir / "s.json", tiny(2));
  const std::string args = "compare " + f.string() + " --set deployment.max_batch_size=1,2,4 --out ";
  REQUIRE(run_moesim(t, args + (t.dir / "a").string() + " -j 1").code == 0);
  REQUIRE(run_moesim(t, args + (t.dir / "b").string() + " -j 3").code == 0);
  CHECK(slurp(t.dir / "a" / "compare.json") == slurp(t.dir / "b" / "compare.json"));
}

TEST_CASE("compare takes fabrics from the catalog and reports a bad fabric key by its JSON path") {
  const Tmp t;
  const fs::path ib = write(t.dir / "ib.json", tiny(2, "hgx-h100-8x400g"));
  const fs::path roce = write(t.dir / "roce.json", tiny(2, "hgx-h100-roce-fat-tree"));
  const Result ok =
      run_moesim(t, "compare " + ib.string() + " " + roce.string() + " --out " + (t.dir / "o").string());
  INFO(ok.out << ok.err);
  REQUIRE(ok.code == 0);
  const Json j = load_json_file((t.dir / "o" / "compare.json").string());
  CHECK(j["columns"][1]["scenario"]["cluster"]["fabric"]["layout"] == "fat_tree");

  Json bad = tiny(2, "hgx-h100-8x400g");
  bad["cluster"]["fabric"]["nic_gbps"] = 200;
  const fs::path b = write(t.dir / "bad.json", bad);
  const Result err =
      run_moesim(t, "compare " + ib.string() + " " + b.string() + " --out " + (t.dir / "o").string());
  CHECK(err.code != 0);
  CHECK_THAT(err.err, Catch::Contains("bad.json") && Catch::Contains("cluster.fabric.nic_gbps"));
}

TEST_CASE("compare refuses a single column and a malformed --set") {
  const Tmp t;
  const fs::path f = write(t.dir / "s.json", tiny(1));
  const Result single = run_moesim(t, "compare " + f.string() + " --out " + (t.dir / "o").string());
  CHECK(single.code != 0);
  CHECK_THAT(single.err, Catch::Contains("at least two columns"));
  const Result malformed = run_moesim(
      t, "compare " + f.string() + " --set deployment.max_batch_size --out " + (t.dir / "o").string());
  CHECK(malformed.code != 0);
  CHECK_THAT(malformed.err, Catch::Contains("--set"));
}

TEST_CASE("a column that does not fit is reported as an error while the others run") {
  const Tmp t;
  const fs::path f = write(t.dir / "s.json", tiny(1));
  const Result r =
      run_moesim(t, "compare " + f.string() + " --set deployment.kv_cache_memory_fraction=0.9,0.0001 --out " +
                        (t.dir / "o").string());
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  const Json j = load_json_file((t.dir / "o" / "compare.json").string());
  CHECK(j["columns"][0].contains("report"));
  CHECK(j["columns"][1].contains("error"));
  CHECK_THAT(r.out, Catch::Contains("error in deployment.kv_cache_memory_fraction=0.0001"));
}
