/* The tuning tables of one shape and op, in the lookup's order, and the pick among them
 * (tuning_shape.h). */
#include "dispatch/tuning_shape.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx_internal.h"
#include "core/embedded_files.h"
#include "core/work_counts.h"
#include "moe/kernels/catalogue.h"

typedef struct candidate {
  char name[VOLT8_TUNING_NAME_BYTES];
  const volt8_embedded_file *built_in; /* NULL: a file in $VOLT8_TUNING_DIR */
  int device_rank;                     /* 0 this device, 1 any device, 2 another device */
} candidate;

typedef struct wanted_table {
  const char *op_name, *device_token;
  int32_t n, k, block_n, block_k, arch;
} wanted_table;

/* Fills `out` from a table name of the wanted op, N, K, block and arch, of any device; 0 otherwise. */
static int consider(const char *name, const wanted_table *wanted, candidate *out) {
  char op[16];
  int32_t n = 0, k = 0, block_n = 0, block_k = 0, arch = 0;
  int device_at = 0;
  size_t length = strlen(name);
  if (length >= sizeof out->name || length < 5 || strcmp(name + length - 5, ".json") != 0) return 0;
  if (sscanf(name, "op=%15[^,],N=%d,K=%d,block=%dx%d,arch=sm_%d,device=%n", op, &n, &k, &block_n, &block_k, &arch,
             &device_at) != 6 || device_at == 0)
    return 0;
  if (strcmp(op, wanted->op_name) != 0 || n != wanted->n || k != wanted->k || block_n != wanted->block_n ||
      block_k != wanted->block_k || arch != wanted->arch)
    return 0;
  const char *device = name + device_at;
  size_t device_length = length - 5 - (size_t)device_at;
  if (device_length == 0) return 0;
  int this_device = strlen(wanted->device_token) == device_length && strncmp(device, wanted->device_token, device_length) == 0;
  int any_device = device_length == strlen(VOLT8_TUNING_ANY_DEVICE) &&
                   strncmp(device, VOLT8_TUNING_ANY_DEVICE, device_length) == 0;
  snprintf(out->name, sizeof out->name, "%s", name);
  out->device_rank = this_device ? 0 : any_device ? 1 : 2;
  return 1;
}

static int compare_candidates(const void *a, const void *b) {
  const candidate *left = a, *right = b;
  if (left->device_rank != right->device_rank) return left->device_rank - right->device_rank;
  if (!left->built_in != !right->built_in) return left->built_in ? 1 : -1; /* $VOLT8_TUNING_DIR first */
  return strcmp(left->name, right->name);
}

typedef struct candidate_list {
  candidate *items;
  int32_t count, capacity;
} candidate_list;

/* Adds `name` when it matches `wanted`; 0 when the list could not grow (memory). */
static int add_candidate(candidate_list *list, const char *name, const volt8_embedded_file *built_in,
                         const wanted_table *wanted) {
  if (list->count == list->capacity) {
    int32_t capacity = list->capacity ? 2 * list->capacity : 8;
    candidate *grown = list->capacity < INT32_MAX / 2 ? realloc(list->items, (size_t)capacity * sizeof *grown) : NULL;
    if (!grown) return 0;
    list->items = grown;
    list->capacity = capacity;
  }
  list->items[list->count].built_in = built_in;
  list->count += consider(name, wanted, &list->items[list->count]);
  return 1;
}

/* Every table of $VOLT8_TUNING_DIR and built in that matches `wanted`, in the lookup's order; 0 when out
 * of memory. */
