// Engine throughput: events per second for a self-rescheduling population of entities, the pattern of a
// serving simulation (each entity keeps one pending event).
#include <benchmark/benchmark.h>

#include "sim/engine/random.h"
#include "sim/engine/simulator.h"

namespace {

void BM_EngineEvents(benchmark::State& state) {
  const auto entities = static_cast<int>(state.range(0));
  const std::int64_t events_per_run = 1'000'000;
  std::int64_t events = 0;
  for (auto _ : state) {
    moesim::Simulator sim;
    moesim::Rng rng(1);
    std::int64_t left = events_per_run;
    struct Ticker {
      moesim::Simulator* sim;
      moesim::Rng* rng;
      std::int64_t* left;
      void operator()() const {
        if (--*left <= 0) return;
        sim->schedule_in(moesim::Duration::from_ps(static_cast<std::int64_t>(rng->below(1'000'000))),
                         moesim::Phase::kNormal, *this);
      }
    };
    for (int i = 0; i < entities; ++i) {
      sim.schedule_in(moesim::Duration::from_ps(i), moesim::Phase::kNormal, Ticker{&sim, &rng, &left});
    }
    sim.run();
    benchmark::DoNotOptimize(sim.fingerprint());
    events += static_cast<std::int64_t>(sim.events_processed());
  }
  state.SetItemsProcessed(events);
}
BENCHMARK(BM_EngineEvents)->Arg(16)->Arg(1024)->Arg(65536)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
