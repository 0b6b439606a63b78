/* Scale validation: BF16 and F16 scales convert to FP16 (x 2^8) exactly, F32 ones within half an
 * FP16 ulp with the largest error reported, and every out-of-range scale or NaN weight code is
 * rejected naming file, tensor, expert and block, both in isolation and in a whole load. */
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
#include "core/numeric.h"
#include "checkpoint/scales.h"

#include "checkpoint_fixture.h"

CHECKPOINT_FIXTURES("scales")

TestSuite(scales, .timeout = 120);

static volt8_st_tensor grid_tensor(volt8_st_dtype dtype, const void *data, int64_t rows, int64_t cols) {
  volt8_st_tensor tensor = {.name = "mtp.layers.0.mlp.experts.5.up_proj.weight_scale_inv", .file = "unit.safetensors",
                            .dtype = dtype, .rank = 2, .shape = {rows, cols}, .data = data};
  tensor.bytes = (size_t)(rows * cols * volt8_st_dtype_bits(dtype) / 8);
  return tensor;
}

static unsigned unit_seed(void) {
  const char *text = fixture_seed();
  return text ? (unsigned)strtoul(text, NULL, 10) : 1u;
}

/* ---- conversion ---- */

Test(scales, bf16_in_range_converts_exactly) {
  /* every positive BF16 whose value times 2^8 is an FP16 normal: [2^-22, 65504 / 256] */
  uint16_t values[8192];
  int64_t count = 0;
  for (uint32_t bits = 0x0001; bits < 0x7F80; bits++) {
    double value = volt8_bf16_to_float((uint16_t)bits);
    if (value >= ldexp(1.0, -22) && value * 256.0 <= 65504.0) values[count++] = (uint16_t)bits;
  }
  cr_assert_gt(count, 3000);
  volt8_st_tensor tensor = grid_tensor(VOLT8_ST_BF16, values, 1, count);
  uint16_t *out = malloc((size_t)count * 2);
  double error = 0.0;
  cr_assert_eq(volt8_scales_convert(NULL, &tensor, 5, 0, 1, 0, count, NULL, out, &error), VOLT8_OK, "%s",
               volt8_last_error(NULL));
  cr_assert_eq(error, 0.0);
  for (int64_t i = 0; i < count; i++)
    cr_assert_eq(volt8_half_to_double(out[i]), volt8_bf16_to_float(values[i]) * 256.0, "BF16 0x%04x", values[i]);
  free(out);
}

Test(scales, f16_in_range_converts_exactly) {
  uint16_t values[64];
  for (int i = 0; i < 64; i++) values[i] = (uint16_t)(0x1000 + i * 0x0100); /* 2^-11 .. 28 */
  volt8_st_tensor tensor = grid_tensor(VOLT8_ST_F16, values, 8, 8);
  uint16_t out[64];
  double error = 0.0;
  cr_assert_eq(volt8_scales_convert(NULL, &tensor, 5, 0, 8, 0, 8, NULL, out, &error), VOLT8_OK, "%s",
               volt8_last_error(NULL));
  cr_assert_eq(error, 0.0);
  for (int i = 0; i < 64; i++) cr_assert_eq(volt8_half_to_double(out[i]), volt8_half_to_double(values[i]) * 256.0);
}

Test(scales, f32_rounds_to_nearest_and_reports_the_largest_error) {
  unsigned state = unit_seed();
  float values[4096];
  double expected_error = 0.0;
  for (int i = 0; i < 4096; i++) {
    values[i] = (float)ldexp(1.0 + (double)rand_r(&state) / RAND_MAX, -20 + rand_r(&state) % 26);
    double stored = volt8_half_to_double(volt8_half_from_double((double)values[i] * 256.0)) / 256.0;
    expected_error = fmax(expected_error, fabs(stored - values[i]) / values[i]);
  }
  volt8_st_tensor tensor = grid_tensor(VOLT8_ST_F32, values, 64, 64);
  uint16_t out[4096];
  double error = 0.0;
  cr_assert_eq(volt8_scales_convert(NULL, &tensor, 5, 0, 64, 0, 64, NULL, out, &error), VOLT8_OK, "%s",
               volt8_last_error(NULL));
  cr_assert_eq(error, expected_error, "seed %u", unit_seed());
  cr_assert(error > 0.0 && error <= ldexp(1.0, -11), "largest relative error %g (seed %u)", error, unit_seed());
  for (int i = 0; i < 4096; i++)
    cr_assert_eq(out[i], volt8_half_from_double((double)values[i] * 256.0), "element %d (seed %u)", i, unit_seed());
}

