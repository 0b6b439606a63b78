/* JSON files read as strictly as the safetensors reference reader: valid UTF-8, no NUL, one object
 * and nothing after it, no key twice in one object, and a bound on how many values it may hold. */
#ifndef VOLT8_JSON_STRICT_H
#define VOLT8_JSON_STRICT_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "volt8.h"

/* Values (objects, arrays, members, elements) a file may hold: cJSON spends about 80 bytes on each,
 * so this bounds what a small file can make the reader allocate. The largest real index (about
 * 150k tensors) holds some 300k. */
#define VOLT8_JSON_MAX_VALUES (1u << 21)

/* Length of the UTF-8 sequence at text, left > 0 bytes long (0 when malformed: overlong,
 * surrogate, above U+10FFFF, cut short). */
size_t volt8_utf8_sequence_length(const unsigned char *text, size_t left);

/* Parses text[0, length) as one JSON object into *out (cJSON_Delete it). `path` and `what`
 * ("header", "index", "config") name it in messages; max_values 0 means VOLT8_JSON_MAX_VALUES. */
volt8_status volt8_json_parse_object(volt8_ctx *ctx, const char *path, const char *what, const char *text, size_t length,
                                     size_t max_values, cJSON **out);

#endif
