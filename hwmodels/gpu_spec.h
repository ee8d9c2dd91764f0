// A GPU and its node as the cost models see them: datasheet ceilings plus achievable fractions.
// Filled from scenarios/catalog/gpus.json by the scenario module; units are SI.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <utility>

#include "hwmodels/precision.h"
#include "sim/engine/time.h"

namespace moesim {

// One figure measured on a GPU and published (catalog `measured.<key>`): its value and where it is from.
struct MeasuredFigure {
  double value = 0;  // 0: not published (the datasheet ratio stands in for it)
  std::string source;
  // The work of the one kernel run an efficiency was measured on (attention: `at`), when it was not an
  // asymptote: the fit is then solved to take that run's time; 0: the figure is the fit's asymptote.
  double at_bytes = 0;
  double at_flops = 0;
  [[nodiscard]] bool known() const { return value > 0; }
};

// Published measurements of one GPU that a derived profile (derive_profile) takes instead of datasheet
// ratios. Efficiencies are fractions of the dense datasheet peak of their format on large shapes;
// bandwidth is a device-to-device copy counting read and write (as shared/calibration/h200/platform.json);
// launch is a tiny kernel inside a CUDA graph. Attention efficiencies are an attention kernel's achieved
// compute rate (its own flop count) at a compute-bound shape over the dense BF16 peak: decode is MLA's
// absorbed decode (BF16 math), prefill a causal or full forward.
struct GpuMeasured {
  MeasuredFigure gemm_eff_bf16;
  MeasuredFigure gemm_eff_fp8;
  MeasuredFigure gemm_eff_fp4;
  MeasuredFigure grouped_eff_fp8;  // grouped expert GEMM at many rows per expert
  MeasuredFigure grouped_eff_fp4;
  MeasuredFigure hbm_bytes_per_s;
  MeasuredFigure launch_s;
  MeasuredFigure attention_decode_eff;
  MeasuredFigure attention_decode_eff_fp8;  // FP8 KV with FP8 math, of the FP8 peak
  // TensorRT-LLM's trtllm-gen MLA decode kernel with FP8 Q and KV, of the FP8 peak, with its run (`at`);
  // costed only where the engine runs that kernel (DecodeAttentionKernel::kTrtllmGen)
  MeasuredFigure attention_decode_trtllm_gen_fp8;
  MeasuredFigure attention_prefill_eff;
  [[nodiscard]] const MeasuredFigure& gemm_eff(Precision p) const {
    return p == Precision::kFP8 ? gemm_eff_fp8 : p == Precision::kFP4 ? gemm_eff_fp4 : gemm_eff_bf16;
  }
  // Every figure with its catalog key, in catalog order.
  [[nodiscard]] std::array<std::pair<std::string_view, const MeasuredFigure*>, 11> figures() const {
    return {{{"gemm_eff_bf16", &gemm_eff_bf16},
             {"gemm_eff_fp8", &gemm_eff_fp8},
             {"gemm_eff_fp4", &gemm_eff_fp4},
             {"grouped_eff_fp8", &grouped_eff_fp8},
             {"grouped_eff_fp4", &grouped_eff_fp4},
             {"hbm_tb_per_s", &hbm_bytes_per_s},
             {"launch_us", &launch_s},
             {"attention_decode_eff_bf16", &attention_decode_eff},
             {"attention_decode_eff_fp8", &attention_decode_eff_fp8},
             {"attention_decode_trtllm_gen_eff_fp8", &attention_decode_trtllm_gen_fp8},
             {"attention_prefill_eff_bf16", &attention_prefill_eff}}};
  }
};

struct GpuSpec {
  std::string name;
  std::string arch;           // "hopper", "blackwell", ... (labels derived cost models)
  std::string profile_basis;  // catalog name of the GPU whose fitted profile this one derives from

  double hbm_bytes = 0;
  double hbm_bytes_per_s = 0;
  double l2_bytes = 0;  // last-level cache (0: unknown; small-kernel gathers then count every read)
  int sms = 132;        // streaming multiprocessors (H100/H200/H800 SXM: 132)
  // Dense tensor-core peak (no sparsity) by compute format.
  double bf16_flops_per_s = 0;
  double fp8_flops_per_s = 0;
  double int8_ops_per_s = 0;
  double fp4_flops_per_s = 0;  // 0 where the architecture has no FP4 tensor cores
  // Fractions of the peaks a good kernel reaches (datasheet roofline only; a profile replaces them).
  double mem_efficiency = 0.75;
  double compute_efficiency = 0.75;
  Duration kernel_overhead = Duration::from_us(2.0);
  // Node-level links, per GPU and per direction.
  double nvlink_bytes_per_s = 0;
  Duration nvlink_latency = Duration::from_us(2.0);
  double nic_bytes_per_s = 0;
  Duration nic_latency = Duration::from_us(5.0);
  GpuMeasured measured;  // published measurements of this GPU (none: a derived profile uses ratios)

  // Peak rate of a GEMM whose weights are stored as `weights`: FP8 and INT8 weights run on their own
  // tensor-core path; INT4/FP4 weights are dequantised and run at the BF16 rate unless FP4 is native.
  [[nodiscard]] double peak_flops(Precision weights) const {
    switch (weights) {
      case Precision::kFP8:
        return fp8_flops_per_s > 0 ? fp8_flops_per_s : bf16_flops_per_s;
      case Precision::kINT8:
        return int8_ops_per_s > 0 ? int8_ops_per_s : bf16_flops_per_s;
      case Precision::kFP4:
        return fp4_flops_per_s > 0 ? fp4_flops_per_s : bf16_flops_per_s;
      default:
        return bf16_flops_per_s;
    }
  }
};

}  // namespace moesim
