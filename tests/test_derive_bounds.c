/* The derivation model's bounds on a V100 (tuning/derive_model.h): the tile family's three (bytes,
 * m8n8k4 issue at the tensor peak, dequantization per converted weight), the bound each kernel names,
 * and the shipped sm_70 tables as the model ranks them. No GPU, no CUBIN. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

#if !__has_include("derive_model.h")
Test(derive_bounds, needs_the_tuner) { cr_skip_test("this build has no tuner (bench/ was not configured)"); }
#else
#include "derive_explain.h"
#include "derive_model.h"

/* DeepSeek-V3 at TP8, rank 0 (`volt8 models --tp 8`): hidden 7168, intermediate 256, 256 experts, top-8. */
static volt8_moe_shape deepseek_tp8(void) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.hidden = 7168;
  shape.intermediate = 256;
  shape.num_experts = 256;
  shape.intermediate_offset = 0;
  return shape;
}

/* A variant at the two CTAs an SM its .o2 asks for (its CUBIN's figure on sm_70). */
static derive_variant tile(const char *name) {
  derive_variant variant;
  cr_assert(derive_parse_variant(name, &variant), "%s does not parse", name);
  cr_assert_eq(variant.kind, VOLT8_KIND_GEMM_TILE, "%s", name);
  variant.ctas_per_sm = 2;
  return variant;
}

static derive_terms terms_at(const volt8_moe_shape *shape, int32_t top_k, int32_t m, const derive_variant *variant) {
  derive_terms terms;
  cr_assert(derive_op_terms(&DERIVE_V100, shape, top_k, m, variant, &terms), "M=%d", m);
  return terms;
}

static void assert_close(double actual, double expected, const char *what) {
  cr_assert(fabs(actual - expected) <= 1e-9 * fabs(expected), "%s: the model gives %.12g, expected %.12g", what, actual,
            expected);
}

/* The tile family's rate is the data sheet's tensor peak: 0.5 m8n8k4 (1024 FMAs each) an SM a clock
 * over 80 SMs at 1.53 GHz is 125 TFLOP/s; its conversions, 45 instructions a 16-code chunk. */
Test(derive_bounds, the_m8n8k4_rate_is_the_tensor_peak) {
  double tflops = 2.0 * 1024 * DERIVE_V100.m8n8k4_per_sm_clock * DERIVE_V100.sm_count * DERIVE_V100.clock_ghz / 1e3;
  cr_assert(fabs(tflops - 125.0) < 0.01 * 125.0, "%.2f TFLOP/s", tflops);
  cr_assert_eq(DERIVE_TILE_DEQUANT_INSTRUCTIONS, 45.0 / 16.0);
  /* the other families' conversion rate is the same 64 lanes an SM at three instructions a weight */
  cr_assert(fabs(DERIVE_V100.lanes_per_sm * DERIVE_V100.sm_count * DERIVE_V100.clock_ghz / 3.0 -
                 DERIVE_V100.conversions_per_ns) < 0.01 * DERIVE_V100.conversions_per_ns);
}

/* Every expert takes every token (top_k = E), so each has ceil(M / bm) items: the reference TP4 rank 1
 * (hidden 2560, intermediate 160 at offset 32, 512 experts) at M = 256, gate_up bm64 bn64 w8: 4 items of
 * 3 column tiles an expert (160 columns padded to 192), 6144 CTAs of 128 weight rows over 80 steps of 32
 * codes. Two CTAs an SM, 160 a wave: 38.4 waves run as 39, all 640 saturating warps resident. */
