/* The roofline model of derive_model.h and its tuner backend. */
#include "derive_model.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"

/* Tesla V100 (SXM2): 80 SMs, 900 GB/s HBM2 of which streaming copies reach about 830, L2 about
 * 2.5 TB/s, 15.7 TFLOP/s FP32 (90% reachable), 125 TFLOP/s tensor peak of which the mma family's
 * m8n8k4 tiles, this small, reach about a third, E4M3 -> FP16 at about three instructions per value
 * over 5120 lanes at 1.53 GHz, about 1.5 us per kernel in a graph, 64 warps and 32 CTAs per SM, 8 warps
 * per SM of 16-byte loads to keep HBM2 busy. A dependent round trip and the route's chain of them are
 * the H200's measured figures (below): an assumption, DRAM latency being of like length on both.
 * The tile family's m8n8k4 rate is the tensor peak's: 125 TFLOP/s over 80 SMs x 1.53 GHz (boost) x 2
 * flops is 511 FMAs an SM a clock, its 8 tensor cores' 64 each; an mma.sync.m8n8k4 is a warp's
 * 4 x 8x8x4 = 1024 FMAs, so an SM completes 0.5 a clock (one every 8 clocks on each of its four
 * sub-partitions). Its conversions issue over the same 64 lanes an SM as the other families'. */
const derive_device DERIVE_V100 = {
    .name = "Tesla V100-SXM2 (modelled, not measured)",
    .sm_count = 80,
    .dram_gbps = 830.0,
    .l2_gbps = 2500.0,
    .cuda_core_tflops = 14.0,
    .mma_tflops = 40.0,
    .conversions_per_ns = 2600.0,
    .clock_ghz = 1.53,
    .m8n8k4_per_sm_clock = 0.5,
    .lanes_per_sm = 64,
    .launch_us = 1.5,
    .round_trip_us = 1.3,
    .route_us = 5.8,
    .saturating_warps_per_sm = 8,
    .max_warps_per_sm = 64,
    .max_ctas_per_sm = 32,
};

/* NVIDIA H200 running the compute_70 PTX (the driver JIT-compiles it; no early launch, kernels in a
 * CUDA graph), to check the model against measurements where a GPU is at hand; its tables are never
 * shipped. Sources: measured here (bench/RESULTS.md, the floor and copy probes of docs/notebook/),
 * data sheet, or an assumption, per figure. */
const derive_device DERIVE_H200 = {
    .name = "NVIDIA H200, compute_70 PTX (modelled, a check of the model)",
    .sm_count = 132,              /* data sheet */
    .dram_gbps = 3825.0,          /* measured here: 16-byte load/store copy, bytes read + written */
    .l2_gbps = 8000.0,            /* assumption: about twice the copy rate, as V100's 2.5 TB/s is three times its
                                     DRAM's; not measured here */
    .cuda_core_tflops = 60.0,     /* data sheet 66.9 (132 SMs x 128 FP32 lanes x 2 x 1.98 GHz), 90% reachable
                                     as for V100 */
    .mma_tflops = 15.0,           /* assumption: sm_90 runs m8n8k4 as a software routine (emulated, so the
                                     check leaves mma out); a quarter of the FP32 rate */
    .conversions_per_ns = 11150.0, /* data sheet lanes and clock: 16896 lanes x 1.98 GHz / 3 instructions a value */
    .clock_ghz = 1.98,            /* data sheet (boost) */
    .m8n8k4_per_sm_clock = 0.028, /* assumption, as mma_tflops (m8n8k4 emulated): 15 TFLOP/s over 132 SMs x
                                     1.98 GHz x 2 x 1024 FMAs */
    .lanes_per_sm = 128,          /* data sheet, as conversions_per_ns: 16896 lanes over 132 SMs */
    .launch_us = 1.0,             /* measured here: a graph's launch floor is 2.4 us for three kernels and 3.4 for
                                     four, with early launch, which compute_70 code lacks: the fourth kernel's 1.0 */
    .round_trip_us = 1.3,         /* measured here: at M = 1 a forward's 5.3 us beyond launches and bytes over its
                                     four dependent steps (ids, weights, h, z; notebook 2026-11, launch floor) */
    .route_us = 5.8,              /* measured here: ncu's 5.6-6.1 us for the route (notebook 2026-11) */
    .saturating_warps_per_sm = 22, /* assumption: V100's 8 scaled by the DRAM bandwidth per SM (29 against
                                      10.4 GB/s), at a like DRAM latency */
    .max_warps_per_sm = 64,       /* data sheet (as are the 32 CTAs and 228 KiB of shared memory per SM) */
    .max_ctas_per_sm = 32,
};

