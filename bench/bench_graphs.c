/* One captured volt8 forward per input set (see bench_graphs.h). */
#include "bench_graphs.h"

#include <stdlib.h>

#include "tools/tools.h"

volt8_status bench_graph_set_capture(volt8_ctx *ctx, volt8_experts *experts, const bench_inputs *inputs, CUstream stream,
                                     bench_graph_set *out) {
  out->count = 0;
  out->graphs = calloc((size_t)inputs->count, sizeof(volt8_graph *));
  if (!out->graphs) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench: out of memory for %d graphs", inputs->count);
  volt8_status status = VOLT8_OK;
  for (int32_t s = 0; s < inputs->count && status == VOLT8_OK; s++) {
    const bench_input_set *set = &inputs->sets[s];
    volt8_moe_args args = VOLT8_MOE_ARGS_INIT;
    args.num_tokens = inputs->num_tokens;
    args.top_k = inputs->top_k;
    args.x = (const void *)set->d_x;
    args.topk_ids = (const int32_t *)set->d_ids;
    args.topk_weights = (const float *)set->d_weights;
    args.out = (void *)set->d_out;
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
