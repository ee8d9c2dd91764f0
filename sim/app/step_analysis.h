// VALIDATION.md's analysis of the whole-model steps' residual (model_step_<model>.json against the
// pytorch_graph composition, hwmodels/layer_kernels.h): where it lies by part, batch, context and routing
// law, and what each named mechanism could carry of it, each figure computed from the measurements.
#pragma once

#include <string>

#include "hwmodels/profile_cost_model.h"
#include "sim/scenario/profile_io.h"

namespace moesim {

// The calibrated profile's own cost model, with no catalog GPU behind it: what the whole-model steps and the
// layer ops are composed with.
[[nodiscard]] ProfileCostModel calibrated_model(const GpuProfile& profile);

// The section "What the fitted constant stood for" (empty without a step file, a grouped fit or
// platform.json's launch measurement).
[[nodiscard]] std::string step_residual_analysis(const GpuProfile& profile, const Measurements& m);

// "One layer op by op": a layer_ops file (hwmodels/cuda/layer_ops_sweep.py) against the composition: the
// small ops' kernels and time against the pytorch_graph profile's, SDPA against the attention fit, and
// the grouped experts at each touched count against the grouped launches. Empty without such a file.
[[nodiscard]] std::string layer_ops_report(const GpuProfile& profile, const Measurements& m);

}  // namespace moesim
