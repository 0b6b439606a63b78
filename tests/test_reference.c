/* The double-precision reference against an independent numpy/ml_dtypes oracle
 * (tests/fixtures/make_reference_oracle.py), plus its argument checks, the layout sizes and the
 * error metric. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include "test_support.h"
#include <criterion/parameterized.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "moe/kernels/moe_layout.h"
#include "core/numeric.h"
#include "reference/reference.h"

#ifndef VOLT8_SOURCE_DIR
#error "VOLT8_SOURCE_DIR must name the source tree (tests/CMakeLists.txt defines it)"
#endif

#define ORACLE_SCRIPT VOLT8_SOURCE_DIR "/tests/fixtures/make_reference_oracle.py"
#define ORACLE_PYTHON VOLT8_SOURCE_DIR "/.venv/bin/python3"

extern char **environ;

/* ---- oracle fixtures ---- */

typedef struct oracle_case {
  char name[64];
  volt8_moe_shape shape;
  int32_t num_tokens, top_k;
  uint8_t *w13, *w2;
  uint16_t *s13, *s2, *x;
  int32_t *topk_ids;
  float *topk_weights;
  double *expected;
} oracle_case;

static unsigned test_seed(void) {
  const char *fixed = getenv("VOLT8_TEST_SEED");
  if (fixed && *fixed) return (unsigned)strtoul(fixed, NULL, 10);
  return (unsigned)time(NULL) ^ ((unsigned)getpid() << 16);
}

/* The fixture directory of the running test; removed by its fini, which runs after a failed assertion too. */
static char oracle_dir[4096];

static void remove_oracle_dir(void) {
  test_remove_tree(oracle_dir);
  oracle_dir[0] = '\0';
}

static void run_oracle(const char *out_dir, const char *case_name, unsigned seed) {
  cr_assert(access(ORACLE_PYTHON, X_OK) == 0,
            "no project venv python at %s: run scripts/bootstrap.sh (the README's test command does), "
            "which creates .venv with numpy and ml_dtypes",
            ORACLE_PYTHON);
  char seed_text[32];
  snprintf(seed_text, sizeof seed_text, "%u", seed);
  char *argv[] = {ORACLE_PYTHON, ORACLE_SCRIPT, (char *)out_dir, "--seed", seed_text,
                  "--case",      (char *)case_name, NULL};
  pid_t pid;
  int spawn_error = posix_spawn(&pid, ORACLE_PYTHON, NULL, NULL, argv, environ);
  cr_assert_eq(spawn_error, 0, "could not start %s: %s", ORACLE_PYTHON, strerror(spawn_error));
  int wait_status = 0;
  cr_assert_eq(waitpid(pid, &wait_status, 0), pid, "waitpid on the oracle failed");
  cr_assert(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0,
            "oracle %s --seed %u --case %s failed (exit status %d); its stderr is above", ORACLE_SCRIPT, seed,
            case_name, WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1);
}

static int32_t json_int(const cJSON *object, const char *key) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
  cr_assert(cJSON_IsNumber(item), "manifest: \"%s\" missing or not a number", key);
  return (int32_t)item->valuedouble;
}

/* Loads array `key` of the case, checking it holds exactly `count` elements of `element_bytes`. */
static void *load_array(const char *dir, const cJSON *case_json, const char *key, size_t element_bytes, int64_t count) {
  const cJSON *entry = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(case_json, "files"), key);
  const cJSON *relative = cJSON_GetObjectItemCaseSensitive(entry, "path");
  cr_assert(cJSON_IsString(relative), "manifest: no file for \"%s\"", key);
  char path[8192];
  cr_assert_lt((size_t)snprintf(path, sizeof path, "%s/%s", dir, relative->valuestring), sizeof path, "path too long");
  size_t bytes = 0;
  char *data = test_read_whole(path, &bytes);
  cr_assert_eq(bytes, (size_t)count * element_bytes,
               "%s: %zu bytes, the layout of moe_layout.h expects %lld elements of %zu bytes", path, bytes,
               (long long)count, element_bytes);
  return data;
}

