// Grouped FP8 GEMM for many pairs an expert, sm_80 and later: the work items of moe_gemm_tile.cu (32,
// 64 or 128 routed pairs of one expert), with the weights kept as E4M3 codes in shared memory. The
// tile family turns its weight tile into FP16 in shared memory and reads it back with ldmatrix, six
// bytes of shared-memory traffic a weight (its store and two warps' reads) against two here (the
// code's copy in and one warp's read), and shared memory, not the tensor cores, bounds the tile
// family at these sizes. Same operation as moe_gemm_cc.cu.
//
// A CTA computes block_m pairs x kWeightRows weight rows (gate_up: block_n gate rows and the block_n
// up rows of the same output columns; down: block_n rows), walking K in steps of kStepK codes through
// kStages shared-memory stages filled by cp.async (loads kStages - 1 steps ahead of the products, or
// two steps a barrier and kStages - 2 ahead where four stages fit and the variant is not capped at four
// CTAs an SM):
//   x:       block_m rows of FP16, gathered through the item's pairs (gate_up: the pair's token row of
//            the input; down: the pair's row of h), zeros past the item's count and past K;
//   weights: kWeightRows rows of kStepK E4M3 codes, zeros past N and past K.
// Each warp takes kWarpM pairs x 32 weight rows. Its m16n8k16 products read K in a permuted order,
// the same for both operands (a dot product's terms in any order): product kk of a step takes, from
// lane (g = lane / 4, t = lane % 4), the codes 8t + 4kk .. 8t + 4kk + 3 of its weight row g, which one
// 8-byte load of the row brings for both products, and the same K of x through one 16-byte load a
// row. The codes become FP16 in registers (code * 2^-8, exactly: moe_common.cu) times their block's
// scale (FP16 bits of scale * 2^8); a chunk of 16 codes never straddles a scale block (ranks start at
// multiples of 16 of the scale grid). Rows are stored unpadded: an 8-byte load of 16 lanes and a
// 16-byte load of 8 lanes each read 128 consecutive bytes, on distinct banks.
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
constexpr int kMTiles = kWarpM / 16, kNTiles = kWarpN / 8;  // m16 x n8 products of a warp's tile
@{include moe_expert_layout.cu}
static_assert(kWarpsN * kWarpsM == @{WARPS} && kWarpN == 32 && kWarpM % 16 == 0, "tile does not fit the warps");
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

// Two E4M3 codes -> two FP16 values holding e4m3 * 2^-8, the bits of moe_common.cu's e4m3x2_to_half2 in
// three instructions instead of four: the byte permute puts each code in the low byte of its 16-bit
// lane and the code's sign bit, replicated, in the high byte; shifted left by 7, the lane holds the
// sign at bit 15 and the 7 exponent-and-mantissa bits at 7..13, and the mask clears the rest (bit 14,
// the low bits, and what the low lane pushed into the high one).
constexpr unsigned kLowPair = 0x9180u, kHighPair = 0xB3A2u;  // codes 0, 1 and codes 2, 3 of a word
static __device__ __forceinline__ unsigned e4m3x2_to_half2_shift(unsigned word, unsigned selector) {
  unsigned spread;  // prmt with a selector nibble's top bit set replicates the chosen byte's sign
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(spread) : "r"(word), "r"(selector));
  return (spread << 7) & 0xbf80bf80u;
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

#if VOLT8_GATE_UP
  stage_pairs(pair_ids, nullptr, sorted_pairs, nullptr, first, count, tid);
#else
  stage_pairs(pair_ids, pair_weights, sorted_pairs, topk_weights, first, count, tid);
#endif
  __syncthreads();

  // This thread's x chunks: chunk q = tid + i * kThreads is row q / 4, 16-byte column q % 4 of a step.
  const unsigned short *x_rows[kXChunks];
  unsigned x_offsets[kXChunks];
#pragma unroll
  for (int i = 0; i < kXChunks; ++i) {
    const int q = tid + i * kThreads, r = q / 4;
    x_rows[i] = r < count ? activations + (long long)(pair_ids[r] / x_rows_per_pair) * kK + (q % 4) * 8 : nullptr;
    x_offsets[i] = (unsigned)(r * kXRowBytes + (q % 4) * 16);
  }
  // This thread's weight chunks: chunk q is tile row q / 2, codes (q % 2) * 16.. of a step.
  const unsigned char *w_sources[kWChunks];
  unsigned w_offsets[kWChunks];
