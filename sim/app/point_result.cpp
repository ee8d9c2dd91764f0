#include "sim/app/point_result.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <new>

#include "hwmodels/roofline_cost_model.h"
#include "sim/app/metrics_table.h"
#include "sim/app/task_pool.h"
#include "sim/engine/check.h"
#include "sim/scenario/profile_io.h"
#include "sim/scenario/report_json.h"
#include "sim/serving/runtime/serving_simulation.h"

namespace moesim {

namespace {
// "internal error: what", once (InternalError's text already starts so).
std::string as_internal_error(const std::string& what) {
  constexpr std::string_view kPrefix = "internal error: ";
  return what.rfind(kPrefix, 0) == 0 ? what : std::string(kPrefix) + what;
}
const char* verdict_name(SlaVerdict v) {
  switch (v) {
    case SlaVerdict::kMeets:
      return "meets";
    case SlaVerdict::kFails:
      return "fails";
    case SlaVerdict::kUndecided:
      return "undecided";
  }
  return "undecided";
}

// Every probe of a capacity search, in the order run: what a review reads to see how the interval was
// decided (shares over each limit across the probe's replications).
Json probe_log_json(const std::vector<ProbeRecord>& probes) {
  auto share = [](const ShareEstimate& e) {
    return Json{{"mean", e.mean}, {"mean_lo95", e.mean_lo}, {"one_run_hi95", e.run_hi}};
  };
  Json out = Json::array();
  for (const ProbeRecord& p : probes) {
    out.push_back(Json{{"rate_req_s", p.rate_req_s},
                       {"verdict", verdict_name(p.verdict)},
                       {"runs", p.stats.runs},
                       {"duration_s", p.duration_s},
                       {"allowed_share", p.stats.allowed_share},
                       {"ttft_over_share", share(p.stats.ttft)},
                       {"tpot_over_share", share(p.stats.tpot)},
                       {"runs_dropping", p.stats.dropped},
                       {"runs_overloaded", p.stats.overloaded},
                       {"runs_in_transient", p.stats.transient}});
  }
  return out;
}
}  // namespace

Replication run_replication(ScenarioSpec spec, std::uint64_t seed, const PointSettings& settings) {
  Replication out;
  out.seed = seed;
  spec.run.seed = seed;
  try {
    const std::unique_ptr<GpuCostModel> gpu = settings.roofline
                                                  ? std::make_unique<RooflineCostModel>(spec.cluster.gpu)
                                                  : make_gpu_cost_model(spec.cluster.gpu);
    Report r;
    Json capacity;
    if (settings.capacity) {
      CapacityResult c = capacity_at_sla(spec, *gpu, settings.search);
      // The interval: a run of the probe length meets at holds (95% prediction), the long-run share fails at
      // fails (95% confidence); undecided probes between.
      capacity = Json{{"meets_req_s", c.bracket.holds_req_s},
                      {"fails_req_s", c.bracket.fails_req_s},
                      {"undecided_req_s", c.bracket.undecided},
                      {"probes", c.bracket.probes},
                      {"limited_by", c.limited_by},
                      {"limited_why", c.limited_why},
                      {"probe_log", probe_log_json(c.probes)}};
      out.capacity_req_s = c.bracket.holds_req_s;
      out.capacity_fails_req_s = c.bracket.fails_req_s;
      out.probes = c.bracket.probes;
      r = std::move(c.at_capacity);
    } else {
      r = simulate(spec, *gpu);
    }
    for (const MetricColumn& c : metric_columns()) out.metrics.push_back(c.value(r));
    out.report = report_to_json(r, Json());
    out.report.erase("scenario");
    if (settings.capacity) out.report["capacity"] = capacity;
  } catch (const InputError& e) {
    out.error = e.what();
  } catch (const std::bad_alloc&) {  // validate refuses every size beyond the machine: a bug
    out.error = "internal error: out of memory";
    out.internal = true;
  } catch (const std::exception& e) {  // an internal error must not take the other points down
    out.error = as_internal_error(e.what());
    out.internal = true;
  }
  return out;
}

namespace {
std::uint64_t bits(double x) { return std::bit_cast<std::uint64_t>(x); }
double from_bits(const Json& j) { return std::bit_cast<double>(j.get<std::uint64_t>()); }
}  // namespace

std::string encode_replication(const Replication& r) {
  Json metrics = Json::array();
  for (const double v : r.metrics) metrics.push_back(bits(v));
  return Json{{"seed", r.seed},
              {"metrics", metrics},
              {"capacity", bits(r.capacity_req_s)},
              {"capacity_fails", bits(r.capacity_fails_req_s)},
              {"probes", r.probes},
              {"report", r.report},
              {"error", r.error},
              {"internal", r.internal}}
      // Text that is not UTF-8 (quoted in an error) is replaced, never a throw in a worker thread.
      .dump(-1, ' ', false, Json::error_handler_t::replace);
}

Replication decode_replication(const std::string& text) {
  const Json j = Json::parse(text);
  Replication r;
  r.seed = j.at("seed").get<std::uint64_t>();
  for (const Json& v : j.at("metrics")) r.metrics.push_back(from_bits(v));
  r.capacity_req_s = from_bits(j.at("capacity"));
  r.capacity_fails_req_s = from_bits(j.at("capacity_fails"));
  r.probes = j.at("probes").get<int>();
  r.report = j.at("report");
  r.error = j.at("error").get<std::string>();
  r.internal = j.at("internal").get<bool>();
  return r;
}

bool PointResult::ok() const {
  if (replications.empty()) return false;
  for (const Replication& r : replications) {
    if (!r.error.empty()) return false;
  }
  return true;
}

std::string PointResult::error() const {
  for (const Replication& r : replications) {
    if (!r.error.empty()) {
      return replications.size() > 1 ? "seed " + std::to_string(r.seed) + ": " + r.error : r.error;
    }
  }
  return replications.empty() ? "not run" : "";
}

bool PointResult::internal_error() const {
  return std::any_of(replications.begin(), replications.end(),
                     [](const Replication& r) { return r.internal; });
}

void throw_if_internal(const std::vector<PointResult>& points, const std::vector<std::string>& labels) {
  for (std::size_t i = 0; i < points.size(); ++i) {
    for (const Replication& r : points[i].replications) {
      if (!r.internal) continue;
      constexpr std::string_view kPrefix = "internal error: ";
      const std::string what = r.error.rfind(kPrefix, 0) == 0 ? r.error.substr(kPrefix.size()) : r.error;
      throw InternalError(std::string(kPrefix) + labels.at(i) + " (seed " + std::to_string(r.seed) +
                          "): " + what + " (please report the scenario)");
    }
  }
}

MeanInterval PointResult::metric(std::size_t column) const {
  std::vector<double> xs;
  for (const Replication& r : replications) xs.push_back(r.metrics.at(column));
  return mean_ci95(xs);
}

MeanInterval PointResult::capacity() const {
  std::vector<double> xs;
  for (const Replication& r : replications) xs.push_back(r.capacity_req_s);
  return mean_ci95(xs);
}

MeanInterval PointResult::capacity_fails() const {
  std::vector<double> xs;
  for (const Replication& r : replications) xs.push_back(r.capacity_fails_req_s);
  return mean_ci95(xs);
}

bool PointResult::meets_sla(bool capacity_mode) const {
  if (!ok()) return false;
  for (const Replication& r : replications) {
    if (capacity_mode ? !(r.capacity_req_s > 0) : r.metrics.at(metric_index("sla_met")) != 1.0) return false;
  }
  return true;
}

}  // namespace moesim

