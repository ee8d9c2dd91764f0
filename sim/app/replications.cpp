#include "sim/app/replications.h"

#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <filesystem>
#include <limits>

#include "sim/engine/check.h"
#include "sim/scenario/catalog.h"
#include "sim/scenario/json_reader.h"

namespace moesim {

double student_t_quantile(double p, int dof) {
  MOESIM_CHECK(dof >= 1 && p > 0 && p < 1, "student_t_quantile: needs dof >= 1 and 0 < p < 1");
  return boost::math::quantile(boost::math::students_t_distribution<double>(dof), p);
}

MeanSd mean_sd(const std::vector<double>& samples) {
  MeanSd out;
  if (samples.empty()) return out;
  const auto n = static_cast<double>(samples.size());
  double sum = 0;
  for (const double x : samples) sum += x;
  out.mean = sum / n;
  if (samples.size() < 2) return out;
  double squares = 0;
  for (const double x : samples) squares += (x - out.mean) * (x - out.mean);
  out.sd = std::sqrt(squares / (n - 1));
  return out;
}

MeanInterval mean_ci95(const std::vector<double>& samples) {
  MeanInterval out;
  out.n = static_cast<int>(samples.size());
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  if (samples.empty()) return MeanInterval{kNaN, kNaN, 0};
  const MeanSd m = mean_sd(samples);
  out.mean = m.mean;
  if (out.n < 2 || !std::isfinite(out.mean)) {
    out.half_width_95 = kNaN;
    return out;
  }
  out.half_width_95 = student_t_quantile(0.975, out.n - 1) * m.sd / std::sqrt(static_cast<double>(out.n));
  return out;
}

ReplicatedScenario load_replicated_scenario(const std::string& path,
                                            const std::vector<std::string>& overrides) {
  return load_replicated_document(read_scenario_document(path), path, overrides);
}

ReplicatedScenario load_replicated_document(Json j, const std::string& path,
                                            const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) apply_override(j, o);
  const auto run = j.find("run");
  int seeds = 1;
  const bool has_seeds = run != j.end() && run->is_object() && run->contains("seeds");
  if (has_seeds) {
    const Json seeds_json = (*run)["seeds"];
    if (!seeds_json.is_number_integer() || seeds_json.get<std::int64_t>() < 1 ||
        seeds_json.get<std::int64_t>() > kMaxSeeds) {
      throw InputError(
          path.empty() ? "run.seeds" : path + ": run.seeds",
          "must be an integer from 1 to " + std::to_string(kMaxSeeds) + ", got " + seeds_json.dump());
    }
    seeds = seeds_json.get<int>();
    run->erase("seeds");
  }
  // The rest is the scenario loader's (overrides already applied): relative paths resolve next to the file.
  ReplicatedScenario out{load_scenario_document(std::move(j), path, {}), seeds};
  if (has_seeds) out.loaded.effective["run"]["seeds"] = out.seeds;
  return out;
}

}  // namespace moesim
