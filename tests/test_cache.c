/* SHA-256, cache keys, and the disk cache behind volt8_jit_compile (hits, misses, bad entries,
 * racing processes, cache-only loading without NVRTC). */
#include <criterion/criterion.h>

#include "tools/tools.h"
#include "jit/cache.h"
#include "core/ctx_internal.h"
#include "jit/jit.h"
#include "jit/nvrtc_loader.h"
#include "core/sha256.h"
#include "test_support.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char kernel_source[] = "extern \"C\" __global__ void k(float *p) { p[threadIdx.x] = 1.0f; }\n";
static const char other_source[] = "extern \"C\" __global__ void k(float *p) { p[threadIdx.x] = 2.0f; }\n";

/* ---- SHA-256 against FIPS 180-4 examples ---- */

static void expect_digest(const void *data, size_t size, const char *expected_hex, const char *what) {
  uint8_t digest[VOLT8_SHA256_BYTES];
  char hex[VOLT8_SHA256_HEX_BYTES];
  volt8_sha256_digest(data, size, digest);
  volt8_sha256_hex(digest, hex);
  cr_assert_str_eq(hex, expected_hex, "sha256 of %s", what);
}

Test(sha256, fips_vectors, .timeout = 10) {
  expect_digest("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "\"\"");
  expect_digest("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "\"abc\"");
  const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  expect_digest(two_blocks, strlen(two_blocks), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
                "the 448-bit message");
  const char *long_message = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                             "mnopqrstnopqrstu";
  expect_digest(long_message, strlen(long_message), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1",
                "the 896-bit message");
}

Test(sha256, million_a_streamed, .timeout = 10) {
  char chunk[1000];
  memset(chunk, 'a', sizeof chunk);
  volt8_sha256 hasher;
  volt8_sha256_init(&hasher);
  for (int i = 0; i < 1000; i++) volt8_sha256_update(&hasher, chunk, sizeof chunk);
  uint8_t digest[VOLT8_SHA256_BYTES];
  char hex[VOLT8_SHA256_HEX_BYTES];
  volt8_sha256_final(&hasher, digest);
  volt8_sha256_hex(digest, hex);
  cr_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", "sha256 of a million 'a'");
}

Test(sha256, byte_at_a_time_matches_one_shot, .timeout = 10) {
  uint8_t message[200];
  for (size_t i = 0; i < sizeof message; i++) message[i] = (uint8_t)(i * 37 + 11);
  for (size_t length = 0; length <= sizeof message; length++) {
    uint8_t one_shot[VOLT8_SHA256_BYTES], streamed[VOLT8_SHA256_BYTES];
    volt8_sha256_digest(message, length, one_shot);
    volt8_sha256 hasher;
    volt8_sha256_init(&hasher);
    for (size_t i = 0; i < length; i++) volt8_sha256_update(&hasher, message + i, 1);
    volt8_sha256_final(&hasher, streamed);
    cr_assert_arr_eq(one_shot, streamed, sizeof one_shot, "streamed digest differs at length %zu", length);
  }
}

/* ---- keys ---- */

static void key_hex(const volt8_cache_inputs *inputs, const char *nvrtc_version, char hex[VOLT8_SHA256_HEX_BYTES]) {
  uint8_t digest[VOLT8_SHA256_BYTES];
  cr_assert_eq(volt8_cache_key(inputs, nvrtc_version, digest), VOLT8_OK);
  volt8_sha256_hex(digest, hex);
}

Test(cache_key, depends_on_every_input_and_nothing_else, .timeout = 10) {
  const char *options[] = {"-DA=1", "--gpu-architecture=compute_70"};
  const char *reordered[] = {"--gpu-architecture=compute_70", "-DA=1"};
  const char *other_options[] = {"-DA=2", "--gpu-architecture=compute_70"};
  volt8_cache_inputs base = {"k", kernel_source, 70, VOLT8_IMAGE_PTX, options, 2};
  char reference[VOLT8_SHA256_HEX_BYTES], hex[VOLT8_SHA256_HEX_BYTES];
  key_hex(&base, "12.9", reference);

  volt8_cache_inputs same = base;
  same.options = reordered;
  key_hex(&same, "12.9", hex);
  cr_assert_str_eq(hex, reference, "option order changed the key");

  struct {
    const char *what;
    volt8_cache_inputs inputs;
    const char *nvrtc_version;
  } variants[] = {
      {"source", {"k", other_source, 70, VOLT8_IMAGE_PTX, options, 2}, "12.9"},
      {"options", {"k", kernel_source, 70, VOLT8_IMAGE_PTX, other_options, 2}, "12.9"},
      {"option count", {"k", kernel_source, 70, VOLT8_IMAGE_PTX, options, 1}, "12.9"},
      {"arch", {"k", kernel_source, 75, VOLT8_IMAGE_PTX, options, 2}, "12.9"},
      {"kind", {"k", kernel_source, 70, VOLT8_IMAGE_CUBIN, options, 2}, "12.9"},
      {"kernel name", {"k2", kernel_source, 70, VOLT8_IMAGE_PTX, options, 2}, "12.9"},
      {"NVRTC version", {"k", kernel_source, 70, VOLT8_IMAGE_PTX, options, 2}, "13.0"},
      {"inputs hash (no NVRTC version)", {"k", kernel_source, 70, VOLT8_IMAGE_PTX, options, 2}, NULL},
  };
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
    key_hex(&variants[i].inputs, variants[i].nvrtc_version, hex);
    cr_assert_str_neq(hex, reference, "changing the %s did not change the key", variants[i].what);
  }
}

