// Running the moesim binary from CLI tests: a per-test temporary folder and a runner that captures the
// exit code, stdout and stderr. Runs from the repo root so that relative scenario paths resolve.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

namespace moesim_test {

namespace fs = std::filesystem;

// A fresh folder named after the running test case and the process, removed afterwards (two builds' test
// runs on one machine, such as .ci/run beside a developer's ctest, never share it).
struct TempDir {
  fs::path dir;
  explicit TempDir(const std::string& prefix) {
    dir = fs::temp_directory_path() /
          (prefix + std::to_string(std::hash<std::string>{}(Catch::getResultCapture().getCurrentTestName())) +
           "-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() { fs::remove_all(dir); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

struct Result {
  int code = 0;
  std::string out;
  std::string err;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs a /bin/sh command line from the repo root; the last command's stdout and stderr are captured.
inline Result run_shell(const TempDir& t, const std::string& script) {
  const fs::path out = t.dir / "stdout.txt";
  const fs::path err = t.dir / "stderr.txt";
  const std::string cmd = std::string("cd \"") + MOESIM_SOURCE_DIR + "\" && " + script + " >\"" +
                          out.string() + "\" 2>\"" + err.string() + "\"";
  const int status = std::system(cmd.c_str());
  return Result{status == 0 ? 0 : (WIFEXITED(status) ? WEXITSTATUS(status) : -1), slurp(out), slurp(err)};
}

inline Result run_moesim(const TempDir& t, const std::string& args) {
  return run_shell(t, std::string("\"") + MOESIM_BINARY + "\" " + args);
}

}  // namespace moesim_test
