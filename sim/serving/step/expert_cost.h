// The one expert-cost function of a serving step (docs/architecture.md "The step as parts"): what a layer's
// routed experts cost each expert-parallel rank, as the engine launches them. Every routing path (exact
// per-expert counts, per-GPU bin sums, per-copy tiers and precisions) hands its copies or sums here; nothing
// else costs an expert. A pure cost model with reusable accumulators: no clock, no allocation per layer.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "hwmodels/expert_kernel_family.h"
#include "hwmodels/gpu_cost_model.h"
#include "hwmodels/precision.h"
#include "sim/engine/time.h"
#include "sim/serving/experts/quantization_policy.h"

namespace moesim {

// How a rank's experts of one layer are launched, and the shape of one expert (a rank's shard of it).
struct ExpertCostShape {
  bool grouped =
      true;  // one grouped GEMM pair per weight format (deployment.engine), else one FFN per expert
  std::int64_t hidden = 0;
  std::int64_t inter = 0;       // a rank's intermediate columns (expert_inter / expert_tp)
  std::int64_t max_tokens = 0;  // per-expert FFN times are memoised up to this count
  // The grouped kernel the engine launches: its time relative to the fit by rows per expert.
  ExpertKernelFamily family = ExpertKernelFamily::kCutlassGrouped;
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
  void add_copy(int rank, Precision p, std::int32_t a, std::int32_t b, double bytes, bool late = false) {
    Rank& r = rank_[static_cast<std::size_t>(rank)];
    r.pairs += a + b;
    r.bytes += bytes * ((a > 0 ? 1 : 0) + (b > 0 ? 1 : 0));
    r.touched[0] += a > 0 ? 1 : 0;
    r.touched[1] += b > 0 ? 1 : 0;
    if (!shape_.grouped) {  // one launch per expert and micro-batch
      r.half[0] += expert_ffn(a, p);
      if (b > 0) r.half[1] += expert_ffn(b, p);
      return;
    }
    any_late_ = any_late_ || late;
    Launch* l = &launch_[launch(rank, 0, slot_of(p), late)];
    if (a > 0) {
      ++l->experts;
      l->pairs += a;
    }
    if (b > 0) {
      any_b_ = true;
      l += 2 * slots_;  // the same format's launch of micro-batch B
      ++l->experts;
      l->pairs += b;
    }
  }
  // Copies already summed per rank (binned routing, grouped engines): `touched` experts with `pairs` in one
  // micro-batch, at precision `p`, `bytes` each.
  void add_sums(int rank, int half, Precision p, std::int32_t touched, double pairs, double bytes) {
    Rank& r = rank_[static_cast<std::size_t>(rank)];
    r.pairs += pairs;
    r.bytes += bytes * touched;
    r.touched[half] += touched;
    any_b_ = any_b_ || half == 1;
    Launch& l = launch_[launch(rank, half, slot_of(p), false)];
    l.experts += touched;
    l.pairs += pairs;
  }
  // Costs every rank's launches of the layer.
  void finish_layer();

  [[nodiscard]] Duration half_time(int rank, int half) const { return of(rank).half[half]; }
  [[nodiscard]] Duration time(int rank) const { return of(rank).half[0] + of(rank).half[1]; }
  // Of time(rank): the launches of copies that were not late (they run while the late ones load).
  [[nodiscard]] Duration ready_time(int rank) const { return time(rank) - of(rank).late; }
  // The launches of the late copies (grouped engines; a per-expert loop runs each copy as it lands).
  [[nodiscard]] Duration late_time(int rank) const { return of(rank).late; }
  [[nodiscard]] double pairs(int rank) const { return of(rank).pairs; }
  // Expert copies with tokens in micro-batch `half` on `rank` (launched experts, every format).
  [[nodiscard]] std::int32_t touched(int rank, int half) const { return of(rank).touched[half]; }
  // Weight bytes read by the layer's launches on `rank`: each copy's once per launch that runs it (so once
  // per micro-batch it has tokens in, under two-batch overlap).
  [[nodiscard]] double weight_bytes(int rank) const { return of(rank).bytes; }
  [[nodiscard]] bool grouped() const { return shape_.grouped; }

