/* Runs a fuzz target over files without libFuzzer: every argument is a file or a folder of files
 * (sorted, not recursive). Built with any compiler, it replays the committed seeds and regression
 * inputs in the normal test run and, in the sanitized build, under ASan and UBSan. */
#include "fuzz_common.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int replay_file(const char *path) {
  FILE *stream = fopen(path, "rb");
  if (!stream) {
    fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t capacity = 4096, size = 0;
  uint8_t *data = malloc(capacity);
  size_t got;
  while (data && (got = fread(data + size, 1, capacity - size, stream)) > 0) {
    size += got;
    if (size == capacity) data = realloc(data, capacity *= 2);
  }
  fclose(stream);
  if (!data) {
    fprintf(stderr, "replay: out of memory reading %s\n", path);
    return -1;
  }
  /* An exact-size copy, so reads past the input's end are caught by ASan as they are under libFuzzer. */
  uint8_t *exact = malloc(size ? size : 1);
  if (exact && size) memcpy(exact, data, size);
  free(data);
  if (!exact) return -1;
  fprintf(stderr, "replay: %s (%zu bytes)\n", path, size);
  LLVMFuzzerTestOneInput(exact, size);
  free(exact);
  return 0;
}

static int compare_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int replay_folder(const char *dir, int *count) {
  DIR *listing = opendir(dir);
  if (!listing) {
    fprintf(stderr, "replay: cannot open %s: %s\n", dir, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t used = 0;
  for (struct dirent *entry = readdir(listing); entry; entry = readdir(listing)) {
    if (entry->d_name[0] == '.') continue;
    names = realloc(names, (used + 1) * sizeof *names);
    names[used++] = strdup(entry->d_name);
  }
  closedir(listing);
  if (used) qsort(names, used, sizeof *names, compare_names);
  int failed = 0;
  for (size_t i = 0; i < used; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    struct stat info;
    if (stat(path, &info) == 0 && S_ISREG(info.st_mode)) {
      failed |= replay_file(path) != 0;
      ++*count;
    }
    free(names[i]);
  }
  free(names);
  return failed ? -1 : 0;
}

int main(int argc, char **argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  int count = 0, failed = 0;
  for (int i = 1; i < argc; i++) {
    struct stat info;
    if (stat(argv[i], &info) != 0) {
      fprintf(stderr, "replay: %s does not exist\n", argv[i]);
      failed = 1;
    } else if (S_ISDIR(info.st_mode)) {
      failed |= replay_folder(argv[i], &count) != 0;
    } else {
      failed |= replay_file(argv[i]) != 0;
      count++;
    }
  }
  printf("replayed %d inputs without a crash\n", count);
  return failed ? 1 : 0;
}
