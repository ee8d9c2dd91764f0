#include "sim/app/cli_errors.h"

#include <string_view>

namespace moesim {

namespace {

constexpr std::string_view kVerbs = "run, validate, sweep, compare, plan, calibrate";

// The verb the user gave (the first parsed subcommand), or empty.
std::string verb_of(const CLI::App& app) {
  const auto subs = app.get_subcommands();
  return subs.empty() ? std::string() : subs.front()->get_name();
}

// CLI11 lists the unexpected words after the first ": ".
std::string extras_of(const std::string& what) {
  const auto colon = what.find(": ");
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

std::string lower_first(std::string s) {
  if (!s.empty() && s[0] >= 'A' && s[0] <= 'Z') s[0] = static_cast<char>(s[0] - 'A' + 'a');
  return s;
}

}  // namespace

std::string explain_cli_error(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  const std::string verb = verb_of(app);
  const std::string what = e.what();
  if (verb.empty()) {
    // No verb was recognised: either none was given or the first word is not one.
    std::string first;
    for (int i = 1; i < argc; ++i) {
      if (argv[i][0] != '-') {
        first = argv[i];
        break;
      }
    }
    if (!first.empty()) {
      return "command line: unknown verb \"" + first + "\" (known: " + std::string(kVerbs) +
             "); moesim --help lists them";
    }
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      return "command line: give a verb (" + std::string(kVerbs) +
             "), e.g. moesim run scenarios/tiny/tiny_poisson_ep4.json; moesim --help lists them";
    }
    return "command line: " + lower_first(what) + "; moesim --help lists the verbs and options";
  }
  const std::string help = "moesim " + verb + " --help lists its arguments";
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    const std::string takes = verb == "compare"     ? "scenario files"
                              : verb == "calibrate" ? "measurement files after --fit"
                                                    : "at most one scenario file";
    return verb + ": unexpected argument(s) " + extras_of(what) + ": " + verb + " takes " + takes +
           " and options that start with --; " + help;
  }
  return verb + ": " + lower_first(what) + "; " + help;
}

std::string describe_filesystem_error(const std::filesystem::filesystem_error& e) {
  const std::string path = e.path1().empty() ? std::string("(output)") : e.path1().string();
  return path + ": cannot create or write it (" + e.code().message() +
         "); choose a folder you can write to (e.g. --out)";
}

}  // namespace moesim
