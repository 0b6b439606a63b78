/* Tuning tables: names, parsing, lookup (VOLT8_TUNING_DIR, then built in), and the warnings a
 * missing or invalid table leaves. The format and the lookup order are documented in tuning.h. */
#include "dispatch/tuning.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/ctx_internal.h"
#include "core/embedded_files.h"
#include "core/files.h"
#include "core/json_strict.h"
#include "core/work_counts.h"

#define MAX_WARNINGS 64
#define WARNING_BYTES 1024
#define MAX_ENTRIES 4096

static pthread_mutex_t warnings_lock = PTHREAD_MUTEX_INITIALIZER;
static char warning_keys[MAX_WARNINGS][VOLT8_TUNING_ORIGIN_BYTES];
static char warning_texts[MAX_WARNINGS][WARNING_BYTES];
static int32_t warning_count;
static int32_t warnings_dropped; /* distinct warnings past MAX_WARNINGS */

void volt8_tuning_warn(const char *key, const char *fmt, ...) {
  pthread_mutex_lock(&warnings_lock);
  int known = 0;
  for (int32_t i = 0; i < warning_count && !known; i++) known = strcmp(warning_keys[i], key) == 0;
  if (!known && warning_count == MAX_WARNINGS) {
    warnings_dropped++;
  } else if (!known) {
    snprintf(warning_keys[warning_count], VOLT8_TUNING_ORIGIN_BYTES, "%s", key);
    va_list args;
    va_start(args, fmt);
    vsnprintf(warning_texts[warning_count], WARNING_BYTES, fmt, args);
    va_end(args);
    warning_count++;
  }
  pthread_mutex_unlock(&warnings_lock);
}

void volt8_tuning_warnings_reset(void) {
  pthread_mutex_lock(&warnings_lock);
  warning_count = 0;
  warnings_dropped = 0;
  pthread_mutex_unlock(&warnings_lock);
}

volt8_status volt8_tuning_warnings(char *buf, size_t buf_size, int32_t *out_count) {
  if (!buf && buf_size != 0) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_tuning_warnings: buf is NULL");
  pthread_mutex_lock(&warnings_lock);
  size_t used = 0;
  if (buf_size) buf[0] = '\0';
  for (int32_t i = 0; i < warning_count && used + 1 < buf_size; i++) {
    int written = snprintf(buf + used, buf_size - used, "%s\n", warning_texts[i]);
    used += written > 0 ? (size_t)written : 0;
    if (used >= buf_size) used = buf_size - 1;
  }
  if (warnings_dropped && used + 1 < buf_size)
    snprintf(buf + used, buf_size - used, "(%d more tuning warnings not kept)\n", warnings_dropped);
  if (out_count) *out_count = warning_count + warnings_dropped;
  pthread_mutex_unlock(&warnings_lock);
  return VOLT8_OK;
}

void volt8_tuning_match_set(volt8_tuning_match *out, int32_t source, const volt8_tuning_entry *entry, const char *origin) {
  out->source = source;
  out->table_m = entry->m;
  snprintf(out->variant, sizeof out->variant, "%s", entry->variant);
  snprintf(out->origin, sizeof out->origin, "%s", origin);
}

const char *volt8_tuning_op_name(volt8_op op) {
  return op == VOLT8_OP_GATE_UP ? "gate_up" : op == VOLT8_OP_DOWN ? "down" : NULL;
}

volt8_status volt8_tuning_op_dims(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_op op, int32_t *out_n,
                                  int32_t *out_k) {
  if (!shape || !out_n || !out_k)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_tuning_op_dims: NULL argument");
  if (op == VOLT8_OP_GATE_UP) {
    *out_n = 2 * shape->intermediate;
    *out_k = shape->hidden;
  } else if (op == VOLT8_OP_DOWN) {
    *out_n = shape->hidden;
    *out_k = shape->intermediate;
  } else {
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_tuning_op_dims: op %d has no tuning table", (int)op);
  }
  return VOLT8_OK;
}

