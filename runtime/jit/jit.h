/* Compile-or-load of one CUDA source: NVRTC plus the disk cache. Knows nothing of GEMMs. */
#ifndef VOLT8_JIT_H
#define VOLT8_JIT_H

#include "jit/image.h"
#include "volt8.h"

typedef struct volt8_jit_request {
  const char *kernel_name;       /* entry name; part of the cache key */
  const char *source;            /* complete, self-contained CUDA source */
  int32_t arch;                  /* 70 -> compute_70 (PTX) or sm_70 (CUBIN) */
  volt8_image_kind kind;
  const char *const *options;    /* extra NVRTC options; the key uses them sorted */
  int32_t num_options;
} volt8_jit_request;


/* Loads the image from ctx's disk cache or compiles and publishes it. Compile errors:
 * VOLT8_ERR_COMPILE with the NVRTC log in volt8_last_error. No NVRTC for the arch and no
 * cached entry: VOLT8_ERR_ARCH_UNSUPPORTED naming what was tried. Options must be single tokens
 * ("-DNAME=1", not "-D" "NAME=1"): the cache key sorts them. May run concurrently on one ctx:
 * threads asking for the same key at once share one compile; the cache is safe across processes. */
volt8_status volt8_jit_compile(volt8_ctx *ctx, const volt8_jit_request *request, volt8_jit_image *out_image);

/* Compiles with NVRTC, never through the disk cache (which keeps no logs), and hands over the log
 * of the compile that worked (malloc'ed; ptxas' lines when the options ask for them). An arch no
 * NVRTC builds is VOLT8_ERR_ARCH_UNSUPPORTED naming what was tried. */
volt8_status volt8_jit_compile_logged(volt8_ctx *ctx, const volt8_jit_request *request, volt8_jit_image *out_image,
                                      char **out_log);

/* NVRTC compiles run for ctx so far. Threads of one ctx asking for the same key at once share one
 * compile (the others wait and get a copy), so this counts distinct keys missing from the cache. */
int64_t volt8_jit_compile_count(const volt8_ctx *ctx);

#endif