static int gather(const wanted_table *wanted, const char *dir, candidate_list *out) {
  int grown = 1;
  volt8_tuning_dir_check(dir);
  DIR *folder = dir && *dir ? opendir(dir) : NULL;
  if (folder) volt8_count_tuning_read();
  for (struct dirent *entry; grown && folder && (entry = readdir(folder));)
    grown = add_candidate(out, entry->d_name, NULL, wanted);
  if (folder) closedir(folder);
  size_t prefix = strlen(VOLT8_TUNING_BUILT_IN_PREFIX);
  for (const volt8_embedded_file *file = volt8_embedded_files; grown && volt8_tuning_built_in() && file->path; file++)
    if (strncmp(file->path, VOLT8_TUNING_BUILT_IN_PREFIX, prefix) == 0)
      grown = add_candidate(out, file->path + prefix, file, wanted);
  if (grown && out->count > 1) qsort(out->items, (size_t)out->count, sizeof *out->items, compare_candidates);
  return grown;
}

/* Reads one table into out and marks its entries against `variants` (NULL: none marked, all serve). 0
 * when it is missing or skipped (with a warning); -1 when out of memory. `scratch` takes the messages of
 * a table that is skipped. */
static int read_candidate(volt8_ctx *ctx, volt8_ctx *scratch, const candidate *table_file, const char *dir,
                          const char *op_name, const volt8_variant *variants, int32_t count, volt8_shape_table *out) {
  char *origin = out->loaded.origin;
  char *owned = NULL;
  const char *text = NULL;
  size_t length = 0;
  int missing = 0, read = 0;
  if (table_file->built_in) {
    snprintf(origin, VOLT8_TUNING_ORIGIN_BYTES, "built-in:%s", table_file->built_in->path);
    text = table_file->built_in->data;
    length = table_file->built_in->size;
  } else {
    snprintf(origin, VOLT8_TUNING_ORIGIN_BYTES, "%s/%s", dir, table_file->name);
    if (volt8_tuning_read_file(scratch, origin, &owned, &length, &missing) != VOLT8_OK)
      volt8_tuning_warn(origin, "%s; it was skipped", scratch->last_error);
    text = owned;
  }
  if (text && !missing) {
    if (volt8_tuning_table_parse(scratch, text, length, origin, op_name, &out->loaded.table) != VOLT8_OK) {
      volt8_tuning_warn(origin, "%s; it was skipped", scratch->last_error);
    } else if (variants && !(out->usable = calloc((size_t)out->loaded.table.count, sizeof *out->usable))) {
      volt8_tuning_table_free(&out->loaded.table);
      read = -1;
    } else {
      out->loaded.source = table_file->built_in ? VOLT8_TUNING_SOURCE_BUILT_IN : VOLT8_TUNING_SOURCE_ENV_DIR;
      for (int32_t i = 0; variants && i < out->loaded.table.count; i++) {
        int32_t index = volt8_variant_find(variants, count, out->loaded.table.entries[i].variant);
        out->usable[i] = index >= 0 && !volt8_variant_emulated(&variants[index], ctx->target_arch) ? index : -1;
      }
      read = 1;
    }
  }
  free(owned);
  return read;
}

void volt8_shape_tables_free(volt8_shape_tables *tables) {
  if (!tables) return;
  for (int32_t i = 0; i < tables->count; i++) {
    volt8_tuning_loaded_free(&tables->tables[i].loaded);
    free(tables->tables[i].usable);
  }
  free(tables->tables);
  memset(tables, 0, sizeof *tables);
}

