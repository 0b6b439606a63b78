/* Fuzz target: the library's readers of its environment, as volt8_ctx_create, the NVRTC search and
 * the tuning-table listing read them.
 *
 * Byte 0 says which variables are set; the rest, split at "\n----\n", are their values in order (each
 * cut at its first NUL, as an environment holds it): VOLT8_L2_WARM_BYTES, VOLT8_SINGLE_LAUNCH_CTAS,
 * VOLT8_CACHE_DISABLE, VOLT8_CACHE_DIR, XDG_CACHE_HOME, HOME, VOLT8_TUNING_DIR, VOLT8_NVRTC_DIRS.
 * Invariants: a context is made exactly when each numeric variable is unset or ASCII digits alone
 * without a leading zero, within its range (an independent reading here), and a refusal names the
 * variable; the cache folder follows the documented order (VOLT8_CACHE_DISABLE=1, VOLT8_CACHE_DIR,
 * $XDG_CACHE_HOME/volt8, $HOME/.cache/volt8, none); the one-launch CTAs are the value read; the tables
 * listed hold the built-in ones, and a VOLT8_TUNING_DIR that is no folder is a warning naming it; the
 * NVRTC candidates from VOLT8_NVRTC_DIRS are two a non-empty ':'-separated folder, in order, none of
 * them holding a ':'. */
#define VOLT8_EXPERIMENTAL_API 1
#include "fuzz_common.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/ctx_internal.h"
#include "dispatch/tuning.h"
#include "jit/nvrtc_loader.h"

#define VARIABLES 8
static const char *const NAMES[VARIABLES] = {"VOLT8_L2_WARM_BYTES", "VOLT8_SINGLE_LAUNCH_CTAS", "VOLT8_CACHE_DISABLE",
                                             "VOLT8_CACHE_DIR",     "XDG_CACHE_HOME",           "HOME",
                                             "VOLT8_TUNING_DIR",    "VOLT8_NVRTC_DIRS"};

/* The grammar of a numeric variable, read here on its own: digits, no leading zero, low..high. */
static int reads_as(const char *text, uint64_t high, uint64_t *out) {
  size_t length = strlen(text);
  if (length == 0 || length > 19 || (text[0] == '0' && length > 1)) return 0;
  uint64_t value = 0;
  for (size_t i = 0; i < length; i++) {
    if (text[i] < '0' || text[i] > '9') return 0;
    value = value * 10 + (uint64_t)(text[i] - '0');
  }
  if (value > high) return 0;
  *out = value;
  return 1;
}

