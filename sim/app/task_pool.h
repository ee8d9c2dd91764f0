// Runs the independent tasks of a sweep or compare (one replication of one point each) on the threads of
// this process and, when started by mpirun and built with Open MPI, over the ranks too: rank r takes tasks
// r, r + N, ..., and rank 0 gathers every result in task order. Each task returns a string (an encoded
// result), so what rank 0 assembles is the same whichever rank ran a task. Progress goes to stderr with an
// estimate of the time left.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace moesim {

class TaskPool {
 public:
  // Joins the MPI world when this process was started by mpirun (and MPI is built in); `jobs` threads per
  // process (0: the cores, shared between the ranks of one machine).
  explicit TaskPool(unsigned jobs);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Runs run(i) for every i < n; on the output rank returns all results in task order, elsewhere an empty
  // vector (every rank gets them all with `everywhere`: for work whose next step depends on them).
  // label(i, result) names a task (and its outcome) in the progress lines. run must not throw.
  std::vector<std::string> run(std::size_t n, const std::function<std::string(std::size_t)>& run,
                               const std::function<std::string(std::size_t, const std::string&)>& label,
                               bool everywhere = false);

  // The process that writes outputs (rank 0, or the only process).
  [[nodiscard]] bool is_output_rank() const { return rank_ == 0; }
  [[nodiscard]] int ranks() const { return size_; }
  // Threads of this process.
  [[nodiscard]] unsigned jobs() const { return jobs_; }

 private:
  unsigned jobs_ = 1;
  int rank_ = 0;
  int size_ = 1;
  bool mpi_ = false;
};

// True when this binary was built with MPI support.
bool mpi_built_in();

}  // namespace moesim
