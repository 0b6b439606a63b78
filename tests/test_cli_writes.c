/* What the commands and tools write and remove: a failed write removes only what it made, and a
 * command asked to store or write something that it did not exits non-zero with the reason. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_report.h"
#include "test_support.h"

static char work_dir[512];

static void make_work_dir(void) { test_make_temp_dir(work_dir, sizeof work_dir, "volt8-cli-writes"); }
static void remove_work_dir(void) { test_remove_tree(work_dir); }

TestSuite(cli_writes, .init = make_work_dir, .fini = remove_work_dir, .timeout = 60);

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
