/* safetensors reader: header validation as strict as the format's reference implementation,
 * data mapped read-only and never copied here. */
#include "checkpoint/safetensors.h"

#include "core/ctx_internal.h"
#include "core/files.h"
#include "core/json_strict.h"
#include "core/numeric.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define INDEX_FILE_NAME "model.safetensors.index.json"
#define MAX_EXACT_JSON_INTEGER 9007199254740992.0 /* 2^53 */

static _Atomic int64_t live_mappings;

int64_t volt8_st_live_mappings(void) { return atomic_load(&live_mappings); }

static const struct { const char *name; int32_t bits; } dtype_table[VOLT8_ST_DTYPE_COUNT] = {
    [VOLT8_ST_BOOL] = {"BOOL", 8},        [VOLT8_ST_F4] = {"F4", 4},
    [VOLT8_ST_F6_E2M3] = {"F6_E2M3", 6},  [VOLT8_ST_F6_E3M2] = {"F6_E3M2", 6},
    [VOLT8_ST_U8] = {"U8", 8},            [VOLT8_ST_I8] = {"I8", 8},
    [VOLT8_ST_F8_E5M2] = {"F8_E5M2", 8},  [VOLT8_ST_F8_E4M3] = {"F8_E4M3", 8},
    [VOLT8_ST_F8_E8M0] = {"F8_E8M0", 8},  [VOLT8_ST_I16] = {"I16", 16},
    [VOLT8_ST_U16] = {"U16", 16},         [VOLT8_ST_F16] = {"F16", 16},
    [VOLT8_ST_BF16] = {"BF16", 16},       [VOLT8_ST_I32] = {"I32", 32},
    [VOLT8_ST_U32] = {"U32", 32},         [VOLT8_ST_F32] = {"F32", 32},
    [VOLT8_ST_C64] = {"C64", 64},         [VOLT8_ST_F64] = {"F64", 64},
    [VOLT8_ST_I64] = {"I64", 64},         [VOLT8_ST_U64] = {"U64", 64},
};

const char *volt8_st_dtype_name(volt8_st_dtype dtype) {
  return (unsigned)dtype < VOLT8_ST_DTYPE_COUNT ? dtype_table[dtype].name : "?";
}

int32_t volt8_st_dtype_bits(volt8_st_dtype dtype) {
  return (unsigned)dtype < VOLT8_ST_DTYPE_COUNT ? dtype_table[dtype].bits : 0;
}

double volt8_st_float_at(volt8_st_dtype dtype, const uint8_t *data, size_t index) {
  uint16_t half;
  float single;
  double wide;
  switch (dtype) {
  case VOLT8_ST_F16: memcpy(&half, data + index * 2, 2); return volt8_half_to_double(half);
  case VOLT8_ST_BF16: memcpy(&half, data + index * 2, 2); return (double)volt8_bf16_to_float(half);
  case VOLT8_ST_F32: memcpy(&single, data + index * 4, 4); return (double)single;
  case VOLT8_ST_F64: memcpy(&wide, data + index * 8, 8); return wide;
  default: return NAN;
  }
}

static int parse_dtype(const char *name, volt8_st_dtype *out) {
  for (int i = 0; i < VOLT8_ST_DTYPE_COUNT; i++) {
    if (strcmp(dtype_table[i].name, name) == 0) {
      *out = (volt8_st_dtype)i;
      return 1;
    }
  }
  return 0;
}

static int json_exact_count(const cJSON *item, uint64_t *out) {
  if (!cJSON_IsNumber(item)) return 0;
  double value = item->valuedouble;
  if (!(value >= 0.0) || value > MAX_EXACT_JSON_INTEGER || value != (double)(uint64_t)value) return 0;
  *out = (uint64_t)value;
  return 1;
}

/* ---- one file ---- */

struct volt8_st_file {
  char *path;
  void *mapping;
  size_t mapping_bytes;
  volt8_st_tensor *tensors; /* sorted by name */
  size_t count;
  char *names;              /* all names, NUL-separated */
};

static int compare_by_name(const void *a, const void *b) {
  return strcmp(((const volt8_st_tensor *)a)->name, ((const volt8_st_tensor *)b)->name);
}

typedef struct byte_range { uint64_t begin, end; size_t tensor; } byte_range;

