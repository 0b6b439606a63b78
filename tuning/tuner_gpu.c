/* The tuner measured on the GPU, and the parallel pre-compilation that keeps NVRTC out of its way. */
#include "tuner_gpu.h"

#include "bench_graphs.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOLERANCE 1e-3
#define L2_MULTIPLE 4.0
#define MIN_SETS 4
#define MAX_SETS 64
/* A handle keeps every variant it loads, in VOLT8_MAX_LOADED_KERNELS slots that route, reduce and the
 * other kernels of a forward share: when a new GEMM variant would pass this many, a fresh handle takes
 * over (its weights uploaded again). Every arch's list of a shape stays below the slots (test_codegen),
 * so one handle holds a shape's candidates and keeps them loaded from one M to the next. */
#define MAX_VARIANTS_PER_HANDLE (VOLT8_MAX_LOADED_KERNELS - 16)

struct tuner_gpu {
  volt8_ctx *ctx;
  tuner_gpu_settings settings;
  bench_gpu gpu;
  bench_experts_host host;
  volt8_experts *experts;
  char loaded[MAX_VARIANTS_PER_HANDLE][VOLT8_VARIANT_NAME_BYTES]; /* GEMM variants the handle has loaded */
  int32_t loaded_count;
  bench_inputs inputs;
  int inputs_ready;
};

static volt8_status create_experts(tuner_gpu *tuner) {
  volt8_experts_destroy(tuner->experts);
  tuner->experts = NULL;
  tuner->loaded_count = 0;
  volt8_host_experts view = bench_experts_view(&tuner->host);
  return volt8_experts_create_from_host(tuner->ctx, &tuner->settings.shape, &view, tuner->settings.max_tokens,
                                        tuner->settings.top_k, &tuner->experts);
}

volt8_status tuner_gpu_open(volt8_ctx *ctx, const tuner_gpu_settings *settings, tuner_gpu **out) {
  *out = NULL;
  tuner_gpu *tuner = calloc(1, sizeof *tuner);
  if (!tuner) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "tuner: out of memory");
  tuner->ctx = ctx;
  tuner->settings = *settings;
  volt8_status status = bench_gpu_open(ctx, &tuner->gpu);
  if (status == VOLT8_OK)
    status = bench_experts_generate(ctx, &settings->shape, settings->seed, bench_problem_threads(settings->threads),
                                    &tuner->host);
  if (status == VOLT8_OK) status = create_experts(tuner);
  if (status != VOLT8_OK) {
    tuner_gpu_close(tuner);
    return status;
  }
  *out = tuner;
  return VOLT8_OK;
}

void tuner_gpu_close(tuner_gpu *tuner) {
  if (!tuner) return;
  if (tuner->inputs_ready) bench_inputs_destroy(tuner->ctx, &tuner->inputs);
  volt8_experts_destroy(tuner->experts);
  bench_experts_free(&tuner->host);
  bench_gpu_close(&tuner->gpu);
  free(tuner);
}

const char *tuner_gpu_device_name(const tuner_gpu *tuner) { return volt8_tools_ctx(tuner->ctx).device_name; }

static volt8_status gpu_begin(void *user, int32_t m) {
  tuner_gpu *tuner = user;
  const tuner_gpu_settings *settings = &tuner->settings;
  int32_t sets = settings->input_sets ? settings->input_sets
                                      : bench_input_set_count(&tuner->host, m, settings->top_k, tuner->gpu.l2_bytes,
                                                              L2_MULTIPLE, MIN_SETS, MAX_SETS);
  volt8_status status = bench_inputs_create(tuner->ctx, &tuner->host, m, settings->top_k, sets, settings->seed, 1, 1,
                                            bench_problem_threads(settings->threads), &tuner->inputs);
  tuner->inputs_ready = status == VOLT8_OK;
  return status;
}

