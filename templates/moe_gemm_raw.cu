// Grouped FP8 GEMM for many pairs an expert, sm_80 and later: the work items of moe_gemm_tile.cu (32,
// 64 or 128 routed pairs of one expert), with the weights kept as E4M3 codes in shared memory. The
// tile family turns its weight tile into FP16 in shared memory and reads it back with ldmatrix, six
// bytes of shared-memory traffic a weight (its store and two warps' reads) against two here (the
// code's copy in and one warp's read), and shared memory, not the tensor cores, bounds the tile
// family at these sizes. Same operation as moe_gemm_cc.cu.
//
// A CTA computes block_m pairs x kWeightRows weight rows (gate_up: block_n gate rows and the block_n
// up rows of the same output columns; down: block_n rows), walking K in steps of kStepK codes through
// kStages shared-memory stages filled by cp.async (loads kStages - 1 steps ahead of the products):
//   x:       block_m rows of FP16, gathered through the item's pairs (gate_up: the pair's token row of
//            the input; down: the pair's row of h), zeros past the item's count and past K;
//   weights: kWeightRows rows of kStepK E4M3 codes, zeros past N and past K.
// Each warp takes kWarpM pairs x 32 weight rows, the rows as the products' m16 operand and the pairs
// as their n8 one, so that no operand is copied between registers. Its m16n8k16 products read K in a
// permuted order, the same for both operands (a dot product's terms in any order): product kk of a
// step takes, from lane (g = lane / 4, t = lane % 4), the codes 8t + 4kk .. 8t + 4kk + 3 of its weight
// rows g and g + 8, which one 8-byte load of each row brings for both products, and the same K of x
// through one 16-byte load a pair. The codes become FP16 in registers (code * 2^-8, exactly:
// moe_common.cu), and the products sum them in units of their block's scale, applied in FP32
// (moe_item_steps.cu: steps start 16 codes early where K does, so that none straddles a scale block).
// Rows are stored unpadded: an 8-byte load of 16 lanes and a 16-byte load of 8 lanes each read 128
// consecutive bytes, on distinct banks.
// gate_up stores h = FP16(silu(gate) * up) for its pairs; down stores z = FP16(weight * sum), which
// reduce_half adds per token in FP32. Pad rows of an item are never stored.
// The weights' cp.async brings the whole aligned block of VOLT8_WEIGHT_FETCH bytes around each 16 into
// L2 (.f256: a row's next seven steps), moe_common.cu's prefetch size.
#define VOLT8_WEIGHT_FETCH @{WEIGHT_FETCH}
@{include moe_common.cu}
@{include moe_expert_range.cu}

#define VOLT8_GATE_UP @{OP_GATE_UP}

namespace {
@{include moe_item_constants.cu}
constexpr int kStages = @{STAGES};
constexpr int kWarpsN = kWeightRows / 32;        // a warp takes 32 weight rows
constexpr int kWarpsM = @{WARPS} / kWarpsN;
constexpr int kWarpM = kBlockM / kWarpsM;        // pairs of a warp's tile
constexpr int kWarpN = kWeightRows / kWarpsN;    // weight rows of a warp's tile
constexpr int kXRowBytes = 2 * kStepK;           // a step of an x row: 32 FP16 values
constexpr int kWRowBytes = kStepK;               // a step of a weight row: 32 codes
constexpr int kXStageBytes = kBlockM * kXRowBytes;
constexpr int kStageBytes = kXStageBytes + kWeightRows * kWRowBytes;
constexpr int kXChunks = kBlockM * (kXRowBytes / 16) / kThreads;      // 16-byte x chunks a thread a step
constexpr int kWChunks = kWeightRows * (kWRowBytes / 16) / kThreads;  // 16-byte weight chunks a thread a step
// A warp's products take its weight rows as the m16 operand (A) and its pairs as the n8 one (B):
// two m16 tiles of 16 weight rows (n8 tiles j = 2r, 2r + 1 of the rows' lanes) by kWarpM / 8 tiles of 8
// pairs. Each A register is a conversion's result, written where the product reads it; each pair of
// B registers is half of one 16-byte load of x, so no register is copied to line operands up.
constexpr int kNTiles = kWarpN / 8;                          // 8-row groups of the warp's weight rows
constexpr int kRowTiles = kWarpN / 16, kPairTiles = kWarpM / 8;
@{include moe_expert_layout.cu}
@{include moe_item_steps.cu}
static_assert(kWarpsN * kWarpsM == @{WARPS} && kWarpN == 32 && kWarpM % 8 == 0, "tile does not fit the warps");
static_assert(kXChunks >= 1 && kXChunks * kThreads == kBlockM * (kXRowBytes / 16), "x chunks must spread evenly");
static_assert(kWChunks >= 1 && kWChunks * kThreads == kWeightRows * (kWRowBytes / 16), "weight chunks must spread evenly");
static_assert(kK % 16 == 0 && kScaleKOffset % 16 == 0, "k must split into 16-code chunks");
static_assert(kStages >= 3, "the loads run at least two steps ahead");
}  // namespace

