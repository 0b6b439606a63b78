// The whole forward of a few tokens in one launch, for targets without early launch (sm_70):
// gate_up, down and the weighted top-k reduce of every routed pair, as gate_up.cc.bm1 with
// kGateLanes lanes per row, down.cc.bm1 with kDownLanes lanes per row and the reduce form them
// (same products, sums and order, so the same bits).
//
// CTAs take work items from a ticket counter, one after the other, until the tickets run out:
// first every gate_up item (kGateColumns columns of one pair's h), then every down item
// (kDownColumns columns of one pair's z). A CTA asks for its next ticket once the loads of its item
// are in flight, so the atomic's round trip overlaps them (and a down item's poll). A down item
// requests its weights, then waits until all gate_up items of its pair have stored h. Those items
// have smaller tickets, so they are held by CTAs already running, which either run them or first
// finish an earlier gate_up item; gate_up items wait on nothing, so the wait always ends, whatever
// order the hardware starts CTAs in and however few fit. The grid is the runtime's choice (as many
// CTAs as fit, or one per item). The CTA that stores the last z of a token's column tile sums the
// token's z rows there, in pair order, as the reduce kernel does (and sets that tile's arrival
// counter back to zero). Every counter goes back to zero in the launch that used it, so every
// forward starts from zeros: the ticket counter by the CTA that takes the last ticket (each CTA
// takes one past the items, to learn it is done); a pair's h count, which each of its down items
// also counts up once past its poll, by the last of them.
// Only instructions sm_70 has: the memory model's release and acquire operations at GPU scope (a
// count's release after the CTA's barrier, acquire loads to poll, an acquire-release arrival, as
// the fused-reduce downs of moe_gemm_hmma.cu arrive), 32-bit atomics, L2 loads of what this launch
// wrote. No sequentially consistent fence: each costs a round trip of its own on the chain.
#define VOLT8_MAY_START_EARLY 0
@{include moe_common.cu}

namespace {
constexpr int kThreads = @{THREADS};
constexpr int kHidden = @{HIDDEN};
constexpr int kInter = @{INTERMEDIATE};
constexpr int kNumExperts = @{NUM_EXPERTS};
constexpr int kScaleBlockN = @{SCALE_BN};
// gate_up: K = hidden, N = intermediate, gate and up rows per column.
constexpr int kGateLanes = @{GATE_LANES};
constexpr int kGateColumns = kThreads / kGateLanes;
constexpr int kGateTiles = (kInter + kGateColumns - 1) / kGateColumns;
constexpr int kGateChunks = kHidden / 16;
constexpr int kGateUnroll = @{GATE_UNROLL};
constexpr int kGateKBlocks = @{GATE_K_BLOCKS};
// Whole batches cover the row exactly: no chunk past it is ever asked for, so none is tested.
constexpr bool kGateExact = kGateChunks % (kGateUnroll * kGateLanes) == 0;
constexpr long long kGateExpertBytes = 2LL * kInter * kHidden;
constexpr int kGateScaleRowOffset = @{GATE_SCALE_ROW_OFFSET};
constexpr int kGateScaleRowStride = @{GATE_SCALE_ROW_STRIDE};
constexpr int kGateScaleHalfStride = @{GATE_SCALE_HALF_STRIDE};
constexpr long long kGateScaleExpertStride = @{GATE_SCALE_EXPERT_STRIDE}LL;
// down: K = intermediate, N = hidden.
constexpr int kDownLanes = @{DOWN_LANES};
constexpr int kDownColumns = kThreads / kDownLanes;
constexpr int kDownTiles = (kHidden + kDownColumns - 1) / kDownColumns;
constexpr int kDownChunks = kInter / 16;
constexpr int kDownUnroll = @{DOWN_UNROLL};
constexpr int kDownKBlocks = @{DOWN_K_BLOCKS};
constexpr bool kDownExact = kDownChunks % (kDownUnroll * kDownLanes) == 0;
constexpr long long kDownExpertBytes = (long long)kHidden * kInter;
constexpr int kDownScaleKOffset = @{DOWN_SCALE_K_OFFSET};
constexpr int kDownScaleRowStride = @{DOWN_SCALE_ROW_STRIDE};
constexpr long long kDownScaleExpertStride = @{DOWN_SCALE_EXPERT_STRIDE}LL;
// Arrival counters per token in the workspace: one per 32 columns of out.
constexpr int kArrivalTiles = (kHidden + 31) / 32;
constexpr int kTileChunks = kGateChunks > kDownChunks ? kGateChunks : kDownChunks;
constexpr int kBatch = 8;  // loads of x, h or z rows requested together
// FP32 scales of an item's columns: gate_up [row kind][column][k block], down [column][k block].
constexpr int kGateScales = 2 * kGateColumns * kGateKBlocks;
constexpr int kDownScales = kDownColumns * kDownKBlocks;
constexpr int kScaleTile = kGateScales > kDownScales ? kGateScales : kDownScales;
static_assert(kHidden % 16 == 0 && kInter % 16 == 0, "whole 16-code chunks");
static_assert(32 % kGateLanes == 0 && 32 % kDownLanes == 0, "lane groups inside a warp");
static_assert(kDownColumns >= 32 && kDownColumns % 32 == 0, "a down tile covers whole arrival tiles");
}  // namespace

