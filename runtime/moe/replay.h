/* Eager forwards replayed from a graph. A forward of a few tokens is two or three kernel launches,
 * and on a host where each launch costs the driver about 4 us, those launches are most of an eager
 * call's time, while one graph launch of the same kernels costs about half of one kernel launch
 * (bench/RESULTS.md, "Host path"). So an experts handle keeps, for the few launch sequences it runs
 * eagerly without a route pass, an instantiated graph of them: a sequence seen for the second time
 * is captured once; from then on a forward with it sets the parameters of the nodes whose arguments
 * changed (new tensors) and launches the graph. The kernels, their grids and their arguments are
 * those the launches would have had, so the results are the same bits.
 *
 * The forward records its launches (moe/experts.c) instead of making them, then hands the record
 * here. */
#ifndef VOLT8_REPLAY_H
#define VOLT8_REPLAY_H

#include <stdint.h>

#include "core/ctx_internal.h"
#include "jit/kernel_signature.h"

#define VOLT8_REPLAY_MAX_NODES 4  /* launches of a recorded sequence */
#define VOLT8_REPLAY_SEQUENCES 8  /* sequences an experts handle keeps, the least recently used replaced */

/* One launch as the forward would make it: its kernel, grid and argument values. */
typedef struct volt8_recorded_launch {
  CUfunction function;
  const char *name; /* the variant's, for an error message */
  unsigned grid_x, grid_y, threads;
  int early; /* may start before the launch before it ends (programmatic dependent launch) */
  int param_count;
  uint16_t offsets[VOLT8_MAX_KERNEL_PARAMS]; /* of each parameter's value in values */
  uint8_t sizes[VOLT8_MAX_KERNEL_PARAMS];    /* its bytes */
  size_t bytes;
  unsigned char values[VOLT8_MAX_KERNEL_PARAMS * 8];
} volt8_recorded_launch;

typedef struct volt8_launch_record {
  int count;
  int overflow; /* more launches than VOLT8_REPLAY_MAX_NODES: none of them recorded past the last */
  int routed;   /* a route pass is among them: the sequence is not replayed */
  volt8_recorded_launch launches[VOLT8_REPLAY_MAX_NODES];
} volt8_launch_record;

typedef struct volt8_replay_sequence {
  int state; /* 0: free, 1: seen once, 2: captured (graph and exec set) */
  uint64_t last_use;
  volt8_launch_record launches; /* the argument values the graph's nodes hold */
  CUgraph graph;
  CUgraphExec exec;
  CUgraphNode nodes[VOLT8_REPLAY_MAX_NODES]; /* nodes[i] runs launches.launches[i] */
} volt8_replay_sequence;

typedef struct volt8_replay {
  volt8_replay_sequence sequences[VOLT8_REPLAY_SEQUENCES];
  uint64_t clock;
  CUstream capture_stream; /* private, made at the first capture */
  int broken;              /* a capture failed: this handle launches directly from then on */
  /* The sequence the last forward launched from its graph, its nodes holding that forward's values;
   * NULL when the last forward did not */
  volt8_replay_sequence *last;
  /* graphs made, forwards launched from one, and of those the ones launched again as they were
   * (volt8_replay_again; the GPU tests read them) */
  int64_t captures, replays, repeats;
} volt8_replay;

/* Appends one launch to `record` (values copied from params, whose sizes the signature gives). */
void volt8_launch_record_add(volt8_launch_record *record, CUfunction function, const char *name, unsigned grid_x,
                             unsigned grid_y, unsigned threads, int early, const volt8_kernel_signature *signature,
                             void *const *params);

/* The recorded launches, made on `stream` one after the other (early ones early where the ctx has
 * early launch). */
volt8_status volt8_launch_record_run(volt8_ctx *ctx, const volt8_launch_record *record, CUstream stream);

/* Runs the recorded launches on `stream` (not capturing): replayed from their sequence's graph when it
 * has one, captured into one when the sequence is seen for the second time, launched directly
 * otherwise (a routed or overflowing record, a first sighting, a handle whose capture failed). */
volt8_status volt8_replay_forward(volt8_ctx *ctx, volt8_replay *replay, const volt8_launch_record *record,
                                  CUstream stream);

/* Launches the graph of replay->last (not NULL) as it is, on `stream` (not capturing): for a forward
 * whose record would equal the last one's, so that it skips the choice, the record and the compare. */
volt8_status volt8_replay_again(volt8_ctx *ctx, volt8_replay *replay, CUstream stream);

/* Frees every graph and the private stream. */
void volt8_replay_release(volt8_ctx *ctx, volt8_replay *replay);

#endif
