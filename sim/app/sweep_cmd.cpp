// `moesim sweep`: a grid over one or more scenario keys, run in parallel, one row per point (CSV, JSON,
// a table on stdout, progress on stderr). Rows come out in grid order whatever the thread count.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include "sim/app/commands.h"
#include "sim/app/grid.h"
#include "sim/app/metrics_table.h"
#include "sim/engine/check.h"
#include "sim/scenario/profile_io.h"
#include "sim/scenario/report_json.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/serving_simulation.h"

namespace moesim {

namespace {

struct SweepOptions {
  std::string file;
  ScenarioOptions scenario;
  std::string out_dir;
  unsigned jobs = 0;
};

struct Point {
  std::vector<std::string> values;  // one per axis
  std::optional<Report> report;
  std::string error;
  double wall_s = 0;
};

void sweep(const SweepOptions& o) {
  const std::vector<Axis> axes = parse_axes(o.scenario.overrides);
  if (axes.empty()) throw InputError("--set", "a sweep needs at least one --set key=v1,v2,...");
  std::vector<Point> points(1);
  for (const Axis& a : axes) {
    std::vector<Point> next;
    for (const Point& p : points) {
      for (const auto& v : a.values) {
        Point q = p;
        q.values.push_back(v);
        next.push_back(q);
      }
    }
    points = std::move(next);
  }
  const std::string seed_override = o.scenario.seed >= 0 ? "run.seed=" + std::to_string(o.scenario.seed) : "";
  auto overrides_of = [&](const Point& p) {
    std::vector<std::string> ov;
    for (std::size_t i = 0; i < axes.size(); ++i) ov.push_back(axes[i].key + "=" + p.values[i]);
    if (!seed_override.empty()) ov.push_back(seed_override);
    return ov;
  };
  // Parse every point first: a typo in a key is one clear error before anything runs.
  std::string name;
  std::vector<LoadedScenario> loaded;
  for (const Point& p : points) {
    loaded.push_back(load_scenario(o.file, overrides_of(p)));
    name = loaded.back().spec.name;
  }
  // The output folder must be writable before any point runs.
  const std::filesystem::path dir =
      o.out_dir.empty() ? std::filesystem::path("out") / ("sweep-" + name) : std::filesystem::path(o.out_dir);
  prepare_output_dir(dir);
  const unsigned jobs = o.jobs > 0 ? o.jobs : std::max(1u, std::thread::hardware_concurrency());
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> done{0};
  std::mutex io;
  auto worker = [&] {
    for (std::size_t i = next++; i < points.size(); i = next++) {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        const auto gpu = make_gpu_cost_model(loaded[i].spec.cluster.gpu);
        points[i].report = simulate(loaded[i].spec, *gpu);
      } catch (const InputError& e) {
        points[i].error = e.what();
      } catch (const std::exception& e) {  // an internal error must not take the other points down
        points[i].error = std::string("internal error: ") + e.what();
      }
      points[i].wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::lock_guard<std::mutex> lock(io);
      std::cerr << "[" << ++done << "/" << points.size() << "]";
      for (std::size_t a = 0; a < axes.size(); ++a)
        std::cerr << " " << axes[a].key << "=" << points[i].values[a];
      std::cerr << (points[i].error.empty() ? "" : "  ERROR") << "  (" << points[i].wall_s << " s)\n";
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::min<unsigned>(jobs, static_cast<unsigned>(points.size())); ++t)
    threads.emplace_back(worker);
  for (auto& t : threads) t.join();

  std::vector<std::string> keys;
  for (const Axis& a : axes) keys.push_back(a.key);
  MetricsTable table(keys);
  Json rows = Json::array();
  std::size_t failed = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    table.add(points[i].values, points[i].report, points[i].error);
    Json row{{"point", Json::object()}};
    for (std::size_t a = 0; a < axes.size(); ++a) row["point"][axes[a].key] = points[i].values[a];
    if (points[i].report) {
      row["report"] = report_to_json(*points[i].report, Json());
      row["report"].erase("scenario");
    } else {
      row["error"] = points[i].error;
      ++failed;
    }
    rows.push_back(row);
  }
  write_text_file((dir / "sweep.csv").string(), table.csv());
  write_text_file(
      (dir / "sweep.json").string(),
      Json{{"scenario", loaded.front().effective}, {"axes", keys}, {"rows", rows}}.dump(2) + "\n");
  std::cout << table.text();
  std::cout << "\nsweep: " << (dir / "sweep.csv").string() << ", " << (dir / "sweep.json").string() << "\n";
  if (failed == points.size())
    throw InputError("sweep", "every point failed; first error: " + points.front().error);
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto o = std::make_shared<SweepOptions>();
  CLI::App* cmd = app.add_subcommand(
      "sweep",
      "Run a grid of scenarios: each --set key=v1,v2,... is one axis (the grid is their product). Writes "
      "sweep.csv and sweep.json; a point that does not fit is reported as a row with its error");
  cmd->add_option("scenario", o->file, "Scenario JSON (default: the built-in default)");
  add_scenario_options(*cmd, o->scenario);
  cmd->add_option("--out", o->out_dir, "Output folder (default: out/sweep-<scenario name>)");
  cmd->add_option("-j,--jobs", o->jobs, "Parallel simulations (default: all cores)");
  cmd->callback([o] { sweep(*o); });
}

}  // namespace moesim
