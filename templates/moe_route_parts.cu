// The route of many routed pairs on many CTAs: the same sorted pairs, work items and counters as
// moe_route.cu's one CTA (every expert's pairs in pair order), in three launches of this kernel, one a
// pass. The pairs are cut into `parts` contiguous ranges of part_pairs (a multiple of 4, so each
// range's ids keep 16-byte alignment), one CTA each:
//   pass 0, count (parts + 1 CTAs): CTA p counts its range's pairs per expert into part_counts[p][e]
//           and its bad ids into part_counts[parts][p] (after the parts x kNumExperts counts); the last
//           CTA writes the zeros of tokens with no live id when out is not null (moe_route.cu).
//   pass 1, scan (one CTA): each expert's total, its work items and first position as moe_route.cu
//           makes them, the GEMMs' counters, and part_counts[p][e] turned into where range p's first
//           pair of expert e goes; the pair total after the bad counts.
//   pass 2, place (parts CTAs): CTA p places its range from those positions, as moe_route.cu places a
//           tile, and the CTAs together fill the positions past the pair total with -1.
// part_counts holds parts * (kNumExperts + 1) + 1 ints.
@{include moe_common.cu}
@{include moe_expert_range.cu}
@{include moe_route_constants.cu}

@{include moe_route_common.cu}

extern "C" __global__ void __launch_bounds__(kThreads, 1) @{ENTRY}(
    const int *__restrict__ topk_ids, int num_pairs, int bm_gate_up, int bm_down, int *__restrict__ sorted_pairs,
    int4 *__restrict__ items_gate_up, int4 *__restrict__ items_down, int *__restrict__ counters,
    int *__restrict__ part_counts, int parts, int pass, int top_k, unsigned short *__restrict__ out) {
  __shared__ int cursor[kNumExperts];                     // counts, then the next free position
  __shared__ int warp_cursor[kPlaceWarps][kNumExperts];   // a tile segment's counts, then its cursors
  __shared__ RouteScanValues warp_sums[kWarps + 1];
  __shared__ int bad_ids;
  __shared__ __align__(16) int id_tile[kIdCapacity];

  const int tid = threadIdx.x;
  const int part = blockIdx.x;
  const int part_pairs = ((num_pairs + parts - 1) / parts + 3) & ~3;
  const long long range_first = (long long)part * part_pairs;
  const int first = (int)min(range_first, (long long)num_pairs);
  const int count = min(part_pairs, num_pairs - first);
  int *bad_counts = part_counts + (long long)parts * kNumExperts;
  int *pair_total = bad_counts + parts;

  if (pass == 0) {
    if (part == parts) return route_zero_dead_tokens(topk_ids, num_pairs, top_k, out);
    for (int e = tid; e < kNumExperts; e += kThreads) cursor[e] = 0;
    if (tid == 0) bad_ids = 0;
    route_count_range(topk_ids + first, count, id_tile, cursor, &bad_ids);
    for (int e = tid; e < kNumExperts; e += kThreads) part_counts[(long long)part * kNumExperts + e] = cursor[e];
    if (tid == 0) bad_counts[part] = bad_ids;
    return;
  }
  if (pass == 1) {
    if (tid == 0) bad_ids = 0;
    for (int e = tid; e < kNumExperts; e += kThreads) {
      int total = 0;
      for (int p = 0; p < parts; ++p) total += part_counts[(long long)p * kNumExperts + e];
      cursor[e] = total;
    }
    __syncthreads();
    int bad = 0;
    for (int p = tid; p < parts; p += kThreads) bad += bad_counts[p];
    if (bad != 0) atomicAdd(&bad_ids, bad);
    const RouteScanValues totals =
        route_write_items(cursor, max(bm_gate_up, 1), max(bm_down, 1), items_gate_up, items_down, warp_sums);
    __syncthreads();  // every expert's first position is in cursor, and every bad count is in
    for (int e = tid; e < kNumExperts; e += kThreads) {
      int running = cursor[e];
      for (int p = 0; p < parts; ++p) {
        int *at = part_counts + (long long)p * kNumExperts + e;
        const int pairs = *at;
        *at = running;
        running += pairs;
      }
    }
    route_write_counters(counters, num_pairs, totals, &bad_ids);
    if (tid == 0) *pair_total = totals.pairs;
    return;
  }
  if (part >= parts) return;
  for (int e = tid; e < kNumExperts; e += kThreads) cursor[e] = part_counts[(long long)part * kNumExperts + e];
  route_place_range(topk_ids, first, count, false, tid >> 5, tid & 31, id_tile, cursor, warp_cursor, sorted_pairs);
  const long long stride = (long long)parts * kThreads;
  for (long long position = *pair_total + (long long)part * kThreads + tid; position < num_pairs; position += stride)
    sorted_pairs[position] = -1;
}
