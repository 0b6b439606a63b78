/* What a forward runs is decided from a plan read once (runtime/moe/forward_plan.h): once it is read,
 * as volt8_experts_prepare reads it, no choice at any token count or top-k runs the code generator or
 * reads a tuning table, and every choice is the one the dispatch makes afresh. Shapes with their own
 * tables, with another device's tables of the shape, with the heuristic alone, and with a $VOLT8_TUNING_DIR. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/models.h"
#include "core/ctx_internal.h"
#include "core/work_counts.h"
#include "dispatch/dispatch.h"
#include "dispatch/tuning.h"
#include "moe/forward_plan.h"
#include "test_support.h"

#define MAX_M 1024
#define MAX_TOP_K 16

static char temp_dir[4096];

static void set_up(void) {
  test_make_temp_dir(temp_dir, sizeof temp_dir, "volt8_dispatch_plan");
  unsetenv(VOLT8_TUNING_DIR_ENV);
}

static void tear_down(void) {
  unsetenv(VOLT8_TUNING_DIR_ENV);
  test_remove_tree(temp_dir);
}

TestSuite(dispatch_plan, .init = set_up, .fini = tear_down, .timeout = 120);

static volt8_moe_shape model_shape(const char *name, int32_t tp, int32_t rank) {
  volt8_moe_shape shape;
  cr_assert_eq(volt8_model_rank_shape(NULL, volt8_model_find(name), tp, rank, 0, &shape), VOLT8_OK);
  return shape;
}

/* Reads the plan as prepare does (reading tables where the shape has any: has_tables), then chooses at every M up to MAX_M and top-k up to MAX_TOP_K with
 * the counts of code generator runs and table reads unchanged; a sample of the choices against the
 * dispatch's from scratch. */
static void check_plan(const char *arch, const volt8_moe_shape *shape, int has_tables, const char *label) {
  volt8_ctx *ctx = test_cpu_ctx(arch);
  ctx->single_launch = 1; /* as VOLT8_SINGLE_LAUNCH=1 sets it: the one-launch rule is decided too */
  volt8_forward_plan plan;
  volt8_forward_plan_init(&plan, ctx, shape);
  volt8_work_counts before_read = volt8_work_counts_now();
  cr_assert_eq(volt8_forward_plan_read(&plan), VOLT8_OK, "%s: %s", label, volt8_last_error(ctx));
  volt8_work_counts read = volt8_work_counts_now();
  cr_assert_gt(read.codegen_runs, before_read.codegen_runs, "%s: reading the plan lists the variants", label);
  cr_assert_eq(read.tuning_reads > before_read.tuning_reads, has_tables, "%s: reading the plan reads the tables", label);
  static volt8_forward_kernels runs[MAX_M + 1][MAX_TOP_K + 1];
  for (int32_t m = 1; m <= MAX_M; m++) {
    for (int32_t top_k = 1; top_k <= MAX_TOP_K; top_k++)
      cr_assert_eq(volt8_forward_plan_choose(&plan, m, top_k, &runs[m][top_k]), VOLT8_OK, "%s", volt8_last_error(ctx));
    volt8_work_counts after = volt8_work_counts_now();
    cr_assert_eq(after.codegen_runs, read.codegen_runs, "%s: %lld code generator runs choosing at M=%d", label,
                 (long long)(after.codegen_runs - read.codegen_runs), m);
    cr_assert_eq(after.tuning_reads, read.tuning_reads, "%s: %lld tuning table reads choosing at M=%d", label,
                 (long long)(after.tuning_reads - read.tuning_reads), m);
  }
  const int32_t ms[] = {1, 3, 6, 13, 64, 100, 1000};
  const int32_t top_ks[] = {1, 8, 16};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
    for (size_t j = 0; j < sizeof top_ks / sizeof top_ks[0]; j++) {
      volt8_variant_choice fresh;
      const volt8_forward_kernels *planned = &runs[ms[i]][top_ks[j]];
      cr_assert_eq(volt8_dispatch_choose(ctx, shape, ms[i], top_ks[j], &fresh), VOLT8_OK, "%s", volt8_last_error(ctx));
      cr_assert(volt8_variant_equal(&planned->choice.gate_up, &fresh.gate_up), "%s M=%d top_k=%d", label, ms[i],
                top_ks[j]);
      cr_assert(volt8_variant_equal(&planned->choice.down, &fresh.down), "%s M=%d top_k=%d", label, ms[i], top_ks[j]);
      cr_assert_eq(planned->single, volt8_single_launch_serves(ctx, shape, 0, (int64_t)ms[i] * top_ks[j], &fresh),
                   "%s M=%d top_k=%d", label, ms[i], top_ks[j]);
    }
  }
  volt8_forward_plan_release(&plan);
  volt8_ctx_destroy(ctx);
}

