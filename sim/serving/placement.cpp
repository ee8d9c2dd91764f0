#include "sim/serving/placement.h"

#include <metis.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/engine/check.h"

namespace moesim {

Placement::Placement(int layers, int experts, int gpus, int slots_per_gpu)
    : layers_(layers), experts_(experts), gpus_(gpus), slots_per_gpu_(slots_per_gpu) {
  MOESIM_CHECK(layers >= 1 && experts >= 1 && gpus >= 1 && slots_per_gpu >= 1,
               "placement sizes must be positive");
  MOESIM_CHECK(gpus * slots_per_gpu >= experts, "fewer slots than experts");
  const auto l = static_cast<std::size_t>(layers);
  phy2log_.assign(l * static_cast<std::size_t>(slots()), 0);
  replicas_.assign(l * static_cast<std::size_t>(experts), 0);
  first_slot_.assign(l * static_cast<std::size_t>(experts + 1), 0);
  slot_list_.assign(l * static_cast<std::size_t>(slots()), 0);
}

void Placement::finalize() {
  const auto n_slots = static_cast<std::size_t>(slots());
  const auto n_exp = static_cast<std::size_t>(experts_);
  for (int l = 0; l < layers_; ++l) {
    const auto map = phy2log(l);
    int* cnt = replicas_.data() + expert_index(l, 0);
    int* first = first_slot_.data() + static_cast<std::size_t>(l) * (n_exp + 1);
    int* list = slot_list_.data() + static_cast<std::size_t>(l) * n_slots;
    std::fill(cnt, cnt + n_exp, 0);
    for (const int e : map) {
      MOESIM_CHECK(e >= 0 && e < experts_, "slot holds an unknown expert");
      ++cnt[e];
    }
    first[0] = 0;
    for (std::size_t e = 0; e < n_exp; ++e) {
      MOESIM_CHECK(cnt[e] >= 1, "every expert needs at least one slot");
      first[e + 1] = first[e] + cnt[e];
    }
    std::vector<int> fill(first, first + n_exp);  // rebalance-time path: allocation is fine
    for (std::size_t s = 0; s < n_slots; ++s) {
      list[fill[static_cast<std::size_t>(map[s])]++] = static_cast<int>(s);
    }
  }
}

std::span<const int> Placement::slots_of(int layer, int expert) const {
  const int* first =
      first_slot_.data() + static_cast<std::size_t>(layer) * static_cast<std::size_t>(experts_ + 1);
  const int* list = slot_list_.data() + slot_index(layer, 0);
  return {list + first[expert], static_cast<std::size_t>(first[expert + 1] - first[expert])};
}

int Placement::replicated_experts(int layer) const {
  const auto r = replicas(layer);
  return static_cast<int>(std::count_if(r.begin(), r.end(), [](int c) { return c > 1; }));
}

Placement contiguous_placement(int layers, int experts, int gpus) {
  MOESIM_CHECK(experts % gpus == 0, "GPU count must divide the expert count");
  Placement p(layers, experts, gpus, experts / gpus);
  for (int l = 0; l < layers; ++l) {
    auto map = p.mutable_phy2log(l);
    std::iota(map.begin(), map.end(), 0);
  }
  p.finalize();
  return p;
}

Placement round_robin_placement(int layers, int experts, int gpus) {
  MOESIM_CHECK(experts % gpus == 0, "GPU count must divide the expert count");
  const int per_gpu = experts / gpus;
  Placement p(layers, experts, gpus, per_gpu);
  for (int l = 0; l < layers; ++l) {
    auto map = p.mutable_phy2log(l);
    for (int g = 0; g < gpus; ++g) {
      for (int i = 0; i < per_gpu; ++i) map[static_cast<std::size_t>(g * per_gpu + i)] = g + i * gpus;
    }
  }
  p.finalize();
  return p;
}

void gpu_token_counts(const Placement& placement, int layer, std::span<const std::int32_t> counts,
                      std::span<std::int64_t> gpu_tokens) {
  std::fill(gpu_tokens.begin(), gpu_tokens.end(), 0);
  const auto reps = placement.replicas(layer);
  for (int e = 0; e < placement.experts(); ++e) {
    const auto slots = placement.slots_of(layer, e);
    const int c = reps[static_cast<std::size_t>(e)];
    for (std::size_t r = 0; r < slots.size(); ++r) {
      gpu_tokens[static_cast<std::size_t>(placement.gpu_of_slot(slots[r]))] +=
          replica_share(counts[static_cast<std::size_t>(e)], c, static_cast<int>(r));
    }
  }
}

// ---- Partitioning -----------------------------------------------------------------------------------

namespace {

// State of a partition under refinement: part of each expert, load per part, and conn[v][j] = sum of
// affinity between v and the experts currently in part j (so a move or swap is costed in O(1)).
class PartitionState {
 public:
  PartitionState(std::span<const double> load, std::span<const double> affinity, int parts,
                 std::vector<int> part)
      : load_(load),
        aff_(affinity),
        n_(static_cast<int>(load.size())),
        parts_(parts),
        part_(std::move(part)),
        part_load_(static_cast<std::size_t>(parts), 0.0),
        part_size_(static_cast<std::size_t>(parts), 0),
        conn_(static_cast<std::size_t>(n_) * static_cast<std::size_t>(parts), 0.0) {
    for (int v = 0; v < n_; ++v) {
      part_load_[pi(part_[static_cast<std::size_t>(v)])] += load_[static_cast<std::size_t>(v)];
      ++part_size_[pi(part_[static_cast<std::size_t>(v)])];
      for (int u = 0; u < n_; ++u) {
        if (u != v) conn(v, part_[static_cast<std::size_t>(u)]) += w(v, u);
      }
    }
  }
  [[nodiscard]] double w(int a, int b) const {
    return aff_[static_cast<std::size_t>(a) * static_cast<std::size_t>(n_) + static_cast<std::size_t>(b)];
  }
  double& conn(int v, int j) {
    return conn_[static_cast<std::size_t>(v) * static_cast<std::size_t>(parts_) +
                 static_cast<std::size_t>(j)];
  }
  [[nodiscard]] int part(int v) const { return part_[static_cast<std::size_t>(v)]; }
  [[nodiscard]] double part_load(int j) const { return part_load_[pi(j)]; }
  [[nodiscard]] int part_size(int j) const { return part_size_[pi(j)]; }
  [[nodiscard]] double load(int v) const { return load_[static_cast<std::size_t>(v)]; }
  [[nodiscard]] int size() const { return n_; }
  [[nodiscard]] int parts() const { return parts_; }
  [[nodiscard]] const std::vector<int>& parts_of() const { return part_; }

