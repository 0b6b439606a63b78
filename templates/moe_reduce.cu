// Weighted top-k reduce: out[t][c] = FP16(sum over j = 0..top_k-1, in that order, of
// z[t * top_k + j][c] for the pairs whose id is in [0, E)). z already carries the routing weight.
// Four columns per thread.

namespace {
constexpr int kThreads = @{THREADS};
constexpr int kHidden = @{HIDDEN};
constexpr int kNumExperts = @{NUM_EXPERTS};
}  // namespace

static __device__ __forceinline__ unsigned short reduce_to_half(float value) {
  unsigned short bits;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  return bits;
}

extern "C" __global__ void __launch_bounds__(kThreads, 1) @{ENTRY}(
    const float *__restrict__ z, const int *__restrict__ topk_ids, int num_tokens, int top_k,
    unsigned short *__restrict__ out) {
  const int token = blockIdx.y;
  const int column = (blockIdx.x * kThreads + threadIdx.x) * 4;
  if (token >= num_tokens || column >= kHidden) return;
  float4 sum = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int j = 0; j < top_k; ++j) {
    const long long pair = (long long)token * top_k + j;
    const int id = topk_ids[pair];
    if (id < 0 || id >= kNumExperts) continue;
    const float4 value = *reinterpret_cast<const float4 *>(z + pair * kHidden + column);
    sum.x += value.x;
    sum.y += value.y;
    sum.z += value.z;
    sum.w += value.w;
  }
  uint2 packed;
  packed.x = (unsigned)reduce_to_half(sum.x) | ((unsigned)reduce_to_half(sum.y) << 16);
  packed.y = (unsigned)reduce_to_half(sum.z) | ((unsigned)reduce_to_half(sum.w) << 16);
  *reinterpret_cast<uint2 *>(out + (long long)token * kHidden + column) = packed;
}
