#include "sim/serving/offline/capacity_plan_report.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <sstream>

namespace moesim {

namespace {

__attribute__((format(printf, 1, 2))) std::string sf(const char* f, ...) {
  char buf[512];
  va_list args;
  va_start(args, f);
  std::vsnprintf(buf, sizeof buf, f, args);
  va_end(args);
  return buf;
}

double gbs(double bytes) { return bytes / 1e9; }
const char* yes(bool b) { return b ? "yes" : "no"; }
std::string nodes_text(int n) { return n > 0 ? std::to_string(n) : std::string("never"); }

// The KV pool as deployed: a size when there is one, else by how much weights, activations and overhead
// exceed the usable memory (never a negative pool).
std::string kv_pool_text(const MemoryPlan& m) {
  if (m.kv_pool_bytes_per_gpu > 0) return sf("KV pool %.1f GB", gbs(m.kv_pool_bytes_per_gpu));
  return sf("no KV pool (weights, activations and overhead exceed usable memory by %.1f GB)",
            gbs(-m.kv_pool_bytes_per_gpu));
}

// deployment.pools: each pool as deployed, per GPU (a text block or Markdown table).
std::string pools_text(const CapacityPlan& p, bool markdown) {
  std::ostringstream o;
  if (markdown) {
    o << "Each pool as deployed, per GPU:\n\n| pool | role | instances | EP | GPUs | weights GB | routed "
         "experts GB | "
         "KV pool | tokens per attention group | fits |\n|---|---|---:|---:|---:|---:|---:|---|---:|---|\n";
  }
  for (std::size_t i = 0; i < p.pools.size(); ++i) {
    const CapacityPlan::PoolMemory& q = p.pools[i];
    const WeightBytes& w = q.memory.weights_per_gpu;
    if (markdown) {
      o << sf("| %zu | %s | %d | %d | %d | %.1f | %.1f | %s | %lld | %s |\n", i, q.role.c_str(), q.instances,
              q.ep_size, q.gpus, gbs(w.total()), gbs(w.routed_experts), kv_pool_text(q.memory).c_str(),
              static_cast<long long>(q.memory.kv_tokens_per_group), q.memory.fits() ? "yes" : "no");
    } else {
      o << sf(
          "  pool [%zu] %s x%d (EP%d, %d GPUs), per GPU: weights %.1f GB (routed experts %.1f), %s, %lld "
          "tokens per attention group: %s\n",
          i, q.role.c_str(), q.instances, q.ep_size, q.gpus, gbs(w.total()), gbs(w.routed_experts),
          kv_pool_text(q.memory).c_str(), static_cast<long long>(q.memory.kv_tokens_per_group),
          q.memory.fits() ? "fits" : "does NOT fit");
    }
  }
  return o.str();
}

// A KV-table verdict: when the weights alone leave no room, no concurrency is the reason it does not fit.
const char* kv_fits(const CapacityPlan& p, const KvRow& k) {
  if (k.fits) return "yes";
  return p.deployment_memory.kv_pool_bytes_per_gpu > 0 ? "no" : "no (weights)";
}

std::string model_line(const CapacityPlan& p) {
  std::string s = sf("%s: %.0fB total, %.1fB active parameters, %s attention, KV %.0f bytes/token (%s)",
                     p.model.c_str(), p.total_params / 1e9, p.active_params / 1e9, p.attention.c_str(),
                     p.kv_bytes_per_token, p.kv_precision.c_str());
  if (!p.architecture_known) {
    s += "; architecture ASSUMED (published totals used for memory";
    // The steps are costed on the assumed shapes: say so when their active count differs from the published.
    if (std::abs(p.shapes_active_params - p.active_params) > 0.005 * p.active_params)
      s += sf(", step costs on the assumed shapes' %.1fB active", p.shapes_active_params / 1e9);
    s += ")";
  }
  return s;
}

std::string cluster_line(const CapacityPlan& p) {
  return sf(
      "%d node(s) x %d %s = %d GPUs; %.0f GB HBM per GPU, %.0f GB per node; usable per GPU %.1f GB "
      "(x %.2f - %.1f GB activations - %.1f GB overhead)",
      p.nodes, p.gpus_per_node, p.gpu.c_str(), p.gpus, gbs(p.hbm_bytes), gbs(p.node_hbm_bytes),
      gbs(p.usable_bytes_per_gpu), p.kv_cache_memory_fraction, gbs(p.activation_bytes),
      gbs(p.overhead_bytes));
}

std::string sim_batches_md(const SimulatedReview& r) {
  std::ostringstream o;
  o << "| max batch | output tok/s | tok/s per GPU | P50 TPOT ms | P99 TPOT ms | P99 TTFT ms | All-to-All | "
       "SLA |\n"
       "|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const SimulatedBatch& b : r.by_batch) {
    const Report& x = b.report;
    o << sf("| %d | %.0f | %.0f | %.1f | %.1f | %.0f | %.1f%% | %s |\n", b.max_batch_size,
            x.output_tokens_per_s, x.output_tokens_per_s_per_gpu, x.tpot.p50 * 1e3, x.tpot.p99 * 1e3,
            x.ttft.p99 * 1e3, 100.0 * x.all_to_all_share(), x.sla_met ? "met" : "NOT met");
  }
  return o.str();
}

}  // namespace

