/* What a context's kernel cache folder holds, and whether entries can be published there
 * (volt8 doctor). Reads only: nothing is created, and links inside the folder are not followed. */
#define VOLT8_EXPERIMENTAL_API 1 /* defines volt8_cache_report_get */
#include "volt8.h"
#include "core/ctx_internal.h"
#include "core/files.h"
#include "jit/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Only what the cache owns is counted, and only where the layout puts it (docs/design.md, "Kernel
 * cache"): entry files <dir>/v1/sm_<arch>/<ih[0:2]>/<ih>/<key>.entry, and the temp files of a publish
 * right in <dir>/tmp. Nothing else there is read: a cache pointed at $HOME or / walks no tree of the
 * user's, and neither links nor other files are followed or summed. */

static int is_hex(const char *name, size_t digits) {
  if (strlen(name) != digits) return 0;
  for (size_t i = 0; i < digits; i++)
    if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return 0;
  return 1;
}

static int is_arch_folder(const char *name) {
  return strncmp(name, "sm_", 3) == 0 && name[3] >= '1' && name[3] <= '9' && strspn(name + 3, "0123456789") == strlen(name + 3) &&
         strlen(name + 3) <= 4;
}

/* Levels below <dir>/v1: arch folders, the inputs hash's first two digits, the inputs hash, entries. */
typedef enum { LEVEL_ARCH, LEVEL_PREFIX, LEVEL_INPUTS, LEVEL_ENTRIES } layout_level;

static void count_level(int folder_fd, layout_level level, const char *prefix, int64_t *entries, int64_t *bytes) {
  DIR *listing = fdopendir(folder_fd);
  if (!listing) {
    close(folder_fd);
    return;
  }
  for (struct dirent *item = readdir(listing); item; item = readdir(listing)) {
    const char *name = item->d_name;
    int wanted = level == LEVEL_ARCH      ? is_arch_folder(name)
                 : level == LEVEL_PREFIX  ? is_hex(name, 2)
                 : level == LEVEL_INPUTS  ? is_hex(name, 64) && strncmp(name, prefix, 2) == 0
                                          : volt8_cache_is_entry_name(name);
    struct stat info;
    if (!wanted || fstatat(dirfd(listing), name, &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (level == LEVEL_ENTRIES) {
      if (S_ISREG(info.st_mode)) {
        (*entries)++;
        *bytes += info.st_size;
      }
      continue;
    }
    if (!S_ISDIR(info.st_mode)) continue;
    int below = openat(dirfd(listing), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (below >= 0) count_level(below, (layout_level)(level + 1), name, entries, bytes);
  }
  closedir(listing);
}

/* The entries under `path` (<dir>/v1), by the layout. */
static void count_entries(const char *path, int64_t *entries, int64_t *bytes) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) count_level(fd, LEVEL_ARCH, "", entries, bytes);
}

/* The bytes of the publishes' temp files right in `path` (<dir>/tmp); its other files and folders are
 * not the cache's. */
static void count_temps(const char *path, int64_t *bytes) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR *listing = fd >= 0 ? fdopendir(fd) : NULL;
  if (!listing) {
    if (fd >= 0) close(fd);
    return;
  }
  for (struct dirent *item = readdir(listing); item; item = readdir(listing)) {
    struct stat info;
    if (volt8_cache_is_temp_name(item->d_name) && fstatat(dirfd(listing), item->d_name, &info, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(info.st_mode))
      *bytes += info.st_size;
  }
  closedir(listing);
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
    volt8_copy_text(filled.note, sizeof filled.note, ctx->cache_off_reason);
    volt8_copy_sized_output(out, &filled, sizeof filled);
    return VOLT8_OK;
  }
  volt8_copy_text(filled.dir, sizeof filled.dir, ctx->cache_dir);
  char entries[PATH_MAX], temp[PATH_MAX];
  snprintf(entries, sizeof entries, "%s/v%d", ctx->cache_dir, VOLT8_CACHE_FORMAT_VERSION);
  snprintf(temp, sizeof temp, "%s/tmp", ctx->cache_dir);
  struct stat info;
  filled.exists = stat(ctx->cache_dir, &info) == 0 && S_ISDIR(info.st_mode);
  if (filled.exists) {
    filled.writable = folder_writable(ctx->cache_dir, filled.note, sizeof filled.note) &&
                      folder_writable(temp, filled.note, sizeof filled.note) &&
                      folder_writable(entries, filled.note, sizeof filled.note);
    count_entries(entries, &filled.entries, &filled.bytes);
    count_temps(temp, &filled.bytes);
  } else {
    filled.writable = parent_writable(ctx->cache_dir, filled.note, sizeof filled.note);
  }
  volt8_copy_sized_output(out, &filled, sizeof filled);
  return VOLT8_OK;
}
