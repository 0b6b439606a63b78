/* Tuning tables (names, parsing, lookup order, nearest M, warnings, dispatch), the tuner with a
 * fake timer (candidates, table writing, merging), the derived sm_70 model, the shipped tables,
 * and the bench's and tuner's argument parsing and report shapes. No GPU. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include "test_support.h"

#include <cjson/cJSON.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moe/kernels/catalogue.h"
#include "core/ctx_internal.h"
#include "dispatch/dispatch.h"
#include "core/embedded_files.h"
#include "core/sha256.h"
#include "dispatch/tuning.h"
#include "dispatch/tuning_shape.h"

/* The bench and tuner suites need bench/ and tuning/ (configured unless VOLT8_BUILD_BENCH is off). */
#if __has_include("tuner.h")
#define HAVE_BENCH 1
#include "baseline_fp16.h"
#include "bench_gpu.h"
#include "bench_options.h"
#include "bench_problem.h"
#include "bench_report.h"
#include "derive_model.h"
#include "derive_occupancy.h"
#include "table_io.h"
#include "tune_run.h"
#include "tuner.h"
#endif

#ifndef VOLT8_SOURCE_DIR
#error "VOLT8_SOURCE_DIR must name the source tree (tests/CMakeLists.txt defines it)"
#endif

#define REFERENCE_GATE_UP_NAME "op=gate_up,N=320,K=2560,block=128x128,arch=sm_90,device=unknown.json"
#define REFERENCE_DOWN_NAME "op=down,N=2560,K=160,block=128x128,arch=sm_90,device=unknown.json"

/* ---- fixtures ---- */

static char temp_dir[4096];

static void make_temp_dir(void) {
  test_make_temp_dir(temp_dir, sizeof temp_dir, "volt8_tuning");
  volt8_tuning_warnings_reset();
  unsetenv(VOLT8_TUNING_DIR_ENV);
}

static void remove_temp_dir(void) {
  test_remove_tree(temp_dir);
  temp_dir[0] = '\0';
}

static volt8_moe_shape reference_shape(void) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  return shape;
}

static char *read_text(const char *path) {
  FILE *file = fopen(path, "rb");
  if (!file) return NULL;
  fseek(file, 0, SEEK_END);
  long size = ftell(file);
  fseek(file, 0, SEEK_SET);
  char *text = calloc(1, (size_t)size + 1);
  cr_assert_eq(fread(text, 1, (size_t)size, file), (size_t)size);
  fclose(file);
  return text;
}

static int32_t warning_count(char *buf, size_t size) {
  int32_t count = -1;
  cr_assert_eq(volt8_tuning_warnings(buf, size, &count), VOLT8_OK);
  return count;
}

/* The first and last of the op's variants for the reference shape that the context's arch does not
 * emulate (the tuner's). */
static void listed_variants(volt8_ctx *ctx, volt8_op op, char *first, char *last) {
  volt8_variant *variants = NULL;
  int32_t count = 0, matched = 0;
  cr_assert_eq(volt8_catalogue_list(ctx, &(volt8_moe_shape)VOLT8_MOE_SHAPE_INIT, ctx->target_arch, &variants, &count),
               VOLT8_OK, "%s", volt8_last_error(ctx));
  for (int32_t i = 0; i < count; i++) {
    if (variants[i].op != op || volt8_variant_emulated(&variants[i], ctx->target_arch)) continue;
    if (matched++ == 0) volt8_variant_format(&variants[i], first, VOLT8_VARIANT_NAME_BYTES);
    volt8_variant_format(&variants[i], last, VOLT8_VARIANT_NAME_BYTES);
  }
  cr_assert_gt(matched, 1, "the code generator lists fewer than two %s variants", volt8_tuning_op_name(op));
  free(variants);
}

/* A choice's gate_up or down by name. */
static const char *name_of(const volt8_variant *variant, char buf[VOLT8_VARIANT_NAME_BYTES]) {
  volt8_variant_format(variant, buf, VOLT8_VARIANT_NAME_BYTES);
  return buf;
}

static volt8_tuning_table parse_written(const char *path, const char *op) {
  char *text = read_text(path);
  cr_assert_not_null(text, "no table at %s", path);
  volt8_tuning_table table;
  cr_assert_eq(volt8_tuning_table_parse(NULL, text, strlen(text), path, op, &table), VOLT8_OK, "%s",
               volt8_last_error(NULL));
  free(text);
  return table;
}

/* ---- names ---- */

TestSuite(tuning_names, .timeout = 60);

Test(tuning_names, table_name_of_the_reference_rank) {
  volt8_moe_shape shape = reference_shape();
  int32_t n = 0, k = 0;
  char name[VOLT8_TUNING_NAME_BYTES];
  cr_assert_eq(volt8_tuning_op_dims(NULL, &shape, VOLT8_OP_GATE_UP, &n, &k), VOLT8_OK);
  cr_assert(n == 320 && k == 2560, "gate_up N=%d K=%d", n, k);
  cr_assert_eq(volt8_tuning_table_name(NULL, "gate_up", n, k, 128, 128, 90, "NVIDIA_H200", name, sizeof name), VOLT8_OK);
  cr_assert_str_eq(name, "op=gate_up,N=320,K=2560,block=128x128,arch=sm_90,device=NVIDIA_H200.json");
  cr_assert_eq(volt8_tuning_op_dims(NULL, &shape, VOLT8_OP_DOWN, &n, &k), VOLT8_OK);
  cr_assert(n == 2560 && k == 160, "down N=%d K=%d", n, k);
  cr_assert_eq(volt8_tuning_op_dims(NULL, &shape, VOLT8_OP_ROUTE, &n, &k), VOLT8_ERR_INVALID_ARGUMENT);
  char small[16];
  cr_assert_eq(volt8_tuning_table_name(NULL, "gate_up", n, k, 128, 128, 90, "NVIDIA_H200", small, sizeof small),
               VOLT8_ERR_INVALID_ARGUMENT);
}

Test(tuning_names, device_tokens) {
  struct { const char *device, *token; } cases[] = {
      {"NVIDIA H200", "NVIDIA_H200"},
      {"Tesla V100-SXM2-32GB", "Tesla_V100-SXM2-32GB"},
      {"odd,name=x/y", "odd_name_x_y"},
      {"", "unknown"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char token[64];
    volt8_tuning_device_token(cases[i].device, token, sizeof token);
    cr_assert_str_eq(token, cases[i].token, "device \"%s\"", cases[i].device);
  }
}

/* ---- parsing ---- */

TestSuite(tuning_parse, .timeout = 60);

#define VALID_TABLE                                                                                                   \
  "{\"__metadata__\": {\"schema_version\": 1, \"top_k\": 10, \"measured\": true},"                                   \
  " \"8\": {\"variant\": \"gate_up.mma.bm16.bn16.w2.sk1\", \"forward_us\": 20.5},"                                   \
  " \"1\": \"gate_up.cc.bm1.bn4.w4.sk1.l32\","                                                                        \
  " \"64\": {\"variant\": \"gate_up.mma.bm32.bn32.w8.sk2\"}}"

Test(tuning_parse, valid_table_sorted_by_m) {
  volt8_tuning_table table;
  cr_assert_eq(volt8_tuning_table_parse(NULL, VALID_TABLE, strlen(VALID_TABLE), "valid", "gate_up", &table), VOLT8_OK,
               "%s", volt8_last_error(NULL));
  cr_assert_eq(table.count, 3);
  cr_assert_eq(table.top_k, 10);
  cr_assert_eq(table.measured, 1);
  int32_t expected_m[3] = {1, 8, 64};
  const char *expected[3] = {"gate_up.cc.bm1.bn4.w4.sk1.l32", "gate_up.mma.bm16.bn16.w2.sk1", "gate_up.mma.bm32.bn32.w8.sk2"};
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(table.entries[i].m, expected_m[i], "entry %d", i);
    cr_assert_str_eq(table.entries[i].variant, expected[i], "entry %d", i);
  }
  volt8_tuning_table_free(&table);
}

typedef struct malformed_case {
  const char *text;
  const char *message; /* a piece the error must contain */
} malformed_case;

Test(tuning_parse, malformed_tables_rejected_with_a_clear_error) {
  malformed_case cases[] = {
      {"{\"__metadata__\": {\"schema_version\": 1}, \"1\": ", "not valid JSON"},
      {"[1, 2]", "top level is not a JSON object"},
      {"{\"1\": \"gate_up.cc.bm1.bn4.w4.sk1.l32\"}", "no \"__metadata__\" object"},
      {"{\"__metadata__\": {}, \"1\": \"gate_up.cc.bm1.bn4.w4.sk1.l32\"}", "schema_version is missing"},
      {"{\"__metadata__\": {\"schema_version\": 2}, \"1\": \"gate_up.cc.bm1.bn4.w4.sk1.l32\"}", "schema_version 2"},
      {"{\"__metadata__\": {\"schema_version\": 1}, \"01\": \"gate_up.cc.bm1.bn4.w4.sk1.l32\"}", "key \"01\""},
      {"{\"__metadata__\": {\"schema_version\": 1}, \"abc\": \"gate_up.cc.bm1.bn4.w4.sk1.l32\"}", "key \"abc\""},
      {"{\"__metadata__\": {\"schema_version\": 1}, \"0\": \"gate_up.cc.bm1.bn4.w4.sk1.l32\"}", "key \"0\""},
      {"{\"__metadata__\": {\"schema_version\": 1}, \"-4\": \"gate_up.cc.bm1.bn4.w4.sk1.l32\"}", "key \"-4\""},
      {"{\"__metadata__\": {\"schema_version\": 1}, \"1\": 42}", "M=1 must be a variant name"},
      {"{\"__metadata__\": {\"schema_version\": 1}, \"1\": {\"time\": 1}}", "M=1 must be a variant name"},
      {"{\"__metadata__\": {\"schema_version\": 1}, \"1\": \"down.cc.bm1.bn32.w4.sk1.l4\"}", "not a gate_up variant"},
      {"{\"__metadata__\": {\"schema_version\": 1}, \"1\": \"Gate Up!\"}", "not a variant name"},
      {"{\"__metadata__\": {\"schema_version\": 1}, \"2\": \"gate_up.cc.bm1.bn4.w4.sk1.l32\", "
       "\"2\": \"gate_up.cc.bm2.bn4.w4.sk1.l32\"}", "names key \"2\" twice"},
      {"{\"__metadata__\": {\"schema_version\": 1}}", "holds no token counts"},
      {"{\"__metadata__\": {\"schema_version\": 1, \"top_k\": 0}, \"1\": \"gate_up.cc.bm1.bn4.w4.sk1.l32\"}", "top_k"},
      {"{\"__metadata__\": {\"schema_version\": 1, \"measured\": \"yes\"}, \"1\": \"gate_up.cc.bm1.bn4.w4.sk1.l32\"}",
       "measured must be true or false"},
  };
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    volt8_tuning_table table;
    volt8_status status = volt8_tuning_table_parse(ctx, cases[i].text, strlen(cases[i].text), "case.json", "gate_up", &table);
    cr_assert_eq(status, VOLT8_ERR_FORMAT, "case %zu (%s) parsed", i, cases[i].text);
    cr_assert_not_null(strstr(volt8_last_error(ctx), cases[i].message), "case %zu: \"%s\" lacks \"%s\"", i,
                       volt8_last_error(ctx), cases[i].message);
    cr_assert_not_null(strstr(volt8_last_error(ctx), "case.json"), "case %zu: the error does not name the table", i);
  }
  volt8_ctx_destroy(ctx);
}

/* ---- nearest M ---- */

TestSuite(tuning_nearest, .timeout = 60);

Test(tuning_nearest, nearest_token_count_ties_to_the_smaller) {
  volt8_tuning_entry entries[8];
  int32_t keys[8] = {1, 2, 4, 8, 16, 32, 64, 128};
  for (int i = 0; i < 8; i++) {
    entries[i].m = keys[i];
    snprintf(entries[i].variant, sizeof entries[i].variant, "gate_up.v%d", keys[i]);
  }
  volt8_tuning_table table = {VOLT8_TUNING_SCHEMA_VERSION, 0, -1, 8, entries, 0};
  struct { int32_t tokens, expected; } cases[] = {{1, 1}, {3, 2}, {5, 4}, {6, 4}, {7, 8}, {12, 8}, {13, 16},
                                                  {96, 64}, {97, 128}, {1000, 128}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const volt8_tuning_entry *entry = volt8_tuning_table_nearest(&table, cases[i].tokens, 10);
    cr_assert_eq(entry->m, cases[i].expected, "M=%d served by %d, expected %d", cases[i].tokens, entry->m,
                 cases[i].expected);
  }
  table.count = 0;
  cr_assert_null(volt8_tuning_table_nearest(&table, 4, 10));
}

Test(tuning_nearest, other_top_k_matched_by_routed_pairs) {
  volt8_tuning_entry entries[3] = {{1, "down.a"}, {8, "down.b"}, {64, "down.c"}};
  volt8_tuning_table table = {VOLT8_TUNING_SCHEMA_VERSION, 10, 1, 3, entries, 0};
  cr_assert_eq(volt8_tuning_table_nearest(&table, 16, 5)->m, 8, "16 tokens x 5 = 80 pairs = 8 x 10");
  cr_assert_eq(volt8_tuning_table_nearest(&table, 16, 10)->m, 8, "same top_k: by tokens");
  cr_assert_eq(volt8_tuning_table_nearest(&table, 2, 40)->m, 8, "80 pairs");
}

/* A table's range: from half its smallest M to its largest, in routed pairs at another top-k. */
Test(tuning_nearest, a_table_covers_half_its_smallest_m_to_its_largest) {
  volt8_tuning_entry entries[3] = {{256, "gate_up.a"}, {512, "gate_up.b"}, {4096, "gate_up.c"}};
  volt8_tuning_table table = {VOLT8_TUNING_SCHEMA_VERSION, 8, 1, 3, entries, 0};
  struct { int32_t tokens, top_k, covered; } cases[] = {{127, 8, 0}, {128, 8, 1}, {300, 8, 1}, {4096, 8, 1},
                                                        {4097, 8, 0}, {64, 16, 1}, {63, 16, 0}, {2048, 16, 1},
                                                        {2049, 16, 0}, {0, 8, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    cr_assert_eq(volt8_tuning_table_covers(&table, cases[i].tokens, cases[i].top_k), cases[i].covered, "M=%d top-k %d",
                 cases[i].tokens, cases[i].top_k);
  table.count = 0;
  cr_assert_not(volt8_tuning_table_covers(&table, 1, 8));
}

/* ---- lookup order and warnings ---- */

TestSuite(tuning_lookup, .init = make_temp_dir, .fini = remove_temp_dir, .timeout = 120);

static void table_text(char *buf, size_t size, const char *op, const char *m_key, const char *variant) {
  snprintf(buf, size, "{\"__metadata__\": {\"schema_version\": 1, \"top_k\": 10}, \"%s\": {\"variant\": \"%s.%s\"}}",
           m_key, op, variant);
}

Test(tuning_lookup, environment_directory_serves_the_nearest_m) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  volt8_moe_shape shape = reference_shape();
  test_write_text(temp_dir, REFERENCE_GATE_UP_NAME,
             "{\"__metadata__\": {\"schema_version\": 1}, \"1\": \"gate_up.x1\", \"16\": \"gate_up.x16\", "
             "\"128\": \"gate_up.x128\"}");
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  volt8_tuning_match match;
  cr_assert_eq(volt8_tuning_lookup(ctx, &shape, VOLT8_OP_GATE_UP, 12, 10, &match), VOLT8_OK);
  cr_assert_eq(match.source, VOLT8_TUNING_SOURCE_ENV_DIR);
  cr_assert_str_eq(match.variant, "gate_up.x16");
  cr_assert_eq(match.table_m, 16);
  cr_assert_not_null(strstr(match.origin, temp_dir));
  cr_assert_eq(volt8_tuning_lookup(ctx, &shape, VOLT8_OP_GATE_UP, 100, 10, &match), VOLT8_OK);
  cr_assert_str_eq(match.variant, "gate_up.x128");
  char text[4096];
  cr_assert_eq(warning_count(text, sizeof text), 0, "unexpected warnings: %s", text);
  volt8_ctx_destroy(ctx);
}

Test(tuning_lookup, device_table_before_any_device_table) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  volt8_moe_shape shape = reference_shape();
  char text[512];
  table_text(text, sizeof text, "down", "4", "any_device");
  test_write_text(temp_dir, "op=down,N=2560,K=160,block=128x128,arch=sm_90,device=any.json", text);
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  volt8_tuning_match match;
  cr_assert_eq(volt8_tuning_lookup(ctx, &shape, VOLT8_OP_DOWN, 4, 10, &match), VOLT8_OK);
  cr_assert_eq(match.source, VOLT8_TUNING_SOURCE_ENV_DIR);
  cr_assert_str_eq(match.variant, "down.any_device");
  table_text(text, sizeof text, "down", "4", "this_device");
  test_write_text(temp_dir, REFERENCE_DOWN_NAME, text);
  cr_assert_eq(volt8_tuning_lookup(ctx, &shape, VOLT8_OP_DOWN, 4, 10, &match), VOLT8_OK);
  cr_assert_str_eq(match.variant, "down.this_device");
  volt8_ctx_destroy(ctx);
}

