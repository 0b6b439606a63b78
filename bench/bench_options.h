/* Command-line options of `volt8 bench`. */
#ifndef VOLT8_BENCH_OPTIONS_H
#define VOLT8_BENCH_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "bench_report.h"
#include "tools/tools.h"
#include "volt8.h"

typedef struct bench_options {
  volt8_moe_shape shape;
  int32_t top_k;
  int32_t m_values[BENCH_MAX_M];
  int32_t m_count;
  uint64_t seed;
  int32_t input_sets;        /* 0: enough that the touched weights are 4x the L2 (within 4..64) */
  int32_t chain;             /* > 0: also time this many forwards captured in one graph, each on its
                              * own input set (so its own routing), reported per forward */
  int32_t warmup_batches, timed_batches;
  double spin_ms;
  int32_t copy_mib;          /* size of each copy buffer for the bandwidth measurement */
  int32_t device;
  const char *target_arch;   /* NULL: the device's */
  const char *gate_up, *down; /* pinned variants (NULL: dispatch) */
  int32_t baselines;         /* 1: run the cuBLAS baselines */
  int32_t threads;           /* host threads for drawing the problem and its reference (0: one a processor, at most 64) */
  const char *json_path, *svg_path, *markdown_path;
  char variant_storage[256]; /* --variants' text, split in place */
} bench_options;

/* The defaults: the reference model's default rank (tools/rank_args.h), M = 1..128. */
void bench_options_default(bench_options *options);
/* Parses argv[1..argc) (argv[0] is the command's name). Returns 0 on success, 1 when --help was
 * asked, -1 on a bad argument with `error` naming the flag, the text given and what would be valid. */
int bench_options_parse(int argc, char **argv, bench_options *out, char *error, size_t error_size);
/* The usage text of `volt8 bench`. */
const char *bench_usage(void);

#endif
