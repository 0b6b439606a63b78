/* The problem a benchmark or a tuning run works on: random experts in the device layout, input
 * sets (x, routing, weights) with a fixed seed, their reference output, and the bytes a forward
 * must move. Host side only, except the device copies of the input sets. */
#ifndef VOLT8_BENCH_PROBLEM_H
#define VOLT8_BENCH_PROBLEM_H

#include <stdint.h>

#include "tools/tools.h"

typedef struct bench_experts_host {
  volt8_moe_shape shape;
  volt8_moe_dims dims;
  uint8_t *w13, *w2;   /* E4M3 codes, never a NaN code */
  uint16_t *s13, *s2;  /* FP16 bits of scale * 2^8 */
} bench_experts_host;

/* Weights drawn as FP8 checkpoints hold them: codes of a normal distribution spread over the
 * E4M3 range, block scales around 1/(448/4 * sqrt(K)) so activations stay near unit size. The codes
 * are drawn on up to `threads` host threads, each starting its share of the one stream where a single
 * thread would reach it: the same bytes for any count. */
volt8_status bench_experts_generate(volt8_ctx *ctx, const volt8_moe_shape *shape, uint64_t seed, int32_t threads,
                                    bench_experts_host *out);
void bench_experts_free(bench_experts_host *experts);
volt8_host_experts bench_experts_view(const bench_experts_host *experts);
/* Bytes of one expert, FP8 codes plus FP16 scales (as volt8 keeps it) and in FP16. */
int64_t bench_expert_fp8_bytes(const bench_experts_host *experts);
int64_t bench_expert_fp16_bytes(const bench_experts_host *experts);

typedef struct bench_input_set {
  uint16_t *x;       /* [M][H] FP16 bits */
  int32_t *ids;      /* [M][top_k], distinct experts per token */
  float *weights;    /* [M][top_k], positive, summing to 1 per token */
  int32_t active_experts;
  CUdeviceptr d_x, d_ids, d_weights, d_out;
} bench_input_set;

/* Up to this many tokens set 0's reference covers every row; past it, this many rows spread over the
 * tokens (the first and the last among them): a double reference of a whole prefill takes minutes. */
#define BENCH_REFERENCE_ROWS 512

typedef struct bench_inputs {
  int32_t num_tokens, top_k, count, hidden;
  bench_input_set *sets;
  double *reference;             /* set 0's reference output of the rows below, [row_count][H] (NULL when not asked for) */
  int32_t *reference_rows;       /* the tokens the reference covers, ascending */
  int32_t reference_row_count;
  uint16_t *output_copy;         /* [num_tokens][H]: where bench_inputs_check copies set 0's output back (with the reference) */
  double active_experts_mean;
  double bytes_fp8, bytes_fp16;  /* bytes a forward must move, mean over the sets */
} bench_inputs;

/* How many input sets keep the weights they touch at least `l2_multiple` times the L2 size, within
 * [min_sets, max_sets]: replaying one set would serve its experts from L2. */
int32_t bench_input_set_count(const bench_experts_host *experts, int32_t num_tokens, int32_t top_k, int64_t l2_bytes,
                              double l2_multiple, int32_t min_sets, int32_t max_sets);
/* `count` input sets of num_tokens tokens, uploaded (ctx needs a device unless upload is 0), the
 * reference of set 0 (of every row, or of BENCH_REFERENCE_ROWS of them) computed with `threads` host
 * threads when with_reference is 1. Each set's x is drawn on those threads too, as the experts' codes
 * are: the same inputs for any count. */
volt8_status bench_inputs_create(volt8_ctx *ctx, const bench_experts_host *experts, int32_t num_tokens, int32_t top_k,
                                 int32_t count, uint64_t seed, int upload, int with_reference, int32_t threads,
                                 bench_inputs *out);
void bench_inputs_destroy(volt8_ctx *ctx, bench_inputs *inputs);
/* The reference forward of tokens rows[0..row_count) of the set's num_tokens on up to `threads` host
 * threads, which share each expert's weight rows (volt8_reference_moe_rows); out: [row_count][H]. */
volt8_status bench_reference_forward(volt8_ctx *ctx, const bench_experts_host *experts, const bench_input_set *set,
                                     int32_t num_tokens, int32_t top_k, const int32_t *rows, int32_t row_count,
                                     int32_t threads, double *out);
/* Copies set `index`'s device output back and measures its reference rows against the reference. */
volt8_status bench_inputs_check(volt8_ctx *ctx, const bench_inputs *inputs, int32_t index, double *out_relative_l2);
/* The index of the first of `count` FP16 values that is NaN or infinite (a poisoned output is NaN), or
 * count when every one is finite. Blocks of values are tested without a branch a value, so that a
 * tune's check of a large output costs about its memory bandwidth. */
size_t bench_first_not_finite(const uint16_t *halves, size_t count);
/* Fills set `index`'s device output with NaN bits, so a forward that writes nothing fails the check. */
volt8_status bench_inputs_poison(volt8_ctx *ctx, const bench_inputs *inputs, int32_t index);

/* splitmix64: the one random source of bench and tuner. */
uint64_t bench_random_next(uint64_t *state);
/* Processors online, at least 1, at most `limit`. */
int32_t bench_host_threads(int32_t limit);
/* The host threads that draw a problem and its reference: `requested`, or with 0 one a processor
 * (at most 64). */
int32_t bench_problem_threads(int32_t requested);

#endif
