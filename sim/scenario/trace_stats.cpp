#include "sim/scenario/trace_stats.h"

#include <cstdio>
#include <limits>

#include "sim/scenario/json_reader.h"
#include "sim/scenario/trace_reader.h"

namespace moesim {

TraceStats compute_trace_stats(const std::string& file, const std::string& format,
                               const std::vector<std::int64_t>& cache_blocks) {
  if (format != "mooncake_jsonl") {
    throw InputError("--format", "\"" + format +
                                     "\" has no prefix-block ids; trace-stats reads mooncake_jsonl traces "
                                     "(hash_ids per 512-token block)");
  }
  for (const auto c : cache_blocks) {
    if (c < 1 || c > std::numeric_limits<std::int32_t>::max())
      throw InputError("--cache-blocks",
                       "each size must be in [1, 2147483647] blocks, got " + std::to_string(c));
  }
  const KeyedTrace t = read_mooncake_keyed(file);
  TraceStats s;
  s.file = file;
  s.requests = static_cast<std::int64_t>(t.rows.size());
  s.duration_s = (t.rows.back().arrival - t.rows.front().arrival).seconds();
  double prompt = 0;
  double output = 0;
  for (const auto& r : t.rows) {
    prompt += static_cast<double>(r.prompt_tokens);
    output += static_cast<double>(r.output_tokens);
  }
  s.mean_prompt_tokens = prompt / static_cast<double>(s.requests);
  s.mean_output_tokens = output / static_cast<double>(s.requests);
  s.block_tokens = t.keys.block_tokens;
  s.ideal = ideal_prefix_hits(t.rows, t.keys);
  for (const auto c : cache_blocks)
    s.lru.push_back(lru_prefix_hits(t.rows, t.keys, static_cast<std::int32_t>(c)));
  return s;
}

std::string format_trace_stats(const TraceStats& s) {
  std::string out;
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "%s\n  %lld requests over %.0f s (%.2f req/s), prompt mean %.0f tokens, output mean %.0f tokens\n"
      "  %lld prompt blocks of %lld tokens, %lld distinct\n\n",
      s.file.c_str(), static_cast<long long>(s.requests), s.duration_s,
      s.duration_s > 0 ? double(s.requests) / s.duration_s : 0.0, s.mean_prompt_tokens, s.mean_output_tokens,
      static_cast<long long>(s.ideal.blocks), static_cast<long long>(s.block_tokens),
      static_cast<long long>(s.ideal.distinct_blocks));
  out += buf;
  std::snprintf(buf, sizeof buf, "  %-22s %14s %14s %16s\n", "prefix cache", "block hits", "token hits",
                "of ideal (tokens)");
  out += buf;
  const auto row = [&](const std::string& name, const PrefixHitResult& r) {
    std::snprintf(buf, sizeof buf, "  %-22s %13.1f%% %13.1f%% %15.1f%%\n", name.c_str(),
                  100.0 * r.block_hit_rate(), 100.0 * r.token_hit_rate(),
                  s.ideal.hit_tokens > 0 ? 100.0 * double(r.hit_tokens) / double(s.ideal.hit_tokens) : 0.0);
    out += buf;
  };
  row("ideal (infinite)", s.ideal);
  for (const auto& r : s.lru) {
    std::snprintf(buf, sizeof buf, "LRU %lld blocks", static_cast<long long>(r.capacity_blocks));
    row(buf, r);
  }
  return out;
}

std::string trace_stats_json(const TraceStats& s) {
  const auto result = [](const PrefixHitResult& r) {
    Json j{{"blocks", r.blocks},
           {"hit_blocks", r.hit_blocks},
           {"tokens", r.tokens},
           {"hit_tokens", r.hit_tokens},
           {"block_hit_rate", r.block_hit_rate()},
           {"token_hit_rate", r.token_hit_rate()}};
    if (r.capacity_blocks > 0) j["capacity_blocks"] = r.capacity_blocks;
    return j;
  };
  Json j{{"file", s.file},
         {"requests", s.requests},
         {"duration_s", s.duration_s},
         {"mean_prompt_tokens", s.mean_prompt_tokens},
         {"mean_output_tokens", s.mean_output_tokens},
         {"block_tokens", s.block_tokens},
         {"distinct_blocks", s.ideal.distinct_blocks},
         {"ideal", result(s.ideal)},
         {"lru", Json::array()}};
  for (const auto& r : s.lru) j["lru"].push_back(result(r));
  return j.dump(2) + "\n";
}

}  // namespace moesim
