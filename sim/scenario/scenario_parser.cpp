#include "sim/scenario/scenario_parser.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <tuple>

#include "sim/scenario/catalog.h"
#include "sim/scenario/experts_parser.h"
#include "sim/scenario/fabric_parser.h"
#include "sim/scenario/faults_parser.h"
#include "sim/scenario/keyed_trace_reader.h"
#include "sim/scenario/production_parser.h"
#include "sim/scenario/servegen_reader.h"
#include "sim/scenario/trace_reader.h"
#include "sim/serving/runtime/batch_policy.h"
#include "sim/serving/runtime/router.h"
#include "sim/serving/spec/memory_plan.h"
#include "workloads/expert_popularity.h"

namespace moesim {

namespace {

constexpr std::string_view kModels = "scenarios/catalog/models.json";
constexpr std::string_view kGpus = "scenarios/catalog/gpus.json";

// Simulated time is int64 picoseconds (106 days); inputs stay far inside it.
constexpr double kMaxSeconds = 1e6;
// A link latency of a second is already absurd; a bound keeps sums of hops far inside the clock.
constexpr double kMaxLatencyUs = 1e6;
// The largest cluster: its state is per GPU and per leaf pair (routes), a few hundred MB at 16,384 GPUs.
constexpr int kMaxClusterGpus = 16384;
// The largest EP group: an All-to-All of exact draws holds per-rank-pair traffic tables (4096^2 doubles,
// 128 MiB each).
constexpr int kMaxEpGroup = 4096;

double rate_of(JsonReader& a, const char* key) {
  const double x = a.positive(key);
  if (x < 1.0 / kMaxSeconds) a.fail(key, "must be at least 1e-06 (one request in 11.6 days)");
  return x;
}

double rate(JsonReader& a) { return rate_of(a, "rate_per_s"); }

// Rules that span sections.
void check_consistency(const ScenarioSpec& s) {
  const DeploymentSpec& d = s.deployment;
  if (std::holds_alternative<ClosedLoop>(s.workload.arrivals) && s.workload.trace.empty() &&
      d.max_waiting_requests > 0) {
    throw InputError("deployment.max_waiting_requests",
                     "a closed loop cannot drop requests (its users would retry at once); leave it 0");
  }
  if (d.max_input_len > 0 && s.workload.trace.empty() && max_length(s.workload.prompt) > d.max_input_len) {
    throw InputError("deployment.max_input_len",
                     std::to_string(d.max_input_len) + " is shorter than the longest prompt (" +
                         std::to_string(max_length(s.workload.prompt)) +
                         " tokens), which TensorRT-LLM would refuse; raise it or bound the prompt law");
  }
  if (!d.chunked_prefill && s.workload.trace.empty()) {
    const auto prompt = max_length(s.workload.prompt);
    const auto longest = unchunked_step_tokens(d, prompt, max_length(s.workload.output));
    if (longest > d.max_batched_tokens) {
      const std::string what = longest == prompt
                                   ? " tokens of prompt, one step with chunking off"
                                   : " tokens of prompt and output, all recomputed in one step after a "
                                     "preemption";
      throw InputError("deployment.max_batched_tokens",
                       std::to_string(d.max_batched_tokens) + " is smaller than the longest request (" +
                           std::to_string(longest) + what +
                           ") with chunked prefill off; raise it or turn deployment.chunked_prefill on");
    }
  }
}

// run.measure: "window" (the default: the steady window only), "mlperf_server" or "mlperf_offline" (also
// loadgen's figures over every query, sim/serving/report/loadgen.h). loadgen waits for every query, issues
// Server queries on a Poisson schedule and Offline ones all at once (a closed loop without think time
// stands for the harness's concurrency cap).
RunMeasure parse_run_measure(const ScenarioSpec& s, JsonReader& r) {
  const std::string m = r.string("measure", "window");
  if (m == "window") return RunMeasure::kWindow;
  if (m != "mlperf_server" && m != "mlperf_offline")
    r.fail("measure", "unknown measurement \"" + m + "\" (known: window, mlperf_server, mlperf_offline)");
  if (!s.workload.trace.empty()) r.fail("measure", m + " needs synthetic arrivals, not a trace");
  if (s.sla.percentile >= 100)
    r.fail("measure", m + " reads the latencies at sla.percentile as loadgen does: it must be below 100");
  if (s.run.max_drain > Duration::zero())
    r.fail("max_drain_s", m + " waits for every query as loadgen does: remove run.max_drain_s");
  if (m == "mlperf_server") {
    if (!std::holds_alternative<PoissonArrivals>(s.workload.arrivals))
      r.fail("measure",
             "mlperf_server issues queries on loadgen's Poisson schedule: set workload.arrival.kind "
             "\"poisson\"");
    return RunMeasure::kMlperfServer;
  }
  const auto* c = std::get_if<ClosedLoop>(&s.workload.arrivals);
  if (c == nullptr || c->think_time_s != 0)
    r.fail("measure",
           "mlperf_offline issues every query at the start: set workload.arrival.kind \"closed_loop\" "
           "with think_time_s 0 (users = the harness's concurrency cap)");
  return RunMeasure::kMlperfOffline;
}

// Requests a synthetic open-loop run may plan (run.requests, or rate x run.duration_s): each holds about
// 0.4 KB while it waits, and an overloaded deployment without deployment.max_waiting_requests drains none
// of them, so the bound keeps memory within a few GB whatever the rate (2e7 is also hours of simulation).
constexpr double kMaxPlannedRequests = 2e7;

void check_planned_arrivals(const ScenarioSpec& s, JsonReader& run) {
  double rate_per_s = 0;
  if (const auto* p = std::get_if<PoissonArrivals>(&s.workload.arrivals)) rate_per_s = p->rate_per_s;
  if (const auto* g = std::get_if<GammaArrivals>(&s.workload.arrivals)) rate_per_s = g->rate_per_s;
  if (const auto* d = std::get_if<DiurnalArrivals>(&s.workload.arrivals)) rate_per_s = diurnal_mean_rate(*d);
  if (rate_per_s <= 0 || !s.workload.trace.empty()) return;
  const double by_count = s.run.requests > 0 ? static_cast<double>(s.run.requests) : HUGE_VAL;
  const double by_time = s.run.duration > Duration::zero() ? rate_per_s * s.run.duration.seconds() : HUGE_VAL;
  const double planned = std::min(by_count, by_time);
  if (planned <= kMaxPlannedRequests) return;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3g", planned);
  if (by_count <= by_time) {
    run.fail("requests", std::string(buf) + " requests are more than the 2e7 a run holds; lower it");
  }
  throw InputError("workload.arrival.rate_per_s",
                   "rate x run.duration_s plans " + std::string(buf) +
                       " requests, more than the 2e7 a run holds (each waits in memory when the deployment "
                       "cannot keep up); lower the rate or the duration, or set run.requests");
}

Precision precision_of(JsonReader& r, std::string_view key, Precision fallback) {
  if (!r.has(key)) {
    (void)r.string(key, "");
    return fallback;
  }
  const std::string s = r.string(key);
  const auto p = parse_precision(s);
  if (!p) r.fail(key, "unknown precision \"" + s + "\" (known: fp32, bf16, fp16, fp8, int8, int4, fp4)");
  return *p;
}

// Token counts of one request: up to 1e8 (as traces), so prompt + output and any per-token product holds.
constexpr std::int64_t kMaxTokens = 100000000;

std::int64_t tokens(JsonReader& r, std::string_view key, std::int64_t fallback = -1) {
  if (fallback < 0 && !r.has(key)) (void)r.integer(key);  // "required key is missing"
  return r.integer_in(key, fallback, 1, kMaxTokens);
}

LengthSpec parse_length(JsonReader r) {
  const std::string kind = r.string("kind");
  LengthSpec out;
  if (kind == "fixed") {
    out = FixedLength{tokens(r, "tokens")};
  } else if (kind == "uniform") {
    UniformLength u{tokens(r, "min"), tokens(r, "max")};
    if (u.max < u.min) r.fail("max", "must be >= min (" + std::to_string(u.min) + ")");
    out = u;
  } else if (kind == "lognormal") {
    // `mean` is the lognormal's own; `bounded_mean` the mean of what is drawn inside [min, max] (a
    // dataset's published mean under its length cap), from which the lognormal's mean is solved.
    const bool bounded = r.has("bounded_mean");
    if (bounded == r.has("mean"))
      r.fail(bounded ? "bounded_mean" : "mean",
             bounded ? "give mean or bounded_mean, not both"
                     : "required key is missing: give mean (the lognormal's) or bounded_mean (the mean drawn "
                       "inside [min, max])");
    const double given = r.positive(bounded ? "bounded_mean" : "mean");
    LognormalLength l{.mean = given,
                      .sigma = r.number_in("sigma", 1e-6, 10.0),
                      .min = tokens(r, "min", 1),
                      .max = tokens(r, "max")};
    if (l.max < l.min) r.fail("max", "must be >= min (" + std::to_string(l.min) + ")");
    const double lo = static_cast<double>(l.min) - 0.5;  // a draw is kept when it rounds into [min, max]
    const double hi = static_cast<double>(l.max) + 0.5;
    if (bounded) {
      if (!(given > static_cast<double>(l.min) && given < static_cast<double>(l.max)))
        r.fail("bounded_mean", "must lie strictly between min and max");
      l.mean = lognormal_mean_for_bounded_mean(given, l.sigma, lo, hi);
    } else if (l.mean < static_cast<double>(l.min) || l.mean > static_cast<double>(l.max)) {
      r.fail("mean", "must lie between min and max");
    }
    out = l;
  } else if (kind == "quantiles") {
    // An empirical law by its quantiles (a measured dataset's lengths, e.g. MLPerf's): points[i] is the
    // i / (n - 1) quantile.
    const Json& a = r.raw("points");
    if (!a.is_array() || a.size() < 2)
      r.fail("points", "must be an array of at least 2 token counts, the quantiles from min to max");
    QuantileLength q;
    for (const Json& x : a) {
      std::string at = std::to_string(q.points.size());  // "[i]", built in steps (GCC 12's -Wrestrict)
      at.insert(at.begin(), '[');
      at.push_back(']');
      if (!x.is_number_integer() || x.get<std::int64_t>() < 1 || x.get<std::int64_t>() > kMaxTokens)
        r.fail("points", at + " must be an integer in [1, " + std::to_string(kMaxTokens) + "]");
      if (!q.points.empty() && x.get<std::int64_t>() < q.points.back())
        r.fail("points", at + " (" + std::to_string(x.get<std::int64_t>()) + ") is below the one before (" +
                             std::to_string(q.points.back()) + "): quantiles ascend");
      q.points.push_back(x.get<std::int64_t>());
    }
    out = std::move(q);
  } else {
    r.fail("kind",
           "unknown length distribution \"" + kind + "\" (known: fixed, uniform, lognormal, quantiles)");
  }
  r.finish();
  return out;
}

PopularitySpec parse_popularity(JsonReader r, const ModelSpec& m, WorkloadSpec& wl) {
  PopularitySpec p;
  const std::string kind = r.string("kind");
  if (kind == "uniform") {
    p.kind = PopularitySpec::Kind::kUniform;
  } else if (kind == "zipf") {
    p.kind = PopularitySpec::Kind::kZipf;
    // At 20 the most popular expert already takes all but 2^-20 of a two-expert model's tokens; beyond,
    // the tail's weights i^-s underflow a double and the routing sampler cannot draw top_k experts.
    p.zipf_exponent = r.number("exponent");
    if (p.zipf_exponent < 0 || p.zipf_exponent > 20) {
      r.fail("exponent", "must be in [0, 20], got " + Json(p.zipf_exponent).dump());
    }
  } else if (kind == "pareto") {
    // "The top `top_fraction` of experts take `top_share` of the tokens" (seed section 4: 20% / 80%).
    const double fraction = r.fraction("top_fraction", 0.2);
    const double share = r.fraction("top_share", 0.8);
    if (share <= fraction)
      r.fail("top_share", "must exceed top_fraction (uniform popularity gives share == fraction)");
    const double max_share = std::min(1.0, std::round(fraction * m.routed_experts) / m.top_k);
    if (share >= max_share) {
      r.fail("top_share", "cannot be reached: with top-" + std::to_string(m.top_k) + " routing over " +
                              std::to_string(m.routed_experts) + " experts the top " + Json(fraction).dump() +
                              " hold at most " + Json(max_share).dump() + " of the slots");
    }
    p.kind = PopularitySpec::Kind::kZipf;
    p.zipf_exponent = zipf_exponent_for_top_share(m.routed_experts, m.top_k, fraction, share);
  } else if (kind == "calibrated") {
    p.kind = PopularitySpec::Kind::kZipf;
    p.zipf_exponent = parse_calibrated_exponent(r, m);
  } else {
    r.fail("kind", "unknown expert popularity \"" + kind + "\" (known: uniform, zipf, pareto, calibrated)");
  }
  p.shuffle_per_layer = r.boolean("per_layer_shuffle", true);
  parse_popularity_extensions(r, m, wl);
  r.finish();
  return p;
}

}  // namespace

ModelSpec parse_model(JsonReader& r) {
  ModelSpec m;
  (void)r.string("source", "");
  (void)precision_of(r, "default_weights", Precision::kBF16);
  // Shapes up to far beyond any published model; FLOP and byte counts are products of a few of these.
  constexpr int kDim = 1 << 20;
  m.num_layers = r.int_in("num_layers", 1, 4096);
  m.num_dense_layers = r.int_in("num_dense_layers", 0, 0, 4096);
  if (m.num_dense_layers > m.num_layers) r.fail("num_dense_layers", "must be in [0, num_layers]");
  m.hidden = r.int_in("hidden", 1, kDim);
  m.vocab = r.int_in("vocab", 1, 1 << 24);
  m.tied_embeddings = r.boolean("tied_embeddings", false);
  const std::string attn = r.string("attention");
  m.num_heads = r.int_in("num_heads", 1, 1 << 16);
  if (attn == "gqa") {
    m.attention = AttentionKind::kGqa;
    m.num_kv_heads = r.int_in("num_kv_heads", 1, 1 << 16);
    m.head_dim = r.int_in("head_dim", 1, 1 << 16);
    if (m.num_heads % m.num_kv_heads != 0) r.fail("num_kv_heads", "must divide num_heads");
  } else if (attn == "mla") {
    m.attention = AttentionKind::kMla;
    m.q_lora_rank = r.int_in("q_lora_rank", 0, 0, kDim);
    m.kv_lora_rank = r.int_in("kv_lora_rank", 1, kDim);
    m.qk_nope_head_dim = r.int_in("qk_nope_head_dim", 1, 1 << 16);
    m.qk_rope_head_dim = r.int_in("qk_rope_head_dim", 1, 1 << 16);
    m.v_head_dim = r.int_in("v_head_dim", 1, 1 << 16);
  } else {
    r.fail("attention", "unknown attention \"" + attn + "\" (known: gqa, mla)");
  }
  m.routed_experts = parse_routed_experts(r, m);
  if (m.routed_experts > (1 << 16)) r.fail("routed_experts", "must be at most 65536");
  m.shared_experts = r.int_in("shared_experts", 0, 0, 1 << 10);
  m.top_k = m.routed_experts == 0 ? r.int_in("top_k", 0, 0, 0) : r.int_in("top_k", 1, m.routed_experts);
  m.expert_inter =
      m.routed_experts == 0 ? r.int_in("expert_inter", 0, 0, kDim) : r.int_in("expert_inter", 1, kDim);
  m.shared_expert_inter = r.int_in("shared_expert_inter", static_cast<int>(m.expert_inter), 0, kDim);
  m.dense_inter = r.int_in("dense_inter", 0, 0, kDim);
  if (m.num_dense_layers > 0 && m.dense_inter <= 0)
    r.fail("dense_inter", "must be positive when there are dense layers");
  m.published_total_params_b = r.number("total_params_b", 0);
  m.published_active_params_b = r.number("active_params_b", 0);
  m.architecture_known = r.boolean("architecture_known", true);
  r.finish();
  return m;
}

namespace {

// `measured.<key>`: {"value": x, "source": "..."}; the value in the catalog's unit times `scale`, at most
// `hi`. With `at`, also the measured run's work {"gb": bytes / 1e9, "gflop": flops / 1e9}.
MeasuredFigure parse_measured_figure(JsonReader& parent, std::string_view key, double scale, double hi,
                                     bool at = false) {
  if (!parent.has(key)) return {};
  JsonReader r = parent.object(key);
  MeasuredFigure f;
  f.value = r.positive("value");
  if (f.value > hi) r.fail("value", "must be at most " + Json(hi).dump() + ", got " + Json(f.value).dump());
  f.value *= scale;
  f.source = r.string("source");
  if (f.source.empty()) r.fail("source", "must name where the figure was published");
  if (auto w = at ? r.optional_object("at") : std::nullopt) {
    f.at_bytes = w->positive("gb") * 1e9;
    f.at_flops = w->positive("gflop") * 1e9;
    w->finish();
  }
  r.finish();
  return f;
}

// The trtllm-gen decode kernel is costed as the larger of its flops at the measured rate and its bytes at the
// datasheet HBM rate: a measured run that moved its bytes faster than the datasheet allows is refused.
void check_trtllm_gen_run(JsonReader& r, const MeasuredFigure& f, const GpuSpec& g) {
  if (f.at_flops <= 0 || g.fp8_flops_per_s <= 0) return;
  const double t_run = f.at_flops / (f.value * g.fp8_flops_per_s);
  if (f.at_bytes / g.hbm_bytes_per_s > t_run) {
    r.fail("attention_decode_trtllm_gen_eff_fp8",
           "the measured run (at.gb in " + Json(t_run * 1e6).dump() +
               " us) moves its bytes faster than the datasheet HBM bandwidth");
  }
}

// The published measurements of a GPU: efficiencies are fractions of its own datasheet peaks, bandwidth at
// most its datasheet HBM bandwidth, a launch at most a millisecond.
GpuMeasured parse_gpu_measured(JsonReader& r, const GpuSpec& g) {
  GpuMeasured m;
  m.gemm_eff_bf16 = parse_measured_figure(r, "gemm_eff_bf16", 1.0, 1.0);
  m.gemm_eff_fp8 = parse_measured_figure(r, "gemm_eff_fp8", 1.0, 1.0);
  m.gemm_eff_fp4 = parse_measured_figure(r, "gemm_eff_fp4", 1.0, 1.0);
  m.grouped_eff_fp8 = parse_measured_figure(r, "grouped_eff_fp8", 1.0, 1.0);
  m.grouped_eff_fp4 = parse_measured_figure(r, "grouped_eff_fp4", 1.0, 1.0);
  m.hbm_bytes_per_s = parse_measured_figure(r, "hbm_tb_per_s", 1e12, g.hbm_bytes_per_s * 1e-12);
  m.launch_s = parse_measured_figure(r, "launch_us", 1e-6, 1000.0);
  m.attention_decode_eff = parse_measured_figure(r, "attention_decode_eff_bf16", 1.0, 1.0, true);
  m.attention_decode_eff_fp8 = parse_measured_figure(r, "attention_decode_eff_fp8", 1.0, 1.0, true);
  m.attention_decode_trtllm_gen_fp8 =
      parse_measured_figure(r, "attention_decode_trtllm_gen_eff_fp8", 1.0, 1.0, true);
  m.attention_prefill_eff = parse_measured_figure(r, "attention_prefill_eff_bf16", 1.0, 1.0, true);
  check_trtllm_gen_run(r, m.attention_decode_trtllm_gen_fp8, g);
  // An efficiency of a format the GPU has no tensor cores for would cost it at another format's peak.
  for (const auto& [key, fig, peak] :
       {std::tuple{"gemm_eff_fp8", &m.gemm_eff_fp8, g.fp8_flops_per_s},
        std::tuple{"grouped_eff_fp8", &m.grouped_eff_fp8, g.fp8_flops_per_s},
        std::tuple{"attention_decode_eff_fp8", &m.attention_decode_eff_fp8, g.fp8_flops_per_s},
        std::tuple{"attention_decode_trtllm_gen_eff_fp8", &m.attention_decode_trtllm_gen_fp8,
                   g.fp8_flops_per_s},
        std::tuple{"gemm_eff_fp4", &m.gemm_eff_fp4, g.fp4_flops_per_s},
        std::tuple{"grouped_eff_fp4", &m.grouped_eff_fp4, g.fp4_flops_per_s}}) {
    if (fig->known() && peak <= 0) r.fail(key, "the GPU has no tensor cores for this format (its peak is 0)");
  }
  r.finish();
  return m;
}

}  // namespace

GpuSpec parse_gpu(JsonReader& r, const std::string& name) {
  GpuSpec g;
  g.name = name;
  (void)r.string("source", "");
  g.arch = r.string("arch", "");
  g.profile_basis = r.string("profile_basis", "");
  // Physical ranges (a phone GPU to a hundred times a B200): every cost divides by one of these.
  g.hbm_bytes = r.number_in("hbm_gb", 0.1, 1e5) * 1e9;
  g.hbm_bytes_per_s = r.number_in("hbm_tb_per_s", 0.01, 1e3) * 1e12;
  g.l2_bytes = r.bounded("l2_mib", 0, 0, 1e5) * 1024.0 * 1024.0;
  g.sms = r.int_in("sms", g.sms, 1, 1 << 16);
  g.bf16_flops_per_s = r.number_in("bf16_tflops", 0.1, 1e6) * 1e12;
  g.fp8_flops_per_s = r.bounded("fp8_tflops", 0, 0, 1e6) * 1e12;
  g.int8_ops_per_s = r.bounded("int8_tops", 0, 0, 1e6) * 1e12;
  g.fp4_flops_per_s = r.bounded("fp4_tflops", 0, 0, 1e6) * 1e12;
  g.mem_efficiency = r.fraction("mem_efficiency", g.mem_efficiency);
  g.compute_efficiency = r.fraction("compute_efficiency", g.compute_efficiency);
  // Every kernel time divides by these: below 1% a time leaves the picosecond clock.
  for (const char* key : {"mem_efficiency", "compute_efficiency"}) {
    const double x = std::string_view(key) == "mem_efficiency" ? g.mem_efficiency : g.compute_efficiency;
    if (x < 0.01) r.fail(key, "must be in [0.01, 1], got " + Json(x).dump());
  }
  g.kernel_overhead = Duration::from_us(r.bounded("kernel_overhead_us", g.kernel_overhead.us(), 0.0, 1e6));
  g.nvlink_bytes_per_s = r.number_in("nvlink_gb_per_s", 0.1, 1e6) * 1e9;
  g.nvlink_latency = Duration::from_us(r.bounded("nvlink_latency_us", g.nvlink_latency.us(), 0.0, 1e6));
  g.nic_bytes_per_s = r.number_in("nic_gbit_per_s", 0.1, 1e6) * 1e9 / 8.0;
  g.nic_latency = Duration::from_us(r.bounded("nic_latency_us", g.nic_latency.us(), 0.0, 1e6));
  if (r.has("pcie_gb_per_s")) {
    r.fail("pcie_gb_per_s",
           "the host link is the fabric's: set cluster.fabric.pcie_gb_per_s or host_link_gb_per_s");
  }
  if (auto m = r.optional_object("measured")) g.measured = parse_gpu_measured(*m, g);
  r.finish();
  return g;
}

namespace {

// Levels of objects and arrays in `j` (0 for a scalar); `j` is already held to kMaxJsonDepth.
int json_depth(const Json& j) {
  if (!j.is_structured()) return 0;
  int deepest = 0;
  for (const Json& v : j) deepest = std::max(deepest, json_depth(v));
  return deepest + 1;
}

}  // namespace

void apply_override(Json& j, std::string_view assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    throw InputError("--set " + std::string(assignment), "expected path.to.key=value");
  }
  const std::string path(assignment.substr(0, eq));
  const std::string text(assignment.substr(eq + 1));
  require_utf8(path, "--set " + printable(path));
  require_utf8(text, "--set " + path);
  // A value that is not JSON is taken as a string; a JSON one is held to the file's limits.
  Json value = parse_json_if_valid(text, "--set " + path).value_or(Json(text));
  // The path's objects and the value's nesting together stay within the files' depth limit (every walk
  // over the scenario recurses), checked before anything is built.
  const int levels = 1 + static_cast<int>(std::count(path.begin(), path.end(), '.')) + json_depth(value);
  if (levels > kMaxJsonDepth) {
    throw InputError("--set " + (path.size() > 80 ? path.substr(0, 80) + "..." : path),
                     "nests the scenario " + std::to_string(levels) + " levels deep, more than the " +
                         std::to_string(kMaxJsonDepth) + " levels a scenario may have");
  }
  Json* node = &j;
  std::size_t start = 0;
  std::string walked;
  for (;;) {
    const auto dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty()) throw InputError("--set " + path, "empty key in path");
    walked += (walked.empty() ? "" : ".") + key;
    if (!node->is_object()) {
      throw InputError("--set " + path, walked + " is inside a value that is not an object");
    }
    // `name[i]`: entry i of the array `name` (deployment.pools[1].instances=3); the entry must exist.
    if (const auto open = key.find('['); open != std::string::npos) {
      const std::string name = key.substr(0, open);
      const std::string digits = key.substr(open + 1, key.size() - open - 2);
      if (name.empty() || key.back() != ']' || digits.empty() || digits.size() > 6 ||
          !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        throw InputError("--set " + path, walked + ": expected name[index] with a decimal index");
      }
      const auto it = node->find(name);
      if (it == node->end() || !it->is_array()) {
        throw InputError("--set " + path, walked + ": " + name + " is not an array in the scenario");
      }
      const std::size_t i = std::stoul(digits);
      if (i >= it->size()) {
        throw InputError("--set " + path, walked + ": " + name + " has " + std::to_string(it->size()) +
                                              " entries (indices from 0)");
      }
      Json& entry = (*it)[i];
      if (dot == std::string::npos) {
        entry = value;
        return;
      }
      node = &entry;
      start = dot + 1;
      continue;
    }
    if (dot == std::string::npos) {
      (*node)[key] = value;
      return;
    }
    Json& child = (*node)[key];
    if (child.is_null()) child = Json::object();
    // A catalog reference by name becomes {"base": name} so that a field of it can be overridden.
    if (child.is_string()) child = Json{{"base", child.get<std::string>()}};
    node = &child;
    start = dot + 1;
  }
}

