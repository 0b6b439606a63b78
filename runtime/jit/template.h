/* The template engine every generated kernel comes from: @{NAME} substitutions and whole-line
 * @{include FILE} directives (FILE read from the library's templates/, one level deep). The escape
 * cannot clash with CUDA's #include or #pragma. Each template line gives one output line and each
 * include is bracketed by #line directives, so compiler messages point at the template's lines. An
 * unknown name, a malformed or unterminated substitution fails naming the template and line. Knows
 * nothing of GEMMs: the values come from the caller (the kernel catalogue, the sampler, the bench). */
#ifndef VOLT8_TEMPLATE_H
#define VOLT8_TEMPLATE_H

#include <stdint.h>

#include "volt8.h"

#define VOLT8_TEMPLATE_VERSION 1

/* One substitution: text, or a whole number written in decimal. */
typedef struct volt8_template_value {
  const char *name;
  const char *text; /* NULL: `number` */
  int64_t number;
} volt8_template_value;

/* The whole generated source: a "generated from" line, a version line listing `parameters` sorted by
 * name (what the source was made from), `#line 1 "template_path"` and the expanded template, with a
 * final newline. template_text NULL reads template_path from the embedded files. Failures are
 * VOLT8_ERR_CODEGEN ("code generator: templates/x.cu:12: unknown substitution '@{NAME}'"). */
volt8_status volt8_template_source(volt8_ctx *ctx, const char *template_path, const char *template_text,
                                   const volt8_template_value *values, int32_t value_count,
                                   const volt8_template_value *parameters, int32_t parameter_count, char **out_source);

/* The same with every value given as text, and the values as the parameters: for the sampler's and the
 * bench's kernels. */
volt8_status volt8_template_expand_text(volt8_ctx *ctx, const char *template_path, const char *template_text,
                                        const char *const *keys, const char *const *values, int32_t count,
                                        char **out_source);

#endif
