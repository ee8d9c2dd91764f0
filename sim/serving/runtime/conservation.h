// Conservation, checked at the end of every run: every request that arrived finished, was dropped (by a
// reason), failed or is still in flight, and every KV block of every attention group is free, cached
// (unreferenced, prefix caching) or held by a request in that group. A broken balance is a bug in a
// mechanism (PD hand-off, migration, prefix caching, preemption, drops): an InternalError names it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "sim/serving/report/report.h"
#include "sim/serving/runtime/request.h"

namespace moesim {

class MetricsRecorder;
class Replica;

struct RequestLedger {
  std::int64_t arrived = 0;
  std::int64_t finished = 0;
  std::int64_t dropped = 0;
  std::array<std::int64_t, kDropReasons> dropped_by{};
  std::int64_t failed = 0;     // lost with a failed instance (faults.in_flight "fail")
  std::int64_t in_flight = 0;  // still in the request table (waiting, running, or its KV on the way)
};

// One attention group's KV pool. available = free blocks + cached blocks no request holds (the prefix
// cache's evictable ones); held = distinct blocks the group's requests hold.
struct KvPoolLedger {
  int replica = 0;
  int group = 0;
  std::int64_t total = 0;
  std::int64_t available = 0;
  std::int64_t held = 0;
};

// KV caches moved between instances (PD hand-offs, migrations): sent = received + on the way, in caches and
// in bytes; on the way is counted from the requests (Request::kv_in_transit), not from the counters.
struct KvTransferLedger {
  std::int64_t sent = 0;
  std::int64_t received = 0;
  std::int64_t in_transit = 0;
  std::int64_t bytes_sent = 0;
  std::int64_t bytes_received = 0;
  std::int64_t bytes_in_transit = 0;
};

// Throw InternalError naming the balance that does not hold and its terms.
void check_request_ledger(const RequestLedger& l);
void check_kv_ledger(const KvPoolLedger& l);
void check_kv_transfer_ledger(const KvTransferLedger& l);

// All three, from a run's state at its end (Cluster::run): the recorder's counts, the requests still in the
// table, and every group of every replica.
void check_conservation(const MetricsRecorder& metrics, const RequestTable& requests,
                        std::span<const std::unique_ptr<Replica>> replicas);

}  // namespace moesim
