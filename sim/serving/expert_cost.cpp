#include "sim/serving/expert_cost.h"

#include <algorithm>

#include "sim/engine/check.h"

namespace moesim {

ExpertCost::ExpertCost(const GpuCostModel& gpu, const ExpertCostShape& shape, int ranks,
                       int max_experts_per_rank, std::span<const Precision> precisions,
                       const std::array<double, kPrecisionCount>& dequant)
    : gpu_(gpu), shape_(shape), ranks_(ranks), slots_(0), dequant_(dequant) {
  slot_of_.fill(-1);
  for (const Precision p : precisions) {
    const auto i = static_cast<std::size_t>(p);
    if (slot_of_[i] >= 0) continue;
    slot_of_[i] = static_cast<std::int8_t>(slots_);
    precision_of_[slots_++] = p;
  }
  MOESIM_CHECK(slots_ > 0, "expert costing needs at least one precision");
  const auto r = static_cast<std::size_t>(ranks);
  touched_.assign(r * 2 * slots_ * 2, 0);
  group_pairs_.assign(touched_.size(), 0.0);
  half_.assign(2 * r, Duration::zero());
  rank_touched_.assign(2 * r, 0);
  late_.assign(r, Duration::zero());
  pairs_.assign(r, 0.0);
  bytes_.assign(r, 0.0);
  ffn_.assign(slots_ * static_cast<std::size_t>(shape.max_tokens + 1), kUncosted);
  memo_ = std::make_shared<GroupedMemo>(static_cast<std::size_t>(max_experts_per_rank) + 1, slots_);
}

void ExpertCost::share_memo(std::shared_ptr<GroupedMemo> memo) {
  MOESIM_CHECK(memo->rows == memo_->rows && memo->slots.size() == memo_->slots.size(),
               "grouped-launch memo shared between expert costs that differ");
  memo_ = std::move(memo);
}

void ExpertCost::begin_layer() {
  if (shape_.grouped) {
    std::fill(touched_.begin(), touched_.end(), 0);
    std::fill(group_pairs_.begin(), group_pairs_.end(), 0.0);
  }
  std::fill(half_.begin(), half_.end(), Duration::zero());
  std::fill(rank_touched_.begin(), rank_touched_.end(), 0);
  std::fill(late_.begin(), late_.end(), Duration::zero());
  std::fill(pairs_.begin(), pairs_.end(), 0.0);
  std::fill(bytes_.begin(), bytes_.end(), 0.0);
}

void ExpertCost::add_copy(int rank, Precision p, std::int32_t a, std::int32_t b, double bytes, bool late) {
  const auto r = static_cast<std::size_t>(rank);
  pairs_[r] += a + b;
  bytes_[r] += bytes * ((a > 0 ? 1 : 0) + (b > 0 ? 1 : 0));
  rank_touched_[idx(rank, 0)] += a > 0 ? 1 : 0;
  rank_touched_[idx(rank, 1)] += b > 0 ? 1 : 0;
  if (!shape_.grouped) {  // one launch per expert and micro-batch
    half_[idx(rank, 0)] += expert_ffn(a, p);
    if (b > 0) half_[idx(rank, 1)] += expert_ffn(b, p);
    return;
  }
  const auto slot = static_cast<std::size_t>(slot_of_[static_cast<std::size_t>(p)]);
  if (a > 0) {
    const std::size_t i = group(rank, 0, slot, late);
    ++touched_[i];
    group_pairs_[i] += a;
  }
  if (b > 0) {
    const std::size_t i = group(rank, 1, slot, late);
    ++touched_[i];
    group_pairs_[i] += b;
  }
}

void ExpertCost::add_sums(int rank, int half, Precision p, std::int32_t touched, double pairs, double bytes) {
  MOESIM_CHECK(shape_.grouped, "per-GPU sums are costed only by grouped launches");
  const auto r = static_cast<std::size_t>(rank);
  pairs_[r] += pairs;
  bytes_[r] += bytes * touched;
  rank_touched_[idx(rank, half)] += touched;
  const std::size_t i =
      group(rank, half, static_cast<std::size_t>(slot_of_[static_cast<std::size_t>(p)]), false);
  touched_[i] += touched;
  group_pairs_[i] += pairs;
}

// Grouped engines launch one grouped GEMM pair per weight format and micro-batch; copies still loading run in
// a launch of their own once they land (the resident ones do not wait for them).
void ExpertCost::finish_layer() {
  if (!shape_.grouped) return;
  for (int rank = 0; rank < ranks_; ++rank) {
    Duration late = Duration::zero();
    for (int h = 0; h < 2; ++h) {
      Duration t = Duration::zero();
      for (std::size_t s = 0; s < slots_; ++s) {
        const std::size_t ready = group(rank, h, s, false);
        const std::size_t lagging = ready + 1;
        t += grouped(touched_[ready], group_pairs_[ready], precision_of_[s]);
        if (touched_[lagging] == 0) continue;
        const Duration l = grouped(touched_[lagging], group_pairs_[lagging], precision_of_[s]);
        t += l;
        late += l;
      }
      half_[idx(rank, h)] = t;
    }
    late_[static_cast<std::size_t>(rank)] = late;
  }
}

Duration ExpertCost::expert_ffn(std::int64_t tokens, Precision p) const {
  if (tokens <= 0) return Duration::zero();
  const auto slot = static_cast<std::size_t>(slot_of_[static_cast<std::size_t>(p)]);
  if (tokens <= shape_.max_tokens) {
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
                         .scaled(dequant_[static_cast<std::size_t>(p)]);
  if (tokens <= shape_.max_tokens) {
    const auto slot = static_cast<std::size_t>(slot_of_[static_cast<std::size_t>(p)]);
    ffn_[slot * static_cast<std::size_t>(shape_.max_tokens + 1) + static_cast<std::size_t>(tokens)] = d;
  }
  return d;
}

Duration ExpertCost::grouped(std::int32_t experts, double pairs, Precision p) const {
  const std::int64_t tokens = round_half_away(pairs);
  // No work costs nothing in every cost model (the half a step without two-batch overlap leaves empty).
  if (tokens <= 0 || experts <= 0) return Duration::zero();
  const double dequant = dequant_[static_cast<std::size_t>(p)];
  const auto cost = [&] {
    const Duration t = gpu_.grouped_experts(GroupedExpertsWork{
        .experts = experts, .tokens = tokens, .hidden = shape_.hidden, .inter = shape_.inter, .weights = p});
    return dequant == 1.0 ? t : t.scaled(dequant);
  };
  constexpr std::int64_t kTokenBits = 24;
  constexpr std::uint64_t kTokenMask = (std::uint64_t{1} << kTokenBits) - 1;
  GroupedMemo& memo = *memo_;
  const auto e = static_cast<std::size_t>(experts);
  if (tokens > static_cast<std::int64_t>(kTokenMask) || e >= memo.rows) return cost();
  const auto row = static_cast<std::size_t>(slot_of_[static_cast<std::size_t>(p)]) * memo.rows + e;
  std::atomic<std::uint64_t>& slot =
      memo.slots[row * GroupedMemo::kRow + (static_cast<std::size_t>(tokens) & (GroupedMemo::kRow - 1))];
  const std::uint64_t word = slot.load(std::memory_order_relaxed);
  if ((word & kTokenMask) == static_cast<std::uint64_t>(tokens))
    return Duration::from_ps(static_cast<std::int64_t>(word >> kTokenBits));
  const Duration t = cost();
  if (t.ps() >= 0 && t.ps() < (std::int64_t{1} << (64 - kTokenBits)))
    slot.store((static_cast<std::uint64_t>(t.ps()) << kTokenBits) | static_cast<std::uint64_t>(tokens),
               std::memory_order_relaxed);
  return t;
}

}  // namespace moesim