KvMigrationSpec parse_kv_migration(JsonReader& d) {
  KvMigrationSpec m;
  auto r = d.optional_object("kv_migration");
  if (!r) return m;
  m.imbalance_ratio = r->number_in("imbalance_ratio", 1.0, 1e6);
  if (m.imbalance_ratio <= 1.0) r->fail("imbalance_ratio", "must be above 1 (most / least loaded instance)");
  m.check_every = Duration::from_seconds(r->bounded("check_every_s", 1.0, 1e-6, kMaxSeconds));
  if (m.check_every <= Duration::zero()) r->fail("check_every_s", "must be positive");
  m.max_requests_per_check = r->int_in("max_requests_per_check", 8, 1, 1 << 20);
  r->finish();
  return m;
}

namespace {

// deployment.single_batch_overlap: SGLang's single-batch overlap works on DeepEP's low-latency combine
// (its overlap arguments are the low-latency kernels'), and either overlap schedule owns the layer.
void parse_single_batch_overlap(JsonReader& d, DeploymentSpec& dep) {
  dep.single_batch_overlap = d.boolean("single_batch_overlap", false);
  if (!dep.single_batch_overlap) return;
  if (dep.two_batch_overlap) {
    d.fail("single_batch_overlap", "and two_batch_overlap are exclusive (each is its own layer schedule)");
  }
  if (dep.all_to_all_mode != AllToAllMode::kLowLatency) {
    d.fail("single_batch_overlap",
           "needs deployment.all_to_all \"low_latency\" (SGLang overlaps DeepEP's "
           "low-latency combine)");
  }
}

}  // namespace

