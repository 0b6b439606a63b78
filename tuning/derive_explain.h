/* The derivation model's account of the shipped choices, on paper (issue 27: what a V100 would take
 * per forward, beside the bytes it must move, and what limits each kernel). */
#ifndef VOLT8_DERIVE_EXPLAIN_H
#define VOLT8_DERIVE_EXPLAIN_H

#include <stdio.h>

#include "derive_model.h"

/* One forward at M tokens with the pair (gate_up, down): each kernel's modelled time and limit. */
typedef struct derive_forward {
  derive_terms gate_up, down;
  double route_us, reduce_us; /* 0 when the forward runs none */
  int32_t kernels;            /* launches: 2 to 4 */
  double total_us;
  double floor_us;            /* derive_forward_bytes over the device's DRAM bandwidth */
} derive_forward;

/* 0 when a name does not parse or the shape is not one. `occupancy` as derive_state's. */
int derive_forward_explain(const derive_device *device, const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens,
                           const char *gate_up, const char *down, const derive_occupancy *occupancy,
                           derive_forward *out);

/* A Markdown table, a row per M, of the dispatch's pair for ctx's target arch (the shipped tables)
 * and derive_forward_explain's figures for it. Nothing is written when an M, top_k or the shape lies
 * outside the model's domain (derive_check_domain's error). */
volt8_status derive_explain_markdown(volt8_ctx *ctx, const derive_device *device, const volt8_moe_shape *shape,
                                     int32_t top_k, const int32_t *m_values, int32_t m_count,
                                     const derive_occupancy *occupancy, FILE *out);

/* The same account as JSON: {"device", "top_k", "forwards": [{"m", "gate_up" and "down" (each "variant",
 * "us", "limited_by" (derive_terms_limit's word), "launch_us", "dram_us", "l2_us", "issue_us",
 * "dequant_us", "tensor", "fill"), "route_us", "reduce_us", "kernels", "forward_us", "floor_us"}]}.
 * Nothing is written after an error. */
volt8_status derive_explain_json(volt8_ctx *ctx, const derive_device *device, const volt8_moe_shape *shape,
                                 int32_t top_k, const int32_t *m_values, int32_t m_count,
                                 const derive_occupancy *occupancy, FILE *out);

#endif
