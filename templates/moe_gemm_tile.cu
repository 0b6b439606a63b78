// Grouped FP8 GEMM for many pairs an expert (prefill sizes): work items of 32, 64 or 128 routed pairs
// of one expert (the route sorts the pairs by expert and cuts each expert's run into items), tiles
// large enough that each weight, turned into FP16 once per CTA, serves every pair of the item. Same
// operation as moe_gemm_cc.cu.
//
// A CTA computes block_m pairs x kWeightRows weight rows (gate_up: block_n gate rows and the block_n
// up rows of the same output columns; down: block_n rows), walking K in steps of kStepK codes with two
// shared-memory buffers:
//   x:       block_m rows of FP16, gathered through the item's pairs (gate_up: the pair's token row of
//            the input; down: the pair's row of h), zeros past the item's count and past K;
//   weights: kWeightRows rows of FP16, each 16-code chunk turned from E4M3 by the bit-level conversion
//            (sign | (code & 0x7F) << 7, which is code * 2^-8 exactly). The products sum them in units
//            of their block's scale, applied in FP32 (moe_item_steps.cu: where a rank's K starts at an
//            odd multiple of 16 in the scale grid the steps start 16 codes early, so that none
//            straddles a scale block).
// Step s + 1's weights are turned into FP16 while step s is multiplied, and the loads run ahead of
// the products: on sm_80 and later by three steps for 64-pair items and two for 32 and 128 (x by cp.async into
// one buffer more than that, the weights' bytes into registers that many steps before their
// conversion); on sm_70 by one (x and weights into registers, stored after the products). Rows are 64 bytes, unpadded: chunk c (8 halves) of row r is stored at
// c ^ swizzle(r), which puts the fragment loads of a quarter warp (sm_70) or of an ldmatrix phase
// (sm_80) on distinct banks.
// Products, FP32 accumulators, 2 x kWarpsN warps, each warp a kWarpM x 32 tile of pairs x weight rows:
//   sm_80 and later: mma.sync.aligned.m16n8k16 from ldmatrix fragments;
//   sm_70: mma.sync.aligned.m8n8k4 (PTX ISA, .f16, .row.col, .f32 accumulators): quad pair q (lanes
//     4q..4q+3 and 16+4q..16+4q+3) takes the 8 x 8 block (row half q & 1, column half q >> 1) of each
//     16 x 16 block; within it, with r = (lane & 3) + 4 * (lane >= 16), A is row r and B column r, four
//     k each, and accumulator i lies at row (lane & 1) + (i & 2) + 4 * (lane >= 16), column (i & 4) +
//     (lane & 2) + (i & 1).
// gate_up stores h = FP16(silu(gate) * up) for its pairs; down stores z = FP16(weight * sum), half the
// bytes of the other downs' FP32 rows, which reduce_half adds per token in FP32. Pad rows of an item
// are never stored.
@{include moe_common.cu}
@{include moe_expert_range.cu}

#define VOLT8_GATE_UP @{OP_GATE_UP}

namespace {
@{include moe_item_constants.cu}
constexpr int kWarpsM = 2;
constexpr int kWarpsN = @{WARPS} / kWarpsM;
constexpr int kWarpM = kBlockM / kWarpsM;        // pairs of a warp's tile
constexpr int kWarpN = kWeightRows / kWarpsN;    // weight rows of a warp's tile
constexpr int kXChunks = kBlockM * (kStepK / 8) / kThreads;  // 16-byte x chunks a thread a step
constexpr int kRowHalves = kStepK;               // 64-byte rows, chunks swizzled
#if __CUDA_ARCH__ >= 800
// Steps the loads run ahead of the products: three for 64-pair items, two for 32 and 128 (the 128-pair
// x buffers would not fit a third in 48 KiB); x by cp.async into kAhead + 1 buffers.
constexpr int kAhead = kBlockM == 64 ? 3 : 2;
constexpr int kXBuffers = kAhead + 1;
#else
constexpr int kAhead = 1;
constexpr int kXBuffers = 2;
#endif
constexpr int kXBufferHalves = kBlockM * kRowHalves;
constexpr int kWBufferHalves = kWeightRows * kRowHalves;
@{include moe_expert_layout.cu}
@{include moe_item_steps.cu}
static_assert(kWarpsN * kWarpsM == @{WARPS} && kWarpN == 32 && kWarpM % 16 == 0, "tile does not fit the warps");
static_assert(kWeightRows * (kStepK / 16) == kThreads, "one weight chunk a thread a step");
static_assert(kXChunks >= 1 && kXChunks * kThreads == kBlockM * (kStepK / 8), "x chunks must spread evenly");
static_assert(kK % 16 == 0 && kScaleKOffset % 16 == 0, "k must split into 16-code chunks");
static_assert(kAhead >= 1 && kAhead <= 3, "the main loop names at most three register slots");
}  // namespace

