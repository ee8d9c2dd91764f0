// Loaders as FIFO bandwidth servers: M/D/1 waiting time, the seed's SSD budget, sharing a host link.
#include "hwmodels/loader.h"

#include <array>
#include <catch2/catch.hpp>
#include <cmath>

#include "sim/engine/random.h"

namespace moesim {

// One GPU on its own PCIe Gen5 host link: 54.9 GB/s and 10 us (shared/calibration/h200/platform.json).
const HostLinkSpec kPcie{.bytes_per_s = 54.9e9, .latency = Duration::from_us(10), .gpus_per_link = 1};

TEST_CASE("Poisson arrivals of fixed-size loads wait as Pollaczek-Khinchine says for M/D/1") {
  // D = 100 MB / 50 GB/s = 2 ms, mu = 500/s; W_q = rho / (2 mu (1 - rho)).
  const std::int64_t bytes = 100'000'000;
  for (const double rho : {0.5, 0.8}) {
    BandwidthServer server(50e9, Duration::zero());
    const double mu = 500.0;
    const double lambda = rho * mu;
    Rng rng(17);
    double t = 0;
    double wait_sum = 0;
    const int n = 400'000;
    const Duration service = server.transfer_time(bytes);
    for (int i = 0; i < n; ++i) {
      t += sample_exponential(rng, lambda);
      const Time arrival = Time::at(Duration::from_seconds(t));
      const Time done = server.submit(arrival, bytes);
      wait_sum += (done - arrival - service).seconds();
    }
    const double want = rho / (2.0 * mu * (1.0 - rho));
    CHECK(wait_sum / n == Approx(want).epsilon(0.04));
  }
}

TEST_CASE("a 1.3 GB expert from one SSD at 3.25-6.5 GB/s takes 200-400 ms, as the seed budgets") {
  for (const double drive : {3.25e9, 6.5e9}) {
    ExpertLoader loader({.nvme_drive_bytes_per_s = drive, .nvme_drives = 1, .nvme_latency = Duration::zero()},
                        kPcie, 8);
    const Duration t = loader.uncontended_time(Tier::kNvme, 1'300'000'000);
    // The PCIe copy streams behind the read: total = read + host-link fixed latency.
    CHECK(t.seconds() == Approx(1.3e9 / drive + 10e-6).epsilon(1e-9));
    const Time done = loader.load(3, Tier::kNvme, 1'300'000'000, Time::zero());
    CHECK((done - Time::zero()).seconds() == Approx(t.seconds()).epsilon(1e-9));
  }
  // Two striped drives halve the read.
  ExpertLoader striped({.nvme_drive_bytes_per_s = 3.25e9, .nvme_drives = 2, .nvme_latency = Duration::zero()},
                       kPcie, 8);
  CHECK(striped.uncontended_time(Tier::kNvme, 1'300'000'000).seconds() == Approx(0.2 + 10e-6));
}

TEST_CASE("GPUs behind one host link queue their copies, GPUs with their own link do not") {
  const std::int64_t bytes = 44'000'000;  // one DeepSeek-V3 expert in FP8 (COMPONENT_FIGURES section 2)
  const HostLinkSpec shared{.bytes_per_s = 54.9e9, .latency = Duration::zero(), .gpus_per_link = 2};
  ExpertLoader loader({}, shared, 4);
  const double one = bytes / 54.9e9;
  const Time a = loader.load(0, Tier::kHostDram, bytes, Time::zero());
  const Time b = loader.load(1, Tier::kHostDram, bytes, Time::zero());  // same link as GPU 0
  const Time c = loader.load(2, Tier::kHostDram, bytes, Time::zero());  // its own link
  CHECK(a.seconds() == Approx(one));
  CHECK(b.seconds() == Approx(2 * one));
  CHECK(c.seconds() == Approx(one));
  CHECK(loader.host_link(0).bytes_served() == 2 * bytes);
  CHECK(loader.load(0, Tier::kHbm, bytes, Time::zero()) == Time::zero());
}

TEST_CASE("the host-link default reproduces the measured pinned copy times") {
  // shared/calibration/h200/platform.json: 8 MiB in 0.187 ms, 64 MiB in 1.230 ms, 2048 MiB in 39.14 ms.
  ExpertLoader loader({}, kPcie, 1);
  CHECK(loader.uncontended_time(Tier::kHostDram, 64LL << 20).ms() == Approx(1.2296).epsilon(0.02));
  CHECK(loader.uncontended_time(Tier::kHostDram, 2048LL << 20).ms() == Approx(39.139).epsilon(0.02));
  CHECK(loader.uncontended_time(Tier::kHostDram, 8LL << 20).ms() == Approx(0.18656).epsilon(0.15));
}

TEST_CASE("back-to-back loads of many sizes end at the sum of their bytes over the bandwidth") {
  // Six sizes in turn (more than the server remembers): each completion is the previous one plus
  // bytes / bandwidth, rounded to the picosecond, and the fixed latency is added once at the end.
  const double bw = 3.0e9;
  const Duration latency = Duration::from_us(7);
  BandwidthServer link(bw, latency);
  const std::array<std::int64_t, 6> sizes{1'000'003, 2'500'000, 1'000'003, 777'777, 4'096, 31'000'000};
  std::int64_t expected_ps = 0;
  for (int round = 0; round < 3; ++round) {
    for (const std::int64_t b : sizes) {
      expected_ps += std::llround(static_cast<double>(b) / bw * 1e12);
      const Time done = link.submit(Time{}, b);
      CHECK(done.since_start().ps() == expected_ps + latency.ps());
    }
  }
  CHECK(link.busy_time().ps() == expected_ps);
}

}  // namespace moesim
