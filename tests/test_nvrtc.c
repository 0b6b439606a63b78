/* NVRTC selection per target arch: which library serves which arch, and what failures say. */
#include <criterion/criterion.h>

#include "test_support.h"

#include "core/ctx_internal.h"
#include "jit/nvrtc_loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int supports(const volt8_nvrtc_lib *lib, int arch) {
  for (int i = 0; i < lib->num_archs; i++)
    if (lib->archs[i] == arch) return 1;
  return 0;
}

/* Path of a probed NVRTC with this major version, or NULL. */
static const char *probed_major(volt8_ctx *ctx, int major) {
  for (int i = 0; i < ctx->nvrtc->count; i++)
    if (ctx->nvrtc->libs[i].major == major) return ctx->nvrtc->libs[i].path;
  return NULL;
}

TestSuite(nvrtc, .timeout = 60);

Test(nvrtc, arch_70_gets_nvrtc_12) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  const volt8_nvrtc_lib *lib = NULL;
  volt8_status status = volt8_nvrtc_for_arch(ctx, 70, &lib);
  if (status != VOLT8_OK) cr_skip_test("no NVRTC for compute_70 on this host: %s", volt8_last_error(ctx));
  cr_assert_eq(lib->major, 12, "compute_70 went to NVRTC %s (%s)", lib->version, lib->path);
  cr_assert(supports(lib, 70));
  volt8_ctx_destroy(ctx);
}

Test(nvrtc, arch_90_gets_the_first_candidate_that_supports_it) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  const volt8_nvrtc_lib *lib = NULL;
  volt8_status status = volt8_nvrtc_for_arch(ctx, 90, &lib);
  if (status != VOLT8_OK) cr_skip_test("no NVRTC for compute_90 on this host: %s", volt8_last_error(ctx));
  cr_assert(supports(lib, 90), "NVRTC %s does not list compute_90", lib->version);
  for (int i = 0; &ctx->nvrtc->libs[i] != lib; i++)
    cr_assert(!supports(&ctx->nvrtc->libs[i], 90), "%s supports compute_90 and comes first, yet %s was chosen",
              ctx->nvrtc->libs[i].path, lib->path);
  volt8_ctx_destroy(ctx);
}

Test(nvrtc, explicit_nvrtc_13_serves_arch_90) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  const volt8_nvrtc_lib *lib = NULL;
  volt8_nvrtc_for_arch(ctx, 90, &lib);
  const char *path_13 = probed_major(ctx, 13);
  if (!path_13) cr_skip_test("no NVRTC 13 on this host: %s", ctx->nvrtc->tried);
  setenv("VOLT8_NVRTC", path_13, 1);
  volt8_ctx *explicit_ctx = test_cpu_ctx("sm_70");
  cr_assert_eq(volt8_nvrtc_for_arch(explicit_ctx, 90, &lib), VOLT8_OK, "%s", volt8_last_error(explicit_ctx));
  cr_assert_eq(lib->major, 13, "VOLT8_NVRTC=%s did not come first: got NVRTC %s", path_13, lib->version);
  volt8_ctx_destroy(explicit_ctx);
  volt8_ctx_destroy(ctx);
}

Test(nvrtc, missing_explicit_nvrtc_falls_back_and_is_named) {
  setenv("VOLT8_NVRTC", "/nonexistent/libnvrtc.so", 1);
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  const volt8_nvrtc_lib *lib = NULL;
  volt8_status status = volt8_nvrtc_for_arch(ctx, 70, &lib);
  if (status == VOLT8_OK) cr_assert(supports(lib, 70));
  else cr_assert(probed_major(ctx, 12) == NULL, "NVRTC 12 was loaded but not used: %s", volt8_last_error(ctx));

  status = volt8_nvrtc_for_arch(ctx, 30, &lib);
  const char *message = volt8_last_error(ctx);
  cr_assert_eq(status, VOLT8_ERR_ARCH_UNSUPPORTED);
  cr_assert_null(lib);
  cr_assert(strstr(message, "compute_30") && strstr(message, "/nonexistent/libnvrtc.so") && strstr(message, "VOLT8_NVRTC") &&
                strstr(message, "libnvrtc.so.12") && strstr(message, "libnvrtc.so.13"),
            "message does not name every candidate: %s", message);
  volt8_ctx_destroy(ctx);
}

