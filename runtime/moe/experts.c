/* Resident experts: one device allocation per rank, the workspace, and the forward launches. */
#define VOLT8_EXPERIMENTAL_API 1 /* defines volt8_experts_set_variants */
#include "core/ctx_internal.h"
#include "dispatch/dispatch.h"
#include "moe/experts_internal.h"
#include "moe/forward_plan.h"
#include "jit/kernel_load.h"
#include "moe/moe_args.h"
#include "moe/kernels/catalogue.h"
#include "moe/kernels/kernel_params.h"
#include "moe/kernels/moe_layout.h"
#include "moe/replay.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>


typedef struct loaded_kernel {
  volt8_variant variant;
  char name[VOLT8_VARIANT_NAME_BYTES]; /* what a failed launch's message names */
  CUmodule module;
  CUfunction function;
} loaded_kernel;

/* What a forward's launches depend on besides the handle's constant state: its arguments (not
 * check_ids, which runs before any launch) and the handle's epoch. No padding: compared with memcmp. */
typedef struct replay_key {
  int32_t num_tokens, top_k;
  const void *x, *topk_ids, *topk_weights, *out;
  uint64_t epoch;
} replay_key;
_Static_assert(sizeof(replay_key) == 2 * sizeof(int32_t) + 4 * sizeof(void *) + sizeof(uint64_t),
               "replay_key has padding");

struct volt8_experts {
  volt8_ctx *ctx;
  volt8_moe_shape shape;
  volt8_moe_dims dims;
  int32_t max_tokens, max_top_k;
  int64_t routed_launches; /* the most launches a routed GEMM is cut into (moe_layout.h) */
  CUdeviceptr weights; /* w13 | s13 | w2 | s2 */
  CUdeviceptr w13, s13, w2, s2;
  size_t weight_bytes;
  /* sorted_pairs | items_gate_up | items_down | counters | h | z | arrivals | flags */
  CUdeviceptr workspace;
  CUdeviceptr sorted_pairs, items_gate_up, items_down, counters, h, z;
  /* (token, column tile) counters of a down that fuses the reduce, and the one-launch forward's
   * ticket and per-pair h counters: zero between forwards */
  CUdeviceptr arrivals, flags;
  /* counters[routed_launches]: where block_m 1 downs cut into several launches store bad-id counts */
  CUdeviceptr spare_counters;
  size_t workspace_bytes;
  loaded_kernel kernels[VOLT8_MAX_LOADED_KERNELS];
  int32_t kernel_count;
  /* what a forward runs: read by prepare (or the first forward), so that no later forward runs the
   * code generator or reads a tuning table to decide */
  volt8_forward_plan plan;
  /* Set while a forward records its launches instead of making them (volt8_moe_forward). */
  volt8_launch_record *recording;
  volt8_replay replay; /* the graphs of the eager forwards it replays (moe/replay.h) */
  /* Bumped by whatever changes the launches a forward makes for given arguments: a new workspace,
   * variants pinned by name. */
  uint64_t epoch;
  replay_key last_replayed; /* of the forward that left replay.last set */
};

static volt8_status cuda_check(volt8_ctx *ctx, CUresult result, const char *what) {
  return volt8_cuda_check(ctx, result, "", what);
}

static volt8_status allocate_weights(volt8_experts *experts) {
  volt8_ctx *ctx = experts->ctx;
  const volt8_moe_dims *dims = &experts->dims;
  int64_t num_experts = experts->shape.num_experts;
  size_t bytes[4] = {(size_t)(dims->w13_bytes_per_expert * num_experts),
                     (size_t)(dims->s13_elems_per_expert * num_experts * 2),
                     (size_t)(dims->w2_bytes_per_expert * num_experts),
                     (size_t)(dims->s2_elems_per_expert * num_experts * 2)};
  size_t total = 0;
  for (int i = 0; i < 4; i++) total += volt8_device_align(bytes[i]);
  volt8_status status = cuda_check(ctx, ctx->cuda->cuMemAlloc(&experts->weights, total), "cuMemAlloc(expert weights)");
  if (status != VOLT8_OK) return status;
  experts->weight_bytes = total;
  CUdeviceptr *targets[4] = {&experts->w13, &experts->s13, &experts->w2, &experts->s2};
  CUdeviceptr cursor = experts->weights;
  for (int i = 0; i < 4; i++) {
    *targets[i] = cursor;
    cursor += volt8_device_align(bytes[i]);
  }
  return VOLT8_OK;
}

volt8_status volt8_experts_upload_expert(volt8_experts *experts, int32_t expert, const uint8_t *w13,
                                         const uint16_t *s13, const uint8_t *w2, const uint16_t *s2) {
  volt8_ctx *ctx = experts->ctx;
  const volt8_moe_dims *dims = &experts->dims;
  if (expert < 0 || expert >= experts->shape.num_experts)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "expert %d outside 0..%d", expert, experts->shape.num_experts - 1);
  size_t bytes[4] = {(size_t)dims->w13_bytes_per_expert, (size_t)dims->s13_elems_per_expert * 2,
                     (size_t)dims->w2_bytes_per_expert, (size_t)dims->s2_elems_per_expert * 2};
  CUdeviceptr bases[4] = {experts->w13, experts->s13, experts->w2, experts->s2};
  const void *sources[4] = {w13, s13, w2, s2};
  volt8_status status = volt8_ctx_require_device(ctx);
  for (int i = 0; i < 4 && status == VOLT8_OK; i++)
    status = cuda_check(ctx, ctx->cuda->cuMemcpyHtoD(bases[i] + bytes[i] * (size_t)expert, sources[i], bytes[i]),
                        "cuMemcpyHtoD(expert weights)");
  return status;
}

