/* Device memory layout of one rank's experts and the kernels that read it.
 * The templates, the launcher (experts.c) and the reference (reference.c) all follow it.
 *
 * Shape: H = hidden, I = intermediate (this rank), E = experts (this rank), (bn, bk) scale block,
 * off = intermediate_offset (the rank's start inside the scale grid along I). Expert parallelism:
 * the rank holds global experts [expert_start, expert_start + E) of global_experts; the arrays
 * below hold those E, and every id a kernel reads is global (local expert = id - expert_start).
 * Requirements: H % 16 == 0, I % 16 == 0, off % 16 == 0, bk == 128, bn in {1, 128},
 * off < bn when bn == 128, off == 0 when bn == 1.
 *
 * Weights (E4M3 bytes, K contiguous):
 *   w13[E][2*I][H]   rows 0..I-1 gate, rows I..2I-1 up
 *   w2 [E][H][I]
 * Scales (FP16 bits holding scale * 2^8, the 2^8 of the bit-trick conversion folded in):
 *   s13[E][2][G13][ceil(H/bk)]  G13 = ceil((off + I) / bn); gate row n, column k:
 *                               s13[e][0][(off+n)/bn][k/bk], up: s13[e][1][...]
 *   s2 [E][ceil(H/bn)][G2]      G2 = ceil((off + I) / bk); row c, column k: s2[e][c/bn][(off+k)/bk]
 * Dequantized weight = half_from_bits(sign | (code & 0x7F) << 7) * scale16, exact in FP32.
 *
 * Activations: x[M][H] FP16, topk_ids[M][top_k] int32, topk_weights[M][top_k] FP32,
 * out[M][H] FP16. A routed pair p = t * top_k + j.
 * Workspace, for P = max_tokens * max_top_k routed pairs (volt8_moe_workspace_plan): sorted_pairs[P],
 * items_gate_up[P] and items_down[P] (int4: expert, first index into sorted_pairs, count, 0),
 * counters[L + 1][4], h[P][I] FP16, z[P][H] FP32, arrivals[max_tokens][ceil(H/32)] and flags[1 + P]
 * int32, where L = ceil(P / VOLT8_LAUNCH_ROWS) is the most launches a routed GEMM is cut into.
 * counters[l] (l < L): gate_up items and down items left for launch l (item count - l * rows, at
 * least 0), then for l = 0 the bad ids, else 0, then 0. counters[L]: where a down that counts bad
 * ids itself (a fused block_m 1 down, the token down) stores them when it is cut into several
 * launches; the launcher then runs the route, which counts them all.
 *
 * Kernels (each kind's file in moe/kernels/ sets its grid and threads; their parameters, in order, are
 * in kernel_params.h):
 *   route                 grid (1 + the CTAs that warm L2 with gate_up weights); past
 *                         VOLT8_ROUTE_PARTS_MIN_PAIRS pairs route_parts instead: grids (R + 1), (1), (R)
 *                         for its R ranges' count, scan and place
 *   gate_up               grid (ceil(I/BN), P)
 *   down                  grid (ceil(H/BN), P); one that fuses the reduce also forms out
 *   down (token)          grid (ceil(H/BN), M): one token per CTA row, forms out (no route, no reduce)
 *   reduce                grid (ceil(H/(threads*4)), min(M, VOLT8_LAUNCH_ROWS)), rows loop over tokens
 * A grid's y dimension holds at most VOLT8_LAUNCH_ROWS rows, so the launcher cuts a GEMM grid into
 * launches of at most that many rows: a routed one passes launch l items + l * rows and
 * counters[l]; a block_m 1 one (and the token down) whole tokens' pairs, with every per-pair and
 * per-token pointer moved to the launch's first pair and token, and num_pairs (num_tokens) its own.
 * route groups pairs per expert in pair order, skips ids outside [0, E), and splits each expert's
 * pairs into work items of at most bm pairs. A GEMM CTA with bm > 1 whose blockIdx.y is not below
 * its item count returns. A GEMM CTA with bm == 1 ignores sorted_pairs, items and counters: it
 * serves pair p = blockIdx.y with expert topk_ids[p] and writes nothing when that id is outside
 * [0, E). The launcher skips route when both GEMMs have bm == 1 and no such down is cut
 * (counters[0..1] are then stale and unread). z[p] = topk_weights[p] * (h[p] . W2[e]^T);
 * out[t] = sum over j = 0..top_k-1, in that order, of z[t*top_k+j] for valid ids, in FP32.
 * counters[2]: CTA (0, 0) of reduce (or of a down that counts them, uncut) stores (does not add) the
 * number of ids outside [0, E) of this forward, as the route does, so it needs no reset between
 * forwards or graph replays, with or without route.
 */
#ifndef VOLT8_MOE_LAYOUT_H
#define VOLT8_MOE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "volt8.h"

/* The most routed pairs P = max_tokens * max_top_k a workspace is sized for, so the most one forward
 * takes: the kernels index pairs in int32, and this keeps every sum of a pair index and a launch's
 * rows below INT32_MAX (grids past 65535 rows are cut into launches). The one bound of the token
 * count; the tools take theirs from it. */
/* The shapes the kernels take: hidden and intermediate at most VOLT8_SHAPE_MAX_DIMENSION, a rank's
 * experts at most VOLT8_SHAPE_MAX_EXPERTS (the route kernel keeps two to nine ints per expert in
 * shared memory), the model's at most VOLT8_SHAPE_MAX_GLOBAL_EXPERTS (what the checkpoint reader
 * takes). The command line's shape reader (runtime/tools/arguments.c) takes the same. */
