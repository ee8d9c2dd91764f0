#include "sim/scenario/keyed_trace_reader.h"

#include "sim/scenario/json_reader.h"

namespace moesim {

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

}  // namespace moesim
