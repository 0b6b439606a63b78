/* The experimental variant calls of volt8.h: a shape's variants by name, and one compiled (or found in
 * the disk cache) without a device. */
#define VOLT8_EXPERIMENTAL_API 1 /* defines volt8_variant_count, volt8_variant_name, volt8_variant_compile */
#include <stdlib.h>
#include <string.h>

#include "core/ctx_internal.h"
#include "jit/kernel_load.h"
#include "moe/kernels/catalogue.h"
#include "moe/kernels/moe_layout.h"

volt8_status volt8_variant_count(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t *out_count) {
  if (!out_count) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_count: out_count is NULL");
  volt8_moe_shape read;
  volt8_status status = volt8_moe_shape_in(ctx, "volt8_variant_count", shape, &read);
  if (status != VOLT8_OK) return status;
  volt8_variant *variants = NULL;
  status = volt8_catalogue_list(ctx, &read, volt8_codegen_arch(ctx), &variants, out_count);
  free(variants);
  return status;
}

volt8_status volt8_variant_name(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t index, char *buf,
                                size_t buf_size) {
  if (!buf || buf_size == 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_name: buf is NULL or buf_size is 0");
  buf[0] = '\0';
  volt8_moe_shape read;
  volt8_status status = volt8_moe_shape_in(ctx, "volt8_variant_name", shape, &read);
  if (status != VOLT8_OK) return status;
  volt8_variant *variants = NULL;
  int32_t count = 0;
  status = volt8_catalogue_list(ctx, &read, volt8_codegen_arch(ctx), &variants, &count);
  if (status != VOLT8_OK) return status;
  char name[VOLT8_VARIANT_NAME_BYTES] = "";
  if (index >= 0 && index < count) volt8_variant_format(&variants[index], name, sizeof name);
  free(variants);
  if (index < 0 || index >= count)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_name: index %d is outside [0, %d)", index, count);
  if (strlen(name) + 1 > buf_size)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_name: '%s' needs %zu bytes, buf_size is %zu", name,
                      strlen(name) + 1, buf_size);
  memcpy(buf, name, strlen(name) + 1);
  return VOLT8_OK;
}

volt8_status volt8_variant_compile(volt8_ctx *ctx, const volt8_moe_shape *shape, const char *name,
                                   int32_t *out_from_cache) {
  if (!ctx) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_compile: ctx is NULL");
  if (!name) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_compile: name is NULL");
  volt8_moe_shape read;
  volt8_status status = volt8_moe_shape_in(ctx, "volt8_variant_compile", shape, &read);
  if (status != VOLT8_OK) return status;
  volt8_kernel_source source = {0};
  status = volt8_codegen_emit(ctx, &read, name, &source);
  if (status != VOLT8_OK) return status;
  volt8_kernel_load_request request = volt8_variant_load_request(ctx, &source, NULL, 0);
  status = volt8_kernel_load(ctx, &request, NULL, NULL, out_from_cache);
  volt8_kernel_source_free(&source);
  return status;
}
