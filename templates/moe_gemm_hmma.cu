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
// E4M3 -> FP16: on sm_89 and later (FP8_CVT) one cvt.rn.f16x2.e4m3x2 per two codes gives the exact
// values, and the staged scales carry the 2^-8 the bit-level conversion (sm_80..sm_88) folds in.
// With column groups (c > 1, split_k 1 only) a CTA's block_n columns are walked as c groups one after
// the other: x and the scales are staged once, a warp's loads run on across group boundaries, and
// each group's results are stored when its last window is done.
// Weight fetch (f variants): each weight load brings the aligned f-byte block around it into L2
// (moe_common.cu, VOLT8_WEIGHT_FETCH), so a row's next windows are read from L2.
// Early launch (moe_common.cu): block_m 1 kernels in forwards without a route pass, and a routed
// down after its gate_up. A routed gate_up only lets its down start early; it follows the route in
// order and never waits.
// Fused reduce (down, r1 variants): after storing its z rows, a CTA counts one arrival per pair in
// (token, its column tile) counters of the workspace. The CTA whose arrival is the token's last live
// pair reads back every z row of that token for its columns, sums them in pair order as the reduce
// kernel does (the same bits), writes out and resets the counter; the forward launches no reduce.
// A token with no live pair is written as zeros: by the block_m 1 CTA of its first pair, or by the
// route. A block_m 1 fused down also stores the bad-id count the reduce would store.
#define VOLT8_MAY_START_EARLY 1
#define VOLT8_WEIGHT_FETCH @{WEIGHT_FETCH}
@{include moe_common.cu}
@{include moe_expert_range.cu}

#define VOLT8_GATE_UP @{OP_GATE_UP}
#define VOLT8_FUSED_REDUCE @{FUSED_REDUCE}
// Kernels that may start before the kernel before them ends, and so wait for it: all but a routed
// gate_up. A routed down reads its work item (the route's, finished before its gate_up started)
// and requests its first weights before the wait.
#define VOLT8_WAITS (@{BLOCK_M} == 1 || !VOLT8_GATE_UP)

namespace {
constexpr int kBlockM = @{BLOCK_M};
constexpr int kBlockN = @{BLOCK_N};                     // output columns of the CTA
constexpr int kColumnGroups = @{COLUMN_GROUPS};         // walked one after the other
constexpr int kGroupColumns = kBlockN / kColumnGroups;
constexpr int kThreads = @{THREADS};
constexpr int kSplitK = @{SPLIT_K};
constexpr int kUnroll = @{UNROLL};  // steps (windows) whose weights are in flight at once
constexpr int kRows = @{ROWS};      // weight rows per output column: gate and up, or one
constexpr int kK = @{K_DIM};
constexpr int kN = @{N_DIM};
constexpr int kChunks = kK / 16;
constexpr int kWarpsN = @{WARPS} / kSplitK;
constexpr int kTileColumns = 16 / kRows;  // output columns of one 16-row tile
constexpr int kNTiles = kGroupColumns / (kTileColumns * kWarpsN);
constexpr int kPad = @{K_PAD};          // codes before k = 0 in the first window
constexpr int kWindows = @{WINDOWS};    // 64-code windows covering [-kPad, K)
constexpr int kRowHalves = kWindows * 64 + 8;  // x tile row stride: 16 bytes past a multiple of 128
constexpr int kSliceWindows = (kWindows + kSplitK - 1) / kSplitK;
constexpr int kSteps = kColumnGroups * kSliceWindows;  // (group, window) steps of a warp
constexpr int kBatches = (kSteps + kUnroll - 1) / kUnroll;
constexpr int kAccumulators = kNTiles * 4;
@{include moe_expert_layout.cu}
constexpr bool kFp8Convert = @{FP8_CVT};  // the target has cvt.rn.f16x2.e4m3x2 (sm_89 and later)
// The bit-level conversion yields e4m3 * 2^-8, the instruction e4m3 itself: scales are staged to match.
constexpr float kScaleFactor = kFp8Convert ? 1.0f / 256.0f : 1.0f;
constexpr int kXTileBytes = kBlockM * kRowHalves * 2;
constexpr int kPartialBytes = (kSplitK - 1) * kWarpsN * 32 * kAccumulators * 4;
constexpr int kSharedBytes = kXTileBytes > kPartialBytes ? kXTileBytes : kPartialBytes;
static_assert(kK % 16 == 0 && kPad % 16 == 0 && kPad < 64, "k must split into 16-code chunks");
static_assert(kBlockM >= 1 && kBlockM <= 8, "one product serves at most 8 pairs");
static_assert(kNTiles * kTileColumns * kWarpsN * kColumnGroups == kBlockN && kWarpsN * kSplitK == @{WARPS},
              "tile does not fit the warps");
static_assert(kColumnGroups == 1 || kSplitK == 1, "column groups need split_k 1");
static_assert(!VOLT8_FUSED_REDUCE || (!VOLT8_GATE_UP && kSplitK == 1), "only a split_k 1 down fuses the reduce");
}  // namespace

