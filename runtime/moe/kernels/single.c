/* kernels/single.h: the one-launch forward's fit. */
#include "moe/kernels/single.h"

#define STATIC_SHARED_MEMORY_BYTES (48 * 1024)

int volt8_single_fits(const volt8_moe_shape *shape) {
  int64_t widest = shape->hidden > shape->intermediate ? shape->hidden : shape->intermediate;
  int64_t gate_scales = 2LL * VOLT8_SINGLE_GATE_COLUMNS * ((shape->hidden + shape->block_k - 1) / shape->block_k);
  int64_t down_scales = (int64_t)VOLT8_SINGLE_DOWN_COLUMNS *
                        ((shape->intermediate_offset + shape->intermediate - 1) / shape->block_k + 1);
  int64_t scales = gate_scales > down_scales ? gate_scales : down_scales;
  return 4 * (widest + scales) + 8 <= STATIC_SHARED_MEMORY_BYTES;
}
