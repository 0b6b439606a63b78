/* dlopen of cuBLASLt and cuBLAS: the newest soname first; a missing library or entry point turns
 * the baseline that needs it off with a reason, never the command. */
#include "cublas_loader.h"

#include "tools/tools.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct symbol_slot {
  void **slot;
  const char *name;
} symbol_slot;

/* Directories tried after the loader's own search: the toolkit is often not registered with it. */
static const char *const TOOLKIT_DIRS[] = {"/usr/local/cuda/lib64", "/usr/local/cuda/lib",
                                           "/usr/local/cuda/targets/x86_64-linux/lib",
                                           "/usr/local/cuda/targets/sbsa-linux/lib"};

static void *try_open(const char *path, char *opened, size_t opened_size, char *why, size_t why_size, size_t *used) {
  /* A path must name a whole ELF library: a FIFO would block dlopen, a truncated copy kill the
   * process in it (SIGBUS). A bare soname is the loader's to find. */
  char reason[300];
  void *handle = NULL;
  const char *error = NULL;
  if (strchr(path, '/') && volt8_elf_check(path, reason, sizeof reason) != 0) {
    error = reason;
  } else if ((handle = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
    snprintf(opened, opened_size, "%s", path);
    return handle;
  } else {
    error = dlerror();
    path = error ? "" : path;
  }
  int written = snprintf(why + *used, why_size - *used, "%s%s%s%s", *used ? "; " : "", path, *path && error ? " " : "",
                         error ? error : "");
  if (written > 0 && *used + (size_t)written < why_size) *used += (size_t)written;
  return NULL;
}

void *bench_cublas_open_first(const char *const *names, int count, char *opened, size_t opened_size, char *why,
                              size_t why_size) {
  size_t used = 0;
  why[0] = '\0';
  const char *cuda_home = getenv("CUDA_HOME");
  for (int i = 0; i < count; i++) {
    void *handle = try_open(names[i], opened, opened_size, why, why_size, &used);
    char path[512];
    if (!handle && cuda_home && *cuda_home) {
      snprintf(path, sizeof path, "%s/lib64/%s", cuda_home, names[i]);
      handle = try_open(path, opened, opened_size, why, why_size, &used);
    }
    for (size_t d = 0; !handle && d < sizeof TOOLKIT_DIRS / sizeof TOOLKIT_DIRS[0]; d++) {
      snprintf(path, sizeof path, "%s/%s", TOOLKIT_DIRS[d], names[i]);
      handle = access(path, F_OK) == 0 ? try_open(path, opened, opened_size, why, why_size, &used) : NULL;
    }
    if (handle) return handle;
  }
  return NULL;
}

/* 1 when every required slot resolved; the first missing name goes to `why`. */
static int resolve(void *library, const symbol_slot *slots, int count, char *why, size_t why_size) {
  for (int i = 0; i < count; i++) {
    *slots[i].slot = dlsym(library, slots[i].name);
    if (!*slots[i].slot) {
      snprintf(why, why_size, "no symbol %s", slots[i].name);
      return 0;
    }
  }
  return 1;
}

static void open_lt(bench_cublas *cublas) {
  static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12"};
  char why[400];
  cublas->lt_library = bench_cublas_open_first(names, 2, cublas->lt_path, sizeof cublas->lt_path, why, sizeof why);
  if (!cublas->lt_library) {
    snprintf(cublas->lt_unavailable, sizeof cublas->lt_unavailable, "no cuBLASLt: %s", why);
    return;
  }
  symbol_slot slots[] = {
      {(void **)&cublas->ltCreate, "cublasLtCreate"},
      {(void **)&cublas->ltDestroy, "cublasLtDestroy"},
      {(void **)&cublas->ltGetVersion, "cublasLtGetVersion"},
      {(void **)&cublas->ltMatmulDescCreate, "cublasLtMatmulDescCreate"},
      {(void **)&cublas->ltMatmulDescDestroy, "cublasLtMatmulDescDestroy"},
      {(void **)&cublas->ltMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute"},
      {(void **)&cublas->ltMatrixLayoutCreate, "cublasLtMatrixLayoutCreate"},
      {(void **)&cublas->ltMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy"},
      {(void **)&cublas->ltMatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute"},
      {(void **)&cublas->ltMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate"},
      {(void **)&cublas->ltMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy"},
      {(void **)&cublas->ltMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute"},
      {(void **)&cublas->ltMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic"},
      {(void **)&cublas->ltMatmul, "cublasLtMatmul"},
  };
  if (!resolve(cublas->lt_library, slots, (int)(sizeof slots / sizeof slots[0]), why, sizeof why)) {
    snprintf(cublas->lt_unavailable, sizeof cublas->lt_unavailable, "%.200s: %.300s", cublas->lt_path, why);
    return;
  }
  cublas->lt_version = cublas->ltGetVersion();
  cublasStatus_t status = cublas->ltCreate(&cublas->lt);
  if (status != CUBLAS_STATUS_SUCCESS) {
    cublas->lt = NULL;
    snprintf(cublas->lt_unavailable, sizeof cublas->lt_unavailable, "cublasLtCreate failed: cublasStatus %d",
             (int)status);
  }
}

static void open_blas(bench_gpu *gpu, bench_cublas *cublas) {
  static const char *const names[] = {"libcublas.so.13", "libcublas.so.12"};
  char why[400];
  cublas->blas_library = bench_cublas_open_first(names, 2, cublas->blas_path, sizeof cublas->blas_path, why, sizeof why);
  if (!cublas->blas_library) {
    snprintf(cublas->grouped_unavailable, sizeof cublas->grouped_unavailable, "no cuBLAS: %s", why);
    return;
  }
  cublas->blasGetStatusString = (__typeof__(cublasGetStatusString) *)dlsym(cublas->blas_library, "cublasGetStatusString");
  symbol_slot slots[] = {
      {(void **)&cublas->blasCreate, "cublasCreate_v2"},
      {(void **)&cublas->blasDestroy, "cublasDestroy_v2"},
      {(void **)&cublas->blasGetVersion, "cublasGetVersion_v2"},
      {(void **)&cublas->blasSetStream, "cublasSetStream_v2"},
      {(void **)&cublas->blasSetWorkspace, "cublasSetWorkspace_v2"},
      {(void **)&cublas->blasGemmGroupedBatchedEx, "cublasGemmGroupedBatchedEx"}, /* cuBLAS 12.5 and newer */
  };
  if (!resolve(cublas->blas_library, slots, (int)(sizeof slots / sizeof slots[0]), why, sizeof why)) {
    snprintf(cublas->grouped_unavailable, sizeof cublas->grouped_unavailable, "%.200s: %.300s", cublas->blas_path, why);
    return;
  }
  cublasStatus_t status = cublas->blasCreate(&cublas->blas);
  if (status == CUBLAS_STATUS_SUCCESS) status = cublas->blasGetVersion(cublas->blas, &cublas->blas_version);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublas->blasSetWorkspace(cublas->blas, (void *)cublas->workspace, BENCH_CUBLAS_WORKSPACE_BYTES);
  if (status == CUBLAS_STATUS_SUCCESS) status = cublas->blasSetStream(cublas->blas, gpu->stream);
  if (status != CUBLAS_STATUS_SUCCESS)
    snprintf(cublas->grouped_unavailable, sizeof cublas->grouped_unavailable, "cuBLAS handle set-up failed: %s",
             bench_cublas_status_text(cublas, status));
}

volt8_status bench_cublas_open(bench_gpu *gpu, bench_cublas *out) {
  memset(out, 0, sizeof *out);
  volt8_status status = bench_gpu_alloc(gpu, BENCH_CUBLAS_WORKSPACE_BYTES, &out->workspace, "cuMemAlloc(cuBLAS workspace)");
  if (status != VOLT8_OK) return status;
  open_lt(out);
  open_blas(gpu, out);
  return VOLT8_OK;
}

void bench_cublas_close(bench_gpu *gpu, bench_cublas *cublas) {
  if (cublas->lt) cublas->ltDestroy(cublas->lt);
  if (cublas->blas) cublas->blasDestroy(cublas->blas);
  /* The libraries stay loaded: unloading cuBLAS while the process runs gains nothing. */
  if (cublas->workspace) gpu->cuda->cuMemFree(cublas->workspace);
  memset(cublas, 0, sizeof *cublas);
}

const char *bench_cublas_status_text(const bench_cublas *cublas, cublasStatus_t status) {
  static __thread char text[32];
  if (cublas->blasGetStatusString) return cublas->blasGetStatusString(status);
  snprintf(text, sizeof text, "cublasStatus %d", (int)status);
  return text;
}
