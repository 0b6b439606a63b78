/* The V100 resource report: the occupancy arithmetic on known register, shared memory and thread
 * counts, the ptxas report parser on fixed text, the check of the shipped sm_70 tables (every variant
 * they use, compiled to an sm_70 CUBIN at its table's shape, spills nothing and keeps at least the
 * resident warps per SM the derivation model took for it) and of the mma and tile variants the sm_70
 * dispatch picks past them, at large M. No GPU. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_support.h"

#include "core/ctx_internal.h"
#include "checkpoint/models.h"
#include "jit/kernel_resources.h"
#include "jit/nvrtc_loader.h"
#include "moe/kernels/catalogue.h"
#include "moe/kernels/variant_resources.h"

/* The table check needs the model (tuning/, built unless VOLT8_BUILD_BENCH is off). */
#if __has_include("derive_model.h")
#define HAVE_DERIVE_MODEL 1
#include "derive_model.h"
#include "derive_occupancy.h"
#endif

#ifndef VOLT8_SOURCE_DIR
#error "VOLT8_SOURCE_DIR must name the source tree (tests/CMakeLists.txt defines it)"
#endif

/* ---- occupancy arithmetic ---- */

TestSuite(occupancy, .timeout = 30);

static volt8_sm_limits limits_of(int32_t arch) {
  volt8_sm_limits limits;
  cr_assert_eq(volt8_sm_limits_for_arch(NULL, arch, &limits), VOLT8_OK, "sm_%d: %s", arch, volt8_last_error(NULL));
  return limits;
}

static void expect_occupancy(int32_t arch, int32_t registers, int32_t smem, int32_t threads, int32_t ctas,
                             int32_t warps, volt8_occupancy_limit limit) {
  volt8_sm_limits limits = limits_of(arch);
  volt8_occupancy got;
  cr_assert_eq(volt8_occupancy_compute(NULL, &limits, registers, smem, threads, &got), VOLT8_OK, "%s",
               volt8_last_error(NULL));
  cr_assert(got.ctas_per_sm == ctas && got.warps_per_sm == warps && got.limit == (int32_t)limit,
            "sm_%d, %d registers, %d bytes smem, %d threads: %d CTAs / %d warps limited by %s, expected %d / %d by %s",
            arch, registers, smem, threads, got.ctas_per_sm, got.warps_per_sm, volt8_occupancy_limit_name(got.limit),
            ctas, warps, volt8_occupancy_limit_name(limit));
}

Test(occupancy, v100_registers_in_warp_units_of_256_per_sub_partition) {
  /* 32 registers: 1024 a warp, 16 warps in each quarter: the full 64 warps */
  expect_occupancy(70, 32, 0, 128, 16, 64, VOLT8_LIMIT_WARPS);
  /* 61 rounds to 64 a thread (2048 a warp): 8 warps a quarter, 32 in all, 4 CTAs of 8 warps */
  expect_occupancy(70, 61, 2184, 256, 4, 32, VOLT8_LIMIT_REGISTERS);
  /* 40 registers: 1280 a warp, 12 (not 12.8) warps a quarter: 48 warps, so 24 CTAs of 2 warps, not 25 */
  expect_occupancy(70, 40, 0, 64, 24, 48, VOLT8_LIMIT_REGISTERS);
  /* 255 registers: 8192 a warp, 2 a quarter, 8 warps: a 1024-thread CTA does not fit */
  expect_occupancy(70, 255, 0, 1024, 0, 0, VOLT8_LIMIT_REGISTERS);
  expect_occupancy(70, 255, 0, 256, 1, 8, VOLT8_LIMIT_REGISTERS);
}

