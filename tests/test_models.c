/* The model registry (runtime/checkpoint/models.h) at the real per-expert shapes: each model's rank shapes and
 * memory at TP 1/2/4/8; the reference forward of one rank of every offset class at each TP size,
 * loaded from a synthetic checkpoint through the loader and the sharder, against a double-precision
 * computation of this file's own (the unsharded weights in the checkpoint's 128 grid); top-k 1 and
 * 16; and the command line's --model errors. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/models.h"
#include "checkpoint/shard.h"
#include "core/numeric.h"
#include "test_support.h"

#define BLOCK 128
#define PROJECTIONS 3 /* gate, up, down */
#define TOKENS 3
#define MAX_TOP_K 16


static const char *const projection_names[PROJECTIONS] = {"gate_proj", "up_proj", "down_proj"};

static int64_t ceil_div(int64_t value, int64_t divisor) { return (value + divisor - 1) / divisor; }

TestSuite(models, .timeout = 600);

/* ---- the registry ---- */

Test(models, registry_holds_the_issue_table) {
  struct { const char *name; int32_t hidden, intermediate, experts, top_k; } expected[] = {
      {"deepseek-v3", 7168, 2048, 256, 8}, {"qwen3-next", 2048, 512, 512, 10}, {"glm-4.5", 5120, 1536, 160, 8},
      {"glm-4.5-air", 4096, 1408, 128, 8}, {"reference", 2560, 640, 512, 10}};
  cr_assert_eq(volt8_model_count(), 5);
  for (int32_t i = 0; i < 5; i++) {
    const volt8_model *model = volt8_model_find(expected[i].name);
    cr_assert_not_null(model, "%s is not registered", expected[i].name);
    cr_assert_eq(model, volt8_model_at(i), "%s is not at index %d", expected[i].name, i);
    cr_assert(model->hidden == expected[i].hidden && model->intermediate == expected[i].intermediate &&
                  model->num_experts == expected[i].experts && model->top_k == expected[i].top_k,
              "%s: H %d I %d E %d top-%d", model->name, model->hidden, model->intermediate, model->num_experts,
              model->top_k);
  }
  cr_assert_null(volt8_model_find("llama"));
  cr_assert_null(volt8_model_find(NULL));
  cr_assert_null(volt8_model_at(5));
  cr_assert_null(volt8_model_at(-1));
  char names[256];
  volt8_model_names(names, sizeof names);
  cr_assert_str_eq(names, "deepseek-v3, qwen3-next, glm-4.5, glm-4.5-air, reference");
  char short_buffer[8];
  volt8_model_names(short_buffer, sizeof short_buffer);
  cr_assert_str_eq(short_buffer, "deepsee", "a short buffer is cut, still terminated");
}

