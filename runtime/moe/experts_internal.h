/* What the checkpoint loader needs of the experts handle: allocate, then fill expert by expert. */
#ifndef VOLT8_EXPERTS_INTERNAL_H
#define VOLT8_EXPERTS_INTERNAL_H

#include "volt8.h"

/* One device allocation for all experts of `shape` (layout of moe_layout.h) plus the workspace
 * for max_tokens x max_top_k routed pairs. The weights are uninitialised until uploaded. */
volt8_status volt8_experts_alloc(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t max_tokens, int32_t max_top_k,
                                 volt8_experts **out_experts);
/* Copies one expert's arrays (moe_layout.h, per-expert slices) into place. */
volt8_status volt8_experts_upload_expert(volt8_experts *experts, int32_t expert, const uint8_t *w13,
                                         const uint16_t *s13, const uint8_t *w2, const uint16_t *s2);
/* Bytes of the resident weight allocation (weights and scales, alignment included). */
size_t volt8_experts_resident_bytes(const volt8_experts *experts);
/* The shape the handle was created for. */
const volt8_moe_shape *volt8_experts_resident_shape(const volt8_experts *experts);
/* What the handle's forwards run (forward_plan.h). */
struct volt8_forward_plan;
struct volt8_forward_plan *volt8_experts_plan(volt8_experts *experts);
/* Bytes of the workspace allocation (sized for the prepared maximum of routed pairs). */
size_t volt8_experts_workspace_bytes(const volt8_experts *experts);
/* Fills the workspace (route output, h, z) with `byte` in stream order: a test then sees any kernel
 * that reads workspace data before the kernel that writes it has finished. The arrival counters of
 * a fused-reduce down are set back to zero, as every forward leaves them. */
volt8_status volt8_experts_fill_workspace(volt8_experts *experts, unsigned char byte, void *stream);
/* The context the handle was created on. */
volt8_ctx *volt8_experts_ctx(const volt8_experts *experts);
/* Graphs the handle captured for eager forwards, and forwards it launched from one (moe/replay.h). */
void volt8_experts_replay_counts(const volt8_experts *experts, int64_t *out_captures, int64_t *out_replays,
                                 int64_t *out_repeats);

#endif
