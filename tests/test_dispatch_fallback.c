/* The dispatch's three rules (runtime/dispatch/tuning_shape.h): this device's table of the shape
 * inside its range, else the same shape's table of another device of the arch, else the heuristic;
 * none picks a family the target arch emulates (mma on sm_80 and later), and another shape's table
 * never serves. */
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
#include "dispatch/tuning_shape.h"

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
/* With no table, the heuristic's large-item classes by the busiest expert's pairs: on sm_90, the raw
 * family's items of 32 pairs at a mean of 16 (DeepSeek-V3 TP8, M = 512), of 64 at four CTAs an SM at 64
 * (M = 2048) and of 128 (4 warps) at 512 (M = 16384); on sm_70 (its derived tables) the tile family's
 * items, of 32 pairs or more at M = 512 and of 64 or more past it. */
Test(dispatch_fallback, tile_classes_by_the_busiest_expert) {
  volt8_moe_shape shape = model_shape("deepseek-v3", 8);
  const int32_t tokens[3] = {512, 2048, 16384};
  const char *sm90_expected[3][2] = {{"gate_up.raw.bm32.bn64.w4.sk1.o2.f256", "down.raw.bm32.bn128.w4.sk1.o2.f256"},
                                     {"gate_up.raw.bm64.bn64.w4.sk1.o4.f256", "down.raw.bm64.bn128.w4.sk1.o4.f256"},
                                     {"gate_up.raw.bm128.bn64.w4.sk1.o2.f256", "down.raw.bm128.bn128.w4.sk1.o2.f256"}};
  volt8_ctx *sm90 = ctx_on("sm_90", "NVIDIA H200"), *sm70 = ctx_on("sm_70", "Tesla V100-SXM2-16GB");
  for (int i = 0; i < 3; i++) {
    volt8_variant_choice choice;
    volt8_tuning_set_built_in(0);
    cr_assert_eq(volt8_dispatch_choose(sm90, &shape, tokens[i], 8, &choice), VOLT8_OK, "%s", volt8_last_error(sm90));
    volt8_tuning_set_built_in(1);
    choice_names names = names_of(&choice);
    cr_assert_str_eq(names.gate_up, sm90_expected[i][0], "sm_90 M=%d", tokens[i]);
    cr_assert_str_eq(names.down, sm90_expected[i][1], "sm_90 M=%d", tokens[i]);
    cr_assert_eq(volt8_dispatch_choose(sm70, &shape, tokens[i], 8, &choice), VOLT8_OK, "%s", volt8_last_error(sm70));
    int32_t least = tokens[i] >= 2048 ? 64 : 32;
    cr_assert(choice.gate_up.kind == VOLT8_KIND_GEMM_TILE && choice.down.kind == VOLT8_KIND_GEMM_TILE &&
                  choice.gate_up.block_m >= least && choice.down.block_m >= least,
              "sm_70 M=%d: %s / %s", tokens[i], names_of(&choice).gate_up, names_of(&choice).down);
  }
  volt8_ctx_destroy(sm90);
  volt8_ctx_destroy(sm70);
}

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


/* The gate_up origin and name of the plan's choice at `tokens` (top-k 8). */
static volt8_choice_origin gate_up_at(const volt8_dispatch_plan *plan, int32_t tokens, char name[VOLT8_VARIANT_NAME_BYTES]) {
  volt8_variant_choice choice;
  volt8_choice_origin origins[2];
  cr_assert_eq(volt8_dispatch_plan_choose(plan, tokens, 8, &choice, origins), VOLT8_OK);
  volt8_variant_format(&choice.gate_up, name, VOLT8_VARIANT_NAME_BYTES);
  return origins[0];
}

/* Rules 1 and 2 on GLM-4.5-Air TP4 (gate_up N = 704, K = 4096), whose built-in tables are the H200's (M =
 * 1..16384) and the H100's (M = 256..16384). This device's table, measured at M = 256 and 512, serves
 * from half its smallest M to its largest, its entry of the nearest M (a tie keeps the smaller); below
 * and above that range the same shape's tables of the other devices serve, in name order, each inside its
 * own range (the H100's from M = 128); past every range the heuristic. Another shape's table of this
 * device, covering every count, never serves. */
