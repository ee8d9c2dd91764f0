#include "sim/scenario/keyed_trace_reader.h"

#include <fstream>
#include <limits>

#include "sim/scenario/json_reader.h"

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
  if (!j.contains("hash_ids")) {
    // A row without block ids has no prefix identity (0 keyed blocks).
    r.prefix_ref = static_cast<std::uint32_t>(out.keys.keys.size());
    if (!out.rows.empty() && r.arrival < out.rows.back().arrival)
      throw InputError(where, "rows must be sorted by timestamp");
    out.rows.push_back(r);
    return;
  }
  if (!j["hash_ids"].is_array()) throw InputError(where, "\"hash_ids\" must be an array of block ids");
  const Json& ids = j["hash_ids"];
  const auto expected =
      static_cast<std::size_t>((r.prompt_tokens + kMooncakeBlockTokens - 1) / kMooncakeBlockTokens);
  if (ids.size() != expected) {
    throw InputError(where, "\"hash_ids\" has " + std::to_string(ids.size()) + " ids but input_length " +
                                std::to_string(r.prompt_tokens) + " makes " + std::to_string(expected) +
                                " blocks of 512 tokens");
  }
  auto& keys = out.keys.keys;
  if (keys.size() + ids.size() > std::numeric_limits<std::uint32_t>::max())
    throw InputError(where, "the trace has more than 4294967295 block ids");
  r.prefix_ref = static_cast<std::uint32_t>(keys.size());
  r.prefix_blocks = static_cast<std::uint32_t>(ids.size());
  for (const Json& id : ids) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0)
      throw InputError(where, "\"hash_ids\" must hold non-negative integers, got " + id.dump());
    keys.push_back(id.get<std::uint64_t>());
  }
  if (!out.rows.empty() && r.arrival < out.rows.back().arrival)
    throw InputError(where, "rows must be sorted by timestamp");
  out.rows.push_back(r);
}

}  // namespace

KeyedTrace read_mooncake_keyed(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(file, "cannot open the trace file");
  KeyedTrace out;
  out.keys.block_tokens = kMooncakeBlockTokens;
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line == "\r") continue;
    const std::string where = file + ":" + std::to_string(n);
    read_row(parse_json_text(line, where), where, out);
  }
  if (out.rows.empty()) throw InputError(file, "the trace has no requests");
  return out;
}

TraceBlockKeys attach_trace_keys(std::vector<RequestSpec>& rows, const std::string& file,
                                 const std::string& format) {
  if (format != "mooncake_jsonl") return {};
  KeyedTrace t = read_mooncake_keyed(file);
  MOESIM_CHECK(t.rows.size() == rows.size(), "the keyed reader and read_trace disagree on the row count");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    MOESIM_CHECK(rows[i].prompt_tokens == t.rows[i].prompt_tokens,
                 "the keyed reader and read_trace disagree");
    rows[i].prefix_ref = t.rows[i].prefix_ref;
    rows[i].prefix_blocks = t.rows[i].prefix_blocks;
  }
  return std::move(t.keys);
}

}  // namespace moesim