@{include moe_work_item.cu}

// A register slot named at compile time, so that arrays indexed by it stay in registers.
template <int kValue>
struct Slot {
  static constexpr int value = kValue;
};

// Halves offset of 16-byte chunk c (8 halves) of row r in a buffer. Two rows share a 128-byte line;
// sm_80's ldmatrix reads chunk c of 8 consecutive rows, sm_70's quarter warps chunk c of rows 0..3 and
// 8..11 (or 4..7 and 12..15) of a 16-row block.
static __device__ __forceinline__ int chunk_offset(int r, int c) {
#if __CUDA_ARCH__ >= 800
  return r * kRowHalves + ((c ^ ((r >> 1) & 3)) * 8);
#else
  return r * kRowHalves + ((c ^ (((r >> 1) & 1) | ((r >> 2) & 2))) * 8);
#endif
}

@{include moe_item_tile.cu}

static __device__ __forceinline__ void store_shared_16(unsigned short *buffer, int offset, uint4 value) {
  *reinterpret_cast<uint4 *>(buffer + offset) = value;
}

// 16 codes -> 16 FP16 weights, code * 2^-8 exactly (the scales are applied to the sums).
static __device__ __forceinline__ void convert_chunk(uint4 raw, uint4 &low, uint4 &high) {
  const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
  unsigned out[8];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
#if __CUDA_ARCH__ < 800
    out[2 * w] = e4m3x2_to_half2_shift(words[w], VOLT8_E4M3_LOW_SPREAD);
    out[2 * w + 1] = e4m3x2_to_half2_shift(words[w], VOLT8_E4M3_HIGH_SPREAD);
#else
    out[2 * w] = e4m3x2_to_half2(words[w], VOLT8_E4M3_LOW_PAIR);
    out[2 * w + 1] = e4m3x2_to_half2(words[w], VOLT8_E4M3_HIGH_PAIR);
#endif
  }
  low = make_uint4(out[0], out[1], out[2], out[3]);
  high = make_uint4(out[4], out[5], out[6], out[7]);
}

#if __CUDA_ARCH__ >= 800
static __device__ __forceinline__ void copy_async_16(unsigned short *buffer, int offset, const unsigned short *source,
                                                     bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(buffer + offset)), "l"(source),
               "r"(valid ? 16 : 0));
}
static __device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;"); }
// Waits until at most `pending` of this thread's groups are in flight.
template <int pending>
static __device__ __forceinline__ void copy_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(pending)); }

static __device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const unsigned short *address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(address)));
}

constexpr int kMTiles = kWarpM / 16, kNTiles = kWarpN / 8;  // m16 x n8 products of a warp's tile
constexpr int kAccumulators = 4;
constexpr int kTileRows = 2;  // weight rows of a thread's accumulators in an n8 tile: 2t, 2t + 1 (e & 1)
#else
static __device__ __forceinline__ void mma_884(float (&acc)[8], unsigned a0, unsigned a1, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9}, {%10, %11}, {%0, %1, %2, %3, %4, %5, %6, %7};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]), "+f"(acc[6]),
        "+f"(acc[7])
      : "r"(a0), "r"(a1), "r"(b0), "r"(b1));
}
constexpr int kMTiles = kWarpM / 16, kNTiles = kWarpN / 16;  // 16 x 16 blocks of a warp's tile
constexpr int kAccumulators = 8;
constexpr int kTileRows = 4;  // weight rows of a thread's accumulators in a 16 x 16 block (e & 4, e & 1)
#endif
// The scales a thread's accumulators are counted in ("units"). Where the rows of a 16-row group share
// one (kScaleRowGroups), a warp's 32 weight rows take one a row kind: gate_up's 16 gate rows and the
// up rows of the same columns, or down's 32 rows, which lie in one scale block where blocks are 32-row
// aligned (down's rows start at 0 of the grid); else one a row.
constexpr bool kUnitPerKind = kScaleRowGroups && (kRows == 2 || (kScaleBlockN % 32 == 0 && kScaleRowOffset % 32 == 0));
constexpr int kUnits = kUnitPerKind ? kRows : kScaleRowGroups ? kWarpN / 16 : kNTiles * kTileRows;

