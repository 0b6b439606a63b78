/* The counters of work_counts.h. */
#include "core/work_counts.h"

#include <stdatomic.h>

static _Atomic int64_t codegen_runs, tuning_reads;

void volt8_count_codegen_run(void) { atomic_fetch_add_explicit(&codegen_runs, 1, memory_order_relaxed); }

void volt8_count_tuning_read(void) { atomic_fetch_add_explicit(&tuning_reads, 1, memory_order_relaxed); }

volt8_work_counts volt8_work_counts_now(void) {
  volt8_work_counts counts = {atomic_load_explicit(&codegen_runs, memory_order_relaxed),
                              atomic_load_explicit(&tuning_reads, memory_order_relaxed)};
  return counts;
}
