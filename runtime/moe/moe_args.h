/* Host-side checks of a forward's arguments and of the capture rule, apart from any launch. */
#ifndef VOLT8_MOE_ARGS_H
#define VOLT8_MOE_ARGS_H

#include "volt8.h"

typedef struct volt8_moe_limits {
  int32_t num_experts;
  int32_t max_tokens;  /* the prepared maximum */
  int32_t max_top_k;
} volt8_moe_limits;

/* Everything that can be checked without touching device memory: size, counts, NULL and
 * misaligned pointers. A clear error naming the argument otherwise. */
volt8_status volt8_moe_args_check(volt8_ctx *ctx, const volt8_moe_limits *limits, const volt8_moe_args *args);
/* Host copies of ids: the first one outside [0, num_experts) is an error naming its position. */
volt8_status volt8_moe_ids_check(volt8_ctx *ctx, const int32_t *ids, int32_t num_tokens, int32_t top_k,
                                 int32_t num_experts);
/* Whether a kernel may be obtained now: loaded ones always; new ones only outside capture. */
volt8_status volt8_capture_allows_load(volt8_ctx *ctx, int capturing, int loaded, const char *variant);

#endif
