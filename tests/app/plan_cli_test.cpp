// `moesim plan` through the real binary: the seed's capacity reviews (scenarios/reference/review_*.json)
// checked against the parameter and KV arithmetic done here, the JSON and markdown outputs, --simulate,
// and bad input reported the way `run` reports it.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "sim/scenario/json_reader.h"
#include "tests/app/cli_support.h"
#include "workloads/request_source.h"

using namespace moesim;
namespace fs = std::filesystem;

namespace {

using moesim_test::Result;
using moesim_test::run_moesim;
using moesim_test::slurp;

struct TmpDir : moesim_test::TempDir {
  TmpDir() : TempDir("moesim-plan-test-") {}
};

Json plan_json(const TmpDir& t, const std::string& scenario, const std::string& extra = "") {
  const fs::path json = t.dir / "plan.json";
  const Result r = run_moesim(t, "plan " + scenario + " -q --json " + json.string() + " " + extra);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  return load_json_file(json.string());
}

const Json& precision(const Json& plan, const std::string& label) {
  for (const Json& r : plan["precisions"]) {
    if (r["label"] == label) return r;
  }
  FAIL("no precision row " << label);
  static const Json none;
  return none;
}

// Parameters of a DeepSeek-V3-layout MLA MoE from its catalog entry, written out here:
// attention (q_a, q_b, kv_a, kv_b, o) per layer, dense FFNs, shared experts and routers per MoE layer,
// untied embeddings, routed experts (3 x hidden x inter each).
double mla_moe_params(const Json& m) {
  const double h = m["hidden"];
  const double heads = m["num_heads"];
  const double q_lora = m["q_lora_rank"];
  const double kv_lora = m["kv_lora_rank"];
  const double nope = m["qk_nope_head_dim"];
  const double rope = m["qk_rope_head_dim"];
  const double v = m["v_head_dim"];
  const double layers = m["num_layers"];
  const double dense = m["num_dense_layers"];
  const double moe = layers - dense;
  const double experts = m["routed_experts"];
  const double attention = h * q_lora + q_lora * heads * (nope + rope) + h * (kv_lora + rope) +
                           kv_lora * heads * (nope + v) + heads * v * h;
  const double expert = 3 * h * m["expert_inter"].get<double>();
  const double shared = m["shared_experts"].get<double>() * 3 * h * m["shared_expert_inter"].get<double>();
  return attention * layers + 3 * h * m["dense_inter"].get<double>() * dense + (shared + h * experts) * moe +
         2 * m["vocab"].get<double>() * h + expert * experts * moe;
}

Json catalog_model(const std::string& name) {
  return load_json_file(std::string(MOESIM_SOURCE_DIR) + "/scenarios/catalog/models.json")[name];
}

}  // namespace