// Accumulator e of tile j's unit, and the warp's weight row (0..31) of unit u.
static __device__ __forceinline__ int accumulator_unit(int j, int e) {
#if __CUDA_ARCH__ >= 800
  if (kUnitPerKind) return kRows == 2 ? j / 2 : 0;
  return kScaleRowGroups ? j / 2 : j * kTileRows + (e & 1);
#else
  if (kUnitPerKind) return kRows == 2 ? j : 0;
  return kScaleRowGroups ? j : j * kTileRows + ((e >> 1) & 2) + (e & 1);
#endif
}
static __device__ __forceinline__ int unit_row(int u, int lane) {
  if (kScaleRowGroups) return u * 16;
  const int j = u / kTileRows, c = u % kTileRows;
#if __CUDA_ARCH__ >= 800
  return j * 8 + 2 * (lane & 3) + c;
#else
  return j * 16 + (((lane >> 2) & 3) >> 1) * 8 + (c >> 1) * 4 + (lane & 2) + (c & 1);
#endif
}

extern "C" __global__ void __launch_bounds__(kThreads, @{MIN_BLOCKS}) @{ENTRY}(VOLT8_ITEM_GEMM_PARAMETERS) {
  __shared__ __align__(16) unsigned short x_buffers[kXBuffers * kXBufferHalves];
  __shared__ __align__(16) unsigned short w_buffers[2 * kWBufferHalves];
  __shared__ int pair_ids[kBlockM];
#if !VOLT8_GATE_UP
  __shared__ float pair_weights[kBlockM];
#endif
  int expert, first, count;
  VOLT8_READ_WORK_ITEM(counters[@{COUNTER_INDEX}], items[blockIdx.y], return, return);
  if (!expert_id_valid(expert, kNumExperts) || count <= 0) return;
#if VOLT8_GATE_UP
  if (top_k <= 0) return;
  const int x_rows_per_pair = top_k;
#else
  const int x_rows_per_pair = 1;  // rows of h are pairs
#endif
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int warp_m = warp / kWarpsN, warp_n = warp % kWarpsN;
  const int column0 = blockIdx.x * kBlockN;

#if VOLT8_GATE_UP
  stage_pairs(pair_ids, nullptr, sorted_pairs, nullptr, first, count, tid);
#else
  stage_pairs(pair_ids, pair_weights, sorted_pairs, topk_weights, first, count, tid);
#endif
  __syncthreads();

  // This thread's x chunks: row tid / 4 + i * kThreads / 4, 16-byte column tid % 4 of each step.
  const unsigned short *x_rows[kXChunks];
  int x_offsets[kXChunks];
#pragma unroll
  for (int i = 0; i < kXChunks; ++i) {
    const int r = tid / 4 + i * (kThreads / 4);
    x_rows[i] = r < count ? activations + (long long)(pair_ids[r] / x_rows_per_pair) * kK : nullptr;
    x_offsets[i] = chunk_offset(r, tid % 4);
  }
  // This thread's weight chunk: tile row tid / 2, codes (tid % 2) * 16.. of each step.
  const int w_row = tid / 2, w_half = tid % 2;
  const int w_kind = kRows == 2 && w_row >= kBlockN ? 1 : 0;
  const int w_column = column0 + w_row - w_kind * kBlockN;
  const bool w_valid = w_column < kN;
  const unsigned char *w_source =
      weights + expert * kExpertWeightBytes + (long long)(w_column + w_kind * kUpRowOffset) * kK + w_half * 16;
  const int w_offsets[2] = {chunk_offset(w_row, 2 * w_half), chunk_offset(w_row, 2 * w_half + 1)};

  // Where the scales of this thread's accumulator rows lie (a row past N takes the last column's: its
  // codes are zeros, so any scale leaves its products zero, and it is never stored), and the FP16 bits
  // of those of step s's block (past K the last block's).
  // One a row kind (kUnitPerKind): the up rows' are the gate rows' a constant further.
  constexpr int kUnitPointers = kUnitPerKind ? 1 : kUnits;
  const unsigned short *unit_scales[kUnitPointers];
#pragma unroll
  for (int u = 0; u < kUnitPointers; ++u) {
    const int row = weight_tile_row(warp_n, unit_row(u, lane));
    const int kind = kRows == 2 && row >= kBlockN ? 1 : 0;
    const int column = min(column0 + row - kind * kBlockN, kN - 1);
    unit_scales[u] = scales + expert * kScaleExpertStride + kind * kScaleHalfStride +
                     ((kScaleRowOffset + column) / kScaleBlockN) * kScaleRowStride;
  }
  auto load_scales = [&](int s, unsigned short (&bits)[kUnits]) {
    const int block = min((kScaleKOffset - kKPad + s * kStepK) / kScaleBlockK, kLastScaleBlock);
#pragma unroll
    for (int u = 0; u < kUnits; ++u)
      bits[u] = __ldg(kUnitPerKind ? unit_scales[0] + u * kScaleHalfStride + block : unit_scales[u] + block);
  };
  // (Where K lies in one scale block they are read after the steps, so that nothing of them is live
  // across the loop.)
  unsigned short scale_bits[kUnits];
  if (kLastScaleBlock > 0) load_scales(0, scale_bits);

  // Weights' bytes of the steps loaded but not yet converted (slot s % kAhead); sm_70 also keeps the
  // next step's x here.
  uint4 w_raw[kAhead];
#if __CUDA_ARCH__ < 800
  uint4 x_raw[kXChunks];
#endif
  // Requests step s's x (cp.async into its buffer, or into x_raw) and weights (into slot s % kAhead).
  auto load_step = [&](int s, auto slot) {
    const int k = s * kStepK - kKPad;
#pragma unroll
    for (int i = 0; i < kXChunks; ++i) {
      const int kx = k + (tid % 4) * 8;
      const bool valid = x_rows[i] != nullptr && (kKPad == 0 || kx >= 0) && kx < kK;
#if __CUDA_ARCH__ >= 800
      copy_async_16(x_buffers + (s % kXBuffers) * kXBufferHalves, x_offsets[i], valid ? x_rows[i] + kx : activations,
                    valid);
#else
      x_raw[i] = valid ? load_x_vector<VOLT8_GATE_UP>(x_rows[i] + kx) : zero_uint4();
#endif
    }
    const int kw = k + w_half * 16;
    const bool valid = w_valid && (kKPad == 0 || kw >= 0) && kw < kK;
    w_raw[decltype(slot)::value] = valid ? load_weights_16(w_source + k) : zero_uint4();
  };
  // Stores step s's loads that came through registers: the weights turned into FP16 (and sm_70's x).
  auto store_step = [&](int s, auto slot) {
#if __CUDA_ARCH__ < 800
#pragma unroll
    for (int i = 0; i < kXChunks; ++i) store_shared_16(x_buffers + (s % kXBuffers) * kXBufferHalves, x_offsets[i], x_raw[i]);
#endif
    uint4 low, high;
    convert_chunk(w_raw[decltype(slot)::value], low, high);
    store_shared_16(w_buffers + (s & 1) * kWBufferHalves, w_offsets[0], low);
    store_shared_16(w_buffers + (s & 1) * kWBufferHalves, w_offsets[1], high);
  };

  // acc[i][j][e] in units of the scale unit[accumulator_unit(j, e)] of its row's current block.
  float acc[kMTiles][kNTiles][kAccumulators];
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int j = 0; j < kNTiles; ++j)
#pragma unroll
      for (int e = 0; e < kAccumulators; ++e) acc[i][j][e] = 0.0f;
  float unit[kUnits];
