// mma peak probe (not part of the library or its build): how many FP16 FLOPs a second with FP32
// accumulation this GPU's mma.sync gives, the physical limit of issue 36's compute-bound path.
//   m16n8k16, registers: each warp N independent accumulator tiles, A and B fragments held in
//             registers, one mma after another (N = 2, 4, 8; 1, 2 or 4 CTAs of 8 warps an SM);
//   m16n8k16, ldmatrix: each k16 step a warp loads its A and B fragments from shared memory with
//             ldmatrix.x4 and issues the products of a WM x WN warp tile (64x32: the BM = 128 tile of
//             moe_tile_probe.cu, 32x32: its BM = 64 tile, 64x64), 8 warps a CTA, 1 or 2 CTAs an SM;
//   m8n8k4 (mma_peak_sm70.cuh): registers (N accumulators) and shared memory (8-byte fragment
//             loads, no ldmatrix), built natively here and, with the PTX file named on the command
//             line, from compute_70 PTX compiled by the driver (how the library's compute_70 kernels
//             run on this GPU). sm_80 and later run m8n8k4 as a sequence of other instructions.
// FLOPs: 2 * 16 * 8 * 16 a warp's m16n8k16; a warp's m8n8k4 is four 8x8x4 products (one a quad
// pair), 4 * 2 * 8 * 8 * 4. Each configuration is timed 5 times (CUDA events, after one untimed run,
// the work sized to about 25 ms from a calibration run), median; the clock is thread 0 of CTA 0's
// clock64 over the global timer in that run.
// Build (sm_90) and run:
//   nvcc -arch=sm_90 -O3 -o mma_peak bench/probes/mma_peak.cu
//   python3 bench/probes/nvrtc_ptx.py bench/probes/mma_peak_sm70.cuh compute_70 mma_peak_sm70.ptx  (NVRTC 12)
//   ./mma_peak [mma_peak_sm70.ptx]
// scripts/gpu_check.sh prepare (PROBE=1) builds both; its probe phase runs it. The last line,
// "peak m16n8k16 ...", is what moe_tile_probe reads with --peak.
#include <algorithm>
#include <cstring>
#include <sys/stat.h>
#include <string>
#include <vector>

#include "probe_mma.cuh"
#include "mma_peak_sm70.cuh"

constexpr int kThreads = 256;

template <int kAcc>
__global__ void __launch_bounds__(kThreads) mma16816_reg(const unsigned *in, float *out, int iters, long long *clk) {
  clock_mark(clk, 0);
  const int lane = threadIdx.x & 31;
  const unsigned a[4] = {in[lane], in[32 + lane], in[64 + lane], in[96 + lane]};
  const unsigned b0[2] = {in[(lane + 7) & 127], in[(lane + 77) & 127]}, b1[2] = {in[(lane + 13) & 127], in[(lane + 99) & 127]};
  float acc[kAcc][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < kAcc; ++j) mma16816(acc[j], a, (j & 1) ? b1 : b0);
  }
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < kAcc; ++j) sum += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
  clock_mark(clk, 2);
}

// 8 warps as 2 (M) x 4 (N); the CTA's A tile is 2 WM rows of 32 k values, its B tile 4 WN rows, both
// 80 bytes a row (ldmatrix's eight 16-byte rows then fall on eight different bank groups).
constexpr int kLdmK = 32, kLdmStride = 40;

