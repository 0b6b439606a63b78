/* NVRTC, opened with dlopen and chosen per target arch (docs/design.md, "NVRTC search order"). */
#ifndef VOLT8_NVRTC_LOADER_H
#define VOLT8_NVRTC_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "volt8.h"

#define VOLT8_NVRTC_MAX_LIBS 8
#define VOLT8_NVRTC_MAX_ARCHS 64

typedef struct volt8_nvrtc_lib {
  void *handle;
  char path[512];                 /* what was passed to dlopen */
  int major, minor;               /* nvrtcVersion */
  char version[16];               /* "12.9" */
  int archs[VOLT8_NVRTC_MAX_ARCHS];
  int num_archs;                  /* nvrtcGetSupportedArchs */
  /* nvrtc entry points; types kept opaque so no nvrtc.h is needed */
  int (*create_program)(void **prog, const char *src, const char *name, int num_headers, const char *const *headers,
                        const char *const *include_names);
  int (*destroy_program)(void **prog);
  int (*compile_program)(void *prog, int num_options, const char *const *options);
  int (*get_ptx_size)(void *prog, size_t *size);
  int (*get_ptx)(void *prog, char *ptx);
  int (*get_cubin_size)(void *prog, size_t *size); /* NULL in NVRTC older than 11.1 */
  int (*get_cubin)(void *prog, char *cubin);
  int (*get_log_size)(void *prog, size_t *size);
  int (*get_log)(void *prog, char *log);
  const char *(*get_error_string)(int result);
} volt8_nvrtc_lib;

#define VOLT8_NVRTC_MAX_CANDIDATES 64

/* One library path tried, for volt8_nvrtc_candidate_get (nvrtc_report.c). */
typedef struct volt8_nvrtc_tried {
  char path[512];
  char origin[48];
  char outcome[512];              /* its note in `tried`, without the "path (origin): " before it */
  int lib;                        /* its index in libs when usable, else -1 */
} volt8_nvrtc_tried;

typedef struct volt8_nvrtc_registry {
  volt8_nvrtc_lib libs[VOLT8_NVRTC_MAX_LIBS];
  int count;
  int probed;                     /* candidates have been tried */
  char tried[4096];               /* "candidate: outcome; ..." in probe order, for error messages */
  volt8_nvrtc_tried candidates[VOLT8_NVRTC_MAX_CANDIDATES]; /* the same, one record a path */
  int candidate_count;
  int candidates_dropped;         /* tried past VOLT8_NVRTC_MAX_CANDIDATES: named in `tried` only */
  volt8_nvrtc_tried *open;        /* the candidate whose outcome the next note is */
  /* Candidates skipped after dlopen that stay mapped all the same (the process held them before): a
   * later dlopen that gives one of these handles is that skipped library, not a library of its own. */
  struct {
    void *handle;
    char path[512];
  } held[VOLT8_NVRTC_MAX_LIBS];
  int held_count;
} volt8_nvrtc_registry;

struct volt8_ctx;

/* The first candidate, in this order, whose nvrtcGetSupportedArchs lists `arch`:
 *   1. $VOLT8_NVRTC (a path);
 *   2. NVRTC libraries already loaded in the process (torch loads one);
 *   3. libnvrtc.so.12 and .13 in each folder of options.nvrtc_dirs (':'-separated), of
 *      options.nvrtc_dir_list (each folder whole; the Python binding passes the
 *      nvidia-cuda-nvrtc-cu12 wheel's folder there), then of $VOLT8_NVRTC_DIRS (':'-separated);
 *   4. libnvrtc.so.12 and .13 through the system loader;
 *   5. $CUDA_HOME/lib64 (or $CUDA_PATH/lib64), then the lib folder of the CUDA toolkit the build found.
 * A candidate named by path that is not a whole ELF library (core/elf_check.h; a truncated copy would
 * kill the process inside dlopen) is skipped with the reason. Candidates are opened once per ctx
 * (under ctx->lock); *out_lib stays valid until the ctx is
 * destroyed. VOLT8_ERR_ARCH_UNSUPPORTED names every candidate and why it did not fit.
 * Environment switches, read when the ctx first needs NVRTC:
 *   VOLT8_NVRTC_DISABLE=1  no NVRTC at all: only the disk cache can provide kernels (for tests and
 *                          for hosts that must never compile);
 *   VOLT8_NVRTC_ONLY=1     try $VOLT8_NVRTC and nothing else (tests a host with one NVRTC). */
volt8_status volt8_nvrtc_for_arch(struct volt8_ctx *ctx, int32_t arch, const volt8_nvrtc_lib **out_lib);
void volt8_nvrtc_registry_close(volt8_nvrtc_registry *registry);
/* ctx's registry with every candidate tried (the search runs on first use, under ctx->lock); it does
 * not change until ctx is destroyed. */
volt8_status volt8_nvrtc_registry_probed(struct volt8_ctx *ctx, const volt8_nvrtc_registry **out_registry);

/* NVRTC 13 targets compute_75 and newer: volt8's older targets (compute_70, compute_72) need NVRTC 12. */
#define VOLT8_NVRTC_13_LOWEST_ARCH 75
/* How to get an NVRTC for compute_70, one sentence: the end of the library's error below and the
 * line of `volt8 demo` where it cannot compile its kernels. */
extern const char volt8_nvrtc_compute70_advice[];
/* VOLT8_ERR_ARCH_UNSUPPORTED on ctx: "no NVRTC can compile for compute_<arch>; tried: <candidates>"
 * then `also` (what else was tried, "" for nothing) and, for compute_70 and compute_72, the advice. */
volt8_status volt8_nvrtc_unsupported(struct volt8_ctx *ctx, int32_t arch, const char *also);

#endif
