// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", SC 2011),
// the one random number generator of volt8. This text is both C99 and CUDA C++: kernel templates
// include it through the template engine, the host through runtime/sampler/philox.h, so both draw the same bits.
#ifndef VOLT8_PHILOX_CU
#define VOLT8_PHILOX_CU

#ifdef __CUDACC__
#define VOLT8_HD static __device__ __forceinline__
#else
#define VOLT8_HD static inline
#endif

typedef unsigned int volt8_u32;
typedef unsigned long long volt8_u64;

typedef struct volt8_philox_block {
  volt8_u32 word[4];
} volt8_philox_block;

#define VOLT8_PHILOX_MULTIPLIER_0 0xD2511F53u
#define VOLT8_PHILOX_MULTIPLIER_1 0xCD9E8D57u
#define VOLT8_PHILOX_KEY_STEP_0 0x9E3779B9u
#define VOLT8_PHILOX_KEY_STEP_1 0xBB67AE85u
#define VOLT8_PHILOX_ROUNDS 10

// Ten rounds of the Philox S-box over `counter` under the 64-bit key (key0, key1).
VOLT8_HD volt8_philox_block volt8_philox4x32_10(volt8_philox_block counter, volt8_u32 key0, volt8_u32 key1) {
  for (int round = 0; round < VOLT8_PHILOX_ROUNDS; ++round) {
    if (round > 0) {
      key0 += VOLT8_PHILOX_KEY_STEP_0;
      key1 += VOLT8_PHILOX_KEY_STEP_1;
    }
    const volt8_u64 product0 = (volt8_u64)VOLT8_PHILOX_MULTIPLIER_0 * counter.word[0];
    const volt8_u64 product1 = (volt8_u64)VOLT8_PHILOX_MULTIPLIER_1 * counter.word[2];
    volt8_philox_block next;
    next.word[0] = (volt8_u32)(product1 >> 32) ^ counter.word[1] ^ key0;
    next.word[1] = (volt8_u32)product1;
    next.word[2] = (volt8_u32)(product0 >> 32) ^ counter.word[3] ^ key1;
    next.word[3] = (volt8_u32)product0;
    counter = next;
  }
  return counter;
}

// floor(random * bound / 2^64): maps 64 uniform bits onto [0, bound) with an absolute error of at
// most 2^-64 per value. Written with 32-bit halves so that C and CUDA need no 128-bit type.
VOLT8_HD volt8_u64 volt8_random_below(volt8_u64 random, volt8_u64 bound) {
  const volt8_u64 random_low = random & 0xFFFFFFFFull, random_high = random >> 32;
  const volt8_u64 bound_low = bound & 0xFFFFFFFFull, bound_high = bound >> 32;
  const volt8_u64 low_low = random_low * bound_low, low_high = random_low * bound_high;
  const volt8_u64 high_low = random_high * bound_low, high_high = random_high * bound_high;
  const volt8_u64 middle = (low_low >> 32) + (low_high & 0xFFFFFFFFull) + (high_low & 0xFFFFFFFFull);
  return high_high + (low_high >> 32) + (high_low >> 32) + (middle >> 32);
}

#endif