namespace moesim {

std::vector<PointResult> run_points(TaskPool& pool, const std::vector<ScenarioSpec>& specs,
                                    const std::vector<int>& seeds, const std::vector<std::string>& labels,
                                    const PointSettings& settings) {
  struct Task {
    std::size_t point;
    int replication;
  };
  std::vector<Task> tasks;
  for (std::size_t p = 0; p < specs.size(); ++p) {
    for (int k = 0; k < seeds[p]; ++k) tasks.push_back(Task{p, k});
  }
  // Threads the tasks leave idle run a capacity probe's replications.
  PointSettings local = settings;
  local.search.threads = std::max(1, static_cast<int>(pool.jobs() / std::max<std::size_t>(1, tasks.size())));
  const std::vector<std::string> encoded = pool.run(
      tasks.size(),
      [&](std::size_t i) {
        const Task& t = tasks[i];
        const ScenarioSpec& spec = specs[t.point];
        const std::uint64_t seed = spec.run.seed + static_cast<std::uint64_t>(t.replication);
        try {
          return encode_replication(run_replication(spec, seed, local));
        } catch (const std::exception& e) {  // the pool's tasks must not throw: a bug, reported as one
          Replication failed;
          failed.seed = seed;
          failed.error = as_internal_error(e.what());
          failed.internal = true;
          return encode_replication(failed);
        }
      },
      [&](std::size_t i, const std::string& result) {
        const Task& t = tasks[i];
        std::string s = labels[t.point];
        if (seeds[t.point] > 1) s += " seed " + std::to_string(specs[t.point].run.seed + t.replication);
        const Replication r = decode_replication(result);
        if (!r.error.empty()) s += "  ERROR";
        if (!std::isnan(r.capacity_req_s)) {
          char buf[96];
          std::snprintf(buf, sizeof buf, "  capacity %.4g req/s (%d probes)", r.capacity_req_s, r.probes);
          s += buf;
        }
        return s;
      });
  if (!pool.is_output_rank()) return {};
  std::vector<PointResult> points(specs.size());
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    Replication r = decode_replication(encoded[i]);
    points[tasks[i].point].replications.push_back(std::move(r));
  }
  return points;
}

Json point_json(const PointResult& p, bool detailed) {
  if (!p.ok()) return Json{{"error", p.error()}};
  if (!detailed) return Json{{"report", p.replications.front().report}};
  auto number = [](double x) { return std::isfinite(x) ? Json(x) : Json(nullptr); };
  Json reps = Json::array();
  for (const Replication& r : p.replications) {
    Json j{{"seed", r.seed}};
    if (!std::isnan(r.capacity_req_s)) {
      j["capacity_req_s"] = number(r.capacity_req_s);
      j["capacity_fails_req_s"] = number(r.capacity_fails_req_s);
      j["probes"] = r.probes;
    }
    j["report"] = r.report;
    reps.push_back(std::move(j));
  }
  Json summary = Json::object();
  auto put = [&](const std::string& name, const MeanInterval& v) {
    summary[name] = Json{{"mean", number(v.mean)}, {"ci95", number(v.half_width_95)}, {"n", v.n}};
  };
  if (!std::isnan(p.replications.front().capacity_req_s)) put("capacity_req_s", p.capacity());
  for (std::size_t i = 0; i < metric_columns().size(); ++i) put(metric_columns()[i].name, p.metric(i));
  return Json{{"replications", reps}, {"summary", summary}};
}

}  // namespace moesim
