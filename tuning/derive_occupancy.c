/* Resident CTAs per SM for the derivation model, from the variants' CUBINs. */
#include "derive_occupancy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "table_io.h"
#include "tools/tools.h"

void derive_occupancy_free(derive_occupancy_set *set) {
  volt8_codegen_names_free(set->names, set->view.count);
  free(set->ctas_per_sm);
  memset(set, 0, sizeof *set);
}

/* The CTAs per SM that `limits` give the CUBIN's registers, shared memory and threads. */
static int32_t ctas_under(volt8_ctx *ctx, const volt8_sm_limits *limits, const volt8_variant_resources *report) {
  volt8_occupancy occupancy;
  int32_t smem = report->kernel.static_smem_bytes + report->dynamic_smem_bytes;
  if (volt8_occupancy_compute(ctx, limits, report->kernel.registers, smem, report->threads, &occupancy) != VOLT8_OK)
    return 0;
  return occupancy.ctas_per_sm;
}

volt8_status derive_occupancy_compile(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t jobs,
                                      const volt8_sm_limits *limits, derive_occupancy_set *out) {
  memset(out, 0, sizeof *out);
  int32_t count = 0;
  volt8_status status = volt8_codegen_list(ctx, shape, &out->names, &count);
  if (status != VOLT8_OK) return status;
  out->view.count = count;
  volt8_variant_resources *reports = calloc((size_t)count + 1, sizeof *reports);
  volt8_variant_ref *variants = calloc((size_t)count + 1, sizeof *variants);
  out->ctas_per_sm = calloc((size_t)count + 1, sizeof *out->ctas_per_sm);
  if (!reports || !variants || !out->ctas_per_sm)
    status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the occupancy of %d variants", (int)count);
  for (int32_t i = 0; status == VOLT8_OK && i < count; i++) variants[i] = (volt8_variant_ref){shape, out->names[i]};
  if (status == VOLT8_OK) status = volt8_variant_resources_many(ctx, variants, count, jobs > 64 ? 64 : jobs, reports);
  /* a variant that spills or does not fit is one the tables must not choose */
  for (int32_t i = 0; status == VOLT8_OK && i < count; i++) {
    const volt8_variant_resources *report = &reports[i];
    int spills = report->kernel.spill_store_bytes > 0 || report->kernel.spill_load_bytes > 0;
    int32_t ctas = limits ? ctas_under(ctx, limits, report) : report->occupancy.ctas_per_sm;
    out->ctas_per_sm[i] = spills || ctas == 0 ? -1 : ctas;
  }
  const char *version = count ? reports[0].nvrtc_version : "?";
  if (status == VOLT8_OK) {
    char under[32] = "";
    if (limits) snprintf(under, sizeof under, ", sm_%d limits", (int)limits->arch);
    snprintf(out->from, sizeof out->from, "sm_%d CUBINs of NVRTC %s (ptxas -v)%s", volt8_tools_ctx(ctx).target_arch,
             version, under);
    snprintf(out->nvrtc_version, sizeof out->nvrtc_version, "%s (CUBINs for occupancy only)", version);
  }
  free(reports);
  free(variants);
  if (status != VOLT8_OK) derive_occupancy_free(out);
  out->view.names = out->names;
  out->view.ctas_per_sm = out->ctas_per_sm;
  return status;
}

volt8_status derive_occupancy_record(volt8_ctx *ctx, const derive_occupancy_set *set, const char *path,
                                     const char *op_name) {
  cJSON *figures = cJSON_CreateObject();
  for (int32_t i = 0; figures && i < set->view.count; i++) {
    volt8_op op;
    if (volt8_variant_name_op(set->names[i], &op) && strcmp(volt8_tuning_op_name(op), op_name) == 0)
      cJSON_AddNumberToObject(figures, set->names[i], set->ctas_per_sm[i]);
  }
  volt8_status status = tuning_table_set_metadata(ctx, path, op_name, DERIVE_OCCUPANCY_FROM_KEY, cJSON_CreateString(set->from));
  if (status == VOLT8_OK) status = tuning_table_set_metadata(ctx, path, op_name, DERIVE_OCCUPANCY_KEY, figures);
  else cJSON_Delete(figures);
  return status;
}
