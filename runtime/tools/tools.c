/* The context facts of tools.h, read without showing the tools the context's struct. */
#include "tools/tools.h"
#include "core/ctx_internal.h"

volt8_tools_ctx_info volt8_tools_ctx(const volt8_ctx *ctx) {
  volt8_tools_ctx_info info = {ctx->cuda, ctx->device_ordinal, ctx->device_arch, ctx->target_arch, ctx->device_name,
                               ctx->cache_dir, atomic_load(&ctx->jit_compiles)};
  return info;
}
