/* The safetensors reader: files written by the safetensors package open and tile; each rule of
 * the format, broken in a copy of such a file (tests/fixtures/make_checkpoints.py), is rejected
 * with a message naming the file and the tensor, and leaves no mapping behind. */
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
#include "checkpoint/safetensors.h"

#include "checkpoint_fixture.h"

CHECKPOINT_FIXTURES("files", "index")

/* ---- valid files ---- */

TestSuite(safetensors, .timeout = 120);

static int compare_data(const void *a, const void *b) {
  const volt8_st_tensor *left = *(const volt8_st_tensor *const *)a, *right = *(const volt8_st_tensor *const *)b;
  return left->data < right->data ? -1 : left->data > right->data;
}

Test(safetensors, package_file_opens_sorted_and_tiled) {
  char path[4096];
  fixture("tiny_valid/model.safetensors", path, sizeof path);
  int64_t mappings = volt8_st_live_mappings();
  volt8_st_file *file = NULL;
  volt8_status status = volt8_st_file_open(NULL, path, &file);
  cr_assert_eq(status, VOLT8_OK, "%s", volt8_last_error(NULL));
  cr_assert_eq(volt8_st_live_mappings(), mappings + 1);
  size_t count = volt8_st_file_count(file);
  cr_assert_eq(count, 3 * 3 * 2 + 1, "3 experts x 3 weights and scales, plus one empty tensor; got %zu", count);
  const volt8_st_tensor *ordered[32];
  for (size_t i = 0; i < count; i++) {
    ordered[i] = volt8_st_file_tensor(file, i);
    if (i) cr_assert(strcmp(ordered[i - 1]->name, ordered[i]->name) < 0, "names not sorted at %zu", i);
  }
  qsort(ordered, count, sizeof ordered[0], compare_data);
  for (size_t i = 1; i < count; i++)
    cr_assert_eq(ordered[i - 1]->data + ordered[i - 1]->bytes, ordered[i]->data, "tensors do not tile at %s",
                 ordered[i]->name);
  const volt8_st_tensor *gate = volt8_st_file_find(file, "mtp.layers.0.mlp.experts.1.gate_proj.weight");
  cr_assert_not_null(gate);
  cr_assert(gate->dtype == VOLT8_ST_F8_E4M3 && gate->rank == 2 && gate->shape[0] == 256 && gate->shape[1] == 256 &&
            gate->bytes == 65536 && strcmp(gate->file, path) == 0);
  const volt8_st_tensor *scale = volt8_st_file_find(file, "mtp.layers.0.mlp.experts.1.gate_proj.weight_scale_inv");
  cr_assert(scale && scale->dtype == VOLT8_ST_BF16 && scale->shape[0] == 2 && scale->shape[1] == 2 && scale->bytes == 8);
  const volt8_st_tensor *empty = volt8_st_file_find(file, "empty");
  cr_assert(empty && empty->rank == 2 && empty->shape[0] == 0 && empty->shape[1] == 4 && empty->bytes == 0);
  cr_assert_null(volt8_st_file_find(file, "mtp.layers.0.mlp.experts.9.gate_proj.weight"));
  volt8_st_file_close(file);
  cr_assert_eq(volt8_st_live_mappings(), mappings);
}

Test(safetensors, index_opens_shards_on_first_use) {
  char dir[4096];
  fixture("index_valid", dir, sizeof dir);
  volt8_st_set *set = NULL;
  cr_assert_eq(volt8_st_set_open(NULL, dir, &set), VOLT8_OK, "%s", volt8_last_error(NULL));
  int64_t mappings = volt8_st_live_mappings();
  cr_assert_eq(volt8_st_set_count(set), 18);
  const volt8_st_tensor *first = NULL, *second = NULL;
  /* the fixture deals names round robin over two shards, so neighbours in name order differ */
  cr_assert_eq(volt8_st_set_find(NULL, set, volt8_st_set_name(set, 0), &first), VOLT8_OK, "%s", volt8_last_error(NULL));
  cr_assert_eq(volt8_st_live_mappings(), mappings + 1);
  cr_assert_eq(volt8_st_set_find(NULL, set, volt8_st_set_name(set, 1), &second), VOLT8_OK, "%s", volt8_last_error(NULL));
  cr_assert_eq(volt8_st_live_mappings(), mappings + 2);
  cr_assert_str_neq(first->file, second->file);
  const volt8_st_tensor *missing = NULL;
  cr_assert_eq(volt8_st_set_find(NULL, set, "model.norm.weight", &missing), VOLT8_ERR_NOT_FOUND);
  cr_assert(strstr(volt8_last_error(NULL), "model.norm.weight"));
  volt8_st_set_close(set);
  cr_assert_eq(volt8_st_live_mappings(), mappings);
}

