/* The MoE kernels' parameter tables, made from the lists of kernel_params.h. */
#include "moe/kernels/kernel_params.h"

#define ROW VOLT8_KERNEL_PARAM_ROW
#define ROUTE_ROW(c_type, type, name) ROW(volt8_route_args, c_type, type, name)
#define ROUTE_PARTS_ROW(c_type, type, name) ROW(volt8_route_parts_args, c_type, type, name)
#define GATE_UP_ROW(c_type, type, name) ROW(volt8_gate_up_args, c_type, type, name)
#define DOWN_ROW(c_type, type, name) ROW(volt8_down_args, c_type, type, name)
#define DOWN_TOKEN_ROW(c_type, type, name) ROW(volt8_down_token_args, c_type, type, name)
#define REDUCE_ROW(c_type, type, name) ROW(volt8_reduce_args, c_type, type, name)
#define SINGLE_ROW(c_type, type, name) ROW(volt8_single_args, c_type, type, name)

static const volt8_kernel_param route_params[] = {VOLT8_ROUTE_PARAMS(ROUTE_ROW)};
static const volt8_kernel_param route_parts_params[] = {VOLT8_ROUTE_PARTS_PARAMS(ROUTE_PARTS_ROW)};
static const volt8_kernel_param gate_up_params[] = {VOLT8_GATE_UP_PARAMS(GATE_UP_ROW)};
static const volt8_kernel_param down_params[] = {VOLT8_DOWN_FUSED_PARAMS(DOWN_ROW)};
static const volt8_kernel_param down_token_params[] = {VOLT8_DOWN_TOKEN_PARAMS(DOWN_TOKEN_ROW)};
static const volt8_kernel_param reduce_params[] = {VOLT8_REDUCE_PARAMS(REDUCE_ROW)};
static const volt8_kernel_param reduce_half_params[] = {VOLT8_REDUCE_HALF_PARAMS(REDUCE_ROW)};
static const volt8_kernel_param single_params[] = {VOLT8_SINGLE_PARAMS(SINGLE_ROW)};

#define COUNT(table) ((int)(sizeof table / sizeof table[0]))
#define ONE(c_type, type, name) +1
_Static_assert(COUNT(down_params) <= VOLT8_MAX_KERNEL_PARAMS, "raise VOLT8_MAX_KERNEL_PARAMS");
_Static_assert(COUNT(single_params) <= VOLT8_MAX_KERNEL_PARAMS, "raise VOLT8_MAX_KERNEL_PARAMS");

const volt8_kernel_signature volt8_route_signature = {"route", route_params, COUNT(route_params)};
const volt8_kernel_signature volt8_route_parts_signature = {"route_parts", route_parts_params, COUNT(route_parts_params)};
const volt8_kernel_signature volt8_gate_up_signature = {"gate_up", gate_up_params, COUNT(gate_up_params)};
/* The unfused down's list is the fused one's start. */
const volt8_kernel_signature volt8_down_signature = {"down", down_params, 0 VOLT8_DOWN_PARAMS(ONE)};
const volt8_kernel_signature volt8_down_fused_signature = {"down (fused reduce)", down_params, COUNT(down_params)};
const volt8_kernel_signature volt8_down_token_signature = {"down (token)", down_token_params, COUNT(down_token_params)};
const volt8_kernel_signature volt8_reduce_signature = {"reduce", reduce_params, COUNT(reduce_params)};
const volt8_kernel_signature volt8_reduce_half_signature = {"reduce_half", reduce_half_params, COUNT(reduce_half_params)};
const volt8_kernel_signature volt8_single_signature = {"single", single_params, COUNT(single_params)};
