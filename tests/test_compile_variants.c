/* Every variant of the code generator compiles: with NVRTC 12 to sm_70 machine code (ptxas
 * accepting it proves no post-Volta instruction slipped in) and with NVRTC 13 to sm_90.
 * VOLT8_COMPILE_VARIANT_STRIDE=N takes every Nth variant instead (scripts/sanitized_tests.sh). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "test_support.h"
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/kernels/catalogue.h"
#include "core/ctx_internal.h"
#include "jit/jit.h"
#include "jit/nvrtc_loader.h"

TestSuite(compile_variants, .timeout = 900);

/* 1, or VOLT8_COMPILE_VARIANT_STRIDE: the sanitized run compiles every Nth variant (its compiler is
 * not instrumented, so a sample finds what the instrumented caller can; the plain run compiles all). */
static int32_t variant_stride(void) {
  const char *text = getenv("VOLT8_COMPILE_VARIANT_STRIDE");
  if (!text || !*text) return 1;
  char *end = NULL;
  long stride = strtol(text, &end, 10);
  cr_assert(end != text && *end == '\0' && stride >= 1 && stride <= 1000,
            "VOLT8_COMPILE_VARIANT_STRIDE=\"%s\" is not a whole number in 1..1000", text);
  return (int32_t)stride;
}

/* The reference TP4 rank 1, a rank at offset 96, and the online 1-row scale blocks. */
static volt8_moe_shape compiled_shape(int index) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  if (index == 1) shape.intermediate_offset = 96;
  if (index == 2) shape.block_n = 1, shape.intermediate_offset = 0;
  return shape;
}

typedef struct compile_case {
  int32_t arch, nvrtc_major, shape_index;
} compile_case;

/* One test per arch and shape, so that a parallel run spreads the compiles over the cores. */
ParameterizedTestParameters(compile_variants, every_variant_compiles_to_cubin) {
  static compile_case cases[] = {{70, 12, 0}, {70, 12, 1}, {70, 12, 2}, {90, 13, 0}, {90, 13, 1}, {90, 13, 2}};
  return cr_make_param_array(compile_case, cases, sizeof cases / sizeof cases[0]);
}

/* Compiles every listed variant of a shape to CUBIN (with a stride, every Nth, starting at the
 * shape's index so the shapes sample different variants), by the NVRTC of `nvrtc_major`. */
