// The mma.sync.m8n8k4 kernels of the mma peak probe (bench/probes/mma_peak.cu; not part of the
// library). No includes: NVRTC 12 compiles this file alone to compute_70 PTX (scripts/gpu_check.sh
// prepare, through bench/probes/nvrtc_ptx.py), which the probe hands the driver to compile for the
// GPU it runs on, as the library's compute_70 kernels are run on newer GPUs; nvcc also builds the
// same kernels into the probe as native code, for comparison.
//
// A warp's m8n8k4 is four 8x8x4 products, one per quad pair (lanes 0-3 with 16-19, 4-7 with 20-23,
// ...), so one warp instruction is 4 * 2 * 8 * 8 * 4 = 2048 FLOPs.
//   m884_regN:     N independent accumulators (8 FP32 each), operands in registers;
//   m884_smem_MxN: each k step every lane loads M A fragments and N B fragments (8 bytes each, as a
//                  V100 tile without ldmatrix loads them from shared memory) and issues M * N
//                  products over them.
// Every kernel: 256 threads; in[128] operand words; out one float a thread; clk[4] thread 0 of CTA
// 0's clock and global timer at its start and end.

__device__ __forceinline__ void m884(float (&d)[8], unsigned a0, unsigned a1, unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, {%10,%11}, "
      "{%0,%1,%2,%3,%4,%5,%6,%7};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a0), "r"(a1), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void m884_clock(long long *clk, int at) {
  if (clk && blockIdx.x == 0 && threadIdx.x == 0) {
    long long cycles, ns;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(cycles));
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    clk[at] = cycles;
    clk[at + 1] = ns;
  }
}

template <int kAcc>
__device__ __forceinline__ void m884_reg_body(const unsigned *in, float *out, int iters, long long *clk) {
  m884_clock(clk, 0);
  const int lane = threadIdx.x & 31;
  const unsigned a0 = in[lane], a1 = in[32 + lane], b0 = in[64 + lane], b1 = in[96 + lane];
  float acc[kAcc][8];
#pragma unroll
  for (int j = 0; j < kAcc; ++j)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[j][e] = 0.f;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < kAcc; ++j) m884(acc[j], a0, a1, (j & 1) ? b1 : b0, (j & 1) ? b0 : b1);
  }
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < kAcc; ++j)
#pragma unroll
    for (int e = 0; e < 8; ++e) sum += acc[j][e];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
  m884_clock(clk, 2);
}

// Shared tiles of 128 rows x 64 FP16 k values, rows 136 bytes apart: the 8-byte fragment loads of a
// warp's 32 lanes (32 different rows) then fall on every bank twice, the least a 256-byte load can.
constexpr int kM884Rows = 128, kM884K = 64, kM884Stride = 68;  // in FP16 values

__device__ __forceinline__ void m884_lds(unsigned &r0, unsigned &r1, unsigned address) {
  asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(address));
}

template <int kMa, int kNb>
__device__ __forceinline__ void m884_smem_body(const unsigned *in, float *out, int iters, long long *clk) {
  __shared__ __align__(16) unsigned short tile_a[kM884Rows * kM884Stride], tile_b[kM884Rows * kM884Stride];
  m884_clock(clk, 0);
  for (int i = threadIdx.x; i < kM884Rows * kM884Stride; i += blockDim.x) {
    tile_a[i] = (unsigned short)(in[i & 127] >> 16);
    tile_b[i] = (unsigned short)in[(i + 64) & 127];
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  unsigned base_a, base_b;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(base_a) : "l"(tile_a));
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(base_b) : "l"(tile_b));
  float acc[kMa][kNb][8];
#pragma unroll
  for (int i = 0; i < kMa; ++i)
#pragma unroll
    for (int j = 0; j < kNb; ++j)
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[i][j][e] = 0.f;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int k = 0; k < kM884K; k += 4) {
      unsigned a[kMa][2], b[kNb][2];
#pragma unroll
      for (int i = 0; i < kMa; ++i)
        m884_lds(a[i][0], a[i][1], base_a + (((lane + 32 * i) & (kM884Rows - 1)) * kM884Stride + k) * 2);
#pragma unroll
      for (int j = 0; j < kNb; ++j)
        m884_lds(b[j][0], b[j][1], base_b + (((lane + 32 * j) & (kM884Rows - 1)) * kM884Stride + k) * 2);
#pragma unroll
      for (int i = 0; i < kMa; ++i)
#pragma unroll
        for (int j = 0; j < kNb; ++j) m884(acc[i][j], a[i][0], a[i][1], b[j][0], b[j][1]);
    }
  }
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kMa; ++i)
#pragma unroll
    for (int j = 0; j < kNb; ++j)
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += acc[i][j][e];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
  m884_clock(clk, 2);
}

#define M884_REG(N)                                                                                    \
  extern "C" __global__ void __launch_bounds__(256) m884_reg##N(const unsigned *in, float *out, int iters, \
                                                                long long *clk) {                      \
    m884_reg_body<N>(in, out, iters, clk);                                                             \
  }
M884_REG(2)
M884_REG(4)
M884_REG(8)
#undef M884_REG

#define M884_SMEM(M, N)                                                                                   \
  extern "C" __global__ void __launch_bounds__(256) m884_smem_##M##x##N(const unsigned *in, float *out,     \
                                                                        int iters, long long *clk) {       \
    m884_smem_body<M, N>(in, out, iters, clk);                                                            \
  }
M884_SMEM(2, 2)
M884_SMEM(4, 4)
#undef M884_SMEM