Test(tuning_lookup, missing_table_is_the_heuristic_and_one_warning) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  volt8_moe_shape shape = reference_shape();
  shape.hidden = 1024; /* no table is built in for this */
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  volt8_tuning_match match;
  for (int32_t m = 1; m <= 64; m *= 2) {
    cr_assert_eq(volt8_tuning_lookup(ctx, &shape, VOLT8_OP_GATE_UP, m, 10, &match), VOLT8_OK);
    cr_assert_eq(match.source, VOLT8_TUNING_SOURCE_NONE);
    cr_assert_str_eq(match.variant, "");
  }
  char text[4096];
  cr_assert_eq(warning_count(text, sizeof text), 1, "warnings: %s", text);
  cr_assert_not_null(strstr(text, "op=gate_up,N=320,K=1024,block=128x128,arch=sm_90,device=unknown.json"), "%s", text);
  cr_assert_not_null(strstr(text, "heuristic"), "%s", text);
  cr_assert_str_eq(volt8_last_error(ctx), "", "a missing table is not an error of the context");
  volt8_ctx_destroy(ctx);
}

Test(tuning_lookup, corrupt_table_skipped_with_a_warning) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  volt8_moe_shape shape = reference_shape();
  shape.hidden = 1024;
  test_write_text(temp_dir, "op=gate_up,N=320,K=1024,block=128x128,arch=sm_90,device=unknown.json",
                  "{\"__metadata__\": {");
  char any_text[512];
  table_text(any_text, sizeof any_text, "gate_up", "2", "fallback");
  test_write_text(temp_dir, "op=gate_up,N=320,K=1024,block=128x128,arch=sm_90,device=any.json", any_text);
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  volt8_tuning_match match;
  cr_assert_eq(volt8_tuning_lookup(ctx, &shape, VOLT8_OP_GATE_UP, 2, 10, &match), VOLT8_OK);
  cr_assert_eq(match.source, VOLT8_TUNING_SOURCE_ENV_DIR, "the next table in the order serves");
  cr_assert_str_eq(match.variant, "gate_up.fallback");
  cr_assert_eq(volt8_tuning_lookup(ctx, &shape, VOLT8_OP_GATE_UP, 4, 10, &match), VOLT8_OK);
  char text[4096];
  cr_assert_eq(warning_count(text, sizeof text), 1, "warnings: %s", text);
  cr_assert_not_null(strstr(text, "device=unknown.json"), "%s", text);
  cr_assert_not_null(strstr(text, "not valid JSON"), "%s", text);
  volt8_ctx_destroy(ctx);
}

/* A $VOLT8_TUNING_DIR that is not a folder (missing, a file, a FIFO) is said once; the built-in table
 * still serves, and nothing is opened or waited on. */
Test(tuning_lookup, tuning_dir_that_is_not_a_folder_is_a_warning, .timeout = 20) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  volt8_moe_shape shape = reference_shape();
  char file[8192], fifo[8192];
  test_write_text(temp_dir, "plain", "{}");
  snprintf(file, sizeof file, "%s/plain", temp_dir);
  snprintf(fifo, sizeof fifo, "%s/fifo", temp_dir);
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  const char *dirs[3] = {"/nonexistent/volt8-tables", file, fifo};
  const char *whys[3] = {" (No such file or directory)", " (it is a regular file)", " (it is a FIFO)"};
  for (int i = 0; i < 3; i++) {
    volt8_tuning_warnings_reset();
    setenv(VOLT8_TUNING_DIR_ENV, dirs[i], 1);
    volt8_tuning_match match;
    for (int32_t m = 1; m <= 8; m *= 2) {
      cr_assert_eq(volt8_tuning_lookup(ctx, &shape, VOLT8_OP_GATE_UP, m, 10, &match), VOLT8_OK);
      cr_assert_eq(match.source, VOLT8_TUNING_SOURCE_BUILT_IN, "%s", dirs[i]);
    }
    char text[4096], expected[8400];
    cr_assert_eq(warning_count(text, sizeof text), 1, "%s: %s", dirs[i], text);
    snprintf(expected, sizeof expected, "VOLT8_TUNING_DIR=%s is not a directory%s: no table is read from it", dirs[i],
             whys[i]);
    cr_assert_not_null(strstr(text, expected), "%s", text);
  }
  unsetenv(VOLT8_TUNING_DIR_ENV);
  volt8_ctx_destroy(ctx);
}

Test(tuning_lookup, warnings_buffer_truncates_safely) {
  volt8_tuning_warn("a", "first warning with some length");
  volt8_tuning_warn("b", "second");
  volt8_tuning_warn("a", "the same key again is dropped");
  char tiny[8];
  int32_t count = 0;
  cr_assert_eq(volt8_tuning_warnings(tiny, sizeof tiny, &count), VOLT8_OK);
  cr_assert_eq(count, 2);
  cr_assert_eq(strlen(tiny), 7);
  cr_assert_eq(volt8_tuning_warnings(NULL, 0, &count), VOLT8_OK);
  cr_assert_eq(volt8_tuning_warnings(NULL, 4, &count), VOLT8_ERR_INVALID_ARGUMENT);
}

Test(tuning_lookup, built_in_derived_sm70_tables) {
  const char *path = "tuning/tables/op=gate_up,N=320,K=2560,block=128x128,arch=sm_70,device=any.json";
  if (!volt8_embedded_find(path)) cr_skip_test("the tuning tables are not built into this library yet (%s)", path);
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  volt8_moe_shape shape = reference_shape();
  volt8_tuning_match match;
  cr_assert_eq(volt8_tuning_lookup(ctx, &shape, VOLT8_OP_GATE_UP, 8, 10, &match), VOLT8_OK);
  cr_assert_eq(match.source, VOLT8_TUNING_SOURCE_BUILT_IN);
  cr_assert_not_null(strstr(match.origin, "built-in:"), "%s", match.origin);
  char text[512];
  table_text(text, sizeof text, "gate_up", "8", "from_the_environment");
  test_write_text(temp_dir, "op=gate_up,N=320,K=2560,block=128x128,arch=sm_70,device=any.json", text);
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  cr_assert_eq(volt8_tuning_lookup(ctx, &shape, VOLT8_OP_GATE_UP, 8, 10, &match), VOLT8_OK);
  cr_assert_eq(match.source, VOLT8_TUNING_SOURCE_ENV_DIR, "VOLT8_TUNING_DIR comes before the built-in tables");
  volt8_ctx_destroy(ctx);
}

Test(tuning_lookup, dispatch_follows_the_table) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  volt8_moe_shape shape = reference_shape();
  char first_gate_up[VOLT8_VARIANT_NAME_BYTES], last_gate_up[VOLT8_VARIANT_NAME_BYTES];
  char first_down[VOLT8_VARIANT_NAME_BYTES], last_down[VOLT8_VARIANT_NAME_BYTES];
  listed_variants(ctx, VOLT8_OP_GATE_UP, first_gate_up, last_gate_up);
  listed_variants(ctx, VOLT8_OP_DOWN, first_down, last_down);
  volt8_variant_choice heuristic, tuned;
  cr_assert_eq(volt8_dispatch_choose(ctx, &shape, 8, 10, &heuristic), VOLT8_OK, "%s", volt8_last_error(ctx));
  char text[512], name[VOLT8_VARIANT_NAME_BYTES], other[VOLT8_VARIANT_NAME_BYTES];
  const char *pick = strcmp(name_of(&heuristic.gate_up, name), last_gate_up) != 0 ? last_gate_up : first_gate_up;
  snprintf(text, sizeof text, "{\"__metadata__\": {\"schema_version\": 1}, \"8\": \"%s\"}", pick);
  test_write_text(temp_dir, REFERENCE_GATE_UP_NAME, text);
  test_write_text(temp_dir, REFERENCE_DOWN_NAME,
                  "{\"__metadata__\": {\"schema_version\": 1}, \"8\": \"down.not.offered\"}");
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  volt8_tuning_warnings_reset();
  cr_assert_eq(volt8_dispatch_choose(ctx, &shape, 8, 10, &tuned), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_str_eq(name_of(&tuned.gate_up, name), pick, "the table's gate_up serves");
  cr_assert_str_eq(name_of(&tuned.down, name), name_of(&heuristic.down, other),
                   "a variant the generator does not offer falls back to the heuristic");
  char warnings[4096];
  cr_assert_eq(warning_count(warnings, sizeof warnings), 1, "%s", warnings);
  cr_assert_not_null(strstr(warnings, "down.not.offered"), "%s", warnings);
  volt8_ctx_destroy(ctx);
}

/* ---- the shipped tables ---- */

/* The shape a table was made for, from its __metadata__. */
static volt8_moe_shape table_shape(const char *path) {
  char *text = read_text(path);
  cJSON *root = cJSON_Parse(text);
  cJSON *metadata = cJSON_GetObjectItem(root, "__metadata__");
  cJSON *shape_json = cJSON_GetObjectItem(metadata, "shape"), *block = cJSON_GetObjectItem(metadata, "block");
  cr_assert(cJSON_IsObject(shape_json) && cJSON_GetArraySize(block) == 2, "%s: __metadata__ lacks shape or block", path);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.hidden = cJSON_GetObjectItem(shape_json, "hidden")->valueint;
  shape.intermediate = cJSON_GetObjectItem(shape_json, "intermediate")->valueint;
  shape.num_experts = cJSON_GetObjectItem(shape_json, "num_experts")->valueint;
  shape.intermediate_offset = cJSON_GetObjectItem(shape_json, "intermediate_offset")->valueint;
  shape.block_n = cJSON_GetArrayItem(block, 0)->valueint;
  shape.block_k = cJSON_GetArrayItem(block, 1)->valueint;
  cJSON_Delete(root);
  free(text);
  return shape;
}

/* Every table in tuning/tables parses, names ops its file name names, and carries metadata. */
Test(tuning_parse, shipped_tables_are_valid) {
  glob_t found;
  int result = glob(VOLT8_SOURCE_DIR "/tuning/tables/*.json", 0, NULL, &found);
  if (result == GLOB_NOMATCH) cr_skip_test("no tables in tuning/tables");
  cr_assert_eq(result, 0);
  for (size_t i = 0; i < found.gl_pathc; i++) {
    const char *path = found.gl_pathv[i];
    const char *op = strstr(path, "op=gate_up,") ? "gate_up" : "down";
    cr_assert(strstr(path, "op=gate_up,") || strstr(path, "op=down,"), "%s names no op", path);
    volt8_tuning_table table = parse_written(path, op);
    cr_assert_gt(table.count, 0);
    cr_assert_neq(table.measured, -1, "%s does not say whether it was measured", path);
    if (strstr(path, "arch=sm_70,")) cr_assert_eq(table.measured, 0, "%s: no V100 measured the sm_70 tables", path);
    volt8_moe_shape shape = table_shape(path);
    /* The variants offered for the table's arch (sm_80+ families are not listed for sm_70). */
    const char *arch_field = strstr(path, "arch=sm_");
    cr_assert_not_null(arch_field, "%s names no arch", path);
    char arch[16];
    cr_assert_eq(sscanf(arch_field, "arch=%15[^,]", arch), 1, "%s", path);
    volt8_ctx *ctx = test_cpu_ctx(arch);
    char **names = NULL;
    int32_t count = 0;
    cr_assert_eq(volt8_codegen_list(ctx, &shape, &names, &count), VOLT8_OK, "%s", volt8_last_error(ctx));
    for (int32_t e = 0; e < table.count; e++) {
      int listed = 0;
      for (int32_t n = 0; n < count; n++) listed |= strcmp(names[n], table.entries[e].variant) == 0;
      cr_assert(listed, "%s: M=%d names %s, which the code generator no longer offers: regenerate the table", path,
                table.entries[e].m, table.entries[e].variant);
    }
    volt8_codegen_names_free(names, count);
    volt8_ctx_destroy(ctx);
    volt8_tuning_table_free(&table);
  }
  globfree(&found);
}

#ifdef HAVE_BENCH

/* ---- the tuner with a fake timer ---- */

TestSuite(tuner, .init = make_temp_dir, .fini = remove_temp_dir, .timeout = 120);

typedef struct fake_timer {
  char fastest[2][VOLT8_VARIANT_NAME_BYTES]; /* gate_up, down: the variants the fake makes fastest */
  const char *rejected_prefix;                /* candidates starting with this are "wrong" */
  int begun, ended, measured;
} fake_timer;

static volt8_status fake_begin(void *state, int32_t m) {
  ((fake_timer *)state)->begun++;
  return VOLT8_OK;
}

static void fake_end(void *state, int32_t m) { ((fake_timer *)state)->ended++; }

/* Deterministic times: 100 us, minus 50 for each fastest variant in the pair, plus a length term. */
static volt8_status fake_measure(void *state, int32_t m, const char *gate_up, const char *down, int32_t batches,
                                 tuner_measurement *out) {
  fake_timer *fake = state;
  fake->measured++;
  const char *names[2] = {gate_up, down};
  out->accepted = 1;
  out->relative_l2 = 1e-4;
  out->forward_us = 100.0 + 0.01 * (double)(strlen(gate_up) + strlen(down));
  for (int i = 0; i < 2; i++) {
    if (strcmp(names[i], fake->fastest[i]) == 0) out->forward_us -= 50.0;
    if (fake->rejected_prefix && strncmp(names[i], fake->rejected_prefix, strlen(fake->rejected_prefix)) == 0)
      out->accepted = 0;
  }
  if (!out->accepted) snprintf(out->reason, sizeof out->reason, "relative L2 1.0 against the reference");
  return VOLT8_OK;
}

static tuner_settings fake_settings(const int32_t *m_values, int32_t m_count, FILE *progress) {
  tuner_settings settings = {
      .shape = reference_shape(), .top_k = 10, .m_values = m_values, .m_count = m_count, .screen_batches = 2,
      .final_batches = 4, .finalists = 2, .out_dir = temp_dir, .arch = 90, .device = "Fake GPU",
      .device_token = "Fake_GPU", .method = "fake timer", .command = "volt8 tune --fake", .nvrtc_version = "13.0",
      .progress = progress, .progress_tty = 0};
  return settings;
}

