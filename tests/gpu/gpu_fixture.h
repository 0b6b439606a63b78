/* Shared pieces of the GPU suites: random problems, device batches, and the check against the
 * double-precision reference. */
#ifndef VOLT8_GPU_FIXTURE_H
#define VOLT8_GPU_FIXTURE_H

#include <stdint.h>

#include "core/ctx_internal.h"
#include "moe/kernels/moe_layout.h"

#define GPU_TOLERANCE 1e-3
/* Up to this many tokens a batch's reference covers every row; past it, a sample (gpu_make_batch). */
#define GPU_REFERENCE_ROWS 256

typedef enum routing { ROUTING_UNIFORM, ROUTING_ONE_EXPERT, ROUTING_FEW_EXPERTS } routing;

typedef struct host_problem {
  volt8_moe_shape shape;
  volt8_moe_dims dims;
  uint8_t *w13, *w2;
  uint16_t *s13, *s2;
} host_problem;

typedef struct device_batch {
  int32_t num_tokens, top_k;
  uint16_t *x;
  int32_t *ids;
  float *weights;
  int32_t *rows;       /* the tokens the reference covers, ascending: all, or a sample past GPU_REFERENCE_ROWS */
  int32_t row_count;
  double *reference;   /* [row_count][H] */
  CUdeviceptr d_x, d_ids, d_weights, d_out;
} device_batch;

extern uint64_t gpu_rng_state;
void gpu_seed(uint64_t salt);
uint64_t gpu_random(void);
int gpu_quick_mode(void);
/* A ctx on device 0 (VOLT8_TARGET_ARCH picks the target); skips the test when there is no GPU. */
volt8_ctx *gpu_open(void);
/* Device allocations made through ctx's driver table, counted in this process: gpu_count_allocations
 * points ctx at a copy of the table whose cuMemAlloc, cuMemAllocAsync, cuMemFree and cuMemFreeAsync
 * keep the count that gpu_live_allocations returns (the library reaches the device only through that
 * table). A check that a failure left nothing allocated reads this count, not the device's free memory:
 * cuMemGetInfo also moves with every other process on the GPU, the tests that --jobs runs at once
 * included. */
void gpu_count_allocations(volt8_ctx *ctx);
int64_t gpu_live_allocations(void);
/* tests/fixtures/make_checkpoints.py's checkpoints of `groups` ("--group native ...") in a new folder
 * /tmp/volt8-gpu-NAME-XXXXXX, whose path goes to dir (size bytes), run with $VOLT8_PYTHON, the
 * .venv's or the system's python3; gpu_remove_folder removes such a folder. */
void gpu_write_checkpoints(const char *name, const char *groups, char *dir, size_t size);
void gpu_remove_folder(const char *dir);
void gpu_make_problem(volt8_ctx *ctx, const volt8_moe_shape *shape, host_problem *problem);
void gpu_free_problem(host_problem *problem);
volt8_experts *gpu_upload(volt8_ctx *ctx, const host_problem *problem, int32_t max_tokens, int32_t max_top_k);
/* Fresh inputs on host and device, and their reference output: of every token up to
 * GPU_REFERENCE_ROWS tokens, else of 128 tokens spread from the first to the last and those on each
 * side of where the launcher cuts a grid (moe_layout.h). Ids are drawn from the model's experts (with
 * expert parallelism, other ranks' too). */
void gpu_make_batch(volt8_ctx *ctx, const host_problem *problem, int32_t num_tokens, int32_t top_k, routing mode,
                    device_batch *batch);
/* New routing (ids and weights) for the same batch, uploaded into the same device buffers. */
void gpu_reroute_batch(volt8_ctx *ctx, const host_problem *problem, device_batch *batch);
/* After a test changed batch->ids on the host: uploads them and recomputes the reference. */
void gpu_update_ids(volt8_ctx *ctx, const host_problem *problem, device_batch *batch);
void gpu_free_batch(volt8_ctx *ctx, device_batch *batch);
volt8_moe_args gpu_batch_args(const device_batch *batch);
/* Poisons out and the workspace, runs the forward with the given variants (NULL: dispatch), checks
 * against the reference; returns the relative L2 error. */
double gpu_check_forward(volt8_ctx *ctx, volt8_experts *experts, int32_t hidden, const device_batch *batch,
                         const char *gate_up, const char *down, const char *label);
/* Copies out back, checks that every value was written (no NaN, no poison), and the reference's rows
 * against the reference (after a forward or a graph launch); copy_out (may be NULL) gets all of out.
 * Returns the relative L2 error. */
double gpu_check_output(volt8_ctx *ctx, int32_t hidden, const device_batch *batch, const char *label, uint16_t *copy_out);
/* The source tree: $VOLT8_SOURCE_ROOT (scripts/gpu_check.sh sets it), else the build's. */
const char *gpu_source_root(void);

#endif