// deployment.adp_balance: TensorRT-LLM's attention-DP context balancing, for the trtllm scheduler under
// attention DP (present: on).
AdpBalanceSpec parse_adp_balance(JsonReader& d, const DeploymentSpec& dep) {
  AdpBalanceSpec b;
  auto r = d.optional_object("adp_balance");
  if (!r) return b;
  if (dep.scheduler != "trtllm") {
    d.fail("adp_balance",
           "is TensorRT-LLM's: it needs deployment.scheduler \"trtllm\" (here \"" + dep.scheduler + "\")");
  }
  if (dep.attention_dp < 2) d.fail("adp_balance", "balances contexts across attention.dp ranks: dp is 1");
  b.enabled = true;
  b.batching_wait_iters = r->int_in("batching_wait_iters", 0, 0, 1 << 20);
  b.timeout_iters = r->int_in("timeout_iters", 1, 1 << 20);
  r->finish();
  return b;
}

// deployment.capacity_scheduler_policy: TensorRT-LLM's capacity scheduler policy, for the trtllm scheduler
// ("guaranteed_no_evict", its default, or "max_utilization"); deployment.max_input_len: the longest prompt
// TensorRT-LLM takes and, under max_utilization, the most a paused request keeps (absent: unbounded).
void parse_capacity_policy(JsonReader& d, DeploymentSpec& dep) {
  const bool has_policy = d.has("capacity_scheduler_policy");
  const std::string policy = d.string("capacity_scheduler_policy", "guaranteed_no_evict");
  if (has_policy && dep.scheduler != "trtllm") {
    d.fail("capacity_scheduler_policy",
           "is TensorRT-LLM's: it needs deployment.scheduler \"trtllm\" (here \"" + dep.scheduler + "\")");
  }
  if (policy == "guaranteed_no_evict") {
    dep.capacity_policy = CapacitySchedulerPolicy::kGuaranteedNoEvict;
  } else if (policy == "max_utilization") {
    dep.capacity_policy = CapacitySchedulerPolicy::kMaxUtilization;
  } else {
    d.fail(
        "capacity_scheduler_policy",
        "unknown policy \"" + policy + "\" (known: guaranteed_no_evict, max_utilization; docs/engines.md)");
  }
  if (!d.has("max_input_len")) return;
  if (dep.scheduler != "trtllm") {
    d.fail("max_input_len",
           "is TensorRT-LLM's: it needs deployment.scheduler \"trtllm\" (here \"" + dep.scheduler + "\")");
  }
  dep.max_input_len = d.int_in("max_input_len", 1, 1 << 24);
}

