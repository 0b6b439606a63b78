/* Checkpoint recognition: config, quantization metadata, MTP layer names, and every expert tensor
 * resolved and checked. The per-expert load pipeline is in checkpoint_load.c. */
#include "checkpoint/checkpoint.h"

#include "core/ctx_internal.h"
#include "core/files.h"
#include "core/json_strict.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CONFIG_FILE_LIMIT (64u << 20)
#define EXPERTS_PART "mlp.experts."
/* Bounds num_hidden_layers and mtp_layer, so their sum (a runtime layer index) fits an int32. */
#define MAX_LAYERS (1 << 20)
/* quantized_layers keys kept for the MTP layer: each is matched against every expert module. */
#define MAX_LAYER_GLOBS 256
#define MAX_LAYER_KEYS 16384
#define NAME_BYTES 512
#define SPELLINGS 5
#define SPELLING_BYTES (NAME_BYTES + 64)

static const char *const projection_names[VOLT8_PROJECTIONS] = {"gate_proj", "up_proj", "down_proj"};

/* ---- allocation accounting ---- */

static _Atomic int64_t live_allocations, live_bytes, peak_bytes;

/* Each block starts with its size, so frees can be counted in bytes. */
typedef union allocation_header {
  size_t bytes;
  max_align_t alignment;
} allocation_header;

void *volt8_checkpoint_alloc(size_t bytes) {
  allocation_header *header = calloc(1, sizeof *header + bytes);
  if (!header) return NULL;
  header->bytes = bytes;
  atomic_fetch_add(&live_allocations, 1);
  int64_t now = atomic_fetch_add(&live_bytes, (int64_t)bytes) + (int64_t)bytes;
  int64_t peak = atomic_load(&peak_bytes);
  while (now > peak && !atomic_compare_exchange_weak(&peak_bytes, &peak, now)) {
  }
  return header + 1;
}

void volt8_checkpoint_free(void *pointer) {
  if (!pointer) return;
  allocation_header *header = (allocation_header *)pointer - 1;
  atomic_fetch_sub(&live_allocations, 1);
  atomic_fetch_sub(&live_bytes, (int64_t)header->bytes);
  free(header);
}

int64_t volt8_checkpoint_live_allocations(void) { return atomic_load(&live_allocations) + volt8_st_live_mappings(); }

int64_t volt8_checkpoint_peak_bytes(int reset) {
  return reset ? atomic_exchange(&peak_bytes, atomic_load(&live_bytes)) : atomic_load(&peak_bytes);
}

/* ---- options ---- */

volt8_status volt8_load_options_read(volt8_ctx *ctx, const volt8_load_options *options, volt8_load_options *out) {
  volt8_load_options read = VOLT8_LOAD_OPTIONS_INIT;
  if (!options) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "load options are NULL");
  if (options->size < offsetof(volt8_load_options, tp_size) || options->size > sizeof read)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "load options size is %zu; set it with VOLT8_LOAD_OPTIONS_INIT (expected %zu or an older size)",
                      options->size, sizeof read);
  memcpy(&read, options, options->size);
  read.size = sizeof read;
  if (!read.checkpoint_dir && !read.draft_checkpoint_dir)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "load options name no checkpoint_dir (nor draft_checkpoint_dir)");
  if (read.tp_size <= 0 || read.tp_rank < 0 || read.tp_rank >= read.tp_size)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "tp_rank %d and tp_size %d: need 0 <= tp_rank < tp_size",
                      read.tp_rank, read.tp_size);
  if (read.expert_start < 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "expert_start is %d; it must be 0 or more", read.expert_start);
  if (read.expert_count < 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "expert_count is %d; it must be 0 (all experts) or more",
                      read.expert_count);
  if (read.expert_count == 0 && read.expert_start != 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "expert_start is %d with expert_count 0 (all experts); give a count", read.expert_start);
  if (read.online_block_n != 1 && read.online_block_n != VOLT8_CHECKPOINT_BLOCK)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "online_block_n is %d; online scale blocks have 1 or 128 rows",
                      read.online_block_n);
  if (read.mtp_layer < 0 || read.mtp_layer > MAX_LAYERS)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "mtp_layer is %d; it must be 0..%d", read.mtp_layer, MAX_LAYERS);
  const char *online = read.mtp_expert_quantization;
  if (online && *online && strcmp(online, "fp8") != 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "mtp_expert_quantization \"%s\": only \"fp8\" is known", online);
  if (read.report && read.report->size < sizeof(size_t))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "report->size is unset (use VOLT8_LOAD_REPORT_INIT)");
  *out = read;
  return VOLT8_OK;
}

/* ---- config.json and hf_quant_config.json ---- */

typedef struct checkpoint_config {
  cJSON *config;             /* config.json of the MTP source folder, else the target's; may be NULL */
  cJSON *quant_file;         /* hf_quant_config.json of the MTP source folder; may be NULL */
  int config_is_source;      /* config came from the MTP source folder, so its quantization_config applies */
  int32_t num_hidden_layers; /* 0: unknown */
  const char *config_dir;    /* the folder config came from, for messages */
} checkpoint_config;

/* dir/name parsed strictly; *out stays NULL (and VOLT8_OK) when the file does not exist. */
static volt8_status read_json_file(volt8_ctx *ctx, const char *dir, const char *name, cJSON **out) {
  *out = NULL;
  size_t path_bytes = strlen(dir) + strlen(name) + 2;
  char *path = malloc(path_bytes);
  if (!path) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the path of %s", name);
  snprintf(path, path_bytes, "%s/%s", dir, name);
  char *text = NULL;
  size_t bytes = 0;
  int missing = 0;
  volt8_status status = volt8_read_regular(ctx, path, CONFIG_FILE_LIMIT, &text, &bytes, &missing);
  if (status == VOLT8_OK && !missing) status = volt8_json_parse_object(ctx, path, name, text, bytes, 0, out);
  free(text);
  free(path);
  return status;
}

/* An integer setting of the model: text_config's (multimodal configs nest it) or the top level's.
 * 0: absent; 1: *out set; -1: present but not an integer (a message names file and key). */
