// `moesim compare`: several scenarios (files, and grids of --set lists over them) simulated in parallel
// and shown side by side, one column per scenario, with the best value of each row marked. Writes
// compare.json and compare.csv; columns come out in command-line order whatever the thread count. With
// --seeds each value is a mean with its 95% interval, with --capacity the columns are compared at their
// capacity at SLA; best-value marks only go to columns that meet their SLA.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "sim/app/commands.h"
#include "sim/app/grid.h"
#include "sim/app/metrics_table.h"
#include "sim/app/point_result.h"
#include "sim/app/replications.h"
#include "sim/app/task_pool.h"
#include "sim/engine/check.h"
#include "sim/scenario/profile_io.h"
#include "sim/scenario/report_json.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/runtime/serving_simulation.h"

namespace moesim {

namespace {

enum class Better { kHigher, kLower, kNone };

struct CompareRow {
  const char* metric;  // a metric_columns() name, or "capacity_req_s"
  Better better;
};

constexpr const char* kCapacity = "capacity_req_s";
constexpr const char* kCapacityFails = "capacity_fails_req_s";  // the interval's upper end

// The rows of the comparison, in the order a capacity review reads them (the capacity first when searched).
std::vector<CompareRow> compare_rows(bool capacity) {
  std::vector<CompareRow> rows = {
      {"gpus", Better::kNone},
      {"output_tok_s", Better::kHigher},
      {"output_tok_s_per_gpu", Better::kHigher},
      {"ttft_p99_ms", Better::kLower},
      {"tpot_p99_ms", Better::kLower},
      {"all_to_all_share", Better::kLower},
      {"sla_violation_rate", Better::kLower},
      {"goodput_req_s", Better::kHigher},
      {"memory_used_fraction", Better::kLower},
      {"kv_headroom_gib", Better::kHigher},
      {"gpu_hours_per_million_output_tokens", Better::kLower},
      {"mean_step_ms", Better::kNone},
      {"mean_batch_tokens", Better::kNone},
      {"gpu_busy", Better::kNone},
  };
  if (!capacity) return rows;
  std::vector<CompareRow> with{rows.front(), {kCapacity, Better::kHigher}, {kCapacityFails, Better::kNone}};
  with.insert(with.end(), rows.begin() + 1, rows.end());
  return with;
}

struct Column {
  std::string label;
  std::string file;
  std::vector<std::string> overrides;
  std::optional<ReplicatedScenario> scenario;
  PointResult result;
};

// A row's value in a column: the mean over its seeds and the interval.
MeanInterval value_of(const CompareRow& row, const Column& c) {
  if (std::string(row.metric) == kCapacityFails) return c.result.capacity_fails();
  return std::string(row.metric) == kCapacity ? c.result.capacity()
                                              : c.result.metric(metric_index(row.metric));
}
const char* format_of(const CompareRow& row) {
  const std::string m = row.metric;
  return m == kCapacity || m == kCapacityFails ? "%.3f" : metric_columns()[metric_index(row.metric)].format;
}
bool interval_of(const CompareRow& row) {
  const std::string m = row.metric;
  return m == kCapacity || m == kCapacityFails || metric_columns()[metric_index(row.metric)].interval;
}

// Files x the product of the --set lists; a --set with one value applies to every column.
std::vector<Column> plan_columns(const CompareOptions& o) {
  const std::vector<Axis> axes = parse_axes(o.scenario.overrides);
  std::vector<std::string> files = o.files;
  if (files.empty()) files.emplace_back();  // the built-in default scenario
  std::vector<std::vector<std::string>> grid(1);
  for (const Axis& a : axes) {
    std::vector<std::vector<std::string>> next;
    for (const auto& point : grid) {
      for (const auto& v : a.values) {
        auto q = point;
        q.push_back(a.key + "=" + v);
        next.push_back(std::move(q));
      }
    }
    grid = std::move(next);
  }
  std::vector<Column> cols;
  for (const auto& file : files) {
    std::string stem = file.empty() ? "default" : std::filesystem::path(file).stem().string();
    for (const auto& other : files) {
      if (&other != &file && !other.empty() && std::filesystem::path(other).stem().string() == stem)
        stem = file;
    }
    for (const auto& point : grid) {
      Column c;
      c.file = file;
      c.overrides = point;
      std::string label = files.size() > 1 ? stem : "";
      for (std::size_t a = 0; a < axes.size(); ++a) {
        if (axes[a].values.size() > 1) label += (label.empty() ? "" : " ") + point[a];
      }
      c.label = label.empty() ? stem : label;
      if (o.scenario.seed >= 0) c.overrides.push_back("run.seed=" + std::to_string(o.scenario.seed));
      cols.push_back(std::move(c));
    }
  }
  if (cols.size() < 2) {
    throw InputError("compare",
                     "needs at least two columns: give several scenario files, or a --set key=v1,v2,...");
  }
  return cols;
}

std::string format_value(const CompareRow& row, double v) {
  return format_interval(format_of(row), MeanInterval{v, 0, 1}, false);
}

// Indices of the columns holding the best value of a row, compared as printed (0.482 and 0.4821 tie)
// among the columns that meet their SLA; empty when the row has no direction, no such column, or every
// column that ran prints the same value.
std::vector<std::size_t> best_of(const CompareRow& row, const std::vector<Column>& cols, bool capacity) {
  if (row.better == Better::kNone) return {};
  std::optional<std::size_t> best;
  bool differ = false;
  for (std::size_t i = 0; i < cols.size(); ++i) {
    if (!cols[i].result.meets_sla(capacity)) continue;
    const double v = value_of(row, cols[i]).mean;
    if (std::isnan(v)) continue;
    if (!best) {
      best = i;
      continue;
    }
    const double b = value_of(row, cols[*best]).mean;
    if (format_value(row, v) == format_value(row, b)) continue;
    differ = true;
    if (row.better == Better::kHigher ? v > b : v < b) best = i;
  }
  std::vector<std::size_t> out;
  if (!best) return out;
  const std::string shown = format_value(row, value_of(row, cols[*best]).mean);
  // A lone eligible column still wins against columns that ran but missed their SLA with other values.
  for (std::size_t i = 0; i < cols.size() && !differ; ++i) {
    differ = cols[i].result.ok() && !cols[i].result.meets_sla(capacity) &&
             format_value(row, value_of(row, cols[i]).mean) != shown;
  }
  if (!differ) return out;
  for (std::size_t i = 0; i < cols.size(); ++i) {
    if (cols[i].result.meets_sla(capacity) && format_value(row, value_of(row, cols[i]).mean) == shown)
      out.push_back(i);
  }
  return out;
}

// Display width in code points (the interval sign is two bytes of UTF-8).
std::size_t width_of(const std::string& s) {
  std::size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Rows are metrics, columns scenarios. Every value cell ends in '*' (best) or ' ', so the header and
// text rows get a trailing space to stay aligned.
std::string text_table(const std::vector<Column>& cols, bool capacity) {
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> header{"metric"};
  for (const Column& c : cols) header.push_back(c.label + " ");
  cells.push_back(header);
  const std::vector<CompareRow> rows = compare_rows(capacity);
  bool replicated = false;
  for (const CompareRow& row : rows) {
    const std::vector<std::size_t> best = best_of(row, cols, capacity);
    const char* sense = row.better == Better::kHigher ? " (+)" : row.better == Better::kLower ? " (-)" : "";
    std::vector<std::string> line{std::string(row.metric) + sense};
    for (std::size_t i = 0; i < cols.size(); ++i) {
      if (!cols[i].result.ok()) {
        line.emplace_back(&row == &rows.front() ? "error " : " ");
        continue;
      }
      const bool is_best = std::find(best.begin(), best.end(), i) != best.end();
      const MeanInterval v = value_of(row, cols[i]);
      replicated = replicated || v.n > 1;
      line.push_back(format_interval(format_of(row), v, interval_of(row)) + (is_best ? "*" : " "));
    }
    cells.push_back(line);
  }
  std::vector<std::string> model{"cost_model"};
  for (const Column& c : cols) {
    model.push_back((c.result.ok() ? c.result.replications.front().report.value("cost_model", std::string())
                                   : std::string()) +
                    " ");
  }
  cells.push_back(model);
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& line : cells) {
    for (std::size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], width_of(line[i]));
  }
  std::ostringstream o;
  for (const auto& line : cells) {
    o << line[0] << std::string(width[0] - width_of(line[0]), ' ');
    for (std::size_t i = 1; i < line.size(); ++i)
      o << "  " << std::string(width[i] - width_of(line[i]), ' ') << line[i];
    o << "\n";
  }
  o << "(+) higher is better, (-) lower is better; * marks the best of a row among the columns that meet "
       "their SLA.\n";
  if (capacity) o << "Every metric is taken at the column's capacity at SLA (capacity_req_s).\n";
  if (replicated) o << "Values are mean \u00b1 half width of the 95% Student-t interval over the seeds.\n";
  for (const Column& c : cols) {
    if (!c.result.ok()) {
      o << "error in " << c.label << ": " << c.result.error() << "\n";
    } else if (!c.result.meets_sla(capacity)) {
      o << c.label << " does not meet its SLA: no best-value mark\n";
    }
  }
  return o.str();
}

Json compare_json(const std::vector<Column>& cols, bool capacity, bool detailed) {
  Json columns = Json::array();
  for (const Column& c : cols) {
    Json col{{"label", c.label},
             {"file", c.file.empty() ? Json(nullptr) : Json(c.file)},
             {"overrides", c.overrides}};
    col["scenario"] = c.scenario->loaded.effective;
    col["meets_sla"] = c.result.meets_sla(capacity);
    col.update(point_json(c.result, detailed));
    columns.push_back(col);
  }
  Json rows = Json::array();
  for (const CompareRow& row : compare_rows(capacity)) {
    Json values = Json::array();
    Json ci95 = Json::array();
    for (const Column& c : cols) {
      const MeanInterval v = c.result.ok() ? value_of(row, c) : MeanInterval{std::nan(""), std::nan(""), 0};
      values.push_back(std::isfinite(v.mean) ? Json(v.mean) : Json(nullptr));
      ci95.push_back(std::isfinite(v.half_width_95) ? Json(v.half_width_95) : Json(nullptr));
    }
    const char* better = row.better == Better::kHigher  ? "higher"
                         : row.better == Better::kLower ? "lower"
                                                        : nullptr;
    Json r{{"metric", row.metric},
           {"better", better ? Json(better) : Json(nullptr)},
           {"values", values},
           {"best", best_of(row, cols, capacity)}};
    if (detailed) r["ci95"] = ci95;
    rows.push_back(std::move(r));
  }
  return Json{{"columns", columns}, {"rows", rows}};
}

}  // namespace

