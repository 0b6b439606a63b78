/* A growing NUL-terminated text, which the report renderers append to, and a text written to a file
 * whole (the reports, the tuning tables). */
#ifndef VOLT8_BENCH_TEXT_BUFFER_H
#define VOLT8_BENCH_TEXT_BUFFER_H

#include <stddef.h>

typedef struct text_buffer {
  char *data;
  size_t length, capacity;
  int failed; /* an allocation failed: the text is incomplete */
} text_buffer;

void text_append(text_buffer *buffer, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The text (the caller frees it), or NULL after a failed allocation. Resets the buffer. */
char *text_take(text_buffer *buffer);

/* Writes `text` to `path` (a new temporary file, then rename; a failure removes nothing else). 0 on
 * success, else errno. */
int bench_write_file(const char *path, const char *text);

#endif
