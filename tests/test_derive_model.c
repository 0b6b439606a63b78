/* The derivation model's arithmetic on the H200's figures (tuning/derive_model.h), against values
 * worked out here from what each term means: bytes each expert and pair moves, CTAs, resident warps,
 * waves. The reference model's TP4 rank 1 (hidden 2560, intermediate 160 at offset 32, 512 experts,
 * top-10). No GPU. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* The model lives in tuning/, which a build without bench/ (the sanitized one) leaves out. */
#if !__has_include("derive_model.h")
Test(derive_h200, needs_the_tuner) { cr_skip_test("this build has no tuner (bench/ was not configured)"); }
#else
#include "derive_explain.h"
#include "derive_model.h"
#include "tune_run.h"

#define TOP_K 10
#define EXPERTS 512.0
#define HIDDEN 2560.0
#define INTERMEDIATE 160.0

static volt8_moe_shape reference_tp4_rank1(void) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.hidden = 2560;
  shape.intermediate = 160;
  shape.intermediate_offset = 32;
  shape.num_experts = 512;
  return shape;
}

static derive_variant parsed(const char *name) {
  derive_variant variant;
  cr_assert(derive_parse_variant(name, &variant), "%s does not parse", name);
  return variant;
}

static void assert_close(double actual, double expected, const char *what) {
  cr_assert(fabs(actual - expected) <= 1e-9 * fabs(expected) + 1e-12, "%s: the model gives %.12g, expected %.12g", what,
            actual, expected);
}

/* Rows [32, 192) touch scale rows 0 and 1 of the 128 grid; 2560 / 128 = 20 scale columns. */
static const double GATE_UP_EXPERT_BYTES = 2.0 * INTERMEDIATE * HIDDEN + 2.0 /* FP16 */ * 2 /* gate, up */ * 2 * 20;
static const double DOWN_EXPERT_BYTES = HIDDEN * INTERMEDIATE + 2.0 * 20 * 2;

/* The H200 with all but one term made free (its rates a million times and more above any use), so
 * that term alone shows in derive_op_us; l2_only's L2 moves 1 GB/s, so its us are kilobytes. */
static derive_device h200_memory_only(void) {
  derive_device device = DERIVE_H200;
  device.cuda_core_tflops = 1e12;
  device.conversions_per_ns = 1e15;
  device.l2_gbps = 1e12;
  return device;
}

static derive_device h200_math_only(void) {
  derive_device device = DERIVE_H200;
  device.dram_gbps = 1e12;
  device.l2_gbps = 1e12;
  return device;
}

static derive_device h200_l2_only(void) {
  derive_device device = h200_memory_only();
  device.dram_gbps = 1e12;
  device.l2_gbps = 1.0;
  return device;
}

/* M = 1: ten pairs land on ten experts, each read once, each a work item of one row. */
Test(derive_h200, gate_up_at_one_token_is_dram_bound_with_a_partial_fill) {
  volt8_moe_shape shape = reference_tp4_rank1();
  derive_variant variant = parsed("gate_up.cc.bm1.bn8.w4.sk1.l16");
  double ctas = 10 * (INTERMEDIATE / 8);
  double dram_bytes = 10 * GATE_UP_EXPERT_BYTES + 10 * (2 * HIDDEN + 2 * INTERMEDIATE); /* x in, h out */
  double l2_bytes = 10 * GATE_UP_EXPERT_BYTES + ctas * 1 * HIDDEN * 2;                  /* each CTA rereads x */
  double fill = ctas * 4 / (132.0 * 22);                                                /* 800 of 2904 warps */
  double memory_us = dram_bytes / 3825e3 / fill;
  cr_assert(l2_bytes / 8000e3 < memory_us, "the L2 term is not the larger here");
  double math_us = (2.0 * 10 * INTERMEDIATE * 2 * HIDDEN / 60e6 + 10 * INTERMEDIATE * 2 * HIDDEN / 11150e3) / fill;
  cr_assert(math_us < memory_us);
  double expected = 1.0 + memory_us + 0.15 * math_us;
  assert_close(derive_op_us(&DERIVE_H200, &shape, TOP_K, 1, &variant), expected, "gate_up M=1");
  cr_assert(expected > 9.0 && expected < 10.0, "hand value %g", expected);

  /* The DRAM term alone: math and L2 made free. */
  derive_device free_math = DERIVE_H200;
  free_math.cuda_core_tflops = 1e12;
  free_math.conversions_per_ns = 1e15;
  free_math.l2_gbps = 1e12;
  assert_close(derive_op_us(&free_math, &shape, TOP_K, 1, &variant) - 1.0, memory_us, "DRAM term");
  /* A slow L2 takes over the memory term. */
  derive_device slow_l2 = free_math;
  slow_l2.l2_gbps = 100.0;
  cr_assert(fabs(derive_op_us(&slow_l2, &shape, TOP_K, 1, &variant) - 1.0 - l2_bytes / 100e3) < 1e-6);
}