Test(occupancy, v100_shared_memory_in_units_of_256_with_no_reserve) {
  expect_occupancy(70, 16, 48 * 1024, 32, 2, 2, VOLT8_LIMIT_SHARED_MEMORY);
  /* one byte more rounds up to the next 256 and no longer fits twice */
  expect_occupancy(70, 16, 48 * 1024 + 1, 32, 1, 1, VOLT8_LIMIT_SHARED_MEMORY);
  /* 100 bytes take 256: 384 would fit, the 32 CTA slots bind */
  expect_occupancy(70, 16, 100, 32, 32, 32, VOLT8_LIMIT_CTA_SLOTS);
  expect_occupancy(70, 16, 100 * 1024, 32, 0, 0, VOLT8_LIMIT_SHARED_MEMORY);
  /* 11588 bytes take 11776: 8 CTAs, but 96 registers allow only 5 of 4 warps */
  expect_occupancy(70, 96, 11588, 128, 5, 20, VOLT8_LIMIT_REGISTERS);
  expect_occupancy(70, 64, 21896, 128, 4, 16, VOLT8_LIMIT_SHARED_MEMORY);
}

Test(occupancy, sm90_reserves_1_kib_a_cta) {
  /* 100 KiB + 1 KiB reserved of 228 KiB: 2 CTAs (on sm_70 none) */
  expect_occupancy(90, 32, 100 * 1024, 128, 2, 8, VOLT8_LIMIT_SHARED_MEMORY);
  /* 1 byte + 1 KiB takes 1152: 202 would fit, 32 slots bind */
  expect_occupancy(90, 16, 1, 32, 32, 32, VOLT8_LIMIT_CTA_SLOTS);
}

Test(occupancy, bad_values_are_refused_naming_them) {
  volt8_sm_limits limits = limits_of(70);
  volt8_occupancy got;
  struct { int32_t registers, smem, threads; const char *named; } bad[] = {
      {32, 0, 0, "0 threads"}, {32, 0, 1025, "1025 threads"}, {0, 0, 128, "0 registers"},
      {256, 0, 128, "256 registers"}, {32, -1, 128, "-1 bytes"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_eq(volt8_occupancy_compute(NULL, &limits, bad[i].registers, bad[i].smem, bad[i].threads, &got),
                 VOLT8_ERR_INVALID_ARGUMENT, "case %zu", i);
    cr_assert_not_null(strstr(volt8_last_error(NULL), bad[i].named), "case %zu: %s", i, volt8_last_error(NULL));
  }
  volt8_sm_limits unknown;
  cr_assert_eq(volt8_sm_limits_for_arch(NULL, 75, &unknown), VOLT8_ERR_ARCH_UNSUPPORTED);
  cr_assert_not_null(strstr(volt8_last_error(NULL), "sm_75"), "%s", volt8_last_error(NULL));
}

/* ---- ptxas report parser ---- */

TestSuite(ptxas_log, .timeout = 30);

/* What NVRTC 12.9 wrote for two kernels compiled with --ptxas-options=-v for sm_70 (k2 first, so a
 * search for k must not stop at k2), with k's figures changed to show spills. */
static const char PTXAS_LOG[] =
    "nvrtc: warning: Architectures prior to '<compute/sm>_75' are deprecated and may be removed in a future release\n"
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function 'k2' for 'sm_70'\n"
    "ptxas info    : Function properties for k2\n"
    "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]\n"
    "ptxas info    : Compile time = 24.382 ms\n"
    "ptxas info    : Compiling entry function 'k' for 'sm_70'\n"
    "ptxas info    : Function properties for k\n"
    "ptxas         .     48 bytes stack frame, 26 bytes spill stores, 20 bytes spill loads\n"
    "ptxas info    : Used 39 registers, used 1 barriers, 1200 bytes smem, 364 bytes cmem[0]\n"
    "ptxas info    : Compile time = 10.113 ms\n";

Test(ptxas_log, reads_each_entrys_own_figures) {
  volt8_kernel_resources k, k2;
  cr_assert_eq(volt8_ptxas_log_parse(NULL, PTXAS_LOG, "k", &k), VOLT8_OK, "%s", volt8_last_error(NULL));
  cr_assert(k.registers == 39 && k.spill_store_bytes == 26 && k.spill_load_bytes == 20 && k.stack_frame_bytes == 48 &&
                k.static_smem_bytes == 1200 && k.barriers == 1,
            "k: %d registers, spills %d/%d, stack %d, smem %d, barriers %d", k.registers, k.spill_store_bytes,
            k.spill_load_bytes, k.stack_frame_bytes, k.static_smem_bytes, k.barriers);
  cr_assert_eq(volt8_ptxas_log_parse(NULL, PTXAS_LOG, "k2", &k2), VOLT8_OK, "%s", volt8_last_error(NULL));
  cr_assert(k2.registers == 8 && k2.spill_store_bytes == 0 && k2.static_smem_bytes == 0 && k2.barriers == 0,
            "k2: %d registers, %d bytes smem", k2.registers, k2.static_smem_bytes);
}

Test(ptxas_log, a_missing_report_is_an_error_naming_the_entry) {
  volt8_kernel_resources out;
  cr_assert_eq(volt8_ptxas_log_parse(NULL, PTXAS_LOG, "kernel_x", &out), VOLT8_ERR_FORMAT);
  cr_assert_not_null(strstr(volt8_last_error(NULL), "kernel_x"), "%s", volt8_last_error(NULL));
  /* a log without -v: only NVRTC's warning */
  cr_assert_eq(volt8_ptxas_log_parse(NULL, "nvrtc: warning: deprecated\n", "k", &out), VOLT8_ERR_FORMAT);
  /* the entry's header but no "Used" line before the next function */
  const char *cut = "ptxas info    : Function properties for k\n"
                    "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                    "ptxas info    : Function properties for k2\n"
                    "ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]\n";
  cr_assert_eq(volt8_ptxas_log_parse(NULL, cut, "k", &out), VOLT8_ERR_FORMAT);
  cr_assert_not_null(strstr(volt8_last_error(NULL), "Used N registers"), "%s", volt8_last_error(NULL));
}

/* ---- volt8 list --resources --json ---- */

TestSuite(list_resources, .timeout = 300);

static int json_number(const cJSON *object, const char *key) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
  cr_assert(cJSON_IsNumber(item), "no number %s", key);
  return item->valueint;
}

