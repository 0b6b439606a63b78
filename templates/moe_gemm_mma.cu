// Grouped FP8 GEMM on SM70 tensor cores (mma.sync.aligned.m8n8k4, FP16 in, FP32 accumulate)
// for work items of 8..32 routed pairs. Same operation as moe_gemm_cc.cu.
//
// Fragments (PTX ISA, mma.m8n8k4 .f16, .row.col, .f32 accumulators): the warp runs four 8x8x4
// products, one per quad pair (lanes 4q..4q+3 and 16+4q..16+4q+3). Within a quad pair, with
// r = (lane & 3) + 4 * (lane >= 16):
//   A (row major): row r, elements k = 0..3 (two f16x2 registers, low half = lower k);
//   B (col major): column r, elements k = 0..3;
//   C/D element i: row (lane & 1) + (i & 2) + 4 * (lane >= 16), column (i & 4) + (lane & 2) + (i & 1).
// Quad pair q takes chunk 4 * step + q of a 64-wide k step for the same 8 columns: one 16-byte
// load of weights per thread feeds four chained MMAs. The quad pairs' sums are added at the end.
// x is staged in shared memory one k tile at a time; weights stream straight to registers, the
// next batch requested before the current one is used.
@{include moe_common.cu}
@{include moe_expert_range.cu}

#define VOLT8_GATE_UP @{OP_GATE_UP}

namespace {
constexpr int kBlockM = @{BLOCK_M};
constexpr int kBlockN = @{BLOCK_N};
constexpr int kThreads = @{THREADS};
constexpr int kSplitK = @{SPLIT_K};
constexpr int kUnroll = @{UNROLL};  // k steps whose weights are loaded before any is used
constexpr int kRows = @{ROWS};      // weight rows per output column: gate and up, or one
constexpr int kK = @{K_DIM};
constexpr int kN = @{N_DIM};
constexpr int kChunks = kK / 16;
constexpr int kMTiles = kBlockM / 8;
constexpr int kWarpsN = @{WARPS} / kSplitK;
constexpr int kNTiles = kBlockN / (8 * kWarpsN);
constexpr int kTileK = @{TILE_K};  // k elements of x staged in shared memory at a time
constexpr int kTileChunks = kTileK / 16;
constexpr int kTileSteps = kTileK / 64;
constexpr int kNumTiles = (kK + kTileK - 1) / kTileK;
constexpr int kSliceSteps = (kTileSteps + kSplitK - 1) / kSplitK;  // k steps of one slice per tile
constexpr int kTileBatches = (kSliceSteps + kUnroll - 1) / kUnroll;
constexpr int kBatches = kNumTiles * kTileBatches;
// Row stride = 32 mod 128 bytes plus the half swap below keeps A-fragment loads conflict-free.
constexpr int kRowStrideBytes = kTileK * 2 + 32;
constexpr int kSmemBytes = @{SMEM_BYTES};
constexpr int kAccumulators = kMTiles * kNTiles * kRows * 8;
@{include moe_expert_layout.cu}
static_assert(kTileK % 64 == 0 && kNTiles * 8 * kWarpsN == kBlockN, "tile does not fit the shape");
static_assert(kBlockM * kRowStrideBytes <= kSmemBytes, "x tile exceeds its shared buffer");
static_assert((kSplitK - 1) * kWarpsN * 8 * kAccumulators * 4 <= kSmemBytes, "split-k buffer too small");
}  // namespace

// acc (+)= A . B for one m8n8k4 per quad pair.
static __device__ __forceinline__ void mma_884(float (&acc)[8], unsigned a0, unsigned a1, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9}, {%10, %11}, {%0, %1, %2, %3, %4, %5, %6, %7};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]), "+f"(acc[6]),
        "+f"(acc[7])
      : "r"(a0), "r"(a1), "r"(b0), "r"(b1));
}

// Byte offset of the 16-byte half `half` (0: k 0..7, 1: k 8..15) of chunk `chunk` in an x tile row.
// Odd chunks store their halves swapped so the quad pairs of a load phase use distinct banks.
static __device__ __forceinline__ int x_half_offset(int chunk, int half) {
  return chunk * 32 + ((half ^ (chunk & 1)) << 4);
}

