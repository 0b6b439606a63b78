/* The dispatch fallback for shapes without a tuning table: the nearest tabled shape's table, read at
 * the token count with the same routed pairs per expert, and a heuristic after it; neither picks a
 * family the target arch emulates (mma on sm_80 and later). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/kernels/catalogue.h"
#include "core/ctx_internal.h"
#include "dispatch/dispatch.h"
#include "core/embedded_files.h"
#include "checkpoint/models.h"
#include "test_support.h"
#include "dispatch/tuning.h"
#include "dispatch/tuning_nearest.h"

#define H200_TABLE(op, n, k) "tuning/tables/op=" op ",N=" #n ",K=" #k ",block=128x128,arch=sm_90,device=NVIDIA_H200.json"

static char temp_dir[4096];

static void make_temp_dir(void) {
  test_make_temp_dir(temp_dir, sizeof temp_dir, "volt8_fallback");
  volt8_tuning_warnings_reset();
  unsetenv(VOLT8_TUNING_DIR_ENV);
}

static void remove_temp_dir(void) {
  unsetenv(VOLT8_TUNING_DIR_ENV);
  test_remove_tree(temp_dir);
  temp_dir[0] = '\0';
}

TestSuite(dispatch_fallback, .init = make_temp_dir, .fini = remove_temp_dir, .timeout = 300);

static volt8_ctx *ctx_on(const char *arch, const char *device_name) {
  volt8_ctx *ctx = test_cpu_ctx(arch);
  snprintf(ctx->device_name, sizeof ctx->device_name, "%s", device_name);
  return ctx;
}

static volt8_moe_shape model_shape(const char *name, int32_t tp) {
  volt8_moe_shape shape;
  cr_assert_eq(volt8_model_rank_shape(NULL, volt8_model_find(name), tp, tp > 1 ? 1 : 0, 0, &shape), VOLT8_OK);
  return shape;
}

static int is_mma(const volt8_variant *variant) { return variant->kind == VOLT8_KIND_GEMM_MMA; }

/* A choice's variants by name. */
typedef struct choice_names {
  char gate_up[VOLT8_VARIANT_NAME_BYTES], down[VOLT8_VARIANT_NAME_BYTES];
} choice_names;

static choice_names names_of(const volt8_variant_choice *choice) {
  choice_names names;
  volt8_variant_format(&choice->gate_up, names.gate_up, sizeof names.gate_up);
  volt8_variant_format(&choice->down, names.down, sizeof names.down);
  return names;
}

static int emulated(int32_t arch, const char *name) {
  volt8_variant variant;
  cr_assert(volt8_variant_parse(name, &variant), "%s", name);
  return volt8_variant_emulated(&variant, arch);
}

/* The shape's variants for ctx's target arch. */
static volt8_variant *variants_of(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t *count) {
  volt8_variant *variants = NULL;
  cr_assert_eq(volt8_catalogue_list(ctx, shape, ctx->target_arch, &variants, count), VOLT8_OK, "%s",
               volt8_last_error(ctx));
  return variants;
}

Test(dispatch_fallback, emulated_families_are_named) {
  cr_assert(emulated(90, "gate_up.mma.bm16.bn16.w2.sk1"));
  cr_assert(emulated(80, "down.mma.bm32.bn32.w4.sk2"));
  cr_assert_not(emulated(70, "gate_up.mma.bm16.bn16.w2.sk1"), "sm_70 runs m8n8k4 natively");
  cr_assert_not(emulated(90, "gate_up.hmma.bm1.bn8.w8.sk8"));
  cr_assert_not(emulated(90, "down.cc.bm4.bn32.w4.sk1.l4"));
}

/* Every model at TP 1/2/4/8, M = 1..128, with and without the sm_90 tables' device: never mma. The
 * same choices on sm_70 do use mma at large M, so the check can fail. */
Test(dispatch_fallback, never_an_emulated_family_on_sm_90) {
  const char *devices[2] = {"NVIDIA H200", "Some Other GPU"};
  for (int d = 0; d < 2; d++) {
    volt8_ctx *ctx = ctx_on("sm_90", devices[d]);
    for (int32_t m = 0; m < volt8_model_count(); m++) {
      const volt8_model *model = volt8_model_at(m);
      for (int32_t tp = 1; tp <= 8; tp *= 2) {
        volt8_moe_shape shape = model_shape(model->name, tp);
        for (int32_t tokens = 1; tokens <= 128; tokens *= 2) {
          volt8_variant_choice choice;
          cr_assert_eq(volt8_dispatch_choose(ctx, &shape, tokens, model->top_k, &choice), VOLT8_OK, "%s",
                       volt8_last_error(ctx));
          cr_assert(!is_mma(&choice.gate_up) && !is_mma(&choice.down), "%s on %s, %s TP%d M=%d: %s / %s", "sm_90",
                    devices[d], model->name, tp, tokens, names_of(&choice).gate_up, names_of(&choice).down);
        }
      }
    }
    volt8_ctx_destroy(ctx);
  }
}