// The thread's index, read where it is used: in the item loop the compiler then keeps nothing derived
// from it in registers from one item to the next (which made the loop spill).
static __device__ __forceinline__ int thread_index() {
  int index;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(index));
  return index;
}

// Loads of what other CTAs of this launch wrote (h, z): through L2, never the read-only path or L1.
static __device__ __forceinline__ uint4 load_l2(const unsigned short *address) {
  uint4 value;
  VOLT8_LOAD_V4("ld.global.cg.v4.u32", "r", value, address);
  return value;
}

static __device__ __forceinline__ float load_l2(const float *address) {
  float value;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(value) : "l"(address));
  return value;
}

// The poll of a count: acquire, so what the CTAs that counted stored before their release is
// visible to this CTA after its next barrier.
static __device__ __forceinline__ int load_acquire(const int *address) {
  int value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
}

// One count, release: the CTA's stores, ordered before it by a barrier, are visible to whoever
// acquires the count.
static __device__ __forceinline__ void count_release(int *counter) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
}

// One arrival, acquire-release; the count before it.
static __device__ __forceinline__ int arrive(int *counter) {
  int before;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(counter) : "memory");
  return before;
}

// One row of kVectors 16-byte vectors (8 FP16 values each) into the FP32 tile, up to kBatch loads a
// thread in flight at once. kProduced: written by this launch (L2 loads).
template <bool kProduced, int kVectors>
static __device__ __forceinline__ void stage_row(float4 *x_tile, int chunks, const unsigned short *row) {
  constexpr int kIterations = (kVectors + kThreads - 1) / kThreads;
  constexpr int kGroup = kIterations < kBatch ? kIterations : kBatch;
  for (int start = 0; start < kIterations; start += kGroup) {
    uint4 raw[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const int vector = (start + g) * kThreads + thread_index();
      raw[g] = vector >= kVectors ? zero_uint4()
               : kProduced        ? load_l2(row + vector * 8)
                                  : *reinterpret_cast<const uint4 *>(row + vector * 8);
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const int vector = (start + g) * kThreads + thread_index();
      if (vector < kVectors) store_x_vector(x_tile, chunks, 0, vector, raw[g]);
    }
  }
}

