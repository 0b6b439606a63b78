/* Memory planning without a GPU: what a checkpoint's MTP experts take per rank, against FP16 and a
 * slice padded to whole 128 blocks; and the same report for experts already resident. */
#include "checkpoint/checkpoint.h"
#include "core/ctx_internal.h"
#include "moe/experts_internal.h"
#include "moe/kernels/moe_layout.h"
#include "checkpoint/shard.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* experts.c allocates each of w13, s13, w2, s2 at this alignment */
#define RESIDENT_ALIGN 256

const char *volt8_route_name(int32_t route) {
  switch (route) {
  case VOLT8_ROUTE_NATIVE: return "native";
  case VOLT8_ROUTE_ONLINE: return "online";
  default: return "unknown";
  }
}

static __int128 align_resident(__int128 bytes) { return (bytes + RESIDENT_ALIGN - 1) / RESIDENT_ALIGN * RESIDENT_ALIGN; }

static volt8_status memory_for_shape(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_memory_report *out) {
  volt8_moe_dims dims, padded_dims;
  volt8_status status = volt8_moe_dims_compute(ctx, shape, &dims);
  if (status != VOLT8_OK) return status;
  volt8_moe_shape padded = *shape;
  int64_t padded_intermediate =
      ((int64_t)shape->intermediate + VOLT8_CHECKPOINT_BLOCK - 1) / VOLT8_CHECKPOINT_BLOCK * VOLT8_CHECKPOINT_BLOCK;
  if (padded_intermediate > INT32_MAX)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "intermediate %d padded to whole 128 blocks overflows",
                      shape->intermediate);
  padded.intermediate = (int32_t)padded_intermediate;
  padded.intermediate_offset = 0;
  status = volt8_moe_dims_compute(ctx, &padded, &padded_dims);
  if (status != VOLT8_OK) return status;
  /* In 128 bits: a shape whose tensors each fit can still give totals past int64 (a forged plan). */
  __int128 experts = shape->num_experts;
  __int128 w13 = dims.w13_bytes_per_expert * experts, w2 = dims.w2_bytes_per_expert * experts;
  __int128 s13 = dims.s13_elems_per_expert * 2 * experts, s2 = dims.s2_elems_per_expert * 2 * experts;
  __int128 resident = align_resident(w13) + align_resident(s13) + align_resident(w2) + align_resident(s2);
  __int128 padded_bytes = (padded_dims.w13_bytes_per_expert + padded_dims.w2_bytes_per_expert +
                           2 * ((__int128)padded_dims.s13_elems_per_expert + padded_dims.s2_elems_per_expert)) * experts;
  if (2 * (w13 + w2) > INT64_MAX || resident > INT64_MAX || padded_bytes > INT64_MAX)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "%d experts of hidden %d x intermediate %d: byte counts overflow",
                      shape->num_experts, shape->hidden, shape->intermediate);
  volt8_memory_report report = VOLT8_MEMORY_REPORT_INIT;
  report.weight_bytes = (int64_t)(w13 + w2);
  report.scale_bytes = (int64_t)(s13 + s2);
  report.resident_bytes = (int64_t)resident;
  report.fp16_bytes = 2 * report.weight_bytes;
  report.padded_bytes = (int64_t)padded_bytes;
  *out = report;
  return VOLT8_OK;
}

volt8_status volt8_experts_memory(const volt8_experts *experts, volt8_memory_report *report) {
  if (!experts || !report || report->size < sizeof(size_t))
    return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_experts_memory: experts or report is NULL, or report->size unset (VOLT8_MEMORY_REPORT_INIT)");
  volt8_memory_report filled;
  volt8_status status = memory_for_shape(NULL, volt8_experts_resident_shape(experts), &filled);
  if (status != VOLT8_OK) return status;
  filled.resident_bytes = (int64_t)volt8_experts_resident_bytes(experts);
  filled.workspace_bytes = (int64_t)volt8_experts_workspace_bytes(experts);
  volt8_copy_sized_output(report, &filled, sizeof filled);
  return VOLT8_OK;
}

static void fill_plan(const volt8_checkpoint *checkpoint, const volt8_load_options *options,
                      const volt8_load_report *validation, volt8_plan_report *plan) {
  int native = checkpoint->route == VOLT8_ROUTE_NATIVE;
  plan->route = checkpoint->route;
  plan->hidden = checkpoint->hidden;
  plan->intermediate = checkpoint->intermediate;
  plan->num_experts = checkpoint->num_experts;
  plan->tp_size = options->tp_size;
  plan->block_n = native ? VOLT8_CHECKPOINT_BLOCK : options->online_block_n;
  plan->block_k = VOLT8_CHECKPOINT_BLOCK;
  snprintf(plan->quant_format, sizeof plan->quant_format, "%s", checkpoint->quant_format);
  snprintf(plan->scale_dtype, sizeof plan->scale_dtype, "%s", native ? volt8_st_dtype_name(checkpoint->scale_dtype) : "");
  snprintf(plan->tensor_prefix, sizeof plan->tensor_prefix, "%s", checkpoint->tensor_prefix);
  plan->scale_max_relative_error = validation->scale_max_relative_error;
  plan->max_tokens = options->max_tokens;
  plan->max_top_k = options->max_top_k;
}

