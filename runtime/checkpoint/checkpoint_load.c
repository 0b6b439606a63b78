/* The per-expert load pipeline (shard -> validate scales or quantize -> sink) with its three sinks:
 * device upload, host arrays, and validation only; and the public load entry points. */
#include "checkpoint/checkpoint.h"

#include "core/ctx_internal.h"
#include "moe/experts_internal.h"
#include "checkpoint/quant.h"
#include "checkpoint/scales.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the per-expert pipeline ---- */

typedef struct pipeline {
  volt8_ctx *ctx;
  const volt8_checkpoint *checkpoint;
  const volt8_shard *shard;
  volt8_moe_dims dims;
  uint8_t *staging;   /* online: one matrix slice in the source dtype */
  float *block_max;   /* native: largest |w| per scale block of one matrix */
  int64_t staging_bytes;
  double scale_error;
  volt8_quant_error quant_error;
} pipeline;

/* Gate and up rows, down columns, byte for byte; their scale blocks validated and converted. */
static volt8_status stage_native(pipeline *p, int32_t expert, const volt8_expert_arrays *out) {
  const volt8_shard *shard = p->shard;
  int32_t label = p->checkpoint->expert_label_base + expert; /* the expert as messages name it */
  const volt8_moe_dims *dims = &p->dims;
  int64_t hidden = p->checkpoint->hidden, intermediate = shard->intermediate;
  volt8_matrix_source matrix;
  volt8_status status = VOLT8_OK;
  for (int32_t half = VOLT8_GATE; half <= VOLT8_UP && status == VOLT8_OK; half++) {
    volt8_checkpoint_matrix(p->checkpoint, expert, half, &matrix);
    uint8_t *codes = out->w13 + half * intermediate * hidden;
    volt8_shard_copy_rows(matrix.data, hidden, 1, shard, codes);
    status = volt8_codes_block_max(p->ctx, matrix.weight, label, codes, intermediate, hidden, shard->start, 0,
                                   VOLT8_CHECKPOINT_BLOCK, VOLT8_CHECKPOINT_BLOCK, p->block_max);
    if (status == VOLT8_OK)
      status = volt8_scales_convert(p->ctx, matrix.scale, label, shard->first_block, dims->g13, 0, dims->k13_blocks,
                                    p->block_max, out->s13 + (int64_t)half * dims->g13 * dims->k13_blocks, &p->scale_error);
  }
  if (status != VOLT8_OK) return status;
  volt8_checkpoint_matrix(p->checkpoint, expert, VOLT8_DOWN, &matrix);
  volt8_shard_copy_columns(matrix.data, hidden, 1, shard, out->w2);
  status = volt8_codes_block_max(p->ctx, matrix.weight, label, out->w2, hidden, intermediate, 0, shard->start,
                                 VOLT8_CHECKPOINT_BLOCK, VOLT8_CHECKPOINT_BLOCK, p->block_max);
  if (status != VOLT8_OK) return status;
  return volt8_scales_convert(p->ctx, matrix.scale, label, 0, dims->n2_blocks, shard->first_block, dims->g2,
                              p->block_max, out->s2, &p->scale_error);
}

