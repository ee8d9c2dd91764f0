#include "hwmodels/loader.h"

#include <algorithm>

#include "sim/engine/check.h"

namespace moesim {

BandwidthServer::BandwidthServer(double bytes_per_s, Duration fixed_latency)
    : bytes_per_s_(bytes_per_s), latency_(fixed_latency) {
  MOESIM_CHECK(bytes_per_s > 0, "a loader needs a positive bandwidth");
}

Duration BandwidthServer::transfer_time(std::int64_t bytes) const {
  return Duration::from_seconds(static_cast<double>(bytes) / bytes_per_s_);
}

HostLinkSpec host_link_of(const FabricSpec& f) {
  return HostLinkSpec{.bytes_per_s = f.host_link_bytes_per_s,
                      .latency = f.host_link_latency,
                      .gpus_per_link = std::max(1, std::min(f.gpus_per_host_link, f.gpus_per_node))};
}

ExpertLoader::ExpertLoader(const LoaderSpec& spec, const HostLinkSpec& host, int gpus)
    : spec_(spec), host_(host) {
  MOESIM_CHECK(host.gpus_per_link >= 1 && spec.gpus_per_nvme_array >= 1 && spec.nvme_drives >= 1,
               "loader sharing factors must be positive");
  const int links = (gpus + host.gpus_per_link - 1) / host.gpus_per_link;
  const int arrays = (gpus + spec.gpus_per_nvme_array - 1) / spec.gpus_per_nvme_array;
  host_links_.assign(static_cast<std::size_t>(links), BandwidthServer(host.bytes_per_s, host.latency));
  nvme_arrays_.assign(static_cast<std::size_t>(arrays),
                      BandwidthServer(spec.nvme_drive_bytes_per_s * spec.nvme_drives, spec.nvme_latency));
}

const BandwidthServer& ExpertLoader::host_link(int gpu) const {
  return host_links_[static_cast<std::size_t>(gpu / host_.gpus_per_link)];
}

const BandwidthServer& ExpertLoader::nvme_array(int gpu) const {
  return nvme_arrays_[static_cast<std::size_t>(gpu / spec_.gpus_per_nvme_array)];
}

Time ExpertLoader::load_from(int gpu, Tier source, std::int64_t bytes, Time arrival) {
  auto& link = host_links_[static_cast<std::size_t>(gpu / host_.gpus_per_link)];
  switch (source) {
    case Tier::kHbm:
      return arrival;
    case Tier::kHostDram:
      return link.submit(arrival, bytes);
    case Tier::kNvme: {
      auto& array = nvme_arrays_[static_cast<std::size_t>(gpu / spec_.gpus_per_nvme_array)];
      const Time read_done = array.submit(arrival, bytes);
      // Cut-through: the copy can start once enough is read that it will not overtake the read.
      const Time earliest = std::max(arrival, Time::at(read_done.since_start() - link.transfer_time(bytes)));
      return std::max(read_done, link.submit_not_before(arrival, earliest, bytes));
    }
  }
  return arrival;
}

Duration ExpertLoader::uncontended_time(Tier source, std::int64_t bytes) const {
  const BandwidthServer& link = host_links_.front();
  switch (source) {
    case Tier::kHbm:
      return Duration::zero();
    case Tier::kHostDram:
      return link.service_time(bytes);
    case Tier::kNvme: {
      // Same arithmetic as load() with idle servers.
      const Duration read = nvme_arrays_.front().service_time(bytes);
      const Duration copy_start = max(Duration::zero(), read - link.transfer_time(bytes));
      return max(read, copy_start + link.service_time(bytes));
    }
  }
  return Duration::zero();
}

}  // namespace moesim
