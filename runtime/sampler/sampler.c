/* The speculative-decoding rejection sampler: argument checks, the host sampler, and the GPU
 * launcher with its per-context table of loaded kernels. Both sides follow the shared rules of
 * templates/rejection_rules.cu; the kernels are templates/rejection_sample.cu. */
#include "jit/template.h"
#include "core/ctx_internal.h"
#include "jit/kernel_load.h"
#include "sampler/philox.h"
#include "sampler/sampler.h"
#include "sampler/sampler_params.h"
#include "../../templates/rejection_rules.cu"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define SAMPLER_TEMPLATE "templates/rejection_sample.cu"
#define SAMPLER_KERNEL_NAME "volt8_rejection_sample"
#define ROW_THREADS 512
#define FINISH_THREADS 1024
#define FINISH_WARPS (FINISH_THREADS / 32)
#define MAX_DRAFT 65534 /* the row pass's grid y holds K+1 */
#define PROBLEM_BYTES 256
#define ROW_CTAS_PER_SM 4
#define SUM_CTAS_PER_SM 2

static volt8_status check_args(volt8_ctx *ctx, const volt8_rejection_args *args, const char *function) {
  if (!args) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "%s: args is NULL", function);
  if (args->size != sizeof(volt8_rejection_args))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "%s: args->size is %zu; set it with VOLT8_REJECTION_ARGS_INIT (%zu)",
                      function, args->size, sizeof(volt8_rejection_args));
  if (args->batch < 0) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "%s: batch %d is negative", function, args->batch);
  if (args->max_draft < 0 || args->max_draft > MAX_DRAFT)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "%s: max_draft %d outside 0..%d", function, args->max_draft, MAX_DRAFT);
  if (args->vocab < 1 || args->vocab > VOLT8_MAX_VOCAB)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "%s: vocab %d outside 1..%d", function, args->vocab, VOLT8_MAX_VOCAB);
  if (args->batch == 0) return VOLT8_OK;
  const void *required[5] = {args->num_draft, args->draft_ids, args->target_probs, args->out_ids, args->num_accepted};
  const char *names[5] = {"num_draft", "draft_ids", "target_probs", "out_ids", "num_accepted"};
  for (int i = 0; i < 5; i++) {
    if (!required[i] && !(i == 1 && args->max_draft == 0))
      return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "%s: %s is NULL", function, names[i]);
  }
  size_t elements;
  if (__builtin_mul_overflow((size_t)args->batch, (size_t)args->max_draft + 1, &elements) ||
      __builtin_mul_overflow(elements, (size_t)args->vocab * sizeof(float), &elements))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "%s: target_probs of %d x %d x %d floats does not fit in memory",
                      function, args->batch, args->max_draft + 1, args->vocab);
  return VOLT8_OK;
}

/* ---- the host sampler ---- */

static const float *target_row(const volt8_rejection_args *args, int32_t request, int32_t position) {
  return args->target_probs + ((size_t)request * ((size_t)args->max_draft + 1) + (size_t)position) * (size_t)args->vocab;
}

/* NULL for deterministic drafts (no draft_probs). */
static const float *draft_row(const volt8_rejection_args *args, int32_t request, int32_t position) {
  if (!args->draft_probs) return NULL;
  return args->draft_probs + ((size_t)request * (size_t)args->max_draft + (size_t)position) * (size_t)args->vocab;
}

static int32_t draft_id(const volt8_rejection_args *args, int32_t request, int32_t position) {
  return args->draft_ids[(size_t)request * (size_t)args->max_draft + (size_t)position];
}

static int is_greedy(const volt8_rejection_args *args, int32_t request) { return args->greedy && args->greedy[request]; }

static int32_t host_row_info(const volt8_rejection_args *args, int32_t request, int32_t position, int32_t num_draft) {
  int32_t drafted = position < num_draft ? draft_id(args, request, position) : -1;
  volt8_row_scan scan;
  volt8_row_scan_init(&scan, position < num_draft && (drafted < 0 || drafted >= args->vocab));
  if (scan.invalid) return VOLT8_ROW_INVALID;
  const float *target = target_row(args, request, position);
  const float *draft = position < num_draft ? draft_row(args, request, position) : NULL;
  for (int32_t token = 0; token < args->vocab; token++)
    volt8_row_scan_add(&scan, token, target[token], volt8_draft_value(draft, drafted, token));
  return volt8_row_info(&scan, is_greedy(args, request));
}

