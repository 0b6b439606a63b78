/* Nearest tabled shape: the dispatch fallback for shapes without a table (tuning_nearest.h). */
#include "dispatch/tuning_nearest.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx_internal.h"
#include "core/embedded_files.h"
#include "core/work_counts.h"
#include "moe/kernels/moe_layout.h"


typedef struct candidate {
  char name[VOLT8_TUNING_NAME_BYTES];
  const volt8_embedded_file *built_in; /* NULL: a file in $VOLT8_TUNING_DIR */
  int device_rank;                     /* 0 this device, 1 any device, 2 another device */
  double distance;
} candidate;

typedef struct wanted_table {
  const char *op_name, *device_token;
  int32_t n, k, block_n, block_k, arch;
} wanted_table;

/* Fills `out` from a table name that matches `wanted` except in N, K and device; 0 otherwise. */
static int consider(const char *name, const wanted_table *wanted, candidate *out) {
  char op[16];
  int32_t n = 0, k = 0, block_n = 0, block_k = 0, arch = 0;
  int device_at = 0;
  size_t length = strlen(name);
  if (length >= sizeof out->name || length < 5 || strcmp(name + length - 5, ".json") != 0) return 0;
  if (sscanf(name, "op=%15[^,],N=%d,K=%d,block=%dx%d,arch=sm_%d,device=%n", op, &n, &k, &block_n, &block_k, &arch,
             &device_at) != 6 || device_at == 0)
    return 0;
  if (strcmp(op, wanted->op_name) != 0 || block_n != wanted->block_n || block_k != wanted->block_k ||
      arch != wanted->arch || n <= 0 || k <= 0)
    return 0;
  const char *device = name + device_at;
  size_t device_length = length - 5 - (size_t)device_at;
  int this_device = strlen(wanted->device_token) == device_length && strncmp(device, wanted->device_token, device_length) == 0;
  int any_device = device_length == strlen(VOLT8_TUNING_ANY_DEVICE) &&
                   strncmp(device, VOLT8_TUNING_ANY_DEVICE, device_length) == 0;
  snprintf(out->name, sizeof out->name, "%s", name);
  out->device_rank = this_device ? 0 : any_device ? 1 : 2;
  out->distance = fabs(log((double)n / wanted->n)) + fabs(log((double)k / wanted->k));
  return 1;
}

static int compare_candidates(const void *a, const void *b) {
  const candidate *left = a, *right = b;
  if (left->device_rank != right->device_rank) return left->device_rank - right->device_rank;
  if (left->distance != right->distance) return left->distance < right->distance ? -1 : 1;
  if (!left->built_in != !right->built_in) return left->built_in ? 1 : -1; /* $VOLT8_TUNING_DIR first */
  return strcmp(left->name, right->name);
}

typedef struct candidate_list {
  candidate *items;
  int32_t count, capacity;
} candidate_list;

/* Adds `name` when it matches `wanted`; 0 when the list could not grow (memory). The list grows as
 * the folder does: every matching table is ranked, however many there are. */
static int add_candidate(candidate_list *list, const char *name, const volt8_embedded_file *built_in,
                         const wanted_table *wanted) {
  if (list->count == list->capacity) {
    int32_t capacity = list->capacity ? 2 * list->capacity : 16;
    candidate *grown = list->capacity < INT32_MAX / 2 ? realloc(list->items, (size_t)capacity * sizeof *grown) : NULL;
    if (!grown) return 0;
    list->items = grown;
    list->capacity = capacity;
  }
  list->items[list->count].built_in = built_in;
  list->count += consider(name, wanted, &list->items[list->count]);
  return 1;
}

/* Every table of $VOLT8_TUNING_DIR and built in that matches `wanted`, best first; 0 when out of memory. */
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
  if (grown) qsort(out->items, (size_t)out->count, sizeof *out->items, compare_candidates);
  return grown;
}

/* The token count of a table measured at (table_top_k, table_experts) with the routed pairs per
 * expert that num_tokens gives at (top_k, experts). */
