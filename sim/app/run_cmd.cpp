// `moesim run` and `moesim validate`. With --seeds N, run replicates the scenario over N seeds and prints
// the mean and 95% interval of each metric; with --capacity it searches the capacity at SLA.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "sim/app/commands.h"
#include "sim/app/metrics_table.h"
#include "sim/app/outputs.h"
#include "sim/app/point_result.h"
#include "sim/app/replications.h"
#include "sim/app/task_pool.h"
#include "sim/engine/check.h"
#include "sim/scenario/chrome_trace.h"
#include "sim/scenario/profile_io.h"
#include "sim/scenario/report_json.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/spec/memory_plan.h"

namespace moesim {

void write_text_file(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::cout << text << std::flush;
    if (!std::cout) throw InputError("-", "cannot write to standard output");
    return;
  }
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) throw InputError(path, "cannot create its folder (" + ec.message() + ")");
  std::ofstream f(p);
  f << text;
  f.close();  // a full disk shows only when the buffer is flushed
  if (f.fail()) {
    throw InputError(path,
                     "cannot write the file (does its folder exist, is it writable, is the disk full?)");
  }
}

std::filesystem::path default_output_dir(const std::string& prefix, const std::string& name) {
  const bool safe = !name.empty() && name.size() <= 100 && name.front() != '.' &&
                    std::all_of(name.begin(), name.end(), [](char c) {
                      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                             c == '.' || c == '_' || c == '-';
                    });
  if (!safe) {
    throw InputError("name", "\"" + printable(name.substr(0, 100)) +
                                 "\" cannot name the default output folder out/" + prefix +
                                 "<name>: use 1 to 100 letters, digits, '.', '_' or '-' (not starting with "
                                 "'.'), or give the output folder with --out");
  }
  return std::filesystem::path("out") / (prefix + name);
}

void prepare_output_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    throw InputError(dir.string(), "cannot create the output folder (" +
                                       (ec ? ec.message() : std::string("a file of that name exists")) +
                                       "); choose another with --out");
  }
  const std::filesystem::path probe = dir / ".moesim-write-probe";
  {
    std::ofstream f(probe);
    if (!(f << "probe")) {
      throw InputError(dir.string(), "the output folder is not writable; choose another with --out");
    }
  }
  std::filesystem::remove(probe, ec);
}

std::vector<std::string> effective_overrides(const ScenarioOptions& o) {
  std::vector<std::string> out = o.overrides;
  if (o.seed >= 0) out.push_back("run.seed=" + std::to_string(o.seed));
  return out;
}