Test(scales, sub_grid_and_four_d_layout) {
  /* a 4-D [3,1,4,1] grid is laid out as the 2-D [3,4] one; blocks [1..2] x [2..3] */
  float values[12];
  for (int i = 0; i < 12; i++) values[i] = (float)(i + 1) / 1024.0f;
  volt8_st_tensor tensor = grid_tensor(VOLT8_ST_F32, values, 3, 4);
  tensor.rank = 4;
  tensor.shape[0] = 3, tensor.shape[1] = 1, tensor.shape[2] = 4, tensor.shape[3] = 1;
  cr_assert_eq(volt8_scale_grid_cols(&tensor), 4);
  uint16_t out[4];
  double error = 0.0;
  cr_assert_eq(volt8_scales_convert(NULL, &tensor, 0, 1, 2, 2, 2, NULL, out, &error), VOLT8_OK);
  int picks[4] = {6, 7, 10, 11};
  for (int i = 0; i < 4; i++) cr_assert_eq(volt8_half_to_double(out[i]), (double)(picks[i] + 1) / 4.0);
}

/* ---- rejections ---- */

Test(scales, each_bad_scale_names_tensor_expert_and_block) {
  struct { float value; float block_max; const char *fragment; } bad[] = {
      {0.0f, 1.0f, "is zero"},         {-0.0f, 1.0f, "is zero"},        {-1e-3f, 1.0f, "is negative"},
      {NAN, 1.0f, "is NaN"},           {INFINITY, 1.0f, "is infinite"}, {256.0f, 1.0f, "overflows FP16"},
      {1e-7f, 1.0f, "underflows"},     {1e-40f, 1.0f, "underflows"},    {200.0f, 448.0f, "largest weight"},
      {146.5f, 448.0f, "largest weight"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    float values[9];
    for (int j = 0; j < 9; j++) values[j] = 1.0f / 512.0f;
    values[1 * 3 + 2] = bad[i].value;
    float block_max[4] = {bad[i].block_max, bad[i].block_max, bad[i].block_max, bad[i].block_max};
    volt8_st_tensor tensor = grid_tensor(VOLT8_ST_F32, values, 3, 3);
    uint16_t out[4];
    double error = 0.0;
    volt8_status status = volt8_scales_convert(NULL, &tensor, 5, 1, 2, 1, 2, block_max, out, &error);
    const char *message = volt8_last_error(NULL);
    cr_assert_eq(status, VOLT8_ERR_SCALE_RANGE, "case %zu (%g): %s", i, (double)bad[i].value, message);
    cr_assert(strstr(message, "unit.safetensors") && strstr(message, tensor.name) && strstr(message, "expert 5") &&
                  strstr(message, "block [1, 2]") && strstr(message, bad[i].fragment),
              "case %zu: %s", i, message);
  }
  /* near the edges: 146 x 448 = 65408 fits, and 2^-22 x 2^8 is the smallest FP16 normal */
  float edges[2] = {146.0f, (float)ldexp(1.0, -22)};
  float block_max[2] = {448.0f, 448.0f};
  volt8_st_tensor tensor = grid_tensor(VOLT8_ST_F32, edges, 1, 2);
  uint16_t out[2];
  double error = 0.0;
  cr_assert_eq(volt8_scales_convert(NULL, &tensor, 5, 0, 1, 0, 2, block_max, out, &error), VOLT8_OK, "%s",
               volt8_last_error(NULL));
}

Test(scales, block_max_follows_the_original_grid) {
  /* 40 staged rows that are rows 100..139 of the original: blocks 0 (rows 100..127) and 1 (128..139) */
  enum { ROWS = 40, COLS = 300 };
  static uint8_t codes[ROWS][COLS];
  memset(codes, 0x01, sizeof codes);
  codes[27][5] = 0xFE;    /* row 127, block [0, 0]: -448 */
  codes[28][130] = 0x78;  /* row 128, block [1, 1]: 256 */
  codes[39][299] = 0x38;  /* row 139, block [1, 2]: 1 */
  float block_max[2 * 3];
  volt8_st_tensor weight = grid_tensor(VOLT8_ST_F8_E4M3, codes, ROWS, COLS);
  cr_assert_eq(volt8_codes_block_max(NULL, &weight, 3, &codes[0][0], ROWS, COLS, 100, 0, 128, 128, block_max), VOLT8_OK);
  float expected[6] = {448.0f, volt8_e4m3_to_float(0x01), volt8_e4m3_to_float(0x01),
                       volt8_e4m3_to_float(0x01), 256.0f, 1.0f};
  for (int i = 0; i < 6; i++) cr_assert_eq(block_max[i], expected[i], "block %d: %g", i, (double)block_max[i]);
  codes[30][200] = 0xFF;
  volt8_status status = volt8_codes_block_max(NULL, &weight, 3, &codes[0][0], ROWS, COLS, 100, 0, 128, 128, block_max);
  cr_assert_eq(status, VOLT8_ERR_FORMAT);
  cr_assert(strstr(volt8_last_error(NULL), "weight [130, 200]") && strstr(volt8_last_error(NULL), "expert 3") &&
                strstr(volt8_last_error(NULL), "scale block [1, 1]") && strstr(volt8_last_error(NULL), "0xFF"),
            "%s", volt8_last_error(NULL));
}

/* ---- whole loads ---- */

static const char *const scale_cases[] = {"scale_zero",          "scale_negative",       "scale_nan",
                                          "scale_infinite",      "scale_overflow",       "scale_subnormal",
                                          "scale_underflow_zero", "scale_bf16_overflow", "scale_times_weight",
                                          "nan_code"};
#define SCALE_CASES (sizeof scale_cases / sizeof scale_cases[0])

ParameterizedTestParameters(scales, checkpoint_rejected_and_nothing_held) {
  static int indices[SCALE_CASES];
  for (size_t i = 0; i < SCALE_CASES; i++) indices[i] = (int)i;
  return cr_make_param_array(int, indices, SCALE_CASES);
}

ParameterizedTest(int *index, scales, checkpoint_rejected_and_nothing_held) {
  const char *name = scale_cases[*index];
  cJSON *root = manifest();
  const cJSON *entry = manifest_case(root, "invalid", name);
  char dir[4096];
  fixture(name, dir, sizeof dir);
  volt8_ctx_options ctx_options = VOLT8_CTX_OPTIONS_INIT;
  ctx_options.device = -1;
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&ctx_options, &ctx), VOLT8_OK);
  int64_t held = volt8_checkpoint_live_allocations();
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = dir;
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  expect_failure(entry, name, volt8_plan(ctx, &options, &plan), volt8_last_error(ctx));
  cr_assert_eq(volt8_checkpoint_live_allocations(), held, "case %s: the plan left allocations behind", name);
  /* rank 1 of 2 holds the bad block (rows or columns 128..255) and fails the same way, after expert 0 */
  options.tp_size = 2;
  options.tp_rank = 1;
  volt8_host_checkpoint *host = NULL;
  expect_failure(entry, name, volt8_checkpoint_load_host(ctx, &options, &host), volt8_last_error(ctx));
  cr_assert_null(host);
  cr_assert_eq(volt8_checkpoint_live_allocations(), held, "case %s: the load left allocations behind", name);
  volt8_ctx_destroy(ctx);
  cJSON_Delete(root);
}