static __device__ __forceinline__ float lane_group_sum(float value, int lanes) {
  for (int offset = lanes / 2; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// Chunks base, base + kGateLanes, ... (kGateUnroll of them) of the gate and up rows; past the row (or
// for a column past N) zeros.
static __device__ __forceinline__ void gate_load_batch(uint4 (&raw)[kGateUnroll][2], const unsigned char *const (&rows)[2],
                                                       bool valid, int base) {
#pragma unroll
  for (int u = 0; u < kGateUnroll; ++u) {
    const int chunk = base + u * kGateLanes;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      raw[u][r] = valid && (kGateExact || chunk < kGateChunks) ? load_weights_16(rows[r] + chunk * 16) : zero_uint4();
    }
  }
}

// The same for a down row: chunks base, base + kDownLanes, ...
static __device__ __forceinline__ void down_load_batch(uint4 (&raw)[kDownUnroll], const unsigned char *row, bool valid, int base) {
#pragma unroll
  for (int u = 0; u < kDownUnroll; ++u) {
    const int chunk = base + u * kDownLanes;
    raw[u] = valid && (kDownExact || chunk < kDownChunks) ? load_weights_16(row + chunk * 16) : zero_uint4();
  }
}

// The FP16 scales of an item's kCount (column, k block) entries, all requested at once; scale_of(i)
// gives entry i's address, or null past N. store() writes them as FP32 once the CTA's other staging
// loads are in flight too.
template <int kCount>
struct ScaleStage {
  static constexpr int kIterations = (kCount + kThreads - 1) / kThreads;
  unsigned short bits[kIterations];
  template <typename Address>
  __device__ __forceinline__ void load(Address scale_of) {
#pragma unroll
    for (int i = 0; i < kIterations; ++i) {
      const int index = i * kThreads + thread_index();
      const unsigned short *address = index < kCount ? scale_of(index) : nullptr;
      bits[i] = address ? *address : (unsigned short)0;
    }
  }
  __device__ __forceinline__ void store(float *scale_tile) const {
#pragma unroll
    for (int i = 0; i < kIterations; ++i) {
      const int index = i * kThreads + thread_index();
      if (index < kCount) scale_tile[index] = half_to_float(bits[i]);
    }
  }
};

// Thread 0 asks for the CTA's next ticket (the other threads get 0); publish_ticket stores it in
// *ticket_shared, read after the CTA's next barrier. The launch's last ticket (each CTA takes one past
// the items, its last) zeroes the counter, since no CTA takes another.
static __device__ __forceinline__ int request_ticket(int *flags) { return thread_index() == 0 ? atomicAdd(flags, 1) : 0; }

static __device__ __forceinline__ void publish_ticket(int *flags, int items, int ticket, int *ticket_shared) {
  if (thread_index() != 0) return;
  if (ticket == items + (int)gridDim.x - 1) flags[0] = 0;
  *ticket_shared = ticket;
}

static __device__ __forceinline__ void take_ticket(int *flags, int items, int *ticket_shared) {
  publish_ticket(flags, items, request_ticket(flags), ticket_shared);
}

// h[pair][column] for kGateColumns columns: lanes of a group take chunks lane, lane + kGateLanes, ...
// in that order, as gate_up.cc.bm1 does; each chunk's raw sum is scaled and accumulated.
// Takes the CTA's next ticket on every path, once its own loads are in flight.
static __device__ void gate_up_item(int item, int items, int *ticket_shared, float4 *x_tile, float *scale_tile,
                                    const unsigned short *x, const unsigned char *w13, const unsigned short *s13,
                                    const int *topk_ids, int top_k, unsigned short *h, int *flags) {
  int *h_ready = flags + 1;
  const int pair = item / kGateTiles;
  const int expert = topk_ids[pair];
  if (!expert_id_valid(expert, kNumExperts)) return take_ticket(flags, items, ticket_shared);  // its h is never read
  const int group = thread_index() / kGateLanes, lane_in_row = thread_index() % kGateLanes;
  const int column = (item % kGateTiles) * kGateColumns + group;
  const bool valid = column < kInter;
  const unsigned char *rows[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) rows[r] = w13 + expert * kGateExpertBytes + (long long)(column + r * kInter) * kHidden;
  // Batches of kGateUnroll chunks of both rows; the first is in flight while the token's x row and
  // the scales are staged. Chunks past the row read as zeros and are skipped.
  uint4 raw[kGateUnroll][2];
  gate_load_batch(raw, rows, valid, lane_in_row);
  const int ticket = request_ticket(flags);
  const int column0 = (item % kGateTiles) * kGateColumns;
  ScaleStage<kGateScales> scales;
  scales.load([&](int index) -> const unsigned short * {
    const int kind = index / (kGateColumns * kGateKBlocks), scale_column = column0 + (index / kGateKBlocks) % kGateColumns;
    if (scale_column >= kInter) return nullptr;
    return s13 + expert * kGateScaleExpertStride + kind * kGateScaleHalfStride +
           ((kGateScaleRowOffset + scale_column) / kScaleBlockN) * kGateScaleRowStride + index % kGateKBlocks;
  });
  stage_row<false, kHidden / 8>(x_tile, kGateChunks, x + (long long)(pair / top_k) * kHidden);
  scales.store(scale_tile);
  publish_ticket(flags, items, ticket, ticket_shared);
  __syncthreads();
  float acc[2] = {0.0f, 0.0f};
  for (int base = lane_in_row;; ) {
#pragma unroll
    for (int u = 0; u < kGateUnroll; ++u) {
      const int chunk = base + u * kGateLanes;
      if (kGateExact || chunk < kGateChunks) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float w[16];
          e4m3x16_to_float(raw[u][r], w);
          const float scale = scale_tile[(r * kGateColumns + group) * kGateKBlocks + ((chunk * 16) >> 7)];
          acc[r] = fmaf(chunk_dot(x_tile, kGateChunks, 0, chunk, w), scale, acc[r]);
        }
      }
    }
    base += kGateUnroll * kGateLanes;
    if (base >= kGateChunks) break;
    gate_load_batch(raw, rows, valid, base);
  }
  const float gate = lane_group_sum(acc[0], kGateLanes), up = lane_group_sum(acc[1], kGateLanes);
  if (lane_in_row == 0 && valid) h[(long long)pair * kInter + column] = float_to_half(silu_times(gate, up));
  __syncthreads();  // the CTA's h stores come before its count
  if (thread_index() == 0) count_release(h_ready + pair);
}