static void load_case(const char *dir, const char *name, oracle_case *out) {
  char path[8192];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  size_t bytes = 0;
  char *text = test_read_whole(path, &bytes);
  cJSON *manifest = cJSON_Parse(text);
  cr_assert_not_null(manifest, "manifest.json does not parse");
  const cJSON *case_json = NULL, *item = NULL;
  cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(manifest, "cases")) {
    const cJSON *case_name = cJSON_GetObjectItemCaseSensitive(item, "name");
    if (cJSON_IsString(case_name) && strcmp(case_name->valuestring, name) == 0) case_json = item;
  }
  cr_assert_not_null(case_json, "manifest has no case %s", name);

  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "%s", name);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.hidden = json_int(case_json, "hidden");
  shape.intermediate = json_int(case_json, "intermediate");
  shape.num_experts = json_int(case_json, "num_experts");
  shape.block_n = json_int(case_json, "block_n");
  shape.block_k = json_int(case_json, "block_k");
  shape.intermediate_offset = json_int(case_json, "intermediate_offset");
  out->shape = shape;
  out->num_tokens = json_int(case_json, "num_tokens");
  out->top_k = json_int(case_json, "top_k");

  volt8_moe_dims dims;
  cr_assert_eq(volt8_moe_dims_compute(NULL, &shape, &dims), VOLT8_OK, "%s: shape rejected: %s", name,
               volt8_last_error(NULL));
  int64_t experts = shape.num_experts, pairs = (int64_t)out->num_tokens * out->top_k;
  int64_t activations = (int64_t)out->num_tokens * shape.hidden;
  out->w13 = load_array(dir, case_json, "w13", 1, experts * dims.w13_bytes_per_expert);
  out->s13 = load_array(dir, case_json, "s13", 2, experts * dims.s13_elems_per_expert);
  out->w2 = load_array(dir, case_json, "w2", 1, experts * dims.w2_bytes_per_expert);
  out->s2 = load_array(dir, case_json, "s2", 2, experts * dims.s2_elems_per_expert);
  out->x = load_array(dir, case_json, "x", 2, activations);
  out->topk_ids = load_array(dir, case_json, "topk_ids", 4, pairs);
  out->topk_weights = load_array(dir, case_json, "topk_weights", 4, pairs);
  out->expected = load_array(dir, case_json, "expected", 8, activations);
  cJSON_Delete(manifest);
  free(text);
}

static void free_case(oracle_case *c) {
  free(c->w13), free(c->s13), free(c->w2), free(c->s2), free(c->x);
  free(c->topk_ids), free(c->topk_weights), free(c->expected);
}

/* Parameters are copied into the test's process by value, so the name is held inline. */
typedef struct oracle_case_param {
  char name[48];
} oracle_case_param;

ParameterizedTestParameters(reference, matches_oracle) {
  /* Must match CASES in make_reference_oracle.py (an unknown name makes the script fail). */
  static oracle_case_param params[] = {
      {"offset0_h256_i128_top2"}, {"offset32_h272_i160_top8"},  {"offset96_h256_i160_top1"},
      {"online_bn1_h320_i96_top3"}, {"one_expert_all_tokens"}, {"invalid_and_repeated_ids"},
      {"seed_width_top10"},
  };
  return cr_make_param_array(oracle_case_param, params, sizeof params / sizeof params[0]);
}