Test(nvrtc, only_nvrtc_13_cannot_target_arch_70) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  const volt8_nvrtc_lib *lib = NULL;
  volt8_nvrtc_for_arch(ctx, 90, &lib);
  char path_13[512];
  if (!probed_major(ctx, 13)) cr_skip_test("no NVRTC 13 on this host: %s", ctx->nvrtc->tried);
  snprintf(path_13, sizeof path_13, "%s", probed_major(ctx, 13));
  volt8_ctx_destroy(ctx);

  setenv("VOLT8_NVRTC", path_13, 1);
  setenv("VOLT8_NVRTC_ONLY", "1", 1);
  ctx = test_cpu_ctx("sm_70");
  volt8_status status = volt8_nvrtc_for_arch(ctx, 70, &lib);
  const char *message = volt8_last_error(ctx);
  cr_assert_eq(status, VOLT8_ERR_ARCH_UNSUPPORTED, "NVRTC 13 claimed compute_70: %s", message);
  cr_assert_eq(ctx->nvrtc->count, 1, "VOLT8_NVRTC_ONLY=1 loaded %d libraries", ctx->nvrtc->count);
  char version[64];
  snprintf(version, sizeof version, "NVRTC %s supports compute_", ctx->nvrtc->libs[0].version);
  cr_assert(strstr(message, "compute_70") && strstr(message, path_13) && strstr(message, version) &&
                strstr(message, "..compute_"),
            "message does not name the version and its archs: %s", message);
  cr_assert_null(strstr(ctx->nvrtc->tried, "libnvrtc.so.12"), "VOLT8_NVRTC_ONLY=1 still tried NVRTC 12: %s", message);
  cr_assert_eq(volt8_nvrtc_for_arch(ctx, 90, &lib), VOLT8_OK, "%s", volt8_last_error(ctx));
  volt8_ctx_destroy(ctx);
}

Test(nvrtc, disabled_nvrtc_says_so) {
  setenv("VOLT8_NVRTC_DISABLE", "1", 1);
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  const volt8_nvrtc_lib *lib = NULL;
  cr_assert_eq(volt8_nvrtc_for_arch(ctx, 90, &lib), VOLT8_ERR_ARCH_UNSUPPORTED);
  cr_assert_eq(ctx->nvrtc->count, 0);
  cr_assert(strstr(volt8_last_error(ctx), "VOLT8_NVRTC_DISABLE=1"), "%s", volt8_last_error(ctx));
  volt8_ctx_destroy(ctx);
}

Test(nvrtc, each_library_is_loaded_once) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  const volt8_nvrtc_lib *lib = NULL;
  volt8_nvrtc_for_arch(ctx, 90, &lib);
  for (int i = 0; i < ctx->nvrtc->count; i++)
    for (int j = i + 1; j < ctx->nvrtc->count; j++)
      cr_assert_neq(ctx->nvrtc->libs[i].handle, ctx->nvrtc->libs[j].handle, "%s and %s are one library",
                    ctx->nvrtc->libs[i].path, ctx->nvrtc->libs[j].path);
  volt8_ctx_destroy(ctx);
}

static void *select_for_70(void *arg) {
  const volt8_nvrtc_lib *lib = NULL;
  volt8_nvrtc_for_arch(arg, 70, &lib);
  return (void *)lib;
}

Test(nvrtc, concurrent_first_use_probes_once) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  pthread_t threads[8];
  void *chosen[8];
  for (int i = 0; i < 8; i++) cr_assert_eq(pthread_create(&threads[i], NULL, select_for_70, ctx), 0);
  for (int i = 0; i < 8; i++) pthread_join(threads[i], &chosen[i]);
  for (int i = 1; i < 8; i++) cr_assert_eq(chosen[i], chosen[0], "thread %d chose another library", i);
  for (int i = 0; i < ctx->nvrtc->count; i++)
    for (int j = i + 1; j < ctx->nvrtc->count; j++) cr_assert_neq(ctx->nvrtc->libs[i].handle, ctx->nvrtc->libs[j].handle);
  volt8_ctx_destroy(ctx);
}

