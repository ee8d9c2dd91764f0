#include "sim/serving/report/report.h"

#include <cstdio>
#include <sstream>

namespace moesim {

namespace {
std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string ms(double s) { return fmt("%.2f", s * 1e3); }
std::string pct(double x) { return fmt("%.1f%%", x * 100.0); }
std::string gib(double b) { return fmt("%.1f", b / (1024.0 * 1024.0 * 1024.0)); }

void latency_row(std::ostringstream& o, const char* name, const LatencyStats& l) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "  %-18s %10s %10s %10s %10s %10s\n", name, ms(l.mean).c_str(),
                ms(l.p50).c_str(), ms(l.p95).c_str(), ms(l.p99).c_str(), ms(l.max).c_str());
  o << buf;
}
}  // namespace

std::vector<std::string> evaluate_alerts(const Report& r) {
  std::vector<std::string> a;
  // A failure and its recovery the window does not hold whole: the figures miss part of what it cost.
  int outside = 0;
  std::string first;
  for (const FaultRecord& f : r.faults.records) {
    const double end = f.recovered_s >= f.at_s && !f.outcome.empty() ? f.recovered_s : r.sim_end_s;
    if (r.window_kind == "whole run" || (f.at_s >= r.window_from_s && end <= r.window_to_s)) continue;
    if (outside++ == 0)
      first = "the " + f.kind + " failure at " + fmt("%.1f", f.at_s) + " s (recovered " + fmt("%.1f", end) +
              " s)";
  }
  if (outside > 0) {
    a.push_back(
        first + (outside > 1 ? " and " + std::to_string(outside - 1) + " more" : std::string()) +
        " lie partly outside the measured window (" + fmt("%.1f", r.window_from_s) + " to " +
        fmt("%.1f", r.window_to_s) +
        " s): its throughput, SLA and utilisation miss part of the recovery (shorten run.warmup_s, move the "
        "failure or lengthen run.duration_s)");
  }
  if (r.requests_measured == 0) {
    a.push_back(
        "no request was measured: none finished in the measurement window (after warm-up, before the last "
        "arrival) or every one was dropped; latency, SLA and throughput figures are empty");
  }
  const std::string p = fmt("P%g", r.sla_percentile);
  if (r.sla_ttft_at_percentile > r.sla_ttft_s) {
    a.push_back(p + " TTFT " + ms(r.sla_ttft_at_percentile) + " ms is over the SLA of " + ms(r.sla_ttft_s) +
                " ms");
  }
  if (r.sla_tpot_at_percentile > r.sla_tpot_s) {
    a.push_back(p + " TPOT " + ms(r.sla_tpot_at_percentile) + " ms is over the SLA of " + ms(r.sla_tpot_s) +
                " ms");
  }
  if (r.steps > 0 && r.gpu_mean.busy < 0.30) {
    a.push_back("GPU utilisation " + pct(r.gpu_mean.busy) +
                " is below 30%: the deployment is over-provisioned "
                "or batches are too small");
  }
  if (r.memory.hbm > 0 && r.memory.used() / r.memory.hbm > 0.90) {
    a.push_back("memory use " + pct(r.memory.used() / r.memory.hbm) + " of HBM is above 90%");
  }
  if (r.overloaded) {
    a.push_back(
        "overloaded: requests in the system grew from " + fmt("%.0f", r.in_system_start) + " to " +
        fmt("%.0f", r.in_system_end) + " through the measured window (trend t = " + fmt("%.1f", r.trend.t) +
        ", p = " + fmt("%.2g", r.trend.p_growth) + ") and took " + fmt("%.1f", r.drain_s) +
        " s to drain after the last arrival; the offered load exceeds capacity and latency figures depend "
        "on the run length (lower the rate or find the capacity with --capacity)" +
        (r.mser_at_bound ? std::string("; but the number in system had not settled in the first half of the "
                                       "arrivals (a run short against its requests' time in system), so the "
                                       "growth may be a deployment still filling up: run longer to tell")
                         : std::string()));
  }
  if (r.requests_dropped > 0 && r.requests_arrived > 0) {
    a.push_back(pct(static_cast<double>(r.requests_dropped) / static_cast<double>(r.requests_arrived)) +
                " of requests were dropped (" + std::to_string(r.dropped_queue_full) +
                " for a full waiting queue, " + std::to_string(r.dropped_too_long) +
                " too long for the KV cache or one step, " + std::to_string(r.dropped_empty) + " empty)");
  }
  if (r.requests_unfinished > 0) {
    a.push_back(std::to_string(r.requests_unfinished) +
                " requests were still in the system when run.max_drain_s stopped the run " +
                fmt("%.1f", r.drain_s) + " s after the last arrival");
  }
  if (r.warmup_method == "run.warmup_s" && r.window_kind == "steady" && r.mser_s > r.window_from_s + 1e-9 &&
      !r.overloaded) {
    a.push_back(
        "the number in system still settles after run.warmup_s: MSER-5 and the time in system put the end of "
        "the transient at " +
        fmt("%.1f", r.mser_s) + " s (remove run.warmup_s to start the window there)");
  }
  if (r.speculative.enabled && r.speculative.acceptance_rate < 0.6) {
    a.push_back("speculative decoding accepts " + pct(r.speculative.acceptance_rate) +
                " of its drafts (below 60%: the verify positions and the draft cost more than they return)");
  }
  if (r.all_to_all_share() > 0.25) {
    a.push_back("All-to-All takes " + pct(r.all_to_all_share()) +
                " of step time (above 25%: expert load imbalance or batches too small)");
  }
  return a;
}