Test(cache_key, fields_cannot_run_into_each_other, .timeout = 10) {
  const char *split_a[] = {"ab", "c"};
  const char *split_b[] = {"a", "bc"};
  volt8_cache_inputs a = {"k", kernel_source, 70, VOLT8_IMAGE_PTX, split_a, 2};
  volt8_cache_inputs b = {"k", kernel_source, 70, VOLT8_IMAGE_PTX, split_b, 2};
  char hex_a[VOLT8_SHA256_HEX_BYTES], hex_b[VOLT8_SHA256_HEX_BYTES];
  key_hex(&a, "12.9", hex_a);
  key_hex(&b, "12.9", hex_b);
  cr_assert_str_neq(hex_a, hex_b, "options {ab,c} and {a,bc} share a key");
}

Test(cache_key, inputs_hash_ignores_nvrtc_version, .timeout = 10) {
  volt8_cache_inputs inputs = {"k", kernel_source, 70, VOLT8_IMAGE_PTX, NULL, 0};
  char *path_12 = volt8_cache_entry_path("/c", &inputs, "12.9");
  char *path_13 = volt8_cache_entry_path("/c", &inputs, "13.0");
  cr_assert(path_12 && path_13);
  char *dir_end_12 = strrchr(path_12, '/'), *dir_end_13 = strrchr(path_13, '/');
  cr_assert_eq(dir_end_12 - path_12, dir_end_13 - path_13);
  cr_assert(strncmp(path_12, path_13, (size_t)(dir_end_12 - path_12)) == 0,
            "entries of one input set live in different dirs: %s vs %s", path_12, path_13);
  cr_assert_str_neq(dir_end_12, dir_end_13, "NVRTC 12.9 and 13.0 entries share a name: %s", path_12);
  cr_assert(strncmp(path_12, "/c/v1/sm_70/", 12) == 0, "unexpected layout: %s", path_12);
  free(path_12);
  free(path_13);
}

/* ---- the cache behind volt8_jit_compile ---- */

static char cache_dir[256];

