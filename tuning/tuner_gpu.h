/* The tuner's GPU backend: the bench's problem and timing (bench/), one volt8 experts handle,
 * candidates pinned with volt8_experts_set_variants, checked against the reference, then timed as
 * graph replays over rotating input sets. */
#ifndef VOLT8_TUNER_GPU_H
#define VOLT8_TUNER_GPU_H

#include "bench_gpu.h"
#include "bench_problem.h"
#include "tuner.h"

typedef struct tuner_gpu_settings {
  volt8_moe_shape shape;
  int32_t top_k;
  int32_t max_tokens;
  uint64_t seed;
  int32_t input_sets;      /* 0: by the L2 size, as the bench does */
  int32_t warmup_batches;
  double spin_ms;
  int32_t threads;         /* host threads for drawing the problem and its reference (0: one a processor, at most 64) */
} tuner_gpu_settings;

typedef struct tuner_gpu tuner_gpu;

volt8_status tuner_gpu_open(volt8_ctx *ctx, const tuner_gpu_settings *settings, tuner_gpu **out);
void tuner_gpu_close(tuner_gpu *gpu);
tuner_backend tuner_gpu_backend(tuner_gpu *gpu);
/* The device's name ("NVIDIA H200"). */
const char *tuner_gpu_device_name(const tuner_gpu *gpu);

/* Compiles `names` into ctx's disk cache with `jobs` threads, each on its own device-less context
 * for ctx's target arch and image (PTX, or the CUBIN of volt8_tools_ctx_variant_cubin), so the tuning
 * pass only loads. Does nothing without a disk cache.
 * Failures are left for the tuning pass to report per candidate. */
void tuner_precompile(volt8_ctx *ctx, const volt8_moe_shape *shape, char *const *names, int32_t count, int32_t jobs);

#endif
