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

/* The CTAs per SM of `count` variants of `shape` into ctas (-1: spills or does not fit). */
static volt8_status compile_shape(volt8_ctx *ctx, const volt8_moe_shape *shape, char *const *names, int32_t count,
                                  int32_t jobs, const volt8_sm_limits *limits, int32_t *ctas, char *version,
                                  size_t version_size) {
  volt8_variant_resources *reports = calloc((size_t)count + 1, sizeof *reports);
  volt8_variant_ref *variants = calloc((size_t)count + 1, sizeof *variants);
  volt8_status status = reports && variants ? VOLT8_OK
                                            : volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY,
                                                         "out of memory for the occupancy of %d variants", (int)count);
  for (int32_t i = 0; status == VOLT8_OK && i < count; i++) variants[i] = (volt8_variant_ref){shape, names[i]};
  if (status == VOLT8_OK) status = volt8_variant_resources_many(ctx, variants, count, jobs > 64 ? 64 : jobs, reports);
  /* a variant that spills or does not fit is one the tables must not choose */
  for (int32_t i = 0; status == VOLT8_OK && i < count; i++) {
    const volt8_variant_resources *report = &reports[i];
    int spills = report->kernel.spill_store_bytes > 0 || report->kernel.spill_load_bytes > 0;
    int32_t fit = limits ? ctas_under(ctx, limits, report) : report->occupancy.ctas_per_sm;
    ctas[i] = spills || fit == 0 ? -1 : fit;
  }
  if (status == VOLT8_OK) snprintf(version, version_size, "%s", count ? reports[0].nvrtc_version : "?");
  free(reports);
  free(variants);
  return status;
}

/* A table serves every rank of its TP size, and rank 0's slice starts at offset 0 of the scale grid:
 * a variant there with fewer CTAs, or one that spills, counts so for the table too (the kernels of
 * the two offsets differ where a rank's K starts inside a 32-code step or a scale block). */
static volt8_status merge_offset_zero(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t jobs,
                                      const volt8_sm_limits *limits, derive_occupancy_set *out) {
  volt8_moe_shape zero = *shape;
  zero.intermediate_offset = 0;
  char **zero_names = NULL;
  int32_t zero_count = 0;
  volt8_status status = volt8_codegen_list(ctx, &zero, &zero_names, &zero_count);
  if (status != VOLT8_OK) return status;
  char **shared = calloc((size_t)out->view.count + 1, sizeof *shared);
  int32_t *index = calloc((size_t)out->view.count + 1, sizeof *index), *ctas = calloc((size_t)out->view.count + 1, sizeof *ctas);
  int32_t count = 0;
  if (!shared || !index || !ctas)
    status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the occupancy of %d variants", (int)out->view.count);
  for (int32_t i = 0; status == VOLT8_OK && i < out->view.count; i++)
    for (int32_t j = 0; j < zero_count; j++)
      if (strcmp(out->names[i], zero_names[j]) == 0) {
        shared[count] = out->names[i], index[count++] = i;
        break;
      }
  char version[64];
  if (status == VOLT8_OK) status = compile_shape(ctx, &zero, shared, count, jobs, limits, ctas, version, sizeof version);
  for (int32_t k = 0; status == VOLT8_OK && k < count; k++) {
    int32_t *kept = &out->ctas_per_sm[index[k]];
    if (ctas[k] < 0 || (*kept >= 0 && ctas[k] < *kept)) *kept = ctas[k];
  }
  free(shared);
  free(index);
  free(ctas);
  volt8_codegen_names_free(zero_names, zero_count);
  return status;
}

volt8_status derive_occupancy_compile(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t jobs,
                                      const volt8_sm_limits *limits, derive_occupancy_set *out) {
  memset(out, 0, sizeof *out);
  int32_t count = 0;
  volt8_status status = volt8_codegen_list(ctx, shape, &out->names, &count);
  if (status != VOLT8_OK) return status;
  out->view.count = count;
  out->ctas_per_sm = calloc((size_t)count + 1, sizeof *out->ctas_per_sm);
  char version[64] = "?";
  status = out->ctas_per_sm ? compile_shape(ctx, shape, out->names, count, jobs, limits, out->ctas_per_sm, version,
                                            sizeof version)
                            : volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the occupancy of %d variants",
                                         (int)count);
  if (status == VOLT8_OK && shape->intermediate_offset != 0) status = merge_offset_zero(ctx, shape, jobs, limits, out);
  if (status == VOLT8_OK) {
    char under[32] = "";
    if (limits) snprintf(under, sizeof under, ", sm_%d limits", (int)limits->arch);
    snprintf(out->from, sizeof out->from, "sm_%d CUBINs of NVRTC %s (ptxas -v)%s%s", volt8_tools_ctx(ctx).target_arch,
             version, under, shape->intermediate_offset ? ", the fewer of offsets 0 and the table's" : "");
    snprintf(out->nvrtc_version, sizeof out->nvrtc_version, "%s (CUBINs for occupancy only)", version);
  }
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