static void skip_without_nvrtc(volt8_ctx *ctx) {
  const volt8_nvrtc_lib *lib = NULL;
  if (volt8_nvrtc_for_arch(ctx, 70, &lib) == VOLT8_OK) return;
  cr_log_warn("skipped: no NVRTC 12 for sm_70 CUBINs (%s)", volt8_last_error(ctx));
  volt8_ctx_destroy(ctx);
  cr_skip_test("no NVRTC 12 (make bootstrap installs it into .venv)");
}

/* Every variant of a small shape of an expert-parallel rank, each report as the occupancy rules make it
 * of its own figures, and the shape with every key, its expert range too. */
Test(list_resources, json_reports_every_variant_by_the_occupancy_rules) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  skip_without_nvrtc(ctx);
  static char out[1 << 17], err[1 << 14];
  char *args[] = {"list", "--arch", "sm_70", "--resources", "--json", "--jobs", "2", "--shape",
                  "hidden=256,intermediate=128,num_experts=4,intermediate_offset=0,expert_start=2,global_experts=8", NULL};
  int status = test_run_volt8(args, out, sizeof out, err, sizeof err);
  cr_assert_eq(status, 0, "volt8 list --resources --json exited %d:\n%s", status, err);
  cJSON *root = cJSON_Parse(out);
  cr_assert_not_null(root, "not JSON:\n%s", out);
  cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(root, "arch")->valuestring, "sm_70");
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.hidden = 256, shape.intermediate = 128, shape.num_experts = 4, shape.intermediate_offset = 0;
  shape.expert_start = 2, shape.global_experts = 8;
  const cJSON *shape_json = cJSON_GetObjectItemCaseSensitive(root, "shape");
  const struct { const char *key; int32_t value; } keys[] = {
      {"hidden", 256}, {"intermediate", 128}, {"num_experts", 4}, {"block_n", 128}, {"block_k", 128},
      {"intermediate_offset", 0}, {"expert_start", 2}, {"global_experts", 8}};
  cr_assert_eq(cJSON_GetArraySize(shape_json), 8, "the shape does not hold its 8 keys:\n%s", out);
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
    cr_assert_eq(json_number(shape_json, keys[k].key), keys[k].value, "shape.%s", keys[k].key);
  int32_t expected = 0;
  cr_assert_eq(volt8_variant_count(ctx, &shape, &expected), VOLT8_OK);
  const cJSON *variants = cJSON_GetObjectItemCaseSensitive(root, "variants");
  cr_assert_eq(cJSON_GetArraySize(variants), expected);
  volt8_sm_limits limits = limits_of(70);
  int32_t index = 0;
  for (const cJSON *variant = variants->child; variant; variant = variant->next, index++) {
    char name[128];
    cr_assert_eq(volt8_variant_name(ctx, &shape, index, name, sizeof name), VOLT8_OK);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(variant, "variant")->valuestring, name);
    volt8_occupancy occupancy;
    cr_assert_eq(volt8_occupancy_compute(NULL, &limits, json_number(variant, "registers"),
                                         json_number(variant, "static_smem_bytes") +
                                             json_number(variant, "dynamic_smem_bytes"),
                                         json_number(variant, "threads"), &occupancy),
                 VOLT8_OK, "%s: %s", name, volt8_last_error(NULL));
    cr_assert(occupancy.ctas_per_sm == json_number(variant, "ctas_per_sm") &&
                  occupancy.warps_per_sm == json_number(variant, "warps_per_sm") &&
                  strcmp(volt8_occupancy_limit_name(occupancy.limit),
                         cJSON_GetObjectItemCaseSensitive(variant, "limited_by")->valuestring) == 0 &&
                  occupancy.ctas_per_sm > 0,
              "%s: reported %d CTAs / %d warps, the rules give %d / %d (%s)", name, json_number(variant, "ctas_per_sm"),
              json_number(variant, "warps_per_sm"), occupancy.ctas_per_sm, occupancy.warps_per_sm,
              volt8_occupancy_limit_name(occupancy.limit));
  }
  cJSON_Delete(root);
  volt8_ctx_destroy(ctx);
}

