#include "sim/scenario/report_json.h"

#include <cstdio>

namespace moesim {

namespace {

// Share of step time by part (every part of step_breakdown.h), the hidden communication and the
// exposed All-to-All.
Json step_shares(const Report& r) {
  Json j = Json::object();
  for (std::size_t i = 0; i < kStepParts; ++i) j[std::string(kStepPartInfo[i].key)] = r.part_share[i];
  j["comm_hidden_by_overlap"] = r.comm_hidden_share;
  j["comm_exposed"] = r.all_to_all_share();
  j["comm_sm_contention"] = r.comm_sm_contention_share;
  j["all_to_all"] = r.all_to_all_share();
  j["first_gpu_wait_in_dispatch"] = r.first_gpu_dispatch_wait_share;
  j["first_gpu_wait_in_combine"] = r.first_gpu_combine_wait_share;
  return j;
}
Json latency(const LatencyStats& l) {
  return Json{{"mean_s", l.mean}, {"p50_s", l.p50}, {"p95_s", l.p95}, {"p99_s", l.p99}, {"max_s", l.max}};
}
Json ratios(const LatencyStats& l) {
  return Json{{"mean", l.mean}, {"p50", l.p50}, {"p95", l.p95}, {"p99", l.p99}, {"max", l.max}};
}
Json gpu_stats(const GpuStats& g) {
  return Json{{"busy", g.busy}, {"compute_util", g.compute_util}, {"hbm_bw_util", g.hbm_bw_util}};
}

Json experts_json(const ExpertLoopReport& x) {
  Json shares = Json::object();
  for (const auto& [name, share] : x.precision_share) shares[name] = share;
  const double uses = x.expert_uses > 0 ? static_cast<double>(x.expert_uses) : 1.0;
  return Json{{"placement", x.placement},
              {"redundant_experts", x.redundant_experts},
              {"slots_per_gpu", x.slots_per_gpu},
              {"gpu_max_over_mean_token_weighted", x.gpu_load_imbalance_weighted},
              {"dispatch_bytes_per_token", x.dispatch_bytes_per_token},
              {"rebalance",
               {{"count", x.rebalances}, {"bytes_moved", x.rebalance_bytes}, {"paused_s", x.rebalance_s}}},
              {"tiers",
               {{"enabled", x.tiers},
                {"expert_uses", x.expert_uses},
                {"hit_rate",
                 {{"hbm", static_cast<double>(x.hbm_hits) / uses},
                  {"host_dram", static_cast<double>(x.host_loads) / uses},
                  {"nvme", static_cast<double>(x.nvme_loads) / uses}}},
                {"host_loads", x.host_loads},
                {"nvme_loads", x.nvme_loads},
                {"prefetches", x.prefetches},
                {"evictions", x.evictions},
                {"host_bytes", x.host_bytes},
                {"nvme_bytes", x.nvme_bytes},
                {"stall_s", x.stall_s},
                {"stall_share", x.stall_share}}},
              {"quantization",
               {{"enabled", x.quantization},
                {"precision_share", shares},
                {"quality_proxy_not_measured", x.quality_proxy}}},
              {"rerouting",
               {{"enabled", x.rerouting},
                {"rerouted_pairs", x.rerouted_pairs},
                {"rerouted_share", x.rerouted_share}}},
              {"admission_gpu_load_aware", x.admission},
              {"popularity",
               {{"drift", x.drift},
                {"drift_updates", x.drift_updates},
                {"coactivation", x.coactivation},
                {"coactivation_rho", x.coactivation_rho}}}};
}

// Per pool with All-to-All: milliseconds per step by MoE layer and by GPU of an instance.
Json all_to_all_json(const std::vector<AllToAllReport>& pools) {
  Json out = Json::array();
  for (const AllToAllReport& a : pools) {
    Json layers = Json::array();
    for (std::size_t i = 0; i < a.layer_dispatch_ms.size(); ++i) {
      layers.push_back({{"layer", a.first_moe_layer + static_cast<int>(i)},
                        {"dispatch_ms", a.layer_dispatch_ms[i]},
                        {"combine_ms", a.layer_combine_ms[i]}});
    }
    Json gpus = Json::array();
    for (std::size_t g = 0; g < a.gpu_dispatch_ms.size(); ++g) {
      gpus.push_back({{"gpu", g},
                      {"dispatch_ms", a.gpu_dispatch_ms[g]},
                      {"combine_ms", a.gpu_combine_ms[g]},
                      {"slowest_share", a.gpu_slowest_share[g]}});
    }
    out.push_back(
        {{"pool", a.pool},
         {"role", a.role},
         {"steps", a.steps},
         {"note", "ms per step before two-batch overlap hides any; a GPU by its index in its instance"},
         {"per_layer", layers},
         {"per_gpu", gpus}});
  }
  return out;
}

Json interval(const BatchMeans& b) {
  return Json{{"mean", b.mean}, {"half_width", b.half_width}, {"batches", b.batches}, {"lag1", b.lag1}};
}

// The planner's time series: one row per interval, each pool's instances in the order of `pools`.
Json operations_json(const OperationsReport& o) {
  Json rows = Json::array();
  for (const OperationsRow& row : o.intervals) {
    Json pools = Json::array();
    for (const OperationsPoolRow& p : row.pools) {
      pools.push_back(Json{{"active", p.active},
                           {"loading", p.loading},
                           {"draining", p.draining},
                           {"target", p.target},
                           {"arrival_req_per_s", p.arrival_req_per_s},
                           {"predicted_req_per_s", p.predicted_req_per_s}});
    }
    rows.push_back(Json{{"start_s", row.start_s},
                        {"end_s", row.end_s},
                        {"gpus", row.gpus},
                        {"offered_req_per_s", row.offered_req_per_s},
                        {"served_req_per_s", row.served_req_per_s},
                        {"ttft_p_s", row.ttft_p_s},
                        {"tpot_p_s", row.tpot_p_s},
                        {"finished", row.finished},
                        {"sla_violations", row.sla_violations},
                        {"pools", pools}});
  }
  return Json{{"interval_s", o.interval_s},
              {"predictor", o.predictor},
              {"weights_from", o.weights_from},
              {"gpu_hours", o.gpu_hours},
              {"gpu_hours_static", o.gpu_hours_static},
              {"gpu_hours_per_million_output_tokens", o.gpu_hours_per_million_output_tokens},
              {"usd_per_million_output_tokens", o.usd_per_million_output_tokens},
              {"scale_ups", o.scale_ups},
              {"scale_downs", o.scale_downs},
              {"scale_up_s", o.scale_up_s},
              {"intervals", rows}};
}

// Failures: the policies, the tally, availability, recovery and the SLA during it, and each failure.
Json loadgen_stats(const LoadgenStats& l) {
  return Json{{"mean_s", l.mean}, {"min_s", l.min}, {"max_s", l.max}, {"p50_s", l.p50},   {"p90_s", l.p90},
              {"p95_s", l.p95},   {"p97_s", l.p97}, {"p99_s", l.p99}, {"p99.9_s", l.p999}};
}
Json early_stopping_json(const EarlyStoppingResult& e) {
  return Json{{"over_limit", e.over}, {"min_passing", e.min_passing}, {"met", e.met}};
}
// loadgen's figures (sim/serving/report/loadgen.h): Server's completed tokens/s, Offline's tokens/s.
Json loadgen_json(const LoadgenReport& l) {
  Json j{{"scenario", l.scenario},
         {"valid", l.valid},
         {"queries_issued", l.queries_issued},
         {"queries_completed", l.queries_completed},
         {"single_token_queries", l.single_token_queries},
         {"tokens", l.tokens},
         {"tokens_per_sample", l.tokens_per_sample},
         {"tokens_per_s", l.tokens_per_s},
         {"samples_per_s", l.samples_per_s},
         {"max_latency_s", l.max_latency_s},
         {"min_duration_met", l.min_duration_met},
         {"latency", loadgen_stats(l.latency)}};
  if (l.scenario != "server") return j;
  j["scheduled_samples_per_s"] = l.scheduled_samples_per_s;
  j["final_query_scheduled_s"] = l.final_query_scheduled_s;
  j["final_query_done_s"] = l.final_query_done_s;
  j["ttft"] = loadgen_stats(l.ttft);
  j["tpot"] = loadgen_stats(l.tpot);
  j["percentile"] = l.percentile;
  j["ttft_at_percentile_s"] = l.ttft_at_percentile_s;
  j["tpot_at_percentile_s"] = l.tpot_at_percentile_s;
  j["perf_constraints_met"] = l.perf_constraints_met;
  j["early_stopping"] = {{"ttft", early_stopping_json(l.early_stopping_ttft)},
                         {"tpot", early_stopping_json(l.early_stopping_tpot)}};
  return j;
}

Json faults_json(const FaultsReport& f) {
  Json records = Json::array();
  for (const FaultRecord& x : f.records) {
    records.push_back(Json{{"kind", x.kind},
                           {"target", x.target},
                           {"at_s", x.at_s},
                           {"replica", x.replica},
                           {"outcome", x.outcome},
                           {"recovered_s", x.recovered_s},
                           {"requests_hit", x.requests_hit}});
  }
  return Json{{"in_flight", f.in_flight},
              {"recovery", f.recovery},
              {"failures", f.failures},
              {"continued", f.continued},
              {"restarts", f.restarts},
              {"requests_recomputed", f.requests_recomputed},
              {"requests_failed", f.requests_failed},
              {"tokens_recomputed", f.tokens_recomputed},
              {"tokens_lost", f.tokens_lost},
              {"availability", f.availability},
              {"recovery_mean_s", f.recovery_mean_s},
              {"recovery_max_s", f.recovery_max_s},
              {"during_recovery",
               {{"finished", f.recovery_finished},
                {"ttft_p_s", f.recovery_ttft_p_s},
                {"tpot_p_s", f.recovery_tpot_p_s},
                {"sla_violations", f.recovery_sla_violations}}},
              {"events", records}};
}

}  // namespace

Json report_to_json(const Report& r, const Json& scenario_echo) {
  char fp[32];
  std::snprintf(fp, sizeof fp, "%016llx", static_cast<unsigned long long>(r.fingerprint));
  Json gpus = Json::array();
  for (const auto& g : r.gpu) gpus.push_back(gpu_stats(g));
  Json out = Json{
      {"moesim_version", r.version},
      {"scenario_name", r.scenario},
      {"seed", r.seed},
      {"fingerprint", fp},
      {"events", r.events},
      {"cost_model", r.cost_model},
      {"engine", r.engine},
      {"gpus", r.gpus},
      {"replicas", r.replicas},
      {"requests",
       {{"arrived", r.requests_arrived},
        {"finished", r.requests_finished},
        {"dropped", r.requests_dropped},
        {"measured", r.requests_measured},
        {"preemptions", r.preemptions},
        {"output_tokens", r.output_tokens},
        {"output_tokens_asked", r.output_tokens_asked}}},
      {"time",
       {{"simulated_s", r.sim_end_s},
        {"window_s", r.window_s},
        {"window", r.window_kind},
        {"window_from_s", r.window_from_s},
        {"window_to_s", r.window_to_s},
        {"window_why", r.window_why},
        {"warmup", r.warmup_method},
        {"mser_s", r.mser_s},
        {"mser_at_bound", r.mser_at_bound},
        {"mser_batches", r.mser_batches},
        {"arrivals_end_s", r.arrivals_end_s},
        {"drain_s", r.drain_s}}},
      {"load",
       {{"overloaded", r.overloaded},
        {"in_system_start", r.in_system_start},
        {"in_system_end", r.in_system_end},
        {"trend",
         {{"from_s", r.trend.from_s},
          {"batches", r.trend.batches},
          {"slope_per_s", r.trend.slope_per_s},
          {"arrival_rate_per_s", r.trend.arrival_rate},
          {"waiting_slope_per_s", r.trend.waiting_slope_per_s},
          {"waiting_p_growth", r.trend.waiting_p_growth},
          {"t", r.trend.t},
          {"df", r.trend.df},
          {"lag1", r.trend.lag1},
          {"p_growth", r.trend.p_growth}}},
        {"dropped_queue_full", r.dropped_queue_full},
        {"dropped_too_long", r.dropped_too_long},
        {"dropped_empty", r.dropped_empty},
        {"unfinished", r.requests_unfinished}}},
      {"throughput",
       {{"output_tokens_per_s", r.output_tokens_per_s},
        {"total_tokens_per_s", r.total_tokens_per_s},
        {"requests_per_s", r.requests_per_s},
        {"output_tokens_per_s_per_gpu", r.output_tokens_per_s_per_gpu},
        {"total_tokens_per_s_per_gpu", r.total_tokens_per_s_per_gpu}}},
      {"intervals",
       {{"too_short", r.ci_too_short},
        {"output_tokens_per_s", interval(r.ci_output_tokens_per_s)},
        {"ttft_over_share", interval(r.ci_ttft_over_share)},
        {"tpot_over_share", interval(r.ci_tpot_over_share)}}},
      {"latency",
       {{"ttft", latency(r.ttft)},
        {"tpot", latency(r.tpot)},
        {"itl", latency(r.itl)},
        {"e2e", latency(r.e2e)},
        {"queueing", latency(r.queueing)}}},
      {"sla",
       {{"ttft_limit_s", r.sla_ttft_s},
        {"tpot_limit_s", r.sla_tpot_s},
        {"percentile", r.sla_percentile},
        {"ttft_at_percentile_s", r.sla_ttft_at_percentile},
        {"tpot_at_percentile_s", r.sla_tpot_at_percentile},
        {"met", r.sla_met},
        {"violation_rate", r.sla_violation_rate},
        // The counts under the window's shares over each limit (what a capacity probe's verdict reads).
        {"window_counts",
         {{"requests", r.sla_requests},
          {"ttft_over", r.sla_ttft_over},
          {"tpot_requests", r.sla_tpot_requests},
          {"tpot_over", r.sla_tpot_over}}},
        {"goodput_requests_per_s", r.goodput_requests_per_s},
        {"goodput_tokens_per_s", r.goodput_tokens_per_s}}},
      {"step",
       {{"count", r.steps},
        {"mean_s", r.mean_step_s},
        {"mean_batch_tokens", r.mean_batch_tokens},
        {"share", step_shares(r)},
        {"nvlink_bytes_per_step", r.nvlink_bytes_per_step},
        {"nic_bytes_per_step", r.nic_bytes_per_step}}},
      {"expert_load",
       {{"gpu_max_over_mean", r.gpu_load_imbalance},
        {"expert_max_over_mean", r.expert_load_imbalance},
        {"rank_share_of_mean", ratios(r.rank_load_share)},
        {"layer_max_over_mean", ratios(r.layer_max_over_mean)}}},
      {"all_to_all", all_to_all_json(r.all_to_all)},
      {"gpu", {{"mean", gpu_stats(r.gpu_mean)}, {"per_gpu", gpus}}},
      {"memory_per_gpu",
       {{"hbm_bytes", r.memory.hbm},
        {"weights_bytes", r.memory.weights},
        {"routed_expert_weights_bytes", r.memory.routed_expert_weights},
        {"activations_and_overhead_bytes", r.memory.activations_and_overhead},
        {"kv_pool_bytes", r.memory.kv_pool},
        {"kv_peak_used_bytes", r.memory.kv_peak_used},
        {"headroom_bytes", r.memory.headroom()},
        {"used_fraction", r.memory.hbm > 0 ? r.memory.used() / r.memory.hbm : 0.0}}},
      {"alerts", r.alerts},
      {"limited_by", {{"resource", r.limit.name}, {"why", r.limit.why}}},
      {"scenario", scenario_echo},
  };
  if (r.moe_layer_sample > 0) out["step"]["moe_layers_costed"] = r.moe_layer_sample;
  if (r.padded_rows_per_step >= 0) out["step"]["padded_rows_per_step"] = r.padded_rows_per_step;
  if (r.experts.enabled) out["experts"] = experts_json(r.experts);
  if (r.speculative.enabled) {
    const SpeculativeReport& x = r.speculative;
    out["speculative"] = Json{{"draft", x.draft},
                              {"draft_tokens", x.draft_tokens},
                              {"expected_tokens_per_step", x.expected_tokens_per_step},
                              {"acceptance_rate", x.acceptance_rate},
                              {"sequence_steps", x.sequence_steps},
                              {"mean_tokens_per_step", x.mean_tokens_per_step},
                              {"measured_acceptance_rate", x.measured_acceptance_rate}};
  }
  if (r.prefix_cache.enabled) {
    const PrefixCacheReport& p = r.prefix_cache;
    out["prefix_cache"] = Json{{"lookups", p.lookups},
                               {"lookup_blocks", p.lookup_blocks},
                               {"hit_blocks", p.hit_blocks},
                               {"lookup_tokens", p.lookup_tokens},
                               {"hit_tokens", p.hit_tokens},
                               {"prefill_tokens_saved", p.prefill_tokens_saved},
                               {"evicted_blocks", p.evicted_blocks},
                               {"block_hit_rate", p.block_hit_rate},
                               {"token_hit_rate", p.token_hit_rate}};
  }
  if (!r.pools.empty()) {
    Json pools = Json::array();
    for (const PoolReport& p : r.pools) {
      pools.push_back(Json{{"role", p.role},
                           {"instances", p.instances},
                           {"gpus", p.gpus},
                           {"first_gpu", p.first_gpu},
                           {"ep_size", p.ep_size},
                           {"steps", p.steps},
                           {"mean_step_s", p.mean_step_s},
                           {"busy", p.busy},
                           {"tokens_per_s", p.tokens_per_s},
                           {"weights_bytes_per_gpu", p.weights_bytes_per_gpu},
                           {"routed_expert_bytes_per_gpu", p.routed_expert_bytes_per_gpu},
                           {"activations_and_overhead_bytes_per_gpu", p.activations_and_overhead_bytes},
                           {"kv_pool_bytes_per_gpu", p.kv_pool_bytes_per_gpu},
                           {"kv_peak_used_share", p.kv_peak_used_share},
                           {"sla",
                            {{"metric", p.sla_metric},
                             {"limit_s", p.sla_limit_s},
                             {"at_percentile_s", p.sla_at_percentile_s},
                             {"met", p.sla_met}}}});
    }
    out["pools"] = pools;
  }
  if (r.disaggregation.enabled) {
    const DisaggregationReport& d = r.disaggregation;
    out["disaggregation"] =
        Json{{"ttft_definition", "arrival to the decode instance's admission, which streams the first token"},
             {"ttft_split",
              {{"prefill_queue", latency(d.prefill_queue)},
               {"prefill", latency(d.prefill)},
               {"kv_transfer", latency(d.kv_transfer)},
               {"decode_queue", latency(d.decode_queue)}}},
             {"kv_transfers", d.kv_transfers},
             {"kv_bytes", d.kv_bytes},
             {"kv_transfer_s", d.kv_transfer_s}};
  }
  if (r.migration.enabled) {
    out["kv_migration"] = Json{
        {"requests", r.migration.count}, {"bytes", r.migration.bytes}, {"transfer_s", r.migration.seconds}};
  }
  if (r.operations.enabled) out["operations"] = operations_json(r.operations);
  if (r.faults.enabled) out["faults"] = faults_json(r.faults);
  if (r.loadgen.enabled) out["loadgen"] = loadgen_json(r.loadgen);
  return out;
}

}  // namespace moesim
