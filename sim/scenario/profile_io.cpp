#include "sim/scenario/profile_io.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "hwmodels/calibration_fit.h"
#include "hwmodels/grouped_gemm_tiles.h"
#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/catalog.h"
#include "sim/scenario/json_reader.h"
#include "sim/scenario/scenario_parser.h"

namespace moesim {

namespace {

using nlohmann::json;

// A JSON value with the file and JSON path it came from, so every error names both.
class Node {
 public:
  Node(const json& j, std::string path, const std::string& file)
      : j_(j), path_(std::move(path)), file_(file) {}

  [[noreturn]] void fail(const std::string& msg) const {
    throw ProfileError(file_ + ": " + (path_.empty() ? "(top level)" : path_) + ": " + msg);
  }
  [[nodiscard]] bool has(const char* key) const { return j_.is_object() && j_.contains(key); }
  [[nodiscard]] Node at(const std::string& key) const {
    if (!j_.is_object()) fail("expected an object");
    if (!j_.contains(key)) Node(j_, join(key), file_).fail("missing");
    return {j_.at(key), join(key), file_};
  }
  [[nodiscard]] std::vector<Node> items() const {
    if (!j_.is_array()) fail("expected an array");
    std::vector<Node> out;
    for (std::size_t i = 0; i < j_.size(); ++i)
      out.emplace_back(j_[i], path_ + "[" + std::to_string(i) + "]", file_);
    return out;
  }
  [[nodiscard]] std::vector<std::pair<std::string, Node>> members() const {
    if (!j_.is_object()) fail("expected an object");
    std::vector<std::pair<std::string, Node>> out;
    for (const auto& [k, v] : j_.items()) out.emplace_back(k, Node(v, join(k), file_));
    return out;
  }
  // Finite and at most 1e18 (FLOP and byte counts of one kernel reach 1e15), so int64 casts hold.
  [[nodiscard]] double number() const {
    if (!j_.is_number()) fail("expected a number");
    const double v = j_.get<double>();
    if (!std::isfinite(v) || std::abs(v) > 1e18) fail(j_.dump() + " is out of range (at most 1e18)");
    return v;
  }
  [[nodiscard]] double positive() const {
    const double v = number();
    if (!(v > 0)) fail(std::to_string(v) + " is not positive");
    return v;
  }
  [[nodiscard]] std::string str() const {
    if (!j_.is_string()) fail("expected a string");
    return j_.get<std::string>();
  }
  [[nodiscard]] bool boolean() const {
    if (!j_.is_boolean()) fail("expected true or false");
    return j_.get<bool>();
  }
  // Strict objects: a misspelled key is an error, never ignored.
  void only(std::initializer_list<std::string_view> keys) const {
    for (const auto& [k, v] : members()) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) v.fail("unknown key");
    }
  }
  [[nodiscard]] const json& raw() const { return j_; }

 private:
  [[nodiscard]] std::string join(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }
  const json& j_;
  std::string path_;
  const std::string& file_;
};

json parse_json(std::string_view text, const std::string& file) {
  std::optional<json> j;
  try {
    j = parse_json_if_valid(text, file);  // nesting and numbers bounded as for scenarios
  } catch (const InputError& e) {
    throw ProfileError(e.what());
  }
  if (j) return *j;
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    throw ProfileError(file + ": not valid JSON: " + e.what());
  }
}

Precision precision_of(const Node& n) {
  const auto p = parse_precision(n.str());
  if (!p) n.fail("unknown precision '" + n.str() + "'");
  return *p;
}

