/* Strict JSON: the checks cJSON does not make. */
#include "core/json_strict.h"

#include "core/ctx_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

size_t volt8_utf8_sequence_length(const unsigned char *text, size_t left) {
  unsigned char lead = text[0];
  if (lead < 0x80) return 1;
  size_t length;
  uint32_t code;
  if (lead >= 0xC2 && lead <= 0xDF) length = 2, code = lead & 0x1F;
  else if (lead >= 0xE0 && lead <= 0xEF) length = 3, code = lead & 0x0F;
  else if (lead >= 0xF0 && lead <= 0xF4) length = 4, code = lead & 0x07;
  else return 0;
  if (length > left) return 0;
  for (size_t i = 1; i < length; i++) {
    if ((text[i] & 0xC0) != 0x80) return 0;
    code = code << 6 | (text[i] & 0x3F);
  }
  if ((length == 3 && (code < 0x800 || (code >= 0xD800 && code <= 0xDFFF))) || (length == 4 && (code < 0x10000 || code > 0x10FFFF)))
    return 0;
  return length;
}

/* Valid UTF-8, no raw control character outside JSON whitespace, and no \u0000 escape (a NUL
 * would silently cut a name short). */
static volt8_status check_text(volt8_ctx *ctx, const char *path, const char *what, const char *text, size_t length) {
  const unsigned char *bytes = (const unsigned char *)text;
  for (size_t i = 0; i < length;) {
    unsigned char byte = bytes[i];
    if (byte < 0x20 && byte != '\t' && byte != '\n' && byte != '\r')
      return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: %s holds control byte 0x%02x at offset %zu", path, what, byte, i);
    if (byte == '\\') {
      size_t run = 0;
      while (i + run < length && bytes[i + run] == '\\') run++;
      if (run % 2 == 1 && i + run + 5 <= length && strncasecmp(text + i + run, "u0000", 5) == 0)
        return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: %s holds a NUL character (\\u0000) at offset %zu", path, what, i);
      i += run;
      continue;
    }
    size_t sequence = volt8_utf8_sequence_length(bytes + i, length - i);
    if (sequence == 0) return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: %s is not valid UTF-8 at offset %zu", path, what, i);
    i += sequence;
  }
  return VOLT8_OK;
}

/* An upper bound on the values the text holds, counted before cJSON allocates any: every value
 * but the first follows a ',', '[', '{' or ':' outside strings. */
static size_t count_values(const char *text, size_t length) {
  size_t values = 1;
  int in_string = 0;
  for (size_t i = 0; i < length; i++) {
    char byte = text[i];
    if (in_string) {
      if (byte == '\\') i++;
      else if (byte == '"') in_string = 0;
    } else if (byte == '"') {
      in_string = 1;
    } else if (byte == ',' || byte == '[' || byte == '{' || byte == ':') {
      values++;
    }
  }
  return values;
}

static int compare_keys(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* No object at any depth names a key twice (cJSON keeps both, and lookups see only the first). */
static volt8_status check_unique_keys(volt8_ctx *ctx, const char *path, const char *what, const cJSON *item) {
  for (const cJSON *child = item->child; child; child = child->next) {
    volt8_status status = check_unique_keys(ctx, path, what, child);
    if (status != VOLT8_OK) return status;
  }
  if (!cJSON_IsObject(item) || !item->child || !item->child->next) return VOLT8_OK;
  size_t count = 0;
  for (const cJSON *child = item->child; child; child = child->next) count++;
  const char **keys = malloc(count * sizeof *keys);
  if (!keys) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "%s: out of memory checking the %s's keys", path, what);
  count = 0;
  for (const cJSON *child = item->child; child; child = child->next) keys[count++] = child->string;
  qsort(keys, count, sizeof *keys, compare_keys);
  volt8_status status = VOLT8_OK;
  for (size_t i = 1; i < count && status == VOLT8_OK; i++)
    if (strcmp(keys[i - 1], keys[i]) == 0)
      status = volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: %s names key \"%.200s\" twice in one object%s%.200s%s", path, what,
                          keys[i], item->string ? " (in \"" : "", item->string ? item->string : "", item->string ? "\")" : "");
  free(keys);
  return status;
}

volt8_status volt8_json_parse_object(volt8_ctx *ctx, const char *path, const char *what, const char *text, size_t length,
                                     size_t max_values, cJSON **out) {
  *out = NULL;
  if (max_values == 0) max_values = VOLT8_JSON_MAX_VALUES;
  volt8_status status = check_text(ctx, path, what, text, length);
  if (status != VOLT8_OK) return status;
  size_t start = 0;
  while (start < length && (text[start] == ' ' || text[start] == '\t' || text[start] == '\n' || text[start] == '\r')) start++;
  if (start == length || text[start] != '{')
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: %s: the top level is not a JSON object", path, what);
  size_t values = count_values(text, length);
  if (values > max_values)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: %s holds up to %zu JSON values, more than the limit of %zu", path, what,
                      values, max_values);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, length, &end, 0);
  if (!root) {
    size_t at = end ? (size_t)(end - text) : 0;
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: %s is not valid JSON (near offset %zu)", path, what, at);
  }
  for (const char *cursor = end; cursor < text + length; cursor++) {
    if (*cursor != ' ' && *cursor != '\t' && *cursor != '\n' && *cursor != '\r') {
      cJSON_Delete(root);
      return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: %s has trailing characters after its JSON object (offset %zu)", path,
                        what, (size_t)(cursor - text));
    }
  }
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: %s is not a JSON object", path, what);
  }
  status = check_unique_keys(ctx, path, what, root);
  if (status != VOLT8_OK) {
    cJSON_Delete(root);
    return status;
  }
  *out = root;
  return VOLT8_OK;
}
