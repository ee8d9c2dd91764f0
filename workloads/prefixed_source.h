// Synthetic workloads with shared prefixes (prefix caching): a system prompt shared by every request and
// multi-turn conversations whose next turn's prompt extends the previous turn's prompt and answer. Wraps a
// SyntheticSource that gives the first turns (arrival process and lengths); the follow-up turns come from
// their own named stream. Prompt blocks get content keys (RequestSource::prompt_block_keys) from the
// conversation id and block position (a partial last block also from its token count), so no key is stored:
// memory stays O(conversations in progress).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <queue>
#include <vector>

#include "workloads/request_source.h"

namespace moesim {

struct ConversationSpec {
  double turns_mean = 1;    // turns per conversation, geometric on {1, 2, ...} with this mean
  double think_time_s = 0;  // mean (exponential) time from one turn's arrival to the next turn's
  std::int64_t max_prompt_tokens = 32768;  // a conversation ends when its next prompt would be longer
};

struct PrefixWorkloadSpec {
  std::int64_t system_prompt_tokens = 0;  // prepended to every first turn, identical for all requests
  bool conversations = false;
  ConversationSpec conversation;
  std::int64_t block_tokens = 16;  // tokens per keyed block (the KV cache's block size)
};

// The content keys of r's prompt blocks (RequestSource::prompt_block_keys): a block wholly inside the first
// `system_prompt_tokens` is the same for every request (keyed by its position and `system_salt`); any other
// block belongs to r.prefix_ref (its conversation or request) and position; a partial last block also
// carries its token count.
void prefix_block_keys(const RequestSpec& r, std::int64_t block_tokens, std::int64_t system_prompt_tokens,
                       std::uint64_t system_salt, std::uint64_t owner_salt, std::vector<std::uint64_t>& out);

// A recorded trace that carries no prompt identity (Azure 2023, ServeGen: token counts only) with a declared
// shared system prompt: the first `system_prompt_tokens` of every prompt (all of a shorter one) are the same
// content, the rest is each request's own. The trace's prompts already include it (nothing is prepended).
class SystemPromptSource final : public RequestSource {
 public:
  SystemPromptSource(std::unique_ptr<RequestSource> trace, std::int64_t system_prompt_tokens,
                     std::int64_t block_tokens, const RandomStreams& streams);
  std::optional<RequestSpec> next() override;
  void on_finished(Time now) override { trace_->on_finished(now); }
  [[nodiscard]] bool exhausted() const override { return trace_->exhausted(); }
  [[nodiscard]] std::int64_t prefix_block_tokens() const override { return block_tokens_; }
  void prompt_block_keys(const RequestSpec& r, std::vector<std::uint64_t>& out) const override;

 private:
  std::unique_ptr<RequestSource> trace_;
  std::int64_t system_prompt_tokens_;
  std::int64_t block_tokens_;
  std::uint64_t system_salt_;
  std::uint64_t request_salt_;
  std::uint32_t next_ref_ = 0;
};

// Longest prompt the workload can send (for KV-capacity checks): system prompt + longest user prompt
// without conversations, else the conversation cap.
std::int64_t max_prefixed_prompt(const PrefixWorkloadSpec& spec, const LengthSpec& prompt);

// The next turn of a conversation is sent think time after the previous turn was sent (open loop: it does
// not wait for the answer, as ServeGen and the Mooncake synthetic trace replay); its prompt is the previous
// prompt, the previous answer and a new user message drawn from the prompt length distribution. Needs an
// open-loop arrival process when conversations are on.
class PrefixedSource final : public RequestSource {
 public:
  PrefixedSource(const PrefixWorkloadSpec& spec, ArrivalSpec arrivals, LengthSpec prompt, LengthSpec output,
                 RunLimits limits, const RandomStreams& streams);
  std::optional<RequestSpec> next() override;
  void on_finished(Time now) override { first_turns_.on_finished(now); }
  [[nodiscard]] bool exhausted() const override;
  [[nodiscard]] std::int64_t prefix_block_tokens() const override { return spec_.block_tokens; }
  void prompt_block_keys(const RequestSpec& r, std::vector<std::uint64_t>& out) const override;
  // In conversations a turn's answer opens the next turn's prompt after its own: keyed as that prompt is.
  void sequence_block_keys(const RequestSpec& r, std::vector<std::uint64_t>& out) const override;

 private:
  struct Turn {
    RequestSpec request;
    std::uint32_t turns_left = 0;  // turns after this one
    bool operator>(const Turn& o) const {
      return request.arrival != o.request.arrival ? request.arrival > o.request.arrival
                                                  : request.prefix_ref > o.request.prefix_ref;
    }
  };
  std::optional<RequestSpec> issue(Turn t);
  [[nodiscard]] std::uint32_t blocks_of(std::int64_t prompt) const;

  PrefixWorkloadSpec spec_;
  LengthSpec prompt_;
  LengthSpec output_;
  RunLimits limits_;
  SyntheticSource first_turns_;
  Rng turn_rng_;
  std::uint64_t system_salt_;
  std::uint64_t conversation_salt_;
  std::optional<RequestSpec> first_;  // the next first turn, read ahead to merge with follow-ups
  bool first_done_ = false;
  std::priority_queue<Turn, std::vector<Turn>, std::greater<>> follow_ups_;
  std::uint32_t conversations_ = 0;
  std::int64_t issued_ = 0;
  bool done_ = false;
};

}  // namespace moesim