/* More warps per CTA: more of the saturating warps resident, the DRAM term shrinks in proportion. */
Test(derive_h200, fill_grows_with_resident_warps_until_dram_saturates) {
  volt8_moe_shape shape = reference_tp4_rank1();
  derive_device memory_only = h200_memory_only();
  derive_variant four = parsed("gate_up.cc.bm1.bn8.w4.sk1.l16");
  derive_variant eight = four;
  eight.warps = 8;
  double at_four = derive_op_us(&memory_only, &shape, TOP_K, 1, &four) - 1.0;
  double at_eight = derive_op_us(&memory_only, &shape, TOP_K, 1, &eight) - 1.0;
  assert_close(at_four / at_eight, 2.0, "1600 against 800 of 2904 saturating warps");
  derive_variant many = four;
  many.warps = 32; /* 6400 warps wanted, 2904 saturate */
  double dram_bytes = 10 * GATE_UP_EXPERT_BYTES + 10 * (2 * HIDDEN + 2 * INTERMEDIATE);
  assert_close(derive_op_us(&memory_only, &shape, TOP_K, 1, &many) - 1.0, dram_bytes / 3825e3, "full fill");
}

/* down at M = 16 with one row per item: 160 items of 40 column tiles = 6400 CTAs of 4 warps, 16 CTAs
 * per SM (64 warps), 2112 a wave: 3.03 waves run as 4. */
Test(derive_h200, down_at_sixteen_tokens_pays_the_last_partial_wave) {
  volt8_moe_shape shape = reference_tp4_rank1();
  derive_variant variant = parsed("down.cc.bm1.bn64.w4.sk1.l2");
  double pairs = 16 * TOP_K, ctas = pairs * (HIDDEN / 64);
  double waves = ctas / (132 * 16.0);
  cr_assert(waves > 3 && waves < 4);
  double tail = 4 / waves;
  double active = EXPERTS * (1 - pow(1 - TOP_K / EXPERTS, 16));
  double dram_bytes = active * DOWN_EXPERT_BYTES + pairs * (2 * INTERMEDIATE + 4 * HIDDEN); /* h in, z out FP32 */
  double l2_bytes = pairs * DOWN_EXPERT_BYTES + ctas * 1 * INTERMEDIATE * 2;
  double memory_us = fmax(dram_bytes / 3825e3, l2_bytes / 8000e3); /* fill 1 */
  double math_us = (2 * pairs * HIDDEN * INTERMEDIATE / 60e6 + pairs * HIDDEN * INTERMEDIATE / 11150e3) * tail;
  assert_close(derive_op_us(&DERIVE_H200, &shape, TOP_K, 16, &variant),
               1.0 + fmax(memory_us, math_us) + 0.15 * fmin(memory_us, math_us), "down M=16");
  derive_device math_only = h200_math_only();
  double us = derive_op_us(&math_only, &shape, TOP_K, 16, &variant) - 1.0;
  cr_assert(fabs(us - math_us) < 1e-6 * math_us, "math term with the tail: %.9g us, expected %.9g", us, math_us);
}

/* bm4 at M = 8: an expert's pairs p ~ Binomial(8, 10/512) make ceil(p / 4) items: one for 1..4 pairs,
 * two for 5..8, so items per expert = P(p >= 1) + P(p >= 5). */
Test(derive_h200, items_follow_the_binomial_split_by_block_m) {
  volt8_moe_shape shape = reference_tp4_rank1();
  derive_device l2_only = h200_l2_only();
  derive_variant variant = parsed("gate_up.cc.bm4.bn8.w4.sk1.l16");
  double q = TOP_K / EXPERTS, at_least_five = 0.0;
  double choose[9] = {1, 8, 28, 56, 70, 56, 28, 8, 1};
  for (int p = 5; p <= 8; p++) at_least_five += choose[p] * pow(q, p) * pow(1 - q, 8 - p);
  double items = EXPERTS * (1 - pow(1 - q, 8) + at_least_five);
  double l2_bytes = items * GATE_UP_EXPERT_BYTES + items * (INTERMEDIATE / 8) * 4 * HIDDEN * 2;
  double us = derive_op_us(&l2_only, &shape, TOP_K, 8, &variant) - 1.0;
  cr_assert(fabs(us - l2_bytes / 1e3) < 1e-6 * us, "L2 term %.9g us, expected %.9g", us, l2_bytes / 1e3);
}

