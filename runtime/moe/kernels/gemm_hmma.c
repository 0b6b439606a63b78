/* gate_up and down on m16n8k16 tensor cores (templates/moe_gemm_hmma.cu), sm_80 and later: the weights
 * are the 16-row operand, so one product serves up to 8 pairs. A tile may walk its block_n columns as c
 * groups; an hmma down tile may fuse the weighted top-k reduce (r1: the CTA that stores a token's last
 * z rows for its columns forms that token's sum, so the forward launches no reduce; every r1 tile has
 * its twin without it, which it is checked against bit for bit). */
#include <stdio.h>

#include "moe/kernels/kind.h"

/* Its block_m values and tiles: codegen/variant_space.lua (hmma). */

/* sm_89 and later convert E4M3 with one instruction per two codes. */
#define FP8_CONVERT_MIN_ARCH 89

static int values(const volt8_variant *v, const volt8_moe_shape *shape, int32_t arch, volt8_kernel_values *out,
                  char *reason, size_t reason_size) {
  volt8_gemm_geometry g = volt8_gemm_geometry_of(v->op, shape);
  volt8_gemm_common_values(v, shape, &g, out);
  if (v->warps % v->split_k != 0) return volt8_refuse(reason, reason_size, "split_k does not divide warps");
  int64_t warps_n = v->warps / v->split_k;
  /* c column groups of block_n / c columns are walked one after the other (split_k 1 only). */
  int64_t groups = v->column_groups ? v->column_groups : 1;
  if (v->block_n % groups != 0) return volt8_refuse(reason, reason_size, "column groups do not divide block_n");
  if (groups > 1 && v->split_k != 1) return volt8_refuse(reason, reason_size, "column groups need split_k 1");
  int64_t group_columns = v->block_n / groups;
  /* A 16-row tile is 16 output columns of down, or the gate and up rows of 8 columns of gate_up. */
  int64_t tile_columns = 16 / g.rows;
  if (group_columns % (tile_columns * warps_n) != 0) {
    snprintf(reason, reason_size, "a column group is not a multiple of %lld columns per warp", (long long)tile_columns);
    return 0;
  }
  int64_t n_tiles = group_columns / (tile_columns * warps_n);
  if (v->block_n > volt8_round_up(g.n, tile_columns * warps_n))
    return volt8_refuse(reason, reason_size, "block_n exceeds the output width");
  /* 64-code windows aligned to the scale grid: the first starts pad codes before k = 0. */
  int64_t pad = g.scale_k_offset % 64;
  int64_t windows = volt8_ceil_div(pad + g.k, 64);
  if (windows < v->split_k) return volt8_refuse(reason, reason_size, "fewer 64-wide k windows than split_k slices");
  int64_t accumulators = n_tiles * 4;
  int64_t x_bytes = v->block_m * (windows * 64 + 8) * 2;
  int64_t partial_bytes = (v->split_k - 1) * warps_n * 32 * accumulators * 4;
  int64_t scale_bytes = g.rows * v->block_n * g.scale_k_blocks * 4;
  if (volt8_max64(x_bytes, partial_bytes) + scale_bytes + v->block_m * 4 > VOLT8_STATIC_SHARED_MEMORY_BYTES)
    return volt8_refuse(reason, reason_size, "needs more than 48 KiB of shared memory");
  if (v->fused_reduce) {
    if (v->op != VOLT8_OP_DOWN) return volt8_refuse(reason, reason_size, "only down fuses the reduce");
    if (v->split_k != 1) return volt8_refuse(reason, reason_size, "the fused reduce needs split_k 1");
    if (v->block_n < VOLT8_ARRIVAL_MIN_BLOCK_N) {
      snprintf(reason, reason_size, "the fused reduce needs block_n >= %d", VOLT8_ARRIVAL_MIN_BLOCK_N);
      return 0;
    }
  }
  volt8_values_set(out, "FUSED_REDUCE", v->fused_reduce ? 1 : 0);
  volt8_values_set(out, "FP8_CVT", arch >= FP8_CONVERT_MIN_ARCH);
  volt8_values_set(out, "K_PAD", pad);
  volt8_values_set(out, "WINDOWS", windows);
  volt8_values_set(out, "COLUMN_GROUPS", groups);
  /* Windows in flight: 16 chunk registers of four words each at most, 8 when o caps the registers. */
  int64_t chunks_per_window = n_tiles * 2;
  int64_t chunk_registers = (v->min_blocks ? v->min_blocks : 1) >= 4 ? 8 : 16;
  volt8_values_set(out, "UNROLL", volt8_max64(1, volt8_min64(groups * volt8_ceil_div(windows, v->split_k),
                                                               chunk_registers / chunks_per_window)));
  return 1;
}

const volt8_kind_spec volt8_kind_gemm_hmma = {
    .kind = VOLT8_KIND_GEMM_HMMA, .family = "hmma", .template_path = "templates/moe_gemm_hmma.cu", .min_arch = 80,
    .lists_values = 1, .expert_range = 1, .space = &volt8_space_hmma,
    .values = values, .threads = volt8_gemm_threads, .signature = volt8_gemm_signature,
    .launch_size = volt8_gemm_launch_size,
};
