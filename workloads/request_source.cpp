#include "workloads/request_source.h"

#include <algorithm>
#include <cmath>

#include "sim/engine/check.h"

namespace moesim {

namespace {
template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
}  // namespace

std::int64_t sample_length(const LengthSpec& spec, Rng& rng) {
  return std::visit(
      Overloaded{
          [](const FixedLength& f) { return f.tokens; },
          [&](const UniformLength& u) {
            return u.min +
                   static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(u.max - u.min + 1)));
          },
          [&](const LognormalLength& l) {
            const double mu = std::log(l.mean) - 0.5 * l.sigma * l.sigma;
            for (int attempt = 0; attempt < 64; ++attempt) {
              const auto x = static_cast<std::int64_t>(std::llround(sample_lognormal(rng, mu, l.sigma)));
              if (x >= l.min && x <= l.max) return x;
            }
            return std::clamp(static_cast<std::int64_t>(std::llround(l.mean)), l.min, l.max);
          },
          [&](const QuantileLength& q) {
            const double x = rng.uniform() * static_cast<double>(q.points.size() - 1);
            const auto i = std::min(static_cast<std::size_t>(x), q.points.size() - 2);
            const double lo = static_cast<double>(q.points[i]);
            const double hi = static_cast<double>(q.points[i + 1]);
            return static_cast<std::int64_t>(std::llround(lo + (x - static_cast<double>(i)) * (hi - lo)));
          },
      },
      spec);
}

std::int64_t max_length(const LengthSpec& spec) {
  return std::visit(
      Overloaded{[](const FixedLength& f) { return f.tokens; }, [](const UniformLength& u) { return u.max; },
                 [](const LognormalLength& l) { return l.max; },
                 [](const QuantileLength& q) { return q.points.back(); }},
      spec);
}

double mean_length(const LengthSpec& spec) {
  return std::visit(
      Overloaded{[](const FixedLength& f) { return static_cast<double>(f.tokens); },
                 [](const UniformLength& u) { return 0.5 * static_cast<double>(u.min + u.max); },
                 [](const LognormalLength& l) {  // what resampling into [min, max] draws
                   return lognormal_bounded_mean(l.mean, l.sigma, static_cast<double>(l.min) - 0.5,
                                                 static_cast<double>(l.max) + 0.5);
                 },
                 [](const QuantileLength& q) {  // the mean of the piecewise-linear law: its trapezoids
                   double sum = 0;
                   for (std::size_t i = 0; i + 1 < q.points.size(); ++i)
                     sum += 0.5 * static_cast<double>(q.points[i] + q.points[i + 1]);
                   return sum / static_cast<double>(q.points.size() - 1);
                 }},
      spec);
}

namespace {
// P(a <= Z <= b) for a standard normal Z, from the tail nearer both bounds so that neither underflows to a
// difference of two numbers near 1.
double normal_mass(double a, double b) {
  const double r = 1.0 / std::sqrt(2.0);
  return a > 0 ? 0.5 * (std::erfc(a * r) - std::erfc(b * r)) : 0.5 * (std::erfc(-b * r) - std::erfc(-a * r));
}
}  // namespace

// E[X | lo <= X <= hi] for ln X ~ N(mu, sigma^2), mu = ln(mean) - sigma^2 / 2: mean x P(a - sigma <= Z <= b -
// sigma) / P(a <= Z <= b), a and b the bounds standardised in log space (the lognormal's partial moment).
double lognormal_bounded_mean(double mean, double sigma, double lo, double hi) {
  const double mu = std::log(mean) - 0.5 * sigma * sigma;
  const double a = lo > 0 ? (std::log(lo) - mu) / sigma : -HUGE_VAL;
  const double b = (std::log(hi) - mu) / sigma;
  const double mass = normal_mass(a, b);
  // No mass left between the bounds in double precision: the law sits against the bound it is beyond.
  if (!(mass > 1e-300)) return b < 0 ? hi : lo;
  return std::clamp(mean * normal_mass(a - sigma, b - sigma) / mass, lo, hi);
}

double lognormal_mean_for_bounded_mean(double bounded_mean, double sigma, double lo, double hi) {
  // ln(mean) between bounds far enough out that the bounded mean reaches within rounding of lo and hi.
  double low = std::log(std::max(lo, 1e-300)) - 40.0 * sigma - 1.0;
  double high = std::log(hi) + 40.0 * sigma + 1.0;
  for (int i = 0; i < 200 && high - low > 1e-12; ++i) {
    const double mid = 0.5 * (low + high);
    (lognormal_bounded_mean(std::exp(mid), sigma, lo, hi) < bounded_mean ? low : high) = mid;
  }
  return std::exp(0.5 * (low + high));
}

