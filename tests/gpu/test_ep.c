/* GPU suite for expert parallelism: the EP ranks of one fixture checkpoint (tests/fixtures/
 * make_checkpoints.py, 6 experts of hidden 256 and intermediate 640), loaded as several experts
 * handles on one GPU, run the forward on the same x, ids and weights; each rank's output matches
 * the reference over its own experts, and their sum matches the single-rank forward and the
 * reference of the whole layer, also with TP 2 x EP 2. Ids outside [0, E) are counted as bad by
 * every rank; other ranks' pairs are not. The shapes' compute_70 kernels are in scripts/gpu_check.sh
 * (ep_test_shapes). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_fixture.h"
#include "checkpoint/shard.h"
#include "core/numeric.h"

TestSuite(gpu_ep, .timeout = 900);

#define CASE "modelopt_mixed_indexed"
#define TOP_K 4

static char fixture_dir[512];

static void write_fixtures(void) { gpu_write_checkpoints("ep", "--group native", fixture_dir, sizeof fixture_dir); }

static void remove_fixtures(void) { gpu_remove_folder(fixture_dir); }

static volt8_load_options rank_options(const char *dir, int32_t tp_size, int32_t tp_rank, int32_t ep_size,
                                       int32_t ep_rank, int32_t experts) {
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = dir;
  options.tp_size = tp_size, options.tp_rank = tp_rank;
  if (ep_size > 1) volt8_shard_experts(experts, ep_size, ep_rank, &options.expert_start, &options.expert_count);
  return options;
}

/* The rank's forward of `batch` (out poisoned, workspace NaN first), checked against the reference
 * over the rank's own experts (its host load); its FP16 output is added to `sum`. */
