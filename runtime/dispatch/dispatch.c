/* Dispatch policy: which variant of each op serves a token count, in three rules (tuning_shape.h):
 * this device's table of the shape, else the same shape's table of another device of the arch, else a
 * deterministic heuristic, which never picks a family the target arch emulates. A plan reads the
 * variant list and the tables once; its choices are table look-ups. */
#include "dispatch/dispatch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx_internal.h"
#include "dispatch/tuning.h"
#include "dispatch/tuning_shape.h"
#include "moe/kernels/moe_layout.h"

/* The heuristic's classes of the expected busiest expert's routed pairs: up to `busiest`, the family,
 * block_m, warps and CTAs an SM (0: the first listed). sm_70: CUDA cores, then m8n8k4 tensor cores. sm_80
 * and later emulate m8n8k4, so there m16n8k16 at every size, with the block_m the sm_90 tables pick at
 * the same load. Past those, on sm_70 the tile family's items of 64 pairs (its 128-pair tile of 8 warps
 * spills at two CTAs an SM); on sm_80 and later the raw family's items of 32, 64 and 128 pairs. */
typedef struct heuristic_class {
  double busiest;
  volt8_kind kind;
  int32_t block_m, warps, min_blocks;
} heuristic_class;

#define MAX_CLASSES 7
/* The busiest expert's pairs (mean plus two standard deviations) past which the large-item families run
 * (a mean of about 13 pairs an expert), past which sm_80 and later take 64-pair items (about 26) and
 * past which they take 128-pair items (about 96). Measured on the H200: at a mean of 16 (DeepSeek-V3
 * TP8, M = 512) the 64-pair tile took 1092 us against m16n8k16's 1582; at a mean of 10 (the reference
 * TP4 and TP8, M = 512) 595 against 388 and 396 against 222 (2026-12-02). On sm_80 and later (2026-12-04,
 * pinned, TP8, M = 512 / 1024 / 2048): the raw family's 32-pair items took 610 / 904 / 1562 us at
 * DeepSeek-V3 and 255 / 467 / 826 at GLM-4.5, its 64-pair items at four CTAs an SM 820 / 879 / 1335 and
 * 325 / 370 / 702, at two 862 / 914 / 1395 and 352 / 398 / 731, against the tile family's classes'
 * 860 / 1081 / 1604 and 349 / 443 / 680 (GLM-4.5's M = 2048 in 128-pair tiles); its 128-pair items of 4
 * warps (one along the pairs) 7554 and 4332 us at M = 16384 and 647 at GLM-4.5's M = 2048, against the
 * tile family's 7902, 4487 and 679. sm_70 runs 64-pair items of 8 warps from the first bound on.
 * sm_80 and later take the raw family from a lower bound, 14 (a mean of about 8 pairs an expert), since
 * its items keep the weights as codes: on an H100 (2026-12-06, the tuner's forward times at M = 256)
 * the best raw pair took 1071 us against the m16n8k16 pair the tables and this heuristic served, 1785,
 * at DeepSeek-V3 TP4 (busiest 14.7), and 407 against 630 at GLM-4.5 TP4 (21.0); and at a busiest of 17.3
 * (the reference and Qwen3-Next, M = 512) the m16n8k16 pair took as long as the raw pair at M = 1024. */
#define VOLT8_LARGE_ITEMS_FROM_BUSIEST 22.0
#define VOLT8_SM80_LARGE_ITEMS_FROM_BUSIEST 14.0
#define VOLT8_SM80_ITEMS_64_FROM_BUSIEST 40.0
#define VOLT8_SM80_ITEMS_128_FROM_BUSIEST 117.0
static const heuristic_class SM70_CLASSES[] = {{4.0, VOLT8_KIND_GEMM_CC, 4, 0, 0},
                                               {24.0, VOLT8_KIND_GEMM_MMA, 16, 0, 0},
                                               {VOLT8_LARGE_ITEMS_FROM_BUSIEST, VOLT8_KIND_GEMM_MMA, 32, 0, 0},
                                               {INFINITY, VOLT8_KIND_GEMM_TILE, 64, 8, 0}};
