/* gate_up and down on m8n8k4 tensor cores (templates/moe_gemm_mma.cu): x tiles staged in shared
 * memory, 8 columns a warp per n tile. Native on sm_70; sm_80 and later run m8n8k4 as a software
 * routine, so there the dispatch's fallbacks and the tuner leave it out. */
#include <stdio.h>

#include "moe/kernels/kind.h"

#define X_TILE_LIMIT_BYTES (32 * 1024)

/* Its block_m values and tiles: codegen/variant_space.lua (mma). */

static int values(const volt8_variant *v, const volt8_moe_shape *shape, int32_t arch, volt8_kernel_values *out,
                  char *reason, size_t reason_size) {
  (void)arch;
  volt8_gemm_geometry g = volt8_gemm_geometry_of(v->op, shape);
  volt8_gemm_common_values(v, shape, &g, out);
  if (v->warps % v->split_k != 0) return volt8_refuse(reason, reason_size, "split_k does not divide warps");
  int64_t warps_n = v->warps / v->split_k;
  if (v->block_n % (8 * warps_n) != 0) return volt8_refuse(reason, reason_size, "block_n is not a multiple of 8 columns per warp");
  int64_t n_tiles = v->block_n / (8 * warps_n), m_tiles = v->block_m / 8;
  int64_t accumulators = m_tiles * n_tiles * g.rows * 8;
  if (accumulators > 64) return volt8_refuse(reason, reason_size, "too many accumulators per thread");
  if (v->block_n > volt8_round_up(g.n, 8 * warps_n)) return volt8_refuse(reason, reason_size, "block_n exceeds the output width");
  int64_t scale_bytes = g.rows * g.scale_k_blocks * v->block_n * 4;
  int64_t x_budget = volt8_min64(X_TILE_LIMIT_BYTES, VOLT8_STATIC_SHARED_MEMORY_BYTES - scale_bytes - v->block_m * 4);
  int64_t max_tile_k = volt8_floor_div(volt8_floor_div(x_budget, 2 * v->block_m) - 16, 64) * 64;
  if (max_tile_k < 64) return volt8_refuse(reason, reason_size, "no x tile fits in shared memory");
  int64_t padded_k = volt8_round_up(g.k, 64);
  int64_t num_tiles = volt8_ceil_div(padded_k, max_tile_k);
  int64_t tile_k = volt8_round_up(volt8_ceil_div(padded_k, num_tiles), 64);
  int64_t tile_steps = tile_k / 64;
  if (tile_steps < v->split_k) return volt8_refuse(reason, reason_size, "fewer 64-wide k steps than split_k slices");
  int64_t x_bytes = v->block_m * (2 * tile_k + 32);
  int64_t split_bytes = (v->split_k - 1) * warps_n * 8 * accumulators * 4;
  int64_t buffer_bytes = volt8_max64(x_bytes, split_bytes);
  if (buffer_bytes + scale_bytes + v->block_m * 4 > VOLT8_STATIC_SHARED_MEMORY_BYTES)
    return volt8_refuse(reason, reason_size, "needs more than 48 KiB of shared memory");
  volt8_values_set(out, "TILE_K", tile_k);
  volt8_values_set(out, "SMEM_BYTES", buffer_bytes);
  /* Loads per batch, halved when the accumulators already take a quarter of the registers. */
  int64_t loads_per_batch = accumulators >= 64 ? 4 : 8;
  volt8_values_set(out, "UNROLL",
                   volt8_max64(1, volt8_min64(volt8_ceil_div(tile_steps, v->split_k), loads_per_batch / (n_tiles * g.rows))));
  return 1;
}

const volt8_kind_spec volt8_kind_gemm_mma = {
    .kind = VOLT8_KIND_GEMM_MMA, .family = "mma", .template_path = "templates/moe_gemm_mma.cu",
    .emulated_from_arch = 80, .lists_values = 1, .expert_range = 1, .space = &volt8_space_mma,
    .values = values, .threads = volt8_gemm_threads, .signature = volt8_gemm_signature,
    .launch_size = volt8_gemm_launch_size,
};
