/* GPU suite for the rejection sampler: token-for-token equality with volt8_rejection_sample_host on
 * the same inputs and seed for every edge case (eager launches and graph replay), the device-side
 * flag for invalid input, capture before prepare, and the achieved bandwidth (logged).
 * Skips with the reason where there is no GPU; VOLT8_GPU_TEST_QUICK=1 keeps vocabularies small. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_fixture.h"

#define OUT_POISON 0x7B7B7B7B

TestSuite(gpu_sampler, .timeout = 900);

typedef enum case_kind {
  CASE_RANDOM,         /* random p and q, drafts drawn from q */
  CASE_DETERMINISTIC,  /* no draft_probs: q one-hot at the draft */
  CASE_MIXED,          /* num_draft 0..K, every other request greedy */
  CASE_ALL_ACCEPTED,   /* p(x) = 1 at every draft, one-hot bonus row */
  CASE_FIRST_REJECTED, /* p(x_0) = 0 */
  CASE_NO_DRAFTS,      /* num_draft 0, garbage draft ids */
  CASE_Q_EQUALS_P,
  CASE_ZERO_RESIDUAL,  /* p = q / 2: rejections with max(0, p - q) all zero */
  CASE_Q_ZERO,         /* q(x) = 0 < p(x) */
  CASE_ONE_HOT,        /* one-hot targets, greedy and sampling */
  CASE_INVALID,        /* NaN, negative, inf, bad ids, bad num_draft, zero rows in some requests */
  CASE_MISALIGNED,     /* rows not 16-byte aligned: the scalar path */
} case_kind;

static const char *const case_names[] = {"random",   "deterministic drafts", "mixed lengths and greedy", "all accepted",
                                         "first rejected", "no drafts", "q == p", "all-zero residual",
                                         "q(x) = 0", "one-hot targets", "invalid input", "misaligned rows"};

typedef struct host_case {
  volt8_rejection_args args;
  int32_t *num_draft, *draft_ids;
  float *draft_probs, *target_probs;
  uint8_t *greedy;
} host_case;