static const heuristic_class SM80_CLASSES[] = {{3.0, VOLT8_KIND_GEMM_HMMA, 1, 0, 0},
                                               {4.0, VOLT8_KIND_GEMM_HMMA, 2, 0, 0},
                                               {8.0, VOLT8_KIND_GEMM_HMMA, 4, 0, 0},
                                               {VOLT8_SM80_LARGE_ITEMS_FROM_BUSIEST, VOLT8_KIND_GEMM_HMMA, 8, 0, 0},
                                               {VOLT8_SM80_ITEMS_64_FROM_BUSIEST, VOLT8_KIND_GEMM_RAW, 32, 4, 0},
                                               {VOLT8_SM80_ITEMS_128_FROM_BUSIEST, VOLT8_KIND_GEMM_RAW, 64, 4, 4},
                                               {INFINITY, VOLT8_KIND_GEMM_RAW, 128, 4, 0}};

struct volt8_dispatch_plan {
  volt8_variant *variants;              /* the shape's, in name order */
  int32_t count;
  int32_t experts;                      /* the model's: with expert parallelism a rank's experts are as busy */
  const heuristic_class *classes;
  int32_t class_count;
  int32_t picks[MAX_CLASSES][2];        /* the heuristic's variant of each class, gate_up and down */
  volt8_shape_tables tables[2];         /* gate_up's, down's, in the lookup's order */
};

/* The first listed variant of `op` in the family of `kind` with block_m `block_m` (and `warps` warps and
 * `min_blocks` CTAs an SM, or any), else with the next smaller block_m the family lists for the shape,
 * else the first variant of the op; -1 when there is none. A class whose family serves no block_m of the
 * shape (a large-item family where the shape is narrower than its tiles) takes the class below it. */
static int32_t pick(const volt8_variant *variants, int32_t count, volt8_op op, volt8_kind kind, int32_t block_m,
                    int32_t warps, int32_t min_blocks) {
  for (int32_t bm = block_m; bm >= 1; bm /= 2)
    for (int pass = warps || min_blocks ? 0 : 1; pass < 2; pass++)
      for (int32_t i = 0; i < count; i++)
        if (variants[i].op == op && variants[i].kind == kind && variants[i].block_m == bm &&
            (pass == 1 || ((!warps || variants[i].warps == warps) &&
                           (!min_blocks || variants[i].min_blocks == min_blocks))))
          return i;
  for (int32_t i = 0; i < count; i++)
    if (variants[i].op == op) return i;
  return -1;
}

/* Whether the shape lists a variant of `op` of `kind`. */
static int lists_kind(const volt8_variant *variants, int32_t count, volt8_op op, volt8_kind kind) {
  for (int32_t i = 0; i < count; i++)
    if (variants[i].op == op && variants[i].kind == kind) return 1;
  return 0;
}

/* The heuristic's class: the expected busiest expert under uniform routing (mean plus two standard
 * deviations). */
static int32_t heuristic_class_of(const volt8_dispatch_plan *plan, int32_t num_tokens, int32_t top_k) {
  double mean = (double)num_tokens * top_k / plan->experts;
  double busiest = mean + 2.0 * sqrt(mean) + 1.0;
  int32_t i = 0;
  while (i + 1 < plan->class_count && !(busiest <= plan->classes[i].busiest)) i++;
  return i;
}

void volt8_dispatch_plan_destroy(volt8_dispatch_plan *plan) {
  if (!plan) return;
  for (int i = 0; i < 2; i++) volt8_shape_tables_free(&plan->tables[i]);
  free(plan->variants);
  free(plan);
}

