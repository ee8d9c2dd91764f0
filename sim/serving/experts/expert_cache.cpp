#include "sim/serving/experts/expert_cache.h"

#include "sim/engine/check.h"

namespace moesim {

ExpertCache::ExpertCache(int layers, int experts, const ExpertCacheSpec& spec)
    : experts_(experts),
      spec_(spec),
      index_(static_cast<std::size_t>(layers) * static_cast<std::size_t>(experts), -1) {
  MOESIM_CHECK(spec.prefetch_window_batches >= 1, "the prefetch window must be at least one batch");
  window_.resize(static_cast<std::size_t>(spec.prefetch_window_batches));
  MOESIM_CHECK(spec.hbm_bytes >= 0 && spec.staging_bytes >= 0, "cache capacities must be non-negative");
}

int ExpertCache::checked_id(ExpertKey key) const {
  const int c = id(key);
  MOESIM_CHECK(c >= 0, "expert copy not held by this GPU");
  return c;
}

void ExpertCache::add_copy(ExpertKey key, std::int64_t bytes, Tier home, Precision precision,
                           Hotness hotness) {
  MOESIM_CHECK(id(key) < 0, "expert copy registered twice");
  const int c = static_cast<int>(key_.size());
  index_[static_cast<std::size_t>(key.layer) * static_cast<std::size_t>(experts_) +
         static_cast<std::size_t>(key.expert)] = c;
  key_.push_back(key);
  precision_.push_back(precision);
  CopyState& added = state_.emplace_back();
  added.bytes = bytes;
  added.home = home;
  added.hotness = hotness;
  for (auto& w : window_) w.push_back(0);
  window_sum_.push_back(0);
  if (home == Tier::kHbm) {
    MOESIM_CHECK(hotness != Hotness::kCold, "a cold copy cannot live in HBM");
    MOESIM_CHECK(hbm_used_ + bytes <= spec_.hbm_bytes, "HBM-resident copies exceed the expert HBM budget");
    state_.back().resident = 1;
    hbm_used_ += bytes;
    if (hotness == Hotness::kWarm) lru_push_front(c);
  }
}

bool ExpertCache::is_resident(ExpertKey key) const {
  return state_[static_cast<std::size_t>(checked_id(key))].resident != 0;
}
Hotness ExpertCache::hotness(ExpertKey key) const {
  return state_[static_cast<std::size_t>(checked_id(key))].hotness;
}
Precision ExpertCache::precision(ExpertKey key) const {
  return precision_[static_cast<std::size_t>(checked_id(key))];
}
std::int64_t ExpertCache::bytes(ExpertKey key) const {
  return state_[static_cast<std::size_t>(checked_id(key))].bytes;
}
std::int64_t ExpertCache::window_count(ExpertKey key) const {
  return window_total(static_cast<std::size_t>(checked_id(key)));
}

void ExpertCache::lru_unlink(int c) {
  CopyState& s = state_[static_cast<std::size_t>(c)];
  if (s.prev >= 0)
    state_[static_cast<std::size_t>(s.prev)].next = s.next;
  else
    head_ = s.next;
  if (s.next >= 0)
    state_[static_cast<std::size_t>(s.next)].prev = s.prev;
  else
    tail_ = s.prev;
  s.prev = s.next = -1;
}

void ExpertCache::lru_push_front(int c) {
  CopyState& s = state_[static_cast<std::size_t>(c)];
  s.prev = -1;
  s.next = head_;
  if (head_ >= 0)
    state_[static_cast<std::size_t>(head_)].prev = c;
  else
    tail_ = c;
  head_ = c;
}

void ExpertCache::evict(int c, std::vector<ExpertKey>& evicted) {
  const auto u = static_cast<std::size_t>(c);
  if (state_[u].hotness == Hotness::kWarm) lru_unlink(c);
  state_[u].resident = 0;
  hbm_used_ -= state_[u].bytes;  // freed at once
  evicted.push_back(key_[u]);
}

bool ExpertCache::make_room(std::int64_t bytes, std::vector<ExpertKey>& evicted) {
  // Only warm copies are evictable; check first so that a failed admission evicts nothing.
  std::int64_t evictable = 0;
  for (int c = tail_; c >= 0 && hbm_used_ - evictable + bytes > spec_.hbm_bytes;
       c = state_[static_cast<std::size_t>(c)].prev) {
    evictable += state_[static_cast<std::size_t>(c)].bytes;
  }
  if (hbm_used_ - evictable + bytes > spec_.hbm_bytes) return false;
  while (hbm_used_ + bytes > spec_.hbm_bytes) evict(tail_, evicted);
  return true;
}

void ExpertCache::set_hotness(ExpertKey key, Hotness h, std::vector<ExpertKey>& evicted) {
  const int c = checked_id(key);
  CopyState& s = state_[static_cast<std::size_t>(c)];
  const auto u = static_cast<std::size_t>(c);
  const Hotness old = s.hotness;
  if (old == h) return;
  if (s.resident && old == Hotness::kWarm) lru_unlink(c);
  s.hotness = h;
  if (!s.resident) return;
  if (h == Hotness::kWarm) lru_push_front(c);
  if (h == Hotness::kCold) {
    s.resident = 0;
    hbm_used_ -= state_[u].bytes;
    evicted.push_back(key);
  }
}

void ExpertCache::set_format(ExpertKey key, Precision precision, std::int64_t bytes, Tier home,
                             std::vector<ExpertKey>& evicted) {
  const int c = checked_id(key);
  const auto u = static_cast<std::size_t>(c);
  CopyState& s = state_[u];
  MOESIM_CHECK(bytes >= 0, "a copy's size must be non-negative");
  MOESIM_CHECK(home != Tier::kHbm || s.hotness != Hotness::kCold, "a cold copy cannot live in HBM");
  s.home = home;
  if (precision_[u] == precision && s.bytes == bytes) return;
  if (s.resident != 0) {
    if (s.hotness == Hotness::kWarm) lru_unlink(c);
    s.resident = 0;
    hbm_used_ -= s.bytes;
    evicted.push_back(key);
  }
  precision_[u] = precision;
  s.bytes = bytes;
}

CacheAccess ExpertCache::admit(ExpertKey key, std::vector<ExpertKey>& evicted) {
  return admit_copy(checked_id(key), evicted);
}

CacheAccess ExpertCache::admit_copy(int c, std::vector<ExpertKey>& evicted) {
  const auto u = static_cast<std::size_t>(c);
  if (state_[u].resident) return {};
  if (state_[u].hotness == Hotness::kCold || !make_room(state_[u].bytes, evicted)) {
    return {.outcome = CacheOutcome::kNoRoom, .source = state_[u].home, .bytes = 0};
  }
  state_[u].resident = 1;
  hbm_used_ += state_[u].bytes;
  if (state_[u].hotness == Hotness::kWarm) lru_push_front(c);
  return {.outcome = CacheOutcome::kLoaded, .source = state_[u].home, .bytes = state_[u].bytes};
}

CacheAccess ExpertCache::access_miss(int c, std::int32_t routed, std::vector<ExpertKey>& evicted) {
  const auto u = static_cast<std::size_t>(c);
  record(c, routed);
  ++misses_;
  if (state_[u].hotness != Hotness::kCold) {
    const CacheAccess a = admit_copy(c, evicted);
    if (a.outcome == CacheOutcome::kLoaded) return a;
  }
  if (staging_used_ + state_[u].bytes > spec_.staging_bytes) {
    return {.outcome = CacheOutcome::kNoRoom, .source = state_[u].home, .bytes = state_[u].bytes};
  }
  staging_used_ += state_[u].bytes;
  state_[u].staged = 1;
  staged_.push_back(c);
  return {.outcome = CacheOutcome::kStaged, .source = state_[u].home, .bytes = state_[u].bytes};
}

void ExpertCache::record_routed(ExpertKey key, std::int32_t routed) { record(checked_id(key), routed); }

void ExpertCache::prefetch_candidates(std::vector<ExpertKey>& out) const {
  out.clear();
  for (std::size_t u = 0; u < state_.size(); ++u) {
    if (prefetchable(u)) out.push_back(key_[u]);
  }
}

void ExpertCache::end_batch() {
  staging_used_ = 0;
  for (const int c : staged_) state_[static_cast<std::size_t>(c)].staged = 0;
  staged_.clear();
  // The sums take this batch's counts and drop the oldest batch's, whose slot the next batch reuses.
  const std::vector<std::int32_t>& current = window_[static_cast<std::size_t>(window_pos_)];
  window_pos_ = (window_pos_ + 1) % spec_.prefetch_window_batches;
  std::vector<std::int32_t>& oldest = window_[static_cast<std::size_t>(window_pos_)];
  for (std::size_t u = 0; u < window_sum_.size(); ++u) window_sum_[u] += current[u] - oldest[u];
  std::fill(oldest.begin(), oldest.end(), 0);
}

}  // namespace moesim
