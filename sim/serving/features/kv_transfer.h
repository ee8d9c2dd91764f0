// KV-cache transfer sizing for prefill/decode disaggregation: the bytes a request's KV cache occupies
// (ModelSpec::kv_bytes_per_token: MLA keeps kv_lora_rank + qk_rope_head_dim per layer, GQA 2 x kv_heads x
// head_dim) and how they spread over the decode instance's attention tensor-parallel GPUs; and the ledger of
// the cluster's KV sends on its GPUs' links and NIC paths (KvLinks), costed by the fabric.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hwmodels/fabric.h"
#include "hwmodels/precision.h"
#include "sim/engine/time.h"
#include "sim/serving/spec/model_spec.h"

namespace moesim {

struct KvTransferSize {
  double bytes = 0;               // the request's KV cache, all layers, once
  double bytes_per_dest_gpu = 0;  // what each GPU of the decode attention group receives
  double wire_bytes = 0;          // bytes_per_dest_gpu x dest TP: what crosses the fabric
};

// `tokens` of KV at `kv` precision moving to an attention group of `dest_tp` GPUs. GQA shards KV heads over
// the group (ceil(kv_heads / tp) heads per GPU, a head never split; heads replicate when tp > kv_heads);
// MLA's latent is replicated on every TP rank (DeepSeek-V2, section 2.1.2: one compressed KV per token).
[[nodiscard]] KvTransferSize kv_transfer_size(const ModelSpec& m, Precision kv, std::int64_t tokens,
                                              int dest_tp);

// The KV sends of a cluster on its GPUs (one KV send engine per GPU, FIFO) and their NIC paths, and the
// nodes whose NIC a failure degraded. The time of a send is the fabric's (Fabric::transfer: the bottleneck
// link of the route, its latency and p2p overhead); this ledger adds only the queueing and the sharing.
class KvLinks {
 public:
  // Every GPU of `gpus` idle, every NIC of `nodes` whole. `fabric` outlives the ledger.
  KvLinks(const Fabric& fabric, int gpus, int nodes);

  // One GPU's share of a KV send: `bytes` from `src_gpu` to `dst_gpu`, starting when src_gpu's earlier
  // sends are done (at `now` at the earliest); returns when its last byte is in. Across nodes the send
  // shares the NIC paths with the All-to-All of the instances at both ends (`nic_busy_share`, the larger of
  // their NIC busy shares: fair sharing stretches its data time by 1 + it) and a degraded NIC at share f of
  // its bandwidth stretches it by a further 1 / f - 1; both NIC paths count it busy until it ends. Inside a
  // node it goes over NVLink, not shared.
  Time send(double bytes, int src_gpu, int dst_gpu, Time now, double nic_busy_share);
  // Node `node`'s NIC keeps `bandwidth_factor` of its bandwidth until `until` (the lower share and the later
  // end while an earlier degradation lasts).
  void degrade_nic(int node, double bandwidth_factor, Time now, Time until);
  // KV transfers on the NIC paths of GPUs [first_gpu, first_gpu + out.size()) during [now, now + horizon):
  // the fraction of that window each GPU's outgoing and incoming path carries one, plus (1 / f - 1) on a
  // NIC degraded to share f. False when there is none (then `out` and `in` are untouched).
  bool on_nics(int first_gpu, Time now, Duration horizon, std::span<double> out, std::span<double> in) const;

  [[nodiscard]] Time link_free(int gpu) const { return link_free_[static_cast<std::size_t>(gpu)]; }

 private:
  const Fabric& fabric_;
  std::vector<Time> link_free_;                   // per GPU of the cluster: when its KV sends are done
  std::vector<Time> nic_out_free_, nic_in_free_;  // per GPU: when KV transfers leave its NIC path free
  // Per node: a degraded NIC's bandwidth share and until when (empty until a first degradation).
  std::vector<double> nic_share_;
  std::vector<Time> nic_until_;
  int nodes_;
};

}  // namespace moesim
