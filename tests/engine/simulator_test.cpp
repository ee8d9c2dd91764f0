#include "sim/engine/simulator.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <vector>

#include "sim/engine/random.h"

using namespace moesim;

TEST_CASE("events run in time order, then phase, then scheduling order") {
  Simulator sim;
  std::vector<int> order;
  sim.schedule_at(Time::at(Duration::from_us(2)), Phase::kNormal, [&] { order.push_back(4); });
  sim.schedule_at(Time::at(Duration::from_us(1)), Phase::kDecide, [&] { order.push_back(3); });
  sim.schedule_at(Time::at(Duration::from_us(1)), Phase::kNormal, [&] { order.push_back(1); });
  sim.schedule_at(Time::at(Duration::from_us(1)), Phase::kNormal, [&] { order.push_back(2); });
  sim.run();
  REQUIRE(order == std::vector<int>{1, 2, 3, 4});
  REQUIRE(sim.events_processed() == 4);
  REQUIRE(sim.now() == Time::at(Duration::from_us(2)));
}

TEST_CASE("a decide event sees every normal event of its instant, even ones scheduled later") {
  Simulator sim;
  std::vector<int> order;
  sim.schedule_in(Duration::from_us(1), Phase::kDecide, [&] { order.push_back(2); });
  sim.schedule_in(Duration::from_us(1), Phase::kNormal, [&] {
    order.push_back(0);
    sim.schedule_in(Duration::zero(), Phase::kNormal, [&] { order.push_back(1); });
  });
  sim.run();
  REQUIRE(order == std::vector<int>{0, 1, 2});
}

TEST_CASE("a cancelled event does not run and cancelling twice is harmless") {
  Simulator sim;
  int ran = 0;
  const EventId id = sim.schedule_in(Duration::from_us(1), Phase::kNormal, [&] { ++ran; });
  sim.schedule_in(Duration::from_us(2), Phase::kNormal, [&] { ran += 10; });
  REQUIRE(sim.cancel(id));
  REQUIRE_FALSE(sim.cancel(id));
  sim.run();
  REQUIRE(ran == 10);
  REQUIRE(sim.events_processed() == 1);
}

TEST_CASE("run_until stops at the limit and advances the clock") {
  Simulator sim;
  int ran = 0;
  sim.schedule_in(Duration::from_ms(1), Phase::kNormal, [&] { ++ran; });
  sim.schedule_in(Duration::from_ms(3), Phase::kNormal, [&] { ++ran; });
  sim.run_until(Time::at(Duration::from_ms(2)));
  REQUIRE(ran == 1);
  REQUIRE(sim.now() == Time::at(Duration::from_ms(2)));
  sim.run();
  REQUIRE(ran == 2);
}

namespace {
// An event as the engine must order it: by time, then phase, then scheduling order.
struct Scheduled {
  std::int64_t time_ps;
  int phase;
  int order;
  auto operator<=>(const Scheduled&) const = default;
};
}  // namespace

// The queue against a sort: thousands of events at few distinct times (many ties), in both phases, one in
// ten cancelled, some scheduled by running events (always later than now, so that sorting every event
// by (time, phase, scheduling order) gives the one order the engine may run them in).
TEST_CASE("many tied events with cancellations run in (time, phase, scheduling order)") {
  Simulator sim;
  Rng rng = RandomStreams(7).stream("queue");
  std::vector<Scheduled> expected;
  std::vector<int> ran;
  int next = 0;
  std::function<void(std::int64_t, int)> add = [&](std::int64_t min_ns, int children) {
    const Time at =
        sim.now() + Duration::from_ns(static_cast<double>(min_ns + static_cast<std::int64_t>(rng.below(50))));
    const Phase phase = rng.below(3) == 0 ? Phase::kDecide : Phase::kNormal;
    const int order = next++;
    const EventId id = sim.schedule_at(at, phase, [&, order, children] {
      ran.push_back(order);
      for (int c = 0; c < children; ++c) add(1, 0);
    });
    if (rng.below(10) == 0) {
      REQUIRE(sim.cancel(id));
    } else {
      expected.push_back({at.ps(), static_cast<int>(phase), order});
    }
  };
  for (int i = 0; i < 5000; ++i) add(0, static_cast<int>(rng.below(3)));
  sim.run();
  std::sort(expected.begin(), expected.end());
  std::vector<int> order;
  for (const Scheduled& e : expected) order.push_back(e.order);
  REQUIRE(ran == order);
  REQUIRE(sim.events_processed() == expected.size());
}

namespace {
std::uint64_t run_chain(std::uint64_t seed) {
  Simulator sim;
  Rng rng = RandomStreams(seed).stream("chain");
  int left = 1000;
  std::function<void()> tick = [&] {
    if (--left > 0)
      sim.schedule_in(Duration::from_ns(static_cast<double>(rng.below(100))), Phase::kNormal, tick);
  };
  sim.schedule_in(Duration::zero(), Phase::kNormal, tick);
  sim.run();
  return sim.fingerprint();
}
}  // namespace

TEST_CASE("the fingerprint is a function of the executed events") {
  REQUIRE(run_chain(1) == run_chain(1));
  REQUIRE(run_chain(1) != run_chain(2));
}

