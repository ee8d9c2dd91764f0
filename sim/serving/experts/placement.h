// Expert placement: which GPU holds which copy of which expert, per MoE layer, and the policies that
// choose it (contiguous, round-robin, co-activation graph partition with METIS, EPLB-style replication).
// Policies are pure functions of loads and co-activation; the step planner reads the result through
// spans (slot -> expert, expert -> slots) without allocating.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "workloads/coactivation.h"

namespace moesim {

// Per layer, `slots` physical expert slots; slot s sits on GPU s / slots_per_gpu. Every logical expert
// has at least one slot; an expert with c slots (replicas) has its tokens split evenly over them. A slot
// may be vacant (kVacant: it serves no expert, e.g. on a lost GPU): replicas and slots_of count and list
// the live slots only.
class Placement final {
 public:
  static constexpr int kVacant = -1;
  Placement(int layers, int experts, int gpus, int slots_per_gpu);

  [[nodiscard]] int layers() const { return layers_; }
  [[nodiscard]] int experts() const { return experts_; }
  [[nodiscard]] int gpus() const { return gpus_; }
  [[nodiscard]] int slots_per_gpu() const { return slots_per_gpu_; }
  [[nodiscard]] int slots() const { return gpus_ * slots_per_gpu_; }
  [[nodiscard]] int gpu_of_slot(int slot) const { return slot / slots_per_gpu_; }

  // Slot -> logical expert ("phy2log" in EPLB's terms), kVacant for a vacant slot.
  [[nodiscard]] std::span<const int> phy2log(int layer) const {
    return {phy2log_.data() + slot_index(layer, 0), static_cast<std::size_t>(slots())};
  }
  // Edit, then call finalize() before reading replicas or slots_of.
  [[nodiscard]] std::span<int> mutable_phy2log(int layer) {
    return {phy2log_.data() + slot_index(layer, 0), static_cast<std::size_t>(slots())};
  }
  // Rebuilds replica counts and expert -> slots; checks that every expert has a live slot.
  void finalize();

  // Live replica count per logical expert ("logcnt").
  [[nodiscard]] std::span<const int> replicas(int layer) const {
    return {replicas_.data() + expert_index(layer, 0), static_cast<std::size_t>(experts_)};
  }
  // Live slots holding `expert`, ascending ("log2phy" without padding).
  [[nodiscard]] std::span<const int> slots_of(int layer, int expert) const {
    const int* first =
        first_slot_.data() + static_cast<std::size_t>(layer) * static_cast<std::size_t>(experts_ + 1);
    const int* list = slot_list_.data() + slot_index(layer, 0);
    return {list + first[expert], static_cast<std::size_t>(first[expert + 1] - first[expert])};
  }
  [[nodiscard]] SlotMap slot_map(int layer) const {
    return {.slot_expert = phy2log(layer), .slots_per_bin = slots_per_gpu_, .replicas = replicas(layer)};
  }
  // Logical experts of `layer` with more than one slot.
  [[nodiscard]] int replicated_experts(int layer) const;

