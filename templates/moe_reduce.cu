// Weighted top-k reduce: out[t][c] = FP16(sum over j = 0..top_k-1, in that order, of
// z[t * top_k + j][c] for the pairs whose id is in [0, E)). z already carries the routing weight.
// Four columns per thread. CTA (0, 0) also stores (never adds) the number of ids outside [0, E)
// in counters[2]: every forward overwrites it, so it needs no reset, also when no route ran.

#define VOLT8_MAY_START_EARLY 1
@{include moe_common.cu}

namespace {
constexpr int kThreads = @{THREADS};
constexpr int kHidden = @{HIDDEN};
constexpr int kNumExperts = @{NUM_EXPERTS};
}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, 1) @{ENTRY}(
    const float *__restrict__ z, const int *__restrict__ topk_ids, int num_tokens, int top_k,
    unsigned short *__restrict__ out, int *__restrict__ counters) {
  wait_for_previous_kernels();  // down wrote z
  allow_next_kernel();
  if (blockIdx.x == 0 && blockIdx.y == 0) store_bad_id_count(topk_ids, num_tokens * top_k, kNumExperts, counters + 2);
  const int token = blockIdx.y;
  const int column = (blockIdx.x * kThreads + threadIdx.x) * 4;
  if (token >= num_tokens || column >= kHidden) return;
  float4 sum = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int j = 0; j < top_k; ++j) {
    const long long pair = (long long)token * top_k + j;
    const int id = topk_ids[pair];
    if (id < 0 || id >= kNumExperts) continue;
    const float4 value = load_produced(reinterpret_cast<const float4 *>(z + pair * kHidden + column));
    sum.x += value.x;
    sum.y += value.y;
    sum.z += value.z;
    sum.w += value.w;
  }
  uint2 packed;
  packed.x = pack_halves(float_to_half(sum.x), float_to_half(sum.y));
  packed.y = pack_halves(float_to_half(sum.z), float_to_half(sum.w));
  *reinterpret_cast<uint2 *>(out + (long long)token * kHidden + column) = packed;
}