#pragma unroll
  for (int u = 0; u < kUnits; ++u) unit[u] = kLastScaleBlock > 0 ? half_to_float(scale_bits[u]) : 0.0f;
#if __CUDA_ARCH__ < 800
  // The first rows of this lane's fragments, each as its chunk 0's offset: a row is a whole number of
  // 32 halves and a swizzled chunk's offset within it below 32, so chunk c of the row lies at key ^ c *
  // 8 (chunk_offset); the lane's other rows are whole 16-row tiles further, which the swizzle (rows' bits
  // 1 and 3) does not see, so their offsets are the key's plus a constant.
  static_assert(kRowHalves % 32 == 0 && kStepK / 8 <= 4, "chunk offsets must XOR into a row's key");
  constexpr int kBTileHalves = (VOLT8_GATE_UP ? kBlockN : 16) * kRowHalves;  // weight_tile_row of n + 16
  constexpr int kATileHalves = 16 * kRowHalves;
  static_assert(kBlockN % 16 == 0, "a tile of 16 weight rows keeps the swizzle");
  int b_key, a_key;
  {
    const int quad_pair = (lane >> 2) & 3, r = (lane & 3) + 4 * (lane >> 4);
    b_key = chunk_offset(weight_tile_row(warp_n, (quad_pair >> 1) * 8 + r), 0);
    a_key = chunk_offset(warp_m * kWarpM + (quad_pair & 1) * 8 + r, 0);
  }
