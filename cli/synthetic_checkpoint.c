/* The demo's synthetic MTP checkpoint: the real tensor names, dtypes, shapes and ModelOpt metadata
 * of the reference model's draft layer, with fewer experts and random E4M3 weights. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* The files a write makes, by their bit in synthetic_written.made_files. */
enum { FILE_SAFETENSORS, FILE_CONFIG, SYNTHETIC_FILE_COUNT };
static const char *const synthetic_file_names[SYNTHETIC_FILE_COUNT] = {"model.safetensors", "config.json"};

/* 1 after "volt8 demo: cannot <step> <path>: <errno text>" on stderr. */
static int report_failure(const char *step, const char *path, int error) {
  fprintf(stderr, "volt8 demo: cannot %s %s: %s\n", step, path, strerror(error));
  return 1;
}

/* dir/<file>, created new: never over an existing file, never through a link; noted in *written. */
static FILE *create_new(const char *dir, int file, synthetic_written *written, char *path, size_t path_size) {
  snprintf(path, path_size, "%s/%s", dir, synthetic_file_names[file]);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    report_failure("create", path, errno);
    return NULL;
  }
  written->made_files |= 1u << file;
  FILE *stream = fdopen(fd, "wb");
  if (!stream) {
    report_failure("write", path, errno);
    close(fd);
  }
  return stream;
}

/* Closes stream; 0, or 1 after naming the write that failed (ok 0: a write before it failed). */
static int finish_file(FILE *stream, int ok, int error, const char *path) {
  if (fclose(stream) != 0 && ok) {
    ok = 0;
    error = errno;
  }
  return ok ? 0 : report_failure("write", path, error ? error : EIO);
}

static int write_text(const char *dir, int file, const char *text, synthetic_written *written) {
  char path[4200];
  FILE *stream = create_new(dir, file, written, path, sizeof path);
  if (!stream) return 1;
  int ok = fputs(text, stream) >= 0;
  return finish_file(stream, ok, errno, path);
}

static int write_metadata(const char *dir, const synthetic_checkpoint *spec, synthetic_written *written) {
  char *config = malloc(1 << 20);
  if (!config) return report_failure("write", "config.json", ENOMEM);
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
  int rc = write_text(dir, FILE_CONFIG, config, written);
  free(config);
  return rc;
}

int cli_write_synthetic_checkpoint(const char *dir, const synthetic_checkpoint *spec, synthetic_written *written) {
  if (mkdir(dir, 0755) == 0) written->made_folder = 1;
  else if (errno != EEXIST) return report_failure("create", dir, errno);
  state = spec->seed | 1;
  int64_t hidden = spec->hidden, intermediate = spec->intermediate;
  int count = spec->num_experts * 6;
  tensor_spec *tensors = calloc((size_t)count, sizeof *tensors);
  char *header = malloc((size_t)count * 192 + 256);
  uint8_t *buffer = malloc((size_t)(hidden * intermediate));
  if (!tensors || !header || !buffer) {
    free(tensors);
    free(header);
    free(buffer);
    return report_failure("write", dir, ENOMEM);
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
  char path[4200];
  FILE *stream = create_new(dir, FILE_SAFETENSORS, written, path, sizeof path);
  int rc = 1;
  if (stream) {
    uint64_t header_bytes = header_used;
    uint8_t prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (uint8_t)(header_bytes >> (8 * i));
    int ok = fwrite(prefix, 1, 8, stream) == 8 && fwrite(header, 1, header_used, stream) == header_used;
    for (int t = 0; ok && t < count; t++) {
      tensor_spec *tensor = &tensors[t];
      if (strcmp(tensor->dtype, "F8_E4M3") == 0)
        for (size_t i = 0; i < tensor->bytes; i++) buffer[i] = random_e4m3();
      else
        for (size_t i = 0; i < tensor->bytes / 2; i++) ((uint16_t *)buffer)[i] = random_scale_bf16();
      ok = fwrite(buffer, 1, tensor->bytes, stream) == tensor->bytes;
    }
    rc = finish_file(stream, ok, errno, path);
  }
  if (rc == 0) rc = write_metadata(dir, spec, written);
  free(buffer);
  free(tensors);
  free(header);
  return rc;
}

int cli_remove_synthetic_checkpoint(const char *dir, const synthetic_written *written) {
  if (!written->made_folder && !written->made_files) return 0;
  /* a folder the write made is a real one: a link found there now is not ours to go through */
  int folder = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (written->made_folder ? O_NOFOLLOW : 0));
  if (folder < 0) return report_failure("remove the checkpoint in", dir, errno);
  int rc = 0;
  for (int file = 0; file < SYNTHETIC_FILE_COUNT; file++) {
    if (!(written->made_files & (1u << file))) continue;
    const char *name = synthetic_file_names[file];
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat info;
    if (fstatat(folder, name, &info, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) rc = report_failure("remove", path, errno);
    } else if (!S_ISREG(info.st_mode)) {
      fprintf(stderr, "volt8 demo: %s is now a %s, not the file the demo wrote: left as it is\n", path,
              S_ISDIR(info.st_mode) ? "folder" : S_ISLNK(info.st_mode) ? "symbolic link" : "special file");
      rc = 1;
    } else if (unlinkat(folder, name, 0) != 0) {
      rc = report_failure("remove", path, errno);
    }
  }
  close(folder);
  if (written->made_folder && rmdir(dir) != 0) rc = report_failure("remove the folder", dir, errno);
  return rc;
}