/* E[ceil(p / bm)] for p ~ Binomial(m, q), each P(p) from lgamma on its own: a check of the model's
 * recurrence that shares none of its steps. */
static double binomial_items(int32_t m, double q, int32_t block_m) {
  double items = 0.0;
  for (int32_t p = 1; p <= m; p++) {
    double log_p = lgamma(m + 1.0) - lgamma(p + 1.0) - lgamma(m - p + 1.0) + p * log(q) + (m - p) * log1p(-q);
    items += exp(log_p) * ceil((double)p / block_m);
  }
  return items;
}

/* At M = 40000, top-10 of 512, P(p = 0) = (1 - q)^M is below the smallest double: the work must not
 * vanish with it (it did: items 0, fill 0, a time 100 times below M = 32768's). With bm1 an expert's
 * items are its expected pairs, M q; with bm4 the lgamma sum above. */
Test(derive_h200, large_token_counts_keep_their_work) {
  volt8_moe_shape shape = reference_tp4_rank1();
  derive_device l2_only = h200_l2_only();
  const int32_t m = 40000;
  double q = TOP_K / EXPERTS;
  cr_assert(pow(1 - q, m) == 0.0, "the case needs P(p = 0) to underflow");
  derive_variant one = parsed("gate_up.cc.bm1.bn8.w4.sk1.l16"), four = parsed("gate_up.cc.bm4.bn8.w4.sk1.l16");
  double items = EXPERTS * m * q;
  double l2_bytes = items * GATE_UP_EXPERT_BYTES + items * (INTERMEDIATE / 8) * 1 * HIDDEN * 2;
  double us = derive_op_us(&l2_only, &shape, TOP_K, m, &one) - 1.0;
  cr_assert(fabs(us - l2_bytes / 1e3) < 1e-9 * us, "bm1 L2 term %.12g us, expected %.12g", us, l2_bytes / 1e3);
  items = EXPERTS * binomial_items(m, q, 4);
  l2_bytes = items * GATE_UP_EXPERT_BYTES + items * (INTERMEDIATE / 8) * 4 * HIDDEN * 2;
  us = derive_op_us(&l2_only, &shape, TOP_K, m, &four) - 1.0;
  cr_assert(fabs(us - l2_bytes / 1e3) < 1e-9 * us, "bm4 L2 term %.12g us, expected %.12g", us, l2_bytes / 1e3);
  /* on the V100: full fill, and the time grows with M, by less than M does */
  derive_terms at_32768, at_40000;
  cr_assert(derive_op_terms(&DERIVE_V100, &shape, TOP_K, 32768, &four, &at_32768));
  cr_assert(derive_op_terms(&DERIVE_V100, &shape, TOP_K, m, &four, &at_40000));
  cr_assert(at_40000.fill == 1.0, "fill %g", at_40000.fill);
  cr_assert(at_40000.total_us > at_32768.total_us && at_40000.total_us < at_32768.total_us * 40000 / 32768,
            "M = 32768: %g us, M = 40000: %g us", at_32768.total_us, at_40000.total_us);
}

/* top_k = E: every expert takes every token (q = 1, where the recurrence's q / (1 - q) is infinite). */
Test(derive_h200, every_expert_routed_to) {
  volt8_moe_shape shape = reference_tp4_rank1();
  shape.num_experts = 8;
  derive_device l2_only = h200_l2_only();
  derive_variant four = parsed("gate_up.cc.bm4.bn8.w4.sk1.l16");
  for (int32_t m = 1; m <= 64; m *= 4) {
    double items = 8.0 * ceil(m / 4.0);
    double l2_bytes = items * GATE_UP_EXPERT_BYTES + items * (INTERMEDIATE / 8) * 4 * HIDDEN * 2;
    double us = derive_op_us(&l2_only, &shape, 8, m, &four) - 1.0;
    cr_assert(fabs(us - l2_bytes / 1e3) < 1e-9 * us, "M=%d: L2 term %.12g us, expected %.12g", m, us, l2_bytes / 1e3);
  }
}