static int config_int(volt8_ctx *ctx, const checkpoint_config *config, const char *key, int64_t *out) {
  const cJSON *places[2] = {cJSON_GetObjectItemCaseSensitive(config->config, "text_config"), config->config};
  for (int i = 0; i < 2; i++) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(places[i], key);
    if (!item || cJSON_IsNull(item)) continue;
    if (cJSON_IsNumber(item) && fabs(item->valuedouble) < 0x1p62 && item->valuedouble == (double)(int64_t)item->valuedouble) {
      *out = (int64_t)item->valuedouble;
      return 1;
    }
    char *text = cJSON_PrintUnformatted(item);
    volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s/config.json: %s%s is %.80s, not an integer", config->config_dir,
               i == 0 ? "text_config." : "", key, text ? text : "not a number");
    free(text);
    return -1;
  }
  return 0;
}

static const cJSON *config_item(const cJSON *config, const char *key) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(config, "text_config"), key);
  return item ? item : cJSON_GetObjectItemCaseSensitive(config, key);
}

static volt8_status read_config(volt8_ctx *ctx, const volt8_load_options *options, checkpoint_config *out) {
  memset(out, 0, sizeof *out);
  const char *source = options->draft_checkpoint_dir ? options->draft_checkpoint_dir : options->checkpoint_dir;
  volt8_status status = read_json_file(ctx, source, "config.json", &out->config);
  out->config_is_source = out->config != NULL;
  out->config_dir = source;
  if (status == VOLT8_OK && !out->config && options->checkpoint_dir && source != options->checkpoint_dir) {
    status = read_json_file(ctx, options->checkpoint_dir, "config.json", &out->config);
    out->config_dir = options->checkpoint_dir;
  }
  if (status == VOLT8_OK) status = read_json_file(ctx, source, "hf_quant_config.json", &out->quant_file);
  int64_t layers = 0;
  int found = status == VOLT8_OK && out->config ? config_int(ctx, out, "num_hidden_layers", &layers) : 0;
  if (found < 0) return VOLT8_ERR_FORMAT;
  if (found) {
    if (layers <= 0 || layers > MAX_LAYERS)
      return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s/config.json: num_hidden_layers = %lld (at most %d)", out->config_dir,
                        (long long)layers, MAX_LAYERS);
    out->num_hidden_layers = (int32_t)layers;
  }
  return status;
}

/* ---- MTP layer names ---- */

/* Length of the MTP-layer part of `name` (through its dot), or 0 when `name` is not in an MTP layer.
 * Spellings: [root]mtp.layers.<i> (checkpoints, metadata) and, with n = num_hidden_layers known,
 * [root]mtp.layers.<n+i> or [root]layers.<n+i> (runtime index); a name that is the layer itself matches. */
static size_t mtp_layer_match(const char *name, int32_t num_hidden_layers, int32_t *out_layer) {
  static const char *const roots[] = {"", "model.", "model.language_model.", "language_model.model.", "language_model."};
  for (size_t r = 0; r < sizeof roots / sizeof roots[0]; r++) {
    size_t root_length = strlen(roots[r]);
    if (strncmp(name, roots[r], root_length) != 0) continue;
    const char *cursor = name + root_length;
    int spelled_mtp = strncmp(cursor, "mtp.layers.", 11) == 0;
    if (!spelled_mtp && (num_hidden_layers <= 0 || strncmp(cursor, "layers.", 7) != 0)) continue;
    cursor += spelled_mtp ? 11 : 7;
    if (cursor[0] < '0' || cursor[0] > '9' || (cursor[0] == '0' && cursor[1] >= '0' && cursor[1] <= '9')) continue;
    char *end = NULL;
    long index = strtol(cursor, &end, 10);
    if ((*end != '.' && *end != '\0') || index > 2 * (long)MAX_LAYERS) continue;
    if (!spelled_mtp && index < num_hidden_layers) continue;
    int runtime_index = num_hidden_layers > 0 && index >= num_hidden_layers;
    *out_layer = (int32_t)(runtime_index ? index - num_hidden_layers : index);
    return (size_t)(end - name) + (*end == '.');
  }
  return 0;
}

/* The spellings a metadata entry may use for the MTP module `rest` (e.g. "mlp.experts.3.gate_proj"). */
static int module_spellings(const char *actual, const char *rest, int32_t layer, int32_t num_hidden_layers,
                            char spellings[SPELLINGS][SPELLING_BYTES]) {
  int count = 0;
  snprintf(spellings[count++], SPELLING_BYTES, "%s", actual);
  snprintf(spellings[count++], SPELLING_BYTES, "mtp.layers.%d.%s", layer, rest);
  snprintf(spellings[count++], SPELLING_BYTES, "model.mtp.layers.%d.%s", layer, rest);
  if (num_hidden_layers > 0) {
    snprintf(spellings[count++], SPELLING_BYTES, "model.layers.%d.%s", num_hidden_layers + layer, rest);
    snprintf(spellings[count++], SPELLING_BYTES, "mtp.layers.%d.%s", num_hidden_layers + layer, rest);
  }
  return count;
}

static int is_glob(const char *text) { return strpbrk(text, "*?[") != NULL; }

/* `pattern` names `name` or one of its ancestors, exactly or as a shell glob. */
static int pattern_covers(const char *pattern, const char *name) {
  size_t length = strlen(pattern);
  if (strncmp(name, pattern, length) == 0 && (name[length] == '\0' || name[length] == '.')) return 1;
  return strpbrk(pattern, "*?[\\") && fnmatch(pattern, name, 0) == 0;
}

/* ---- quantization metadata ---- */

typedef enum meta_kind { META_UNKNOWN, META_UNQUANTIZED, META_FP8_BLOCK, META_OTHER } meta_kind;

typedef struct meta_verdict {
  meta_kind kind;
  char format[32];
} meta_verdict;

