/* Fuzz target: the number lists of the command line (runtime/tools/arguments.c), as `volt8 list
 * --choice` and `volt8 bench --m` read their token counts.
 *
 * Bytes 0-1 pick the largest number taken, max_m = 1 + (their value mod the routed-pair bound), and
 * byte 0 a top-k (1..64) for the token counts of a forward; the rest, up to a NUL (an argument holds
 * none), is the text. An independent reading of the grammar (numbers of decimal digits without a
 * leading zero, in 1..max_m, separated by single commas, none twice) must agree with the reader, for max_m and
 * for the token counts at the top-k (1..2^30 / top-k); an accepted list written back with commas
 * must be the text itself and does not fit in one value fewer; a refused one has a message, also cut
 * safely into a buffer of a few bytes. */
#include "fuzz_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/kernels/moe_layout.h"
#include "tools/tools.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  return 0;
}

static int compare_values(const void *a, const void *b) {
  int64_t left = *(const int64_t *)a, right = *(const int64_t *)b;
  return (left > right) - (left < right);
}

/* 1 when `text` is a list the grammar allows at max_m: each item once (a list is a set). */
static int grammar_accepts(const char *text, int32_t max_m) {
  const char *c = text;
  size_t count = 0, capacity = strlen(text) / 2 + 1;
  int64_t *seen = malloc(capacity * sizeof *seen);
  fuzz_require(seen != NULL, "malloc", NULL);
  int good = 1;
  do {
    if (*c < '1' || *c > '9') {
      good = 0;
      break;
    }
    int64_t value = 0;
    for (; *c >= '0' && *c <= '9' && good; c++)
      if ((value = value * 10 + (*c - '0')) > max_m) good = 0;
    if (!good) break;
    seen[count++] = value;
  } while (*c++ == ',');
  good = good && c[-1] == '\0';
  if (good) {
    qsort(seen, count, sizeof *seen, compare_values);
    for (size_t i = 1; i < count && good; i++) good = seen[i] != seen[i - 1];
  }
  free(seen);
  return good;
}

/* The checks of one reading: `count` is the reader's answer for `text` at max_m, with `capacity`
 * values of room (the list's length) in `values`. */
static void check_reading(const char *text, int32_t max_m, int32_t count, const int32_t *values, const char *error) {
  int accepted = grammar_accepts(text, max_m);
  fuzz_require((count >= 1) == accepted, accepted ? "a valid list refused" : "an invalid list accepted",
               count >= 1 ? text : error);
  fuzz_require(count >= 1 || count == -1, "a count that is neither a list's nor -1", text);
  if (count < 1) {
    fuzz_require(error[0] != '\0' && strlen(error) < 512, "a refusal without a message", text);
    return;
  }
  size_t length = strlen(text), used = 0;
  char *written = malloc(length + 16);
  fuzz_require(written != NULL, "malloc", NULL);
  for (int32_t i = 0; i < count && used <= length; i++) {
    fuzz_require(values[i] >= 1 && values[i] <= max_m, "a count outside 1..max_m", text);
    used += (size_t)snprintf(written + used, length + 16 - used, "%s%d", i ? "," : "", values[i]);
  }
  fuzz_require(used == length && strcmp(written, text) == 0, "the counts written back differ from the text", text);
  free(written);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  int32_t max_m = 1 + (int32_t)(((uint32_t)data[0] << 8 | data[1]) % VOLT8_MAX_ROUTED_PAIRS);
  int32_t top_k = 1 + data[0] % 64;
  char *text = fuzz_strndup(data + 2, size - 2); /* ends at the first NUL, as an argument does */
  fuzz_require(text != NULL, "malloc", NULL);
  size_t items = volt8_tools_list_length(text);
  fuzz_require(items >= 1 && items <= strlen(text) + 1, "a list length past the text's commas and one", text);
  int32_t *values = malloc(items * sizeof *values);
  fuzz_require(values != NULL, "malloc", NULL);
  char error[512] = "";
  int32_t count = volt8_tools_flag_number_list("--choice", text, "token count", 1, max_m, values, (int32_t)items,
                                               error, sizeof error);
  check_reading(text, max_m, count, values, error);
  if (count > 1) {
    fuzz_require(volt8_tools_flag_number_list("--choice", text, "token count", 1, max_m, values, count - 1, error,
                                              sizeof error) == -1 && strstr(error, "lists more than"),
                 "a list longer than its room accepted", text);
  } else if (count == -1) {
    char small[6];
    fuzz_require(volt8_tools_flag_number_list("--choice", text, "token count", 1, max_m, values, (int32_t)items,
                                              small, sizeof small) == -1 && strlen(small) < sizeof small,
                 "the refusal into a small buffer", text);
  }
  error[0] = '\0';
  count = volt8_tools_flag_token_counts("--m", text, top_k, values, (int32_t)items, error, sizeof error);
  check_reading(text, VOLT8_MAX_ROUTED_PAIRS / top_k, count, values, error);
  free(values);
  free(text);
  return 0;
}