Test(derive_bounds, tile_terms_by_hand) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  double expert_bytes = 2.0 * 160 * 2560 + 2.0 * 2 * 2 * 20; /* E4M3 gate and up, their FP16 scales */
  double dram_us = (512 * expert_bytes + 256.0 * 512 * (2560 * 2 + 160 * 2)) / 830e3;
  double issue_us[2], dequant_us[2];
  const char *names[2] = {"gate_up.tile.bm64.bn64.w8.sk1.o2", "gate_up.tile.bm128.bn64.w8.sk1.o2"};
  for (int i = 0; i < 2; i++) {
    int block_m = 64 << i;
    double items = 512.0 * (256 / block_m), ctas = items * 3, steps = 80, weight_rows = 128;
    double waves = ctas / 160, tail = ceil(waves) / waves;
    double m8n8k4 = ctas * steps * block_m * weight_rows / 32; /* 32 FMAs a weight row and pair a step, 1024 each */
    issue_us[i] = m8n8k4 / (0.5 * 80 * 1530.0) * tail;
    dequant_us[i] = ctas * weight_rows * steps * 32 * (45.0 / 16) / (64 * 80 * 1530.0) * tail;
    double l2_us = (items * expert_bytes + ctas * block_m * 2560 * 2) / 2500e3;
    derive_variant variant = tile(names[i]);
    derive_terms terms = terms_at(&shape, 512, 256, &variant);
    assert_close(terms.fill, 1.0, "fill");
    assert_close(terms.issue_us, issue_us[i], "m8n8k4 term");
    assert_close(terms.dequant_us, dequant_us[i], "dequant term");
    assert_close(terms.dram_us, dram_us, "DRAM term");
    assert_close(terms.l2_us, l2_us, "L2 term");
    double memory_us = fmax(dram_us, l2_us);
    double largest = fmax(memory_us, fmax(issue_us[i], dequant_us[i]));
    assert_close(terms.total_us, 1.5 + largest + 0.15 * (memory_us + issue_us[i] + dequant_us[i] - largest), "op time");
    cr_assert(issue_us[i] > dequant_us[i] && issue_us[i] > memory_us, "%s: issue %g, dequant %g, memory %g us", names[i],
              issue_us[i], dequant_us[i], memory_us);
    cr_assert_str_eq(derive_terms_limit(&terms), "m8n8k4 issue");
  }
  /* a weight tile's conversions are shared by the item's pairs: twice the pairs an item, half the
   * conversions (19.2 waves run as 20 against 38.4 as 39); the products are the same */
  assert_close(dequant_us[1] / dequant_us[0], (20 / 19.2) / (39 / 38.4) / 2, "bm128 against bm64 dequant");
  assert_close(issue_us[1] / issue_us[0], (20 / 19.2) / (39 / 38.4), "bm128 against bm64 m8n8k4");
}

/* DeepSeek-V3 TP8 at M = 16384 (131072 pairs, 512 an expert): the products of the gate_up tiles of 64
 * columns (the dispatch's) outlast their bytes, at bm64 and bm128. (Those of 32 columns read each
 * pair's x row from L2 eight times, and L2 binds them.) */
Test(derive_bounds, deepseek_tp8_gate_up_at_16384_is_issue_bound) {
  volt8_moe_shape shape = deepseek_tp8();
  const char *names[] = {"gate_up.tile.bm64.bn64.w8.sk1.o2", "gate_up.tile.bm128.bn64.w8.sk1.o2"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    derive_variant variant = tile(names[i]);
    derive_terms terms = terms_at(&shape, 8, 16384, &variant);
    const char *limit = derive_terms_limit(&terms);
    cr_assert(strcmp(limit, "m8n8k4 issue") == 0 || strcmp(limit, "dequant") == 0, "%s: %s", names[i], limit);
    cr_assert(terms.math_us > fmax(terms.dram_us, terms.l2_us), "%s: math %g us, memory %g us", names[i],
              terms.math_us, fmax(terms.dram_us, terms.l2_us));
    cr_assert(terms.total_us > terms.launch_us + terms.issue_us, "%s", names[i]);
  }
  derive_variant narrow = tile("gate_up.tile.bm64.bn32.w4.sk1.o2");
  derive_terms terms = terms_at(&shape, 8, 16384, &narrow);
  cr_assert_str_eq(derive_terms_limit(&terms), "L2");
}

/* DeepSeek-V3 TP8 at M = 256 (8 pairs an expert): every expert's weights stream once either way, but
 * an item of 128 rows runs twice the products of one of 64, nearly all of them on pad rows. bm64 is
 * bound by the bytes, bm128 by m8n8k4 issue. */
Test(derive_bounds, the_bound_switches_with_block_m) {
  volt8_moe_shape shape = deepseek_tp8();
  derive_variant narrow = tile("gate_up.tile.bm64.bn64.w8.sk1.o2"), wide = tile("gate_up.tile.bm128.bn64.w8.sk1.o2");
  derive_terms at_64 = terms_at(&shape, 8, 256, &narrow), at_128 = terms_at(&shape, 8, 256, &wide);
  cr_assert_str_eq(derive_terms_limit(&at_64), "DRAM", "issue %g, dram %g, l2 %g us", at_64.issue_us, at_64.dram_us,
                   at_64.l2_us);
  cr_assert_str_eq(derive_terms_limit(&at_128), "m8n8k4 issue", "issue %g, dram %g us", at_128.issue_us,
                   at_128.dram_us);
  assert_close(at_128.dram_us, at_64.dram_us, "the same bytes from DRAM");
  cr_assert(at_128.issue_us > 1.9 * at_64.issue_us, "%g against %g us", at_128.issue_us, at_64.issue_us);
  cr_assert(at_128.total_us > at_64.total_us);
}

