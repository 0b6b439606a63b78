/* The stable ABI: versions, pinned status values, context lifecycle, exported symbols, and the
 * driver-free path. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "volt8.h"

TestSuite(abi, .timeout = 60);

Test(abi, version_macros_match_runtime) {
  cr_assert_eq(volt8_version_number(), VOLT8_VERSION_NUMBER);
  char expected[32];
  snprintf(expected, sizeof expected, "%d.%d.%d", VOLT8_VERSION_MAJOR, VOLT8_VERSION_MINOR, VOLT8_VERSION_PATCH);
  cr_assert_str_eq(volt8_version_string(), expected);
}

Test(abi, status_values_are_pinned) {
  /* Renumbering breaks every compiled host engine: these values never change. */
  cr_assert_eq(VOLT8_OK, 0);
  cr_assert_eq(VOLT8_ERR_INVALID_ARGUMENT, 1);
  cr_assert_eq(VOLT8_ERR_OUT_OF_MEMORY, 2);
  cr_assert_eq(VOLT8_ERR_NO_DEVICE, 3);
  cr_assert_eq(VOLT8_ERR_ARCH_UNSUPPORTED, 4);
  cr_assert_eq(VOLT8_ERR_COMPILE, 5);
  cr_assert_eq(VOLT8_ERR_CACHE, 6);
  cr_assert_eq(VOLT8_ERR_IO, 7);
  cr_assert_eq(VOLT8_ERR_FORMAT, 8);
  cr_assert_eq(VOLT8_ERR_CUDA, 9);
  cr_assert_eq(VOLT8_ERR_CODEGEN, 10);
  cr_assert_eq(VOLT8_ERR_CAPTURE, 11);
  cr_assert_eq(VOLT8_ERR_NOT_FOUND, 12);
  cr_assert_eq(VOLT8_ERR_UNSUPPORTED, 13);
  cr_assert_eq(VOLT8_ERR_INTERNAL, 14);
  cr_assert_eq(VOLT8_ERR_SCALE_RANGE, 15);
}

Test(abi, every_status_has_its_own_name) {
  for (int a = 0; a <= VOLT8_ERR_SCALE_RANGE; a++) {
    const char *name = volt8_status_string((volt8_status)a);
    cr_assert(strncmp(name, "VOLT8_", 6) == 0, "status %d has no name: \"%s\"", a, name);
    for (int b = 0; b < a; b++)
      cr_assert_str_neq(name, volt8_status_string((volt8_status)b), "statuses %d and %d share a name", a, b);
  }
  cr_assert_str_eq(volt8_status_string((volt8_status)999), "unknown status");
  cr_assert_str_eq(volt8_status_string((volt8_status)-1), "unknown status");
}

Test(abi, destroy_accepts_null) {
  volt8_ctx_destroy(NULL);
  volt8_experts_destroy(NULL);
}

Test(abi, ctx_create_rejects_bad_options) {
  volt8_ctx *ctx = (volt8_ctx *)0x1;
  cr_assert_eq(volt8_ctx_create(NULL, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.size = sizeof options + 8;
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_null(ctx, "a failed create must leave *out_ctx NULL");
  cr_assert(strstr(volt8_last_error(NULL), "options->size") != NULL, "message: %s", volt8_last_error(NULL));
  options = (volt8_ctx_options)VOLT8_CTX_OPTIONS_INIT;
  options.target_arch = "volta";
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(NULL), "volta") != NULL, "message: %s", volt8_last_error(NULL));
}

/* Each of `bad` in `variable` fails the create (with or without a device), leaving no context and
 * naming the variable; each of `good` makes one. */
static void expect_environment_checked(const char *variable, const char *const *bad, size_t bad_count,
                                       const char *const *good, size_t good_count) {
  setenv("VOLT8_DISABLE_CUDA", "1", 1);
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.cache_disable = 1;
  for (size_t i = 0; i < bad_count; i++) {
    setenv(variable, bad[i], 1);
    volt8_ctx *ctx = (volt8_ctx *)0x1;
    cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_ERR_INVALID_ARGUMENT, "value \"%s\"", bad[i]);
    cr_assert_null(ctx);
    cr_assert(strstr(volt8_last_error(NULL), variable) != NULL, "message: %s", volt8_last_error(NULL));
  }
  for (size_t i = 0; i < good_count; i++) {
    setenv(variable, good[i], 1);
    volt8_ctx *ctx = NULL;
    cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_OK, "value \"%s\": %s", good[i], volt8_last_error(NULL));
    volt8_ctx_destroy(ctx);
  }
  unsetenv(variable);
}