Test(tuner, candidates_are_the_generators_variants_of_the_op) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  char **names = NULL, **all = NULL;
  int32_t count = 0, all_count = 0, expected = 0;
  cr_assert_eq(volt8_codegen_list(ctx, &(volt8_moe_shape)VOLT8_MOE_SHAPE_INIT, &all, &all_count), VOLT8_OK);
  int32_t emulated = 0;
  for (int32_t i = 0; i < all_count; i++) {
    expected += strncmp(all[i], "down.", 5) == 0 && strncmp(all[i], "down.mma.", 9) != 0;
    emulated += strncmp(all[i], "down.mma.", 9) == 0;
  }
  cr_assert_gt(emulated, 0, "the generator offers mma downs, which sm_90 emulates");
  cr_assert_eq(tuner_candidates(ctx, &(volt8_moe_shape)VOLT8_MOE_SHAPE_INIT, VOLT8_OP_DOWN, &names, &count), VOLT8_OK);
  cr_assert_eq(count, expected, "every down but the emulated mma family");
  cr_assert_gt(count, 1);
  for (int32_t i = 0; i < count; i++) cr_assert_eq(strncmp(names[i], "down.", 5), 0, "%s", names[i]);
  volt8_codegen_names_free(names, count);
  volt8_ctx *volta = test_cpu_ctx("sm_70");
  int32_t mma = 0;
  cr_assert_eq(tuner_candidates(volta, &(volt8_moe_shape)VOLT8_MOE_SHAPE_INIT, VOLT8_OP_DOWN, &names, &count), VOLT8_OK);
  for (int32_t i = 0; i < count; i++) mma += strncmp(names[i], "down.mma.", 9) == 0;
  cr_assert_gt(mma, 0, "sm_70 runs mma natively, so its downs are candidates there");
  volt8_ctx_destroy(volta);
  volt8_codegen_names_free(names, count);
  volt8_codegen_names_free(all, all_count);
  cr_assert_eq(tuner_candidates(ctx, &(volt8_moe_shape)VOLT8_MOE_SHAPE_INIT, VOLT8_OP_REDUCE, &names, &count),
               VOLT8_ERR_INVALID_ARGUMENT);
  volt8_ctx_destroy(ctx);
}

Test(tuner, writes_both_tables_with_metadata_and_progress) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  fake_timer fake = {0};
  char unused[VOLT8_VARIANT_NAME_BYTES];
  listed_variants(ctx, VOLT8_OP_GATE_UP, unused, fake.fastest[0]);
  listed_variants(ctx, VOLT8_OP_DOWN, fake.fastest[1], unused);
  fake.rejected_prefix = "gate_up.cc.bm1.";
  char *progress_text = NULL;
  size_t progress_size = 0;
  FILE *progress = open_memstream(&progress_text, &progress_size);
  int32_t m_values[2] = {1, 8};
  tuner_settings settings = fake_settings(m_values, 2, progress);
  tuner_backend backend = {&fake, 1, fake_begin, fake_measure, fake_end};
  tuner_summary summary;
  cr_assert_eq(tuner_run(ctx, &settings, &backend, &summary), VOLT8_OK, "%s", volt8_last_error(ctx));
  fclose(progress);
  cr_assert_eq(summary.m_done, 2);
  cr_assert_eq(fake.begun, 2);
  cr_assert_eq(fake.ended, 2);
  cr_assert_gt(summary.rejected, 0, "the bm1 cuda-core gate_up candidates were wrong");
  cr_assert_not_null(strstr(summary.tables[0], "op=gate_up,N=320,K=2560,block=128x128,arch=sm_90,device=Fake_GPU.json"));
  volt8_tuning_table gate_up = parse_written(summary.tables[0], "gate_up");
  volt8_tuning_table down = parse_written(summary.tables[1], "down");
  cr_assert_eq(gate_up.count, 2);
  cr_assert_eq(down.count, 2);
  for (int i = 0; i < 2; i++) {
    cr_assert_str_eq(gate_up.entries[i].variant, fake.fastest[0]);
    cr_assert_str_eq(down.entries[i].variant, fake.fastest[1]);
    cr_assert_neq(strncmp(gate_up.entries[i].variant, "gate_up.cc.bm1.", 15), 0);
  }
  cr_assert_eq(gate_up.measured, 1);
  cr_assert_eq(gate_up.top_k, 10);
  volt8_tuning_table_free(&gate_up);
  volt8_tuning_table_free(&down);

  char *text = read_text(summary.tables[0]);
  cJSON *root = cJSON_Parse(text);
  cJSON *metadata = cJSON_GetObjectItem(root, "__metadata__");
  const char *fields[] = {"schema_version", "library_version", "nvrtc_version", "tuner_command", "date", "device",
                          "arch", "measured", "method", "top_k", "runs"};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
    cr_assert_not_null(cJSON_GetObjectItem(metadata, fields[i]), "__metadata__ lacks %s", fields[i]);
  cr_assert_str_eq(cJSON_GetObjectItem(metadata, "tuner_command")->valuestring, "volt8 tune --fake");
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(metadata, "runs")), 1, "one run, however many M were written");
  cJSON *entry = cJSON_GetObjectItem(root, "8");
  cr_assert_not_null(cJSON_GetObjectItem(entry, "forward_us"));
  cr_assert_not_null(cJSON_GetObjectItem(entry, "runner_up"));
  cJSON_Delete(root);
  free(text);
  cr_assert_not_null(strstr(progress_text, "M=8"), "%s", progress_text);
  /* Each rejected candidate is named with its reason. */
  cr_assert(strstr(progress_text, "gate_up.cc.bm1.") && strstr(progress_text, " rejected: relative L2 1.0 against the reference"),
            "%s", progress_text);
  cr_assert_not_null(strstr(progress_text, "ETA"), "%s", progress_text);
  cr_assert_not_null(strstr(progress_text, "100%"), "%s", progress_text);
  free(progress_text);
  volt8_ctx_destroy(ctx);
}

/* A screen that misleads: the dispatch's variants (the incumbents) screen 10 us slower than the rest
 * and time 10 us faster in the final passes. */
typedef struct misleading_timer {
  char incumbent[2][96];
  int32_t screen_batches;
} misleading_timer;

static volt8_status misleading_begin(void *state, int32_t m) { return VOLT8_OK; }
static void misleading_end(void *state, int32_t m) {}

static volt8_status misleading_measure(void *state, int32_t m, const char *gate_up, const char *down, int32_t batches,
                                       tuner_measurement *out) {
  misleading_timer *timer = state;
  const char *names[2] = {gate_up, down};
  out->accepted = 1;
  out->relative_l2 = 1e-4;
  out->forward_us = 100.0 + 0.01 * (double)(strlen(gate_up) + strlen(down));
  for (int i = 0; i < 2; i++)
    if (strcmp(names[i], timer->incumbent[i]) == 0) out->forward_us += batches == timer->screen_batches ? 10.0 : -10.0;
  return VOLT8_OK;
}

/* The dispatch's variant of each op reaches the final passes even when its screen ranks it below the
 * finalists, so that a pick is never one the final would have found slower than what is served. */
Test(tuner, the_dispatchs_variant_reaches_the_final) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  int32_t m_values[1] = {64};
  tuner_settings settings = fake_settings(m_values, 1, NULL);
  volt8_forward_info served = VOLT8_FORWARD_INFO_INIT;
  cr_assert_eq(volt8_forward_describe(ctx, &settings.shape, NULL, 64, settings.top_k, &served), VOLT8_OK, "%s",
               volt8_last_error(ctx));
  misleading_timer timer = {.screen_batches = settings.screen_batches};
  snprintf(timer.incumbent[0], sizeof timer.incumbent[0], "%s", served.gate_up);
  snprintf(timer.incumbent[1], sizeof timer.incumbent[1], "%s", served.down);
  tuner_backend backend = {&timer, 1, misleading_begin, misleading_measure, misleading_end};
  tuner_summary summary;
  cr_assert_eq(tuner_run(ctx, &settings, &backend, &summary), VOLT8_OK, "%s", volt8_last_error(ctx));
  volt8_tuning_table gate_up = parse_written(summary.tables[0], "gate_up");
  volt8_tuning_table down = parse_written(summary.tables[1], "down");
  cr_assert_str_eq(gate_up.entries[0].variant, served.gate_up);
  cr_assert_str_eq(down.entries[0].variant, served.down);
  volt8_tuning_table_free(&gate_up);
  volt8_tuning_table_free(&down);
  volt8_ctx_destroy(ctx);
}

/* Times that may drift between the two ops' passes: the served pair takes 100 us; gate_up X with the
 * served down takes x_first_us in its first two measurements (gate_up's screen and final) and
 * x_later_us after (down's); every other pair 101 us or more. */
typedef struct drifting_timer {
  char served[2][96], x[96];
  double x_first_us, x_later_us;
  int32_t x_with_served_down;
} drifting_timer;

static volt8_status drifting_measure(void *state, int32_t m, const char *gate_up, const char *down, int32_t batches,
                                     tuner_measurement *out) {
  drifting_timer *timer = state;
  int served_down = strcmp(down, timer->served[1]) == 0;
  out->accepted = 1;
  out->relative_l2 = 1e-4;
  if (strcmp(gate_up, timer->served[0]) == 0 && served_down) out->forward_us = 100.0;
  else if (strcmp(gate_up, timer->x) == 0 && served_down)
    out->forward_us = timer->x_with_served_down++ < 2 ? timer->x_first_us : timer->x_later_us;
  else out->forward_us = 101.0 + 0.01 * (double)(strlen(gate_up) + strlen(down));
  return VOLT8_OK;
}

/* When the tuned pair's final is no faster than the served pair's, the served pair is kept and the
 * tuned picks become the runners-up; the log's "kept" line names it, its pick lines stay the ops'.
 * Gate_up X beats the served pair in gate_up's passes (99.5 against 100 us) and loses in down's (100.5). */
Test(tuner, the_served_pair_is_kept_unless_beaten) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  int32_t m_values[1] = {64};
  char *log_text = NULL;
  size_t log_size = 0;
  FILE *log = open_memstream(&log_text, &log_size);
  tuner_settings settings = fake_settings(m_values, 1, NULL);
  settings.log = log;
  volt8_forward_info served = VOLT8_FORWARD_INFO_INIT;
  cr_assert_eq(volt8_forward_describe(ctx, &settings.shape, NULL, 64, settings.top_k, &served), VOLT8_OK, "%s",
               volt8_last_error(ctx));
  drifting_timer timer = {.x_first_us = 99.5, .x_later_us = 100.5};
  snprintf(timer.served[0], sizeof timer.served[0], "%s", served.gate_up);
  snprintf(timer.served[1], sizeof timer.served[1], "%s", served.down);
  char **names = NULL;
  int32_t count = 0;
  cr_assert_eq(tuner_candidates(ctx, &settings.shape, VOLT8_OP_GATE_UP, &names, &count), VOLT8_OK);
  snprintf(timer.x, sizeof timer.x, "%s", strcmp(names[0], served.gate_up) ? names[0] : names[1]);
  volt8_codegen_names_free(names, count);
  tuner_backend backend = {&timer, 1, misleading_begin, drifting_measure, misleading_end};
  tuner_summary summary;
  cr_assert_eq(tuner_run(ctx, &settings, &backend, &summary), VOLT8_OK, "%s", volt8_last_error(ctx));
  fclose(log);
  cr_assert_eq(timer.x_with_served_down, 4, "X with the served down: gate_up's screen and final, down's screen and final");
  volt8_tuning_table gate_up = parse_written(summary.tables[0], "gate_up");
  volt8_tuning_table down = parse_written(summary.tables[1], "down");
  cr_assert_str_eq(gate_up.entries[0].variant, served.gate_up, "X's pair took 100.5 us in the final against 100");
  cr_assert_str_eq(down.entries[0].variant, served.down);
  volt8_tuning_table_free(&gate_up);
  volt8_tuning_table_free(&down);
  char *text = read_text(summary.tables[0]);
  char runner_up[160];
  snprintf(runner_up, sizeof runner_up, "\"runner_up\":\"%s\"", timer.x);
  cr_assert_not_null(strstr(text, runner_up), "the tuned gate_up is the runner-up: %s", text);
  cr_assert_not_null(strstr(text, "\"forward_us\":100,"), "the served pair's final time: %s", text);
  free(text);
  char kept[512];
  snprintf(kept, sizeof kept, "\"kind\":\"kept\",\"m\":64,\"gate_up\":\"%s\",\"down\":\"%s\",\"forward_us\":100,",
           served.gate_up, served.down);
  cr_assert_not_null(strstr(log_text, kept), "%s", log_text);
  char pick[256];
  snprintf(pick, sizeof pick, "\"kind\":\"pick\",\"m\":64,\"op\":\"gate_up\",\"variant\":\"%s\"", timer.x);
  cr_assert_not_null(strstr(log_text, pick), "the pick line stays the op's pick: %s", log_text);
  free(log_text);
  volt8_ctx_destroy(ctx);
}

/* A final time within keep_within of the served one does not move a table: gate_up X at 99.5 us against
 * the served 100 (the op's rule), and X ahead by 2% in gate_up's final but its pair at 99.5 in down's
 * (the pair's rule). With keep_within 0 both take X. */
Test(tuner, a_tie_within_the_margin_keeps_what_is_served) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  int32_t m_values[1] = {64};
  volt8_forward_info served = VOLT8_FORWARD_INFO_INIT;
  tuner_settings probe = fake_settings(m_values, 1, NULL);
  cr_assert_eq(volt8_forward_describe(ctx, &probe.shape, NULL, 64, probe.top_k, &served), VOLT8_OK, "%s",
               volt8_last_error(ctx));
  char **names = NULL;
  int32_t count = 0;
  cr_assert_eq(tuner_candidates(ctx, &probe.shape, VOLT8_OP_GATE_UP, &names, &count), VOLT8_OK);
  char x[96];
  snprintf(x, sizeof x, "%s", strcmp(names[0], served.gate_up) ? names[0] : names[1]);
  volt8_codegen_names_free(names, count);
  const double first_us[2] = {99.5, 98.0};
  for (int rule = 0; rule < 2; rule++)
    for (int margin = 0; margin < 2; margin++) {
      drifting_timer timer = {.x_first_us = first_us[rule], .x_later_us = 99.5};
      snprintf(timer.served[0], sizeof timer.served[0], "%s", served.gate_up);
      snprintf(timer.served[1], sizeof timer.served[1], "%s", served.down);
      snprintf(timer.x, sizeof timer.x, "%s", x);
      tuner_settings settings = fake_settings(m_values, 1, NULL);
      settings.keep_within = margin ? 0.01 : 0.0;
      tuner_backend backend = {&timer, 1, misleading_begin, drifting_measure, misleading_end};
      tuner_summary summary;
      cr_assert_eq(tuner_run(ctx, &settings, &backend, &summary), VOLT8_OK, "%s", volt8_last_error(ctx));
      volt8_tuning_table gate_up = parse_written(summary.tables[0], "gate_up");
      volt8_tuning_table down = parse_written(summary.tables[1], "down");
      cr_assert_str_eq(gate_up.entries[0].variant, margin ? served.gate_up : x, "%s rule, keep_within %s",
                       rule ? "the pair's" : "the op's", margin ? "1%" : "0");
      cr_assert_str_eq(down.entries[0].variant, served.down);
      volt8_tuning_table_free(&gate_up);
      volt8_tuning_table_free(&down);
      char *text = read_text(summary.tables[0]);
      char runner_up[160];
      snprintf(runner_up, sizeof runner_up, "\"runner_up\":\"%s\"", margin ? x : served.gate_up);
      cr_assert_not_null(strstr(text, runner_up), "%s", text);
      free(text);
      remove(summary.tables[0]);
      remove(summary.tables[1]);
    }
  volt8_ctx_destroy(ctx);
}

