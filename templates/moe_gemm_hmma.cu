// Grouped FP8 GEMM on sm_80+ tensor cores (mma.sync.aligned.m16n8k16, FP16 in, FP32 accumulate)
// for work items of up to 8 routed pairs. Same operation as moe_gemm_cc.cu; never offered for a
// target below sm_80.
//
// The weights are the A operand (16 weight rows x 16 k) and x the B operand (16 k x 8 pairs), so one
// product serves up to 8 pairs and the per-weight work is the E4M3 -> FP16 conversion alone. A tile's
// 16 rows are 16 output columns for down; for gate_up they are the gate rows (0..7) and the up rows
// (8..15) of 8 output columns, so one thread holds both sums that silu(gate) * up needs.
// Fragments (PTX ISA, m16n8k16 .f16, .row.col, .f32 accumulators), g = lane / 4, c = lane % 4:
//   A: reg 0 row g, k 2c..2c+1; reg 1 row g+8, k 2c..2c+1; reg 2 row g, k 2c+8..2c+9; reg 3 row g+8,
//      k 2c+8..2c+9 (low half = lower k);
//   B: reg 0 k 2c..2c+1, column g; reg 1 k 2c+8..2c+9, column g;
//   D: d0, d1 row g, columns 2c, 2c+1; d2, d3 row g+8, the same columns.
// The k order inside a product is free as long as A and B agree. K is walked in windows of 64
// codes aligned to the scale grid (the first window starts kPad codes before k = 0, so no window
// crosses a 128-wide scale block). In a window, thread c loads the 16-byte chunk 16c..16c+15 of
// rows g and g+8, and product s (0..3) reads its word s: logical k 2c, 2c+1 <- codes 16c+4s+0,1 and
// logical k 2c+8, 2c+9 <- codes 16c+4s+2,3. B takes x at the same codes: 8 bytes of the pair's row.
// After the window's four products the sums are scaled and added in FP32.
@{include moe_common.cu}

#define VOLT8_GATE_UP @{OP_GATE_UP}

namespace {
constexpr int kBlockM = @{BLOCK_M};
constexpr int kBlockN = @{BLOCK_N};
constexpr int kThreads = @{THREADS};
constexpr int kSplitK = @{SPLIT_K};
constexpr int kUnroll = @{UNROLL};  // windows whose weights are in flight at once
constexpr int kRows = @{ROWS};      // weight rows per output column: gate and up, or one
constexpr int kK = @{K_DIM};
constexpr int kN = @{N_DIM};
constexpr int kChunks = kK / 16;
constexpr int kWarpsN = @{WARPS} / kSplitK;
constexpr int kTileColumns = 16 / kRows;  // output columns of one 16-row tile
constexpr int kNTiles = kBlockN / (kTileColumns * kWarpsN);
constexpr int kPad = @{K_PAD};          // codes before k = 0 in the first window
constexpr int kWindows = @{WINDOWS};    // 64-code windows covering [-kPad, K)
constexpr int kRowHalves = kWindows * 64 + 8;  // x tile row stride: 16 bytes past a multiple of 128
constexpr int kSliceWindows = (kWindows + kSplitK - 1) / kSplitK;
constexpr int kBatches = (kSliceWindows + kUnroll - 1) / kUnroll;
constexpr int kAccumulators = kNTiles * 4;
constexpr int kNumExperts = @{NUM_EXPERTS};
constexpr long long kExpertWeightBytes = @{EXPERT_WEIGHT_BYTES}LL;
constexpr int kUpRowOffset = @{UP_ROW_OFFSET};
constexpr int kScaleBlockN = @{SCALE_BN};
constexpr int kScaleRowOffset = @{SCALE_ROW_OFFSET};
constexpr int kScaleKOffset = @{SCALE_K_OFFSET};
constexpr int kScaleRowStride = @{SCALE_ROW_STRIDE};
constexpr int kScaleHalfStride = @{SCALE_HALF_STRIDE};
constexpr long long kScaleExpertStride = @{SCALE_EXPERT_STRIDE}LL;
constexpr int kScaleKBlocks = @{SCALE_K_BLOCKS};
constexpr int kXTileBytes = kBlockM * kRowHalves * 2;
constexpr int kPartialBytes = (kSplitK - 1) * kWarpsN * 32 * kAccumulators * 4;
constexpr int kSharedBytes = kXTileBytes > kPartialBytes ? kXTileBytes : kPartialBytes;
static_assert(kK % 16 == 0 && kPad % 16 == 0 && kPad < 64, "k must split into 16-code chunks");
static_assert(kBlockM >= 1 && kBlockM <= 8, "one product serves at most 8 pairs");
static_assert(kNTiles * kTileColumns * kWarpsN == kBlockN && kWarpsN * kSplitK == @{WARPS}, "tile does not fit the warps");
}  // namespace

