// MoE tile probe (not part of the library or its build): a prototype of issue 36's compute-bound
// path for sm_80 and later, timed as a grouped GEMM over every expert of a rank.
//
// The layout is the library's (runtime/moe/kernels/moe_layout.h): E4M3 weights w13[E][2I][H] (gate_up, N =
// 2I, K = H) and w2[E][H][I] (down, N = H, K = I), one FP16 scale (scale * 2^8) per 128 x 128 block
// of the model's grid, the rank's I columns starting `off` into it. Routed pairs p = t * top_k + j.
//   route:  sorts the pairs by expert and pads each expert's run to a multiple of BM (three kernels:
//           count, one CTA that scans and writes the tile list and the pad slots, scatter); each slot
//           holds its source row (gate_up: the token's x row; down: the pair's h row) or -1;
//   gemm:   one CTA per (128 output columns, BM slots of one expert), 256 threads, 8 warps as 2 x 4:
//           per 128-wide K step, X (BM x 128 FP16, gathered through the slots' source rows) and the
//           weights' bytes (128 x 128 E4M3) come in with cp.async, three stages, issued two K steps
//           ahead of the products; while the warps do the products of step k (ldmatrix + mma.sync
//           m16n8k16, FP32 accumulators, warp tile 64 x 32 at BM = 128, 32 x 32 at BM = 64), they also
//           turn step k+1's bytes into FP16 in shared memory with their scale applied (two FP16
//           tiles: one read by the products, one being written). Y[slot] = X[slot] . W[e]^T, FP16.
// Where the scale is applied: to each weight as it is converted (FP16 product of the bit-level
// conversion sign | (code & 0x7F) << 7 and the FP16 scale, which holds scale * 2^8). A CTA's 128
// rows need not lie on the scale grid (the TP4 rank's rows start 32 into a block), and each 16-code
// chunk a thread converts looks its own scale up, so any tile position is right with one FP16 multiply
// a weight pair, paid once a CTA and shared by its BM rows; scaling the FP32 partials per K block
// instead would need grid-aligned tiles and a second set of accumulators. The product is rounded to
// FP16 (relative error 2^-11, what an FP16 copy of the weights has too).
//
// Checked against a double-precision reference on sampled pairs (the output poisoned with 0xFFFF
// first; pad slots must stay poisoned); the route's slots and tiles are checked against a host
// count. Timed with cold weights (a 256 MiB memset between runs evicts L2), CUDA events, median of 5.
// Baseline: cuBLAS cublasGemmGroupedBatchedEx (FP16, FP32 compute) on the same experts dequantized to
// FP16 and the same rows gathered beforehand (its gather untimed), one group per expert with pairs.
//
// Build (sm_90; any sm_80+ arch works) and run:
//   nvcc -arch=sm_90 -O3 -o moe_tile_probe bench/probes/moe_tile_probe.cu
//   ./moe_tile_probe [--peak TFLOPS] [--m 512,2048,8192,16384] [--no-baseline]
// --peak: the m16n8k16 peak of bench/probes/mma_peak.cu (its last line), for the share of peak.
// (-DTILE_PROBE_FP8_CVT, sm_89 and later: the conversion by cvt.rn.f16x2.e4m3x2, below.)
// Exit 1 when a check fails.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <dlfcn.h>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <cublas_v2.h>
#include <cuda_fp16.h>

#include "probe_mma.cuh"

constexpr int kThreads = 256, kBN = 128, kBK = 128, kStages = 3;
constexpr int kStride = kBK + 8;  // FP16 values a shared row: 272 bytes, so ldmatrix rows fall on different banks

// ---------------------------------------------------------------------------------------------
// Data: every value from a hash of its index, so the host recomputes any weight without a copy.
__host__ __device__ inline uint32_t mix(uint32_t seed, uint64_t index) {
  uint32_t h = (uint32_t)index * 0x9E3779B1u ^ (uint32_t)(index >> 32) * 0x85EBCA6Bu ^ seed;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  h *= 0x297A2D39u;
  h ^= h >> 15;
  return h;
}
// Any E4M3 code but the NaNs (0x7F, 0xFF).
__host__ __device__ inline unsigned char weight_code(uint32_t seed, uint64_t index) {
  unsigned char code = (unsigned char)mix(seed, index);
  return (code & 0x7F) == 0x7F ? code ^ 1 : code;
}
// FP16 bits of scale * 2^8 in [2^-6, 2^-5).
__host__ __device__ inline unsigned short scale_bits(uint32_t seed, uint64_t index) {
  return (unsigned short)(0x2400u | (mix(seed, index) & 0x3FFu));
}

__global__ void fill_codes(unsigned char *w, uint64_t n, uint32_t seed) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
    w[i] = weight_code(seed, i);
}
__global__ void fill_scales(unsigned short *s, uint64_t n, uint32_t seed) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
    s[i] = scale_bits(seed, i);
}
// Activations uniform in [-1, 1).
__global__ void fill_activations(__half *x, uint64_t n, uint32_t seed) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
    x[i] = __float2half_rn((float)(mix(seed, i) >> 8) * (2.0f / 16777216.0f) - 1.0f);
}

// Where the scale of weight (n, k) of an expert lies (moe_layout.h): gate_up rows n < I are gate
// rows, the rest up rows (split = I); down has no split (split = N).
struct ScaleMap {
  int split, row_off, k_off, row_stride, half_stride;
  long long expert_stride;
  __host__ __device__ long long index(int e, int n, int k) const {
    const int half = n >= split, r = n - half * split;
    return e * expert_stride + half * half_stride + ((row_off + r) / 128) * row_stride + (k_off + k) / 128;
  }
};

