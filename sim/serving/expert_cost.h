// The one expert-cost function of a serving step (docs/architecture.md "The step as parts"): what a layer's routed
// experts cost each expert-parallel rank, as the engine launches them. Every routing path (exact per-expert
// counts, per-GPU bin sums, per-copy tiers and precisions) hands its copies or sums here; nothing else costs
// an expert. A pure cost model with reusable accumulators: no clock, no allocation per layer.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "hwmodels/gpu_cost_model.h"
#include "hwmodels/precision.h"
#include "sim/engine/time.h"
#include "sim/serving/quantization_policy.h"

namespace moesim {

// How a rank's experts of one layer are launched, and the shape of one expert (a rank's shard of it).
struct ExpertCostShape {
  bool grouped =
      true;  // one grouped GEMM pair per weight format (deployment.engine), else one FFN per expert
  std::int64_t hidden = 0;
  std::int64_t inter = 0;       // a rank's intermediate columns (expert_inter / expert_tp)
  std::int64_t max_tokens = 0;  // per-expert FFN times are memoised up to this count
};

// The (token, expert) pairs of `n` that micro-batch A carries under two-batch overlap, A taking `half_a` of
// the step's tokens (all of them without overlap: half_a = 1).
[[nodiscard]] inline std::int32_t micro_batch_a(std::int32_t n, double half_a) {
  return half_a == 1.0 ? n : static_cast<std::int32_t>(round_half_away(double(n) * half_a));
}

class ExpertCost final {
 public:
  // `precisions`: every precision a copy may have (the routed experts' and, under quantisation, each
  // class's); `dequant`: the multiplier on a launch's time at each precision (quantisation's dequant_factor).
  ExpertCost(const GpuCostModel& gpu, const ExpertCostShape& shape, int ranks, int max_experts_per_rank,
             std::span<const Precision> precisions, const std::array<double, kPrecisionCount>& dequant);

  // Starts a layer: every rank's accumulators at zero.
  void begin_layer();
  // One copy on `rank`: `a` and `b` (token, expert) pairs in micro-batch A and B (b = 0 without two-batch
  // overlap), weights of `bytes` (the rank's shard) at precision `p`. A `late` copy's weights are still on
  // their way (a tier miss, or a prefetch not yet landed): the engine launches it after the others.
  void add_copy(int rank, Precision p, std::int32_t a, std::int32_t b, double bytes, bool late = false);
  // Copies already summed per rank (binned routing, grouped engines): `touched` experts with `pairs` in one
  // micro-batch, at precision `p`, `bytes` each.
  void add_sums(int rank, int half, Precision p, std::int32_t touched, double pairs, double bytes);
  // Costs every rank's launches of the layer.
  void finish_layer();

  [[nodiscard]] Duration half_time(int rank, int half) const { return half_[idx(rank, half)]; }
  [[nodiscard]] Duration time(int rank) const { return half_[idx(rank, 0)] + half_[idx(rank, 1)]; }
  // Of time(rank): the launches of copies that were not late (they run while the late ones load).
  [[nodiscard]] Duration ready_time(int rank) const {
    return time(rank) - late_[static_cast<std::size_t>(rank)];
  }
  // The launches of the late copies (grouped engines), or the FFN of the copy registered by note_late_ffn.
  [[nodiscard]] Duration late_time(int rank) const { return late_[static_cast<std::size_t>(rank)]; }
  [[nodiscard]] double pairs(int rank) const { return pairs_[static_cast<std::size_t>(rank)]; }
  // Expert copies with tokens in micro-batch `half` on `rank` (launched experts, every format).
  [[nodiscard]] std::int32_t touched(int rank, int half) const { return rank_touched_[idx(rank, half)]; }
  // Weight bytes read by the layer's launches on `rank`: each copy's once per launch that runs it (so once
  // per micro-batch it has tokens in, under two-batch overlap).
  [[nodiscard]] double weight_bytes(int rank) const { return bytes_[static_cast<std::size_t>(rank)]; }
  [[nodiscard]] bool grouped() const { return shape_.grouped; }

  // One expert's FFN at `tokens` and precision p, as a per-expert engine runs it (one of a loop of launches).
  [[nodiscard]] Duration expert_ffn(std::int64_t tokens, Precision p) const;
  // One grouped launch of `experts` experts with `pairs` routed pairs at precision p (memoised).
  [[nodiscard]] Duration grouped(std::int32_t experts, double pairs, Precision p) const;

  // The grouped-launch memo by (precision, experts, tokens): a direct-mapped table, one row of kRow slots per
  // (precision, expert count), tokens modulo the row. A slot packs the tokens (low 24 bits) and the time in
  // ps (high 40 bits, up to 1.09 s) into one word, so the replicas of a pool share one memo from any thread:
  // a word is read whole, and a hit returns what the cost model gives, whoever stored it.
  struct GroupedMemo {
    static constexpr std::size_t kRow = 8192;
    GroupedMemo(std::size_t rows_per_precision, std::size_t precisions)
        : rows(rows_per_precision), slots(rows_per_precision * precisions * kRow) {}
    std::size_t rows;
    std::vector<std::atomic<std::uint64_t>> slots;
  };
  [[nodiscard]] std::shared_ptr<GroupedMemo> memo() const { return memo_; }
  // Takes the memo of an ExpertCost with the same shape, precisions and cost model.
  void share_memo(std::shared_ptr<GroupedMemo> memo);

 private:
  [[nodiscard]] std::size_t idx(int rank, int half) const {
    return 2 * static_cast<std::size_t>(rank) + static_cast<std::size_t>(half);
  }
  // Accumulator of one launch: [rank][half][precision slot][late].
  [[nodiscard]] std::size_t group(int rank, int half, std::size_t slot, bool late) const {
    return ((static_cast<std::size_t>(rank) * 2 + static_cast<std::size_t>(half)) * slots_ + slot) * 2 +
           (late ? 1 : 0);
  }
  [[nodiscard]] Duration ffn_costed(std::int64_t tokens, Precision p) const;

  const GpuCostModel& gpu_;
  ExpertCostShape shape_;
  int ranks_;
  std::size_t slots_;                                   // precisions in use
  std::array<std::int8_t, kPrecisionCount> slot_of_{};  // precision -> slot (-1: not in use)
  std::array<Precision, kPrecisionCount> precision_of_{};
  std::array<double, kPrecisionCount> dequant_{};
  std::shared_ptr<GroupedMemo> memo_;
  static constexpr Duration kUncosted = Duration::from_ps(-1);
  mutable std::vector<Duration> ffn_;  // [slot][tokens], kUncosted until first asked
  // Per layer, reused.
  std::vector<std::int32_t> touched_;       // [group]
  std::vector<double> group_pairs_;         // [group]
  std::vector<Duration> half_;              // [rank][half]
  std::vector<std::int32_t> rank_touched_;  // [rank][half]
  std::vector<Duration> late_;              // [rank]
  std::vector<double> pairs_;               // [rank]
  std::vector<double> bytes_;               // [rank]
};

}  // namespace moesim
