/* Sizes of one rank's expert tensors and scale grids, from the shape (moe_layout.h). */
#include "moe/kernels/moe_layout.h"

#include "core/ctx_internal.h"
#include "jit/codegen.h"

/* value >= 0, divisor > 0; no intermediate sum, so values up to INT32_MAX cannot overflow. */
static int32_t ceil_div(int32_t value, int32_t divisor) { return value / divisor + (value % divisor != 0); }

static volt8_status check_shape(volt8_ctx *ctx, const volt8_moe_shape *shape) {
  if (shape->size != sizeof(volt8_moe_shape))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "moe shape: size is %zu, expected %zu (use VOLT8_MOE_SHAPE_INIT)", shape->size,
                      sizeof(volt8_moe_shape));
  if (shape->hidden <= 0 || shape->hidden % 16 != 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "moe shape: hidden = %d, must be a positive multiple of 16",
                      shape->hidden);
  if (shape->intermediate <= 0 || shape->intermediate % 16 != 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "moe shape: intermediate = %d, must be a positive multiple of 16", shape->intermediate);
  if (shape->num_experts <= 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "moe shape: num_experts = %d, must be positive",
                      shape->num_experts);
  if (shape->block_k != 128)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "moe shape: block_k = %d, must be 128", shape->block_k);
  if (shape->block_n != 1 && shape->block_n != 128)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "moe shape: block_n = %d, must be 1 or 128", shape->block_n);
  int32_t offset = shape->intermediate_offset;
  if (offset < 0 || offset % 16 != 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "moe shape: intermediate_offset = %d, must be a non-negative multiple of 16", offset);
  if (shape->block_n == 1 && offset != 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "moe shape: intermediate_offset = %d, must be 0 when block_n = 1", offset);
  if (offset >= shape->block_n)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "moe shape: intermediate_offset = %d, must be below block_n = %d", offset, shape->block_n);
  if (shape->expert_start < 0 || (shape->global_experts == 0 && shape->expert_start != 0))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "moe shape: expert_start = %d, must be 0 without global_experts, else non-negative",
                      shape->expert_start);
  if (shape->global_experts != 0 &&
      (shape->global_experts < 0 || shape->expert_start > shape->global_experts - shape->num_experts))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "moe shape: global_experts = %d, must hold experts [expert_start = %d, +num_experts = %d)",
                      shape->global_experts, shape->expert_start, shape->num_experts);
  if (shape->intermediate > INT32_MAX - offset)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "moe shape: intermediate_offset + intermediate overflows");
  return VOLT8_OK;
}

int32_t volt8_moe_global_experts(const volt8_moe_shape *shape) {
  return shape->global_experts > 0 ? shape->global_experts : shape->num_experts;
}

volt8_status volt8_moe_dims_compute(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_moe_dims *out) {
  if (!shape || !out)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_moe_dims_compute: %s is NULL", shape ? "out" : "shape");
  volt8_status status = check_shape(ctx, shape);
  if (status != VOLT8_OK) return status;

  int64_t hidden = shape->hidden, intermediate = shape->intermediate, experts = shape->num_experts;
  int32_t offset = shape->intermediate_offset;
  volt8_moe_dims dims;
  dims.g13 = ceil_div(offset + shape->intermediate, shape->block_n);
  dims.k13_blocks = ceil_div(shape->hidden, shape->block_k);
  dims.n2_blocks = ceil_div(shape->hidden, shape->block_n);
  dims.g2 = ceil_div(offset + shape->intermediate, shape->block_k);
  /* Each factor is below 2^31, so every per-expert product fits in int64; the totals may not. */
  dims.w13_bytes_per_expert = 2 * intermediate * hidden;
  dims.w2_bytes_per_expert = hidden * intermediate;
  dims.s13_elems_per_expert = 2 * (int64_t)dims.g13 * dims.k13_blocks;
  dims.s2_elems_per_expert = (int64_t)dims.n2_blocks * dims.g2;
  int64_t total_w13_bytes = 0, total_s13_bytes = 0;
  if (__builtin_mul_overflow(dims.w13_bytes_per_expert, experts, &total_w13_bytes) ||
      __builtin_mul_overflow(dims.s13_elems_per_expert * 2, experts, &total_s13_bytes) ||
      (uint64_t)total_w13_bytes > SIZE_MAX || (uint64_t)total_s13_bytes > SIZE_MAX)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "moe shape: %lld experts of hidden %lld x intermediate %lld do not fit in memory",
                      (long long)experts, (long long)hidden, (long long)intermediate);
  *out = dims;
  return VOLT8_OK;
}

