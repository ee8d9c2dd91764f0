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
    // State shared by the entities; each event captures one pointer (as the simulator's own events
    // capture [this, id]), so callbacks stay inside std::function's small buffer.
    struct Shared {
      moesim::Simulator* sim;
      moesim::Rng rng;
      std::int64_t left;
    } shared{&sim, moesim::Rng(1), events_per_run};
    struct Ticker {
      Shared* s;
      void operator()() const {
        if (--s->left <= 0) return;
        s->sim->schedule_in(moesim::Duration::from_ps(static_cast<std::int64_t>(s->rng.below(1'000'000))),
                            moesim::Phase::kNormal, *this);
      }
    };
    for (int i = 0; i < entities; ++i) {
      sim.schedule_in(moesim::Duration::from_ps(i), moesim::Phase::kNormal, Ticker{&shared});
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
