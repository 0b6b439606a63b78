/* volt8_ctx: device discovery, cache location, and the last-error message. */
#include "core/ctx_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct volt8_ctx_teardown {
  struct volt8_ctx_teardown *next;
  volt8_ctx_teardown_fn fn;
  void *data;
} volt8_ctx_teardown;

static __thread char create_error[VOLT8_ERROR_MESSAGE_BYTES];

/* One thread's last message on one ctx. Only that thread writes or reads its text, so the pointer
 * volt8_last_error returns stays valid, and shows later failures, until the ctx is destroyed. */
typedef struct volt8_error_slot {
  struct volt8_error_slot *next;
  pthread_t thread;
  int failed; /* the thread failed on ctx at least once; until then it sees the ctx-wide message */
  char text[VOLT8_ERROR_MESSAGE_BYTES];
} volt8_error_slot;

/* The calling thread's slot, made on first use; NULL for scratch contexts or without memory. */
static volt8_error_slot *thread_slot(volt8_ctx *ctx) {
  if (!ctx->per_thread_errors) return NULL;
  pthread_t self = pthread_self();
  pthread_mutex_lock(&ctx->error_lock);
  volt8_error_slot *slot = ctx->error_slots;
  while (slot && !pthread_equal(slot->thread, self)) slot = slot->next;
  if (!slot && (slot = calloc(1, sizeof *slot))) {
    slot->thread = self;
    slot->next = ctx->error_slots;
    ctx->error_slots = slot;
  }
  pthread_mutex_unlock(&ctx->error_lock);
  return slot;
}

static void publish(volt8_ctx *ctx, const char *text) {
  pthread_mutex_lock(&ctx->error_lock);
  if (text != ctx->last_error) memcpy(ctx->last_error, text, strlen(text) + 1);
  pthread_mutex_unlock(&ctx->error_lock);
}

/* Formats into buffer; a message too long for it (a very long path, say) keeps its start and its
 * end, where the reason is, with " [...] " for what was cut. */
static void format_message(char *buffer, const char *fmt, va_list args) {
  va_list again;
  va_copy(again, args);
  int needed = vsnprintf(buffer, VOLT8_ERROR_MESSAGE_BYTES, fmt, args);
  char *whole = needed >= VOLT8_ERROR_MESSAGE_BYTES ? malloc((size_t)needed + 1) : NULL;
  if (whole) {
    static const char cut[] = " [...] ";
    size_t head = VOLT8_ERROR_MESSAGE_BYTES / 4, tail = VOLT8_ERROR_MESSAGE_BYTES - head - sizeof cut;
    vsnprintf(whole, (size_t)needed + 1, fmt, again);
    memcpy(buffer + head, cut, sizeof cut - 1);
    memcpy(buffer + head + sizeof cut - 1, whole + needed - tail, tail + 1);
    free(whole);
  }
  va_end(again);
}

volt8_status volt8_fail(volt8_ctx *ctx, volt8_status status, const char *fmt, ...) {
  volt8_error_slot *slot = ctx ? thread_slot(ctx) : NULL;
  /* no slot: the shared text is written unlocked, as before per-thread messages (scratch or no memory) */
  char *buffer = slot ? slot->text : ctx ? ctx->last_error : create_error;
  va_list args;
  va_start(args, fmt);
  format_message(buffer, fmt, args);
  va_end(args);
  if (slot) {
    slot->failed = 1;
    publish(ctx, slot->text);
  }
  return status;
}

volt8_status volt8_fail_append(volt8_ctx *ctx, volt8_status status, const char *text) {
  volt8_error_slot *slot = ctx ? thread_slot(ctx) : NULL;
  char *buffer = slot ? slot->text : ctx ? ctx->last_error : create_error;
  size_t used = strlen(buffer);
  if (used + 1 < VOLT8_ERROR_MESSAGE_BYTES) snprintf(buffer + used, VOLT8_ERROR_MESSAGE_BYTES - used, "%s", text);
  if (slot) {
    slot->failed = 1;
    publish(ctx, slot->text);
  }
  return status;
}

