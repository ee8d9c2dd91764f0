// Collectives against Vidur's public H100 DGX NCCL profiles (COMPONENT_FIGURES.md section 5):
// all-reduce over 2/4/8 GPUs of a node and send/recv inside and across nodes, fp16 buffers of
// 1, 8 and 64 MiB. The model reaches 12% on every row; tests pin that tolerance.
#include <array>
#include <catch2/catch.hpp>

#include "hwmodels/engine_profile.h"
#include "hwmodels/fabric.h"

namespace moesim {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr std::array<double, 3> kSizes{1 * kMiB, 8 * kMiB, 64 * kMiB};
constexpr double kTolerance = 0.12;

// H100 DGX: NVLink 4 at 450 GB/s per direction, 8x 400 Gb/s NICs.
FabricSpec h100_dgx() {
  return FabricSpec{.nodes = 2, .gpus_per_node = 8, .nvlink_bytes_per_s = 450e9, .nic_bytes_per_s = 50e9};
}

double rel_error(Duration model, double published_ms) { return model.ms() / published_ms - 1.0; }

}  // namespace

TEST_CASE("intra-node all-reduce matches Vidur's H100 DGX profile within 12%") {
  const Fabric fabric(h100_dgx());
  struct Row {
    int gpus;
    std::array<double, 3> ms;
  };
  for (const Row& row :
       {Row{2, {0.043, 0.046, 0.245}}, Row{4, {0.041, 0.062, 0.318}}, Row{8, {0.034, 0.074, 0.322}}}) {
    for (std::size_t i = 0; i < kSizes.size(); ++i) {
      const Duration t = fabric.all_reduce(kSizes[i], row.gpus, true);
      INFO(row.gpus << " GPUs, " << kSizes[i] / kMiB << " MiB: " << t.ms() << " ms vs " << row.ms[i]);
      CHECK(std::abs(rel_error(t, row.ms[i])) < kTolerance);
    }
  }
}

TEST_CASE("send/recv matches Vidur's H100 DGX profile within 12% inside and across nodes") {
  const Fabric fabric(h100_dgx());
  constexpr std::array<double, 3> kIntraMs{0.010, 0.030, 0.193};
  constexpr std::array<double, 3> kInterMs{0.054, 0.246, 1.871};
  for (std::size_t i = 0; i < kSizes.size(); ++i) {
    INFO(kSizes[i] / kMiB << " MiB");
    CHECK(std::abs(rel_error(fabric.send_recv(kSizes[i], true), kIntraMs[i])) < kTolerance);
    CHECK(std::abs(rel_error(fabric.send_recv(kSizes[i], false), kInterMs[i])) < kTolerance);
  }
}

TEST_CASE("a large all-reduce approaches the ring bound 2(p-1)/p x bytes / bus bandwidth") {
  const FabricSpec s = h100_dgx();
  const Fabric fabric(s);
  const double bytes = 1024 * kMiB;
  const double ring_s =
      2.0 * 7.0 / 8.0 * bytes / (s.nvlink_bytes_per_s * s.collectives.all_reduce_bus_efficiency);
  CHECK(fabric.all_reduce(bytes, 8, true).seconds() == Approx(ring_s).epsilon(0.01));
}

TEST_CASE("all-reduce grows with the buffer and costs nothing for one GPU") {
  const Fabric fabric(h100_dgx());
  CHECK(fabric.all_reduce(64 * kMiB, 1, true) == Duration::zero());
  Duration previous = Duration::zero();
  for (double mib = 1; mib <= 1024; mib *= 2) {
    const Duration t = fabric.all_reduce(mib * kMiB, 8, true);
    CHECK(t >= previous);
    previous = t;
  }
}

TEST_CASE("an all-reduce that spans nodes is slower than one inside a node and faster with a faster NIC") {
  FabricSpec s = h100_dgx();
  const Duration intra = Fabric(s).all_reduce(256 * kMiB, 8, true);
  const Duration inter = Fabric(s).all_reduce(256 * kMiB, 16, false);
  CHECK(inter > intra);
  s.nic_bytes_per_s *= 2;
  CHECK(Fabric(s).all_reduce(256 * kMiB, 16, false) < inter);
}

TEST_CASE("pipeline send/recv of activations costs the link latency plus bytes at the achieved rate") {
  const FabricSpec s = h100_dgx();
  const Fabric fabric(s);
  const double bytes = 4096.0 * 7168 * 2;  // 4096 tokens of BF16 hidden state
  const Duration expected =
      s.nic_latency + s.collectives.p2p_nic_overhead +
      Duration::from_seconds(bytes / (s.nic_bytes_per_s * s.collectives.p2p_nic_efficiency));
  CHECK(fabric.send_recv(bytes, false) == expected);
}

