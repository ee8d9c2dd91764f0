#include "sim/app/task_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>

#include "sim/engine/check.h"

#ifdef MOESIM_MPI
#include <mpi.h>
#endif

namespace moesim {

namespace {

// Set by Open MPI's mpirun (and by PMIx launchers) in every rank's environment.
bool started_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

unsigned local_ranks() {
  const char* s = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int n = s ? std::atoi(s) : 1;
  return n > 0 ? static_cast<unsigned>(n) : 1u;
}

std::string seconds_text(double s) {
  char buf[32];
  if (s < 120) {
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  } else if (s < 7200) {
    std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  }
  return buf;
}

}  // namespace

bool mpi_built_in() {
#ifdef MOESIM_MPI
  return true;
#else
  return false;
#endif
}

TaskPool::TaskPool(unsigned jobs) {
#ifdef MOESIM_MPI
  if (started_by_mpirun()) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    mpi_ = true;
  }
#else
  if (started_by_mpirun() && std::getenv("OMPI_COMM_WORLD_RANK") != nullptr &&
      std::string(std::getenv("OMPI_COMM_WORLD_SIZE")) != "1") {
    throw InputError("mpirun", "this moesim was built without MPI (install libopenmpi-dev and rebuild)");
  }
#endif
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  jobs_ = jobs > 0 ? jobs : std::max(1u, cores / (mpi_ ? local_ranks() : 1u));
}

TaskPool::~TaskPool() {
#ifdef MOESIM_MPI
  if (mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
#endif
}

std::vector<std::string> TaskPool::run(
    std::size_t n, const std::function<std::string(std::size_t)>& run_one,
    const std::function<std::string(std::size_t, const std::string&)>& label, bool everywhere) {
  std::vector<std::size_t> mine;
  for (std::size_t i = static_cast<std::size_t>(rank_); i < n; i += static_cast<std::size_t>(size_))
    mine.push_back(i);
  std::vector<std::string> results(n);
  std::atomic<std::size_t> next{0};
  std::size_t done = 0;
  double busy_s = 0;
  std::mutex io;
  const std::size_t n_threads = std::min<std::size_t>(jobs_, mine.size());
  const std::string who = size_ > 1 ? "rank " + std::to_string(rank_) + " " : "";
  auto worker = [&] {
    for (std::size_t k = next++; k < mine.size(); k = next++) {
      const auto start = std::chrono::steady_clock::now();
      results[mine[k]] = run_one(mine[k]);
      const auto now = std::chrono::steady_clock::now();
      const double took = std::chrono::duration<double>(now - start).count();
      const std::lock_guard<std::mutex> lock(io);
      ++done;
      // Time left: the mean task time so far, times the tasks left, shared by the threads that run them.
      busy_s += took;
      const double remaining = static_cast<double>(mine.size() - done);
      const double left = busy_s / static_cast<double>(done) * remaining /
                          std::min(remaining, static_cast<double>(std::max<std::size_t>(1, n_threads)));
      std::ostringstream line;
      line << who << "[" << done << "/" << mine.size() << "] " << label(mine[k], results[mine[k]]) << "  ("
           << seconds_text(took) << ")";
      if (done < mine.size()) line << "  ~" << seconds_text(left) << " left";
      std::cerr << line.str() << "\n";
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < n_threads; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  if (!mpi_ || size_ == 1) return results;

#ifdef MOESIM_MPI
  // Rank 0 gathers every other rank's results: one buffer per rank, each result prefixed by its length.
  std::string packed;
  for (const std::size_t i : mine) {
    const std::string& r = results[i];
    const std::uint64_t len = r.size();
    packed.append(reinterpret_cast<const char*>(&len), sizeof len);
    packed += r;
  }
  MOESIM_CHECK(packed.size() < static_cast<std::size_t>(std::numeric_limits<int>::max()),
               "MPI gather: a rank's results exceed 2 GiB");
  int my_size = static_cast<int>(packed.size());
  std::vector<int> sizes(static_cast<std::size_t>(size_));
  if (everywhere) {
    MPI_Allgather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD);
  } else {
    MPI_Gather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  }
  std::vector<int> offsets(static_cast<std::size_t>(size_), 0);
  std::string all;
  if (rank_ == 0 || everywhere) {
    long long total = 0;
    for (int r = 0; r < size_; ++r) {
      offsets[static_cast<std::size_t>(r)] = static_cast<int>(total);
      total += sizes[static_cast<std::size_t>(r)];
    }
    MOESIM_CHECK(total < std::numeric_limits<int>::max(), "MPI gather: the results exceed 2 GiB");
    all.resize(static_cast<std::size_t>(total));
  }
  if (everywhere) {
    MPI_Allgatherv(packed.data(), my_size, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR,
                   MPI_COMM_WORLD);
  } else {
    MPI_Gatherv(packed.data(), my_size, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0,
                MPI_COMM_WORLD);
    if (rank_ != 0) return {};
  }
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;  // this rank's own results are in place
    std::size_t pos = static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]);
    for (std::size_t i = static_cast<std::size_t>(r); i < n; i += static_cast<std::size_t>(size_)) {
      std::uint64_t len = 0;
      std::memcpy(&len, all.data() + pos, sizeof len);
      pos += sizeof len;
      results[i] = all.substr(pos, len);
      pos += len;
    }
  }
#endif
  return results;
}

}  // namespace moesim
