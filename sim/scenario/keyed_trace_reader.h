// Mooncake FAST'25 JSON Lines traces with their prefix-block ids (`hash_ids`, one per 512-token block of
// the prompt, equal ids = reusable KV blocks), read into rows that index one flat key array (see
// TraceBlockKeys). Used by prefix-caching replays and by `moesim trace-stats`. Errors name file:line.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "workloads/request_source.h"

namespace moesim {

struct KeyedTrace {
  std::vector<RequestSpec> rows;
  TraceBlockKeys keys;
};

// Tokens per Mooncake hash id (Mooncake FAST25-release/README.md: "block size 512").
constexpr std::int64_t kMooncakeBlockTokens = 512;

// Block ids: 2^32 - 1 at most (rows index them with uint32), which is 32 GiB of keys.
inline constexpr std::size_t kMaxTraceKeys = 4294967295U;

// Sets r.prefix_ref / r.prefix_blocks from a Mooncake row's "hash_ids" (none: 0 keyed blocks), appending
// the ids to `keys`; InputError at `where` unless they are ceil(input_length / 512) non-negative integers.
void append_hash_ids(const nlohmann::json& j, const std::string& where, RequestSpec& r, TraceBlockKeys& keys);

}  // namespace moesim
