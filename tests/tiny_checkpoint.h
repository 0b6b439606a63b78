/* A tiny valid MTP checkpoint written from C, for suites that need one without the Python fixtures:
 * `experts` FP8 experts of intermediate 32 and hidden 16 under mtp.layers.0, BF16 128x128 block
 * scales of 2^-8, and a config.json with block-FP8 metadata. Header-only: include it once. */
#ifndef VOLT8_TESTS_TINY_CHECKPOINT_H
#define VOLT8_TESTS_TINY_CHECKPOINT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TINY_INTERMEDIATE 32
#define TINY_HIDDEN 16

/* Appends one tensor's header entry and data; returns 0 when a buffer is too small. */
static inline int tiny_add_tensor(char *header, size_t header_size, uint8_t *data, size_t *data_used, size_t data_size,
                           const char *name, const char *dtype, int64_t rows, int64_t cols, const uint8_t *bytes,
                           size_t byte_count) {
  size_t used = strlen(header);
  int written = snprintf(header + used, header_size - used,
                         "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],\"data_offsets\":[%zu,%zu]}",
                         used > 1 ? "," : "", name, dtype, (long long)rows, (long long)cols, *data_used,
                         *data_used + byte_count);
  if (written < 0 || (size_t)written >= header_size - used || *data_used + byte_count > data_size) return 0;
  memcpy(data + *data_used, bytes, byte_count);
  *data_used += byte_count;
  return 1;
}

/* Closes the header object and writes dir/model.safetensors; 0 on failure. */
static inline int tiny_write_safetensors(const char *dir, char *header, const uint8_t *data, size_t data_used) {
  char path[1024];
  strcat(header, "}");
  uint64_t header_bytes = strlen(header);
  uint8_t length[8];
  for (int i = 0; i < 8; i++) length[i] = (uint8_t)(header_bytes >> (8 * i));
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  FILE *file = fopen(path, "wb");
  int ok = file && fwrite(length, 1, 8, file) == 8 && fwrite(header, 1, header_bytes, file) == header_bytes &&
           fwrite(data, 1, data_used, file) == data_used;
  return file && fclose(file) == 0 && ok;
}

static inline int tiny_make_dir(const char *dir) {
  struct stat info;
  return mkdir(dir, 0755) == 0 || (stat(dir, &info) == 0 && S_ISDIR(info.st_mode));
}

/* Writes dir/model.safetensors and dir/config.json (dir is created); 0 on failure. */
static inline int tiny_checkpoint_write(const char *dir, int experts) {
  static const char *const projections[] = {"gate_proj", "up_proj", "down_proj"};
  if (!tiny_make_dir(dir)) return 0;
  size_t header_size = 256 + (size_t)experts * 3 * 2 * 200, data_size = (size_t)experts * 3 * (TINY_INTERMEDIATE * TINY_HIDDEN + 2);
  char *header = calloc(1, header_size);
  uint8_t *data = malloc(data_size), weights[TINY_INTERMEDIATE * TINY_HIDDEN];
  const uint8_t scale[2] = {0x80, 0x3b}; /* BF16 2^-8 */
  size_t data_used = 0;
  int ok = header && data;
  if (ok) header[0] = '{';
  for (int e = 0; ok && e < experts; e++) {
    for (int p = 0; ok && p < 3; p++) {
      for (size_t i = 0; i < sizeof weights; i++)
        weights[i] = (uint8_t)((((size_t)e * 131 + (size_t)p * 17 + i * 37) & 0x7e) | ((i & 1) << 7));
      char name[128];
      int64_t rows = p == 2 ? TINY_HIDDEN : TINY_INTERMEDIATE, cols = p == 2 ? TINY_INTERMEDIATE : TINY_HIDDEN;
      snprintf(name, sizeof name, "mtp.layers.0.mlp.experts.%d.%s.weight", e, projections[p]);
      ok = tiny_add_tensor(header, header_size, data, &data_used, data_size, name, "F8_E4M3", rows, cols, weights,
                           sizeof weights);
      snprintf(name, sizeof name, "mtp.layers.0.mlp.experts.%d.%s.weight_scale_inv", e, projections[p]);
      ok = ok && tiny_add_tensor(header, header_size, data, &data_used, data_size, name, "BF16", 1, 1, scale, 2);
    }
  }
  ok = ok && tiny_write_safetensors(dir, header, data, data_used);
  free(header);
  free(data);
  if (!ok) return 0;
  char path[1024];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *file = fopen(path, "w");
  if (!file) return 0;
  fprintf(file, "{\"num_hidden_layers\": 4, \"hidden_size\": %d, \"moe_intermediate_size\": %d, \"num_experts\": %d,\n"
                " \"quantization_config\": {\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"weight_block_size\": [128, 128]}}\n",
          TINY_HIDDEN, TINY_INTERMEDIATE, experts);
  return fclose(file) == 0;
}

/* An unquantized (F32) checkpoint for the online route: `experts` experts of hidden and intermediate
 * `size` (a multiple of 128) with small weights, and expert 0's down_proj element [0, 0] set to
 * `extreme` (65504, FP16's largest, tests the quantizer's FP16 rule). No config.json. 0 on failure. */
static inline int tiny_online_checkpoint_write(const char *dir, int experts, int size, float extreme) {
  static const char *const projections[] = {"gate_proj", "up_proj", "down_proj"};
  if (!tiny_make_dir(dir)) return 0;
  size_t matrix = (size_t)size * (size_t)size, header_size = 256 + (size_t)experts * 3 * 200;
  size_t data_size = (size_t)experts * 3 * matrix * sizeof(float), data_used = 0;
  char *header = calloc(1, header_size);
  uint8_t *data = malloc(data_size);
  float *weights = malloc(matrix * sizeof(float));
  int ok = header && data && weights;
  if (ok) header[0] = '{';
  for (int e = 0; ok && e < experts; e++) {
    for (int p = 0; ok && p < 3; p++) {
      for (size_t i = 0; i < matrix; i++) weights[i] = (float)((int)((i * 37 + (size_t)e * 11 + (size_t)p * 5) % 97) - 48) / 2000.0f;
      if (e == 0 && p == 2) weights[0] = extreme;
      char name[128];
      snprintf(name, sizeof name, "mtp.layers.0.mlp.experts.%d.%s.weight", e, projections[p]);
      ok = tiny_add_tensor(header, header_size, data, &data_used, data_size, name, "F32", size, size,
                           (const uint8_t *)weights, matrix * sizeof(float));
    }
  }
  ok = ok && tiny_write_safetensors(dir, header, data, data_used);
  free(header);
  free(data);
  free(weights);
  return ok;
}

#endif
