// Calibration of the All-to-All kernel families against the published tables of
// shared/reference/COMPONENT_FIGURES.md section 1: DeepEP normal (1.2), DeepEP low-latency (1.3, both
// tables) and TensorRT-LLM one-sided NVLink on GB200 NVL72 (1.6). Each row is rebuilt from its stated
// setup (tokens, hidden, top-k, experts, bytes per element, the scripts' byte accounting) and the
// model must land within 15% of the published time. CALIBRATION_FABRIC.md lists every row.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <vector>

#include "hwmodels/fabric.h"
#include "hwmodels/precision.h"

namespace moesim {
namespace {

constexpr double kHidden = 7168;
constexpr int kTopK = 8;
constexpr double kTolerance = 0.15;
// DeepEP scripts: FP8 dispatch = BF16 bytes x (1 + 4/128) / 2; combine is BF16.
constexpr double kFp8Token = kHidden * 2 * (1.0 + 4.0 / 128.0) / 2.0;
constexpr double kBf16Token = kHidden * 2;
// Low-latency script: per (token, expert) pair, FP8 payload + one FP32 scale per 128 channels + 16 B.
constexpr double kLowLatencyDispatchPair = kHidden + kHidden / 128 * 4 + 16;

// P(a top-k choice among `pool` equally likely experts touches a set of `held` of them)
// = 1 - C(pool - held, k) / C(pool, k).
double touch_probability(int pool, int held, int k) {
  double miss = 1.0;
  for (int i = 0; i < k; ++i) miss *= static_cast<double>(pool - held - i) / static_cast<double>(pool - i);
  return 1.0 - miss;
}

// Uniform traffic: every source sends the same to every destination (diagonal included: it stays
// on the GPU and costs nothing).
AllToAllTraffic uniform_traffic(int ranks, int per_node, double tokens_per_rank_pair,
                                double pairs_per_rank_pair, double tokens_per_node_pair,
                                double dispatch_bytes, double combine_bytes) {
  const int nodes = (ranks + per_node - 1) / per_node;
  const auto r = static_cast<std::size_t>(ranks);
  return AllToAllTraffic{
      .ranks = ranks,
      .ranks_per_node = per_node,
      .tokens_to_rank = std::vector<double>(r * r, tokens_per_rank_pair),
      .pairs_to_rank = std::vector<double>(r * r, pairs_per_rank_pair),
      .tokens_to_node = std::vector<double>(r * static_cast<std::size_t>(nodes), tokens_per_node_pair),
      .dispatch_bytes_per_token = dispatch_bytes,
      .combine_bytes_per_token = combine_bytes};
}

// H800 cluster of the DeepEP benchmarks: NVLink 400 GB/s bidirectional (200 per direction), one CX7
// 400 Gb/s NIC per GPU.
FabricSpec h800(int gpus) {
  return FabricSpec{.nodes = std::max(1, gpus / 8),
                    .gpus_per_node = 8,
                    .nvlink_bytes_per_s = 200e9,
                    .nic_bytes_per_s = 400e9 / 8};
}

// GB200 NVL72: one NVLink domain of 72 GPUs at 900 GB/s per direction.
FabricSpec gb200_nvl72() { return FabricSpec{.nodes = 1, .gpus_per_node = 72, .nvlink_bytes_per_s = 900e9}; }

struct NormalRow {
  int ep;
  double dispatch_gb_per_s;
  double combine_gb_per_s;
};

struct NormalCase {
  AllToAllTraffic traffic;
  double logical_tokens;  // what the script divides by the time: tokens received (intranode) or
                          // (token, node) pairs including the local node (internode, num_rdma_token_sent)
};

// test_intranode.py / test_internode.py: 4096 tokens per rank, 256 experts, top-8, expert groups =
// nodes, top-min(nodes, 4) groups per token.
NormalCase normal_case(int ep) {
  constexpr double kTokens = 4096;
  constexpr int kExperts = 256;
  const int nodes = std::max(1, ep / 8);
  const int per_node = std::min(ep, 8);
  const int groups = std::min(nodes, 4);
  const double p_group = static_cast<double>(groups) / nodes;
  const int pool = kExperts / nodes * groups;
  const double p_rank = p_group * touch_probability(pool, kExperts / ep, kTopK);
  const double p_node = p_group * touch_probability(pool, kExperts / nodes, kTopK);
  NormalCase c{.traffic = uniform_traffic(ep, per_node, kTokens * p_rank, kTokens * kTopK / ep,
                                          kTokens * p_node, kFp8Token, kBf16Token),
               .logical_tokens = nodes == 1 ? kTokens * ep * p_rank : kTokens * nodes * p_node};
  return c;
}

// COMPONENT_FIGURES.md 1.2, columns from 2025-04-22 (docs/legacy.md at HEAD).
constexpr std::array<NormalRow, 4> kNormalRows{{{8, 153, 158}, {16, 43, 43}, {32, 58, 57}, {64, 51, 50}}};

struct LatencyRow {
  int ep;
  double dispatch_us;
  double combine_us;
};
// COMPONENT_FIGURES.md 1.3: pure RDMA (original release) and after PR #173 (NVLink inside a node).
constexpr std::array<LatencyRow, 6> kPureRdmaRows{
    {{8, 163, 318}, {16, 173, 329}, {32, 182, 350}, {64, 186, 353}, {128, 192, 369}, {256, 194, 360}}};
constexpr std::array<LatencyRow, 6> kNvlinkRows{
    {{8, 77, 114}, {16, 118, 195}, {32, 155, 273}, {64, 173, 314}, {128, 192, 369}, {256, 194, 360}}};

// test_low_latency.py: 128 tokens per rank, top-8, near-uniform routing: each rank receives
// 128 * 8 / ep pairs from every rank.
AllToAllTraffic low_latency_traffic(int ep) {
  constexpr double kTokens = 128;
  const double pairs = kTokens * kTopK / ep;
  return uniform_traffic(ep, std::min(ep, 8), pairs, pairs, 0, kLowLatencyDispatchPair, kBf16Token);
}

// COMPONENT_FIGURES.md 1.6: batch per rank x (EP8, EP16, EP32, EP64) x (dispatch, combine), us.
constexpr std::array<int, 9> kBatches{1, 8, 32, 64, 128, 256, 512, 1024, 2048};
constexpr std::array<int, 4> kNvlEps{8, 16, 32, 64};
constexpr std::array<std::array<double, 8>, 9> kNvl72Us{{
    {18.9, 31.0, 18.8, 30.8, 19.8, 31.4, 27.8, 32.6},
    {17.6, 31.4, 18.9, 31.8, 19.4, 32.2, 20.4, 33.3},
    {18.2, 32.7, 20.2, 34.2, 21.1, 34.6, 23.1, 36.1},
    {22.3, 34.1, 24.1, 35.6, 26.2, 36.4, 28.8, 37.7},
    {31.7, 38.1, 34.6, 39.9, 37.8, 41.1, 41.6, 44.5},
    {50.8, 53.0, 54.8, 57.0, 61.5, 59.7, 65.3, 62.9},
    {89.5, 91.7, 97.1, 98.2, 109.6, 102.5, 115.7, 106.7},
    {166.3, 175.6, 181.2, 188.2, 197.5, 197.5, 209.4, 199.2},
    {311.8, 322.6, 343.3, 348.4, 373.7, 369.5, 399.2, 372.1},
}};

// Perfectly balanced router, BF16 both ways: each token goes to min(ep, top_k) distinct ranks.
AllToAllTraffic nvl72_traffic(int ep, int batch) {
  const double tokens = static_cast<double>(batch) * std::min(ep, kTopK) / ep;
  return uniform_traffic(ep, ep, tokens, tokens, 0, kBf16Token, kBf16Token);
}

double rel_error(Duration model, double published_us) { return model.us() / published_us - 1.0; }

}  // namespace

TEST_CASE("DeepEP normal kernels reproduce every row of the published H800 table within 15%") {
  for (const NormalRow& row : kNormalRows) {
    const Fabric fabric(h800(row.ep));
    const NormalCase c = normal_case(row.ep);
    const AllToAllCost cost = fabric.all_to_all(c.traffic, AllToAllMode::kHighThroughput);
    const double dispatch_us = c.logical_tokens * kFp8Token / (row.dispatch_gb_per_s * 1e9) * 1e6;
    const double combine_us = c.logical_tokens * kBf16Token / (row.combine_gb_per_s * 1e9) * 1e6;
    INFO("EP" << row.ep << " dispatch " << cost.dispatch.us() << " us vs " << dispatch_us << ", combine "
              << cost.combine.us() << " us vs " << combine_us);
    CHECK(std::abs(rel_error(cost.dispatch, dispatch_us)) < kTolerance);
    CHECK(std::abs(rel_error(cost.combine, combine_us)) < kTolerance);
  }
}

TEST_CASE("DeepEP normal kernels are NVLink-bound inside a node and at EP16, NIC-bound from EP32") {
  // Section 1.5 of the figures: at EP16 each rank forwards ~7/8 of 26.5k received tokens over NVLink
  // but sends only ~4k over its NIC; from EP32 on, the NIC carries 2.7-3.2 copies per token.
  for (const NormalRow& row : kNormalRows) {
    const AllToAllCost cost =
        Fabric(h800(row.ep)).all_to_all(normal_case(row.ep).traffic, AllToAllMode::kHighThroughput);
    INFO("EP" << row.ep);
    if (row.ep <= 16) {
      CHECK(cost.hot_link == LinkKind::kNvlinkOut);
    } else {
      CHECK((cost.hot_link == LinkKind::kNicOut || cost.hot_link == LinkKind::kNicIn));
    }
  }
}

TEST_CASE("DeepEP low-latency kernels over pure RDMA reproduce every published row within 15%") {
  for (const LatencyRow& row : kPureRdmaRows) {
    FabricSpec spec = h800(row.ep);
    spec.low_latency.intranode_over_nvlink = false;
    const Fabric fabric(spec);
    const AllToAllCost cost = fabric.all_to_all(low_latency_traffic(row.ep), AllToAllMode::kLowLatency);
    INFO("EP" << row.ep << " dispatch " << cost.dispatch.us() << " us, combine " << cost.combine.us()
              << " us");
    CHECK(std::abs(rel_error(cost.dispatch, row.dispatch_us)) < kTolerance);
    CHECK(std::abs(rel_error(cost.combine, row.combine_us)) < kTolerance);
  }
}

TEST_CASE("DeepEP low-latency kernels with NVLink inside a node reproduce every published row within 15%") {
  for (const LatencyRow& row : kNvlinkRows) {
    const Fabric fabric(h800(row.ep));
    const AllToAllCost cost = fabric.all_to_all(low_latency_traffic(row.ep), AllToAllMode::kLowLatency);
    INFO("EP" << row.ep << " dispatch " << cost.dispatch.us() << " us, combine " << cost.combine.us()
              << " us");
    CHECK(std::abs(rel_error(cost.dispatch, row.dispatch_us)) < kTolerance);
    CHECK(std::abs(rel_error(cost.combine, row.combine_us)) < kTolerance);
  }
}

TEST_CASE("the one-sided NVLink kernel on GB200 NVL72 reproduces the published table within 15%") {
  const Fabric fabric(gb200_nvl72());
  for (std::size_t b = 0; b < kBatches.size(); ++b) {
    for (std::size_t e = 0; e < kNvlEps.size(); ++e) {
      const AllToAllCost cost =
          fabric.all_to_all(nvl72_traffic(kNvlEps[e], kBatches[b]), AllToAllMode::kNvlinkDomain);
      const double dispatch_us = kNvl72Us[b][2 * e];
      const double combine_us = kNvl72Us[b][2 * e + 1];
      INFO("batch " << kBatches[b] << " EP" << kNvlEps[e] << " dispatch " << cost.dispatch.us() << " us vs "
                    << dispatch_us << ", combine " << cost.combine.us() << " us vs " << combine_us);
      // Batch 1 at EP64 (27.8 us) is slower than batch 8 (20.4 us) in the published table; no model
      // monotone in the batch can meet both within 15%, so that one cell gets 25%.
      const bool outlier = kBatches[b] == 1 && kNvlEps[e] == 64;
      CHECK(std::abs(rel_error(cost.dispatch, dispatch_us)) < (outlier ? 0.25 : kTolerance));
      CHECK(std::abs(rel_error(cost.combine, combine_us)) < kTolerance);
    }
  }
}

// Prints the model-vs-published rows of CALIBRATION_FABRIC.md: `test_hwmodels "[.table]"`.
TEST_CASE("calibration rows for CALIBRATION_FABRIC.md", "[.table]") {
  std::printf(
      "| table | EP | batch | dispatch model us | published us | err | combine model us | published us | err "
      "|\n");
  for (const NormalRow& row : kNormalRows) {
    const NormalCase c = normal_case(row.ep);
    const AllToAllCost cost = Fabric(h800(row.ep)).all_to_all(c.traffic, AllToAllMode::kHighThroughput);
    const double d = c.logical_tokens * kFp8Token / (row.dispatch_gb_per_s * 1e9) * 1e6;
    const double k = c.logical_tokens * kBf16Token / (row.combine_gb_per_s * 1e9) * 1e6;
    std::printf("| 1.2 normal | %d | 4096 | %.0f | %.0f | %+.1f%% | %.0f | %.0f | %+.1f%% |\n", row.ep,
                cost.dispatch.us(), d, 100 * rel_error(cost.dispatch, d), cost.combine.us(), k,
                100 * rel_error(cost.combine, k));
  }
  for (const bool nvl : {false, true}) {
    for (const LatencyRow& row : nvl ? kNvlinkRows : kPureRdmaRows) {
      FabricSpec spec = h800(row.ep);
      spec.low_latency.intranode_over_nvlink = nvl;
      const AllToAllCost cost =
          Fabric(spec).all_to_all(low_latency_traffic(row.ep), AllToAllMode::kLowLatency);
      std::printf("| 1.3 LL %s | %d | 128 | %.0f | %.0f | %+.1f%% | %.0f | %.0f | %+.1f%% |\n",
                  nvl ? "NVLink" : "RDMA", row.ep, cost.dispatch.us(), row.dispatch_us,
                  100 * rel_error(cost.dispatch, row.dispatch_us), cost.combine.us(), row.combine_us,
                  100 * rel_error(cost.combine, row.combine_us));
    }
  }
  const Fabric nvl72(gb200_nvl72());
  for (std::size_t b = 0; b < kBatches.size(); ++b) {
    for (std::size_t e = 0; e < kNvlEps.size(); ++e) {
      const AllToAllCost cost =
          nvl72.all_to_all(nvl72_traffic(kNvlEps[e], kBatches[b]), AllToAllMode::kNvlinkDomain);
      const double d = kNvl72Us[b][2 * e];
      const double k = kNvl72Us[b][2 * e + 1];
      std::printf("| 1.6 NVL72 | %d | %d | %.1f | %.1f | %+.1f%% | %.1f | %.1f | %+.1f%% |\n", kNvlEps[e],
                  kBatches[b], cost.dispatch.us(), d, 100 * rel_error(cost.dispatch, d), cost.combine.us(), k,
                  100 * rel_error(cost.combine, k));
    }
  }
}

TEST_CASE("the simulator sends dispatched tokens at the bytes the fitted tables were measured at") {
  // DeepEP's FP8 dispatch (one FP32 scale per 128 channels), TensorRT-LLM's MXFP8 and NVFP4 rows
  // (COMPONENT_FIGURES.md 1.6: 7,392 and 4,032 B per token of 7,168 channels) and BF16 combine.
  CHECK(kHidden * activation_bytes_per_element(Precision::kFP8) == Approx(kFp8Token));
  CHECK(kHidden * activation_bytes_per_element(Precision::kFP8) == Approx(7392));
  CHECK(kHidden * activation_bytes_per_element(Precision::kFP4) == Approx(4032));
  CHECK(kHidden * activation_bytes_per_element(Precision::kBF16) == Approx(kBf16Token));
}

}  // namespace moesim