size_t volt8_experts_resident_bytes(const volt8_experts *experts) { return experts->weight_bytes; }

/* The workspace for `plan` (moe_layout.h), replacing any the handle had; none on failure. */
static volt8_status allocate_workspace(volt8_experts *experts, const volt8_moe_workspace *plan) {
  volt8_ctx *ctx = experts->ctx;
  if (experts->workspace) {
    ctx->cuda->cuMemFree(experts->workspace);
    experts->workspace = 0;
    experts->workspace_bytes = 0;
  }
  CUresult result = ctx->cuda->cuMemAlloc(&experts->workspace, (size_t)plan->total_bytes);
  if (result != CUDA_SUCCESS) {
    experts->workspace = 0;
    size_t free_bytes = 0, total_bytes = 0;
    ctx->cuda->cuMemGetInfo(&free_bytes, &total_bytes);
    return volt8_fail(ctx, result == CUDA_ERROR_OUT_OF_MEMORY ? VOLT8_ERR_OUT_OF_MEMORY : VOLT8_ERR_CUDA,
                      "the forward workspace for max_tokens %d x max_top_k %d is %llu bytes (%.2f GiB); cuMemAlloc "
                      "failed: %s (%zu of %zu bytes free): lower max_tokens",
                      plan->max_tokens, plan->max_top_k, (unsigned long long)plan->total_bytes,
                      (double)plan->total_bytes / (1024.0 * 1024.0 * 1024.0), volt8_cuda_error_text(ctx->cuda, result),
                      free_bytes, total_bytes);
  }
  experts->epoch++;
  experts->workspace_bytes = (size_t)plan->total_bytes;
  experts->routed_launches = plan->routed_launches;
  CUdeviceptr *targets[VOLT8_WORKSPACE_REGIONS] = {&experts->sorted_pairs, &experts->items_gate_up,
                                                   &experts->items_down, &experts->counters, &experts->h,
                                                   &experts->z, &experts->arrivals, &experts->flags};
  CUdeviceptr cursor = experts->workspace;
  for (int i = 0; i < VOLT8_WORKSPACE_REGIONS; i++) {
    *targets[i] = cursor;
    cursor += volt8_device_align((size_t)plan->region_bytes[i]);
  }
  experts->spare_counters = experts->counters + (CUdeviceptr)plan->routed_launches * 16;
  /* Defined counters before any forward (volt8_experts_bad_id_count may be asked first), and the
   * arrivals and flags (the last regions) at zero, as every forward leaves them. */
  size_t zeroed = experts->workspace_bytes - (size_t)(experts->arrivals - experts->workspace);
  volt8_status status = cuda_check(ctx, ctx->cuda->cuMemsetD8Async(experts->counters, 0, 16, NULL), "cuMemsetD8Async(counters)");
  if (status == VOLT8_OK)
    status = cuda_check(ctx, ctx->cuda->cuMemsetD8Async(experts->arrivals, 0, zeroed, NULL), "cuMemsetD8Async(arrivals)");
  if (status == VOLT8_OK) status = cuda_check(ctx, ctx->cuda->cuStreamSynchronize(NULL), "cuStreamSynchronize");
  return status;
}

volt8_status volt8_experts_alloc(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t max_tokens, int32_t max_top_k,
                                 volt8_experts **out_experts) {
  *out_experts = NULL;
  volt8_moe_dims dims;
  volt8_status status = volt8_moe_dims_compute(ctx, shape, &dims);
  if (status != VOLT8_OK) return status;
  volt8_moe_workspace plan;
  status = volt8_moe_workspace_plan(ctx, shape, max_tokens, max_top_k, &plan);
  if (status != VOLT8_OK) return status;
  status = volt8_ctx_require_device(ctx);
  if (status != VOLT8_OK) return status;
  volt8_experts *experts = calloc(1, sizeof *experts);
  if (!experts) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the experts handle");
  experts->ctx = ctx;
  experts->shape = *shape;
  experts->dims = dims;
  experts->max_tokens = plan.max_tokens;
  experts->max_top_k = plan.max_top_k;
  volt8_forward_plan_init(&experts->plan, ctx, shape);
  status = allocate_weights(experts);
  if (status == VOLT8_OK) status = allocate_workspace(experts, &plan);
  if (status != VOLT8_OK) {
    volt8_experts_destroy(experts);
    return status;
  }
  *out_experts = experts;
  return VOLT8_OK;
}

