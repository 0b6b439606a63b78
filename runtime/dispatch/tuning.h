/* Tuning tables: which variant serves an op at a token count, as `volt8 tune` measured it
 * (or, for sm_70, as the documented model of tuning/derive_model.c derived it).
 *
 * File name (docs/design.md, "Tuning tables"):  op=<op>,N=<n>,K=<k>,block=<bn>x<bk>,arch=sm_<XX>,device=<device>.json
 *   op      gate_up | down
 *   N, K    the op's weight matrix per expert: gate_up N = 2 * intermediate, K = hidden;
 *           down N = hidden, K = intermediate (the rank's offset does not enter: one table serves
 *           every rank of a TP size)
 *   arch    the target arch the kernels are compiled for (ctx's target arch)
 *   device  the CUDA device name with every byte outside [A-Za-z0-9._-] replaced by '_'
 *           ("NVIDIA_H200"), or "any": a table for every device of the arch (the derived sm_70 ones)
 * Contents:
 *   {"__metadata__": {"schema_version": 1, ...},
 *    "1": {"variant": "gate_up.cc.bm1.bn4.w4.sk1.l32", "time_us": 3.1, ...}, "2": ..., ...}
 *   Every other key is a token count M (a positive decimal integer without leading zeros). Its
 *   value names a variant of the table's op, as {"variant": NAME, ...} (other fields are
 *   informational) or as the bare NAME string. __metadata__ needs schema_version 1; when it
 *   holds "top_k", the M keys were measured at that top_k and a forward at another top_k is
 *   matched by routed pairs (M * top_k) instead of tokens.
 * Lookup, per op (tuning_shape.h): this device's table of the shape (its device name's, else
 *   device=any's), else the same shape's table of another device of the arch, else the dispatch
 *   heuristic. A table serves a token count from half its smallest M to its largest, with the entry of
 *   the nearest M (ties: the smaller M); $VOLT8_TUNING_DIR's tables come before the built-in ones.
 * Warnings: the library never prints. A missing table or an invalid one, and a $VOLT8_TUNING_DIR
 *   that is not a directory, is recorded once per process (per table name or path) and read back
 *   with volt8_tuning_warnings(); the volt8 command prints them.
 */
#ifndef VOLT8_TUNING_H
#define VOLT8_TUNING_H

#include <stddef.h>
#include <stdint.h>

#include "dispatch/dispatch.h"
#include "volt8.h"

#define VOLT8_TUNING_SCHEMA_VERSION 1
#define VOLT8_TUNING_DIR_ENV "VOLT8_TUNING_DIR"
#define VOLT8_TUNING_BUILT_IN_PREFIX "tuning/tables/"
#define VOLT8_TUNING_ANY_DEVICE "any"
#define VOLT8_TUNING_NAME_BYTES 256
#define VOLT8_TUNING_ORIGIN_BYTES 1024
#define VOLT8_TUNING_MAX_TABLE_BYTES (1 << 20)
#define VOLT8_TUNING_MAX_M (1 << 20)

/* The declaration belongs to volt8.h (public, stable); it lives here until it is there.
 * The warnings recorded in this process so far, one per line, into buf (NUL-terminated, cut
 * short when buf_size is too small; buf may be NULL when buf_size is 0). *out_count (may be
 * NULL) receives their number. Thread-safe. */
VOLT8_API volt8_status volt8_tuning_warnings(char *buf, size_t buf_size, int32_t *out_count);

typedef enum volt8_tuning_source {
  VOLT8_TUNING_SOURCE_NONE = 0,     /* no table: the heuristic serves */
  VOLT8_TUNING_SOURCE_ENV_DIR = 1,  /* a file in $VOLT8_TUNING_DIR */
  VOLT8_TUNING_SOURCE_BUILT_IN = 2  /* a table built into the library */
} volt8_tuning_source;

typedef struct volt8_tuning_entry {
  int32_t m;
  char variant[VOLT8_VARIANT_NAME_BYTES];
} volt8_tuning_entry;

typedef struct volt8_tuning_table {
  int32_t schema_version;
  int32_t top_k;                /* 0 when __metadata__ does not say */
  int32_t measured;             /* __metadata__.measured: 1, 0, or -1 when absent */
  int32_t count;
  volt8_tuning_entry *entries;  /* ascending M */
  int32_t num_experts;          /* __metadata__.shape.num_experts in 1..2^20, else 0 (informative only) */
} volt8_tuning_table;

