// A Chrome/Perfetto trace of a run (chrome://tracing, ui.perfetto.dev): one track per replica with each
// step and its parts (attention, dense FFN, dispatch, experts, combine, LM head; their sums over layers,
// laid out in that order inside the step), counters of running and waiting requests, and the autoscaling
// planner's weight loads, starts and drains.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include "sim/serving/runtime/serving_simulation.h"

namespace moesim {

class ChromeTraceWriter final : public SimulationObserver {
 public:
  // `limit_s`: stop writing steps that start later (0 = no limit), so long runs stay loadable.
  ChromeTraceWriter(const std::string& path, double limit_s);
  // Without finish() (an exception unwinding), the JSON is closed unchecked.
  ~ChromeTraceWriter() override;
  ChromeTraceWriter(const ChromeTraceWriter&) = delete;
  ChromeTraceWriter& operator=(const ChromeTraceWriter&) = delete;

  void on_step(const StepRecord& s) override;
  void on_request(const RequestRecord& r) override { (void)r; }
  // A scale-up's weight load and start, or a drain: an async span on the instance's process.
  void on_instance(const InstanceSpan& span) override;
  // Closes the JSON and the file; InputError naming the file when any write failed (a full disk).
  void finish();

 private:
  void event(const std::string& json);
  void name_track(int replica);
  std::ofstream out_;
  std::string path_;
  double limit_s_;
  bool first_ = true;
  bool finished_ = false;
  std::vector<bool> named_;  // replicas whose track has its name
};

// Forwards every callback to two observers (either may be null).
class ObserverPair final : public SimulationObserver {
 public:
  ObserverPair(SimulationObserver* a, SimulationObserver* b) : a_(a), b_(b) {}
  void on_step(const StepRecord& s) override {
    if (a_ != nullptr) a_->on_step(s);
    if (b_ != nullptr) b_->on_step(s);
  }
  void on_request(const RequestRecord& r) override {
    if (a_ != nullptr) a_->on_request(r);
    if (b_ != nullptr) b_->on_request(r);
  }
  void on_instance(const InstanceSpan& span) override {
    if (a_ != nullptr) a_->on_instance(span);
    if (b_ != nullptr) b_->on_instance(span);
  }

 private:
  SimulationObserver* a_;
  SimulationObserver* b_;
};

}  // namespace moesim
