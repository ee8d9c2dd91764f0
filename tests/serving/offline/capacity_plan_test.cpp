#include "sim/serving/offline/capacity_plan.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/offline/capacity_plan_report.h"

using namespace moesim;

namespace {

// DeepSeek-V3 from its public config (config_671B.json): MLA, 61 layers of which 3 dense, 256 experts.
ModelSpec deepseek_v3() {
  ModelSpec m;
  m.name = "deepseek-v3";
  m.num_layers = 61;
  m.num_dense_layers = 3;
  m.hidden = 7168;
  m.vocab = 129280;
  m.attention = AttentionKind::kMla;
  m.num_heads = 128;
  m.q_lora_rank = 1536;
  m.kv_lora_rank = 512;
  m.qk_nope_head_dim = 128;
  m.qk_rope_head_dim = 64;
  m.v_head_dim = 128;
  m.routed_experts = 256;
  m.shared_experts = 1;
  m.top_k = 8;
  m.expert_inter = 2048;
  m.shared_expert_inter = 2048;
  m.dense_inter = 18432;
  m.published_total_params_b = 671;
  m.published_active_params_b = 37;
  return m;
}

// Kimi-K2: the DeepSeek-V3 layout with 384 experts, 64 heads, one dense layer, a larger vocabulary.
ModelSpec kimi_k2() {
  ModelSpec m = deepseek_v3();
  m.name = "kimi-k2";
  m.num_dense_layers = 1;
  m.vocab = 163840;
  m.num_heads = 64;
  m.routed_experts = 384;
  m.published_total_params_b = 1040;
  m.published_active_params_b = 32;
  return m;
}

// A model known only by its published totals (the seed's DeepSeek-V4 Pro); shapes are placeholders.
ModelSpec unknown_model(double total_b, double active_b) {
  ModelSpec m = deepseek_v3();
  m.name = "assumed";
  m.routed_experts = 640;
  m.architecture_known = false;
  m.published_total_params_b = total_b;
  m.published_active_params_b = active_b;
  return m;
}

// Datasheet GPUs (NVIDIA H100 SXM / H200 SXM): decimal GB of HBM.
GpuSpec gpu(double hbm_gb, double hbm_tb_per_s) {
  GpuSpec g;
  g.name = hbm_gb == 80 ? "h100-sxm" : "h200-sxm";
  g.hbm_bytes = hbm_gb * 1e9;
  g.hbm_bytes_per_s = hbm_tb_per_s * 1e12;
  g.bf16_flops_per_s = 989e12;
  g.fp8_flops_per_s = 1979e12;
  g.int8_ops_per_s = 1979e12;
  g.mem_efficiency = 0.75;
  g.compute_efficiency = 0.75;
  g.nvlink_bytes_per_s = 450e9;
  g.nic_bytes_per_s = 50e9;
  return g;
}

ScenarioSpec scenario(ModelSpec m, GpuSpec g, Precision weights) {
  ScenarioSpec s;
  s.name = m.name;
  s.model = std::move(m);
  s.precision.routed_experts = s.precision.shared_experts = s.precision.attention = s.precision.dense_ffn =
      weights;
  s.precision.router = s.precision.embeddings = weights;
  s.cluster.gpu = std::move(g);
  s.cluster.nodes = 1;
  s.cluster.gpus_per_node = 8;
  s.cluster.fabric.nodes = 1;
  s.cluster.fabric.gpus_per_node = 8;
  s.deployment.ep_size = 8;
  s.deployment.attention_dp = 8;
  s.deployment.attention_tp = 1;
  s.deployment.max_batch_size = 32;
  s.workload.prompt = FixedLength{1024};
  s.workload.output = FixedLength{256};
  s.run.requests = 10;
  return s;
}

// DeepSeek-V3's parameters written out from its config, independently of ModelSpec.
double deepseek_v3_total_params() {
  const double h = 7168;
  const double attention =
      h * 1536 + 1536.0 * 128 * (128 + 64) + h * (512 + 64) + 512.0 * 128 * (128 + 128) + 128.0 * 128 * h;
  const double expert = 3 * h * 2048;
  return attention * 61 + 3 * h * 18432 * 3 + expert * 58 /*shared*/ + h * 256 * 58 /*router*/ +
         2 * 129280 * h /*embeddings, untied*/ + expert * 256 * 58;
}

constexpr double kUsableFraction = 0.9;
constexpr double kPerGpuReserve = 6.0 * 1024 * 1024 * 1024;  // 4 GiB activations + 2 GiB overhead (defaults)

}  // namespace