void volt8_tuning_device_token(const char *device_name, char *buf, size_t buf_size) {
  if (!buf || buf_size == 0) return;
  size_t used = 0;
  for (const char *c = device_name ? device_name : ""; *c && used + 1 < buf_size; c++) {
    int keep = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '.' ||
               *c == '_' || *c == '-';
    buf[used++] = keep ? *c : '_';
  }
  buf[used] = '\0';
  if (used == 0) snprintf(buf, buf_size, "unknown");
}

volt8_status volt8_tuning_table_name(volt8_ctx *ctx, const char *op_name, int32_t n, int32_t k, int32_t block_n,
                                     int32_t block_k, int32_t arch, const char *device_token, char *buf,
                                     size_t buf_size) {
  if (!op_name || !device_token || !buf)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_tuning_table_name: NULL argument");
  int written = snprintf(buf, buf_size, "op=%s,N=%d,K=%d,block=%dx%d,arch=sm_%d,device=%s.json", op_name, n, k,
                         block_n, block_k, arch, device_token);
  if (written < 0 || (size_t)written >= buf_size)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "tuning table name for op %s does not fit in %zu bytes", op_name,
                      buf_size);
  return VOLT8_OK;
}

void volt8_tuning_table_free(volt8_tuning_table *table) {
  if (!table) return;
  free(table->entries);
  memset(table, 0, sizeof *table);
}

/* 1 for "1", "64"...: digits only, no sign, no leading zero, within VOLT8_TUNING_MAX_M. */
static int parse_m_key(const char *key, int32_t *out_m) {
  if (!key[0] || key[0] == '0') return 0;
  int64_t value = 0;
  for (const char *c = key; *c; c++) {
    if (*c < '0' || *c > '9') return 0;
    value = value * 10 + (*c - '0');
    if (value > VOLT8_TUNING_MAX_M) return 0;
  }
  *out_m = (int32_t)value;
  return 1;
}

static int is_variant_text(const char *name) {
  for (const char *c = name; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == '.')) return 0;
  return name[0] != '\0';
}

static int compare_entries(const void *a, const void *b) {
  int32_t left = ((const volt8_tuning_entry *)a)->m, right = ((const volt8_tuning_entry *)b)->m;
  return (left > right) - (left < right);
}

/* 1 when item is a number holding an int32 exactly; the range is checked before the cast (UB outside it). */
static int json_int32(const cJSON *item, int32_t *out) {
  if (!cJSON_IsNumber(item)) return 0;
  double value = item->valuedouble;
  if (!(value >= INT32_MIN && value <= INT32_MAX) || value != (double)(int32_t)value) return 0;
  *out = (int32_t)value;
  return 1;
}

/* Reads an optional positive integer field of __metadata__ into *out (0 when absent). */
static volt8_status metadata_int(volt8_ctx *ctx, const cJSON *metadata, const char *field, const char *origin,
                                 int32_t *out) {
  *out = 0;
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(metadata, field);
  if (!item) return VOLT8_OK;
  int32_t value = 0;
  if (!json_int32(item, &value) || value < 1)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "tuning table %s: __metadata__.%s must be a positive integer", origin,
                      field);
  *out = value;
  return VOLT8_OK;
}

static volt8_status parse_metadata(volt8_ctx *ctx, const cJSON *root, const char *origin, volt8_tuning_table *table) {
  const cJSON *metadata = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
  if (!cJSON_IsObject(metadata))
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "tuning table %s: no \"__metadata__\" object", origin);
  int32_t version = 0;
  if (!json_int32(cJSON_GetObjectItemCaseSensitive(metadata, "schema_version"), &version))
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "tuning table %s: __metadata__.schema_version is missing or not an integer",
                      origin);
  if (version != VOLT8_TUNING_SCHEMA_VERSION)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "tuning table %s: schema_version %d, this library reads version %d",
                      origin, version, VOLT8_TUNING_SCHEMA_VERSION);
  table->schema_version = VOLT8_TUNING_SCHEMA_VERSION;
  volt8_status status = metadata_int(ctx, metadata, "top_k", origin, &table->top_k);
  if (status != VOLT8_OK) return status;
  const cJSON *measured = cJSON_GetObjectItemCaseSensitive(metadata, "measured");
  if (measured && !cJSON_IsBool(measured))
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "tuning table %s: __metadata__.measured must be true or false", origin);
  table->measured = measured ? cJSON_IsTrue(measured) : -1;
  const cJSON *experts = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(metadata, "shape"),
                                                          "num_experts");
  table->num_experts = cJSON_IsNumber(experts) && experts->valuedouble >= 1 && experts->valuedouble <= 1 << 20
                           ? (int32_t)experts->valuedouble : 0;
  return VOLT8_OK;
}