Test(abi, l2_warm_budget_from_the_environment_is_checked) {
  const char *bad[] = {"", "12MiB", "-1", "1e6", "99999999999999999999", " 12", "12 ", "+12", "-0", "012", "12\n",
                       "\xd9\xa3" /* ARABIC-INDIC DIGIT THREE */, "\xc2\xb2" /* SUPERSCRIPT TWO */, "0x10"},
             *good[] = {"0", "12582912", "9223372036854775807"};
  expect_environment_checked("VOLT8_L2_WARM_BYTES", bad, sizeof bad / sizeof bad[0], good, sizeof good / sizeof good[0]);
}

Test(abi, single_launch_grid_from_the_environment_is_checked) {
  const char *bad[] = {"", "three", "-1", "33", "3.5", " 3", "3 ", "+3", "-0", "03", "3\n", "\xd9\xa3"},
             *good[] = {"0", "1", "32"};
  expect_environment_checked("VOLT8_SINGLE_LAUNCH_CTAS", bad, sizeof bad / sizeof bad[0], good,
                             sizeof good / sizeof good[0]);
}

Test(abi, older_options_size_is_accepted) {
  /* A caller compiled against a header that only had `size` and `device`. */
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.size = offsetof(volt8_ctx_options, cache_dir);
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_OK, "%s", volt8_last_error(NULL));
  volt8_ctx_destroy(ctx);
}

Test(abi, no_device_path) {
  /* CI machines have no GPU driver; VOLT8_DISABLE_CUDA=1 makes the same true on a GPU machine. */
  setenv("VOLT8_DISABLE_CUDA", "1", 1);
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.cache_disable = 1;
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_OK, "%s", volt8_last_error(NULL));
  cr_assert_str_eq(volt8_last_error(ctx), "");
  cr_assert_eq(volt8_ctx_require_device(ctx), VOLT8_ERR_NO_DEVICE);
  cr_assert(strstr(volt8_last_error(ctx), "no GPU") != NULL, "message: %s", volt8_last_error(ctx));
  char arch[16];
  cr_assert_eq(volt8_ctx_target_arch(ctx, arch, sizeof arch), VOLT8_OK);
  cr_assert_str_eq(arch, "sm_70", "without a device the target is the SM70 baseline");
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  static const uint8_t byte = 0;
  static const uint16_t half = 0x3c00;
  volt8_host_experts host = {sizeof host, &byte, &half, &byte, &half};
  volt8_experts *experts = NULL;
  cr_assert_eq(volt8_experts_create_from_host(ctx, &shape, &host, 1, 1, &experts), VOLT8_ERR_NO_DEVICE);
  cr_assert_null(experts);
  volt8_ctx_destroy(ctx);
}

static int run_capture(const char *command, char *output, size_t output_size) {
  FILE *pipe = popen(command, "r");
  if (!pipe) return -1;
  size_t used = fread(output, 1, output_size - 1, pipe);
  output[used] = '\0';
  return pclose(pipe);
}

Test(abi, only_volt8_symbols_are_exported) {
  char command[1024], output[65536];
  snprintf(command, sizeof command, "nm -D --defined-only '%s' | awk '{print $3}'", VOLT8_SHARED_LIBRARY);
  cr_assert_eq(run_capture(command, output, sizeof output), 0, "nm failed");
  int count = 0;
  for (char *save = NULL, *symbol = strtok_r(output, "\n", &save); symbol; symbol = strtok_r(NULL, "\n", &save)) {
    if (*symbol == '\0' || strcmp(symbol, "_init") == 0 || strcmp(symbol, "_fini") == 0) continue;
    cr_assert(strncmp(symbol, "volt8_", 6) == 0, "exported symbol outside the volt8_ namespace: %s", symbol);
    count++;
  }
  cr_assert_geq(count, 10, "only %d volt8_ symbols exported", count);
}

Test(abi, soname_is_major_version) {
  char command[1024], output[4096];
  snprintf(command, sizeof command, "objdump -p '%s' | grep SONAME", VOLT8_SHARED_LIBRARY);
  cr_assert_eq(run_capture(command, output, sizeof output), 0);
  cr_assert(strstr(output, "libvolt8.so.0") != NULL, "SONAME line: %s", output);
}

Test(abi, driver_and_nvrtc_are_not_link_dependencies) {
  char command[1024], output[8192];
  snprintf(command, sizeof command, "objdump -p '%s' | grep NEEDED", VOLT8_SHARED_LIBRARY);
  cr_assert_eq(run_capture(command, output, sizeof output), 0);
  cr_assert(strstr(output, "libcuda") == NULL, "libcuda must be opened with dlopen, not linked: %s", output);
  cr_assert(strstr(output, "nvrtc") == NULL, "NVRTC must be opened with dlopen, not linked: %s", output);
}