namespace {
// The step part that took the largest share, as "attention 38.5% of the step".
std::string largest_part(const Report& r) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < kStepParts; ++i) {
    if (r.part_share[i] > r.part_share[best]) best = i;
  }
  return std::string(kStepPartInfo[best].label) + " " + pct(r.part_share[best]) + " of the step";
}
}  // namespace

LimitingResource limiting_resource(const Report& r) {
  if (r.requests_measured == 0) return {"none", "no request was measured"};
  const double kv_peak = r.memory.kv_pool > 0 ? r.memory.kv_peak_used / r.memory.kv_pool : 0.0;
  const std::string p = fmt("P%g", r.sla_percentile);
  const std::string step = "mean step " + ms(r.mean_step_s) + " ms over " + fmt("%.0f", r.mean_batch_tokens) +
                           " tokens, " + largest_part(r);
  if (r.preemptions > 0 || kv_peak >= 0.95) {
    return {"kv_cache", "KV-cache memory: the pool's peak use reached " + pct(kv_peak) + " of " +
                            gib(r.memory.kv_pool) + " GiB per GPU and " + std::to_string(r.preemptions) +
                            " requests were preempted"};
  }
  if (r.overloaded) {
    return {"gpu_time",
            "GPU time: the queue grew through the window, the offered load is above capacity (" + step + ")"};
  }
  const double tpot = r.sla_tpot_s > 0 ? r.sla_tpot_at_percentile / r.sla_tpot_s : 0.0;
  const double ttft = r.sla_ttft_s > 0 ? r.sla_ttft_at_percentile / r.sla_ttft_s : 0.0;
  if (tpot > 1) {
    return {"step_time", "step time: " + p + " TPOT " + ms(r.sla_tpot_at_percentile) + " ms is over " +
                             ms(r.sla_tpot_s) + " ms (" + step + ")"};
  }
  if (ttft > 1) {
    return {"first_token", "time to first token: " + p + " TTFT " + ms(r.sla_ttft_at_percentile) +
                               " ms is over " + ms(r.sla_ttft_s) + " ms (queueing P99 " + ms(r.queueing.p99) +
                               " ms)"};
  }
  const std::string met = "the SLA holds; nearest its limit as the load grows: ";
  if (kv_peak >= tpot && kv_peak >= ttft) {
    return {"kv_cache", met + "KV-cache memory (peak " + pct(kv_peak) + " of the pool)"};
  }
  if (tpot >= ttft) {
    return {"step_time", met + "step time (" + p + " TPOT at " + pct(tpot) + " of its limit; " + step + ")"};
  }
  return {"first_token", met + "time to first token (" + p + " TTFT at " + pct(ttft) + " of its limit)"};
}

