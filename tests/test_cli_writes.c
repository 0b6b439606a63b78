/* What the commands and tools write and remove: a failed write removes only what it made, and a
 * command asked to store or write something that it did not exits non-zero with the reason. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_support.h"

/* The writer of reports and tables is in the harness (configured unless VOLT8_BUILD_BENCH is off). */
#if __has_include("write_file.h")
#define HAVE_BENCH 1
#include "write_file.h"
#endif

static char work_dir[512];

static void make_work_dir(void) { test_make_temp_dir(work_dir, sizeof work_dir, "volt8-cli-writes"); }
static void remove_work_dir(void) { test_remove_tree(work_dir); }

TestSuite(cli_writes, .init = make_work_dir, .fini = remove_work_dir, .timeout = 60);

#ifdef HAVE_BENCH
static char *read_text(const char *path) {
  size_t bytes = 0;
  return test_read_whole(path, &bytes);
}

/* A file of someone else's at the writer's old temp name (<path>.tmp.<pid>) is neither followed,
 * truncated nor removed, whether the write succeeds or fails. */
Test(cli_writes, a_write_leaves_files_of_its_temp_name_alone) {
  char out[600], victim[600], temp_name[700];
  snprintf(out, sizeof out, "%s/table.json", work_dir);
  snprintf(temp_name, sizeof temp_name, "%s.tmp.%ld", out, (long)getpid());
  test_write_text(work_dir, "victim.txt", "keep me\n");
  snprintf(victim, sizeof victim, "%s/victim.txt", work_dir);
  cr_assert_eq(symlink(victim, temp_name), 0, "symlink %s: %s", temp_name, strerror(errno));
  cr_assert_eq(bench_write_file(out, "{}\n"), 0);
  char *text = read_text(victim);
  cr_assert_str_eq(text, "keep me\n", "the write went through a link at its temp name");
  free(text);
  struct stat info;
  cr_assert_eq(lstat(out, &info), 0);
  cr_assert(S_ISREG(info.st_mode), "%s is not a regular file", out);
  text = read_text(out);
  cr_assert_str_eq(text, "{}\n");
  free(text);
  cr_assert_eq(lstat(temp_name, &info), 0, "the link at the temp name was removed");

  /* a failed write (a folder where the file goes) removes its own temp file only */
  char folder[600], folder_temp[700];
  snprintf(folder, sizeof folder, "%s/a-folder", work_dir);
  cr_assert_eq(mkdir(folder, 0755), 0);
  snprintf(folder_temp, sizeof folder_temp, "%s.tmp.%ld", folder, (long)getpid());
  test_write_text(work_dir, strrchr(folder_temp, '/') + 1, "notes\n");
  cr_assert_neq(bench_write_file(folder, "{}\n"), 0, "a write over a folder reported success");
  text = read_text(folder_temp);
  cr_assert_str_eq(text, "notes\n", "a failed write truncated or removed %s", folder_temp);
  free(text);
}
#endif

static int exists_in(const char *dir, const char *name) {
  char path[1200];
  struct stat info;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return lstat(path, &info) == 0;
}

/* Names in dir, "." and ".." left out. */
static int count_entries(const char *dir) {
  DIR *listing = opendir(dir);
  cr_assert_not_null(listing, "opendir %s: %s", dir, strerror(errno));
  int count = 0;
  for (struct dirent *item = readdir(listing); item; item = readdir(listing))
    count += strcmp(item->d_name, ".") != 0 && strcmp(item->d_name, "..") != 0;
  closedir(listing);
  return count;
}

/* The demo's CPU half up to its first compile, fast: no GPU, no NVRTC, an empty cache. */
static void demo_environment(void) {
  char cache[700];
  snprintf(cache, sizeof cache, "%s/cache", work_dir);
  setenv("VOLT8_DISABLE_CUDA", "1", 1);
  setenv("VOLT8_NVRTC_DISABLE", "1", 1);
  setenv("VOLT8_CACHE_DIR", cache, 1);
}

static char out[1 << 16], err[1 << 16];

