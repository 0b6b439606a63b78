/* The demo's synthetic MTP checkpoint: the real tensor names, dtypes, shapes and ModelOpt metadata
 * of the reference model's draft layer, with fewer experts and random E4M3 weights. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

#define SCALE_BLOCK 128

static uint64_t state;
static uint64_t next_random(void) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

static uint8_t random_e4m3(void) {
  for (;;) {
    uint8_t code = (uint8_t)next_random();
    if ((code & 0x7F) != 0x7F) return code; /* 0x7F and 0xFF are NaN */
  }
}

/* BF16 bits of a block scale in [5e-5, 2e-4]: max|w| of 0.02..0.09, as in trained experts. */
static uint16_t random_scale_bf16(void) {
  float value = 5e-5f + 1.5e-4f * (float)(next_random() >> 40) / (float)(1ull << 24);
  uint32_t bits;
  memcpy(&bits, &value, 4);
  return (uint16_t)((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

typedef struct tensor_spec {
  char name[128];
  const char *dtype;
  int64_t rows, cols;
  size_t bytes;
} tensor_spec;

static int write_text(const char *dir, const char *file, const char *text) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *stream = fopen(path, "w");
  if (!stream) return -1;
  int ok = fputs(text, stream) >= 0;
  return (fclose(stream) == 0 && ok) ? 0 : -1;
}

static int write_metadata(const char *dir, const synthetic_checkpoint *spec) {
  char *config = malloc(1 << 20);
  if (!config) return -1;
  size_t used = (size_t)snprintf(config, 1 << 20,
      "{\n  \"architectures\": [\"Qwen3NextForCausalLM\"],\n  \"model_type\": \"qwen3_next\",\n"
      "  \"hidden_size\": %d,\n  \"moe_intermediate_size\": %d,\n  \"num_experts\": %d,\n"
      "  \"num_experts_per_tok\": %d,\n  \"num_hidden_layers\": %d,\n  \"num_nextn_predict_layers\": 1,\n"
      "  \"torch_dtype\": \"bfloat16\",\n  \"quantization_config\": {\n    \"quant_method\": \"modelopt\",\n"
      "    \"quant_algo\": \"MIXED_PRECISION\",\n    \"quantized_layers\": {\n",
      spec->hidden, spec->intermediate, spec->num_experts, spec->top_k, spec->num_hidden_layers);
  /* The target's own layers are NVFP4: volt8 must ignore them and read only the MTP experts. */
  used += (size_t)snprintf(config + used, (1 << 20) - used,
                           "      \"model.layers.0.mlp.experts.0.gate_proj\": {\"quant_algo\": \"NVFP4\", \"group_size\": 16},\n");
  const char *projections[3] = {"gate_proj", "up_proj", "down_proj"};
  for (int e = 0; e < spec->num_experts; e++)
    for (int p = 0; p < 3; p++)
      used += (size_t)snprintf(config + used, (1 << 20) - used,
                               "      \"mtp.layers.0.mlp.experts.%d.%s\": {\"quant_algo\": \"FP8_PB_WO\", \"group_size\": 128}%s\n",
                               e, projections[p], (e == spec->num_experts - 1 && p == 2) ? "" : ",");
  snprintf(config + used, (1 << 20) - used, "    }\n  }\n}\n");
  int rc = write_text(dir, "config.json", config);
  free(config);
  return rc;
}

int cli_write_synthetic_checkpoint(const char *dir, const synthetic_checkpoint *spec) {
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "volt8 demo: cannot create %s: %s\n", dir, strerror(errno));
    return -1;
  }
  state = spec->seed | 1;
  int64_t hidden = spec->hidden, intermediate = spec->intermediate;
  int count = spec->num_experts * 6;
  tensor_spec *tensors = calloc((size_t)count, sizeof *tensors);
  char *header = malloc((size_t)count * 192 + 256);
  if (!tensors || !header) {
    free(tensors);
    free(header);
    return -1;
  }
  const char *projections[3] = {"gate_proj", "up_proj", "down_proj"};
  size_t offset = 0, header_used = (size_t)sprintf(header, "{\"__metadata__\":{\"format\":\"pt\"}");
  for (int e = 0, t = 0; e < spec->num_experts; e++) {
    for (int p = 0; p < 3; p++, t += 2) {
      int64_t rows = p == 2 ? hidden : intermediate, cols = p == 2 ? intermediate : hidden;
      tensor_spec *weight = &tensors[t], *scale = &tensors[t + 1];
      snprintf(weight->name, sizeof weight->name, "mtp.layers.0.mlp.experts.%d.%s.weight", e, projections[p]);
      weight->dtype = "F8_E4M3", weight->rows = rows, weight->cols = cols, weight->bytes = (size_t)(rows * cols);
      snprintf(scale->name, sizeof scale->name, "mtp.layers.0.mlp.experts.%d.%s.weight_scale_inv", e, projections[p]);
      scale->dtype = "BF16", scale->rows = (rows + SCALE_BLOCK - 1) / SCALE_BLOCK;
      scale->cols = (cols + SCALE_BLOCK - 1) / SCALE_BLOCK, scale->bytes = (size_t)(scale->rows * scale->cols * 2);
      for (int k = 0; k < 2; k++) {
        tensor_spec *tensor = k ? scale : weight;
        header_used += (size_t)sprintf(header + header_used,
                                       ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],\"data_offsets\":[%zu,%zu]}",
                                       tensor->name, tensor->dtype, (long long)tensor->rows, (long long)tensor->cols,
                                       offset, offset + tensor->bytes);
        offset += tensor->bytes;
      }
    }
  }
  header[header_used++] = '}';
  while (header_used % 8) header[header_used++] = ' ';
  char path[1024];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  FILE *stream = fopen(path, "wb");
  int rc = stream ? 0 : -1;
  uint64_t header_bytes = header_used;
  uint8_t prefix[8];
  for (int i = 0; i < 8; i++) prefix[i] = (uint8_t)(header_bytes >> (8 * i));
  if (rc == 0 && (fwrite(prefix, 1, 8, stream) != 8 || fwrite(header, 1, header_used, stream) != header_used)) rc = -1;
  uint8_t *buffer = malloc((size_t)(hidden * intermediate));
  for (int t = 0; rc == 0 && t < count; t++) {
    tensor_spec *tensor = &tensors[t];
    if (strcmp(tensor->dtype, "F8_E4M3") == 0)
      for (size_t i = 0; i < tensor->bytes; i++) buffer[i] = random_e4m3();
    else
      for (size_t i = 0; i < tensor->bytes / 2; i++) ((uint16_t *)buffer)[i] = random_scale_bf16();
    if (fwrite(buffer, 1, tensor->bytes, stream) != tensor->bytes) rc = -1;
  }
  free(buffer);
  if (stream && fclose(stream) != 0) rc = -1;
  if (rc == 0) rc = write_metadata(dir, spec);
  if (rc != 0) fprintf(stderr, "volt8 demo: writing the synthetic checkpoint in %s failed: %s\n", dir, strerror(errno));
  free(tensors);
  free(header);
  return rc;
}
