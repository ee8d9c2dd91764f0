// `moesim trace-stats TRACE [--cache-blocks 1000,10000] [--json FILE]`: the ideal prefix-cache hit rate of a
// Mooncake trace and how close LRU caches of each size get, in blocks and tokens.
#include "sim/app/trace_stats_cmd.h"

#include <iostream>
#include <memory>

#include "sim/app/commands.h"
#include "sim/scenario/trace_stats.h"

namespace moesim {

namespace {

struct TraceStatsOptions {
  std::string file;
  std::string format = "mooncake_jsonl";
  std::vector<std::int64_t> cache_blocks;
  std::string json_file;
};

void trace_stats(const TraceStatsOptions& o) {
  const TraceStats s = compute_trace_stats(o.file, o.format, o.cache_blocks);
  if (o.json_file != "-") std::cout << format_trace_stats(s);
  if (!o.json_file.empty()) write_text_file(o.json_file, trace_stats_json(s));
}

}  // namespace

void add_trace_stats_command(CLI::App& app) {
  auto o = std::make_shared<TraceStatsOptions>();
  CLI::App* cmd = app.add_subcommand(
      "trace-stats",
      "Prefix-cache figures of a trace with block ids (Mooncake hash_ids): ideal hit rate with an infinite "
      "cache and the hit rate of LRU caches of the given sizes, in blocks and tokens");
  cmd->add_option("trace", o->file, "Trace file (JSON Lines with hash_ids)")->required();
  cmd->add_option("--format", o->format, "Trace format (mooncake_jsonl)");
  cmd->add_option("--cache-blocks", o->cache_blocks, "LRU cache sizes in the trace's blocks, e.g. 1000,10000")
      ->delimiter(',');
  cmd->add_option("--json", o->json_file,
                  "Write the figures as JSON to FILE ('-' for stdout, then no table)");
  cmd->callback([o] { trace_stats(*o); });
}

}  // namespace moesim