/* The table names the shape as --shape writes it, the expert range of an expert-parallel rank too. */
Test(list_resources, table_names_the_expert_range) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  skip_without_nvrtc(ctx);
  static char out[1 << 17], err[1 << 14];
  const char *shape_text = "hidden=256,intermediate=128,num_experts=4,block_n=128,block_k=128,intermediate_offset=0,"
                           "expert_start=2,global_experts=8";
  char *args[] = {"list", "--arch", "sm_70", "--resources", "--jobs", "2", "--shape", (char *)shape_text, NULL};
  int status = test_run_volt8(args, out, sizeof out, err, sizeof err);
  cr_assert_eq(status, 0, "volt8 list --resources exited %d:\n%s", status, err);
  char *first_line_end = strchr(out, '\n');
  cr_assert_not_null(first_line_end, "%s", out);
  *first_line_end = '\0';
  char expected_tail[256];
  snprintf(expected_tail, sizeof expected_tail, ") of %s", shape_text);
  size_t length = strlen(out), tail = strlen(expected_tail);
  cr_assert(length >= tail && strcmp(out + length - tail, expected_tail) == 0, "first line \"%s\" does not end in \"%s\"",
            out, expected_tail);
  volt8_ctx_destroy(ctx);
}

/* ---- the dispatch's m8n8k4 picks past the tables ---- */

TestSuite(large_m_sm70, .timeout = 600);

typedef struct large_m_use {
  volt8_moe_shape shape;
  char variant[VOLT8_VARIANT_NAME_BYTES];
  char where[96];    /* "deepseek-v3 TP8 M=1024" */
  volt8_variant parsed;
} large_m_use;

