// Floor probe (not part of the library or its build): how fast the dependent chain of a routed MoE
// forward can run on this GPU when every kernel does only its loads and stores and no math. The
// shape is the reference TP4 rank (hidden 2560, 160 columns, 512 experts, top-10); gate_up weights
// are 320 x 2560 bytes an expert, down weights 2560 x 160. Every chain is timed as the bench times a
// forward: one CUDA graph an input set (8 sets of random expert ids, so L2 does not serve the
// weights), the sets replayed back to back behind a spin kernel, time per forward = batch / sets,
// median of the batches.
//   empty:  two empty one-CTA kernels, the second started early (the launch floor of two kernels);
//   stream: one kernel: read the ids, then stream every byte of the active experts (gate_up and
//           down), store one word a CTA (the bytes floor with one launch and the id round trip);
//   gate:   the gate_up skeleton alone: ids, x, the expert's bytes, h stored;
//   chain:  gate then the down skeleton, started early: ids and its weights requested before the
//           wait, then h, z stored, a counter per token and tile, the last CTA sums the token's z
//           rows into the output (the shipped r1 down's structure);
//   chain, no sum: the same down without the counter and the sum (z stored only);
//   chain, serialized: chain with the down not started early;
//   stream, 128-thread CTAs: stream with twice the CTAs, each half the bytes;
//   fused:  one kernel, gate_up and down CTAs in one grid; a down CTA spins on its pair's counter,
//           which the pair's gate_up CTAs count up with a release, instead of the grid wait;
//   signalled: the same counters between two kernels, down started early;
//   gate alone, 3 CTAs an SM: the gate_up skeleton held to the real M = 8 gate_up's occupancy;
//   gate alone, persistent: one CTA a slot looping over the items, the next item's id and weights
//           requested while it finishes this one (3 CTAs an SM, and as many as its registers allow).
// Build (nvcc for sm_90) and run on an sm_90 GPU:
//   nvcc -arch=sm_90 -O3 -o floor_probe bench/probes/floor_probe.cu && ./floor_probe
// (add -DFLOOR_PROBE_NO_FETCH for the loads a compute_70 kernel has: no L2 prefetch size).
// Figures: docs/notebook/2026-11.md, "Floor probe".
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

constexpr int kExperts = 512, kK = 2560, kCols = 160, kTopK = 10, kTiles = 20, kSets = 8, kPairsMax = 1280;
constexpr long long kGateBytes = 2LL * kCols * kK;  // 819200
constexpr long long kDownBytes = (long long)kK * kCols;  // 409600

// -DFLOOR_PROBE_NO_FETCH: the weight loads without their L2 prefetch size (as compute_70 code has them).
#ifdef FLOOR_PROBE_NO_FETCH
#define FLOOR_PROBE_LOAD "ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
#else
#define FLOOR_PROBE_LOAD "ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];"
#endif
__device__ __forceinline__ uint4 ld16(const unsigned char *p) {
  uint4 v;
  asm volatile(FLOOR_PROBE_LOAD
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ float bytes_sum(uint4 v) {
  unsigned s = (v.x & 0x00ff00ffu) + ((v.x >> 8) & 0x00ff00ffu) + (v.y & 0x00ff00ffu) + ((v.y >> 8) & 0x00ff00ffu) +
               (v.z & 0x00ff00ffu) + ((v.z >> 8) & 0x00ff00ffu) + (v.w & 0x00ff00ffu) + ((v.w >> 8) & 0x00ff00ffu);
  return (float)((s & 0xffffu) + (s >> 16));
}

__global__ void spin(long long ns) {
  long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > ns) break;
  }
}

__global__ void empty_first() { asm volatile("griddepcontrol.launch_dependents;"); }
__global__ void empty_second() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Pieces of the skeletons. A gate_up CTA tile (256 threads) is 40 KB of its pair's expert (16 rows);
// a down CTA tile (128 threads) is 20 KB (128 of 2560 rows).
__device__ __forceinline__ void load_gate_tile(const unsigned char *wg, int expert, int tile, int t, uint4 *raw) {
  const unsigned char *base = wg + (long long)expert * kGateBytes + (long long)tile * 40960;
#pragma unroll
  for (int i = 0; i < 10; ++i) raw[i] = ld16(base + (i * 256 + t) * 16);
}

__device__ __forceinline__ void load_down_tile(const unsigned char *wd, int expert, int tile, int t, uint4 *raw) {
  const unsigned char *base = wd + (long long)expert * kDownBytes + (long long)tile * 20480;
#pragma unroll
  for (int i = 0; i < 10; ++i) raw[i] = ld16(base + (i * 128 + t) * 16);
}

