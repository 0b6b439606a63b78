/* Compile-or-load of one CUDA source: NVRTC for the request's arch, behind the disk cache. */
#include "jit/jit.h"
#include "jit/nvrtc_loader.h"

#include "jit/cache.h"
#include "core/ctx_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Options every compile gets, ahead of the request's own:
 *   --gpu-architecture  compute_XX for PTX (runs on XX and newer through the driver), sm_XX for CUBIN;
 *   -default-device     unannotated functions are device code, as templates expect.
 * No -lineinfo: it writes the working directory into the PTX, and images must depend on inputs only.
 * No --std: every NVRTC from 11.8 on defaults to C++17, which the templates target.
 * They take part in the cache key like any other option. */
#define JIT_FIXED_OPTIONS 2

static volt8_status validate_request(volt8_ctx *ctx, const volt8_jit_request *request) {
  if (!request->kernel_name || !*request->kernel_name)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_jit_compile: kernel_name is NULL or empty");
  if (!request->source)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_jit_compile: source of kernel %s is NULL",
                      request->kernel_name);
  if (request->arch < 10 || request->arch > 999)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_jit_compile: arch %d of kernel %s is not an SM number (e.g. 70)",
                      (int)request->arch, request->kernel_name);
  if (request->kind != VOLT8_IMAGE_PTX && request->kind != VOLT8_IMAGE_CUBIN)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_jit_compile: image kind %d of kernel %s is unknown",
                      (int)request->kind, request->kernel_name);
  if (request->num_options < 0 || (request->num_options > 0 && !request->options))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_jit_compile: %d options but no option array for kernel %s",
                      (int)request->num_options, request->kernel_name);
  for (int32_t i = 0; i < request->num_options; i++)
    if (!request->options[i])
      return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_jit_compile: option %d of kernel %s is NULL", (int)i,
                        request->kernel_name);
  return VOLT8_OK;
}

/* Fills `options` (JIT_FIXED_OPTIONS + request's) and `arch_option` storage; returns the count. */
static int32_t build_options(const volt8_jit_request *request, char *arch_option, size_t arch_option_size,
                             const char **options) {
  snprintf(arch_option, arch_option_size, "--gpu-architecture=%s_%d",
           request->kind == VOLT8_IMAGE_CUBIN ? "sm" : "compute", (int)request->arch);
  options[0] = arch_option;
  options[1] = "-default-device";
  for (int32_t i = 0; i < request->num_options; i++) options[JIT_FIXED_OPTIONS + i] = request->options[i];
  return JIT_FIXED_OPTIONS + request->num_options;
}

static volt8_status fail_nvrtc(volt8_ctx *ctx, const volt8_nvrtc_lib *lib, const volt8_jit_request *request,
                               const char *step, int result) {
  return volt8_fail(ctx, VOLT8_ERR_COMPILE, "NVRTC %s (%s): %s failed for kernel %s (arch %d): %s", lib->version,
                    lib->path, step, request->kernel_name, (int)request->arch, lib->get_error_string(result));
}

static volt8_status append_log(volt8_ctx *ctx, const volt8_nvrtc_lib *lib, void *program) {
  size_t log_size = 0;
  if (lib->get_log_size(program, &log_size) != 0 || log_size <= 1) return VOLT8_ERR_COMPILE;
  char *log = malloc(log_size);
  if (!log) return volt8_fail_append(ctx, VOLT8_ERR_COMPILE, "\n(out of memory for the NVRTC log)");
  if (lib->get_log(program, log) == 0) {
    log[log_size - 1] = '\0';
    volt8_fail_append(ctx, VOLT8_ERR_COMPILE, "\n");
    volt8_fail_append(ctx, VOLT8_ERR_COMPILE, log);
  }
  free(log);
  return VOLT8_ERR_COMPILE;
}

/* The log of a compile that worked (malloc'ed into *out_log, "" when NVRTC wrote none). */
static volt8_status take_log(volt8_ctx *ctx, const volt8_nvrtc_lib *lib, void *program, const char *kernel_name,
                             char **out_log) {
  size_t log_size = 0;
  if (lib->get_log_size(program, &log_size) != 0) log_size = 0;
  char *log = malloc(log_size > 1 ? log_size : 1);
  if (!log) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the NVRTC log of kernel %s", kernel_name);
  if (log_size > 1 && lib->get_log(program, log) == 0) log[log_size - 1] = '\0';
  else log[0] = '\0';
  *out_log = log;
  return VOLT8_OK;
}

