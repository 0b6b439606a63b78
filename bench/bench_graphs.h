/* One captured volt8 forward per input set, replayed in turn by the timer (bench and tuner). */
#ifndef VOLT8_BENCH_GRAPHS_H
#define VOLT8_BENCH_GRAPHS_H

#include "bench_problem.h"
#include "volt8.h"

typedef struct bench_graph_set {
  volt8_graph **graphs;
  int32_t count;
} bench_graph_set;

/* Captures a forward of every set of `inputs` on `stream`; on failure the graphs made so far stay
 * in `out` for bench_graph_set_destroy. */
volt8_status bench_graph_set_capture(volt8_ctx *ctx, volt8_experts *experts, const bench_inputs *inputs, CUstream stream,
                                     bench_graph_set *out);
/* A bench_launch_fn: replays set `set`'s graph. */
volt8_status bench_graph_set_launch(void *user, int32_t set, CUstream stream);
void bench_graph_set_destroy(bench_graph_set *graphs);

#endif
