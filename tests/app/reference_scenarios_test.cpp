// Every reference scenario through validate, a short run and plan; the parts of every step add up to the
// step in steps.csv and in the Chrome trace (step_breakdown.h), with two-batch overlap, pipeline stages
// and expert tiers among them.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "tests/app/cli_support.h"

using namespace moesim_test;

namespace {

std::vector<std::string> reference_scenarios() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(MOESIM_SOURCE_DIR) / "scenarios/reference")) {
    if (e.path().extension() == ".json") out.push_back("scenarios/reference/" + e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream s(line);
  std::string c;
  while (std::getline(s, c, ',')) cells.push_back(c);
  if (!line.empty() && line.back() == ',') cells.emplace_back();  // a last field left empty
  return cells;
}

// Sums, over the rows of steps.csv, of each column; checks on the way that the `*_s` part columns add up
// to duration_s. Returns the column sums.
std::map<std::string, double> check_steps_csv(const fs::path& csv) {
  std::ifstream f(csv);
  std::string line;
  REQUIRE(std::getline(f, line));
  const std::vector<std::string> head = split(line);
  std::vector<std::size_t> parts;
  std::size_t duration = 0;
  for (std::size_t i = 0; i < head.size(); ++i) {
    if (head[i] == "duration_s") duration = i;
    // Part columns come between `waiting` and `comm_hidden_s`.
    if (i > 7 && head[i].ends_with("_s") && head[i] != "comm_hidden_s") parts.push_back(i);
  }
  REQUIRE(parts.size() >= 10);
  std::map<std::string, double> sums;
  int rows = 0;
  while (std::getline(f, line)) {
    const std::vector<std::string> c = split(line);
    REQUIRE(c.size() == head.size());
    double sum = 0;
    for (const std::size_t i : parts) sum += std::stod(c[i]);
    const double d = std::stod(c[duration]);
    // Each value is printed to 1 ns: the sum of the parts is within their rounding.
    REQUIRE(sum == Approx(d).margin(1e-9 * static_cast<double>(parts.size())));
    // An empty field is a figure the step did not measure (expert_imbalance under run.moe_layer_sample).
    for (std::size_t i = 0; i < c.size(); ++i) sums[head[i]] += c[i].empty() ? 0.0 : std::stod(c[i]);
    ++rows;
  }
  REQUIRE(rows > 0);
  return sums;
}

// In the trace, the parts (tid 1) laid out from a step's start (tid 0) end where the step ends.
void check_trace(const fs::path& trace) {
  std::ifstream f(trace);
  const nlohmann::json j = nlohmann::json::parse(f);
  std::map<std::pair<int, double>, double> step_dur;  // (pid, ts) -> dur
  std::map<std::pair<int, double>, double> parts;     // (pid, step ts) -> sum of part durations
  std::map<int, double> current;                      // pid -> ts of the step being laid out
  int steps = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.value("ph", "") != "X") continue;
    const int pid = e.at("pid").get<int>();
    if (e.at("tid").get<int>() == 0) {
      current[pid] = e.at("ts").get<double>();
      step_dur[{pid, current[pid]}] = e.at("dur").get<double>();
      ++steps;
    } else {
      parts[{pid, current.at(pid)}] += e.at("dur").get<double>();
    }
  }
  REQUIRE(steps > 0);
  for (const auto& [key, dur] : step_dur) {
    INFO("replica " << key.first << " step at " << key.second << " us");
    REQUIRE(parts[key] == Approx(dur).epsilon(1e-9).margin(1e-6));
  }
}

}  // namespace

TEST_CASE("plan runs on every reference scenario and says it fits exactly when validate accepts it") {
  TempDir t("moesim-ref-plan-");
  int quantised = 0;
  for (const std::string& s : reference_scenarios()) {
    INFO(s);
    const Result r = run_moesim(t, "plan " + s + " --json " + (t.dir / "plan.json").string());
    INFO(r.err);
    REQUIRE(r.code == 0);
    std::ifstream f(t.dir / "plan.json");
    const nlohmann::json plan = nlohmann::json::parse(f);
    // Both decide from the memory plan as deployed (under quantisation, each expert at its precision).
    const Result v = run_moesim(t, "validate " + s);
    INFO(v.err);
    REQUIRE(plan.at("deployment_memory").at("fits").get<bool>() == (v.code == 0));
    std::ifstream in(s);
    const nlohmann::json scenario = nlohmann::json::parse(in);
    if (scenario.contains("experts") && scenario.at("experts").contains("quantization")) ++quantised;
  }
  REQUIRE(quantised > 0);  // the agreement was checked on a quantised deployment too
}

TEST_CASE("validate and a short run agree on every reference scenario and every step's parts add up") {
  TempDir t("moesim-ref-run-");
  std::vector<std::string> cases;
  for (const std::string& s : reference_scenarios()) {
    // A fleet (thousands of GPUs, thousands of requests a second) runs its first 500 requests: the checks
    // are per step, and the suite stays quick under the sanitizers.
    std::ifstream f(fs::path(MOESIM_SOURCE_DIR) / s);
    const nlohmann::json j = nlohmann::json::parse(f);
    const auto& cl = j.at("cluster");
    const bool fleet = cl.value("nodes", 1) * cl.value("gpus_per_node", 8) > 1024;
    cases.push_back(fleet ? s + " --set run.requests=500" : s);
  }
  // Two-batch overlap (alone and with expert tiers) is not on in any shipped reference scenario.
  cases.push_back(
      "scenarios/reference/topology_dsv3_2x8xh100_ep16.json --set deployment.two_batch_overlap=true");
  cases.push_back(
      "scenarios/reference/experts_dsv3_int4_ssd_1x8xh100.json --set deployment.two_batch_overlap=true");
  std::map<std::string, double> seen;  // summed part seconds over every run
  for (const std::string& c : cases) {
    INFO(c);
    const Result v = run_moesim(t, "validate " + c);
    const Result r =
        run_moesim(t, "run " + c + " --set run.duration_s=2 --set run.warmup_s=0 -q --steps-csv --out " +
                          (t.dir / "out").string() + " --trace " + (t.dir / "trace.json").string());
    INFO(v.err << r.err);
    REQUIRE(v.code == r.code);  // a scenario validate accepts runs, and one it refuses does not
    if (r.code != 0) {
      REQUIRE(r.code == 2);
      REQUIRE(v.err == r.err);
      continue;
    }
    for (const auto& [k, x] : check_steps_csv(t.dir / "out" / "steps.csv")) seen[k] += x;
    check_trace(t.dir / "trace.json");
  }
  // The runs did exercise overlap, pipeline stages and expert loads.
  REQUIRE(seen["comm_hidden_s"] > 0);
  REQUIRE(seen["pipeline_bubble_s"] > 0);
  REQUIRE(seen["pipeline_send_s"] > 0);
  REQUIRE(seen["expert_stall_s"] > 0);
}
