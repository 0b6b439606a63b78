/* What volt8's own tools (harness/, bench/, tuning/, cli/) use beyond include/volt8.h, in the spirit
 * of a static-linking-only section: none of it is exported from libvolt8.so (tools link the static
 * volt8_internal), none of it is covered by the ABI promise, and it may change in any release.
 * The tools include this header and volt8.h only (tests/runtime_layers.txt), so what they reach of
 * the runtime is listed here and nowhere else. */
#ifndef VOLT8_TOOLS_H
#define VOLT8_TOOLS_H

#define VOLT8_EXPERIMENTAL_API 1 /* volt8_experts_set_variants: the bench and the tuner pin variants */
#include "volt8.h"

#include "core/cuda_driver.h"       /* the driver table the tools call CUDA through */
#include "core/elf_check.h"        /* a library named by path is whole before the bench dlopens it */
#include "core/embedded_files.h"    /* the table type of the files a tool builds in (harness/bench_kernels.cu) */
#include "core/errors.h"            /* volt8_fail and friends: tools report like the library */
#include "core/json_strict.h"       /* volt8_utf8_sequence_length: the plan printer's columns */
#include "core/numeric.h"           /* FP16 and E4M3 conversions of synthetic problems */
#include "core/text_buffer.h"       /* the growing text of the reports and tuning tables */
#include "checkpoint/models.h"      /* the model registry (--model) */
#include "tools/rank_args.h"        /* --model, --tp, --rank and token counts, read one way */
#include "checkpoint/shard.h"       /* the expert-parallel split (plan --ep) */
#include "dispatch/dispatch.h"      /* the dispatch policy's choice, which bench reports and the tuner beats */
#include "dispatch/tuning.h"        /* tuning tables: read, named and written by the tuner */
#include "jit/template.h"           /* template expansion (the bench support kernels) */
#include "jit/kernel_load.h"        /* the bench support kernels load like volt8's own */
#include "moe/kernels/catalogue.h"  /* the kernel variants: names, lists, sources, what each launch needs */
#include "moe/kernels/variant_resources.h" /* registers, spills and occupancy of a variant's CUBIN (list --resources) */
#include "jit/nvrtc_loader.h"       /* the NVRTC version a tuning run records */
#include "moe/kernels/moe_layout.h" /* device layout sizes of synthetic problems; the token count's bound */
#include "reference/reference.h"    /* the reference on a sample of rows (bench at prefill sizes) */

/* The facts of a context the tools print and pass on. */
typedef struct volt8_tools_ctx_info {
  const volt8_cuda_driver *cuda; /* NULL without a device */
  int32_t device_ordinal;        /* -1: created without a device */
  int32_t device_arch;           /* e.g. 90; 0 without a device */
  int32_t target_arch;           /* arch kernels are generated for, e.g. 70 */
  const char *device_name;       /* "" without a device */
  const char *cache_dir;         /* NULL when the disk cache is off */
  int64_t nvrtc_compiles;        /* NVRTC compiles run so far, each image the disk cache may keep */
  int32_t variant_cubin;         /* 1: kernel variants compile to an sm_XX CUBIN (below) */
} volt8_tools_ctx_info;

volt8_tools_ctx_info volt8_tools_ctx(const volt8_ctx *ctx);
/* From now on ctx's kernel variants compile to an sm_XX CUBIN for its target arch (PTX still where no
 * NVRTC makes that CUBIN), not to PTX, whose machine code the driver makes when the module loads, on
 * the loading thread. A tool that compiles many variants ahead on threads (the tuner) then loads them
 * at once. A ctx with a device takes it only when its target arch is the device's; otherwise
 * VOLT8_ERR_INVALID_ARGUMENT, naming both, and ctx is as it was. */
volt8_status volt8_tools_ctx_variant_cubin(volt8_ctx *ctx);

/* ---- the text of the tools' arguments (tools/arguments.c): one strict reading for every command ---- */

typedef enum volt8_tools_number {
  VOLT8_TOOLS_NUMBER_OK,
  VOLT8_TOOLS_NOT_A_NUMBER,  /* anything but DIGITS or -DIGITS: a sign '+', a space, junk, nothing */
  VOLT8_TOOLS_OUT_OF_RANGE   /* a whole number outside [low, high], or past a long's range */
} volt8_tools_number;
/* The `length` bytes of `text` as one whole number in [low, high] into *out (set only on OK); a
 * negative text is out of range when low >= 0, whatever its digits. */