/* Beside the GEMMs: the reduce is a launch, a chain of dependent round trips (ten ids read as a batch
 * of eight and one of two, each batch's z rows after its ids: four trips) and its bytes; the route,
 * run only when a GEMM has block_m > 1, a launch plus its measured one-CTA chain and 12 bytes a pair. */
Test(derive_h200, route_and_reduce) {
  volt8_moe_shape shape = reference_tp4_rank1();
  double pairs = 8 * TOP_K;
  double reduce_bytes = pairs * HIDDEN * 4 /* z */ + 8 * HIDDEN * 2 /* out */ + pairs * 4 /* ids */;
  double reduce = 1.0 + 4 * 1.3 + reduce_bytes / 3825e3;
  double route = 1.0 + 5.8 + pairs * 12 / 3825e3;
  assert_close(derive_support_us(&DERIVE_H200, &shape, TOP_K, 8, 0, 0), reduce, "reduce alone (no route)");
  assert_close(derive_support_us(&DERIVE_H200, &shape, TOP_K, 8, 0, 1), route + reduce, "route + reduce");
  assert_close(derive_support_us(&DERIVE_H200, &shape, TOP_K, 8, 1, 1), route, "route alone (tok down)");
  assert_close(derive_support_us(&DERIVE_H200, &shape, TOP_K, 8, 1, 0), 0.0, "nothing: no route, reduce fused");
  /* top-8: one batch of ids, two round trips */
  double top8 = 1.0 + 2 * 1.3 + (64.0 * HIDDEN * 4 + 8 * HIDDEN * 2 + 64.0 * 4) / 3825e3;
  assert_close(derive_support_us(&DERIVE_H200, &shape, 8, 8, 0, 0), top8, "top-8 reduce");
}

/* The forward's support follows the pair of variants: a block_m 2 gate_up brings the route in. */
Test(derive_h200, a_routed_gemm_pays_the_route) {
  derive_state state = {&DERIVE_H200, reference_tp4_rank1(), TOP_K, NULL, NULL};
  tuner_backend backend = derive_backend(&state);
  tuner_measurement plain, routed;
  cr_assert_eq(backend.measure(backend.state, 4, "gate_up.cc.bm1.bn8.w4.sk1.l16", "down.cc.bm1.bn32.w4.sk1.l4", 1, &plain),
               VOLT8_OK);
  cr_assert_eq(backend.measure(backend.state, 4, "gate_up.cc.bm2.bn8.w4.sk1.l16", "down.cc.bm1.bn32.w4.sk1.l4", 1, &routed),
               VOLT8_OK);
  cr_assert(plain.accepted && routed.accepted);
  derive_variant one = parsed("gate_up.cc.bm1.bn8.w4.sk1.l16"), two = parsed("gate_up.cc.bm2.bn8.w4.sk1.l16");
  volt8_moe_shape shape = reference_tp4_rank1();
  double gemm_difference = derive_op_us(&DERIVE_H200, &shape, TOP_K, 4, &two) - derive_op_us(&DERIVE_H200, &shape, TOP_K, 4, &one);
  assert_close(routed.forward_us - plain.forward_us - gemm_difference, 1.0 + 5.8 + 40 * 12 / 3825e3, "the route's cost");
}

/* A tok CTA stages all top_k h rows of its token: at M = 4, bn16, 4 * 160 CTAs each read 10 rows of
 * 160 FP16 values, besides the 40 pairs' expert weights. */
Test(derive_h200, tok_ctas_read_their_tokens_h_rows) {
  volt8_moe_shape shape = reference_tp4_rank1();
  derive_device l2_only = h200_l2_only();
  derive_variant variant = parsed("down.tok.bm1.bn16.w8.sk1.l2");
  double q = TOP_K / EXPERTS, items = EXPERTS * 4 * q; /* bm1: one item a pair, 40 expected */
  double l2_bytes = items * DOWN_EXPERT_BYTES + 4 * (HIDDEN / 16) * TOP_K * INTERMEDIATE * 2;
  double us = derive_op_us(&l2_only, &shape, TOP_K, 4, &variant) - 1.0;
  cr_assert(fabs(us - l2_bytes / 1e3) < 1e-6 * us, "L2 term %.9g us, expected %.9g", us, l2_bytes / 1e3);
}

/* Past eight waves the last partial one still runs whole: time never falls as CTAs grow. M = 64, bn64:
 * 640 pairs x 40 tiles = 25600 CTAs at 2112 a wave = 12.12 waves, run as 13. */
