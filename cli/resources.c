/* volt8 list --resources: what each variant's CUBIN asks of an SM, and what the SM gives it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tools/tools.h"

int32_t cli_default_jobs(void) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online < 1 ? 1 : online > 16 ? 16 : (int32_t)online;
}

/* The shape's variant names (malloc'ed array of strings), or NULL after an error on ctx. */
static char **variant_names(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t *out_count, volt8_status *out_status) {
  int32_t count = 0;
  *out_status = volt8_variant_count(ctx, shape, &count);
  char **names = *out_status == VOLT8_OK ? calloc((size_t)count + 1, sizeof *names) : NULL;
  for (int32_t i = 0; names && i < count && *out_status == VOLT8_OK; i++) {
    names[i] = malloc(VOLT8_VARIANT_NAME_BYTES);
    *out_status = names[i] ? volt8_variant_name(ctx, shape, i, names[i], VOLT8_VARIANT_NAME_BYTES) : VOLT8_ERR_OUT_OF_MEMORY;
  }
  if (*out_status == VOLT8_OK && !names) *out_status = VOLT8_ERR_OUT_OF_MEMORY;
  *out_count = count;
  return names;
}

static void print_table(const volt8_sm_limits *limits, const volt8_moe_shape *shape, char *const *names,
                        const volt8_variant_resources *reports, int32_t count) {
  char shape_text[256];
  volt8_tools_format_shape(shape, shape_text, sizeof shape_text);
  printf("sm_%d CUBINs (NVRTC %s) of %s\n", limits->arch, count ? reports[0].nvrtc_version : "?", shape_text);
  printf("one SM: %d registers, %d KiB shared memory, %d warps, %d CTAs (%d SMs)\n", limits->registers_per_sm,
         limits->smem_per_sm_bytes / 1024, limits->max_warps_per_sm, limits->max_ctas_per_sm, limits->sm_count);
  printf("%-36s %4s %11s %6s %6s %7s %7s %8s  %s\n", "variant", "regs", "spill st/ld", "smem", "dsmem", "threads",
         "CTAs/SM", "warps/SM", "limited by");
  for (int32_t i = 0; i < count; i++) {
    const volt8_variant_resources *r = &reports[i];
    char spills[32];
    snprintf(spills, sizeof spills, "%d/%d", r->kernel.spill_store_bytes, r->kernel.spill_load_bytes);
    printf("%-36s %4d %11s %6d %6d %7d %7d %8d  %s\n", names[i], r->kernel.registers, spills,
           r->kernel.static_smem_bytes, r->dynamic_smem_bytes, r->threads, r->occupancy.ctas_per_sm,
           r->occupancy.warps_per_sm, volt8_occupancy_limit_name(r->occupancy.limit));
  }
}

static void print_json(const volt8_sm_limits *limits, const volt8_moe_shape *shape, char *const *names,
                       const volt8_variant_resources *reports, int32_t count) {
  printf("{\"arch\":\"sm_%d\",\"nvrtc_version\":\"%s\",\n", limits->arch, count ? reports[0].nvrtc_version : "");
  /* every key of the shape, the expert range too (expert_start 0 and global_experts 0: all experts) */
  printf(" \"shape\":{\"hidden\":%d,\"intermediate\":%d,\"num_experts\":%d,\"block_n\":%d,\"block_k\":%d,"
         "\"intermediate_offset\":%d,\"expert_start\":%d,\"global_experts\":%d},\n",
         shape->hidden, shape->intermediate, shape->num_experts, shape->block_n, shape->block_k,
         shape->intermediate_offset, shape->expert_start, shape->global_experts);
  printf(" \"sm\":{\"registers\":%d,\"smem_bytes\":%d,\"max_warps\":%d,\"max_ctas\":%d,\"sm_count\":%d},\n",
         limits->registers_per_sm, limits->smem_per_sm_bytes, limits->max_warps_per_sm, limits->max_ctas_per_sm,
         limits->sm_count);
  printf(" \"variants\":[");
  for (int32_t i = 0; i < count; i++) {
    const volt8_variant_resources *r = &reports[i];
    /* variant names are [a-z0-9_.] (moe/kernels/catalogue.c): no JSON escapes needed */
    printf("%s\n  {\"variant\":\"%s\",\"registers\":%d,\"spill_store_bytes\":%d,\"spill_load_bytes\":%d,"
           "\"stack_frame_bytes\":%d,\"static_smem_bytes\":%d,\"dynamic_smem_bytes\":%d,\"threads\":%d,"
           "\"ctas_per_sm\":%d,\"warps_per_sm\":%d,\"limited_by\":\"%s\"}",
           i ? "," : "", names[i], r->kernel.registers, r->kernel.spill_store_bytes, r->kernel.spill_load_bytes,
           r->kernel.stack_frame_bytes, r->kernel.static_smem_bytes, r->dynamic_smem_bytes, r->threads,
           r->occupancy.ctas_per_sm, r->occupancy.warps_per_sm, volt8_occupancy_limit_name(r->occupancy.limit));
  }
  printf("\n]}\n");
}

int cli_print_resources(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t jobs, int json) {
  volt8_sm_limits limits;
  volt8_status status = volt8_sm_limits_for_arch(ctx, volt8_tools_ctx(ctx).target_arch, &limits);
  int32_t count = 0;
  char **names = status == VOLT8_OK ? variant_names(ctx, shape, &count, &status) : NULL;
  volt8_variant_resources *reports = status == VOLT8_OK ? calloc((size_t)count + 1, sizeof *reports) : NULL;
  volt8_variant_ref *variants = status == VOLT8_OK ? calloc((size_t)count + 1, sizeof *variants) : NULL;
  if (status == VOLT8_OK && (!reports || !variants))
    status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the reports of %d variants", (int)count);
  for (int32_t i = 0; status == VOLT8_OK && i < count; i++) variants[i] = (volt8_variant_ref){shape, names[i]};
  if (status == VOLT8_OK) status = volt8_variant_resources_many(ctx, variants, count, jobs, reports);
  if (status == VOLT8_OK && json) print_json(&limits, shape, names, reports, count);
  else if (status == VOLT8_OK) print_table(&limits, shape, names, reports, count);
  int rc = status == VOLT8_OK ? 0 : cli_report(ctx, "list", status);
  for (int32_t i = 0; names && i < count; i++) free(names[i]);
  free(names);
  free(variants);
  free(reports);
  return rc;
}
