/* gate_up and down on CUDA-core FMAs (templates/moe_gemm_cc.cu): each weight row is read by `lanes`
 * lanes, a warp's lane groups are block_n columns of one k slice, split_k slices are summed in the
 * CTA in a fixed order. Every arch. */
#include <stdio.h>

#include "moe/kernels/kind.h"

/* Its block_m values and tiles: codegen/variant_space.lua (cc). A tile's o: the compiler fits o CTAs on
 * an SM, capping registers to match; f (sm_80 and later): each weight load brings the aligned f-byte
 * block around it into L2. */

static int values(const volt8_variant *v, const volt8_moe_shape *shape, int32_t arch, volt8_kernel_values *out,
                  char *reason, size_t reason_size) {
  (void)arch;
  volt8_gemm_geometry g = volt8_gemm_geometry_of(v->op, shape);
  volt8_gemm_common_values(v, shape, &g, out);
  int64_t chunks = g.k / 16;
  const char *why = NULL;
  if (v->warps % v->split_k != 0) why = "split_k does not divide warps";
  else if (32 % v->lanes != 0) why = "lanes per row do not divide a warp";
  else if (v->block_n != (v->warps / v->split_k) * (32 / v->lanes)) why = "block_n must equal the lane groups of a k slice";
  else if (v->block_n > g.n) why = "block_n exceeds the output width";
  else if (chunks < v->split_k) why = "fewer 16-wide k chunks than split_k slices";
  if (why) {
    snprintf(reason, reason_size, "%s", why);
    return 0;
  }
  int64_t chunks_per_lane = volt8_ceil_div(volt8_ceil_div(chunks, v->split_k), v->lanes);
  volt8_values_set(out, "LANES", v->lanes);
  volt8_values_set(out, "UNROLL", volt8_min64(chunks_per_lane, g.rows == 2 ? 4 : 8));
  int64_t shared_bytes = (int64_t)v->block_m * g.k * 4 + g.rows * v->block_n * g.scale_k_blocks * 4 +
                         (int64_t)v->split_k * v->block_n * v->block_m * g.rows * 4 + v->block_m * 4;
  if (shared_bytes > VOLT8_STATIC_SHARED_MEMORY_BYTES) {
    snprintf(reason, reason_size, "needs %lld bytes of shared memory", (long long)shared_bytes);
    return 0;
  }
  return 1;
}

const volt8_kind_spec volt8_kind_gemm_cc = {
    .kind = VOLT8_KIND_GEMM_CC, .family = "cc", .template_path = "templates/moe_gemm_cc.cu", .lists_values = 1,
    .expert_range = 1, .space = &volt8_space_cc, .values = values, .threads = volt8_gemm_threads,
    .signature = volt8_gemm_signature, .launch_size = volt8_gemm_launch_size,
};
