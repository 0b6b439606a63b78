/* The growing text of text_buffer.h. */
#include "core/text_buffer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for `more` bytes and a NUL after the text: 1, or 0 with the text failed. */
static int make_room(volt8_text_buffer *text, size_t more) {
  if (text->failed) return 0;
  if (text->length + more + 1 <= text->capacity) return 1;
  size_t capacity = text->capacity ? text->capacity : 4096;
  while (capacity < text->length + more + 1) capacity *= 2;
  char *grown = realloc(text->data, capacity);
  if (!grown) {
    text->failed = 1;
    return 0;
  }
  text->data = grown;
  text->capacity = capacity;
  return 1;
}

void volt8_text_append(volt8_text_buffer *text, const char *bytes, size_t length) {
  if (!make_room(text, length)) return;
  memcpy(text->data + text->length, bytes, length);
  text->length += length;
  text->data[text->length] = '\0';
}

void volt8_text_append_string(volt8_text_buffer *text, const char *string) {
  volt8_text_append(text, string, strlen(string));
}

void volt8_text_printf(volt8_text_buffer *text, const char *format, ...) {
  if (text->failed) return;
  size_t room = text->capacity - text->length;
  va_list args;
  va_start(args, format);
  int written = vsnprintf(text->data ? text->data + text->length : NULL, room, format, args);
  va_end(args);
  if (written < 0) { /* an encoding error: growing would not help */
    text->failed = 1;
    return;
  }
  if ((size_t)written >= room) {
    if (!make_room(text, (size_t)written)) return;
    va_start(args, format);
    vsnprintf(text->data + text->length, (size_t)written + 1, format, args);
    va_end(args);
  }
  text->length += (size_t)written;
}

char *volt8_text_take(volt8_text_buffer *text) {
  char *data = text->failed ? NULL : text->data;
  if (text->failed) free(text->data);
  memset(text, 0, sizeof *text);
  return data;
}
