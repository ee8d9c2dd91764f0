// The calibration harness: checks moesim's CUDA kernels against a simple CPU loop on random inputs, then
// times them over the grid `moesim calibrate --fit` reads (tokens per expert 1..8192, the catalog models'
// expert shapes, BF16 and FP8 weights). Builds with nvcc alone (no Eigen, JSON or Boost on GPU machines):
//   nvcc -O3 -std=c++17 -arch=sm_90 -I<repo> hwmodels/cuda/calibrate_harness.cu -o calibrate_harness
// Timing (as shared/calibration/h200/README.md): CUDA events around CUDA graph replays (no launch gaps),
// warm-up, median of repeats, weights rotated over enough copies to cover 4x the L2 cache.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hwmodels/cuda/moe_kernels.cuh"

namespace {

using moesim::cuda::bf16;
using moesim::cuda::fp8;

#define CUDA_OK(call)                                                                               \
  do {                                                                                              \
    cudaError_t err_ = (call);                                                                      \
    if (err_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

struct Shape {
  const char* model;
  int hidden;
  int inter;
};
// Expert shapes of the catalog models (scenarios/catalog/models.json).
const Shape kShapes[] = {{"deepseek_v3", 7168, 2048},     {"mixtral_8x7b", 4096, 14336},
                         {"qwen3_235b_a22b", 4096, 1536}, {"qwen3_30b_a3b", 2048, 768},
                         {"kimi_k2", 7168, 2048},         {"gpt_oss_120b", 2880, 2880}};

float bf16_round(float v) { return __bfloat162float(__float2bfloat16(v)); }

template <typename T>
T* device_copy(const std::vector<T>& host) {
  T* d = nullptr;
  CUDA_OK(cudaMalloc(&d, host.size() * sizeof(T) + 16));
  CUDA_OK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <typename T>
std::vector<float> to_host_float(const T* d, size_t n) {
  std::vector<T> h(n);
  CUDA_OK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(h[i]);
  return out;
}

// Fills device memory with NaN (0xFFFF in BF16) so any element a kernel fails to write fails the check.
void poison(bf16* d, size_t n) { CUDA_OK(cudaMemset(d, 0xFF, n * sizeof(bf16))); }

struct Routing {
  std::vector<int> offsets, src_token, row_of;
};
Routing route(const std::vector<int>& ids, int tokens, int top_k, int experts) {
  Routing r;
  r.offsets.assign(experts + 1, 0);
  for (int e : ids) ++r.offsets[e + 1];
  for (int e = 0; e < experts; ++e) r.offsets[e + 1] += r.offsets[e];
  std::vector<int> next(r.offsets.begin(), r.offsets.end() - 1);
  r.src_token.resize(ids.size());
  r.row_of.resize(ids.size());
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < top_k; ++j) {
      const int row = next[ids[t * top_k + j]]++;
      r.src_token[row] = t;
      r.row_of[t * top_k + j] = row;
    }
  return r;
}

// ---- Correctness: kernels against a plain CPU loop on random inputs, ragged and zero-token experts. ----
template <typename W>
bool check_expert_ffn(const char* name, std::mt19937& rng) {
  const int hidden = 96, inter = 80;
  const std::vector<int> counts = {5, 0, 33, 1, 0, 70, 2};
  const int experts = static_cast<int>(counts.size());
  std::vector<int> offsets = {0};
  for (int c : counts) offsets.push_back(offsets.back() + c);
  const int rows = offsets.back();
  const int max_tokens = *std::max_element(counts.begin(), counts.end());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<bf16> x(size_t(rows) * hidden);
  std::vector<float> xf(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = __float2bfloat16(u(rng));
    xf[i] = __bfloat162float(x[i]);
  }
  std::vector<W> w13(size_t(experts) * hidden * 2 * inter), w2(size_t(experts) * inter * hidden);
  std::vector<float> s13(experts), s2(experts);
  for (int e = 0; e < experts; ++e) {
    s13[e] = 0.05f * (1 + e % 3);
    s2[e] = 0.04f * (1 + e % 2);
  }
  if (std::is_same<W, bf16>::value) {
    std::fill(s13.begin(), s13.end(), 1.0f);
    std::fill(s2.begin(), s2.end(), 1.0f);
  }
  const float wscale = std::is_same<W, bf16>::value ? 0.15f : 3.0f;
  for (auto& w : w13) w = W(u(rng) * wscale);
  for (auto& w : w2) w = W(u(rng) * wscale);
  bf16* dx = device_copy(x);
  W* dw13 = device_copy(w13);
  W* dw2 = device_copy(w2);
  float* ds13 = device_copy(s13);
  float* ds2 = device_copy(s2);
  int* doff = device_copy(offsets);
  bf16 *dact, *dy;
  CUDA_OK(cudaMalloc(&dact, size_t(rows) * inter * sizeof(bf16)));
  CUDA_OK(cudaMalloc(&dy, size_t(rows) * hidden * sizeof(bf16)));
  poison(dact, size_t(rows) * inter);
  poison(dy, size_t(rows) * hidden);
  moesim::cuda::launch_expert_ffn<W>(dx, dw13, ds13, dw2, ds2, dact, dy, doff, experts, max_tokens, hidden,
                                     inter, 0);
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> y = to_host_float(dy, size_t(rows) * hidden);
  double worst = 0;
  bool ok = true;
  for (int e = 0; e < experts; ++e)
    for (int r = offsets[e]; r < offsets[e + 1]; ++r) {
      std::vector<float> act(inter);
      for (int j = 0; j < inter; ++j) {
        double a = 0, b = 0;
        for (int h = 0; h < hidden; ++h) {
          const size_t base = size_t(e) * hidden * 2 * inter + size_t(h) * 2 * inter;
          a += xf[size_t(r) * hidden + h] * static_cast<float>(w13[base + j]) * s13[e];
          b += xf[size_t(r) * hidden + h] * static_cast<float>(w13[base + inter + j]) * s13[e];
        }
        act[j] = bf16_round(float(a / (1 + std::exp(-a)) * b));
      }
      for (int c = 0; c < hidden; ++c) {
        double s = 0;
        for (int j = 0; j < inter; ++j)
          s += act[j] * static_cast<float>(w2[size_t(e) * inter * hidden + size_t(j) * hidden + c]) * s2[e];
        const double got = y[size_t(r) * hidden + c];
        const double err = std::abs(got - s) / (std::abs(s) + 1e-2);
        worst = std::max(worst, std::isfinite(got) ? err : 1e9);
        if (!(err < 0.03)) ok = false;  // BF16 output (2^-8) plus an act value on a rounding boundary
      }
    }
  std::printf("check expert_ffn %-4s: %s (worst relative error %.2e)\n", name, ok ? "ok" : "FAILED", worst);
  cudaFree(dx);
  cudaFree(dw13);
  cudaFree(dw2);
  cudaFree(ds13);
  cudaFree(ds2);
  cudaFree(doff);
  cudaFree(dact);
  cudaFree(dy);
  return ok;
}

bool check_permute(std::mt19937& rng) {
  const int tokens = 301, top_k = 4, experts = 16, hidden = 64;
  std::uniform_int_distribution<int> pick(0, experts - 3);  // two experts stay empty
  std::vector<int> ids(size_t(tokens) * top_k);
  for (auto& e : ids) e = pick(rng);
  const Routing r = route(ids, tokens, top_k, experts);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<bf16> x(size_t(tokens) * hidden);
  for (auto& v : x) v = __float2bfloat16(u(rng));
  std::vector<float> w(ids.size());
  for (auto& v : w) v = 0.5f * (u(rng) + 2.0f) / 2.0f;
  const int rows = tokens * top_k;
  bf16* dx = device_copy(x);
  int* dsrc = device_copy(r.src_token);
  int* drow = device_copy(r.row_of);
  float* dw = device_copy(w);
  bf16 *dp, *dy;
  CUDA_OK(cudaMalloc(&dp, size_t(rows) * hidden * sizeof(bf16)));
  CUDA_OK(cudaMalloc(&dy, size_t(tokens) * hidden * sizeof(bf16)));
  poison(dp, size_t(rows) * hidden);
  poison(dy, size_t(tokens) * hidden);
  moesim::cuda::launch_permute(dx, dsrc, dp, rows, hidden, 0);
  moesim::cuda::launch_unpermute(dp, drow, dw, dy, tokens, top_k, hidden, 0);
  CUDA_OK(cudaDeviceSynchronize());
  const auto p = to_host_float(dp, size_t(rows) * hidden);
  const auto y = to_host_float(dy, size_t(tokens) * hidden);
  bool ok = true;
  for (int row = 0; row < rows; ++row)
    for (int h = 0; h < hidden; ++h)
      ok = ok && p[size_t(row) * hidden + h] == __bfloat162float(x[size_t(r.src_token[row]) * hidden + h]);
  std::printf("check permute      : %s\n", ok ? "ok" : "FAILED");
  bool ok2 = true;
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < hidden; ++h) {
      float s = 0;
      for (int j = 0; j < top_k; ++j) s += w[t * top_k + j] * __bfloat162float(x[size_t(t) * hidden + h]);
      const float got = y[size_t(t) * hidden + h];
      ok2 = ok2 && std::abs(got - s) <= 1e-2f * std::abs(s) + 1e-3f;
    }
  std::printf("check unpermute    : %s\n", ok2 ? "ok" : "FAILED");
  cudaFree(dx);
  cudaFree(dsrc);
  cudaFree(drow);
  cudaFree(dw);
  cudaFree(dp);
  cudaFree(dy);
  return ok && ok2;
}

// ---- Timing ----
struct Timing {
  double median_us, min_us, max_us;
  int repeats;
};

// Captures `copies` launches (launch(i) uses weight copy i) in one CUDA graph and times its replays.
template <typename F>
Timing time_graph(F launch, int copies, cudaStream_t s, double budget_s) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < copies; ++i) launch(i);
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  for (int w = 0; w < 2; ++w) CUDA_OK(cudaGraphLaunch(exec, s));  // warm-up
  CUDA_OK(cudaStreamSynchronize(s));
  std::vector<double> us;
  double spent = 0;
  while (us.size() < 10 && (us.size() < 3 || spent < budget_s)) {
    CUDA_OK(cudaEventRecord(a, s));
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaEventRecord(b, s));
    CUDA_OK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    spent += ms * 1e-3;
    us.push_back(ms * 1e3 / copies);
  }
  std::sort(us.begin(), us.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return {us[us.size() / 2], us.front(), us.back(), static_cast<int>(us.size())};
}

