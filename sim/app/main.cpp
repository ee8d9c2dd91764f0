// moesim: the command line, all of it: every verb, its options, defaults, validators and help texts (CLI11),
// and the exit codes. This is the only file that includes CLI11 (an expensive header); each verb's work is a
// function of a plain options struct (sim/app/commands.h). Bad input is one clear message and exit 2.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <string_view>

#include "sim/app/commands.h"
#include "sim/app/replications.h"
#include "sim/engine/check.h"
#include "sim/scenario/json_reader.h"

namespace moesim {

namespace {

// A number no smaller than `lo`, refused with a message that gives an example (CLI11's own range checks
// print their upper bound, a 300-digit number).
CLI::Validator number_at_least(double lo, const std::string& example) {
  return CLI::Validator(
      [lo, example](std::string& v) -> std::string {
        double x = 0;
        std::size_t used = 0;
        try {
          x = std::stod(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != v.size() || !(x >= lo)) {
          std::ostringstream os;
          os << "\"" << v << "\" is not a number >= " << lo << ", e.g. " << example;
          return os.str();
        }
        return "";
      },
      "NUMBER");
}

// A number in [lo, hi] (NaN is not: CLI11's Range lets it through), refused with an example.
CLI::Validator number_between(double lo, double hi, const std::string& example) {
  return CLI::Validator(
      [lo, hi, example](std::string& v) -> std::string {
        double x = 0;
        std::size_t used = 0;
        try {
          x = std::stod(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != v.size() || !(x >= lo && x <= hi)) {
          std::ostringstream os;
          os << "\"" << v << "\" is not a number in [" << lo << ", " << hi << "], e.g. " << example;
          return os.str();
        }
        return "";
      },
      "NUMBER");
}

// The options every scenario verb shares, then each verb (main registers them in --help order).
void add_scenario_options(CLI::App& cmd, ScenarioOptions& o) {
  cmd.add_option(
      "--set", o.overrides,
      "Override a scenario value: path.to.key=value (repeatable), e.g. --set deployment.ep_size=16");
  // The same range as run.seed in a scenario (an exact JSON integer).
  const CLI::Validator seed_range(
      [](std::string& v) -> std::string {
        long long x = 0;
        std::size_t used = 0;
        try {
          x = std::stoll(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != v.size() || x < 0 || x > (1LL << 53))
          return "\"" + v + "\" is not a seed: give an integer in [0, 2^53], e.g. --seed 7";
        return "";
      },
      "SEED");
  cmd.add_option("--seed", o.seed, "Random seed (overrides run.seed)")->check(seed_range);
}

void add_measure_options(CLI::App& cmd, MeasureOptions& o) {
  cmd.add_option("--seeds", o.seeds,
                 "Replications: run seeds seed..seed+N-1 and report the mean and 95% interval of each metric "
                 "(default: the scenario's run.seeds, else 1)")
      ->check(CLI::Range(1, kMaxSeeds));
  cmd.add_flag(
      "--capacity", o.capacity,
      "Find the highest arrival rate (workload.arrival.rate_per_s, Poisson or gamma) that meets the "
      "SLA, by bracketing and bisection; report the metrics at that rate (under run.measure "
      "mlperf_server: each rate is one run judged by loadgen's verdict, report.json loadgen; with --seeds N "
      "one search per seed, and the capacity and loadgen's tokens/s per GPU over the seeds)");
  cmd.add_option(
         "--capacity-tol", o.capacity_tol,
         "Capacity search: stop when the bracket is narrower than this share of the rate (default 0.02)")
      ->check(number_between(1e-4, 1.0, "--capacity-tol 0.02"));
}

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Simulate one scenario and print its serving report");
  cmd->add_option("scenario", o->file, "Scenario JSON (default: the built-in scenarios/default.json)");
  add_scenario_options(*cmd, o->scenario);
  add_measure_options(*cmd, o->measure);
  cmd->add_option(
      "-j,--jobs", o->jobs,
      "Threads: replicas' step plans in parallel in one run, replications with --seeds in parallel "
      "(default: all cores; the report is the same for any value)");
  cmd->add_option("--out", o->out_dir,
                  "Output folder for report.json and CSVs (default: out/<scenario name>)");
  cmd->add_flag("--requests-csv", o->requests_csv, "Also write requests.csv (one row per request)");
  cmd->add_flag("--steps-csv", o->steps_csv, "Also write steps.csv (one row per replica step)");
  cmd->add_option(
      "--trace", o->trace,
      "Write a Chrome/Perfetto timeline of the steps (open in ui.perfetto.dev or chrome://tracing)");
  cmd->add_option("--trace-limit-s", o->trace_limit_s,
                  "Only trace steps that start in the first N simulated s (0 = all)")
      ->check(number_at_least(0.0, "--trace-limit-s 60"));
  cmd->add_flag("-q,--quiet", o->quiet, "Do not print the summary");
  cmd->callback([o] { execute_run(*o); });
}

void add_validate_command(CLI::App& app) {
  auto o = std::make_shared<ValidateOptions>();
  CLI::App* cmd =
      app.add_subcommand("validate", "Check a scenario (keys, types, ranges, memory fit) without running it");
  cmd->add_option("scenario", o->file, "Scenario JSON (default: the built-in default)");
  add_scenario_options(*cmd, o->scenario);
  cmd->callback([o] { execute_validate(*o); });
}

void add_sweep_command(CLI::App& app) {
  auto o = std::make_shared<SweepOptions>();
  CLI::App* cmd = app.add_subcommand(
      "sweep",
      "Run a grid of scenarios: each --set key=v1,v2,... is one axis (the grid is their product). Writes "
      "sweep.csv and sweep.json; a point that does not fit is reported as a row with its error. Under "
      "`mpirun -np N` the points (and seeds) are spread over the ranks; the outputs are the same");
  cmd->add_option("scenario", o->file, "Scenario JSON (default: the built-in default)");
  add_scenario_options(*cmd, o->scenario);
  add_measure_options(*cmd, o->measure);
  cmd->add_option("--out", o->out_dir, "Output folder (default: out/sweep-<scenario name>)");
  cmd->add_option("-j,--jobs", o->jobs, "Parallel simulations per process (default: all cores)");
  cmd->callback([o] { execute_sweep(*o); });
}

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Capacity review without simulation: memory by precision, fit and nodes, KV vs concurrency, "
      "throughput estimate, topology advice (--simulate adds measured latency and SLA results)");
  cmd->add_option("scenario", o->file, "Scenario JSON (default: the built-in scenarios/default.json)");
  add_scenario_options(*cmd, o->scenario);
  cmd->add_option("--context", o->context,
                  "Tokens per sequence for KV sizing (default: workload prompt mean + output mean, or 4096)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{100000000}));
  cmd->add_option("--concurrency", o->concurrency,
                  "Concurrent sequences in the cluster (default: max_batch_size x attention groups)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1000000000}));
  cmd->add_option("--json", o->json_file, "Write the plan as JSON to FILE ('-' for stdout, then no table)");
  cmd->add_option("--markdown", o->markdown_file, "Write the capacity-review document (markdown) to FILE");
  cmd->add_flag("--simulate", o->simulate, "Also run the simulation and add measured results to the review");
  cmd->add_option("--batch-sizes", o->batch_sizes,
                  "With --simulate: max_batch_size values for throughput vs batch size, e.g. 8,32,128")
      ->delimiter(',')
      ->check(number_at_least(1.0, "--batch-sizes 8,32,128"));
  cmd->add_flag("-q,--quiet", o->quiet, "Do not print the tables");
  cmd->callback([o] { execute_plan(*o); });
}

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
      ->check(number_between(0.0, 10.0, "--anomaly-tolerance 0.05"));
  cmd->add_option(
      "--validate", o->validate,
      "Write the validation report (Markdown: every sweep, leave-one-out, whole-model steps) here, "
      "e.g. VALIDATION.md");
  cmd->add_flag("--dry-run", o->dry_run, "Fit and report, write nothing");
  cmd->callback([o] { execute_calibrate(*o); });
}

void add_compare_command(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compare",
      "Simulate several scenarios and show their key metrics side by side, the best of each row marked. "
      "Columns: each scenario file, times the product of the --set lists (--set cluster.nodes=1,2,4 makes "
      "three "
      "columns; a --set with one value applies to all). Writes compare.json and compare.csv");
  cmd->add_option("scenarios", o->files, "Scenario JSON files (default: the built-in default)");
  add_scenario_options(*cmd, o->scenario);
  add_measure_options(*cmd, o->measure);
  cmd->add_option("--out", o->out_dir, "Output folder (default: out/compare-<first scenario name>)");
  cmd->add_option("--json", o->json_file, "Also write the comparison JSON to this file");
  cmd->add_option("-j,--jobs", o->jobs, "Parallel simulations (default: all cores)");
  cmd->add_flag("--roofline", o->roofline,
                "Cost every column with the datasheet roofline, even where a calibrated GPU profile exists");
  cmd->callback([o] { execute_compare(*o); });
}

void add_trace_stats_command(CLI::App& app) {
  auto o = std::make_shared<TraceStatsOptions>();
  CLI::App* cmd = app.add_subcommand(
      "trace-stats",
      "Prefix-cache figures of a trace with block ids (Mooncake hash_ids): ideal hit rate with an infinite "
      "cache and the hit rate of LRU caches of the given sizes, in blocks and tokens");
  cmd->add_option("trace", o->file, "Trace file (JSON Lines with hash_ids)")->required();
  cmd->add_option("--format", o->format, "Trace format (mooncake_jsonl)");
  cmd->add_option("--cache-blocks", o->cache_blocks, "LRU cache sizes in the trace's blocks, e.g. 1000,10000")
      ->delimiter(',');
  cmd->add_option("--json", o->json_file,
                  "Write the figures as JSON to FILE ('-' for stdout, then no table)");
  cmd->callback([o] { execute_trace_stats(*o); });
}

void add_search_command(CLI::App& app) {
  auto o = std::make_shared<SearchCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "search",
      "Search the deployments of a model on a GPU budget under an SLA: enumerate the legal ones, cost them "
      "with the static step model, verify the static Pareto front (tokens/s per GPU against tokens/s per "
      "user) by capacity searches in simulation. Writes search.csv, search.json and front/*.json; resumes "
      "from its output folder");
  cmd->add_option("spec", o->file, "Search SPEC JSON (e.g. scenarios/search/dsv3_h200_16_64.json)")
      ->required();
  cmd->add_option("--seed", o->seed, "Random seed (overrides the SPEC's run.seed)")
      ->check(CLI::Range(0LL, 1LL << 53));
  cmd->add_option("--out", o->out_dir, "Output folder, also the resume cache (default: out/search-<name>)");
  cmd->add_option("-j,--jobs", o->jobs, "Parallel simulations (default: all cores)");
  cmd->add_flag("-q,--quiet", o->quiet,
                "Only one progress line per verified point on stderr (no static-pass or round lines)");
  cmd->callback([o] { execute_search(*o); });
}

// Every argument may be echoed in an output (a file name in compare.json, a label in sweep.json): it must be
// UTF-8. A --set value is checked where it is read, with its JSON path.
void check_arguments_utf8(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool set_value = std::string_view(argv[i - 1]) == "--set" || arg.rfind("--set=", 0) == 0;
    if (set_value || is_valid_utf8(arg)) continue;
    throw InputError("command line", "argument " + std::to_string(i) + " (\"" + printable(arg) +
                                         "\") is not valid UTF-8; file names and values must be UTF-8 text");
  }
}