/* Past the token counts where every SM has warps enough (fill 1), more tokens never take less time:
 * more items and CTAs, more bytes, and the tail's whole waves. Every tile variant of each model's TP8
 * rank, M = 256..16384 in steps of 128. */
Test(derive_bounds, tile_time_grows_with_the_token_count) {
  static const struct {
    int32_t hidden, intermediate, experts, top_k;
  } models[] = {{7168, 256, 256, 8}, {2048, 64, 512, 10}, {5120, 192, 160, 8}, {4096, 176, 128, 8}, {2560, 80, 512, 10}};
  const char *names[] = {"gate_up.tile.bm64.bn32.w4.sk1.o2", "gate_up.tile.bm128.bn64.w8.sk1.o2",
                         "down.tile.bm64.bn64.w4.sk1.o2", "down.tile.bm128.bn128.w8.sk1.o2"};
  for (size_t s = 0; s < sizeof models / sizeof models[0]; s++) {
    volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
    shape.hidden = models[s].hidden;
    shape.intermediate = models[s].intermediate;
    shape.num_experts = models[s].experts;
    shape.intermediate_offset = 0;
    for (size_t v = 0; v < sizeof names / sizeof names[0]; v++) {
      derive_variant variant = tile(names[v]);
      double before = 0.0;
      for (int32_t m = 256; m <= 16384; m += 128) {
        derive_terms terms = terms_at(&shape, models[s].top_k, m, &variant);
        cr_assert(terms.total_us >= before, "H%d %s: %.3f us at M=%d after %.3f us", shape.hidden, names[v],
                  terms.total_us, m, before);
        before = terms.total_us;
      }
    }
  }
}

/* The bound each op names: the larger part of math where math outlasts memory. */
Test(derive_bounds, what_limits_an_op) {
  derive_terms launch = {.launch_us = 1.0, .dram_us = 0.5, .l2_us = 0.2, .math_us = 0.1, .fill = 0.3};
  derive_terms latency = {.launch_us = 1.0, .dram_us = 5.0, .l2_us = 2.0, .math_us = 1.0, .fill = 0.5};
  derive_terms tensor = {.launch_us = 1.0, .dram_us = 5.0, .l2_us = 2.0, .math_us = 6.0, .issue_us = 4.0,
                         .dequant_us = 2.0, .tensor = 1, .fill = 1.0};
  derive_terms fp32 = tensor, dequant = tensor;
  fp32.tensor = 0;
  dequant.issue_us = 1.0, dequant.dequant_us = 5.0;
  derive_terms l2 = {.launch_us = 1.0, .dram_us = 5.0, .l2_us = 7.0, .math_us = 1.0, .fill = 1.0};
  derive_terms dram = {.launch_us = 1.0, .dram_us = 5.0, .l2_us = 2.0, .math_us = 1.0, .fill = 1.0};
  cr_assert_str_eq(derive_terms_limit(&launch), "launch");
  cr_assert_str_eq(derive_terms_limit(&latency), "latency");
  cr_assert_str_eq(derive_terms_limit(&tensor), "m8n8k4 issue");
  cr_assert_str_eq(derive_terms_limit(&fp32), "FP32 issue");
  cr_assert_str_eq(derive_terms_limit(&dequant), "dequant");
  cr_assert_str_eq(derive_terms_limit(&l2), "L2");
  cr_assert_str_eq(derive_terms_limit(&dram), "DRAM");
}

/* The cc, tok and mma families keep math as the sum of their two parts; the parts name the bound. */
Test(derive_bounds, the_other_families_split_their_math) {
  volt8_moe_shape shape = deepseek_tp8();
  const char *names[] = {"gate_up.cc.bm1.bn8.w4.sk1.l16", "down.tok.bm1.bn16.w8.sk1.l2", "gate_up.mma.bm8.bn32.w8.sk2",
                         "down.mma.bm32.bn32.w4.sk1"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    derive_variant variant;
    cr_assert(derive_parse_variant(names[i], &variant), "%s", names[i]);
    derive_terms terms = terms_at(&shape, 8, 1024, &variant);
    assert_close(terms.issue_us + terms.dequant_us, terms.math_us, names[i]);
    cr_assert_eq(terms.tensor, !variant.cuda_core, "%s", names[i]);
  }
}

