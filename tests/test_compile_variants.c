/* Every variant of the code generator compiles: with NVRTC 12 to sm_70 machine code (ptxas
 * accepting it proves no post-Volta instruction slipped in) and with NVRTC 13 to sm_90. */
#include <criterion/criterion.h>

#include "test_support.h"
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/codegen.h"
#include "core/ctx_internal.h"
#include "jit/jit.h"
#include "jit/nvrtc_loader.h"

TestSuite(compile_variants, .timeout = 900);

/* Compiles every listed variant of a few shapes to CUBIN; `expected_major` is the NVRTC that must
 * have done it. */
static void compile_every_variant(volt8_ctx *ctx, int32_t arch, int expected_major) {
  volt8_moe_shape shapes[3] = {VOLT8_MOE_SHAPE_INIT, VOLT8_MOE_SHAPE_INIT, VOLT8_MOE_SHAPE_INIT};
  shapes[1].intermediate_offset = 96;
  shapes[2].block_n = 1;
  shapes[2].intermediate_offset = 0;
  const volt8_nvrtc_lib *lib = NULL;
  cr_assert_eq(volt8_nvrtc_for_arch(ctx, arch, &lib), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(lib->major, expected_major, "arch %d compiled by NVRTC %d.%d (%s), expected %d", arch, lib->major,
               lib->minor, lib->path, expected_major);
  int compiled = 0;
  for (int s = 0; s < 3; s++) {
    char **names = NULL;
    int32_t count = 0;
    cr_assert_eq(volt8_codegen_list(ctx, &shapes[s], &names, &count), VOLT8_OK, "%s", volt8_last_error(ctx));
    cr_assert_gt(count, 0);
    for (int32_t i = 0; i < count; i++) {
      volt8_kernel_source source = {0};
      cr_assert_eq(volt8_codegen_emit(ctx, &shapes[s], names[i], &source), VOLT8_OK, "%s", volt8_last_error(ctx));
      volt8_jit_request request = {source.entry, source.source, arch, VOLT8_IMAGE_CUBIN, NULL, 0};
      volt8_jit_image image = {0};
      volt8_status status = volt8_jit_compile(ctx, &request, &image);
      cr_assert_eq(status, VOLT8_OK, "shape %d variant %s for sm_%d: %s", s, names[i], arch, volt8_last_error(ctx));
      cr_assert_gt(image.size, 0);
      cr_assert_eq(image.from_cache, 0);
      volt8_jit_image_free(&image);
      volt8_kernel_source_free(&source);
      compiled++;
    }
    volt8_codegen_names_free(names, count);
  }
  cr_log_info("sm_%d: %d kernels compiled by NVRTC %d.%d", arch, compiled, lib->major, lib->minor);
}

Test(compile_variants, every_variant_sm70_with_nvrtc12) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  compile_every_variant(ctx, 70, 12);
  volt8_ctx_destroy(ctx);
}

Test(compile_variants, every_variant_sm90_with_nvrtc13) {
  /* NVRTC 12 also targets sm_90 and comes first in the search order: name NVRTC 13 explicitly. */
  setenv("VOLT8_NVRTC", VOLT8_CUDA_NVRTC13, 1);
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  compile_every_variant(ctx, 90, 13);
  volt8_ctx_destroy(ctx);
}

/* Kernels that can start early (block_m 1 GEMMs, every hmma down, the token-fused down, the
 * reduce) wait for the kernel before them in sm_90 code only: the compute_70 PTX is the Volta code
 * and has no such instruction. A routed hmma gate_up lets its down start early but never waits.
 * The other routed kernels and route run in order and have none of it at any arch; route alone
 * asks L2 for weights (the first experts' gate_up weights, at every arch). */
static int may_start_early(const char *name) {
  return strstr(name, ".bm1.") != NULL || strncmp(name, "down.tok.", 9) == 0 || strncmp(name, "down.hmma.", 10) == 0 ||
         strcmp(name, "reduce") == 0;
}

