/* Shared pieces of the GPU suites (see gpu_fixture.h). */
#include "gpu_fixture.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "moe/experts_internal.h"
#include "core/numeric.h"
#include "reference/reference.h"

#define POISON_HALF 0xFFFFu

uint64_t gpu_rng_state;

void gpu_seed(uint64_t salt) {
  gpu_rng_state = (0x9e3779b97f4a7c15ull ^ salt ^ (uint64_t)time(NULL) * 0x2545f4914f6cdd1dull) | 1u;
  cr_log_info("seed %llu", (unsigned long long)gpu_rng_state);
}

uint64_t gpu_random(void) {
  gpu_rng_state ^= gpu_rng_state << 13;
  gpu_rng_state ^= gpu_rng_state >> 7;
  gpu_rng_state ^= gpu_rng_state << 17;
  return gpu_rng_state;
}

static double uniform(void) { return (double)(gpu_random() >> 11) * (1.0 / 9007199254740992.0); }

static uint8_t random_e4m3(void) {
  for (;;) {
    uint8_t code = (uint8_t)gpu_random();
    if (!volt8_e4m3_is_nan(code)) return code;
  }
}

int gpu_quick_mode(void) {
  const char *quick = getenv("VOLT8_GPU_TEST_QUICK");
  return quick && strcmp(quick, "1") == 0;
}

const char *gpu_source_root(void) {
  const char *root = getenv("VOLT8_SOURCE_ROOT");
  return root && *root ? root : VOLT8_SOURCE_DIR;
}

void gpu_write_checkpoints(const char *name, const char *groups, char *dir, size_t size) {
  char venv_python[1024], command[4096];
  snprintf(venv_python, sizeof venv_python, "%s/.venv/bin/python3", gpu_source_root());
  const char *python = getenv("VOLT8_PYTHON");
  if (!python) python = access(venv_python, X_OK) == 0 ? venv_python : "python3";
  snprintf(dir, size, "/tmp/volt8-gpu-%s-XXXXXX", name);
  cr_assert_not_null(mkdtemp(dir));
  snprintf(command, sizeof command, "'%s' '%s/tests/fixtures/make_checkpoints.py' '%s' %s >/dev/null", python,
           gpu_source_root(), dir, groups);
  cr_assert_eq(system(command), 0, "fixture generation failed: %s", command);
}

void gpu_remove_folder(const char *dir) {
  char command[1024];
  snprintf(command, sizeof command, "rm -rf '%s'", dir);
  if (system(command) != 0) cr_log_warn("could not remove %s", dir);
}

static volt8_cuda_driver counting_driver;
static const volt8_cuda_driver *counted_driver;
static _Atomic int64_t live_allocations;

/* A driver call's result, the live count moved by `change` where it succeeded. */
static CUresult counted(CUresult result, int64_t change) {
  if (result == CUDA_SUCCESS) atomic_fetch_add(&live_allocations, change);
  return result;
}

static CUresult counting_alloc(CUdeviceptr *pointer, size_t bytes) {
  return counted(counted_driver->cuMemAlloc(pointer, bytes), 1);
}

static CUresult counting_alloc_async(CUdeviceptr *pointer, size_t bytes, CUstream stream) {
  return counted(counted_driver->cuMemAllocAsync(pointer, bytes, stream), 1);
}

/* Freeing 0 frees nothing. */
static CUresult counting_free(CUdeviceptr pointer) {
  return counted(counted_driver->cuMemFree(pointer), pointer ? -1 : 0);
}

static CUresult counting_free_async(CUdeviceptr pointer, CUstream stream) {
  return counted(counted_driver->cuMemFreeAsync(pointer, stream), pointer ? -1 : 0);
}

void gpu_count_allocations(volt8_ctx *ctx) {
  cr_assert_not_null(ctx->cuda);
  cr_assert_null(counted_driver, "gpu_count_allocations: one ctx a test");
  counted_driver = ctx->cuda;
  counting_driver = *ctx->cuda;
  counting_driver.cuMemAlloc = counting_alloc;
  counting_driver.cuMemAllocAsync = counting_alloc_async;
  counting_driver.cuMemFree = counting_free;
  counting_driver.cuMemFreeAsync = counting_free_async;
  ctx->cuda = &counting_driver;
}

int64_t gpu_live_allocations(void) { return atomic_load(&live_allocations); }

