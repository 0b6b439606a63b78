/* E4M3 quantization of unquantized experts at load time. */
#include "checkpoint/quant.h"

#include "core/ctx_internal.h"
#include "core/numeric.h"
#include "checkpoint/scales.h"

#include <math.h>

#define QUANT_BLOCK_COLS 128
#define HALF_MAX 65504.0
#define SCALE_FOLD 256.0 /* 2^8, folded into the stored scale */
#define SMALLEST_SCALE_BITS 0x0400 /* the smallest FP16 normal */

static volt8_status reject_value(volt8_ctx *ctx, const volt8_st_tensor *source, int32_t expert, int64_t row, int64_t col,
                                 double value) {
  return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s (expert %d): element [%lld, %lld] is %g, not finite",
                    source->file, source->name, expert, (long long)row, (long long)col, value);
}

/* FP16 bits of the block's scale * 2^8: largest |w| / 448, kept an FP16 normal, and lowered one
 * FP16 step at a time while the block's largest code times the scale would exceed 65504 (rounding
 * the scale up can, e.g. 65504 gives 146.25 and code 448: 65520). */
static uint16_t block_scale_bits(double block_max, const float *decoded) {
  uint16_t bits = volt8_half_from_double(block_max / VOLT8_E4M3_MAX * SCALE_FOLD);
  if (bits < SMALLEST_SCALE_BITS) return SMALLEST_SCALE_BITS;
  for (;;) {
    double scale = volt8_half_to_double(bits) / SCALE_FOLD;
    double largest = decoded[volt8_e4m3_from_float((float)(block_max / scale))];
    if (volt8_block_fits_half(largest, scale) || bits == SMALLEST_SCALE_BITS) return bits;
    bits--;
  }
}

volt8_status volt8_quant_matrix(volt8_ctx *ctx, const volt8_st_tensor *source, int32_t expert, const uint8_t *values,
                                int64_t rows, int64_t cols, int64_t row_base, int64_t col_base, int32_t block_rows,
                                uint8_t *codes, uint16_t *scales, volt8_quant_error *error) {
  int64_t grid_cols = (cols + QUANT_BLOCK_COLS - 1) / QUANT_BLOCK_COLS;
  float decoded[256];
  for (int code = 0; code < 256; code++) decoded[code] = volt8_e4m3_to_float((uint8_t)code);
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    int64_t r1 = r0 + block_rows < rows ? r0 + block_rows : rows;
    for (int64_t c0 = 0; c0 < cols; c0 += QUANT_BLOCK_COLS) {
      int64_t c1 = c0 + QUANT_BLOCK_COLS < cols ? c0 + QUANT_BLOCK_COLS : cols;
      double block_max = 0.0;
      for (int64_t r = r0; r < r1; r++) {
        for (int64_t c = c0; c < c1; c++) {
          double value = volt8_st_float_at(source->dtype, values, (size_t)(r * cols + c));
          if (!isfinite(value)) return reject_value(ctx, source, expert, row_base + r, col_base + c, value);
          block_max = fmax(block_max, fabs(value));
        }
      }
      if (block_max > HALF_MAX)
        return volt8_fail(ctx, VOLT8_ERR_SCALE_RANGE,
                          "%s: tensor %s (expert %d): block of rows %lld..%lld, columns %lld..%lld holds |w| = %g, "
                          "beyond FP16's 65504",
                          source->file, source->name, expert, (long long)(row_base + r0), (long long)(row_base + r1 - 1),
                          (long long)(col_base + c0), (long long)(col_base + c1 - 1), block_max);
      uint16_t scale_bits = block_scale_bits(block_max, decoded);
      scales[r0 / block_rows * grid_cols + c0 / QUANT_BLOCK_COLS] = scale_bits;
      double scale = volt8_half_to_double(scale_bits) / SCALE_FOLD;
      for (int64_t r = r0; r < r1; r++) {
        for (int64_t c = c0; c < c1; c++) {
          double value = volt8_st_float_at(source->dtype, values, (size_t)(r * cols + c));
          uint8_t code = volt8_e4m3_from_float((float)(value / scale));
          double difference = value - (double)decoded[code] * scale;
          codes[r * cols + c] = code;
          error->error_squares += difference * difference;
          error->reference_squares += value * value;
          error->max_abs_error = fmax(error->max_abs_error, fabs(difference));
        }
      }
    }
  }
  return VOLT8_OK;
}

volt8_status volt8_quant_check_values(volt8_ctx *ctx, const volt8_st_tensor *source, int32_t expert,
                                      const uint8_t *values, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < cols; c++) {
      double value = volt8_st_float_at(source->dtype, values, (size_t)(r * cols + c));
      if (!isfinite(value)) return reject_value(ctx, source, expert, r, c, value);
      if (fabs(value) > HALF_MAX)
        return volt8_fail(ctx, VOLT8_ERR_SCALE_RANGE,
                          "%s: tensor %s (expert %d): element [%lld, %lld] = %g is beyond FP16's 65504", source->file,
                          source->name, expert, (long long)r, (long long)c, value);
    }
  }
  return VOLT8_OK;
}
