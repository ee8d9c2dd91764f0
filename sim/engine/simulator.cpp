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
  const std::uint64_t key = (phase == Phase::kDecide ? kPhaseBit : 0) | seq_++;
  heap_push(Entry{t.ps(), key, slot});
  return EventId{slot, s.generation};
}

// Sift up from a hole at the end: parents move down until `e`'s place is found.
void Simulator::heap_push(Entry e) {
  std::size_t i = heap_.size();
  heap_.push_back(e);
  Entry* h = heap_.data();
  while (i > 0) {
    const std::size_t parent = (i - 1) / 4;
    if (!earlier(e, h[parent])) break;
    h[i] = h[parent];
    i = parent;
  }
  h[i] = e;
}

// Removes the top: the last entry sifts down from a hole at the root, the least of each node's children
// moving up.
void Simulator::heap_pop() {
  const Entry e = heap_.back();
  heap_.pop_back();
  const std::size_t n = heap_.size();
  if (n == 0) return;
  Entry* h = heap_.data();
  std::size_t i = 0;
  for (;;) {
    const std::size_t first = 4 * i + 1;
    if (first >= n) break;
    std::size_t best = first;
    const std::size_t last = std::min(first + 4, n);
    for (std::size_t c = first + 1; c < last; ++c) {
      if (earlier(h[c], h[best])) best = c;
    }
    if (!earlier(h[best], e)) break;
    h[i] = h[best];
    i = best;
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
  while (!heap_.empty()) {
    const Entry top = heap_.front();
    if (top.time_ps > limit.ps()) return false;
    heap_pop();
    // The next event's callback lies anywhere in the slab: ask for it while this one runs.
    if (!heap_.empty()) __builtin_prefetch(&slots_[heap_.front().slot]);
    Slot& s = slots_[top.slot];
    Callback cb = std::move(s.cb);
    const bool live = s.live;
    s.live = false;
    ++s.generation;
    free_slots_.push_back(top.slot);
    if (!live) {
      --cancelled_pending_;
      continue;
    }
    now_ = Time::at(Duration::from_ps(top.time_ps));
    ++processed_;
    fingerprint_ = mix(mix(fingerprint_, static_cast<std::uint64_t>(top.time_ps)), top.key);
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
