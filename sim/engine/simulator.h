// The discrete-event engine: orders events by (time, phase, sequence) and runs them. Knows nothing about
// LLMs. Entities schedule short callbacks; the engine keeps a running fingerprint of what it executed.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <new>
#include <vector>

#include "sim/engine/time.h"

namespace moesim {

// Within one instant, every kNormal event runs before any kDecide event, so a policy that forms a batch
// sees every arrival of that instant.
enum class Phase : std::uint8_t { kNormal = 0, kDecide = 1 };

struct EventId {
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;
};

class Simulator {
 public:
  using Callback = std::function<void()>;

  Simulator() = default;
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  [[nodiscard]] Time now() const { return now_; }

  EventId schedule_at(Time t, Phase phase, Callback cb);
  EventId schedule_in(Duration d, Phase phase, Callback cb) {
    return schedule_at(now_ + d, phase, std::move(cb));
  }
  // Cancelling an event that already ran or was cancelled is a no-op; returns whether it was pending.
  bool cancel(EventId id);

  // Runs until no event is left or stop() is called.
  void run();
  // Runs every event with time <= t, then sets now() to t (if t is later than the last event).
  void run_until(Time t);
  void stop() { stopped_ = true; }

  [[nodiscard]] std::uint64_t events_processed() const { return processed_; }
  // O(buckets of the rung).
  [[nodiscard]] std::size_t pending() const;
  // Running hash of (time, phase, sequence) of every executed event: equal runs have equal fingerprints.
  [[nodiscard]] std::uint64_t fingerprint() const { return fingerprint_; }

 private:
  // 16 bytes, so that a node's four children fill one cache line. The key orders events of one instant:
  // the phase in the top bit, then the sequence number, then (never deciding, the sequence being unique)
  // the callback's slot in the low kSlotBits.
  struct Entry {
    std::int64_t time_ps;
    std::uint64_t key;
  };
  static constexpr int kSlotBits = 24;
  static constexpr std::uint64_t kSlotMask = (1ULL << kSlotBits) - 1;
  // The heap's root sits at index kRootAt of a cache-line-aligned array, which puts the children of node i,
  // at 4i + 1 + kRootAt to 4i + 4 + kRootAt, at the start of a line.
  static constexpr std::size_t kRootAt = 3;
  template <class T>
  struct LineAllocator {
    using value_type = T;
    LineAllocator() = default;
    template <class U>
    explicit LineAllocator(const LineAllocator<U>&) {}
    T* allocate(std::size_t n) {
      return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64}));
    }
    void deallocate(T* p, std::size_t) { ::operator delete (p, std::align_val_t{64}); }
    bool operator==(const LineAllocator&) const = default;
  };
  struct Slot {
    Callback cb;
    std::uint32_t generation = 0;
    bool live = false;
  };
  static bool earlier(const Entry& a, const Entry& b) {
    return (a.time_ps < b.time_ps) | ((a.time_ps == b.time_ps) & (a.key < b.key));
  }
  // The queue is a 4-ary min-heap on (time, key): half the levels of a binary heap, and a node's four
  // children in one cache line. At most 2^24 events pending and 2^39 scheduled in a run (the key's fields;
  // checked). Past kSpillAt pending it holds only the near future, the events before horizon_last_; the
  // later ones wait unsorted in a rung of buckets of 2^shift_ ps (the first rung of a ladder queue, Tang,
  // Goh and Thng, ACM TOMACS 15(3), 2005) or, beyond the rung, in far_. A bucket joins the heap when the heap
  // runs dry; a rung is spread from far_ when the last bucket has gone. Each event is appended to a bucket
  // or far_ at most a few times, and the heap stays small enough for the caches (engine_bench: 65,536
  // pending). Every event of one instant sits in one tier, so the (time, phase, sequence) order is the
  // heap's alone.
  static constexpr std::size_t kSpillAt = 512;   // heap entries (pure heap mode) that start a rung
  static constexpr std::size_t kPerBucket = 16;  // events a rung's bucket aims at
  static constexpr std::size_t kMaxBuckets = std::size_t{1} << 16;
  void heap_push(Entry e);
  void heap_pop();
  void spill();
  // An event after the heap's horizon: into its bucket of the rung, or far_.
  void push_later(Entry e);
  // Refills an empty heap from the rung or far_; false when no event is left.
  bool refill();
  // Spreads `from` (times in [first, last]) over a new rung covering [first, last], and clears it.
  void spread(std::vector<Entry>& from, std::int64_t first, std::int64_t last);
  bool step_one(Time limit);

  std::vector<Entry, LineAllocator<Entry>> heap_ = std::vector<Entry, LineAllocator<Entry>>(kRootAt);
  std::int64_t horizon_last_ = std::numeric_limits<std::int64_t>::max();  // heap: times <= this
  std::vector<std::vector<Entry>> buckets_;  // bucket i: times base_ + [i, i + 1) << shift_
  std::size_t next_bucket_ = 0;              // the rung's buckets before it have joined the heap
  std::size_t rung_buckets_ = 0;             // 0: no rung
  std::int64_t base_ = 0;
  std::int64_t rung_last_ = std::numeric_limits<std::int64_t>::max();  // the rung: times <= this
  int shift_ = 0;
  std::vector<Entry> far_;    // times > rung_last_
  std::vector<Entry> spill_;  // scratch of spill and split
  // Heap entries (index kRootAt included) that make push() spill into a rung: none while a rung is up.
  std::size_t spill_size_ = kRootAt + kSpillAt + 1;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_slots_;
  Time now_;
  std::uint64_t seq_ = 0;
  std::uint64_t processed_ = 0;
  std::uint64_t fingerprint_ = 0xcbf29ce484222325ULL;
  std::size_t cancelled_pending_ = 0;
  bool stopped_ = false;
};

}  // namespace moesim