// Waits for the kernel before, in a kernel that may have started before it ended.
static __device__ __forceinline__ void wait_if_started_early() {
#if VOLT8_WAITS
  wait_for_previous_kernels();
#endif
}

@{include moe_work_item.cu}

// Step t of a warp: window t % kWindows of column group t / kWindows (split_k slices have one group).
// Requests this thread's chunk of the step's window in each of its weight rows ([tile][tile row g,
// g+8]) of the step's group. Steps past step_end, chunks outside [0, K) and rows past N read as zeros.
// kBeforeWait: requested before the kernel's wait (load_weights_16_at).
template <bool kBeforeWait>
static __device__ __forceinline__ void load_step(uint4 (&raw)[kNTiles][2], const unsigned char *const (&rows)[kNTiles][2],
                                                 const int (&columns)[kNTiles][2], int step, int step_end, int quad_lane) {
  const int group = kColumnGroups == 1 ? 0 : step / kWindows;
  const int chunk = (kColumnGroups == 1 ? step : step % kWindows) * 4 - kPad / 16 + quad_lane;
  const bool chunk_valid = step < step_end && chunk >= 0 && chunk < kChunks;
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const bool row_valid = columns[nt][h] + group * kGroupColumns < kN;
      raw[nt][h] = (chunk_valid && row_valid)
                       ? load_weights_16_at<kBeforeWait>(rows[nt][h] + (long long)group * kGroupColumns * kK + chunk * 16)
                       : zero_uint4();
    }
}

// Asks L2 for the lines load_step(step) will read (early launch only).
static __device__ __forceinline__ void prefetch_step(const unsigned char *const (&rows)[kNTiles][2],
                                                     const int (&columns)[kNTiles][2], int step, int quad_lane) {
  const int group = kColumnGroups == 1 ? 0 : step / kWindows;
  const int chunk = (kColumnGroups == 1 ? step : step % kWindows) * 4 - kPad / 16 + quad_lane;
  if (chunk < 0 || chunk >= kChunks) return;
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (columns[nt][h] + group * kGroupColumns < kN) prefetch_l2(rows[nt][h] + (long long)group * kGroupColumns * kK + chunk * 16);
    }
}

// Two E4M3 codes (low byte first) -> FP16x2 (low half first).
#if @{FP8_CVT}
static __device__ __forceinline__ unsigned e4m3x2_to_half2_exact(unsigned short pair) {
  unsigned out;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(out) : "h"(pair));
  return out;
}
#endif

// The A-operand halves of word `word`: codes 0,1 (low) and codes 2,3 (high).
static __device__ __forceinline__ void word_to_halves(unsigned word, unsigned &low, unsigned &high) {
#if @{FP8_CVT}
  low = e4m3x2_to_half2_exact((unsigned short)(word & 0xffffu));
  high = e4m3x2_to_half2_exact((unsigned short)(word >> 16));
#else
  low = e4m3x2_to_half2(word, VOLT8_E4M3_LOW_PAIR);
  high = e4m3x2_to_half2(word, VOLT8_E4M3_HIGH_PAIR);
#endif
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
      raw[g] = valid ? load_x_vector<VOLT8_GATE_UP>(activations + row * kK + k) : zero_uint4();
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

// Stores column group `group` of the thread's sums. Element i: tile row g + 8 * (i >> 1), pair
// 2c + (i & 1) of the item; gate_up: elements j and j + 2 are the gate and up sums of one column.
static __device__ __forceinline__ void store_group(const float (&acc)[kNTiles][4], const int (&columns)[kNTiles][2],
                                                   int group, const int *pair_ids, int count, int quad_lane,
#if VOLT8_GATE_UP
                                                   unsigned short *out
#else
                                                   const float *pair_weights, float *out
#endif
) {
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int i = 0; i < (kRows == 2 ? 2 : 4); ++i) {
      const int m = quad_lane * 2 + (i & 1);
      const int column = columns[nt][i >> 1] + group * kGroupColumns;
      if (m >= kBlockM || m >= count || column >= kN) continue;
      const long long pair = pair_ids[m];
#if VOLT8_GATE_UP
      out[pair * kN + column] = float_to_half(silu_times(acc[nt][i], acc[nt][i + 2]));
#else
      out[pair * kN + column] = pair_weights[m] * acc[nt][i];
#endif
    }
  }
}

