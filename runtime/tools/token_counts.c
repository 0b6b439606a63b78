/* The token-count list parser of token_counts.h. */
#include "tools/token_counts.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest part of a bad item a message quotes. */
#define QUOTED_BYTES 40

static volt8_status refuse(char *error, size_t error_size, volt8_status status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static volt8_status refuse(char *error, size_t error_size, volt8_status status, const char *fmt, ...) {
  if (error && error_size) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(error, error_size, fmt, args);
    va_end(args);
  }
  return status;
}

/* Checks item `number` (text[0, length)) and stores its value; VOLT8_OK or the refusal. */
static volt8_status parse_item(const char *text, size_t length, int32_t number, int32_t max_m, int32_t *out,
                               char *error, size_t error_size) {
  int shown = length > QUOTED_BYTES ? QUOTED_BYTES : (int)length;
  const char *more = length > QUOTED_BYTES ? "..." : "";
  if (length == 0)
    return refuse(error, error_size, VOLT8_ERR_INVALID_ARGUMENT,
                  "item %d is empty", number);
  for (size_t i = 0; i < length; i++)
    if (text[i] < '0' || text[i] > '9')
      return refuse(error, error_size, VOLT8_ERR_INVALID_ARGUMENT,
                    "item %d, \"%.*s%s\", is not a whole number in decimal digits", number, shown,
                    text, more);
  if (text[0] == '0' && length > 1)
    return refuse(error, error_size, VOLT8_ERR_INVALID_ARGUMENT, "item %d, \"%.*s%s\", has a leading zero", number,
                  shown, text, more);
  int64_t value = 0;
  for (size_t i = 0; i < length && value <= max_m; i++) value = value * 10 + (text[i] - '0');
  if (value < 1 || value > max_m)
    return refuse(error, error_size, VOLT8_ERR_INVALID_ARGUMENT, "item %d, %.*s%s, is outside 1..%d", number, shown,
                  text, more, max_m);
  *out = (int32_t)value;
  return VOLT8_OK;
}

volt8_status volt8_tools_parse_token_counts(const char *text, int32_t max_m, int32_t **out_values, int32_t *out_count,
                                            char *error, size_t error_size) {
  if (error && error_size) error[0] = '\0';
  if (!out_values || !out_count)
    return refuse(error, error_size, VOLT8_ERR_INVALID_ARGUMENT, "volt8_tools_parse_token_counts: NULL output");
  *out_values = NULL;
  *out_count = 0;
  if (!text || max_m < 1)
    return refuse(error, error_size, VOLT8_ERR_INVALID_ARGUMENT, "volt8_tools_parse_token_counts: %s",
                  text ? "max_m below 1" : "text is NULL");
  if (!text[0]) return refuse(error, error_size, VOLT8_ERR_INVALID_ARGUMENT, "names no token count");
  size_t items = 1;
  for (const char *c = text; *c; c++) items += *c == ',';
  if (items > INT32_MAX)
    return refuse(error, error_size, VOLT8_ERR_INVALID_ARGUMENT, "lists %zu token counts, more than %d", items,
                  INT32_MAX);
  int32_t *values = malloc(items * sizeof *values);
  if (!values)
    return refuse(error, error_size, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for %zu token counts", items);
  volt8_status status = VOLT8_OK;
  int32_t count = 0;
  for (const char *item = text; status == VOLT8_OK; item++) {
    size_t length = strcspn(item, ",");
    status = parse_item(item, length, count + 1, max_m, &values[count], error, error_size);
    if (status == VOLT8_OK) count++;
    item += length;
    if (!*item) break;
  }
  if (status != VOLT8_OK) {
    free(values);
    return status;
  }
  *out_values = values;
  *out_count = count;
  return VOLT8_OK;
}
