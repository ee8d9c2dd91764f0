#include "sim/serving/step/routing_draw.h"

#include <algorithm>

#include "sim/engine/check.h"

namespace moesim {

RoutingDraw::RoutingDraw(int layers, int experts, int top_k, int ranks, Rng rng,
                         const CoactivationModel* coactivation)
    : layers_(layers),
      experts_(experts),
      top_k_(top_k),
      ranks_(ranks),
      rng_(rng),
      sampler_(experts),
      tables_(std::make_shared<Tables>()),
      coact_(coactivation),
      counts_(static_cast<std::size_t>(experts)) {
  tables_->layers.resize(static_cast<std::size_t>(layers));
  if (coact_ != nullptr) {
    coact_sampler_ = std::make_unique<CoactivationSampler>(*coact_);
    coact_routing_.resize(static_cast<std::size_t>(layers));
    group_tokens_.resize(static_cast<std::size_t>(coact_->groups()));
  }
}

void RoutingDraw::prepare(int layer, std::span<const double> probs) {
  const auto l = static_cast<std::size_t>(layer);
  if (coact_ != nullptr) {  // the co-activation sampler replaces the routing tables
    coact_routing_[l] = CoactivationSampler::prepare(*coact_, layer, probs);
    if (!tables_->layers[l].order.empty()) return;
  }
  own_tables().layers[l] = RoutingSampler::prepare(probs, top_k_);
}

RoutingDraw::Tables& RoutingDraw::own_tables() {
  if (tables_.use_count() > 1) tables_ = std::make_shared<Tables>(*tables_);  // copy on write
  return *tables_;
}

void RoutingDraw::share_tables(std::shared_ptr<Tables> tables, const Placement& placement,
                               std::span<const int> single_gpu) {
  MOESIM_CHECK(tables->layers.size() == tables_->layers.size(),
               "routing tables shared between draws that differ");
  tables_ = std::move(tables);
  replicated_.clear();
  if (binned()) {
    MOESIM_CHECK(size_bins(placement, single_gpu) && replicated_.size() == tables_->bins.size(),
                 "routing tables shared between draws that differ");
  }
  bin_laws_.assign(tables_->bins.size() * kLawSlots, RoutingSampler::BinLaw{});
}

bool RoutingDraw::size_bins(const Placement& placement, std::span<const int> single_gpu) {
  replicated_.clear();
  std::size_t most = 0;
  for (int l = 0; l < placement.layers(); ++l) {
    std::vector<int>& extra = replicated_.emplace_back();
    for (int e = 0; e < experts_; ++e) {
      if (single_gpu[static_cast<std::size_t>(l * experts_ + e)] < 0) extra.push_back(e);
    }
    most = std::max(most, extra.size());
  }
  const std::size_t nb = static_cast<std::size_t>(ranks_) + most;
  if (nb > static_cast<std::size_t>(experts_)) {  // the sampler's scratch holds a normal per bin
    replicated_.clear();
    return false;
  }
  bin_pairs_.resize(nb);
  bin_hot_.assign(nb * static_cast<std::size_t>(placement.layers()), 0);
  bin_hot_for_.assign(static_cast<std::size_t>(placement.layers()), RoutingSampler::kNoSplit);
  bin_cold_.resize(nb);
  bin_sums_.resize(nb);
  return true;
}

// Each expert's bin: its rank when it has one copy, else a bin of its own after the ranks' (replicated_).
void RoutingDraw::bin(const Placement& placement, std::span<const int> single_gpu, bool allowed) {
  Tables& tables = own_tables();
  tables.bins.clear();
  replicated_.clear();
  if (allowed && coact_ == nullptr && ranks_ > 1 && ranks_ <= experts_ && size_bins(placement, single_gpu)) {
    std::vector<int> bin_of(static_cast<std::size_t>(experts_));
    for (int l = 0; l < placement.layers(); ++l) {
      int extra = 0;
      for (int e = 0; e < experts_; ++e) {
        const int gpu = single_gpu[static_cast<std::size_t>(l * experts_ + e)];
        bin_of[static_cast<std::size_t>(e)] = gpu >= 0 ? gpu : ranks_ + extra++;
      }
      tables.bins.push_back(
          RoutingSampler::bin(tables.layers[static_cast<std::size_t>(l)], bin_of, ranks_ + extra));
    }
  }
  bin_laws_.assign(tables.bins.size() * kLawSlots, RoutingSampler::BinLaw{});
}

int RoutingDraw::begin_step(std::int64_t tokens, bool tbo, double half_a, int moe_layers) {
  half_a_ = half_a;
  tbo_ = tbo;
  const std::int64_t step = steps_++;
  if (!binned()) return -1;
  // The bin sums derive their laws from the moment grid: its points around this step's count are filled
  // here, on the caller's thread, before a worker thread reads them.
  if (!tbo) {
    for (std::size_t l = 0; l < tables_->bins.size(); ++l)
      RoutingSampler::fill_moment_grid(tables_->layers[l], tables_->bins[l], tokens);
  }
  return static_cast<int>(step % moe_layers);
}

std::span<std::int32_t> RoutingDraw::draw_counts(int layer, std::span<const double> probs,
                                                 std::int64_t tokens) {
  const auto l = static_cast<std::size_t>(layer);
  if (coact_ != nullptr) {
    coact_sampler_->sample(layer, coact_routing_[l], probs, tokens, top_k_, rng_, counts_, group_tokens_);
  } else {
    sampler_.sample(tables_->layers[l], tokens, rng_, counts_);
  }
  return counts_;
}

std::span<std::int32_t> RoutingDraw::draw_counts_from(std::span<const double> probs, std::int64_t tokens) {
  MOESIM_CHECK(coact_ == nullptr, "a step law drawn under co-activation");
  sampler_.sample(RoutingSampler::prepare(probs, top_k_), tokens, rng_, counts_);
  return counts_;
}

const std::vector<RoutingSampler::Tally>& RoutingDraw::cold_tally() {
  if (tally_half_a_ == half_a_) return tally_;
  tally_half_a_ = half_a_;
  tally_.resize(RoutingSampler::kTallyCounts);
  for (std::size_t c = 0; c < tally_.size(); ++c) {
    const auto n = static_cast<std::int32_t>(c);
    const std::int32_t a = first_half(n);
    const auto bit = [](bool on) { return std::uint64_t{on ? 1U : 0U}; };
    tally_[c] = {.a = std::uint64_t(n) | std::uint64_t(a) << 32,
                 .b = bit(n > 0) | bit(a > 0) << 21 | bit(n - a > 0) << 42};
  }
  return tally_;
}

void RoutingDraw::draw_sums(int layer, std::int64_t tokens, bool prefill, const Placement& placement,
                            ExpertCost& cost, Precision p, double bytes) {
  const auto l = static_cast<std::size_t>(layer);
  const RoutingSampler::Layer& table = tables_->layers[l];
  const RoutingSampler::Bins& b = tables_->bins[l];
  const auto nb = static_cast<std::size_t>(b.count);
  // An expert with several copies is a bin of its own: its tokens split evenly over its copies (EPLB).
  const auto split_copies = [&](auto&& bin_count) {
    const std::vector<int>& extra = replicated_[l];
    const auto replicas = placement.replicas(layer);
    for (std::size_t x = 0; x < extra.size(); ++x) {
      const int e = extra[x];
      const auto n = static_cast<std::int32_t>(bin_count(static_cast<std::size_t>(ranks_) + x));
      const auto copies = placement.slots_of(layer, e);
      for (std::size_t r = 0; r < copies.size(); ++r) {
        const std::int32_t share =
            replica_share(n, replicas[static_cast<std::size_t>(e)], static_cast<int>(r));
        if (share <= 0) continue;
        const std::int32_t a = first_half(share);
        cost.add_copy(placement.gpu_of_slot(copies[r]), p, a, share - a, bytes);
      }
    }
  };
  if (!tbo_ && RoutingSampler::use_bin_sums(table, b, tokens)) {
    // One launch per rank: its pairs and touched experts are all the cost reads, so the cold experts come as
    // per-rank sums without a draw each. A decode batch's token count recurs (it moves by a few sequences per
    // step): its law is kept. With prefill, the layer's law is derived afresh (step_law_ serves every layer).
    step_law_.tokens = -1;
    RoutingSampler::BinLaw& law =
        prefill ? step_law_ : bin_laws_[l * kLawSlots + static_cast<std::size_t>(tokens) % kLawSlots];
    sampler_.sample_bin_sums(table, b, tokens, rng_, law, std::span(bin_pairs_).first(nb),
                             std::span(bin_sums_).first(nb),
                             std::span(bin_hot_).subspan(l * bin_pairs_.size(), nb), bin_hot_for_[l]);
    for (int g = 0; g < ranks_; ++g) {
      const auto gi = static_cast<std::size_t>(g);
      const std::int64_t pairs = bin_pairs_[gi] + bin_sums_[gi].pairs;
      cost.add_sums(g, 0, p, law.bin_hot[gi] + bin_sums_[gi].touched, double(pairs), bytes);
    }
    split_copies([&](std::size_t x) { return bin_pairs_[x] + bin_sums_[x].pairs; });
    return;
  }
  // Each layer keeps its split of hot experts over the ranks (redone when the count of hot ones moves). The
  // cold experts' sums come with the draw (bin_cold_, fields of cold_tally()). A hot expert (mean of at least
  // RoutingSampler::kColdMean tokens) has tokens in each micro-batch.
  const std::span<std::int32_t> layer_hot = std::span(bin_hot_).subspan(l * bin_pairs_.size(), nb);
  sampler_.sample_binned(table, b, tokens, rng_, counts_, std::span(bin_pairs_).first(nb), layer_hot,
                         cold_tally(), std::span(bin_cold_).first(nb), bin_hot_for_[l]);
  constexpr std::uint64_t kLow32 = 0xffffffffU;
  constexpr std::uint64_t kLow21 = (std::uint64_t{1} << 21) - 1;
  for (int g = 0; g < ranks_; ++g) {
    const auto gi = static_cast<std::size_t>(g);
    const std::int64_t n = bin_pairs_[gi];
    const std::int32_t h = layer_hot[gi];
    const RoutingSampler::Tally& c = bin_cold_[gi];
    const std::int64_t first_hot = tbo_ ? round_half_away(double(n) * half_a_) : n;
    const auto pairs = n + static_cast<std::int64_t>(c.a & kLow32);
    const auto first = first_hot + static_cast<std::int64_t>(c.a >> 32);
    const auto touched_a = (first_hot > 0 ? h : 0) + static_cast<std::int32_t>((c.b >> 21) & kLow21);
    const auto touched_b = (n - first_hot > 0 ? h : 0) + static_cast<std::int32_t>(c.b >> 42);
    cost.add_sums(g, 0, p, touched_a, double(first), bytes);
    if (touched_b > 0) cost.add_sums(g, 1, p, touched_b, double(pairs - first), bytes);
  }
  split_copies(
      [&](std::size_t x) { return bin_pairs_[x] + static_cast<std::int64_t>(bin_cold_[x].a & kLow32); });
}

}  // namespace moesim