TEST_CASE("the custom NVLink all-reduce: one round of reads for one-shot, two for two-shot") {
  const FabricSpec s = h100_dgx();
  const Fabric fabric(s);
  const double rate = s.nvlink_bytes_per_s * s.efficiency;
  const Duration barriers = s.nvlink_latency * s.collectives.custom_all_reduce_barriers;
  for (const int p : {2, 4, 8}) {
    for (const double bytes : {16.0 * 1024, 1.0 * kMiB, 8.0 * kMiB}) {
      // One-shot: the group - 1 peers' whole buffers, one read round; two-shot: 2 (p - 1) / p, two rounds.
      const Duration one = s.collectives.custom_all_reduce_launch + barriers + s.nvlink_latency +
                           Duration::from_seconds((p - 1) * bytes / rate);
      const Duration two = s.collectives.custom_all_reduce_launch + barriers + s.nvlink_latency * 2 +
                           Duration::from_seconds(2.0 * (p - 1) / p * bytes / rate);
      CHECK(fabric.all_reduce(bytes, p, true, AllReduceKernel::kOneShot) == one);
      CHECK(fabric.all_reduce(bytes, p, true, AllReduceKernel::kTwoShot) == two);
    }
  }
  // Where one-shot stops paying: its extra data (p - 1 - 2 (p - 1) / p) x bytes / rate equals the second
  // read round's latency. With the H100 link figures that is ~480 KiB at 4 GPUs and ~137 KiB at 8, beside
  // the 512 KiB and 256 KiB at which vLLM switches (csrc/custom_all_reduce.cuh): the mechanism explains
  // the engine's thresholds to within 2x, though nothing was fitted to them.
  for (const auto& [p, engine_switch] : {std::pair{4, 512.0 * 1024}, std::pair{8, 256.0 * 1024}}) {
    const double crossover = s.nvlink_latency.seconds() * rate / ((p - 1) - 2.0 * (p - 1) / p);
    CHECK(crossover < engine_switch);
    CHECK(crossover > engine_switch / 2);
    CHECK(fabric.all_reduce(crossover * 0.9, p, true, AllReduceKernel::kOneShot) <
          fabric.all_reduce(crossover * 0.9, p, true, AllReduceKernel::kTwoShot));
    CHECK(fabric.all_reduce(crossover * 1.1, p, true, AllReduceKernel::kOneShot) >
          fabric.all_reduce(crossover * 1.1, p, true, AllReduceKernel::kTwoShot));
  }
  // A decode-sized TP8 message (64 tokens of a 7168 hidden in BF16) is at least twice cheaper than NCCL's
  // floor, which is what the custom kernels are for.
  const double decode = 64.0 * 7168 * 2;
  CHECK(fabric.all_reduce(decode, 8, true, AllReduceKernel::kTwoShot) * 2 <
        fabric.all_reduce(decode, 8, true));
}

TEST_CASE(
    "engines pick the all-reduce kernel by vLLM's rule, the PyTorch profiles and other cases use NCCL") {
  const EngineProfile vllm = engine_profile(EngineKind::kVllm);
  constexpr double kKiB = 1024;
  CHECK(all_reduce_kernel(vllm, 4 * kMiB, 2, true) == AllReduceKernel::kOneShot);
  CHECK(all_reduce_kernel(vllm, 500 * kKiB, 4, true) == AllReduceKernel::kOneShot);
  CHECK(all_reduce_kernel(vllm, 520 * kKiB, 4, true) == AllReduceKernel::kTwoShot);
  CHECK(all_reduce_kernel(vllm, 250 * kKiB, 8, true) == AllReduceKernel::kOneShot);
  CHECK(all_reduce_kernel(vllm, 300 * kKiB, 8, true) == AllReduceKernel::kTwoShot);
  CHECK(all_reduce_kernel(vllm, 8 * kMiB, 8, true) == AllReduceKernel::kTwoShot);
  CHECK(all_reduce_kernel(vllm, 8 * kMiB + 1, 8, true) == AllReduceKernel::kNccl);
  CHECK(all_reduce_kernel(vllm, 64 * kKiB, 16, false) == AllReduceKernel::kNccl);
  CHECK(all_reduce_kernel(vllm, 64 * kKiB, 16, true) == AllReduceKernel::kNccl);  // an NVL72 group of 16
  for (const EngineKind k : {EngineKind::kSglang, EngineKind::kTrtllm})
    CHECK(all_reduce_kernel(engine_profile(k), 64 * kKiB, 8, true) == AllReduceKernel::kOneShot);
  for (const EngineKind k : {EngineKind::kPytorchGraph, EngineKind::kPytorchLoop})
    CHECK(all_reduce_kernel(engine_profile(k), 64 * kKiB, 8, true) == AllReduceKernel::kNccl);
}

}  // namespace moesim
