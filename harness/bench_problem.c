/* Random experts, input sets and their reference: the problem shared by `volt8 bench` and
 * `volt8 tune`. Everything is drawn from one splitmix64 stream per purpose, so a seed fixes it. */
#include "bench_problem.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/tools.h"

#define QUANTILE_COUNT 65536
#define CODE_SIGMA (VOLT8_E4M3_MAX / 4.0) /* codes spread like a checkpoint's: amax at about 4 sigma */
#define HALF_NAN_PAIR 0x7E007E00u

uint64_t bench_random_next(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double random_unit(uint64_t *state) { return ((double)(bench_random_next(state) >> 11) + 0.5) * 0x1.0p-53; }

int32_t bench_host_threads(int32_t limit) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  int32_t threads = online > 0 ? (int32_t)online : 1;
  return threads < limit ? threads : (limit > 0 ? limit : 1);
}

int32_t bench_problem_threads(int32_t requested) { return requested > 0 ? requested : bench_host_threads(64); }

static int compare_doubles(const void *a, const void *b) {
  double left = *(const double *)a, right = *(const double *)b;
  return (left > right) - (left < right);
}

/* 65536 sorted standard normal draws: indexing them with 16 random bits samples N(0, 1). */
static double *normal_quantiles(uint64_t *state) {
  double *values = malloc(QUANTILE_COUNT * sizeof *values);
  if (!values) return NULL;
  for (int i = 0; i < QUANTILE_COUNT; i += 2) {
    double radius = sqrt(-2.0 * log(random_unit(state))), angle = 2.0 * M_PI * random_unit(state);
    values[i] = radius * cos(angle);
    values[i + 1] = radius * sin(angle);
  }
  qsort(values, QUANTILE_COUNT, sizeof *values, compare_doubles);
  return values;
}

/* splitmix64 adds a constant to its state at every draw: the state `draws` draws on, so that a thread
 * can start its share of a stream where one thread would have reached it. */
static uint64_t stream_ahead(uint64_t state, int64_t draws) { return state + (uint64_t)draws * 0x9E3779B97F4A7C15ull; }

/* body(begin, end, user) over [0, count) in up to `threads` contiguous ranges, this thread taking the
 * first (and any a thread could not be made for). */
typedef void (*range_body)(int64_t begin, int64_t end, void *user);

typedef struct range_job {
  range_body body;
  void *user;
  int64_t begin, end;
} range_job;

static void *range_worker(void *argument) {
  range_job *job = argument;
  job->body(job->begin, job->end, job->user);
  return NULL;
}

static void parallel_ranges(int64_t count, int32_t threads, range_body body, void *user) {
  if (threads > 64) threads = 64;
  if (count < (int64_t)threads * 65536) threads = (int32_t)(count / 65536); /* small fills: one thread */
  if (threads <= 1) {
    body(0, count, user);
    return;
  }
  range_job jobs[64];
  pthread_t handles[64];
  int started[64] = {0};
  for (int32_t t = 0; t < threads; t++) jobs[t] = (range_job){body, user, count * t / threads, count * (t + 1) / threads};
  for (int32_t t = 1; t < threads; t++) started[t] = pthread_create(&handles[t], NULL, range_worker, &jobs[t]) == 0;
  for (int32_t t = 0; t < threads; t++)
    if (!started[t]) range_worker(&jobs[t]);
  for (int32_t t = 1; t < threads; t++)
    if (started[t]) pthread_join(handles[t], NULL);
}

/* Draws d in [begin, end) of one stream, each giving `per_draw` items (its 16-bit fields, lowest
 * first) looked up in a 65536-entry table of 1- or 2-byte elements: out[d * per_draw + j]. */
typedef struct table_draws {
  void *out;
  const void *table;
  int element_bytes, per_draw;
  uint64_t state; /* before draw 0 */
} table_draws;

static void fill_table_draws(int64_t begin, int64_t end, void *user) {
  const table_draws *fill = user;
  uint64_t state = stream_ahead(fill->state, begin);
  for (int64_t d = begin; d < end; d++) {
    uint64_t bits = bench_random_next(&state);
    for (int j = 0; j < fill->per_draw; j++) {
      size_t index = (bits >> (16 * j)) & 0xFFFF, at = (size_t)d * (size_t)fill->per_draw + (size_t)j;
      if (fill->element_bytes == 1)
        ((uint8_t *)fill->out)[at] = ((const uint8_t *)fill->table)[index];
      else
        ((uint16_t *)fill->out)[at] = ((const uint16_t *)fill->table)[index];
    }
  }
}

