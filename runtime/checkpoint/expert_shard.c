/* One expert from an engine's tensors: the whole gate, up and down matrices (and native block
 * scales) in host memory, run through the checkpoint loader's own per-expert pipeline, so that a rank
 * gets the bytes volt8_checkpoint_load_host gives it from the same checkpoint. */
#define VOLT8_EXPERIMENTAL_API 1 /* declares these entries */
#include "checkpoint/checkpoint.h"

#include "core/ctx_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define HOST_TENSORS "host tensors" /* where the tensors come from, in messages */

static const char *const default_names[VOLT8_PROJECTIONS] = {"gate_proj", "up_proj", "down_proj"};

static int parse_dtype(const char *name, volt8_st_dtype *out) {
  for (int dtype = 0; name && dtype < VOLT8_ST_DTYPE_COUNT; dtype++) {
    if (strcmp(name, volt8_st_dtype_name((volt8_st_dtype)dtype)) == 0) {
      *out = (volt8_st_dtype)dtype;
      return 1;
    }
  }
  return 0;
}

/* The route and resident scale rows of online_block_n (0: native). */
static volt8_status route_of(volt8_ctx *ctx, int32_t online_block_n, int32_t *route, int32_t *block_n) {
  if (online_block_n != 0 && online_block_n != 1 && online_block_n != VOLT8_CHECKPOINT_BLOCK)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "online_block_n is %d: 0 (native FP8 experts), or 1 or 128 (rows a scale block online)",
                      online_block_n);
  *route = online_block_n ? VOLT8_ROUTE_ONLINE : VOLT8_ROUTE_NATIVE;
  *block_n = online_block_n ? online_block_n : VOLT8_CHECKPOINT_BLOCK;
  return VOLT8_OK;
}

static volt8_status check_sizes(volt8_ctx *ctx, int32_t hidden, int32_t intermediate) {
  if (hidden <= 0 || hidden % 16 != 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "hidden is %d: a positive multiple of 16", hidden);
  if (intermediate <= 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "intermediate is %d: it must be positive", intermediate);
  return VOLT8_OK;
}

volt8_status volt8_shard_rank_shape(volt8_ctx *ctx, int32_t hidden, int32_t intermediate, int32_t tp_size,
                                    int32_t tp_rank, int32_t online_block_n, volt8_moe_shape *out_shape) {
  volt8_status status = volt8_moe_shape_out_check(ctx, "volt8_shard_rank_shape", out_shape);
  if (status != VOLT8_OK) return status;
  int32_t route = 0, block_n = 0;
  volt8_shard shard;
  status = check_sizes(ctx, hidden, intermediate);
  if (status == VOLT8_OK) status = route_of(ctx, online_block_n, &route, &block_n);
  if (status == VOLT8_OK) status = volt8_shard_plan(ctx, intermediate, tp_size, tp_rank, route, block_n, &shard);
  if (status != VOLT8_OK) return status;
  volt8_moe_shape shape;
  volt8_shard_shape(&shard, hidden, 1, &shape);
  volt8_moe_dims dims;
  status = volt8_moe_dims_compute(ctx, &shape, &dims);
  if (status == VOLT8_OK) *out_shape = shape;
  return status;
}

static volt8_status place_staging(void *context, int32_t expert, volt8_expert_arrays *out) {
  *out = *(const volt8_expert_arrays *)context;
  return VOLT8_OK;
}