/* The first token whose inclusive prefix of integer weights exceeds a point drawn in [0, total). */
static int32_t host_draw(const volt8_rejection_args *args, int32_t request, const volt8_rejection_stop *stop) {
  const float *target = target_row(args, request, stop->accepted);
  const float *draft = stop->use_residual ? draft_row(args, request, stop->accepted) : NULL;
  int32_t drafted = stop->use_residual && !draft ? draft_id(args, request, stop->accepted) : -1;
  volt8_u64 total = 0, prefix = 0;
  for (int32_t token = 0; token < args->vocab; token++)
    total += volt8_stop_weight(stop, target[token], volt8_draft_value(draft, drafted, token));
  volt8_u64 point = volt8_random_below(stop->random, total);
  for (int32_t token = 0; token < args->vocab; token++) {
    prefix += volt8_stop_weight(stop, target[token], volt8_draft_value(draft, drafted, token));
    if (prefix > point) return token;
  }
  return -1;
}

/* Samples one request into its out_ids row; returns 0 (row -1, num_accepted 0) when its input is invalid. */
static int host_sample_request(const volt8_rejection_args *args, int32_t request, int32_t *row_info) {
  int32_t rows = args->max_draft + 1, num_draft = args->num_draft[request];
  int32_t *out_row = args->out_ids + (size_t)request * (size_t)rows;
  const int32_t *drafts = args->draft_ids ? args->draft_ids + (size_t)request * (size_t)args->max_draft : NULL;
  volt8_rejection_stop stop = {0};
  int valid = num_draft >= 0 && num_draft <= args->max_draft;
  for (int32_t position = 0; valid && position <= num_draft; position++)
    valid = (row_info[position] = host_row_info(args, request, position, num_draft)) >= 0;
  if (valid)
    valid = volt8_rejection_walk(row_info, num_draft, drafts, target_row(args, request, 0), draft_row(args, request, 0),
                                 args->vocab, is_greedy(args, request), args->seed, args->offset, request, &stop);
  int32_t token = valid ? stop.token : -1;
  if (valid && token < 0) token = host_draw(args, request, &stop);
  int32_t accepted = token >= 0 ? stop.accepted : 0;
  for (int32_t position = 0; position < rows; position++)
    out_row[position] = token < 0 || position > accepted ? -1 : position < accepted ? drafts[position] : token;
  args->num_accepted[request] = accepted;
  return token >= 0;
}

/* Names the first problem of an invalid request, in the order the checks are documented. */
static void describe_problem(const volt8_rejection_args *args, int32_t request, char *text, size_t text_bytes) {
  int32_t num_draft = args->num_draft[request];
  if (num_draft < 0 || num_draft > args->max_draft) {
    snprintf(text, text_bytes, "num_draft[%d] = %d outside 0..%d", request, num_draft, args->max_draft);
    return;
  }
  for (int32_t position = 0; position <= num_draft; position++) {
    int32_t drafted = position < num_draft ? draft_id(args, request, position) : 0;
    if (drafted < 0 || drafted >= args->vocab) {
      snprintf(text, text_bytes, "draft_ids[%d][%d] = %d outside [0, %d)", request, position, drafted, args->vocab);
      return;
    }
    const float *target = target_row(args, request, position);
    const float *draft = position < num_draft ? draft_row(args, request, position) : NULL;
    int positive = 0;
    for (int32_t token = 0; token < args->vocab; token++) {
      const float *bad = !volt8_probability_ok(target[token])          ? target
                         : draft && !volt8_probability_ok(draft[token]) ? draft
                                                                        : NULL;
      if (bad) {
        snprintf(text, text_bytes, "%s[%d][%d][%d] = %g is not a probability (NaN, infinite or negative)",
                 bad == target ? "target_probs" : "draft_probs", request, position, token, bad[token]);
        return;
      }
      positive |= target[token] > 0.0f;
    }
    if (!positive) {
      snprintf(text, text_bytes, "target_probs[%d][%d] has no positive entry", request, position);
      return;
    }
  }
  snprintf(text, text_bytes, "request %d could not be sampled", request);
}

