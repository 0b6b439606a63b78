/* The double-precision MoE reference and the error metric: declared in volt8.h. */
#ifndef VOLT8_REFERENCE_H
#define VOLT8_REFERENCE_H

#include "volt8.h"

/* The reference forward of some of the tokens: out[r] is row rows[r] of what volt8_reference_moe_forward
 * gives for all num_tokens (a token's output depends on its own x, ids and weights alone), at the
 * cost of row_count tokens. rows: indices in [0, num_tokens), in any order, repeats allowed; out:
 * [row_count][H]. How the large token counts of a prefill are checked on a sample of their rows.
 * threads: up to that many threads share each expert's rows and columns (this one among them); the
 * result is the same bits for any count, as each sum is made in one thread's order. */
volt8_status volt8_reference_moe_rows(volt8_ctx *ctx, const volt8_moe_shape *shape, const volt8_host_experts *experts,
                                      const uint16_t *x, const int32_t *topk_ids, const float *topk_weights,
                                      int32_t num_tokens, int32_t top_k, const int32_t *rows, int32_t row_count,
                                      double *out, int32_t threads);

#endif