template <int kWm, int kWn>
__global__ void __launch_bounds__(kThreads) mma16816_ldmatrix(const unsigned *in, float *out, int iters, long long *clk) {
  constexpr int kRowsA = 2 * kWm, kRowsB = 4 * kWn, kMi = kWm / 16, kNi = kWn / 8;
  __shared__ __align__(16) unsigned short tile_a[kRowsA * kLdmStride], tile_b[kRowsB * kLdmStride];
  clock_mark(clk, 0);
  for (int i = threadIdx.x; i < kRowsA * kLdmStride; i += kThreads) tile_a[i] = (unsigned short)(in[i & 127] >> 16);
  for (int i = threadIdx.x; i < kRowsB * kLdmStride; i += kThreads) tile_b[i] = (unsigned short)in[(i + 64) & 127];
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp >> 2, wn = warp & 3;
  // ldmatrix.x4 row addresses: A, matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15);
  // B ([n][k]), (n 0-7, k 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15): two n8 tiles of k16.
  const unsigned base_a = smem_addr(tile_a) + ((wm * kWm + (lane & 15)) * kLdmStride + (lane >> 4) * 8) * 2;
  const unsigned base_b =
      smem_addr(tile_b) + ((wn * kWn + (lane >> 4) * 8 + (lane & 7)) * kLdmStride + ((lane >> 3) & 1) * 8) * 2;
  float acc[kMi][kNi][4] = {};
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int k = 0; k < kLdmK; k += 16) {
      unsigned a[kMi][4], b[kNi][2];
#pragma unroll
      for (int i = 0; i < kMi; ++i) ldmatrix_x4(a[i], base_a + (i * 16 * kLdmStride + k) * 2);
#pragma unroll
      for (int j = 0; j < kNi; j += 2) {
        unsigned r[4];
        ldmatrix_x4(r, base_b + (j * 8 * kLdmStride + k) * 2);
        b[j][0] = r[0], b[j][1] = r[1], b[j + 1][0] = r[2], b[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < kMi; ++i)
#pragma unroll
        for (int j = 0; j < kNi; ++j) mma16816(acc[i][j], a[i], b[j]);
    }
  }
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kMi; ++i)
#pragma unroll
    for (int j = 0; j < kNi; ++j) sum += acc[i][j][0] + acc[i][j][1] + acc[i][j][2] + acc[i][j][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
  clock_mark(clk, 2);
}

struct Config {
  std::string name;
  const void *kernel;
  double flops_per_warp_iter;  // FLOPs one warp does in one pass of the iters loop
  int ctas_per_sm;
};

struct Result {
  double ms, tflops, mhz, flops_per_clk_sm;
};

static int g_sms;
static unsigned *g_in;
static float *g_out;
static long long *g_clk;

static float launch_ms(const void *kernel, int grid, int iters, cudaEvent_t start, cudaEvent_t stop) {
  void *args[] = {(void *)&g_in, (void *)&g_out, (void *)&iters, (void *)&g_clk};
  PROBE_CHECK(cudaEventRecord(start));
  PROBE_CHECK(cudaLaunchKernel(kernel, dim3(grid), dim3(kThreads), args, 0, 0));
  PROBE_CHECK(cudaEventRecord(stop));
  PROBE_CHECK(cudaEventSynchronize(stop));
  float ms = 0.f;
  PROBE_CHECK(cudaEventElapsedTime(&ms, start, stop));
  return ms;
}

// CTAs of the kernel an SM holds (0 when the runtime cannot tell).
static int resident(const void *kernel) {
  int ctas = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, kThreads, 0) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return ctas;
}

static Result measure(const Config &c) {
  cudaEvent_t start, stop;
  PROBE_CHECK(cudaEventCreate(&start));
  PROBE_CHECK(cudaEventCreate(&stop));
  const int grid = g_sms * c.ctas_per_sm;
  // Calibrate: 64 passes, then as many as take about 25 ms (at least 16, at most 2^22).
  int iters = 64;
  float ms = launch_ms(c.kernel, grid, iters, start, stop);
  ms = launch_ms(c.kernel, grid, iters, start, stop);
  iters = (int)std::min(4194304.0, std::max(16.0, iters * 25.0 / std::max(ms, 1e-3f)));
  launch_ms(c.kernel, grid, iters, start, stop);
  std::vector<float> times;
  std::vector<double> mhz;
  for (int r = 0; r < 5; ++r) {
    times.push_back(launch_ms(c.kernel, grid, iters, start, stop));
    long long clk[4];
    PROBE_CHECK(cudaMemcpy(clk, g_clk, sizeof(clk), cudaMemcpyDeviceToHost));
    mhz.push_back(clk[3] > clk[1] ? (double)(clk[2] - clk[0]) * 1e3 / (double)(clk[3] - clk[1]) : 0.0);
  }
  std::vector<float> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const int median = (int)(std::find(times.begin(), times.end(), sorted[2]) - times.begin());
  PROBE_CHECK(cudaEventDestroy(start));
  PROBE_CHECK(cudaEventDestroy(stop));
  const double flops = c.flops_per_warp_iter * iters * grid * (kThreads / 32);
  Result r;
  r.ms = sorted[2];
  r.tflops = flops / (r.ms * 1e-3) / 1e12;
  r.mhz = mhz[median];
  r.flops_per_clk_sm = r.mhz > 0 ? flops / (r.ms * 1e-3 * r.mhz * 1e6 * g_sms) : 0.0;
  return r;
}

