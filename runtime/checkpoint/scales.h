/* Checkpoint block scales to the resident FP16 form (scale * 2^8), validated block by block, and the
 * weight-code checks the scales depend on. Every rejection names file, tensor, expert and block. */
#ifndef VOLT8_SCALES_H
#define VOLT8_SCALES_H

#include <stdint.h>

#include "checkpoint/safetensors.h"
#include "volt8.h"

/* Largest |E4M3 value| per scale block of staged codes [rows][cols], where staged element (r, c) is
 * element (row_base + r, col_base + c) of `weight` and blocks are block_rows x block_cols of the
 * original grid, numbered from the first block the slice touches. Out: [grid_rows][grid_cols] with
 * grid_rows = ceil((row_base % block_rows + rows) / block_rows), likewise for columns.
 * A NaN code (0x7F, 0xFF) is VOLT8_ERR_FORMAT naming its row and column. */
volt8_status volt8_codes_block_max(volt8_ctx *ctx, const volt8_st_tensor *weight, int32_t expert, const uint8_t *codes,
                                   int64_t rows, int64_t cols, int64_t row_base, int64_t col_base, int32_t block_rows,
                                   int32_t block_cols, float *out_block_max);

/* Converts blocks [row0, row0 + rows) x [col0, col0 + cols) of `scale` (F32, BF16 or F16; 2-D, or
 * 4-D [rows, 1, cols, 1]) to FP16 bits of scale * 2^8 in out[rows][cols]. Rejected with
 * VOLT8_ERR_SCALE_RANGE: non-finite, zero or negative scales, FP16 overflow or underflow (to zero or
 * a subnormal) after the 2^8 factor, and blocks where block_max (same grid as out, may be NULL)
 * times the scale exceeds 65504. *max_relative_error grows to the largest rounding error seen. */
volt8_status volt8_scales_convert(volt8_ctx *ctx, const volt8_st_tensor *scale, int32_t expert, int64_t row0,
                                  int64_t rows, int64_t col0, int64_t cols, const float *block_max, uint16_t *out,
                                  double *max_relative_error);

/* The FP16 rule the native and online routes share: a block's largest |weight| times its scale
 * (the dequantized value the kernels form in FP16) stays within 65504. */
int volt8_block_fits_half(double block_max, double scale);
#define VOLT8_BLOCK_OVER_HALF "times the block's largest weight exceeds 65504"

/* Columns of a scale tensor's block grid (shape[1] of 2-D, shape[2] of 4-D). */
int64_t volt8_scale_grid_cols(const volt8_st_tensor *scale);

#endif