std::string fmt(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

void add_platform(Measurements& m, const Node& root) {
  const Node c = root.at("ceilings");
  m.copy_bytes_per_s = c.at("d2d_copy_GBps").positive() * 1e9;
  m.bf16_flops_per_s = c.at("bf16_gemm_8192_TFLOPs").positive() * 1e12;
  if (root.has("launch") && root.at("launch").has("graph_tiny_kernel_us"))
    m.graph_launch_s = root.at("launch").at("graph_tiny_kernel_us").positive() * 1e-6;
  // FP8 weights on Hopper run on the FP8 tensor-core path: scale by the measured ceiling ratio. The INT8
  // figure in platform.json comes from a slow library path (122 TOP/s), so INT8 keeps the BF16 rate.
  if (c.has("fp8_gemm_8192_TFLOPs")) {
    m.rate_scale.emplace_back(Precision::kFP8,
                              c.at("fp8_gemm_8192_TFLOPs").positive() * 1e12 / m.bf16_flops_per_s);
  }
}

Precision file_precision(const Node& root) {
  return root.has("precision") ? precision_of(root.at("precision")) : Precision::kBF16;
}

// The weight format of one expert shape: the file's "precision", else what its stored weight bytes per
// parameter say (2: BF16, 1: FP8), else BF16.
Precision shape_precision(const Node& root, const Node& shape, double hidden, double inter) {
  if (root.has("precision") || !shape.has("weight_bytes")) return file_precision(root);
  const double per_param = shape.at("weight_bytes").positive() / (3.0 * hidden * inter);
  if (std::abs(per_param - 1.0) < 0.01) return Precision::kFP8;
  if (std::abs(per_param - 2.0) < 0.01) return Precision::kBF16;
  shape.at("weight_bytes").fail("is neither 1 nor 2 bytes per parameter of 3 x hidden x inter");
}

void add_expert_ffn(Measurements& m, const Node& root) {
  for (const auto& [name, shape] : root.at("shapes").members()) {
    const auto hidden = static_cast<std::int64_t>(shape.at("hidden").positive());
    const auto inter = static_cast<std::int64_t>(shape.at("inter").positive());
    const Precision prec = shape_precision(root, shape, double(hidden), double(inter));
    const std::string sweep = "expert_ffn " + name +
                              (prec == Precision::kBF16 ? "" : " " + std::string(to_string(prec))) +
                              " H=" + std::to_string(hidden) + " I=" + std::to_string(inter);
    for (const Node& row : shape.at("rows").items()) {
      const auto tokens = static_cast<std::int64_t>(row.at("T").positive());
      // A kernel that pads its rows (FP8 _scaled_mm: to 16) does the padded work.
      const auto rows =
          row.has("padded_T") ? static_cast<std::int64_t>(row.at("padded_T").positive()) : tokens;
      const BytesFlops bf =
          work_bytes_flops(ExpertFfnWork{.tokens = rows, .hidden = hidden, .inter = inter, .weights = prec});
      std::vector<double> parts;
      if (row.has("up_ms") && row.has("down_ms"))
        parts = {row.at("up_ms").positive() * 1e-3, row.at("down_ms").positive() * 1e-3};
      m.points.push_back({.op = CostOp::kExpertFfn,
                          .precision = prec,
                          .sweep = sweep,
                          .label = "T=" + std::to_string(tokens),
                          .shape_a = hidden,
                          .shape_b = inter,
                          .bytes = bf.bytes,
                          .flops = bf.flops,
                          .seconds = row.at("ffn_ms").positive() * 1e-3,
                          .parts_s = parts,
                          .is_anomaly = false,
                          .counts = {}});
    }
  }
}

// moe_layer_<model>_ep<N>.json: one MoE layer's experts on one GPU for a per-expert count vector, timed as
// one grouped launch (grouped_ms) and as a loop of expert FFNs (loop_ms). BF16.
void add_moe_layer(Measurements& m, const Node& root) {
  // The SMs the grouped kernel's tiles were spread over (hwmodels/grouped_gemm_tiles.h).
  const auto sms = static_cast<std::int64_t>(root.at("meta").at("sm_count").positive());
  for (const Node& c : root.at("cases").items()) {
    const auto hidden = static_cast<std::int64_t>(c.at("hidden").positive());
    const auto inter = static_cast<std::int64_t>(c.at("inter").positive());
    const std::string law = c.at("law").str();
    std::vector<std::int32_t> counts;
    std::int64_t pairs = 0;
    std::int64_t touched = 0;
    for (const Node& n : c.at("counts").items()) {
      const double v = n.number();
      if (v < 0 || v != std::floor(v)) n.fail("expected a token count (a whole number >= 0)");
      counts.push_back(static_cast<std::int32_t>(v));
      pairs += counts.back();
      touched += counts.back() > 0 ? 1 : 0;
    }
    if (c.has("local_experts") && static_cast<double>(counts.size()) != c.at("local_experts").number())
      c.at("counts").fail("has " + std::to_string(counts.size()) + " entries, not local_experts");
    if (pairs == 0) c.at("counts").fail("no expert has tokens");
    const std::string shape = "H=" + std::to_string(hidden) + " I=" + std::to_string(inter) +
                              " E=" + std::to_string(counts.size()) + " " + law;
    const std::string label = "T=" + fmt(c.at("tokens").positive());
    // The weight streaming stretched by the kernel's SM under-fill at these exact counts (the fit is then of
    // the kernel at full occupancy; the cost model stretches it back by the counts it is given).
    std::vector<std::int64_t> rows(counts.begin(), counts.end());
    const double stretch = grouped_experts_stretch(rows, static_cast<std::int64_t>(counts.size()), hidden,
                                                   inter, {.sms = sms, .sm100 = false});
    const BytesFlops g = grouped_stream_bytes_flops(
        GroupedExpertsWork{.experts = touched, .tokens = pairs, .hidden = hidden, .inter = inter}, stretch);
    m.points.push_back({.op = CostOp::kGroupedExperts,
                        .precision = Precision::kBF16,
                        .sweep = "grouped_experts " + shape,
                        .label = label,
                        .shape_a = hidden,
                        .shape_b = inter,
                        .bytes = g.bytes,
                        .flops = g.flops,
                        .seconds = c.at("grouped_ms").positive() * 1e-3,
                        .parts_s = {},
                        .is_anomaly = false,
                        .counts = counts});
    BytesFlops loop;
    for (const std::int32_t n : counts) {
      if (n == 0) continue;
      const BytesFlops one = work_bytes_flops(ExpertFfnWork{.tokens = n, .hidden = hidden, .inter = inter});
      loop.bytes += one.bytes;
      loop.flops += one.flops;
    }
    m.points.push_back({.op = CostOp::kExpertLoop,
                        .precision = Precision::kBF16,
                        .sweep = "expert_loop " + shape,
                        .label = label,
                        .shape_a = hidden,
                        .shape_b = inter,
                        .bytes = loop.bytes,
                        .flops = loop.flops,
                        .seconds = c.at("loop_ms").positive() * 1e-3,
                        .parts_s = {},
                        .is_anomaly = false,
                        .counts = counts});
  }
}

// permute_bf16.json: gather of T x top_k rows into expert order, and the weighted scatter-add back. Both
// move 2 x rows x hidden BF16 elements (read + write; the harness CSV's convention).
void add_permute(Measurements& m, const Node& root) {
  const double l2 =
      root.has("meta") && root.at("meta").has("l2_bytes") ? root.at("meta").at("l2_bytes").positive() : 0;
  for (const Node& c : root.at("cases").items()) {
    const double t = c.at("tokens").positive();
    const double h = c.at("hidden").positive();
    const double k = c.at("top_k").positive();
    const std::string shape = "H=" + fmt(h) + " k=" + fmt(k);
    // The gather's source rows are read from L2 when they fit (gather_bytes); the scatter-add moves every
    // row in and out (2 x rows x hidden BF16 elements, the harness CSV's convention).
    for (const auto& [op, key] :
         {std::pair{CostOp::kPermute, "dispatch_ms"}, std::pair{CostOp::kUnpermute, "combine_ms"}}) {
      m.points.push_back(
          {.op = op,
           .precision = Precision::kBF16,
           .sweep = std::string(to_string(op)) + " " + shape,
           .label = "T=" + fmt(t),
           .shape_a = 0,
           .shape_b = 0,
           .bytes = op == CostOp::kPermute ? gather_bytes(t, k, 2.0 * h, l2) : 2.0 * 2.0 * t * k * h,
           .flops = 0,
           .seconds = c.at(key).positive() * 1e-3,
           .parts_s = {},
           .is_anomaly = false,
           .counts = {}});
    }
  }
}

// The GQA MoE shape a whole-model or layer-op file's `config` gives (both files describe one model).
void read_gqa_moe_shape(const Node& c, GqaMoeShape& s) {
  s.hidden = static_cast<std::int64_t>(c.at("hidden").positive());
  s.q_heads = static_cast<int>(c.at("q_heads").positive());
  s.kv_heads = static_cast<int>(c.at("kv_heads").positive());
  s.head_dim = static_cast<int>(c.at("head_dim").positive());
  s.experts = static_cast<int>(c.at("experts").positive());
  s.top_k = static_cast<int>(c.at("top_k").positive());
  s.expert_inter = static_cast<std::int64_t>(c.at("expert_inter").positive());
}

// model_step_<model>.json: whole-model steps, kept apart from the kernel points (they check the
// composition; nothing is fitted on them).
void add_model_steps(Measurements& m, const Node& root, const std::string& file) {
  if (!m.steps.empty()) root.fail("a second whole-model file (" + file + "); give one at a time");
  const Node c = root.at("config");
  GqaMoeShape& s = m.step_model;
  read_gqa_moe_shape(c, s);
  s.layers = static_cast<int>(c.at("layers").positive());
  s.vocab = static_cast<std::int64_t>(c.at("vocab").positive());
  m.step_model_name = std::filesystem::path(file).stem().string();
  if (root.has("meta") && root.at("meta").has("l2_bytes"))
    m.step_l2_bytes = root.at("meta").at("l2_bytes").positive();
  if (root.has("meta") && root.at("meta").has("sm_count"))
    m.step_sms = static_cast<std::int64_t>(root.at("meta").at("sm_count").positive());
  for (const Node& d : root.at("decode").items()) {
    const auto b = static_cast<std::int64_t>(d.at("B").positive());
    const auto l = static_cast<std::int64_t>(d.at("L").positive());
    m.steps.push_back(
        {.label = "decode " + d.at("law").str() + " B=" + std::to_string(b) + " L=" + std::to_string(l),
         .step = {.is_prefill = false,
                  .batch = b,
                  .context = l,
                  .tokens = b,
                  .experts_touched = d.at("experts_touched_mean").positive()},
         .seconds = d.at("step_ms").positive() * 1e-3});
  }
  if (root.has("prefill")) {
    for (const Node& p : root.at("prefill").items()) {
      const auto t = static_cast<std::int64_t>(p.at("T").positive());
      // A prefill chunk of T >= experts * ... tokens touches every expert.
      const double touched = std::min<double>(s.experts, double(t) * s.top_k);
      m.steps.push_back(
          {.label = "prefill T=" + std::to_string(t),
           .step = {.is_prefill = true, .batch = 1, .context = 0, .tokens = t, .experts_touched = touched},
           .seconds = p.at("ms").positive() * 1e-3});
    }
  }
}

// layer_ops_<model>.json (hwmodels/cuda/layer_ops_sweep.py): each op of one layer alone, and the grouped
// experts by touched count.
void add_layer_ops(Measurements& m, const Node& root, const std::string& file) {
  if (!m.layer_ops.ops.empty()) root.fail("a second layer-op file (" + file + "); give one at a time");
  const Node c = root.at("config");
  read_gqa_moe_shape(c, m.layer_ops.model);
  for (const Node& o : root.at("ops").items()) {
    const double kernels = o.at("kernels").number();
    if (kernels < 0 || kernels != std::floor(kernels)) o.at("kernels").fail("is not a count");
    m.layer_ops.ops.push_back({.batch = static_cast<std::int64_t>(o.at("B").positive()),
                               .context = static_cast<std::int64_t>(o.at("L").positive()),
                               .op = o.at("op").str(),
                               .seconds = o.at("us").positive() * 1e-6,
                               .kernels = static_cast<int>(kernels)});
  }
  for (const Node& g : root.at("grouped_by_touched").items()) {
    m.layer_ops.grouped.push_back({.batch = static_cast<std::int64_t>(g.at("B").positive()),
                                   .touched = static_cast<int>(g.at("touched").positive()),
                                   .seconds = g.at("us").positive() * 1e-6});
  }
}

void add_gemm(Measurements& m, const Node& root) {
  const Precision prec = file_precision(root);
  for (const Node& row : root.at("rows").items()) {
    const GemmWork w{.m = static_cast<std::int64_t>(row.at("M").positive()),
                     .n = static_cast<std::int64_t>(row.at("N").positive()),
                     .k = static_cast<std::int64_t>(row.at("K").positive()),
                     .weights = prec};
    const BytesFlops bf = work_bytes_flops(w);
    m.points.push_back({.op = CostOp::kGemm,
                        .precision = prec,
                        .sweep = "gemm N=" + std::to_string(w.n) + " K=" + std::to_string(w.k),
                        .label = "M=" + std::to_string(w.m),
                        .shape_a = w.n,
                        .shape_b = w.k,
                        .bytes = bf.bytes,
                        .flops = bf.flops,
                        .seconds = row.at("ms").positive() * 1e-3,
                        .parts_s = {},
                        .is_anomaly = false,
                        .counts = {}});
  }
}

// Reads "Hq=32" style figures from the attention file's note (the file states its shape only there).
double note_figure(const Node& note, const std::string& key) {
  const std::string s = note.str();
  const auto pos = s.find(" " + key + "=");
  if (pos == std::string::npos) note.fail("does not state " + key + "=");
  return std::stod(s.substr(pos + key.size() + 2));
}

void add_attention(Measurements& m, const Node& root) {
  const Node note = root.at("note");
  const double hq = note_figure(note, "Hq");
  const double hkv = note_figure(note, "Hkv");
  const double d = note_figure(note, "D");
  const std::string shape = "Hq=" + fmt(hq) + " Hkv=" + fmt(hkv) + " D=" + fmt(d);
  if (root.has("decode")) {
    for (const Node& row : root.at("decode").items()) {
      const double b = row.at("B").positive();
      const double l = row.at("L").positive();
      const AttentionWork w = decode_attention_work(b, l, hq, hkv, d);
      m.points.push_back({.op = CostOp::kAttentionDecode,
                          .precision = Precision::kBF16,
                          .sweep = "attention_decode " + shape,
                          .label = "B=" + fmt(b) + " L=" + fmt(l),
                          .shape_a = 0,
                          .shape_b = 0,
                          .bytes = w.bytes,
                          .flops = w.flops,
                          .seconds = row.at("ms").positive() * 1e-3,
                          .parts_s = {},
                          .is_anomaly = false,
                          .counts = {}});
    }
  }
  if (root.has("prefill")) {
    for (const Node& row : root.at("prefill").items()) {
      const double l = row.at("L").positive();
      const AttentionWork w = prefill_attention_work(l, hq, hkv, d);
      m.points.push_back({.op = CostOp::kAttentionPrefill,
                          .precision = Precision::kBF16,
                          .sweep = "attention_prefill " + shape,
                          .label = "L=" + fmt(l),
                          .shape_a = 0,
                          .shape_b = 0,
                          .bytes = w.bytes,
                          .flops = w.flops,
                          .seconds = row.at("ms").positive() * 1e-3,
                          .parts_s = {},
                          .is_anomaly = false,
                          .counts = {}});
    }
  }
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream s(line);
  while (std::getline(s, cell, sep)) out.push_back(cell);
  return out;
}

// The CSV of hwmodels/cuda/calibrate_harness.cu: one line per (kernel, precision, shape, tokens), times of
// one launch covering `experts` experts. Expert FFN points are per expert (the fixed cost is shared by the
// group, as in a grouped launch); permute/unpermute move 2 * tokens * hidden BF16 elements.
void add_harness_csv(Measurements& m, std::string_view text, const std::string& file) {
  std::istringstream in{std::string(text)};
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = split(line, ',');
  const std::vector<std::string> want = {"kernel", "precision", "experts",  "tokens_per_expert",
                                         "hidden", "inter",     "median_us"};
  if (header.size() < want.size() || !std::equal(want.begin(), want.end(), header.begin())) {
    throw ProfileError(
        file +
        ":1: header must start with kernel,precision,experts,tokens_per_expert,hidden,inter,median_us");
  }
  int line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const auto where = file + ":" + std::to_string(line_no) + ": ";
    const std::vector<std::string> c = split(line, ',');
    if (c.size() < want.size()) throw ProfileError(where + "expected at least 7 columns");
    const auto op = parse_cost_op(c[0]);
    const auto prec = parse_precision(c[1]);
    if (!op) throw ProfileError(where + "unknown kernel '" + c[0] + "'");
    if (!prec) throw ProfileError(where + "unknown precision '" + c[1] + "'");
    std::int64_t experts = 0, tokens = 0, hidden = 0, inter = 0;
    double us = 0;
    try {
      experts = std::stoll(c[2]);
      tokens = std::stoll(c[3]);
      hidden = std::stoll(c[4]);
      inter = std::stoll(c[5]);
      us = std::stod(c[6]);
    } catch (const std::exception&) {
      throw ProfileError(where + "expected numbers in columns 3-7");
    }
    // Positive, finite (stod reads "inf" and "nan") and in ranges whose products stay exact.
    if (experts <= 0 || tokens <= 0 || hidden <= 0 || inter < 0 || !(us > 0 && us <= kMaxNumber))
      throw ProfileError(where + "values must be positive and finite (median_us at most 1e12; inter >= 0)");
    if (experts > (1 << 20) || tokens > (1 << 30) || hidden > (1 << 20) || inter > (1 << 20))
      throw ProfileError(where + "experts, hidden and inter must be at most 2^20, tokens at most 2^30");
    CalibrationPoint p;
    p.op = *op;
    p.precision = *prec;
    p.label = "T=" + std::to_string(tokens);
    if (*op == CostOp::kExpertFfn) {
      const BytesFlops bf = work_bytes_flops(
          ExpertFfnWork{.tokens = tokens, .hidden = hidden, .inter = inter, .weights = *prec});
      p.shape_a = hidden;
      p.shape_b = inter;
      p.sweep = "ours expert_ffn H=" + std::to_string(hidden) + " I=" + std::to_string(inter) +
                " E=" + std::to_string(experts);
      p.bytes = bf.bytes;
      p.flops = bf.flops;
      p.seconds = us * 1e-6 / static_cast<double>(experts);
    } else {
      p.sweep = "ours " + c[0] + " H=" + std::to_string(hidden);
      p.bytes = 2.0 * 2.0 * static_cast<double>(tokens) * static_cast<double>(experts) *
                static_cast<double>(hidden);
      p.seconds = us * 1e-6;
    }
    m.points.push_back(std::move(p));
  }
}

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ProfileError(file.string() + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

CalibrationPoint parse_point(const Node& n) {
  n.only({"op", "precision", "sweep", "label", "shape", "bytes", "flops", "time_us", "parts_us", "anomaly",
          "counts"});
  const auto op = parse_cost_op(n.at("op").str());
  if (!op) n.at("op").fail("unknown operation '" + n.at("op").str() + "'");
  CalibrationPoint p{.op = *op,
                     .precision = precision_of(n.at("precision")),
                     .sweep = n.at("sweep").str(),
                     .label = n.at("label").str(),
                     .shape_a = 0,
                     .shape_b = 0,
                     .bytes = n.at("bytes").number(),
                     .flops = n.at("flops").number(),
                     .seconds = n.at("time_us").positive() * 1e-6,
                     .parts_s = {},
                     .is_anomaly = false,
                     .counts = {}};
  if (n.has("shape")) {
    const auto shape = n.at("shape").items();
    if (shape.size() != 2) n.at("shape").fail("expected two numbers");
    p.shape_a = static_cast<std::int64_t>(shape[0].number());
    p.shape_b = static_cast<std::int64_t>(shape[1].number());
  }
  if (n.has("parts_us")) {
    for (const Node& part : n.at("parts_us").items()) p.parts_s.push_back(part.positive() * 1e-6);
  }
  if (n.has("anomaly")) p.is_anomaly = n.at("anomaly").boolean();
  if (n.has("counts")) {
    for (const Node& c : n.at("counts").items()) p.counts.push_back(static_cast<std::int32_t>(c.number()));
  }
  return p;
}

OperationFit parse_fit(const Node& n) {
  n.only({"op", "precision", "shape", "fixed_us", "mem_gb_per_s", "compute_tflop_per_s", "sharpness"});
  const auto op = parse_cost_op(n.at("op").str());
  if (!op) n.at("op").fail("unknown operation '" + n.at("op").str() + "'");
  const double fixed_us = n.at("fixed_us").number();
  if (fixed_us < 0) n.at("fixed_us").fail("must not be negative");
  const double sharpness = n.at("sharpness").number();
  if (!(sharpness >= 1)) n.at("sharpness").fail("must be at least 1");
  std::int64_t a = 0;
  std::int64_t b = 0;
  if (n.has("shape")) {
    const auto shape = n.at("shape").items();
    if (shape.size() != 2) n.at("shape").fail("expected two numbers");
    a = static_cast<std::int64_t>(shape[0].positive());
    b = static_cast<std::int64_t>(shape[1].positive());
  }
  return {.op = *op,
          .precision = precision_of(n.at("precision")),
          .shape_a = a,
          .shape_b = b,
          .params = {.fixed_s = fixed_us * 1e-6,
                     .bytes_per_s = n.at("mem_gb_per_s").positive() * 1e9,
                     .flops_per_s = n.at("compute_tflop_per_s").positive() * 1e12,
                     .sharpness = sharpness}};
}

constexpr std::string_view kModelText =
    "t = fixed_us + (t_mem^p + t_compute^p)^(1/p), t_mem = bytes / mem_gb_per_s, t_compute = flops / "
    "compute_tflop_per_s, p = sharpness (hwmodels/profile_cost_model.h)";

}  // namespace

