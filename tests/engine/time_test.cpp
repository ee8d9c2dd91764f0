// round_half_away must be std::llround wherever durations live (|x| < 2^63), since reports depend on it
// byte for byte: checked against the C library on edge cases and on values spread over every magnitude.
#include "sim/engine/time.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>

namespace moesim {

TEST_CASE("round_half_away rounds exactly as std::llround") {
  const double edges[] = {0.0,
                          -0.0,
                          0.5,
                          -0.5,
                          1.5,
                          2.5,
                          -2.5,
                          0.49999999999999994,  // the largest double below 0.5: x + 0.5 would round up
                          -0.49999999999999994,
                          4503599627370495.5,  // 2^52 - 0.5
                          4503599627370497.0,  // above 2^52 every double is an integer
                          9007199254740993.0,
                          9.2e18,
                          -9.2e18,
                          1e-300,
                          123456.49999999999,
                          123456.5};
  for (const double x : edges) {
    INFO(x);
    CHECK(round_half_away(x) == std::llround(x));
  }
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-20, 62);
  int mismatches = 0;
  for (int i = 0; i < 200000; ++i) {
    const double x = std::ldexp(unit(gen), exponent(gen));
    mismatches += round_half_away(x) == std::llround(x) ? 0 : 1;
  }
  CHECK(mismatches == 0);
  // Durations scale with it: half a picosecond away from zero.
  CHECK(Duration::from_ps(3).scaled(0.5).ps() == 2);
  CHECK(Duration::from_ps(-3).scaled(0.5).ps() == -2);
}

}  // namespace moesim
