// Event queue (a 4-ary heap of the near future, a rung of buckets and an overflow list beyond it) over a slab
// of callback slots: the queue moves 16-byte entries, never callbacks.
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
  const Entry e{t.ps(), key};
  if (e.time_ps <= horizon_last_) {
    heap_push(e);
    if (heap_.size() >= spill_size_) spill();
  } else {
    push_later(e);
  }
  return EventId{slot, s.generation};
}

// The heap's entries, once more than kSpillAt, over a rung (their times are its range).
void Simulator::spill() {
  spill_.assign(heap_.begin() + kRootAt, heap_.end());
  heap_.resize(kRootAt);
  const auto [lo, hi] = std::minmax_element(
      spill_.begin(), spill_.end(), [](const Entry& x, const Entry& y) { return x.time_ps < y.time_ps; });
  spread(spill_, lo->time_ps, hi->time_ps);
}

void Simulator::push_later(Entry e) {
  if (e.time_ps <= rung_last_) {
    buckets_[(static_cast<std::uint64_t>(e.time_ps) - static_cast<std::uint64_t>(base_)) >> shift_].push_back(
        e);
  } else {
    far_.push_back(e);
  }
}

void Simulator::spread(std::vector<Entry>& from, std::int64_t first, std::int64_t last) {
  const std::size_t want = std::clamp<std::size_t>(from.size() / kPerBucket, 1, kMaxBuckets);
  const std::uint64_t span = static_cast<std::uint64_t>(last) - static_cast<std::uint64_t>(first);  // - 1
  int shift = 0;
  while ((span >> shift) >= want) ++shift;
  const auto n = static_cast<std::size_t>(span >> shift) + 1;
  if (buckets_.size() < n) buckets_.resize(n);
  for (const Entry& e : from) {
    buckets_[(static_cast<std::uint64_t>(e.time_ps) - static_cast<std::uint64_t>(first)) >> shift].push_back(
        e);
  }
  from.clear();
  base_ = first;
  rung_last_ = last;
  shift_ = shift;
  rung_buckets_ = n;
  next_bucket_ = 0;
  horizon_last_ = first - 1;
  spill_size_ = std::numeric_limits<std::size_t>::max();
}

bool Simulator::refill() {
  while (heap_.size() == kRootAt) {
    if (next_bucket_ < rung_buckets_) {
      std::vector<Entry>& b = buckets_[next_bucket_];
      const std::int64_t last =
          next_bucket_ + 1 == rung_buckets_
              ? rung_last_
              : static_cast<std::int64_t>(static_cast<std::uint64_t>(base_) +
                                          (static_cast<std::uint64_t>(next_bucket_ + 1) << shift_) - 1);
      if (b.size() > kSpillAt && shift_ > 0) {
        // Too many events for one bucket: the later buckets go back to far_, and this one becomes a rung
        // of finer buckets (at least twice finer, so this ends).
        for (std::size_t j = next_bucket_ + 1; j < rung_buckets_; ++j) {
          far_.insert(far_.end(), buckets_[j].begin(), buckets_[j].end());
          buckets_[j].clear();
        }
        spill_.swap(b);
        const auto lo = std::min_element(spill_.begin(), spill_.end(), [](const Entry& x, const Entry& y) {
          return x.time_ps < y.time_ps;
        });
        spread(spill_, lo->time_ps, last);
        continue;
      }
      ++next_bucket_;
      horizon_last_ = last;
      for (const Entry& e : b) {
        __builtin_prefetch(&slots_[e.key & kSlotMask]);
        heap_push(e);
      }
      b.clear();
    } else if (!far_.empty()) {
      const auto [lo, hi] = std::minmax_element(
          far_.begin(), far_.end(), [](const Entry& x, const Entry& y) { return x.time_ps < y.time_ps; });
      spread(far_, lo->time_ps, hi->time_ps);
    } else {  // nothing left: back to a plain heap
      rung_buckets_ = next_bucket_ = 0;
      horizon_last_ = rung_last_ = std::numeric_limits<std::int64_t>::max();
      spill_size_ = kRootAt + kSpillAt + 1;
      return false;
    }
  }
  return true;
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

std::size_t Simulator::pending() const {
  std::size_t n = heap_.size() - kRootAt + far_.size();
  for (std::size_t i = next_bucket_; i < rung_buckets_; ++i) n += buckets_[i].size();
  return n - cancelled_pending_;
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
  while (heap_.size() > kRootAt || refill()) {
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
