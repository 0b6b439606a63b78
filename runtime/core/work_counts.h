/* Process-wide counts of the work a prepared forward must never do: code generator runs and
 * tuning-table reads. A test takes the counts before and after the calls it checks. */
#ifndef VOLT8_WORK_COUNTS_H
#define VOLT8_WORK_COUNTS_H

#include <stdint.h>

typedef struct volt8_work_counts {
  int64_t codegen_runs;  /* code generator runs: a variant listed or emitted, a template expanded */
  int64_t tuning_reads;  /* tuning tables read from a file or parsed, and tuning folders listed */
} volt8_work_counts;

void volt8_count_codegen_run(void);
void volt8_count_tuning_read(void);
volt8_work_counts volt8_work_counts_now(void);

#endif
