// Mooncake FAST'25 JSON Lines traces with their prefix-block ids (`hash_ids`, one per 512-token block of
// the prompt, equal ids = reusable KV blocks), read into rows that index one flat key array (see
// TraceBlockKeys). Used by prefix-caching replays and by `moesim trace-stats`. Errors name file:line.
#pragma once

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

// Reads every row; each must have timestamp (ms), input_length, output_length, and hash_ids, when present,
// must hold ceil(input_length / 512) non-negative integers (a row without them has 0 keyed blocks).
KeyedTrace read_mooncake_keyed(const std::string& file);

// Gives the rows of a trace already read by read_trace their Mooncake block ids (prefix_ref,
// prefix_blocks) and returns the key array; an empty TraceBlockKeys for formats without ids. The rows must
// be the file's, in order.
TraceBlockKeys attach_trace_keys(std::vector<RequestSpec>& rows, const std::string& file,
                                 const std::string& format);

}  // namespace moesim
