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

@{include moe_route_constants.cu}

@{include moe_route_common.cu}

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

  route_count_range(topk_ids, num_pairs, id_tile, cursor, &bad_ids);
  const RouteScanValues totals = route_write_items(cursor, bm_up, bm_dn, items_gate_up, items_down, warp_sums);

  route_place_range(topk_ids, 0, num_pairs, resident, warp, lane, id_tile, cursor, warp_cursor, sorted_pairs);
  for (int position = totals.pairs + tid; position < num_pairs; position += kThreads) sorted_pairs[position] = -1;
  route_write_counters(counters, num_pairs, totals, &bad_ids);
  if (gridDim.x == 1) route_zero_dead_tokens(topk_ids, num_pairs, top_k, out);
}
