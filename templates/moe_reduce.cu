// Weighted top-k reduce: out[t][c] = FP16(sum over j = 0..top_k-1, in that order, of
// z[t * top_k + j][c] for the pairs whose id is in [0, E)). z already carries the routing weight.
// Four columns per thread. CTA (0, 0) also stores (never adds) the number of ids outside [0, E)
// in counters[2]: every forward overwrites it, so it needs no reset, also when no route ran.

@{include moe_common.cu}

namespace {
constexpr int kThreads = @{THREADS};
constexpr int kHidden = @{HIDDEN};
constexpr int kNumExperts = @{NUM_EXPERTS};
constexpr int kPairBatch = 8;  // pairs of a token whose ids, then z rows, are in flight together
}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, 1) @{ENTRY}(
    const float *__restrict__ z, const int *__restrict__ topk_ids, int num_tokens, int top_k,
    unsigned short *__restrict__ out, int *__restrict__ counters) {
  if (blockIdx.x == 0 && blockIdx.y == 0) store_bad_id_count(topk_ids, num_tokens * top_k, kNumExperts, counters + 2);
  const int token = blockIdx.y;
  const int column = (blockIdx.x * kThreads + threadIdx.x) * 4;
  if (token >= num_tokens || column >= kHidden) return;
  const float4 zero = {0.0f, 0.0f, 0.0f, 0.0f};
  float4 sum = zero;
  for (int first = 0; first < top_k; first += kPairBatch) {
    bool live[kPairBatch];
#pragma unroll
    for (int b = 0; b < kPairBatch; ++b) {
      const int id = first + b < top_k ? topk_ids[(long long)token * top_k + first + b] : -1;
      live[b] = id >= 0 && id < kNumExperts;
    }
    float4 values[kPairBatch];
#pragma unroll
    for (int b = 0; b < kPairBatch; ++b) {
      const long long pair = (long long)token * top_k + first + b;
      values[b] = live[b] ? *reinterpret_cast<const float4 *>(z + pair * kHidden + column) : zero;
    }
    // Added in pair order, skipping (not adding zero for) the pairs outside [0, E).
#pragma unroll
    for (int b = 0; b < kPairBatch; ++b) {
      if (live[b]) {
        sum.x += values[b].x;
        sum.y += values[b].y;
        sum.z += values[b].z;
        sum.w += values[b].w;
      }
    }
  }
  uint2 packed;
  packed.x = pack_halves(float_to_half(sum.x), float_to_half(sum.y));
  packed.y = pack_halves(float_to_half(sum.z), float_to_half(sum.w));
  *reinterpret_cast<uint2 *>(out + (long long)token * kHidden + column) = packed;
}