void volt8_copy_text(char *field, size_t size, const char *text) {
  if (size == 0) return;
  size_t length = strlen(text);
  if (length < size) {
    memcpy(field, text, length + 1);
    return;
  }
  static const char mark[] = "...";
  size_t kept = size > sizeof mark ? size - sizeof mark : 0;
  memcpy(field, text, kept);
  snprintf(field + kept, size - kept, "%s", mark);
}

void volt8_copy_sized_output(void *out, const void *filled, size_t filled_bytes) {
  if (!out) return;
  size_t room = *(const size_t *)out;
  size_t bytes = room < filled_bytes ? room : filled_bytes;
  if (bytes > sizeof(size_t)) memcpy((char *)out + sizeof(size_t), (const char *)filled + sizeof(size_t), bytes - sizeof(size_t));
}

volt8_status volt8_cuda_check(volt8_ctx *ctx, CUresult result, const char *prefix, const char *what) {
  if (result == CUDA_SUCCESS) return VOLT8_OK;
  return volt8_fail(ctx, result == CUDA_ERROR_OUT_OF_MEMORY ? VOLT8_ERR_OUT_OF_MEMORY : VOLT8_ERR_CUDA, "%s%s failed: %s",
                    prefix, what, volt8_cuda_error_text(ctx->cuda, result));
}

void volt8_clear_error(volt8_ctx *ctx) {
  if (!ctx) return;
  volt8_error_slot *slot = thread_slot(ctx);
  if (slot) slot->text[0] = '\0';
  publish(ctx, "");
}

const char *volt8_last_error(const volt8_ctx *ctx) {
  if (!ctx) return create_error;
  volt8_ctx *shared = (volt8_ctx *)ctx; /* the slot list and lock are not part of the message's constness */
  volt8_error_slot *slot = thread_slot(shared);
  if (!slot) return ctx->last_error;
  if (!slot->failed) {
    pthread_mutex_lock(&shared->error_lock);
    memcpy(slot->text, ctx->last_error, strlen(ctx->last_error) + 1);
    pthread_mutex_unlock(&shared->error_lock);
  }
  return slot->text;
}

int32_t volt8_parse_arch(const char *name) {
  if (!name || strncmp(name, "sm_", 3) != 0 || name[3] == '0') return 0;
  long value = 0;
  const char *digit = name + 3;
  for (; *digit >= '0' && *digit <= '9' && value <= VOLT8_ARCH_MAX; digit++) value = value * 10 + (*digit - '0');
  if (digit == name + 3 || *digit != '\0' || value < VOLT8_ARCH_MIN || value > VOLT8_ARCH_MAX) return 0;
  return (int32_t)value;
}

static char *join_path(const char *base, const char *suffix) {
  size_t bytes = strlen(base) + strlen(suffix) + 2;
  char *path = malloc(bytes);
  if (path) snprintf(path, bytes, "%s/%s", base, suffix);
  return path;
}

