/* Finds NVRTC libraries with dlopen and picks, per target arch, one that can compile for it. */
#include "jit/nvrtc_loader.h"
#include "core/ctx_internal.h"
#include "core/elf_check.h"

#include <dlfcn.h>
#include <link.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef VOLT8_CUDA_LIBRARY_DIR
#define VOLT8_CUDA_LIBRARY_DIR "/usr/local/cuda/lib64"
#endif

/* Starts the record of a candidate path; the next note is its outcome. */
static void open_candidate(volt8_nvrtc_registry *registry, const char *path, const char *origin) {
  registry->open = NULL;
  if (registry->candidate_count == VOLT8_NVRTC_MAX_CANDIDATES) {
    registry->candidates_dropped++;
    return;
  }
  volt8_nvrtc_tried *candidate = &registry->candidates[registry->candidate_count++];
  volt8_copy_text(candidate->path, sizeof candidate->path, path);
  volt8_copy_text(candidate->origin, sizeof candidate->origin, origin);
  candidate->lib = -1;
  registry->open = candidate;
}

/* The note without the "PATH (ORIGIN): " it begins with (the whole path: the record may hold it cut). */
static void take_outcome(volt8_nvrtc_tried *candidate, const char *note) {
  char origin[sizeof candidate->origin + 8];
  snprintf(origin, sizeof origin, " (%s): ", candidate->origin);
  const char *after = strstr(note, origin);
  volt8_copy_text(candidate->outcome, sizeof candidate->outcome, after ? after + strlen(origin) : note);
}

__attribute__((format(printf, 2, 3))) static void note_tried(volt8_nvrtc_registry *registry, const char *fmt, ...) {
  char note[2048];
  va_list args;
  va_start(args, fmt);
  vsnprintf(note, sizeof note, fmt, args);
  va_end(args);
  if (registry->open) take_outcome(registry->open, note);
  registry->open = NULL;
  size_t used = strlen(registry->tried);
  if (used + 3 >= sizeof registry->tried) return;
  if (used > 0) {
    memcpy(registry->tried + used, "; ", 3);
    used += 2;
  }
  snprintf(registry->tried + used, sizeof registry->tried - used, "%s", note);
}

/* Resolves every entry point; returns the name of the first missing required one, or NULL. */
static const char *bind_symbols(volt8_nvrtc_lib *lib) {
#define VOLT8_BIND(field, symbol)                         \
  do {                                                    \
    *(void **)&lib->field = dlsym(lib->handle, symbol);   \
    if (!lib->field) return symbol;                       \
  } while (0)
  VOLT8_BIND(create_program, "nvrtcCreateProgram");
  VOLT8_BIND(destroy_program, "nvrtcDestroyProgram");
  VOLT8_BIND(compile_program, "nvrtcCompileProgram");
  VOLT8_BIND(get_ptx_size, "nvrtcGetPTXSize");
  VOLT8_BIND(get_ptx, "nvrtcGetPTX");
  VOLT8_BIND(get_log_size, "nvrtcGetProgramLogSize");
  VOLT8_BIND(get_log, "nvrtcGetProgramLog");
  VOLT8_BIND(get_error_string, "nvrtcGetErrorString");
#undef VOLT8_BIND
  *(void **)&lib->get_cubin_size = dlsym(lib->handle, "nvrtcGetCUBINSize");
  *(void **)&lib->get_cubin = dlsym(lib->handle, "nvrtcGetCUBIN");
  if (!lib->get_cubin_size || !lib->get_cubin) {
    lib->get_cubin_size = NULL;
    lib->get_cubin = NULL;
  }
  return NULL;
}