/* The tile family's conversion of one 16-code chunk, a thread's per K step (templates/moe_gemm_tile.cu,
 * load_step and store_step, sm_70): per two codes the decode's PRMT, shift and two logic operations
 * (e4m3x2_to_half2) and an HMUL2 by the block scale, 8 x 5; per chunk its 16-byte load, its scale's
 * load and packing into a half2, and two 16-byte shared stores, 5: 45 instructions for 16 weights (the
 * address arithmetic aside). */
const double DERIVE_TILE_DEQUANT_INSTRUCTIONS = 45.0 / 16.0;

int derive_parse_variant(const char *name, derive_variant *out) {
  memset(out, 0, sizeof *out);
  volt8_variant variant;
  /* the model knows the sm_70 families: CUDA cores (cc, and tok, which also does the reduce's work)
   * and m8n8k4 (mma, and tile, whose weight tiles are converted once into shared memory) */
  if (!volt8_variant_parse(name, &variant) || variant.op > VOLT8_OP_DOWN || variant.kind == VOLT8_KIND_GEMM_HMMA)
    return 0;
  out->op = variant.op;
  out->kind = variant.kind;
  out->cuda_core = variant.kind == VOLT8_KIND_GEMM_CC || variant.kind == VOLT8_KIND_DOWN_TOK;
  out->fused_reduce = variant.kind == VOLT8_KIND_DOWN_TOK;
  out->block_m = variant.block_m;
  out->block_n = variant.block_n;
  out->warps = variant.warps;
  out->split_k = variant.split_k;
  out->lanes = variant.lanes;
  return 1;
}

/* "" when the model is defined at (shape, top_k, num_tokens); else what lies outside its domain. The
 * model reads each of the shape's experts as one of all the model's, a token's top_k of them as
 * distinct (q = top_k / E, a probability, needs top_k <= E) and at least one token. */
static int outside_domain(const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens, char *why, size_t why_size) {
  volt8_moe_dims dims;
  why[0] = '\0';
  if (volt8_moe_dims_compute(NULL, shape, &dims) != VOLT8_OK)
    snprintf(why, why_size, "%s", volt8_last_error(NULL));
  else if (shape->global_experts > 0 && shape->global_experts != shape->num_experts)
    snprintf(why, why_size,
             "the shape holds experts [%d, %d) of %d (expert parallelism); the model is of a rank holding all its "
             "experts", shape->expert_start, shape->expert_start + shape->num_experts, shape->global_experts);
  else if (top_k < 1 || top_k > shape->num_experts)
    snprintf(why, why_size, "top_k %d is outside 1..%d (the shape's num_experts: a token's experts are distinct)",
             top_k, shape->num_experts);
  else if (num_tokens < 1)
    snprintf(why, why_size, "num_tokens %d is below 1", num_tokens);
  return why[0] != '\0';
}

volt8_status derive_check_domain(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens) {
  char why[512];
  if (!shape) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "derive_check_domain: shape is NULL");
  if (outside_domain(shape, top_k, num_tokens, why, sizeof why))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "the derivation model is not defined here: %s", why);
  return VOLT8_OK;
}

static int in_domain(const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens) {
  char why[512];
  return shape && !outside_domain(shape, top_k, num_tokens, why, sizeof why);
}

/* Of a tok CTA's lanes, the share with a pair to walk: moe/kernels/down_tok.c lays them out as slots
 * (lane groups per column) each walking P / slots pairs of a pass of P pairs, P as many as 48 KiB of
 * shared memory stages (h in FP32, partials, weight, flag), at most 16, a multiple of the slots. */
static double tok_live_share(const derive_variant *variant, double k, int32_t top_k) {
  double slots = variant->lanes > 0 ? floor(variant->warps * 32.0 / variant->lanes / variant->block_n) : 0.0;
  if (slots < 1.0) return 1.0;
  double pass = floor(fmin(16.0, floor(48.0 * 1024 / (k * 4 + variant->block_n * 4 + 8))) / slots) * slots;
  if (pass < 1.0) return 1.0;
  return top_k / (pass * ceil(top_k / pass));
}