static volt8_status parse_entry(volt8_ctx *ctx, const cJSON *item, const char *origin, const char *op_name,
                                volt8_tuning_entry *entry) {
  if (!parse_m_key(item->string, &entry->m))
    return volt8_fail(ctx, VOLT8_ERR_FORMAT,
                      "tuning table %s: key \"%s\" is neither __metadata__ nor a token count (1..%d, no leading zeros)",
                      origin, item->string, VOLT8_TUNING_MAX_M);
  const cJSON *name = cJSON_IsObject(item) ? cJSON_GetObjectItemCaseSensitive(item, "variant") : item;
  if (!cJSON_IsString(name))
    return volt8_fail(ctx, VOLT8_ERR_FORMAT,
                      "tuning table %s: M=%s must be a variant name or an object with a \"variant\" string", origin,
                      item->string);
  const char *variant = name->valuestring;
  volt8_op named_op;
  if (strlen(variant) >= VOLT8_VARIANT_NAME_BYTES || !is_variant_text(variant))
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "tuning table %s: M=%s names \"%.120s\", which is not a variant name",
                      origin, item->string, variant);
  if (!volt8_variant_name_op(variant, &named_op) || strcmp(volt8_tuning_op_name(named_op), op_name) != 0)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "tuning table %s: M=%s names %s, which is not a %s variant", origin,
                      item->string, variant, op_name);
  snprintf(entry->variant, sizeof entry->variant, "%s", variant);
  return VOLT8_OK;
}

volt8_status volt8_tuning_table_parse(volt8_ctx *ctx, const char *text, size_t length, const char *origin,
                                      const char *op_name, volt8_tuning_table *out_table) {
  if (!text || !origin || !op_name || !out_table)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_tuning_table_parse: NULL argument");
  memset(out_table, 0, sizeof *out_table);
  volt8_count_tuning_read();
  if (length > VOLT8_TUNING_MAX_TABLE_BYTES)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "tuning table %s: %zu bytes, more than the %d a table may hold", origin,
                      length, VOLT8_TUNING_MAX_TABLE_BYTES);
  cJSON *root = NULL;
  volt8_status status = volt8_json_parse_object(ctx, origin, "tuning table", text, length, 0, &root);
  if (status != VOLT8_OK) return status;
  if (status == VOLT8_OK) status = parse_metadata(ctx, root, origin, out_table);
  int32_t capacity = status == VOLT8_OK ? cJSON_GetArraySize(root) : 0;
  if (status == VOLT8_OK && capacity > MAX_ENTRIES + 1)
    status = volt8_fail(ctx, VOLT8_ERR_FORMAT, "tuning table %s: more than %d token counts", origin, MAX_ENTRIES);
  if (status == VOLT8_OK && !(out_table->entries = calloc((size_t)capacity, sizeof *out_table->entries)))
    status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "tuning table %s: out of memory", origin);
  for (const cJSON *item = root->child; status == VOLT8_OK && item; item = item->next) {
    if (strcmp(item->string, "__metadata__") == 0) continue;
    status = parse_entry(ctx, item, origin, op_name, &out_table->entries[out_table->count]);
    if (status == VOLT8_OK) out_table->count++;
  }
  cJSON_Delete(root);
  if (status == VOLT8_OK && out_table->count == 0)
    status = volt8_fail(ctx, VOLT8_ERR_FORMAT, "tuning table %s: holds no token counts", origin);
  if (status == VOLT8_OK) {
    qsort(out_table->entries, (size_t)out_table->count, sizeof *out_table->entries, compare_entries);
    for (int32_t i = 1; i < out_table->count && status == VOLT8_OK; i++)
      if (out_table->entries[i].m == out_table->entries[i - 1].m)
        status = volt8_fail(ctx, VOLT8_ERR_FORMAT, "tuning table %s: M=%d appears twice", origin,
                            out_table->entries[i].m);
  }
  if (status != VOLT8_OK) volt8_tuning_table_free(out_table);
  return status;
}

