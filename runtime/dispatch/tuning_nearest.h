/* The fallback for a shape without a tuning table of its own: the table of the nearest tabled
 * shape of the same op, arch and scale block, read at the token count that gives the same routed
 * pairs per expert. */
#ifndef VOLT8_TUNING_NEAREST_H
#define VOLT8_TUNING_NEAREST_H

#include "dispatch/tuning.h"

/* Candidates: every table in $VOLT8_TUNING_DIR and built in whose name has the op, ctx's target
 * arch and the shape's block, however many there are; this device's first, then device=any, then
 * other devices', each group by the distance |ln(N/N')| + |ln(K/K')|. A candidate's entry nearest
 * the scaled token count (num_tokens * top_k / E, in the table's top_k and E from its __metadata__)
 * serves when it is one of `variants` (the shape's) and of a family the arch does not emulate; when
 * it is not, the candidate's nearest such entry serves if its M is within a factor of two of the
 * scaled count; else the next candidate is tried. A candidate whose smallest M is above the scaled
 * count does not speak for it (volt8_tuning_table_begins_above, reach 1: a shape's own table reaches
 * twice below its range, another's not at all): the next is tried.
 * One exception to that order: the shape's own table from another device (its own N and K) comes
 * first wherever the count lies in its range (from half its smallest M to its largest). There it was
 * measured at this shape's counts, which another shape's table of this device, scaled, was not: on an
 * H100, DeepSeek-V3 TP2's table from M = 1 would otherwise pick for every model's decode sizes. So
 * those tables are read even past the first candidate that serves every count.
 * out_match->source = NEAREST when one served, else NONE.
 * Unreadable or invalid candidates are skipped with a warning. Errors only for memory. */
volt8_status volt8_tuning_nearest(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_op op, int32_t num_tokens,
                                  int32_t top_k, const volt8_variant *variants, int32_t count,
                                  volt8_tuning_match *out_match);

/* The same in two steps, so that the tables are read once and any token count is then served without
 * reading a file: the candidates read in their order, up to the first whose every entry may serve
 * and whose range begins at M = 1 or 2 (no later one could ever serve), each with the entries ctx's
 * target arch may serve marked. */
typedef struct volt8_nearest_table {
  volt8_tuning_loaded loaded; /* source NEAREST */
  int32_t *usable;            /* per entry: its index in `variants`, -1 when it is none of them or of a
                               * family the arch emulates */
  int32_t same_shape_elsewhere; /* 1: the shape's own N and K, measured on another device */
} volt8_nearest_table;

typedef struct volt8_nearest_tables {
  int32_t count;
  volt8_nearest_table *tables; /* nearest first */
  int32_t experts;             /* the model's experts, which routing density is measured in */
} volt8_nearest_tables;

volt8_status volt8_tuning_nearest_load(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_op op,
                                       const volt8_variant *variants, int32_t count, volt8_nearest_tables *out);
/* The entry that serves num_tokens at top_k, its index in the variants (may be NULL) and its table in
 * *out_origin (may be NULL); NULL when no table serves. Reads no file. */
const volt8_tuning_entry *volt8_tuning_nearest_pick(const volt8_nearest_tables *tables, int32_t num_tokens,
                                                   int32_t top_k, int32_t *out_index, const char **out_origin);
void volt8_tuning_nearest_free(volt8_nearest_tables *tables);

#endif
