/* The MoE forward in double on the host: the contract of moe_layout.h, computed from exactly
 * dequantized weights, with h rounded to FP16 as the GPU does. Pairs are grouped per expert so
 * each routed expert's rows are dequantized once and only routed experts are read. */
#include "reference/reference.h"

#include "core/ctx_internal.h"
#include "moe/kernels/moe_layout.h"
#include "core/numeric.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define FORWARD_NAME "volt8_reference_moe_forward"

typedef struct reference_inputs {
  const volt8_moe_shape *shape;
  volt8_moe_dims dims;
  const volt8_host_experts *experts;
  const int32_t *topk_ids;
  const float *topk_weights;
  int32_t num_tokens, top_k, num_pairs;
} reference_inputs;

typedef struct reference_buffers {
  double *x;              /* [num_tokens][H] */
  int32_t *expert_first;  /* [E + 1]: expert e's pairs are pair_order[expert_first[e] .. expert_first[e + 1]) */
  int32_t *pair_order;    /* valid pairs grouped per expert, in pair order within each */
  double *h;              /* [pairs][I], FP16-rounded: an expert's at the start */
  double e4m3_value[256]; /* code -> value * 2^-8, the bit-trick value; NaN codes left NaN */
} reference_buffers;

static volt8_status check_pointers(volt8_ctx *ctx, const volt8_host_experts *experts, const uint16_t *x,
                                   const int32_t *topk_ids, const float *topk_weights, int32_t num_tokens,
                                   int32_t top_k, double *out) {
  if (!experts) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, FORWARD_NAME ": experts is NULL");
  if (experts->size != sizeof(volt8_host_experts))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      FORWARD_NAME ": experts->size is %zu, expected %zu (use VOLT8_HOST_EXPERTS_INIT)", experts->size,
                      sizeof(volt8_host_experts));
  if (!experts->w13 || !experts->s13 || !experts->w2 || !experts->s2)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, FORWARD_NAME ": experts->%s is NULL",
                      !experts->w13   ? "w13"
                      : !experts->s13 ? "s13"
                      : !experts->w2  ? "w2"
                                      : "s2");
  if (num_tokens < 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, FORWARD_NAME ": num_tokens = %d is negative", num_tokens);
  if (top_k <= 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, FORWARD_NAME ": top_k = %d, must be positive", top_k);
  if ((int64_t)num_tokens * top_k > INT32_MAX)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      FORWARD_NAME ": num_tokens * top_k = %lld routed pairs exceeds INT32_MAX",
                      (long long)num_tokens * top_k);
  if (num_tokens > 0 && (!x || !topk_ids || !topk_weights || !out))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, FORWARD_NAME ": %s is NULL",
                      !x              ? "x"
                      : !topk_ids     ? "topk_ids"
                      : !topk_weights ? "topk_weights"
                                      : "out");
  return VOLT8_OK;
}

static void free_buffers(reference_buffers *buffers) {
  free(buffers->x);
  free(buffers->expert_first);
  free(buffers->pair_order);
  free(buffers->h);
}

static void *alloc_array(size_t count, size_t element_bytes) { return calloc(count ? count : 1, element_bytes); }

static volt8_status alloc_buffers(volt8_ctx *ctx, const reference_inputs *in, reference_buffers *buffers) {
  size_t hidden = (size_t)in->shape->hidden, intermediate = (size_t)in->shape->intermediate;
  size_t x_count = 0, h_count = 0;
  if (__builtin_mul_overflow((size_t)in->num_tokens, hidden, &x_count) ||
      __builtin_mul_overflow((size_t)in->num_pairs, intermediate, &h_count))
    return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, FORWARD_NAME ": buffer sizes overflow");
  buffers->x = alloc_array(x_count, sizeof(double));
  buffers->expert_first = alloc_array((size_t)in->shape->num_experts + 1, sizeof(int32_t));
  buffers->pair_order = alloc_array((size_t)in->num_pairs, sizeof(int32_t));
  buffers->h = alloc_array(h_count, sizeof(double));
  if (!buffers->x || !buffers->expert_first || !buffers->pair_order || !buffers->h)
    return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, FORWARD_NAME ": out of memory for %d tokens x %d hidden",
                      in->num_tokens, in->shape->hidden);
  return VOLT8_OK;
}

