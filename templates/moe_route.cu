// Groups routed pairs per expert on the device (one CTA), in pair order within each expert, and
// cuts each expert's pairs into work items of at most bm pairs for both GEMMs.
// counters: four per launch of a routed GEMM, whose grid holds at most kLaunchRows rows, so the
// launcher cuts it into ceil(num_pairs / kLaunchRows) launches: launch l's gate_up and down items
// left (the item count less l * kLaunchRows, at least 0), then ids outside [0, kGlobalExperts) for
// l = 0 (0 for the others), then 0. Items name the kernel's own experts (local_expert); pairs of
// experts another rank holds are left out.
// Placement runs on kPlaceWarps warps at once: each takes a contiguous segment of an id tile and
// places it from its own per-expert cursors, which start where the segments before it end.
// CTAs past the first (if the grid has any) only warm L2: while CTA 0 routes, they ask L2 for the
// gate_up weights of the lowest-numbered experts that have pairs, up to warm_bytes. Those experts'
// work items come first, so gate_up's first CTAs find their weights on chip or on the way.
// When the down fuses the reduce (out is not null), the grid's last CTA also writes zeros to the out
// rows of tokens none of whose ids is in [0, E): no down CTA works for such a token. Otherwise the
// reduce writes them.
@{include moe_common.cu}
@{include moe_expert_range.cu}

namespace {
constexpr int kThreads = @{THREADS};
constexpr int kWarps = kThreads / 32;
constexpr int kNumExperts = @{NUM_EXPERTS};
constexpr int kHidden = @{HIDDEN};
constexpr int kExpertsPerThread = (kNumExperts + kThreads - 1) / kThreads;
constexpr int kIdCapacity = @{ID_CAPACITY};  // ids held in shared memory at once (a multiple of 4)
constexpr int kPlaceWarps = @{PLACE_WARPS};  // warps placing pairs side by side (per-warp cursors fit)
constexpr int kLaunchRows = @{LAUNCH_ROWS};  // rows (work items) of one GEMM launch
constexpr int kLoadBatch = 4;                 // 16-byte loads each thread has in flight together
constexpr long long kGateUpExpertBytes = @{GATE_UP_EXPERT_BYTES}LL;  // one expert's gate_up weights
constexpr int kWarmLineBytes = 128;           // one L2 request per 128-byte line
constexpr int kPresentWords = (kNumExperts + 31) / 32;
static_assert(kIdCapacity % 4 == 0, "id tiles must keep 16-byte alignment");
static_assert(kPlaceWarps >= 1 && kPlaceWarps <= kWarps, "placing warps are warps of the CTA");
}  // namespace

// Copies ids[0, count) into tile: 16-byte loads, all of a batch in flight together, when ids is
// 16-byte aligned; single ids otherwise and for the tail.
static __device__ void route_load_ids(int *tile, const int *ids, int count) {
  const int tid = threadIdx.x;
  int vectors = 0;
  if ((reinterpret_cast<unsigned long long>(ids) & 15ull) == 0ull) {
    vectors = count >> 2;
    const int4 *source = reinterpret_cast<const int4 *>(ids);
    int4 *target = reinterpret_cast<int4 *>(tile);
    for (int base = 0; base < vectors; base += kLoadBatch * kThreads) {
      int4 values[kLoadBatch];
#pragma unroll
      for (int b = 0; b < kLoadBatch; ++b) {
        const int v = base + b * kThreads + tid;
        if (v < vectors) values[b] = source[v];
      }
#pragma unroll
      for (int b = 0; b < kLoadBatch; ++b) {
        const int v = base + b * kThreads + tid;
        if (v < vectors) target[v] = values[b];
      }
    }
  }
  for (int i = vectors * 4 + tid; i < count; i += kThreads) tile[i] = ids[i];
}

struct RouteScanValues {
  int pairs, gate_up_items, down_items;
};

