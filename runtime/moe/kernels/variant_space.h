/* The kernels' variant space: for each GEMM family, its block_m values and each op's tiles, every
 * block_m crossed with every tile. codegen/ computes it in Lua when the library is built (the build's
 * generated/variant_space.c; docs/design.md, "The variant space"); each kind's file says what a tile
 * means and whether a variant fits a shape on an arch. */
#ifndef VOLT8_VARIANT_SPACE_H
#define VOLT8_VARIANT_SPACE_H

#include <stddef.h>
#include <stdint.h>

/* A GEMM kind's tile: a variant without its op and block_m (0: a field the tile does not set). The
 * fields in the order names print them: bn, w, sk, l, c, o, f, r (catalogue.h, volt8_variant). */
typedef struct volt8_tile {
  int32_t block_n, warps, split_k, lanes, column_groups, min_blocks, fetch_bytes, fused_reduce;
} volt8_tile;

typedef struct volt8_variant_space {
  const int32_t *block_ms;
  int32_t block_m_count;
  const volt8_tile *tiles[2]; /* gate_up, down (NULL: none) */
  int32_t tile_counts[2];
} volt8_variant_space;

/* One a GEMM family, named by the family's part of the variants' names. */
extern const volt8_variant_space volt8_space_cc, volt8_space_mma, volt8_space_hmma, volt8_space_tile, volt8_space_raw,
    volt8_space_tok;

#endif