  // Cut reduction if v moves to part b.
  double move_gain(int v, int b) { return conn(v, b) - conn(v, part(v)); }
  // Cut reduction if u and v (in different parts) swap parts.
  double swap_gain(int u, int v) {
    const int a = part(u);
    const int b = part(v);
    return conn(u, b) - conn(u, a) + conn(v, a) - conn(v, b) - 2.0 * w(u, v);
  }
  void move(int v, int b) {
    const int a = part(v);
    for (int u = 0; u < n_; ++u) {
      if (u == v) continue;
      conn(u, a) -= w(u, v);
      conn(u, b) += w(u, v);
    }
    part_load_[pi(a)] -= load(v);
    part_load_[pi(b)] += load(v);
    --part_size_[pi(a)];
    ++part_size_[pi(b)];
    part_[static_cast<std::size_t>(v)] = b;
  }

 private:
  static std::size_t pi(int j) { return static_cast<std::size_t>(j); }
  std::span<const double> load_;
  std::span<const double> aff_;
  int n_;
  int parts_;
  std::vector<int> part_;
  std::vector<double> part_load_;
  std::vector<int> part_size_;
  std::vector<double> conn_;
};

std::vector<int> metis_proposal(std::span<const double> load, std::span<const double> affinity, int gpus,
                                const PartitionSpec& spec) {
  const int n = static_cast<int>(load.size());
  std::vector<int> part(static_cast<std::size_t>(n), 0);
  if (gpus == 1) return part;
  const double total = std::accumulate(load.begin(), load.end(), 0.0);
  double max_aff = 0;
  for (const double a : affinity) max_aff = std::max(max_aff, a);
  // Integer weights for METIS: loads scaled to ~1e6 in total, edges to at most 1000 (32-bit sums stay safe).
  std::vector<idx_t> xadj{0};
  std::vector<idx_t> adjncy;
  std::vector<idx_t> adjwgt;
  std::vector<idx_t> vwgt;
  for (int v = 0; v < n; ++v) {
    const double lv = total > 0 ? load[static_cast<std::size_t>(v)] / total : 1.0 / n;
    vwgt.push_back(static_cast<idx_t>(std::llround(lv * 1e6)) + 1);
    vwgt.push_back(1);
    for (int u = 0; u < n; ++u) {
      if (u == v || max_aff <= 0) continue;
      const double a =
          affinity[static_cast<std::size_t>(v) * static_cast<std::size_t>(n) + static_cast<std::size_t>(u)];
      const auto wt = static_cast<idx_t>(std::llround(a / max_aff * 1000.0));
      if (wt <= 0) continue;
      adjncy.push_back(u);
      adjwgt.push_back(wt);
    }
    xadj.push_back(static_cast<idx_t>(adjncy.size()));
  }
  idx_t nvtxs = n;
  idx_t ncon = 2;
  idx_t nparts = gpus;
  idx_t objval = 0;
  std::vector<real_t> ubvec{static_cast<real_t>(spec.load_tolerance), 1.01F};
  std::vector<idx_t> out(static_cast<std::size_t>(n), 0);
  idx_t options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(options);
  options[METIS_OPTION_SEED] = spec.seed;
  options[METIS_OPTION_NUMBERING] = 0;
  const int rc = METIS_PartGraphKway(&nvtxs, &ncon, xadj.data(), adjncy.data(), vwgt.data(), nullptr,
                                     adjwgt.empty() ? nullptr : adjwgt.data(), &nparts, nullptr, ubvec.data(),
                                     options, &objval, out.data());
  if (rc != METIS_OK) {
    for (int v = 0; v < n; ++v) part[static_cast<std::size_t>(v)] = v % gpus;  // fall back to round-robin
    return part;
  }
  for (int v = 0; v < n; ++v)
    part[static_cast<std::size_t>(v)] = static_cast<int>(out[static_cast<std::size_t>(v)]);
  return part;
}

// Moves experts from over-full to under-full parts until every part holds exactly `size` experts;
// each move is the one with the least cut increase, ties to the one that best evens the two loads.
void repair_counts(PartitionState& st, int size) {
  for (;;) {
    int over = -1;
    int under = -1;
    for (int j = 0; j < st.parts(); ++j) {
      if (st.part_size(j) > size && over < 0) over = j;
      if (st.part_size(j) < size && (under < 0 || st.part_load(j) < st.part_load(under))) under = j;
    }
    if (over < 0) return;
    int best = -1;
    double best_gain = 0;
    double best_spread = 0;
    for (int v = 0; v < st.size(); ++v) {
      if (st.part(v) != over) continue;
      const double gain = st.move_gain(v, under);
      const double spread = std::abs((st.part_load(over) - st.load(v)) - (st.part_load(under) + st.load(v)));
      if (best < 0 || gain > best_gain + 1e-12 || (gain > best_gain - 1e-12 && spread < best_spread)) {
        best = v;
        best_gain = gain;
        best_spread = spread;
      }
    }
    st.move(best, under);
  }
}

double max_part_load(const PartitionState& st) {
  double m = 0;
  for (int j = 0; j < st.parts(); ++j) m = std::max(m, st.part_load(j));
  return m;
}

// Swaps between the heaviest and lightest parts while that lowers the heavier of the two, until every
// part is within `limit`; among useful swaps, the one that loses the least cut.
void balance_loads(PartitionState& st, double limit) {
  for (int iter = 0; iter < 4 * st.size(); ++iter) {
    int hi = 0;
    int lo = 0;
    for (int j = 1; j < st.parts(); ++j) {
      if (st.part_load(j) > st.part_load(hi)) hi = j;
      if (st.part_load(j) < st.part_load(lo)) lo = j;
    }
    if (st.part_load(hi) <= limit || hi == lo) return;
    int bu = -1;
    int bv = -1;
    double best_gain = 0;
    double best_peak = st.part_load(hi);
    for (int u = 0; u < st.size(); ++u) {
      if (st.part(u) != hi) continue;
      for (int v = 0; v < st.size(); ++v) {
        if (st.part(v) != lo) continue;
        const double d = st.load(u) - st.load(v);
        if (d <= 0) continue;
        const double peak = std::max(st.part_load(hi) - d, st.part_load(lo) + d);
        if (peak >= st.part_load(hi) - 1e-12) continue;
        const double gain = st.swap_gain(u, v);
        const bool fits = peak <= limit;
        const bool best_fits = best_peak <= limit;
        if (bu < 0 || (fits && !best_fits) ||
            (fits == best_fits && (fits ? gain > best_gain : peak < best_peak))) {
          bu = u;
          bv = v;
          best_gain = gain;
          best_peak = peak;
        }
      }
    }
    if (bu < 0) return;
    const int a = st.part(bu);
    const int b = st.part(bv);
    st.move(bu, b);
    st.move(bv, a);
  }
}

// Best-improvement pairwise swaps that lower the cut and keep both parts within `limit`.
void refine_cut(PartitionState& st, double limit, int passes) {
  for (int pass = 0; pass < passes; ++pass) {
    bool improved = false;
    for (int u = 0; u < st.size(); ++u) {
      int best_v = -1;
      double best_gain = 1e-12;
      const int a = st.part(u);
      for (int v = 0; v < st.size(); ++v) {
        const int b = st.part(v);
        if (b == a) continue;
        const double d = st.load(u) - st.load(v);
        const double la = st.part_load(a) - d;
        const double lb = st.part_load(b) + d;
        const bool ok = (la <= limit || la <= st.part_load(a)) && (lb <= limit || lb <= st.part_load(b));
        if (!ok) continue;
        const double gain = st.swap_gain(u, v);
        if (gain > best_gain) {
          best_gain = gain;
          best_v = v;
        }
      }
      if (best_v >= 0) {
        const int b = st.part(best_v);
        st.move(u, b);
        st.move(best_v, a);
        improved = true;
      }
    }
    if (!improved) return;
  }
}

}  // namespace

void partition_layer(std::span<const double> load, std::span<const double> affinity, int gpus,
                     const PartitionSpec& spec, std::span<int> slot_expert) {
  const int n = static_cast<int>(load.size());
  MOESIM_CHECK(n % gpus == 0, "GPU count must divide the expert count");
  MOESIM_CHECK(affinity.size() == static_cast<std::size_t>(n) * static_cast<std::size_t>(n),
               "affinity is E x E");
  MOESIM_CHECK(slot_expert.size() == static_cast<std::size_t>(n), "one slot per expert");
  const int size = n / gpus;
  PartitionState st(load, affinity, gpus, metis_proposal(load, affinity, gpus, spec));
  repair_counts(st, size);
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / gpus;
  const double limit = spec.load_tolerance * mean;
  balance_loads(st, limit);
  refine_cut(st, std::max(limit, max_part_load(st)), spec.refine_passes);
  std::vector<int> fill(static_cast<std::size_t>(gpus), 0);
  for (int v = 0; v < n; ++v) {
    const int j = st.part(v);
    slot_expert[static_cast<std::size_t>(j * size + fill[static_cast<std::size_t>(j)]++)] = v;
  }
}

double cut_weight(std::span<const double> affinity, std::span<const int> slot_expert, int slots_per_gpu) {
  const std::size_t n = slot_expert.size();
  double cut = 0;
  for (std::size_t s = 0; s < n; ++s) {
    for (std::size_t t = s + 1; t < n; ++t) {
      if (s / static_cast<std::size_t>(slots_per_gpu) == t / static_cast<std::size_t>(slots_per_gpu))
        continue;
      cut +=
          affinity[static_cast<std::size_t>(slot_expert[s]) * n + static_cast<std::size_t>(slot_expert[t])];
    }
  }
  return cut;
}

void coactivation_affinity(const CoactivationModel& model, int layer, std::span<const double> probs,
                           int top_k, std::span<double> affinity) {
  const auto n = static_cast<std::size_t>(model.experts());
  MOESIM_CHECK(affinity.size() == n * n, "affinity is E x E");
  std::fill(affinity.begin(), affinity.end(), 0.0);
  const double k2 = static_cast<double>(top_k) * static_cast<double>(top_k - 1);
  const double r2 = model.rho() * model.rho();
  for (int g = 0; g < model.groups(); ++g) {
    const auto mem = model.members(layer, g);
    double mass = 0;
    for (const int e : mem) mass += probs[static_cast<std::size_t>(e)];
    if (mass <= 0) continue;
    for (const int a : mem) {
      for (const int b : mem) {
        if (a == b) continue;
        affinity[static_cast<std::size_t>(a) * n + static_cast<std::size_t>(b)] =
            k2 * r2 * probs[static_cast<std::size_t>(a)] * probs[static_cast<std::size_t>(b)] / mass;
      }
    }
  }
}

Placement coactivation_placement(const CoactivationModel& model, std::span<const double> probs, int top_k,
                                 int gpus, const PartitionSpec& spec) {
  const int n = model.experts();
  MOESIM_CHECK(n % gpus == 0, "GPU count must divide the expert count");
  Placement p(model.layers(), n, gpus, n / gpus);
  std::vector<double> affinity(static_cast<std::size_t>(n) * static_cast<std::size_t>(n));
  for (int l = 0; l < model.layers(); ++l) {
    const auto row =
        probs.subspan(static_cast<std::size_t>(l) * static_cast<std::size_t>(n), static_cast<std::size_t>(n));
    coactivation_affinity(model, l, row, top_k, affinity);
    partition_layer(row, affinity, gpus, spec, p.mutable_phy2log(l));
  }
  p.finalize();
  return p;
}

// ---- EPLB -------------------------------------------------------------------------------------------

namespace {

// Greedy balanced packing of n weighted items into `packs` packs of n / packs items: heaviest item first
// (stable order on ties), into the lightest pack that still has room (lowest index on ties).
void balanced_packing(std::span<const double> w, int packs, std::span<int> pack, std::span<int> rank) {
  const int n = static_cast<int>(w.size());
  const int per_pack = n / packs;
  if (per_pack == 1) {
    for (int i = 0; i < n; ++i) {
      pack[static_cast<std::size_t>(i)] = i;
      rank[static_cast<std::size_t>(i)] = 0;
    }
    return;
  }
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return w[static_cast<std::size_t>(a)] > w[static_cast<std::size_t>(b)];
  });
  std::vector<double> pack_w(static_cast<std::size_t>(packs), 0.0);
  std::vector<int> pack_n(static_cast<std::size_t>(packs), 0);
  for (const int item : order) {
    int best = -1;
    for (int p = 0; p < packs; ++p) {
      if (pack_n[static_cast<std::size_t>(p)] >= per_pack) continue;
      if (best < 0 || pack_w[static_cast<std::size_t>(p)] < pack_w[static_cast<std::size_t>(best)]) best = p;
    }
    pack[static_cast<std::size_t>(item)] = best;
    rank[static_cast<std::size_t>(item)] = pack_n[static_cast<std::size_t>(best)]++;
    pack_w[static_cast<std::size_t>(best)] += w[static_cast<std::size_t>(item)];
  }
}

