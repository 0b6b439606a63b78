/* Helpers shared by the fuzz targets (see fuzz_common.h). */
#include "fuzz_common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char scratch_dir[256];

static int remove_entry(const char *path, const struct stat *info, int flag, struct FTW *ftw) {
  (void)info, (void)flag, (void)ftw;
  return remove(path);
}

static void remove_scratch(void) {
  if (scratch_dir[0]) nftw(scratch_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* libFuzzer ends a timed run with _Exit, so atexit never runs: folders of dead processes go here. */
static void remove_orphans(const char *base) {
  DIR *listing = opendir(base);
  if (!listing) return;
  for (struct dirent *entry = readdir(listing); entry; entry = readdir(listing)) {
    long pid = 0;
    if (sscanf(entry->d_name, "volt8-fuzz-%ld-", &pid) != 1 || pid <= 0) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", base, entry->d_name);
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  }
  closedir(listing);
}

const char *fuzz_scratch_dir(void) {
  if (scratch_dir[0]) return scratch_dir;
  struct stat info;
  const char *base = stat("/dev/shm", &info) == 0 && S_ISDIR(info.st_mode) && access("/dev/shm", W_OK) == 0
                         ? "/dev/shm"
                         : (getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  remove_orphans(base);
  snprintf(scratch_dir, sizeof scratch_dir, "%s/volt8-fuzz-%ld-XXXXXX", base, (long)getpid());
  if (!mkdtemp(scratch_dir)) {
    fprintf(stderr, "fuzz: cannot create a scratch folder under %s: %s\n", base, strerror(errno));
    abort();
  }
  atexit(remove_scratch);
  return scratch_dir;
}

void fuzz_path(char *buf, size_t buf_size, const char *relative) {
  snprintf(buf, buf_size, "%s/%s", fuzz_scratch_dir(), relative);
}

void fuzz_make_dirs(const char *relative) {
  char path[1024];
  fuzz_path(path, sizeof path, relative);
  for (char *slash = strchr(path + 1, '/');; slash = strchr(slash + 1, '/')) {
    if (slash) *slash = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
      fprintf(stderr, "fuzz: mkdir %s: %s\n", path, strerror(errno));
      abort();
    }
    if (!slash) return;
    *slash = '/';
  }
}

void fuzz_write_file(const char *path, const void *data, size_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const uint8_t *bytes = data;
  while (fd >= 0 && size > 0) {
    ssize_t written = write(fd, bytes, size);
    if (written <= 0) break;
    bytes += written;
    size -= (size_t)written;
  }
  if (fd < 0 || size != 0 || close(fd) != 0) {
    fprintf(stderr, "fuzz: cannot write %s: %s\n", path, strerror(errno));
    abort();
  }
}

void fuzz_remove(const char *path) {
  if (unlink(path) != 0 && errno != ENOENT) {
    fprintf(stderr, "fuzz: cannot remove %s: %s\n", path, strerror(errno));
    abort();
  }
}

volt8_ctx *fuzz_ctx(void) {
  static volt8_ctx *ctx;
  if (ctx) return ctx;
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.cache_disable = 1;
  options.target_arch = "sm_70";
  if (volt8_ctx_create(&options, &ctx) != VOLT8_OK) {
    fprintf(stderr, "fuzz: volt8_ctx_create failed: %s\n", volt8_last_error(NULL));
    abort();
  }
  return ctx;
}

void fuzz_require(int condition, const char *what, const char *detail) {
  if (condition) return;
  fprintf(stderr, "fuzz: invariant broken: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

int fuzz_split(const uint8_t *data, size_t size, const uint8_t **parts, size_t *part_sizes, int max_parts) {
  static const char separator[] = "\n----\n";
  const size_t separator_bytes = sizeof separator - 1;
  int count = 0;
  size_t start = 0;
  for (size_t i = 0; count + 1 < max_parts && i + separator_bytes <= size; i++) {
    if (memcmp(data + i, separator, separator_bytes) != 0) continue;
    parts[count] = data + start;
    part_sizes[count++] = i - start;
    start = i + separator_bytes;
    i = start - 1;
  }
  parts[count] = data + start;
  part_sizes[count++] = size - start;
  return count;
}

char *fuzz_strndup(const uint8_t *data, size_t size) {
  char *copy = malloc(size + 1);
  fuzz_require(copy != NULL, "malloc", NULL);
  if (size) memcpy(copy, data, size);
  copy[size] = '\0';
  return copy;
}

void fuzz_st_add(fuzz_st_builder *builder, const char *name, const char *dtype, const int64_t *shape, int rank,
                 const void *bytes, size_t byte_count) {
  char entry[1024], dims[256] = "";
  for (int d = 0; d < rank; d++)
    snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lld", d ? "," : "", (long long)shape[d]);
  int length = snprintf(entry, sizeof entry, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}",
                        builder->header_bytes ? "," : "", name, dtype, dims, builder->data_bytes,
                        builder->data_bytes + byte_count);
  fuzz_require(length > 0 && (size_t)length < sizeof entry, "safetensors entry fits", name);
  builder->header = realloc(builder->header, builder->header_bytes + (size_t)length + 1);
  builder->data = realloc(builder->data, builder->data_bytes + byte_count + 1);
  fuzz_require(builder->header && builder->data, "malloc", NULL);
  memcpy(builder->header + builder->header_bytes, entry, (size_t)length);
  builder->header_bytes += (size_t)length;
  if (byte_count) memcpy(builder->data + builder->data_bytes, bytes, byte_count);
  builder->data_bytes += byte_count;
}

void fuzz_st_write(fuzz_st_builder *builder, const char *path) {
  size_t header_bytes = builder->header_bytes + 2, total = 8 + header_bytes + builder->data_bytes;
  uint8_t *file = malloc(total);
  fuzz_require(file != NULL, "malloc", NULL);
  for (int i = 0; i < 8; i++) file[i] = (uint8_t)((uint64_t)header_bytes >> (8 * i));
  file[8] = '{';
  if (builder->header_bytes) memcpy(file + 9, builder->header, builder->header_bytes);
  file[8 + header_bytes - 1] = '}';
  if (builder->data_bytes) memcpy(file + 8 + header_bytes, builder->data, builder->data_bytes);
  fuzz_write_file(path, file, total);
  free(file);
  free(builder->header);
  free(builder->data);
  *builder = (fuzz_st_builder){0};
}
