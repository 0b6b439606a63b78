/* Small pieces the CPU suites share. */
#ifndef VOLT8_TEST_SUPPORT_H
#define VOLT8_TEST_SUPPORT_H

#include "volt8.h"

/* A context with no device and no disk cache, targeting `target_arch` (NULL: the default, sm_70);
 * fails the test when it cannot be made. */
volt8_ctx *test_cpu_ctx(const char *target_arch);

/* The whole file at `path` in a malloc'ed buffer, followed by a NUL byte so text can be parsed in
 * place (its size, without the NUL, in *out_bytes); fails the test when it cannot be read. */
void *test_read_whole(const char *path, size_t *out_bytes);

/* Removes `dir` and everything below it, depth first, without following links; a missing or empty
 * path does nothing. Safe in fixture teardowns. */
void test_remove_tree(const char *dir);

/* Writes `text` to the file `name` in `dir`, replacing it; fails the test when it cannot. */
void test_write_text(const char *dir, const char *name, const char *text);

/* Makes a fresh folder $TMPDIR/<prefix>_XXXXXX (default /tmp) into `dir`; fails the test when it cannot. */
void test_make_temp_dir(char *dir, size_t dir_size, const char *prefix);

/* Runs the volt8 command with `args` (NULL-terminated, without the program name), its stdout and
 * stderr into `out` and `err` (NUL-terminated, cut to their sizes); returns its exit status, -1 when
 * it did not exit. Fails the test when it cannot be started. */
int test_run_volt8(char *const *args, char *out, size_t out_size, char *err, size_t err_size);

#endif
