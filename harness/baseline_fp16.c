/* FP16 baselines through cuBLASLt (one matmul per active expert), cuBLAS grouped GEMM, and the
 * sorted-and-padded peer (a strided-batched cuBLASLt matmul over every expert's slot). */
#include "baseline_fp16.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SUPPORT_THREADS 128
#define DEQUANT_THREADS 256

enum { OP_GATE_UP = 0, OP_DOWN = 1 };

typedef struct set_plan {
  int32_t active;         /* experts with at least one pair */
  int32_t *experts;       /* [active] ascending */
  int32_t *first_row;     /* [active] first row of each in the gathered order */
  int32_t *rows;          /* [active] pairs of each */
  CUdeviceptr row_token;  /* [P] token of each gathered row */
  CUdeviceptr pair_row;   /* [P] gathered row of each pair */
  /* grouped GEMM: per op the host arrays cuBLAS reads at capture and the device pointer arrays */
  int *group_m[2], *group_n[2], *group_k[2], *group_lda[2], *group_ldb[2], *group_ldc[2], *group_size;
  cublasOperation_t *transa, *transb;
  float *alpha, *beta;
  CUdeviceptr pointers;   /* [2 ops][A, B, C][active] device pointers */
  CUgraph graph;
  CUgraphExec exec;
} set_plan;

struct bench_baseline {
  bench_gpu *gpu;
  bench_cublas *cublas;
  bench_baseline_kind kind;
  volt8_moe_shape shape;
  const bench_inputs *inputs;
  const bench_fp16_weights *weights;
  CUdeviceptr xg, y, h, z; /* gathered x [P][H], y [P][2I], h [P][I], z [P][H], FP16 */
  set_plan *sets;
  int32_t max_rows;        /* most pairs of one expert: the layouts below are indexed by it */
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulPreference_t preference;
  cublasLtMatrixLayout_t a_layout[2];
  cublasLtMatrixLayout_t *b_layout[2], *d_layout[2];
  cublasLtMatmulHeuristicResult_t *algo[2];
  /* C: every expert's slot of `capacity` rows, the device's sort into them (shared by the sets' graphs,
   * which run one after the other on one stream), one batched layout of A, B and D and its algorithm
   * per op */
  int32_t capacity;
  CUdeviceptr counts, slot_token, slot_pair_row; /* [E], [E x capacity], [pairs] */
  cublasLtMatrixLayout_t batched_layout[2][3];
  cublasLtMatmulHeuristicResult_t batched_algo[2];
};

/* Column-major view of op `op` for one expert with `rows` pairs: D (m x n) = op(A) (m x k) . B (k x n). */
static void gemm_dims(const volt8_moe_shape *shape, int op, int32_t rows, int *m, int *n, int *k) {
  *m = op == OP_GATE_UP ? 2 * shape->intermediate : shape->hidden;
  *n = rows;
  *k = op == OP_GATE_UP ? shape->hidden : shape->intermediate;
}

static void gemm_pointers(const bench_baseline *baseline, int op, int32_t expert, int32_t first_row, CUdeviceptr *a,
                          CUdeviceptr *b, CUdeviceptr *c) {
  int m, n, k;
  gemm_dims(&baseline->shape, op, 1, &m, &n, &k);
  CUdeviceptr weights = op == OP_GATE_UP ? baseline->weights->w13 : baseline->weights->w2;
  CUdeviceptr input = op == OP_GATE_UP ? baseline->xg : baseline->h;
  CUdeviceptr output = op == OP_GATE_UP ? baseline->y : baseline->z;
  *a = weights + (CUdeviceptr)expert * (CUdeviceptr)m * (CUdeviceptr)k * 2;
  *b = input + (CUdeviceptr)first_row * (CUdeviceptr)k * 2;
  *c = output + (CUdeviceptr)first_row * (CUdeviceptr)m * 2;
}

volt8_status bench_sorted_capacity(volt8_ctx *ctx, const bench_inputs *inputs, int32_t num_experts, int32_t *out) {
  *out = 0;
  int32_t *count = calloc(num_experts > 0 ? (size_t)num_experts : 1, sizeof *count);
  if (!count) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench: out of memory for %d experts' counts", num_experts);
  int32_t most = 0;
  size_t pairs = (size_t)inputs->num_tokens * (size_t)inputs->top_k;
  for (int32_t s = 0; s < inputs->count; s++) {
    memset(count, 0, (size_t)num_experts * sizeof *count);
    const int32_t *ids = inputs->sets[s].ids;
    for (size_t p = 0; p < pairs; p++)
      if (ids[p] >= 0 && ids[p] < num_experts && ++count[ids[p]] > most) most = count[ids[p]];
  }
  free(count);
  *out = (most + BENCH_SORTED_ROW_ALIGN - 1) / BENCH_SORTED_ROW_ALIGN * BENCH_SORTED_ROW_ALIGN;
  if (*out == 0) *out = BENCH_SORTED_ROW_ALIGN;
  return VOLT8_OK;
}

