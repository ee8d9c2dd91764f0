#include "sim/scenario/keyed_trace_reader.h"

#include "sim/scenario/json_reader.h"
#include "sim/scenario/line_reader.h"

namespace moesim {

namespace {

void read_row(const Json& j, const std::string& where, KeyedTrace& out) {
  if (!j.is_object()) throw InputError(where, "expected one JSON object per line");
  for (const char* key : {"timestamp", "input_length", "output_length"}) {
    if (!j.contains(key) || !j[key].is_number())
      throw InputError(where, std::string("missing numeric field \"") + key + "\"");
  }
  RequestSpec r;
  const double ms = j["timestamp"].get<double>();
  if (!(ms >= 0 && ms <= 1e12)) throw InputError(where, "timestamp must be in [0, 1e12] ms");
  r.arrival = Time::at(Duration::from_ms(ms));
  for (const char* key : {"input_length", "output_length"}) {
    const Json& v = j[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 100000000) {
      throw InputError(where, std::string("\"") + key + "\" must be an integer token count in [0, 1e8]");
    }
  }
  r.prompt_tokens = j["input_length"].get<std::int64_t>();
  r.output_tokens = j["output_length"].get<std::int64_t>();
  if (!out.rows.empty() && r.arrival < out.rows.back().arrival)
    throw InputError(where, "rows must be sorted by timestamp");
  append_hash_ids(j, where, r, out.keys);
  if (out.rows.size() == kMaxTraceRows) {
    throw InputError(
        where, "the trace has more than " + std::to_string(kMaxTraceRows) + " requests; split the trace");
  }
  out.rows.push_back(r);
}

}  // namespace

void append_hash_ids(const Json& j, const std::string& where, RequestSpec& r, TraceBlockKeys& keys) {
  r.prefix_ref = static_cast<std::uint32_t>(keys.keys.size());
  r.prefix_blocks = 0;
  if (!j.contains("hash_ids")) return;  // a row without block ids has no prefix identity (0 keyed blocks)
  if (!j["hash_ids"].is_array()) throw InputError(where, "\"hash_ids\" must be an array of block ids");
  const Json& ids = j["hash_ids"];
  const auto expected =
      static_cast<std::size_t>((r.prompt_tokens + kMooncakeBlockTokens - 1) / kMooncakeBlockTokens);
  if (ids.size() != expected) {
    throw InputError(where, "\"hash_ids\" has " + std::to_string(ids.size()) + " ids but input_length " +
                                std::to_string(r.prompt_tokens) + " makes " + std::to_string(expected) +
                                " blocks of 512 tokens");
  }
  if (keys.keys.size() + ids.size() > kMaxTraceKeys)
    throw InputError(where, "the trace has more than " + std::to_string(kMaxTraceKeys) + " block ids");
  r.prefix_blocks = static_cast<std::uint32_t>(ids.size());
  for (const Json& id : ids) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0)
      throw InputError(where, "\"hash_ids\" must hold non-negative integers, got " + id.dump());
    keys.keys.push_back(id.get<std::uint64_t>());
  }
}

KeyedTrace read_mooncake_keyed(const std::string& file) {
  LineReader in(file);
  KeyedTrace out;
  out.keys.block_tokens = kMooncakeBlockTokens;
  std::string line;
  while (in.next(line)) {
    if (line.empty() || line == "\r") continue;
    const std::string where = in.where();
    read_row(parse_json_text(line, where), where, out);
  }
  if (out.rows.empty()) throw InputError(file, "the trace has no requests");
  return out;
}

}  // namespace moesim
