// `moesim sweep`: a grid over one or more scenario keys, run in parallel (threads, and MPI ranks under
// mpirun), one row per point (CSV, JSON, a table on stdout, progress on stderr). Rows come out in grid order
// whatever the thread or rank count; with --seeds each row holds the mean and 95% interval of its seeds,
// with --capacity the capacity at SLA and the metrics at that rate.
#include <filesystem>
#include <iostream>

#include "sim/app/commands.h"
#include "sim/app/grid.h"
#include "sim/app/metrics_table.h"
#include "sim/app/point_result.h"
#include "sim/app/replications.h"
#include "sim/app/task_pool.h"
#include "sim/engine/check.h"
#include "sim/scenario/report_json.h"

namespace moesim {

void execute_sweep(const SweepOptions& o) {
  const std::vector<Axis> axes = parse_axes(o.scenario.overrides);
  if (axes.empty()) throw InputError("--set", "a sweep needs at least one --set key=v1,v2,...");
  std::vector<std::vector<std::string>> points(1);  // one value per axis
  for (const Axis& a : axes) {
    std::vector<std::vector<std::string>> next;
    for (const auto& p : points) {
      for (const auto& v : a.values) {
        auto q = p;
        q.push_back(v);
        next.push_back(std::move(q));
      }
    }
    points = std::move(next);
  }
  const std::string seed_override = o.scenario.seed >= 0 ? "run.seed=" + std::to_string(o.scenario.seed) : "";
  // Parse every point first: a typo in a key is one clear error before anything runs.
  std::vector<ReplicatedScenario> loaded;
  std::vector<ScenarioSpec> specs;
  std::vector<int> seeds;
  std::vector<std::string> labels;
  const Json document = read_scenario_document(o.file);  // once: a FIFO works, every point sees one text
  for (const auto& p : points) {
    std::vector<std::string> ov;
    std::string label;
    for (std::size_t i = 0; i < axes.size(); ++i) {
      ov.push_back(axes[i].key + "=" + p[i]);
      label += (i ? " " : "") + ov.back();
    }
    if (!seed_override.empty()) ov.push_back(seed_override);
    loaded.push_back(load_replicated_document(document, o.file, ov));
    specs.push_back(std::move(loaded.back().loaded.spec));  // one copy per point (a trace's rows are large)
    seeds.push_back(o.measure.seeds > 0 ? o.measure.seeds : loaded.back().seeds);
    labels.push_back(label);
  }
  PointSettings settings;
  settings.capacity = o.measure.capacity;
  settings.search.rel_tol = o.measure.capacity_tol;
  TaskPool pool(o.jobs);
  // The output folder must be writable before any point runs.
  const std::string& name = specs.back().name;
  const std::filesystem::path dir =
      o.out_dir.empty() ? default_output_dir("sweep-", name) : std::filesystem::path(o.out_dir);
  if (pool.is_output_rank()) prepare_output_dir(dir);
  const std::vector<PointResult> results = run_points(pool, specs, seeds, labels, settings);
  if (!pool.is_output_rank()) return;
  std::vector<std::string> keys;
  for (const Axis& a : axes) keys.push_back(a.key);
  const TableMode mode{*std::max_element(seeds.begin(), seeds.end()) > 1, o.measure.capacity};
  MetricsTable table(keys, mode);
  Json rows = Json::array();
  std::size_t failed = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    table.add(points[i], results[i]);
    Json row{{"point", Json::object()}};
    for (std::size_t a = 0; a < axes.size(); ++a) row["point"][axes[a].key] = points[i][a];
    row.update(point_json(results[i], mode.replicated || mode.capacity));
    failed += results[i].ok() ? 0 : 1;
    rows.push_back(row);
  }
  Json doc{{"scenario", loaded.front().loaded.effective}, {"axes", keys}};
  if (mode.replicated || mode.capacity) {
    doc["measure"] = Json{{"capacity", mode.capacity},
                          {"capacity_tol", o.measure.capacity_tol},
                          {"interval", "95% Student t over the seeds of each point"}};
  }
  doc["rows"] = rows;
  write_text_file((dir / "sweep.csv").string(), table.csv());
  write_text_file((dir / "sweep.json").string(), doc.dump(2) + "\n");
  std::cout << table.text();
  std::cout << "\nsweep: " << (dir / "sweep.csv").string() << ", " << (dir / "sweep.json").string() << "\n";
  throw_if_internal(results, labels);  // exit 3 for a bug, after the rows that did run are written
  if (failed == points.size())
    throw InputError("sweep", "every point failed; first error: " + results.front().error());
}

}  // namespace moesim
