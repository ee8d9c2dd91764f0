// Mutation fuzzer of the moesim binary: seeded mutations of every shipped scenario, of the shared traces and
// of command lines, each run as `moesim validate|run|plan|...` with a timeout. A case fails on a signal, an
// exit code other than 0 or 2, a hang, or a refusal whose message names no location ("moesim: error: WHERE:
// what"). Usage: moesim_fuzz --binary PATH --source DIR --shared DIR [--seed N] [--cases N] [--jobs N]
// [--timeout-s S] [--only CASE] [--keep DIR]; MOESIM_FUZZ_SEED / MOESIM_FUZZ_CASES override the defaults.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// SplitMix64: a tiny, portable generator so that (seed, case) names one case on every machine.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }
  bool chance(int percent) { return below(100) < static_cast<std::size_t>(percent); }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }

 private:
  std::uint64_t s_;
};

struct Options {
  std::string binary;
  fs::path source;
  fs::path shared;
  std::uint64_t seed = 1;
  std::size_t cases = 2000;
  unsigned jobs = 2;
  // A hang never ends; a valid mutant may simulate for a while (about 1 in 10,000 takes 16 s of an idle
  // core, and on a loaded machine 20 s was exceeded): the margin keeps slow-but-finite runs from being
  // reported as hangs.
  double timeout_s = 60;
  long only = -1;
  fs::path keep;
};

struct Corpus {
  std::vector<std::pair<std::string, Json>> scenarios;  // path relative to the source dir, parsed
  struct Trace {
    std::string format;
    std::vector<std::string> lines;
  };
  std::vector<Trace> traces;
};

// A raw token spliced into the JSON text where a placeholder string stands (numbers no double holds).
const std::vector<std::string> kRawNumbers = {"1e309",      "-1e309",
                                              "1e-400",     "123456789012345678901234567890",
                                              "-0",         "0.0",
                                              "1E+308",     "18446744073709551616",
                                              "4294967296", "-9223372036854775809"};
const std::vector<Json> kExtremes = {0,
                                     -1,
                                     1,
                                     2,
                                     0.5,
                                     -0.5,
                                     1e-12,
                                     1e-300,
                                     1e300,
                                     -1e300,
                                     1.7976931348623157e308,
                                     2147483647,
                                     2147483648LL,
                                     4294967296LL,
                                     -2147483648LL,
                                     9007199254740993LL,
                                     std::numeric_limits<std::int64_t>::max(),
                                     std::numeric_limits<std::int64_t>::min(),
                                     std::numeric_limits<std::uint64_t>::max(),
                                     1000000,
                                     1e15,
                                     "nan",
                                     "inf",
                                     "-inf",
                                     "1e309",
                                     "",
                                     true,
                                     nullptr,
                                     Json::array(),
                                     Json::object(),
                                     Json::array({1, 2, 3}),
                                     Json{{"kind", "uniform"}},
                                     "h200-sxm",
                                     "zipf"};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

Corpus load_corpus(const Options& o) {
  Corpus c;
  for (const auto& e : fs::recursive_directory_iterator(o.source / "scenarios")) {
    if (!e.is_regular_file() || e.path().extension() != ".json") continue;
    const std::string rel = fs::relative(e.path(), o.source).string();
    if (rel.find("catalog") != std::string::npos) continue;
    c.scenarios.emplace_back(rel, Json::parse(slurp(e.path())));
  }
  std::sort(c.scenarios.begin(), c.scenarios.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::vector<std::pair<std::string, std::string>> traces = {
      {"data/traces/azure_llm_2023_conv/AzureLLMInferenceTrace_conv.csv", "azure_csv"},
      {"data/traces/azure_llm_2023_code/AzureLLMInferenceTrace_code.csv", "azure_csv"},
      {"data/traces/mooncake_fast25_synthetic/synthetic_trace.jsonl", "mooncake_jsonl"},
      {"data/traces/mooncake_fast25_conversation/conversation_trace.jsonl", "mooncake_jsonl"}};
  for (const auto& [rel, format] : traces) {
    std::ifstream f(o.shared / rel);
    if (!f) continue;
    Corpus::Trace t{format, {}};
    std::string line;
    while (t.lines.size() < 120 && std::getline(f, line)) t.lines.push_back(line);
    c.traces.push_back(std::move(t));
  }
  return c;
}

// Every JSON pointer in `j` (objects and arrays included), for picking a node to mutate.
void pointers(const Json& j, const Json::json_pointer& at, std::vector<Json::json_pointer>& out) {
  out.push_back(at);
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) pointers(it.value(), at / it.key(), out);
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) pointers(j[i], at / i, out);
  }
}