@{include moe_work_item.cu}
@{include moe_item_tile.cu}

// 16 bytes to shared memory, zeros where !valid (source then only has to be a valid address).
static __device__ __forceinline__ void copy_async_16(unsigned address, const void *source, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(address), "l"(source), "r"(valid ? 16 : 0)
               : "memory");
}
// The same for weights, with the variant's L2 prefetch size.
static __device__ __forceinline__ void copy_async_weights_16(unsigned address, const void *source, bool valid) {
  asm volatile("cp.async.cg.shared.global" VOLT8_WEIGHT_FETCH_SIZE " [%0], [%1], 16, %2;" ::"r"(address), "l"(source),
               "r"(valid ? 16 : 0)
               : "memory");
}
static __device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most `pending` of this thread's groups are in flight.
template <int pending>
static __device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(pending) : "memory");
}

static __device__ __forceinline__ uint2 load_shared_8(unsigned address) {
  uint2 value;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(value.x), "=r"(value.y) : "r"(address));
  return value;
}
static __device__ __forceinline__ uint4 load_shared_16(unsigned address) {
  uint4 value;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(value.x), "=r"(value.y), "=r"(value.z), "=r"(value.w)
               : "r"(address));
  return value;
}

extern "C" __global__ void __launch_bounds__(kThreads, @{MIN_BLOCKS}) @{ENTRY}(VOLT8_ITEM_GEMM_PARAMETERS) {
  __shared__ __align__(128) unsigned char stages[kStages * kStageBytes];
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
  const int g = lane >> 2, t = lane & 3;
  const int column0 = blockIdx.x * kBlockN;
  const unsigned stages_base = shared_address(stages);

  // This thread's weight chunks: chunk q is tile row q / 2, codes (q % 2) * 16.. of a step.
  // A chunk past N reads nothing (bit i of w_live clear) from the weights' first byte.
  const unsigned char *w_sources[kWChunks];
  unsigned w_offsets[kWChunks], w_live = 0;
#pragma unroll
  for (int i = 0; i < kWChunks; ++i) {
    const int q = tid + i * kThreads, row = q / 2;
    const int kind = kRows == 2 && row >= kBlockN ? 1 : 0;
    const int column = column0 + row - kind * kBlockN;
    w_sources[i] = column < kN ? weights + expert * kExpertWeightBytes + (long long)(column + kind * kUpRowOffset) * kK +
                                     (q % 2) * 16
                               : weights;
    w_live |= (column < kN ? 1u : 0u) << i;
    w_offsets[i] = (unsigned)(kXStageBytes + row * kWRowBytes + (q % 2) * 16);
  }
  // Step s's weights (K from s * kStepK - kKPad) into the stage at `stage`. Where every chunk of a step
  // s < kSteps lies in [0, K) (kWholeSteps), the compare goes at compile time, and a chunk past N reads
  // from the weights' first bytes at the same k (a valid address) without a select.
  auto load_weights_step = [&](unsigned stage, int s) {
    const int k = s * kStepK - kKPad;
#pragma unroll
    for (int i = 0; i < kWChunks; ++i) {
      const int kw = k + (int)(w_offsets[i] % 32);
      const bool valid = ((w_live >> i) & 1u) && (kWholeSteps || (kw >= 0 && kw < kK));
      copy_async_weights_16(stage + w_offsets[i], w_sources[i] + (kWholeSteps || valid ? k : 0), valid);
    }
  };

  // This lane's weight rows (row g of each n8 tile of the warp's 32) and where their scales lie. A row
  // past N takes the scales of the last column: its codes are zeros (w_live), so any scale leaves its
  // products zero, and it is never stored.
  unsigned w_rows[kNTiles];
  const unsigned short *row_scales[kNTiles];
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
    const int row = weight_tile_row(warp_n, j * 8 + g);
    const int kind = kRows == 2 && row >= kBlockN ? 1 : 0;
    const int column = min(column0 + row - kind * kBlockN, kN - 1);
    w_rows[j] = (unsigned)(kXStageBytes + row * kWRowBytes + t * 8);
    row_scales[j] = scales + expert * kScaleExpertStride + kind * kScaleHalfStride +
                    ((kScaleRowOffset + column) / kScaleBlockN) * kScaleRowStride;
  }
  // The FP16 bits of the scale of step s's block in each of this lane's rows (past K the last block's).
  // Where scale blocks span whole 16-row groups, rows g and g + 8 of a row tile share one scale, so a
  // row tile loads one.
  constexpr int kScaleRowsShared = kScaleRowGroups ? 2 : 1;
  auto load_scales = [&](int s, unsigned short (&bits)[kNTiles]) {
    const int block = min((kScaleKOffset - kKPad + s * kStepK) / kScaleBlockK, kLastScaleBlock);
#pragma unroll
    for (int j = 0; j < kNTiles; j += kScaleRowsShared) {
      bits[j] = __ldg(row_scales[j] + block);
      if (kScaleRowsShared == 2) bits[j + 1] = bits[j];
    }
  };
  // This lane's x row of the warp's pairs: pair g of each tile of 8.
  const unsigned x_lane = (unsigned)((warp_m * kWarpM + g) * kXRowBytes + t * 16);
  // Variants capped at four CTAs an SM skip the products of the warp's pairs past the item's count, 16
  // at a time (two tiles of 8: one branch, the same for the whole warp, every 16 pairs). Elsewhere the
  // branch costs more than it saves (it splits the unrolled products, which ptxas then schedules apart).
  constexpr bool kSkipPadding = @{MIN_BLOCKS} >= 4;
  const int live_tiles = kSkipPadding ? min(kPairTiles, max(0, (count - warp_m * kWarpM + 15) / 16) * 2) : kPairTiles;

  // acc[r][p]: weight rows r * 16 + g (e 0, 1) and r * 16 + g + 8 (e 2, 3), pairs p * 8 + 2t + (e & 1),
  // in units of the scale unit[2r + e / 2] of the current block of those rows.
  float acc[kRowTiles][kPairTiles][4];
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
    for (int p = 0; p < kPairTiles; ++p)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[r][p][e] = 0.0f;

  // Prologue. The weights of steps 0 .. kStages - 2 and the scales of step 0 are requested first: they
  // need the item's expert alone, so they leave before the item's pairs are read, and the x rows,
  // which need those pairs, follow. Then one cp.async group a step (empty past the last), so that at
  // step s "all but the newest kStages - 2 groups" holds step s: the first group also holds the weights
  // of the steps after it, requested before it.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (s < kSteps) load_weights_step(stages_base + (unsigned)(s * kStageBytes), s);
  unsigned short scale_bits[kNTiles];
  load_scales(0, scale_bits);

  if (tid < kBlockM) pair_ids[tid] = tid < count ? item_pair(sorted_pairs, first, tid) : 0;
  __syncthreads();

  // This thread's x chunks: chunk q = tid + i * kThreads is row q / 4, 16-byte column q % 4 of a step.
  // A chunk past the item's pairs reads nothing (bit i of x_live clear) from the input's first row.
  const unsigned short *x_rows[kXChunks];
  unsigned x_offsets[kXChunks], x_live = 0;
