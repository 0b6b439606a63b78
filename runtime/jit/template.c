/* The template engine of template.h. */
#include "jit/template.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx_internal.h"
#include "core/embedded_files.h"
#include "core/text_buffer.h"
#include "core/work_counts.h"

#define INCLUDE_FOLDER "templates/"

/* What a template is expanded with, and where a failure is reported. */
typedef struct expansion {
  volt8_ctx *ctx;
  const volt8_template_value *values;
  int32_t count;
} expansion;

static const volt8_template_value *find_value(const expansion *with, const char *name, size_t length) {
  for (int32_t i = 0; i < with->count; i++)
    if (strlen(with->values[i].name) == length && strncmp(with->values[i].name, name, length) == 0)
      return &with->values[i];
  return NULL;
}

/* A value as it is written into the source; text holding a newline or "@{" is refused. */
static volt8_status format_value(volt8_ctx *ctx, const volt8_template_value *value, volt8_text_buffer *out) {
  if (!value->text) {
    char number[32];
    snprintf(number, sizeof number, "%" PRId64, value->number);
    volt8_text_append_string(out, number);
    return VOLT8_OK;
  }
  if (strpbrk(value->text, "\r\n") || strstr(value->text, "@{"))
    return volt8_fail(ctx, VOLT8_ERR_CODEGEN, "code generator: substitution value %s holds a newline or '@{'", value->name);
  volt8_text_append_string(out, value->text);
  return VOLT8_OK;
}

static int is_name(const char *name, size_t length) {
  if (length == 0 || !(isalpha((unsigned char)name[0]) || name[0] == '_')) return 0;
  for (size_t i = 1; i < length; i++)
    if (!(isalnum((unsigned char)name[i]) || name[i] == '_')) return 0;
  return 1;
}

/* The FILE of a line "@{include FILE}" (blanks around it allowed; FILE of [A-Za-z0-9_.-]), or 0. */
static int include_name(const char *line, size_t length, const char **name, size_t *name_length) {
  size_t at = 0;
  while (at < length && isspace((unsigned char)line[at])) at++;
  static const char directive[] = "@{include";
  if (length - at < sizeof directive - 1 || strncmp(line + at, directive, sizeof directive - 1) != 0) return 0;
  at += sizeof directive - 1;
  size_t blanks = at;
  while (at < length && isspace((unsigned char)line[at])) at++;
  if (at == blanks) return 0;
  size_t start = at;
  while (at < length && (isalnum((unsigned char)line[at]) || line[at] == '_' || line[at] == '.' || line[at] == '-')) at++;
  if (at == start || at >= length || line[at] != '}') return 0;
  *name = line + start;
  *name_length = at - start;
  for (at++; at < length; at++)
    if (!isspace((unsigned char)line[at])) return 0;
  return 1;
}

/* One line with its @{NAME} substituted. */
static volt8_status expand_line(const expansion *with, const char *line, size_t length, const char *template_path,
                                int line_number, volt8_text_buffer *out) {
  volt8_ctx *ctx = with->ctx;
  size_t start = out->length;
  const char *end = line + length;
  for (const char *at = line; at < end;) {
    const char *open = NULL;
    for (const char *scan = at; scan + 1 < end && !open; scan++)
      if (scan[0] == '@' && scan[1] == '{') open = scan;
    const char *close = open ? memchr(open + 2, '}', (size_t)(end - open - 2)) : NULL;
    if (!open || !close) {
      volt8_text_append(out, at, (size_t)(end - at));
      break;
    }
    volt8_text_append(out, at, (size_t)(open - at));
    const char *name = open + 2;
    size_t name_length = (size_t)(close - name);
    if (!is_name(name, name_length))
      return volt8_fail(ctx, VOLT8_ERR_CODEGEN, "code generator: %s:%d: malformed substitution '@{%.*s}'", template_path,
                        line_number, (int)name_length, name);
    const volt8_template_value *value = find_value(with, name, name_length);
    if (!value)
      return volt8_fail(ctx, VOLT8_ERR_CODEGEN, "code generator: %s:%d: unknown substitution '@{%.*s}'", template_path,
                        line_number, (int)name_length, name);
    volt8_status status = format_value(ctx, value, out);
    if (status != VOLT8_OK) return status;
    at = close + 1;
  }
  if (!out->failed) {
    for (size_t i = start; i + 1 < out->length; i++)
      if (out->data[i] == '@' && out->data[i + 1] == '{')
        return volt8_fail(ctx, VOLT8_ERR_CODEGEN, "code generator: %s:%d: unterminated '@{' substitution", template_path,
                          line_number);
  }
  return VOLT8_OK;
}

