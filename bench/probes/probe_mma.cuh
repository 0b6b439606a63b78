// Tensor-core and copy instructions the sm_80+ probes share (bench/probes/mma_peak.cu and
// moe_tile_probe.cu; not part of the library). nvcc only; the compute_70 kernels of the mma peak
// probe are in mma_peak_sm70.cuh, which has no includes so NVRTC compiles it alone.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define PROBE_CHECK(call)                                                              \
  do {                                                                                 \
    const cudaError_t probe_error = (call);                                            \
    if (probe_error != cudaSuccess) {                                                  \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(probe_error)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

__device__ __forceinline__ unsigned smem_addr(const void *p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// d += a * b: 16x16 FP16 A (row), 16x8 FP16 B (col), FP32 accumulators; 2 * 16 * 8 * 16 FLOPs a warp.
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8x8 FP16 matrices from shared memory: lanes 8i..8i+7 give the row addresses of matrix i.
// volatile: the loads must stay in the loop that issues them (the probes read the same tile again).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// 16 bytes global -> shared, bypassing L1; bytes < 16 zero-fills the rest (0: all zero, no read).
__device__ __forceinline__ void cp_async16(unsigned dst, const void *src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// Thread 0 of CTA 0 records the SM clock and the global timer at its start and end, so the probe can
// tell the clock the kernel ran at.
__device__ __forceinline__ void clock_mark(long long *clk, int at) {
  if (clk && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    clk[at] = clock64();
    clk[at + 1] = ns;
  }
}