/* The rank's slice of each matrix, quantized on its own grid (offset 0). */
static volt8_status stage_online(pipeline *p, int32_t expert, const volt8_expert_arrays *out) {
  const volt8_shard *shard = p->shard;
  int32_t label = p->checkpoint->expert_label_base + expert; /* the expert as messages name it */
  const volt8_moe_dims *dims = &p->dims;
  int64_t hidden = p->checkpoint->hidden, intermediate = shard->intermediate;
  size_t element_bytes = (size_t)volt8_st_dtype_bits(p->checkpoint->weight_dtype) / 8;
  volt8_matrix_source matrix;
  volt8_status status = VOLT8_OK;
  for (int32_t half = VOLT8_GATE; half <= VOLT8_UP && status == VOLT8_OK; half++) {
    volt8_checkpoint_matrix(p->checkpoint, expert, half, &matrix);
    volt8_shard_copy_rows(matrix.data, hidden, element_bytes, shard, p->staging);
    status = volt8_quant_matrix(p->ctx, matrix.weight, label, p->staging, intermediate, hidden,
                                matrix.row_base + shard->start, 0, shard->block_n, out->w13 + half * intermediate * hidden,
                                out->s13 + (int64_t)half * dims->g13 * dims->k13_blocks, &p->quant_error);
  }
  if (status != VOLT8_OK) return status;
  volt8_checkpoint_matrix(p->checkpoint, expert, VOLT8_DOWN, &matrix);
  volt8_shard_copy_columns(matrix.data, hidden, element_bytes, shard, p->staging);
  return volt8_quant_matrix(p->ctx, matrix.weight, label, p->staging, hidden, intermediate, 0, shard->start,
                            shard->block_n, out->w2, out->s2, &p->quant_error);
}

static void finish_report(const pipeline *p, volt8_load_report *report) {
  volt8_load_report filled = VOLT8_LOAD_REPORT_INIT;
  filled.route = p->checkpoint->route;
  filled.num_experts = p->checkpoint->num_experts;
  filled.scale_max_relative_error = p->scale_error;
  if (p->quant_error.reference_squares > 0.0)
    filled.online_relative_l2 = sqrt(p->quant_error.error_squares / p->quant_error.reference_squares);
  filled.online_max_abs_error = p->quant_error.max_abs_error;
  filled.staging_peak_bytes = p->staging_bytes;
  *report = filled;
}

volt8_status volt8_expert_range_of(volt8_ctx *ctx, const volt8_load_options *options, int32_t num_experts,
                                   volt8_expert_range *out) {
  int32_t start = options->expert_start, count = options->expert_count;
  if (count == 0 && start == 0) {
    *out = (volt8_expert_range){0, num_experts};
    return VOLT8_OK;
  }
  if (start < 0 || start >= num_experts)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "expert_start is %d; the checkpoint's experts are 0..%d", start,
                      num_experts - 1);
  if (count <= 0 || count > num_experts - start)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "expert_count is %d; from expert_start %d it must be 1..%d (the checkpoint has %d experts)", count,
                      start, num_experts - start, num_experts);
  *out = (volt8_expert_range){start, count};
  return VOLT8_OK;
}

void volt8_expert_range_shape(const volt8_shard *shard, const volt8_expert_range *range, int32_t hidden,
                              int32_t num_experts, volt8_moe_shape *out) {
  volt8_shard_shape(shard, hidden, range->count, out);
  if (range->count != num_experts) {
    out->expert_start = range->start;
    out->global_experts = num_experts;
  }
}

volt8_status volt8_checkpoint_run(volt8_ctx *ctx, volt8_checkpoint *checkpoint, const volt8_shard *shard,
                                  const volt8_expert_range *range, const volt8_expert_sink *sink,
                                  volt8_load_report *report) {
  pipeline p = {.ctx = ctx, .checkpoint = checkpoint, .shard = shard};
  volt8_moe_shape shape;
  volt8_shard_shape(shard, checkpoint->hidden, checkpoint->num_experts, &shape);
  volt8_status status = volt8_moe_dims_compute(ctx, &shape, &p.dims);
  if (status != VOLT8_OK) return status;
  int native = checkpoint->route == VOLT8_ROUTE_NATIVE;
  size_t element_bytes = (size_t)volt8_st_dtype_bits(checkpoint->weight_dtype) / 8;
  size_t blocks = (size_t)p.dims.g13 * (size_t)p.dims.k13_blocks;
  if ((size_t)p.dims.n2_blocks * (size_t)p.dims.g2 > blocks) blocks = (size_t)p.dims.n2_blocks * (size_t)p.dims.g2;
  p.staging_bytes = native ? (int64_t)(blocks * sizeof(float))
                           : (int64_t)((size_t)shard->intermediate * (size_t)checkpoint->hidden * element_bytes);
  void *staging = volt8_checkpoint_alloc((size_t)p.staging_bytes);
  if (!staging) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for %lld bytes of staging", (long long)p.staging_bytes);
  if (native) p.block_max = staging;
  else p.staging = staging;
  for (int32_t e = 0; e < range->count && status == VOLT8_OK; e++) {
    volt8_expert_arrays arrays;
    status = sink->place(sink->context, e, &arrays);
    int32_t source = range->start + e;
    if (status == VOLT8_OK) status = native ? stage_native(&p, source, &arrays) : stage_online(&p, source, &arrays);
    if (status == VOLT8_OK && sink->commit) status = sink->commit(sink->context, e, &arrays);
  }
  volt8_checkpoint_free(staging);
  if (status == VOLT8_OK && report) finish_report(&p, report);
  return status;
}

