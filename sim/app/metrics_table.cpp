#include "sim/app/metrics_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
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
      {"dispatch_share", [](const Report& r) { return r.dispatch_share; }, "%.3f", false},
      {"combine_share", [](const Report& r) { return r.combine_share; }, "%.3f", false},
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
  if (mode_.capacity) o << ",capacity_req_s" << (mode_.replicated ? ",capacity_req_s_ci95" : "");
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
    if (mode_.capacity) put(row.point.capacity(), true);
    for (std::size_t i = 0; i < cols.size(); ++i)
      put(ok ? row.point.metric(i) : MeanInterval{}, cols[i].interval);
    if (mode_.replicated) o << "," << row.point.replications.size();
    o << "\n";
  }
  return o.str();
}

std::string MetricsTable::text() const {
  // A compact table: key columns plus the metrics users scan first.
  static const std::vector<std::string> shown = {
      "output_tok_s_per_gpu", "ttft_p99_ms",       "tpot_p99_ms", "all_to_all_share",
      "sla_violation_rate",   "mean_batch_tokens", "gpu_busy"};
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> header = keys_;
  if (mode_.capacity) header.emplace_back("capacity_req_s");
  for (const auto& s : shown) header.push_back(s);
  cells.push_back(header);
  for (const Row& row : rows_) {
    std::vector<std::string> line = row.keys;
    const bool ok = row.point.ok();
    if (mode_.capacity) line.push_back(ok ? format_interval("%.3f", row.point.capacity(), true) : "error");
    for (const auto& s : shown) {
      if (!ok) {
        line.push_back(!mode_.capacity && s == shown.front() ? "error" : "");
        continue;
      }
      const std::size_t i = metric_index(s);
      line.push_back(
          format_interval(metric_columns()[i].format, row.point.metric(i), metric_columns()[i].interval));
    }
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