Test(derive_h200, the_tail_applies_at_any_number_of_waves) {
  volt8_moe_shape shape = reference_tp4_rank1();
  derive_device math_only = h200_math_only();
  derive_variant variant = parsed("down.cc.bm1.bn64.w4.sk1.l2");
  double ctas = 64.0 * TOP_K * (HIDDEN / 64), waves = ctas / (132 * 16.0);
  cr_assert(waves > 12 && waves < 13);
  /* items: bm1 gives one a pair, 640 */
  double math_us = (2 * 640.0 * HIDDEN * INTERMEDIATE / 60e6 + 640.0 * HIDDEN * INTERMEDIATE / 11150e3) * 13 / waves;
  double us = derive_op_us(&math_only, &shape, TOP_K, 64, &variant) - 1.0;
  cr_assert(fabs(us - math_us) < 1e-6 * math_us, "math term %.9g us, expected %.9g", us, math_us);
  for (int32_t m = 16; m < 128; m++) {
    double now = derive_op_us(&math_only, &shape, TOP_K, m, &variant);
    double next = derive_op_us(&math_only, &shape, TOP_K, m + 1, &variant);
    cr_assert(next >= now - 1e-9, "M=%d: %g us, M=%d: %g us", m, now, m + 1, next);
  }
}

/* The same op on both devices: with fill 1 on both and DRAM bound on both, the bandwidth ratio
 * (3825 / 830) divides the DRAM term; the launch differs by its own figures (1.0 against 1.5 us). */
Test(derive_h200, v100_and_h200_differ_as_their_figures_say) {
  volt8_moe_shape shape = reference_tp4_rank1();
  derive_variant variant = parsed("down.cc.bm1.bn64.w4.sk1.l2");
  derive_device devices[2] = {DERIVE_V100, DERIVE_H200};
  double dram_us[2];
  for (int i = 0; i < 2; i++) {
    devices[i].cuda_core_tflops = 1e12;
    devices[i].conversions_per_ns = 1e15;
    devices[i].l2_gbps = 1e12;
    dram_us[i] = derive_op_us(&devices[i], &shape, TOP_K, 16, &variant) - devices[i].launch_us;
  }
  assert_close(dram_us[0] / dram_us[1], 3825.0 / 830.0, "V100 / H200 DRAM term");
  cr_assert_eq(DERIVE_V100.launch_us, 1.5);
  cr_assert_eq(DERIVE_H200.launch_us, 1.0);
  /* unmodified: the H200 is faster at every M, by less than the bandwidth ratio (launches) */
  for (int32_t m = 1; m <= 16; m *= 2) {
    double v100 = derive_op_us(&DERIVE_V100, &shape, TOP_K, m, &variant);
    double h200 = derive_op_us(&DERIVE_H200, &shape, TOP_K, m, &variant);
    cr_assert(h200 < v100 && v100 / h200 < 3825.0 / 830.0 + 1e-9, "M=%d: V100 %g us, H200 %g us", m, v100, h200);
  }
}

Test(derive_h200, devices_by_name) {
  cr_assert_eq(derive_device_find("v100"), &DERIVE_V100);
  cr_assert_eq(derive_device_find("h200"), &DERIVE_H200);
  cr_assert_null(derive_device_find("H200"));
  cr_assert_null(derive_device_find("a100"));
  cr_assert_null(derive_device_find(NULL));
  cr_assert_eq(DERIVE_H200.sm_count, 132);
  cr_assert_eq(DERIVE_H200.dram_gbps, 3825.0);
}

/* `volt8 tune --derive sm_70 --model-device h200`: tables under their own device name, never into
 * the shipped folder. */