/* Reads version, supported archs and entry points; returns a reason to skip the library, or NULL. */
static const char *query_library(volt8_nvrtc_lib *lib, char *reason, size_t reason_size) {
  int (*version)(int *, int *);
  int (*num_archs)(int *);
  int (*archs)(int *);
  *(void **)&version = dlsym(lib->handle, "nvrtcVersion");
  if (!version || version(&lib->major, &lib->minor) != 0) return "nvrtcVersion is missing or failed";
  snprintf(lib->version, sizeof lib->version, "%d.%d", lib->major, lib->minor);
  *(void **)&num_archs = dlsym(lib->handle, "nvrtcGetNumSupportedArchs");
  *(void **)&archs = dlsym(lib->handle, "nvrtcGetSupportedArchs");
  int count = 0;
  if (!num_archs || !archs || num_archs(&count) != 0) return "it has no nvrtcGetSupportedArchs (too old to tell its archs)";
  if (count <= 0 || count > VOLT8_NVRTC_MAX_ARCHS) return "nvrtcGetNumSupportedArchs returned an implausible count";
  if (archs(lib->archs) != 0) return "nvrtcGetSupportedArchs failed";
  lib->num_archs = count;
  const char *missing = bind_symbols(lib);
  if (!missing) return NULL;
  snprintf(reason, reason_size, "it lacks %s", missing);
  return reason;
}

static void describe_archs(const volt8_nvrtc_lib *lib, char *buf, size_t buf_size) {
  int lowest = lib->archs[0], highest = lib->archs[0];
  for (int i = 1; i < lib->num_archs; i++) {
    if (lib->archs[i] < lowest) lowest = lib->archs[i];
    if (lib->archs[i] > highest) highest = lib->archs[i];
  }
  snprintf(buf, buf_size, "compute_%d..compute_%d", lowest, highest);
}

/* NVRTC opens libnvrtc-builtins.so.<major>.<minor> by name, found through its own $ORIGIN run path.
 * Where dlopen is interposed (ASan, TSan, some profilers) the run path of the interposer is used
 * instead and every compile fails with NVRTC_ERROR_BUILTIN_OPERATION_FAILURE. Opening the builtins
 * from NVRTC's folder first lets NVRTC's later open find them among the loaded libraries. Builtins
 * that are there but not a whole library would kill the process in that open (SIGBUS), so their NVRTC
 * is refused instead: 0, or -1 with the reason in `reason`. */
static int preload_builtins(const volt8_nvrtc_lib *lib, char *reason, size_t reason_size) {
  char folder[PATH_MAX], path[PATH_MAX + 64], why[256];
  if (dlinfo(lib->handle, RTLD_DI_ORIGIN, folder) != 0) return 0;
  snprintf(path, sizeof path, "%s/libnvrtc-builtins.so.%d.%d", folder, lib->major, lib->minor);
  if (access(path, F_OK) != 0) return 0;
  if (volt8_elf_check(path, why, sizeof why) != 0) {
    snprintf(reason, reason_size, "its builtins %s %s", path, why);
    return -1;
  }
  dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  return 0;
}

/* A path (not a bare soname) must name a whole ELF library before dlopen maps it: a FIFO would block
 * dlopen for ever, and a truncated copy kills the process with SIGBUS. */
static int whole_library_or_noted(volt8_nvrtc_registry *registry, const char *path, const char *origin) {
  if (!strchr(path, '/')) return 1;
  char reason[256];
  if (volt8_elf_check(path, reason, sizeof reason) == 0) return 1;
  note_tried(registry, "%s (%s): %s", path, origin, reason);
  return 0;
}

/* The file the loader mapped for `handle` ("" when it cannot tell). */
static const char *mapped_file(void *handle) {
  struct link_map *map = NULL;
  return dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name ? map->l_name : "";
}

/* A candidate skipped after dlopen is closed, so that nothing of it stays loaded: a later dlopen of a
 * bare soname (the system search) would otherwise be handed this library again, matched by its soname.
 * Where the process held the library before (another part of it opened it), it stays mapped: it is
 * remembered, and a later candidate the loader resolves to it is said to be that library. */
static void close_skipped(volt8_nvrtc_registry *registry, void *handle, const char *path) {
  char file[PATH_MAX];
  snprintf(file, sizeof file, "%s", mapped_file(handle));
  dlclose(handle);
  void *still = file[0] ? dlopen(file, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD) : NULL;
  if (!still) return;
  if (registry->held_count == VOLT8_NVRTC_MAX_LIBS) {
    dlclose(still);
    return;
  }
  registry->held[registry->held_count].handle = still; /* a reference of ours: the handle stays valid */
  snprintf(registry->held[registry->held_count++].path, sizeof registry->held[0].path, "%s", path);
}