volt8_ctx *gpu_open(void) {
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.target_arch = getenv("VOLT8_TARGET_ARCH");
  volt8_ctx *ctx = NULL;
  volt8_status status = volt8_ctx_create(&options, &ctx);
  cr_assert_eq(status, VOLT8_OK, "volt8_ctx_create: %s", volt8_last_error(NULL));
  if (volt8_ctx_require_device(ctx) != VOLT8_OK) {
    char reason[600];
    snprintf(reason, sizeof reason, "%s", volt8_last_error(ctx));
    volt8_ctx_destroy(ctx);
    cr_skip_test("%s", reason);
  }
  return ctx;
}

void gpu_make_problem(volt8_ctx *ctx, const volt8_moe_shape *shape, host_problem *problem) {
  problem->shape = *shape;
  cr_assert_eq(volt8_moe_dims_compute(ctx, shape, &problem->dims), VOLT8_OK, "%s", volt8_last_error(ctx));
  size_t experts = (size_t)shape->num_experts;
  size_t w13 = (size_t)problem->dims.w13_bytes_per_expert * experts, w2 = (size_t)problem->dims.w2_bytes_per_expert * experts;
  size_t s13 = (size_t)problem->dims.s13_elems_per_expert * experts, s2 = (size_t)problem->dims.s2_elems_per_expert * experts;
  problem->w13 = malloc(w13);
  problem->w2 = malloc(w2);
  problem->s13 = malloc(s13 * 2);
  problem->s2 = malloc(s2 * 2);
  cr_assert(problem->w13 && problem->w2 && problem->s13 && problem->s2, "host allocation failed");
  for (size_t i = 0; i < w13; i++) problem->w13[i] = random_e4m3();
  for (size_t i = 0; i < w2; i++) problem->w2[i] = random_e4m3();
  /* scale * 2^8 in [0.01, 0.05]: block scales of max|w|/448 for weights near 0.1 */
  for (size_t i = 0; i < s13; i++) problem->s13[i] = volt8_half_from_double(0.01 + 0.04 * uniform());
  for (size_t i = 0; i < s2; i++) problem->s2[i] = volt8_half_from_double(0.01 + 0.04 * uniform());
}

void gpu_free_problem(host_problem *problem) {
  free(problem->w13);
  free(problem->w2);
  free(problem->s13);
  free(problem->s2);
}

volt8_experts *gpu_upload(volt8_ctx *ctx, const host_problem *problem, int32_t max_tokens, int32_t max_top_k) {
  volt8_host_experts host = {sizeof host, problem->w13, problem->s13, problem->w2, problem->s2};
  volt8_experts *experts = NULL;
  volt8_status status = volt8_experts_create_from_host(ctx, &problem->shape, &host, max_tokens, max_top_k, &experts);
  cr_assert_eq(status, VOLT8_OK, "upload: %s", volt8_last_error(ctx));
  return experts;
}

static void route_tokens(const host_problem *problem, device_batch *batch, routing mode) {
  int32_t experts = volt8_moe_global_experts(&problem->shape), top_k = batch->top_k;
  for (int32_t t = 0; t < batch->num_tokens; t++) {
    for (int32_t j = 0; j < top_k; j++) {
      int32_t id;
      int unique;
      do {
        if (mode == ROUTING_ONE_EXPERT) id = (j == 0) ? 7 % experts : (int32_t)(gpu_random() % (uint64_t)experts);
        else if (mode == ROUTING_FEW_EXPERTS) id = (int32_t)(gpu_random() % (uint64_t)(top_k + 2 < experts ? top_k + 2 : experts));
        else id = (int32_t)(gpu_random() % (uint64_t)experts);
        unique = 1;
        for (int32_t k = 0; k < j; k++) unique &= batch->ids[(size_t)t * top_k + k] != id;
      } while (!unique);
      batch->ids[(size_t)t * top_k + j] = id;
      batch->weights[(size_t)t * top_k + j] = (float)(0.05 + uniform());
    }
  }
}

static int compare_ints(const void *a, const void *b) {
  int32_t left = *(const int32_t *)a, right = *(const int32_t *)b;
  return (left > right) - (left < right);
}

/* Every token, or 128 spread over them and the two on each side of every cut: a block_m 1 launch
 * takes 65535 / top_k whole tokens, a token-grid launch 65535. Sorted, without repeats. */
