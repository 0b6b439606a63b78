/* Tensor-parallel slicing of one expert's gate, up and down matrices. */
#include "checkpoint/shard.h"

#include "core/ctx_internal.h"

#include <string.h>

volt8_status volt8_shard_plan(volt8_ctx *ctx, int32_t full_intermediate, int32_t tp_size, int32_t tp_rank, int32_t route,
                              int32_t block_n, volt8_shard *out) {
  if (tp_size <= 0 || tp_rank < 0 || tp_rank >= tp_size)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "tp_rank %d is outside [0, tp_size = %d)", tp_rank, tp_size);
  if (full_intermediate <= 0 || full_intermediate % tp_size != 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "expert intermediate size %d does not divide into %d tensor-parallel ranks", full_intermediate,
                      tp_size);
  int32_t intermediate = full_intermediate / tp_size;
  if (intermediate % 16 != 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "expert intermediate size %d over %d ranks gives %d per rank, not a multiple of 16",
                      full_intermediate, tp_size, intermediate);
  int native = route == VOLT8_ROUTE_NATIVE;
  if (native ? block_n != VOLT8_CHECKPOINT_BLOCK : (block_n != 1 && block_n != VOLT8_CHECKPOINT_BLOCK))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "scale block rows %d: %s", block_n,
                      native ? "checkpoint scales come in 128-row blocks" : "online scale blocks have 1 or 128 rows");
  memset(out, 0, sizeof *out);
  out->tp_size = tp_size;
  out->tp_rank = tp_rank;
  out->full_intermediate = full_intermediate;
  out->intermediate = intermediate;
  out->start = tp_rank * intermediate;
  out->route = route;
  out->block_n = block_n;
  out->offset = native ? out->start % VOLT8_CHECKPOINT_BLOCK : 0;
  out->first_block = native ? out->start / VOLT8_CHECKPOINT_BLOCK : 0;
  return VOLT8_OK;
}

void volt8_shard_experts(int32_t num_experts, int32_t ep_size, int32_t ep_rank, int32_t *out_start,
                         int32_t *out_count) {
  int32_t base = num_experts / ep_size, extra = num_experts % ep_size;
  *out_count = base + (ep_rank < extra);
  *out_start = ep_rank * base + (ep_rank < extra ? ep_rank : extra);
}

volt8_status volt8_expert_split(int32_t num_experts, int32_t ep_size, int32_t ep_rank, int32_t *out_start,
                                int32_t *out_count) {
  if (!out_start || !out_count)
    return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_expert_split: out_start or out_count is NULL");
  if (num_experts < 1 || ep_size < 1 || ep_size > num_experts || ep_rank < 0 || ep_rank >= ep_size)
    return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_expert_split: ep_rank %d of ep_size %d over %d experts: needs 0 <= ep_rank < ep_size <= "
                      "num_experts", ep_rank, ep_size, num_experts);
  volt8_shard_experts(num_experts, ep_size, ep_rank, out_start, out_count);
  return VOLT8_OK;
}

void volt8_shard_shape(const volt8_shard *shard, int32_t hidden, int32_t num_experts, volt8_moe_shape *out) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.hidden = hidden;
  shape.intermediate = shard->intermediate;
  shape.num_experts = num_experts;
  shape.block_n = shard->block_n;
  shape.block_k = VOLT8_CHECKPOINT_BLOCK;
  shape.intermediate_offset = shard->offset;
  *out = shape;
}

void volt8_shard_copy_rows(const uint8_t *matrix, int64_t cols, size_t element_bytes, const volt8_shard *shard,
                           uint8_t *out) {
  size_t row_bytes = (size_t)cols * element_bytes;
  memcpy(out, matrix + (size_t)shard->start * row_bytes, (size_t)shard->intermediate * row_bytes);
}

void volt8_shard_copy_columns(const uint8_t *matrix, int64_t rows, size_t element_bytes, const volt8_shard *shard,
                              uint8_t *out) {
  size_t source_row_bytes = (size_t)shard->full_intermediate * element_bytes;
  size_t slice_bytes = (size_t)shard->intermediate * element_bytes;
  const uint8_t *source = matrix + (size_t)shard->start * element_bytes;
  for (int64_t row = 0; row < rows; row++) memcpy(out + (size_t)row * slice_bytes, source + (size_t)row * source_row_bytes, slice_bytes);
}