ParameterizedTest(oracle_case_param *param, reference, matches_oracle, .timeout = 120, .fini = remove_oracle_dir) {
  const char *case_name = param->name;
  unsigned seed = test_seed();
  const char *tmp = getenv("TMPDIR");
  char dir[sizeof oracle_dir];
  snprintf(dir, sizeof dir, "%s/volt8-oracle-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  cr_assert_not_null(mkdtemp(dir), "mkdtemp %s failed", dir);
  memcpy(oracle_dir, dir, sizeof dir);
  run_oracle(dir, case_name, seed);
  oracle_case c;
  load_case(dir, case_name, &c);
  remove_oracle_dir();

  size_t count = (size_t)c.num_tokens * (size_t)c.shape.hidden;
  double *got = malloc(count * sizeof(double));
  cr_assert_not_null(got);
  volt8_host_experts experts = VOLT8_HOST_EXPERTS_INIT;
  experts.w13 = c.w13, experts.s13 = c.s13, experts.w2 = c.w2, experts.s2 = c.s2;
  volt8_status status = volt8_reference_moe_forward(NULL, &c.shape, &experts, c.x, c.topk_ids, c.topk_weights,
                                                    c.num_tokens, c.top_k, got);
  cr_assert_eq(status, VOLT8_OK, "%s (seed %u): %s", c.name, seed, volt8_last_error(NULL));

  double max_abs = 0.0;
  for (size_t i = 0; i < count; i++) max_abs = fmax(max_abs, fabs(c.expected[i]));
  cr_assert_gt(max_abs, 0.0, "%s (seed %u): the oracle's output is all zero", c.name, seed);
  /* Both sides are double; only the summation order differs. */
  double tolerance = 1e-11 * max_abs;
  for (size_t i = 0; i < count; i++) {
    cr_assert(fabs(got[i] - c.expected[i]) <= tolerance,
              "%s (seed %u): first difference at token %zu, column %zu: got %.17g, oracle %.17g (tolerance %.3g)",
              c.name, seed, i / (size_t)c.shape.hidden, i % (size_t)c.shape.hidden, got[i], c.expected[i], tolerance);
  }
  double error = 0.0;
  cr_assert_eq(volt8_relative_l2(NULL, c.expected, got, count, &error), VOLT8_OK);
  cr_assert(error <= 1e-12, "%s (seed %u): relative L2 %.3g > 1e-12", c.name, seed, error);
  free(got);
  free_case(&c);
}

/* ---- hand-made inputs ---- */

typedef struct small_moe {
  volt8_moe_shape shape;
  volt8_moe_dims dims;
  uint8_t *w13, *w2;
  uint16_t *s13, *s2;
  volt8_host_experts experts;
} small_moe;

/* Every weight code `code`, every stored scale `scale16_bits`. */
static void small_moe_fill(small_moe *moe, int32_t hidden, int32_t intermediate, int32_t num_experts, uint8_t code,
                           uint16_t scale16_bits) {
  volt8_moe_shape shape = {sizeof(volt8_moe_shape), hidden, intermediate, num_experts, 128, 128, 0, 0, 0};
  moe->shape = shape;
  cr_assert_eq(volt8_moe_dims_compute(NULL, &moe->shape, &moe->dims), VOLT8_OK, "%s", volt8_last_error(NULL));
  size_t w13_bytes = (size_t)(moe->dims.w13_bytes_per_expert * num_experts);
  size_t w2_bytes = (size_t)(moe->dims.w2_bytes_per_expert * num_experts);
  size_t s13_count = (size_t)(moe->dims.s13_elems_per_expert * num_experts);
  size_t s2_count = (size_t)(moe->dims.s2_elems_per_expert * num_experts);
  moe->w13 = malloc(w13_bytes), moe->w2 = malloc(w2_bytes);
  moe->s13 = malloc(s13_count * 2), moe->s2 = malloc(s2_count * 2);
  cr_assert(moe->w13 && moe->w2 && moe->s13 && moe->s2);
  memset(moe->w13, code, w13_bytes);
  memset(moe->w2, code, w2_bytes);
  for (size_t i = 0; i < s13_count; i++) moe->s13[i] = scale16_bits;
  for (size_t i = 0; i < s2_count; i++) moe->s2[i] = scale16_bits;
  volt8_host_experts experts = {sizeof(volt8_host_experts), moe->w13, moe->s13, moe->w2, moe->s2};
  moe->experts = experts;
}

static void small_moe_free(small_moe *moe) { free(moe->w13), free(moe->w2), free(moe->s13), free(moe->s2); }

TestSuite(reference, .timeout = 60);

Test(reference, analytic_uniform_weights) {
  /* Every weight is 1.0 * 2^-8 * 2.0 (code 0x38, stored scale 2.0), every x is 1. */
  small_moe moe;
  small_moe_fill(&moe, 128, 16, 3, 0x38, 0x4000);
  uint16_t x[2 * 128];
  for (int i = 0; i < 2 * 128; i++) x[i] = 0x3C00;
  int32_t ids[2 * 2] = {0, 2, 1, 7};
  float weights[2 * 2] = {0.25f, 0.75f, 0.5f, 0.5f};
  double out[2 * 128];
  cr_assert_eq(volt8_reference_moe_forward(NULL, &moe.shape, &moe.experts, x, ids, weights, 2, 2, out), VOLT8_OK,
               "%s", volt8_last_error(NULL));
  double w = 2.0 / 256.0, y = 128 * w;
  double h = volt8_half_to_double(volt8_half_from_double(y / (1.0 + exp(-y)) * y));
  double z = 16 * h * w;
  for (int c = 0; c < 128; c++) {
    cr_assert_float_eq(out[c], (0.25 + 0.75) * z, 1e-15, "token 0, column %d", c);
    cr_assert_float_eq(out[128 + c], 0.5 * z, 1e-15, "token 1 (second id out of range), column %d", c);
  }
  small_moe_free(&moe);
}

Test(reference, out_of_range_ids_contribute_nothing) {
  small_moe moe;
  small_moe_fill(&moe, 128, 16, 2, 0x38, 0x3C00);
  uint16_t x[128];
  for (int i = 0; i < 128; i++) x[i] = 0x3C00;
  int32_t ids[3] = {-1, 2, INT32_MAX};
  float weights[3] = {1.0f, 1.0f, 1.0f};
  double out[128];
  for (int i = 0; i < 128; i++) out[i] = NAN;
  cr_assert_eq(volt8_reference_moe_forward(NULL, &moe.shape, &moe.experts, x, ids, weights, 1, 3, out), VOLT8_OK);
  for (int i = 0; i < 128; i++) cr_assert(out[i] == 0.0, "column %d: %g", i, out[i]);
  small_moe_free(&moe);
}

Test(reference, nan_weight_code_in_routed_expert_is_rejected) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  small_moe moe;
  small_moe_fill(&moe, 128, 16, 2, 0x38, 0x3C00);
  moe.w2[moe.dims.w2_bytes_per_expert + 5 * 16 + 3] = 0xFF; /* expert 1, row 5, column 3 */
  uint16_t x[128];
  for (int i = 0; i < 128; i++) x[i] = 0x3C00;
  int32_t only_expert_0 = 0, only_expert_1 = 1;
  float weight = 1.0f;
  double out[128];
  cr_assert_eq(volt8_reference_moe_forward(ctx, &moe.shape, &moe.experts, x, &only_expert_0, &weight, 1, 1, out),
               VOLT8_OK, "an unrouted expert is not read: %s", volt8_last_error(ctx));
  cr_assert_eq(volt8_reference_moe_forward(ctx, &moe.shape, &moe.experts, x, &only_expert_1, &weight, 1, 1, out),
               VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(ctx), "w2 of expert 1 holds the E4M3 NaN code 0xFF at row 5, column 3"),
            "message: %s", volt8_last_error(ctx));
  moe.w2[moe.dims.w2_bytes_per_expert + 5 * 16 + 3] = 0x38;
  moe.s13[moe.dims.s13_elems_per_expert] = 0x7C00; /* expert 1's first gate scale: inf */
  cr_assert_eq(volt8_reference_moe_forward(ctx, &moe.shape, &moe.experts, x, &only_expert_1, &weight, 1, 1, out),
               VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(ctx), "scale of expert 1"), "message: %s", volt8_last_error(ctx));
  small_moe_free(&moe);
  volt8_ctx_destroy(ctx);
}

