/* Tuning tables on disk: render, merge with what is there, replace atomically. */
#include "table_io.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"
#include "write_file.h"

#define MAX_RUNS_KEPT 64

typedef struct keyed_entry {
  int32_t m;
  cJSON *value;
} keyed_entry;

/* Microseconds to two decimals, so tables diff cleanly. */
static double rounded(double value) { return round(value * 100.0) / 100.0; }

static cJSON *entry_json(const tuning_result_entry *entry, int measured) {
  cJSON *object = cJSON_CreateObject();
  cJSON_AddStringToObject(object, "variant", entry->variant);
  cJSON_AddNumberToObject(object, measured ? "forward_us" : "model_us", rounded(entry->forward_us));
  if (isfinite(entry->relative_l2)) {
    char text[32];
    snprintf(text, sizeof text, "%.2e", entry->relative_l2);
    cJSON_AddNumberToObject(object, "relative_l2", strtod(text, NULL));
  }
  if (entry->paired_with[0]) cJSON_AddStringToObject(object, "paired_with", entry->paired_with);
  if (entry->runner_up[0]) {
    cJSON_AddStringToObject(object, "runner_up", entry->runner_up);
    cJSON_AddNumberToObject(object, measured ? "runner_up_us" : "runner_up_model_us", rounded(entry->runner_up_us));
  }
  cJSON_AddNumberToObject(object, "candidates", entry->candidates);
  cJSON_AddNumberToObject(object, "rejected", entry->rejected);
  return object;
}

static cJSON *run_json(const tuning_table_metadata *metadata, const tuning_result_entry *entries, int32_t count) {
  cJSON *run = cJSON_CreateObject();
  cJSON_AddStringToObject(run, "date", metadata->date);
  cJSON_AddStringToObject(run, "command", metadata->command);
  cJSON_AddStringToObject(run, "library_version", volt8_version_string());
  cJSON_AddBoolToObject(run, "measured", metadata->measured);
  cJSON *m_values = cJSON_AddArrayToObject(run, "m");
  for (int32_t i = 0; i < count; i++) cJSON_AddItemToArray(m_values, cJSON_CreateNumber(entries[i].m));
  return run;
}

static cJSON *metadata_json(const tuning_table_metadata *metadata, int measured, cJSON *runs) {
  cJSON *object = cJSON_CreateObject();
  char arch[16];
  snprintf(arch, sizeof arch, "sm_%d", metadata->arch);
  cJSON_AddNumberToObject(object, "schema_version", VOLT8_TUNING_SCHEMA_VERSION);
  cJSON_AddStringToObject(object, "library_version", volt8_version_string());
  cJSON_AddStringToObject(object, "nvrtc_version", metadata->nvrtc_version ? metadata->nvrtc_version : "unknown");
  cJSON_AddStringToObject(object, "tuner_command", metadata->command);
  cJSON_AddStringToObject(object, "date", metadata->date);
  cJSON_AddStringToObject(object, "device", metadata->device);
  cJSON_AddStringToObject(object, "arch", arch);
  cJSON_AddStringToObject(object, "op", metadata->op);
  cJSON_AddNumberToObject(object, "N", metadata->n);
  cJSON_AddNumberToObject(object, "K", metadata->k);
  cJSON *block = cJSON_AddArrayToObject(object, "block");
  cJSON_AddItemToArray(block, cJSON_CreateNumber(metadata->block_n));
  cJSON_AddItemToArray(block, cJSON_CreateNumber(metadata->block_k));
  cJSON_AddBoolToObject(object, "measured", measured);
  cJSON_AddStringToObject(object, "method", metadata->method);
  cJSON *shape = cJSON_AddObjectToObject(object, "shape");
  cJSON_AddNumberToObject(shape, "hidden", metadata->shape->hidden);
  cJSON_AddNumberToObject(shape, "intermediate", metadata->shape->intermediate);
  cJSON_AddNumberToObject(shape, "num_experts", metadata->shape->num_experts);
  cJSON_AddNumberToObject(shape, "intermediate_offset", metadata->shape->intermediate_offset);
  cJSON_AddNumberToObject(object, "top_k", metadata->top_k);
  cJSON_AddItemToObject(object, "runs", runs);
  return object;
}

static int compare_keyed(const void *a, const void *b) {
  int32_t left = ((const keyed_entry *)a)->m, right = ((const keyed_entry *)b)->m;
  return (left > right) - (left < right);
}

