// The route's pieces shared by moe_route.cu (one CTA) and moe_route_parts.cu (many): loading ids,
// the block scan, writing an expert's work items, counting and placing a range of pairs, warming L2 and
// zeroing the out rows of tokens with no live id. Included after moe_route_constants.cu.
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

// Each expert's work items for both GEMMs from the pair counts in cursor, which become each expert's
// first position in sorted_pairs; returns the totals. bm_up, bm_dn: the GEMMs' block_m, at least 1.
// Each thread writes its own experts' items, in expert order.
static __device__ RouteScanValues route_write_items(int *cursor, int bm_up, int bm_dn, int4 *items_gate_up,
                                                    int4 *items_down, RouteScanValues *warp_sums) {
  const int tid = threadIdx.x;
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
    route_write_expert_items(items_gate_up, start.gate_up_items, e, start.pairs, pairs, bm_up);
    route_write_expert_items(items_down, start.down_items, e, start.pairs, pairs, bm_dn);
    cursor[e] = start.pairs;
    start.pairs += pairs;
    start.gate_up_items += (pairs + bm_up - 1) / bm_up;
    start.down_items += (pairs + bm_dn - 1) / bm_dn;
  }
  return totals;
}

// The GEMM launches' counters (see moe_route.cu) from the totals and the bad-id count.
static __device__ void route_write_counters(int *counters, int num_pairs, const RouteScanValues &totals,
                                            const int *bad_ids) {
  const int launches = (num_pairs + kLaunchRows - 1) / kLaunchRows;
  for (int launch = threadIdx.x; launch < launches; launch += kThreads) {
    const int skipped = launch * kLaunchRows;
    counters[4 * launch] = max(totals.gate_up_items - skipped, 0);
    counters[4 * launch + 1] = max(totals.down_items - skipped, 0);
    counters[4 * launch + 2] = launch == 0 ? *bad_ids : 0;
    counters[4 * launch + 3] = 0;
  }
}

// Counts the pairs of each of the rank's experts among ids[0, count) into cursor (zeroed before) and
// the bad ids into *bad_ids, through id_tile a tile at a time; on return every thread is past its
// last count. Counts do not depend on the order of the additions.
static __device__ void route_count_range(const int *ids, int count, int *id_tile, int *cursor, int *bad_ids) {
  const int tid = threadIdx.x;
  for (int tile_start = 0; tile_start < count; tile_start += kIdCapacity) {
    const int tile_count = min(kIdCapacity, count - tile_start);
    if (tile_start > 0) __syncthreads();  // the previous tile is counted
    route_load_ids(id_tile, ids + tile_start, tile_count);
    __syncthreads();
    for (int i = tid; i < tile_count; i += kThreads) {
      const int id = local_expert(id_tile[i]);
      if (expert_id_valid(id, kNumExperts)) atomicAdd(&cursor[id], 1);
#if VOLT8_EXPERT_PARALLEL
      else if (!expert_id_valid(id_tile[i], kGlobalExperts)) atomicAdd(bad_ids, 1);  // another rank's are not bad
#else
      else atomicAdd(bad_ids, 1);
#endif
    }
  }
  __syncthreads();
}

// Places pairs [first, first + count) of ids (pair indices counted from ids' start) into
// sorted_pairs, from each expert's cursor on (cursor[e]: where the range's first pair of expert e
// goes; it ends past the range's last), in pair order. resident: the range lies in id_tile already
// (one tile, counted by this CTA). warp_cursor: kPlaceWarps rows of kNumExperts.
static __device__ void route_place_range(const int *ids, int first, int count, bool resident, int warp, int lane,
                                         int *id_tile, int *cursor, int (*warp_cursor)[kNumExperts],
                                         int *sorted_pairs) {
  const int tid = threadIdx.x;
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int tile_start = 0; tile_start < count; tile_start += kIdCapacity) {
    const int tile_count = min(kIdCapacity, count - tile_start);
    const int segment = (tile_count + kPlaceWarps - 1) / kPlaceWarps;
    const int segment_begin = min(warp * segment, tile_count);
    const int segment_end = min(segment_begin + segment, tile_count);
    __syncthreads();  // cursors are set; the previous tile is placed
    if (!resident) {
      route_load_ids(id_tile, ids + first + tile_start, tile_count);
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
          sorted_pairs[position] = first + tile_start + index;
          if ((peers & lanes_below) == 0u) warp_cursor[warp][id] += __popc(peers);
        }
        __syncwarp();
      }
    }
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