Test(dispatch_plan, own_tables) {
  volt8_moe_shape shape = model_shape("reference", 4, 1);
  check_plan("sm_70", &shape, 1, "reference TP4 sm_70");
}

Test(dispatch_plan, other_devices_tables) {
  volt8_moe_shape shape = model_shape("glm-4.5-air", 8, 1);
  /* a CPU context names no device: the shape's H100 and H200 tables serve (rule 2) */
  check_plan("sm_90", &shape, 1, "GLM-4.5-Air TP8, sm_90");
}

Test(dispatch_plan, heuristic_alone) {
  volt8_moe_shape shape = model_shape("qwen3-next", 4, 0);
  shape.block_n = 1; /* no table has 1x128 blocks */
  check_plan("sm_70", &shape, 0, "Qwen3-Next TP4 online blocks");
}

Test(dispatch_plan, tuning_dir) {
  volt8_moe_shape shape = model_shape("reference", 8, 1);
  test_write_text(temp_dir, "op=down,N=2560,K=80,block=128x128,arch=sm_70,device=any.json",
                  "{\"__metadata__\": {\"schema_version\": 1, \"top_k\": 10}, \"1\": \"down.cc.bm1.bn32.w4.sk1.l4\", "
                  "\"64\": \"down.mma.bm16.bn32.w4.sk1\"}");
  setenv(VOLT8_TUNING_DIR_ENV, temp_dir, 1);
  check_plan("sm_70", &shape, 1, "reference TP8 from a tuning folder");
}