#endif

  // Prologue: steps 0 .. kAhead - 1 requested, step 0 stored. Every thread commits one cp.async group
  // a step (empty past the last), so "all but the newest kAhead - 1 groups" is always the next step's x.
  load_step(0, Slot<0>());
#if __CUDA_ARCH__ >= 800
  copy_async_commit();
  if (1 < kSteps) load_step(1, Slot<1 % kAhead>());
  copy_async_commit();
  if (kAhead > 2) {
    if (2 < kSteps) load_step(2, Slot<2 % kAhead>());
    copy_async_commit();
  }
#endif
  store_step(0, Slot<0>());
#if __CUDA_ARCH__ >= 800
  copy_async_wait<kAhead - 1>();
#endif
  __syncthreads();
  // After step s's products: where step s + 1 starts a scale block, its scales are read and the sums so
  // far go into their units (times old / new, in FP32). Not where K lies in one block. gate_up calls it
  // inside the step (after the next step's weights are converted), down between the steps: where each
  // keeps the fewest registers (the sm_70 CUBINs of the shipped tables' shapes, volt8 list --resources).
  constexpr bool kRescaleInStep = VOLT8_GATE_UP;
  auto next_starts_block = [](int s) {
    return kLastScaleBlock > 0 && s + 1 < kSteps && ((s + 1) & (kStepsPerBlock - 1)) == kBlockPhase;
  };
  auto rescale_after = [&](int s) {
    float ratio[kUnits];
    load_scales(s + 1, scale_bits);
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const float next = half_to_float(scale_bits[u]);
      ratio[u] = __fdividef(unit[u], next);
      unit[u] = next;
    }
#pragma unroll
    for (int i = 0; i < kMTiles; ++i)
#pragma unroll
      for (int j = 0; j < kNTiles; ++j)
#pragma unroll
        for (int e = 0; e < kAccumulators; ++e) acc[i][j][e] *= ratio[accumulator_unit(j, e)];
  };
  // One step; slot: s % kAhead, where step s + kAhead's weights go and from which the slot after it,
  // step s + 1's, is converted.
  auto run_step = [&](int s, auto slot) {
    // Buffers step s + kAhead loads into were last read by step s - 1, before the barrier that ended it.
    if (s + kAhead < kSteps) load_step(s + kAhead, slot);
    const bool next_block = next_starts_block(s);
#if __CUDA_ARCH__ >= 800
    copy_async_commit();
#endif
    const unsigned short *xb = x_buffers + (s % kXBuffers) * kXBufferHalves;
    const unsigned short *wb = w_buffers + (s & 1) * kWBufferHalves;
#if __CUDA_ARCH__ >= 800
#pragma unroll
    for (int kk = 0; kk < kStepK / 16; ++kk) {
      // The weight fragments first, then one row tile of x at a time (fewer registers live).
      unsigned b[kNTiles][2];
#pragma unroll
      for (int j = 0; j < kNTiles; j += 2) {
        unsigned r[4];
        const int n = j * 8 + (lane >> 4) * 8 + (lane & 7);
        ldmatrix_x4(r, wb + chunk_offset(weight_tile_row(warp_n, n), kk * 2 + ((lane >> 3) & 1)));
        b[j][0] = r[0], b[j][1] = r[1], b[j + 1][0] = r[2], b[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < kMTiles; ++i) {
        unsigned a[4];
        ldmatrix_x4(a, xb + chunk_offset(warp_m * kWarpM + i * 16 + (lane & 15), kk * 2 + (lane >> 4)));
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) mma_16816(acc[i][j], a[0], a[1], a[2], a[3], b[j][0], b[j][1]);
      }
    }
#else
#pragma unroll
    for (int c = 0; c < kStepK / 8; ++c) {  // 8 k a chunk: two k4 products
      uint4 b[kNTiles];
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) b[j] = *reinterpret_cast<const uint4 *>(wb + (b_key ^ (c * 8)) + j * kBTileHalves);
#pragma unroll
      for (int i = 0; i < kMTiles; ++i) {
        const uint4 a = *reinterpret_cast<const uint4 *>(xb + (a_key ^ (c * 8)) + i * kATileHalves);
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          mma_884(acc[i][j], a.x, a.y, b[j].x, b[j].y);
          mma_884(acc[i][j], a.z, a.w, b[j].z, b[j].w);
        }
      }
    }
