/* SHA-256 as FIPS 180-4 specifies it; small and portable rather than fast. */
#include "core/sha256.h"

#include <string.h>

static const uint32_t round_constants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotate_right(uint32_t value, int bits) { return (value >> bits) | (value << (32 - bits)); }

static void compress_block(uint32_t state[8], const uint8_t block[64]) {
  uint32_t schedule[64];
  for (int i = 0; i < 16; i++)
    schedule[i] = (uint32_t)block[4 * i] << 24 | (uint32_t)block[4 * i + 1] << 16 | (uint32_t)block[4 * i + 2] << 8 |
                  (uint32_t)block[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = rotate_right(schedule[i - 15], 7) ^ rotate_right(schedule[i - 15], 18) ^ (schedule[i - 15] >> 3);
    uint32_t s1 = rotate_right(schedule[i - 2], 17) ^ rotate_right(schedule[i - 2], 19) ^ (schedule[i - 2] >> 10);
    schedule[i] = schedule[i - 16] + s0 + schedule[i - 7] + s1;
  }
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
  for (int i = 0; i < 64; i++) {
    uint32_t sum1 = rotate_right(e, 6) ^ rotate_right(e, 11) ^ rotate_right(e, 25);
    uint32_t choose = (e & f) ^ (~e & g);
    uint32_t t1 = h + sum1 + choose + round_constants[i] + schedule[i];
    uint32_t sum0 = rotate_right(a, 2) ^ rotate_right(a, 13) ^ rotate_right(a, 22);
    uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = sum0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

void volt8_sha256_init(volt8_sha256 *hasher) {
  static const uint32_t initial_state[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                            0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(hasher->state, initial_state, sizeof initial_state);
  hasher->total_bytes = 0;
  hasher->block_used = 0;
}

void volt8_sha256_update(volt8_sha256 *hasher, const void *data, size_t size) {
  const uint8_t *bytes = data;
  hasher->total_bytes += size;
  while (size > 0) {
    size_t take = 64 - hasher->block_used;
    if (take > size) take = size;
    memcpy(hasher->block + hasher->block_used, bytes, take);
    hasher->block_used += take;
    bytes += take;
    size -= take;
    if (hasher->block_used == 64) {
      compress_block(hasher->state, hasher->block);
      hasher->block_used = 0;
    }
  }
}

void volt8_sha256_final(volt8_sha256 *hasher, uint8_t digest[VOLT8_SHA256_BYTES]) {
  uint64_t total_bits = hasher->total_bytes * 8;
  uint8_t padding[72] = {0x80};
  /* pad to 56 mod 64, then the message length in bits, big-endian */
  size_t pad_bytes = (hasher->block_used < 56 ? 56 : 120) - hasher->block_used;
  for (int i = 0; i < 8; i++) padding[pad_bytes + i] = (uint8_t)(total_bits >> (56 - 8 * i));
  volt8_sha256_update(hasher, padding, pad_bytes + 8);
  for (int i = 0; i < 8; i++) {
    digest[4 * i] = (uint8_t)(hasher->state[i] >> 24);
    digest[4 * i + 1] = (uint8_t)(hasher->state[i] >> 16);
    digest[4 * i + 2] = (uint8_t)(hasher->state[i] >> 8);
    digest[4 * i + 3] = (uint8_t)hasher->state[i];
  }
}

void volt8_sha256_digest(const void *data, size_t size, uint8_t digest[VOLT8_SHA256_BYTES]) {
  volt8_sha256 hasher;
  volt8_sha256_init(&hasher);
  volt8_sha256_update(&hasher, data, size);
  volt8_sha256_final(&hasher, digest);
}

void volt8_sha256_hex(const uint8_t digest[VOLT8_SHA256_BYTES], char hex[VOLT8_SHA256_HEX_BYTES]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < VOLT8_SHA256_BYTES; i++) {
    hex[2 * i] = digits[digest[i] >> 4];
    hex[2 * i + 1] = digits[digest[i] & 15];
  }
  hex[64] = '\0';
}
