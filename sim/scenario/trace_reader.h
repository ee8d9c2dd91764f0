// Readers for recorded request traces (shared/data/traces): Azure LLM inference 2023 CSV
// (TIMESTAMP,ContextTokens,GeneratedTokens) and Mooncake FAST'25 JSON Lines (timestamp ms,
// input_length, output_length). Errors name file:line.
#pragma once

#include <string>
#include <vector>

#include "sim/scenario/keyed_trace_reader.h"
#include "workloads/request_source.h"

namespace moesim {

// `format` is "azure_csv" or "mooncake_jsonl"; `format_path` is the JSON path to blame for a bad format.
std::vector<RequestSpec> read_trace(const std::string& file, const std::string& format,
                                    const std::string& format_path);
// The same with each row's Mooncake block ids (hash_ids, checked by append_hash_ids), read in
// one pass; empty keys for azure_csv. Lines and rows are bounded (sim/scenario/line_reader.h).
KeyedTrace read_trace_with_keys(const std::string& file, const std::string& format,
                                const std::string& format_path);
// A Mooncake trace with its block ids: every row must have timestamp (ms), input_length, output_length, and
// hash_ids, when present, must hold ceil(input_length / 512) non-negative integers (a row without them has
// 0 keyed blocks). read_trace_with_keys(file, "mooncake_jsonl", ...).
KeyedTrace read_mooncake_keyed(const std::string& file);

}  // namespace moesim
