/* The on-disk kernel cache: keys, entry encoding and verification, atomic publication. */
#include "jit/cache.h"

#include "core/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char entry_magic[8] = {'V', 'O', 'L', 'T', '8', 'K', 'C', 'E'};

/* Fixed header, little-endian: offsets of each field. */
enum {
  HEADER_MAGIC = 0,
  HEADER_FORMAT_VERSION = 8,
  HEADER_IMAGE_KIND = 12,
  HEADER_ARCH = 16,
  HEADER_NAME_BYTES = 20,
  HEADER_PAYLOAD_BYTES = 24,
  HEADER_KEY = 32,
  HEADER_PAYLOAD_SHA256 = 64,
  HEADER_NVRTC_VERSION = 96,
  NVRTC_VERSION_FIELD_BYTES = 16,
  HEADER_SHA256 = 112, /* over bytes [0, HEADER_SHA256) and the kernel name */
  HEADER_BYTES = 144
};

/* Entries past this are not ours: no generated kernel comes near it. */
#define MAX_ENTRY_BYTES ((uint64_t)1 << 30)
#define MAX_NAME_BYTES 4096

static void put_u32(uint8_t *at, uint32_t value) {
  for (int i = 0; i < 4; i++) at[i] = (uint8_t)(value >> (8 * i));
}

static void put_u64(uint8_t *at, uint64_t value) {
  for (int i = 0; i < 8; i++) at[i] = (uint8_t)(value >> (8 * i));
}

static uint32_t get_u32(const uint8_t *at) {
  uint32_t value = 0;
  for (int i = 0; i < 4; i++) value |= (uint32_t)at[i] << (8 * i);
  return value;
}

static uint64_t get_u64(const uint8_t *at) {
  uint64_t value = 0;
  for (int i = 0; i < 8; i++) value |= (uint64_t)at[i] << (8 * i);
  return value;
}

/* Each field is its length (8 bytes, little-endian) then its bytes: no two input sets serialize alike. */
static void hash_field(volt8_sha256 *hasher, const void *data, size_t size) {
  uint8_t length[8];
  put_u64(length, size);
  volt8_sha256_update(hasher, length, sizeof length);
  volt8_sha256_update(hasher, data, size);
}

static void hash_text(volt8_sha256 *hasher, const char *text) { hash_field(hasher, text, strlen(text)); }