Test(models, rank_shapes_follow_the_shard_plan) {
  for (int32_t m = 0; m < volt8_model_count(); m++) {
    const volt8_model *model = volt8_model_at(m);
    for (int32_t tp = 1; tp <= 8; tp *= 2) {
      for (int32_t rank = 0; rank < tp; rank++) {
        volt8_moe_shape shape;
        cr_assert_eq(volt8_model_rank_shape(NULL, model, tp, rank, 0, &shape), VOLT8_OK, "%s TP%d rank %d: %s",
                     model->name, tp, rank, volt8_last_error(NULL));
        int32_t width = model->intermediate / tp;
        cr_assert(shape.size == sizeof shape && shape.hidden == model->hidden && shape.intermediate == width &&
                      shape.num_experts == model->num_experts && shape.block_n == BLOCK && shape.block_k == BLOCK &&
                      shape.intermediate_offset == width * rank % BLOCK,
                  "%s TP%d rank %d: I %d at offset %d, E %d, block %dx%d", model->name, tp, rank, shape.intermediate,
                  shape.intermediate_offset, shape.num_experts, shape.block_n, shape.block_k);
        cr_assert_eq(volt8_model_rank_shape(NULL, model, tp, rank, 8, &shape), VOLT8_OK);
        cr_assert_eq(shape.num_experts, 8, "an expert count given replaces the model's");
      }
    }
  }
  volt8_moe_shape shape;
  /* The issue's figures: Qwen3-Next at TP8 is below one scale block; GLM-4.5-Air at TP8 sits at 48, 16, 112... */
  cr_assert_eq(volt8_model_rank_shape(NULL, volt8_model_find("qwen3-next"), 8, 1, 0, &shape), VOLT8_OK);
  cr_assert(shape.intermediate == 64 && shape.intermediate_offset == 64);
  int32_t air_offsets[8] = {0, 48, 96, 16, 64, 112, 32, 80};
  for (int32_t rank = 0; rank < 8; rank++) {
    cr_assert_eq(volt8_model_rank_shape(NULL, volt8_model_find("glm-4.5-air"), 8, rank, 0, &shape), VOLT8_OK);
    cr_assert(shape.intermediate == 176 && shape.intermediate_offset == air_offsets[rank], "rank %d: I %d offset %d",
              rank, shape.intermediate, shape.intermediate_offset);
  }
  cr_assert_eq(volt8_model_rank_shape(NULL, volt8_model_find("qwen3-next"), 64, 0, 0, &shape),
               VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(volt8_last_error(NULL), "gives 8 per rank"), "%s", volt8_last_error(NULL));
  cr_assert_eq(volt8_model_rank_shape(NULL, volt8_model_find("glm-4.5"), 4, 4, 0, &shape), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_eq(volt8_model_rank_shape(NULL, NULL, 4, 0, 0, &shape), VOLT8_ERR_INVALID_ARGUMENT);
}

/* ---- plan and memory at every model, TP size and rank ---- */

/* The plan of a native 128x128 checkpoint of `model`'s experts at TP `tp`, as volt8_plan fills it. */
static volt8_plan_report native_plan(const volt8_model *model, int32_t tp) {
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  plan.route = VOLT8_ROUTE_NATIVE;
  plan.hidden = model->hidden;
  plan.intermediate = model->intermediate;
  plan.num_experts = model->num_experts;
  plan.tp_size = tp;
  plan.block_n = plan.block_k = BLOCK;
  return plan;
}

Test(models, plan_and_memory_at_every_tp) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  for (int32_t m = 0; m < volt8_model_count(); m++) {
    const volt8_model *model = volt8_model_at(m);
    int64_t experts = model->num_experts, hidden_blocks = ceil_div(model->hidden, BLOCK);
    for (int32_t tp = 1; tp <= 8; tp *= 2) {
      volt8_plan_report plan = native_plan(model, tp);
      int64_t weight_total = 0;
      for (int32_t rank = 0; rank < tp; rank++) {
        volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT, expected_shape = VOLT8_MOE_SHAPE_INIT;
        volt8_memory_report memory = VOLT8_MEMORY_REPORT_INIT;
        cr_assert_eq(volt8_plan_rank(ctx, &plan, rank, &shape, &memory), VOLT8_OK, "%s", volt8_last_error(ctx));
        cr_assert_eq(volt8_model_rank_shape(ctx, model, tp, rank, 0, &expected_shape), VOLT8_OK);
        cr_assert_eq(memcmp(&shape, &expected_shape, sizeof shape), 0, "%s TP%d rank %d: plan and registry differ",
                     model->name, tp, rank);
        int64_t width = shape.intermediate, touched = ceil_div(shape.intermediate_offset + width, BLOCK);
        int64_t padded_blocks = ceil_div(width, BLOCK);
        int64_t weights = experts * 3 * model->hidden * width;
        int64_t scales = experts * 2 * 3 * touched * hidden_blocks;
        int64_t padded = experts * (3 * model->hidden * padded_blocks * BLOCK + 2 * 3 * padded_blocks * hidden_blocks);
        cr_assert(memory.weight_bytes == weights && memory.fp16_bytes == 2 * weights && memory.scale_bytes == scales &&
                      memory.padded_bytes == padded && memory.workspace_bytes == 0,
                  "%s TP%d rank %d: weights %lld (expected %lld), scales %lld (%lld), padded %lld (%lld)", model->name,
                  tp, rank, (long long)memory.weight_bytes, (long long)weights, (long long)memory.scale_bytes,
                  (long long)scales, (long long)memory.padded_bytes, (long long)padded);
        /* four regions (w13, s13, w2, s2), each aligned to 256 bytes */
        int64_t slack = memory.resident_bytes - weights - scales;
        cr_assert(slack >= 0 && slack < 4 * 256 && memory.resident_bytes % 256 == 0,
                  "%s TP%d rank %d: resident %lld for %lld bytes", model->name, tp, rank,
                  (long long)memory.resident_bytes, (long long)(weights + scales));
        weight_total += memory.weight_bytes;
      }
      cr_assert_eq(weight_total, experts * 3 * model->hidden * model->intermediate,
                   "%s TP%d: the ranks' weights do not add up to the model's", model->name, tp);
    }
  }
  volt8_ctx_destroy(ctx);
}