 private:
  [[nodiscard]] std::size_t slot_index(int layer, int slot) const {
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(slots()) +
           static_cast<std::size_t>(slot);
  }
  [[nodiscard]] std::size_t expert_index(int layer, int e) const {
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(experts_) + static_cast<std::size_t>(e);
  }
  int layers_;
  int experts_;
  int gpus_;
  int slots_per_gpu_;
  std::vector<int> phy2log_;     // [layer][slot]
  std::vector<int> replicas_;    // [layer][expert]
  std::vector<int> first_slot_;  // [layer][expert + 1] offsets into slot_list_ (per-layer CSR)
  std::vector<int> slot_list_;   // [layer][slot]
};

// `p` with every slot of the GPUs flagged in `lost` (one flag per GPU) vacant in every layer: each expert's
// copies are its slots on the other GPUs, which must hold at least one (experts_covered). Allocates (at a
// failure, not per step).
[[nodiscard]] Placement without_gpus(const Placement& p, std::span<const char> lost);

// Expert e on GPU e / (experts / gpus): consecutive ids together (the default of most frameworks).
[[nodiscard]] Placement contiguous_placement(int layers, int experts, int gpus);
// Expert e on GPU e % gpus.
[[nodiscard]] Placement round_robin_placement(int layers, int experts, int gpus);

// Integer split of an expert's count over its replicas: replica `rank` of `replicas` gets
// floor(count / replicas) plus one if rank < count % replicas (sums back to count).
[[nodiscard]] constexpr std::int32_t replica_share(std::int32_t count, int replicas, int rank) {
  return count / replicas + (rank < count % replicas ? 1 : 0);
}
// Per-GPU routed (token, expert) pairs of one layer from per-expert counts, with replica_share.
// O(slots); `gpu_tokens` has one entry per GPU.
void gpu_token_counts(const Placement& placement, int layer, std::span<const std::int32_t> counts,
                      std::span<std::int64_t> gpu_tokens);

// ---- Co-activation graph partitioning (METIS) -------------------------------------------------------
struct PartitionSpec {
  double load_tolerance = 1.05;  // max GPU load / mean GPU load allowed while cutting edges
  int seed = 1;                  // METIS_OPTION_SEED
  int refine_passes = 8;         // cut-refinement swap passes per METIS proposal (see partition_layer)
};

// Partitions one layer's experts over `gpus` GPUs with equal expert counts, balanced `load` (per-expert
// weights, e.g. EWMA of routed tokens) and minimal cut of `affinity` (E x E row-major, symmetric: only the
// upper triangle is read; an entry is how often the pair is co-selected beyond independence). METIS
// proposes on a contracted affinity graph, twice (balancing expert counts; balancing load and counts), then
// for each proposal a greedy repair makes expert counts exact, swaps between the heaviest and lightest
// GPUs bring loads within load_tolerance x mean where they can, and pairwise-swap refinement lowers the cut
// while every GPU stays within load_tolerance x mean (or, where balancing could not get there, below the
// peak it reached). The better result is kept: within the tolerance before above it, then the lower peak,
// then (peaks within 1% of the mean GPU load) the lower cut. Writes slot -> expert (GPU j = slots
// j*E/G ..). Allocates (a rebalance-time policy, not per step).
void partition_layer(std::span<const double> load, std::span<const double> affinity, int gpus,
                     const PartitionSpec& spec, std::span<int> slot_expert);

// Sum of affinity over pairs on different GPUs (the quantity partition_layer minimises).
[[nodiscard]] double cut_weight(std::span<const double> affinity, std::span<const int> slot_expert,
                                int slots_per_gpu);

// Affinity of one layer from the co-activation model: the part of the expected co-selections per token
// that depends on grouping, k(k-1) rho^2 p_a p_b / P_g for a, b in the same group g, else 0 (the rest of
// CoactivationModel::pair_rate is (1 - rho^2) k(k-1) p_a p_b, a product of loads that a load-balanced
// partition cannot change much). `affinity` is E x E.
void coactivation_affinity(const CoactivationModel& model, int layer, std::span<const double> probs,
                           int top_k, std::span<double> affinity);

// One partition per layer with loads probs (layers x experts) and affinity from the model.
[[nodiscard]] Placement coactivation_placement(const CoactivationModel& model, std::span<const double> probs,
                                               int top_k, int gpus, const PartitionSpec& spec);

// ---- EPLB-style replication (github.com/deepseek-ai/EPLB, eplb.py; COMPONENT_FIGURES.md section 3) ----
struct EplbSpec {
  int physical_slots = 0;  // multiple of gpus, >= experts
  int groups = 1;          // expert groups (node-limited routing); must divide experts
  int nodes = 1;
  int gpus = 1;               // multiple of nodes
  bool force_global = false;  // use the global policy even when groups % nodes == 0
};

// Hierarchical policy when groups % nodes == 0 (pack groups on nodes, replicate inside nodes, pack
// replicas on GPUs), else (or force_global) the same with one group and one node. Greedy steps break ties
// by index order, as the reference does. `weight` is layers x experts (estimated load per expert).
[[nodiscard]] Placement eplb_placement(std::span<const double> weight, int layers, int experts,
                                       const EplbSpec& spec);

// ---- Measuring a placement ---------------------------------------------------------------------------
struct PlacementQuality {
  double load_imbalance = 0;  // max over GPUs / mean of expected routed pairs (1 = balanced)
  double token_copies = 0;    // expected GPUs a token is sent to (dedup'd dispatch copies per token)
};

// Expected quality of one layer's placement for routing probabilities `probs` (per-slot marginals) and,
// when `model` is given, its co-activation (else independent routing). Owns its buffers: measure() does
// not allocate.
class PlacementMeter final {
 public:
  PlacementMeter(int gpus, int groups);
  [[nodiscard]] PlacementQuality measure(const Placement& placement, int layer, std::span<const double> probs,
                                         int top_k, const CoactivationModel* model);
  [[nodiscard]] std::span<const double> gpu_load_share() const { return load_; }
  [[nodiscard]] std::span<const double> touch() const { return touch_; }

 private:
  std::vector<double> load_;
  std::vector<double> touch_;
  std::vector<double> scratch_;
};

}  // namespace moesim
