// The key metrics of several points side by side: CSV (one row per point) and an aligned text table.
// Shared by sweep and compare. A point with several replications shows the mean of each metric, and
// the metrics that carry an interval get a <name>_ci95 column (half width of the 95% Student-t interval).
#pragma once

#include <string>
#include <vector>

#include "sim/app/point_result.h"
#include "sim/serving/report/report.h"

namespace moesim {

struct MetricColumn {
  std::string name;
  double (*value)(const Report&);
  const char* format;  // printf format for the text table
  bool interval;       // reported with a confidence interval across seeds
};

const std::vector<MetricColumn>& metric_columns();
// The index of a column in metric_columns(); InternalError for an unknown name.
std::size_t metric_index(const std::string& name);

// How the points of a table were measured: the replications (seeds) per point and whether the metrics
// were taken at the capacity at SLA (then a capacity_req_s column leads).
struct TableMode {
  bool replicated = false;  // some point has more than one replication: add the _ci95 columns
  bool capacity = false;
};

class MetricsTable {
 public:
  MetricsTable(std::vector<std::string> key_columns, TableMode mode)
      : keys_(std::move(key_columns)), mode_(mode) {}
  void add(std::vector<std::string> key_values, const PointResult& point);
  [[nodiscard]] std::string csv() const;
  [[nodiscard]] std::string text() const;

 private:
  struct Row {
    std::vector<std::string> keys;
    PointResult point;
  };
  std::vector<std::string> keys_;
  TableMode mode_;
  std::vector<Row> rows_;
};

// A mean and its interval as the text tables print it: "812.3" or "812.3 ±12.1" (printf `format`).
std::string format_interval(const char* format, const MeanInterval& v, bool with_interval);

}  // namespace moesim