Test(dispatch_fallback, this_devices_table_inside_its_range_then_other_devices_then_the_heuristic) {
  volt8_ctx *ctx = ctx_on("sm_90", "Test GPU");
  volt8_moe_shape shape = model_shape("glm-4.5-air", 4);
  int32_t count = 0;
  volt8_variant *variants = variants_of(ctx, &shape, &count);
  char raw[VOLT8_VARIANT_NAME_BYTES], tile[VOLT8_VARIANT_NAME_BYTES], name[VOLT8_VARIANT_NAME_BYTES];
  gate_up_of_kind(variants, count, VOLT8_KIND_GEMM_RAW, 0, raw);
  gate_up_of_kind(variants, count, VOLT8_KIND_GEMM_TILE, 0, tile);
  cr_assert(raw[0] && tile[0], "sm_90 lists raw and tile gate_ups for this shape");
  write_table("op=gate_up,N=704,K=4096,block=128x128,arch=sm_90,device=Test_GPU.json", "\"256\": \"%s\", \"512\": \"%s\"",
              raw, tile);
  write_table("op=gate_up,N=700,K=4096,block=128x128,arch=sm_90,device=Test_GPU.json",
              "\"1\": \"%s\", \"65536\": \"%s\"", tile, tile);
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  volt8_dispatch_plan *plan = NULL;
  cr_assert_eq(volt8_dispatch_plan_create(ctx, &shape, &plan), VOLT8_OK, "%s", volt8_last_error(ctx));
  const struct {
    int32_t tokens;
    const char *table, *variant; /* variant NULL: the table's own entry, checked below */
  } cases[] = {{1, "device=NVIDIA_H200.", NULL},  {127, "device=NVIDIA_H200.", NULL}, {128, "device=Test_GPU.", raw},
               {384, "device=Test_GPU.", raw},    {385, "device=Test_GPU.", tile},   {512, "device=Test_GPU.", tile},
               {513, "device=NVIDIA_H100_80GB_HBM3.", NULL}, {16384, "device=NVIDIA_H100_80GB_HBM3.", NULL}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    volt8_choice_origin origin = gate_up_at(plan, cases[i].tokens, name);
    cr_assert_not_null(origin.origin, "M=%d: the heuristic served", cases[i].tokens);
    cr_assert_not_null(strstr(origin.origin, cases[i].table), "M=%d: %s", cases[i].tokens, origin.origin);
    cr_assert_not_null(strstr(origin.origin, "N=704,K=4096,"), "M=%d: %s", cases[i].tokens, origin.origin);
    if (cases[i].variant) cr_assert_str_eq(name, cases[i].variant, "M=%d", cases[i].tokens);
    const char *path = strchr(origin.origin, ':');
    if (!cases[i].variant) {
      cr_assert_not_null(path, "%s is built in", origin.origin);
      const volt8_embedded_file *file = volt8_embedded_find(path + 1);
      volt8_tuning_table table;
      cr_assert_eq(volt8_tuning_table_parse(NULL, file->data, file->size, path + 1, "gate_up", &table), VOLT8_OK);
      cr_assert_str_eq(name, volt8_tuning_table_nearest(&table, cases[i].tokens, 8)->variant, "M=%d", cases[i].tokens);
      volt8_tuning_table_free(&table);
    }
  }
  volt8_choice_origin past = gate_up_at(plan, 16385, name);
  cr_assert_eq(past.source, VOLT8_TUNING_SOURCE_NONE, "M=16385, past every table's range: %s", past.origin);
  volt8_dispatch_plan_destroy(plan);
  free(variants);
  volt8_ctx_destroy(ctx);
}

/* A shape with no table of its own on any device: the heuristic at every count, however near another
 * shape's table is, and one warning that says so. */
Test(dispatch_fallback, another_shapes_table_never_serves) {
  volt8_ctx *ctx = ctx_on("sm_90", "NVIDIA H200");
  volt8_moe_shape shape = model_shape("glm-4.5-air", 8);
  shape.hidden = 2560; /* gate_up N = 352, K = 2560: the reference TP4's (N = 320) is near */
  volt8_tuning_warnings_reset();
  volt8_dispatch_plan *plan = NULL;
  cr_assert_eq(volt8_dispatch_plan_create(ctx, &shape, &plan), VOLT8_OK, "%s", volt8_last_error(ctx));
  for (int32_t tokens = 1; tokens <= 16384; tokens *= 2) {
    volt8_variant_choice choice;
    volt8_choice_origin origins[2];
    cr_assert_eq(volt8_dispatch_plan_choose(plan, tokens, 8, &choice, origins), VOLT8_OK);
    cr_assert(origins[0].source == VOLT8_TUNING_SOURCE_NONE && origins[1].source == VOLT8_TUNING_SOURCE_NONE,
              "M=%d: %s / %s", tokens, origins[0].origin, origins[1].origin);
  }
  char text[8192];
  int32_t count = 0;
  cr_assert_eq(volt8_tuning_warnings(text, sizeof text, &count), VOLT8_OK);
  cr_assert_not_null(strstr(text, "op=gate_up,N=352,K=2560,block=128x128,arch=sm_90,device=NVIDIA_H200.json (nor "
                                  "device=any) built in, nor one of another device: gate_up uses the dispatch heuristic"),
                     "%s", text);
  volt8_dispatch_plan_destroy(plan);
  volt8_ctx_destroy(ctx);
}

/* An entry naming a family the arch emulates (mma on sm_90), or a variant the shape does not offer, is
 * passed over with a warning: the next table that covers the count serves it. */
