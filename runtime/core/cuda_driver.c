/* libcuda through dlopen: the library must load, and its CPU paths work, without a driver. */
#include "core/cuda_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volt8_cuda_driver driver_table;
static const volt8_cuda_driver *driver_loaded;
static char driver_failure[512];
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

#define RESOLVE(field, symbol)                                                                     \
  do {                                                                                             \
    *(void **)&driver_table.field = dlsym(handle, symbol);                                         \
    if (!driver_table.field) {                                                                     \
      snprintf(driver_failure, sizeof driver_failure, "libcuda.so.1 lacks %s (driver too old)", symbol); \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

static void driver_open(void) {
  if (getenv("VOLT8_DISABLE_CUDA") && strcmp(getenv("VOLT8_DISABLE_CUDA"), "1") == 0) {
    snprintf(driver_failure, sizeof driver_failure, "the CUDA driver is disabled by VOLT8_DISABLE_CUDA=1");
    return;
  }
  void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    snprintf(driver_failure, sizeof driver_failure, "no CUDA driver: dlopen(libcuda.so.1) failed: %s", dlerror());
    return;
  }
  RESOLVE(cuInit, "cuInit");
  RESOLVE(cuDriverGetVersion, "cuDriverGetVersion");
  RESOLVE(cuDeviceGetCount, "cuDeviceGetCount");
  RESOLVE(cuDeviceGet, "cuDeviceGet");
  RESOLVE(cuDeviceGetAttribute, "cuDeviceGetAttribute");
  RESOLVE(cuDeviceGetName, "cuDeviceGetName");
  RESOLVE(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  RESOLVE(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  RESOLVE(cuCtxSetCurrent, "cuCtxSetCurrent");
  RESOLVE(cuCtxGetCurrent, "cuCtxGetCurrent");
  RESOLVE(cuCtxSynchronize, "cuCtxSynchronize");
  RESOLVE(cuModuleLoadDataEx, "cuModuleLoadDataEx");
  RESOLVE(cuModuleUnload, "cuModuleUnload");
  RESOLVE(cuModuleGetFunction, "cuModuleGetFunction");
  RESOLVE(cuLaunchKernel, "cuLaunchKernel");
  *(void **)&driver_table.cuLaunchKernelEx = dlsym(handle, "cuLaunchKernelEx"); /* optional */
  RESOLVE(cuMemAlloc, "cuMemAlloc_v2");
  RESOLVE(cuMemFree, "cuMemFree_v2");
  RESOLVE(cuMemAllocAsync, "cuMemAllocAsync");
  RESOLVE(cuMemFreeAsync, "cuMemFreeAsync");
  RESOLVE(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  RESOLVE(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  RESOLVE(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  RESOLVE(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  RESOLVE(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  RESOLVE(cuMemsetD8Async, "cuMemsetD8Async");
  RESOLVE(cuMemsetD32Async, "cuMemsetD32Async");
  RESOLVE(cuMemGetInfo, "cuMemGetInfo_v2");
  RESOLVE(cuStreamCreate, "cuStreamCreate");
  RESOLVE(cuStreamDestroy, "cuStreamDestroy_v2");
  RESOLVE(cuStreamSynchronize, "cuStreamSynchronize");
  RESOLVE(cuStreamIsCapturing, "cuStreamIsCapturing");
  RESOLVE(cuStreamBeginCapture, "cuStreamBeginCapture_v2");
  RESOLVE(cuStreamEndCapture, "cuStreamEndCapture");
  RESOLVE(cuGraphInstantiate, "cuGraphInstantiateWithFlags");
  RESOLVE(cuGraphLaunch, "cuGraphLaunch");
  RESOLVE(cuGraphExecDestroy, "cuGraphExecDestroy");
  RESOLVE(cuGraphDestroy, "cuGraphDestroy");
  /* optional: the replay of eager forwards (moe/replay.h) */
  *(void **)&driver_table.cuGraphGetNodes = dlsym(handle, "cuGraphGetNodes");
  *(void **)&driver_table.cuGraphKernelNodeGetParams = dlsym(handle, "cuGraphKernelNodeGetParams_v2");
  *(void **)&driver_table.cuGraphExecKernelNodeSetParams = dlsym(handle, "cuGraphExecKernelNodeSetParams_v2");
  RESOLVE(cuEventCreate, "cuEventCreate");
  RESOLVE(cuEventDestroy, "cuEventDestroy_v2");
  RESOLVE(cuEventRecord, "cuEventRecord");
  RESOLVE(cuEventSynchronize, "cuEventSynchronize");
  RESOLVE(cuEventElapsedTime, "cuEventElapsedTime");
  RESOLVE(cuGetErrorName, "cuGetErrorName");
  RESOLVE(cuGetErrorString, "cuGetErrorString");
  CUresult result = driver_table.cuInit(0);
  if (result != CUDA_SUCCESS) {
    snprintf(driver_failure, sizeof driver_failure, "cuInit failed: %s", volt8_cuda_error_text(&driver_table, result));
    return;
  }
  driver_loaded = &driver_table;
}

const volt8_cuda_driver *volt8_cuda_driver_get(char *reason, size_t reason_size) {
  pthread_once(&driver_once, driver_open);
  if (!driver_loaded && reason && reason_size) snprintf(reason, reason_size, "%s", driver_failure);
  return driver_loaded;
}

CUresult volt8_cuda_launch_early(const volt8_cuda_driver *cuda, CUfunction function, unsigned grid_x, unsigned grid_y,
                                 unsigned threads, CUstream stream, void **params) {
  if (!cuda->cuLaunchKernelEx) return CUDA_ERROR_NOT_SUPPORTED;
  CUlaunchAttribute attribute;
  memset(&attribute, 0, sizeof attribute);
  attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attribute.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config;
  memset(&config, 0, sizeof config);
  config.gridDimX = grid_x;
  config.gridDimY = grid_y;
  config.gridDimZ = 1;
  config.blockDimX = threads;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.hStream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cuda->cuLaunchKernelEx(&config, function, params, NULL);
}

CUresult volt8_cuda_launch(const volt8_cuda_driver *cuda, CUfunction function, unsigned grid_x, unsigned grid_y,
                           unsigned threads, int early, CUstream stream, void **params) {
  if (early) return volt8_cuda_launch_early(cuda, function, grid_x, grid_y, threads, stream, params);
  return cuda->cuLaunchKernel(function, grid_x, grid_y, 1, threads, 1, 1, 0, stream, params, NULL);
}

const char *volt8_cuda_error_text(const volt8_cuda_driver *cuda, CUresult result) {
  static __thread char text[256];
  const char *name = NULL, *description = NULL;
  if (cuda && cuda->cuGetErrorName) cuda->cuGetErrorName(result, &name);
  if (cuda && cuda->cuGetErrorString) cuda->cuGetErrorString(result, &description);
  snprintf(text, sizeof text, "%s (%s)", name ? name : "CUDA error", description ? description : "no description");
  return text;
}
