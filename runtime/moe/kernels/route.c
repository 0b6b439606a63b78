/* The route (templates/moe_route.cu): one CTA groups the routed pairs by expert in pair order, skips
 * ids outside the rank's experts, and splits each expert's pairs into the GEMMs' work items; the CTAs
 * past the first ask L2 for the first experts' gate_up weights. Its shared memory holds a cursor per
 * expert, one more per expert for each placing warp, and ids. route_parts (templates/moe_route_parts.cu)
 * makes the same outputs for many pairs on many CTAs, in three launches (count, scan, place) of ranges
 * of the pairs; its CTAs hold what the route's CTA holds. */
#include "moe/kernels/kind.h"

#define THREADS 256
#define FIXED_BYTES 512        /* the scan's warp sums and the bad-id count */
#define ID_CAPACITY_LIMIT 8192 /* ids kept in shared memory at once */

/* Placing warps: as many as leave room for 1024 ids (at most 8, at least 1). */
static int64_t place_warps(int64_t num_experts) {
  int64_t room = VOLT8_STATIC_SHARED_MEMORY_BYTES - FIXED_BYTES - 4 * num_experts - 4 * 1024;
  return volt8_max64(1, volt8_min64(THREADS / 32, volt8_floor_div(room, 4 * num_experts)));
}

/* Id capacity: what is left, in whole 1024-id steps. */
static int64_t id_capacity(int64_t num_experts) {
  int64_t table_bytes = (1 + place_warps(num_experts)) * 4 * num_experts + FIXED_BYTES;
  int64_t capacity = volt8_floor_div(volt8_floor_div(VOLT8_STATIC_SHARED_MEMORY_BYTES - table_bytes, 4), 1024) * 1024;
  return volt8_min64(ID_CAPACITY_LIMIT, capacity);
}

int volt8_support_values(const volt8_variant *variant, const volt8_moe_shape *shape, int32_t arch,
                         volt8_kernel_values *out, char *reason, size_t reason_size) {
  (void)arch, (void)reason, (void)reason_size;
  volt8_values_set(out, "THREADS", volt8_variant_threads(variant));
  volt8_values_set(out, "NUM_EXPERTS", shape->num_experts);
  volt8_values_set(out, "HIDDEN", shape->hidden);
  volt8_values_set(out, "ID_CAPACITY", id_capacity(shape->num_experts));
  volt8_values_set(out, "PLACE_WARPS", place_warps(shape->num_experts));
  volt8_values_set(out, "LAUNCH_ROWS", VOLT8_LAUNCH_ROWS);
  volt8_values_set(out, "GATE_UP_EXPERT_BYTES", volt8_gemm_geometry_of(VOLT8_OP_GATE_UP, shape).expert_weight_bytes);
  volt8_values_set(out, "Z_HALF", variant->kind == VOLT8_KIND_REDUCE_HALF); /* the reduce's z rows are FP16 */
  return 1;
}

static volt8_launch_size launch_size(const volt8_variant *variant, const volt8_moe_shape *shape,
                                     const volt8_launch_counts *counts) {
  (void)variant, (void)shape;
  return (volt8_launch_size){1u + (unsigned)counts->warm_ctas, 1, THREADS};
}

/* route_parts: count on a CTA a range (and one more for the zeros of tokens with no live id), scan on
 * one, place on a CTA a range. */
static volt8_launch_size parts_launch_size(const volt8_variant *variant, const volt8_moe_shape *shape,
                                           const volt8_launch_counts *counts) {
  (void)variant, (void)shape;
  unsigned parts = (unsigned)counts->route_parts;
  unsigned grid = counts->route_pass == 0 ? parts + 1u : counts->route_pass == 1 ? 1u : parts;
  return (volt8_launch_size){grid, 1, THREADS};
}

const volt8_kind_spec volt8_kind_route_parts = {
    .kind = VOLT8_KIND_ROUTE_PARTS, .op = VOLT8_OP_ROUTE_PARTS, .template_path = "templates/moe_route_parts.cu",
    .expert_range = 1, .values = volt8_support_values, .fixed_threads = THREADS,
    .fixed_signature = &volt8_route_parts_signature, .launch_size = parts_launch_size,
};

const volt8_kind_spec volt8_kind_route = {
    .kind = VOLT8_KIND_ROUTE, .op = VOLT8_OP_ROUTE, .template_path = "templates/moe_route.cu", .expert_range = 1,
    .values = volt8_support_values, .fixed_threads = THREADS, .fixed_signature = &volt8_route_signature, .launch_size = launch_size,
};
