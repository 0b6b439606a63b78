/* A checkpoint's MTP experts: config and quantization metadata recognised, the MTP layer found
 * under any of its spellings, every expert tensor resolved and checked, and the per-expert pipeline
 * (shard -> validate scales or quantize -> sink) that feeds the device, host arrays or a plan. */
#ifndef VOLT8_CHECKPOINT_H
#define VOLT8_CHECKPOINT_H

#include <stdint.h>

#include "moe/kernels/moe_layout.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/shard.h"
#include "volt8.h"

enum { VOLT8_GATE = 0, VOLT8_UP = 1, VOLT8_DOWN = 2, VOLT8_PROJECTIONS = 3 };

/* One expert's gate, up or down matrix inside the checkpoint. */
typedef struct volt8_matrix_source {
  const volt8_st_tensor *weight; /* per-expert tensor, or the fused [E][rows][cols] one */
  const uint8_t *data;           /* first element of this expert's matrix */
  int64_t rows, cols;            /* gate/up: [I][H]; down: [H][I] */
  int64_t row_base;              /* first row inside a fused tensor's expert slice (I for up) */
  const volt8_st_tensor *scale;  /* native: the block-scale grid; NULL online */
} volt8_matrix_source;

typedef struct volt8_checkpoint {
  const char *dir;              /* the folder the MTP experts come from (the caller's string) */
  volt8_st_set *set;
  int32_t route;                /* volt8_route */
  int32_t hidden, intermediate; /* intermediate: full width, before sharding */
  int32_t num_experts;
  int32_t fused;                /* experts stored as fused gate_up_proj / down_proj tensors */
  volt8_st_dtype weight_dtype;
  volt8_st_dtype scale_dtype;   /* native only */
  char quant_format[32];
  char tensor_prefix[192];      /* "mtp.layers.0.mlp.experts." as spelled in the checkpoint */
  const volt8_st_tensor **tensors; /* per-expert: [E][3] weights, then [E][3] scales (native) */
  const volt8_st_tensor *fused_gate_up, *fused_down; /* fused: [E][2I][H] and [E][H][I] */
  int32_t expert_label_base;    /* added to an expert's index where messages name it: the caller's number
                                 * of the one expert volt8_expert_shard_host is given; 0 otherwise */
} volt8_checkpoint;

/* The options with defaults for fields an older caller did not know, validated. */
volt8_status volt8_load_options_read(volt8_ctx *ctx, const volt8_load_options *options, volt8_load_options *out);

volt8_status volt8_checkpoint_open(volt8_ctx *ctx, const volt8_load_options *options, volt8_checkpoint **out_checkpoint);
void volt8_checkpoint_close(volt8_checkpoint *checkpoint);
void volt8_checkpoint_matrix(const volt8_checkpoint *checkpoint, int32_t expert, int32_t projection,
                             volt8_matrix_source *out);

/* Every expert checked as a load of any rank would check it (native: all codes and scale blocks,
 * unsharded; online: every value). Fills the scale fields of `report`. */
volt8_status volt8_checkpoint_validate(volt8_ctx *ctx, volt8_checkpoint *checkpoint, volt8_load_report *report);

/* Where the pipeline writes one expert (moe_layout.h per-expert arrays), and what follows. */
typedef struct volt8_expert_arrays {
  uint8_t *w13, *w2;
  uint16_t *s13, *s2;
} volt8_expert_arrays;

typedef struct volt8_expert_sink {
  void *context;
  volt8_status (*place)(void *context, int32_t expert, volt8_expert_arrays *out);
  volt8_status (*commit)(void *context, int32_t expert, const volt8_expert_arrays *arrays); /* may be NULL */
} volt8_expert_sink;

/* The experts one rank holds: [start, start + count) of the checkpoint's (expert parallelism). */
typedef struct volt8_expert_range {
  int32_t start, count;
} volt8_expert_range;

/* The range of load options already read (count 0: all experts), checked against the checkpoint's
 * expert count; VOLT8_ERR_INVALID_ARGUMENT naming the value otherwise. */
volt8_status volt8_expert_range_of(volt8_ctx *ctx, const volt8_load_options *options, int32_t num_experts,
                                   volt8_expert_range *out);

/* The rank's resident shape: the shard's, holding `range` of the checkpoint's num_experts. */
void volt8_expert_range_shape(const volt8_shard *shard, const volt8_expert_range *range, int32_t hidden,
                              int32_t num_experts, volt8_moe_shape *out);

/* Shards, validates (or quantizes) and hands every expert of `range` to `sink`, one at a time; the
 * sink sees each expert's index inside the range. */
volt8_status volt8_checkpoint_run(volt8_ctx *ctx, volt8_checkpoint *checkpoint, const volt8_shard *shard,
                                  const volt8_expert_range *range, const volt8_expert_sink *sink,
                                  volt8_load_report *report);

/* Host allocations and file mappings held by checkpoint code right now (tests: failures leave none). */
int64_t volt8_checkpoint_live_allocations(void);
/* Largest number of bytes held at once through volt8_checkpoint_alloc since the last reset
 * (reset != 0 returns the old peak and restarts from what is held now). */
int64_t volt8_checkpoint_peak_bytes(int reset);
void *volt8_checkpoint_alloc(size_t bytes);
void volt8_checkpoint_free(void *pointer);

#endif