/* Four codes a draw, then a draw each for the last count % 4: the same codes on any count of threads. */
static void fill_codes(uint8_t *codes, int64_t count, const uint8_t *code_table, uint64_t *state, int32_t threads) {
  table_draws fill = {codes, code_table, 1, 4, *state};
  int64_t chunks = count / 4;
  parallel_ranges(chunks, threads, fill_table_draws, &fill);
  *state = stream_ahead(*state, chunks);
  for (int64_t i = 4 * chunks; i < count; i++) codes[i] = code_table[bench_random_next(state) & 0xFFFF];
}

/* Scale blocks around 1 / (sigma * sqrt(K)), spread over half an octave each way, stored * 2^8. */
static void fill_scales(uint16_t *scales, int64_t count, int32_t k, uint64_t *state) {
  double base = 256.0 / (CODE_SIGMA * sqrt((double)k));
  for (int64_t i = 0; i < count; i++) scales[i] = volt8_half_from_double(base * exp2(random_unit(state) - 0.5));
}

volt8_status bench_experts_generate(volt8_ctx *ctx, const volt8_moe_shape *shape, uint64_t seed, int32_t threads,
                                    bench_experts_host *out) {
  memset(out, 0, sizeof *out);
  volt8_status status = volt8_moe_dims_compute(ctx, shape, &out->dims);
  if (status != VOLT8_OK) return status;
  out->shape = *shape;
  const volt8_moe_dims *dims = &out->dims;
  int64_t experts = shape->num_experts;
  out->w13 = malloc((size_t)(dims->w13_bytes_per_expert * experts));
  out->w2 = malloc((size_t)(dims->w2_bytes_per_expert * experts));
  out->s13 = malloc((size_t)(dims->s13_elems_per_expert * experts) * 2);
  out->s2 = malloc((size_t)(dims->s2_elems_per_expert * experts) * 2);
  uint64_t state = seed ^ 0x5EEDE4E3ull;
  double *quantiles = normal_quantiles(&state);
  if (!out->w13 || !out->w2 || !out->s13 || !out->s2 || !quantiles) {
    free(quantiles);
    bench_experts_free(out);
    return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench: out of memory for %lld experts of %lld + %lld bytes",
                      (long long)experts, (long long)dims->w13_bytes_per_expert, (long long)dims->w2_bytes_per_expert);
  }
  uint8_t code_table[QUANTILE_COUNT];
  for (int i = 0; i < QUANTILE_COUNT; i++) code_table[i] = volt8_e4m3_from_float((float)(quantiles[i] * CODE_SIGMA));
  free(quantiles);
  fill_codes(out->w13, dims->w13_bytes_per_expert * experts, code_table, &state, threads);
  fill_codes(out->w2, dims->w2_bytes_per_expert * experts, code_table, &state, threads);
  fill_scales(out->s13, dims->s13_elems_per_expert * experts, shape->hidden, &state);
  fill_scales(out->s2, dims->s2_elems_per_expert * experts, shape->intermediate, &state);
  return VOLT8_OK;
}

void bench_experts_free(bench_experts_host *experts) {
  free(experts->w13);
  free(experts->w2);
  free(experts->s13);
  free(experts->s2);
  experts->w13 = experts->w2 = NULL;
  experts->s13 = experts->s2 = NULL;
}

volt8_host_experts bench_experts_view(const bench_experts_host *experts) {
  volt8_host_experts view = VOLT8_HOST_EXPERTS_INIT;
  view.w13 = experts->w13;
  view.s13 = experts->s13;
  view.w2 = experts->w2;
  view.s2 = experts->s2;
  return view;
}

int64_t bench_expert_fp8_bytes(const bench_experts_host *experts) {
  const volt8_moe_dims *dims = &experts->dims;
  return dims->w13_bytes_per_expert + dims->w2_bytes_per_expert +
         2 * (dims->s13_elems_per_expert + dims->s2_elems_per_expert);
}

int64_t bench_expert_fp16_bytes(const bench_experts_host *experts) {
  return 2 * (experts->dims.w13_bytes_per_expert + experts->dims.w2_bytes_per_expert);
}

