/* Helpers shared by the fuzz targets: a private scratch folder per process, whole-file writes,
 * a CPU-only context, input splitting, a byte reader, and the check that turns a broken invariant into a
 * crash libFuzzer (or the replay driver) reports. */
#ifndef VOLT8_FUZZ_COMMON_H
#define VOLT8_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "volt8.h"

/* The libFuzzer entry points every target defines; the replay driver calls the same ones. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A folder of this process (in /dev/shm when there is one), removed at exit. */
const char *fuzz_scratch_dir(void);
/* "<scratch>/<relative>", in a static buffer of the caller's choosing. */
void fuzz_path(char *buf, size_t buf_size, const char *relative);
/* mkdir -p of a path under the scratch folder. */
void fuzz_make_dirs(const char *relative);
/* Writes (replacing) a whole file; aborts on I/O errors, which are the harness's, not the input's. */
void fuzz_write_file(const char *path, const void *data, size_t size);
void fuzz_remove(const char *path);

/* One context per process: no device, no disk cache. */
volt8_ctx *fuzz_ctx(void);

/* Aborts with a message when an invariant of the code under test does not hold. */
void fuzz_require(int condition, const char *what, const char *detail);

/* Splits data at each "\n----\n" into at most max_parts parts (the last keeps the rest). Returns the
 * number of parts; parts[i] / part_sizes[i] point into data. */
int fuzz_split(const uint8_t *data, size_t size, const uint8_t **parts, size_t *part_sizes, int max_parts);

/* An input read a byte at a time, from `at` on; past its end every byte reads as 0. */
typedef struct fuzz_reader {
  const uint8_t *data;
  size_t size, at;
} fuzz_reader;

static inline uint8_t fuzz_next_byte(fuzz_reader *in) { return in->at < in->size ? in->data[in->at++] : 0; }

/* A NUL-terminated, malloc'ed copy of bytes (they may hold NULs; the copy ends at size). */
char *fuzz_strndup(const uint8_t *data, size_t size);

/* A small safetensors file built in memory: add tensors, then write (which also frees it). */
typedef struct fuzz_st_builder {
  char *header;
  size_t header_bytes;
  uint8_t *data;
  size_t data_bytes;
} fuzz_st_builder;

void fuzz_st_add(fuzz_st_builder *builder, const char *name, const char *dtype, const int64_t *shape, int rank,
                 const void *bytes, size_t byte_count);
void fuzz_st_write(fuzz_st_builder *builder, const char *path);

#endif