/* Expected work items per expert, sum_p P(p) ceil(p / bm), and P(p = 0), for p ~ Binomial(M, q),
 * 0 < q <= 1, summed up from p = 0 with P(p + 1) = P(p) (M - p) / (p + 1) q / (1 - q). Past M q of
 * about 700, P(0) = (1 - q)^M underflows to 0, and every term after it would too (the work of M = 40000
 * at top-10 of 512 came out as nothing): there the terms below the smallest normal double, which add
 * nothing, are stepped over in logs until one is representable. */
static void expected_items(int32_t num_tokens, double q, int32_t block_m, double *out_items, double *out_idle) {
  double probability = pow(1.0 - q, num_tokens), items = 0.0;
  *out_idle = probability;
  if (q >= 1.0) { /* every expert takes every token */
    *out_items = ceil((double)num_tokens / block_m);
    return;
  }
  int32_t p = 0;
  if (probability < DBL_MIN) {
    double log_probability = num_tokens * log1p(-q);
    for (; p < num_tokens && log_probability < log(DBL_MIN); p++)
      log_probability += log((double)(num_tokens - p) / (p + 1) * q / (1.0 - q));
    probability = exp(log_probability);
    items = probability * (double)(((int64_t)p + block_m - 1) / block_m);
  }
  /* past the mode, once the terms underflow to 0 the rest add nothing */
  for (; p < num_tokens && (probability > 0.0 || p < num_tokens * q); p++) {
    probability *= (double)(num_tokens - p) / (p + 1) * q / (1.0 - q);
    items += probability * (double)(((int64_t)p + block_m) / block_m);
  }
  *out_items = items;
}

/* The tile family's m8n8k4 and dequant bounds (derive_model.h) at the fill (at least 1e-3, as math's)
 * and tail, and its time beside `memory_us`. */
static void tile_bounds(const derive_device *device, const derive_variant *variant, double ctas, double rows, double k,
                        double fill, double tail, double memory_us, derive_terms *out) {
  double weight_rows = rows * variant->block_n, steps = ceil(k / 32.0);
  double m8n8k4 = ctas * steps * variant->block_m * weight_rows / 32.0;
  double converted = ctas * weight_rows * steps * 32.0;
  double sm_clocks_per_us = device->sm_count * device->clock_ghz * 1e3;
  out->issue_us = m8n8k4 / (device->m8n8k4_per_sm_clock * sm_clocks_per_us) / fill * tail;
  out->dequant_us = converted * DERIVE_TILE_DEQUANT_INSTRUCTIONS / (device->lanes_per_sm * sm_clocks_per_us) / fill * tail;
  out->math_us = fmax(out->issue_us, out->dequant_us);
  double largest = fmax(memory_us, out->math_us);
  double others = memory_us + out->issue_us + out->dequant_us - largest;
  out->total_us = device->launch_us + largest + 0.15 * others;
}

double derive_ctas_per_sm(const derive_device *device, const derive_variant *variant) {
  if (variant->ctas_per_sm > 0) return variant->ctas_per_sm;
  return fmin(device->max_ctas_per_sm, floor((double)device->max_warps_per_sm / variant->warps));
}