/* Expected distinct experts of num_tokens tokens routed uniformly to top_k of E each. */
static double expected_active_experts(int32_t num_experts, int32_t num_tokens, int32_t top_k) {
  return num_experts * (1.0 - pow(1.0 - (double)top_k / num_experts, num_tokens));
}

int32_t bench_input_set_count(const bench_experts_host *experts, int32_t num_tokens, int32_t top_k, int64_t l2_bytes,
                              double l2_multiple, int32_t min_sets, int32_t max_sets) {
  double per_set = expected_active_experts(experts->shape.num_experts, num_tokens, top_k) *
                   (double)bench_expert_fp8_bytes(experts);
  int32_t sets = per_set > 0 ? (int32_t)ceil(l2_multiple * (double)l2_bytes / per_set) : max_sets;
  return sets < min_sets ? min_sets : sets > max_sets ? max_sets : sets;
}

static void draw_routing(bench_input_set *set, int32_t num_tokens, int32_t top_k, int32_t num_experts,
                         uint64_t *state, uint8_t *seen) {
  memset(seen, 0, (size_t)num_experts);
  set->active_experts = 0;
  for (int32_t t = 0; t < num_tokens; t++) {
    int32_t *ids = set->ids + (size_t)t * top_k;
    float *weights = set->weights + (size_t)t * top_k;
    double total = 0.0;
    for (int32_t j = 0; j < top_k; j++) {
      int32_t id, repeated;
      do { /* distinct experts per token, as a top-k router gives */
        id = (int32_t)(bench_random_next(state) % (uint64_t)num_experts);
        repeated = 0;
        for (int32_t i = 0; i < j; i++) repeated |= ids[i] == id;
      } while (repeated);
      ids[j] = id;
      weights[j] = (float)(0.05 + random_unit(state));
      total += weights[j];
      if (!seen[id]) set->active_experts++;
      seen[id] = 1;
    }
    for (int32_t j = 0; j < top_k; j++) weights[j] = (float)(weights[j] / total);
  }
}

static volt8_status upload_set(volt8_ctx *ctx, bench_input_set *set, int32_t num_tokens, int32_t top_k,
                               int32_t hidden) {
  const volt8_cuda_driver *cuda = volt8_tools_ctx(ctx).cuda;
  size_t x_bytes = (size_t)num_tokens * hidden * 2, pair_bytes = (size_t)num_tokens * top_k * 4;
  CUresult result = cuda->cuMemAlloc(&set->d_x, x_bytes);
  if (result == CUDA_SUCCESS) result = cuda->cuMemAlloc(&set->d_out, x_bytes);
  if (result == CUDA_SUCCESS) result = cuda->cuMemAlloc(&set->d_ids, pair_bytes);
  if (result == CUDA_SUCCESS) result = cuda->cuMemAlloc(&set->d_weights, pair_bytes);
  if (result == CUDA_SUCCESS) result = cuda->cuMemcpyHtoD(set->d_x, set->x, x_bytes);
  if (result == CUDA_SUCCESS) result = cuda->cuMemcpyHtoD(set->d_ids, set->ids, pair_bytes);
  if (result == CUDA_SUCCESS) result = cuda->cuMemcpyHtoD(set->d_weights, set->weights, pair_bytes);
  if (result == CUDA_SUCCESS) result = cuda->cuMemsetD8Async(set->d_out, 0, x_bytes, NULL);
  if (result != CUDA_SUCCESS)
    return volt8_fail(ctx, result == CUDA_ERROR_OUT_OF_MEMORY ? VOLT8_ERR_OUT_OF_MEMORY : VOLT8_ERR_CUDA,
                      "bench: uploading an input set of %d tokens failed: %s", num_tokens,
                      volt8_cuda_error_text(cuda, result));
  return VOLT8_OK;
}