Test(reference, arguments_are_checked) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  small_moe moe;
  small_moe_fill(&moe, 128, 16, 2, 0x38, 0x3C00);
  uint16_t x[128] = {0};
  int32_t id = 0;
  float weight = 1.0f;
  double out[128];
  struct {
    volt8_status status;
    const char *message;
  } results[8];
  volt8_host_experts no_w2 = moe.experts, bad_size = moe.experts;
  no_w2.w2 = NULL;
  bad_size.size = 8;
  volt8_moe_shape bad_shape = moe.shape;
  bad_shape.intermediate_offset = 16; /* fine for block_n 128, but... */
  bad_shape.block_n = 1;              /* ...not with block_n 1 */
  const char *expected[8] = {"shape is NULL", "experts is NULL", "experts->w2 is NULL", "experts->size is 8",
                             "x is NULL", "top_k = 0", "num_tokens = -1", "must be 0 when block_n=1"};
  int n = 0;
#define CALL(...)                                                     \
  (results[n].status = volt8_reference_moe_forward(ctx, __VA_ARGS__), \
   results[n].message = strdup(volt8_last_error(ctx)), n++)
  CALL(NULL, &moe.experts, x, &id, &weight, 1, 1, out);
  CALL(&moe.shape, NULL, x, &id, &weight, 1, 1, out);
  CALL(&moe.shape, &no_w2, x, &id, &weight, 1, 1, out);
  CALL(&moe.shape, &bad_size, x, &id, &weight, 1, 1, out);
  CALL(&moe.shape, &moe.experts, NULL, &id, &weight, 1, 1, out);
  CALL(&moe.shape, &moe.experts, x, &id, &weight, 1, 0, out);
  CALL(&moe.shape, &moe.experts, x, &id, &weight, -1, 1, out);
  CALL(&bad_shape, &moe.experts, x, &id, &weight, 1, 1, out);
