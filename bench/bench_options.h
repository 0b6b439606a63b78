/* Command-line options of `volt8 bench`, and the models' rank shapes that bench and tune share. */
#ifndef VOLT8_BENCH_OPTIONS_H
#define VOLT8_BENCH_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "bench_report.h"
#include "tools/tools.h"
#include "volt8.h"

#define BENCH_DEFAULT_TP 4

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
  int32_t threads;           /* host threads for the reference */
  const char *json_path, *svg_path, *markdown_path;
  char variant_storage[256]; /* --variants' text, split in place */
} bench_options;

/* Parses a shape text ("hidden=2560,intermediate=160,...") onto a shape; 0 on success. */
typedef int (*bench_shape_parser)(const char *text, volt8_moe_shape *shape);

void bench_options_default(bench_options *options);
/* The model named `name` (NULL: the reference model); NULL, with `error` listing the known names,
 * for a name the registry (runtime/checkpoint/models.h) does not hold. */
const volt8_model *bench_find_model(const char *name, char *error, size_t error_size);
/* The rank a TP size is benchmarked and tuned at when none is named: 1 (0 at TP1). */
int32_t bench_default_rank(int32_t tp);
/* Rank `rank` of `tp` of `model` (all its experts, 128x128 blocks; runtime/checkpoint/shard.h slices it).
 * 0 on success, -1 with `error` saying why for a tp that does not split the model's intermediate
 * into multiples of 16 or a rank outside [0, tp). */
int bench_model_shape(const volt8_model *model, int32_t tp, int32_t rank, volt8_moe_shape *out, char *error,
                      size_t error_size);
/* The reference model's rank: bench_model_shape of the "reference" model, without the message. */
int bench_reference_shape(int32_t tp, int32_t rank, volt8_moe_shape *out);
/* "1,2,4" into values (at most `capacity`, each in 1..VOLT8_MAX_ROUTED_PAIRS); the count, or -1. */
int32_t bench_parse_int_list(const char *text, int32_t *values, int32_t capacity);
/* Parses argv[1..argc) (argv[0] is the command's name). Returns 0 on success, 1 when --help was
 * asked, -1 on a bad argument with `error` saying which. `parse_shape` serves --shape (NULL: refused). */
int bench_options_parse(int argc, char **argv, bench_shape_parser parse_shape, bench_options *out, char *error,
                        size_t error_size);
/* The usage text of `volt8 bench`. */
const char *bench_usage(void);

#endif