TEST_CASE(
    "plan reproduces the seed's DeepSeek-V3 review: 1.34 TB in BF16 does not fit one 8xH100-80GB node") {
  const TmpDir t;
  const fs::path md = t.dir / "review.md";
  const Json p =
      plan_json(t, "scenarios/reference/review_deepseek_v3_8xh100.json", "--markdown " + md.string());
  const Json m = catalog_model("deepseek-v3");
  const double params = mla_moe_params(m);
  REQUIRE(params == Approx(671e9).epsilon(0.002));
  CHECK(p["model"]["total_params"].get<double>() == Approx(params));

  // 671B x 2 bytes = 1.342 TB; one node of 8 x 80 GB = 640 GB. The seed says two nodes in BF16, but
  // 2 x 640 GB = 1280 GB < 1342 GB: by raw capacity three nodes; two in FP8 (671 GB); one in INT4.
  const Json& bf16 = precision(p, "bf16");
  CHECK(bf16["weight_bytes"].get<double>() == Approx(2 * params));
  CHECK(bf16["weight_bytes"].get<double>() == Approx(1.342e12).epsilon(0.002));
  CHECK(p["cluster"]["node_hbm_bytes"].get<double>() == Approx(640e9));
  CHECK(bf16["fits_one_node_by_weights"] == false);
  CHECK(bf16["nodes_by_weights"] == static_cast<int>(std::ceil(2 * params / 640e9)));
  CHECK(bf16["nodes_by_weights"] == 3);
  CHECK(precision(p, "fp8")["nodes_by_weights"] == 2);
  CHECK(precision(p, "fp8")["nodes_needed"] == 2);
  const Json& int4 = precision(p, "int4");
  CHECK(int4["weight_bytes"].get<double>() == Approx(0.5 * params));
  CHECK(int4["weight_bytes"].get<double>() == Approx(335.5e9).epsilon(0.002));
  CHECK(int4["fits_one_node_by_weights"] == true);
  CHECK(int4["nodes_needed"] == 1);
  CHECK(p["deployment_memory"]["fits"] == false);

  // MLA KV cache: (kv_lora + rope) x layers x 2 bytes per token.
  const double kv_token = (512.0 + 64) * 61 * 2;
  CHECK(p["model"]["kv_bytes_per_token"].get<double>() == Approx(kv_token));
  const double context = p["load"]["context_tokens"];
  // The workload's prompt and output means as drawn: lognormals of mean 1,150 (sigma 0.9, kept in [16,
  // 16,384]) and 210 (sigma 0.8, in [4, 2,048]), each resampled into its bounds, so a little below 1,150 +
  // 210.
  const double drawn =
      lognormal_bounded_mean(1150, 0.9, 15.5, 16384.5) + lognormal_bounded_mean(210, 0.8, 3.5, 2048.5);
  CHECK(drawn < 1150.0 + 210.0);
  CHECK(context == std::round(drawn));
  for (const Json& k : p["kv_table"]) {
    CHECK(k["kv_bytes"].get<double>() == Approx(k["concurrency"].get<double>() * context * kv_token));
  }
  // Decode rows: the ladder's batches a group capped at max_batch_size 32 can form (1, 8), then the cap
  // itself; then one prefill row. Never a batch beyond the cap.
  REQUIRE(p["throughput"].size() == 4);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(p["throughput"][i]["phase"] == "decode");
    CHECK(p["throughput"][i]["batch"] == std::vector<int>{1, 8, 32}[i]);
  }
  CHECK(p["throughput"][3]["phase"] == "prefill");
  CHECK(p["throughput"][0]["regime"] == "memory-bound");
  CHECK(p["advice"][0].get<std::string>().find("multi-node") != std::string::npos);

  const std::string review = slurp(md);
  CHECK_THAT(review, Catch::Contains("## 1. Assessment") && Catch::Contains("## 2. Benchmark") &&
                         Catch::Contains("## 3. Optimisation hints") && Catch::Contains("## 4. Operation") &&
                         Catch::Contains("| bf16 | 1342.1 |"));
}

