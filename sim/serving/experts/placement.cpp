#include "sim/serving/experts/placement.h"

#include <metis.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>

#include "sim/engine/check.h"

namespace moesim {

Placement::Placement(int layers, int experts, int gpus, int slots_per_gpu)
    : layers_(layers), experts_(experts), gpus_(gpus), slots_per_gpu_(slots_per_gpu) {
  // A dense model (no routed experts) has the empty placement: no MoE layer, no expert, no slot.
  const bool dense = layers == 0 && experts == 0 && slots_per_gpu == 0;
  MOESIM_CHECK(gpus >= 1 && (dense || (layers >= 1 && experts >= 1 && slots_per_gpu >= 1)),
               "placement sizes must be positive (or all zero for a dense model)");
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
      MOESIM_CHECK(e == kVacant || (e >= 0 && e < experts_), "slot holds an unknown expert");
      if (e != kVacant) ++cnt[e];
    }
    first[0] = 0;
    for (std::size_t e = 0; e < n_exp; ++e) {
      MOESIM_CHECK(cnt[e] >= 1, "every expert needs at least one live slot");
      first[e + 1] = first[e] + cnt[e];
    }
    std::vector<int> fill(first, first + n_exp);  // rebalance-time path: allocation is fine
    for (std::size_t s = 0; s < n_slots; ++s) {
      if (map[s] != kVacant) list[fill[static_cast<std::size_t>(map[s])]++] = static_cast<int>(s);
    }
  }
}