TEST_CASE("DeepSeek-V3 in BF16 is about 1.34 TB and needs three 8xH100-80GB nodes, two in FP8, one in INT4") {
  const ScenarioSpec s = scenario(deepseek_v3(), gpu(80, 3.35), Precision::kBF16);
  const CapacityPlan p = plan_capacity_memory(s, PlanOptions{});
  const double params = deepseek_v3_total_params();
  REQUIRE(params == Approx(671e9).epsilon(0.002));
  REQUIRE(p.total_params == Approx(params));

  // 671B x 2 bytes = 1.342 TB > 8 x 80 GB = 640 GB. The seed says "two nodes over InfiniBand", but
  // 2 x 640 GB = 1280 GB < 1342 GB: by raw capacity BF16 needs three nodes; two suffice in FP8 (671 GB).
  const PrecisionRow& bf16 = p.row("bf16");
  REQUIRE(bf16.weight_bytes == Approx(params * 2));
  REQUIRE(bf16.weight_bytes == Approx(1.342e12).epsilon(0.002));
  REQUIRE_FALSE(bf16.fits_one_node_by_weights);
  REQUIRE(bf16.nodes_by_weights == 3);
  REQUIRE(p.row("fp8").weight_bytes == Approx(params));
  REQUIRE(p.row("fp8").nodes_by_weights == 2);
  REQUIRE(p.row("int8").nodes_by_weights == 2);
  const PrecisionRow& int4 = p.row("int4");
  REQUIRE(int4.weight_bytes == Approx(params * 0.5));
  REQUIRE(int4.fits_one_node_by_weights);

  // With KV, activations and overhead: usable per node = 8 x (80 GB x 0.9 - 6 GiB).
  const double usable_node = 8 * (80e9 * kUsableFraction - kPerGpuReserve);
  const double kv = 256.0 * (1024 + 256) * (512 + 64) * 61 * 2;  // 8 groups x 32 seqs, 1280 tokens, MLA BF16
  REQUIRE(p.concurrency == 256);
  REQUIRE(p.context_tokens == 1280);
  REQUIRE(bf16.kv_bytes == Approx(kv));
  REQUIRE(bf16.nodes_needed == static_cast<int>(std::ceil((params * 2 + kv) / usable_node)));
  REQUIRE(bf16.nodes_needed == 3);
  REQUIRE(p.row("fp8").nodes_needed == 2);
  REQUIRE(int4.nodes_needed == 1);
  REQUIRE(int4.fits_scenario_cluster);
  REQUIRE_FALSE(bf16.fits_scenario_cluster);
  REQUIRE(bf16.total_bytes == Approx(params * 2 + kv + 8 * kPerGpuReserve));
}

TEST_CASE("MLA KV cache per token is (kv_lora + rope) x layers x bytes, times context and concurrency") {
  const ScenarioSpec s = scenario(deepseek_v3(), gpu(80, 3.35), Precision::kINT4);
  PlanOptions o;
  o.context_tokens = 4096;
  o.concurrency = 100;
  const CapacityPlan p = plan_capacity_memory(s, o);
  const double per_token = (512 + 64) * 61 * 2.0;  // 70,272 bytes in BF16
  REQUIRE(p.kv_bytes_per_token == Approx(per_token));
  REQUIRE(p.kv_table.size() == 8);  // 1, 8, 32, 64, 100, 128, 256, 512
  for (const KvRow& k : p.kv_table) {
    REQUIRE(k.kv_bytes == Approx(static_cast<double>(k.concurrency) * 4096 * per_token));
    REQUIRE(k.kv_bytes_per_gpu == Approx(k.kv_bytes / 8));
  }
  REQUIRE(p.row("int4").kv_bytes == Approx(100 * 4096 * per_token));
}

