// Streaming latency distribution: log-spaced buckets (Boost.Histogram) with ~1.2% relative resolution
// from 100 ns to 1e5 s. O(1) memory whatever the number of samples, so a long run's memory stays flat.
#pragma once

#include <cstdint>
#include <memory>

namespace moesim {

class LatencyHistogram {
 public:
  LatencyHistogram();
  ~LatencyHistogram();
  LatencyHistogram(LatencyHistogram&&) noexcept;
  LatencyHistogram& operator=(LatencyHistogram&&) noexcept;

  void add(double seconds, double weight = 1.0);
  [[nodiscard]] double count() const { return count_; }
  [[nodiscard]] double mean() const { return count_ > 0 ? sum_ / count_ : 0.0; }
  [[nodiscard]] double max() const { return max_; }
  // q in [0, 100]; interpolates geometrically inside the bucket. 0 when empty.
  [[nodiscard]] double percentile(double q) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  double count_ = 0;
  double sum_ = 0;
  double max_ = 0;
};

}  // namespace moesim
