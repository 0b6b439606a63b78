/* forward_plan.h: the pinned variants, the dispatch plan and the one-launch rule together. */
#include "moe/forward_plan.h"

#include <stdio.h>
#include <string.h>

#include "core/ctx_internal.h"
#include "jit/codegen.h"
#include "moe/moe_layout.h"

void volt8_forward_plan_init(volt8_forward_plan *plan, volt8_ctx *ctx, const volt8_moe_shape *shape) {
  memset(plan, 0, sizeof *plan);
  plan->ctx = ctx;
  plan->shape = *shape;
}

void volt8_forward_plan_release(volt8_forward_plan *plan) {
  volt8_dispatch_plan_destroy(plan->dispatch);
  plan->dispatch = NULL;
}

volt8_status volt8_forward_plan_pin(volt8_forward_plan *plan, const char *gate_up, const char *down) {
  const char *names[2] = {gate_up, down};
  char *targets[2] = {plan->pinned_gate_up, plan->pinned_down};
  for (int i = 0; i < 2; i++) {
    if (names[i] && strlen(names[i]) >= VOLT8_VARIANT_NAME_BYTES)
      return volt8_fail(plan->ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_experts_set_variants: name \"%s\" is too long",
                        names[i]);
  }
  for (int i = 0; i < 2; i++) snprintf(targets[i], VOLT8_VARIANT_NAME_BYTES, "%s", names[i] ? names[i] : "");
  return VOLT8_OK;
}

volt8_status volt8_forward_plan_read(volt8_forward_plan *plan) {
  if (plan->dispatch) return VOLT8_OK;
  return volt8_dispatch_plan_create(plan->ctx, &plan->shape, &plan->dispatch);
}

/* The one-launch forward (templates/moe_single.cu) serves the forward of a few tokens whose
 * dispatched kernels are block_m 1 cc work items (gate_up.cc.bm1 and down.cc.bm1 or tok), on a
 * target without early launch; variants pinned by name run as named. It indexes experts by the
 * routed id, so a rank holding part of the experts (expert parallelism) uses the separate kernels,
 * which map global ids to the rank's own. */
int volt8_single_launch_serves(const volt8_ctx *ctx, const volt8_moe_shape *shape, int pinned, int64_t num_pairs,
                               const volt8_variant_choice *choice) {
  return ctx->single_launch && !pinned && volt8_moe_global_experts(shape) == shape->num_experts &&
         num_pairs <= VOLT8_SINGLE_MAX_PAIRS && volt8_codegen_single_fits(shape) &&
         strncmp(choice->gate_up, "gate_up.cc.bm1.", 15) == 0 &&
         (strncmp(choice->down, "down.cc.bm1.", 12) == 0 || strncmp(choice->down, "down.tok.", 9) == 0);
}

volt8_status volt8_forward_plan_choose(volt8_forward_plan *plan, int32_t num_tokens, int32_t top_k,
                                       volt8_forward_kernels *out) {
  volt8_status status = volt8_forward_plan_read(plan);
  if (status != VOLT8_OK) return status;
  status = volt8_dispatch_plan_choose(plan->dispatch, num_tokens, top_k, &out->choice, out->origins);
  if (status != VOLT8_OK) return status;
  char *chosen[2] = {out->choice.gate_up, out->choice.down};
  const char *pinned[2] = {plan->pinned_gate_up, plan->pinned_down};
  out->pinned = pinned[0][0] || pinned[1][0];
  for (int i = 0; i < 2; i++) {
    if (!pinned[i][0]) continue;
    snprintf(chosen[i], VOLT8_VARIANT_NAME_BYTES, "%s", pinned[i]);
    out->origins[i] = (volt8_choice_origin){0, 0, NULL};
  }
  out->single = volt8_single_launch_serves(plan->ctx, &plan->shape, out->pinned, (int64_t)num_tokens * top_k,
                                           &out->choice);
  return VOLT8_OK;
}
