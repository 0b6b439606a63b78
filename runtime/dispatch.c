/* Dispatch policy: which variant of each op serves a token count. The tuning tables (tuning.h)
 * come first; for an op without a table, or whose table names a variant the code generator does
 * not offer for the shape, a deterministic heuristic (and a warning recorded by tuning.c). */
#include "dispatch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen.h"
#include "ctx_internal.h"
#include "tuning.h"

/* The first listed variant whose name starts with `prefix`, else the first of the op. */
static int pick(char **names, int32_t count, const char *op, const char *prefix, char *out) {
  const char *fallback = NULL;
  size_t op_len = strlen(op);
  for (int32_t i = 0; i < count; i++) {
    if (strncmp(names[i], prefix, strlen(prefix)) == 0) {
      snprintf(out, VOLT8_VARIANT_NAME_BYTES, "%s", names[i]);
      return 1;
    }
    if (!fallback && strncmp(names[i], op, op_len) == 0 && names[i][op_len] == '.') fallback = names[i];
  }
  if (!fallback) return 0;
  snprintf(out, VOLT8_VARIANT_NAME_BYTES, "%s", fallback);
  return 1;
}

/* The heuristic: the family and block_m from the expected busiest expert under uniform routing
 * (mean plus two standard deviations), the first listed tile of that family. */
static int heuristic_choice(char **names, int32_t count, const volt8_moe_shape *shape, int32_t num_tokens,
                            int32_t top_k, volt8_variant_choice *out_choice) {
  double mean = (double)num_tokens * top_k / shape->num_experts;
  double busiest = mean + 2.0 * sqrt(mean) + 1.0;
  const char *family = busiest <= 4.0 ? "cc.bm4." : busiest <= 24.0 ? "mma.bm16." : "mma.bm32.";
  char gate_up_prefix[64], down_prefix[64];
  snprintf(gate_up_prefix, sizeof gate_up_prefix, "gate_up.%s", family);
  snprintf(down_prefix, sizeof down_prefix, "down.%s", family);
  return pick(names, count, "gate_up", gate_up_prefix, out_choice->gate_up) &&
         pick(names, count, "down", down_prefix, out_choice->down);
}

static int listed(char **names, int32_t count, const char *variant) {
  for (int32_t i = 0; i < count; i++)
    if (strcmp(names[i], variant) == 0) return 1;
  return 0;
}

/* Replaces the heuristic's pick for `op` with the tuning table's, when there is one that fits. */
static volt8_status apply_table(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_op op, int32_t num_tokens,
                                int32_t top_k, char **names, int32_t count, char *chosen) {
  volt8_tuning_match match;
  volt8_status status = volt8_tuning_lookup(ctx, shape, op, num_tokens, top_k, &match);
  if (status != VOLT8_OK || match.source == VOLT8_TUNING_SOURCE_NONE) return status;
  if (!listed(names, count, match.variant)) {
    char key[VOLT8_TUNING_ORIGIN_BYTES + VOLT8_VARIANT_NAME_BYTES + 2];
    snprintf(key, sizeof key, "%s#%s", match.origin, match.variant);
    volt8_tuning_warn(key, "tuning table %s names %s (M=%d), which the code generator does not offer for this shape: "
                      "the heuristic's %s serves instead", match.origin, match.variant, match.table_m, chosen);
    return VOLT8_OK;
  }
  snprintf(chosen, VOLT8_VARIANT_NAME_BYTES, "%s", match.variant);
  return VOLT8_OK;
}

volt8_status volt8_dispatch_choose(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t num_tokens, int32_t top_k,
                                   volt8_variant_choice *out_choice) {
  char **names = NULL;
  int32_t count = 0;
  volt8_status status = volt8_codegen_list(ctx, shape, &names, &count);
  if (status != VOLT8_OK) return status;
  if (!heuristic_choice(names, count, shape, num_tokens, top_k, out_choice)) {
    volt8_codegen_names_free(names, count);
    return volt8_fail(ctx, VOLT8_ERR_INTERNAL, "the code generator lists no gate_up or down variant");
  }
  status = apply_table(ctx, shape, VOLT8_OP_GATE_UP, num_tokens, top_k, names, count, out_choice->gate_up);
  if (status == VOLT8_OK)
    status = apply_table(ctx, shape, VOLT8_OP_DOWN, num_tokens, top_k, names, count, out_choice->down);
  volt8_codegen_names_free(names, count);
  return status;
}
