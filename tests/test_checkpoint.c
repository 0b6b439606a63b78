/* Checkpoint recognition and the load driver: metadata formats and MTP layer spellings, every way a
 * checkpoint can be wrong (with nothing left allocated), the per-rank memory plan of the reference
 * model, shards that add up to the whole layer through the reference forward, and `volt8 plan`. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/parameterized.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "core/ctx_internal.h"
#include "moe/kernels/moe_layout.h"
#include "core/numeric.h"
#include "reference/reference.h"

#include "checkpoint_fixture.h"
#include "test_support.h"

CHECKPOINT_FIXTURES("native", "online", "checkpoint")

#define MIB (1024.0 * 1024.0)

typedef struct case_options {
  char dir[4096], draft[4096];
  volt8_load_options options;
} case_options;

/* The load options a manifest entry asks for ("draft", "online", "tp"). */
static void options_for(const cJSON *entry, case_options *out) {
  out->options = (volt8_load_options)VOLT8_LOAD_OPTIONS_INIT;
  fixture(cJSON_GetObjectItemCaseSensitive(entry, "dir")->valuestring, out->dir, sizeof out->dir);
  out->options.checkpoint_dir = out->dir;
  const cJSON *options = cJSON_GetObjectItemCaseSensitive(entry, "options");
  const cJSON *draft = cJSON_GetObjectItemCaseSensitive(options, "draft");
  const cJSON *online = cJSON_GetObjectItemCaseSensitive(options, "online");
  const cJSON *tp = cJSON_GetObjectItemCaseSensitive(options, "tp");
  if (draft) {
    fixture(draft->valuestring, out->draft, sizeof out->draft);
    out->options.draft_checkpoint_dir = out->draft;
  }
  if (online) out->options.mtp_expert_quantization = online->valuestring;
  if (tp) out->options.tp_size = tp->valueint;
}

TestSuite(checkpoint, .timeout = 300);

/* ---- recognition ---- */

static const struct { const char *name, *quant_format; } recognised[] = {
    {"modelopt_mixed_indexed", "modelopt FP8_PB_WO"},
    {"fp8_runtime_names", "fp8 block 128x128"},
    {"modelopt_4d_hf_quant_config", "modelopt FP8_BLOCK_SCALES"},
    {"real_shape", "modelopt FP8_PB_WO"},
    {"separate_draft", "F8_E4M3 (no metadata)"},
    {"bf16_fused", "unquantized BF16"},
    {"f16_per_expert_opt_in_config", "unquantized F16"}};

Test(checkpoint, formats_and_layer_spellings_are_recognised) {
  cJSON *root = manifest();
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  for (size_t i = 0; i < sizeof recognised / sizeof recognised[0]; i++) {
    const char *name = recognised[i].name;
    const cJSON *entry = manifest_case(root, "valid", name);
    case_options load;
    options_for(entry, &load);
    load.options.tp_size = 4;
    volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
    cr_assert_eq(volt8_plan(ctx, &load.options, &plan), VOLT8_OK, "%s: %s", name, volt8_last_error(ctx));
    int online = strcmp(cJSON_GetObjectItemCaseSensitive(entry, "route")->valuestring, "online") == 0;
    cr_assert_eq(plan.route, online ? VOLT8_ROUTE_ONLINE : VOLT8_ROUTE_NATIVE, "%s", name);
    cr_assert_str_eq(plan.tensor_prefix, cJSON_GetObjectItemCaseSensitive(entry, "prefix")->valuestring, "%s", name);
    cr_assert_str_eq(plan.quant_format, recognised[i].quant_format, "%s", name);
    cr_assert_str_eq(plan.scale_dtype, cJSON_GetObjectItemCaseSensitive(entry, "scale_dtype")->valuestring, "%s", name);
    cr_assert(plan.hidden == cJSON_GetObjectItemCaseSensitive(entry, "hidden")->valueint &&
                  plan.intermediate == cJSON_GetObjectItemCaseSensitive(entry, "intermediate")->valueint &&
                  plan.num_experts == cJSON_GetObjectItemCaseSensitive(entry, "experts")->valueint &&
                  plan.tp_size == 4 && plan.block_k == 128 && plan.block_n == 128,
              "%s: H %d I %d E %d", name, plan.hidden, plan.intermediate, plan.num_experts);
  }
  volt8_ctx_destroy(ctx);
  cJSON_Delete(root);
}

/* ---- wrong checkpoints ---- */