volt8_status bench_inputs_create(volt8_ctx *ctx, const bench_experts_host *experts, int32_t num_tokens, int32_t top_k,
                                 int32_t count, uint64_t seed, int upload, int with_reference, int32_t threads,
                                 bench_inputs *out) {
  memset(out, 0, sizeof *out);
  const volt8_moe_shape *shape = &experts->shape;
  if (num_tokens <= 0 || top_k <= 0 || top_k > shape->num_experts || count <= 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "bench: %d tokens, top_k %d of %d experts, %d input sets",
                      num_tokens, top_k, shape->num_experts, count);
  volt8_status status = upload ? volt8_ctx_require_device(ctx) : VOLT8_OK;
  if (status != VOLT8_OK) return status;
  out->num_tokens = num_tokens;
  out->top_k = top_k;
  out->hidden = shape->hidden;
  out->sets = calloc((size_t)count, sizeof *out->sets);
  uint8_t *seen = malloc((size_t)shape->num_experts);
  uint64_t state = seed ^ ((uint64_t)num_tokens << 32) ^ 0x1A9D75ull;
  double *quantiles = normal_quantiles(&state);
  uint16_t *half_quantiles = malloc(QUANTILE_COUNT * sizeof *half_quantiles); /* x's values, as FP16 */
  if (!out->sets || !seen || !quantiles || !half_quantiles)
    status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench: out of memory");
  for (int i = 0; status == VOLT8_OK && i < QUANTILE_COUNT; i++) half_quantiles[i] = volt8_half_from_double(quantiles[i]);
  size_t x_count = (size_t)num_tokens * shape->hidden, pair_count = (size_t)num_tokens * top_k;
  for (int32_t s = 0; s < count && status == VOLT8_OK; s++) {
    bench_input_set *set = &out->sets[s];
    out->count = s + 1;
    set->x = malloc(x_count * 2);
    set->ids = malloc(pair_count * 4);
    set->weights = malloc(pair_count * 4);
    if (!set->x || !set->ids || !set->weights) {
      status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench: out of memory for input set %d", s);
      break;
    }
    table_draws fill = {set->x, half_quantiles, 2, 1, state}; /* x[i] from draw i */
    parallel_ranges((int64_t)x_count, threads, fill_table_draws, &fill);
    state = stream_ahead(state, (int64_t)x_count);
    draw_routing(set, num_tokens, top_k, shape->num_experts, &state, seen);
    out->active_experts_mean += (double)set->active_experts / count;
    if (upload) status = upload_set(ctx, set, num_tokens, top_k, shape->hidden);
  }
  free(seen);
  free(quantiles);
  free(half_quantiles);
  double activation_bytes = (double)x_count * 2 * 2 + (double)pair_count * 8;
  out->bytes_fp8 = out->active_experts_mean * (double)bench_expert_fp8_bytes(experts) + activation_bytes;
  out->bytes_fp16 = out->active_experts_mean * (double)bench_expert_fp16_bytes(experts) + activation_bytes;
  if (status == VOLT8_OK && with_reference) {
    int32_t rows = num_tokens < BENCH_REFERENCE_ROWS ? num_tokens : BENCH_REFERENCE_ROWS;
    out->reference_row_count = rows;
    out->reference_rows = malloc((size_t)rows * sizeof *out->reference_rows);
    out->reference = malloc((size_t)rows * (size_t)shape->hidden * sizeof *out->reference);
    /* One copy-back buffer for every check of these inputs: a tune checks each candidate, and a fresh
     * buffer would fault in its pages every time (a quarter of a GB at 16384 tokens of H = 7168). */
    size_t copy_bytes = (size_t)num_tokens * (size_t)shape->hidden * sizeof *out->output_copy;
    out->output_copy = malloc(copy_bytes);
    if (out->reference_rows && out->reference && out->output_copy) {
      /* Evenly spread, from the first token to the last (every token when there are few). */
      for (int32_t r = 0; r < rows; r++)
        out->reference_rows[r] = rows == 1 ? 0 : (int32_t)((int64_t)r * (num_tokens - 1) / (rows - 1));
      status = bench_reference_forward(ctx, experts, &out->sets[0], num_tokens, top_k, out->reference_rows, rows,
                                       threads, out->reference);
    } else {
      status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY,
                          "bench: out of memory for the reference and the output's copy back (%zu bytes)", copy_bytes);
    }
  }
  if (status == VOLT8_OK && upload) {
    CUresult result = volt8_tools_ctx(ctx).cuda->cuCtxSynchronize();
    if (result != CUDA_SUCCESS)
      status = volt8_fail(ctx, VOLT8_ERR_CUDA, "bench: cuCtxSynchronize failed: %s", volt8_cuda_error_text(volt8_tools_ctx(ctx).cuda, result));
  }
  if (status != VOLT8_OK) bench_inputs_destroy(ctx, out);
  return status;
}