template <typename W>
void time_expert_ffn(FILE* csv, const Shape& sh, const char* prec, const std::vector<int>& grid, int experts,
                     size_t l2_bytes, cudaStream_t s, double budget_s) {
  const size_t w_elems = size_t(3) * sh.hidden * sh.inter * experts;
  const size_t group_bytes = w_elems * sizeof(W);
  const int copies = static_cast<int>(std::max<size_t>(1, (4 * l2_bytes + group_bytes - 1) / group_bytes));
  const int max_t = grid.back();
  W* w = nullptr;
  CUDA_OK(cudaMalloc(&w, w_elems * copies * sizeof(W)));
  CUDA_OK(cudaMemset(w, 0x3A, w_elems * copies * sizeof(W)));  // finite, non-zero in BF16 and E4M3
  std::vector<float> scales(experts, 1.0f);
  float* dscale = device_copy(scales);
  bf16 *x, *act, *y;
  CUDA_OK(cudaMalloc(&x, size_t(max_t) * experts * sh.hidden * sizeof(bf16)));
  CUDA_OK(cudaMalloc(&act, size_t(max_t) * experts * sh.inter * sizeof(bf16)));
  CUDA_OK(cudaMalloc(&y, size_t(max_t) * experts * sh.hidden * sizeof(bf16)));
  CUDA_OK(cudaMemset(x, 0x3C, size_t(max_t) * experts * sh.hidden * sizeof(bf16)));
  for (int t : grid) {
    std::vector<int> offsets(experts + 1);
    for (int e = 0; e <= experts; ++e) offsets[e] = e * t;
    int* doff = device_copy(offsets);
    const size_t w13 = size_t(2) * sh.hidden * sh.inter * experts;
    const Timing tm = time_graph(
        [&](int i) {
          W* base = w + w_elems * i;
          moesim::cuda::launch_expert_ffn<W>(x, base, dscale, base + w13, dscale, act, y, doff, experts, t,
                                             sh.hidden, sh.inter, s);
        },
        copies, s, budget_s);
    std::fprintf(csv, "expert_ffn,%s,%d,%d,%d,%d,%.3f,%.3f,%.3f,%d\n", prec, experts, t, sh.hidden, sh.inter,
                 tm.median_us, tm.min_us, tm.max_us, tm.repeats);
    std::fflush(csv);
    std::printf("expert_ffn %-4s %-16s E=%d T=%5d: %10.2f us\n", prec, sh.model, experts, t, tm.median_us);
    cudaFree(doff);
  }
  cudaFree(w);
  cudaFree(dscale);
  cudaFree(x);
  cudaFree(act);
  cudaFree(y);
}