// `deepest` 100,000 in files; 20,000 on the command line (one argument is at most 128 KiB on Linux).
std::string deep_nesting(Rng& rng, std::size_t deepest = 100000) {
  const std::size_t depth = rng.chance(50) ? deepest : 60 + rng.below(20);
  const bool arrays = rng.chance(50);
  std::string s;
  for (std::size_t i = 0; i < depth; ++i) s += arrays ? "[" : "{\"a\":";
  s += "1";
  for (std::size_t i = 0; i < depth; ++i) s += arrays ? "]" : "}";
  return s;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to);

struct Case {
  std::vector<std::string> args;                           // after the binary
  std::vector<std::pair<std::string, std::string>> files;  // name in the case folder, contents
  std::string label;
};

// Mutates a scenario document; raw tokens go into `raw` and are spliced into the text later.
void mutate_json(Json& doc, Rng& rng, std::vector<std::string>& raw) {
  const int n = 1 + static_cast<int>(rng.below(3));
  for (int m = 0; m < n; ++m) {
    std::vector<Json::json_pointer> ptrs;
    pointers(doc, Json::json_pointer(), ptrs);
    const auto& ptr = ptrs[rng.below(ptrs.size())];
    if (ptr.empty()) continue;
    Json& node = doc[ptr];
    switch (rng.below(8)) {
      case 0:
      case 1:
        node = rng.pick(kExtremes);
        break;
      case 2:  // scale a number by a huge or tiny factor, or negate it
        if (node.is_number()) {
          const double f = rng.pick(std::vector<double>{1e6, 1e12, 1e-9, -1, 1e300, 0});
          node = node.get<double>() * f;
        } else {
          node = rng.pick(kExtremes);
        }
        break;
      case 3: {  // raw number text
        raw.push_back(rng.pick(kRawNumbers));
        node = "@@RAW" + std::to_string(raw.size() - 1) + "@@";
        break;
      }
      case 4: {  // delete the key (or array element)
        Json& parent = doc[ptr.parent_pointer()];
        if (parent.is_object()) {
          parent.erase(ptr.back());
        } else if (parent.is_array() && !parent.empty()) {
          parent.erase(parent.begin());
        }
        break;
      }
      case 5: {  // type swap
        if (node.is_number()) {
          node = node.dump();
        } else if (node.is_string()) {
          node = Json::array({node});
        } else if (node.is_object()) {
          node = Json::array();
        } else {
          node = 7;
        }
        break;
      }
      case 6:  // deep nesting
        raw.push_back(deep_nesting(rng));
        node = "@@RAW" + std::to_string(raw.size() - 1) + "@@";
        break;
      default: {  // unknown or duplicated key
        Json& parent = doc[ptr.parent_pointer()];
        if (parent.is_object()) parent[rng.chance(50) ? "unknown_key" : ptr.back() + "_"] = 1;
        break;
      }
    }
  }
}

std::string splice(std::string text, const std::vector<std::string>& raw) {
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const std::string ph = "\"@@RAW" + std::to_string(i) + "@@\"";
    for (auto pos = text.find(ph); pos != std::string::npos; pos = text.find(ph, pos + raw[i].size()))
      text.replace(pos, ph.size(), raw[i]);
  }
  return text;
}

// Byte-level damage to a text: truncation, a flipped byte, a duplicated key line, garbage.
std::string damage(std::string text, Rng& rng) {
  if (text.empty()) return text;
  switch (rng.below(4)) {
    case 0:
      return text.substr(0, rng.below(text.size()));
    case 1:
      text[rng.below(text.size())] = static_cast<char>(rng.below(256));
      return text;
    case 2: {
      const auto pos = text.find("\": ");
      if (pos != std::string::npos) {
        const auto start = text.rfind('"', pos - 1);
        const auto end = text.find_first_of(",}", pos);
        if (start != std::string::npos && end != std::string::npos)
          text.insert(start, text.substr(start, end - start) + ", ");
      }
      return text;
    }
    default:
      return text.insert(rng.below(text.size()), "\x01\xff\"{[,:");
  }
}

