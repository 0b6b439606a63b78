/* The tuning tables of one shape and op, in the lookup's order, and the lookup's pick among them
 * (docs/design.md, "Tuning tables", Lookup):
 *   1. this device's table of the shape (its own device name's, else device=any's);
 *   2. else the same shape's table of another device of the arch;
 *   3. else none: the dispatch heuristic serves.
 * A table serves a token count inside its range, from half its smallest M to its largest (counted in
 * routed pairs, M x top_k, where the table records another top_k), with its entry of the nearest M.
 * An entry naming a variant the shape does not offer, or of a family the arch emulates, is passed
 * over (with a warning): the next table serves the count. Another shape's table never serves. */
#ifndef VOLT8_TUNING_SHAPE_H
#define VOLT8_TUNING_SHAPE_H

#include "dispatch/tuning.h"

typedef struct volt8_shape_table {
  volt8_tuning_loaded loaded; /* source ENV_DIR or BUILT_IN */
  int32_t *usable;            /* per entry: its index in the variants given, -1 when it is none of them or
                               * of a family the arch emulates; NULL when no variants were given (all serve) */
} volt8_shape_table;

typedef struct volt8_shape_tables {
  int32_t count;
  volt8_shape_table *tables; /* in the lookup's order */
} volt8_shape_tables;

/* Reads every table of the shape's op N, K, scale block and ctx's target arch, in $VOLT8_TUNING_DIR
 * and built in, in the lookup's order: this device's, device=any's, then other devices' by name; in
 * each, $VOLT8_TUNING_DIR's before the built-in one. `variants` (count of them; NULL: every name
 * serves) are the shape's, which the entries are marked against. Unreadable or invalid tables are
 * skipped with a warning; with no table of this device (nor device=any) one warning is recorded.
 * Errors only for bad arguments or memory. */
volt8_status volt8_shape_tables_load(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_op op,
                                     const volt8_variant *variants, int32_t count, volt8_shape_tables *out);
void volt8_shape_tables_free(volt8_shape_tables *tables);

/* The entry that serves num_tokens at top_k: the first table covering the count, its entry of the
 * nearest M, when that entry is usable. Its variant index (may be NULL; -1 without variants) and its
 * table (may be NULL) come back too; NULL when no table serves. Reads no file. */
const volt8_tuning_entry *volt8_shape_tables_pick(const volt8_shape_tables *tables, int32_t num_tokens, int32_t top_k,
                                                  int32_t *out_index, const volt8_shape_table **out_table);

#endif