/* The shape's own index of the expert of a global id (expert parallelism: id - expert_start), or -1
 * when the shape does not hold it. */
static int32_t local_expert(const volt8_moe_shape *shape, int32_t id) {
  int64_t expert = (int64_t)id - shape->expert_start;
  return expert >= 0 && expert < shape->num_experts ? (int32_t)expert : -1;
}

/* Counting sort of the pairs by expert; pairs of experts the shape does not hold are left out, as
 * route does. */
static void group_pairs(const reference_inputs *in, reference_buffers *buffers) {
  int32_t num_experts = in->shape->num_experts;
  int32_t *first = buffers->expert_first;
  for (int32_t pair = 0; pair < in->num_pairs; pair++) {
    int32_t expert = local_expert(in->shape, in->topk_ids[pair]);
    if (expert >= 0) first[expert + 1]++;
  }
  for (int32_t expert = 0; expert < num_experts; expert++) first[expert + 1] += first[expert];
  /* first[e] serves as expert e's cursor, ends at the start of e + 1, and is shifted back after */
  for (int32_t pair = 0; pair < in->num_pairs; pair++) {
    int32_t expert = local_expert(in->shape, in->topk_ids[pair]);
    if (expert >= 0) buffers->pair_order[first[expert]++] = pair;
  }
  for (int32_t expert = num_experts; expert > 0; expert--) first[expert] = first[expert - 1];
  first[0] = 0;
}

/* Dequantizes codes[0..length) of one weight row; column k uses scales[(column_offset + k) / block_k]. */
static volt8_status dequantize_row(volt8_ctx *ctx, const reference_buffers *buffers, const char *tensor, int32_t expert,
                                   int32_t row, const uint8_t *codes, int32_t length, const uint16_t *scales,
                                   int32_t column_offset, int32_t block_k, double *out_row) {
  for (int32_t start = 0; start < length;) {
    int32_t block = (column_offset + start) / block_k;
    int32_t end = (block + 1) * block_k - column_offset;
    if (end > length) end = length;
    double scale = volt8_half_to_double(scales[block]);
    if (!isfinite(scale))
      return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                        FORWARD_NAME ": %s scale of expert %d, row %d, columns %d..%d is not finite", tensor, expert,
                        row, start, end - 1);
    for (int32_t k = start; k < end; k++) {
      uint8_t code = codes[k];
      if (volt8_e4m3_is_nan(code))
        return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                          FORWARD_NAME ": %s of expert %d holds the E4M3 NaN code 0x%02X at row %d, column %d", tensor,
                          expert, code, row, k);
      out_row[k] = buffers->e4m3_value[code] * scale;
    }
    start = end;
  }
  return VOLT8_OK;
}

static double dot(const double *a, const double *b, int32_t length) {
  double partial[4] = {0.0, 0.0, 0.0, 0.0};
  int32_t k = 0;
  for (; k + 4 <= length; k += 4) {
    partial[0] += a[k] * b[k];
    partial[1] += a[k + 1] * b[k + 1];
    partial[2] += a[k + 2] * b[k + 2];
    partial[3] += a[k + 3] * b[k + 3];
  }
  for (; k < length; k++) partial[0] += a[k] * b[k];
  return (partial[0] + partial[1]) + (partial[2] + partial[3]);
}

static double silu(double value) { return value / (1.0 + exp(-value)); }

/* h[i][n] = fp16(silu(x . gate_n^T) * (x . up_n^T)) for the expert's pairs i and its rows n in
 * [n_first, n_end); row_a, row_b: the caller's scratch rows. */