static int compare_options(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *kind_name(volt8_image_kind kind) { return kind == VOLT8_IMAGE_CUBIN ? "cubin" : "ptx"; }

volt8_status volt8_cache_key(const volt8_cache_inputs *inputs, const char *nvrtc_version,
                             uint8_t digest[VOLT8_SHA256_BYTES]) {
  if (!inputs || !inputs->kernel_name || !inputs->source || inputs->num_options < 0 ||
      (inputs->num_options > 0 && !inputs->options))
    return VOLT8_ERR_INVALID_ARGUMENT;
  size_t num_options = (size_t)inputs->num_options;
  const char **sorted = malloc((num_options ? num_options : 1) * sizeof *sorted);
  if (!sorted) return VOLT8_ERR_OUT_OF_MEMORY;
  for (size_t i = 0; i < num_options; i++) {
    if (!inputs->options[i]) {
      free(sorted);
      return VOLT8_ERR_INVALID_ARGUMENT;
    }
    sorted[i] = inputs->options[i];
  }
  qsort(sorted, num_options, sizeof *sorted, compare_options);

  char number[32];
  volt8_sha256 hasher;
  volt8_sha256_init(&hasher);
  hash_text(&hasher, nvrtc_version ? "volt8 cache key" : "volt8 cache inputs");
  snprintf(number, sizeof number, "%d", VOLT8_CACHE_FORMAT_VERSION);
  hash_text(&hasher, number);
  hash_text(&hasher, volt8_version_string());
  hash_text(&hasher, inputs->kernel_name);
  snprintf(number, sizeof number, "%d", (int)inputs->arch);
  hash_text(&hasher, number);
  if (nvrtc_version) hash_text(&hasher, nvrtc_version);
  hash_text(&hasher, kind_name(inputs->kind));
  snprintf(number, sizeof number, "%zu", num_options);
  hash_text(&hasher, number);
  for (size_t i = 0; i < num_options; i++) hash_text(&hasher, sorted[i]);
  hash_text(&hasher, inputs->source);
  volt8_sha256_final(&hasher, digest);
  free(sorted);
  return VOLT8_OK;
}

/* <dir>/v1/sm_<arch>/<ih[0:2]>/<ih>, malloc'ed. */
static char *inputs_dir_path(const char *dir, const volt8_cache_inputs *inputs) {
  uint8_t inputs_hash[VOLT8_SHA256_BYTES];
  char ih[VOLT8_SHA256_HEX_BYTES];
  if (volt8_cache_key(inputs, NULL, inputs_hash) != VOLT8_OK) return NULL;
  volt8_sha256_hex(inputs_hash, ih);
  size_t bytes = strlen(dir) + 128;
  char *path = malloc(bytes);
  if (path) snprintf(path, bytes, "%s/v%d/sm_%d/%.2s/%s", dir, VOLT8_CACHE_FORMAT_VERSION, (int)inputs->arch, ih, ih);
  return path;
}

static char *join_entry_name(const char *entries_dir, const uint8_t key[VOLT8_SHA256_BYTES]) {
  char key_hex[VOLT8_SHA256_HEX_BYTES];
  volt8_sha256_hex(key, key_hex);
  size_t bytes = strlen(entries_dir) + 1 + 64 + sizeof ".entry";
  char *path = malloc(bytes);
  if (path) snprintf(path, bytes, "%s/%s.entry", entries_dir, key_hex);
  return path;
}

char *volt8_cache_entry_path(const char *dir, const volt8_cache_inputs *inputs, const char *nvrtc_version) {
  uint8_t key[VOLT8_SHA256_BYTES];
  if (!dir || !nvrtc_version || volt8_cache_key(inputs, nvrtc_version, key) != VOLT8_OK) return NULL;
  char *entries_dir = inputs_dir_path(dir, inputs);
  char *path = entries_dir ? join_entry_name(entries_dir, key) : NULL;
  free(entries_dir);
  return path;
}

static int write_fully(int fd, const void *buf, size_t size) {
  const uint8_t *bytes = buf;
  while (size > 0) {
    ssize_t put = write(fd, bytes, size);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return -1;
    bytes += put;
    size -= (size_t)put;
  }
  return 0;
}

static void header_digest(const uint8_t *header, const char *name, size_t name_bytes, uint8_t digest[VOLT8_SHA256_BYTES]) {
  volt8_sha256 hasher;
  volt8_sha256_init(&hasher);
  volt8_sha256_update(&hasher, header, HEADER_SHA256);
  volt8_sha256_update(&hasher, name, name_bytes);
  volt8_sha256_final(&hasher, digest);
}

/* Reads and verifies one entry. nvrtc_version NULL accepts the version the entry records, provided
 * the key it implies is the entry's. Returns VOLT8_OK and fills *out_image, or VOLT8_ERR_NOT_FOUND. */
static volt8_status read_entry(const char *path, const volt8_cache_inputs *inputs, const char *nvrtc_version,
                               volt8_jit_image *out_image) {
  volt8_status status = VOLT8_ERR_NOT_FOUND;
  uint8_t header[HEADER_BYTES];
  char name[MAX_NAME_BYTES];
  void *payload = NULL;
  int fd = -1;
  struct stat info;
  if (volt8_open_regular_fd(path, &fd, &info) != 0) return VOLT8_ERR_NOT_FOUND; /* a FIFO or device is a miss */
  if (info.st_size < HEADER_BYTES ||
      (uint64_t)info.st_size > MAX_ENTRY_BYTES || volt8_read_fully_at(fd, header, HEADER_BYTES, 0) != 0)
    goto done;
  size_t name_bytes = get_u32(header + HEADER_NAME_BYTES);
  uint64_t payload_bytes = get_u64(header + HEADER_PAYLOAD_BYTES);
  if (memcmp(header + HEADER_MAGIC, entry_magic, sizeof entry_magic) != 0 ||
      get_u32(header + HEADER_FORMAT_VERSION) != VOLT8_CACHE_FORMAT_VERSION ||
      get_u32(header + HEADER_IMAGE_KIND) != (uint32_t)inputs->kind ||
      get_u32(header + HEADER_ARCH) != (uint32_t)inputs->arch || name_bytes > MAX_NAME_BYTES ||
      name_bytes != strlen(inputs->kernel_name) ||
      payload_bytes == 0 || payload_bytes > MAX_ENTRY_BYTES ||
      (uint64_t)info.st_size != HEADER_BYTES + name_bytes + payload_bytes ||
      volt8_read_fully_at(fd, name, name_bytes, HEADER_BYTES) != 0 || memcmp(name, inputs->kernel_name, name_bytes) != 0)
    goto done;
  uint8_t digest[VOLT8_SHA256_BYTES];
  header_digest(header, name, name_bytes, digest);
  if (memcmp(digest, header + HEADER_SHA256, sizeof digest) != 0) goto done;

  char recorded_version[NVRTC_VERSION_FIELD_BYTES];
  memcpy(recorded_version, header + HEADER_NVRTC_VERSION, sizeof recorded_version);
  int major, minor;
  if (recorded_version[sizeof recorded_version - 1] != '\0' || sscanf(recorded_version, "%d.%d", &major, &minor) != 2)
    goto done;
  if (nvrtc_version && strcmp(nvrtc_version, recorded_version) != 0) goto done;
  uint8_t expected_key[VOLT8_SHA256_BYTES];
  if (volt8_cache_key(inputs, recorded_version, expected_key) != VOLT8_OK ||
      memcmp(expected_key, header + HEADER_KEY, sizeof expected_key) != 0)
    goto done;
  char *expected_path_tail = join_entry_name("", expected_key);
  size_t path_bytes = strlen(path), tail_bytes = expected_path_tail ? strlen(expected_path_tail) : 0;
  int named_by_key = expected_path_tail && path_bytes >= tail_bytes &&
                     strcmp(path + path_bytes - tail_bytes, expected_path_tail) == 0;
  free(expected_path_tail);
  if (!named_by_key) goto done;

  payload = malloc((size_t)payload_bytes);
  if (!payload) {
    status = VOLT8_ERR_OUT_OF_MEMORY;
    goto done;
  }
  if (volt8_read_fully_at(fd, payload, (size_t)payload_bytes, (off_t)(HEADER_BYTES + name_bytes)) != 0) goto done;
  volt8_sha256_digest(payload, (size_t)payload_bytes, digest);
  if (memcmp(digest, header + HEADER_PAYLOAD_SHA256, sizeof digest) != 0) goto done;
  if (inputs->kind == VOLT8_IMAGE_PTX && ((char *)payload)[payload_bytes - 1] != '\0') goto done;

  memset(out_image, 0, sizeof *out_image);
  out_image->data = payload;
  out_image->size = (size_t)payload_bytes;
  out_image->kind = inputs->kind;
  out_image->from_cache = 1;
  snprintf(out_image->nvrtc_version, sizeof out_image->nvrtc_version, "%s", recorded_version);
  payload = NULL;
  status = VOLT8_OK;
done:
  free(payload);
  close(fd);
  return status;
}

static int version_newer(const char *candidate, const char *best) {
  int candidate_major = 0, candidate_minor = 0, best_major = 0, best_minor = 0;
  sscanf(candidate, "%d.%d", &candidate_major, &candidate_minor);
  sscanf(best, "%d.%d", &best_major, &best_minor);
  return candidate_major != best_major ? candidate_major > best_major : candidate_minor > best_minor;
}

int volt8_cache_is_entry_name(const char *name) {
  if (strlen(name) != 64 + strlen(".entry") || strcmp(name + 64, ".entry") != 0) return 0;
  for (int i = 0; i < 64; i++)
    if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return 0;
  return 1;
}

/* Best valid entry of any NVRTC version in entries_dir. */
static volt8_status load_any_version(const char *entries_dir, const volt8_cache_inputs *inputs,
                                     volt8_jit_image *out_image) {
  DIR *listing = opendir(entries_dir);
  if (!listing) return VOLT8_ERR_NOT_FOUND;
  volt8_status status = VOLT8_ERR_NOT_FOUND;
  volt8_jit_image best = {0};
  struct dirent *item;
  while ((item = readdir(listing)) != NULL) {
    if (!volt8_cache_is_entry_name(item->d_name)) continue;
    size_t path_bytes = strlen(entries_dir) + strlen(item->d_name) + 2;
    char *path = malloc(path_bytes);
    if (!path) {
      status = VOLT8_ERR_OUT_OF_MEMORY;
      break;
    }
    snprintf(path, path_bytes, "%s/%s", entries_dir, item->d_name);
    volt8_jit_image candidate;
    volt8_status read_status = read_entry(path, inputs, NULL, &candidate);
    free(path);
    if (read_status == VOLT8_ERR_OUT_OF_MEMORY) {
      status = read_status;
      break;
    }
    if (read_status != VOLT8_OK) continue;
    if (!best.data || version_newer(candidate.nvrtc_version, best.nvrtc_version)) {
      volt8_jit_image_free(&best);
      best = candidate;
      status = VOLT8_OK;
    } else {
      volt8_jit_image_free(&candidate);
    }
  }
  closedir(listing);
  if (status == VOLT8_OK) {
    *out_image = best;
  } else {
    volt8_jit_image_free(&best);
  }
  return status;
}

volt8_status volt8_cache_load(const char *dir, const volt8_cache_inputs *inputs, const char *nvrtc_version,
                              volt8_jit_image *out_image) {
  if (!dir || !inputs || !out_image) return VOLT8_ERR_INVALID_ARGUMENT;
  char *entries_dir = inputs_dir_path(dir, inputs);
  if (!entries_dir) return VOLT8_ERR_OUT_OF_MEMORY;
  volt8_status status;
  if (nvrtc_version) {
    uint8_t key[VOLT8_SHA256_BYTES];
    status = volt8_cache_key(inputs, nvrtc_version, key);
    char *path = status == VOLT8_OK ? join_entry_name(entries_dir, key) : NULL;
    if (status == VOLT8_OK) status = path ? read_entry(path, inputs, nvrtc_version, out_image) : VOLT8_ERR_OUT_OF_MEMORY;
    free(path);
  } else {
    status = load_any_version(entries_dir, inputs, out_image);
  }
  free(entries_dir);
  return status;
}

/* Why `component`, which exists, cannot be a folder of the cache: "<component> is a regular file (Not
 * a directory)", "<component> is a symbolic link loop (Too many levels of symbolic links)". */
static void describe_non_folder(const char *component, char *problem, size_t problem_size) {
  struct stat info;
  if (stat(component, &info) == 0) {
    snprintf(problem, problem_size, "%s is a %s (%s)", component, volt8_file_type_name(info.st_mode), strerror(ENOTDIR));
    return;
  }
  int error = errno;
  struct stat link;
  if (error == ELOOP)
    snprintf(problem, problem_size, "%s is a symbolic link loop (%s)", component, strerror(error));
  else if (error == ENOENT && lstat(component, &link) == 0 && S_ISLNK(link.st_mode))
    snprintf(problem, problem_size, "%s is a symbolic link to nothing (%s)", component, strerror(error));
  else
    snprintf(problem, problem_size, "%s: %s", component, strerror(error));
}

/* mkdir -p: creates every missing component; another process creating one first is fine. On
 * failure writes into `problem` which component stopped it and why. */
static int make_dirs(char *path, char *problem, size_t problem_size) {
  for (char *slash = strchr(path + 1, '/');; slash = strchr(slash + 1, '/')) {
    if (slash) *slash = '\0';
    struct stat info;
    int failed = 0;
    if (mkdir(path, 0755) != 0) {
      if (errno != EEXIST) {
        snprintf(problem, problem_size, "%s: %s", path, strerror(errno));
        failed = 1;
      } else if (stat(path, &info) != 0 || !S_ISDIR(info.st_mode)) {
        describe_non_folder(path, problem, problem_size);
        failed = 1;
      }
    }
    if (slash) *slash = '/';
    if (failed) return -1;
    if (!slash) return 0;
  }
}

static uint64_t random_suffix(void) {
  static atomic_uint_fast64_t counter;
  uint64_t value = 0;
  if (getrandom(&value, sizeof value, GRND_NONBLOCK) == (ssize_t)sizeof value) return value;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return ((uint64_t)now.tv_sec * 1000000007u) ^ (uint64_t)now.tv_nsec ^ (atomic_fetch_add(&counter, 1) << 40) ^
         (uint64_t)(uintptr_t)&now;
}

static void sync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  fsync(fd);
  close(fd);
}