volt8_status volt8_experts_create_from_host(volt8_ctx *ctx, const volt8_moe_shape *shape,
                                            const volt8_host_experts *host, int32_t max_tokens, int32_t max_top_k,
                                            volt8_experts **out_experts) {
  if (!ctx) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_experts_create_from_host: ctx is NULL");
  if (!shape || !host || !out_experts)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_experts_create_from_host: shape, host or out_experts is NULL");
  *out_experts = NULL;
  volt8_moe_shape read;
  volt8_status status = volt8_moe_shape_in(ctx, "volt8_experts_create_from_host", shape, &read);
  if (status != VOLT8_OK) return status;
  if (host->size != sizeof(volt8_host_experts))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_experts_create_from_host: host->size is %zu, expected %zu (use VOLT8_HOST_EXPERTS_INIT)",
                      host->size, sizeof(volt8_host_experts));
  if (!host->w13 || !host->s13 || !host->w2 || !host->s2)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_experts_create_from_host: host->%s is NULL",
                      !host->w13 ? "w13" : !host->s13 ? "s13" : !host->w2 ? "w2" : "s2");
  volt8_experts *experts = NULL;
  status = volt8_experts_alloc(ctx, &read, max_tokens, max_top_k, &experts);
  if (status != VOLT8_OK) return status;
  const volt8_moe_dims *dims = &experts->dims;
  /* The GEMMs count their sums in units of each block's scale (templates/moe_item_steps.cu): a zero,
   * infinite or NaN scale has no such unit. A checkpoint's load refuses those scales too. */
  const uint16_t *const tables[2] = {host->s13, host->s2};
  const int64_t counts[2] = {dims->s13_elems_per_expert * read.num_experts, dims->s2_elems_per_expert * read.num_experts};
  for (int t = 0; t < 2 && status == VOLT8_OK; t++)
    for (int64_t i = 0; i < counts[t]; i++) {
      uint16_t bits = tables[t][i];
      if ((bits & 0x7FFF) != 0 && (bits & 0x7C00) != 0x7C00) continue;
      int64_t per_expert = t ? dims->s2_elems_per_expert : dims->s13_elems_per_expert;
      status = volt8_fail(ctx, VOLT8_ERR_SCALE_RANGE,
                          "volt8_experts_create_from_host: %s of expert %lld holds the scale 0x%04X (%s) at element %lld: "
                          "scales must be finite and nonzero",
                          t ? "s2" : "s13", (long long)(i / per_expert), bits, (bits & 0x7FFF) == 0 ? "zero" : "not finite",
                          (long long)(i % per_expert));
      break;
    }
  for (int32_t e = 0; e < read.num_experts && status == VOLT8_OK; e++)
    status = volt8_experts_upload_expert(experts, e, host->w13 + dims->w13_bytes_per_expert * e,
                                         host->s13 + dims->s13_elems_per_expert * e,
                                         host->w2 + dims->w2_bytes_per_expert * e,
                                         host->s2 + dims->s2_elems_per_expert * e);
  if (status != VOLT8_OK) {
    volt8_experts_destroy(experts);
    return status;
  }
  *out_experts = experts;
  return VOLT8_OK;
}

void volt8_experts_destroy(volt8_experts *experts) {
  if (!experts) return;
  const volt8_cuda_driver *cuda = experts->ctx->cuda;
  cuda->cuCtxSetCurrent(experts->ctx->cu_context);
  volt8_replay_release(experts->ctx, &experts->replay); /* its graphs launch the modules' kernels */
  for (int32_t i = 0; i < experts->kernel_count; i++) cuda->cuModuleUnload(experts->kernels[i].module);
  if (experts->weights) cuda->cuMemFree(experts->weights);
  if (experts->workspace) cuda->cuMemFree(experts->workspace);
  volt8_forward_plan_release(&experts->plan);
  free(experts);
}

volt8_status volt8_experts_set_variants(volt8_experts *experts, const char *gate_up_variant, const char *down_variant) {
  if (!experts) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_experts_set_variants: experts is NULL");
  /* A new epoch only where what is pinned changed: an engine (or a test) that passes the same names,
   * or NULL again, before each forward keeps its graphs' repeats. */
  int changed = 0;
  volt8_status status = volt8_forward_plan_pin(&experts->plan, gate_up_variant, down_variant, &changed);
  if (changed) experts->epoch++;
  return status;
}

static const loaded_kernel *find_kernel(const volt8_experts *experts, const volt8_variant *variant) {
  for (int32_t i = 0; i < experts->kernel_count; i++)
    if (volt8_variant_equal(&experts->kernels[i].variant, variant)) return &experts->kernels[i];
  return NULL;
}

/* The support kernels as variants. */
static const volt8_variant ROUTE = {.kind = VOLT8_KIND_ROUTE, .op = VOLT8_OP_ROUTE};
static const volt8_variant ROUTE_PARTS = {.kind = VOLT8_KIND_ROUTE_PARTS, .op = VOLT8_OP_ROUTE_PARTS};
static const volt8_variant REDUCE = {.kind = VOLT8_KIND_REDUCE, .op = VOLT8_OP_REDUCE};
static const volt8_variant REDUCE_HALF = {.kind = VOLT8_KIND_REDUCE_HALF, .op = VOLT8_OP_REDUCE_HALF};

/* The reduce after `down`: a large-item down (tile, raw) stores FP16 z rows. */
static const volt8_variant *reduce_after(const volt8_variant *down) {
  return volt8_kind_large_items(down->kind) ? &REDUCE_HALF : &REDUCE;
}
static const volt8_variant SINGLE = {.kind = VOLT8_KIND_SINGLE, .op = VOLT8_OP_SINGLE};

/* Whether a forward's stream is capturing, asked of the driver only when something hangs on it (a
 * kernel not yet loaded, or the id check): a prepared forward makes no driver call but its launches. */
typedef struct capture_state {
  CUstream stream;
  int known, capturing;
} capture_state;

static volt8_status stream_capturing(volt8_ctx *ctx, capture_state *state, int *out_capturing) {
  if (!state->known) {
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    volt8_status status =
        cuda_check(ctx, ctx->cuda->cuStreamIsCapturing(state->stream, &capture), "cuStreamIsCapturing");
    if (status != VOLT8_OK) return status;
    state->capturing = capture != CU_STREAM_CAPTURE_STATUS_NONE;
    state->known = 1;
  }
  *out_capturing = state->capturing;
  return VOLT8_OK;
}

/* Generates one variant and loads it (volt8_kernel_load); refuses while capturing (capture NULL: no
 * stream, as in prepare). */