static volt8_status expert_gate_up(volt8_ctx *ctx, const reference_inputs *in, const reference_buffers *buffers,
                                   int32_t expert, const int32_t *pairs, int32_t count, int32_t n_first, int32_t n_end,
                                   double *row_a, double *row_b) {
  const volt8_moe_shape *shape = in->shape;
  int32_t hidden = shape->hidden, intermediate = shape->intermediate;
  int64_t half_scales = (int64_t)in->dims.g13 * in->dims.k13_blocks;
  const uint8_t *w13 = in->experts->w13 + expert * in->dims.w13_bytes_per_expert;
  const uint16_t *s13 = in->experts->s13 + expert * in->dims.s13_elems_per_expert;
  for (int32_t n = n_first; n < n_end; n++) {
    int64_t scale_row = (int64_t)((shape->intermediate_offset + n) / shape->block_n) * in->dims.k13_blocks;
    volt8_status status = dequantize_row(ctx, buffers, "w13 (gate)", expert, n, w13 + (int64_t)n * hidden, hidden,
                                         s13 + scale_row, 0, shape->block_k, row_a);
    if (status == VOLT8_OK)
      status =
          dequantize_row(ctx, buffers, "w13 (up)", expert, intermediate + n, w13 + (int64_t)(intermediate + n) * hidden,
                         hidden, s13 + half_scales + scale_row, 0, shape->block_k, row_b);
    if (status != VOLT8_OK) return status;
    for (int32_t i = 0; i < count; i++) {
      const double *x_row = buffers->x + (int64_t)(pairs[i] / in->top_k) * hidden;
      double gate = dot(row_a, x_row, hidden), up = dot(row_b, x_row, hidden);
      buffers->h[(int64_t)i * intermediate + n] = volt8_half_to_double(volt8_half_from_double(silu(gate) * up));
    }
  }
  return VOLT8_OK;
}

/* out[t][c] += topk_weight * (h[i] . down_c^T) for the expert's pairs i and output columns c in
 * [c_first, c_end). */
static volt8_status expert_down(volt8_ctx *ctx, const reference_inputs *in, const reference_buffers *buffers,
                                int32_t expert, const int32_t *pairs, int32_t count, int32_t c_first, int32_t c_end,
                                double *row_a, double *out) {
  const volt8_moe_shape *shape = in->shape;
  int32_t hidden = shape->hidden, intermediate = shape->intermediate;
  const uint8_t *w2 = in->experts->w2 + expert * in->dims.w2_bytes_per_expert;
  const uint16_t *s2 = in->experts->s2 + expert * in->dims.s2_elems_per_expert;
  for (int32_t c = c_first; c < c_end; c++) {
    int64_t scale_row = (int64_t)(c / shape->block_n) * in->dims.g2;
    volt8_status status = dequantize_row(ctx, buffers, "w2", expert, c, w2 + (int64_t)c * intermediate, intermediate,
                                         s2 + scale_row, shape->intermediate_offset, shape->block_k, row_a);
    if (status != VOLT8_OK) return status;
    for (int32_t i = 0; i < count; i++) {
      int32_t pair = pairs[i];
      double z = dot(row_a, buffers->h + (int64_t)i * intermediate, intermediate);
      out[(int64_t)(pair / in->top_k) * hidden + c] += (double)in->topk_weights[pair] * z;
    }
  }
  return VOLT8_OK;
}

/* The experts' loop shared by `workers` threads: each takes its slice of every expert's gate_up rows,
 * then (after all of gate_up) its slice of the output columns. Every h element and every out[t][c]
 * is then written by one thread, in the order one thread would write it: the same bits for any count
 * of workers. A failure stops every worker at the barrier after it. The workers start at a gate that
 * opens once the team's size is known (the threads that could be made). */
typedef struct expert_team {
  const reference_inputs *in;
  const reference_buffers *buffers;
  double *out;
  int32_t workers;
  pthread_barrier_t barrier;
  pthread_mutex_t gate_lock;
  pthread_cond_t gate;
  int open;
  atomic_int failed_phase; /* the first phase a worker failed in; INT32_MAX: none */
} expert_team;