TEST_CASE("GQA KV cache per token is 2 x kv_heads x head_dim x layers x bytes") {
  ModelSpec m;  // Qwen3-235B-A22B (config.json): 94 layers, 4 KV heads of 128
  m.name = "qwen3-235b-a22b";
  m.num_layers = 94;
  m.hidden = 4096;
  m.vocab = 151936;
  m.attention = AttentionKind::kGqa;
  m.num_heads = 64;
  m.num_kv_heads = 4;
  m.head_dim = 128;
  m.routed_experts = 128;
  m.top_k = 8;
  m.expert_inter = 1536;
  ScenarioSpec s = scenario(m, gpu(80, 3.35), Precision::kBF16);
  s.precision.kv_cache = Precision::kFP8;
  const CapacityPlan p = plan_capacity_memory(s, PlanOptions{.context_tokens = 8192, .concurrency = 64});
  const double per_token = 2.0 * 4 * 128 * 94 * 1;
  REQUIRE(p.kv_bytes_per_token == Approx(per_token));
  REQUIRE(p.row("bf16").kv_bytes == Approx(64 * 8192 * per_token));
}

TEST_CASE("the largest concurrency is what usable memory holds after the weights at the context length") {
  const ScenarioSpec s = scenario(deepseek_v3(), gpu(80, 3.35), Precision::kINT4);
  const CapacityPlan p = plan_capacity_memory(s, PlanOptions{.context_tokens = 4096, .concurrency = 1});
  const double pool = 8 * (80e9 * kUsableFraction - kPerGpuReserve) - deepseek_v3_total_params() * 0.5;
  const double per_sequence = 4096.0 * (512 + 64) * 61 * 2;
  const auto expected = static_cast<std::int64_t>(std::floor(pool / per_sequence));
  REQUIRE(p.row("int4").max_concurrency == expected);
  REQUIRE(p.row("bf16").max_concurrency == 0);
  // On the nodes it needs, FP8 holds (2 nodes of usable memory - weights) / per sequence.
  const double pool2 = 2 * 8 * (80e9 * kUsableFraction - kPerGpuReserve) - deepseek_v3_total_params();
  REQUIRE(p.row("fp8").max_concurrency_needed_nodes ==
          static_cast<std::int64_t>(std::floor(pool2 / per_sequence)));
  for (const KvRow& k : p.kv_table) REQUIRE(k.fits == (k.concurrency <= expected));
}

TEST_CASE(
    "per-component precisions weigh the sum of their parts: INT4 experts with BF16 router and embeddings") {
  ScenarioSpec s = scenario(deepseek_v3(), gpu(80, 3.35), Precision::kINT4);
  s.precision.router = Precision::kBF16;
  s.precision.embeddings = Precision::kBF16;
  const CapacityPlan p = plan_capacity_memory(s, PlanOptions{});
  const double h = 7168;
  const double router = h * 256 * 58;
  const double embeddings = 2 * 129280 * h;
  const double rest = deepseek_v3_total_params() - router - embeddings;
  const PrecisionRow& r = p.row("scenario");
  REQUIRE(r.weight_bytes == Approx(rest * 0.5 + (router + embeddings) * 2));
  REQUIRE(r.weights.router == Approx(router * 2));
  REQUIRE(r.weights.routed_experts == Approx(3 * h * 2048 * 256 * 58 * 0.5));
  REQUIRE(r.bytes_per_param > 0.5);
  REQUIRE(r.bytes_per_param < 0.52);
}

TEST_CASE("a model whose architecture is not public is sized from its published totals") {
  // DeepSeek-V4 Pro (seed section 2): 1.6T total -> 3.2 TB in BF16 (multi-node), ~800 GB in INT4 (one
  // node of 8 H200 = 8 x 141 GB = 1128 GB).
  const ScenarioSpec s = scenario(unknown_model(1600, 49), gpu(141, 4.8), Precision::kBF16);
  const CapacityPlan p = plan_capacity_memory(s, PlanOptions{});
  REQUIRE_FALSE(p.architecture_known);
  REQUIRE(p.total_params == Approx(1.6e12));
  REQUIRE(p.active_params == Approx(49e9));
  REQUIRE(p.row("bf16").weight_bytes == Approx(3.2e12));
  REQUIRE(p.row("int4").weight_bytes == Approx(0.8e12));
  REQUIRE(p.row("bf16").nodes_by_weights == static_cast<int>(std::ceil(3.2e12 / 1128e9)));
  REQUIRE(p.row("bf16").nodes_needed > 1);
  REQUIRE(p.row("int4").nodes_needed == 1);
  REQUIRE(p.notes.front().find("ASSUMED") != std::string::npos);

  // Mistral Large 3 (675B / 41B): 1.35 TB in BF16 needs two H200 nodes; FP8 (675 GB) fits one.
  const CapacityPlan mistral =
      plan_capacity_memory(scenario(unknown_model(675, 41), gpu(141, 4.8), Precision::kBF16), PlanOptions{});
  REQUIRE(mistral.row("bf16").weight_bytes == Approx(1.35e12));
  REQUIRE(mistral.row("bf16").nodes_needed == 2);
  REQUIRE(mistral.row("fp8").nodes_needed == 1);
}