// deployment.moe_dp_padding: TensorRT-LLM's padding of every attention-DP rank's MoE input to the largest
// rank's tokens, so it needs attention DP; the two-batch overlap schedule splits the batch by its own rule
// and is not modelled with it.
bool parse_moe_dp_padding(JsonReader& d, const DeploymentSpec& dep) {
  const bool on = d.boolean("moe_dp_padding", false);
  if (!on) return false;
  if (dep.attention_dp < 2) d.fail("moe_dp_padding", "pads the MoE input across attention.dp ranks: dp is 1");
  if (dep.two_batch_overlap) {
    d.fail("moe_dp_padding",
           "is not modelled with deployment.two_batch_overlap (TensorRT-LLM pads the whole "
           "batch, not each micro-batch)");
  }
  return true;
}

// deployment.cuda_graph_batch_sizes: TensorRT-LLM's captured graph batch sizes with padding on, for the
// trtllm scheduler (absent or []: no padding). Ascending positive sequence counts.
std::vector<int> parse_cuda_graph_batch_sizes(JsonReader& d, const DeploymentSpec& dep) {
  if (!d.has("cuda_graph_batch_sizes")) return {};
  const Json& a = d.raw("cuda_graph_batch_sizes");
  if (dep.scheduler != "trtllm")
    d.fail("cuda_graph_batch_sizes",
           "pads batches as TensorRT-LLM's CUDA-graph runner does: it needs "
           "deployment.scheduler \"trtllm\" (here \"" +
               dep.scheduler + "\")");
  if (!a.is_array())
    d.fail("cuda_graph_batch_sizes",
           "must be an array of batch sizes ([]: no padding), got " + json_type_name(a));
  std::vector<int> sizes;
  for (const Json& x : a) {
    if (!x.is_number_integer() || x.get<std::int64_t>() < 1 || x.get<std::int64_t>() > (1 << 20) ||
        (!sizes.empty() && x.get<std::int64_t>() <= sizes.back()))
      d.fail("cuda_graph_batch_sizes", "must hold ascending integers in [1, 1048576]");
    sizes.push_back(static_cast<int>(x.get<std::int64_t>()));
  }
  return sizes;
}

