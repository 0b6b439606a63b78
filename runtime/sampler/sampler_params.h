/* The parameter lists of the rejection sampler's three kernels (templates/rejection_sample.cu),
 * declared once as in jit/kernel_signature.h: sampler.c fills the argument structs by field name,
 * tests/test_kernel_params.c compares the lists with the template. */
#ifndef VOLT8_SAMPLER_PARAMS_H
#define VOLT8_SAMPLER_PARAMS_H

#include "core/cuda_driver.h"
#include "jit/kernel_signature.h"

#define VOLT8_REJECTION_ROWS_PARAMS(P)                                                                         \
  P(CUdeviceptr, "int *", num_draft) P(CUdeviceptr, "int *", draft_ids) P(CUdeviceptr, "float *", draft_probs) \
  P(CUdeviceptr, "float *", target_probs) P(int, "int", max_draft) P(int, "int", vocab) P(int, "int", splits)   \
  P(int, "int", chunk) P(CUdeviceptr, "volt8_row_scan *", scans)

#define VOLT8_REJECTION_WALK_PARAMS(P)                                                                         \
  P(CUdeviceptr, "int *", num_draft) P(CUdeviceptr, "int *", draft_ids) P(CUdeviceptr, "float *", draft_probs) \
  P(CUdeviceptr, "float *", target_probs) P(CUdeviceptr, "unsigned char *", greedy) P(int, "int", max_draft)   \
  P(int, "int", vocab) P(int, "int", row_splits) P(CUdeviceptr, "volt8_row_scan *", scans)                      \
  P(int, "int", sum_splits) P(int, "int", sum_chunk) P(unsigned long long, "unsigned long long", seed)           \
  P(unsigned long long, "unsigned long long", offset) P(CUdeviceptr, "int *", out_ids)                          \
  P(CUdeviceptr, "volt8_stop_record *", stops) P(CUdeviceptr, "volt8_u64 *", chunk_sums)                        \
  P(CUdeviceptr, "volt8_u64 *", part_sums)

#define VOLT8_REJECTION_DRAW_PARAMS(P)                                                                         \
  P(CUdeviceptr, "int *", draft_ids) P(CUdeviceptr, "float *", draft_probs) P(CUdeviceptr, "float *", target_probs) \
  P(int, "int", max_draft) P(int, "int", vocab) P(int, "int", sum_splits) P(int, "int", sum_chunk)              \
  P(CUdeviceptr, "volt8_stop_record *", stops) P(CUdeviceptr, "volt8_u64 *", chunk_sums)                        \
  P(CUdeviceptr, "volt8_u64 *", part_sums) P(CUdeviceptr, "int *", out_ids) P(CUdeviceptr, "int *", num_accepted)

typedef struct volt8_rejection_rows_args { VOLT8_REJECTION_ROWS_PARAMS(VOLT8_KERNEL_ARGS_FIELD) } volt8_rejection_rows_args;
typedef struct volt8_rejection_walk_args { VOLT8_REJECTION_WALK_PARAMS(VOLT8_KERNEL_ARGS_FIELD) } volt8_rejection_walk_args;
typedef struct volt8_rejection_draw_args { VOLT8_REJECTION_DRAW_PARAMS(VOLT8_KERNEL_ARGS_FIELD) } volt8_rejection_draw_args;

extern const volt8_kernel_signature volt8_rejection_rows_signature, volt8_rejection_walk_signature,
    volt8_rejection_draw_signature;

#endif