volt8_tools_number volt8_tools_parse_number_n(const char *text, size_t length, long low, long high, long *out);
volt8_tools_number volt8_tools_parse_number(const char *text, long low, long high, long *out);
/* A flag's value as a whole number in [low, high] ("--tp", "4", "TP size"): 0, or -1 with `error`
 * naming the flag, the text and the range ("--tp 0 is not a valid TP size (a TP size is a whole
 * number in 1..64)"). */
int volt8_tools_flag_number(const char *flag, const char *text, const char *what, long low, long high, int32_t *out,
                            char *error, size_t error_size);
/* The flags a command line gave, so that one given twice is refused (a flag that may repeat, compile's
 * and tune's --shape, is not passed). Zero-initialise. */
typedef struct volt8_tools_flags_seen {
  const char *names[64];
  int count;
} volt8_tools_flags_seen;
/* 0 the first time `flag` is seen; -1 with `error` "FLAG is given twice (give it once)" after. */
int volt8_tools_flag_once(volt8_tools_flags_seen *seen, const char *flag, char *error, size_t error_size);
/* A flag's list ("--tp", "1,2,4,8", "TP size"): items separated by single commas, each a whole number
 * in decimal digits alone (no sign, space or leading zero) in [low, high], at most `capacity` of them
 * into `values`. The count (>= 1), or -1 with `error` naming the flag, the item by its place and text,
 * and what is valid ("--tp: item 2, 0, is outside 1..64 (TP sizes are whole numbers in 1..64
 * separated by single commas)"); a list gives each value once (every list of the command line is a
 * set: "--m: lists 8 twice (items 1 and 3; ...)"); every list of every command is read here. */
int volt8_tools_flag_number_list(const char *flag, const char *text, const char *what, long low, long high,
                                 int32_t *values, int32_t capacity, char *error, size_t error_size);
/* The items a list text holds at most: its commas and one (a capacity that always suffices). */
size_t volt8_tools_list_length(const char *text);
/* A flag's token counts of forwards at top-k `top_k` (bench --m, list --choice): the list above,
 * each in 1..VOLT8_MAX_ROUTED_PAIRS / top_k (the routed pairs a forward takes, moe_layout.h), the
 * message saying so. */
int volt8_tools_flag_token_counts(const char *flag, const char *text, int32_t top_k, int32_t *values, int32_t capacity,
                                  char *error, size_t error_size);
/* "sm_70" -> 70 (the context's own reading: "sm_" and digits, 50..199); 0 for anything else. */
int32_t volt8_tools_parse_arch(const char *text);
/* A flag's arch: 0 (the number into *out when not NULL), or -1 with `error` naming the flag and text. */
int volt8_tools_flag_arch(const char *flag, const char *text, int32_t *out, char *error, size_t error_size);
/* A flag's path (`what`: "folder", "file"): 0, or -1 with `error` for an empty text, which names
 * nothing (an empty cache folder would otherwise fall back to the default one). */
int volt8_tools_flag_path(const char *flag, const char *text, const char *what, char *error, size_t error_size);
/* Shape text "hidden=2560,intermediate=160,..." onto *shape, which keeps the keys the text leaves
 * out; *shape is written only when the whole text is good. Items are key=value, comma-separated;
 * each key (hidden, intermediate, num_experts, block_n, block_k, intermediate_offset, expert_start,
 * global_experts) at most once; values are digits alone, each in its key's range (the code
 * generator's limits), and the keys agree (intermediate_offset below block_n, the expert range
 * inside global_experts). 0, or -1 with `error` naming the key and its text. */
int volt8_tools_parse_shape(const char *text, volt8_moe_shape *shape, char *error, size_t error_size);
/* The text volt8_tools_parse_shape reads back to the same shape (the expert range only for a rank of
 * expert parallelism, global_experts > 0). */
void volt8_tools_format_shape(const volt8_moe_shape *shape, char *buf, size_t buf_size);

#endif