static const char *const wrong_checkpoints[] = {
    "missing_expert", "missing_scale", "shape_mismatch", "dtype_mismatch", "scale_dtype", "scale_shape",
    "both_scale_names", "two_spellings", "no_mtp_layer", "config_disagrees", "metadata_other_format",
    "metadata_unquantized_but_fp8", "online_on_fp8", "tp_not_dividing", "tp_below_16", "unquantized_without_opt_in",
    "metadata_fp8_but_bf16"};
#define WRONG_CHECKPOINTS (sizeof wrong_checkpoints / sizeof wrong_checkpoints[0])

ParameterizedTestParameters(checkpoint, wrong_checkpoint_rejected_and_nothing_held) {
  static int indices[WRONG_CHECKPOINTS];
  for (size_t i = 0; i < WRONG_CHECKPOINTS; i++) indices[i] = (int)i;
  return cr_make_param_array(int, indices, WRONG_CHECKPOINTS);
}

ParameterizedTest(int *index, checkpoint, wrong_checkpoint_rejected_and_nothing_held) {
  const char *name = wrong_checkpoints[*index];
  cJSON *root = manifest();
  const cJSON *entry = manifest_case(root, "invalid", name);
  case_options load;
  options_for(entry, &load);
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  int64_t held = volt8_checkpoint_live_allocations();
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  expect_failure(entry, name, volt8_plan(ctx, &load.options, &plan), volt8_last_error(ctx));
  cr_assert_eq(volt8_checkpoint_live_allocations(), held, "case %s: the plan left allocations behind", name);
  volt8_host_checkpoint *host = NULL;
  expect_failure(entry, name, volt8_checkpoint_load_host(ctx, &load.options, &host), volt8_last_error(ctx));
  cr_assert_null(host);
  cr_assert_eq(volt8_checkpoint_live_allocations(), held, "case %s: the load left allocations behind", name);
  volt8_ctx_destroy(ctx);
  cJSON_Delete(root);
}