/* One key per line; values compact. Entries must be sorted by M. */
static char *render_root(const cJSON *metadata, const keyed_entry *entries, int32_t count) {
  volt8_text_buffer out = {0};
  volt8_text_printf(&out, "{\n  \"__metadata__\": {\n");
  for (const cJSON *item = metadata->child; item; item = item->next) {
    char *value = cJSON_PrintUnformatted(item);
    volt8_text_printf(&out, "    \"%s\": %s%s\n", item->string, value ? value : "null", item->next ? "," : "");
    cJSON_free(value);
  }
  volt8_text_printf(&out, "  }%s\n", count ? "," : "");
  for (int32_t i = 0; i < count; i++) {
    char *value = cJSON_PrintUnformatted(entries[i].value);
    volt8_text_printf(&out, "  \"%d\": %s%s\n", entries[i].m, value ? value : "null", i + 1 < count ? "," : "");
    cJSON_free(value);
  }
  volt8_text_printf(&out, "}\n");
  return volt8_text_take(&out);
}

char *tuning_table_render(const tuning_table_metadata *metadata, const tuning_result_entry *entries, int32_t count) {
  cJSON *runs = cJSON_CreateArray();
  cJSON_AddItemToArray(runs, run_json(metadata, entries, count));
  cJSON *meta = metadata_json(metadata, metadata->measured, runs);
  keyed_entry *keyed = calloc((size_t)(count ? count : 1), sizeof *keyed);
  char *text = NULL;
  if (keyed) {
    for (int32_t i = 0; i < count; i++) keyed[i] = (keyed_entry){entries[i].m, entry_json(&entries[i], metadata->measured)};
    qsort(keyed, (size_t)count, sizeof *keyed, compare_keyed);
    text = render_root(meta, keyed, count);
    for (int32_t i = 0; i < count; i++) cJSON_Delete(keyed[i].value);
  }
  free(keyed);
  cJSON_Delete(meta);
  return text;
}

static char *read_whole(const char *path, size_t *out_length, int *out_missing) {
  *out_missing = 0;
  FILE *file = fopen(path, "rb");
  if (!file) {
    *out_missing = errno == ENOENT;
    return NULL;
  }
  char *text = malloc(VOLT8_TUNING_MAX_TABLE_BYTES + 1);
  size_t length = text ? fread(text, 1, VOLT8_TUNING_MAX_TABLE_BYTES + 1, file) : 0;
  fclose(file);
  if (text) text[length > VOLT8_TUNING_MAX_TABLE_BYTES ? VOLT8_TUNING_MAX_TABLE_BYTES : length] = '\0';
  *out_length = length;
  return text;
}

/* A tuner run rewrites its table after every M: its own earlier record is replaced, not repeated. */
static int same_run(const cJSON *run, const tuning_table_metadata *metadata) {
  const cJSON *date = cJSON_GetObjectItemCaseSensitive(run, "date");
  const cJSON *command = cJSON_GetObjectItemCaseSensitive(run, "command");
  return cJSON_IsString(date) && cJSON_IsString(command) && strcmp(date->valuestring, metadata->date) == 0 &&
         strcmp(command->valuestring, metadata->command) == 0;
}

static int new_entry_has(const tuning_result_entry *entries, int32_t count, int32_t m) {
  for (int32_t i = 0; i < count; i++)
    if (entries[i].m == m) return 1;
  return 0;
}

/* The existing table (validated) as JSON, or NULL with *out_missing when there is none. */
static volt8_status load_existing(volt8_ctx *ctx, const char *path, const char *op, cJSON **out_root, int *out_missing) {
  *out_root = NULL;
  size_t length = 0;
  char *text = read_whole(path, &length, out_missing);
  if (!text && *out_missing) return VOLT8_OK;
  if (!text) return volt8_fail(ctx, VOLT8_ERR_IO, "tuning table %s exists but cannot be read: %s", path, strerror(errno));
  volt8_tuning_table table;
  volt8_status status = volt8_tuning_table_parse(ctx, text, length, path, op, &table);
  if (status == VOLT8_OK) {
    volt8_tuning_table_free(&table);
    *out_root = cJSON_ParseWithLength(text, length);
    if (!*out_root) status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "tuning table %s: out of memory", path);
  } else {
    volt8_fail_append(ctx, status, "\n  (not merging into it: move it away or fix it, then run the tuner again)");
  }
  free(text);
  return status;
}

volt8_status tuning_table_path(volt8_ctx *ctx, const char *dir, const char *op, int32_t n, int32_t k, int32_t block_n,
                               int32_t block_k, int32_t arch, const char *device_token, char *out_path,
                               size_t out_path_size) {
  char name[VOLT8_TUNING_NAME_BYTES];
  volt8_status status =
      volt8_tuning_table_name(ctx, op, n, k, block_n, block_k, arch, device_token, name, sizeof name);
  if (status != VOLT8_OK) return status;
  int written = snprintf(out_path, out_path_size, "%s/%s", dir, name);
  if (written < 0 || (size_t)written >= out_path_size)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "tuning table directory %s: path too long", dir);
  return VOLT8_OK;
}

