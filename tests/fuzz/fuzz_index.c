/* Fuzz target: model.safetensors.index.json of a checkpoint folder.
 *
 * The folder also holds two small valid shards (the names the seeds use), so both the index
 * parser and the lazy shard opening behind it run. Checked: a shard name that is absolute or has a
 * ".." component never opens (the harness parses the index itself to know); names come back
 * sorted and unique; every name resolves or fails with a message; nothing stays mapped. */
#include "fuzz_common.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint/safetensors.h"

#define NAMES_CHECKED 256

static char dir[1024];

static void write_shard(const char *file_name, const char *suffix, const char *dtype, size_t element_bytes) {
  static const char *const projections[] = {"gate_proj", "up_proj", "down_proj"};
  fuzz_st_builder builder = {0};
  const uint8_t bytes[2] = {0x38, 0x3f}; /* E4M3 1.0 / BF16 0.75: plain finite values */
  const int64_t shape[1] = {1};
  for (int expert = 0; expert < 2; expert++) {
    for (int p = 0; p < 3; p++) {
      char name[128];
      snprintf(name, sizeof name, "mtp.layers.0.mlp.experts.%d.%s.%s", expert, projections[p], suffix);
      fuzz_st_add(&builder, name, dtype, shape, 1, bytes, element_bytes);
    }
  }
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", dir, file_name);
  fuzz_st_write(&builder, path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_make_dirs("ix");
  fuzz_path(dir, sizeof dir, "ix");
  write_shard("model-00001-of-00002.safetensors", "weight", "F8_E4M3", 1);
  write_shard("model-00002-of-00002.safetensors", "weight_scale_inv", "BF16", 2);
  return 0;
}

static int name_leaves_folder(const char *name) {
  if (name[0] == '/') return 1;
  for (const char *component = name; component;) {
    const char *slash = strchr(component, '/');
    size_t length = slash ? (size_t)(slash - component) : strlen(component);
    if (length == 2 && strncmp(component, "..", 2) == 0) return 1;
    component = slash ? slash + 1 : NULL;
  }
  return 0;
}

/* 1 when cJSON reads the index and some weight_map value leaves the folder. */
static int index_escapes(const uint8_t *data, size_t size) {
  cJSON *root = cJSON_ParseWithLength((const char *)data, size);
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  int escapes = 0;
  for (const cJSON *item = cJSON_IsObject(map) ? map->child : NULL; item && !escapes; item = item->next)
    escapes = cJSON_IsString(item) && name_leaves_folder(item->valuestring);
  cJSON_Delete(root);
  return escapes;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[1200];
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  fuzz_write_file(path, data, size);
  volt8_ctx *ctx = fuzz_ctx();
  int64_t mappings = volt8_st_live_mappings();
  volt8_st_set *set = NULL;
  volt8_status status = volt8_st_set_open(ctx, dir, &set);
  if (status != VOLT8_OK) {
    fuzz_require(set == NULL, "failed open returned a set", NULL);
    fuzz_require(volt8_last_error(ctx)[0] != '\0', "failure without a message", NULL);
    fuzz_require(volt8_st_live_mappings() == mappings, "a failed open left a mapping", NULL);
    return 0;
  }
  fuzz_require(!index_escapes(data, size), "an index naming a shard outside the folder was accepted", NULL);
  size_t count = volt8_st_set_count(set);
  for (size_t i = 0; i < count; i++) {
    const char *name = volt8_st_set_name(set, i);
    fuzz_require(name != NULL, "set name is NULL", NULL);
    if (i) fuzz_require(strcmp(volt8_st_set_name(set, i - 1), name) < 0, "set names not sorted or not unique", name);
    fuzz_require(volt8_st_set_contains(set, name), "set does not contain its own name", name);
    if (i >= NAMES_CHECKED) continue;
    const volt8_st_tensor *tensor = NULL;
    status = volt8_st_set_find(ctx, set, name, &tensor);
    if (status == VOLT8_OK) {
      fuzz_require(tensor && strcmp(tensor->name, name) == 0, "find returned another tensor", name);
      fuzz_require(strncmp(tensor->file, dir, strlen(dir)) == 0, "tensor read from outside the folder", tensor->file);
    } else {
      fuzz_require(tensor == NULL && volt8_last_error(ctx)[0] != '\0', "failed find without a message", name);
    }
  }
  fuzz_require(volt8_st_set_name(set, count) == NULL, "name past the count", NULL);
  volt8_st_set_close(set);
  fuzz_require(volt8_st_live_mappings() == mappings, "a mapping outlived its set", NULL);
  return 0;
}