// One deployment: the top-level `deployment` (whole_cluster: its instances fill the cluster) or a pool's
// (its keys merged over the top-level ones). Reads every key but `pools` and `speculative`.
DeploymentSpec parse_deployment(JsonReader& d, const ScenarioSpec& s, bool whole_cluster) {
  DeploymentSpec dep;
  const int total = s.cluster.total_gpus();
  dep.ep_size = d.positive_int("ep_size", total);
  if (whole_cluster && total % dep.ep_size != 0) {
    d.fail("ep_size",
           std::to_string(dep.ep_size) + " does not divide the cluster's " + std::to_string(total) + " GPUs");
  }
  if (dep.ep_size > kMaxEpGroup) {
    d.fail("ep_size", std::to_string(dep.ep_size) + " is more than the " + std::to_string(kMaxEpGroup) +
                          " GPUs an EP group's per-rank-pair traffic tables are sized for");
  }
  // A pool's instance lies inside the cluster too (and gpus_per_instance() stays far inside an int).
  if (dep.ep_size > total) {
    d.fail("ep_size",
           std::to_string(dep.ep_size) + " is more than the cluster's " + std::to_string(total) + " GPUs");
  }
  // The step planner and the fabric place an EP group inside one node or on whole nodes.
  const int per_node = s.cluster.gpus_per_node;
  if (dep.ep_size > per_node ? dep.ep_size % per_node != 0 : per_node % dep.ep_size != 0) {
    d.fail("ep_size", std::to_string(dep.ep_size) + " GPUs would split a node of " +
                          std::to_string(per_node) +
                          " (cluster.gpus_per_node): an EP group must divide a node or be whole nodes (a "
                          "multiple of " +
                          std::to_string(per_node) + ")");
  }
  // Whether the experts (with redundant slots) divide over ep_size is checked with the experts section.
  auto attn = d.optional_object("attention");
  Json empty = Json::object();
  JsonReader a = attn ? *attn : JsonReader(empty, d.path_of("attention"));
  dep.attention_tp = a.positive_int("tp", 1);
  dep.attention_dp = a.positive_int("dp", dep.ep_size / dep.attention_tp);
  // In 64 bits: two ints of up to 2^31 - 1 each.
  const std::int64_t dp_tp = std::int64_t{dep.attention_dp} * dep.attention_tp;
  if (dp_tp != dep.ep_size) {
    a.fail("dp", "dp x tp = " + std::to_string(dp_tp) +
                     " must equal deployment.ep_size = " + std::to_string(dep.ep_size));
  }
  a.finish();
  dep.max_batch_size = d.positive_int("max_batch_size", 256);
  if (dep.max_batch_size > (1 << 20)) d.fail("max_batch_size", "must be at most 1048576");
  dep.max_batched_tokens = d.positive_integer("max_batched_tokens", 8192);
  if (dep.max_batched_tokens > (1 << 20)) d.fail("max_batched_tokens", "must be at most 1048576");
  dep.chunked_prefill = d.boolean("chunked_prefill", true);
  dep.kv_cache_memory_fraction = d.fraction("kv_cache_memory_fraction", 0.9);
  dep.kv_block_tokens = d.int_in("kv_block_tokens", 16, 1, 1 << 20);
  dep.prefix_caching = d.boolean("prefix_caching", false);
  dep.activation_bytes = d.bounded("activation_gib", 4.0, 0.0, 1e6) * kGiB;
  dep.framework_overhead_bytes = d.bounded("framework_overhead_gib", 2.0, 0.0, 1e6) * kGiB;
  if (dep.activation_bytes < 0) d.fail("activation_gib", "must be >= 0");
  if (dep.framework_overhead_bytes < 0) d.fail("framework_overhead_gib", "must be >= 0");
  dep.max_waiting_requests = d.integer_in("max_waiting_requests", 0, 0, kMaxInteger);
  if (dep.max_waiting_requests < 0) d.fail("max_waiting_requests", "must be >= 0 (0 = unlimited)");
  const std::string mode = d.string("all_to_all", "high_throughput");
  if (mode == "high_throughput") {
    dep.all_to_all_mode = AllToAllMode::kHighThroughput;
  } else if (mode == "low_latency") {
    dep.all_to_all_mode = AllToAllMode::kLowLatency;
  } else if (mode == "nvlink_domain") {
    // One-sided NVLink kernels need every rank of the EP group in one NVLink domain.
    if (dep.ep_size > s.cluster.gpus_per_node) {
      d.fail("all_to_all", "nvlink_domain needs the EP group (ep_size " + std::to_string(dep.ep_size) +
                               ") inside one NVLink domain of " + std::to_string(s.cluster.gpus_per_node) +
                               " GPUs (cluster.gpus_per_node); use high_throughput, low_latency or auto");
    }
    dep.all_to_all_mode = AllToAllMode::kNvlinkDomain;
  } else if (mode == "auto") {
    dep.all_to_all_mode = AllToAllMode::kAuto;
  } else {
    d.fail("all_to_all",
           "unknown mode \"" + mode + "\" (known: high_throughput, low_latency, nvlink_domain, auto)");
  }
  dep.two_batch_overlap = d.boolean("two_batch_overlap", false);
  parse_single_batch_overlap(d, dep);
  if (d.has("comm_sms")) {
    dep.comm_sms = d.int_in("comm_sms", 0, s.cluster.gpu.sms - 1);
    if (!dep.two_batch_overlap && !dep.single_batch_overlap)
      d.fail("comm_sms", "only matters with deployment.two_batch_overlap or single_batch_overlap");
  }
  const std::string engine = d.string("engine", "vllm");
  const auto kind = parse_engine(engine);
  if (!kind) {
    d.fail("engine", "unknown engine \"" + engine +
                         "\" (known: pytorch_graph, pytorch_loop, vllm, sglang, trtllm; docs/engines.md)");
  }
  dep.engine = engine_profile(*kind);
  if (d.has("expert_kernel")) {
    const std::string family = d.string("expert_kernel");
    const auto f = parse_expert_kernel(family);
    if (!f) {
      d.fail("expert_kernel", "unknown expert kernel \"" + family +
                                  "\" (known: cutlass_grouped, triton_fused_moe, deepgemm; docs/engines.md)");
    }
    dep.engine.expert_family = *f;
  }
  if (d.has("decode_attention_kernel")) {
    const std::string name = d.string("decode_attention_kernel");
    const auto k = parse_decode_attention_kernel(name);
    if (!k) {
      d.fail("decode_attention_kernel",
             "unknown decode attention kernel \"" + name + "\" (known: fitted, trtllm_gen; docs/engines.md)");
    }
    dep.engine.decode_attention = *k;
  }
  dep.engine.overlap_scheduler = d.boolean("overlap_scheduler", dep.engine.overlap_scheduler);
  dep.engine.host_us_per_sequence = d.non_negative("host_us_per_sequence", dep.engine.host_us_per_sequence);
  dep.engine.eager_launch_us = d.non_negative("eager_launch_us", dep.engine.eager_launch_us);
  const std::string own_scheduler = *kind == EngineKind::kSglang   ? "sglang"
                                    : *kind == EngineKind::kTrtllm ? "trtllm"
                                                                   : "vllm";
  dep.scheduler = d.string("scheduler", own_scheduler);
  if (find_scheduler(dep.scheduler) == nullptr) {
    std::string known;
    for (const SchedulerEntry& e : schedulers()) known += (known.empty() ? "" : ", ") + std::string(e.name);
    d.fail("scheduler",
           "unknown scheduler \"" + dep.scheduler + "\" (known: " + known + "; docs/engines.md)");
  }
  if (auto pp = d.optional_object("pipeline")) {
    dep.pipeline_stages = pp->positive_int("stages", 1);
    dep.pipeline_microbatches = pp->positive_int("microbatches", dep.pipeline_stages);
    if (dep.pipeline_stages > s.model.num_layers) pp->fail("stages", "cannot exceed the model's layers");
    if (whole_cluster && total % (dep.ep_size * dep.pipeline_stages) != 0) {
      pp->fail("stages", "ep_size x stages = " + std::to_string(dep.ep_size * dep.pipeline_stages) +
                             " does not divide the cluster's " + std::to_string(total) + " GPUs");
    }
    if (dep.pipeline_microbatches > 1024) pp->fail("microbatches", "must be at most 1024");
    pp->finish();
  }
  dep.expert_tp = d.int_in("expert_tp_size", 1, 1, kMaxClusterGpus);
  if (dep.expert_tp > 1) {
    const std::string t = std::to_string(dep.expert_tp);
    if (s.model.routed_experts == 0) d.fail("expert_tp_size", "the model has no routed experts to split");
    if (dep.ep_size % dep.expert_tp != 0) {
      d.fail("expert_tp_size", t + " does not divide deployment.ep_size = " + std::to_string(dep.ep_size) +
                                   " (the GPUs that hold the experts)");
    }
    if (s.model.expert_inter % dep.expert_tp != 0) {
      d.fail("expert_tp_size", t + " does not divide the model's expert_inter (" +
                                   std::to_string(s.model.expert_inter) +
                                   "): each rank holds inter / tp columns");
    }
    if (s.cluster.gpus_per_node % dep.expert_tp != 0) {
      d.fail("expert_tp_size",
             t + " does not divide cluster.gpus_per_node = " + std::to_string(s.cluster.gpus_per_node) +
                 ": an expert's tensor-parallel group stays inside one NVLink node");
    }
  }
  dep.router = d.string("router", "least_loaded");
  const RouterEntry* router = find_router(dep.router);
  if (router == nullptr) {
    std::string known;
    for (const RouterEntry& e : routers()) known += (known.empty() ? "" : ", ") + std::string(e.name);
    d.fail("router", "unknown router \"" + dep.router + "\" (known: " + known + ")");
  }
  if (router->needs_prefix_caching && !dep.prefix_caching) {
    d.fail("router", dep.router + " routes by the groups' prefix caches: set deployment.prefix_caching true");
  }
  dep.kv_migration = parse_kv_migration(d);
  dep.adp_balance = parse_adp_balance(d, dep);
  parse_capacity_policy(d, dep);
  dep.moe_dp_padding = parse_moe_dp_padding(d, dep);
  dep.cuda_graph_batch_sizes = parse_cuda_graph_batch_sizes(d, dep);
  return dep;
}

