#include "sim/app/metrics_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>

#include "sim/engine/check.h"

namespace moesim {

const std::vector<MetricColumn>& metric_columns() {
  static const std::vector<MetricColumn> cols = {
      {"output_tok_s", [](const Report& r) { return r.output_tokens_per_s; }, "%.1f", true},
      {"output_tok_s_per_gpu", [](const Report& r) { return r.output_tokens_per_s_per_gpu; }, "%.1f", true},
      {"total_tok_s", [](const Report& r) { return r.total_tokens_per_s; }, "%.1f", true},
      {"requests_s", [](const Report& r) { return r.requests_per_s; }, "%.3f", true},
      {"ttft_p50_ms", [](const Report& r) { return r.ttft.p50 * 1e3; }, "%.1f", true},
      {"ttft_p99_ms", [](const Report& r) { return r.ttft.p99 * 1e3; }, "%.1f", true},
      {"tpot_p50_ms", [](const Report& r) { return r.tpot.p50 * 1e3; }, "%.2f", true},
      {"tpot_p99_ms", [](const Report& r) { return r.tpot.p99 * 1e3; }, "%.2f", true},
      {"itl_p99_ms", [](const Report& r) { return r.itl.p99 * 1e3; }, "%.2f", true},
      {"e2e_p99_s", [](const Report& r) { return r.e2e.p99; }, "%.2f", true},
      {"sla_met", [](const Report& r) { return r.sla_met ? 1.0 : 0.0; }, "%.0f", false},
      {"sla_violation_rate", [](const Report& r) { return r.sla_violation_rate; }, "%.3f", true},
      {"goodput_req_s", [](const Report& r) { return r.goodput_requests_per_s; }, "%.3f", true},
      {"all_to_all_share", [](const Report& r) { return r.all_to_all_share(); }, "%.3f", false},
      {"dispatch_share", [](const Report& r) { return r.share(StepPart::kDispatch); }, "%.3f", false},
      {"combine_share", [](const Report& r) { return r.share(StepPart::kCombine); }, "%.3f", false},
      {"mean_step_ms", [](const Report& r) { return r.mean_step_s * 1e3; }, "%.2f", false},
      {"mean_batch_tokens", [](const Report& r) { return r.mean_batch_tokens; }, "%.1f", false},
      {"gpu_busy", [](const Report& r) { return r.gpu_mean.busy; }, "%.3f", false},
      {"gpu_mfu", [](const Report& r) { return r.gpu_mean.compute_util; }, "%.3f", false},
      {"gpu_hbm_bw_util", [](const Report& r) { return r.gpu_mean.hbm_bw_util; }, "%.3f", false},
      {"memory_used_fraction",
       [](const Report& r) { return r.memory.hbm > 0 ? r.memory.used() / r.memory.hbm : 0.0; }, "%.3f",
       false},
      {"kv_headroom_gib",
       [](const Report& r) { return (r.memory.kv_pool - r.memory.kv_peak_used) / (1024.0 * 1024 * 1024); },
       "%.1f", false},
      {"gpu_load_imbalance", [](const Report& r) { return r.gpu_load_imbalance; }, "%.2f", false},
      {"expert_load_imbalance", [](const Report& r) { return r.expert_load_imbalance; }, "%.2f", false},
      {"preemptions", [](const Report& r) { return static_cast<double>(r.preemptions); }, "%.0f", false},
      {"dropped", [](const Report& r) { return static_cast<double>(r.requests_dropped); }, "%.0f", false},
      {"gpus", [](const Report& r) { return static_cast<double>(r.gpus); }, "%.0f", false},
      // Cost: GPU-hours spent per million output tokens at the measured output rate.
      {"gpu_hours_per_million_output_tokens",
       [](const Report& r) {
         return r.output_tokens_per_s > 0 ? r.gpus / (r.output_tokens_per_s * 3600.0) * 1e6
                                          : std::numeric_limits<double>::infinity();
       },
       "%.2f", true},
  };
  return cols;
}

std::size_t metric_index(const std::string& name) {
  const auto& cols = metric_columns();
  for (std::size_t i = 0; i < cols.size(); ++i) {
    if (cols[i].name == name) return i;
  }
  throw InternalError("no metric column named " + name);
}

void MetricsTable::add(std::vector<std::string> key_values, const PointResult& point) {
  rows_.push_back(Row{std::move(key_values), point});
}

std::string format_interval(const char* format, const MeanInterval& v, bool with_interval) {
  auto one = [&](double x) {
    if (std::isnan(x)) return std::string("nan");
    if (std::isinf(x)) return std::string(x > 0 ? "inf" : "-inf");
    char buf[64];
    std::snprintf(buf, sizeof buf, format, x);
    return std::string(buf);
  };
  if (!with_interval || std::isnan(v.half_width_95)) return one(v.mean);
  return one(v.mean) + " \u00b1" + one(v.half_width_95);
}

namespace {

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string csv_number(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

}  // namespace

std::string MetricsTable::csv() const {
  std::ostringstream o;
  for (const auto& k : keys_) o << csv_escape(k) << ",";
  o << "status";
  if (mode_.capacity) {
    o << ",capacity_req_s" << (mode_.replicated ? ",capacity_req_s_ci95" : "") << ",capacity_fails_req_s"
      << (mode_.replicated ? ",capacity_fails_req_s_ci95" : "");
  }
  for (const auto& c : metric_columns())
    o << "," << c.name << (mode_.replicated && c.interval ? "," + c.name + "_ci95" : "");
  if (mode_.replicated) o << ",seeds";
  o << "\n";
  const auto& cols = metric_columns();
  for (const Row& row : rows_) {
    const bool ok = row.point.ok();
    for (const auto& v : row.keys) o << csv_escape(v) << ",";
    o << (ok ? "ok" : csv_escape("error: " + row.point.error()));
    auto put = [&](const MeanInterval& v, bool interval) {
      o << "," << (ok ? csv_number(v.mean) : "");
      if (mode_.replicated && interval) o << "," << (ok && v.n > 1 ? csv_number(v.half_width_95) : "");
    };
    if (mode_.capacity) {
      put(row.point.capacity(), true);
      put(row.point.capacity_fails(), true);
    }
    for (std::size_t i = 0; i < cols.size(); ++i)
      put(ok ? row.point.metric(i) : MeanInterval{}, cols[i].interval);
    if (mode_.replicated) o << "," << row.point.replications.size();
    o << "\n";
  }
  return o.str();
}

namespace {

// The rows holding the best mean of a column, compared as printed (0.482 and 0.4821 tie), among the rows
// that meet their SLA; none when no such row exists or every row that ran prints the same value.
std::vector<bool> best_rows(const std::vector<const PointResult*>& points, bool capacity, int better,
                            const std::function<MeanInterval(const PointResult&)>& value,
                            const char* format) {
  std::vector<bool> marks(points.size(), false);
  if (better == 0) return marks;
  auto shown = [&](const PointResult& p) { return format_interval(format, value(p), false); };
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (!points[i]->meets_sla(capacity) || std::isnan(value(*points[i]).mean)) continue;
    const double v = value(*points[i]).mean;
    if (!best || (shown(*points[i]) != shown(*points[*best]) &&
                  (better > 0 ? v > value(*points[*best]).mean : v < value(*points[*best]).mean))) {
      best = i;
    }
  }
  if (!best) return marks;
  const std::string top = shown(*points[*best]);
  bool differ = false;
  for (const PointResult* p : points) differ = differ || (p->ok() && shown(*p) != top);
  if (!differ) return marks;
  for (std::size_t i = 0; i < points.size(); ++i)
    marks[i] = points[i]->meets_sla(capacity) && shown(*points[i]) == top;
  return marks;
}

}  // namespace

std::string MetricsTable::text() const {
  // A compact table: key columns plus the metrics users scan first, with their direction (+1 higher is
  // better, -1 lower, 0 neither). Every value cell ends in '*' (best of its column) or ' '.
  struct Shown {
    std::string name;
    int better;
  };
  static const std::vector<Shown> shown = {
      {"output_tok_s_per_gpu", 1}, {"ttft_p99_ms", -1},      {"tpot_p99_ms", -1}, {"all_to_all_share", -1},
      {"sla_violation_rate", -1},  {"mean_batch_tokens", 0}, {"gpu_busy", 0}};
  std::vector<const PointResult*> points;
  for (const Row& row : rows_) points.push_back(&row.point);
  std::vector<std::vector<std::string>> columns;  // value cells, one vector per shown column
  std::vector<std::string> header = keys_;
  auto add_column = [&](const std::string& name, int better, const char* format, bool interval,
                        const std::function<MeanInterval(const PointResult&)>& value, const char* failed) {
    header.push_back(name + " ");
    const std::vector<bool> marks = best_rows(points, mode_.capacity, better, value, format);
    std::vector<std::string> cells;
    for (std::size_t r = 0; r < points.size(); ++r) {
      cells.push_back(points[r]->ok()
                          ? format_interval(format, value(*points[r]), interval) + (marks[r] ? "*" : " ")
                          : std::string(failed) + " ");
    }
    columns.push_back(std::move(cells));
  };
  if (mode_.capacity) {
    add_column(
        "capacity_req_s", 1, "%.3f", true, [](const PointResult& p) { return p.capacity(); }, "error");
    // The interval's upper end: the capacity lies between the two columns.
    add_column(
        "capacity_fails_req_s", 0, "%.3f", true, [](const PointResult& p) { return p.capacity_fails(); }, "");
  }
  for (const Shown& s : shown) {
    const std::size_t i = metric_index(s.name);
    const MetricColumn& c = metric_columns()[i];
    add_column(
        s.name, s.better, c.format, c.interval, [i](const PointResult& p) { return p.metric(i); },
        !mode_.capacity && &s == &shown.front() ? "error" : "");
  }
  std::vector<std::vector<std::string>> cells{header};
  for (std::size_t r = 0; r < rows_.size(); ++r) {
    std::vector<std::string> line = rows_[r].keys;
    for (const auto& col : columns) line.push_back(col[r]);
    cells.push_back(line);
  }
  // Width in code points (the interval sign is two bytes of UTF-8).
  auto width_of = [](const std::string& s) {
    std::size_t n = 0;
    for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
  };
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& line : cells) {
    for (std::size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], width_of(line[i]));
  }
  std::ostringstream o;
  for (std::size_t r = 0; r < cells.size(); ++r) {
    for (std::size_t i = 0; i < cells[r].size(); ++i) {
      o << (i ? "  " : "") << std::string(width[i] - width_of(cells[r][i]), ' ') << cells[r][i];
    }
    o << "\n";
  }
  o << "* marks the best of a column among the points that meet their SLA";
  o << (mode_.capacity ? " (metrics at each point's capacity at SLA)" : "") << ".\n";
  if (mode_.replicated) o << "(mean \u00b1 half width of the 95% Student-t interval over the seeds)\n";
  for (const Row& row : rows_) {
    if (!row.point.ok()) {
      o << "error at";
      for (const auto& v : row.keys) o << " " << v;
      o << ": " << row.point.error() << "\n";
    }
  }
  return o.str();
}

}  // namespace moesim