#undef CALL
  for (int i = 0; i < n; i++) {
    cr_assert_eq(results[i].status, VOLT8_ERR_INVALID_ARGUMENT, "call %d (%s) returned %d", i, expected[i],
                 results[i].status);
    cr_assert(strstr(results[i].message, expected[i]), "call %d: message \"%s\" lacks \"%s\"", i, results[i].message,
              expected[i]);
    free((void *)results[i].message);
  }
  cr_assert_eq(volt8_reference_moe_forward(ctx, &moe.shape, &moe.experts, NULL, NULL, NULL, 0, 4, NULL), VOLT8_OK,
               "zero tokens is a no-op");
  small_moe_free(&moe);
  volt8_ctx_destroy(ctx);
}

/* ---- layout sizes ---- */

Test(reference, dims_of_the_seed_shape) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  volt8_moe_dims dims;
  cr_assert_eq(volt8_moe_dims_compute(NULL, &shape, &dims), VOLT8_OK, "%s", volt8_last_error(NULL));
  cr_assert_eq(dims.w13_bytes_per_expert, 2 * 160 * 2560);
  cr_assert_eq(dims.w2_bytes_per_expert, 2560 * 160);
  cr_assert_eq(dims.g13, 2, "rows 32..191 of the 640-wide grid touch two 128-blocks");
  cr_assert_eq(dims.k13_blocks, 20);
  cr_assert_eq(dims.s13_elems_per_expert, 2 * 2 * 20);
  cr_assert_eq(dims.n2_blocks, 20);
  cr_assert_eq(dims.g2, 2);
  cr_assert_eq(dims.s2_elems_per_expert, 20 * 2);

  shape.intermediate_offset = 96; /* 96..255: still two blocks */
  cr_assert_eq(volt8_moe_dims_compute(NULL, &shape, &dims), VOLT8_OK);
  cr_assert_eq(dims.g13, 2);
  shape.intermediate_offset = 0, shape.intermediate = 128;
  cr_assert_eq(volt8_moe_dims_compute(NULL, &shape, &dims), VOLT8_OK);
  cr_assert_eq(dims.g13, 1);

  volt8_moe_shape online = {sizeof(volt8_moe_shape), 2560, 160, 512, 1, 128, 0, 0, 0};
  cr_assert_eq(volt8_moe_dims_compute(NULL, &online, &dims), VOLT8_OK);
  cr_assert_eq(dims.g13, 160);
  cr_assert_eq(dims.k13_blocks, 20);
  cr_assert_eq(dims.n2_blocks, 2560);
  cr_assert_eq(dims.g2, 2);
  cr_assert_eq(dims.s13_elems_per_expert, 2 * 160 * 20);
  cr_assert_eq(dims.s2_elems_per_expert, 2560 * 2);
}