namespace {

PredictorSpec parse_predictor(JsonReader& a) {
  PredictorSpec p;
  const std::string kind = a.string("predictor", "last");
  if (kind == "last") {
    p.kind = PredictorKind::kLast;
  } else if (kind == "moving_average") {
    p.kind = PredictorKind::kMovingAverage;
  } else if (kind == "holt") {
    p.kind = PredictorKind::kHolt;
  } else {
    a.fail("predictor", "unknown predictor \"" + kind + "\" (known: last, moving_average, holt)");
  }
  p.window = a.int_in("window", p.window, 1, 1000);
  p.alpha = a.fraction("alpha", p.alpha);
  p.beta = a.fraction("beta", p.beta);
  return p;
}

WeightSource parse_weight_source(JsonReader& a, const ScenarioSpec& s) {
  const std::string from = a.string("weights_from", "nvme");
  if (from == "nvme") return WeightSource::kNvme;
  if (from == "host_dram") return WeightSource::kHostDram;
  if (from == "peer_network") return WeightSource::kPeerNetwork;
  if (from == "peer_nvlink") {
    if (s.cluster.gpus_per_node < 2) a.fail("weights_from", "peer_nvlink needs two GPUs in an NVLink domain");
    return WeightSource::kPeerNvlink;
  }
  a.fail("weights_from",
         "unknown source \"" + from + "\" (known: nvme, host_dram, peer_nvlink, peer_network)");
}

// deployment.autoscale.pools[i]: the bounds of pool i (of the pools a run builds) under the planner.
AutoscalePoolSpec parse_autoscale_pool(JsonReader& r, const PoolSpec& pool) {
  AutoscalePoolSpec p;
  p.max_instances = r.int_in("max_instances", pool.instances, 1, pool.instances);
  p.min_instances = r.int_in("min_instances", 1, 1, p.max_instances);
  p.initial_instances = r.int_in("initial_instances", p.min_instances, p.min_instances, p.max_instances);
  if (r.has("capacity_req_per_s") == r.has("capacity_tokens_per_s"))
    r.fail("", "give capacity_req_per_s or capacity_tokens_per_s (one instance's capacity within the SLA)");
  if (r.has("capacity_req_per_s")) p.capacity_req_per_s = r.positive("capacity_req_per_s");
  if (r.has("capacity_tokens_per_s")) p.capacity_tokens_per_s = r.positive("capacity_tokens_per_s");
  r.finish();
  return p;
}

// deployment.autoscale: the planner's interval, predictor, bounds per pool and GPU budget, and what a
// scale-up costs (weights over the named path, fixed costs).
AutoscaleSpec parse_autoscale(JsonReader& d, const ScenarioSpec& s) {
  AutoscaleSpec a;
  auto o = d.optional_object("autoscale");
  if (!o) return a;
  a.enabled = true;
  bool migration = s.deployment.kv_migration.enabled();
  for (const PoolSpec& p : s.pools) migration = migration || p.deployment.kv_migration.enabled();
  if (migration) {
    d.fail("autoscale",
           "the planner is not modelled with deployment.kv_migration (a migration could land "
           "on an instance being drained); remove one of them");
  }
  a.interval = Duration::from_seconds(o->bounded("interval_s", 60.0, 1e-3, kMaxSeconds));
  if (a.interval < Duration::from_ms(1)) o->fail("interval_s", "must be at least 0.001");
  a.predictor = parse_predictor(*o);
  a.weights_from = parse_weight_source(*o, s);
  a.engine_start = Duration::from_seconds(o->bounded("engine_start_s", 0.0, 0.0, kMaxSeconds));
  a.cuda_graph_capture = Duration::from_seconds(o->bounded("cuda_graph_capture_s", 0.0, 0.0, kMaxSeconds));
  a.usd_per_gpu_hour = o->has("usd_per_gpu_hour") ? o->number_in("usd_per_gpu_hour", 0.0, 1e6) : 0.0;
  const std::vector<PoolSpec> pools = s.pool_specs();
  const Json& arr = o->raw("pools");
  const std::string path = o->path_of("pools");
  if (!arr.is_array() || arr.size() != pools.size()) {
    throw InputError(path,
                     "expected an array of " + std::to_string(pools.size()) +
                         " pool bounds (one per pool the deployment runs), got " +
                         (arr.is_array() ? std::to_string(arr.size()) + " entries" : json_type_name(arr)));
  }
  int minimum_gpus = 0;
  for (std::size_t i = 0; i < pools.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    if (!arr[i].is_object()) throw InputError(at, "expected an object, got " + json_type_name(arr[i]));
    JsonReader r(arr[i], at);
    a.pools.push_back(parse_autoscale_pool(r, pools[i]));
    minimum_gpus += a.pools.back().min_instances * pools[i].deployment.gpus_per_instance();
  }
  const int total = s.cluster.total_gpus();
  a.gpu_budget = o->int_in("gpu_budget", total, 1, total);
  if (a.gpu_budget < minimum_gpus) {
    o->fail("gpu_budget", std::to_string(a.gpu_budget) + " GPUs cannot hold the pools' minimum instances (" +
                              std::to_string(minimum_gpus) + " GPUs)");
  }
  o->finish();
  return a;
}

// workload.arrival of kind "diurnal": a sinusoidal day (mean_rate_per_s, amplitude, peak_s) or a
// piecewise one (rates_per_s over equal slots), repeating every period_s.
DiurnalArrivals parse_diurnal(JsonReader& a) {
  DiurnalArrivals d;
  d.period_s = a.bounded("period_s", d.period_s, 1e-3, kMaxSeconds);
  if (d.period_s < 1e-3) a.fail("period_s", "must be at least 0.001");
  if (!a.has("rates_per_s")) {
    d.mean_rate_per_s = rate_of(a, "mean_rate_per_s");
    d.amplitude = a.has("amplitude") ? a.number_in("amplitude", 0.0, 1.0) : d.amplitude;
    d.peak_s = a.bounded("peak_s", std::min(d.peak_s, d.period_s), 0.0, d.period_s);
    return d;
  }
  for (const char* k : {"mean_rate_per_s", "amplitude", "peak_s"}) {
    if (a.has(k)) a.fail(k, "a piecewise day (rates_per_s) has no sinusoid; remove " + a.path_of(k));
  }
  const Json& r = a.raw("rates_per_s");
  const std::string at = a.path_of("rates_per_s");
  if (!r.is_array() || r.empty() || r.size() > 100000) {
    throw InputError(at, "expected a non-empty array of at most 100000 rates, got " + json_type_name(r));
  }
  for (std::size_t i = 0; i < r.size(); ++i) {
    const std::string ai = at + "[" + std::to_string(i) + "]";
    if (!r[i].is_number()) throw InputError(ai, "expected a number, got " + json_type_name(r[i]));
    const double x = r[i].get<double>();
    if (!(x >= 0 && x <= 1e7)) throw InputError(ai, "must be within [0, 1e7] requests per second");
    d.rates_per_s.push_back(x);
  }
  if (diurnal_max_rate(d) < 1.0 / kMaxSeconds) throw InputError(at, "needs a positive rate in some slot");
  return d;
}

}  // namespace