int derive_op_terms(const derive_device *device, const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens,
                    const derive_variant *variant, derive_terms *out) {
  volt8_moe_dims dims;
  memset(out, 0, sizeof *out);
  if (!in_domain(shape, top_k, num_tokens) || volt8_moe_dims_compute(NULL, shape, &dims) != VOLT8_OK) return 0;
  int gate_up = variant->op == VOLT8_OP_GATE_UP;
  double columns = gate_up ? shape->intermediate : shape->hidden;
  double rows = gate_up ? 2.0 : 1.0;
  double k = gate_up ? shape->hidden : shape->intermediate;
  double expert_bytes = gate_up ? dims.w13_bytes_per_expert + 2.0 * dims.s13_elems_per_expert
                                : dims.w2_bytes_per_expert + 2.0 * dims.s2_elems_per_expert;
  /* x in, h out; h in, z out (fused: h in, a top_k-th of the token's out row) */
  /* tok: every CTA stages its token's top_k h rows */
  double rows_per_cta = variant->fused_reduce ? top_k : variant->block_m;
  double activation_bytes = gate_up                 ? k * 2 + columns * 2
                            : variant->fused_reduce ? k * 2 + columns * 2 / top_k
                                                    : k * 2 + columns * 4;
  double q = (double)top_k / shape->num_experts, items_per_expert = 0.0, idle = 0.0;
  expected_items(num_tokens, q, variant->block_m, &items_per_expert, &idle);
  double experts = shape->num_experts, pairs = (double)num_tokens * top_k;
  double items = experts * items_per_expert, active = experts * (1.0 - idle);
  double ctas = (variant->fused_reduce ? (double)num_tokens : items) * ceil(columns / variant->block_n);
  double dram_bytes = active * expert_bytes + pairs * activation_bytes;
  double l2_bytes = items * expert_bytes + ctas * rows_per_cta * k * 2;
  double flops = 2.0 * items * variant->block_m * columns * rows * k;
  double conversions = items * columns * rows * k;

  double ctas_per_sm = derive_ctas_per_sm(device, variant);
  double live = variant->fused_reduce ? tok_live_share(variant, k, top_k) : 1.0;
  double resident_warps = live * fmin(ctas * variant->warps, device->sm_count * ctas_per_sm * variant->warps);
  double fill = fmin(1.0, resident_warps / ((double)device->sm_count * device->saturating_warps_per_sm));
  out->fill = fill;
  out->dram_us = dram_bytes / (device->dram_gbps * 1e3 * fmax(fill, 1e-3));
  out->l2_us = l2_bytes / (device->l2_gbps * 1e3);
  double memory_us = fmax(out->dram_us, out->l2_us);
  double rate = variant->cuda_core ? device->cuda_core_tflops : device->mma_tflops;
  double waves = ctas / (device->sm_count * ctas_per_sm);
  /* the last wave runs as a whole one: never fewer waves, never less time, for more CTAs */
  double tail = waves > 1 ? ceil(waves) / waves : 1.0;
  out->launch_us = device->launch_us;
  out->tensor = !variant->cuda_core;
  if (variant->kind == VOLT8_KIND_GEMM_TILE) {
    tile_bounds(device, variant, ctas, rows, k, fmax(fill, 1e-3), tail, memory_us, out);
    return 1;
  }
  double math_us = (flops / (rate * 1e6) + conversions / (device->conversions_per_ns * 1e3)) / fmax(fill, 1e-3) * tail;
  out->math_us = math_us;
  /* the two parts, to name the bound; math_us stays their sum as computed above */
  out->issue_us = flops / (rate * 1e6) / fmax(fill, 1e-3) * tail;
  out->dequant_us = conversions / (device->conversions_per_ns * 1e3) / fmax(fill, 1e-3) * tail;
  out->total_us = device->launch_us + fmax(memory_us, math_us) + 0.15 * fmin(memory_us, math_us);
  return 1;
}

double derive_op_us(const derive_device *device, const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens,
                    const derive_variant *variant) {
  derive_terms terms;
  return derive_op_terms(device, shape, top_k, num_tokens, variant, &terms) ? terms.total_us : NAN;
}

const char *derive_terms_limit(const derive_terms *terms) {
  double memory = fmax(terms->dram_us, terms->l2_us);
  if (terms->launch_us >= fmax(memory, terms->math_us)) return "launch";
  if (terms->fill < 1.0) return "latency";
  if (terms->math_us > memory) {
    if (terms->dequant_us > terms->issue_us) return "dequant";
    return terms->tensor ? "m8n8k4 issue" : "FP32 issue";
  }
  return terms->l2_us > terms->dram_us ? "L2" : "DRAM";
}

double derive_forward_bytes(const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens) {
  volt8_moe_dims dims;
  if (!in_domain(shape, top_k, num_tokens) || volt8_moe_dims_compute(NULL, shape, &dims) != VOLT8_OK) return NAN;
  double expert_bytes = (double)dims.w13_bytes_per_expert + dims.w2_bytes_per_expert +
                        2.0 * (dims.s13_elems_per_expert + dims.s2_elems_per_expert);
  double active = shape->num_experts * (1.0 - pow(1.0 - (double)top_k / shape->num_experts, num_tokens));
  return active * expert_bytes + (double)num_tokens * shape->hidden * 2 * 2 + (double)num_tokens * top_k * 8;
}

