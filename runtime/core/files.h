/* Opening the files the library reads (shards, configs, indexes, tuning tables, cache entries):
 * never blocking on a FIFO or device, and refusing anything that is not a regular file by name. */
#ifndef VOLT8_FILES_H
#define VOLT8_FILES_H

#include <stddef.h>
#include <sys/stat.h>

#include "volt8.h"

/* "FIFO", "directory", "character device", ... for messages. */
const char *volt8_file_type_name(mode_t mode);

/* Opens path read-only (O_CLOEXEC, blocking reads) and fills *out_info. 0 on success; else an
 * errno value (the file could not be opened), or -1 when it is not a regular file (out_info->st_mode
 * says what it is). Sets no message: for callers where a bad file is only a miss. */
int volt8_open_regular_fd(const char *path, int *out_fd, struct stat *out_info);

/* The same with a message "<path>: ..." on failure. *out_missing (may be NULL) set to 1, with
 * VOLT8_OK, no message and *out_fd = -1, when path does not exist (ENOENT or ENOTDIR). */
volt8_status volt8_open_regular(volt8_ctx *ctx, const char *path, int *out_fd, struct stat *out_info, int *out_missing);

/* Reads exactly `size` bytes at `offset` (retrying short and interrupted reads); 0, or -1 on an error
 * or an early end of file. */
int volt8_read_fully_at(int fd, void *buf, size_t size, off_t offset);

/* The whole regular file, NUL-terminated, malloc'ed; more than limit bytes is VOLT8_ERR_FORMAT
 * naming its size and the limit. *out_missing as for volt8_open_regular (then *out_text is NULL). */
volt8_status volt8_read_regular(volt8_ctx *ctx, const char *path, size_t limit, char **out_text, size_t *out_bytes,
                                int *out_missing);

#endif
