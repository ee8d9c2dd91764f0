#include "sim/engine/worker_pool.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace moesim;

TEST_CASE("without workers a job runs inside submit") {
  WorkerPool pool(0);
  int runs = 0;
  WorkerPool::Job job([&] { ++runs; });
  pool.submit(job);
  CHECK(runs == 1);
  pool.wait(job);
  CHECK(runs == 1);
  pool.submit(job);  // the slot is free again after wait
  pool.wait(job);
  CHECK(runs == 2);
}

TEST_CASE("every submitted job runs exactly once, whoever runs it") {
  WorkerPool pool(2);
  constexpr int kJobs = 64;
  std::vector<int> runs(kJobs, 0);
  std::vector<WorkerPool::Job> jobs;
  jobs.reserve(kJobs);
  for (int i = 0; i < kJobs; ++i) jobs.emplace_back([&runs, i] { ++runs[static_cast<std::size_t>(i)]; });
  for (int round = 0; round < 3; ++round) {
    for (auto& j : jobs) pool.submit(j);
    for (auto& j : jobs) pool.wait(j);
  }
  for (const int r : runs) CHECK(r == 3);
}

TEST_CASE("wait runs a job no worker has started on the caller's thread, and rethrows what a job threw") {
  WorkerPool pool(1);
  std::atomic<bool> started{false};
  std::atomic<bool> release{false};
  WorkerPool::Job blocker([&] {
    started = true;
    while (!release) std::this_thread::yield();
  });
  std::thread::id ran_on;
  WorkerPool::Job queued([&] { ran_on = std::this_thread::get_id(); });
  pool.submit(blocker);
  while (!started) std::this_thread::yield();  // the only worker is busy from here on
  pool.submit(queued);
  pool.wait(queued);
  CHECK(ran_on == std::this_thread::get_id());
  release = true;
  pool.wait(blocker);

  WorkerPool::Job failing([] { throw std::runtime_error("step failed"); });
  pool.submit(failing);
  CHECK_THROWS_WITH(pool.wait(failing), "step failed");
  pool.submit(failing);  // reusable after the error was delivered
  CHECK_THROWS_AS(pool.wait(failing), std::runtime_error);
}