static void try_candidate(volt8_nvrtc_registry *registry, const char *path, const char *origin) {
  if (registry->count >= VOLT8_NVRTC_MAX_LIBS) return;
  open_candidate(registry, path, origin);
  volt8_nvrtc_tried *record = registry->open;
  if (!whole_library_or_noted(registry, path, origin)) return;
  /* Without RTLD_NODELETE until the library is kept (below), so that a skipped one can be closed. */
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    note_tried(registry, "%s (%s): not loaded: %s", path, origin, why ? why : "dlopen failed");
    return;
  }
  for (int i = 0; i < registry->count; i++) {
    if (registry->libs[i].handle == handle) {
      note_tried(registry, "%s (%s): same library as %s", path, origin, registry->libs[i].path);
      dlclose(handle);
      return;
    }
  }
  for (int i = 0; i < registry->held_count; i++) {
    if (registry->held[i].handle == handle) {
      note_tried(registry, "%s (%s): the loader gives the library skipped above as %s, which this process holds "
                 "loaded (%s)", path, origin, registry->held[i].path, mapped_file(handle));
      dlclose(handle);
      return;
    }
  }
  volt8_nvrtc_lib *lib = &registry->libs[registry->count];
  memset(lib, 0, sizeof *lib);
  lib->handle = handle;
  snprintf(lib->path, sizeof lib->path, "%s", path);
  char reason[128];
  const char *skip_reason = query_library(lib, reason, sizeof reason);
  if (skip_reason) {
    note_tried(registry, "%s (%s): NVRTC %s skipped: %s", path, origin, lib->version[0] ? lib->version : "?", skip_reason);
    memset(lib, 0, sizeof *lib);
    close_skipped(registry, handle, path);
    return;
  }
  char builtins_reason[PATH_MAX + 512];
  if (preload_builtins(lib, builtins_reason, sizeof builtins_reason) != 0) {
    note_tried(registry, "%s (%s): NVRTC %s skipped: %s", path, origin, lib->version, builtins_reason);
    memset(lib, 0, sizeof *lib);
    close_skipped(registry, handle, path);
    return;
  }
  /* Kept: now NODELETE, as NVRTC leaks its static C++ runtime pools on every unload; the library stays
   * mapped and later contexts reopen it at no cost. */
  void *pinned = dlopen(mapped_file(handle), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE | RTLD_NOLOAD);
  if (pinned) dlclose(pinned);
  char archs[64];
  describe_archs(lib, archs, sizeof archs);
  note_tried(registry, "%s (%s): NVRTC %s supports %s", path, origin, lib->version, archs);
  if (record) record->lib = registry->count;
  registry->count++;
}

/* The sonames tried in each folder and through the system loader: 12 first, the last NVRTC that
 * still targets compute_70. */
static const char *const nvrtc_sonames[] = {"libnvrtc.so.12", "libnvrtc.so.13"};

static void try_folder(volt8_nvrtc_registry *registry, const char *folder, size_t folder_len, const char *origin) {
  for (size_t i = 0; i < sizeof nvrtc_sonames / sizeof nvrtc_sonames[0]; i++) {
    char path[PATH_MAX];
    int written = snprintf(path, sizeof path, "%.*s/%s", (int)folder_len, folder, nvrtc_sonames[i]);
    if (written < 0 || (size_t)written >= sizeof path) {
      note_tried(registry, "%.*s (%s): folder path too long", (int)(folder_len > 64 ? 64 : folder_len), folder, origin);
      return;
    }
    if (access(path, F_OK) != 0) {
      open_candidate(registry, path, origin);
      note_tried(registry, "%s (%s): no such file", path, origin);
      continue;
    }
    try_candidate(registry, path, origin);
  }
}

