/* Tables derived without the GPU they are for: a roofline model of one kernel variant's time,
 * used for the shipped sm_70 tables (no V100 was measured; their __metadata__ says so).
 *
 * Model of one GEMM op at M tokens, top_k of E experts, variant (family, bm, bn, w, sk):
 *   pairs per expert p ~ Binomial(M, top_k / E); active experts A = E (1 - P(p = 0));
 *   work items  W = E * sum_p P(p) ceil(p / bm)        (route splits each expert's pairs by bm)
 *   CTAs        C = W * ceil(N_out / bn)               (N_out: I for gate_up, H for down)
 *   DRAM bytes  = A * (expert's FP8 weights + scales) + pairs * (input + output activation bytes)
 *   L2 bytes    = W * (expert's weights + scales) + C * bm * K * 2   (every item rereads its expert)
 *   math        = 2 * W * bm * N_out * rows * K flops at the family's rate (cc: FP32 FMA,
 *                 mma: m8n8k4), plus W * N_out * rows * K E4M3 -> FP16 conversions; its two parts are
 *                 the issue and dequant terms, of which the larger names the bound
 *   memory time = max(DRAM / (bandwidth * fill), L2 / L2 bandwidth), fill = min(1, resident
 *                 warps / warps that saturate DRAM), resident warps = min(C * w, SMs * R * w), R the
 *                 resident CTAs per SM: from the variant's CUBIN when known, else min(32, 64 / w)
 *   (tok: C = M * ceil(N_out / bn), each CTA reading its token's top_k h rows; its lanes are laid
 *   out for a pass of P pairs (as moe/kernels/down_tok.c stages them), so with top_k not a multiple of
 *   P the lanes of the missing pairs idle: resident warps count top_k / (P ceil(top_k / P)) of theirs)
 *   math time   = math / (rate * fill), stretched by the last partial wave, ceil(waves) / waves,
 *                 whenever there is more than one wave
 *   op time     = launch + max(memory, math) + 15% of min(memory, math) (imperfect overlap)
 * The tile family (bm 64 and 128, a CTA's weight tile turned into FP16 in shared memory once and
 * multiplied by every pair of its item) has three bounds, each at the fill and tail as math above:
 *   bytes       = memory as above (each CTA reads its weight tile and its item's x rows once)
 *   m8n8k4      = C * ceil(K / 32) * bm * (rows * bn) / 32 mma.sync.m8n8k4 (each a warp's 4 x 8x8x4 FMAs,
 *                 pad rows of an item and zeros past K included) at the device's rate per SM and clock
 *   dequant     = C * rows * bn * 32 ceil(K / 32) weights converted (a CTA's weight tile per K step, shared
 *                 by its bm pairs) at DERIVE_TILE_DEQUANT_INSTRUCTIONS each over the SM's lanes
 *   op time     = launch + the largest of the three + 15% of the other two
 * The forward adds the route when either GEMM has block_m > 1 (launch plus its one-CTA chain), and
 * the reduce unless the down fuses it: launch, 2 * ceil(top_k / 8) dependent round trips (a batch of
 * eight ids, then their z rows) and the z read and out write at DRAM bandwidth. Ties keep the code
 * generator's order. The constants are the device's data-sheet figures derated to what
 * streaming kernels reach (see DERIVE_V100 in derive_model.c). */
#ifndef VOLT8_DERIVE_MODEL_H
#define VOLT8_DERIVE_MODEL_H

#include "tuner.h"

typedef struct derive_device {
  const char *name;                /* what the tables' "device" says */
  int32_t sm_count;
  double dram_gbps;                /* reachable streaming bandwidth */
  double l2_gbps;
  double cuda_core_tflops;         /* FP32 FMA */
  double mma_tflops;               /* mma.sync m8n8k4 f16 -> f32, as the mma family's small tiles reach it */
  double conversions_per_ns;       /* E4M3 -> FP16 of the cc, tok and mma families, whole device */
  double clock_ghz;                /* the SMs' clock, for the tile family's bounds */
  double m8n8k4_per_sm_clock;      /* mma.sync.m8n8k4 an SM completes a clock at its tensor peak */
  int32_t lanes_per_sm;            /* thread instructions of the conversion an SM issues a clock */
  double launch_us;                /* one kernel inside a graph */
  double round_trip_us;            /* one dependent global round trip of a kernel's critical path, drain included */
  double route_us;                 /* the one-CTA route pass beyond its launch: a chain of such round trips */
  int32_t saturating_warps_per_sm; /* resident warps per SM that keep DRAM busy */
  int32_t max_warps_per_sm, max_ctas_per_sm;
} derive_device;

