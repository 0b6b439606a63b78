/* volt8_expert_shard_host and volt8_shard_rank_shape (experimental): an engine's whole expert tensors
 * in host memory give each rank the bytes volt8_checkpoint_load_host gives it from the checkpoint, at
 * every TP size and rank the fixtures allow, native and online; bad input is refused, naming the
 * value, and leaves the caller's arrays untouched. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "moe/kernels/moe_layout.h"

#include "checkpoint_fixture.h"
#include "test_support.h"

CHECKPOINT_FIXTURES("native", "online")

TestSuite(expert_shard, .timeout = 120);

/* One expert's arrays of `shape`, allocated in one block. */
typedef struct expert_out {
  volt8_host_experts arrays;
  volt8_moe_dims dims;
  uint8_t *block;
  size_t bytes;
} expert_out;

static void expert_out_make(const volt8_moe_shape *shape, unsigned char fill, expert_out *out) {
  cr_assert_eq(volt8_moe_dims_compute(NULL, shape, &out->dims), VOLT8_OK, "%s", volt8_last_error(NULL));
  size_t sizes[4] = {(size_t)out->dims.w13_bytes_per_expert, (size_t)out->dims.s13_elems_per_expert * 2,
                     (size_t)out->dims.w2_bytes_per_expert, (size_t)out->dims.s2_elems_per_expert * 2};
  out->bytes = sizes[0] + sizes[1] + sizes[2] + sizes[3];
  out->block = malloc(out->bytes);
  cr_assert_not_null(out->block);
  memset(out->block, fill, out->bytes);
  out->arrays = (volt8_host_experts)VOLT8_HOST_EXPERTS_INIT;
  out->arrays.w13 = out->block;
  out->arrays.s13 = (const uint16_t *)(out->block + sizes[0]);
  out->arrays.w2 = out->block + sizes[0] + sizes[1];
  out->arrays.s2 = (const uint16_t *)(out->block + sizes[0] + sizes[1] + sizes[2]);
}

/* Expert `e`'s tensors of an open checkpoint, as an engine would hand them over. */
static volt8_expert_tensors tensors_of(const volt8_checkpoint *checkpoint, int32_t e, const char *names[3]) {
  volt8_expert_tensors tensors = VOLT8_EXPERT_TENSORS_INIT;
  tensors.hidden = checkpoint->hidden;
  tensors.intermediate = checkpoint->intermediate;
  tensors.weight_dtype = volt8_st_dtype_name(checkpoint->weight_dtype);
  tensors.scale_dtype = checkpoint->route == VOLT8_ROUTE_NATIVE ? volt8_st_dtype_name(checkpoint->scale_dtype) : NULL;
  for (int p = 0; p < VOLT8_PROJECTIONS; p++) {
    volt8_matrix_source matrix;
    volt8_checkpoint_matrix(checkpoint, e, p, &matrix);
    tensors.weights[p] = matrix.data;
    tensors.scales[p] = matrix.scale ? matrix.scale->data : NULL;
    tensors.names[p] = names ? names[p] : NULL;
  }
  return tensors;
}