void time_permute(FILE* csv, int hidden, const std::vector<int>& grid, int experts, cudaStream_t s,
                  double budget_s) {
  const int top_k = 1;  // rows = experts * t; one copy per routed token
  const int max_rows = grid.back() * experts;
  bf16 *x, *p, *yy;
  CUDA_OK(cudaMalloc(&x, size_t(max_rows) * hidden * sizeof(bf16)));
  CUDA_OK(cudaMalloc(&p, size_t(max_rows) * hidden * sizeof(bf16)));
  CUDA_OK(cudaMalloc(&yy, size_t(max_rows) * hidden * sizeof(bf16)));
  CUDA_OK(cudaMemset(x, 0x3C, size_t(max_rows) * hidden * sizeof(bf16)));
  std::mt19937 rng(1);
  for (int t : grid) {
    const int rows = t * experts;
    std::vector<int> perm(rows);
    for (int i = 0; i < rows; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<float> w(rows, 1.0f);
    int* dperm = device_copy(perm);
    float* dw = device_copy(w);
    const Timing a =
        time_graph([&](int) { moesim::cuda::launch_permute(x, dperm, p, rows, hidden, s); }, 1, s, budget_s);
    const Timing b =
        time_graph([&](int) { moesim::cuda::launch_unpermute(p, dperm, dw, yy, rows, top_k, hidden, s); }, 1,
                   s, budget_s);
    std::fprintf(csv, "permute,bf16,%d,%d,%d,0,%.3f,%.3f,%.3f,%d\n", experts, t, hidden, a.median_us,
                 a.min_us, a.max_us, a.repeats);
    std::fprintf(csv, "unpermute,bf16,%d,%d,%d,0,%.3f,%.3f,%.3f,%d\n", experts, t, hidden, b.median_us,
                 b.min_us, b.max_us, b.repeats);
    cudaFree(dperm);
    cudaFree(dw);
  }
  cudaFree(x);
  cudaFree(p);
  cudaFree(yy);
}

}  // namespace

