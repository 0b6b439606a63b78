/* Malformed inputs that once hung, truncated, passed silently or cost far more than their size:
 * FIFOs and folders where files belong, shapes past int32, lenient JSON, long lists, long paths,
 * and the messages each gives. Every test runs under a timeout, so a hang is a failure. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "jit/cache.h"
#include "core/ctx_internal.h"
#include "core/numeric.h"
#include "checkpoint/safetensors.h"
#include "dispatch/tuning.h"

#include "test_support.h"
#include "tiny_checkpoint.h"

TestSuite(hardening, .timeout = 60);

static char work_dir[512];

static void make_work_dir(void) {
  snprintf(work_dir, sizeof work_dir, "/tmp/volt8-hardening-XXXXXX");
  cr_assert_not_null(mkdtemp(work_dir), "mkdtemp: %s", strerror(errno));
}

static void remove_work_dir(void) { test_remove_tree(work_dir); }

static void path_in(char *path, size_t bytes, const char *name) { snprintf(path, bytes, "%s/%s", work_dir, name); }

static void write_text(const char *name, const char *text, size_t length) {
  char path[1024];
  path_in(path, sizeof path, name);
  FILE *stream = fopen(path, "wb");
  cr_assert(stream && fwrite(text, 1, length, stream) == length && fclose(stream) == 0, "cannot write %s", path);
}

static void make_fifo(const char *name) {
  char path[1024];
  path_in(path, sizeof path, name);
  unlink(path);
  cr_assert_eq(mkfifo(path, 0644), 0, "mkfifo %s: %s", path, strerror(errno));
}

/* A safetensors file of `header`, `data` and then zeros up to data_total bytes (a sparse tail). */
static void write_safetensors(const char *name, const char *header, const void *data, size_t data_bytes,
                              uint64_t data_total) {
  char path[1024];
  path_in(path, sizeof path, name);
  uint64_t header_bytes = strlen(header);
  uint8_t length[8];
  for (int i = 0; i < 8; i++) length[i] = (uint8_t)(header_bytes >> (8 * i));
  FILE *stream = fopen(path, "wb");
  cr_assert(stream && fwrite(length, 1, 8, stream) == 8 && fwrite(header, 1, header_bytes, stream) == header_bytes &&
                fwrite(data, 1, data_bytes, stream) == data_bytes && fclose(stream) == 0,
            "cannot write %s", path);
  cr_assert_eq(truncate(path, (off_t)(8 + header_bytes + data_total)), 0, "truncate %s: %s", path, strerror(errno));
}

/* volt8_plan on work_dir; the message is copied into `message`. */
static volt8_status plan_work_dir(const char *online, int32_t mtp_layer, char *message, size_t message_bytes) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = work_dir;
  options.mtp_expert_quantization = online;
  options.mtp_layer = mtp_layer;
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  volt8_status status = volt8_plan(ctx, &options, &plan);
  snprintf(message, message_bytes, "%s", volt8_last_error(ctx));
  volt8_ctx_destroy(ctx);
  return status;
}

static double seconds_now(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + now.tv_nsec * 1e-9;
}

/* ---- FIFOs, folders and devices where a file belongs ---- */

struct odd_file {
  const char *name;     /* made in a good checkpoint folder */
  int directory;        /* 1: a folder, 0: a FIFO */
  const char *what;     /* the message must say what it is */
};

static const struct odd_file odd_files[] = {
    {"zz.safetensors", 0, "FIFO"},         {"config.json", 0, "FIFO"},
    {"hf_quant_config.json", 0, "FIFO"},   {"model.safetensors.index.json", 0, "FIFO"},
    {"model.safetensors.index.json", 1, "directory"}, {"hf_quant_config.json", 1, "directory"},
};
#define ODD_FILES (sizeof odd_files / sizeof odd_files[0])

/* Parameters are indices: the child process that runs a case may not share the parent's addresses. */
ParameterizedTestParameters(hardening, odd_file_is_refused_by_name) {
  static int indices[ODD_FILES];
  for (size_t i = 0; i < ODD_FILES; i++) indices[i] = (int)i;
  return cr_make_param_array(int, indices, ODD_FILES);
}

