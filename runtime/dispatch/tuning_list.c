/* The tuning tables a device's lookup could read, listed with what each holds (volt8 doctor). */
#define VOLT8_EXPERIMENTAL_API 1 /* defines volt8_tuning_table_count and _get */
#include "volt8.h"
#include "dispatch/tuning.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx_internal.h"
#include "core/embedded_files.h"

typedef struct listed_table {
  char name[VOLT8_TUNING_NAME_BYTES];
  const volt8_embedded_file *built_in; /* NULL: a file in $VOLT8_TUNING_DIR */
} listed_table;

typedef struct table_list {
  listed_table *tables;
  int32_t count, capacity;
} table_list;

/* Fills `out` from a table name of the documented form (written back exactly as volt8_tuning_table_name
 * writes it); 0 for any other name. */
static int parse_name(const char *name, volt8_tuning_table_info *out) {
  char op[8], device[128];
  int device_at = 0;
  size_t length = strlen(name);
  if (length < 5 || length >= VOLT8_TUNING_NAME_BYTES || strcmp(name + length - 5, ".json") != 0) return 0;
  if (sscanf(name, "op=%7[^,],N=%d,K=%d,block=%dx%d,arch=sm_%d,device=%n", op, &out->n, &out->k, &out->block_n,
             &out->block_k, &out->arch, &device_at) != 6 || device_at == 0 || length - 5 - (size_t)device_at >= sizeof device)
    return 0;
  snprintf(device, sizeof device, "%.*s", (int)(length - 5 - (size_t)device_at), name + device_at);
  char again[VOLT8_TUNING_NAME_BYTES];
  if (volt8_tuning_table_name(NULL, op, out->n, out->k, out->block_n, out->block_k, out->arch, device, again,
                              sizeof again) != VOLT8_OK || strcmp(again, name) != 0)
    return 0;
  snprintf(out->op, sizeof out->op, "%s", op);
  snprintf(out->device, sizeof out->device, "%s", device);
  return strcmp(op, "gate_up") == 0 || strcmp(op, "down") == 0;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(((const listed_table *)a)->name, ((const listed_table *)b)->name);
}

/* Adds `name` when it is a table for arch on this device (or any); -1 when out of memory. */
static int consider(table_list *list, const char *name, const volt8_embedded_file *built_in, int32_t arch,
                    const char *device_token) {
  volt8_tuning_table_info info = VOLT8_TUNING_TABLE_INFO_INIT;
  if (!parse_name(name, &info) || info.arch != arch ||
      (strcmp(info.device, device_token) != 0 && strcmp(info.device, VOLT8_TUNING_ANY_DEVICE) != 0))
    return 0;
  if (list->count == list->capacity) {
    int32_t capacity = list->capacity ? 2 * list->capacity : 32;
    listed_table *grown = realloc(list->tables, (size_t)capacity * sizeof *grown);
    if (!grown) return -1;
    list->tables = grown;
    list->capacity = capacity;
  }
  snprintf(list->tables[list->count].name, sizeof list->tables[0].name, "%s", name);
  list->tables[list->count++].built_in = built_in;
  return 0;
}

/* $VOLT8_TUNING_DIR's tables by name, then the built-in ones by name. */
static volt8_status make_list(int32_t arch, const char *device_name, table_list *list) {
  memset(list, 0, sizeof *list);
  char device_token[128] = VOLT8_TUNING_ANY_DEVICE;
  if (device_name) volt8_tuning_device_token(device_name, device_token, sizeof device_token);
  int failed = 0;
  const char *dir = getenv(VOLT8_TUNING_DIR_ENV);
  volt8_tuning_dir_check(dir);
  DIR *folder = dir && *dir ? opendir(dir) : NULL;
  for (struct dirent *entry; folder && !failed && (entry = readdir(folder));)
    failed = consider(list, entry->d_name, NULL, arch, device_token) != 0;
  if (folder) closedir(folder);
  int32_t from_dir = list->count;
  size_t prefix = strlen(VOLT8_TUNING_BUILT_IN_PREFIX);
  for (const volt8_embedded_file *file = volt8_embedded_files; !failed && volt8_tuning_built_in() && file->path; file++)
    if (strncmp(file->path, VOLT8_TUNING_BUILT_IN_PREFIX, prefix) == 0)
      failed = consider(list, file->path + prefix, file, arch, device_token) != 0;
  if (failed) {
    free(list->tables);
    memset(list, 0, sizeof *list);
    return volt8_fail(NULL, VOLT8_ERR_OUT_OF_MEMORY, "out of memory listing the tuning tables");
  }
  qsort(list->tables, (size_t)from_dir, sizeof *list->tables, compare_names);
  qsort(list->tables + from_dir, (size_t)(list->count - from_dir), sizeof *list->tables, compare_names);
  return VOLT8_OK;
}

