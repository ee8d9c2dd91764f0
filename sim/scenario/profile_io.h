// JSON edge of calibration: reads measurement files (the vendor-library sweeps in shared/calibration/<gpu>/
// and the CSV our CUDA harness writes), reads and writes GPU profiles (hwmodels/profiles/<gpu>.json), and
// chooses a GPU's cost model: its embedded profile when one exists, else the datasheet roofline.
// Bad input throws ProfileError naming the file and the JSON path (or CSV line).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hwmodels/gpu_cost_model.h"
#include "hwmodels/gpu_spec.h"
#include "hwmodels/layer_kernels.h"
#include "hwmodels/profile_cost_model.h"
#include "sim/engine/check.h"

namespace moesim {

// Bad profile or measurement input: an InputError, so the CLI reports it like any other bad input.
class ProfileError : public InputError {
 public:
  explicit ProfileError(const std::string& what) : InputError("", what) {}
};

// Compiled-in data files (sim/scenario/embed.cmake); keys are paths relative to the repo root.
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_files();

// One whole-model step measured (model_step_<model>.json): checks how kernel costs compose.
struct StepMeasurement {
  std::string label;  // e.g. "decode uniform B=4 L=512"
  StepCase step;
  double seconds = 0;
};

// One layer timed op by op (hwmodels/cuda/layer_ops_sweep.py, layer_ops_<model>.json): compared with the
// composition (sim/app/step_analysis.h), not fitted.
struct LayerOpPoint {
  std::int64_t batch = 0;
  std::int64_t context = 0;
  std::string op;  // the script's op name (rms_norm_fused, sdpa, grouped_up, ...)
  double seconds = 0;
  int kernels = 0;  // kernels, memsets and copies one call launches
};
struct GroupedByTouched {
  std::int64_t batch = 0;
  int touched = 0;
  double seconds = 0;
};
struct LayerOps {
  GqaMoeShape model;  // hidden, heads, experts, top_k, expert_inter (layers and vocab 0)
  std::vector<LayerOpPoint> ops;
  std::vector<GroupedByTouched> grouped;
};

// Everything the fitter needs from a set of measurement files.
struct Measurements {
  std::vector<CalibrationPoint> points;
  std::vector<std::pair<Precision, double>> rate_scale;  // from measured GEMM ceilings (platform.json)
  double copy_bytes_per_s = 0;                           // device copy ceiling, read + write
  double bf16_flops_per_s = 0;                           // bf16 GEMM ceiling at 8192^3
  std::vector<std::string> origin;                       // one line per file read
  // Whole-model steps (at most one model_step file): the model and its steps, not fitted points.
  GqaMoeShape step_model;
  std::string step_model_name;
  double step_l2_bytes = 0;   // L2 of the GPU the steps ran on (its meta)
  std::int64_t step_sms = 0;  // its SM count (meta.sm_count; 0 if absent)
  double graph_launch_s = 0;  // a tiny kernel replayed in a CUDA graph (platform.json launch), 0 if absent
  std::vector<StepMeasurement> steps;
  LayerOps layer_ops;  // at most one layer_ops file
};

// Adds one file, recognised by content: platform.json ("ceilings"), expert FFN sweeps ("shapes", BF16 or
// FP8 by their weight bytes), GEMM grid ("rows" of M, N, K), attention ("decode"/"prefill"), an MoE layer
// timed grouped and looped ("cases" with per-expert "counts"), permute/unpermute ("cases" with
// "dispatch_ms"), whole-model steps ("config" plus "decode"/"prefill" steps), one layer op by op ("config"
// plus "ops" and "grouped_by_touched"), or a CSV from
// hwmodels/cuda's harness (header line starting "kernel,"). `file_name` is for messages.
void add_measurements(Measurements& m, std::string_view text, const std::string& file_name);
[[nodiscard]] Measurements read_measurements(const std::vector<std::filesystem::path>& files);

[[nodiscard]] GpuProfile parse_profile(std::string_view json_text, const std::string& file_name);
[[nodiscard]] std::string profile_to_json(const GpuProfile& profile);
[[nodiscard]] GpuProfile read_profile_file(const std::filesystem::path& file);
void write_profile_file(const std::filesystem::path& file, const GpuProfile& profile);

// The embedded profile "hwmodels/profiles/<gpu_name>.json"; the name is also tried lower-cased with spaces
// as dashes ("H200 SXM" -> "h200-sxm").
[[nodiscard]] std::optional<GpuProfile> find_profile(std::string_view gpu_name);

// A profile for `target` derived from the profile of `reference` (the GPU it was fitted on): every
// memory-bound term scaled by the HBM bandwidth ratio, every compute-bound term by the dense tensor-core
// peak ratio of its format (datasheets, scenarios/catalog/gpus.json), fixed costs and sharpness kept.
// For another Hopper this is the same kernels on a chip with other ceilings; for Blackwell it applies
// the efficiencies the reference fit shows against its own datasheet to the new datasheet.
[[nodiscard]] GpuProfile derive_profile(const GpuProfile& reference, const GpuSpec& reference_spec,
                                        const GpuSpec& target);

// ProfileCostModel when find_profile(gpu.name) has a profile; else, for a GPU whose catalog entry names a
// `profile_basis` (the H200 for Hopper and Blackwell GPUs), that profile derived by derive_profile; else
// RooflineCostModel. GpuCostModel::source() tells which.
[[nodiscard]] std::unique_ptr<GpuCostModel> make_gpu_cost_model(const GpuSpec& gpu);

// The small kernels' fit (kSmallKernel, BF16): the fixed cost measured for a tiny kernel in a CUDA graph
// (platform.json, `m.graph_launch_s`) and the row gather's bandwidth; none without that measurement.
[[nodiscard]] std::optional<OperationFit> small_kernel_fit(const GpuProfile& profile, const Measurements& m);

}  // namespace moesim
