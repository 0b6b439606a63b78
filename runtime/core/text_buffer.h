/* A growing NUL-terminated text: the code generator's sources (jit/template.c) and the tools' reports
 * and tuning tables are written into one. Growth doubles from 4 KiB; a failed allocation marks the
 * text failed, after which appends do nothing and volt8_text_take gives NULL. */
#ifndef VOLT8_TEXT_BUFFER_H
#define VOLT8_TEXT_BUFFER_H

#include <stddef.h>

typedef struct volt8_text_buffer {
  char *data; /* NULL until the first append */
  size_t length, capacity;
  int failed; /* an allocation failed (or a format could not be written): the text is incomplete */
} volt8_text_buffer;

/* `length` bytes of `bytes`. */
void volt8_text_append(volt8_text_buffer *text, const char *bytes, size_t length);
void volt8_text_append_string(volt8_text_buffer *text, const char *string);
void volt8_text_printf(volt8_text_buffer *text, const char *format, ...) __attribute__((format(printf, 2, 3)));
/* The text (the caller frees it), or NULL after a failure or when nothing was appended; the buffer is
 * empty again. */
char *volt8_text_take(volt8_text_buffer *text);

#endif
