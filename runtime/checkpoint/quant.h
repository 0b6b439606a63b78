/* Online conversion of unquantized experts (F16, BF16, F32) to E4M3 with one FP16 scale per
 * (block_rows x 128) block, block_rows 1 or 128, one matrix of one expert at a time. */
#ifndef VOLT8_QUANT_H
#define VOLT8_QUANT_H

#include <stdint.h>

#include "checkpoint/safetensors.h"
#include "volt8.h"

typedef struct volt8_quant_error {
  double error_squares;     /* sum of (w - dequantized)^2 */
  double reference_squares; /* sum of w^2 */
  double max_abs_error;
} volt8_quant_error;

/* Quantizes values[rows][cols] (dtype F16, BF16 or F32; staged element (r, c) is element
 * (row_base + r, col_base + c) of `source`, for messages) into codes[rows][cols] and FP16 bits of
 * scale * 2^8 in scales[ceil(rows / block_rows)][ceil(cols / 128)]. The scale is the block's
 * largest |w| / 448, raised to the smallest that stays an FP16 normal once multiplied by 2^8
 * (an all-zero block gets that one too), and lowered where needed so that every code times the
 * scale stays within FP16 (volt8_block_fits_half, the native route's rule). A non-finite value is VOLT8_ERR_FORMAT; a block whose
 * largest |w| exceeds 65504 (FP16) is VOLT8_ERR_SCALE_RANGE. */
volt8_status volt8_quant_matrix(volt8_ctx *ctx, const volt8_st_tensor *source, int32_t expert, const uint8_t *values,
                                int64_t rows, int64_t cols, int64_t row_base, int64_t col_base, int32_t block_rows,
                                uint8_t *codes, uint16_t *scales, volt8_quant_error *error);

/* What volt8_quant_matrix would reject, checked on count values in place (planning without staging). */
volt8_status volt8_quant_check_values(volt8_ctx *ctx, const volt8_st_tensor *source, int32_t expert,
                                      const uint8_t *values, int64_t rows, int64_t cols);

#endif