#if VOLT8_FUSED_REDUCE
constexpr int kIdBatch = 8;  // ids (and z rows) a thread has in flight together

// Pairs of the token whose experts (caller input ids) the kernel holds.
static __device__ __forceinline__ int live_pairs(const int *token_ids, int top_k) {
  int live = 0;
  for (int batch = 0; batch < top_k; batch += kIdBatch) {
    int ids[kIdBatch];
#pragma unroll
    for (int b = 0; b < kIdBatch; ++b) ids[b] = batch + b < top_k ? load_input_before_wait(token_ids + batch + b) : -1;
#pragma unroll
    for (int b = 0; b < kIdBatch; ++b) live += expert_id_valid(local_expert(ids[b]), kNumExperts);
  }
  return live;
}

// out[token][column0 .. column0 + kBlockN) = FP16 of the sum over the token's live pairs, in pair
// order, of their z rows: the reduce kernel's arithmetic (add_live_rows). Every thread calls it, after
// the acquire in arrive_and_reduce: the rows other CTAs stored are read as load_produced reads h.
static __device__ void reduce_token_columns(const float *z, const int *topk_ids, int token, int top_k, int column0,
                                            unsigned short *out) {
  const long long first_pair = (long long)token * top_k;
  for (int c = threadIdx.x * 4; c < kBlockN; c += kThreads * 4) {
    const int column = column0 + c;
    if (column >= kN) break;
    float4 sum = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int batch = 0; batch < top_k; batch += kIdBatch) {
      bool live[kIdBatch];
      float4 values[kIdBatch];
#pragma unroll
      for (int b = 0; b < kIdBatch; ++b) {
        const bool present = batch + b < top_k;
        live[b] = present && expert_id_valid(local_expert(topk_ids[first_pair + batch + b]), kNumExperts);
        // Requested with the ids: a dead pair's row (never stored this forward) is read but not added.
        values[b] = present ? load_produced(reinterpret_cast<const float4 *>(z + (first_pair + batch + b) * kN + column))
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      add_live_rows(sum, live, values);
    }
    store_half4(out + (long long)token * kN + column, sum);
  }
}

// Zeros for out[token][column0 .. column0 + kBlockN): a token none of whose pairs is live.
static __device__ void zero_token_columns(int token, int column0, unsigned short *out) {
  for (int c = threadIdx.x * 4; c < kBlockN && column0 + c < kN; c += kThreads * 4)
    *reinterpret_cast<uint2 *>(out + (long long)token * kN + column0 + c) = make_uint2(0u, 0u);
}

// Adds one arrival; returns the count before it. Release: the CTA's z stores, ordered before it by a
// barrier, are visible to whoever sees the arrival. Acquire: the z stores of the CTAs whose arrivals
// it sees are visible to this CTA after its next barrier.
static __device__ __forceinline__ int arrive(int *counter) {
  int before;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(before) : "l"(counter) : "memory");
  return before;
}

// After the CTA stored the z rows of its pairs: one arrival per pair at (token, column tile); the CTA
// that brings a token's count to its live pairs (live, of thread m < count for pair m) resets the
// counter and reduces that token's columns. Every thread calls it. last_tokens: kBlockM ints of
// shared memory.
static __device__ void arrive_and_reduce(const int *pair_ids, int count, int live, const int *topk_ids, int top_k,
                                         const float *z, unsigned short *out, int *arrivals, int column0,
                                         int *last_tokens) {
  const int tid = threadIdx.x;
  __syncthreads();  // the CTA's z stores come before its arrivals
  if (tid < kBlockM) {
    int last = -1;
    if (tid < count) {
      const int token = pair_ids[tid] / top_k;
      int *counter = arrivals + (long long)token * gridDim.x + blockIdx.x;
      if (arrive(counter) + 1 == live) {
        *counter = 0;  // every arrival of this forward is in: ready for the next one
        last = token;
      }
    }
    last_tokens[tid] = last;
  }
  __syncthreads();  // and the other CTAs' z rows, seen through the arrivals, come before the reads
  for (int m = 0; m < count; ++m)
    if (last_tokens[m] >= 0) reduce_token_columns(z, topk_ids, last_tokens[m], top_k, column0, out);
}
#endif