typedef struct volt8_tuning_match {
  int32_t source;                            /* volt8_tuning_source */
  int32_t table_m;                           /* the M key that served */
  char variant[VOLT8_VARIANT_NAME_BYTES];    /* "" when source is NONE */
  char origin[VOLT8_TUNING_ORIGIN_BYTES];    /* the file path, or "built-in:<name>" */
} volt8_tuning_match;

/* Fills `out` with `entry` of the table at `origin`, served as `source`. */
void volt8_tuning_match_set(volt8_tuning_match *out, int32_t source, const volt8_tuning_entry *entry, const char *origin);

/* "gate_up" / "down"; NULL for the support ops. */
const char *volt8_tuning_op_name(volt8_op op);
/* The op's weight matrix N x K for `shape` (see the file name above). */
volt8_status volt8_tuning_op_dims(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_op op, int32_t *out_n,
                                  int32_t *out_k);
/* A device name as it appears in table names: bytes outside [A-Za-z0-9._-] become '_'. */
void volt8_tuning_device_token(const char *device_name, char *buf, size_t buf_size);
/* The table file name (no directory). VOLT8_ERR_INVALID_ARGUMENT when it does not fit. */
volt8_status volt8_tuning_table_name(volt8_ctx *ctx, const char *op_name, int32_t n, int32_t k, int32_t block_n,
                                     int32_t block_k, int32_t arch, const char *device_token, char *buf,
                                     size_t buf_size);

/* Parses and validates a table's text; `origin` names it in error messages, `op_name` is the op its
 * variants must belong to. VOLT8_ERR_FORMAT with a message saying what is wrong and where. */
volt8_status volt8_tuning_table_parse(volt8_ctx *ctx, const char *text, size_t length, const char *origin,
                                      const char *op_name, volt8_tuning_table *out_table);
void volt8_tuning_table_free(volt8_tuning_table *table);
/* The entry serving num_tokens at top_k: nearest M (routed pairs when the table records its
 * top_k and it differs), ties to the smaller M. NULL for an empty table. */
const volt8_tuning_entry *volt8_tuning_table_nearest(const volt8_tuning_table *table, int32_t num_tokens,
                                                     int32_t top_k);
/* 1 when the count lies inside the table's range, from half its smallest M to its largest (in routed
 * pairs as above): a table measured from M = 1 or 2 serves every count up to its largest, one measured
 * from M = 256 serves from 128 up. */
int volt8_tuning_table_covers(const volt8_tuning_table *table, int32_t num_tokens, int32_t top_k);

/* A table read and parsed once, with where it came from. */
typedef struct volt8_tuning_loaded {
  int32_t source;                         /* volt8_tuning_source; NONE: there is no table */
  char origin[VOLT8_TUNING_ORIGIN_BYTES]; /* the file path, or "built-in:<name>" */
  volt8_tuning_table table;
} volt8_tuning_loaded;

void volt8_tuning_loaded_free(volt8_tuning_loaded *loaded);

/* The variant the tables name for `op` at num_tokens, by the lookup above over every variant name (the
 * dispatch also passes over names the shape does not offer; tuning_shape.h). No table serves:
 * out->source = NONE. Errors only for bad arguments or memory. */
volt8_status volt8_tuning_lookup(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_op op, int32_t num_tokens,
                                 int32_t top_k, volt8_tuning_match *out_match);

/* Reads a whole table file (at most VOLT8_TUNING_MAX_TABLE_BYTES, NUL-terminated); *out_missing = 1
 * (and VOLT8_OK) when it does not exist. */
volt8_status volt8_tuning_read_file(volt8_ctx *ctx, const char *path, char **out_text, size_t *out_length,
                                    int *out_missing);

/* Records a warning once per process per `key` (the text of later calls with that key is dropped). */
void volt8_tuning_warn(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Forgets every recorded warning (tests). */
void volt8_tuning_warnings_reset(void);
/* Records a warning (once a process) when `dir`, $VOLT8_TUNING_DIR's value, serves no table: it is
 * missing, not a directory (a file, a FIFO), or a directory this process cannot list. Nothing for NULL
 * or "". Every reader of the folder calls it: the lookup and the listing. */
void volt8_tuning_dir_check(const char *dir);

/* Tools only (not exported): 0 makes the lookup ignore the tables built into the library, so that
 * $VOLT8_TUNING_DIR alone serves (`volt8 list --choice --tables DIR`). Default 1; thread-safe. */
void volt8_tuning_set_built_in(int enabled);
int volt8_tuning_built_in(void);

#endif
