/* The weighted top-k reduce (templates/moe_reduce.cu): out[t] is the sum, in pair order, of the live
 * z rows of token t's pairs; a CTA row per token (up to VOLT8_LAUNCH_ROWS rows, each then looping
 * over the tokens a grid's height apart) and 4 columns a thread. It takes the route's values
 * (one set of constants serves the support kernels of a shape). reduce_half reads z rows of FP16,
 * which the tile family's down stores (half the bytes of FP32 rows at prefill sizes). */
#include "moe/kernels/kind.h"

#define THREADS 128
#define COLUMNS_A_THREAD 4

static volt8_launch_size launch_size(const volt8_variant *variant, const volt8_moe_shape *shape,
                                     const volt8_launch_counts *counts) {
  (void)variant;
  int32_t rows = counts->num_tokens < VOLT8_LAUNCH_ROWS ? counts->num_tokens : VOLT8_LAUNCH_ROWS;
  return (volt8_launch_size){(unsigned)volt8_ceil_div(shape->hidden, THREADS * COLUMNS_A_THREAD), (unsigned)rows,
                             THREADS};
}

const volt8_kind_spec volt8_kind_reduce = {
    .kind = VOLT8_KIND_REDUCE, .op = VOLT8_OP_REDUCE, .template_path = "templates/moe_reduce.cu", .expert_range = 1,
    .values = volt8_support_values, .fixed_threads = THREADS, .fixed_signature = &volt8_reduce_signature, .launch_size = launch_size,
};

const volt8_kind_spec volt8_kind_reduce_half = {
    .kind = VOLT8_KIND_REDUCE_HALF, .op = VOLT8_OP_REDUCE_HALF, .template_path = "templates/moe_reduce.cu",
    .expert_range = 1, .values = volt8_support_values, .fixed_threads = THREADS,
    .fixed_signature = &volt8_reduce_half_signature, .launch_size = launch_size,
};
