#include "sim/app/metrics_table.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>

namespace moesim {

const std::vector<MetricColumn>& metric_columns() {
  static const std::vector<MetricColumn> cols = {
      {"output_tok_s", [](const Report& r) { return r.output_tokens_per_s; }, "%.1f"},
      {"output_tok_s_per_gpu", [](const Report& r) { return r.output_tokens_per_s_per_gpu; }, "%.1f"},
      {"total_tok_s", [](const Report& r) { return r.total_tokens_per_s; }, "%.1f"},
      {"requests_s", [](const Report& r) { return r.requests_per_s; }, "%.3f"},
      {"ttft_p50_ms", [](const Report& r) { return r.ttft.p50 * 1e3; }, "%.1f"},
      {"ttft_p99_ms", [](const Report& r) { return r.ttft.p99 * 1e3; }, "%.1f"},
      {"tpot_p50_ms", [](const Report& r) { return r.tpot.p50 * 1e3; }, "%.2f"},
      {"tpot_p99_ms", [](const Report& r) { return r.tpot.p99 * 1e3; }, "%.2f"},
      {"itl_p99_ms", [](const Report& r) { return r.itl.p99 * 1e3; }, "%.2f"},
      {"e2e_p99_s", [](const Report& r) { return r.e2e.p99; }, "%.2f"},
      {"sla_met", [](const Report& r) { return r.sla_met ? 1.0 : 0.0; }, "%.0f"},
      {"sla_violation_rate", [](const Report& r) { return r.sla_violation_rate; }, "%.3f"},
      {"goodput_req_s", [](const Report& r) { return r.goodput_requests_per_s; }, "%.3f"},
      {"all_to_all_share", [](const Report& r) { return r.all_to_all_share(); }, "%.3f"},
      {"dispatch_share", [](const Report& r) { return r.share(StepPart::kDispatch); }, "%.3f"},
      {"combine_share", [](const Report& r) { return r.share(StepPart::kCombine); }, "%.3f"},
      {"mean_step_ms", [](const Report& r) { return r.mean_step_s * 1e3; }, "%.2f"},
      {"mean_batch_tokens", [](const Report& r) { return r.mean_batch_tokens; }, "%.1f"},
      {"gpu_busy", [](const Report& r) { return r.gpu_mean.busy; }, "%.3f"},
      {"gpu_mfu", [](const Report& r) { return r.gpu_mean.compute_util; }, "%.3f"},
      {"gpu_hbm_bw_util", [](const Report& r) { return r.gpu_mean.hbm_bw_util; }, "%.3f"},
      {"memory_used_fraction",
       [](const Report& r) { return r.memory.hbm > 0 ? r.memory.used() / r.memory.hbm : 0.0; }, "%.3f"},
      {"kv_headroom_gib",
       [](const Report& r) { return (r.memory.kv_pool - r.memory.kv_peak_used) / (1024.0 * 1024 * 1024); },
       "%.1f"},
      {"gpu_load_imbalance", [](const Report& r) { return r.gpu_load_imbalance; }, "%.2f"},
      {"expert_load_imbalance", [](const Report& r) { return r.expert_load_imbalance; }, "%.2f"},
      {"preemptions", [](const Report& r) { return static_cast<double>(r.preemptions); }, "%.0f"},
      {"dropped", [](const Report& r) { return static_cast<double>(r.requests_dropped); }, "%.0f"},
      {"gpus", [](const Report& r) { return static_cast<double>(r.gpus); }, "%.0f"},
      // Cost: GPU-hours spent per million output tokens at the measured output rate.
      {"gpu_hours_per_million_output_tokens",
       [](const Report& r) {
         return r.output_tokens_per_s > 0 ? r.gpus / (r.output_tokens_per_s * 3600.0) * 1e6
                                          : std::numeric_limits<double>::infinity();
       },
       "%.2f"},
  };
  return cols;
}

void MetricsTable::add(std::vector<std::string> key_values, const std::optional<Report>& r,
                       const std::string& error) {
  rows_.push_back(Row{std::move(key_values), r, error});
}

namespace {
std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}
}  // namespace

std::string MetricsTable::csv() const {
  std::ostringstream o;
  for (const auto& k : keys_) o << csv_escape(k) << ",";
  o << "status";
  for (const auto& c : metric_columns()) o << "," << c.name;
  o << "\n";
  char buf[64];
  for (const Row& row : rows_) {
    for (const auto& v : row.keys) o << csv_escape(v) << ",";
    o << (row.report ? "ok" : csv_escape("error: " + row.error));
    for (const auto& c : metric_columns()) {
      o << ",";
      if (row.report) {
        std::snprintf(buf, sizeof buf, "%.9g", c.value(*row.report));
        o << buf;
      }
    }
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
  for (const auto& s : shown) header.push_back(s);
  cells.push_back(header);
  char buf[64];
  for (const Row& row : rows_) {
    std::vector<std::string> line = row.keys;
    for (const auto& s : shown) {
      if (!row.report) {
        line.push_back(s == shown.front() ? "error" : "");
        continue;
      }
      for (const auto& c : metric_columns()) {
        if (c.name == s) {
          std::snprintf(buf, sizeof buf, c.format, c.value(*row.report));
          line.push_back(buf);
        }
      }
    }
    cells.push_back(line);
  }
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& line : cells) {
    for (std::size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
  }
  std::ostringstream o;
  for (std::size_t r = 0; r < cells.size(); ++r) {
    for (std::size_t i = 0; i < cells[r].size(); ++i) {
      o << (i ? "  " : "") << std::string(width[i] - cells[r][i].size(), ' ') << cells[r][i];
    }
    o << "\n";
  }
  for (const Row& row : rows_) {
    if (!row.report) {
      o << "error at";
      for (const auto& v : row.keys) o << " " << v;
      o << ": " << row.error << "\n";
    }
  }
  return o.str();
}

}  // namespace moesim