/* ---- the reference forward at the real per-expert shapes, through the loader ---- */

typedef struct model_checkpoint {
  const volt8_model *model;
  int32_t experts;
  uint8_t *codes[PROJECTIONS];   /* [E][rows][cols] E4M3 */
  uint16_t *scales[PROJECTIONS]; /* [E][ceil(rows/128)][ceil(cols/128)] BF16 bits */
  char dir[64];
  unsigned seed;
} model_checkpoint;

static uint64_t rng_state;
static uint64_t next_random(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static unsigned test_seed(void) {
  const char *fixed = getenv("VOLT8_TEST_SEED");
  return fixed && *fixed ? (unsigned)strtoul(fixed, NULL, 10) : (unsigned)time(NULL) ^ ((unsigned)getpid() << 16);
}

static void projection_dims(const volt8_model *model, int p, int64_t *rows, int64_t *cols) {
  *rows = p == 2 ? model->hidden : model->intermediate;
  *cols = p == 2 ? model->intermediate : model->hidden;
}

static double e4m3_decode(uint8_t code) {
  int exponent = (code >> 3) & 15, mantissa = code & 7;
  double magnitude = exponent ? ldexp(1.0 + mantissa / 8.0, exponent - 7) : ldexp(mantissa / 8.0, -6);
  return code & 0x80 ? -magnitude : magnitude;
}

/* The expected forward decodes hundreds of millions of codes: each from a table of the 256 values. */
static double e4m3_value(uint8_t code) {
  static double values[256];
  static int filled;
  if (!filled) {
    for (int c = 0; c < 256; c++) values[c] = e4m3_decode((uint8_t)c);
    filled = 1;
  }
  return values[code];
}

static double bf16_value(uint16_t bits) {
  uint32_t word = (uint32_t)bits << 16;
  float value;
  memcpy(&value, &word, 4);
  return value;
}

static double half_value(uint16_t bits) { return volt8_half_to_double(bits); }

/* Random E4M3 codes (no NaN) and BF16 scales of 8 significant bits in [2^-14, 2^-11): scale * 2^8
 * is then an exact FP16, so the loader keeps the scales exactly. */
static void fill_checkpoint(model_checkpoint *checkpoint) {
  for (int p = 0; p < PROJECTIONS; p++) {
    int64_t rows, cols;
    projection_dims(checkpoint->model, p, &rows, &cols);
    size_t count = (size_t)(checkpoint->experts * rows * cols);
    size_t scale_count = (size_t)(checkpoint->experts * ceil_div(rows, BLOCK) * ceil_div(cols, BLOCK));
    checkpoint->codes[p] = malloc(count);
    checkpoint->scales[p] = malloc(scale_count * 2);
    cr_assert(checkpoint->codes[p] && checkpoint->scales[p], "out of memory for %zu codes", count);
    for (size_t i = 0; i < count; i++) {
      uint8_t code = (uint8_t)next_random();
      checkpoint->codes[p][i] = (code & 0x7F) == 0x7F ? code ^ 1 : code;
    }
    for (size_t i = 0; i < scale_count; i++) {
      uint64_t bits = next_random();
      uint16_t exponent = (uint16_t)(127 - 14 + bits % 3), mantissa = (uint16_t)((bits >> 8) & 0x7F);
      checkpoint->scales[p][i] = (uint16_t)(exponent << 7 | mantissa);
    }
  }
}

static void write_file(const char *dir, const char *name, const void *data, size_t bytes, const char *mode) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *stream = fopen(path, mode);
  cr_assert_not_null(stream, "cannot create %s", path);
  cr_assert_eq(fwrite(data, 1, bytes, stream), bytes, "cannot write %s", path);
  cr_assert_eq(fclose(stream), 0);
}

