/* Tensor-parallel sharding without padding: the slice arithmetic, and every rank of every native
 * fixture checkpoint (tp 1/2/4/8) byte for byte against numpy slicing of the same tensors. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/parameterized.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "core/ctx_internal.h"
#include "moe/kernels/moe_layout.h"
#include "checkpoint/shard.h"

#include "checkpoint_fixture.h"
#include "test_support.h"

CHECKPOINT_FIXTURES("native")

TestSuite(shard, .timeout = 300);

/* ---- slice arithmetic ---- */

Test(shard, reference_model_offsets) {
  struct { int32_t tp, size; int32_t offsets[8]; } expected[] = {
      {1, 640, {0}}, {2, 320, {0, 64}}, {4, 160, {0, 32, 64, 96}}, {8, 80, {0, 80, 32, 112, 64, 16, 96, 48}}};
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
    for (int32_t rank = 0; rank < expected[i].tp; rank++) {
      volt8_shard shard;
      cr_assert_eq(volt8_shard_plan(NULL, 640, expected[i].tp, rank, VOLT8_ROUTE_NATIVE, 128, &shard), VOLT8_OK, "%s",
                   volt8_last_error(NULL));
      cr_assert(shard.intermediate == expected[i].size && shard.start == rank * expected[i].size &&
                    shard.offset == expected[i].offsets[rank] && shard.first_block == shard.start / 128,
                "tp %d rank %d: I %d start %d offset %d first block %d", expected[i].tp, rank, shard.intermediate,
                shard.start, shard.offset, shard.first_block);
      volt8_moe_shape shape;
      volt8_shard_shape(&shard, 2560, 512, &shape);
      volt8_moe_dims dims;
      cr_assert_eq(volt8_moe_dims_compute(NULL, &shape, &dims), VOLT8_OK, "%s", volt8_last_error(NULL));
      cr_assert_eq(dims.g13, (shard.offset + shard.intermediate + 127) / 128);
    }
  }
  volt8_shard online;
  cr_assert_eq(volt8_shard_plan(NULL, 640, 4, 3, VOLT8_ROUTE_ONLINE, 1, &online), VOLT8_OK);
  cr_assert(online.start == 480 && online.offset == 0 && online.first_block == 0 && online.block_n == 1);
}

Test(shard, rejects_what_cannot_be_split) {
  volt8_shard shard;
  struct { int32_t full, tp, rank, route, block_n; const char *fragment; } bad[] = {
      {640, 3, 0, VOLT8_ROUTE_NATIVE, 128, "does not divide"},
      {640, 64, 0, VOLT8_ROUTE_NATIVE, 128, "multiple of 16"},
      {648, 1, 0, VOLT8_ROUTE_NATIVE, 128, "multiple of 16"},
      {640, 4, 4, VOLT8_ROUTE_NATIVE, 128, "outside"},
      {640, 4, -1, VOLT8_ROUTE_NATIVE, 128, "outside"},
      {640, 4, 0, VOLT8_ROUTE_NATIVE, 1, "128-row blocks"},
      {640, 4, 0, VOLT8_ROUTE_ONLINE, 64, "1 or 128"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    volt8_status status = volt8_shard_plan(NULL, bad[i].full, bad[i].tp, bad[i].rank, bad[i].route, bad[i].block_n, &shard);
    cr_assert_eq(status, VOLT8_ERR_INVALID_ARGUMENT, "case %zu", i);
    cr_assert(strstr(volt8_last_error(NULL), bad[i].fragment), "case %zu: %s", i, volt8_last_error(NULL));
  }
}

Test(shard, copies_rows_and_columns_of_any_element_size) {
  enum { ROWS = 6, FULL = 64, COLS = 5 };
  uint16_t matrix[ROWS][FULL];
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < FULL; c++) matrix[r][c] = (uint16_t)(r * 1000 + c);
  volt8_shard shard;
  cr_assert_eq(volt8_shard_plan(NULL, FULL, 4, 2, VOLT8_ROUTE_NATIVE, 128, &shard), VOLT8_OK);
  uint16_t columns[ROWS][16];
  volt8_shard_copy_columns((const uint8_t *)matrix, ROWS, 2, &shard, (uint8_t *)columns);
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < 16; c++) cr_assert_eq(columns[r][c], matrix[r][32 + c], "column copy at [%d, %d]", r, c);
  uint16_t tall[FULL][COLS], rows[16][COLS];
  for (int r = 0; r < FULL; r++)
    for (int c = 0; c < COLS; c++) tall[r][c] = (uint16_t)(r * 10 + c);
  volt8_shard_copy_rows((const uint8_t *)tall, COLS, 2, &shard, (uint8_t *)rows);
  cr_assert_eq(memcmp(rows, tall[32], sizeof rows), 0);
}

/* ---- every rank of every native fixture, against numpy ---- */

