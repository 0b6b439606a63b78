// Speculative-decoding rejection sampling in three passes, with the rules of rejection_rules.cu.
// Rows are cut into `splits` chunks so that a small batch still spreads over the whole GPU; every
// cross-chunk reduction is exact (maxima and integer sums), so the cut changes no token.
//   volt8_rejection_rows  grid (B * row_splits, K+1): one CTA per chunk of each row request b uses
//                         (positions 0..num_draft) scans its chunk into scans[b][position][split].
//   volt8_rejection_walk  grid B * sum_splits: every CTA of request b merges the chunk scans into
//                         row information (into out_ids), decides all drafts at once (the first
//                         rejection is the stop), and sums the integer weights of its chunk of the
//                         stop row, a contiguous part per warp, into part_sums[b][split][warp] and
//                         chunk_sums[b][split]. CTA 0 keeps the stop in stops[b].
//   volt8_rejection_draw  grid B: draws the point in the total weight, finds its chunk and warp part
//                         from the sums, narrows to the token inside, and overwrites the out_ids row.
// A request with invalid input gets out_ids all -1 and num_accepted 0.

@{include philox.cu}
@{include rejection_rules.cu}

namespace {
constexpr int kRowThreads = @{ROW_THREADS};
constexpr int kRowWarps = kRowThreads / 32;
constexpr int kFinishThreads = @{FINISH_THREADS};
constexpr int kFinishWarps = kFinishThreads / 32;
constexpr int kLoadsInFlight = 8; // per lane, in the weight sums
constexpr unsigned kFullMask = 0xffffffffu;
}  // namespace

static __device__ __forceinline__ void row_scan_add4(volt8_row_scan &scan, int token, float4 target, float4 draft) {
  volt8_row_scan_add(&scan, token, target.x, draft.x);
  volt8_row_scan_add(&scan, token + 1, target.y, draft.y);
  volt8_row_scan_add(&scan, token + 2, target.z, draft.z);
  volt8_row_scan_add(&scan, token + 3, target.w, draft.w);
}

// Scans tokens [begin, end) of one row; begin is a multiple of 4.
static __device__ void scan_chunk(volt8_row_scan &scan, const float *__restrict__ target_row,
                                  const float *__restrict__ draft_row, int draft_id, int begin, int end) {
  int scalar_start = begin;
  const bool aligned = ((unsigned long long)(target_row + begin) & 15) == 0 &&
                       ((unsigned long long)(draft_row + begin) & 15) == 0;
  if (aligned) {
    const int vectors = (end - begin) / 4;
    const float4 *target4 = reinterpret_cast<const float4 *>(target_row + begin);
    const float4 *draft4 = reinterpret_cast<const float4 *>(draft_row + begin);
#pragma unroll 4
    for (int vector = threadIdx.x; vector < vectors; vector += kRowThreads) {
      const int token = begin + vector * 4;
      const float4 target = target4[vector];
      float4 draft;
      if (draft_row) {
        draft = draft4[vector];
      } else {
        draft = make_float4(volt8_one_hot(token, draft_id), volt8_one_hot(token + 1, draft_id),
                            volt8_one_hot(token + 2, draft_id), volt8_one_hot(token + 3, draft_id));
      }
      row_scan_add4(scan, token, target, draft);
    }
    scalar_start = begin + vectors * 4;
  }
#pragma unroll 4
  for (int token = scalar_start + threadIdx.x; token < end; token += kRowThreads)
    volt8_row_scan_add(&scan, token, target_row[token], volt8_draft_value(draft_row, draft_id, token));
}

static __device__ __forceinline__ void warp_merge(volt8_row_scan &scan) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    volt8_row_scan other;
    other.invalid = __shfl_down_sync(kFullMask, scan.invalid, offset);
    other.argmax = __shfl_down_sync(kFullMask, scan.argmax, offset);
    other.target_max_bits = __shfl_down_sync(kFullMask, scan.target_max_bits, offset);
    other.residual_max_bits = __shfl_down_sync(kFullMask, scan.residual_max_bits, offset);
    volt8_row_scan_merge(&scan, &other);
  }
}

