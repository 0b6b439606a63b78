/* Checkpoint fixtures shared by the checkpoint suites: written once per test binary by
 * tests/fixtures/make_checkpoints.py (safetensors + numpy, not volt8), read through the manifest. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "checkpoint_fixture.h"
#include "test_support.h"

#include <criterion/criterion.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef VOLT8_SOURCE_DIR
#error "VOLT8_SOURCE_DIR must name the source tree (tests/CMakeLists.txt defines it)"
#endif

#define FIXTURE_SCRIPT VOLT8_SOURCE_DIR "/tests/fixtures/make_checkpoints.py"
#define FIXTURE_PYTHON VOLT8_SOURCE_DIR "/.venv/bin/python3"

extern char **environ;

static pid_t fixture_owner; /* test workers are forked from the runner: only it removes the folder */

void checkpoint_fixture_make(const char *const *fixture_groups, size_t group_count) {
  const char *fixed = getenv("VOLT8_TEST_SEED");
  unsigned seed = fixed && *fixed ? (unsigned)strtoul(fixed, NULL, 10) : (unsigned)time(NULL) ^ (unsigned)getpid();
  char dir[] = "/tmp/volt8-checkpoints-XXXXXX", seed_text[32], *argv[16];
  snprintf(seed_text, sizeof seed_text, "%u", seed);
  setenv("VOLT8_CHECKPOINT_SEED", seed_text, 1);
  if (!mkdtemp(dir) || access(FIXTURE_PYTHON, X_OK) != 0) return;
  int argc = 0;
  argv[argc++] = FIXTURE_PYTHON, argv[argc++] = FIXTURE_SCRIPT, argv[argc++] = dir;
  argv[argc++] = "--seed", argv[argc++] = seed_text;
  for (size_t i = 0; i < group_count && argc < 14; i++)
    argv[argc++] = "--group", argv[argc++] = (char *)fixture_groups[i];
  argv[argc] = NULL;
  pid_t pid;
  int wait_status = 0;
  if (posix_spawn(&pid, FIXTURE_PYTHON, NULL, NULL, argv, environ) == 0 && waitpid(pid, &wait_status, 0) == pid &&
      WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0)
    setenv("VOLT8_CHECKPOINT_FIXTURES", dir, 1), fixture_owner = getpid(), atexit(checkpoint_fixture_remove);
  else
    test_remove_tree(dir);
}

void checkpoint_fixture_remove(void) {
  if (getpid() != fixture_owner) return;
  const char *dir = getenv("VOLT8_CHECKPOINT_FIXTURES");
  if (dir && strncmp(dir, "/tmp/volt8-checkpoints-", 23) == 0) test_remove_tree(dir);
}

const char *fixture_seed(void) { return getenv("VOLT8_CHECKPOINT_SEED"); }

void fixture(const char *relative, char *path, size_t bytes) {
  const char *dir = getenv("VOLT8_CHECKPOINT_FIXTURES");
  cr_assert(dir, "no fixtures: %s --seed %s failed or %s is missing (run scripts/bootstrap.sh)", FIXTURE_SCRIPT, fixture_seed(),
            FIXTURE_PYTHON);
  snprintf(path, bytes, "%s/%s", dir, relative);
}

cJSON *manifest(void) {
  char path[4096];
  fixture("manifest.json", path, sizeof path);
  FILE *stream = fopen(path, "rb");
  cr_assert_not_null(stream, "cannot open %s", path);
  static char text[1 << 20];
  size_t bytes = fread(text, 1, sizeof text - 1, stream);
  fclose(stream);
  text[bytes] = '\0';
  cJSON *root = cJSON_Parse(text);
  cr_assert_not_null(root, "%s is not JSON", path);
  return root;
}

const cJSON *manifest_case(const cJSON *root, const char *kind, const char *name) {
  const cJSON *entry = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, kind), name);
  cr_assert_not_null(entry, "manifest has no %s case %s", kind, name);
  return entry;
}

/* status and every message fragment the manifest expects of a failure */
void expect_failure(const cJSON *entry, const char *name, volt8_status status, const char *message) {
  const char *expected = cJSON_GetObjectItemCaseSensitive(entry, "status")->valuestring;
  cr_assert(strncmp(volt8_status_string(status), expected, strlen(expected)) == 0 &&
                volt8_status_string(status)[strlen(expected)] == ':',
            "case %s (seed %s): got %s, expected %s; message: %s", name, fixture_seed(), volt8_status_string(status), expected,
            message);
  const cJSON *fragments = cJSON_GetObjectItemCaseSensitive(entry, "contains");
  for (const cJSON *fragment = fragments ? fragments->child : NULL; fragment; fragment = fragment->next)
    cr_assert(strstr(message, fragment->valuestring), "case %s (seed %s): message lacks \"%s\": %s", name, fixture_seed(),
              fragment->valuestring, message);
}