// One line per pool with All-to-All: its time per step before overlap, the layer that takes longest
// against the mean layer, and the GPU that is most often the slowest of a collective against an even share.
std::string format_all_to_all(const AllToAllReport& a, bool name_pool) {
  double total = 0;
  double dispatch = 0;
  std::size_t top_layer = 0;
  for (std::size_t i = 0; i < a.layer_dispatch_ms.size(); ++i) {
    const double t = a.layer_dispatch_ms[i] + a.layer_combine_ms[i];
    if (t > a.layer_dispatch_ms[top_layer] + a.layer_combine_ms[top_layer]) top_layer = i;
    total += t;
    dispatch += a.layer_dispatch_ms[i];
  }
  if (a.layer_dispatch_ms.empty() || total <= 0) return "";
  std::size_t hot = 0;
  for (std::size_t g = 1; g < a.gpu_slowest_share.size(); ++g)
    if (a.gpu_slowest_share[g] > a.gpu_slowest_share[hot]) hot = g;
  const double layers = static_cast<double>(a.layer_dispatch_ms.size());
  std::ostringstream o;
  o << "All-to-All   " << (name_pool ? std::string(a.role) + " pool: " : std::string()) << fmt("%.2f", total)
    << " ms per step before overlap (dispatch " << fmt("%.2f", dispatch) << ", combine "
    << fmt("%.2f", total - dispatch) << "); layer " << a.first_moe_layer + static_cast<int>(top_layer) << " "
    << fmt("%.3f", a.layer_dispatch_ms[top_layer] + a.layer_combine_ms[top_layer]) << " ms against a mean of "
    << fmt("%.3f", total / layers) << "; GPU " << hot << " slowest in " << pct(a.gpu_slowest_share[hot])
    << " of collectives (even: " << pct(1.0 / static_cast<double>(a.gpu_slowest_share.size())) << ")\n";
  return o.str();
}

std::string format_experts(const Report& r) {
  const ExpertLoopReport& x = r.experts;
  std::ostringstream o;
  o << "Experts      placement " << x.placement;
  if (x.redundant_experts > 0)
    o << " (+" << x.redundant_experts << " redundant slots, " << x.slots_per_gpu << " slots/GPU)";
  o << ", GPU max/mean (token-weighted) " << fmt("%.3f", x.gpu_load_imbalance_weighted) << ", dispatch "
    << fmt("%.0f", x.dispatch_bytes_per_token) << " B/token\n  rebalances " << x.rebalances << " ("
    << gib(x.rebalance_bytes) << " GiB moved, " << fmt("%.3f", x.rebalance_s) << " s paused)\n";
  if (x.drift || x.coactivation) {
    o << "  popularity";
    if (x.drift) o << " drifting (" << x.drift_updates << " updates)";
    if (x.coactivation) o << " co-activation rho " << fmt("%.2f", x.coactivation_rho);
    o << "\n";
  }
  if (x.tiers) {
    const double uses = x.expert_uses > 0 ? static_cast<double>(x.expert_uses) : 1.0;
    o << "  tiers: hit rate HBM " << pct(static_cast<double>(x.hbm_hits) / uses) << ", host DRAM "
      << pct(static_cast<double>(x.host_loads) / uses) << ", NVMe "
      << pct(static_cast<double>(x.nvme_loads) / uses) << "; loaded " << gib(x.host_bytes)
      << " GiB from host, " << gib(x.nvme_bytes) << " GiB from NVMe; " << x.prefetches << " prefetches, "
      << x.evictions << " evictions\n";
    o << "  load stalls " << fmt("%.3f", x.stall_s) << " s (" << pct(x.stall_share) << " of step time)\n";
  }
  if (x.quantization) {
    o << "  precision of routed tokens:";
    for (const auto& [name, share] : x.precision_share) o << " " << name << " " << pct(share);
    o << "; quality proxy (not a measured accuracy) " << fmt("%.4f", x.quality_proxy) << "\n";
  }
  if (x.rerouting) {
    o << "  rerouted " << x.rerouted_pairs << " (token, expert) pairs (" << pct(x.rerouted_share)
      << " of routed pairs; a quality cost)\n";
  }
  if (x.admission) o << "  admission: GPU-load-aware\n";
  return o.str();
}

