// The CPU references of the CUDA kernels, checked against naive loops written from the formulas, with
// ragged token counts, zero-token experts and fresh random inputs.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "hwmodels/cuda_cpu_reference.h"

namespace moesim {
namespace {

std::vector<float> random_bf16(std::size_t n, std::mt19937& rng, float scale) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = round_to_bf16(u(rng));
  return v;
}

}  // namespace

TEST_CASE("bf16 rounding keeps 8 significant bits and rounds ties to even") {
  CHECK(round_to_bf16(1.0f) == 1.0f);
  CHECK(round_to_bf16(1.0f + 1.0f / 256) == 1.0f);               // tie, even neighbour is 1
  CHECK(round_to_bf16(1.0f + 3.0f / 256) == 1.0f + 4.0f / 256);  // tie, rounds up to even
  CHECK(round_to_bf16(1.0f + 1.5f / 256) == 1.0f + 2.0f / 256);
  CHECK(round_to_bf16(-3.14159f) == -3.140625f);
}

TEST_CASE("the routing index groups rows by expert, tokens in order, and leaves unchosen experts empty") {
  // 4 tokens, top-2, 5 experts; expert 3 is never chosen.
  const std::vector<int> ids = {0, 2, 2, 4, 0, 4, 1, 2};
  const RoutingIndex r = routing_index(ids, 4, 2, 5);
  CHECK(r.offsets == std::vector<int>{0, 2, 3, 6, 6, 8});
  CHECK(r.src_token == std::vector<int>{0, 2, 3, 0, 1, 3, 1, 2});
  for (int slot = 0; slot < 8; ++slot) {
    const int row = r.row_of[static_cast<std::size_t>(slot)];
    CHECK(r.src_token[static_cast<std::size_t>(row)] == slot / 2);
    CHECK(row >= r.offsets[static_cast<std::size_t>(ids[static_cast<std::size_t>(slot)])]);
    CHECK(row < r.offsets[static_cast<std::size_t>(ids[static_cast<std::size_t>(slot)]) + 1]);
  }
}

TEST_CASE("the expert FFN reference matches a naive SwiGLU loop for ragged and empty experts") {
  std::mt19937 rng(std::random_device{}());
  const int hidden = 24;
  const int inter = 10;
  const std::vector<int> counts = {3, 0, 1, 7, 0, 2};
  std::vector<int> offsets = {0};
  for (int c : counts) offsets.push_back(offsets.back() + c);
  const int rows = offsets.back();
  const auto x = random_bf16(static_cast<std::size_t>(rows * hidden), rng, 1.0f);
  std::vector<std::vector<float>> w13;
  std::vector<std::vector<float>> w2;
  for (std::size_t e = 0; e < counts.size(); ++e) {
    w13.push_back(random_bf16(static_cast<std::size_t>(hidden * 2 * inter), rng, 0.3f));
    w2.push_back(random_bf16(static_cast<std::size_t>(inter * hidden), rng, 0.3f));
  }
  const auto y = expert_ffn_reference(x, offsets, w13, w2, hidden, inter);
  REQUIRE(y.size() == x.size());
  for (std::size_t e = 0; e < counts.size(); ++e) {
    for (int r = offsets[e]; r < offsets[e + 1]; ++r) {
      std::vector<double> act(static_cast<std::size_t>(inter));
      for (int j = 0; j < inter; ++j) {
        double a = 0;
        double b = 0;
        for (int h = 0; h < hidden; ++h) {
          a += double(x[std::size_t(r * hidden + h)]) * w13[e][std::size_t(h * 2 * inter + j)];
          b += double(x[std::size_t(r * hidden + h)]) * w13[e][std::size_t(h * 2 * inter + inter + j)];
        }
        act[std::size_t(j)] = a / (1 + std::exp(-a)) * b;
      }
      for (int c = 0; c < hidden; ++c) {
        double s = 0;
        for (int j = 0; j < inter; ++j) s += act[std::size_t(j)] * w2[e][std::size_t(j * hidden + c)];
        // Two BF16 roundings (act and y): relative 2^-8 each, plus the act rounding carried through the sum.
        CHECK(y[std::size_t(r * hidden + c)] == Approx(s).epsilon(0.02).margin(0.02));
      }
    }
  }
}

TEST_CASE("permute then unpermute with weights summing to one returns the tokens") {
  std::mt19937 rng(std::random_device{}());
  const int tokens = 37;
  const int top_k = 3;
  const int experts = 8;
  const int hidden = 16;
  std::uniform_int_distribution<int> pick(0, experts - 2);  // the last expert stays empty
  std::vector<int> ids(static_cast<std::size_t>(tokens * top_k));
  for (auto& e : ids) e = pick(rng);
  const RoutingIndex r = routing_index(ids, tokens, top_k, experts);
  CHECK(r.offsets[experts] - r.offsets[experts - 1] == 0);
  const auto x = random_bf16(static_cast<std::size_t>(tokens * hidden), rng, 2.0f);
  const auto permuted = permute_reference(x, r.src_token, hidden);
  for (std::size_t row = 0; row < r.src_token.size(); ++row) {
    for (int h = 0; h < hidden; ++h) {
      CHECK(permuted[row * hidden + std::size_t(h)] == x[std::size_t(r.src_token[row] * hidden + h)]);
    }
  }
  const std::vector<float> w(static_cast<std::size_t>(tokens * top_k), 0.25f);  // 3 x 0.25 = 0.75
  const auto y = unpermute_reference(permuted, r.row_of, w, tokens, top_k, hidden);
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == Approx(round_to_bf16(0.75f * x[i])).epsilon(1e-6));
}

}  // namespace moesim