#pragma unroll
  for (int i = 0; i < kXChunks; ++i) {
    const int q = tid + i * kThreads, r = q / 4;
    x_rows[i] = r < count ? activations + (long long)(pair_ids[r] / x_rows_per_pair) * kK + (q % 4) * 8 : activations;
    x_live |= (r < count ? 1u : 0u) << i;
    x_offsets[i] = (unsigned)(r * kXRowBytes + (q % 4) * 16);
  }
  // Step s's x into the stage at `stage` (K compared, and the source chosen, as for the weights), and
  // from step kStages - 1 on its weights with it.
  auto load_step = [&](unsigned stage, int s, bool weights_too) {
    const int k = s * kStepK - kKPad;
#pragma unroll
    for (int i = 0; i < kXChunks; ++i) {
      const int kx = k + (int)(x_offsets[i] % kXRowBytes) / 2;
      const bool valid = ((x_live >> i) & 1u) && (kWholeSteps || (kx >= 0 && kx < kK));
      copy_async_16(stage + x_offsets[i], x_rows[i] + (kWholeSteps || valid ? k : 0), valid);
    }
    if (weights_too) load_weights_step(stage, s);
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < kSteps) load_step(stages_base + (unsigned)(s * kStageBytes), s, false);
    copy_async_commit();
  }