// A value that depends on x and every byte of raw.
template <int kCount>
__device__ __forceinline__ float gate_sum(const uint4 (&raw)[kCount], const __half *x, int pair, int t) {
  const uint4 xv = reinterpret_cast<const uint4 *>(x + (pair / kTopK) * kK)[t];
  float acc = __half2float(reinterpret_cast<const __half *>(&xv)[0]);
#pragma unroll
  for (int i = 0; i < kCount; ++i) acc += bytes_sum(raw[i]);
  return acc;
}

// Each warp's sum is one of the tile's 8 h values.
__device__ __forceinline__ void store_h(float acc, __half *h, int pair, int tile, int t) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((t & 31) == 0) h[pair * kCols + tile * 8 + (t >> 5)] = __float2half(acc * 1e-6f);
}

// After the CTA stored its h values: one count on its pair's flag, with release.
__device__ __forceinline__ void signal_pair(unsigned *flags, int pair, int t) {
  __syncthreads();
  if (t == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(flags + pair) : "memory");
}

// Thread 0 of a down CTA: spins (acquire) until the pair's 20 gate_up CTAs have counted; the pair's
// 20th down CTA past the spin sets the flag back to zero for the next forward.
__device__ __forceinline__ void wait_for_pair(unsigned *flags, int pair) {
  unsigned seen;
  do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(flags + pair) : "memory");
  while (seen < kTiles);
  if (atomicAdd(&flags[kPairsMax + pair], 1u) == kTiles - 1) {
    flags[kPairsMax + pair] = 0;
    flags[pair] = 0;
  }
}

// The barrier of a down tile's 128 threads (named: in `fused` they are half of the CTA).
__device__ __forceinline__ void down_barrier() { asm volatile("bar.sync 1, 128;" ::: "memory"); }

// A down tile after its wait: h, 128 z values stored; kSum: then the token's counter for this tile,
// and the last of the token's 10 pairs sums their z rows into the output.
template <bool kSum>
__device__ __forceinline__ void finish_down_tile(const uint4 (&raw)[10], const __half *h, float *z, unsigned *counters,
                                                 __half *out, int pair, int tile, int t) {
  __shared__ __align__(16) __half hs[kCols];
  __shared__ bool last;
  const int token = pair / kTopK;
  if (t < kCols / 8) reinterpret_cast<uint4 *>(hs)[t] = __ldcg(reinterpret_cast<const uint4 *>(h + pair * kCols) + t);
  down_barrier();
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < 10; ++i) acc += bytes_sum(raw[i]) * __half2float(hs[(i * 16 + t) % kCols]);
  const int column = tile * 128 + t;
  z[(long long)pair * kK + column] = acc;
  if (!kSum) return;
  __threadfence();
  down_barrier();
  if (t == 0) last = atomicAdd(&counters[token * kTiles + tile], 1u) % kTopK == kTopK - 1;
  down_barrier();
  if (!last) return;
  __threadfence();
  float sum = 0.f;
#pragma unroll
  for (int s = 0; s < kTopK; ++s) sum += __ldcg(z + (long long)(token * kTopK + s) * kK + column);
  out[token * kK + column] = __float2half(sum);
}

// grid (20 tiles, pairs), 256 threads: the gate_up skeleton (kSignal: it then counts its pair's flag).
template <bool kSignal = false>
__global__ void __launch_bounds__(256) gate(const unsigned char *wg, const int *ids, const __half *x, __half *h,
                                             unsigned *flags = nullptr) {
  asm volatile("griddepcontrol.launch_dependents;");
  const int tile = blockIdx.x, pair = blockIdx.y, t = threadIdx.x;
  uint4 raw[10];
  load_gate_tile(wg, ids[pair], tile, t, raw);
  store_h(gate_sum(raw, x, pair, t), h, pair, tile, t);
  if (kSignal) signal_pair(flags, pair, t);
}

// grid (20 tiles, pairs), 256 threads: all the bytes in one kernel. Each CTA reads a gate_up tile and
// a twentieth of the pair's down expert (20 KB) and sums both into its h values.
__global__ void __launch_bounds__(256) stream_all(const unsigned char *wg, const unsigned char *wd, const int *ids,
                                              const __half *x, __half *h) {
  const int tile = blockIdx.x, pair = blockIdx.y, t = threadIdx.x;
  const int expert = ids[pair];
  uint4 raw[15];
  load_gate_tile(wg, expert, tile, t, raw);
  const unsigned char *based = wd + (long long)expert * kDownBytes + (long long)tile * 20480;
#pragma unroll
  for (int i = 0; i < 5; ++i) raw[10 + i] = ld16(based + (i * 256 + t) * 16);
  store_h(gate_sum(raw, x, pair, t), h, pair, tile, t);
}