/* out_log (may be NULL) receives the log of a compile that worked. */
static volt8_status compile_with_nvrtc(volt8_ctx *ctx, const volt8_nvrtc_lib *lib, const volt8_jit_request *request,
                                       const char *const *options, int32_t num_options, volt8_jit_image *out_image,
                                       char **out_log) {
  atomic_fetch_add(&ctx->jit_compiles, 1);
  if (request->kind == VOLT8_IMAGE_CUBIN && !lib->get_cubin_size)
    return volt8_fail(ctx, VOLT8_ERR_COMPILE, "NVRTC %s (%s) cannot emit CUBIN (needs 11.1 or newer) for kernel %s",
                      lib->version, lib->path, request->kernel_name);
  char program_name[256];
  snprintf(program_name, sizeof program_name, "%s.cu", request->kernel_name);
  void *program = NULL;
  int result = lib->create_program(&program, request->source, program_name, 0, NULL, NULL);
  if (result != 0) return fail_nvrtc(ctx, lib, request, "nvrtcCreateProgram", result);

  volt8_status status = VOLT8_OK;
  char *image = NULL;
  size_t image_size = 0;
  result = lib->compile_program(program, num_options, options);
  if (result != 0) {
    status = fail_nvrtc(ctx, lib, request, "compilation", result);
    append_log(ctx, lib, program);
    goto done;
  }
  int is_cubin = request->kind == VOLT8_IMAGE_CUBIN;
  result = is_cubin ? lib->get_cubin_size(program, &image_size) : lib->get_ptx_size(program, &image_size);
  if (result != 0 || image_size == 0) {
    status = result ? fail_nvrtc(ctx, lib, request, "reading the image size", result)
                    : volt8_fail(ctx, VOLT8_ERR_COMPILE, "NVRTC %s produced an empty image for kernel %s", lib->version,
                                 request->kernel_name);
    goto done;
  }
  image = malloc(image_size);
  if (!image) {
    status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the %zu-byte image of kernel %s", image_size,
                        request->kernel_name);
    goto done;
  }
  result = is_cubin ? lib->get_cubin(program, image) : lib->get_ptx(program, image);
  if (result != 0) {
    status = fail_nvrtc(ctx, lib, request, "reading the image", result);
    goto done;
  }
  if (!is_cubin) image[image_size - 1] = '\0';
  if (out_log && (status = take_log(ctx, lib, program, request->kernel_name, out_log)) != VOLT8_OK) goto done;
  out_image->data = image;
  out_image->size = image_size;
  image = NULL;
done:
  free(image);
  lib->destroy_program(&program);
  return status;
}

/* No NVRTC fits the arch: the cache is the only source. A miss names the candidates and the cache. */
static volt8_status load_without_nvrtc(volt8_ctx *ctx, const volt8_jit_request *request,
                                       const volt8_cache_inputs *inputs, volt8_jit_image *out_image) {
  if (!ctx->cache_dir) {
    char note[320];
    snprintf(note, sizeof note, "; %s, so no cached kernel either", ctx->cache_off_reason);
    return volt8_nvrtc_unsupported(ctx, request->arch, note);
  }
  volt8_status status = volt8_cache_load(ctx->cache_dir, inputs, NULL, out_image);
  if (status == VOLT8_OK) {
    volt8_clear_error(ctx);
    return VOLT8_OK;
  }
  if (status == VOLT8_ERR_OUT_OF_MEMORY)
    return volt8_fail(ctx, status, "out of memory loading kernel %s from the disk cache", request->kernel_name);
  char note[1024];
  snprintf(note, sizeof note, "; and the disk cache %s holds no valid %s entry for kernel %s (sm_%d) from any NVRTC",
           ctx->cache_dir, request->kind == VOLT8_IMAGE_CUBIN ? "CUBIN" : "PTX", request->kernel_name, (int)request->arch);
  return volt8_nvrtc_unsupported(ctx, request->arch, note);
}

/* ---- one compile per key at a time within a ctx ---- */

/* A cache-or-compile in progress. Threads asking for the same key wait for it and take a copy of
 * its image instead of compiling again; the last one out frees it. Guarded by ctx->lock. */
