// Expert loaders: bandwidth servers with a FIFO queue for host DRAM -> GPU copies (PCIe) and NVMe reads,
// shared by the GPUs that sit behind the same host link or drive array. Pure queue arithmetic: given a
// request (bytes, arrival time) they return its completion time; the step planner drives them and no
// engine event is scheduled here.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "hwmodels/fabric_spec.h"
#include "sim/engine/check.h"
#include "sim/engine/time.h"

namespace moesim {

// Where an expert copy lives when it is not being computed on.
enum class Tier : std::uint8_t { kHbm, kHostDram, kNvme };

// One FIFO, work-conserving server: requests are served one after another at the full bandwidth, so
// concurrent requests share it by serialisation. A request occupies the server for bytes / bandwidth; the
// fixed latency (setup, DMA descriptor, first byte) delays its completion but does not occupy the server.
class BandwidthServer final {
 public:
  BandwidthServer(double bytes_per_s, Duration fixed_latency);

  [[nodiscard]] Duration transfer_time(std::int64_t bytes) const;
  [[nodiscard]] Duration service_time(std::int64_t bytes) const { return transfer_time(bytes) + latency_; }
  // Arrivals must come in non-decreasing time (FIFO order is arrival order). Returns the completion time.
  Time submit(Time arrival, std::int64_t bytes) { return submit_not_before(arrival, arrival, bytes); }
  // Same, but the transfer may not start before `earliest_start` (a later stage of a pipeline). Inline: the
  // planner submits each expert load of each layer.
  Time submit_not_before(Time arrival, Time earliest_start, std::int64_t bytes) {
    MOESIM_CHECK(arrival >= last_arrival_, "requests to a FIFO server must arrive in time order");
    last_arrival_ = arrival;
    const Time start = std::max({arrival, earliest_start, busy_until_});
    const Duration t = memo_transfer_time(bytes);
    busy_until_ = start + t;
    busy_time_ += t;
    bytes_served_ += bytes;
    return busy_until_ + latency_;
  }

  [[nodiscard]] Time busy_until() const { return busy_until_; }
  [[nodiscard]] double bytes_per_s() const { return bytes_per_s_; }
  [[nodiscard]] std::int64_t bytes_served() const { return bytes_served_; }
  [[nodiscard]] Duration busy_time() const { return busy_time_; }

 private:
  // transfer_time() of the sizes asked last (a loader sees one size per precision): the same value
  // without a division per request.
  Duration memo_transfer_time(std::int64_t bytes) {
    for (std::size_t i = 0; i < memo_bytes_.size(); ++i) {
      if (memo_bytes_[i] == bytes) return memo_time_[i];
    }
    const std::size_t i = memo_next_;
    memo_next_ = (memo_next_ + 1) % memo_bytes_.size();
    memo_bytes_[i] = bytes;
    memo_time_[i] = transfer_time(bytes);
    return memo_time_[i];
  }

  double bytes_per_s_;
  Duration latency_;
  Time busy_until_;
  Time last_arrival_;
  std::int64_t bytes_served_ = 0;
  Duration busy_time_;
  std::array<std::int64_t, 4> memo_bytes_{-1, -1, -1, -1};
  std::array<Duration, 4> memo_time_{};
  std::size_t memo_next_ = 0;
};

// The host link (host DRAM -> GPU) as the loaders see it. It is the fabric's (FabricSpec::host_link_*,
// cluster.fabric in a scenario): host_link_of() is the only way to make one.
struct HostLinkSpec {
  double bytes_per_s = 0;
  Duration latency;
  int gpus_per_link = 1;  // GPUs behind one host link (e.g. 2 behind a PCIe switch share it)
};
// The fabric's host link; a node smaller than a PCIe switch puts all its GPUs on one link.
[[nodiscard]] HostLinkSpec host_link_of(const FabricSpec& f);

// The drives behind the expert tiers (experts.tiers in a scenario).
struct LoaderSpec {
  // NVMe: 3-7 GB/s sequential per drive (seed section 4; PM9A3-class Gen4 6.5 GB/s in COMPONENT_FIGURES
  // section 6), striped over `nvme_drives` (bandwidths add). Latency: an assumption (~100 us, NVMe read).
  double nvme_drive_bytes_per_s = 6.5e9;
  int nvme_drives = 1;
  int gpus_per_nvme_array = 8;  // GPUs that share one striped array (one node)
  Duration nvme_latency = Duration::from_us(100);
};

// The loaders of a set of GPUs: one host-link server per gpus_per_host_link GPUs, one NVMe array per
// gpus_per_nvme_array GPUs. An NVMe load streams through the host link (cut-through: the PCIe copy may
// not finish before the last byte is read, and is served in its link's FIFO).
class ExpertLoader final {
 public:
  ExpertLoader(const LoaderSpec& spec, const HostLinkSpec& host, int gpus);
  // Completion time of loading `bytes` from `source` into GPU `gpu`'s HBM, for a request at `arrival`.
  // Requests to one server must arrive in non-decreasing time. A load from kHbm is free. Inline for the
  // common case (host DRAM: one queue).
  Time load(int gpu, Tier source, std::int64_t bytes, Time arrival) {
    if (source == Tier::kHostDram)
      return host_links_[static_cast<std::size_t>(gpu / host_.gpus_per_link)].submit(arrival, bytes);
    return load_from(gpu, source, bytes, arrival);
  }
  // Load time with idle servers.
  [[nodiscard]] Duration uncontended_time(Tier source, std::int64_t bytes) const;
  [[nodiscard]] const BandwidthServer& host_link(int gpu) const;
  [[nodiscard]] const BandwidthServer& nvme_array(int gpu) const;

 private:
  Time load_from(int gpu, Tier source, std::int64_t bytes, Time arrival);  // kHbm or kNvme
  LoaderSpec spec_;
  HostLinkSpec host_;
  std::vector<BandwidthServer> host_links_;
  std::vector<BandwidthServer> nvme_arrays_;
};

}  // namespace moesim
