// Speculative-decoding rejection sampling in two passes, with the rules of rejection_rules.cu.
//   volt8_rejection_rows   grid (B, K+1): one CTA per row that request b uses (positions 0..num_draft)
//                          checks its probabilities and writes the row information into out_ids.
//   volt8_rejection_finish grid B: walks the drafts, draws the recovered or bonus token from exact
//                          integer weights, and overwrites the request's out_ids row.
// A request with invalid input gets out_ids all -1 and num_accepted 0.

@{include philox.cu}
@{include rejection_rules.cu}

namespace {
constexpr int kRowThreads = @{ROW_THREADS};
constexpr int kRowWarps = kRowThreads / 32;
constexpr int kFinishThreads = @{FINISH_THREADS};
constexpr int kFinishWarps = kFinishThreads / 32;
constexpr int kLoadsInFlight = 8; // per lane, in the finish pass's weight sums
constexpr unsigned kFullMask = 0xffffffffu;
}  // namespace

static __device__ __forceinline__ void row_scan_add4(volt8_row_scan &scan, int token, float4 target, float4 draft) {
  volt8_row_scan_add(&scan, token, target.x, draft.x);
  volt8_row_scan_add(&scan, token + 1, target.y, draft.y);
  volt8_row_scan_add(&scan, token + 2, target.z, draft.z);
  volt8_row_scan_add(&scan, token + 3, target.w, draft.w);
}

static __device__ void scan_row(volt8_row_scan &scan, const float *__restrict__ target_row,
                                const float *__restrict__ draft_row, int draft_id, int vocab) {
  int scalar_start = 0;
  const bool aligned = ((unsigned long long)target_row & 15) == 0 && ((unsigned long long)draft_row & 15) == 0;
  if (aligned) {
    const int vectors = vocab / 4;
    const float4 *target4 = reinterpret_cast<const float4 *>(target_row);
    const float4 *draft4 = reinterpret_cast<const float4 *>(draft_row);
#pragma unroll 4
    for (int vector = threadIdx.x; vector < vectors; vector += kRowThreads) {
      const int token = vector * 4;
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
    scalar_start = vectors * 4;
  }
#pragma unroll 4
  for (int token = scalar_start + threadIdx.x; token < vocab; token += kRowThreads)
    volt8_row_scan_add(&scan, token, target_row[token], volt8_draft_value(draft_row, draft_id, token));
}

static __device__ void row_scan_reduce(volt8_row_scan &scan, volt8_row_scan *warp_scans) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    volt8_row_scan other;
    other.invalid = __shfl_down_sync(kFullMask, scan.invalid, offset);
    other.argmax = __shfl_down_sync(kFullMask, scan.argmax, offset);
    other.target_max_bits = __shfl_down_sync(kFullMask, scan.target_max_bits, offset);
    other.residual_max_bits = __shfl_down_sync(kFullMask, scan.residual_max_bits, offset);
    volt8_row_scan_merge(&scan, &other);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_scans[warp] = scan;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int other = 1; other < kRowWarps; ++other) volt8_row_scan_merge(&scan, &warp_scans[other]);
}

extern "C" __global__ void __launch_bounds__(kRowThreads) volt8_rejection_rows(
    const int *__restrict__ num_draft, const int *__restrict__ draft_ids, const float *__restrict__ draft_probs,
    const float *__restrict__ target_probs, const unsigned char *__restrict__ greedy, int max_draft, int vocab,
    int *__restrict__ out_ids) {
  __shared__ volt8_row_scan warp_scans[kRowWarps];
  const long long request = blockIdx.x;
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
    scan_row(scan, target_row, draft_row, draft_id, vocab);
  }
  row_scan_reduce(scan, warp_scans);
  if (threadIdx.x == 0) out_ids[request * rows + position] = volt8_row_info(&scan, greedy && greedy[request]);
}

// Sum over `warp`'s part [begin, end) of the weights, kLoadsInFlight loads per lane at a time.
static __device__ volt8_u64 sum_weights(const volt8_rejection_stop &stop, const float *__restrict__ target_row,
                                        const float *__restrict__ draft_row, int draft_id, int begin, int end) {
  const int lane = threadIdx.x & 31;
  volt8_u64 sum = 0;
  for (int base = begin; base < end; base += 32 * kLoadsInFlight) {
    float target[kLoadsInFlight], draft[kLoadsInFlight];
#pragma unroll
    for (int load = 0; load < kLoadsInFlight; ++load) {
      const int token = base + load * 32 + lane;
      target[load] = token < end ? target_row[token] : 0.0f;
      draft[load] = token < end && stop.use_residual ? volt8_draft_value(draft_row, draft_id, token) : 0.0f;
    }
#pragma unroll
    for (int load = 0; load < kLoadsInFlight; ++load) sum += volt8_stop_weight(&stop, target[load], draft[load]);
  }
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_down_sync(kFullMask, sum, offset);
  return sum;
}