// Adds replicas one at a time to the expert with the highest load per replica (lowest index on ties).
void replicate(std::span<const double> w, int phys, std::span<int> phy2log, std::span<int> phy_rank,
               std::span<int> count) {
  const int n = static_cast<int>(w.size());
  for (int i = 0; i < n; ++i) {
    phy2log[static_cast<std::size_t>(i)] = i;
    phy_rank[static_cast<std::size_t>(i)] = 0;
    count[static_cast<std::size_t>(i)] = 1;
  }
  for (int i = n; i < phys; ++i) {
    int best = 0;
    for (int e = 1; e < n; ++e) {
      if (w[static_cast<std::size_t>(e)] / count[static_cast<std::size_t>(e)] >
          w[static_cast<std::size_t>(best)] / count[static_cast<std::size_t>(best)]) {
        best = e;
      }
    }
    phy2log[static_cast<std::size_t>(i)] = best;
    phy_rank[static_cast<std::size_t>(i)] = count[static_cast<std::size_t>(best)]++;
  }
}

void eplb_layer(std::span<const double> w, const EplbSpec& s, int groups, int nodes, std::span<int> out) {
  const int n = static_cast<int>(w.size());
  const int group_size = n / groups;
  const int groups_per_node = groups / nodes;
  const int per_node_log = n / nodes;
  const int per_node_phy = s.physical_slots / nodes;
  const int gpus_per_node = s.gpus / nodes;
  const int per_gpu = s.physical_slots / s.gpus;
  auto z = [](int x) { return static_cast<std::size_t>(x); };
  // 1. Groups onto nodes.
  std::vector<double> group_w(z(groups), 0.0);
  for (int e = 0; e < n; ++e) group_w[z(e / group_size)] += w[z(e)];
  std::vector<int> gpack(z(groups));
  std::vector<int> grank(z(groups));
  balanced_packing(group_w, nodes, gpack, grank);
  // mlog: experts renumbered node by node; mlog2log[m] is the logical expert at mlog position m.
  std::vector<int> mlog2log(z(n));
  for (int e = 0; e < n; ++e) {
    const int g = e / group_size;
    mlog2log[z((gpack[z(g)] * groups_per_node + grank[z(g)]) * group_size + e % group_size)] = e;
  }
  std::vector<double> node_w(z(per_node_log));
  std::vector<int> phy2mlog(z(per_node_phy));
  std::vector<int> phy_rank(z(per_node_phy));
  std::vector<int> mcount(z(per_node_log));
  std::vector<double> phy_w(z(per_node_phy));
  std::vector<int> pack(z(per_node_phy));
  std::vector<int> rank(z(per_node_phy));
  for (int node = 0; node < nodes; ++node) {
    // 2. Replicas inside the node.
    for (int i = 0; i < per_node_log; ++i) node_w[z(i)] = w[z(mlog2log[z(node * per_node_log + i)])];
    replicate(node_w, per_node_phy, phy2mlog, phy_rank, mcount);
    // 3. Replicas onto the node's GPUs, each replica carrying load / replica count.
    for (int i = 0; i < per_node_phy; ++i) {
      phy_w[z(i)] = node_w[z(phy2mlog[z(i)])] / mcount[z(phy2mlog[z(i)])];
    }
    balanced_packing(phy_w, gpus_per_node, pack, rank);
    for (int i = 0; i < per_node_phy; ++i) {
      const int slot = node * per_node_phy + pack[z(i)] * per_gpu + rank[z(i)];
      out[z(slot)] = mlog2log[z(node * per_node_log + phy2mlog[z(i)])];
    }
  }
}

}  // namespace

