/* What a forward of (num_tokens, top_k) runs: the dispatched (or pinned) gate_up and down, or the one
 * launch of templates/moe_single.cu in their place. The forward and prepare decide with it, and so
 * does anything that reports what a forward runs. It needs no device: the variant list and the
 * tuning tables are read once (a dispatch plan), after which no choice runs the code generator or
 * reads a file. */
#ifndef VOLT8_FORWARD_PLAN_H
#define VOLT8_FORWARD_PLAN_H

#ifndef VOLT8_EXPERIMENTAL_API
#define VOLT8_EXPERIMENTAL_API 1 /* volt8_forward_info */
#endif
#include "volt8.h"
#include "dispatch/dispatch.h"

typedef struct volt8_forward_plan {
  volt8_ctx *ctx;
  volt8_moe_shape shape;
  volt8_dispatch_plan *dispatch;  /* NULL until read */
  int32_t pinned[2];              /* gate_up, down pinned by name */
  volt8_variant pinned_variants[2];
} volt8_forward_plan;

/* The origin source of an op pinned by name. */
#define VOLT8_ORIGIN_PINNED (-1)

typedef struct volt8_forward_kernels {
  volt8_variant_choice choice;     /* the gate_up and down that run, or whose work the one launch does */
  volt8_choice_origin origins[2];  /* where the dispatch took them from (a pinned op: VOLT8_ORIGIN_PINNED) */
  int32_t pinned;                  /* 1: variants were pinned by name; they run as named */
  int32_t single;                  /* 1: the one launch runs instead of route, gate_up, down and reduce */
} volt8_forward_kernels;

/* A plan for shape on ctx; nothing is read yet. */
void volt8_forward_plan_init(volt8_forward_plan *plan, volt8_ctx *ctx, const volt8_moe_shape *shape);
void volt8_forward_plan_release(volt8_forward_plan *plan);
/* Pins gate_up and down by name (NULL: the dispatch's): VOLT8_ERR_NOT_FOUND naming a name outside
 * the catalogue, VOLT8_ERR_INVALID_ARGUMENT one of the other op; nothing changes on failure.
 * *out_changed (unless NULL): 1 where what is pinned differs from before, else 0. */
volt8_status volt8_forward_plan_pin(volt8_forward_plan *plan, const char *gate_up, const char *down,
                                    int *out_changed);
/* Reads the variant list and the tables now, unless they were read. */
volt8_status volt8_forward_plan_read(volt8_forward_plan *plan);
/* What the forward runs (reading the plan first if it was not read). */
volt8_status volt8_forward_plan_choose(volt8_forward_plan *plan, int32_t num_tokens, int32_t top_k,
                                       volt8_forward_kernels *out);

/* volt8_forward_describe of volt8.h: out_info from a plan's choice. */
void volt8_forward_info_fill(const volt8_forward_kernels *runs, volt8_forward_info *out_info);

/* The one-launch rule for a shape: 1 when a forward of num_pairs routed pairs with `choice` runs as
 * one launch on ctx, `pinned` 1 when the variants were asked for by name. */
int volt8_single_launch_serves(const volt8_ctx *ctx, const volt8_moe_shape *shape, int pinned, int64_t num_pairs,
                               const volt8_variant_choice *choice);

#endif