static void make_cache_dir(void) {
  snprintf(cache_dir, sizeof cache_dir, "%s/volt8-test-cache-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  cr_assert(mkdtemp(cache_dir), "mkdtemp %s: %s", cache_dir, strerror(errno));
}

static void remove_cache_dir(void) {
  test_remove_tree(cache_dir);
}

static volt8_ctx *new_ctx(const char *target_arch, const char *dir) {
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.target_arch = target_arch;
  options.cache_dir = dir;
  volt8_ctx *ctx = NULL;
  volt8_status status = volt8_ctx_create(&options, &ctx);
  cr_assert_eq(status, VOLT8_OK, "volt8_ctx_create: %s", volt8_last_error(NULL));
  return ctx;
}

static void require_nvrtc(volt8_ctx *ctx, int32_t arch) {
  const volt8_nvrtc_lib *lib = NULL;
  if (volt8_nvrtc_for_arch(ctx, arch, &lib) != VOLT8_OK) cr_skip_test("no NVRTC for arch %d: %s", arch, volt8_last_error(ctx));
}

static volt8_status compile_source(volt8_ctx *ctx, const char *source, int32_t arch, volt8_image_kind kind,
                                   const char *option, volt8_jit_image *image) {
  const char *options[] = {option};
  volt8_jit_request request = {"k", source, arch, kind, options, option ? 1 : 0};
  return volt8_jit_compile(ctx, &request, image);
}

static void compile_ok(volt8_ctx *ctx, const char *source, volt8_jit_image *image, const char *what) {
  volt8_status status = compile_source(ctx, source, 70, VOLT8_IMAGE_PTX, NULL, image);
  cr_assert_eq(status, VOLT8_OK, "%s: %s", what, volt8_last_error(ctx));
}

static char found_entries[16][512];
static int found_count;
static int found_other;

static int note_file(const char *path, const struct stat *info, int type, struct FTW *walk) {
  if (type != FTW_F) return 0;
  size_t length = strlen(path);
  if (length > 6 && strcmp(path + length - 6, ".entry") == 0 && found_count < 16)
    snprintf(found_entries[found_count++], sizeof found_entries[0], "%s", path);
  else
    found_other++;
  return 0;
}

/* Lists the *.entry files under dir; returns their count and counts other files in found_other. */
static int scan_entries(const char *dir) {
  found_count = 0;
  found_other = 0;
  nftw(dir, note_file, 16, FTW_PHYS);
  return found_count;
}

static void expect_same_image(const volt8_jit_image *a, const volt8_jit_image *b, const char *what) {
  cr_assert_eq(a->size, b->size, "%s: image sizes differ (%zu vs %zu)", what, a->size, b->size);
  cr_assert(memcmp(a->data, b->data, a->size) == 0, "%s: image bytes differ", what);
}

TestSuite(jit_cache, .init = make_cache_dir, .fini = remove_cache_dir, .timeout = 60);

Test(jit_cache, miss_then_hit) {
  volt8_ctx *ctx = new_ctx("sm_70", cache_dir);
  require_nvrtc(ctx, 70);
  volt8_jit_image first, second;
  compile_ok(ctx, kernel_source, &first, "first compile");
  cr_assert_eq(first.from_cache, 0, "an empty cache gave a hit");
  cr_assert(strstr(first.data, ".entry k") != NULL, "PTX lacks the kernel entry:\n%s", (char *)first.data);
  cr_assert_eq(((char *)first.data)[first.size - 1], '\0', "PTX is not NUL-terminated");
  cr_assert_eq(scan_entries(cache_dir), 1, "expected one entry after a miss, found %d", found_count);
  volt8_ctx_destroy(ctx);

  ctx = new_ctx("sm_70", cache_dir);
  compile_ok(ctx, kernel_source, &second, "second compile");
  cr_assert_eq(second.from_cache, 1, "the published entry was not used");
  cr_assert_str_eq(second.nvrtc_version, first.nvrtc_version);
  expect_same_image(&first, &second, "hit vs compile");
  volt8_jit_image_free(&first);
  volt8_jit_image_free(&second);
  volt8_ctx_destroy(ctx);
}

Test(jit_cache, key_comes_from_inputs_only) {
  char entry_a[512], second_dir[300];
  volt8_ctx *ctx = new_ctx("sm_70", cache_dir);
  require_nvrtc(ctx, 70);
  volt8_jit_image image;
  compile_ok(ctx, kernel_source, &image, "compile into the first cache");
  volt8_ctx_destroy(ctx);
  cr_assert_eq(scan_entries(cache_dir), 1);
  snprintf(entry_a, sizeof entry_a, "%s", found_entries[0] + strlen(cache_dir));

  /* From another working directory too: nothing of the environment may reach the image. */
  snprintf(second_dir, sizeof second_dir, "%s/second", cache_dir);
  cr_assert_eq(mkdir(second_dir, 0755), 0);
  cr_assert_eq(chdir(second_dir), 0);
  ctx = new_ctx("sm_70", second_dir);
  volt8_jit_image again;
  compile_ok(ctx, kernel_source, &again, "compile into the second cache");
  cr_assert_eq(again.from_cache, 0);
  expect_same_image(&image, &again, "compiles in two working directories");
  volt8_jit_image_free(&image);
  volt8_jit_image_free(&again);
  volt8_ctx_destroy(ctx);
  cr_assert_eq(scan_entries(second_dir), 1);
  cr_assert_str_eq(found_entries[0] + strlen(second_dir), entry_a, "same inputs, different entry names");
}

Test(jit_cache, different_inputs_get_different_entries) {
  volt8_ctx *ctx = new_ctx("sm_70", cache_dir);
  require_nvrtc(ctx, 70);
  require_nvrtc(ctx, 75);
  struct {
    const char *what;
    const char *source;
    int32_t arch;
    volt8_image_kind kind;
    const char *option;
  } requests[] = {
      {"base", kernel_source, 70, VOLT8_IMAGE_PTX, NULL},
      {"other source", other_source, 70, VOLT8_IMAGE_PTX, NULL},
      {"extra option", kernel_source, 70, VOLT8_IMAGE_PTX, "-DVOLT8_TEST=1"},
      {"arch 75", kernel_source, 75, VOLT8_IMAGE_PTX, NULL},
      {"CUBIN", kernel_source, 70, VOLT8_IMAGE_CUBIN, NULL},
  };
  for (int i = 0; i < 5; i++) {
    volt8_jit_image image;
    volt8_status status = compile_source(ctx, requests[i].source, requests[i].arch, requests[i].kind, requests[i].option, &image);
    cr_assert_eq(status, VOLT8_OK, "%s: %s", requests[i].what, volt8_last_error(ctx));
    cr_assert_eq(image.from_cache, 0, "%s hit another request's entry", requests[i].what);
    cr_assert_eq(image.kind, requests[i].kind);
    volt8_jit_image_free(&image);
    cr_assert_eq(scan_entries(cache_dir), i + 1, "after %s: %d entries", requests[i].what, found_count);
  }
  volt8_ctx_destroy(ctx);
}

typedef enum damage { FLIP_PAYLOAD, FLIP_HEADER, FLIP_NAME, TRUNCATE, EMPTY, WRONG_ENTRY } damage;
static const char *const damage_names[] = {"payload byte flipped", "header byte flipped", "kernel name byte flipped",
                                           "truncated", "empty", "another kernel's entry"};

static void flip_byte(const char *path, off_t offset) {
  int fd = open(path, O_RDWR);
  cr_assert(fd >= 0, "open %s: %s", path, strerror(errno));
  unsigned char byte;
  cr_assert_eq(pread(fd, &byte, 1, offset), 1);
  byte ^= 0x20;
  cr_assert_eq(pwrite(fd, &byte, 1, offset), 1);
  close(fd);
}

static void copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  cr_assert(in && out, "copy %s -> %s", from, to);
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, got, out);
  fclose(in);
  fclose(out);
}

static void apply_damage(damage kind, const char *entry, const char *other_entry) {
  struct stat info;
  cr_assert_eq(stat(entry, &info), 0);
  switch (kind) {
    case FLIP_PAYLOAD: flip_byte(entry, info.st_size - 10); break;
    case FLIP_HEADER: flip_byte(entry, 100); break; /* inside the NVRTC version field */
    case FLIP_NAME: flip_byte(entry, 144); break;   /* first byte after the fixed header */
    case TRUNCATE: cr_assert_eq(truncate(entry, info.st_size / 2), 0); break;
    case EMPTY: cr_assert_eq(truncate(entry, 0), 0); break;
    case WRONG_ENTRY: copy_file(other_entry, entry); break;
  }
}

