/* The recorded per-family accuracy figures and the rule a measurement is held to (accuracy_figures.h). */
#include "accuracy_figures.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILE_BYTES (1 << 20)

struct accuracy_figures {
  cJSON *root;
  cJSON *figures; /* root's "figures" */
  char path[512];
};

static char *read_text(const char *path, char *error, size_t error_size) {
  FILE *file = fopen(path, "rb");
  if (!file) {
    snprintf(error, error_size, "%s: cannot be read: %s", path, strerror(errno));
    return NULL;
  }
  char *text = malloc(MAX_FILE_BYTES + 1);
  size_t length = text ? fread(text, 1, MAX_FILE_BYTES + 1, file) : 0;
  int failed = ferror(file);
  fclose(file);
  if (!text || failed || length > MAX_FILE_BYTES) {
    snprintf(error, error_size, "%s: %s", path, !text ? "out of memory" : failed ? "read failed" : "is over 1 MiB");
    free(text);
    return NULL;
  }
  text[length] = '\0';
  return text;
}

/* NULL when `figures` (a "figures" object) is well formed, else what is wrong. */
static const char *check_figures(const cJSON *figures, char *why, size_t why_size) {
  if (!cJSON_IsObject(figures)) return "has no \"figures\" object";
  for (const cJSON *arch = figures->child; arch; arch = arch->next) {
    if (!cJSON_IsObject(arch)) {
      snprintf(why, why_size, "figures.%s is not an object of families", arch->string);
      return why;
    }
    for (const cJSON *family = arch->child; family; family = family->next) {
      if (cJSON_IsNull(family)) continue;
      if (!cJSON_IsNumber(family) || !isfinite(family->valuedouble) || family->valuedouble <= 0) {
        char *value = cJSON_PrintUnformatted(family);
        snprintf(why, why_size, "figures.%s.%s is %s, not a positive number or null", arch->string, family->string,
                 value ? value : "?");
        free(value);
        return why;
      }
    }
  }
  return NULL;
}

accuracy_figures *accuracy_figures_read(const char *path, char *error, size_t error_size) {
  char *text = read_text(path, error, error_size);
  if (!text) return NULL;
  cJSON *root = cJSON_Parse(text);
  free(text);
  char why[256];
  const char *problem = !cJSON_IsObject(root) ? "is not a JSON object"
                                              : check_figures(cJSON_GetObjectItemCaseSensitive(root, "figures"), why,
                                                              sizeof why);
  accuracy_figures *figures = problem ? NULL : calloc(1, sizeof *figures);
  if (!figures) {
    snprintf(error, error_size, "%s: %s", path, problem ? problem : "out of memory");
    cJSON_Delete(root);
    return NULL;
  }
  figures->root = root;
  figures->figures = cJSON_GetObjectItemCaseSensitive(root, "figures");
  snprintf(figures->path, sizeof figures->path, "%s", path);
  return figures;
}

void accuracy_figures_free(accuracy_figures *figures) {
  if (!figures) return;
  cJSON_Delete(figures->root);
  free(figures);
}

int accuracy_figures_get(const accuracy_figures *figures, const char *arch, const char *family, double *figure) {
  const cJSON *value = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(figures->figures, arch), family);
  if (!value) return -1;
  if (!cJSON_IsNumber(value)) return 0;
  *figure = value->valuedouble;
  return 1;
}

accuracy_verdict accuracy_figures_check(const accuracy_figures *figures, const char *arch, const char *family,
                                        double measured, char *message, size_t message_size) {
  double figure = 0.0;
  if (accuracy_figures_get(figures, arch, family, &figure) != 1) {
    snprintf(message, message_size,
             "%s on %s: no figure recorded in %s (measured %.3e; record the figures on a GPU with "
             "VOLT8_ACCURACY_RECORD=FILE, scripts/gpu_check.sh run accuracy_record)",
             family, arch, figures->path, measured);
    return ACCURACY_NO_FIGURE;
  }
  double bound = figure * (1.0 + ACCURACY_MARGIN);
  int within = measured <= bound; /* NaN is not */
  snprintf(message, message_size, "%s on %s: relative L2 %.3e, %s %.0f%% above its figure %.3e (at most %.3e)", family,
           arch, measured, within ? "within" : "more than", 100.0 * ACCURACY_MARGIN, figure, bound);
  return within ? ACCURACY_WITHIN : ACCURACY_ABOVE;
}

static const char *const WHAT =
    "The relative L2 error against the double-precision reference of each kernel family's pinned pair on the "
    "problem of tests/gpu/test_accuracy.c, per target arch (sm_70: the compute_70 PTX), measured on a GPU. "
    "gpu_test_accuracy fails where a family's error is more than 10% above its figure; null: not yet "
    "measured. Written by VOLT8_ACCURACY_RECORD=FILE gpu_test_accuracy (scripts/gpu_check.sh run "
    "accuracy_record), then copied here.";

int accuracy_figures_record(const char *path, const char *arch, const char *const *families, const double *measured,
                            int count, char *error, size_t error_size) {
  cJSON *root = NULL;
  FILE *existing = fopen(path, "rb");
  if (existing) {
    fclose(existing);
    accuracy_figures *read = accuracy_figures_read(path, error, error_size);
    if (!read) return -1;
    root = read->root;
    read->root = NULL;
    accuracy_figures_free(read);
  } else {
    root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "what", WHAT);
    cJSON_AddObjectToObject(root, "figures");
  }
  cJSON *figures = cJSON_GetObjectItemCaseSensitive(root, "figures");
  cJSON *of_arch = cJSON_GetObjectItemCaseSensitive(figures, arch);
  if (!of_arch) of_arch = cJSON_AddObjectToObject(figures, arch);
  for (int i = 0; i < count; i++) {
    if (!isfinite(measured[i]) || measured[i] <= 0) {
      snprintf(error, error_size, "%s: %s on %s measured %g, not a positive number", path, families[i], arch, measured[i]);
      cJSON_Delete(root);
      return -1;
    }
    char text[32];
    snprintf(text, sizeof text, "%.2e", measured[i]); /* three digits: what a figure can say */
    cJSON_DeleteItemFromObjectCaseSensitive(of_arch, families[i]);
    cJSON_AddNumberToObject(of_arch, families[i], strtod(text, NULL));
  }
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  char temporary[600];
  snprintf(temporary, sizeof temporary, "%s.part", path);
  FILE *file = text ? fopen(temporary, "wb") : NULL;
  int written = file && fputs(text, file) >= 0 && fputc('\n', file) != EOF;
  if (file && fclose(file) != 0) written = 0;
  free(text);
  if (!written || rename(temporary, path) != 0) {
    snprintf(error, error_size, "%s: cannot be written: %s", path, strerror(errno));
    remove(temporary);
    return -1;
  }
  return 0;
}