static volt8_status get_kernel(volt8_experts *experts, const volt8_variant *variant, capture_state *capture,
                               const loaded_kernel **out_kernel) {
  volt8_ctx *ctx = experts->ctx;
  const loaded_kernel *found = find_kernel(experts, variant);
  if (found) {
    *out_kernel = found;
    return VOLT8_OK;
  }
  char name[VOLT8_VARIANT_NAME_BYTES];
  volt8_variant_format(variant, name, sizeof name);
  int capturing = 0;
  volt8_status allowed = capture ? stream_capturing(ctx, capture, &capturing) : VOLT8_OK;
  if (allowed == VOLT8_OK) allowed = volt8_capture_allows_load(ctx, capturing, 0, name);
  if (allowed != VOLT8_OK) return allowed;
  if (experts->kernel_count == VOLT8_MAX_LOADED_KERNELS)
    return volt8_fail(ctx, VOLT8_ERR_INTERNAL, "more than %d kernel variants loaded for one experts handle",
                      VOLT8_MAX_LOADED_KERNELS);
  volt8_kernel_source source = {0};
  volt8_status status = volt8_catalogue_emit(ctx, &experts->shape, ctx->target_arch, variant, &source);
  if (status != VOLT8_OK) return status;
  loaded_kernel *slot = &experts->kernels[experts->kernel_count];
  const char *const entries[1] = {source.entry};
  volt8_kernel_load_request request = volt8_variant_load_request(ctx, &source, entries, 1);
  status = volt8_kernel_load(ctx, &request, &slot->module, &slot->function, NULL);
  if (status == VOLT8_OK) {
    slot->variant = *variant;
    snprintf(slot->name, sizeof slot->name, "%s", name);
    experts->kernel_count++;
    *out_kernel = slot;
  }
  volt8_kernel_source_free(&source);
  return status;
}

static volt8_status check_ids_on_host(volt8_experts *experts, const volt8_moe_args *args, CUstream stream) {
  volt8_ctx *ctx = experts->ctx;
  size_t bytes = (size_t)args->num_tokens * (size_t)args->top_k * sizeof(int32_t);
  int32_t *ids = malloc(bytes);
  if (!ids) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "volt8_moe_forward: out of memory for the id check");
  volt8_status status = cuda_check(ctx, ctx->cuda->cuMemcpyDtoHAsync(ids, (CUdeviceptr)args->topk_ids, bytes, stream),
                                   "cuMemcpyDtoHAsync(topk_ids)");
  if (status == VOLT8_OK) status = cuda_check(ctx, ctx->cuda->cuStreamSynchronize(stream), "cuStreamSynchronize");
  if (status == VOLT8_OK)
    status = volt8_moe_ids_check(ctx, ids, args->num_tokens, args->top_k, volt8_moe_global_experts(&experts->shape));
  free(ids);
  return status;
}

