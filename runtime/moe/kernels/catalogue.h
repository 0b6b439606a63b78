/* The kernel catalogue: every kernel a forward launches, one file per kind (gemm_cc.c, gemm_mma.c,
 * gemm_hmma.c, gemm_tile.c, gemm_raw.c, down_tok.c, route.c, reduce.c, single.c). A kind owns its
 * template, its template values
 * and parameter list, its grid and block, its resource needs and its test of whether a variant serves
 * a shape on an arch, and its variant space. A variant is a value (volt8_variant); its name is printed
 * from it for logs, tuning tables and `volt8 list`, and read back here only, where a user or a table
 * names one. */
#ifndef VOLT8_CATALOGUE_H
#define VOLT8_CATALOGUE_H

#include <stddef.h>
#include <stdint.h>

#include "jit/kernel_load.h"
#include "jit/kernel_signature.h"
#include "jit/template.h"
#include "volt8.h"

typedef enum volt8_op {
  VOLT8_OP_GATE_UP = 0,
  VOLT8_OP_DOWN = 1,
  VOLT8_OP_ROUTE = 2,
  VOLT8_OP_REDUCE = 3,
  VOLT8_OP_SINGLE = 4, /* the whole forward of block_m 1 work items in one launch */
  VOLT8_OP_REDUCE_HALF = 5, /* the reduce of FP16 z rows (after a tile down) */
  VOLT8_OP_ROUTE_PARTS = 6 /* the route of many pairs on many CTAs, in three passes */
} volt8_op;

typedef enum volt8_kind {
  VOLT8_KIND_GEMM_CC = 0,   /* CUDA-core FMAs (cc) */
  VOLT8_KIND_GEMM_MMA = 1,  /* mma.sync m8n8k4 (mma) */
  VOLT8_KIND_GEMM_HMMA = 2, /* mma.sync m16n8k16, sm_80 and later (hmma) */
  VOLT8_KIND_DOWN_TOK = 3,  /* down fused with the weighted top-k sum, one token per CTA row (tok) */
  VOLT8_KIND_ROUTE = 4,
  VOLT8_KIND_REDUCE = 5,
  VOLT8_KIND_SINGLE = 6,
  VOLT8_KIND_GEMM_TILE = 7, /* 64 or 128 pairs an item, the weight tile in FP16 shared memory (tile) */
  VOLT8_KIND_REDUCE_HALF = 8,
  VOLT8_KIND_GEMM_RAW = 9, /* the tile's items with the weight tile in E4M3 shared memory, sm_80 and later (raw) */
  VOLT8_KIND_ROUTE_PARTS = 10,
  VOLT8_KIND_COUNT = 11
} volt8_kind;

/* One kernel variant. A GEMM tile's optional fields are 0 where the tile does not set them. */
typedef struct volt8_variant {
  volt8_kind kind;
  volt8_op op;
  int32_t block_m;       /* routed pairs per work item */
  int32_t block_n;       /* output columns per CTA */
  int32_t warps;
  int32_t split_k;       /* K slices a CTA reduces in a fixed order */
  int32_t lanes;         /* .l: lanes per weight row (cc, tok) */
  int32_t column_groups; /* .c: hmma's block_n walked as groups */
  int32_t min_blocks;    /* .o: CTAs an SM must hold (registers capped to match) */
  int32_t fetch_bytes;   /* .f: the weight loads' L2 prefetch size (sm_80 and later) */
  int32_t fused_reduce;  /* .r1: an hmma down that forms out itself */
} volt8_variant;

#define VOLT8_VARIANT_NAME_BYTES 96
/* Kernels one experts handle keeps loaded: more than the variant space of any shape at any arch, so a
 * handle can run every variant in turn (test_codegen checks the lists). */
#define VOLT8_MAX_LOADED_KERNELS 512
/* The narrowest block_n of a down that fuses the reduce: the workspace keeps ceil(hidden / this)
 * arrival counters per token. */
#define VOLT8_ARRIVAL_MIN_BLOCK_N 32

/* "gate_up.cc.bm4.bn16.w4.sk1.l16", "route"... */
void volt8_variant_format(const volt8_variant *variant, char *buf, size_t buf_size);
/* A name back into its variant: 1 when `name` is one of the catalogue's (of any shape), else 0. */
int volt8_variant_parse(const char *name, volt8_variant *out);
int volt8_variant_equal(const volt8_variant *a, const volt8_variant *b);
/* The op a name is of, read from its first part (a tuning table's entries must be of its op): 1 and
 * *out_op, or 0 when the name starts with no op. */