static volt8_status resolve_cache_dir(volt8_ctx *ctx, const volt8_ctx_options *options) {
  if (options->cache_disable || volt8_env_is_one("VOLT8_CACHE_DISABLE")) {
    snprintf(ctx->cache_off_reason, sizeof ctx->cache_off_reason, "the disk cache is disabled (%s)",
             options->cache_disable ? "cache_disable" : "VOLT8_CACHE_DISABLE=1");
    return VOLT8_OK;
  }
  const char *explicit_dir = options->cache_dir ? options->cache_dir : getenv("VOLT8_CACHE_DIR");
  if (explicit_dir && *explicit_dir) {
    ctx->cache_dir = strdup(explicit_dir);
  } else if (getenv("XDG_CACHE_HOME") && *getenv("XDG_CACHE_HOME")) {
    ctx->cache_dir = join_path(getenv("XDG_CACHE_HOME"), "volt8");
  } else if (getenv("HOME") && *getenv("HOME")) {
    ctx->cache_dir = join_path(getenv("HOME"), ".cache/volt8");
  } else {
    snprintf(ctx->cache_off_reason, sizeof ctx->cache_off_reason,
             "there is no disk cache: HOME, XDG_CACHE_HOME and VOLT8_CACHE_DIR are all unset (set VOLT8_CACHE_DIR "
             "or HOME to keep compiled kernels)");
    return VOLT8_OK; /* nowhere to keep a cache: run without one */
  }
  return ctx->cache_dir ? VOLT8_OK : volt8_fail(NULL, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the cache path");
}

/* VOLT8_SINGLE_LAUNCH_CTAS, when set, replaces the one-launch forward's CTAs an SM (0: one CTA a
 * work item); *out is -1 when the variable is unset. */
static volt8_status read_single_launch_ctas(int32_t *out) {
  int64_t value = -1;
  int set = 0;
  volt8_status status = volt8_env_integer("VOLT8_SINGLE_LAUNCH_CTAS", 0, 32,
                                          "a count of CTAs an SM (0: one CTA a work item)", &value, &set);
  *out = set ? (int32_t)value : -1;
  return status;
}

/* VOLT8_L2_WARM_BYTES, when set, replaces the default L2 warm budget (a fifth of the device's L2);
 * 0 turns warming off. *out is -1 when the variable is unset. Checked with or without a device. */
static volt8_status read_l2_warm_bytes(int64_t *out) {
  int set = 0;
  *out = -1;
  volt8_status status = volt8_env_integer("VOLT8_L2_WARM_BYTES", 0, INT64_MAX, "a byte count", out, &set);
  if (!set) *out = -1;
  return status;
}

/* options.nvrtc_dir_list into ctx, each folder whole; a list the header does not allow is refused. */
static volt8_status check_nvrtc_dir_list(const volt8_ctx_options *options) {
  int32_t count = options->nvrtc_dir_count;
  if (count < 0 || count > VOLT8_NVRTC_DIR_LIST_MAX || (count > 0 && !options->nvrtc_dir_list))
    return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_ctx_create: nvrtc_dir_count is %d with nvrtc_dir_list %s; give 0..%d folders in a list",
                      (int)count, options->nvrtc_dir_list ? "set" : "NULL", VOLT8_NVRTC_DIR_LIST_MAX);
  for (int32_t i = 0; i < count; i++)
    if (!options->nvrtc_dir_list[i] || !options->nvrtc_dir_list[i][0])
      return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_ctx_create: nvrtc_dir_list[%d] is %s; each names a folder",
                        (int)i, options->nvrtc_dir_list[i] ? "empty" : "NULL");
  return VOLT8_OK;
}

static volt8_status copy_nvrtc_dir_list(volt8_ctx *ctx, const volt8_ctx_options *options) {
  if (options->nvrtc_dir_count == 0) return VOLT8_OK;
  ctx->nvrtc_dir_list = calloc((size_t)options->nvrtc_dir_count, sizeof *ctx->nvrtc_dir_list);
  if (!ctx->nvrtc_dir_list) return volt8_fail(NULL, VOLT8_ERR_OUT_OF_MEMORY, "volt8_ctx_create: out of memory for nvrtc_dir_list");
  for (; ctx->nvrtc_dir_count < options->nvrtc_dir_count; ctx->nvrtc_dir_count++) {
    ctx->nvrtc_dir_list[ctx->nvrtc_dir_count] = strdup(options->nvrtc_dir_list[ctx->nvrtc_dir_count]);
    if (!ctx->nvrtc_dir_list[ctx->nvrtc_dir_count])
      return volt8_fail(NULL, VOLT8_ERR_OUT_OF_MEMORY, "volt8_ctx_create: out of memory for nvrtc_dir_list");
  }
  return VOLT8_OK;
}

