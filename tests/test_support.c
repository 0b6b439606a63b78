/* Small pieces the CPU suites share (see test_support.h). */
#include "test_support.h"

#include <criterion/criterion.h>

volt8_ctx *test_cpu_ctx(const char *target_arch) {
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.cache_disable = 1;
  options.target_arch = target_arch;
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_OK, "volt8_ctx_create: %s", volt8_last_error(NULL));
  return ctx;
}
