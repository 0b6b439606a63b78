/* The rule the GPU accuracy suite holds each family to (tests/gpu/accuracy_figures.c), on made-up
 * figures: 9% above a figure passes, 11% above fails, a family or arch the file lacks (or holds as
 * null) is an error, not a pass; a malformed file is refused naming what is wrong; recording keeps
 * the other archs and reads back; and the committed figures file is well formed, names every family
 * the suite measures, and holds none above issue 62's bound. No GPU. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/accuracy_figures.h"
#include "gpu/accuracy_families.h"
#include "test_support.h"

#ifndef VOLT8_SOURCE_DIR
#error "VOLT8_SOURCE_DIR must name the source tree (tests/CMakeLists.txt defines it)"
#endif

static char dir[512];

static void make_dir(void) { test_make_temp_dir(dir, sizeof dir, "volt8_accuracy"); }
static void remove_dir(void) { test_remove_tree(dir); }

TestSuite(accuracy_figures, .init = make_dir, .fini = remove_dir, .timeout = 30);

static accuracy_figures *read_text(const char *text) {
  test_write_text(dir, "figures.json", text);
  char path[600], error[512] = "";
  snprintf(path, sizeof path, "%s/figures.json", dir);
  accuracy_figures *figures = accuracy_figures_read(path, error, sizeof error);
  cr_assert_not_null(figures, "%s", error);
  return figures;
}

static const char *const SAMPLE =
    "{\"what\": \"x\", \"figures\": {\"sm_70\": {\"cc\": 2.0e-4, \"tile\": 2.9e-4, \"mma\": null},"
    " \"sm_90\": {\"cc\": 2.1e-4}}}";

Test(accuracy_figures, nine_percent_above_passes_eleven_fails) {
  accuracy_figures *figures = read_text(SAMPLE);
  char message[512];
  cr_expect_eq(accuracy_figures_check(figures, "sm_70", "cc", 2.0e-4 * 1.09, message, sizeof message), ACCURACY_WITHIN,
               "%s", message);
  cr_expect_eq(accuracy_figures_check(figures, "sm_70", "cc", 2.0e-4 * 1.11, message, sizeof message), ACCURACY_ABOVE,
               "%s", message);
  cr_expect(strstr(message, "cc on sm_70") && strstr(message, "2.220e-04") && strstr(message, "2.000e-04"), "%s",
            message);
  cr_expect_eq(accuracy_figures_check(figures, "sm_70", "tile", 2.9e-4 * 0.5, message, sizeof message), ACCURACY_WITHIN,
               "below the figure passes: %s", message);
  cr_expect_eq(accuracy_figures_check(figures, "sm_90", "cc", 2.1e-4 * 1.11, message, sizeof message), ACCURACY_ABOVE,
               "each arch its own figure: %s", message);
  cr_expect_eq(accuracy_figures_check(figures, "sm_70", "cc", NAN, message, sizeof message), ACCURACY_ABOVE,
               "NaN never passes: %s", message);
  accuracy_figures_free(figures);
}

Test(accuracy_figures, a_missing_family_or_arch_is_an_error) {
  accuracy_figures *figures = read_text(SAMPLE);
  char message[512];
  cr_expect_eq(accuracy_figures_check(figures, "sm_70", "raw", 1e-4, message, sizeof message), ACCURACY_NO_FIGURE);
  cr_expect(strstr(message, "raw on sm_70: no figure recorded") && strstr(message, "VOLT8_ACCURACY_RECORD"), "%s",
            message);
  cr_expect_eq(accuracy_figures_check(figures, "sm_70", "mma", 1e-4, message, sizeof message), ACCURACY_NO_FIGURE,
               "null: not yet measured, %s", message);
  cr_expect_eq(accuracy_figures_check(figures, "sm_80", "cc", 1e-4, message, sizeof message), ACCURACY_NO_FIGURE,
               "%s", message);
  accuracy_figures_free(figures);
}

Test(accuracy_figures, malformed_files_are_refused_naming_what) {
  const struct {
    const char *text, *says;
  } cases[] = {
      {"not json", "is not a JSON object"},
      {"{\"what\": 1}", "has no \"figures\" object"},
      {"{\"figures\": {\"sm_70\": 3}}", "figures.sm_70 is not an object"},
      {"{\"figures\": {\"sm_70\": {\"cc\": -1}}}", "figures.sm_70.cc is -1, not a positive number"},
      {"{\"figures\": {\"sm_70\": {\"cc\": 0}}}", "figures.sm_70.cc is 0, not a positive number"},
      {"{\"figures\": {\"sm_70\": {\"cc\": \"2e-4\"}}}", "figures.sm_70.cc is \"2e-4\""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    test_write_text(dir, "bad.json", cases[i].text);
    char path[600], error[512] = "";
    snprintf(path, sizeof path, "%s/bad.json", dir);
    cr_expect_null(accuracy_figures_read(path, error, sizeof error), "%s was read", cases[i].text);
    cr_expect(strstr(error, path) && strstr(error, cases[i].says), "%s: \"%s\" lacks \"%s\"", cases[i].text, error,
              cases[i].says);
  }
  char path[600], error[512] = "";
  snprintf(path, sizeof path, "%s/none.json", dir);
  cr_expect_null(accuracy_figures_read(path, error, sizeof error));
  cr_expect(strstr(error, "none.json: cannot be read"), "%s", error);
}

Test(accuracy_figures, recording_keeps_the_other_archs_and_reads_back) {
  char path[600], error[512] = "";
  snprintf(path, sizeof path, "%s/recorded.json", dir);
  const char *const families[] = {"cc", "tile"};
  const double first[] = {2.0712e-4, 2.93349e-4}, second[] = {2.2e-4};
  cr_assert_eq(accuracy_figures_record(path, "sm_70", families, first, 2, error, sizeof error), 0, "%s", error);
  cr_assert_eq(accuracy_figures_record(path, "sm_90", families, second, 1, error, sizeof error), 0, "%s", error);
  accuracy_figures *figures = accuracy_figures_read(path, error, sizeof error);
  cr_assert_not_null(figures, "%s", error);
  double value = 0.0;
  cr_expect(accuracy_figures_get(figures, "sm_70", "cc", &value) == 1 && value == 2.07e-4, "three digits kept: %g", value);
  cr_expect(accuracy_figures_get(figures, "sm_70", "tile", &value) == 1 && value == 2.93e-4, "%g", value);
  cr_expect(accuracy_figures_get(figures, "sm_90", "cc", &value) == 1 && value == 2.2e-4, "%g", value);
  cr_expect_eq(accuracy_figures_get(figures, "sm_90", "tile", &value), -1, "sm_90 recorded only cc");
  accuracy_figures_free(figures);
  /* a new measurement replaces that family's figure only */
  const double again[] = {2.5e-4};
  cr_assert_eq(accuracy_figures_record(path, "sm_70", families + 1, again, 1, error, sizeof error), 0, "%s", error);
  figures = accuracy_figures_read(path, error, sizeof error);
  cr_assert_not_null(figures, "%s", error);
  cr_expect(accuracy_figures_get(figures, "sm_70", "cc", &value) == 1 && value == 2.07e-4, "%g", value);
  cr_expect(accuracy_figures_get(figures, "sm_70", "tile", &value) == 1 && value == 2.5e-4, "%g", value);
  accuracy_figures_free(figures);
  const double bad[] = {NAN};
  cr_expect_eq(accuracy_figures_record(path, "sm_70", families, bad, 1, error, sizeof error), -1);
  cr_expect(strstr(error, "cc on sm_70 measured nan"), "%s", error);
}