/* Pinned variants run as named, and never as the one launch. */
Test(dispatch_plan, pinned_variants) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  ctx->single_launch = 1;
  volt8_moe_shape shape = model_shape("reference", 4, 1);
  volt8_forward_plan plan;
  volt8_forward_plan_init(&plan, ctx, &shape);
  volt8_forward_kernels runs;
  cr_assert_eq(volt8_forward_plan_choose(&plan, 1, 10, &runs), VOLT8_OK, "%s", volt8_last_error(ctx));
  char gate_up[VOLT8_VARIANT_NAME_BYTES], down[VOLT8_VARIANT_NAME_BYTES];
  volt8_variant_format(&runs.choice.gate_up, gate_up, sizeof gate_up);
  volt8_variant_format(&runs.choice.down, down, sizeof down);
  cr_assert(runs.single && !runs.pinned, "M=1 at top-10 runs as one launch: %s, %s", gate_up, down);
  int changed = -1;
  cr_assert_eq(volt8_forward_plan_pin(&plan, gate_up, "down.mma.bm16.bn32.w4.sk1", &changed), VOLT8_OK);
  cr_assert_eq(changed, 1, "pinning where nothing was pinned is a change");
  /* The same names again change nothing (the eager repeat's epoch stays). */
  cr_assert_eq(volt8_forward_plan_pin(&plan, gate_up, "down.mma.bm16.bn32.w4.sk1", &changed), VOLT8_OK);
  cr_assert_eq(changed, 0, "the same pins again are no change");
  cr_assert_eq(volt8_forward_plan_choose(&plan, 1, 10, &runs), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(runs.pinned && !runs.single);
  volt8_variant_format(&runs.choice.down, down, sizeof down);
  cr_assert_str_eq(down, "down.mma.bm16.bn32.w4.sk1");
  cr_assert_eq(runs.origins[1].source, VOLT8_ORIGIN_PINNED);
  cr_assert_null(runs.origins[1].origin);
  /* A name outside the catalogue, or of the other op, is refused naming it, and the pins stay. */
  cr_assert_eq(volt8_forward_plan_pin(&plan, "gate_up.cc.bm3.bn8.w4.sk1.l16", NULL, &changed), VOLT8_ERR_NOT_FOUND);
  cr_assert_eq(changed, 0, "a refused pin changes nothing");
  cr_assert(strstr(volt8_last_error(ctx), "gate_up.cc.bm3.bn8.w4.sk1.l16") != NULL, "%s", volt8_last_error(ctx));
  cr_assert_eq(volt8_forward_plan_pin(&plan, "down.mma.bm16.bn32.w4.sk1", NULL, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(ctx), "is not a gate_up variant") != NULL, "%s", volt8_last_error(ctx));
  cr_assert_eq(volt8_forward_plan_choose(&plan, 1, 10, &runs), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(runs.pinned && runs.origins[0].source == VOLT8_ORIGIN_PINNED);
  volt8_forward_plan_release(&plan);
  volt8_ctx_destroy(ctx);
}

/* volt8_forward_describe on a context and a shape: the plan's choice, each op's origin, and the one
 * launch where VOLT8_SINGLE_LAUNCH=1 asks for it. */
Test(dispatch_plan, forward_describe_names_what_runs_and_where_it_came_from) {
  setenv("VOLT8_SINGLE_LAUNCH", "1", 1);
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  unsetenv("VOLT8_SINGLE_LAUNCH");
  struct {
    volt8_moe_shape shape;
    const char *origin_start;
  } cases[] = {{model_shape("reference", 4, 1), "built-in:tuning/tables/op=gate_up,N=320,K=2560,"},
               {model_shape("glm-4.5-air", 8, 1), "heuristic"},
               {model_shape("qwen3-next", 4, 0), "heuristic"}};
  cases[1].shape.hidden = 2560; /* no table of this shape on any device; another shape's never serves */
  cases[2].shape.block_n = 1;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    volt8_forward_plan plan;
    volt8_forward_plan_init(&plan, ctx, &cases[i].shape);
    const int32_t ms[] = {1, 8, 100};
    for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++) {
      volt8_forward_info info = VOLT8_FORWARD_INFO_INIT;
      volt8_forward_kernels runs;
      cr_assert_eq(volt8_forward_describe(ctx, &cases[i].shape, NULL, ms[j], 8, &info), VOLT8_OK, "%s",
                   volt8_last_error(ctx));
      cr_assert_eq(volt8_forward_plan_choose(&plan, ms[j], 8, &runs), VOLT8_OK, "%s", volt8_last_error(ctx));
      char gate_up[VOLT8_VARIANT_NAME_BYTES], down[VOLT8_VARIANT_NAME_BYTES];
      volt8_variant_format(&runs.choice.gate_up, gate_up, sizeof gate_up);
      volt8_variant_format(&runs.choice.down, down, sizeof down);
      cr_assert_str_eq(info.gate_up, gate_up, "case %zu M=%d", i, ms[j]);
      cr_assert_str_eq(info.down, down, "case %zu M=%d", i, ms[j]);
      cr_assert_eq(info.single_launch, runs.single, "case %zu M=%d", i, ms[j]);
      cr_assert_eq(info.pinned, 0);
      cr_assert(strncmp(info.gate_up_origin, cases[i].origin_start, strlen(cases[i].origin_start)) == 0,
                "case %zu M=%d: %s", i, ms[j], info.gate_up_origin);
    }
    volt8_forward_plan_release(&plan);
  }
  volt8_forward_info info = VOLT8_FORWARD_INFO_INIT;
  cr_assert_eq(volt8_forward_describe(ctx, &cases[0].shape, NULL, 1, 10, &info), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(info.single_launch, "reference TP4 M=1 top-10 on sm_70 runs as one launch: %s, %s", info.gate_up, info.down);
  cr_assert_str_eq(info.gate_up_origin + strlen(info.gate_up_origin) - 5, "(M=1)", "%s", info.gate_up_origin);
  volt8_ctx_destroy(ctx);
}