extern const derive_device DERIVE_V100;
/* Instructions a thread issues per weight it converts in the tile family (derive_model.c counts them). */
extern const double DERIVE_TILE_DEQUANT_INSTRUCTIONS;
/* The H200 running the compute_70 PTX: checks the model against measurements; never for shipped tables. */
extern const derive_device DERIVE_H200;
/* The model device named `key` ("v100", "h200"); NULL for any other. */
const derive_device *derive_device_find(const char *key);

/* The parts of a GEMM variant name; 0 when `name` is not one. */
typedef struct derive_variant {
  volt8_op op;
  volt8_kind kind;      /* the family: cc, tok, mma or tile */
  int32_t cuda_core;    /* family cc or tok (1), mma or tile (0) */
  int32_t fused_reduce; /* family tok: down walks a token's pairs and does the reduce's work */
  int32_t block_m, block_n, warps, split_k;
  int32_t lanes;        /* lanes per output column (.lN); 0 when the name has none (mma) */
  int32_t ctas_per_sm;  /* resident CTAs per SM of its CUBIN (list --resources); 0: unknown, warps alone limit;
                         * negative: it spills or does not fit, and the derivation does not choose it */
} derive_variant;
int derive_parse_variant(const char *name, derive_variant *out);
/* The resident CTAs per SM the model takes for `variant`: its ctas_per_sm when known, else as many
 * as the SM's warp and CTA slots allow. */
double derive_ctas_per_sm(const derive_device *device, const derive_variant *variant);

/* The model's domain: a shape volt8 runs whose rank holds all its experts (no expert parallelism),
 * top_k in 1..num_experts (a token's experts are distinct: top_k / E is the chance that a token routes
 * to a given expert) and num_tokens >= 1. VOLT8_OK there; elsewhere VOLT8_ERR_INVALID_ARGUMENT with a
 * message on ctx (may be NULL) naming the value outside. Nothing below computes outside the domain:
 * it gives 0 or NaN instead. */
volt8_status derive_check_domain(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens);

/* One op's modelled terms: each microseconds, fill the share of the warps that saturate DRAM. */
typedef struct derive_terms {
  double launch_us, dram_us, l2_us, math_us; /* dram_us at the fill, math_us at the fill and tail */
  double issue_us;                            /* of math: the products (FP32 FMAs, or m8n8k4 on tensor cores) */
  double dequant_us;                          /* of math: the E4M3 -> FP16 conversions */
  int32_t tensor;                             /* 1: the products are m8n8k4 (mma, tile) */
  double fill;
  double total_us;                            /* launch + the larger of memory and math + 15% of the other;
                                               * tile: the largest of memory, issue and dequant + 15% of the
                                               * other two (math_us is then the larger of issue and dequant) */
} derive_terms;
/* 0 outside the model's domain or when the shape is not one (out zeroed). */
int derive_op_terms(const derive_device *device, const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens,
                    const derive_variant *variant, derive_terms *out);
/* What limits the op: "launch" (its launch outlasts its work), "latency" (too few warps resident to
 * keep DRAM busy: fill < 1), where math outlasts memory the larger of its parts, "m8n8k4 issue" (or
 * "FP32 issue" for the CUDA-core families) or "dequant", else the bytes: "L2" or "DRAM". */
const char *derive_terms_limit(const derive_terms *terms);
/* Bytes a forward must move, as bench's byte floor counts them: the active experts' E4M3 weights and
 * FP16 scales (E (1 - (1 - top_k / E)^M) experts expected active), x in and out out in FP16, ids and
 * weights. NaN outside the model's domain. */
double derive_forward_bytes(const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens);
/* The route's and the reduce's modelled microseconds; NaN outside the model's domain. */
double derive_route_us(const derive_device *device, int32_t top_k, int32_t num_tokens);
double derive_reduce_us(const derive_device *device, const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens);

/* Modelled microseconds of one op's kernel; NaN outside the model's domain. */
double derive_op_us(const derive_device *device, const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens,
                    const derive_variant *variant);
/* Modelled microseconds of what the forward runs beside the two GEMMs: the route when `routed` (a
 * GEMM of block_m > 1: without one no route runs), the reduce unless `fused_reduce`. */
double derive_support_us(const derive_device *device, const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens,
                         int32_t fused_reduce, int32_t routed);

/* Resident CTAs per SM by variant name, from the variants' CUBINs. */
typedef struct derive_occupancy {
  char *const *names;
  const int32_t *ctas_per_sm;
  int32_t count;
} derive_occupancy;

typedef struct derive_state {
  const derive_device *device;
  volt8_moe_shape shape;
  int32_t top_k;
  const derive_occupancy *occupancy; /* NULL: every variant's is unknown */
  volt8_ctx *ctx;                    /* where a refusal's message goes (NULL: the thread's) */
} derive_state;

/* A backend whose "measurement" is the model (backend.measured = 0); its begin_m refuses a token
 * count, top_k or shape outside the model's domain (derive_check_domain), which stops the tuner. */
tuner_backend derive_backend(derive_state *state);

#endif