static int lets_next_start(const char *name) { return may_start_early(name) || strncmp(name, "gate_up.hmma.", 13) == 0; }

static void check_grid_dependency_control(const char *arch_name, int32_t arch, int expect_wait) {
  volt8_ctx *ctx = test_cpu_ctx(arch_name);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  char **names = NULL;
  int32_t count = 0;
  cr_assert_eq(volt8_codegen_list(ctx, &shape, &names, &count), VOLT8_OK, "%s", volt8_last_error(ctx));
  const char *extra[] = {"route", "reduce"};
  int with_wait = 0, with_fetch = 0;
  for (int32_t i = 0; i < count + 2; i++) {
    const char *name = i < count ? names[i] : extra[i - count];
    volt8_kernel_source source = {0};
    cr_assert_eq(volt8_codegen_emit(ctx, &shape, name, &source), VOLT8_OK, "%s: %s", name, volt8_last_error(ctx));
    volt8_jit_request request = {source.entry, source.source, arch, VOLT8_IMAGE_PTX, NULL, 0};
    volt8_jit_image image = {0};
    cr_assert_eq(volt8_jit_compile(ctx, &request, &image), VOLT8_OK, "%s: %s", name, volt8_last_error(ctx));
    const char *ptx = image.data; /* NUL-terminated */
    int has_wait = strstr(ptx, "griddepcontrol.wait") != NULL;
    int has_launch = strstr(ptx, "griddepcontrol.launch_dependents") != NULL;
    int expected = expect_wait && may_start_early(name);
    cr_assert_eq(has_wait, expected, "%s for %s: griddepcontrol.wait %s", name, arch_name, has_wait ? "present" : "missing");
    cr_assert_eq(has_launch, expect_wait && lets_next_start(name), "%s for %s: griddepcontrol.launch_dependents %s", name,
                 arch_name, has_launch ? "present" : "missing");
    int prefetches = strstr(ptx, "prefetch.global.L2") != NULL;
    if (strcmp(name, "route") == 0) cr_assert(prefetches, "route for %s does not warm L2", arch_name);
    if (!expected) {
      if (strcmp(name, "route") != 0) cr_assert_not(prefetches, "%s for %s prefetches", name, arch_name);
      cr_assert(strstr(ptx, "ld.global.cg") == NULL, "%s for %s has early-launch loads", name, arch_name);
    }
    with_wait += expected;
    /* Weight fetch: ".f128" / ".f256" hmma variants load their weights with that L2 prefetch size
     * (through the read-only path, or plain where requested before the wait), every other kernel
     * with none. */
    int fetch = strstr(name, ".f128") ? 128 : strstr(name, ".f256") ? 256 : 0;
    int has_128 = strstr(ptx, "L2::128B") != NULL, has_256 = strstr(ptx, "L2::256B") != NULL;
    cr_assert_eq(has_128, fetch == 128, "%s for %s: L2::128B %s", name, arch_name, has_128 ? "present" : "missing");
    cr_assert_eq(has_256, fetch == 256, "%s for %s: L2::256B %s", name, arch_name, has_256 ? "present" : "missing");
    if (fetch) {
      char load[64];
      snprintf(load, sizeof load, ".L1::no_allocate.L2::%dB.v4.u32", fetch);  /* read-only or before the wait */
      cr_assert(strstr(ptx, load) != NULL, "%s for %s: no %s", name, arch_name, load);
      with_fetch++;
    }
    volt8_jit_image_free(&image);
    volt8_kernel_source_free(&source);
  }
  if (expect_wait) cr_assert_gt(with_wait, 10, "only %d kernels can start early", with_wait);
  if (arch >= 80) cr_assert_gt(with_fetch, 10, "only %d kernels set a weight fetch size", with_fetch);
  volt8_codegen_names_free(names, count);
  volt8_ctx_destroy(ctx);
}

Test(compile_variants, forward_kernels_wait_for_the_kernel_before_on_sm90_only) {
  check_grid_dependency_control("sm_70", 70, 0);
  check_grid_dependency_control("sm_90", 90, 1);
}
