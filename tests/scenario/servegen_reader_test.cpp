// ServeGen client data: the Python-literal distributions, a hand-made client whose synthesized counts and
// mean lengths follow from its rates and distributions, the shared DeepSeek-R1 folder's day (rates as its
// README states) and an hour of it replayed at the files' rates and mean lengths within sampling error.
#include "sim/scenario/servegen_reader.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "sim/scenario/scenario_parser.h"

namespace moesim {
namespace {

namespace fs = std::filesystem;

const std::string kFolder = MOESIM_SHARED_DIR "/data/traces/servegen_deepseek_r1";

fs::path hand_folder() {
  const fs::path d = fs::temp_directory_path() / "moesim_servegen_hand";
  fs::remove_all(d);
  fs::create_directories(d);
  // Window 0: 0.5 req/s Gamma; window 1 idle; window 2: 1 req/s Weibull.
  std::ofstream(d / "chunk-7-trace.csv")
      << "0,0.5,1.0,Gamma,1.0,2.0\n600,0,0,,0,0\n1200,1.0,0.8,Weibull,1.5,1.0\n";
  std::ofstream(d / "chunk-7-dataset.json")
      << R"({"0": {"input_tokens": "{100: 0.5, 300: 0.5}", "output_tokens": "{10: 1.0}", "reason_ratio": "{0.5: 1.0}"},)"
      << R"( "1200": {"input_tokens": "{}", "output_tokens": "{}", "reason_ratio": "{}"}})";
  return d;
}

}  // namespace

TEST_CASE("a ServeGen distribution literal becomes a cumulative table sampled as numpy searchsorted") {
  const TokenPmf p = parse_token_pmf("{3: 0.25, 1: 0.5, 2: 0.25}", "f");
  CHECK(p.values == std::vector<std::int64_t>{1, 2, 3});
  CHECK(p.cdf == std::vector<double>{0.5, 0.75, 1.0});
  CHECK(p.mean() == Approx(1.75));
  CHECK(p.quantile(0.5) == 1);
  CHECK(p.quantile(0.51) == 2);
  CHECK(p.quantile(0.99) == 3);
  CHECK(parse_token_pmf("{}", "f").values.empty());
  CHECK_THROWS_WITH(parse_token_pmf("{1: 0.5}", "file: x"),
                    Catch::StartsWith("file: x: probabilities sum to"));
  CHECK_THROWS_WITH(parse_token_pmf("[1, 2]", "f"), Catch::Contains("Python dict literal"));
  CHECK_THROWS_WITH(parse_token_pmf("{1.5: 1.0}", "f"), Catch::Contains("integers"));
}

TEST_CASE(
    "a hand-made ServeGen client gives ceil(rate x window) - 1 requests per window and its mean lengths") {
  const fs::path d = hand_folder();
  const ServeGenWorkload w = read_servegen((d / "chunk-7-trace.csv").string());
  REQUIRE(w.clients.size() == 1);
  CHECK(w.window_s == 600);
  CHECK(w.day_s == 1800);
  // The 1200 s distributions are empty, so ServeGen keeps the 0 s ones for the third window.
  REQUIRE(w.clients[0].lengths.size() == 1);
  ServeGenSource src(w, {}, {}, RandomStreams(3));
  int in_window[3] = {0, 0, 0};
  double input = 0;
  int n = 0;
  Time last;
  while (auto r = src.next()) {
    REQUIRE(r->arrival >= last);
    last = r->arrival;
    // An arrival on a window's end (the last one lands on it) belongs to that window.
    ++in_window[std::min(2, static_cast<int>(r->arrival.seconds() / 600))];
    REQUIRE((r->prompt_tokens == 100 || r->prompt_tokens == 300));
    REQUIRE(r->output_tokens == 10);
    input += static_cast<double>(r->prompt_tokens);
    ++n;
  }
  // ServeGen rescales the ceil(rate x 600) gaps to sum to the window; the last arrival lands on its end.
  CHECK(in_window[0] >= 299);
  CHECK(in_window[0] <= 300);
  CHECK(in_window[1] == 0);
  CHECK(in_window[2] >= 599);
  CHECK(in_window[2] <= 600);
  // Input 100 or 300 with equal odds: mean 200, standard deviation 100.
  CHECK(std::abs(input / n - 200.0) < 4.0 * 100.0 / std::sqrt(double(n)));
  CHECK_THROWS_WITH(read_servegen((d / "nothing.csv").string()), Catch::Contains("chunk-<id>-trace.csv"));
  std::ofstream(d / "chunk-8-trace.csv") << "0,1,1,Gamma,1,1\n600,1,1,Lognormal,1,1\n";
  std::ofstream(d / "chunk-8-dataset.json")
      << R"({"0": {"input_tokens": "{1: 1.0}", "output_tokens": "{1: 1.0}"}})";
  CHECK_THROWS_WITH(read_servegen((d / "chunk-8-trace.csv").string()),
                    Catch::StartsWith((d / "chunk-8-trace.csv").string() + ":2: unknown inter-arrival law"));
  fs::remove_all(d);
}

TEST_CASE("the DeepSeek-R1 ServeGen day has the summed rates its README states") {
  const ServeGenWorkload w = read_servegen(kFolder);
  CHECK(w.clients.size() == 73);
  CHECK(w.day_s == 86400);
  double lo = 1e9, hi = 0, sum = 0;
  const std::size_t windows = w.clients[0].windows.size();
  REQUIRE(windows == 144);
  for (std::size_t i = 0; i < windows; ++i) {
    double rate = 0;
    for (const auto& c : w.clients) rate += c.windows[i].rate_per_s;
    lo = std::min(lo, rate);
    hi = std::max(hi, rate);
    sum += rate;
  }
  // README: "the request rate ranges 4.3 to 42.5 req/s (mean 16.0) across the 144 windows".
  CHECK(lo == Approx(4.3).margin(0.05));
  CHECK(hi == Approx(42.5).margin(0.05));
  CHECK(sum / static_cast<double>(windows) == Approx(16.0).margin(0.05));
}

TEST_CASE("an hour of the DeepSeek-R1 ServeGen replay has the files' request count and mean lengths") {
  const ServeGenWorkload w = read_servegen(kFolder);
  const double start = 43200;  // noon: windows 72..77
  ServeGenSource src(w, {.start_s = start, .rate_scale = 1.0},
                     {.max_arrival_time = Duration::from_seconds(3600)}, RandomStreams(9));
  std::int64_t n = 0;
  double input = 0, output = 0;
  while (auto r = src.next()) {
    ++n;
    input += static_cast<double>(r->prompt_tokens);
    output += static_cast<double>(r->output_tokens);
  }
  // Expected from the files: per active client window, ceil(rate x 600) - 1 or ceil(rate x 600) requests
  // with the lengths in force; mean lengths weighted by those counts, standard errors from their variances.
  double lo = 0, hi = 0, in_mean = 0, out_mean = 0, in_var = 0, out_var = 0;
  for (const auto& c : w.clients) {
    for (std::size_t i = 72; i < 78; ++i) {
      const ServeGenWindow& win = c.windows[i];
      if (win.law == InterArrivalLaw::kNone || win.rate_per_s <= 0) continue;
      const double k = std::ceil(win.rate_per_s * 600);
      lo += k - 1;
      hi += k;
      const ServeGenLengths* l = c.lengths_at(win.start_s);
      REQUIRE(l != nullptr);
      const auto moments = [&](const TokenPmf& p, double& mean, double& var) {
        double m = 0, m2 = 0, prev = 0;
        for (std::size_t j = 0; j < p.values.size(); ++j) {
          const double x = double(p.values[j]);
          m += x * (p.cdf[j] - prev);
          m2 += x * x * (p.cdf[j] - prev);
          prev = p.cdf[j];
        }
        mean += (k - 0.5) * m;
        var += (k - 0.5) * (m2 - m * m);
      };
      moments(l->input, in_mean, in_var);
      moments(l->output, out_mean, out_var);
    }
  }
  CHECK(double(n) >= lo);
  CHECK(double(n) <= hi);
  const double count = 0.5 * (lo + hi);
  CHECK(std::abs(input / double(n) - in_mean / count) < 4.0 * std::sqrt(in_var) / count);
  CHECK(std::abs(output / double(n) - out_mean / count) < 4.0 * std::sqrt(out_var) / count);
}

TEST_CASE("a scenario replays ServeGen through workload.arrival, the same by seed") {
  auto rows = [](int seed) {
    Json j = Json::parse(R"({
      "model": "qwen3-30b-a3b", "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4},
      "deployment": {"ep_size": 4},
      "workload": {"arrival": {"kind": "trace", "format": "servegen", "start_s": 36000, "rate_scale": 0.5,
                               "file": "../shared/data/traces/servegen_deepseek_r1"}},
      "run": {"duration_s": 600}})");
    j["run"]["seed"] = seed;
    return parse_scenario(j, MOESIM_SOURCE_DIR).spec.workload.trace;
  };
  const auto a = rows(1);
  const auto b = rows(1);
  const auto c = rows(2);
  REQUIRE(a.size() > 100);
  REQUIRE(a.size() == b.size());
  bool same = true;
  for (std::size_t i = 0; i < a.size(); ++i)
    same = same && a[i].arrival == b[i].arrival && a[i].prompt_tokens == b[i].prompt_tokens;
  CHECK(same);
  CHECK((c.size() != a.size() || c[0].arrival != a[0].arrival));
  CHECK(a.back().arrival.seconds() < 600);
}

}  // namespace moesim
