/* Small pieces the CPU suites share (see test_support.h). */
#include "test_support.h"

#include <criterion/criterion.h>
#include <ftw.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

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

void test_write_text(const char *dir, const char *name, const char *text) {
  char path[8192];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *file = fopen(path, "wb");
  cr_assert_not_null(file, "cannot write %s", path);
  fputs(text, file);
  fclose(file);
}

static int remove_entry(const char *path, const struct stat *info, int flag, struct FTW *walk) {
  (void)info, (void)flag, (void)walk;
  return remove(path);
}

void test_remove_tree(const char *dir) {
  if (dir && dir[0]) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void test_make_temp_dir(char *dir, size_t dir_size, const char *prefix) {
  snprintf(dir, dir_size, "%s/%s_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", prefix);
  cr_assert_not_null(mkdtemp(dir), "mkdtemp %s failed", dir);
}

static void read_back(int fd, char *text, size_t size) {
  ssize_t length = pread(fd, text, size - 1, 0);
  text[length > 0 ? length : 0] = '\0';
  close(fd);
}

int test_run_volt8(char *const *args, char *out, size_t out_size, char *err, size_t err_size) {
  char *argv[32] = {VOLT8_CLI_PATH};
  size_t count = 1;
  while (args[count - 1] && count < 31) argv[count] = args[count - 1], count++;
  argv[count] = NULL;
  char out_path[] = "/tmp/volt8-cli-out-XXXXXX", err_path[] = "/tmp/volt8-cli-err-XXXXXX";
  int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
  cr_assert(out_fd >= 0 && err_fd >= 0, "cannot make temp files");
  unlink(out_path);
  unlink(err_path);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  pid_t pid;
  int spawn_error = posix_spawn(&pid, VOLT8_CLI_PATH, &actions, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  cr_assert_eq(spawn_error, 0, "cannot run %s: %s", VOLT8_CLI_PATH, strerror(spawn_error));
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  read_back(out_fd, out, out_size);
  read_back(err_fd, err, err_size);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
