// `moesim trace-stats`: what a keyed trace (Mooncake hash_ids) offers a prefix cache: requests, rate and
// lengths, the ideal (infinite-cache) hit rate and the hit rate of LRU caches of given sizes, as a table
// and as JSON.
#pragma once

#include <string>
#include <vector>

#include "sim/serving/offline/prefix_hit_analysis.h"

namespace moesim {

struct TraceStats {
  std::string file;
  std::int64_t requests = 0;
  double duration_s = 0;
  double mean_prompt_tokens = 0;
  double mean_output_tokens = 0;
  std::int64_t block_tokens = 0;
  PrefixHitResult ideal;
  std::vector<PrefixHitResult> lru;  // one per cache size, in the order asked
};

// Reads `file` (format "mooncake_jsonl": the only trace format with block ids) and analyses it; cache
// sizes in blocks of the trace's block size (each >= 1).
TraceStats compute_trace_stats(const std::string& file, const std::string& format,
                               const std::vector<std::int64_t>& cache_blocks);
std::string format_trace_stats(const TraceStats& s);
std::string trace_stats_json(const TraceStats& s);

}  // namespace moesim
