/* Small pieces the CPU suites share (see test_support.h). */
#include "test_support.h"

#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

volt8_ctx *test_cpu_ctx(const char *target_arch) {
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.cache_disable = 1;
  options.target_arch = target_arch;
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_OK, "volt8_ctx_create: %s", volt8_last_error(NULL));
  return ctx;
}

void *test_read_whole(const char *path, size_t *out_bytes) {
  FILE *stream = fopen(path, "rb");
  cr_assert_not_null(stream, "cannot open %s", path);
  fseek(stream, 0, SEEK_END);
  long bytes = ftell(stream);
  fseek(stream, 0, SEEK_SET);
  char *data = malloc(bytes > 0 ? (size_t)bytes + 1 : 1);
  cr_assert(data && fread(data, 1, (size_t)bytes, stream) == (size_t)bytes, "cannot read %s", path);
  data[bytes > 0 ? bytes : 0] = '\0';
  fclose(stream);
  *out_bytes = (size_t)bytes;
  return data;
}

static int remove_entry(const char *path, const struct stat *info, int flag, struct FTW *walk) {
  (void)info, (void)flag, (void)walk;
  return remove(path);
}

void test_remove_tree(const char *dir) {
  if (dir && dir[0]) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