Test(jit_cache, damaged_entry_is_a_miss_and_is_repaired) {
  volt8_ctx *ctx = new_ctx("sm_70", cache_dir);
  require_nvrtc(ctx, 70);
  volt8_jit_image original, other, image;
  compile_ok(ctx, other_source, &other, "compile of the other kernel");
  cr_assert_eq(scan_entries(cache_dir), 1);
  char other_entry[512], entry[512];
  snprintf(other_entry, sizeof other_entry, "%s", found_entries[0]);
  compile_ok(ctx, kernel_source, &original, "first compile");
  cr_assert_eq(scan_entries(cache_dir), 2);
  snprintf(entry, sizeof entry, "%s", strcmp(found_entries[0], other_entry) ? found_entries[0] : found_entries[1]);

  for (damage kind = FLIP_PAYLOAD; kind <= WRONG_ENTRY; kind++) {
    apply_damage(kind, entry, other_entry);
    compile_ok(ctx, kernel_source, &image, damage_names[kind]);
    cr_assert_eq(image.from_cache, 0, "entry %s was used: %s", damage_names[kind], entry);
    expect_same_image(&original, &image, damage_names[kind]);
    volt8_jit_image_free(&image);
    compile_ok(ctx, kernel_source, &image, damage_names[kind]);
    cr_assert_eq(image.from_cache, 1, "entry not repaired after %s", damage_names[kind]);
    expect_same_image(&original, &image, damage_names[kind]);
    volt8_jit_image_free(&image);
    cr_assert_eq(scan_entries(cache_dir), 2, "after %s: %d entries", damage_names[kind], found_count);
    cr_assert_eq(found_other, 0, "after %s: %d stray files", damage_names[kind], found_other);
  }
  volt8_jit_image_free(&original);
  volt8_jit_image_free(&other);
  volt8_ctx_destroy(ctx);
}

#define RACERS 8

/* Child of the race: waits at the start line, compiles, reports the image digest on `results`. */
static void race_child(int start_fd, int results_fd) {
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.target_arch = "sm_70";
  options.cache_dir = cache_dir;
  volt8_ctx *ctx = NULL;
  const volt8_nvrtc_lib *lib = NULL;
  if (volt8_ctx_create(&options, &ctx) != VOLT8_OK || volt8_nvrtc_for_arch(ctx, 70, &lib) != VOLT8_OK) _exit(2);
  char byte;
  while (read(start_fd, &byte, 1) > 0) continue;
  volt8_jit_image image;
  volt8_jit_request request = {"k", kernel_source, 70, VOLT8_IMAGE_PTX, NULL, 0};
  if (volt8_jit_compile(ctx, &request, &image) != VOLT8_OK) _exit(3);
  uint8_t digest[VOLT8_SHA256_BYTES];
  char line[VOLT8_SHA256_HEX_BYTES];
  volt8_sha256_digest(image.data, image.size, digest);
  volt8_sha256_hex(digest, line);
  line[64] = '\n';
  if (write(results_fd, line, sizeof line) != (ssize_t)sizeof line) _exit(4);
  volt8_jit_image_free(&image);
  volt8_ctx_destroy(ctx);
  _exit(0);
}

Test(jit_cache, processes_racing_on_one_key_all_succeed) {
  volt8_ctx *probe = new_ctx("sm_70", NULL);
  require_nvrtc(probe, 70);
  volt8_ctx_destroy(probe);
  int start[2], results[2];
  cr_assert_eq(pipe(start), 0);
  cr_assert_eq(pipe(results), 0);
  pid_t children[RACERS];
  for (int i = 0; i < RACERS; i++) {
    children[i] = fork();
    cr_assert(children[i] >= 0, "fork: %s", strerror(errno));
    if (children[i] == 0) {
      close(start[1]);
      close(results[0]);
      race_child(start[0], results[1]);
    }
  }
  close(start[0]);
  close(start[1]); /* every child sees EOF at once: the start signal */
  close(results[1]);
  for (int i = 0; i < RACERS; i++) {
    int wait_status = 0;
    cr_assert_eq(waitpid(children[i], &wait_status, 0), children[i]);
    cr_assert(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0, "racer %d failed (wait status 0x%x)", i,
              wait_status);
  }
  char digests[RACERS][VOLT8_SHA256_HEX_BYTES];
  for (int i = 0; i < RACERS; i++) {
    ssize_t got = read(results[0], digests[i], VOLT8_SHA256_HEX_BYTES);
    cr_assert_eq(got, VOLT8_SHA256_HEX_BYTES, "racer result %d missing", i);
    cr_assert(memcmp(digests[i], digests[0], 64) == 0, "racer %d got a different image", i);
  }
  close(results[0]);
  cr_assert_eq(scan_entries(cache_dir), 1, "%d entries after the race", found_count);
  cr_assert_eq(found_other, 0, "%d temp or stray files left after the race", found_other);
}

static void *compile_in_thread(void *arg) {
  volt8_ctx *ctx = arg;
  static const char *const sources[] = {kernel_source, other_source};
  static int next;
  int index = __atomic_fetch_add(&next, 1, __ATOMIC_SEQ_CST) % 2;
  volt8_jit_image image;
  volt8_status status = compile_source(ctx, sources[index], 70, VOLT8_IMAGE_PTX, NULL, &image);
  volt8_jit_image_free(&image);
  return (void *)(intptr_t)status;
}

