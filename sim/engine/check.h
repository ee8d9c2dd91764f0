// MOESIM_CHECK: the one project macro, for broken internal invariants (never for bad user input,
// which is an exception at the edge where it enters).
#pragma once

#include <stdexcept>
#include <string>

namespace moesim {

// Thrown when an internal invariant breaks; the CLI reports it as an internal error.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Bad user input (scenario, trace, CLI): `where` names the JSON path or file:line that must change.
class InputError : public std::runtime_error {
 public:
  InputError(std::string where, const std::string& what)
      : std::runtime_error(where.empty() ? what : where + ": " + what), where_(std::move(where)) {}
  [[nodiscard]] const std::string& where() const { return where_; }

 private:
  std::string where_;
};

[[noreturn]] void fail_check(const char* cond, const std::string& msg, const char* file, int line);

}  // namespace moesim

#define MOESIM_CHECK(cond, msg)                                          \
  do {                                                                   \
    if (!(cond)) ::moesim::fail_check(#cond, (msg), __FILE__, __LINE__); \
  } while (false)
