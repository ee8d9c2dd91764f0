// Static ECMP hashing of a leaf's flows onto its uplinks: the expected load of the busiest uplink.
#pragma once

namespace moesim {

// `flows` equal flows hashed independently and uniformly onto `uplinks` links (balls into bins): the
// expected number of flows on the busiest link over the mean, flows / uplinks. The busiest link drains
// last, so a bundle that drains in load / capacity when flows spread evenly (adaptive routing) drains in
// that time x this factor under ECMP. 1 when flows <= 0 or uplinks <= 1.
// Exact (the distribution of the maximum of a multinomial) up to kEcmpExactFlows flows; above, the normal
// approximation of the multinomial: loads mean + sqrt(mean) (Z_i - mean(Z)), Z_i i.i.d. standard normal, so
// E[max] = mean + sqrt(mean) E[max of `uplinks` standard normals].
[[nodiscard]] double ecmp_max_load_factor(int flows, int uplinks);

// The exact expectation alone, O(uplinks x flows x max load) per load level; flows up to ~1,000 (the
// binomial terms start at (1 - 1/uplinks)^flows, which must not underflow).
[[nodiscard]] double expected_max_load_exact(int flows, int uplinks);

// E[max of n i.i.d. standard normals], by numerical integration.
[[nodiscard]] double expected_max_std_normal(int n);

inline constexpr int kEcmpExactFlows = 512;

}  // namespace moesim