/* model.safetensors (per-expert tensors, block-FP8 names) and config.json. */
static void write_checkpoint(const model_checkpoint *checkpoint) {
  const volt8_model *model = checkpoint->model;
  size_t header_size = 64 + (size_t)checkpoint->experts * PROJECTIONS * 2 * 192;
  char *header = malloc(header_size);
  cr_assert_not_null(header);
  size_t used = (size_t)snprintf(header, header_size, "{\"__metadata__\":{\"format\":\"pt\"}");
  size_t offset = 0;
  for (int32_t e = 0; e < checkpoint->experts; e++)
    for (int p = 0; p < PROJECTIONS; p++) {
      int64_t rows, cols;
      projection_dims(model, p, &rows, &cols);
      size_t weight_bytes = (size_t)(rows * cols), scale_bytes = (size_t)(ceil_div(rows, BLOCK) * ceil_div(cols, BLOCK) * 2);
      used += (size_t)snprintf(header + used, header_size - used,
                               ",\"mtp.layers.0.mlp.experts.%d.%s.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[%lld,%lld],"
                               "\"data_offsets\":[%zu,%zu]}",
                               e, projection_names[p], (long long)rows, (long long)cols, offset, offset + weight_bytes);
      offset += weight_bytes;
      used += (size_t)snprintf(header + used, header_size - used,
                               ",\"mtp.layers.0.mlp.experts.%d.%s.weight_scale_inv\":{\"dtype\":\"BF16\",\"shape\":"
                               "[%lld,%lld],\"data_offsets\":[%zu,%zu]}",
                               e, projection_names[p], (long long)ceil_div(rows, BLOCK), (long long)ceil_div(cols, BLOCK),
                               offset, offset + scale_bytes);
      offset += scale_bytes;
    }
  header[used++] = '}';
  while (used % 8) header[used++] = ' ';
  uint8_t prefix[8];
  for (int i = 0; i < 8; i++) prefix[i] = (uint8_t)((uint64_t)used >> (8 * i));
  write_file(checkpoint->dir, "model.safetensors", prefix, 8, "wb");
  write_file(checkpoint->dir, "model.safetensors", header, used, "ab");
  free(header);
  for (int32_t e = 0; e < checkpoint->experts; e++)
    for (int p = 0; p < PROJECTIONS; p++) {
      int64_t rows, cols;
      projection_dims(model, p, &rows, &cols);
      size_t weight_bytes = (size_t)(rows * cols), scale_count = (size_t)(ceil_div(rows, BLOCK) * ceil_div(cols, BLOCK));
      write_file(checkpoint->dir, "model.safetensors", checkpoint->codes[p] + e * weight_bytes, weight_bytes, "ab");
      write_file(checkpoint->dir, "model.safetensors", checkpoint->scales[p] + e * scale_count, scale_count * 2, "ab");
    }
  char config[512];
  int length = snprintf(config, sizeof config,
                        "{\"num_hidden_layers\": 4, \"hidden_size\": %d, \"moe_intermediate_size\": %d, "
                        "\"num_experts\": %d, \"num_experts_per_tok\": %d, \"quantization_config\": {\"quant_method\": "
                        "\"fp8\", \"fmt\": \"e4m3\", \"weight_block_size\": [128, 128]}}\n",
                        model->hidden, model->intermediate, checkpoint->experts, model->top_k);
  write_file(checkpoint->dir, "config.json", config, (size_t)length, "w");
}

static void make_checkpoint(const volt8_model *model, int32_t experts, model_checkpoint *out) {
  memset(out, 0, sizeof *out);
  out->model = model;
  out->experts = experts;
  out->seed = test_seed();
  rng_state = out->seed;
  snprintf(out->dir, sizeof out->dir, "/tmp/volt8-models-XXXXXX");
  cr_assert_not_null(mkdtemp(out->dir), "cannot make a temp folder");
  fill_checkpoint(out);
  write_checkpoint(out);
}

static void free_checkpoint(model_checkpoint *checkpoint) {
  for (int p = 0; p < PROJECTIONS; p++) {
    free(checkpoint->codes[p]);
    free(checkpoint->scales[p]);
  }
  test_remove_tree(checkpoint->dir);
}

typedef struct routed_tokens {
  int32_t top_k;
  uint16_t x[TOKENS * 7168];
  int32_t ids[TOKENS * MAX_TOP_K];
  float weights[TOKENS * MAX_TOP_K];
} routed_tokens;

/* x in FP16 (|x| in [2^-5, 1)); top_k distinct experts a token (a random rotation), weights in [0.05, 1). */
static void make_tokens(const model_checkpoint *checkpoint, int32_t top_k, routed_tokens *out) {
  out->top_k = top_k;
  cr_assert(checkpoint->model->hidden * TOKENS <= (int32_t)(sizeof out->x / sizeof out->x[0]) && top_k <= MAX_TOP_K,
            "%s: hidden %d or top-%d outgrows the test's buffers", checkpoint->model->name, checkpoint->model->hidden,
            top_k);
  for (int64_t i = 0; i < (int64_t)TOKENS * checkpoint->model->hidden; i++) {
    uint64_t bits = next_random();
    out->x[i] = (uint16_t)((bits & 1) << 15 | (10 + bits % 5) << 10 | ((bits >> 8) & 0x3FF));
  }
  for (int32_t t = 0; t < TOKENS; t++) {
    int32_t first = (int32_t)(next_random() % (uint64_t)checkpoint->experts);
    for (int32_t j = 0; j < top_k; j++) {
      out->ids[t * top_k + j] = (first + j) % checkpoint->experts;
      out->weights[t * top_k + j] = (float)(0.05 + 0.95 * (double)(next_random() >> 11) / 9007199254740992.0);
    }
  }
}