static int32_t scaled_tokens(int32_t num_tokens, int32_t top_k, int32_t experts, int32_t table_top_k,
                             int32_t table_experts) {
  double pairs_per_expert = (double)num_tokens * top_k / experts;
  double tokens = pairs_per_expert * (table_experts > 0 ? table_experts : experts) / (table_top_k > 0 ? table_top_k : top_k);
  return tokens < 1.0 ? 1 : tokens > VOLT8_TUNING_MAX_M ? VOLT8_TUNING_MAX_M : (int32_t)lround(tokens);
}

/* Reads one candidate into out (source NEAREST) and marks the entries ctx's target arch may serve:
 * one of `variants`, of a family it does not emulate. 0 when the table is missing or skipped (with a
 * warning); -1 when out of memory. `scratch` takes the messages of a table that is skipped. */
static int read_candidate(volt8_ctx *ctx, volt8_ctx *scratch, const candidate *table_file, const char *dir,
                          const char *op_name, const volt8_variant *variants, int32_t count, volt8_nearest_table *out) {
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
    } else if (!(out->usable = calloc((size_t)out->loaded.table.count, sizeof *out->usable))) {
      volt8_tuning_table_free(&out->loaded.table);
      read = -1;
    } else {
      out->loaded.source = VOLT8_TUNING_SOURCE_NEAREST;
      for (int32_t i = 0; i < out->loaded.table.count; i++) {
        int32_t index = volt8_variant_find(variants, count, out->loaded.table.entries[i].variant);
        out->usable[i] = index >= 0 && !volt8_variant_emulated(&variants[index], ctx->target_arch) ? index : -1;
      }
      read = 1;
    }
  }
  free(owned);
  return read;
}

/* 1 when the table serves every count: each entry usable, and its range begins at M = 1 or 2. */
static int serves_every_count(const volt8_nearest_table *table) {
  for (int32_t i = 0; i < table->loaded.table.count; i++)
    if (table->usable[i] < 0) return 0;
  return !volt8_tuning_table_begins_above(&table->loaded.table, 1, 0, 2);
}

void volt8_tuning_nearest_free(volt8_nearest_tables *tables) {
  if (!tables) return;
  for (int32_t i = 0; i < tables->count; i++) {
    volt8_tuning_loaded_free(&tables->tables[i].loaded);
    free(tables->tables[i].usable);
  }
  free(tables->tables);
  memset(tables, 0, sizeof *tables);
}

volt8_status volt8_tuning_nearest_load(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_op op,
                                       const volt8_variant *variants, int32_t count, volt8_nearest_tables *out) {
  if (!ctx || !shape || !out || (!variants && count > 0))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_tuning_nearest_load: NULL argument");
  memset(out, 0, sizeof *out);
  /* routing density: the model's experts, also on a rank of expert parallelism */
  out->experts = volt8_moe_global_experts(shape);
  wanted_table wanted = {volt8_tuning_op_name(op), NULL, 0, 0, shape->block_n, shape->block_k, ctx->target_arch};
  volt8_status status = volt8_tuning_op_dims(ctx, shape, op, &wanted.n, &wanted.k);
  if (status != VOLT8_OK) return status;
  if (shape->num_experts <= 0 || wanted.n <= 0 || wanted.k <= 0) return VOLT8_OK;
  char device_token[128];
  volt8_tuning_device_token(ctx->device_name, device_token, sizeof device_token);
  wanted.device_token = device_token;
  candidate_list candidates = {NULL, 0, 0};
  volt8_ctx *scratch = calloc(1, sizeof *scratch);
  const char *dir = getenv(VOLT8_TUNING_DIR_ENV);
  int gathered = scratch && gather(&wanted, dir, &candidates);
  out->tables = gathered ? calloc(candidates.count > 0 ? (size_t)candidates.count : 1, sizeof *out->tables) : NULL;
  if (!out->tables) status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the nearest tuning table's candidates");
  /* In the candidates' order, up to the first that serves every count (no later one is ever picked in
   * pass 1), and past it the shape's own tables from other devices, which pass 0 serves first: a table
   * of this device for another shape that serves every count must not hide them. */
  int complete = 0;
  for (int32_t i = 0; i < candidates.count && status == VOLT8_OK; i++) {
    int own_elsewhere = candidates.items[i].distance == 0.0 && candidates.items[i].device_rank == 2;
    if (complete && !own_elsewhere) continue;
    int read =
        read_candidate(ctx, scratch, &candidates.items[i], dir, wanted.op_name, variants, count, &out->tables[out->count]);
    if (read < 0) status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the nearest tuning table");
    if (read > 0) out->tables[out->count].same_shape_elsewhere = own_elsewhere;
    if (read > 0 && serves_every_count(&out->tables[out->count++])) complete = 1;
  }
  free(candidates.items);
  free(scratch);
  if (status != VOLT8_OK) volt8_tuning_nearest_free(out);
  return status;
}

