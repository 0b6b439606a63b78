/* gate_up and down for many pairs an expert on sm_80 and later (templates/moe_gemm_raw.cu): the tile
 * family's work items of 32, 64 or 128 routed pairs, with the weight tile kept as E4M3 codes in shared
 * memory and turned into FP16 fragments in registers by the warp that multiplies them (m16n8k16), so
 * that each weight code crosses shared memory once a warp instead of as FP16 three times. A warp takes
 * 32 weight rows (gate_up's block_n is 16 output columns a warp, their gate and up rows; down's 32) and
 * the item's pairs, or half of them where the tile has twice the warps its rows need (w8, each such
 * pair of warps converting the same codes). Steps of 32 codes of K run through as many cp.async stages
 * as fit 48 KiB, at most six; the weights' copies bring the 256-byte block around them into L2
 * (.f256). o4 (64-pair items) caps the registers at 128 for four CTAs an SM (no spill since the
 * products take the weight rows as their A operand). */
#include <stdio.h>

#include "moe/kernels/kind.h"

/* Its block_m values and tiles: codegen/variant_space.lua (raw). */

#define RAW_MAX_STAGES 6

/* Shared memory a stage takes: block_m rows of 32 FP16 values of x and the tile's weight rows of 32 codes. */
static int64_t stage_bytes(const volt8_variant *v, int64_t rows) { return v->block_m * 64 + rows * v->block_n * 32; }

/* The stages that fit beside the item's pairs and weights, at most RAW_MAX_STAGES. */
static int64_t stage_count(const volt8_variant *v, int64_t rows) {
  int64_t fit = (VOLT8_STATIC_SHARED_MEMORY_BYTES - v->block_m * 8) / stage_bytes(v, rows);
  return fit < RAW_MAX_STAGES ? fit : RAW_MAX_STAGES;
}

static int values(const volt8_variant *v, const volt8_moe_shape *shape, int32_t arch, volt8_kernel_values *out,
                  char *reason, size_t reason_size) {
  (void)arch;
  volt8_gemm_geometry g = volt8_gemm_geometry_of(v->op, shape);
  volt8_gemm_common_values(v, shape, &g, out);
  if (v->split_k != 1) return volt8_refuse(reason, reason_size, "the raw tile does not split K");
  int64_t warps_n = g.rows * v->block_n / 32;
  if (g.rows * v->block_n % 32 != 0 || v->warps % warps_n != 0 || v->block_m % (16 * (v->warps / warps_n)) != 0)
    return volt8_refuse(reason, reason_size, "a warp takes 32 weight rows and a multiple of 16 pairs of the tile");
  if (v->block_m % 32 != 0 || v->block_m * 4 % (32 * v->warps) != 0 || g.rows * v->block_n * 2 % (32 * v->warps) != 0)
    return volt8_refuse(reason, reason_size, "block_m does not spread over the warps");
  if (v->min_blocks > 2 && v->block_m != 64)
    return volt8_refuse(reason, reason_size, "only 64-pair items need their registers capped for four CTAs an SM");
  if (v->block_n > volt8_round_up(g.n, 16)) return volt8_refuse(reason, reason_size, "block_n exceeds the output width");
  int64_t stages = stage_count(v, g.rows);
  if (stages < 3) return volt8_refuse(reason, reason_size, "fewer than three stages fit in 48 KiB of shared memory");
  volt8_values_set(out, "SCALE_BK", shape->block_k);
  volt8_values_set(out, "STAGES", stages);
  return 1;
}

const volt8_kind_spec volt8_kind_gemm_raw = {
    .kind = VOLT8_KIND_GEMM_RAW, .family = "raw", .template_path = "templates/moe_gemm_raw.cu", .min_arch = 80,
    .lists_values = 1, .expert_range = 1, .large_items = 1, .space = &volt8_space_raw,
    .values = values, .threads = volt8_gemm_threads, .signature = volt8_gemm_signature,
    .launch_size = volt8_gemm_launch_size,
};
