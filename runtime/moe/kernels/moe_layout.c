/* Sizes of one rank's expert tensors and scale grids, from the shape (moe_layout.h). */
#include "moe/kernels/moe_layout.h"

#include "core/ctx_internal.h"
#include "moe/kernels/catalogue.h"

#include <stdio.h>

/* value >= 0, divisor > 0; no intermediate sum, so values up to INT32_MAX cannot overflow. */
static int32_t ceil_div(int32_t value, int32_t divisor) { return value / divisor + (value % divisor != 0); }

static volt8_status invalid(volt8_ctx *ctx, const char *field, int64_t value, const char *requirement) {
  return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "invalid shape: %s=%lld %s", field, (long long)value, requirement);
}

static volt8_status shape_size(volt8_ctx *ctx, const char *function, const char *name, const volt8_moe_shape *shape) {
  if (!shape) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "%s: %s is NULL", function, name);
  if (shape->size != sizeof(volt8_moe_shape))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "%s: %s->size is %zu, expected %zu: initialise it with VOLT8_MOE_SHAPE_INIT (%s)", function, name,
                      shape->size, sizeof(volt8_moe_shape),
                      shape->size == offsetof(volt8_moe_shape, expert_start)
                          ? "the 0.2 header's shape of 32 bytes lacks expert_start and global_experts: rebuild against this header"
                          : "the size of this header's shape");
  return VOLT8_OK;
}

volt8_status volt8_moe_shape_in(volt8_ctx *ctx, const char *function, const volt8_moe_shape *shape,
                                volt8_moe_shape *out) {
  volt8_status status = shape_size(ctx, function, "shape", shape);
  if (status == VOLT8_OK) *out = *shape;
  return status;
}

volt8_status volt8_moe_shape_out_check(volt8_ctx *ctx, const char *function, const volt8_moe_shape *out_shape) {
  return shape_size(ctx, function, "out_shape", out_shape);
}

volt8_status volt8_moe_shape_check(volt8_ctx *ctx, const volt8_moe_shape *shape) {
  if (shape->size != sizeof(volt8_moe_shape))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "invalid shape: size=%zu, expected %zu (use VOLT8_MOE_SHAPE_INIT)",
                      shape->size, sizeof(volt8_moe_shape));
  const char *dimension = "must be a positive multiple of 16, at most 65536";
  if (shape->hidden <= 0 || shape->hidden % 16 != 0 || shape->hidden > VOLT8_SHAPE_MAX_DIMENSION)
    return invalid(ctx, "hidden", shape->hidden, dimension);
  if (shape->intermediate <= 0 || shape->intermediate % 16 != 0 || shape->intermediate > VOLT8_SHAPE_MAX_DIMENSION)
    return invalid(ctx, "intermediate", shape->intermediate, dimension);
  if (shape->num_experts <= 0 || shape->num_experts > VOLT8_SHAPE_MAX_EXPERTS)
    return invalid(ctx, "num_experts", shape->num_experts, "must be in [1, 2048]");
  if (shape->block_k != 128) return invalid(ctx, "block_k", shape->block_k, "must be 128");
  if (shape->block_n != 1 && shape->block_n != 128) return invalid(ctx, "block_n", shape->block_n, "must be 1 or 128");
  int32_t offset = shape->intermediate_offset;
  if (offset < 0 || offset % 16 != 0)
    return invalid(ctx, "intermediate_offset", offset, "must be a non-negative multiple of 16");
  if (shape->block_n == 128 && offset >= 128) return invalid(ctx, "intermediate_offset", offset, "must be below block_n=128");
  if (shape->block_n == 1 && offset != 0) return invalid(ctx, "intermediate_offset", offset, "must be 0 when block_n=1");
  if (shape->global_experts == 0) {
    if (shape->expert_start != 0) return invalid(ctx, "expert_start", shape->expert_start, "must be 0 when global_experts=0");
  } else if (shape->expert_start < 0) {
    return invalid(ctx, "expert_start", shape->expert_start, "must be non-negative");
  } else if (shape->global_experts < 0 || shape->expert_start > shape->global_experts - shape->num_experts) {
    char requirement[96];
    snprintf(requirement, sizeof requirement, "must hold experts [%d, %lld)", shape->expert_start,
             (long long)shape->expert_start + shape->num_experts);
    return invalid(ctx, "global_experts", shape->global_experts, requirement);
  }
  return VOLT8_OK;
}

volt8_moe_shape volt8_moe_shape_normalized(const volt8_moe_shape *shape) {
  volt8_moe_shape normalized = *shape;
  if (normalized.expert_start == 0 && normalized.global_experts == normalized.num_experts) normalized.global_experts = 0;
  return normalized;
}

volt8_moe_dims volt8_moe_dims_of(const volt8_moe_shape *shape) {
  int64_t hidden = shape->hidden, intermediate = shape->intermediate;
  int32_t offset = shape->intermediate_offset;
  volt8_moe_dims dims;
  dims.g13 = ceil_div(offset + shape->intermediate, shape->block_n);
  dims.k13_blocks = ceil_div(shape->hidden, shape->block_k);
  dims.n2_blocks = ceil_div(shape->hidden, shape->block_n);
  dims.g2 = ceil_div(offset + shape->intermediate, shape->block_k);
  dims.w13_bytes_per_expert = 2 * intermediate * hidden;
  dims.w2_bytes_per_expert = hidden * intermediate;
  dims.s13_elems_per_expert = 2 * (int64_t)dims.g13 * dims.k13_blocks;
  dims.s2_elems_per_expert = (int64_t)dims.n2_blocks * dims.g2;
  return dims;
}

int32_t volt8_moe_global_experts(const volt8_moe_shape *shape) {
  return shape->global_experts > 0 ? shape->global_experts : shape->num_experts;
}

volt8_status volt8_moe_dims_compute(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_moe_dims *out) {
  if (!shape || !out)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_moe_dims_compute: %s is NULL", shape ? "out" : "shape");
  volt8_status status = volt8_moe_shape_check(ctx, shape);
  if (status != VOLT8_OK) return status;
  /* Each dimension is at most 65536 and the experts 2048: every total fits in int64 and in memory sizes. */
  *out = volt8_moe_dims_of(shape);
  return VOLT8_OK;
}

int32_t volt8_route_part_count(int64_t num_pairs) {
  if (num_pairs <= VOLT8_ROUTE_PARTS_MIN_PAIRS) return 0;
  int64_t parts = (num_pairs + VOLT8_ROUTE_PART_PAIRS - 1) / VOLT8_ROUTE_PART_PAIRS;
  return (int32_t)(parts < VOLT8_ROUTE_MAX_PARTS ? parts : VOLT8_ROUTE_MAX_PARTS);
}

int64_t volt8_route_part_bytes(int32_t parts, int32_t num_experts) {
  return ((int64_t)parts * (num_experts + 1) + 1) * 4;
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
  /* A fused-reduce down has block_n >= VOLT8_ARRIVAL_MIN_BLOCK_N (moe/kernels/gemm_hmma.c). */
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
  volt8_moe_shape read;
  volt8_moe_dims dims;
  volt8_status status = volt8_moe_shape_in(ctx, "volt8_shape_layout", shape, &read);
  if (status == VOLT8_OK) status = volt8_moe_dims_compute(ctx, &read, &dims);
  if (status != VOLT8_OK) return status;
  volt8_moe_layout layout = {sizeof layout, volt8_moe_global_experts(&read), dims.g13, dims.k13_blocks, dims.n2_blocks,
                             dims.g2};
  volt8_copy_sized_output(out_layout, &layout, sizeof layout);
  return VOLT8_OK;
}