/* The demo removes its folder without a shell: a TMPDIR holding quotes, $(...) and ;cmd runs nothing. */
Test(cli_writes, demo_removes_its_folder_without_running_tmpdir_text) {
  /* inside rm -rf '...' the quotes close and reopen around $(...), ;cmd and `cmd` */
  static const char hostile[] = "a'$(touch injected-1);touch injected-2;`touch injected-3`'b";
  char tmpdir[1024];
  snprintf(tmpdir, sizeof tmpdir, "%s/%s", work_dir, hostile);
  cr_assert_eq(mkdir(tmpdir, 0755), 0, "mkdir %s: %s", tmpdir, strerror(errno));
  demo_environment();
  setenv("TMPDIR", tmpdir, 1);
  cr_assert_eq(chdir(work_dir), 0); /* where an injected `touch` would leave its file */
  char *args[] = {"demo", NULL};
  int rc = test_run_volt8(args, out, sizeof out, err, sizeof err);
  cr_assert(strstr(out, "writing a synthetic MTP checkpoint") && strstr(out, tmpdir), "rc %d:\n%s\n%s", rc, out, err);
  for (int i = 1; i <= 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "injected-%d", i);
    cr_assert(!exists_in(work_dir, name), "TMPDIR's text ran as a command (%s exists):\n%s", name, err);
  }
  cr_assert_eq(count_entries(tmpdir), 0, "the demo left its folder in TMPDIR:\n%s\n%s", out, err);
}

/* A write that fails part-way (a 1 MiB file size limit) removes what it wrote, keeps nothing, and the
 * demo exits 1 saying why, never "the checkpoint is kept". */
static void fail_writes_past_one_mib(void) {
  signal(SIGXFSZ, SIG_IGN); /* a write past the limit then fails with EFBIG, in the child too */
  struct rlimit limit = {1 << 20, 1 << 20};
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &limit), 0, "setrlimit: %s", strerror(errno));
}

Test(cli_writes, demo_keep_whose_write_fails_leaves_nothing_and_exits_1) {
  char kept[700];
  snprintf(kept, sizeof kept, "%s/kept", work_dir);
  demo_environment();
  fail_writes_past_one_mib();
  char *args[] = {"demo", "--keep", kept, NULL};
  int rc = test_run_volt8(args, out, sizeof out, err, sizeof err);
  cr_assert_eq(rc, 1, "rc %d:\n%s\n%s", rc, out, err);
  cr_assert(strstr(err, "model.safetensors") && strstr(err, strerror(EFBIG)) && strstr(err, "no checkpoint was kept"),
            "%s", err);
  cr_assert_null(strstr(out, "is kept in"), "%s", out);
  cr_assert(!exists_in(work_dir, "kept"), "the demo left the folder it made for --keep");

  /* into an empty folder of the caller's: the folder stays, empty */
  cr_assert_eq(mkdir(kept, 0755), 0);
  rc = test_run_volt8(args, out, sizeof out, err, sizeof err);
  cr_assert_eq(rc, 1, "rc %d:\n%s\n%s", rc, out, err);
  cr_assert(exists_in(work_dir, "kept"), "the demo removed a --keep folder it did not make");
  cr_assert_eq(count_entries(kept), 0, "the demo left a half-written checkpoint in %s", kept);
}

/* volt8 compile exists to fill the cache: with the cache disabled it is refused (exit 2), naming
 * --cache and why, before compiling anything. */
Test(cli_writes, compile_into_a_disabled_cache_is_refused) {
  char cache[700];
  snprintf(cache, sizeof cache, "%s/cache", work_dir);
  setenv("VOLT8_CACHE_DISABLE", "1", 1);
  setenv("VOLT8_NVRTC_DISABLE", "1", 1); /* nothing compiles fast, should the refusal not come first */
  char *args[] = {"compile", "--arch", "sm_70", "--cache", cache, NULL};
  int rc = test_run_volt8(args, out, sizeof out, err, sizeof err);
  cr_assert_eq(rc, 2, "rc %d:\n%s\n%s", rc, out, err);
  char expected[900];
  snprintf(expected, sizeof expected, "volt8 compile: --cache %s: nothing would be stored there: the disk cache is "
           "disabled (VOLT8_CACHE_DISABLE=1)", cache);
  cr_assert(strstr(err, expected), "no \"%s\" in:\n%s", expected, err);
  cr_assert_null(strstr(out, "compiled"), "%s", out);
  cr_assert(!exists_in(work_dir, "cache"), "a disabled cache wrote %s", cache);
}
