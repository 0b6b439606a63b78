/* Tensor-parallel slicing of one expert without padding: rank r keeps rows [start, start + I) of
 * gate and up and the same columns of down, byte for byte, where I = full / tp_size and
 * start = r * I. Native scale blocks stay in the checkpoint's 128-grid: the rank keeps every block
 * its slice touches and records offset = start % 128, its position inside the first one. */
#ifndef VOLT8_SHARD_H
#define VOLT8_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "volt8.h"

#define VOLT8_CHECKPOINT_BLOCK 128

typedef struct volt8_shard {
  int32_t tp_size, tp_rank;
  int32_t full_intermediate; /* the checkpoint's I */
  int32_t intermediate;      /* this rank's I */
  int32_t start;             /* first gate/up row and first down column of the rank */
  int32_t route;             /* volt8_route */
  int32_t block_n;           /* scale block rows of the resident experts */
  int32_t offset;            /* native: start % 128; online: 0 (the slice is quantized on its own grid) */
  int32_t first_block;       /* native: start / 128, the first checkpoint scale block row (gate/up) or column (down) */
} volt8_shard;

/* VOLT8_ERR_INVALID_ARGUMENT unless tp_size divides full_intermediate into a multiple of 16 and
 * tp_rank is in [0, tp_size); block_n is 128 for native, 1 or 128 online. */
volt8_status volt8_shard_plan(volt8_ctx *ctx, int32_t full_intermediate, int32_t tp_size, int32_t tp_rank, int32_t route,
                              int32_t block_n, volt8_shard *out);
/* Expert-parallel rank ep_rank of ep_size over num_experts: a contiguous range, the first
 * num_experts % ep_size ranks one expert more (volt8 plan --ep). ep_size in [1, num_experts]. */
void volt8_shard_experts(int32_t num_experts, int32_t ep_size, int32_t ep_rank, int32_t *out_start,
                         int32_t *out_count);
/* The resident shape of the rank's experts. */
void volt8_shard_shape(const volt8_shard *shard, int32_t hidden, int32_t num_experts, volt8_moe_shape *out);
/* Rows [start, start + I) of a row-major matrix with `cols` columns of element_bytes each. */
void volt8_shard_copy_rows(const uint8_t *matrix, int64_t cols, size_t element_bytes, const volt8_shard *shard,
                           uint8_t *out);
/* Columns [start, start + I) of a row-major [rows][full_intermediate] matrix, into [rows][I]. */
void volt8_shard_copy_columns(const uint8_t *matrix, int64_t rows, size_t element_bytes, const volt8_shard *shard,
                              uint8_t *out);

#endif
