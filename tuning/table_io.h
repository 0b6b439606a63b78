/* Writing tuning tables (format: runtime/dispatch/tuning.h): the tuner's results merged into the table on
 * disk, one line per token count, replaced atomically. */
#ifndef VOLT8_TUNING_TABLE_IO_H
#define VOLT8_TUNING_TABLE_IO_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/tools.h"
#include "volt8.h"

typedef struct tuning_result_entry {
  int32_t m;
  char variant[VOLT8_VARIANT_NAME_BYTES];
  double forward_us;                          /* the whole forward with this variant (measured or modelled) */
  double relative_l2;                         /* against the reference; NaN when not run */
  char paired_with[VOLT8_VARIANT_NAME_BYTES]; /* the other op's variant in that forward */
  char runner_up[VOLT8_VARIANT_NAME_BYTES];   /* "" when there was none */
  double runner_up_us;
  int32_t candidates, rejected;
} tuning_result_entry;

typedef struct tuning_table_metadata {
  const char *op;                 /* "gate_up" | "down" */
  int32_t n, k, block_n, block_k;
  int32_t arch;                   /* 90 */
  const char *device_token;       /* file name part: "NVIDIA_H200" or "any" */
  const char *device;             /* the device it was measured on, or what the model describes */
  int32_t measured;               /* 0: derived by a model (see `method`) */
  const char *method;             /* how the entries were chosen */
  const char *command;            /* the tuner's command line */
  const char *nvrtc_version;      /* "13.0" or "unknown" */
  const char *date;               /* UTC ISO 8601 */
  const volt8_moe_shape *shape;   /* the shape tuned (offset recorded; one table serves every rank) */
  int32_t top_k;
} tuning_table_metadata;

/* dir/<the table's name> for an op's table of these dimensions, arch and device token. */
volt8_status tuning_table_path(volt8_ctx *ctx, const char *dir, const char *op, int32_t n, int32_t k, int32_t block_n,
                               int32_t block_k, int32_t arch, const char *device_token, char *out_path,
                               size_t out_path_size);
/* Merges `entries` into dir/<table name> (created if missing; M values already there and not in
 * `entries` are kept) and writes it through a temporary file and rename. An existing file that is
 * not a valid table is left alone and is an error (VOLT8_ERR_FORMAT, naming it). `out_path` (may be
 * NULL) receives the path written. */
volt8_status tuning_table_merge_write(volt8_ctx *ctx, const char *dir, const tuning_table_metadata *metadata,
                                      const tuning_result_entry *entries, int32_t count, char *out_path,
                                      size_t out_path_size);
/* Sets (or replaces) __metadata__.<key> of the table at `path` to `value` (taken over, freed in any
 * case) and rewrites it atomically; the entries stay as they are. */
volt8_status tuning_table_set_metadata(volt8_ctx *ctx, const char *path, const char *op, const char *key, cJSON *value);
/* The JSON text of a table from its metadata and entries alone (what a first run writes). */
char *tuning_table_render(const tuning_table_metadata *metadata, const tuning_result_entry *entries, int32_t count);

#endif