volt8_status volt8_rejection_sample_host(const volt8_rejection_args *args) {
  volt8_status status = check_args(NULL, args, "volt8_rejection_sample_host");
  if (status != VOLT8_OK || args->batch == 0) return status;
  int32_t *row_info = malloc(((size_t)args->max_draft + 1) * sizeof *row_info);
  if (!row_info) return volt8_fail(NULL, VOLT8_ERR_OUT_OF_MEMORY, "volt8_rejection_sample_host: out of memory");
  int32_t invalid_count = 0, first_invalid = -1;
  for (int32_t request = 0; request < args->batch; request++) {
    if (host_sample_request(args, request, row_info)) continue;
    if (invalid_count++ == 0) first_invalid = request;
  }
  free(row_info);
  if (invalid_count == 0) return VOLT8_OK;
  char problem[PROBLEM_BYTES];
  describe_problem(args, first_invalid, problem, sizeof problem);
  return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT,
                    "volt8_rejection_sample_host: %s; %d of %d requests invalid (their out_ids rows are -1)", problem,
                    invalid_count, args->batch);
}

/* ---- the GPU path: kernels loaded once per context ---- */

typedef struct sampler_kernels {
  CUfunction rows, walk, draw;
  int32_t multiprocessors;
} sampler_kernels;

typedef struct sampler_module {
  struct sampler_module *next;
  const volt8_ctx *ctx;
  CUmodule module;
  sampler_kernels kernels;
} sampler_module;

static pthread_mutex_t modules_lock = PTHREAD_MUTEX_INITIALIZER;
static sampler_module *modules;

static sampler_module *find_locked(const volt8_ctx *ctx) {
  sampler_module *found = modules;
  while (found && found->ctx != ctx) found = found->next;
  return found;
}

static int find_module(const volt8_ctx *ctx, sampler_kernels *kernels) {
  pthread_mutex_lock(&modules_lock);
  const sampler_module *found = find_locked(ctx);
  if (found) *kernels = found->kernels;
  pthread_mutex_unlock(&modules_lock);
  return found != NULL;
}

/* Unloads ctx's sampler kernels: a teardown hook of ctx, run while the context is still current. */
static void forget_ctx(volt8_ctx *ctx, void *unused) {
  pthread_mutex_lock(&modules_lock);
  sampler_module **link = &modules;
  while (*link && (*link)->ctx != ctx) link = &(*link)->next;
  sampler_module *found = *link;
  if (found) *link = found->next;
  pthread_mutex_unlock(&modules_lock);
  if (!found) return;
  if (ctx->has_device && ctx->cuda->cuCtxSetCurrent(ctx->cu_context) == CUDA_SUCCESS) ctx->cuda->cuModuleUnload(found->module);
  free(found);
}

static volt8_status cuda_check(volt8_ctx *ctx, CUresult result, const char *what) {
  return volt8_cuda_check(ctx, result, "rejection sampler: ", what);
}

/* The sampler's source: templates/rejection_sample.cu with its block sizes (malloc'ed). */
static volt8_status generate_source(volt8_ctx *ctx, char **out_source) {
  char row_threads[16], finish_threads[16];
  snprintf(row_threads, sizeof row_threads, "%d", ROW_THREADS);
  snprintf(finish_threads, sizeof finish_threads, "%d", FINISH_THREADS);
  const char *const keys[2] = {"ROW_THREADS", "FINISH_THREADS"};
  const char *const values[2] = {row_threads, finish_threads};
  return volt8_template_expand_text(ctx, SAMPLER_TEMPLATE, NULL, keys, values, 2, out_source);
}

/* The device facts the launcher needs: its multiprocessor count, and stream-ordered allocation
 * (the scratch between the passes comes from the device's memory pool, which graphs capture). */