// M/M/1 queue: mean waiting time in queue Wq = rho / (mu - lambda) (Kleinrock, Queueing Systems I, 3.2).
TEST_CASE("a FIFO server with Poisson arrivals and exponential service matches M/M/1") {
  const double lambda = 0.8;
  const double mu = 1.0;
  Simulator sim;
  const RandomStreams streams(42);
  Rng arrivals = streams.stream("arrivals");
  Rng service = streams.stream("service");
  std::vector<Time> queue;
  std::size_t head = 0;
  bool busy = false;
  double total_wait = 0;
  long served = 0;
  const long n = 400000;
  long arrived = 0;
  std::function<void()> start_next;
  std::function<void()> arrive;
  start_next = [&] {
    if (head == queue.size()) {
      busy = false;
      return;
    }
    busy = true;
    total_wait += (sim.now() - queue[head++]).seconds();
    ++served;
    sim.schedule_in(Duration::from_seconds(sample_exponential(service, mu)), Phase::kNormal, start_next);
  };
  arrive = [&] {
    queue.push_back(sim.now());
    if (!busy) start_next();
    if (++arrived < n)
      sim.schedule_in(Duration::from_seconds(sample_exponential(arrivals, lambda)), Phase::kNormal, arrive);
  };
  sim.schedule_in(Duration::zero(), Phase::kNormal, arrive);
  sim.run();
  const double rho = lambda / mu;
  const double expected = rho / (mu - lambda);
  REQUIRE(served == n);
  REQUIRE(total_wait / static_cast<double>(served) == Approx(expected).epsilon(0.05));
}

// The queue's tiers against a sort: tens of thousands pending (past the heap's spill size), delays from ties
// to a few far outliers, bursts of one instant large enough to split a bucket, cancellations of events
// long queued, run_until stops in between, and a second run after the queue drained. Sorting the events
// that ran by (time, phase, scheduling order) gives the only order the engine may run them in (children
// are scheduled at least 1 ps after their parent).
TEST_CASE("a large queue of spread, tied and far events runs in (time, phase, scheduling order)") {
  Simulator sim;
  Rng rng = RandomStreams(11).stream("tiers");
  std::vector<Scheduled> scheduled;
  std::vector<EventId> ids;
  std::vector<bool> cancelled;
  std::vector<int> ran;
  std::size_t live = 0;
  std::function<void(std::int64_t)> add = [&](std::int64_t min_ps) {
    std::int64_t delay = 0;
    switch (rng.below(8)) {
      case 0:  // a burst: one of four instants a millisecond ahead
        delay = 1'000'000'000 + 250'000'000 * static_cast<std::int64_t>(rng.below(4));
        break;
      case 1:
        delay = static_cast<std::int64_t>(rng.below(100));
        break;
      case 2:
        if (rng.below(500) == 0) {  // rare outliers far beyond the rest
          delay = std::int64_t{1} << (40 + rng.below(20));
          break;
        }
        [[fallthrough]];
      default:
        delay = static_cast<std::int64_t>(rng.below(10'000'000));
    }
    const Time at = sim.now() + Duration::from_ps(min_ps + delay);
    const Phase phase = rng.below(4) == 0 ? Phase::kDecide : Phase::kNormal;
    const int order = static_cast<int>(scheduled.size());
    const bool parent = rng.below(2) == 0;
    ids.push_back(sim.schedule_at(at, phase, [&, order, parent] {
      ran.push_back(order);
      --live;
      if (parent) add(1);
      if (rng.below(20) == 0) {  // cancel an event scheduled long before
        const auto victim = static_cast<std::size_t>(rng.below(ids.size()));
        const bool was_pending = sim.cancel(ids[victim]);
        REQUIRE(was_pending ==
                (!cancelled[victim] && std::find(ran.begin(), ran.end(), victim) == ran.end()));
        if (was_pending) {
          cancelled[victim] = true;
          --live;
        }
      }
    }));
    scheduled.push_back({at.ps(), static_cast<int>(phase), order});
    cancelled.push_back(false);
    ++live;
  };
  for (int i = 0; i < 30000; ++i) add(0);
  REQUIRE(sim.pending() == live);
  for (const std::int64_t until_ps : {2'000'000, 1'100'000'000, 1'500'000'001}) {
    sim.run_until(Time::at(Duration::from_ps(until_ps)));
    REQUIRE(sim.now() == Time::at(Duration::from_ps(until_ps)));
    REQUIRE(sim.pending() == live);
  }
  sim.run();
  REQUIRE(sim.pending() == 0);
  for (int i = 0; i < 2000; ++i) add(1);  // the drained queue takes events again
  sim.run();

  std::vector<Scheduled> expected;
  for (std::size_t i = 0; i < scheduled.size(); ++i) {
    if (!cancelled[i]) expected.push_back(scheduled[i]);
  }
  std::sort(expected.begin(), expected.end());
  std::vector<int> order;
  for (const Scheduled& e : expected) order.push_back(e.order);
  REQUIRE(ran.size() == order.size());
  REQUIRE(ran == order);
  REQUIRE(sim.events_processed() == expected.size());
}