TEST_CASE(
    "plan sizes Mistral Large 3 and DeepSeek-V4 Pro from their published totals and says the shapes are "
    "assumed") {
  const TmpDir t;
  const Json mistral = plan_json(t, "scenarios/reference/review_mistral_large_3.json");
  CHECK(mistral["model"]["architecture_known"] == false);
  CHECK(precision(mistral, "bf16")["weight_bytes"].get<double>() == Approx(675e9 * 2));
  CHECK(precision(mistral, "fp8")["weight_bytes"].get<double>() == Approx(675e9));
  CHECK(precision(mistral, "bf16")["nodes_needed"] == 2);  // 1350 GB > 8 x 141 GB = 1128 GB
  CHECK(precision(mistral, "fp8")["nodes_needed"] == 1);
  CHECK(mistral["model"]["active_params"].get<double>() == Approx(41e9));
  CHECK(mistral["notes"][0].get<std::string>().find("ASSUMED") != std::string::npos);

  // Seed: 1.6T -> 3.2 TB in BF16 (multi-node), about 800 GB in INT4 (one node).
  const Json v4 = plan_json(t, "scenarios/reference/review_deepseek_v4_pro.json");
  CHECK(precision(v4, "bf16")["weight_bytes"].get<double>() == Approx(3.2e12));
  CHECK(precision(v4, "bf16")["nodes_needed"].get<int>() > 1);
  CHECK(precision(v4, "int4")["weight_bytes"].get<double>() == Approx(0.8e12));
  CHECK(precision(v4, "int4")["nodes_needed"] == 1);
  CHECK(v4["model"]["active_params"].get<double>() == Approx(49e9));
  // The steps are costed on the assumed shapes, whose active count (all but the routed experts, plus top_k
  // experts per MoE layer) is not the published 49B: the summary says both.
  const Json m = catalog_model("deepseek-v4-pro");
  const double moe = m["num_layers"].get<double>() - m["num_dense_layers"].get<double>();
  const double expert = 3 * m["hidden"].get<double>() * m["expert_inter"].get<double>();
  const double shapes_active =
      mla_moe_params(m) - expert * moe * (m["routed_experts"].get<double>() - m["top_k"].get<double>());
  CHECK(v4["model"]["shapes_active_params"].get<double>() == Approx(shapes_active));
  const Result text = run_moesim(t, "plan scenarios/reference/review_deepseek_v4_pro.json");
  char costed[64];
  std::snprintf(costed, sizeof costed, "step costs on the assumed shapes' %.1fB active", shapes_active / 1e9);
  CHECK_THAT(text.out, Catch::Contains("49.0B active parameters") && Catch::Contains(costed));
}

TEST_CASE("plan gives Kimi-K2 1T-class memory and 32B-class active parameters") {
  const TmpDir t;
  const Json p = plan_json(t, "scenarios/reference/review_kimi_k2.json");
  const double params = mla_moe_params(catalog_model("kimi-k2"));
  CHECK(params == Approx(1.04e12).epsilon(0.02));  // shapes give 1.026T against the published 1.04T
  CHECK(precision(p, "bf16")["weight_bytes"].get<double>() == Approx(2 * params));
  CHECK(p["model"]["active_params"].get<double>() == Approx(32e9).epsilon(0.05));
  CHECK(precision(p, "int4")["nodes_needed"] == 1);
}

TEST_CASE("plan --json - writes the plan to stdout") {
  const TmpDir t;
  const Result r = run_moesim(t, "plan scenarios/reference/review_deepseek_v3_8xh100_int4.json --json -");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const Json j = Json::parse(r.out);
  CHECK(j["deployment_memory"]["fits"] == true);
  CHECK(j["advice"][0].get<std::string>().find("Single node") != std::string::npos);
  // The concurrency the deployed pools hold: whole sequences of the context per attention group (EP8 with
  // DP attention: 8 groups), not the seed's whole-cluster arithmetic.
  const std::int64_t per_group = j["deployment_memory"]["kv_tokens_per_group"].get<std::int64_t>() /
                                 j["load"]["context_tokens"].get<std::int64_t>();
  CHECK(j["deployed_concurrency"].get<std::int64_t>() == per_group * 8);
}

