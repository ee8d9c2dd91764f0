// Where requests come from: open-loop arrival processes (Poisson, bursty Gamma), a closed loop of N users,
// and recorded traces. Sources are pulled lazily, one arrival at a time, so memory stays O(in flight).
#pragma once

#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

#include "sim/engine/random.h"
#include "sim/engine/time.h"
#include "workloads/diurnal_arrivals.h"

namespace moesim {

struct RequestSpec {
  Time arrival;
  std::int64_t prompt_tokens = 0;
  std::int64_t output_tokens = 0;
  // Prefix identity of the prompt's KV blocks (prefix caching), expanded by
  // RequestSource::prompt_block_keys: a trace row's keys (offset into the source's key array) or a
  // synthetic conversation's id, and how many keyed blocks of RequestSource::prefix_block_tokens() the
  // prompt has (the last may be partial). 0 blocks: the prompt has no prefix identity.
  std::uint32_t prefix_ref = 0;
  std::uint32_t prefix_blocks = 0;
};

struct FixedLength {
  std::int64_t tokens = 0;
};
struct UniformLength {
  std::int64_t min = 1;
  std::int64_t max = 1;
};
// Lognormal with the given mean and log-space sigma, truncated to [min, max] by resampling.
struct LognormalLength {
  double mean = 1;
  double sigma = 1;
  std::int64_t min = 1;
  std::int64_t max = 1;
};
// An empirical law by its quantiles: points[i] is the i / (n - 1) quantile (ascending, n >= 2); a draw is
// the inverse CDF at a uniform u, linear between neighbouring points, rounded to a token.
struct QuantileLength {
  std::vector<std::int64_t> points;
};
using LengthSpec = std::variant<FixedLength, UniformLength, LognormalLength, QuantileLength>;

std::int64_t sample_length(const LengthSpec& spec, Rng& rng);
std::int64_t max_length(const LengthSpec& spec);
double mean_length(const LengthSpec& spec);  // the mean drawn (a lognormal's inside its bounds), for planning

// The mean of a lognormal of mean `mean` and log-space sigma restricted to [lo, hi] (0 <= lo < hi): what
// LognormalLength draws on average, for lo = min - 0.5 and hi = max + 0.5 (a draw is rounded to a token
// and kept when the token lies in [min, max]), up to the rounding inside the interval.
double lognormal_bounded_mean(double mean, double sigma, double lo, double hi);
// The lognormal mean whose draws restricted to [lo, hi] average `bounded_mean` (lo < bounded_mean < hi):
// the inverse of lognormal_bounded_mean in its first argument, which it increases, by bisection.
double lognormal_mean_for_bounded_mean(double bounded_mean, double sigma, double lo, double hi);

struct PoissonArrivals {
  double rate_per_s = 1;
};
// Gamma inter-arrival times with the given mean rate and coefficient of variation (cv > 1 is bursty).
struct GammaArrivals {
  double rate_per_s = 1;
  double cv = 2;
};
struct ClosedLoop {
  int users = 1;
  double think_time_s = 0;
};
using ArrivalSpec = std::variant<PoissonArrivals, GammaArrivals, ClosedLoop, DiurnalArrivals>;

class RequestSource {
 public:
  virtual ~RequestSource() = default;
  // The next arrival if one is known now; nullopt when exhausted or (closed loop) waiting for a finish.
  virtual std::optional<RequestSpec> next() = 0;
  // Called when a request finishes or is dropped, at simulated time `now`.
  virtual void on_finished(Time now) { (void)now; }
  [[nodiscard]] virtual bool exhausted() const = 0;
  // Tokens per keyed prompt block (0: this source gives prompts no prefix identity).
  [[nodiscard]] virtual std::int64_t prefix_block_tokens() const { return 0; }
  // The content keys of r's prompt blocks, in order, into `out` (cleared first; a reused buffer does not
  // allocate once grown). Equal keys at the same position after equal earlier keys mean the same KV;
  // chain them with chain_block_hash (sim/serving/runtime/prefix_cache.h) for a prefix cache.
  virtual void prompt_block_keys(const RequestSpec& r, std::vector<std::uint64_t>& out) const {
    (void)r;
    out.clear();
  }
  // The keys of the blocks of r's prompt followed by its answer, when a later prompt can repeat that answer
  // (a conversation's next turn): what an engine that caches generated tokens names. Empty (the default)
  // when the answer has no identity here.
  virtual void sequence_block_keys(const RequestSpec& r, std::vector<std::uint64_t>& out) const {
    (void)r;
    out.clear();
  }
};

// Limits of a synthetic run: whichever of the two ends first (0 = unlimited).
struct RunLimits {
  std::int64_t max_requests = 0;
  Duration max_arrival_time = Duration::zero();
};

class SyntheticSource final : public RequestSource {
 public:
  SyntheticSource(ArrivalSpec arrivals, LengthSpec prompt, LengthSpec output, RunLimits limits,
                  const RandomStreams& streams);
  std::optional<RequestSpec> next() override;
  void on_finished(Time now) override;
  [[nodiscard]] bool exhausted() const override;

 private:
  bool limit_reached(Time t) const;
  RequestSpec make(Time t);

  ArrivalSpec arrivals_;
  LengthSpec prompt_;
  LengthSpec output_;
  RunLimits limits_;
  Rng arrival_rng_;
  Rng length_rng_;
  Time last_;
  std::int64_t issued_ = 0;
  std::vector<Time> ready_;  // closed loop: users ready to send, in time order
  bool done_ = false;
};

// Block keys of a recorded trace (Mooncake `hash_ids`): one flat array that the rows' prefix_ref and
// prefix_blocks index, so a request carries 8 bytes of prefix identity whatever its length.
struct TraceBlockKeys {
  std::vector<std::uint64_t> keys;
  std::int64_t block_tokens = 0;  // tokens per keyed block (512 in the Mooncake traces)
};

// Replays recorded (arrival, prompt, output) rows in order; arrival times scaled by 1/speedup.
class TraceSource final : public RequestSource {
 public:
  TraceSource(std::vector<RequestSpec> rows, double speedup, RunLimits limits);
  // With the rows' block keys (prefix caching).
  TraceSource(std::vector<RequestSpec> rows, TraceBlockKeys keys, double speedup, RunLimits limits);
  std::optional<RequestSpec> next() override;
  [[nodiscard]] bool exhausted() const override;
  [[nodiscard]] std::int64_t prefix_block_tokens() const override { return keys_.block_tokens; }
  void prompt_block_keys(const RequestSpec& r, std::vector<std::uint64_t>& out) const override;

 private:
  std::vector<RequestSpec> rows_;
  TraceBlockKeys keys_;
  double speedup_;
  RunLimits limits_;
  std::size_t pos_ = 0;
};

}  // namespace moesim
