// The binary as a new user and an adversary meet it: every exception class reaches the top as one message
// and exit 2 (never 1), command-line mistakes say what to do, unwritable outputs are refused before any
// simulation runs, and calibrate without enough measurements says so.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_support.h"

using namespace moesim_test;

namespace {

std::string tiny(const char* name) { return std::string("scenarios/tiny/") + name; }

std::size_t lines(const std::string& s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

// One line "moesim: error: WHERE: what" with WHERE starting with `where`, and exit 2.
void require_refusal(const Result& r, const std::string& where) {
  INFO(r.err);
  REQUIRE(r.code == 2);
  REQUIRE(lines(r.err) == 1);
  REQUIRE(r.err.rfind("moesim: error: " + where, 0) == 0);
}

}  // namespace

TEST_CASE("command-line mistakes get one house-style message that says what to do") {
  TempDir t("moesim_cli_mistakes");
  const Result none = run_moesim(t, "");
  require_refusal(
      none,
      "command line: give a verb (run, validate, sweep, compare, plan, calibrate, trace-stats, search)");
  const Result verb = run_moesim(t, "frobnicate");
  require_refusal(verb, "command line: unknown verb \"frobnicate\"");
  const Result extra = run_moesim(t, "validate " + tiny("tiny_poisson_ep4.json") + " second.json");
  require_refusal(extra,
                  "validate: unexpected argument(s) second.json: validate takes at most one scenario file");
  REQUIRE(extra.err.find("second.json") != std::string::npos);
  REQUIRE(extra.err.find("moesim validate --help") != std::string::npos);
  const Result seed = run_moesim(t, "validate " + tiny("tiny_poisson_ep4.json") + " --seed abc");
  require_refusal(seed, "validate: ");
  REQUIRE(seed.err.find("--seed") != std::string::npos);
  // Ranges say what is accepted with an example, not CLI11's range with a 300-digit upper bound.
  const Result limit = run_moesim(t, "run " + tiny("tiny_poisson_ep4.json") + " --trace-limit-s -1");
  require_refusal(limit, "run: --trace-limit-s: \"-1\" is not a number >= 0, e.g. --trace-limit-s 60");
  const Result sizes =
      run_moesim(t, "plan " + tiny("tiny_poisson_ep4.json") + " --simulate --batch-sizes 8,0");
  require_refusal(sizes, "plan: --batch-sizes: \"0\" is not a number >= 1");
  REQUIRE(lines(limit.err + sizes.err) == 2);
  REQUIRE(limit.err.size() + sizes.err.size() < 400);
  // CLI11's generic texts are gone.
  for (const Result* r : {&none, &verb, &extra}) {
    REQUIRE(r->err.find("A subcommand is required") == std::string::npos);
    REQUIRE(r->err.find("Run with --help") == std::string::npos);
  }
}

TEST_CASE("--help says which verbs take --set instead of claiming all of them do") {
  TempDir t("moesim_cli_help");
  const Result help = run_moesim(t, "--help");
  REQUIRE(help.code == 0);
  REQUIRE(help.out.find("Every verb takes --set") == std::string::npos);
  REQUIRE(help.out.find("The scenario verbs (run, validate, sweep, compare, plan) take --set") !=
          std::string::npos);
  const Result cal = run_moesim(t, "calibrate --help");
  REQUIRE(cal.code == 0);
  REQUIRE(cal.out.find("--set") == std::string::npos);
}

TEST_CASE("an unwritable --out is refused before any simulation runs") {
  TempDir t("moesim_cli_out");
  { std::ofstream(t.dir / "file") << "a file, not a folder"; }
  const std::string bad = (t.dir / "file" / "out").string();
  const Result run = run_moesim(t, "run " + tiny("tiny_poisson_ep4.json") + " --out " + bad);
  require_refusal(run, bad + ": cannot create the output folder");
  REQUIRE(run.out.empty());  // no summary: nothing ran
  // A sweep refuses before its first point (no progress line on stderr, only the error).
  const Result sweep = run_moesim(
      t, "sweep " + tiny("tiny_poisson_ep4.json") + " --set deployment.max_batch_size=8,16 --out " + bad);
  require_refusal(sweep, bad + ": cannot create the output folder");
  REQUIRE(sweep.out.empty());
}

TEST_CASE("numbers beyond a double and absurd sizes exit 2 naming where, never 1 or a signal") {
  TempDir t("moesim_cli_numbers");
  require_refusal(run_moesim(t, "validate --set run.duration_s=1e309"),
                  "--set run.duration_s: unreadable JSON");
  { std::ofstream(t.dir / "big.json") << R"({"run": {"requests": 1e309}})"; }
  require_refusal(run_moesim(t, "validate " + (t.dir / "big.json").string()),
                  (t.dir / "big.json").string() + ": unreadable JSON");
  require_refusal(run_moesim(t, "validate --set cluster.nodes=2147483647"),
                  "cluster.nodes: must be an integer in");
  require_refusal(run_moesim(t, "validate --set cluster.nodes=1000000"),
                  "cluster.nodes: must be an integer in");
  require_refusal(run_moesim(t,
                             "validate scenarios/reference/topology_qwen3_235b_tp8.json --set "
                             "'experts={\"placement\":\"eplb\",\"eplb_groups\":4294967296}'"),
                  "experts.eplb_groups: must be an integer in");
  require_refusal(run_moesim(t, "validate --set cluster.nvlink_latency_us=1e300"),
                  "cluster.nvlink_latency_us: ");
  require_refusal(run_moesim(t, "validate --set cluster.gpu.bf16_tflops=1e-12"), "cluster.gpu.bf16_tflops: ");
  { std::ofstream(t.dir / "deep.json") << std::string(100000, '[') + std::string(100000, ']'); }
  require_refusal(run_moesim(t, "validate " + (t.dir / "deep.json").string()),
                  (t.dir / "deep.json").string() + ":1:65: JSON nested deeper than 64 levels");
}

TEST_CASE("calibrate without measurements, with one point or with an infinite timing is refused clearly") {
  TempDir t("moesim_cli_calibrate");
  const Result none = run_moesim(t, "calibrate");
  require_refusal(none, "calibrate: ");
  REQUIRE(none.err.find("--fit") != std::string::npos);
  const std::string header = "kernel,precision,experts,tokens_per_expert,hidden,inter,median_us\n";
  { std::ofstream(t.dir / "one.csv") << header << "expert_ffn,bf16,8,16,7168,2048,120.5\n"; }
  require_refusal(run_moesim(t, "calibrate --dry-run --fit " + (t.dir / "one.csv").string()),
                  "--fit: the measurements hold 1 timed point(s)");
  {
    std::ofstream(t.dir / "inf.csv") << header << "expert_ffn,bf16,8,16,7168,2048,120.5\n"
                                     << "expert_ffn,bf16,8,32,7168,2048,inf\n";
  }
  require_refusal(run_moesim(t, "calibrate --dry-run --fit " + (t.dir / "inf.csv").string()),
                  (t.dir / "inf.csv").string() + ":3: values must be positive and finite");
}

TEST_CASE("plan shows a deployment that does not fit as no KV pool, never a negative one") {
  TempDir t("moesim_cli_plan_pool");
  const std::string review = "scenarios/reference/review_deepseek_v3_8xh100.json";  // BF16 on 8 H100: no fit
  const Result text = run_moesim(t, "plan " + review);
  REQUIRE(text.code == 0);
  REQUIRE(text.out.find("KV pool -") == std::string::npos);
  const Result json = run_moesim(t, "plan " + review + " --json -");
  REQUIRE(json.code == 0);
  const double pool =
      nlohmann::json::parse(json.out)["deployment_memory"]["kv_pool_bytes_per_gpu"].get<double>();
  REQUIRE(pool < 0);
  char expected[128];
  std::snprintf(expected, sizeof expected,
                "no KV pool (weights, activations and overhead exceed usable memory by %.1f GB)",
                -pool / 1e9);
  REQUIRE(text.out.find(expected) != std::string::npos);
  // The KV table says why concurrency 1 does not fit: the weights, not the KV cache.
  REQUIRE(text.out.find("            1          0.1         0.01 no (weights)") != std::string::npos);
  // A context no request can have is refused by name instead of overflowing into "fits on 1 node".
  const Result huge = run_moesim(t, "plan " + review + " --context 100000000000000");
  require_refusal(huge, "plan: --context: ");
}

TEST_CASE("plan reviews every shipped reference scenario without an internal error") {
  // Tiered experts (loads queue in time order) and co-activation placement (needs its model) used to
  // exit 3 from plan although validate accepted them.
  TempDir t("moesim_cli_plan_all");
  for (const auto& e : fs::directory_iterator(fs::path(MOESIM_SOURCE_DIR) / "scenarios" / "reference")) {
    if (e.path().extension() != ".json") continue;
    const Result r = run_moesim(t, "plan " + e.path().string() + " -q");
    INFO(e.path().string() << ": " << r.err);
    REQUIRE(r.code == 0);
  }
}

TEST_CASE("invalid UTF-8 from --set or the command line is exit 2 naming where, in every verb") {
  TempDir t("moesim_cli_utf8");
  const std::string byte = "--set 'name=\xff'";  // the byte 0xFF, which no UTF-8 text holds
  require_refusal(run_moesim(t, "validate " + byte), "--set name: \"\\xFF\" is not valid UTF-8");
  require_refusal(run_moesim(t, "run " + tiny("tiny_poisson_ep4.json") + " -q --out " +
                                    (t.dir / "r").string() + " " + byte),
                  "--set name: ");
  // Replications and sweeps refuse it before any worker thread (which used to abort on it).
  require_refusal(run_moesim(t, "run " + tiny("tiny_poisson_ep4.json") + " --seeds 2 --out " +
                                    (t.dir / "s").string() + " " + byte),
                  "--set name: ");
  require_refusal(run_moesim(t, "sweep " + tiny("tiny_poisson_ep4.json") + " --set 'name=a,\xff' --out " +
                                    (t.dir / "w").string()),
                  "--set name: ");
  require_refusal(run_moesim(t, "plan " + tiny("tiny_poisson_ep4.json") + " " + byte), "--set name: ");
  // Any other argument: the command line, by position.
  require_refusal(run_moesim(t, "validate '\xff.json'"), "command line: argument 2 (\"\\xFF.json\")");
}

TEST_CASE("a scenario name that is not a plain file name never becomes the output path") {
  TempDir t("moesim_cli_name");
  const std::string tiny_json = tiny("tiny_poisson_ep4.json");
  for (const std::string name : {"../../escaped", "/tmp/abs", ".hidden", "a/b", ""}) {
    const Result r = run_moesim(t, "run " + tiny_json + " -q --set 'name=" + name + "'");
    INFO(name);
    require_refusal(r, "name: ");
    REQUIRE(r.err.find("--out") != std::string::npos);
  }
  REQUIRE_FALSE(fs::exists(fs::path(MOESIM_SOURCE_DIR) / ".." / "escaped"));
  require_refusal(
      run_moesim(t, "sweep " + tiny_json + " --set 'name=../x' --set deployment.max_batch_size=8,16"),
      "name: ");
  require_refusal(run_moesim(t, "compare " + tiny_json + " --set 'name=../x' --set run.requests=10,20"),
                  "name: ");
  // With --out any name runs.
  const Result ok =
      run_moesim(t, "run " + tiny_json + " -q --set 'name=../../escaped' --out " + (t.dir / "o").string());
  REQUIRE(ok.code == 0);
  REQUIRE(fs::exists(t.dir / "o" / "report.json"));
}

TEST_CASE("a duplicate key in a scenario file is refused naming the file and the key's path") {
  TempDir t("moesim_cli_dup");
  nlohmann::json j =
      nlohmann::json::parse(slurp(fs::path(MOESIM_SOURCE_DIR) / "scenarios/tiny/tiny_poisson_ep4.json"));
  std::string text = j.dump();
  const auto at = text.find("\"ep_size\":");
  REQUIRE(at != std::string::npos);
  text.insert(at, "\"ep_size\":2,");
  { std::ofstream(t.dir / "dup.json") << text; }
  require_refusal(run_moesim(t, "validate " + (t.dir / "dup.json").string()),
                  (t.dir / "dup.json").string() + ": deployment.ep_size: this key appears twice");
}

TEST_CASE("writes that fail (a full disk) exit non-zero naming the file, for traces, CSVs and trace-stats") {
  TempDir t("moesim_cli_full");
  const std::string tiny_json = tiny("tiny_poisson_ep4.json");
  require_refusal(
      run_moesim(t, "run " + tiny_json + " -q --out " + (t.dir / "a").string() + " --trace /dev/full"),
      "/dev/full: cannot write the trace file");
  // requests.csv is a link to /dev/full: every write to it fails.
  fs::create_directories(t.dir / "c");
  fs::create_symlink("/dev/full", t.dir / "c" / "requests.csv");
  require_refusal(run_moesim(t, "run " + tiny_json + " -q --requests-csv --out " + (t.dir / "c").string()),
                  (t.dir / "c" / "requests.csv").string() + ": cannot write the file");
  const std::string trace = "../shared/data/traces/mooncake_conversation_trace.jsonl";
  if (fs::exists(fs::path(MOESIM_SOURCE_DIR) / trace)) {
    require_refusal(run_moesim(t, "trace-stats " + trace + " --json /dev/full"),
                    "/dev/full: cannot write the file");
  }
  // The same outputs on a writable disk: exit 0.
  REQUIRE(run_moesim(t, "run " + tiny_json + " -q --requests-csv --out " + (t.dir / "d").string() +
                            " --trace " + (t.dir / "d.trace.json").string())
              .code == 0);
}

TEST_CASE("files are read once: a FIFO scenario validates and a sweep over a FIFO sees one text") {
  TempDir t("moesim_cli_fifo");
  const std::string src = std::string(MOESIM_SOURCE_DIR) + "/scenarios/tiny/tiny_poisson_ep4.json";
  const std::string fifo = (t.dir / "s.fifo").string();
  REQUIRE(run_moesim(t, "validate " + src).code == 0);
  const auto through_fifo = [&](const std::string& args) {
    fs::remove(fifo);
    return run_shell(t, "mkfifo '" + fifo + "' && (cat '" + src + "' > '" + fifo + "' &) && \"" +
                            MOESIM_BINARY + "\" " + args);
  };
  const Result v = through_fifo("validate " + fifo);
  INFO(v.err);
  REQUIRE(v.code == 0);
  REQUIRE(v.out.find(": OK") != std::string::npos);
  const Result s =
      through_fifo("sweep " + fifo + " --set run.requests=20,30 --out " + (t.dir / "w").string());
  INFO(s.err);
  REQUIRE(s.code == 0);
  // /dev/zero as a scenario is refused, not read until memory runs out.
  require_refusal(run_moesim(t, "validate /dev/zero"), "/dev/zero: byte 1 is a NUL byte");
}

TEST_CASE("plan reads run.seeds as the other verbs do, and NaN is not a capacity tolerance") {
  TempDir t("moesim_cli_seeds_nan");
  const std::string tiny_json = tiny("tiny_poisson_ep4.json");
  REQUIRE(run_moesim(t, "plan " + tiny_json + " -q --set run.seeds=3").code == 0);
  require_refusal(run_moesim(t, "plan " + tiny_json + " -q --set run.seeds=0"),
                  tiny_json + ": run.seeds: must be an integer");
  require_refusal(run_moesim(t, "run " + tiny_json + " --capacity --capacity-tol nan"),
                  "run: --capacity-tol: \"nan\" is not a number in [0.0001, 1]");
  require_refusal(run_moesim(t, "calibrate --dry-run --anomaly-tolerance nan"),
                  "calibrate: --anomaly-tolerance: ");
}
