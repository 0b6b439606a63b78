/* Fuzz target: the text of the command line's --shape and numbers (runtime/tools/arguments.c).
 *
 * Byte 0 picks the shape the text is read onto (the default, a block_n=1 shape, an expert-parallel
 * rank); the rest is the text, cut at its first NUL as an argument is. A text the parser accepts is
 * key=digits items, comma-separated, each key known and given once (checked here by a reading of
 * its own), sets exactly those keys, gives a shape the layout check of the library accepts, and
 * formats back to a text that reads to the same shape. A refused text leaves the shape as it was
 * and says why, however small the message buffer. The number readers are checked on the same text:
 * what they accept is digits alone and in range. */
#include "fuzz_common.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"

static const char *const KEYS[] = {"hidden", "intermediate", "num_experts", "block_n",
                                   "block_k", "intermediate_offset", "expert_start", "global_experts"};
#define KEY_COUNT 8

static int32_t *field_of(volt8_moe_shape *shape, int key) {
  int32_t *fields[KEY_COUNT] = {&shape->hidden,  &shape->intermediate,        &shape->num_experts,  &shape->block_n,
                                &shape->block_k, &shape->intermediate_offset, &shape->expert_start, &shape->global_experts};
  return fields[key];
}

/* The shape an accepted text must give: `base` with each item's key set to its digits; 0 when the
 * text is not key=digits items with known keys, each once. */
static int expected_shape(const char *text, const volt8_moe_shape *base, volt8_moe_shape *out) {
  *out = *base;
  int seen[KEY_COUNT] = {0};
  if (!*text) return 0;
  for (const char *item = text;;) {
    size_t length = strcspn(item, ",");
    const char *equals = memchr(item, '=', length);
    if (!equals || equals == item) return 0;
    size_t key_length = (size_t)(equals - item), digits = length - key_length - 1;
    int key = 0;
    while (key < KEY_COUNT && !(strlen(KEYS[key]) == key_length && memcmp(KEYS[key], item, key_length) == 0)) key++;
    if (key == KEY_COUNT || seen[key]++ || digits == 0) return 0;
    int64_t value = 0; /* held at 2^31 once past it: no key takes so much */
    for (size_t i = 0; i < digits; i++) {
      char c = equals[1 + i];
      if (c < '0' || c > '9') return 0;
      value = value * 10 + (c - '0');
      if (value > INT32_MAX) value = (int64_t)INT32_MAX + 1;
    }
    if (value > INT32_MAX) return 0;
    *field_of(out, key) = (int32_t)value;
    if (!item[length]) return 1;
    item += length + 1;
  }
}

static void check_ranges(const volt8_moe_shape *shape) {
  fuzz_require(shape->hidden >= 16 && shape->hidden <= 65536 && shape->hidden % 16 == 0, "hidden out of range", NULL);
  fuzz_require(shape->intermediate >= 16 && shape->intermediate <= 65536 && shape->intermediate % 16 == 0,
               "intermediate out of range", NULL);
  fuzz_require(shape->num_experts >= 1 && shape->num_experts <= 2048, "num_experts out of range", NULL);
  fuzz_require((shape->block_n == 1 || shape->block_n == 128) && shape->block_k == 128, "block out of range", NULL);
  fuzz_require(shape->intermediate_offset >= 0 && shape->intermediate_offset < shape->block_n &&
                   shape->intermediate_offset % 16 == 0,
               "intermediate_offset out of range", NULL);
  fuzz_require(shape->global_experts == 0 ? shape->expert_start == 0
                                          : shape->expert_start >= 0 &&
                                                shape->expert_start + shape->num_experts <= shape->global_experts,
               "expert range outside global_experts", NULL);
}