void add_measurements(Measurements& m, std::string_view text, const std::string& file_name) {
  if (text.substr(0, 7) == "kernel,") {
    add_harness_csv(m, text, file_name);
    m.origin.push_back(file_name + ": CUDA harness timings");
    return;
  }
  const json j = parse_json(text, file_name);
  const Node root(j, "", file_name);
  if (!j.is_object()) root.fail("expected an object");
  std::string what;
  const auto first_case = [&]() -> std::optional<Node> {
    if (!root.has("cases")) return std::nullopt;
    auto items = root.at("cases").items();
    if (items.empty()) root.at("cases").fail("is empty");
    return items.front();
  };
  if (root.has("config") && root.has("ops")) {
    add_layer_ops(m, root, file_name);
    what = "one layer op by op (compared with the composition)";
  } else if (root.has("config") && (root.has("decode") || root.has("prefill"))) {
    add_model_steps(m, root, file_name);
    what = "whole-model steps (composition check)";
  } else if (root.has("cases") && first_case()->has("loop_ms")) {
    add_moe_layer(m, root);
    what = "MoE layer, grouped and looped experts";
  } else if (root.has("cases") && first_case()->has("dispatch_ms")) {
    add_permute(m, root);
    what = "permute/unpermute";
  } else if (root.has("ceilings")) {
    add_platform(m, root);
    what = "platform ceilings";
  } else if (root.has("shapes")) {
    add_expert_ffn(m, root);
    what = "expert FFN sweeps";
  } else if (root.has("decode") || root.has("prefill")) {
    add_attention(m, root);
    what = "attention sweeps";
  } else if (root.has("rows")) {
    add_gemm(m, root);
    what = "GEMM grid";
  } else {
    root.fail("not a measurement file (no ceilings, shapes, rows, cases, ops, decode or prefill)");
  }
  std::string line = std::filesystem::path(file_name).filename().string() + ": " + what;
  if (root.has("meta")) {
    const Node meta = root.at("meta");
    if (meta.has("name")) line += ", " + meta.at("name").str();
    if (meta.has("date")) line += ", " + meta.at("date").str();
    if (meta.has("torch")) line += ", torch " + meta.at("torch").str();
  }
  m.origin.push_back(line);
}