typedef struct quant_metadata {
  const char *origin;       /* the file it came from */
  char method[24];          /* "modelopt", "fp8", another quant_method, or "" */
  const cJSON *modelopt;    /* ModelOpt settings (quant_algo, quantized_layers, exclude_modules) */
  const cJSON *fp8;         /* block-FP8 quantization_config */
  const cJSON **layer_keys; /* quantized_layers entries that can concern the MTP layer */
  size_t layer_key_count;
  const char **excluded;    /* exclude_modules / modules_to_not_convert / ignored_layers entries that can */
  size_t excluded_count;    /* concern the MTP experts (collect_exclusions) */
  int32_t num_hidden_layers, mtp_layer;
} quant_metadata;

static meta_verdict make_verdict(meta_kind kind, const char *format) {
  meta_verdict verdict = {kind, ""};
  snprintf(verdict.format, sizeof verdict.format, "%s", format);
  return verdict;
}

static meta_verdict verdict_for_algo(const char *algo, const cJSON *group_size) {
  meta_verdict verdict = {META_OTHER, ""};
  snprintf(verdict.format, sizeof verdict.format, "modelopt %s", algo);
  if (strcmp(algo, "FP8_PB_WO") == 0 || strcmp(algo, "FP8_BLOCK_SCALES") == 0) {
    if (!group_size || (cJSON_IsNumber(group_size) && group_size->valuedouble == VOLT8_CHECKPOINT_BLOCK))
      verdict.kind = META_FP8_BLOCK;
    else
      snprintf(verdict.format, sizeof verdict.format, "modelopt %s group %g", algo, group_size->valuedouble);
  }
  return verdict;
}

static meta_verdict verdict_for_entry(const cJSON *entry) {
  const cJSON *algo = cJSON_GetObjectItemCaseSensitive(entry, "quant_algo");
  if (!cJSON_IsString(algo)) return make_verdict(META_OTHER, "modelopt (no quant_algo)");
  return verdict_for_algo(algo->valuestring, cJSON_GetObjectItemCaseSensitive(entry, "group_size"));
}

/* group_size, where given, is a number: a string "128" would otherwise read as group 0. */
static volt8_status check_group_size(volt8_ctx *ctx, const quant_metadata *meta, const cJSON *settings, const char *where) {
  const cJSON *group_size = cJSON_GetObjectItemCaseSensitive(settings, "group_size");
  if (!group_size || cJSON_IsNumber(group_size)) return VOLT8_OK;
  char *text = cJSON_PrintUnformatted(group_size);
  volt8_status status = volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: %s%sgroup_size is %.80s, not a number", meta->origin,
                                   where, *where ? "." : "", text ? text : "not a number");
  free(text);
  return status;
}

/* Keeps the quantized_layers keys that may concern the MTP layer: its own, globs, and its ancestors.
 * Each kept key is matched against every expert module, so their number is capped. */
static volt8_status index_layer_keys(volt8_ctx *ctx, quant_metadata *meta, const cJSON *layers) {
  size_t count = (size_t)cJSON_GetArraySize(layers);
  meta->layer_keys = volt8_checkpoint_alloc((count ? count : 1) * sizeof *meta->layer_keys);
  if (!meta->layer_keys) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for quantized_layers");
  char layer_names[4][64];
  int32_t n = meta->num_hidden_layers, layer = meta->mtp_layer, names = 2;
  snprintf(layer_names[0], sizeof layer_names[0], "mtp.layers.%d", layer);
  snprintf(layer_names[1], sizeof layer_names[1], "model.mtp.layers.%d", layer);
  if (n > 0) {
    snprintf(layer_names[names++], sizeof layer_names[0], "model.layers.%d", n + layer);
    snprintf(layer_names[names++], sizeof layer_names[0], "mtp.layers.%d", n + layer);
  }
  size_t globs = 0;
  for (const cJSON *item = layers->child; item; item = item->next) {
    int32_t key_layer = -1;
    int glob = is_glob(item->string);
    int keep = (mtp_layer_match(item->string, n, &key_layer) && key_layer == layer) || glob;
    for (int32_t i = 0; i < names && !keep; i++) keep = pattern_covers(item->string, layer_names[i]);
    if (!keep) continue;
    if ((globs += glob) > MAX_LAYER_GLOBS || meta->layer_key_count == MAX_LAYER_KEYS)
      return volt8_fail(ctx, VOLT8_ERR_UNSUPPORTED, "%s: quantized_layers holds more than %d %s that may concern the MTP "
                        "layer (the limit)", meta->origin, glob ? MAX_LAYER_GLOBS : MAX_LAYER_KEYS,
                        glob ? "glob patterns" : "entries");
    volt8_status status = check_group_size(ctx, meta, item, item->string);
    if (status != VOLT8_OK) return status;
    meta->layer_keys[meta->layer_key_count++] = item;
  }
  return VOLT8_OK;
}

static volt8_status read_metadata(volt8_ctx *ctx, const checkpoint_config *config, quant_metadata *meta) {
  /* a separate draft folder without its own config: the target's quantization says nothing of it */
  const cJSON *quantization =
      config->config_is_source ? cJSON_GetObjectItemCaseSensitive(config->config, "quantization_config") : NULL;
  const cJSON *method = cJSON_GetObjectItemCaseSensitive(quantization, "quant_method");
  meta->origin = "config.json";
  if ((quantization && !cJSON_IsNull(quantization) && !cJSON_IsObject(quantization)) ||
      (method && !cJSON_IsNull(method) && !cJSON_IsString(method)))
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s/config.json: quantization_config%s is not %s", config->config_dir,
                      cJSON_IsObject(quantization) ? ".quant_method" : "", cJSON_IsObject(quantization) ? "a string" : "an object");
  if (!cJSON_IsString(method) && config->quant_file) {
    quantization = cJSON_GetObjectItemCaseSensitive(config->quant_file, "quantization");
    meta->origin = "hf_quant_config.json";
    if (!cJSON_IsObject(quantization))
      return volt8_fail(ctx, VOLT8_ERR_FORMAT, "hf_quant_config.json has no \"quantization\" object");
    snprintf(meta->method, sizeof meta->method, "modelopt");
  } else if (cJSON_IsString(method)) {
    snprintf(meta->method, sizeof meta->method, "%s", method->valuestring);
  }
  if (strcmp(meta->method, "modelopt") == 0) {
    meta->modelopt = quantization;
    const cJSON *algo = cJSON_GetObjectItemCaseSensitive(quantization, "quant_algo");
    if (algo && !cJSON_IsNull(algo) && !cJSON_IsString(algo))
      return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: quant_algo is not a string", meta->origin);
    volt8_status status = check_group_size(ctx, meta, quantization, "");
    if (status != VOLT8_OK) return status;
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(quantization, "quantized_layers");
    if (layers && !cJSON_IsObject(layers))
      return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: quantized_layers is not an object", meta->origin);
    if (layers) return index_layer_keys(ctx, meta, layers);
  } else if (strcmp(meta->method, "fp8") == 0) {
    meta->fp8 = quantization;
    const cJSON *block = cJSON_GetObjectItemCaseSensitive(quantization, "weight_block_size");
    int numbers = !block || cJSON_IsNull(block) || cJSON_IsArray(block);
    for (const cJSON *item = cJSON_IsArray(block) ? block->child : NULL; item && numbers; item = item->next)
      numbers = cJSON_IsNumber(item);
    if (!numbers) return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: weight_block_size is not a list of numbers", meta->origin);
  }
  return VOLT8_OK;
}

