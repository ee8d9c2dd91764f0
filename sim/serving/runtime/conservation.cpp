#include "sim/serving/runtime/conservation.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "sim/engine/check.h"
#include "sim/serving/runtime/metrics_recorder.h"
#include "sim/serving/runtime/replica.h"

namespace moesim {

void check_request_ledger(const RequestLedger& l) {
  const std::int64_t by_reason = std::accumulate(l.dropped_by.begin(), l.dropped_by.end(), std::int64_t{0});
  MOESIM_CHECK(by_reason == l.dropped, "conservation: " + std::to_string(l.dropped) +
                                           " requests dropped but the drop reasons count " +
                                           std::to_string(by_reason));
  const std::int64_t accounted = l.finished + l.dropped + l.failed + l.in_flight;
  MOESIM_CHECK(accounted == l.arrived,
               "conservation: " + std::to_string(l.arrived) + " requests arrived but " +
                   std::to_string(l.finished) + " finished + " + std::to_string(l.dropped) + " dropped + " +
                   std::to_string(l.failed) + " failed + " + std::to_string(l.in_flight) +
                   " in flight = " + std::to_string(accounted));
}

void check_kv_ledger(const KvPoolLedger& l) {
  MOESIM_CHECK(l.available + l.held == l.total,
               "conservation: replica " + std::to_string(l.replica) + " group " + std::to_string(l.group) +
                   " has " + std::to_string(l.total) + " KV blocks but " + std::to_string(l.available) +
                   " free or cached + " + std::to_string(l.held) +
                   " held by its requests = " + std::to_string(l.available + l.held));
}

void check_kv_transfer_ledger(const KvTransferLedger& l) {
  MOESIM_CHECK(l.sent == l.received + l.in_transit && l.bytes_sent == l.bytes_received + l.bytes_in_transit,
               "conservation: " + std::to_string(l.sent) + " KV caches sent (" +
                   std::to_string(l.bytes_sent) + " B) but " + std::to_string(l.received) + " received (" +
                   std::to_string(l.bytes_received) + " B) + " + std::to_string(l.in_transit) +
                   " on the way (" + std::to_string(l.bytes_in_transit) + " B)");
}

namespace {

// Distinct blocks held by the group's requests (prefix caching shares a cached block between requests;
// without it a request's blocks are its own, counted by r.blocks).
std::int64_t held_blocks(const AttentionGroup& g, const RequestTable& requests, std::vector<BlockId>& ids) {
  ids.clear();
  std::int64_t held = 0;
  const auto add = [&](RequestIdx i) {
    const Request& r = requests[i];
    if (g.kv.prefix_caching()) {
      MOESIM_CHECK(static_cast<std::int64_t>(r.block_ids.size()) == r.blocks,
                   "conservation: a request's block count and its block ids disagree");
      ids.insert(ids.end(), r.block_ids.begin(), r.block_ids.end());
    } else {
      held += r.blocks;
    }
  };
  for (const RequestIdx i : g.running) add(i);
  for (const RequestIdx i : g.waiting) add(i);
  if (!g.kv.prefix_caching()) return held;
  std::sort(ids.begin(), ids.end());
  return static_cast<std::int64_t>(std::unique(ids.begin(), ids.end()) - ids.begin());
}

}  // namespace

void check_conservation(const MetricsRecorder& metrics, const RequestTable& requests,
                        std::span<const std::unique_ptr<Replica>> replicas) {
  check_request_ledger(RequestLedger{.arrived = metrics.arrived,
                                     .finished = metrics.finished,
                                     .dropped = metrics.dropped,
                                     .dropped_by = metrics.dropped_by,
                                     .failed = metrics.failed,
                                     .in_flight = static_cast<std::int64_t>(requests.live())});
  KvTransferLedger t{.sent = metrics.kv_sent,
                     .received = metrics.kv_received,
                     .bytes_sent = metrics.kv_bytes_sent,
                     .bytes_received = metrics.kv_bytes_received};
  for (const Request& r : requests.slots()) {
    t.in_transit += r.kv_in_transit > 0 ? 1 : 0;
    t.bytes_in_transit += r.kv_in_transit;
  }
  check_kv_transfer_ledger(t);
  std::vector<BlockId> ids;
  for (const auto& rep : replicas) {
    for (std::size_t g = 0; g < rep->groups().size(); ++g) {
      const AttentionGroup& group = rep->groups()[g];
      check_kv_ledger(KvPoolLedger{.replica = rep->index(),
                                   .group = static_cast<int>(g),
                                   .total = group.kv.total_blocks(),
                                   .available = group.kv.free_blocks(),
                                   .held = held_blocks(group, requests, ids)});
    }
  }
}

}  // namespace moesim