static void same_as_checkpoint_load(const char *name, int32_t online_block_n) {
  cJSON *root = manifest();
  const cJSON *entry = manifest_case(root, "valid", name);
  char dir[4096];
  fixture(cJSON_GetObjectItemCaseSensitive(entry, "dir")->valuestring, dir, sizeof dir);
  int online = strcmp(cJSON_GetObjectItemCaseSensitive(entry, "route")->valuestring, "online") == 0;
  char block_key[8];
  snprintf(block_key, sizeof block_key, "%d", online ? online_block_n : 128);
  const cJSON *tps = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(entry, "tps"), block_key);
  cr_assert_not_null(tps, "%s: no TP sizes for block %s", name, block_key);
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT, read;
  options.checkpoint_dir = dir;
  options.mtp_expert_quantization = online ? "fp8" : NULL;
  options.online_block_n = online ? online_block_n : 128;
  volt8_checkpoint *checkpoint = NULL;
  cr_assert_eq(volt8_load_options_read(ctx, &options, &read), VOLT8_OK);
  cr_assert_eq(volt8_checkpoint_open(ctx, &read, &checkpoint), VOLT8_OK, "%s: %s", name, volt8_last_error(ctx));
  const cJSON *tp;
  cJSON_ArrayForEach(tp, tps) {
    options.tp_size = tp->valueint;
    for (options.tp_rank = 0; options.tp_rank < options.tp_size; options.tp_rank++) {
      volt8_host_checkpoint *host = NULL;
      cr_assert_eq(volt8_checkpoint_load_host(ctx, &options, &host), VOLT8_OK, "%s", volt8_last_error(ctx));
      volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
      cr_assert_eq(volt8_shard_rank_shape(ctx, checkpoint->hidden, checkpoint->intermediate, options.tp_size,
                                          options.tp_rank, online ? online_block_n : 0, &shape),
                   VOLT8_OK, "%s", volt8_last_error(ctx));
      shape.num_experts = host->shape.num_experts;
      cr_assert(memcmp(&shape, &host->shape, sizeof shape) == 0, "%s tp %d rank %d: the shape differs from the load's",
                name, options.tp_size, options.tp_rank);
      shape.num_experts = 1;
      expert_out out;
      expert_out_make(&shape, 0xA5, &out);
      const volt8_moe_dims *dims = &out.dims;
      for (int32_t e = 0; e < checkpoint->num_experts; e++) {
        volt8_expert_tensors tensors = tensors_of(checkpoint, e, NULL);
        cr_assert_eq(volt8_expert_shard_host(ctx, &tensors, options.tp_size, options.tp_rank,
                                             online ? online_block_n : 0, &out.arrays),
                     VOLT8_OK, "%s expert %d: %s", name, e, volt8_last_error(ctx));
        const void *expected[4] = {host->experts.w13 + dims->w13_bytes_per_expert * e,
                                   host->experts.s13 + dims->s13_elems_per_expert * e,
                                   host->experts.w2 + dims->w2_bytes_per_expert * e,
                                   host->experts.s2 + dims->s2_elems_per_expert * e};
        const void *got[4] = {out.arrays.w13, out.arrays.s13, out.arrays.w2, out.arrays.s2};
        size_t bytes[4] = {(size_t)dims->w13_bytes_per_expert, (size_t)dims->s13_elems_per_expert * 2,
                           (size_t)dims->w2_bytes_per_expert, (size_t)dims->s2_elems_per_expert * 2};
        static const char *const arrays[4] = {"w13", "s13", "w2", "s2"};
        for (int i = 0; i < 4; i++)
          cr_assert(memcmp(got[i], expected[i], bytes[i]) == 0, "%s block %d tp %d rank %d expert %d: %s differs",
                    name, online_block_n, options.tp_size, options.tp_rank, e, arrays[i]);
      }
      free(out.block);
      volt8_host_checkpoint_free(host);
    }
  }
  volt8_checkpoint_close(checkpoint);
  volt8_ctx_destroy(ctx);
  cJSON_Delete(root);
}

Test(expert_shard, native_ranks_get_the_checkpoint_loads_bytes) {
  same_as_checkpoint_load("modelopt_mixed_indexed", 0); /* BF16 scales, an indexed checkpoint */
  same_as_checkpoint_load("fp8_runtime_names", 0);      /* F32 weight_scale_inv */
  same_as_checkpoint_load("modelopt_4d_hf_quant_config", 0); /* F16 scales stored 4-D */
}

Test(expert_shard, online_ranks_get_the_checkpoint_loads_bytes) {
  same_as_checkpoint_load("bf16_fused", 128);
  same_as_checkpoint_load("bf16_fused", 1);
  same_as_checkpoint_load("f16_per_expert_opt_in_config", 128);
}

/* A failed call names what is wrong and leaves out as it was. */
static void expect_refused(const volt8_expert_tensors *tensors, int32_t tp_size, int32_t tp_rank, int32_t online_block_n,
                           expert_out *out, volt8_status status, const char *named) {
  unsigned char *before = malloc(out->bytes);
  cr_assert_not_null(before);
  memcpy(before, out->block, out->bytes);
  int64_t held = volt8_checkpoint_live_allocations();
  cr_assert_eq(volt8_expert_shard_host(NULL, tensors, tp_size, tp_rank, online_block_n, &out->arrays), status,
               "expected %s for \"%s\"; got: %s", volt8_status_string(status), named, volt8_last_error(NULL));
  cr_assert(strstr(volt8_last_error(NULL), named), "\"%s\" does not say \"%s\"", volt8_last_error(NULL), named);
  cr_assert(memcmp(before, out->block, out->bytes) == 0, "\"%s\": out was written", named);
  cr_assert_eq(volt8_checkpoint_live_allocations(), held, "\"%s\": allocations left behind", named);
  free(before);
}

