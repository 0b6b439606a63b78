/* The context facts of tools.h, read without showing the tools the context's struct. */
#include "tools/tools.h"
#include "core/ctx_internal.h"

volt8_tools_ctx_info volt8_tools_ctx(const volt8_ctx *ctx) {
  volt8_tools_ctx_info info = {ctx->cuda, ctx->device_ordinal, ctx->device_arch, ctx->target_arch, ctx->device_name,
                               ctx->cache_dir, atomic_load(&ctx->jit_compiles), ctx->variant_cubin};
  return info;
}

volt8_status volt8_tools_ctx_variant_cubin(volt8_ctx *ctx) {
  if (!ctx) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_tools_ctx_variant_cubin: ctx is NULL");
  if (ctx->has_device && ctx->target_arch != ctx->device_arch)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_tools_ctx_variant_cubin: an sm_%d CUBIN does not load on %s (sm_%d); kernels for "
                      "another arch than the device's stay PTX", ctx->target_arch, ctx->device_name, ctx->device_arch);
  ctx->variant_cubin = 1;
  return VOLT8_OK;
}