/* memory->workspace_bytes for the plan's max_tokens x max_top_k; it stays 0 where the caller's plan
 * report is an older, shorter one, or holds max_tokens 0. */
static volt8_status plan_workspace(volt8_ctx *ctx, const volt8_plan_report *plan, const volt8_moe_shape *shape,
                                   volt8_memory_report *memory) {
  if (plan->size < offsetof(volt8_plan_report, max_top_k) + sizeof plan->max_top_k || plan->max_tokens == 0)
    return VOLT8_OK;
  volt8_moe_workspace workspace;
  volt8_status status = volt8_moe_workspace_plan(ctx, shape, plan->max_tokens, plan->max_top_k, &workspace);
  if (status == VOLT8_OK) memory->workspace_bytes = (int64_t)workspace.total_bytes;
  return status;
}

volt8_status volt8_plan(volt8_ctx *ctx, const volt8_load_options *options, volt8_plan_report *report) {
  if (!report || report->size < sizeof(size_t))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_plan: report is NULL or its size unset (VOLT8_PLAN_REPORT_INIT)");
  volt8_load_options read;
  volt8_checkpoint *checkpoint = NULL;
  volt8_status status = volt8_load_options_read(ctx, options, &read);
  if (status == VOLT8_OK) status = volt8_checkpoint_open(ctx, &read, &checkpoint);
  volt8_shard first_rank;
  if (status == VOLT8_OK) {
    int32_t block_n = checkpoint->route == VOLT8_ROUTE_NATIVE ? VOLT8_CHECKPOINT_BLOCK : read.online_block_n;
    status = volt8_shard_plan(ctx, checkpoint->intermediate, read.tp_size, 0, checkpoint->route, block_n, &first_rank);
  }
  volt8_load_report validation = VOLT8_LOAD_REPORT_INIT;
  volt8_plan_report filled = VOLT8_PLAN_REPORT_INIT;
  if (status == VOLT8_OK) {
    /* Workspace sizes a load would refuse fail here, before the experts are read. */
    fill_plan(checkpoint, &read, &validation, &filled);
    volt8_moe_shape shape;
    volt8_moe_workspace workspace;
    volt8_shard_shape(&first_rank, checkpoint->hidden, checkpoint->num_experts, &shape);
    status = volt8_moe_workspace_plan(ctx, &shape, read.max_tokens, read.max_top_k, &workspace);
  }
  if (status == VOLT8_OK) status = volt8_checkpoint_validate(ctx, checkpoint, &validation);
  if (status == VOLT8_OK) {
    filled.scale_max_relative_error = validation.scale_max_relative_error;
    volt8_copy_sized_output(report, &filled, sizeof filled);
    if (read.report) volt8_copy_sized_output(read.report, &validation, sizeof validation);
  }
  volt8_checkpoint_close(checkpoint);
  return status;
}

volt8_status volt8_plan_rank(volt8_ctx *ctx, const volt8_plan_report *plan, int32_t rank, volt8_moe_shape *shape,
                             volt8_memory_report *memory) {
  if (!plan || plan->size < offsetof(volt8_plan_report, quant_format) || plan->size > sizeof(volt8_plan_report))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_plan_rank: plan is %s; give the report volt8_plan filled (VOLT8_PLAN_REPORT_INIT)",
                      plan ? "of a size this library does not know" : "NULL");
  if (memory && (memory->size < sizeof(size_t) || memory->size > sizeof(volt8_memory_report)))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_plan_rank: memory->size is %zu; set it with VOLT8_MEMORY_REPORT_INIT (%zu)", memory->size,
                      sizeof(volt8_memory_report));
  if (shape) {
    volt8_status status = volt8_moe_shape_out_check(ctx, "volt8_plan_rank", shape);
    if (status != VOLT8_OK) return status;
  }
  volt8_shard shard;
  volt8_status status = volt8_shard_plan(ctx, plan->intermediate, plan->tp_size, rank, plan->route, plan->block_n, &shard);
  if (status != VOLT8_OK) return status;
  volt8_moe_shape rank_shape;
  volt8_shard_shape(&shard, plan->hidden, plan->num_experts, &rank_shape);
  if (memory) {
    volt8_memory_report filled;
    status = memory_for_shape(ctx, &rank_shape, &filled);
    if (status == VOLT8_OK) status = plan_workspace(ctx, plan, &rank_shape, &filled);
    if (status != VOLT8_OK) return status;
    volt8_copy_sized_output(memory, &filled, sizeof filled);
  }
  if (shape) *shape = rank_shape;
  return VOLT8_OK;
}