/* A clock that moves 0.25 s at each reading, and a backend that reports a split of its time. */
static double stepping_seconds;
static double stepping_clock(void) { return stepping_seconds += 0.25; }

static volt8_status split_measure(void *state, int32_t m, const char *gate_up, const char *down, int32_t batches,
                                  tuner_measurement *out) {
  volt8_status status = fake_measure(state, m, gate_up, down, batches, out);
  out->setup_ms = 1.5;
  out->check_ms = 2.5;
  out->timing_ms = 3.5;
  return status;
}

/* Each measure line of the log gives the measurement's wall time on the tuner's clock and the
 * backend's split of it; a backend without a split logs nulls. Each M's line gives the time of the
 * backend's begin (its inputs and reference), and the shape's line its set-up when the caller timed it. */
Test(tuner, log_gives_each_measurement_its_time) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  for (int split = 0; split < 2; split++) {
    fake_timer fake = {0};
    char unused[VOLT8_VARIANT_NAME_BYTES];
    listed_variants(ctx, VOLT8_OP_GATE_UP, unused, fake.fastest[0]);
    listed_variants(ctx, VOLT8_OP_DOWN, fake.fastest[1], unused);
    char *log_text = NULL;
    size_t log_size = 0;
    FILE *log = open_memstream(&log_text, &log_size);
    int32_t m_values[1] = {8};
    tuner_settings settings = fake_settings(m_values, 1, NULL);
    settings.log = log;
    settings.clock = stepping_clock;
    settings.prepare_seconds = split ? 2.5 : 0.0;
    stepping_seconds = 0.0;
    tuner_backend backend = {&fake, 1, fake_begin, split ? split_measure : fake_measure, fake_end};
    tuner_summary summary;
    cr_assert_eq(tuner_run(ctx, &settings, &backend, &summary), VOLT8_OK, "%s", volt8_last_error(ctx));
    fclose(log);
    int measures = 0, m_lines = 0;
    for (char *line = strtok(log_text, "\n"); line; line = strtok(NULL, "\n")) {
      cJSON *item = cJSON_Parse(line);
      cr_assert_not_null(item, "not JSON: %s", line);
      const char *kind = cJSON_GetObjectItem(item, "kind")->valuestring;
      if (strcmp(kind, "shape") == 0) {
        const cJSON *prepare = cJSON_GetObjectItem(item, "prepare_ms");
        cr_assert(split ? cJSON_IsNumber(prepare) && prepare->valuedouble == 2500.0 : !prepare, "%s", line);
      }
      if (strcmp(kind, "m") == 0) {
        m_lines++;
        const cJSON *inputs = cJSON_GetObjectItem(item, "inputs_ms");
        cr_assert(cJSON_IsNumber(inputs) && inputs->valuedouble == 250.0, "one clock step around the begin: %s", line);
      }
      if (strcmp(kind, "measure") == 0) {
        measures++;
        const cJSON *wall = cJSON_GetObjectItem(item, "wall_ms");
        cr_assert(cJSON_IsNumber(wall) && wall->valuedouble == 250.0, "one clock step around the measurement: %s", line);
        const char *parts[3] = {"setup_ms", "check_ms", "timing_ms"};
        for (int i = 0; i < 3; i++) {
          const cJSON *part = cJSON_GetObjectItem(item, parts[i]);
          if (split)
            cr_assert(cJSON_IsNumber(part) && part->valuedouble == 1.5 + i, "%s: %s", parts[i], line);
          else
            cr_assert(cJSON_IsNull(part), "%s: %s", parts[i], line);
        }
      }
      cJSON_Delete(item);
    }
    cr_assert_eq(measures, fake.measured, "a line for each of the backend's %d measurements", fake.measured);
    cr_assert_gt(measures, 2);
    cr_assert_eq(m_lines, 1);
    free(log_text);
  }
  volt8_ctx_destroy(ctx);
}

Test(tuner, rerun_merges_into_the_existing_table) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  fake_timer fake = {0};
  char first[VOLT8_VARIANT_NAME_BYTES], last[VOLT8_VARIANT_NAME_BYTES], down_first[VOLT8_VARIANT_NAME_BYTES];
  listed_variants(ctx, VOLT8_OP_GATE_UP, first, last);
  listed_variants(ctx, VOLT8_OP_DOWN, down_first, fake.fastest[1]);
  tuner_backend backend = {&fake, 1, fake_begin, fake_measure, fake_end};
  tuner_summary summary;
  int32_t first_m[2] = {1, 2};
  snprintf(fake.fastest[0], sizeof fake.fastest[0], "%s", first);
  tuner_settings settings = fake_settings(first_m, 2, NULL);
  cr_assert_eq(tuner_run(ctx, &settings, &backend, &summary), VOLT8_OK, "%s", volt8_last_error(ctx));
  int32_t second_m[2] = {2, 4};
  snprintf(fake.fastest[0], sizeof fake.fastest[0], "%s", last);
  settings = fake_settings(second_m, 2, NULL);
  settings.command = "volt8 tune --fake --again";
  sleep(1); /* a distinct date: the second run is a run of its own */
  cr_assert_eq(tuner_run(ctx, &settings, &backend, &summary), VOLT8_OK, "%s", volt8_last_error(ctx));
  volt8_tuning_table table = parse_written(summary.tables[0], "gate_up");
  cr_assert_eq(table.count, 3, "M 1, 2 and 4");
  cr_assert_str_eq(table.entries[0].variant, first, "M=1 kept from the first run");
  cr_assert_str_eq(table.entries[1].variant, last, "M=2 replaced by the second run");
  cr_assert_str_eq(table.entries[2].variant, last, "M=4 added");
  volt8_tuning_table_free(&table);
  char *text = read_text(summary.tables[0]);
  cJSON *root = cJSON_Parse(text);
  cJSON *runs = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "__metadata__"), "runs");
  cr_assert_eq(cJSON_GetArraySize(runs), 2);
  cJSON_Delete(root);
  free(text);
  volt8_ctx_destroy(ctx);
}

Test(tuner, corrupt_existing_table_is_left_alone) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  const char *garbage = "{\"__metadata__\": {\"schema_version\": 1}, \"1\": 7}";
  test_write_text(temp_dir, "op=gate_up,N=320,K=2560,block=128x128,arch=sm_90,device=Fake_GPU.json", garbage);
  fake_timer fake = {0};
  tuner_backend backend = {&fake, 1, fake_begin, fake_measure, fake_end};
  tuner_summary summary;
  int32_t m_values[1] = {1};
  tuner_settings settings = fake_settings(m_values, 1, NULL);
  cr_assert_eq(tuner_run(ctx, &settings, &backend, &summary), VOLT8_ERR_FORMAT);
  cr_assert_not_null(strstr(volt8_last_error(ctx), "not merging"), "%s", volt8_last_error(ctx));
  char path[8192];
  snprintf(path, sizeof path, "%s/op=gate_up,N=320,K=2560,block=128x128,arch=sm_90,device=Fake_GPU.json", temp_dir);
  char *text = read_text(path);
  cr_assert_str_eq(text, garbage);
  free(text);
  volt8_ctx_destroy(ctx);
}

Test(tuner, no_valid_candidate_is_reported_not_written) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  fake_timer fake = {0};
  fake.rejected_prefix = "gate_up.";
  tuner_backend backend = {&fake, 1, fake_begin, fake_measure, fake_end};
  tuner_summary summary;
  int32_t m_values[1] = {4};
  tuner_settings settings = fake_settings(m_values, 1, NULL);
  cr_assert_eq(tuner_run(ctx, &settings, &backend, &summary), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(summary.m_failed, 1);
  cr_assert_eq(summary.m_done, 0);
  cr_assert_not_null(strstr(summary.failures, "M=4 gate_up"), "%s", summary.failures);
  cr_assert_not_null(strstr(summary.failures, "relative L2"), "%s", summary.failures);
  char path[8192];
  snprintf(path, sizeof path, "%s/op=gate_up,N=320,K=2560,block=128x128,arch=sm_90,device=Fake_GPU.json", temp_dir);
  cr_assert_eq(access(path, F_OK), -1, "nothing is written for an M without a winner");
  volt8_ctx_destroy(ctx);
}

/* A fake of large M: a candidate's time is 1000 us over its block_m (items that reuse each weight
 * across more pairs are faster), and, as the GPU backend does, a first timed forward over the limit stops it
 * (pruned). It records the order in which the screen of the first M took the gate_up candidates. */
typedef struct block_timer {
  int32_t first_m, screened;
  long block_ms[512];
} block_timer;

static long fake_block_m(const char *name) {
  volt8_variant variant;
  cr_assert(volt8_variant_parse(name, &variant), "%s is no variant of the catalogue", name);
  return variant.block_m;
}

/* A fake's measurement of `us`: accepted, or pruned (1) where the tuner's limit is under it. */
static int fake_result(tuner_measurement *out, double us) {
  out->relative_l2 = 1e-4;
  out->forward_us = us;
  out->accepted = 1;
  if (!isfinite(out->limit_us) || us <= out->limit_us) return 0;
  out->accepted = 0;
  out->pruned = 1;
  snprintf(out->reason, sizeof out->reason, "pruned: %.1f us over %.1f us", us, out->limit_us);
  return 1;
}

static volt8_status block_measure(void *state, int32_t m, const char *gate_up, const char *down, int32_t batches,
                                  tuner_measurement *out) {
  block_timer *fake = state;
  if (m == fake->first_m && fake->screened < 512 && batches == 2) /* a screen pass (fake_settings: 2) */
    fake->block_ms[fake->screened++] = fake_block_m(gate_up);
  fake_result(out, 1000.0 / (double)fake_block_m(gate_up) + 1000.0 / (double)fake_block_m(down));
  return VOLT8_OK;
}

static volt8_status block_begin(void *state, int32_t m) { return VOLT8_OK; }
static void block_end(void *state, int32_t m) {}

/* Tunes m_values twice into folders PREFIX0 and PREFIX1: in full (run 0) and with prune_factor (run 1),
 * each run with its own fake state and `measure`, and reads back both runs' tables. */
static void tune_in_full_and_pruned(volt8_ctx *ctx, const char *prefix, const int32_t *m_values, int32_t m_count,
                                    double prune_factor, void *const states[2],
                                    volt8_status (*measure)(void *, int32_t, const char *, const char *, int32_t,
                                                            tuner_measurement *),
                                    tuner_summary summaries[2], volt8_tuning_table picked[2][2]) {
  for (int run = 0; run < 2; run++) {
    char out_dir[8192];
    snprintf(out_dir, sizeof out_dir, "%s/%s%d", temp_dir, prefix, run);
    cr_assert_eq(mkdir(out_dir, 0755), 0);
    tuner_settings settings = fake_settings(m_values, m_count, NULL);
    settings.out_dir = out_dir;
    settings.prune_factor = run == 0 ? 0 : prune_factor;
    tuner_backend backend = {states[run], 1, block_begin, measure, block_end};
    cr_assert_eq(tuner_run(ctx, &settings, &backend, &summaries[run]), VOLT8_OK, "%s", volt8_last_error(ctx));
    picked[run][0] = parse_written(summaries[run].tables[0], "gate_up");
    picked[run][1] = parse_written(summaries[run].tables[1], "down");
  }
}

/* --prune: the screen takes the largest items first, stops timing what is over the factor times the
 * best so far (counted apart from the rejected), and picks what the full screen picks. */
Test(tuner, pruning_screens_the_largest_items_first_and_keeps_the_pick) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  int32_t m_values[1] = {4096};
  volt8_tuning_table picked[2][2];
  tuner_summary summaries[2];
  block_timer fakes[2] = {{.first_m = 4096}, {.first_m = 4096}};
  tune_in_full_and_pruned(ctx, "run", m_values, 1, 4, (void *const[2]){&fakes[0], &fakes[1]}, block_measure,
                          summaries, picked);
  cr_assert_eq(summaries[0].pruned, 0, "no pruning without a factor");
  cr_assert_gt(summaries[1].pruned, 0, "small items are far slower at this M");
  cr_assert_eq(summaries[1].rejected, 0, "pruned candidates are not counted as rejected");
  for (int op = 0; op < 2; op++)
    cr_assert_str_eq(picked[1][op].entries[0].variant, picked[0][op].entries[0].variant, "op %d", op);
  /* The pruned screen took the gate_up candidates (its first screen passes) in order of block_m,
   * largest first; the full one in the catalogue's order. */
  char **names = NULL;
  int32_t count = 0;
  cr_assert_eq(tuner_candidates(ctx, &(volt8_moe_shape)VOLT8_MOE_SHAPE_INIT, VOLT8_OP_GATE_UP, &names, &count), VOLT8_OK);
  volt8_codegen_names_free(names, count);
  cr_assert(count > 1 && fakes[0].screened > count && fakes[1].screened > count);
  int ordered = 1, unordered = 0;
  for (int32_t i = 1; i < count; i++) ordered &= fakes[1].block_ms[i] <= fakes[1].block_ms[i - 1];
  for (int32_t i = 1; i < count; i++) unordered |= fakes[0].block_ms[i] > fakes[0].block_ms[i - 1];
  cr_assert(ordered, "the pruned screen's gate_up candidates are not largest block_m first");
  cr_assert(unordered, "the catalogue's own order starts with small items");
  for (int run = 0; run < 2; run++)
    for (int op = 0; op < 2; op++) volt8_tuning_table_free(&picked[run][op]);
  volt8_ctx_destroy(ctx);
}

/* A fake where 32-pair items are fastest and the time grows with the distance from 32 in either
 * direction (100 us times 1 + 2 |log2(block_m / 32)| a GEMM), so that the largest items, screened first
 * at the first M, are not the fastest. It records, per M, the block_m of the gate_up candidates in the
 * order of their first screen passes and how many it pruned. */
typedef struct distance_timer {
  int32_t ms[2];
  int32_t screened[2], pruned[2];
  long block_ms[2][512];
} distance_timer;

static double distance_us(long block_m) {
  return 100.0 * (1.0 + 2.0 * fabs(log2((double)block_m / 32.0)));
}

static volt8_status distance_measure(void *state, int32_t m, const char *gate_up, const char *down, int32_t batches,
                                     tuner_measurement *out) {
  distance_timer *fake = state;
  int slot = m == fake->ms[0] ? 0 : 1;
  fake->pruned[slot] += fake_result(out, distance_us(fake_block_m(gate_up)) + distance_us(fake_block_m(down)));
  /* A screen pass (fake_settings: 2); an M's gate_up candidates are screened before its downs. */
  if (batches == 2 && fake->screened[slot] < 512) fake->block_ms[slot][fake->screened[slot]++] = fake_block_m(gate_up);
  return VOLT8_OK;
}

/* --prune over several M: after the first M the screen takes the candidates in order of their times at
 * the M before, fastest first, so the prune's bar is the best from the start and stops more of the
 * slow ones; the picks are those of the full screen. */
