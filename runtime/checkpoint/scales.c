/* Scale validation and conversion to FP16 with the 2^8 of the E4M3 bit trick folded in. */
#include "checkpoint/scales.h"

#include "core/ctx_internal.h"
#include "core/numeric.h"

#include <math.h>

#define HALF_MAX 65504.0
#define HALF_SMALLEST_NORMAL_BITS 0x0400
#define SCALE_FOLD 256.0 /* 2^8 */

static int64_t ceil_div64(int64_t value, int64_t divisor) { return (value + divisor - 1) / divisor; }

int64_t volt8_scale_grid_cols(const volt8_st_tensor *scale) { return scale->rank == 4 ? scale->shape[2] : scale->shape[1]; }

volt8_status volt8_codes_block_max(volt8_ctx *ctx, const volt8_st_tensor *weight, int32_t expert, const uint8_t *codes,
                                   int64_t rows, int64_t cols, int64_t row_base, int64_t col_base, int32_t block_rows,
                                   int32_t block_cols, float *out_block_max) {
  int64_t row_skew = row_base % block_rows, col_skew = col_base % block_cols;
  int64_t grid_rows = ceil_div64(row_skew + rows, block_rows), grid_cols = ceil_div64(col_skew + cols, block_cols);
  /* E4M3 magnitudes grow with (code & 0x7F): track the largest low 7 bits, decode at the end */
  for (int64_t i = 0; i < grid_rows * grid_cols; i++) out_block_max[i] = 0.0f;
  for (int64_t r = 0; r < rows; r++) {
    const uint8_t *row = codes + r * cols;
    float *block_row = out_block_max + (row_skew + r) / block_rows * grid_cols;
    for (int64_t block = 0; block < grid_cols; block++) {
      int64_t first = block == 0 ? 0 : block * block_cols - col_skew;
      int64_t last = (block + 1) * block_cols - col_skew;
      if (last > cols) last = cols;
      uint8_t top = 0;
      for (int64_t c = first; c < last; c++) {
        uint8_t magnitude = row[c] & 0x7F;
        top = magnitude > top ? magnitude : top;
      }
      if (top == 0x7F) {
        for (int64_t c = first; c < last; c++)
          if ((row[c] & 0x7F) == 0x7F)
            return volt8_fail(ctx, VOLT8_ERR_FORMAT,
                              "%s: tensor %s (expert %d): weight [%lld, %lld] holds the E4M3 NaN code 0x%02X (scale "
                              "block [%lld, %lld])",
                              weight->file, weight->name, expert, (long long)(row_base + r), (long long)(col_base + c),
                              row[c], (long long)((row_base + r) / block_rows), (long long)((col_base + c) / block_cols));
      }
      if ((float)top > block_row[block]) block_row[block] = (float)top;
    }
  }
  for (int64_t i = 0; i < grid_rows * grid_cols; i++) out_block_max[i] = volt8_e4m3_to_float((uint8_t)out_block_max[i]);
  return VOLT8_OK;
}

int volt8_block_fits_half(double block_max, double scale) { return block_max * scale <= HALF_MAX; }

/* NULL when `value` makes a valid resident scale (written to *out), else what is wrong with it. */
static const char *convert_scale(double value, float block_max, uint16_t *out, double *relative_error) {
  if (isnan(value)) return "is NaN";
  if (isinf(value)) return "is infinite";
  if (value == 0.0) return "is zero";
  if (value < 0.0) return "is negative";
  uint16_t bits = volt8_half_from_double(value * SCALE_FOLD);
  if ((bits & 0x7FFF) >= 0x7C00) return "overflows FP16 once multiplied by 2^8";
  if ((bits & 0x7FFF) < HALF_SMALLEST_NORMAL_BITS) return "underflows to an FP16 subnormal or zero once multiplied by 2^8";
  double stored = volt8_half_to_double(bits) / SCALE_FOLD;
  if (!volt8_block_fits_half((double)block_max, stored)) return VOLT8_BLOCK_OVER_HALF;
  *out = bits;
  *relative_error = fabs(stored - value) / value;
  return NULL;
}

volt8_status volt8_scales_convert(volt8_ctx *ctx, const volt8_st_tensor *scale, int32_t expert, int64_t row0,
                                  int64_t rows, int64_t col0, int64_t cols, const float *block_max, uint16_t *out,
                                  double *max_relative_error) {
  int64_t grid_cols = volt8_scale_grid_cols(scale);
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < cols; c++) {
      double value = volt8_st_float_at(scale->dtype, scale->data, (size_t)((row0 + r) * grid_cols + col0 + c));
      float largest = block_max ? block_max[r * cols + c] : 0.0f;
      double relative_error = 0.0;
      const char *problem = convert_scale(value, largest, &out[r * cols + c], &relative_error);
      if (problem)
        return volt8_fail(ctx, VOLT8_ERR_SCALE_RANGE,
                          "%s: tensor %s (expert %d): scale block [%lld, %lld] = %g %s (largest |weight| in the block %g)",
                          scale->file, scale->name, expert, (long long)(row0 + r), (long long)(col0 + c), value, problem,
                          (double)largest);
      if (relative_error > *max_relative_error) *max_relative_error = relative_error;
    }
  }
  return VOLT8_OK;
}
