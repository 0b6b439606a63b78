/* replay.h: eager forwards of a few tokens replayed from a graph. */
#include "moe/replay.h"

#include <string.h>

void volt8_launch_record_add(volt8_launch_record *record, CUfunction function, const char *name, unsigned grid_x,
                             unsigned grid_y, unsigned threads, int early, const volt8_kernel_signature *signature,
                             void *const *params) {
  if (record->count == VOLT8_REPLAY_MAX_NODES) {
    record->overflow = 1;
    return;
  }
  volt8_recorded_launch *launch = &record->launches[record->count++];
  launch->function = function;
  launch->name = name;
  launch->grid_x = grid_x;
  launch->grid_y = grid_y;
  launch->threads = threads;
  launch->early = early;
  launch->param_count = signature->count;
  memset(launch->values, 0, sizeof launch->values); /* the padding too: records are compared bytewise */
  size_t at = 0;
  for (int i = 0; i < signature->count; i++) {
    size_t bytes = signature->params[i].bytes;
    at = (at + bytes - 1) / bytes * bytes; /* each value aligned to its size (1, 4 or 8 bytes) */
    launch->offsets[i] = (uint16_t)at;
    launch->sizes[i] = (uint8_t)bytes;
    memcpy(launch->values + at, params[i], bytes);
    at += bytes;
  }
  launch->bytes = at;
}

/* params[i] = the address of launch's i-th value. */
static void launch_params(const volt8_recorded_launch *launch, void *params[VOLT8_MAX_KERNEL_PARAMS]) {
  for (int i = 0; i < launch->param_count; i++) params[i] = (void *)(launch->values + launch->offsets[i]);
}

static CUresult launch_one(const volt8_ctx *ctx, const volt8_recorded_launch *launch, CUstream stream) {
  void *params[VOLT8_MAX_KERNEL_PARAMS];
  launch_params(launch, params);
  return volt8_cuda_launch(ctx->cuda, launch->function, launch->grid_x, launch->grid_y, launch->threads,
                           launch->early && ctx->early_launch, stream, params);
}

volt8_status volt8_launch_record_run(volt8_ctx *ctx, const volt8_launch_record *record, CUstream stream) {
  for (int i = 0; i < record->count; i++) {
    CUresult result = launch_one(ctx, &record->launches[i], stream);
    if (result != CUDA_SUCCESS)
      return volt8_fail(ctx, VOLT8_ERR_CUDA, "%s failed: %s", record->launches[i].name,
                        volt8_cuda_error_text(ctx->cuda, result));
  }
  return VOLT8_OK;
}

/* Whether two records launch the same kernels on the same grids (their arguments may differ). */
static int same_launches(const volt8_launch_record *a, const volt8_launch_record *b) {
  if (a->count != b->count) return 0;
  for (int i = 0; i < a->count; i++) {
    const volt8_recorded_launch *x = &a->launches[i], *y = &b->launches[i];
    if (x->function != y->function || x->grid_x != y->grid_x || x->grid_y != y->grid_y || x->threads != y->threads ||
        x->early != y->early || x->param_count != y->param_count || x->bytes != y->bytes)
      return 0;
  }
  return 1;
}

static void drop_graph(const volt8_ctx *ctx, volt8_replay_sequence *sequence) {
  if (sequence->exec) ctx->cuda->cuGraphExecDestroy(sequence->exec);
  if (sequence->graph) ctx->cuda->cuGraphDestroy(sequence->graph);
  sequence->exec = NULL;
  sequence->graph = NULL;
}

/* Which node of the captured graph runs each recorded launch: the node of the same kernel, grid and
 * argument values (a kernel node's parameters as the capture stored them). */