// Requests this thread's weights of batch `batch`: kUnroll k steps of the slice, one 16-byte
// chunk per step and weight row. Steps past the tile, chunks past K and rows past N read as zeros.
static __device__ __forceinline__ void load_weight_batch(uint4 (&raw)[kUnroll][kNTiles][kRows],
                                                         const unsigned char *const (&rows)[kNTiles][kRows],
                                                         const bool (&row_valid)[kNTiles], int batch, int slice,
                                                         int quad_pair) {
  const int tile = batch / kTileBatches;
  const int tile_batch = batch % kTileBatches;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int step = slice + (tile_batch * kUnroll + u) * kSplitK;
    const int chunk = tile * kTileChunks + step * 4 + quad_pair;
    const bool chunk_valid = step < kTileSteps && chunk < kChunks;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        raw[u][nt][r] = (chunk_valid && row_valid[nt]) ? load_weights_16(rows[nt][r] + chunk * 16) : zero_uint4();
  }
}

// Copies k range [tile * kTileK, +kTileK) of the item's x rows into the tile (zeros past K and
// count), in groups of loads that are all in flight together.
static __device__ __forceinline__ void stage_x_tile(unsigned char *tile_buffer, const unsigned short *activations,
                                                    const int *pair_ids, int count, int tile, int top_k) {
  constexpr int kVectors = kBlockM * (kTileK / 8);
  constexpr int kIterations = (kVectors + kThreads - 1) / kThreads;
  constexpr int kGroup = kIterations < 4 ? kIterations : 4;
  for (int group_start = 0; group_start < kIterations; group_start += kGroup) {
    uint4 raw[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const int index = threadIdx.x + (group_start + g) * kThreads;
      const int m = index / (kTileK / 8);
      const int k = tile * kTileK + (index % (kTileK / 8)) * 8;
      const bool valid = group_start + g < kIterations && index < kVectors && m < count && k < kK;
      const long long row = valid ? pair_ids[m] / top_k : 0;  // top_k is 1 for down: rows of h are pairs
      raw[g] = valid ? *reinterpret_cast<const uint4 *>(activations + row * kK + k) : zero_uint4();
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const int index = threadIdx.x + (group_start + g) * kThreads;
      if (group_start + g < kIterations && index < kVectors) {
        const int m = index / (kTileK / 8);
        const int vector = index % (kTileK / 8);
        *reinterpret_cast<uint4 *>(tile_buffer + m * kRowStrideBytes + x_half_offset(vector >> 1, vector & 1)) = raw[g];
      }
    }
  }
}

// FP32 copy of the scales of the CTA's columns, [row kind][k block][column]; zero past N.
static __device__ __forceinline__ void stage_scales(float *scale_tile, const unsigned short *scales, int expert, int column0) {
  constexpr int kCount = kRows * kScaleKBlocks * kBlockN;
  constexpr int kIterations = (kCount + kThreads - 1) / kThreads;
  constexpr int kGroup = kIterations < 8 ? kIterations : 8;
  for (int group_start = 0; group_start < kIterations; group_start += kGroup) {
    unsigned short bits[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const int index = threadIdx.x + (group_start + g) * kThreads;
      const int kind = index / (kScaleKBlocks * kBlockN);
      const int k_block = (index / kBlockN) % kScaleKBlocks;
      const int column = column0 + index % kBlockN;
      const bool valid = group_start + g < kIterations && index < kCount && column < kN;
      bits[g] = valid ? scales[expert * kScaleExpertStride + kind * kScaleHalfStride +
                               ((kScaleRowOffset + column) / kScaleBlockN) * kScaleRowStride + k_block]
                      : (unsigned short)0;
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const int index = threadIdx.x + (group_start + g) * kThreads;
      if (group_start + g < kIterations && index < kCount) scale_tile[index] = half_to_float(bits[g]);
    }
  }
}