std::string format_pools(const Report& r) {
  std::ostringstream o;
  const DisaggregationReport& d = r.disaggregation;
  if (d.enabled) {
    o << "TTFT split (ms; TTFT ends when the decode instance takes the request in and streams the first "
         "token)\n";
    o << "                         mean        P50        P95        P99        max\n";
    latency_row(o, "prefill queue", d.prefill_queue);
    latency_row(o, "prefill", d.prefill);
    latency_row(o, "KV transfer", d.kv_transfer);
    latency_row(o, "decode queue", d.decode_queue);
    o << "  KV moved prefill -> decode: " << d.kv_transfers << " caches, " << gib(d.kv_bytes) << " GiB, mean "
      << ms(d.kv_transfers > 0 ? d.kv_transfer_s / static_cast<double>(d.kv_transfers) : 0.0) << " ms each\n";
  }
  if (!r.pools.empty()) {
    o << "Pools        role      inst  GPUs  EP     busy      tokens/s   step ms   SLA (P"
      << fmt("%g", r.sla_percentile) << ")\n";
    for (std::size_t i = 0; i < r.pools.size(); ++i) {
      const PoolReport& p = r.pools[i];
      char buf[256];
      std::snprintf(buf, sizeof buf, "  [%zu]        %-8s %5d %5d %4d %8s %13.1f %9s   %s %s ms <= %s: %s\n",
                    i, p.role.c_str(), p.instances, p.gpus, p.ep_size, pct(p.busy).c_str(), p.tokens_per_s,
                    ms(p.mean_step_s).c_str(), p.sla_metric == "tpot" ? "TPOT" : "TTFT",
                    ms(p.sla_at_percentile_s).c_str(), ms(p.sla_limit_s).c_str(),
                    p.sla_met ? "met" : "NOT met");
      o << buf;
    }
    o << "Pool memory  per GPU, of " << gib(r.memory.hbm) << " GiB HBM\n";
    for (std::size_t i = 0; i < r.pools.size(); ++i) {
      const PoolReport& p = r.pools[i];
      o << "  [" << i << "]        weights " << gib(p.weights_bytes_per_gpu) << " GiB (routed experts "
        << gib(p.routed_expert_bytes_per_gpu) << "), activations+overhead "
        << gib(p.activations_and_overhead_bytes) << ", KV pool " << gib(p.kv_pool_bytes_per_gpu)
        << " GiB (peak used " << pct(p.kv_peak_used_share) << ")\n";
    }
  }
  if (r.migration.enabled) {
    o << "KV migration " << r.migration.count << " requests moved, " << gib(r.migration.bytes) << " GiB, "
      << fmt("%.3f", r.migration.seconds) << " s of transfers\n";
  }
  return o.str();
}

