/* Appending formatted text with doubling growth, and writing a text to a file whole. */
#include "text_buffer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* The temporary is a new file (O_EXCL, never through a link) named "<path>.tmp.<pid>.<n>", so a
 * failure removes only what this call made; a name already taken is passed over. */
static int create_temporary(const char *path, char *temporary, size_t size) {
  static atomic_uint sequence;
  for (int attempt = 0; attempt < 100; attempt++) {
    snprintf(temporary, size, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&sequence, 1));
    int fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

int bench_write_file(const char *path, const char *text) {
  size_t length = strlen(path) + 48;
  char *temporary = malloc(length);
  if (!temporary) return ENOMEM;
  int fd = create_temporary(path, temporary, length);
  FILE *file = fd >= 0 ? fdopen(fd, "wb") : NULL;
  int error = file ? 0 : errno;
  if (!file && fd >= 0) {
    close(fd);
    unlink(temporary);
  }
  if (file) {
    size_t size = strlen(text);
    if (fwrite(text, 1, size, file) != size) error = errno ? errno : EIO;
    if (fclose(file) != 0 && !error) error = errno;
    if (!error && rename(temporary, path) != 0) error = errno;
    if (error) unlink(temporary);
  }
  free(temporary);
  return error;
}
