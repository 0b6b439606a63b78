/* The parameter list of each MoE kernel, declared once: the launcher (moe/experts.c) fills an argument
 * struct by field name and passes the kernel the fields in this order, and tests/test_kernel_params.c
 * checks each list against the parameters the templates declare (types, names, order). Types are
 * written as the templates spell them, without const and __restrict__. */
#ifndef VOLT8_KERNEL_PARAMS_H
#define VOLT8_KERNEL_PARAMS_H

#include <stddef.h>

#include "core/cuda_driver.h"
#include "jit/kernel_signature.h"

/* P(launcher's C type, template type, name) */
#define VOLT8_ROUTE_PARAMS(P)                                                                                  \
  P(CUdeviceptr, "int *", topk_ids) P(int, "int", num_pairs) P(int, "int", bm_gate_up) P(int, "int", bm_down)  \
  P(CUdeviceptr, "int *", sorted_pairs) P(CUdeviceptr, "int4 *", items_gate_up)                               \
  P(CUdeviceptr, "int4 *", items_down) P(CUdeviceptr, "int *", counters)                                      \
  P(CUdeviceptr, "unsigned char *", gate_up_weights) P(long long, "long long", warm_bytes) P(int, "int", top_k) \
  P(CUdeviceptr, "unsigned short *", out)

/* The route on many CTAs (templates/moe_route_parts.cu): the route's pairs and outputs, the ranges'
 * counts (part_counts, parts * (E + 1) + 1 ints), the range count and the pass. */
#define VOLT8_ROUTE_PARTS_PARAMS(P)                                                                            \
  P(CUdeviceptr, "int *", topk_ids) P(int, "int", num_pairs) P(int, "int", bm_gate_up) P(int, "int", bm_down)  \
  P(CUdeviceptr, "int *", sorted_pairs) P(CUdeviceptr, "int4 *", items_gate_up)                               \
  P(CUdeviceptr, "int4 *", items_down) P(CUdeviceptr, "int *", counters) P(CUdeviceptr, "int *", part_counts) \
  P(int, "int", parts) P(int, "int", pass) P(int, "int", top_k) P(CUdeviceptr, "unsigned short *", out)

/* gate_up of every family (templates/moe_gemm_cc.cu, _mma.cu, _hmma.cu with VOLT8_GATE_UP). */
#define VOLT8_GATE_UP_PARAMS(P)                                                                                 \
  P(CUdeviceptr, "unsigned short *", activations) P(CUdeviceptr, "unsigned char *", weights)                  \
  P(CUdeviceptr, "unsigned short *", scales) P(CUdeviceptr, "int *", sorted_pairs)                            \
  P(CUdeviceptr, "int4 *", items) P(CUdeviceptr, "int *", counters) P(int, "int", top_k)                       \
  P(CUdeviceptr, "unsigned short *", out) P(CUdeviceptr, "int *", topk_ids) P(int, "int", num_pairs)

/* A routed down; one that fuses the weighted top-k reduce (hmma) takes the last three as well. */
#define VOLT8_DOWN_PARAMS(P)                                                                                    \
  P(CUdeviceptr, "unsigned short *", activations) P(CUdeviceptr, "unsigned char *", weights)                  \
  P(CUdeviceptr, "unsigned short *", scales) P(CUdeviceptr, "int *", sorted_pairs)                            \
  P(CUdeviceptr, "int4 *", items) P(CUdeviceptr, "int *", counters) P(CUdeviceptr, "float *", topk_weights)    \
  P(CUdeviceptr, "float *", out) P(CUdeviceptr, "int *", topk_ids) P(int, "int", num_pairs)
#define VOLT8_DOWN_FUSED_PARAMS(P)                                                                              \
  VOLT8_DOWN_PARAMS(P) P(int, "int", top_k) P(CUdeviceptr, "unsigned short *", reduced)                       \
  P(CUdeviceptr, "int *", arrivals)