Test(checkpoint, options_are_checked) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(ctx), "checkpoint_dir"), "%s", volt8_last_error(ctx));
  options.checkpoint_dir = "/nonexistent";
  options.tp_size = 4, options.tp_rank = 4;
  cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_ERR_INVALID_ARGUMENT);
  options.tp_rank = 0, options.online_block_n = 64;
  cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_ERR_INVALID_ARGUMENT);
  options.online_block_n = 1, options.mtp_expert_quantization = "int8";
  cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(ctx), "int8"));
  options.mtp_expert_quantization = NULL, options.size = 3;
  cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_ERR_INVALID_ARGUMENT);
  options.size = sizeof options;
  cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_ERR_NOT_FOUND, "%s", volt8_last_error(ctx));
  cr_assert(strstr(volt8_last_error(ctx), "/nonexistent"), "%s", volt8_last_error(ctx));
  cr_assert_eq(volt8_plan(ctx, &options, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  volt8_host_checkpoint_free(NULL);
  cr_assert_eq(volt8_experts_memory(NULL, &(volt8_memory_report)VOLT8_MEMORY_REPORT_INIT), VOLT8_ERR_INVALID_ARGUMENT);
  volt8_ctx_destroy(ctx);
}

Test(checkpoint, device_load_without_a_gpu_holds_nothing) {
  char dir[4096];
  fixture("modelopt_mixed_indexed", dir, sizeof dir);
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  int64_t held = volt8_checkpoint_live_allocations();
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = dir;
  volt8_experts *experts = (volt8_experts *)1;
  cr_assert_eq(volt8_experts_load(ctx, &options, &experts), VOLT8_ERR_NO_DEVICE, "%s", volt8_last_error(ctx));
  cr_assert_null(experts);
  cr_assert_eq(volt8_checkpoint_live_allocations(), held);
  volt8_ctx_destroy(ctx);
}

/* An older caller's report is filled only as far as its size reaches. */
Test(checkpoint, reports_respect_the_callers_size) {
  char dir[4096];
  fixture("fp8_runtime_names", dir, sizeof dir);
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_load_report report;
  memset(&report, 0x5A, sizeof report);
  report.size = offsetof(volt8_load_report, scale_max_relative_error);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = dir;
  options.report = &report;
  volt8_host_checkpoint *host = NULL;
  cr_assert_eq(volt8_checkpoint_load_host(ctx, &options, &host), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(report.route == VOLT8_ROUTE_NATIVE && report.num_experts == 4);
  uint8_t untouched[sizeof report];
  memset(untouched, 0x5A, sizeof untouched);
  cr_assert_eq(memcmp((char *)&report + report.size, untouched, sizeof report - report.size), 0);
  cr_assert_gt(host->report.scale_max_relative_error, 0.0);
  volt8_host_checkpoint_free(host);
  volt8_ctx_destroy(ctx);
}

/* ---- memory plans ---- */

static volt8_plan_report reference_model_plan(int32_t tp_size) {
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  plan.route = VOLT8_ROUTE_NATIVE;
  plan.hidden = 2560, plan.intermediate = 640, plan.num_experts = 512;
  plan.tp_size = tp_size, plan.block_n = 128, plan.block_k = 128;
  return plan;
}

Test(checkpoint, reference_model_fits_the_byte_floor) {
  volt8_plan_report plan = reference_model_plan(4);
  int32_t offsets[4] = {0, 32, 64, 96};
  for (int32_t rank = 0; rank < 4; rank++) {
    volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
    volt8_memory_report memory = VOLT8_MEMORY_REPORT_INIT;
    cr_assert_eq(volt8_plan_rank(NULL, &plan, rank, &shape, &memory), VOLT8_OK, "%s", volt8_last_error(NULL));
    cr_assert(shape.intermediate == 160 && shape.intermediate_offset == offsets[rank]);
    /* 512 x 3 x 160 x 2560 E4M3 bytes; 512 x (2 x 2 x 20 + 20 x 2) FP16 scales */
    cr_assert_eq(memory.weight_bytes, 629145600);
    cr_assert_eq(memory.scale_bytes, 122880);
    cr_assert_eq(memory.fp16_bytes, 1258291200);
    cr_assert_leq(memory.resident_bytes, (int64_t)(1.01 * (double)(memory.weight_bytes + memory.scale_bytes)));
    cr_assert_geq(memory.resident_bytes, memory.weight_bytes + memory.scale_bytes);
    cr_assert_eq(memory.padded_bytes, 512 * (3 * 256 * 2560 + 2 * (2 * 2 * 20 + 20 * 2)));
    cr_log_info("reference model, tp 4 rank %d: resident %.2f MiB (weights %.2f + scales %.2f), FP16 %.0f MiB, "
                "padded to 256 %.2f MiB", rank, memory.resident_bytes / MIB, memory.weight_bytes / MIB,
                memory.scale_bytes / MIB, memory.fp16_bytes / MIB, memory.padded_bytes / MIB);
  }
  plan = reference_model_plan(8);
  int32_t offsets8[8] = {0, 80, 32, 112, 64, 16, 96, 48};
  for (int32_t rank = 0; rank < 8; rank++) {
    volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
    cr_assert_eq(volt8_plan_rank(NULL, &plan, rank, &shape, NULL), VOLT8_OK);
    cr_assert(shape.intermediate == 80 && shape.intermediate_offset == offsets8[rank], "tp 8 rank %d", rank);
  }
  cr_assert_eq(volt8_plan_rank(NULL, &plan, 8, NULL, NULL), VOLT8_ERR_INVALID_ARGUMENT);
}

Test(checkpoint, plan_matches_what_a_load_holds) {
  char dir[4096];
  fixture("modelopt_mixed_indexed", dir, sizeof dir);
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = dir;
  options.tp_size = 8;
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_OK, "%s", volt8_last_error(ctx));
  for (int32_t rank = 0; rank < 8; rank++) {
    volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
    volt8_memory_report memory = VOLT8_MEMORY_REPORT_INIT;
    cr_assert_eq(volt8_plan_rank(ctx, &plan, rank, &shape, &memory), VOLT8_OK);
    options.tp_rank = rank;
    volt8_host_checkpoint *host = NULL;
    cr_assert_eq(volt8_checkpoint_load_host(ctx, &options, &host), VOLT8_OK, "%s", volt8_last_error(ctx));
    cr_assert_eq(memcmp(&shape, &host->shape, sizeof shape), 0, "rank %d: plan and load disagree on the shape", rank);
    volt8_moe_dims dims;
    cr_assert_eq(volt8_moe_dims_compute(ctx, &shape, &dims), VOLT8_OK);
    cr_assert_eq(memory.weight_bytes, (dims.w13_bytes_per_expert + dims.w2_bytes_per_expert) * shape.num_experts);
    cr_assert_eq(memory.scale_bytes, 2 * (dims.s13_elems_per_expert + dims.s2_elems_per_expert) * shape.num_experts);
    volt8_host_checkpoint_free(host);
  }
  volt8_ctx_destroy(ctx);
}

/* The plan sizes each rank's forward workspace for the options' max_tokens x max_top_k (top-k at
 * most the checkpoint's 6 experts), in 64 bits at 32768 tokens, and refuses what a load refuses
 * before it reads an expert; a plan report of the older size gets no workspace figure. */
Test(checkpoint, plan_sizes_the_workspace_of_the_options) {
  char dir[4096];
  fixture("modelopt_mixed_indexed", dir, sizeof dir);
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = dir;
  options.tp_size = 2;
  options.max_tokens = 32768;
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(plan.max_tokens == 32768 && plan.max_top_k == 16, "%d x %d", plan.max_tokens, plan.max_top_k);
  for (int32_t rank = 0; rank < 2; rank++) {
    volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
    volt8_memory_report memory = VOLT8_MEMORY_REPORT_INIT;
    cr_assert_eq(volt8_plan_rank(ctx, &plan, rank, &shape, &memory), VOLT8_OK, "%s", volt8_last_error(ctx));
    /* 32768 x 6 pairs: h (320 FP16) and z (256 FP32) a pair, sorted pairs, items, flags; 8 tiles of arrivals a token */
    int64_t pairs = 32768 * 6, expected = pairs * 4 + 2 * pairs * 16 + 256 + pairs * 320 * 2 + pairs * 256 * 4 +
                                          32768 * 8 * 4 + (pairs + 1) * 4;
    cr_assert(memory.workspace_bytes >= expected && memory.workspace_bytes < expected + 8 * 256,
              "rank %d: %lld bytes, expected %lld plus alignment", rank, (long long)memory.workspace_bytes,
              (long long)expected);
  }
  volt8_plan_report older = VOLT8_PLAN_REPORT_INIT;
  older.size = offsetof(volt8_plan_report, max_tokens);
  cr_assert_eq(volt8_plan(ctx, &options, &older), VOLT8_OK, "%s", volt8_last_error(ctx));
  volt8_memory_report memory = VOLT8_MEMORY_REPORT_INIT;
  cr_assert_eq(volt8_plan_rank(ctx, &older, 0, NULL, &memory), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(memory.workspace_bytes, 0);
  const struct {
    int32_t max_tokens, max_top_k;
    const char *named;
  } refused[] = {{0, 16, "max_tokens 0"}, {64, -1, "max_top_k -1"}, {1 << 28, 16, "limit of 1073741824"}};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    options.max_tokens = refused[i].max_tokens;
    options.max_top_k = refused[i].max_top_k;
    cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_ERR_INVALID_ARGUMENT, "%d x %d accepted", refused[i].max_tokens,
                 refused[i].max_top_k);
    cr_assert(strstr(volt8_last_error(ctx), refused[i].named), "\"%s\" does not say \"%s\"", volt8_last_error(ctx),
              refused[i].named);
  }
  volt8_ctx_destroy(ctx);
}