/* sum over n < count of v[n] * codes[first + n] * the scale of its 128 block (first + n) / BLOCK:
 * each block's sum, then its scale. */
static double scaled_dot(const double *v, const uint8_t *codes, const uint16_t *scales, int64_t first, int64_t count) {
  double sum = 0.0, partial = 0.0;
  for (int64_t n = 0; n < count; n++) {
    partial += v[n] * e4m3_value(codes[first + n]);
    if (n + 1 == count || (first + n + 1) % BLOCK == 0) {
      sum += partial * bf16_value(scales[(first + n) / BLOCK]);
      partial = 0.0;
    }
  }
  return sum;
}

/* The rank's forward from the unsharded weights: rows (gate, up) and columns (down) [start, start + width),
 * each weight times the scale of its block in the checkpoint's own 128 grid. */
static void expected_forward(const model_checkpoint *checkpoint, int32_t start, int32_t width,
                             const routed_tokens *tokens, double *out) {
  const volt8_model *model = checkpoint->model;
  int64_t hidden = model->hidden, full = model->intermediate, hidden_blocks = ceil_div(hidden, BLOCK);
  int64_t full_blocks = ceil_div(full, BLOCK);
  double *h = malloc((size_t)width * sizeof *h), *x = malloc((size_t)hidden * sizeof *x);
  cr_assert(h && x);
  memset(out, 0, (size_t)(TOKENS * hidden) * sizeof *out);
  for (int32_t t = 0; t < TOKENS; t++) {
    for (int64_t k = 0; k < hidden; k++) x[k] = half_value(tokens->x[t * hidden + k]);
    for (int32_t j = 0; j < tokens->top_k; j++) {
      int64_t e = tokens->ids[t * tokens->top_k + j];
      for (int32_t n = 0; n < width; n++) {
        int64_t row = start + n;
        double gate_up[2];
        for (int p = 0; p < 2; p++) {
          const uint8_t *codes = checkpoint->codes[p] + (e * full + row) * hidden;
          const uint16_t *scales = checkpoint->scales[p] + (e * full_blocks + row / BLOCK) * hidden_blocks;
          gate_up[p] = scaled_dot(x, codes, scales, 0, hidden);
        }
        h[n] = volt8_half_to_double(volt8_half_from_double(gate_up[0] / (1.0 + exp(-gate_up[0])) * gate_up[1]));
      }
      double weight = tokens->weights[t * tokens->top_k + j];
      for (int64_t c = 0; c < hidden; c++) {
        const uint8_t *codes = checkpoint->codes[2] + (e * hidden + c) * full;
        const uint16_t *scales = checkpoint->scales[2] + (e * hidden_blocks + c / BLOCK) * full_blocks;
        out[t * hidden + c] += weight * scaled_dot(h, codes, scales, start, width);
      }
    }
  }
  free(h);
  free(x);
}

static double relative_l2(const double *expected, const double *got, int64_t count) {
  double error = 0.0, norm = 0.0;
  for (int64_t i = 0; i < count; i++) {
    error += (got[i] - expected[i]) * (got[i] - expected[i]);
    norm += expected[i] * expected[i];
  }
  return sqrt(error / norm);
}

/* One rank: plan and host load through the loader, the shape against the registry, the reference
 * forward against expected_forward at each top-k. */