/* ---- sinks ---- */

/* One expert's arrays in host memory, reused for every expert (device uploads, validation). */
typedef struct staging_sink {
  volt8_expert_arrays arrays;
  int64_t bytes;
  volt8_experts *experts; /* device sink only */
} staging_sink;

static volt8_status staging_sink_init(volt8_ctx *ctx, const volt8_moe_dims *dims, staging_sink *sink) {
  memset(sink, 0, sizeof *sink);
  size_t sizes[4] = {(size_t)dims->w13_bytes_per_expert, (size_t)dims->s13_elems_per_expert * 2,
                     (size_t)dims->w2_bytes_per_expert, (size_t)dims->s2_elems_per_expert * 2};
  void **targets[4] = {(void **)&sink->arrays.w13, (void **)&sink->arrays.s13, (void **)&sink->arrays.w2,
                       (void **)&sink->arrays.s2};
  for (int i = 0; i < 4; i++) {
    *targets[i] = volt8_checkpoint_alloc(sizes[i]);
    sink->bytes += (int64_t)sizes[i];
    if (!*targets[i]) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for one expert's staging");
  }
  return VOLT8_OK;
}

static void staging_sink_release(staging_sink *sink) {
  volt8_checkpoint_free(sink->arrays.w13);
  volt8_checkpoint_free(sink->arrays.s13);
  volt8_checkpoint_free(sink->arrays.w2);
  volt8_checkpoint_free(sink->arrays.s2);
}

static volt8_status staging_place(void *context, int32_t expert, volt8_expert_arrays *out) {
  *out = ((staging_sink *)context)->arrays;
  return VOLT8_OK;
}

static volt8_status device_commit(void *context, int32_t expert, const volt8_expert_arrays *arrays) {
  return volt8_experts_upload_expert(((staging_sink *)context)->experts, expert, arrays->w13, arrays->s13, arrays->w2,
                                     arrays->s2);
}

typedef struct host_sink {
  volt8_expert_arrays base;
  volt8_moe_dims dims;
} host_sink;

static volt8_status host_place(void *context, int32_t expert, volt8_expert_arrays *out) {
  const host_sink *sink = context;
  out->w13 = sink->base.w13 + sink->dims.w13_bytes_per_expert * expert;
  out->s13 = sink->base.s13 + sink->dims.s13_elems_per_expert * expert;
  out->w2 = sink->base.w2 + sink->dims.w2_bytes_per_expert * expert;
  out->s2 = sink->base.s2 + sink->dims.s2_elems_per_expert * expert;
  return VOLT8_OK;
}