/* A ':'-separated folder list (empty entries skipped). */
static void try_folder_list(volt8_nvrtc_registry *registry, const char *folders, const char *origin) {
  if (!folders || !*folders) {
    note_tried(registry, "%s: none given", origin);
    return;
  }
  const char *start = folders;
  while (*start) {
    const char *end = strchr(start, ':');
    size_t len = end ? (size_t)(end - start) : strlen(start);
    if (len > 0) try_folder(registry, start, len, origin);
    if (!end) break;
    start = end + 1;
  }
}

static int is_nvrtc_library(const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  return strncmp(base, "libnvrtc", 8) == 0 && strncmp(base, "libnvrtc-builtins", 17) != 0 && strstr(base, ".so");
}

typedef struct loaded_nvrtc_list {
  char paths[VOLT8_NVRTC_MAX_LIBS][PATH_MAX];
  int count;
} loaded_nvrtc_list;

static int collect_loaded_nvrtc(struct dl_phdr_info *info, size_t size, void *data) {
  loaded_nvrtc_list *list = data;
  if (info->dlpi_name && info->dlpi_name[0] && is_nvrtc_library(info->dlpi_name) && list->count < VOLT8_NVRTC_MAX_LIBS)
    snprintf(list->paths[list->count++], PATH_MAX, "%s", info->dlpi_name);
  return 0;
}

/* NVRTC libraries the process already holds (torch loads one): reusing them costs nothing and avoids
 * mapping a second copy of the same version. */
static void try_loaded(volt8_nvrtc_registry *registry) {
  loaded_nvrtc_list *list = calloc(1, sizeof *list);
  if (!list) return;
  dl_iterate_phdr(collect_loaded_nvrtc, list);
  if (list->count == 0) note_tried(registry, "none already loaded in the process");
  for (int i = 0; i < list->count; i++) try_candidate(registry, list->paths[i], "already loaded");
  free(list);
}

static void try_cuda_home(volt8_nvrtc_registry *registry) {
  const char *cuda_home = getenv("CUDA_HOME");
  if (!cuda_home || !*cuda_home) cuda_home = getenv("CUDA_PATH");
  if (!cuda_home || !*cuda_home) {
    note_tried(registry, "$CUDA_HOME/lib64 (CUDA_HOME and CUDA_PATH unset)");
    return;
  }
  char folder[PATH_MAX];
  int written = snprintf(folder, sizeof folder, "%s/lib64", cuda_home);
  if (written > 0 && (size_t)written < sizeof folder) try_folder(registry, folder, (size_t)written, "CUDA_HOME");
}

static void probe_candidates(volt8_nvrtc_registry *registry, const char *option_dirs, char *const *option_dir_list,
                             int32_t option_dir_count) {
  registry->probed = 1;
  if (volt8_env_is_one("VOLT8_NVRTC_DISABLE")) {
    note_tried(registry, "NVRTC disabled by VOLT8_NVRTC_DISABLE=1");
    return;
  }
  const char *explicit_path = getenv("VOLT8_NVRTC");
  if (explicit_path && *explicit_path) try_candidate(registry, explicit_path, "VOLT8_NVRTC");
  if (volt8_env_is_one("VOLT8_NVRTC_ONLY")) {
    if (!explicit_path || !*explicit_path) note_tried(registry, "VOLT8_NVRTC_ONLY=1 but VOLT8_NVRTC is not set");
    return;
  }
  try_loaded(registry);
  try_folder_list(registry, option_dirs, "options.nvrtc_dirs");
  for (int32_t i = 0; i < option_dir_count; i++)
    try_folder(registry, option_dir_list[i], strlen(option_dir_list[i]), "options.nvrtc_dir_list");
  try_folder_list(registry, getenv("VOLT8_NVRTC_DIRS"), "VOLT8_NVRTC_DIRS");
  for (size_t i = 0; i < sizeof nvrtc_sonames / sizeof nvrtc_sonames[0]; i++)
    try_candidate(registry, nvrtc_sonames[i], "system search");
  try_cuda_home(registry);
  try_folder(registry, VOLT8_CUDA_LIBRARY_DIR, strlen(VOLT8_CUDA_LIBRARY_DIR), "CUDA toolkit of the build");
}