// loadgen's figures over every query (run.measure mlperf_*), as its summary names them.
std::string format_loadgen(const LoadgenReport& l) {
  std::ostringstream o;
  const bool server = l.scenario == "server";
  o << "MLPerf     loadgen " << l.scenario << ": " << (l.valid ? "VALID" : "INVALID") << "; "
    << (server ? "completed " : "") << fmt("%.1f", l.tokens_per_s) << " tok/s, "
    << fmt("%.3f", l.samples_per_s) << " samples/s (" << l.queries_completed << " of " << l.queries_issued
    << " queries, " << fmt("%.1f", l.tokens_per_sample) << " tokens each, ";
  if (!server) {
    o << "last done at " << fmt("%.1f", l.max_latency_s) << " s)\n";
    return o.str();
  }
  o << "final query done at " << fmt("%.1f", l.final_query_done_s) << " s; scheduled "
    << fmt("%.3f", l.scheduled_samples_per_s) << " samples/s)\n";
  o << "           P" << fmt("%g", 100 * l.percentile) << " TTFT " << ms(l.ttft_at_percentile_s)
    << " ms (P50 " << ms(l.ttft.p50) << "), TPOT " << ms(l.tpot_at_percentile_s) << " ms (P50 "
    << ms(l.tpot.p50) << "), mean latency " << fmt("%.1f", l.latency.mean) << " s; constraints "
    << (l.perf_constraints_met ? "met" : "NOT met") << "; early stopping TTFT "
    << (l.early_stopping_ttft.met ? "met" : "NOT met") << " (" << l.early_stopping_ttft.over
    << " over), TPOT " << (l.early_stopping_tpot.met ? "met" : "NOT met") << " ("
    << l.early_stopping_tpot.over << " over)\n";
  return o.str();
}