Test(tuner, pruning_orders_each_later_m_by_the_times_before) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  int32_t m_values[2] = {2048, 4096};
  volt8_tuning_table picked[2][2];
  tuner_summary summaries[2];
  distance_timer fakes[2] = {{.ms = {2048, 4096}}, {.ms = {2048, 4096}}};
  tune_in_full_and_pruned(ctx, "order", m_values, 2, 1.5, (void *const[2]){&fakes[0], &fakes[1]}, distance_measure,
                          summaries, picked);
  for (int op = 0; op < 2; op++) {
    cr_assert_eq(picked[1][op].count, 2);
    for (int e = 0; e < 2; e++)
      cr_assert_str_eq(picked[1][op].entries[e].variant, picked[0][op].entries[e].variant, "op %d M index %d", op, e);
  }
  char **names = NULL;
  int32_t count = 0;
  cr_assert_eq(tuner_candidates(ctx, &(volt8_moe_shape)VOLT8_MOE_SHAPE_INIT, VOLT8_OP_GATE_UP, &names, &count), VOLT8_OK);
  volt8_codegen_names_free(names, count);
  distance_timer *pruned = &fakes[1];
  cr_assert(count > 1 && pruned->screened[0] > count && pruned->screened[1] > count);
  /* The first `count` screens of an M are its gate_up candidates. First M: largest items first. Later
   * M: fastest first (by the first M's times, which this fake keeps from one M to the next). */
  int largest_first = 1, fastest_first = 1;
  for (int32_t i = 1; i < count; i++) largest_first &= pruned->block_ms[0][i] <= pruned->block_ms[0][i - 1];
  for (int32_t i = 1; i < count; i++)
    fastest_first &= distance_us(pruned->block_ms[1][i]) >= distance_us(pruned->block_ms[1][i - 1]);
  cr_assert(largest_first, "the first M's screen does not take the largest items first");
  cr_assert(fastest_first, "the second M's screen does not take the fastest of the first M first");
  cr_assert_eq(pruned->block_ms[1][0], 32, "the fastest items (32 pairs) come first at the second M");
  cr_assert_gt(pruned->pruned[1], pruned->pruned[0], "a strong bar from the start prunes more (%d, then %d)",
               pruned->pruned[0], pruned->pruned[1]);
  for (int run = 0; run < 2; run++)
    for (int op = 0; op < 2; op++) volt8_tuning_table_free(&picked[run][op]);
  volt8_ctx_destroy(ctx);
}

/* A fake whose fastest items grow with M: 100 us times 1 + 2 |log2(block_m / C)| a GEMM, C = 32 pairs
 * up to M = 2048 and 128 past it. */
static volt8_status centered_measure(void *state, int32_t m, const char *gate_up, const char *down, int32_t batches,
                                     tuner_measurement *out) {
  double center = m <= 2048 ? 32.0 : 128.0;
  double us = 0.0;
  const char *names[2] = {gate_up, down};
  for (int i = 0; i < 2; i++) us += 100.0 * (1.0 + 2.0 * fabs(log2((double)fake_block_m(names[i]) / center)));
  fake_result(out, us);
  return VOLT8_OK;
}

/* Measurements a fake makes at each M (resume's test). */
typedef struct counted_ms {
  int32_t m[4], count[4];
} counted_ms;

static volt8_status counted_measure(void *state, int32_t m, const char *gate_up, const char *down, int32_t batches,
                                    tuner_measurement *out) {
  counted_ms *counted = state;
  for (int i = 0; i < 4; i++)
    if (counted->m[i] == m) counted->count[i]++;
  return centered_measure(NULL, m, gate_up, down, batches, out);
}

/* --resume 1: a second run over more M leaves the M both tables hold as they were (no measurement, a
 * "resume" line in the log) and tunes the others into the same tables; with one table gone, nothing is
 * held and every M is tuned again; a table derived where the backend measures is not resumed from. */
Test(tuner, resume_goes_on_where_the_tables_stop) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  char out_dir[8192];
  snprintf(out_dir, sizeof out_dir, "%s/resume", temp_dir);
  cr_assert_eq(mkdir(out_dir, 0755), 0);
  int32_t m_values[3] = {8, 64, 512};
  counted_ms counted = {{8, 64, 512, 0}, {0, 0, 0, 0}};
  tuner_backend backend = {&counted, 1, block_begin, counted_measure, block_end};
  tuner_settings settings = fake_settings(m_values, 2, NULL);
  settings.out_dir = out_dir;
  tuner_summary first, second, third;
  cr_assert_eq(tuner_run(ctx, &settings, &backend, &first), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(counted.count[0] > 0 && counted.count[1] > 0 && first.resumed == 0);
  volt8_tuning_table before = parse_written(first.tables[1], "down");

  memset(counted.count, 0, sizeof counted.count);
  char *log_text = NULL;
  size_t log_size = 0;
  settings.m_count = 3;
  settings.resume = 1;
  settings.log = open_memstream(&log_text, &log_size);
  cr_assert_eq(tuner_run(ctx, &settings, &backend, &second), VOLT8_OK, "%s", volt8_last_error(ctx));
  fclose(settings.log);
  settings.log = NULL;
  cr_assert(counted.count[0] == 0 && counted.count[1] == 0 && counted.count[2] > 0, "measured %d, %d, %d",
            counted.count[0], counted.count[1], counted.count[2]);
  cr_assert(second.resumed == 2 && second.m_done == 1, "resumed %d, done %d", second.resumed, second.m_done);
  cr_assert(strstr(log_text, "{\"kind\":\"resume\",\"m\":8}") && strstr(log_text, "{\"kind\":\"resume\",\"m\":64}") &&
                !strstr(log_text, "\"resume\",\"m\":512"),
            "%s", log_text);
  free(log_text);
  volt8_tuning_table after = parse_written(second.tables[1], "down");
  cr_assert_eq(after.count, 3);
  for (int e = 0; e < 2; e++) {
    cr_assert_eq(after.entries[e].m, before.entries[e].m);
    cr_assert_str_eq(after.entries[e].variant, before.entries[e].variant, "M=%d", after.entries[e].m);
  }
  cr_assert_eq(after.entries[2].m, 512);
  volt8_tuning_table_free(&before);
  volt8_tuning_table_free(&after);

  cr_assert_eq(unlink(second.tables[1]), 0, "%s", second.tables[1]);
  memset(counted.count, 0, sizeof counted.count);
  settings.m_count = 2;
  cr_assert_eq(tuner_run(ctx, &settings, &backend, &third), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(third.resumed == 0 && counted.count[0] > 0 && counted.count[1] > 0, "resumed %d", third.resumed);

  memset(counted.count, 0, sizeof counted.count);
  backend.measured = 0; /* the tables were measured: a deriving run makes its own */
  cr_assert_eq(tuner_run(ctx, &settings, &backend, &third), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(third.resumed == 0 && counted.count[0] > 0, "resumed %d", third.resumed);
  volt8_ctx_destroy(ctx);
}

/* --skip-pruned over three M (32-pair items fastest at the first two, 128-pair items at the third): at
 * each later M a candidate is left out, with a "skip" line in the log, exactly when it was pruned or
 * left out at the M before with items no larger than that M's pick (32 pairs); the 128-pair items
 * pruned at the second M are screened again at the third, where they win; every candidate is screened
 * or left out; the picks are those of the full screen. */
Test(tuner, skip_pruned_leaves_out_small_items_pruned_before) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  enum { MS = 3 };
  int32_t m_values[MS] = {1024, 2048, 4096};
  volt8_tuning_table picked[2][2];
  char *log_text = NULL;
  size_t log_size = 0;
  for (int run = 0; run < 2; run++) {
    char out_dir[8192];
    snprintf(out_dir, sizeof out_dir, "%s/skip%d", temp_dir, run);
    cr_assert_eq(mkdir(out_dir, 0755), 0);
    FILE *log = run == 1 ? open_memstream(&log_text, &log_size) : NULL;
    tuner_settings settings = fake_settings(m_values, MS, NULL);
    settings.out_dir = out_dir;
    settings.prune_factor = run == 0 ? 0 : 1.5;
    settings.skip_pruned = run;
    settings.log = log;
    tuner_backend backend = {NULL, 1, block_begin, centered_measure, block_end};
    tuner_summary summary;
    cr_assert_eq(tuner_run(ctx, &settings, &backend, &summary), VOLT8_OK, "%s", volt8_last_error(ctx));
    if (log) fclose(log);
    cr_assert(run == 1 ? summary.skipped > 0 : summary.skipped == 0, "run %d: %d left out", run, summary.skipped);
    picked[run][0] = parse_written(summary.tables[0], "gate_up");
    picked[run][1] = parse_written(summary.tables[1], "down");
  }
  for (int op = 0; op < 2; op++) {
    cr_assert_eq(picked[1][op].count, MS);
    for (int e = 0; e < MS; e++) {
      cr_assert_str_eq(picked[1][op].entries[e].variant, picked[0][op].entries[e].variant, "op %d M index %d", op, e);
      cr_assert_eq(fake_block_m(picked[1][op].entries[e].variant), e < 2 ? 32 : 128, "op %d M index %d", op, e);
    }
  }
  /* Per op, candidate and M: 0 not seen, 1 screened and kept, 2 pruned, 3 left out. */
  enum { KEPT = 1, PRUNED = 2, LEFT_OUT = 3 };
  const char *ops[2] = {"gate_up", "down"};
  char **names[2] = {NULL, NULL};
  int32_t counts[2] = {0, 0};
  for (int op = 0; op < 2; op++)
    cr_assert_eq(tuner_candidates(ctx, &(volt8_moe_shape)VOLT8_MOE_SHAPE_INIT, op == 0 ? VOLT8_OP_GATE_UP : VOLT8_OP_DOWN,
                                  &names[op], &counts[op]), VOLT8_OK);
  unsigned char *marks[2] = {calloc((size_t)counts[0], MS), calloc((size_t)counts[1], MS)};
  cr_assert(marks[0] && marks[1]);
  for (char *line = strtok(log_text, "\n"); line; line = strtok(NULL, "\n")) {
    cJSON *item = cJSON_Parse(line);
    cr_assert_not_null(item, "not JSON: %s", line);
    const char *kind = cJSON_GetObjectItem(item, "kind")->valuestring;
    const cJSON *pass = cJSON_GetObjectItem(item, "pass");
    int skip = strcmp(kind, "skip") == 0;
    if (skip || (strcmp(kind, "measure") == 0 && strcmp(pass->valuestring, "screen") == 0)) {
      int op = strcmp(cJSON_GetObjectItem(item, "op")->valuestring, "down") == 0;
      const char *variant = cJSON_GetObjectItem(item, "variant")->valuestring;
      int32_t m = cJSON_GetObjectItem(item, "m")->valueint, i = 0, at = 0;
      while (i < counts[op] && strcmp(names[op][i], variant) != 0) i++;
      while (at < MS && m_values[at] != m) at++;
      cr_assert(i < counts[op] && at < MS, "%s", line);
      const cJSON *reason = cJSON_GetObjectItem(item, "reason");
      if (skip) cr_assert(at > 0 && strstr(reason->valuestring, at == 1 ? "M=1024" : "M=2048"), "%s", line);
      cr_assert_eq(marks[op][i * MS + at], 0, "seen twice at M=%d: %s", m, line);
      marks[op][i * MS + at] = skip ? LEFT_OUT : reason && strncmp(reason->valuestring, "pruned", 6) == 0 ? PRUNED : KEPT;
    }
    cJSON_Delete(item);
  }
  for (int op = 0; op < 2; op++) {
    int left_out = 0, screened_again = 0;
    for (int32_t i = 0; i < counts[op]; i++) {
      const unsigned char *mark = &marks[op][i * MS];
      long block_m = fake_block_m(names[op][i]);
      for (int at = 0; at < MS; at++) {
        cr_assert_neq(mark[at], 0, "%s %s neither screened nor left out at M=%d", ops[op], names[op][i], m_values[at]);
        int expected = at > 0 && mark[at - 1] >= PRUNED && block_m <= 32;
        cr_assert_eq(mark[at] == LEFT_OUT, expected, "%s %s at M=%d: %d (before %d, %ld pairs)", ops[op], names[op][i],
                     m_values[at], mark[at], at > 0 ? mark[at - 1] : 0, block_m);
        left_out += mark[at] == LEFT_OUT;
      }
      screened_again += mark[1] == PRUNED && block_m == 128 && mark[2] != LEFT_OUT;
    }
    cr_assert_gt(left_out, 0, "%s: none left out", ops[op]);
    cr_assert_gt(screened_again, 0, "%s: no 128-pair item pruned at the second M was screened at the third", ops[op]);
    free(marks[op]);
    volt8_codegen_names_free(names[op], counts[op]);
  }
  free(log_text);
  for (int run = 0; run < 2; run++)
    for (int op = 0; op < 2; op++) volt8_tuning_table_free(&picked[run][op]);
  volt8_ctx_destroy(ctx);
}

/* ---- derived tables ---- */

TestSuite(derive, .init = make_temp_dir, .fini = remove_temp_dir, .timeout = 120);

Test(derive, variant_names_parse) {
  derive_variant variant;
  cr_assert(derive_parse_variant("gate_up.cc.bm4.bn8.w4.sk1.l16", &variant));
  cr_assert(variant.op == VOLT8_OP_GATE_UP && variant.cuda_core && variant.block_m == 4 && variant.block_n == 8 &&
            variant.warps == 4 && variant.split_k == 1);
  cr_assert(derive_parse_variant("down.mma.bm32.bn32.w4.sk2", &variant));
  cr_assert(variant.op == VOLT8_OP_DOWN && !variant.cuda_core && variant.block_m == 32 && variant.split_k == 2);
  cr_assert(derive_parse_variant("down.tok.bm1.bn16.w4.sk1.l2", &variant));
  cr_assert(variant.op == VOLT8_OP_DOWN && variant.cuda_core && variant.fused_reduce && variant.block_n == 16);
  cr_assert_not(derive_parse_variant("gate_up.tok.bm1.bn16.w4.sk1.l2", &variant));
  cr_assert(derive_parse_variant("gate_up.cc.bm1.bn8.w4.sk1.l16.o6", &variant));
  cr_assert(variant.block_m == 1 && variant.block_n == 8 && variant.split_k == 1 && !variant.fused_reduce);
  cr_assert_not(derive_parse_variant("route", &variant));
  cr_assert_not(derive_parse_variant("down.xx.bm1.bn1.w1.sk1", &variant));
  cr_assert_not(derive_parse_variant("down.cc.bm0.bn1.w1.sk1", &variant));
}

Test(derive, model_grows_with_m_and_every_variant_has_a_time) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  volt8_moe_shape shape = reference_shape();
  for (int op = VOLT8_OP_GATE_UP; op <= VOLT8_OP_DOWN; op++) {
    char **names = NULL;
    int32_t count = 0;
    cr_assert_eq(tuner_candidates(ctx, &shape, (volt8_op)op, &names, &count), VOLT8_OK);
    for (int32_t i = 0; i < count; i++) {
      derive_variant variant;
      cr_assert(derive_parse_variant(names[i], &variant), "%s", names[i]);
      double one = derive_op_us(&DERIVE_V100, &shape, 10, 1, &variant);
      double many = derive_op_us(&DERIVE_V100, &shape, 10, 128, &variant);
      cr_assert(isfinite(one) && one > 0 && many > one, "%s: %g us at M=1, %g at M=128", names[i], one, many);
    }
    volt8_codegen_names_free(names, count);
  }
  volt8_ctx_destroy(ctx);
}

Test(derive, resident_ctas_come_from_the_cubin_when_known) {
  derive_variant variant;
  cr_assert(derive_parse_variant("gate_up.mma.bm8.bn16.w2.sk1", &variant));
  cr_assert_eq(variant.ctas_per_sm, 0, "a name alone says nothing of registers");
  cr_assert_float_eq(derive_ctas_per_sm(&DERIVE_V100, &variant), 32.0, 1e-9, "the 32 CTA slots bind 2-warp CTAs");
  volt8_moe_shape shape = reference_shape();
  double full = derive_op_us(&DERIVE_V100, &shape, 10, 64, &variant);
  /* what its CUBIN allows at this shape: 3 CTAs of 2 warps, fewer than the 8 warps that keep DRAM busy */
  variant.ctas_per_sm = 3;
  cr_assert_float_eq(derive_ctas_per_sm(&DERIVE_V100, &variant), 3.0, 1e-9);
  double held = derive_op_us(&DERIVE_V100, &shape, 10, 64, &variant);
  cr_assert(held > full * 1.2, "6 resident warps per SM: %g us, against %g us with 64", held, full);
}

