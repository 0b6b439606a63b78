/* Internal view of volt8_ctx and the error-reporting helpers every runtime file uses. */
#ifndef VOLT8_CTX_INTERNAL_H
#define VOLT8_CTX_INTERNAL_H

#include "volt8.h"
#include "core/cuda_driver.h"
#include "core/errors.h"

#include <pthread.h>
#include <stdatomic.h>

#define VOLT8_ERROR_MESSAGE_BYTES 8192
#define VOLT8_ARCH_NAME_BYTES 16

struct volt8_ctx {
  int32_t device_ordinal;            /* -1: no device */
  int32_t has_device;                /* 1 when the driver, a device and its primary context are up */
  int32_t device_arch;               /* e.g. 90; 0 without a device */
  int32_t target_arch;               /* arch kernels are generated and compiled for, e.g. 70 */
  int32_t variant_cubin;             /* 0: kernel variants compile to PTX, whose SASS the driver makes
                                      * at module load (the library's way); 1: to an sm_XX CUBIN from
                                      * NVRTC, which a tool's threads can make ahead (tools.h) */
  int32_t early_launch;              /* 1: down and the reduce of forwards without a route pass, and
                                      * a routed hmma down, get programmatic dependent launch */
  int32_t single_launch;             /* 1: forwards of block_m 1 cc kernels run as one launch
                                      * (templates/moe_single.cu): targets without early launch */
  int32_t eager_replay;              /* 1: eager forwards without a route pass are replayed from graphs
                                      * (moe/replay.h); VOLT8_EAGER_REPLAY_DISABLE=1 turns it off */
  int32_t route_parts;               /* 1: forwards of many pairs route on many CTAs (route_parts,
                                      * moe_layout.h); VOLT8_ROUTE_PARTS_DISABLE=1 keeps the one CTA */
  int32_t single_ctas_per_sm;        /* its grid: CTAs an SM (0: one CTA a work item; -1: as many as its
                                      * launch bounds ask, VOLT8_SINGLE_LAUNCH_CTAS unset) */
  int32_t sm_count;                  /* multiprocessors of the device; 0 without a device */
  int64_t l2_warm_bytes;             /* gate_up weights the route pass asks L2 for (0: none) */
  char device_name[128];
  char no_device_reason[512];        /* why has_device is 0 */
  char *cache_dir;                   /* NULL when the disk cache is disabled */
  char *nvrtc_dirs;                  /* options.nvrtc_dirs, copied; NULL when not given */
  char **nvrtc_dir_list;             /* options.nvrtc_dir_list, copied: nvrtc_dir_count folders */
  int32_t nvrtc_dir_count;
  char cache_off_reason[256];        /* why cache_dir is NULL, for messages */
  _Atomic int32_t cache_store_failures; /* compiled images the disk cache did not keep */
  char cache_store_error[1024];      /* why the first of them was not kept; guarded by lock */
  const volt8_cuda_driver *cuda;     /* NULL without a driver */
  CUcontext cu_context;              /* retained primary context */
  struct volt8_nvrtc_registry *nvrtc; /* NVRTC libraries opened so far; NULL until needed (jit/nvrtc_loader.c) */
  pthread_mutex_t lock;              /* guards nvrtc and jit_flights */
  pthread_cond_t jit_done;           /* broadcast when a compile other threads wait for ends */
  struct volt8_jit_flight *jit_flights; /* compiles in progress, one per cache key (jit.c) */
  _Atomic int64_t jit_compiles;      /* NVRTC compiles run for this ctx */
  int32_t per_thread_errors;         /* 1 from volt8_ctx_create; 0 in calloc'ed scratch contexts */
  struct volt8_error_slot *error_slots; /* each thread's own last message (ctx.c) */
  pthread_mutex_t error_lock;        /* guards last_error and the error_slots list */
  char last_error[VOLT8_ERROR_MESSAGE_BYTES]; /* the latest failure on ctx from any thread */
  struct volt8_ctx_teardown *teardowns; /* run by volt8_ctx_destroy, newest first */
  pthread_mutex_t teardown_lock;     /* guards teardowns */
};

/* What a higher layer keeps per ctx (NVRTC libraries, loaded modules) is released through a hook it
 * registers here, so the context knows nothing of those layers. volt8_ctx_destroy runs the hooks
 * newest first, while the device context is still held. VOLT8_ERR_OUT_OF_MEMORY (message on ctx)
 * when the hook cannot be recorded; the caller then releases what it made itself. */
typedef void (*volt8_ctx_teardown_fn)(volt8_ctx *ctx, void *data);
volt8_status volt8_ctx_on_destroy(volt8_ctx *ctx, volt8_ctx_teardown_fn fn, void *data);

/* One device allocation carved into parts: each part starts on a multiple of this many bytes. */
#define VOLT8_DEVICE_ALIGN 256
static inline size_t volt8_device_align(size_t bytes) {
  return (bytes + VOLT8_DEVICE_ALIGN - 1) / VOLT8_DEVICE_ALIGN * VOLT8_DEVICE_ALIGN;
}

/* Whether kernels may be launched early (programmatic dependent launch): the kernels carry the
 * waits only when compiled for sm_90 or newer, and stream capture keeps such launches from CUDA 12.3
 * (driver version 12030) on. */
int32_t volt8_early_launch_usable(int32_t target_arch, int driver_version, int has_launch_ex, int disabled);

/* `text` into a report's text field of `size` bytes: whole when it fits, else its start and "..." where
 * it was cut, so that a cut path or message never passes for a whole one. */
void volt8_copy_text(char *field, size_t size, const char *text);

/* Copies into a size-prefixed output struct what the caller's (possibly older) version has room for. */
void volt8_copy_sized_output(void *out, const void *filled, size_t filled_bytes);

/* 1 when environment variable `name` is set to "1". */
int volt8_env_is_one(const char *name);
/* A whole number in the environment variable `name`, read strictly: ASCII digits only (no sign, no
 * space, no leading zero but in "0"), in low..high (low >= 0). *out_set is 0 and *out untouched when
 * the variable is unset; a set value that is not such a number is VOLT8_ERR_INVALID_ARGUMENT (on the
 * thread's context-less message) naming the variable, its value, `what` it counts and the range. */
volt8_status volt8_env_integer(const char *name, int64_t low, int64_t high, const char *what, int64_t *out,
                               int *out_set);
/* The same reading of a text (no environment): 1 and the value in *out when `text` is such a number in
 * low..high, else 0. */
int volt8_parse_count(const char *text, int64_t low, int64_t high, int64_t *out);

/* "sm_70" -> 70: "sm_" and digits alone (no sign, space or leading zero), VOLT8_ARCH_MIN..MAX;
 * returns 0 on anything else. */
#define VOLT8_ARCH_MIN 50
#define VOLT8_ARCH_MAX 199
int32_t volt8_parse_arch(const char *name);

#endif