// grid (20 tiles, pairs), 128 threads: the down skeleton, started early. Its weights are requested
// before the wait (the grid wait, or with kSignal its pair's flag).
template <bool kSum, bool kSignal = false>
__global__ void __launch_bounds__(128) down(const unsigned char *wd, const int *ids, const __half *h, float *z,
                                             unsigned *counters, __half *out, unsigned *flags = nullptr) {
  const int tile = blockIdx.x, pair = blockIdx.y, t = threadIdx.x;
  uint4 raw[10];
  load_down_tile(wd, ids[pair], tile, t, raw);
  if (kSignal) {
    if (t == 0) wait_for_pair(flags, pair);
    down_barrier();
  } else {
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
  finish_down_tile<kSum>(raw, h, z, counters, out, pair, tile, t);
}

// One kernel for the whole chain: grid (20 tiles, pairs, 2); blockIdx.z 0 is a gate_up tile, which
// then counts its pair's flag; blockIdx.z 1 a down tile (its first 128 threads), which requests its
// weights, waits on the flag and goes on as down<true>.
__global__ void __launch_bounds__(256) fused(const unsigned char *wg, const unsigned char *wd, const int *ids,
                                             const __half *x, __half *h, float *z, unsigned *counters,
                                             unsigned *flags, __half *out) {
  const int tile = blockIdx.x, pair = blockIdx.y, t = threadIdx.x;
  const int expert = ids[pair];
  uint4 raw[10];
  if (blockIdx.z == 0) {
    load_gate_tile(wg, expert, tile, t, raw);
    store_h(gate_sum(raw, x, pair, t), h, pair, tile, t);
    signal_pair(flags, pair, t);
    return;
  }
  if (t >= 128) return;
  load_down_tile(wd, expert, tile, t, raw);
  if (t == 0) wait_for_pair(flags, pair);
  down_barrier();
  finish_down_tile<true>(raw, h, z, counters, out, pair, tile, t);
}

// The stream with smaller CTAs: grid (40, pairs), 128 threads, each 20 KB of gate_up and 10 KB of down.
__global__ void __launch_bounds__(128) stream_small(const unsigned char *wg, const unsigned char *wd, const int *ids,
                                                    unsigned *sink) {
  const int tile = blockIdx.x, pair = blockIdx.y, t = threadIdx.x;
  const int expert = ids[pair];
  const unsigned char *base = wg + (long long)expert * kGateBytes + (long long)tile * 20480;
  const unsigned char *based = wd + (long long)expert * kDownBytes + (long long)tile * 10240;
  uint4 raw[15];
#pragma unroll
  for (int i = 0; i < 10; ++i) raw[i] = ld16(base + (i * 128 + t) * 16);
#pragma unroll
  for (int i = 0; i < 5; ++i) raw[10 + i] = ld16(based + (i * 128 + t) * 16);
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < 15; ++i) acc += bytes_sum(raw[i]);
  if (acc == 1.5f) sink[pair] = 1;
}

// The gate_up skeleton held to a few CTAs an SM by dynamic shared memory (the real M = 8 gate_up's
// 80 registers hold it to 3). kPersistent: grid = SMs x CTAs an SM, each CTA takes the items (column
// tile, pair) blockIdx.x, blockIdx.x + gridDim.x, ...; it reads the next item's id while it sums this
// one, and requests the next item's weights before this item's warp sums and h store.
template <bool kPersistent>
__global__ void __launch_bounds__(256) gate_slots(const unsigned char *wg, const int *ids, const __half *x, __half *h,
                                                  int items) {
  const int t = threadIdx.x;
  int item = kPersistent ? (int)blockIdx.x : (int)(blockIdx.y * kTiles + blockIdx.x);
  if (item >= items) return;
  uint4 raw[10];
  load_gate_tile(wg, ids[item / kTiles], item % kTiles, t, raw);
  for (;;) {
    const int next = kPersistent ? item + (int)gridDim.x : items;
    const int next_expert = next < items ? ids[next / kTiles] : 0;
    const int pair = item / kTiles, tile = item % kTiles;
    const float acc = gate_sum(raw, x, pair, t);
    if (next < items) load_gate_tile(wg, next_expert, next % kTiles, t, raw);
    store_h(acc, h, pair, tile, t);
    if (next >= items) break;
    item = next;
  }
}