/* An exclusion list, where given, is an array of strings. */
static volt8_status check_string_list(volt8_ctx *ctx, const quant_metadata *meta, const cJSON *list, const char *key) {
  if (!list || cJSON_IsNull(list)) return VOLT8_OK;
  int strings = cJSON_IsArray(list);
  for (const cJSON *item = strings ? list->child : NULL; item && strings; item = item->next) strings = cJSON_IsString(item);
  return strings ? VOLT8_OK : volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: %s is not a list of strings", meta->origin, key);
}

/* Keeps the entries of `list` that can cover an MTP expert module: globs (capped), and names that
 * agree with one of the experts' spellings as far as both go. Each kept entry is matched against
 * every module, so a long list of unrelated names costs one pass here, not one per module. */
static volt8_status collect_exclusions(volt8_ctx *ctx, quant_metadata *meta, const cJSON *list, const char *key,
                                       char spellings[SPELLINGS][SPELLING_BYTES], int spelling_count, size_t *globs) {
  volt8_status status = check_string_list(ctx, meta, list, key);
  if (status != VOLT8_OK || !cJSON_IsArray(list)) return status;
  size_t count = (size_t)cJSON_GetArraySize(list);
  const char **kept = volt8_checkpoint_alloc((meta->excluded_count + count + 1) * sizeof *kept);
  if (!kept) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "%s: out of memory for %s", meta->origin, key);
  if (meta->excluded_count) memcpy(kept, meta->excluded, meta->excluded_count * sizeof *kept);
  volt8_checkpoint_free(meta->excluded);
  meta->excluded = kept;
  for (const cJSON *item = list->child; item; item = item->next) {
    const char *pattern = item->valuestring;
    int glob = strpbrk(pattern, "*?[\\") != NULL, keep = glob;
    for (int s = 0; s < spelling_count && !keep; s++) {
      size_t length = strlen(pattern), spelled = strlen(spellings[s]);
      keep = strncmp(pattern, spellings[s], length < spelled ? length : spelled) == 0;
    }
    if (!keep) continue;
    if ((*globs += glob) > MAX_LAYER_GLOBS || meta->excluded_count == MAX_LAYER_KEYS)
      return volt8_fail(ctx, VOLT8_ERR_UNSUPPORTED, "%s: %s holds more than %d %s that may concern the MTP experts (the "
                        "limit)", meta->origin, key, glob ? MAX_LAYER_GLOBS : MAX_LAYER_KEYS,
                        glob ? "glob patterns" : "entries");
    meta->excluded[meta->excluded_count++] = pattern;
  }
  return VOLT8_OK;
}

static int excluded(const quant_metadata *meta, char spellings[SPELLINGS][SPELLING_BYTES], int spelling_count) {
  for (size_t i = 0; i < meta->excluded_count; i++)
    for (int s = 0; s < spelling_count; s++)
      if (pattern_covers(meta->excluded[i], spellings[s])) return 1;
  return 0;
}

/* The most specific quantized_layers entry for the module: an MTP-layer key (longest), a glob, an ancestor. */
static const cJSON *find_layer_entry(const quant_metadata *meta, const char *rest, char spellings[SPELLINGS][SPELLING_BYTES],
                                     int spelling_count) {
  const cJSON *best = NULL;
  size_t best_rank = 0;
  for (size_t i = 0; i < meta->layer_key_count; i++) {
    const char *key = meta->layer_keys[i]->string;
    int32_t layer = -1;
    size_t layer_length = mtp_layer_match(key, meta->num_hidden_layers, &layer);
    size_t rank = 0;
    if (layer_length && layer == meta->mtp_layer) {
      const char *key_rest = key + layer_length;
      if (pattern_covers(key_rest, rest) || *key_rest == '\0') rank = 1000 + strlen(key_rest);
    } else {
      for (int s = 0; s < spelling_count && !rank; s++)
        if (pattern_covers(key, spellings[s])) rank = is_glob(key) ? 500 : 1 + strlen(key);
    }
    if (rank > best_rank) best = meta->layer_keys[i], best_rank = rank;
  }
  return best;
}

