// Grouped FP8 GEMM on CUDA cores for work items of a few routed pairs (block_m <= 4).
// gate_up: h[pair][n] = FP16(silu(x . W13[e][n]) * (x . W13[e][I + n])), x row = pair / top_k.
// down:    z[pair][c] = topk_weights[pair] * (h[pair] . W2[e][c]).
// A group of kLanesPerRow lanes owns one output column; its lanes stream the column's weight
// rows in 16-byte chunks (16 codes). Per chunk the raw products are summed in FP32, then scaled.
#define VOLT8_MAY_START_EARLY (@{BLOCK_M} == 1)  // routed kernels follow the route pass in order
// f variants (sm_80 and later): the weight loads' L2 prefetch size (moe_common.cu).
#define VOLT8_WEIGHT_FETCH @{WEIGHT_FETCH}
@{include moe_common.cu}
@{include moe_expert_range.cu}

#define VOLT8_GATE_UP @{OP_GATE_UP}

namespace {
constexpr int kBlockM = @{BLOCK_M};
constexpr int kBlockN = @{BLOCK_N};
constexpr int kThreads = @{THREADS};
constexpr int kSplitK = @{SPLIT_K};
constexpr int kLanesPerRow = @{LANES};
constexpr int kUnroll = @{UNROLL};
constexpr int kRows = @{ROWS};  // weight rows per output column: gate and up, or one
constexpr int kK = @{K_DIM};
constexpr int kN = @{N_DIM};
constexpr int kChunks = kK / 16;
constexpr int kWarpsPerSlice = @{WARPS} / kSplitK;
constexpr int kSliceChunks = (kChunks + kSplitK - 1) / kSplitK;
constexpr int kBatches = ((kSliceChunks + kLanesPerRow - 1) / kLanesPerRow + kUnroll - 1) / kUnroll;
constexpr int kStageIterations = (kBlockM * (kK / 8) + kThreads - 1) / kThreads;
constexpr int kStageGroup = kStageIterations < 8 ? kStageIterations : 8;
@{include moe_expert_layout.cu}
static_assert(kK % 16 == 0 && kWarpsPerSlice * (32 / kLanesPerRow) == kBlockN, "one column per lane group");
}  // namespace

@{include moe_work_item.cu}

// Requests chunk `chunk` of each weight row into one slot; past chunk_end or N it reads as zeros.
static __device__ __forceinline__ void load_weight_slot(uint4 (&raw)[kRows], const unsigned char *const (&rows)[kRows],
                                                        bool column_valid, int chunk, int chunk_end) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    raw[r] = (column_valid && chunk < chunk_end) ? load_weights_16(rows[r] + chunk * 16) : zero_uint4();
  }
}

// Requests kUnroll chunks of each weight row: chunk_first, chunk_first + kLanesPerRow, ...
// Chunks at or past chunk_end, and rows past N, read as zeros. kBeforeWait: requested before the
// kernel's wait (load_weights_16_at).
template <bool kBeforeWait>
static __device__ __forceinline__ void load_weight_batch(uint4 (&raw)[kUnroll][kRows], const unsigned char *const (&rows)[kRows],
                                                         bool column_valid, int chunk_first, int chunk_end) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int chunk = chunk_first + u * kLanesPerRow;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      raw[u][r] = (column_valid && chunk < chunk_end) ? load_weights_16_at<kBeforeWait>(rows[r] + chunk * 16) : zero_uint4();
    }
  }
}

