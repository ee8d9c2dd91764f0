// An eagerly launched step as a two-stage pipeline (hwmodels/eager_launch.h): kernel k is issued at
// k x launch and ends at max(end of k - 1, k x launch) + t_k. Expected ends worked by hand.
#include "hwmodels/eager_launch.h"

#include <array>
#include <catch2/catch.hpp>
#include <vector>

using namespace moesim;

namespace {
Duration us(double x) { return Duration::from_us(x); }
}  // namespace

// Launch 10 us; kernels of 5, 30 and 5 us: 1: max(0, 10) + 5 = 15; 2: max(15, 20) + 30 = 50;
// 3: max(50, 30) + 5 = 55. The host is done at 30.
TEST_CASE("three kernels of different times end where the recurrence says") {
  EagerPipeline p(us(10));
  for (const double t : {5.0, 30.0, 5.0}) p.issue(1, us(t));
  CHECK(p.gpu_end() == us(55));
  CHECK(p.host_end() == us(30));
  CHECK(p.issued() == 3);
}

// GPU-bound: launch 1 us, three kernels of 10 us: 11, 21, 31 (the first launch, then the GPU's work).
// Host-bound: launch 10 us, three kernels of 2 us: 12, max(12, 20) + 2 = 22, max(22, 30) + 2 = 32 (every
// kernel but the last waits for its launch). Each as one run of three and kernel by kernel.
TEST_CASE("a run of equal kernels ends as its kernels one by one, GPU-bound and host-bound") {
  for (const auto& [launch, t, end] : std::vector<std::array<double, 3>>{{1, 10, 31}, {10, 2, 32}}) {
    EagerPipeline run(us(launch));
    run.issue(3, us(t));
    EagerPipeline single(us(launch));
    for (int k = 0; k < 3; ++k) single.issue(1, us(t));
    INFO("launch " << launch << " us, kernels of " << t << " us");
    CHECK(run.gpu_end() == us(end));
    CHECK(single.gpu_end() == us(end));
    CHECK(run.host_end() == us(3 * launch));
  }
}

// A run after a backlog: launch 10 us; one kernel of 50 us ends at 60; then four of 4 us (issued at 20,
// 30, 40, 50) drain the backlog: 64, 68, 72, 76; then four more of 4 us (issued at 60 .. 90) wait for
// their launches: max(76, 60) + 4 = 80, max(80, 70) + 4 = 84, max(84, 80) + 4 = 88, max(88, 90) + 4 = 94.
TEST_CASE("a run that starts behind a long kernel drains its backlog before the host catches up") {
  EagerPipeline p(us(10));
  p.issue(1, us(50));
  p.issue(4, us(4));
  CHECK(p.gpu_end() == us(76));
  p.issue(4, us(4));
  CHECK(p.gpu_end() == us(94));
  CHECK(p.host_end() == us(90));
  EagerPipeline zero(Duration::zero());  // no launch cost: the GPU's work alone
  zero.issue(2, us(7));
  zero.issue(1, us(3));
  CHECK(zero.gpu_end() == us(17));
}