void execute_compare(const CompareOptions& o) {
  std::vector<Column> cols = plan_columns(o);
  // Parse every column first: a typo is one clear error before anything runs.
  std::vector<ScenarioSpec> specs;
  std::vector<int> seeds;
  std::vector<std::string> labels;
  std::map<std::string, Json> documents;  // each file read once, whatever the columns over it
  for (Column& c : cols) {
    try {
      auto doc = documents.find(c.file);
      if (doc == documents.end()) doc = documents.emplace(c.file, read_scenario_document(c.file)).first;
      c.scenario = load_replicated_document(doc->second, c.file, c.overrides);
    } catch (const InputError& e) {
      throw InputError(c.file.empty() ? c.label : c.file, e.what());
    }
    specs.push_back(std::move(c.scenario->loaded.spec));  // one copy per column (a trace's rows are large)
    seeds.push_back(o.measure.seeds > 0 ? o.measure.seeds : c.scenario->seeds);
    labels.push_back(c.label);
  }
  // The output folder must be writable before any column runs.
  const std::filesystem::path dir = o.out_dir.empty() ? default_output_dir("compare-", specs.front().name)
                                                      : std::filesystem::path(o.out_dir);
  PointSettings settings;
  settings.capacity = o.measure.capacity;
  settings.search.rel_tol = o.measure.capacity_tol;
  settings.roofline = o.roofline;
  TaskPool pool(o.jobs);
  if (pool.is_output_rank()) prepare_output_dir(dir);
  std::vector<PointResult> results = run_points(pool, specs, seeds, labels, settings);
  if (!pool.is_output_rank()) return;
  std::vector<PointResult> broken(cols.size());  // the replications that broke an invariant (no report)
  for (std::size_t i = 0; i < cols.size(); ++i) {
    for (const Replication& r : results[i].replications) {
      if (r.internal) broken[i].replications.push_back(r);
    }
    cols[i].result = std::move(results[i]);
  }
  const bool capacity = o.measure.capacity;
  const TableMode mode{*std::max_element(seeds.begin(), seeds.end()) > 1, capacity};

  const Json j = compare_json(cols, capacity, mode.replicated || capacity);
  write_text_file((dir / "compare.json").string(), j.dump(2) + "\n");
  std::vector<std::string> keys{"column"};
  MetricsTable table(keys, mode);
  for (const Column& c : cols) table.add({c.label}, c.result);
  write_text_file((dir / "compare.csv").string(), table.csv());
  if (!o.json_file.empty()) write_text_file(o.json_file, j.dump(2) + "\n");
  std::cout << text_table(cols, capacity);
  std::cout << "\ncompare: " << (dir / "compare.json").string() << ", " << (dir / "compare.csv").string()
            << (o.json_file.empty() ? "" : ", " + o.json_file) << "\n";
  throw_if_internal(broken, labels);  // exit 3 for a bug, after the outputs are written
  const bool all_failed =
      std::none_of(cols.begin(), cols.end(), [](const Column& c) { return c.result.ok(); });
  if (all_failed)
    throw InputError("compare", "every column failed; first error: " + cols.front().result.error());
}

}  // namespace moesim
