// The measurement window and population of a run (Law & Kelton, Simulation Modeling and Analysis, 5th ed.,
// ch. 9): every rate and utilisation of a report comes from one window [from, to) and one population, the
// requests that finish inside it. The recorder accumulates what happens into equal time segments
// (MeasurementSeries); after the run the window is chosen from the data (warm-up by MSER-5 on the number
// in system, or run.warmup_s) and every figure is a sum over its segments. Output analysis on the same
// segments: a trend test for overload and batch-means confidence intervals.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sim/serving/report/latency_histogram.h"
#include "sim/serving/report/report.h"
#include "sim/serving/step/step_breakdown.h"

namespace moesim {

// Additive totals of one stretch of simulated time.
struct WindowTotals {
  // Time integral of the requests in the system (arrived, neither finished nor dropped), request x s.
  double in_system_s = 0;
  double covered_s = 0;  // the time that integral covers
  double waiting_s = 0;  // time integral of the requests waiting for a batch (at the replicas' last steps)
  std::int64_t arrivals = 0;
  std::int64_t output_tokens = 0;  // emitted in the stretch
  std::int64_t prompt_tokens = 0;  // of prompts whose prefill completed in the stretch
  // The population: requests that finished in the stretch, their latencies and SLA outcome.
  std::int64_t finished = 0;
  std::int64_t finished_output_tokens = 0;
  std::int64_t good = 0;  // within both SLA limits
  std::int64_t good_output_tokens = 0;
  std::int64_t ttft_over = 0;     // over the SLA's TTFT limit
  std::int64_t tpot_counted = 0;  // with more than one output token (TPOT defined)
  std::int64_t tpot_over = 0;
  LatencyHistogram ttft, tpot, e2e, queueing;
  LatencyHistogram itl;  // gaps between tokens emitted in the stretch
  // Disaggregation: the TTFT split of the finished requests prefilled on a prefill instance.
  LatencyHistogram prefill_queue, prefill, kv_transfer, decode_queue;
  // Steps that started in the stretch.
  std::int64_t steps = 0;
  double step_s = 0;
  StepSeconds part_s;
  double comm_hidden_s = 0;
  double comm_sm_contention_s = 0;
  double first_gpu_dispatch_wait_s = 0;  // StepPlan::first_gpu_dispatch_wait
  double first_gpu_combine_wait_s = 0;
  double batch_tokens = 0;
  double padded_rows = 0;    // StepPlan::padded_rows (deployment.moe_dp_padding)
  double gpu_imbalance = 0;  // weighted by each step's tokens
  // Expert load as distributions: each rank's routed pairs over the step's mean per rank (a sample per
  // rank and step), and each MoE layer's largest rank over the mean (a sample per layer and step).
  LatencyHistogram rank_load_share, layer_max_over_mean;
  double expert_imbalance = 0;         // weighted by each step's tokens, over the steps that measured it
  double expert_imbalance_tokens = 0;  // those steps' tokens
  double nvlink_bytes = 0;
  double nic_bytes = 0;
  ExpertLoopReport loop;  // its counters only (sums)
  struct Pool {
    std::int64_t steps = 0;
    double step_s = 0;
    double tokens = 0;
    LatencyHistogram ttft;  // of the finished requests it prefilled
    LatencyHistogram tpot;  // of those it decoded
    // All-to-All of its steps (StepPlanner::layer_all_to_all_s, gpu_all_to_all_s, gpu_slowest summed over
    // them; a GPU by its index in its instance): empty until a step with more than one rank.
    std::vector<double> layer_a2a_s, gpu_a2a_s, gpu_slowest;
  };
  std::vector<Pool> pools;
  // Per GPU of the cluster: busy seconds, FLOPs and HBM bytes of its steps, each step's spread uniformly
  // over the step's span and only the part inside the stretch counted. A replica's steps never overlap,
  // so busy seconds never exceed the stretch's length.
  std::vector<double> gpu_busy_s, gpu_flops, gpu_bytes;

  void merge(const WindowTotals& o);
};

// a += b element by element, `a` grown to b's size first (a stretch without steps of a pool is empty).
void add_grown(std::vector<double>& a, std::span<const double> b);

// The measurement series of a run: equal segments of simulated time from `origin` (the warm-up override,
// else 0) up to the end of arrivals, at most kMaxSegments of them (when time outgrows them, neighbours
// merge and the width doubles), then one drain bucket from the end of arrivals to the end of the run.
// Time before the origin goes to a bucket no window reads.
class MeasurementSeries {
 public:
  static constexpr int kMaxSegments = 128;
  MeasurementSeries(double origin_s, int gpus, int pools, int replicas);

  // The stretch that holds instant `t_s` (segments grow to reach it).
  WindowTotals& at(double t_s);
  // The requests in the system are `n` from `t_s` on.
  void in_system(double t_s, std::int64_t n);
  // The requests waiting for a batch are `n` from `t_s` on.
  void waiting(double t_s, std::int64_t n);
  // A step of `replica` over [start_s, end_s): per GPU of its group (cluster slots from `first_slot`),
  // busy seconds (at most the step's length), FLOPs and bytes, spread over the span.
  void step_span(int replica, int first_slot, double start_s, double end_s, std::span<const double> busy_s,
                 std::span<const double> flops, std::span<const double> bytes);
  // The last arrival: later time goes to the drain bucket (steps running then are split at `t_s`).
  void end_arrivals(double t_s);
  // The run stopped at `t_s`: closes the in-system integral and cuts steps still running.
  void end_run(double t_s);

