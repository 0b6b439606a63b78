/* Which gate_up/down variant serves a token count: tuning tables first, then a heuristic. */
#ifndef VOLT8_DISPATCH_H
#define VOLT8_DISPATCH_H

#include "volt8.h"

#define VOLT8_VARIANT_NAME_BYTES 96

typedef struct volt8_variant_choice {
  char gate_up[VOLT8_VARIANT_NAME_BYTES];
  char down[VOLT8_VARIANT_NAME_BYTES];
} volt8_variant_choice;

/* The tuning table for the shape (runtime/dispatch/tuning.h) where one serves the token count, else the
 * nearest tabled shape's (runtime/dispatch/tuning_nearest.h), else a deterministic heuristic from the
 * average routed pairs per expert; the fallbacks never pick a family the target arch emulates. */
volt8_status volt8_dispatch_choose(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t num_tokens, int32_t top_k,
                                   volt8_variant_choice *out_choice);

#endif
