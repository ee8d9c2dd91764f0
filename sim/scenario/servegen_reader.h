// Reads ServeGen client data (github.com/alibaba/ServeGen data/<category>/<model>/): chunk-<id>-trace.csv
// (no header: window start s, rate req/s, cv, Gamma|Weibull|"", shape, scale) and chunk-<id>-dataset.json
// (per 6 h window, token-count distributions as Python dict literals), into a ServeGenWorkload; and the
// `workload.arrival = {"kind": "trace", "format": "servegen", ...}` keys. Errors name file:line or the key.
#pragma once

#include <string>
#include <vector>

#include "sim/scenario/json_reader.h"
#include "workloads/servegen_source.h"

namespace moesim {

// `path`: a folder (every chunk-<id>-trace.csv in it, by id) or one chunk-<id>-trace.csv (that client).
ServeGenWorkload read_servegen(const std::string& path);

// A Python dict literal {number: probability, ...} as a distribution over token counts ("{}" gives an empty
// one). `where` names the file and key for errors.
TokenPmf parse_token_pmf(const std::string& literal, const std::string& where);

// The requests of a ServeGen replay for today's trace path of the runtime (materialized; the lazy
// ServeGenSource is the runtime's eventual path). Reads the arrival's own keys `start_s` (0) and
// `rate_scale` (1) from `arrival`, and the seed and the limits (run.seed, run.requests, run.duration_s)
// from the scenario root, which the run section validates later.
std::vector<RequestSpec> servegen_trace_rows(JsonReader& arrival, const std::string& path, const Json& root);

}  // namespace moesim
