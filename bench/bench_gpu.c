/* Support kernels, copy bandwidth and graph-replay timing for bench and tuner. */
#include "bench_gpu.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jit/codegen.h"
#include "jit/kernel_load.h"

#define SUPPORT_TEMPLATE "templates/bench_kernels.cu"
#define SUPPORT_KERNEL_NAME "volt8_bench_kernels"
#define COPY_THREADS 256
#define COPY_BLOCKS_PER_SM 8

volt8_status bench_gpu_check(const bench_gpu *gpu, CUresult result, const char *what) {
  return volt8_cuda_check(gpu->ctx, result, "bench: ", what);
}

volt8_status bench_gpu_alloc(const bench_gpu *gpu, size_t bytes, CUdeviceptr *out, const char *what) {
  *out = 0;
  return bench_gpu_check(gpu, gpu->cuda->cuMemAlloc(out, bytes ? bytes : 16), what);
}

volt8_status bench_gpu_launch(const bench_gpu *gpu, CUfunction function, unsigned grid_x, unsigned grid_y,
                              unsigned grid_z, unsigned threads, CUstream stream, void **params, const char *what) {
  return bench_gpu_check(gpu, gpu->cuda->cuLaunchKernel(function, grid_x, grid_y, grid_z, threads, 1, 1, 0, stream,
                                                        params, NULL),
                         what);
}

/* The support kernels as native code for the device (they are harness, not volt8 kernels, so the
 * target arch does not matter); PTX for ctx's target arch when no NVRTC builds the device's arch. */
static volt8_status load_support_module(bench_gpu *gpu, int32_t device_arch) {
  volt8_ctx *ctx = gpu->ctx;
  char *source = NULL;
  volt8_status status = volt8_codegen_expand_template(ctx, SUPPORT_TEMPLATE, NULL, NULL, 0, &source);
  if (status != VOLT8_OK) return status;
  static const char *const entries[] = {"bench_spin",   "bench_copy",     "bench_dequant", "bench_gather",
                                        "bench_silu_mul", "bench_weighted_reduce", "bench_empty"};
  enum { ENTRY_COUNT = sizeof entries / sizeof entries[0] };
  CUfunction functions[ENTRY_COUNT];
  volt8_kernel_load_request request = {SUPPORT_KERNEL_NAME, source, device_arch, VOLT8_IMAGE_CUBIN, 1,
                                       entries, ENTRY_COUNT, "bench: "};
  status = volt8_kernel_load(ctx, &request, &gpu->module, functions, NULL);
  free(source);
  if (status != VOLT8_OK) return status;
  CUfunction *const targets[ENTRY_COUNT] = {&gpu->spin, &gpu->copy, &gpu->dequant, &gpu->gather,
                                            &gpu->silu_mul, &gpu->weighted_reduce, &gpu->empty};
  for (int i = 0; i < ENTRY_COUNT; i++) *targets[i] = functions[i];
  return VOLT8_OK;
}