/* The count in the table's units: routed pairs (M x top_k) when the table was measured at another
 * top_k, tokens otherwise; *scale turns the table's M into the same units. */
static int64_t count_in_table_units(const volt8_tuning_table *table, int32_t num_tokens, int32_t top_k, int64_t *scale) {
  int by_pairs = table->top_k > 0 && top_k > 0 && table->top_k != top_k;
  *scale = by_pairs ? table->top_k : 1;
  return by_pairs ? (int64_t)num_tokens * top_k : num_tokens;
}

const volt8_tuning_entry *volt8_tuning_table_nearest(const volt8_tuning_table *table, int32_t num_tokens,
                                                     int32_t top_k) {
  if (!table || table->count == 0) return NULL;
  int64_t scale = 1, wanted = count_in_table_units(table, num_tokens, top_k, &scale);
  const volt8_tuning_entry *best = NULL;
  int64_t best_distance = 0;
  for (int32_t i = 0; i < table->count; i++) {
    int64_t key = (int64_t)table->entries[i].m * scale;
    int64_t distance = key > wanted ? key - wanted : wanted - key;
    if (!best || distance < best_distance) { /* ascending M: a tie keeps the smaller */
      best = &table->entries[i];
      best_distance = distance;
    }
  }
  return best;
}

int volt8_tuning_table_covers(const volt8_tuning_table *table, int32_t num_tokens, int32_t top_k) {
  if (!table || table->count == 0 || num_tokens <= 0) return 0;
  int64_t scale = 1, wanted = count_in_table_units(table, num_tokens, top_k, &scale);
  /* parse sorts the entries by M */
  return (int64_t)table->entries[0].m * scale <= 2 * wanted && (int64_t)table->entries[table->count - 1].m * scale >= wanted;
}

volt8_status volt8_tuning_read_file(volt8_ctx *ctx, const char *path, char **out_text, size_t *out_length,
                                    int *out_missing) {
  volt8_count_tuning_read();
  return volt8_read_regular(ctx, path, VOLT8_TUNING_MAX_TABLE_BYTES, out_text, out_length, out_missing);
}

static atomic_int built_in_enabled = 1;

void volt8_tuning_set_built_in(int enabled) { atomic_store(&built_in_enabled, enabled != 0); }

int volt8_tuning_built_in(void) { return atomic_load(&built_in_enabled); }

void volt8_tuning_dir_check(const char *dir) {
  if (!dir || !*dir) return;
  struct stat info;
  int found = stat(dir, &info) == 0;
  const char *why = found ? "" : strerror(errno);
  char key[VOLT8_TUNING_ORIGIN_BYTES];
  snprintf(key, sizeof key, "%s=%.900s", VOLT8_TUNING_DIR_ENV, dir);
  if (found && S_ISDIR(info.st_mode)) {
    DIR *folder = opendir(dir); /* a folder the process may not list serves no table either */
    if (folder) {
      closedir(folder);
      return;
    }
    volt8_tuning_warn(key, "%s=%.900s cannot be read (%s): no table is read from it", VOLT8_TUNING_DIR_ENV, dir,
                      strerror(errno));
    return;
  }
  if (found)
    volt8_tuning_warn(key, "%s=%.900s is not a directory (it is a %s): no table is read from it", VOLT8_TUNING_DIR_ENV,
                      dir, volt8_file_type_name(info.st_mode));
  else
    volt8_tuning_warn(key, "%s=%.900s is not a directory (%s): no table is read from it", VOLT8_TUNING_DIR_ENV, dir,
                      why);
}

void volt8_tuning_loaded_free(volt8_tuning_loaded *loaded) {
  if (loaded) volt8_tuning_table_free(&loaded->table);
}