std::string format_plan_table(const CapacityPlan& p) {
  std::ostringstream o;
  o << "Capacity review: " << p.scenario << "\n";
  o << "  model    " << model_line(p) << "\n";
  o << "  cluster  " << cluster_line(p) << "\n";
  o << "  load     context " << p.context_tokens << " tokens (" << p.context_source << "), concurrency "
    << p.concurrency << " (" << p.concurrency_source << ")\n\n";

  o << "Memory by weight precision (decimal GB; KV for concurrency x context; fit against usable memory)\n";
  o << sf("  %-9s %6s %10s %9s %9s %10s %8s %9s %9s %9s %10s\n", "precision", "B/par", "weights", "per GPU",
          "KV", "total", "1 node?", "nodes(w)", "nodes", "cluster?", "max conc.");
  for (const PrecisionRow& r : p.precisions) {
    o << sf("  %-9s %6.2f %10.1f %9.1f %9.1f %10.1f %8s %9d %9s %9s %10lld\n", r.label.c_str(),
            r.bytes_per_param, gbs(r.weight_bytes), gbs(r.weight_bytes_per_gpu), gbs(r.kv_bytes),
            gbs(r.total_bytes), yes(r.fits_one_node_by_weights), r.nodes_by_weights,
            nodes_text(r.nodes_needed).c_str(), yes(r.fits_scenario_cluster),
            static_cast<long long>(r.max_concurrency));
  }
  o << "  (1 node?: weights <= raw node HBM; nodes(w): by weights and raw HBM; nodes: weights + KV over "
       "usable "
       "memory; max conc.: sequences of the context length on this cluster)\n";
  const WeightBytes& w = p.deployment_memory.weights_per_gpu;
  o << sf(
      "  as deployed, per GPU: weights %.1f GB (routed experts %.1f), %s, %lld tokens per "
      "attention group: %s\n",
      gbs(w.total()), gbs(w.routed_experts), kv_pool_text(p.deployment_memory).c_str(),
      static_cast<long long>(p.deployment_memory.kv_tokens_per_group),
      p.deployment_memory.fits() ? "fits" : "does NOT fit");
  if (p.deployed_concurrency > 0) {
    o << sf("  as deployed, the KV pools hold %lld sequences of %lld tokens (%d attention groups)\n",
            static_cast<long long>(p.deployed_concurrency), static_cast<long long>(p.context_tokens),
            p.attention_groups);
  }
  o << pools_text(p, false) << "\n";

  o << "KV cache vs concurrency (context " << p.context_tokens << ", " << p.kv_precision << ")\n";
  o << sf("  %11s %12s %12s %6s\n", "concurrency", "KV GB", "per GPU GB", "fits");
  for (const KvRow& k : p.kv_table) {
    o << sf("  %11lld %12.1f %12.2f %6s\n", static_cast<long long>(k.concurrency), gbs(k.kv_bytes),
            gbs(k.kv_bytes_per_gpu), kv_fits(p, k));
  }
  o << "\n";

  if (!p.throughput.empty()) {
    // With deployment.pools each row names the pool whose deployment it costs.
    const bool pools = !p.throughput.front().pool.empty();
    o << "Throughput estimate (step planner, " << p.cost_model << "; batch = per attention group"
      << (pools ? "; each phase on its pool's deployment" : "") << ")\n";
    o << sf(pools ? "  %-8s %-18s" : "  %-8s%s", "phase", pools ? "pool" : "");
    o << sf(" %6s %9s %12s %13s %10s %8s %8s %8s %14s\n", "batch", "step ms", "tok/s/GPU", "tok/s/node",
            "FLOP/B", "ridge", "MFU", "A2A", "regime");
    for (const ThroughputRow& t : p.throughput) {
      o << sf(pools ? "  %-8s %-18s" : "  %-8s%s", t.phase.c_str(), t.pool.c_str());
      o << sf(" %6lld %9.2f %12.0f %13.0f %10.1f %8.1f %7.1f%% %7.1f%% %14s\n",
              static_cast<long long>(t.batch), t.step_s * 1e3, t.tokens_per_s_per_gpu,
              t.tokens_per_s_per_node, t.flops_per_byte, t.ridge_flops_per_byte, 100.0 * t.compute_util,
              100.0 * t.all_to_all_share, t.regime.c_str());
    }
    o << sf("  one request alone: %.1f ms per output token\n\n", p.single_request_ms_per_token);
  }
  if (const NMinusOne& n = p.n_minus_one; n.computed) {
    o << sf("Capacity at N-1 (prompt %.0f, output %.0f tokens; decode %s the TPOT)\n", n.prompt_tokens,
            n.output_tokens, n.decode_within_tpot ? "within" : "NOT within");
    o << sf("  all GPUs up:    %9.2f req/s\n", n.all_up_req_per_s);
    o << sf("  one GPU lost:   %9.2f req/s (%s; %.2f req/s while it restarts)\n", n.gpu_lost_req_per_s,
            n.gpu_covered ? "redundant experts cover it" : "not covered: re-shard",
            n.gpu_lost_restart_req_per_s);
    o << sf("  one node lost:  %9.2f req/s (%s; %.2f req/s while it restarts)\n", n.node_lost_req_per_s,
            n.node_covered ? "redundant experts cover it" : "its instances out or re-sharded",
            n.node_lost_restart_req_per_s);
    o << "  assumes: " << n.assumption << "\n\n";
  }

  if (p.simulated) {
    const Report& r = p.simulated->report;
    o << "Simulated (as configured): output " << sf("%.0f", r.output_tokens_per_s)
      << " tok/s, TPOT P50/P95/P99 "
      << sf("%.1f/%.1f/%.1f ms", r.tpot.p50 * 1e3, r.tpot.p95 * 1e3, r.tpot.p99 * 1e3) << ", TTFT P99 "
      << sf("%.0f ms", r.ttft.p99 * 1e3) << ", All-to-All " << sf("%.1f%%", 100.0 * r.all_to_all_share())
      << " (target < 20%), SLA " << (r.sla_met ? "met" : "NOT met") << "\n";
    for (const SimulatedBatch& b : p.simulated->by_batch) {
      const Report& x = b.report;
      o << sf("  max batch %4d: %8.0f tok/s, TPOT P99 %7.1f ms, All-to-All %5.1f%%, SLA %s\n",
              b.max_batch_size, x.output_tokens_per_s, x.tpot.p99 * 1e3, 100.0 * x.all_to_all_share(),
              x.sla_met ? "met" : "NOT met");
    }
    o << "\n";
  }

  o << "Advice\n";
  for (const std::string& a : p.advice) o << "  - " << a << "\n";
  for (const std::string& n : p.notes) o << "  note: " << n << "\n";
  return o.str();
}

