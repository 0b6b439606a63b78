// Support kernels of the benchmark harness (bench/): the FP16 baselines' gathers, the sorted-and-padded
// peer's sort, SiLU*up and weighted reduce, the FP16 weights they start from, the copy that measures device bandwidth, a
// spin that holds the stream while the host queues timed work, and the empty kernel of the launch
// floor. Not part of the forward.
// FP16 travels as raw bits (unsigned short); the conversions and SiLU are the GEMMs' own.

@{include moe_common.cu}

static __device__ __forceinline__ unsigned long long bench_global_ns() {
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

// One thread waits `nanoseconds`: the launches queued behind it then run back to back.
extern "C" __global__ void bench_spin(unsigned long long nanoseconds) {
  const unsigned long long start = bench_global_ns();
  while (bench_global_ns() - start < nanoseconds) {
  }
}

// Does nothing but what a forward's kernel does around its work when it may start early: waits for
// the kernel before, then lets the next start (sm_90 and later). The launch floor's graphs are made
// of it.
extern "C" __global__ void bench_empty() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// dst[i] = src[i] over `count` 16-byte words, grid-stride.
extern "C" __global__ void bench_copy(const uint4 *src, uint4 *dst, long long count) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) dst[i] = src[i];
}

// FP16 weights of one tensor of every expert from its E4M3 codes and FP16 scales (layout of
// runtime/moe/kernels/moe_layout.h): row r of an expert is half r / rows_per_half, row n = r % rows_per_half of
// it, and column k uses scale [half * half_stride + ((row_offset + n) / block_n) * row_stride +
// (col_offset + k) / block_k]. grid (ceil(cols / blockDim.x), rows, experts).
extern "C" __global__ void bench_dequant(const unsigned char *codes, const unsigned short *scales, unsigned short *out,
                                         int cols, int rows_per_half, int half_stride, int row_stride, int row_offset,
                                         int col_offset, int block_n, int block_k, long long expert_codes,
                                         int expert_scales) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= cols) return;
  const int row = blockIdx.y;
  const long long expert = blockIdx.z;
  const int half_index = row / rows_per_half, n = row % rows_per_half;
  const long long at = expert * expert_codes + (long long)row * cols + k;
  const unsigned code = codes[at];
  const unsigned short bits = (unsigned short)(((code & 0x80u) << 8) | ((code & 0x7Fu) << 7));
  const int scale_index = half_index * half_stride + ((row_offset + n) / block_n) * row_stride + (col_offset + k) / block_k;
  const float scale = half_to_float(scales[expert * expert_scales + scale_index]);
  out[at] = float_to_half(half_to_float(bits) * scale);
}

// xg[row] = x[row_token[row]]: the tokens of each expert's pairs made contiguous. grid
// (ceil(hidden / 8 / blockDim.x), up to 65535), each CTA row looping over the rows; hidden is a
// multiple of 8.
extern "C" __global__ void bench_gather(const uint4 *x, const int *row_token, uint4 *xg, int hidden, int rows) {
  const int words = hidden / 8;
  const int column = blockIdx.x * blockDim.x + threadIdx.x;
  if (column >= words) return;
  for (int row = blockIdx.y; row < rows; row += gridDim.y)
    xg[(long long)row * words + column] = x[(long long)row_token[row] * words + column];
}

// h[row][i] = silu(y[row][i]) * y[row][intermediate + i], rounded to FP16. grid
// (ceil(intermediate / blockDim.x), up to 65535), each CTA row looping over the rows.
extern "C" __global__ void bench_silu_mul(const unsigned short *y, unsigned short *h, int intermediate, int rows) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= intermediate) return;
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const unsigned short *row = y + (long long)r * 2 * intermediate;
    const float gate = half_to_float(row[i]), up = half_to_float(row[intermediate + i]);
    h[(long long)r * intermediate + i] = float_to_half(silu_times(gate, up));
  }
}

// The sorted-and-padded peer's sort (C, harness/baseline_fp16.c): each pair p of an id in [0, E) takes
// the next slot of its expert's `capacity` rows, row e * capacity + slot, in any order (an atomic per
// pair); row_token[row] is its token, pair_row[p] its row (-1: an id outside [0, E), or past the
// capacity, which the harness sizes so that none is). counts[E] must be zero before (a memset).
// Grid-stride over the pairs.
extern "C" __global__ void bench_pad_route(const int *ids, int pairs, int top_k, int num_experts, int capacity,
                                           int *counts, int *row_token, int *pair_row) {
  const int stride = gridDim.x * blockDim.x;
  for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < pairs; p += stride) {
    const int expert = ids[p];
    int row = -1;
    if (expert >= 0 && expert < num_experts) {
      const int slot = atomicAdd(counts + expert, 1);
      if (slot < capacity) {
        row = expert * capacity + slot;
        row_token[row] = p / top_k;
      }
    }
    pair_row[p] = row;
  }
}

// xg[row] = x[row_token[row]] for the rows its expert's pairs filled (row % capacity < counts[e]), zeros
// for the padding after them. grid (ceil(hidden / 8 / blockDim.x), up to 65535), each CTA row looping
// over the rows; hidden is a multiple of 8.
extern "C" __global__ void bench_pad_gather(const uint4 *x, const int *row_token, const int *counts, int capacity,
                                            uint4 *xg, int hidden, int rows) {
  const int words = hidden / 8;
  const int column = blockIdx.x * blockDim.x + threadIdx.x;
  if (column >= words) return;
  for (int row = blockIdx.y; row < rows; row += gridDim.y) {
    const bool filled = row % capacity < counts[row / capacity];
    xg[(long long)row * words + column] = filled ? x[(long long)row_token[row] * words + column] : make_uint4(0, 0, 0, 0);
  }
}

// out[t][c] = sum over j = 0..top_k-1, in order, of weights[t][j] * z[pair_row[t][j]][c] in FP32
// (rows < 0 are skipped). grid (ceil(hidden / blockDim.x), up to 65535), each CTA row looping over the
// tokens.
extern "C" __global__ void bench_weighted_reduce(const unsigned short *z, const int *pair_row, const float *weights,
                                                 unsigned short *out, int hidden, int top_k, int tokens) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= hidden) return;
  for (int token = blockIdx.y; token < tokens; token += gridDim.y) {
    float sum = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      const int row = pair_row[(long long)token * top_k + j];
      if (row >= 0) sum += weights[(long long)token * top_k + j] * half_to_float(z[(long long)row * hidden + c]);
    }
    out[(long long)token * hidden + c] = float_to_half(sum);
  }
}
