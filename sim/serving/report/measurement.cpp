#include "sim/serving/report/measurement.h"

#include <algorithm>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>

#include "sim/engine/check.h"

namespace moesim {

namespace {

void add_loop(ExpertLoopReport& a, const ExpertLoopReport& b) {
  a.rebalances += b.rebalances;
  a.rebalance_bytes += b.rebalance_bytes;
  a.rebalance_s += b.rebalance_s;
  a.expert_uses += b.expert_uses;
  a.hbm_hits += b.hbm_hits;
  a.host_loads += b.host_loads;
  a.nvme_loads += b.nvme_loads;
  a.prefetches += b.prefetches;
  a.evictions += b.evictions;
  a.host_bytes += b.host_bytes;
  a.nvme_bytes += b.nvme_bytes;
  a.stall_s += b.stall_s;
  a.rerouted_pairs += b.rerouted_pairs;
  a.rerouted_share += b.rerouted_share;
  a.gpu_load_imbalance_weighted += b.gpu_load_imbalance_weighted;
  a.dispatch_bytes_per_token += b.dispatch_bytes_per_token;
}

void add_all(std::vector<double>& a, const std::vector<double>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
}

}  // namespace

void add_grown(std::vector<double>& a, std::span<const double> b) {
  if (a.size() < b.size()) a.resize(b.size(), 0.0);
  for (std::size_t i = 0; i < b.size(); ++i) a[i] += b[i];
}

void WindowTotals::merge(const WindowTotals& o) {
  in_system_s += o.in_system_s;
  covered_s += o.covered_s;
  waiting_s += o.waiting_s;
  arrivals += o.arrivals;
  output_tokens += o.output_tokens;
  prompt_tokens += o.prompt_tokens;
  finished += o.finished;
  finished_output_tokens += o.finished_output_tokens;
  good += o.good;
  good_output_tokens += o.good_output_tokens;
  ttft_over += o.ttft_over;
  tpot_counted += o.tpot_counted;
  tpot_over += o.tpot_over;
  for (auto [h, g] : {std::pair{&ttft, &o.ttft},
                      {&tpot, &o.tpot},
                      {&e2e, &o.e2e},
                      {&queueing, &o.queueing},
                      {&itl, &o.itl},
                      {&prefill_queue, &o.prefill_queue},
                      {&prefill, &o.prefill},
                      {&kv_transfer, &o.kv_transfer},
                      {&decode_queue, &o.decode_queue},
                      {&rank_load_share, &o.rank_load_share},
                      {&layer_max_over_mean, &o.layer_max_over_mean}})
    h->merge(*g);
  steps += o.steps;
  step_s += o.step_s;
  for (std::size_t i = 0; i < kStepParts; ++i) part_s.s[i] += o.part_s.s[i];
  comm_hidden_s += o.comm_hidden_s;
  comm_sm_contention_s += o.comm_sm_contention_s;
  first_gpu_dispatch_wait_s += o.first_gpu_dispatch_wait_s;
  first_gpu_combine_wait_s += o.first_gpu_combine_wait_s;
  batch_tokens += o.batch_tokens;
  padded_rows += o.padded_rows;
  gpu_imbalance += o.gpu_imbalance;
  expert_imbalance += o.expert_imbalance;
  expert_imbalance_tokens += o.expert_imbalance_tokens;
  nvlink_bytes += o.nvlink_bytes;
  nic_bytes += o.nic_bytes;
  add_loop(loop, o.loop);
  for (std::size_t p = 0; p < pools.size(); ++p) {
    pools[p].steps += o.pools[p].steps;
    pools[p].step_s += o.pools[p].step_s;
    pools[p].tokens += o.pools[p].tokens;
    pools[p].ttft.merge(o.pools[p].ttft);
    pools[p].tpot.merge(o.pools[p].tpot);
    add_grown(pools[p].layer_a2a_s, o.pools[p].layer_a2a_s);
    add_grown(pools[p].gpu_a2a_s, o.pools[p].gpu_a2a_s);
    add_grown(pools[p].gpu_slowest, o.pools[p].gpu_slowest);
  }
  add_all(gpu_busy_s, o.gpu_busy_s);
  add_all(gpu_flops, o.gpu_flops);
  add_all(gpu_bytes, o.gpu_bytes);
}

// ---- MeasurementSeries ---------------------------------------------------------------------------------

MeasurementSeries::MeasurementSeries(double origin_s, int gpus, int pools, int replicas)
    : origin_(origin_s), gpus_(gpus), pools_(pools), last_(static_cast<std::size_t>(replicas)) {
  drain_ = blank();
  before_ = blank();
  n_since_ = 0;
}

WindowTotals MeasurementSeries::blank() const {
  WindowTotals t;
  t.loop.gpu_load_imbalance_weighted = 0;
  t.pools.resize(static_cast<std::size_t>(pools_));
  const auto g = static_cast<std::size_t>(gpus_);
  t.gpu_busy_s.assign(g, 0.0);
  t.gpu_flops.assign(g, 0.0);
  t.gpu_bytes.assign(g, 0.0);
  return t;
}

void MeasurementSeries::merge_pairs() {
  hit_s_ = -1;
  const std::size_t half = (seg_.size() + 1) / 2;
  for (std::size_t i = 0; i < half; ++i) {
    if (2 * i + 1 < seg_.size()) seg_[2 * i].merge(seg_[2 * i + 1]);
    if (i > 0) seg_[i] = std::move(seg_[2 * i]);
  }
  seg_.resize(half);
  width_ *= 2;
}

void MeasurementSeries::reach(double t_s) {
  if (arrivals_ended()) t_s = std::min(t_s, arrivals_end_);
  if (t_s < origin_) return;
  auto index = [&] { return static_cast<std::size_t>(std::floor((t_s - origin_) / width_)); };
  while (index() >= static_cast<std::size_t>(kMaxSegments)) merge_pairs();
  while (seg_.size() <= index()) seg_.push_back(blank());
}

WindowTotals& MeasurementSeries::at(double t_s) {
  if (t_s == hit_s_) return seg_[hit_];
  if (t_s < origin_) return before_;
  if (arrivals_ended() && t_s >= arrivals_end_) return drain_;
  reach(t_s);
  hit_ = static_cast<std::size_t>(std::floor((t_s - origin_) / width_));
  hit_s_ = t_s;
  return seg_[hit_];
}

// [a, b) over the stretches it crosses: before the origin, segments, the drain after the end of arrivals.
void MeasurementSeries::spread(const Span& s, double a, double b, double sign) {
  const double len = s.end - s.start;
  if (len <= 0 || b <= a) return;
  auto add = [&](WindowTotals& w, double overlap) {
    const double f = sign * overlap / len;
    for (std::size_t g = 0; g < s.busy.size(); ++g) {
      const auto slot = static_cast<std::size_t>(s.slot) + g;
      w.gpu_busy_s[slot] += f * s.busy[g];
      w.gpu_flops[slot] += f * s.flops[g];
      w.gpu_bytes[slot] += f * s.bytes[g];
    }
  };
  if (a < origin_) add(before_, std::min(b, origin_) - a);
  const double seg_end = arrivals_ended() ? std::min(b, arrivals_end_) : b;
  for (double t = std::max(a, origin_); t < seg_end;) {
    double end = 0;
    const std::size_t k = piece(t, end);
    const double next = std::min(seg_end, end);
    add(seg_[k], next - t);
    t = next;
  }
  if (arrivals_ended() && b > arrivals_end_) add(drain_, b - std::max(a, arrivals_end_));
}

// The segment holding `t` (>= origin, inside the grid) and its end, always after `t` (when rounding puts
// `t` on the computed end of its floor's segment, the next one holds it).
std::size_t MeasurementSeries::piece(double t, double& end) const {
  auto k = static_cast<std::size_t>(std::floor((t - origin_) / width_));
  end = origin_ + static_cast<double>(k + 1) * width_;
  if (end <= t) {
    ++k;
    end = origin_ + static_cast<double>(k + 1) * width_;
  }
  return std::min(k, seg_.size() - 1);
}

void MeasurementSeries::step_span(int replica, int first_slot, double start_s, double end_s,
                                  std::span<const double> busy_s, std::span<const double> flops,
                                  std::span<const double> bytes) {
  reach(end_s);
  Span& s = last_[static_cast<std::size_t>(replica)];
  s.start = start_s;
  s.end = end_s;
  s.slot = first_slot;
  s.busy.resize(busy_s.size());
  // A GPU is busy at most the whole step (utilisation within [0, 1] by construction).
  for (std::size_t g = 0; g < busy_s.size(); ++g) s.busy[g] = std::min(busy_s[g], end_s - start_s);
  s.flops.assign(flops.begin(), flops.end());
  s.bytes.assign(bytes.begin(), bytes.end());
  spread(s, start_s, end_s, 1.0);
}

void MeasurementSeries::integrate_to(double t_s) {
  double t = n_since_;
  const auto n = static_cast<double>(n_);
  const auto q = static_cast<double>(q_);
  while (t < t_s) {
    WindowTotals* w = &drain_;
    double next = t_s;
    if (t < origin_) {
      w = &before_;
      next = std::min(t_s, origin_);
    } else if (!arrivals_ended() || t < arrivals_end_) {
      reach(t);
      double end = 0;
      w = &seg_[piece(t, end)];
      next = std::min(t_s, end);
      if (arrivals_ended()) next = std::min(next, arrivals_end_);
    }
    w->in_system_s += n * (next - t);
    w->waiting_s += q * (next - t);
    w->covered_s += next - t;
    t = next;
  }
  n_since_ = std::max(n_since_, t_s);
}

void MeasurementSeries::in_system(double t_s, std::int64_t n) {
  integrate_to(t_s);
  n_ = n;
}

void MeasurementSeries::waiting(double t_s, std::int64_t n) {
  integrate_to(t_s);
  q_ = n;
}

void MeasurementSeries::end_arrivals(double t_s) {
  if (arrivals_ended()) return;
  integrate_to(t_s);
  // Steps running at the last arrival were spread as if the segments went on: their part after it moves
  // to the drain.
  for (const Span& s : last_) {
    if (s.end > t_s) spread(s, std::max(s.start, t_s), s.end, -1.0);
  }
  arrivals_end_ = t_s;
  hit_s_ = -1;
  // Segments from the one starting at the last arrival on hold only what happened at that instant.
  if (t_s >= origin_) {  // arrivals that end before the origin leave every segment as it is
    const auto keep = static_cast<std::size_t>(std::ceil((t_s - origin_) / width_));
    for (std::size_t k = keep; k < seg_.size(); ++k) drain_.merge(seg_[k]);
    if (seg_.size() > keep) seg_.resize(keep);
  }
  for (const Span& s : last_) {
    if (s.end > t_s) spread(s, std::max(s.start, t_s), s.end, 1.0);
  }
}

void MeasurementSeries::end_run(double t_s) {
  end_arrivals(t_s);
  integrate_to(t_s);
  for (const Span& s : last_) {
    if (s.end > t_s) spread(s, std::max(s.start, t_s), s.end, -1.0);
  }
}

WindowTotals MeasurementSeries::sum(std::size_t first, bool with_drain) const {
  WindowTotals t = blank();
  for (std::size_t k = first; k < seg_.size(); ++k) t.merge(seg_[k]);
  if (with_drain) t.merge(drain_);
  return t;
}

std::size_t MeasurementSeries::full_segments() const {
  if (!arrivals_ended() || arrivals_end_ < origin_) return 0;
  return std::min(seg_.size(), static_cast<std::size_t>(std::floor((arrivals_end_ - origin_) / width_)));
}

// ---- Output analysis -------------------------------------------------------------------------------------

double student_t_quantile(double p, double df) {
  return boost::math::quantile(boost::math::students_t_distribution<double>(df), p);
}

MserResult mser(const std::vector<double>& y) {
  const std::size_t n = y.size();
  MserResult r;
  if (n < 4) return r;
  // Suffix sums give each candidate's mean and squared deviations in O(1).
  std::vector<double> s1(n + 1, 0.0), s2(n + 1, 0.0);
  for (std::size_t i = n; i-- > 0;) {
    s1[i] = s1[i + 1] + y[i];
    s2[i] = s2[i + 1] + y[i] * y[i];
  }
  double best = 0;
  for (std::size_t d = 0; d <= n / 2; ++d) {
    const auto m = static_cast<double>(n - d);
    const double sse = std::max(0.0, s2[d] - s1[d] * s1[d] / m);
    const double z = sse / (m * m);
    if (d == 0 || z < best) {
      best = z;
      r.truncate = d;
    }
  }
  r.at_bound = r.truncate == n / 2;
  return r;
}

TrendTest trend_test(const std::vector<double>& y) {
  TrendTest t;
  t.n = static_cast<int>(y.size());
  if (t.n < 4) return t;
  const double n = t.n;
  const double xbar = (n - 1) / 2;
  double ybar = 0;
  for (const double v : y) ybar += v / n;
  double sxx = 0, sxy = 0;
  for (int i = 0; i < t.n; ++i) {
    sxx += (i - xbar) * (i - xbar);
    sxy += (i - xbar) * (y[static_cast<std::size_t>(i)] - ybar);
  }
  t.slope = sxy / sxx;
  t.start = ybar - t.slope * xbar;
  t.end = ybar + t.slope * xbar;
  std::vector<double> e(y.size());
  double sse = 0;
  for (int i = 0; i < t.n; ++i) {
    e[static_cast<std::size_t>(i)] = y[static_cast<std::size_t>(i)] - (t.start + t.slope * i);
    sse += e[static_cast<std::size_t>(i)] * e[static_cast<std::size_t>(i)];
  }
  double c1 = 0;
  for (std::size_t i = 1; i < e.size(); ++i) c1 += e[i] * e[i - 1];
  t.lag1 = sse > 0 ? c1 / sse : 0.0;
  t.df = n - 2;
  const double se = std::sqrt(sse / (n - 2) / sxx);
  if (se <= 0) {
    t.t = t.slope > 0 ? 1e9 : (t.slope < 0 ? -1e9 : 0.0);
  } else {
    t.t = t.slope / se;
  }
  t.p_growth = 1.0 - boost::math::cdf(boost::math::students_t_distribution<double>(t.df), t.t);
  return t;
}

namespace {
double lag1_of(const std::vector<double>& x, double mean) {
  double c0 = 0, c1 = 0;
  for (std::size_t i = 0; i < x.size(); ++i) c0 += (x[i] - mean) * (x[i] - mean);
  for (std::size_t i = 1; i < x.size(); ++i) c1 += (x[i] - mean) * (x[i - 1] - mean);
  return c0 > 0 ? c1 / c0 : 0.0;
}
}  // namespace

BatchMeans batch_means(const std::vector<double>& x) {
  BatchMeans b;
  b.batches = static_cast<int>(x.size());
  if (x.empty()) return b;
  for (const double v : x) b.mean += v / static_cast<double>(x.size());
  if (x.size() < 2) return b;
  double ss = 0;
  for (const double v : x) ss += (v - b.mean) * (v - b.mean);
  const double k = static_cast<double>(x.size());
  b.half_width = student_t_quantile(0.975, k - 1) * std::sqrt(ss / (k - 1) / k);
  b.lag1 = lag1_of(x, b.mean);
  return b;
}

BatchMeans batch_ratio(const std::vector<double>& num, const std::vector<double>& den) {
  MOESIM_CHECK(num.size() == den.size(), "a ratio's batches pair up");
  BatchMeans b;
  b.batches = static_cast<int>(num.size());
  double sn = 0, sd = 0;
  for (std::size_t i = 0; i < num.size(); ++i) {
    sn += num[i];
    sd += den[i];
  }
  if (sd <= 0) return b;
  b.mean = sn / sd;
  if (num.size() < 2) return b;
  std::vector<double> e(num.size());
  double ss = 0;
  for (std::size_t i = 0; i < num.size(); ++i) {
    e[i] = num[i] - b.mean * den[i];
    ss += e[i] * e[i];
  }
  const double k = static_cast<double>(num.size());
  const double dbar = sd / k;
  b.half_width = student_t_quantile(0.975, k - 1) * std::sqrt(ss / (k - 1) / k) / dbar;
  b.lag1 = lag1_of(e, 0.0);
  return b;
}

std::vector<WindowTotals> batch_segments(const MeasurementSeries& m, std::size_t first, int batches) {
  std::vector<WindowTotals> out;
  const std::size_t full = m.full_segments();
  if (batches <= 0 || full <= first) return out;
  const std::size_t n = full - first;
  const std::size_t k = std::min<std::size_t>(static_cast<std::size_t>(batches), n);
  const std::size_t size = n / k;
  std::size_t i = full - k * size;
  for (std::size_t b = 0; b < k; ++b) {
    WindowTotals t = m.segments()[i++];
    for (std::size_t j = 1; j < size; ++j) t.merge(m.segments()[i++]);
    out.push_back(std::move(t));
  }
  return out;
}

namespace {
// Ten batches (Law & Kelton's minimum for batch means): each a tenth of the stretch, long against the
// number in system's correlation time in the runs this serves, so the plain OLS test is not far off.
constexpr int kTrendBatches = 10;
constexpr double kBurstSteps = 10;
constexpr std::int64_t kMinWindowRequests = 20;
// Overload: the number in system grows significantly (one-sided, 1%) and materially, by more than 10% of
// the arrival rate (the deployment serves under 90% of what arrives), past MSER-5's point, where growth is
// not the transient. When MSER-5 found no end of the transient in its first half (a run short against the
// requests' time in system), a stable deployment may still be filling up: its number in system grows at
// lambda P(S > t) (the M/G/infinity transient, S the time in system), so growth then counts as overload
// when it is queued work (the number waiting for a batch grows too) or faster than a quarter of the
// arrival rate (a quarter of the requests would stay longer than half the run: too short to say more).
constexpr double kTrendP = 0.01;
constexpr double kMaterialShare = 0.10;
constexpr double kUnsettledShare = 0.25;

std::vector<double> level_means(const std::vector<WindowTotals>& w, bool waiting) {
  std::vector<double> y;
  for (const WindowTotals& s : w)
    y.push_back(s.covered_s > 0 ? (waiting ? s.waiting_s : s.in_system_s) / s.covered_s : 0.0);
  return y;
}
std::vector<double> in_system_means(const std::vector<WindowTotals>& w) { return level_means(w, false); }

bool grows(const TrendTest& t, double batch_s, double arrival_rate, double share) {
  return t.n >= 4 && batch_s > 0 && t.p_growth < kTrendP && t.slope / batch_s > share * arrival_rate;
}

// The overload test on the segments from `first` to the last arrival.
void test_overload(const MeasurementSeries& m, std::size_t first, bool settled, WindowChoice& c) {
  const std::vector<WindowTotals> b = batch_segments(m, first, kTrendBatches);
  if (b.empty()) return;
  const double batch_s = b.front().covered_s;
  std::int64_t arrivals = 0;
  for (const WindowTotals& t : b) arrivals += t.arrivals;
  c.trend_from_s = m.origin() + static_cast<double>(m.full_segments()) * m.width() -
                   batch_s * static_cast<double>(b.size());
  c.arrival_rate =
      batch_s > 0 ? static_cast<double>(arrivals) / (batch_s * static_cast<double>(b.size())) : 0;
  c.trend = trend_test(level_means(b, false));
  c.waiting_trend = trend_test(level_means(b, true));
  c.overloaded = grows(c.trend, batch_s, c.arrival_rate, kMaterialShare) &&
                 (settled || grows(c.waiting_trend, batch_s, c.arrival_rate, kMaterialShare) ||
                  grows(c.trend, batch_s, c.arrival_rate, kUnsettledShare));
}
}  // namespace

WindowChoice choose_window(const MeasurementSeries& m, bool warmup_override, double run_end_s,
                           double mean_step_s, double time_in_system_s) {
  WindowChoice c;
  c.time_in_system_s = time_in_system_s;
  const std::size_t full = m.full_segments();
  std::vector<WindowTotals> segs(m.segments().begin(), m.segments().begin() + static_cast<long>(full));
  MserResult ms = mser(in_system_means(segs));
  // A run that starts empty fills up for as long as its requests stay: under M/G/inf the mean number in
  // system at t is lambda x the integral of P(S > u) over [0, t], which for exponential times in system
  // reaches share p of its steady state exactly at S's p-quantile. MSER-5 misses a ramp that lasts most
  // of a short run, so the transient lasts at least the time in system at the SLA percentile, and a run
  // whose arrivals last less than twice that cannot settle in their first half (at bound).
  if (time_in_system_s > m.origin() && m.width() > 0) {
    const auto fill = static_cast<std::size_t>(std::ceil((time_in_system_s - m.origin()) / m.width() - 1e-9));
    if (fill > ms.truncate) {
      ms.truncate = std::min(fill, full / 2);
      ms.at_bound = ms.at_bound || fill > full / 2;
    }
  }
  c.mser_batches = static_cast<int>(full);
  c.mser_at_bound = ms.at_bound;
  c.mser_s = m.origin() + static_cast<double>(ms.truncate) * m.width();
  c.warmup_method = warmup_override ? "run.warmup_s" : "mser-5";
  c.first_segment = warmup_override ? 0 : ms.truncate;
  c.from_s = m.origin() + static_cast<double>(c.first_segment) * m.width();
  const double last = m.arrivals_ended() ? m.arrivals_end() : run_end_s;
  test_overload(m, std::max(c.first_segment, ms.truncate), !ms.at_bound, c);
  // A burst (arrivals over within a few steps), or a run with too few requests finished before its last
  // arrival for any statistic (a handful of requests), has no steady stretch: measured over the whole run.
  std::int64_t finished = 0;
  for (std::size_t k = c.first_segment; k < m.segments().size(); ++k) finished += m.segments()[k].finished;
  const bool burst = last - m.origin() < kBurstSteps * mean_step_s || finished < kMinWindowRequests;
  if (burst) {
    c.first_segment = 0;
    c.from_s = m.origin();
    c.with_drain = true;
    c.kind = "whole run";
    c.to_s = run_end_s;
    c.why =
        "arrivals ended within a few steps, or too few requests finished before the last one (a "
        "burst): measured from the start to the end of the run";
    return c;
  }
  c.kind = "steady";
  c.to_s = last;
  c.why = std::string(warmup_override ? "from run.warmup_s"
                                      : "from the end of the transient (MSER-5 on the number in system)") +
          " to the last arrival (the drain after it is left out)";
  return c;
}

}  // namespace moesim