Test(jit_cache, threads_share_one_ctx) {
  volt8_ctx *ctx = new_ctx("sm_70", cache_dir);
  pthread_t threads[4];
  for (int i = 0; i < 4; i++) cr_assert_eq(pthread_create(&threads[i], NULL, compile_in_thread, ctx), 0);
  for (int i = 0; i < 4; i++) {
    void *result;
    pthread_join(threads[i], &result);
    if ((intptr_t)result == VOLT8_ERR_ARCH_UNSUPPORTED) cr_skip_test("no NVRTC for arch 70");
    cr_assert_eq((intptr_t)result, VOLT8_OK, "thread %d failed with status %d", i, (int)(intptr_t)result);
  }
  cr_assert_eq(scan_entries(cache_dir), 2);
  cr_assert_eq(found_other, 0);
  volt8_ctx_destroy(ctx);
}

Test(jit_cache, disabled_cache_compiles_and_writes_nothing) {
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.target_arch = "sm_70";
  options.cache_dir = cache_dir;
  options.cache_disable = 1;
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_OK);
  require_nvrtc(ctx, 70);
  volt8_jit_image image;
  for (int round = 0; round < 2; round++) {
    compile_ok(ctx, kernel_source, &image, "compile with options.cache_disable");
    cr_assert_eq(image.from_cache, 0, "round %d came from a disabled cache", round);
    volt8_jit_image_free(&image);
  }
  volt8_ctx_destroy(ctx);

  setenv("VOLT8_CACHE_DISABLE", "1", 1);
  ctx = new_ctx("sm_70", cache_dir);
  compile_ok(ctx, kernel_source, &image, "compile with VOLT8_CACHE_DISABLE=1");
  cr_assert_eq(image.from_cache, 0);
  volt8_jit_image_free(&image);
  volt8_ctx_destroy(ctx);
  unsetenv("VOLT8_CACHE_DISABLE");
  scan_entries(cache_dir);
  cr_assert_eq(found_count + found_other, 0, "a disabled cache wrote %d files", found_count + found_other);
}

Test(jit_cache, unwritable_cache_does_not_fail_the_compile) {
  char blocked[300];
  snprintf(blocked, sizeof blocked, "%s/a-file", cache_dir);
  FILE *file = fopen(blocked, "w");
  cr_assert(file);
  fclose(file);
  volt8_ctx *ctx = new_ctx("sm_70", blocked); /* a regular file where the cache dir should be */
  require_nvrtc(ctx, 70);
  volt8_jit_image image;
  compile_ok(ctx, kernel_source, &image, "compile with an unusable cache dir");
  cr_assert_eq(image.from_cache, 0);
  volt8_jit_image_free(&image);
  volt8_ctx_destroy(ctx);
}

Test(jit_cache, failed_publish_leaves_no_temp_file) {
  volt8_ctx *ctx = new_ctx("sm_70", cache_dir);
  require_nvrtc(ctx, 70);
  volt8_jit_image image;
  compile_ok(ctx, kernel_source, &image, "first compile");
  volt8_jit_image_free(&image);
  cr_assert_eq(scan_entries(cache_dir), 1);
  char entry[512];
  snprintf(entry, sizeof entry, "%s", found_entries[0]);
  cr_assert_eq(unlink(entry), 0);
  cr_assert_eq(mkdir(entry, 0755), 0, "mkdir %s", entry); /* the rename into place now fails */
  compile_ok(ctx, kernel_source, &image, "compile whose publish fails");
  cr_assert_eq(image.from_cache, 0);
  volt8_jit_image_free(&image);
  scan_entries(cache_dir);
  cr_assert_eq(found_count + found_other, 0, "%d files left behind by a failed publish", found_count + found_other);
  volt8_ctx_destroy(ctx);
}

Test(jit_cache, compile_error_reports_the_nvrtc_log) {
  volt8_ctx *ctx = new_ctx("sm_70", cache_dir);
  require_nvrtc(ctx, 70);
  const char *broken = "extern \"C\" __global__ void k(float *p) { p[0] = volt8_undefined_value; }\n";
  volt8_jit_image image;
  volt8_status status = compile_source(ctx, broken, 70, VOLT8_IMAGE_PTX, NULL, &image);
  cr_assert_eq(status, VOLT8_ERR_COMPILE, "status %s: %s", volt8_status_string(status), volt8_last_error(ctx));
  cr_assert(strstr(volt8_last_error(ctx), "volt8_undefined_value") != NULL, "log missing: %s", volt8_last_error(ctx));
  cr_assert(strstr(volt8_last_error(ctx), "kernel k") != NULL, "kernel not named: %s", volt8_last_error(ctx));
  cr_assert_null(image.data);
  scan_entries(cache_dir);
  cr_assert_eq(found_count + found_other, 0, "a failed compile left files in the cache");
  volt8_ctx_destroy(ctx);
}

Test(jit_cache, invalid_request_is_rejected) {
  volt8_ctx *ctx = new_ctx("sm_70", cache_dir);
  volt8_jit_image image;
  volt8_jit_request request = {"", kernel_source, 70, VOLT8_IMAGE_PTX, NULL, 0};
  cr_assert_eq(volt8_jit_compile(ctx, &request, &image), VOLT8_ERR_INVALID_ARGUMENT);
  request.kernel_name = "k";
  request.num_options = 1;
  cr_assert_eq(volt8_jit_compile(ctx, &request, &image), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(ctx), "option") != NULL, "%s", volt8_last_error(ctx));
  request.num_options = 0;
  request.kind = (volt8_image_kind)7;
  cr_assert_eq(volt8_jit_compile(ctx, &request, &image), VOLT8_ERR_INVALID_ARGUMENT);
  volt8_ctx_destroy(ctx);
}

