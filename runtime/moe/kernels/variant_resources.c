/* A variant's resources on its target (kernels/variant_resources.h): its source compiled to a CUBIN
 * with ptxas' report, read, and the occupancy it gives. */
#include "moe/kernels/variant_resources.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx_internal.h"
#include "jit/jit.h"
#include "moe/kernels/catalogue.h"

/* ptxas -v writes each entry's registers, spills and shared memory into NVRTC's log. */
static const char *const report_options[] = {"--ptxas-options=-v"};

volt8_status volt8_variant_resources_get(volt8_ctx *ctx, const volt8_moe_shape *shape, const char *name,
                                         volt8_variant_resources *out) {
  if (!ctx) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_resources_get: ctx is NULL");
  if (!shape || !name || !out)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_resources_get: shape, name or output is NULL");
  memset(out, 0, sizeof *out);
  volt8_sm_limits limits;
  volt8_status status = volt8_sm_limits_for_arch(ctx, ctx->target_arch, &limits);
  if (status != VOLT8_OK) return status;
  volt8_kernel_source source = {0};
  status = volt8_codegen_emit(ctx, shape, name, &source);
  if (status != VOLT8_OK) return status;
  volt8_jit_request request = {source.entry, source.source, ctx->target_arch, VOLT8_IMAGE_CUBIN, report_options, 1};
  volt8_jit_image image = {0};
  char *log = NULL;
  status = volt8_jit_compile_logged(ctx, &request, &image, &log);
  if (status == VOLT8_ERR_ARCH_UNSUPPORTED)
    volt8_fail_append(ctx, status, " (a resource report needs an NVRTC that makes CUBINs for the arch)");
  if (status == VOLT8_OK) status = volt8_ptxas_log_parse(ctx, log, source.entry, &out->kernel);
  if (status == VOLT8_OK) {
    out->threads = source.threads;
    snprintf(out->nvrtc_version, sizeof out->nvrtc_version, "%s", image.nvrtc_version);
    status = volt8_occupancy_compute(ctx, &limits, out->kernel.registers,
                                     out->kernel.static_smem_bytes + out->dynamic_smem_bytes, out->threads,
                                     &out->occupancy);
  }
  free(log);
  volt8_jit_image_free(&image);
  volt8_kernel_source_free(&source);
  if (status != VOLT8_OK) memset(out, 0, sizeof *out);
  return status;
}

typedef struct resources_work {
  volt8_ctx *ctx;
  const volt8_variant_ref *variants;
  int32_t count;
  _Atomic int32_t next;
  volt8_variant_resources *out;
  volt8_status *statuses;
  char **errors;                /* each failure's message, taken on the thread that failed */
} resources_work;

static void *resources_worker(void *argument) {
  resources_work *work = argument;
  for (int32_t i = atomic_fetch_add(&work->next, 1); i < work->count; i = atomic_fetch_add(&work->next, 1)) {
    const volt8_variant_ref *variant = &work->variants[i];
    work->statuses[i] = volt8_variant_resources_get(work->ctx, variant->shape, variant->name, &work->out[i]);
    if (work->statuses[i] != VOLT8_OK) work->errors[i] = strdup(volt8_last_error(work->ctx));
  }
  return NULL;
}

volt8_status volt8_variant_resources_many(volt8_ctx *ctx, const volt8_variant_ref *variants, int32_t count, int32_t jobs,
                                          volt8_variant_resources *out) {
  if (!ctx || (count > 0 && (!variants || !out)) || count < 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_resources_many: NULL argument or count %d < 0",
                      (int)count);
  if (jobs < 1 || jobs > 64)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_resources_many: %d jobs is outside 1..64", (int)jobs);
  resources_work work = {ctx, variants, count, 0, out, calloc((size_t)count + 1, sizeof(volt8_status)),
                         calloc((size_t)count + 1, sizeof(char *))};
  pthread_t threads[64];
  int32_t started = 0;
  if (work.statuses && work.errors)
    while (started < jobs - 1 && started < count - 1 && pthread_create(&threads[started], NULL, resources_worker, &work) == 0)
      started++;
  volt8_status status = VOLT8_OK;
  if (work.statuses && work.errors) resources_worker(&work);
  else status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the reports of %d variants", (int)count);
  for (int32_t t = 0; t < started; t++) pthread_join(threads[t], NULL);
  for (int32_t i = 0; status == VOLT8_OK && i < count; i++)
    if (work.statuses[i] != VOLT8_OK)
      status = volt8_fail(ctx, work.statuses[i], "%s: %s", variants[i].name, work.errors[i] ? work.errors[i] : "failed");
  for (int32_t i = 0; work.errors && i < count; i++) free(work.errors[i]);
  free(work.statuses);
  free(work.errors);
  return status;
}
