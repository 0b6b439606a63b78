/* One captured volt8 forward per input set (see bench_graphs.h). */
#include "bench_graphs.h"

#include <stdlib.h>

#include "tools/tools.h"

static volt8_moe_args forward_args(const bench_inputs *inputs, int32_t set_index) {
  const bench_input_set *set = &inputs->sets[set_index];
  volt8_moe_args args = VOLT8_MOE_ARGS_INIT;
  args.num_tokens = inputs->num_tokens;
  args.top_k = inputs->top_k;
  args.x = (const void *)set->d_x;
  args.topk_ids = (const int32_t *)set->d_ids;
  args.topk_weights = (const float *)set->d_weights;
  args.out = (void *)set->d_out;
  return args;
}

volt8_status bench_graph_set_capture(volt8_ctx *ctx, volt8_experts *experts, const bench_inputs *inputs, CUstream stream,
                                     bench_graph_set *out) {
  out->count = 0;
  out->graphs = calloc((size_t)inputs->count, sizeof(volt8_graph *));
  if (!out->graphs) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench: out of memory for %d graphs", inputs->count);
  volt8_status status = VOLT8_OK;
  for (int32_t s = 0; s < inputs->count && status == VOLT8_OK; s++) {
    volt8_moe_args args = forward_args(inputs, s);
    status = volt8_graph_capture(experts, &args, stream, &out->graphs[s]);
    if (status == VOLT8_OK) out->count++;
  }
  return status;
}

volt8_status bench_graph_set_launch(void *user, int32_t set, CUstream stream) {
  bench_graph_set *graphs = user;
  return volt8_graph_launch(graphs->graphs[set], stream);
}

void bench_graph_set_destroy(bench_graph_set *graphs) {
  for (int32_t s = 0; s < graphs->count; s++) volt8_graph_destroy(graphs->graphs[s]);
  free(graphs->graphs);
  graphs->graphs = NULL;
  graphs->count = 0;
}

static volt8_status capture_chain(volt8_ctx *ctx, volt8_experts *experts, const bench_inputs *inputs, int32_t first,
                                  int32_t chain, CUstream stream, CUgraphExec *out) {
  const volt8_cuda_driver *cuda = volt8_tools_ctx(ctx).cuda;
  volt8_status status = volt8_cuda_check(ctx, cuda->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                                         "bench --chain: ", "cuStreamBeginCapture");
  if (status != VOLT8_OK) return status;
  for (int32_t i = 0; i < chain && status == VOLT8_OK; i++) {
    volt8_moe_args args = forward_args(inputs, first + i);
    status = volt8_moe_forward(experts, &args, stream);
  }
  CUgraph graph = NULL;
  CUresult ended = cuda->cuStreamEndCapture(stream, &graph); /* always ended, so the stream is usable again */
  if (status == VOLT8_OK) status = volt8_cuda_check(ctx, ended, "bench --chain: ", "cuStreamEndCapture");
  if (status == VOLT8_OK)
    status = volt8_cuda_check(ctx, cuda->cuGraphInstantiate(out, graph, 0), "bench --chain: ", "cuGraphInstantiate");
  if (graph) cuda->cuGraphDestroy(graph);
  return status;
}

volt8_status bench_chain_set_capture(volt8_ctx *ctx, volt8_experts *experts, const bench_inputs *inputs, int32_t chain,
                                     CUstream stream, bench_chain_set *out) {
  *out = (bench_chain_set){ctx, NULL, 0, chain};
  if (chain < 1 || inputs->count < chain)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "bench --chain %d: only %d input sets", chain, inputs->count);
  int32_t graphs = inputs->count / chain;
  out->execs = calloc((size_t)graphs, sizeof *out->execs);
  if (!out->execs) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench: out of memory for %d graphs", graphs);
  volt8_status status = VOLT8_OK;
  for (int32_t g = 0; g < graphs && status == VOLT8_OK; g++) {
    status = capture_chain(ctx, experts, inputs, g * chain, chain, stream, &out->execs[g]);
    if (status == VOLT8_OK) out->count++;
  }
  return status;
}

volt8_status bench_chain_set_launch(void *user, int32_t set, CUstream stream) {
  const bench_chain_set *chains = user;
  return volt8_cuda_check(chains->ctx, volt8_tools_ctx(chains->ctx).cuda->cuGraphLaunch(chains->execs[set], stream),
                          "bench --chain: ", "cuGraphLaunch");
}

void bench_chain_set_destroy(bench_chain_set *chains) {
  for (int32_t g = 0; g < chains->count; g++) volt8_tools_ctx(chains->ctx).cuda->cuGraphExecDestroy(chains->execs[g]);
  free(chains->execs);
  chains->execs = NULL;
  chains->count = 0;
}
