#include "sim/scenario/json_reader.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace moesim {

namespace {

// line:column of byte `offset` (1-based) in `text`.
std::string line_column(std::string_view text, std::size_t offset) {
  std::size_t line = 1;
  std::size_t col = 1;
  for (std::size_t i = 0; i + 1 < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

// Refuses nesting deeper than kMaxJsonDepth before the parser (and every recursive walk after it) sees it.
void check_depth(std::string_view text, const std::string& origin) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) {
        throw InputError(origin + ":" + line_column(text, i + 1),
                         "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      }
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629, table 3-7 of the Unicode standard), 0 when
// the bytes there are not one.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = at(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no UTF-16 surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // at most U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  }
  return n;
}

// The JSON path of the value being parsed, kept from the parser's events, so that a key given twice in one
// object is refused by its path (nlohmann keeps the last value silently).
class DuplicateKeyCheck {
 public:
  explicit DuplicateKeyCheck(const std::string& origin) : origin_(origin) {}

  bool on_event(Json::parse_event_t event, const Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        frames_.emplace_back();
        frames_.back().object = event == Json::parse_event_t::object_start;
        break;
      case Json::parse_event_t::key:
        on_key(parsed.get<std::string>());
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        frames_.pop_back();
        element_done();
        break;
      case Json::parse_event_t::value:
        element_done();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool object = true;
    std::size_t index = 0;  // arrays: elements completed
    std::string key;        // objects: the key whose value is being parsed
    std::set<std::string, std::less<>> keys;
  };

  void element_done() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
  }

  void on_key(const std::string& key) {
    Frame& top = frames_.back();
    if (!top.keys.insert(key).second) {
      std::string path;
      for (std::size_t i = 0; i + 1 < frames_.size(); ++i) {
        if (frames_[i].object) {
          if (!path.empty()) path += '.';
          path += printable(frames_[i].key);
        } else {
          path += '[';
          path += std::to_string(frames_[i].index);
          path += ']';
        }
      }
      if (!path.empty()) path += '.';
      path += printable(key);
      throw InputError(origin_ + ": " + path,
                       "this key appears twice in the same object (JSON would keep only the last one "
                       "silently); keep one");
    }
    top.key = key;
  }

  const std::string& origin_;
  std::vector<Frame> frames_;
};

Json parse_checked(std::string_view text, const std::string& origin) {
  DuplicateKeyCheck check(origin);
  return Json::parse(text.begin(), text.end(),
                     [&check](int /*depth*/, Json::parse_event_t event, Json& parsed) {
                       return check.on_event(event, parsed);
                     });
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i);
    const auto c = static_cast<unsigned char>(s[i]);
    if (n == 0 || c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

void require_utf8(std::string_view s, const std::string& where) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i);
    if (n == 0) {
      throw InputError(where, "\"" + printable(s) + "\" is not valid UTF-8 (byte " + std::to_string(i + 1) +
                                  "); text must be UTF-8");
    }
    i += n;
  }
}

std::string read_file_bounded(const std::string& path, std::size_t max_bytes, std::string_view what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(path, "is a folder, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot open the file (does it exist and is it readable?)");
  std::string text;
  std::vector<char> chunk(std::size_t{1} << 16);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const auto got = static_cast<std::size_t>(in.gcount());
    // No JSON text holds a NUL byte (RFC 8259: control characters only escaped): a binary file or a
    // device is refused at its first one rather than after max_bytes of it.
    if (const void* nul = std::memchr(chunk.data(), '\0', got); nul != nullptr) {
      const auto at = text.size() + static_cast<std::size_t>(static_cast<const char*>(nul) - chunk.data());
      throw InputError(path, "byte " + std::to_string(at + 1) + " is a NUL byte: " + std::string(what) +
                                 " is not text (a binary file or a device?)");
    }
    text.append(chunk.data(), got);
    if (text.size() > max_bytes) {
      throw InputError(path, std::string(what) + " is larger than " + std::to_string(max_bytes >> 20) +
                                 " MiB, more than any real one; is it the right file?");
    }
  }
  if (in.bad()) throw InputError(path, "cannot read the file");
  return text;
}

Json parse_json_text(std::string_view text, const std::string& origin) {
  bool blank = true;
  for (const char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) {
      blank = false;
      break;
    }
  }
  if (blank) throw InputError(origin, "the file is empty; expected a JSON object");
  return parse_json_value(text, origin);
}

