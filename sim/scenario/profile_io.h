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

// Everything the fitter needs from a set of measurement files.
struct Measurements {
  std::vector<CalibrationPoint> points;
  std::vector<std::pair<Precision, double>> rate_scale;  // from measured GEMM ceilings (platform.json)
  double copy_bytes_per_s = 0;                           // device copy ceiling, read + write
  double bf16_flops_per_s = 0;                           // bf16 GEMM ceiling at 8192^3
  std::vector<std::string> origin;                       // one line per file read
};

// Adds one file, recognised by content: platform.json ("ceilings"), expert FFN sweeps ("shapes"), GEMM grid
// ("rows" of M, N, K), attention ("decode"/"prefill"), or a CSV from hwmodels/cuda's harness (header line
// starting "kernel,"). `file_name` is for messages.
void add_measurements(Measurements& m, std::string_view text, const std::string& file_name);
[[nodiscard]] Measurements read_measurements(const std::vector<std::filesystem::path>& files);

[[nodiscard]] GpuProfile parse_profile(std::string_view json_text, const std::string& file_name);
[[nodiscard]] std::string profile_to_json(const GpuProfile& profile);
[[nodiscard]] GpuProfile read_profile_file(const std::filesystem::path& file);
void write_profile_file(const std::filesystem::path& file, const GpuProfile& profile);

// The embedded profile "hwmodels/profiles/<gpu_name>.json"; the name is also tried lower-cased with spaces
// as dashes ("H200 SXM" -> "h200-sxm").
[[nodiscard]] std::optional<GpuProfile> find_profile(std::string_view gpu_name);

// ProfileCostModel when find_profile(gpu.name) has a profile (the roofline costs any operation the profile
// lacks), else RooflineCostModel. GpuCostModel::source() tells which.
[[nodiscard]] std::unique_ptr<GpuCostModel> make_gpu_cost_model(const GpuSpec& gpu);

}  // namespace moesim
