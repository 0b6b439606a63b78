/* Token-count lists of the tools' arguments (`volt8 list --choice 1,8,64`): one strict parser, which
 * the fuzz target tests/fuzz/fuzz_choice.c drives as the command line does. */
#ifndef VOLT8_TOOLS_TOKEN_COUNTS_H
#define VOLT8_TOOLS_TOKEN_COUNTS_H

#include <stddef.h>
#include <stdint.h>

#include "volt8.h"

/* "1,8,64": token counts separated by single commas, each written in decimal digits alone (no sign,
 * space or leading zero) and in 1..max_m; no limit on the text's length or the number of counts.
 * On success *out_values (malloc'ed; the caller frees it) and *out_count >= 1. Otherwise
 * *out_values is NULL, *out_count 0, and `error` (NUL-terminated, cut to error_size) names the item
 * and what is wrong with it: VOLT8_ERR_INVALID_ARGUMENT, or VOLT8_ERR_OUT_OF_MEMORY. */
volt8_status volt8_tools_parse_token_counts(const char *text, int32_t max_m, int32_t **out_values, int32_t *out_count,
                                            char *error, size_t error_size);

#endif
