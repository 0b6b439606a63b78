/* What a kernel variant asks of an SM, read from ptxas' report of its CUBIN (jit/kernel_resources.h),
 * and how many of its CTAs the SM then holds. No device needed. */
#ifndef VOLT8_VARIANT_RESOURCES_H
#define VOLT8_VARIANT_RESOURCES_H

#include "jit/kernel_resources.h"
#include "volt8.h"

typedef struct volt8_variant_resources {
  volt8_kernel_resources kernel;
  int32_t threads;              /* per CTA */
  int32_t dynamic_smem_bytes;   /* what the launcher asks for (0: every volt8 kernel's shared memory is static) */
  volt8_occupancy occupancy;
  char nvrtc_version[32];       /* of the NVRTC that compiled it */
} volt8_variant_resources;

/* Compiles variant `name` of `shape` for ctx's target arch to a CUBIN with NVRTC (never through the
 * disk cache: it keeps no ptxas report) and fills *out from ptxas' report and the arch's limits.
 * An arch without known limits, or one no NVRTC can make CUBINs for, is VOLT8_ERR_ARCH_UNSUPPORTED
 * saying so. May run concurrently on one ctx. */
volt8_status volt8_variant_resources_get(volt8_ctx *ctx, const volt8_moe_shape *shape, const char *name,
                                         volt8_variant_resources *out);

/* One variant of one shape. */
typedef struct volt8_variant_ref {
  const volt8_moe_shape *shape;
  const char *name;
} volt8_variant_ref;

/* volt8_variant_resources_get of variants[0..count) on `jobs` threads (1..64) into out[0..count).
 * The first failure in the array's order is the status, its message naming the variant; the reports
 * of the others are kept. */
volt8_status volt8_variant_resources_many(volt8_ctx *ctx, const volt8_variant_ref *variants, int32_t count, int32_t jobs,
                                          volt8_variant_resources *out);

#endif
