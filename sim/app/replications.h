// Replications of one scenario over seeds seed..seed+N-1 (--seeds N or the scenario key run.seeds) and the
// Student-t 95% confidence interval of their mean, which run, sweep and compare report for each metric.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/scenario/scenario_parser.h"

namespace moesim {

// The mean of n samples and the half width of its two-sided 95% interval, t_{0.975, n-1} * s / sqrt(n)
// with s the sample standard deviation (Student t: the replications are few and their spread unknown).
// half_width_95 is NaN when n < 2 (no interval from one sample); mean is NaN when n = 0.
struct MeanInterval {
  double mean = 0;
  double half_width_95 = 0;
  int n = 0;
};

// The mean of n samples and their sample standard deviation (n - 1 in the denominator; 0 when n < 2).
struct MeanSd {
  double mean = 0;
  double sd = 0;
};
MeanSd mean_sd(const std::vector<double>& samples);

// The p-quantile of Student's t distribution with `dof` degrees of freedom (Boost.Math).
double student_t_quantile(double p, int dof);
MeanInterval mean_ci95(const std::vector<double>& samples);

// A scenario and its replication count: run.seeds from the scenario (after overrides), default 1. The
// simulator's parser does not know run.seeds (replication is the app's business): it is read and removed
// here, then put back into the echoed scenario.
struct ReplicatedScenario {
  LoadedScenario loaded;
  int seeds = 1;
};
ReplicatedScenario load_replicated_scenario(const std::string& path,
                                            const std::vector<std::string>& overrides);
// The same from a document already read by read_scenario_document(path) (sweep and compare read each
// file once for all their points).
ReplicatedScenario load_replicated_document(Json j, const std::string& path,
                                            const std::vector<std::string>& overrides);

constexpr int kMaxSeeds = 10000;

}  // namespace moesim