typedef struct expert_worker {
  expert_team *team;
  int32_t index;
  volt8_ctx *ctx;      /* where its failure is written */
  double *row_a, *row_b;
  volt8_status status;
} expert_worker;

static void *expert_loop(void *argument) {
  expert_worker *worker = argument;
  expert_team *team = worker->team;
  pthread_mutex_lock(&team->gate_lock);
  while (!team->open) pthread_cond_wait(&team->gate, &team->gate_lock);
  pthread_mutex_unlock(&team->gate_lock);
  const reference_inputs *in = team->in;
  const reference_buffers *buffers = team->buffers;
  int32_t intermediate = in->shape->intermediate, hidden = in->shape->hidden, workers = team->workers;
  if (worker->index >= workers) return NULL; /* made, but the team could not take it (no barrier) */
  int32_t n_first = (int32_t)((int64_t)intermediate * worker->index / workers);
  int32_t n_end = (int32_t)((int64_t)intermediate * (worker->index + 1) / workers);
  int32_t c_first = (int32_t)((int64_t)hidden * worker->index / workers);
  int32_t c_end = (int32_t)((int64_t)hidden * (worker->index + 1) / workers);
  int32_t phase = 0; /* the barriers passed: a step's failure is seen by all after its own barrier */
  for (int32_t expert = 0; expert < in->shape->num_experts; expert++) {
    int32_t first = buffers->expert_first[expert], count = buffers->expert_first[expert + 1] - first;
    if (count == 0) continue;
    const int32_t *pairs = buffers->pair_order + first;
    for (int step = 0; step < 2; step++, phase++) {
      worker->status = step == 0 ? expert_gate_up(worker->ctx, in, buffers, expert, pairs, count, n_first, n_end,
                                                  worker->row_a, worker->row_b)
                                 : expert_down(worker->ctx, in, buffers, expert, pairs, count, c_first, c_end,
                                               worker->row_a, team->out);
      /* the earliest failed phase; a later one's failure is not this one's (a worker slow to look
       * after this barrier must not see it, or it would leave the others at the next) */
      int32_t seen = atomic_load(&team->failed_phase);
      while (worker->status != VOLT8_OK && phase < seen &&
             !atomic_compare_exchange_weak(&team->failed_phase, &seen, phase)) {
      }
      if (workers > 1) pthread_barrier_wait(&team->barrier);
      if (atomic_load(&team->failed_phase) <= phase) return NULL;
    }
  }
  return NULL;
}

/* The experts' loop on up to `threads` threads, this one among them. The first failure in the
 * workers' order (the lowest rows or columns of the first expert that failed: the one a single
 * thread meets first) is ctx's error. */