#if !VOLT8_GATE_UP
  // The routing weight of pair tid, needed only at the store: requested now, off the x rows' path, and
  // staged for the other threads after the steps (their last barrier is before the store's).
  const float routing_weight = tid < kBlockM && tid < count ? topk_weights[pair_ids[tid]] : 0.0f;
#endif

  float unit[kNTiles];
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) unit[j] = half_to_float(scale_bits[j]);

  // The stages of step s (s % kStages) and of step s + kStages - 1 ((s - 1) % kStages), moved on a
  // stage a step: no division in the loop.
  const unsigned last_stage = stages_base + (unsigned)((kStages - 1) * kStageBytes);
  unsigned stage = stages_base, load_stage = last_stage;
  for (int s = 0; s < kSteps; ++s) {
    copy_async_wait<kStages - 2>();
    // Step s is in for every thread, and every warp is done with step s - 1, whose stage the loads of
    // step s + kStages - 1 now take.
    __syncthreads();
    // The loads of step s + kStages - 1 go out between the products of the first and second halves of
    // the pairs, so that the products start as soon as the A fragments are converted (the variants that
    // skip padding, whose loop may end early, issue them here).
    auto issue_loads = [&]() {
      if (s + kStages - 1 < kSteps) load_step(load_stage, s + kStages - 1, true);
      copy_async_commit();
    };
    constexpr int kIssueTile = kSkipPadding ? 0 : kPairTiles / 2;
    if (kSkipPadding) issue_loads();
    // A fragments of both products: codes 8t .. 8t + 7 of the tile's rows g and g + 8, products 0 and
    // 1 taking a word of each (a0, a2 from row g; a1, a3 from row g + 8).
    unsigned a[2][kRowTiles][4];
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
      const uint2 top = load_shared_8(stage + w_rows[2 * r]), bottom = load_shared_8(stage + w_rows[2 * r + 1]);
      a[0][r][0] = e4m3x2_to_half2_shift(top.x, VOLT8_E4M3_LOW_SPREAD);
      a[0][r][1] = e4m3x2_to_half2_shift(bottom.x, VOLT8_E4M3_LOW_SPREAD);
      a[0][r][2] = e4m3x2_to_half2_shift(top.x, VOLT8_E4M3_HIGH_SPREAD);
      a[0][r][3] = e4m3x2_to_half2_shift(bottom.x, VOLT8_E4M3_HIGH_SPREAD);
      a[1][r][0] = e4m3x2_to_half2_shift(top.y, VOLT8_E4M3_LOW_SPREAD);
      a[1][r][1] = e4m3x2_to_half2_shift(bottom.y, VOLT8_E4M3_LOW_SPREAD);
      a[1][r][2] = e4m3x2_to_half2_shift(top.y, VOLT8_E4M3_HIGH_SPREAD);
      a[1][r][3] = e4m3x2_to_half2_shift(bottom.y, VOLT8_E4M3_HIGH_SPREAD);
    }
#pragma unroll
    for (int p = 0; p < kPairTiles; ++p) {
      if (!kSkipPadding && p == kIssueTile) issue_loads();
      if (kSkipPadding && p % 2 == 0 && p >= live_tiles) break;
      // x[g][8t .. 8t + 7] of this tile of pairs: products 0 and 1 take two words each (b0, b1).
      const uint4 x = load_shared_16(stage + x_lane + (unsigned)(p * 8 * kXRowBytes));
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r)
        mma_16816(acc[r][p], a[0][r][0], a[0][r][1], a[0][r][2], a[0][r][3], x.x, x.y);
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r)
        mma_16816(acc[r][p], a[1][r][0], a[1][r][1], a[1][r][2], a[1][r][3], x.z, x.w);
    }
    // Where the next step starts a scale block, the sums so far go into units of its scales: times old
    // / new, in FP32.
    if (s + 1 < kSteps && ((s + 1) & (kStepsPerBlock - 1)) == kBlockPhase) {
      load_scales(s + 1, scale_bits);
      float ratio[kNTiles];
#pragma unroll
      for (int j = 0; j < kNTiles; j += kScaleRowsShared) {
        const float next = half_to_float(scale_bits[j]);
        ratio[j] = __fdividef(unit[j], next);
        unit[j] = next;
        if (kScaleRowsShared == 2) ratio[j + 1] = ratio[j], unit[j + 1] = next;
      }
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
        for (int p = 0; p < kPairTiles; ++p)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[r][p][e] *= ratio[2 * r + e / 2];
    }
    load_stage = stage;
    stage = stage == last_stage ? stages_base : stage + (unsigned)kStageBytes;
  }
  copy_async_wait<0>();
  // The sums in FP32: times the last block's scales.
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
    for (int p = 0; p < kPairTiles; ++p)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[r][p][e] *= unit[2 * r + e / 2];