Test(expert_shard, bad_input_is_refused_and_names_the_value) {
  char dir[4096];
  fixture("fp8_runtime_names", dir, sizeof dir);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT, read;
  options.checkpoint_dir = dir;
  volt8_checkpoint *checkpoint = NULL;
  cr_assert_eq(volt8_load_options_read(NULL, &options, &read), VOLT8_OK);
  cr_assert_eq(volt8_checkpoint_open(NULL, &read, &checkpoint), VOLT8_OK, "%s", volt8_last_error(NULL));
  const char *names[3] = {"experts.2.gate_proj.weight", "experts.2.up_proj.weight", "experts.2.down_proj.weight"};
  volt8_expert_tensors good = tensors_of(checkpoint, 2, names);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  cr_assert_eq(volt8_shard_rank_shape(NULL, good.hidden, good.intermediate, 4, 1, 0, &shape), VOLT8_OK);
  expert_out out;
  expert_out_make(&shape, 0x5A, &out);

  volt8_expert_tensors bad = good;
  bad.size = 8;
  expect_refused(&bad, 4, 1, 0, &out, VOLT8_ERR_INVALID_ARGUMENT, "tensors->size is 8");
  bad = good, bad.weight_dtype = "BF16";
  expect_refused(&bad, 4, 1, 0, &out, VOLT8_ERR_INVALID_ARGUMENT, "weight_dtype is \"BF16\": native experts are F8_E4M3");
  expect_refused(&good, 4, 1, 128, &out, VOLT8_ERR_INVALID_ARGUMENT, "weight_dtype is \"F8_E4M3\": online quantization");
  bad = good, bad.scale_dtype = "F8_E4M3";
  expect_refused(&bad, 4, 1, 0, &out, VOLT8_ERR_INVALID_ARGUMENT, "scale_dtype is \"F8_E4M3\"");
  bad = good, bad.scale_dtype = NULL;
  expect_refused(&bad, 4, 1, 0, &out, VOLT8_ERR_INVALID_ARGUMENT, "scale_dtype is NULL");
  bad = good, bad.scales[2] = NULL;
  expect_refused(&bad, 4, 1, 0, &out, VOLT8_ERR_INVALID_ARGUMENT, "experts.2.down_proj.weight: the scale grid is NULL");
  bad = good, bad.hidden = 250;
  expect_refused(&bad, 4, 1, 0, &out, VOLT8_ERR_INVALID_ARGUMENT, "hidden is 250");
  expect_refused(&good, 3, 0, 0, &out, VOLT8_ERR_INVALID_ARGUMENT, "does not divide into 3");
  expect_refused(&good, 4, 4, 0, &out, VOLT8_ERR_INVALID_ARGUMENT, "tp_rank 4 is outside [0, tp_size = 4)");
  expect_refused(&good, 4, 1, 64, &out, VOLT8_ERR_INVALID_ARGUMENT, "online_block_n is 64");
  volt8_host_experts no_arrays = out.arrays;
  no_arrays.s2 = NULL;
  cr_assert_eq(volt8_expert_shard_host(NULL, &good, 4, 1, 0, &no_arrays), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(NULL), "out->s2 is NULL"), "%s", volt8_last_error(NULL));
  cr_assert_eq(volt8_expert_shard_host(NULL, NULL, 4, 1, 0, &out.arrays), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_eq(volt8_shard_rank_shape(NULL, 256, 640, 4, 1, 0, NULL), VOLT8_ERR_INVALID_ARGUMENT);

  /* A NaN code in rank 1's rows of up (rows 160..319): named by the caller's tensor name, out untouched. */
  size_t weight_bytes = (size_t)good.intermediate * (size_t)good.hidden;
  uint8_t *up = malloc(weight_bytes);
  cr_assert_not_null(up);
  memcpy(up, good.weights[1], weight_bytes);
  up[200 * (size_t)good.hidden + 3] = 0x7F;
  bad = good, bad.weights[1] = up;
  expect_refused(&bad, 4, 1, 0, &out, VOLT8_ERR_FORMAT, "experts.2.up_proj.weight");
  cr_assert_eq(volt8_expert_shard_host(NULL, &bad, 4, 2, 0, &out.arrays), VOLT8_OK, "rank 2 does not hold row 200: %s",
               volt8_last_error(NULL));
  free(up);
  free(out.block);
  volt8_checkpoint_close(checkpoint);
}

