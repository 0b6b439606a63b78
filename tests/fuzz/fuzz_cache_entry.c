/* Fuzz target: a kernel cache entry file (runtime/jit/cache.h documents the format).
 *
 * Byte 0: bit 0 image kind (PTX / CUBIN), bit 1 load by exact NVRTC version "12.9" or by any
 * version, bits 2-3 the mode:
 *   0  the rest is written as the entry file of a fixed key and loaded;
 *   1  the same, with the key, payload checksum and header checksum recomputed first, so the checks
 *      behind the checksums are reached; the harness then says itself whether the entry is valid
 *      and the loader must agree;
 *   2  the rest is [version length, version, flip offset (4 bytes), flip mask, payload]: the payload
 *      is stored through volt8_cache_store, one byte of the published entry is XORed with the mask,
 *      and the load must return the payload exactly when nothing changed, and miss otherwise.
 * An entry that loads must give back exactly its payload; a bad one is VOLT8_ERR_NOT_FOUND, never a
 * crash or another status. */
#include "fuzz_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/cache.h"

/* Header layout of format version 1 (cache.h). */
enum {
  MAGIC = 0, FORMAT_VERSION = 8, IMAGE_KIND = 12, ARCH = 16, NAME_BYTES = 20, PAYLOAD_BYTES = 24, KEY = 32,
  PAYLOAD_SHA256 = 64, NVRTC_VERSION = 96, NVRTC_VERSION_BYTES = 16, HEADER_SHA256 = 112, HEADER_BYTES = 144
};

static const char kernel_name[] = "k";
static const char kernel_source[] = "extern \"C\" __global__ void k(float *p) { p[threadIdx.x] = 3.0f; }\n";
static const char *const options[] = {"--gpu-architecture=compute_70", "-default-device"};
static char cache_dir[1024];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_make_dirs("cache");
  fuzz_path(cache_dir, sizeof cache_dir, "cache");
  return 0;
}

