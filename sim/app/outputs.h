// Optional per-request and per-step CSV outputs of `moesim run`, streamed while the simulation runs.
#pragma once

#include <filesystem>
#include <fstream>

#include "sim/serving/runtime/serving_simulation.h"

namespace moesim {

class CsvOutputs final : public SimulationObserver {
 public:
  // An empty path disables that output.
  CsvOutputs(const std::filesystem::path& requests, const std::filesystem::path& steps);
  [[nodiscard]] bool active() const { return requests_.is_open() || steps_.is_open(); }
  void on_step(const StepRecord& s) override;
  void on_request(const RequestRecord& r) override;
  // Closes the files; InputError naming the first whose writes failed (a full disk).
  void finish();

 private:
  std::ofstream requests_;
  std::ofstream steps_;
  std::filesystem::path requests_path_;
  std::filesystem::path steps_path_;
};

}  // namespace moesim
