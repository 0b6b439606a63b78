/* The models volt8 is tuned and tested for: the routed experts of public MoE models' MTP layers,
 * by name, and the resident shape of each tensor-parallel rank (sharded as runtime/checkpoint/shard.h does). */
#ifndef VOLT8_MODELS_H
#define VOLT8_MODELS_H

#include <stddef.h>
#include <stdint.h>

#include "volt8.h"

typedef struct volt8_model {
  const char *name;         /* command-line name: "deepseek-v3" */
  const char *description;  /* "DeepSeek-V3 / R1" */
  int32_t hidden;           /* H */
  int32_t intermediate;     /* the moe intermediate size I, unsharded */
  int32_t num_experts;      /* routed experts E */
  int32_t top_k;
} volt8_model;

#define VOLT8_MODEL_REFERENCE "reference"

int32_t volt8_model_count(void);
/* Model `index` in [0, count), else NULL. */
const volt8_model *volt8_model_at(int32_t index);
/* The model named `name`, else NULL. */
const volt8_model *volt8_model_find(const char *name);
/* "deepseek-v3, qwen3-next, ..." into buf (cut short when too small). */
void volt8_model_names(char *buf, size_t buf_size);
/* The resident shape of rank `tp_rank` of `tp_size` with checkpoint (128x128) scales: the rank's
 * width and its offset in the 128 grid as volt8_shard_plan gives them. num_experts <= 0 keeps the
 * model's count. VOLT8_ERR_INVALID_ARGUMENT (message naming the value) where the shard plan refuses. */
volt8_status volt8_model_rank_shape(volt8_ctx *ctx, const volt8_model *model, int32_t tp_size, int32_t tp_rank,
                                    int32_t num_experts, volt8_moe_shape *out_shape);

#endif