extern "C" __global__ void __launch_bounds__(kRowThreads) volt8_rejection_rows(
    const int *__restrict__ num_draft, const int *__restrict__ draft_ids, const float *__restrict__ draft_probs,
    const float *__restrict__ target_probs, int max_draft, int vocab, int splits, int chunk,
    volt8_row_scan *__restrict__ scans) {
  __shared__ volt8_row_scan warp_scans[kRowWarps];
  const long long request = blockIdx.x / splits;
  const int split = blockIdx.x % splits;
  const int position = blockIdx.y;
  const int drafts = num_draft[request];
  if (drafts < 0 || drafts > max_draft || position > drafts) return;
  const long long rows = (long long)max_draft + 1;
  const int draft_id = position < drafts ? draft_ids[request * max_draft + position] : -1;
  volt8_row_scan scan;
  volt8_row_scan_init(&scan, position < drafts && (draft_id < 0 || draft_id >= vocab));
  if (!scan.invalid) {
    const float *target_row = target_probs + (request * rows + position) * vocab;
    const float *draft_row =
        draft_probs && position < drafts ? draft_probs + (request * max_draft + position) * vocab : nullptr;
    const int begin = min(vocab, split * chunk);
    scan_chunk(scan, target_row, draft_row, draft_id, begin, min(vocab, begin + chunk));
  }
  warp_merge(scan);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_scans[warp] = scan;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int other = 1; other < kRowWarps; ++other) volt8_row_scan_merge(&scan, &warp_scans[other]);
    scans[(request * rows + position) * splits + split] = scan;
  }
}

// The rows of the stop: the target row, and the draft row (or one-hot id) when drawing from the residual.
struct StopRows {
  const float *target;
  const float *draft;
  int draft_id;
};

static __device__ StopRows stop_rows(const volt8_rejection_stop &stop, const int *request_drafts,
                                     const float *request_target, const float *request_draft, int vocab) {
  StopRows rows;
  rows.target = request_target + stop.accepted * (long long)vocab;
  rows.draft = stop.use_residual && request_draft ? request_draft + stop.accepted * (long long)vocab : nullptr;
  rows.draft_id = stop.use_residual && !request_draft ? request_drafts[stop.accepted] : -1;
  return rows;
}

// The tokens a warp covers of a chunk: 32 contiguous parts, each a whole number of warp widths.
static __device__ __forceinline__ int warp_part(int chunk) { return ((chunk + 31) / 32 + 31) & ~31; }

// Sum over [begin, end) of the stop row's weights by one warp, kLoadsInFlight loads a lane at a
// time; every lane gets the sum.
static __device__ volt8_u64 warp_sum_weights(const volt8_rejection_stop &stop, const StopRows &rows, int begin, int end) {
  const int lane = threadIdx.x & 31;
  volt8_u64 sum = 0;
  for (int base = begin; base < end; base += 32 * kLoadsInFlight) {
    float target[kLoadsInFlight], draft[kLoadsInFlight];
#pragma unroll
    for (int load = 0; load < kLoadsInFlight; ++load) {
      const int token = base + load * 32 + lane;
      target[load] = token < end ? rows.target[token] : 0.0f;
      draft[load] = token < end && stop.use_residual ? volt8_draft_value(rows.draft, rows.draft_id, token) : 0.0f;
    }
#pragma unroll
    for (int load = 0; load < kLoadsInFlight; ++load) sum += volt8_stop_weight(&stop, target[load], draft[load]);
  }
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(kFullMask, sum, offset);
  return sum;
}

// In `count` weights (every lane of one warp calls it), the first index whose inclusive prefix from
// *base exceeds point; *base becomes the weight before that index. count - 1 if none does.
static __device__ int warp_find(const volt8_u64 *__restrict__ weights, int count, volt8_u64 point, volt8_u64 *base) {
  const int lane = threadIdx.x & 31;
  volt8_u64 running = *base;
  for (int first = 0; first < count; first += 32) {
    const int index = first + lane;
    const volt8_u64 value = index < count ? weights[index] : 0;
    volt8_u64 prefix = value;
    for (int offset = 1; offset < 32; offset <<= 1) {
      const volt8_u64 below = __shfl_up_sync(kFullMask, prefix, offset);
      if (lane >= offset) prefix += below;
    }
    const unsigned past = __ballot_sync(kFullMask, index < count && running + prefix > point);
    if (past) {
      const int found = __ffs(past) - 1;
      const volt8_u64 own = __shfl_sync(kFullMask, value, found);
      *base = running + __shfl_sync(kFullMask, prefix, found) - own;
      return first + found;
    }
    running += __shfl_sync(kFullMask, prefix, 31);
  }
  *base = running;
  return count - 1;
}

