/* safetensors files and checkpoint folders: strict header validation, memory-mapped data.
 * A file is rejected unless its header (<= 100 MB, UTF-8 JSON starting with '{') names every
 * tensor once, with a known dtype, and the tensors' byte ranges tile the data area from 0 with
 * no hole, overlap or trailing byte. */
#ifndef VOLT8_SAFETENSORS_H
#define VOLT8_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "volt8.h"

#define VOLT8_ST_MAX_HEADER_BYTES 100000000u
#define VOLT8_ST_MAX_RANK 8
/* Distinct shard files one checkpoint folder (or its index) may name. */
#define VOLT8_ST_MAX_SHARDS (1 << 20)

typedef enum volt8_st_dtype {
  VOLT8_ST_BOOL, VOLT8_ST_F4, VOLT8_ST_F6_E2M3, VOLT8_ST_F6_E3M2, VOLT8_ST_U8, VOLT8_ST_I8,
  VOLT8_ST_F8_E5M2, VOLT8_ST_F8_E4M3, VOLT8_ST_F8_E8M0, VOLT8_ST_I16, VOLT8_ST_U16, VOLT8_ST_F16,
  VOLT8_ST_BF16, VOLT8_ST_I32, VOLT8_ST_U32, VOLT8_ST_F32, VOLT8_ST_C64, VOLT8_ST_F64, VOLT8_ST_I64,
  VOLT8_ST_U64, VOLT8_ST_DTYPE_COUNT
} volt8_st_dtype;

const char *volt8_st_dtype_name(volt8_st_dtype dtype);
int32_t volt8_st_dtype_bits(volt8_st_dtype dtype);
/* Element `index` of F16, BF16, F32 or F64 data (any alignment) as a double; NaN for other dtypes. */
double volt8_st_float_at(volt8_st_dtype dtype, const uint8_t *data, size_t index);

typedef struct volt8_st_tensor {
  const char *name;
  const char *file;      /* path of the file holding it, for messages */
  volt8_st_dtype dtype;
  int32_t rank;
  int64_t shape[VOLT8_ST_MAX_RANK];
  const uint8_t *data;   /* inside the read-only mapping; no alignment promised */
  size_t bytes;
} volt8_st_tensor;

typedef struct volt8_st_file volt8_st_file;

volt8_status volt8_st_file_open(volt8_ctx *ctx, const char *path, volt8_st_file **out_file);
void volt8_st_file_close(volt8_st_file *file);
size_t volt8_st_file_count(const volt8_st_file *file);
/* Tensors sorted by name. */
const volt8_st_tensor *volt8_st_file_tensor(const volt8_st_file *file, size_t index);
const volt8_st_tensor *volt8_st_file_find(const volt8_st_file *file, const char *name);

/* A checkpoint folder: model.safetensors.index.json when present (shards opened on first use),
 * else every *.safetensors file in it (a name in two files is an error). */
typedef struct volt8_st_set volt8_st_set;

volt8_status volt8_st_set_open(volt8_ctx *ctx, const char *dir, volt8_st_set **out_set);
void volt8_st_set_close(volt8_st_set *set);
size_t volt8_st_set_count(const volt8_st_set *set);
/* Tensor names sorted. */
const char *volt8_st_set_name(const volt8_st_set *set, size_t index);
int volt8_st_set_contains(const volt8_st_set *set, const char *name);
/* The tensor `name`, opening its file on first use; VOLT8_ERR_NOT_FOUND (with a message) when no
 * file of the set holds it. */
volt8_status volt8_st_set_find(volt8_ctx *ctx, volt8_st_set *set, const char *name, const volt8_st_tensor **out);

/* Files currently mapped by this process (tests check that failures leave none behind). */
int64_t volt8_st_live_mappings(void);

#endif