Test(derive_h200, tune_option_and_its_tables) {
  tune_options options;
  char error[1024], dir[4096];
  char *refused[][6] = {{"tune", "--derive", "sm_70", "--model-device", "h200", NULL},
                        {"tune", "--model-device", "h200", "--out", "/tmp", NULL},
                        {"tune", "--derive", "sm_70", "--model-device", "a100", NULL}};
  const char *why[] = {"never shipped", "needs --derive sm_70", "--model-device \"a100\" is not a modelled device (v100, h200)"};
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(tune_options_parse(5, refused[i], &options, error, sizeof error), -1, "case %d", i);
    cr_assert_not_null(strstr(error, why[i]), "case %d: %s", i, error);
  }
  test_make_temp_dir(dir, sizeof dir, "volt8_derive_h200");
  char *argv[] = {"tune", "--derive", "sm_70", "--model-device", "h200", "--m", "1", "--out", dir};
  cr_assert_eq(tune_options_parse(9, argv, &options, error, sizeof error), 0, "%s", error);
  tune_outcome outcome;
  cr_assert_eq(tune_run(&options, "volt8 tune --derive sm_70 --model-device h200", NULL, 0, &outcome, error, sizeof error),
               VOLT8_OK, "%s", error);
  char path[8192];
  snprintf(path, sizeof path, "%s/op=down,N=2560,K=160,block=128x128,arch=sm_70,device=modelled_H200.json", dir);
  size_t bytes = 0;
  char *text = test_read_whole(path, &bytes);
  cr_assert_not_null(text, "%s was not written", path);
  cr_assert_not_null(strstr(text, "not for shipping"), "%s", text);
  free(text);
  test_remove_tree(dir);
}

/* A tok CTA's lanes: down.tok.bm1.bn16.w8.l2 has 8 * 32 / 2 = 128 lane groups, 8 slots of 16 columns;
 * a pass stages 16 pairs (48 KiB / (160 * 4 + 16 * 4 + 8) = 69, capped at 16, a multiple of 8), so
 * with top-10 the slots walk 16 pair places of which 10 hold a pair: the warps count 10/16. At M = 1:
 * 160 CTAs of 8 warps, all resident, 1280 * 10/16 = 800 of the 2904 that saturate DRAM. */
Test(derive_h200, tok_lanes_without_a_pair_add_no_fill) {
  volt8_moe_shape shape = reference_tp4_rank1();
  derive_device memory_only = h200_memory_only();
  derive_variant variant = parsed("down.tok.bm1.bn16.w8.sk1.l2");
  cr_assert_eq(variant.lanes, 2);
  double dram_bytes = 10 * DOWN_EXPERT_BYTES + 10 * (2 * INTERMEDIATE + 2 * HIDDEN / TOP_K); /* h in, out share */
  double fill = 160 * 8 * (10.0 / 16) / (132.0 * 22);
  assert_close(derive_op_us(&memory_only, &shape, TOP_K, 1, &variant) - 1.0, dram_bytes / 3825e3 / fill, "tok M=1");
  /* top-8: 8 of the 16 places */
  double dram_top8 = 8 * DOWN_EXPERT_BYTES + 8 * (2 * INTERMEDIATE + 2 * HIDDEN / 8);
  double fill_top8 = 160 * 8 * 0.5 / (132.0 * 22);
  assert_close(derive_op_us(&memory_only, &shape, 8, 1, &variant) - 1.0, dram_top8 / 3825e3 / fill_top8, "tok M=1 top-8");
  /* a cc down has no slots: all its warps count (10 pairs x 80 tiles of bn32, 4 warps each) */
  derive_variant cc = parsed("down.cc.bm1.bn32.w4.sk1.l4");
  cr_assert_eq(cc.lanes, 4);
  double cc_bytes = 10 * DOWN_EXPERT_BYTES + 10 * (2 * INTERMEDIATE + 4 * HIDDEN);
  double cc_fill = fmin(1.0, 10 * 80 * 4 / (132.0 * 22));
  assert_close(derive_op_us(&memory_only, &shape, TOP_K, 1, &cc) - 1.0, cc_bytes / 3825e3 / cc_fill, "cc M=1");
}

/* The byte floor's bytes, as bench counts them: at M = 1 the ten routed experts' gate_up and down
 * weights and scales, x in and out out (2560 FP16 each), ten ids and ten weights (4 bytes each). */
Test(derive_explain, forward_bytes_are_the_byte_floors) {
  volt8_moe_shape shape = reference_tp4_rank1();
  double expert = GATE_UP_EXPERT_BYTES + DOWN_EXPERT_BYTES;
  assert_close(derive_forward_bytes(&shape, TOP_K, 1), 10 * expert + 2 * HIDDEN * 2 + 10 * 8, "M=1");
  cr_assert(fabs(derive_forward_bytes(&shape, TOP_K, 1) / 830e3 - 14.82) < 0.01, "V100 floor at M=1");
  double active = EXPERTS * (1 - pow(1 - TOP_K / EXPERTS, 64)); /* an expert idle when all 64 tokens pass it by */
  assert_close(derive_forward_bytes(&shape, TOP_K, 64), active * expert + 64 * HIDDEN * 4 + 640 * 8, "M=64");
}

