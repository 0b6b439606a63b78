// Device helpers shared by the GEMM, reduce and bench templates. FP16 travels as raw bits
// (unsigned short) so no header is needed; conversions are single PTX instructions. The route
// includes it for expert_id_valid.

// Early launch (programmatic dependent launch, sm_90 and later): in a forward without a route pass
// the runtime may start down and the reduce while the kernel before them still runs, and in a
// routed forward an hmma down. Such a kernel reads nothing the kernels before it write, and writes
// nothing, until wait_for_previous_kernels() has returned in its CTA; every CTA calls it before it
// returns, so a kernel still completes after the one before it. allow_next_kernel() lets the next
// kernel's CTAs start. A template whose kernel can be in such a forward (block_m 1, token-fused
// down, reduce, hmma) defines VOLT8_MAY_START_EARLY to 1 before including this file; the other
// routed kernels run one after the other and carry none of it, and below sm_90 all of it is empty.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && VOLT8_MAY_START_EARLY
#define VOLT8_EARLY_LAUNCH 1
#else
#define VOLT8_EARLY_LAUNCH 0
#endif

static __device__ __forceinline__ void wait_for_previous_kernels() {
#if VOLT8_EARLY_LAUNCH
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void allow_next_kernel() {
#if VOLT8_EARLY_LAUNCH
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// value = the four words at address, loaded with the PTX instruction `op` (".v4.u32" / ".v4.s32" with
// constraint "r", ".v4.f32" with "f"); volatile asm, so the compiler keeps it where it is written.
#define VOLT8_LOAD_V4(op, constraint, value, address)                                               \
  asm volatile(op " {%0, %1, %2, %3}, [%4];"                                                        \
               : "=" constraint((value).x), "=" constraint((value).y), "=" constraint((value).z),   \
                 "=" constraint((value).w)                                                          \
               : "l"(address))

// Loads of what the kernel before wrote (h for down, z for the reduce). With early launch that data
// changes while the kernel is resident, so it must not come through the read-only (.nc) path: the
// assembler treats such loads as invariant and may issue them before the wait. These are L2 loads,
// kept after the wait as volatile asm; without early launch they are plain loads.
#if VOLT8_EARLY_LAUNCH
static __device__ __forceinline__ uint4 load_produced(const uint4 *address) {
  uint4 value;
  VOLT8_LOAD_V4("ld.global.cg.v4.u32", "r", value, address);
  return value;
}

static __device__ __forceinline__ float4 load_produced(const float4 *address) {
  float4 value;
  VOLT8_LOAD_V4("ld.global.cg.v4.f32", "f", value, address);
  return value;
}

static __device__ __forceinline__ uint2 load_produced(const uint2 *address) {
  uint2 value;
  asm volatile("ld.global.cg.v2.u32 {%0, %1}, [%2];" : "=r"(value.x), "=r"(value.y) : "l"(address));
  return value;
}
#else
template <typename T>
static __device__ __forceinline__ T load_produced(const T *address) {
  return *address;
}
#endif

// A 16-byte vector of a GEMM's x rows: for gate_up the caller's input (read-only path), for down
// h, which gate_up wrote.
template <bool kCallerInput>
static __device__ __forceinline__ uint4 load_x_vector(const unsigned short *address) {
  if (kCallerInput) return *reinterpret_cast<const uint4 *>(address);
  return load_produced(reinterpret_cast<const uint4 *>(address));
}

// Asks L2 for the line of `address` (weights a CTA reads after its wait); nothing without early launch.
static __device__ __forceinline__ void prefetch_l2(const void *address) {
#if VOLT8_EARLY_LAUNCH
  asm volatile("prefetch.global.L2 [%0];" ::"l"(address));
#endif
}

static __device__ __forceinline__ float half_to_float(unsigned short bits) {
  float value;
  asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(bits));
  return value;
}

static __device__ __forceinline__ unsigned short float_to_half(float value) {
  unsigned short bits;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  return bits;
}

// Both FP16 halves of a 32-bit word, low half first.
static __device__ __forceinline__ void half2_to_float2(unsigned packed, float &low, float &high) {
  asm("{\n\t.reg .f16 low_half, high_half;\n\t"
      "mov.b32 {low_half, high_half}, %2;\n\t"
      "cvt.f32.f16 %0, low_half;\n\t"
      "cvt.f32.f16 %1, high_half;\n\t}"
      : "=f"(low), "=f"(high)
      : "r"(packed));
}

static __device__ __forceinline__ unsigned pack_halves(unsigned short low, unsigned short high) {
  return (unsigned)low | ((unsigned)high << 16);
}

// Selectors for __byte_perm that spread two E4M3 bytes of a word into the high bytes of two
// 16-bit lanes: bytes 0,1 and bytes 2,3.
#define VOLT8_E4M3_LOW_PAIR 0x1404u
#define VOLT8_E4M3_HIGH_PAIR 0x3424u

// Two E4M3 codes -> two FP16 values holding e4m3 * 2^-8, exactly (subnormals included):
// sign to bit 15, the 7 exponent-and-mantissa bits shifted left by 7.
static __device__ __forceinline__ unsigned e4m3x2_to_half2(unsigned word, unsigned selector) {
  const unsigned spread = __byte_perm(word, 0u, selector);
  return (spread & 0x80008000u) | ((spread >> 1) & 0x3f803f80u);
}

// 16 E4M3 codes -> 16 floats holding e4m3 * 2^-8 (exact).
static __device__ __forceinline__ void e4m3x16_to_float(const uint4 raw, float (&out)[16]) {
  const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int word = 0; word < 4; ++word) {
    half2_to_float2(e4m3x2_to_half2(words[word], VOLT8_E4M3_LOW_PAIR), out[4 * word + 0], out[4 * word + 1]);
    half2_to_float2(e4m3x2_to_half2(words[word], VOLT8_E4M3_HIGH_PAIR), out[4 * word + 2], out[4 * word + 3]);
  }
}