/* The committed file: every family the suite measures on each arch has a key (a figure, or null until
 * measured on a GPU), and each figure is within issue 62's bound for M <= 64. */
Test(accuracy_figures, the_committed_figures_name_every_family_within_the_bound) {
  char path[1024], error[512] = "";
  snprintf(path, sizeof path, "%s/%s", VOLT8_SOURCE_DIR, ACCURACY_FIGURES_FILE);
  accuracy_figures *figures = accuracy_figures_read(path, error, sizeof error);
  cr_assert_not_null(figures, "%s", error);
  const char *const archs[] = {"sm_70", "sm_90"};
  for (int a = 0; a < 2; a++) {
    for (int f = 0; f < ACCURACY_FAMILY_COUNT; f++) {
      const accuracy_family *family = &ACCURACY_FAMILIES[f];
      double value = 0.0;
      int found = accuracy_figures_get(figures, archs[a], family->name, &value);
      if (atoi(archs[a] + 3) < family->min_arch) {
        cr_expect_eq(found, -1, "%s names %s on %s, which that arch does not list", path, family->name, archs[a]);
        continue;
      }
      cr_expect_geq(found, 0, "%s lacks %s on %s (null until measured)", path, family->name, archs[a]);
      if (found == 1)
        cr_expect_leq(value, ACCURACY_LIMIT_SMALL_M, "%s on %s: figure %.3e above issue 62's %.1e", family->name,
                      archs[a], value, ACCURACY_LIMIT_SMALL_M);
    }
  }
  accuracy_figures_free(figures);
}