Test(safetensors, dtypes_and_float_decoding) {
  struct { const char *name; int32_t bits; volt8_st_dtype dtype; } known[] = {
      {"F8_E4M3", 8, VOLT8_ST_F8_E4M3}, {"BF16", 16, VOLT8_ST_BF16}, {"F16", 16, VOLT8_ST_F16},
      {"F32", 32, VOLT8_ST_F32},        {"F4", 4, VOLT8_ST_F4},     {"F6_E3M2", 6, VOLT8_ST_F6_E3M2},
      {"U64", 64, VOLT8_ST_U64},        {"F8_E8M0", 8, VOLT8_ST_F8_E8M0}};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
    cr_assert_str_eq(volt8_st_dtype_name(known[i].dtype), known[i].name);
    cr_assert_eq(volt8_st_dtype_bits(known[i].dtype), known[i].bits, "%s", known[i].name);
  }
  /* unaligned: element 1 of each starts at an odd address */
  uint8_t bytes[16] = {0};
  uint16_t half = 0x3E00 /* 1.5 */, bf16 = 0xC040 /* -3 */;
  float single = 0.1f;
  memcpy(bytes + 3, &half, 2);
  cr_assert_eq(volt8_st_float_at(VOLT8_ST_F16, bytes + 1, 1), 1.5);
  memcpy(bytes + 3, &bf16, 2);
  cr_assert_eq(volt8_st_float_at(VOLT8_ST_BF16, bytes + 1, 1), -3.0);
  memcpy(bytes + 5, &single, 4);
  cr_assert_eq(volt8_st_float_at(VOLT8_ST_F32, bytes + 1, 1), (double)0.1f);
  cr_assert(isnan(volt8_st_float_at(VOLT8_ST_I32, bytes, 0)));
}

/* ---- broken files: one rule each ---- */

static const char *const file_rules[] = {
    "file_too_short",     "header_too_large",    "header_past_end",     "not_utf8",         "not_json",
    "not_object_start",   "trailing_characters", "control_character",   "nul_in_name",      "duplicate_name",
    "unknown_dtype",      "size_mismatch",       "negative_dimension",  "fractional_dimension", "element_overflow",
    "offsets_reversed",   "offsets_count",       "metadata_not_string", "hole",             "overlap",
    "trailing_bytes",     "truncated"};
#define FILE_RULES (sizeof file_rules / sizeof file_rules[0])

ParameterizedTestParameters(safetensors, file_rule) {
  static int indices[FILE_RULES];
  for (size_t i = 0; i < FILE_RULES; i++) indices[i] = (int)i;
  return cr_make_param_array(int, indices, FILE_RULES);
}

ParameterizedTest(int *index, safetensors, file_rule) {
  const char *name = file_rules[*index];
  cJSON *root = manifest();
  char relative[256], path[4096];
  snprintf(relative, sizeof relative, "%s/model.safetensors", name);
  fixture(relative, path, sizeof path);
  int64_t mappings = volt8_st_live_mappings();
  volt8_st_file *file = NULL;
  volt8_status status = volt8_st_file_open(NULL, path, &file);
  cr_assert_null(file, "case %s: a file came back", name);
  expect_failure(manifest_case(root, "invalid", name), name, status, volt8_last_error(NULL));
  cr_assert_eq(volt8_st_live_mappings(), mappings, "case %s: a mapping stayed behind", name);
  cJSON_Delete(root);
}

/* ---- broken indexes ---- */

static const char *const index_rules[] = {"index_parent_dir", "index_absolute", "index_nul", "index_missing_shard",
                                          "index_wrong_shard", "duplicate_across_files"};
#define INDEX_RULES (sizeof index_rules / sizeof index_rules[0])

ParameterizedTestParameters(safetensors, index_rule) {
  static int indices[INDEX_RULES];
  for (size_t i = 0; i < INDEX_RULES; i++) indices[i] = (int)i;
  return cr_make_param_array(int, indices, INDEX_RULES);
}

/* Opens the folder and looks up every name, as a loader touching all tensors would. */
ParameterizedTest(int *index, safetensors, index_rule) {
  const char *name = index_rules[*index];
  cJSON *root = manifest();
  char dir[4096];
  fixture(name, dir, sizeof dir);
  int64_t mappings = volt8_st_live_mappings();
  volt8_st_set *set = NULL;
  volt8_status status = volt8_st_set_open(NULL, dir, &set);
  for (size_t i = 0; status == VOLT8_OK && i < volt8_st_set_count(set); i++) {
    const volt8_st_tensor *tensor = NULL;
    status = volt8_st_set_find(NULL, set, volt8_st_set_name(set, i), &tensor);
  }
  expect_failure(manifest_case(root, "invalid", name), name, status, volt8_last_error(NULL));
  volt8_st_set_close(set);
  cr_assert_eq(volt8_st_live_mappings(), mappings, "case %s: a mapping stayed behind", name);
  cJSON_Delete(root);
}

/* The same rules stop a whole load, which then holds nothing. */
Test(safetensors, broken_file_stops_plan_and_load) {
  cJSON *root = manifest();
  const char *cases[] = {"truncated", "index_wrong_shard"};
  volt8_ctx_options ctx_options = VOLT8_CTX_OPTIONS_INIT;
  ctx_options.device = -1;
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&ctx_options, &ctx), VOLT8_OK);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char dir[4096];
    fixture(cases[i], dir, sizeof dir);
    int64_t held = volt8_checkpoint_live_allocations();
    volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
    options.checkpoint_dir = dir;
    volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
    expect_failure(manifest_case(root, "invalid", cases[i]), cases[i], volt8_plan(ctx, &options, &plan),
                   volt8_last_error(ctx));
    volt8_host_checkpoint *host = (volt8_host_checkpoint *)1;
    expect_failure(manifest_case(root, "invalid", cases[i]), cases[i], volt8_checkpoint_load_host(ctx, &options, &host),
                   volt8_last_error(ctx));
    cr_assert_null(host);
    cr_assert_eq(volt8_checkpoint_live_allocations(), held, "case %s: allocations stayed behind", cases[i]);
  }
  volt8_ctx_destroy(ctx);
  cJSON_Delete(root);
}