/* Online (1x128) scale blocks have no table at all: the heuristic alone serves, m16n8k16 on sm_90 up
 * to a mean of 4 pairs an expert (GLM-4.5-Air, 128 experts at top-8: M = 64), the raw family's 32-pair
 * items at a mean of 8 (M = 128, a busiest expert of 14.7). */
Test(dispatch_fallback, heuristic_alone_uses_hmma_on_sm_90_and_mma_on_sm_70) {
  volt8_moe_shape shape = model_shape("glm-4.5-air", 8);
  shape.block_n = 1;
  shape.intermediate_offset = 0;
  volt8_ctx *sm90 = ctx_on("sm_90", "NVIDIA H200"), *sm70 = ctx_on("sm_70", "Tesla V100-SXM2-16GB");
  int sm70_used_mma = 0;
  for (int32_t tokens = 1; tokens <= 128; tokens *= 2) {
    volt8_tuning_match match;
    cr_assert_eq(volt8_tuning_lookup(sm90, &shape, VOLT8_OP_GATE_UP, tokens, 8, &match), VOLT8_OK);
    cr_assert_eq(match.source, VOLT8_TUNING_SOURCE_NONE, "no table has 1x128 blocks");
    volt8_variant_choice choice;
    cr_assert_eq(volt8_dispatch_choose(sm90, &shape, tokens, 8, &choice), VOLT8_OK, "%s", volt8_last_error(sm90));
    volt8_kind kind = tokens <= 64 ? VOLT8_KIND_GEMM_HMMA : VOLT8_KIND_GEMM_RAW;
    cr_assert(choice.gate_up.kind == kind && choice.down.kind == kind, "sm_90 M=%d: %s / %s", tokens,
              names_of(&choice).gate_up, names_of(&choice).down);
    if (kind == VOLT8_KIND_GEMM_RAW) cr_assert(choice.gate_up.block_m == 32 && choice.down.block_m == 32);
    cr_assert_eq(volt8_dispatch_choose(sm70, &shape, tokens, 8, &choice), VOLT8_OK, "%s", volt8_last_error(sm70));
    sm70_used_mma |= is_mma(&choice.gate_up) && is_mma(&choice.down);
  }
  cr_assert(sm70_used_mma, "the sm_70 heuristic never chose m8n8k4 up to M = 128");
  volt8_ctx_destroy(sm90);
  volt8_ctx_destroy(sm70);
}

/* Past the tables, the heuristic's large-item classes by the busiest expert's pairs: on sm_90, the raw
 * family's items of 32 pairs at a mean of 16 (DeepSeek-V3 TP8, M = 512), of 64 at four CTAs an SM at 64
 * (M = 2048) and of 128 (4 warps) at 512 (M = 16384); on sm_70 the tile family's items of 64 with 8 warps
 * at all three. */
Test(dispatch_fallback, tile_classes_by_the_busiest_expert) {
  volt8_moe_shape shape = model_shape("deepseek-v3", 8);
  const int32_t tokens[3] = {512, 2048, 16384};
  const char *sm90_expected[3][2] = {{"gate_up.raw.bm32.bn64.w4.sk1.o2.f256", "down.raw.bm32.bn128.w4.sk1.o2.f256"},
                                     {"gate_up.raw.bm64.bn64.w4.sk1.o4.f256", "down.raw.bm64.bn128.w4.sk1.o4.f256"},
                                     {"gate_up.raw.bm128.bn64.w4.sk1.o2.f256", "down.raw.bm128.bn128.w4.sk1.o2.f256"}};
  volt8_ctx *sm90 = ctx_on("sm_90", "NVIDIA H200"), *sm70 = ctx_on("sm_70", "Tesla V100-SXM2-16GB");
  for (int i = 0; i < 3; i++) {
    volt8_variant_choice choice;
    cr_assert_eq(volt8_dispatch_choose(sm90, &shape, tokens[i], 8, &choice), VOLT8_OK, "%s", volt8_last_error(sm90));
    choice_names names = names_of(&choice);
    cr_assert_str_eq(names.gate_up, sm90_expected[i][0], "sm_90 M=%d", tokens[i]);
    cr_assert_str_eq(names.down, sm90_expected[i][1], "sm_90 M=%d", tokens[i]);
    cr_assert_eq(volt8_dispatch_choose(sm70, &shape, tokens[i], 8, &choice), VOLT8_OK, "%s", volt8_last_error(sm70));
    /* sm_70's derived tables: the tile family, 32-pair items at M = 512 (16 pairs an expert on average),
     * 64 or more past it */
    int32_t least = tokens[i] >= 2048 ? 64 : 32;
    cr_assert(choice.gate_up.kind == VOLT8_KIND_GEMM_TILE && choice.down.kind == VOLT8_KIND_GEMM_TILE &&
                  choice.gate_up.block_m >= least && choice.down.block_m >= least,
              "sm_70 M=%d: %s / %s", tokens[i], names_of(&choice).gate_up, names_of(&choice).down);
  }
  volt8_ctx_destroy(sm90);
  volt8_ctx_destroy(sm70);
}