/* A down of one token per CTA row that forms out itself (templates/moe_down_tok.cu). */
#define VOLT8_DOWN_TOKEN_PARAMS(P)                                                                              \
  P(CUdeviceptr, "unsigned short *", h) P(CUdeviceptr, "unsigned char *", weights)                            \
  P(CUdeviceptr, "unsigned short *", scales) P(CUdeviceptr, "float *", topk_weights)                          \
  P(CUdeviceptr, "int *", topk_ids) P(int, "int", num_tokens) P(int, "int", top_k)                             \
  P(CUdeviceptr, "unsigned short *", out) P(CUdeviceptr, "int *", counters)

/* The weighted top-k reduce (templates/moe_reduce.cu); reduce_half, after a tile down, reads z rows of
 * FP16 (Z_HALF) and takes the same arguments. */
#define VOLT8_REDUCE_PARAMS_Z(P, z_type)                                                                        \
  P(CUdeviceptr, z_type, z) P(CUdeviceptr, "int *", topk_ids) P(int, "int", num_tokens) P(int, "int", top_k)    \
  P(CUdeviceptr, "unsigned short *", out) P(CUdeviceptr, "int *", counters)
#define VOLT8_REDUCE_PARAMS(P) VOLT8_REDUCE_PARAMS_Z(P, "float *")
#define VOLT8_REDUCE_HALF_PARAMS(P) VOLT8_REDUCE_PARAMS_Z(P, "unsigned short *")

/* The one-launch forward (templates/moe_single.cu); flags: the ticket and per-pair h counters. */
#define VOLT8_SINGLE_PARAMS(P)                                                                                  \
  P(CUdeviceptr, "unsigned short *", x) P(CUdeviceptr, "unsigned char *", w13)                                 \
  P(CUdeviceptr, "unsigned short *", s13) P(CUdeviceptr, "unsigned char *", w2)                                \
  P(CUdeviceptr, "unsigned short *", s2) P(CUdeviceptr, "int *", topk_ids) P(CUdeviceptr, "float *", topk_weights) \
  P(int, "int", num_tokens) P(int, "int", top_k) P(CUdeviceptr, "unsigned short *", h) P(CUdeviceptr, "float *", z) \
  P(CUdeviceptr, "unsigned short *", out) P(CUdeviceptr, "int *", counters) P(CUdeviceptr, "int *", arrivals)   \
  P(CUdeviceptr, "int *", flags)

typedef struct volt8_route_args { VOLT8_ROUTE_PARAMS(VOLT8_KERNEL_ARGS_FIELD) } volt8_route_args;
typedef struct volt8_route_parts_args { VOLT8_ROUTE_PARTS_PARAMS(VOLT8_KERNEL_ARGS_FIELD) } volt8_route_parts_args;
typedef struct volt8_gate_up_args { VOLT8_GATE_UP_PARAMS(VOLT8_KERNEL_ARGS_FIELD) } volt8_gate_up_args;
typedef struct volt8_down_args { VOLT8_DOWN_FUSED_PARAMS(VOLT8_KERNEL_ARGS_FIELD) } volt8_down_args;
typedef struct volt8_down_token_args { VOLT8_DOWN_TOKEN_PARAMS(VOLT8_KERNEL_ARGS_FIELD) } volt8_down_token_args;
typedef struct volt8_reduce_args { VOLT8_REDUCE_PARAMS(VOLT8_KERNEL_ARGS_FIELD) } volt8_reduce_args;
typedef struct volt8_single_args { VOLT8_SINGLE_PARAMS(VOLT8_KERNEL_ARGS_FIELD) } volt8_single_args;

extern const volt8_kernel_signature volt8_route_signature, volt8_route_parts_signature, volt8_gate_up_signature, volt8_down_signature,
    volt8_down_fused_signature, volt8_down_token_signature, volt8_reduce_signature, volt8_reduce_half_signature,
    volt8_single_signature;

#endif