static volt8_status dequant_tensor(bench_gpu *gpu, const uint8_t *codes, int64_t code_count, const uint16_t *scales,
                                   int64_t scale_count, CUdeviceptr out, int cols, int rows, int rows_per_half,
                                   int half_stride, int row_stride, int row_offset, int col_offset,
                                   const volt8_moe_shape *shape) {
  CUdeviceptr device_codes = 0, device_scales = 0;
  volt8_status status = bench_gpu_alloc(gpu, (size_t)code_count, &device_codes, "cuMemAlloc(FP8 staging)");
  if (status == VOLT8_OK) status = bench_gpu_alloc(gpu, (size_t)scale_count * 2, &device_scales, "cuMemAlloc(scales)");
  if (status == VOLT8_OK)
    status = bench_gpu_check(gpu, gpu->cuda->cuMemcpyHtoD(device_codes, codes, (size_t)code_count), "cuMemcpyHtoD(codes)");
  if (status == VOLT8_OK)
    status = bench_gpu_check(gpu, gpu->cuda->cuMemcpyHtoD(device_scales, scales, (size_t)scale_count * 2),
                             "cuMemcpyHtoD(scales)");
  long long expert_codes = (long long)rows * cols;
  int expert_scales = (int)(scale_count / shape->num_experts), block_n = shape->block_n, block_k = shape->block_k;
  void *params[] = {&device_codes, &device_scales, &out,       &cols,    &rows_per_half, &half_stride, &row_stride,
                    &row_offset,   &col_offset,    &block_n,   &block_k, &expert_codes,  &expert_scales};
  if (status == VOLT8_OK)
    status = bench_gpu_launch(gpu, gpu->dequant, (unsigned)((cols + DEQUANT_THREADS - 1) / DEQUANT_THREADS),
                              (unsigned)rows, (unsigned)shape->num_experts, DEQUANT_THREADS, gpu->stream, params,
                              "bench_dequant");
  if (status == VOLT8_OK) status = bench_gpu_check(gpu, gpu->cuda->cuStreamSynchronize(gpu->stream), "bench_dequant");
  if (device_codes) gpu->cuda->cuMemFree(device_codes);
  if (device_scales) gpu->cuda->cuMemFree(device_scales);
  return status;
}

volt8_status bench_fp16_weights_create(bench_gpu *gpu, const bench_experts_host *experts, bench_fp16_weights *out) {
  memset(out, 0, sizeof *out);
  const volt8_moe_shape *shape = &experts->shape;
  const volt8_moe_dims *dims = &experts->dims;
  int64_t num_experts = shape->num_experts;
  int64_t w13_count = dims->w13_bytes_per_expert * num_experts, w2_count = dims->w2_bytes_per_expert * num_experts;
  volt8_status status = bench_gpu_alloc(gpu, (size_t)w13_count * 2, &out->w13, "cuMemAlloc(FP16 w13)");
  if (status == VOLT8_OK) status = bench_gpu_alloc(gpu, (size_t)w2_count * 2, &out->w2, "cuMemAlloc(FP16 w2)");
  if (status == VOLT8_OK)
    status = dequant_tensor(gpu, experts->w13, w13_count, experts->s13, dims->s13_elems_per_expert * num_experts, out->w13,
                            shape->hidden, 2 * shape->intermediate, shape->intermediate, dims->g13 * dims->k13_blocks,
                            dims->k13_blocks, shape->intermediate_offset, 0, shape);
  if (status == VOLT8_OK)
    status = dequant_tensor(gpu, experts->w2, w2_count, experts->s2, dims->s2_elems_per_expert * num_experts, out->w2,
                            shape->intermediate, shape->hidden, shape->hidden, 0, dims->g2, 0,
                            shape->intermediate_offset, shape);
  out->bytes = (w13_count + w2_count) * 2;
  if (status != VOLT8_OK) bench_fp16_weights_destroy(gpu, out);
  return status;
}

void bench_fp16_weights_destroy(bench_gpu *gpu, bench_fp16_weights *weights) {
  if (weights->w13) gpu->cuda->cuMemFree(weights->w13);
  if (weights->w2) gpu->cuda->cuMemFree(weights->w2);
  memset(weights, 0, sizeof *weights);
}

static volt8_status lt_check(bench_baseline *baseline, cublasStatus_t result, const char *what) {
  if (result == CUBLAS_STATUS_SUCCESS) return VOLT8_OK;
  return volt8_fail(baseline->gpu->ctx, result == CUBLAS_STATUS_NOT_SUPPORTED ? VOLT8_ERR_UNSUPPORTED : VOLT8_ERR_CUDA,
                    "bench: %s failed: %s", what, bench_cublas_status_text(baseline->cublas, result));
}