namespace {

void print_window_capacity(const Replication& rep, double meets, double meets_s, int meets_runs, double fails,
                           const std::string& undecided, int runs);

// One search's interval, its undecided probes and what binds first as the load grows.
void print_capacity(const Replication& rep) {
  const Json& c = rep.report.at("capacity");
  std::string undecided;
  for (const Json& u : c.at("undecided_req_s")) {
    char b[32];
    std::snprintf(b, sizeof b, "%s%.3f", undecided.empty() ? "" : ", ", u.get<double>());
    undecided += b;
  }
  // The probes at the interval's ends: their run length and replications.
  const double meets = c.at("meets_req_s").get<double>();
  const double fails = c.at("fails_req_s").get<double>();
  double meets_s = 0;
  int meets_runs = 0, runs = 0;
  for (const Json& p : c.at("probe_log")) {
    runs += p.at("runs").get<int>();
    if (p.at("rate_req_s").get<double>() == meets) {
      meets_s = p.at("duration_s").get<double>();
      meets_runs = p.at("runs").get<int>();
    }
  }
  if (const auto l = rep.report.find("loadgen"); l != rep.report.end()) {
    // run.measure mlperf_server: one run per rate, judged by loadgen's verdict.
    std::printf(
        "  seed %llu: loadgen VALID at %.3f req/s over %.0f s of arrivals (completed %.1f tok/s, %.1f per "
        "GPU); "
        "INVALID at %.3f (%d probes, one run each)\n",
        static_cast<unsigned long long>(rep.seed), meets, meets_s, l->at("tokens_per_s").get<double>(),
        l->at("tokens_per_s").get<double>() / rep.report.at("gpus").get<double>(), fails,
        c.at("probes").get<int>());
  } else {
    print_window_capacity(rep, meets, meets_s, meets_runs, fails, undecided, runs);
  }
  if (!c.at("limited_by").get<std::string>().empty()) {
    std::printf("    limited by %s first as the load grows: %s\n",
                c.at("limited_by").get<std::string>().c_str(),
                c.at("limited_why").get<std::string>().c_str());
  }
}

// The interval of a search decided by replications over the steady window.
void print_window_capacity(const Replication& rep, double meets, double meets_s, int meets_runs, double fails,
                           const std::string& undecided, int runs) {
  const Json& c = rep.report.at("capacity");
  std::printf(
      "  seed %llu: at %.3f req/s a %.0f s run meets the SLA with 95%% probability (%d runs); at %.3f the "
      "long-run share over a limit exceeds the SLA's with 95%% confidence%s%s%s (%d probes, %d runs)\n",
      static_cast<unsigned long long>(rep.seed), meets, meets_s, meets_runs, fails,
      undecided.empty() ? "" : "; undecided at ", undecided.c_str(),
      undecided.empty() ? "" : " (the long-run capacity lies in between)", c.at("probes").get<int>(), runs);
}

// Under run.measure mlperf_server each seed's search is one loadgen verdict per rate, so the capacity and
// the figure MLPerf publishes at it (loadgen's completed tokens/s) vary with the draw of arrivals and
// lengths: their mean and 95% interval over the seeds, and the range the seeds span.
void print_loadgen_over_seeds(const PointResult& p) {
  std::vector<double> rates, per_gpu;
  for (const Replication& rep : p.replications) {
    rates.push_back(rep.capacity_req_s);
    per_gpu.push_back(rep.report.at("loadgen").at("tokens_per_s").get<double>() /
                      rep.report.at("gpus").get<double>());
  }
  const auto [rate_lo, rate_hi] = std::minmax_element(rates.begin(), rates.end());
  const auto [tok_lo, tok_hi] = std::minmax_element(per_gpu.begin(), per_gpu.end());
  std::printf("  %-36s %.3f to %.3f over %zu seed(s)\n", "capacity_req_s range", *rate_lo, *rate_hi,
              rates.size());
  std::printf("  %-36s %s (%.1f to %.1f; loadgen's completed tokens/s at each seed's capacity)\n",
              "loadgen_tok_s_per_gpu", format_interval("%.1f", mean_ci95(per_gpu), true).c_str(), *tok_lo,
              *tok_hi);
}

// Replications and/or the capacity search: a table of mean and interval per metric, replications.json.
void run_measured(const RunOptions& o, const ReplicatedScenario& rs, int seeds,
                  const std::filesystem::path& dir) {
  if (o.requests_csv || o.steps_csv || !o.trace.empty()) {
    throw InputError("--seeds/--capacity", "the per-request/step CSVs and the trace are for a single run");
  }
  PointSettings settings;
  settings.capacity = o.measure.capacity;
  settings.search.rel_tol = o.measure.capacity_tol;
  TaskPool pool(o.jobs);
  const std::vector<PointResult> results =
      run_points(pool, {rs.loaded.spec}, {seeds}, {rs.loaded.spec.name}, settings);
  if (!pool.is_output_rank()) return;
  const PointResult& p = results.front();
  throw_if_internal(results, {rs.loaded.spec.name});
  if (!p.ok()) throw InputError(o.file.empty() ? "run" : o.file, p.error());
  Json doc{{"scenario", rs.loaded.effective}};
  doc.update(point_json(p, true));
  write_text_file((dir / "replications.json").string(), doc.dump(2) + "\n");
  if (!o.quiet) {
    std::printf("%s: %d seed(s) from %llu%s\n", rs.loaded.spec.name.c_str(), seeds,
                static_cast<unsigned long long>(rs.loaded.spec.run.seed),
                o.measure.capacity ? ", metrics at the capacity at SLA" : "");
    if (o.measure.capacity) {
      std::printf("  %-36s %s\n", "capacity_req_s", format_interval("%.3f", p.capacity(), true).c_str());
      if (p.replications.front().report.contains("loadgen")) print_loadgen_over_seeds(p);
      for (const Replication& rep : p.replications) print_capacity(rep);
    }
    for (std::size_t i = 0; i < metric_columns().size(); ++i) {
      const MetricColumn& c = metric_columns()[i];
      std::printf("  %-36s %s\n", c.name.c_str(), format_interval(c.format, p.metric(i), c.interval).c_str());
    }
    if (seeds > 1) std::printf("(mean \u00b1 half width of the 95%% Student-t interval over the seeds)\n");
  }
  std::cout << "\nreplications: " << (dir / "replications.json").string() << "\n";
}

}  // namespace