static void sample_rows(device_batch *batch) {
  int32_t tokens = batch->num_tokens, count = 0;
  if (tokens <= GPU_REFERENCE_ROWS) {
    batch->rows = malloc((size_t)tokens * sizeof *batch->rows);
    cr_assert_not_null(batch->rows);
    for (int32_t t = 0; t < tokens; t++) batch->rows[t] = t;
    batch->row_count = tokens;
    return;
  }
  int32_t pair_cut = 65535 / batch->top_k, cuts = tokens / pair_cut + tokens / 65535;
  int32_t *rows = malloc((size_t)(128 + 2 * cuts) * sizeof *rows);
  cr_assert_not_null(rows);
  for (int32_t r = 0; r < 128; r++) rows[count++] = (int32_t)((int64_t)r * (tokens - 1) / 127);
  for (int32_t cut = pair_cut; cut < tokens; cut += pair_cut) rows[count++] = cut - 1, rows[count++] = cut;
  for (int32_t cut = 65535; cut < tokens; cut += 65535) rows[count++] = cut - 1, rows[count++] = cut;
  qsort(rows, (size_t)count, sizeof *rows, compare_ints);
  int32_t kept = 0;
  for (int32_t i = 0; i < count; i++)
    if (kept == 0 || rows[i] != rows[kept - 1]) rows[kept++] = rows[i];
  batch->rows = rows;
  batch->row_count = kept;
}

static void compute_reference(volt8_ctx *ctx, const host_problem *problem, device_batch *batch) {
  volt8_host_experts host = {sizeof host, problem->w13, problem->s13, problem->w2, problem->s2};
  volt8_status status = volt8_reference_moe_rows(ctx, &problem->shape, &host, batch->x, batch->ids, batch->weights,
                                                 batch->num_tokens, batch->top_k, batch->rows, batch->row_count,
                                                 batch->reference, 4);
  cr_assert_eq(status, VOLT8_OK, "reference: %s", volt8_last_error(ctx));
}

void gpu_make_batch(volt8_ctx *ctx, const host_problem *problem, int32_t num_tokens, int32_t top_k, routing mode,
                    device_batch *batch) {
  const volt8_cuda_driver *cuda = ctx->cuda;
  int32_t hidden = problem->shape.hidden;
  batch->num_tokens = num_tokens;
  batch->top_k = top_k;
  size_t pairs = (size_t)num_tokens * top_k;
  batch->x = malloc((size_t)num_tokens * hidden * 2);
  batch->ids = malloc(pairs * 4);
  batch->weights = malloc(pairs * 4);
  sample_rows(batch);
  batch->reference = malloc((size_t)batch->row_count * hidden * sizeof(double));
  cr_assert(batch->x && batch->ids && batch->weights && batch->reference, "host allocation failed");
  for (size_t i = 0; i < (size_t)num_tokens * hidden; i++) batch->x[i] = volt8_half_from_double(2.0 * uniform() - 1.0);
  route_tokens(problem, batch, mode);
  compute_reference(ctx, problem, batch);
  size_t x_bytes = (size_t)num_tokens * hidden * 2;
  cr_assert_eq(cuda->cuMemAlloc(&batch->d_x, x_bytes), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuMemAlloc(&batch->d_out, x_bytes), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuMemAlloc(&batch->d_ids, pairs * 4), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuMemAlloc(&batch->d_weights, pairs * 4), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuMemcpyHtoD(batch->d_x, batch->x, x_bytes), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuMemcpyHtoD(batch->d_ids, batch->ids, pairs * 4), CUDA_SUCCESS);
  cr_assert_eq(cuda->cuMemcpyHtoD(batch->d_weights, batch->weights, pairs * 4), CUDA_SUCCESS);
}

void gpu_update_ids(volt8_ctx *ctx, const host_problem *problem, device_batch *batch) {
  compute_reference(ctx, problem, batch);
  size_t pairs = (size_t)batch->num_tokens * batch->top_k;
  cr_assert_eq(ctx->cuda->cuMemcpyHtoD(batch->d_ids, batch->ids, pairs * 4), CUDA_SUCCESS);
}

void gpu_reroute_batch(volt8_ctx *ctx, const host_problem *problem, device_batch *batch) {
  route_tokens(problem, batch, ROUTING_UNIFORM);
  gpu_update_ids(ctx, problem, batch);
  size_t pairs = (size_t)batch->num_tokens * batch->top_k;
  cr_assert_eq(ctx->cuda->cuMemcpyHtoD(batch->d_weights, batch->weights, pairs * 4), CUDA_SUCCESS);
}