// Two E4M3 codes (bytes 0-1 of `word`, or with `high` bytes 2-3) as an FP16 pair. The bit-level
// conversion (any arch; the library's on sm_80..sm_88) gives code * 2^-8: each code's byte moved to
// the top of its half, sign kept, the rest shifted down by one. Built with -DTILE_PROBE_FP8_CVT
// (sm_89 and later) one cvt.rn.f16x2.e4m3x2 gives the code's value and the staged scale carries the
// 2^-8 instead (load_scales); the FP16 products are the same.
__device__ __forceinline__ __half2 codes_to_half2(unsigned word, bool high) {
  unsigned bits;
#ifdef TILE_PROBE_FP8_CVT
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(bits) : "h"((unsigned short)(high ? word >> 16 : word & 0xFFFFu)));
#else
  const unsigned t = __byte_perm(word, 0, high ? 0x3424 : 0x1404);
  bits = (t & 0x80008000u) | ((t >> 1) & 0x3F803F80u);
#endif
  __half2 pair;
  memcpy(&pair, &bits, 4);
  return pair;
}

// The FP16 copy cuBLAS uses: the same conversion and the same FP16 product as the tile's.
__global__ void dequantize_all(const unsigned char *w, const unsigned short *scales, ScaleMap map, int N, int K,
                               uint64_t total, __half *out) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < total; i += (uint64_t)gridDim.x * blockDim.x) {
    const int k = (int)(i % K), n = (int)(i / K % N), e = (int)(i / ((uint64_t)K * N));
    const unsigned code = w[i];
    const __half value = __ushort_as_half((unsigned short)((code & 0x80u) << 8 | (code & 0x7Fu) << 7));
    out[i] = __hmul(value, __ushort_as_half(scales[map.index(e, n, k)]));
  }
}

// ---------------------------------------------------------------------------------------------
// Route: pairs sorted by expert, each expert's run padded to a multiple of bm.
struct Tile {
  int expert, first_slot, rows, pad;
};

__global__ void route_count(const int *ids, int pairs, int experts, int *counts) {
  extern __shared__ int histogram[];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) histogram[e] = 0;
  __syncthreads();
  for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < pairs; p += gridDim.x * blockDim.x)
    atomicAdd(&histogram[ids[p]], 1);
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x)
    if (histogram[e]) atomicAdd(&counts[e], histogram[e]);
}

// One CTA of 1024 threads (experts <= 1024): exclusive scans of the padded runs and of the tiles.
__global__ void __launch_bounds__(1024) route_scan(const int *counts, int experts, int bm, int *starts, int *cursor,
                                                   Tile *tiles, int *num_tiles, int *rows, int *slot_pair) {
  __shared__ int slots[1024], tile_counts[1024];
  const int e = threadIdx.x;
  const int count = e < experts ? counts[e] : 0, n_tiles = (count + bm - 1) / bm;
  slots[e] = n_tiles * bm;
  tile_counts[e] = n_tiles;
  __syncthreads();
  for (int step = 1; step < 1024; step <<= 1) {
    const int a = e >= step ? slots[e - step] : 0, b = e >= step ? tile_counts[e - step] : 0;
    __syncthreads();
    slots[e] += a;
    tile_counts[e] += b;
    __syncthreads();
  }
  if (e >= experts) return;
  const int start = slots[e] - n_tiles * bm, first_tile = tile_counts[e] - n_tiles;
  starts[e] = start;
  cursor[e] = 0;
  for (int t = 0; t < n_tiles; ++t) tiles[first_tile + t] = Tile{e, start + t * bm, min(bm, count - t * bm), 0};
  for (int s = start + count; s < start + n_tiles * bm; ++s) rows[s] = slot_pair[s] = -1;
  if (e == experts - 1) *num_tiles = tile_counts[e];
}

__global__ void route_scatter(const int *ids, int pairs, int row_div, const int *starts, int *cursor, int *rows,
                              int *slot_pair) {
  for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < pairs; p += gridDim.x * blockDim.x) {
    const int e = ids[p], s = starts[e] + atomicAdd(&cursor[e], 1);
    rows[s] = p / row_div;
    slot_pair[s] = p;
  }
}

// ---------------------------------------------------------------------------------------------
// The tile.
struct GemmArgs {
  const __half *src;  // source rows, K FP16 values each
  const int *rows;    // per slot: its source row, -1 for a pad slot
  const Tile *tiles;
  const int *num_tiles;
  const unsigned char *w;  // [E][N][K] E4M3
  const unsigned short *scales;
  ScaleMap map;
  __half *y;  // [slots][N]
  int N, K;
};

template <int kBM>
struct TileShape {
  static constexpr int kWarpM = kBM / 2, kWarpN = kBN / 4;  // 2 x 4 warps
  static constexpr int kMi = kWarpM / 16, kNi = kWarpN / 8;
  static constexpr int kXChunks = kBM * kBK / 8 / kThreads;  // 16-byte X chunks a thread a stage
  static constexpr int kXBytes = kBM * kStride * 2, kRawBytes = kBN * kBK, kHalfBytes = kBN * kStride * 2;
  static constexpr int kSharedBytes = kStages * (kXBytes + kRawBytes) + 2 * kHalfBytes;
};

