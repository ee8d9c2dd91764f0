// Streaming latency distribution: log-spaced buckets with ~1.2% relative resolution from 100 ns to 1e5 s.
// Only the range of buckets between the smallest and the largest sample is stored, so a histogram of one
// measurement segment costs a few kilobytes, and histograms of segments merge exactly (bucket by bucket).
#pragma once

#include <cstdint>
#include <vector>

namespace moesim {

class LatencyHistogram {
 public:
  void add(double seconds, double weight = 1.0);
  // Adds every sample of `o` (the merged histogram is the one both sample streams would have built).
  void merge(const LatencyHistogram& o);
  [[nodiscard]] double count() const { return count_; }
  [[nodiscard]] double mean() const { return count_ > 0 ? sum_ / count_ : 0.0; }
  [[nodiscard]] double max() const { return max_; }
  // q in [0, 100]; interpolates geometrically inside the bucket. 0 when empty.
  [[nodiscard]] double percentile(double q) const;

 private:
  void grow_to(int bin);
  std::vector<double> w_;  // weights of buckets first_ .. first_ + w_.size() - 1
  int first_ = 0;
  double count_ = 0;
  double sum_ = 0;
  double max_ = 0;
  double last_ = -1;  // the last value added and its bucket: the tokens of a step share their latency
  int last_bin_ = 0;
};

}  // namespace moesim