struct DrawState {
  int begin, end;       // the part of the row that holds the token
  volt8_u64 base;       // weight of the tokens before `begin`
  volt8_u64 point;      // the drawn point in [0, total weight)
  int token;
};

// Finds the first token whose inclusive weight prefix exceeds the drawn point: the block narrows
// the range 32-fold per step, then one warp scans the last <= 32 tokens.
static __device__ int draw_token(const volt8_rejection_stop &stop, const float *__restrict__ target_row,
                                 const float *__restrict__ draft_row, int draft_id, int vocab, DrawState &state,
                                 volt8_u64 *part_sums) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) {
    state.begin = 0;
    state.end = vocab;
    state.base = 0;
    state.token = -1;
  }
  __syncthreads();
  // The first step always runs: it sums the whole row and draws the point.
  for (bool first = true; first || state.end - state.begin > 32; first = false) {
    const int span = state.end - state.begin;
    const int part = ((span + kFinishWarps - 1) / kFinishWarps + 31) & ~31;
    const int begin = min(state.end, state.begin + warp * part), end = min(state.end, begin + part);
    const volt8_u64 sum = sum_weights(stop, target_row, draft_row, draft_id, begin, end);
    if (lane == 0) part_sums[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
      if (first) {
        volt8_u64 total = 0;
        for (int other = 0; other < kFinishWarps; ++other) total += part_sums[other];
        state.point = volt8_random_below(stop.random, total);
      }
      volt8_u64 running = state.base;
      int chosen = kFinishWarps - 1;
      for (int other = 0; other < kFinishWarps; ++other) {
        if (state.point < running + part_sums[other]) {
          chosen = other;
          break;
        }
        running += part_sums[other];
      }
      state.base = running;
      state.begin = min(state.end, state.begin + chosen * part);
      state.end = min(state.end, state.begin + part);
    }
    __syncthreads();
  }
  if (warp == 0) {
    const int token = state.begin + lane;
    const bool inside = token < state.end;
    const float target = inside ? target_row[token] : 0.0f;
    const float draft = inside && stop.use_residual ? volt8_draft_value(draft_row, draft_id, token) : 0.0f;
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

extern "C" __global__ void __launch_bounds__(kFinishThreads) volt8_rejection_finish(
    const int *__restrict__ num_draft, const int *__restrict__ draft_ids, const float *__restrict__ draft_probs,
    const float *__restrict__ target_probs, const unsigned char *__restrict__ greedy, int max_draft, int vocab,
    unsigned long long seed, unsigned long long offset, int *__restrict__ out_ids, int *__restrict__ num_accepted) {
  __shared__ volt8_rejection_stop stop;
  __shared__ int valid;
  __shared__ DrawState state;
  __shared__ volt8_u64 part_sums[kFinishWarps];
  const long long request = blockIdx.x;
  const long long rows = (long long)max_draft + 1;
  int *out_row = out_ids + request * rows;
  const int *request_drafts = draft_ids + request * max_draft;
  const float *request_target = target_probs + request * rows * vocab;
  const float *request_draft = draft_probs ? draft_probs + request * max_draft * vocab : nullptr;
  if (threadIdx.x == 0) {
    const int drafts = num_draft[request];
    valid = drafts >= 0 && drafts <= max_draft &&
            volt8_rejection_walk(out_row, drafts, request_drafts, request_target, request_draft, vocab,
                                 greedy && greedy[request], seed, offset, (int)request, &stop);
  }
  __syncthreads();
  int token = valid ? stop.token : -1;
  if (valid && token < 0) {
    const float *target_row = request_target + stop.accepted * (long long)vocab;
    const float *draft_row = stop.use_residual && request_draft ? request_draft + stop.accepted * (long long)vocab : nullptr;
    const int draft_id = stop.use_residual && !request_draft ? request_drafts[stop.accepted] : -1;
    token = draw_token(stop, target_row, draft_row, draft_id, vocab, state, part_sums);
  }
  const int accepted = token >= 0 ? stop.accepted : 0;
  for (int position = threadIdx.x; position <= max_draft; position += kFinishThreads)
    out_row[position] = token < 0 || position > accepted ? -1 : position < accepted ? request_drafts[position] : token;
  if (threadIdx.x == 0) num_accepted[request] = accepted;
}