// deployment.pools: each entry's keys over the top-level deployment's; pools take consecutive GPUs of the
// cluster in order. Either every pool prefills and decodes (role "both") or there are prefill and decode
// pools (disaggregation).
std::vector<PoolSpec> parse_pools(JsonReader& d, const ScenarioSpec& s) {
  std::vector<PoolSpec> pools;
  if (!d.has("pools")) {
    (void)d.optional_object("pools");  // marks the key known
    return pools;
  }
  const Json& arr = d.raw("pools");
  const std::string path = d.path_of("pools");
  if (!arr.is_array() || arr.empty()) {
    throw InputError(path, "expected a non-empty array of pools, got " + json_type_name(arr));
  }
  if (arr.size() > 64) throw InputError(path, "at most 64 pools");
  Json base = Json::object();
  for (auto it = d.json().begin(); it != d.json().end(); ++it) {
    if (it.key() != "pools" && it.key() != "speculative" && it.key() != "autoscale")
      base[it.key()] = it.value();
  }
  const int total = s.cluster.total_gpus();
  const int per_node = s.cluster.gpus_per_node;
  int next_gpu = 0;
  bool both = false;
  bool prefill = false;
  bool decode = false;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    if (!arr[i].is_object()) throw InputError(at, "expected an object, got " + json_type_name(arr[i]));
    Json merged = base;
    for (auto it = arr[i].begin(); it != arr[i].end(); ++it) merged[it.key()] = it.value();
    JsonReader r(merged, at);
    PoolSpec p;
    const std::string role = r.string("role");
    if (role == "prefill") {
      p.role = PoolRole::kPrefill;
    } else if (role == "decode") {
      p.role = PoolRole::kDecode;
    } else if (role == "both") {
      p.role = PoolRole::kBoth;
    } else {
      r.fail("role", "unknown role \"" + role + "\" (known: prefill, decode, both)");
    }
    p.instances = r.int_in("instances", 1, 1, 1 << 20);
    p.deployment = parse_deployment(r, s, false);
    if (p.role == PoolRole::kDecode && p.deployment.prefix_caching) {
      r.fail(
          "prefix_caching",
          "a decode pool receives each request's whole KV cache from its prefill instance: prefix caching "
          "applies where prompts are prefilled; set it on the prefill pool only (not at deployment level)");
    }
    r.finish();
    p.first_gpu = next_gpu;
    const std::int64_t end =
        std::int64_t{next_gpu} + std::int64_t{p.instances} * p.deployment.gpus_per_instance();
    if (end > total) {
      throw InputError(at, "needs GPUs " + std::to_string(next_gpu) + " to " + std::to_string(end - 1) +
                               " (" + std::to_string(p.instances) + " instances x " +
                               std::to_string(p.deployment.gpus_per_instance()) +
                               " GPUs after the pools before it) but the cluster has " +
                               std::to_string(total) + " GPUs");
    }
    // An instance inside one node or on whole nodes: the step planner places its GPUs from a node start.
    const int size = p.deployment.gpus_per_instance();
    const bool fits_nodes =
        size % per_node == 0 ? next_gpu % per_node == 0 : per_node % size == 0 && next_gpu % size == 0;
    if (!fits_nodes) {
      throw InputError(at,
                       "its instances of " + std::to_string(size) + " GPUs would start at GPU " +
                           std::to_string(next_gpu) + " and straddle nodes of " + std::to_string(per_node) +
                           " GPUs; an instance must lie in one node or on whole nodes (reorder the pools or "
                           "change their sizes)");
    }
    next_gpu = static_cast<int>(end);
    both = both || p.role == PoolRole::kBoth;
    prefill = prefill || p.role == PoolRole::kPrefill;
    decode = decode || p.role == PoolRole::kDecode;
    pools.push_back(std::move(p));
  }
  if (both && (prefill || decode)) {
    throw InputError(path, "pools of role \"both\" do not mix with prefill and decode pools");
  }
  if (prefill != decode) {
    throw InputError(path, std::string("a ") + (prefill ? "prefill" : "decode") + " pool needs a " +
                               (prefill ? "decode" : "prefill") + " pool to hand requests to");
  }
  return pools;
}