void gpu_free_batch(volt8_ctx *ctx, device_batch *batch) {
  ctx->cuda->cuMemFree(batch->d_x);
  ctx->cuda->cuMemFree(batch->d_out);
  ctx->cuda->cuMemFree(batch->d_ids);
  ctx->cuda->cuMemFree(batch->d_weights);
  free(batch->x);
  free(batch->ids);
  free(batch->weights);
  free(batch->rows);
  free(batch->reference);
}

volt8_moe_args gpu_batch_args(const device_batch *batch) {
  volt8_moe_args args = VOLT8_MOE_ARGS_INIT;
  args.num_tokens = batch->num_tokens;
  args.top_k = batch->top_k;
  args.x = (const void *)batch->d_x;
  args.topk_ids = (const int32_t *)batch->d_ids;
  args.topk_weights = (const float *)batch->d_weights;
  args.out = (void *)batch->d_out;
  return args;
}

double gpu_check_output(volt8_ctx *ctx, int32_t hidden, const device_batch *batch, const char *label, uint16_t *copy_out) {
  const volt8_cuda_driver *cuda = ctx->cuda;
  CUresult result = cuda->cuCtxSynchronize();
  cr_assert_eq(result, CUDA_SUCCESS, "%s: %s", label, volt8_cuda_error_text(cuda, result));
  size_t elements = (size_t)batch->num_tokens * hidden;
  uint16_t *out = malloc(elements * 2);
  cr_assert_eq(cuda->cuMemcpyDtoH(out, batch->d_out, elements * 2), CUDA_SUCCESS);
  for (size_t i = 0; i < elements; i++) {
    if (out[i] == POISON_HALF || isnan(volt8_half_to_double(out[i]))) {
      free(out);
      cr_assert_fail("%s: out[%zu] (token %zu, column %zu) not written or NaN", label, i, i / hidden, i % hidden);
    }
  }
  if (copy_out) memcpy(copy_out, out, elements * 2);
  /* The reference's rows, gathered in place (rows ascend, so row r never lies past token rows[r]). */
  for (int32_t r = 0; r < batch->row_count; r++)
    memmove(out + (size_t)r * hidden, out + (size_t)batch->rows[r] * hidden, (size_t)hidden * 2);
  size_t checked = (size_t)batch->row_count * hidden;
  double error = 0.0;
  cr_assert_eq(volt8_relative_l2_half(ctx, batch->reference, out, checked, &error), VOLT8_OK);
  size_t worst = 0;
  double worst_diff = -1.0;
  for (size_t i = 0; i < checked; i++) {
    double diff = fabs(volt8_half_to_double(out[i]) - batch->reference[i]);
    if (diff > worst_diff) worst_diff = diff, worst = i;
  }
  free(out);
  cr_assert(error <= GPU_TOLERANCE,
            "%s: relative L2 %.3e > %.0e over %d rows; worst at token %d, column %zu, off by %.3e", label, error,
            GPU_TOLERANCE, batch->row_count, batch->rows[worst / hidden], worst % hidden, worst_diff);
  return error;
}

double gpu_check_forward(volt8_ctx *ctx, volt8_experts *experts, int32_t hidden, const device_batch *batch,
                         const char *gate_up, const char *down, const char *label) {
  char full_label[320];
  snprintf(full_label, sizeof full_label, "%s gate_up=%s down=%s", label, gate_up ? gate_up : "(dispatch)",
           down ? down : "(dispatch)");
  cr_assert_eq(volt8_experts_set_variants(experts, gate_up, down), VOLT8_OK);
  volt8_moe_args args = gpu_batch_args(batch);
  cr_assert_eq(ctx->cuda->cuMemsetD8Async(batch->d_out, 0xFF, (size_t)batch->num_tokens * hidden * 2, NULL), CUDA_SUCCESS);
  /* NaN h and z, -1 items and counters: a kernel reading them before the kernel that writes them
   * is done (an early launch waiting too late) shows up as a wrong output. */
  cr_assert_eq(volt8_experts_fill_workspace(experts, 0xFF, NULL), VOLT8_OK, "%s", volt8_last_error(ctx));
  volt8_status status = volt8_moe_forward(experts, &args, NULL);
  cr_assert_eq(status, VOLT8_OK, "%s: forward: %s", full_label, volt8_last_error(ctx));
  return gpu_check_output(ctx, hidden, batch, full_label, NULL);
}
