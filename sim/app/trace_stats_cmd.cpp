// `moesim trace-stats TRACE [--cache-blocks 1000,10000] [--json FILE]`: the ideal prefix-cache hit rate of a
// Mooncake trace and how close LRU caches of each size get, in blocks and tokens.
#include <iostream>

#include "sim/app/commands.h"
#include "sim/scenario/trace_stats.h"

namespace moesim {

void execute_trace_stats(const TraceStatsOptions& o) {
  const TraceStats s = compute_trace_stats(o.file, o.format, o.cache_blocks);
  if (o.json_file != "-") std::cout << format_trace_stats(s);
  if (!o.json_file.empty()) write_text_file(o.json_file, trace_stats_json(s));
}

}  // namespace moesim