std::string format_summary(const Report& r) {
  std::ostringstream o;
  o << "moesim " << r.version << "  scenario " << r.scenario << "  seed " << r.seed << "  fingerprint "
    << std::hex << r.fingerprint << std::dec << "\n";
  o << "costs: " << r.cost_model << ", engine " << r.engine << "  |  " << r.gpus << " GPUs, " << r.replicas
    << " replica(s)\n\n";
  o << "Requests   arrived " << r.requests_arrived << ", finished " << r.requests_finished << ", dropped "
    << r.requests_dropped << ", measured " << r.requests_measured << ", preemptions " << r.preemptions
    << "\n";
  o << "Window     " << fmt("%.1f", r.window_s) << " s measured of " << fmt("%.1f", r.sim_end_s)
    << " s simulated, " << fmt("%.1f", r.window_from_s) << " to " << fmt("%.1f", r.window_to_s) << " s ("
    << r.window_kind << ": " << r.window_why << ")\n";
  o << "Warm-up    " << (r.warmup_method == "mser-5" ? "MSER-5 on the number in system" : "run.warmup_s")
    << ", transient to " << fmt("%.1f", r.mser_s) << " s (MSER-5, or the time in system at P"
    << fmt("%g", r.sla_percentile) << " when later)"
    << (r.mser_at_bound ? " (did not settle in the first half)" : "") << "; number in system "
    << fmt("%.1f", r.in_system_start) << " -> " << fmt("%.1f", r.in_system_end)
    << " over the window (trend t " << fmt("%.2f", r.trend.t) << ")\n\n";
  o << "Throughput\n";
  o << "  output tokens/s   " << fmt("%12.1f", r.output_tokens_per_s) << "   per GPU "
    << fmt("%10.1f", r.output_tokens_per_s_per_gpu) << "\n";
  o << "  total tokens/s    " << fmt("%12.1f", r.total_tokens_per_s) << "   per GPU "
    << fmt("%10.1f", r.total_tokens_per_s_per_gpu) << "\n";
  o << "  requests/s        " << fmt("%12.3f", r.requests_per_s) << "\n";
  if (r.ci_output_tokens_per_s.batches >= 2) {
    o << "  95% interval (batch means, " << r.ci_output_tokens_per_s.batches << " batches, lag-1 "
      << fmt("%.2f", r.ci_output_tokens_per_s.lag1) << "): output tokens/s "
      << fmt("%.1f", r.ci_output_tokens_per_s.mean) << " +- "
      << fmt("%.1f", r.ci_output_tokens_per_s.half_width) << "\n";
  } else if (r.ci_too_short) {
    o << "  95% interval: none, the window is shorter than 5 batches as long as the time in system at P"
      << fmt("%g", r.sla_percentile) << " (run longer, or use --seeds)\n";
  }
  o << "\n";
  o << "Latency (ms)             mean        P50        P95        P99        max\n";
  latency_row(o, "TTFT", r.ttft);
  latency_row(o, "TPOT", r.tpot);
  latency_row(o, "inter-token", r.itl);
  latency_row(o, "end-to-end", r.e2e);
  latency_row(o, "queueing", r.queueing);
  if (r.disaggregation.enabled || !r.pools.empty() || r.migration.enabled) o << "\n" << format_pools(r);
  o << "\nSLA        P" << fmt("%g", r.sla_percentile) << " TTFT <= " << ms(r.sla_ttft_s)
    << " ms, TPOT <= " << ms(r.sla_tpot_s) << " ms: " << (r.sla_met ? "met" : "NOT met") << "; violations "
    << pct(r.sla_violation_rate) << "; goodput " << fmt("%.3f", r.goodput_requests_per_s) << " req/s, "
    << fmt("%.1f", r.goodput_tokens_per_s) << " tok/s\n";
  if (r.loadgen.enabled) o << format_loadgen(r.loadgen);
  o << "\nStep       " << r.steps << " steps, mean " << ms(r.mean_step_s) << " ms, mean batch "
    << fmt("%.1f", r.mean_batch_tokens) << " tokens";
  if (r.moe_layer_sample > 0)
    o << "; " << r.moe_layer_sample << " of " << r.moe_layers
      << " MoE layers costed a step (run.moe_layer_sample: each weighted "
      << fmt("%.2f", double(r.moe_layers) / r.moe_layer_sample) << "x)";
  o << "\n";
  // Every part of the step that took time, in the order a step runs them; they add up to 100%.
  const char* sep = "  ";
  for (std::size_t i = 0; i < kStepParts; ++i) {
    if (r.part_share[i] <= 0) continue;
    o << sep << kStepPartInfo[i].label << " " << pct(r.part_share[i]);
    sep = ", ";
  }
  o << "\n";
  o << "  All-to-All share " << pct(r.all_to_all_share()) << " (target < 20%)";
  if (r.comm_hidden_share > 0) {
    const double comm = r.all_to_all_share() + r.comm_hidden_share;
    o << "; overlap (two- or single-batch): " << pct(r.comm_hidden_share) << " of step time hidden, "
      << pct(r.all_to_all_share()) << " exposed (incl. " << pct(r.comm_sm_contention_share)
      << " of compute slowed by the SMs communication kernels held), " << pct(r.comm_hidden_share / comm)
      << " of the All-to-All hidden";
  }
  o << "\n";
  // What a profiler on the first GPU shows: the collectives include its wait for the slowest group and rank.
  const double dispatch_wait = r.first_gpu_dispatch_wait_share;
  const double combine_wait = r.first_gpu_combine_wait_share;
  if (dispatch_wait > 0 || combine_wait > 0) {
    o << "  as GPU 0 sees it: dispatch " << pct(r.share(StepPart::kDispatch) + dispatch_wait) << ", combine "
      << pct(r.share(StepPart::kCombine) + combine_wait)
      << " (waiting for the slowest rank in them: " << pct(dispatch_wait) << ", " << pct(combine_wait)
      << "), experts " << pct(r.share(StepPart::kExperts) - combine_wait) << "\n";
  }
  o << "Expert load  max/mean per GPU " << fmt("%.2f", r.gpu_load_imbalance) << ", per expert "
    << fmt("%.2f", r.expert_load_imbalance) << "\n";
  if (r.rank_load_share.max > 0) {
    const LatencyStats& g = r.rank_load_share;
    const LatencyStats& l = r.layer_max_over_mean;
    o << "             per GPU share of the mean P50 " << fmt("%.2f", g.p50) << ", P95 " << fmt("%.2f", g.p95)
      << ", P99 " << fmt("%.2f", g.p99) << ", max " << fmt("%.2f", g.max) << "; layer max/mean P50 "
      << fmt("%.2f", l.p50) << ", P99 " << fmt("%.2f", l.p99) << "\n";
  }
  for (const AllToAllReport& a : r.all_to_all) o << format_all_to_all(a, r.all_to_all.size() > 1);
  if (r.experts.enabled) o << format_experts(r);
  if (r.speculative.enabled) {
    const SpeculativeReport& x = r.speculative;
    o << "Speculative  " << x.draft << ", " << x.draft_tokens
      << " draft tokens: " << fmt("%.3f", x.mean_tokens_per_step)
      << " tokens per sequence-step measured (expected " << fmt("%.3f", x.expected_tokens_per_step)
      << "), acceptance " << pct(x.measured_acceptance_rate) << " (rates give " << pct(x.acceptance_rate)
      << ")\n";
  }
  if (r.prefix_cache.enabled) {
    const PrefixCacheReport& p = r.prefix_cache;
    o << "Prefix cache hit rate " << pct(p.token_hit_rate) << " of prompt tokens, " << pct(p.block_hit_rate)
      << " of blocks (" << p.hit_blocks << " / " << p.lookup_blocks << " over " << p.lookups
      << " first lookups); prefill saved " << p.prefill_tokens_saved << " tokens; " << p.evicted_blocks
      << " blocks evicted\n";
  }
  o << "GPU (mean)   busy " << pct(r.gpu_mean.busy) << ", compute (MFU) " << pct(r.gpu_mean.compute_util)
    << ", HBM bandwidth " << pct(r.gpu_mean.hbm_bw_util) << "\n";
  o << (r.pools.empty() ? "Memory/GPU   " : "Memory/GPU   pool [0]: ") << gib(r.memory.hbm)
    << " GiB HBM: weights " << gib(r.memory.weights) << " (routed experts "
    << gib(r.memory.routed_expert_weights) << "), activations+overhead "
    << gib(r.memory.activations_and_overhead) << ", KV pool " << gib(r.memory.kv_pool) << " (peak used "
    << gib(r.memory.kv_peak_used) << "), headroom " << gib(r.memory.headroom()) << " GiB\n";
  o << "Limited by   " << r.limit.why << "\n";
  if (r.operations.enabled) {
    const OperationsReport& x = r.operations;
    o << "Operations   planner (" << x.predictor << ", every " << fmt("%g", x.interval_s)
      << " s, weights from " << x.weights_from << "): " << x.scale_ups << " scale-ups, " << x.scale_downs
      << " scale-downs; " << fmt("%.1f", x.gpu_hours)
      << " GPU-hours (all instances all run: " << fmt("%.1f", x.gpu_hours_static) << "), "
      << fmt("%.3f", x.gpu_hours_per_million_output_tokens) << " per million output tokens";
    if (x.usd_per_million_output_tokens > 0) o << ", $" << fmt("%.2f", x.usd_per_million_output_tokens);
    o << "\n";
  }
  if (r.faults.enabled) {
    const FaultsReport& f = r.faults;
    o << "Failures     " << f.failures << " (" << f.continued << " covered by redundant experts, "
      << f.restarts << " restarts, " << f.recovery << "); availability " << fmt("%.4f", f.availability)
      << ", recovery mean " << fmt("%.1f", f.recovery_mean_s) << " s, max " << fmt("%.1f", f.recovery_max_s)
      << " s; in-flight " << f.in_flight << ": " << f.requests_recomputed << " recomputed ("
      << f.tokens_recomputed << " tokens), " << f.requests_failed << " failed (" << f.tokens_lost
      << " tokens lost); during recovery " << f.recovery_finished << " finished, TTFT "
      << fmt("%.3f", f.recovery_ttft_p_s) << " s, TPOT " << fmt("%.4f", f.recovery_tpot_p_s) << " s, "
      << f.recovery_sla_violations << " over the SLA\n";
  }
  o << "\nAlerts\n";
  if (r.alerts.empty()) o << "  none\n";
  for (const auto& a : r.alerts) o << "  ! " << a << "\n";
  return o.str();
}

}  // namespace moesim