TEST_CASE("advice: one NVLink node when the model fits, quantise or go multi-node when it does not") {
  const CapacityPlan bf16 =
      plan_capacity_memory(scenario(deepseek_v3(), gpu(80, 3.35), Precision::kBF16), PlanOptions{});
  REQUIRE(bf16.advice.at(0).find("multi-node") != std::string::npos);
  REQUIRE(bf16.advice.at(1).find("int4") != std::string::npos);  // FP8 and INT8 need two nodes
  const CapacityPlan int4 =
      plan_capacity_memory(scenario(deepseek_v3(), gpu(80, 3.35), Precision::kINT4), PlanOptions{});
  REQUIRE(int4.advice.at(0).find("Single node") != std::string::npos);
  REQUIRE(int4.advice.at(0).find("NVLink") != std::string::npos);
}

TEST_CASE(
    "decode is memory-bound at small batches and prefill compute-bound, against the GPU's ridge point") {
  const ScenarioSpec s = scenario(deepseek_v3(), gpu(80, 3.35), Precision::kFP8);
  const RooflineCostModel cost(s.cluster.gpu);
  const CapacityPlan p = plan_capacity(s, cost, PlanOptions{});
  // Decode at the ladder's 1 and 8, then the scenario's cap of 32 sequences per group; one prefill row.
  REQUIRE(p.throughput.size() == 4);
  CHECK(p.throughput[2].batch == s.deployment.max_batch_size);
  const double ridge = 1979e12 * 0.75 / (3.35e12 * 0.75);  // FP8 experts
  const ThroughputRow& b1 = p.throughput.front();
  REQUIRE(b1.ridge_flops_per_byte == Approx(ridge));
  REQUIRE(b1.regime == "memory-bound");
  REQUIRE(b1.compute_util < 0.10);  // seed section 1: tensor cores at 3-10% during decode
  REQUIRE(p.throughput.back().phase == "prefill");
  REQUIRE(p.throughput.back().regime == "compute-bound");
  for (std::size_t i = 1; i < 3; ++i) {
    REQUIRE(p.throughput[i].tokens_per_s_per_gpu > p.throughput[i - 1].tokens_per_s_per_gpu);
    REQUIRE(p.throughput[i].tokens_per_s_per_node == Approx(p.throughput[i].tokens_per_s_per_gpu * 8));
  }
  // Per GPU = tokens per step over the replica / step time / GPUs: batch b per group x 8 groups.
  REQUIRE(b1.tokens_per_s_per_gpu == Approx(8.0 / b1.step_s / 8));
  REQUIRE(p.single_request_ms_per_token > 0);
  REQUIRE(p.single_request_ms_per_token <= b1.ms_per_token);
}

TEST_CASE("a 1T-total / 32B-active model costs 1T-class memory but gives 32B-class throughput") {
  const ScenarioSpec ds = scenario(deepseek_v3(), gpu(141, 4.8), Precision::kINT4);
  const ScenarioSpec kimi = scenario(kimi_k2(), gpu(141, 4.8), Precision::kINT4);
  const RooflineCostModel cost(ds.cluster.gpu);
  const PlanOptions o{.context_tokens = 2048, .concurrency = 64};
  const CapacityPlan a = plan_capacity(ds, cost, o);
  const CapacityPlan b = plan_capacity(kimi, cost, o);
  // Memory scales with total parameters (about 1.5x DeepSeek-V3's)...
  REQUIRE(b.total_params > 1.0e12);
  REQUIRE(b.row("bf16").weight_bytes / a.row("bf16").weight_bytes == Approx(b.total_params / a.total_params));
  REQUIRE(b.active_params < a.active_params);
  // ...but memory-bound decode reads the weights of the ACTIVE experts, so Kimi-K2 is not slower per
  // token than the 37B-active model; were it set by total parameters it would be ~0.65x.
  const double ratio = b.throughput.front().tokens_per_s_per_gpu / a.throughput.front().tokens_per_s_per_gpu;
  REQUIRE(ratio > 0.95);
  REQUIRE(ratio < 2.0);
}

