/* Online conversion of unquantized experts: the quantizer's rule on synthetic blocks, every rank of
 * the BF16 (fused) and F16 fixtures against a numpy/ml_dtypes oracle for (1,128) and (128,128)
 * blocks, the conversion error against the source, and the host memory a load holds at its peak. */
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
#include "checkpoint/quant.h"

#include "checkpoint_fixture.h"
#include "test_support.h"

CHECKPOINT_FIXTURES("online")

TestSuite(quant, .timeout = 300);

/* ---- the rule, on synthetic blocks ---- */

static volt8_st_tensor source_tensor(const float *values, int64_t rows, int64_t cols) {
  volt8_st_tensor tensor = {.name = "mtp.layers.0.mlp.experts.2.down_proj.weight", .file = "unit.safetensors",
                            .dtype = VOLT8_ST_F32, .rank = 2, .shape = {rows, cols}, .data = (const uint8_t *)values,
                            .bytes = (size_t)(rows * cols * 4)};
  return tensor;
}

Test(quant, block_scale_rule) {
  enum { ROWS = 4, COLS = 256 };
  static float values[ROWS][COLS];
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++) values[r][c] = (float)sin(r * 7.0 + c * 0.37) * 0.05f;
  for (int c = 128; c < 256; c++) values[0][c] = 0.0f;  /* an all-zero (1,128) block */
  for (int c = 128; c < 256; c++) values[1][c] = 1e-6f * (float)(c % 5); /* below the smallest FP16 scale */
  values[2][3] = -3.5f;                               /* an outlier sets its block's scale */
  volt8_st_tensor tensor = source_tensor(&values[0][0], ROWS, COLS);
  static uint8_t codes[ROWS][COLS];
  uint16_t scales[ROWS][2];
  volt8_quant_error error = {0};
  cr_assert_eq(volt8_quant_matrix(NULL, &tensor, 2, (const uint8_t *)values, ROWS, COLS, 0, 0, 1, &codes[0][0],
                                  &scales[0][0], &error),
               VOLT8_OK, "%s", volt8_last_error(NULL));
  cr_assert_eq(scales[0][1], 0x0400, "an all-zero block gets the smallest normal scale");
  cr_assert_eq(scales[1][1], 0x0400, "a tiny block's scale is raised to the smallest normal");
  cr_assert_eq(scales[2][0], volt8_half_from_double(3.5 / 448.0 * 256.0));
  double squares = 0.0, reference = 0.0;
  for (int r = 0; r < ROWS; r++) {
    for (int c = 0; c < COLS; c++) {
      double scale = volt8_half_to_double(scales[r][c / 128]) / 256.0;
      cr_assert_eq(codes[r][c], volt8_e4m3_from_float((float)(values[r][c] / scale)), "[%d, %d]", r, c);
      double difference = values[r][c] - volt8_e4m3_to_float(codes[r][c]) * scale;
      squares += difference * difference;
      reference += (double)values[r][c] * values[r][c];
    }
  }
  cr_assert_eq(codes[2][3], 0xFE, "the block maximum lands on -448");
  cr_assert(fabs(error.error_squares - squares) <= 1e-12 * squares && fabs(error.reference_squares - reference) <= 1e-12 * reference);
  cr_assert_lt(sqrt(squares / reference), 0.05);
}

