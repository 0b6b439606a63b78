/* The one-launch forward (single.h): gate_up items (VOLT8_SINGLE_GATE_COLUMNS columns of one pair's
 * h) then down items (VOLT8_SINGLE_DOWN_COLUMNS of z) of every pair, taken in turn by as many CTAs as
 * fit the SMs, or one CTA an item. */
#include "moe/kernels/single.h"

#include <stdio.h>

#include "moe/kernels/kind.h"

/* Shared memory a CTA needs: the widest row in FP32, and a row of scales for each weight row a work
 * item reads. */
static int64_t tile_bytes(const volt8_moe_shape *shape) {
  int64_t gate_k_blocks = volt8_ceil_div(shape->hidden, shape->block_k);
  int64_t down_k_blocks = ((int64_t)shape->intermediate_offset + shape->intermediate - 1) / shape->block_k + 1;
  int64_t scale_bytes = 4 * volt8_max64(2 * VOLT8_SINGLE_GATE_COLUMNS * gate_k_blocks, VOLT8_SINGLE_DOWN_COLUMNS * down_k_blocks);
  return 4 * volt8_max64(shape->hidden, shape->intermediate) + scale_bytes + 8;
}

int volt8_single_fits(const volt8_moe_shape *shape) { return tile_bytes(shape) <= VOLT8_STATIC_SHARED_MEMORY_BYTES; }

static int values(const volt8_variant *v, const volt8_moe_shape *shape, int32_t arch, volt8_kernel_values *out,
                  char *reason, size_t reason_size) {
  (void)v, (void)arch;
  if (!volt8_single_fits(shape)) {
    snprintf(reason, reason_size, "the one-launch forward needs %lld bytes of shared memory", (long long)tile_bytes(shape));
    return 0;
  }
  volt8_gemm_geometry gate = volt8_gemm_geometry_of(VOLT8_OP_GATE_UP, shape);
  volt8_gemm_geometry down = volt8_gemm_geometry_of(VOLT8_OP_DOWN, shape);
  volt8_values_set(out, "THREADS", VOLT8_SINGLE_THREADS);
  volt8_values_set(out, "HIDDEN", shape->hidden);
  volt8_values_set(out, "INTERMEDIATE", shape->intermediate);
  volt8_values_set(out, "NUM_EXPERTS", shape->num_experts);
  volt8_values_set(out, "SCALE_BN", shape->block_n);
  volt8_values_set(out, "MIN_BLOCKS", VOLT8_SINGLE_MIN_BLOCKS);
  volt8_values_set(out, "GATE_LANES", VOLT8_SINGLE_GATE_LANES);
  volt8_values_set(out, "GATE_UNROLL", volt8_min64(volt8_ceil_div(gate.k / 16, VOLT8_SINGLE_GATE_LANES), 5));
  volt8_values_set(out, "GATE_K_BLOCKS", gate.scale_k_blocks);
  volt8_values_set(out, "GATE_SCALE_ROW_OFFSET", gate.scale_row_offset);
  volt8_values_set(out, "GATE_SCALE_ROW_STRIDE", gate.scale_row_stride);
  volt8_values_set(out, "GATE_SCALE_HALF_STRIDE", gate.scale_half_stride);
  volt8_values_set(out, "GATE_SCALE_EXPERT_STRIDE", gate.scale_expert_stride);
  volt8_values_set(out, "DOWN_LANES", VOLT8_SINGLE_DOWN_LANES);
  volt8_values_set(out, "DOWN_UNROLL", volt8_min64(volt8_ceil_div(down.k / 16, VOLT8_SINGLE_DOWN_LANES), 8));
  volt8_values_set(out, "DOWN_K_BLOCKS", down.scale_k_blocks);
  volt8_values_set(out, "DOWN_SCALE_K_OFFSET", down.scale_k_offset);
  volt8_values_set(out, "DOWN_SCALE_ROW_STRIDE", down.scale_row_stride);
  volt8_values_set(out, "DOWN_SCALE_EXPERT_STRIDE", down.scale_expert_stride);
  return 1;
}

static volt8_launch_size launch_size(const volt8_variant *variant, const volt8_moe_shape *shape,
                                     const volt8_launch_counts *counts) {
  (void)variant;
  int64_t gate_tiles = volt8_ceil_div(shape->intermediate, VOLT8_SINGLE_GATE_COLUMNS);
  int64_t down_tiles = volt8_ceil_div(shape->hidden, VOLT8_SINGLE_DOWN_COLUMNS);
  int64_t items = (int64_t)counts->num_pairs * (gate_tiles + down_tiles);
  int64_t per_sm = counts->ctas_per_sm >= 0 ? counts->ctas_per_sm : VOLT8_SINGLE_MIN_BLOCKS;
  int64_t ctas = per_sm * counts->sm_count;
  return (volt8_launch_size){(unsigned)(ctas > 0 && ctas < items ? ctas : items), 1, VOLT8_SINGLE_THREADS};
}

const volt8_kind_spec volt8_kind_single = {
    .kind = VOLT8_KIND_SINGLE, .op = VOLT8_OP_SINGLE, .template_path = "templates/moe_single.cu", .lists_values = 1,
    .values = values, .fixed_threads = VOLT8_SINGLE_THREADS, .fixed_signature = &volt8_single_signature, .launch_size = launch_size,
};
