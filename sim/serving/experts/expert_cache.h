// Tiered expert storage on one GPU: which expert copies are resident in HBM, where the others live (host
// DRAM, NVMe) and at what precision; LRU eviction of warm copies, pinned hot copies, cold copies streamed
// through a small staging area; prefetch of warm copies whose recent routed count passes a threshold.
// A pure data structure and policy: it returns what to load and evict; the planner drives the loaders.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hwmodels/loader.h"
#include "hwmodels/precision.h"
#include "sim/engine/check.h"
#include "sim/engine/time.h"
#include "sim/serving/experts/expert_stats.h"

namespace moesim {

struct ExpertCacheSpec {
  std::int64_t hbm_bytes = 0;       // HBM set aside for expert weights on this GPU
  std::int64_t staging_bytes = 0;   // transient area for cold experts, emptied at end_batch()
  int prefetch_window_batches = 8;  // N: routed counts are summed over the last N batches
  std::int64_t prefetch_threshold =
      1;  // routed (token, expert) pairs over the window that trigger a prefetch
};

struct ExpertKey {
  int layer = 0;
  int expert = 0;
  friend bool operator==(const ExpertKey&, const ExpertKey&) = default;
};

enum class CacheOutcome : std::uint8_t {
  kHit,     // resident in HBM (or already staged in this batch): nothing to load
  kLoaded,  // loaded into HBM now (evictions listed); on the critical path unless prefetched earlier
  kStaged,  // cold (or no HBM room): loaded into the staging area for this batch only
  kNoRoom,  // neither HBM nor staging can take it: the caller must wait or serialise
};

struct CacheAccess {
  CacheOutcome outcome = CacheOutcome::kHit;
  Tier source = Tier::kHbm;  // where the bytes come from when something is loaded
  std::int64_t bytes = 0;    // bytes to load (0 on a hit)
};

class ExpertCache final {
 public:
  ExpertCache(int layers, int experts, const ExpertCacheSpec& spec);

  // Registers a copy served by this GPU: its size at its precision and its home tier (kHbm for a copy that
  // is simply resident, e.g. hot experts at start). Not resident until admitted unless home is kHbm.
  // Setup-time call (allocates).
  void add_copy(ExpertKey key, std::int64_t bytes, Tier home, Precision precision, Hotness hotness);

  [[nodiscard]] bool holds(ExpertKey key) const { return id(key) >= 0; }
  [[nodiscard]] bool is_resident(ExpertKey key) const;
  [[nodiscard]] Hotness hotness(ExpertKey key) const;
  [[nodiscard]] Precision precision(ExpertKey key) const;
  [[nodiscard]] std::int64_t bytes(ExpertKey key) const;

  // Changes a copy's class. Hot pins a resident copy (it leaves the LRU); warm makes a resident copy
  // evictable; cold evicts it at once (cold copies never stay in HBM). Evictions are appended to `evicted`.
  void set_hotness(ExpertKey key, Hotness h, std::vector<ExpertKey>& evicted);
  // Changes how a copy is stored (a reclassification): its precision, size and home tier. A resident copy
  // at another precision leaves HBM (appended to `evicted`): its next use loads it at the new one.
  void set_format(ExpertKey key, Precision precision, std::int64_t bytes, Tier home,
                  std::vector<ExpertKey>& evicted);

  // The copy is used in this batch by `routed` (token, expert) pairs: counts it for prefetch, refreshes its
  // LRU position and says what must be loaded. Non-resident hot/warm copies are admitted to HBM (evicting
  // least-recently-used warm copies, memory freed at once); if that cannot make room they are staged.
  // Appends evictions to `evicted` (reuse the vector: no allocation once it has grown). O(1) + evictions.
  CacheAccess access(ExpertKey key, std::int32_t routed, std::vector<ExpertKey>& evicted) {
    return access_copy(checked_id(key), routed, evicted);
  }
  // The same by copy id (copy_id()): what the planner calls per expert, layer and step, without the
  // [layer][expert] index (a cache miss per call when every GPU's index is walked each layer).
  CacheAccess access_copy(int copy, std::int32_t routed, std::vector<ExpertKey>& evicted) {
    if (hit(copy, routed)) return {};
    return access_miss(copy, routed, evicted);
  }
  // access_copy() for a copy that hit() has just found neither resident nor staged.
  CacheAccess access_miss(int copy, std::int32_t routed, std::vector<ExpertKey>& evicted);
  // access_copy() when the copy is resident or staged (the common case, inline): counts and refreshes it
  // and returns true; otherwise changes nothing and returns false.
  bool hit(int copy, std::int32_t routed) {
    const auto u = static_cast<std::size_t>(copy);
    MOESIM_CHECK(u < state_.size(), "expert copy not held by this GPU");
    CopyState& s = state_[u];
    if (s.resident == 0 && s.staged == 0) return false;
    record(copy, routed);
    ++hits_;
    if (s.resident != 0 && s.hotness == Hotness::kWarm && head_ != copy) lru_to_front(copy, s);
    return true;
  }
  // When a resident copy's load completes (set by whoever drives the loads; Time::zero() at first).
  [[nodiscard]] Time ready(int copy) const { return state_[static_cast<std::size_t>(copy)].ready; }
  void set_ready(int copy, Time t) { state_[static_cast<std::size_t>(copy)].ready = t; }
  // A held copy's id in [0, copies()), -1 when this GPU does not hold it. Stable until the next add_copy.
  [[nodiscard]] int copy_id(ExpertKey key) const { return id(key); }
  [[nodiscard]] int copies() const { return static_cast<int>(key_.size()); }