static void print(const Config &c, const Result &r) {
  printf("%-46s CTAs/SM %d  %8.3f ms  %7.1f TFLOP/s  %5.0f MHz  %6.0f FLOP/clk/SM\n", c.name.c_str(), c.ctas_per_sm,
         r.ms, r.tflops, r.mhz, r.flops_per_clk_sm);
}

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc > 2) {
    printf("usage: mma_peak [COMPUTE_70_PTX_FILE]\n");
    return 2;
  }
  int device = 0;
  cudaDeviceProp prop;
  PROBE_CHECK(cudaGetDeviceProperties(&prop, device));
  PROBE_CHECK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, device));
  printf("%s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, g_sms);
  std::vector<unsigned> host(128);
  unsigned state = 12345;
  for (auto &word : host) {  // FP16 pairs of magnitude 2^-8..2^-7 with random mantissas and signs
    state = state * 1664525u + 1013904223u;
    const unsigned lo = 0x1c00u | ((state >> 8) & 0x3ffu) | ((state >> 20) & 1u) << 15;
    const unsigned hi = 0x1c00u | ((state >> 12) & 0x3ffu) | ((state >> 22) & 1u) << 15;
    word = lo | hi << 16;
  }
  PROBE_CHECK(cudaMalloc(&g_in, 128 * sizeof(unsigned)));
  PROBE_CHECK(cudaMemcpy(g_in, host.data(), 128 * sizeof(unsigned), cudaMemcpyHostToDevice));
  PROBE_CHECK(cudaMalloc(&g_out, (size_t)g_sms * 4 * kThreads * sizeof(float)));
  PROBE_CHECK(cudaMalloc(&g_clk, 4 * sizeof(long long)));

  constexpr double k16816 = 2.0 * 16 * 8 * 16, k884 = 4 * 2.0 * 8 * 8 * 4;
  std::vector<Config> configs;
  for (int ctas : {1, 2, 4}) {
    configs.push_back({"m16n8k16 registers, 2 accumulators", (const void *)mma16816_reg<2>, 2 * k16816, ctas});
    configs.push_back({"m16n8k16 registers, 4 accumulators", (const void *)mma16816_reg<4>, 4 * k16816, ctas});
    configs.push_back({"m16n8k16 registers, 8 accumulators", (const void *)mma16816_reg<8>, 8 * k16816, ctas});
  }
  const size_t register_configs = configs.size();
  for (int ctas : {1, 2}) {
    configs.push_back({"m16n8k16 ldmatrix, warp tile 64x32", (const void *)mma16816_ldmatrix<64, 32>,
                       (kLdmK / 16) * 4 * 4 * k16816, ctas});
    configs.push_back({"m16n8k16 ldmatrix, warp tile 32x32", (const void *)mma16816_ldmatrix<32, 32>,
                       (kLdmK / 16) * 2 * 4 * k16816, ctas});
    configs.push_back({"m16n8k16 ldmatrix, warp tile 64x64", (const void *)mma16816_ldmatrix<64, 64>,
                       (kLdmK / 16) * 4 * 8 * k16816, ctas});
  }
  for (int ctas : {1, 2}) {
    configs.push_back({"m8n8k4 native, registers, 4 accumulators", (const void *)m884_reg4, 4 * k884, ctas});
    configs.push_back({"m8n8k4 native, registers, 8 accumulators", (const void *)m884_reg8, 8 * k884, ctas});
  }
  Result best_register = {}, best_ldmatrix = {};
  for (size_t i = 0; i < configs.size(); ++i) {
    const int fit = resident(configs[i].kernel);
    if (fit > 0 && fit < configs[i].ctas_per_sm) {
      printf("%-46s CTAs/SM %d  not run: %d fit an SM\n", configs[i].name.c_str(), configs[i].ctas_per_sm, fit);
      continue;
    }
    const Result r = measure(configs[i]);
    print(configs[i], r);
    Result &best = i < register_configs ? best_register : best_ldmatrix;
    if (configs[i].name.rfind("m16n8k16", 0) == 0 && r.tflops > best.tflops) best = r;
  }

  // The same m8n8k4 kernels from compute_70 PTX, compiled by the driver for this GPU. A PTX file that
  // cannot be read or compiled is reported and skipped, so the peak line below always comes.
  std::string ptx;
  if (argc == 2) {
    struct stat info;  // only a regular file: a FIFO would block the read
    FILE *file = stat(argv[1], &info) == 0 && S_ISREG(info.st_mode) ? fopen(argv[1], "rb") : nullptr;
    if (file) {
      char chunk[65536];
      size_t got;
      while ((got = fread(chunk, 1, sizeof(chunk), file)) > 0) ptx.append(chunk, got);
      fclose(file);
    }
    if (ptx.empty()) printf("compute_70 PTX %s: not a regular file, unreadable or empty\n", argv[1]);
  } else {
    printf("compute_70 PTX: not measured (no PTX file named)\n");
  }
  cudaLibrary_t library = nullptr;
  if (!ptx.empty()) {
    const cudaError_t loaded = cudaLibraryLoadData(&library, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (loaded != cudaSuccess) {
      printf("compute_70 PTX %s: the driver did not load it: %s\n", argv[1], cudaGetErrorString(loaded));
      cudaGetLastError();
      library = nullptr;
    } else {
      printf("compute_70 PTX %s (%s) compiled by the driver for sm_%d%d\n", argv[1],
             ptx.find(".target sm_70") != std::string::npos ? ".target sm_70" : "no .target sm_70 line", prop.major,
             prop.minor);
    }
  }
  if (library) {
    const struct {
      const char *symbol, *name;
      double flops;
    } ptx_kernels[] = {{"m884_reg2", "m8n8k4 compute_70, registers, 2 accumulators", 2 * k884},
                       {"m884_reg4", "m8n8k4 compute_70, registers, 4 accumulators", 4 * k884},
                       {"m884_reg8", "m8n8k4 compute_70, registers, 8 accumulators", 8 * k884},
                       {"m884_smem_2x2", "m8n8k4 compute_70, shared 8-byte loads, 2x2", (kM884K / 4) * 4 * k884},
                       {"m884_smem_4x4", "m8n8k4 compute_70, shared 8-byte loads, 4x4", (kM884K / 4) * 16 * k884}};
    for (const auto &k : ptx_kernels) {
      cudaKernel_t kernel;
      PROBE_CHECK(cudaLibraryGetKernel(&kernel, library, k.symbol));
      for (int ctas : {1, 2}) {
        const Config c = {k.name, (const void *)kernel, k.flops, ctas};
        const int fit = resident(c.kernel);
        if (fit > 0 && fit < ctas)
          printf("%-46s CTAs/SM %d  not run: %d fit an SM\n", c.name.c_str(), ctas, fit);
        else
          print(c, measure(c));
      }
    }
  }
  printf("peak m16n8k16 registers %.1f TFLOP/s at %.0f MHz (%.0f FLOP/clk/SM); ldmatrix-fed %.1f TFLOP/s (%.0f FLOP/clk/SM)\n",
         best_register.tflops, best_register.mhz, best_register.flops_per_clk_sm, best_ldmatrix.tflops,
         best_ldmatrix.flops_per_clk_sm);
  PROBE_CHECK(cudaGetLastError());
  return 0;
}