/* What the metadata says of one MTP expert module ("mlp.experts.3.gate_proj", or "mlp.experts" fused). */
static meta_verdict classify_module(const quant_metadata *meta, const char *actual, const char *rest) {
  char spellings[SPELLINGS][SPELLING_BYTES];
  int spelling_count = module_spellings(actual, rest, meta->mtp_layer, meta->num_hidden_layers, spellings);
  if (meta->modelopt) {
    const cJSON *algo = cJSON_GetObjectItemCaseSensitive(meta->modelopt, "quant_algo");
    const char *algo_name = cJSON_IsString(algo) ? algo->valuestring : "";
    if (strcmp(algo_name, "MIXED_PRECISION") == 0) {
      const cJSON *entry = find_layer_entry(meta, rest, spellings, spelling_count);
      return entry ? verdict_for_entry(entry) : make_verdict(META_UNQUANTIZED, "modelopt (not listed)");
    }
    if (!*algo_name || excluded(meta, spellings, spelling_count))
      return make_verdict(META_UNQUANTIZED, "modelopt (excluded)");
    return verdict_for_algo(algo_name, cJSON_GetObjectItemCaseSensitive(meta->modelopt, "group_size"));
  }
  if (meta->fp8) {
    if (excluded(meta, spellings, spelling_count))
      return make_verdict(META_UNQUANTIZED, "fp8 (not converted)");
    const cJSON *block = cJSON_GetObjectItemCaseSensitive(meta->fp8, "weight_block_size");
    if (cJSON_GetArraySize(block) == 2 && cJSON_GetArrayItem(block, 0)->valuedouble == VOLT8_CHECKPOINT_BLOCK &&
        cJSON_GetArrayItem(block, 1)->valuedouble == VOLT8_CHECKPOINT_BLOCK)
      return make_verdict(META_FP8_BLOCK, "fp8 block 128x128");
    return make_verdict(META_OTHER, block ? "fp8 (block not 128x128)" : "fp8 per-tensor");
  }
  meta_verdict verdict = {META_UNKNOWN, ""};
  snprintf(verdict.format, sizeof verdict.format, "%s", *meta->method ? meta->method : "no metadata");
  return verdict;
}

/* ---- finding the experts ---- */

/* Finds the MTP layer's expert tensors: their spelled prefix, the expert count, fused or not. */
static volt8_status discover_experts(volt8_ctx *ctx, volt8_checkpoint *checkpoint, const char *dir,
                                     int32_t num_hidden_layers, int32_t mtp_layer) {
  size_t experts_part = strlen(EXPERTS_PART);
  int64_t largest_expert = -1;
  int fused_parts = 0;
  for (size_t i = 0; i < volt8_st_set_count(checkpoint->set); i++) {
    const char *name = volt8_st_set_name(checkpoint->set, i);
    int32_t layer = -1;
    size_t layer_length = mtp_layer_match(name, num_hidden_layers, &layer);
    if (!layer_length || layer != mtp_layer || strncmp(name + layer_length, EXPERTS_PART, experts_part) != 0) continue;
    size_t prefix_length = layer_length + experts_part;
    if (!checkpoint->tensor_prefix[0]) {
      if (prefix_length >= sizeof checkpoint->tensor_prefix)
        return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor name %s is too long", dir, name);
      snprintf(checkpoint->tensor_prefix, sizeof checkpoint->tensor_prefix, "%.*s", (int)prefix_length, name);
    } else if (strncmp(name, checkpoint->tensor_prefix, prefix_length) != 0 ||
               strlen(checkpoint->tensor_prefix) != prefix_length) {
      return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: MTP layer %d experts appear under two names, %s and %.*s", dir,
                        mtp_layer, checkpoint->tensor_prefix, (int)prefix_length, name);
    }
    const char *tail = name + prefix_length;
    if (strcmp(tail, "gate_up_proj") == 0 || strcmp(tail, "down_proj") == 0) {
      fused_parts++;
    } else if (tail[0] >= '0' && tail[0] <= '9') {
      char *end = NULL;
      long expert = strtol(tail, &end, 10);
      if (*end == '.' && expert < VOLT8_SHAPE_MAX_GLOBAL_EXPERTS && expert > largest_expert) largest_expert = expert;
    }
  }
  if (!checkpoint->tensor_prefix[0])
    return volt8_fail(ctx, VOLT8_ERR_NOT_FOUND,
                      "%s: no MTP experts (looked for mtp.layers.%d.mlp.experts.*%s, with model./model.language_model. "
                      "roots)",
                      dir, mtp_layer, num_hidden_layers > 0 ? " and layers.<num_hidden_layers>" : "");
  if (fused_parts && largest_expert >= 0)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: %s holds both fused (gate_up_proj) and per-expert tensors", dir,
                      checkpoint->tensor_prefix);
  checkpoint->fused = fused_parts > 0;
  checkpoint->num_experts = (int32_t)(largest_expert + 1);
  return VOLT8_OK;
}

static volt8_status find_tensor(volt8_ctx *ctx, volt8_checkpoint *checkpoint, const char *name, int32_t expert,
                                const volt8_st_tensor **out) {
  if (!volt8_st_set_contains(checkpoint->set, name))
    return volt8_fail(ctx, VOLT8_ERR_NOT_FOUND, "%s: MTP expert %d of %d: tensor %s is missing", checkpoint->dir, expert,
                      checkpoint->num_experts, name);
  return volt8_st_set_find(ctx, checkpoint->set, name, out);
}

static volt8_status check_shape(volt8_ctx *ctx, const volt8_st_tensor *tensor, int32_t expert, int32_t rank,
                                const int64_t *expected) {
  int same = tensor->rank == rank;
  for (int32_t d = 0; same && d < rank; d++) same = tensor->shape[d] == expected[d];
  if (same) return VOLT8_OK;
  char want[96] = "", have[96] = "";
  for (int32_t d = 0; d < rank; d++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? "," : "", (long long)expected[d]);
  for (int32_t d = 0; d < tensor->rank; d++)
    snprintf(have + strlen(have), sizeof have - strlen(have), "%s%lld", d ? "," : "", (long long)tensor->shape[d]);
  return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s (expert %d): shape [%s], expected [%s]", tensor->file,
                    tensor->name, expert, have, want);
}