// Live ids of token's pairs (ids in [0, E)).
static __device__ __forceinline__ int live_pairs(const int *topk_ids, long long first_pair, int top_k) {
  int live = 0;
  for (int j = 0; j < top_k; ++j) live += expert_id_valid(topk_ids[first_pair + j], kNumExperts);
  return live;
}

// out[token][columns of the tile]: the token's z rows summed in pair order over its live pairs,
// exactly as the reduce kernel sums them; zeros for a token with no live pair.
static __device__ void reduce_tile(int token, int tile, const int *topk_ids, int top_k, const float *z,
                                   unsigned short *out) {
  const int column = tile * kDownColumns + thread_index();
  if (thread_index() >= kDownColumns || column >= kHidden) return;
  const long long first_pair = (long long)token * top_k;
  float sum = 0.0f;
  for (int batch = 0; batch < top_k; batch += kBatch) {
    bool live[kBatch];
    float values[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      live[b] = batch + b < top_k && expert_id_valid(topk_ids[first_pair + batch + b], kNumExperts);
      values[b] = live[b] ? load_l2(z + (first_pair + batch + b) * kHidden + column) : 0.0f;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (live[b]) sum += values[b];
    }
  }
  out[(long long)token * kHidden + column] = float_to_half(sum);
}

// z[pair][column] = topk_weights[pair] * (h[pair] . W2[e][column]) for kDownColumns columns, as
// down.cc.bm1 forms it; then the tile's arrival, and the token's sum by the CTA that completes it.
// Takes the CTA's next ticket on every path, once its own loads are in flight.
static __device__ void down_item(int item, int items, int *ticket_shared, float4 *x_tile, float *scale_tile,
                                 const unsigned char *w2, const unsigned short *s2,
                                 const int *topk_ids, const float *topk_weights, int top_k, const unsigned short *h,
                                 int *flags, float *z, unsigned short *out, int *arrivals, int *last_shared) {
  int *h_ready = flags + 1;
  const int pair = item / kDownTiles, tile = item % kDownTiles;
  const int token = pair / top_k;
  const long long first_pair = (long long)token * top_k;
  const int expert = topk_ids[pair];
  if (!expert_id_valid(expert, kNumExperts)) {
    take_ticket(flags, items, ticket_shared);
    // A token with no live pair still gets its zeros, from the items of its first pair.
    if (pair == first_pair && live_pairs(topk_ids, first_pair, top_k) == 0) reduce_tile(token, tile, topk_ids, top_k, z, out);
    return;
  }
  const int group = thread_index() / kDownLanes, lane_in_row = thread_index() % kDownLanes;
  const int column = tile * kDownColumns + group;
  const bool valid = column < kHidden;
  const unsigned char *row = w2 + expert * kDownExpertBytes + (long long)column * kInter;
  // The first batch of weights is in flight while the pair's gate_up items finish: one thread polls
  // their count, then the CTA stages h.
  uint4 raw[kDownUnroll];
  down_load_batch(raw, row, valid, lane_in_row);
  const int column0 = tile * kDownColumns;
  ScaleStage<kDownScales> scales;
  scales.load([&](int index) -> const unsigned short * {
    const int scale_column = column0 + index / kDownKBlocks;
    if (scale_column >= kHidden) return nullptr;
    return s2 + expert * kDownScaleExpertStride + (scale_column / kScaleBlockN) * kDownScaleRowStride + index % kDownKBlocks;
  });
  const int ticket = request_ticket(flags);  // in flight while the h count is polled
  if (thread_index() == 0) {
    while (load_acquire(h_ready + pair) < kGateTiles) {
    }
  }
  publish_ticket(flags, items, ticket, ticket_shared);
  // Past the poll, this item counts itself on the pair's h count; the last of the pair's down items
  // to do so sets it back to zero (every other one is past its poll). In flight while h is staged.
  const int seen = thread_index() == 0 ? atomicAdd(h_ready + pair, 1) : 0;
  __syncthreads();
  stage_row<true, kInter / 8>(x_tile, kDownChunks, h + (long long)pair * kInter);
  scales.store(scale_tile);
  if (thread_index() == 0 && seen == kGateTiles + kDownTiles - 1) h_ready[pair] = 0;
  __syncthreads();
  float acc = 0.0f;
  for (int base = lane_in_row;; ) {
#pragma unroll
    for (int u = 0; u < kDownUnroll; ++u) {
      const int chunk = base + u * kDownLanes;
      if (kDownExact || chunk < kDownChunks) {
        float w[16];
        e4m3x16_to_float(raw[u], w);
        const float scale = scale_tile[group * kDownKBlocks + ((kDownScaleKOffset + chunk * 16) >> 7)];
        acc = fmaf(chunk_dot(x_tile, kDownChunks, 0, chunk, w), scale, acc);
      }
    }
    base += kDownUnroll * kDownLanes;
    if (base >= kDownChunks) break;
    down_load_batch(raw, row, valid, base);
  }
  const float sum = lane_group_sum(acc, kDownLanes);
  if (lane_in_row == 0 && valid) z[(long long)pair * kHidden + column] = topk_weights[pair] * sum;
  __syncthreads();  // the CTA's z stores come before its arrival
  if (thread_index() == 0) {
    int *arrival = arrivals + (long long)token * kArrivalTiles + tile;
    const int last = arrive(arrival) + 1 == live_pairs(topk_ids, first_pair, top_k);
    if (last) *arrival = 0;  // every arrival of this forward is in; the next forward starts at zero
    *last_shared = last;
  }
  __syncthreads();  // and the z rows of the token's other items, seen through the arrival, come before the reads
  if (*last_shared) reduce_tile(token, tile, topk_ids, top_k, z, out);
}

