/* Regular files only: a FIFO, device or directory where a file should be is named, never read. */
#include "core/files.h"

#include "core/ctx_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *volt8_file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "regular file";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISFIFO(mode)) return "FIFO";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISLNK(mode)) return "symbolic link";
  return "special file";
}

int volt8_open_regular_fd(const char *path, int *out_fd, struct stat *out_info) {
  *out_fd = -1;
  /* O_NONBLOCK: opening a FIFO with no writer, or some devices, would otherwise wait for ever */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return errno;
  int flags;
  if (fstat(fd, out_info) != 0) {
    int error = errno;
    close(fd);
    return error;
  }
  if (!S_ISREG(out_info->st_mode)) {
    close(fd);
    return -1;
  }
  if ((flags = fcntl(fd, F_GETFL)) == -1 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == -1) {
    int error = errno;
    close(fd);
    return error;
  }
  *out_fd = fd;
  return 0;
}

volt8_status volt8_open_regular(volt8_ctx *ctx, const char *path, int *out_fd, struct stat *out_info, int *out_missing) {
  if (out_missing) *out_missing = 0;
  int error = volt8_open_regular_fd(path, out_fd, out_info);
  if (error == 0) return VOLT8_OK;
  if (error == -1)
    return volt8_fail(ctx, VOLT8_ERR_IO, "%s: is a %s, not a regular file", path, volt8_file_type_name(out_info->st_mode));
  if ((error == ENOENT || error == ENOTDIR) && out_missing) {
    *out_missing = 1;
    return VOLT8_OK;
  }
  return volt8_fail(ctx, VOLT8_ERR_IO, "%s: cannot open: %s", path, strerror(error));
}

int volt8_read_fully_at(int fd, void *buf, size_t size, off_t offset) {
  uint8_t *bytes = buf;
  while (size > 0) {
    ssize_t got = pread(fd, bytes, size, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return -1;
    bytes += got;
    size -= (size_t)got;
    offset += got;
  }
  return 0;
}

volt8_status volt8_read_regular(volt8_ctx *ctx, const char *path, size_t limit, char **out_text, size_t *out_bytes,
                                int *out_missing) {
  *out_text = NULL;
  *out_bytes = 0;
  int fd = -1;
  struct stat info;
  volt8_status status = volt8_open_regular(ctx, path, &fd, &info, out_missing);
  if (status != VOLT8_OK || fd < 0) return status;
  char *text = NULL;
  if ((uint64_t)info.st_size > (uint64_t)limit)
    status = volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: %lld bytes, more than the %zu-byte limit for this file", path,
                        (long long)info.st_size, limit);
  else if (!(text = malloc((size_t)info.st_size + 1)))
    status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "%s: out of memory for its %lld bytes", path, (long long)info.st_size);
  else if (volt8_read_fully_at(fd, text, (size_t)info.st_size, 0) != 0)
    status = volt8_fail(ctx, VOLT8_ERR_IO, "%s: short read of %lld bytes", path, (long long)info.st_size);
  close(fd);
  if (status != VOLT8_OK) {
    free(text);
    return status;
  }
  text[info.st_size] = '\0';
  *out_text = text;
  *out_bytes = (size_t)info.st_size;
  return VOLT8_OK;
}