template <int kBM>
__global__ void __launch_bounds__(kThreads, 1) moe_tile_gemm(GemmArgs a) {
  using S = TileShape<kBM>;
  extern __shared__ __align__(16) unsigned char shared[];
  const int tile_index = blockIdx.y;
  if (tile_index >= *a.num_tiles) return;
  const Tile tile = a.tiles[tile_index];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 2, wn = warp & 3;
  const int n0 = blockIdx.x * kBN, k_steps = (a.K + kBK - 1) / kBK;
  const unsigned x_base = smem_addr(shared), raw_base = x_base + kStages * S::kXBytes,
                 half_base = raw_base + kStages * S::kRawBytes;
  unsigned char *raw_ptr = shared + kStages * S::kXBytes;
  unsigned char *half_ptr = raw_ptr + kStages * S::kRawBytes;

  // This thread's X chunks: rows tid / 16 + 16 i, 16-byte column tid % 16. Its weight chunks (loads
  // and conversion): rows tid / 8 + 32 i, 16-code column tid % 8.
  int src_row[S::kXChunks];
#pragma unroll
  for (int i = 0; i < S::kXChunks; ++i) src_row[i] = a.rows[tile.first_slot + tid / 16 + 16 * i];
  const long long w_expert = (long long)tile.expert * a.N * a.K;

  auto load_stage = [&](int step, int buffer) {
    const int k0 = step * kBK;
#pragma unroll
    for (int i = 0; i < S::kXChunks; ++i) {
      const int r = tid / 16 + 16 * i, k = k0 + (tid % 16) * 8;
      const bool ok = src_row[i] >= 0 && k < a.K;
      cp_async16(x_base + buffer * S::kXBytes + (r * kStride + (tid % 16) * 8) * 2,
                 ok ? a.src + (long long)src_row[i] * a.K + k : a.src, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = tid / 8 + 32 * i, n = n0 + r, k = k0 + (tid % 8) * 16;
      const bool ok = n < a.N && k < a.K;
      cp_async16(raw_base + buffer * S::kRawBytes + r * kBK + (tid % 8) * 16,
                 ok ? a.w + w_expert + (long long)n * a.K + k : a.w, ok ? 16 : 0);
    }
  };
  auto load_scales = [&](int step, unsigned (&scale)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int n = n0 + tid / 8 + 32 * i, k = step * kBK + (tid % 8) * 16;
      unsigned short bits = n < a.N && k < a.K ? __ldg(a.scales + a.map.index(tile.expert, n, k)) : 0;
#ifdef TILE_PROBE_FP8_CVT
      bits = __half_as_ushort(__hmul(__ushort_as_half(bits), __float2half(1.0f / 256.0f)));  // exact while normal
#endif
      scale[i] = bits | (unsigned)bits << 16;
    }
  };
  // Chunk i of the bytes in `buffer` to FP16 in half tile `half`: 16 codes, 2 x 16 bytes stored, the
  // two stores in the order that puts a quarter warp's eight on different banks.
  auto convert_chunk = [&](int buffer, int half, int i, unsigned scale) {
    const int r = tid / 8 + 32 * i, c = tid % 8;
    const uint4 codes = *reinterpret_cast<const uint4 *>(raw_ptr + buffer * S::kRawBytes + r * kBK + c * 16);
    __half2 s;
    memcpy(&s, &scale, 4);
    unsigned out[8];
    const unsigned words[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const __half2 lo = __hmul2(codes_to_half2(words[j], false), s), hi = __hmul2(codes_to_half2(words[j], true), s);
      memcpy(&out[2 * j], &lo, 4);
      memcpy(&out[2 * j + 1], &hi, 4);
    }
    uint4 *dst = reinterpret_cast<uint4 *>(half_ptr + half * S::kHalfBytes + (r * kStride + c * 16) * 2);
    const int first = (c >> 2) & 1;
    dst[first] = first ? make_uint4(out[4], out[5], out[6], out[7]) : make_uint4(out[0], out[1], out[2], out[3]);
    dst[first ^ 1] = first ? make_uint4(out[0], out[1], out[2], out[3]) : make_uint4(out[4], out[5], out[6], out[7]);
  };

  // ldmatrix row addresses (as in mma_peak.cu): A from X rows, B from the FP16 weight rows ([n][k]).
  const unsigned a_offset = ((wm * S::kWarpM + (lane & 15)) * kStride + (lane >> 4) * 8) * 2;
  const unsigned b_offset = ((wn * S::kWarpN + (lane >> 4) * 8 + (lane & 7)) * kStride + ((lane >> 3) & 1) * 8) * 2;

  float acc[S::kMi][S::kNi][4] = {};
  unsigned scale_now[4] = {}, scale_next[4] = {};

  // Prologue: steps 0 and 1 requested; step 0 converted.
  load_stage(0, 0);
  cp_async_commit();
  if (k_steps > 1) load_stage(1, 1);
  cp_async_commit();
  load_scales(0, scale_now);
  cp_async_wait<1>();
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 4; ++i) convert_chunk(0, 0, i, scale_now[i]);
  if (k_steps > 1) load_scales(1, scale_now);

  for (int step = 0; step < k_steps; ++step) {
    // Step + 1's bytes are in; every warp is done with step - 1 (its X and raw buffers, and the
    // half tile step + 1 converts into).
    cp_async_wait<0>();
    __syncthreads();
    if (step + 2 < k_steps) load_stage(step + 2, (step + 2) % kStages);
    cp_async_commit();
    const bool convert = step + 1 < k_steps;
    if (step + 2 < k_steps) load_scales(step + 2, scale_next);
    const unsigned x_stage = x_base + (step % kStages) * S::kXBytes + a_offset;
    const unsigned w_half = half_base + (step & 1) * S::kHalfBytes + b_offset;
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      unsigned af[S::kMi][4], bf[S::kNi][2];
#pragma unroll
      for (int i = 0; i < S::kMi; ++i) ldmatrix_x4(af[i], x_stage + (i * 16 * kStride + ks * 16) * 2);
#pragma unroll
      for (int j = 0; j < S::kNi; j += 2) {
        unsigned r[4];
        ldmatrix_x4(r, w_half + (j * 8 * kStride + ks * 16) * 2);
        bf[j][0] = r[0], bf[j][1] = r[1], bf[j + 1][0] = r[2], bf[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < S::kMi; ++i)
#pragma unroll
        for (int j = 0; j < S::kNi; ++j) mma16816(acc[i][j], af[i], bf[j]);
      if (convert && (ks & 1)) convert_chunk((step + 1) % kStages, (step + 1) & 1, ks >> 1, scale_now[ks >> 1]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) scale_now[i] = scale_next[i];
  }

  // FP16 out: a thread's fragment values are rows g and g + 8, columns 2 t and 2 t + 1.
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int i = 0; i < S::kMi; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wm * S::kWarpM + i * 16 + g + half * 8;
      if (r >= tile.rows) continue;
      __half *out_row = a.y + (long long)(tile.first_slot + r) * a.N;
#pragma unroll
      for (int j = 0; j < S::kNi; ++j) {
        const int n = n0 + wn * S::kWarpN + j * 8 + 2 * t4;
        if (n < a.N)
          *reinterpret_cast<__half2 *>(out_row + n) = __floats2half2_rn(acc[i][j][2 * half], acc[i][j][2 * half + 1]);
      }
    }
}

