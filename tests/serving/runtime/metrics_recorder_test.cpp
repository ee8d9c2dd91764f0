// The metrics recorder on hand-built requests: the latencies and SLA outcome of a finished request, the
// TTFT split of a disaggregated one, drops by reason and the KV-transfer counters, each against the
// definitions in report.h worked out by hand.
#include "sim/serving/runtime/metrics_recorder.h"

#include <catch2/catch.hpp>
#include <string>

#include "sim/scenario/scenario_parser.h"

using namespace moesim;

namespace {
// scenarios/tiny/tiny_poisson_ep4.json: one replica of 4 GPUs, SLA TTFT 500 ms and TPOT 50 ms, warm-up 1 s.
ScenarioSpec tiny() {
  return load_scenario(std::string(MOESIM_SOURCE_DIR) + "/scenarios/tiny/tiny_poisson_ep4.json", {}).spec;
}

Time at(double s) { return Time{} + Duration::from_seconds(s); }

// A request that arrived at 2 s, was admitted at 2.1 s, sampled its first token at 2.3 s and its last
// (the 11th) at 2.3 + 10 x tpot s.
Request finished_request(double tpot_s) {
  Request r;
  r.arrival = at(2.0);
  r.admitted = at(2.1);
  r.first_token = at(2.3);
  r.output = 11;
  r.generated = 11;
  r.last_token = at(2.3 + 10 * tpot_s);
  return r;
}
}  // namespace

TEST_CASE("a finished request's latencies and SLA outcome") {
  const ScenarioSpec s = tiny();
  MetricsRecorder m(s, nullptr);
  m.on_arrival(at(2.0));
  m.on_arrival(at(2.0));
  const Request good = finished_request(0.040);  // TTFT 300 ms <= 500, TPOT 40 ms <= 50: good
  const Request slow = finished_request(0.060);  // TPOT 60 ms > 50: a violation
  m.on_finished(good, good.last_token);
  m.on_finished(slow, slow.last_token);
  CHECK(m.finished == 2);
  const WindowTotals w = m.series().sum(0, true);
  CHECK(w.finished == 2);
  CHECK(w.finished_output_tokens == 22);
  CHECK(w.good == 1);
  CHECK(w.good_output_tokens == 11);
  CHECK(w.ttft_over == 0);
  CHECK(w.tpot_counted == 2);
  CHECK(w.tpot_over == 1);
  CHECK(w.ttft.mean() == Approx(0.3));
  CHECK(w.tpot.mean() == Approx(0.05));            // (40 + 60) / 2 ms
  CHECK(w.queueing.mean() == Approx(0.1));         // admitted - arrival
  CHECK(w.e2e.mean() == Approx(0.3 + 10 * 0.05));  // last token - arrival, averaged
}

TEST_CASE("a request of one output token has no TPOT and is judged on TTFT alone") {
  const ScenarioSpec s = tiny();
  MetricsRecorder m(s, nullptr);
  m.on_arrival(at(2.0));
  Request r = finished_request(0.0);
  r.output = 1;
  r.generated = 1;
  r.first_token = at(2.6);  // TTFT 600 ms > 500
  r.last_token = r.first_token;
  m.on_finished(r, r.first_token);
  const WindowTotals w = m.series().sum(0, true);
  CHECK(w.tpot_counted == 0);
  CHECK(w.tpot.count() == 0);
  CHECK(w.ttft_over == 1);
  CHECK(w.good == 0);
}

TEST_CASE("a disaggregated request's TTFT splits into prefill queue, prefill, KV transfer and decode queue") {
  const ScenarioSpec s = tiny();
  MetricsRecorder m(s, nullptr);
  m.on_arrival(at(2.0));
  Request r = finished_request(0.040);
  r.prefill_replica = 0;
  r.prefill_admitted = at(2.05);
  r.prefill_done = at(2.15);
  r.kv_arrived = at(2.2);
  r.admitted = at(2.25);
  m.on_finished(r, r.last_token);
  const WindowTotals w = m.series().sum(0, true);
  CHECK(w.prefill_queue.mean() == Approx(0.05));
  CHECK(w.prefill.mean() == Approx(0.10));
  CHECK(w.kv_transfer.mean() == Approx(0.05));
  CHECK(w.decode_queue.mean() == Approx(0.10));  // first token 2.3 - KV arrival 2.2
  // The four parts are the TTFT.
  CHECK(w.prefill_queue.mean() + w.prefill.mean() + w.kv_transfer.mean() + w.decode_queue.mean() ==
        Approx(w.ttft.mean()));
  // Queueing is both queues: prefill admission - arrival + decode admission - KV arrival.
  CHECK(w.queueing.mean() == Approx(0.05 + 0.05));
}

TEST_CASE("drops count by reason, KV moves by kind, and arrivals less finished and dropped are in system") {
  const ScenarioSpec s = tiny();
  MetricsRecorder m(s, nullptr);
  for (int i = 0; i < 5; ++i) m.on_arrival(at(1.5 + 0.1 * i));
  RequestSpec spec;
  m.on_drop(spec, 0, DropReason::kQueueFull);
  m.on_drop(spec, 1, DropReason::kQueueFull);
  m.on_drop(spec, 2, DropReason::kTooLong);
  CHECK(m.arrived == 5);
  CHECK(m.dropped == 3);
  CHECK(m.dropped_by[static_cast<std::size_t>(DropReason::kQueueFull)] == 2);
  CHECK(m.dropped_by[static_cast<std::size_t>(DropReason::kTooLong)] == 1);
  CHECK(m.dropped_by[static_cast<std::size_t>(DropReason::kEmpty)] == 0);
  m.on_kv_transfer(1000, Duration::from_ms(2), false);
  m.on_kv_transfer(3000, Duration::from_ms(4), false);
  m.on_kv_transfer(500, Duration::from_ms(1), true);
  CHECK(m.kv_transfers == 2);
  CHECK(m.kv_transfer_bytes == 4000);
  CHECK(m.kv_transfer_s == Approx(0.006));
  CHECK(m.migrations == 1);
  CHECK(m.migration_bytes == 500);
  m.on_kv_sent(1000);
  m.on_kv_sent(3000);
  m.on_kv_received(1000);
  CHECK(m.kv_sent == 2);
  CHECK(m.kv_received == 1);
  CHECK(m.kv_bytes_sent - m.kv_bytes_received == 3000);
  // Five arrivals from 1.5 s to 1.9 s, three dropped at the last arrival: the in-system integral over
  // [1.5, 2.0) is 1 x 0.1 + 2 x 0.1 + 3 x 0.1 + 4 x 0.1 + (5 - 3) x 0.1 = 1.2 request-seconds, which
  // the series holds once the run ends at 2 s (its origin is the 1 s warm-up).
  m.on_run_end(at(2.0));
  CHECK(m.series().sum(0, true).in_system_s == Approx(1.2));
}
