/* What the GEMM kinds share (kind.h): the operand geometry of an op in the device layout, the values
 * every GEMM template takes, the GEMMs' parameter lists and grid. */
#include "moe/kernels/kind.h"

#include <stdio.h>
#include <string.h>

void volt8_values_set(volt8_kernel_values *values, const char *name, int64_t number) {
  for (int32_t i = 0; i < values->count; i++)
    if (strcmp(values->items[i].name, name) == 0) {
      values->items[i].number = number;
      return;
    }
  if (values->count < VOLT8_MAX_KERNEL_VALUES) values->items[values->count++] = (volt8_template_value){name, NULL, number};
}

int volt8_refuse(char *reason, size_t reason_size, const char *why) {
  snprintf(reason, reason_size, "%s", why);
  return 0;
}

volt8_gemm_geometry volt8_gemm_geometry_of(volt8_op op, const volt8_moe_shape *shape) {
  volt8_moe_dims dims = volt8_moe_dims_of(shape);
  int64_t hidden = shape->hidden, intermediate = shape->intermediate, offset = shape->intermediate_offset;
  volt8_gemm_geometry g;
  if (op == VOLT8_OP_GATE_UP) {
    g = (volt8_gemm_geometry){.k = hidden, .n = intermediate, .rows = 2, .up_row_offset = intermediate,
                              .expert_weight_bytes = 2 * intermediate * hidden, .counter_index = 0,
                              .scale_row_offset = offset, .scale_k_offset = 0, .scale_row_stride = dims.k13_blocks,
                              .scale_half_stride = (int64_t)dims.g13 * dims.k13_blocks,
                              .scale_expert_stride = 2 * (int64_t)dims.g13 * dims.k13_blocks};
  } else {
    g = (volt8_gemm_geometry){.k = intermediate, .n = hidden, .rows = 1, .up_row_offset = 0,
                              .expert_weight_bytes = hidden * intermediate, .counter_index = 1, .scale_row_offset = 0,
                              .scale_k_offset = offset, .scale_row_stride = dims.g2, .scale_half_stride = 0,
                              .scale_expert_stride = (int64_t)dims.n2_blocks * dims.g2};
  }
  g.scale_k_blocks = (g.scale_k_offset + g.k - 1) / shape->block_k + 1;
  return g;
}

void volt8_gemm_common_values(const volt8_variant *v, const volt8_moe_shape *shape, const volt8_gemm_geometry *g,
                              volt8_kernel_values *out) {
  volt8_values_set(out, "OP_GATE_UP", v->op == VOLT8_OP_GATE_UP);
  volt8_values_set(out, "BLOCK_M", v->block_m);
  volt8_values_set(out, "BLOCK_N", v->block_n);
  volt8_values_set(out, "WARPS", v->warps);
  volt8_values_set(out, "SPLIT_K", v->split_k);
  volt8_values_set(out, "THREADS", 32 * v->warps);
  volt8_values_set(out, "ROWS", g->rows);
  volt8_values_set(out, "K_DIM", g->k);
  volt8_values_set(out, "N_DIM", g->n);
  volt8_values_set(out, "NUM_EXPERTS", shape->num_experts);
  volt8_values_set(out, "EXPERT_WEIGHT_BYTES", g->expert_weight_bytes);
  volt8_values_set(out, "UP_ROW_OFFSET", g->up_row_offset);
  volt8_values_set(out, "COUNTER_INDEX", g->counter_index);
  volt8_values_set(out, "SCALE_BN", shape->block_n);
  volt8_values_set(out, "SCALE_ROW_OFFSET", g->scale_row_offset);
  volt8_values_set(out, "SCALE_K_OFFSET", g->scale_k_offset);
  volt8_values_set(out, "SCALE_ROW_STRIDE", g->scale_row_stride);
  volt8_values_set(out, "SCALE_HALF_STRIDE", g->scale_half_stride);
  volt8_values_set(out, "SCALE_EXPERT_STRIDE", g->scale_expert_stride);
  volt8_values_set(out, "SCALE_K_BLOCKS", g->scale_k_blocks);
  volt8_values_set(out, "MIN_BLOCKS", v->min_blocks ? v->min_blocks : 1);
  volt8_values_set(out, "WEIGHT_FETCH", v->fetch_bytes); /* the weight loads' L2 prefetch size (all but mma) */
}

int32_t volt8_gemm_threads(const volt8_variant *variant) { return 32 * variant->warps; }

const volt8_kernel_signature *volt8_gemm_signature(const volt8_variant *variant) {
  if (variant->op == VOLT8_OP_GATE_UP) return &volt8_gate_up_signature;
  return variant->fused_reduce ? &volt8_down_fused_signature : &volt8_down_signature;
}

/* A CTA per block_n output columns (of h for gate_up, of z for down) and routed pair. */
volt8_launch_size volt8_gemm_launch_size(const volt8_variant *variant, const volt8_moe_shape *shape,
                                         const volt8_launch_counts *counts) {
  int64_t columns = variant->op == VOLT8_OP_GATE_UP ? shape->intermediate : shape->hidden;
  return (volt8_launch_size){(unsigned)volt8_ceil_div(columns, variant->block_n), (unsigned)counts->num_pairs,
                             (unsigned)volt8_gemm_threads(variant)};
}
