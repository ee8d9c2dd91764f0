// moesim: the command-line entry point. Turns bad input into one clear message and a non-zero exit.
#include <CLI/CLI.hpp>
#include <iostream>

#include "sim/app/calibrate_cmd.h"
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
      "Every verb takes --set path.to.key=value to override any scenario value. See README.md.\n",
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
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a bad command line is bad input like any other (exit 2).
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const moesim::InputError& e) {
    std::cerr << "moesim: error: " << e.what() << "\n";
    return 2;
  } catch (const moesim::InternalError& e) {
    std::cerr << "moesim: " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "moesim: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
