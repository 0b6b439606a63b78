/* How the GPU rejection sampler cuts rows across CTAs (runtime/sampler/sampler.c). */
#ifndef VOLT8_SAMPLER_H
#define VOLT8_SAMPLER_H

#include <stdint.h>

#define SPLIT_MIN_CHUNK 2048 /* tokens: no chunk is cut smaller than one sweep of a row CTA */
#define SPLIT_CHUNK_ALIGN 32  /* chunks start on whole float4 vectors and warps */

typedef struct volt8_sampler_cut {
  int32_t splits; /* chunks a row is cut into, >= 1 */
  int32_t chunk;  /* tokens a chunk, a multiple of SPLIT_CHUNK_ALIGN (or V when splits is 1) */
} volt8_sampler_cut;

/* Cuts rows of `vocab` tokens so that `units` of them give about `target_ctas` chunks, none under
 * SPLIT_MIN_CHUNK tokens; the chunks cover [0, vocab) and none is empty. */
void volt8_sampler_split(int64_t units, int32_t vocab, int64_t target_ctas, volt8_sampler_cut *cut);

#endif