static void check_rank(volt8_ctx *ctx, const model_checkpoint *checkpoint, int32_t tp, int32_t rank,
                       const int32_t *top_ks, int top_k_count) {
  const volt8_model *model = checkpoint->model;
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = checkpoint->dir;
  options.tp_size = tp;
  options.tp_rank = rank;
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_OK, "%s TP%d: %s", model->name, tp, volt8_last_error(ctx));
  cr_assert(plan.hidden == model->hidden && plan.intermediate == model->intermediate &&
                plan.num_experts == checkpoint->experts && plan.scale_max_relative_error == 0.0,
            "%s TP%d plan: H %d I %d E %d scale error %g", model->name, tp, plan.hidden, plan.intermediate,
            plan.num_experts, plan.scale_max_relative_error);
  volt8_host_checkpoint *host = NULL;
  cr_assert_eq(volt8_checkpoint_load_host(ctx, &options, &host), VOLT8_OK, "%s TP%d rank %d: %s", model->name, tp,
               rank, volt8_last_error(ctx));
  volt8_moe_shape expected_shape = VOLT8_MOE_SHAPE_INIT, planned_shape = VOLT8_MOE_SHAPE_INIT;
  cr_assert_eq(volt8_model_rank_shape(ctx, model, tp, rank, checkpoint->experts, &expected_shape), VOLT8_OK);
  cr_assert_eq(volt8_plan_rank(ctx, &plan, rank, &planned_shape, NULL), VOLT8_OK);
  cr_assert(memcmp(&host->shape, &expected_shape, sizeof expected_shape) == 0 &&
                memcmp(&planned_shape, &expected_shape, sizeof expected_shape) == 0,
            "%s TP%d rank %d: loaded I %d at offset %d, registry I %d at offset %d", model->name, tp, rank,
            host->shape.intermediate, host->shape.intermediate_offset, expected_shape.intermediate,
            expected_shape.intermediate_offset);
  int64_t outputs = (int64_t)TOKENS * model->hidden;
  double *expected = malloc((size_t)outputs * sizeof *expected), *got = malloc((size_t)outputs * sizeof *got);
  routed_tokens *tokens = malloc(sizeof *tokens);
  cr_assert(expected && got && tokens);
  for (int i = 0; i < top_k_count; i++) {
    make_tokens(checkpoint, top_ks[i], tokens);
    cr_assert_eq(volt8_reference_moe_forward(ctx, &host->shape, &host->experts, tokens->x, tokens->ids, tokens->weights,
                                             TOKENS, tokens->top_k, got),
                 VOLT8_OK, "%s", volt8_last_error(ctx));
    expected_forward(checkpoint, rank * expected_shape.intermediate, expected_shape.intermediate, tokens, expected);
    double error = relative_l2(expected, got, outputs);
    cr_assert(error <= 1e-10, "%s TP%d rank %d (I %d at offset %d) top-%d, seed %u: relative L2 %.3g", model->name, tp,
              rank, expected_shape.intermediate, expected_shape.intermediate_offset, tokens->top_k, checkpoint->seed,
              error);
  }
  free(expected);
  free(got);
  free(tokens);
  volt8_host_checkpoint_free(host);
}

/* Every TP size of `tps`, one rank of each offset class (the first rank at that offset). */
static void check_model(const volt8_model *model, int32_t experts, const int32_t *tps, int tp_count,
                        const int32_t *top_ks, int top_k_count) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  model_checkpoint checkpoint;
  make_checkpoint(model, experts, &checkpoint);
  for (int i = 0; i < tp_count; i++) {
    int seen[BLOCK] = {0};
    for (int32_t rank = 0; rank < tps[i]; rank++) {
      int32_t offset = model->intermediate / tps[i] * rank % BLOCK;
      if (seen[offset]++) continue;
      check_rank(ctx, &checkpoint, tps[i], rank, top_ks, top_k_count);
    }
  }
  free_checkpoint(&checkpoint);
  volt8_ctx_destroy(ctx);
}

ParameterizedTestParameters(models, reference_at_real_shapes) {
  static int32_t indices[5] = {0, 1, 2, 3, 4};
  return cr_make_param_array(int32_t, indices, (size_t)volt8_model_count());
}

/* Two experts, top-2 and top-1, at TP 1/2/4/8. */
ParameterizedTest(int32_t *index, models, reference_at_real_shapes) {
  static const int32_t tps[] = {1, 2, 4, 8}, top_ks[] = {2, 1};
  check_model(volt8_model_at(*index), 2, tps, 4, top_ks, 2);
}

/* Top-k at both ends of 1..16 at Qwen3-Next's TP8 ranks (I = 64 at offsets 0 and 64), 16 experts. */
Test(models, top_k_1_and_16) {
  static const int32_t tps[] = {8}, top_ks[] = {1, 16};
  check_model(volt8_model_find("qwen3-next"), 16, tps, 1, top_ks, 2);
}

Test(models, load_options_serve_top_k_16_by_default) {
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  cr_assert_geq(options.max_top_k, MAX_TOP_K, "the default workspace must hold top-16 routing");
}