volt8_status volt8_checkpoint_validate(volt8_ctx *ctx, volt8_checkpoint *checkpoint, volt8_load_report *report) {
  volt8_load_report filled = VOLT8_LOAD_REPORT_INIT;
  if (checkpoint->route == VOLT8_ROUTE_ONLINE) {
    for (int32_t e = 0; e < checkpoint->num_experts; e++) {
      for (int32_t projection = 0; projection < VOLT8_PROJECTIONS; projection++) {
        volt8_matrix_source matrix;
        volt8_checkpoint_matrix(checkpoint, e, projection, &matrix);
        volt8_status status = volt8_quant_check_values(ctx, matrix.weight, e, matrix.data, matrix.rows, matrix.cols);
        if (status != VOLT8_OK) return status;
      }
    }
    filled.route = checkpoint->route;
    filled.num_experts = checkpoint->num_experts;
    *report = filled;
    return VOLT8_OK;
  }
  /* unsharded, so every code and scale block any rank could hold is checked once */
  volt8_shard whole;
  volt8_moe_shape shape;
  volt8_moe_dims dims;
  staging_sink staging = {0};
  volt8_status status = volt8_shard_plan(ctx, checkpoint->intermediate, 1, 0, VOLT8_ROUTE_NATIVE, VOLT8_CHECKPOINT_BLOCK, &whole);
  if (status == VOLT8_OK) {
    volt8_shard_shape(&whole, checkpoint->hidden, checkpoint->num_experts, &shape);
    status = volt8_moe_dims_compute(ctx, &shape, &dims);
  }
  if (status == VOLT8_OK) status = staging_sink_init(ctx, &dims, &staging);
  volt8_expert_sink sink = {&staging, staging_place, NULL};
  volt8_expert_range all = {0, checkpoint->num_experts};
  if (status == VOLT8_OK) status = volt8_checkpoint_run(ctx, checkpoint, &whole, &all, &sink, report);
  if (status == VOLT8_OK) report->staging_peak_bytes += staging.bytes;
  staging_sink_release(&staging);
  return status;
}

/* ---- public entry points ---- */

/* Options read, checkpoint opened, this rank's shard, experts, shape and dims. */
static volt8_status prepare_load(volt8_ctx *ctx, const volt8_load_options *options, volt8_load_options *read,
                                 volt8_checkpoint **checkpoint, volt8_shard *shard, volt8_expert_range *range,
                                 volt8_moe_shape *shape, volt8_moe_dims *dims) {
  volt8_status status = volt8_load_options_read(ctx, options, read);
  if (status == VOLT8_OK) status = volt8_checkpoint_open(ctx, read, checkpoint);
  if (status != VOLT8_OK) return status;
  status = volt8_expert_range_of(ctx, read, (*checkpoint)->num_experts, range);
  if (status != VOLT8_OK) return status;
  int32_t block_n = (*checkpoint)->route == VOLT8_ROUTE_NATIVE ? VOLT8_CHECKPOINT_BLOCK : read->online_block_n;
  status = volt8_shard_plan(ctx, (*checkpoint)->intermediate, read->tp_size, read->tp_rank, (*checkpoint)->route, block_n,
                            shard);
  if (status != VOLT8_OK) return status;
  volt8_expert_range_shape(shard, range, (*checkpoint)->hidden, (*checkpoint)->num_experts, shape);
  return volt8_moe_dims_compute(ctx, shape, dims);
}

