#include "sim/scenario/plan_json.h"

#include "sim/scenario/report_json.h"

namespace moesim {

namespace {

Json weights_json(const WeightBytes& w) {
  return Json{{"attention_bytes", w.attention},           {"dense_ffn_bytes", w.dense_ffn},
              {"shared_experts_bytes", w.shared_experts}, {"router_bytes", w.router},
              {"embeddings_bytes", w.embeddings},         {"routed_experts_bytes", w.routed_experts}};
}

Json precision_json(const PrecisionRow& r, bool components) {
  Json j{{"label", r.label},
         {"bytes_per_param", r.bytes_per_param},
         {"weight_bytes", r.weight_bytes},
         {"weight_bytes_per_gpu", r.weight_bytes_per_gpu},
         {"kv_bytes", r.kv_bytes},
         {"activation_overhead_bytes", r.activation_overhead_bytes},
         {"total_bytes", r.total_bytes},
         {"total_bytes_per_gpu", r.total_bytes_per_gpu},
         {"fits_one_node_by_weights", r.fits_one_node_by_weights},
         {"nodes_by_weights", r.nodes_by_weights},
         {"nodes_needed", r.nodes_needed},
         {"fits_scenario_cluster", r.fits_scenario_cluster},
         {"max_concurrency", r.max_concurrency},
         {"max_concurrency_needed_nodes", r.max_concurrency_needed_nodes}};
  if (components) j["weights"] = weights_json(r.weights);
  return j;
}

Json throughput_json(const ThroughputRow& t) {
  Json j{{"phase", t.phase},
         {"batch", t.batch},
         {"replica_tokens", t.replica_tokens},
         {"step_s", t.step_s},
         {"tokens_per_s_per_gpu", t.tokens_per_s_per_gpu},
         {"tokens_per_s_per_node", t.tokens_per_s_per_node},
         {"tokens_per_s_cluster", t.tokens_per_s_cluster},
         {"flops_per_byte", t.flops_per_byte},
         {"ridge_flops_per_byte", t.ridge_flops_per_byte},
         {"compute_util", t.compute_util},
         {"hbm_util", t.hbm_util},
         {"all_to_all_share", t.all_to_all_share},
         {"regime", t.regime}};
  if (!t.pool.empty()) j["pool"] = t.pool;
  return j;
}

Json memory_json(const MemoryPlan& m) {
  return Json{{"weights_per_gpu", weights_json(m.weights_per_gpu)},
              {"weight_bytes_per_gpu", m.weights_per_gpu.total()},
              {"activation_bytes", m.activation_bytes},
              {"overhead_bytes", m.overhead_bytes},
              {"usable_bytes", m.usable_bytes},
              {"kv_pool_bytes_per_gpu", m.kv_pool_bytes_per_gpu},
              {"kv_tokens_per_group", m.kv_tokens_per_group},
              {"experts_per_gpu", m.experts_per_gpu},
              {"fits", m.fits()}};
}

}  // namespace

Json plan_to_json(const CapacityPlan& p, const Json& scenario_echo) {
  Json precisions = Json::array();
  for (const PrecisionRow& r : p.precisions) precisions.push_back(precision_json(r, p.architecture_known));
  Json kv = Json::array();
  for (const KvRow& k : p.kv_table) {
    kv.push_back(Json{{"concurrency", k.concurrency},
                      {"kv_bytes", k.kv_bytes},
                      {"kv_bytes_per_gpu", k.kv_bytes_per_gpu},
                      {"fits", k.fits}});
  }
  Json throughput = Json::array();
  for (const ThroughputRow& t : p.throughput) throughput.push_back(throughput_json(t));
  Json j{{"scenario_name", p.scenario},
         {"model",
          {{"name", p.model},
           {"architecture_known", p.architecture_known},
           {"total_params", p.total_params},
           {"active_params", p.active_params},
           {"shapes_total_params", p.shapes_total_params},
           {"shapes_active_params", p.shapes_active_params},
           {"published_total_params", p.published_total_params},
           {"published_active_params", p.published_active_params},
           {"attention", p.attention},
           {"kv_bytes_per_token", p.kv_bytes_per_token},
           {"kv_precision", p.kv_precision}}},
         {"cluster",
          {{"gpu", p.gpu},
           {"hbm_bytes", p.hbm_bytes},
           {"nodes", p.nodes},
           {"gpus_per_node", p.gpus_per_node},
           {"gpus", p.gpus},
           {"node_hbm_bytes", p.node_hbm_bytes},
           {"usable_bytes_per_gpu", p.usable_bytes_per_gpu},
           {"activation_bytes", p.activation_bytes},
           {"overhead_bytes", p.overhead_bytes},
           {"kv_cache_memory_fraction", p.kv_cache_memory_fraction}}},
         {"load",
          {{"context_tokens", p.context_tokens},
           {"context_source", p.context_source},
           {"concurrency", p.concurrency},
           {"concurrency_source", p.concurrency_source}}},
         {"precisions", precisions},
         {"deployment_memory", memory_json(p.deployment_memory)},
         {"deployed_concurrency", p.deployed_concurrency},
         {"kv_table", kv},
         {"throughput", throughput},
         {"single_request_s_per_token", p.single_request_ms_per_token / 1e3},
         {"cost_model", p.cost_model},
         {"advice", p.advice},
         {"notes", p.notes},
         {"pools",
          [&] {
            Json a = Json::array();
            for (const CapacityPlan::PoolMemory& q : p.pools) {
              a.push_back({{"role", q.role},
                           {"instances", q.instances},
                           {"ep_size", q.ep_size},
                           {"gpus", q.gpus},
                           {"memory", memory_json(q.memory)}});
            }
            return a;
          }()},
         {"scenario", scenario_echo}};
  if (const NMinusOne& n = p.n_minus_one; n.computed) {
    j["n_minus_one"] = Json{{"prompt_tokens", n.prompt_tokens},
                            {"output_tokens", n.output_tokens},
                            {"decode_within_tpot", n.decode_within_tpot},
                            {"all_up_req_per_s", n.all_up_req_per_s},
                            {"gpu_covered", n.gpu_covered},
                            {"gpu_lost_req_per_s", n.gpu_lost_req_per_s},
                            {"gpu_lost_restart_req_per_s", n.gpu_lost_restart_req_per_s},
                            {"node_covered", n.node_covered},
                            {"node_lost_req_per_s", n.node_lost_req_per_s},
                            {"node_lost_restart_req_per_s", n.node_lost_restart_req_per_s},
                            {"assumption", n.assumption}};
  }
  if (p.simulated) {
    Json by_batch = Json::array();
    for (const SimulatedBatch& b : p.simulated->by_batch) {
      by_batch.push_back(
          Json{{"max_batch_size", b.max_batch_size}, {"report", report_to_json(b.report, Json::object())}});
    }
    j["simulated"] =
        Json{{"report", report_to_json(p.simulated->report, Json::object())}, {"by_batch", by_batch}};
  }
  return j;
}

}  // namespace moesim
