// `moesim trace-stats`: figures of a hand-made Mooncake trace as JSON, computed by hand, and bad input
// (a format without block ids, a bad cache size) exits 2 with one message.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/app/cli_support.h"

using namespace moesim_test;

TEST_CASE("trace-stats prints the ideal and LRU prefix hit rates of a Mooncake trace as JSON") {
  const TempDir t("trace_stats");
  const auto trace = t.dir / "t.jsonl";
  // Blocks of 512 tokens. Request 2 shares block 0 (512 tokens); request 3 repeats request 1 whole.
  std::ofstream(trace) << R"({"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]})"
                          "\n"
                       << R"({"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [0, 2]})"
                          "\n"
                       << R"({"timestamp": 20, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]})"
                          "\n";
  const Result r = run_moesim(t, "trace-stats " + trace.string() + " --cache-blocks 1,3 --json -");
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["requests"] == 3);
  CHECK(j["distinct_blocks"] == 3);
  CHECK(j["ideal"]["blocks"] == 6);
  CHECK(j["ideal"]["hit_blocks"] == 3);  // {0} for request 2, {0, 1} for request 3
  CHECK(j["ideal"]["tokens"] == 2600);
  CHECK(j["ideal"]["hit_tokens"] == 512 + 1000);
  // One block: only block 0 stays cached (a request's other blocks cannot be allocated while it is pinned).
  CHECK(j["lru"][0]["capacity_blocks"] == 1);
  CHECK(j["lru"][0]["hit_blocks"] == 2);
  // Three blocks hold everything: the ideal.
  CHECK(j["lru"][1]["hit_blocks"] == 3);
  const Result table = run_moesim(t, "trace-stats " + trace.string() + " --cache-blocks 3");
  REQUIRE(table.code == 0);
  CHECK(table.out.find("ideal (infinite)") != std::string::npos);
  CHECK(table.out.find("LRU 3 blocks") != std::string::npos);
}

TEST_CASE("trace-stats refuses a trace without block ids and a zero cache size") {
  const TempDir t("trace_stats_bad");
  const Result azure = run_moesim(t, "trace-stats x.csv --format azure_csv");
  CHECK(azure.code == 2);
  CHECK(azure.err.find("moesim: error: --format: \"azure_csv\" has no prefix-block ids") == 0);
  const Result zero = run_moesim(t, "trace-stats x.jsonl --cache-blocks 0");
  CHECK(zero.code == 2);
  CHECK(zero.err.find("--cache-blocks: each size must be in [1, 2147483647]") != std::string::npos);
}
