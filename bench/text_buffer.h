/* A growing NUL-terminated text: the report renderers append to one. */
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

#endif