static uint32_t get_u32(const uint8_t *at) { return (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 | (uint32_t)at[3] << 24; }

static uint64_t get_u64(const uint8_t *at) { return (uint64_t)get_u32(at) | (uint64_t)get_u32(at + 4) << 32; }

static volt8_cache_inputs make_inputs(int cubin) {
  volt8_cache_inputs inputs = {kernel_name, kernel_source, 70, cubin ? VOLT8_IMAGE_CUBIN : VOLT8_IMAGE_PTX, options, 2};
  return inputs;
}

static char *entry_path(const volt8_cache_inputs *inputs, const char *version) {
  char *path = volt8_cache_entry_path(cache_dir, inputs, version);
  fuzz_require(path != NULL, "entry path", NULL);
  char *slash = strrchr(path, '/');
  *slash = '\0';
  fuzz_make_dirs(path + strlen(fuzz_scratch_dir()) + 1);
  *slash = '/';
  return path;
}

/* Recomputes the key, the payload checksum and the header checksum of entry (HEADER_BYTES or more). */
static void fix_checksums(uint8_t *entry, size_t size, const volt8_cache_inputs *inputs) {
  size_t name_bytes = get_u32(entry + NAME_BYTES);
  if (name_bytes > size - HEADER_BYTES) name_bytes = size - HEADER_BYTES;
  char version[NVRTC_VERSION_BYTES + 1] = "";
  memcpy(version, entry + NVRTC_VERSION, NVRTC_VERSION_BYTES);
  volt8_cache_key(inputs, version, entry + KEY);
  volt8_sha256_digest(entry + HEADER_BYTES + name_bytes, size - HEADER_BYTES - name_bytes, entry + PAYLOAD_SHA256);
  volt8_sha256 hasher;
  volt8_sha256_init(&hasher);
  volt8_sha256_update(&hasher, entry, HEADER_SHA256);
  volt8_sha256_update(&hasher, entry + HEADER_BYTES, name_bytes);
  volt8_sha256_final(&hasher, entry + HEADER_SHA256);
}

/* Whether a checksum-fixed entry is one the loader must accept. */
static int entry_is_valid(const uint8_t *entry, size_t size, const volt8_cache_inputs *inputs, const char *wanted_version) {
  if (size < HEADER_BYTES || memcmp(entry + MAGIC, "VOLT8KCE", 8) != 0 || get_u32(entry + FORMAT_VERSION) != 1 ||
      get_u32(entry + IMAGE_KIND) != (uint32_t)inputs->kind || get_u32(entry + ARCH) != 70)
    return 0;
  uint64_t name_bytes = get_u32(entry + NAME_BYTES), payload_bytes = get_u64(entry + PAYLOAD_BYTES);
  if (name_bytes != strlen(kernel_name) || size - HEADER_BYTES <= name_bytes ||
      memcmp(entry + HEADER_BYTES, kernel_name, name_bytes) != 0 || payload_bytes != size - HEADER_BYTES - name_bytes)
    return 0;
  const char *version = (const char *)entry + NVRTC_VERSION;
  int major, minor;
  if (version[NVRTC_VERSION_BYTES - 1] != '\0' || sscanf(version, "%d.%d", &major, &minor) != 2) return 0;
  /* The file sits at the name of the "12.9" key, so only that version's key matches its name. */
  if (strcmp(version, "12.9") != 0 || (wanted_version && strcmp(wanted_version, version) != 0)) return 0;
  return inputs->kind == VOLT8_IMAGE_CUBIN || entry[size - 1] == '\0';
}

static void check_loaded(const volt8_jit_image *image, const uint8_t *payload, size_t payload_bytes, volt8_image_kind kind) {
  fuzz_require(image->size == payload_bytes && memcmp(image->data, payload, payload_bytes) == 0,
               "loaded image differs from the entry's payload", NULL);
  fuzz_require(image->from_cache == 1 && image->kind == kind, "loaded image fields", NULL);
  fuzz_require(kind == VOLT8_IMAGE_CUBIN || ((const char *)image->data)[image->size - 1] == '\0', "PTX without NUL", NULL);
}

static void fuzz_entry_file(const uint8_t *data, size_t size, const volt8_cache_inputs *inputs, const char *version,
                            int fix) {
  uint8_t *entry = malloc(size ? size : 1);
  fuzz_require(entry != NULL, "malloc", NULL);
  if (size) memcpy(entry, data, size);
  if (fix && size >= HEADER_BYTES) fix_checksums(entry, size, inputs);
  char *path = entry_path(inputs, "12.9");
  fuzz_write_file(path, entry, size);
  volt8_jit_image image = {0};
  volt8_status status = volt8_cache_load(cache_dir, inputs, version, &image);
  fuzz_require(status == VOLT8_OK || status == VOLT8_ERR_NOT_FOUND, "unexpected status", volt8_status_string(status));
  if (status == VOLT8_OK) {
    size_t name_bytes = get_u32(entry + NAME_BYTES);
    check_loaded(&image, entry + HEADER_BYTES + name_bytes, size - HEADER_BYTES - name_bytes, inputs->kind);
  }
  if (fix) fuzz_require((status == VOLT8_OK) == entry_is_valid(entry, size, inputs, version), "loader and format disagree", NULL);
  volt8_jit_image_free(&image);
  fuzz_remove(path);
  free(path);
  free(entry);
}

static void fuzz_store_and_flip(const uint8_t *data, size_t size, const volt8_cache_inputs *inputs, int any_version) {
  if (size < 1 || size < 1 + (size_t)data[0] % NVRTC_VERSION_BYTES + 5) return;
  size_t version_bytes = data[0] % NVRTC_VERSION_BYTES;
  char version[NVRTC_VERSION_BYTES];
  memcpy(version, data + 1, version_bytes);
  version[version_bytes] = '\0';
  const uint8_t *rest = data + 1 + version_bytes;
  uint32_t flip_offset = get_u32(rest);
  uint8_t flip_mask = rest[4];
  const uint8_t *payload = rest + 5;
  size_t payload_bytes = size - (size_t)(payload - data);
  volt8_status stored = volt8_cache_store(cache_dir, inputs, version, payload, payload_bytes);
  if (payload_bytes == 0) {
    fuzz_require(stored == VOLT8_ERR_INVALID_ARGUMENT, "an empty payload was stored", NULL);
    return;
  }
  fuzz_require(stored == VOLT8_OK, "store into a writable cache", volt8_status_string(stored));
  char *path = entry_path(inputs, version);
  FILE *stream = fopen(path, "r+b");
  fuzz_require(stream != NULL, "the stored entry exists", path);
  fseek(stream, 0, SEEK_END);
  long file_bytes = ftell(stream);
  fuzz_require(file_bytes == (long)(HEADER_BYTES + strlen(kernel_name) + payload_bytes), "entry size", path);
  long at = (long)(flip_offset % (uint32_t)file_bytes);
  fseek(stream, at, SEEK_SET);
  int byte = fgetc(stream);
  fseek(stream, at, SEEK_SET);
  fputc(byte ^ flip_mask, stream);
  fclose(stream);
  volt8_jit_image image = {0};
  volt8_status status = volt8_cache_load(cache_dir, inputs, any_version ? NULL : version, &image);
  int major, minor;
  int loadable = sscanf(version, "%d.%d", &major, &minor) == 2 &&
                 (inputs->kind == VOLT8_IMAGE_CUBIN || payload[payload_bytes - 1] == '\0');
  if (flip_mask != 0) {
    fuzz_require(status == VOLT8_ERR_NOT_FOUND, "a flipped byte went unnoticed", NULL);
  } else {
    fuzz_require(status == (loadable ? VOLT8_OK : VOLT8_ERR_NOT_FOUND), "an intact entry did not round-trip", version);
    if (status == VOLT8_OK) check_loaded(&image, payload, payload_bytes, inputs->kind);
  }
  volt8_jit_image_free(&image);
  fuzz_remove(path);
  free(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  volt8_cache_inputs inputs = make_inputs(data[0] & 1);
  int any_version = (data[0] >> 1) & 1, mode = (data[0] >> 2) & 3;
  if (mode == 2) fuzz_store_and_flip(data + 1, size - 1, &inputs, any_version);
  else fuzz_entry_file(data + 1, size - 1, &inputs, any_version ? NULL : "12.9", mode == 1);
  return 0;
}