static void gpu_end(void *user, int32_t m) {
  tuner_gpu *tuner = user;
  if (tuner->inputs_ready) bench_inputs_destroy(tuner->ctx, &tuner->inputs);
  tuner->inputs_ready = 0;
}

/* A failure that leaves the device unusable stops the tuner; any other rejects the candidate. */
static int device_failure(volt8_status status) {
  return status == VOLT8_ERR_CUDA || status == VOLT8_ERR_NO_DEVICE || status == VOLT8_ERR_OUT_OF_MEMORY;
}

static volt8_status reject(tuner_gpu *tuner, volt8_status status, tuner_measurement *out) {
  if (device_failure(status)) return status;
  out->accepted = 0;
  snprintf(out->reason, sizeof out->reason, "%s: %.480s", volt8_status_string(status), volt8_last_error(tuner->ctx));
  return VOLT8_OK;
}

/* Records that the handle will load `variant`, renewing the handle first when it is full. */
static volt8_status note_loaded(tuner_gpu *tuner, const char *variant) {
  for (int32_t i = 0; i < tuner->loaded_count; i++)
    if (strcmp(tuner->loaded[i], variant) == 0) return VOLT8_OK;
  if (tuner->loaded_count == MAX_VARIANTS_PER_HANDLE) {
    volt8_status status = create_experts(tuner);
    if (status != VOLT8_OK) return status;
  }
  snprintf(tuner->loaded[tuner->loaded_count++], VOLT8_VARIANT_NAME_BYTES, "%s", variant);
  return VOLT8_OK;
}

/* Milliseconds since *mark, which moves to now. */
static double lap_ms(double *mark) {
  double now = bench_wall_seconds(), elapsed = (now - *mark) * 1e3;
  *mark = now;
  return elapsed;
}

static volt8_status gpu_measure(void *user, int32_t m, const char *gate_up, const char *down, int32_t batches,
                                tuner_measurement *out) {
  tuner_gpu *tuner = user;
  volt8_ctx *ctx = tuner->ctx;
  double mark = bench_wall_seconds();
  const char *names[2] = {gate_up, down};
  for (int i = 0; i < 2; i++) {
    volt8_status renewed = note_loaded(tuner, names[i]);
    if (renewed != VOLT8_OK) return renewed;
  }
  bench_graph_set graphs = {NULL, 0};
  volt8_status status = volt8_experts_set_variants(tuner->experts, gate_up, down);
  if (status == VOLT8_OK) status = volt8_experts_prepare(tuner->experts, &m, 1);
  if (status == VOLT8_OK) status = bench_graph_set_capture(ctx, tuner->experts, &tuner->inputs, tuner->gpu.stream, &graphs);
  out->setup_ms = lap_ms(&mark);
  double prune_ms = 0.0;
  if (status == VOLT8_OK && isfinite(out->limit_us)) {
    /* One timed forward of input set 0 (after one untimed, which uploads the graph) first: a candidate
     * far slower than the best so far is timed no further and not checked, since it is never picked
     * (its check cost 56 s of 431 in the H100 tunes of 2026-12-06, up to 220 ms a candidate at M =
     * 16384). One set, not a pass over all of them: at large M a candidate of the decode families
     * takes many times the best's forward. Set 0 may still sit in L2 from the untimed forward where it
     * fits there (small M): then this time is low, which prunes less, never more. */
    bench_timing_plan first = {1, 1, 1, tuner->settings.spin_ms};
    bench_timing timing;
    status = bench_time(&tuner->gpu, bench_graph_set_launch, &graphs, &first, &timing);
    if (status == VOLT8_OK && timing.median_us > out->limit_us) {
      out->pruned = 1;
      out->forward_us = timing.median_us;
      snprintf(out->reason, sizeof out->reason, "pruned: one forward took %.1f us, over the limit of %.1f us",
               timing.median_us, out->limit_us);
    }
    prune_ms = lap_ms(&mark);
  }
  int wrong = 0;
  out->check_ms = 0.0; /* a pruned candidate is not checked */
  if (status == VOLT8_OK && !out->pruned) {
    status = bench_inputs_poison(ctx, &tuner->inputs, 0);
    if (status == VOLT8_OK) status = bench_graph_set_launch(&graphs, 0, tuner->gpu.stream);
    if (status == VOLT8_OK)
      status = bench_gpu_check(&tuner->gpu, volt8_tools_ctx(ctx).cuda->cuStreamSynchronize(tuner->gpu.stream), "forward");
    if (status == VOLT8_OK) status = bench_inputs_check(ctx, &tuner->inputs, 0, &out->relative_l2);
    wrong = status == VOLT8_OK && !(out->relative_l2 <= TOLERANCE);
    out->check_ms = lap_ms(&mark);
  }
  if (status == VOLT8_OK && !wrong && !out->pruned) {
    bench_timing_plan plan = {tuner->inputs.count, tuner->settings.warmup_batches, batches, tuner->settings.spin_ms};
    bench_timing timing;
    status = bench_time(&tuner->gpu, bench_graph_set_launch, &graphs, &plan, &timing);
    out->forward_us = timing.median_us;
  }
  out->timing_ms = lap_ms(&mark) + prune_ms;
  bench_graph_set_destroy(&graphs);
  volt8_experts_set_variants(tuner->experts, NULL, NULL);
  if (status != VOLT8_OK) return reject(tuner, status, out);
  out->accepted = !wrong && !out->pruned;
  if (wrong)
    snprintf(out->reason, sizeof out->reason, "relative L2 %.3g against the reference exceeds %.0e", out->relative_l2,
             TOLERANCE);
  return VOLT8_OK;
}