extern "C" __global__ void __launch_bounds__(kThreads, @{MIN_BLOCKS}) @{ENTRY}(
    const unsigned short *__restrict__ activations, const unsigned char *__restrict__ weights,
    const unsigned short *__restrict__ scales, const int *__restrict__ sorted_pairs,
#if VOLT8_FUSED_REDUCE
    const int4 *__restrict__ items, int *__restrict__ counters,  // block_m 1 stores counters[2]
#else
    const int4 *__restrict__ items, const int *__restrict__ counters,
#endif
#if VOLT8_GATE_UP
    int top_k, unsigned short *__restrict__ out,
#else
    const float *__restrict__ topk_weights, float *__restrict__ out,
#endif
#if VOLT8_FUSED_REDUCE
    const int *__restrict__ topk_ids, int num_pairs, int top_k, unsigned short *__restrict__ reduced,
    int *__restrict__ arrivals) {
#else
    const int *__restrict__ topk_ids, int num_pairs) {
#endif
  // The x tile, later reused for the split-k partial sums.
  __shared__ __align__(16) unsigned char shared_buffer[kSharedBytes];
  __shared__ float scale_tile[kRows * kBlockN * kScaleKBlocks];  // [row kind][column][k block]
  __shared__ int pair_ids[kBlockM];
#if !VOLT8_GATE_UP
  __shared__ float pair_weights[kBlockM];  // each pair's routing weight, staged with its id
#endif
#if VOLT8_FUSED_REDUCE
  __shared__ int last_tokens[kBlockM];
  // The count the reduce kernel would store (a routed forward's route stores it too). Nothing else
  // in this forward writes counters[2]; the ids were written before the forward began.
  if (kBlockM == 1 && blockIdx.x == 0 && blockIdx.y == 0)
    store_bad_id_count(topk_ids, num_pairs, kGlobalExperts, counters + 2);
#endif

  int expert, first, count;
  VOLT8_READ_WORK_ITEM(counters[@{COUNTER_INDEX}], load_input_before_wait(items + blockIdx.y), return wait_if_started_early(),
                       return wait_if_started_early());
  if (!expert_id_valid(expert, kNumExperts) || count <= 0) {
#if VOLT8_FUSED_REDUCE
    // The CTAs of a token's first pair, when it is outside [0, E), write the token's zeros if no
    // pair of it is live: no CTA arrives for such a token.
    if (kBlockM == 1 && (int)blockIdx.y % top_k == 0) {
      const int token = (int)blockIdx.y / top_k;
      __shared__ int token_live;
      if (threadIdx.x == 0) token_live = live_pairs(topk_ids + (long long)token * top_k, top_k);
      __syncthreads();
      wait_if_started_early();
      if (token_live == 0) zero_token_columns(token, blockIdx.x * kBlockN, reduced);
      return;
    }
#endif
    return wait_if_started_early();
  }
#if VOLT8_GATE_UP
  if (top_k <= 0) return wait_if_started_early();
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
  // Steps: with one group, the slice's windows; with several (no split_k), every window of each group.
  const int step_begin = window_begin;
  const int step_end = kColumnGroups == 1 ? window_end : kColumnGroups * kWindows;

  // Tile row g + 8h: gate_up, column g of the tile, gate (h = 0) or up (h = 1); down, column g + 8h.
  // Row pointers, columns and scale offsets are those of group 0; group j adds j * kGroupColumns.
  const unsigned char *row_weights[kNTiles][2];
  int row_column[kNTiles][2], scale_offset[kNTiles][2];
  const unsigned char *expert_weights = weights + expert * kExpertWeightBytes;
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int kind = kRows == 2 ? h : 0;
      const int tile_column = (warp_n * kNTiles + nt) * kTileColumns + (kRows == 2 ? 0 : h * 8) + row_in_tile;
      row_column[nt][h] = column0 + tile_column;
      scale_offset[nt][h] = (kind * kBlockN + tile_column) * kScaleKBlocks;
      row_weights[nt][h] = expert_weights + (long long)(row_column[nt][h] + kind * kUpRowOffset) * kK;
    }
  }

  // The first weights are requested before x and the scales are staged, so the latencies overlap.
  uint4 raw[kUnroll][kNTiles][2];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
    load_step<!VOLT8_GATE_UP>(raw[u], row_weights, row_column, step_begin + u, step_end, quad_lane);