/* The entry of a built-in table nearest the token count with num_tokens' routed pairs per expert. */
static const char *scaled_entry(const char *path, const char *op, int32_t num_tokens, int32_t top_k, int32_t experts,
                                volt8_tuning_table *table) {
  const volt8_embedded_file *file = volt8_embedded_find(path);
  cr_assert_not_null(file, "%s is not built in", path);
  cr_assert_eq(volt8_tuning_table_parse(NULL, file->data, file->size, path, op, table), VOLT8_OK, "%s",
               volt8_last_error(NULL));
  cr_assert_not_null(strstr(file->data, "\"num_experts\":512"), "%s was not measured at 512 experts", path);
  cr_assert_eq(table->top_k, 10, "%s", path);
  int32_t tokens = (int32_t)lround((double)num_tokens * top_k / experts * 512 / 10);
  return volt8_tuning_table_nearest(table, tokens < 1 ? 1 : tokens, table->top_k)->variant;
}

/* GLM-4.5-Air TP8 (gate_up 352 x 4096, down 4096 x 176): the reference tables at N = 320 (gate_up)
 * and K = 160 (down) are nearest; M scaled from 128 experts at top-8 to 512 at top-10. */
Test(dispatch_fallback, nearest_tabled_shape_at_the_same_pairs_per_expert) {
  volt8_ctx *ctx = ctx_on("sm_90", "NVIDIA H200");
  /* GLM-4.5-Air's TP8 rank (128 experts, top-8) at the reference's hidden size: no table has it, the
   * reference TP4 rank's (N 320, K 2560) is the nearest. */
  volt8_moe_shape shape = model_shape("glm-4.5-air", 8);
  shape.hidden = 2560;
  const int32_t token_counts[3] = {1, 8, 64};
  for (int i = 0; i < 3; i++) {
    int32_t tokens = token_counts[i];
    volt8_tuning_table gate_up_table, down_table;
    const char *gate_up = scaled_entry(H200_TABLE("gate_up", 320, 2560), "gate_up", tokens, 8, 128, &gate_up_table);
    const char *down = scaled_entry(H200_TABLE("down", 2560, 160), "down", tokens, 8, 128, &down_table);
    volt8_tuning_match match;
    int32_t count = 0;
    volt8_variant *variants = variants_of(ctx, &shape, &count);
    cr_assert_eq(volt8_tuning_nearest(ctx, &shape, VOLT8_OP_GATE_UP, tokens, 8, variants, count, &match), VOLT8_OK);
    cr_assert(match.source == VOLT8_TUNING_SOURCE_NEAREST && strstr(match.origin, "N=320,K=2560"),
              "M=%d: source %d origin %s", tokens, match.source, match.origin);
    free(variants);
    volt8_variant_choice choice;
    cr_assert_eq(volt8_dispatch_choose(ctx, &shape, tokens, 8, &choice), VOLT8_OK, "%s", volt8_last_error(ctx));
    cr_assert_str_eq(names_of(&choice).gate_up, gate_up, "M=%d", tokens);
    cr_assert_str_eq(names_of(&choice).down, down, "M=%d", tokens);
    volt8_tuning_table_free(&gate_up_table);
    volt8_tuning_table_free(&down_table);
  }
  volt8_ctx_destroy(ctx);
}