/* ---- the command line ---- */

Test(models, unknown_names_exit_2_listing_the_known_ones) {
  char *commands[][6] = {{"bench", "--model", "llama", NULL},
                         {"tune", "--model", "llama", "--tp", "4", NULL},
                         {"list", "--model", "llama", NULL},
                         {"demo", "--model", "llama", NULL}};
  char known[256], expected[320], out[8192], text[8192];
  volt8_model_names(known, sizeof known);
  snprintf(expected, sizeof expected, "unknown model \"llama\" (known: %s)", known);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    int status = test_run_volt8(commands[i], out, sizeof out, text, sizeof text);
    if ((i == 0 && strstr(text, "no benchmark harness")) || (i == 1 && strstr(text, "no tuner"))) continue;
    cr_assert_eq(status, 2, "volt8 %s exited %d: %s", commands[i][0], status, text);
    cr_assert_not_null(strstr(text, expected), "volt8 %s: \"%s\" lacks \"%s\"", commands[i][0], text, expected);
  }
  char *narrow[] = {"list", "--model", "qwen3-next", "--tp", "64", NULL};
  cr_assert_eq(test_run_volt8(narrow, out, sizeof out, text, sizeof text), 2, "%s", text);
  cr_assert_not_null(strstr(text, "not a multiple of 16"), "%s", text);
}

/* `volt8 models --tp 8` (what scripts/gpu_check.sh reads the GPU shapes from) prints each rank's shape. */
Test(models, models_command_prints_every_rank_shape) {
  FILE *stream = popen(VOLT8_CLI_PATH " models --tp 8", "r");
  cr_assert_not_null(stream);
  char line[512];
  int32_t lines = 0;
  while (fgets(line, sizeof line, stream)) {
    char name[32];
    int tp, rank, hidden, intermediate, experts, block_n, block_k, offset;
    cr_assert_eq(sscanf(line,
                        "%31s tp=%d rank=%d hidden=%d,intermediate=%d,num_experts=%d,block_n=%d,block_k=%d,"
                        "intermediate_offset=%d",
                        name, &tp, &rank, &hidden, &intermediate, &experts, &block_n, &block_k, &offset),
                 9, "unexpected line: %s", line);
    volt8_moe_shape shape;
    const volt8_model *model = volt8_model_find(name);
    cr_assert_not_null(model, "%s", line);
    cr_assert_eq(volt8_model_rank_shape(NULL, model, tp, rank, 0, &shape), VOLT8_OK);
    cr_assert(tp == 8 && hidden == shape.hidden && intermediate == shape.intermediate && experts == shape.num_experts &&
                  block_n == BLOCK && block_k == BLOCK && offset == shape.intermediate_offset,
              "%s", line);
    lines++;
  }
  cr_assert_eq(pclose(stream), 0);
  cr_assert_eq(lines, 8 * volt8_model_count());
}

/* `volt8 models --tp N` at every TP size it takes: every model N splits is listed, rank by rank, in the
 * registry's order; each one it does not split gets one line on stderr saying why, and the list goes
 * on past it; exit 0 when some model is listed, else 2 (--tp N is then of no use). */
Test(models, models_command_lists_every_model_a_tp_size_splits) {
  size_t size = 1 << 16;
  char *out = malloc(size), *err = malloc(size), *expected = malloc(size);
  cr_assert(out && err && expected);
  for (int32_t tp = 1; tp <= 64; tp++) {
    char tp_text[8];
    snprintf(tp_text, sizeof tp_text, "%d", tp);
    int status = test_run_volt8((char *[]){"models", "--tp", tp_text, NULL}, out, size, err, size);
    size_t used = 0;
    int shown = 0;
    expected[0] = '\0';
    for (int32_t m = 0; m < volt8_model_count(); m++) {
      const volt8_model *model = volt8_model_at(m);
      volt8_moe_shape shape;
      char why[256];
      if (volt8_model_rank_shape(NULL, model, tp, 0, 0, &shape) != VOLT8_OK) {
        snprintf(why, sizeof why, "volt8 models: %s does not split at TP%d: %s\n", model->name, tp, volt8_last_error(NULL));
        cr_assert_not_null(strstr(err, why), "--tp %d: stderr lacks \"%s\":\n%s", tp, why, err);
        continue;
      }
      for (int32_t rank = 0; rank < tp; rank++) {
        cr_assert_eq(volt8_model_rank_shape(NULL, model, tp, rank, 0, &shape), VOLT8_OK);
        used += (size_t)snprintf(expected + used, size - used,
                                 "%s tp=%d rank=%d hidden=%d,intermediate=%d,num_experts=%d,block_n=%d,block_k=%d,"
                                 "intermediate_offset=%d\n",
                                 model->name, tp, rank, shape.hidden, shape.intermediate, shape.num_experts,
                                 shape.block_n, shape.block_k, shape.intermediate_offset);
      }
      shown++;
    }
    cr_assert_str_eq(out, expected, "volt8 models --tp %d printed:\n%s", tp, out);
    cr_assert_eq(status, shown ? 0 : 2, "volt8 models --tp %d exited %d with %d model(s) listed:\n%s", tp, status, shown,
                 err);
    if (!shown) cr_assert_not_null(strstr(err, "splits none of the models"), "--tp %d:\n%s", tp, err);
  }
  /* the cases that were wrong: glm-4.5 splits at TP3, and TP16 goes on past glm-4.5-air to none of the rest */
  cr_assert_eq(test_run_volt8((char *[]){"models", "--tp", "3", NULL}, out, size, err, size), 0, "%s", err);
  cr_assert(strstr(out, "glm-4.5 tp=3 rank=2 ") && !strstr(out, "reference"), "%s", out);
  free(out);
  free(err);
  free(expected);
}

