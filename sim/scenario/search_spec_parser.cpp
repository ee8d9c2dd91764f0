#include "sim/scenario/search_spec_parser.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace moesim {

namespace {

constexpr int kMaxAxisValues = 64;
constexpr int kMaxNodes = 512;

// A non-empty array at `key` (at most kMaxAxisValues entries, no duplicates), each element read by `one`
// with its own path ("space.engines[2]").
template <typename T, typename F>
std::vector<T> read_list(JsonReader& r, std::string_view key, F one) {
  const Json& a = r.raw(key);
  const std::string path = r.path_of(key);
  if (!a.is_array() || a.empty()) {
    throw InputError(path, "expected a non-empty array, got " + json_type_name(a) + " (" + a.dump() + ")");
  }
  if (a.size() > kMaxAxisValues) {
    throw InputError(path, "at most " + std::to_string(kMaxAxisValues) + " values per axis");
  }
  std::vector<T> out;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    T v = one(a[i], at);
    if (std::find(out.begin(), out.end(), v) != out.end())
      throw InputError(at, "duplicate value " + a[i].dump());
    out.push_back(v);
  }
  return out;
}

std::int64_t int_value(const Json& v, const std::string& at, std::int64_t lo, std::int64_t hi) {
  if (!v.is_number_integer() && !v.is_number_unsigned()) {
    throw InputError(at, "expected an integer, got " + json_type_name(v) + " (" + v.dump() + ")");
  }
  const auto x = v.get<std::int64_t>();
  if (x < lo || x > hi) {
    throw InputError(at,
                     v.dump() + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return x;
}

std::vector<int> int_list(JsonReader& r, std::string_view key, int lo, int hi) {
  return read_list<int>(r, key, [&](const Json& v, const std::string& at) {
    return static_cast<int>(int_value(v, at, lo, hi));
  });
}

std::vector<std::string> string_list(JsonReader& r, std::string_view key,
                                     const std::vector<std::string>& known) {
  return read_list<std::string>(r, key, [&](const Json& v, const std::string& at) {
    if (!v.is_string()) throw InputError(at, "expected a string, got " + json_type_name(v));
    const auto s = v.get<std::string>();
    if (std::find(known.begin(), known.end(), s) == known.end()) {
      std::string names;
      for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
      throw InputError(at, "unknown value \"" + s + "\" (known: " + names + ")");
    }
    return s;
  });
}

std::vector<bool> bool_list(JsonReader& r, std::string_view key) {
  return read_list<bool>(r, key, [](const Json& v, const std::string& at) {
    if (!v.is_boolean()) throw InputError(at, "expected true or false, got " + json_type_name(v));
    return v.get<bool>();
  });
}

// "colocated" or "<x>p<y>d" with x, y in [1, 64].
PoolShape parse_shape(const Json& v, const std::string& at) {
  if (!v.is_string()) throw InputError(at, "expected a string such as \"colocated\" or \"1p2d\"");
  const auto s = v.get<std::string>();
  if (s == "colocated") return PoolShape{};
  const auto p = s.find('p');
  const bool shaped = p != std::string::npos && p > 0 && s.size() > p + 2 && s.back() == 'd' &&
                      std::all_of(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(p), ::isdigit) &&
                      std::all_of(s.begin() + static_cast<std::ptrdiff_t>(p) + 1, s.end() - 1, ::isdigit) &&
                      p <= 2 && s.size() - p - 2 <= 2;
  if (!shaped) {
    throw InputError(at, "\"" + s +
                             "\" is not a pool shape: \"colocated\" or \"<x>p<y>d\" (x prefill and y "
                             "decode instances, e.g. \"1p2d\")");
  }
  const int x = std::stoi(s.substr(0, p));
  const int y = std::stoi(s.substr(p + 1, s.size() - p - 2));
  if (x < 1 || y < 1) throw InputError(at, "\"" + s + "\": at least one prefill and one decode instance");
  return PoolShape{.prefill = x, .decode = y};
}

// cluster.nodes: a count, an array of counts, or {"min", "max"} (every count in between).
std::vector<int> parse_nodes(JsonReader& c) {
  const Json& n = c.raw("nodes");
  std::vector<int> out;
  if (n.is_object()) {
    JsonReader r(n, c.path_of("nodes"));
    const int lo = r.int_in("min", 1, kMaxNodes);
    const int hi = r.int_in("max", 1, kMaxNodes);
    r.finish();
    if (hi < lo) r.fail("max", "must be at least nodes.min (" + std::to_string(lo) + ")");
    for (int i = lo; i <= hi; ++i) out.push_back(i);
  } else if (n.is_array()) {
    out = int_list(c, "nodes", 1, kMaxNodes);
  } else {
    out.push_back(static_cast<int>(int_value(n, c.path_of("nodes"), 1, kMaxNodes)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

void parse_space(JsonReader& r, SearchSpace& s) {
  if (r.has("engines"))
    s.engines = string_list(r, "engines", {"pytorch_graph", "pytorch_loop", "vllm", "sglang", "trtllm"});
  const std::vector<std::string> precisions{"bf16", "fp8", "int8", "int4"};
  if (r.has("weights")) s.weights = string_list(r, "weights", precisions);
  if (r.has("kv_cache")) s.kv_cache = string_list(r, "kv_cache", {"bf16", "fp8"});
  if (r.has("pool_shapes")) s.pool_shapes = read_list<PoolShape>(r, "pool_shapes", parse_shape);
  if (r.has("ep_sizes")) s.ep_sizes = int_list(r, "ep_sizes", 1, 4096);
  if (r.has("attention_tp")) s.attention_tp = int_list(r, "attention_tp", 1, 64);
  if (r.has("expert_tp")) s.expert_tp = int_list(r, "expert_tp", 1, 64);
  if (r.has("pipeline_stages")) s.pipeline_stages = int_list(r, "pipeline_stages", 1, 64);
  if (r.has("max_batch_size")) s.max_batch_size = int_list(r, "max_batch_size", 1, 1 << 20);
  if (r.has("max_batched_tokens")) {
    const auto t = int_list(r, "max_batched_tokens", 1, 1 << 20);
    s.max_batched_tokens.assign(t.begin(), t.end());
  }
  if (r.has("two_batch_overlap")) s.two_batch_overlap = bool_list(r, "two_batch_overlap");
  if (r.has("mtp")) s.mtp = bool_list(r, "mtp");
  if (r.has("redundant_experts")) s.redundant_experts = int_list(r, "redundant_experts", 0, 4096);
  r.finish();
}

// A scenario section copied as is: must be an object (its keys are the scenario parser's to check).
Json section(JsonReader& root, std::string_view key, bool required) {
  if (!required && !root.has(key)) {
    (void)root.optional_object(key);
    return Json();
  }
  const Json& v = root.raw(key);
  if (!v.is_object()) throw InputError(root.path_of(key), "expected an object, got " + json_type_name(v));
  return v;
}

// The deployment keys the search sets itself may not be given as a base.
void check_base_deployment(const Json& d) {
  static const std::set<std::string> searched{"ep_size",
                                              "attention",
                                              "engine",
                                              "pipeline",
                                              "expert_tp_size",
                                              "max_batch_size",
                                              "max_batched_tokens",
                                              "two_batch_overlap",
                                              "speculative",
                                              "pools"};
  for (auto it = d.begin(); it != d.end(); ++it) {
    if (searched.count(it.key()) != 0) {
      throw InputError("deployment." + it.key(),
                       "is set by the search (its axis is under space); remove it from the base deployment");
    }
  }
}

void parse_verify(JsonReader& root, VerifySettings& v) {
  auto r = root.optional_object("verify");
  if (!r) return;
  v.max_points = r->int_in("max_points", v.max_points, 1, 10000);
  v.margin = r->bounded("margin", v.margin, 0.0, 10.0);
  v.capacity_tol = r->bounded("capacity_tol", v.capacity_tol, 1e-4, 1.0);
  if (!(v.capacity_tol > 0)) r->fail("capacity_tol", "must be above 0");
  v.replications = r->int_in("replications", v.replications, 2, 1000);
  v.max_replications = r->int_in("max_replications", std::max(v.max_replications, v.replications), 2, 1000);
  if (v.max_replications < v.replications) {
    r->fail("max_replications",
            "must be at least verify.replications (" + std::to_string(v.replications) + ")");
  }
  r->finish();
}

}  // namespace

std::string PoolShape::label() const {
  return colocated() ? "colocated" : std::to_string(prefill) + "p" + std::to_string(decode) + "d";
}

SearchSpec parse_search_spec(const Json& j) {
  if (!j.is_object())
    throw InputError("(spec)", "a search SPEC must be a JSON object, got " + json_type_name(j));
  JsonReader root(j, "");
  SearchSpec s;
  s.name = root.string("name");
  if (s.name.empty()) root.fail("name", "must not be empty (it names the output folder)");
  s.description = root.string("description", "");
  s.model = root.raw("model");
  if (!s.model.is_string() && !s.model.is_object()) {
    root.fail("model", "expected a catalog name or a model object, got " + json_type_name(s.model));
  }
  JsonReader c = root.object("cluster");
  s.gpu = c.raw("gpu");
  if (!s.gpu.is_string() && !s.gpu.is_object()) {
    c.fail("gpu", "expected a catalog name or a GPU object, got " + json_type_name(s.gpu));
  }
  s.gpus_per_node = c.int_in("gpus_per_node", 8, 1, 64);
  if (c.has("fabric")) s.fabric = c.raw("fabric");
  s.nodes = parse_nodes(c);
  c.finish();
  s.workload = section(root, "workload", true);
  s.sla = section(root, "sla", true);
  s.run = section(root, "run", true);
  s.experts = section(root, "experts", false);
  if (s.experts.is_object() && s.experts.contains("redundant_experts")) {
    throw InputError(
        "experts.redundant_experts",
        "is set by the search (space.redundant_experts); remove it from the base experts section");
  }
  s.deployment = section(root, "deployment", false);
  if (!s.deployment.is_null()) check_base_deployment(s.deployment);
  if (auto sp = root.optional_object("space")) parse_space(*sp, s.space);
  parse_verify(root, s.verify);
  s.target_tokens_per_s_per_user = root.bounded("target_tokens_per_s_per_user", 0.0, 0.0, 1e6);
  root.finish();
  return s;
}

SearchSpec load_search_spec(const std::string& path) { return parse_search_spec(load_json_file(path)); }

}  // namespace moesim
