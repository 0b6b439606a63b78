/* The bench and the tuner end to end on a small problem (64 experts): every method checked
 * against the reference, the report rendered, a tuned table written and then served by lookup and
 * dispatch through VOLT8_TUNING_DIR. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dispatch/dispatch.h"
#include "gpu_fixture.h"
#include "dispatch/tuning.h"

/* Needs bench/ and tuning/ (configured unless VOLT8_BUILD_BENCH is off). */
#if __has_include("bench_run.h")
#include "bench_options.h"
#include "bench_problem.h"
#include "bench_run.h"
#include "tune_run.h"

#define SMALL_EXPERTS 64

TestSuite(bench, .timeout = 900);

static int remove_entry(const char *path, const struct stat *info, int flag, struct FTW *ftw) {
  (void)info, (void)flag, (void)ftw;
  return remove(path);
}

Test(bench, every_method_agrees_with_the_reference) {
  volt8_ctx *ctx = gpu_open();
  bench_options options;
  char error[256];
  char *argv[] = {"bench", "--m", "1,8", "--batches", "3", "--warmup", "1", "--sets", "4"};
  cr_assert_eq(bench_options_parse(9, argv, &options, error, sizeof error), 0, "%s", error);
  options.shape.num_experts = SMALL_EXPERTS;
  options.copy_mib = 64;
  options.baselines = !gpu_quick_mode(); /* cuBLAS under the sanitizers takes too long */
  bench_report *report = calloc(1, sizeof *report);
  cr_assert_not_null(report);
  volt8_status status = bench_run(ctx, &options, "volt8 bench (gpu test)", NULL, report);
  cr_assert_eq(status, VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(report->count, 2);
  cr_assert_gt(report->copy_gbps, 10.0, "copy bandwidth %g GB/s", report->copy_gbps);
  /* Graphs of empty kernels cost something; three of them less than the M = 1 forward's three. */
  cr_assert_gt(report->launch_floor[0].median_us, 0.0);
  cr_assert_gt(report->launch_floor[1].median_us, 0.0);
  cr_assert_gt(report->launch_floor[2].median_us, 0.0);
  cr_assert_lt(report->launch_floor[0].median_us, report->results[0].methods[BENCH_METHOD_VOLT8].timing.median_us,
               "launch floor %g us against the M = 1 forward", report->launch_floor[0].median_us);
  for (int32_t i = 0; i < report->count; i++) {
    const bench_m_result *result = &report->results[i];
    const bench_method_result *volt8 = &result->methods[BENCH_METHOD_VOLT8];
    cr_assert(volt8->ran, "M=%d: volt8 did not run: %s", result->m, volt8->reason);
    cr_assert_leq(volt8->relative_l2, BENCH_TOLERANCE, "M=%d: volt8 relative L2 %g", result->m, volt8->relative_l2);
    cr_assert_gt(volt8->timing.median_us, 0.0);
    cr_assert_gt(result->floor_us, 0.0);
    for (int method = BENCH_METHOD_CUBLASLT_FP16; method < BENCH_METHOD_COUNT; method++) {
      const bench_method_result *baseline = &result->methods[method];
      if (!baseline->ran) {
        cr_assert_neq(baseline->reason[0], '\0', "M=%d: %s neither ran nor said why", result->m, bench_method_key(method));
        cr_log_info("M=%d: %s did not run: %s", result->m, bench_method_key(method), baseline->reason);
        continue;
      }
      /* FP16 weights and an FP16 y between the GEMMs: a little further from the reference than volt8 */
      cr_assert_leq(baseline->relative_l2, 4 * BENCH_TOLERANCE, "M=%d: %s relative L2 %g", result->m,
                    bench_method_key(method), baseline->relative_l2);
    }
  }
  char *json = bench_report_json(report);
  cJSON *root = cJSON_Parse(json);
  cr_assert_not_null(root);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "results")), 2);
  cJSON_Delete(root);
  free(json);
  char *svg = bench_report_svg(report);
  cr_assert_not_null(strstr(svg, "</svg>"));
  free(svg);
  bench_report_print(report, stderr);
  free(report);
  volt8_ctx_destroy(ctx);
}