#endif
    if (s + 1 < kSteps) store_step(s + 1, Slot<(decltype(slot)::value + 1) % kAhead>());
    if (kRescaleInStep && next_block) rescale_after(s);
#if __CUDA_ARCH__ >= 800
    copy_async_wait<kAhead - 1>();
#endif
    __syncthreads();
  };
  for (int s = 0; s < kSteps; s += kAhead) {
    run_step(s, Slot<0>());
    if (!kRescaleInStep && next_starts_block(s)) rescale_after(s);
    if (kAhead > 1 && s + 1 < kSteps) {
      run_step(s + 1, Slot<1 % kAhead>());
      if (!kRescaleInStep && next_starts_block(s + 1)) rescale_after(s + 1);
    }
    if (kAhead > 2 && s + 2 < kSteps) {
      run_step(s + 2, Slot<2 % kAhead>());
      if (!kRescaleInStep && next_starts_block(s + 2)) rescale_after(s + 2);
    }
  }

  // The sums go out in FP32 times the last block's scales (multiplied where each is stored).
  if (kLastScaleBlock == 0) {
    load_scales(0, scale_bits);
#pragma unroll
    for (int u = 0; u < kUnits; ++u) unit[u] = half_to_float(scale_bits[u]);
  }
  auto scale = [&](int j, int e) { return unit[accumulator_unit(j, e)]; };

  // Stores: a thread's accumulators in pairs of adjacent columns.
#if __CUDA_ARCH__ >= 800
#if VOLT8_GATE_UP
  store_16816(acc, pair_ids, nullptr, out, count, column0, warp_m, warp_n, lane, scale);
#else
  store_16816(acc, pair_ids, pair_weights, out, count, column0, warp_m, warp_n, lane, scale);
#endif
#else
#if !VOLT8_GATE_UP
  unsigned short *z_half = reinterpret_cast<unsigned short *>(out);  // z of FP16 in the workspace's z
#endif
  // m8n8k4: e at row (lane & 1) + (e & 2) + 4 (lane >= 16), column (e & 4) + (lane & 2) + (e & 1) of the
  // quad pair's 8 x 8 block.
  const int quad_pair = (lane >> 2) & 3;
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      const int m = warp_m * kWarpM + i * 16 + (quad_pair & 1) * 8 + (lane & 1) + (e & 2) + 4 * (lane >> 4);
      if (m >= count) continue;
      const int pair = pair_ids[m];
      const int within = (quad_pair >> 1) * 8 + (e & 4) + (lane & 2);
#if VOLT8_GATE_UP
      const int column = column0 + warp_n * 16 + within;
      if (column >= kN) continue;
      *reinterpret_cast<unsigned *>(out + (long long)pair * kN + column) =
          pack_halves(float_to_half(silu_times(acc[i][0][e] * scale(0, e), acc[i][1][e] * scale(1, e))),
                      float_to_half(silu_times(acc[i][0][e + 1] * scale(0, e + 1), acc[i][1][e + 1] * scale(1, e + 1))));
#else
      const float weight = pair_weights[m];
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        const int column = column0 + warp_n * 32 + j * 16 + within;
        if (column >= kN) continue;
        *reinterpret_cast<unsigned *>(z_half + (long long)pair * kN + column) =
            pack_halves(float_to_half(weight * scale(j, e) * acc[i][j][e]),
                        float_to_half(weight * scale(j, e + 1) * acc[i][j][e + 1]));
      }
#endif
    }
#endif
}