static void open_device(volt8_ctx *ctx) {
  if (ctx->device_ordinal < 0) {
    snprintf(ctx->no_device_reason, sizeof ctx->no_device_reason, "the context was created without a device (device = -1)");
    return;
  }
  const volt8_cuda_driver *cuda = volt8_cuda_driver_get(ctx->no_device_reason, sizeof ctx->no_device_reason);
  if (!cuda) return;
  int count = 0;
  CUresult result = cuda->cuDeviceGetCount(&count);
  if (result != CUDA_SUCCESS || ctx->device_ordinal >= count) {
    snprintf(ctx->no_device_reason, sizeof ctx->no_device_reason, "CUDA device %d not present (%d device(s) found)",
             ctx->device_ordinal, result == CUDA_SUCCESS ? count : 0);
    return;
  }
  CUdevice device;
  int major = 0, minor = 0;
  if (cuda->cuDeviceGet(&device, ctx->device_ordinal) != CUDA_SUCCESS ||
      cuda->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) != CUDA_SUCCESS ||
      cuda->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device) != CUDA_SUCCESS) {
    snprintf(ctx->no_device_reason, sizeof ctx->no_device_reason, "could not query CUDA device %d", ctx->device_ordinal);
    return;
  }
  cuda->cuDeviceGetName(ctx->device_name, (int)sizeof ctx->device_name, device);
  int sm_count = 0, l2_bytes = 0;
  if (cuda->cuDeviceGetAttribute(&sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device) != CUDA_SUCCESS) sm_count = 0;
  if (cuda->cuDeviceGetAttribute(&l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device) != CUDA_SUCCESS) l2_bytes = 0;
  ctx->sm_count = sm_count;
  ctx->l2_warm_bytes = l2_bytes / 5;
  result = cuda->cuDevicePrimaryCtxRetain(&ctx->cu_context, device);
  if (result != CUDA_SUCCESS) {
    snprintf(ctx->no_device_reason, sizeof ctx->no_device_reason, "cuDevicePrimaryCtxRetain failed: %s",
             volt8_cuda_error_text(cuda, result));
    return;
  }
  ctx->cuda = cuda;
  ctx->device_arch = major * 10 + minor;
  ctx->has_device = 1;
}

