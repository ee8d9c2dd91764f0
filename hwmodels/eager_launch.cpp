#include "hwmodels/eager_launch.h"

namespace moesim {

// Unrolled over kernels k0 + 1 .. k0 + n of time t each, after gpu_end e0 and with a_j = (k0 + j) launch:
// e_n = max(e0 + n t, max_j (a_j + (n - j + 1) t)). The inner term is linear in j, so its largest value is
// at j = 1 ((k0 + 1) launch + n t: the GPU is the bottleneck) or j = n ((k0 + n) launch + t: the host is).
void EagerPipeline::issue(std::int64_t count, Duration each) {
  if (count <= 0) return;
  const Duration first = gpu_end_ + each * count;
  const Duration gpu_bound = launch_ * (issued_ + 1) + each * count;
  const Duration host_bound = launch_ * (issued_ + count) + each;
  gpu_end_ = max(first, max(gpu_bound, host_bound));
  issued_ += count;
}

}  // namespace moesim
