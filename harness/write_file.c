/* Writing a text to a file whole. */
#include "write_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
