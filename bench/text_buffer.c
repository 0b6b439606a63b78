/* Appending formatted text with doubling growth. */
#include "text_buffer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void text_append(text_buffer *buffer, const char *fmt, ...) {
  if (buffer->failed) return;
  for (;;) {
    size_t room = buffer->capacity - buffer->length;
    va_list args;
    va_start(args, fmt);
    int written = buffer->data ? vsnprintf(buffer->data + buffer->length, room, fmt, args) : -1;
    va_end(args);
    if (written >= 0 && (size_t)written < room) {
      buffer->length += (size_t)written;
      return;
    }
    if (buffer->data && written < 0) { /* an encoding error: growing would not help */
      buffer->failed = 1;
      return;
    }
    size_t wanted = buffer->length + (written > 0 ? (size_t)written : 0) + 1;
    size_t capacity = buffer->capacity ? buffer->capacity : 4096;
    while (capacity < wanted) capacity *= 2;
    char *grown = realloc(buffer->data, capacity);
    if (!grown) {
      buffer->failed = 1;
      return;
    }
    buffer->data = grown;
    buffer->capacity = capacity;
    if (buffer->length == 0) buffer->data[0] = '\0';
  }
}

char *text_take(text_buffer *buffer) {
  char *data = buffer->failed ? NULL : buffer->data;
  if (buffer->failed) free(buffer->data);
  memset(buffer, 0, sizeof *buffer);
  return data;
}