/* Temp files older than this were left by a process that died before its rename (a publish
 * takes milliseconds); the next publish removes them. */
#define STALE_TEMP_SECONDS 3600

/* The one name a publish gives its temp file in <dir>/tmp: "volt8-<pid>.<16 hex digits>". The sweep
 * removes files of this name only, so nothing else in that folder (with --cache $HOME it is ~/tmp) is
 * ever touched. */
#define TEMP_NAME_PREFIX "volt8-"
#define TEMP_NAME_FORMAT TEMP_NAME_PREFIX "%ld.%016llx"
enum { TEMP_NAME_HEX_DIGITS = 16 };

int volt8_cache_is_temp_name(const char *name) {
  if (strncmp(name, TEMP_NAME_PREFIX, strlen(TEMP_NAME_PREFIX)) != 0) return 0;
  const char *at = name + strlen(TEMP_NAME_PREFIX);
  const char *pid_start = at;
  while (*at >= '0' && *at <= '9') at++;
  if (at == pid_start || at - pid_start > 19 || *at != '.') return 0;
  at++;
  for (int i = 0; i < TEMP_NAME_HEX_DIGITS; i++, at++)
    if (!((*at >= '0' && *at <= '9') || (*at >= 'a' && *at <= 'f'))) return 0;
  return *at == '\0';
}

