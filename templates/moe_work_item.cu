// Work-item pairs and scale staging shared by the routed GEMM templates whose scale tile is laid
// out [row kind][column][k block] (moe_gemm_cc.cu, moe_gemm_hmma.cu). Included after the template's
// constants (kBlockM, kBlockN, kRows, kThreads, kN and the kScale* values).

// Routed pair m of the CTA's work item: with block_m == 1 the item is the pair itself.
static __device__ __forceinline__ int item_pair(const int *sorted_pairs, int first, int m) {
  return kBlockM == 1 ? first + m : sorted_pairs[first + m];
}

// The item's pairs into pair_ids (zero past the count), by threads tid < kBlockM; down also stages
// each pair's routing weight, which it applies at the store (gate_up passes null for both).
static __device__ __forceinline__ void stage_pairs(int *pair_ids, float *pair_weights, const int *sorted_pairs,
                                                   const float *topk_weights, int first, int count, int tid) {
  if (tid < kBlockM) {
    const int pair = tid < count ? item_pair(sorted_pairs, first, tid) : 0;
    pair_ids[tid] = pair;
#if !VOLT8_GATE_UP
    pair_weights[tid] = tid < count ? topk_weights[pair] : 0.0f;
#endif
  }
}

// FP32 copy of the scales of the CTA's columns, [row kind][column][k block]; zero past N. Loaded in
// groups of up to 8 a thread; the first group is requested before x is staged (scale_group_load),
// the rest by stage_scales after it.
constexpr int kScaleCount = kRows * kBlockN * kScaleKBlocks;
constexpr int kScaleIterations = (kScaleCount + kThreads - 1) / kThreads;
constexpr int kScaleGroup = kScaleIterations < 8 ? kScaleIterations : 8;

static __device__ __forceinline__ void scale_group_load(unsigned short (&bits)[kScaleGroup], const unsigned short *scales,
                                                        int expert, int column0, int group_start) {
#pragma unroll
  for (int g = 0; g < kScaleGroup; ++g) {
    const int index = threadIdx.x + (group_start + g) * kThreads;
    const int kind = index / (kBlockN * kScaleKBlocks);
    const int column = column0 + (index / kScaleKBlocks) % kBlockN;
    const int k_block = index % kScaleKBlocks;
    const bool valid = group_start + g < kScaleIterations && index < kScaleCount && column < kN;
    bits[g] = valid ? scales[expert * kScaleExpertStride + kind * kScaleHalfStride +
                             ((kScaleRowOffset + column) / kScaleBlockN) * kScaleRowStride + k_block]
                    : (unsigned short)0;
  }
}

// factor: an exact power of two a template folds into its scales (1 where it folds none).
static __device__ __forceinline__ void scale_group_store(float *scale_tile, const unsigned short (&bits)[kScaleGroup],
                                                         int group_start, float factor) {
#pragma unroll
  for (int g = 0; g < kScaleGroup; ++g) {
    const int index = threadIdx.x + (group_start + g) * kThreads;
    if (group_start + g < kScaleIterations && index < kScaleCount) scale_tile[index] = half_to_float(bits[g]) * factor;
  }
}

// Stores the first group (already loaded into first_bits) and loads and stores the others.
static __device__ __forceinline__ void stage_scales(float *scale_tile, const unsigned short (&first_bits)[kScaleGroup],
                                                    const unsigned short *scales, int expert, int column0, float factor) {
  scale_group_store(scale_tile, first_bits, 0, factor);
  for (int group_start = kScaleGroup; group_start < kScaleIterations; group_start += kScaleGroup) {
    unsigned short bits[kScaleGroup];
    scale_group_load(bits, scales, expert, column0, group_start);
    scale_group_store(scale_tile, bits, group_start, factor);
  }
}
