#include "sim/scenario/chrome_trace.h"

#include "sim/engine/check.h"
#include "sim/scenario/json_reader.h"

namespace moesim {

ChromeTraceWriter::ChromeTraceWriter(const std::string& path, double limit_s)
    : out_(path), path_(path), limit_s_(limit_s) {
  if (!out_) throw InputError(path, "cannot write the trace file");
  out_ << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
}

ChromeTraceWriter::~ChromeTraceWriter() {
  if (!finished_) out_ << "\n]}\n";
}

void ChromeTraceWriter::finish() {
  finished_ = true;
  out_ << "\n]}\n";
  out_.close();
  if (out_.fail()) throw InputError(path_, "cannot write the trace file (is the disk full?)");
}

void ChromeTraceWriter::event(const std::string& json) {
  out_ << (first_ ? "" : ",\n") << json;
  first_ = false;
}

void ChromeTraceWriter::name_track(int replica) {
  const auto rep = static_cast<std::size_t>(replica);
  if (rep >= named_.size()) named_.resize(rep + 1, false);
  if (named_[rep]) return;
  named_[rep] = true;
  event(Json{{"name", "process_name"},
             {"ph", "M"},
             {"pid", replica},
             {"args", {{"name", "replica " + std::to_string(replica)}}}}
            .dump());
}

void ChromeTraceWriter::on_instance(const InstanceSpan& span) {
  if (limit_s_ > 0 && span.start_s > limit_s_) return;
  name_track(span.replica);
  // An async span (begin, end) on the instance's process: a lifecycle, not work on a thread.
  for (const auto& [ph, t] : {std::pair{"b", span.start_s}, std::pair{"e", span.end_s}}) {
    event(Json{{"name", span.what},
               {"cat", "instance"},
               {"ph", ph},
               {"id", span.replica},
               {"pid", span.replica},
               {"tid", 2},
               {"ts", t * 1e6},
               {"args", {{"pool", span.pool}}}}
              .dump());
  }
}

void ChromeTraceWriter::on_step(const StepRecord& s) {
  if (limit_s_ > 0 && s.start_s > limit_s_) return;
  const StepPlan& p = *s.plan;
  const double t0 = s.start_s * 1e6;  // trace timestamps are microseconds
  name_track(s.replica);
  event(Json{{"name", "step"},
             {"cat", "step"},
             {"ph", "X"},
             {"pid", s.replica},
             {"tid", 0},
             {"ts", t0},
             {"dur", p.total.us()},
             {"args",
              {{"tokens", p.tokens},
               {"decode_seqs", s.decode_seqs},
               {"prefill_tokens", s.prefill_tokens},
               {"gpu_max_over_mean", p.gpu_imbalance}}}}
            .dump());
  double t = t0;
  // The parts (step_breakdown.h) back to back: they add up to the step.
  for (std::size_t i = 0; i < kStepParts; ++i) {
    const Duration d = p.parts.d[i];
    if (d <= Duration::zero()) continue;
    event(Json{{"name", std::string(kStepPartInfo[i].label)},
               {"cat", "part"},
               {"ph", "X"},
               {"pid", s.replica},
               {"tid", 1},
               {"ts", t},
               {"dur", d.us()}}
              .dump());
    t += d.us();
  }
  event(Json{{"name", "requests"},
             {"ph", "C"},
             {"pid", s.replica},
             {"ts", t0},
             {"args", {{"running", s.running}, {"waiting", s.waiting}}}}
            .dump());
}

}  // namespace moesim