Json parse_json_value(std::string_view text, const std::string& origin) {
  check_depth(text, origin);
  try {
    return parse_checked(text, origin);
  } catch (const Json::parse_error& e) {
    std::string what = e.what();
    const auto pos = what.find("syntax error");
    throw InputError(origin + ":" + line_column(text, e.byte),
                     "malformed JSON: " + (pos == std::string::npos ? what : what.substr(pos)));
  } catch (const Json::exception& e) {
    // out_of_range.406: a number such as 1e309 that no double holds.
    std::string what = e.what();
    const auto pos = what.find("] ");
    throw InputError(origin, "unreadable JSON: " + (pos == std::string::npos ? what : what.substr(pos + 2)) +
                                 " (numbers must be finite and within the range of a double)");
  }
}

std::optional<Json> parse_json_if_valid(std::string_view text, const std::string& origin) {
  check_depth(text, origin);
  try {
    return parse_checked(text, origin);
  } catch (const Json::parse_error&) {
    return std::nullopt;
  } catch (const Json::exception&) {
    return parse_json_value(text, origin);  // throws the InputError that names the problem
  }
}

Json load_json_file(const std::string& path) {
  return parse_json_text(read_file_bounded(path, kMaxJsonFileBytes, "the JSON file"), path);
}

std::string json_type_name(const Json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number_integer() || j.is_number_unsigned()) return "an integer";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  return "an object";
}

JsonReader::JsonReader(const Json& j, std::string path) : j_(j), path_(std::move(path)) {
  if (!j_.is_object()) {
    throw InputError(path_.empty() ? "(top level)" : path_, "expected an object, got " + json_type_name(j_));
  }
}

std::string JsonReader::path_of(std::string_view key) const {
  return path_.empty() ? printable(key) : path_ + "." + printable(key);
}

bool JsonReader::has(std::string_view key) const { return j_.contains(std::string(key)); }

void JsonReader::fail(std::string_view key, const std::string& message) const {
  // A message may quote the value read (an unknown name): a NUL or control byte in it is escaped, so the
  // printed message is whole and on one line.
  throw InputError(key.empty() ? path_ : path_of(key), printable(message));
}

const Json& JsonReader::at(std::string_view key) {
  used_.insert(std::string(key));
  const auto it = j_.find(std::string(key));
  if (it == j_.end()) fail(key, "required key is missing");
  return *it;
}

const Json& JsonReader::raw(std::string_view key) { return at(key); }

double JsonReader::finite_number(std::string_view key) {
  const Json& v = at(key);
  if (!v.is_number()) fail(key, "expected a number, got " + json_type_name(v) + " (" + v.dump() + ")");
  const double x = v.get<double>();
  if (!std::isfinite(x)) fail(key, "expected a finite number");
  return x;
}

double JsonReader::number(std::string_view key) {
  const double x = finite_number(key);
  if (std::abs(x) > kMaxNumber) {
    const Json& v = at(key);
    fail(key, v.dump() +
                  " is out of range: numbers must lie within +-1e12 (the simulator's arithmetic is sized "
                  "for that)");
  }
  return x;
}

double JsonReader::number(std::string_view key, double fallback) {
  if (!has(key)) {
    used_.insert(std::string(key));
    return fallback;
  }
  return number(key);
}

std::int64_t JsonReader::integer(std::string_view key) {
  const Json& v = at(key);
  const auto too_big = [&] {
    fail(key, v.dump() + " is out of range: integers must lie within +-2^53 (9007199254740992)");
  };
  if (v.is_number_unsigned()) {
    if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxInteger)) too_big();
    return static_cast<std::int64_t>(v.get<std::uint64_t>());
  }
  if (v.is_number_integer()) {
    const auto x = v.get<std::int64_t>();
    if (x > kMaxInteger || x < -kMaxInteger) too_big();
    return x;
  }
  if (v.is_number_float()) {
    const double x = v.get<double>();
    if (std::isfinite(x) && std::floor(x) == x) {
      if (std::abs(x) > static_cast<double>(kMaxInteger)) too_big();
      return static_cast<std::int64_t>(x);
    }
  }
  fail(key, "expected an integer, got " + json_type_name(v) + " (" + v.dump() + ")");
}

std::int64_t JsonReader::integer(std::string_view key, std::int64_t fallback) {
  if (!has(key)) {
    used_.insert(std::string(key));
    return fallback;
  }
  return integer(key);
}

bool JsonReader::boolean(std::string_view key, bool fallback) {
  if (!has(key)) {
    used_.insert(std::string(key));
    return fallback;
  }
  const Json& v = at(key);
  if (!v.is_boolean()) fail(key, "expected true or false, got " + json_type_name(v) + " (" + v.dump() + ")");
  return v.get<bool>();
}