/* Adds the forward's gate_up or down when it is of the mma or tile family and not yet in uses. */
static void add_large_m_use(large_m_use *uses, int32_t *count, int32_t capacity, const volt8_moe_shape *shape,
                            const char *variant, const char *where) {
  volt8_variant parsed;
  cr_assert(volt8_variant_parse(variant, &parsed), "%s: %s", where, variant);
  if (parsed.kind != VOLT8_KIND_GEMM_MMA && parsed.kind != VOLT8_KIND_GEMM_TILE) return;
  for (int32_t i = 0; i < *count; i++)
    if (memcmp(&uses[i].shape, shape, sizeof *shape) == 0 && strcmp(uses[i].variant, variant) == 0) return;
  cr_assert_lt(*count, capacity);
  large_m_use *use = &uses[(*count)++];
  use->shape = *shape;
  use->parsed = parsed;
  snprintf(use->variant, sizeof use->variant, "%s", variant);
  snprintf(use->where, sizeof use->where, "%s", where);
}

/* What the V100 model takes of them: a tile holds the CTAs its .o asks (two CTAs of 8 warps keep all
 * four sub-partitions' tensor cores fed at the m8n8k4 rate it prices), an mma variant at least the 8
 * warps an SM that keep DRAM busy (the fill its DRAM-bound times assume); neither spills. */
Test(large_m_sm70, mma_and_tile_picks_do_not_spill_and_keep_their_occupancy) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  skip_without_nvrtc(ctx);
  static large_m_use uses[256];
  int32_t count = 0, kinds[2] = {0, 0};
  const int32_t tp_sizes[] = {4, 8}, m_values[] = {256, 512, 1024, 2048, 4096, 8192, 16384};
  for (int32_t model_index = 0; model_index < volt8_model_count(); model_index++) {
    const volt8_model *model = volt8_model_at(model_index);
    for (size_t t = 0; t < sizeof tp_sizes / sizeof tp_sizes[0]; t++) {
      volt8_moe_shape shape;
      cr_assert_eq(volt8_model_rank_shape(ctx, model, tp_sizes[t], 0, 0, &shape), VOLT8_OK, "%s TP%d: %s",
                   model->name, tp_sizes[t], volt8_last_error(ctx));
      for (size_t i = 0; i < sizeof m_values / sizeof m_values[0]; i++) {
        volt8_forward_info info = VOLT8_FORWARD_INFO_INIT;
        cr_assert_eq(volt8_forward_describe(ctx, &shape, NULL, m_values[i], model->top_k, &info), VOLT8_OK, "%s",
                     volt8_last_error(ctx));
        char where[96];
        snprintf(where, sizeof where, "%s TP%d M=%d", model->name, tp_sizes[t], m_values[i]);
        add_large_m_use(uses, &count, 256, &shape, info.gate_up, where);
        add_large_m_use(uses, &count, 256, &shape, info.down, where);
      }
    }
  }
  volt8_variant_ref variants[256];
  static volt8_variant_resources reports[256];
  for (int32_t i = 0; i < count; i++) {
    variants[i] = (volt8_variant_ref){&uses[i].shape, uses[i].variant};
    kinds[uses[i].parsed.kind == VOLT8_KIND_GEMM_TILE]++;
  }
  cr_assert(kinds[0] > 0 && kinds[1] > 0, "the dispatch picks %d mma and %d tile variants past the tables", kinds[0],
            kinds[1]);
  cr_assert_eq(volt8_variant_resources_many(ctx, variants, count, 2, reports), VOLT8_OK, "%s", volt8_last_error(ctx));
  static char failures[16384];
  failures[0] = '\0';
  for (int32_t i = 0; i < count; i++) {
    const volt8_variant_resources *report = &reports[i];
    int tile = uses[i].parsed.kind == VOLT8_KIND_GEMM_TILE;
    int32_t needed_warps = tile ? uses[i].parsed.min_blocks * uses[i].parsed.warps : 8;
    size_t used = strlen(failures);
    if (report->kernel.spill_store_bytes || report->kernel.spill_load_bytes || report->occupancy.warps_per_sm < needed_warps)
      snprintf(failures + used, sizeof failures - used,
               "  %s (%s): %d registers, spills %d/%d, %d CTAs and %d warps an SM (%s), %d warps needed\n",
               uses[i].variant, uses[i].where, report->kernel.registers, report->kernel.spill_store_bytes,
               report->kernel.spill_load_bytes, report->occupancy.ctas_per_sm, report->occupancy.warps_per_sm,
               volt8_occupancy_limit_name(report->occupancy.limit), needed_warps);
  }
  cr_log_info("%d mma and %d tile variants of the dispatch past the tables compiled", kinds[0], kinds[1]);
  cr_assert_str_empty(failures, "mma and tile variants the sm_70 dispatch picks that spill or hold too few warps:\n%s",
                      failures);
  volt8_ctx_destroy(ctx);
}

