/* Forward argument checks (see moe_args.h). */
#include "moe/moe_args.h"

#include "core/ctx_internal.h"

volt8_status volt8_moe_args_check(volt8_ctx *ctx, const volt8_moe_limits *limits, const volt8_moe_args *args) {
  if (!args) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_moe_forward: args is NULL");
  if (args->size < offsetof(volt8_moe_args, check_ids) || args->size > sizeof(volt8_moe_args))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_moe_forward: args->size is %zu; use VOLT8_MOE_ARGS_INIT",
                      args->size);
  if (args->num_tokens <= 0 || args->num_tokens > limits->max_tokens)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_moe_forward: num_tokens %d outside 1..%d (the prepared maximum)", args->num_tokens,
                      limits->max_tokens);
  if (args->top_k <= 0 || args->top_k > limits->max_top_k || args->top_k > limits->num_experts)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_moe_forward: top_k %d outside 1..%d", args->top_k,
                      limits->max_top_k < limits->num_experts ? limits->max_top_k : limits->num_experts);
  const void *pointers[4] = {args->x, args->topk_ids, args->topk_weights, args->out};
  const char *names[4] = {"x", "topk_ids", "topk_weights", "out"};
  const uintptr_t alignment[4] = {16, 4, 4, 16};
  for (int i = 0; i < 4; i++) {
    if (!pointers[i]) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_moe_forward: %s is NULL", names[i]);
    if ((uintptr_t)pointers[i] % alignment[i])
      return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_moe_forward: %s (%p) is not %u-byte aligned", names[i],
                        pointers[i], (unsigned)alignment[i]);
  }
  return VOLT8_OK;
}

volt8_status volt8_moe_ids_check(volt8_ctx *ctx, const int32_t *ids, int32_t num_tokens, int32_t top_k,
                                 int32_t num_experts) {
  for (int32_t t = 0; t < num_tokens; t++)
    for (int32_t j = 0; j < top_k; j++) {
      int32_t id = ids[(int64_t)t * top_k + j];
      if (id < 0 || id >= num_experts)
        return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_moe_forward: topk_ids[%d][%d] = %d outside [0, %d)", t,
                          j, id, num_experts);
    }
  return VOLT8_OK;
}

volt8_status volt8_capture_allows_load(volt8_ctx *ctx, int capturing, int loaded, const char *variant) {
  if (loaded || !capturing) return VOLT8_OK;
  return volt8_fail(ctx, VOLT8_ERR_CAPTURE,
                    "variant %s is not prepared and the stream is capturing: compiling now would break the capture; "
                    "call volt8_experts_prepare with this token count before capturing", variant);
}
