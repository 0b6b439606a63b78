// Groups routed pairs per expert on the device (one CTA), in pair order within each expert, and
// cuts each expert's pairs into work items of at most bm pairs for both GEMMs.
// counters: [0] gate_up items, [1] down items, [2] ids outside [0, E), [3] 0.

namespace {
constexpr int kThreads = @{THREADS};
constexpr int kWarps = kThreads / 32;
constexpr int kNumExperts = @{NUM_EXPERTS};
constexpr int kExpertsPerThread = (kNumExperts + kThreads - 1) / kThreads;
constexpr int kIdCapacity = @{ID_CAPACITY};  // ids held in shared memory at once (a multiple of 4)
constexpr int kLoadBatch = 4;                 // 16-byte loads each thread has in flight together
static_assert(kIdCapacity % 4 == 0, "id tiles must keep 16-byte alignment");
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

// The expert whose item range [starts[e], starts[e + 1]) holds `item`.
static __device__ int route_find_expert(const int *starts, int item) {
  int low = 0, high = kNumExperts - 1;
  while (low < high) {
    const int middle = (low + high + 1) >> 1;
    if (starts[middle] <= item) low = middle;
    else high = middle - 1;
  }
  return low;
}

static __device__ void route_write_items(const int *item_starts, const int *pair_starts, int total_items, int bm,
                                         int4 *items) {
  for (int item = threadIdx.x; item < total_items; item += kThreads) {
    const int expert = route_find_expert(item_starts, item);
    const int index = item - item_starts[expert];
    const int expert_pairs = pair_starts[expert + 1] - pair_starts[expert];
    int4 value;
    value.x = expert;
    value.y = pair_starts[expert] + index * bm;
    value.z = min(bm, expert_pairs - index * bm);
    value.w = 0;
    items[item] = value;
  }
}

extern "C" __global__ void __launch_bounds__(kThreads, 1) @{ENTRY}(
    const int *__restrict__ topk_ids, int num_pairs, int bm_gate_up, int bm_down, int *__restrict__ sorted_pairs,
    int4 *__restrict__ items_gate_up, int4 *__restrict__ items_down, int *__restrict__ counters) {
  __shared__ int pair_starts[kNumExperts + 1];       // first sorted position of each expert
  __shared__ int cursor[kNumExperts];                // pair counts, then the next free position
  __shared__ int gate_up_starts[kNumExperts + 1];    // first gate_up item of each expert
  __shared__ int down_starts[kNumExperts + 1];       // first down item of each expert
  __shared__ RouteScanValues warp_sums[kWarps + 1];
  __shared__ int bad_ids;
  __shared__ __align__(16) int id_tile[kIdCapacity];  // ids [tile_start, tile_start + kIdCapacity)

  const int tid = threadIdx.x;
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
      const int id = id_tile[i];
      if (id >= 0 && id < kNumExperts) atomicAdd(&cursor[id], 1);
      else atomicAdd(&bad_ids, 1);
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
  for (int e = expert0; e < expert0 + kExpertsPerThread && e < kNumExperts; ++e) {
    const int pairs = cursor[e];
    pair_starts[e] = start.pairs;
    gate_up_starts[e] = start.gate_up_items;
    down_starts[e] = start.down_items;
    start.pairs += pairs;
    start.gate_up_items += (pairs + bm_up - 1) / bm_up;
    start.down_items += (pairs + bm_dn - 1) / bm_dn;
  }
  if (tid == 0) {
    pair_starts[kNumExperts] = totals.pairs;
    gate_up_starts[kNumExperts] = totals.gate_up_items;
    down_starts[kNumExperts] = totals.down_items;
  }
  __syncthreads();
  for (int e = tid; e < kNumExperts; e += kThreads) cursor[e] = pair_starts[e];
  __syncthreads();

  for (int tile_start = 0; tile_start < num_pairs; tile_start += kIdCapacity) {
    const int tile_count = min(kIdCapacity, num_pairs - tile_start);
    if (!resident) {
      __syncthreads();  // the previous tile is placed
      route_load_ids(id_tile, topk_ids + tile_start, tile_count);
      __syncthreads();
    }
    if (tid < 32) {
      // One warp places the pairs in pair order: peers with the same id among 32 are ranked by
      // lane, then their leader advances the expert's cursor.
      const unsigned lanes_below = (1u << tid) - 1u;
      for (int base = 0; base < tile_count; base += 32) {
        const int index = base + tid;
        const int id = index < tile_count ? id_tile[index] : -1;
        const bool valid = id >= 0 && id < kNumExperts;
        const unsigned peers = __match_any_sync(0xffffffffu, valid ? id : -1);
        int position = 0;
        if (valid) position = cursor[id] + __popc(peers & lanes_below);
        __syncwarp();
        if (valid) {
          sorted_pairs[position] = tile_start + index;
          if ((peers & lanes_below) == 0u) cursor[id] += __popc(peers);
        }
        __syncwarp();
      }
    }
  }
  for (int position = totals.pairs + tid; position < num_pairs; position += kThreads) sorted_pairs[position] = -1;

  route_write_items(gate_up_starts, pair_starts, totals.gate_up_items, bm_up, items_gate_up);
  route_write_items(down_starts, pair_starts, totals.down_items, bm_dn, items_down);
  if (tid == 0) {
    counters[0] = totals.gate_up_items;
    counters[1] = totals.down_items;
    counters[2] = bad_ids;
    counters[3] = 0;
  }
}
