// `moesim trace-stats`: prefix-cache figures of a keyed trace (see sim/scenario/trace_stats.h).
#pragma once

#include <CLI/CLI.hpp>

namespace moesim {

void add_trace_stats_command(CLI::App& app);

}  // namespace moesim