// The short-run limits appended to every `run`, so that each case takes well under a second.
void short_run(std::vector<std::string>& args) {
  for (const char* s : {"run.duration_s=2", "run.requests=20", "run.warmup_s=0"}) {
    args.push_back("--set");
    args.push_back(s);
  }
}

// The keys of the newer mechanisms (pools, migration, prefix caching, speculative decoding, engines,
// redundant experts, expert TP, comm SMs, ServeGen replays, link efficiencies, Zipf popularity), with values
// at and past their ranges: each --set of one is a case.
const std::vector<std::pair<std::string, std::vector<std::string>>> kNewKeys = {
    {"deployment.pools",
     {"[{\"role\":\"prefill\",\"instances\":1},{\"role\":\"decode\",\"instances\":1}]",
      "[{\"role\":\"both\",\"instances\":2147483647}]", "[{\"role\":\"prefill\",\"instances\":1}]",
      "[{\"role\":\"both\",\"instances\":1,\"ep_size\":2147483647}]", "[]", "{}"}},
    {"deployment.kv_migration",
     {"{\"imbalance_ratio\":1.0000001,\"check_every_s\":1e-6}", "{\"imbalance_ratio\":1e300}",
      "{\"max_requests_per_check\":2147483647}"}},
    {"deployment.prefix_caching", {"true", "1", "\"yes\""}},
    {"deployment.kv_block_tokens", {"1", "3", "1048576", "0", "24"}},
    {"deployment.speculative",
     {"\"deepseek-v3-mtp\"",
      "{\"draft_tokens\":16,\"acceptance\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],\"draft\":\"mtp\"}",
      "{\"draft_tokens\":1,\"acceptance\":[0.5],\"draft\":{\"model\":\"kimi-k2\"}}",
      "{\"draft_tokens\":1,\"acceptance\":[1e-300],\"draft\":\"mtp\"}"}},
    {"deployment.engine", {"\"sglang\"", "\"trtllm\"", "\"pytorch_loop\"", "\"\\u0000\""}},
    {"deployment.expert_tp_size", {"2", "3", "4096", "0"}},
    {"deployment.comm_sms", {"0", "131", "1000000"}},
    {"deployment.two_batch_overlap", {"true"}},
    {"deployment.attention", {"{\"dp\":65536,\"tp\":65536}", "{\"tp\":2147483647}"}},
    {"deployment.max_waiting_requests", {"1", "9007199254740992"}},
    {"experts.redundant_experts", {"1", "32", "2147483647"}},
    {"experts.placement", {"\"eplb\"", "\"coactivation\""}},
    {"workload.expert_popularity",
     {"{\"kind\":\"zipf\",\"exponent\":800}", "{\"kind\":\"zipf\",\"exponent\":20}",
      "{\"kind\":\"pareto\",\"top_fraction\":1e-9}"}},
    {"workload.arrival.rate_per_s", {"1e12", "1e-6", "1e6"}},
    {"workload.arrival",
     {"{\"kind\":\"trace\",\"format\":\"servegen\",\"file\":\"@@SHARED@@/data/traces/servegen_deepseek_r1\","
      "\"rate_scale\":1e6}",
      "{\"kind\":\"trace\",\"format\":\"servegen\",\"file\":\"@@SHARED@@/data/traces/servegen_deepseek_r1\","
      "\"start_s\":86399}",
      "{\"kind\":\"trace\",\"format\":\"mooncake_jsonl\",\"file\":\"/dev/zero\"}",
      "{\"kind\":\"trace\",\"format\":\"azure_csv\",\"file\":\"/dev/null\"}",
      "{\"kind\":\"trace\",\"format\":\"azure_csv\",\"file\":\"/tmp\"}"}},
    {"cluster.fabric",
     {"{\"base\":\"hgx-h100-8x400g\",\"all_to_all_kernels\":{\"high_throughput\":{\"nvlink_efficiency\":1e-"
      "12}}}",
      "{\"base\":\"hgx-h100-8x400g\",\"nvlink_copy_efficiency\":1e-12}"}},
    {"cluster.gpu.mem_efficiency", {"1e-12", "1"}},
    {"name", {"../../escaped", "/tmp/abs", ".hidden", "\"\"", "a\\u0000b"}},
};

