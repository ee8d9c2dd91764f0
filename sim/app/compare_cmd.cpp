// `moesim compare`: several scenarios (files, and grids of --set lists over them) simulated in parallel
// and shown side by side, one column per scenario, with the best value of each row marked. Writes
// compare.json and compare.csv; columns come out in command-line order whatever the thread count.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "hwmodels/roofline_cost_model.h"
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

struct CompareOptions {
  std::vector<std::string> files;
  ScenarioOptions scenario;
  std::string out_dir;
  std::string json_file;
  unsigned jobs = 0;
  bool roofline = false;
};

enum class Better { kHigher, kLower, kNone };

struct CompareRow {
  const char* metric;  // a metric_columns() name
  Better better;
};

// The rows of the comparison, in the order a capacity review reads them.
const std::vector<CompareRow>& compare_rows() {
  static const std::vector<CompareRow> rows = {
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
  return rows;
}

const MetricColumn& metric(const std::string& name) {
  for (const MetricColumn& c : metric_columns()) {
    if (c.name == name) return c;
  }
  throw InternalError("compare: no metric column named " + name);
}

struct Column {
  std::string label;
  std::string file;
  std::vector<std::string> overrides;
  std::optional<LoadedScenario> scenario;
  std::optional<Report> report;
  std::string error;
  double wall_s = 0;
};

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

void simulate_columns(std::vector<Column>& cols, unsigned jobs, bool roofline) {
  const unsigned threads_wanted = jobs > 0 ? jobs : std::max(1u, std::thread::hardware_concurrency());
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> done{0};
  std::mutex io;
  auto worker = [&] {
    for (std::size_t i = next++; i < cols.size(); i = next++) {
      Column& c = cols[i];
      const auto t0 = std::chrono::steady_clock::now();
      try {
        const ScenarioSpec& spec = c.scenario->spec;
        const std::unique_ptr<GpuCostModel> gpu = roofline
                                                      ? std::make_unique<RooflineCostModel>(spec.cluster.gpu)
                                                      : make_gpu_cost_model(spec.cluster.gpu);
        c.report = simulate(spec, *gpu);
      } catch (const InputError& e) {
        c.error = e.what();
      } catch (const std::exception& e) {  // an internal error must not take the other points down
        c.error = std::string("internal error: ") + e.what();
      }
      c.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::lock_guard<std::mutex> lock(io);
      std::cerr << "[" << ++done << "/" << cols.size() << "] " << c.label
                << (c.error.empty() ? "" : "  ERROR") << "  (" << c.wall_s << " s)\n";
    }
  };
  std::vector<std::thread> threads;
  const auto n = std::min<std::size_t>(threads_wanted, cols.size());
  for (std::size_t t = 0; t < n; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
}

std::string format_value(const MetricColumn& m, double v) {
  if (std::isinf(v)) return "inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, m.format, v);
  return buf;
}

// Indices of the columns holding the best value of a row, compared as printed (0.482 and 0.4821 tie);
// empty when the row has no direction or every column prints the same value.
std::vector<std::size_t> best_of(const CompareRow& row, const std::vector<Column>& cols) {
  if (row.better == Better::kNone) return {};
  const MetricColumn& m = metric(row.metric);
  std::optional<std::size_t> best;
  bool differ = false;
  for (std::size_t i = 0; i < cols.size(); ++i) {
    if (!cols[i].report) continue;
    const double v = m.value(*cols[i].report);
    if (std::isnan(v)) continue;
    if (!best) {
      best = i;
      continue;
    }
    const double b = m.value(*cols[*best].report);
    if (format_value(m, v) == format_value(m, b)) continue;
    differ = true;
    if (row.better == Better::kHigher ? v > b : v < b) best = i;
  }
  std::vector<std::size_t> out;
  if (!best || !differ) return out;
  const std::string shown = format_value(m, m.value(*cols[*best].report));
  for (std::size_t i = 0; i < cols.size(); ++i) {
    if (cols[i].report && format_value(m, m.value(*cols[i].report)) == shown) out.push_back(i);
  }
  return out;
}

// Rows are metrics, columns scenarios. Every value cell ends in '*' (best) or ' ', so the header and
// text rows get a trailing space to stay aligned.
std::string text_table(const std::vector<Column>& cols) {
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> header{"metric"};
  for (const Column& c : cols) header.push_back(c.label + " ");
  cells.push_back(header);
  for (const CompareRow& row : compare_rows()) {
    const MetricColumn& m = metric(row.metric);
    const std::vector<std::size_t> best = best_of(row, cols);
    const char* sense = row.better == Better::kHigher ? " (+)" : row.better == Better::kLower ? " (-)" : "";
    std::vector<std::string> line{std::string(row.metric) + sense};
    for (std::size_t i = 0; i < cols.size(); ++i) {
      if (!cols[i].report) {
        line.emplace_back(&row == &compare_rows().front() ? "error " : " ");
        continue;
      }
      const bool is_best = std::find(best.begin(), best.end(), i) != best.end();
      line.push_back(format_value(m, m.value(*cols[i].report)) + (is_best ? "*" : " "));
    }
    cells.push_back(line);
  }
  std::vector<std::string> model{"cost_model"};
  for (const Column& c : cols) model.push_back((c.report ? c.report->cost_model : std::string()) + " ");
  cells.push_back(model);
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& line : cells) {
    for (std::size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
  }
  std::ostringstream o;
  for (const auto& line : cells) {
    o << line[0] << std::string(width[0] - line[0].size(), ' ');
    for (std::size_t i = 1; i < line.size(); ++i)
      o << "  " << std::string(width[i] - line[i].size(), ' ') << line[i];
    o << "\n";
  }
  o << "(+) higher is better, (-) lower is better; * marks the best of a row.\n";
  for (const Column& c : cols) {
    if (!c.report) o << "error in " << c.label << ": " << c.error << "\n";
  }
  return o.str();
}

Json compare_json(const std::vector<Column>& cols) {
  Json columns = Json::array();
  for (const Column& c : cols) {
    Json col{{"label", c.label},
             {"file", c.file.empty() ? Json(nullptr) : Json(c.file)},
             {"overrides", c.overrides}};
    col["scenario"] = c.scenario->effective;
    if (c.report) {
      col["report"] = report_to_json(*c.report, Json());
      col["report"].erase("scenario");
    } else {
      col["error"] = c.error;
    }
    columns.push_back(col);
  }
  Json rows = Json::array();
  for (const CompareRow& row : compare_rows()) {
    const MetricColumn& m = metric(row.metric);
    Json values = Json::array();
    for (const Column& c : cols) {
      const double v = c.report ? m.value(*c.report) : std::nan("");
      values.push_back(std::isfinite(v) ? Json(v) : Json(nullptr));
    }
    const char* better = row.better == Better::kHigher  ? "higher"
                         : row.better == Better::kLower ? "lower"
                                                        : nullptr;
    rows.push_back(Json{{"metric", row.metric},
                        {"better", better ? Json(better) : Json(nullptr)},
                        {"values", values},
                        {"best", best_of(row, cols)}});
  }
  return Json{{"columns", columns}, {"rows", rows}};
}

void compare(const CompareOptions& o) {
  std::vector<Column> cols = plan_columns(o);
  // Parse every column first: a typo is one clear error before anything runs.
  for (Column& c : cols) {
    try {
      c.scenario = load_scenario(c.file, c.overrides);
    } catch (const InputError& e) {
      throw InputError(c.file.empty() ? c.label : c.file, e.what());
    }
  }
  // The output folder must be writable before any column runs.
  const std::filesystem::path dir =
      o.out_dir.empty() ? std::filesystem::path("out") / ("compare-" + cols.front().scenario->spec.name)
                        : std::filesystem::path(o.out_dir);
  prepare_output_dir(dir);
  simulate_columns(cols, o.jobs, o.roofline);

  const Json j = compare_json(cols);
  write_text_file((dir / "compare.json").string(), j.dump(2) + "\n");
  std::vector<std::string> keys{"column"};
  MetricsTable table(keys);
  for (const Column& c : cols) table.add({c.label}, c.report, c.error);
  write_text_file((dir / "compare.csv").string(), table.csv());
  if (!o.json_file.empty()) write_text_file(o.json_file, j.dump(2) + "\n");
  std::cout << text_table(cols);
  std::cout << "\ncompare: " << (dir / "compare.json").string() << ", " << (dir / "compare.csv").string()
            << (o.json_file.empty() ? "" : ", " + o.json_file) << "\n";
  const bool all_failed =
      std::none_of(cols.begin(), cols.end(), [](const Column& c) { return c.report.has_value(); });
  if (all_failed) throw InputError("compare", "every column failed; first error: " + cols.front().error);
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compare",
      "Simulate several scenarios and show their key metrics side by side, the best of each row marked. "
      "Columns: each scenario file, times the product of the --set lists (--set cluster.nodes=1,2,4 makes "
      "three "
      "columns; a --set with one value applies to all). Writes compare.json and compare.csv");
  cmd->add_option("scenarios", o->files, "Scenario JSON files (default: the built-in default)");
  add_scenario_options(*cmd, o->scenario);
  cmd->add_option("--out", o->out_dir, "Output folder (default: out/compare-<first scenario name>)");
  cmd->add_option("--json", o->json_file, "Also write the comparison JSON to this file");
  cmd->add_option("-j,--jobs", o->jobs, "Parallel simulations (default: all cores)");
  cmd->add_flag("--roofline", o->roofline,
                "Cost every column with the datasheet roofline, even where a calibrated GPU profile exists");
  cmd->callback([o] { compare(*o); });
}

}  // namespace moesim