typedef struct volt8_jit_flight {
  struct volt8_jit_flight *next;
  uint8_t key[VOLT8_SHA256_BYTES];
  int32_t waiters;
  int32_t done;
  volt8_status status;
  volt8_jit_image image;   /* the result, kept when someone waits */
  char *error;             /* the failure's message, kept when someone waits */
} volt8_jit_flight;

static void flight_free(volt8_jit_flight *flight) {
  volt8_jit_image_free(&flight->image);
  free(flight->error);
  free(flight);
}

/* Joins the flight for key and waits for its end (1, *out_status and out_image set), or starts one
 * (0, *out_flight set: the caller compiles, then calls flight_land). */
static int flight_join(volt8_ctx *ctx, const volt8_jit_request *request, const uint8_t *key, volt8_jit_image *out_image,
                       volt8_status *out_status, volt8_jit_flight **out_flight) {
  *out_flight = NULL;
  pthread_mutex_lock(&ctx->lock);
  volt8_jit_flight *flight = ctx->jit_flights;
  while (flight && memcmp(flight->key, key, VOLT8_SHA256_BYTES) != 0) flight = flight->next;
  if (!flight) {
    flight = calloc(1, sizeof *flight);
    if (flight) {
      memcpy(flight->key, key, VOLT8_SHA256_BYTES);
      flight->next = ctx->jit_flights;
      ctx->jit_flights = flight;
    }
    pthread_mutex_unlock(&ctx->lock);
    *out_flight = flight; /* NULL when out of memory: compile without sharing */
    return 0;
  }
  flight->waiters++;
  while (!flight->done) pthread_cond_wait(&ctx->jit_done, &ctx->lock);
  volt8_status status = flight->status;
  char *error = NULL;
  if (status == VOLT8_OK) {
    void *data = malloc(flight->image.size);
    if (data) {
      memcpy(data, flight->image.data, flight->image.size);
      *out_image = flight->image;
      out_image->data = data;
    } else {
      status = VOLT8_ERR_OUT_OF_MEMORY;
    }
  } else if (flight->error) {
    error = strdup(flight->error);
  }
  if (--flight->waiters == 0) flight_free(flight);
  pthread_mutex_unlock(&ctx->lock);
  if (status == VOLT8_ERR_OUT_OF_MEMORY && !error)
    volt8_fail(ctx, status, "out of memory copying the image of kernel %s", request->kernel_name);
  else if (status != VOLT8_OK)
    volt8_fail(ctx, status, "%s", error ? error : "the compile this call waited for failed");
  free(error);
  *out_status = status;
  return 1;
}

/* Ends the flight started by this thread: waiters get a copy of the image or of the message. */
static void flight_land(volt8_ctx *ctx, volt8_jit_flight *flight, volt8_status status, const volt8_jit_image *image) {
  if (!flight) return;
  pthread_mutex_lock(&ctx->lock);
  volt8_jit_flight **link = &ctx->jit_flights;
  while (*link != flight) link = &(*link)->next;
  *link = flight->next;
  flight->done = 1;
  flight->status = status;
  if (flight->waiters > 0 && status == VOLT8_OK) {
    flight->image = *image;
    flight->image.data = malloc(image->size);
    if (flight->image.data) memcpy(flight->image.data, image->data, image->size);
    else flight->status = VOLT8_ERR_OUT_OF_MEMORY;
  } else if (flight->waiters > 0) {
    flight->error = strdup(volt8_last_error(ctx));
  }
  if (flight->waiters == 0) flight_free(flight);
  else pthread_cond_broadcast(&ctx->jit_done);
  pthread_mutex_unlock(&ctx->lock);
}

int64_t volt8_jit_compile_count(const volt8_ctx *ctx) { return ctx ? atomic_load(&ctx->jit_compiles) : 0; }

