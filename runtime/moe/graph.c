/* volt8_graph: one forward captured into an instantiated CUDA graph. */
#include "core/ctx_internal.h"
#include "moe/experts_internal.h"

#include <stdlib.h>

struct volt8_graph {
  volt8_ctx *ctx;
  CUgraph graph;
  CUgraphExec exec;
};

static volt8_status cuda_check(volt8_ctx *ctx, CUresult result, const char *what) {
  if (result == CUDA_SUCCESS) return VOLT8_OK;
  return volt8_fail(ctx, VOLT8_ERR_CUDA, "%s failed: %s", what, volt8_cuda_error_text(ctx->cuda, result));
}

volt8_status volt8_graph_capture(volt8_experts *experts, const volt8_moe_args *args, void *stream,
                                 volt8_graph **out_graph) {
  if (out_graph) *out_graph = NULL;
  if (!experts || !out_graph)
    return volt8_fail(experts ? volt8_experts_ctx(experts) : NULL, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_graph_capture: experts or out_graph is NULL");
  volt8_ctx *ctx = volt8_experts_ctx(experts);
  volt8_status status = volt8_ctx_require_device(ctx);
  if (status != VOLT8_OK) return status;
  const volt8_cuda_driver *cuda = ctx->cuda;
  volt8_graph *graph = calloc(1, sizeof *graph);
  if (!graph) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "volt8_graph_capture: out of memory");
  graph->ctx = ctx;
  /* The legacy default stream cannot be captured: capture on a private stream then. */
  CUstream capture_stream = (CUstream)stream, own_stream = NULL;
  if (!capture_stream) {
    status = cuda_check(ctx, cuda->cuStreamCreate(&own_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    capture_stream = own_stream;
  }
  if (status == VOLT8_OK)
    status = cuda_check(ctx, cuda->cuStreamBeginCapture(capture_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                        "cuStreamBeginCapture");
  if (status == VOLT8_OK) {
    volt8_status forward = volt8_moe_forward(experts, args, capture_stream);
    CUresult end = cuda->cuStreamEndCapture(capture_stream, &graph->graph);
    status = forward != VOLT8_OK ? forward : cuda_check(ctx, end, "cuStreamEndCapture");
  }
  if (status == VOLT8_OK)
    status = cuda_check(ctx, cuda->cuGraphInstantiate(&graph->exec, graph->graph, 0), "cuGraphInstantiate");
  if (own_stream) cuda->cuStreamDestroy(own_stream);
  if (status != VOLT8_OK) {
    volt8_graph_destroy(graph);
    return status;
  }
  *out_graph = graph;
  return VOLT8_OK;
}

volt8_status volt8_graph_launch(volt8_graph *graph, void *stream) {
  if (!graph) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_graph_launch: graph is NULL");
  volt8_status status = volt8_ctx_require_device(graph->ctx);
  if (status != VOLT8_OK) return status;
  return cuda_check(graph->ctx, graph->ctx->cuda->cuGraphLaunch(graph->exec, (CUstream)stream), "cuGraphLaunch");
}

void volt8_graph_destroy(volt8_graph *graph) {
  if (!graph) return;
  const volt8_cuda_driver *cuda = graph->ctx->cuda;
  if (graph->exec) cuda->cuGraphExecDestroy(graph->exec);
  if (graph->graph) cuda->cuGraphDestroy(graph->graph);
  free(graph);
}
