// KV bytes per token and per transfer from the model shape, against hand computation for DeepSeek-V3
// (MLA) and Mixtral 8x7B (GQA) from their catalog shapes.
#include "sim/serving/kv_transfer.h"

#include <catch2/catch.hpp>

#include "sim/scenario/catalog.h"
#include "sim/scenario/scenario_parser.h"

namespace moesim {
namespace {

ModelSpec catalog_model(const std::string& name) {
  const Json j = resolve_entry(Json(name), "scenarios/catalog/models.json", "model");
  JsonReader r(j, "model");
  return parse_model(r);
}

}  // namespace

TEST_CASE("DeepSeek-V3 keeps (512 + 64) latent elements per layer and token: 70,272 bytes in BF16") {
  const ModelSpec m = catalog_model("deepseek-v3");
  // config_671B.json: kv_lora_rank 512, qk_rope_head_dim 64, 61 layers.
  CHECK(m.kv_bytes_per_token(Precision::kBF16) == (512.0 + 64.0) * 61 * 2);
  CHECK(m.kv_bytes_per_token(Precision::kBF16) == 70272.0);
  CHECK(m.kv_bytes_per_token(Precision::kFP8) == 35136.0);
  const KvTransferSize t = kv_transfer_size(m, Precision::kBF16, 4096, 4);
  CHECK(t.bytes == 70272.0 * 4096);
  CHECK(t.bytes_per_dest_gpu == t.bytes);  // the latent is replicated on every TP rank
  CHECK(t.wire_bytes == 4 * t.bytes);
}

TEST_CASE("Mixtral 8x7B keeps K and V of 8 KV heads of 128 per layer and token: 131,072 bytes in BF16") {
  const ModelSpec m = catalog_model("mixtral-8x7b");
  CHECK(m.kv_bytes_per_token(Precision::kBF16) == 2.0 * 8 * 128 * 32 * 2);
  CHECK(m.kv_bytes_per_token(Precision::kBF16) == 131072.0);
  const KvTransferSize one = kv_transfer_size(m, Precision::kBF16, 1000, 1);
  CHECK(one.bytes == 131072.0 * 1000);
  CHECK(one.wire_bytes == one.bytes);
  // TP 4: two KV heads per GPU, a quarter each, nothing duplicated.
  const KvTransferSize tp4 = kv_transfer_size(m, Precision::kBF16, 1000, 4);
  CHECK(tp4.bytes_per_dest_gpu == one.bytes / 4);
  CHECK(tp4.wire_bytes == one.bytes);
  // TP 16 over 8 heads: each GPU still needs a whole head, so the heads are sent twice.
  const KvTransferSize tp16 = kv_transfer_size(m, Precision::kBF16, 1000, 16);
  CHECK(tp16.bytes_per_dest_gpu == one.bytes / 8);
  CHECK(tp16.wire_bytes == 2 * one.bytes);
}

}  // namespace moesim
