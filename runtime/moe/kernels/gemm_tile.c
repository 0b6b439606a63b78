/* gate_up and down for many pairs an expert (templates/moe_gemm_tile.cu): work items of 32, 64 or 128
 * routed pairs, each CTA turning its weight tile into FP16 in shared memory once and multiplying it by every
 * pair of the item on tensor cores (m8n8k4 on sm_70, m16n8k16 with cp.async on sm_80 and later). A warp
 * takes 32 weight rows: gate_up's block_n is 16 output columns a warp (their gate and up rows), down's
 * 32. o2: the compiler fits two CTAs on an SM; o3 (64-pair items of 8 warps) three, for more loads in
 * flight, at a few bytes of spill a thread. 32-pair items take 4 warps. */
#include <stdio.h>

#include "moe/kernels/kind.h"

/* Its block_m values and tiles: codegen/variant_space.lua (tile). */

/* The tile's shared memory: buffers of x rows (two on sm_70; on sm_80 and later one more than the steps
 * its loads run ahead, three for 64-pair items and two for 128) and two of weight rows, 32 FP16 values of
 * K a row, and the item's pairs and weights. */
static int64_t shared_bytes(const volt8_variant *v, int64_t rows, int32_t arch) {
  int64_t x_buffers = arch < 80 ? 2 : v->block_m == 64 ? 4 : 3;
  return (x_buffers * v->block_m + 2 * rows * v->block_n) * 64 + v->block_m * 8;
}

static int values(const volt8_variant *v, const volt8_moe_shape *shape, int32_t arch, volt8_kernel_values *out,
                  char *reason, size_t reason_size) {
  volt8_gemm_geometry g = volt8_gemm_geometry_of(v->op, shape);
  volt8_gemm_common_values(v, shape, &g, out);
  if (v->split_k != 1) return volt8_refuse(reason, reason_size, "the tile does not split K");
  if (v->warps % 2 != 0 || g.rows * v->block_n != 16 * v->warps)
    return volt8_refuse(reason, reason_size, "a warp takes 32 weight rows of the tile, two warps along the pairs");
  if (v->block_m * 4 % (32 * v->warps) != 0 || v->block_m % 32 != 0)
    return volt8_refuse(reason, reason_size, "block_m does not spread over the warps");
  if (v->min_blocks > 2 && v->block_m > 64)
    return volt8_refuse(reason, reason_size, "a 128-pair tile at three CTAs an SM spills hundreds of bytes a thread");
  if (v->block_n > volt8_round_up(g.n, 16)) return volt8_refuse(reason, reason_size, "block_n exceeds the output width");
  if (shared_bytes(v, g.rows, arch) > VOLT8_STATIC_SHARED_MEMORY_BYTES)
    return volt8_refuse(reason, reason_size, "needs more than 48 KiB of shared memory");
  volt8_values_set(out, "SCALE_BK", shape->block_k);
  return 1;
}

const volt8_kind_spec volt8_kind_gemm_tile = {
    .kind = VOLT8_KIND_GEMM_TILE, .family = "tile", .template_path = "templates/moe_gemm_tile.cu", .min_arch = 0,
    .lists_values = 1, .expert_range = 1, .large_items = 1, .space = &volt8_space_tile,
    .values = values, .threads = volt8_gemm_threads, .signature = volt8_gemm_signature,
    .launch_size = volt8_gemm_launch_size,
};
