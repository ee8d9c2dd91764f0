#include "sim/scenario/servegen_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "sim/scenario/line_reader.h"

namespace moesim {

namespace {

namespace fs = std::filesystem;

// A replay's horizon (as run.duration_s) and the largest rate a window may give.
constexpr double kMaxServeGenSeconds = 1e6;
constexpr double kMaxServeGenRate = 1e6;
// Requests a replay may materialize (32 bytes each): the trace readers' row bound is far above what a
// sampled replay needs, and sampling this many takes seconds.
constexpr double kMaxServeGenRequests = 2e7;

bool parse_double(std::string_view s, double& out) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r' || s.back() == '\t')) s.remove_suffix(1);
  if (s.empty()) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && std::isfinite(out);
}

std::vector<std::string_view> split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const auto c = line.find(sep, start);
    out.push_back(line.substr(start, c == std::string_view::npos ? std::string_view::npos : c - start));
    if (c == std::string_view::npos) return out;
    start = c + 1;
  }
}

std::vector<ServeGenWindow> read_windows(const std::string& file, double& window_s) {
  LineReader in(file);
  std::vector<ServeGenWindow> out;
  std::string line;
  while (in.next(line)) {
    if (line.empty() || line == "\r") continue;
    const std::string where = in.where();
    const auto f = split(line, ',');
    if (f.size() != 6) {
      throw InputError(where,
                       "expected 6 comma-separated fields (timestamp_s, rate_req_per_s, cv, "
                       "Gamma|Weibull|empty, shape, scale), got " +
                           std::to_string(f.size()));
    }
    ServeGenWindow w;
    double cv = 0;
    if (!parse_double(f[0], w.start_s) || !parse_double(f[1], w.rate_per_s) || !parse_double(f[2], cv) ||
        !parse_double(f[4], w.shape) || !parse_double(f[5], w.scale)) {
      throw InputError(where, "timestamp, rate, cv, shape and scale must be numbers");
    }
    if (w.rate_per_s < 0 || cv < 0) throw InputError(where, "rate and cv must be >= 0");
    // What a run can hold: a window inside the simulated horizon, a rate and law parameters whose samples
    // and sums stay finite (the ServeGen data: rates below 20 req/s, shapes 0.01-20, scales 0.002-500).
    if (w.start_s > kMaxServeGenSeconds)
      throw InputError(where, "the window starts past 1e6 s, beyond what a run simulates");
    if (w.rate_per_s > kMaxServeGenRate) throw InputError(where, "rate must be at most 1e6 req/s");
    if (cv > 1e3) throw InputError(where, "cv must be at most 1e3");
    if (f[3] == "Gamma" || f[3] == "Weibull") {
      if (!(w.shape >= 1e-4 && w.shape <= 1e4) || !(w.scale >= 1e-9 && w.scale <= 1e9))
        throw InputError(where, "the law's shape must be in [1e-4, 1e4] and its scale in [1e-9, 1e9]");
    }
    if (f[3] == "Gamma") {
      w.law = InterArrivalLaw::kGamma;
    } else if (f[3] == "Weibull") {
      w.law = InterArrivalLaw::kWeibull;
    } else if (f[3].empty()) {
      w.law = InterArrivalLaw::kNone;
      w.rate_per_s = 0;
    } else {
      throw InputError(where, "unknown inter-arrival law \"" + printable(f[3].substr(0, 80)) +
                                  "\" (known: Gamma, Weibull)");
    }
    if (w.law != InterArrivalLaw::kNone && w.rate_per_s > 0 && !(w.shape > 0 && w.scale > 0))
      throw InputError(where, "the law's shape and scale must be positive");
    if (!out.empty()) {
      const double step = w.start_s - out.back().start_s;
      if (out.size() == 1) window_s = step;
      if (!(step > 0) || std::abs(step - window_s) > 1e-6)
        throw InputError(where, "windows must be equally spaced and ascending");
    }
    out.push_back(w);
  }
  if (out.empty()) throw InputError(file, "the ServeGen trace has no windows");
  if (out.front().start_s != 0) throw InputError(file + ":1", "the first window must start at 0");
  if (out.back().start_s + window_s > kMaxServeGenSeconds)
    throw InputError(file, "the windows end past 1e6 s, beyond what a run simulates");
  return out;
}