Test(jit_cache, cache_only_load_without_nvrtc) {
  volt8_ctx *ctx = new_ctx("sm_70", cache_dir);
  require_nvrtc(ctx, 70);
  volt8_jit_image built, loaded;
  compile_ok(ctx, kernel_source, &built, "compile that fills the cache");
  volt8_ctx_destroy(ctx);

  setenv("VOLT8_NVRTC_DISABLE", "1", 1); /* this test runs in its own process */
  ctx = new_ctx("sm_70", cache_dir);
  compile_ok(ctx, kernel_source, &loaded, "cache-only load");
  cr_assert_eq(loaded.from_cache, 1);
  cr_assert_str_eq(loaded.nvrtc_version, built.nvrtc_version);
  expect_same_image(&built, &loaded, "cache-only load");
  cr_assert_str_empty(volt8_last_error(ctx), "a successful load left an error: %s", volt8_last_error(ctx));

  volt8_jit_image missing;
  volt8_status status = compile_source(ctx, other_source, 70, VOLT8_IMAGE_PTX, NULL, &missing);
  const char *message = volt8_last_error(ctx);
  cr_assert_eq(status, VOLT8_ERR_ARCH_UNSUPPORTED, "status %s: %s", volt8_status_string(status), message);
  cr_assert(strstr(message, "compute_70") && strstr(message, "VOLT8_NVRTC_DISABLE") && strstr(message, cache_dir) &&
                strstr(message, "no valid PTX entry"),
            "message does not say what was tried: %s", message);
  volt8_jit_image_free(&built);
  volt8_jit_image_free(&loaded);
  volt8_ctx_destroy(ctx);
}

/* Without NVRTC and without the entry, the message names the cache and ends with how to get an NVRTC
 * for compute_70; with the cache disabled too, it says so before the same advice. */
Test(jit_cache, cache_miss_without_nvrtc_ends_with_the_advice) {
  setenv("VOLT8_NVRTC_DISABLE", "1", 1); /* this test runs in its own process */
  volt8_ctx *ctx = new_ctx("sm_70", cache_dir);
  volt8_jit_image image;
  cr_assert_eq(compile_source(ctx, kernel_source, 70, VOLT8_IMAGE_PTX, NULL, &image), VOLT8_ERR_ARCH_UNSUPPORTED);
  const char *message = volt8_last_error(ctx);
  const char *cache_note = strstr(message, "holds no valid PTX entry");
  const char *advice = strstr(message, volt8_nvrtc_compute70_advice);
  cr_assert(cache_note && advice && cache_note < advice && strcmp(advice, volt8_nvrtc_compute70_advice) == 0,
            "the cache is not named before the advice that ends the message: %s", message);
  volt8_ctx_destroy(ctx);

  setenv("VOLT8_CACHE_DISABLE", "1", 1);
  ctx = new_ctx("sm_70", cache_dir);
  cr_assert_eq(compile_source(ctx, kernel_source, 70, VOLT8_IMAGE_PTX, NULL, &image), VOLT8_ERR_ARCH_UNSUPPORTED);
  message = volt8_last_error(ctx);
  advice = strstr(message, volt8_nvrtc_compute70_advice);
  cr_assert(strstr(message, "so no cached kernel either") && advice && strcmp(advice, volt8_nvrtc_compute70_advice) == 0,
            "%s", message);
  volt8_ctx_destroy(ctx);
}

Test(jit_cache, host_with_only_nvrtc_13_loads_sm70_code_from_the_cache) {
  volt8_ctx *ctx = new_ctx("sm_70", cache_dir);
  require_nvrtc(ctx, 70);
  const volt8_nvrtc_lib *lib = NULL;
  volt8_nvrtc_for_arch(ctx, 90, &lib);
  char path_13[512] = "";
  for (int i = 0; i < ctx->nvrtc->count; i++)
    if (ctx->nvrtc->libs[i].major == 13) snprintf(path_13, sizeof path_13, "%s", ctx->nvrtc->libs[i].path);
  if (!path_13[0]) cr_skip_test("no NVRTC 13 on this host: %s", ctx->nvrtc->tried);
  volt8_jit_image built, loaded;
  compile_ok(ctx, kernel_source, &built, "compile with NVRTC 12");
  volt8_ctx_destroy(ctx);

  setenv("VOLT8_NVRTC", path_13, 1);
  setenv("VOLT8_NVRTC_ONLY", "1", 1);
  ctx = new_ctx("sm_70", cache_dir);
  compile_ok(ctx, kernel_source, &loaded, "load on a host with only NVRTC 13");
  cr_assert_eq(loaded.from_cache, 1);
  cr_assert_str_eq(loaded.nvrtc_version, built.nvrtc_version);
  expect_same_image(&built, &loaded, "NVRTC 12 image loaded beside NVRTC 13");
  volt8_jit_image_free(&built);
  volt8_jit_image_free(&loaded);
  volt8_ctx_destroy(ctx);
}