static int compare_ranges(const void *a, const void *b) {
  const byte_range *left = a, *right = b;
  if (left->begin != right->begin) return left->begin < right->begin ? -1 : 1;
  if (left->end != right->end) return left->end < right->end ? -1 : 1;
  return 0;
}

static volt8_status parse_metadata_entry(volt8_ctx *ctx, const char *path, const cJSON *entry) {
  if (!cJSON_IsObject(entry)) return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: __metadata__ is not an object", path);
  for (const cJSON *item = entry->child; item; item = item->next)
    if (!cJSON_IsString(item))
      return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: __metadata__ value \"%s\" is not a string", path, item->string);
  return VOLT8_OK;
}

/* One tensor entry: dtype, shape, data_offsets, with overflow-checked sizes. */
static volt8_status parse_tensor_entry(volt8_ctx *ctx, const char *path, const cJSON *entry, volt8_st_tensor *tensor,
                                       byte_range *range) {
  const char *name = entry->string;
  if (!cJSON_IsObject(entry)) return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s: entry is not an object", path, name);
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
  const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
  if (!cJSON_IsString(dtype) || !cJSON_IsArray(shape) || !cJSON_IsArray(offsets))
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s: needs a string dtype and shape and data_offsets arrays", path,
                      name);
  if (!parse_dtype(dtype->valuestring, &tensor->dtype))
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s: unknown dtype \"%s\"", path, name, dtype->valuestring);
  int rank = cJSON_GetArraySize(shape);
  if (rank > VOLT8_ST_MAX_RANK)
    return volt8_fail(ctx, VOLT8_ERR_UNSUPPORTED, "%s: tensor %s: %d dimensions, at most %d supported", path, name, rank,
                      VOLT8_ST_MAX_RANK);
  tensor->rank = rank;
  uint64_t elements = 1;
  int dim = 0;
  for (const cJSON *item = shape->child; item; item = item->next, dim++) {
    uint64_t extent;
    if (!json_exact_count(item, &extent))
      return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s: shape[%d] is not a non-negative integer", path, name, dim);
    if (__builtin_mul_overflow(elements, extent, &elements))
      return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s: element count overflows", path, name);
    tensor->shape[dim] = (int64_t)extent;
  }
  uint64_t begin, end, bits;
  if (cJSON_GetArraySize(offsets) != 2 || !json_exact_count(offsets->child, &begin) ||
      !json_exact_count(offsets->child->next, &end))
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s: data_offsets must be two non-negative integers", path, name);
  if (end < begin)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s: data_offsets [%llu, %llu] end before they begin", path, name,
                      (unsigned long long)begin, (unsigned long long)end);
  if (__builtin_mul_overflow(elements, (uint64_t)volt8_st_dtype_bits(tensor->dtype), &bits))
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s: byte size overflows", path, name);
  if (bits % 8 != 0)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s: %llu elements of %s do not fill whole bytes", path, name,
                      (unsigned long long)elements, dtype->valuestring);
  if (end - begin != bits / 8)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT,
                      "%s: tensor %s: data_offsets [%llu, %llu] hold %llu bytes, but dtype %s and its shape need %llu", path,
                      name, (unsigned long long)begin, (unsigned long long)end, (unsigned long long)(end - begin),
                      dtype->valuestring, (unsigned long long)(bits / 8));
  range->begin = begin;
  range->end = end;
  tensor->bytes = (size_t)(end - begin);
  return VOLT8_OK;
}

/* Byte ranges must tile [0, data_bytes) exactly; names must be unique. Sets each tensor's data. */
static volt8_status check_layout(volt8_ctx *ctx, volt8_st_file *file, byte_range *ranges, const uint8_t *data,
                                 uint64_t data_bytes) {
  qsort(ranges, file->count, sizeof *ranges, compare_ranges);
  uint64_t expected = 0;
  for (size_t i = 0; i < file->count; i++) {
    if (ranges[i].begin != expected)
      return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s starts at data offset %llu, expected %llu (%s)", file->path,
                        file->tensors[ranges[i].tensor].name, (unsigned long long)ranges[i].begin,
                        (unsigned long long)expected, ranges[i].begin < expected ? "overlap" : "hole");
    expected = ranges[i].end;
  }
  if (expected != data_bytes)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensors cover %llu data bytes but the file holds %llu (%s)", file->path,
                      (unsigned long long)expected, (unsigned long long)data_bytes,
                      expected < data_bytes ? "trailing bytes" : "truncated file");
  for (size_t i = 0; i < file->count; i++) file->tensors[ranges[i].tensor].data = data + ranges[i].begin;
  qsort(file->tensors, file->count, sizeof *file->tensors, compare_by_name);
  for (size_t i = 1; i < file->count; i++)
    if (strcmp(file->tensors[i - 1].name, file->tensors[i].name) == 0)
      return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s is named twice in the header", file->path,
                        file->tensors[i].name);
  return VOLT8_OK;
}

