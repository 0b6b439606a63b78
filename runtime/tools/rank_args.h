/* The --model, --tp and --rank values of the volt8 command's subcommands (list, models, plan, bench,
 * tune), read one way: the defaults, the ranges and the messages. A message names the flag, the text
 * given and what would be valid ("--rank 4 is outside 0..3 (the ranks of --tp 4 are 0..3)"); the
 * caller puts "volt8 COMMAND: " before it. Numbers are read by tools.h's volt8_tools_flag_number. */
#ifndef VOLT8_TOOLS_RANK_ARGS_H
#define VOLT8_TOOLS_RANK_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/models.h"
#include "volt8.h"

/* A model's rank when none is named: TP 4, rank 1 (rank 0 at TP 1): the reference's first rank off
 * the start of the scale grid. */
#define VOLT8_TOOLS_DEFAULT_TP 4
#define VOLT8_TOOLS_MAX_TP 64
/* One range for a value of each kind, in every command: TP sizes 1..VOLT8_TOOLS_MAX_TP (--tp of plan,
 * models, list, bench, tune), top-k 1..VOLT8_TOOLS_MAX_TOP_K (--top-k of plan, list, bench, tune), EP
 * sizes 1..VOLT8_TOOLS_MAX_EP (plan --ep). */
#define VOLT8_TOOLS_MAX_TOP_K 64
#define VOLT8_TOOLS_MAX_EP 2048
#define VOLT8_TOOLS_MAX_JOBS 256 /* compile threads: list --jobs, tune --jobs */
int32_t volt8_tools_default_rank(int32_t tp_size);

/* --rank's text as one of the ranks 0..tp_size-1; 0, else -1 and the message. */
int volt8_tools_parse_rank(const char *text, int32_t tp_size, int32_t *out, char *error, size_t error_size);

/* Token counts a run of bench or tune lists at most (bench's each in 1..2^30 / top-k, a forward's
 * routed pairs; tune's in 1..VOLT8_TUNING_MAX_M, a tuning table's largest M). */
#define VOLT8_TOOLS_MAX_M_VALUES 32

/* The registry's model `name` (NULL: the reference), else NULL and a message listing the known names. */
const volt8_model *volt8_tools_find_model(const char *name, char *error, size_t error_size);
/* Rank `rank` of TP size `tp` of the model, with all its experts; 0, else -1 and "NAME at --tp 3 --rank 1: why"
 * (error may be NULL). */
int volt8_tools_rank_shape(const volt8_model *model, int32_t tp, int32_t rank, volt8_moe_shape *out, char *error,
                           size_t error_size);
/* --model NAME --tp N --rank R as given (NULL: the reference, VOLT8_TOOLS_DEFAULT_TP, the default
 * rank) into the rank's shape and the model's top-k (out_top_k may be NULL). */
int volt8_tools_model_rank(const char *model_name, const char *tp_text, const char *rank_text, volt8_moe_shape *out,
                           int32_t *out_top_k, char *error, size_t error_size);

#endif
