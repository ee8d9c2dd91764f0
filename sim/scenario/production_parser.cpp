#include "sim/scenario/production_parser.h"

#include <array>
#include <string_view>

#include "sim/scenario/catalog.h"
#include "sim/scenario/scenario_parser.h"

namespace moesim {

namespace {

constexpr std::string_view kSpeculativeCatalog = "scenarios/catalog/speculative.json";

struct ArrivalKeys {
  std::string_view kind;
  std::array<std::string_view, 5> keys;
};
// The keys each arrival kind reads (scenario_parser.cpp and servegen_reader.cpp).
constexpr std::array<ArrivalKeys, 4> kArrivalKeys{{
    {"poisson", {"rate_per_s"}},
    {"gamma", {"rate_per_s", "cv"}},
    {"closed_loop", {"users", "think_time_s"}},
    {"trace", {"file", "format", "speedup", "rate_scale", "start_s"}},
}};

bool kind_has(const ArrivalKeys& k, std::string_view key) {
  for (const auto x : k.keys)
    if (x == key) return true;
  return false;
}

}  // namespace

void check_arrival_kind_keys(const JsonReader& arrival, const std::string& kind) {
  const ArrivalKeys* mine = nullptr;
  for (const auto& k : kArrivalKeys)
    if (k.kind == kind) mine = &k;
  if (mine == nullptr) return;  // an unknown kind is reported by the caller
  for (const auto& other : kArrivalKeys) {
    if (other.kind == kind) continue;
    for (const auto key : other.keys) {
      if (key.empty() || kind_has(*mine, key) || !arrival.has(key)) continue;
      std::string hint;
      if (kind == "trace") {
        hint =
            "a trace replays its file's arrival times (scale them with workload.arrival.speedup); remove " +
            arrival.path_of(key) +
            ", or replace the whole arrival, e.g. --set 'workload.arrival={\"kind\":\"" +
            std::string(other.kind) +
            "\", ...}' (then give workload.prompt_tokens and workload.output_tokens)";
      } else {
        hint = "remove " + arrival.path_of(key) +
               ", or replace the whole arrival with --set 'workload.arrival={\"kind\":\"" + kind +
               "\", ...}' so that no key of the previous kind is left";
      }
      arrival.fail(key, "belongs to a " + std::string(other.kind) + " arrival, not to this \"" + kind +
                            "\" one: " + hint);
    }
  }
}

void check_workload_length_keys(const JsonReader& workload, bool is_trace, const std::string& kind) {
  for (const char* key : {"prompt_tokens", "output_tokens"}) {
    if (is_trace && workload.has(key)) {
      workload.fail(key, "a trace replay takes prompt and output lengths from its file; remove " +
                             workload.path_of(key) +
                             " (or switch workload.arrival to poisson, gamma or closed_loop)");
    }
    if (!is_trace && !workload.has(key)) {
      workload.fail(key, "required with a \"" + kind +
                             "\" arrival (only a trace brings its own lengths); add it, e.g. --set '" +
                             workload.path_of(key) + "={\"kind\":\"fixed\",\"tokens\":512}'");
    }
  }
}

int parse_routed_experts(JsonReader& model, ModelSpec& m) {
  const std::int64_t experts = model.integer("routed_experts");
  if (experts < 0 || experts > (1 << 20))
    model.fail("routed_experts",
               "must be in [0, 1048576] (0: a dense model), got " + std::to_string(experts));
  if (experts == 0) {
    if (model.has("num_dense_layers") && m.num_dense_layers != m.num_layers) {
      model.fail("num_dense_layers",
                 "a dense model (routed_experts 0) has every layer dense: give num_layers (" +
                     std::to_string(m.num_layers) + ") or leave it out");
    }
    m.num_dense_layers = m.num_layers;
  } else if (m.num_dense_layers >= m.num_layers) {
    model.fail("num_dense_layers",
               "must be in [0, num_layers) for a MoE model (routed_experts 0 makes a dense one)");
  }
  if (experts == 0 && model.has("top_k") && model.integer("top_k") != 0)
    model.fail("top_k", "a dense model (routed_experts 0) routes to no expert: leave top_k out or 0");
  return static_cast<int>(experts);
}

void check_dense_model(const ModelSpec& m, const Json& scenario) {
  if (m.routed_experts > 0) return;
  const auto wl = scenario.find("workload");
  if (wl != scenario.end() && wl->is_object() && wl->contains("expert_popularity")) {
    throw InputError(
        "workload.expert_popularity",
        "the model is dense (model.routed_experts 0): there is no expert to route to; remove it");
  }
  if (scenario.contains("experts")) {
    throw InputError("experts",
                     "the model is dense (model.routed_experts 0): there is no expert to place, "
                     "replicate or tier; remove the experts section");
  }
}

std::optional<PrefixWorkloadSpec> parse_workload_prefix(JsonReader& workload, const ScenarioSpec& s,
                                                        bool is_trace) {
  auto r = workload.optional_object("prefix");
  if (!r) return std::nullopt;
  if (is_trace && s.production.trace_keys.block_tokens > 0) {
    r->fail("", "this trace carries its own prefixes (Mooncake hash_ids); remove workload.prefix");
  }
  if (is_trace && r->has("conversation")) {
    r->fail("conversation",
            "a trace replays its own requests; with a trace workload.prefix may only declare "
            "system_prompt_tokens (a system prompt its prompts share)");
  }
  PrefixWorkloadSpec p;
  p.block_tokens = s.deployment.kv_block_tokens;
  p.system_prompt_tokens = r->integer("system_prompt_tokens", 0);
  if (p.system_prompt_tokens < 0 || p.system_prompt_tokens > 10000000)
    r->fail("system_prompt_tokens", "must be in [0, 1e7]");
  if (auto c = r->optional_object("conversation")) {
    if (std::holds_alternative<ClosedLoop>(s.workload.arrivals)) {
      c->fail("",
              "conversations need an open-loop arrival (poisson or gamma) for their first turns; a closed "
              "loop already models users that wait for answers");
    }
    p.conversations = true;
    p.conversation.turns_mean = c->bounded("turns_mean", 1.0, 1.0, 1e4);
    p.conversation.think_time_s = c->bounded("think_time_s", 0.0, 0.0, 1e6);
    const std::int64_t first = p.system_prompt_tokens + max_length(s.workload.prompt);
    p.conversation.max_prompt_tokens =
        c->positive_integer("max_prompt_tokens", std::max<std::int64_t>(32768, first));
    if (p.conversation.max_prompt_tokens < first) {
      c->fail("max_prompt_tokens", "must hold the longest first turn (system prompt + longest prompt = " +
                                       std::to_string(first) + " tokens)");
    }
    c->finish();
  }
  r->finish();
  return p;
}

std::optional<SpeculativeSpec> parse_speculative(JsonReader& deployment) {
  if (!deployment.has("speculative")) {
    (void)deployment.optional_object("speculative");
    return std::nullopt;
  }
  const std::string path = deployment.path_of("speculative");
  const Json j = resolve_entry(deployment.raw("speculative"), kSpeculativeCatalog, path);
  JsonReader r(j, path);
  (void)r.string("source", "");
  SpeculativeSpec s;
  s.draft_tokens = r.positive_int("draft_tokens");
  if (s.draft_tokens > 16) r.fail("draft_tokens", "must be at most 16");
  const Json& a = r.raw("acceptance");
  if (!a.is_array() || a.size() != static_cast<std::size_t>(s.draft_tokens)) {
    r.fail("acceptance", "expected an array of " + std::to_string(s.draft_tokens) +
                             " acceptance rates, one per draft position (each conditional on the previous "
                             "ones accepted)");
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number() || a[i].get<double>() < 0 || a[i].get<double>() > 1)
      r.fail("acceptance", "entry " + std::to_string(i) + " must be a number in [0, 1], got " + a[i].dump());
    s.acceptance.push_back(a[i].get<double>());
  }
  const Json& draft = r.raw("draft");
  if (draft.is_string() && draft.get<std::string>() == "mtp") {
    s.draft = DraftKind::kMtp;
  } else if (draft.is_object()) {
    JsonReader d(draft, r.path_of("draft"));
    const Json& ref = d.raw("model");
    const Json model = resolve_entry(ref, "scenarios/catalog/models.json", d.path_of("model"));
    JsonReader m(model, d.path_of("model"));
    s.draft = DraftKind::kModel;
    s.draft_model = parse_model(m);
    s.draft_model_name = ref.is_string() ? ref.get<std::string>() : "custom";
    d.finish();
  } else {
    r.fail("draft", "expected \"mtp\" or {\"model\": <catalog model or shapes>}, got " + draft.dump());
  }
  r.finish();
  return s;
}

}  // namespace moesim
