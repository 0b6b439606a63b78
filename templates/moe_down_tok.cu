// down fused with the weighted top-k reduce, for few tokens: a CTA owns one token and kBlockN
// output columns, and walks every routed pair of the token, each reading its own expert's rows.
//   out[t][c] = FP16(sum over j = 0..top_k-1, in that order, of topk_weights[t][j] * (h[t * top_k + j] . W2[e_j][c]))
// over the pairs whose expert the kernel holds (moe_expert_range.cu). No route pass, no z buffer and no reduce launch.
// Each dot product is computed chunk for chunk as down.cc.bm1 with the same lanes per row computes
// it, and the weighted sum as the reduce kernel forms it, so the bits equal those two kernels'.
// CTA (0, 0) also stores the number of ids outside [0, kGlobalExperts) in counters[2], as the reduce does.
#define VOLT8_MAY_START_EARLY 1
// f variants (sm_80 and later): the weight loads' L2 prefetch size (moe_common.cu).
#define VOLT8_WEIGHT_FETCH @{WEIGHT_FETCH}
@{include moe_common.cu}
@{include moe_expert_range.cu}

namespace {
constexpr int kBlockN = @{BLOCK_N};
constexpr int kThreads = @{THREADS};
constexpr int kLanesPerRow = @{LANES};
constexpr int kK = @{K_DIM};
constexpr int kN = @{N_DIM};
constexpr int kChunks = kK / 16;
constexpr int kChunksPerLane = (kChunks + kLanesPerRow - 1) / kLanesPerRow;
constexpr int kSlots = kThreads / kLanesPerRow / kBlockN;  // lane groups per column: pairs walked side by side
constexpr int kPassPairs = @{PASS_PAIRS};                   // pairs whose h rows are staged at once
constexpr int kPairsPerSlot = kPassPairs / kSlots;
constexpr int kItems = kPairsPerSlot * kChunksPerLane;     // (pair, chunk) loads of one lane in a pass
constexpr int kBatch = @{UNROLL};                          // of them in flight together
constexpr int kStageIterations = (kPassPairs * (kK / 8) + kThreads - 1) / kThreads;
constexpr int kStageGroup = kStageIterations < 8 ? kStageIterations : 8;
constexpr int kNumExperts = @{NUM_EXPERTS};
constexpr long long kExpertWeightBytes = @{EXPERT_WEIGHT_BYTES}LL;
constexpr int kScaleBlockN = @{SCALE_BN};
constexpr int kScaleKOffset = @{SCALE_K_OFFSET};
constexpr int kScaleRowStride = @{SCALE_ROW_STRIDE};
constexpr long long kScaleExpertStride = @{SCALE_EXPERT_STRIDE}LL;
static_assert(kK % 16 == 0 && kSlots >= 1 && kSlots * kBlockN * kLanesPerRow == kThreads, "lane groups tile the CTA");
static_assert(kPassPairs % kSlots == 0 && kPairsPerSlot >= 1, "every slot walks the same number of pairs");
}  // namespace

// Requests the items [first, first + kBatch): weight chunk and the half-precision scale it needs.
// kBeforeWait: a pass's first batch, requested before the kernel's wait (load_weights_16_at).
template <bool kBeforeWait>
static __device__ __forceinline__ void tok_load_batch(uint4 (&raw)[kBatch], unsigned short (&scale_bits)[kBatch], int first,
                                                      const unsigned char *const (&rows)[kPairsPerSlot],
                                                      const unsigned short *const (&scale_rows)[kPairsPerSlot],
                                                      const bool (&live)[kPairsPerSlot], int lane_in_row) {
#pragma unroll
  for (int b = 0; b < kBatch; ++b) {
    const int item = first + b;
    const int i = item / kChunksPerLane;
    const int chunk = lane_in_row + (item % kChunksPerLane) * kLanesPerRow;
    const bool valid = item < kItems && live[i] && chunk < kChunks;
    raw[b] = valid ? load_weights_16_at<kBeforeWait>(rows[i] + chunk * 16) : zero_uint4();
    scale_bits[b] = valid ? scale_rows[i][(kScaleKOffset + chunk * 16) >> 7] : (unsigned short)0;
  }
}

