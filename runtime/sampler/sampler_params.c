/* The sampler kernels' parameter tables, made from the lists of sampler_params.h. */
#include "sampler/sampler_params.h"

#define ROWS_ROW(c_type, type, name) VOLT8_KERNEL_PARAM_ROW(volt8_rejection_rows_args, c_type, type, name)
#define WALK_ROW(c_type, type, name) VOLT8_KERNEL_PARAM_ROW(volt8_rejection_walk_args, c_type, type, name)
#define DRAW_ROW(c_type, type, name) VOLT8_KERNEL_PARAM_ROW(volt8_rejection_draw_args, c_type, type, name)

static const volt8_kernel_param rows_params[] = {VOLT8_REJECTION_ROWS_PARAMS(ROWS_ROW)};
static const volt8_kernel_param walk_params[] = {VOLT8_REJECTION_WALK_PARAMS(WALK_ROW)};
static const volt8_kernel_param draw_params[] = {VOLT8_REJECTION_DRAW_PARAMS(DRAW_ROW)};

#define COUNT(table) ((int)(sizeof table / sizeof table[0]))
_Static_assert(COUNT(walk_params) <= VOLT8_MAX_KERNEL_PARAMS, "raise VOLT8_MAX_KERNEL_PARAMS");

const volt8_kernel_signature volt8_rejection_rows_signature = {"volt8_rejection_rows", rows_params, COUNT(rows_params)};
const volt8_kernel_signature volt8_rejection_walk_signature = {"volt8_rejection_walk", walk_params, COUNT(walk_params)};
const volt8_kernel_signature volt8_rejection_draw_signature = {"volt8_rejection_draw", draw_params, COUNT(draw_params)};
