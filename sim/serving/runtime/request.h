// A request in flight and the table that holds them: entities refer to requests by index (RequestIdx);
// finished slots are reused so memory is O(requests in flight).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sim/engine/time.h"
#include "sim/serving/runtime/prefix_cache.h"

namespace moesim {

using RequestIdx = std::uint32_t;

struct alignas(64) Request {
  // What every step of a running request reads or writes (batch forming, KV blocks, tokens), first: one
  // cache line of the request table, which a cluster's replicas outgrow.
  std::int64_t target = 0;    // tokens to compute before the next token can be sampled (prefill)
  std::int64_t computed = 0;  // tokens whose KV is in the cache
  std::int64_t generated = 0;
  std::int64_t output = 0;
  std::int64_t blocks = 0;  // KV blocks held
  Time last_token;
  int group = 0;
  int replica = 0;
  // Tokens the user has received: more than `generated` while a request paused under TensorRT-LLM's
  // MAX_UTILIZATION generates again what its pause dropped (AttentionGroup::preempt's `max_prompt`).
  std::int32_t delivered = 0;
  bool measured = false;
  std::int64_t id = 0;
  Time arrival;
  std::int64_t prompt = 0;
  // Prefix caching only: the chained hashes of the full KV blocks of the prompt (then of the answer, where
  // the workload keys it: a conversation's next turn repeats it), the ids of the blocks held (in
  // token order) and how many leading ones are named in the cache.
  std::vector<BlockHash> prompt_hashes;
  std::vector<BlockId> block_ids;
  std::int64_t named_blocks = 0;
  Time admitted = Time::never();
  Time first_token;
  int preemptions = 0;
  // Under disaggregation (TTFT split): admission to the prefill instance, end of its prefill (first token
  // sampled), arrival of its KV cache at the decode instance.
  Time prefill_admitted = Time::never();
  Time prefill_done;
  Time kv_arrived;
  int prefill_replica = -1;        // the prefill instance it came from (-1: prefilled where it decodes)
  std::int64_t kv_in_transit = 0;  // bytes of its KV cache sent and not yet received (hand-off, migration)
  [[nodiscard]] bool in_prefill() const { return computed < target; }
};
static_assert(offsetof(Request, measured) < 64, "the fields of a step fit the first cache line");

class RequestTable {
 public:
  RequestIdx add() {
    if (!free_.empty()) {
      const RequestIdx i = free_.back();
      free_.pop_back();
      requests_[i] = Request{};
      return i;
    }
    requests_.emplace_back();
    return static_cast<RequestIdx>(requests_.size() - 1);
  }
  void release(RequestIdx i) { free_.push_back(i); }
  // Requests added and not released (in flight).
  [[nodiscard]] std::size_t live() const { return requests_.size() - free_.size(); }
  [[nodiscard]] Request& operator[](RequestIdx i) { return requests_[i]; }
  [[nodiscard]] const Request& operator[](RequestIdx i) const { return requests_[i]; }
  // Every slot, released ones included (a released slot keeps its last request's fields).
  [[nodiscard]] std::span<const Request> slots() const { return requests_; }
  // A hint that request i is about to be read or written: its fields a step touches (counts and times).
  void prefetch(RequestIdx i) const {
    __builtin_prefetch(&requests_[i]);  // the fields a step uses (Request's first cache line)
  }

 private:
  std::vector<Request> requests_;
  std::vector<RequestIdx> free_;
};

}  // namespace moesim