// Text that is not plain: bytes that are not UTF-8, control characters, a NUL escape, very long text.
std::string hostile_text(Rng& rng) {
  switch (rng.below(6)) {
    case 0:
      return "\xff";
    case 1:
      return "a\xc0\xaf"
             "b";  // overlong
    case 2:
      return "\xed\xa0\x80";  // a surrogate
    case 3:
      return "tab\there\x01";
    case 4:
      return std::string(100000, 'x');
    default:
      return "caf\xc3\xa9";  // valid UTF-8
  }
}

std::string set_value(Rng& rng) {
  if (rng.chance(15)) return rng.pick(kRawNumbers);
  if (rng.chance(10)) return deep_nesting(rng, 20000);
  if (rng.chance(10))
    return rng.pick(std::vector<std::string>{"nan", "inf", "-inf", "NaN", "1e309x", "{", "[1,", "\"\"",
                                             "{\"placement\":\"eplb\",\"eplb_groups\":4294967296}"});
  return rng.pick(kExtremes).dump();
}

Case make_case(const Corpus& c, const Options& o, Rng& rng) {
  Case k;
  const auto& [rel, base] = c.scenarios[rng.below(c.scenarios.size())];
  const fs::path scenario_dir = (o.source / rel).parent_path();
  const std::size_t kind = rng.below(100);
  const std::string verb = rng.pick(std::vector<std::string>{"validate", "validate", "run", "run", "plan"});
  auto verb_args = [&](const std::string& file) {
    std::vector<std::string> a{verb, file};
    if (verb == "run") {
      a.insert(a.end(), {"-q", "--out", "@@CASE@@/out"});
      short_run(a);
    }
    return a;
  };
  if (kind >= 45 && kind < 55) {  // a --set of a newer key, at and past its range
    const auto& [key, values] = kNewKeys[rng.below(kNewKeys.size())];
    k.label = "new key " + key + " on " + rel;
    k.args = verb_args((o.source / rel).string());
    k.args.insert(k.args.begin() + 2,
                  {"--set", key + "=" + replace_all(rng.pick(values), "@@SHARED@@", o.shared.string())});
    return k;
  }
  if (kind >= 55 && kind < 62) {  // hostile text: in a --set value or path, in a key, in a file name
    k.label = "text on " + rel;
    k.args = verb_args((o.source / rel).string());
    const std::string text = hostile_text(rng);
    switch (rng.below(4)) {
      case 0:
        k.args.insert(k.args.begin() + 2, {"--set", "name=" + text});
        break;
      case 1:
        k.args.insert(k.args.begin() + 2, {"--set", "sla." + text + "=1"});
        break;
      case 2: {  // a scenario file with a NUL key, a duplicate key or invalid bytes in a string
        Json doc = base;
        std::string body = doc.dump();
        const std::vector<std::string> inserts = {"\"na\\u0000me\":1,", "\"name\":\"a\",\"name\":\"b\",",
                                                  "\"description\":\"" + text + "\","};
        body.insert(1, rng.pick(inserts));
        k.files.emplace_back("@@CASE@@/scenario.json", body);
        k.args[1] = "@@CASE@@/scenario.json";
        break;
      }
      default:  // the scenario path itself
        k.args[1] = rng.pick(std::vector<std::string>{"/dev/zero", "/dev/null", "/tmp", "@@CASE@@/" + text});
        break;
    }
    return k;
  }
  if (kind < 45) {  // mutated scenario document, its relative trace path made absolute
    Json doc = base;
    if (doc.contains("workload") && doc["workload"].contains("arrival") &&
        doc["workload"]["arrival"].contains("file") && doc["workload"]["arrival"]["file"].is_string()) {
      const fs::path f = doc["workload"]["arrival"]["file"].get<std::string>();
      if (f.is_relative())
        doc["workload"]["arrival"]["file"] = (scenario_dir / f).lexically_normal().string();
    }
    std::vector<std::string> raw;
    mutate_json(doc, rng, raw);
    std::string text = splice(doc.dump(2), raw);
    if (rng.chance(15)) text = damage(text, rng);
    k.label = "scenario " + rel;
    k.files.emplace_back("@@CASE@@/scenario.json", text);
    k.args = verb_args("@@CASE@@/scenario.json");
  } else if (kind < 72) {  // --set mutations of a shipped scenario (kinds 62-71)
    std::vector<Json::json_pointer> ptrs;
    pointers(base, Json::json_pointer(), ptrs);
    k.label = "--set on " + rel;
    k.args = verb_args((o.source / rel).string());
    const int n = 1 + static_cast<int>(rng.below(2));
    for (int i = 0; i < n; ++i) {
      std::string path = ptrs[rng.below(ptrs.size())].to_string();
      if (path.empty() || path.find_first_of("0123456789") != std::string::npos) path = "/run/seed";
      path = path.substr(1);
      std::replace(path.begin(), path.end(), '/', '.');
      if (rng.chance(10))
        path = rng.pick(std::vector<std::string>{"experts", "cluster.nodes", "a..b", "", "=",
                                                 "workload.expert_popularity.iterations"});
      // The run limits come last on the command line, so --set run.* mutations go before them.
      k.args.insert(k.args.begin() + 2, {"--set", path + "=" + set_value(rng)});
    }
  } else if (kind < 88 && !c.traces.empty()) {  // mutated trace lines
    const auto& t = c.traces[rng.below(c.traces.size())];
    std::vector<std::string> lines = t.lines;
    const int n = 1 + static_cast<int>(rng.below(3));
    for (int i = 0; i < n; ++i) {
      const std::size_t at = 1 + rng.below(lines.size() - 1);
      std::string& line = lines[at];
      switch (rng.below(6)) {
        case 0: {  // replace a field
          const std::string v = rng.pick(std::vector<std::string>{
              "nan", "inf", "1e309", "-1", "", "0", "99999999999999999999", "9223372036854775807",
              "2500-01-01 00:00:00.0", "2023-11-16 18:15:nan", "2024-04-01 00:00:00.0", "1e15"});
          if (t.format == "azure_csv") {
            const auto comma = line.find(',');
            const std::size_t field = rng.below(3);
            if (comma == std::string::npos) {
              line = v;
            } else if (field == 0) {
              line = v + line.substr(comma);
            } else {
              line = line.substr(0, comma) + "," + v + "," + v;
            }
          } else {
            const std::string key =
                rng.pick(std::vector<std::string>{"timestamp", "input_length", "output_length"});
            const auto pos = line.find("\"" + key + "\": ");
            if (pos != std::string::npos) {
              const auto vstart = pos + key.size() + 4;
              const auto vend = line.find_first_of(",}", vstart);
              line = line.substr(0, vstart) + v + (vend == std::string::npos ? "" : line.substr(vend));
            }
          }
          break;
        }
        case 1:
          line = line.substr(0, rng.below(line.size() + 1));
          break;
        case 2:
          std::swap(line, lines[1 + rng.below(lines.size() - 1)]);
          break;
        case 3:
          line = deep_nesting(rng);
          break;
        case 4:
          lines.insert(lines.begin() + static_cast<long>(at), line);
          break;
        default:
          line += "\x01\xfe,,";
          break;
      }
    }
    std::string text;
    for (const auto& l : lines) text += l + "\n";
    if (rng.chance(10)) text = text.substr(0, rng.below(text.size()));
    Json doc = c.scenarios.front().second;
    for (const auto& [r, j] : c.scenarios)
      if (r.find("tiny_poisson_ep4") != std::string::npos) doc = j;
    doc["workload"]["arrival"] = {{"kind", "trace"}, {"file", "@@CASE@@/trace"}, {"format", t.format}};
    if (rng.chance(30))
      doc["workload"]["arrival"]["speedup"] = rng.pick(std::vector<double>{1e-6, 1e-3, 1e6});
    doc["workload"].erase("prompt_tokens");
    doc["workload"].erase("output_tokens");
    k.label = "trace " + t.format;
    k.files.emplace_back("@@CASE@@/trace", text);
    k.files.emplace_back("@@CASE@@/scenario.json", doc.dump(2));
    k.args = verb_args("@@CASE@@/scenario.json");
  } else {  // command-line mutations
    const std::string any = (o.source / rel).string();
    const std::vector<std::vector<std::string>> lines = {
        {},
        {"frobnicate"},
        {"run", any, "extra.json"},
        {"validate", any, "--seed", "-1"},
        {"validate", any, "--seed", "abc"},
        {"validate", any, "--set"},
        {"validate", any, "--set", "noequals"},
        {"validate", any, "--set", "=1"},
        {"validate", any, "--bogus"},
        {"run", any, "--out", "/proc/version/out", "-q", "--set", "run.requests=5"},
        {"run", any, "--out", "@@CASE@@/file/x", "-q", "--set", "run.requests=5"},
        {"sweep", any, "--set", "run.requests=5", "--out", "/proc/version/x"},
        {"sweep", any},
        {"compare", any},
        {"calibrate"},
        {"calibrate", "--fit", "@@CASE@@/one.csv"},
        {"calibrate", "--fit", "@@CASE@@/inf.csv", "--dry-run"},
        {"calibrate", "--fit", "/nonexistent"},
        {"plan", any, "--context", "100000000000000"},
        {"plan", any, "--context", "-5"},
        {"plan", any, "--concurrency", "0"},
        {"plan", any, "--concurrency", "99999999999999"},
        {"run", "--trace-limit-s", "nan", "--set", "run.requests=3", "-q", "--out", "@@CASE@@/o"},
        {"validate", "--set", "cluster.nodes=2147483647"},
        {"validate", "--set", "cluster.nodes=1000000"},
        {"run", "--set", "cluster.nvlink_latency_us=1e300", "-q", "--out", "@@CASE@@/o", "--set",
         "run.requests=3"},
    };
    k.args = rng.pick(lines);
    k.label = "command line";
    const std::string csv = "kernel,precision,experts,tokens_per_expert,hidden,inter,median_us\n";
    k.files.emplace_back("@@CASE@@/one.csv", csv + "expert_ffn,bf16,8,16,7168,2048,120.5\n");
    k.files.emplace_back("@@CASE@@/inf.csv", csv +
                                                 "expert_ffn,bf16,8,16,7168,2048,inf\nexpert_ffn,bf16,8,32,"
                                                 "7168,2048,200\nexpert_ffn,bf16,8,64,7168,2048,300\n");
    k.files.emplace_back("@@CASE@@/file", "not a folder");
  }
  return k;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (auto pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
  return s;
}

struct Outcome {
  bool ok = true;
  std::string why;
};

// Statistics that are signed by nature: lag-1 autocorrelations, and a trend's slopes and t statistic
// (report.load.trend: a queue that shrinks has a negative slope).
bool signed_statistic(const std::string& path, const std::string& key) {
  if (key == "lag1") return true;
  const bool in_trend = path.size() >= 6 && path.compare(path.size() - 6, 6, ".trend") == 0;
  return in_trend && (key == "t" || key == "slope_per_s" || key == "waiting_slope_per_s");
}

// The first figure of an exit-0 run's report.json that is negative (or an unparsable report), else empty:
// every count, time, rate, share and size a report holds is >= 0 (signed statistics aside).
std::string bad_figure(const Json& j, const std::string& path) {
  if (j.is_number() && j.get<double>() < 0) return path + " = " + j.dump();
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "scenario") continue;  // the input echoed (a mutated value may be negative there)
      if (signed_statistic(path, it.key())) continue;
      const std::string bad = bad_figure(it.value(), path + "." + it.key());
      if (!bad.empty()) return bad;
    }
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) {
      const std::string bad = bad_figure(j[i], path + "[" + std::to_string(i) + "]");
      if (!bad.empty()) return bad;
    }
  }
  return "";
}

