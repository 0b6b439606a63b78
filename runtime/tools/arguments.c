/* The text of the tools' arguments: whole numbers, archs, paths and shapes, each read one strict way
 * (tools.h), so that every command refuses the same texts with the same words. */
#include "tools/tools.h"

#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx_internal.h"

volt8_tools_number volt8_tools_parse_number_n(const char *text, size_t length, long low, long high, long *out) {
  size_t first = length > 0 && text[0] == '-';
  if (first == length) return VOLT8_TOOLS_NOT_A_NUMBER;
  long value = 0;
  int overflow = 0;
  for (size_t i = first; i < length; i++) {
    if (text[i] < '0' || text[i] > '9') return VOLT8_TOOLS_NOT_A_NUMBER;
    int digit = text[i] - '0';
    if (value > (LONG_MAX - digit) / 10) overflow = 1;
    else value = value * 10 + digit;
  }
  /* a negative text only ever reads as below a range that starts at 0 or above */
  if (overflow || (first && low >= 0)) return VOLT8_TOOLS_OUT_OF_RANGE;
  if (first) value = -value;
  if (value < low || value > high) return VOLT8_TOOLS_OUT_OF_RANGE;
  *out = value;
  return VOLT8_TOOLS_NUMBER_OK;
}

volt8_tools_number volt8_tools_parse_number(const char *text, long low, long high, long *out) {
  return volt8_tools_parse_number_n(text, strlen(text), low, high, out);
}

static void say(char *error, size_t error_size, const char *format, ...) __attribute__((format(printf, 3, 4)));
static void say(char *error, size_t error_size, const char *format, ...) {
  if (!error || error_size == 0) return;
  va_list args;
  va_start(args, format);
  vsnprintf(error, error_size, format, args);
  va_end(args);
}

int volt8_tools_flag_number(const char *flag, const char *text, const char *what, long low, long high, int32_t *out,
                            char *error, size_t error_size) {
  long value = 0;
  volt8_tools_number verdict = volt8_tools_parse_number(text, low, high, &value);
  if (verdict == VOLT8_TOOLS_NUMBER_OK) {
    *out = (int32_t)value;
    return 0;
  }
  if (verdict == VOLT8_TOOLS_OUT_OF_RANGE)
    say(error, error_size, "%s %s is not a valid %s (a %s is a whole number in %ld..%ld)", flag, text, what, what, low,
        high);
  else
    say(error, error_size, "%s \"%s\" is not a whole number (a %s is a whole number in %ld..%ld)", flag, text, what, low,
        high);
  return -1;
}

/* Longest part of a bad item a message quotes. */
#define QUOTED_ITEM_BYTES 40

/* What a list's items are, for its messages. */
typedef struct number_list_rule {
  const char *flag, *what; /* "--m", "token count" */
  long low, high;
  const char *bound; /* why `high`, or NULL */
} number_list_rule;