Measurements read_measurements(const std::vector<std::filesystem::path>& files) {
  Measurements m;
  for (const auto& f : files) add_measurements(m, read_text(f), f.string());
  return m;
}

GpuProfile parse_profile(std::string_view json_text, const std::string& file_name) {
  const json j = parse_json(json_text, file_name);
  const Node root(j, "", file_name);
  root.only({"gpu", "origin", "model", "compute_rate_scale", "fits", "points"});
  GpuProfile p;
  p.gpu = root.at("gpu").str();
  if (root.has("origin")) {
    for (const Node& line : root.at("origin").items()) {
      // Appended in two steps: GCC 12's -Wrestrict misfires on the one-expression form once inlined here.
      if (!p.origin.empty()) p.origin += '\n';
      p.origin += line.str();
    }
  }
  if (root.has("compute_rate_scale")) {
    for (const auto& [name, v] : root.at("compute_rate_scale").members()) {
      const auto prec = parse_precision(name);
      if (!prec) v.fail("unknown precision");
      p.rate_scale.emplace_back(*prec, v.positive());
    }
  }
  for (const Node& f : root.at("fits").items()) p.fits.push_back(parse_fit(f));
  if (root.has("points")) {
    for (const Node& pt : root.at("points").items()) p.points.push_back(parse_point(pt));
  }
  return p;
}