static CUresult match_nodes(const volt8_ctx *ctx, volt8_replay_sequence *sequence) {
  const volt8_cuda_driver *cuda = ctx->cuda;
  const volt8_launch_record *record = &sequence->launches;
  CUgraphNode nodes[VOLT8_REPLAY_MAX_NODES + 1];
  size_t count = VOLT8_REPLAY_MAX_NODES + 1;
  CUresult result = cuda->cuGraphGetNodes(sequence->graph, nodes, &count);
  if (result != CUDA_SUCCESS) return result;
  if (count != (size_t)record->count) return CUDA_ERROR_NOT_SUPPORTED;
  int taken[VOLT8_REPLAY_MAX_NODES] = {0};
  for (int i = 0; i < record->count; i++) {
    const volt8_recorded_launch *launch = &record->launches[i];
    sequence->nodes[i] = NULL;
    for (size_t n = 0; n < count && !sequence->nodes[i]; n++) {
      if (taken[n]) continue;
      CUDA_KERNEL_NODE_PARAMS held;
      memset(&held, 0, sizeof held);
      if ((result = cuda->cuGraphKernelNodeGetParams(nodes[n], &held)) != CUDA_SUCCESS) return result;
      if (held.func != launch->function || held.gridDimX != launch->grid_x || held.gridDimY != launch->grid_y ||
          held.blockDimX != launch->threads || !held.kernelParams)
        continue;
      int same = 1;
      for (int p = 0; p < launch->param_count && same; p++)
        same = held.kernelParams[p] &&
               memcmp(held.kernelParams[p], launch->values + launch->offsets[p], launch->sizes[p]) == 0;
      if (!same) continue;
      taken[n] = 1;
      sequence->nodes[i] = nodes[n];
    }
    if (!sequence->nodes[i]) return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

/* Captures the record's launches into the sequence's graph on the handle's private stream. */
static CUresult capture(const volt8_ctx *ctx, volt8_replay *replay, volt8_replay_sequence *sequence) {
  const volt8_cuda_driver *cuda = ctx->cuda;
  CUresult result = CUDA_SUCCESS;
  if (!replay->capture_stream) result = cuda->cuStreamCreate(&replay->capture_stream, CU_STREAM_NON_BLOCKING);
  if (result == CUDA_SUCCESS) result = cuda->cuStreamBeginCapture(replay->capture_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (result != CUDA_SUCCESS) return result;
  for (int i = 0; i < sequence->launches.count && result == CUDA_SUCCESS; i++)
    result = launch_one(ctx, &sequence->launches.launches[i], replay->capture_stream);
  CUresult end = cuda->cuStreamEndCapture(replay->capture_stream, &sequence->graph);
  if (result == CUDA_SUCCESS) result = end;
  if (result == CUDA_SUCCESS) result = cuda->cuGraphInstantiate(&sequence->exec, sequence->graph, 0);
  if (result == CUDA_SUCCESS) result = match_nodes(ctx, sequence);
  if (result != CUDA_SUCCESS) drop_graph(ctx, sequence);
  return result;
}

/* Sets each node whose argument values differ from the record's, and keeps the new values. */
static CUresult update(const volt8_ctx *ctx, volt8_replay_sequence *sequence, const volt8_launch_record *record) {
  for (int i = 0; i < record->count; i++) {
    const volt8_recorded_launch *launch = &record->launches[i];
    volt8_recorded_launch *held = &sequence->launches.launches[i];
    if (memcmp(held->values, launch->values, launch->bytes) == 0) continue;
    void *params[VOLT8_MAX_KERNEL_PARAMS];
    launch_params(launch, params); /* the driver copies the values before returning */
    CUDA_KERNEL_NODE_PARAMS node;
    memset(&node, 0, sizeof node);
    node.func = launch->function;
    node.gridDimX = launch->grid_x;
    node.gridDimY = launch->grid_y;
    node.gridDimZ = 1;
    node.blockDimX = launch->threads;
    node.blockDimY = node.blockDimZ = 1;
    node.kernelParams = params;
    CUresult result = ctx->cuda->cuGraphExecKernelNodeSetParams(sequence->exec, sequence->nodes[i], &node);
    if (result != CUDA_SUCCESS) return result;
    memcpy(held->values, launch->values, launch->bytes);
  }
  return CUDA_SUCCESS;
}

/* Launches the graph of `sequence` (its nodes holding the forward's values) on `stream`: the sequence
 * becomes replay->last, or on failure nothing does. */
static volt8_status launch_graph(volt8_ctx *ctx, volt8_replay *replay, volt8_replay_sequence *sequence,
                                 CUstream stream) {
  CUresult result = ctx->cuda->cuGraphLaunch(sequence->exec, stream);
  if (result != CUDA_SUCCESS) {
    replay->last = NULL;
    return volt8_fail(ctx, VOLT8_ERR_CUDA, "cuGraphLaunch (the forward's %d launches, replayed) failed: %s",
                      sequence->launches.count, volt8_cuda_error_text(ctx->cuda, result));
  }
  replay->replays++;
  replay->last = sequence;
  return VOLT8_OK;
}

volt8_status volt8_replay_forward(volt8_ctx *ctx, volt8_replay *replay, const volt8_launch_record *record,
                                  CUstream stream) {
  const volt8_cuda_driver *cuda = ctx->cuda;
  replay->last = NULL;
  if (replay->broken || record->routed || record->overflow || record->count == 0 || !cuda->cuGraphGetNodes ||
      !cuda->cuGraphKernelNodeGetParams || !cuda->cuGraphExecKernelNodeSetParams)
    return volt8_launch_record_run(ctx, record, stream);
  replay->clock++;
  volt8_replay_sequence *sequence = NULL;
  for (int i = 0; i < VOLT8_REPLAY_SEQUENCES && !sequence; i++)
    if (replay->sequences[i].state && same_launches(&replay->sequences[i].launches, record))
      sequence = &replay->sequences[i];
  if (!sequence) { /* first seen: kept without a graph, so that a one-off token count never pays a capture */
    volt8_replay_sequence *slot = &replay->sequences[0]; /* a free one, else the least recently used */
    for (int i = 1; i < VOLT8_REPLAY_SEQUENCES && slot->state; i++)
      if (!replay->sequences[i].state || replay->sequences[i].last_use < slot->last_use) slot = &replay->sequences[i];
    drop_graph(ctx, slot);
    slot->state = 1;
    slot->last_use = replay->clock;
    slot->launches = *record;
    return volt8_launch_record_run(ctx, record, stream);
  }
  sequence->last_use = replay->clock;
  CUresult result = CUDA_SUCCESS;
  if (sequence->state == 1) {
    sequence->launches = *record;
    result = capture(ctx, replay, sequence);
    if (result != CUDA_SUCCESS) { /* launched directly from now on; the forward itself still runs */
      replay->broken = 1;
      sequence->state = 0;
      return volt8_launch_record_run(ctx, record, stream);
    }
    sequence->state = 2;
    replay->captures++;
  } else if ((result = update(ctx, sequence, record)) != CUDA_SUCCESS) {
    drop_graph(ctx, sequence);
    sequence->state = 0;
    replay->broken = 1;
    return volt8_launch_record_run(ctx, record, stream);
  }
  return launch_graph(ctx, replay, sequence, stream);
}

volt8_status volt8_replay_again(volt8_ctx *ctx, volt8_replay *replay, CUstream stream) {
  volt8_replay_sequence *sequence = replay->last;
  sequence->last_use = ++replay->clock;
  volt8_status status = launch_graph(ctx, replay, sequence, stream);
  if (status == VOLT8_OK) replay->repeats++;
  return status;
}

void volt8_replay_release(volt8_ctx *ctx, volt8_replay *replay) {
  for (int i = 0; i < VOLT8_REPLAY_SEQUENCES; i++) drop_graph(ctx, &replay->sequences[i]);
  if (replay->capture_stream) ctx->cuda->cuStreamDestroy(replay->capture_stream);
  memset(replay, 0, sizeof *replay);
}