extern "C" __global__ void __launch_bounds__(kThreads, 1) @{ENTRY}(
    const unsigned short *__restrict__ activations, const unsigned char *__restrict__ weights,
    const unsigned short *__restrict__ scales, const int *__restrict__ sorted_pairs,
    const int4 *__restrict__ items, const int *__restrict__ counters,
#if VOLT8_GATE_UP
    int top_k, unsigned short *__restrict__ out,
#else
    const float *__restrict__ topk_weights, float *__restrict__ out,
#endif
    const int *__restrict__ topk_ids, int num_pairs) {
  // x tile [pair][kTileK + 16 halves], later reused for the split-k partial sums.
  __shared__ __align__(16) unsigned char shared_buffer[kSmemBytes];
  __shared__ __align__(16) float scale_tile[kRows * kScaleKBlocks * kBlockN];  // [row kind][k block][column]
  __shared__ int pair_ids[kBlockM];
#if !VOLT8_GATE_UP
  __shared__ float pair_weights[kBlockM];  // each pair's routing weight, staged with its id
#endif

  // (block_m 1, which reads topk_ids and num_pairs, is not a block_m of this family.)
  int expert, first, count;
  VOLT8_READ_WORK_ITEM(counters[@{COUNTER_INDEX}], items[blockIdx.y], return, return);
  if (!expert_id_valid(expert, kNumExperts) || count <= 0) return;
#if VOLT8_GATE_UP
  if (top_k <= 0) return;
#endif
  const int tid = threadIdx.x;
  const int column0 = blockIdx.x * kBlockN;

  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int slice = warp / kWarpsN;
  const int warp_n = warp % kWarpsN;
  const int quad_pair = (lane >> 2) & 3;
  const int fragment_row = (lane & 3) + ((lane >> 4) << 2);  // A row and B column of this thread
  const int warp_column0 = (warp_n * kNTiles) * 8;             // first tile column of this warp

  const unsigned char *row_weights[kNTiles][kRows];
  bool row_valid[kNTiles];
  const unsigned char *expert_weights = weights + expert * kExpertWeightBytes;
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    const int column = column0 + warp_column0 + nt * 8 + fragment_row;
    row_valid[nt] = column < kN;
#pragma unroll
    for (int r = 0; r < kRows; ++r) row_weights[nt][r] = expert_weights + (long long)(column + r * kUpRowOffset) * kK;
  }

  // The first weights are requested before anything is staged, so the latencies overlap.
  uint4 raw[kUnroll][kNTiles][kRows];
  load_weight_batch(raw, row_weights, row_valid, 0, slice, quad_pair);

  if (tid < kBlockM) {
    const int pair = tid < count ? sorted_pairs[first + tid] : 0;
    pair_ids[tid] = pair;
#if !VOLT8_GATE_UP
    pair_weights[tid] = tid < count ? topk_weights[pair] : 0.0f;
#endif
  }
  stage_scales(scale_tile, scales, expert, column0);

  float acc[kMTiles][kNTiles][kRows][8];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[mt][nt][r][i] = 0.0f;

