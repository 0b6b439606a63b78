/* `volt8 tune`: options, and the run over shapes (measured on the GPU, or derived by the model). */
#ifndef VOLT8_TUNE_RUN_H
#define VOLT8_TUNE_RUN_H

#include <stddef.h>
#include <stdio.h>

#include "tools/tools.h"

#define TUNE_MAX_SHAPES 8

typedef struct tune_options {
  volt8_moe_shape shapes[TUNE_MAX_SHAPES];
  int32_t shape_count;
  int32_t top_k;
  int32_t m_values[VOLT8_TOOLS_MAX_M_VALUES];
  int32_t m_count;
  const char *out_dir;
  const char *target_arch;  /* NULL: the device's */
  int32_t device;
  uint64_t seed;
  int32_t input_sets;       /* 0: by the L2 size */
  int32_t warmup_batches, screen_batches, final_batches, finalists;
  int32_t prune_factor;     /* --prune: tuner_settings.prune_factor (0: off) */
  int32_t skip_pruned;      /* --skip-pruned: tuner_settings.skip_pruned (default 1) */
  int32_t keep_within;      /* --keep-within: percent, tuner_settings.keep_within (default 1) */
  int32_t resume;           /* --resume: tuner_settings.resume (default 0) */
  int32_t jobs;             /* compile threads; 0: one per processor, at most 16 */
  const char *derive_arch;  /* "sm_70": no GPU, the model of tuning/derive_model.h */
  const char *model_device; /* with derive_arch: derive_device_find's key; NULL: "v100" */
  const char *log_path;     /* NULL: none; else every measurement as JSON Lines (tuner.h) */
  char labels[TUNE_MAX_SHAPES][96]; /* each shape's name in the log ("" for --shape) */
} tune_options;

void tune_options_default(tune_options *options);
/* As bench_options_parse: 0, 1 for --help, -1 with `error` filled. */
int tune_options_parse(int argc, char **argv, tune_options *out, char *error, size_t error_size);
const char *tune_usage(void);

typedef struct tune_outcome {
  int32_t shapes_done;
  int32_t m_failed;         /* token counts with no passing candidate (see the progress output) */
} tune_outcome;

/* Tunes every shape and writes its two tables into options->out_dir. Progress and results go to
 * `progress` (tty: 1 for a self-updating bar). Errors: message in `error`; VOLT8_ERR_INVALID_ARGUMENT
 * for what the options ask that cannot be (an --out that is not a directory, a --log that is not a
 * regular file, a shape or top-k outside the derivation model's domain). */
volt8_status tune_run(const tune_options *options, const char *command, FILE *progress, int tty,
                      tune_outcome *out_outcome, char *error, size_t error_size);

#endif
