/* forward_plan.h: the pinned variants, the dispatch plan and the one-launch rule together. */
#include "moe/forward_plan.h"

#include <stdio.h>
#include <string.h>

#include "core/ctx_internal.h"
#include "dispatch/tuning.h"
#include "moe/experts_internal.h"
#include "moe/kernels/single.h"
#include "moe/kernels/moe_layout.h"

void volt8_forward_plan_init(volt8_forward_plan *plan, volt8_ctx *ctx, const volt8_moe_shape *shape) {
  memset(plan, 0, sizeof *plan);
  plan->ctx = ctx;
  plan->shape = *shape;
}

void volt8_forward_plan_release(volt8_forward_plan *plan) {
  volt8_dispatch_plan_destroy(plan->dispatch);
  plan->dispatch = NULL;
}

volt8_status volt8_forward_plan_pin(volt8_forward_plan *plan, const char *gate_up, const char *down,
                                    int *out_changed) {
  const char *names[2] = {gate_up, down};
  volt8_variant variants[2];
  if (out_changed) *out_changed = 0;
  for (int op = 0; op < 2; op++) {
    if (!names[op]) continue;
    if (!volt8_variant_parse(names[op], &variants[op]))
      return volt8_fail(plan->ctx, VOLT8_ERR_NOT_FOUND, "volt8_experts_set_variants: unknown variant '%.120s'", names[op]);
    if (variants[op].op != (volt8_op)op)
      return volt8_fail(plan->ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_experts_set_variants: %s is not a %s variant",
                        names[op], op == VOLT8_OP_GATE_UP ? "gate_up" : "down");
  }
  int changed = 0;
  for (int op = 0; op < 2; op++) {
    int pinned = names[op] != NULL;
    changed |= pinned != plan->pinned[op] || (pinned && !volt8_variant_equal(&variants[op], &plan->pinned_variants[op]));
    plan->pinned[op] = pinned;
    if (names[op]) plan->pinned_variants[op] = variants[op];
  }
  if (out_changed) *out_changed = changed;
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
  const volt8_variant *gate_up = &choice->gate_up, *down = &choice->down;
  int cc_items = gate_up->kind == VOLT8_KIND_GEMM_CC && gate_up->block_m == 1 &&
                 ((down->kind == VOLT8_KIND_GEMM_CC && down->block_m == 1) || down->kind == VOLT8_KIND_DOWN_TOK);
  return ctx->single_launch && !pinned && volt8_moe_global_experts(shape) == shape->num_experts &&
         num_pairs <= VOLT8_SINGLE_MAX_PAIRS && volt8_single_fits(shape) && cc_items;
}

volt8_status volt8_forward_plan_choose(volt8_forward_plan *plan, int32_t num_tokens, int32_t top_k,
                                       volt8_forward_kernels *out) {
  volt8_status status = volt8_forward_plan_read(plan);
  if (status != VOLT8_OK) return status;
  status = volt8_dispatch_plan_choose(plan->dispatch, num_tokens, top_k, &out->choice, out->origins);
  if (status != VOLT8_OK) return status;
  volt8_variant *chosen[2] = {&out->choice.gate_up, &out->choice.down};
  out->pinned = plan->pinned[0] || plan->pinned[1];
  for (int op = 0; op < 2; op++) {
    if (!plan->pinned[op]) continue;
    *chosen[op] = plan->pinned_variants[op];
    out->origins[op] = (volt8_choice_origin){VOLT8_ORIGIN_PINNED, 0, NULL};
  }
  out->single = volt8_single_launch_serves(plan->ctx, &plan->shape, out->pinned, (int64_t)num_tokens * top_k,
                                           &out->choice);
  return VOLT8_OK;
}

/* "pinned", "heuristic" or "<table> (M=8)". */
static void origin_text(const volt8_choice_origin *origin, char *buf, size_t size) {
  if (origin->source == VOLT8_ORIGIN_PINNED) snprintf(buf, size, "pinned");
  else if (origin->source == VOLT8_TUNING_SOURCE_NONE) snprintf(buf, size, "heuristic");
  else
    snprintf(buf, size, "%.200s (M=%d)", origin->origin, origin->table_m);
}

void volt8_forward_info_fill(const volt8_forward_kernels *runs, volt8_forward_info *out_info) {
  volt8_forward_info info = VOLT8_FORWARD_INFO_INIT;
  info.single_launch = runs->single;
  info.pinned = runs->pinned;
  volt8_variant_format(&runs->choice.gate_up, info.gate_up, sizeof info.gate_up);
  volt8_variant_format(&runs->choice.down, info.down, sizeof info.down);
  origin_text(&runs->origins[0], info.gate_up_origin, sizeof info.gate_up_origin);
  origin_text(&runs->origins[1], info.down_origin, sizeof info.down_origin);
  volt8_copy_sized_output(out_info, &info, sizeof info);
}

volt8_status volt8_forward_describe(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_experts *experts,
                                    int32_t num_tokens, int32_t top_k, volt8_forward_info *out_info) {
  volt8_ctx *reporting = experts ? volt8_experts_ctx(experts) : ctx;
  if (!out_info || out_info->size < sizeof(size_t))
    return volt8_fail(reporting, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_forward_describe: out_info is NULL or its size unset (VOLT8_FORWARD_INFO_INIT)");
  if (experts ? ctx || shape : !ctx || !shape)
    return volt8_fail(reporting, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_forward_describe: give experts (ctx and shape NULL), or ctx and shape (experts NULL)");
  if (num_tokens < 1 || top_k < 1 || top_k > VOLT8_MAX_ROUTED_PAIRS / num_tokens)
    return volt8_fail(reporting, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_forward_describe: num_tokens %d and top_k %d must be positive and give at most %d routed "
                      "pairs", num_tokens, top_k, VOLT8_MAX_ROUTED_PAIRS);
  volt8_forward_plan one_call;
  volt8_status status = VOLT8_OK;
  if (!experts) {
    volt8_moe_shape read; /* the caller's shape, its size read first and nothing past it */
    status = volt8_moe_shape_in(ctx, "volt8_forward_describe", shape, &read);
    if (status == VOLT8_OK) status = volt8_moe_shape_check(ctx, &read);
    if (status != VOLT8_OK) return status;
    volt8_forward_plan_init(&one_call, ctx, &read);
  }
  volt8_forward_plan *plan = experts ? volt8_experts_plan(experts) : &one_call;
  volt8_forward_kernels runs;
  status = volt8_forward_plan_choose(plan, num_tokens, top_k, &runs);
  if (status == VOLT8_OK) volt8_forward_info_fill(&runs, out_info); /* the origins' texts live in the plan */
  if (!experts) volt8_forward_plan_release(&one_call);
  return status;
}
