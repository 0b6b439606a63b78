/* Worker of the cache torture suite (test_cache_torture.c): compiles tiny kernels through the disk
 * cache and prints what it got.
 *
 * Usage: cache_race_worker CACHE_DIR|- KEYS ROUNDS [FIRST_KEY]
 *   Compiles kernels t<FIRST_KEY> .. t<FIRST_KEY+KEYS-1> (compute_70 PTX), ROUNDS times, starting
 *   at a key that depends on the process id; "-" disables the disk cache. For each compile prints
 *   "<kernel> <sha256 of the image> <1 if it came from the cache, else 0>".
 * Exit status: 0 done, 1 a compile failed (message on stderr), 77 no NVRTC for compute_70. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/ctx_internal.h"
#include "jit/jit.h"
#include "jit/nvrtc_loader.h"
#include "core/sha256.h"

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s CACHE_DIR|- KEYS ROUNDS [FIRST_KEY]\n", argv[0]);
    return 2;
  }
  int keys = atoi(argv[2]), rounds = atoi(argv[3]), first = argc > 4 ? atoi(argv[4]) : 0;
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.target_arch = "sm_70";
  options.cache_dir = strcmp(argv[1], "-") == 0 ? NULL : argv[1];
  options.cache_disable = options.cache_dir == NULL;
  volt8_ctx *ctx = NULL;
  if (volt8_ctx_create(&options, &ctx) != VOLT8_OK) {
    fprintf(stderr, "volt8_ctx_create: %s\n", volt8_last_error(NULL));
    return 1;
  }
  const volt8_nvrtc_lib *lib = NULL;
  if (volt8_nvrtc_for_arch(ctx, 70, &lib) != VOLT8_OK) {
    fprintf(stderr, "%s\n", volt8_last_error(ctx));
    volt8_ctx_destroy(ctx);
    return 77;
  }
  int start = keys > 0 ? (int)(getpid() % keys) : 0;
  for (int round = 0; round < rounds; round++) {
    for (int i = 0; i < keys; i++) {
      int key = first + (start + i) % keys;
      char name[32], source[256];
      snprintf(name, sizeof name, "t%d", key);
      snprintf(source, sizeof source,
               "extern \"C\" __global__ void t%d(float *p) { p[threadIdx.x] = p[threadIdx.x] * %d.0f + 1.0f; }\n", key,
               key + 2);
      volt8_jit_request request = {name, source, 70, VOLT8_IMAGE_PTX, NULL, 0};
      volt8_jit_image image;
      if (volt8_jit_compile(ctx, &request, &image) != VOLT8_OK) {
        fprintf(stderr, "compile of %s: %s\n", name, volt8_last_error(ctx));
        volt8_ctx_destroy(ctx);
        return 1;
      }
      uint8_t digest[VOLT8_SHA256_BYTES];
      char hex[VOLT8_SHA256_HEX_BYTES];
      volt8_sha256_digest(image.data, image.size, digest);
      volt8_sha256_hex(digest, hex);
      printf("%s %s %d\n", name, hex, image.from_cache);
      fflush(stdout);
      volt8_jit_image_free(&image);
    }
  }
  volt8_ctx_destroy(ctx);
  return 0;
}
