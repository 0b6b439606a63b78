/* The recorded accuracy of each kernel family (tests/gpu/accuracy_figures.json) and the rule the GPU
 * suite holds a measurement to: a family's relative L2 error against the double-precision reference
 * may be at most ACCURACY_MARGIN above its recorded figure for the target arch. No GPU or Criterion
 * here: tests/test_accuracy_figures.c checks the rule on the CPU, tests/gpu/test_accuracy.c measures. */
#ifndef VOLT8_ACCURACY_FIGURES_H
#define VOLT8_ACCURACY_FIGURES_H

#include <stddef.h>

#define ACCURACY_MARGIN 0.10       /* a measurement may be 10% above its family's figure */
#define ACCURACY_LIMIT_SMALL_M 3.2e-4 /* issue 62: every family at M <= 64 (the suite's problem is M = 64) */
#define ACCURACY_FIGURES_FILE "tests/gpu/accuracy_figures.json" /* below the source root */

typedef struct accuracy_figures accuracy_figures; /* a figures file, read */

typedef enum accuracy_verdict {
  ACCURACY_WITHIN = 0,    /* at most ACCURACY_MARGIN above the figure */
  ACCURACY_ABOVE = 1,     /* more than that above it */
  ACCURACY_NO_FIGURE = 2, /* the file holds no figure for this arch and family (absent or null): an error */
} accuracy_verdict;

/* Reads `path`. NULL when it cannot be read or is not a figures file, with why (naming the path and
 * the bad value) in `error`. A figures file is a JSON object whose "figures" object maps target arch
 * ("sm_70", "sm_90") to an object mapping family ("cc", "tok", "mma", "hmma", "tile", "raw") to a
 * positive finite number or null (not yet measured). */
accuracy_figures *accuracy_figures_read(const char *path, char *error, size_t error_size);
void accuracy_figures_free(accuracy_figures *figures);
/* The figure of (arch, family) into *figure, 1; 0 where the file holds null (not yet measured), -1
 * where it does not name that arch and family. */
int accuracy_figures_get(const accuracy_figures *figures, const char *arch, const char *family, double *figure);
/* Where `measured` stands against (arch, family)'s figure; `message` says it in words (the family,
 * the arch, the measurement, the figure and the bound, or that no figure was recorded and how to
 * record one). */
accuracy_verdict accuracy_figures_check(const accuracy_figures *figures, const char *arch, const char *family,
                                        double measured, char *message, size_t message_size);
/* Writes the measurements of `count` families on `arch` into the figures file at `path`: the file's
 * other archs (and its other keys) as they were, this arch's families replaced; a new file where there
 * is none. 0, or -1 with why in `error`. */
int accuracy_figures_record(const char *path, const char *arch, const char *const *families, const double *measured,
                            int count, char *error, size_t error_size);

#endif