/* A plan checks every expert at full width, one expert's staging at a time. */
Test(checkpoint, plan_of_the_real_shape_stages_one_expert) {
  char dir[4096];
  fixture("real_shape", dir, sizeof dir);
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = dir;
  options.tp_size = 4;
  volt8_load_report validation = VOLT8_LOAD_REPORT_INIT;
  options.report = &validation;
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  volt8_checkpoint_peak_bytes(1);
  int64_t before = volt8_checkpoint_peak_bytes(0);
  cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_OK, "%s", volt8_last_error(ctx));
  int64_t one_expert = 3 * 640 * 2560 + 2 * (2 * 5 * 20 + 20 * 5) + 4 * 100; /* codes, FP16 scales, block maxima */
  int64_t peak = volt8_checkpoint_peak_bytes(0) - before;
  cr_assert_eq(validation.staging_peak_bytes, one_expert, "staging %lld", (long long)validation.staging_peak_bytes);
  cr_assert_leq(peak, one_expert + (64 << 10), "plan peak %lld bytes, one expert is %lld", (long long)peak,
                (long long)one_expert);
  volt8_ctx_destroy(ctx);
}

/* ---- shards add up ---- */

/* The whole layer's reference output for a batch that the caller routes, and the sum of the ranks'
 * outputs for the same batch: the tp and ep x tp checks below differ only in how they cut the ranks. */
typedef struct {
  char dir[4096];
  volt8_ctx *ctx;
  volt8_load_options options;
  volt8_host_checkpoint *whole;
  int32_t tokens, top_k, hidden, experts;
  size_t count;
  uint16_t *x;
  int32_t *ids;
  float *weights;
  double *expected, *summed, *part;
} ranks_sum;