std::string profile_to_json(const GpuProfile& profile) {
  json j = json::object();
  j["gpu"] = profile.gpu;
  json origin = json::array();
  std::istringstream lines(profile.origin);
  for (std::string line; std::getline(lines, line);) origin.push_back(line);
  j["origin"] = origin;
  j["model"] = kModelText;
  json scale = json::object();
  for (const auto& [prec, s] : profile.rate_scale) scale[std::string(to_string(prec))] = s;
  j["compute_rate_scale"] = scale;
  json fits = json::array();
  for (const auto& f : profile.fits) {
    fits.push_back({{"op", to_string(f.op)},
                    {"precision", to_string(f.precision)},
                    {"fixed_us", f.params.fixed_s * 1e6},
                    {"mem_gb_per_s", f.params.bytes_per_s * 1e-9},
                    {"compute_tflop_per_s", f.params.flops_per_s * 1e-12},
                    {"sharpness", f.params.sharpness}});
    if (f.shape_a != 0 || f.shape_b != 0) fits.back()["shape"] = {f.shape_a, f.shape_b};
  }
  j["fits"] = fits;
  json points = json::array();
  for (const auto& p : profile.points) {
    json pt = {{"op", to_string(p.op)},      {"precision", to_string(p.precision)},
               {"sweep", p.sweep},           {"label", p.label},
               {"bytes", p.bytes},           {"flops", p.flops},
               {"time_us", p.seconds * 1e6}, {"anomaly", p.is_anomaly}};
    if (p.shape_a != 0 || p.shape_b != 0) pt["shape"] = {p.shape_a, p.shape_b};
    if (!p.counts.empty()) pt["counts"] = p.counts;
    if (!p.parts_s.empty()) {
      json parts = json::array();
      for (double s : p.parts_s) parts.push_back(s * 1e6);
      pt["parts_us"] = parts;
    }
    points.push_back(pt);
  }
  j["points"] = points;
  return j.dump(1) + "\n";
}