Test(quant, tall_blocks_share_one_scale) {
  enum { ROWS = 130, COLS = 130 };
  static float values[ROWS][COLS];
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++) values[r][c] = (float)((r * 31 + c * 17) % 97 - 48) / 1000.0f;
  values[127][127] = 2.0f;  /* block [0, 0]; rows 128..129 and column 128..129 form the three others */
  volt8_st_tensor tensor = source_tensor(&values[0][0], ROWS, COLS);
  static uint8_t codes[ROWS][COLS];
  uint16_t scales[2][2];
  volt8_quant_error error = {0};
  cr_assert_eq(volt8_quant_matrix(NULL, &tensor, 2, (const uint8_t *)values, ROWS, COLS, 0, 0, 128, &codes[0][0],
                                  &scales[0][0], &error), VOLT8_OK);
  cr_assert_eq(scales[0][0], volt8_half_from_double(2.0 / 448.0 * 256.0));
  double corner = 0.0; /* block [1, 1]: rows and columns 128..129 */
  for (int r = 128; r < ROWS; r++)
    for (int c = 128; c < COLS; c++) corner = fmax(corner, fabs((double)values[r][c]));
  cr_assert_eq(scales[1][1], volt8_half_from_double(corner / 448.0 * 256.0), "block [1, 1]: 0x%04x", scales[1][1]);
}

/* The native route's FP16 rule: every code times its block's scale stays within 65504. 65504 used to
 * get scale 146.25 (FP16 rounding up 146.21) and code 448, dequantizing to 65520. */
Test(quant, dequantized_values_stay_within_fp16) {
  enum { ROWS = 1, COLS = 128 * 4 };
  static float values[ROWS][COLS];
  const float largest[4] = {65504.0f, -65504.0f, 65000.0f, 65472.0f};
  for (int block = 0; block < 4; block++)
    for (int c = 0; c < 128; c++) values[0][block * 128 + c] = c == 5 ? largest[block] : (float)(c - 64) * 3.0f;
  volt8_st_tensor tensor = source_tensor(&values[0][0], ROWS, COLS);
  static uint8_t codes[ROWS][COLS];
  uint16_t scales[4];
  volt8_quant_error error = {0};
  cr_assert_eq(volt8_quant_matrix(NULL, &tensor, 0, (const uint8_t *)values, ROWS, COLS, 0, 0, 1, &codes[0][0], scales,
                                  &error), VOLT8_OK, "%s", volt8_last_error(NULL));
  for (int block = 0; block < 4; block++) {
    double scale = volt8_half_to_double(scales[block]) / 256.0;
    for (int c = 0; c < 128; c++) {
      double dequantized = fabs((double)volt8_e4m3_to_float(codes[0][block * 128 + c])) * scale;
      cr_assert_leq(dequantized, 65504.0, "block %d (largest %g): column %d dequantizes to %g with scale %g", block,
                    (double)largest[block], c, dequantized, scale);
      cr_assert_lt(volt8_half_from_double(dequantized) & 0x7FFF, 0x7C00, "block %d column %d: %g is infinite in FP16",
                   block, c, dequantized);
    }
    cr_assert_geq(fabs((double)volt8_e4m3_to_float(codes[0][block * 128 + 5])) * scale, fabs((double)largest[block]) * 0.93,
                  "block %d: the largest weight lost more than a code step", block);
  }
}

Test(quant, rejects_non_finite_and_beyond_fp16) {
  float values[2][128] = {{0}};
  uint8_t codes[2][128];
  uint16_t scales[2];
  volt8_quant_error error = {0};
  values[1][77] = NAN;
  volt8_st_tensor tensor = source_tensor(&values[0][0], 2, 128);
  cr_assert_eq(volt8_quant_matrix(NULL, &tensor, 2, (const uint8_t *)values, 2, 128, 300, 40, 1, &codes[0][0], scales,
                                  &error), VOLT8_ERR_FORMAT);
  cr_assert(strstr(volt8_last_error(NULL), "element [301, 117]") && strstr(volt8_last_error(NULL), "expert 2") &&
            strstr(volt8_last_error(NULL), tensor.name), "%s", volt8_last_error(NULL));
  values[1][77] = 70000.0f;
  cr_assert_eq(volt8_quant_matrix(NULL, &tensor, 2, (const uint8_t *)values, 2, 128, 300, 40, 1, &codes[0][0], scales,
                                  &error), VOLT8_ERR_SCALE_RANGE);
  cr_assert(strstr(volt8_last_error(NULL), "rows 301..301") && strstr(volt8_last_error(NULL), "65504"), "%s",
            volt8_last_error(NULL));
  cr_assert_eq(volt8_quant_check_values(NULL, &tensor, 2, (const uint8_t *)values, 2, 128), VOLT8_ERR_SCALE_RANGE);
  values[1][77] = 65504.0f;
  cr_assert_eq(volt8_quant_check_values(NULL, &tensor, 2, (const uint8_t *)values, 2, 128), VOLT8_OK);
}