static uint64_t case_state;
static uint64_t next_random(void) {
  uint64_t z = (case_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double uniform01(void) { return (double)(next_random() >> 11) * 0x1.0p-53; }

/* About a tenth of the tokens get p = 0; one token holds extra mass. */
static void random_row(float *out, int32_t vocab) {
  double total = 0.0;
  for (int32_t j = 0; j < vocab; j++) {
    double u = uniform01();
    out[j] = u < 0.1 ? 0.0f : (float)(u * u * u);
    total += out[j];
  }
  out[next_random() % (uint64_t)vocab] += (float)(total * 0.3 + 1e-3);
  total = 0.0;
  for (int32_t j = 0; j < vocab; j++) total += out[j];
  for (int32_t j = 0; j < vocab; j++) out[j] = (float)(out[j] / total);
}

static float *target_of(host_case *c, int32_t b, int32_t i) {
  return c->target_probs + ((size_t)b * ((size_t)c->args.max_draft + 1) + (size_t)i) * (size_t)c->args.vocab;
}
static float *draft_of(host_case *c, int32_t b, int32_t i) {
  return c->draft_probs + ((size_t)b * (size_t)c->args.max_draft + (size_t)i) * (size_t)c->args.vocab;
}

static void make_case(host_case *c, case_kind kind, int32_t batch, int32_t max_draft, int32_t vocab, uint64_t seed) {
  memset(c, 0, sizeof *c);
  case_state = seed;
  size_t rows = (size_t)max_draft + 1;
  int with_draft_probs = kind != CASE_DETERMINISTIC;
  c->num_draft = calloc((size_t)batch, sizeof(int32_t));
  c->draft_ids = calloc((size_t)batch * (size_t)max_draft + 1, sizeof(int32_t));
  c->target_probs = calloc((size_t)batch * rows * (size_t)vocab, sizeof(float));
  c->draft_probs = with_draft_probs ? calloc((size_t)batch * (size_t)max_draft * (size_t)vocab + 1, sizeof(float)) : NULL;
  c->greedy = calloc((size_t)batch, 1);
  cr_assert(c->num_draft && c->draft_ids && c->target_probs && c->greedy && (!with_draft_probs || c->draft_probs),
            "host allocation failed");
  volt8_rejection_args init = VOLT8_REJECTION_ARGS_INIT;
  c->args = init;
  c->args.batch = batch;
  c->args.max_draft = max_draft;
  c->args.vocab = vocab;
  c->args.num_draft = c->num_draft;
  c->args.draft_ids = c->draft_ids;
  c->args.draft_probs = c->draft_probs;
  c->args.target_probs = c->target_probs;
  c->args.greedy = c->greedy;
  c->args.seed = seed * 0x100000001ull;
  c->args.offset = seed + 17;
  for (int32_t b = 0; b < batch; b++) {
    c->num_draft[b] = kind == CASE_MIXED ? b % (max_draft + 1) : kind == CASE_NO_DRAFTS ? 0 : max_draft;
    c->greedy[b] = (kind == CASE_MIXED || kind == CASE_ONE_HOT) && b % 2;
    for (size_t i = 0; i < rows; i++) random_row(target_of(c, b, (int32_t)i), vocab);
    for (int32_t i = 0; i < max_draft; i++) {
      float *draft = with_draft_probs ? draft_of(c, b, i) : NULL;
      if (draft) random_row(draft, vocab);
      if (draft && kind == CASE_Q_EQUALS_P) memcpy(draft, target_of(c, b, i), sizeof(float) * (size_t)vocab);
      if (draft && kind == CASE_ZERO_RESIDUAL)
        for (int32_t j = 0; j < vocab; j++) target_of(c, b, i)[j] = draft[j] * 0.5f;
      int32_t token = (int32_t)(next_random() % (uint64_t)vocab);
      c->draft_ids[(size_t)b * (size_t)max_draft + (size_t)i] = kind == CASE_NO_DRAFTS ? -5 : token;
      float *target = target_of(c, b, i);
      if (kind == CASE_ALL_ACCEPTED || kind == CASE_ONE_HOT) {
        memset(target, 0, sizeof(float) * (size_t)vocab);
        int32_t hot = kind == CASE_ONE_HOT && next_random() % 3 == 0 ? (int32_t)(next_random() % (uint64_t)vocab) : token;
        target[hot] = 1.0f;
      }
      if (kind == CASE_FIRST_REJECTED && i == 0) target[token] = 0.0f;
      if (kind == CASE_Q_ZERO) {
        if (target[token] == 0.0f) target[token] = 0.01f;
        draft[token] = 0.0f;
      }
    }
    if (kind == CASE_ALL_ACCEPTED || kind == CASE_ONE_HOT) {
      memset(target_of(c, b, max_draft), 0, sizeof(float) * (size_t)vocab);
      target_of(c, b, max_draft)[(b * 7) % vocab] = 1.0f;
    }
  }
  if (kind == CASE_INVALID && batch >= 8) {
    target_of(c, 1, 0)[vocab / 2] = NAN;
    draft_of(c, 2, max_draft - 1)[vocab - 1] = -0.5f;
    target_of(c, 3, max_draft)[0] = INFINITY;
    c->draft_ids[4 * (size_t)max_draft] = vocab;
    c->num_draft[5] = max_draft + 1;
    memset(target_of(c, 6, 0), 0, sizeof(float) * (size_t)vocab);
    c->num_draft[7] = -1;
  }
}

static void free_case(host_case *c) {
  free(c->num_draft);
  free(c->draft_ids);
  free(c->draft_probs);
  free(c->target_probs);
  free(c->greedy);
}

typedef struct device_case {
  volt8_rejection_args args;
  CUdeviceptr num_draft, draft_ids, draft_probs, target_allocation, greedy, out_ids, num_accepted;
} device_case;

static CUdeviceptr upload(volt8_ctx *ctx, const void *data, size_t bytes, size_t extra_bytes) {
  CUdeviceptr pointer = 0;
  cr_assert_eq(ctx->cuda->cuMemAlloc(&pointer, bytes + extra_bytes + 4), CUDA_SUCCESS, "cuMemAlloc of %zu bytes",
               bytes + extra_bytes);
  if (data) cr_assert_eq(ctx->cuda->cuMemcpyHtoD(pointer + extra_bytes, data, bytes), CUDA_SUCCESS);
  return pointer;
}

/* The same arrays on the device; misaligned: target_probs starts 4 bytes into its allocation. */
static void upload_case(volt8_ctx *ctx, const host_case *c, int misaligned, device_case *d) {
  size_t batch = (size_t)c->args.batch, rows = (size_t)c->args.max_draft + 1, vocab = (size_t)c->args.vocab;
  size_t shift = misaligned ? 4 : 0;
  d->num_draft = upload(ctx, c->num_draft, batch * 4, 0);
  d->draft_ids = upload(ctx, c->draft_ids, batch * (size_t)c->args.max_draft * 4, 0);
  d->draft_probs = c->draft_probs ? upload(ctx, c->draft_probs, batch * (rows - 1) * vocab * 4, 0) : 0;
  d->target_allocation = upload(ctx, c->target_probs, batch * rows * vocab * 4, shift);
  d->greedy = upload(ctx, c->greedy, batch, 0);
  d->out_ids = upload(ctx, NULL, batch * rows * 4, 0);
  d->num_accepted = upload(ctx, NULL, batch * 4, 0);
  d->args = c->args;
  d->args.num_draft = (const int32_t *)(uintptr_t)d->num_draft;
  d->args.draft_ids = (const int32_t *)(uintptr_t)d->draft_ids;
  d->args.draft_probs = c->draft_probs ? (const float *)(uintptr_t)d->draft_probs : NULL;
  d->args.target_probs = (const float *)(uintptr_t)(d->target_allocation + shift);
  d->args.greedy = c->args.greedy ? (const uint8_t *)(uintptr_t)d->greedy : NULL;
  d->args.out_ids = (int32_t *)(uintptr_t)d->out_ids;
  d->args.num_accepted = (int32_t *)(uintptr_t)d->num_accepted;
}

static void free_device_case(volt8_ctx *ctx, device_case *d) {
  CUdeviceptr pointers[7] = {d->num_draft, d->draft_ids, d->draft_probs, d->target_allocation, d->greedy, d->out_ids,
                             d->num_accepted};
  for (int i = 0; i < 7; i++)
    if (pointers[i]) ctx->cuda->cuMemFree(pointers[i]);
}

static void poison_outputs(volt8_ctx *ctx, const device_case *d, CUstream stream) {
  size_t batch = (size_t)d->args.batch, rows = (size_t)d->args.max_draft + 1;
  cr_assert_eq(ctx->cuda->cuMemsetD32Async(d->out_ids, OUT_POISON, batch * rows, stream), CUDA_SUCCESS);
  cr_assert_eq(ctx->cuda->cuMemsetD32Async(d->num_accepted, OUT_POISON, batch, stream), CUDA_SUCCESS);
}

/* Runs the host sampler on `c` and compares the device outputs with it, token for token. */
static void compare_with_host(volt8_ctx *ctx, host_case *c, const device_case *d, CUstream stream, const char *label) {
  size_t batch = (size_t)c->args.batch, rows = (size_t)c->args.max_draft + 1;
  int32_t *host_ids = malloc(batch * rows * 4), *host_accepted = malloc(batch * 4);
  int32_t *device_ids = malloc(batch * rows * 4), *device_accepted = malloc(batch * 4);
  cr_assert(host_ids && host_accepted && device_ids && device_accepted, "host allocation failed");
  c->args.out_ids = host_ids;
  c->args.num_accepted = host_accepted;
  volt8_status host_status = volt8_rejection_sample_host(&c->args);
  cr_assert(host_status == VOLT8_OK || host_status == VOLT8_ERR_INVALID_ARGUMENT, "%s: host sampler: %s", label,
            volt8_last_error(NULL));
  CUresult result = ctx->cuda->cuStreamSynchronize(stream);
  cr_assert_eq(result, CUDA_SUCCESS, "%s: the sampler kernels failed: %s", label, volt8_cuda_error_text(ctx->cuda, result));
  cr_assert_eq(ctx->cuda->cuMemcpyDtoH(device_ids, d->out_ids, batch * rows * 4), CUDA_SUCCESS);
  cr_assert_eq(ctx->cuda->cuMemcpyDtoH(device_accepted, d->num_accepted, batch * 4), CUDA_SUCCESS);
  int flagged = 0;
  for (size_t b = 0; b < batch; b++) {
    cr_assert_eq(device_accepted[b], host_accepted[b], "%s (seed %llu offset %llu): request %zu accepted %d on the GPU, %d on the host",
                 label, (unsigned long long)c->args.seed, (unsigned long long)c->args.offset, b, device_accepted[b],
                 host_accepted[b]);
    for (size_t i = 0; i < rows; i++)
      cr_assert_eq(device_ids[b * rows + i], host_ids[b * rows + i],
                   "%s (seed %llu offset %llu): request %zu position %zu: GPU %d, host %d", label,
                   (unsigned long long)c->args.seed, (unsigned long long)c->args.offset, b, i, device_ids[b * rows + i],
                   host_ids[b * rows + i]);
    flagged += device_ids[b * rows] == -1;
  }
  cr_assert_eq(flagged > 0, host_status != VOLT8_OK, "%s: %d requests flagged on the device, host status %s", label, flagged,
               volt8_status_string(host_status));
  free(host_ids);
  free(host_accepted);
  free(device_ids);
  free(device_accepted);
}

static void prepare_or_fail(volt8_ctx *ctx) {
  volt8_status status = volt8_rejection_prepare(ctx);
  cr_assert_eq(status, VOLT8_OK, "volt8_rejection_prepare: %s: %s", volt8_status_string(status), volt8_last_error(ctx));
}

typedef struct gpu_case {
  case_kind kind;
  int32_t batch, max_draft, vocab;
} gpu_case;

ParameterizedTestParameters(gpu_sampler, matches_host) {
  static gpu_case cases[] = {
      {CASE_RANDOM, 16, 3, 100},          {CASE_RANDOM, 8, 3, 8193},         {CASE_RANDOM, 8, 5, 32000},
      {CASE_RANDOM, 4, 3, 151936},        {CASE_RANDOM, 40, 1, 1},           {CASE_RANDOM, 40, 2, 8},
      {CASE_RANDOM, 40, 2, 33},           {CASE_RANDOM, 300, 1, 1000},       {CASE_DETERMINISTIC, 16, 3, 100},
      {CASE_DETERMINISTIC, 4, 3, 151936}, {CASE_MIXED, 24, 5, 8193},         {CASE_MIXED, 12, 3, 151936},
      {CASE_ALL_ACCEPTED, 16, 4, 100},    {CASE_FIRST_REJECTED, 16, 3, 8193}, {CASE_NO_DRAFTS, 16, 3, 100},
      {CASE_Q_EQUALS_P, 16, 3, 100},      {CASE_ZERO_RESIDUAL, 64, 2, 50},   {CASE_Q_ZERO, 16, 3, 8193},
      {CASE_ONE_HOT, 64, 3, 8},           {CASE_ONE_HOT, 8, 3, 32000},       {CASE_INVALID, 12, 3, 100},
      {CASE_INVALID, 8, 3, 32000},        {CASE_MISALIGNED, 8, 3, 100},      {CASE_MISALIGNED, 4, 3, 32000},
  };
  return cr_make_param_array(gpu_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(gpu_case *param, gpu_sampler, matches_host) {
  if (gpu_quick_mode() && param->vocab > 10000) cr_skip_test("quick mode: V %d left out", param->vocab);
  volt8_ctx *ctx = gpu_open();
  prepare_or_fail(ctx);
  char label[128];
  snprintf(label, sizeof label, "%s, B %d K %d V %d", case_names[param->kind], param->batch, param->max_draft, param->vocab);
  host_case c;
  make_case(&c, param->kind, param->batch, param->max_draft, param->vocab, 1 + (uint64_t)param->kind * 100 + (uint64_t)param->vocab);
  device_case d;
  upload_case(ctx, &c, param->kind == CASE_MISALIGNED, &d);
  for (int run = 0; run < 2; run++) {
    poison_outputs(ctx, &d, NULL);
    volt8_status status = volt8_rejection_sample(ctx, &d.args, NULL);
    cr_assert_eq(status, VOLT8_OK, "%s: %s: %s", label, volt8_status_string(status), volt8_last_error(ctx));
    compare_with_host(ctx, &c, &d, NULL, label);
    c.args.offset += 1000;
    d.args.offset += 1000;
  }
  free_device_case(ctx, &d);
  free_case(&c);
  volt8_ctx_destroy(ctx);
}

Test(gpu_sampler, graph_replay_matches_host) {
  volt8_ctx *ctx = gpu_open();
  const volt8_cuda_driver *cuda = ctx->cuda;
  prepare_or_fail(ctx);
  host_case c;
  make_case(&c, CASE_MIXED, 32, 3, gpu_quick_mode() ? 8193 : 32000, 5); /* rows cut in 4 chunks and more */
  device_case d;
  upload_case(ctx, &c, 0, &d);
  CUstream stream;
  cr_assert_eq(cuda->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUgraph graph = NULL;
  CUgraphExec exec = NULL;
  cr_assert_eq(cuda->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  volt8_status status = volt8_rejection_sample(ctx, &d.args, stream);
  CUresult end = cuda->cuStreamEndCapture(stream, &graph);
  cr_assert_eq(status, VOLT8_OK, "sample while capturing: %s", volt8_last_error(ctx));
  cr_assert_eq(end, CUDA_SUCCESS, "cuStreamEndCapture: %s", volt8_cuda_error_text(cuda, end));
  cr_assert_eq(cuda->cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  for (int replay = 0; replay < 3; replay++) {
    if (replay == 2) {
      /* New probabilities in the same buffers: the graph reads them. */
      host_case fresh;
      make_case(&fresh, CASE_MIXED, 32, 3, c.args.vocab, 6);
      size_t bytes = 32 * 4 * (size_t)c.args.vocab * 4;
      memcpy(c.target_probs, fresh.target_probs, bytes);
      cr_assert_eq(cuda->cuMemcpyHtoD(d.target_allocation, c.target_probs, bytes), CUDA_SUCCESS);
      free_case(&fresh);
    }
    poison_outputs(ctx, &d, stream);
    cr_assert_eq(cuda->cuGraphLaunch(exec, stream), CUDA_SUCCESS);
    char label[64];
    snprintf(label, sizeof label, "graph replay %d", replay);
    compare_with_host(ctx, &c, &d, stream, label);
  }
  cuda->cuGraphExecDestroy(exec);
  cuda->cuGraphDestroy(graph);
  cuda->cuStreamDestroy(stream);
  free_device_case(ctx, &d);
  free_case(&c);
  volt8_ctx_destroy(ctx);
}

Test(gpu_sampler, capture_before_prepare_is_refused) {
  volt8_ctx *ctx = gpu_open();
  const volt8_cuda_driver *cuda = ctx->cuda;
  host_case c;
  make_case(&c, CASE_RANDOM, 4, 2, 100, 7);
  device_case d;
  upload_case(ctx, &c, 0, &d);
  CUstream stream;
  cr_assert_eq(cuda->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  volt8_status status = volt8_rejection_sample(ctx, &d.args, stream);
  CUgraph graph = NULL;
  CUresult end = cuda->cuStreamEndCapture(stream, &graph);
  cr_assert_eq(status, VOLT8_ERR_CAPTURE, "unprepared sampler while capturing: %s (%s)", volt8_status_string(status),
               volt8_last_error(ctx));
  cr_assert(strstr(volt8_last_error(ctx), "volt8_rejection_prepare"), "message: %s", volt8_last_error(ctx));
  cr_assert_eq(end, CUDA_SUCCESS, "the refused call broke the capture: %s", volt8_cuda_error_text(cuda, end));
  if (graph) cuda->cuGraphDestroy(graph);
  /* Outside capture the first call prepares by itself. */
  poison_outputs(ctx, &d, stream);
  cr_assert_eq(volt8_rejection_sample(ctx, &d.args, stream), VOLT8_OK, "%s", volt8_last_error(ctx));
  compare_with_host(ctx, &c, &d, stream, "first call after a refused capture");
  cuda->cuStreamDestroy(stream);
  free_device_case(ctx, &d);
  free_case(&c);
  volt8_ctx_destroy(ctx);
}

/* Bytes the row pass must read: target rows 0..n and draft rows 0..n-1 of every request. */
Test(gpu_sampler, bandwidth) {
  if (gpu_quick_mode()) cr_skip_test("quick mode: no bandwidth run");
  volt8_ctx *ctx = gpu_open();
  const volt8_cuda_driver *cuda = ctx->cuda;
  prepare_or_fail(ctx);
  const int32_t vocab = 151936, max_batch = 256, max_k = 5, iterations = 20;
  const int32_t batches[] = {1, 8, 64, 256}, drafts[] = {1, 3, 5};
  float *row = malloc(sizeof(float) * (size_t)vocab);
  int32_t *ids = malloc(sizeof(int32_t) * max_batch * max_k), *counts = malloc(sizeof(int32_t) * max_batch);
  cr_assert(row && ids && counts, "host allocation failed");
  case_state = 99;
  CUdeviceptr target = 0, draft = 0, d_ids = 0, d_counts = 0, d_out = 0, d_accepted = 0;
  size_t row_bytes = sizeof(float) * (size_t)vocab;
  cr_assert_eq(cuda->cuMemAlloc(&target, row_bytes * max_batch * (max_k + 1)), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuMemAlloc(&draft, row_bytes * max_batch * max_k), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuMemAlloc(&d_ids, 4 * max_batch * max_k), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuMemAlloc(&d_counts, 4 * max_batch), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuMemAlloc(&d_out, 4 * max_batch * (max_k + 1)), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuMemAlloc(&d_accepted, 4 * max_batch), CUDA_SUCCESS);
  for (int32_t r = 0; r < max_batch * (max_k + 1); r++) {
    if (r % 64 == 0) random_row(row, vocab);
    cr_assert_eq(cuda->cuMemcpyHtoD(target + row_bytes * r, row, row_bytes), CUDA_SUCCESS);
    if (r < max_batch * max_k) cr_assert_eq(cuda->cuMemcpyHtoD(draft + row_bytes * r, row, row_bytes), CUDA_SUCCESS);
  }
  CUevent start, stop;
  CUstream stream;
  cr_assert_eq(cuda->cuEventCreate(&start, 0), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuEventCreate(&stop, 0), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  /* The ceiling: a device-to-device copy of the draft rows, counted as bytes read plus written. */
  size_t copy_bytes = row_bytes * max_batch * max_k;
  cr_assert_eq(cuda->cuMemcpyDtoDAsync(target, draft, copy_bytes, NULL), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuEventRecord(start, NULL), CUDA_SUCCESS);
  for (int i = 0; i < 10; i++) cr_assert_eq(cuda->cuMemcpyDtoDAsync(target, draft, copy_bytes, NULL), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuEventRecord(stop, NULL), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuEventSynchronize(stop), CUDA_SUCCESS);
  float copy_ms = 0.0f;
  cr_assert_eq(cuda->cuEventElapsedTime(&copy_ms, start, stop), CUDA_SUCCESS);
  double copy_gbps = 2.0 * (double)copy_bytes * 10 / (copy_ms / 1e3) / 1e9;
  fprintf(stderr, "rejection sampler bandwidth, V %d: device-to-device copy %.0f GB/s (read + write)\n", vocab, copy_gbps);
  for (size_t bi = 0; bi < 4; bi++) {
    for (size_t ki = 0; ki < 3; ki++) {
      int32_t batch = batches[bi], k = drafts[ki];
      for (int32_t i = 0; i < batch * k; i++) ids[i] = (int32_t)(next_random() % (uint64_t)vocab);
      for (int32_t b = 0; b < batch; b++) counts[b] = k;
      cr_assert_eq(cuda->cuMemcpyHtoD(d_ids, ids, 4 * (size_t)batch * k), CUDA_SUCCESS);
      cr_assert_eq(cuda->cuMemcpyHtoD(d_counts, counts, 4 * (size_t)batch), CUDA_SUCCESS);
      volt8_rejection_args args = VOLT8_REJECTION_ARGS_INIT;
      args.batch = batch;
      args.max_draft = k;
      args.vocab = vocab;
      args.num_draft = (const int32_t *)(uintptr_t)d_counts;
      args.draft_ids = (const int32_t *)(uintptr_t)d_ids;
      args.draft_probs = (const float *)(uintptr_t)draft;
      args.target_probs = (const float *)(uintptr_t)target;
      args.out_ids = (int32_t *)(uintptr_t)d_out;
      args.num_accepted = (int32_t *)(uintptr_t)d_accepted;
      cr_assert_eq(volt8_rejection_sample(ctx, &args, NULL), VOLT8_OK, "%s", volt8_last_error(ctx));
      cr_assert_eq(cuda->cuEventRecord(start, NULL), CUDA_SUCCESS);
      for (int i = 0; i < iterations; i++) {
        args.offset = (uint64_t)i;
        cr_assert_eq(volt8_rejection_sample(ctx, &args, NULL), VOLT8_OK, "%s", volt8_last_error(ctx));
      }
      cr_assert_eq(cuda->cuEventRecord(stop, NULL), CUDA_SUCCESS);
      cr_assert_eq(cuda->cuEventSynchronize(stop), CUDA_SUCCESS);
      float eager_ms = 0.0f;
      cr_assert_eq(cuda->cuEventElapsedTime(&eager_ms, start, stop), CUDA_SUCCESS);
      /* The same call captured once and replayed: what a decode loop inside a graph pays. */
      CUgraph graph = NULL;
      CUgraphExec exec = NULL;
      cr_assert_eq(cuda->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
      volt8_status captured = volt8_rejection_sample(ctx, &args, stream);
      cr_assert_eq(cuda->cuStreamEndCapture(stream, &graph), CUDA_SUCCESS);
      cr_assert_eq(captured, VOLT8_OK, "%s", volt8_last_error(ctx));
      cr_assert_eq(cuda->cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
      cr_assert_eq(cuda->cuGraphLaunch(exec, stream), CUDA_SUCCESS);
      cr_assert_eq(cuda->cuEventRecord(start, stream), CUDA_SUCCESS);
      for (int i = 0; i < iterations; i++) cr_assert_eq(cuda->cuGraphLaunch(exec, stream), CUDA_SUCCESS);
      cr_assert_eq(cuda->cuEventRecord(stop, stream), CUDA_SUCCESS);
      cr_assert_eq(cuda->cuEventSynchronize(stop), CUDA_SUCCESS);
      float graph_ms = 0.0f;
      cr_assert_eq(cuda->cuEventElapsedTime(&graph_ms, start, stop), CUDA_SUCCESS);
      cuda->cuGraphExecDestroy(exec);
      cuda->cuGraphDestroy(graph);
      double bytes = (double)batch * (2.0 * k + 1.0) * (double)row_bytes;
      double eager_s = eager_ms / 1e3 / iterations, graph_s = graph_ms / 1e3 / iterations;
      fprintf(stderr,
              "rejection sampler B %3d K %d V %d: eager %8.1f us (%4.1f%% of copy), graph %8.1f us, %7.1f GB/s over the "
              "rows it must read (%4.1f%% of copy)\n",
              batch, k, vocab, eager_s * 1e6, 100.0 * bytes / eager_s / 1e9 / copy_gbps, graph_s * 1e6,
              bytes / graph_s / 1e9, 100.0 * bytes / graph_s / 1e9 / copy_gbps);
    }
  }
  cuda->cuStreamDestroy(stream);
  cuda->cuEventDestroy(start);
  cuda->cuEventDestroy(stop);
  CUdeviceptr pointers[6] = {target, draft, d_ids, d_counts, d_out, d_accepted};
  for (int i = 0; i < 6; i++) cuda->cuMemFree(pointers[i]);
  free(row);
  free(ids);
  free(counts);
  volt8_ctx_destroy(ctx);
}
