#include "sim/serving/features/kv_transfer.h"

#include <algorithm>

#include "sim/engine/check.h"

namespace moesim {

KvTransferSize kv_transfer_size(const ModelSpec& m, Precision kv, std::int64_t tokens, int dest_tp) {
  MOESIM_CHECK(dest_tp >= 1 && tokens >= 0, "kv transfer: tp >= 1 and tokens >= 0");
  KvTransferSize s;
  s.bytes = m.kv_bytes_per_token(kv) * double(tokens);
  double share = 1.0;
  if (m.attention == AttentionKind::kGqa) {
    const int heads_per_gpu = (m.num_kv_heads + dest_tp - 1) / dest_tp;
    share = double(heads_per_gpu) / m.num_kv_heads;
  }
  s.bytes_per_dest_gpu = s.bytes * share;
  s.wire_bytes = s.bytes_per_dest_gpu * dest_tp;
  return s;
}

KvLinks::KvLinks(const Fabric& fabric, int gpus, int nodes)
    : fabric_(fabric),
      link_free_(static_cast<std::size_t>(gpus), Time{}),
      nic_out_free_(link_free_.size(), Time{}),
      nic_in_free_(link_free_.size(), Time{}),
      nodes_(nodes) {}

Time KvLinks::send(double bytes, int src_gpu, int dst_gpu, Time now, double nic_busy_share) {
  Time& free = link_free_[static_cast<std::size_t>(src_gpu)];
  const Time start = std::max(now, free);
  const Topology& topo = fabric_.topology();
  const bool across = topo.node_of(src_gpu) != topo.node_of(dst_gpu);
  double shared = across ? nic_busy_share : 0.0;
  // A degraded NIC at share f of its bandwidth stretches the data time by 1 / f = 1 + (1 / f - 1).
  if (across && !nic_share_.empty()) {
    for (const int g : {src_gpu, dst_gpu}) {
      const auto node = static_cast<std::size_t>(topo.node_of(g));
      if (now < nic_until_[node]) shared += 1.0 / nic_share_[node] - 1.0;
    }
  }
  free = start + fabric_.transfer(bytes, src_gpu, dst_gpu, shared);
  if (across) {
    Time& out = nic_out_free_[static_cast<std::size_t>(src_gpu)];
    Time& in = nic_in_free_[static_cast<std::size_t>(dst_gpu)];
    out = std::max(out, free);
    in = std::max(in, free);
  }
  return free;
}

void KvLinks::degrade_nic(int node, double bandwidth_factor, Time now, Time until) {
  if (nic_share_.empty()) {
    nic_share_.assign(static_cast<std::size_t>(nodes_), 1.0);
    nic_until_.assign(nic_share_.size(), Time{});
  }
  const auto n = static_cast<std::size_t>(node);
  nic_share_[n] = now < nic_until_[n] ? std::min(nic_share_[n], bandwidth_factor) : bandwidth_factor;
  nic_until_[n] = std::max(nic_until_[n], until);
}

// The KV sends of a GPU run back to back from now until nic_out_free_ (its FIFO queue); a GPU's receives
// are counted busy until the last of them ends.
bool KvLinks::on_nics(int first_gpu, Time now, Duration horizon, std::span<double> out,
                      std::span<double> in) const {
  bool any = false;
  const double h = horizon.seconds();
  for (std::size_t j = 0; j < out.size(); ++j) {
    const std::size_t g = static_cast<std::size_t>(first_gpu) + j;
    const Time o = nic_out_free_[g];
    const Time i = nic_in_free_[g];
    out[j] = o > now ? std::min(1.0, (o - now).seconds() / h) : 0.0;
    in[j] = i > now ? std::min(1.0, (i - now).seconds() / h) : 0.0;
    any = any || out[j] > 0 || in[j] > 0;
  }
  // A degraded NIC at share f of its bandwidth: the All-to-All's data time on it stretches by 1 / f,
  // which AllToAllTraffic::nic_out_shared expresses as other traffic holding it (1 / f - 1) of the time.
  if (!nic_share_.empty()) {
    const Topology& topo = fabric_.topology();
    for (std::size_t j = 0; j < out.size(); ++j) {
      const auto node = static_cast<std::size_t>(topo.node_of(first_gpu + static_cast<int>(j)));
      if (now >= nic_until_[node]) continue;
      out[j] += 1.0 / nic_share_[node] - 1.0;
      in[j] += 1.0 / nic_share_[node] - 1.0;
      any = true;
    }
  }
  return any;
}

}  // namespace moesim
