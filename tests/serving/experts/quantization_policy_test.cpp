// Quantisation policy: precision by class and kind, bytes with scales, the quality proxy arithmetic.
#include "sim/serving/experts/quantization_policy.h"

#include <catch2/catch.hpp>

namespace moesim {

TEST_CASE("routed experts follow their hotness, the shared expert and router stay high precision") {
  const QuantizationSpec spec;
  CHECK(expert_precision(spec, ExpertKind::kRouted, Hotness::kHot) == Precision::kBF16);
  CHECK(expert_precision(spec, ExpertKind::kRouted, Hotness::kWarm) == Precision::kINT8);
  CHECK(expert_precision(spec, ExpertKind::kRouted, Hotness::kCold) == Precision::kINT4);
  CHECK(expert_precision(spec, ExpertKind::kShared, Hotness::kCold) == Precision::kBF16);
  CHECK(expert_precision(spec, ExpertKind::kRouter, Hotness::kCold) == Precision::kBF16);
  QuantizationSpec fp8 = spec;
  fp8.hot = Precision::kFP8;
  CHECK(expert_precision(fp8, ExpertKind::kRouted, Hotness::kHot) == Precision::kFP8);
}

TEST_CASE("a DeepSeek-V3 expert is 88 MB in BF16, 44 MB in FP8 and about a quarter plus scales in INT4") {
  const std::int64_t params = 3LL * 7168 * 2048;  // COMPONENT_FIGURES section 2: 44.0 M per routed expert
  const QuantizationSpec spec;
  CHECK(expert_copy_bytes(spec, params, Precision::kBF16) == 2 * params);
  CHECK(expert_copy_bytes(spec, params, Precision::kFP8) == params);
  // INT4: half a byte per weight plus one 2-byte scale per 128 weights.
  CHECK(expert_copy_bytes(spec, params, Precision::kINT4) == params / 2 + params / 128 * 2);
}

TEST_CASE("the quality proxy is the token-weighted mean of per-precision penalties") {
  QuantizationSpec spec;
  spec.quality_penalty[precision_index(Precision::kINT8)] = 0.002;
  spec.quality_penalty[precision_index(Precision::kINT4)] = 0.02;
  QualityProxy q;
  q.add(Precision::kBF16, 750);
  q.add(Precision::kINT8, 200);
  q.add(Precision::kINT4, 50);
  CHECK(q.share(Precision::kINT8) == Approx(0.2));
  CHECK(q.value(spec) == Approx(0.2 * 0.002 + 0.05 * 0.02));
  CHECK(QualityProxy{}.value(spec) == 0.0);
}

}  // namespace moesim