static int lib_supports(const volt8_nvrtc_lib *lib, int32_t arch) {
  for (int i = 0; i < lib->num_archs; i++)
    if (lib->archs[i] == arch) return 1;
  return 0;
}

static void forget_registry(volt8_ctx *ctx, void *registry) {
  volt8_nvrtc_registry_close(registry);
  free(registry);
  ctx->nvrtc = NULL;
}

/* ctx's registry, made on first use; called under ctx->lock. */
static volt8_status ctx_registry(volt8_ctx *ctx, volt8_nvrtc_registry **out_registry) {
  if (!ctx->nvrtc) {
    volt8_nvrtc_registry *registry = calloc(1, sizeof *registry);
    if (!registry) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the NVRTC registry");
    volt8_status status = volt8_ctx_on_destroy(ctx, forget_registry, registry);
    if (status != VOLT8_OK) {
      free(registry);
      return status;
    }
    ctx->nvrtc = registry;
  }
  *out_registry = ctx->nvrtc;
  return VOLT8_OK;
}

volt8_status volt8_nvrtc_registry_probed(volt8_ctx *ctx, const volt8_nvrtc_registry **out_registry) {
  pthread_mutex_lock(&ctx->lock);
  volt8_nvrtc_registry *registry = NULL;
  volt8_status status = ctx_registry(ctx, &registry);
  if (status == VOLT8_OK && !registry->probed) probe_candidates(registry, ctx->nvrtc_dirs, ctx->nvrtc_dir_list, ctx->nvrtc_dir_count);
  pthread_mutex_unlock(&ctx->lock);
  *out_registry = registry;
  return status;
}

volt8_status volt8_nvrtc_for_arch(volt8_ctx *ctx, int32_t arch, const volt8_nvrtc_lib **out_lib) {
  if (!ctx || !out_lib) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_nvrtc_for_arch: NULL argument");
  *out_lib = NULL;
  pthread_mutex_lock(&ctx->lock);
  volt8_nvrtc_registry *registry = NULL;
  volt8_status status = ctx_registry(ctx, &registry);
  if (status == VOLT8_OK && !registry->probed) probe_candidates(registry, ctx->nvrtc_dirs, ctx->nvrtc_dir_list, ctx->nvrtc_dir_count);
  for (int i = 0; status == VOLT8_OK && i < registry->count; i++) {
    if (lib_supports(&registry->libs[i], arch)) {
      *out_lib = &registry->libs[i];
      break;
    }
  }
  if (status == VOLT8_OK && !*out_lib) status = volt8_nvrtc_unsupported(ctx, arch, "");
  pthread_mutex_unlock(&ctx->lock);
  return status;
}

const char volt8_nvrtc_compute70_advice[] =
    "NVRTC 12 is the last NVRTC that compiles for compute_70: pip install nvidia-cuda-nvrtc-cu12 (the volt8 wheel "
    "depends on it; its Python package and its volt8 command find it), or name a folder holding libnvrtc.so.12 in "
    "VOLT8_NVRTC_DIRS (pip puts it in site-packages/nvidia/cuda_nvrtc/lib); in a checkout, make demo hands over the "
    "one scripts/bootstrap.sh installs into .venv";

volt8_status volt8_nvrtc_unsupported(volt8_ctx *ctx, int32_t arch, const char *also) {
  const char *tried = ctx->nvrtc ? ctx->nvrtc->tried : "nothing";
  int advise = arch >= 70 && arch < VOLT8_NVRTC_13_LOWEST_ARCH;
  return volt8_fail(ctx, VOLT8_ERR_ARCH_UNSUPPORTED, "no NVRTC can compile for compute_%d; tried: %s%s%s%s", (int)arch,
                    tried, also, advise ? ". " : "", advise ? volt8_nvrtc_compute70_advice : "");
}

void volt8_nvrtc_registry_close(volt8_nvrtc_registry *registry) {
  if (!registry) return;
  for (int i = 0; i < registry->count; i++)
    if (registry->libs[i].handle) dlclose(registry->libs[i].handle);
  for (int i = 0; i < registry->held_count; i++) dlclose(registry->held[i].handle);
  memset(registry, 0, sizeof *registry);
}