/* `volt8 list --explain --json`'s account: the dispatch's sm_70 pair at M = 16384 on DeepSeek-V3 TP8 is
 * the tile family's (no table reaches that far), its gate_up named m8n8k4-bound. */
Test(derive_bounds, the_account_names_the_bounds) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  volt8_moe_shape shape = deepseek_tp8();
  int32_t m[] = {16384};
  char *text = NULL;
  size_t size = 0;
  FILE *stream = open_memstream(&text, &size);
  cr_assert_eq(derive_explain_json(ctx, &DERIVE_V100, &shape, 8, m, 1, NULL, stream), VOLT8_OK, "%s",
               volt8_last_error(ctx));
  fclose(stream);
  cJSON *account = cJSON_Parse(text);
  cr_assert_not_null(account, "not JSON: %s", text);
  cJSON *forward = cJSON_GetArrayItem(cJSON_GetObjectItem(account, "forwards"), 0);
  cJSON *gate_up = cJSON_GetObjectItem(forward, "gate_up");
  cr_assert_eq(cJSON_GetObjectItem(forward, "m")->valueint, 16384);
  cr_assert_not_null(strstr(cJSON_GetObjectItem(gate_up, "variant")->valuestring, ".tile."), "%s", text);
  cr_assert_str_eq(cJSON_GetObjectItem(gate_up, "limited_by")->valuestring, "m8n8k4 issue");
  cr_assert(cJSON_GetObjectItem(gate_up, "issue_us")->valuedouble > cJSON_GetObjectItem(gate_up, "dram_us")->valuedouble);
  cJSON_Delete(account);
  free(text);

  stream = open_memstream(&text, &size);
  cr_assert_eq(derive_explain_markdown(ctx, &DERIVE_V100, &shape, 8, m, 1, NULL, stream), VOLT8_OK);
  fclose(stream);
  cr_assert_not_null(strstr(text, "| m8n8k4 issue |"), "%s", text);
  free(text);
  /* outside the model's domain nothing is written */
  stream = open_memstream(&text, &size);
  cr_assert_eq(derive_explain_json(ctx, &DERIVE_V100, &shape, 300, m, 1, NULL, stream), VOLT8_ERR_INVALID_ARGUMENT);
  fclose(stream);
  cr_assert_eq(size, 0, "%s", text);
  free(text);
  volt8_ctx_destroy(ctx);
}

static cJSON *read_table(const char *path) {
  size_t bytes = 0;
  char *text = test_read_whole(path, &bytes);
  cJSON *table = cJSON_Parse(text);
  free(text);
  cr_assert_not_null(table, "%s is not JSON", path);
  return table;
}

/* The resident CTAs a table's derivation took, of both ops' variants. */
typedef struct recorded_occupancy {
  char *names[256];
  int32_t ctas_per_sm[256];
  int32_t count;
} recorded_occupancy;

static void add_recorded(recorded_occupancy *recorded, const cJSON *table) {
  const cJSON *figures = cJSON_GetObjectItem(cJSON_GetObjectItem(table, "__metadata__"), "ctas_per_sm");
  const cJSON *figure;
  cJSON_ArrayForEach(figure, figures) {
    cr_assert_lt(recorded->count, 256);
    recorded->names[recorded->count] = figure->string;
    recorded->ctas_per_sm[recorded->count++] = figure->valueint;
  }
}

/* Every entry of one shape's pair of sm_70 tables: each candidate the derivation ranked (the variants
 * of __metadata__.ctas_per_sm), the other op held at the entry's paired_with, gives the entry's pick as
 * the first fastest and its model_us to the table's two decimals. Returns the entries checked. */
