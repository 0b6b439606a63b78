/* `volt8 bench` end to end: volt8 FP8, the two FP16 baselines and the byte floor, per M. */
#ifndef VOLT8_BENCH_RUN_H
#define VOLT8_BENCH_RUN_H

#include <stdio.h>

#include "bench_options.h"
#include "bench_report.h"

#define BENCH_TOLERANCE 1e-3

/* Runs every M of `options` on ctx's device and fills `report`. A method that fails at one M is
 * recorded as not run (with the reason) and the rest continue; only set-up failures return an
 * error (message in volt8_last_error(ctx)). Progress lines go to `progress` (may be NULL). */
volt8_status bench_run(volt8_ctx *ctx, const bench_options *options, const char *command, FILE *progress,
                       bench_report *report);
/* 1 when every M ran volt8 within BENCH_TOLERANCE of the reference. */
int bench_report_passed(const bench_report *report);

#endif
