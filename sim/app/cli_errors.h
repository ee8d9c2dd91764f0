// Command-line and file-system failures turned into the house style: one line that names where the problem
// is and says what to do (instead of CLI11's generic texts or a raw std::filesystem message).
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>

namespace moesim {

// The message for a CLI11 parse error (not --help/--version), without the "moesim: error: " prefix.
std::string explain_cli_error(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv);

// "<path>: cannot create or write (<reason>); ..." for a std::filesystem failure.
std::string describe_filesystem_error(const std::filesystem::filesystem_error& e);

}  // namespace moesim