Test(reference, dims_reject_bad_shapes) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  struct {
    const char *field;
    volt8_moe_shape shape;
  } cases[] = {
      {"size", {sizeof(volt8_moe_shape) - 4, 2560, 160, 512, 128, 128, 32, 0, 0}},
      {"hidden", {sizeof(volt8_moe_shape), 2568, 160, 512, 128, 128, 32, 0, 0}},
      {"hidden", {sizeof(volt8_moe_shape), 0, 160, 512, 128, 128, 32, 0, 0}},
      {"intermediate", {sizeof(volt8_moe_shape), 2560, 150, 512, 128, 128, 32, 0, 0}},
      {"num_experts", {sizeof(volt8_moe_shape), 2560, 160, 0, 128, 128, 32, 0, 0}},
      {"block_k", {sizeof(volt8_moe_shape), 2560, 160, 512, 128, 64, 32, 0, 0}},
      {"block_n", {sizeof(volt8_moe_shape), 2560, 160, 512, 64, 128, 32, 0, 0}},
      {"intermediate_offset", {sizeof(volt8_moe_shape), 2560, 160, 512, 128, 128, 40, 0, 0}},
      {"intermediate_offset", {sizeof(volt8_moe_shape), 2560, 160, 512, 128, 128, 128, 0, 0}},
      {"intermediate_offset", {sizeof(volt8_moe_shape), 2560, 160, 512, 128, 128, -16, 0, 0}},
      {"intermediate_offset", {sizeof(volt8_moe_shape), 2560, 160, 512, 1, 128, 32, 0, 0}},
      {"expert_start", {sizeof(volt8_moe_shape), 2560, 160, 128, 128, 128, 32, -1, 512}},
      {"expert_start", {sizeof(volt8_moe_shape), 2560, 160, 128, 128, 128, 32, 128, 0}},
      {"global_experts", {sizeof(volt8_moe_shape), 2560, 160, 128, 128, 128, 32, 448, 512}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    volt8_moe_dims dims;
    cr_assert_eq(volt8_moe_dims_compute(ctx, &cases[i].shape, &dims), VOLT8_ERR_INVALID_ARGUMENT,
                 "case %zu (%s) accepted", i, cases[i].field);
    cr_assert(strstr(volt8_last_error(ctx), cases[i].field), "case %zu: message \"%s\" does not name %s", i,
              volt8_last_error(ctx), cases[i].field);
  }
  volt8_moe_dims dims;
  cr_assert_eq(volt8_moe_dims_compute(ctx, NULL, &dims), VOLT8_ERR_INVALID_ARGUMENT);
  volt8_ctx_destroy(ctx);
}

/* ---- error metric ---- */

