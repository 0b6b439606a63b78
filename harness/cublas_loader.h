/* cuBLASLt and cuBLAS for the FP16 baselines, opened with dlopen (libcublasLt.so.13 / libcublas.so.13,
 * then .so.12) so the volt8 command starts on machines without them. */
#ifndef VOLT8_BENCH_CUBLAS_LOADER_H
#define VOLT8_BENCH_CUBLAS_LOADER_H

#include <cublasLt.h>
#include <cublas_v2.h>

#include "bench_gpu.h"

#define BENCH_CUBLAS_WORKSPACE_BYTES (32u << 20)

typedef struct bench_cublas {
  void *lt_library, *blas_library;
  char lt_path[512], blas_path[512];
  char lt_unavailable[512], grouped_unavailable[512]; /* why a baseline cannot run ("" when it can) */
  size_t lt_version;
  int blas_version;
  cublasLtHandle_t lt;
  cublasHandle_t blas;
  CUdeviceptr workspace; /* BENCH_CUBLAS_WORKSPACE_BYTES, shared by both */

  __typeof__(cublasLtCreate) *ltCreate;
  __typeof__(cublasLtDestroy) *ltDestroy;
  __typeof__(cublasLtGetVersion) *ltGetVersion;
  __typeof__(cublasLtMatmulDescCreate) *ltMatmulDescCreate;
  __typeof__(cublasLtMatmulDescDestroy) *ltMatmulDescDestroy;
  __typeof__(cublasLtMatmulDescSetAttribute) *ltMatmulDescSetAttribute;
  __typeof__(cublasLtMatrixLayoutCreate) *ltMatrixLayoutCreate;
  __typeof__(cublasLtMatrixLayoutDestroy) *ltMatrixLayoutDestroy;
  __typeof__(cublasLtMatrixLayoutSetAttribute) *ltMatrixLayoutSetAttribute;
  __typeof__(cublasLtMatmulPreferenceCreate) *ltMatmulPreferenceCreate;
  __typeof__(cublasLtMatmulPreferenceDestroy) *ltMatmulPreferenceDestroy;
  __typeof__(cublasLtMatmulPreferenceSetAttribute) *ltMatmulPreferenceSetAttribute;
  __typeof__(cublasLtMatmulAlgoGetHeuristic) *ltMatmulAlgoGetHeuristic;
  __typeof__(cublasLtMatmul) *ltMatmul;

  __typeof__(cublasCreate_v2) *blasCreate;
  __typeof__(cublasDestroy_v2) *blasDestroy;
  __typeof__(cublasGetVersion_v2) *blasGetVersion;
  __typeof__(cublasSetStream_v2) *blasSetStream;
  __typeof__(cublasSetWorkspace_v2) *blasSetWorkspace;
  __typeof__(cublasGemmGroupedBatchedEx) *blasGemmGroupedBatchedEx;
  __typeof__(cublasGetStatusString) *blasGetStatusString; /* may be NULL */
} bench_cublas;

/* Opens what it finds and creates the handles on gpu's device. Never fails for a missing library:
 * the *_unavailable texts say which baseline cannot run and why. */
volt8_status bench_cublas_open(bench_gpu *gpu, bench_cublas *out);
void bench_cublas_close(bench_gpu *gpu, bench_cublas *cublas);
/* The first of `names` that opens: each through the loader's search, then in $CUDA_HOME/lib64 and the
 * usual toolkit folders, a path only when it is a whole ELF library (core/elf_check.h). NULL when none
 * does, with each failure in `why`; `opened` gets the name or path that served. */
void *bench_cublas_open_first(const char *const *names, int count, char *opened, size_t opened_size, char *why,
                              size_t why_size);
/* "CUBLAS_STATUS_X" or the number. */
const char *bench_cublas_status_text(const bench_cublas *cublas, cublasStatus_t status);

#endif
