/* What the NVRTC search found, candidate by candidate (volt8 doctor): read from ctx's registry. */
#define VOLT8_EXPERIMENTAL_API 1 /* defines volt8_nvrtc_candidate_* */
#include "volt8.h"
#include "core/ctx_internal.h"
#include "jit/nvrtc_loader.h"

#include <stdio.h>
#include <string.h>

volt8_status volt8_nvrtc_candidate_count(volt8_ctx *ctx, int32_t *out_count, int32_t *out_dropped) {
  if (!ctx || !out_count)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_nvrtc_candidate_count: NULL ctx or count");
  const volt8_nvrtc_registry *registry = NULL;
  volt8_status status = volt8_nvrtc_registry_probed(ctx, &registry);
  if (status != VOLT8_OK) return status;
  *out_count = registry->candidate_count;
  if (out_dropped) *out_dropped = registry->candidates_dropped;
  return VOLT8_OK;
}

volt8_status volt8_nvrtc_candidate_get(volt8_ctx *ctx, int32_t index, volt8_nvrtc_candidate *out) {
  if (!ctx || !out || out->size < sizeof(size_t))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_nvrtc_candidate_get: NULL ctx or out, or out->size unset (VOLT8_NVRTC_CANDIDATE_INIT)");
  const volt8_nvrtc_registry *registry = NULL;
  volt8_status status = volt8_nvrtc_registry_probed(ctx, &registry);
  if (status != VOLT8_OK) return status;
  if (index < 0 || index >= registry->candidate_count)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_nvrtc_candidate_get: index %d is outside 0..%d", (int)index,
                      registry->candidate_count - 1);
  const volt8_nvrtc_tried *tried = &registry->candidates[index];
  volt8_nvrtc_candidate filled = VOLT8_NVRTC_CANDIDATE_INIT;
  volt8_copy_text(filled.path, sizeof filled.path, tried->path);
  volt8_copy_text(filled.origin, sizeof filled.origin, tried->origin);
  volt8_copy_text(filled.outcome, sizeof filled.outcome, tried->outcome);
  if (tried->lib >= 0) {
    const volt8_nvrtc_lib *lib = &registry->libs[tried->lib];
    filled.usable = 1;
    snprintf(filled.version, sizeof filled.version, "%s", lib->version);
    int count = lib->num_archs < 64 ? lib->num_archs : 64;
    memcpy(filled.archs, lib->archs, (size_t)count * sizeof filled.archs[0]);
    filled.num_archs = count;
  }
  volt8_copy_sized_output(out, &filled, sizeof filled);
  return VOLT8_OK;
}

volt8_status volt8_nvrtc_candidate_for_arch(volt8_ctx *ctx, int32_t arch, int32_t *out_index) {
  if (!ctx || !out_index)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_nvrtc_candidate_for_arch: NULL ctx or index");
  *out_index = -1;
  const volt8_nvrtc_lib *lib = NULL;
  volt8_status status = volt8_nvrtc_for_arch(ctx, arch, &lib);
  if (status != VOLT8_OK) return status;
  const volt8_nvrtc_registry *registry = ctx->nvrtc;
  for (int32_t i = 0; i < registry->candidate_count; i++)
    if (registry->candidates[i].lib >= 0 && &registry->libs[registry->candidates[i].lib] == lib) *out_index = i;
  if (*out_index < 0)
    return volt8_fail(ctx, VOLT8_ERR_NOT_FOUND, "NVRTC %s (%s) serves compute_%d but is past the %d candidates listed",
                      lib->version, lib->path, (int)arch, VOLT8_NVRTC_MAX_CANDIDATES);
  return VOLT8_OK;
}