Test(derive, variants_that_spill_are_not_chosen) {
  char *names[] = {"gate_up.cc.bm1.bn4.w4.sk1.l32", "down.cc.bm1.bn32.w4.sk1.l4", "down.cc.bm1.bn64.w4.sk1.l2"};
  int32_t ctas[] = {-1, -1, 8};
  derive_occupancy occupancy = {names, ctas, 3};
  derive_state state = {&DERIVE_V100, reference_shape(), 10, &occupancy, NULL};
  tuner_backend backend = derive_backend(&state);
  tuner_measurement refused, held, usable;
  cr_assert_eq(backend.measure(backend.state, 4, names[0], names[2], 1, &refused), VOLT8_OK);
  cr_assert_eq(refused.accepted, 0, "a gate_up that spills is refused");
  cr_assert_not_null(strstr(refused.reason, "spills"), "%s", refused.reason);
  /* a down that spills still lets gate_up be ranked, priced above every forward */
  cr_assert_eq(backend.measure(backend.state, 4, "gate_up.cc.bm1.bn8.w4.sk1.l16", names[1], 1, &held), VOLT8_OK);
  cr_assert_eq(backend.measure(backend.state, 4, "gate_up.cc.bm1.bn8.w4.sk1.l16", names[2], 1, &usable), VOLT8_OK);
  cr_assert(held.accepted && usable.accepted && held.forward_us > usable.forward_us + 1e5,
            "spilling down %g us, the other %g us", held.forward_us, usable.forward_us);
}

Test(derive, derived_run_writes_unmeasured_tables) {
  tune_options options;
  char error[1024];
  char *argv[] = {"tune", "--derive", "sm_70", "--tp", "8", "--m", "1,64", "--out", temp_dir};
  cr_assert_eq(tune_options_parse(9, argv, &options, error, sizeof error), 0, "%s", error);
  tune_outcome outcome;
  cr_assert_eq(tune_run(&options, "volt8 tune --derive sm_70 --tp 8", NULL, 0, &outcome, error, sizeof error), VOLT8_OK,
               "%s", error);
  cr_assert_eq(outcome.shapes_done, 1);
  char path[8192];
  snprintf(path, sizeof path, "%s/op=down,N=2560,K=80,block=128x128,arch=sm_70,device=any.json", temp_dir);
  volt8_tuning_table table = parse_written(path, "down");
  cr_assert_eq(table.count, 2);
  cr_assert_eq(table.measured, 0, "derived tables say they were not measured");
  volt8_tuning_table_free(&table);
  char *text = read_text(path);
  cr_assert_not_null(strstr(text, "not measured on a V100"), "%s", text);
  /* the occupancy the model took, from the CUBINs, for the resource check to hold the kernels to */
  cJSON *root = cJSON_Parse(text);
  const cJSON *metadata = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
  const cJSON *figures = cJSON_GetObjectItemCaseSensitive(metadata, DERIVE_OCCUPANCY_KEY);
  cr_assert(cJSON_IsObject(figures) && cJSON_GetArraySize(figures) > 0, "%s", text);
  for (const cJSON *figure = figures->child; figure; figure = figure->next)
    cr_assert(strncmp(figure->string, "down.", 5) == 0 && cJSON_IsNumber(figure) && figure->valueint != 0 &&
                  figure->valueint <= 32,
              "%s: %d", figure->string, figure->valueint);
  const cJSON *from = cJSON_GetObjectItemCaseSensitive(metadata, DERIVE_OCCUPANCY_FROM_KEY);
  cr_assert(cJSON_IsString(from) && strstr(from->valuestring, "sm_70 CUBINs of NVRTC"), "%s", text);
  cJSON_Delete(root);
  free(text);
}

/* Every line of a --log is JSON; the measures are every candidate of each op at each M, the picks are
 * the tables' entries, and the dispatch's own choice is there per M. */
Test(derive, log_holds_every_measurement_and_the_picks) {
  tune_options options;
  char error[1024], log_path[8192];
  snprintf(log_path, sizeof log_path, "%s/tune.jsonl", temp_dir);
  char *argv[] = {"tune", "--derive", "sm_70", "--tp", "8", "--m", "1,64", "--out", temp_dir, "--log", log_path};
  cr_assert_eq(tune_options_parse(11, argv, &options, error, sizeof error), 0, "%s", error);
  tune_outcome outcome;
  cr_assert_eq(tune_run(&options, "volt8 tune --derive sm_70 --tp 8 --log", NULL, 0, &outcome, error, sizeof error),
               VOLT8_OK, "%s", error);
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  int32_t candidates[2];
  for (int op = 0; op < 2; op++) {
    char **names = NULL;
    cr_assert_eq(tuner_candidates(ctx, &options.shapes[0], op ? VOLT8_OP_DOWN : VOLT8_OP_GATE_UP, &names, &candidates[op]),
                 VOLT8_OK);
    volt8_codegen_names_free(names, candidates[op]);
  }
  volt8_ctx_destroy(ctx);
  char path[8192];
  snprintf(path, sizeof path, "%s/op=down,N=2560,K=80,block=128x128,arch=sm_70,device=any.json", temp_dir);
  volt8_tuning_table down = parse_written(path, "down");
  char *text = read_text(log_path);
  int shapes = 0, m_lines = 0, measures[2] = {0, 0}, picks = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    cJSON *item = cJSON_Parse(line);
    cr_assert_not_null(item, "not JSON: %s", line);
    const char *kind = cJSON_GetObjectItem(item, "kind")->valuestring;
    if (strcmp(kind, "shape") == 0) {
      shapes++;
      cr_assert_str_eq(cJSON_GetObjectItem(item, "label")->valuestring, "reference tp8 rank 1");
      cr_assert_eq(cJSON_GetObjectItem(item, "intermediate")->valueint, 80);
      cr_assert_eq(cJSON_GetObjectItem(item, "measured")->valueint, 0);
    } else if (strcmp(kind, "m") == 0) {
      m_lines++;
      cr_assert_eq(strncmp(cJSON_GetObjectItem(item, "dispatch_down")->valuestring, "down.", 5), 0);
    } else if (strcmp(kind, "measure") == 0) {
      int is_down = strcmp(cJSON_GetObjectItem(item, "op")->valuestring, "down") == 0;
      measures[is_down]++;
      cr_assert_str_eq(cJSON_GetObjectItem(item, "pass")->valuestring, "screen");
      /* the model refuses only a gate_up whose CUBIN spills or does not fit, and says so */
      const cJSON *reason = cJSON_GetObjectItem(item, "reason");
      cr_assert(cJSON_GetObjectItem(item, "accepted")->valueint
                    ? cJSON_IsNumber(cJSON_GetObjectItem(item, "forward_us"))
                    : !is_down && cJSON_IsString(reason) && strstr(reason->valuestring, "spills or does not fit"),
                "%s", line);
      cr_assert_eq(strncmp(cJSON_GetObjectItem(item, "held")->valuestring, is_down ? "gate_up." : "down.", is_down ? 8 : 5),
                   0, "%s", line);
      /* the model's time is its own; only a measured backend splits it */
      cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(item, "wall_ms")) && cJSON_IsNull(cJSON_GetObjectItem(item, "check_ms")),
                "%s", line);
    } else {
      cr_assert_str_eq(kind, "pick");
      picks++;
      int32_t m = cJSON_GetObjectItem(item, "m")->valueint;
      if (strcmp(cJSON_GetObjectItem(item, "op")->valuestring, "down") == 0)
        cr_assert_str_eq(cJSON_GetObjectItem(item, "variant")->valuestring, down.entries[m == 1 ? 0 : 1].variant);
    }
    cJSON_Delete(item);
  }
  cr_assert_eq(shapes, 1);
  cr_assert_eq(m_lines, 2);
  cr_assert_eq(measures[0], 2 * candidates[0], "every gate_up candidate at M = 1 and 64");
  cr_assert_eq(measures[1], 2 * candidates[1], "every down candidate at M = 1 and 64");
  cr_assert_eq(picks, 4);
  free(text);
  volt8_tuning_table_free(&down);
}

Test(derive, log_refuses_a_fifo_without_waiting) {
  tune_options options;
  char error[1024], log_path[8192];
  snprintf(log_path, sizeof log_path, "%s/fifo", temp_dir);
  cr_assert_eq(mkfifo(log_path, 0600), 0);
  char *argv[] = {"tune", "--derive", "sm_70", "--m", "1", "--out", temp_dir, "--log", log_path};
  cr_assert_eq(tune_options_parse(9, argv, &options, error, sizeof error), 0, "%s", error);
  tune_outcome outcome;
  cr_assert_eq(tune_run(&options, "volt8 tune", NULL, 0, &outcome, error, sizeof error), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(error, "not a regular file"), "%s", error);
  cr_assert_not_null(strstr(error, log_path), "%s", error);
  cr_assert_eq(outcome.shapes_done, 0);
}

/* An --out that is a file, or lies under one, is a bad argument naming --out and the path (it said
 * "File exists"); so is a --log that is a folder. Nothing is compiled first. */
Test(derive, out_that_is_not_a_directory_is_named) {
  char file[8192], under[8192], out[4096], err[4096];
  test_write_text(temp_dir, "a_file", "not a folder\n");
  snprintf(file, sizeof file, "%s/a_file", temp_dir);
  snprintf(under, sizeof under, "%s/a_file/tables", temp_dir);
  const char *outs[2] = {file, under};
  for (int i = 0; i < 2; i++) {
    char *args[] = {"tune", "--derive", "sm_70", "--m", "1", "--out", (char *)outs[i], NULL};
    cr_assert_eq(test_run_volt8(args, out, sizeof out, err, sizeof err), 2, "%s", err);
    char expected[8400];
    snprintf(expected, sizeof expected, "--out %s is not a directory", outs[i]);
    cr_assert_not_null(strstr(err, expected), "%s", err);
    cr_assert_null(strstr(err, "File exists"), "%s", err);
  }
  char *log_dir[] = {"tune", "--derive", "sm_70", "--m", "1", "--out", temp_dir, "--log", temp_dir, NULL};
  cr_assert_eq(test_run_volt8(log_dir, out, sizeof out, err, sizeof err), 2, "%s", err);
  cr_assert_not_null(strstr(err, "not a regular file"), "%s", err);
  char *text = read_text(file);
  cr_assert_str_eq(text, "not a folder\n");
  free(text);
}

/* ---- bench and tune options, report shapes ---- */

TestSuite(bench_args, .timeout = 60);

Test(bench_args, defaults_are_the_reference_tp4_rank) {
  bench_options options;
  char error[256];
  char *argv[] = {"bench"};
  cr_assert_eq(bench_options_parse(1, argv, &options, error, sizeof error), 0, "%s", error);
  cr_assert_eq(options.shape.intermediate, 160);
  cr_assert_eq(options.shape.intermediate_offset, 32);
  cr_assert_eq(options.shape.num_experts, 512);
  cr_assert_eq(options.top_k, 10);
  cr_assert_eq(options.m_count, 8);
  cr_assert_eq(options.m_values[0], 1);
  cr_assert_eq(options.m_values[7], 128);
  cr_assert_eq(options.baselines, 1);
}

Test(bench_args, options_parse) {
  bench_options options;
  char error[256];
  char *argv[] = {"bench", "--tp", "8", "--rank", "3", "--m", "64,1,8", "--variants", "gate_up.a,down.b",
                  "--json", "out.json", "--svg", "out.svg", "--no-baselines", "--sets", "12", "--target-arch", "sm_70"};
  cr_assert_eq(bench_options_parse(18, argv, &options, error, sizeof error), 0, "%s", error);
  cr_assert_eq(options.shape.intermediate, 80);
  cr_assert_eq(options.shape.intermediate_offset, 112, "80 * 3 = 240, 240 mod 128 = 112");
  cr_assert(options.m_count == 3 && options.m_values[0] == 1 && options.m_values[1] == 8 && options.m_values[2] == 64);
  cr_assert_str_eq(options.gate_up, "gate_up.a");
  cr_assert_str_eq(options.down, "down.b");
  cr_assert_str_eq(options.json_path, "out.json");
  cr_assert_str_eq(options.svg_path, "out.svg");
  cr_assert_str_eq(options.target_arch, "sm_70");
  cr_assert_eq(options.baselines, 0);
  cr_assert_eq(options.input_sets, 12);
  char *shape_argv[] = {"bench", "--shape", "hidden=1024"};
  cr_assert_eq(bench_options_parse(3, shape_argv, &options, error, sizeof error), 0, "%s", error);
  cr_assert(options.shape.hidden == 1024 && options.shape.intermediate == 160 && options.shape.intermediate_offset == 32,
            "--shape hidden=1024 keeps the default's other keys: H %d I %d offset %d", options.shape.hidden,
            options.shape.intermediate, options.shape.intermediate_offset);
}

