#include "workloads/prefixed_source.h"

#include <algorithm>
#include <cmath>

#include "sim/engine/check.h"

namespace moesim {

std::int64_t max_prefixed_prompt(const PrefixWorkloadSpec& spec, const LengthSpec& prompt) {
  if (spec.conversations) return spec.conversation.max_prompt_tokens;
  return spec.system_prompt_tokens + max_length(prompt);
}

PrefixedSource::PrefixedSource(const PrefixWorkloadSpec& spec, ArrivalSpec arrivals, LengthSpec prompt,
                               LengthSpec output, RunLimits limits, const RandomStreams& streams)
    : spec_(spec),
      prompt_(prompt),
      output_(output),
      limits_(limits),
      first_turns_(arrivals, prompt, output,
                   RunLimits{.max_requests = 0, .max_arrival_time = limits.max_arrival_time}, streams),
      turn_rng_(streams.stream("workload.conversations")),
      system_salt_(0),
      conversation_salt_(0) {
  MOESIM_CHECK(spec_.block_tokens > 0, "prefix blocks need at least one token");
  MOESIM_CHECK(spec_.conversation.turns_mean >= 1, "a conversation has at least one turn on average");
  MOESIM_CHECK(!spec_.conversations || !std::holds_alternative<ClosedLoop>(arrivals),
               "conversations need an open-loop arrival process");
  Rng salts = streams.stream("workload.prefix");
  system_salt_ = salts.next_u64();
  conversation_salt_ = salts.next_u64();
}

std::uint32_t PrefixedSource::blocks_of(std::int64_t prompt) const {
  return static_cast<std::uint32_t>((prompt + spec_.block_tokens - 1) / spec_.block_tokens);
}

void prefix_block_keys(const RequestSpec& r, std::int64_t block_tokens, std::int64_t system_prompt_tokens,
                       std::uint64_t system_salt, std::uint64_t owner_salt, std::vector<std::uint64_t>& out) {
  out.resize(r.prefix_blocks);
  const std::uint64_t owner = splitmix64(owner_salt + r.prefix_ref);
  const auto system_blocks = static_cast<std::uint64_t>(system_prompt_tokens / block_tokens);
  for (std::uint64_t j = 0; j < r.prefix_blocks; ++j)
    out[j] = j < system_blocks ? splitmix64(system_salt + j) : splitmix64(owner + j);
  // A partial last block is other content than the full block the next turn has there (as in the Mooncake
  // traces, where an id always covers the same token count), so a cache may name it without false hits.
  const auto fill = r.prompt_tokens - static_cast<std::int64_t>(r.prefix_blocks - 1) * block_tokens;
  if (r.prefix_blocks > 0 && fill < block_tokens) {
    out.back() = splitmix64(out.back() ^ (0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(fill)));
  }
}

void PrefixedSource::prompt_block_keys(const RequestSpec& r, std::vector<std::uint64_t>& out) const {
  prefix_block_keys(r, spec_.block_tokens, spec_.system_prompt_tokens, system_salt_, conversation_salt_, out);
}

void PrefixedSource::sequence_block_keys(const RequestSpec& r, std::vector<std::uint64_t>& out) const {
  if (!spec_.conversations) {
    out.clear();
    return;
  }
  RequestSpec whole = r;
  whole.prompt_tokens = r.prompt_tokens + r.output_tokens;
  whole.prefix_blocks = blocks_of(whole.prompt_tokens);
  prompt_block_keys(whole, out);
}

SystemPromptSource::SystemPromptSource(std::unique_ptr<RequestSource> trace,
                                       std::int64_t system_prompt_tokens, std::int64_t block_tokens,
                                       const RandomStreams& streams)
    : trace_(std::move(trace)), system_prompt_tokens_(system_prompt_tokens), block_tokens_(block_tokens) {
  MOESIM_CHECK(block_tokens_ > 0, "prefix blocks need at least one token");
  Rng salts = streams.stream("workload.prefix");
  system_salt_ = salts.next_u64();
  request_salt_ = salts.next_u64();
}

std::optional<RequestSpec> SystemPromptSource::next() {
  std::optional<RequestSpec> r = trace_->next();
  if (r) {
    r->prefix_ref = next_ref_++;
    r->prefix_blocks = static_cast<std::uint32_t>((r->prompt_tokens + block_tokens_ - 1) / block_tokens_);
  }
  return r;
}

void SystemPromptSource::prompt_block_keys(const RequestSpec& r, std::vector<std::uint64_t>& out) const {
  prefix_block_keys(r, block_tokens_, system_prompt_tokens_, system_salt_, request_salt_, out);
}

std::optional<RequestSpec> PrefixedSource::issue(Turn t) {
  const Time at = t.request.arrival;
  if ((limits_.max_requests > 0 && issued_ >= limits_.max_requests) ||
      (limits_.max_arrival_time > Duration::zero() && at.since_start() >= limits_.max_arrival_time)) {
    done_ = true;
    return std::nullopt;
  }
  ++issued_;
  if (t.turns_left > 0) {
    Turn n;
    n.request.prefix_ref = t.request.prefix_ref;
    n.request.prompt_tokens =
        t.request.prompt_tokens + t.request.output_tokens + sample_length(prompt_, turn_rng_);
    n.request.output_tokens = sample_length(output_, turn_rng_);
    const double think_s = spec_.conversation.think_time_s > 0
                               ? sample_exponential(turn_rng_, 1.0 / spec_.conversation.think_time_s)
                               : 0.0;
    n.request.arrival = at + Duration::from_seconds(think_s);
    n.request.prefix_blocks = blocks_of(n.request.prompt_tokens);
    n.turns_left = t.turns_left - 1;
    if (n.request.prompt_tokens <= spec_.conversation.max_prompt_tokens) follow_ups_.push(n);
  }
  return t.request;
}

std::optional<RequestSpec> PrefixedSource::next() {
  if (done_) return std::nullopt;
  if (!first_) first_ = first_turns_.next();
  const bool take_follow_up =
      !follow_ups_.empty() && (!first_ || follow_ups_.top().request.arrival <= first_->arrival);
  if (take_follow_up) {
    const Turn t = follow_ups_.top();
    follow_ups_.pop();
    return issue(t);
  }
  if (!first_) return std::nullopt;
  Turn t;
  t.request = *first_;
  first_.reset();
  t.request.prefix_ref = conversations_++;
  t.request.prompt_tokens += spec_.system_prompt_tokens;
  t.request.prefix_blocks = blocks_of(t.request.prompt_tokens);
  if (spec_.conversations && spec_.conversation.turns_mean > 1) {
    // Geometric on {1, 2, ...} with mean m: P(n) = (1 - p)^(n - 1) p, p = 1 / m, by inversion.
    const double p = 1.0 / spec_.conversation.turns_mean;
    const double extra = std::floor(std::log(turn_rng_.uniform_pos()) / std::log1p(-p));
    t.turns_left = static_cast<std::uint32_t>(std::min(extra, 1e6));
  }
  return issue(t);
}

bool PrefixedSource::exhausted() const {
  if (done_ || (limits_.max_requests > 0 && issued_ >= limits_.max_requests)) return true;
  return !first_ && follow_ups_.empty() && first_turns_.exhausted();
}

}  // namespace moesim
