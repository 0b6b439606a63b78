/* What a context's kernel cache folder holds, and whether entries can be published there
 * (volt8 doctor). Reads only: nothing is created, and links inside the folder are not followed. */
#define VOLT8_EXPERIMENTAL_API 1 /* defines volt8_cache_report_get */
#include "volt8.h"
#include "core/ctx_internal.h"
#include "core/files.h"
#include "jit/cache.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* nftw passes no argument to its callback: the walk's sums are the calling thread's own. */
static _Thread_local int64_t walked_entries, walked_bytes;

static int count_file(const char *path, const struct stat *info, int type, struct FTW *walk) {
  if (type != FTW_F || !S_ISREG(info->st_mode)) return 0;
  size_t length = strlen(path);
  walked_entries += length > 6 && strcmp(path + length - 6, ".entry") == 0;
  walked_bytes += info->st_size;
  return 0;
}

/* Adds the entries and bytes under `path` (none when it is missing). */
static void walk(const char *path, int64_t *entries, int64_t *bytes) {
  walked_entries = walked_bytes = 0;
  nftw(path, count_file, 8, FTW_PHYS);
  *entries += walked_entries;
  *bytes += walked_bytes;
}

/* 1 when an existing folder can take new files and folders; else 0 with the reason in note. */
static int folder_writable(const char *path, char *note, size_t note_size) {
  struct stat info;
  if (stat(path, &info) != 0) return 1; /* made when first needed, inside a folder checked before */
  if (!S_ISDIR(info.st_mode)) {
    snprintf(note, note_size, "%s is a %s, not a folder", path, volt8_file_type_name(info.st_mode));
    return 0;
  }
  if (access(path, W_OK | X_OK) != 0) {
    snprintf(note, note_size, "%s cannot be written: %s", path, strerror(errno));
    return 0;
  }
  return 1;
}

/* Where the folder does not exist yet, whether its nearest existing parent lets it be made. */
static int parent_writable(const char *dir, char *note, size_t note_size) {
  char parent[PATH_MAX];
  snprintf(parent, sizeof parent, "%s", dir);
  struct stat info;
  while (stat(parent, &info) != 0) {
    char *slash = strrchr(parent, '/');
    if (!slash) return folder_writable(".", note, note_size);
    if (slash == parent) slash[1] = '\0';
    else *slash = '\0';
  }
  return folder_writable(parent, note, note_size);
}

volt8_status volt8_cache_report_get(volt8_ctx *ctx, volt8_cache_report *out) {
  if (!ctx || !out || out->size < sizeof(size_t))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_cache_report_get: NULL ctx or out, or out->size unset (VOLT8_CACHE_REPORT_INIT)");
  volt8_cache_report filled = VOLT8_CACHE_REPORT_INIT;
  if (!ctx->cache_dir) {
    snprintf(filled.note, sizeof filled.note, "%s", ctx->cache_off_reason);
    volt8_copy_sized_output(out, &filled, sizeof filled);
    return VOLT8_OK;
  }
  snprintf(filled.dir, sizeof filled.dir, "%s", ctx->cache_dir);
  char entries[PATH_MAX], temp[PATH_MAX];
  snprintf(entries, sizeof entries, "%s/v%d", ctx->cache_dir, VOLT8_CACHE_FORMAT_VERSION);
  snprintf(temp, sizeof temp, "%s/tmp", ctx->cache_dir);
  struct stat info;
  filled.exists = stat(ctx->cache_dir, &info) == 0 && S_ISDIR(info.st_mode);
  if (filled.exists) {
    filled.writable = folder_writable(ctx->cache_dir, filled.note, sizeof filled.note) &&
                      folder_writable(temp, filled.note, sizeof filled.note) &&
                      folder_writable(entries, filled.note, sizeof filled.note);
    int64_t temp_entries = 0;
    walk(entries, &filled.entries, &filled.bytes);
    walk(temp, &temp_entries, &filled.bytes);
  } else {
    filled.writable = parent_writable(ctx->cache_dir, filled.note, sizeof filled.note);
  }
  volt8_copy_sized_output(out, &filled, sizeof filled);
  return VOLT8_OK;
}
