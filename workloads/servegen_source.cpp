#include "workloads/servegen_source.h"

#include <algorithm>
#include <cmath>

#include "sim/engine/check.h"

namespace moesim {

double TokenPmf::mean() const {
  double m = 0;
  double prev = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    m += double(values[i]) * (cdf[i] - prev);
    prev = cdf[i];
  }
  return m;
}

std::int64_t TokenPmf::quantile(double u) const {
  const auto it = std::lower_bound(cdf.begin(), cdf.end(), u);
  return it == cdf.end() ? values.back() : values[static_cast<std::size_t>(it - cdf.begin())];
}

const ServeGenLengths* ServeGenClient::lengths_at(double t_s) const {
  const ServeGenLengths* found = nullptr;
  for (const auto& l : lengths) {
    if (l.start_s > t_s) break;
    found = &l;
  }
  return found;
}

ServeGenSource::ServeGenSource(const ServeGenWorkload& workload, ServeGenReplay replay, RunLimits limits,
                               const RandomStreams& streams)
    : workload_(workload),
      replay_(replay),
      limits_(limits),
      rng_(streams.stream("workload.servegen")),
      window_start_s_(replay.start_s) {
  MOESIM_CHECK(workload_.window_s > 0 && replay_.rate_scale > 0, "servegen: window and rate scale positive");
}

void ServeGenSource::fill_window() {
  pending_.clear();
  pos_ = 0;
  const double w = workload_.window_s;
  const double t0 = window_start_s_;
  const auto index = static_cast<std::size_t>(std::llround(t0 / w));
  for (const ServeGenClient& c : workload_.clients) {
    if (index >= c.windows.size()) continue;
    const ServeGenWindow& win = c.windows[index];
    if (win.law == InterArrivalLaw::kNone || win.rate_per_s <= 0) continue;
    const auto n = static_cast<std::size_t>(std::ceil(win.rate_per_s * replay_.rate_scale * w));
    gaps_.resize(n);
    double sum = 0;
    for (auto& g : gaps_) {
      g = win.law == InterArrivalLaw::kGamma
              ? sample_gamma(rng_, win.shape, win.scale)
              : win.scale * std::pow(-std::log(rng_.uniform_pos()), 1.0 / win.shape);
      sum += g;
    }
    if (!(sum > 0)) continue;
    const ServeGenLengths* len = c.lengths_at(t0);
    MOESIM_CHECK(len != nullptr, "servegen: an active client window without length distributions");
    double t = 0;
    for (const double g : gaps_) {
      t += g * (w / sum);
      if (t >= w) break;
      const double u = rng_.uniform();
      RequestSpec r;
      r.arrival = Time::at(Duration::from_seconds(t0 - replay_.start_s + t));
      r.prompt_tokens = len->input.quantile(u);
      r.output_tokens = len->output.quantile(u);
      pending_.push_back(r);
    }
  }
  std::stable_sort(pending_.begin(), pending_.end(),
                   [](const RequestSpec& a, const RequestSpec& b) { return a.arrival < b.arrival; });
  window_start_s_ += w;
}

std::optional<RequestSpec> ServeGenSource::next() {
  while (!done_ && pos_ >= pending_.size()) {
    if (window_start_s_ >= workload_.day_s - 1e-9) {
      done_ = true;
      break;
    }
    fill_window();
  }
  if (done_) return std::nullopt;
  const RequestSpec r = pending_[pos_];
  if ((limits_.max_requests > 0 && issued_ >= limits_.max_requests) ||
      (limits_.max_arrival_time > Duration::zero() && r.arrival.since_start() >= limits_.max_arrival_time)) {
    done_ = true;
    return std::nullopt;
  }
  ++pos_;
  ++issued_;
  return r;
}

bool ServeGenSource::exhausted() const { return done_; }

}  // namespace moesim