/* Sorts set `index`'s pairs by expert (pair order within each) and uploads the gather maps. */
static volt8_status plan_set(bench_baseline *baseline, int32_t index) {
  const bench_inputs *inputs = baseline->inputs;
  const bench_input_set *set = &inputs->sets[index];
  set_plan *plan = &baseline->sets[index];
  int32_t num_experts = baseline->shape.num_experts, pairs = inputs->num_tokens * inputs->top_k;
  int32_t *count = calloc((size_t)num_experts + 1, sizeof *count);
  int32_t *row_token = malloc((size_t)pairs * sizeof *row_token), *pair_row = malloc((size_t)pairs * sizeof *pair_row);
  plan->experts = malloc((size_t)num_experts * sizeof *plan->experts);
  plan->first_row = malloc((size_t)num_experts * sizeof *plan->first_row);
  plan->rows = malloc((size_t)num_experts * sizeof *plan->rows);
  volt8_status status = VOLT8_OK;
  if (!count || !row_token || !pair_row || !plan->experts || !plan->first_row || !plan->rows)
    status = volt8_fail(baseline->gpu->ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench: out of memory for the baseline plan");
  for (int32_t p = 0; status == VOLT8_OK && p < pairs; p++) count[set->ids[p] + 1]++;
  for (int32_t e = 0; status == VOLT8_OK && e < num_experts; e++) {
    if (count[e + 1] > 0) {
      plan->experts[plan->active] = e;
      plan->first_row[plan->active] = count[e];
      plan->rows[plan->active] = count[e + 1];
      if (count[e + 1] > baseline->max_rows) baseline->max_rows = count[e + 1];
      plan->active++;
    }
    count[e + 1] += count[e];
  }
  for (int32_t p = 0; status == VOLT8_OK && p < pairs; p++) { /* count[e] is expert e's cursor now */
    int32_t row = count[set->ids[p]]++;
    row_token[row] = p / inputs->top_k;
    pair_row[p] = row;
  }
  size_t bytes = (size_t)pairs * 4;
  if (status == VOLT8_OK) status = bench_gpu_alloc(baseline->gpu, bytes, &plan->row_token, "cuMemAlloc(row_token)");
  if (status == VOLT8_OK) status = bench_gpu_alloc(baseline->gpu, bytes, &plan->pair_row, "cuMemAlloc(pair_row)");
  if (status == VOLT8_OK)
    status = bench_gpu_check(baseline->gpu, baseline->gpu->cuda->cuMemcpyHtoD(plan->row_token, row_token, bytes),
                             "cuMemcpyHtoD(row_token)");
  if (status == VOLT8_OK)
    status = bench_gpu_check(baseline->gpu, baseline->gpu->cuda->cuMemcpyHtoD(plan->pair_row, pair_row, bytes),
                             "cuMemcpyHtoD(pair_row)");
  free(count);
  free(row_token);
  free(pair_row);
  return status;
}

/* The grouped GEMM's argument arrays of one set: host arrays per op, device pointer arrays. */
static volt8_status plan_grouped(bench_baseline *baseline, set_plan *plan) {
  int32_t groups = plan->active;
  for (int op = 0; op < 2; op++) {
    int **arrays[6] = {&plan->group_m[op], &plan->group_n[op], &plan->group_k[op],
                       &plan->group_lda[op], &plan->group_ldb[op], &plan->group_ldc[op]};
    for (int i = 0; i < 6; i++)
      if (!(*arrays[i] = malloc((size_t)groups * sizeof(int))))
        return volt8_fail(baseline->gpu->ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench: out of memory");
  }
  plan->group_size = malloc((size_t)groups * sizeof(int));
  plan->transa = malloc((size_t)groups * sizeof *plan->transa);
  plan->transb = malloc((size_t)groups * sizeof *plan->transb);
  plan->alpha = malloc((size_t)groups * sizeof(float));
  plan->beta = malloc((size_t)groups * sizeof(float));
  CUdeviceptr *pointers = malloc((size_t)groups * 6 * sizeof *pointers);
  if (!plan->group_size || !plan->transa || !plan->transb || !plan->alpha || !plan->beta || !pointers) {
    free(pointers);
    return volt8_fail(baseline->gpu->ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench: out of memory");
  }
  for (int32_t g = 0; g < groups; g++) {
    plan->group_size[g] = 1;
    plan->transa[g] = CUBLAS_OP_T;
    plan->transb[g] = CUBLAS_OP_N;
    plan->alpha[g] = 1.0f;
    plan->beta[g] = 0.0f;
    for (int op = 0; op < 2; op++) {
      gemm_dims(&baseline->shape, op, plan->rows[g], &plan->group_m[op][g], &plan->group_n[op][g], &plan->group_k[op][g]);
      plan->group_lda[op][g] = plan->group_k[op][g];
      plan->group_ldb[op][g] = plan->group_k[op][g];
      plan->group_ldc[op][g] = plan->group_m[op][g];
      gemm_pointers(baseline, op, plan->experts[g], plan->first_row[g], &pointers[(op * 3 + 0) * groups + g],
                    &pointers[(op * 3 + 1) * groups + g], &pointers[(op * 3 + 2) * groups + g]);
    }
  }
  size_t bytes = (size_t)groups * 6 * sizeof *pointers;
  volt8_status status = bench_gpu_alloc(baseline->gpu, bytes, &plan->pointers, "cuMemAlloc(grouped pointers)");
  if (status == VOLT8_OK)
    status = bench_gpu_check(baseline->gpu, baseline->gpu->cuda->cuMemcpyHtoD(plan->pointers, pointers, bytes),
                             "cuMemcpyHtoD(grouped pointers)");
  free(pointers);
  return status;
}

/* The matmul description (D = A^T . B, FP32 compute) and the heuristic's preference A and C share. */
static volt8_status prepare_desc(bench_baseline *baseline) {
  bench_cublas *cublas = baseline->cublas;
  cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  uint64_t workspace_bytes = BENCH_CUBLAS_WORKSPACE_BYTES;
  volt8_status status = lt_check(baseline, cublas->ltMatmulDescCreate(&baseline->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                                 "cublasLtMatmulDescCreate");
  if (status == VOLT8_OK)
    status = lt_check(baseline, cublas->ltMatmulDescSetAttribute(baseline->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                                                 sizeof transpose), "set TRANSA");
  if (status == VOLT8_OK)
    status = lt_check(baseline, cublas->ltMatmulDescSetAttribute(baseline->desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep,
                                                                 sizeof keep), "set TRANSB");
  if (status == VOLT8_OK)
    status = lt_check(baseline, cublas->ltMatmulPreferenceCreate(&baseline->preference), "cublasLtMatmulPreferenceCreate");
  if (status == VOLT8_OK)
    status = lt_check(baseline, cublas->ltMatmulPreferenceSetAttribute(baseline->preference,
                                                                       CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                       &workspace_bytes, sizeof workspace_bytes),
                      "set the workspace preference");
  return status;
}

/* A column-major FP16 layout of rows x cols, leading dimension rows; with batches > 0, of `batches` such
 * matrices `stride` elements apart. `what` names its creation in an error. */
static volt8_status fp16_layout(bench_baseline *baseline, cublasLtMatrixLayout_t *layout, int rows, int cols,
                                int32_t batches, int64_t stride, const char *what) {
  bench_cublas *cublas = baseline->cublas;
  int32_t count = batches;
  volt8_status status = lt_check(baseline, cublas->ltMatrixLayoutCreate(layout, CUDA_R_16F, (uint64_t)rows, (uint64_t)cols,
                                                                        rows),
                                 what);
  if (status == VOLT8_OK && batches > 0)
    status = lt_check(baseline, cublas->ltMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                                   sizeof count),
                      "set the batch count");
  if (status == VOLT8_OK && batches > 0)
    status = lt_check(baseline, cublas->ltMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                                   &stride, sizeof stride),
                      "set the batch stride");
  return status;
}

/* For D (m x n) = A^T . B with A's layout `a` made: the layouts of B (k x n) and D (m x n), each of
 * `batches` matrices one matrix apart when batches > 0 (C), of one matrix when it is 0 (A), and the
 * algorithm the heuristic ranks first for them under the shared description and preference. */
static volt8_status matmul_layouts(bench_baseline *baseline, int m, int n, int k, int32_t batches,
                                   cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t *b, cublasLtMatrixLayout_t *d,
                                   cublasLtMatmulHeuristicResult_t *algo) {
  bench_cublas *cublas = baseline->cublas;
  int returned = 0;
  volt8_status status = fp16_layout(baseline, b, k, n, batches, (int64_t)n * k,
                                    batches ? "cublasLtMatrixLayoutCreate(batched)" : "cublasLtMatrixLayoutCreate(B)");
  if (status == VOLT8_OK)
    status = fp16_layout(baseline, d, m, n, batches, (int64_t)n * m,
                         batches ? "cublasLtMatrixLayoutCreate(batched)" : "cublasLtMatrixLayoutCreate(D)");
  if (status == VOLT8_OK)
    status = lt_check(baseline, cublas->ltMatmulAlgoGetHeuristic(cublas->lt, baseline->desc, a, *b, *d, *d,
                                                                 baseline->preference, 1, algo, &returned),
                      batches ? "cublasLtMatmulAlgoGetHeuristic(batched)" : "cublasLtMatmulAlgoGetHeuristic");
  if (status == VOLT8_OK && returned == 0)
    status = batches ? volt8_fail(baseline->gpu->ctx, VOLT8_ERR_UNSUPPORTED,
                                  "bench: cuBLASLt has no FP16 algorithm for %d batches of %d x %d x %d", batches, m, n, k)
                     : volt8_fail(baseline->gpu->ctx, VOLT8_ERR_UNSUPPORTED,
                                  "bench: cuBLASLt has no FP16 algorithm for %d x %d x %d", m, n, k);
  return status;
}

/* cuBLASLt descriptors of A: A's layout per op, B/D layouts and the heuristic's algorithm per (op, rows),
 * made once for every row count the sets use. */
static volt8_status prepare_lt(bench_baseline *baseline) {
  volt8_status status = prepare_desc(baseline);
  for (int op = 0; op < 2 && status == VOLT8_OK; op++) {
    int m, n, k;
    gemm_dims(&baseline->shape, op, 1, &m, &n, &k);
    status = fp16_layout(baseline, &baseline->a_layout[op], k, m, 0, 0, "cublasLtMatrixLayoutCreate(A)");
    baseline->b_layout[op] = calloc((size_t)baseline->max_rows + 1, sizeof(cublasLtMatrixLayout_t));
    baseline->d_layout[op] = calloc((size_t)baseline->max_rows + 1, sizeof(cublasLtMatrixLayout_t));
    baseline->algo[op] = calloc((size_t)baseline->max_rows + 1, sizeof(cublasLtMatmulHeuristicResult_t));
    if (status == VOLT8_OK && (!baseline->b_layout[op] || !baseline->d_layout[op] || !baseline->algo[op]))
      status = volt8_fail(baseline->gpu->ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench: out of memory");
  }
  return status;
}

/* C's descriptors: per op the batched layouts of A (every expert's weights), B and D (every expert's
 * slot of `capacity` rows) and the algorithm the heuristic ranks first for them. */
static volt8_status prepare_sorted(bench_baseline *baseline) {
  volt8_status status = prepare_desc(baseline);
  int32_t experts = baseline->shape.num_experts;
  for (int op = 0; op < 2 && status == VOLT8_OK; op++) {
    int m, n, k;
    gemm_dims(&baseline->shape, op, baseline->capacity, &m, &n, &k);
    cublasLtMatrixLayout_t *layouts = baseline->batched_layout[op];
    status = fp16_layout(baseline, &layouts[0], k, m, experts, (int64_t)m * k, "cublasLtMatrixLayoutCreate(batched)");
    if (status == VOLT8_OK)
      status = matmul_layouts(baseline, m, n, k, experts, layouts[0], &layouts[1], &layouts[2],
                              &baseline->batched_algo[op]);
  }
  return status;
}

static volt8_status lt_rows_ready(bench_baseline *baseline, int op, int32_t rows) {
  if (baseline->b_layout[op][rows]) return VOLT8_OK;
  int m, n, k;
  gemm_dims(&baseline->shape, op, rows, &m, &n, &k);
  return matmul_layouts(baseline, m, n, k, 0, baseline->a_layout[op], &baseline->b_layout[op][rows],
                        &baseline->d_layout[op][rows], &baseline->algo[op][rows]);
}

static volt8_status enqueue_gemms(bench_baseline *baseline, const set_plan *plan, int op, CUstream stream) {
  bench_cublas *cublas = baseline->cublas;
  if (baseline->kind == BENCH_BASELINE_SORTED) {
    const float alpha = 1.0f, beta = 0.0f;
    CUdeviceptr a, b, c;
    gemm_pointers(baseline, op, 0, 0, &a, &b, &c);
    const cublasLtMatrixLayout_t *layouts = baseline->batched_layout[op];
    return lt_check(baseline,
                    cublas->ltMatmul(cublas->lt, baseline->desc, &alpha, (const void *)a, layouts[0], (const void *)b,
                                     layouts[1], &beta, (const void *)c, layouts[2], (void *)c, layouts[2],
                                     &baseline->batched_algo[op].algo, (void *)cublas->workspace,
                                     BENCH_CUBLAS_WORKSPACE_BYTES, stream),
                    "cublasLtMatmul(batched)");
  }
  if (baseline->kind == BENCH_BASELINE_GROUPED) {
    int32_t groups = plan->active;
    CUdeviceptr arrays = plan->pointers + (CUdeviceptr)op * 3 * groups * sizeof(CUdeviceptr);
    volt8_status status = lt_check(baseline, cublas->blasSetStream(cublas->blas, stream), "cublasSetStream");
    if (status != VOLT8_OK) return status;
    return lt_check(baseline,
                    cublas->blasGemmGroupedBatchedEx(
                        cublas->blas, plan->transa, plan->transb, plan->group_m[op], plan->group_n[op],
                        plan->group_k[op], plan->alpha, (const void *const *)arrays, CUDA_R_16F, plan->group_lda[op],
                        (const void *const *)(arrays + groups * sizeof(CUdeviceptr)), CUDA_R_16F, plan->group_ldb[op],
                        plan->beta, (void *const *)(arrays + 2 * groups * sizeof(CUdeviceptr)), CUDA_R_16F,
                        plan->group_ldc[op], groups, plan->group_size, CUBLAS_COMPUTE_32F),
                    "cublasGemmGroupedBatchedEx");
  }
  const float alpha = 1.0f, beta = 0.0f;
  volt8_status status = VOLT8_OK;
  for (int32_t g = 0; g < plan->active && status == VOLT8_OK; g++) {
    int32_t rows = plan->rows[g];
    CUdeviceptr a, b, c;
    gemm_pointers(baseline, op, plan->experts[g], plan->first_row[g], &a, &b, &c);
    status = lt_check(baseline,
                      cublas->ltMatmul(cublas->lt, baseline->desc, &alpha, (const void *)a, baseline->a_layout[op],
                                       (const void *)b, baseline->b_layout[op][rows], &beta, (const void *)c,
                                       baseline->d_layout[op][rows], (void *)c, baseline->d_layout[op][rows],
                                       &baseline->algo[op][rows].algo, (void *)cublas->workspace,
                                       BENCH_CUBLAS_WORKSPACE_BYTES, stream),
                      "cublasLtMatmul");
  }
  return status;
}

/* What A's and C's forwards share after their gathers: gate_up's matmuls (plan: A's per-expert rows;
 * NULL: C's batched one), SiLU*up over `rows` rows, down's matmuls, the top-k sum over `token_rows`. */
static volt8_status enqueue_gemms_and_sum(bench_baseline *baseline, const set_plan *plan, void **silu_params,
                                          unsigned rows, void **reduce_params, unsigned token_rows, CUstream stream) {
  bench_gpu *gpu = baseline->gpu;
  int hidden = baseline->shape.hidden, intermediate = baseline->shape.intermediate;
  volt8_status status = enqueue_gemms(baseline, plan, OP_GATE_UP, stream);
  if (status == VOLT8_OK)
    status = bench_gpu_launch(gpu, gpu->silu_mul, (unsigned)((intermediate + SUPPORT_THREADS - 1) / SUPPORT_THREADS),
                              rows, 1, SUPPORT_THREADS, stream, silu_params, "bench_silu_mul");
  if (status == VOLT8_OK) status = enqueue_gemms(baseline, plan, OP_DOWN, stream);
  if (status == VOLT8_OK)
    status = bench_gpu_launch(gpu, gpu->weighted_reduce, (unsigned)((hidden + SUPPORT_THREADS - 1) / SUPPORT_THREADS),
                              token_rows, 1, SUPPORT_THREADS, stream, reduce_params, "bench_weighted_reduce");
  return status;
}

/* C's forward of set `index`: the device's sort into the slots and their gather, the two batched
 * matmuls with SiLU*up between, the top-k sum. */
static volt8_status enqueue_sorted_forward(bench_baseline *baseline, int32_t index, CUstream stream) {
  bench_gpu *gpu = baseline->gpu;
  const bench_input_set *set = &baseline->inputs->sets[index];
  int hidden = baseline->shape.hidden, intermediate = baseline->shape.intermediate, top_k = baseline->inputs->top_k;
  int experts = baseline->shape.num_experts, capacity = baseline->capacity;
  int pairs = baseline->inputs->num_tokens * top_k, tokens = baseline->inputs->num_tokens, rows = experts * capacity;
  unsigned slot_rows = (unsigned)(rows < 65535 ? rows : 65535), token_rows = (unsigned)(tokens < 65535 ? tokens : 65535);
  unsigned route_blocks = (unsigned)((pairs + SUPPORT_THREADS - 1) / SUPPORT_THREADS);
  if (route_blocks > 4096) route_blocks = 4096;
  CUdeviceptr ids = set->d_ids, x = set->d_x, weights = set->d_weights, out = set->d_out;
  void *route_params[] = {&ids, &pairs, &top_k, &experts, &capacity, &baseline->counts, &baseline->slot_token,
                          &baseline->slot_pair_row};
  void *gather_params[] = {&x, &baseline->slot_token, &baseline->counts, &capacity, &baseline->xg, &hidden, &rows};
  void *silu_params[] = {&baseline->y, &baseline->h, &intermediate, &rows};
  void *reduce_params[] = {&baseline->z, &baseline->slot_pair_row, &weights, &out, &hidden, &top_k, &tokens};
  volt8_status status =
      bench_gpu_check(gpu, gpu->cuda->cuMemsetD32Async(baseline->counts, 0, (size_t)experts, stream), "cuMemsetD32Async(counts)");
  if (status == VOLT8_OK)
    status = bench_gpu_launch(gpu, gpu->pad_route, route_blocks, 1, 1, SUPPORT_THREADS, stream, route_params,
                              "bench_pad_route");
  if (status == VOLT8_OK)
    status = bench_gpu_launch(gpu, gpu->pad_gather, (unsigned)((hidden / 8 + SUPPORT_THREADS - 1) / SUPPORT_THREADS),
                              slot_rows, 1, SUPPORT_THREADS, stream, gather_params, "bench_pad_gather");
  if (status == VOLT8_OK)
    status = enqueue_gemms_and_sum(baseline, NULL, silu_params, slot_rows, reduce_params, token_rows, stream);
  return status;
}

/* One forward of set `index` onto `stream` (eager or under capture). */
static volt8_status enqueue_forward(bench_baseline *baseline, int32_t index, CUstream stream) {
  if (baseline->kind == BENCH_BASELINE_SORTED) return enqueue_sorted_forward(baseline, index, stream);
  bench_gpu *gpu = baseline->gpu;
  const bench_input_set *set = &baseline->inputs->sets[index];
  const set_plan *plan = &baseline->sets[index];
  int hidden = baseline->shape.hidden, intermediate = baseline->shape.intermediate, top_k = baseline->inputs->top_k;
  int pairs = baseline->inputs->num_tokens * top_k, tokens = baseline->inputs->num_tokens;
  /* the support kernels' CTA rows loop over their rows past a grid's 65535 */
  unsigned pair_rows = (unsigned)(pairs < 65535 ? pairs : 65535), token_rows = (unsigned)(tokens < 65535 ? tokens : 65535);
  CUdeviceptr x = set->d_x, weights = set->d_weights, out = set->d_out;
  CUdeviceptr row_token = plan->row_token, pair_row = plan->pair_row;
  void *gather_params[] = {&x, &row_token, &baseline->xg, &hidden, &pairs};
  void *silu_params[] = {&baseline->y, &baseline->h, &intermediate, &pairs};
  void *reduce_params[] = {&baseline->z, &pair_row, &weights, &out, &hidden, &top_k, &tokens};
  unsigned gather_blocks = (unsigned)((hidden / 8 + SUPPORT_THREADS - 1) / SUPPORT_THREADS);
  volt8_status status = bench_gpu_launch(gpu, gpu->gather, gather_blocks, pair_rows, 1, SUPPORT_THREADS, stream,
                                         gather_params, "bench_gather");
  if (status == VOLT8_OK)
    status = enqueue_gemms_and_sum(baseline, plan, silu_params, pair_rows, reduce_params, token_rows, stream);
  return status;
}

static volt8_status capture_set(bench_baseline *baseline, int32_t index) {
  bench_gpu *gpu = baseline->gpu;
  set_plan *plan = &baseline->sets[index];
  /* Relaxed: cuBLAS may query the runtime while the stream captures. */
  volt8_status status = bench_gpu_check(gpu, gpu->cuda->cuStreamBeginCapture(gpu->stream, CU_STREAM_CAPTURE_MODE_RELAXED),
                                        "cuStreamBeginCapture");
  if (status != VOLT8_OK) return status;
  volt8_status forward = enqueue_forward(baseline, index, gpu->stream);
  CUresult end = gpu->cuda->cuStreamEndCapture(gpu->stream, &plan->graph);
  status = forward != VOLT8_OK ? forward : bench_gpu_check(gpu, end, "cuStreamEndCapture");
  if (status == VOLT8_OK)
    status = bench_gpu_check(gpu, gpu->cuda->cuGraphInstantiate(&plan->exec, plan->graph, 0), "cuGraphInstantiate");
  return status;
}

/* xg, y, h and z have a row a pair (A, B) or a row of every expert's slot (C). */
static volt8_status allocate_scratch(bench_baseline *baseline) {
  size_t pairs = baseline->kind == BENCH_BASELINE_SORTED
                     ? (size_t)baseline->shape.num_experts * (size_t)baseline->capacity
                     : (size_t)baseline->inputs->num_tokens * baseline->inputs->top_k;
  size_t hidden = (size_t)baseline->shape.hidden, intermediate = (size_t)baseline->shape.intermediate;
  volt8_status status = bench_gpu_alloc(baseline->gpu, pairs * hidden * 2, &baseline->xg, "cuMemAlloc(xg)");
  if (status == VOLT8_OK) status = bench_gpu_alloc(baseline->gpu, pairs * intermediate * 4, &baseline->y, "cuMemAlloc(y)");
  if (status == VOLT8_OK) status = bench_gpu_alloc(baseline->gpu, pairs * intermediate * 2, &baseline->h, "cuMemAlloc(h)");
  if (status == VOLT8_OK) status = bench_gpu_alloc(baseline->gpu, pairs * hidden * 2, &baseline->z, "cuMemAlloc(z)");
  return status;
}

volt8_status bench_baseline_create(bench_gpu *gpu, bench_cublas *cublas, bench_baseline_kind kind,
                                   const bench_fp16_weights *weights, const volt8_moe_shape *shape,
                                   const bench_inputs *inputs, bench_baseline **out) {
  *out = NULL;
  const char *unavailable = kind == BENCH_BASELINE_GROUPED ? cublas->grouped_unavailable : cublas->lt_unavailable;
  if (unavailable[0]) return volt8_fail(gpu->ctx, VOLT8_ERR_UNSUPPORTED, "%s", unavailable);
  bench_baseline *baseline = calloc(1, sizeof *baseline);
  if (!baseline) return volt8_fail(gpu->ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench: out of memory");
  *baseline = (bench_baseline){.gpu = gpu, .cublas = cublas, .kind = kind, .shape = *shape, .inputs = inputs,
                               .weights = weights};
  baseline->sets = calloc((size_t)inputs->count, sizeof *baseline->sets);
  volt8_status status = baseline->sets ? VOLT8_OK : volt8_fail(gpu->ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench: out of memory");
  if (status == VOLT8_OK && kind == BENCH_BASELINE_SORTED)
    status = bench_sorted_capacity(gpu->ctx, inputs, shape->num_experts, &baseline->capacity);
  if (status == VOLT8_OK && kind == BENCH_BASELINE_SORTED && (int64_t)shape->num_experts * baseline->capacity > INT32_MAX)
    status = volt8_fail(gpu->ctx, VOLT8_ERR_UNSUPPORTED, "bench: C's %d experts' slots of %d rows pass 2^31 rows",
                        shape->num_experts, baseline->capacity);
  if (status == VOLT8_OK) status = allocate_scratch(baseline);
  if (status == VOLT8_OK && kind == BENCH_BASELINE_SORTED) {
    size_t pairs = (size_t)inputs->num_tokens * inputs->top_k, slots = (size_t)shape->num_experts * baseline->capacity;
    status = bench_gpu_alloc(gpu, (size_t)shape->num_experts * 4, &baseline->counts, "cuMemAlloc(counts)");
    if (status == VOLT8_OK) status = bench_gpu_alloc(gpu, slots * 4, &baseline->slot_token, "cuMemAlloc(slot_token)");
    if (status == VOLT8_OK) status = bench_gpu_alloc(gpu, pairs * 4, &baseline->slot_pair_row, "cuMemAlloc(slot_pair_row)");
    if (status == VOLT8_OK) status = prepare_sorted(baseline);
  }
  /* A and B sort on the host (C on the device, in its graph) */
  for (int32_t s = 0; kind != BENCH_BASELINE_SORTED && s < inputs->count && status == VOLT8_OK; s++)
    status = plan_set(baseline, s);
  if (status == VOLT8_OK && kind == BENCH_BASELINE_LT) {
    status = prepare_lt(baseline);
    for (int32_t s = 0; s < inputs->count && status == VOLT8_OK; s++)
      for (int32_t g = 0; g < baseline->sets[s].active && status == VOLT8_OK; g++)
        for (int op = 0; op < 2 && status == VOLT8_OK; op++) status = lt_rows_ready(baseline, op, baseline->sets[s].rows[g]);
  }
  for (int32_t s = 0; kind == BENCH_BASELINE_GROUPED && s < inputs->count && status == VOLT8_OK; s++)
    status = plan_grouped(baseline, &baseline->sets[s]);
  if (status == VOLT8_OK) status = enqueue_forward(baseline, 0, gpu->stream);
  if (status == VOLT8_OK) status = bench_gpu_check(gpu, gpu->cuda->cuStreamSynchronize(gpu->stream), "baseline forward");
  for (int32_t s = 0; s < inputs->count && status == VOLT8_OK; s++) status = capture_set(baseline, s);
  if (status != VOLT8_OK) {
    bench_baseline_destroy(baseline);
    return status;
  }
  *out = baseline;
  return VOLT8_OK;
}

int32_t bench_baseline_capacity(const bench_baseline *baseline) { return baseline->capacity; }

volt8_status bench_baseline_launch(void *user, int32_t set, CUstream stream) {
  bench_baseline *baseline = user;
  return bench_gpu_check(baseline->gpu, baseline->gpu->cuda->cuGraphLaunch(baseline->sets[set].exec, stream),
                         "cuGraphLaunch(baseline)");
}

static void free_plan(const volt8_cuda_driver *cuda, set_plan *plan) {
  if (plan->exec) cuda->cuGraphExecDestroy(plan->exec);
  if (plan->graph) cuda->cuGraphDestroy(plan->graph);
  CUdeviceptr device[3] = {plan->row_token, plan->pair_row, plan->pointers};
  for (int i = 0; i < 3; i++)
    if (device[i]) cuda->cuMemFree(device[i]);
  for (int op = 0; op < 2; op++) {
    free(plan->group_m[op]);
    free(plan->group_n[op]);
    free(plan->group_k[op]);
    free(plan->group_lda[op]);
    free(plan->group_ldb[op]);
    free(plan->group_ldc[op]);
  }
  free(plan->group_size);
  free(plan->transa);
  free(plan->transb);
  free(plan->alpha);
  free(plan->beta);
  free(plan->experts);
  free(plan->first_row);
  free(plan->rows);
}

void bench_baseline_destroy(bench_baseline *baseline) {
  if (!baseline) return;
  const volt8_cuda_driver *cuda = baseline->gpu->cuda;
  bench_cublas *cublas = baseline->cublas;
  cuda->cuStreamSynchronize(baseline->gpu->stream);
  for (int32_t s = 0; baseline->sets && s < baseline->inputs->count; s++) free_plan(cuda, &baseline->sets[s]);
  free(baseline->sets);
  for (int op = 0; op < 2; op++) {
    for (int32_t rows = 0; baseline->b_layout[op] && rows <= baseline->max_rows; rows++) {
      if (baseline->b_layout[op][rows]) cublas->ltMatrixLayoutDestroy(baseline->b_layout[op][rows]);
      if (baseline->d_layout[op][rows]) cublas->ltMatrixLayoutDestroy(baseline->d_layout[op][rows]);
    }
    if (baseline->a_layout[op]) cublas->ltMatrixLayoutDestroy(baseline->a_layout[op]);
    free(baseline->b_layout[op]);
    free(baseline->d_layout[op]);
    free(baseline->algo[op]);
  }
  for (int op = 0; op < 2; op++)
    for (int i = 0; i < 3; i++)
      if (baseline->batched_layout[op][i]) cublas->ltMatrixLayoutDestroy(baseline->batched_layout[op][i]);
  if (baseline->preference) cublas->ltMatmulPreferenceDestroy(baseline->preference);
  if (baseline->desc) cublas->ltMatmulDescDestroy(baseline->desc);
  CUdeviceptr scratch[7] = {baseline->xg,     baseline->y,          baseline->h,           baseline->z,
                            baseline->counts, baseline->slot_token, baseline->slot_pair_row};
  for (int i = 0; i < 7; i++)
    if (scratch[i]) cuda->cuMemFree(scratch[i]);
  free(baseline);
}