void execute_run(const RunOptions& o) {
  const ReplicatedScenario rs = load_replicated_scenario(o.file, effective_overrides(o.scenario));
  const LoadedScenario& sc = rs.loaded;
  const std::filesystem::path dir =
      o.out_dir.empty() ? default_output_dir("", sc.spec.name) : std::filesystem::path(o.out_dir);
  prepare_output_dir(dir);
  const int seeds = o.measure.seeds > 0 ? o.measure.seeds : rs.seeds;
  if (seeds > 1 || o.measure.capacity) {
    run_measured(o, rs, seeds, dir);
    return;
  }
  CsvOutputs outputs(o.requests_csv ? dir / "requests.csv" : "", o.steps_csv ? dir / "steps.csv" : "");
  const auto gpu = make_gpu_cost_model(sc.spec.cluster.gpu);
  std::unique_ptr<ChromeTraceWriter> trace;
  if (!o.trace.empty()) trace = std::make_unique<ChromeTraceWriter>(o.trace, o.trace_limit_s);
  ObserverPair observers(outputs.active() ? &outputs : nullptr, trace.get());
  const int threads =
      o.jobs > 0 ? static_cast<int>(o.jobs) : static_cast<int>(std::thread::hardware_concurrency());
  const Report r = simulate(sc.spec, *gpu, outputs.active() || trace ? &observers : nullptr, threads);
  if (trace) trace->finish();  // closes the JSON, checks every write
  outputs.finish();
  write_text_file((dir / "report.json").string(), report_to_json(r, sc.effective).dump(2) + "\n");
  if (!o.quiet) std::cout << format_summary(r);
  std::cout << "\nreport: " << (dir / "report.json").string() << "\n";
}

void execute_validate(const ValidateOptions& o) {
  const std::string& file = o.file;
  const LoadedScenario sc = load_replicated_scenario(file, effective_overrides(o.scenario)).loaded;
  const auto gpu = make_gpu_cost_model(sc.spec.cluster.gpu);
  check_deployment_fits(sc.spec, *gpu);  // every pool, as run decides "fits"
  const MemoryPlan m = deployed_memory_plan(sc.spec, *gpu);
  const ScenarioSpec& s = sc.spec;
  std::printf("%s: OK\n", file.empty() ? "scenarios/default.json (built in)" : file.c_str());
  std::printf("  model %s: %.1fB total, %.1fB active parameters%s\n", s.model.name.c_str(),
              s.model.total_params() / 1e9, s.model.active_params() / 1e9,
              s.model.architecture_known ? "" : " (architecture ASSUMED)");
  if (s.disaggregated()) {
    std::printf("  cluster: %d x %d %s in %zu pools\n", s.cluster.nodes, s.cluster.gpus_per_node,
                s.cluster.gpu.name.c_str(), s.pools.size());
    const std::vector<MemoryPlan> plans = deployed_memory_plans(s, *gpu);
    for (std::size_t i = 0; i < s.pools.size(); ++i) {
      const PoolSpec& p = s.pools[i];
      std::printf(
          "  pool %zu (%s): %d instance(s) of EP%d (attention DP%d x TP%d) on GPUs %d-%d; weights %.1f GiB, "
          "KV pool %.1f GiB per GPU (%lld tokens per attention group)\n",
          i, to_string(p.role), p.instances, p.deployment.ep_size, p.deployment.attention_dp,
          p.deployment.attention_tp, p.first_gpu, p.first_gpu + p.gpus() - 1,
          plans[i].weights_per_gpu.total() / kGiB, plans[i].kv_pool_bytes_per_gpu / kGiB,
          static_cast<long long>(plans[i].kv_tokens_per_group));
    }
    return;
  }
  std::printf("  cluster: %d x %d %s, %d replica(s) of EP%d (attention DP%d x TP%d)\n", s.cluster.nodes,
              s.cluster.gpus_per_node, s.cluster.gpu.name.c_str(), s.replicas(), s.deployment.ep_size,
              s.deployment.attention_dp, s.deployment.attention_tp);
  std::printf("  memory per GPU: weights %.1f GiB, KV pool %.1f GiB (%lld tokens per attention group)\n",
              m.weights_per_gpu.total() / kGiB, m.kv_pool_bytes_per_gpu / kGiB,
              static_cast<long long>(m.kv_tokens_per_group));
}

}  // namespace moesim
