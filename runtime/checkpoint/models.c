/* The model registry: one table of the MTP layers' routed expert shapes. */
#include "checkpoint/models.h"

#include <stdio.h>
#include <string.h>

#include "core/ctx_internal.h"
#include "checkpoint/shard.h"

static const volt8_model MODELS[] = {
    {"deepseek-v3", "DeepSeek-V3 / R1", 7168, 2048, 256, 8},
    {"qwen3-next", "Qwen3-Next-80B-A3B", 2048, 512, 512, 10},
    {"glm-4.5", "GLM-4.5", 5120, 1536, 160, 8},
    {"glm-4.5-air", "GLM-4.5-Air", 4096, 1408, 128, 8},
    {VOLT8_MODEL_REFERENCE, "the reference model", 2560, 640, 512, 10},
};
#define MODEL_COUNT ((int32_t)(sizeof MODELS / sizeof MODELS[0]))

int32_t volt8_model_count(void) { return MODEL_COUNT; }

const volt8_model *volt8_model_at(int32_t index) { return index >= 0 && index < MODEL_COUNT ? &MODELS[index] : NULL; }

const volt8_model *volt8_model_find(const char *name) {
  for (int32_t i = 0; name && i < MODEL_COUNT; i++)
    if (strcmp(MODELS[i].name, name) == 0) return &MODELS[i];
  return NULL;
}

void volt8_model_names(char *buf, size_t buf_size) {
  if (!buf || buf_size == 0) return;
  size_t used = 0;
  buf[0] = '\0';
  for (int32_t i = 0; i < MODEL_COUNT && used < buf_size; i++) {
    int written = snprintf(buf + used, buf_size - used, "%s%s", i ? ", " : "", MODELS[i].name);
    used += written > 0 ? (size_t)written : 0;
  }
}

volt8_status volt8_model_rank_shape(volt8_ctx *ctx, const volt8_model *model, int32_t tp_size, int32_t tp_rank,
                                    int32_t num_experts, volt8_moe_shape *out_shape) {
  if (!model || !out_shape)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_model_rank_shape: model or out_shape is NULL");
  volt8_shard shard;
  volt8_status status =
      volt8_shard_plan(ctx, model->intermediate, tp_size, tp_rank, VOLT8_ROUTE_NATIVE, VOLT8_CHECKPOINT_BLOCK, &shard);
  if (status != VOLT8_OK) return status;
  volt8_shard_shape(&shard, model->hidden, num_experts > 0 ? num_experts : model->num_experts, out_shape);
  return VOLT8_OK;
}