/* ---- the fixtures, every rank ---- */

typedef struct online_case { const char *name; int32_t block_n; } online_case;
static const online_case online_cases[] = {
    {"bf16_fused", 1}, {"bf16_fused", 128}, {"f16_per_expert_opt_in_config", 1}, {"f16_per_expert_opt_in_config", 128}};
#define ONLINE_CASES (sizeof online_cases / sizeof online_cases[0])

ParameterizedTestParameters(quant, online_ranks_match_numpy) {
  static int indices[ONLINE_CASES];
  for (size_t i = 0; i < ONLINE_CASES; i++) indices[i] = (int)i;
  return cr_make_param_array(int, indices, ONLINE_CASES);
}

static void compare_array(const char *variant, const char *case_name, const char *array, const void *actual,
                          size_t actual_bytes) {
  char relative[512], path[4096];
  snprintf(relative, sizeof relative, "expected/%s/%s/%s.bin", case_name, variant, array);
  fixture(relative, path, sizeof path);
  size_t bytes = 0;
  uint8_t *expected = test_read_whole(path, &bytes);
  cr_assert_eq(bytes, actual_bytes, "%s %s %s: %zu bytes, numpy has %zu", case_name, variant, array, actual_bytes, bytes);
  const uint8_t *got = actual;
  for (size_t i = 0; i < bytes; i++)
    cr_assert_eq(got[i], expected[i], "%s %s %s: byte %zu is 0x%02x, numpy 0x%02x (seed %s)", case_name, variant, array,
                 i, got[i], expected[i], fixture_seed());
  free(expected);
}

/* ||source - dequantized|| over the rank's slice, from the FP64 copy of the source the generator wrote. */
static void conversion_error(const char *case_name, const volt8_host_checkpoint *host, int32_t full, int32_t rank,
                             double *squares, double *reference, double *max_abs) {
  const volt8_moe_shape *shape = &host->shape;
  volt8_moe_dims dims;
  cr_assert_eq(volt8_moe_dims_compute(NULL, shape, &dims), VOLT8_OK);
  int64_t hidden = shape->hidden, size = shape->intermediate, start = rank * size, bn = shape->block_n;
  const char *projections[3] = {"gate_proj", "up_proj", "down_proj"};
  for (int32_t e = 0; e < shape->num_experts; e++) {
    for (int p = 0; p < 3; p++) {
      char relative[512], path[4096];
      snprintf(relative, sizeof relative, "expected/%s/source/%d.%s.bin", case_name, e, projections[p]);
      fixture(relative, path, sizeof path);
      size_t bytes = 0;
      double *source = test_read_whole(path, &bytes);
      int64_t rows = p == 2 ? hidden : size, cols = p == 2 ? size : hidden;
      for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
          double value, scale;
          uint8_t code;
          if (p < 2) {
            value = source[(start + r) * hidden + c];
            code = host->experts.w13[dims.w13_bytes_per_expert * e + (p * size + r) * hidden + c];
            scale = volt8_half_to_double(host->experts.s13[dims.s13_elems_per_expert * e +
                                                           (p * dims.g13 + r / bn) * dims.k13_blocks + c / 128]);
          } else {
            value = source[r * full + start + c];
            code = host->experts.w2[dims.w2_bytes_per_expert * e + r * size + c];
            scale = volt8_half_to_double(host->experts.s2[dims.s2_elems_per_expert * e + (r / bn) * dims.g2 + c / 128]);
          }
          double difference = value - volt8_e4m3_to_float(code) * scale / 256.0;
          *squares += difference * difference;
          *reference += value * value;
          *max_abs = fmax(*max_abs, fabs(difference));
        }
      }
      free(source);
    }
  }
}