static void run_rank(volt8_ctx *ctx, const volt8_load_options *options, const device_batch *batch, double *sum,
                     const char *label) {
  volt8_host_checkpoint *host = NULL;
  cr_assert_eq(volt8_checkpoint_load_host(ctx, options, &host), VOLT8_OK, "%s: host load: %s", label, volt8_last_error(ctx));
  volt8_experts *experts = NULL;
  cr_assert_eq(volt8_experts_load(ctx, options, &experts), VOLT8_OK, "%s: load: %s", label, volt8_last_error(ctx));
  /* The loaded handle says its own shape, the rank's experts and their place among the model's. */
  volt8_moe_shape loaded = VOLT8_MOE_SHAPE_INIT;
  cr_assert_eq(volt8_experts_shape(experts, &loaded), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(memcmp(&loaded, &host->shape, sizeof loaded) == 0,
            "%s: volt8_experts_shape gives E=%d start=%d of %d, I=%d at %d; the host load E=%d start=%d of %d, I=%d at %d",
            label, loaded.num_experts, loaded.expert_start, loaded.global_experts, loaded.intermediate,
            loaded.intermediate_offset, host->shape.num_experts, host->shape.expert_start, host->shape.global_experts,
            host->shape.intermediate, host->shape.intermediate_offset);
  int32_t hidden = host->shape.hidden;
  size_t elements = (size_t)batch->num_tokens * hidden;
  device_batch own = *batch;
  own.reference = malloc(elements * sizeof(double));
  cr_assert_eq(volt8_reference_moe_forward(ctx, &host->shape, &host->experts, batch->x, batch->ids, batch->weights,
                                           batch->num_tokens, batch->top_k, own.reference),
               VOLT8_OK, "%s: reference: %s", label, volt8_last_error(ctx));
  gpu_check_forward(ctx, experts, hidden, &own, NULL, NULL, label);
  uint16_t *out = malloc(elements * 2);
  gpu_check_output(ctx, hidden, &own, label, out);
  for (size_t i = 0; i < elements; i++) sum[i] += volt8_half_to_double(out[i]);
  free(out);
  free(own.reference);
  volt8_experts_destroy(experts);
  volt8_host_checkpoint_free(host);
}

/* The whole layer (every expert, TP 1) of the fixture folder `dir`, read to the host, and the
 * problem over it that batches and references are made from. */
static volt8_host_checkpoint *load_whole(volt8_ctx *ctx, const char *dir, host_problem *problem) {
  volt8_load_options options = rank_options(dir, 1, 0, 1, 0, 0);
  volt8_host_checkpoint *whole = NULL;
  cr_assert_eq(volt8_checkpoint_load_host(ctx, &options, &whole), VOLT8_OK, "%s", volt8_last_error(ctx));
  *problem = (host_problem){0};
  problem->shape = whole->shape;
  cr_assert_eq(volt8_moe_dims_compute(ctx, &whole->shape, &problem->dims), VOLT8_OK);
  problem->w13 = (uint8_t *)whole->experts.w13, problem->s13 = (uint16_t *)whole->experts.s13;
  problem->w2 = (uint8_t *)whole->experts.w2, problem->s2 = (uint16_t *)whole->experts.s2;
  return whole;
}

/* The EP x TP ranks' outputs, summed, against the reference of the whole layer and the single-rank
 * forward, at M = 1, 8 and 64 (no route; routed with small and large work items). */
static void check_ranks_add_up(volt8_ctx *ctx, int32_t ep_size, int32_t tp_size) {
  char dir[1024], label[256];
  snprintf(dir, sizeof dir, "%s/%s", fixture_dir, CASE);
  host_problem problem;
  volt8_host_checkpoint *whole = load_whole(ctx, dir, &problem);
  volt8_load_options whole_options = rank_options(dir, 1, 0, 1, 0, 0);
  volt8_experts *single = NULL;
  cr_assert_eq(volt8_experts_load(ctx, &whole_options, &single), VOLT8_OK, "%s", volt8_last_error(ctx));
  int32_t hidden = whole->shape.hidden, experts = whole->shape.num_experts;
  const int32_t ms[] = {1, 8, 64};
  for (int m = 0; m < 3; m++) {
    device_batch batch;
    gpu_make_batch(ctx, &problem, ms[m], TOP_K, ROUTING_UNIFORM, &batch);
    size_t elements = (size_t)ms[m] * hidden;
    uint16_t *single_out = malloc(elements * 2);
    double *single_values = malloc(elements * sizeof(double)), *sum = calloc(elements, sizeof(double));
    snprintf(label, sizeof label, "single rank M=%d", ms[m]);
    gpu_check_forward(ctx, single, hidden, &batch, NULL, NULL, label);
    gpu_check_output(ctx, hidden, &batch, label, single_out);
    for (size_t i = 0; i < elements; i++) single_values[i] = volt8_half_to_double(single_out[i]);
    for (int32_t tp_rank = 0; tp_rank < tp_size; tp_rank++) {
      for (int32_t ep_rank = 0; ep_rank < ep_size; ep_rank++) {
        volt8_load_options options = rank_options(dir, tp_size, tp_rank, ep_size, ep_rank, experts);
        snprintf(label, sizeof label, "ep %d/%d (experts %d..%d) tp %d/%d M=%d", ep_rank, ep_size, options.expert_start,
                 options.expert_start + options.expert_count - 1, tp_rank, tp_size, ms[m]);
        run_rank(ctx, &options, &batch, sum, label);
      }
    }
    double to_reference = 0.0, to_single = 0.0;
    cr_assert_eq(volt8_relative_l2(ctx, batch.reference, sum, elements, &to_reference), VOLT8_OK);
    cr_assert_eq(volt8_relative_l2(ctx, single_values, sum, elements, &to_single), VOLT8_OK);
    cr_assert(to_reference <= GPU_TOLERANCE && to_single <= GPU_TOLERANCE,
              "ep %d x tp %d, M=%d: the ranks' outputs sum to relative L2 %.3e off the reference and %.3e off the "
              "single-rank forward (limit %.0e; seed in the log)",
              ep_size, tp_size, ms[m], to_reference, to_single, GPU_TOLERANCE);
    free(single_out), free(single_values), free(sum);
    gpu_free_batch(ctx, &batch);
  }
  volt8_experts_destroy(single);
  volt8_host_checkpoint_free(whole);
}

Test(gpu_ep, ranks_sum_to_the_single_rank_forward) {
  volt8_ctx *ctx = gpu_open();
  write_fixtures();
  gpu_seed(41);
  check_ranks_add_up(ctx, 3, 1);
  check_ranks_add_up(ctx, 2, 2);
  remove_fixtures();
  volt8_ctx_destroy(ctx);
}

/* Ids outside [0, 6) are bad ids in every rank's count; ids of another rank's experts are not. */
Test(gpu_ep, only_ids_outside_the_model_count_as_bad) {
  volt8_ctx *ctx = gpu_open();
  write_fixtures();
  gpu_seed(43);
  char dir[1024], label[256];
  snprintf(dir, sizeof dir, "%s/%s", fixture_dir, CASE);
  host_problem problem;
  volt8_host_checkpoint *whole = load_whole(ctx, dir, &problem);
  int32_t experts = whole->shape.num_experts, hidden = whole->shape.hidden;
  const int32_t ms[] = {1, 64};
  for (int m = 0; m < 2; m++) {
    device_batch batch;
    gpu_make_batch(ctx, &problem, ms[m], TOP_K, ROUTING_UNIFORM, &batch);
    const int32_t bad_ids[] = {experts, -1, 1000, experts + 1};
    int32_t bad = 0;
    for (int32_t b = 0; b < 4 && b * 3 + 1 < ms[m] * TOP_K; b++, bad++) batch.ids[b * 3 + 1] = bad_ids[b];
    gpu_update_ids(ctx, &problem, &batch);
    double *sum = calloc((size_t)ms[m] * hidden, sizeof(double));
    for (int32_t ep_rank = 0; ep_rank < 3; ep_rank++) {
      volt8_load_options options = rank_options(dir, 1, 0, 3, ep_rank, experts);
      snprintf(label, sizeof label, "ep %d/3 M=%d with %d bad ids", ep_rank, ms[m], bad);
      run_rank(ctx, &options, &batch, sum, label);
      volt8_experts *rank = NULL;
      cr_assert_eq(volt8_experts_load(ctx, &options, &rank), VOLT8_OK, "%s", volt8_last_error(ctx));
      volt8_moe_args args = gpu_batch_args(&batch);
      cr_assert_eq(volt8_moe_forward(rank, &args, NULL), VOLT8_OK, "%s: %s", label, volt8_last_error(ctx));
      int32_t counted = -1;
      cr_assert_eq(volt8_experts_bad_id_count(rank, &counted), VOLT8_OK, "%s", volt8_last_error(ctx));
      cr_assert_eq(counted, bad, "%s: %d bad ids counted, %d given (other ranks' pairs are not bad)", label, counted, bad);
      args.check_ids = 1;
      cr_assert_eq(volt8_moe_forward(rank, &args, NULL), VOLT8_ERR_INVALID_ARGUMENT, "%s: check_ids let bad ids pass", label);
      volt8_experts_destroy(rank);
    }
    double error = 0.0;
    cr_assert_eq(volt8_relative_l2(ctx, batch.reference, sum, (size_t)ms[m] * hidden, &error), VOLT8_OK);
    cr_assert(error <= GPU_TOLERANCE, "M=%d: the ranks' sum is %.3e off the reference", ms[m], error);
    free(sum);
    gpu_free_batch(ctx, &batch);
  }
  volt8_host_checkpoint_free(whole);
  remove_fixtures();
  volt8_ctx_destroy(ctx);
}
