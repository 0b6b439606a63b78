/* Fuzz target: a whole safetensors file (8-byte header length, JSON header, data).
 *
 * The file is opened as a single file and as a checkpoint folder holding only it; both must agree.
 * On success every tensor must be named once, sorted, sized by its dtype and shape, and the data
 * ranges must tile the data area. The reader's mmap is replaced (link option --wrap=mmap) by an
 * exact-size heap copy, so a tensor pointing past the file is an ASan report, not a silent read
 * of the page's tail. On failure nothing may stay mapped and the message must be set. */
#include "fuzz_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "checkpoint/safetensors.h"

void *__real_mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset);
int __real_munmap(void *addr, size_t length);
void *__wrap_mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset);
int __wrap_munmap(void *addr, size_t length);

#define MAX_COPIES 8
static struct {
  void *copy;
  size_t bytes;
} copies[MAX_COPIES];

void *__wrap_mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset) {
  if (addr || prot != PROT_READ || fd < 0 || offset != 0) return __real_mmap(addr, length, prot, flags, fd, offset);
  for (int i = 0; i < MAX_COPIES; i++) {
    if (copies[i].copy) continue;
    uint8_t *copy = malloc(length ? length : 1);
    size_t done = 0;
    while (copy && done < length) {
      ssize_t got = pread(fd, copy + done, length - done, (off_t)done);
      if (got <= 0) break;
      done += (size_t)got;
    }
    fuzz_require(copy && done == length, "heap copy of a mapped file", NULL);
    copies[i].copy = copy;
    copies[i].bytes = length;
    return copy;
  }
  fuzz_require(0, "more than MAX_COPIES files mapped at once", NULL);
  return MAP_FAILED;
}

int __wrap_munmap(void *addr, size_t length) {
  for (int i = 0; i < MAX_COPIES; i++) {
    if (copies[i].copy != addr) continue;
    fuzz_require(copies[i].bytes == length, "munmap length differs from the mapping's", NULL);
    free(addr);
    copies[i].copy = NULL;
    return 0;
  }
  return __real_munmap(addr, length);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_make_dirs("st");
  return 0;
}

static int compare_by_address(const void *a, const void *b) {
  const volt8_st_tensor *left = *(const volt8_st_tensor *const *)a, *right = *(const volt8_st_tensor *const *)b;
  if (left->data != right->data) return left->data < right->data ? -1 : 1;
  return (left->bytes > right->bytes) - (left->bytes < right->bytes);
}

static void check_tensor(const volt8_st_file *file, const volt8_st_tensor *tensor, const volt8_st_tensor *previous) {
  fuzz_require(tensor->name != NULL, "tensor without a name", NULL);
  if (previous) fuzz_require(strcmp(previous->name, tensor->name) < 0, "tensors not sorted or not unique", tensor->name);
  fuzz_require(volt8_st_file_find(file, tensor->name) == tensor, "find does not return the tensor", tensor->name);
  fuzz_require(tensor->rank >= 0 && tensor->rank <= VOLT8_ST_MAX_RANK, "rank out of range", tensor->name);
  unsigned __int128 bits = (unsigned)volt8_st_dtype_bits(tensor->dtype);
  for (int32_t d = 0; d < tensor->rank; d++) {
    fuzz_require(tensor->shape[d] >= 0, "negative extent", tensor->name);
    bits *= (unsigned __int128)tensor->shape[d];
    if (bits > ((unsigned __int128)1 << 80)) bits = (unsigned __int128)1 << 80;
  }
  fuzz_require(bits == (unsigned __int128)tensor->bytes * 8, "byte size differs from dtype and shape", tensor->name);
  if (tensor->bytes == 0) return;
  volatile uint8_t first = tensor->data[0], last = tensor->data[tensor->bytes - 1];
  (void)first, (void)last;
  int32_t element_bits = volt8_st_dtype_bits(tensor->dtype);
  size_t elements = tensor->bytes * 8 / (size_t)element_bits;
  for (size_t i = 0; i < elements && i < 64; i++) {
    volatile double value = volt8_st_float_at(tensor->dtype, tensor->data, elements - 1 - i);
    (void)value;
  }
}

/* The data ranges, sorted by address, follow each other with no gap and add up to data_bytes. */
static void check_tiling(const volt8_st_file *file, uint64_t data_bytes) {
  size_t count = volt8_st_file_count(file);
  if (count == 0) {
    fuzz_require(data_bytes == 0, "no tensors but a data area", NULL);
    return;
  }
  const volt8_st_tensor **sorted = malloc(count * sizeof *sorted);
  fuzz_require(sorted != NULL, "malloc", NULL);
  for (size_t i = 0; i < count; i++) sorted[i] = volt8_st_file_tensor(file, i);
  qsort(sorted, count, sizeof *sorted, compare_by_address);
  uint64_t total = sorted[0]->bytes;
  for (size_t i = 1; i < count; i++) {
    fuzz_require(sorted[i]->data == sorted[i - 1]->data + sorted[i - 1]->bytes, "data ranges overlap or leave a hole",
                 sorted[i]->name);
    total += sorted[i]->bytes;
  }
  fuzz_require(total == data_bytes, "tensors do not cover the data area", NULL);
  free(sorted);
}

static void check_set_agrees(volt8_ctx *ctx, const char *dir, const volt8_st_file *file) {
  volt8_st_set *set = NULL;
  volt8_status status = volt8_st_set_open(ctx, dir, &set);
  fuzz_require((status == VOLT8_OK) == (file != NULL), "folder open and file open disagree", volt8_last_error(ctx));
  if (!set) return;
  fuzz_require(volt8_st_set_count(set) == volt8_st_file_count(file), "folder and file list different counts", NULL);
  for (size_t i = 0; i < volt8_st_set_count(set); i++) {
    const char *name = volt8_st_set_name(set, i);
    fuzz_require(strcmp(name, volt8_st_file_tensor(file, i)->name) == 0, "folder and file name differ", name);
    const volt8_st_tensor *found = NULL;
    fuzz_require(volt8_st_set_find(ctx, set, name, &found) == VOLT8_OK && found, "folder cannot find its tensor", name);
  }
  volt8_st_set_close(set);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char dir[1024], path[1100];
  fuzz_path(dir, sizeof dir, "st");
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  fuzz_write_file(path, data, size);
  volt8_ctx *ctx = fuzz_ctx();
  int64_t mappings = volt8_st_live_mappings();
  volt8_st_file *file = NULL;
  volt8_status status = volt8_st_file_open(ctx, path, &file);
  if (status != VOLT8_OK) {
    fuzz_require(file == NULL, "failed open returned a file", NULL);
    fuzz_require(status == VOLT8_ERR_FORMAT || status == VOLT8_ERR_UNSUPPORTED || status == VOLT8_ERR_IO,
                 "unexpected status", volt8_status_string(status));
    fuzz_require(volt8_last_error(ctx)[0] != '\0', "failure without a message", NULL);
  } else {
    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; i--) header_bytes = header_bytes << 8 | data[i];
    for (size_t i = 0; i < volt8_st_file_count(file); i++)
      check_tensor(file, volt8_st_file_tensor(file, i), i ? volt8_st_file_tensor(file, i - 1) : NULL);
    fuzz_require(volt8_st_file_tensor(file, volt8_st_file_count(file)) == NULL, "tensor past the count", NULL);
    check_tiling(file, size - 8 - header_bytes);
  }
  check_set_agrees(ctx, dir, file);
  volt8_st_file_close(file);
  fuzz_require(volt8_st_live_mappings() == mappings, "a mapping outlived its file", NULL);
  return 0;
}
