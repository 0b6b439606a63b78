// What the large-item GEMM templates share (moe_gemm_tile.cu, moe_gemm_raw.cu): their parameter list,
// shared-memory addresses, the FP16 multiply by a scale, the weight-tile row of a warp's row and the
// store of a warp's m16n8k16 accumulators into h (gate_up) or z (down). Included after the template's
// constants (kBlockN, kN, kWarpM) and moe_work_item.cu.

#if VOLT8_GATE_UP
#define VOLT8_ITEM_GEMM_PARAMETERS                                                                              \
  const unsigned short *__restrict__ activations, const unsigned char *__restrict__ weights,                   \
      const unsigned short *__restrict__ scales, const int *__restrict__ sorted_pairs,                          \
      const int4 *__restrict__ items, const int *__restrict__ counters, int top_k, unsigned short *__restrict__ out, \
      const int *__restrict__ topk_ids, int num_pairs
#else
#define VOLT8_ITEM_GEMM_PARAMETERS                                                                              \
  const unsigned short *__restrict__ activations, const unsigned char *__restrict__ weights,                   \
      const unsigned short *__restrict__ scales, const int *__restrict__ sorted_pairs,                          \
      const int4 *__restrict__ items, const int *__restrict__ counters, const float *__restrict__ topk_weights,  \
      float *__restrict__ out, const int *__restrict__ topk_ids, int num_pairs
#endif

static __device__ __forceinline__ unsigned shared_address(const void *pointer) {
  return (unsigned)__cvta_generic_to_shared(pointer);
}

// Two E4M3 codes -> two FP16 values holding e4m3 * 2^-8, the bits of moe_common.cu's e4m3x2_to_half2 in
// three instructions instead of four: the byte permute puts each code in the low byte of its 16-bit
// lane and the code's sign bit, replicated, in the high byte; shifted left by 7, the lane holds the
// sign at bit 15 and the 7 exponent-and-mantissa bits at 7..13, and the mask clears the rest (bit 14,
// the low bits, and what the low lane pushed into the high one). The raw family's conversion, and the
// tile family's on sm_70.
#define VOLT8_E4M3_LOW_SPREAD 0x9180u   // codes 0, 1 of a word
#define VOLT8_E4M3_HIGH_SPREAD 0xB3A2u  // codes 2, 3
static __device__ __forceinline__ unsigned e4m3x2_to_half2_shift(unsigned word, unsigned selector) {
  unsigned spread;  // prmt with a selector nibble's top bit set replicates the chosen byte's sign
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(spread) : "r"(word), "r"(selector));
  return (spread << 7) & 0xbf80bf80u;
}

// Two FP16 products of pairs of halves.
static __device__ __forceinline__ unsigned mul_half2(unsigned a, unsigned b) {
  unsigned product;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(product) : "r"(a), "r"(b));
  return product;
}

// The weight-tile row of a warp's local weight row n (0..31): gate_up puts its gate rows first and
// its up rows at kBlockN, a warp taking 16 of each for the same 16 output columns; down, 32 rows.
static __device__ __forceinline__ int weight_tile_row(int warp_n, int n) {
#if VOLT8_GATE_UP
  return (n >> 4) * kBlockN + warp_n * 16 + (n & 15);
#else
  return warp_n * 32 + n;
#endif
}

// A warp's m16n8k16 accumulators (its kWarpM pairs x 32 weight rows) in pairs of adjacent columns: e 0, 1
// at row lane / 4, columns 2 (lane % 4) + 0, 1; e 2, 3 at row lane / 4 + 8, each times scale(j, e) (the
// scale its sums are counted in). gate_up stores h = FP16(silu(gate) * up), its gate rows in the first
// half of the n8 tiles; down stores z = FP16(weight * sum) into out read as FP16 (half the bytes of FP32
// rows; reduce_half adds them). Pad rows are never stored.
template <int kTilesM, int kTilesN, typename Out, typename Scale>
static __device__ __forceinline__ void store_16816(const float (&acc)[kTilesM][kTilesN][4], const int *pair_ids,
                                                   const float *pair_weights, Out *out, int count, int column0,
                                                   int warp_m, int warp_n, int lane, Scale scale) {
#if !VOLT8_GATE_UP
  unsigned short *z_half = reinterpret_cast<unsigned short *>(out);  // z of FP16 in the workspace's z
#endif
#pragma unroll
  for (int i = 0; i < kTilesM; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int m = warp_m * kWarpM + i * 16 + (lane >> 2) + half * 8;
      if (m >= count) continue;
      const int pair = pair_ids[m];
#if VOLT8_GATE_UP
#pragma unroll
      for (int j = 0; j < kTilesN / 2; ++j) {
        const int column = column0 + warp_n * 16 + j * 8 + 2 * (lane & 3);
        if (column >= kN) continue;
        const float *gate = &acc[i][j][2 * half], *up = &acc[i][j + kTilesN / 2][2 * half];
        const int e = 2 * half, g = j, u = j + kTilesN / 2;
        *reinterpret_cast<unsigned *>(out + (long long)pair * kN + column) =
            pack_halves(float_to_half(silu_times(gate[0] * scale(g, e), up[0] * scale(u, e))),
                        float_to_half(silu_times(gate[1] * scale(g, e + 1), up[1] * scale(u, e + 1))));
      }
#else
      const float weight = pair_weights[m];
#pragma unroll
      for (int j = 0; j < kTilesN; ++j) {
        const int column = column0 + warp_n * 32 + j * 8 + 2 * (lane & 3);
        if (column >= kN) continue;
        const int e = 2 * half;
        *reinterpret_cast<unsigned *>(z_half + (long long)pair * kN + column) =
            pack_halves(float_to_half(weight * scale(j, e) * acc[i][j][e]),
                        float_to_half(weight * scale(j, e + 1) * acc[i][j][e + 1]));
      }
#endif
    }
}