int volt8_variant_name_op(const char *name, volt8_op *out_op);
/* 1 when `arch` runs the variant's family as a software routine (m8n8k4 from sm_80 on): such a family
 * is never a fallback's choice nor timed by the tuner. */
int volt8_variant_emulated(const volt8_variant *variant, int32_t arch);
/* 1 when `kind` is a large-item family (tile, raw): work items of 32 to 128 pairs of one expert, z
 * stored in FP16 (reduce_half sums it). */
int volt8_kind_large_items(volt8_kind kind);

/* Everything a launcher and a compiler need of one variant for one shape. */
typedef struct volt8_kernel_source {
  volt8_variant variant;
  char *name;           /* the variant's name */
  char *entry;          /* extern "C" __global__ name, unique per variant and shape */
  const char *template_path;
  char *source;         /* generated CUDA source */
  int32_t threads;      /* per CTA */
} volt8_kernel_source;

/* The variants of `shape` for target `arch` (route and reduce first among them in name order: the list
 * is sorted by name). *out_variants is malloc'ed. VOLT8_ERR_INVALID_ARGUMENT naming the field for a
 * shape the library does not take. */
volt8_status volt8_catalogue_list(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t arch,
                                  volt8_variant **out_variants, int32_t *out_count);
/* The source of one variant: VOLT8_ERR_NOT_FOUND for a variant outside the space,
 * VOLT8_ERR_ARCH_UNSUPPORTED for one the arch lacks the instructions of, VOLT8_ERR_CODEGEN (saying
 * which need) for one that does not fit the shape. */
volt8_status volt8_catalogue_emit(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t arch,
                                  const volt8_variant *variant, volt8_kernel_source *out_source);
void volt8_kernel_source_free(volt8_kernel_source *source);

/* The index in `variants` of the variant `name` names, or -1 (a name outside the catalogue too). */
int32_t volt8_variant_find(const volt8_variant *variants, int32_t count, const char *name);

/* The edge where a user or a tool names variants, on ctx's target arch (sm_70 without a ctx): the
 * names of a shape's variants, sorted (volt8_variant_name, `volt8 list`, the tuner), and the source of
 * a named one. */
volt8_status volt8_codegen_list(volt8_ctx *ctx, const volt8_moe_shape *shape, char ***out_names, int32_t *out_count);
void volt8_codegen_names_free(char **names, int32_t count);
volt8_status volt8_codegen_emit(volt8_ctx *ctx, const volt8_moe_shape *shape, const char *name,
                                volt8_kernel_source *out_source);
/* The target arch a ctx's kernels are for: its own; sm_70 without a ctx. */
int32_t volt8_codegen_arch(const volt8_ctx *ctx);
/* How a variant's source loads under ctx (volt8_kernel_load): for ctx's target arch, as PTX; or as an
 * sm_XX CUBIN where a tool asked for one (ctx->variant_cubin), PTX again where NVRTC makes none. */
volt8_kernel_load_request volt8_variant_load_request(const volt8_ctx *ctx, const volt8_kernel_source *source,
                                                     const char *const *entries, int32_t num_entries);

/* What a launch of a variant covers. */
typedef struct volt8_launch_counts {
  int32_t num_tokens, num_pairs;
  int32_t warm_ctas;    /* route: CTAs past the first that ask L2 for gate_up weights */
  int32_t sm_count;     /* single: the device's SMs */
  int32_t ctas_per_sm;  /* single: CTAs an SM (0: one CTA a work item; -1: as many as its launch bounds ask) */
  int32_t route_parts;  /* route_parts: the ranges the pairs are cut into */
  int32_t route_pass;   /* route_parts: 0 count, 1 scan, 2 place */
} volt8_launch_counts;

typedef struct volt8_launch_size {
  unsigned grid_x, grid_y, threads;
} volt8_launch_size;

volt8_launch_size volt8_variant_launch_size(const volt8_variant *variant, const volt8_moe_shape *shape,
                                           const volt8_launch_counts *counts);
/* Its kernel's parameter list (kernel_params.h). */
const volt8_kernel_signature *volt8_variant_signature(const volt8_variant *variant);

#endif