/* Loads the whole layer; the caller fills x, ids and weights and then calls ranks_sum_expect. */
static void ranks_sum_begin(ranks_sum *sum, const char *name, const char *online, int32_t tokens, int32_t top_k) {
  fixture(name, sum->dir, sizeof sum->dir);
  sum->ctx = test_cpu_ctx(NULL);
  sum->options = (volt8_load_options)VOLT8_LOAD_OPTIONS_INIT;
  sum->options.checkpoint_dir = sum->dir;
  sum->options.mtp_expert_quantization = online;
  sum->whole = NULL;
  cr_assert_eq(volt8_checkpoint_load_host(sum->ctx, &sum->options, &sum->whole), VOLT8_OK, "%s",
               volt8_last_error(sum->ctx));
  sum->tokens = tokens, sum->top_k = top_k;
  sum->hidden = sum->whole->shape.hidden, sum->experts = sum->whole->shape.num_experts;
  sum->count = (size_t)tokens * sum->hidden;
  sum->x = malloc(sizeof *sum->x * sum->count);
  sum->ids = malloc(sizeof *sum->ids * (size_t)(tokens * top_k));
  sum->weights = malloc(sizeof *sum->weights * (size_t)(tokens * top_k));
  sum->expected = calloc(sum->count, sizeof *sum->expected), sum->summed = calloc(sum->count, sizeof *sum->summed);
  sum->part = calloc(sum->count, sizeof *sum->part);
}

static void ranks_sum_expect(ranks_sum *sum) {
  cr_assert_eq(volt8_reference_moe_forward(sum->ctx, &sum->whole->shape, &sum->whole->experts, sum->x, sum->ids,
                                           sum->weights, sum->tokens, sum->top_k, sum->expected),
               VOLT8_OK, "%s", volt8_last_error(sum->ctx));
}

/* Adds one rank's reference output; `rank_name` and `rank` say which rank failed. */
static void ranks_sum_add(ranks_sum *sum, const volt8_moe_shape *shape, const volt8_host_experts *experts,
                          const char *rank_name, int32_t rank) {
  cr_assert_eq(volt8_reference_moe_forward(sum->ctx, shape, experts, sum->x, sum->ids, sum->weights, sum->tokens,
                                           sum->top_k, sum->part),
               VOLT8_OK, "%s %d: %s", rank_name, rank, volt8_last_error(sum->ctx));
  for (size_t i = 0; i < sum->count; i++) sum->summed[i] += sum->part[i];
}

/* Checks the ranks' outputs sum to the whole layer's, then frees all; `cut` names the split for the message. */
static void ranks_sum_end(ranks_sum *sum, const char *cut) {
  double error = 0.0;
  cr_assert_eq(volt8_relative_l2(sum->ctx, sum->expected, sum->summed, sum->count, &error), VOLT8_OK);
  cr_assert_leq(error, 1e-12, "%s: the ranks' outputs sum to %.3g relative L2 off the whole layer", cut, error);
  free(sum->x), free(sum->ids), free(sum->weights), free(sum->expected), free(sum->summed), free(sum->part);
  volt8_host_checkpoint_free(sum->whole);
  volt8_ctx_destroy(sum->ctx);
}

/* The tp ranks' partial outputs of the reference forward sum to the unsharded output: every row of
 * gate/up and column of down is held by exactly one rank, with the scale of its own block. */
static void sharded_forward_matches_whole(const char *name, int32_t tp) {
  char cut[4200];
  ranks_sum sum;
  ranks_sum_begin(&sum, name, NULL, 3, 2);
  for (int32_t i = 0; i < sum.tokens * sum.hidden; i++) sum.x[i] = volt8_half_from_double(sin(i * 0.61) * 0.5);
  for (int32_t i = 0; i < sum.tokens * sum.top_k; i++)
    sum.ids[i] = (i * 5 + 1) % sum.experts, sum.weights[i] = 0.25f + 0.1f * (float)i;
  ranks_sum_expect(&sum);
  sum.options.tp_size = tp;
  for (int32_t rank = 0; rank < tp; rank++) {
    sum.options.tp_rank = rank;
    volt8_host_checkpoint *shard = NULL;
    cr_assert_eq(volt8_checkpoint_load_host(sum.ctx, &sum.options, &shard), VOLT8_OK, "%s", volt8_last_error(sum.ctx));
    ranks_sum_add(&sum, &shard->shape, &shard->experts, "rank", rank);
    volt8_host_checkpoint_free(shard);
  }
  snprintf(cut, sizeof cut, "%s tp %d", name, tp);
  ranks_sum_end(&sum, cut);
}

Test(checkpoint, shards_add_up_through_the_reference_forward) {
  sharded_forward_matches_whole("modelopt_mixed_indexed", 4);
  sharded_forward_matches_whole("modelopt_mixed_indexed", 8);
  sharded_forward_matches_whole("real_shape", 4);
}

/* ---- expert parallelism ---- */