int main(int argc, char** argv) {
  std::string csv_path = "kernels.csv";
  bool check_only = false;
  bool quick = false;
  double budget_s = 0.3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--csv" && i + 1 < argc)
      csv_path = argv[++i];
    else if (a == "--check-only")
      check_only = true;
    else if (a == "--quick")
      quick = true;  // fewer token counts and shapes, for a short device session
    else if (a == "--budget-s" && i + 1 < argc)
      budget_s = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "usage: calibrate_harness [--csv FILE] [--check-only] [--quick] [--budget-s S]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "calibrate_harness: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d bytes\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize);
  // Fresh random inputs every run, with the seed printed so that a failure can be replayed
  // (MOESIM_CHECK_SEED=<seed>).
  const char* seed_env = std::getenv("MOESIM_CHECK_SEED");
  const unsigned seed = seed_env != nullptr ? static_cast<unsigned>(std::strtoul(seed_env, nullptr, 10))
                                            : std::random_device{}();
  std::printf("check seed: %u\n", seed);
  std::mt19937 rng(seed);
  bool ok = check_expert_ffn<bf16>("bf16", rng);
  ok = check_expert_ffn<fp8>("fp8", rng) && ok;
  ok = check_permute(rng) && ok;
  if (!ok) return 1;
  if (check_only) return 0;

  FILE* csv = std::fopen(csv_path.c_str(), "w");
  if (csv == nullptr) {
    std::perror(csv_path.c_str());
    return 1;
  }
  std::fprintf(csv,
               "kernel,precision,experts,tokens_per_expert,hidden,inter,median_us,min_us,max_us,repeats\n");
  std::vector<int> grid;
  for (int t = 1; t <= 8192; t *= 2) grid.push_back(t);
  if (quick) grid = {1, 16, 128, 512, 2048};
  cudaStream_t s;
  CUDA_OK(cudaStreamCreate(&s));
  const size_t l2 = static_cast<size_t>(prop.l2CacheSize);
  for (const Shape& sh : kShapes) {
    if (quick && std::strcmp(sh.model, "deepseek_v3") != 0 && std::strcmp(sh.model, "mixtral_8x7b") != 0)
      continue;
    time_expert_ffn<bf16>(csv, sh, "bf16", grid, 1, l2, s, budget_s);
    time_expert_ffn<fp8>(csv, sh, "fp8", grid, 1, l2, s, budget_s);  // Hopper has FP8 (E4M3) support
  }
  time_permute(csv, 7168, grid, 8, s, budget_s);
  std::fclose(csv);
  std::printf("wrote %s\n", csv_path.c_str());
  return 0;
}