volt8_status volt8_experts_bad_id_count(volt8_experts *experts, int32_t *out_count) {
  if (!experts || !out_count)
    return volt8_fail(experts ? experts->ctx : NULL, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_experts_bad_id_count: experts or out_count is NULL");
  volt8_ctx *ctx = experts->ctx;
  volt8_status status = volt8_ctx_require_device(ctx);
  if (status != VOLT8_OK) return status;
  /* Only counters[2]: the others are stale or never written when no route ran (block_m 1 forwards). */
  int32_t count = 0;
  status = cuda_check(ctx, ctx->cuda->cuCtxSynchronize(), "cuCtxSynchronize");
  if (status == VOLT8_OK)
    status = cuda_check(ctx, ctx->cuda->cuMemcpyDtoH(&count, experts->counters + 2 * sizeof(int32_t), sizeof count),
                        "cuMemcpyDtoH(counters[2])");
  if (status == VOLT8_OK) *out_count = count;
  return status;
}

/* early: the kernel follows another of the same forward and may start before that one ends
 * (programmatic dependent launch, where ctx->early_launch); it waits for it itself. Its grid and block
 * are its kind's (moe/kernels/). */
static volt8_status launch(volt8_experts *experts, const loaded_kernel *kernel, const volt8_launch_counts *counts,
                           CUstream stream, void **params, int early) {
  volt8_ctx *ctx = experts->ctx;
  volt8_launch_size size = volt8_variant_launch_size(&kernel->variant, &experts->shape, counts);
  if (experts->recording) {
    experts->recording->routed |= kernel->variant.kind == VOLT8_KIND_ROUTE || kernel->variant.kind == VOLT8_KIND_ROUTE_PARTS;
    volt8_launch_record_add(experts->recording, kernel->function, kernel->name, size.grid_x, size.grid_y, size.threads,
                            early, volt8_variant_signature(&kernel->variant), params);
    return VOLT8_OK;
  }
  return cuda_check(ctx,
                    volt8_cuda_launch(ctx->cuda, kernel->function, size.grid_x, size.grid_y, size.threads,
                                      early && ctx->early_launch, stream, params),
                    kernel->name);
}

static volt8_status launch_single(volt8_experts *experts, const volt8_moe_args *args, const volt8_launch_counts *counts,
                                  capture_state *capture) {
  CUstream stream = capture->stream;
  const loaded_kernel *single;
  volt8_status status = get_kernel(experts, &SINGLE, capture, &single);
  if (status != VOLT8_OK) return status;
  volt8_single_args single_args = {
      .x = (CUdeviceptr)args->x, .w13 = experts->w13, .s13 = experts->s13, .w2 = experts->w2, .s2 = experts->s2,
      .topk_ids = (CUdeviceptr)args->topk_ids, .topk_weights = (CUdeviceptr)args->topk_weights,
      .num_tokens = args->num_tokens, .top_k = args->top_k, .h = experts->h, .z = experts->z,
      .out = (CUdeviceptr)args->out, .counters = experts->counters, .arrivals = experts->arrivals,
      .flags = experts->flags};
  void *params[VOLT8_MAX_KERNEL_PARAMS];
  volt8_kernel_params_fill(volt8_variant_signature(&single->variant), &single_args, params);
  return launch(experts, single, counts, stream, params, 0);
}

/* Rows (blockIdx.y values) each launch of `kernel` takes: block_m 1 GEMMs take whole tokens' pairs,
 * so that a launch's pointers can start at its first token; the token down takes tokens. */
static int rows_per_launch(const loaded_kernel *kernel, int top_k) {
  if (kernel->variant.kind == VOLT8_KIND_DOWN_TOK || kernel->variant.block_m != 1) return VOLT8_LAUNCH_ROWS;
  return VOLT8_LAUNCH_ROWS / top_k * top_k;
}

static int down_launches(const loaded_kernel *down, int num_tokens, int top_k) {
  int rows = rows_per_launch(down, top_k);
  int total = down->variant.kind == VOLT8_KIND_DOWN_TOK ? num_tokens : num_tokens * top_k;
  return (total + rows - 1) / rows;
}

/* Rows (blockIdx.y values) a GEMM's grid needs over num_pairs pairs: one a pair with block_m 1; for a
 * routed GEMM its most work items, ceil(num_pairs / block_m) plus one partial item an expert, never more
 * than the pairs (the route writes an item count for each launch of the pairs' rows; CTAs past the
 * count return at once). */
static int gemm_rows(const volt8_experts *experts, const loaded_kernel *kernel, int num_pairs) {
  int block_m = kernel->variant.block_m;
  if (block_m == 1) return num_pairs;
  int64_t items = ((int64_t)num_pairs + block_m - 1) / block_m + experts->shape.num_experts;
  return items < num_pairs ? (int)items : num_pairs;
}

/* What changes from one launch of a cut grid to the next (moe_layout.h): its part of the pairs (block_m
 * 1) or of the work items and their counters (routed), or of the tokens (the token down), and the
 * counts the launch covers. parts: how many launches the grid is cut into. */
typedef void (*launch_cut)(const volt8_experts *experts, const loaded_kernel *kernel, void *part,
                           volt8_launch_counts *part_counts, int first, int index, int count, int parts);

static void cut_gate_up(const volt8_experts *experts, const loaded_kernel *kernel, void *part_args,
                        volt8_launch_counts *part_counts, int first, int index, int count, int parts) {
  (void)parts;
  volt8_gate_up_args *part = part_args;
  part_counts->num_pairs = count;
  if (kernel->variant.block_m == 1) {
    part->activations += (CUdeviceptr)(first / part->top_k) * (CUdeviceptr)experts->shape.hidden * 2;
    part->topk_ids += (CUdeviceptr)first * 4;
    part->out += (CUdeviceptr)first * (CUdeviceptr)experts->shape.intermediate * 2;
    part->num_pairs = count;
  } else {
    part->items += (CUdeviceptr)first * 16;
    part->counters += (CUdeviceptr)index * 16;
  }
}

/* A block_m 1 down that fuses the reduce and takes several launches stores its bad-id counts in the
 * spare counters (the route counts them). */
static void cut_down(const volt8_experts *experts, const loaded_kernel *kernel, void *part_args,
                     volt8_launch_counts *part_counts, int first, int index, int count, int parts) {
  volt8_down_args *part = part_args;
  part_counts->num_pairs = count;
  if (kernel->variant.block_m == 1) {
    unsigned columns = (unsigned)((experts->shape.hidden + kernel->variant.block_n - 1) / kernel->variant.block_n);
    CUdeviceptr token = (CUdeviceptr)(first / part->top_k);
    part->activations += (CUdeviceptr)first * (CUdeviceptr)experts->shape.intermediate * 2;
    part->topk_weights += (CUdeviceptr)first * 4;
    part->out += (CUdeviceptr)first * (CUdeviceptr)experts->shape.hidden * 4;
    part->topk_ids += (CUdeviceptr)first * 4;
    part->num_pairs = count;
    part->reduced += token * (CUdeviceptr)experts->shape.hidden * 2;
    part->arrivals += token * columns * 4;
    if (parts > 1 && kernel->variant.fused_reduce) part->counters = experts->spare_counters;
  } else {
    part->items += (CUdeviceptr)first * 16;
    part->counters += (CUdeviceptr)index * 16;
  }
}

/* The token down: whole tokens; with several launches its bad-id counts go to the spare counters (the
 * route counts them). */
static void cut_down_token(const volt8_experts *experts, const loaded_kernel *kernel, void *part_args,
                           volt8_launch_counts *part_counts, int first, int index, int count, int parts) {
  (void)kernel, (void)index;
  volt8_down_token_args *part = part_args;
  CUdeviceptr first_pair = (CUdeviceptr)first * (CUdeviceptr)part->top_k;
  part->h += first_pair * (CUdeviceptr)experts->shape.intermediate * 2;
  part->topk_weights += first_pair * 4;
  part->topk_ids += first_pair * 4;
  part->out += (CUdeviceptr)first * (CUdeviceptr)experts->shape.hidden * 2;
  part->num_tokens = count;
  part_counts->num_tokens = count;
  if (parts > 1) part->counters = experts->spare_counters;
}

/* A grid of `total` rows in launches of rows_per_launch rows, each launch's arguments cut from args. */
static volt8_status launch_in_parts(volt8_experts *experts, const loaded_kernel *kernel, const void *args,
                                    size_t args_size, launch_cut cut, const volt8_launch_counts *counts, int total,
                                    int top_k, int early, CUstream stream) {
  int rows = rows_per_launch(kernel, top_k);
  int parts = (total + rows - 1) / rows;
  volt8_status status = VOLT8_OK;
  for (int first = 0, index = 0; first < total && status == VOLT8_OK; first += rows, index++) {
    union {
      volt8_gate_up_args gate_up;
      volt8_down_args down;
      volt8_down_token_args down_token;
    } part;
    memcpy(&part, args, args_size);
    volt8_launch_counts part_counts = *counts;
    cut(experts, kernel, &part, &part_counts, first, index, total - first < rows ? total - first : rows, parts);
    void *params[VOLT8_MAX_KERNEL_PARAMS];
    volt8_kernel_params_fill(volt8_variant_signature(&kernel->variant), &part, params);
    status = launch(experts, kernel, &part_counts, stream, params, early);
  }
  return status;
}

/* The route of a forward's pairs: one CTA (and the CTAs that warm L2), or, past
 * VOLT8_ROUTE_PARTS_MIN_PAIRS pairs, route_parts' three passes over ranges of the pairs, their counts at
 * the start of z (moe_layout.h), which holds num_pairs rows of hidden floats and so always more. */
static volt8_status launch_route(volt8_experts *experts, const volt8_route_args *args, const volt8_launch_counts *counts,
                                 capture_state *capture) {
  const loaded_kernel *kernel;
  volt8_status status;
  int32_t parts = experts->ctx->route_parts ? volt8_route_part_count(args->num_pairs) : 0;
  if (parts > 0 && volt8_route_part_bytes(parts, experts->shape.num_experts) <=
                       (int64_t)args->num_pairs * experts->shape.hidden * 4) {
    if ((status = get_kernel(experts, &ROUTE_PARTS, capture, &kernel)) != VOLT8_OK) return status;
    volt8_route_parts_args parts_args = {
        .topk_ids = args->topk_ids, .num_pairs = args->num_pairs, .bm_gate_up = args->bm_gate_up,
        .bm_down = args->bm_down, .sorted_pairs = args->sorted_pairs, .items_gate_up = args->items_gate_up,
        .items_down = args->items_down, .counters = args->counters, .part_counts = experts->z, .parts = parts,
        .top_k = args->top_k, .out = args->out};
    for (int32_t pass = 0; pass < 3 && status == VOLT8_OK; pass++) {
      void *params[VOLT8_MAX_KERNEL_PARAMS];
      volt8_launch_counts pass_counts = *counts;
      pass_counts.route_parts = parts;
      pass_counts.route_pass = parts_args.pass = pass;
      volt8_kernel_params_fill(volt8_variant_signature(&kernel->variant), &parts_args, params);
      status = launch(experts, kernel, &pass_counts, capture->stream, params, 0);
    }
    return status;
  }
  if ((status = get_kernel(experts, &ROUTE, capture, &kernel)) != VOLT8_OK) return status;
  void *params[VOLT8_MAX_KERNEL_PARAMS];
  volt8_kernel_params_fill(volt8_variant_signature(&kernel->variant), (void *)args, params);
  return launch(experts, kernel, counts, capture->stream, params, 0);
}

/* The kernels of a forward that is not one launch: route (when a GEMM is routed, or a down that
 * counts bad ids is cut into launches), gate_up, down, and the reduce (unless the down forms out
 * itself). */
static volt8_status launch_kernels(volt8_experts *experts, const volt8_moe_args *args, const volt8_forward_kernels *runs,
                                   const volt8_launch_counts *counts, capture_state *capture) {
  CUstream stream = capture->stream;
  const loaded_kernel *gate_up, *down, *reduce;
  volt8_status status;
  if ((status = get_kernel(experts, &runs->choice.gate_up, capture, &gate_up)) != VOLT8_OK ||
      (status = get_kernel(experts, &runs->choice.down, capture, &down)) != VOLT8_OK ||
      (status = get_kernel(experts, reduce_after(&runs->choice.down), capture, &reduce)) != VOLT8_OK)
    return status;
  int num_pairs = counts->num_pairs, num_tokens = args->num_tokens, top_k = args->top_k;
  /* A token-fused down reads its pairs from topk_ids and does the reduce's work itself. */
  int token_down = down->variant.kind == VOLT8_KIND_DOWN_TOK;
  CUdeviceptr x = (CUdeviceptr)args->x, ids = (CUdeviceptr)args->topk_ids;
  CUdeviceptr weights = (CUdeviceptr)args->topk_weights, out = (CUdeviceptr)args->out;
  /* The route writes the zeros of tokens with no live id only for a down that fuses the reduce. */
  CUdeviceptr route_out = down->variant.fused_reduce ? out : 0;
  volt8_route_args route_args = {
      .topk_ids = ids, .num_pairs = num_pairs, .bm_gate_up = gate_up->variant.block_m,
      .bm_down = down->variant.block_m, .sorted_pairs = experts->sorted_pairs, .items_gate_up = experts->items_gate_up,
      .items_down = experts->items_down, .counters = experts->counters, .gate_up_weights = experts->w13,
      .warm_bytes = experts->ctx->l2_warm_bytes, .top_k = top_k, .out = route_out};
  volt8_gate_up_args gate_up_args = {
      .activations = x, .weights = experts->w13, .scales = experts->s13, .sorted_pairs = experts->sorted_pairs,
      .items = experts->items_gate_up, .counters = experts->counters, .top_k = top_k, .out = experts->h,
      .topk_ids = ids, .num_pairs = num_pairs};
  volt8_down_args down_args = {
      .activations = experts->h, .weights = experts->w2, .scales = experts->s2, .sorted_pairs = experts->sorted_pairs,
      .items = experts->items_down, .counters = experts->counters, .topk_weights = weights, .out = experts->z,
      .topk_ids = ids, .num_pairs = num_pairs, .top_k = top_k, .reduced = out, .arrivals = experts->arrivals};
  volt8_down_token_args down_token_args = {
      .h = experts->h, .weights = experts->w2, .scales = experts->s2, .topk_weights = weights, .topk_ids = ids,
      .num_tokens = num_tokens, .top_k = top_k, .out = out, .counters = experts->counters};
  volt8_reduce_args reduce_args = {.z = experts->z, .topk_ids = ids, .num_tokens = num_tokens, .top_k = top_k,
                                   .out = out, .counters = experts->counters};
  void *reduce_params[VOLT8_MAX_KERNEL_PARAMS];
  volt8_kernel_params_fill(volt8_variant_signature(&reduce->variant), &reduce_args, reduce_params);
  /* block_m == 1 kernels take their pair from topk_ids directly; the reduce (or the down that forms
   * out) counts bad ids. A fused down cut into several launches cannot count them all, so the route
   * does (moe_layout.h). */
  int down_counts_in_parts = (token_down || (down->variant.fused_reduce && down->variant.block_m == 1)) &&
                             down_launches(down, num_tokens, top_k) > 1;
  int needs_route = gate_up->variant.block_m != 1 || down->variant.block_m != 1 || down_counts_in_parts;
  /* The forward's first kernel waits for the caller's work as usual. Without a route pass (few
   * tokens, where launch latency is most of the time) down and the reduce may start early; in a
   * routed forward only an hmma down does (templates/moe_gemm_hmma.cu: it reads the route's items,
   * written before its gate_up started, and requests its first weights while gate_up finishes), and
   * the other routed kernels run one after the other and carry no waits (templates/moe_common.cu). */
  int early = !needs_route;
  int early_down = early || down->variant.kind == VOLT8_KIND_GEMM_HMMA;
  if ((needs_route && (status = launch_route(experts, &route_args, counts, capture)) != VOLT8_OK) ||
      (status = launch_in_parts(experts, gate_up, &gate_up_args, sizeof gate_up_args, cut_gate_up, counts,
                                gemm_rows(experts, gate_up, num_pairs), top_k, 0, stream)) != VOLT8_OK)
    return status;
  if (token_down)
    return launch_in_parts(experts, down, &down_token_args, sizeof down_token_args, cut_down_token, counts, num_tokens,
                           top_k, early, stream);
  if ((status = launch_in_parts(experts, down, &down_args, sizeof down_args, cut_down, counts,
                                gemm_rows(experts, down, num_pairs), top_k, early_down, stream)) != VOLT8_OK)
    return status;
  if (down->variant.fused_reduce) return VOLT8_OK; /* its CTAs formed out themselves */
  return launch(experts, reduce, counts, stream, reduce_params, early);
}

static replay_key replay_key_of(const volt8_experts *experts, const volt8_moe_args *args) {
  return (replay_key){args->num_tokens, args->top_k, args->x, args->topk_ids, args->topk_weights, args->out,
                      experts->epoch};
}

volt8_status volt8_moe_forward(volt8_experts *experts, const volt8_moe_args *args, void *stream) {
  if (!experts) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_moe_forward: experts is NULL");
  volt8_ctx *ctx = experts->ctx;
  volt8_moe_limits limits = {volt8_moe_global_experts(&experts->shape), experts->max_tokens, experts->max_top_k};
  volt8_status status = volt8_moe_args_check(ctx, &limits, args);
  if (status == VOLT8_OK) status = volt8_ctx_require_device(ctx);
  if (status != VOLT8_OK) return status;
  capture_state capture = {(CUstream)stream, 0, 0};
  if (args->size > offsetof(volt8_moe_args, check_ids) && args->check_ids) {
    int capturing = 0;
    if ((status = stream_capturing(ctx, &capture, &capturing)) != VOLT8_OK) return status;
    if (capturing)
      return volt8_fail(ctx, VOLT8_ERR_CAPTURE, "volt8_moe_forward: check_ids synchronises and cannot run while capturing");
    if ((status = check_ids_on_host(experts, args, capture.stream)) != VOLT8_OK) return status;
  }
  /* The same key as the forward that left replay.last set: the same kernels, grids and values, so that
   * graph is launched as it is (volt8_replay_again). */
  replay_key key = replay_key_of(experts, args);
  if (ctx->eager_replay && experts->replay.last && memcmp(&key, &experts->last_replayed, sizeof key) == 0) {
    int capturing = 0;
    if ((status = stream_capturing(ctx, &capture, &capturing)) != VOLT8_OK) return status;
    if (!capturing) return volt8_replay_again(ctx, &experts->replay, capture.stream);
  }
  experts->replay.last = NULL; /* set again below where this forward launches a graph */
  volt8_forward_kernels runs;
  status = volt8_forward_plan_choose(&experts->plan, args->num_tokens, args->top_k, &runs);
  if (status != VOLT8_OK) return status;
  /* CTAs past the route's first warm L2 with the first experts' gate_up weights (moe_route.cu). */
  int32_t warm_ctas = ctx->l2_warm_bytes > 0 && ctx->sm_count > 1 ? ctx->sm_count / 2 : 0;
  volt8_launch_counts counts = {.num_tokens = args->num_tokens, .num_pairs = args->num_tokens * args->top_k,
                                .warm_ctas = warm_ctas, .sm_count = ctx->sm_count,
                                .ctas_per_sm = ctx->single_ctas_per_sm};
  if (runs.single) return launch_single(experts, args, &counts, &capture);
  int capturing = 0;
  if (!ctx->eager_replay || (status = stream_capturing(ctx, &capture, &capturing)) != VOLT8_OK || capturing)
    return status != VOLT8_OK ? status : launch_kernels(experts, args, &runs, &counts, &capture);
  /* An eager forward: its launches recorded, then made from a graph where moe/replay.h replays them. */
  volt8_launch_record record;
  record.count = record.overflow = record.routed = 0;
  experts->recording = &record;
  status = launch_kernels(experts, args, &runs, &counts, &capture);
  experts->recording = NULL;
  if (status != VOLT8_OK) return status;
  if (record.overflow) return launch_kernels(experts, args, &runs, &counts, &capture); /* too many to record */
  status = volt8_replay_forward(ctx, &experts->replay, &record, capture.stream);
  if (status == VOLT8_OK && experts->replay.last) experts->last_replayed = key;
  return status;
}

volt8_status volt8_experts_fill_workspace(volt8_experts *experts, unsigned char byte, void *stream) {
  volt8_ctx *ctx = experts->ctx;
  /* The arrival counters and flags, the workspace's last regions, are kept at zero, as forwards leave them. */
  size_t poisoned = (size_t)(experts->arrivals - experts->workspace);
  volt8_status status =
      cuda_check(ctx, ctx->cuda->cuMemsetD8Async(experts->workspace, byte, poisoned, (CUstream)stream),
                 "cuMemsetD8Async(workspace)");
  if (status == VOLT8_OK)
    status = cuda_check(ctx,
                        ctx->cuda->cuMemsetD8Async(experts->arrivals, 0, experts->workspace_bytes - poisoned,
                                                   (CUstream)stream),
                        "cuMemsetD8Async(arrivals)");
  return status;
}

volt8_ctx *volt8_experts_ctx(const volt8_experts *experts) { return experts->ctx; }
void volt8_experts_replay_counts(const volt8_experts *experts, int64_t *out_captures, int64_t *out_replays,
                                 int64_t *out_repeats) {
  *out_captures = experts->replay.captures;
  *out_replays = experts->replay.replays;
  *out_repeats = experts->replay.repeats;
}
const volt8_moe_shape *volt8_experts_resident_shape(const volt8_experts *experts) { return &experts->shape; }
volt8_forward_plan *volt8_experts_plan(volt8_experts *experts) { return &experts->plan; }

volt8_status volt8_experts_shape(const volt8_experts *experts, volt8_moe_shape *out_shape) {
  if (!experts || !out_shape || out_shape->size < sizeof(size_t))
    return volt8_fail(experts ? experts->ctx : NULL, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_experts_shape: experts or out_shape is NULL, or out_shape->size unset (VOLT8_MOE_SHAPE_INIT)");
  volt8_copy_sized_output(out_shape, &experts->shape, sizeof experts->shape);
  return VOLT8_OK;
}
size_t volt8_experts_workspace_bytes(const volt8_experts *experts) { return experts->workspace_bytes; }

volt8_status volt8_experts_prepare(volt8_experts *experts, const int32_t *m_values, int32_t count) {
  if (!experts) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_experts_prepare: experts is NULL");
  volt8_ctx *ctx = experts->ctx;
  if ((!m_values && count != 0) || count < 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_experts_prepare: m_values is NULL or count %d < 0", count);
  int32_t largest = experts->max_tokens;
  for (int32_t i = 0; i < count; i++) {
    if (m_values[i] <= 0)
      return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_experts_prepare: m_values[%d] = %d must be positive", i,
                        m_values[i]);
    if (m_values[i] > largest) largest = m_values[i];
  }
  volt8_moe_workspace plan;
  char reason[VOLT8_ERROR_MESSAGE_BYTES];
  volt8_status status = volt8_moe_workspace_plan(ctx, &experts->shape, largest, experts->max_top_k, &plan);
  if (status != VOLT8_OK) {
    snprintf(reason, sizeof reason, "%s", volt8_last_error(ctx));
    return volt8_fail(ctx, status, "volt8_experts_prepare: m_values up to %d: %s", largest, reason);
  }
  status = volt8_ctx_require_device(ctx);
  if (status != VOLT8_OK) return status;
  if (largest > experts->max_tokens) {
    volt8_moe_workspace previous;
    status = volt8_moe_workspace_plan(ctx, &experts->shape, experts->max_tokens, experts->max_top_k, &previous);
    if (status == VOLT8_OK) status = allocate_workspace(experts, &plan);
    if (status != VOLT8_OK) {
      snprintf(reason, sizeof reason, "%s", volt8_last_error(ctx));
      volt8_status retry = allocate_workspace(experts, &previous);
      if (retry != VOLT8_OK) return retry;
      return volt8_fail(ctx, status, "volt8_experts_prepare: %s", reason);
    }
    experts->max_tokens = largest;
  }
  const loaded_kernel *kernel;
  if ((status = volt8_forward_plan_read(&experts->plan)) != VOLT8_OK ||
      (status = get_kernel(experts, &ROUTE, NULL, &kernel)) != VOLT8_OK ||
      (status = get_kernel(experts, &REDUCE, NULL, &kernel)) != VOLT8_OK)
    return status;
  /* The route of many pairs, where a prepared token count reaches it. */
  for (int32_t i = 0; i < count; i++)
    if (ctx->route_parts && volt8_route_part_count((int64_t)m_values[i] * experts->max_top_k) > 0 &&
        (status = get_kernel(experts, &ROUTE_PARTS, NULL, &kernel)) != VOLT8_OK)
      return status;
  for (int32_t i = 0; i < count; i++) {
    for (int32_t top_k = 1; top_k <= experts->max_top_k; top_k++) {
      volt8_forward_kernels runs;
      if ((status = volt8_forward_plan_choose(&experts->plan, m_values[i], top_k, &runs)) != VOLT8_OK) return status;
      if ((status = get_kernel(experts, &runs.choice.gate_up, NULL, &kernel)) != VOLT8_OK ||
          (status = get_kernel(experts, &runs.choice.down, NULL, &kernel)) != VOLT8_OK ||
          (status = get_kernel(experts, reduce_after(&runs.choice.down), NULL, &kernel)) != VOLT8_OK)
        return status;
      if (runs.single && (status = get_kernel(experts, &SINGLE, NULL, &kernel)) != VOLT8_OK) return status;
    }
  }
  return VOLT8_OK;
}
