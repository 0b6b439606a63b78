/* Fuzz target: volt8_forward_describe with a context and a shape (no device), as `volt8 list --choice`,
 * the bench and the tuner call it.
 *
 * The input is a byte stream: the shape struct's size (8..48 bytes), each of its fields (a byte picks a
 * value near the library's limits, or four raw bytes follow), the token count and top-k (the same
 * way), the target arch and the output struct's size (8 .. sizeof). The shape and the output sit in
 * heap blocks of exactly their sizes, so ASan catches a read or write of one byte past either.
 * Invariants: a shape of any size but sizeof(volt8_moe_shape) is refused naming the entry and the
 * size; a shape the library's own check refuses, and counts outside 1.. with at most 2^30 routed
 * pairs, are refused; anything else is described: the variants are of their op, the origins say
 * where they came from, and the same call again gives the same bytes. A refused call leaves the
 * output as it was. */
#define VOLT8_EXPERIMENTAL_API 1
#include "fuzz_common.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/kernels/moe_layout.h"

static int32_t next_raw(fuzz_reader *in) {
  uint32_t value = 0;
  for (int i = 0; i < 4; i++) value |= (uint32_t)fuzz_next_byte(in) << (8 * i);
  return (int32_t)value;
}

/* A byte below 224 picks one of `values`; else four raw bytes follow. */
static int32_t next_value(fuzz_reader *in, const int32_t *values, size_t count) {
  uint8_t pick = fuzz_next_byte(in);
  return pick < 224 ? values[pick % count] : next_raw(in);
}

