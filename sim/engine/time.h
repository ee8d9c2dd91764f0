// Simulated time: strong integer types in picoseconds. Conversion to seconds happens only at the edges
// (scenario parsing, reports). Integer time makes event order exact and reports byte-for-byte repeatable.
#pragma once

#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>

namespace moesim {

// std::llround (halves away from zero) for |x| < 2^63, inline: glibc's llround is a call, and the step
// planner rounds per GPU and layer (6% of a run). Exact: for |x| < 2^52 the truncation i and the fraction
// |x| - i are exact; from 2^52 on every double is an integer.
constexpr std::int64_t round_half_away(double x) {
  const double a = x < 0 ? -x : x;
  const auto i = static_cast<std::int64_t>(a);
  const std::int64_t r = i + (a - static_cast<double>(i) >= 0.5 ? 1 : 0);
  return x < 0 ? -r : r;
}

class Duration {
 public:
  constexpr Duration() = default;
  static constexpr Duration from_ps(std::int64_t ps) { return Duration(ps); }
  static constexpr Duration from_ns(double ns) { return from_seconds(ns * 1e-9); }
  static constexpr Duration from_us(double us) { return from_seconds(us * 1e-6); }
  static constexpr Duration from_ms(double ms) { return from_seconds(ms * 1e-3); }
  // Rounds to the nearest picosecond; saturates instead of overflowing.
  static constexpr Duration from_seconds(double s) {
    const double ps = s * 1e12;
    if (ps >= 9.2e18) return max();
    if (ps <= -9.2e18) return Duration(std::numeric_limits<std::int64_t>::min());
    return Duration(static_cast<std::int64_t>(ps < 0 ? ps - 0.5 : ps + 0.5));
  }
  static constexpr Duration zero() { return Duration(0); }
  static constexpr Duration max() { return Duration(std::numeric_limits<std::int64_t>::max()); }

  [[nodiscard]] constexpr std::int64_t ps() const { return ps_; }
  // Divisions, not multiplications by 1e-12: 50 ms prints as 0.05, not 0.049999999999999996.
  [[nodiscard]] constexpr double seconds() const { return static_cast<double>(ps_) / 1e12; }
  [[nodiscard]] constexpr double ms() const { return static_cast<double>(ps_) / 1e9; }
  [[nodiscard]] constexpr double us() const { return static_cast<double>(ps_) / 1e6; }

  constexpr auto operator<=>(const Duration&) const = default;
  constexpr Duration operator+(Duration o) const { return Duration(ps_ + o.ps_); }
  constexpr Duration operator-(Duration o) const { return Duration(ps_ - o.ps_); }
  constexpr Duration& operator+=(Duration o) {
    ps_ += o.ps_;
    return *this;
  }
  constexpr Duration& operator-=(Duration o) {
    ps_ -= o.ps_;
    return *this;
  }
  constexpr Duration operator*(std::int64_t k) const { return Duration(ps_ * k); }
  constexpr Duration operator/(std::int64_t k) const { return Duration(ps_ / k); }
  [[nodiscard]] constexpr Duration scaled(double f) const {
    return from_ps(round_half_away(static_cast<double>(ps_) * f));
  }

 private:
  constexpr explicit Duration(std::int64_t ps) : ps_(ps) {}
  std::int64_t ps_ = 0;
};

constexpr Duration max(Duration a, Duration b) { return a < b ? b : a; }
constexpr Duration min(Duration a, Duration b) { return a < b ? a : b; }

class Time {
 public:
  constexpr Time() = default;
  static constexpr Time zero() { return Time(); }
  static constexpr Time at(Duration since_start) { return Time(since_start); }
  static constexpr Time never() { return Time(Duration::max()); }

  [[nodiscard]] constexpr Duration since_start() const { return d_; }
  [[nodiscard]] constexpr std::int64_t ps() const { return d_.ps(); }
  [[nodiscard]] constexpr double seconds() const { return d_.seconds(); }

  constexpr auto operator<=>(const Time&) const = default;
  constexpr Time operator+(Duration d) const { return Time(d_ + d); }
  constexpr Time& operator+=(Duration d) {
    d_ += d;
    return *this;
  }
  constexpr Duration operator-(Time o) const { return d_ - o.d_; }

 private:
  constexpr explicit Time(Duration d) : d_(d) {}
  Duration d_;
};

}  // namespace moesim