// Exclusive prefix sums over the block in thread order; `totals` receives the block sums.
static __device__ RouteScanValues route_exclusive_scan(RouteScanValues own, RouteScanValues *warp_sums, RouteScanValues &totals) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  RouteScanValues inclusive = own;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int pairs = __shfl_up_sync(0xffffffffu, inclusive.pairs, offset);
    const int gate_up = __shfl_up_sync(0xffffffffu, inclusive.gate_up_items, offset);
    const int down = __shfl_up_sync(0xffffffffu, inclusive.down_items, offset);
    if (lane >= offset) {
      inclusive.pairs += pairs;
      inclusive.gate_up_items += gate_up;
      inclusive.down_items += down;
    }
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (threadIdx.x == 0) {
    RouteScanValues running = {0, 0, 0};
    for (int w = 0; w < kWarps; ++w) {
      const RouteScanValues sum = warp_sums[w];
      warp_sums[w] = running;
      running.pairs += sum.pairs;
      running.gate_up_items += sum.gate_up_items;
      running.down_items += sum.down_items;
    }
    warp_sums[kWarps] = running;
  }
  __syncthreads();
  const RouteScanValues base = warp_sums[warp];
  totals = warp_sums[kWarps];
  RouteScanValues exclusive;
  exclusive.pairs = base.pairs + inclusive.pairs - own.pairs;
  exclusive.gate_up_items = base.gate_up_items + inclusive.gate_up_items - own.gate_up_items;
  exclusive.down_items = base.down_items + inclusive.down_items - own.down_items;
  return exclusive;
}

// Work items [first, first + ceil(pairs / bm)) of one expert whose pairs start at pair_start.
static __device__ void route_write_expert_items(int4 *items, int first, int expert, int pair_start, int pairs, int bm) {
  for (int index = 0; index * bm < pairs; ++index) {
    int4 value;
    value.x = expert;
    value.y = pair_start + index * bm;
    value.z = min(bm, pairs - index * bm);
    value.w = 0;
    items[first + index] = value;
  }
}

// A warming CTA (blockIdx.x >= 1 of gridDim.x): marks the experts that have pairs, lists the
// lowest-numbered ones whose gate_up weights fit in warm_bytes (at least one), and requests its share
// of their lines from L2. present holds kPresentWords words, warm_experts kNumExperts entries.
static __device__ void route_warm_l2(const int *topk_ids, int num_pairs, const unsigned char *gate_up_weights,
                                     long long warm_bytes, unsigned *present, int *warm_experts, int *warm_count) {
  const int tid = threadIdx.x;
  for (int w = tid; w < kPresentWords; w += kThreads) present[w] = 0u;
  __syncthreads();
  for (int i = tid; i < num_pairs; i += kThreads) {
    const int id = local_expert(topk_ids[i]);
    if (expert_id_valid(id, kNumExperts)) atomicOr(&present[id >> 5], 1u << (id & 31));
  }
  __syncthreads();
  if (tid == 0) {
    const long long budget = warm_bytes / kGateUpExpertBytes;
    const int limit = budget < 1 ? 1 : budget > kNumExperts ? kNumExperts : (int)budget;
    int count = 0;
    for (int w = 0; w < kPresentWords && count < limit; ++w) {
      unsigned bits = present[w];
      while (bits != 0u && count < limit) {
        const int bit = __ffs(bits) - 1;
        warm_experts[count++] = w * 32 + bit;
        bits &= bits - 1u;
      }
    }
    *warm_count = count;
  }
  __syncthreads();
  constexpr long long kLinesPerExpert = (kGateUpExpertBytes + kWarmLineBytes - 1) / kWarmLineBytes;
  const long long lines = *warm_count * kLinesPerExpert;
  const long long stride = (long long)(gridDim.x - 1) * kThreads;
  for (long long line = (long long)(blockIdx.x - 1) * kThreads + tid; line < lines; line += stride) {
    const int expert = warm_experts[line / kLinesPerExpert];
    const unsigned char *address =
        gate_up_weights + expert * kGateUpExpertBytes + (line % kLinesPerExpert) * kWarmLineBytes;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(address));
  }
}