static volt8_status parse_header(volt8_ctx *ctx, volt8_st_file *file, const char *header, size_t header_bytes,
                                 const uint8_t *data, uint64_t data_bytes) {
  cJSON *root = NULL;
  if (header_bytes == 0 || header[0] != '{')
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: header does not start with '{'", file->path);
  volt8_status status = volt8_json_parse_object(ctx, file->path, "header", header, header_bytes, 0, &root);
  if (status != VOLT8_OK) return status;
  size_t count = 0, names_bytes = 0;
  for (const cJSON *item = root->child; item; item = item->next) {
    if (strcmp(item->string, "__metadata__") == 0) continue;
    count++;
    names_bytes += strlen(item->string) + 1;
  }
  file->tensors = calloc(count ? count : 1, sizeof *file->tensors);
  file->names = malloc(names_bytes ? names_bytes : 1);
  byte_range *ranges = calloc(count ? count : 1, sizeof *ranges);
  if (!file->tensors || !file->names || !ranges)
    status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "%s: out of memory for the header", file->path);
  char *name_cursor = file->names;
  int metadata_seen = 0;
  for (const cJSON *item = root->child; item && status == VOLT8_OK; item = item->next) {
    if (strcmp(item->string, "__metadata__") == 0) {
      status = metadata_seen++ ? volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: __metadata__ appears twice", file->path)
                               : parse_metadata_entry(ctx, file->path, item);
      continue;
    }
    volt8_st_tensor *tensor = &file->tensors[file->count];
    size_t name_bytes = strlen(item->string) + 1;
    memcpy(name_cursor, item->string, name_bytes);
    tensor->name = name_cursor;
    tensor->file = file->path;
    name_cursor += name_bytes;
    status = parse_tensor_entry(ctx, file->path, item, tensor, &ranges[file->count]);
    ranges[file->count].tensor = file->count;
    if (status == VOLT8_OK) file->count++;
  }
  cJSON_Delete(root);
  if (status == VOLT8_OK) status = check_layout(ctx, file, ranges, data, data_bytes);
  free(ranges);
  return status;
}

static volt8_status map_file(volt8_ctx *ctx, volt8_st_file *file) {
  int fd = -1;
  struct stat info;
  volt8_status status = volt8_open_regular(ctx, file->path, &fd, &info, NULL);
  if (status != VOLT8_OK) return status;
  if (info.st_size < 8) {
    status = volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: %lld bytes, too short for the 8-byte header length", file->path,
                        (long long)info.st_size);
  } else {
    void *mapping = mmap(NULL, (size_t)info.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      status = volt8_fail(ctx, VOLT8_ERR_IO, "%s: mmap of %lld bytes failed: %s", file->path, (long long)info.st_size,
                          strerror(errno));
    } else {
      file->mapping = mapping;
      file->mapping_bytes = (size_t)info.st_size;
      atomic_fetch_add(&live_mappings, 1);
    }
  }
  close(fd);
  return status;
}

volt8_status volt8_st_file_open(volt8_ctx *ctx, const char *path, volt8_st_file **out_file) {
  *out_file = NULL;
  volt8_st_file *file = calloc(1, sizeof *file);
  if (!file || !(file->path = strdup(path))) {
    free(file);
    return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
  }
  volt8_status status = map_file(ctx, file);
  if (status == VOLT8_OK) {
    const uint8_t *bytes = file->mapping;
    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; i--) header_bytes = header_bytes << 8 | bytes[i];
    uint64_t body_bytes = (uint64_t)file->mapping_bytes - 8;
    if (header_bytes > VOLT8_ST_MAX_HEADER_BYTES)
      status = volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: header of %llu bytes exceeds the %u-byte limit", path,
                          (unsigned long long)header_bytes, VOLT8_ST_MAX_HEADER_BYTES);
    else if (header_bytes > body_bytes)
      status = volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%zu bytes)", path,
                          (unsigned long long)header_bytes, file->mapping_bytes);
    else
      status = parse_header(ctx, file, (const char *)bytes + 8, (size_t)header_bytes, bytes + 8 + header_bytes,
                            body_bytes - header_bytes);
  }
  if (status != VOLT8_OK) {
    volt8_st_file_close(file);
    return status;
  }
  *out_file = file;
  return VOLT8_OK;
}

