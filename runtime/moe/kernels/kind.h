/* What each kernel kind's file fills in (catalogue.h says what a kind owns); the catalogue and the
 * kind files only. */
#ifndef VOLT8_KERNELS_KIND_H
#define VOLT8_KERNELS_KIND_H

#include "moe/kernels/catalogue.h"
#include "moe/kernels/kernel_params.h"
#include "moe/kernels/moe_layout.h"
#include "moe/kernels/variant_space.h"

#define VOLT8_MAX_KERNEL_VALUES 48
/* Static shared memory a CTA may hold, on every arch the kernels target. */
#define VOLT8_STATIC_SHARED_MEMORY_BYTES (48 * 1024)

typedef struct volt8_kernel_values {
  volt8_template_value items[VOLT8_MAX_KERNEL_VALUES];
  int32_t count;
} volt8_kernel_values;

void volt8_values_set(volt8_kernel_values *values, const char *name, int64_t number);
/* A values function's refusal: `why` into reason; 0. */
int volt8_refuse(char *reason, size_t reason_size, const char *why);

typedef struct volt8_kind_spec {
  volt8_kind kind;
  const char *family;           /* the name's second part ("cc"); NULL: a support kernel, named by its op */
  volt8_op op;                  /* a support kernel's op */
  const char *template_path;
  int32_t min_arch;             /* the target arch its instructions need (0: any); a tile with a fetch
                                 * size needs VOLT8_FETCH_MIN_ARCH */
  int32_t emulated_from_arch;   /* from this arch on it runs as a software routine (0: never) */
  int32_t lists_values;         /* 1: the source's version line lists every value; 0: variant, shape, threads */
  int32_t expert_range;         /* 1: its values carry the rank's expert range (moe_expert_range.cu) */
  int32_t large_items;          /* 1: work items of many pairs of one expert (volt8_kind_large_items) */
  const volt8_variant_space *space; /* a GEMM kind's block_m values and tiles (codegen/); NULL: a support kernel */
  /* Its template values for a valid shape on `arch`; 0 with the reason when the variant does not fit
   * (its shared memory, registers or tile against the shape). */
  int (*values)(const volt8_variant *variant, const volt8_moe_shape *shape, int32_t arch, volt8_kernel_values *out,
                char *reason, size_t reason_size);
  /* Its threads a CTA and parameter list: the same for every variant (fixed_*), or the variant's. */
  int32_t fixed_threads;
  const volt8_kernel_signature *fixed_signature;
  int32_t (*threads)(const volt8_variant *variant);
  const volt8_kernel_signature *(*signature)(const volt8_variant *variant);
  volt8_launch_size (*launch_size)(const volt8_variant *variant, const volt8_moe_shape *shape,
                                   const volt8_launch_counts *counts);
} volt8_kind_spec;

#define VOLT8_FETCH_MIN_ARCH 80

extern const volt8_kind_spec volt8_kind_gemm_cc, volt8_kind_gemm_mma, volt8_kind_gemm_hmma, volt8_kind_gemm_tile,
    volt8_kind_gemm_raw, volt8_kind_down_tok, volt8_kind_route, volt8_kind_route_parts, volt8_kind_reduce,
    volt8_kind_reduce_half, volt8_kind_single;

/* What the GEMM kinds share (gemm.c): the operand geometry of an op, the values every GEMM template
 * takes, the GEMMs' parameter lists and grid. */
typedef struct volt8_gemm_geometry {
  int64_t k, n, rows, up_row_offset, expert_weight_bytes, counter_index;
  int64_t scale_row_offset, scale_k_offset, scale_row_stride, scale_half_stride, scale_expert_stride;
  int64_t scale_k_blocks; /* scale blocks along K a row's products cross */
} volt8_gemm_geometry;

volt8_gemm_geometry volt8_gemm_geometry_of(volt8_op op, const volt8_moe_shape *shape);
void volt8_gemm_common_values(const volt8_variant *variant, const volt8_moe_shape *shape,
                              const volt8_gemm_geometry *geometry, volt8_kernel_values *out);
int32_t volt8_gemm_threads(const volt8_variant *variant);
const volt8_kernel_signature *volt8_gemm_signature(const volt8_variant *variant);
volt8_launch_size volt8_gemm_launch_size(const volt8_variant *variant, const volt8_moe_shape *shape,
                                         const volt8_launch_counts *counts);
/* The values function of the route and the reduce: one set of constants for a shape's support
 * kernels (the route's shared memory plan among them), with the kernel's threads. */
int volt8_support_values(const volt8_variant *variant, const volt8_moe_shape *shape, int32_t arch,
                         volt8_kernel_values *out, char *reason, size_t reason_size);
/* Threads a CTA of the variant's kernel runs. */
int32_t volt8_variant_threads(const volt8_variant *variant);

/* a / b rounded up, and down toward minus infinity (the sizes below may go negative). */
static inline int64_t volt8_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t volt8_floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
static inline int64_t volt8_round_up(int64_t a, int64_t b) { return volt8_ceil_div(a, b) * b; }
static inline int64_t volt8_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t volt8_max64(int64_t a, int64_t b) { return a > b ? a : b; }

#endif