/* The scale of one native matrix: weight_scale_inv (2-D) or weight_scale (2-D, or ModelOpt's 4-D). */
static volt8_status find_scale(volt8_ctx *ctx, volt8_checkpoint *checkpoint, const char *weight_name, int32_t expert,
                               int64_t rows, int64_t cols, const volt8_st_tensor **out) {
  char inverse[NAME_BYTES + 16], plain[NAME_BYTES + 16];
  snprintf(inverse, sizeof inverse, "%s_scale_inv", weight_name);
  snprintf(plain, sizeof plain, "%s_scale", weight_name);
  int has_inverse = volt8_st_set_contains(checkpoint->set, inverse), has_plain = volt8_st_set_contains(checkpoint->set, plain);
  if (has_inverse && has_plain)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: MTP expert %d: both %s and %s exist; which scales apply is ambiguous",
                      checkpoint->dir, expert, inverse, plain);
  if (!has_inverse && !has_plain)
    return volt8_fail(ctx, VOLT8_ERR_NOT_FOUND, "%s: MTP expert %d: no scale for %s (neither %s nor %s)", checkpoint->dir,
                      expert, weight_name, inverse, plain);
  volt8_status status = volt8_st_set_find(ctx, checkpoint->set, has_inverse ? inverse : plain, out);
  if (status != VOLT8_OK) return status;
  const volt8_st_tensor *scale = *out;
  if (scale->dtype != VOLT8_ST_F32 && scale->dtype != VOLT8_ST_BF16 && scale->dtype != VOLT8_ST_F16)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s (expert %d): scale dtype %s, expected F32, BF16 or F16",
                      scale->file, scale->name, expert, volt8_st_dtype_name(scale->dtype));
  int64_t grid[4] = {(rows + 127) / 128, (cols + 127) / 128};
  if (has_plain && scale->rank == 4) {
    int64_t grid4[4] = {grid[0], 1, grid[1], 1};
    return check_shape(ctx, scale, expert, 4, grid4);
  }
  return check_shape(ctx, scale, expert, 2, grid);
}

/* Sizes go to int32 ABI fields: a dimension past INT32_MAX is refused, never truncated. */
static volt8_status check_int32_dims(volt8_ctx *ctx, const volt8_st_tensor *tensor, int64_t first_dim_divisor) {
  for (int32_t d = 0; d < tensor->rank; d++) {
    int64_t extent = tensor->shape[d] / (d == tensor->rank - 2 ? first_dim_divisor : 1);
    if (extent > INT32_MAX)
      return volt8_fail(ctx, VOLT8_ERR_UNSUPPORTED, "%s: tensor %s: shape[%d] = %lld%s does not fit the int32 size fields",
                        tensor->file, tensor->name, (int)d, (long long)tensor->shape[d],
                        d == tensor->rank - 2 && first_dim_divisor > 1 ? " (halved)" : "");
  }
  return VOLT8_OK;
}

static volt8_status resolve_per_expert(volt8_ctx *ctx, volt8_checkpoint *checkpoint, int native) {
  int32_t experts = checkpoint->num_experts;
  checkpoint->tensors = volt8_checkpoint_alloc(sizeof *checkpoint->tensors * (size_t)experts * VOLT8_PROJECTIONS * 2);
  if (!checkpoint->tensors) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for %d experts", experts);
  char name[NAME_BYTES];
  volt8_status status = VOLT8_OK;
  for (int32_t e = 0; e < experts && status == VOLT8_OK; e++) {
    for (int p = 0; p < VOLT8_PROJECTIONS && status == VOLT8_OK; p++) {
      snprintf(name, sizeof name, "%s%d.%s.weight", checkpoint->tensor_prefix, e, projection_names[p]);
      const volt8_st_tensor **weight = &checkpoint->tensors[e * VOLT8_PROJECTIONS + p];
      status = find_tensor(ctx, checkpoint, name, e, weight);
      if (status != VOLT8_OK) break;
      if (e == 0 && p == VOLT8_GATE) {
        if ((*weight)->rank != 2)
          return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s has %d dimensions, expected 2", (*weight)->file, name,
                            (*weight)->rank);
        if ((status = check_int32_dims(ctx, *weight, 1)) != VOLT8_OK) return status;
        checkpoint->intermediate = (int32_t)(*weight)->shape[0];
        checkpoint->hidden = (int32_t)(*weight)->shape[1];
        checkpoint->weight_dtype = (*weight)->dtype;
      }
      if ((*weight)->dtype != checkpoint->weight_dtype)
        return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s (expert %d): dtype %s, but expert 0 is %s", (*weight)->file,
                          name, e, volt8_st_dtype_name((*weight)->dtype), volt8_st_dtype_name(checkpoint->weight_dtype));
      int64_t rows = p == VOLT8_DOWN ? checkpoint->hidden : checkpoint->intermediate;
      int64_t cols = p == VOLT8_DOWN ? checkpoint->intermediate : checkpoint->hidden;
      int64_t expected[2] = {rows, cols};
      status = check_shape(ctx, *weight, e, 2, expected);
      if (status == VOLT8_OK && native)
        status = find_scale(ctx, checkpoint, name, e, rows, cols,
                            &checkpoint->tensors[((size_t)experts + (size_t)e) * VOLT8_PROJECTIONS + p]);
    }
  }
  return status;
}

static volt8_status resolve_fused(volt8_ctx *ctx, volt8_checkpoint *checkpoint) {
  char name[NAME_BYTES];
  snprintf(name, sizeof name, "%sgate_up_proj", checkpoint->tensor_prefix);
  volt8_status status = find_tensor(ctx, checkpoint, name, 0, &checkpoint->fused_gate_up);
  if (status != VOLT8_OK) return status;
  snprintf(name, sizeof name, "%sdown_proj", checkpoint->tensor_prefix);
  if ((status = find_tensor(ctx, checkpoint, name, 0, &checkpoint->fused_down)) != VOLT8_OK) return status;
  const volt8_st_tensor *gate_up = checkpoint->fused_gate_up, *down = checkpoint->fused_down;
  if (gate_up->rank != 3 || gate_up->shape[1] % 2 != 0 || gate_up->shape[0] > VOLT8_SHAPE_MAX_GLOBAL_EXPERTS)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s: expected [experts, 2 x intermediate, hidden]", gate_up->file,
                      gate_up->name);
  if ((status = check_int32_dims(ctx, gate_up, 2)) != VOLT8_OK) return status;
  checkpoint->num_experts = (int32_t)gate_up->shape[0];
  checkpoint->intermediate = (int32_t)(gate_up->shape[1] / 2);
  checkpoint->hidden = (int32_t)gate_up->shape[2];
  checkpoint->weight_dtype = gate_up->dtype;
  int64_t expected[3] = {checkpoint->num_experts, checkpoint->hidden, checkpoint->intermediate};
  if (down->dtype != gate_up->dtype)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensor %s: dtype %s, but %s is %s", down->file, down->name,
                      volt8_st_dtype_name(down->dtype), gate_up->name, volt8_st_dtype_name(gate_up->dtype));
  return check_shape(ctx, down, -1, 3, expected);
}