/* The name of the shape's first (last: the last) gate_up variant of `kind` into name ("" when none). */
static void gate_up_of_kind(const volt8_variant *variants, int32_t count, volt8_kind kind, int last,
                            char name[VOLT8_VARIANT_NAME_BYTES]) {
  name[0] = '\0';
  for (int32_t i = 0; i < count; i++)
    if (variants[i].op == VOLT8_OP_GATE_UP && variants[i].kind == kind && (last || !name[0]))
      volt8_variant_format(&variants[i], name, VOLT8_VARIANT_NAME_BYTES);
}

/* A top-k 8 tuning table `name` in temp_dir, its entries ("\"64\": \"%s\"", ...) formatted. */
static void write_table(const char *name, const char *entries, ...) {
  char formatted[400], text[512];
  va_list args;
  va_start(args, entries);
  vsnprintf(formatted, sizeof formatted, entries, args);
  va_end(args);
  snprintf(text, sizeof text, "{\"__metadata__\": {\"schema_version\": 1, \"top_k\": 8}, %s}", formatted);
  test_write_text(temp_dir, name, text);
}

/* A nearer table that names mma is passed over for the next one; this device's tables come before
 * other devices' even when those are nearer. (Built-in tables off: the shape's own H200 table would
 * come first, below.) */
Test(dispatch_fallback, nearest_skips_emulated_entries_and_prefers_this_device) {
  volt8_tuning_set_built_in(0);
  volt8_ctx *ctx = ctx_on("sm_90", "Test GPU");
  volt8_moe_shape shape = model_shape("glm-4.5-air", 8); /* gate_up N = 352, K = 4096 */
  int32_t count = 0;
  volt8_variant *variants = variants_of(ctx, &shape, &count);
  char mma[VOLT8_VARIANT_NAME_BYTES], hmma[VOLT8_VARIANT_NAME_BYTES];
  gate_up_of_kind(variants, count, VOLT8_KIND_GEMM_MMA, 0, mma);
  gate_up_of_kind(variants, count, VOLT8_KIND_GEMM_HMMA, 1, hmma);
  cr_assert(mma[0] && hmma[0], "sm_90 lists both gate_up families for this shape");
  write_table("op=gate_up,N=352,K=4000,block=128x128,arch=sm_90,device=Test_GPU.json", "\"64\": \"%s\"", mma);
  write_table("op=gate_up,N=704,K=4096,block=128x128,arch=sm_90,device=Test_GPU.json", "\"64\": \"%s\"", hmma);
  write_table("op=gate_up,N=340,K=4096,block=128x128,arch=sm_70,device=Test_GPU.json", "\"64\": \"%s\"", hmma);
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  volt8_tuning_match match;
  cr_assert_eq(volt8_tuning_nearest(ctx, &shape, VOLT8_OP_GATE_UP, 64, 8, variants, count, &match), VOLT8_OK);
  cr_assert_eq(match.source, VOLT8_TUNING_SOURCE_NEAREST);
  cr_assert_str_eq(match.variant, hmma, "the mma table is nearer but emulated; the sm_70 table is another arch");
  cr_assert_not_null(strstr(match.origin, "N=704,K=4096"), "%s", match.origin);
  volt8_variant_choice choice;
  cr_assert_eq(volt8_dispatch_choose(ctx, &shape, 64, 8, &choice), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_str_eq(names_of(&choice).gate_up, hmma);
  free(variants);
  volt8_ctx_destroy(ctx);
}

/* The exception to this device first: the shape's own table from another device serves the counts in
 * its range (from half its smallest M to its largest), where another shape's table of this device,
 * scaled, would otherwise speak; past its range this device's table serves again. The same when this
 * device's table begins at M = 1, so that it serves every count and no candidate after it is needed
 * for pass 1: the shape's own table from elsewhere, ranked after it, is still read. */
Test(dispatch_fallback, own_shape_elsewhere_serves_inside_its_range) {
  volt8_tuning_set_built_in(0);
  volt8_ctx *ctx = ctx_on("sm_90", "Test GPU");
  volt8_moe_shape shape = model_shape("glm-4.5-air", 8); /* gate_up N = 352, K = 4096 */
  int32_t count = 0;
  volt8_variant *variants = variants_of(ctx, &shape, &count);
  char here[VOLT8_VARIANT_NAME_BYTES], own[VOLT8_VARIANT_NAME_BYTES];
  gate_up_of_kind(variants, count, VOLT8_KIND_GEMM_HMMA, 0, here);
  gate_up_of_kind(variants, count, VOLT8_KIND_GEMM_HMMA, 1, own);
  cr_assert(here[0] && own[0] && strcmp(here, own) != 0);
  write_table("op=gate_up,N=352,K=4096,block=128x128,arch=sm_90,device=Other_GPU.json", "\"8\": \"%s\", \"128\": \"%s\"",
              own, own);
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  for (int from_one = 0; from_one < 2; from_one++) {
    write_table("op=gate_up,N=704,K=4096,block=128x128,arch=sm_90,device=Test_GPU.json",
                from_one ? "\"1\": \"%s\", \"16\": \"%s\"" : "\"16\": \"%s\"", here, here);
    const struct {
      int32_t tokens;
      const char *variant, *table; /* NULL: no table serves */
    } cases[] = {{4, own, "Other_GPU"},     /* half its smallest M */
                 {16, own, "Other_GPU"},    /* where this device's table of another shape was measured */
                 {128, own, "Other_GPU"},   /* its largest M */
                 {129, here, "Test_GPU"},   /* past its range */
                 {4096, here, "Test_GPU"},
                 {2, from_one ? here : NULL, from_one ? "Test_GPU" : NULL}}; /* below the own table's range */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      volt8_tuning_match match;
      cr_assert_eq(volt8_tuning_nearest(ctx, &shape, VOLT8_OP_GATE_UP, cases[i].tokens, 8, variants, count, &match),
                   VOLT8_OK);
      if (!cases[i].variant) {
        cr_assert_eq(match.source, VOLT8_TUNING_SOURCE_NONE, "M=%d: %s", cases[i].tokens, match.origin);
        continue;
      }
      cr_assert_eq(match.source, VOLT8_TUNING_SOURCE_NEAREST, "M=%d", cases[i].tokens);
      cr_assert_str_eq(match.variant, cases[i].variant, "M=%d (from M = 1: %d): %s", cases[i].tokens, from_one,
                       match.origin);
      cr_assert_not_null(strstr(match.origin, cases[i].table), "M=%d: %s", cases[i].tokens, match.origin);
    }
  }
  free(variants);
  volt8_ctx_destroy(ctx);
}