  [[nodiscard]] double origin() const { return origin_; }
  [[nodiscard]] double width() const { return width_; }
  [[nodiscard]] double arrivals_end() const { return arrivals_end_; }
  [[nodiscard]] bool arrivals_ended() const { return arrivals_end_ >= 0; }
  [[nodiscard]] const std::vector<WindowTotals>& segments() const { return seg_; }
  [[nodiscard]] const WindowTotals& drain() const { return drain_; }
  // Sum of the segments from `first` on (and the drain when `with_drain`).
  [[nodiscard]] WindowTotals sum(std::size_t first, bool with_drain) const;
  // Segments wholly before the end of arrivals.
  [[nodiscard]] std::size_t full_segments() const;

 private:
  struct Span {
    double start = 0, end = -1;
    int slot = 0;
    std::vector<double> busy, flops, bytes;
  };
  WindowTotals blank() const;
  void reach(double t_s);  // the segments cover [origin, t_s] (or the end of arrivals)
  void merge_pairs();
  // Adds `sign` x the share of `s` that lies in [a, b) to the stretches it overlaps.
  void spread(const Span& s, double a, double b, double sign);
  void integrate_to(double t_s);
  [[nodiscard]] std::size_t piece(double t, double& end) const;

  double origin_;
  double width_ = 1.0 / 1024;
  double arrivals_end_ = -1;
  // The last segment at() found and its time: a step's tokens all arrive at one instant. Cleared when the
  // segments change width or are cut (merge_pairs, end_arrivals).
  double hit_s_ = -1;
  std::size_t hit_ = 0;
  int gpus_, pools_;
  std::vector<WindowTotals> seg_;
  WindowTotals drain_, before_;
  std::vector<Span> last_;  // per replica: its last step
  std::int64_t n_ = 0;
  std::int64_t q_ = 0;
  double n_since_ = 0;
};

// MSER (White 1997; Law & Kelton 5th ed. 9.5.1) on the series y (MSER-5: y are means of batches of five
// observations): the truncation d in [0, n/2] that minimises the squared standard error of the mean of
// the rest, sum_{i>=d} (y_i - mean_d)^2 / (n - d)^2. `at_bound`: the minimum is at n/2, the series did
// not settle in its first half (too short, or not stationary).
struct MserResult {
  std::size_t truncate = 0;
  bool at_bound = false;
};
MserResult mser(const std::vector<double>& y);

// Ordinary least-squares trend of y against its index and the slope's t test (n - 2 degrees of freedom;
// e.g. Montgomery & Runger, Applied Statistics and Probability for Engineers, 11-4). Meant for batch
// means long enough to be nearly independent: the residuals' lag-1 autocorrelation says how far they are.
struct TrendTest {
  int n = 0;
  double slope = 0;       // per index step
  double start = 0;       // fitted value at the first index
  double end = 0;         // fitted value at the last index
  double t = 0;           // t statistic of the slope
  double df = 0;          // its degrees of freedom, n - 2
  double lag1 = 0;        // residual lag-1 autocorrelation
  double p_growth = 1.0;  // one-sided p value of a positive slope
};
TrendTest trend_test(const std::vector<double>& y);

// Batch means (Law & Kelton 5th ed. 9.5.3): a 95% confidence interval on the mean of a stationary series
// from b batch means x_k, mean +- t_{b-1, 0.975} s / sqrt(b), and the batch means' lag-1 autocorrelation
// (near zero when batches are long enough to be nearly independent).
BatchMeans batch_means(const std::vector<double>& x);
// A ratio sum(num) / sum(den) from batches (num_k, den_k): its interval from the batch residuals
// num_k - ratio den_k (the delta method, as for a ratio of means).
BatchMeans batch_ratio(const std::vector<double>& num, const std::vector<double>& den);

// Student's t quantile.
double student_t_quantile(double p, double df);

// The window a run is measured over, chosen after it from its series.
struct WindowChoice {
  std::size_t first_segment = 0;
  double from_s = 0;
  double to_s = 0;
  bool with_drain = false;  // "whole run": a burst, measured to the end of the run
  std::string kind;         // "steady" or "whole run"
  std::string why;
  std::string warmup_method;   // "mser-5" or "run.warmup_s"
  double mser_s = 0;           // where MSER-5 ends the transient (also under the override, as a check)
  bool mser_at_bound = false;  // the number in system did not settle in the first half of the arrivals
  int mser_batches = 0;
  // Overload test: the trend of the number in system from the end of the transient (MSER-5's point, or
  // the window's start if later) to the last arrival, and of the number waiting for a batch.
  double trend_from_s = 0;
  TrendTest trend;
  TrendTest waiting_trend;
  double arrival_rate = 0;  // per second, over the trend's stretch
  bool overloaded = false;
  double time_in_system_s = 0;  // the requests' time in system at the SLA percentile (choose_window's)
};
// `warmup_override`: the series' origin is run.warmup_s and is the window's start. `mean_step_s` tells a
// burst (arrivals over within a few steps) from a run with a steady stretch. `time_in_system_s`: the
// run's requests' time in system at the SLA percentile, the least transient of a run that starts empty
// (0: none finished).
WindowChoice choose_window(const MeasurementSeries& m, bool warmup_override, double run_end_s,
                           double mean_step_s, double time_in_system_s = 0);
// Batch means of a window's segments: `batches` equal groups of consecutive full segments from `first`
// (a remainder at the start is left out), each group summed.
std::vector<WindowTotals> batch_segments(const MeasurementSeries& m, std::size_t first, int batches);

}  // namespace moesim