struct Buffers {
  unsigned char *wg, *wd;
  int *ids;
  __half *x, *h, *out;
  float *z;
  unsigned *counters, *flags;
};

static void launch_early(const void *kernel, dim3 grid, dim3 block, void **args, cudaStream_t stream, bool early) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = stream;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = early ? 1 : 0;
  config.attrs = &attribute;
  config.numAttrs = 1;
  cudaLaunchKernelExC(&config, kernel, args);
}

enum Chain { kEmpty, kStream, kStreamSmall, kGate, kChain, kChainNoSum, kChainSerial, kFused, kSignalled, kGateSlots3, kGatePersistent3,
             kGatePersistentFit, kChains };
static const char *kNames[kChains] = {"empty (2 kernels, early)", "stream (1 kernel, all bytes)",
                                      "stream, 128-thread CTAs", "gate alone", "chain (gate, down early)",
                                      "chain, no sum", "chain, serialized", "fused (1 kernel, flags)",
                                      "signalled (2 kernels, early, flags)", "gate alone, 3 CTAs an SM",
                                      "gate alone, persistent, 3 CTAs an SM", "gate alone, persistent, CTAs that fit"};
static int g_sms = 132, g_fit = 1;  // SMs; persistent gate_slots CTAs that fit on an SM without the padding
constexpr int kSlotsSharedBytes = 72 * 1024;  // 3 CTAs an SM on sm_90 (228 KB of shared memory)

static void enqueue(Chain chain, const Buffers &b, int set, int m, cudaStream_t stream) {
  const int pairs = m * kTopK;
  const int *ids = b.ids + set * 128 * kTopK;
  const __half *x = b.x + (long long)set * 128 * kK;
  __half *out = b.out + (long long)set * 128 * kK;
  const dim3 grid(kTiles, pairs);
  if (chain == kEmpty) {
    empty_first<<<1, 32, 0, stream>>>();
    launch_early((const void *)empty_second, dim3(1), dim3(32), nullptr, stream, true);
    return;
  }
  if (chain == kStream) {
    stream_all<<<grid, 256, 0, stream>>>(b.wg, b.wd, ids, x, b.h);
    return;
  }
  if (chain == kStreamSmall) {
    stream_small<<<dim3(2 * kTiles, pairs), 128, 0, stream>>>(b.wg, b.wd, ids, b.counters + 128 * kTiles);
    return;
  }
  if (chain == kFused) {
    fused<<<dim3(kTiles, pairs, 2), 256, 0, stream>>>(b.wg, b.wd, ids, x, b.h, b.z, b.counters, b.flags, out);
    return;
  }
  if (chain == kGateSlots3 || chain == kGatePersistent3 || chain == kGatePersistentFit) {
    const int items = pairs * kTiles;
    const int slots = chain == kGatePersistentFit ? g_fit : 3;
    const size_t shared = chain == kGatePersistentFit ? 0 : kSlotsSharedBytes;
    if (chain == kGateSlots3)
      gate_slots<false><<<grid, 256, shared, stream>>>(b.wg, ids, x, b.h, items);
    else
      gate_slots<true><<<std::min(items, g_sms * slots), 256, shared, stream>>>(b.wg, ids, x, b.h, items);
    return;
  }
  if (chain == kSignalled)
    gate<true><<<grid, 256, 0, stream>>>(b.wg, ids, x, b.h, b.flags);
  else
    gate<><<<grid, 256, 0, stream>>>(b.wg, ids, x, b.h);
  if (chain == kGate) return;
  void *args[] = {(void *)&b.wd, (void *)&ids, (void *)&b.h, (void *)&b.z, (void *)&b.counters, (void *)&out, (void *)&b.flags};
  const void *kernel = chain == kChainNoSum  ? (const void *)down<false>
                       : chain == kSignalled ? (const void *)down<true, true>
                                             : (const void *)down<true>;
  launch_early(kernel, grid, dim3(128), args, stream, chain != kChainSerial);
}

