/* Fuzz target: volt8_expert_shard_host, the C entry behind the vLLM plugin's ExpertStaging.add (one
 * expert's whole gate, up and down tensors from an engine's loader, sharded for a TP rank, native or
 * quantized at load).
 *
 * The input's first bytes pick the expert's hidden and intermediate sizes, the TP size and rank, the
 * route (online_block_n), the weight and scale dtypes, the struct sizes, the expert's number and
 * whether the scales are fuzzed or all 1; the rest fills the weights (and fuzzed scales), repeated.
 * Every array, and both structs, sit in heap blocks of exactly their size, so ASan catches a byte
 * read or written past one. Invariants: wrong struct sizes, dtypes, routes or ranks are refused; a
 * refused call writes nothing to the output arrays and names the caller's expert where it names
 * one; a native expert with scales of 1 is taken exactly when its rank's slice holds no NaN code, and
 * then the rank's gate and up rows and down columns are its bytes, byte for byte; a call that
 * succeeds gives the same bytes again. */
#define VOLT8_EXPERIMENTAL_API 1
#include "fuzz_common.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/kernels/moe_layout.h"

/* `bytes` bytes from the rest of the input, repeated (zeros when it is empty). */
static void fill(uint8_t *out, size_t bytes, const uint8_t *rest, size_t rest_size, size_t *phase) {
  for (size_t i = 0; i < bytes; i++) out[i] = rest_size ? rest[(*phase)++ % rest_size] : 0;
}

