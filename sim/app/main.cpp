// moesim: the command-line entry point. Turns bad input into one clear message and a non-zero exit.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <new>

#include "sim/app/calibrate_cmd.h"
#include "sim/app/cli_errors.h"
#include "sim/app/commands.h"
#include "sim/app/trace_stats_cmd.h"
#include "sim/engine/check.h"

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
  try {
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