/* ---- the shipped sm_70 tables ---- */

#ifdef HAVE_DERIVE_MODEL

/* One variant a table uses, at the table's shape, with what the model took for it. */
typedef struct table_use {
  volt8_moe_shape shape;
  char variant[96];
  char table[160];          /* one table that uses it */
  int32_t assumed_ctas;     /* the model's resident CTAs per SM */
  int32_t warps;            /* per CTA, from the name */
} table_use;

static volt8_moe_shape table_shape(const cJSON *metadata) {
  const cJSON *shape_json = cJSON_GetObjectItemCaseSensitive(metadata, "shape");
  const cJSON *block = cJSON_GetObjectItemCaseSensitive(metadata, "block");
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.hidden = json_number(shape_json, "hidden");
  shape.intermediate = json_number(shape_json, "intermediate");
  shape.num_experts = json_number(shape_json, "num_experts");
  shape.intermediate_offset = json_number(shape_json, "intermediate_offset");
  shape.block_n = cJSON_GetArrayItem(block, 0)->valueint;
  shape.block_k = cJSON_GetArrayItem(block, 1)->valueint;
  return shape;
}

static int same_use(const table_use *use, const volt8_moe_shape *shape, const char *variant) {
  return memcmp(&use->shape, shape, sizeof *shape) == 0 && strcmp(use->variant, variant) == 0;
}

/* Adds the table's variants not yet in uses; a variant two tables use keeps the larger assumption. */
static void collect_table(const char *path, table_use **uses, int32_t *count, int32_t *capacity) {
  size_t bytes = 0;
  char *text = test_read_whole(path, &bytes);
  cJSON *root = cJSON_ParseWithLength(text, bytes);
  cr_assert_not_null(root, "%s is not JSON", path);
  const cJSON *metadata = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
  const cJSON *recorded = cJSON_GetObjectItemCaseSensitive(metadata, DERIVE_OCCUPANCY_KEY);
  volt8_moe_shape shape = table_shape(metadata);
  const char *name = strrchr(path, '/') + 1;
  for (const cJSON *item = root->child; item; item = item->next) {
    if (strcmp(item->string, "__metadata__") == 0) continue;
    const cJSON *variant_json = cJSON_GetObjectItemCaseSensitive(item, "variant");
    const char *variant = cJSON_IsString(item) ? item->valuestring : variant_json ? variant_json->valuestring : NULL;
    cr_assert_not_null(variant, "%s: entry %s names no variant", name, item->string);
    derive_variant parsed;
    cr_assert(derive_parse_variant(variant, &parsed), "%s: the model cannot read %s", name, variant);
    const cJSON *figure = cJSON_GetObjectItemCaseSensitive(recorded, variant);
    parsed.ctas_per_sm = cJSON_IsNumber(figure) ? figure->valueint : 0;
    int32_t assumed = (int32_t)derive_ctas_per_sm(&DERIVE_V100, &parsed);
    int32_t found = 0;
    while (found < *count && !same_use(&(*uses)[found], &shape, variant)) found++;
    if (found < *count) {
      if (assumed > (*uses)[found].assumed_ctas) (*uses)[found].assumed_ctas = assumed;
      continue;
    }
    if (*count == *capacity) {
      *capacity = *capacity ? 2 * *capacity : 64;
      *uses = realloc(*uses, (size_t)*capacity * sizeof **uses);
      cr_assert_not_null(*uses);
    }
    table_use *use = &(*uses)[(*count)++];
    memset(use, 0, sizeof *use);
    use->shape = shape;
    snprintf(use->variant, sizeof use->variant, "%s", variant);
    snprintf(use->table, sizeof use->table, "%s", name);
    use->assumed_ctas = assumed;
    use->warps = parsed.warps;
  }
  cJSON_Delete(root);
  free(text);
}