Test(reference, relative_l2) {
  double reference[2] = {3.0, 4.0}, result[2] = {3.0, 4.5}, error = -1.0;
  cr_assert_eq(volt8_relative_l2(NULL, reference, reference, 2, &error), VOLT8_OK);
  cr_assert_eq(error, 0.0);
  cr_assert_eq(volt8_relative_l2(NULL, reference, result, 2, &error), VOLT8_OK);
  cr_assert_float_eq(error, 0.1, 1e-15);
  result[0] = NAN;
  cr_assert_eq(volt8_relative_l2(NULL, reference, result, 2, &error), VOLT8_OK);
  cr_assert(isnan(error) && !(error <= 1e-3), "NaN in the result must fail any tolerance, got %g", error);
  result[0] = INFINITY;
  cr_assert_eq(volt8_relative_l2(NULL, reference, result, 2, &error), VOLT8_OK);
  cr_assert(!(error <= 1e-3), "inf in the result must fail any tolerance, got %g", error);
  double zeros[2] = {0.0, 0.0}, small[2] = {0.0, 1e-30};
  cr_assert_eq(volt8_relative_l2(NULL, zeros, zeros, 2, &error), VOLT8_OK);
  cr_assert_eq(error, 0.0);
  cr_assert_eq(volt8_relative_l2(NULL, zeros, small, 2, &error), VOLT8_OK);
  cr_assert(isinf(error));
  cr_assert_eq(volt8_relative_l2(NULL, reference, NULL, 2, &error), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_eq(volt8_relative_l2(NULL, reference, result, 2, NULL), VOLT8_ERR_INVALID_ARGUMENT);

  uint16_t half_result[2] = {0x4200, 0x4480}; /* 3.0, 4.5 */
  cr_assert_eq(volt8_relative_l2_half(NULL, reference, half_result, 2, &error), VOLT8_OK);
  cr_assert_float_eq(error, 0.1, 1e-15);
  half_result[1] = 0x7E00;
  cr_assert_eq(volt8_relative_l2_half(NULL, reference, half_result, 2, &error), VOLT8_OK);
  cr_assert(isnan(error));
}

/* ---- a sample of the rows ---- */

/* Random codes (no NaN) and scales, random x, distinct ids per token, positive weights. */
typedef struct sampled_problem {
  small_moe moe;
  int32_t num_tokens, top_k;
  uint16_t *x;
  int32_t *ids;
  float *weights;
} sampled_problem;

static void sampled_problem_make(sampled_problem *p, int32_t num_tokens, int32_t top_k, unsigned seed) {
  srand(seed);
  small_moe_fill(&p->moe, 256, 128, 32, 0x30, volt8_half_from_double(0.02));
  size_t w13 = (size_t)p->moe.dims.w13_bytes_per_expert * 32, w2 = (size_t)p->moe.dims.w2_bytes_per_expert * 32;
  for (size_t i = 0; i < w13; i++) p->moe.w13[i] = (uint8_t)(rand() % 0x7F | (rand() & 0x80));
  for (size_t i = 0; i < w2; i++) p->moe.w2[i] = (uint8_t)(rand() % 0x7F | (rand() & 0x80));
  p->num_tokens = num_tokens, p->top_k = top_k;
  size_t pairs = (size_t)num_tokens * top_k;
  p->x = malloc((size_t)num_tokens * 256 * sizeof *p->x);
  p->ids = malloc(pairs * sizeof *p->ids);
  p->weights = malloc(pairs * sizeof *p->weights);
  cr_assert(p->x && p->ids && p->weights);
  for (size_t i = 0; i < (size_t)num_tokens * 256; i++) p->x[i] = volt8_half_from_double(rand() / (double)RAND_MAX - 0.5);
  for (int32_t t = 0; t < num_tokens; t++) {
    int32_t first = rand() % 32;
    for (int32_t j = 0; j < top_k; j++) {
      p->ids[(size_t)t * top_k + j] = (first + 2 * j) % 32; /* distinct for top_k <= 16 */
      p->weights[(size_t)t * top_k + j] = (float)(0.05 + rand() / (double)RAND_MAX);
    }
  }
}

static void sampled_problem_free(sampled_problem *p) {
  small_moe_free(&p->moe);
  free(p->x), free(p->ids), free(p->weights);
}

static volt8_status rows_on(const sampled_problem *p, const int32_t *rows, int32_t count, double *out, int32_t threads) {
  return volt8_reference_moe_rows(NULL, &p->moe.shape, &p->moe.experts, p->x, p->ids, p->weights, p->num_tokens,
                                  p->top_k, rows, count, out, threads);
}

static volt8_status rows_of(const sampled_problem *p, const int32_t *rows, int32_t count, double *out) {
  return rows_on(p, rows, count, out, 1);
}

/* Threads share each expert's rows and columns: every count gives the bits of one thread, uneven
 * slices (3 and 7 of I = 128, H = 256) and more threads than rows of I included. */
Test(reference, rows_on_threads_are_the_bits_of_one_thread) {
  unsigned seed = test_seed();
  sampled_problem p;
  sampled_problem_make(&p, 300, 8, seed);
  int32_t rows[40];
  for (int32_t r = 0; r < 40; r++) rows[r] = (r * 37) % 300;
  double *alone = malloc(40 * 256 * sizeof *alone), *shared = malloc(40 * 256 * sizeof *shared);
  cr_assert(alone && shared);
  cr_assert_eq(rows_on(&p, rows, 40, alone, 1), VOLT8_OK, "%s", volt8_last_error(NULL));
  const int32_t threads[] = {2, 3, 7, 200};
  for (size_t i = 0; i < sizeof threads / sizeof threads[0]; i++) {
    memset(shared, 0xFF, 40 * 256 * sizeof *shared); /* NaN: a column no thread wrote shows */
    cr_assert_eq(rows_on(&p, rows, 40, shared, threads[i]), VOLT8_OK, "%s", volt8_last_error(NULL));
    cr_assert_eq(memcmp(alone, shared, 40 * 256 * sizeof *shared), 0, "seed %u: %d threads differ from one", seed,
                 threads[i]);
  }
  free(alone), free(shared);
  sampled_problem_free(&p);
}

/* A NaN code met by one of several threads: the error one thread gives, naming the same expert, row
 * and column, and no thread left waiting. */
Test(reference, a_nan_code_on_threads_is_the_error_of_one_thread) {
  sampled_problem p;
  sampled_problem_make(&p, 64, 4, 5);
  int32_t rows[16];
  for (int32_t r = 0; r < 16; r++) rows[r] = r * 4;
  int32_t expert = p.ids[0], row = 100, column = 17; /* a down row of token 0's first expert: not thread 0's */
  p.moe.w2[(size_t)expert * p.moe.dims.w2_bytes_per_expert + (size_t)row * 128 + column] = 0x7F;
  double out[16 * 256];
  char alone[1024];
  cr_assert_eq(rows_on(&p, rows, 16, out, 1), VOLT8_ERR_INVALID_ARGUMENT);
  snprintf(alone, sizeof alone, "%s", volt8_last_error(NULL));
  char expected[128];
  snprintf(expected, sizeof expected, "w2 of expert %d holds the E4M3 NaN code 0x7F at row %d, column %d", expert, row,
           column);
  cr_assert(strstr(alone, expected), "\"%s\" lacks \"%s\"", alone, expected);
  for (int32_t threads = 2; threads <= 8; threads *= 2) {
    cr_assert_eq(rows_on(&p, rows, 16, out, threads), VOLT8_ERR_INVALID_ARGUMENT);
    cr_assert_str_eq(volt8_last_error(NULL), alone, "%d threads", threads);
  }
  sampled_problem_free(&p);
}

/* Each sampled row is, bit for bit, that row of the forward of all tokens, in any order and repeated. */
Test(reference, rows_are_the_rows_of_the_whole_forward) {
  unsigned seed = test_seed();
  sampled_problem p;
  sampled_problem_make(&p, 300, 16, seed);
  double *whole = malloc(300 * 256 * sizeof *whole), *sampled = malloc(6 * 256 * sizeof *sampled);
  cr_assert(whole && sampled);
  cr_assert_eq(volt8_reference_moe_forward(NULL, &p.moe.shape, &p.moe.experts, p.x, p.ids, p.weights, 300, 16, whole),
               VOLT8_OK, "%s", volt8_last_error(NULL));
  const int32_t rows[6] = {299, 0, 150, 7, 150, 298};
  cr_assert_eq(rows_of(&p, rows, 6, sampled), VOLT8_OK, "%s", volt8_last_error(NULL));
  for (int32_t r = 0; r < 6; r++)
    for (int32_t c = 0; c < 256; c++)
      cr_assert(sampled[r * 256 + c] == whole[rows[r] * 256 + c], "seed %u: row %d (token %d), column %d: %.17g vs %.17g",
                seed, r, rows[r], c, sampled[r * 256 + c], whole[rows[r] * 256 + c]);
  free(whole), free(sampled);
  sampled_problem_free(&p);
}

/* 16384 tokens of top-16: 64 rows cost 64 tokens' work (the whole forward would be 256 times more),
 * and each equals the forward of its token alone. */
Test(reference, rows_of_a_prefill_of_16384_tokens) {
  unsigned seed = test_seed();
  sampled_problem p;
  sampled_problem_make(&p, 16384, 16, seed);
  int32_t rows[64];
  for (int32_t r = 0; r < 64; r++) rows[r] = (int32_t)((int64_t)r * 16383 / 63);
  double *sampled = malloc(64 * 256 * sizeof *sampled), alone[256];
  cr_assert_not_null(sampled);
  cr_assert_eq(rows_of(&p, rows, 64, sampled), VOLT8_OK, "%s", volt8_last_error(NULL));
  for (int32_t r = 0; r < 64; r += 9) {
    size_t token = (size_t)rows[r];
    cr_assert_eq(volt8_reference_moe_forward(NULL, &p.moe.shape, &p.moe.experts, p.x + token * 256, p.ids + token * 16,
                                             p.weights + token * 16, 1, 16, alone),
                 VOLT8_OK);
    cr_assert_eq(memcmp(alone, sampled + r * 256, sizeof alone), 0, "seed %u: token %zu differs from its own forward",
                 seed, token);
  }
  free(sampled);
  sampled_problem_free(&p);
}

Test(reference, rows_outside_the_tokens_are_refused) {
  sampled_problem p;
  sampled_problem_make(&p, 8, 2, 1);
  double out[2 * 256];
  const int32_t outside[][2] = {{0, 8}, {-1, 0}};
  const char *named[] = {"rows[1] = 8 is outside the 8 tokens", "rows[0] = -1 is outside the 8 tokens"};
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(rows_of(&p, outside[i], 2, out), VOLT8_ERR_INVALID_ARGUMENT);
    const char *expected = named[i];
    cr_assert(strstr(volt8_last_error(NULL), expected), "\"%s\" lacks \"%s\"", volt8_last_error(NULL), expected);
  }
  cr_assert_eq(rows_of(&p, NULL, 1, out), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_eq(rows_of(&p, outside[0], -1, out), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_eq(rows_of(&p, outside[0], 0, NULL), VOLT8_ERR_INVALID_ARGUMENT, "out is checked as for the whole forward");
  sampled_problem_free(&p);
}