static volt8_status query_device(volt8_ctx *ctx, int32_t *multiprocessors) {
  CUdevice device;
  int count = 0, pools = 0;
  volt8_status status = cuda_check(ctx, ctx->cuda->cuDeviceGet(&device, ctx->device_ordinal), "cuDeviceGet");
  if (status == VOLT8_OK)
    status = cuda_check(ctx, ctx->cuda->cuDeviceGetAttribute(&count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device),
                        "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  if (status == VOLT8_OK)
    status = cuda_check(ctx, ctx->cuda->cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device),
                        "cuDeviceGetAttribute(MEMORY_POOLS_SUPPORTED)");
  if (status == VOLT8_OK && !pools)
    status = volt8_fail(ctx, VOLT8_ERR_UNSUPPORTED,
                        "rejection sampler: device %d (%s) does not support stream-ordered allocation "
                        "(cuMemAllocAsync), which holds the sampler's scratch between its passes",
                        ctx->device_ordinal, ctx->device_name);
  *multiprocessors = count > 0 ? count : 1;
  return status;
}

static volt8_status load_kernels(volt8_ctx *ctx, const volt8_kernel_load_request *request) {
  sampler_module *loaded = calloc(1, sizeof *loaded);
  if (!loaded) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "rejection sampler: out of memory");
  loaded->ctx = ctx;
  CUfunction functions[3];
  volt8_status status = query_device(ctx, &loaded->kernels.multiprocessors);
  if (status == VOLT8_OK) status = volt8_kernel_load(ctx, request, &loaded->module, functions, NULL);
  if (status != VOLT8_OK) {
    free(loaded);
    return status;
  }
  loaded->kernels.rows = functions[0];
  loaded->kernels.walk = functions[1];
  loaded->kernels.draw = functions[2];
  pthread_mutex_lock(&modules_lock);
  int keep = !find_locked(ctx); /* another thread may have loaded them meanwhile */
  if (keep && (status = volt8_ctx_on_destroy(ctx, forget_ctx, NULL)) != VOLT8_OK) keep = 0;
  if (keep) {
    loaded->next = modules;
    modules = loaded;
  }
  pthread_mutex_unlock(&modules_lock);
  if (!keep) {
    ctx->cuda->cuModuleUnload(loaded->module);
    free(loaded);
  }
  return status;
}

volt8_status volt8_rejection_prepare(volt8_ctx *ctx) {
  if (!ctx) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_rejection_prepare: ctx is NULL");
  sampler_kernels kernels;
  if (ctx->has_device && find_module(ctx, &kernels)) return VOLT8_OK;
  char *source = NULL;
  volt8_status status = generate_source(ctx, &source);
  if (status != VOLT8_OK) return status;
  static const char *const entries[3] = {"volt8_rejection_rows", "volt8_rejection_walk", "volt8_rejection_draw"};
  volt8_kernel_load_request request = {SAMPLER_KERNEL_NAME, source, ctx->target_arch, VOLT8_IMAGE_PTX, 0,
                                       entries, 3, "rejection sampler: "};
  if (!ctx->has_device)
    status = volt8_kernel_load(ctx, &request, NULL, NULL, NULL); /* fills the cache for a later host with a GPU */
  else if ((status = volt8_ctx_require_device(ctx)) == VOLT8_OK)
    status = load_kernels(ctx, &request);
  free(source);
  return status;
}

static volt8_status check_alignment(volt8_ctx *ctx, const volt8_rejection_args *args) {
  const void *pointers[6] = {args->num_draft, args->draft_ids, args->draft_probs, args->target_probs,
                             args->out_ids, args->num_accepted};
  const char *names[6] = {"num_draft", "draft_ids", "draft_probs", "target_probs", "out_ids", "num_accepted"};
  for (int i = 0; i < 6; i++)
    if ((uintptr_t)pointers[i] % 4)
      return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_rejection_sample: %s is not 4-byte aligned", names[i]);
  return VOLT8_OK;
}