/* Appends a line to `failures` for each use that spills or holds fewer warps than the model took. */
static void judge(const table_use *use, const volt8_variant_resources *report, char *failures, size_t failures_size) {
  size_t used = strlen(failures);
  if (report->kernel.spill_store_bytes || report->kernel.spill_load_bytes)
    used += (size_t)snprintf(failures + used, failures_size - used, "  %s (%s): spills %d bytes stored, %d loaded\n",
                             use->variant, use->table, report->kernel.spill_store_bytes, report->kernel.spill_load_bytes);
  if (used < failures_size && report->occupancy.warps_per_sm < use->assumed_ctas * use->warps)
    snprintf(failures + used, failures_size - used,
             "  %s (%s): %d resident warps per SM (%d CTAs, %d registers, %d bytes smem: %s), the model took %d\n",
             use->variant, use->table, report->occupancy.warps_per_sm, report->occupancy.ctas_per_sm,
             report->kernel.registers, report->kernel.static_smem_bytes,
             volt8_occupancy_limit_name(report->occupancy.limit), use->assumed_ctas * use->warps);
}

TestSuite(shipped_sm70_tables, .timeout = 600);

Test(shipped_sm70_tables, variants_do_not_spill_and_keep_the_modelled_occupancy) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  skip_without_nvrtc(ctx);
  const volt8_nvrtc_lib *lib = NULL;
  cr_assert_eq(volt8_nvrtc_for_arch(ctx, 70, &lib), VOLT8_OK);
  glob_t tables;
  cr_assert_eq(glob(VOLT8_SOURCE_DIR "/tuning/tables/*arch=sm_70,*.json", 0, NULL, &tables), 0, "no sm_70 tables");
  table_use *uses = NULL;
  int32_t count = 0, capacity = 0;
  for (size_t t = 0; t < tables.gl_pathc; t++) collect_table(tables.gl_pathv[t], &uses, &count, &capacity);
  volt8_variant_ref *variants = calloc((size_t)count + 1, sizeof *variants);
  volt8_variant_resources *reports = calloc((size_t)count + 1, sizeof *reports);
  cr_assert(variants && reports);
  for (int32_t i = 0; i < count; i++) variants[i] = (volt8_variant_ref){&uses[i].shape, uses[i].variant};
  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  /* two compile threads: CI's machines have two cores */
  cr_assert_eq(volt8_variant_resources_many(ctx, variants, count, 2, reports), VOLT8_OK, "%s", volt8_last_error(ctx));
  clock_gettime(CLOCK_MONOTONIC, &end);
  static char failures[32768];
  failures[0] = '\0';
  for (int32_t i = 0; i < count; i++) judge(&uses[i], &reports[i], failures, sizeof failures);
  cr_log_info("%d variants of %zu sm_70 tables compiled with NVRTC %s in %.1f s", count, tables.gl_pathc, lib->version,
              (double)(end.tv_sec - start.tv_sec) + 1e-9 * (double)(end.tv_nsec - start.tv_nsec));
  cr_assert_str_empty(failures,
                      "variants of the shipped sm_70 tables that spill or hold fewer warps per SM than the model "
                      "took (re-derive: volt8 tune --derive sm_70 --model NAME --tp 1,2,4,8):\n%s",
                      failures);
  globfree(&tables);
  free(variants);
  free(reports);
  free(uses);
  volt8_ctx_destroy(ctx);
}

#endif