std::vector<ServeGenLengths> read_lengths(const std::string& file) {
  const Json j = load_json_file(file);
  if (!j.is_object()) throw InputError(file, "expected an object of windows");
  std::map<double, ServeGenLengths> by_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    double start = 0;
    const std::string at = file + ": \"" + printable(it.key()) + "\"";
    if (!parse_double(it.key(), start) || start < 0)
      throw InputError(at, "window keys must be start times in seconds");
    if (!it->is_object()) throw InputError(at, "expected an object");
    ServeGenLengths l;
    l.start_s = start;
    bool empty = false;
    for (auto f = it->begin(); f != it->end(); ++f) {
      const std::string where = at + "." + printable(f.key());
      if (f.key() != "input_tokens" && f.key() != "output_tokens" && f.key() != "reason_ratio")
        throw InputError(where, "unknown field (known: input_tokens, output_tokens, reason_ratio)");
      if (!f->is_string()) throw InputError(where, "expected a Python dict literal string");
      const TokenPmf p =
          f.key() == "reason_ratio" ? TokenPmf{} : parse_token_pmf(f->get<std::string>(), where);
      if (f.key() == "reason_ratio") continue;
      if (p.values.empty()) empty = true;
      (f.key() == "input_tokens" ? l.input : l.output) = p;
    }
    // ServeGen skips a window whose distributions are empty (the client sent nothing then).
    if (empty) continue;
    if (l.input.values.empty() || l.output.values.empty())
      throw InputError(at, "needs input_tokens and output_tokens");
    by_start[start] = std::move(l);
  }
  std::vector<ServeGenLengths> out;
  for (auto& [s, l] : by_start) out.push_back(std::move(l));
  return out;
}

ServeGenClient read_client(const fs::path& trace_csv, int id, double& window_s) {
  ServeGenClient c;
  c.id = id;
  c.windows = read_windows(trace_csv.string(), window_s);
  const fs::path dataset = trace_csv.parent_path() / ("chunk-" + std::to_string(id) + "-dataset.json");
  c.lengths = read_lengths(dataset.string());
  for (const auto& w : c.windows) {
    if (w.law != InterArrivalLaw::kNone && w.rate_per_s > 0 && c.lengths_at(w.start_s) == nullptr) {
      throw InputError(dataset.string(), "no length distributions for the window at " +
                                             std::to_string(static_cast<long long>(w.start_s)) +
                                             " s, where the client sends requests");
    }
  }
  return c;
}

// "chunk-<id>-trace.csv" -> id, else -1.
int chunk_id(const std::string& name) {
  constexpr std::string_view kPrefix = "chunk-";
  constexpr std::string_view kSuffix = "-trace.csv";
  if (name.size() <= kPrefix.size() + kSuffix.size() || name.rfind(kPrefix, 0) != 0 ||
      name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return -1;
  }
  int id = -1;
  const char* b = name.data() + kPrefix.size();
  const char* e = name.data() + name.size() - kSuffix.size();
  const auto [p, ec] = std::from_chars(b, e, id);
  return ec == std::errc() && p == e ? id : -1;
}

}  // namespace

TokenPmf parse_token_pmf(const std::string& literal, const std::string& where) {
  TokenPmf out;
  std::string_view s(literal);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  if (s.size() < 2 || s.front() != '{' || s.back() != '}')
    throw InputError(where, "expected a Python dict literal {tokens: probability, ...}");
  s = s.substr(1, s.size() - 2);
  if (s.find_first_not_of(' ') == std::string_view::npos) return out;  // "{}"
  std::vector<std::pair<std::int64_t, double>> pairs;
  for (const auto item : split(s, ',')) {
    const auto kv = split(item, ':');
    double k = 0;
    double p = 0;
    if (kv.size() != 2 || !parse_double(kv[0], k) || !parse_double(kv[1], p))
      throw InputError(where,
                       "bad entry \"" + printable(item.substr(0, 80)) + "\" (expected tokens: probability)");
    // As a trace row's: at most 1e8 tokens.
    if (k < 0 || std::floor(k) != k || k > 1e8)
      throw InputError(where, "token counts must be integers in [0, 1e8]");
    if (p < 0) throw InputError(where, "probabilities must be >= 0");
    pairs.emplace_back(static_cast<std::int64_t>(k), p);
  }
  std::sort(pairs.begin(), pairs.end());
  double total = 0;
  for (const auto& [k, p] : pairs) total += p;
  if (std::abs(total - 1.0) > 1e-3)
    throw InputError(where, "probabilities sum to " + std::to_string(total) + ", expected 1");
  double c = 0;
  for (const auto& [k, p] : pairs) {
    if (!out.values.empty() && out.values.back() == k) throw InputError(where, "a token count appears twice");
    c += p / total;
    out.values.push_back(k);
    out.cdf.push_back(c);
  }
  out.cdf.back() = 1.0;
  return out;
}

