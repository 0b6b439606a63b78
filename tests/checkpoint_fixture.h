/* Checkpoint fixtures shared by the checkpoint suites (see checkpoint_fixture.c). */
#ifndef VOLT8_TEST_CHECKPOINT_FIXTURE_H
#define VOLT8_TEST_CHECKPOINT_FIXTURE_H

#include <cjson/cJSON.h>
#include <criterion/hooks.h>
#include <stddef.h>

#include "volt8.h"

/* Writes the fixture groups into a temp folder named by $VOLT8_CHECKPOINT_FIXTURES (seed in
 * $VOLT8_CHECKPOINT_SEED, or $VOLT8_TEST_SEED when set) and removes it at exit; leaves the
 * variable unset on failure. */
void checkpoint_fixture_make(const char *const *groups, size_t group_count);
void checkpoint_fixture_remove(void);
const char *fixture_seed(void);
/* The path of a fixture file; fails the test when the fixtures could not be made. */
void fixture(const char *relative, char *path, size_t bytes);
cJSON *manifest(void);
const cJSON *manifest_case(const cJSON *root, const char *kind, const char *name);
/* The status and every message fragment the manifest expects of a failure. */
void expect_failure(const cJSON *entry, const char *name, volt8_status status, const char *message);

/* One per suite: the groups its fixtures need, made before the tests and removed when the
 * runner exits. */
#define CHECKPOINT_FIXTURES(...)                                                                   \
  static const char *const fixture_groups[] = {__VA_ARGS__};                                       \
  ReportHook(PRE_ALL)(struct criterion_test_set *tests) {                                          \
    (void)tests;                                                                                   \
    checkpoint_fixture_make(fixture_groups, sizeof fixture_groups / sizeof fixture_groups[0]);     \
  }

#endif