// d = A . B + d for one m16n8k16 product.
static __device__ __forceinline__ void mma_16816(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                                 unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Routed pair m of the CTA's work item: with block_m == 1 the item is the pair itself.
static __device__ __forceinline__ int item_pair(const int *sorted_pairs, int first, int m) {
  return kBlockM == 1 ? first + m : sorted_pairs[first + m];
}

// Requests this thread's chunk of window `window` in each of its weight rows ([tile][tile row g, g+8]).
// Windows past the slice, chunks outside [0, K) and rows past N read as zeros.
static __device__ __forceinline__ void load_window(uint4 (&raw)[kNTiles][2], const unsigned char *const (&rows)[kNTiles][2],
                                                   const bool (&row_valid)[kNTiles][2], int window, int window_end,
                                                   int quad_lane) {
  const int chunk = window * 4 - kPad / 16 + quad_lane;
  const bool chunk_valid = window < window_end && chunk >= 0 && chunk < kChunks;
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      raw[nt][h] = (chunk_valid && row_valid[nt][h]) ? load_weights_16(rows[nt][h] + chunk * 16) : zero_uint4();
}

// Word s of a 16-byte chunk.
static __device__ __forceinline__ unsigned chunk_word(const uint4 &chunk, int s) {
  return s == 0 ? chunk.x : s == 1 ? chunk.y : s == 2 ? chunk.z : chunk.w;
}

// FP32 copy of the scales of the CTA's columns, [row kind][column][k block]; zero past N.
static __device__ __forceinline__ void stage_scales(float *scale_tile, const unsigned short *scales, int expert, int column0) {
  constexpr int kCount = kRows * kBlockN * kScaleKBlocks;
  constexpr int kIterations = (kCount + kThreads - 1) / kThreads;
  constexpr int kGroup = kIterations < 8 ? kIterations : 8;
  for (int group_start = 0; group_start < kIterations; group_start += kGroup) {
    unsigned short bits[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const int index = threadIdx.x + (group_start + g) * kThreads;
      const int kind = index / (kBlockN * kScaleKBlocks);
      const int column = column0 + (index / kScaleKBlocks) % kBlockN;
      const int k_block = index % kScaleKBlocks;
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

// x rows of the item as FP16, [pair][kPad zeros, K codes, zeros to kWindows * 64]; rows past the
// count are zeros, so every product reads finite values.
static __device__ __forceinline__ void stage_x(unsigned short *x_tile, const unsigned short *activations,
                                               const int *sorted_pairs, int first, int count, int top_k) {
  constexpr int kVectorsPerRow = kWindows * 8;  // 16-byte vectors of a row, padding included
  constexpr int kVectors = kBlockM * kVectorsPerRow;
  constexpr int kIterations = (kVectors + kThreads - 1) / kThreads;
  constexpr int kGroup = kIterations < 8 ? kIterations : 8;
  for (int group_start = 0; group_start < kIterations; group_start += kGroup) {
    uint4 raw[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const int index = threadIdx.x + (group_start + g) * kThreads;
      const int m = index / kVectorsPerRow;
      const int k = (index % kVectorsPerRow) * 8 - kPad;
      const bool valid = group_start + g < kIterations && index < kVectors && m < count && k >= 0 && k < kK;
      const long long row = valid ? item_pair(sorted_pairs, first, m) / top_k : 0;
      raw[g] = valid ? *reinterpret_cast<const uint4 *>(activations + row * kK + k) : zero_uint4();
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const int index = threadIdx.x + (group_start + g) * kThreads;
      if (group_start + g < kIterations && index < kVectors) {
        *reinterpret_cast<uint4 *>(x_tile + (index / kVectorsPerRow) * kRowHalves + (index % kVectorsPerRow) * 8) = raw[g];
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(kThreads, @{MIN_BLOCKS}) @{ENTRY}(
    const unsigned short *__restrict__ activations, const unsigned char *__restrict__ weights,
    const unsigned short *__restrict__ scales, const int *__restrict__ sorted_pairs,
    const int4 *__restrict__ items, const int *__restrict__ counters,
#if VOLT8_GATE_UP
    int top_k, unsigned short *__restrict__ out,
#else
    const float *__restrict__ topk_weights, float *__restrict__ out,
#endif
    const int *__restrict__ topk_ids, int num_pairs) {
  // The x tile, later reused for the split-k partial sums.
  __shared__ __align__(16) unsigned char shared_buffer[kSharedBytes];
  __shared__ float scale_tile[kRows * kBlockN * kScaleKBlocks];  // [row kind][column][k block]
  __shared__ int pair_ids[kBlockM];

  int expert, first, count;
  if (kBlockM == 1) {
    // One routed pair per CTA, straight from topk_ids: no route pass is needed.
    if ((int)blockIdx.y >= num_pairs) return;
    expert = topk_ids[blockIdx.y];
    first = blockIdx.y;
    count = 1;
  } else {
    // Both loads in flight at once; items has an entry for every blockIdx.y, stale past the count.
    const int item_count = counters[@{COUNTER_INDEX}];
    const int4 item = items[blockIdx.y];
    if ((int)blockIdx.y >= item_count) return;
    expert = item.x;
    first = item.y;
    count = min(item.z, kBlockM);
  }
  if (expert < 0 || expert >= kNumExperts || count <= 0) return;
#if VOLT8_GATE_UP
  if (top_k <= 0) return;
  const int x_rows_per_pair = top_k;
#else
  const int x_rows_per_pair = 1;  // rows of h are pairs
#endif
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int slice = warp / kWarpsN;
  const int warp_n = warp % kWarpsN;
  const int row_in_tile = lane >> 2;  // g
  const int quad_lane = lane & 3;     // c
  const int column0 = blockIdx.x * kBlockN;
  const int window_begin = slice * kWindows / kSplitK;
  const int window_end = (slice + 1) * kWindows / kSplitK;

  // Tile row g + 8h: gate_up, column g of the tile, gate (h = 0) or up (h = 1); down, column g + 8h.
  const unsigned char *row_weights[kNTiles][2];
  bool row_valid[kNTiles][2];
  int tile_column[kNTiles][2], tile_kind[kNTiles][2];  // the row's column in the CTA and its kind
  const unsigned char *expert_weights = weights + expert * kExpertWeightBytes;
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_kind[nt][h] = kRows == 2 ? h : 0;
      tile_column[nt][h] = (warp_n * kNTiles + nt) * kTileColumns + (kRows == 2 ? 0 : h * 8) + row_in_tile;
      const int column = column0 + tile_column[nt][h];
      row_valid[nt][h] = column < kN;
      row_weights[nt][h] = expert_weights + (long long)(column + tile_kind[nt][h] * kUpRowOffset) * kK;
    }
  }

  // The first weights are requested before x and the scales are staged, so the latencies overlap.
  uint4 raw[kUnroll][kNTiles][2];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) load_window(raw[u], row_weights, row_valid, window_begin + u, window_end, quad_lane);

  unsigned short *x_tile = reinterpret_cast<unsigned short *>(shared_buffer);
  if (tid < kBlockM) pair_ids[tid] = tid < count ? item_pair(sorted_pairs, first, tid) : 0;
  stage_x(x_tile, activations, sorted_pairs, first, count, x_rows_per_pair);
  stage_scales(scale_tile, scales, expert, column0);
  __syncthreads();

  float acc[kNTiles][4];
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;

  // B fragments come from x row g; pairs past block_m (g >= kBlockM) multiply zeros.
  const unsigned short *x_row = x_tile + (row_in_tile < kBlockM ? row_in_tile : 0) * kRowHalves + quad_lane * 16;
  const bool x_row_used = row_in_tile < kBlockM;
  for (int batch = 0; batch < kBatches; ++batch) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int window = window_begin + batch * kUnroll + u;
      if (window < window_end) {  // warp-uniform: the products below stay converged
        uint4 x_low = zero_uint4(), x_high = zero_uint4();
        if (x_row_used) {
          x_low = *reinterpret_cast<const uint4 *>(x_row + window * 64);
          x_high = *reinterpret_cast<const uint4 *>(x_row + window * 64 + 8);
        }
        const unsigned b[4][2] = {{x_low.x, x_low.y}, {x_low.z, x_low.w}, {x_high.x, x_high.y}, {x_high.z, x_high.w}};
        const int k_block = (kScaleKOffset - kPad + window * 64) >> 7;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
          float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int s = 0; s < 4; ++s) {
            const unsigned word_low = chunk_word(raw[u][nt][0], s), word_high = chunk_word(raw[u][nt][1], s);
            mma_16816(d, e4m3x2_to_half2(word_low, VOLT8_E4M3_LOW_PAIR), e4m3x2_to_half2(word_high, VOLT8_E4M3_LOW_PAIR),
                      e4m3x2_to_half2(word_low, VOLT8_E4M3_HIGH_PAIR), e4m3x2_to_half2(word_high, VOLT8_E4M3_HIGH_PAIR),
                      b[s][0], b[s][1]);
          }
          const float scale_low = scale_tile[(tile_kind[nt][0] * kBlockN + tile_column[nt][0]) * kScaleKBlocks + k_block];
          const float scale_high = scale_tile[(tile_kind[nt][1] * kBlockN + tile_column[nt][1]) * kScaleKBlocks + k_block];
          acc[nt][0] = fmaf(d[0], scale_low, acc[nt][0]);
          acc[nt][1] = fmaf(d[1], scale_low, acc[nt][1]);
          acc[nt][2] = fmaf(d[2], scale_high, acc[nt][2]);
          acc[nt][3] = fmaf(d[3], scale_high, acc[nt][3]);
        }
      }
      // The slot is used: request its window of the next batch, so about kUnroll windows stay in
      // flight with one register buffer.
      if (batch + 1 < kBatches) load_window(raw[u], row_weights, row_valid, window + kUnroll, window_end, quad_lane);
    }
  }

  if (kSplitK > 1) {
    float *partials = reinterpret_cast<float *>(shared_buffer);  // [slice - 1][warp_n][accumulator][lane]
    __syncthreads();  // every warp is done with the x tile
    if (slice > 0) {
      float *own = partials + ((slice - 1) * kWarpsN + warp_n) * kAccumulators * 32 + lane;
      int v = 0;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) own[32 * v++] = acc[nt][i];
    }
    __syncthreads();
    if (slice > 0) return;
    // Slices are added in slice order: the same inputs give the same bits.
    for (int s = 1; s < kSplitK; ++s) {
      const float *other = partials + ((s - 1) * kWarpsN + warp_n) * kAccumulators * 32 + lane;
      int v = 0;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] += other[32 * v++];
    }
  }

  // Element i: tile row g + 8 * (i >> 1), pair 2c + (i & 1) of the item. gate_up: elements j and
  // j + 2 are the gate and up sums of one column.
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int i = 0; i < (kRows == 2 ? 2 : 4); ++i) {
      const int m = quad_lane * 2 + (i & 1);
      const int column = column0 + tile_column[nt][i >> 1];
      if (m >= kBlockM || m >= count || column >= kN) continue;
      const long long pair = pair_ids[m];
#if VOLT8_GATE_UP
      out[pair * kN + column] = float_to_half(silu_times(acc[nt][i], acc[nt][i + 2]));
#else
      out[pair * kN + column] = topk_weights[pair] * acc[nt][i];
#endif
    }
  }
}