Test(jit_cache, cache_only_prefers_the_newest_valid_entry) {
  volt8_cache_inputs inputs = {"k", kernel_source, 70, VOLT8_IMAGE_PTX, NULL, 0};
  cr_assert_eq(volt8_cache_store(cache_dir, &inputs, "11.8", "old", 4), VOLT8_OK);
  cr_assert_eq(volt8_cache_store(cache_dir, &inputs, "12.10", "newest", 7), VOLT8_OK);
  cr_assert_eq(volt8_cache_store(cache_dir, &inputs, "12.9", "newer", 6), VOLT8_OK);
  volt8_jit_image image;
  cr_assert_eq(volt8_cache_load(cache_dir, &inputs, NULL, &image), VOLT8_OK);
  cr_assert_str_eq(image.nvrtc_version, "12.10");
  cr_assert_str_eq(image.data, "newest");
  volt8_jit_image_free(&image);

  char *newest = volt8_cache_entry_path(cache_dir, &inputs, "12.10");
  cr_assert_eq(truncate(newest, 20), 0);
  free(newest);
  cr_assert_eq(volt8_cache_load(cache_dir, &inputs, NULL, &image), VOLT8_OK);
  cr_assert_str_eq(image.nvrtc_version, "12.9", "a damaged entry was not skipped");
  cr_assert_str_eq(image.data, "newer");
  volt8_jit_image_free(&image);

  cr_assert_eq(volt8_cache_load(cache_dir, &inputs, "13.0", &image), VOLT8_ERR_NOT_FOUND);
  inputs.source = other_source;
  cr_assert_eq(volt8_cache_load(cache_dir, &inputs, NULL, &image), VOLT8_ERR_NOT_FOUND);
}

/* ---- the stale-temp sweep removes volt8's own temp files and nothing else ---- */

/* Creates dir/name (a regular file, or a folder) and dates it `age_seconds` back. */
static void make_dated(const char *dir, const char *name, int folder, long age_seconds) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (folder) {
    cr_assert_eq(mkdir(path, 0755), 0, "mkdir %s: %s", path, strerror(errno));
  } else {
    FILE *file = fopen(path, "w");
    cr_assert(file && fputs("someone's notes\n", file) >= 0 && fclose(file) == 0, "cannot write %s", path);
  }
  struct timespec times[2] = {{time(NULL) - age_seconds, 0}, {time(NULL) - age_seconds, 0}};
  cr_assert_eq(utimensat(AT_FDCWD, path, times, AT_SYMLINK_NOFOLLOW), 0, "utimensat %s: %s", path, strerror(errno));
}

static int exists_in(const char *dir, const char *name) {
  char path[512];
  struct stat info;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return lstat(path, &info) == 0;
}

/* --cache $HOME puts the temp folder at ~/tmp: a publish there removes only its own stale temps. */
Test(jit_cache, publish_sweeps_only_its_own_stale_temps) {
  char temp_dir[300], nested[400];
  snprintf(temp_dir, sizeof temp_dir, "%s/tmp", cache_dir);
  cr_assert_eq(mkdir(temp_dir, 0755), 0);
  const long two_hours = 7200;
  static const char *const foreign[] = {
      "notes.txt", "12345.0123456789abcdef", "volt8-123.0123456789abcdeg", "volt8-123.0123456789abcdef.bak",
      "volt8-.0123456789abcdef", "volt8-123.0123456789ABCDEF", "volt8-123.0123456789abcde", "volt8-123"};
  for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) make_dated(temp_dir, foreign[i], 0, two_hours);
  make_dated(temp_dir, "volt8-7.00000000000000aa", 1, two_hours); /* a folder of our name is not ours */
  make_dated(temp_dir, "projects", 1, two_hours);
  snprintf(nested, sizeof nested, "%s/projects", temp_dir);
  make_dated(nested, "volt8-4242.00000000deadbeef", 0, two_hours); /* never looked for below tmp/ */
  make_dated(temp_dir, "volt8-4242.00000000deadbeef", 0, two_hours); /* left by a killed publish */
  make_dated(temp_dir, "volt8-4243.0123456789abcdef", 0, 60);        /* a publish under way */

  volt8_cache_inputs inputs = {"k", kernel_source, 70, VOLT8_IMAGE_PTX, NULL, 0};
  char why[512] = "";
  cr_assert_eq(volt8_cache_publish(cache_dir, &inputs, "12.9", "ptx", 4, why, sizeof why), VOLT8_OK, "%s", why);

  for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++)
    cr_assert(exists_in(temp_dir, foreign[i]), "the publish removed %s/%s, a file volt8 did not make", temp_dir,
              foreign[i]);
  cr_assert(exists_in(temp_dir, "volt8-7.00000000000000aa"), "the publish removed a folder of tmp/");
  cr_assert(exists_in(nested, "volt8-4242.00000000deadbeef"), "the sweep went below tmp/");
  cr_assert(exists_in(temp_dir, "volt8-4243.0123456789abcdef"), "the publish removed a temp file an hour had not aged");
  cr_assert(!exists_in(temp_dir, "volt8-4242.00000000deadbeef"), "volt8's own stale temp file was left");
}