#pragma unroll
  for (int i = 0; i < kWChunks; ++i) {
    const int q = tid + i * kThreads, row = q / 2;
    const int kind = kRows == 2 && row >= kBlockN ? 1 : 0;
    const int column = column0 + row - kind * kBlockN;
    w_sources[i] = column < kN ? weights + expert * kExpertWeightBytes + (long long)(column + kind * kUpRowOffset) * kK +
                                     (q % 2) * 16
                               : nullptr;
    w_offsets[i] = (unsigned)(kXStageBytes + row * kWRowBytes + (q % 2) * 16);
  }
  // Step s's x and weights into stage s % kStages.
  auto load_step = [&](int s) {
    const unsigned stage = stages_base + (unsigned)((s % kStages) * kStageBytes);
    const int k = s * kStepK;
#pragma unroll
    for (int i = 0; i < kXChunks; ++i) {
      const int kx = k + (int)(x_offsets[i] % kXRowBytes) / 2;
      const bool valid = x_rows[i] != nullptr && kx < kK;
      copy_async_16(stage + x_offsets[i], valid ? x_rows[i] + k : activations, valid);
    }
#pragma unroll
    for (int i = 0; i < kWChunks; ++i) {
      const int kw = k + (int)(w_offsets[i] % 32);
      const bool valid = w_sources[i] != nullptr && kw < kK;
      copy_async_weights_16(stage + w_offsets[i], valid ? w_sources[i] + k : weights, valid);
    }
  };

  // This lane's weight rows (row g of each n8 tile of the warp's 32) and where their scales lie.
  unsigned w_rows[kNTiles];
  const unsigned short *row_scales[kNTiles];
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
    const int row = weight_tile_row(warp_n, j * 8 + g);
    const int kind = kRows == 2 && row >= kBlockN ? 1 : 0;
    const int column = column0 + row - kind * kBlockN;
    w_rows[j] = (unsigned)(kXStageBytes + row * kWRowBytes + t * 8);
    row_scales[j] = column < kN ? scales + expert * kScaleExpertStride + kind * kScaleHalfStride +
                                      ((kScaleRowOffset + column) / kScaleBlockN) * kScaleRowStride
                                : nullptr;
  }
  // The FP16 bits (twice) of the scale of this lane's codes of step s in each of its rows.
  auto load_scales = [&](int s, unsigned (&scale2)[kNTiles]) {
    const int k = s * kStepK + (t >> 1) * 16;
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      const unsigned short bits = row_scales[j] != nullptr && k < kK
                                      ? __ldg(row_scales[j] + (kScaleKOffset + k) / kScaleBlockK)
                                      : (unsigned short)0;
      scale2[j] = pack_halves(bits, bits);
    }
  };
  // This lane's x rows of the warp's tile: row g of each m16 tile, and row g + 8.
  const unsigned x_lane = (unsigned)((warp_m * kWarpM + g) * kXRowBytes + t * 16);
  // Variants capped at four CTAs an SM skip the products of the warp's m16 tiles that hold no pair of
  // the item (padding alone), the same branch for the whole warp at every step. Elsewhere the branch
  // costs more than it saves (it splits the unrolled products, which ptxas then schedules apart).
  constexpr bool kSkipPadding = @{MIN_BLOCKS} >= 4;
  const int live_tiles = kSkipPadding ? min(kMTiles, max(0, (count - warp_m * kWarpM + 15) / 16)) : kMTiles;

  float acc[kMTiles][kNTiles][4];
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int j = 0; j < kNTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  // kSub steps are read between two barriers: two where at least four stages fit and the variant is
  // not capped at four CTAs an SM (there the second step's fragments would spill), else one. The
  // loads run kStages - kSub steps ahead; one cp.async group a step (empty past the last), so that at
  // steps s0 .. s0 + kSub - 1 "all but the newest kStages - 2 kSub groups" is theirs.
  constexpr int kSub = kStages >= 4 && @{MIN_BLOCKS} < 4 ? 2 : 1;
  // Prologue: steps 0 .. kStages - kSub - 1 requested.
#pragma unroll
  for (int s = 0; s < kStages - kSub; ++s) {
    if (s < kSteps) load_step(s);
    copy_async_commit();
  }
  unsigned scale2[kNTiles];
  load_scales(0, scale2);

  for (int s0 = 0; s0 < kSteps; s0 += kSub) {
    copy_async_wait<kStages - 2 * kSub>();
    // Steps s0 .. s0 + kSub - 1 are in for every thread, and every warp is done with the steps before,
    // whose stages the loads of steps s0 + kStages - kSub .. s0 + kStages - 1 now take.
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kSub; ++u) {
      if (s0 + kStages - kSub + u < kSteps) load_step(s0 + kStages - kSub + u);
      copy_async_commit();
    }
#pragma unroll
    for (int u = 0; u < kSub; ++u) {
      const int s = s0 + u;
      if (kSub > 1 && s >= kSteps) break;
      unsigned next_scale2[kNTiles];
      load_scales(s + 1, next_scale2);
      const unsigned stage = stages_base + (unsigned)((s % kStages) * kStageBytes);
      // B fragments of both products: codes 8t .. 8t + 7 of row g, products 0 and 1 taking a word each.
      unsigned b[2][kNTiles][2];
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        const uint2 codes = load_shared_8(stage + w_rows[j]);
        b[0][j][0] = mul_half2(e4m3x2_to_half2_shift(codes.x, kLowPair), scale2[j]);
        b[0][j][1] = mul_half2(e4m3x2_to_half2_shift(codes.x, kHighPair), scale2[j]);
        b[1][j][0] = mul_half2(e4m3x2_to_half2_shift(codes.y, kLowPair), scale2[j]);
        b[1][j][1] = mul_half2(e4m3x2_to_half2_shift(codes.y, kHighPair), scale2[j]);
      }
#pragma unroll
      for (int i = 0; i < kMTiles; ++i) {
        if (kSkipPadding && i >= live_tiles) break;
        // x[g][8t .. 8t + 7] and x[g + 8][..] of this row tile: products 0 and 1 take two words of each.
        const uint4 low = load_shared_16(stage + x_lane + (unsigned)(i * 16 * kXRowBytes));
        const uint4 high = load_shared_16(stage + x_lane + (unsigned)((i * 16 + 8) * kXRowBytes));
        // Product 0 of every n8 tile, then product 1: kNTiles products between two into one accumulator.
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) mma_16816(acc[i][j], low.x, high.x, low.y, high.y, b[0][j][0], b[0][j][1]);
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) mma_16816(acc[i][j], low.z, high.z, low.w, high.w, b[1][j][0], b[1][j][1]);
      }
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) scale2[j] = next_scale2[j];
    }
  }
  copy_async_wait<0>();

#if VOLT8_GATE_UP
  store_16816(acc, pair_ids, nullptr, out, count, column0, warp_m, warp_n, lane);
#else
  store_16816(acc, pair_ids, pair_weights, out, count, column0, warp_m, warp_n, lane);
#endif
}