void volt8_st_file_close(volt8_st_file *file) {
  if (!file) return;
  if (file->mapping) {
    munmap(file->mapping, file->mapping_bytes);
    atomic_fetch_sub(&live_mappings, 1);
  }
  free(file->tensors);
  free(file->names);
  free(file->path);
  free(file);
}

size_t volt8_st_file_count(const volt8_st_file *file) { return file->count; }

const volt8_st_tensor *volt8_st_file_tensor(const volt8_st_file *file, size_t index) {
  return index < file->count ? &file->tensors[index] : NULL;
}

const volt8_st_tensor *volt8_st_file_find(const volt8_st_file *file, const char *name) {
  volt8_st_tensor key = {.name = name};
  return bsearch(&key, file->tensors, file->count, sizeof key, compare_by_name);
}

/* ---- a checkpoint folder ---- */

typedef struct set_entry {
  const char *name;
  size_t shard;
} set_entry;

struct volt8_st_set {
  char *dir;
  char **shard_names;      /* relative to dir */
  volt8_st_file **shards;  /* opened on first use */
  size_t shard_count, shard_capacity;
  size_t *shard_slots;     /* open-addressed hash of shard_names: index + 1, 0 when free */
  size_t slot_count;       /* a power of two, at least twice shard_count */
  set_entry *entries;      /* sorted by name */
  size_t count;
  char *names;             /* index mode: the names' storage */
};

static int compare_entries(const void *a, const void *b) {
  return strcmp(((const set_entry *)a)->name, ((const set_entry *)b)->name);
}

static char *join_path(const char *dir, const char *name) {
  size_t bytes = strlen(dir) + strlen(name) + 2;
  char *path = malloc(bytes);
  if (path) snprintf(path, bytes, "%s/%s", dir, name);
  return path;
}

/* Shard names stay inside the folder: relative, no ".." component. */
static int shard_name_is_safe(const char *name) {
  if (name[0] == '\0' || name[0] == '/') return 0;
  for (const char *component = name; component;) {
    const char *slash = strchr(component, '/');
    size_t length = slash ? (size_t)(slash - component) : strlen(component);
    if (length == 2 && component[0] == '.' && component[1] == '.') return 0;
    component = slash ? slash + 1 : NULL;
  }
  return 1;
}

static uint64_t hash_name(const char *name) {
  uint64_t hash = 14695981039346656037ull; /* FNV-1a */
  for (const unsigned char *c = (const unsigned char *)name; *c; c++) hash = (hash ^ *c) * 1099511628211ull;
  return hash;
}

/* The slot holding `name`, or the free slot where it belongs. */
static size_t *shard_slot(const volt8_st_set *set, const char *name) {
  size_t mask = set->slot_count - 1;
  for (size_t at = (size_t)hash_name(name) & mask;; at = (at + 1) & mask) {
    size_t *slot = &set->shard_slots[at];
    if (*slot == 0 || strcmp(set->shard_names[*slot - 1], name) == 0) return slot;
  }
}

static int grow_shard_slots(volt8_st_set *set) {
  size_t slot_count = set->slot_count ? set->slot_count * 2 : 64;
  size_t *slots = calloc(slot_count, sizeof *slots);
  if (!slots) return -1;
  free(set->shard_slots);
  set->shard_slots = slots;
  set->slot_count = slot_count;
  for (size_t i = 0; i < set->shard_count; i++) *shard_slot(set, set->shard_names[i]) = i + 1;
  return 0;
}