static void check_shape(const char *text, const volt8_moe_shape *base) {
  volt8_moe_shape shape = *base;
  char error[512];
  error[0] = '\0';
  int result = volt8_tools_parse_shape(text, &shape, error, sizeof error);
  fuzz_require(result == 0 || result == -1, "result neither 0 nor -1", text);
  fuzz_require(memchr(error, '\0', sizeof error) != NULL, "message not terminated", text);
  /* the same verdict whatever room the message has */
  for (size_t room = 0; room < 12; room += 5) {
    volt8_moe_shape again = *base;
    char small[12];
    memset(small, 'x', sizeof small);
    fuzz_require(volt8_tools_parse_shape(text, &again, room ? small : NULL, room) == result, "verdict depends on the "
                 "message buffer", text);
    if (room) fuzz_require(small[room] == 'x', "message overran its buffer", text);
    if (room && result != 0) fuzz_require(memchr(small, '\0', room) != NULL, "message not terminated in its room", text);
    fuzz_require(memcmp(&again, &shape, sizeof shape) == 0, "shape depends on the message buffer", text);
  }
  volt8_moe_shape expected;
  int grammatical = expected_shape(text, base, &expected);
  if (result != 0) {
    fuzz_require(memcmp(&shape, base, sizeof shape) == 0, "a refused text changed the shape", text);
    fuzz_require(error[0] != '\0', "refused without a message", text);
    return;
  }
  fuzz_require(grammatical, "accepted a text that is not key=digits items, each key once", text);
  fuzz_require(memcmp(&shape, &expected, sizeof shape) == 0, "accepted text set other values", text);
  check_ranges(&shape);
  volt8_moe_dims dims;
  fuzz_require(volt8_moe_dims_compute(fuzz_ctx(), &shape, &dims) == VOLT8_OK, "the library refuses an accepted shape",
               volt8_last_error(fuzz_ctx()));
  char formatted[256];
  volt8_tools_format_shape(&shape, formatted, sizeof formatted);
  volt8_moe_shape back = VOLT8_MOE_SHAPE_INIT;
  fuzz_require(volt8_tools_parse_shape(formatted, &back, error, sizeof error) == 0, "formatted text refused", error);
  fuzz_require(memcmp(&back, &shape, sizeof shape) == 0, "formatted text reads back otherwise", formatted);
}

static void check_numbers(const char *text) {
  long value = 0;
  volt8_tools_number verdict = volt8_tools_parse_number(text, 1, 4096, &value);
  size_t digits = strspn(text, "0123456789");
  if (verdict == VOLT8_TOOLS_NUMBER_OK)
    fuzz_require(digits > 0 && text[digits] == '\0' && value >= 1 && value <= 4096 && value == strtol(text, NULL, 10),
                 "a number that is not digits alone in range", text);
  if (digits > 0 && text[digits] == '\0' && digits < 10) {
    long plain = strtol(text, NULL, 10);
    fuzz_require((verdict == VOLT8_TOOLS_NUMBER_OK) == (plain >= 1 && plain <= 4096), "digits in range refused", text);
  }
  int32_t values[8];
  char error[256];
  int32_t count = volt8_tools_flag_number_list("--m", text, "token count", 1, 65535, values, 8, error, sizeof error);
  fuzz_require(count == -1 || (count >= 1 && count <= 8), "list count", text);
  for (int32_t i = 0; i < count; i++) fuzz_require(values[i] >= 1 && values[i] <= 65535, "list value out of range", text);
  if (count > 0) fuzz_require(strspn(text, "0123456789,") == strlen(text), "a list that is not digits and commas", text);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  volt8_moe_shape bases[3] = {VOLT8_MOE_SHAPE_INIT, VOLT8_MOE_SHAPE_INIT, VOLT8_MOE_SHAPE_INIT};
  bases[1].block_n = 1, bases[1].intermediate_offset = 0;
  bases[2].num_experts = 8, bases[2].expert_start = 8, bases[2].global_experts = 32;
  char *text = fuzz_strndup(data + 1, size - 1);
  fuzz_require(text != NULL, "malloc", NULL);
  check_shape(text, &bases[data[0] % 3]);
  check_numbers(text);
  free(text);
  return 0;
}