// Runs one case in its own folder with a wall-clock limit; judges the exit status and the message.
Outcome run_case(const Options& o, const Case& k, const fs::path& dir) {
  fs::create_directories(dir);
  auto expand = [&](const std::string& s) { return replace_all(s, "@@CASE@@", dir.string()); };
  for (const auto& [name, text] : k.files) {
    const std::string path = expand(name);
    std::ofstream(path, std::ios::binary) << text;
  }
  std::vector<std::string> args{o.binary};
  for (const auto& a : k.args) args.push_back(expand(a));
  const std::string err_path = (dir / "stderr").string();
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    const int null = open("/dev/null", O_WRONLY);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(null, 1);
    dup2(err, 2);
    chdir(dir.c_str());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.timeout_s);
  bool hung = false;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      hung = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  Outcome out;
  const std::string err = slurp(err_path);
  if (hung) return {false, "hang (over " + std::to_string(o.timeout_s) + " s)"};
  if (WIFSIGNALED(status)) return {false, "signal " + std::to_string(WTERMSIG(status))};
  const int code = WEXITSTATUS(status);
  if (code != 0 && code != 2) return {false, "exit " + std::to_string(code) + ": " + err};
  const fs::path report = dir / "out" / "report.json";
  if (code == 0 && fs::exists(report)) {
    Json r;
    try {
      r = Json::parse(slurp(report));
    } catch (const Json::exception& e) {
      return {false, std::string("exit 0 with an unreadable report.json: ") + e.what()};
    }
    const std::string bad = bad_figure(r, "report");
    if (!bad.empty()) return {false, "exit 0 with a negative figure: " + bad};
  }
  if (code == 2) {
    // One message naming where: "moesim: error: WHERE: what" with a non-empty WHERE.
    const std::string prefix = "moesim: error: ";
    const std::string first = err.substr(0, err.find('\n'));
    const auto colon = first.find(": ", prefix.size());
    if (first.rfind(prefix, 0) != 0 || colon == std::string::npos || colon == prefix.size())
      return {false, "refusal names no location: " + first};
  }
  return out;
}

