// The moesim binary as a user runs it: exit codes, one clear message on bad input, outputs written.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

struct Result {
  int code = 0;
  std::string out;
};

// Runs the binary with `args`, stderr merged into stdout.
Result moesim(const std::string& args) {
  const std::string cmd = std::string(MOESIM_BINARY) + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), static_cast<int>(buf.size()), p) != nullptr) r.out += buf.data();
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string tiny(const char* name) { return std::string(MOESIM_SOURCE_DIR) + "/scenarios/tiny/" + name; }

std::filesystem::path temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("moesim_cli_" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace

TEST_CASE("run writes report.json with the scenario echo, seed, version and fingerprint") {
  const auto dir = temp_dir("run");
  const Result r = moesim("run " + tiny("tiny_poisson_ep4.json") + " --seed 3 --out " + dir.string() +
                          " --requests-csv --steps-csv");
  REQUIRE(r.code == 0);
  REQUIRE(r.out.find("Throughput") != std::string::npos);
  std::ifstream f(dir / "report.json");
  const auto j = nlohmann::json::parse(f);
  REQUIRE(j["seed"] == 3);
  REQUIRE(j["scenario"]["run"]["seed"] == 3);
  REQUIRE(j["fingerprint"].get<std::string>().size() == 16);
  REQUIRE(j.contains("moesim_version"));
  REQUIRE(j["requests"]["finished"].get<long>() + j["requests"]["dropped"].get<long>() ==
          j["requests"]["arrived"].get<long>());
  // One CSV row per request plus the header.
  std::ifstream rq(dir / "requests.csv");
  long lines = 0;
  for (std::string line; std::getline(rq, line);) ++lines;
  REQUIRE(lines == j["requests"]["arrived"].get<long>() + 1);
  REQUIRE(std::filesystem::exists(dir / "steps.csv"));
}

TEST_CASE("the number in system reported over a window is never negative, even from an empty start") {
  // Twenty requests from an empty system over a 2 s window: the series rises from zero, and the fitted trend
  // line dips below it at the window's start (fuzz case seed 2, 688); a mean count is at least zero.
  const auto dir = temp_dir("trend");
  const Result r =
      moesim("run " + tiny("tiny_two_nodes.json") + " --set run.seed=2 -q --out " + dir.string() +
             " --set run.duration_s=2 --set run.requests=20 --set run.warmup_s=0");
  REQUIRE(r.code == 0);
  std::ifstream f(dir / "report.json");
  const auto j = nlohmann::json::parse(f);
  CHECK(j["load"]["in_system_start"].get<double>() >= 0.0);
  CHECK(j["load"]["in_system_end"].get<double>() >= 0.0);
}

TEST_CASE("the same scenario and seed give byte-identical reports") {
  const auto a = temp_dir("det_a");
  const auto b = temp_dir("det_b");
  REQUIRE(moesim("run " + tiny("tiny_two_nodes.json") + " -q --out " + a.string()).code == 0);
  REQUIRE(moesim("run " + tiny("tiny_two_nodes.json") + " -q --out " + b.string()).code == 0);
  std::stringstream x;
  std::stringstream y;
  x << std::ifstream(a / "report.json").rdbuf();
  y << std::ifstream(b / "report.json").rdbuf();
  REQUIRE(x.str() == y.str());
}

TEST_CASE("bad input exits non-zero with one message naming the JSON path or file") {
  const Result unknown = moesim("validate " + tiny("tiny_poisson_ep4.json") + " --set deployment.ep_sise=2");
  REQUIRE(unknown.code == 2);
  // One line: the path, what is wrong, and the keys that are known there (so the typo is obvious).
  REQUIRE(unknown.out.rfind("moesim: error: deployment.ep_sise: unknown key (known keys here: ", 0) == 0);
  REQUIRE(unknown.out.find(" ep_size,") != std::string::npos);
  REQUIRE(std::count(unknown.out.begin(), unknown.out.end(), '\n') == 1);
  const Result ep = moesim("run " + tiny("tiny_poisson_ep4.json") + " --set deployment.ep_size=3");
  REQUIRE(ep.code == 2);
  REQUIRE(ep.out.find("deployment.ep_size: 3 does not divide") != std::string::npos);
  const Result missing = moesim("run /nonexistent.json");
  REQUIRE(missing.code == 2);
  REQUIRE(missing.out.find("/nonexistent.json: cannot open") != std::string::npos);
  const Result too_big = moesim("run --set cluster.gpu=h100-sxm --set precision.weights=bf16");
  REQUIRE(too_big.code == 2);
  REQUIRE(too_big.out.find("does not fit") != std::string::npos);
  const Result verb = moesim("frobnicate");
  REQUIRE(verb.code != 0);
}

TEST_CASE("sweep writes one row per grid point in grid order") {
  const auto dir = temp_dir("sweep");
  const Result r =
      moesim("sweep " + tiny("tiny_poisson_ep4.json") +
             " --set deployment.max_batch_size=4,16 --set workload.arrival.rate_per_s=10,20,40 -j 2 --out " +
             dir.string());
  REQUIRE(r.code == 0);
  std::ifstream f(dir / "sweep.csv");
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  REQUIRE(lines.size() == 1 + 2 * 3);
  REQUIRE(lines[1].rfind("4,10,ok,", 0) == 0);
  REQUIRE(lines[2].rfind("4,20,ok,", 0) == 0);
  REQUIRE(lines[6].rfind("16,40,ok,", 0) == 0);
  REQUIRE(r.out.find("[6/6]") != std::string::npos);  // progress on stderr
}

TEST_CASE("run --trace writes a Chrome trace with one step slice per step") {
  const auto dir = temp_dir("trace");
  const Result r = moesim("run " + tiny("tiny_two_nodes.json") + " -q --out " + dir.string() + " --trace " +
                          (dir / "trace.json").string() + " --trace-limit-s 0");
  REQUIRE(r.code == 0);
  std::ifstream t(dir / "trace.json");
  const auto trace = nlohmann::json::parse(t);
  std::ifstream rep(dir / "report.json");
  const auto report = nlohmann::json::parse(rep);
  long steps = 0;
  long in_window = 0;
  const double from_us = report["time"]["window_from_s"].get<double>() * 1e6;
  const double to_us = report["time"]["window_to_s"].get<double>() * 1e6;
  for (const auto& e : trace["traceEvents"]) {
    if (e["name"] == "step") {
      ++steps;
      REQUIRE(e["ph"] == "X");
      REQUIRE(e["dur"].get<double>() > 0);
      const double ts = e["ts"].get<double>();
      in_window += ts >= from_us && ts < to_us ? 1 : 0;
    }
  }
  // Every step is traced; the report counts those that started in its measurement window.
  REQUIRE(in_window == report["step"]["count"].get<long>());
  REQUIRE(steps > in_window);
}