static int32_t builtin_tables = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  setenv("VOLT8_DISABLE_CUDA", "1", 1);
  for (int v = 0; v < VARIABLES; v++) unsetenv(NAMES[v]);
  fuzz_require(volt8_tuning_table_count(70, NULL, &builtin_tables) == VOLT8_OK, "tables", NULL);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  if (builtin_tables < 0) LLVMFuzzerInitialize(NULL, NULL);
  const uint8_t *parts[VARIABLES + 1];
  size_t part_sizes[VARIABLES + 1];
  int count = fuzz_split(data + 1, size - 1, parts, part_sizes, VARIABLES);
  char *values[VARIABLES] = {NULL};
  for (int v = 0, next = 0; v < VARIABLES; v++) {
    unsetenv(NAMES[v]);
    if (!(data[0] & (1u << v))) continue;
    values[v] = next < count ? fuzz_strndup(parts[next], part_sizes[next]) : fuzz_strndup((const uint8_t *)"", 0);
    next++;
    values[v][strlen(values[v])] = '\0'; /* cut at the first NUL, as the environment holds it */
    setenv(NAMES[v], values[v], 1);
  }
  const char *set[VARIABLES];
  for (int v = 0; v < VARIABLES; v++) set[v] = getenv(NAMES[v]);

  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.target_arch = "sm_70";
  volt8_ctx *ctx = NULL;
  volt8_status status = volt8_ctx_create(&options, &ctx);
  char detail[512];
  snprintf(detail, sizeof detail, "L2 \"%.60s\" CTAs \"%.60s\": %s", set[0] ? set[0] : "(unset)", set[1] ? set[1] : "(unset)",
           status == VOLT8_OK ? "made" : volt8_last_error(NULL));
  uint64_t l2 = 0, ctas = 0;
  int l2_ok = !set[0] || reads_as(set[0], INT64_MAX, &l2), ctas_ok = !set[1] || reads_as(set[1], 32, &ctas);
  fuzz_require((status == VOLT8_OK) == (l2_ok && ctas_ok), "a context made or refused against the grammar", detail);
  if (status != VOLT8_OK) {
    fuzz_require(ctx == NULL, "a refused context was handed out", detail);
    fuzz_require(strstr(volt8_last_error(NULL), NAMES[l2_ok ? 1 : 0]) != NULL, "the refusal names another variable",
                 detail);
  } else {
    fuzz_require(ctx->single_ctas_per_sm == (set[1] ? (int32_t)ctas : -1), "the CTAs read otherwise", detail);
    /* the cache folder, in the documented order */
    char expected[8192];
    const char *want = NULL;
    if (set[2] && strcmp(set[2], "1") == 0) want = NULL;
    else if (set[3] && *set[3]) want = set[3];
    else if (set[4] && *set[4]) snprintf(expected, sizeof expected, "%s/volt8", set[4]), want = expected;
    else if (set[5] && *set[5]) snprintf(expected, sizeof expected, "%s/.cache/volt8", set[5]), want = expected;
    fuzz_require(want ? ctx->cache_dir && strcmp(ctx->cache_dir, want) == 0 : ctx->cache_dir == NULL,
                 "the cache folder is not the documented one", ctx->cache_dir ? ctx->cache_dir : "(none)");
    if (set[7]) {
      /* each non-empty folder of VOLT8_NVRTC_DIRS, in order, its two sonames; none holds a ':' */
      const volt8_nvrtc_registry *registry = NULL;
      fuzz_require(volt8_nvrtc_registry_probed(ctx, &registry) == VOLT8_OK, "the NVRTC search failed", NULL);
      const char *folder = set[7];
      int listed = 0;
      for (int32_t i = 0; i < registry->candidate_count; i++) {
        const volt8_nvrtc_tried *tried = &registry->candidates[i];
        if (strcmp(tried->origin, "VOLT8_NVRTC_DIRS") != 0) continue;
        listed++;
        fuzz_require(strchr(tried->path, ':') == NULL, "a folder kept a ':'", tried->path);
        while (*folder == ':') folder++;
        size_t length = strcspn(folder, ":");
        fuzz_require(length > 0 && strncmp(tried->path, folder, length < 400 ? length : 400) == 0,
                     "a candidate is not of the next folder", tried->path);
        if (listed % 2 == 0) folder += length;
      }
      size_t folders = 0;
      for (const char *at = set[7]; *at;) {
        size_t length = strcspn(at, ":");
        folders += length > 0;
        at += length + (at[length] == ':');
      }
      fuzz_require((size_t)listed <= 2 * folders, "more candidates than two a folder", set[7]);
    }
    volt8_ctx_destroy(ctx);
  }
  /* the listing of the tables: built-in ones always; a VOLT8_TUNING_DIR that is no folder, a warning */
  volt8_tuning_warnings_reset();
  int32_t tables = -1;
  fuzz_require(volt8_tuning_table_count(70, NULL, &tables) == VOLT8_OK && tables >= builtin_tables,
               "the listing lost the built-in tables", set[6]);
  if (set[6] && *set[6]) {
    struct stat info;
    DIR *folder = opendir(set[6]);
    int listable = folder != NULL && stat(set[6], &info) == 0 && S_ISDIR(info.st_mode);
    if (folder) closedir(folder);
    char text[8192];
    int32_t warnings = 0;
    volt8_tuning_warnings(text, sizeof text, &warnings);
    if (!listable)
      fuzz_require(warnings >= 1 && strstr(text, "VOLT8_TUNING_DIR=") != NULL, "a tuning folder that serves nothing "
                   "was not a warning", set[6]);
  }
  for (int v = 0; v < VARIABLES; v++) {
    unsetenv(NAMES[v]);
    free(values[v]);
  }
  return 0;
}