#define CHECK(call)                                                                  \
  do {                                                                               \
    const cudaError_t error = (call);                                                \
    if (error != cudaSuccess) {                                                      \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(error)); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  CHECK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaFuncSetAttribute(gate_slots<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSlotsSharedBytes));
  CHECK(cudaFuncSetAttribute(gate_slots<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSlotsSharedBytes));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&g_fit, gate_slots<true>, 256, 0));
  int fit3 = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit3, gate_slots<true>, 256, kSlotsSharedBytes));
  printf("%d SMs; persistent gate: %d CTAs an SM fit, %d with the padding\n", g_sms, g_fit, fit3);
  Buffers b;
  cudaMalloc(&b.wg, (size_t)kExperts * kGateBytes);
  cudaMalloc(&b.wd, (size_t)kExperts * kDownBytes);
  cudaMemset(b.wg, 0x31, (size_t)kExperts * kGateBytes);
  cudaMemset(b.wd, 0x2c, (size_t)kExperts * kDownBytes);
  cudaMalloc(&b.ids, sizeof(int) * kSets * 128 * kTopK);
  cudaMalloc(&b.x, sizeof(__half) * kSets * 128 * kK);
  cudaMalloc(&b.out, sizeof(__half) * kSets * 128 * kK);
  cudaMalloc(&b.h, sizeof(__half) * 128 * kTopK * kCols);
  cudaMalloc(&b.z, sizeof(float) * 128 * kTopK * kK);
  cudaMalloc(&b.counters, sizeof(unsigned) * 2 * 128 * kTiles);  // the down's, then stream_small's sink
  cudaMalloc(&b.flags, sizeof(unsigned) * 2 * kPairsMax);
  cudaMemset(b.flags, 0, sizeof(unsigned) * 2 * kPairsMax);
  cudaMemset(b.x, 0, sizeof(__half) * kSets * 128 * kK);
  cudaMemset(b.counters, 0, sizeof(unsigned) * 2 * 128 * kTiles);
  std::vector<int> host(kSets * 128 * kTopK);
  srand(1);
  for (int token = 0; token < kSets * 128; ++token)  // top-10 distinct experts a token
    for (int s = 0; s < kTopK; ++s) {
      int e;
      bool again;
      do {
        e = rand() % kExperts;
        again = false;
        for (int q = 0; q < s; ++q) again |= host[token * kTopK + q] == e;
      } while (again);
      host[token * kTopK + s] = e;
    }
  cudaMemcpy(b.ids, host.data(), host.size() * sizeof(int), cudaMemcpyHostToDevice);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaEvent_t events[41];
  for (auto &e : events) cudaEventCreate(&e);
  const int ms[] = {1, 2, 8};
  for (int round = 0; round < 2; ++round)
    for (int m : ms) {
      const int pairs = m * kTopK;
      double bytes = 0;  // distinct experts' bytes, averaged over the sets
      for (int set = 0; set < kSets; ++set) {
        std::vector<int> e(host.begin() + set * 128 * kTopK, host.begin() + set * 128 * kTopK + pairs);
        std::sort(e.begin(), e.end());
        bytes += (double)(std::unique(e.begin(), e.end()) - e.begin()) * (kGateBytes + kDownBytes) / kSets;
      }
      for (int c = 0; c < kChains; ++c) {
        cudaGraphExec_t execs[kSets];
        for (int set = 0; set < kSets; ++set) {
          cudaGraph_t graph;
          CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
          enqueue((Chain)c, b, set, m, stream);
          CHECK(cudaStreamEndCapture(stream, &graph));
          CHECK(cudaGraphInstantiate(&execs[set], graph, 0));
          cudaGraphDestroy(graph);
        }
        for (int w = 0; w < 4; ++w)
          for (int set = 0; set < kSets; ++set) cudaGraphLaunch(execs[set], stream);
        CHECK(cudaStreamSynchronize(stream));
        const int passes = 40;
        spin<<<1, 1, 0, stream>>>(20000000LL);  // 20 ms: the host queues every pass behind it
        cudaEventRecord(events[0], stream);
        for (int p = 0; p < passes; ++p) {
          for (int set = 0; set < kSets; ++set) cudaGraphLaunch(execs[set], stream);
          cudaEventRecord(events[p + 1], stream);
        }
        CHECK(cudaStreamSynchronize(stream));
        std::vector<float> times;
        for (int p = 0; p < passes; ++p) {
          float milliseconds;
          cudaEventElapsedTime(&milliseconds, events[p], events[p + 1]);
          times.push_back(milliseconds * 1e3f / kSets);
        }
        std::sort(times.begin(), times.end());
        printf("round %d M=%-3d %-30s median %7.2f us  p10 %7.2f  p90 %7.2f  (active experts' bytes %.1f MB)\n", round, m,
               kNames[c], times[passes / 2], times[passes / 10], times[passes * 9 / 10], bytes / 1e6);
        for (int set = 0; set < kSets; ++set) cudaGraphExecDestroy(execs[set]);
      }
    }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