static int check_shape_tables(const char *dir, const char *gate_up_file) {
  char paths[2][4096];
  snprintf(paths[0], sizeof paths[0], "%s/%s", dir, gate_up_file);
  cJSON *tables[2] = {read_table(paths[0]), NULL};
  const cJSON *metadata = cJSON_GetObjectItem(tables[0], "__metadata__");
  const cJSON *fields = cJSON_GetObjectItem(metadata, "shape");
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.hidden = cJSON_GetObjectItem(fields, "hidden")->valueint;
  shape.intermediate = cJSON_GetObjectItem(fields, "intermediate")->valueint;
  shape.num_experts = cJSON_GetObjectItem(fields, "num_experts")->valueint;
  shape.intermediate_offset = cJSON_GetObjectItem(fields, "intermediate_offset")->valueint;
  snprintf(paths[1], sizeof paths[1], "%s/op=down,N=%d,K=%d,block=128x128,arch=sm_70,device=any.json", dir,
           shape.hidden, shape.intermediate);
  tables[1] = read_table(paths[1]);
  recorded_occupancy recorded = {.count = 0};
  add_recorded(&recorded, tables[0]);
  add_recorded(&recorded, tables[1]);
  /* The derivation ranked every GEMM variant the catalogue offers this shape on sm_70, no fewer (a
   * family added since would leave the tables stale) and no more. */
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  char **names = NULL;
  int32_t count = 0, gemms = 0;
  cr_assert_eq(volt8_codegen_list(ctx, &shape, &names, &count), VOLT8_OK, "%s", volt8_last_error(ctx));
  for (int32_t i = 0; i < count; i++) {
    if (strncmp(names[i], "gate_up.", 8) != 0 && strncmp(names[i], "down.", 5) != 0) continue;
    gemms++;
    int found = 0;
    for (int32_t r = 0; r < recorded.count && !found; r++) found = strcmp(recorded.names[r], names[i]) == 0;
    cr_assert(found, "%s: the catalogue offers %s, which the tables' derivation did not rank: derive them again",
              gate_up_file, names[i]);
  }
  cr_assert_eq(recorded.count, gemms, "%s: the derivation ranked %d variants, the catalogue offers %d", gate_up_file,
               recorded.count, gemms);
  volt8_codegen_names_free(names, count);
  volt8_ctx_destroy(ctx);
  derive_occupancy occupancy = {recorded.names, recorded.ctas_per_sm, recorded.count};
  derive_state state = {&DERIVE_V100, shape, cJSON_GetObjectItem(metadata, "top_k")->valueint, &occupancy, NULL};
  tuner_backend backend = derive_backend(&state);
  int entries = 0;
  for (int op = 0; op < 2; op++) {
    const char *prefix = op ? "down." : "gate_up.";
    const cJSON *entry;
    cJSON_ArrayForEach(entry, tables[op]) {
      if (strcmp(entry->string, "__metadata__") == 0) continue;
      int32_t m = atoi(entry->string);
      const char *pick = cJSON_GetObjectItem(entry, "variant")->valuestring;
      const char *held = cJSON_GetObjectItem(entry, "paired_with")->valuestring;
      cr_assert_eq(backend.begin_m(&state, m), VOLT8_OK);
      double best_us = INFINITY;
      const char *best = "";
      for (int32_t i = 0; i < recorded.count; i++) {
        if (strncmp(recorded.names[i], prefix, strlen(prefix)) != 0) continue;
        tuner_measurement measurement;
        cr_assert_eq(backend.measure(&state, m, op ? held : recorded.names[i], op ? recorded.names[i] : held, 1,
                                     &measurement), VOLT8_OK);
        if (measurement.accepted && measurement.forward_us < best_us)
          best_us = measurement.forward_us, best = recorded.names[i];
      }
      cr_assert_str_eq(best, pick, "%s M=%d: the model ranks %s first (%.4f us), the table has %s", paths[op], m, best,
                       best_us, pick);
      double table_us = cJSON_GetObjectItem(entry, "model_us")->valuedouble;
      cr_assert(fabs(best_us - table_us) <= 0.005 + 1e-9, "%s M=%d: %s at %.4f us, the table says %.2f", paths[op], m,
                pick, best_us, table_us);
      entries++;
    }
  }
  cJSON_Delete(tables[0]);
  cJSON_Delete(tables[1]);
  return entries;
}

/* The shipped sm_70 tables are the model's rankings: a change to the model that moves any of their 600
 * entries (40 tables of 15 token counts, 1..128 and 256..16384) fails here until the tables are derived
 * again. */
Test(derive_bounds, the_shipped_tables_are_the_models_rankings) {
  const char *dir = VOLT8_SOURCE_DIR "/tuning/tables";
  DIR *folder = opendir(dir);
  cr_assert_not_null(folder, "%s", dir);
  int entries = 0, shapes = 0;
  for (struct dirent *file; (file = readdir(folder));) {
    if (strncmp(file->d_name, "op=gate_up,", 11) != 0 || !strstr(file->d_name, ",arch=sm_70,")) continue;
    entries += check_shape_tables(dir, file->d_name);
    shapes++;
  }
  closedir(folder);
  cr_assert_eq(shapes, 20, "sm_70 shapes tabled: %d", shapes);
  cr_assert_eq(entries, 600);
}

#endif