volt8_status bench_gpu_open(volt8_ctx *ctx, bench_gpu *out) {
  memset(out, 0, sizeof *out);
  volt8_status status = volt8_ctx_require_device(ctx);
  if (status != VOLT8_OK) return status;
  out->ctx = ctx;
  out->cuda = ctx->cuda;
  CUdevice device;
  int sm_count = 0, l2_bytes = 0;
  status = bench_gpu_check(out, out->cuda->cuDeviceGet(&device, ctx->device_ordinal), "cuDeviceGet");
  if (status == VOLT8_OK)
    status = bench_gpu_check(out, out->cuda->cuDeviceGetAttribute(&sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device),
                             "cuDeviceGetAttribute(multiprocessors)");
  if (status == VOLT8_OK)
    status = bench_gpu_check(out, out->cuda->cuDeviceGetAttribute(&l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device),
                             "cuDeviceGetAttribute(L2 size)");
  out->sm_count = sm_count;
  out->l2_bytes = l2_bytes;
  if (status == VOLT8_OK)
    status = bench_gpu_check(out, out->cuda->cuStreamCreate(&out->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  if (status == VOLT8_OK) status = load_support_module(out, ctx->device_arch);
  if (status != VOLT8_OK) bench_gpu_close(out);
  return status;
}

void bench_gpu_close(bench_gpu *gpu) {
  if (!gpu->cuda) return;
  if (gpu->module) gpu->cuda->cuModuleUnload(gpu->module);
  if (gpu->stream) gpu->cuda->cuStreamDestroy(gpu->stream);
  memset(gpu, 0, sizeof *gpu);
}

static int compare_doubles(const void *a, const void *b) {
  double left = *(const double *)a, right = *(const double *)b;
  return (left > right) - (left < right);
}

double bench_quantile(const double *sorted, int32_t count, double q) {
  if (count <= 0) return 0.0;
  double position = q * (count - 1);
  int32_t below = (int32_t)position;
  if (below >= count - 1) return sorted[count - 1];
  double fraction = position - below;
  return sorted[below] * (1.0 - fraction) + sorted[below + 1] * fraction;
}

double bench_median(double *values, int32_t count) {
  qsort(values, (size_t)count, sizeof *values, compare_doubles);
  return bench_quantile(values, count, 0.5);
}

static double wall_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

static volt8_status launch_spin(bench_gpu *gpu, double milliseconds) {
  unsigned long long nanoseconds = (unsigned long long)(milliseconds * 1e6);
  void *params[] = {&nanoseconds};
  return bench_gpu_launch(gpu, gpu->spin, 1, 1, 1, 1, gpu->stream, params, "bench_spin");
}

static volt8_status run_passes(bench_gpu *gpu, bench_launch_fn launch, void *user, int32_t sets, int32_t passes,
                               CUevent *events) {
  volt8_status status = VOLT8_OK;
  for (int32_t pass = 0; pass < passes && status == VOLT8_OK; pass++) {
    for (int32_t set = 0; set < sets && status == VOLT8_OK; set++) status = launch(user, set, gpu->stream);
    if (status == VOLT8_OK && events)
      status = bench_gpu_check(gpu, gpu->cuda->cuEventRecord(events[pass + 1], gpu->stream), "cuEventRecord");
  }
  return status;
}

volt8_status bench_time(bench_gpu *gpu, bench_launch_fn launch, void *user, const bench_timing_plan *plan,
                        bench_timing *out) {
  memset(out, 0, sizeof *out);
  const volt8_cuda_driver *cuda = gpu->cuda;
  int32_t passes = plan->timed_batches > 0 ? plan->timed_batches : 1;
  CUevent *events = calloc((size_t)passes + 1, sizeof *events);
  double *samples = calloc((size_t)passes, sizeof *samples);
  volt8_status status = events && samples ? VOLT8_OK : volt8_fail(gpu->ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench: out of memory");
  for (int32_t i = 0; i <= passes && status == VOLT8_OK; i++)
    status = bench_gpu_check(gpu, cuda->cuEventCreate(&events[i], CU_EVENT_DEFAULT), "cuEventCreate");
  if (status == VOLT8_OK) status = run_passes(gpu, launch, user, plan->sets, plan->warmup_batches, NULL);
  if (status == VOLT8_OK) status = bench_gpu_check(gpu, cuda->cuStreamSynchronize(gpu->stream), "warm-up");
  double queue_seconds = 0.0;
  if (status == VOLT8_OK) status = launch_spin(gpu, plan->spin_ms);
  if (status == VOLT8_OK) status = bench_gpu_check(gpu, cuda->cuEventRecord(events[0], gpu->stream), "cuEventRecord");
  if (status == VOLT8_OK) {
    double start = wall_seconds();
    status = run_passes(gpu, launch, user, plan->sets, passes, events);
    queue_seconds = wall_seconds() - start;
  }
  if (status == VOLT8_OK) status = bench_gpu_check(gpu, cuda->cuEventSynchronize(events[passes]), "timed passes");
  double total_ms = 0.0;
  for (int32_t i = 0; i < passes && status == VOLT8_OK; i++) {
    float milliseconds = 0.0f;
    status = bench_gpu_check(gpu, cuda->cuEventElapsedTime(&milliseconds, events[i], events[i + 1]), "cuEventElapsedTime");
    samples[i] = (double)milliseconds * 1e3 / plan->sets;
    total_ms += milliseconds;
  }
  if (status == VOLT8_OK) {
    out->median_us = bench_median(samples, passes);
    out->p10_us = bench_quantile(samples, passes, 0.1);
    out->p90_us = bench_quantile(samples, passes, 0.9);
    out->min_us = samples[0];
    out->samples = passes;
    out->host_limited = queue_seconds * 1e3 > plan->spin_ms + total_ms;
  }
  for (int32_t i = 0; events && i <= passes; i++)
    if (events[i]) cuda->cuEventDestroy(events[i]);
  free(events);
  free(samples);
  return status;
}

typedef struct floor_replay {
  const bench_gpu *gpu;
  CUgraphExec exec;
} floor_replay;

static volt8_status launch_floor_graph(void *user, int32_t set, CUstream stream) {
  (void)set;
  const floor_replay *replay = user;
  return bench_gpu_check(replay->gpu, replay->gpu->cuda->cuGraphLaunch(replay->exec, stream), "cuGraphLaunch(launch floor)");
}

static volt8_status launch_empty(bench_gpu *gpu, int early) {
  if (!early) return bench_gpu_launch(gpu, gpu->empty, 1, 1, 1, 32, gpu->stream, NULL, "bench_empty");
  return bench_gpu_check(gpu, volt8_cuda_launch_early(gpu->cuda, gpu->empty, 1, 1, 32, gpu->stream, NULL),
                         "bench_empty (early)");
}

volt8_status bench_launch_floor(bench_gpu *gpu, int32_t kernels, unsigned early_mask, const bench_timing_plan *plan,
                                bench_timing *out) {
  const volt8_cuda_driver *cuda = gpu->cuda;
  memset(out, 0, sizeof *out);
  if (!volt8_ctx_early_launch(gpu->ctx)) early_mask = 0;
  CUgraph graph = NULL;
  floor_replay replay = {gpu, NULL};
  volt8_status status =
      bench_gpu_check(gpu, cuda->cuStreamBeginCapture(gpu->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
  if (status != VOLT8_OK) return status;
  for (int32_t k = 0; k < kernels && status == VOLT8_OK; k++) status = launch_empty(gpu, k < 32 && (early_mask >> k & 1u));
  CUresult end = cuda->cuStreamEndCapture(gpu->stream, &graph);
  if (status == VOLT8_OK) status = bench_gpu_check(gpu, end, "cuStreamEndCapture(launch floor)");
  if (status == VOLT8_OK) status = bench_gpu_check(gpu, cuda->cuGraphInstantiate(&replay.exec, graph, 0), "cuGraphInstantiate");
  if (status == VOLT8_OK) status = bench_time(gpu, launch_floor_graph, &replay, plan, out);
  if (replay.exec) cuda->cuGraphExecDestroy(replay.exec);
  if (graph) cuda->cuGraphDestroy(graph);
  return status;
}

volt8_status bench_copy_bandwidth(bench_gpu *gpu, size_t bytes, int32_t reps, double *out_gbps) {
  *out_gbps = 0.0;
  bytes = bytes / 16 * 16;
  CUdeviceptr source = 0, destination = 0;
  CUevent start = NULL, stop = NULL;
  double *samples = calloc((size_t)reps, sizeof *samples);
  volt8_status status = samples ? VOLT8_OK : volt8_fail(gpu->ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench: out of memory");
  if (status == VOLT8_OK) status = bench_gpu_alloc(gpu, bytes, &source, "cuMemAlloc(copy source)");
  if (status == VOLT8_OK) status = bench_gpu_alloc(gpu, bytes, &destination, "cuMemAlloc(copy destination)");
  if (status == VOLT8_OK)
    status = bench_gpu_check(gpu, gpu->cuda->cuMemsetD8Async(source, 0x3C, bytes, gpu->stream), "cuMemsetD8Async");
  if (status == VOLT8_OK) status = bench_gpu_check(gpu, gpu->cuda->cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
  if (status == VOLT8_OK) status = bench_gpu_check(gpu, gpu->cuda->cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
  long long words = (long long)(bytes / 16);
  void *params[] = {&source, &destination, &words};
  unsigned blocks = (unsigned)(gpu->sm_count * COPY_BLOCKS_PER_SM);
  for (int32_t rep = -2; rep < reps && status == VOLT8_OK; rep++) { /* two untimed copies first */
    status = bench_gpu_check(gpu, gpu->cuda->cuEventRecord(start, gpu->stream), "cuEventRecord");
    if (status == VOLT8_OK)
      status = bench_gpu_launch(gpu, gpu->copy, blocks, 1, 1, COPY_THREADS, gpu->stream, params, "bench_copy");
    if (status == VOLT8_OK) status = bench_gpu_check(gpu, gpu->cuda->cuEventRecord(stop, gpu->stream), "cuEventRecord");
    if (status == VOLT8_OK) status = bench_gpu_check(gpu, gpu->cuda->cuEventSynchronize(stop), "copy");
    float milliseconds = 0.0f;
    if (status == VOLT8_OK)
      status = bench_gpu_check(gpu, gpu->cuda->cuEventElapsedTime(&milliseconds, start, stop), "cuEventElapsedTime");
    if (status == VOLT8_OK && rep >= 0) samples[rep] = 2.0 * (double)bytes / ((double)milliseconds * 1e-3) / 1e9;
  }
  if (status == VOLT8_OK) *out_gbps = bench_median(samples, reps);
  if (start) gpu->cuda->cuEventDestroy(start);
  if (stop) gpu->cuda->cuEventDestroy(stop);
  if (source) gpu->cuda->cuMemFree(source);
  if (destination) gpu->cuda->cuMemFree(destination);
  free(samples);
  return status;
}
