/* Compile, load the module, get the functions: for every kernel volt8 launches. */
#include "jit/kernel_load.h"
#include "core/ctx_internal.h"
#include "jit/jit.h"

#include <stdio.h>

static volt8_status compile(volt8_ctx *ctx, const volt8_kernel_load_request *request, volt8_jit_image *image) {
  volt8_jit_request jit = {request->kernel_name, request->source, request->arch, request->kind, NULL, 0};
  volt8_status status = volt8_jit_compile(ctx, &jit, image);
  if (status != VOLT8_OK && request->ptx_fallback) {
    jit.arch = ctx->target_arch;
    jit.kind = VOLT8_IMAGE_PTX;
    status = volt8_jit_compile(ctx, &jit, image);
  }
  return status;
}

static volt8_status load_module(volt8_ctx *ctx, const volt8_kernel_load_request *request, const volt8_jit_image *image,
                                CUmodule *out_module, CUfunction *out_functions) {
  const char *prefix = request->failure_prefix ? request->failure_prefix : "";
  volt8_status status = volt8_cuda_check(ctx, ctx->cuda->cuModuleLoadDataEx(out_module, image->data, 0, NULL, NULL),
                                         prefix, "cuModuleLoadDataEx");
  for (int32_t i = 0; i < request->num_entries && status == VOLT8_OK; i++) {
    char what[160];
    snprintf(what, sizeof what, "cuModuleGetFunction(%s)", request->entries[i]);
    status = volt8_cuda_check(ctx, ctx->cuda->cuModuleGetFunction(&out_functions[i], *out_module, request->entries[i]),
                              prefix, what);
    if (status != VOLT8_OK) ctx->cuda->cuModuleUnload(*out_module);
  }
  if (status != VOLT8_OK) *out_module = NULL;
  return status;
}

volt8_status volt8_kernel_load(volt8_ctx *ctx, const volt8_kernel_load_request *request, CUmodule *out_module,
                               CUfunction *out_functions, int32_t *out_from_cache) {
  volt8_jit_image image = {0};
  volt8_status status = compile(ctx, request, &image);
  if (status == VOLT8_OK && out_from_cache) *out_from_cache = image.from_cache;
  if (status == VOLT8_OK && out_module) status = load_module(ctx, request, &image, out_module, out_functions);
  volt8_jit_image_free(&image);
  return status;
}
