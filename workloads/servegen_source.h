// ServeGen workloads (Xiang et al., arXiv 2505.09999; github.com/alibaba/ServeGen): not per-request traces
// but per-client descriptions, each 600 s window a request rate with a fitted inter-arrival law (Gamma or
// Weibull) and each 6 h window length distributions. Requests are synthesized as ServeGen's
// generate_workload does (servegen/construct.py at f891d11), window by window, lazily.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "workloads/request_source.h"

namespace moesim {

// A discrete distribution over token counts: values ascending, cdf[i] = P(X <= values[i]), cdf.back() = 1.
struct TokenPmf {
  std::vector<std::int64_t> values;
  std::vector<double> cdf;
  [[nodiscard]] double mean() const;
  // The smallest value whose cdf reaches u (numpy.searchsorted(cdf, u) as ServeGen samples).
  [[nodiscard]] std::int64_t quantile(double u) const;
};

enum class InterArrivalLaw { kNone, kGamma, kWeibull };

struct ServeGenWindow {
  double start_s = 0;
  double rate_per_s = 0;  // 0 with kNone: the client is idle in this window
  InterArrivalLaw law = InterArrivalLaw::kNone;
  double shape = 0;  // Gamma shape a / Weibull c
  double scale = 0;
};

struct ServeGenLengths {
  double start_s = 0;  // applies from here to the next entry's start
  TokenPmf input;
  TokenPmf output;
};

struct ServeGenClient {
  int id = 0;
  std::vector<ServeGenWindow> windows;  // ascending start, equal length
  std::vector<ServeGenLengths>
      lengths;  // ascending start; the first starts at or before the first active window
  // The lengths in force at time t (the last entry starting at or before t); nullptr when none.
  [[nodiscard]] const ServeGenLengths* lengths_at(double t_s) const;
};

struct ServeGenWorkload {
  std::vector<ServeGenClient> clients;  // ascending id
  double window_s = 600;
  double day_s = 86400;  // end of the last window
};

struct ServeGenReplay {
  double start_s = 0;     // where in the day the replay starts (a window start)
  double rate_scale = 1;  // multiplies every client's rate (ServeGen's rate function, here a constant factor)
};

// Per window (in time order) and client (in id order), as ServeGen: n = ceil(rate x window) inter-arrival
// times from the client's law, rescaled to sum to the window, arrivals at their running sums that fall
// inside the window (the last one lands on the window's end and is dropped); each request's input and
// output lengths from the client's distributions in force, both at the quantile of ONE uniform draw (what
// ServeGen's _sample_data_batch does, so long prompts come with long answers). Arrivals are then sorted.
// Times are relative to `replay.start_s`; ends at the day's end or the run limits.
class ServeGenSource final : public RequestSource {
 public:
  ServeGenSource(const ServeGenWorkload& workload, ServeGenReplay replay, RunLimits limits,
                 const RandomStreams& streams);
  std::optional<RequestSpec> next() override;
  [[nodiscard]] bool exhausted() const override;

 private:
  void fill_window();

  const ServeGenWorkload& workload_;
  ServeGenReplay replay_;
  RunLimits limits_;
  Rng rng_;
  double window_start_s_;
  std::vector<RequestSpec> pending_;  // the current window's requests, sorted
  std::size_t pos_ = 0;
  std::int64_t issued_ = 0;
  bool done_ = false;
  std::vector<double> gaps_;
};

}  // namespace moesim
