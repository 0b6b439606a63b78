/* The embedded Lua code generator: variant space and kernel source emission. */
#ifndef VOLT8_CODEGEN_H
#define VOLT8_CODEGEN_H

#include "volt8.h"

/* VOLT8_OP_SINGLE: the whole forward of block_m 1 work items in one launch (templates/moe_single.cu). */
typedef enum volt8_op {
  VOLT8_OP_GATE_UP = 0,
  VOLT8_OP_DOWN = 1,
  VOLT8_OP_ROUTE = 2,
  VOLT8_OP_REDUCE = 3,
  VOLT8_OP_SINGLE = 4
} volt8_op;
/* VOLT8_FAMILY_TOKEN: down fused with the weighted top-k reduce, one token per CTA row (no reduce launch).
 * VOLT8_FAMILY_HMMA16816: m16n8k16 tensor cores, listed only for a target of sm_80 or newer. */
typedef enum volt8_family {
  VOLT8_FAMILY_SUPPORT = -1,
  VOLT8_FAMILY_CUDA_CORE = 0,
  VOLT8_FAMILY_MMA884 = 1,
  VOLT8_FAMILY_TOKEN = 2,
  VOLT8_FAMILY_HMMA16816 = 3
} volt8_family;

/* The narrowest block_n of a down that fuses the reduce (ARRIVAL_MIN_BLOCK_N in codegen/variants.lua):
 * the workspace keeps ceil(hidden / this) arrival counters per token. */
#define VOLT8_ARRIVAL_MIN_BLOCK_N 32
/* Kernels one experts handle keeps loaded (runtime/moe/experts.c): more than the variant space of any
 * shape at any arch, so a handle can run every variant in turn (test_codegen checks the lists). */
#define VOLT8_MAX_LOADED_KERNELS 512

typedef struct volt8_kernel_source {
  char *variant;        /* "gate_up.cc.bm4.bn16.w4.sk1" (route: "route", reduce: "reduce", "single") */
  char *entry;          /* extern "C" __global__ name, unique per variant and shape */
  char *template_path;  /* "templates/moe_gemm_cc.cu" */
  char *source;         /* generated CUDA source */
  volt8_op op;
  volt8_family family;
  int32_t block_m;      /* routed pairs per work item (GEMMs) */
  int32_t block_n;      /* output columns per CTA: of h for gate_up, of out for down */
  int32_t threads;      /* threads per CTA */
  int32_t split_k;      /* K slices reduced inside the CTA in a fixed order */
  int32_t warps;
  int32_t fused_reduce;  /* 1: a down that also forms the weighted top-k sum (no reduce launch) */
} volt8_kernel_source;

/* Lists and emits for ctx's target arch (sm_70 when ctx is NULL): a family that needs a newer arch
 * is not listed, and emitting one fails with VOLT8_ERR_ARCH_UNSUPPORTED. */
volt8_status volt8_codegen_list(volt8_ctx *ctx, const volt8_moe_shape *shape, char ***out_names, int32_t *out_count);
volt8_status volt8_codegen_emit(volt8_ctx *ctx, const volt8_moe_shape *shape, const char *variant,
                                volt8_kernel_source *out_source);
void volt8_kernel_source_free(volt8_kernel_source *source);

/* Expands one embedded template (e.g. "templates/rejection_sample.cu") with `count` @{key} values
 * through the same engine as the GEMM variants; the result (malloc'ed) carries the "generated
 * from" line and #line directives. */
volt8_status volt8_codegen_expand_template(volt8_ctx *ctx, const char *template_path, const char *const *keys,
                                           const char *const *values, int32_t count, char **out_source);
/* The same for a template that is not embedded in the library (a tool's own, e.g. the bench support
 * kernels): `template_text` is expanded as if read from `template_path`; its @{include} lines still
 * name the library's templates/. */
volt8_status volt8_codegen_expand_text(volt8_ctx *ctx, const char *template_path, const char *template_text,
                                       const char *const *keys, const char *const *values, int32_t count,
                                       char **out_source);
void volt8_codegen_names_free(char **names, int32_t count);

#endif