volt8_status volt8_dispatch_plan_create(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_dispatch_plan **out_plan) {
  if (!shape || !out_plan)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_dispatch_plan_create: shape or out_plan is NULL");
  *out_plan = NULL;
  volt8_dispatch_plan *plan = calloc(1, sizeof *plan);
  if (!plan) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the dispatch plan");
  int32_t arch = volt8_codegen_arch(ctx);
  volt8_status status = volt8_catalogue_list(ctx, shape, arch, &plan->variants, &plan->count);
  plan->classes = arch < 80 ? SM70_CLASSES : SM80_CLASSES;
  plan->class_count = arch < 80 ? (int32_t)(sizeof SM70_CLASSES / sizeof SM70_CLASSES[0])
                                : (int32_t)(sizeof SM80_CLASSES / sizeof SM80_CLASSES[0]);
  plan->experts = volt8_moe_global_experts(shape);
  for (int32_t c = 0; c < plan->class_count && status == VOLT8_OK; c++) {
    for (int op = 0; op < 2; op++) {
      const heuristic_class *class = &plan->classes[c];
      if (c > 0 && !lists_kind(plan->variants, plan->count, (volt8_op)op, class->kind)) {
        plan->picks[c][op] = plan->picks[c - 1][op];
        continue;
      }
      plan->picks[c][op] =
          pick(plan->variants, plan->count, (volt8_op)op, class->kind, class->block_m, class->warps, class->min_blocks);
      if (plan->picks[c][op] < 0)
        status = volt8_fail(ctx, VOLT8_ERR_INTERNAL, "the code generator lists no gate_up or down variant");
    }
  }
  for (int op = 0; op < 2 && status == VOLT8_OK; op++)
    status = volt8_shape_tables_load(ctx, shape, (volt8_op)op, plan->variants, plan->count, &plan->tables[op]);
  if (status != VOLT8_OK) {
    volt8_dispatch_plan_destroy(plan);
    return status;
  }
  *out_plan = plan;
  return VOLT8_OK;
}

/* Replaces the heuristic's pick for `op` with the tables' (rules 1 and 2), where one serves the count. */
static void apply_tables(const volt8_dispatch_plan *plan, volt8_op op, int32_t num_tokens, int32_t top_k,
                         volt8_variant *chosen, volt8_choice_origin *origin) {
  int32_t index = -1;
  const volt8_shape_table *table = NULL;
  const volt8_tuning_entry *entry = volt8_shape_tables_pick(&plan->tables[op], num_tokens, top_k, &index, &table);
  if (!entry) return;
  *chosen = plan->variants[index];
  *origin = (volt8_choice_origin){table->loaded.source, entry->m, table->loaded.origin};
}

volt8_status volt8_dispatch_plan_choose(const volt8_dispatch_plan *plan, int32_t num_tokens, int32_t top_k,
                                        volt8_variant_choice *out_choice, volt8_choice_origin *origins) {
  int32_t c = heuristic_class_of(plan, num_tokens, top_k);
  out_choice->gate_up = plan->variants[plan->picks[c][0]];
  out_choice->down = plan->variants[plan->picks[c][1]];
  volt8_choice_origin chosen_from[2] = {{VOLT8_TUNING_SOURCE_NONE, 0, NULL}, {VOLT8_TUNING_SOURCE_NONE, 0, NULL}};
  apply_tables(plan, VOLT8_OP_GATE_UP, num_tokens, top_k, &out_choice->gate_up, &chosen_from[0]);
  apply_tables(plan, VOLT8_OP_DOWN, num_tokens, top_k, &out_choice->down, &chosen_from[1]);
  if (origins) memcpy(origins, chosen_from, sizeof chosen_from);
  return VOLT8_OK;
}

volt8_status volt8_dispatch_choose(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t num_tokens, int32_t top_k,
                                   volt8_variant_choice *out_choice) {
  volt8_dispatch_plan *plan = NULL;
  volt8_status status = volt8_dispatch_plan_create(ctx, shape, &plan);
  if (status == VOLT8_OK) status = volt8_dispatch_plan_choose(plan, num_tokens, top_k, out_choice, NULL);
  volt8_dispatch_plan_destroy(plan);
  return status;
}