volt8_status volt8_tuning_table_count(int32_t arch, const char *device_name, int32_t *out_count) {
  if (!out_count) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_tuning_table_count: out_count is NULL");
  table_list list;
  volt8_status status = make_list(arch, device_name, &list);
  *out_count = list.count;
  free(list.tables);
  return status;
}

/* Reads and parses the table at `path` (its origin, whole) into `info` (valid, its token counts, measured and top-k, or the problem). */
static void read_table(const listed_table *table, const char *path, volt8_tuning_table_info *info) {
  volt8_ctx *scratch = calloc(1, sizeof *scratch); /* a table's problem is reported in info, not as an error */
  if (!scratch) {
    snprintf(info->problem, sizeof info->problem, "out of memory reading it");
    return;
  }
  char *text = NULL;
  size_t length = 0;
  int missing = 0;
  volt8_status status = VOLT8_OK;
  if (table->built_in) {
    length = table->built_in->size;
  } else {
    status = volt8_tuning_read_file(scratch, path, &text, &length, &missing);
    if (status == VOLT8_OK && missing) status = volt8_fail(scratch, VOLT8_ERR_IO, "%s: removed while listed", path);
  }
  volt8_tuning_table parsed;
  if (status == VOLT8_OK)
    status = volt8_tuning_table_parse(scratch, table->built_in ? table->built_in->data : text, length, path,
                                      info->op, &parsed);
  if (status == VOLT8_OK) {
    info->valid = 1;
    info->token_counts = parsed.count;
    info->measured = parsed.measured;
    info->top_k = parsed.top_k;
    info->m_min = parsed.entries[0].m; /* parse sorts the entries by M and refuses a table of none */
    info->m_max = parsed.entries[parsed.count - 1].m;
    volt8_tuning_table_free(&parsed);
  } else {
    volt8_copy_text(info->problem, sizeof info->problem, scratch->last_error);
  }
  free(text);
  free(scratch);
}

volt8_status volt8_tuning_table_get(int32_t arch, const char *device_name, int32_t index, volt8_tuning_table_info *out) {
  if (!out || out->size < sizeof(size_t))
    return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_tuning_table_get: out is NULL or out->size unset (VOLT8_TUNING_TABLE_INFO_INIT)");
  table_list list;
  volt8_status status = make_list(arch, device_name, &list);
  if (status == VOLT8_OK && (index < 0 || index >= list.count))
    status = volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_tuning_table_get: index %d is outside 0..%d", (int)index,
                        list.count - 1);
  if (status == VOLT8_OK) {
    const listed_table *table = &list.tables[index];
    volt8_tuning_table_info info = VOLT8_TUNING_TABLE_INFO_INIT;
    parse_name(table->name, &info);
    info.built_in = table->built_in != NULL;
    char origin[8192];
    if (table->built_in) snprintf(origin, sizeof origin, "built-in:%s", table->built_in->path);
    else snprintf(origin, sizeof origin, "%s/%s", getenv(VOLT8_TUNING_DIR_ENV), table->name);
    volt8_copy_text(info.origin, sizeof info.origin, origin);
    read_table(table, origin, &info);
    volt8_copy_sized_output(out, &info, sizeof info);
  }
  free(list.tables);
  return status;
}