// Zeros in out for each token whose top_k ids are all outside [0, E); one thread per token. Nothing
// when out is null.
static __device__ void route_zero_dead_tokens(const int *topk_ids, int num_pairs, int top_k, unsigned short *out) {
  if (out == nullptr || top_k <= 0) return;
  const int num_tokens = num_pairs / top_k;
  for (int token = threadIdx.x; token < num_tokens; token += kThreads) {
    bool live = false;
    for (int j = 0; j < top_k && !live; ++j) {
      const int id = local_expert(topk_ids[(long long)token * top_k + j]);
      live = expert_id_valid(id, kNumExperts);
    }
    if (live) continue;
    uint2 *row = reinterpret_cast<uint2 *>(out + (long long)token * kHidden);
    for (int v = 0; v < kHidden / 4; ++v) row[v] = make_uint2(0u, 0u);
  }
}

extern "C" __global__ void __launch_bounds__(kThreads, 1) @{ENTRY}(
    const int *__restrict__ topk_ids, int num_pairs, int bm_gate_up, int bm_down, int *__restrict__ sorted_pairs,
    int4 *__restrict__ items_gate_up, int4 *__restrict__ items_down, int *__restrict__ counters,
    const unsigned char *__restrict__ gate_up_weights, long long warm_bytes, int top_k, unsigned short *__restrict__ out) {
  __shared__ int cursor[kNumExperts];                     // pair counts, then the next free position
  __shared__ int warp_cursor[kPlaceWarps][kNumExperts];   // a tile segment's counts, then its cursors
  __shared__ RouteScanValues warp_sums[kWarps + 1];
  __shared__ int bad_ids;
  __shared__ __align__(16) int id_tile[kIdCapacity];     // ids [tile_start, tile_start + kIdCapacity)

  if (blockIdx.x > 0 && blockIdx.x == gridDim.x - 1) route_zero_dead_tokens(topk_ids, num_pairs, top_k, out);
  if (blockIdx.x > 0) {
    return route_warm_l2(topk_ids, num_pairs, gate_up_weights, warm_bytes, reinterpret_cast<unsigned *>(cursor),
                         &warp_cursor[0][0], &bad_ids);
  }
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int bm_up = max(bm_gate_up, 1);
  const int bm_dn = max(bm_down, 1);
  // All ids fit in shared memory (the usual case): they are read from global memory once.
  const bool resident = num_pairs <= kIdCapacity;
  for (int e = tid; e < kNumExperts; e += kThreads) cursor[e] = 0;
  if (tid == 0) bad_ids = 0;

  // Counts do not depend on the order of the additions.
  for (int tile_start = 0; tile_start < num_pairs; tile_start += kIdCapacity) {
    const int tile_count = min(kIdCapacity, num_pairs - tile_start);
    if (tile_start > 0) __syncthreads();  // the previous tile is counted
    route_load_ids(id_tile, topk_ids + tile_start, tile_count);
    __syncthreads();
    for (int i = tid; i < tile_count; i += kThreads) {
      const int id = local_expert(id_tile[i]);
      if (expert_id_valid(id, kNumExperts)) atomicAdd(&cursor[id], 1);
#if VOLT8_EXPERT_PARALLEL
      else if (!expert_id_valid(id_tile[i], kGlobalExperts)) atomicAdd(&bad_ids, 1);  // another rank's are not bad
#else
      else atomicAdd(&bad_ids, 1);
#endif
    }
  }
  __syncthreads();

  RouteScanValues own = {0, 0, 0};
  const int expert0 = tid * kExpertsPerThread;
  for (int e = expert0; e < expert0 + kExpertsPerThread && e < kNumExperts; ++e) {
    const int pairs = cursor[e];
    own.pairs += pairs;
    own.gate_up_items += (pairs + bm_up - 1) / bm_up;
    own.down_items += (pairs + bm_dn - 1) / bm_dn;
  }
  RouteScanValues totals;
  RouteScanValues start = route_exclusive_scan(own, warp_sums, totals);
  // Each thread writes its own experts' items, in expert order, and turns their counts into cursors.
  for (int e = expert0; e < expert0 + kExpertsPerThread && e < kNumExperts; ++e) {
    const int pairs = cursor[e];
    route_write_expert_items(items_gate_up, start.gate_up_items, e, start.pairs, pairs, bm_up);
    route_write_expert_items(items_down, start.down_items, e, start.pairs, pairs, bm_dn);
    cursor[e] = start.pairs;
    start.pairs += pairs;
    start.gate_up_items += (pairs + bm_up - 1) / bm_up;
    start.down_items += (pairs + bm_dn - 1) / bm_dn;
  }

  const unsigned lanes_below = (1u << lane) - 1u;
  for (int tile_start = 0; tile_start < num_pairs; tile_start += kIdCapacity) {
    const int tile_count = min(kIdCapacity, num_pairs - tile_start);
    const int segment = (tile_count + kPlaceWarps - 1) / kPlaceWarps;
    const int segment_begin = min(warp * segment, tile_count);
    const int segment_end = min(segment_begin + segment, tile_count);
    __syncthreads();  // cursors are set; the previous tile is placed
    if (!resident) {
      route_load_ids(id_tile, topk_ids + tile_start, tile_count);
    }
    for (int i = tid; i < kPlaceWarps * kNumExperts; i += kThreads) (&warp_cursor[0][0])[i] = 0;
    __syncthreads();
    if (warp < kPlaceWarps) {
      for (int i = segment_begin + lane; i < segment_end; i += 32) {
        const int id = local_expert(id_tile[i]);
        if (expert_id_valid(id, kNumExperts)) atomicAdd(&warp_cursor[warp][id], 1);
      }
    }
    __syncthreads();
    // Segment w of expert e starts after segments 0..w-1 of this tile and every earlier tile.
    for (int e = tid; e < kNumExperts; e += kThreads) {
      int running = cursor[e];
#pragma unroll
      for (int w = 0; w < kPlaceWarps; ++w) {
        const int count = warp_cursor[w][e];
        warp_cursor[w][e] = running;
        running += count;
      }
      cursor[e] = running;
    }
    __syncthreads();
    if (warp < kPlaceWarps) {
      // Pairs in pair order: peers with the same id among 32 are ranked by lane, then their leader
      // advances the segment's cursor for that expert.
      for (int base = segment_begin; base < segment_end; base += 32) {
        const int index = base + lane;
        const int id = index < segment_end ? local_expert(id_tile[index]) : -1;
        const bool valid = expert_id_valid(id, kNumExperts);
        const unsigned peers = __match_any_sync(0xffffffffu, valid ? id : -1);
        int position = 0;
        if (valid) position = warp_cursor[warp][id] + __popc(peers & lanes_below);
        __syncwarp();
        if (valid) {
          sorted_pairs[position] = tile_start + index;
          if ((peers & lanes_below) == 0u) warp_cursor[warp][id] += __popc(peers);
        }
        __syncwarp();
      }
    }
  }
  for (int position = totals.pairs + tid; position < num_pairs; position += kThreads) sorted_pairs[position] = -1;
  const int launches = (num_pairs + kLaunchRows - 1) / kLaunchRows;
  for (int launch = tid; launch < launches; launch += kThreads) {
    const int skipped = launch * kLaunchRows;
    counters[4 * launch] = max(totals.gate_up_items - skipped, 0);
    counters[4 * launch + 1] = max(totals.down_items - skipped, 0);
    counters[4 * launch + 2] = launch == 0 ? bad_ids : 0;
    counters[4 * launch + 3] = 0;
  }
  if (gridDim.x == 1) route_zero_dead_tokens(topk_ids, num_pairs, top_k, out);
}