/* The template's lines joined by newlines (no final one); includes only at depth 0. */
static volt8_status expand(const expansion *with, const char *text, const char *template_path, int depth,
                           volt8_text_buffer *out) {
  size_t text_length = strlen(text);
  /* Lines end at "\n" (one "\r" before it dropped); a final newline ends the last line, no more. */
  const char *end = text + text_length;
  int line_number = 0;
  for (const char *line = text; line <= end;) {
    const char *newline = memchr(line, '\n', (size_t)(end - line));
    if (!newline && line == end && text_length > 0 && end[-1] == '\n') break;
    size_t length = (size_t)((newline ? newline : end) - line);
    if (length > 0 && line[length - 1] == '\r') length--;
    line_number++;
    if (line_number > 1) volt8_text_append(out, "\n", 1);
    const char *name = NULL;
    size_t name_length = 0;
    volt8_status status = VOLT8_OK;
    if (include_name(line, length, &name, &name_length)) {
      if (depth > 0)
        return volt8_fail(with->ctx, VOLT8_ERR_CODEGEN, "code generator: %s:%d: nested @{include} is not supported",
                          template_path, line_number);
      char path[256];
      snprintf(path, sizeof path, "%s%.*s", INCLUDE_FOLDER, (int)name_length, name);
      const volt8_embedded_file *included = volt8_embedded_find(path);
      if (!included)
        return volt8_fail(with->ctx, VOLT8_ERR_CODEGEN, "code generator: %s:%d: cannot read included template '%s'",
                          template_path, line_number, path);
      char directive[320];
      snprintf(directive, sizeof directive, "#line 1 \"%s\"\n", path);
      volt8_text_append_string(out, directive);
      status = expand(with, included->data, path, depth + 1, out);
      snprintf(directive, sizeof directive, "\n#line %d \"%s\"", line_number + 1, template_path);
      volt8_text_append_string(out, directive);
    } else {
      status = expand_line(with, line, length, template_path, line_number, out);
    }
    if (status != VOLT8_OK) return status;
    if (!newline) break;
    line = newline + 1;
  }
  return VOLT8_OK;
}

static int compare_parameters(const void *a, const void *b) {
  return strcmp(((const volt8_template_value *)a)->name, ((const volt8_template_value *)b)->name);
}

static volt8_status write_header(volt8_ctx *ctx, const char *template_path, const volt8_template_value *parameters,
                                 int32_t count, volt8_text_buffer *out) {
  volt8_template_value *sorted = malloc((count > 0 ? (size_t)count : 1) * sizeof *sorted);
  if (!sorted) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "code generator: out of memory");
  if (count > 0) memcpy(sorted, parameters, (size_t)count * sizeof *sorted);
  qsort(sorted, (size_t)count, sizeof *sorted, compare_parameters);
  char line[512];
  snprintf(line, sizeof line, "// generated from %s by runtime/jit/template.c, do not edit\n// volt8 codegen version %d; ",
           template_path, VOLT8_TEMPLATE_VERSION);
  volt8_text_append_string(out, line);
  volt8_status status = VOLT8_OK;
  for (int32_t i = 0; i < count && status == VOLT8_OK; i++) {
    if (i > 0) volt8_text_append(out, " ", 1);
    volt8_text_append_string(out, sorted[i].name);
    volt8_text_append(out, "=", 1);
    status = format_value(ctx, &sorted[i], out);
  }
  free(sorted);
  snprintf(line, sizeof line, "\n#line 1 \"%s\"\n", template_path);
  volt8_text_append_string(out, line);
  return status;
}

volt8_status volt8_template_source(volt8_ctx *ctx, const char *template_path, const char *template_text,
                                   const volt8_template_value *values, int32_t value_count,
                                   const volt8_template_value *parameters, int32_t parameter_count, char **out_source) {
  if (!template_path || !out_source || value_count < 0 || parameter_count < 0 || (value_count > 0 && !values) ||
      (parameter_count > 0 && !parameters))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_template_source: NULL argument or negative count");
  *out_source = NULL;
  volt8_count_codegen_run();
  if (!template_text) {
    const volt8_embedded_file *file = volt8_embedded_find(template_path);
    if (!file)
      return volt8_fail(ctx, VOLT8_ERR_CODEGEN, "code generator: cannot read template '%s'", template_path);
    template_text = file->data;
  }
  volt8_text_buffer out = {0};
  expansion with = {ctx, values, value_count};
  volt8_status status = write_header(ctx, template_path, parameters, parameter_count, &out);
  if (status == VOLT8_OK) status = expand(&with, template_text, template_path, 0, &out);
  if (status == VOLT8_OK) volt8_text_append(&out, "\n", 1);
  char *source = volt8_text_take(&out);
  if (status == VOLT8_OK && !source)
    status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "code generator: out of memory for the source of %s", template_path);
  if (status != VOLT8_OK) {
    free(source);
    return status;
  }
  *out_source = source;
  return VOLT8_OK;
}

volt8_status volt8_template_expand_text(volt8_ctx *ctx, const char *template_path, const char *template_text,
                                        const char *const *keys, const char *const *values, int32_t count,
                                        char **out_source) {
  if (!template_path || !out_source || count < 0 || (count > 0 && (!keys || !values)))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_template_expand_text: template_path, out_source, keys or values is NULL");
  *out_source = NULL;
  volt8_template_value *items = calloc(count > 0 ? (size_t)count : 1, sizeof *items);
  if (!items) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "code generator: out of memory");
  volt8_status status = VOLT8_OK;
  for (int32_t i = 0; i < count && status == VOLT8_OK; i++) {
    if (!keys[i] || !values[i])
      status = volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_template_expand_text: key or value %d is NULL", i);
    items[i] = (volt8_template_value){keys[i], values[i], 0};
  }
  if (status == VOLT8_OK)
    status = volt8_template_source(ctx, template_path, template_text, items, count, items, count, out_source);
  free(items);
  return status;
}