Test(dispatch_fallback, an_entry_the_shape_does_not_serve_gives_way_to_the_next_table) {
  volt8_ctx *ctx = ctx_on("sm_90", "Test GPU");
  volt8_moe_shape shape = model_shape("glm-4.5-air", 4);
  int32_t count = 0;
  volt8_variant *variants = variants_of(ctx, &shape, &count);
  char mma[VOLT8_VARIANT_NAME_BYTES], raw[VOLT8_VARIANT_NAME_BYTES], name[VOLT8_VARIANT_NAME_BYTES];
  gate_up_of_kind(variants, count, VOLT8_KIND_GEMM_MMA, 0, mma);
  gate_up_of_kind(variants, count, VOLT8_KIND_GEMM_RAW, 0, raw);
  cr_assert(mma[0] && raw[0], "sm_90 lists an mma gate_up for this shape");
  write_table("op=gate_up,N=704,K=4096,block=128x128,arch=sm_90,device=Test_GPU.json",
              "\"8\": \"%s\", \"64\": \"gate_up.hmma.bm1.bn8.w8.sk8.f1024\", \"512\": \"%s\"", mma, raw);
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  volt8_tuning_warnings_reset();
  volt8_dispatch_plan *plan = NULL;
  cr_assert_eq(volt8_dispatch_plan_create(ctx, &shape, &plan), VOLT8_OK, "%s", volt8_last_error(ctx));
  const int32_t passed_over[] = {8, 64};
  for (size_t i = 0; i < 2; i++) {
    volt8_choice_origin origin = gate_up_at(plan, passed_over[i], name);
    cr_assert_not_null(origin.origin, "M=%d", passed_over[i]);
    cr_assert_not_null(strstr(origin.origin, "device=NVIDIA_H200."), "M=%d: %s", passed_over[i], origin.origin);
    cr_assert_str_neq(name, mma, "M=%d", passed_over[i]);
  }
  cr_assert_str_eq((gate_up_at(plan, 512, name), name), raw);
  char text[8192];
  cr_assert_eq(volt8_tuning_warnings(text, sizeof text, NULL), VOLT8_OK);
  char expected[512];
  snprintf(expected, sizeof expected, "names %s (M=8), which this shape and arch do not serve: the next table", mma);
  cr_assert_not_null(strstr(text, expected), "%s", text);
  cr_assert_not_null(strstr(text, "names gate_up.hmma.bm1.bn8.w8.sk8.f1024 (M=64)"), "%s", text);
  volt8_dispatch_plan_destroy(plan);
  free(variants);
  volt8_ctx_destroy(ctx);
}

/* An invalid table is skipped with one warning, and nothing is an error of the context. */
Test(dispatch_fallback, invalid_table_is_a_warning) {
  volt8_ctx *ctx = ctx_on("sm_90", "Test GPU");
  volt8_moe_shape shape = model_shape("qwen3-next", 8);
  test_write_text(temp_dir, "op=down,N=2048,K=64,block=128x128,arch=sm_90,device=Test_GPU.json", "{\"__metadata__\": ");
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  volt8_tuning_warnings_reset();
  volt8_variant_choice choice;
  cr_assert_eq(volt8_dispatch_choose(ctx, &shape, 8, 10, &choice), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(!is_mma(&choice.down), "%s", names_of(&choice).down);
  char text[8192];
  int32_t count = 0;
  cr_assert_eq(volt8_tuning_warnings(text, sizeof text, &count), VOLT8_OK);
  cr_assert_not_null(strstr(text, "N=2048,K=64,block=128x128,arch=sm_90,device=Test_GPU.json: tuning table is not valid JSON"), "%s",
                     text);
  cr_assert_str_eq(volt8_last_error(ctx), "");
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
 * take the H200 tables' picks (the same shape, another device), and from M = 128 the H100's own serve.
 * On the H200, whose tables of the shape end at M = 128, the H100's serve past it. */
Test(dispatch_fallback, shipped_h100_tables_of_large_m_leave_decode_sizes_to_the_h200_tables) {
  volt8_ctx *ctx = ctx_on("sm_90", "NVIDIA H100 80GB HBM3");
  volt8_moe_shape shape = model_shape("deepseek-v3", 4);
  volt8_dispatch_plan *plan = NULL;
  cr_assert_eq(volt8_dispatch_plan_create(ctx, &shape, &plan), VOLT8_OK, "%s", volt8_last_error(ctx));
  for (int32_t tokens = 1; tokens <= 16384; tokens *= 2)
    assert_tables_serve(plan, tokens, 8, tokens < 128 ? "device=NVIDIA_H200." : "device=NVIDIA_H100_80GB_HBM3.", NULL);
  volt8_dispatch_plan_destroy(plan);
  volt8_ctx_destroy(ctx);
  ctx = ctx_on("sm_90", "NVIDIA H200");
  cr_assert_eq(volt8_dispatch_plan_create(ctx, &shape, &plan), VOLT8_OK, "%s", volt8_last_error(ctx));
  for (int32_t tokens = 1; tokens <= 16384; tokens *= 2)
    assert_tables_serve(plan, tokens, 8, tokens <= 128 ? "device=NVIDIA_H200." : "device=NVIDIA_H100_80GB_HBM3.", NULL);
  volt8_dispatch_plan_destroy(plan);
  volt8_ctx_destroy(ctx);
}

/* On an H100, a decode size of every registry rank is served by its own shape's table: from the
 * H200 where the H100 tables of the shape begin at M = 256, and from the H100 where they begin at
 * M = 1 (DeepSeek-V3 and GLM-4.5 at TP2). */
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