void bench_inputs_destroy(volt8_ctx *ctx, bench_inputs *inputs) {
  for (int32_t s = 0; inputs->sets && s < inputs->count; s++) {
    bench_input_set *set = &inputs->sets[s];
    CUdeviceptr pointers[4] = {set->d_x, set->d_ids, set->d_weights, set->d_out};
    for (int i = 0; i < 4; i++)
      if (pointers[i] && ctx && volt8_tools_ctx(ctx).cuda) volt8_tools_ctx(ctx).cuda->cuMemFree(pointers[i]);
    free(set->x);
    free(set->ids);
    free(set->weights);
  }
  free(inputs->sets);
  free(inputs->reference);
  free(inputs->reference_rows);
  free(inputs->output_copy);
  memset(inputs, 0, sizeof *inputs);
}

volt8_status bench_reference_forward(volt8_ctx *ctx, const bench_experts_host *experts, const bench_input_set *set,
                                     int32_t num_tokens, int32_t top_k, const int32_t *rows, int32_t row_count,
                                     int32_t threads, double *out) {
  volt8_host_experts view = bench_experts_view(experts);
  return volt8_reference_moe_rows(ctx, &experts->shape, &view, set->x, set->ids, set->weights, num_tokens, top_k, rows,
                                  row_count, out, threads);
}

volt8_status bench_inputs_check(volt8_ctx *ctx, const bench_inputs *inputs, int32_t index, double *out_relative_l2) {
  if (!inputs->reference || index != 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "bench: only input set 0 has a reference");
  size_t hidden = (size_t)inputs->hidden, count = (size_t)inputs->num_tokens * hidden;
  uint16_t *result = inputs->output_copy;
  CUresult copied = volt8_tools_ctx(ctx).cuda->cuCtxSynchronize();
  if (copied == CUDA_SUCCESS) copied = volt8_tools_ctx(ctx).cuda->cuMemcpyDtoH(result, inputs->sets[index].d_out, count * 2);
  /* Every row was written (poisoned outputs are NaN), also those the reference does not cover. */
  int all_finite = copied == CUDA_SUCCESS && bench_first_not_finite(result, count) == count;
  /* The reference's rows, gathered in place: rows ascend, so row r never lies past token rows[r]. */
  for (int32_t r = 0; copied == CUDA_SUCCESS && r < inputs->reference_row_count; r++)
    memmove(result + (size_t)r * hidden, result + (size_t)inputs->reference_rows[r] * hidden, hidden * 2);
  volt8_status status = copied == CUDA_SUCCESS
                            ? volt8_relative_l2_half(ctx, inputs->reference, result,
                                                     (size_t)inputs->reference_row_count * hidden, out_relative_l2)
                            : volt8_fail(ctx, VOLT8_ERR_CUDA, "bench: copying the output back failed: %s",
                                         volt8_cuda_error_text(volt8_tools_ctx(ctx).cuda, copied));
  if (status == VOLT8_OK && !all_finite) *out_relative_l2 = NAN;
  return status;
}

size_t bench_first_not_finite(const uint16_t *halves, size_t count) {
  enum { BLOCK = 4096 };
  size_t start = 0;
  /* Whole blocks with a fixed trip count and no early exit inside, which the compiler vectorizes;
   * the first block that holds such a value, and the tail, value by value. */
  for (; start + BLOCK <= count; start += BLOCK) {
    const uint16_t *block = halves + start;
    unsigned any = 0;
    for (int i = 0; i < BLOCK; i++) any |= (unsigned)((block[i] & 0x7C00u) == 0x7C00u);
    if (any) break;
  }
  for (size_t i = start; i < count; i++)
    if ((halves[i] & 0x7C00u) == 0x7C00u) return i;
  return count;
}

volt8_status bench_inputs_poison(volt8_ctx *ctx, const bench_inputs *inputs, int32_t index) {
  size_t words = (size_t)inputs->num_tokens * inputs->hidden / 2;
  CUresult result = volt8_tools_ctx(ctx).cuda->cuMemsetD32Async(inputs->sets[index].d_out, HALF_NAN_PAIR, words, NULL);
  if (result == CUDA_SUCCESS) result = volt8_tools_ctx(ctx).cuda->cuCtxSynchronize();
  if (result != CUDA_SUCCESS)
    return volt8_fail(ctx, VOLT8_ERR_CUDA, "bench: poisoning the output failed: %s", volt8_cuda_error_text(volt8_tools_ctx(ctx).cuda, result));
  return VOLT8_OK;
}