// 16-byte load of weights that are read once: read-only path, no L1 allocation. volatile keeps
// the compiler from sinking a batch of loads into the branches that use them.
// VOLT8_WEIGHT_FETCH (a template may define it before including this file; sm_80 and later only):
// 128 or 256 makes each load bring the whole aligned 128- or 256-byte block around it into L2 (the
// load's prefetch size), so the loads of the row's next chunks find it there; 0 leaves it to L2.
#ifndef VOLT8_WEIGHT_FETCH
#define VOLT8_WEIGHT_FETCH 0
#endif
#if VOLT8_WEIGHT_FETCH == 256
#define VOLT8_WEIGHT_FETCH_SIZE ".L2::256B"
#elif VOLT8_WEIGHT_FETCH == 128
#define VOLT8_WEIGHT_FETCH_SIZE ".L2::128B"
#else
#define VOLT8_WEIGHT_FETCH_SIZE ""
#endif
static __device__ __forceinline__ uint4 load_weights_16(const unsigned char *address) {
  uint4 value;
  VOLT8_LOAD_V4("ld.global.nc.L1::no_allocate" VOLT8_WEIGHT_FETCH_SIZE ".v4.u32", "r", value, address);
  return value;
}

// The same for the weights a kernel that starts early requests before its wait (kBeforeWait): with
// early launch a plain load, because the assembler moves read-only loads below griddepcontrol.wait
// and these must stay above it. The read-only path is kept everywhere else: plain loads measured
// slower in the GEMM loops (M = 64 forward 147.6 -> 160.4 us on the H200).
template <bool kBeforeWait>
static __device__ __forceinline__ uint4 load_weights_16_at(const unsigned char *address) {
#if VOLT8_EARLY_LAUNCH
  if (kBeforeWait) {
    uint4 value;
    VOLT8_LOAD_V4("ld.global.L1::no_allocate" VOLT8_WEIGHT_FETCH_SIZE ".v4.u32", "r", value, address);
    return value;
  }
#endif
  return load_weights_16(address);
}

// Data written before the kernel before this one began (the caller's ids, the route's work items)
// that a kernel that starts early reads before its wait: with early launch a plain load, kept there
// as volatile asm (a read-only load would be moved below the wait, and a 128-bit one before it is
// what check_wait_order.py takes for h or z read through the read-only path).
static __device__ __forceinline__ int load_input_before_wait(const int *address) {
#if VOLT8_EARLY_LAUNCH
  int value;
  asm volatile("ld.global.b32 %0, [%1];" : "=r"(value) : "l"(address));
  return value;
#else
  return *address;
#endif
}

static __device__ __forceinline__ int4 load_input_before_wait(const int4 *address) {
#if VOLT8_EARLY_LAUNCH
  int4 value;
  VOLT8_LOAD_V4("ld.global.v4.s32", "r", value, address);
  return value;
#else
  return *address;
#endif
}

// Word s (0..3) of a 16-byte chunk of codes: codes 4s..4s+3.
static __device__ __forceinline__ unsigned chunk_word(const uint4 &chunk, int s) {
  return s == 0 ? chunk.x : s == 1 ? chunk.y : s == 2 ? chunk.z : chunk.w;
}

static __device__ __forceinline__ uint4 zero_uint4() {
  uint4 value;
  value.x = 0u;
  value.y = 0u;
  value.z = 0u;
  value.w = 0u;
  return value;
}

// Stores 16-byte vector `vector` (8 FP16 values) of x row m into the FP32 tile the CUDA-core
// kernels read, laid out [row][quarter][chunk] so lanes reading consecutive chunks hit distinct banks.
static __device__ __forceinline__ void store_x_vector(float4 *x_tile, int chunks, int m, int vector, uint4 raw) {
  float4 low, high;
  half2_to_float2(raw.x, low.x, low.y);
  half2_to_float2(raw.y, low.z, low.w);
  half2_to_float2(raw.z, high.x, high.y);
  half2_to_float2(raw.w, high.z, high.w);
  const int chunk = vector >> 1;
  const int quarter = (vector & 1) * 2;
  x_tile[(m * 4 + quarter) * chunks + chunk] = low;
  x_tile[(m * 4 + quarter + 1) * chunks + chunk] = high;
}

