/* The device side of bench and tuner: the support kernels of harness/bench_kernels.cu, the
 * copy bandwidth, and the timing of graph replays. All through ctx's driver table. */
#ifndef VOLT8_BENCH_GPU_H
#define VOLT8_BENCH_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "tools/tools.h"

typedef struct bench_gpu {
  volt8_ctx *ctx;
  const volt8_cuda_driver *cuda;
  CUstream stream; /* every timed launch goes here */
  CUmodule module;
  CUfunction spin, copy, dequant, gather, silu_mul, weighted_reduce, empty, pad_route, pad_gather;
  int32_t sm_count;
  int64_t l2_bytes;
} bench_gpu;

/* The support kernels' source (harness/bench_kernels.cu, built into the bench library), malloc'ed. */
volt8_status bench_support_source(volt8_ctx *ctx, char **out_source);
/* Needs a device; compiles (or loads from the cache) the support kernels for the device's own arch. */
volt8_status bench_gpu_open(volt8_ctx *ctx, bench_gpu *out);
void bench_gpu_close(bench_gpu *gpu);
/* VOLT8_OK, or a failure naming `what` and the driver's error. */
volt8_status bench_gpu_check(const bench_gpu *gpu, CUresult result, const char *what);
volt8_status bench_gpu_alloc(const bench_gpu *gpu, size_t bytes, CUdeviceptr *out, const char *what);
volt8_status bench_gpu_launch(const bench_gpu *gpu, CUfunction function, unsigned grid_x, unsigned grid_y,
                              unsigned grid_z, unsigned threads, CUstream stream, void **params, const char *what);

/* Enqueues one forward of input set `set` on `stream` (a graph launch, usually). */
typedef volt8_status (*bench_launch_fn)(void *user, int32_t set, CUstream stream);

typedef struct bench_timing_plan {
  int32_t sets;            /* input sets, launched in turn */
  int32_t warmup_batches;  /* untimed passes over the sets */
  int32_t timed_batches;   /* timed passes: one sample each */
  double spin_ms;          /* the stream waits this long while the host queues the timed passes */
} bench_timing_plan;

typedef struct bench_timing {
  double median_us, p10_us, p90_us, min_us; /* per forward: a pass's time over its sets */
  int32_t samples;
  int32_t host_limited; /* 1: queueing took longer than the spin and the GPU work, so the GPU may have waited */
} bench_timing;

/* Warm-up, then timed passes over the sets between CUDA events, queued behind a spin so the GPU
 * runs them back to back as a graph-replaying engine would. */
volt8_status bench_time(bench_gpu *gpu, bench_launch_fn launch, void *user, const bench_timing_plan *plan,
                        bench_timing *out);
/* The launch floor: the time per replay of a graph of `kernels` empty one-CTA kernels, kernel k
 * started early where bit k of `early_mask` is set and the context uses early launch (as a forward
 * starts its down, and its reduce where down does not fuse it), replayed as bench_time replays forwards. What a forward of that many
 * launches costs before any work. */
volt8_status bench_launch_floor(bench_gpu *gpu, int32_t kernels, unsigned early_mask, const bench_timing_plan *plan,
                                bench_timing *out);
/* Device-to-device copy bandwidth, (read + written bytes) / time, median of `reps` copies of
 * `bytes` (16-byte loads and stores over the whole device). */
volt8_status bench_copy_bandwidth(bench_gpu *gpu, size_t bytes, int32_t reps, double *out_gbps);
/* Median of `count` values (sorts them). */
double bench_median(double *values, int32_t count);
/* Value at fraction q in [0, 1] of `count` sorted values. */
double bench_quantile(const double *sorted, int32_t count, double q);
/* Seconds on the monotonic clock. */
double bench_wall_seconds(void);

#endif
