/* What volt8's own tools (bench/, tuning/, cli/) use beyond include/volt8.h, in the spirit of a
 * static-linking-only section: none of it is exported from libvolt8.so (tools link the static
 * volt8_internal), none of it is covered by the ABI promise, and it may change in any release.
 * The tools include this header and volt8.h only (tests/runtime_layers.txt), so what they reach of
 * the runtime is listed here and nowhere else. */
#ifndef VOLT8_TOOLS_H
#define VOLT8_TOOLS_H

#define VOLT8_EXPERIMENTAL_API 1 /* volt8_experts_set_variants: the bench and the tuner pin variants */
#include "volt8.h"

#include "core/cuda_driver.h"       /* the driver table the tools call CUDA through */
#include "core/embedded_files.h"    /* the table type of the files a tool builds in (bench/bench_kernels.cu) */
#include "core/errors.h"            /* volt8_fail and friends: tools report like the library */
#include "core/json_strict.h"       /* volt8_utf8_sequence_length: the plan printer's columns */
#include "core/numeric.h"           /* FP16 and E4M3 conversions of synthetic problems */
#include "checkpoint/models.h"      /* the model registry (--model) */
#include "checkpoint/shard.h"       /* the expert-parallel split (plan --ep) */
#include "dispatch/dispatch.h"      /* the dispatch policy's choice, which bench reports and the tuner beats */
#include "dispatch/tuning.h"        /* tuning tables: read, named and written by the tuner */
#include "dispatch/tuning_nearest.h" /* which families an arch emulates: the tuner never times them */
#include "jit/codegen.h"            /* variant lists and template expansion */
#include "jit/kernel_load.h"        /* the bench support kernels load like volt8's own */
#include "jit/kernel_resources.h"   /* registers, spills and occupancy of a variant's CUBIN (list --resources) */
#include "jit/nvrtc_loader.h"       /* the NVRTC version a tuning run records */
#include "moe/moe_layout.h"         /* device layout sizes of synthetic problems; the token count's bound */
#include "tools/token_counts.h"     /* token-count lists of the tools' arguments (list --choice) */

/* The facts of a context the tools print and pass on. */
typedef struct volt8_tools_ctx_info {
  const volt8_cuda_driver *cuda; /* NULL without a device */
  int32_t device_ordinal;        /* -1: created without a device */
  int32_t device_arch;           /* e.g. 90; 0 without a device */
  int32_t target_arch;           /* arch kernels are generated for, e.g. 70 */
  const char *device_name;       /* "" without a device */
  const char *cache_dir;         /* NULL when the disk cache is off */
} volt8_tools_ctx_info;

volt8_tools_ctx_info volt8_tools_ctx(const volt8_ctx *ctx);

#endif