ParameterizedTest(int *index, quant, online_ranks_match_numpy) {
  const online_case *test = &online_cases[*index];
  cJSON *root = manifest();
  const cJSON *entry = manifest_case(root, "valid", test->name);
  char dir[4096], block_key[8];
  fixture(cJSON_GetObjectItemCaseSensitive(entry, "dir")->valuestring, dir, sizeof dir);
  const cJSON *online = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(entry, "options"), "online");
  int32_t full = cJSON_GetObjectItemCaseSensitive(entry, "intermediate")->valueint;
  snprintf(block_key, sizeof block_key, "%d", test->block_n);
  const cJSON *tps = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(entry, "tps"), block_key);
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  int64_t held = volt8_checkpoint_live_allocations();
  for (const cJSON *tp_item = tps->child; tp_item; tp_item = tp_item->next) {
    int32_t tp = tp_item->valueint;
    double squares = 0.0, reference = 0.0, max_abs = 0.0, reported_max = 0.0;
    for (int32_t rank = 0; rank < tp; rank++) {
      volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
      options.checkpoint_dir = dir;
      options.mtp_expert_quantization = online ? online->valuestring : NULL;
      options.online_block_n = test->block_n;
      options.tp_size = tp;
      options.tp_rank = rank;
      volt8_host_checkpoint *host = NULL;
      cr_assert_eq(volt8_checkpoint_load_host(ctx, &options, &host), VOLT8_OK, "%s tp %d rank %d: %s", test->name, tp,
                   rank, volt8_last_error(ctx));
      cr_assert(host->shape.intermediate == full / tp && host->shape.intermediate_offset == 0 &&
                host->shape.block_n == test->block_n && host->report.route == VOLT8_ROUTE_ONLINE);
      char variant[64];
      snprintf(variant, sizeof variant, "bn%d_tp%d_rank%d", test->block_n, tp, rank);
      volt8_moe_dims dims;
      cr_assert_eq(volt8_moe_dims_compute(ctx, &host->shape, &dims), VOLT8_OK);
      int64_t experts = host->shape.num_experts;
      compare_array(variant, test->name, "w13", host->experts.w13, (size_t)(dims.w13_bytes_per_expert * experts));
      compare_array(variant, test->name, "s13", host->experts.s13, (size_t)(dims.s13_elems_per_expert * experts * 2));
      compare_array(variant, test->name, "w2", host->experts.w2, (size_t)(dims.w2_bytes_per_expert * experts));
      compare_array(variant, test->name, "s2", host->experts.s2, (size_t)(dims.s2_elems_per_expert * experts * 2));
      double rank_squares = 0.0, rank_reference = 0.0, rank_max = 0.0;
      conversion_error(test->name, host, full, rank, &rank_squares, &rank_reference, &rank_max);
      double rank_error = sqrt(rank_squares / rank_reference);
      cr_assert(fabs(host->report.online_relative_l2 - rank_error) <= 1e-9 * rank_error,
                "%s tp %d rank %d: report says relative L2 %.9g, the source gives %.9g", test->name, tp, rank,
                host->report.online_relative_l2, rank_error);
      cr_assert(fabs(host->report.online_max_abs_error - rank_max) <= 1e-12,
                "%s tp %d rank %d: max abs error %.9g vs %.9g", test->name, tp, rank, host->report.online_max_abs_error,
                rank_max);
      squares += rank_squares, reference += rank_reference, max_abs = fmax(max_abs, rank_max);
      reported_max = fmax(reported_max, host->report.online_max_abs_error);
      volt8_host_checkpoint_free(host);
    }
    double error = sqrt(squares / reference);
    cr_log_info("%s, blocks (%d,128), tp %d: conversion error vs the source: relative L2 %.4f, max |error| %.3g",
                test->name, test->block_n, tp, error, max_abs);
    cr_assert_lt(error, 0.04, "%s: E4M3 keeps 3 mantissa bits; relative L2 %.4f is too large", test->name, error);
  }
  cr_assert_eq(volt8_checkpoint_live_allocations(), held, "%s: allocations stayed behind", test->name);
  volt8_ctx_destroy(ctx);
  cJSON_Delete(root);
}