/* The disk cache, else NVRTC (and publication to the cache). */
static volt8_status load_or_compile(volt8_ctx *ctx, const volt8_nvrtc_lib *lib, const volt8_jit_request *request,
                                    const volt8_cache_inputs *inputs, volt8_jit_image *out_image) {
  if (ctx->cache_dir && volt8_cache_load(ctx->cache_dir, inputs, lib->version, out_image) == VOLT8_OK) return VOLT8_OK;
  volt8_status status = compile_with_nvrtc(ctx, lib, request, inputs->options, inputs->num_options, out_image, NULL);
  if (status != VOLT8_OK) return status;
  out_image->kind = request->kind;
  snprintf(out_image->nvrtc_version, sizeof out_image->nvrtc_version, "%s", lib->version);
  /* A cache that cannot be written never fails a compile that worked; it is counted, and the
   * first reason kept, for volt8_cache_store_failures. */
  char why[sizeof ctx->cache_store_error];
  if (ctx->cache_dir && volt8_cache_publish(ctx->cache_dir, inputs, lib->version, out_image->data, out_image->size, why,
                                            sizeof why) != VOLT8_OK) {
    pthread_mutex_lock(&ctx->lock);
    if (atomic_fetch_add(&ctx->cache_store_failures, 1) == 0)
      snprintf(ctx->cache_store_error, sizeof ctx->cache_store_error, "%s", why);
    pthread_mutex_unlock(&ctx->lock);
  }
  return VOLT8_OK;
}

volt8_status volt8_cache_store_failures(volt8_ctx *ctx, int32_t *out_count, char *buf, size_t buf_size) {
  if (!ctx || !out_count)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_cache_store_failures: NULL ctx or out_count");
  pthread_mutex_lock(&ctx->lock);
  *out_count = atomic_load(&ctx->cache_store_failures);
  if (buf && buf_size)
    snprintf(buf, buf_size, "%s", *out_count ? ctx->cache_store_error : ctx->cache_dir ? "" : ctx->cache_off_reason);
  pthread_mutex_unlock(&ctx->lock);
  return VOLT8_OK;
}

volt8_status volt8_jit_compile(volt8_ctx *ctx, const volt8_jit_request *request, volt8_jit_image *out_image) {
  if (!ctx || !request || !out_image)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_jit_compile: NULL ctx, request or image");
  memset(out_image, 0, sizeof *out_image);
  volt8_status status = validate_request(ctx, request);
  if (status != VOLT8_OK) return status;

  const char **options = malloc(((size_t)request->num_options + JIT_FIXED_OPTIONS) * sizeof *options);
  if (!options) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the options of kernel %s", request->kernel_name);
  char arch_option[64];
  int32_t num_options = build_options(request, arch_option, sizeof arch_option, options);
  volt8_cache_inputs inputs = {request->kernel_name, request->source, request->arch, request->kind, options, num_options};

  const volt8_nvrtc_lib *lib = NULL;
  status = volt8_nvrtc_for_arch(ctx, request->arch, &lib);
  if (status == VOLT8_ERR_ARCH_UNSUPPORTED) {
    status = load_without_nvrtc(ctx, request, &inputs, out_image);
  } else if (status == VOLT8_OK) {
    uint8_t key[VOLT8_SHA256_BYTES];
    volt8_jit_flight *flight = NULL;
    int joined = volt8_cache_key(&inputs, lib->version, key) == VOLT8_OK &&
                 flight_join(ctx, request, key, out_image, &status, &flight);
    if (!joined) {
      status = load_or_compile(ctx, lib, request, &inputs, out_image);
      flight_land(ctx, flight, status, out_image);
    }
  }
  free(options);
  return status;
}


volt8_status volt8_jit_compile_logged(volt8_ctx *ctx, const volt8_jit_request *request, volt8_jit_image *out_image,
                                      char **out_log) {
  if (!ctx || !request || !out_image || !out_log)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_jit_compile_logged: NULL ctx, request, image or log");
  memset(out_image, 0, sizeof *out_image);
  *out_log = NULL;
  volt8_status status = validate_request(ctx, request);
  if (status != VOLT8_OK) return status;
  const volt8_nvrtc_lib *lib = NULL;
  status = volt8_nvrtc_for_arch(ctx, request->arch, &lib);
  if (status != VOLT8_OK) return status;
  const char **options = malloc(((size_t)request->num_options + JIT_FIXED_OPTIONS) * sizeof *options);
  if (!options) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the options of kernel %s", request->kernel_name);
  char arch_option[64];
  int32_t num_options = build_options(request, arch_option, sizeof arch_option, options);
  status = compile_with_nvrtc(ctx, lib, request, options, num_options, out_image, out_log);
  if (status == VOLT8_OK) {
    out_image->kind = request->kind;
    snprintf(out_image->nvrtc_version, sizeof out_image->nvrtc_version, "%s", lib->version);
  }
  free(options);
  return status;
}