volt8_status tuning_table_merge_write(volt8_ctx *ctx, const char *dir, const tuning_table_metadata *metadata,
                                      const tuning_result_entry *entries, int32_t count, char *out_path,
                                      size_t out_path_size) {
  char path[VOLT8_TUNING_ORIGIN_BYTES];
  volt8_status status = tuning_table_path(ctx, dir, metadata->op, metadata->n, metadata->k, metadata->block_n,
                                          metadata->block_k, metadata->arch, metadata->device_token, path, sizeof path);
  if (status != VOLT8_OK) return status;
  if (out_path) snprintf(out_path, out_path_size, "%s", path);
  cJSON *existing = NULL;
  int missing = 0;
  status = load_existing(ctx, path, metadata->op, &existing, &missing);
  if (status != VOLT8_OK) return status;

  int32_t capacity = count + (existing ? cJSON_GetArraySize(existing) : 0);
  keyed_entry *keyed = calloc((size_t)(capacity ? capacity : 1), sizeof *keyed);
  if (!keyed) {
    cJSON_Delete(existing);
    return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "tuning table %s: out of memory", path);
  }
  int32_t kept = 0;
  int measured = metadata->measured;
  cJSON *runs = cJSON_CreateArray();
  if (existing) {
    const cJSON *old_metadata = cJSON_GetObjectItemCaseSensitive(existing, "__metadata__");
    const cJSON *old_measured = cJSON_GetObjectItemCaseSensitive(old_metadata, "measured");
    const cJSON *old_runs = cJSON_GetObjectItemCaseSensitive(old_metadata, "runs");
    int old_run_count = cJSON_IsArray(old_runs) ? cJSON_GetArraySize(old_runs) : 0;
    int skip = old_run_count > MAX_RUNS_KEPT - 1 ? old_run_count - (MAX_RUNS_KEPT - 1) : 0;
    for (const cJSON *run = cJSON_IsArray(old_runs) ? old_runs->child : NULL; run; run = run->next)
      if (skip-- <= 0 && !same_run(run, metadata)) cJSON_AddItemToArray(runs, cJSON_Duplicate(run, 1));
    for (const cJSON *item = existing->child; item; item = item->next) {
      int32_t m = (int32_t)strtol(item->string, NULL, 10);
      if (strcmp(item->string, "__metadata__") == 0 || new_entry_has(entries, count, m)) continue;
      keyed[kept++] = (keyed_entry){m, cJSON_Duplicate(item, 1)};
      if (cJSON_IsFalse(old_measured)) measured = 0; /* kept entries were derived */
    }
  }
  cJSON_AddItemToArray(runs, run_json(metadata, entries, count));
  for (int32_t i = 0; i < count; i++) keyed[kept++] = (keyed_entry){entries[i].m, entry_json(&entries[i], metadata->measured)};
  qsort(keyed, (size_t)kept, sizeof *keyed, compare_keyed);
  cJSON *meta = metadata_json(metadata, measured, runs);
  char *text = render_root(meta, keyed, kept);
  int error = text ? bench_write_file(path, text) : ENOMEM;
  if (error) status = volt8_fail(ctx, VOLT8_ERR_IO, "writing tuning table %s failed: %s", path, strerror(error));
  free(text);
  cJSON_Delete(meta);
  for (int32_t i = 0; i < kept; i++) cJSON_Delete(keyed[i].value);
  free(keyed);
  cJSON_Delete(existing);
  return status;
}

volt8_status tuning_table_set_metadata(volt8_ctx *ctx, const char *path, const char *op, const char *key, cJSON *value) {
  cJSON *root = NULL;
  int missing = 0;
  volt8_status status = load_existing(ctx, path, op, &root, &missing);
  if (status == VOLT8_OK && missing) status = volt8_fail(ctx, VOLT8_ERR_IO, "tuning table %s does not exist", path);
  if (status != VOLT8_OK) {
    cJSON_Delete(value);
    return status;
  }
  cJSON *metadata = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
  cJSON_DeleteItemFromObjectCaseSensitive(metadata, key);
  cJSON_AddItemToObject(metadata, key, value);
  int32_t count = 0;
  keyed_entry *keyed = calloc((size_t)cJSON_GetArraySize(root) + 1, sizeof *keyed);
  for (cJSON *item = root->child; keyed && item; item = item->next)
    if (item != metadata) keyed[count++] = (keyed_entry){(int32_t)strtol(item->string, NULL, 10), item};
  if (keyed) qsort(keyed, (size_t)count, sizeof *keyed, compare_keyed);
  char *text = keyed ? render_root(metadata, keyed, count) : NULL;
  int error = text ? bench_write_file(path, text) : ENOMEM;
  if (error) status = volt8_fail(ctx, VOLT8_ERR_IO, "writing tuning table %s failed: %s", path, strerror(error));
  free(text);
  free(keyed);
  cJSON_Delete(root);
  return status;
}