extern "C" __global__ void __launch_bounds__(kFinishThreads) volt8_rejection_walk(
    const int *__restrict__ num_draft, const int *__restrict__ draft_ids, const float *__restrict__ draft_probs,
    const float *__restrict__ target_probs, const unsigned char *__restrict__ greedy, int max_draft, int vocab,
    int row_splits, const volt8_row_scan *__restrict__ scans, int sum_splits, int sum_chunk,
    unsigned long long seed, unsigned long long offset, int *__restrict__ out_ids,
    volt8_stop_record *__restrict__ stops, volt8_u64 *__restrict__ chunk_sums, volt8_u64 *__restrict__ part_sums) {
  __shared__ volt8_stop_record record;
  __shared__ volt8_u64 warp_sums[kFinishWarps];
  const long long request = blockIdx.x / sum_splits;
  const int split = blockIdx.x % sum_splits;
  const long long rows = (long long)max_draft + 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int drafts = num_draft[request];
  const bool drafts_ok = drafts >= 0 && drafts <= max_draft;
  const int is_greedy = greedy && greedy[request];
  int *out_row = out_ids + request * rows;
  // Row information of positions 0..num_draft: a warp per row merges its chunk scans.
  for (int position = warp; drafts_ok && position <= drafts; position += kFinishWarps) {
    const volt8_row_scan *row_scans = scans + (request * rows + position) * row_splits;
    volt8_row_scan scan;
    volt8_row_scan_init(&scan, 0);
    for (int part = lane; part < row_splits; part += 32) volt8_row_scan_merge(&scan, &row_scans[part]);
    warp_merge(scan);
    if (lane == 0) out_row[position] = volt8_row_info(&scan, is_greedy);
  }
  __syncthreads();
  const int *request_drafts = draft_ids + request * max_draft;
  const float *request_target = target_probs + request * rows * vocab;
  const float *request_draft = draft_probs ? draft_probs + request * max_draft * vocab : nullptr;
  // Warp 0 checks the rows and decides every draft at once; the first rejection is the stop, as in
  // the sequential volt8_rejection_walk.
  if (warp == 0) {
    bool valid = drafts_ok;
    for (int first = 0; valid && first <= drafts; first += 32)
      valid = !__any_sync(kFullMask, first + lane <= drafts && out_row[first + lane] < 0);
    int stop_position = drafts_ok ? drafts : 0;
    for (int first = 0; valid && first < drafts; first += 32) {
      const int position = first + lane;
      const bool rejected = position < drafts &&
                            !volt8_draft_accepted(out_row, request_drafts, request_target, request_draft, vocab,
                                                  is_greedy, seed, offset, (int)request, position);
      const unsigned rejections = __ballot_sync(kFullMask, rejected);
      if (rejections) {
        stop_position = first + __ffs(rejections) - 1;
        break;
      }
    }
    if (lane == 0) {
      record.valid = valid;
      record.stop = volt8_rejection_stop();
      if (valid)
        volt8_rejection_stop_at(out_row, drafts, is_greedy, seed, offset, (int)request, stop_position, &record.stop);
      if (split == 0) stops[request] = record;
    }
  }
  __syncthreads();
  if (!record.valid || record.stop.token >= 0) return;
  // Weights of this CTA's chunk of the stop row: one contiguous part a warp.
  const StopRows stop = stop_rows(record.stop, request_drafts, request_target, request_draft, vocab);
  const int chunk_begin = min(vocab, split * sum_chunk), chunk_end = min(vocab, chunk_begin + sum_chunk);
  const int part = warp_part(sum_chunk);
  const int begin = min(chunk_end, chunk_begin + warp * part);
  const volt8_u64 sum = warp_sum_weights(record.stop, stop, begin, min(chunk_end, begin + part));
  const long long cta = request * sum_splits + split;
  if (lane == 0) {
    part_sums[cta * kFinishWarps + warp] = sum;
    warp_sums[warp] = sum;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    volt8_u64 total = 0;
    for (int other = 0; other < kFinishWarps; ++other) total += warp_sums[other];
    chunk_sums[cta] = total;
  }
}

struct DrawState {
  int begin, end;       // the part of the row that holds the token
  volt8_u64 base;       // weight of the tokens before `begin`
  volt8_u64 point;      // the drawn point in [0, total weight)
  int token;
};