SyntheticSource::SyntheticSource(ArrivalSpec arrivals, LengthSpec prompt, LengthSpec output, RunLimits limits,
                                 const RandomStreams& streams)
    : arrivals_(arrivals),
      prompt_(prompt),
      output_(output),
      limits_(limits),
      arrival_rng_(streams.stream("workload.arrivals")),
      length_rng_(streams.stream("workload.lengths")) {
  if (const auto* c = std::get_if<ClosedLoop>(&arrivals_)) {
    ready_.assign(static_cast<std::size_t>(c->users), Time::zero());
  }
}

bool SyntheticSource::limit_reached(Time t) const {
  if (limits_.max_requests > 0 && issued_ >= limits_.max_requests) return true;
  return limits_.max_arrival_time > Duration::zero() && t.since_start() >= limits_.max_arrival_time;
}

RequestSpec SyntheticSource::make(Time t) {
  ++issued_;
  RequestSpec r;
  r.arrival = t;
  r.prompt_tokens = sample_length(prompt_, length_rng_);
  r.output_tokens = sample_length(output_, length_rng_);
  return r;
}

std::optional<RequestSpec> SyntheticSource::next() {
  if (done_) return std::nullopt;
  if (std::holds_alternative<ClosedLoop>(arrivals_)) {
    if (ready_.empty()) return std::nullopt;
    const Time t = ready_.front();
    if (limit_reached(t)) {
      done_ = true;
      return std::nullopt;
    }
    ready_.erase(ready_.begin());
    return make(t);
  }
  double gap_s;
  if (const auto* p = std::get_if<PoissonArrivals>(&arrivals_)) {
    gap_s = sample_exponential(arrival_rng_, p->rate_per_s);
  } else if (const auto* d = std::get_if<DiurnalArrivals>(&arrivals_)) {
    const double now_s = last_.seconds();
    gap_s = next_diurnal_arrival(*d, now_s, arrival_rng_) - now_s;
  } else {
    const auto& g = std::get<GammaArrivals>(arrivals_);
    const double shape = 1.0 / (g.cv * g.cv);
    gap_s = sample_gamma(arrival_rng_, shape, 1.0 / (g.rate_per_s * shape));
  }
  const Time t = last_ + Duration::from_seconds(gap_s);
  if (limit_reached(t)) {
    done_ = true;
    return std::nullopt;
  }
  last_ = t;
  return make(t);
}

void SyntheticSource::on_finished(Time now) {
  const auto* c = std::get_if<ClosedLoop>(&arrivals_);
  if (c == nullptr || done_) return;
  const Time t = now + Duration::from_seconds(c->think_time_s);
  ready_.insert(std::upper_bound(ready_.begin(), ready_.end(), t), t);
}

bool SyntheticSource::exhausted() const { return done_; }

TraceSource::TraceSource(std::vector<RequestSpec> rows, double speedup, RunLimits limits)
    : rows_(std::move(rows)), speedup_(speedup), limits_(limits) {
  MOESIM_CHECK(speedup_ > 0, "trace speedup must be positive");
  if (rows_.empty()) return;
  const Time first = rows_.front().arrival;
  // A row scaled past the clock (a slow-motion replay cut by run.duration_s) saturates at never() instead
  // of overflowing Duration::scaled; such rows lie past the run's limit and are never issued.
  for (auto& r : rows_) {
    const double ps = static_cast<double>((r.arrival - first).ps()) / speedup_;
    r.arrival = ps >= 9.2e18 ? Time::never() : Time::at((r.arrival - first).scaled(1.0 / speedup_));
  }
}

TraceSource::TraceSource(std::vector<RequestSpec> rows, TraceBlockKeys keys, double speedup, RunLimits limits)
    : TraceSource(std::move(rows), speedup, limits) {
  keys_ = std::move(keys);
  for (const auto& r : rows_) {
    MOESIM_CHECK(std::uint64_t{r.prefix_ref} + r.prefix_blocks <= keys_.keys.size(),
                 "trace row's block keys lie outside the key array");
  }
}

void TraceSource::prompt_block_keys(const RequestSpec& r, std::vector<std::uint64_t>& out) const {
  if (keys_.block_tokens == 0) {
    out.clear();
    return;
  }
  const auto first = keys_.keys.begin() + r.prefix_ref;
  out.assign(first, first + r.prefix_blocks);
}

std::optional<RequestSpec> TraceSource::next() {
  if (exhausted()) return std::nullopt;
  const RequestSpec& r = rows_[pos_];
  if (limits_.max_arrival_time > Duration::zero() && r.arrival.since_start() >= limits_.max_arrival_time) {
    pos_ = rows_.size();
    return std::nullopt;
  }
  ++pos_;
  return r;
}

bool TraceSource::exhausted() const {
  return pos_ >= rows_.size() ||
         (limits_.max_requests > 0 && static_cast<std::int64_t>(pos_) >= limits_.max_requests);
}

}  // namespace moesim