volt8_status volt8_experts_load(volt8_ctx *ctx, const volt8_load_options *options, volt8_experts **out_experts) {
  if (!ctx || !out_experts)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_experts_load: ctx or out_experts is NULL");
  *out_experts = NULL;
  volt8_status status = volt8_ctx_require_device(ctx);
  if (status != VOLT8_OK) return status;
  volt8_load_options read;
  volt8_checkpoint *checkpoint = NULL;
  volt8_shard shard;
  volt8_moe_shape shape;
  volt8_moe_dims dims;
  volt8_expert_range range;
  staging_sink staging = {0};
  volt8_load_report report = VOLT8_LOAD_REPORT_INIT;
  status = prepare_load(ctx, options, &read, &checkpoint, &shard, &range, &shape, &dims);
  if (status == VOLT8_OK) status = staging_sink_init(ctx, &dims, &staging);
  if (status == VOLT8_OK) status = volt8_experts_alloc(ctx, &shape, read.max_tokens, read.max_top_k, &staging.experts);
  volt8_experts *experts = staging.experts;
  volt8_expert_sink sink = {&staging, staging_place, device_commit};
  if (status == VOLT8_OK) status = volt8_checkpoint_run(ctx, checkpoint, &shard, &range, &sink, &report);
  report.staging_peak_bytes += staging.bytes;
  if (experts) report.workspace_bytes = (int64_t)volt8_experts_workspace_bytes(experts);
  staging_sink_release(&staging);
  volt8_checkpoint_close(checkpoint);
  if (status != VOLT8_OK) {
    volt8_experts_destroy(experts);
    return status;
  }
  volt8_copy_sized_output(read.report, &report, sizeof report);
  *out_experts = experts;
  return VOLT8_OK;
}

void volt8_host_checkpoint_free(volt8_host_checkpoint *checkpoint) {
  if (!checkpoint) return;
  volt8_checkpoint_free((void *)checkpoint->experts.w13);
  volt8_checkpoint_free((void *)checkpoint->experts.s13);
  volt8_checkpoint_free((void *)checkpoint->experts.w2);
  volt8_checkpoint_free((void *)checkpoint->experts.s2);
  volt8_checkpoint_free(checkpoint);
}

volt8_status volt8_checkpoint_load_host(volt8_ctx *ctx, const volt8_load_options *options,
                                        volt8_host_checkpoint **out_checkpoint) {
  if (!out_checkpoint) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_checkpoint_load_host: out_checkpoint is NULL");
  *out_checkpoint = NULL;
  volt8_load_options read;
  volt8_checkpoint *checkpoint = NULL;
  volt8_shard shard;
  host_sink sink_state;
  volt8_expert_range range;
  volt8_moe_shape shape;
  volt8_host_checkpoint *host = NULL;
  volt8_status status = prepare_load(ctx, options, &read, &checkpoint, &shard, &range, &shape, &sink_state.dims);
  if (status == VOLT8_OK && !(host = volt8_checkpoint_alloc(sizeof *host)))
    status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the host checkpoint");
  if (status == VOLT8_OK) {
    int64_t experts = range.count;
    host->size = sizeof *host;
    host->shape = shape;
    host->experts = (volt8_host_experts)VOLT8_HOST_EXPERTS_INIT;
    host->experts.w13 = sink_state.base.w13 = volt8_checkpoint_alloc((size_t)(sink_state.dims.w13_bytes_per_expert * experts));
    host->experts.s13 = sink_state.base.s13 = volt8_checkpoint_alloc((size_t)(sink_state.dims.s13_elems_per_expert * experts * 2));
    host->experts.w2 = sink_state.base.w2 = volt8_checkpoint_alloc((size_t)(sink_state.dims.w2_bytes_per_expert * experts));
    host->experts.s2 = sink_state.base.s2 = volt8_checkpoint_alloc((size_t)(sink_state.dims.s2_elems_per_expert * experts * 2));
    if (!host->experts.w13 || !host->experts.s13 || !host->experts.w2 || !host->experts.s2)
      status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for %lld experts in host memory", (long long)experts);
  }
  volt8_expert_sink sink = {&sink_state, host_place, NULL};
  if (status == VOLT8_OK) status = volt8_checkpoint_run(ctx, checkpoint, &shard, &range, &sink, &host->report);
  volt8_checkpoint_close(checkpoint);
  if (status != VOLT8_OK) {
    volt8_host_checkpoint_free(host);
    return status;
  }
  volt8_copy_sized_output(read.report, &host->report, sizeof host->report);
  *out_checkpoint = host;
  return VOLT8_OK;
}