TEST_CASE("the markdown review follows the seed's checklist") {
  const ScenarioSpec s = scenario(deepseek_v3(), gpu(80, 3.35), Precision::kINT4);
  const RooflineCostModel cost(s.cluster.gpu);
  const CapacityPlan p = plan_capacity(s, cost, PlanOptions{});
  const std::string md = format_plan_markdown(p);
  for (const char* section : {"## 1. Assessment", "## 2. Benchmark", "## 3. Optimisation hints",
                              "## 4. Operation: monitoring thresholds", "--simulate"}) {
    REQUIRE(md.find(section) != std::string::npos);
  }
  const std::string table = format_plan_table(p);
  REQUIRE(table.find("int4") != std::string::npos);
  REQUIRE(table.find("memory-bound") != std::string::npos);
}

// With deployment.pools, decode is costed on the decode pool's deployment and prefill on the prefill pool's:
// each row equals the same row of a review of that pool alone (the same planner seed and order of steps).
TEST_CASE("a disaggregated review costs each phase on its own pool's deployment") {
  const Json j = Json::parse(R"({
    "name": "tiny-pd-review",
    "model": {"num_layers": 2, "num_dense_layers": 0, "hidden": 1024, "vocab": 1000, "attention": "gqa",
              "num_heads": 8, "num_kv_heads": 8, "head_dim": 128, "routed_experts": 8, "shared_experts": 0,
              "top_k": 2, "expert_inter": 512},
    "precision": {"weights": "bf16", "kv_cache": "bf16"},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4},
    "deployment": {"ep_size": 1, "max_batched_tokens": 1024,
                   "pools": [{"role": "decode", "instances": 1, "ep_size": 2, "attention": {"dp": 2, "tp": 1}},
                             {"role": "prefill", "instances": 1}]},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 4},
                 "prompt_tokens": {"kind": "fixed", "tokens": 256},
                 "output_tokens": {"kind": "fixed", "tokens": 16}},
    "run": {"seed": 3, "duration_s": 10}
  })");
  const LoadedScenario sc = parse_scenario(j, "");
  const ScenarioSpec& s = sc.spec;
  const RooflineCostModel cost(s.cluster.gpu);
  const ScenarioSpec decode_view = s.pool_view(s.pools[0]);  // first: an instance must not straddle nodes
  const ScenarioSpec prefill_view = s.pool_view(s.pools[1]);
  const CapacityPlan p = plan_capacity(s, prefill_view, cost, PlanOptions{});
  // Alone: the decode pool's review starts with its decode rows; the prefill pool's, with no decode rows,
  // with its prefill row.
  const CapacityPlan decode_alone = plan_capacity(decode_view, cost, PlanOptions{});
  PlanOptions prefill_only;
  prefill_only.decode_batch_sizes.clear();
  const CapacityPlan prefill_alone = plan_capacity(prefill_view, cost, prefill_only);
  int decode_rows = 0;
  int prefill_rows = 0;
  for (const ThroughputRow& t : p.throughput) {
    INFO(t.phase << " " << t.batch);
    if (t.phase == "decode") {
      CHECK(t.pool == "0 decode EP2");
      const ThroughputRow& alone = decode_alone.throughput[static_cast<std::size_t>(decode_rows++)];
      REQUIRE(alone.phase == "decode");
      CHECK(t.batch == alone.batch);
      CHECK(t.step_s == alone.step_s);
      CHECK(t.tokens_per_s_per_gpu == alone.tokens_per_s_per_gpu);
    } else {
      ++prefill_rows;
      CHECK(t.pool == "1 prefill EP1");
      REQUIRE(prefill_alone.throughput.size() == 1);
      CHECK(t.step_s == prefill_alone.throughput[0].step_s);
    }
  }
  CHECK(decode_rows == static_cast<int>(PlanOptions{}.decode_batch_sizes.size()));
  CHECK(prefill_rows == 1);
  // The decode pool spreads a batch over two attention groups and EP2: its decode step (batch 8) is not the
  // prefill pool's one-GPU step, which a review costing every phase on the reviewed pool would have shown.
  const CapacityPlan prefill_review = plan_capacity(prefill_view, cost, PlanOptions{});
  CHECK(prefill_review.throughput[1].step_s != p.throughput[1].step_s);
  CHECK(format_plan_table(p).find("0 decode EP2") != std::string::npos);
  CHECK(format_plan_markdown(p).find("| decode | 0 decode EP2 |") != std::string::npos);
}