ParameterizedTest(int *index, hardening, odd_file_is_refused_by_name, .init = make_work_dir, .fini = remove_work_dir,
                  .timeout = 20) {
  const struct odd_file *odd = &odd_files[*index];
  cr_assert(tiny_checkpoint_write(work_dir, 2), "cannot write the checkpoint");
  char path[1024], message[VOLT8_ERROR_MESSAGE_BYTES];
  path_in(path, sizeof path, odd->name);
  unlink(path);
  if (odd->directory) cr_assert_eq(mkdir(path, 0755), 0);
  else make_fifo(odd->name);
  volt8_status status = plan_work_dir(NULL, 0, message, sizeof message);
  cr_assert_eq(status, VOLT8_ERR_IO, "%s: %s (%s)", odd->name, volt8_status_string(status), message);
  cr_assert(strstr(message, odd->name) && strstr(message, odd->what), "%s: %s", odd->name, message);
  cr_assert_null(strstr(message, "9223372036854775807"), "%s", message);
}

/* The tuning tables of the default shape's gate_up op for ctx, both device spellings. */
static void tuning_table_names(volt8_ctx *ctx, char names[2][VOLT8_TUNING_NAME_BYTES]) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  int32_t n = 0, k = 0;
  cr_assert_eq(volt8_tuning_op_dims(ctx, &shape, VOLT8_OP_GATE_UP, &n, &k), VOLT8_OK);
  char device[128];
  volt8_tuning_device_token(ctx->device_name, device, sizeof device);
  const char *devices[2] = {device, VOLT8_TUNING_ANY_DEVICE};
  for (int i = 0; i < 2; i++)
    cr_assert_eq(volt8_tuning_table_name(ctx, "gate_up", n, k, shape.block_n, shape.block_k, ctx->target_arch,
                                         devices[i], names[i], VOLT8_TUNING_NAME_BYTES), VOLT8_OK);
}

static void lookup_warnings(volt8_ctx *ctx, char *warnings, size_t bytes) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  volt8_tuning_match match;
  cr_assert_eq(volt8_tuning_lookup(ctx, &shape, VOLT8_OP_GATE_UP, 4, 8, &match), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_neq(match.source, VOLT8_TUNING_SOURCE_ENV_DIR, "a table that is no file served the lookup");
  int32_t count = 0;
  cr_assert_eq(volt8_tuning_warnings(warnings, bytes, &count), VOLT8_OK);
}

Test(hardening, tuning_table_fifo_is_skipped_with_a_warning, .init = make_work_dir, .fini = remove_work_dir,
     .timeout = 20) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  char names[2][VOLT8_TUNING_NAME_BYTES], warnings[1 << 14];
  tuning_table_names(ctx, names);
  make_fifo(names[0]);
  make_fifo(names[1]);
  setenv(VOLT8_TUNING_DIR_ENV, work_dir, 1);
  volt8_tuning_warnings_reset();
  lookup_warnings(ctx, warnings, sizeof warnings);
  cr_assert(strstr(warnings, "FIFO") && strstr(warnings, names[0]), "%s", warnings);
  volt8_ctx_destroy(ctx);
}

Test(hardening, oversized_tuning_table_names_its_size, .init = make_work_dir, .fini = remove_work_dir) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  char names[2][VOLT8_TUNING_NAME_BYTES], warnings[1 << 14];
  tuning_table_names(ctx, names);
  size_t bytes = 2u << 20;
  char *text = malloc(bytes);
  cr_assert_not_null(text);
  memset(text, ' ', bytes);
  text[0] = '{', text[bytes - 1] = '}';
  write_text(names[0], text, bytes);
  free(text);
  setenv(VOLT8_TUNING_DIR_ENV, work_dir, 1);
  volt8_tuning_warnings_reset();
  lookup_warnings(ctx, warnings, sizeof warnings);
  cr_assert(strstr(warnings, "2097152 bytes") && strstr(warnings, "1048576"), "%s", warnings);
  cr_assert_null(strstr(warnings, "1048577"), "%s", warnings);
  volt8_ctx_destroy(ctx);
}