GpuProfile read_profile_file(const std::filesystem::path& file) {
  return parse_profile(read_text(file), file.string());
}

void write_profile_file(const std::filesystem::path& file, const GpuProfile& profile) {
  std::ofstream out(file, std::ios::binary);
  if (!out) throw ProfileError(file.string() + ": cannot write");
  out << profile_to_json(profile);
  if (!out) throw ProfileError(file.string() + ": write failed");
}

std::optional<GpuProfile> find_profile(std::string_view gpu_name) {
  std::string normal(gpu_name);
  std::transform(normal.begin(), normal.end(), normal.begin(),
                 [](unsigned char c) { return c == ' ' ? '-' : static_cast<char>(std::tolower(c)); });
  for (const std::string& name : {std::string(gpu_name), normal}) {
    const std::string key = "hwmodels/profiles/" + name + ".json";
    for (const auto& [path, text] : embedded_files()) {
      if (path == key) return parse_profile(text, key);
    }
  }
  return std::nullopt;
}

namespace {

// The reference fit's efficiency against its own datasheet on a large GEMM, by compute format: the
// all-shapes BF16 GEMM fit's compute asymptote over the BF16 peak, FP8 through the fit's measured FP8 rate.
struct GemmEfficiency {
  double bf16 = 0;
  double fp8 = 0;
};

GemmEfficiency reference_gemm_efficiency(const GpuProfile& reference, const GpuSpec& spec) {
  const OperationFit* gemm = reference.find_fit(CostOp::kGemm, Precision::kBF16);
  if (gemm == nullptr) {
    throw ProfileError(reference.gpu + ": no all-shapes BF16 GEMM fit to hold measured efficiencies against");
  }
  const double a = gemm->params.flops_per_s;
  return {.bf16 = a / spec.bf16_flops_per_s,
          .fp8 = a * reference.rate_scale_of(Precision::kFP8) / spec.peak_flops(Precision::kFP8)};
}

std::string catalog_path(const GpuSpec& gpu, const std::string& key) {
  return "scenarios/catalog/gpus.json: " + gpu.name + ".measured." + key;
}

// Target over reference of a fixed quantity (bandwidth, launch): both measured, or neither.
const MeasuredFigure* both_measured(const MeasuredFigure& target, const MeasuredFigure& reference,
                                    const GpuSpec& target_spec, const GpuSpec& reference_spec,
                                    const std::string& key) {
  if (!target.known()) return nullptr;
  if (!reference.known()) {
    throw ProfileError(catalog_path(target_spec, key) + ": needs the reference " + reference_spec.name +
                       "'s own measured." + key + " to be compared with");
  }
  return &reference;
}

// How a derived profile moves the reference fit: each factor measured where the target's catalog entry
// gives the figure, else a datasheet ratio; `origin` says which is which.
struct Derivation {
  double memory = 1;
  double compute_bf16 = 1;
  double compute_fp8 = 1;
  double fixed_shift_s = 0;
  double eff_bf16 = 0;  // the target's large-GEMM efficiencies (measured, else the reference fit's)
  double eff_fp8 = 0;
  double eff_fp4 = 0;
  bool measured_gemm = false;
  std::ostringstream origin;
};

void derive_memory_and_launch(Derivation& d, const GpuSpec& ref, const GpuSpec& target) {
  const double bw = target.hbm_bytes_per_s / ref.hbm_bytes_per_s;
  const MeasuredFigure& t = target.measured.hbm_bytes_per_s;
  if (const MeasuredFigure* r = both_measured(t, ref.measured.hbm_bytes_per_s, target, ref, "hbm_tb_per_s")) {
    d.memory = t.value / r->value;
    d.origin << "HBM measured " << t.value * 1e-12 << "/" << r->value * 1e-12 << " TB/s = " << d.memory
             << " (datasheet " << bw << ")";
  } else {
    d.memory = bw;
    d.origin << "HBM datasheet " << target.hbm_bytes_per_s * 1e-12 << "/" << ref.hbm_bytes_per_s * 1e-12
             << " TB/s = " << bw;
  }
  const MeasuredFigure& l = target.measured.launch_s;
  if (const MeasuredFigure* r = both_measured(l, ref.measured.launch_s, target, ref, "launch_us")) {
    d.fixed_shift_s = l.value - r->value;
    d.origin << ", launch measured " << l.value * 1e6 << " us against " << r->value * 1e6
             << " us: every fixed cost " << (d.fixed_shift_s >= 0 ? "+" : "") << d.fixed_shift_s * 1e6
             << " us";
  } else {
    d.origin << ", fixed costs the reference's";
  }
}

// Compute factor of one format: the datasheet ratio, times measured over reference efficiency if measured.
double derive_compute(Derivation& d, Precision q, const GpuSpec& ref, const GpuSpec& target,
                      double reference_eff, double& target_eff) {
  const double ratio = target.peak_flops(q) / ref.peak_flops(q);
  const MeasuredFigure& m = target.measured.gemm_eff(q);
  d.origin << ", " << to_string(q);
  target_eff = reference_eff;
  if (!m.known()) {
    d.origin << " datasheet " << ratio;
    return ratio;
  }
  d.measured_gemm = true;
  target_eff = m.value;
  d.origin << " measured efficiency " << m.value << " (the fit's " << reference_eff << ") x datasheet "
           << ratio << " = " << ratio * m.value / reference_eff;
  return ratio * m.value / reference_eff;
}

Derivation derive_factors(const GpuProfile& reference, const GpuSpec& ref, const GpuSpec& target) {
  Derivation d;
  d.origin.precision(3);
  d.origin << "derived from the " << reference.gpu << " fit: ";
  derive_memory_and_launch(d, ref, target);
  const bool any_gemm = target.measured.gemm_eff_bf16.known() || target.measured.gemm_eff_fp8.known() ||
                        target.measured.gemm_eff_fp4.known();
  // Without a measured efficiency the reference fit is not needed (and may lack a GEMM fit).
  const GemmEfficiency e = any_gemm ? reference_gemm_efficiency(reference, ref) : GemmEfficiency{1, 1};
  d.compute_bf16 = derive_compute(d, Precision::kBF16, ref, target, e.bf16, d.eff_bf16);
  d.compute_fp8 = derive_compute(d, Precision::kFP8, ref, target, e.fp8, d.eff_fp8);
  // Without FP8 tensor cores FP8 weights are dequantised: they run at BF16's rate and efficiency.
  if (target.fp8_flops_per_s <= 0) d.eff_fp8 = d.eff_bf16;
  // A native FP4 path: its measured efficiency, else FP8's on this GPU.
  d.eff_fp4 = target.measured.gemm_eff_fp4.known() ? target.measured.gemm_eff_fp4.value : d.eff_fp8;
  if (target.fp4_flops_per_s > 0) {
    d.origin << ", FP4 " << (target.measured.gemm_eff_fp4.known() ? "measured" : "FP8's") << " efficiency";
  }
  return d;
}

// A grouped expert fit at format `q` whose compute asymptote is the measured efficiency on this GPU's
// peak (the BF16 fit's memory, fixed cost and sharpness: how it grows with rows per expert).
void add_measured_grouped(GpuProfile& p, Derivation& d, const GpuSpec& target, Precision q,
                          const MeasuredFigure& m) {
  const OperationFit* base = p.find_fit(CostOp::kGroupedExperts, Precision::kBF16);
  if (!m.known() || base == nullptr) return;
  OperationFit f = *base;
  f.precision = q;
  f.params.flops_per_s = m.value * target.peak_flops(q);
  std::erase_if(p.fits,
                [&](const OperationFit& g) { return g.op == CostOp::kGroupedExperts && g.precision == q; });
  p.fits.push_back(f);
  d.origin << ", grouped " << to_string(q) << " measured efficiency " << m.value;
}

// The compute rate at which `f` takes the measured run's time (work `m.at_*` at `m.value` of `peak`), its
// memory, fixed cost and sharpness kept: t - fixed = (t_mem^p + t_compute^p)^(1/p) solved for t_compute.
double compute_rate_at(const RooflineFit& f, const MeasuredFigure& m, double peak, const std::string& path) {
  const double rest = m.at_flops / (m.value * peak) - f.fixed_s;
  const double t_mem = m.at_bytes / f.bytes_per_s;
  if (rest <= t_mem) {
    throw ProfileError(path + ".at: the measured run is faster than the fit's memory time and fixed cost");
  }
  const double p = f.sharpness;
  return m.at_flops / std::pow(std::pow(rest, p) - std::pow(t_mem, p), 1.0 / p);
}

// The attention fit of `op` and format `q` at the measured efficiency of this GPU's peak of `q`: the compute
// asymptote, or the rate that takes the measured run's time; the BF16 fit's memory (moved as every fit),
// fixed cost and sharpness stay (an FP8 fit is added beside the BF16 one).
void set_measured_attention(GpuProfile& p, Derivation& d, const GpuSpec& target, CostOp op, Precision q,
                            const MeasuredFigure& m, const std::string& key) {
  const OperationFit* base = p.find_fit(op, Precision::kBF16);
  if (!m.known() || base == nullptr) return;
  OperationFit f = *base;
  f.precision = q;
  const double peak = target.peak_flops(q);
  f.params.flops_per_s =
      m.at_flops > 0 ? compute_rate_at(f.params, m, peak, catalog_path(target, key)) : m.value * peak;
  std::erase_if(p.fits, [&](const OperationFit& g) { return g.op == op && g.precision == q; });
  p.fits.push_back(f);
  d.origin << ", " << to_string(op) << " " << to_string(q) << " measured efficiency " << m.value
           << (m.at_flops > 0 ? " on its run" : "");
}

void add_measured_attention(GpuProfile& p, Derivation& d, const GpuSpec& target) {
  const GpuMeasured& m = target.measured;
  const CostOp dec = CostOp::kAttentionDecode;
  set_measured_attention(p, d, target, dec, Precision::kBF16, m.attention_decode_eff,
                         "attention_decode_eff_bf16");
  set_measured_attention(p, d, target, dec, Precision::kFP8, m.attention_decode_eff_fp8,
                         "attention_decode_eff_fp8");
  set_measured_attention(p, d, target, CostOp::kAttentionPrefill, Precision::kBF16, m.attention_prefill_eff,
                         "attention_prefill_eff_bf16");
}

}  // namespace