Placement without_gpus(const Placement& p, std::span<const char> lost) {
  MOESIM_CHECK(lost.size() == static_cast<std::size_t>(p.gpus()), "one flag per GPU of the placement");
  Placement out = p;
  for (int l = 0; l < out.layers(); ++l) {
    const auto map = out.mutable_phy2log(l);
    for (std::size_t s = 0; s < map.size(); ++s) {
      if (lost[static_cast<std::size_t>(out.gpu_of_slot(static_cast<int>(s)))] != 0)
        map[s] = Placement::kVacant;
    }
  }
  out.finalize();
  return out;
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
//
// partition_layer runs once per MoE layer at start and at every rebalance, so its cost matters. METIS 5.1
// does not coarsen a graph of a few hundred vertices for k-way partitioning (CoarsenTo is 30 x parts), and
// its multi-constraint initial bisection (load and count) on the full graph took ~20-130 M instructions per
// DeepSeek-V3 layer, most when the load tolerance cannot be met (an expert above the mean GPU load).
// Instead:
// 1. the affinity matrix is read once into a sparse graph (co-activation affinity is block-diagonal);
// 2. graphs of more than 64 experts are contracted by heavy-edge matching (each coarse vertex at most half
//    a GPU's experts and half its mean load), so METIS partitions ~2 x GPUs vertices;
// 3. two METIS proposals: count-balanced (single constraint, k-way) and load-and-count balanced (recursive
//    bisection, with the load bound raised to what the experts allow), each made exact in counts, balanced
//    and refined on the full graph by the swap searches below;
// 4. the better of the two is kept (see partition_layer); the second is skipped when the first is perfect.

namespace {

std::size_t ix(int i) { return static_cast<std::size_t>(i); }

// The off-diagonal non-zero entries of a symmetric E x E affinity matrix as a graph (CSR, each edge in both
// rows, neighbours ascending). Only the upper triangle is read.
struct AffinityGraph {
  std::vector<int> first;   // E + 1 offsets into nbr and wgt
  std::vector<int> nbr;     // neighbours of v: nbr[first[v] .. first[v + 1])
  std::vector<double> wgt;  // affinity between v and nbr
  double min_w = 0;         // smallest entry, or 0 when none is negative
  double max_row = 0;       // largest sum of |affinity| over a row (scale of the connection sums)
};

AffinityGraph affinity_graph(std::span<const double> affinity, int n) {
  struct Edge {
    int a;
    int b;
    double w;
  };
  std::vector<Edge> edges;
  std::vector<int> degree(ix(n), 0);
  for (int a = 0; a < n; ++a) {
    const double* row = affinity.data() + ix(a) * ix(n);
    for (int b = a + 1; b < n;) {
      if (b + 8 <= n) {  // skip eight zeros (+0.0 or -0.0) at a time
        std::uint64_t bits = 0;
        for (int k = 0; k < 8; ++k) bits |= std::bit_cast<std::uint64_t>(row[b + k]);
        if ((bits << 1) == 0) {
          b += 8;
          continue;
        }
      }
      const int end = std::min(n, b + 8);
      for (; b < end; ++b) {
        if (row[b] == 0.0) continue;
        edges.push_back({a, b, row[b]});
        ++degree[ix(a)];
        ++degree[ix(b)];
      }
    }
  }
  AffinityGraph g;
  g.first.assign(ix(n) + 1, 0);
  for (int v = 0; v < n; ++v) g.first[ix(v) + 1] = g.first[ix(v)] + degree[ix(v)];
  g.nbr.resize(2 * edges.size());
  g.wgt.resize(2 * edges.size());
  std::vector<int> fill(g.first.begin(), g.first.end() - 1);
  std::vector<double> row_sum(ix(n), 0.0);
  // Edges come ordered by (a, b), a < b: row v gets its lower neighbours (as b) in ascending a before its
  // upper neighbours (as a) in ascending b, so every row is sorted.
  for (const Edge& e : edges) {
    for (const auto& [v, u] : {std::pair{e.a, e.b}, std::pair{e.b, e.a}}) {
      const auto k = ix(fill[ix(v)]++);
      g.nbr[k] = u;
      g.wgt[k] = e.w;
      row_sum[ix(v)] += std::abs(e.w);
    }
    g.min_w = std::min(g.min_w, e.w);
  }
  for (const double s : row_sum) g.max_row = std::max(g.max_row, s);
  return g;
}

// A contraction of the affinity graph: coarse vertex of each expert, and per coarse vertex its share of
// the total load, its expert count and its edges (summed affinity to the other coarse vertices).
struct CoarseGraph {
  std::vector<int> of_expert;
  std::vector<double> load;
  std::vector<int> count;
  std::vector<int> first{0};
  std::vector<int> nbr;
  std::vector<double> wgt;
  [[nodiscard]] int size() const { return static_cast<int>(count.size()); }
};

// One round of heavy-edge matching (vertices in id order, each with its unmatched neighbour of largest
// affinity whose merge stays within max_count experts and max_load of load).
CoarseGraph match_once(const CoarseGraph& g, int max_count, double max_load) {
  const int n = g.size();
  std::vector<int> mate(ix(n), -1);
  for (int v = 0; v < n; ++v) {
    if (mate[ix(v)] >= 0) continue;
    int best = v;
    double best_w = 0;
    for (int k = g.first[ix(v)]; k < g.first[ix(v) + 1]; ++k) {
      const int u = g.nbr[ix(k)];
      if (mate[ix(u)] >= 0 || g.count[ix(u)] + g.count[ix(v)] > max_count ||
          g.load[ix(u)] + g.load[ix(v)] > max_load || g.wgt[ix(k)] <= best_w)
        continue;
      best = u;
      best_w = g.wgt[ix(k)];
    }
    mate[ix(v)] = best;
    mate[ix(best)] = v;
  }
  CoarseGraph c;
  std::vector<int> id(ix(n), -1);
  for (int v = 0; v < n; ++v) {
    if (id[ix(v)] >= 0) continue;
    const int m = mate[ix(v)];
    id[ix(v)] = id[ix(m)] = c.size();
    c.load.push_back(g.load[ix(v)] + (m != v ? g.load[ix(m)] : 0.0));
    c.count.push_back(g.count[ix(v)] + (m != v ? g.count[ix(m)] : 0));
  }
  c.of_expert.resize(g.of_expert.size());
  for (std::size_t e = 0; e < g.of_expert.size(); ++e) c.of_expert[e] = id[ix(g.of_expert[e])];
  std::vector<int> slot(ix(c.size()), -1);  // position of coarse neighbour in the row being built
  for (int v = 0; v < n; ++v) {
    const int m = mate[ix(v)];
    if (m < v) continue;  // row built from the lower id of the pair
    const int row_start = static_cast<int>(c.nbr.size());
    const std::array<int, 2> pair{v, m};
    for (int i = 0; i < (m != v ? 2 : 1); ++i) {
      const int f = pair[ix(i)];
      for (int k = g.first[ix(f)]; k < g.first[ix(f) + 1]; ++k) {
        const int cu = id[ix(g.nbr[ix(k)])];
        if (cu == id[ix(v)]) continue;
        if (slot[ix(cu)] < row_start) {
          slot[ix(cu)] = static_cast<int>(c.nbr.size());
          c.nbr.push_back(cu);
          c.wgt.push_back(g.wgt[ix(k)]);
        } else {
          c.wgt[ix(slot[ix(cu)])] += g.wgt[ix(k)];
        }
      }
    }
    c.first.push_back(static_cast<int>(c.nbr.size()));
  }
  return c;
}

CoarseGraph contract(const AffinityGraph& graph, std::span<const double> load, int gpus) {
  const int n = static_cast<int>(load.size());
  const double total = std::accumulate(load.begin(), load.end(), 0.0);
  CoarseGraph g;
  g.of_expert.resize(ix(n));
  std::iota(g.of_expert.begin(), g.of_expert.end(), 0);
  g.load.resize(ix(n));
  for (int v = 0; v < n; ++v) g.load[ix(v)] = total > 0 ? load[ix(v)] / total : 1.0 / n;
  g.count.assign(ix(n), 1);
  g.first = graph.first;
  g.nbr = graph.nbr;
  g.wgt = graph.wgt;
  const int max_count = std::max(1, n / gpus / 2);
  const double max_load = 0.5 / gpus;
  // Small graphs (64 experts or fewer) go to METIS as they are: cheap at that size, and nothing is lost.
  while (n > 64 && g.size() > 2 * gpus) {
    CoarseGraph c = match_once(g, max_count, max_load);
    if (g.size() - c.size() < std::max(1, g.size() / 20)) break;  // fewer than 5% merged
    g = std::move(c);
  }
  return g;
}

enum class Balance {
  kCount,         // METIS balances expert counts only
  kLoadAndCount,  // both (multi-constraint recursive bisection)
};

// METIS proposal on the coarse graph, projected to experts. Integer weights: loads scaled to ~1e6 in
// total, counts as they are, edges to at most 1000 (32-bit sums stay safe). `load_ub` is the allowed max /
// mean part load.
std::vector<int> metis_proposal(const CoarseGraph& g, int gpus, Balance balance, double load_ub,
                                const PartitionSpec& spec) {
  const auto n_experts = g.of_expert.size();
  std::vector<int> part(n_experts, 0);
  if (gpus == 1) return part;
  const int n = g.size();
  double max_w = 0;
  for (const double w : g.wgt) max_w = std::max(max_w, w);
  idx_t ncon = balance == Balance::kCount ? 1 : 2;
  std::vector<idx_t> vwgt;
  for (int v = 0; v < n; ++v) {
    if (balance == Balance::kLoadAndCount)
      vwgt.push_back(static_cast<idx_t>(std::llround(g.load[ix(v)] * 1e6)) + 1);
    vwgt.push_back(g.count[ix(v)]);
  }
  std::vector<idx_t> xadj{0};
  std::vector<idx_t> adjncy;
  std::vector<idx_t> adjwgt;
  for (int v = 0; v < n; ++v) {
    for (int k = g.first[ix(v)]; k < g.first[ix(v) + 1] && max_w > 0; ++k) {
      const auto wt = static_cast<idx_t>(std::llround(g.wgt[ix(k)] / max_w * 1000.0));
      if (wt <= 0) continue;
      adjncy.push_back(g.nbr[ix(k)]);
      adjwgt.push_back(wt);
    }
    xadj.push_back(static_cast<idx_t>(adjncy.size()));
  }
  idx_t nvtxs = n;
  idx_t nparts = gpus;
  idx_t objval = 0;
  // Coarse vertices hold up to half a GPU's experts, so counts are balanced to 5% here and made exact later.
  std::vector<real_t> ubvec;
  if (balance == Balance::kLoadAndCount) ubvec.push_back(static_cast<real_t>(load_ub));
  ubvec.push_back(1.05F);
  std::vector<idx_t> out(ix(n), 0);
  idx_t options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(options);
  options[METIS_OPTION_SEED] = spec.seed;
  options[METIS_OPTION_NUMBERING] = 0;
  auto* const partition = balance == Balance::kCount ? METIS_PartGraphKway : METIS_PartGraphRecursive;
  const int rc = partition(&nvtxs, &ncon, xadj.data(), adjncy.data(), vwgt.data(), nullptr,
                           adjwgt.empty() ? nullptr : adjwgt.data(), &nparts, nullptr, ubvec.data(), options,
                           &objval, out.data());
  for (std::size_t e = 0; e < n_experts; ++e) {
    // Round-robin if METIS fails; repair_counts makes any proposal exact.
    part[e] = rc == METIS_OK ? static_cast<int>(out[ix(g.of_expert[e])]) : static_cast<int>(e) % gpus;
  }
  return part;
}

// Lower bound on the max / mean part load with `size` experts per part: the part holding the heaviest
// expert holds at least the size - 1 lightest others.
double peak_lower_bound(std::span<const double> load, int size) {
  std::vector<double> sorted(load.begin(), load.end());
  std::sort(sorted.begin(), sorted.end());
  const double total = std::accumulate(sorted.begin(), sorted.end(), 0.0);
  if (total <= 0) return 1.0;
  double peak = sorted.back();
  for (int i = 0; i < size - 1; ++i) peak += sorted[ix(i)];
  return peak / (total * size / static_cast<double>(load.size()));
}

// State of a partition under refinement: part of each expert, load and members (ascending) per part, and
// conn[v][j] = sum of affinity between v and the experts currently in part j (so a move or swap is costed
// in O(1) and applied in O(degree)). While tracked, bound[b][a] is an upper bound on conn[v][a] - conn[v][b]
// over the members v of b: how much any of them can gain by leaving b for a.
class PartitionState {
 public:
  PartitionState(std::span<const double> load, std::span<const double> affinity, const AffinityGraph& graph,
                 int parts, std::vector<int> initial)
      : load_(load),
        aff_(affinity),
        graph_(graph),
        n_(static_cast<int>(load.size())),
        parts_(parts),
        part_(std::move(initial)),
        part_load_(ix(parts), 0.0),
        members_(ix(parts)),
        conn_(ix(n_) * ix(parts), 0.0) {
    for (int v = 0; v < n_; ++v) {
      part_load_[ix(part(v))] += load_[ix(v)];
      members_[ix(part(v))].push_back(v);
      for (int k = graph_.first[ix(v)]; k < graph_.first[ix(v) + 1]; ++k) {
        conn(v, part(graph_.nbr[ix(k)])) += graph_.wgt[ix(k)];
      }
    }
  }
  double& conn(int v, int j) { return conn_[ix(v) * ix(parts_) + ix(j)]; }
  [[nodiscard]] int part(int v) const { return part_[ix(v)]; }
  [[nodiscard]] double part_load(int j) const { return part_load_[ix(j)]; }
  [[nodiscard]] int part_size(int j) const { return static_cast<int>(members_[ix(j)].size()); }
  [[nodiscard]] const std::vector<int>& members(int j) const { return members_[ix(j)]; }
  [[nodiscard]] double load(int v) const { return load_[ix(v)]; }
  [[nodiscard]] int size() const { return n_; }
  [[nodiscard]] int parts() const { return parts_; }
  [[nodiscard]] const AffinityGraph& graph() const { return graph_; }
  [[nodiscard]] double max_part_load() const {
    return *std::max_element(part_load_.begin(), part_load_.end());
  }
  // Sum of affinity over pairs in different parts.
  [[nodiscard]] double cut() const {
    double twice = 0;
    for (int v = 0; v < n_; ++v) {
      for (int k = graph_.first[ix(v)]; k < graph_.first[ix(v) + 1]; ++k) {
        if (part(graph_.nbr[ix(k)]) != part(v)) twice += graph_.wgt[ix(k)];
      }
    }
    return twice / 2;
  }

  // Affinity between u and v as the graph has it (upper triangle).
  [[nodiscard]] double w(int u, int v) const {
    return aff_[ix(std::min(u, v)) * ix(n_) + ix(std::max(u, v))];
  }
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
    for (int k = graph_.first[ix(v)]; k < graph_.first[ix(v) + 1]; ++k) {
      const int u = graph_.nbr[ix(k)];
      conn(u, a) -= graph_.wgt[ix(k)];
      conn(u, b) += graph_.wgt[ix(k)];
    }
    part_load_[ix(a)] -= load(v);
    part_load_[ix(b)] += load(v);
    auto& from = members_[ix(a)];
    from.erase(std::lower_bound(from.begin(), from.end(), v));
    auto& to = members_[ix(b)];
    to.insert(std::lower_bound(to.begin(), to.end(), v), v);
    part_[ix(v)] = b;
    if (bound_.empty()) return;
    // Only v and its neighbours changed conn or part.
    raise_bound(v);
    for (int k = graph_.first[ix(v)]; k < graph_.first[ix(v) + 1]; ++k) raise_bound(graph_.nbr[ix(k)]);
  }
  void swap(int u, int v) {
    const int a = part(u);
    move(u, part(v));
    move(v, a);
  }

  // Starts tracking bound[][] from the exact maxima (O(E x parts)).
  void reset_bounds() {
    bound_.assign(ix(parts_) * ix(parts_), -std::numeric_limits<double>::infinity());
    for (int v = 0; v < n_; ++v) raise_bound(v);
  }
  [[nodiscard]] double bound(int b, int a) const { return bound_[ix(b) * ix(parts_) + ix(a)]; }

 private:
  void raise_bound(int v) {
    const int p = part(v);
    double* row = bound_.data() + ix(p) * ix(parts_);
    const double own = conn(v, p);
    for (int j = 0; j < parts_; ++j) row[j] = std::max(row[j], conn(v, j) - own);
  }
  std::span<const double> load_;
  std::span<const double> aff_;
  const AffinityGraph& graph_;
  int n_;
  int parts_;
  std::vector<int> part_;
  std::vector<double> part_load_;
  std::vector<std::vector<int>> members_;
  std::vector<double> conn_;
  std::vector<double> bound_;  // [b][a], empty while not tracked
};

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
    for (const int v : st.members(over)) {
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

// Swaps between the heaviest and lightest parts while that lowers the heavier of the two, until every
// part is within `limit`: among swaps that bring both within it, the one that loses the least cut, else the
// one that lowers the heavier part most. Swapping u (heaviest part, load Lh) with v (lightest, Ll) moves
// d = load(u) - load(v); it helps when 0 < d < Lh - Ll, and fits when Lh - limit <= d <= limit - Ll, so the
// lightest part's members are sorted by load and only the partners in that window are costed.
void balance_loads(PartitionState& st, double limit) {
  std::vector<std::pair<double, int>> lo_members;  // (load, expert), ascending
  for (int iter = 0; iter < 4 * st.size(); ++iter) {
    int hi = 0;
    int lo = 0;
    for (int j = 1; j < st.parts(); ++j) {
      if (st.part_load(j) > st.part_load(hi)) hi = j;
      if (st.part_load(j) < st.part_load(lo)) lo = j;
    }
    const double lh = st.part_load(hi);
    const double ll = st.part_load(lo);
    if (lh <= limit || hi == lo) return;
    lo_members.clear();
    for (const int v : st.members(lo)) lo_members.emplace_back(st.load(v), v);
    std::sort(lo_members.begin(), lo_members.end());
    const auto at_least = [&](double x) {
      return std::lower_bound(lo_members.begin(), lo_members.end(), std::pair{x, -1});
    };
    const auto peak_of = [&](int u, int v) {
      return std::max(lh - (st.load(u) - st.load(v)), ll + (st.load(u) - st.load(v)));
    };
    const auto helps = [&](int u, int v) { return st.load(u) > st.load(v) && peak_of(u, v) < lh - 1e-12; };
    int bu = -1;
    int bv = -1;
    bool fits = false;
    double best_gain = 0;
    double best_peak = lh;
    // Slack on the window edges; every partner in it is checked exactly.
    const double eps = 1e-12 * (1.0 + lh);
    for (const int u : st.members(hi)) {
      const double lu = st.load(u);
      for (auto it = at_least(lu - (limit - ll) - eps);
           it != lo_members.end() && it->first <= lu - (lh - limit) + eps; ++it) {
        const int v = it->second;
        if (!helps(u, v) || peak_of(u, v) > limit) continue;
        const double gain = st.swap_gain(u, v);
        if (!fits || gain > best_gain) {
          fits = true;
          bu = u;
          bv = v;
          best_gain = gain;
        }
      }
      if (fits) continue;
      // The peak is lowest for d closest to (Lh - Ll) / 2: the partners around that load.
      const auto mid = at_least(lu - (lh - ll) / 2);
      for (auto it = mid == lo_members.begin() ? mid : mid - 1; it != lo_members.end() && it <= mid; ++it) {
        const int v = it->second;
        if (!helps(u, v) || peak_of(u, v) >= best_peak) continue;
        bu = u;
        bv = v;
        best_peak = peak_of(u, v);
      }
    }
    if (bu < 0) return;
    st.swap(bu, bv);
  }
}

// Best-improvement pairwise swaps that lower the cut and keep both parts within `limit`: for each expert
// u in turn, the swap with the largest gain (lowest partner id on ties). Swapping u (part a) with v (part b)
// gains leave(u) + conn[v][a] - conn[v][b] - 2 w(u, v): a part whose bound shows that none of its members
// can reach the best gain so far is skipped, and so is any member that cannot.
void refine_cut(PartitionState& st, double limit, int passes) {
  // Rounding slack between these bounds and a swap gain computed term by term (both are sums of a few
  // connection sums, each at most max_row).
  const double slack = 1e-12 * (1.0 + st.graph().max_row);
  const double edge_bound = -2.0 * st.graph().min_w;  // -2 w(u, v) <= this
  for (int pass = 0; pass < passes; ++pass) {
    st.reset_bounds();
    bool improved = false;
    for (int u = 0; u < st.size(); ++u) {
      int best_v = -1;
      double best_gain = 1e-12;
      const int a = st.part(u);
      const double own = st.conn(u, a);
      for (int b = 0; b < st.parts(); ++b) {
        const double leave = st.conn(u, b) - own;  // u's side of the gain
        if (b == a || leave + st.bound(b, a) + edge_bound + slack < best_gain) continue;
        for (const int v : st.members(b)) {
          if (leave + st.conn(v, a) - st.conn(v, b) + edge_bound + slack < best_gain) continue;
          const double d = st.load(u) - st.load(v);
          const double la = st.part_load(a) - d;
          const double lb = st.part_load(b) + d;
          if ((la > limit && la > st.part_load(a)) || (lb > limit && lb > st.part_load(b))) continue;
          const double gain = st.swap_gain(u, v);
          if (gain > best_gain || (gain == best_gain && best_v >= 0 && v < best_v)) {
            best_gain = gain;
            best_v = v;
          }
        }
      }
      if (best_v >= 0) {
        st.swap(u, best_v);
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
  MOESIM_CHECK(affinity.size() == ix(n) * ix(n), "affinity is E x E");
  MOESIM_CHECK(slot_expert.size() == ix(n), "one slot per expert");
  const int size = n / gpus;
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / gpus;
  const double limit = spec.load_tolerance * mean;
  const AffinityGraph graph = affinity_graph(affinity, n);
  const CoarseGraph coarse = contract(graph, load, gpus);
  // When no partition meets the tolerance (an expert hotter than the mean GPU load), METIS gets a load
  // bound it can meet; otherwise its multi-constraint balancing runs to its iteration limits.
  const double load_ub = std::max(spec.load_tolerance, 1.02 * peak_lower_bound(load, size));
  const double tiny = 1e-12 * (1.0 + graph.max_row);
  // A result within the tolerance beats one above it; two within it compare by cut; two above it compare
  // by peak, except that peaks within 1% of the mean GPU load count as equal and the cut decides (a tie
  // band: the two proposals often end a fraction of a percent apart in peak and several percent in cut).
  const auto better = [&](double peak, double cut, double other_peak, double other_cut) {
    const bool fits = peak <= limit;
    const bool other_fits = other_peak <= limit;
    if (fits != other_fits) return fits;
    if (!fits && std::abs(peak - other_peak) > 0.01 * mean) return peak < other_peak;
    return cut < other_cut;
  };
  double best_peak = 0;
  double best_cut = 0;
  bool have = false;
  for (const Balance balance : {Balance::kCount, Balance::kLoadAndCount}) {
    PartitionState st(load, affinity, graph, gpus, metis_proposal(coarse, gpus, balance, load_ub, spec));
    repair_counts(st, size);
    balance_loads(st, limit);
    refine_cut(st, std::max(limit, st.max_part_load()), spec.refine_passes);
    const double peak = st.max_part_load();
    const double cut = st.cut();
    if (!have || better(peak, cut, best_peak, best_cut)) {
      have = true;
      best_peak = peak;
      best_cut = cut;
      for (int j = 0; j < gpus; ++j) {
        const auto& mem = st.members(j);
        std::copy(mem.begin(), mem.end(), slot_expert.begin() + static_cast<std::ptrdiff_t>(j) * size);
      }
    }
    if (best_peak <= limit && best_cut <= tiny) break;  // within the tolerance and nothing cut
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
    if (map.slot_expert[s] == Placement::kVacant) continue;
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