ServeGenWorkload read_servegen(const std::string& path) {
  ServeGenWorkload w;
  std::vector<std::pair<int, fs::path>> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path)) {
      const int id = chunk_id(e.path().filename().string());
      if (id >= 0) files.emplace_back(id, e.path());
    }
    if (files.empty()) throw InputError(path, "no chunk-<id>-trace.csv files in this folder");
  } else {
    const int id = chunk_id(fs::path(path).filename().string());
    if (id < 0) throw InputError(path, "expected a folder of ServeGen files or a chunk-<id>-trace.csv file");
    files.emplace_back(id, fs::path(path));
  }
  std::sort(files.begin(), files.end());
  double window_s = 0;
  for (const auto& [id, file] : files) {
    double ws = 600;
    w.clients.push_back(read_client(file, id, ws));
    if (window_s == 0) window_s = ws;
    const auto& last = w.clients.back().windows;
    if (std::abs(ws - window_s) > 1e-6 || last.size() != w.clients.front().windows.size())
      throw InputError(file.string(), "every client must have the same windows");
  }
  w.window_s = window_s;
  w.day_s = w.clients.front().windows.back().start_s + window_s;
  return w;
}

namespace {

// The requests a replay samples (each window's rate x rate_scale x window, from start_s to the end of the
// data or of run.duration_s; run.requests stops it within a window), refused past kMaxServeGenRequests.
void check_replay_size(JsonReader& arrival, const ServeGenWorkload& w, const ServeGenReplay& replay,
                       const RunLimits& limits) {
  const double end_s = limits.max_arrival_time > Duration::zero()
                           ? std::min(w.day_s, replay.start_s + limits.max_arrival_time.seconds())
                           : w.day_s;
  double total = 0;
  double busiest = 0;
  for (std::size_t k = 0; k < w.clients.front().windows.size(); ++k) {
    const double start = w.clients.front().windows[k].start_s;
    if (start + w.window_s <= replay.start_s || start >= end_s) continue;
    double in_window = 0;
    for (const ServeGenClient& c : w.clients)
      in_window += c.windows[k].rate_per_s * replay.rate_scale * w.window_s;
    busiest = std::max(busiest, in_window);
    total += in_window;
  }
  if (limits.max_requests > 0) total = std::min(total, static_cast<double>(limits.max_requests) + busiest);
  if (total > kMaxServeGenRequests || busiest > kMaxServeGenRequests) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g", std::max(total, busiest));
    arrival.fail("rate_scale", std::string("the replay would sample about ") + buf +
                                   " requests (the windows' rates x rate_scale), more than the 2e7 a run "
                                   "holds; lower rate_scale, or set run.duration_s or run.requests");
  }
}

}  // namespace

std::vector<RequestSpec> servegen_trace_rows(JsonReader& arrival, const std::string& path, const Json& root) {
  ServeGenReplay replay;
  replay.rate_scale = arrival.bounded("rate_scale", 1.0, 1e-6, 1e6);
  replay.start_s = arrival.bounded("start_s", 0.0, 0.0, 1e6);
  const ServeGenWorkload w = read_servegen(path);
  if (replay.start_s >= w.day_s || std::abs(std::remainder(replay.start_s, w.window_s)) > 1e-9) {
    arrival.fail("start_s", "must be a window start (a multiple of " + std::to_string(w.window_s) +
                                " s) before the data's end at " + std::to_string(w.day_s) + " s");
  }
  // The run section is validated after the workload; read what it says (bad values fail there).
  const Json run = root.contains("run") && root["run"].is_object() ? root["run"] : Json::object();
  const auto integer = [&](const char* key) -> std::int64_t {
    return run.contains(key) && run[key].is_number_integer() ? run[key].get<std::int64_t>() : 0;
  };
  const std::int64_t seed = run.contains("seed") ? integer("seed") : 1;
  RunLimits limits;
  limits.max_requests = std::max<std::int64_t>(0, integer("requests"));
  // A duration past the horizon is refused by the run section; none is taken from it here.
  if (run.contains("duration_s") && run["duration_s"].is_number() && run["duration_s"].get<double>() > 0 &&
      run["duration_s"].get<double>() <= kMaxServeGenSeconds)
    limits.max_arrival_time = Duration::from_seconds(run["duration_s"].get<double>());
  check_replay_size(arrival, w, replay, limits);
  ServeGenSource src(w, replay, limits,
                     RandomStreams(static_cast<std::uint64_t>(std::max<std::int64_t>(0, seed))));
  std::vector<RequestSpec> rows;
  while (auto r = src.next()) rows.push_back(*r);
  if (rows.empty()) throw InputError(arrival.path(), "the ServeGen replay has no requests in its time range");
  return rows;
}

}  // namespace moesim