static volt8_status run_experts(volt8_ctx *ctx, const reference_inputs *in, const reference_buffers *buffers,
                                double *out, int32_t threads) {
  size_t row_length = (size_t)(in->shape->hidden > in->shape->intermediate ? in->shape->hidden : in->shape->intermediate);
  if (threads > in->shape->intermediate) threads = in->shape->intermediate;
  if (threads < 1) threads = 1;
  expert_team team = {.in = in, .buffers = buffers, .out = out, .workers = 1, .open = 0};
  atomic_init(&team.failed_phase, INT32_MAX);
  expert_worker *workers = calloc((size_t)threads, sizeof *workers);
  volt8_ctx *scratch = calloc((size_t)threads, sizeof *scratch); /* calloc'd: a context that only holds errors */
  pthread_t *handles = calloc((size_t)threads, sizeof *handles);
  double *rows = calloc((size_t)threads * 2 * row_length, sizeof *rows);
  if (!workers || !scratch || !handles || !rows) {
    free(workers);
    free(scratch);
    free(handles);
    free(rows);
    return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, FORWARD_NAME ": out of memory for %d threads' rows", threads);
  }
  pthread_mutex_init(&team.gate_lock, NULL);
  pthread_cond_init(&team.gate, NULL);
  for (int32_t i = 0; i < threads; i++)
    workers[i] = (expert_worker){&team, i, &scratch[i], rows + (size_t)i * 2 * row_length,
                                 rows + ((size_t)i * 2 + 1) * row_length, VOLT8_OK};
  int32_t started = 1;
  while (started < threads && pthread_create(&handles[started], NULL, expert_loop, &workers[started]) == 0) started++;
  /* the team is the threads that could be made (their slices are fixed once the gate opens); a
   * barrier that cannot be made leaves this one alone, and the others return at once */
  pthread_mutex_lock(&team.gate_lock);
  team.workers = started > 1 && pthread_barrier_init(&team.barrier, NULL, (unsigned)started) == 0 ? started : 1;
  team.open = 1;
  pthread_cond_broadcast(&team.gate);
  pthread_mutex_unlock(&team.gate_lock);
  expert_loop(&workers[0]);
  for (int32_t i = 1; i < started; i++) pthread_join(handles[i], NULL);
  volt8_status status = VOLT8_OK;
  for (int32_t i = 0; i < team.workers && status == VOLT8_OK; i++)
    if (workers[i].status != VOLT8_OK) status = volt8_fail(ctx, workers[i].status, "%s", scratch[i].last_error);
  if (team.workers > 1) pthread_barrier_destroy(&team.barrier);
  pthread_cond_destroy(&team.gate);
  pthread_mutex_destroy(&team.gate_lock);
  free(workers);
  free(scratch);
  free(handles);
  free(rows);
  return status;
}

static volt8_status run_reference(volt8_ctx *ctx, const reference_inputs *in, reference_buffers *buffers,
                                  const uint16_t *x, double *out, int32_t threads) {
  size_t elements = (size_t)in->num_tokens * (size_t)in->shape->hidden;
  for (size_t index = 0; index < elements; index++) {
    buffers->x[index] = volt8_half_to_double(x[index]);
    out[index] = 0.0;
  }
  for (int code = 0; code < 256; code++)
    buffers->e4m3_value[code] = ldexp((double)volt8_e4m3_to_float((uint8_t)code), -8);
  group_pairs(in, buffers);
  return run_experts(ctx, in, buffers, out, threads);
}

static volt8_status reference_forward(volt8_ctx *ctx, const volt8_moe_shape *shape, const volt8_host_experts *experts,
                                      const uint16_t *x, const int32_t *topk_ids, const float *topk_weights,
                                      int32_t num_tokens, int32_t top_k, double *out, int32_t threads) {
  volt8_moe_shape read;
  reference_inputs in = {.shape = &read,
                         .experts = experts,
                         .topk_ids = topk_ids,
                         .topk_weights = topk_weights,
                         .num_tokens = num_tokens,
                         .top_k = top_k};
  volt8_status status = volt8_moe_shape_in(ctx, FORWARD_NAME, shape, &read);
  if (status == VOLT8_OK) status = volt8_moe_dims_compute(ctx, &read, &in.dims);
  if (status == VOLT8_OK) status = check_pointers(ctx, experts, x, topk_ids, topk_weights, num_tokens, top_k, out);
  if (status != VOLT8_OK || num_tokens == 0) return status;
  in.num_pairs = num_tokens * top_k;
  reference_buffers buffers;
  memset(&buffers, 0, sizeof buffers);
  status = alloc_buffers(ctx, &in, &buffers);
  if (status == VOLT8_OK) status = run_reference(ctx, &in, &buffers, x, out, threads);
  free_buffers(&buffers);
  return status;
}

volt8_status volt8_reference_moe_forward(volt8_ctx *ctx, const volt8_moe_shape *shape,
                                         const volt8_host_experts *experts, const uint16_t *x, const int32_t *topk_ids,
                                         const float *topk_weights, int32_t num_tokens, int32_t top_k, double *out) {
  return reference_forward(ctx, shape, experts, x, topk_ids, topk_weights, num_tokens, top_k, out, 1);
}

#define ROWS_NAME "volt8_reference_moe_rows"