Test(hardening, cache_entry_fifo_is_a_miss, .init = make_work_dir, .fini = remove_work_dir, .timeout = 20) {
  const char *options[] = {"--gpu-architecture=compute_70"};
  volt8_cache_inputs inputs = {"fifo_kernel", "extern \"C\" __global__ void fifo_kernel() {}", 70, VOLT8_IMAGE_PTX,
                               options, 1};
  char *path = volt8_cache_entry_path(work_dir, &inputs, "12.9");
  cr_assert_not_null(path);
  for (char *slash = strchr(path + strlen(work_dir) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
    *slash = '\0';
    mkdir(path, 0755);
    *slash = '/';
  }
  cr_assert_eq(mkfifo(path, 0644), 0, "mkfifo %s: %s", path, strerror(errno));
  volt8_jit_image image;
  cr_assert_eq(volt8_cache_load(work_dir, &inputs, "12.9", &image), VOLT8_ERR_NOT_FOUND);
  cr_assert_eq(volt8_cache_load(work_dir, &inputs, NULL, &image), VOLT8_ERR_NOT_FOUND);
  free(path);
}

/* ---- sizes past the int32 ABI fields ---- */

/* gate_up [1, 2^33 + 128, 1]: halved, 2^32 + 64, which int32 truncation made 64. */
Test(hardening, fused_intermediate_past_int32_is_refused, .init = make_work_dir, .fini = remove_work_dir) {
  uint64_t rows = (1ull << 33) + 128, gate_up_bytes = rows * 2;
  char header[512];
  snprintf(header, sizeof header,
           "{\"mtp.layers.0.mlp.experts.gate_up_proj\":{\"dtype\":\"BF16\",\"shape\":[1,%llu,1],\"data_offsets\":[0,%llu]},"
           "\"mtp.layers.0.mlp.experts.down_proj\":{\"dtype\":\"BF16\",\"shape\":[1,1,64],\"data_offsets\":[%llu,%llu]}}",
           (unsigned long long)rows, (unsigned long long)gate_up_bytes, (unsigned long long)gate_up_bytes,
           (unsigned long long)gate_up_bytes + 128);
  write_safetensors("model.safetensors", header, "", 0, gate_up_bytes + 128);
  char message[VOLT8_ERROR_MESSAGE_BYTES];
  volt8_status status = plan_work_dir("fp8", 0, message, sizeof message);
  cr_assert_eq(status, VOLT8_ERR_UNSUPPORTED, "%s: %s", volt8_status_string(status), message);
  cr_assert(strstr(message, "gate_up_proj") && strstr(message, "8589934720") && strstr(message, "int32"), "%s", message);
}

Test(hardening, per_expert_rows_past_int32_are_refused, .init = make_work_dir, .fini = remove_work_dir) {
  uint64_t rows = (1ull << 32) + 32;
  char header[512];
  snprintf(header, sizeof header,
           "{\"mtp.layers.0.mlp.experts.0.gate_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[%llu,1],"
           "\"data_offsets\":[0,%llu]}}",
           (unsigned long long)rows, (unsigned long long)rows * 2);
  write_safetensors("model.safetensors", header, "", 0, rows * 2);
  char message[VOLT8_ERROR_MESSAGE_BYTES];
  volt8_status status = plan_work_dir("fp8", 0, message, sizeof message);
  cr_assert_eq(status, VOLT8_ERR_UNSUPPORTED, "%s: %s", volt8_status_string(status), message);
  cr_assert(strstr(message, "4294967328") && strstr(message, "int32"), "%s", message);
}

Test(hardening, mtp_layer_near_int32_max_is_refused, .init = make_work_dir, .fini = remove_work_dir) {
  cr_assert(tiny_checkpoint_write(work_dir, 2), "cannot write the checkpoint");
  const char config[] = "{\"num_hidden_layers\": 8}";
  write_text("config.json", config, sizeof config - 1);
  char message[VOLT8_ERROR_MESSAGE_BYTES];
  volt8_status status = plan_work_dir(NULL, INT32_MAX, message, sizeof message);
  cr_assert_eq(status, VOLT8_ERR_INVALID_ARGUMENT, "%s: %s", volt8_status_string(status), message);
  cr_assert(strstr(message, "mtp_layer is 2147483647"), "%s", message);
}

/* An unquantized weight of 65504 once quantized to code 448 and scale 146.25: 65520, beyond FP16.
 * The host load now holds it to the native route's rule (the GPU suite runs its forward). */
Test(hardening, online_weight_of_fp16_max_dequantizes_within_fp16, .init = make_work_dir, .fini = remove_work_dir) {
  enum { SIZE = 128 };
  cr_assert(tiny_online_checkpoint_write(work_dir, 2, SIZE, 65504.0f), "cannot write the checkpoint");
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = work_dir;
  options.mtp_expert_quantization = "fp8";
  volt8_host_checkpoint *host = NULL;
  cr_assert_eq(volt8_checkpoint_load_host(ctx, &options, &host), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(host->shape.block_n, 128);
  const uint8_t *w2 = host->experts.w2; /* expert 0: [H][I], one 128x128 block */
  double scale = volt8_half_to_double(((const uint16_t *)host->experts.s2)[0]) / 256.0, largest = 0.0;
  for (int i = 0; i < SIZE * SIZE; i++) {
    double dequantized = fabs((double)volt8_e4m3_to_float(w2[i])) * scale;
    cr_assert_leq(dequantized, 65504.0, "down [%d, %d] dequantizes to %g (scale %g)", i / SIZE, i % SIZE, dequantized,
                  scale);
    largest = dequantized > largest ? dequantized : largest;
  }
  cr_assert_geq(largest, 65000.0, "the 65504 weight came back as %g", largest);
  volt8_host_checkpoint_free(host);
  volt8_ctx_destroy(ctx);
}

/* ---- JSON read as strictly as the format's reference ---- */

/* The work folder's model.safetensors does not open: a format error whose message says `first` and `second`. */
static void expect_model_format_error(const char *first, const char *second) {
  char path[1024];
  path_in(path, sizeof path, "model.safetensors");
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_st_file *file = NULL;
  cr_assert_eq(volt8_st_file_open(ctx, path, &file), VOLT8_ERR_FORMAT);
  cr_assert(strstr(volt8_last_error(ctx), first) && strstr(volt8_last_error(ctx), second), "%s", volt8_last_error(ctx));
  volt8_ctx_destroy(ctx);
}

Test(hardening, duplicate_key_in_a_tensor_entry_is_refused, .init = make_work_dir, .fini = remove_work_dir) {
  const char header[] = "{\"t\":{\"dtype\":\"F8_E4M3\",\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,1]}}";
  write_safetensors("model.safetensors", header, "\x38", 1, 1);
  expect_model_format_error("\"dtype\" twice", "\"t\"");
}

struct bad_config {
  const char *text;
  const char *message; /* beside "config.json" */
};

static const struct bad_config bad_configs[] = {
    {"{\"hidden_size\": 16, \"hidden_size\": 16}", "\"hidden_size\" twice"},
    {"{\"hidden_size\": 16}\n{\"hidden_size\": 32}", "trailing characters"},
    {"{\"name\": \"\xff\xfe\"}", "not valid UTF-8"},
    {"{\"hidden_size\": \"4096\"}", "hidden_size is \"4096\", not an integer"},
    {"{\"hidden_size\": 4096.5}", "hidden_size is 4096.5, not an integer"},
    {"{\"text_config\": {\"num_hidden_layers\": \"8\"}}", "text_config.num_hidden_layers"},
    {"{\"quantization_config\": {\"quant_method\": 8}}", "quant_method is not a string"},
};
#define BAD_CONFIGS (sizeof bad_configs / sizeof bad_configs[0])

ParameterizedTestParameters(hardening, lenient_config_is_refused) {
  static int indices[BAD_CONFIGS];
  for (size_t i = 0; i < BAD_CONFIGS; i++) indices[i] = (int)i;
  return cr_make_param_array(int, indices, BAD_CONFIGS);
}

ParameterizedTest(int *index, hardening, lenient_config_is_refused, .init = make_work_dir, .fini = remove_work_dir) {
  const struct bad_config *bad = &bad_configs[*index];
  cr_assert(tiny_checkpoint_write(work_dir, 2), "cannot write the checkpoint");
  write_text("config.json", bad->text, strlen(bad->text));
  char message[VOLT8_ERROR_MESSAGE_BYTES];
  volt8_status status = plan_work_dir(NULL, 0, message, sizeof message);
  cr_assert_eq(status, VOLT8_ERR_FORMAT, "%s: %s: %s", bad->text, volt8_status_string(status), message);
  cr_assert(strstr(message, "config.json") && strstr(message, bad->message), "%s: %s", bad->text, message);
}

Test(hardening, string_group_size_is_named, .init = make_work_dir, .fini = remove_work_dir) {
  cr_assert(tiny_checkpoint_write(work_dir, 2), "cannot write the checkpoint");
  const char config[] = "{\"num_hidden_layers\": 4}";
  const char quant[] = "{\"quantization\": {\"quant_algo\": \"FP8_PB_WO\", \"group_size\": \"128\"}}";
  write_text("config.json", config, sizeof config - 1);
  write_text("hf_quant_config.json", quant, sizeof quant - 1);
  char message[VOLT8_ERROR_MESSAGE_BYTES];
  volt8_status status = plan_work_dir(NULL, 0, message, sizeof message);
  cr_assert_eq(status, VOLT8_ERR_FORMAT, "%s: %s", volt8_status_string(status), message);
  cr_assert(strstr(message, "hf_quant_config.json") && strstr(message, "group_size is \"128\", not a number"), "%s",
            message);
  cr_assert_null(strstr(message, "group 0"), "%s", message);
}

Test(hardening, tuning_table_with_trailing_garbage_is_refused) {
  const char text[] = "{\"__metadata__\": {\"schema_version\": 1}, \"1\": \"gate_up.cc.bm1.bn4.w4.sk1.l32\"} garbage";
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_tuning_table table;
  cr_assert_eq(volt8_tuning_table_parse(ctx, text, sizeof text - 1, "garbage.json", "gate_up", &table), VOLT8_ERR_FORMAT);
  cr_assert(strstr(volt8_last_error(ctx), "garbage.json") && strstr(volt8_last_error(ctx), "trailing"), "%s",
            volt8_last_error(ctx));
  volt8_ctx_destroy(ctx);
}

/* ---- cost: linear in the input, capped where a limit is named ---- */

/* One JSON object of `count` members made by `member` (index -> text), written as `name`. */
static void write_object(const char *name, const char *prefix, const char *suffix, size_t count,
                         int (*member)(char *, size_t, size_t)) {
  size_t capacity = strlen(prefix) + strlen(suffix) + count * 96 + 16, used = 0;
  char *text = malloc(capacity);
  cr_assert_not_null(text);
  used += (size_t)snprintf(text, capacity, "%s", prefix);
  for (size_t i = 0; i < count; i++) {
    if (i) text[used++] = ',';
    used += (size_t)member(text + used, capacity - used, i);
  }
  used += (size_t)snprintf(text + used, capacity - used, "%s", suffix);
  write_text(name, text, used);
  free(text);
}

static int distinct_shard(char *at, size_t left, size_t i) {
  return snprintf(at, left, "\"tensor.%zu\": \"shard-%zu.safetensors\"", i, i);
}

Test(hardening, index_of_many_shards_opens_in_linear_time, .init = make_work_dir, .fini = remove_work_dir) {
  write_object("model.safetensors.index.json", "{\"weight_map\": {", "}}", 100000, distinct_shard);
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_st_set *set = NULL;
  double start = seconds_now();
  cr_assert_eq(volt8_st_set_open(ctx, work_dir, &set), VOLT8_OK, "%s", volt8_last_error(ctx));
  double seconds = seconds_now() - start;
  cr_assert_eq(volt8_st_set_count(set), 100000);
  cr_assert_lt(seconds, 5.0, "100k shard names took %.1f s", seconds);
  volt8_st_set_close(set);
  volt8_ctx_destroy(ctx);
}

static int glob_key(char *at, size_t left, size_t i) {
  return snprintf(at, left, "\"model.layers.%zu.*\": {\"quant_algo\": \"FP8\"}", i);
}

Test(hardening, many_quantized_layer_globs_hit_a_named_limit, .init = make_work_dir, .fini = remove_work_dir) {
  cr_assert(tiny_checkpoint_write(work_dir, 64), "cannot write the checkpoint");
  const char config[] = "{\"num_hidden_layers\": 4}";
  write_text("config.json", config, sizeof config - 1);
  write_object("hf_quant_config.json", "{\"quantization\": {\"quant_algo\": \"MIXED_PRECISION\", \"quantized_layers\": {",
               "}}}", 200000, glob_key);
  char message[VOLT8_ERROR_MESSAGE_BYTES];
  double start = seconds_now();
  volt8_status status = plan_work_dir(NULL, 0, message, sizeof message);
  double seconds = seconds_now() - start;
  cr_assert_eq(status, VOLT8_ERR_UNSUPPORTED, "%s: %s", volt8_status_string(status), message);
  cr_assert(strstr(message, "quantized_layers") && strstr(message, "256 glob patterns") && strstr(message, "limit"),
            "%s", message);
  cr_assert_lt(seconds, 5.0, "200k glob keys took %.1f s", seconds);
}

static int unrelated_module(char *at, size_t left, size_t i) {
  return snprintf(at, left, "\"model.layers.%zu.mlp.gate\"", i);
}

Test(hardening, long_exclusion_list_costs_one_pass, .init = make_work_dir, .fini = remove_work_dir) {
  cr_assert(tiny_checkpoint_write(work_dir, 64), "cannot write the checkpoint");
  write_object("config.json",
               "{\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], "
               "\"modules_to_not_convert\": [",
               "]}}", 200000, unrelated_module);
  char message[VOLT8_ERROR_MESSAGE_BYTES];
  double start = seconds_now();
  volt8_status status = plan_work_dir(NULL, 0, message, sizeof message);
  double seconds = seconds_now() - start;
  cr_assert_eq(status, VOLT8_OK, "%s: %s", volt8_status_string(status), message);
  cr_assert_lt(seconds, 5.0, "200k excluded names took %.1f s", seconds);
}

static int empty_tensor(char *at, size_t left, size_t i) {
  return snprintf(at, left, "\"t%zu\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}", i);
}

Test(hardening, header_of_many_tensors_hits_a_named_limit, .init = make_work_dir, .fini = remove_work_dir) {
  write_object("header.json", "{", "}", 300000, empty_tensor);
  char path[1024];
  path_in(path, sizeof path, "header.json");
  size_t bytes = 0;
  char *header = test_read_whole(path, &bytes);
  write_safetensors("model.safetensors", header, "", 0, 0);
  free(header);
  expect_model_format_error("JSON values", "limit of 2097152");
}

/* ---- messages ---- */

Test(hardening, very_long_path_keeps_the_reason) {
  size_t length = 3 * VOLT8_ERROR_MESSAGE_BYTES;
  char *dir = malloc(length + 1);
  cr_assert_not_null(dir);
  memset(dir, 'a', length);
  memcpy(dir, "/tmp/", 5);
  dir[length] = '\0';
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = dir;
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  cr_assert_neq(volt8_plan(ctx, &options, &plan), VOLT8_OK);
  const char *message = volt8_last_error(ctx);
  cr_assert_lt(strlen(message), (size_t)VOLT8_ERROR_MESSAGE_BYTES);
  cr_assert(strstr(message, "[...]") && strstr(message, strerror(ENAMETOOLONG)), "%.200s ... %s", message,
            message + strlen(message) - 120);
  volt8_ctx_destroy(ctx);
  free(dir);
}

Test(hardening, plan_json_escapes_a_non_utf8_folder, .init = make_work_dir, .fini = remove_work_dir) {
  char dir[1024], command[2048];
  path_in(dir, sizeof dir, "ck\xff\xfe");
  cr_assert(tiny_checkpoint_write(dir, 2), "cannot write the checkpoint");
  snprintf(command, sizeof command, "VOLT8_CACHE_DISABLE=1 '%s' plan '%s' --tp 1 --json", VOLT8_CLI_PATH, dir);
  FILE *pipe = popen(command, "r");
  cr_assert_not_null(pipe);
  static char output[1 << 16];
  size_t bytes = fread(output, 1, sizeof output - 1, pipe);
  output[bytes] = '\0';
  cr_assert_eq(pclose(pipe), 0, "%s", output);
  cr_assert_null(memchr(output, 0xff, bytes), "%s", output);
  cr_assert_not_null(strstr(output, "ck\\ufffd\\ufffd"), "%s", output);
  cJSON *root = cJSON_Parse(output);
  cr_assert(cJSON_IsObject(root), "%s", output);
  cJSON_Delete(root);
}

Test(hardening, no_cache_without_home_says_what_to_set) {
  unsetenv("HOME");
  unsetenv("XDG_CACHE_HOME");
  unsetenv("VOLT8_CACHE_DIR");
  unsetenv("VOLT8_CACHE_DISABLE");
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_OK, "%s", volt8_last_error(NULL));
  int32_t count = -1;
  char why[1024];
  cr_assert_eq(volt8_cache_store_failures(ctx, &count, why, sizeof why), VOLT8_OK);
  cr_assert_eq(count, 0);
  cr_assert(strstr(why, "HOME") && strstr(why, "unset") && strstr(why, "set VOLT8_CACHE_DIR"), "%s", why);
  cr_assert_null(strstr(why, "disabled"), "%s", why);
  volt8_ctx_destroy(ctx);
}

Test(hardening, kernels_the_cache_did_not_keep_are_counted, .init = make_work_dir, .fini = remove_work_dir,
     .timeout = 300) {
  char cache[1024];
  path_in(cache, sizeof cache, "not-a-folder");
  write_text("not-a-folder", "x", 1);
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.cache_dir = cache;
  options.target_arch = "sm_70";
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_OK, "%s", volt8_last_error(NULL));
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  char name[128];
  cr_assert_eq(volt8_variant_name(ctx, &shape, 0, name, sizeof name), VOLT8_OK);
  volt8_status status = volt8_variant_compile(ctx, &shape, name, NULL);
  if (status == VOLT8_ERR_ARCH_UNSUPPORTED) cr_skip_test("no NVRTC for sm_70 here: %s", volt8_last_error(ctx));
  cr_assert_eq(status, VOLT8_OK, "%s", volt8_last_error(ctx));
  int32_t count = 0;
  char why[1024];
  cr_assert_eq(volt8_cache_store_failures(ctx, &count, why, sizeof why), VOLT8_OK);
  cr_assert_geq(count, 1, "%d failures: %s", count, why);
  cr_assert(strstr(why, cache) && strstr(why, strerror(ENOTDIR)), "%s", why);
  volt8_ctx_destroy(ctx);
}