/* A forward's account: the two GEMMs, the route only with a block_m > 1 GEMM, the reduce only
 * without a tok down, and the floor at the device's bandwidth. */
Test(derive_explain, a_forward_adds_what_it_runs) {
  volt8_moe_shape shape = reference_tp4_rank1();
  const char *gate_up = "gate_up.cc.bm1.bn8.w4.sk1.l16", *routed = "gate_up.cc.bm2.bn8.w4.sk1.l16";
  const char *down = "down.cc.bm1.bn32.w4.sk1.l4", *tok = "down.tok.bm1.bn16.w8.sk1.l2";
  derive_variant g = parsed(gate_up), r = parsed(routed), d = parsed(down), t = parsed(tok);
  double g_us = derive_op_us(&DERIVE_V100, &shape, TOP_K, 4, &g), r_us = derive_op_us(&DERIVE_V100, &shape, TOP_K, 4, &r);
  double d_us = derive_op_us(&DERIVE_V100, &shape, TOP_K, 4, &d), t_us = derive_op_us(&DERIVE_V100, &shape, TOP_K, 4, &t);
  double route = 1.5 + 5.8 + 40 * 12 / 830e3;
  double reduce = 1.5 + 4 * 1.3 + (40 * HIDDEN * 4 + 4 * HIDDEN * 2 + 40 * 4) / 830e3;
  derive_forward forward;
  cr_assert(derive_forward_explain(&DERIVE_V100, &shape, TOP_K, 4, gate_up, down, NULL, &forward));
  assert_close(forward.total_us, g_us + d_us + reduce, "no route");
  cr_assert_eq(forward.route_us, 0.0);
  cr_assert_eq(forward.kernels, 3);
  assert_close(forward.floor_us, derive_forward_bytes(&shape, TOP_K, 4) / 830e3, "floor");
  cr_assert(derive_forward_explain(&DERIVE_V100, &shape, TOP_K, 4, routed, down, NULL, &forward));
  assert_close(forward.total_us, r_us + d_us + route + reduce, "routed");
  cr_assert_eq(forward.kernels, 4);
  cr_assert(derive_forward_explain(&DERIVE_V100, &shape, TOP_K, 4, gate_up, tok, NULL, &forward));
  assert_close(forward.total_us, g_us + t_us, "tok: two kernels");
  cr_assert_eq(forward.kernels, 2);
  cr_assert_not(derive_forward_explain(&DERIVE_V100, &shape, TOP_K, 4, "route", tok, NULL, &forward));
}


/* Outside its domain the model refuses and computes nothing: top_k above the shape's experts (before,
 * q = top_k / E > 1 gave pow(1 - q, M) of a negative base and times below zero), no token, or a rank
 * of expert parallelism, which the model does not describe. */
