// `moesim calibrate`: fits a GPU profile (hwmodels/profiles/<gpu>.json) from stored measurements, or from
// a fresh run of the CUDA timing harness on a GPU machine, and prints the residual report.
#pragma once

#include <CLI/CLI.hpp>

namespace moesim {

void add_calibrate_command(CLI::App& app);

}  // namespace moesim