/* `volt8 demo --model qwen3-next` on the CPU: its checkpoint has the model's per-expert shape, and its
 * table gives the largest rank's FP16 / padded / volt8 MiB at TP 1/2/4/8 with all 512 experts. */
Test(models, demo_prints_the_model_memory_table) {
  char *args[] = {"demo", "--model", "qwen3-next", NULL};
  setenv("VOLT8_CACHE_DIR", VOLT8_BINARY_DIR "/tests/demo_cache", 1);
  size_t size = 1 << 16;
  char *text = malloc(size), err[8192];
  cr_assert_not_null(text);
  int status = test_run_volt8(args, text, size, err, sizeof err);
  cr_assert_eq(status, 0, "volt8 demo --model qwen3-next exited %d:\n%s\n%s", status, text, err);
  cr_assert_not_null(strstr(text, "16 E4M3 experts of 512x2048"), "%s", text);
  cr_assert_not_null(strstr(text, "loaded rank 0 on the host: I=128 at offset 0"), "%s", text);
  const volt8_model *model = volt8_model_find("qwen3-next");
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  const char *row = strstr(text, "TP  I/rank");
  cr_assert_not_null(row, "no memory table:\n%s", text);
  for (int32_t tp = 1; tp <= 8; tp *= 2) {
    row = strchr(row, '\n');
    cr_assert_not_null(row);
    row++;
    int printed_tp = 0, width = 0;
    char offsets[64];
    double fp16 = 0, padded = 0, resident = 0;
    cr_assert_eq(sscanf(row, " %d %d %63s %lf %lf %lf", &printed_tp, &width, offsets, &fp16, &padded, &resident), 6,
                 "table row: %.120s", row);
    volt8_plan_report plan = native_plan(model, tp);
    volt8_memory_report largest = VOLT8_MEMORY_REPORT_INIT;
    char expected_offsets[64] = "";
    for (int32_t rank = 0; rank < tp; rank++) {
      volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
      volt8_memory_report memory = VOLT8_MEMORY_REPORT_INIT;
      cr_assert_eq(volt8_plan_rank(ctx, &plan, rank, &shape, &memory), VOLT8_OK);
      snprintf(expected_offsets + strlen(expected_offsets), sizeof expected_offsets - strlen(expected_offsets), "%s%d",
               rank ? "," : "", shape.intermediate_offset);
      if (memory.resident_bytes > largest.resident_bytes) largest = memory;
    }
    double mib = 1024.0 * 1024.0;
    cr_assert(printed_tp == tp && width == model->intermediate / tp && strcmp(offsets, expected_offsets) == 0 &&
                  fabs(fp16 - largest.fp16_bytes / mib) <= 0.05 && fabs(padded - largest.padded_bytes / mib) <= 0.05 &&
                  fabs(resident - largest.resident_bytes / mib) <= 0.05,
              "TP%d row \"%.100s\": expected I %d, offsets %s, %.1f / %.1f / %.1f MiB", tp, row,
              model->intermediate / tp, expected_offsets, largest.fp16_bytes / mib, largest.padded_bytes / mib,
              largest.resident_bytes / mib);
  }
  volt8_ctx_destroy(ctx);
  free(text);
}