Test(derive_domain, outside_it_the_model_refuses) {
  volt8_moe_shape eight = reference_tp4_rank1();
  eight.num_experts = 8;
  volt8_moe_shape ep_rank = reference_tp4_rank1();
  ep_rank.global_experts = 1024;
  ep_rank.expert_start = 512;
  derive_variant variant = parsed("gate_up.cc.bm4.bn8.w4.sk1.l16");
  derive_terms terms;
  const struct {
    const volt8_moe_shape *shape;
    int32_t top_k, m;
    const char *why;
  } cases[] = {{&eight, 16, 4, "top_k 16 is outside 1..8"},  {&eight, 9, 1, "top_k 9 is outside 1..8"},
               {&eight, 0, 1, "top_k 0 is outside 1..8"},    {&eight, 8, 0, "num_tokens 0 is below 1"},
               {&ep_rank, 10, 4, "experts [512, 1024) of 1024"}};
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const volt8_moe_shape *shape = cases[i].shape;
    int32_t top_k = cases[i].top_k, m = cases[i].m;
    cr_assert_eq(derive_check_domain(ctx, shape, top_k, m), VOLT8_ERR_INVALID_ARGUMENT, "case %zu", i);
    cr_assert_not_null(strstr(volt8_last_error(ctx), cases[i].why), "case %zu: %s", i, volt8_last_error(ctx));
    cr_assert_not(derive_op_terms(&DERIVE_V100, shape, top_k, m, &variant, &terms), "case %zu", i);
    cr_assert(isnan(derive_op_us(&DERIVE_V100, shape, top_k, m, &variant)), "case %zu", i);
    cr_assert(isnan(derive_forward_bytes(shape, top_k, m)), "case %zu", i);
    cr_assert(isnan(derive_reduce_us(&DERIVE_V100, shape, top_k, m)), "case %zu", i);
    derive_forward forward;
    cr_assert_not(derive_forward_explain(&DERIVE_V100, shape, top_k, m, "gate_up.cc.bm1.bn8.w4.sk1.l16",
                                         "down.cc.bm1.bn32.w4.sk1.l4", NULL, &forward), "case %zu", i);
    /* the tuner's backend refuses the token count before anything is ranked */
    derive_state state = {&DERIVE_V100, *shape, top_k, NULL, ctx};
    tuner_backend backend = derive_backend(&state);
    cr_assert_eq(backend.begin_m(backend.state, m), VOLT8_ERR_INVALID_ARGUMENT, "case %zu", i);
    cr_assert_not_null(strstr(volt8_last_error(ctx), cases[i].why), "case %zu: %s", i, volt8_last_error(ctx));
    /* the explanation writes nothing */
    char *text = NULL;
    size_t bytes = 0;
    FILE *stream = open_memstream(&text, &bytes);
    cr_assert_eq(derive_explain_markdown(ctx, &DERIVE_V100, shape, top_k, &m, 1, NULL, stream),
                 VOLT8_ERR_INVALID_ARGUMENT, "case %zu", i);
    fclose(stream);
    cr_assert_eq(bytes, 0, "case %zu: %s", i, text);
    free(text);
  }
  cr_assert(isnan(derive_route_us(&DERIVE_V100, 0, 4)));
  cr_assert(isnan(derive_route_us(&DERIVE_V100, 8, 0)));
  /* inside: top_k of all 8 experts, and the whole model as an expert-parallel rank of one */
  cr_assert_eq(derive_check_domain(ctx, &eight, 8, 1), VOLT8_OK, "%s", volt8_last_error(ctx));
  ep_rank.expert_start = 0;
  ep_rank.global_experts = 512;
  cr_assert_eq(derive_check_domain(ctx, &ep_rank, 10, 1), VOLT8_OK, "%s", volt8_last_error(ctx));
  volt8_ctx_destroy(ctx);
}

/* `volt8 tune --derive sm_70` with a top-k of more experts than the shape has: exit 2 naming --top-k,
 * and the model's own check stops a run given such options before any CUBIN or table. */
Test(derive_domain, tune_refuses_before_compiling_or_writing) {
  char dir[4096], out[4096], err[4096];
  test_make_temp_dir(dir, sizeof dir, "volt8_derive_domain");
  char *args[] = {"tune", "--derive", "sm_70", "--shape", "num_experts=8", "--top-k", "16", "--out", dir, NULL};
  cr_assert_eq(test_run_volt8(args, out, sizeof out, err, sizeof err), 2, "%s", err);
  cr_assert_not_null(strstr(err, "--top-k 16 is more than the 8 experts of shape 1"), "%s", err);
  char *by_default[] = {"tune", "--derive", "sm_70", "--shape", "num_experts=8", "--out", dir, NULL};
  cr_assert_eq(test_run_volt8(by_default, out, sizeof out, err, sizeof err), 2, "%s", err);
  cr_assert_not_null(strstr(err, "--top-k 10 (the default) is more than the 8 experts"), "%s", err);

  tune_options options;
  char error[1024];
  char *argv[] = {"tune", "--derive", "sm_70", "--m", "1,8", "--out", dir};
  cr_assert_eq(tune_options_parse(7, argv, &options, error, sizeof error), 0, "%s", error);
  tune_outcome outcome;
  tune_options too_many = options;
  too_many.top_k = 600;
  cr_assert_eq(tune_run(&too_many, "volt8 tune", NULL, 0, &outcome, error, sizeof error), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(error, "top_k 600 is outside 1..512"), "%s", error);
  tune_options ep_rank = options;
  ep_rank.shapes[0].global_experts = 2048;
  cr_assert_eq(tune_run(&ep_rank, "volt8 tune", NULL, 0, &outcome, error, sizeof error), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(error, "expert parallelism"), "%s", error);
  DIR *folder = opendir(dir);
  cr_assert_not_null(folder);
  int files = 0;
  for (struct dirent *entry; (entry = readdir(folder));) files += entry->d_name[0] != '.';
  closedir(folder);
  cr_assert_eq(files, 0, "a refused run wrote into %s", dir);
  test_remove_tree(dir);
}

#endif
