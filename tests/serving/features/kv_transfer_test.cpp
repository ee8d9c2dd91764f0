// KV bytes per token and per transfer from the model shape, against hand computation for DeepSeek-V3
// (MLA) and Mixtral 8x7B (GQA) from their catalog shapes; the KV link ledger's times from the fabric spec
// (NVLink or NIC rate, latency, p2p overhead), its FIFO per GPU, NIC sharing and degraded NICs.
#include "sim/serving/features/kv_transfer.h"

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>

#include "sim/scenario/catalog.h"
#include "sim/scenario/scenario_parser.h"

namespace moesim {
namespace {

ModelSpec catalog_model(const std::string& name) {
  const Json j = resolve_entry(Json(name), "scenarios/catalog/models.json", "model");
  JsonReader r(j, "model");
  return parse_model(r);
}

}  // namespace

TEST_CASE("DeepSeek-V3 keeps (512 + 64) latent elements per layer and token: 70,272 bytes in BF16") {
  const ModelSpec m = catalog_model("deepseek-v3");
  // config_671B.json: kv_lora_rank 512, qk_rope_head_dim 64, 61 layers.
  CHECK(m.kv_bytes_per_token(Precision::kBF16) == (512.0 + 64.0) * 61 * 2);
  CHECK(m.kv_bytes_per_token(Precision::kBF16) == 70272.0);
  CHECK(m.kv_bytes_per_token(Precision::kFP8) == 35136.0);
  const KvTransferSize t = kv_transfer_size(m, Precision::kBF16, 4096, 4);
  CHECK(t.bytes == 70272.0 * 4096);
  CHECK(t.bytes_per_dest_gpu == t.bytes);  // the latent is replicated on every TP rank
  CHECK(t.wire_bytes == 4 * t.bytes);
}

TEST_CASE("Mixtral 8x7B keeps K and V of 8 KV heads of 128 per layer and token: 131,072 bytes in BF16") {
  const ModelSpec m = catalog_model("mixtral-8x7b");
  CHECK(m.kv_bytes_per_token(Precision::kBF16) == 2.0 * 8 * 128 * 32 * 2);
  CHECK(m.kv_bytes_per_token(Precision::kBF16) == 131072.0);
  const KvTransferSize one = kv_transfer_size(m, Precision::kBF16, 1000, 1);
  CHECK(one.bytes == 131072.0 * 1000);
  CHECK(one.wire_bytes == one.bytes);
  // TP 4: two KV heads per GPU, a quarter each, nothing duplicated.
  const KvTransferSize tp4 = kv_transfer_size(m, Precision::kBF16, 1000, 4);
  CHECK(tp4.bytes_per_dest_gpu == one.bytes / 4);
  CHECK(tp4.wire_bytes == one.bytes);
  // TP 16 over 8 heads: each GPU still needs a whole head, so the heads are sent twice.
  const KvTransferSize tp16 = kv_transfer_size(m, Precision::kBF16, 1000, 16);
  CHECK(tp16.bytes_per_dest_gpu == one.bytes / 8);
  CHECK(tp16.wire_bytes == 2 * one.bytes);
}

namespace {

// Two nodes of two GPUs: GPUs 0 and 1 share node 0's NVLink, 2 and 3 node 1's.
FabricSpec two_by_two() {
  FabricSpec s;
  s.nodes = 2;
  s.gpus_per_node = 2;
  return s;
}

Time at_s(double s) { return Time{} + Duration::from_seconds(s); }

// Times are whole picoseconds: each of a transfer's latency halves, overhead and data time rounds by half
// a picosecond at most.
Approx within_ps(double s) { return Approx(s).epsilon(0).margin(5e-12); }

}  // namespace

TEST_CASE("a KV send inside a node takes NVLink latency, p2p overhead and the bytes at the copy rate") {
  const FabricSpec spec = two_by_two();
  const Fabric fabric(spec);
  KvLinks links(fabric, spec.total_gpus(), spec.nodes);
  const double bytes = 64e6;
  // GPU -> NVSwitch -> GPU: half the NVLink latency each way, the bulk copy efficiency on the line rate.
  const double alone_s = spec.nvlink_latency.seconds() + spec.collectives.p2p_nvlink_overhead.seconds() +
                         bytes / (spec.nvlink_bytes_per_s * spec.efficiency);
  const Time t0 = at_s(1.0);
  // The NIC busy share of the instances does not touch NVLink.
  const Time first = links.send(bytes, 0, 1, t0, 0.7);
  CHECK((first - t0).seconds() == within_ps(alone_s));
  // A second send from GPU 0 waits for the first (one send engine per GPU); GPU 1's own runs beside them.
  const Time second = links.send(bytes, 0, 1, t0, 0.0);
  CHECK((second - t0).seconds() == within_ps(2 * alone_s));
  CHECK(links.link_free(0) == second);
  const Time other = links.send(bytes, 1, 0, t0, 0.0);
  CHECK((other - t0).seconds() == within_ps(alone_s));
  // A send after the queue has drained starts at once.
  const Time later = at_s(10.0);
  CHECK((links.send(bytes, 0, 1, later, 0.0) - later).seconds() == within_ps(alone_s));
  // Nothing crossed a NIC.
  std::array<double, 2> out{}, in{};
  CHECK_FALSE(links.on_nics(0, t0, Duration::from_ms(1), out, in));
}

TEST_CASE("across nodes a KV send stretches its data time by the NIC busy share and a degraded NIC") {
  const FabricSpec spec = two_by_two();
  REQUIRE(spec.nic_bytes_per_s < spec.pcie_bytes_per_s);  // the NIC is the route's bottleneck
  const Fabric fabric(spec);
  const double bytes = 32e6;
  const double data_s = bytes / (spec.nic_bytes_per_s * spec.collectives.p2p_nic_efficiency);
  const Time t0 = at_s(2.0);
  const auto time_s = [&](double nic_busy, double factor) {
    KvLinks links(fabric, spec.total_gpus(), spec.nodes);
    if (factor < 1) links.degrade_nic(1, factor, t0, t0 + Duration::from_seconds(5.0));
    return (links.send(bytes, 0, 2, t0, nic_busy) - t0).seconds();
  };
  const double alone = time_s(0.0, 1.0);
  // Fair sharing halves the rate while the All-to-All holds the NIC: + busy share x data time.
  CHECK(time_s(0.3, 1.0) - alone == Approx(0.3 * data_s).epsilon(1e-6));
  // A NIC at 80% of its bandwidth adds 1 / 0.8 - 1 = 0.25 of the data time on top.
  CHECK(time_s(0.3, 0.8) - alone == Approx((0.3 + 0.25) * data_s).epsilon(1e-6));
  CHECK(time_s(0.0, 0.8) - alone == Approx(0.25 * data_s).epsilon(1e-6));
  // Once the degradation is over the NIC is whole again.
  KvLinks links(fabric, spec.total_gpus(), spec.nodes);
  links.degrade_nic(1, 0.5, t0, t0 + Duration::from_seconds(1.0));
  const Time after = t0 + Duration::from_seconds(1.0);
  CHECK((links.send(bytes, 0, 2, after, 0.0) - after).seconds() == Approx(alone).epsilon(1e-9));
}

TEST_CASE("a KV send across nodes holds the sender's outgoing and the receiver's incoming NIC path") {
  const FabricSpec spec = two_by_two();
  const Fabric fabric(spec);
  KvLinks links(fabric, spec.total_gpus(), spec.nodes);
  const Time t0 = at_s(1.0);
  const Time done = links.send(16e6, 1, 2, t0, 0.0);
  const double busy_s = (done - t0).seconds();
  // A window twice the transfer: half of it busy; a window shorter than the transfer: all of it.
  const Duration window = Duration::from_seconds(2 * busy_s);
  std::array<double, 2> out{}, in{};
  REQUIRE(links.on_nics(0, t0, window, out, in));  // node 0: GPU 1 sends
  CHECK(out[0] == 0);
  CHECK(out[1] == Approx(0.5).epsilon(1e-9));
  CHECK(in[0] == 0);
  CHECK(in[1] == 0);
  REQUIRE(links.on_nics(2, t0, window, out, in));  // node 1: GPU 2 receives
  CHECK(in[0] == Approx(0.5).epsilon(1e-9));
  CHECK(out[0] == 0);
  CHECK(in[1] == 0);
  REQUIRE(links.on_nics(2, t0, Duration::from_seconds(busy_s / 4), out, in));
  CHECK(in[0] == 1.0);
  // After the transfer ends nothing is on the NICs.
  out = {}, in = {};
  CHECK_FALSE(links.on_nics(0, done, window, out, in));
  // A NIC degraded to share f reads as other traffic holding it 1 / f - 1 of the time, on each of its GPUs.
  links.degrade_nic(0, 0.25, done, done + Duration::from_seconds(1.0));
  REQUIRE(links.on_nics(0, done, window, out, in));
  CHECK(out[0] == Approx(3.0));
  CHECK(in[1] == Approx(3.0));
  out = {}, in = {};
  CHECK_FALSE(links.on_nics(2, done, window, out, in));  // node 1 is whole
}

}  // namespace moesim
