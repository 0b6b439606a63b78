/* The one-launch forward (templates/moe_single.cu): gate_up, down and the weighted top-k reduce of
 * block_m 1 work items in one kernel. What its launcher and its rule of use need of it. */
#ifndef VOLT8_KERNELS_SINGLE_H
#define VOLT8_KERNELS_SINGLE_H

#include "volt8.h"

#define VOLT8_SINGLE_THREADS 256
/* Lanes per weight row, as the cc tiles the sm_70 tables pick at few tokens; a work item is
 * VOLT8_SINGLE_THREADS / lanes columns of h (gate_up) or of z (down). */
#define VOLT8_SINGLE_GATE_LANES 32
#define VOLT8_SINGLE_DOWN_LANES 2
#define VOLT8_SINGLE_GATE_COLUMNS (VOLT8_SINGLE_THREADS / VOLT8_SINGLE_GATE_LANES)
#define VOLT8_SINGLE_DOWN_COLUMNS (VOLT8_SINGLE_THREADS / VOLT8_SINGLE_DOWN_LANES)
/* CTAs an SM must hold (registers capped to 80 a thread), and so its default grid's CTAs an SM. */
#define VOLT8_SINGLE_MIN_BLOCKS 3
/* Routed pairs up to which a forward of block_m 1 cc kernels runs as one launch (moe/forward_plan.c). */
#define VOLT8_SINGLE_MAX_PAIRS 256

/* 1 when the one-launch forward fits a valid shape: its row and scale tiles fit the 48 KiB of static
 * shared memory. */
int volt8_single_fits(const volt8_moe_shape *shape);

#endif
