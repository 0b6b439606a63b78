// Weighted top-k reduce: out[t][c] = FP16(sum over j = 0..top_k-1, in that order, of
// z[t * top_k + j][c] for the pairs whose id is in [0, E)). z already carries the routing weight.
// z rows are FP32, or with Z_HALF (reduce_half, after a tile down) FP16, summed in FP32 the same way.
// Four columns per thread; CTA row y takes tokens y, y + gridDim.y, ... (a grid holds at most 65535
// rows). CTA (0, 0) also stores (never adds) the number of ids outside [0, E) in counters[2]: every
// forward overwrites it, so it needs no reset, also when no route ran.

#define VOLT8_MAY_START_EARLY 1
#define VOLT8_Z_HALF @{Z_HALF}
@{include moe_common.cu}
@{include moe_expert_range.cu}

namespace {
constexpr int kThreads = @{THREADS};
constexpr int kHidden = @{HIDDEN};
constexpr int kNumExperts = @{NUM_EXPERTS};
constexpr int kBatch = 8;  // pairs whose z rows are requested together
}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, 1) @{ENTRY}(
#if VOLT8_Z_HALF
    const unsigned short *__restrict__ z, const int *__restrict__ topk_ids, int num_tokens, int top_k,
#else
    const float *__restrict__ z, const int *__restrict__ topk_ids, int num_tokens, int top_k,
#endif
    unsigned short *__restrict__ out, int *__restrict__ counters) {
  const int column = (blockIdx.x * kThreads + threadIdx.x) * 4;
  const bool active = column < kHidden;
  int token = blockIdx.y;
  // The first token's ids, kBatch at a time, then the z rows of a batch all in flight together; the
  // sum still runs in pair order. The ids were written before the forward: the first batch of the
  // first token is read before the wait for down's z.
  int ids[kBatch];
#pragma unroll
  for (int b = 0; b < kBatch; ++b)
    ids[b] = active && token < num_tokens && b < top_k
                 ? load_input_before_wait(topk_ids + (long long)token * top_k + b)
                 : -1;
  wait_for_previous_kernels();  // down wrote z
  allow_next_kernel();
  if (blockIdx.x == 0 && blockIdx.y == 0) store_bad_id_count(topk_ids, num_tokens * top_k, kGlobalExperts, counters + 2);
  if (!active) return;
  for (; token < num_tokens; token += gridDim.y) {
    const long long first_pair = (long long)token * top_k;
    float4 sum = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int batch = 0; batch < top_k; batch += kBatch) {
      if (batch > 0 || token != (int)blockIdx.y) {
#pragma unroll
        for (int b = 0; b < kBatch; ++b) ids[b] = batch + b < top_k ? topk_ids[first_pair + batch + b] : -1;
      }
      bool live[kBatch];
      float4 values[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        live[b] = expert_id_valid(local_expert(ids[b]), kNumExperts);
#if VOLT8_Z_HALF
        values[b] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (live[b]) {
          const uint2 halves = load_produced(reinterpret_cast<const uint2 *>(z + (first_pair + batch + b) * kHidden + column));
          half2_to_float2(halves.x, values[b].x, values[b].y);
          half2_to_float2(halves.y, values[b].z, values[b].w);
        }
#else
        values[b] = live[b] ? load_produced(reinterpret_cast<const float4 *>(z + (first_pair + batch + b) * kHidden + column))
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#endif
      }
      add_live_rows(sum, live, values);
    }
    store_half4(out + (long long)token * kHidden + column, sum);
  }
}