#pragma unroll 1
  for (int batch = 0; batch < kBatches; ++batch) {
    const int tile = batch / kTileBatches;
    const int tile_batch = batch % kTileBatches;
    uint4 next[kUnroll][kNTiles][kRows];  // the next batch is in flight while this one is used
    if (batch + 1 < kBatches) load_weight_batch(next, row_weights, row_valid, batch + 1, slice, quad_pair);
    if (tile_batch == 0) {
      __syncthreads();  // pair ids are written; the previous tile is no longer read
      stage_x_tile(shared_buffer, activations, pair_ids, count, tile,
#if VOLT8_GATE_UP
                   top_k);
#else
                   1);
#endif
      __syncthreads();
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int step = slice + (tile_batch * kUnroll + u) * kSplitK;
      if (step >= kTileSteps) continue;  // warp-uniform: the MMAs below stay converged
      const int local_chunk = step * 4 + quad_pair;
      // Chunks past K hold zero weights and zero x; clamp their scale column to stay in bounds.
      const int k_block = min((kScaleKOffset + (tile * kTileChunks + local_chunk) * 16) >> 7, kScaleKBlocks - 1);

      unsigned a[kMTiles][8];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        const unsigned char *x_row = shared_buffer + (mt * 8 + fragment_row) * kRowStrideBytes;
        const uint4 low = *reinterpret_cast<const uint4 *>(x_row + x_half_offset(local_chunk, 0));
        const uint4 high = *reinterpret_cast<const uint4 *>(x_row + x_half_offset(local_chunk, 1));
        a[mt][0] = low.x;
        a[mt][1] = low.y;
        a[mt][2] = low.z;
        a[mt][3] = low.w;
        a[mt][4] = high.x;
        a[mt][5] = high.y;
        a[mt][6] = high.z;
        a[mt][7] = high.w;
      }
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const unsigned words[4] = {raw[u][nt][r].x, raw[u][nt][r].y, raw[u][nt][r].z, raw[u][nt][r].w};
          unsigned b[8];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            b[2 * j] = e4m3x2_to_half2(words[j], VOLT8_E4M3_LOW_PAIR);
            b[2 * j + 1] = e4m3x2_to_half2(words[j], VOLT8_E4M3_HIGH_PAIR);
          }
          const float *scale_row = scale_tile + (r * kScaleKBlocks + k_block) * kBlockN + warp_column0 + nt * 8 + (lane & 2);
          const float2 scale_low = *reinterpret_cast<const float2 *>(scale_row);
          const float2 scale_high = *reinterpret_cast<const float2 *>(scale_row + 4);
          const float column_scale[8] = {scale_low.x,  scale_low.y,  scale_low.x,  scale_low.y,
                                         scale_high.x, scale_high.y, scale_high.x, scale_high.y};
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            float chunk_sum[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < 4; ++j) mma_884(chunk_sum, a[mt][2 * j], a[mt][2 * j + 1], b[2 * j], b[2 * j + 1]);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[mt][nt][r][i] = fmaf(chunk_sum[i], column_scale[i], acc[mt][nt][r][i]);
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int r = 0; r < kRows; ++r) raw[u][nt][r] = next[u][nt][r];
  }

  // Quad pairs hold sums over disjoint chunks of the same 8x8 tiles: add them (butterfly, same bits in all).
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          float value = acc[mt][nt][r][i];
          value += __shfl_xor_sync(0xffffffffu, value, 4);
          value += __shfl_xor_sync(0xffffffffu, value, 8);
          acc[mt][nt][r][i] = value;
        }

  if (kSplitK > 1) {
    float *slice_sums = reinterpret_cast<float *>(shared_buffer);
    const int slot = (warp_n * 8 + fragment_row) * kAccumulators;
    __syncthreads();  // every warp is done with the x tile
    if (slice > 0 && quad_pair == 0) {
      float *own = slice_sums + (slice - 1) * kWarpsN * 8 * kAccumulators + slot;
      int v = 0;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int i = 0; i < 8; ++i) own[v++] = acc[mt][nt][r][i];
    }
    __syncthreads();
    if (slice == 0 && quad_pair == 0) {
      // Slices are added in slice order: the same inputs give the same bits.
      for (int s = 1; s < kSplitK; ++s) {
        const float *other = slice_sums + (s - 1) * kWarpsN * 8 * kAccumulators + slot;
        int v = 0;
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int r = 0; r < kRows; ++r)
#pragma unroll
              for (int i = 0; i < 8; ++i) acc[mt][nt][r][i] += other[v++];
      }
    }
  }
  if (slice != 0 || quad_pair != 0) return;

  // Elements i and i + 1 are adjacent columns of one row: store them together.
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int i = 0; i < 8; i += 2) {
        const int m = mt * 8 + (lane & 1) + (i & 2) + ((lane >> 4) << 2);
        const int column = column0 + warp_column0 + nt * 8 + (i & 4) + (lane & 2);
        if (m >= count || column >= kN) continue;
        const long long pair = pair_ids[m];
#if VOLT8_GATE_UP
        const unsigned short low = float_to_half(silu_times(acc[mt][nt][0][i], acc[mt][nt][kRows - 1][i]));
        const unsigned short high = float_to_half(silu_times(acc[mt][nt][0][i + 1], acc[mt][nt][kRows - 1][i + 1]));
        *reinterpret_cast<unsigned *>(out + pair * kN + column) = pack_halves(low, high);
#else
        const float weight = pair_weights[m];
        float2 value;
        value.x = weight * acc[mt][nt][0][i];
        value.y = weight * acc[mt][nt][0][i + 1];
        *reinterpret_cast<float2 *>(out + pair * kN + column) = value;
#endif
      }
    }
  }
}