/* The entry of one candidate for num_tokens (at top_k, of a model of `experts`), or NULL: reach as in
 * volt8_tuning_table_begins_above; within_range also leaves out counts above its largest M. */
static const volt8_tuning_entry *candidate_pick(const volt8_nearest_table *candidate, int32_t num_tokens, int32_t top_k,
                                                int32_t experts, int32_t reach, int within_range) {
  const volt8_tuning_table *table = &candidate->loaded.table;
  int32_t table_top_k = table->top_k > 0 ? table->top_k : top_k;
  int32_t tokens = scaled_tokens(num_tokens, top_k, experts, table_top_k, table->num_experts);
  if (volt8_tuning_table_begins_above(table, tokens, table_top_k, reach)) return NULL; /* its range begins above */
  if (within_range && table->count > 0 && table->entries[table->count - 1].m < tokens) return NULL; /* sorted by M */
  const volt8_tuning_entry *entry = volt8_tuning_table_nearest(table, tokens, table_top_k);
  if (candidate->usable[entry - table->entries] < 0) {
    /* A tile that does not fit here (its shared memory at this K, say) gives way to the same
     * table's entry at the nearest M whose tile fits, within a factor of two of the scaled
     * count; otherwise the next table serves. */
    entry = volt8_tuning_table_nearest_among(table, candidate->usable, tokens, table_top_k);
    if (entry && ((int64_t)entry->m > 2 * (int64_t)tokens || 2 * (int64_t)entry->m < tokens)) entry = NULL;
  }
  return entry;
}

const volt8_tuning_entry *volt8_tuning_nearest_pick(const volt8_nearest_tables *tables, int32_t num_tokens,
                                                   int32_t top_k, int32_t *out_index, const char **out_origin) {
  if (num_tokens <= 0 || top_k <= 0) return NULL;
  /* Pass 0: the shape's own tables from other devices, inside their range; pass 1: every candidate
   * in its order, another shape's from its smallest M on. */
  for (int pass = 0; pass < 2; pass++)
    for (int32_t i = 0; i < tables->count; i++) {
      const volt8_nearest_table *candidate = &tables->tables[i];
      if (pass == 0 && !candidate->same_shape_elsewhere) continue;
      const volt8_tuning_entry *entry =
          candidate_pick(candidate, num_tokens, top_k, tables->experts, pass == 0 ? 2 : 1, pass == 0);
      if (entry) {
        if (out_index) *out_index = candidate->usable[entry - candidate->loaded.table.entries];
        if (out_origin) *out_origin = candidate->loaded.origin;
        return entry;
      }
    }
  return NULL;
}

volt8_status volt8_tuning_nearest(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_op op, int32_t num_tokens,
                                  int32_t top_k, const volt8_variant *variants, int32_t count,
                                  volt8_tuning_match *out_match) {
  if (!ctx || !shape || !out_match || (!variants && count > 0))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_tuning_nearest: NULL argument");
  memset(out_match, 0, sizeof *out_match);
  volt8_nearest_tables tables;
  volt8_status status = volt8_tuning_nearest_load(ctx, shape, op, variants, count, &tables);
  if (status != VOLT8_OK) return status;
  const char *origin = NULL;
  const volt8_tuning_entry *entry = volt8_tuning_nearest_pick(&tables, num_tokens, top_k, NULL, &origin);
  if (entry) volt8_tuning_match_set(out_match, VOLT8_TUNING_SOURCE_NEAREST, entry, origin);
  volt8_tuning_nearest_free(&tables);
  return VOLT8_OK;
}