  // One expert's FFN at `tokens` and precision p, as a per-expert engine runs it (one of a loop of launches).
  [[nodiscard]] Duration expert_ffn(std::int64_t tokens, Precision p) const;
  // One grouped launch of `experts` experts with `pairs` routed pairs at precision p (memoised).
  [[nodiscard]] Duration grouped(std::int32_t experts, double pairs, Precision p) const;

  // The grouped-launch memo by (precision, experts, tokens): a direct-mapped table, one row of kRow slots per
  // (precision, expert count), tokens modulo the row. A slot packs the tokens (low 24 bits) and the time in
  // ps (high 40 bits, up to 1.09 s) into one word, so the replicas of a pool share one memo from any thread:
  // a word is read whole (std::atomic_ref), and a hit returns what the cost model gives, whoever stored it.
  // A row holds every token count a launch of a large EP group sees (an EP256 rank's expert takes ~17k
  // pairs of a mixed step, and its count moves by hundreds from step to step: 8,192 slots kept almost
  // nothing). The table is an anonymous mapping, so the OS commits only the pages of the counts that occur.
  // Not calloc: once a table has been freed, glibc raises its mmap threshold and serves the next one (up to
  // 32 MiB) from the heap, clearing every byte, which cost 7% of a search's time over thousands of short
  // runs.
  struct GroupedMemo {
    static constexpr std::size_t kRow = std::size_t{1} << 17;
    GroupedMemo(std::size_t rows_per_precision, std::size_t precisions);
    [[nodiscard]] std::atomic_ref<std::uint64_t> at(std::size_t i) const {
      return std::atomic_ref<std::uint64_t>(words.get()[i]);
    }
    struct Unmap {
      std::size_t bytes;
      void operator()(std::uint64_t* p) const;
    };
    std::size_t rows;
    std::size_t size;
    std::unique_ptr<std::uint64_t, Unmap> words;
  };
  [[nodiscard]] std::shared_ptr<GroupedMemo> memo() const { return memo_; }
  // Takes the memo of an ExpertCost with the same shape, precisions and cost model.
  void share_memo(std::shared_ptr<GroupedMemo> memo);

 private:
  // One rank's layer: its micro-batches' expert time, the late launches' share, pairs, weight bytes read.
  struct Rank {
    Duration half[2];
    Duration late;
    double pairs;
    double bytes;
    std::int32_t touched[2];
  };
  // One grouped launch's accumulator: experts with tokens and their pairs.
  struct Launch {
    double pairs;
    std::int32_t experts;
  };
  [[nodiscard]] const Rank& of(int rank) const { return rank_[static_cast<std::size_t>(rank)]; }
  [[nodiscard]] std::size_t slot_of(Precision p) const {
    return static_cast<std::size_t>(slot_of_[static_cast<std::size_t>(p)]);
  }
  // [rank][half][precision slot][late]
  [[nodiscard]] std::size_t launch(int rank, int half, std::size_t slot, bool late) const {
    return ((static_cast<std::size_t>(rank) * 2 + static_cast<std::size_t>(half)) * slots_ + slot) * 2 +
           (late ? 1 : 0);
  }
  [[nodiscard]] Duration grouped_at(std::int32_t experts, double pairs, std::size_t slot) const;
  [[nodiscard]] Duration ffn_costed(std::int64_t tokens, Precision p) const;

  const GpuCostModel& gpu_;
  ExpertCostShape shape_;
  int ranks_;
  std::int64_t groups_;  // experts in a rank's weight tensor (max_experts_per_rank): the kernel's tile shape
  std::size_t slots_;    // precisions in use
  std::array<std::int8_t, kPrecisionCount> slot_of_{};  // precision -> slot (-1: not in use)
  std::array<Precision, kPrecisionCount> precision_of_{};
  std::array<double, kPrecisionCount> dequant_{};  // by slot
  std::shared_ptr<GroupedMemo> memo_;
  static constexpr Duration kUncosted = Duration::from_ps(-1);
  mutable std::vector<Duration> ffn_;  // [slot][tokens], kUncosted until first asked (empty until then)
  // Per layer, reused.
  std::vector<Rank> rank_;
  std::vector<Launch> launch_;
  bool any_late_ = false;
  bool any_b_ = false;           // a launch of micro-batch B has experts (two-batch overlap)
  bool launches_dirty_ = false;  // a layer began and has not been finished (its launches not zeroed)
};

}  // namespace moesim