#if !VOLT8_GATE_UP
  if (tid < kBlockM) pair_weights[tid] = routing_weight;
  __syncthreads();
#endif

  // The warp's outputs: weight row n = r * 16 + g + 8 * (e >> 1) is output column column0 + warp_n * 16
  // + n % 16 of gate (r 0) and up (r 1) in gate_up, column0 + warp_n * 32 + n in down. gate_up stores
  // h = FP16(silu(gate) * up), down z = FP16(weight * sum) into out read as FP16 (reduce_half adds
  // them). Pad pairs are never stored. A lane holds single FP16 values of four pairs' rows, so where
  // the rows split into 16-byte chunks (N a multiple of 8) the tile goes through shared memory (the
  // stages, free once every warp is past the last step) and leaves in 16-byte stores, a row's
  // columns of the tile contiguous; else each value is stored where it lies.
  unsigned short *out_half = reinterpret_cast<unsigned short *>(out);
  constexpr int kOutColumns = kBlockN;  // the tile's output columns (gate_up: its gate and up rows pair up)
  constexpr int kOutPitch = 2 * kOutColumns + 16;  // bytes a staged row: rows 2 apart 8 banks apart
  constexpr bool kStaged = kN % 8 == 0 && kBlockM * kOutPitch <= kStages * kStageBytes;
  // Where the value of tile pair m, tile column c goes: staged, or straight to out.
  auto put = [&](int m, int c, unsigned short value) {
    if (kStaged) {
      *reinterpret_cast<unsigned short *>(stages + m * kOutPitch + 2 * c) = value;
    } else if (column0 + c < kN) {
      out_half[(long long)pair_ids[m] * kN + column0 + c] = value;
    }
  };
  if (kStaged && VOLT8_GATE_UP) __syncthreads();  // every warp is done reading the stages (down: done above)
#pragma unroll
  for (int p = 0; p < kPairTiles; ++p)
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int m = warp_m * kWarpM + p * 8 + 2 * t + q;
      if (m >= count) continue;
#if VOLT8_GATE_UP
#pragma unroll
      for (int half = 0; half < 2; ++half)
        put(m, warp_n * 16 + g + 8 * half, float_to_half(silu_times(acc[0][p][2 * half + q], acc[1][p][2 * half + q])));
#else
      const float weight = pair_weights[m];
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          put(m, warp_n * 32 + r * 16 + g + 8 * half, float_to_half(weight * acc[r][p][2 * half + q]));
#endif
    }
  if (kStaged) {
    __syncthreads();
    constexpr int kRowChunks = kOutColumns / 8;  // 16-byte chunks of a staged row
    // (the workspace's parts start on 256 bytes; a buffer that does not takes the values one by one)
    const bool aligned = (reinterpret_cast<unsigned long long>(out_half) & 15ull) == 0;
    for (int q = tid; q < count * kRowChunks; q += kThreads) {
      const int m = q / kRowChunks, column = column0 + (q % kRowChunks) * 8;
      if (column >= kN) continue;
      const uint4 chunk = *reinterpret_cast<const uint4 *>(stages + m * kOutPitch + 2 * (column - column0));
      unsigned short *target = out_half + (long long)pair_ids[m] * kN + column;
      if (aligned) {
        *reinterpret_cast<uint4 *>(target) = chunk;
      } else {
        const unsigned words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) target[e] = (unsigned short)(words[e / 2] >> (16 * (e % 2)));
      }
    }
  }
}
