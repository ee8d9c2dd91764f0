// `moesim search SPEC`: the deployment search (deployment_search.h) and its outputs: a table on stdout,
// search.csv and search.json with every evaluated point (static and simulated figures side by side, why a
// point was pruned), one ready-to-run scenario per front point (front/), and the recommended deployment.
// Progress goes to stderr. The same SPEC and seed write the same files, byte for byte.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "sim/app/commands.h"
#include "sim/app/deployment_search.h"
#include "sim/engine/check.h"

namespace moesim {

namespace {

std::string num(double x, int digits) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(digits);
  o << x;
  return o.str();
}

std::string csv_quote(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (const char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// Simulated over static, or empty when either is missing.
std::string ratio(double sim, double st) { return sim > 0 && st > 0 ? num(sim / st, 3) : ""; }

std::string csv(const SearchResult& r) {
  std::ostringstream o;
  o << "id,label,nodes,gpus,pools,ep_size,attention_tp,expert_tp,pipeline_stages,redundant_experts,engine,"
       "weights,kv_cache,two_batch_overlap,mtp,max_batched_tokens,max_batch_size,status,static_batch,"
       "static_tokens_per_s_per_gpu,static_tokens_per_s_per_user,static_tpot_ms,static_ttft_ms,"
       "static_capacity_req_s,static_limit,sim_capacity_req_s,sim_fails_req_s,sim_probes,"
       "sim_tokens_per_s_per_gpu,sim_tokens_per_s_per_user,sim_ttft_p_ms,sim_tpot_p_ms,"
       "gpu_hours_per_million_tokens,limited_by,sim_over_static_per_gpu,sim_over_static_per_user,why\n";
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const Candidate& c = r.candidates[i];
    const CandidateAxes& a = c.axes;
    o << i << "," << a.label() << "," << a.nodes << "," << a.gpus << "," << a.shape.label() << ","
      << a.ep_size << "," << a.attention_tp << "," << a.expert_tp << "," << a.pipeline_stages << ","
      << a.redundant_experts << "," << a.engine << "," << a.weights << "," << a.kv_cache << ","
      << (a.two_batch_overlap ? 1 : 0) << "," << (a.mtp ? 1 : 0) << "," << a.max_batched_tokens << ","
      << a.max_batch_size << "," << c.status << ",";
    if (c.has_static) {
      const StaticFigures& s = c.st;
      o << num(s.decode_batch, 0) << "," << num(s.tokens_per_s_per_gpu, 2) << ","
        << num(s.tokens_per_s_per_user, 2) << "," << num(s.tpot_s * 1e3, 2) << "," << num(s.ttft_s * 1e3, 1)
        << "," << num(s.capacity_req_s, 3) << "," << csv_quote(s.limit) << ",";
    } else {
      o << ",,,,,,,";
    }
    const SimFigures& f = c.sim;
    if (f.done && f.error.empty()) {
      o << num(f.capacity_req_s, 3) << "," << num(f.fails_req_s, 3) << "," << f.probes << ","
        << num(f.tokens_per_s_per_gpu, 2) << "," << num(f.tokens_per_s_per_user, 2) << ","
        << num(f.ttft_p_s * 1e3, 1) << "," << num(f.tpot_p_s * 1e3, 2) << ","
        << num(f.gpu_hours_per_million_tokens, 3) << "," << csv_quote(f.limited_by) << ","
        << ratio(f.tokens_per_s_per_gpu, c.st.tokens_per_s_per_gpu) << ","
        << ratio(f.tokens_per_s_per_user, c.st.tokens_per_s_per_user) << ",";
    } else {
      o << ",,,,,,,,,,,";
    }
    o << csv_quote(c.why) << "\n";
  }
  return o.str();
}

Json static_json(const StaticFigures& s) {
  return Json{{"decode_batch", s.decode_batch},
              {"kv_limited", s.kv_limited},
              {"decode_step_s", s.decode_step_s},
              {"prefill_step_s", s.prefill_step_s},
              {"tokens_per_s_per_gpu", s.tokens_per_s_per_gpu},
              {"tokens_per_s_per_user", s.tokens_per_s_per_user},
              {"tpot_s", s.tpot_s},
              {"ttft_s", s.ttft_s},
              {"capacity_req_s", s.capacity_req_s},
              {"limit", s.limit}};
}

Json sim_json(const SimFigures& f) { return f.done ? sim_figures_json(f) : Json(); }

Json point_json(std::size_t id, const Candidate& c) {
  const CandidateAxes& a = c.axes;
  Json j{{"id", id},
         {"label", a.label()},
         {"axes",
          {{"nodes", a.nodes},
           {"gpus", a.gpus},
           {"pools", a.shape.label()},
           {"ep_size", a.ep_size},
           {"attention_tp", a.attention_tp},
           {"expert_tp", a.expert_tp},
           {"pipeline_stages", a.pipeline_stages},
           {"redundant_experts", a.redundant_experts},
           {"engine", a.engine},
           {"weights", a.weights},
           {"kv_cache", a.kv_cache},
           {"two_batch_overlap", a.two_batch_overlap},
           {"mtp", a.mtp},
           {"max_batched_tokens", a.max_batched_tokens},
           {"max_batch_size", a.max_batch_size}}},
         {"status", c.status}};
  if (!c.why.empty()) j["why"] = c.why;
  if (c.has_static) j["static"] = static_json(c.st);
  if (c.sim.done) j["simulated"] = sim_json(c.sim);
  return j;
}

// A front point's scenario at its capacity (runs as is; `--capacity` searches again from there).
Json front_scenario(const Candidate& c) {
  Json s = c.scenario;
  s["workload"]["arrival"]["rate_per_s"] = c.sim.capacity_req_s;
  s["description"] = s["description"].get<std::string>() + ". Found on the front of the search at " +
                     num(c.sim.capacity_req_s, 3) + " requests/s (the highest rate that held its SLA): " +
                     num(c.sim.tokens_per_s_per_gpu, 1) + " output tokens/s per GPU, " +
                     num(c.sim.tokens_per_s_per_user, 1) + " tokens/s per user.";
  return s;
}

std::string table(const SearchResult& r, const std::vector<std::string>& files) {
  std::ostringstream o;
  char line[512];
  std::snprintf(line, sizeof line, "%-3s %-58s %9s %9s %9s %9s %8s %8s %8s  %s\n", "#", "deployment",
                "st tok/G", "sim tok/G", "st tok/u", "sim tok/u", "cap r/s", "GPUh/Mt", "P99 TPOT",
                "limited by");
  o << "Pareto front (output tokens/s per GPU against tokens/s per user; st = static, sim = simulated at "
       "capacity under the SLA)\n"
    << line;
  for (std::size_t k = 0; k < r.front.size(); ++k) {
    const Candidate& c = r.candidates[r.front[k]];
    std::snprintf(line, sizeof line, "%-3zu %-58s %9.1f %9.1f %9.1f %9.1f %8.2f %8.3f %6.1fms  %s\n", k + 1,
                  c.axes.label().c_str(), c.st.tokens_per_s_per_gpu, c.sim.tokens_per_s_per_gpu,
                  c.st.tokens_per_s_per_user, c.sim.tokens_per_s_per_user, c.sim.capacity_req_s,
                  c.sim.gpu_hours_per_million_tokens, c.sim.tpot_p_s * 1e3, c.sim.limited_by.c_str());
    o << line;
  }
  std::map<std::string, int> counts;
  for (const Candidate& c : r.candidates) ++counts[c.status];
  o << "\n" << r.candidates.size() << " candidates:";
  for (const auto& [status, n] : counts) o << " " << status << " " << n << ";";
  o << " " << r.rounds << " verification round(s)\n";
  if (r.recommended != static_cast<std::size_t>(-1)) {
    const Candidate& c = r.candidates[r.recommended];
    o << "\nRecommended: " << c.axes.label() << "\n"
      << "  capacity " << num(c.sim.capacity_req_s, 2)
      << " requests/s at the SLA (the search's bracket: fails at " << num(c.sim.fails_req_s, 2) << "), "
      << num(c.sim.tokens_per_s_per_gpu, 1) << " output tokens/s per GPU, "
      << num(c.sim.tokens_per_s_per_user, 1) << " tokens/s per user, "
      << num(c.sim.gpu_hours_per_million_tokens, 3) << " GPU-hours per million output tokens\n"
      << "  limited by " << c.sim.limited_by << ": " << c.sim.limited_why << "\n"
      << "  static estimate: " << num(c.st.tokens_per_s_per_gpu, 1) << " tokens/s per GPU, "
      << num(c.st.tokens_per_s_per_user, 1) << " tokens/s per user, " << num(c.st.capacity_req_s, 2)
      << " requests/s, bound by " << c.st.limit << "\n";
    for (std::size_t k = 0; k < r.front.size(); ++k) {
      if (r.front[k] == r.recommended) o << "  scenario: " << files[k] << "\n";
    }
    if (!r.recommendation_note.empty()) o << "  (" << r.recommendation_note << ")\n";
  } else {
    o << "\nNo deployment met the SLA in simulation.\n";
  }
  return o.str();
}

}  // namespace

void execute_search(const SearchCommandOptions& o) {
  Json doc = load_json_file(o.file);
  if (o.seed >= 0 && doc.is_object() && doc.contains("run") && doc["run"].is_object())
    doc["run"]["seed"] = o.seed;
  const SearchSpec spec = parse_search_spec(doc);
  const std::filesystem::path dir = o.out_dir.empty() ? std::filesystem::path("out") / ("search-" + spec.name)
                                                      : std::filesystem::path(o.out_dir);
  prepare_output_dir(dir);
  SearchOptions so;
  so.jobs = o.jobs;
  so.out_dir = dir;
  if (!o.quiet) so.progress = [](const std::string& s) { std::cerr << s << "\n"; };
  const SearchResult r = run_search(spec, so);
  if (!r.output_rank) return;                  // under mpirun rank 0 writes
  std::filesystem::remove_all(dir / "front");  // a resumed search rewrites its whole front
  std::vector<std::string> files;
  Json front = Json::array();
  for (std::size_t k = 0; k < r.front.size(); ++k) {
    const Candidate& c = r.candidates[r.front[k]];
    char prefix[32];
    std::snprintf(prefix, sizeof prefix, "%02zu-", k + 1);
    const std::string name = std::string("front/") + prefix + c.axes.label() + ".json";
    write_text_file((dir / name).string(), front_scenario(c).dump(2) + "\n");
    files.push_back((dir / name).string());
    Json p = point_json(r.front[k], c);
    p["scenario_file"] = name;  // relative to the output folder
    front.push_back(p);
  }
  Json points = Json::array();
  for (std::size_t i = 0; i < r.candidates.size(); ++i) points.push_back(point_json(i, r.candidates[i]));
  Json static_front = Json::array();
  for (const std::size_t i : r.static_front) static_front.push_back(i);
  Json out{{"spec", doc},        {"candidates", r.candidates.size()},
           {"rounds", r.rounds}, {"static_front", static_front},
           {"front", front},     {"target_tokens_per_s_per_user", spec.target_tokens_per_s_per_user}};
  if (r.recommended != static_cast<std::size_t>(-1)) {
    out["recommended"] = point_json(r.recommended, r.candidates[r.recommended]);
    if (!r.recommendation_note.empty()) out["recommended"]["note"] = r.recommendation_note;
  }
  out["points"] = points;
  write_text_file((dir / "search.csv").string(), csv(r));
  write_text_file((dir / "search.json").string(), out.dump(2) + "\n");
  std::cout << table(r, files);
  std::cout << "\nsearch: " << (dir / "search.csv").string() << ", " << (dir / "search.json").string() << ", "
            << (dir / "front").string() << "/\n";
}

}  // namespace moesim