static int is_nan_code(uint8_t code) { return (code & 0x7F) == 0x7F; }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_reader in = {data, size, 0};
  static const int32_t hiddens[] = {16, 32, 128, 144, 256, 0, 8};
  static const int32_t intermediates[] = {32, 64, 128, 160, 256, 320, 48, 0};
  static const int32_t tp_sizes[] = {1, 2, 4, 8, 3, 0};
  static const int32_t blocks[] = {0, 0, 1, 128, 64};
  static const char *const weight_dtypes[] = {"F8_E4M3", "F8_E4M3", "BF16", "F16", "F32", "F8", NULL};
  static const char *const scale_dtypes[] = {"F32", "BF16", "F16", "F8_E4M3", NULL};
  int32_t hidden = hiddens[fuzz_next_byte(&in) % 7], intermediate = intermediates[fuzz_next_byte(&in) % 8];
  int32_t tp_size = tp_sizes[fuzz_next_byte(&in) % 6];
  int32_t tp_rank = (int32_t)(fuzz_next_byte(&in) % 10) - 1;
  int32_t online_block_n = blocks[fuzz_next_byte(&in) % 5];
  const char *weight_dtype = weight_dtypes[fuzz_next_byte(&in) % 7];
  const char *scale_dtype = scale_dtypes[fuzz_next_byte(&in) % 5];
  uint8_t sizes = fuzz_next_byte(&in);
  size_t tensors_bytes = (sizes & 3) == 3 ? sizeof(size_t) * 2 : (sizes & 3) == 2 ? offsetof(volt8_expert_tensors, expert)
                                                                                 : sizeof(volt8_expert_tensors);
  size_t out_bytes = (sizes & 12) == 12 ? sizeof(size_t) : sizeof(volt8_host_experts);
  int32_t expert = (int32_t)fuzz_next_byte(&in) * 9;
  int fuzzed_scales = fuzz_next_byte(&in) & 1;
  const uint8_t *rest = data + in.at;
  size_t rest_size = size - in.at, phase = 0;

  int native = online_block_n == 0;
  int weight_bits = !weight_dtype ? 0 : strcmp(weight_dtype, "F8_E4M3") == 0 ? 8 : strcmp(weight_dtype, "F32") == 0 ? 32
                                    : strcmp(weight_dtype, "F8") == 0 ? 8 : 16;
  int scale_bits = !scale_dtype ? 0 : strcmp(scale_dtype, "F32") == 0 ? 32 : strcmp(scale_dtype, "F8_E4M3") == 0 ? 8 : 16;
  int64_t rows[3] = {intermediate, intermediate, hidden}, cols[3] = {hidden, hidden, intermediate};
  uint8_t *weights[3] = {NULL, NULL, NULL}, *scales[3] = {NULL, NULL, NULL};
  for (int p = 0; p < 3; p++) {
    size_t bytes = (size_t)(rows[p] * cols[p]) * (size_t)(weight_bits ? weight_bits : 8) / 8;
    weights[p] = malloc(bytes ? bytes : 1);
    fuzz_require(weights[p] != NULL, "malloc", NULL);
    fill(weights[p], bytes, rest, rest_size, &phase);
    size_t grid = (size_t)((rows[p] + 127) / 128) * (size_t)((cols[p] + 127) / 128);
    size_t scale_bytes = grid * (size_t)(scale_bits ? scale_bits : 8) / 8;
    scales[p] = malloc(scale_bytes ? scale_bytes : 1);
    fuzz_require(scales[p] != NULL, "malloc", NULL);
    if (fuzzed_scales) {
      fill(scales[p], scale_bytes, rest, rest_size, &phase);
    } else {
      for (size_t g = 0; g < grid; g++) {
        if (scale_bits == 32) memcpy(scales[p] + 4 * g, &(float){1.0f}, 4);
        else if (scale_bits == 16) memcpy(scales[p] + 2 * g, strcmp(scale_dtype, "BF16") == 0 ? "\x80\x3f" : "\x00\x3c", 2);
        else if (scale_bits == 8) scales[p][g] = 0x38;
      }
    }
  }
  volt8_expert_tensors full = VOLT8_EXPERT_TENSORS_INIT;
  full.hidden = hidden;
  full.intermediate = intermediate;
  full.weight_dtype = weight_dtype;
  full.scale_dtype = scale_dtype;
  full.expert = expert;
  static const char *const names[3] = {"fuzz.gate", "fuzz.up", "fuzz.down"};
  for (int p = 0; p < 3; p++) {
    full.weights[p] = weights[p];
    full.scales[p] = scales[p];
    full.names[p] = names[p];
  }
  full.size = tensors_bytes;
  volt8_expert_tensors *tensors = malloc(tensors_bytes);
  fuzz_require(tensors != NULL, "malloc", NULL);
  memcpy(tensors, &full, tensors_bytes);

  /* The output: one expert of the rank's shape, where one can be made. */
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  int shaped = volt8_shard_rank_shape(fuzz_ctx(), hidden, intermediate, tp_size, tp_rank,
                                      online_block_n == 64 ? 0 : online_block_n, &shape) == VOLT8_OK;
  volt8_moe_dims dims = {0};
  if (shaped) volt8_moe_dims_compute(fuzz_ctx(), &shape, &dims);
  size_t array_bytes[4] = {shaped ? (size_t)dims.w13_bytes_per_expert : 1, shaped ? (size_t)dims.s13_elems_per_expert * 2 : 2,
                           shaped ? (size_t)dims.w2_bytes_per_expert : 1, shaped ? (size_t)dims.s2_elems_per_expert * 2 : 2};
  uint8_t *arrays[4], *copies[4];
  for (int i = 0; i < 4; i++) {
    arrays[i] = malloc(array_bytes[i]);
    copies[i] = malloc(array_bytes[i]);
    fuzz_require(arrays[i] && copies[i], "malloc", NULL);
    memset(arrays[i], 0xCD, array_bytes[i]);
  }
  volt8_host_experts out_full = {sizeof out_full, arrays[0], (const uint16_t *)arrays[1], arrays[2],
                                 (const uint16_t *)arrays[3]};
  out_full.size = out_bytes;
  volt8_host_experts *out = malloc(out_bytes);
  fuzz_require(out != NULL, "malloc", NULL);
  memcpy(out, &out_full, out_bytes);

  volt8_status status = volt8_expert_shard_host(NULL, tensors, tp_size, tp_rank, online_block_n, out);
  char message[1100];
  snprintf(message, sizeof message, "%s", volt8_last_error(NULL));
  char detail[1400];
  snprintf(detail, sizeof detail, "H=%d I=%d tp %d/%d block %d %s/%s sizes %zu/%zu expert %d scales %s: %s: %s", hidden,
           intermediate, tp_rank, tp_size, online_block_n, weight_dtype ? weight_dtype : "NULL",
           scale_dtype ? scale_dtype : "NULL", tensors_bytes, out_bytes, expert, fuzzed_scales ? "fuzzed" : "1",
           volt8_status_string(status), status == VOLT8_OK ? "" : message);

  int structs_ok = (tensors_bytes == sizeof full || tensors_bytes == offsetof(volt8_expert_tensors, expert)) &&
                   out_bytes == sizeof(volt8_host_experts);
  int route_ok = native ? weight_dtype && strcmp(weight_dtype, "F8_E4M3") == 0 && scale_bits >= 16
                        : (online_block_n == 1 || online_block_n == 128) && weight_dtype && weight_bits >= 16 &&
                              strcmp(weight_dtype, "F8") != 0;
  if (!structs_ok || !route_ok || !shaped) fuzz_require(status != VOLT8_OK, "bad input taken", detail);
  if (status != VOLT8_OK) {
    fuzz_require(message[0] != '\0', "refused without a message", detail);
    for (int i = 0; i < 4; i++)
      for (size_t b = 0; b < array_bytes[i]; b++)
        fuzz_require(arrays[i][b] == 0xCD, "a refused call wrote the output", detail);
    const char *named = strstr(message, "(expert ");
    if (named) {
      int32_t said = -1;
      sscanf(named, "(expert %d)", &said);
      int32_t wanted = tensors_bytes == sizeof full ? expert : 0;
      fuzz_require(said == wanted, "the message names another expert than the caller's", detail);
    }
  }
  if (structs_ok && route_ok && shaped && native && !fuzzed_scales) {
    /* the rank's slice: gate and up rows [start, start + I), down columns the same */
    int64_t width = shape.intermediate, start = (int64_t)tp_rank * width;
    int nan = 0;
    for (int p = 0; p < 2 && !nan; p++)
      for (int64_t r = start; r < start + width && !nan; r++)
        for (int64_t c = 0; c < hidden && !nan; c++) nan = is_nan_code(weights[p][r * hidden + c]);
    for (int64_t r = 0; r < hidden && !nan; r++)
      for (int64_t c = start; c < start + width && !nan; c++) nan = is_nan_code(weights[2][r * intermediate + c]);
    fuzz_require((status == VOLT8_OK) == !nan, nan ? "a NaN code in the rank's slice was taken"
                                                   : "a good native expert with scales of 1 was refused", detail);
    if (status == VOLT8_OK) {
      for (int p = 0; p < 2; p++)
        for (int64_t r = 0; r < width; r++)
          fuzz_require(memcmp(arrays[0] + ((int64_t)p * width + r) * hidden, weights[p] + (start + r) * hidden,
                              (size_t)hidden) == 0,
                       "a gate or up row is not the checkpoint's", detail);
      for (int64_t r = 0; r < hidden; r++)
        fuzz_require(memcmp(arrays[2] + r * width, weights[2] + r * intermediate + start, (size_t)width) == 0,
                     "a down column is not the checkpoint's", detail);
    }
  }
  if (status == VOLT8_OK) {
    for (int i = 0; i < 4; i++) {
      memcpy(copies[i], arrays[i], array_bytes[i]);
      memset(arrays[i], 0xCD, array_bytes[i]);
    }
    fuzz_require(volt8_expert_shard_host(NULL, tensors, tp_size, tp_rank, online_block_n, out) == VOLT8_OK,
                 "the same call refused the second time", detail);
    for (int i = 0; i < 4; i++)
      fuzz_require(memcmp(copies[i], arrays[i], array_bytes[i]) == 0, "the same call gave other bytes", detail);
    if (!native)
      for (size_t b = 0; b < array_bytes[0]; b++) fuzz_require(!is_nan_code(arrays[0][b]), "a NaN code made at load", detail);
  }
  for (int p = 0; p < 3; p++) {
    free(weights[p]);
    free(scales[p]);
  }
  for (int i = 0; i < 4; i++) {
    free(arrays[i]);
    free(copies[i]);
  }
  free(tensors);
  free(out);
  return 0;
}
