/* The FP16-resident baselines: the same experts dequantized to FP16 and run as an FP16 MoE layer
 * would be without volt8. Per input set, one graph of:
 *   gather (each expert's tokens made contiguous) -> gate_up GEMMs -> SiLU*up -> down GEMMs
 *   -> weighted top-k reduce (FP32 sum in top-k order)
 * with the GEMMs either one cuBLASLt matmul per active expert (A) or one
 * cublasGemmGroupedBatchedEx call per op (B). For A and B the routing is sorted on the host when the
 * graph is built, which they get for free (a real engine pays for it on the device).
 * C, the sorted-and-padded peer, pays for it: its graph sorts the pairs on the device, each into the
 * next row of its expert's slot of `capacity` rows (bench_sorted_capacity), the padding after an
 * expert's pairs zero-filled, as vLLM's moe_align_block_size sorts and pads pairs by expert, and runs
 * each op as one strided-batched cuBLASLt matmul over every expert's slot with the algorithm the
 * heuristic ranks first; gather, SiLU*up and the top-k sum as B's. No Triton. */
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

typedef enum bench_baseline_kind {
  BENCH_BASELINE_LT = 0,      /* A */
  BENCH_BASELINE_GROUPED = 1, /* B */
  BENCH_BASELINE_SORTED = 2,  /* C */
} bench_baseline_kind;

#define BENCH_SORTED_ROW_ALIGN 16 /* an expert slot's rows: a multiple of this */

/* The rows of every expert's slot in C: the most pairs one expert has in any input set of `inputs`
 * (ids in [0, E)), rounded up to BENCH_SORTED_ROW_ALIGN, at least that. A capacity fixed per M is what
 * lets one graph serve every set: an engine would size it by a capacity factor; the bench knows its
 * routing, so C pads no more than the busiest expert needs. */
volt8_status bench_sorted_capacity(volt8_ctx *ctx, const bench_inputs *inputs, int32_t num_experts, int32_t *out);

typedef struct bench_baseline bench_baseline;

/* Builds the graphs of every input set after one eager run of set 0, whose output then holds the
 * baseline's result (to check against the reference). VOLT8_ERR_UNSUPPORTED when cuBLAS lacks what
 * the kind needs (the message says what). */
volt8_status bench_baseline_create(bench_gpu *gpu, bench_cublas *cublas, bench_baseline_kind kind,
                                   const bench_fp16_weights *weights, const volt8_moe_shape *shape,
                                   const bench_inputs *inputs, bench_baseline **out);
/* C's rows an expert slot (0 for A and B). */
int32_t bench_baseline_capacity(const bench_baseline *baseline);
/* bench_launch_fn: replays set `set`'s graph. */
volt8_status bench_baseline_launch(void *baseline, int32_t set, CUstream stream);
void bench_baseline_destroy(bench_baseline *baseline);

#endif
