/* Which gate_up/down variant serves a token count: tuning tables first, then a heuristic. */
#ifndef VOLT8_DISPATCH_H
#define VOLT8_DISPATCH_H

#include "moe/kernels/catalogue.h"
#include "volt8.h"

typedef struct volt8_variant_choice {
  volt8_variant gate_up;
  volt8_variant down;
} volt8_variant_choice;

/* Where one op's pick came from. */
typedef struct volt8_choice_origin {
  int32_t source;     /* volt8_tuning_source (dispatch/tuning.h): NONE when the heuristic picked */
  int32_t table_m;    /* the table's M that served */
  const char *origin; /* the table: a path, or "built-in:<name>"; NULL for the heuristic */
} volt8_choice_origin;

/* What the dispatch of one shape reads, read once: the variant list and the shape's tuning tables of
 * every device of the arch. Choices from it run no code
 * generator and read no file, for any token count. Used by one thread at a time. */
typedef struct volt8_dispatch_plan volt8_dispatch_plan;

volt8_status volt8_dispatch_plan_create(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_dispatch_plan **out_plan);
void volt8_dispatch_plan_destroy(volt8_dispatch_plan *plan);
/* This device's tuning table of the shape where it covers the token count, else the same shape's table
 * of another device of the arch (runtime/dispatch/tuning_shape.h), else a deterministic heuristic from
 * the average routed pairs per expert, which never picks a family the target arch emulates.
 * origins (may be NULL): [0] gate_up's, [1] down's, whose texts live as long as the plan. */
volt8_status volt8_dispatch_plan_choose(const volt8_dispatch_plan *plan, int32_t num_tokens, int32_t top_k,
                                        volt8_variant_choice *out_choice, volt8_choice_origin *origins);

/* The same choice from a plan made for this one call (tools and tests). */
volt8_status volt8_dispatch_choose(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t num_tokens, int32_t top_k,
                                   volt8_variant_choice *out_choice);

#endif
