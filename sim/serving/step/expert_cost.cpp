#include "sim/serving/step/expert_cost.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <type_traits>

#include "sim/engine/check.h"

namespace moesim {

ExpertCost::ExpertCost(const GpuCostModel& gpu, const ExpertCostShape& shape, int ranks,
                       int max_experts_per_rank, std::span<const Precision> precisions,
                       const std::array<double, kPrecisionCount>& dequant)
    : gpu_(gpu), shape_(shape), ranks_(ranks), groups_(max_experts_per_rank), slots_(0) {
  slot_of_.fill(-1);
  for (const Precision p : precisions) {
    const auto i = static_cast<std::size_t>(p);
    if (slot_of_[i] >= 0) continue;
    slot_of_[i] = static_cast<std::int8_t>(slots_);
    dequant_[slots_] = dequant[i];
    precision_of_[slots_++] = p;
  }
  MOESIM_CHECK(slots_ > 0, "expert costing needs at least one precision");
  const auto r = static_cast<std::size_t>(ranks);
  rank_.resize(r);
  launch_.resize(r * 2 * slots_ * 2);
  memo_ = std::make_shared<GroupedMemo>(static_cast<std::size_t>(max_experts_per_rank) + 1, slots_);
}

namespace {

// Zeroed pages from the kernel, committed on first touch.
std::uint64_t* map_zeroed(std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return static_cast<std::uint64_t*>(p);
}

}  // namespace

void ExpertCost::GroupedMemo::Unmap::operator()(std::uint64_t* p) const { ::munmap(p, bytes); }

ExpertCost::GroupedMemo::GroupedMemo(std::size_t rows_per_precision, std::size_t precisions)
    : rows(rows_per_precision),
      size(rows_per_precision * precisions * kRow),
      words(map_zeroed(size * sizeof(std::uint64_t)), Unmap{size * sizeof(std::uint64_t)}) {}

void ExpertCost::share_memo(std::shared_ptr<GroupedMemo> memo) {
  MOESIM_CHECK(memo->rows == memo_->rows && memo->size == memo_->size,
               "grouped-launch memo shared between expert costs that differ");
  memo_ = std::move(memo);
}

// Every rank's accumulators at zero (all-zero bytes: one memset instead of a store per field). The launches
// are zero already: finish_layer() zeroes each one it reads, and those it does not read were never added to;
// only a layer left unfinished leaves them to clear here.
void ExpertCost::begin_layer() {
  static_assert(std::is_trivially_copyable_v<Rank> && std::is_trivially_copyable_v<Launch>);
  std::memset(static_cast<void*>(rank_.data()), 0, rank_.size() * sizeof(Rank));
  if (launches_dirty_) std::fill(launch_.begin(), launch_.end(), Launch{});
  launches_dirty_ = shape_.grouped;
  any_late_ = false;
  any_b_ = false;
}

// Grouped engines launch one grouped GEMM pair per weight format and micro-batch; copies still loading run in
// a launch of their own once they land (the resident ones do not wait for them). Without a launch of
// micro-batch B (no two-batch overlap) its half stays zero.
void ExpertCost::finish_layer() {
  if (!shape_.grouped) return;
  launches_dirty_ = false;
  if (slots_ == 1 && !any_late_ && !any_b_) {  // one format, nothing late, one micro-batch: a launch a rank
    Launch* l = launch_.data();
    for (Rank& r : rank_) {
      if (l->experts > 0) r.half[0] += grouped_at(l->experts, l->pairs, 0);
      *l = Launch{};
      l += 4;  // [half][late]
    }
    return;
  }
  const std::size_t halves = any_b_ ? 2 : 1;
  const std::size_t per_half = 2 * slots_;  // [precision slot][late]
  Launch* first = launch_.data();
  for (Rank& r : rank_) {
    for (std::size_t h = 0; h < halves; ++h) {
      Launch* l = first + h * per_half;
      Duration half = r.half[h];
      for (std::size_t s = 0; s < slots_; ++s, l += 2) {
        if (l[0].experts > 0) half += grouped_at(l[0].experts, l[0].pairs, s);
        l[0] = Launch{};
        if (!any_late_) continue;
        if (l[1].experts > 0) {
          const Duration late = grouped_at(l[1].experts, l[1].pairs, s);
          half += late;
          r.late += late;
        }
        l[1] = Launch{};
      }
      r.half[h] = half;
    }
    first += 2 * per_half;
  }
}

Duration ExpertCost::expert_ffn(std::int64_t tokens, Precision p) const {
  if (tokens <= 0) return Duration::zero();
  const auto slot = static_cast<std::size_t>(slot_of_[static_cast<std::size_t>(p)]);
  if (tokens <= shape_.max_tokens) {
    // Sized on first use: only per-expert engines ask, and at 64k counts a slot the table would be half a
    // MiB per replica of a grouped engine (a fleet's hundreds of replicas) that never reads it.
    if (ffn_.empty()) ffn_.assign(slots_ * static_cast<std::size_t>(shape_.max_tokens + 1), kUncosted);
    const Duration d =
        ffn_[slot * static_cast<std::size_t>(shape_.max_tokens + 1) + static_cast<std::size_t>(tokens)];
    if (d != kUncosted) return d;
  }
  return ffn_costed(tokens, p);
}

Duration ExpertCost::ffn_costed(std::int64_t tokens, Precision p) const {
  const Duration d = gpu_.expert_ffn(ExpertFfnWork{.tokens = tokens,
                                                   .hidden = shape_.hidden,
                                                   .inter = shape_.inter,
                                                   .weights = p,
                                                   .in_loop = true})
                         .scaled(dequant_[slot_of(p)]);
  if (tokens <= shape_.max_tokens) {
    const auto slot = static_cast<std::size_t>(slot_of_[static_cast<std::size_t>(p)]);
    ffn_[slot * static_cast<std::size_t>(shape_.max_tokens + 1) + static_cast<std::size_t>(tokens)] = d;
  }
  return d;
}

Duration ExpertCost::grouped(std::int32_t experts, double pairs, Precision p) const {
  return grouped_at(experts, pairs, slot_of(p));
}

Duration ExpertCost::grouped_at(std::int32_t experts, double pairs, std::size_t slot) const {
  const std::int64_t tokens = round_half_away(pairs);
  // No work costs nothing in every cost model (the half a step without two-batch overlap leaves empty).
  if (tokens <= 0 || experts <= 0) return Duration::zero();
  const auto cost = [&] {
    const Duration t = gpu_.grouped_experts(GroupedExpertsWork{.experts = experts,
                                                               .tokens = tokens,
                                                               .hidden = shape_.hidden,
                                                               .inter = shape_.inter,
                                                               .weights = precision_of_[slot],
                                                               .groups = groups_,
                                                               .family = shape_.family});
    const double f = dequant_[slot] * kernel_time_factor(shape_.family, double(tokens) / double(experts));
    return f == 1.0 ? t : t.scaled(f);
  };
  constexpr std::int64_t kTokenBits = 24;
  constexpr std::uint64_t kTokenMask = (std::uint64_t{1} << kTokenBits) - 1;
  GroupedMemo& memo = *memo_;
  const auto e = static_cast<std::size_t>(experts);
  if (tokens > static_cast<std::int64_t>(kTokenMask) || e >= memo.rows) return cost();
  const std::atomic_ref<std::uint64_t> word_slot =
      memo.at((slot * memo.rows + e) * GroupedMemo::kRow +
              (static_cast<std::size_t>(tokens) & (GroupedMemo::kRow - 1)));
  const std::uint64_t word = word_slot.load(std::memory_order_relaxed);
  if ((word & kTokenMask) == static_cast<std::uint64_t>(tokens))
    return Duration::from_ps(static_cast<std::int64_t>(word >> kTokenBits));
  const Duration t = cost();
  if (t.ps() >= 0 && t.ps() < (std::int64_t{1} << (64 - kTokenBits)))
    word_slot.store((static_cast<std::uint64_t>(t.ps()) << kTokenBits) | static_cast<std::uint64_t>(tokens),
                    std::memory_order_relaxed);
  return t;
}

}  // namespace moesim