// Finds the first token of [state.begin, state.end) whose inclusive weight prefix (from state.base)
// exceeds state.point: the block narrows the range 32-fold per step, then one warp scans the last
// <= 32 tokens.
static __device__ int narrow_to_token(const volt8_rejection_stop &stop, const StopRows &rows, DrawState &state,
                                      volt8_u64 *part_sums) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  while (state.end - state.begin > 32) {
    const int part = warp_part(state.end - state.begin);
    const int begin = min(state.end, state.begin + warp * part);
    const volt8_u64 sum = warp_sum_weights(stop, rows, begin, min(state.end, begin + part));
    if (lane == 0) part_sums[warp] = sum;
    __syncthreads();
    if (warp == 0) {
      volt8_u64 base = state.base;
      const int chosen = warp_find(part_sums, kFinishWarps, state.point, &base);
      __syncwarp();
      if (lane == 0) {
        state.base = base;
        state.begin = min(state.end, state.begin + chosen * part);
        state.end = min(state.end, state.begin + part);
      }
    }
    __syncthreads();
  }
  if (warp == 0) {
    const int token = state.begin + lane;
    const bool inside = token < state.end;
    const float target = inside ? rows.target[token] : 0.0f;
    const float draft = inside && stop.use_residual ? volt8_draft_value(rows.draft, rows.draft_id, token) : 0.0f;
    volt8_u64 prefix = volt8_stop_weight(&stop, target, draft);
    for (int offset = 1; offset < 32; offset <<= 1) {
      const volt8_u64 below = __shfl_up_sync(kFullMask, prefix, offset);
      if (lane >= offset) prefix += below;
    }
    const unsigned past = __ballot_sync(kFullMask, inside && state.base + prefix > state.point);
    if (lane == 0) state.token = past ? state.begin + __ffs(past) - 1 : -1;
  }
  __syncthreads();
  return state.token;
}

extern "C" __global__ void __launch_bounds__(kFinishThreads) volt8_rejection_draw(
    const int *__restrict__ draft_ids, const float *__restrict__ draft_probs, const float *__restrict__ target_probs,
    int max_draft, int vocab, int sum_splits, int sum_chunk, const volt8_stop_record *__restrict__ stops,
    const volt8_u64 *__restrict__ chunk_sums, const volt8_u64 *__restrict__ part_sums, int *__restrict__ out_ids,
    int *__restrict__ num_accepted) {
  __shared__ volt8_stop_record record;
  __shared__ DrawState state;
  __shared__ volt8_u64 narrow_sums[kFinishWarps];
  const long long request = blockIdx.x;
  const long long rows = (long long)max_draft + 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int *out_row = out_ids + request * rows;
  const int *request_drafts = draft_ids + request * max_draft;
  if (threadIdx.x == 0) {
    record = stops[request];
    state.token = record.valid ? record.stop.token : -1;
  }
  __syncthreads();
  const bool draw = record.valid && record.stop.token < 0;
  if (draw && warp == 0) {
    // The point in the total weight, its chunk from the chunk sums, and its warp part inside that.
    const volt8_u64 *request_sums = chunk_sums + request * sum_splits;
    volt8_u64 total = 0;
    for (int split = lane; split < sum_splits; split += 32) total += request_sums[split];
    for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(kFullMask, total, offset);
    const volt8_u64 point = volt8_random_below(record.stop.random, total);
    volt8_u64 base = 0;
    const int chunk = warp_find(request_sums, sum_splits, point, &base);
    const int part = warp_part(sum_chunk);
    const int within = warp_find(part_sums + (request * sum_splits + chunk) * kFinishWarps, kFinishWarps, point, &base);
    if (lane == 0) {
      const int chunk_begin = min(vocab, chunk * sum_chunk), chunk_end = min(vocab, chunk_begin + sum_chunk);
      state.point = point;
      state.base = base;
      state.begin = min(chunk_end, chunk_begin + within * part);
      state.end = min(chunk_end, state.begin + part);
    }
  }
  __syncthreads();
  if (draw) {
    const float *request_target = target_probs + request * rows * vocab;
    const float *request_draft = draft_probs ? draft_probs + request * max_draft * vocab : nullptr;
    narrow_to_token(record.stop, stop_rows(record.stop, request_drafts, request_target, request_draft, vocab), state,
                    narrow_sums);
  }
  const int token = state.token;
  const int accepted = token >= 0 ? record.stop.accepted : 0;
  for (int position = threadIdx.x; position <= max_draft; position += kFinishThreads)
    out_row[position] = token < 0 || position > accepted ? -1 : position < accepted ? request_drafts[position] : token;
  if (threadIdx.x == 0) num_accepted[request] = accepted;
}