/* A cache folder whose format folder is a file keeps nothing (a cache that is a file is a bad
 * --cache, refused before any compile: test_cli_args). The summary and the failure count the same
 * kernels: every variant and the sampler's module. */
Test(hardening, compile_into_a_cache_that_keeps_nothing_fails_and_says_why, .init = make_work_dir, .fini = remove_work_dir,
     .timeout = 300) {
  char cache[1024], blocker[64];
  path_in(cache, sizeof cache, "cache");
  cr_assert_eq(mkdir(cache, 0755), 0, "%s", strerror(errno));
  snprintf(blocker, sizeof blocker, "cache/v%d", VOLT8_CACHE_FORMAT_VERSION);
  write_text(blocker, "x", 1);
  static char out[1 << 16], err[1 << 16];
  char *args[] = {"compile", "--arch", "sm_70", "--cache", cache, NULL};
  int rc = test_run_volt8(args, out, sizeof out, err, sizeof err);
  if (strstr(err, "VOLT8_ERR_ARCH_UNSUPPORTED")) cr_skip_test("no NVRTC for sm_70: %s", err);
  cr_assert_neq(rc, 0, "volt8 compile reported success with nothing cached:\n%s\n%s", out, err);
  cr_assert(strstr(err, "not stored in the disk cache") && strstr(err, strerror(ENOTDIR)) &&
                strstr(err, "the cache is incomplete"),
            "%s", err);
  const char *summary = strstr(out, "volt8 compile: "), *failure = strstr(err, "volt8 compile: ");
  int compiled = -1, cached = -1, not_stored = -2;
  while (summary && sscanf(summary, "volt8 compile: %d compiled, %d already cached", &compiled, &cached) != 2)
    summary = strstr(summary + 1, "volt8 compile: ");
  cr_assert(failure && sscanf(failure, "volt8 compile: %d compiled kernels were not stored", &not_stored) == 1, "%s", err);
  int32_t variants = 0;
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  cr_assert_eq(volt8_variant_count(ctx, &shape, &variants), VOLT8_OK);
  volt8_ctx_destroy(ctx);
  cr_assert(compiled == variants + 1 && cached == 0 && not_stored == compiled,
            "%d variants and the sampler; the summary says %d compiled and %d cached, the failure %d not stored:\n%s\n%s",
            variants, compiled, cached, not_stored, out, err);
}