TEST_CASE("plan reviews every pool's memory as deployed") {
  // DeepSeek-V3 FP8 (58 MoE layers of 256 experts, 3 x 7168 x 2048 weights each, one byte per weight) with
  // 32 redundant slots (EPLB): 288 slots per layer, 9 per GPU on the prefill pool's EP32, 4 on the decode
  // pool's EP72.
  const TmpDir t;
  const Json p = plan_json(t, "scenarios/reference/dsv3_pd_disagg.json");
  REQUIRE(p["pools"].size() == 2);
  const double expert = 3.0 * 7168 * 2048;
  CHECK(p["pools"][0]["role"] == "prefill");
  CHECK(p["pools"][0]["ep_size"] == 32);
  CHECK(p["pools"][1]["role"] == "decode");
  CHECK(p["pools"][1]["gpus"] == 72);
  CHECK(p["pools"][0]["memory"]["weights_per_gpu"]["routed_experts_bytes"].get<double>() ==
        Approx(58 * 9 * expert).epsilon(1e-9));
  CHECK(p["pools"][1]["memory"]["weights_per_gpu"]["routed_experts_bytes"].get<double>() ==
        Approx(58 * 4 * expert).epsilon(1e-9));
  CHECK(p["pools"][1]["memory"]["fits"] == true);
  const Result r = run_moesim(t, "plan scenarios/reference/dsv3_pd_disagg.json");
  CHECK(r.out.find("pool [1] decode x1 (EP72, 72 GPUs)") != std::string::npos);
}

TEST_CASE("plan --simulate adds latency percentiles, All-to-All share and throughput against batch size") {
  const TmpDir t;
  const Json tiny = {{"name", "tiny-plan"},
                     {"model",
                      {{"num_layers", 2},
                       {"hidden", 1024},
                       {"vocab", 1000},
                       {"attention", "gqa"},
                       {"num_heads", 8},
                       {"num_kv_heads", 8},
                       {"head_dim", 128},
                       {"routed_experts", 8},
                       {"top_k", 2},
                       {"expert_inter", 512}}},
                     {"cluster", {{"gpu", "h100-sxm"}, {"nodes", 1}, {"gpus_per_node", 2}}},
                     {"deployment", {{"ep_size", 2}, {"max_batch_size", 8}}},
                     {"workload",
                      {{"arrival", {{"kind", "closed_loop"}, {"users", 8}}},
                       {"prompt_tokens", {{"kind", "fixed"}, {"tokens", 32}}},
                       {"output_tokens", {{"kind", "fixed"}, {"tokens", 8}}}}},
                     {"run", {{"seed", 1}, {"requests", 24}}}};
  const fs::path file = t.dir / "tiny.json";
  std::ofstream(file) << tiny.dump(2);
  const fs::path md = t.dir / "review.md";
  const Json p = plan_json(t, file.string(), "--simulate --batch-sizes 2,8 --markdown " + md.string());
  REQUIRE(p.contains("simulated"));
  const Json& r = p["simulated"]["report"];
  CHECK(r["requests"]["finished"] == 24);
  CHECK(r["latency"]["tpot"]["p99_s"].get<double>() >= r["latency"]["tpot"]["p50_s"].get<double>());
  REQUIRE(p["simulated"]["by_batch"].size() == 2);
  CHECK(p["simulated"]["by_batch"][0]["max_batch_size"] == 2);
  CHECK(p["simulated"]["by_batch"][1]["max_batch_size"] == 8);
  const std::string review = slurp(md);
  CHECK_THAT(review, Catch::Contains("All-to-All share") && Catch::Contains("target < 20%") &&
                         Catch::Contains("Throughput against batch size"));
}

TEST_CASE("plan on a bad scenario fails with the same JSON-path error as run") {
  const TmpDir t;
  const fs::path bad = t.dir / "bad.json";
  Json j = load_json_file(std::string(MOESIM_SOURCE_DIR) +
                          "/scenarios/reference/review_deepseek_v3_8xh100_int4.json");
  j["deployment"]["ep_sise"] = 8;
  std::ofstream(bad) << j.dump(2);
  const Result plan = run_moesim(t, "plan " + bad.string());
  const Result run = run_moesim(t, "run " + bad.string() + " --out " + (t.dir / "out").string());
  CHECK(plan.code == 2);
  CHECK(run.code == 2);
  CHECK_THAT(plan.err, Catch::Contains("deployment.ep_sise"));
  CHECK(plan.err == run.err);
}