volt8_status volt8_shape_tables_load(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_op op,
                                     const volt8_variant *variants, int32_t count, volt8_shape_tables *out) {
  if (!ctx || !shape || !out || (!variants && count > 0))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_shape_tables_load: NULL argument");
  memset(out, 0, sizeof *out);
  wanted_table wanted = {volt8_tuning_op_name(op), NULL, 0, 0, shape->block_n, shape->block_k, ctx->target_arch};
  volt8_status status = volt8_tuning_op_dims(ctx, shape, op, &wanted.n, &wanted.k);
  if (status != VOLT8_OK) return status;
  char device_token[128], name[VOLT8_TUNING_NAME_BYTES];
  volt8_tuning_device_token(ctx->device_name, device_token, sizeof device_token);
  wanted.device_token = device_token;
  status = volt8_tuning_table_name(ctx, wanted.op_name, wanted.n, wanted.k, shape->block_n, shape->block_k,
                                   ctx->target_arch, device_token, name, sizeof name);
  if (status != VOLT8_OK) return status;
  candidate_list candidates = {NULL, 0, 0};
  volt8_ctx *scratch = calloc(1, sizeof *scratch);
  const char *dir = getenv(VOLT8_TUNING_DIR_ENV);
  int gathered = scratch && gather(&wanted, dir, &candidates);
  out->tables = gathered ? calloc(candidates.count > 0 ? (size_t)candidates.count : 1, sizeof *out->tables) : NULL;
  if (!out->tables) status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the tuning tables");
  int this_device = 0;
  for (int32_t i = 0; i < candidates.count && status == VOLT8_OK; i++) {
    int read =
        read_candidate(ctx, scratch, &candidates.items[i], dir, wanted.op_name, variants, count, &out->tables[out->count]);
    if (read < 0) status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for a tuning table");
    if (read > 0) this_device |= candidates.items[i].device_rank < 2, out->count++;
  }
  if (status == VOLT8_OK && !this_device) {
    const char *where = dir && *dir ? " in " VOLT8_TUNING_DIR_ENV " or" : "";
    if (out->count > 0)
      volt8_tuning_warn(name, "no tuning table %s (nor device=%s)%s built in: %s takes the same shape's tables of "
                        "other devices (%s first) where they cover the token count, else the dispatch heuristic",
                        name, VOLT8_TUNING_ANY_DEVICE, where, wanted.op_name, out->tables[0].loaded.origin);
    else
      volt8_tuning_warn(name, "no tuning table %s (nor device=%s)%s built in, nor one of another device: %s uses "
                        "the dispatch heuristic", name, VOLT8_TUNING_ANY_DEVICE, where, wanted.op_name);
  }
  free(candidates.items);
  free(scratch);
  if (status != VOLT8_OK) volt8_shape_tables_free(out);
  return status;
}

const volt8_tuning_entry *volt8_shape_tables_pick(const volt8_shape_tables *tables, int32_t num_tokens, int32_t top_k,
                                                  int32_t *out_index, const volt8_shape_table **out_table) {
  for (int32_t i = 0; tables && i < tables->count; i++) {
    const volt8_shape_table *table = &tables->tables[i];
    if (!volt8_tuning_table_covers(&table->loaded.table, num_tokens, top_k)) continue;
    const volt8_tuning_entry *entry = volt8_tuning_table_nearest(&table->loaded.table, num_tokens, top_k);
    int32_t index = table->usable ? table->usable[entry - table->loaded.table.entries] : -1;
    if (table->usable && index < 0) {
      char key[VOLT8_TUNING_ORIGIN_BYTES + VOLT8_VARIANT_NAME_BYTES + 2];
      snprintf(key, sizeof key, "%s#%s", table->loaded.origin, entry->variant);
      volt8_tuning_warn(key, "tuning table %s names %s (M=%d), which this shape and arch do not serve: the next "
                        "table serves that count, else the dispatch heuristic", table->loaded.origin, entry->variant,
                        entry->m);
      continue;
    }
    if (out_index) *out_index = index;
    if (out_table) *out_table = table;
    return entry;
  }
  return NULL;
}

volt8_status volt8_tuning_lookup(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_op op, int32_t num_tokens,
                                 int32_t top_k, volt8_tuning_match *out_match) {
  if (!ctx || !shape || !out_match)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_tuning_lookup: NULL argument");
  memset(out_match, 0, sizeof *out_match);
  volt8_shape_tables tables;
  volt8_status status = volt8_shape_tables_load(ctx, shape, op, NULL, 0, &tables);
  if (status != VOLT8_OK) return status;
  const volt8_shape_table *table = NULL;
  const volt8_tuning_entry *entry = volt8_shape_tables_pick(&tables, num_tokens, top_k, NULL, &table);
  if (entry) volt8_tuning_match_set(out_match, table->loaded.source, entry, table->loaded.origin);
  volt8_shape_tables_free(&tables);
  return VOLT8_OK;
}
