#include "sim/scenario/experts_parser.h"

#include <algorithm>
#include <string>

#include "workloads/skew_calibration.h"

namespace moesim {

namespace {

double bounded(JsonReader& r, std::string_view key, double fallback, double lo, double hi) {
  const double x = r.number(key, fallback);
  if (x < lo || x > hi) {
    r.fail(key, "must be in [" + Json(lo).dump() + ", " + Json(hi).dump() + "], got " + Json(x).dump());
  }
  return x;
}

// Step counts and intervals: at most a billion steps (int64 arithmetic on them stays exact).
constexpr std::int64_t kMaxSteps = 1000000000;

std::int64_t non_negative(JsonReader& r, std::string_view key, std::int64_t fallback) {
  return r.integer_in(key, fallback, 0, kMaxSteps);
}

Precision precision_key(JsonReader& r, std::string_view key, Precision fallback) {
  if (!r.has(key)) return fallback;
  const std::string s = r.string(key);
  const auto p = parse_precision(s);
  if (!p) r.fail(key, "unknown precision \"" + s + "\" (known: fp32, bf16, fp16, fp8, int8, int4, fp4)");
  return *p;
}

Tier tier_key(JsonReader& r, std::string_view key, Tier fallback) {
  if (!r.has(key)) return fallback;
  const std::string s = r.string(key);
  if (s == "host_dram") return Tier::kHostDram;
  if (s == "nvme") return Tier::kNvme;
  r.fail(key, "unknown tier \"" + s + "\" (known: host_dram, nvme)");
}

// {"int8": 0.001, "int4": 0.01}: a value per precision name; other keys are errors.
void per_precision(JsonReader& r, std::string_view key, std::array<double, kPrecisionCount>& out, double lo) {
  auto o = r.optional_object(key);
  if (!o) return;
  for (std::size_t i = 0; i < kPrecisionCount; ++i) {
    const std::string name(to_string(static_cast<Precision>(i)));
    if (!o->has(name)) continue;
    const double x = o->number(name);
    if (x < lo) o->fail(name, "must be >= " + Json(lo).dump());
    out[i] = x;
  }
  o->finish();
}

PlacementPolicy placement_key(JsonReader& r) {
  const std::string s = r.string("placement", "contiguous");
  if (s == "contiguous") return PlacementPolicy::kContiguous;
  if (s == "round_robin") return PlacementPolicy::kRoundRobin;
  if (s == "coactivation") return PlacementPolicy::kCoactivation;
  if (s == "eplb") return PlacementPolicy::kEplb;
  r.fail("placement", "unknown placement \"" + s + "\" (known: contiguous, round_robin, coactivation, eplb)");
}

void parse_rebalance(JsonReader r, RebalanceSpec& out) {
  out.every_steps = non_negative(r, "every_steps", 0);
  out.imbalance_threshold = r.number("imbalance_threshold", 0);
  if (out.imbalance_threshold != 0 && out.imbalance_threshold < 1) {
    r.fail("imbalance_threshold", "must be >= 1 (max/mean per GPU) or 0 (off)");
  }
  out.check_steps = r.integer_in("check_steps", 100, 1, kMaxSteps);
  const std::string cost = r.string("cost", "transfer");
  if (cost == "transfer") {
    out.cost = RebalanceSpec::Cost::kTransfer;
  } else if (cost == "pause") {
    out.cost = RebalanceSpec::Cost::kPause;
  } else {
    r.fail("cost", "unknown rebalance cost \"" + cost + "\" (known: transfer, pause)");
  }
  const double pause_ms = bounded(r, "pause_ms", 0, 0, 1e9);
  if (cost == "pause" && !r.has("pause_ms")) r.fail("pause_ms", "is required with cost \"pause\"");
  out.pause = Duration::from_ms(pause_ms);
  if (!out.enabled()) r.fail("", "give every_steps or imbalance_threshold (or leave rebalance out)");
  r.finish();
}

void parse_tiers(JsonReader r, TiersSpec& t) {
  t.enabled = true;
  t.hbm_expert_bytes = r.number("hbm_expert_gib") * 1024.0 * 1024.0 * 1024.0;
  if (t.hbm_expert_bytes < 0) r.fail("hbm_expert_gib", "must be >= 0");
  t.staging_bytes =
      r.number("staging_gib", t.staging_bytes / 1024.0 / 1024.0 / 1024.0) * 1024.0 * 1024.0 * 1024.0;
  if (t.staging_bytes < 0) r.fail("staging_gib", "must be >= 0");
  t.warm_home = tier_key(r, "warm_home", Tier::kHostDram);
  t.cold_home = tier_key(r, "cold_home", Tier::kNvme);
  t.prefetch = r.boolean("prefetch", true);
  t.prefetch_window_batches = r.int_in("prefetch_window_batches", t.prefetch_window_batches, 1, 1 << 20);
  t.prefetch_threshold = r.integer_in("prefetch_threshold", t.prefetch_threshold, 1, kMaxSteps);
  t.reclassify_every_steps = non_negative(r, "reclassify_every_steps", t.reclassify_every_steps);
  LoaderSpec& l = t.loader;
  // The host link is the fabric's, one model for every use (tier loads, host transfers).
  for (const char* moved : {"host_link_gb_per_s", "host_latency_us", "gpus_per_host_link"}) {
    if (r.has(moved)) {
      r.fail(moved,
             "the host link is the fabric's: set cluster.fabric.host_link_gb_per_s, host_link_latency_us "
             "or gpus_per_host_link instead");
    }
  }
  // Drive figures in physical ranges: an expert load divides by them and must stay inside the clock.
  l.nvme_drive_bytes_per_s =
      bounded(r, "nvme_drive_gb_per_s", l.nvme_drive_bytes_per_s / 1e9, 0.01, 1e6) * 1e9;
  l.nvme_drives = r.int_in("nvme_drives", l.nvme_drives, 1, 4096);
  l.gpus_per_nvme_array = r.int_in("gpus_per_nvme_array", l.gpus_per_nvme_array, 1, 4096);
  l.nvme_latency = Duration::from_us(bounded(r, "nvme_latency_us", l.nvme_latency.seconds() * 1e6, 0, 1e6));
  r.finish();
}

void parse_quantization(JsonReader r, QuantizationSpec& q) {
  q.hot = precision_key(r, "hot", q.hot);
  q.warm = precision_key(r, "warm", q.warm);
  q.cold = precision_key(r, "cold", q.cold);
  q.scale_group_size = r.int_in("scale_group_size", q.scale_group_size, 1, 1 << 20);
  q.scale_bytes = bounded(r, "scale_bytes", q.scale_bytes, 0, 16);
  per_precision(r, "quality_penalty", q.quality_penalty, 0.0);
  per_precision(r, "dequant_factor", q.dequant_factor, 1.0);
  r.finish();
}

}  // namespace

ExpertsSpec parse_experts(JsonReader r, const ScenarioSpec& s) {
  ExpertsSpec x;
  const int experts = s.model.routed_experts;
  // Expert-parallel ranks: GPUs, or groups of deployment.expert_tp_size GPUs sharing every expert.
  const int ep = s.deployment.expert_ranks();
  const bool etp = s.deployment.expert_tp > 1;
  const std::string ep_name = etp ? "deployment.ep_size / expert_tp_size = " + std::to_string(ep) + " ranks"
                                  : "deployment.ep_size = " + std::to_string(ep) + " GPUs";
  x.placement = placement_key(r);
  if (x.placement == PlacementPolicy::kCoactivation && !s.workload.coactivation) {
    r.fail("placement", "\"coactivation\" needs workload.expert_popularity.coactivation (groups and rho)");
  }
  // Redundant slots, per GPU or in total (DeepSeek-V3: 32 redundant experts over the EP group); at most
  // one replica of every expert on each GPU.
  if (r.has("redundant_slots_per_gpu") && r.has("redundant_experts")) {
    r.fail("redundant_experts", "give redundant_experts (in total) or redundant_slots_per_gpu, not both");
  }
  const char* redundant_key =
      r.has("redundant_slots_per_gpu") ? "redundant_slots_per_gpu" : "redundant_experts";
  if (r.has("redundant_slots_per_gpu")) {
    x.redundant_experts = r.int_in("redundant_slots_per_gpu", 0, 0, experts) * ep;
  } else {
    x.redundant_experts =
        static_cast<int>(r.integer_in("redundant_experts", 0, 0, std::int64_t{experts} * ep));
  }
  if (x.redundant_experts > 0 && x.placement != PlacementPolicy::kEplb) {
    r.fail(redundant_key, "replicas need placement \"eplb\"");
  }
  // EP sizes: every GPU holds the same number of slots (experts + redundant slots, over ep_size).
  if (x.redundant_experts == 0 && experts % ep != 0) {
    throw InputError(etp ? "deployment.expert_tp_size" : "deployment.ep_size",
                     (etp ? ep_name : std::to_string(ep)) + " does not divide " + std::to_string(experts) +
                         " experts; with placement \"eplb\", experts.redundant_experts can make experts + "
                         "redundant slots a multiple of it (e.g. " +
                         std::to_string(ep - experts % ep) + ")");
  }
  if ((experts + x.redundant_experts) % ep != 0) {
    r.fail(redundant_key, std::to_string(experts) + " experts + " + std::to_string(x.redundant_experts) +
                              " redundant slots = " + std::to_string(experts + x.redundant_experts) +
                              " slots do not divide over " + ep_name + " (next multiple: " +
                              std::to_string((experts + x.redundant_experts + ep - 1) / ep * ep) + " slots)");
  }
  x.eplb_groups = r.int_in("eplb_groups", 1, 1, std::max(1, experts));
  if (experts % x.eplb_groups != 0)
    r.fail("eplb_groups", "must divide the " + std::to_string(experts) + " experts");
  if (auto p = r.optional_object("partition")) {
    x.partition.load_tolerance = bounded(*p, "load_tolerance", x.partition.load_tolerance, 1.0, 10.0);
    x.partition.refine_passes = p->int_in("refine_passes", x.partition.refine_passes, 0, 1000);
    p->finish();
  }
  if (auto reb = r.optional_object("rebalance")) {
    if (x.placement != PlacementPolicy::kEplb && x.placement != PlacementPolicy::kCoactivation) {
      r.fail("rebalance", "rebalancing needs placement \"eplb\" or \"coactivation\"");
    }
    parse_rebalance(*reb, x.rebalance);
  }
  if (auto st = r.optional_object("stats")) {
    x.stats.window_batches = st->int_in("window_batches", x.stats.window_batches, 1, 1 << 24);
    x.stats.hot_share = bounded(*st, "hot_share", x.stats.hot_share, 1e-9, 1.0);
    x.stats.warm_share = bounded(*st, "warm_share", x.stats.warm_share, x.stats.hot_share, 1.0);
    st->finish();
  }
  if (auto t = r.optional_object("tiers")) {
    if (etp) r.fail("tiers", "expert tiers do not combine with deployment.expert_tp_size > 1");
    parse_tiers(*t, x.tiers);
  }
  if (auto q = r.optional_object("quantization")) {
    x.quantization = true;
    parse_quantization(*q, x.quant);
  }
  if (auto rr = r.optional_object("rerouting")) {
    x.reroute_threshold = bounded(*rr, "threshold", 0, 0, 1e6);
    if (x.reroute_threshold < 1) rr->fail("threshold", "must be >= 1 (per-GPU load over the mean)");
    rr->finish();
  }
  const std::string admission = r.string("admission", "default");
  if (admission == "gpu_load_aware") {
    x.load_aware_admission = true;
  } else if (admission != "default") {
    r.fail("admission", "unknown admission \"" + admission + "\" (known: default, gpu_load_aware)");
  }
  r.finish();
  return x;
}

void parse_popularity_extensions(JsonReader& r, const ModelSpec& m, WorkloadSpec& w) {
  if (auto d = r.optional_object("drift")) {
    w.drift = true;
    w.drift_spec.half_life_s = bounded(*d, "half_life_s", 0, 0, 1e6);
    w.drift_spec.update_interval_s = bounded(*d, "update_interval_s", 0, 0, 1e6);
    if (d->has("phase_times_s")) {
      const Json& times = d->raw("phase_times_s");
      if (!times.is_array()) d->fail("phase_times_s", "must be an array of seconds");
      double last = 0;
      for (const Json& t : times) {
        if (!t.is_number() || t.get<double>() < last || t.get<double>() > 1e6)
          d->fail("phase_times_s", "must be ascending seconds in [0, 1e6]");
        last = t.get<double>();
        w.drift_spec.phase_times_s.push_back(last);
      }
    }
    if (w.drift_spec.half_life_s == 0 && w.drift_spec.phase_times_s.empty()) {
      d->fail("", "give half_life_s > 0 or phase_times_s (or leave drift out)");
    }
    d->finish();
  }
  if (auto c = r.optional_object("coactivation")) {
    w.coactivation = true;
    CoactivationSpec& cs = w.coactivation_spec;
    cs.group_size = c->int_in("group_size", cs.group_size, 1, std::max(1, m.routed_experts));
    if (m.routed_experts % cs.group_size != 0) {
      c->fail("group_size", "must divide the " + std::to_string(m.routed_experts) + " routed experts");
    }
    cs.rho = bounded(*c, "rho", cs.rho, 0, 1);
    cs.shuffle_groups_per_layer = c->boolean("shuffle_groups_per_layer", true);
    c->finish();
  }
  // At 4 one request's expert weights span exp(+-8) within two sd: far beyond any calibration here.
  w.request_affinity_sd = bounded(r, "request_affinity_sd", 0, 0, 4);
  if (w.request_affinity_sd > 0 && w.coactivation) {
    r.fail("request_affinity_sd",
           "cannot be combined with coactivation (the co-activation sampler draws from the population law)");
  }
}

double parse_calibrated_exponent(JsonReader& r, const ModelSpec& m) {
  const double target = bounded(r, "imbalance_ratio", 0, 1e-6, 1e6);
  SkewSetting set{.experts = m.routed_experts, .top_k = m.top_k};
  set.tokens = r.integer_in("tokens_per_iteration", 4096, 1, 1 << 24);
  set.ranks = r.int_in("ranks", 0, 0, m.routed_experts);
  if (set.ranks > 0 && m.routed_experts % set.ranks != 0) {
    r.fail("ranks", "must divide the " + std::to_string(m.routed_experts) + " routed experts");
  }
  // The fit samples ~42 x iterations routing draws over every expert: keep it to a fraction of a second.
  set.iterations = r.int_in("iterations", 100, 1, 10000);
  if (std::int64_t{set.iterations} * m.routed_experts > (std::int64_t{1} << 22)) {
    r.fail("iterations", std::to_string(set.iterations) + " iterations over " +
                             std::to_string(m.routed_experts) +
                             " experts is too much work for the fit; use at most " +
                             std::to_string((std::int64_t{1} << 22) / m.routed_experts));
  }
  return calibrate_zipf_exponent(target, set);
}

}  // namespace moesim
