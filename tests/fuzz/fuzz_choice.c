/* Fuzz target: the token-count list of `volt8 list --choice` (runtime/tools/token_counts.c).
 *
 * Bytes 0-1 pick the largest count taken, max_m = 1 + (their value mod the routed-pair bound); the
 * rest, up to a NUL (an argument holds none), is the text. An independent reading of the grammar
 * (counts of decimal digits without a leading zero, in 1..max_m, separated by single commas) must
 * agree with the parser; an accepted list written back with commas must be the text itself; a
 * refused one leaves no list and a message, also cut safely into a buffer of a few bytes. */
#include "fuzz_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/kernels/moe_layout.h"
#include "tools/token_counts.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  return 0;
}

/* 1 when `text` is a list the grammar allows at max_m. */
static int grammar_accepts(const char *text, int32_t max_m) {
  const char *c = text;
  do {
    if (*c < '1' || *c > '9') return 0;
    int64_t value = 0;
    for (; *c >= '0' && *c <= '9'; c++)
      if ((value = value * 10 + (*c - '0')) > max_m) return 0;
  } while (*c++ == ',');
  return c[-1] == '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  int32_t max_m = 1 + (int32_t)(((uint32_t)data[0] << 8 | data[1]) % VOLT8_MAX_ROUTED_PAIRS);
  char *text = fuzz_strndup(data + 2, size - 2); /* ends at the first NUL, as an argument does */
  int32_t *values = NULL, count = -1;
  char error[256];
  volt8_status status = volt8_tools_parse_token_counts(text, max_m, &values, &count, error, sizeof error);
  int accepted = grammar_accepts(text, max_m);
  fuzz_require((status == VOLT8_OK) == accepted, accepted ? "a valid list refused" : "an invalid list accepted",
               status == VOLT8_OK ? text : error);
  if (status == VOLT8_OK) {
    fuzz_require(values != NULL && count >= 1, "an accepted list with no counts", text);
    size_t length = strlen(text), used = 0;
    char *written = malloc(length + 16);
    fuzz_require(written != NULL, "malloc", NULL);
    for (int32_t i = 0; i < count && used <= length; i++) {
      fuzz_require(values[i] >= 1 && values[i] <= max_m, "a count outside 1..max_m", text);
      used += (size_t)snprintf(written + used, length + 16 - used, "%s%d", i ? "," : "", values[i]);
    }
    fuzz_require(used == length && strcmp(written, text) == 0, "the counts written back differ from the text", text);
    free(written);
  } else {
    fuzz_require(status == VOLT8_ERR_INVALID_ARGUMENT, "unexpected status", volt8_status_string(status));
    fuzz_require(values == NULL && count == 0, "a refused list left values", text);
    fuzz_require(error[0] != '\0' && strlen(error) < sizeof error, "a refusal without a message", text);
    char small[6];
    fuzz_require(volt8_tools_parse_token_counts(text, max_m, &values, &count, small, sizeof small) == status &&
                     strlen(small) < sizeof small && values == NULL,
                 "the refusal into a small buffer", text);
  }
  free(values);
  free(text);
  return 0;
}
