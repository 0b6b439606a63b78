// Launch cost probe (not part of the library or its build): the host microseconds of the driver calls
// an eager forward makes, on this machine, for the host path of issue 37. Each line is one call
// repeated: 30 batches of 200 calls, the host time of a batch over its calls (the stream synchronised
// between batches, outside the timing, so the GPU never holds the host back), median and best batch.
//   cuCtxGetCurrent, cuCtxSetCurrent (the context already current: what volt8_ctx_require_device does);
//   cuLaunchKernel of an empty kernel of one parameter (a struct of 16 pointers), 1 CTA and 132;
//   cuLaunchKernelEx of the same with the programmatic stream serialisation attribute (early launch),
//   and without any attribute;
//   cuStreamIsCapturing;
//   cuLaunchKernel of an empty kernel of 14 separate parameters (10 pointers, 4 ints: a GEMM's list),
//   and of the same kernel loaded from PTX text by cuModuleLoadData (as the library loads its kernels);
//   a captured graph of two such launches (the second early, as a forward's down): cuGraphLaunch alone,
//   cuGraphExecKernelNodeSetParams alone, and both nodes' parameters set then cuGraphLaunch (what an
//   eager forward replaying a graph with new tensors would pay).
// Build (sm_90) and run:
//   nvcc -arch=sm_90 -O3 -o launch_cost bench/probes/launch_cost.cu -lcuda
//   ./launch_cost
// scripts/gpu_check.sh prepare (PROBE=1) builds it; its launch_cost phase runs it.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

struct Params {
  const void *p[16];
};

__global__ void empty_kernel(Params params) {
  if (params.p[0] == reinterpret_cast<const void *>(1)) asm volatile("trap;");
}

// 14 parameters, as a GEMM of the library has: 10 pointers and 4 ints, in its order of kinds.
__global__ void many_parameters(const void *a, const void *b, const void *c, const void *d, const void *e, const void *f,
                                int g, const void *h, const void *i, int j, const void *k, int l, const void *m, int n) {
  if (a == reinterpret_cast<const void *>(1) && g + j + l + n == 7) asm volatile("trap;");
  (void)b, (void)c, (void)d, (void)e, (void)f, (void)h, (void)i, (void)k, (void)m;
}

static void check(CUresult result, const char *what) {
  if (result != CUDA_SUCCESS) {
    const char *name = nullptr;
    cuGetErrorName(result, &name);
    std::fprintf(stderr, "launch_cost: %s failed: %s\n", what, name ? name : "?");
    std::exit(1);
  }
}

// A launch of `grid` CTAs of 128 threads on `stream`, with the one attribute given or none.
static CUlaunchConfig launch_config(unsigned grid, CUstream stream, CUlaunchAttribute *attribute) {
  CUlaunchConfig config{};
  config.gridDimX = grid;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 128;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream;
  config.attrs = attribute;
  config.numAttrs = attribute ? 1 : 0;
  return config;
}

template <typename Call>
static void time_call(const char *name, CUstream stream, Call call) {
  constexpr int kBatches = 30, kCalls = 200;
  for (int i = 0; i < 20; ++i) call();
  check(cuStreamSynchronize(stream), "cuStreamSynchronize");
  std::vector<double> per_call;
  for (int b = 0; b < kBatches; ++b) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) call();
    const auto end = std::chrono::steady_clock::now();
    check(cuStreamSynchronize(stream), "cuStreamSynchronize");
    per_call.push_back(std::chrono::duration<double, std::micro>(end - start).count() / kCalls);
  }
  std::sort(per_call.begin(), per_call.end());
  std::printf("  %-58s %7.2f us a call (best batch %.2f)\n", name, per_call[kBatches / 2], per_call[0]);
}