static const char *const native_cases[] = {"modelopt_mixed_indexed", "fp8_runtime_names", "modelopt_4d_hf_quant_config",
                                           "real_shape", "separate_draft"};
#define NATIVE_CASES (sizeof native_cases / sizeof native_cases[0])

ParameterizedTestParameters(shard, native_ranks_match_numpy) {
  static int indices[NATIVE_CASES];
  for (size_t i = 0; i < NATIVE_CASES; i++) indices[i] = (int)i;
  return cr_make_param_array(int, indices, NATIVE_CASES);
}

static void compare_array(const char *name, const char *case_name, int32_t tp, int32_t rank, const char *array,
                          const void *actual, size_t actual_bytes) {
  char relative[512], path[4096];
  snprintf(relative, sizeof relative, "expected/%s/tp%d_rank%d/%s.bin", case_name, tp, rank, array);
  fixture(relative, path, sizeof path);
  size_t bytes = 0;
  uint8_t *expected = test_read_whole(path, &bytes);
  cr_assert_eq(bytes, actual_bytes, "%s tp %d rank %d %s: %zu bytes, numpy has %zu", name, tp, rank, array, actual_bytes,
               bytes);
  const uint8_t *got = actual;
  for (size_t i = 0; i < bytes; i++)
    cr_assert_eq(got[i], expected[i], "%s tp %d rank %d %s: byte %zu is 0x%02x, numpy 0x%02x (seed %s)", name, tp, rank,
                 array, i, got[i], expected[i], fixture_seed());
  free(expected);
}

ParameterizedTest(int *index, shard, native_ranks_match_numpy) {
  const char *name = native_cases[*index];
  cJSON *root = manifest();
  const cJSON *entry = manifest_case(root, "valid", name);
  char dir[4096], draft[4096];
  fixture(cJSON_GetObjectItemCaseSensitive(entry, "dir")->valuestring, dir, sizeof dir);
  const cJSON *draft_dir = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(entry, "options"), "draft");
  if (draft_dir) fixture(draft_dir->valuestring, draft, sizeof draft);
  int32_t hidden = cJSON_GetObjectItemCaseSensitive(entry, "hidden")->valueint;
  int32_t full = cJSON_GetObjectItemCaseSensitive(entry, "intermediate")->valueint;
  int32_t experts = cJSON_GetObjectItemCaseSensitive(entry, "experts")->valueint;
  const cJSON *tps = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(entry, "tps"), "128");
  volt8_ctx_options ctx_options = VOLT8_CTX_OPTIONS_INIT;
  ctx_options.device = -1;
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&ctx_options, &ctx), VOLT8_OK);
  int64_t held = volt8_checkpoint_live_allocations();
  for (const cJSON *tp_item = tps->child; tp_item; tp_item = tp_item->next) {
    int32_t tp = tp_item->valueint;
    for (int32_t rank = 0; rank < tp; rank++) {
      volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
      options.checkpoint_dir = dir;
      options.draft_checkpoint_dir = draft_dir ? draft : NULL;
      options.tp_size = tp;
      options.tp_rank = rank;
      volt8_host_checkpoint *host = NULL;
      volt8_status status = volt8_checkpoint_load_host(ctx, &options, &host);
      cr_assert_eq(status, VOLT8_OK, "%s tp %d rank %d: %s", name, tp, rank, volt8_last_error(ctx));
      const volt8_moe_shape *shape = &host->shape;
      int32_t size = full / tp;
      cr_assert(shape->hidden == hidden && shape->intermediate == size && shape->num_experts == experts &&
                    shape->block_n == 128 && shape->block_k == 128 && shape->intermediate_offset == rank * size % 128,
                "%s tp %d rank %d: shape H %d I %d E %d offset %d", name, tp, rank, shape->hidden, shape->intermediate,
                shape->num_experts, shape->intermediate_offset);
      cr_assert_eq(host->report.route, VOLT8_ROUTE_NATIVE);
      volt8_moe_dims dims;
      cr_assert_eq(volt8_moe_dims_compute(ctx, shape, &dims), VOLT8_OK);
      compare_array(name, name, tp, rank, "w13", host->experts.w13, (size_t)(dims.w13_bytes_per_expert * experts));
      compare_array(name, name, tp, rank, "s13", host->experts.s13, (size_t)(dims.s13_elems_per_expert * experts * 2));
      compare_array(name, name, tp, rank, "w2", host->experts.w2, (size_t)(dims.w2_bytes_per_expert * experts));
      compare_array(name, name, tp, rank, "s2", host->experts.s2, (size_t)(dims.s2_elems_per_expert * experts * 2));
      volt8_host_checkpoint_free(host);
      cr_assert_eq(volt8_checkpoint_live_allocations(), held, "%s tp %d rank %d: allocations stayed behind", name, tp, rank);
    }
  }
  volt8_ctx_destroy(ctx);
  cJSON_Delete(root);
}
