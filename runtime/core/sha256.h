/* SHA-256 (FIPS 180-4), for cache keys and entry checksums. */
#ifndef VOLT8_SHA256_H
#define VOLT8_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define VOLT8_SHA256_BYTES 32
#define VOLT8_SHA256_HEX_BYTES 65 /* 64 hex digits and a NUL */

typedef struct volt8_sha256 {
  uint32_t state[8];
  uint64_t total_bytes;
  uint8_t block[64];
  size_t block_used;
} volt8_sha256;

void volt8_sha256_init(volt8_sha256 *hasher);
void volt8_sha256_update(volt8_sha256 *hasher, const void *data, size_t size);
void volt8_sha256_final(volt8_sha256 *hasher, uint8_t digest[VOLT8_SHA256_BYTES]);
/* One-shot digest of `size` bytes. */
void volt8_sha256_digest(const void *data, size_t size, uint8_t digest[VOLT8_SHA256_BYTES]);
/* Lower-case hex spelling of a digest. */
void volt8_sha256_hex(const uint8_t digest[VOLT8_SHA256_BYTES], char hex[VOLT8_SHA256_HEX_BYTES]);

#endif
