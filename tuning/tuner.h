/* The offline tuner's core: for each M, every candidate of one op is timed with the other op
 * held, the best few are timed again, and the winner goes into that op's table.
 *
 * Why ops one at a time and not pairs: gate_up and down are separate launches that share only h
 * (a few KiB to a few MiB, written by one and read by the next), so their times add and the best
 * pair is the best of each; coordinate search (gate_up with the dispatch's down, then down with the
 * winning gate_up) costs |G| + |D| forwards per M instead of |G| x |D|, and its last step times the
 * pair the table will actually serve.
 *
 * Where the times come from is a backend: the GPU (tuner_gpu.h), a model (derive_model.h), or a
 * fake in the tests. */
#ifndef VOLT8_TUNER_H
#define VOLT8_TUNER_H

#include <stdio.h>

#include "tools/tools.h"
#include "table_io.h"

typedef struct tuner_measurement {
  int32_t accepted;    /* 0: rejected, `reason` says why (wrong result, does not compile or launch) */
  double forward_us;   /* median forward, or the model's estimate */
  double relative_l2;  /* NaN when there is no check */
  char reason[512];
  /* In: a measured backend may stop timing a candidate whose first timed forward is slower than this
   * (INFINITY: time it in full). Out: 1 when it stopped so (not accepted; `reason` gives the times). */
  double limit_us;
  int32_t pruned;
  /* Out: the measurement's wall milliseconds (the tuner's clock); a measured backend's split of them
   * into the candidate's set-up (variants, workspace, graph captures), its check against the reference
   * (poison, one launch, the copy back) and its timed passes, NaN where a backend has none. */
  double wall_ms, setup_ms, check_ms, timing_ms;
} tuner_measurement;

typedef struct tuner_backend {
  void *state;
  int32_t measured;    /* 1: real timings; 0: a model (the tables say so) */
  /* Everything for token count m (inputs, reference). */
  volt8_status (*begin_m)(void *state, int32_t m);
  /* Checks and times the forward with these variants. A rejected candidate is VOLT8_OK with
   * out->accepted = 0; an error status stops the tuner (the device is unusable). */
  volt8_status (*measure)(void *state, int32_t m, const char *gate_up, const char *down, int32_t timed_batches,
                          tuner_measurement *out);
  void (*end_m)(void *state, int32_t m);
} tuner_backend;

typedef struct tuner_settings {
  volt8_moe_shape shape;
  int32_t top_k;
  const int32_t *m_values;
  int32_t m_count;
  int32_t screen_batches;   /* timed passes of every candidate */
  int32_t final_batches;    /* timed passes of the finalists */
  int32_t finalists;        /* how many of the best screened candidates are timed again */
  /* A screened candidate whose first timed forward takes more than this many times the best screen time
   * accepted so far at its M is timed no further (measured backends; 0: every candidate in full).
   * Candidates are screened in order of block_m, largest first, so that at large M the items that
   * reuse each weight most set the bar early; from the second M on, in order of their first timings at
   * the M before, fastest first. */
  double prune_factor;
  /* 1 (with prune_factor): from the second M on, a candidate pruned at a smaller M before, whose items
   * are no larger than the pick's there, is not measured (tuner.c, skipped_here). */
  int32_t skip_pruned;
  /* The served variant of an op (and the served pair) stays where the best final time beats its own by
   * no more than this fraction (0.01: 1%): a tie within the passes' spread does not move a table. 0:
   * any faster time wins. */
  double keep_within;
  /* 1: an M that both tables in out_dir already hold (measured, or derived, as this backend makes
   * them) is not tuned again: a tune cut short goes on where it stopped. */
  int32_t resume;
  const char *out_dir;
  int32_t arch;             /* the tables' arch */
  const char *device;       /* the tables' device description */
  const char *device_token; /* the file name's device ("NVIDIA_H200", "any") */
  const char *method;       /* __metadata__.method */
  const char *command;
  const char *nvrtc_version;
  FILE *progress;           /* NULL: silent */
  FILE *log;                /* NULL: none; else every measurement as JSON Lines (tuner_run's comment) */
  const char *label;        /* the shape's name in the log ("GLM-4.5-Air tp8 rank 1"); NULL: none */
  int32_t progress_tty;     /* 1: one self-updating line; 0: a line per finished op */
  double (*clock)(void);    /* seconds; NULL: the monotonic clock */
  double prepare_seconds;   /* the shape's set-up before tuner_run (compiling its variants, making and
                             * loading its experts), for the log's shape line; 0: not measured */
} tuner_settings;

typedef struct tuner_summary {
  int32_t m_done, m_failed;
  int32_t measurements, rejected;
  int32_t pruned;           /* screened candidates timed no further (prune_factor) */
  int32_t skipped;          /* candidates not measured at an M (skip_pruned) */
  int32_t resumed;          /* M left as out_dir's tables held them (resume) */
  char tables[2][1024];     /* the gate_up and down tables written */
  char failures[2048];      /* one line per M that found no valid candidate */
} tuner_summary;

/* The gate_up or down variants the code generator offers for `shape`, in its order. */
volt8_status tuner_candidates(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_op op, char ***out_names,
                              int32_t *out_count);
/* Tunes every M and merges each M's winners into the two tables as soon as it is done. With
 * settings->log, one JSON object a line: {"kind":"shape",...} first, then per M {"kind":"m"} with the
 * dispatch's own choice (with no table of this shape loaded: the fallback's), every measurement
 * {"kind":"measure", "pass":"screen"|"final", "held": the other op's variant}, each candidate left out
 * {"kind":"skip", "reason"} (skip_pruned), each op's {"kind":"pick"}, and {"kind":"resume"} for an M the
 * tables already held (resume). docs/testing.md describes the
 * fields. */
volt8_status tuner_run(volt8_ctx *ctx, const tuner_settings *settings, const tuner_backend *backend,
                       tuner_summary *out_summary);

#endif
