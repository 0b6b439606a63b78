/* The resident CTAs per SM of a shape's variants, read from their CUBINs for the derivation model
 * (derive_model.h), and the record of them in the derived tables' __metadata__.ctas_per_sm, which
 * the resource check (tests/test_resources.c) holds the kernels to. */
#ifndef VOLT8_DERIVE_OCCUPANCY_H
#define VOLT8_DERIVE_OCCUPANCY_H

#include "derive_model.h"

#define DERIVE_OCCUPANCY_KEY "ctas_per_sm"
#define DERIVE_OCCUPANCY_FROM_KEY "ctas_per_sm_from"

typedef struct derive_occupancy_set {
  derive_occupancy view;      /* what derive_state points at */
  char **names;
  int32_t *ctas_per_sm;
  char from[128];             /* "sm_70 CUBINs of NVRTC 12.9 (ptxas -v)" */
  char nvrtc_version[64];     /* the tables' nvrtc_version: "12.9 (CUBINs for occupancy only)" */
} derive_occupancy_set;

/* Compiles every variant of `shape` for ctx's target arch to a CUBIN on `jobs` threads and keeps
 * each one's resident CTAs per SM under `limits` (NULL: the target arch's own; the H200 check gives
 * sm_90's, its JIT being taken to use the registers the sm_70 CUBIN does) (-1 for one that spills or does not fit: the model passes it over). Where the shape's slice starts past offset 0 of the scale grid,
 * the same variants at offset 0 too (rank 0 of every TP size, which the table also serves): each keeps
 * the fewer CTAs of the two, -1 where either spills. Errors (no NVRTC that makes CUBINs, a failed
 * compile) name the variant; nothing is kept then. */
volt8_status derive_occupancy_compile(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t jobs,
                                      const volt8_sm_limits *limits, derive_occupancy_set *out);
/* Writes the figures of the table's op into the table at `path` (one of op `op_name`): an object of
 * variant name -> resident CTAs per SM, -1 for one that spills or does not fit. */
volt8_status derive_occupancy_record(volt8_ctx *ctx, const derive_occupancy_set *set, const char *path,
                                     const char *op_name);
void derive_occupancy_free(derive_occupancy_set *set);

#endif