extern "C" __global__ void __launch_bounds__(kThreads, 1) @{ENTRY}(
    const unsigned short *__restrict__ h, const unsigned char *__restrict__ weights,
    const unsigned short *__restrict__ scales, const float *__restrict__ topk_weights,
    const int *__restrict__ topk_ids, int num_tokens, int top_k, unsigned short *__restrict__ out,
    int *__restrict__ counters) {
  // h of the pass in FP32, [pair][quarter][chunk], as the cc kernels lay out x.
  __shared__ float4 x_tile[kPassPairs * 4 * kChunks];
  __shared__ float partials[kPassPairs * kBlockN];  // [pair][column]
  __shared__ float pair_weight[kPassPairs];
  __shared__ int pair_live[kPassPairs];

  // topk_ids and topk_weights were written before the forward and the weights never change: they
  // are read before the wait for gate_up's h. counters[2] is written after it, as every write of a
  // kernel that starts early is.
  if (blockIdx.x == 0 && blockIdx.y == 0) {
    wait_for_previous_kernels();
    store_bad_id_count(topk_ids, num_tokens * top_k, kGlobalExperts, counters + 2);
  }
  const int token = blockIdx.y;
  if (token >= num_tokens || top_k <= 0) return wait_for_previous_kernels();
  const int tid = threadIdx.x;
  const int column0 = blockIdx.x * kBlockN;
  const int group = tid / kLanesPerRow;
  const int lane_in_row = tid % kLanesPerRow;
  const int slot = group / kBlockN;
  const int local_column = group % kBlockN;
  const int column = column0 + local_column;
  const bool column_valid = column < kN;
  const long long first_pair = (long long)token * top_k;

  float sum = 0.0f;  // threads below kBlockN: the running weighted sum of their column
  for (int pass_start = 0; pass_start < top_k; pass_start += kPassPairs) {
    // Experts of this lane's pairs and of the pairs it stages: all requested together.
    int expert[kPairsPerSlot];
#pragma unroll
    for (int i = 0; i < kPairsPerSlot; ++i) {
      const int j = pass_start + slot + i * kSlots;
      expert[i] = j < top_k ? local_expert(topk_ids[first_pair + j]) : -1;
    }
    int stage_expert[kStageGroup];
    const unsigned char *rows[kPairsPerSlot];
    const unsigned short *scale_rows[kPairsPerSlot];
    bool live[kPairsPerSlot];
#pragma unroll
    for (int i = 0; i < kPairsPerSlot; ++i) {
      live[i] = column_valid && expert_id_valid(expert[i], kNumExperts);
      const long long e = live[i] ? expert[i] : 0;
      rows[i] = weights + e * kExpertWeightBytes + (long long)column * kK;
      scale_rows[i] = scales + e * kScaleExpertStride + (column / kScaleBlockN) * kScaleRowStride;
    }
    // The first weights are requested before h is staged, so the latencies overlap.
    uint4 raw[kBatch];
    unsigned short scale_bits[kBatch];
    tok_load_batch<true>(raw, scale_bits, 0, rows, scale_rows, live, lane_in_row);
    if (pass_start == 0) {
      // Started early: the pass's later weights are asked into L2 while gate_up finishes.
#pragma unroll
      for (int item = kBatch; item < kItems; ++item) {
        const int i = item / kChunksPerLane;
        const int chunk = lane_in_row + (item % kChunksPerLane) * kLanesPerRow;
        if (live[i] && chunk < kChunks) prefetch_l2(rows[i] + chunk * 16);
      }
      wait_for_previous_kernels();  // gate_up wrote h
      allow_next_kernel();
    }

    if (tid < kPassPairs) {
      const int j = pass_start + tid;
      const int id = j < top_k ? local_expert(topk_ids[first_pair + j]) : -1;
      pair_live[tid] = expert_id_valid(id, kNumExperts);
      pair_weight[tid] = j < top_k ? topk_weights[first_pair + j] : 0.0f;
    }
    // h rows in groups of loads that are all in flight together; rows of bad ids are never read.
    for (int group_start = 0; group_start < kStageIterations; group_start += kStageGroup) {
#pragma unroll
      for (int g = 0; g < kStageGroup; ++g) {
        const int index = tid + (group_start + g) * kThreads;
        const int j = pass_start + index / (kK / 8);
        const bool in_range = group_start + g < kStageIterations && index < kPassPairs * (kK / 8) && j < top_k;
        stage_expert[g] = in_range ? local_expert(topk_ids[first_pair + j]) : -1;
      }
      uint4 x_raw[kStageGroup];
#pragma unroll
      for (int g = 0; g < kStageGroup; ++g) {
        const int index = tid + (group_start + g) * kThreads;
        const long long pair = first_pair + pass_start + index / (kK / 8);
        const bool valid = expert_id_valid(stage_expert[g], kNumExperts);
        x_raw[g] = valid ? load_produced(reinterpret_cast<const uint4 *>(h + pair * kK + (index % (kK / 8)) * 8)) : zero_uint4();
      }
#pragma unroll
      for (int g = 0; g < kStageGroup; ++g) {
        const int index = tid + (group_start + g) * kThreads;
        if (group_start + g < kStageIterations && index < kPassPairs * (kK / 8)) {
          store_x_vector(x_tile, kChunks, index / (kK / 8), index % (kK / 8), x_raw[g]);
        }
      }
    }
    __syncthreads();

    float acc[kPairsPerSlot];
#pragma unroll
    for (int i = 0; i < kPairsPerSlot; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int first = 0; first < kItems; first += kBatch) {
      if (first > 0) tok_load_batch<false>(raw, scale_bits, first, rows, scale_rows, live, lane_in_row);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int item = first + b;
        const int i = item / kChunksPerLane;
        const int chunk = lane_in_row + (item % kChunksPerLane) * kLanesPerRow;
        if (item < kItems && live[i] && chunk < kChunks) {
          float w[16];
          e4m3x16_to_float(raw[b], w);
          acc[i] = fmaf(chunk_dot(x_tile, kChunks, slot + i * kSlots, chunk, w), half_to_float(scale_bits[b]), acc[i]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kPairsPerSlot; ++i) {
      float value = acc[i];
#pragma unroll
      for (int offset = kLanesPerRow / 2; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
      if (lane_in_row == 0) partials[(slot + i * kSlots) * kBlockN + local_column] = value;
    }
    __syncthreads();
    // The weighted sum in pair order; the product is rounded on its own, as the reduce sees it.
    if (tid < kBlockN) {
      for (int m = 0; m < kPassPairs && pass_start + m < top_k; ++m) {
        if (pair_live[m]) sum += __fmul_rn(pair_weight[m], partials[m * kBlockN + tid]);
      }
    }
    if (pass_start + kPassPairs < top_k) __syncthreads();  // the next pass reuses the tiles
  }
  if (tid < kBlockN && column0 + tid < kN) out[(long long)token * kN + column0 + tid] = float_to_half(sum);
}
