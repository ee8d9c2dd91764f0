#include "sim/app/outputs.h"

#include <cstdio>

#include "sim/engine/check.h"

namespace moesim {

CsvOutputs::CsvOutputs(const std::filesystem::path& requests, const std::filesystem::path& steps)
    : requests_path_(requests), steps_path_(steps) {
  if (!requests.empty()) {
    requests_.open(requests);
    if (!requests_) throw InputError(requests.string(), "cannot write the file");
    requests_
        << "id,arrival_s,prompt_tokens,output_tokens,dropped,queueing_s,ttft_s,tpot_s,e2e_s,preemptions,"
           "replica,group\n";
  }
  if (!steps.empty()) {
    steps_.open(steps);
    if (!steps_) throw InputError(steps.string(), "cannot write the file");
    // The step parts (step_breakdown.h) add up to duration_s; comm_hidden_s is not a part.
    steps_ << "replica,start_s,duration_s,tokens,decode_seqs,prefill_tokens,running,waiting";
    for (const StepPartInfo& p : kStepPartInfo) steps_ << ',' << p.key << "_s";
    steps_ << ",comm_hidden_s,gpu_max_over_mean,expert_max_over_mean\n";
  }
}

void CsvOutputs::finish() {
  for (auto [f, path] : {std::pair{&requests_, &requests_path_}, std::pair{&steps_, &steps_path_}}) {
    if (!f->is_open()) continue;
    f->close();
    if (f->fail()) throw InputError(path->string(), "cannot write the file (is the disk full?)");
  }
}

void CsvOutputs::on_step(const StepRecord& s) {
  if (!steps_.is_open()) return;
  const StepPlan& p = *s.plan;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%d,%.9f,%.9f,%lld,%lld,%lld,%lld,%lld", s.replica, s.start_s,
                p.total.seconds(), static_cast<long long>(p.tokens), static_cast<long long>(s.decode_seqs),
                static_cast<long long>(s.prefill_tokens), static_cast<long long>(s.running),
                static_cast<long long>(s.waiting));
  steps_ << buf;
  for (const Duration d : p.parts.d) {
    std::snprintf(buf, sizeof buf, ",%.9f", d.seconds());
    steps_ << buf;
  }
  std::snprintf(buf, sizeof buf, ",%.9f,%.4f,", p.comm_hidden.seconds(), p.gpu_imbalance);
  steps_ << buf;
  if (p.expert_imbalance_measured) {  // else empty: the step drew no layer expert by expert
    std::snprintf(buf, sizeof buf, "%.4f", p.expert_imbalance);
    steps_ << buf;
  }
  steps_ << '\n';
}

void CsvOutputs::on_request(const RequestRecord& r) {
  if (!requests_.is_open()) return;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%lld,%.9f,%lld,%lld,%d,%.9f,%.9f,%.9f,%.9f,%d,%d,%d\n",
                static_cast<long long>(r.id), r.arrival_s, static_cast<long long>(r.prompt_tokens),
                static_cast<long long>(r.output_tokens), r.dropped ? 1 : 0, r.queueing_s, r.ttft_s, r.tpot_s,
                r.e2e_s, r.preemptions, r.replica, r.group);
  requests_ << buf;
}

}  // namespace moesim