/* The index of shard `name`, added when new: hashed, so an index naming many shards costs linear time. */
static volt8_status add_shard(volt8_ctx *ctx, volt8_st_set *set, const char *name, size_t *out_index) {
  if ((set->shard_count + 1) * 2 > set->slot_count && grow_shard_slots(set) != 0)
    return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the shard list of %s", set->dir);
  size_t *slot = shard_slot(set, name);
  if (*slot) {
    *out_index = *slot - 1;
    return VOLT8_OK;
  }
  if (set->shard_count == VOLT8_ST_MAX_SHARDS)
    return volt8_fail(ctx, VOLT8_ERR_UNSUPPORTED, "%s: more than %d shard files (the limit of VOLT8_ST_MAX_SHARDS)",
                      set->dir, VOLT8_ST_MAX_SHARDS);
  if (set->shard_count == set->shard_capacity) {
    size_t capacity = set->shard_capacity ? set->shard_capacity * 2 : 16;
    char **names = realloc(set->shard_names, capacity * sizeof *names);
    if (names) set->shard_names = names;
    volt8_st_file **shards = realloc(set->shards, capacity * sizeof *shards);
    if (shards) set->shards = shards;
    if (!names || !shards)
      return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the shard list of %s", set->dir);
    set->shard_capacity = capacity;
  }
  if (!(set->shard_names[set->shard_count] = strdup(name)))
    return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the shard list of %s", set->dir);
  set->shards[set->shard_count] = NULL;
  *slot = set->shard_count + 1;
  *out_index = set->shard_count++;
  return VOLT8_OK;
}

static volt8_status check_unique_names(volt8_ctx *ctx, volt8_st_set *set, const char *where) {
  qsort(set->entries, set->count, sizeof *set->entries, compare_entries);
  for (size_t i = 1; i < set->count; i++) {
    if (strcmp(set->entries[i - 1].name, set->entries[i].name) == 0)
      return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s is named twice (%s and %s)", where, set->entries[i].name,
                        set->shard_names[set->entries[i - 1].shard], set->shard_names[set->entries[i].shard]);
  }
  return VOLT8_OK;
}

static volt8_status open_index(volt8_ctx *ctx, volt8_st_set *set, const char *index_path) {
  char *text = NULL;
  size_t bytes = 0;
  volt8_status status = volt8_read_regular(ctx, index_path, VOLT8_ST_MAX_HEADER_BYTES, &text, &bytes, NULL);
  if (status != VOLT8_OK) return status;
  cJSON *root = NULL;
  status = volt8_json_parse_object(ctx, index_path, "index", text, bytes, 0, &root);
  free(text);
  if (status != VOLT8_OK) return status;
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  if (!cJSON_IsObject(map)) {
    cJSON_Delete(root);
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: no \"weight_map\" object", index_path);
  }
  size_t count = 0, names_bytes = 0;
  for (const cJSON *item = map->child; item; item = item->next, count++) names_bytes += strlen(item->string) + 1;
  set->entries = calloc(count ? count : 1, sizeof *set->entries);
  set->names = malloc(names_bytes ? names_bytes : 1);
  if (!set->entries || !set->names) status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "%s: out of memory", index_path);
  char *cursor = set->names;
  for (const cJSON *item = map->child; item && status == VOLT8_OK; item = item->next) {
    if (!cJSON_IsString(item)) {
      status = volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: weight_map entry %s is not a file name", index_path, item->string);
    } else if (!shard_name_is_safe(item->valuestring)) {
      status = volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: weight_map entry %s names shard \"%s\", which leaves the folder",
                          index_path, item->string, item->valuestring);
    } else {
      size_t shard = 0;
      status = add_shard(ctx, set, item->valuestring, &shard);
      size_t name_bytes = strlen(item->string) + 1;
      memcpy(cursor, item->string, name_bytes);
      set->entries[set->count].name = cursor;
      set->entries[set->count].shard = shard;
      cursor += name_bytes;
      set->count++;
    }
  }
  cJSON_Delete(root);
  return status == VOLT8_OK ? check_unique_names(ctx, set, index_path) : status;
}

static int has_safetensors_suffix(const char *name) {
  size_t length = strlen(name);
  return length > 12 && strcmp(name + length - 12, ".safetensors") == 0;
}