extern "C" __global__ void __launch_bounds__(kThreads, @{MIN_BLOCKS}) @{ENTRY}(
    const unsigned short *__restrict__ x, const unsigned char *__restrict__ w13, const unsigned short *__restrict__ s13,
    const unsigned char *__restrict__ w2, const unsigned short *__restrict__ s2, const int *__restrict__ topk_ids,
    const float *__restrict__ topk_weights, int num_tokens, int top_k, unsigned short *h, float *z,
    unsigned short *__restrict__ out, int *__restrict__ counters, int *arrivals, int *flags) {
  // x row of a gate_up item or h row of a down item, in FP32, laid out as the cc kernels lay it out.
  __shared__ float4 x_tile[4 * kTileChunks];
  __shared__ float scale_tile[kScaleTile];
  __shared__ int item_shared, last_shared;
  // flags: [0] the next ticket, [1 + pair] the pair's h count (its gate_up items done, then its down
  // items past their poll).
  const int num_pairs = num_tokens * top_k;
  const int gate_items = num_pairs * kGateTiles, items = gate_items + num_pairs * kDownTiles;
  take_ticket(flags, items, &item_shared);
  __syncthreads();
  for (int item = item_shared; item < items;) {
    __syncthreads();  // every thread has read item_shared: the item may take the next ticket into it
    // Stores (never adds) the bad-id count, as the reduce kernel does.
    if (item == 0) store_bad_id_count(topk_ids, num_pairs, kNumExperts, counters + 2);
    if (item < gate_items) {
      gate_up_item(item, items, &item_shared, x_tile, scale_tile, x, w13, s13, topk_ids, top_k, h, flags);
    } else {
      down_item(item - gate_items, items, &item_shared, x_tile, scale_tile, w2, s2, topk_ids, topk_weights, top_k, h,
                flags, z, out, arrivals, &last_shared);
    }
    __syncthreads();  // the next ticket is in item_shared, and the tiles are free again
    item = item_shared;
  }
}
