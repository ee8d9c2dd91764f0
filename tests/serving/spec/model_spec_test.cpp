// The attention projection GEMMs of a layer as engines launch them.
#include "sim/serving/spec/model_spec.h"

#include <catch2/catch.hpp>

using namespace moesim;

TEST_CASE("MLA's projections: fused q_a and kv_a, q_b, kv_b, o, adding up to the layer's parameters") {
  // DeepSeek-V3 config.json.
  ModelSpec m;
  m.hidden = 7168;
  m.attention = AttentionKind::kMla;
  m.num_heads = 128;
  m.q_lora_rank = 1536;
  m.kv_lora_rank = 512;
  m.qk_nope_head_dim = 128;
  m.qk_rope_head_dim = 64;
  m.v_head_dim = 128;
  const ProjectionGemms p = m.attention_projections();
  REQUIRE(p.count == 4);
  using S = ProjectionGemm::Split;
  // The N x K shapes DeepGEMM's README times for DeepSeek-V3: 2112 x 7168, 24576 x 1536, 32768 x 512,
  // 7168 x 16384.
  CHECK((p.gemms[0].n == 1536 + 512 + 64 && p.gemms[0].k == 7168 && p.gemms[0].split == S::kReplicated));
  CHECK((p.gemms[1].n == 128 * 192 && p.gemms[1].k == 1536 && p.gemms[1].split == S::kColumns));
  CHECK((p.gemms[2].n == 128 * 256 && p.gemms[2].k == 512 && p.gemms[2].split == S::kColumns));
  CHECK((p.gemms[3].n == 7168 && p.gemms[3].k == 128 * 128 && p.gemms[3].split == S::kRows));
  double params = 0;
  for (const ProjectionGemm& g : p.list()) params += double(g.n) * double(g.k);
  CHECK(params == m.attention_params_per_layer());
  // Without a query LoRA (DeepSeek-V2-Lite) q is one column-parallel GEMM and kv_a a replicated one.
  m.q_lora_rank = 0;
  const ProjectionGemms lite = m.attention_projections();
  REQUIRE(lite.count == 4);
  CHECK((lite.gemms[0].n == 128 * 192 && lite.gemms[0].k == 7168));
  CHECK((lite.gemms[1].n == 576 && lite.gemms[1].split == S::kReplicated));
  params = 0;
  for (const ProjectionGemm& g : lite.list()) params += double(g.n) * double(g.k);
  CHECK(params == m.attention_params_per_layer());
}

TEST_CASE("GQA's projections: fused QKV and O") {
  ModelSpec m;  // Mixtral-8x7B
  m.hidden = 4096;
  m.num_heads = 32;
  m.num_kv_heads = 8;
  m.head_dim = 128;
  const ProjectionGemms p = m.attention_projections();
  REQUIRE(p.count == 2);
  CHECK((p.gemms[0].n == 48 * 128 && p.gemms[0].k == 4096));
  CHECK((p.gemms[1].n == 4096 && p.gemms[1].k == 4096 && p.gemms[1].split == ProjectionGemm::Split::kRows));
  CHECK(double(p.gemms[0].n) * 4096 + 4096.0 * 4096 == m.attention_params_per_layer());
}