volt8_status volt8_moe_workspace_plan(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t max_tokens,
                                      int32_t max_top_k, volt8_moe_workspace *out) {
  if (max_tokens <= 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "max_tokens %d: must be positive", max_tokens);
  if (max_top_k <= 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "max_top_k %d: must be positive", max_top_k);
  /* A token routes to distinct experts, so the workspace never needs more than E pairs a token (E of
   * the model: with expert parallelism every pair has its place, also those of other ranks). */
  int32_t global_experts = volt8_moe_global_experts(shape);
  int32_t top_k = global_experts > 0 && max_top_k > global_experts ? global_experts : max_top_k;
  if (top_k > VOLT8_LAUNCH_ROWS)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "max_top_k %d: more than %d, the most a launch holds of one token's pairs", top_k,
                      VOLT8_LAUNCH_ROWS);
  int64_t pairs = (int64_t)max_tokens * top_k;
  if (pairs > VOLT8_MAX_ROUTED_PAIRS)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "max_tokens %d x max_top_k %d = %lld routed pairs, more than the limit of %d (the kernels "
                      "index pairs in 32 bits)",
                      max_tokens, top_k, (long long)pairs, VOLT8_MAX_ROUTED_PAIRS);
  volt8_moe_workspace plan = {.max_tokens = max_tokens, .max_top_k = top_k, .pairs = pairs};
  plan.routed_launches = (pairs + VOLT8_LAUNCH_ROWS - 1) / VOLT8_LAUNCH_ROWS;
  /* In 64 bits with room to spare: pairs <= 2^30 and hidden, intermediate < 2^31 keep z below 2^63,
   * h below 2^62 and their sum with the rest below 2^64. */
  uint64_t p = (uint64_t)pairs, *bytes = plan.region_bytes;
  /* A fused-reduce down has block_n >= VOLT8_ARRIVAL_MIN_BLOCK_N (codegen/variants.lua). */
  uint64_t tiles = ((uint64_t)shape->hidden + VOLT8_ARRIVAL_MIN_BLOCK_N - 1) / VOLT8_ARRIVAL_MIN_BLOCK_N;
  bytes[VOLT8_WORKSPACE_SORTED_PAIRS] = p * 4;
  bytes[VOLT8_WORKSPACE_ITEMS_GATE_UP] = p * 16;
  bytes[VOLT8_WORKSPACE_ITEMS_DOWN] = p * 16;
  bytes[VOLT8_WORKSPACE_COUNTERS] = ((uint64_t)plan.routed_launches + 1) * 16;
  bytes[VOLT8_WORKSPACE_H] = p * (uint64_t)shape->intermediate * 2;
  bytes[VOLT8_WORKSPACE_Z] = p * (uint64_t)shape->hidden * 4;
  bytes[VOLT8_WORKSPACE_ARRIVALS] = (uint64_t)max_tokens * tiles * 4;
  bytes[VOLT8_WORKSPACE_FLAGS] = (1 + p) * 4;
  for (int i = 0; i < VOLT8_WORKSPACE_REGIONS; i++) plan.total_bytes += volt8_device_align(bytes[i]);
  *out = plan;
  return VOLT8_OK;
}

volt8_status volt8_shape_layout(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_moe_layout *out_layout) {
  if (!shape || !out_layout || out_layout->size < sizeof(size_t))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_shape_layout: shape or out_layout is NULL, or out_layout->size unset (VOLT8_MOE_LAYOUT_INIT)");
  volt8_moe_dims dims;
  volt8_status status = volt8_moe_dims_compute(ctx, shape, &dims);
  if (status != VOLT8_OK) return status;
  volt8_moe_layout layout = {sizeof layout, volt8_moe_global_experts(shape), dims.g13, dims.k13_blocks, dims.n2_blocks,
                             dims.g2};
  volt8_copy_sized_output(out_layout, &layout, sizeof layout);
  return VOLT8_OK;
}
