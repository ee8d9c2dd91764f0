// Strict reading of JSON objects: every value is read through a JsonReader that knows its JSON path,
// checks types and ranges, and rejects keys nobody read (typos never become silent defaults).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "sim/engine/check.h"

namespace moesim {

using Json = nlohmann::json;

// The ranges every JSON input is held to before any arithmetic sees it (one place for all readers):
// nesting depth (the parser and every walk over a value recurse), the magnitude of any number (products of a
// few inputs stay far inside a double and, as seconds, inside the engine's int64 picoseconds), the exactness
// of integers, and the smallest positive quantity (a divisor that cannot blow a time up past the clock).
inline constexpr int kMaxJsonDepth = 64;
inline constexpr double kMaxNumber = 1e12;
inline constexpr std::int64_t kMaxInteger = std::int64_t{1} << 53;
inline constexpr double kMinPositive = 1e-9;

// The largest JSON file read whole (a scenario, a catalog, a ServeGen file): far above any real one, so a
// FIFO or /dev/zero given as a file is refused instead of filling memory.
inline constexpr std::size_t kMaxJsonFileBytes = std::size_t{256} << 20;

// True when `s` is well-formed UTF-8 (RFC 3629: shortest forms, no surrogates, at most U+10FFFF).
bool is_valid_utf8(std::string_view s);
// `s` fit for a one-line message: control characters (NUL among them) and bytes that are not UTF-8 as
// \xNN escapes, so that a message is never cut or made unprintable by what it quotes.
std::string printable(std::string_view s);
// Throws InputError(where) naming the byte offset of the first byte that is not UTF-8.
void require_utf8(std::string_view s, const std::string& where);

// Reads a whole file, at most `max_bytes` (one pass, so a FIFO or process substitution works); errors name
// the file.
std::string read_file_bounded(const std::string& path, std::size_t max_bytes, std::string_view what);
// Reads the whole file as JSON (once). Errors name the file (and line:column for syntax errors).
Json load_json_file(const std::string& path);
Json parse_json_text(std::string_view text, const std::string& origin);
// Any JSON value (also a bare number or string); errors as parse_json_text's, nesting bounded, a key given
// twice in one object refused with its JSON path (JSON would silently keep the last).
Json parse_json_value(std::string_view text, const std::string& origin);
// nullopt when `text` is not JSON syntax; an InputError when it is JSON beyond the limits above.
std::optional<Json> parse_json_if_valid(std::string_view text, const std::string& origin);

std::string json_type_name(const Json& j);

class JsonReader {
 public:
  JsonReader(const Json& j, std::string path);

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::string path_of(std::string_view key) const;
  [[nodiscard]] bool has(std::string_view key) const;
  // The object read (for a merge of objects, as deployment.pools does); marks nothing as read.
  [[nodiscard]] const Json& json() const { return j_; }

  double number(std::string_view key);
  double number(std::string_view key, double fallback);
  std::int64_t integer(std::string_view key);
  std::int64_t integer(std::string_view key, std::int64_t fallback);
  bool boolean(std::string_view key, bool fallback);
  std::string string(std::string_view key);
  std::string string(std::string_view key, const std::string& fallback);
  // A nested object (required, or nullopt when absent).
  JsonReader object(std::string_view key);
  std::optional<JsonReader> optional_object(std::string_view key);
  const Json& raw(std::string_view key);

  // Range helpers: throw InputError naming the key.
  double positive(std::string_view key);
  double positive(std::string_view key, double fallback);
  std::int64_t positive_integer(std::string_view key);
  std::int64_t positive_integer(std::string_view key, std::int64_t fallback);
  double fraction(std::string_view key, double fallback);  // in (0, 1]
  double non_negative(std::string_view key, double fallback);
  // Integers that index or size things: positive (or >= 0), at most 2^31 - 1.
  int positive_int(std::string_view key);
  int positive_int(std::string_view key, int fallback);
  int non_negative_int(std::string_view key, int fallback);
  // An integer in [lo, hi] (the range its consumers' arithmetic holds).
  int int_in(std::string_view key, int lo, int hi);  // required
  int int_in(std::string_view key, int fallback, int lo, int hi);
  std::int64_t integer_in(std::string_view key, std::int64_t fallback, std::int64_t lo, std::int64_t hi);
  // A required number in [lo, hi].
  double number_in(std::string_view key, double lo, double hi);
  // A duration in seconds (or ms, by the key's unit) that fits simulated time: 0 <= x <= max.
  double bounded(std::string_view key, double fallback, double lo, double hi);

  // Throws on any key that was not read; call once every key has been consumed.
  void finish() const;
  [[noreturn]] void fail(std::string_view key, const std::string& message) const;

 private:
  const Json& at(std::string_view key);
  double finite_number(std::string_view key);  // a finite JSON number, unbounded (callers bound it)

  const Json& j_;
  std::string path_;
  std::set<std::string, std::less<>> used_;
};

}  // namespace moesim