#if !VOLT8_GATE_UP
  // A block_m 1 down, started early, asks L2 for the weights of its later steps while gate_up
  // finishes. A routed down does not: it runs in many waves, where those requests cost more than
  // they save (at M = 128 on the H200 the forward took 197 us with them, 187 us without).
  if (kBlockM == 1)
    for (int step = step_begin + kUnroll; step < step_end; ++step) prefetch_step(row_weights, row_column, step, quad_lane);
#endif
#if VOLT8_FUSED_REDUCE
  // Live pairs of the token of pair m (thread m < count): block_m 1 knows its token now and counts
  // while its weights are on the way; a routed CTA counts once its pairs are staged.
  int live = 0;
  if (kBlockM == 1 && threadIdx.x == 0) live = live_pairs(topk_ids + (long long)(first / top_k) * top_k, top_k);
#endif
  wait_if_started_early();  // down: gate_up wrote h
  allow_next_kernel();

  unsigned short *x_tile = reinterpret_cast<unsigned short *>(shared_buffer);
#if VOLT8_GATE_UP
  stage_pairs(pair_ids, nullptr, sorted_pairs, nullptr, first, count, tid);
#else
  stage_pairs(pair_ids, pair_weights, sorted_pairs, topk_weights, first, count, tid);
#endif
  stage_x(x_tile, activations, sorted_pairs, first, count, x_rows_per_pair);
  unsigned short first_scale_bits[kScaleGroup];
  scale_group_load(first_scale_bits, scales, expert, column0, 0);
  stage_scales(scale_tile, first_scale_bits, scales, expert, column0, kScaleFactor);
  __syncthreads();
#if VOLT8_FUSED_REDUCE
  if (kBlockM > 1 && tid < count) live = live_pairs(topk_ids + (long long)(pair_ids[tid] / top_k) * top_k, top_k);
#endif

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
      const int step = step_begin + batch * kUnroll + u;
      if (step < step_end) {  // warp-uniform: the products below stay converged
        const int group = kColumnGroups == 1 ? 0 : step / kWindows;
        const int window = kColumnGroups == 1 ? step : step % kWindows;
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
            unsigned row_low[2], row_high[2];  // tile rows g and g + 8: codes 0,1 and 2,3 of word s
            word_to_halves(chunk_word(raw[u][nt][0], s), row_low[0], row_high[0]);
            word_to_halves(chunk_word(raw[u][nt][1], s), row_low[1], row_high[1]);
            mma_16816(d, row_low[0], row_low[1], row_high[0], row_high[1], b[s][0], b[s][1]);
          }
          const int group_offset = group * kGroupColumns * kScaleKBlocks + k_block;
          const float scale_low = scale_tile[scale_offset[nt][0] + group_offset];
          const float scale_high = scale_tile[scale_offset[nt][1] + group_offset];
          acc[nt][0] = fmaf(d[0], scale_low, acc[nt][0]);
          acc[nt][1] = fmaf(d[1], scale_low, acc[nt][1]);
          acc[nt][2] = fmaf(d[2], scale_high, acc[nt][2]);
          acc[nt][3] = fmaf(d[3], scale_high, acc[nt][3]);
        }
        if (kColumnGroups > 1 && window == kWindows - 1) {  // the group is done: store it, start the next
          store_group(acc, row_column, group, pair_ids, count, quad_lane,
#if VOLT8_GATE_UP
                      out);
#else
                      pair_weights, out);
#endif
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
        }
      }
      // The slot is used: request its step of the next batch, so about kUnroll steps stay in flight
      // with one register buffer.
      if (batch + 1 < kBatches) load_step<false>(raw[u], row_weights, row_column, step + kUnroll, step_end, quad_lane);
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

  if (kColumnGroups == 1) {
    store_group(acc, row_column, 0, pair_ids, count, quad_lane,
#if VOLT8_GATE_UP
                out);
#else
                pair_weights, out);
#endif
  }
#if VOLT8_FUSED_REDUCE
  arrive_and_reduce(pair_ids, count, live, topk_ids, top_k, out, reduced, arrivals, column0, last_tokens);
#endif
}