volt8_status volt8_ctx_create(const volt8_ctx_options *options, volt8_ctx **out_ctx) {
  volt8_ctx_options defaults = VOLT8_CTX_OPTIONS_INIT;
  if (!out_ctx) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_ctx_create: out_ctx is NULL");
  *out_ctx = NULL;
  if (options) {
    if (options->size < sizeof(size_t) || options->size > sizeof(volt8_ctx_options))
      return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT,
                        "volt8_ctx_create: options->size is %zu; set it with VOLT8_CTX_OPTIONS_INIT (expected %zu or an older size)",
                        options->size, sizeof(volt8_ctx_options));
    memcpy(&defaults, options, options->size);
  }
  int32_t target_arch = 0;
  if (defaults.target_arch) {
    target_arch = volt8_parse_arch(defaults.target_arch);
    if (!target_arch)
      return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_ctx_create: target_arch \"%s\" is not of the form sm_XX "
                        "(XX a whole number in %d..%d)", defaults.target_arch, VOLT8_ARCH_MIN, VOLT8_ARCH_MAX);
  }
  int64_t warm_bytes;
  int32_t single_ctas;
  volt8_status status = check_nvrtc_dir_list(&defaults);
  if (status == VOLT8_OK) status = read_l2_warm_bytes(&warm_bytes);
  if (status == VOLT8_OK) status = read_single_launch_ctas(&single_ctas);
  if (status != VOLT8_OK) return status;
  volt8_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return volt8_fail(NULL, VOLT8_ERR_OUT_OF_MEMORY, "volt8_ctx_create: out of memory");
  ctx->device_ordinal = defaults.device;
  ctx->per_thread_errors = 1;
  pthread_mutex_init(&ctx->lock, NULL);
  pthread_mutex_init(&ctx->error_lock, NULL);
  pthread_mutex_init(&ctx->teardown_lock, NULL);
  pthread_cond_init(&ctx->jit_done, NULL);
  status = resolve_cache_dir(ctx, &defaults);
  if (status == VOLT8_OK && defaults.nvrtc_dirs && !(ctx->nvrtc_dirs = strdup(defaults.nvrtc_dirs)))
    status = volt8_fail(NULL, VOLT8_ERR_OUT_OF_MEMORY, "volt8_ctx_create: out of memory for nvrtc_dirs");
  if (status == VOLT8_OK) status = copy_nvrtc_dir_list(ctx, &defaults);
  if (status != VOLT8_OK) {
    volt8_ctx_destroy(ctx);
    return status;
  }
  open_device(ctx);
  ctx->target_arch = target_arch ? target_arch : (ctx->has_device ? ctx->device_arch : 70);
  if (ctx->has_device && ctx->target_arch > ctx->device_arch) {
    volt8_fail(NULL, VOLT8_ERR_ARCH_UNSUPPORTED, "volt8_ctx_create: target arch sm_%d is newer than device %s (sm_%d)",
               ctx->target_arch, ctx->device_name, ctx->device_arch);
    volt8_ctx_destroy(ctx);
    return VOLT8_ERR_ARCH_UNSUPPORTED;
  }
  if (ctx->has_device && warm_bytes >= 0) ctx->l2_warm_bytes = warm_bytes;
  if (ctx->has_device) {
    int driver_version = 0;
    int disabled = defaults.early_launch_disable == 1 || volt8_env_is_one("VOLT8_EARLY_LAUNCH_DISABLE");
    if (ctx->cuda->cuDriverGetVersion(&driver_version) != CUDA_SUCCESS) driver_version = 0;
    ctx->early_launch = volt8_early_launch_usable(ctx->target_arch, driver_version, ctx->cuda->cuLaunchKernelEx != NULL,
                                                  disabled);
  }
  /* The one-launch forward stands in for early launch where the target has none (before sm_80 only,
   * so the sm_80+ paths stay as they are). */
  /* Opt-in: on the H200 through the compute_70 PTX it was faster at M = 2 to 8 and slower at M = 1 and
   * 16 than the three launches (bench/RESULTS.md), so the tables' kernels stay the default. */
  ctx->single_launch = ctx->target_arch < 80 && volt8_env_is_one("VOLT8_SINGLE_LAUNCH");
  ctx->eager_replay = ctx->has_device && !volt8_env_is_one("VOLT8_EAGER_REPLAY_DISABLE");
  ctx->route_parts = !volt8_env_is_one("VOLT8_ROUTE_PARTS_DISABLE");
  ctx->single_ctas_per_sm = single_ctas; /* -1: as many as the kernel's launch bounds ask (moe/kernels/single.c) */
  *out_ctx = ctx;
  return VOLT8_OK;
}

int volt8_parse_count(const char *text, int64_t low, int64_t high, int64_t *out) {
  if (!text || !*text || (text[0] == '0' && text[1])) return 0;
  int64_t value = 0;
  for (const char *c = text; *c; c++) {
    if (*c < '0' || *c > '9') return 0;
    int digit = *c - '0';
    if (value > (INT64_MAX - digit) / 10) return 0;
    value = value * 10 + digit;
  }
  if (value < low || value > high) return 0;
  *out = value;
  return 1;
}