tuner_backend tuner_gpu_backend(tuner_gpu *tuner) {
  return (tuner_backend){tuner, 1, gpu_begin, gpu_measure, gpu_end};
}

typedef struct compile_job {
  const char *cache_dir;
  char target_arch[16];
  int32_t variant_cubin;
  const volt8_moe_shape *shape;
  char *const *names;
  int32_t count, first, stride;
} compile_job;

static void *compile_worker(void *argument) {
  compile_job *job = argument;
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.cache_dir = job->cache_dir;
  options.target_arch = job->target_arch;
  volt8_ctx *ctx = NULL;
  if (volt8_ctx_create(&options, &ctx) != VOLT8_OK) return NULL;
  if (!job->variant_cubin || volt8_tools_ctx_variant_cubin(ctx) == VOLT8_OK)
    for (int32_t i = job->first; i < job->count; i += job->stride) volt8_variant_compile(ctx, job->shape, job->names[i], NULL);
  volt8_ctx_destroy(ctx);
  return NULL;
}

void tuner_precompile(volt8_ctx *ctx, const volt8_moe_shape *shape, char *const *names, int32_t count, int32_t jobs) {
  if (!volt8_tools_ctx(ctx).cache_dir || count <= 0) return;
  if (jobs > count) jobs = count;
  if (jobs < 1) jobs = 1;
  compile_job *work = calloc((size_t)jobs, sizeof *work);
  pthread_t *threads = calloc((size_t)jobs, sizeof *threads);
  int *started = calloc((size_t)jobs, sizeof *started);
  if (!work || !threads || !started) jobs = 0;
  for (int32_t j = 0; j < jobs; j++) {
    work[j] = (compile_job){volt8_tools_ctx(ctx).cache_dir, "", volt8_tools_ctx(ctx).variant_cubin, shape, names, count, j,
                            jobs};
    snprintf(work[j].target_arch, sizeof work[j].target_arch, "sm_%d", volt8_tools_ctx(ctx).target_arch);
    started[j] = pthread_create(&threads[j], NULL, compile_worker, &work[j]) == 0;
    if (!started[j]) compile_worker(&work[j]);
  }
  for (int32_t j = 0; j < jobs; j++)
    if (started[j]) pthread_join(threads[j], NULL);
  free(work);
  free(threads);
  free(started);
}