static int compare_strings(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* No index: every *.safetensors file of the folder, opened now (their headers list the names). */
static volt8_status open_folder_files(volt8_ctx *ctx, volt8_st_set *set) {
  DIR *dir = opendir(set->dir);
  if (!dir)
    return volt8_fail(ctx, errno == ENOENT ? VOLT8_ERR_NOT_FOUND : VOLT8_ERR_IO, "%s: cannot open the checkpoint folder: %s",
                      set->dir, strerror(errno));
  volt8_status status = VOLT8_OK;
  for (struct dirent *entry = readdir(dir); entry && status == VOLT8_OK; entry = readdir(dir)) {
    size_t ignored;
    if (has_safetensors_suffix(entry->d_name)) status = add_shard(ctx, set, entry->d_name, &ignored);
  }
  closedir(dir);
  if (status != VOLT8_OK) return status;
  if (set->shard_count == 0)
    return volt8_fail(ctx, VOLT8_ERR_NOT_FOUND, "%s: no %s and no *.safetensors file", set->dir, INDEX_FILE_NAME);
  qsort(set->shard_names, set->shard_count, sizeof *set->shard_names, compare_strings);
  free(set->shard_slots); /* sorting moved the names: the hash is stale and no longer needed */
  set->shard_slots = NULL;
  set->slot_count = 0;
  size_t total = 0;
  for (size_t i = 0; i < set->shard_count && status == VOLT8_OK; i++) {
    char *path = join_path(set->dir, set->shard_names[i]);
    status = path ? volt8_st_file_open(ctx, path, &set->shards[i]) : volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory");
    free(path);
    if (status == VOLT8_OK) total += set->shards[i]->count;
  }
  if (status != VOLT8_OK) return status;
  set->entries = calloc(total ? total : 1, sizeof *set->entries);
  if (!set->entries) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "%s: out of memory", set->dir);
  for (size_t i = 0; i < set->shard_count; i++) {
    for (size_t t = 0; t < set->shards[i]->count; t++) {
      set->entries[set->count].name = set->shards[i]->tensors[t].name;
      set->entries[set->count++].shard = i;
    }
  }
  return check_unique_names(ctx, set, set->dir);
}

volt8_status volt8_st_set_open(volt8_ctx *ctx, const char *dir, volt8_st_set **out_set) {
  *out_set = NULL;
  volt8_st_set *set = calloc(1, sizeof *set);
  if (!set || !(set->dir = strdup(dir))) {
    free(set);
    return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory opening %s", dir);
  }
  char *index_path = join_path(dir, INDEX_FILE_NAME);
  volt8_status status;
  if (!index_path) status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory opening %s", dir);
  else if (access(index_path, F_OK) == 0) status = open_index(ctx, set, index_path);
  else status = open_folder_files(ctx, set);
  free(index_path);
  if (status != VOLT8_OK) {
    volt8_st_set_close(set);
    return status;
  }
  *out_set = set;
  return VOLT8_OK;
}

void volt8_st_set_close(volt8_st_set *set) {
  if (!set) return;
  for (size_t i = 0; i < set->shard_count; i++) {
    volt8_st_file_close(set->shards[i]);
    free(set->shard_names[i]);
  }
  free(set->shards);
  free(set->shard_names);
  free(set->shard_slots);
  free(set->entries);
  free(set->names);
  free(set->dir);
  free(set);
}

size_t volt8_st_set_count(const volt8_st_set *set) { return set->count; }

const char *volt8_st_set_name(const volt8_st_set *set, size_t index) {
  return index < set->count ? set->entries[index].name : NULL;
}

static const set_entry *find_entry(const volt8_st_set *set, const char *name) {
  set_entry key = {.name = name};
  return bsearch(&key, set->entries, set->count, sizeof key, compare_entries);
}

int volt8_st_set_contains(const volt8_st_set *set, const char *name) { return find_entry(set, name) != NULL; }

volt8_status volt8_st_set_find(volt8_ctx *ctx, volt8_st_set *set, const char *name, const volt8_st_tensor **out) {
  *out = NULL;
  const set_entry *entry = find_entry(set, name);
  if (!entry) return volt8_fail(ctx, VOLT8_ERR_NOT_FOUND, "%s: no tensor %s", set->dir, name);
  if (!set->shards[entry->shard]) {
    char *path = join_path(set->dir, set->shard_names[entry->shard]);
    if (!path) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory");
    volt8_status status = volt8_st_file_open(ctx, path, &set->shards[entry->shard]);
    free(path);
    if (status != VOLT8_OK) return status;
  }
  const volt8_st_tensor *tensor = volt8_st_file_find(set->shards[entry->shard], name);
  if (!tensor)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: the index places tensor %s in %s, which does not hold it", set->dir,
                      name, set->shard_names[entry->shard]);
  *out = tensor;
  return VOLT8_OK;
}