std::string JsonReader::string(std::string_view key) {
  const Json& v = at(key);
  if (!v.is_string()) fail(key, "expected a string, got " + json_type_name(v) + " (" + v.dump() + ")");
  return v.get<std::string>();
}

std::string JsonReader::string(std::string_view key, const std::string& fallback) {
  if (!has(key)) {
    used_.insert(std::string(key));
    return fallback;
  }
  return string(key);
}

JsonReader JsonReader::object(std::string_view key) { return JsonReader(at(key), path_of(key)); }

std::optional<JsonReader> JsonReader::optional_object(std::string_view key) {
  if (!has(key)) {
    used_.insert(std::string(key));
    return std::nullopt;
  }
  return object(key);
}

double JsonReader::positive(std::string_view key) {
  const double x = number(key);
  if (x <= 0) fail(key, "must be positive, got " + Json(x).dump());
  if (x < kMinPositive) {
    fail(key, "must be at least 1e-9 (in the unit the key's name gives), got " + Json(x).dump());
  }
  return x;
}

double JsonReader::positive(std::string_view key, double fallback) {
  return has(key) ? positive(key) : number(key, fallback);
}

std::int64_t JsonReader::positive_integer(std::string_view key) {
  const std::int64_t x = integer(key);
  if (x <= 0) fail(key, "must be a positive integer, got " + std::to_string(x));
  return x;
}

std::int64_t JsonReader::positive_integer(std::string_view key, std::int64_t fallback) {
  return has(key) ? positive_integer(key) : integer(key, fallback);
}

double JsonReader::fraction(std::string_view key, double fallback) {
  const double x = number(key, fallback);
  if (x <= 0 || x > 1) fail(key, "must be in (0, 1], got " + Json(x).dump());
  return x;
}

double JsonReader::non_negative(std::string_view key, double fallback) {
  const double x = number(key, fallback);
  if (x < 0) fail(key, "must be >= 0, got " + Json(x).dump());
  return x;
}

namespace {
constexpr std::int64_t kIntMax = 2147483647;
}  // namespace

int JsonReader::int_in(std::string_view key, int lo, int hi) {
  if (!has(key)) (void)integer(key);  // "required key is missing"
  return int_in(key, lo, lo, hi);
}

int JsonReader::int_in(std::string_view key, int fallback, int lo, int hi) {
  const std::int64_t x = integer(key, fallback);
  if (x < lo || x > hi) {
    fail(key, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                  std::to_string(x));
  }
  return static_cast<int>(x);
}

std::int64_t JsonReader::integer_in(std::string_view key, std::int64_t fallback, std::int64_t lo,
                                    std::int64_t hi) {
  const std::int64_t x = integer(key, fallback);
  if (x < lo || x > hi) {
    fail(key, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                  std::to_string(x));
  }
  return x;
}

int JsonReader::positive_int(std::string_view key) {
  const std::int64_t x = positive_integer(key);
  if (x > kIntMax) fail(key, "must be at most 2147483647, got " + std::to_string(x));
  return static_cast<int>(x);
}

int JsonReader::positive_int(std::string_view key, int fallback) {
  return has(key) ? positive_int(key) : static_cast<int>(integer(key, fallback));
}

int JsonReader::non_negative_int(std::string_view key, int fallback) {
  const std::int64_t x = integer(key, fallback);
  if (x < 0) fail(key, "must be >= 0, got " + std::to_string(x));
  if (x > kIntMax) fail(key, "must be at most 2147483647, got " + std::to_string(x));
  return static_cast<int>(x);
}

double JsonReader::number_in(std::string_view key, double lo, double hi) {
  return has(key) ? bounded(key, 0, lo, hi) : number(key);
}

double JsonReader::bounded(std::string_view key, double fallback, double lo, double hi) {
  // The key's own range is the tighter bound: it names what to change better than the general one.
  used_.insert(std::string(key));
  const double x = has(key) ? finite_number(key) : fallback;
  if (x < lo || x > hi) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "must be in [%g, %g], got %g", lo, hi, x);
    fail(key, buf);
  }
  return x;
}

void JsonReader::finish() const {
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    if (used_.find(it.key()) == used_.end()) {
      std::string known;
      for (const auto& k : used_) known += (known.empty() ? "" : ", ") + k;
      throw InputError(path_of(it.key()), "unknown key (known keys here: " + known + ")");
    }
  }
}

}  // namespace moesim