/* A publish that cannot make its folders names the component in the way and what it is. */
Test(jit_cache, a_publish_names_what_blocks_its_folders) {
  char temp_dir[300], why[1024], expected[700];
  volt8_cache_inputs inputs = {"k", kernel_source, 70, VOLT8_IMAGE_PTX, NULL, 0};
  snprintf(temp_dir, sizeof temp_dir, "%s/tmp", cache_dir);

  cr_assert_eq(symlink("tmp", temp_dir), 0, "symlink %s: %s", temp_dir, strerror(errno)); /* a loop */
  cr_assert_eq(volt8_cache_publish(cache_dir, &inputs, "12.9", "ptx", 4, why, sizeof why), VOLT8_ERR_IO);
  snprintf(expected, sizeof expected, "cannot create %s: %s is a symbolic link loop (%s)", temp_dir, temp_dir,
           strerror(ELOOP));
  cr_assert_str_eq(why, expected);
  cr_assert_eq(unlink(temp_dir), 0);

  cr_assert_eq(symlink("missing", temp_dir), 0);
  cr_assert_eq(volt8_cache_publish(cache_dir, &inputs, "12.9", "ptx", 4, why, sizeof why), VOLT8_ERR_IO);
  snprintf(expected, sizeof expected, "cannot create %s: %s is a symbolic link to nothing (%s)", temp_dir, temp_dir,
           strerror(ENOENT));
  cr_assert_str_eq(why, expected);
  cr_assert_eq(unlink(temp_dir), 0);

  cr_assert_eq(mkfifo(temp_dir, 0600), 0);
  cr_assert_eq(volt8_cache_publish(cache_dir, &inputs, "12.9", "ptx", 4, why, sizeof why), VOLT8_ERR_IO);
  snprintf(expected, sizeof expected, "cannot create %s: %s is a FIFO (%s)", temp_dir, temp_dir, strerror(ENOTDIR));
  cr_assert_str_eq(why, expected);
  cr_assert_eq(unlink(temp_dir), 0);

  char v1[300];
  snprintf(v1, sizeof v1, "%s/v1", cache_dir);
  FILE *file = fopen(v1, "w");
  cr_assert(file && fclose(file) == 0);
  cr_assert_eq(volt8_cache_publish(cache_dir, &inputs, "12.9", "ptx", 4, why, sizeof why), VOLT8_ERR_IO);
  snprintf(expected, sizeof expected, "is a regular file (%s)", strerror(ENOTDIR));
  cr_assert(strstr(why, v1) && strstr(why, expected), "%s", why);
}

/* The tuner's variants (volt8_tools_ctx_variant_cubin): a variant compiles to an sm_XX CUBIN under its
 * own cache key, never to the PTX entry the library's own contexts use and find. */
Test(jit_cache, variant_cubin_ctx_caches_cubins_apart_from_ptx, .timeout = 300) {
  volt8_ctx *ptx_ctx = new_ctx("sm_70", cache_dir);
  require_nvrtc(ptx_ctx, 70);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  char name[128];
  cr_assert_eq(volt8_variant_name(ptx_ctx, &shape, 0, name, sizeof name), VOLT8_OK, "%s", volt8_last_error(ptx_ctx));
  int32_t from_cache = -1;
  cr_assert_eq(volt8_variant_compile(ptx_ctx, &shape, name, &from_cache), VOLT8_OK, "%s", volt8_last_error(ptx_ctx));
  cr_assert_eq(from_cache, 0);
  cr_assert_eq(volt8_tools_ctx(ptx_ctx).variant_cubin, 0);

  volt8_ctx *cubin_ctx = new_ctx("sm_70", cache_dir);
  cr_assert_eq(volt8_tools_ctx_variant_cubin(cubin_ctx), VOLT8_OK, "%s", volt8_last_error(cubin_ctx));
  cr_assert_eq(volt8_tools_ctx(cubin_ctx).variant_cubin, 1);
  cr_assert_eq(volt8_variant_compile(cubin_ctx, &shape, name, &from_cache), VOLT8_OK, "%s", volt8_last_error(cubin_ctx));
  cr_assert_eq(from_cache, 0, "the CUBIN context took the PTX entry");
  cr_assert_eq(scan_entries(cache_dir), 2, "expected a PTX and a CUBIN entry, found %d", found_count);
  cr_assert_eq(volt8_variant_compile(cubin_ctx, &shape, name, &from_cache), VOLT8_OK, "%s", volt8_last_error(cubin_ctx));
  cr_assert_eq(from_cache, 1, "the CUBIN entry was not found again");

  /* The entry is the sm_70 CUBIN of the variant's source, as volt8_jit_compile asks for it. */
  volt8_kernel_source source = {0};
  cr_assert_eq(volt8_codegen_emit(cubin_ctx, &shape, name, &source), VOLT8_OK, "%s", volt8_last_error(cubin_ctx));
  volt8_jit_request request = {source.entry, source.source, 70, VOLT8_IMAGE_CUBIN, NULL, 0};
  volt8_jit_image image = {0};
  cr_assert_eq(volt8_jit_compile(cubin_ctx, &request, &image), VOLT8_OK, "%s", volt8_last_error(cubin_ctx));
  cr_assert_eq(image.from_cache, 1);
  cr_assert(image.size > 4 && memcmp(image.data, "\177ELF", 4) == 0, "the cached image is not an ELF CUBIN");
  volt8_jit_image_free(&image);
  volt8_kernel_source_free(&source);
  cr_assert_eq(volt8_variant_compile(ptx_ctx, &shape, name, &from_cache), VOLT8_OK, "%s", volt8_last_error(ptx_ctx));
  cr_assert_eq(from_cache, 1, "the PTX context lost its entry");
  volt8_ctx_destroy(cubin_ctx);
  volt8_ctx_destroy(ptx_ctx);
}

Test(jit_cache, variant_cubin_needs_a_ctx) {
  cr_assert_eq(volt8_tools_ctx_variant_cubin(NULL), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(NULL), "ctx is NULL"), "%s", volt8_last_error(NULL));
}