#define VOLT8_SHAPE_MAX_DIMENSION 65536
#define VOLT8_SHAPE_MAX_EXPERTS 2048
#define VOLT8_SHAPE_MAX_GLOBAL_EXPERTS (1 << 20)

#define VOLT8_MAX_ROUTED_PAIRS (1 << 30)
/* The most rows (blockIdx.y values) one launch's grid holds, CUDA's limit on gridDim.y; the route
 * kernel writes its item counters per launch of that many rows (its LAUNCH_ROWS value). */
#define VOLT8_LAUNCH_ROWS 65535

/* A forward of more routed pairs than VOLT8_ROUTE_PARTS_MIN_PAIRS (the route CTA's id tile at most)
 * routes on many CTAs (route_parts, moe/kernels/route.c): the pairs cut into volt8_route_part_count
 * ranges, one CTA each, about VOLT8_ROUTE_PART_PAIRS pairs a range and at most VOLT8_ROUTE_MAX_PARTS
 * ranges. Its counts live at the start of z, which no kernel writes before the down. */
#define VOLT8_ROUTE_PARTS_MIN_PAIRS 8192
#define VOLT8_ROUTE_PART_PAIRS 2048
#define VOLT8_ROUTE_MAX_PARTS 256
/* The ranges route_parts cuts num_pairs pairs into (0 where the one-CTA route serves), and the bytes
 * of their counts. */
int32_t volt8_route_part_count(int64_t num_pairs);
int64_t volt8_route_part_bytes(int32_t parts, int32_t num_experts);

typedef struct volt8_moe_dims {
  int64_t w13_bytes_per_expert, w2_bytes_per_expert;
  int64_t s13_elems_per_expert, s2_elems_per_expert;
  int32_t g13, k13_blocks;  /* s13 scale grid per half */
  int32_t n2_blocks, g2;    /* s2 scale grid */
} volt8_moe_dims;

/* E of the model: the rank's experts are [expert_start, expert_start + num_experts) of it. */
int32_t volt8_moe_global_experts(const volt8_moe_shape *shape);

/* A shape handed to an ABI entry (`function` names it in messages): its size field read first, and
 * nothing past it; only sizeof(volt8_moe_shape) is taken (0.3 grew the shape: a caller built against
 * 0.2's header, whose shape is 32 bytes, is refused naming the size). The shape is copied into *out;
 * its fields are checked by volt8_moe_shape_check. */
volt8_status volt8_moe_shape_in(volt8_ctx *ctx, const char *function, const volt8_moe_shape *shape,
                                volt8_moe_shape *out);
/* A shape an ABI entry fills whole (volt8_plan_rank, volt8_shard_rank_shape): its size field read
 * first, and the shape written only when that is sizeof(volt8_moe_shape) (VOLT8_MOE_SHAPE_INIT), so
 * a shorter struct is never written past. */
volt8_status volt8_moe_shape_out_check(volt8_ctx *ctx, const char *function, const volt8_moe_shape *out_shape);

/* VOLT8_OK when the library takes the shape (its layout, and the kernels' limits: H and I multiples of
 * 16 up to 65536, 1 to 2048 experts a rank); else VOLT8_ERR_INVALID_ARGUMENT naming the field,
 * "invalid shape: hidden=2568 must be a positive multiple of 16, at most 65536". */
volt8_status volt8_moe_shape_check(volt8_ctx *ctx, const volt8_moe_shape *shape);
/* The shape as the kernels see it: all experts of the model, however spelled (expert_start 0 and
 * global_experts == num_experts), are global_experts 0, the shape without expert parallelism. */
volt8_moe_shape volt8_moe_shape_normalized(const volt8_moe_shape *shape);
/* The dims of a shape volt8_moe_shape_check took. */
volt8_moe_dims volt8_moe_dims_of(const volt8_moe_shape *shape);

/* Fills dims from shape; VOLT8_ERR_INVALID_ARGUMENT with a message naming the field otherwise. */
volt8_status volt8_moe_dims_compute(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_moe_dims *out);

/* The workspace's regions, in their order in the one allocation. */
typedef enum volt8_workspace_region {
  VOLT8_WORKSPACE_SORTED_PAIRS, VOLT8_WORKSPACE_ITEMS_GATE_UP, VOLT8_WORKSPACE_ITEMS_DOWN, VOLT8_WORKSPACE_COUNTERS,
  VOLT8_WORKSPACE_H, VOLT8_WORKSPACE_Z, VOLT8_WORKSPACE_ARRIVALS, VOLT8_WORKSPACE_FLAGS, VOLT8_WORKSPACE_REGIONS
} volt8_workspace_region;

typedef struct volt8_moe_workspace {
  int32_t max_tokens, max_top_k;                  /* max_top_k at most the model's expert count */
  int64_t pairs;                                  /* max_tokens * max_top_k */
  int64_t routed_launches;                        /* L: the most launches one routed GEMM is cut into */
  uint64_t region_bytes[VOLT8_WORKSPACE_REGIONS]; /* each region's own bytes */
  uint64_t total_bytes;                           /* the allocation: regions at VOLT8_DEVICE_ALIGN */
} volt8_moe_workspace;

/* The workspace of `shape` for max_tokens tokens of up to max_top_k experts (capped at the model's
 * expert count: a token's experts are distinct). VOLT8_ERR_INVALID_ARGUMENT naming the value when
 * either is not positive, when the pairs pass VOLT8_MAX_ROUTED_PAIRS, or when the bytes pass 2^64. */
volt8_status volt8_moe_workspace_plan(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t max_tokens,
                                      int32_t max_top_k, volt8_moe_workspace *out);

#endif