std::string format_plan_markdown(const CapacityPlan& p) {
  std::ostringstream o;
  o << "# Capacity review: " << p.scenario << "\n\n";
  o << "Generated by `moesim plan`. Memory in decimal GB (1e9 bytes).\n\n";

  o << "## 1. Assessment\n\n";
  o << "- Model: " << model_line(p) << "\n";
  o << sf(
      "- Total parameters %.1fB (memory is set by these), active %.1fB per token (throughput is set by "
      "these)\n",
      p.total_params / 1e9, p.active_params / 1e9);
  o << sf("- BF16 weights %.1f GB, INT4 weights %.1f GB\n", gbs(p.row("bf16").weight_bytes),
          gbs(p.row("int4").weight_bytes));
  o << "- Hardware: " << cluster_line(p) << "\n";
  o << "- Load assumed: context " << p.context_tokens << " tokens (" << p.context_source << "), concurrency "
    << p.concurrency << " (" << p.concurrency_source << ")\n\n";
  o << "| precision | weights GB | KV GB | total GB | fits one node (raw) | nodes (weights, raw) | nodes "
       "needed | "
       "max concurrency here |\n|---|---:|---:|---:|---|---:|---:|---:|\n";
  for (const PrecisionRow& r : p.precisions) {
    o << sf("| %s | %.1f | %.1f | %.1f | %s | %d | %s | %lld |\n", r.label.c_str(), gbs(r.weight_bytes),
            gbs(r.kv_bytes), gbs(r.total_bytes), yes(r.fits_one_node_by_weights), r.nodes_by_weights,
            nodes_text(r.nodes_needed).c_str(), static_cast<long long>(r.max_concurrency));
  }
  const WeightBytes& w = p.deployment_memory.weights_per_gpu;
  o << sf("\nAs deployed, per GPU: weights %.1f GB (routed experts %.1f GB), %s: %s.\n\n", gbs(w.total()),
          gbs(w.routed_experts), kv_pool_text(p.deployment_memory).c_str(),
          p.deployment_memory.fits() ? "fits" : "does not fit");
  if (!p.pools.empty()) o << pools_text(p, true) << "\n";
  o << "Topology advice:\n\n";
  for (const std::string& a : p.advice) o << "- " << a << "\n";
  o << "\n";

  o << "## 2. Benchmark\n\n";
  o << "KV cache memory against concurrency (context " << p.context_tokens << " tokens):\n\n";
  o << "| concurrency | KV GB | KV GB per GPU | fits |\n|---:|---:|---:|---|\n";
  for (const KvRow& k : p.kv_table) {
    o << sf("| %lld | %.1f | %.2f | %s |\n", static_cast<long long>(k.concurrency), gbs(k.kv_bytes),
            gbs(k.kv_bytes_per_gpu), kv_fits(p, k));
  }
  if (!p.throughput.empty()) {
    o << "\nThroughput estimate (" << p.cost_model << "; batch per attention group):\n\n";
    const bool pools = !p.throughput.front().pool.empty();
    o << (pools ? "| phase | pool " : "| phase ")
      << "| batch | step ms | tok/s per GPU | tok/s per node | FLOP/byte | ridge | MFU | All-to-All | regime "
         "|\n"
      << (pools ? "|---|---" : "|---") << "|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
    for (const ThroughputRow& t : p.throughput) {
      o << "| " << t.phase << (pools ? " | " + t.pool : std::string());
      o << sf(" | %lld | %.2f | %.0f | %.0f | %.1f | %.1f | %.1f%% | %.1f%% | %s |\n",
              static_cast<long long>(t.batch), t.step_s * 1e3, t.tokens_per_s_per_gpu,
              t.tokens_per_s_per_node, t.flops_per_byte, t.ridge_flops_per_byte, 100.0 * t.compute_util,
              100.0 * t.all_to_all_share, t.regime.c_str());
    }
    o << sf("\nOne request alone: %.1f ms per output token (seed: 50-80 ms on 8xH100 for DeepSeek-V3).\n",
            p.single_request_ms_per_token);
  }
  if (p.simulated) {
    const Report& r = p.simulated->report;
    o << "\nSimulated, as configured (" << r.requests_measured << " requests measured):\n\n";
    o << sf("- Latency P50/P95/P99: TPOT %.1f / %.1f / %.1f ms, TTFT %.0f / %.0f / %.0f ms\n",
            r.tpot.p50 * 1e3, r.tpot.p95 * 1e3, r.tpot.p99 * 1e3, r.ttft.p50 * 1e3, r.ttft.p95 * 1e3,
            r.ttft.p99 * 1e3);
    o << sf("- Throughput: %.0f output tok/s (%.0f per GPU)\n", r.output_tokens_per_s,
            r.output_tokens_per_s_per_gpu);
    o << sf("- All-to-All share: %.1f%% (target < 20%%): %s\n", 100.0 * r.all_to_all_share(),
            r.all_to_all_share() < 0.20 ? "within target" : "OVER target");
    o << sf("- SLA P%g TTFT <= %.0f ms, TPOT <= %.0f ms: %s (violations %.1f%%)\n", r.sla_percentile,
            r.sla_ttft_s * 1e3, r.sla_tpot_s * 1e3, r.sla_met ? "met" : "NOT met",
            100.0 * r.sla_violation_rate);
    if (!p.simulated->by_batch.empty())
      o << "\nThroughput against batch size (simulated):\n\n" << sim_batches_md(*p.simulated);
  } else {
    o << "\nLatency percentiles, throughput against batch size, All-to-All share and SLA results: run "
         "`moesim plan --simulate`.\n";
  }
  o << "\nQuantisation quality (INT8/INT4) is not simulated; measure it on the deployment's own token "
       "mix.\n\n";

  o << "## 3. Optimisation hints\n\n";
  o << "- Expert tiers from measured hotness (EWMA over 1000-5000 batches): hot 15-25% of experts in HBM at "
       "BF16/FP8, warm INT8, cold INT4 in host memory or on NVMe.\n";
  o << "- Topology-aware placement: partition the co-activation graph so co-selected experts share a GPU "
       "(20-40% less All-to-All traffic).\n";
  o << "- Continuous batching: max_batch_size (max_num_seqs) up to the KV limit above; prefix caching for "
       "shared "
       "prompts; speculative decoding only if acceptance > 60%.\n";
  o << "- Keep the router in BF16; shared experts BF16/INT8; rare routed experts INT4.\n\n";

  o << "## 4. Operation: monitoring thresholds\n\n";
  o << "| signal | alert when |\n|---|---|\n";
  if (p.simulated) {
    const Report& r = p.simulated->report;
    o << sf("| P%g TTFT / TPOT | over %.0f ms / %.0f ms |\n", r.sla_percentile, r.sla_ttft_s * 1e3,
            r.sla_tpot_s * 1e3);
  } else {
    o << "| P99 latency | over the SLA (sla.ttft_ms, sla.tpot_ms) |\n";
  }
  o << "| GPU utilisation | below 30% |\n| memory | above 90% of HBM |\n"
       "| All-to-All share | above 20% (25%: imbalance or small batches) |\n"
       "| per-GPU expert load | max/mean rising; re-measure hotness periodically |\n";
  if (!p.notes.empty()) {
    o << "\n## Notes\n\n";
    for (const std::string& n : p.notes) o << "- " << n << "\n";
  }
  return o.str();
}

}  // namespace moesim