static void expect_same_bytes(const void *got, const void *whole, size_t bytes, const char *array, int32_t ep_rank,
                              int32_t tp_rank) {
  cr_assert(memcmp(got, whole, bytes) == 0, "ep rank %d, tp rank %d: %s differs from the whole layer's experts", ep_rank,
            tp_rank, array);
}

/* An EP x TP rank holds exactly its experts' bytes of the TP rank's slice, and the reference forwards
 * of all ranks (global ids, some of them bad) sum to the whole layer's. */
static void expert_parallel_forward_matches_whole(const char *name, const char *online, int32_t ep_size,
                                                  int32_t tp_size) {
  char cut[4200];
  ranks_sum sum;
  ranks_sum_begin(&sum, name, online, 4, 3);
  int32_t experts = sum.experts;
  for (int32_t i = 0; i < sum.tokens * sum.hidden; i++) sum.x[i] = volt8_half_from_double(cos(i * 0.37) * 0.5);
  for (int32_t i = 0; i < sum.tokens * sum.top_k; i++)
    sum.ids[i] = (i * 7 + 2) % experts, sum.weights[i] = 0.2f + 0.05f * (float)i;
  sum.ids[4] = experts, sum.ids[9] = -1;  /* bad ids: no rank holds them */
  ranks_sum_expect(&sum);
  volt8_load_options *options = &sum.options;
  options->tp_size = tp_size;
  for (int32_t tp_rank = 0; tp_rank < tp_size; tp_rank++) {
    options->tp_rank = tp_rank;
    options->expert_start = 0, options->expert_count = 0;
    volt8_host_checkpoint *slice = NULL;
    cr_assert_eq(volt8_checkpoint_load_host(sum.ctx, options, &slice), VOLT8_OK, "%s", volt8_last_error(sum.ctx));
    volt8_moe_dims dims;
    cr_assert_eq(volt8_moe_dims_compute(sum.ctx, &slice->shape, &dims), VOLT8_OK);
    for (int32_t ep_rank = 0; ep_rank < ep_size; ep_rank++) {
      volt8_shard_experts(experts, ep_size, ep_rank, &options->expert_start, &options->expert_count);
      volt8_host_checkpoint *rank = NULL;
      cr_assert_eq(volt8_checkpoint_load_host(sum.ctx, options, &rank), VOLT8_OK, "%s", volt8_last_error(sum.ctx));
      const volt8_moe_shape *shape = &rank->shape;
      cr_assert(shape->num_experts == options->expert_count && shape->expert_start == options->expert_start &&
                    shape->global_experts == (options->expert_count == experts ? 0 : experts),
                "ep rank %d: shape holds %d experts from %d of %d", ep_rank, shape->num_experts, shape->expert_start,
                shape->global_experts);
      int64_t start = options->expert_start, n = options->expert_count;
      expect_same_bytes(rank->experts.w13, slice->experts.w13 + start * dims.w13_bytes_per_expert,
                        (size_t)(n * dims.w13_bytes_per_expert), "w13", ep_rank, tp_rank);
      expect_same_bytes(rank->experts.w2, slice->experts.w2 + start * dims.w2_bytes_per_expert,
                        (size_t)(n * dims.w2_bytes_per_expert), "w2", ep_rank, tp_rank);
      expect_same_bytes(rank->experts.s13, slice->experts.s13 + start * dims.s13_elems_per_expert,
                        (size_t)(n * dims.s13_elems_per_expert * 2), "s13", ep_rank, tp_rank);
      expect_same_bytes(rank->experts.s2, slice->experts.s2 + start * dims.s2_elems_per_expert,
                        (size_t)(n * dims.s2_elems_per_expert * 2), "s2", ep_rank, tp_rank);
      ranks_sum_add(&sum, shape, &rank->experts, "ep rank", ep_rank);
      volt8_host_checkpoint_free(rank);
    }
    volt8_host_checkpoint_free(slice);
  }
  snprintf(cut, sizeof cut, "%s ep %d x tp %d", name, ep_size, tp_size);
  ranks_sum_end(&sum, cut);
}

Test(checkpoint, expert_ranks_add_up_through_the_reference_forward) {
  expert_parallel_forward_matches_whole("modelopt_mixed_indexed", NULL, 4, 1);
  expert_parallel_forward_matches_whole("modelopt_mixed_indexed", NULL, 2, 2);
  expert_parallel_forward_matches_whole("modelopt_mixed_indexed", NULL, 6, 4);
  expert_parallel_forward_matches_whole("bf16_fused", "fp8", 4, 1);
}

