// The discrete-event engine: orders events by (time, phase, sequence) and runs them. Knows nothing about
// LLMs. Entities schedule short callbacks; the engine keeps a running fingerprint of what it executed.
#pragma once

#include <cstdint>
#include <functional>
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
  [[nodiscard]] std::size_t pending() const { return heap_.size() - kRootAt - cancelled_pending_; }
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
  // children in one cache line, which matters once the heap outgrows the caches (engine_bench). At most
  // 2^24 events pending and 2^39 scheduled in a run (the key's fields; checked).
  void heap_push(Entry e);
  void heap_pop();
  bool step_one(Time limit);

  std::vector<Entry, LineAllocator<Entry>> heap_ = std::vector<Entry, LineAllocator<Entry>>(kRootAt);
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
