#include "sim/scenario/json_reader.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace moesim {

Json parse_json_text(std::string_view text, const std::string& origin) {
  bool blank = true;
  for (const char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) {
      blank = false;
      break;
    }
  }
  if (blank) throw InputError(origin, "the file is empty; expected a JSON object");
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    // Turn the byte offset into line:column.
    std::size_t line = 1;
    std::size_t col = 1;
    for (std::size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string what = e.what();
    const auto pos = what.find("syntax error");
    throw InputError(origin + ":" + std::to_string(line) + ":" + std::to_string(col),
                     "malformed JSON: " + (pos == std::string::npos ? what : what.substr(pos)));
  }
}

Json load_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot open the file (does it exist and is it readable?)");
  std::ostringstream buf;
  buf << in.rdbuf();
  return parse_json_text(buf.str(), path);
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
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

bool JsonReader::has(std::string_view key) const { return j_.contains(std::string(key)); }

void JsonReader::fail(std::string_view key, const std::string& message) const {
  throw InputError(key.empty() ? path_ : path_of(key), message);
}

const Json& JsonReader::at(std::string_view key) {
  used_.insert(std::string(key));
  const auto it = j_.find(std::string(key));
  if (it == j_.end()) fail(key, "required key is missing");
  return *it;
}

const Json& JsonReader::raw(std::string_view key) { return at(key); }

double JsonReader::number(std::string_view key) {
  const Json& v = at(key);
  if (!v.is_number()) fail(key, "expected a number, got " + json_type_name(v) + " (" + v.dump() + ")");
  const double x = v.get<double>();
  if (!std::isfinite(x)) fail(key, "expected a finite number");
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
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    const double x = v.get<double>();
    if (std::floor(x) == x && std::abs(x) < 9e15) return static_cast<std::int64_t>(x);
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

double JsonReader::bounded(std::string_view key, double fallback, double lo, double hi) {
  const double x = number(key, fallback);
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