Placement eplb_placement(std::span<const double> weight, int layers, int experts, const EplbSpec& spec) {
  MOESIM_CHECK(spec.gpus >= 1 && spec.nodes >= 1 && spec.gpus % spec.nodes == 0,
               "GPUs must be a multiple of nodes");
  MOESIM_CHECK(spec.physical_slots >= experts && spec.physical_slots % spec.gpus == 0,
               "physical slots must be a multiple of the GPU count and at least the expert count");
  MOESIM_CHECK(spec.groups >= 1 && experts % spec.groups == 0, "expert groups must divide the expert count");
  MOESIM_CHECK(weight.size() == static_cast<std::size_t>(layers) * static_cast<std::size_t>(experts),
               "weight is layers x experts");
  const bool hierarchical = !spec.force_global && spec.groups % spec.nodes == 0;
  const int groups = hierarchical ? spec.groups : 1;
  const int nodes = hierarchical ? spec.nodes : 1;
  if (hierarchical) {
    MOESIM_CHECK(spec.physical_slots % spec.nodes == 0 && experts % spec.nodes == 0,
                 "slots must split over nodes");
  }
  Placement p(layers, experts, spec.gpus, spec.physical_slots / spec.gpus);
  for (int l = 0; l < layers; ++l) {
    eplb_layer(weight.subspan(static_cast<std::size_t>(l) * static_cast<std::size_t>(experts),
                              static_cast<std::size_t>(experts)),
               spec, groups, nodes, p.mutable_phy2log(l));
  }
  p.finalize();
  return p;
}