static int refuse_list(const number_list_rule *rule, char *error, size_t error_size, const char *format, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse_list(const number_list_rule *rule, char *error, size_t error_size, const char *format, ...) {
  char what_is_wrong[128];
  va_list args;
  va_start(args, format);
  vsnprintf(what_is_wrong, sizeof what_is_wrong, format, args);
  va_end(args);
  say(error, error_size, "%s: %s (%ss are whole numbers in %ld..%ld separated by single commas%s%s)", rule->flag,
      what_is_wrong, rule->what, rule->low, rule->high, rule->bound ? "; " : "", rule->bound ? rule->bound : "");
  return -1;
}

static int compare_values(const void *a, const void *b) {
  int32_t left = *(const int32_t *)a, right = *(const int32_t *)b;
  return (left > right) - (left < right);
}

/* `count`, or -1 with a message naming the first value the list gives twice: every list of the
 * command line is a set (TP sizes, token counts), so a repeat is a slip, never meant. */
static int refuse_repeats(const number_list_rule *rule, const int32_t *values, int32_t count, char *error,
                          size_t error_size) {
  if (count < 2) return count;
  int32_t *sorted = malloc((size_t)count * sizeof *sorted);
  if (!sorted) return refuse_list(rule, error, error_size, "no memory to read %d %ss", (int)count, rule->what);
  memcpy(sorted, values, (size_t)count * sizeof *sorted);
  qsort(sorted, (size_t)count, sizeof *sorted, compare_values);
  int32_t repeated = 0;
  for (int32_t i = 1; i < count && !repeated; i++)
    if (sorted[i] == sorted[i - 1]) repeated = sorted[i];
  free(sorted);
  if (!repeated) return count;
  int32_t first = -1, second = -1;
  for (int32_t i = 0; i < count && second < 0; i++)
    if (values[i] == repeated) *(first < 0 ? &first : &second) = i;
  return refuse_list(rule, error, error_size, "lists %d twice (items %d and %d; each %s once)", (int)repeated,
                     (int)first + 1, (int)second + 1, rule->what);
}

static int read_number_list(const number_list_rule *rule, const char *text, int32_t *values, int32_t capacity,
                            char *error, size_t error_size) {
  if (!*text) return refuse_list(rule, error, error_size, "names no %s", rule->what);
  int32_t count = 0;
  for (const char *item = text;; item++) {
    size_t length = strcspn(item, ",");
    int shown = length > QUOTED_ITEM_BYTES ? QUOTED_ITEM_BYTES : (int)length;
    const char *more = length > QUOTED_ITEM_BYTES ? "..." : "";
    long value = 0;
    if (count == capacity)
      return refuse_list(rule, error, error_size, "lists more than %d %ss", (int)capacity, rule->what);
    if (length == 0) return refuse_list(rule, error, error_size, "item %d is empty", (int)count + 1);
    if (strspn(item, "0123456789") < length)
      return refuse_list(rule, error, error_size, "item %d, \"%.*s%s\", is not a whole number in decimal digits",
                         (int)count + 1, shown, item, more);
    if (item[0] == '0' && length > 1)
      return refuse_list(rule, error, error_size, "item %d, \"%.*s%s\", has a leading zero", (int)count + 1, shown,
                         item, more);
    if (volt8_tools_parse_number_n(item, length, rule->low, rule->high, &value) != VOLT8_TOOLS_NUMBER_OK)
      return refuse_list(rule, error, error_size, "item %d, %.*s%s, is outside %ld..%ld", (int)count + 1, shown, item,
                         more, rule->low, rule->high);
    values[count++] = (int32_t)value;
    item += length;
    if (!*item) return refuse_repeats(rule, values, count, error, error_size);
  }
}

size_t volt8_tools_list_length(const char *text) {
  size_t items = 1;
  for (const char *c = text; *c; c++) items += *c == ',';
  return items;
}

int volt8_tools_flag_number_list(const char *flag, const char *text, const char *what, long low, long high,
                                 int32_t *values, int32_t capacity, char *error, size_t error_size) {
  const number_list_rule rule = {flag, what, low, high, NULL};
  return read_number_list(&rule, text, values, capacity, error, error_size);
}

int volt8_tools_flag_token_counts(const char *flag, const char *text, int32_t top_k, int32_t *values, int32_t capacity,
                                  char *error, size_t error_size) {
  char bound[128];
  int32_t max_tokens = VOLT8_MAX_ROUTED_PAIRS / top_k;
  snprintf(bound, sizeof bound, "a forward takes at most %d routed pairs: %d tokens at top-k %d",
           VOLT8_MAX_ROUTED_PAIRS, max_tokens, top_k);
  const number_list_rule rule = {flag, "token count", 1, max_tokens, bound};
  return read_number_list(&rule, text, values, capacity, error, error_size);
}

int32_t volt8_tools_parse_arch(const char *text) {
  if (!text) return 0;
  return volt8_parse_arch(text);
}

int volt8_tools_flag_arch(const char *flag, const char *text, int32_t *out, char *error, size_t error_size) {
  int32_t arch = volt8_tools_parse_arch(text);
  if (arch) {
    if (out) *out = arch;
    return 0;
  }
  say(error, error_size, "%s \"%s\" is not an arch (sm_XX, XX a whole number in %d..%d: sm_70, sm_80, sm_90)", flag,
      text, VOLT8_ARCH_MIN, VOLT8_ARCH_MAX);
  return -1;
}

int volt8_tools_flag_path(const char *flag, const char *text, const char *what, char *error, size_t error_size) {
  if (text[0] != '\0') return 0;
  say(error, error_size, "%s \"\" names no %s (give a path)", flag, what);
  return -1;
}

/* 1 when `value` is one the key takes (the kernels' limits, moe/kernels/moe_layout.h). */
static int dimension(long value) { return value >= 16 && value <= VOLT8_SHAPE_MAX_DIMENSION && value % 16 == 0; }
static int expert_count(long value) { return value >= 1 && value <= VOLT8_SHAPE_MAX_EXPERTS; }
static int block_rows(long value) { return value == 1 || value == 128; }
static int block_columns(long value) { return value == 128; }
static int grid_offset(long value) { return value >= 0 && value < 128 && value % 16 == 0; }
static int first_expert(long value) { return value >= 0 && value < VOLT8_SHAPE_MAX_GLOBAL_EXPERTS; }
static int model_experts(long value) { return value >= 0 && value <= VOLT8_SHAPE_MAX_GLOBAL_EXPERTS; }

typedef struct shape_key {
  const char *name;
  size_t offset;
  int (*valid)(long value);
  const char *rule; /* what the key's values are, for the message */
} shape_key;

#define SHAPE_KEY(field, valid, rule) {#field, offsetof(volt8_moe_shape, field), valid, rule}
static const shape_key SHAPE_KEYS[] = {
    SHAPE_KEY(hidden, dimension, "a multiple of 16 in 16..65536"),
    SHAPE_KEY(intermediate, dimension, "a multiple of 16 in 16..65536"),
    SHAPE_KEY(num_experts, expert_count, "a whole number in 1..2048"),
    SHAPE_KEY(block_n, block_rows, "1 or 128"),
    SHAPE_KEY(block_k, block_columns, "128"),
    SHAPE_KEY(intermediate_offset, grid_offset, "a multiple of 16 in 0..112"),
    SHAPE_KEY(expert_start, first_expert, "a whole number in 0..1048575"),
    SHAPE_KEY(global_experts, model_experts, "a whole number in 0..1048576, 0 for all experts"),
};
#define SHAPE_KEY_COUNT (sizeof SHAPE_KEYS / sizeof SHAPE_KEYS[0])

/* The rules between keys, on the whole shape (keys not in the text keep their value). */
static int check_shape_keys(const volt8_moe_shape *shape, char *error, size_t error_size) {
  if (shape->intermediate_offset >= shape->block_n) {
    say(error, error_size, "intermediate_offset=%d is not below block_n=%d (with block_n=1 the offset is 0)",
        shape->intermediate_offset, shape->block_n);
    return -1;
  }
  if (shape->global_experts == 0 && shape->expert_start != 0) {
    say(error, error_size, "expert_start=%d needs global_experts (the model's expert count)", shape->expert_start);
    return -1;
  }
  if (shape->global_experts != 0 && shape->expert_start > shape->global_experts - shape->num_experts) {
    say(error, error_size, "experts [expert_start=%d, +num_experts=%d) do not fit in global_experts=%d",
        shape->expert_start, shape->num_experts, shape->global_experts);
    return -1;
  }
  return 0;
}

int volt8_tools_parse_shape(const char *text, volt8_moe_shape *shape, char *error, size_t error_size) {
  volt8_moe_shape parsed = *shape;
  int seen[SHAPE_KEY_COUNT] = {0};
  if (!*text) {
    say(error, error_size, "the shape is empty (key=value items, comma-separated)");
    return -1;
  }
  for (const char *item = text;; item++) {
    const char *comma = strchr(item, ',');
    size_t length = comma ? (size_t)(comma - item) : strlen(item);
    int shown = (int)(length > 64 ? 64 : length);
    const char *equals = memchr(item, '=', length);
    if (length == 0) {
      say(error, error_size, "an empty item (a comma at an end, or two in a row)");
      return -1;
    }
    if (!equals) {
      say(error, error_size, "item \"%.*s\" is not key=value", shown, item);
      return -1;
    }
    size_t key_length = (size_t)(equals - item), key = 0;
    while (key < SHAPE_KEY_COUNT &&
           !(strlen(SHAPE_KEYS[key].name) == key_length && memcmp(SHAPE_KEYS[key].name, item, key_length) == 0))
      key++;
    if (key == SHAPE_KEY_COUNT) {
      say(error, error_size, "unknown key \"%.*s\" (keys: hidden, intermediate, num_experts, block_n, block_k, "
          "intermediate_offset, expert_start, global_experts)", (int)(key_length > 64 ? 64 : key_length), item);
      return -1;
    }
    if (seen[key]++) {
      say(error, error_size, "%s is given twice (each key at most once)", SHAPE_KEYS[key].name);
      return -1;
    }
    long value = 0;
    const char *digits = equals + 1;
    size_t digit_count = length - key_length - 1;
    volt8_tools_number verdict = volt8_tools_parse_number_n(digits, digit_count, 0, LONG_MAX, &value);
    int is_number = verdict != VOLT8_TOOLS_NOT_A_NUMBER && digits[0] != '-'; /* digits alone: no sign */
    if (verdict != VOLT8_TOOLS_NUMBER_OK || !is_number || !SHAPE_KEYS[key].valid(value)) {
      int shown_digits = (int)(digit_count > 64 ? 64 : digit_count);
      if (is_number)
        say(error, error_size, "%s=%.*s is not valid (%s is %s)", SHAPE_KEYS[key].name, shown_digits, digits,
            SHAPE_KEYS[key].name, SHAPE_KEYS[key].rule);
      else
        say(error, error_size, "%s=\"%.*s\": the value is not a whole number in digits (%s is %s)",
            SHAPE_KEYS[key].name, shown_digits, digits, SHAPE_KEYS[key].name, SHAPE_KEYS[key].rule);
      return -1;
    }
    *(int32_t *)((char *)&parsed + SHAPE_KEYS[key].offset) = (int32_t)value;
    if (!comma) break;
    item = comma;
  }
  if (check_shape_keys(&parsed, error, error_size) != 0) return -1;
  *shape = parsed;
  return 0;
}

void volt8_tools_format_shape(const volt8_moe_shape *shape, char *buf, size_t buf_size) {
  int used = snprintf(buf, buf_size, "hidden=%d,intermediate=%d,num_experts=%d,block_n=%d,block_k=%d,intermediate_offset=%d",
                      shape->hidden, shape->intermediate, shape->num_experts, shape->block_n, shape->block_k,
                      shape->intermediate_offset);
  /* an expert-parallel rank's range; nothing for a shape of all experts, so such lines read as before */
  if (shape->global_experts > 0 && used >= 0 && (size_t)used < buf_size)
    snprintf(buf + used, buf_size - (size_t)used, ",expert_start=%d,global_experts=%d", shape->expert_start,
             shape->global_experts);
}

int volt8_tools_flag_once(volt8_tools_flags_seen *seen, const char *flag, char *error, size_t error_size) {
  for (int i = 0; i < seen->count; i++)
    if (strcmp(seen->names[i], flag) == 0) {
      say(error, error_size, "%s is given twice (give it once)", flag);
      return -1;
    }
  if (seen->count < (int)(sizeof seen->names / sizeof seen->names[0])) seen->names[seen->count++] = flag;
  return 0;
}