/* GLM-4.5 TP1's gate_up (N 3072, K 5120): where the nearest table's entry at the scaled count is a
 * tile too large for K = 5120 (shared memory), that table's entry at the nearest M that fits serves
 * when it is within a factor of two of the scaled count; beyond that the next table serves. */
Test(dispatch_fallback, nearest_table_gives_its_nearest_fitting_entry) {
  volt8_tuning_set_built_in(0); /* the shape's own H200 table would serve M <= 128 (below) */
  volt8_ctx *ctx = ctx_on("sm_90", "Test GPU");
  volt8_moe_shape shape = model_shape("glm-4.5", 1);
  int32_t count = 0;
  volt8_variant *variants = variants_of(ctx, &shape, &count);
  const char *too_large = "gate_up.hmma.bm4.bn32.w4.sk1.f128", *fits = "gate_up.hmma.bm4.bn16.w4.sk4.o4.f128",
             *farther = "gate_up.hmma.bm2.bn16.w4.sk4.f128";
  cr_assert(volt8_variant_find(variants, count, too_large) < 0, "%s fits K = 5120", too_large);
  cr_assert(volt8_variant_find(variants, count, fits) >= 0 && volt8_variant_find(variants, count, farther) >= 0);
  write_table("op=gate_up,N=2816,K=4096,block=128x128,arch=sm_90,device=Test_GPU.json", "\"32\": \"%s\", \"64\": \"%s\"",
              fits, too_large);
  write_table("op=gate_up,N=4096,K=7168,block=128x128,arch=sm_90,device=Test_GPU.json", "\"64\": \"%s\", \"128\": \"%s\"",
              farther, farther);
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  const struct {
    int32_t tokens;
    const char *variant, *table;
  } cases[] = {{32, fits, "N=2816,K=4096"},      /* its nearest entry (32) fits; below 32 it does not speak */
               {56, fits, "N=2816,K=4096"},      /* 64 does not fit; 32 is within 2x of 56 */
               {64, fits, "N=2816,K=4096"},      {65, farther, "N=4096,K=7168"}, /* 32 is not within 2x */
               {128, farther, "N=4096,K=7168"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    volt8_tuning_match match;
    cr_assert_eq(volt8_tuning_nearest(ctx, &shape, VOLT8_OP_GATE_UP, cases[i].tokens, 8, variants, count, &match),
                 VOLT8_OK);
    cr_assert_eq(match.source, VOLT8_TUNING_SOURCE_NEAREST, "M=%d", cases[i].tokens);
    cr_assert_str_eq(match.variant, cases[i].variant, "M=%d", cases[i].tokens);
    cr_assert_not_null(strstr(match.origin, cases[i].table), "M=%d: %s", cases[i].tokens, match.origin);
  }
  free(variants);
  volt8_ctx_destroy(ctx);
}

/* An invalid candidate is skipped with one warning, and nothing is an error of the context. */
Test(dispatch_fallback, invalid_candidate_is_a_warning) {
  volt8_ctx *ctx = ctx_on("sm_90", "Test GPU");
  volt8_moe_shape shape = model_shape("qwen3-next", 8);
  test_write_text(temp_dir, "op=down,N=2048,K=80,block=128x128,arch=sm_90,device=Test_GPU.json", "{\"__metadata__\": ");
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  volt8_tuning_warnings_reset();
  volt8_variant_choice choice;
  cr_assert_eq(volt8_dispatch_choose(ctx, &shape, 8, 10, &choice), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(!is_mma(&choice.down), "%s", names_of(&choice).down);
  char text[8192];
  int32_t count = 0;
  cr_assert_eq(volt8_tuning_warnings(text, sizeof text, &count), VOLT8_OK);
  cr_assert_not_null(strstr(text, "N=2048,K=80,block=128x128,arch=sm_90,device=Test_GPU.json: tuning table is not valid JSON"), "%s",
                     text);
  cr_assert_str_eq(volt8_last_error(ctx), "");
  volt8_ctx_destroy(ctx);
}

/* Every matching table is ranked, however many the folder holds: 300 far tables of the op and arch
 * in $VOLT8_TUNING_DIR leave the nearer built-in table serving, and a nearer table among them
 * serves in its turn (hidden 2560, intermediate 96: gate_up N = 192, K = 2560, no table of its own;
 * the nearest built-in one is N = 160). */
Test(dispatch_fallback, every_candidate_is_ranked_however_many) {
  volt8_ctx *ctx = ctx_on("sm_70", "Test GPU");
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.intermediate = 96;
  shape.intermediate_offset = 0;
  int32_t count = 0;
  volt8_variant *variants = variants_of(ctx, &shape, &count);
  volt8_tuning_match built_in, match;
  cr_assert_eq(volt8_tuning_nearest(ctx, &shape, VOLT8_OP_GATE_UP, 8, 10, variants, count, &built_in), VOLT8_OK);
  cr_assert_eq(built_in.source, VOLT8_TUNING_SOURCE_NEAREST);
  cr_assert_not_null(strstr(built_in.origin, "built-in:tuning/tables/op=gate_up,N=160,K=2560,"), "%s", built_in.origin);
  char others[2][VOLT8_VARIANT_NAME_BYTES] = {"", ""};
  for (int32_t i = 0, found = 0; i < count && found < 2; i++) {
    if (variants[i].op != VOLT8_OP_GATE_UP) continue;
    volt8_variant_format(&variants[i], others[found], sizeof others[found]);
    if (strcmp(others[found], built_in.variant) != 0) found++;
  }
  cr_assert(others[0][0] && others[1][0]);

  char text[512], name[256];
  snprintf(text, sizeof text, "{\"__metadata__\": {\"schema_version\": 1, \"top_k\": 10}, \"8\": \"%s\"}", others[0]);
  for (int i = 0; i < 300; i++) {
    snprintf(name, sizeof name, "op=gate_up,N=%d,K=2560,block=128x128,arch=sm_70,device=any.json", 1000 + i);
    test_write_text(temp_dir, name, text);
  }
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  cr_assert_eq(volt8_tuning_nearest(ctx, &shape, VOLT8_OP_GATE_UP, 8, 10, variants, count, &match), VOLT8_OK);
  cr_assert_str_eq(match.origin, built_in.origin, "300 farther tables hid the nearest one");
  cr_assert_str_eq(match.variant, built_in.variant);

  snprintf(text, sizeof text, "{\"__metadata__\": {\"schema_version\": 1, \"top_k\": 10}, \"8\": \"%s\"}", others[1]);
  test_write_text(temp_dir, "op=gate_up,N=192,K=2600,block=128x128,arch=sm_70,device=any.json", text);
  cr_assert_eq(volt8_tuning_nearest(ctx, &shape, VOLT8_OP_GATE_UP, 8, 10, variants, count, &match), VOLT8_OK);
  cr_assert_not_null(strstr(match.origin, "/op=gate_up,N=192,K=2600,"), "%s", match.origin);
  cr_assert_str_eq(match.variant, others[1]);
  volt8_variant_choice choice;
  cr_assert_eq(volt8_dispatch_choose(ctx, &shape, 8, 10, &choice), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_str_eq(names_of(&choice).gate_up, others[1]);
  free(variants);
  volt8_ctx_destroy(ctx);
}

/* A table of large M alone (this device's, measured from M = 256) speaks for counts from half its
 * smallest M up; below that the next candidate serves, here the built-in H200 table of the same shape,
 * past this device's own and its other shape's tables that also begin above the count. From twice its
 * largest M on (a large-item class there) it does not speak either. */
Test(dispatch_fallback, a_table_of_large_m_alone_gives_way_below_its_range) {
  volt8_ctx *ctx = ctx_on("sm_90", "Test GPU");
  volt8_moe_shape shape = model_shape("glm-4.5-air", 4); /* gate_up N = 704, K = 4096 */
  int32_t count = 0;
  volt8_variant *variants = variants_of(ctx, &shape, &count);
  char raw[VOLT8_VARIANT_NAME_BYTES], tile[VOLT8_VARIANT_NAME_BYTES];
  gate_up_of_kind(variants, count, VOLT8_KIND_GEMM_RAW, 0, raw);
  gate_up_of_kind(variants, count, VOLT8_KIND_GEMM_TILE, 0, tile);
  cr_assert(raw[0] && tile[0], "sm_90 lists raw and tile gate_ups for this shape");
  write_table("op=gate_up,N=704,K=4096,block=128x128,arch=sm_90,device=Test_GPU.json", "\"256\": \"%s\", \"512\": \"%s\"",
              raw, tile);
  write_table("op=gate_up,N=700,K=4096,block=128x128,arch=sm_90,device=Test_GPU.json", "\"512\": \"%s\"", tile);
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  volt8_tuning_table h200;
  const char *path = H200_TABLE("gate_up", 704, 4096);
  const volt8_embedded_file *file = volt8_embedded_find(path);
  cr_assert_not_null(file, "%s is not built in", path);
  cr_assert_eq(volt8_tuning_table_parse(NULL, file->data, file->size, path, "gate_up", &h200), VOLT8_OK);
  cr_assert_eq(h200.entries[0].m, 1, "the built-in table begins at M = 1");
  volt8_dispatch_plan *plan = NULL;
  cr_assert_eq(volt8_dispatch_plan_create(ctx, &shape, &plan), VOLT8_OK, "%s", volt8_last_error(ctx));
  const int32_t below[] = {1, 8, 64, 127};
  for (size_t i = 0; i < sizeof below / sizeof below[0]; i++) {
    volt8_variant_choice choice;
    volt8_choice_origin origins[2];
    cr_assert_eq(volt8_dispatch_plan_choose(plan, below[i], 8, &choice, origins), VOLT8_OK);
    cr_assert_eq(origins[0].source, VOLT8_TUNING_SOURCE_NEAREST, "M=%d", below[i]);
    cr_assert_not_null(strstr(origins[0].origin, "device=NVIDIA_H200"), "M=%d: %s", below[i], origins[0].origin);
    cr_assert_str_eq(names_of(&choice).gate_up, volt8_tuning_table_nearest(&h200, below[i], 8)->variant, "M=%d",
                     below[i]);
  }
  const struct {
    int32_t tokens;
    const char *variant;
  } own[] = {{128, raw}, {300, raw}, {384, raw}, {385, tile}, {1023, tile}}; /* a tie keeps the smaller M */
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
    volt8_variant_choice choice;
    volt8_choice_origin origins[2];
    cr_assert_eq(volt8_dispatch_plan_choose(plan, own[i].tokens, 8, &choice, origins), VOLT8_OK);
    cr_assert_not_null(origins[0].origin, "M=%d: the heuristic served", own[i].tokens);
    cr_assert_not_null(strstr(origins[0].origin, "device=Test_GPU"), "M=%d: %s", own[i].tokens, origins[0].origin);
    cr_assert_not_null(strstr(origins[0].origin, "N=704,K=4096"), "M=%d: %s", own[i].tokens, origins[0].origin);
    cr_assert_str_eq(names_of(&choice).gate_up, own[i].variant, "M=%d", own[i].tokens);
  }
  /* At twice its last M (a large-item class there) the table no longer speaks: the heuristic serves. */
  volt8_variant_choice choice;
  volt8_choice_origin origins[2];
  cr_assert_eq(volt8_dispatch_plan_choose(plan, 1024, 8, &choice, origins), VOLT8_OK);
  cr_assert_eq(origins[0].source, VOLT8_TUNING_SOURCE_NONE, "M=1024: %s", origins[0].origin);
  cr_assert_eq(choice.gate_up.kind, VOLT8_KIND_GEMM_RAW, "M=1024: %s", names_of(&choice).gate_up);
  volt8_dispatch_plan_destroy(plan);
  volt8_tuning_table_free(&h200);
  free(variants);
  volt8_ctx_destroy(ctx);
}

/* Asserts that both ops of the plan's choice at `tokens` and `top_k` come from a table whose origin
 * holds `device` and the op's `table` part ("N=..,K=..", NULL: any). */
static void assert_tables_serve(const volt8_dispatch_plan *plan, int32_t tokens, int32_t top_k, const char *device,
                                const char *const table[2]) {
  volt8_variant_choice choice;
  volt8_choice_origin origins[2];
  cr_assert_eq(volt8_dispatch_plan_choose(plan, tokens, top_k, &choice, origins), VOLT8_OK);
  for (int op = 0; op < 2; op++) {
    cr_assert_not_null(origins[op].origin, "M=%d: the heuristic served", tokens);
    cr_assert_not_null(strstr(origins[op].origin, device), "M=%d: %s", tokens, origins[op].origin);
    if (table) cr_assert_not_null(strstr(origins[op].origin, table[op]), "M=%d: %s", tokens, origins[op].origin);
  }
}

/* The shipped H100 tables of DeepSeek-V3 TP4 hold M = 256..16384 alone: on that GPU the decode sizes
 * keep the H200 tables' picks (the same shape, another device), and from M = 128 the H100's own serve.
 * DeepSeek-V3 TP2's H100 tables, from M = 1, would speak for the decode sizes at TP4 (the same pairs per
 * expert) but for the shape's own table from the H200, which serves inside its range first. */
Test(dispatch_fallback, shipped_h100_tables_of_large_m_leave_decode_sizes_to_the_h200_tables) {
  volt8_ctx *ctx = ctx_on("sm_90", "NVIDIA H100 80GB HBM3");
  volt8_moe_shape shape = model_shape("deepseek-v3", 4);
  volt8_dispatch_plan *plan = NULL;
  cr_assert_eq(volt8_dispatch_plan_create(ctx, &shape, &plan), VOLT8_OK, "%s", volt8_last_error(ctx));
  for (int32_t tokens = 1; tokens <= 16384; tokens *= 2)
    assert_tables_serve(plan, tokens, 8, tokens < 128 ? "device=NVIDIA_H200." : "device=NVIDIA_H100_80GB_HBM3.", NULL);
  volt8_dispatch_plan_destroy(plan);
  volt8_ctx_destroy(ctx);
}

/* On an H100, a decode size of every registry rank is served by its own shape's table: from the
 * H200 where the H100 tables of the shape begin at M = 256, and from the H100 where they begin at
 * M = 1 (DeepSeek-V3 and GLM-4.5 at TP2). Another shape's table does not speak below its range
 * (reach 1, where a shape's own table reaches twice below it): at M = 64 the old rule, reach 2,
 * served GLM-4.5-Air TP4 from DeepSeek-V3's H100 tables, 247.1 us against 223.3 on the same H100.
 * Nor does another shape's H100 table that begins at M = 1 hide the shape's own H200 table: it
 * served Qwen3-Next TP8 at M = 1 from DeepSeek-V3 TP2's H100 entries until the shape's own tables
 * from other devices were read past the first table that serves every count. */
Test(dispatch_fallback, a_decode_size_is_served_by_its_own_shapes_table) {
  volt8_ctx *ctx = ctx_on("sm_90", "NVIDIA H100 80GB HBM3");
  for (int32_t index = 0; index < volt8_model_count(); index++) {
    const volt8_model *model = volt8_model_at(index);
    for (int32_t tp = 1; tp <= 8; tp *= 2) {
      volt8_moe_shape shape = model_shape(model->name, tp);
      volt8_dispatch_plan *plan = NULL;
      cr_assert_eq(volt8_dispatch_plan_create(ctx, &shape, &plan), VOLT8_OK, "%s", volt8_last_error(ctx));
      char own[2][48];
      snprintf(own[0], sizeof own[0], "N=%d,K=%d,", 2 * shape.intermediate, shape.hidden);
      snprintf(own[1], sizeof own[1], "N=%d,K=%d,", shape.hidden, shape.intermediate);
      const char *const tables[2] = {own[0], own[1]};
      for (int32_t tokens = 1; tokens <= 64; tokens *= 2)
        assert_tables_serve(plan, tokens, model->top_k, "device=NVIDIA_H", tables);
      volt8_dispatch_plan_destroy(plan);
    }
  }
  volt8_ctx_destroy(ctx);
}

