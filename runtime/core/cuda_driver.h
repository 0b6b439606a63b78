/* The CUDA driver API, opened with dlopen so the library loads on machines without a driver. */
#ifndef VOLT8_CUDA_DRIVER_H
#define VOLT8_CUDA_DRIVER_H

#include <cuda.h>

typedef struct volt8_cuda_driver {
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetCurrent)(CUcontext *);
  CUresult (*cuCtxSynchronize)(void);
  CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned int, CUjit_option *, void **);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, CUstream, void **, void **);
  /* NULL where the driver predates it (CUDA 12.0): kernels are then launched with cuLaunchKernel. */
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
  CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
  CUresult (*cuMemGetInfo)(size_t *, size_t *);
  CUresult (*cuStreamCreate)(CUstream *, unsigned int);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
  CUresult (*cuStreamBeginCapture)(CUstream, CUstreamCaptureMode);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
  CUresult (*cuGraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  /* NULL where the driver predates them (CUDA 12.0, the _v2 kernel node parameters): eager forwards are
   * then never replayed from a graph (moe/replay.h). */
  CUresult (*cuGraphGetNodes)(CUgraph, CUgraphNode *, size_t *);
  CUresult (*cuGraphKernelNodeGetParams)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS *);
  CUresult (*cuGraphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *);
  CUresult (*cuEventCreate)(CUevent *, unsigned int);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuGetErrorString)(CUresult, const char **);
} volt8_cuda_driver;

/* Opens libcuda once per process (thread-safe). Returns NULL and fills `reason` when there is
 * no usable driver. */
const volt8_cuda_driver *volt8_cuda_driver_get(char *reason, size_t reason_size);

/* Launches `function` on a grid_x x grid_y grid of `threads`-thread CTAs, allowed to start before
 * the kernel before it on `stream` ends (programmatic dependent launch); the kernel waits for it
 * itself. Needs cuLaunchKernelEx (CUDA 11.8+ drivers). */
CUresult volt8_cuda_launch_early(const volt8_cuda_driver *cuda, CUfunction function, unsigned grid_x, unsigned grid_y,
                                 unsigned threads, CUstream stream, void **params);

/* One launch of `function` as the forward makes it: early (volt8_cuda_launch_early) when `early`, else
 * cuLaunchKernel. */
CUresult volt8_cuda_launch(const volt8_cuda_driver *cuda, CUfunction function, unsigned grid_x, unsigned grid_y,
                           unsigned threads, int early, CUstream stream, void **params);

/* "CUDA_ERROR_X (description)" for a CUresult; static storage. */
const char *volt8_cuda_error_text(const volt8_cuda_driver *cuda, CUresult result);

#endif