int main() {
  check(cuInit(0), "cuInit");
  cudaFree(nullptr);  // the primary context, current
  CUcontext context;
  check(cuCtxGetCurrent(&context), "cuCtxGetCurrent");
  CUstream stream;
  check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  cudaFunction_t runtime_function;
  if (cudaGetFuncBySymbol(&runtime_function, reinterpret_cast<const void *>(empty_kernel)) != cudaSuccess) {
    std::fprintf(stderr, "launch_cost: cudaGetFuncBySymbol failed\n");
    return 1;
  }
  CUfunction function = reinterpret_cast<CUfunction>(runtime_function);
  Params params{};
  for (int i = 0; i < 16; ++i) params.p[i] = reinterpret_cast<const void *>(static_cast<size_t>(4096 * (i + 2)));
  void *args[] = {&params};
  cudaDeviceProp properties;
  cudaGetDeviceProperties(&properties, 0);
  int driver = 0;
  cuDriverGetVersion(&driver);
  std::printf("launch_cost: %s, driver %d; host microseconds a call (30 batches of 200)\n", properties.name, driver);

  time_call("cuCtxGetCurrent", stream, [&] {
    CUcontext current;
    check(cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  });
  time_call("cuCtxSetCurrent (already current)", stream, [&] { check(cuCtxSetCurrent(context), "cuCtxSetCurrent"); });
  time_call("cuStreamIsCapturing", stream, [&] {
    CUstreamCaptureStatus status;
    check(cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  });
  for (unsigned grid : {1u, 132u}) {
    char name[96];
    std::snprintf(name, sizeof name, "cuLaunchKernel, grid %u x 128 threads", grid);
    time_call(name, stream, [&] {
      check(cuLaunchKernel(function, grid, 1, 1, 128, 1, 1, 0, stream, args, nullptr), "cuLaunchKernel");
    });
    CUlaunchAttribute attribute{};
    attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig configs[2] = {launch_config(grid, stream, nullptr), launch_config(grid, stream, &attribute)};
    for (int early = 0; early < 2; ++early) {
      std::snprintf(name, sizeof name, "cuLaunchKernelEx, grid %u, %s", grid,
                    early ? "programmatic serialisation (early launch)" : "no attribute");
      time_call(name, stream,
                [&] { check(cuLaunchKernelEx(&configs[early], function, args, nullptr), "cuLaunchKernelEx"); });
    }
    std::snprintf(name, sizeof name, "cuLaunchKernel then cuLaunchKernelEx (early), grid %u", grid);
    time_call(name, stream, [&] {
      check(cuLaunchKernel(function, grid, 1, 1, 128, 1, 1, 0, stream, args, nullptr), "cuLaunchKernel");
      check(cuLaunchKernelEx(&configs[1], function, args, nullptr), "cuLaunchKernelEx");
    });
  }
  cudaFunction_t many_runtime;
  if (cudaGetFuncBySymbol(&many_runtime, reinterpret_cast<const void *>(many_parameters)) != cudaSuccess) {
    std::fprintf(stderr, "launch_cost: cudaGetFuncBySymbol failed\n");
    return 1;
  }
  CUfunction many = reinterpret_cast<CUfunction>(many_runtime);
  const void *pointers[10];
  for (int i = 0; i < 10; ++i) pointers[i] = reinterpret_cast<const void *>(static_cast<size_t>(4096 * (i + 2)));
  int ints[4] = {1, 2, 3, 4};
  void *many_args[14] = {&pointers[0], &pointers[1], &pointers[2], &pointers[3], &pointers[4], &pointers[5], &ints[0],
                         &pointers[6], &pointers[7], &ints[1], &pointers[8], &ints[2], &pointers[9], &ints[3]};
  time_call("cuLaunchKernel, 14 parameters, grid 132", stream, [&] {
    check(cuLaunchKernel(many, 132, 1, 1, 128, 1, 1, 0, stream, many_args, nullptr), "cuLaunchKernel");
  });
  // The same kernel's PTX, loaded as the library loads its kernels (cuModuleLoadData of PTX text).
  static const char kPtx[] =
      ".version 8.0\n.target sm_90\n.address_size 64\n"
      ".visible .entry many_ptx(.param .u64 a, .param .u64 b, .param .u64 c, .param .u64 d, .param .u64 e,"
      " .param .u64 f, .param .u32 g, .param .u64 h, .param .u64 i, .param .u32 j, .param .u64 k, .param .u32 l,"
      " .param .u64 m, .param .u32 n)\n{\n ret;\n}\n";
  CUmodule module;
  CUfunction many_ptx;
  check(cuModuleLoadData(&module, kPtx), "cuModuleLoadData");
  check(cuModuleGetFunction(&many_ptx, module, "many_ptx"), "cuModuleGetFunction");
  time_call("cuLaunchKernel, 14 parameters, grid 132, module from PTX", stream, [&] {
    check(cuLaunchKernel(many_ptx, 132, 1, 1, 128, 1, 1, 0, stream, many_args, nullptr), "cuLaunchKernel");
  });

  // A graph of the two launches of an M = 1 forward (the second early), captured once.
  CUlaunchAttribute early_attribute{};
  early_attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  early_attribute.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig early_config = launch_config(132, stream, &early_attribute);
  CUgraph graph;
  check(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
  check(cuLaunchKernel(many_ptx, 132, 1, 1, 128, 1, 1, 0, stream, many_args, nullptr), "cuLaunchKernel (capture)");
  check(cuLaunchKernelEx(&early_config, many_ptx, many_args, nullptr), "cuLaunchKernelEx (capture)");
  check(cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
  CUgraphExec exec;
  check(cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
  CUgraphNode nodes[4];
  size_t node_count = 4;
  check(cuGraphGetNodes(graph, nodes, &node_count), "cuGraphGetNodes");
  std::printf("  (the captured pair is a graph of %zu nodes)\n", node_count);
  CUDA_KERNEL_NODE_PARAMS node_params[4];
  for (size_t i = 0; i < node_count && i < 4; ++i)
    check(cuGraphKernelNodeGetParams(nodes[i], &node_params[i]), "cuGraphKernelNodeGetParams");
  time_call("cuGraphLaunch, the pair's graph", stream, [&] { check(cuGraphLaunch(exec, stream), "cuGraphLaunch"); });
  const void *other_pointers[2][10];
  for (int v = 0; v < 2; ++v)
    for (int i = 0; i < 10; ++i) other_pointers[v][i] = reinterpret_cast<const void *>(static_cast<size_t>(8192 * (i + 2 + v)));
  void *other_args[2][14];
  for (int v = 0; v < 2; ++v) {
    int p = 0;
    for (int i = 0; i < 14; ++i)
      other_args[v][i] = (i == 6 || i == 9 || i == 11 || i == 13) ? many_args[i] : (void *)&other_pointers[v][p++];
  }
  int flip = 0;
  auto set_both = [&] {
    flip ^= 1;
    for (size_t i = 0; i < node_count && i < 2; ++i) {
      node_params[i].kernelParams = other_args[flip];
      check(cuGraphExecKernelNodeSetParams(exec, nodes[i], &node_params[i]), "cuGraphExecKernelNodeSetParams");
    }
  };
  time_call("cuGraphExecKernelNodeSetParams, both nodes", stream, set_both);
  time_call("both nodes' parameters set, then cuGraphLaunch", stream, [&] {
    set_both();
    check(cuGraphLaunch(exec, stream), "cuGraphLaunch");
  });
  time_call("cuLaunchKernel then cuLaunchKernelEx (early), module from PTX", stream, [&] {
    check(cuLaunchKernel(many_ptx, 132, 1, 1, 128, 1, 1, 0, stream, many_args, nullptr), "cuLaunchKernel");
    check(cuLaunchKernelEx(&early_config, many_ptx, many_args, nullptr), "cuLaunchKernelEx");
  });
  check(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
  check(cuGraphDestroy(graph), "cuGraphDestroy");
  check(cuModuleUnload(module), "cuModuleUnload");
  check(cuStreamDestroy(stream), "cuStreamDestroy");
  return 0;
}