/* --chain: four forwards in one graph, each on its own input set; the first checked against the
 * reference, the others for being written (poisoned before). */
Test(bench, chained_forwards_agree_with_the_reference) {
  volt8_ctx *ctx = gpu_open();
  bench_options options;
  char error[256];
  char *argv[] = {"bench", "--m", "1,8", "--batches", "3", "--warmup", "1", "--sets", "2", "--chain", "4",
                  "--no-baselines"};
  cr_assert_eq(bench_options_parse(12, argv, &options, error, sizeof error), 0, "%s", error);
  options.shape.num_experts = SMALL_EXPERTS;
  options.copy_mib = 64;
  bench_report *report = calloc(1, sizeof *report);
  cr_assert_not_null(report);
  volt8_status status = bench_run(ctx, &options, "volt8 bench --chain 4 (gpu test)", NULL, report);
  cr_assert_eq(status, VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(report->chain, 4);
  for (int32_t i = 0; i < report->count; i++) {
    const bench_m_result *result = &report->results[i];
    cr_assert_geq(result->input_sets, 4, "M=%d: %d sets for a chain of 4", result->m, result->input_sets);
    cr_assert(result->chained.ran, "M=%d: the chain did not run: %s", result->m, result->chained.reason);
    cr_assert_leq(result->chained.relative_l2, BENCH_TOLERANCE, "M=%d: relative L2 %g", result->m,
                  result->chained.relative_l2);
    cr_assert_gt(result->chained.timing.median_us, 0.0);
  }
  cr_assert(bench_report_passed(report));
  bench_report_print(report, stderr);
  free(report);
  volt8_ctx_destroy(ctx);
}

/* Past BENCH_REFERENCE_ROWS tokens the reference covers that many rows, from the first token to the
 * last, each equal to its token's row of the whole forward. No GPU needed. */
Test(bench, the_reference_of_a_prefill_covers_a_sample_of_rows) {
  volt8_ctx_options ctx_options = VOLT8_CTX_OPTIONS_INIT;
  ctx_options.device = -1;
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&ctx_options, &ctx), VOLT8_OK, "%s", volt8_last_error(NULL));
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.hidden = 256, shape.intermediate = 128, shape.num_experts = 16, shape.intermediate_offset = 0;
  bench_experts_host host;
  cr_assert_eq(bench_experts_generate(ctx, &shape, 3, 2, &host), VOLT8_OK, "%s", volt8_last_error(ctx));
  bench_inputs inputs;
  int32_t tokens = 3 * BENCH_REFERENCE_ROWS + 5;
  cr_assert_eq(bench_inputs_create(ctx, &host, tokens, 4, 1, 3, 0, 1, 2, &inputs), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(inputs.reference_row_count, BENCH_REFERENCE_ROWS);
  cr_assert(inputs.reference_rows[0] == 0 && inputs.reference_rows[BENCH_REFERENCE_ROWS - 1] == tokens - 1);
  for (int32_t r = 1; r < BENCH_REFERENCE_ROWS; r++)
    cr_assert_gt(inputs.reference_rows[r], inputs.reference_rows[r - 1], "rows %d and %d", r - 1, r);
  double row[256];
  volt8_host_experts view = bench_experts_view(&host);
  for (int32_t r = 0; r < BENCH_REFERENCE_ROWS; r += 101) {
    size_t token = (size_t)inputs.reference_rows[r];
    cr_assert_eq(volt8_reference_moe_forward(ctx, &shape, &view, inputs.sets[0].x + token * 256,
                                             inputs.sets[0].ids + token * 4, inputs.sets[0].weights + token * 4, 1, 4,
                                             row),
                 VOLT8_OK);
    cr_assert_eq(memcmp(row, inputs.reference + (size_t)r * 256, sizeof row), 0, "row %d (token %zu)", r, token);
  }
  bench_inputs_destroy(ctx, &inputs);
  cr_assert_eq(bench_inputs_create(ctx, &host, 7, 4, 1, 3, 0, 1, 2, &inputs), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(inputs.reference_row_count, 7, "few tokens: every row");
  bench_inputs_destroy(ctx, &inputs);
  bench_experts_free(&host);
  volt8_ctx_destroy(ctx);
}

/* A prefill past one launch's grid (20000 tokens of top-10: 200000 pairs), checked on its sampled
 * rows with every row written. */
Test(bench, a_prefill_past_one_grid_agrees_with_the_reference) {
  volt8_ctx *ctx = gpu_open();
  bench_options options;
  char error[256];
  char *argv[] = {"bench", "--m", "20000", "--batches", "2", "--warmup", "1", "--sets", "1", "--no-baselines"};
  cr_assert_eq(bench_options_parse(10, argv, &options, error, sizeof error), 0, "%s", error);
  options.shape.num_experts = SMALL_EXPERTS;
  options.copy_mib = 64;
  bench_report *report = calloc(1, sizeof *report);
  cr_assert_not_null(report);
  volt8_status status = bench_run(ctx, &options, "volt8 bench --m 20000 (gpu test)", NULL, report);
  cr_assert_eq(status, VOLT8_OK, "%s", volt8_last_error(ctx));
  const bench_method_result *volt8 = &report->results[0].methods[BENCH_METHOD_VOLT8];
  cr_assert(volt8->ran, "volt8 did not run: %s", volt8->reason);
  cr_assert_leq(volt8->relative_l2, BENCH_TOLERANCE, "relative L2 %g", volt8->relative_l2);
  free(report);
  volt8_ctx_destroy(ctx);
}

Test(bench, tuned_table_is_served) {
  volt8_ctx *probe = gpu_open();
  volt8_ctx_destroy(probe);
  char dir[256];
  snprintf(dir, sizeof dir, "%s/volt8_tune_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  cr_assert_not_null(mkdtemp(dir));
  tune_options options;
  char error[8192];
  char *argv[] = {"tune", "--m", "1,4", "--screen", "2", "--final", "2", "--finalists", "1", "--sets", "4", "--out", dir};
  char *quick_argv[] = {"tune", "--m", "4", "--screen", "1", "--finalists", "0", "--sets", "4", "--out", dir};
  int quick = gpu_quick_mode(); /* under the sanitizers: one M, no finalists */
  cr_assert_eq(quick ? tune_options_parse(11, quick_argv, &options, error, sizeof error)
                     : tune_options_parse(13, argv, &options, error, sizeof error),
               0, "%s", error);
  options.shapes[0].num_experts = SMALL_EXPERTS;
  options.target_arch = getenv("VOLT8_TARGET_ARCH");
  tune_outcome outcome;
  volt8_status status = tune_run(&options, "volt8 tune (gpu test)", stderr, 0, &outcome, error, sizeof error);
  cr_assert_eq(status, VOLT8_OK, "%s", error);
  cr_assert_eq(outcome.m_failed, 0);
  cr_assert_eq(outcome.shapes_done, 1);

  setenv(VOLT8_TUNING_DIR_ENV, dir, 1);
  volt8_ctx *ctx = gpu_open();
  volt8_tuning_match match;
  cr_assert_eq(volt8_tuning_lookup(ctx, &options.shapes[0], VOLT8_OP_GATE_UP, 4, 10, &match), VOLT8_OK);
  cr_assert_eq(match.source, VOLT8_TUNING_SOURCE_ENV_DIR, "the tuned table was not found (%s)", dir);
  volt8_forward_info choice = VOLT8_FORWARD_INFO_INIT;
  cr_assert_eq(volt8_forward_describe(ctx, &options.shapes[0], NULL, 4, 10, &choice), VOLT8_OK, "%s",
               volt8_last_error(ctx));
  cr_assert_str_eq(choice.gate_up, match.variant, "dispatch serves the tuned variant");
  volt8_ctx_destroy(ctx);
  nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