Test(bench_args, bad_arguments_say_which) {
  struct { int argc; char *argv[5]; const char *message; } cases[] = {
      {2, {"bench", "--frobnicate"}, "unknown argument \"--frobnicate\""},
      {3, {"bench", "--m", "1,0"}, "--m"},
      {3, {"bench", "--m", "1,"}, "--m"},
      {3, {"bench", "--m", "4,4"}, "twice"},
      {3, {"bench", "--tp", "3"}, "--tp 3"},
      {3, {"bench", "--rank", "4"}, "--rank 4 is outside 0..3 (the ranks of --tp 4 are 0..3)"},
      {3, {"bench", "--tp", "65"}, "--tp 65 is not a valid TP size (a TP size is a whole number in 1..64)"},
      {3, {"bench", "--variants", "onlyone"}, "--variants"},
      {2, {"bench", "--json"}, "--json needs a value"},
      {5, {"bench", "--tp", "4", "--shape", "hidden=1024"}, "exclude"},
      {3, {"bench", "--shape", "hidden=1000"}, "--shape \"hidden=1000\": hidden=1000 is not valid"},
      {5, {"bench", "--shape", "hidden=1024", "--shape", "hidden=2048"}, "--shape is given twice"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    bench_options options;
    char error[256] = "";
    cr_assert_eq(bench_options_parse(cases[i].argc, cases[i].argv, &options, error, sizeof error), -1,
                 "case %zu accepted", i);
    cr_assert_not_null(strstr(error, cases[i].message), "case %zu: \"%s\" lacks \"%s\"", i, error, cases[i].message);
  }
  char *help[] = {"bench", "--help"};
  bench_options options;
  char error[256];
  cr_assert_eq(bench_options_parse(2, help, &options, error, sizeof error), 1);
}

/* --m takes what a forward takes at the run's top-k, M x top-k <= 2^30 routed pairs, whichever flag
 * sets the top-k and wherever it stands (not 2^20, as before); --quick and --m: the later wins. */
Test(bench_args, token_counts_within_the_forwards_bound) {
  struct { int argc; char *argv[6]; int32_t largest; } accepted[] = {
      {3, {"bench", "--m", "1,70000,1048577"}, 1048577},
      {3, {"bench", "--m", "107374182"}, VOLT8_MAX_ROUTED_PAIRS / 10},
      {5, {"bench", "--m", "16777216", "--top-k", "64"}, VOLT8_MAX_ROUTED_PAIRS / 64},
      {5, {"bench", "--m", "134217728", "--model", "deepseek-v3"}, VOLT8_MAX_ROUTED_PAIRS / 8},
      {4, {"bench", "--m", "5,6", "--quick"}, 64},
      {4, {"bench", "--quick", "--m", "5,6"}, 6},
  };
  for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
    bench_options options;
    char error[512] = "";
    cr_assert_eq(bench_options_parse(accepted[i].argc, accepted[i].argv, &options, error, sizeof error), 0,
                 "case %zu: %s", i, error);
    cr_assert_eq(options.m_values[options.m_count - 1], accepted[i].largest, "case %zu", i);
  }
  struct { int argc; char *argv[6]; const char *message; } refused[] = {
      {3, {"bench", "--m", "107374183"}, "--m: item 1, 107374183, is outside 1..107374182"},
      {5, {"bench", "--m", "16777217", "--top-k", "64"}, "16777216 tokens at top-k 64"},
      {5, {"bench", "--top-k", "64", "--m", "1,16777217"}, "--m: item 2, 16777217, is outside 1..16777216"},
      {5, {"bench", "--m", "134217729", "--model", "deepseek-v3"}, "134217728 tokens at top-k 8"},
      {3, {"bench", "--m", "8,08"}, "--m: item 2, \"08\", has a leading zero"},
      {4, {"bench", "--quick", "--m", "0"}, "--m: item 1, 0, is outside"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    bench_options options;
    char error[512] = "";
    cr_assert_eq(bench_options_parse(refused[i].argc, refused[i].argv, &options, error, sizeof error), -1,
                 "case %zu accepted", i);
    cr_assert_not_null(strstr(error, refused[i].message), "case %zu: \"%s\" lacks \"%s\"", i, error,
                       refused[i].message);
  }
}

Test(bench_args, chain_parses_and_bad_values_say_which) {
  bench_options options;
  char error[256] = "";
  char *argv[] = {"bench", "--chain", "32", "--m", "1,8"};
  cr_assert_eq(bench_options_parse(5, argv, &options, error, sizeof error), 0, "%s", error);
  cr_assert_eq(options.chain, 32);
  char *plain[] = {"bench"};
  cr_assert_eq(bench_options_parse(1, plain, &options, error, sizeof error), 0, "%s", error);
  cr_assert_eq(options.chain, 0, "no chained timing unless asked for");
  const char *bad[] = {"1", "0", "-4", "257", "8x", "", "+8", " 8", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *bad_argv[] = {"bench", "--chain", (char *)bad[i]};
    error[0] = '\0';
    cr_assert_eq(bench_options_parse(3, bad_argv, &options, error, sizeof error), -1, "--chain %s accepted", bad[i]);
    char expected[96];
    int in_digits = bad[i][0] && strspn(bad[i] + (bad[i][0] == '-'), "0123456789") == strlen(bad[i] + (bad[i][0] == '-'));
    snprintf(expected, sizeof expected, in_digits ? "--chain %s is not a valid chain length" : "--chain \"%s\" is not a whole number",
             bad[i]);
    cr_assert_not_null(strstr(error, expected), "\"%s\" lacks \"%s\"", error, expected);
    cr_assert_not_null(strstr(error, "2..256"), "\"%s\" does not say what is valid", error);
  }
  char *missing[] = {"bench", "--chain"};
  cr_assert_eq(bench_options_parse(2, missing, &options, error, sizeof error), -1);
  cr_assert_not_null(strstr(error, "--chain needs a value"), "%s", error);
}

Test(bench_args, tune_options_parse) {
  tune_options options;
  char error[256];
  char *argv[] = {"tune", "--tp", "1,2,4,8", "--out", "dir", "--m", "1,2", "--jobs", "3"};
  cr_assert_eq(tune_options_parse(9, argv, &options, error, sizeof error), 0, "%s", error);
  cr_assert_eq(options.shape_count, 4);
  int32_t intermediate[4] = {640, 320, 160, 80}, offset[4] = {0, 64, 32, 80};
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(options.shapes[i].intermediate, intermediate[i], "shape %d", i);
    cr_assert_eq(options.shapes[i].intermediate_offset, offset[i], "shape %d", i);
  }
  cr_assert_str_eq(options.out_dir, "dir");
  cr_assert_eq(options.jobs, 3);
  char *bad[] = {"tune", "--derive", "sm_80"};
  cr_assert_eq(tune_options_parse(3, bad, &options, error, sizeof error), -1);
  cr_assert_not_null(strstr(error, "--derive"), "%s", error);
  char *defaults[] = {"tune"};
  cr_assert_eq(tune_options_parse(1, defaults, &options, error, sizeof error), 0);
  cr_assert_eq(options.shape_count, 1);
  cr_assert_str_eq(options.out_dir, "tuning/tables");
}

Test(bench_args, model_names_a_rank_and_its_top_k) {
  for (int32_t m = 0; m < volt8_model_count(); m++) {
    const volt8_model *model = volt8_model_at(m);
    for (int32_t tp = 1; tp <= 8; tp *= 2) {
      for (int32_t rank = 0; rank < tp; rank++) {
        char tp_text[8], rank_text[8], error[256];
        snprintf(tp_text, sizeof tp_text, "%d", tp);
        snprintf(rank_text, sizeof rank_text, "%d", rank);
        char *argv[] = {"bench", "--model", (char *)model->name, "--tp", tp_text, "--rank", rank_text};
        bench_options options;
        cr_assert_eq(bench_options_parse(7, argv, &options, error, sizeof error), 0, "%s", error);
        int32_t width = model->intermediate / tp;
        cr_assert(options.shape.hidden == model->hidden && options.shape.intermediate == width &&
                      options.shape.intermediate_offset == width * rank % 128 &&
                      options.shape.num_experts == model->num_experts && options.top_k == model->top_k,
                  "%s TP%d rank %d: H %d I %d offset %d E %d top-%d", model->name, tp, rank, options.shape.hidden,
                  options.shape.intermediate, options.shape.intermediate_offset, options.shape.num_experts,
                  options.top_k);
      }
    }
  }
  bench_options options;
  char error[256];
  char *defaults[] = {"bench", "--model", "glm-4.5-air", "--top-k", "16"};
  cr_assert_eq(bench_options_parse(5, defaults, &options, error, sizeof error), 0, "%s", error);
  cr_assert(options.shape.intermediate == 352 && options.shape.intermediate_offset == 96 && options.top_k == 16,
            "--model alone is TP4 rank 1 (I 352 at offset 96) and --top-k wins: I %d offset %d top-%d",
            options.shape.intermediate, options.shape.intermediate_offset, options.top_k);
}

Test(bench_args, model_errors_say_which) {
  struct { int argc; char *argv[5]; const char *message; } cases[] = {
      {3, {"bench", "--model", "llama"}, "unknown model \"llama\" (known: deepseek-v3, qwen3-next, glm-4.5, glm-4.5-air, reference)"},
      {5, {"bench", "--model", "qwen3-next", "--tp", "64"}, "qwen3-next at --tp 64"},
      {5, {"bench", "--model", "glm-4.5", "--shape", "hidden=1024"}, "--model and --shape exclude"},
      {5, {"bench", "--model", "glm-4.5", "--rank", "4"}, "--rank 4 is outside 0..3 (the ranks of --tp 4 are 0..3)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    bench_options options;
    char error[256] = "";
    cr_assert_eq(bench_options_parse(cases[i].argc, cases[i].argv, &options, error, sizeof error), -1,
                 "case %zu accepted", i);
    cr_assert_not_null(strstr(error, cases[i].message), "case %zu: \"%s\" lacks \"%s\"", i, error, cases[i].message);
  }
  tune_options tune;
  char error[256] = "";
  char *unknown[] = {"tune", "--tp", "4", "--model", "llama"};
  cr_assert_eq(tune_options_parse(5, unknown, &tune, error, sizeof error), -1);
  cr_assert_not_null(strstr(error, "unknown model \"llama\""), "%s", error);
  char *too_narrow[] = {"tune", "--model", "qwen3-next", "--tp", "8,64"};
  cr_assert_eq(tune_options_parse(5, too_narrow, &tune, error, sizeof error), -1);
  cr_assert_not_null(strstr(error, "qwen3-next at --tp 64"), "%s", error);
}

Test(bench_args, tune_takes_a_model_before_or_after_its_tp_sizes) {
  const volt8_model *model = volt8_model_find("glm-4.5-air");
  cr_assert_not_null(model);
  char *orders[2][7] = {{"tune", "--tp", "1,2,4,8", "--model", "glm-4.5-air", "--derive", "sm_70"},
                        {"tune", "--model", "glm-4.5-air", "--derive", "sm_70", "--tp", "1,2,4,8"}};
  for (int order = 0; order < 2; order++) {
    tune_options options;
    char error[256];
    cr_assert_eq(tune_options_parse(7, orders[order], &options, error, sizeof error), 0, "%s", error);
    cr_assert_eq(options.shape_count, 4);
    cr_assert_eq(options.top_k, model->top_k);
    for (int i = 0; i < 4; i++) {
      int32_t tp = 1 << i, width = model->intermediate / tp;
      cr_assert(options.shapes[i].hidden == model->hidden && options.shapes[i].intermediate == width &&
                    options.shapes[i].intermediate_offset == (tp > 1 ? width % 128 : 0) &&
                    options.shapes[i].num_experts == model->num_experts,
                "order %d TP%d: H %d I %d offset %d", order, tp, options.shapes[i].hidden,
                options.shapes[i].intermediate, options.shapes[i].intermediate_offset);
    }
  }
}

TestSuite(bench_report, .timeout = 60);

static void fake_report(bench_report *report) {
  memset(report, 0, sizeof *report);
  snprintf(report->command, sizeof report->command, "volt8 bench --m 1,8");
  snprintf(report->device_name, sizeof report->device_name, "Fake <GPU>");
  snprintf(report->device_arch, sizeof report->device_arch, "sm_90");
  snprintf(report->target_arch, sizeof report->target_arch, "sm_90");
  report->copy_gbps = 4000.0;
  report->launch_floor[0].median_us = 3.5;
  report->launch_floor[1].median_us = 4.5;
  report->launch_floor[2].median_us = 5.5;
  report->shape = reference_shape();
  report->top_k = 10;
  report->count = 2;
  for (int i = 0; i < 2; i++) {
    bench_m_result *result = &report->results[i];
    result->m = i == 0 ? 1 : 8;
    result->bytes_fp8 = i == 0 ? 12.0e6 : 92.0e6;
    result->methods[BENCH_METHOD_VOLT8] = (bench_method_result){.ran = 1, .bytes = result->bytes_fp8, .relative_l2 = 2e-4};
    result->methods[BENCH_METHOD_VOLT8].timing.median_us = i == 0 ? 6.0 : 30.0;
    result->methods[BENCH_METHOD_CUBLASLT_FP16] = (bench_method_result){.ran = 1, .bytes = 2 * result->bytes_fp8,
                                                                         .relative_l2 = 3e-4};
    result->methods[BENCH_METHOD_CUBLASLT_FP16].timing.median_us = i == 0 ? 24.0 : 90.0;
    snprintf(result->methods[BENCH_METHOD_GROUPED_FP16].reason, 64, "no cuBLAS: missing");
    /* C: sorted and padded, at M = 8 only (at M = 1 it failed) */
    if (i == 1) {
      result->methods[BENCH_METHOD_SORTED_FP16] = (bench_method_result){.ran = 1, .bytes = 2 * result->bytes_fp8,
                                                                        .relative_l2 = 6.3e-4};
      result->methods[BENCH_METHOD_SORTED_FP16].timing.median_us = 45.0;
      result->sorted_capacity = 32;
    } else {
      snprintf(result->methods[BENCH_METHOD_SORTED_FP16].reason, 64, "CUDA_ERROR_OUT_OF_MEMORY: scratch");
    }
  }
  bench_report_derive(report);
}

Test(bench_report, derived_figures) {
  bench_report *report = malloc(sizeof *report);
  fake_report(report);
  const bench_m_result *eight = &report->results[1];
  cr_assert_float_eq(eight->floor_us, 23.0, 1e-9, "92 MB at 4000 GB/s");
  cr_assert_float_eq(eight->methods[BENCH_METHOD_VOLT8].gbps, 92.0e6 / 30.0e3, 1e-9);
  cr_assert_float_eq(eight->methods[BENCH_METHOD_VOLT8].copy_fraction, 92.0e6 / 30.0e3 / 4000.0, 1e-12);
  cr_assert_float_eq(eight->methods[BENCH_METHOD_CUBLASLT_FP16].volt8_speedup, 3.0, 1e-12);
  cr_assert_float_eq(eight->methods[BENCH_METHOD_SORTED_FP16].volt8_speedup, 1.5, 1e-12, "C: 45 us against 30");
  cr_assert_float_eq(report->results[0].methods[BENCH_METHOD_SORTED_FP16].volt8_speedup, 0.0, 0.0, "C did not run at M = 1");
  free(report);
}

Test(bench_report, json_shape) {
  bench_report *report = malloc(sizeof *report);
  fake_report(report);
  char *text = bench_report_json(report);
  cr_assert_not_null(text);
  cJSON *root = cJSON_Parse(text);
  cr_assert_not_null(root, "the report is not JSON");
  cr_assert_str_eq(cJSON_GetObjectItem(root, "schema")->valuestring, BENCH_JSON_SCHEMA);
  cr_assert_float_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "device"), "copy_gbps")->valuedouble, 4000.0, 1e-9);
  cJSON *floor = cJSON_GetObjectItem(root, "launch_floor_us");
  cr_assert_float_eq(cJSON_GetObjectItem(floor, "two_kernels")->valuedouble, 3.5, 1e-9);
  cr_assert_float_eq(cJSON_GetObjectItem(floor, "three_kernels")->valuedouble, 4.5, 1e-9);
  cr_assert_float_eq(cJSON_GetObjectItem(floor, "four_kernels")->valuedouble, 5.5, 1e-9);
  const char *top[] = {"library_version", "command", "date", "shape", "memory", "settings", "libraries", "results"};
  for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) cr_assert_not_null(cJSON_GetObjectItem(root, top[i]), "%s", top[i]);
  cJSON *results = cJSON_GetObjectItem(root, "results");
  cr_assert_eq(cJSON_GetArraySize(results), 2);
  cJSON *first = cJSON_GetArrayItem(results, 0);
  cr_assert_eq(cJSON_GetObjectItem(first, "m")->valueint, 1);
  cJSON *volt8 = cJSON_GetObjectItem(first, "volt8");
  const char *fields[] = {"median_us", "p10_us", "p90_us", "gbps", "copy_fraction", "relative_l2", "bytes"};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) cr_assert_not_null(cJSON_GetObjectItem(volt8, fields[i]), "%s", fields[i]);
  cr_assert_float_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(first, "cublaslt_fp16"), "volt8_speedup")->valuedouble, 4.0, 1e-9);
  cJSON *grouped = cJSON_GetObjectItem(first, "cublas_grouped_fp16");
  cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(grouped, "ran")));
  cr_assert_str_eq(cJSON_GetObjectItem(grouped, "reason")->valuestring, "no cuBLAS: missing");
  /* C and every method's rel L2 at every M it ran */
  cJSON *sorted_one = cJSON_GetObjectItem(first, "sorted_padded_fp16");
  cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(sorted_one, "ran")));
  cr_assert_null(cJSON_GetObjectItem(sorted_one, "capacity_rows"));
  cJSON *second = cJSON_GetArrayItem(results, 1);
  cJSON *sorted = cJSON_GetObjectItem(second, "sorted_padded_fp16");
  cr_assert_float_eq(cJSON_GetObjectItem(sorted, "median_us")->valuedouble, 45.0, 1e-9);
  cr_assert_float_eq(cJSON_GetObjectItem(sorted, "volt8_speedup")->valuedouble, 1.5, 1e-9);
  cr_assert_float_eq(cJSON_GetObjectItem(sorted, "relative_l2")->valuedouble, 6.3e-4, 1e-15);
  cr_assert_eq(cJSON_GetObjectItem(sorted, "capacity_rows")->valueint, 32);
  for (int r = 0; r < 2; r++) {
    cJSON *row = cJSON_GetArrayItem(results, r);
    cr_assert_float_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(row, "volt8"), "relative_l2")->valuedouble, 2e-4, 1e-15);
    cr_assert_float_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(row, "cublaslt_fp16"), "relative_l2")->valuedouble, 3e-4, 1e-15);
  }
  cJSON_Delete(root);
  free(text);
  free(report);
}