volt8_status volt8_reference_moe_rows(volt8_ctx *ctx, const volt8_moe_shape *shape, const volt8_host_experts *experts,
                                      const uint16_t *x, const int32_t *topk_ids, const float *topk_weights,
                                      int32_t num_tokens, int32_t top_k, const int32_t *rows, int32_t row_count,
                                      double *out, int32_t threads) {
  volt8_moe_shape read;
  volt8_status status = volt8_moe_shape_in(ctx, ROWS_NAME, shape, &read);
  if (status != VOLT8_OK) return status;
  shape = &read;
  status = check_pointers(ctx, experts, x, topk_ids, topk_weights, num_tokens, top_k, out);
  if (status != VOLT8_OK) return status;
  if (row_count < 0 || (row_count > 0 && !rows))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, ROWS_NAME ": %d rows at %p", row_count, (const void *)rows);
  for (int32_t r = 0; r < row_count; r++)
    if (rows[r] < 0 || rows[r] >= num_tokens)
      return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, ROWS_NAME ": rows[%d] = %d is outside the %d tokens", r,
                        rows[r], num_tokens);
  if (shape->hidden <= 0 || row_count == 0)
    return reference_forward(ctx, shape, experts, x, topk_ids, topk_weights, row_count, top_k, out, threads);
  size_t hidden = (size_t)shape->hidden, pairs = (size_t)row_count * (size_t)top_k;
  uint16_t *row_x = malloc((size_t)row_count * hidden * sizeof *row_x);
  int32_t *row_ids = malloc(pairs * sizeof *row_ids);
  float *row_weights = malloc(pairs * sizeof *row_weights);
  if (!row_x || !row_ids || !row_weights) {
    status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, ROWS_NAME ": out of memory for %d rows", row_count);
  } else {
    for (int32_t r = 0; r < row_count; r++) {
      size_t token = (size_t)rows[r];
      memcpy(row_x + (size_t)r * hidden, x + token * hidden, hidden * sizeof *row_x);
      memcpy(row_ids + (size_t)r * top_k, topk_ids + token * top_k, (size_t)top_k * sizeof *row_ids);
      memcpy(row_weights + (size_t)r * top_k, topk_weights + token * top_k, (size_t)top_k * sizeof *row_weights);
    }
    status = reference_forward(ctx, shape, experts, row_x, row_ids, row_weights, row_count, top_k, out, threads);
  }
  free(row_x);
  free(row_ids);
  free(row_weights);
  return status;
}

static volt8_status relative_l2(volt8_ctx *ctx, const char *name, const double *reference, const double *result_double,
                                const uint16_t *result_half, size_t count, double *out_error) {
  if (!out_error) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "%s: out_error is NULL", name);
  if (count > 0 && (!reference || (!result_double && !result_half)))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "%s: %s is NULL", name, reference ? "result" : "reference");
  double diff_squares = 0.0, reference_squares = 0.0;
  int all_finite = 1;
  for (size_t index = 0; index < count; index++) {
    double got = result_double ? result_double[index] : volt8_half_to_double(result_half[index]);
    if (!isfinite(got) || !isfinite(reference[index])) all_finite = 0;
    double diff = got - reference[index];
    diff_squares += diff * diff;
    reference_squares += reference[index] * reference[index];
  }
  if (!all_finite) {
    *out_error = NAN;
  } else if (reference_squares == 0.0) {
    *out_error = diff_squares == 0.0 ? 0.0 : INFINITY;
  } else {
    *out_error = sqrt(diff_squares) / sqrt(reference_squares);
  }
  return VOLT8_OK;
}

volt8_status volt8_relative_l2(volt8_ctx *ctx, const double *reference, const double *result, size_t count,
                               double *out_error) {
  return relative_l2(ctx, "volt8_relative_l2", reference, result, NULL, count, out_error);
}

volt8_status volt8_relative_l2_half(volt8_ctx *ctx, const double *reference, const uint16_t *result, size_t count,
                                    double *out_error) {
  return relative_l2(ctx, "volt8_relative_l2_half", reference, NULL, result, count, out_error);
}