// Streams the lane's chunks of its k slice into acc for the item's first pairs: per chunk the raw
// products are summed in FP32 (even and odd positions), then scaled. Each slot of raw is refilled
// with its chunk of the next batch as soon as it is used. kActive > 0: that many pairs, fixed at
// compile time, so no per-pair test runs in the loop; kActive == 0: the first `count`, tested per pair.
template <int kActive>
static __device__ __forceinline__ void stream_chunks(float (&acc)[kBlockM][kRows], uint4 (&raw)[kUnroll][kRows],
                                                     const unsigned char *const (&row_weights)[kRows], bool column_valid,
                                                     int chunk_begin, int chunk_end, int lane_in_row, int group,
                                                     const float4 *x_tile, const float *scale_tile, int count) {
  constexpr int kPairs = kActive > 0 ? kActive : kBlockM;
  for (int batch = 0; batch < kBatches; ++batch) {
    const int chunk_base = chunk_begin + lane_in_row + batch * kUnroll * kLanesPerRow;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int chunk = chunk_base + u * kLanesPerRow;
      if (chunk < chunk_end && kRows == 1) {
        // down: the whole chunk converted at once (fewer registers here than word by word).
        float w[16];
        e4m3x16_to_float(raw[u][0], w);
        const float scale = scale_tile[group * kScaleKBlocks + ((kScaleKOffset + chunk * 16) >> 7)];
#pragma unroll
        for (int m = 0; m < kPairs; ++m) {
          if (kActive > 0 || m < count) acc[m][0] = fmaf(chunk_dot(x_tile, kChunks, m, chunk, w), scale, acc[m][0]);
        }
      } else if (chunk < chunk_end) {
        // gate_up: one 4-code word of each row at a time, so few converted weights are live at once; the
        // even/odd sums see the products in the same order as a whole-chunk conversion would.
        float even[kPairs][kRows], odd[kPairs][kRows];
#pragma unroll
        for (int m = 0; m < kPairs; ++m) {
#pragma unroll
          for (int r = 0; r < kRows; ++r) even[m][r] = odd[m][r] = 0.0f;
        }
#pragma unroll
        for (int quarter = 0; quarter < 4; ++quarter) {
          float w[kRows][4];
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const unsigned word = chunk_word(raw[u][r], quarter);
            half2_to_float2(e4m3x2_to_half2(word, VOLT8_E4M3_LOW_PAIR), w[r][0], w[r][1]);
            half2_to_float2(e4m3x2_to_half2(word, VOLT8_E4M3_HIGH_PAIR), w[r][2], w[r][3]);
          }
#pragma unroll
          for (int m = 0; m < kPairs; ++m) {
            if (kActive > 0 || m < count) {
              const float4 x = x_tile[(m * 4 + quarter) * kChunks + chunk];
#pragma unroll
              for (int r = 0; r < kRows; ++r) {
                even[m][r] = fmaf(x.x, w[r][0], even[m][r]);
                odd[m][r] = fmaf(x.y, w[r][1], odd[m][r]);
                even[m][r] = fmaf(x.z, w[r][2], even[m][r]);
                odd[m][r] = fmaf(x.w, w[r][3], odd[m][r]);
              }
            }
          }
        }
        const int k_block = (kScaleKOffset + chunk * 16) >> 7;
#pragma unroll
        for (int m = 0; m < kPairs; ++m) {
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const float scale = scale_tile[(r * kBlockN + group) * kScaleKBlocks + k_block];
            if (kActive > 0 || m < count) acc[m][r] = fmaf(even[m][r] + odd[m][r], scale, acc[m][r]);
          }
        }
      }
      // The slot is used: request its chunk of the next batch, so about kUnroll chunks of each row
      // stay in flight with one register buffer instead of two.
      if (batch + 1 < kBatches) load_weight_slot(raw[u], row_weights, column_valid, chunk + kUnroll * kLanesPerRow, chunk_end);
    }
  }
}