/* fake_report with --chain 32: M = 1 chained, M = 8 failed. */
static void fake_chained_report(bench_report *report) {
  fake_report(report);
  report->chain = 32;
  bench_m_result *one = &report->results[0];
  one->chained = (bench_method_result){.ran = 1, .bytes = one->bytes_fp8, .relative_l2 = 2e-4};
  one->chained.timing.median_us = 4.0;
  snprintf(report->results[1].chained.reason, sizeof report->results[1].chained.reason, "capture failed");
  bench_report_derive(report);
}

Test(bench_report, chained_timing_in_json_text_and_markdown) {
  bench_report *report = malloc(sizeof *report);
  fake_chained_report(report);
  cr_assert_float_eq(report->results[0].chained.gbps, 12.0e6 / 4.0e3, 1e-9);
  char *text = bench_report_json(report);
  cJSON *root = cJSON_Parse(text);
  cr_assert_not_null(root);
  cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "settings"), "chain")->valueint, 32);
  cJSON *results = cJSON_GetObjectItem(root, "results");
  cJSON *chained = cJSON_GetObjectItem(cJSON_GetArrayItem(results, 0), "volt8_chained");
  cr_assert_not_null(chained, "%s", text);
  cr_assert_float_eq(cJSON_GetObjectItem(chained, "median_us")->valuedouble, 4.0, 1e-9);
  cr_assert_float_eq(cJSON_GetObjectItem(chained, "copy_fraction")->valuedouble, 12.0e6 / 4.0e3 / 4000.0, 1e-12);
  cJSON *failed = cJSON_GetObjectItem(cJSON_GetArrayItem(results, 1), "volt8_chained");
  cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(failed, "ran")));
  cr_assert_str_eq(cJSON_GetObjectItem(failed, "reason")->valuestring, "capture failed");
  cJSON_Delete(root);
  free(text);
  char *markdown = bench_report_markdown(report);
  cr_assert_not_null(strstr(markdown, "volt8, a forward of 32 in one graph (us) |"), "%s", markdown);
  cr_assert_not_null(strstr(markdown, "| 4.0 |\n"), "%s", markdown);
  free(markdown);
  char *printed = NULL;
  size_t printed_size = 0;
  FILE *stream = open_memstream(&printed, &printed_size);
  bench_report_print(report, stream);
  fclose(stream);
  cr_assert_not_null(strstr(printed, "32 forwards in one graph"), "%s", printed);
  cr_assert_not_null(strstr(printed, "capture failed"), "%s", printed);
  /* the printed table: every method's time, ratio and rel L2 at every M it ran, C's slot rows */
  cr_assert_not_null(strstr(printed, "C_us   C/v8   rel_l2"), "%s", printed);
  cr_assert_not_null(strstr(printed, "|      90.0  3.00x  3.0e-04 |         -      -        - |      45.0  1.50x  6.3e-04"),
                     "%s", printed);
  cr_assert_not_null(strstr(printed, "C: 32 rows an expert"), "%s", printed);
  cr_assert_not_null(strstr(printed, "sorted+padded cuBLASLt FP16 (C) did not run: CUDA_ERROR_OUT_OF_MEMORY: scratch"),
                     "%s", printed);
  free(printed);
  fake_report(report);
  text = bench_report_json(report);
  cr_assert_null(strstr(text, "volt8_chained"), "no chained entry unless asked for");
  free(text);
  free(report);
}

Test(bench_report, svg_and_markdown) {
  bench_report *report = malloc(sizeof *report);
  fake_report(report);
  char *svg = bench_report_svg(report);
  cr_assert_not_null(svg);
  cr_assert_eq(strncmp(svg, "<svg", 4), 0);
  cr_assert_not_null(strstr(svg, "</svg>"));
  cr_assert_not_null(strstr(svg, "<polyline"));
  cr_assert_not_null(strstr(svg, "Fake &lt;GPU&gt;"), "device names are escaped");
  for (int method = 0; method < BENCH_METHOD_COUNT; method++)
    cr_assert_not_null(strstr(svg, bench_method_label(method)), "the legend lacks %s", bench_method_label(method));
  cr_assert_null(strstr(svg, "nan"), "no NaN coordinates");
  char *markdown = bench_report_markdown(report);
  cr_assert_not_null(strstr(markdown, "| M | byte floor (us) | volt8 (us)"), "%s", markdown);
  cr_assert_not_null(strstr(markdown, "| C: sorted+padded FP16 (us) | C / volt8 | rel. L2 volt8 / A / B / C |"), "%s",
                     markdown);
  cr_assert_not_null(strstr(markdown, "| 8 | 23.0 | 30.0 |"), "%s", markdown);
  /* every point's rel L2 of every method, "-" for those that did not run */
  cr_assert_not_null(strstr(markdown, "| 90.0 | 3.00x | - | - | 45.0 | 1.50x | 2.0e-04 / 3.0e-04 / - / 6.3e-04 |"), "%s",
                     markdown);
  cr_assert_not_null(strstr(markdown, "| 24.0 | 4.00x | - | - | - | - | 2.0e-04 / 3.0e-04 / - / - |"), "%s", markdown);
  cr_assert_not_null(strstr(markdown, "3.5 us for 2 kernels"), "%s", markdown);
  cr_assert_not_null(strstr(markdown, "4.5 us for 3 (no route pass)"), "%s", markdown);
  cr_assert_not_null(strstr(markdown, "5.5 us for 4"), "%s", markdown);
  free(svg);
  free(markdown);
  free(report);
}

/* C's slot: the busiest expert's pairs in any set, ids outside [0, E) left out, rounded up to 16. */
Test(bench_report, sorted_capacity_is_the_busiest_expert_rounded_up) {
  int32_t first[6] = {0, 1, 1, 2, 1, 3}, second[6] = {2, 2, 2, 2, 2, 9};
  bench_input_set sets[2] = {{.ids = first}, {.ids = second}};
  bench_inputs inputs = {.num_tokens = 3, .top_k = 2, .count = 2, .sets = sets};
  int32_t capacity = 0;
  cr_assert_eq(bench_sorted_capacity(NULL, &inputs, 4, &capacity), VOLT8_OK);
  cr_expect_eq(capacity, BENCH_SORTED_ROW_ALIGN, "5 pairs of expert 2: one row group");
  int32_t many[40];
  for (int i = 0; i < 40; i++) many[i] = i < 33 ? 1 : 0;
  bench_input_set one = {.ids = many};
  bench_inputs more = {.num_tokens = 40, .top_k = 1, .count = 1, .sets = &one};
  cr_assert_eq(bench_sorted_capacity(NULL, &more, 4, &capacity), VOLT8_OK);
  cr_expect_eq(capacity, 48, "33 pairs: three groups of 16");
  for (int i = 0; i < 40; i++) many[i] = i < 32 ? 3 : -1;
  cr_assert_eq(bench_sorted_capacity(NULL, &more, 4, &capacity), VOLT8_OK);
  cr_expect_eq(capacity, 32, "32 pairs fill two groups exactly; -1 ids count nowhere");
  for (int i = 0; i < 40; i++) many[i] = 7;
  cr_assert_eq(bench_sorted_capacity(NULL, &more, 4, &capacity), VOLT8_OK);
  cr_expect_eq(capacity, BENCH_SORTED_ROW_ALIGN, "no pair in [0, E): still one group");
}

Test(bench_report, reference_shapes) {
  volt8_moe_shape shape;
  int32_t intermediate[4] = {640, 320, 160, 80};
  int32_t tps[4] = {1, 2, 4, 8};
  const volt8_model *reference = volt8_model_find(VOLT8_MODEL_REFERENCE);
  char error[512] = "";
  for (int i = 0; i < 4; i++) {
    for (int32_t rank = 0; rank < tps[i]; rank++) {
      cr_assert_eq(volt8_tools_rank_shape(reference, tps[i], rank, &shape, error, sizeof error), 0, "%s", error);
      cr_assert_eq(shape.intermediate, intermediate[i]);
      cr_assert_eq(shape.intermediate_offset, intermediate[i] * rank % 128, "TP%d rank %d", tps[i], rank);
    }
  }
  cr_assert_eq(volt8_tools_rank_shape(reference, 16, 0, &shape, error, sizeof error), -1,
               "640 / 16 = 40 is not a multiple of 16");
  cr_assert_not_null(strstr(error, "reference at --tp 16 --rank 0: "), "%s", error);
  cr_assert_eq(volt8_tools_rank_shape(reference, 4, 4, &shape, error, sizeof error), -1);
}

TestSuite(bench_support, .timeout = 120);

/* The support kernels live in the bench library (harness/bench_kernels.cu), not in libvolt8: their
 * source expands there, with the library's templates/ included, and compiles for compute_70. */
Test(bench_support, kernels_expand_from_the_bench_library_and_compile) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  cr_assert_null(volt8_embedded_find("harness/bench_kernels.cu"), "the shipped library embeds the bench kernels");
  cr_assert_null(volt8_embedded_find("templates/bench_kernels.cu"), "the shipped library embeds the bench kernels");
  char *source = NULL;
  cr_assert_eq(bench_support_source(ctx, &source), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_expect(strstr(source, "// generated from harness/bench_kernels.cu"), "no generated-from line:\n%.300s", source);
  cr_expect(strstr(source, "#line 1 \"templates/moe_common.cu\""), "moe_common.cu not included");
  cr_expect(strstr(source, "bench_weighted_reduce"), "no bench_weighted_reduce in the expanded source");
  cr_expect(strstr(source, "bench_pad_route") && strstr(source, "bench_pad_gather"), "no sort and pad of peer C");
  volt8_kernel_load_request request = {"volt8_bench_kernels", source, 70, VOLT8_IMAGE_PTX, 0, NULL, 0, "bench: "};
  volt8_status status = volt8_kernel_load(ctx, &request, NULL, NULL, NULL);
  if (status == VOLT8_ERR_ARCH_UNSUPPORTED) cr_skip_test("no NVRTC for compute_70: %s", volt8_last_error(ctx));
  cr_expect_eq(status, VOLT8_OK, "%s", volt8_last_error(ctx));
  free(source);
  volt8_ctx_destroy(ctx);
}

/* The check's scan of a copied-back output: the first NaN or infinity (the poison included) wherever it
 * lies, in a whole block, at a block's edge or in the tail, and count when every value is finite (all
 * finite exponents, subnormals and zeros of both signs). */
Test(bench_support, first_not_finite_names_the_first_nan_or_infinity) {
  const size_t count = 3 * 4096 + 17;
  uint16_t *halves = malloc(count * sizeof *halves);
  cr_assert_not_null(halves);
  for (size_t i = 0; i < count; i++) {
    uint16_t bits = (uint16_t)(i * 40503u);
    if ((bits & 0x7C00u) == 0x7C00u) bits &= 0xBFFFu; /* exponent 31 -> 15: finite */
    halves[i] = bits;
  }
  halves[1] = 0x0000u, halves[2] = 0x8000u, halves[3] = 0x0001u, halves[4] = 0x7BFFu, halves[5] = 0xFBFFu;
  cr_assert_eq(bench_first_not_finite(halves, count), count);
  cr_assert_eq(bench_first_not_finite(halves, 0), 0);
  const size_t places[] = {0, 17, 4095, 4096, 2 * 4096 + 5, 3 * 4096 - 1, 3 * 4096, count - 1};
  const uint16_t bad[] = {0x7C00u, 0xFC00u, 0x7E00u, 0x7C01u, 0xFFFFu};
  for (size_t p = 0; p < sizeof places / sizeof places[0]; p++)
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
      const size_t at = places[p];
      const uint16_t kept = halves[at], last = halves[count - 1];
      halves[at] = bad[b];
      if (at != count - 1) halves[count - 1] = 0x7E00u; /* a later one does not hide it */
      cr_assert_eq(bench_first_not_finite(halves, count), at, "0x%04x at %zu", bad[b], at);
      cr_assert_eq(bench_first_not_finite(halves, at), at, "the values before %zu are finite", at);
      halves[count - 1] = last;
      halves[at] = kept;
    }
  free(halves);
}

#endif /* HAVE_BENCH: the bench support kernels are the bench library's */

#ifdef HAVE_BENCH
/* The bench's and the tuner's problem, hashed: experts of the default shape with 16 experts, seed 7,
 * and three input sets of 1001 tokens at top-k 4. */
static void problem_digests(int32_t threads, char experts_hex[VOLT8_SHA256_HEX_BYTES],
                            char inputs_hex[VOLT8_SHA256_HEX_BYTES]) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.num_experts = 16;
  bench_experts_host host;
  cr_assert_eq(bench_experts_generate(ctx, &shape, 7, threads, &host), VOLT8_OK, "%s", volt8_last_error(ctx));
  bench_inputs inputs;
  cr_assert_eq(bench_inputs_create(ctx, &host, 1001, 4, 3, 7, 0, 0, threads, &inputs), VOLT8_OK, "%s",
               volt8_last_error(ctx));
  volt8_sha256 hasher;
  uint8_t digest[VOLT8_SHA256_BYTES];
  volt8_sha256_init(&hasher);
  volt8_sha256_update(&hasher, host.w13, (size_t)host.dims.w13_bytes_per_expert * 16);
  volt8_sha256_update(&hasher, host.w2, (size_t)host.dims.w2_bytes_per_expert * 16);
  volt8_sha256_update(&hasher, host.s13, (size_t)host.dims.s13_elems_per_expert * 16 * 2);
  volt8_sha256_update(&hasher, host.s2, (size_t)host.dims.s2_elems_per_expert * 16 * 2);
  volt8_sha256_final(&hasher, digest);
  volt8_sha256_hex(digest, experts_hex);
  volt8_sha256_init(&hasher);
  for (int32_t s = 0; s < 3; s++) {
    volt8_sha256_update(&hasher, inputs.sets[s].x, (size_t)1001 * (size_t)shape.hidden * 2);
    volt8_sha256_update(&hasher, inputs.sets[s].ids, 1001 * 4 * sizeof(int32_t));
    volt8_sha256_update(&hasher, inputs.sets[s].weights, 1001 * 4 * sizeof(float));
  }
  volt8_sha256_final(&hasher, digest);
  volt8_sha256_hex(digest, inputs_hex);
  bench_inputs_destroy(ctx, &inputs);
  bench_experts_free(&host);
  volt8_ctx_destroy(ctx);
}

/* Codes and x are drawn on threads, each starting its share of the stream where one thread would
 * reach it: the bytes of one thread for any count, and the bytes the single-threaded draw gave before
 * (the digests below are of that draw, as the H100 tables and benches of 2026-12-06 were measured on). */
Test(bench_problem, draws_the_same_problem_on_any_count_of_threads, .timeout = 120) {
  const char *experts_before = "e1c31d4072c3f64d658660e800ec2d6ade0399163aaf9835964e4e60b86bfb66";
  const char *inputs_before = "5b84d9a84975ece9e5ef2df6263f8a615a687dbea60d61f174bee4cededf5d16";
  const int32_t threads[] = {1, 3, 8};
  for (size_t i = 0; i < sizeof threads / sizeof threads[0]; i++) {
    char experts_hex[VOLT8_SHA256_HEX_BYTES], inputs_hex[VOLT8_SHA256_HEX_BYTES];
    problem_digests(threads[i], experts_hex, inputs_hex);
    cr_assert_str_eq(experts_hex, experts_before, "%d threads: the experts differ", threads[i]);
    cr_assert_str_eq(inputs_hex, inputs_before, "%d threads: the inputs differ", threads[i]);
  }
}
#endif /* HAVE_BENCH */
