// Layout probe (not part of the library or its build): the DRAM read rate of the M = 8 gate_up
// access pattern at the reference TP4 shape (gate_up.hmma.bm1.bn8.w8.sk8: per 64-code window each
// warp reads 64-byte pieces of 16 rows 2560 bytes apart) against the same bytes laid out so that
// each warp-window is one contiguous 1 KB run, and against a plain streaming read of each pair's
// expert. 80 pairs of random experts (M = 8, top-10), 8 sets rotated so L2 does not serve them, 32
// timed launches each after 8 of warm-up, median. Only the loads are timed: no conversion or math.
// Build (nvcc for sm_90) and run on an sm_90 GPU:
//   nvcc -arch=sm_90 -O3 -o layout_probe bench/probes/layout_probe.cu && ./layout_probe
// Figures: docs/notebook/2026-11.md, "Layout probe".
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

constexpr int kExperts = 512, kRows = 320, kK = 2560, kCols = 160, kPairs = 80;
constexpr long long kExpertBytes = (long long)kRows * kK;  // 819200

template <int kFetch>
__device__ __forceinline__ uint4 ld16(const unsigned char *p) {
  uint4 v;
  if (kFetch == 128)
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else if (kFetch == 256)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// grid (20 column tiles, 80 pairs), 256 threads: warp w takes windows 5w..5w+4 of the tile's 16 rows.
// packed 0: rows of [expert][row][K]; packed 1: [expert][tile][window][16 rows][64 B].
template <int kPacked, int kFetch>
__global__ void __launch_bounds__(256) probe(const unsigned char *w, const int *experts, unsigned *out) {
  const int tile = blockIdx.x, pair = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const unsigned char *base = w + (long long)experts[pair] * kExpertBytes;
  uint4 raw[5][2];
#pragma unroll
  for (int t = 0; t < 5; ++t) {
    const int window = warp * 5 + t;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const unsigned char *p;
      if (kPacked) {
        const int row16 = g + 8 * h;
        p = base + ((long long)(tile * 40 + window) * 16 + row16) * 64 + c * 16;
      } else {
        const int row = tile * 8 + g + h * kCols;
        p = base + (long long)row * kK + window * 64 + c * 16;
      }
      raw[t][h] = ld16<kFetch>(p);
    }
  }
  unsigned acc = 0;
#pragma unroll
  for (int t = 0; t < 5; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) acc ^= raw[t][h].x ^ raw[t][h].y ^ raw[t][h].z ^ raw[t][h].w;
  if (acc == 0x12345678u) out[blockIdx.y * gridDim.x + blockIdx.x] = acc;
}

// The same bytes as a stream: grid (20, 80), each CTA reads a contiguous 40 KB of its pair's expert
// (20 x 40960 = the expert's 819200 bytes) with 16-byte loads, all in flight together.
__global__ void __launch_bounds__(256) stream(const unsigned char *w, const int *experts, unsigned *out) {
  const unsigned char *base = w + (long long)experts[blockIdx.y] * kExpertBytes + (long long)blockIdx.x * 40960;
  uint4 raw[10];
#pragma unroll
  for (int i = 0; i < 10; ++i) raw[i] = ld16<0>(base + (i * 256 + threadIdx.x) * 16);
  unsigned acc = 0;
#pragma unroll
  for (int i = 0; i < 10; ++i) acc ^= raw[i].x ^ raw[i].y ^ raw[i].z ^ raw[i].w;
  if (acc == 0x12345678u) out[blockIdx.y * gridDim.x + blockIdx.x] = acc;
}

int main() {
  unsigned char *w;
  int *experts;
  unsigned *out;
  const int sets = 8;
  cudaMalloc(&w, (size_t)kExperts * kExpertBytes);
  cudaMemset(w, 1, (size_t)kExperts * kExpertBytes);
  cudaMalloc(&experts, sizeof(int) * kPairs * sets);
  cudaMalloc(&out, 4 * 20 * kPairs);
  std::vector<int> host(kPairs * sets);
  srand(1);
  for (auto &e : host) e = rand() % kExperts;
  cudaMemcpy(experts, host.data(), host.size() * 4, cudaMemcpyHostToDevice);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  const char *names[7] = {"rows (shipped layout), no fetch size", "rows, L2::128B", "rows, L2::256B",
                          "packed 1 KB warp-windows, no fetch size", "packed, L2::128B", "packed, L2::256B",
                          "stream (each CTA 40 KB contiguous)"};
  const double bytes = (double)kPairs * kExpertBytes;
  for (int round = 0; round < 3; ++round) {
    for (int k = 0; k < 7; ++k) {
      std::vector<float> times;
      for (int it = 0; it < 40; ++it) {
        const int *e = experts + (it % sets) * kPairs;
        cudaEventRecord(a);
        switch (k) {
          case 0: probe<0, 0><<<dim3(20, kPairs), 256>>>(w, e, out); break;
          case 1: probe<0, 128><<<dim3(20, kPairs), 256>>>(w, e, out); break;
          case 2: probe<0, 256><<<dim3(20, kPairs), 256>>>(w, e, out); break;
          case 3: probe<1, 0><<<dim3(20, kPairs), 256>>>(w, e, out); break;
          case 4: probe<1, 128><<<dim3(20, kPairs), 256>>>(w, e, out); break;
          case 5: probe<1, 256><<<dim3(20, kPairs), 256>>>(w, e, out); break;
          case 6: stream<<<dim3(20, kPairs), 256>>>(w, e, out); break;
        }
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        if (it >= 8) times.push_back(ms);
      }
      std::sort(times.begin(), times.end());
      const float median = times[times.size() / 2];
      printf("round %d %-42s median %7.2f us  %6.0f GB/s\n", round, names[k], median * 1e3, bytes / (median * 1e-3) / 1e9);
    }
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