/* One matrix slice of staging beside the output arrays: nothing the size of the checkpoint. */
Test(quant, peak_host_memory_is_one_slice_of_staging) {
  char dir[4096];
  fixture("bf16_fused", dir, sizeof dir);
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = dir;
  options.mtp_expert_quantization = "fp8";
  options.tp_size = 4;
  options.tp_rank = 1;
  volt8_load_report report = VOLT8_LOAD_REPORT_INIT;
  options.report = &report;
  volt8_checkpoint_peak_bytes(1);
  int64_t before = volt8_checkpoint_peak_bytes(0);
  volt8_host_checkpoint *host = NULL;
  cr_assert_eq(volt8_checkpoint_load_host(ctx, &options, &host), VOLT8_OK, "%s", volt8_last_error(ctx));
  volt8_moe_dims dims;
  cr_assert_eq(volt8_moe_dims_compute(ctx, &host->shape, &dims), VOLT8_OK);
  int64_t experts = host->shape.num_experts;
  int64_t arrays = (dims.w13_bytes_per_expert + dims.w2_bytes_per_expert +
                    2 * (dims.s13_elems_per_expert + dims.s2_elems_per_expert)) * experts;
  int64_t slice = (int64_t)host->shape.intermediate * host->shape.hidden * 2; /* BF16 */
  cr_assert_eq(report.staging_peak_bytes, slice, "staging %lld bytes, one BF16 slice is %lld",
               (long long)report.staging_peak_bytes, (long long)slice);
  int64_t peak = volt8_checkpoint_peak_bytes(0) - before;
  int64_t bookkeeping = 64 << 10; /* config text, checkpoint handle, tensor table */
  cr_log_info("online load, 4 experts at tp 4: peak %lld bytes = arrays %lld + staging %lld + %lld", (long long)peak,
              (long long)arrays, (long long)slice, (long long)(peak - arrays - slice));
  cr_assert_leq(peak, arrays + slice + bookkeeping, "peak %lld bytes: arrays %lld, staging %lld", (long long)peak,
                (long long)arrays, (long long)slice);
  volt8_host_checkpoint_free(host);
  volt8_checkpoint_peak_bytes(1);
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_leq(volt8_checkpoint_peak_bytes(0), bookkeeping, "a plan of the online route stages nothing");
  volt8_ctx_destroy(ctx);
}

static const char *const online_rejections[] = {"online_not_finite", "online_beyond_fp16"};

Test(quant, bad_source_values_rejected_and_nothing_held) {
  cJSON *root = manifest();
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  for (size_t i = 0; i < sizeof online_rejections / sizeof online_rejections[0]; i++) {
    const char *name = online_rejections[i];
    char dir[4096];
    fixture(name, dir, sizeof dir);
    int64_t held = volt8_checkpoint_live_allocations();
    volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
    options.checkpoint_dir = dir;
    options.mtp_expert_quantization = "fp8";
    volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
    expect_failure(manifest_case(root, "invalid", name), name, volt8_plan(ctx, &options, &plan), volt8_last_error(ctx));
    volt8_host_checkpoint *host = NULL;
    expect_failure(manifest_case(root, "invalid", name), name, volt8_checkpoint_load_host(ctx, &options, &host),
                   volt8_last_error(ctx));
    cr_assert_eq(volt8_checkpoint_live_allocations(), held, "case %s: allocations stayed behind", name);
  }
  volt8_ctx_destroy(ctx);
  cJSON_Delete(root);
}
