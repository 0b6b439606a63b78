/* The volt8 command: shared helpers of its subcommands. */
#ifndef VOLT8_CLI_H
#define VOLT8_CLI_H

#include "volt8.h"

#define CLI_MAX_SHAPES 32

/* The value after the flag argv[*i] (advancing *i), or NULL after "FLAG needs a value" on stderr. */
const char *cli_flag_value(const char *command, int argc, char **argv, int *i);
/* `text` as a whole number in [low, high] into *out; else -1 after an error on stderr naming the
 * flag, the text, what it should be (`what`: "TP size") and the range (tools.h's strict reading). */
int cli_parse_number(const char *command, const char *flag, const char *text, const char *what, long low, long high,
                     int32_t *out);
/* 0 the first time `flag` is given; else -1 after "volt8 COMMAND: FLAG is given twice (give it once)" on
 * stderr (exit 2). */
struct volt8_tools_flags_seen;
int cli_flag_once(const char *command, struct volt8_tools_flags_seen *seen, const char *flag);
/* --rank's text as one of the ranks 0..tp_size-1; else -1 after an error on stderr naming the text
 * and those ranks. */
int cli_parse_rank(const char *command, const char *text, int32_t tp_size, int32_t *out);
/* 0 when `text` is an arch (sm_70), else -1 after an error on stderr naming the flag and the text. */
int cli_parse_arch(const char *command, const char *flag, const char *text);
/* 0 for a path that is not empty, else -1 after an error on stderr naming the flag. */
int cli_parse_path(const char *command, const char *flag, const char *text, const char *what);
/* What a path argument is for; cli_check_path refuses it when it cannot serve (exit 2: the argument
 * is bad, found before any work). */
typedef enum cli_path_use {
  CLI_FOLDER_TO_READ, /* an existing folder (plan CKPT_DIR) */
  CLI_FOLDER_TO_FILL, /* a folder, made with the folders above it when missing (compile --cache) */
  CLI_FOLDER_TO_MAKE, /* a folder, made when missing inside an existing one (demo --keep) */
  CLI_FILE_TO_WRITE   /* a file, written inside an existing folder (bench --json) */
} cli_path_use;
/* 0 when `path` can serve `use`, else -1 after an error on stderr naming the flag, the path and why.
 * Nothing is opened (a FIFO or a device node is never read). */
int cli_check_path(const char *command, const char *flag, const char *path, cli_path_use use);
/* 1 when `arg` is one of the space-separated `names` ("--tp --rank"). */
int cli_is_one_of(const char *arg, const char *names);
/* Says on stderr that `arg` is not an argument of `command`, with its usage; returns 2. */
int cli_unknown_argument(const char *command, const char *arg);
/* 1 when an argument after the command is --help or -h. */
int cli_wants_help(int argc, char **argv);
/* The command's arguments ("plan CKPT_DIR --tp N ..."), from the command table of main.c. */
const char *cli_usage(const char *command);

/* --shape's text onto `shape` (tools.h's one strict reading; keys not named keep their value); else
 * -1 after an error on stderr naming --shape, the text and the key. */
int cli_parse_shape(const char *command, const char *text, volt8_moe_shape *shape);
double cli_now_seconds(void);

typedef struct volt8_model volt8_model;
/* The registry's model (runtime/checkpoint/models.h), or NULL after an error listing the known names. */
const volt8_model *cli_find_model(const char *command, const char *name);
/* --model NAME [--tp N] [--rank R] (NULL texts: the defaults of tools/rank_args.h) into a rank's shape
 * with all the model's experts. 0 on success, 2 after an error on stderr. */
int cli_model_shape(const char *command, const char *name, const char *tp_text, const char *rank_text,
                    volt8_moe_shape *out);
/* Prints "volt8 <command>: <status>: <last error>" to stderr and returns 1. */
int cli_report(volt8_ctx *ctx, const char *command, volt8_status status);

typedef struct synthetic_checkpoint {
  int hidden, intermediate, num_experts, top_k, num_hidden_layers;
  uint64_t seed;
} synthetic_checkpoint;
/* What a checkpoint write made: the folder (or the caller, who made it), and each of its files. */
typedef struct synthetic_written {
  int made_folder;
  unsigned made_files;
} synthetic_written;
/* Writes model.safetensors and config.json (ModelOpt mixed precision, E4M3 experts with BF16
 * 128x128 scales under mtp.layers.0) into dir, creating the folder if it is missing and each file new
 * (never over a file, never through a link), and notes in *written what it made. 0 on success, else 1
 * after the reason on stderr. */
int cli_write_synthetic_checkpoint(const char *dir, const synthetic_checkpoint *spec, synthetic_written *written);
/* Removes what *written says was made, and nothing else: its files (regular files, never through a
 * link), then the folder if it was made. 0, or 1 after naming on stderr what was left. */
int cli_remove_synthetic_checkpoint(const char *dir, const synthetic_written *written);

typedef struct compile_totals {
  int compiled, from_cache;
  double seconds;
} compile_totals;
/* Compiles (or loads from the cache) every variant of `shape`: one line each, or one progress line. */
volt8_status cli_compile_all(volt8_ctx *ctx, const volt8_moe_shape *shape, compile_totals *totals, int one_line);

/* Prints on stderr each tuning warning this process recorded (a table missing, invalid or naming a
 * variant the shape lacks: volt8_tuning_warnings), as "volt8 <command>: warning: ..."; returns how many. */
int cli_print_tuning_warnings(const char *command);

/* Says once on stderr (as an error, or as a warning) that ctx's disk cache did not keep some
 * compiled kernels, and why; returns how many. */
int cli_cache_store_failures(volt8_ctx *ctx, const char *command, int is_error);

/* list --resources: each variant of `shape` compiled to a CUBIN for ctx's target arch on `jobs`
 * threads, with its registers, spills, shared memory and what one SM holds of it; a table, or JSON.
 * 0 on success, else 1 after the error on stderr. */
int cli_print_resources(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t jobs, int json);
/* Compile threads when not given: the processors online, 1..16. */
int32_t cli_default_jobs(void);

int cli_compile(int argc, char **argv);
int cli_plan(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_tune(int argc, char **argv);
int cli_list(int argc, char **argv);
int cli_demo(int argc, char **argv);
int cli_models(int argc, char **argv);
int cli_doctor(int argc, char **argv);

#endif