/* The loaded kernels, preparing them first unless the stream is capturing. */
static volt8_status get_kernels(volt8_ctx *ctx, CUstream stream, sampler_kernels *kernels) {
  if (find_module(ctx, kernels)) return VOLT8_OK;
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  volt8_status status = cuda_check(ctx, ctx->cuda->cuStreamIsCapturing(stream, &capture), "cuStreamIsCapturing");
  if (status != VOLT8_OK) return status;
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return volt8_fail(ctx, VOLT8_ERR_CAPTURE,
                      "volt8_rejection_sample: the sampler kernels are not loaded and the stream is capturing; "
                      "call volt8_rejection_prepare before capturing");
  status = volt8_rejection_prepare(ctx);
  if (status == VOLT8_OK && !find_module(ctx, kernels))
    status = volt8_fail(ctx, VOLT8_ERR_INTERNAL, "volt8_rejection_sample: kernels missing after preparing");
  return status;
}

void volt8_sampler_split(int64_t units, int32_t vocab, int64_t target_ctas, volt8_sampler_cut *cut) {
  int64_t splits = units < target_ctas ? (target_ctas + units - 1) / units : 1;
  int64_t most = vocab / SPLIT_MIN_CHUNK;
  if (splits > most) splits = most;
  if (splits < 1) splits = 1;
  int64_t chunk = ((int64_t)vocab + splits - 1) / splits;
  if (splits > 1) chunk = (chunk + SPLIT_CHUNK_ALIGN - 1) / SPLIT_CHUNK_ALIGN * SPLIT_CHUNK_ALIGN;
  cut->chunk = (int32_t)chunk;
  cut->splits = (int32_t)(((int64_t)vocab + chunk - 1) / chunk);
}