// The rows cuBLAS multiplies: each slot's source row, zeros for pad slots.
__global__ void gather_rows(const __half *src, const int *rows, int slots, int K, __half *out) {
  const int slot = blockIdx.x;
  if (slot >= slots) return;
  const int row = rows[slot];
  for (int k = threadIdx.x; k < K; k += blockDim.x)
    out[(long long)slot * K + k] = row >= 0 ? src[(long long)row * K + k] : __float2half(0.f);
}

// ---------------------------------------------------------------------------------------------
// cuBLAS, opened at run time (as the bench does) so the probe runs where it is missing.
struct Blas {
  void *library = nullptr;
  cublasHandle_t handle = nullptr;
  __typeof__(cublasCreate_v2) *create = nullptr;
  __typeof__(cublasGemmGroupedBatchedEx) *grouped = nullptr;
  std::string why;
};

static Blas open_blas() {
  Blas blas;
  const char *names[] = {"libcublas.so.13", "libcublas.so.12", "/usr/local/cuda/lib64/libcublas.so.13",
                         "/usr/local/cuda/lib64/libcublas.so.12"};
  for (const char *name : names)
    if ((blas.library = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
  if (!blas.library) {
    blas.why = "no libcublas.so.13 or .12";
    return blas;
  }
  blas.create = (__typeof__(cublasCreate_v2) *)dlsym(blas.library, "cublasCreate_v2");
  blas.grouped = (__typeof__(cublasGemmGroupedBatchedEx) *)dlsym(blas.library, "cublasGemmGroupedBatchedEx");
  if (!blas.create || !blas.grouped) {
    blas.why = "no cublasGemmGroupedBatchedEx (cuBLAS older than 12.5)";
    blas.grouped = nullptr;
    return blas;
  }
  if (blas.create(&blas.handle) != CUBLAS_STATUS_SUCCESS) {
    blas.why = "cublasCreate failed";
    blas.grouped = nullptr;
  }
  return blas;
}

// ---------------------------------------------------------------------------------------------
// Host side.
struct Model {
  const char *name;
  int hidden, inter, off, experts, top_k;
};

struct Op {
  std::string label;
  int N, K;
  ScaleMap map;
  long long scale_count;
  uint32_t seed;
  bool gate_up;
};

static Op make_op(const Model &m, bool gate_up) {
  Op op;
  op.gate_up = gate_up;
  op.label = std::string(m.name) + (gate_up ? " gate_up" : " down");
  const int grid_i = (m.off + m.inter + 127) / 128, grid_h = (m.hidden + 127) / 128;
  if (gate_up) {  // s13[E][2][G13][ceil(H/128)]
    op.N = 2 * m.inter;
    op.K = m.hidden;
    op.map = ScaleMap{m.inter, m.off, 0, grid_h, grid_i * grid_h, 2LL * grid_i * grid_h};
  } else {  // s2[E][ceil(H/128)][G2]
    op.N = m.hidden;
    op.K = m.inter;
    op.map = ScaleMap{m.hidden, 0, m.off, grid_i, 0, (long long)grid_h * grid_i};
  }
  op.scale_count = op.map.expert_stride * m.experts;
  op.seed = gate_up ? 0x13u : 0x2u;
  return op;
}

static double half_value(unsigned short bits) {
  const int exponent = bits >> 10 & 31, mantissa = bits & 1023;
  const double magnitude = exponent ? std::ldexp(1.0 + mantissa / 1024.0, exponent - 15) : std::ldexp(mantissa / 1024.0, -14);
  return bits & 0x8000 ? -magnitude : magnitude;
}

static float median_of(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

static int g_failures = 0;

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  double peak = 0.0;
  bool baseline = true;
  std::vector<int> ms = {512, 2048, 8192, 16384};
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--no-baseline")) {
      baseline = false;
    } else if (!strcmp(argv[i], "--peak") && i + 1 < argc) {
      char *end;
      peak = strtod(argv[++i], &end);
      if (*end || !(peak > 0)) {
        printf("moe_tile_probe: --peak %s is not a positive number\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(argv[i], "--m") && i + 1 < argc) {
      ms.clear();
      std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const std::string item = list.substr(at, comma - at);
        char *end;
        const long m = strtol(item.c_str(), &end, 10);
        if (item.empty() || *end || m < 1 || m > 32768) {
          printf("moe_tile_probe: --m item '%s' is not a token count in 1..32768\n", item.c_str());
          return 2;
        }
        ms.push_back((int)m);
        at = comma + 1;
      }
    } else {
      printf("usage: moe_tile_probe [--peak TFLOPS] [--m M,M,...] [--no-baseline]\n");
      return 2;
    }
  }
  cudaDeviceProp prop;
  PROBE_CHECK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, sm_%d%d, %d SMs; m16n8k16 peak %s; E4M3 -> FP16 by %s\n", prop.name, prop.major, prop.minor,
         prop.multiProcessorCount, peak > 0 ? (std::to_string(peak) + " TFLOP/s (--peak)").c_str() : "not given",
#ifdef TILE_PROBE_FP8_CVT
         "cvt.rn.f16x2.e4m3x2"
#else
         "the bit-level conversion"
#endif
  );
  PROBE_CHECK(cudaFuncSetAttribute(moe_tile_gemm<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   TileShape<64>::kSharedBytes));
  PROBE_CHECK(cudaFuncSetAttribute(moe_tile_gemm<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   TileShape<128>::kSharedBytes));
  Blas blas;
  if (baseline) blas = open_blas();
  printf("cuBLAS grouped baseline: %s\n", !baseline      ? "not run (--no-baseline)"
                                           : blas.grouped ? "cublasGemmGroupedBatchedEx"
                                                          : blas.why.c_str());

  double code_value[256];  // what the bit-level conversion makes of each code (code * 2^-8, exact)
  for (int c = 0; c < 256; ++c) code_value[c] = half_value((unsigned short)((c & 0x80) << 8 | (c & 0x7F) << 7));
  const Model models[] = {{"deepseek-v3 tp8", 7168, 256, 0, 256, 8}, {"reference tp4", 2560, 160, 32, 512, 10}};
  const int max_m = *std::max_element(ms.begin(), ms.end());
  const size_t flush_bytes = 256u << 20;
  void *flush;
  PROBE_CHECK(cudaMalloc(&flush, flush_bytes));
  cudaEvent_t ev0, ev1;
  PROBE_CHECK(cudaEventCreate(&ev0));
  PROBE_CHECK(cudaEventCreate(&ev1));
  auto elapsed_us = [&]() {
    float ms_ = 0.f;
    PROBE_CHECK(cudaEventSynchronize(ev1));
    PROBE_CHECK(cudaEventElapsedTime(&ms_, ev0, ev1));
    return ms_ * 1e3f;
  };

  for (const Model &model : models) {
    const int E = model.experts, top_k = model.top_k, max_pairs = max_m * top_k;
    for (int which = 0; which < 2; ++which) {
      const Op op = make_op(model, which == 0);
      const int N = op.N, K = op.K;
      const int max_slots = max_pairs + E * 127, max_tiles = max_pairs / 64 + E + 1;
      // Weights, scales, their FP16 copy, the source rows (x for gate_up, h for down).
      unsigned char *w;
      unsigned short *scales;
      __half *w16 = nullptr, *src, *y, *gathered = nullptr;
      const uint64_t w_count = (uint64_t)E * N * K;
      const int src_rows = op.gate_up ? max_m : max_pairs;
      PROBE_CHECK(cudaMalloc(&w, w_count));
      PROBE_CHECK(cudaMalloc(&scales, op.scale_count * 2));
      PROBE_CHECK(cudaMalloc(&src, (size_t)src_rows * K * 2));
      PROBE_CHECK(cudaMalloc(&y, (size_t)max_slots * N * 2));
      fill_codes<<<4096, 256>>>(w, w_count, op.seed);
      fill_scales<<<256, 256>>>(scales, op.scale_count, op.seed + 100);
      fill_activations<<<4096, 256>>>(src, (uint64_t)src_rows * K, op.seed + 200);
      if (blas.grouped) {
        PROBE_CHECK(cudaMalloc(&w16, w_count * 2));
        PROBE_CHECK(cudaMalloc(&gathered, (size_t)max_slots * K * 2));
        dequantize_all<<<4096, 256>>>(w, scales, op.map, N, K, w_count, w16);
      }
      PROBE_CHECK(cudaGetLastError());
      int *ids, *counts, *starts, *cursor, *num_tiles, *rows, *slot_pair;
      Tile *tiles;
      PROBE_CHECK(cudaMalloc(&ids, (size_t)max_pairs * 4));
      PROBE_CHECK(cudaMalloc(&counts, E * 4));
      PROBE_CHECK(cudaMalloc(&starts, E * 4));
      PROBE_CHECK(cudaMalloc(&cursor, E * 4));
      PROBE_CHECK(cudaMalloc(&num_tiles, 4));
      PROBE_CHECK(cudaMalloc(&rows, (size_t)max_slots * 4));
      PROBE_CHECK(cudaMalloc(&slot_pair, (size_t)max_slots * 4));
      PROBE_CHECK(cudaMalloc(&tiles, (size_t)max_tiles * sizeof(Tile)));
      printf("\n== %s: N %d, K %d, %d experts, top-%d, offset %d; E4M3 weights %.1f MB\n", op.label.c_str(), N, K, E,
             top_k, model.off, w_count / 1e6);

      for (int m : ms) {
        const int pairs = m * top_k;
        // Uniform random routing: top_k distinct experts a token.
        std::vector<int> host_ids(pairs);
        std::mt19937 rng(1000 + m);
        for (int t = 0; t < m; ++t)
          for (int j = 0; j < top_k; ++j) {
            int e;
            bool again;
            do {
              e = (int)(rng() % E);
              again = false;
              for (int q = 0; q < j; ++q) again |= host_ids[t * top_k + q] == e;
            } while (again);
            host_ids[t * top_k + j] = e;
          }
        PROBE_CHECK(cudaMemcpy(ids, host_ids.data(), pairs * 4, cudaMemcpyHostToDevice));
        std::vector<int> host_counts(E, 0);
        for (int e : host_ids) host_counts[e]++;

        // The reference of sampled pairs, in double, the samples spread over the host's cores.
        const int samples = std::min(32, pairs);
        std::vector<int> sampled(samples);
        for (int s = 0; s < samples; ++s) sampled[s] = (int)(rng() % pairs);
        std::vector<double> reference((size_t)samples * N), magnitude((size_t)samples * N);
        std::vector<std::vector<double>> xs(samples, std::vector<double>(K));
        std::vector<unsigned short> xrow(K);
        for (int s = 0; s < samples; ++s) {
          const int p = sampled[s], row = op.gate_up ? p / top_k : p;
          PROBE_CHECK(cudaMemcpy(xrow.data(), src + (size_t)row * K, K * 2, cudaMemcpyDeviceToHost));
          for (int k = 0; k < K; ++k) xs[s][k] = half_value(xrow[k]);
        }
        auto reference_rows = [&](int first, int step) {
          for (int s = first; s < samples; s += step) {
            const int e = host_ids[sampled[s]];
            const std::vector<double> &x = xs[s];
            for (int n = 0; n < N; ++n) {
              double sum = 0, absolute = 0, scale = 0;
              const uint64_t base = ((uint64_t)e * N + n) * K;
              for (int k = 0; k < K; ++k) {
                if (k == 0 || (op.map.k_off + k) % 128 == 0)
                  scale = half_value(scale_bits(op.seed + 100, op.map.index(e, n, k)));
                const double weight = code_value[weight_code(op.seed, base + k)] * scale;
                sum += x[k] * weight;
                absolute += std::fabs(x[k] * weight);
              }
              reference[(size_t)s * N + n] = sum;
              magnitude[(size_t)s * N + n] = absolute;
            }
          }
        };
        const int workers = (int)std::max(1u, std::min(std::thread::hardware_concurrency(), (unsigned)samples));
        std::vector<std::thread> pool;
        for (int worker = 0; worker < workers; ++worker) pool.emplace_back(reference_rows, worker, workers);
        for (std::thread &thread : pool) thread.join();
        // Compares the sampled pairs' rows of `out` (slots given by the slot -> pair map) with the reference.
        auto check = [&](const __half *out, const std::vector<int> &host_slot_pair, const char *what) {
          std::vector<int> slot_of(pairs, -1);
          for (size_t s = 0; s < host_slot_pair.size(); ++s)
            if (host_slot_pair[s] >= 0) slot_of[host_slot_pair[s]] = (int)s;
          std::vector<unsigned short> yrow(N);
          double err2 = 0, ref2 = 0, worst_row = 0;
          long bad = 0;
          for (int s = 0; s < samples; ++s) {
            PROBE_CHECK(cudaMemcpy(yrow.data(), out + (size_t)slot_of[sampled[s]] * N, N * 2, cudaMemcpyDeviceToHost));
            double row_err2 = 0, row_ref2 = 0;
            for (int n = 0; n < N; ++n) {
              const double got = half_value(yrow[n]), want = reference[(size_t)s * N + n];
              const double diff = (yrow[n] & 0x7C00) == 0x7C00 ? INFINITY : got - want;
              if (!(std::fabs(diff) <= std::ldexp(magnitude[(size_t)s * N + n], -9) + std::ldexp(std::fabs(want), -10)))
                bad++;
              row_err2 += diff * diff;
              row_ref2 += want * want;
            }
            err2 += row_err2;
            ref2 += row_ref2;
            worst_row = std::max(worst_row, std::sqrt(row_err2 / std::max(row_ref2, 1e-300)));
          }
          const double rel = std::sqrt(err2 / std::max(ref2, 1e-300));
          const bool ok = bad == 0 && rel <= 1e-3 && worst_row <= 2e-3;
          if (!ok) g_failures++;
          char text[200];
          snprintf(text, sizeof(text), "%s rel L2 %.1e (worst row %.1e, %ld values out of bound) %s", what, rel,
                   worst_row, bad, ok ? "ok" : "FAILED");
          return std::string(text);
        };

        const double useful = 2.0 * pairs * N * K;
        std::vector<int> host_slot_pair_128;
        int slots_128 = 0;
        for (int bm : {64, 128}) {
          // The route, timed (counts cleared, count, scan, scatter).
          auto route = [&]() {
            PROBE_CHECK(cudaMemsetAsync(counts, 0, E * 4));
            route_count<<<std::min(264, (pairs + 255) / 256), 256, E * 4>>>(ids, pairs, E, counts);
            route_scan<<<1, 1024>>>(counts, E, bm, starts, cursor, tiles, num_tiles, rows, slot_pair);
            route_scatter<<<(pairs + 255) / 256, 256>>>(ids, pairs, op.gate_up ? top_k : 1, starts, cursor, rows,
                                                        slot_pair);
          };
          std::vector<float> route_us;
          for (int r = 0; r < 6; ++r) {
            PROBE_CHECK(cudaEventRecord(ev0));
            route();
            PROBE_CHECK(cudaEventRecord(ev1));
            const float us = elapsed_us();
            if (r) route_us.push_back(us);
          }
          PROBE_CHECK(cudaGetLastError());
          // The route's result against the host's count.
          int host_tiles_count = 0, slots = 0;
          for (int e = 0; e < E; ++e) {
            host_tiles_count += (host_counts[e] + bm - 1) / bm;
            slots += (host_counts[e] + bm - 1) / bm * bm;
          }
          int device_tiles = 0;
          PROBE_CHECK(cudaMemcpy(&device_tiles, num_tiles, 4, cudaMemcpyDeviceToHost));
          std::vector<int> host_rows(slots), host_slot_pair(slots);
          std::vector<Tile> host_tiles(device_tiles > 0 && device_tiles <= max_tiles ? device_tiles : 0);
          PROBE_CHECK(cudaMemcpy(host_rows.data(), rows, slots * 4, cudaMemcpyDeviceToHost));
          PROBE_CHECK(cudaMemcpy(host_slot_pair.data(), slot_pair, slots * 4, cudaMemcpyDeviceToHost));
          PROBE_CHECK(cudaMemcpy(host_tiles.data(), tiles, host_tiles.size() * sizeof(Tile), cudaMemcpyDeviceToHost));
          bool route_ok = device_tiles == host_tiles_count;
          std::vector<int> seen(pairs, 0);
          for (const Tile &t : host_tiles) {
            route_ok &= t.rows >= 1 && t.rows <= bm && t.first_slot % bm == 0 && t.first_slot + bm <= slots;
            for (int r = 0; r < bm && route_ok; ++r) {
              const int s = t.first_slot + r, p = host_slot_pair[s];
              if (r < t.rows) {
                route_ok &= p >= 0 && p < pairs && host_ids[p] == t.expert &&
                            host_rows[s] == (op.gate_up ? p / top_k : p);
                if (route_ok) seen[p]++;
              } else {
                route_ok &= p == -1 && host_rows[s] == -1;
              }
            }
          }
          for (int p = 0; p < pairs && route_ok; ++p) route_ok &= seen[p] == 1;
          if (!route_ok) {
            g_failures++;
            printf("M=%-5d BM=%-3d route FAILED (tiles %d, host %d)\n", m, bm, device_tiles, host_tiles_count);
            continue;
          }

          GemmArgs args{src, rows, tiles, num_tiles, w, scales, op.map, y, N, K};
          const dim3 grid((N + kBN - 1) / kBN, host_tiles_count);  // one pass with the exact count: the
          // grid a captured forward would size from max_tokens is this plus CTAs that return at once.
          const size_t shared = bm == 64 ? TileShape<64>::kSharedBytes : TileShape<128>::kSharedBytes;
          auto gemm = [&]() {
            if (bm == 64)
              moe_tile_gemm<64><<<grid, kThreads, shared>>>(args);
            else
              moe_tile_gemm<128><<<grid, kThreads, shared>>>(args);
          };
          PROBE_CHECK(cudaMemset(y, 0xFF, (size_t)slots * N * 2));
          gemm();
          PROBE_CHECK(cudaDeviceSynchronize());
          const std::string verdict = check(y, host_slot_pair, "check");
          // Pad slots stay poisoned.
          long touched = 0;
          std::vector<unsigned short> pad_row(N);
          int pads_checked = 0;
          for (int s = 0; s < slots && pads_checked < 16; ++s)
            if (host_slot_pair[s] < 0) {
              PROBE_CHECK(cudaMemcpy(pad_row.data(), y + (size_t)s * N, N * 2, cudaMemcpyDeviceToHost));
              for (unsigned short v : pad_row) touched += v != 0xFFFF;
              pads_checked++;
            }
          if (touched) g_failures++;
          std::vector<float> gemm_us;
          for (int r = 0; r < 5; ++r) {
            PROBE_CHECK(cudaMemsetAsync(flush, r, flush_bytes));
            PROBE_CHECK(cudaEventRecord(ev0));
            gemm();
            PROBE_CHECK(cudaEventRecord(ev1));
            gemm_us.push_back(elapsed_us());
          }
          PROBE_CHECK(cudaGetLastError());
          const float us = median_of(gemm_us);
          const double tflops = useful / (us * 1e-6) / 1e12;
          const double executed = 2.0 * host_tiles_count * bm * grid.x * kBN * ((K + kBK - 1) / kBK) * kBK;
          char share[64] = "";
          if (peak > 0) snprintf(share, sizeof(share), " (%.0f%% of peak)", 100.0 * tflops / peak);
          printf("M=%-5d BM=%-3d pairs %-6d tiles %-5d x %-2d  route %7.1f us  gemm %8.1f us  %6.1f TFLOP/s%s  "
                 "executed/useful %.2f  %s, pad slots %s\n",
                 m, bm, pairs, host_tiles_count, grid.x, median_of(route_us), us, tflops, share, executed / useful,
                 verdict.c_str(), touched ? "WRITTEN (FAILED)" : "untouched");
          if (bm == 128) {
            host_slot_pair_128 = host_slot_pair;
            slots_128 = slots;
          }
        }

        // cuBLAS grouped FP16 on the BM = 128 route's slots: one group per expert with pairs.
        if (blas.grouped && slots_128 > 0) {
          gather_rows<<<slots_128, 256>>>(src, rows, slots_128, K, gathered);
          std::vector<int> first(E, 0);
          for (int e = 1; e < E; ++e) first[e] = first[e - 1] + (host_counts[e - 1] + 127) / 128 * 128;
          std::vector<cublasOperation_t> ta, tb;
          std::vector<int> gm, gn, gk, lda, ldb, ldc, group_size;
          std::vector<float> alpha, beta;
          std::vector<const void *> pa, pb;
          std::vector<void *> pc;
          for (int e = 0; e < E; ++e) {
            if (!host_counts[e]) continue;
            // Column-major: Y^T (N x count) = W (K x N stored, transposed) x X^T (K x count).
            ta.push_back(CUBLAS_OP_T);
            tb.push_back(CUBLAS_OP_N);
            gm.push_back(N);
            gn.push_back(host_counts[e]);
            gk.push_back(K);
            lda.push_back(K);
            ldb.push_back(K);
            ldc.push_back(N);
            alpha.push_back(1.f);
            beta.push_back(0.f);
            group_size.push_back(1);
            pa.push_back(w16 + (size_t)e * N * K);
            pb.push_back(gathered + (size_t)first[e] * K);
            pc.push_back(y + (size_t)first[e] * N);
          }
          const int groups = (int)ta.size();
          void **device_pointers;
          PROBE_CHECK(cudaMalloc(&device_pointers, 3 * groups * sizeof(void *)));
          PROBE_CHECK(cudaMemcpy(device_pointers, pa.data(), groups * sizeof(void *), cudaMemcpyHostToDevice));
          PROBE_CHECK(cudaMemcpy(device_pointers + groups, pb.data(), groups * sizeof(void *), cudaMemcpyHostToDevice));
          PROBE_CHECK(cudaMemcpy(device_pointers + 2 * groups, pc.data(), groups * sizeof(void *), cudaMemcpyHostToDevice));
          auto grouped = [&]() {
            return blas.grouped(blas.handle, ta.data(), tb.data(), gm.data(), gn.data(), gk.data(), alpha.data(),
                                (const void *const *)device_pointers, CUDA_R_16F, lda.data(),
                                (const void *const *)(device_pointers + groups), CUDA_R_16F, ldb.data(), beta.data(),
                                (void *const *)(device_pointers + 2 * groups), CUDA_R_16F, ldc.data(), groups,
                                group_size.data(), CUBLAS_COMPUTE_32F);
          };
          PROBE_CHECK(cudaMemset(y, 0xFF, (size_t)slots_128 * N * 2));
          cublasStatus_t status = grouped();
          PROBE_CHECK(cudaDeviceSynchronize());
          if (status != CUBLAS_STATUS_SUCCESS) {
            printf("M=%-5d cuBLAS grouped: status %d\n", m, (int)status);
          } else {
            // cuBLAS's own rounding is not bounded here: its check is printed, not counted.
            const int before = g_failures;
            const std::string verdict = check(y, host_slot_pair_128, "check");
            g_failures = before;
            std::vector<float> blas_us;
            for (int r = 0; r < 5; ++r) {
              PROBE_CHECK(cudaMemsetAsync(flush, r, flush_bytes));
              PROBE_CHECK(cudaEventRecord(ev0));
              grouped();
              PROBE_CHECK(cudaEventRecord(ev1));
              blas_us.push_back(elapsed_us());
            }
            const float us = median_of(blas_us);
            printf("M=%-5d cuBLAS grouped FP16, %d groups            gemm %8.1f us  %6.1f TFLOP/s  %s\n", m, groups, us,
                   useful / (us * 1e-6) / 1e12, verdict.c_str());
          }
          PROBE_CHECK(cudaFree(device_pointers));
        }
      }
      cudaFree(w);
      cudaFree(scales);
      cudaFree(src);
      cudaFree(y);
      cudaFree(w16);
      cudaFree(gathered);
      cudaFree(ids);
      cudaFree(counts);
      cudaFree(starts);
      cudaFree(cursor);
      cudaFree(num_tiles);
      cudaFree(rows);
      cudaFree(slot_pair);
      cudaFree(tiles);
    }
  }
  PROBE_CHECK(cudaGetLastError());
  printf("\nmoe_tile_probe: %s\n", g_failures ? "FAILED" : "all checks passed");
  return g_failures ? 1 : 0;
}
