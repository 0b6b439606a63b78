/* Dispatch policy: which variant of each op serves a token count. The tuning tables (tuning.h)
 * come first; for an op without a table, or whose table names a variant the code generator does
 * not offer for the shape, the nearest tabled shape's table (tuning_nearest.h), else a
 * deterministic heuristic (and a warning recorded by tuning.c). Neither fallback picks a family
 * the target arch emulates. */
#include "dispatch/dispatch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "jit/codegen.h"
#include "core/ctx_internal.h"
#include "dispatch/tuning.h"
#include "dispatch/tuning_nearest.h"

/* The first listed variant of `op` in `family` with block_m `block_m`, else with the next smaller
 * block_m the family lists for the shape, else the first variant of the op. */
static int pick(char **names, int32_t count, const char *op, const char *family, int32_t block_m, char *out) {
  for (int32_t bm = block_m; bm >= 1; bm /= 2) {
    char prefix[64];
    int length = snprintf(prefix, sizeof prefix, "%s.%s.bm%d.", op, family, bm);
    for (int32_t i = 0; i < count; i++)
      if (strncmp(names[i], prefix, (size_t)length) == 0) {
        snprintf(out, VOLT8_VARIANT_NAME_BYTES, "%s", names[i]);
        return 1;
      }
  }
  size_t op_len = strlen(op);
  for (int32_t i = 0; i < count; i++)
    if (strncmp(names[i], op, op_len) == 0 && names[i][op_len] == '.') {
      snprintf(out, VOLT8_VARIANT_NAME_BYTES, "%s", names[i]);
      return 1;
    }
  return 0;
}

/* The family and block_m for the expected busiest expert's routed pairs. sm_70: CUDA cores, then
 * m8n8k4 tensor cores. sm_80 and later emulate m8n8k4, so there m16n8k16 at every size, with the
 * block_m the sm_90 tables pick at the same load. */
static const char *heuristic_family(int32_t target_arch, double busiest, int32_t *out_block_m) {
  if (target_arch < 80) {
    *out_block_m = busiest <= 4.0 ? 4 : busiest <= 24.0 ? 16 : 32;
    return busiest <= 4.0 ? "cc" : "mma";
  }
  *out_block_m = busiest <= 3.0 ? 1 : busiest <= 4.0 ? 2 : busiest <= 8.0 ? 4 : 8;
  return "hmma";
}

/* The heuristic: the family and block_m from the expected busiest expert under uniform routing
 * (mean plus two standard deviations), the first listed tile of that family. */
static int heuristic_choice(char **names, int32_t count, const volt8_moe_shape *shape, int32_t num_tokens,
                            int32_t top_k, int32_t target_arch, volt8_variant_choice *out_choice) {
  /* pairs per expert: with expert parallelism a rank's experts are as busy as the model's */
  double mean = (double)num_tokens * top_k / (shape->global_experts > 0 ? shape->global_experts : shape->num_experts);
  double busiest = mean + 2.0 * sqrt(mean) + 1.0;
  int32_t block_m = 1;
  const char *family = heuristic_family(target_arch, busiest, &block_m);
  return pick(names, count, "gate_up", family, block_m, out_choice->gate_up) &&
         pick(names, count, "down", family, block_m, out_choice->down);
}

static int listed(char **names, int32_t count, const char *variant) {
  for (int32_t i = 0; i < count; i++)
    if (strcmp(names[i], variant) == 0) return 1;
  return 0;
}

/* Replaces the heuristic's pick for `op` with the tuning table's, when there is one that fits, else
 * with the nearest tabled shape's. */
static volt8_status apply_table(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_op op, int32_t num_tokens,
                                int32_t top_k, char **names, int32_t count, char *chosen) {
  volt8_tuning_match match;
  volt8_status status = volt8_tuning_lookup(ctx, shape, op, num_tokens, top_k, &match);
  if (status != VOLT8_OK) return status;
  if (match.source != VOLT8_TUNING_SOURCE_NONE && listed(names, count, match.variant)) {
    snprintf(chosen, VOLT8_VARIANT_NAME_BYTES, "%s", match.variant);
    return VOLT8_OK;
  }
  volt8_tuning_match nearest;
  status = volt8_tuning_nearest(ctx, shape, op, num_tokens, top_k, names, count, &nearest);
  if (status != VOLT8_OK) return status;
  if (nearest.source != VOLT8_TUNING_SOURCE_NONE) snprintf(chosen, VOLT8_VARIANT_NAME_BYTES, "%s", nearest.variant);
  if (match.source != VOLT8_TUNING_SOURCE_NONE) {
    char key[VOLT8_TUNING_ORIGIN_BYTES + VOLT8_VARIANT_NAME_BYTES + 2];
    snprintf(key, sizeof key, "%s#%s", match.origin, match.variant);
    volt8_tuning_warn(key, "tuning table %s names %s (M=%d), which the code generator does not offer for this shape: "
                      "the fallback's %s serves instead", match.origin, match.variant, match.table_m, chosen);
  }
  return VOLT8_OK;
}

volt8_status volt8_dispatch_choose(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t num_tokens, int32_t top_k,
                                   volt8_variant_choice *out_choice) {
  char **names = NULL;
  int32_t count = 0;
  volt8_status status = volt8_codegen_list(ctx, shape, &names, &count);
  if (status != VOLT8_OK) return status;
  if (!heuristic_choice(names, count, shape, num_tokens, top_k, ctx ? ctx->target_arch : 70, out_choice)) {
    volt8_codegen_names_free(names, count);
    return volt8_fail(ctx, VOLT8_ERR_INTERNAL, "the code generator lists no gate_up or down variant");
  }
  status = apply_table(ctx, shape, VOLT8_OP_GATE_UP, num_tokens, top_k, names, count, out_choice->gate_up);
  if (status == VOLT8_OK)
    status = apply_table(ctx, shape, VOLT8_OP_DOWN, num_tokens, top_k, names, count, out_choice->down);
  volt8_codegen_names_free(names, count);
  return status;
}