static void remove_stale_temps(const char *temp_dir) {
  DIR *listing = opendir(temp_dir);
  if (!listing) return;
  time_t now = time(NULL);
  struct dirent *item;
  while ((item = readdir(listing)) != NULL) {
    struct stat info;
    if (!volt8_cache_is_temp_name(item->d_name) || fstatat(dirfd(listing), item->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISREG(info.st_mode) && now - info.st_mtime > STALE_TEMP_SECONDS) unlinkat(dirfd(listing), item->d_name, 0);
  }
  closedir(listing);
}

static void encode_header(uint8_t *header, const volt8_cache_inputs *inputs, const char *nvrtc_version,
                          const uint8_t key[VOLT8_SHA256_BYTES], const void *data, size_t size) {
  memset(header, 0, HEADER_BYTES);
  memcpy(header + HEADER_MAGIC, entry_magic, sizeof entry_magic);
  put_u32(header + HEADER_FORMAT_VERSION, VOLT8_CACHE_FORMAT_VERSION);
  put_u32(header + HEADER_IMAGE_KIND, (uint32_t)inputs->kind);
  put_u32(header + HEADER_ARCH, (uint32_t)inputs->arch);
  size_t name_bytes = strlen(inputs->kernel_name);
  put_u32(header + HEADER_NAME_BYTES, (uint32_t)name_bytes);
  put_u64(header + HEADER_PAYLOAD_BYTES, size);
  memcpy(header + HEADER_KEY, key, VOLT8_SHA256_BYTES);
  volt8_sha256_digest(data, size, header + HEADER_PAYLOAD_SHA256);
  memcpy(header + HEADER_NVRTC_VERSION, nvrtc_version, strlen(nvrtc_version));
  header_digest(header, inputs->kernel_name, name_bytes, header + HEADER_SHA256);
}

/* Writes "<step> <path>: <errno text>" into why (may be NULL). */
static void note_failure(char *why, size_t why_size, const char *step, const char *path) {
  if (why && why_size) snprintf(why, why_size, "%s %s: %s", step, path, strerror(errno));
}

volt8_status volt8_cache_store(const char *dir, const volt8_cache_inputs *inputs, const char *nvrtc_version,
                               const void *data, size_t size) {
  return volt8_cache_publish(dir, inputs, nvrtc_version, data, size, NULL, 0);
}

volt8_status volt8_cache_publish(const char *dir, const volt8_cache_inputs *inputs, const char *nvrtc_version,
                                 const void *data, size_t size, char *why, size_t why_size) {
  if (why && why_size) snprintf(why, why_size, "invalid arguments");
  if (!dir || !inputs || !nvrtc_version || !data || size == 0 || strlen(nvrtc_version) >= NVRTC_VERSION_FIELD_BYTES ||
      !inputs->kernel_name || strlen(inputs->kernel_name) > MAX_NAME_BYTES)
    return VOLT8_ERR_INVALID_ARGUMENT;
  uint8_t key[VOLT8_SHA256_BYTES];
  volt8_status status = volt8_cache_key(inputs, nvrtc_version, key);
  if (status != VOLT8_OK) return status;
  char *entries_dir = inputs_dir_path(dir, inputs);
  char *final_path = entries_dir ? join_entry_name(entries_dir, key) : NULL;
  size_t temp_bytes = strlen(dir) + 64;
  char *temp_path = malloc(temp_bytes);
  status = VOLT8_ERR_OUT_OF_MEMORY;
  if (why && why_size) snprintf(why, why_size, "out of memory");
  if (!entries_dir || !final_path || !temp_path) goto done;
  status = VOLT8_ERR_IO;
  snprintf(temp_path, temp_bytes, "%s/tmp", dir);
  char problem[1024];
  if (make_dirs(temp_path, problem, sizeof problem) != 0) {
    if (why && why_size) snprintf(why, why_size, "cannot create %s: %s", temp_path, problem);
    goto done;
  }
  if (make_dirs(entries_dir, problem, sizeof problem) != 0) {
    if (why && why_size) snprintf(why, why_size, "cannot create %s: %s", entries_dir, problem);
    goto done;
  }
  remove_stale_temps(temp_path);
  snprintf(temp_path, temp_bytes, "%s/tmp/" TEMP_NAME_FORMAT, dir, (long)getpid(), (unsigned long long)random_suffix());
  int fd = open(temp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    note_failure(why, why_size, "cannot create", temp_path);
    goto done;
  }
  uint8_t header[HEADER_BYTES];
  encode_header(header, inputs, nvrtc_version, key, data, size);
  int written = write_fully(fd, header, HEADER_BYTES) == 0 &&
                write_fully(fd, inputs->kernel_name, strlen(inputs->kernel_name)) == 0 &&
                write_fully(fd, data, size) == 0 && fsync(fd) == 0;
  if (!written) note_failure(why, why_size, "cannot write", temp_path);
  int closed = close(fd) == 0;
  if (written && !closed) note_failure(why, why_size, "cannot close", temp_path);
  /* Renaming over an entry another process just published is fine: both are valid. */
  if (!written || !closed || rename(temp_path, final_path) != 0) {
    if (written && closed) note_failure(why, why_size, "cannot rename the entry to", final_path);
    unlink(temp_path);
    goto done;
  }
  sync_dir(entries_dir);
  status = VOLT8_OK;
done:
  free(temp_path);
  free(final_path);
  free(entries_dir);
  return status;
}