LoadedScenario parse_scenario(const Json& j, const std::string& base_dir) {
  LoadedScenario out;
  ScenarioSpec& s = out.spec;
  out.effective = j;
  JsonReader root(j, "");
  s.name = root.string("name", "unnamed");
  (void)root.string("description", "");

  // Model (catalog name or object).
  const Json model_json = resolve_entry(root.raw("model"), kModels, "model");
  out.effective["model"] = model_json;
  {
    JsonReader mr(model_json, "model");
    s.model = parse_model(mr);
  }
  check_dense_model(s.model, j);
  const Json& model_ref = j["model"];
  s.model.name = model_ref.is_string()        ? model_ref.get<std::string>()
                 : model_ref.contains("base") ? model_ref["base"].get<std::string>()
                                              : std::string("custom");
  const std::string default_weights = model_json.value("default_weights", "bf16");

  // Precisions.
  {
    auto pr = root.optional_object("precision");
    Json empty = Json::object();
    JsonReader p = pr ? *pr : JsonReader(empty, "precision");
    const Precision weights =
        precision_of(p, "weights", parse_precision(default_weights).value_or(Precision::kBF16));
    PrecisionSpec& ps = s.precision;
    ps.routed_experts = precision_of(p, "routed_experts", weights);
    ps.shared_experts = precision_of(p, "shared_experts", weights);
    ps.attention = precision_of(p, "attention", weights);
    ps.dense_ffn = precision_of(p, "dense_ffn", weights);
    ps.router = precision_of(p, "router", Precision::kBF16);
    ps.embeddings = precision_of(p, "embeddings", Precision::kBF16);
    ps.kv_cache = precision_of(p, "kv_cache", Precision::kBF16);
    ps.dispatch =
        precision_of(p, "dispatch", weights == Precision::kFP8 ? Precision::kFP8 : Precision::kBF16);
    ps.combine = precision_of(p, "combine", Precision::kBF16);
    p.finish();
  }

  // Cluster.
  {
    JsonReader c = root.object("cluster");
    const Json& gpu_ref = c.raw("gpu");
    const Json gpu_json = resolve_entry(gpu_ref, kGpus, "cluster.gpu");
    out.effective["cluster"]["gpu"] = gpu_json;
    std::string gpu_name = gpu_ref.is_string()        ? gpu_ref.get<std::string>()
                           : gpu_ref.contains("base") ? gpu_ref["base"].get<std::string>()
                                                      : "custom-gpu";
    JsonReader gr(gpu_json, "cluster.gpu");
    s.cluster.gpu = parse_gpu(gr, gpu_name);
    // The fabric: a fabrics.json name, {"base": name, ...} or an object; without one, the GPU entry's
    // link figures on the FabricSpec defaults. Its gpus_per_node is the cluster's default.
    Json fabric_json = Json::object();
    if (c.has("fabric")) {
      fabric_json = resolve_entry(c.raw("fabric"), kFabricsCatalog, "cluster.fabric");
      out.effective["cluster"]["fabric"] = fabric_json;
    }
    s.cluster.nodes = c.int_in("nodes", 1, 1, kMaxClusterGpus);
    s.cluster.gpus_per_node =
        c.int_in("gpus_per_node", fabric_gpus_per_node(fabric_json, 8), 1, kMaxClusterGpus);
    // Per-GPU state and leaf-pair routes: refuse what would not fit in memory.
    if (std::int64_t{s.cluster.nodes} * s.cluster.gpus_per_node > kMaxClusterGpus) {
      c.fail("nodes", std::to_string(s.cluster.nodes) + " nodes x " +
                          std::to_string(s.cluster.gpus_per_node) + " GPUs is more than the " +
                          std::to_string(kMaxClusterGpus) +
                          " GPUs the simulator sizes its per-GPU state for");
    }
    FabricSpec& f = s.cluster.fabric;
    f = parse_fabric(fabric_json, "cluster.fabric", s.cluster.nodes, s.cluster.gpus_per_node, s.cluster.gpu);
    // The cluster-level link keys override the fabric's figures.
    if (c.has("nvlink_gb_per_s")) f.nvlink_bytes_per_s = c.number_in("nvlink_gb_per_s", 0.1, 1e6) * 1e9;
    if (c.has("nvlink_latency_us"))
      f.nvlink_latency = Duration::from_us(c.bounded("nvlink_latency_us", 0, 0.0, kMaxLatencyUs));
    if (c.has("nic_gbit_per_s")) f.nic_bytes_per_s = c.number_in("nic_gbit_per_s", 0.1, 1e6) * 1e9 / 8.0;
    if (c.has("nic_latency_us"))
      f.nic_latency = Duration::from_us(c.bounded("nic_latency_us", 0, 0.0, kMaxLatencyUs));
    if (c.has("all_to_all_efficiency")) {
      // It used to scale FabricSpec::efficiency, which now means bulk NVLink copies only; All-to-All
      // efficiency is per kernel family and per link kind.
      c.fail(
          "all_to_all_efficiency",
          "no longer supported: All-to-All efficiency is per kernel family and link; set "
          "cluster.fabric.all_to_all_kernels.{high_throughput,low_latency,nvlink_domain}.{nvlink_efficiency,"
          "nic_efficiency} (or cluster.fabric.nvlink_copy_efficiency for weight copies)");
    }
    c.finish();
  }

  // Deployment.
  {
    JsonReader d = root.object("deployment");
    s.deployment = parse_deployment(d, s, !d.has("pools"));
    s.pools = parse_pools(d, s);
    s.production.speculative = parse_speculative(d);
    s.autoscale = parse_autoscale(d, s);
    int stages = s.deployment.pipeline_stages;
    for (const PoolSpec& pool : s.pools) stages = std::max(stages, pool.deployment.pipeline_stages);
    if (s.production.speculative && stages > 1) {
      d.fail("speculative",
             "speculative decoding is not modelled with pipeline parallelism (pipeline.stages " +
                 std::to_string(stages) + "); remove one of them");
    }
    d.finish();
  }

  // Workload.
  {
    JsonReader w = root.object("workload");
    WorkloadSpec& wl = s.workload;
    JsonReader a = w.object("arrival");
    const std::string kind = a.string("kind");
    check_arrival_kind_keys(a, kind);
    bool is_trace = false;
    if (kind == "poisson") {
      wl.arrivals = PoissonArrivals{rate(a)};
    } else if (kind == "gamma") {
      wl.arrivals = GammaArrivals{rate(a), a.bounded("cv", 1.0, 1e-3, 1e3)};
    } else if (kind == "diurnal") {
      wl.arrivals = parse_diurnal(a);
    } else if (kind == "closed_loop") {
      const double think = a.bounded("think_time_s", 0.0, 0.0, kMaxSeconds);
      wl.arrivals = ClosedLoop{a.int_in("users", 1, 1 << 24), think};  // one slot per user up front
    } else if (kind == "trace") {
      is_trace = true;
      std::string file = a.string("file");
      const std::string format = a.string("format");
      if (std::filesystem::path(file).is_relative() && !base_dir.empty()) {
        file = (std::filesystem::path(base_dir) / file).lexically_normal().string();
      }
      // One pass over the file: its rows and (Mooncake) their block ids.
      KeyedTrace t = format == "servegen" ? KeyedTrace{servegen_trace_rows(a, file, j), {}}
                                          : read_trace_with_keys(file, format, a.path_of("format"));
      wl.trace = std::move(t.rows);
      s.production.trace_keys = std::move(t.keys);
      wl.trace_speedup = a.bounded("speedup", 1.0, 1e-6, 1e6);
    } else {
      a.fail("kind",
             "unknown arrival process \"" + kind + "\" (known: poisson, gamma, diurnal, closed_loop, trace)");
    }
    a.finish();
    check_workload_length_keys(w, is_trace, kind);
    if (!is_trace) {
      wl.prompt = parse_length(w.object("prompt_tokens"));
      wl.output = parse_length(w.object("output_tokens"));
    }
    auto pop = w.optional_object("expert_popularity");
    Json uniform = Json{{"kind", "uniform"}};
    wl.popularity =
        parse_popularity(pop ? *pop : JsonReader(uniform, "workload.expert_popularity"), s.model, wl);
    s.production.prefix = parse_workload_prefix(w, s, is_trace);
    w.finish();
    // A trace's keyed blocks (512 tokens in Mooncake) are split into KV blocks for the prefix cache.
    // Every pool that caches prefixes (its own kv_block_tokens over the top-level one) splits them.
    const std::int64_t keyed = s.production.trace_keys.block_tokens;
    const auto check_split = [keyed](const DeploymentSpec& d, const std::string& at) {
      if (d.prefix_caching && keyed > 0 && keyed % d.kv_block_tokens != 0) {
        throw InputError(at + "kv_block_tokens",
                         std::to_string(d.kv_block_tokens) + " does not divide the trace's " +
                             std::to_string(keyed) +
                             "-token hash blocks (prefix caching splits them into KV blocks)");
      }
    };
    if (s.pools.empty()) check_split(s.deployment, "deployment.");
    for (std::size_t i = 0; i < s.pools.size(); ++i) {
      check_split(s.pools[i].deployment, "deployment.pools[" + std::to_string(i) + "].");
    }
  }

  {
    auto ex = root.optional_object("experts");
    Json empty = Json::object();
    s.experts = parse_experts(ex ? *ex : JsonReader(empty, "experts"), s);
    // Every pool holds the experts over its own EP group.
    for (std::size_t i = 0; i < s.pools.size(); ++i) {
      try {
        (void)parse_experts(ex ? JsonReader(j.at("experts"), "experts") : JsonReader(empty, "experts"),
                            s.pool_view(s.pools[i]));
      } catch (const InputError& e) {
        throw InputError("deployment.pools[" + std::to_string(i) + "]", std::string(e.what()));
      }
    }
  }

  // SLA.
  {
    auto sla = root.optional_object("sla");
    Json empty = Json::object();
    JsonReader r = sla ? *sla : JsonReader(empty, "sla");
    s.sla.ttft = Duration::from_ms(r.bounded("ttft_ms", 2000, 1e-6, kMaxSeconds * 1e3));
    s.sla.tpot = Duration::from_ms(r.bounded("tpot_ms", 100, 1e-6, kMaxSeconds * 1e3));
    s.sla.percentile = r.number("percentile", 99);
    if (s.sla.percentile <= 0 || s.sla.percentile > 100) r.fail("percentile", "must be in (0, 100]");
    r.finish();
  }

  // Run.
  {
    JsonReader r = root.object("run");
    const std::int64_t seed = r.integer("seed", 1);
    if (seed < 0) r.fail("seed", "must be >= 0");
    s.run.seed = static_cast<std::uint64_t>(seed);
    s.run.requests = r.integer_in("requests", 0, 0, kMaxInteger);
    if (s.run.requests < 0) r.fail("requests", "must be >= 0");
    const double duration = r.bounded("duration_s", 0, 0.0, kMaxSeconds);
    s.run.duration = Duration::from_seconds(duration);
    // Seconds (the measurement window starts there), or "auto" (the default: found from the run's data).
    double warmup = 0;
    s.run.warmup_auto = !r.has("warmup_s") || r.json().at("warmup_s").is_string();
    if (!s.run.warmup_auto) {
      warmup = r.bounded("warmup_s", 0, 0.0, kMaxSeconds);
    } else if (r.has("warmup_s") && r.string("warmup_s") != "auto") {
      r.fail("warmup_s", "must be a number of seconds or \"auto\"");
    }
    if (duration > 0 && warmup >= duration) r.fail("warmup_s", "must be shorter than duration_s");
    s.run.warmup = Duration::from_seconds(warmup);
    s.run.max_drain = Duration::from_seconds(r.bounded("max_drain_s", 0, 0.0, kMaxSeconds));
    s.run.measure = parse_run_measure(s, r);
    s.run.moe_layer_sample = static_cast<int>(r.integer_in("moe_layer_sample", 0, 0, s.model.moe_layers()));
    if (s.run.moe_layer_sample > 0 && s.experts.any()) {
      r.fail("moe_layer_sample",
             "cannot sample layers while an experts-in-the-loop mechanism (placement other than contiguous, "
             "rebalancing, tiers, quantisation policy, re-routing) keeps per-layer state: remove the key");
    }
    if (s.run.moe_layer_sample > 0 && s.deployment.pipeline_stages > 1)
      r.fail("moe_layer_sample", "cannot sample layers under pipeline parallelism: remove the key");
    if (s.run.requests == 0 && duration == 0 && s.workload.trace.empty()) {
      r.fail("", "give run.requests or run.duration_s (or both) so that the run ends");
    }
    check_planned_arrivals(s, r);
    if (!s.workload.trace.empty()) {
      // The replayed part of the trace must fit the simulated horizon, as run.duration_s does.
      const auto& rows = s.workload.trace;
      const std::size_t last = s.run.requests > 0 && static_cast<std::size_t>(s.run.requests) < rows.size()
                                   ? static_cast<std::size_t>(s.run.requests) - 1
                                   : rows.size() - 1;
      double span_s = (rows[last].arrival - rows.front().arrival).seconds() / s.workload.trace_speedup;
      if (duration > 0) span_s = std::min(span_s, duration);
      if (span_s > kMaxSeconds) {
        char buf[48];
        std::snprintf(buf, sizeof buf, "%.6g", span_s);
        throw InputError("workload.arrival.speedup",
                         "the trace spans " + std::string(buf) +
                             " s at this speedup, more than the 1e6 s a run simulates; raise speedup or set "
                             "run.duration_s");
      }
    }
    r.finish();
  }
  if (auto f = root.optional_object("faults")) s.faults = parse_faults(*f, s);
  root.finish();
  check_consistency(s);
  // Per pool (a pool's view holds no trace rows: the rules on a trace's lengths do not apply to it).
  for (std::size_t i = 0; i < s.pools.size() && s.workload.trace.empty(); ++i) {
    try {
      check_consistency(s.pool_view(s.pools[i]));
    } catch (const InputError& e) {
      throw InputError("deployment.pools[" + std::to_string(i) + "]", std::string(e.what()));
    }
  }
  return out;
}

Json read_scenario_document(const std::string& path) {
  Json j = path.empty() ? parse_json_text(embedded_file("scenarios/default.json"), "scenarios/default.json")
                        : load_json_file(path);
  if (!j.is_object()) throw InputError(path, "a scenario must be a JSON object, got " + json_type_name(j));
  return j;
}

LoadedScenario load_scenario_document(Json j, const std::string& path,
                                      const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) apply_override(j, o);
  const std::string base = path.empty() ? std::string() : std::filesystem::path(path).parent_path().string();
  LoadedScenario loaded = parse_scenario(j, base);
  if (!loaded.spec.model.architecture_known) {
    // Simulation of an assumed architecture is allowed but must be visible.
    loaded.effective["model"]["architecture_known"] = false;
  }
  return loaded;
}

LoadedScenario load_scenario(const std::string& path, const std::vector<std::string>& overrides) {
  return load_scenario_document(read_scenario_document(path), path, overrides);
}

}  // namespace moesim