ParameterizedTest(compile_case *param, compile_variants, every_variant_compiles_to_cubin) {
  /* NVRTC 12 also targets sm_90 and comes first in the search order: name NVRTC 13 explicitly. */
  if (param->nvrtc_major == 13) setenv("VOLT8_NVRTC", VOLT8_CUDA_NVRTC13, 1);
  char arch_name[16];
  snprintf(arch_name, sizeof arch_name, "sm_%d", param->arch);
  volt8_ctx *ctx = test_cpu_ctx(arch_name);
  int32_t stride = variant_stride(), shape_index = param->shape_index;
  volt8_moe_shape shape = compiled_shape(shape_index);
  const volt8_nvrtc_lib *lib = NULL;
  cr_assert_eq(volt8_nvrtc_for_arch(ctx, param->arch, &lib), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(lib->major, param->nvrtc_major, "arch %d compiled by NVRTC %d.%d (%s), expected %d", param->arch,
               lib->major, lib->minor, lib->path, param->nvrtc_major);
  char **names = NULL;
  int32_t count = 0, compiled = 0;
  cr_assert_eq(volt8_codegen_list(ctx, &shape, &names, &count), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_gt(count, shape_index % stride, "shape %d lists %d variants, none at stride %d", shape_index, count, stride);
  for (int32_t i = shape_index % stride; i < count; i += stride) {
    volt8_kernel_source source = {0};
    cr_assert_eq(volt8_codegen_emit(ctx, &shape, names[i], &source), VOLT8_OK, "%s", volt8_last_error(ctx));
    volt8_jit_request request = {source.entry, source.source, param->arch, VOLT8_IMAGE_CUBIN, NULL, 0};
    volt8_jit_image image = {0};
    volt8_status status = volt8_jit_compile(ctx, &request, &image);
    cr_assert_eq(status, VOLT8_OK, "shape %d variant %s for %s: %s", shape_index, names[i], arch_name,
                 volt8_last_error(ctx));
    cr_assert_gt(image.size, 0);
    cr_assert_eq(image.from_cache, 0);
    volt8_jit_image_free(&image);
    volt8_kernel_source_free(&source);
    compiled++;
  }
  volt8_codegen_names_free(names, count);
  cr_log_info("%s shape %d: %d of %d kernels (every %d) compiled by NVRTC %d.%d", arch_name, shape_index, compiled, count,
              stride, lib->major, lib->minor);
  volt8_ctx_destroy(ctx);
}

/* Kernels that can start early (block_m 1 GEMMs, every hmma down, the token-fused down, the
 * reduce and reduce_half) wait for the kernel before them in sm_90 code only: the compute_70 PTX is
 * the Volta code and has no such instruction. A routed hmma gate_up lets its down start early but never waits.
 * The other routed kernels and route run in order and have none of it at any arch; route alone
 * asks L2 for weights (the first experts' gate_up weights, at every arch). */
static int may_start_early(const char *name) {
  return strstr(name, ".bm1.") != NULL || strncmp(name, "down.tok.", 9) == 0 || strncmp(name, "down.hmma.", 10) == 0 ||
         strcmp(name, "reduce") == 0 || strcmp(name, "reduce_half") == 0;
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
  int32_t stride = variant_stride();
  for (int32_t i = 0; i < count + 2; i++) {
    if (i < count && i % stride != 0) continue; /* route and reduce are checked at any stride */
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
      /* The one-launch forward reads what its own CTAs wrote through L2 at every arch. */
      if (strcmp(name, "single") != 0)
        cr_assert(strstr(ptx, "ld.global.cg") == NULL, "%s for %s has early-launch loads", name, arch_name);
    }
    with_wait += expected;
    /* Weight fetch: ".f128" / ".f256" hmma variants load their weights with that L2 prefetch size
     * (through the read-only path, or plain where requested before the wait), raw variants copy them
     * with it, every other kernel has none. */
    int fetch = strstr(name, ".f128") ? 128 : strstr(name, ".f256") ? 256 : 0;
    int has_128 = strstr(ptx, "L2::128B") != NULL, has_256 = strstr(ptx, "L2::256B") != NULL;
    cr_assert_eq(has_128, fetch == 128, "%s for %s: L2::128B %s", name, arch_name, has_128 ? "present" : "missing");
    cr_assert_eq(has_256, fetch == 256, "%s for %s: L2::256B %s", name, arch_name, has_256 ? "present" : "missing");
    if (fetch) {
      /* read-only or before the wait; the raw family's copies into shared memory */
      char load[64];
      if (strstr(name, ".raw."))
        snprintf(load, sizeof load, "cp.async.cg.shared.global.L2::%dB", fetch);
      else
        snprintf(load, sizeof load, ".L1::no_allocate.L2::%dB.v4.u32", fetch);
      cr_assert(strstr(ptx, load) != NULL, "%s for %s: no %s", name, arch_name, load);
      with_fetch++;
    }
    volt8_jit_image_free(&image);
    volt8_kernel_source_free(&source);
  }
  /* the totals hold for the whole list, which only the plain run (stride 1) goes through */
  if (expect_wait && stride == 1) cr_assert_gt(with_wait, 10, "only %d kernels can start early", with_wait);
  if (arch >= 80 && stride == 1) cr_assert_gt(with_fetch, 10, "only %d kernels set a weight fetch size", with_fetch);
  volt8_codegen_names_free(names, count);
  volt8_ctx_destroy(ctx);
}

Test(compile_variants, forward_kernels_wait_for_the_kernel_before_on_sm90_only) {
  check_grid_dependency_control("sm_70", 70, 0);
  check_grid_dependency_control("sm_90", 90, 1);
}