static volt8_ctx *ctx_for(int arch) {
  static volt8_ctx *contexts[3];
  static const char *const archs[3] = {"sm_70", "sm_80", "sm_90"};
  if (!contexts[arch]) {
    volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
    options.device = -1;
    options.cache_disable = 1;
    options.target_arch = archs[arch];
    fuzz_require(volt8_ctx_create(&options, &contexts[arch]) == VOLT8_OK, "volt8_ctx_create", volt8_last_error(NULL));
  }
  return contexts[arch];
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_reader in = {data, size, 0};
  static const int32_t dims[] = {16, 32, 128, 160, 256, 640, 2560, 7168, 65536, 65552, 0, -16, 8, 24};
  static const int32_t experts[] = {1, 8, 64, 256, 512, 2048, 2049, 0, -1, 160, 128};
  static const int32_t blocks[] = {128, 1, 64, 0, -128};
  static const int32_t offsets[] = {0, 32, 64, 96, 112, 128, 16, -16, 8};
  static const int32_t starts[] = {0, 8, 128, 255, 256, -1};
  static const int32_t globals[] = {0, 256, 512, 64, 16, 2048, -1};
  static const int32_t tokens[] = {1, 2, 8, 64, 128, 256, 1024, 4096, 16384, 65536, 1 << 20, 1 << 26, 0, -1,
                                   2147483647};
  static const int32_t top_ks[] = {1, 2, 8, 10, 16, 64, 65535, 65536, 0, -1, 2147483647};

  size_t shape_bytes = 8 + fuzz_next_byte(&in) % 41;
  volt8_moe_shape full = VOLT8_MOE_SHAPE_INIT;
  full.hidden = next_value(&in, dims, sizeof dims / sizeof dims[0]);
  full.intermediate = next_value(&in, dims, sizeof dims / sizeof dims[0]);
  full.num_experts = next_value(&in, experts, sizeof experts / sizeof experts[0]);
  full.block_n = next_value(&in, blocks, sizeof blocks / sizeof blocks[0]);
  full.block_k = next_value(&in, blocks, sizeof blocks / sizeof blocks[0]);
  full.intermediate_offset = next_value(&in, offsets, sizeof offsets / sizeof offsets[0]);
  full.expert_start = next_value(&in, starts, sizeof starts / sizeof starts[0]);
  full.global_experts = next_value(&in, globals, sizeof globals / sizeof globals[0]);
  int32_t num_tokens = next_value(&in, tokens, sizeof tokens / sizeof tokens[0]);
  int32_t top_k = next_value(&in, top_ks, sizeof top_ks / sizeof top_ks[0]);
  int arch = fuzz_next_byte(&in) % 3;
  static const size_t info_sizes[] = {sizeof(size_t), 12, offsetof(volt8_forward_info, gate_up) + 4,
                                      offsetof(volt8_forward_info, down), offsetof(volt8_forward_info, gate_up_origin),
                                      offsetof(volt8_forward_info, down_origin) + 9, sizeof(volt8_forward_info) - 1,
                                      sizeof(volt8_forward_info)};
  size_t info_bytes = info_sizes[fuzz_next_byte(&in) % (sizeof info_sizes / sizeof info_sizes[0])];

  full.size = shape_bytes;
  unsigned char *shape_block = malloc(shape_bytes);
  fuzz_require(shape_block != NULL, "malloc", NULL);
  memcpy(shape_block, &full, shape_bytes < sizeof full ? shape_bytes : sizeof full);
  if (shape_bytes > sizeof full) memset(shape_block + sizeof full, 0xA5, shape_bytes - sizeof full);
  unsigned char *info_block = malloc(info_bytes), *before = malloc(info_bytes), *again = malloc(info_bytes);
  fuzz_require(info_block && before && again, "malloc", NULL);
  for (size_t i = 0; i < info_bytes; i++) info_block[i] = (unsigned char)(0x5A ^ i);
  memcpy(info_block, &info_bytes, sizeof info_bytes);
  memcpy(before, info_block, info_bytes);

  volt8_ctx *ctx = ctx_for(arch);
  const volt8_moe_shape *shape = (const volt8_moe_shape *)shape_block;
  volt8_forward_info *info = (volt8_forward_info *)info_block;
  volt8_status status = volt8_forward_describe(ctx, shape, NULL, num_tokens, top_k, info);
  const char *message = volt8_last_error(ctx);
  char detail[600];
  snprintf(detail, sizeof detail, "shape %zu bytes, H=%d I=%d E=%d block %dx%d off %d range %d/%d, M=%d top_k=%d, "
           "info %zu bytes: %s: %s", shape_bytes, full.hidden, full.intermediate, full.num_experts, full.block_n,
           full.block_k, full.intermediate_offset, full.expert_start, full.global_experts, num_tokens, top_k,
           info_bytes, volt8_status_string(status), status == VOLT8_OK ? "" : message);

  int counts_ok = num_tokens >= 1 && top_k >= 1 && top_k <= (1 << 30) / num_tokens;
  int shape_ok = 0;
  if (shape_bytes == sizeof(volt8_moe_shape)) {
    volt8_ctx *scratch = fuzz_ctx();
    shape_ok = volt8_moe_shape_check(scratch, &full) == VOLT8_OK;
  }
  if (shape_bytes != sizeof(volt8_moe_shape) && counts_ok) {
    char size_text[32];
    snprintf(size_text, sizeof size_text, "size is %zu", shape_bytes);
    fuzz_require(status == VOLT8_ERR_INVALID_ARGUMENT && strstr(message, "volt8_forward_describe") &&
                     strstr(message, size_text),
                 "a shape of another size was not refused by name and size", detail);
  }
  if (!counts_ok || !shape_ok) fuzz_require(status == VOLT8_ERR_INVALID_ARGUMENT, "bad input not refused", detail);
  if (status != VOLT8_OK) {
    fuzz_require(message[0] != '\0', "refused without a message", detail);
    fuzz_require(memcmp(info_block, before, info_bytes) == 0, "a refused call wrote its output", detail);
  } else {
    fuzz_require(shape_ok && counts_ok, "described what should be refused", detail);
    volt8_forward_info whole = VOLT8_FORWARD_INFO_INIT;
    fuzz_require(volt8_forward_describe(ctx, shape, NULL, num_tokens, top_k, &whole) == VOLT8_OK,
                 "the full-size output refused where the short one was not", detail);
    fuzz_require(strncmp(whole.gate_up, "gate_up.", 8) == 0 && strncmp(whole.down, "down.", 5) == 0,
                 "variants not of their op", whole.gate_up);
    fuzz_require(memchr(whole.gate_up_origin, '\0', sizeof whole.gate_up_origin) && whole.gate_up_origin[0] &&
                     memchr(whole.down_origin, '\0', sizeof whole.down_origin) && whole.down_origin[0],
                 "an origin is empty or not terminated", detail);
    fuzz_require(whole.pinned == 0 && (whole.single_launch == 0 || whole.single_launch == 1), "flags", detail);
    /* the short output holds the whole one's first bytes, and nothing else */
    fuzz_require(memcmp(info_block + sizeof(size_t), (const char *)&whole + sizeof(size_t),
                        info_bytes - sizeof(size_t)) == 0,
                 "the short output differs from the whole one's start", detail);
    memcpy(again, before, info_bytes);
    fuzz_require(volt8_forward_describe(ctx, shape, NULL, num_tokens, top_k, (volt8_forward_info *)again) == VOLT8_OK &&
                     memcmp(again, info_block, info_bytes) == 0,
                 "the same call described otherwise", detail);
  }
  free(shape_block);
  free(info_block);
  free(before);
  free(again);
  return 0;
}
