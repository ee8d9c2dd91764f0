// The key metrics of several reports side by side: CSV (one row per report) and an aligned text table.
// Shared by sweep and compare.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sim/serving/report.h"

namespace moesim {

struct MetricColumn {
  std::string name;
  double (*value)(const Report&);
  const char* format;  // printf format for the text table
};

const std::vector<MetricColumn>& metric_columns();

class MetricsTable {
 public:
  explicit MetricsTable(std::vector<std::string> key_columns) : keys_(std::move(key_columns)) {}
  void add(std::vector<std::string> key_values, const std::optional<Report>& r, const std::string& error);
  [[nodiscard]] std::string csv() const;
  [[nodiscard]] std::string text() const;

 private:
  struct Row {
    std::vector<std::string> keys;
    std::optional<Report> report;
    std::string error;
  };
  std::vector<std::string> keys_;
  std::vector<Row> rows_;
};

}  // namespace moesim