volt8_status volt8_env_integer(const char *name, int64_t low, int64_t high, const char *what, int64_t *out,
                               int *out_set) {
  const char *text = getenv(name);
  *out_set = text != NULL;
  if (!text || volt8_parse_count(text, low, high, out)) return VOLT8_OK;
  char range[64];
  if (high == INT64_MAX) snprintf(range, sizeof range, "%lld or more", (long long)low);
  else snprintf(range, sizeof range, "in %lld..%lld", (long long)low, (long long)high);
  *out_set = 0;
  return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT,
                    "%s=\"%.200s\" is not %s %s (a whole number of ASCII digits, without sign, space or leading "
                    "zero)", name, text, what, range);
}

int volt8_env_is_one(const char *name) {
  const char *value = getenv(name);
  return value && strcmp(value, "1") == 0;
}

int32_t volt8_early_launch_usable(int32_t target_arch, int driver_version, int has_launch_ex, int disabled) {
  return target_arch >= 90 && driver_version >= 12030 && has_launch_ex && !disabled;
}

int32_t volt8_ctx_early_launch(const volt8_ctx *ctx) { return ctx ? ctx->early_launch : 0; }

void volt8_ctx_destroy(volt8_ctx *ctx) {
  if (!ctx) return;
  while (ctx->teardowns) {
    volt8_ctx_teardown *hook = ctx->teardowns;
    ctx->teardowns = hook->next;
    hook->fn(ctx, hook->data);
    free(hook);
  }
  if (ctx->has_device) {
    CUdevice device;
    if (ctx->cuda->cuDeviceGet(&device, ctx->device_ordinal) == CUDA_SUCCESS) ctx->cuda->cuDevicePrimaryCtxRelease(device);
  }
  while (ctx->error_slots) {
    volt8_error_slot *slot = ctx->error_slots;
    ctx->error_slots = slot->next;
    free(slot);
  }
  pthread_cond_destroy(&ctx->jit_done);
  pthread_mutex_destroy(&ctx->error_lock);
  pthread_mutex_destroy(&ctx->teardown_lock);
  pthread_mutex_destroy(&ctx->lock);
  free(ctx->cache_dir);
  free(ctx->nvrtc_dirs);
  for (int32_t i = 0; ctx->nvrtc_dir_list && i < ctx->nvrtc_dir_count; i++) free(ctx->nvrtc_dir_list[i]);
  free(ctx->nvrtc_dir_list);
  free(ctx);
}

volt8_status volt8_ctx_on_destroy(volt8_ctx *ctx, volt8_ctx_teardown_fn fn, void *data) {
  volt8_ctx_teardown *hook = calloc(1, sizeof *hook);
  if (!hook) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for a context teardown hook");
  hook->fn = fn;
  hook->data = data;
  pthread_mutex_lock(&ctx->teardown_lock);
  hook->next = ctx->teardowns;
  ctx->teardowns = hook;
  pthread_mutex_unlock(&ctx->teardown_lock);
  return VOLT8_OK;
}

volt8_status volt8_ctx_target_arch(volt8_ctx *ctx, char *buf, size_t buf_size) {
  if (!ctx || !buf || buf_size == 0) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_ctx_target_arch: NULL argument");
  int written = snprintf(buf, buf_size, "sm_%d", ctx->target_arch);
  if (written < 0 || (size_t)written >= buf_size)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_ctx_target_arch: buffer of %zu bytes is too small", buf_size);
  return VOLT8_OK;
}

volt8_status volt8_ctx_require_device(volt8_ctx *ctx) {
  if (!ctx) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_ctx_require_device: ctx is NULL");
  if (!ctx->has_device) return volt8_fail(ctx, VOLT8_ERR_NO_DEVICE, "no GPU: %s", ctx->no_device_reason);
  CUresult result = ctx->cuda->cuCtxSetCurrent(ctx->cu_context);
  if (result != CUDA_SUCCESS)
    return volt8_fail(ctx, VOLT8_ERR_CUDA, "cuCtxSetCurrent failed: %s", volt8_cuda_error_text(ctx->cuda, result));
  return VOLT8_OK;
}