GpuProfile derive_profile(const GpuProfile& reference, const GpuSpec& reference_spec, const GpuSpec& target) {
  GpuProfile p = reference;
  p.gpu = target.name;
  p.points.clear();  // measured on the reference, not on this GPU
  Derivation d = derive_factors(reference, reference_spec, target);
  for (auto& f : p.fits) {
    f.params.bytes_per_s *= d.memory;
    f.params.flops_per_s *= f.precision == Precision::kFP8 ? d.compute_fp8 : d.compute_bf16;
    if (d.fixed_shift_s != 0) f.params.fixed_s = std::max(0.0, f.params.fixed_s + d.fixed_shift_s);
  }
  // Formats fitted only in BF16 run at the BF16 fit times their rate relative to BF16 on this GPU:
  // without measured efficiencies, the reference's measured ratio to BF16 moved by the datasheet ratios
  // (a native FP4 path gets the FP8 efficiency against its datasheet).
  const double fp8_eff = reference.rate_scale_of(Precision::kFP8) /
                         (reference_spec.peak_flops(Precision::kFP8) / reference_spec.bf16_flops_per_s);
  auto relative = [&](double eff) { return d.measured_gemm ? eff / d.eff_bf16 : fp8_eff; };
  p.rate_scale.clear();
  p.rate_scale.emplace_back(
      Precision::kFP8, relative(d.eff_fp8) * target.peak_flops(Precision::kFP8) / target.bf16_flops_per_s);
  if (target.fp4_flops_per_s > 0) {
    p.rate_scale.emplace_back(Precision::kFP4,
                              relative(d.eff_fp4) * target.fp4_flops_per_s / target.bf16_flops_per_s);
  }
  add_measured_grouped(p, d, target, Precision::kFP8, target.measured.grouped_eff_fp8);
  add_measured_grouped(p, d, target, Precision::kFP4, target.measured.grouped_eff_fp4);
  add_measured_attention(p, d, target);
  std::string sources;
  for (const auto& [key, m] : target.measured.figures()) {
    if (m->known()) sources += "\nmeasured." + std::string(key) + ": " + m->source;
  }
  p.origin = d.origin.str() + sources + "\n" + reference.origin;
  return p;
}