/* The venv NVRTC 12 folder the suite was given (CTest sets VOLT8_NVRTC_DIRS), removed from the
 * environment so that each test below chooses what the loader sees; skips when there is none. */
static char *take_nvrtc_12_folder(void) {
  const char *dirs = getenv("VOLT8_NVRTC_DIRS");
  if (!dirs || !*dirs) cr_skip_test("VOLT8_NVRTC_DIRS names no NVRTC folder (run through ctest after scripts/bootstrap.sh)");
  char *folder = strdup(dirs);
  char *colon = strchr(folder, ':');
  if (colon) *colon = '\0';
  unsetenv("VOLT8_NVRTC_DIRS");
  unsetenv("CUDA_HOME");
  unsetenv("CUDA_PATH");
  return folder;
}

static volt8_ctx *ctx_with_nvrtc_dirs(const char *dirs) {
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.cache_disable = 1;
  options.target_arch = "sm_70";
  options.nvrtc_dirs = dirs;
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_OK, "volt8_ctx_create: %s", volt8_last_error(NULL));
  return ctx;
}

Test(nvrtc, option_folders_serve_compute_70) {
  char *folder = take_nvrtc_12_folder();
  char dirs[4096];
  snprintf(dirs, sizeof dirs, "/nonexistent/volt8-nvrtc::%s", folder);
  volt8_ctx *ctx = ctx_with_nvrtc_dirs(dirs);
  const volt8_nvrtc_lib *lib = NULL;
  cr_assert_eq(volt8_nvrtc_for_arch(ctx, 70, &lib), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(lib->major, 12, "compute_70 went to NVRTC %s (%s)", lib->version, lib->path);
  cr_assert(strncmp(lib->path, folder, strlen(folder)) == 0, "%s is not from %s; tried: %s", lib->path, folder,
            ctx->nvrtc->tried);
  cr_assert(strstr(ctx->nvrtc->tried, "/nonexistent/volt8-nvrtc/libnvrtc.so.12 (options.nvrtc_dirs): no such file"), "%s",
            ctx->nvrtc->tried);
  volt8_ctx_destroy(ctx);
  free(folder);
}

Test(nvrtc, environment_folders_serve_compute_70) {
  char *folder = take_nvrtc_12_folder();
  setenv("VOLT8_NVRTC_DIRS", folder, 1);
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  const volt8_nvrtc_lib *lib = NULL;
  cr_assert_eq(volt8_nvrtc_for_arch(ctx, 70, &lib), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(strstr(ctx->nvrtc->tried, "(VOLT8_NVRTC_DIRS): NVRTC 12."), "%s", ctx->nvrtc->tried);
  volt8_ctx_destroy(ctx);
  free(folder);
}

Test(nvrtc, places_are_tried_in_the_documented_order) {
  char *folder = take_nvrtc_12_folder();
  setenv("VOLT8_NVRTC_DIRS", "/nonexistent/from-environment", 1);
  setenv("CUDA_HOME", "/nonexistent/cuda-home", 1);
  volt8_ctx *ctx = ctx_with_nvrtc_dirs(folder);
  const volt8_nvrtc_lib *lib = NULL;
  volt8_nvrtc_for_arch(ctx, 30, &lib);
  const char *places[] = {"already loaded", "(options.nvrtc_dirs)", "(VOLT8_NVRTC_DIRS)", "(system search)",
                          "(CUDA_HOME)", "(CUDA toolkit of the build)"};
  const char *message = volt8_last_error(ctx);
  const char *previous = message;
  for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
    const char *at = strstr(message, places[i]);
    cr_assert_not_null(at, "the failure does not name %s: %s", places[i], message);
    cr_assert(at >= previous, "%s is named out of order: %s", places[i], message);
    previous = at;
  }
  volt8_ctx_destroy(ctx);
  free(folder);
}

Test(nvrtc, an_nvrtc_already_loaded_is_used) {
  char *folder = take_nvrtc_12_folder();
  char path[4096];
  snprintf(path, sizeof path, "%s/libnvrtc.so.12", folder);
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(handle, "dlopen %s: %s", path, dlerror());
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  const volt8_nvrtc_lib *lib = NULL;
  cr_assert_eq(volt8_nvrtc_for_arch(ctx, 70, &lib), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(lib->handle, handle, "compute_70 went to %s, not the NVRTC already loaded; tried: %s", lib->path,
               ctx->nvrtc->tried);
  cr_assert(strstr(ctx->nvrtc->tried, "(already loaded): NVRTC 12."), "%s", ctx->nvrtc->tried);
  volt8_ctx_destroy(ctx);
  free(folder);
}

Test(nvrtc, a_fifo_named_by_volt8_nvrtc_is_refused_without_blocking, .timeout = 20) {
  char dir[] = "/tmp/volt8-nvrtc-fifo-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char fifo[sizeof dir + 32];
  snprintf(fifo, sizeof fifo, "%s/libnvrtc.so.12", dir);
  cr_assert_eq(mkfifo(fifo, 0600), 0, "mkfifo %s", fifo);
  setenv("VOLT8_NVRTC", fifo, 1);
  setenv("VOLT8_NVRTC_DIRS", dir, 1);
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  const volt8_nvrtc_lib *lib = NULL;
  volt8_nvrtc_for_arch(ctx, 30, &lib);
  char expected[sizeof fifo + 64];
  snprintf(expected, sizeof expected, "%s (VOLT8_NVRTC): is a FIFO, not a regular file", fifo);
  cr_assert(strstr(ctx->nvrtc->tried, expected), "%s", ctx->nvrtc->tried);
  snprintf(expected, sizeof expected, "%s (VOLT8_NVRTC_DIRS): is a FIFO, not a regular file", fifo);
  cr_assert(strstr(ctx->nvrtc->tried, expected), "%s", ctx->nvrtc->tried);
  volt8_ctx_destroy(ctx);
  unlink(fifo);
  rmdir(dir);
}

/* ---- a truncated NVRTC is skipped before dlopen, which would die of SIGBUS in it ---- */

/* The first `bytes` of `from` into folder/name (folder made if missing). */
static void copy_prefix(const char *from, const char *folder, const char *name, size_t bytes) {
  mkdir(folder, 0755);
  char to[4096];
  snprintf(to, sizeof to, "%s/%s", folder, name);
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  cr_assert(in && out, "cannot copy %s to %s", from, to);
  char *buffer = malloc(bytes);
  cr_assert(buffer && fread(buffer, 1, bytes, in) == bytes && fwrite(buffer, 1, bytes, out) == bytes,
            "cannot copy %zu bytes of %s", bytes, from);
  free(buffer);
  fclose(in);
  cr_assert_eq(fclose(out), 0);
}

static char truncated_root[] = "/tmp/volt8-nvrtc-truncated-XXXXXX";

static void make_truncated_root(void) { cr_assert_not_null(mkdtemp(truncated_root)); }
static void remove_truncated_root(void) { test_remove_tree(truncated_root); }

/* Copies of libnvrtc.so.12 cut at 1 MiB, 10 KiB, the ELF and program headers, and the ELF header,
 * each in its folder of truncated_root; their folders ':'-joined into `dirs`. */
static void make_truncated_copies(const char *real_folder, char *dirs, size_t dirs_size) {
  static const size_t cuts[] = {1 << 20, 10 << 10, 64 + 11 * 56, 64};
  char real[4096];
  snprintf(real, sizeof real, "%s/libnvrtc.so.12", real_folder);
  size_t used = 0;
  dirs[0] = '\0';
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    char folder[256];
    snprintf(folder, sizeof folder, "%s/cut-%zu", truncated_root, cuts[i]);
    copy_prefix(real, folder, "libnvrtc.so.12", cuts[i]);
    used += (size_t)snprintf(dirs + used, dirs_size - used, "%s%s", used ? ":" : "", folder);
  }
}

Test(nvrtc, truncated_copies_are_skipped_and_the_next_candidate_serves, .init = make_truncated_root,
     .fini = remove_truncated_root) {
  char *folder = take_nvrtc_12_folder();
  char dirs[8192];
  make_truncated_copies(folder, dirs, sizeof dirs);
  char explicit_path[512];
  snprintf(explicit_path, sizeof explicit_path, "%s/cut-%d/libnvrtc.so.12", truncated_root, 1 << 20);
  setenv("VOLT8_NVRTC", explicit_path, 1);
  setenv("VOLT8_NVRTC_DIRS", dirs, 1);
  snprintf(dirs + strlen(dirs), sizeof dirs - strlen(dirs), ":%s", folder);
  volt8_ctx *ctx = ctx_with_nvrtc_dirs(dirs);
  const volt8_nvrtc_lib *lib = NULL;
  cr_assert_eq(volt8_nvrtc_for_arch(ctx, 70, &lib), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(strncmp(lib->path, folder, strlen(folder)) == 0, "%s is not the whole NVRTC in %s; tried: %s", lib->path,
            folder, ctx->nvrtc->tried);
  const char *tried = ctx->nvrtc->tried;
  static const struct {
    int cut;
    const char *reason;
  } expected[] = {{1 << 20, "is truncated: segment 0 (LOAD) ends at byte"},
                  {10 << 10, "is truncated: segment 0 (LOAD) ends at byte"},
                  {64 + 11 * 56, "is truncated: segment 0 (LOAD) ends at byte"},
                  {64, "is truncated: its program header table ends at byte"}};
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
    char text[1024];
    snprintf(text, sizeof text, "%s/cut-%d/libnvrtc.so.12 (options.nvrtc_dirs): %s", truncated_root, expected[i].cut,
             expected[i].reason);
    cr_assert(strstr(tried, text), "no \"%s\" in: %s", text, tried);
    snprintf(text, sizeof text, "%s/cut-%d/libnvrtc.so.12 (VOLT8_NVRTC_DIRS): %s", truncated_root, expected[i].cut,
             expected[i].reason);
    cr_assert(strstr(tried, text), "no \"%s\" in: %s", text, tried);
  }
  char text[1024];
  snprintf(text, sizeof text, "%s (VOLT8_NVRTC): is truncated: segment 0 (LOAD)", explicit_path);
  cr_assert(strstr(tried, text), "no \"%s\" in: %s", text, tried);
  volt8_ctx_destroy(ctx);
  free(folder);
}

Test(nvrtc, a_truncated_nvrtc_alone_is_a_clear_error, .init = make_truncated_root, .fini = remove_truncated_root) {
  char *folder = take_nvrtc_12_folder();
  char dirs[8192], cut[512];
  make_truncated_copies(folder, dirs, sizeof dirs);
  snprintf(cut, sizeof cut, "%s/cut-%d/libnvrtc.so.12", truncated_root, 1 << 20);
  setenv("VOLT8_NVRTC", cut, 1);
  setenv("VOLT8_NVRTC_ONLY", "1", 1);
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  const volt8_nvrtc_lib *lib = NULL;
  cr_assert_eq(volt8_nvrtc_for_arch(ctx, 70, &lib), VOLT8_ERR_ARCH_UNSUPPORTED);
  const char *message = volt8_last_error(ctx);
  char text[1024];
  snprintf(text, sizeof text, "%s (VOLT8_NVRTC): is truncated: segment 0 (LOAD) ends at byte", cut);
  cr_assert(strstr(message, "no NVRTC can compile for compute_70") && strstr(message, text), "%s", message);
  volt8_ctx_destroy(ctx);
  free(folder);
}

/* NVRTC opens its builtins itself when it first compiles: a truncated one there refuses its NVRTC. */
Test(nvrtc, truncated_builtins_refuse_their_nvrtc, .init = make_truncated_root, .fini = remove_truncated_root) {
  char *folder = take_nvrtc_12_folder();
  char linked[512], real[4096], link_path[4096], builtins[4096];
  snprintf(linked, sizeof linked, "%s/linked", truncated_root);
  cr_assert_eq(mkdir(linked, 0755), 0);
  snprintf(real, sizeof real, "%s/libnvrtc.so.12", folder);
  snprintf(link_path, sizeof link_path, "%s/libnvrtc.so.12", linked);
  cr_assert_eq(symlink(real, link_path), 0, "symlink %s", link_path);
  /* the builtins' name from the folder, without loading the NVRTC there (it would stay loaded) */
  char name[256] = "";
  DIR *listing = opendir(folder);
  cr_assert_not_null(listing);
  for (struct dirent *item = readdir(listing); item; item = readdir(listing))
    if (strncmp(item->d_name, "libnvrtc-builtins.so.12.", 24) == 0) snprintf(name, sizeof name, "%s", item->d_name);
  closedir(listing);
  if (!name[0]) cr_skip_test("no libnvrtc-builtins.so.12.* beside %s", real);
  snprintf(builtins, sizeof builtins, "%s/%s", folder, name);
  copy_prefix(builtins, linked, name, 1 << 20);
  /* the link is the real NVRTC's inode; skipped, it is closed again (a_skipped_nvrtc_is_closed_... checks
   * what later candidates then find) */
  volt8_ctx *ctx = ctx_with_nvrtc_dirs(linked);
  const volt8_nvrtc_lib *lib = NULL;
  volt8_nvrtc_for_arch(ctx, 70, &lib);
  char text[1024];
  snprintf(text, sizeof text, "%s/libnvrtc.so.12 (options.nvrtc_dirs): NVRTC 12.", linked);
  const char *at = strstr(ctx->nvrtc->tried, text);
  cr_assert(at, "no \"%s\" in: %s", text, ctx->nvrtc->tried);
  snprintf(text, sizeof text, "skipped: its builtins %s/%s is truncated", linked, name);
  cr_assert(strstr(at, text), "no \"%s\" in: %s", text, ctx->nvrtc->tried);
  volt8_ctx_destroy(ctx);
  free(folder);
}

/* Builtins' name in `folder` (libnvrtc-builtins.so.12.N), without loading the NVRTC there. */
static int builtins_name(const char *folder, char *name, size_t size) {
  name[0] = '\0';
  DIR *listing = opendir(folder);
  if (!listing) return 0;
  for (struct dirent *item = readdir(listing); item; item = readdir(listing))
    if (strncmp(item->d_name, "libnvrtc-builtins.so.12.", 24) == 0) snprintf(name, size, "%s", item->d_name);
  closedir(listing);
  return name[0] != '\0';
}

/* The folder `linked` of truncated_root: `link_path`, a link to the good NVRTC 12 of `folder` (`real`),
 * beside a copy of its builtins truncated to 1 MiB. Skips the test where `folder` has no builtins. */
typedef struct linked_nvrtc {
  char linked[512], real[4096], link_path[4096];
} linked_nvrtc;

static void link_nvrtc_beside_truncated_builtins(const char *folder, linked_nvrtc *out) {
  char builtins[4096], name[256];
  snprintf(out->linked, sizeof out->linked, "%s/linked", truncated_root);
  cr_assert_eq(mkdir(out->linked, 0755), 0);
  snprintf(out->real, sizeof out->real, "%s/libnvrtc.so.12", folder);
  snprintf(out->link_path, sizeof out->link_path, "%s/libnvrtc.so.12", out->linked);
  cr_assert_eq(symlink(out->real, out->link_path), 0, "symlink %s", out->link_path);
  if (!builtins_name(folder, name, sizeof name)) cr_skip_test("no libnvrtc-builtins.so.12.* beside %s", out->real);
  snprintf(builtins, sizeof builtins, "%s/%s", folder, name);
  copy_prefix(builtins, out->linked, name, 1 << 20);
}

/* A good NVRTC beside truncated builtins is skipped and closed: the same library named again later (here
 * the folder it lives in, the same file) is opened afresh and serves compute_70, and the system search's
 * bare soname is not handed the skipped library (each candidate's outcome is its own). */
Test(nvrtc, a_skipped_nvrtc_is_closed_and_never_matched_to_a_later_candidate, .init = make_truncated_root,
     .fini = remove_truncated_root) {
  char *folder = take_nvrtc_12_folder();
  linked_nvrtc made;
  link_nvrtc_beside_truncated_builtins(folder, &made);
  const char *linked = made.linked, *real = made.real, *link_path = made.link_path;
  char dirs[8192];
  snprintf(dirs, sizeof dirs, "%s:%s", linked, folder);
  volt8_ctx *ctx = ctx_with_nvrtc_dirs(dirs);
  const volt8_nvrtc_lib *lib = NULL;
  cr_assert_eq(volt8_nvrtc_for_arch(ctx, 70, &lib), VOLT8_OK, "the whole NVRTC after the skipped one did not serve: %s",
               volt8_last_error(ctx));
  cr_assert_str_eq(lib->path, real);
  const volt8_nvrtc_registry *registry = ctx->nvrtc;
  int skipped = 0, served = 0, system = 0;
  for (int32_t i = 0; i < registry->candidate_count; i++) {
    const volt8_nvrtc_tried *tried = &registry->candidates[i];
    if (strcmp(tried->path, link_path) == 0) {
      skipped = 1;
      cr_assert(strstr(tried->outcome, "skipped: its builtins") && tried->lib < 0, "%s", tried->outcome);
    } else if (strcmp(tried->path, real) == 0) {
      served = 1;
      cr_assert(strncmp(tried->outcome, "NVRTC 12.", 9) == 0 && strstr(tried->outcome, "supports") && tried->lib >= 0,
                "%s: %s", tried->path, tried->outcome);
    } else if (strcmp(tried->origin, "system search") == 0) {
      system++;
      cr_assert(!strstr(tried->outcome, "builtins"), "%s (system search) has the skipped library's outcome: %s",
                tried->path, tried->outcome);
    }
  }
  cr_assert(skipped && served && system == 2, "tried: %s", registry->tried);
  volt8_ctx_destroy(ctx);
  free(folder);
}

/* The case through `volt8 doctor`: the good NVRTC 12 is on the loader's path (the system
 * search), the folder of VOLT8_NVRTC_DIRS holds it beside truncated builtins. */
Test(nvrtc, doctor_serves_compute_70_from_the_loader_path_after_a_skipped_folder, .init = make_truncated_root,
     .fini = remove_truncated_root) {
  char *folder = take_nvrtc_12_folder();
  linked_nvrtc made;
  link_nvrtc_beside_truncated_builtins(folder, &made);
  const char *linked = made.linked, *link_path = made.link_path;
  setenv("VOLT8_NVRTC_DIRS", linked, 1);
  setenv("LD_LIBRARY_PATH", folder, 1);
  setenv("VOLT8_DISABLE_CUDA", "1", 1);
  setenv("VOLT8_CACHE_DISABLE", "1", 1);
  static char out[65536], err[16384];
  int status = test_run_volt8((char *[]){"doctor", NULL}, out, sizeof out, err, sizeof err);
  cr_assert_eq(status, 0, "volt8 doctor exited %d:\n%s\n%s", status, out, err);
  char line[8192];
  snprintf(line, sizeof line, "%s (VOLT8_NVRTC_DIRS): NVRTC 12.", link_path);
  const char *skipped = strstr(out, line);
  cr_assert(skipped && strstr(skipped, "skipped: its builtins"), "no skip of %s:\n%s", link_path, out);
  const char *system = strstr(out, "] libnvrtc.so.12 (system search): NVRTC 12.");
  cr_assert(system, "the system search's NVRTC 12 is not its own:\n%s", out);
  cr_assert(strstr(out, "  compute_70 (") && strstr(strstr(out, "  compute_70 ("), "libnvrtc.so.12\n"),
            "compute_70 is not served by the system search's NVRTC:\n%s", out);
  free(folder);
}

/* options.nvrtc_dir_list takes each folder whole: one whose name holds a ':' (the NVRTC 12 of the
 * suite, linked into it) serves compute_70, searched after nvrtc_dirs' folders. */
Test(nvrtc, a_listed_folder_with_a_colon_in_its_name_is_searched_whole) {
  char *folder = take_nvrtc_12_folder();
  char root[256], colon[512], link[600], target[4200];
  test_make_temp_dir(root, sizeof root, "volt8-nvrtc-list");
  snprintf(colon, sizeof colon, "%s/co:lon", root);
  cr_assert_eq(mkdir(colon, 0755), 0);
  snprintf(link, sizeof link, "%s/libnvrtc.so.12", colon);
  snprintf(target, sizeof target, "%s/libnvrtc.so.12", folder);
  cr_assert_eq(symlink(target, link), 0);
  const char *list[] = {"/nonexistent/volt8-listed", colon};
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.cache_disable = 1;
  options.target_arch = "sm_70";
  options.nvrtc_dirs = "/nonexistent/volt8-joined";
  options.nvrtc_dir_list = list;
  options.nvrtc_dir_count = 2;
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_OK, "volt8_ctx_create: %s", volt8_last_error(NULL));
  const volt8_nvrtc_lib *lib = NULL;
  cr_assert_eq(volt8_nvrtc_for_arch(ctx, 70, &lib), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(strcmp(lib->path, link) == 0, "compute_70 went to %s, not %s; tried: %s", lib->path, link, ctx->nvrtc->tried);
  const char *joined = strstr(ctx->nvrtc->tried, "/nonexistent/volt8-joined/libnvrtc.so.12 (options.nvrtc_dirs)");
  const char *listed = strstr(ctx->nvrtc->tried, "/nonexistent/volt8-listed/libnvrtc.so.12 (options.nvrtc_dir_list)");
  cr_assert(joined && listed && joined < listed, "nvrtc_dirs first, then the list: %s", ctx->nvrtc->tried);
  volt8_ctx_destroy(ctx);
  test_remove_tree(root);
  free(folder);
}

/* A list the header does not allow is refused at creation, naming what is wrong. */
Test(nvrtc, a_bad_folder_list_is_refused) {
  const char *with_null[] = {"/usr/lib", NULL}, *with_empty[] = {"/usr/lib", ""};
  const struct { const char *const *list; int32_t count; const char *said; } cases[] = {
      {NULL, 1, "nvrtc_dir_count is 1 with nvrtc_dir_list NULL"},
      {with_null, -1, "nvrtc_dir_count is -1"},
      {with_null, VOLT8_NVRTC_DIR_LIST_MAX + 1, "0..64 folders"},
      {with_null, 2, "nvrtc_dir_list[1] is NULL"},
      {with_empty, 2, "nvrtc_dir_list[1] is empty"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
    options.device = -1;
    options.cache_disable = 1;
    options.nvrtc_dir_list = cases[i].list;
    options.nvrtc_dir_count = cases[i].count;
    volt8_ctx *ctx = NULL;
    cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_ERR_INVALID_ARGUMENT, "case %zu accepted", i);
    cr_assert_null(ctx);
    cr_assert(strstr(volt8_last_error(NULL), cases[i].said), "case %zu: %s", i, volt8_last_error(NULL));
  }
}

static int ends_with(const char *text, const char *end) {
  size_t text_length = strlen(text), end_length = strlen(end);
  return text_length >= end_length && strcmp(text + text_length - end_length, end) == 0;
}

/* A host whose NVRTC cannot target compute_70 is told how to get one: the error ends with the advice
 * (which names the pip wheel, VOLT8_NVRTC_DIRS and make demo); an arch NVRTC 13 covers gets none. */
Test(nvrtc, no_nvrtc_for_compute_70_ends_with_how_to_get_one) {
  setenv("VOLT8_NVRTC", "/nonexistent/libnvrtc.so.13", 1);
  setenv("VOLT8_NVRTC_ONLY", "1", 1);
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  const volt8_nvrtc_lib *lib = NULL;
  cr_assert_eq(volt8_nvrtc_for_arch(ctx, 70, &lib), VOLT8_ERR_ARCH_UNSUPPORTED);
  const char *message = volt8_last_error(ctx);
  cr_assert(strstr(message, "no NVRTC can compile for compute_70; tried: /nonexistent/libnvrtc.so.13"), "%s", message);
  cr_assert(ends_with(message, volt8_nvrtc_compute70_advice), "the error does not end with the advice: %s", message);
  const char *named[] = {"nvidia-cuda-nvrtc-cu12", "VOLT8_NVRTC_DIRS", "make demo"};
  for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
    cr_assert(strstr(volt8_nvrtc_compute70_advice, named[i]), "the advice does not name %s", named[i]);
  cr_assert_eq(volt8_nvrtc_for_arch(ctx, 90, &lib), VOLT8_ERR_ARCH_UNSUPPORTED);
  cr_assert_null(strstr(volt8_last_error(ctx), "nvidia-cuda-nvrtc-cu12"), "compute_90 got the compute_70 advice: %s",
                 volt8_last_error(ctx));
  volt8_ctx_destroy(ctx);
}