volt8_status volt8_expert_shard_host(volt8_ctx *ctx, const volt8_expert_tensors *tensors, int32_t tp_size,
                                     int32_t tp_rank, int32_t online_block_n, const volt8_host_experts *out) {
  if (!tensors || !out)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_expert_shard_host: tensors or out is NULL");
  /* 0.4 appended `expert`: a struct of the size before it is read up to there, as expert 0 */
  if (tensors->size != sizeof(volt8_expert_tensors) && tensors->size != offsetof(volt8_expert_tensors, expert))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_expert_shard_host: tensors->size is %zu, not %zu (use VOLT8_EXPERT_TENSORS_INIT) or the "
                      "older %zu", tensors->size, sizeof(volt8_expert_tensors), offsetof(volt8_expert_tensors, expert));
  volt8_expert_tensors read = VOLT8_EXPERT_TENSORS_INIT;
  memcpy(&read, tensors, tensors->size);
  tensors = &read;
  if (out->size != sizeof(volt8_host_experts))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_expert_shard_host: out->size is %zu, not %zu (use VOLT8_HOST_EXPERTS_INIT)", out->size,
                      sizeof(volt8_host_experts));
  if (!out->w13 || !out->s13 || !out->w2 || !out->s2)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_expert_shard_host: out->%s is NULL",
                      !out->w13 ? "w13" : !out->s13 ? "s13" : !out->w2 ? "w2" : "s2");
  int32_t route = 0, block_n = 0;
  volt8_status status = check_sizes(ctx, tensors->hidden, tensors->intermediate);
  if (status == VOLT8_OK) status = route_of(ctx, online_block_n, &route, &block_n);
  if (status != VOLT8_OK) return status;
  int native = route == VOLT8_ROUTE_NATIVE;
  volt8_st_dtype weight_dtype, scale_dtype = VOLT8_ST_F32;
  if (!parse_dtype(tensors->weight_dtype, &weight_dtype) ||
      (native ? weight_dtype != VOLT8_ST_F8_E4M3
              : weight_dtype != VOLT8_ST_BF16 && weight_dtype != VOLT8_ST_F16 && weight_dtype != VOLT8_ST_F32))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "weight_dtype is %s%s%s: %s", tensors->weight_dtype ? "\"" : "",
                      tensors->weight_dtype ? tensors->weight_dtype : "NULL", tensors->weight_dtype ? "\"" : "",
                      native ? "native experts are F8_E4M3 (unquantized ones need online_block_n 1 or 128)"
                             : "online quantization reads BF16, F16 or F32");
  if (native && (!parse_dtype(tensors->scale_dtype, &scale_dtype) ||
                 (scale_dtype != VOLT8_ST_F32 && scale_dtype != VOLT8_ST_BF16 && scale_dtype != VOLT8_ST_F16)))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "scale_dtype is %s%s%s: native scales are F32, BF16 or F16",
                      tensors->scale_dtype ? "\"" : "", tensors->scale_dtype ? tensors->scale_dtype : "NULL",
                      tensors->scale_dtype ? "\"" : "");
  volt8_shard shard;
  status = volt8_shard_plan(ctx, tensors->intermediate, tp_size, tp_rank, route, block_n, &shard);
  if (status != VOLT8_OK) return status;

  /* The tensors as the pipeline reads a checkpoint's: one expert, weights then scales. */
  int64_t hidden = tensors->hidden, intermediate = tensors->intermediate;
  size_t weight_bytes = (size_t)volt8_st_dtype_bits(weight_dtype) / 8, scale_bytes = (size_t)volt8_st_dtype_bits(scale_dtype) / 8;
  volt8_st_tensor views[2 * VOLT8_PROJECTIONS];
  const volt8_st_tensor *table[2 * VOLT8_PROJECTIONS];
  char scale_names[VOLT8_PROJECTIONS][160];
  memset(views, 0, sizeof views);
  for (int p = 0; p < VOLT8_PROJECTIONS; p++) {
    const char *name = tensors->names[p] ? tensors->names[p] : default_names[p];
    int64_t rows = p == VOLT8_DOWN ? hidden : intermediate, cols = p == VOLT8_DOWN ? intermediate : hidden;
    if (!tensors->weights[p] || (native && !tensors->scales[p]))
      return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_expert_shard_host: %s: the %s is NULL", name,
                        tensors->weights[p] ? "scale grid" : "weight");
    views[p] = (volt8_st_tensor){.name = name, .file = HOST_TENSORS, .dtype = weight_dtype, .rank = 2,
                                 .shape = {rows, cols}, .data = tensors->weights[p],
                                 .bytes = (size_t)rows * (size_t)cols * weight_bytes};
    snprintf(scale_names[p], sizeof scale_names[p], "%.140s (scales)", name);
    int64_t grid_rows = (rows + VOLT8_CHECKPOINT_BLOCK - 1) / VOLT8_CHECKPOINT_BLOCK;
    int64_t grid_cols = (cols + VOLT8_CHECKPOINT_BLOCK - 1) / VOLT8_CHECKPOINT_BLOCK;
    views[VOLT8_PROJECTIONS + p] = (volt8_st_tensor){
        .name = scale_names[p], .file = HOST_TENSORS, .dtype = scale_dtype, .rank = 2, .shape = {grid_rows, grid_cols},
        .data = tensors->scales[p], .bytes = (size_t)grid_rows * (size_t)grid_cols * scale_bytes};
    table[p] = &views[p];
    table[VOLT8_PROJECTIONS + p] = &views[VOLT8_PROJECTIONS + p];
  }
  volt8_checkpoint checkpoint = {.dir = HOST_TENSORS, .route = route, .hidden = tensors->hidden,
                                 .intermediate = tensors->intermediate, .num_experts = 1, .weight_dtype = weight_dtype,
                                 .scale_dtype = scale_dtype, .tensors = table, .expert_label_base = tensors->expert};
  /* Staged first, so that out is written only when the whole expert is good. */
  volt8_moe_shape shape;
  volt8_moe_dims dims;
  volt8_shard_shape(&shard, tensors->hidden, 1, &shape);
  status = volt8_moe_dims_compute(ctx, &shape, &dims);
  if (status != VOLT8_OK) return status;
  size_t bytes[4] = {(size_t)dims.w13_bytes_per_expert, (size_t)dims.s13_elems_per_expert * 2,
                     (size_t)dims.w2_bytes_per_expert, (size_t)dims.s2_elems_per_expert * 2};
  uint8_t *staging = volt8_checkpoint_alloc(bytes[0] + bytes[1] + bytes[2] + bytes[3]);
  if (!staging) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for one expert's staging");
  volt8_expert_arrays arrays = {.w13 = staging, .s13 = (uint16_t *)(staging + bytes[0]),
                                .w2 = staging + bytes[0] + bytes[1], .s2 = (uint16_t *)(staging + bytes[0] + bytes[1] + bytes[2])};
  volt8_expert_range one = {0, 1};
  volt8_expert_sink sink = {&arrays, place_staging, NULL};
  status = volt8_checkpoint_run(ctx, &checkpoint, &shard, &one, &sink, NULL);
  if (status == VOLT8_OK) {
    void *targets[4] = {(void *)out->w13, (void *)out->s13, (void *)out->w2, (void *)out->s2};
    const uint8_t *source = staging;
    for (int i = 0; i < 4; i++) {
      memcpy(targets[i], source, bytes[i]);
      source += bytes[i];
    }
  }
  volt8_checkpoint_free(staging);
  return status;
}