Test(scales, f32_checkpoint_reports_rounding) {
  char dir[4096];
  fixture("scales_f32_valid", dir, sizeof dir);
  volt8_ctx_options ctx_options = VOLT8_CTX_OPTIONS_INIT;
  ctx_options.device = -1;
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&ctx_options, &ctx), VOLT8_OK);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = dir;
  volt8_load_report plan_validation = VOLT8_LOAD_REPORT_INIT;
  options.report = &plan_validation;
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_str_eq(plan.scale_dtype, "F32");
  cr_assert(plan.scale_max_relative_error > 0.0 && plan.scale_max_relative_error <= ldexp(1.0, -11), "%g",
            plan.scale_max_relative_error);
  cr_assert_eq(plan_validation.scale_max_relative_error, plan.scale_max_relative_error);
  volt8_load_report load = VOLT8_LOAD_REPORT_INIT;
  options.report = &load;
  volt8_host_checkpoint *host = NULL;
  cr_assert_eq(volt8_checkpoint_load_host(ctx, &options, &host), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(load.scale_max_relative_error, plan.scale_max_relative_error, "tp 1 sees every block the plan saw");
  cr_assert_eq(host->report.scale_max_relative_error, load.scale_max_relative_error);
  cr_log_info("F32 scales: largest relative FP16 rounding error %.3g (seed %s)", load.scale_max_relative_error, fixture_seed());
  volt8_host_checkpoint_free(host);
  volt8_ctx_destroy(ctx);
}