Test(checkpoint, bad_expert_ranges_are_refused_and_leave_nothing) {
  char dir[4096];
  fixture("modelopt_mixed_indexed", dir, sizeof dir);  /* 6 experts */
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  struct { int32_t start, count; const char *named; } cases[] = {
      {-1, 2, "expert_start is -1"}, {0, -3, "expert_count is -3"}, {5, 2, "expert_count is 2"},
      {6, 1, "expert_start is 6"},   {2, 0, "expert_start is 2"},  {4, 7, "expert_count is 7"},
  };
  int64_t held = volt8_checkpoint_live_allocations();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
    options.checkpoint_dir = dir;
    options.expert_start = cases[i].start, options.expert_count = cases[i].count;
    volt8_host_checkpoint *host = (volt8_host_checkpoint *)1;
    cr_assert_eq(volt8_checkpoint_load_host(ctx, &options, &host), VOLT8_ERR_INVALID_ARGUMENT,
                 "start %d count %d accepted", cases[i].start, cases[i].count);
    cr_assert(strstr(volt8_last_error(ctx), cases[i].named), "start %d count %d: \"%s\" does not say \"%s\"",
              cases[i].start, cases[i].count, volt8_last_error(ctx), cases[i].named);
    cr_assert_null(host);
    cr_assert_eq(volt8_checkpoint_live_allocations(), held, "start %d count %d: allocations left behind", cases[i].start,
                 cases[i].count);
    volt8_experts *experts = (volt8_experts *)1;
    volt8_status status = volt8_experts_load(ctx, &options, &experts);
    cr_assert(status == VOLT8_ERR_INVALID_ARGUMENT || status == VOLT8_ERR_NO_DEVICE, "device load: %s",
              volt8_status_string(status));
    cr_assert_null(experts);
    cr_assert_eq(volt8_checkpoint_live_allocations(), held);
  }
  volt8_ctx_destroy(ctx);
}

/* ---- volt8 plan ---- */

static char plan_out[1 << 16], plan_err[1 << 14];

/* `volt8 plan` with the fixture `name`'s folder and then `options` (up to a NULL); its stdout and
 * stderr land in plan_out and plan_err. Returns its exit status. */
static int run_plan(const char *name, const char *const *options) {
  char dir[4096];
  fixture(name, dir, sizeof dir);
  char *args[16] = {"plan", dir};
  for (int i = 0; options[i]; i++) {
    cr_assert_lt(i + 3, 16, "too many options for run_plan");
    args[i + 2] = (char *)options[i];
  }
  return test_run_volt8(args, plan_out, sizeof plan_out, plan_err, sizeof plan_err);
}

/* plan_out as JSON, after a run that exited with `code` 0. */
static cJSON *plan_json(int code) {
  cr_assert_eq(code, 0, "exit %d: %s", code, plan_err);
  cJSON *json = cJSON_Parse(plan_out);
  cr_assert_not_null(json, "not JSON: %s", plan_out);
  return json;
}

Test(checkpoint, cli_plan_prints_json_per_rank) {
  int code = run_plan("modelopt_mixed_indexed", (const char *[]){"--tp", "4", "--json", NULL});
  if (strstr(plan_err, "unknown command")) cr_skip_test("volt8 plan is not wired into cli/main.c in this build");
  cJSON *json = plan_json(code);
  cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(json, "route")->valuestring, "native");
  cr_assert_eq(cJSON_GetObjectItemCaseSensitive(json, "experts")->valueint, 6);
  cr_assert_eq(cJSON_GetObjectItemCaseSensitive(json, "hidden")->valueint, 256);
  cr_assert_eq(cJSON_GetObjectItemCaseSensitive(json, "intermediate")->valueint, 640);
  const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(json, "ranks");
  cr_assert_eq(cJSON_GetArraySize(ranks), 4);
  const char *keys[] = {"rank", "resident_bytes", "weight_bytes", "scale_bytes", "fp16_bytes", "padded_bytes",
                        "n_offset", "k_offset"};
  int32_t rank = 0;
  for (const cJSON *item = ranks->child; item; item = item->next, rank++) {
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
      cr_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(item, keys[k])), "rank %d lacks %s", rank, keys[k]);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(item, "n_offset")->valueint, rank * 160 % 128);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(item, "weight_bytes")->valuedouble, 6.0 * 3 * 160 * 256);
  }
  cJSON_Delete(json);
  cr_assert_eq(run_plan("modelopt_mixed_indexed", (const char *[]){"--tp", "4", "--rank", "3", NULL}), 0, "%s",
               plan_err);
  cr_assert(strstr(plan_out, "resident MiB") && strstr(plan_out, "FP8_PB_WO"), "%s", plan_out);
}

/* --max-tokens and --top-k size the workspace column: the default is a load's 64 x 16, and 4096
 * tokens of top-2 take fewer bytes than 32768 of top-6 (the experts cap 16). */