volt8_status volt8_rejection_sample(volt8_ctx *ctx, const volt8_rejection_args *args, void *stream) {
  if (!ctx) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_rejection_sample: ctx is NULL");
  volt8_status status = check_args(ctx, args, "volt8_rejection_sample");
  if (status == VOLT8_OK) status = volt8_ctx_require_device(ctx);
  if (status != VOLT8_OK || args->batch == 0) return status;
  if ((status = check_alignment(ctx, args)) != VOLT8_OK) return status;
  CUstream cu_stream = (CUstream)stream;
  sampler_kernels kernels = {0};
  if ((status = get_kernels(ctx, cu_stream, &kernels)) != VOLT8_OK) return status;

  /* Cut rows so that even one request fills the GPU: the row scans to about ROW_CTAS_PER_SM
   * CTAs a multiprocessor, the weight sums of the stop rows to about SUM_CTAS_PER_SM. */
  const size_t batch = (size_t)args->batch, rows = (size_t)args->max_draft + 1;
  volt8_sampler_cut row_cut, sum_cut;
  volt8_sampler_split((int64_t)(batch * rows), args->vocab, (int64_t)kernels.multiprocessors * ROW_CTAS_PER_SM, &row_cut);
  volt8_sampler_split((int64_t)batch, args->vocab, (int64_t)kernels.multiprocessors * SUM_CTAS_PER_SM, &sum_cut);
  if (batch * (size_t)row_cut.splits > INT32_MAX || batch * (size_t)sum_cut.splits > INT32_MAX)
    row_cut.splits = sum_cut.splits = 1, row_cut.chunk = sum_cut.chunk = args->vocab;
  const size_t scan_bytes = volt8_device_align(batch * rows * (size_t)row_cut.splits * sizeof(volt8_row_scan));
  const size_t stop_bytes = volt8_device_align(batch * sizeof(volt8_stop_record));
  const size_t chunk_sum_bytes = volt8_device_align(batch * (size_t)sum_cut.splits * sizeof(volt8_u64));
  const size_t part_sum_bytes = batch * (size_t)sum_cut.splits * FINISH_WARPS * sizeof(volt8_u64);
  CUdeviceptr scratch = 0;
  status = cuda_check(ctx,
                      ctx->cuda->cuMemAllocAsync(&scratch, scan_bytes + stop_bytes + chunk_sum_bytes + part_sum_bytes,
                                                 cu_stream),
                      "cuMemAllocAsync(scratch)");
  if (status != VOLT8_OK) return status;
  CUdeviceptr scans = scratch, stops = scans + scan_bytes, chunk_sums = stops + stop_bytes;
  CUdeviceptr part_sums = chunk_sums + chunk_sum_bytes;

  CUdeviceptr num_draft = (CUdeviceptr)(uintptr_t)args->num_draft, draft_ids = (CUdeviceptr)(uintptr_t)args->draft_ids;
  CUdeviceptr draft_probs = (CUdeviceptr)(uintptr_t)args->draft_probs, target_probs = (CUdeviceptr)(uintptr_t)args->target_probs;
  CUdeviceptr out_ids = (CUdeviceptr)(uintptr_t)args->out_ids;
  volt8_rejection_rows_args rows_args = {
      .num_draft = num_draft, .draft_ids = draft_ids, .draft_probs = draft_probs, .target_probs = target_probs,
      .max_draft = args->max_draft, .vocab = args->vocab, .splits = row_cut.splits, .chunk = row_cut.chunk,
      .scans = scans};
  volt8_rejection_walk_args walk_args = {
      .num_draft = num_draft, .draft_ids = draft_ids, .draft_probs = draft_probs, .target_probs = target_probs,
      .greedy = (CUdeviceptr)(uintptr_t)args->greedy, .max_draft = args->max_draft, .vocab = args->vocab,
      .row_splits = row_cut.splits, .scans = scans, .sum_splits = sum_cut.splits, .sum_chunk = sum_cut.chunk,
      .seed = args->seed, .offset = args->offset, .out_ids = out_ids, .stops = stops, .chunk_sums = chunk_sums,
      .part_sums = part_sums};
  volt8_rejection_draw_args draw_args = {
      .draft_ids = draft_ids, .draft_probs = draft_probs, .target_probs = target_probs, .max_draft = args->max_draft,
      .vocab = args->vocab, .sum_splits = sum_cut.splits, .sum_chunk = sum_cut.chunk, .stops = stops,
      .chunk_sums = chunk_sums, .part_sums = part_sums, .out_ids = out_ids,
      .num_accepted = (CUdeviceptr)(uintptr_t)args->num_accepted};
  void *row_params[VOLT8_MAX_KERNEL_PARAMS], *walk_params[VOLT8_MAX_KERNEL_PARAMS], *draw_params[VOLT8_MAX_KERNEL_PARAMS];
  volt8_kernel_params_fill(&volt8_rejection_rows_signature, &rows_args, row_params);
  volt8_kernel_params_fill(&volt8_rejection_walk_signature, &walk_args, walk_params);
  volt8_kernel_params_fill(&volt8_rejection_draw_signature, &draw_args, draw_params);
  status = cuda_check(ctx, ctx->cuda->cuLaunchKernel(kernels.rows, (unsigned)(batch * (size_t)row_cut.splits), (unsigned)rows, 1,
                                                     ROW_THREADS, 1, 1, 0, cu_stream, row_params, NULL),
                      "cuLaunchKernel(volt8_rejection_rows)");
  if (status == VOLT8_OK)
    status = cuda_check(ctx, ctx->cuda->cuLaunchKernel(kernels.walk, (unsigned)(batch * (size_t)sum_cut.splits), 1, 1,
                                                       FINISH_THREADS, 1, 1, 0, cu_stream, walk_params, NULL),
                        "cuLaunchKernel(volt8_rejection_walk)");
  if (status == VOLT8_OK)
    status = cuda_check(ctx, ctx->cuda->cuLaunchKernel(kernels.draw, (unsigned)batch, 1, 1, FINISH_THREADS, 1, 1, 0,
                                                       cu_stream, draw_params, NULL),
                        "cuLaunchKernel(volt8_rejection_draw)");
  /* Freed in stream order after the passes, also when a launch failed. */
  volt8_status freed = cuda_check(ctx, ctx->cuda->cuMemFreeAsync(scratch, cu_stream), "cuMemFreeAsync(scratch)");
  return status != VOLT8_OK ? status : freed;
}