static int is_float_dtype(volt8_st_dtype dtype) {
  return dtype == VOLT8_ST_F16 || dtype == VOLT8_ST_BF16 || dtype == VOLT8_ST_F32;
}

/* One verdict for all expert modules (they may not mix formats). */
static volt8_status classify_experts(volt8_ctx *ctx, const volt8_checkpoint *checkpoint, quant_metadata *meta,
                                     meta_verdict *out) {
  char actual[NAME_BYTES];
  size_t layer_length = strlen(checkpoint->tensor_prefix) - strlen(EXPERTS_PART);
  char spellings[SPELLINGS][SPELLING_BYTES];
  snprintf(actual, sizeof actual, "%.*s", (int)strlen(checkpoint->tensor_prefix) - 1, checkpoint->tensor_prefix);
  int spelling_count = module_spellings(actual, actual + layer_length, meta->mtp_layer, meta->num_hidden_layers, spellings);
  static const char *const list_keys[3] = {"exclude_modules", "modules_to_not_convert", "ignored_layers"};
  size_t globs = 0;
  for (int i = 0; i < 3; i++) {
    const cJSON *settings = i == 0 ? meta->modelopt : meta->fp8;
    volt8_status status = settings ? collect_exclusions(ctx, meta, cJSON_GetObjectItemCaseSensitive(settings, list_keys[i]),
                                                        list_keys[i], spellings, spelling_count, &globs)
                                   : VOLT8_OK;
    if (status != VOLT8_OK) return status;
  }
  int32_t modules = checkpoint->fused ? 1 : checkpoint->num_experts * VOLT8_PROJECTIONS;
  for (int32_t m = 0; m < modules; m++) {
    if (checkpoint->fused)
      snprintf(actual, sizeof actual, "%.*s", (int)strlen(checkpoint->tensor_prefix) - 1, checkpoint->tensor_prefix);
    else
      snprintf(actual, sizeof actual, "%s%d.%s", checkpoint->tensor_prefix, m / VOLT8_PROJECTIONS,
               projection_names[m % VOLT8_PROJECTIONS]);
    meta_verdict verdict = classify_module(meta, actual, actual + layer_length);
    if (m == 0) *out = verdict;
    else if (verdict.kind != out->kind || strcmp(verdict.format, out->format) != 0)
      return volt8_fail(ctx, VOLT8_ERR_UNSUPPORTED, "%s: %s quantization metadata gives %s, but %s0.gate_proj has %s",
                        meta->origin, actual, verdict.format, checkpoint->tensor_prefix, out->format);
  }
  return VOLT8_OK;
}

/* Native, online, or an error: what the tensors are, what the metadata says, what the caller asked. */
static volt8_status choose_route(volt8_ctx *ctx, volt8_checkpoint *checkpoint, const meta_verdict *verdict,
                                 int online_requested) {
  const char *dtype = volt8_st_dtype_name(checkpoint->weight_dtype);
  char where[NAME_BYTES + 1024];
  snprintf(where, sizeof where, "%.1000s: %s*", checkpoint->dir, checkpoint->tensor_prefix);
  if (verdict->kind == META_OTHER)
    return volt8_fail(ctx, VOLT8_ERR_UNSUPPORTED, "%s: the metadata quantizes the MTP experts as %s; volt8 reads 128x128 "
                      "block FP8 or unquantized experts", where, verdict->format);
  if (checkpoint->weight_dtype == VOLT8_ST_F8_E4M3 && !checkpoint->fused) {
    if (verdict->kind == META_UNQUANTIZED)
      return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: tensors are F8_E4M3 but the metadata (%s) leaves them unquantized",
                        where, verdict->format);
    if (online_requested)
      return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "%s: mtp_expert_quantization=fp8 asks to quantize experts that "
                        "are already FP8; online conversion applies to unquantized experts only", where);
    checkpoint->route = VOLT8_ROUTE_NATIVE;
    snprintf(checkpoint->quant_format, sizeof checkpoint->quant_format, "%s",
             verdict->kind == META_FP8_BLOCK ? verdict->format : "F8_E4M3 (no metadata)");
    return VOLT8_OK;
  }
  if (!is_float_dtype(checkpoint->weight_dtype))
    return volt8_fail(ctx, VOLT8_ERR_UNSUPPORTED, "%s: expert weights of dtype %s%s are not supported", where, dtype,
                      checkpoint->fused ? " (fused)" : "");
  if (verdict->kind == META_FP8_BLOCK)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: the metadata (%s) declares FP8 experts but the tensors are %s", where,
                      verdict->format, dtype);
  if (!online_requested)
    return volt8_fail(ctx, VOLT8_ERR_UNSUPPORTED, "%s: the MTP experts are unquantized (%s); set "
                      "mtp_expert_quantization to \"fp8\" to quantize them at load", where, dtype);
  checkpoint->route = VOLT8_ROUTE_ONLINE;
  snprintf(checkpoint->quant_format, sizeof checkpoint->quant_format, "unquantized %s", dtype);
  return VOLT8_OK;
}

