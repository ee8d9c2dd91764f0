// Heap event queue (4-ary) over a slab of callback slots: the heap moves 24-byte entries, never callbacks.
#include "sim/engine/simulator.h"

#include <algorithm>

#include "sim/engine/check.h"

namespace moesim {

void fail_check(const char* cond, const std::string& msg, const char* file, int line) {
  throw InternalError(std::string("internal error: ") + msg + " (" + cond + " at " + file + ":" +
                      std::to_string(line) + ")");
}

namespace {
constexpr std::uint64_t kPhaseBit = 1ULL << 63;

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0x100000001b3ULL;
}
}  // namespace

EventId Simulator::schedule_at(Time t, Phase phase, Callback cb) {
  MOESIM_CHECK(t >= now_, "an event cannot be scheduled in the past");
  std::uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<std::uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& s = slots_[slot];
  s.cb = std::move(cb);
  s.live = true;
  MOESIM_CHECK(slot <= kSlotMask && seq_ < (kPhaseBit >> kSlotBits),
               "more events than the queue's key holds");
  const std::uint64_t key = (phase == Phase::kDecide ? kPhaseBit : 0) | (seq_++ << kSlotBits) | slot;
  heap_push(Entry{t.ps(), key});
  return EventId{slot, s.generation};
}

// Sift up from a hole at the end: parents move down until `e`'s place is found.
void Simulator::heap_push(Entry e) {
  std::size_t i = heap_.size() - kRootAt;
  heap_.push_back(e);
  Entry* h = heap_.data() + kRootAt;
  while (i > 0) {
    const std::size_t parent = (i - 1) / 4;
    if (!earlier(e, h[parent])) break;
    h[i] = h[parent];
    i = parent;
  }
  h[i] = e;
}

// Removes the top (Floyd's bottom-up deletion): the hole at the root goes down to a leaf, the least of
// each node's children moving up, then the last entry sifts up from there; it belongs near the bottom, so
// that costs one comparison per level where the textbook sift-down costs two, with fewer mispredictions.
void Simulator::heap_pop() {
  const Entry e = heap_.back();
  heap_.pop_back();
  const std::size_t n = heap_.size() - kRootAt;
  if (n == 0) return;
  Entry* h = heap_.data() + kRootAt;
  std::size_t i = 0;
  for (;;) {
    const std::size_t first = 4 * i + 1;
    if (first >= n) break;
    std::size_t best = first;
    if (first + 4 <= n) {  // all four children: a branch-free tournament
      const std::size_t a = earlier(h[first + 1], h[first]) ? first + 1 : first;
      const std::size_t b = earlier(h[first + 3], h[first + 2]) ? first + 3 : first + 2;
      best = earlier(h[b], h[a]) ? b : a;
    } else {
      for (std::size_t c = first + 1; c < n; ++c) best = earlier(h[c], h[best]) ? c : best;
    }
    h[i] = h[best];
    i = best;
  }
  while (i > 0) {
    const std::size_t parent = (i - 1) / 4;
    if (!earlier(e, h[parent])) break;
    h[i] = h[parent];
    i = parent;
  }
  h[i] = e;
}

bool Simulator::cancel(EventId id) {
  if (id.slot >= slots_.size()) return false;
  Slot& s = slots_[id.slot];
  if (!s.live || s.generation != id.generation) return false;
  s.live = false;
  s.cb = nullptr;
  ++cancelled_pending_;
  return true;
}

bool Simulator::step_one(Time limit) {
  while (heap_.size() > kRootAt) {
    const Entry top = heap_[kRootAt];
    if (top.time_ps > limit.ps()) return false;
    heap_pop();
    // The next event's callback lies anywhere in the slab: ask for it while this one runs.
    if (heap_.size() > kRootAt) __builtin_prefetch(&slots_[heap_[kRootAt].key & kSlotMask]);
    const auto slot = static_cast<std::uint32_t>(top.key & kSlotMask);
    Slot& s = slots_[slot];
    Callback cb = std::move(s.cb);
    const bool live = s.live;
    s.live = false;
    ++s.generation;
    free_slots_.push_back(slot);
    if (!live) {
      --cancelled_pending_;
      continue;
    }
    now_ = Time::at(Duration::from_ps(top.time_ps));
    ++processed_;
    // Hashed as (phase bit | sequence), without the slot: the fingerprint names what ran, not where.
    const std::uint64_t order = (top.key & kPhaseBit) | ((top.key & ~kPhaseBit) >> kSlotBits);
    fingerprint_ = mix(mix(fingerprint_, static_cast<std::uint64_t>(top.time_ps)), order);
    cb();
    return true;
  }
  return false;
}

void Simulator::run() {
  stopped_ = false;
  while (!stopped_ && step_one(Time::never())) {
  }
}

void Simulator::run_until(Time t) {
  stopped_ = false;
  while (!stopped_ && step_one(t)) {
  }
  if (!stopped_ && now_ < t) now_ = t;
}

}  // namespace moesim