namespace {

// What `cost_model` says of a derived profile: the basis, the factors its memory and BF16 compute terms
// were moved by (datasheet ratios unless the catalog gives measured figures, which it then names).
std::string derived_profile_name(const GpuProfile& reference, const GpuProfile& derived,
                                 const GpuSpec& ref_spec, const GpuSpec& gpu) {
  double hbm = gpu.hbm_bytes_per_s / ref_spec.hbm_bytes_per_s;
  double bf16 = gpu.bf16_flops_per_s / ref_spec.bf16_flops_per_s;
  std::string measured;
  for (const auto& [key, m] : gpu.measured.figures()) {
    if (m->known()) measured += (measured.empty() ? "" : ", ") + std::string(key);
  }
  const OperationFit* r = reference.find_fit(CostOp::kGemm, Precision::kBF16);
  const OperationFit* d = derived.find_fit(CostOp::kGemm, Precision::kBF16);
  if (!measured.empty() && r != nullptr && d != nullptr) {
    hbm = d->params.bytes_per_s / r->params.bytes_per_s;
    bf16 = d->params.flops_per_s / r->params.flops_per_s;
  }
  std::ostringstream name;
  name.precision(3);
  const bool same_arch = gpu.arch == ref_spec.arch;
  name << "hwmodels/profiles/" << gpu.profile_basis << ".json "
       << (same_arch ? "scaled to " : "efficiencies on the datasheet of ") << gpu.name << " ("
       << (same_arch ? "same kernels" : "not fitted on " + (gpu.arch.empty() ? gpu.name : gpu.arch))
       << ": HBM x" << hbm << ", BF16 x" << bf16;
  if (!measured.empty()) name << "; measured on " << gpu.name << ", not ratios: " << measured;
  name << ")";
  return name.str();
}

}  // namespace

std::unique_ptr<GpuCostModel> make_gpu_cost_model(const GpuSpec& gpu) {
  if (auto profile = find_profile(gpu.name)) {
    std::string name = "hwmodels/profiles/" + profile->gpu + ".json";
    return std::make_unique<ProfileCostModel>(std::move(*profile), gpu, std::move(name));
  }
  if (!gpu.profile_basis.empty()) {
    auto reference = find_profile(gpu.profile_basis);
    const Json& gpus = catalog("scenarios/catalog/gpus.json");
    if (reference && gpus.contains(gpu.profile_basis)) {
      JsonReader r(gpus.at(gpu.profile_basis), "scenarios/catalog/gpus.json: " + gpu.profile_basis);
      const GpuSpec ref_spec = parse_gpu(r, gpu.profile_basis);
      GpuProfile derived = derive_profile(*reference, ref_spec, gpu);
      std::string name = derived_profile_name(*reference, derived, ref_spec, gpu);
      return std::make_unique<ProfileCostModel>(std::move(derived), gpu, std::move(name));
    }
  }
  return std::make_unique<RooflineCostModel>(gpu);
}

std::optional<OperationFit> small_kernel_fit(const GpuProfile& profile, const Measurements& m) {
  if (m.graph_launch_s <= 0) return std::nullopt;
  // Measured, not fitted: a tiny kernel replayed in a CUDA graph (platform.json launch.graph_tiny_kernel_us)
  // is each small kernel's fixed cost; its bandwidth is the row gather's (permute), a copy kernel alike.
  const OperationFit* gather = profile.find_fit(CostOp::kPermute, Precision::kBF16);
  RooflineFit small = gather != nullptr ? gather->params : RooflineFit{.bytes_per_s = m.copy_bytes_per_s};
  small.fixed_s = m.graph_launch_s;
  return OperationFit{
      .op = CostOp::kSmallKernel, .precision = Precision::kBF16, .shape_a = 0, .shape_b = 0, .params = small};
}

}  // namespace moesim
