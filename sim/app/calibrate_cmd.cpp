#include "sim/app/calibrate_cmd.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "hwmodels/calibration_fit.h"
#include "sim/engine/check.h"
#include "sim/scenario/profile_io.h"

namespace moesim {

namespace {

struct CalibrateOptions {
  std::vector<std::string> fit_files;
  std::string harness;
  std::string out;
  std::string gpu;
  std::vector<std::string> leave_out;
  double anomaly_tolerance = 0.05;
  bool dry_run = false;
};

bool has_gpu() {
  return std::filesystem::exists("/dev/nvidia0") || std::filesystem::exists("/dev/nvidiactl");
}

std::vector<std::string> shape_sweeps(const std::vector<CalibrationPoint>& points) {
  std::vector<std::string> out;
  for (const auto& p : points) {
    const bool by_shape = p.op == CostOp::kGemm || p.op == CostOp::kExpertFfn;
    if (by_shape && std::find(out.begin(), out.end(), p.sweep) == out.end()) out.push_back(p.sweep);
  }
  return out;
}

// Runs the nvcc-built harness (hwmodels/cuda/calibrate_harness) and returns the CSV it wrote.
std::string run_harness(const std::string& harness) {
  const std::filesystem::path csv = std::filesystem::temp_directory_path() / "moesim_calibrate_kernels.csv";
  const std::string cmd = "\"" + harness + "\" --csv \"" + csv.string() + "\"";
  std::cout << "running " << cmd << "\n" << std::flush;
  if (std::system(cmd.c_str()) != 0) throw InputError("--harness " + harness, "the harness failed: " + cmd);
  return csv.string();
}

void calibrate(const CalibrateOptions& o) {
  std::vector<std::filesystem::path> files(o.fit_files.begin(), o.fit_files.end());
  if (!o.harness.empty()) {
    if (!has_gpu()) throw InputError("--harness", "needs a GPU and none was found (/dev/nvidia0)");
    files.emplace_back(run_harness(o.harness));
  }
  if (files.empty()) {
    throw InputError(
        "calibrate",
        has_gpu()
            ? "nothing to fit. On this GPU machine run hwmodels/cuda/run_on_device.sh (or "
              "`moesim calibrate --harness PATH`), then `moesim calibrate --fit FILE...`"
            : "no GPU here and no measurements given. Fit stored measurements with "
              "`moesim calibrate --fit FILE...` (e.g. ../shared/calibration/h200/*.json); time the kernels "
              "on a GPU machine with hwmodels/cuda/run_on_device.sh (see CALIBRATION.md)");
  }
  Measurements m = read_measurements(files);
  FitOptions opt;
  opt.prior_bytes_per_s = m.copy_bytes_per_s;
  opt.prior_flops_per_s = m.bf16_flops_per_s;
  opt.prior_rate_scale = m.rate_scale;
  opt.anomaly_tolerance = o.anomaly_tolerance;
  flag_anomalies(m.points, opt.anomaly_tolerance);

  GpuProfile profile;
  profile.gpu = !o.gpu.empty() ? o.gpu : o.out.empty() ? "gpu" : std::filesystem::path(o.out).stem().string();
  for (const auto& line : m.origin) profile.origin += (profile.origin.empty() ? "" : "\n") + line;
  profile.rate_scale = m.rate_scale;
  if (m.points.size() < 2) {
    throw InputError("--fit",
                     "the measurements hold " + std::to_string(m.points.size()) +
                         " timed point(s); a fit needs at least two per operation (see CALIBRATION.md)");
  }
  try {
    profile.fits = fit_all(m.points, opt);
  } catch (const std::invalid_argument& e) {
    // Too few usable points for one operation: the measurements, not the code, must change.
    throw InputError("--fit", std::string(e.what()) + "; give at least two points of each operation");
  }
  profile.points = m.points;

  std::cout << "Fitted parameters (t = fixed + (t_mem^p + t_compute^p)^(1/p)):\n";
  for (const auto& f : profile.fits) {
    const std::string shape = f.shape_a == 0 && f.shape_b == 0
                                  ? "all shapes"
                                  : std::to_string(f.shape_a) + "x" + std::to_string(f.shape_b);
    std::printf("  %-18s %-5s %-12s fixed %7.2f us  mem %7.0f GB/s  compute %6.0f TFLOP/s  p %5.2f\n",
                std::string(to_string(f.op)).c_str(), std::string(to_string(f.precision)).c_str(),
                shape.c_str(), f.params.fixed_s * 1e6, f.params.bytes_per_s * 1e-9,
                f.params.flops_per_s * 1e-12, f.params.sharpness);
  }
  std::cout << "\nResiduals (relative error per sweep; max excludes anomalies, shown in brackets):\n"
            << format_residuals(residual_report(profile, m.points));
  for (const auto& p : m.points) {
    if (!p.is_anomaly) continue;
    std::printf("  anomaly: %s %s measured %.2f us, model %.2f us\n", p.sweep.c_str(), p.label.c_str(),
                p.seconds * 1e6, predict_seconds(profile, p) * 1e6);
  }

  std::vector<std::string> held = o.leave_out;
  if (held.size() == 1 && held.front() == "all") held = shape_sweeps(m.points);
  if (!held.empty()) {
    std::vector<SweepResidual> rows;
    for (const auto& sweep : held) {
      try {
        rows.push_back(leave_one_out(m.points, sweep, opt));
      } catch (const std::invalid_argument& e) {
        throw InputError("--leave-out " + sweep, e.what());
      }
    }
    std::cout << "\nLeave-one-out (each sweep predicted by a fit without it):\n" << format_residuals(rows);
  }
  if (!o.out.empty() && !o.dry_run) {
    write_profile_file(o.out, profile);
    std::cout << "\nprofile: " << o.out << "\n";
  }
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cmd =
      app.add_subcommand("calibrate",
                         "Fit a GPU cost profile from measurements and print the residual report.\n"
                         "Example: moesim calibrate --fit ../shared/calibration/h200/*.json --out "
                         "hwmodels/profiles/h200-sxm.json "
                         "--leave-out all");
  cmd->add_option(
         "--fit", o->fit_files,
         "Measurement files: shared/calibration/<gpu>/*.json (platform, expert FFN, GEMM, attention) "
         "and/or the CSV written by hwmodels/cuda's harness")
      ->check(CLI::ExistingFile);
  cmd->add_option("--harness", o->harness,
                  "On a GPU machine: run this calibrate_harness binary and fit its CSV")
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", o->out, "Write the profile JSON here (e.g. hwmodels/profiles/h200-sxm.json)");
  cmd->add_option("--gpu", o->gpu, "GPU catalog name stored in the profile (default: the --out file name)");
  cmd->add_option(
      "--leave-out", o->leave_out,
      "Sweep to leave out of the fit and predict, e.g. \"gemm N=4096 K=7168\" (repeatable), or all");
  cmd->add_option("--anomaly-tolerance", o->anomaly_tolerance,
                  "Flag a point slower than a point with at least twice the work by more than this fraction")
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_flag("--dry-run", o->dry_run, "Fit and report, write nothing");
  cmd->callback([o] { calibrate(*o); });
}

}  // namespace moesim