// Unscaled dot product of chunk `chunk` of x row m with its 16 converted weights: two interleaved
// FP32 sums (even and odd positions), added last. The fixed order keeps results bit-identical
// wherever it is used.
static __device__ __forceinline__ float chunk_dot(const float4 *x_tile, int chunks, int m, int chunk,
                                                  const float (&w)[16]) {
  float even = 0.0f, odd = 0.0f;
#pragma unroll
  for (int quarter = 0; quarter < 4; ++quarter) {
    const float4 x = x_tile[(m * 4 + quarter) * chunks + chunk];
    even = fmaf(x.x, w[4 * quarter + 0], even);
    odd = fmaf(x.y, w[4 * quarter + 1], odd);
    even = fmaf(x.z, w[4 * quarter + 2], even);
    odd = fmaf(x.w, w[4 * quarter + 3], odd);
  }
  return even + odd;
}

// sum += the rows of the live pairs of a batch, in pair order: the weighted top-k sum's arithmetic,
// shared by the reduce kernel and the downs that fuse it, so both give the same bits.
template <int kBatch>
static __device__ __forceinline__ void add_live_rows(float4 &sum, const bool (&live)[kBatch], const float4 (&rows)[kBatch]) {
#pragma unroll
  for (int b = 0; b < kBatch; ++b) {
    if (!live[b]) continue;
    sum.x += rows[b].x;
    sum.y += rows[b].y;
    sum.z += rows[b].z;
    sum.w += rows[b].w;
  }
}

// Four FP16 outputs (8-byte aligned) from four sums.
static __device__ __forceinline__ void store_half4(unsigned short *address, const float4 &sum) {
  uint2 packed;
  packed.x = pack_halves(float_to_half(sum.x), float_to_half(sum.y));
  packed.y = pack_halves(float_to_half(sum.z), float_to_half(sum.w));
  *reinterpret_cast<uint2 *>(address) = packed;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// d = A . B + d for one m16n8k16 product (sm_80 and later: hmma, tile, raw).
static __device__ __forceinline__ void mma_16816(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                                 unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
#endif

static __device__ __forceinline__ float silu_times(float gate, float up) {
  return gate / (1.0f + expf(-gate)) * up;
}

// The one test of a routed id, given as the kernel's own index (local_expert): is it an expert of this
// kernel? A pair whose expert is outside [0, num_experts) does no work and adds nothing to its token;
// the bad-id count (counters[2]) counts the ids outside [0, kGlobalExperts), which no rank holds.
static __device__ __forceinline__ bool expert_id_valid(int id, int num_experts) {
  return id >= 0 && id < num_experts;
}

// The start of a CTA of a routed GEMM (cc, hmma, mma): sets expert, first and count, which the kernel
// declares, to its work item, `count` pairs of expert `expert` from position `first` (of sorted_pairs,
// or of the pairs themselves with block_m 1). block_m 1: routed pair blockIdx.y, straight from
// topk_ids (written before the forward), so no route pass is needed and its weights may be requested
// before the kernel's wait. Otherwise item blockIdx.y of the route (item_load), loaded together with
// the item count (count_load): items has an entry for every blockIdx.y, stale past the count. expert
// is the kernel's own index (local_expert, moe_expert_range.cu; the route writes those). A CTA
// past the pairs runs end_past_pairs, one past the items end_past_items. A macro rather than a
// function: the kernels' PTX is the one these exact statements give.
#define VOLT8_READ_WORK_ITEM(count_load, item_load, end_past_pairs, end_past_items) \
  if (kBlockM == 1) {                                                                \
    if ((int)blockIdx.y >= num_pairs) end_past_pairs;                                \
    expert = local_expert(topk_ids[blockIdx.y]);                                     \
    first = blockIdx.y;                                                              \
    count = 1;                                                                       \
  } else {                                                                           \
    const int item_count = count_load;                                               \
    const int4 item = item_load;                                                     \
    if ((int)blockIdx.y >= item_count) end_past_items;                               \
    expert = item.x;                                                                 \
    first = item.y;                                                                  \
    count = min(item.z, kBlockM);                                                    \
  }

// Stores (never adds) in *target the number of ids[0, count) outside [0, num_experts). Every thread
// of the CTA must call it; ids are loaded eight at a time per thread, all in flight together.
static __device__ void store_bad_id_count(const int *ids, int count, int num_experts, int *target) {
  constexpr int kBatch = 8;
  int bad = 0;
  for (int base = 0; base < count; base += kBatch * (int)blockDim.x) {
    int values[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int index = base + b * (int)blockDim.x + (int)threadIdx.x;
      values[b] = index < count ? ids[index] : 0;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) bad += __syncthreads_count(!expert_id_valid(values[b], num_experts));
  }
  if (threadIdx.x == 0) *target = bad;
}