std::string quoted(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args)
    s += " '" + (a.size() > 200 ? a.substr(0, 200) + "...(" + std::to_string(a.size()) + " bytes)" : a) + "'";
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const char* s = std::getenv("MOESIM_FUZZ_SEED")) o.seed = std::strtoull(s, nullptr, 10);
  if (const char* s = std::getenv("MOESIM_FUZZ_CASES")) o.cases = std::strtoull(s, nullptr, 10);
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--binary")
      o.binary = v;
    else if (k == "--source")
      o.source = v;
    else if (k == "--shared")
      o.shared = v;
    else if (k == "--seed")
      o.seed = std::stoull(v);
    else if (k == "--cases")
      o.cases = std::stoull(v);
    else if (k == "--jobs")
      o.jobs = static_cast<unsigned>(std::stoul(v));
    else if (k == "--timeout-s")
      o.timeout_s = std::stod(v);
    else if (k == "--only")
      o.only = std::stol(v);
    else if (k == "--keep")
      o.keep = v;
    else {
      std::cerr << "moesim_fuzz: unknown option " << k << "\n";
      return 2;
    }
  }
  if (o.binary.empty() || o.source.empty()) {
    std::cerr
        << "usage: moesim_fuzz --binary PATH --source DIR --shared DIR [--seed N] [--cases N] [--jobs N]\n";
    return 2;
  }
  // Each case runs inside its own folder: a relative binary or source path would no longer resolve.
  o.binary = fs::absolute(o.binary).string();
  o.source = fs::absolute(o.source);
  o.shared = fs::absolute(o.shared);
  const Corpus corpus = load_corpus(o);
  const fs::path work = fs::temp_directory_path() / ("moesim_fuzz_" + std::to_string(getpid()));
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> failures{0};
  std::atomic<std::size_t> refusals{0};
  std::mutex io;
  const auto start = std::chrono::steady_clock::now();
  auto worker = [&](unsigned w) {
    for (;;) {
      const std::size_t i = next++;
      if (i >= o.cases) return;
      if (o.only >= 0 && static_cast<long>(i) != o.only) continue;
      Rng rng(o.seed * 0x100000001B3ULL + i);
      const Case k = make_case(corpus, o, rng);
      const fs::path dir = work / ("w" + std::to_string(w));
      const Outcome r = run_case(o, k, dir);
      if (fs::exists(dir / "stderr") && fs::file_size(dir / "stderr") > 0) ++refusals;
      if (!r.ok) {
        ++failures;
        std::lock_guard<std::mutex> lock(io);
        std::cerr << "FAIL case " << i << " (seed " << o.seed << ", " << k.label << "): " << r.why
                  << "\n  moesim" << quoted(k.args) << "\n  reproduce: moesim_fuzz ... --seed " << o.seed
                  << " --only " << i << " --keep DIR\n";
        if (!o.keep.empty()) {
          const fs::path keep = o.keep / ("case-" + std::to_string(i));
          fs::create_directories(keep);
          fs::copy(dir, keep, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
          std::ofstream(keep / "command") << "moesim" << quoted(k.args) << "\n";
        }
      }
      fs::remove_all(dir);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < std::max(1u, o.jobs); ++w) threads.emplace_back(worker, w);
  for (auto& t : threads) t.join();
  fs::remove_all(work);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "moesim_fuzz: seed %llu, %zu cases, %zu with a message, %zu failures (crash, hang, exit not 0/2 or "
      "an unlocated refusal), %.1f s\n",
      static_cast<unsigned long long>(o.seed), o.cases, refusals.load(), failures.load(), wall);
  return failures == 0 ? 0 : 1;
}
