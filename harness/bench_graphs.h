/* One captured volt8 forward per input set, replayed in turn by the timer (bench and tuner). */
#ifndef VOLT8_BENCH_GRAPHS_H
#define VOLT8_BENCH_GRAPHS_H

#include "bench_problem.h"
#include "tools/tools.h"
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

/* --chain: graphs of `chain` forwards each, forward i of graph g on input set g * chain + i, so every
 * forward of a replay has its own routing and finds its experts' weights cold, as the draft steps
 * of an engine's graph do. */
typedef struct bench_chain_set {
  volt8_ctx *ctx;
  CUgraphExec *execs;
  int32_t count, chain;
} bench_chain_set;

/* Captures inputs->count / chain graphs (at least one; inputs->count >= chain) on `stream`; on failure
 * those made so far stay in `out` for bench_chain_set_destroy. */
volt8_status bench_chain_set_capture(volt8_ctx *ctx, volt8_experts *experts, const bench_inputs *inputs, int32_t chain,
                                     CUstream stream, bench_chain_set *out);
/* A bench_launch_fn: replays chain `set`. */
volt8_status bench_chain_set_launch(void *user, int32_t set, CUstream stream);
void bench_chain_set_destroy(bench_chain_set *chains);

#endif
