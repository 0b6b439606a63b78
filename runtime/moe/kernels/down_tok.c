/* down fused with the weighted top-k sum (templates/moe_down_tok.cu): a CTA walks one token's pairs,
 * each reading its own expert, and forms out; block_m 1, no route pass, no reduce launch. Its lanes
 * are laid out as slots (lane groups per column), each staging its share of a pass of pairs. */
#include <stdio.h>

#include "moe/kernels/kind.h"

#define PASS_PAIRS_LIMIT 16

/* Its block_m values and tiles: codegen/variant_space.lua (tok). */

static int values(const volt8_variant *v, const volt8_moe_shape *shape, int32_t arch, volt8_kernel_values *out,
                  char *reason, size_t reason_size) {
  (void)arch;
  if (v->op != VOLT8_OP_DOWN) return volt8_refuse(reason, reason_size, "only down fuses the reduce");
  volt8_gemm_geometry g = volt8_gemm_geometry_of(v->op, shape);
  volt8_gemm_common_values(v, shape, &g, out);
  int64_t chunks = g.k / 16;
  if (32 % v->lanes != 0) return volt8_refuse(reason, reason_size, "lanes per row do not divide a warp");
  int64_t groups = (int64_t)v->warps * 32 / v->lanes;
  if (groups % v->block_n != 0) return volt8_refuse(reason, reason_size, "block_n does not divide the lane groups");
  if (v->block_n > g.n) return volt8_refuse(reason, reason_size, "block_n exceeds the output width");
  int64_t slots = groups / v->block_n;
  /* Pairs staged per pass: as many as shared memory holds, a multiple of the slots, at most 16. */
  int64_t per_pair = g.k * 4 + v->block_n * 4 + 8;
  int64_t pass_pairs = volt8_min64(PASS_PAIRS_LIMIT, VOLT8_STATIC_SHARED_MEMORY_BYTES / per_pair) / slots * slots;
  if (pass_pairs < slots) return volt8_refuse(reason, reason_size, "no pass of one pair per slot fits in shared memory");
  int64_t items = (pass_pairs / slots) * volt8_ceil_div(chunks, v->lanes);
  volt8_values_set(out, "LANES", v->lanes);
  volt8_values_set(out, "PASS_PAIRS", pass_pairs);
  volt8_values_set(out, "UNROLL", volt8_min64(items, 12));
  return 1;
}

/* A CTA per block_n columns of out and token. */
static volt8_launch_size launch_size(const volt8_variant *variant, const volt8_moe_shape *shape,
                                     const volt8_launch_counts *counts) {
  return (volt8_launch_size){(unsigned)volt8_ceil_div(shape->hidden, variant->block_n), (unsigned)counts->num_tokens,
                             (unsigned)volt8_gemm_threads(variant)};
}

const volt8_kind_spec volt8_kind_down_tok = {
    .kind = VOLT8_KIND_DOWN_TOK, .family = "tok", .template_path = "templates/moe_down_tok.cu", .lists_values = 1,
    .expert_range = 1, .space = &volt8_space_tok, .values = values, .threads = volt8_gemm_threads,
    .fixed_signature = &volt8_down_token_signature, .launch_size = launch_size,
};
