/* The FP16-resident baselines: the same experts dequantized to FP16 and run as an FP16 MoE layer
 * would be without volt8. Per input set, one graph of:
 *   gather (each expert's tokens made contiguous) -> gate_up GEMMs -> SiLU*up -> down GEMMs
 *   -> weighted top-k reduce (FP32 sum in top-k order)
 * with the GEMMs either one cuBLASLt matmul per active expert (A) or one
 * cublasGemmGroupedBatchedEx call per op (B). The routing is sorted on the host when the graph is
 * built, which the baselines get for free (a real engine pays for it on the device). */
#ifndef VOLT8_BENCH_BASELINE_FP16_H
#define VOLT8_BENCH_BASELINE_FP16_H

#include "bench_gpu.h"
#include "bench_problem.h"
#include "cublas_loader.h"

typedef struct bench_fp16_weights {
  CUdeviceptr w13; /* [E][2I][H] FP16 */
  CUdeviceptr w2;  /* [E][H][I] FP16 */
  int64_t bytes;
} bench_fp16_weights;

/* Dequantizes the experts on the device (harness/bench_kernels.cu, bench_dequant). */
volt8_status bench_fp16_weights_create(bench_gpu *gpu, const bench_experts_host *experts, bench_fp16_weights *out);
void bench_fp16_weights_destroy(bench_gpu *gpu, bench_fp16_weights *weights);

typedef enum bench_baseline_kind { BENCH_BASELINE_LT = 0, BENCH_BASELINE_GROUPED = 1 } bench_baseline_kind;

typedef struct bench_baseline bench_baseline;

/* Builds the graphs of every input set after one eager run of set 0, whose output then holds the
 * baseline's result (to check against the reference). VOLT8_ERR_UNSUPPORTED when cuBLAS lacks what
 * the kind needs (the message says what). */
volt8_status bench_baseline_create(bench_gpu *gpu, bench_cublas *cublas, bench_baseline_kind kind,
                                   const bench_fp16_weights *weights, const volt8_moe_shape *shape,
                                   const bench_inputs *inputs, bench_baseline **out);
/* bench_launch_fn: replays set `set`'s graph. */
volt8_status bench_baseline_launch(void *baseline, int32_t set, CUstream stream);
void bench_baseline_destroy(bench_baseline *baseline);

#endif