Test(checkpoint, cli_plan_prints_the_workspace) {
  const char *sizes[][4] = {{"--tp", "2", NULL}, {"--tp", "2", "--max-tokens", "4096"}, {"--tp", "2", "--top-k", "2"}};
  const int32_t tokens[] = {64, 4096, 64}, top_k[] = {16, 16, 2};
  int64_t workspace[3];
  for (int i = 0; i < 3; i++) {
    const char *options[8] = {"--json"};
    for (int j = 0; j < 4 && sizes[i][j]; j++) options[j + 1] = sizes[i][j];
    cJSON *json = plan_json(run_plan("modelopt_mixed_indexed", options));
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(json, "max_tokens")->valueint, tokens[i], "%s", plan_out);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(json, "top_k")->valueint, top_k[i], "%s", plan_out);
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(json, "ranks");
    const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(ranks->child, "workspace_bytes");
    cr_assert(cJSON_IsNumber(bytes), "%s", plan_out);
    workspace[i] = (int64_t)bytes->valuedouble;
    int64_t pairs = (int64_t)tokens[i] * (top_k[i] < 6 ? top_k[i] : 6);
    cr_assert_geq(workspace[i], pairs * (320 * 2 + 256 * 4), "%s", plan_out);
    cJSON_Delete(json);
  }
  cr_assert(workspace[1] > 60 * workspace[0] && workspace[2] < workspace[0], "%lld %lld %lld", (long long)workspace[0],
            (long long)workspace[1], (long long)workspace[2]);
  cr_assert_eq(run_plan("modelopt_mixed_indexed", (const char *[]){"--tp", "1", "--max-tokens", "32768", NULL}), 0, "%s",
               plan_err);
  cr_assert(strstr(plan_out, "workspace MiB") && strstr(plan_out, "--max-tokens 32768 x --top-k 16"), "%s", plan_out);
}

/* --ep 4 over 6 experts: ranges [0, 2), [2, 4), [4, 5), [5, 6), each with its experts' bytes. */
Test(checkpoint, cli_plan_splits_experts_over_ep_ranks) {
  cJSON *json = plan_json(
      run_plan("modelopt_mixed_indexed", (const char *[]){"--tp", "2", "--ep", "4", "--json", NULL}));
  cr_assert_eq(cJSON_GetObjectItemCaseSensitive(json, "ep")->valueint, 4);
  const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(json, "ranks");
  cr_assert_eq(cJSON_GetArraySize(ranks), 8, "%s", plan_out);
  const int32_t starts[4] = {0, 2, 4, 5}, counts[4] = {2, 2, 1, 1};
  int32_t index = 0;
  for (const cJSON *item = ranks->child; item; item = item->next, index++) {
    int32_t ep_rank = index / 2, tp_rank = index % 2;
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(item, "ep_rank")->valueint, ep_rank);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(item, "rank")->valueint, tp_rank);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(item, "expert_start")->valueint, starts[ep_rank], "entry %d", index);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(item, "expert_count")->valueint, counts[ep_rank], "entry %d", index);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(item, "weight_bytes")->valuedouble, counts[ep_rank] * 3.0 * 320 * 256,
                 "entry %d", index);
  }
  cJSON_Delete(json);
  cr_assert_eq(run_plan("modelopt_mixed_indexed", (const char *[]){"--tp", "1", "--ep", "4", NULL}), 0, "%s", plan_err);
  cr_assert(strstr(plan_out, "ep 4") && strstr(plan_out, "the first 2 ranks one more") && strstr(plan_out, "   4..4"),
            "%s", plan_out);
  /* more ranks than experts is a bad --ep, known once the checkpoint is read */
  cr_assert_eq(run_plan("modelopt_mixed_indexed", (const char *[]){"--tp", "1", "--ep", "7", NULL}), 2, "%s", plan_err);
  cr_assert(strstr(plan_err, "--ep 7") && strstr(plan_err, "6 experts"), "%s", plan_err);
}

Test(checkpoint, cli_plan_fails_on_a_bad_checkpoint) {
  int code = run_plan("missing_scale", (const char *[]){"--tp", "2", "--json", NULL});
  if (strstr(plan_err, "unknown command")) cr_skip_test("volt8 plan is not wired into cli/main.c in this build");
  cr_assert_neq(code, 0);
  cr_assert(strstr(plan_err, "VOLT8_ERR_NOT_FOUND") && strstr(plan_err, "down_proj.weight_scale_inv"), "%s", plan_err);
  cr_assert_eq(plan_out[0], '\0', "nothing on stdout: %s", plan_out);
}