/* The ABI misuse suite's sizes, for both entries: every wrong size field and out-of-range value is
 * refused with a message, and nothing is written. */
Test(expert_shard, wrong_sizes_and_ranges_are_refused) {
  char dir[4096];
  fixture("fp8_runtime_names", dir, sizeof dir);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT, read;
  options.checkpoint_dir = dir;
  volt8_checkpoint *checkpoint = NULL;
  cr_assert_eq(volt8_load_options_read(NULL, &options, &read), VOLT8_OK);
  cr_assert_eq(volt8_checkpoint_open(NULL, &read, &checkpoint), VOLT8_OK, "%s", volt8_last_error(NULL));
  volt8_expert_tensors good = tensors_of(checkpoint, 0, NULL);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  cr_assert_eq(volt8_shard_rank_shape(NULL, good.hidden, good.intermediate, 1, 0, 0, &shape), VOLT8_OK);
  expert_out out;
  expert_out_make(&shape, 0x3C, &out);
  const size_t sizes[] = {0, 1, 7, sizeof(volt8_expert_tensors) + 1, sizeof(volt8_expert_tensors) + 4096, SIZE_MAX};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    volt8_expert_tensors bad = good;
    bad.size = sizes[i];
    expect_refused(&bad, 1, 0, 0, &out, VOLT8_ERR_INVALID_ARGUMENT, "tensors->size");
    volt8_host_experts arrays = out.arrays;
    arrays.size = sizes[i] == sizeof(volt8_expert_tensors) + 1 ? sizeof(volt8_host_experts) + 1 : sizes[i];
    cr_assert_eq(volt8_expert_shard_host(NULL, &good, 1, 0, 0, &arrays), VOLT8_ERR_INVALID_ARGUMENT, "out size %zu",
                 arrays.size);
    cr_assert(strstr(volt8_last_error(NULL), "out->size is"), "%s", volt8_last_error(NULL));
  }
  const struct { int32_t hidden, intermediate, tp_size, tp_rank, block; const char *named; } ranges[] = {
      {0, 640, 1, 0, 0, "hidden is 0"},          {-16, 640, 1, 0, 0, "hidden is -16"},
      {INT32_MAX, 640, 1, 0, 0, "hidden is"},    {256, 0, 1, 0, 0, "intermediate is 0"},
      {256, -640, 1, 0, 0, "intermediate is"},   {256, 640, 0, 0, 0, "tp_size = 0"},
      {256, 640, -4, 0, 0, "tp_size = -4"},      {256, 640, 4, -1, 0, "tp_rank -1"},
      {256, 640, 4, INT32_MAX, 0, "tp_rank"},     {256, 640, INT32_MAX, 0, 0, "does not divide"},
      {256, 640, 1, 0, -1, "online_block_n is -1"}, {256, 640, 1, 0, INT32_MAX, "online_block_n is"},
      {256, 640, 80, 0, 0, "not a multiple of 16"},
  };
  for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
    volt8_moe_shape untouched = shape;
    cr_assert_eq(volt8_shard_rank_shape(NULL, ranges[i].hidden, ranges[i].intermediate, ranges[i].tp_size,
                                        ranges[i].tp_rank, ranges[i].block, &untouched),
                 VOLT8_ERR_INVALID_ARGUMENT, "case %zu accepted", i);
    cr_assert(strstr(volt8_last_error(NULL), ranges[i].named), "case %zu: \"%s\" does not say \"%s\"", i,
              volt8_last_error(NULL), ranges[i].named);
    cr_assert(memcmp(&untouched, &shape, sizeof shape) == 0, "case %zu: the shape was written", i);
    volt8_expert_tensors bad = good;
    bad.hidden = ranges[i].hidden, bad.intermediate = ranges[i].intermediate;
    if (bad.hidden == good.hidden && bad.intermediate == good.intermediate)
      expect_refused(&bad, ranges[i].tp_size, ranges[i].tp_rank, ranges[i].block, &out, VOLT8_ERR_INVALID_ARGUMENT,
                     ranges[i].named);
  }
  free(out.block);
  volt8_checkpoint_close(checkpoint);
}
