/* The one way a kernel reaches the device: compile (or find in the disk cache) a generated source,
 * load the module, look up its functions. The forward, the sampler, variant compilation and the
 * bench harness all load through here. */
#ifndef VOLT8_KERNEL_LOAD_H
#define VOLT8_KERNEL_LOAD_H

#include "core/cuda_driver.h"
#include "jit/image.h"
#include "volt8.h"

typedef struct volt8_kernel_load_request {
  const char *kernel_name;       /* the cache key's name */
  const char *source;            /* complete generated CUDA source */
  int32_t arch;                  /* 70 -> compute_70 (PTX) or sm_70 (CUBIN) */
  volt8_image_kind kind;
  int32_t ptx_fallback;          /* 1: when no NVRTC builds `arch`, PTX for ctx's target arch instead */
  const char *const *entries;    /* functions to look up once loaded */
  int32_t num_entries;
  const char *failure_prefix;    /* starts messages of driver failures ("rejection sampler: "); may be NULL */
} volt8_kernel_load_request;

/* Compiles or loads from the cache, then, when out_module is not NULL, loads the module (ctx's device
 * context must be current) and fills out_functions[i] with entries[i]. With out_module NULL only the
 * image is made (no device needed). *out_from_cache (may be NULL) says whether the image came from the
 * disk cache. On failure nothing stays loaded. */
volt8_status volt8_kernel_load(volt8_ctx *ctx, const volt8_kernel_load_request *request, CUmodule *out_module,
                               CUfunction *out_functions, int32_t *out_from_cache);

#endif