// ---- Measuring --------------------------------------------------------------------------------------

PlacementMeter::PlacementMeter(int gpus, int groups)
    : load_(static_cast<std::size_t>(gpus)),
      touch_(static_cast<std::size_t>(gpus)),
      scratch_(touch_scratch_size(std::max(groups, 1), gpus)) {}

PlacementQuality PlacementMeter::measure(const Placement& placement, int layer, std::span<const double> probs,
                                         int top_k, const CoactivationModel* model) {
  MOESIM_CHECK(static_cast<std::size_t>(placement.gpus()) == load_.size(),
               "meter sized for another GPU count");
  const SlotMap map = placement.slot_map(layer);
  std::fill(load_.begin(), load_.end(), 0.0);
  for (std::size_t s = 0; s < map.slot_expert.size(); ++s) {
    const auto e = static_cast<std::size_t>(map.slot_expert[s]);
    load_[s / static_cast<std::size_t>(map.slots_per_bin)] += probs[e] / map.replicas[e];
  }
  const double mean = std::accumulate(load_.begin(), load_.end(), 0.0) / static_cast<double>(load_.size());
  const double peak = *std::max_element(load_.begin(), load_.end());
  if (model != nullptr) {
    MOESIM_CHECK(scratch_.size() >= touch_scratch_size(model->groups(), placement.gpus()),
                 "meter sized for fewer groups");
    touch_fractions_coactivated(*model, layer, probs, map, top_k, scratch_, touch_);
  } else {
    touch_fractions_independent(probs, map, top_k, touch_);
  }
  return {.load_imbalance = mean > 0 ? peak / mean : 0.0,
          .token_copies = std::accumulate(touch_.begin(), touch_.end(), 0.0)};
}

}  // namespace moesim
