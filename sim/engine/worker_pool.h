// Worker threads for an event loop that hands out work now and needs its result later (a replica's step
// plan: submitted when the step starts, joined when the simulation reaches a lower bound of its end).
// Results do not depend on which thread runs a job or when: a job may touch only what its submitter owns
// until the join. wait() runs a job that no worker has started on the calling thread, so the event loop
// never idles while work it needs is queued. With no workers, submit() runs the job at once.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moesim {

class WorkerPool {
 public:
  // One job slot, owned by the submitter and reused: at most one submission in flight.
  class Job {
   public:
    explicit Job(std::function<void()> work) : work_(std::move(work)) {}

   private:
    friend class WorkerPool;
    enum class State { kIdle, kQueued, kRunning, kDone };
    std::function<void()> work_;
    State state_ = State::kIdle;
    std::exception_ptr error_;
  };

  // `workers` threads beside the caller's (0: none, jobs run inside submit()).
  explicit WorkerPool(int workers);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  [[nodiscard]] int workers() const { return static_cast<int>(threads_.size()); }
  void submit(Job& job);
  // Returns once `job` has run (rethrowing what it threw); the job slot is then free again.
  void wait(Job& job);

 private:
  static void run(Job& job);
  void worker();

  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable job_done_;
  std::deque<Job*> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace moesim