double derive_route_us(const derive_device *device, int32_t top_k, int32_t num_tokens) {
  if (top_k < 1 || num_tokens < 1) return NAN;
  /* the route reads ids and weights and writes the work items (12 bytes a pair) */
  return device->launch_us + device->route_us + (double)num_tokens * top_k * 12.0 / (device->dram_gbps * 1e3);
}

double derive_reduce_us(const derive_device *device, const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens) {
  if (!in_domain(shape, top_k, num_tokens)) return NAN;
  double pairs = (double)num_tokens * top_k;
  double bytes = pairs * shape->hidden * 4.0 + (double)num_tokens * shape->hidden * 2.0 + pairs * 4.0;
  double round_trips = 2.0 * ceil(top_k / 8.0); /* a batch of eight ids, then their z rows */
  return device->launch_us + round_trips * device->round_trip_us + bytes / (device->dram_gbps * 1e3);
}

double derive_support_us(const derive_device *device, const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens,
                         int32_t fused_reduce, int32_t routed) {
  return (routed ? derive_route_us(device, top_k, num_tokens) : 0.0) +
         (fused_reduce ? 0.0 : derive_reduce_us(device, shape, top_k, num_tokens));
}

static volt8_status derive_begin(void *user, int32_t m) {
  derive_state *state = user;
  return derive_check_domain(state->ctx, &state->shape, state->top_k, m);
}
static void derive_end(void *state, int32_t m) {}

/* What a down that spills or does not fit costs: more than any forward, so it never wins while
 * another down can run. */
#define DERIVE_UNUSABLE_US 1e6

static int32_t known_ctas_per_sm(const derive_occupancy *occupancy, const char *name) {
  for (int32_t i = 0; occupancy && i < occupancy->count; i++)
    if (strcmp(occupancy->names[i], name) == 0) return occupancy->ctas_per_sm[i];
  return 0;
}

static volt8_status derive_measure(void *user, int32_t m, const char *gate_up, const char *down, int32_t batches,
                                   tuner_measurement *out) {
  derive_state *state = user;
  derive_variant variants[2];
  const char *names[2] = {gate_up, down};
  out->accepted = 1;
  out->forward_us = 0.0;
  for (int i = 0; i < 2 && out->accepted; i++) {
    out->accepted = derive_parse_variant(names[i], &variants[i]);
    variants[i].ctas_per_sm = known_ctas_per_sm(state->occupancy, names[i]);
    int unusable = variants[i].ctas_per_sm < 0;
    if (unusable && i == 0) {
      out->accepted = 0;
      snprintf(out->reason, sizeof out->reason, "%s spills or does not fit on an SM (its CUBIN's ptxas report)", names[i]);
      return VOLT8_OK;
    }
    /* The tuner ranks gate_up while holding the down the tables had (tuner.h): a down that has since
     * come to spill must not refuse every gate_up, so it is priced out instead of refused. */
    double us = out->accepted ? derive_op_us(state->device, &state->shape, state->top_k, m, &variants[i]) : NAN;
    if (unusable) us += DERIVE_UNUSABLE_US;
    out->accepted = isfinite(us);
    out->forward_us += us;
  }
  if (out->accepted)
    out->forward_us += derive_support_us(state->device, &state->shape, state->top_k, m, variants[1].fused_reduce,
                                         variants[0].block_m > 1 || variants[1].block_m > 1);
  if (!out->accepted) snprintf(out->reason, sizeof out->reason, "the model cannot read %s or %s", gate_up, down);
  return VOLT8_OK;
}

tuner_backend derive_backend(derive_state *state) {
  return (tuner_backend){state, 0, derive_begin, derive_measure, derive_end};
}

const derive_device *derive_device_find(const char *key) {
  static const struct {
    const char *key;
    const derive_device *device;
  } devices[] = {{"v100", &DERIVE_V100}, {"h200", &DERIVE_H200}};
  for (size_t i = 0; key && i < sizeof devices / sizeof devices[0]; i++)
    if (strcmp(key, devices[i].key) == 0) return devices[i].device;
  return NULL;
}