  // Counts routed pairs for prefetch without using the copy (e.g. routing seen ahead of this layer). O(1).
  void record_routed(ExpertKey key, std::int32_t routed);

  // Makes a non-resident hot or warm copy resident (prefetch, or pinning a newly hot copy), evicting LRU
  // warm copies as needed. kHit if already resident, kNoRoom if pinned copies leave no room or it is cold.
  CacheAccess admit(ExpertKey key, std::vector<ExpertKey>& evicted);

  // Warm, non-resident copies whose routed count over the last N batches reaches the threshold, in
  // registration order. O(copies).
  void prefetch_candidates(std::vector<ExpertKey>& out) const;

  // Ends a batch: empties the staging area and moves the prefetch window on. O(copies), vectorised.
  void end_batch();

  [[nodiscard]] std::int64_t hbm_used() const { return hbm_used_; }
  [[nodiscard]] std::int64_t hbm_free() const { return spec_.hbm_bytes - hbm_used_; }
  [[nodiscard]] std::int64_t staging_used() const { return staging_used_; }
  [[nodiscard]] std::int64_t window_count(ExpertKey key) const;
  [[nodiscard]] std::int64_t hits() const { return hits_; }
  [[nodiscard]] std::int64_t misses() const { return misses_; }

 private:
  // What a hit or a miss reads and writes besides its count, in one 32-byte record (the planner walks every
  // GPU's cache each layer, so each separate array was a cache miss of its own). The counts stay arrays:
  // end_batch() moves every copy's window on in vectorised passes.
  struct CopyState {
    Time ready;     // when a resident copy's load completes
    int prev = -1;  // LRU list of resident warm copies; head = most recently used
    int next = -1;
    std::int64_t bytes = 0;  // at its precision
    char resident = 0;
    char staged = 0;  // in the staging area for this batch (listed in staged_)
    Hotness hotness = Hotness::kCold;
    Tier home = Tier::kHostDram;
  };
  [[nodiscard]] int id(ExpertKey key) const {
    return index_[static_cast<std::size_t>(key.layer) * static_cast<std::size_t>(experts_) +
                  static_cast<std::size_t>(key.expert)];
  }
  [[nodiscard]] int checked_id(ExpertKey key) const;
  void lru_unlink(int c);
  void lru_push_front(int c);
  // Moves a listed copy that is not the head to the head (most recently used).
  void lru_to_front(int c, CopyState& s) {
    state_[static_cast<std::size_t>(s.prev)].next = s.next;  // not the head: it has a predecessor
    if (s.next >= 0)
      state_[static_cast<std::size_t>(s.next)].prev = s.prev;
    else
      tail_ = s.prev;
    s.prev = -1;
    s.next = head_;
    state_[static_cast<std::size_t>(head_)].prev = c;
    head_ = c;
  }
  void evict(int c, std::vector<ExpertKey>& evicted);
  // The batch's counts only: end_batch() adds them to the sums (one memory access per use instead of two).
  void record(int c, std::int32_t routed) {
    window_[static_cast<std::size_t>(window_pos_)][static_cast<std::size_t>(c)] += routed;
  }
  bool make_room(std::int64_t bytes, std::vector<ExpertKey>& evicted);
  [[nodiscard]] bool prefetchable(std::size_t u) const {
    const CopyState& s = state_[u];
    return s.hotness == Hotness::kWarm && s.resident == 0 && window_total(u) >= spec_.prefetch_threshold;
  }
  // Routed count over the last N batches, this one included.
  [[nodiscard]] std::int64_t window_total(std::size_t u) const {
    return window_sum_[u] + window_[static_cast<std::size_t>(window_pos_)][u];
  }
  CacheAccess admit_copy(int c, std::vector<ExpertKey>& evicted);

  int experts_;
  ExpertCacheSpec spec_;
  std::vector<int> index_;  // [layer][expert] -> copy id or -1
  // Per copy (indexed by copy id).
  std::vector<CopyState> state_;
  std::vector<ExpertKey> key_;
  std::vector<Precision> precision_;
  std::vector<int> staged_;                        // copies in the staging area for this batch
  std::vector<std::vector<std::int32_t>> window_;  // [N][copy] ring of routed counts
  std::vector<std::int64_t> window_sum_;           // over the N-1 batches before this one
  int head_ = -1;
  int tail_ = -1;
  int window_pos_ = 0;
  std::int64_t hbm_used_ = 0;
  std::int64_t staging_used_ = 0;
  std::int64_t hits_ = 0;
  std::int64_t misses_ = 0;
};

}  // namespace moesim