// Command-line and file-system failures turned into the house style: one line that names where the problem
// is and says what to do (instead of CLI11's generic texts or a raw std::filesystem message).
constexpr std::string_view kVerbs = "run, validate, sweep, compare, plan, calibrate, trace-stats, search";

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

// The message for a CLI11 parse error (not --help/--version), without the "moesim: error: " prefix.
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
                              : verb == "search"    ? "one SPEC file"
                                                    : "at most one scenario file";
    return verb + ": unexpected argument(s) " + extras_of(what) + ": " + verb + " takes " + takes +
           " and options that start with --; " + help;
  }
  return verb + ": " + lower_first(what) + "; " + help;
}

// "<path>: cannot create or write (<reason>); ..." for a std::filesystem failure.
std::string describe_filesystem_error(const std::filesystem::filesystem_error& e) {
  const std::string path = e.path1().empty() ? std::string("(output)") : e.path1().string();
  return path + ": cannot create or write it (" + e.code().message() +
         "); choose a folder you can write to (e.g. --out)";
}

}  // namespace

}  // namespace moesim

int main(int argc, char** argv) {
  CLI::App app{
      "moesim: a discrete-event simulator of Mixture-of-Experts LLM serving clusters.\n"
      "Describe a deployment in one scenario JSON (model, cluster, deployment, workload, SLA, run) and get\n"
      "throughput, latency percentiles, All-to-All share, memory and expert load.\n\n"
      "Examples:\n"
      "  moesim run                                   # the default scenario (DeepSeek-V3 FP8 on 8xH200, "
      "EP8)\n"
      "  moesim run scenarios/tiny/tiny_model_closed_loop.json --set workload.arrival.users=8 --seed 3\n"
      "  moesim validate my.json\n"
      "  moesim sweep my.json --set deployment.max_batch_size=8,16,32,64,128,256\n"
      "  moesim compare scenarios/reference/topology_dsv3_1x8xh200_ep8.json "
      "scenarios/reference/topology_dsv3_2x8xh100_ep16.json\n"
      "  moesim plan scenarios/reference/review_deepseek_v3_8xh100.json --markdown review.md\n"
      "The scenario verbs (run, validate, sweep, compare, plan) take --set path.to.key=value to override "
      "any\n"
      "scenario value; calibrate takes measurements. See README.md.\n",
      "moesim"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moesim 0.1.0");
  moesim::add_run_command(app);
  moesim::add_validate_command(app);
  moesim::add_sweep_command(app);
  moesim::add_plan_command(app);
  moesim::add_calibrate_command(app);
  moesim::add_compare_command(app);
  moesim::add_trace_stats_command(app);
  moesim::add_search_command(app);
  try {
    moesim::check_arguments_utf8(argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    // A bad command line is bad input like any other: one message that says what to do, exit 2.
    std::cerr << "moesim: error: " << moesim::explain_cli_error(app, e, argc, argv) << "\n";
    return 2;
  } catch (const moesim::InputError& e) {
    std::cerr << "moesim: error: " << e.what() << "\n";
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // A folder or file that cannot be created or written: the path names what to change.
    std::cerr << "moesim: error: " << moesim::describe_filesystem_error(e) << "\n";
    return 2;
  } catch (const moesim::InternalError& e) {
    std::cerr << "moesim: " << e.what() << "\n";
    return 3;
  } catch (const std::bad_alloc&) {
    // validate refuses every size that would allocate beyond the machine; reaching this is a bug.
    std::cerr << "moesim: internal error: out of memory (please report the scenario)\n";
    return 3;
  } catch (const std::exception& e) {
    // Input errors are InputError by construction: anything else escaping is a bug, labelled as such.
    std::cerr << "moesim: internal error: " << e.what() << " (please report the scenario)\n";
    return 3;
  } catch (...) {
    std::cerr << "moesim: internal error: unknown exception (please report the scenario)\n";
    return 3;
  }
  return 0;
}