extern "C" __global__ void __launch_bounds__(kThreads, @{MIN_BLOCKS}) @{ENTRY}(
    const unsigned short *__restrict__ activations, const unsigned char *__restrict__ weights,
    const unsigned short *__restrict__ scales, const int *__restrict__ sorted_pairs,
    const int4 *__restrict__ items, const int *__restrict__ counters,
#if VOLT8_GATE_UP
    int top_k, unsigned short *__restrict__ out,
#else
    const float *__restrict__ topk_weights, float *__restrict__ out,
#endif
    const int *__restrict__ topk_ids, int num_pairs) {
  // x of the item in FP32, [pair][quarter][chunk]: lanes reading consecutive chunks hit distinct banks.
  __shared__ float4 x_tile[kBlockM * 4 * kChunks];
  __shared__ float scale_tile[kRows * kBlockN * kScaleKBlocks];  // [row kind][column][k block]
  __shared__ float partials[kSplitK * kBlockN * kBlockM * kRows];
  __shared__ int pair_ids[kBlockM];
#if !VOLT8_GATE_UP
  __shared__ float pair_weights[kBlockM];  // each pair's routing weight, staged with its id
#endif

  int expert, first, count;
  VOLT8_READ_WORK_ITEM(counters[@{COUNTER_INDEX}], items[blockIdx.y], return wait_for_previous_kernels(), return);
  if (!expert_id_valid(expert, kNumExperts) || count <= 0) return wait_for_previous_kernels();
#if VOLT8_GATE_UP
  if (top_k <= 0) return wait_for_previous_kernels();
#endif
  const int tid = threadIdx.x;
  const int column0 = blockIdx.x * kBlockN;

  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int slice = warp / kWarpsPerSlice;
  const int group = (warp % kWarpsPerSlice) * (32 / kLanesPerRow) + lane / kLanesPerRow;
  const int lane_in_row = lane % kLanesPerRow;
  const int chunk_begin = slice * kChunks / kSplitK;
  const int chunk_end = (slice + 1) * kChunks / kSplitK;
  const int column = column0 + group;
  const bool column_valid = column < kN;
  const unsigned char *row_weights[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    row_weights[r] = weights + expert * kExpertWeightBytes + (long long)(column + r * kUpRowOffset) * kK;
  }

  // The first weights are requested before x and the scales are staged, so the latencies overlap.
  uint4 raw[kUnroll][kRows];
  load_weight_batch<kBlockM == 1 && !VOLT8_GATE_UP>(raw, row_weights, column_valid, chunk_begin + lane_in_row, chunk_end);
  unsigned short first_scale_bits[kScaleGroup];
  scale_group_load(first_scale_bits, scales, expert, column0, 0);
  if (kBlockM == 1) {
#if !VOLT8_GATE_UP
    // down starts early: the weights of its later batches are asked into L2 while gate_up finishes.
    for (int chunk = chunk_begin + lane_in_row + kUnroll * kLanesPerRow; column_valid && chunk < chunk_end;
         chunk += kLanesPerRow)
      prefetch_l2(row_weights[0] + chunk * 16);
#endif
    wait_for_previous_kernels();  // down: gate_up wrote h
    allow_next_kernel();
  }

#if VOLT8_GATE_UP
  stage_pairs(pair_ids, nullptr, sorted_pairs, nullptr, first, count, tid);
#else
  stage_pairs(pair_ids, pair_weights, sorted_pairs, topk_weights, first, count, tid);
#endif
  // x rows in groups of loads that are all in flight together.
  for (int group_start = 0; group_start < kStageIterations; group_start += kStageGroup) {
    uint4 x_raw[kStageGroup];
#pragma unroll
    for (int g = 0; g < kStageGroup; ++g) {
      const int index = tid + (group_start + g) * kThreads;
      const int m = index / (kK / 8);
      const bool valid = group_start + g < kStageIterations && index < kBlockM * (kK / 8) && m < count;
#if VOLT8_GATE_UP
      const long long row = valid ? item_pair(sorted_pairs, first, m) / top_k : 0;
#else
      const long long row = valid ? item_pair(sorted_pairs, first, m) : 0;
#endif
      x_raw[g] = valid ? load_x_vector<VOLT8_GATE_UP>(activations + row * kK + (index % (kK / 8)) * 8) : zero_uint4();
    }
#pragma unroll
    for (int g = 0; g < kStageGroup; ++g) {
      const int index = tid + (group_start + g) * kThreads;
      if (group_start + g < kStageIterations && index < kBlockM * (kK / 8)) {
        store_x_vector(x_tile, kChunks, index / (kK / 8), index % (kK / 8), x_raw[g]);
      }
    }
  }
  stage_scales(scale_tile, first_scale_bits, scales, expert, column0, 1.0f);
  __syncthreads();

  float acc[kBlockM][kRows];
#pragma unroll
  for (int m = 0; m < kBlockM; ++m) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[m][r] = 0.0f;
  }
  // gate_up: the loop is compiled once per pair count, so it tests no pair index (the sums and their
  // order per pair are the same in every copy). down, whose chunk loop is short, keeps one copy that
  // tests the count per pair: the copies measured no faster there (68-70 us at M = 64, 66-68 without).
#define VOLT8_STREAM(active) \
  stream_chunks<(active)>(acc, raw, row_weights, column_valid, chunk_begin, chunk_end, lane_in_row, group, x_tile, scale_tile, count)
  if (kRows == 1 && kBlockM > 1) VOLT8_STREAM(0);
  else if (kBlockM == 1 || count >= kBlockM) VOLT8_STREAM(kBlockM);
  else if (count == 1) VOLT8_STREAM(1);
  else if (count == 2) VOLT8_STREAM(kBlockM > 2 ? 2 : 1);
  else VOLT8_STREAM(kBlockM > 3 ? 3 : 1);
#undef VOLT8_STREAM

#pragma unroll
  for (int m = 0; m < kBlockM; ++m) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float value = acc[m][r];
#pragma unroll
      for (int offset = kLanesPerRow / 2; offset > 0; offset >>= 1) {
        value += __shfl_xor_sync(0xffffffffu, value, offset);
      }
      if (lane_in_row == 0) partials[((slice * kBlockN + group) * kBlockM + m) * kRows + r] = value;
    }
  }
  __syncthreads();

  // Slices are summed in slice order: the same inputs give the same bits.
  for (int index = tid; index < kBlockN * kBlockM; index += kThreads) {
    const int out_group = index % kBlockN;
    const int m = index / kBlockN;
    const int out_column = column0 + out_group;
    if (m >= count || out_column >= kN) continue;
    float sums[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      sums[r] = partials[(out_group * kBlockM + m) * kRows + r];
#pragma unroll
      for (int s = 1; s < kSplitK; ++s) sums[r] += partials[((s * kBlockN + out_group) * kBlockM + m) * kRows + r];
    }
    const int pair = pair_ids[m];
#if VOLT8_GATE_UP
    out[(long long)pair * kN + out_column] = float_to_half(silu_times(sums[0], sums[kRows - 1]));
#else
    out[(long long)pair * kN + out_column] = pair_weights[m] * sums[0];
#endif
  }
}
