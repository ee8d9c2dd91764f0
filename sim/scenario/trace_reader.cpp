#include "sim/scenario/trace_reader.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>

#include "sim/engine/check.h"
#include "sim/scenario/json_reader.h"
#include "sim/scenario/keyed_trace_reader.h"
#include "sim/scenario/line_reader.h"

namespace moesim {

namespace {

// The engine's clock is int64 picoseconds: 9.22e6 s (106 days). A row later than this into the trace
// cannot be represented; it is refused, never saturated or wrapped.
constexpr double kMaxTraceOffsetSeconds = 9e6;
// Token counts per request, as the scenario's length distributions allow.
constexpr std::int64_t kMaxTraceTokens = 100000000;

Time trace_time(double offset_s, const std::string& where) {
  if (!(offset_s >= 0 && offset_s <= kMaxTraceOffsetSeconds)) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "this row is %.6g s into the trace, beyond the %.3g s (104 days) that the simulator's "
                  "picosecond clock holds; split the trace",
                  offset_s, kMaxTraceOffsetSeconds);
    throw InputError(where, buf);
  }
  return Time::at(Duration::from_seconds(offset_s));
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

template <typename T>
bool parse_number(std::string_view s, T& out) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.remove_suffix(1);
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// "2023-11-16 18:15:46.6805900" -> seconds since the epoch.
bool parse_timestamp(std::string_view s, double& seconds) {
  int y = 0;
  unsigned mo = 0;
  unsigned d = 0;
  unsigned h = 0;
  unsigned mi = 0;
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') || s[13] != ':' ||
      s[16] != ':') {
    return false;
  }
  double sec = 0;
  if (!parse_number(s.substr(0, 4), y) || !parse_number(s.substr(5, 2), mo) ||
      !parse_number(s.substr(8, 2), d) || !parse_number(s.substr(11, 2), h) ||
      !parse_number(s.substr(14, 2), mi) || !parse_number(s.substr(17), sec)) {
    return false;
  }
  // Written so that a NaN second (from_chars reads "nan") fails too.
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || !(sec >= 0 && sec < 61)) return false;
  seconds = static_cast<double>(days_from_civil(y, mo, d)) * 86400.0 + h * 3600.0 + mi * 60.0 + sec;
  return true;
}

void add_row(std::vector<RequestSpec>& rows, const RequestSpec& r, const std::string& where) {
  if (rows.size() == kMaxTraceRows) {
    throw InputError(where, "the trace has more than " + std::to_string(kMaxTraceRows) +
                                " requests, more than a run holds; split the trace");
  }
  rows.push_back(r);
}

std::vector<RequestSpec> read_azure(LineReader& in) {
  std::vector<RequestSpec> rows;
  std::string line;
  double first = 0;
  while (in.next(line)) {
    const std::string where = in.where();
    if (in.line_number() == 1) {
      if (line.rfind("TIMESTAMP", 0) != 0) {
        throw InputError(where, "expected the header TIMESTAMP,ContextTokens,GeneratedTokens");
      }
      continue;
    }
    if (line.empty() || line == "\r") continue;
    const auto c1 = line.find(',');
    const auto c2 = c1 == std::string::npos ? std::string::npos : line.find(',', c1 + 1);
    if (c2 == std::string::npos) throw InputError(where, "expected 3 comma-separated fields");
    double t = 0;
    RequestSpec r;
    if (!parse_timestamp(std::string_view(line).substr(0, c1), t)) {
      throw InputError(where, "bad TIMESTAMP \"" + printable(line.substr(0, std::min<std::size_t>(c1, 80))) +
                                  "\" (expected YYYY-MM-DD HH:MM:SS.fff)");
    }
    if (!parse_number(std::string_view(line).substr(c1 + 1, c2 - c1 - 1), r.prompt_tokens) ||
        !parse_number(std::string_view(line).substr(c2 + 1), r.output_tokens)) {
      throw InputError(where, "ContextTokens and GeneratedTokens must be integers (3 columns)");
    }
    if (r.prompt_tokens < 0 || r.output_tokens < 0 || r.prompt_tokens > kMaxTraceTokens ||
        r.output_tokens > kMaxTraceTokens) {
      throw InputError(where, "token counts must be in [0, 1e8]");
    }
    if (rows.empty()) first = t;
    if (t < first) throw InputError(where, "timestamps must not go backwards");
    r.arrival = trace_time(t - first, where);
    if (!rows.empty() && r.arrival < rows.back().arrival)
      throw InputError(where, "rows must be sorted by time");
    add_row(rows, r, where);
  }
  return rows;
}

// Rows and, when a row has them, its hash ids (one pass: the keyed reader's checks on the ids).
KeyedTrace read_mooncake(LineReader& in) {
  KeyedTrace out;
  out.keys.block_tokens = kMooncakeBlockTokens;
  std::string line;
  while (in.next(line)) {
    if (line.empty() || line == "\r") continue;
    const std::string where = in.where();
    const Json j = parse_json_text(line, where);
    if (!j.is_object()) throw InputError(where, "expected one JSON object per line");
    RequestSpec r;
    for (const char* key : {"timestamp", "input_length", "output_length"}) {
      if (!j.contains(key) || !j[key].is_number())
        throw InputError(where, std::string("missing numeric field \"") + key + "\"");
    }
    const double ms = j["timestamp"].get<double>();
    if (ms < 0) throw InputError(where, "timestamp must be >= 0 ms");
    r.arrival = trace_time(ms * 1e-3, where);  // Mooncake timestamps count from the trace's start
    for (const char* key : {"input_length", "output_length"}) {
      const Json& v = j[key];
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > kMaxTraceTokens) {
        throw InputError(where, std::string("\"") + key + "\" must be an integer token count in [0, 1e8]");
      }
    }
    r.prompt_tokens = j["input_length"].get<std::int64_t>();
    r.output_tokens = j["output_length"].get<std::int64_t>();
    if (!out.rows.empty() && r.arrival < out.rows.back().arrival)
      throw InputError(where, "rows must be sorted by timestamp");
    append_hash_ids(j, where, r, out.keys);
    add_row(out.rows, r, where);
  }
  return out;
}

void check_format(const std::string& format, const std::string& format_path) {
  if (format != "azure_csv" && format != "mooncake_jsonl") {
    throw InputError(format_path,
                     "unknown trace format \"" + printable(format) + "\" (known: azure_csv, mooncake_jsonl)");
  }
}

}  // namespace

KeyedTrace read_trace_with_keys(const std::string& file, const std::string& format,
                                const std::string& format_path) {
  check_format(format, format_path);
  LineReader in(file);
  KeyedTrace t = format == "azure_csv" ? KeyedTrace{read_azure(in), {}} : read_mooncake(in);
  if (t.rows.empty()) throw InputError(file, "the trace has no requests");
  return t;
}

KeyedTrace read_mooncake_keyed(const std::string& file) {
  return read_trace_with_keys(file, "mooncake_jsonl", file);
}

std::vector<RequestSpec> read_trace(const std::string& file, const std::string& format,
                                    const std::string& format_path) {
  return read_trace_with_keys(file, format, format_path).rows;
}

}  // namespace moesim
