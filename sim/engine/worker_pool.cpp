#include "sim/engine/worker_pool.h"

#include <algorithm>
#include <utility>

#include "sim/engine/check.h"

namespace moesim {

WorkerPool::WorkerPool(int workers) {
  threads_.reserve(static_cast<std::size_t>(std::max(0, workers)));
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker(); });
}

WorkerPool::~WorkerPool() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::run(Job& job) {
  try {
    job.work_();
  } catch (...) {
    job.error_ = std::current_exception();
  }
}

void WorkerPool::submit(Job& job) {
  MOESIM_CHECK(job.state_ == Job::State::kIdle, "a job slot was submitted twice");
  if (threads_.empty()) {
    run(job);
    job.state_ = Job::State::kDone;
    return;
  }
  {
    const std::lock_guard lock(mutex_);
    job.state_ = Job::State::kQueued;
    queue_.push_back(&job);
  }
  work_ready_.notify_one();
}

void WorkerPool::wait(Job& job) {
  std::unique_lock lock(mutex_);
  MOESIM_CHECK(job.state_ != Job::State::kIdle, "waiting for a job that was not submitted");
  // Until `job` is done, run queued jobs here: `job` itself if no worker took it, else others (the caller
  // would idle otherwise).
  while (job.state_ != Job::State::kDone) {
    if (queue_.empty()) {
      job_done_.wait(lock);
      continue;
    }
    Job* next = &job;
    if (job.state_ == Job::State::kQueued) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), &job));
    } else {
      next = queue_.front();
      queue_.pop_front();
    }
    next->state_ = Job::State::kRunning;
    lock.unlock();
    run(*next);
    lock.lock();
    next->state_ = Job::State::kDone;
    job_done_.notify_all();
  }
  job.state_ = Job::State::kIdle;
  if (job.error_) std::rethrow_exception(std::exchange(job.error_, nullptr));
}

void WorkerPool::worker() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    Job& job = *queue_.front();
    queue_.pop_front();
    job.state_ = Job::State::kRunning;
    lock.unlock();
    run(job);
    lock.lock();
    job.state_ = Job::State::kDone;
    job_done_.notify_all();
  }
}

}  // namespace moesim
