/* volt8_variant_compile: codegen + JIT for one named variant, no device needed. */
#define VOLT8_EXPERIMENTAL_API 1 /* defines volt8_variant_compile */
#include "jit/codegen.h"
#include "core/ctx_internal.h"
#include "jit/kernel_load.h"

volt8_status volt8_variant_compile(volt8_ctx *ctx, const volt8_moe_shape *shape, const char *name,
                                   int32_t *out_from_cache) {
  if (!ctx) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_compile: ctx is NULL");
  if (!shape || !name) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_compile: shape or name is NULL");
  volt8_kernel_source source = {0};
  volt8_status status = volt8_codegen_emit(ctx, shape, name, &source);
  if (status != VOLT8_OK) return status;
  volt8_kernel_load_request request = {source.entry, source.source, ctx->target_arch, VOLT8_IMAGE_PTX, 0, NULL, 0, NULL};
  status = volt8_kernel_load(ctx, &request, NULL, NULL, out_from_cache);
  volt8_kernel_source_free(&source);
  return status;
}
