/* The one-launch forward (templates/moe_single.cu): gate_up, down and the weighted top-k reduce of
 * block_m 1 work items in one kernel. Its tiles, and the rule of which shapes it fits. */
#ifndef VOLT8_KERNELS_SINGLE_H
#define VOLT8_KERNELS_SINGLE_H

#include "volt8.h"

/* Columns of h per gate_up item and of z per down item. */
#define VOLT8_SINGLE_GATE_COLUMNS 8
#define VOLT8_SINGLE_DOWN_COLUMNS 128
/* Routed pairs up to which a forward of block_m 1 cc kernels runs as one launch (moe/forward_plan.c). */
#define VOLT8_SINGLE_MAX_PAIRS 256

/* 1 when the one-launch forward fits a valid shape: its row and scale tiles fit the 48 KiB of static
 * shared memory. */
int volt8_single_fits(const volt8_moe_shape *shape);

#endif