/* The config's sizes, where it states them, must agree with the tensors. */
static volt8_status check_config_sizes(volt8_ctx *ctx, const volt8_checkpoint *checkpoint, const checkpoint_config *config) {
  struct { const char *key; int32_t value; } sizes[] = {
      {"hidden_size", checkpoint->hidden},       {"moe_intermediate_size", checkpoint->intermediate},
      {"num_experts", checkpoint->num_experts},  {"n_routed_experts", checkpoint->num_experts},
      {"num_local_experts", checkpoint->num_experts}};
  for (size_t i = 0; config->config && i < sizeof sizes / sizeof sizes[0]; i++) {
    int64_t stated = 0;
    int found = config_int(ctx, config, sizes[i].key, &stated);
    if (found < 0) return VOLT8_ERR_FORMAT;
    if (found && stated != sizes[i].value)
      return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: config.json gives %s = %lld but the MTP expert tensors (%s*) have %d",
                        checkpoint->dir, sizes[i].key, (long long)stated, checkpoint->tensor_prefix, sizes[i].value);
  }
  if (checkpoint->hidden <= 0 || checkpoint->intermediate <= 0 || checkpoint->num_experts <= 0)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "%s: %s*: empty experts (hidden %d, intermediate %d, %d experts)",
                      checkpoint->dir, checkpoint->tensor_prefix, checkpoint->hidden, checkpoint->intermediate, checkpoint->num_experts);
  if (checkpoint->hidden % 16 != 0)
    return volt8_fail(ctx, VOLT8_ERR_UNSUPPORTED, "%s: %s*: hidden size %d is not a multiple of 16", checkpoint->dir,
                      checkpoint->tensor_prefix,
                      checkpoint->hidden);
  return VOLT8_OK;
}

static int online_requested(const volt8_load_options *options, const checkpoint_config *config) {
  if (options->mtp_expert_quantization && *options->mtp_expert_quantization) return 1;
  const cJSON *setting = config_item(config->config, "mtp_expert_quantization");
  return cJSON_IsString(setting) && strcmp(setting->valuestring, "fp8") == 0;
}

static volt8_status open_experts(volt8_ctx *ctx, volt8_checkpoint *checkpoint, const volt8_load_options *options,
                                 const checkpoint_config *config, quant_metadata *meta) {
  const char *dir = options->draft_checkpoint_dir ? options->draft_checkpoint_dir : options->checkpoint_dir;
  checkpoint->dir = dir;
  volt8_status status = volt8_st_set_open(ctx, dir, &checkpoint->set);
  if (status == VOLT8_OK) status = discover_experts(ctx, checkpoint, dir, config->num_hidden_layers, options->mtp_layer);
  if (status == VOLT8_OK && checkpoint->fused) status = resolve_fused(ctx, checkpoint);
  if (status == VOLT8_OK && !checkpoint->fused) {
    /* expert 0's gate says whether scales must exist; every other tensor is held to it */
    char name[NAME_BYTES];
    snprintf(name, sizeof name, "%s0.gate_proj.weight", checkpoint->tensor_prefix);
    const volt8_st_tensor *first = NULL;
    status = find_tensor(ctx, checkpoint, name, 0, &first);
    if (status == VOLT8_OK) status = resolve_per_expert(ctx, checkpoint, first->dtype == VOLT8_ST_F8_E4M3);
  }
  if (status == VOLT8_OK) status = check_config_sizes(ctx, checkpoint, config);
  meta_verdict verdict;
  if (status == VOLT8_OK) status = classify_experts(ctx, checkpoint, meta, &verdict);
  if (status == VOLT8_OK) status = choose_route(ctx, checkpoint, &verdict, online_requested(options, config));
  if (status == VOLT8_OK && checkpoint->route == VOLT8_ROUTE_NATIVE)
    checkpoint->scale_dtype = checkpoint->tensors[(size_t)checkpoint->num_experts * VOLT8_PROJECTIONS]->dtype;
  return status;
}

volt8_status volt8_checkpoint_open(volt8_ctx *ctx, const volt8_load_options *options, volt8_checkpoint **out_checkpoint) {
  *out_checkpoint = NULL;
  checkpoint_config config;
  quant_metadata meta = {0};
  volt8_checkpoint *checkpoint = volt8_checkpoint_alloc(sizeof *checkpoint);
  if (!checkpoint) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the checkpoint");
  volt8_status status = read_config(ctx, options, &config);
  meta.num_hidden_layers = config.num_hidden_layers;
  meta.mtp_layer = options->mtp_layer;
  if (status == VOLT8_OK) status = read_metadata(ctx, &config, &meta);
  if (status == VOLT8_OK) status = open_experts(ctx, checkpoint, options, &config, &meta);
  volt8_checkpoint_free(meta.layer_keys);
  volt8_checkpoint_free(meta.excluded);
  cJSON_Delete(config.config);
  cJSON_Delete(config.quant_file);
  if (status != VOLT8_OK) {
    volt8_checkpoint_close(checkpoint);
    return status;
  }
  *out_checkpoint = checkpoint;
  return VOLT8_OK;
}

void volt8_checkpoint_close(volt8_checkpoint *checkpoint) {
  if (!checkpoint) return;
  volt8_st_set_close(checkpoint->set);
  volt8_checkpoint_free(checkpoint->tensors);
  volt8_checkpoint_free(checkpoint);
}

void volt8_checkpoint_matrix(const volt8_checkpoint *checkpoint, int32_t expert, int32_t projection,
                             volt8_matrix_source *out) {
  int64_t hidden = checkpoint->hidden, intermediate = checkpoint->intermediate;
  size_t element_bytes = (size_t)volt8_st_dtype_bits(checkpoint->weight_dtype) / 8;
  int down = projection == VOLT8_DOWN;
  memset(out, 0, sizeof *out);
  out->rows = down ? hidden : intermediate;
  out->cols = down ? intermediate : hidden;
  if (checkpoint->fused) {
    out->weight = down ? checkpoint->fused_down : checkpoint->fused_gate_up;
    out->row_base = projection == VOLT8_UP ? intermediate : 0;
    size_t expert_elements = (size_t)(down ? 1 : 2) * (size_t)intermediate * (size_t)hidden;
    out->data = out->weight->data + ((size_t)expert * expert_elements + (size_t)out->row_base * (size_t)hidden) * element_bytes;
    return;
  }
  size_t index = (size_t)expert * VOLT8_PROJECTIONS + (size_t)projection;
  out->weight = checkpoint->tensors[index];
  out->data = out->weight->data;
  if (checkpoint->route == VOLT8_ROUTE_NATIVE)
    out->scale = checkpoint->tensors[(size_t)checkpoint->num_experts * VOLT8_PROJECTIONS + index];
}
