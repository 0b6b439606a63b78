/* derive_explain.h: the model's terms for the dispatch's choices. */
#include "derive_explain.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"

static int32_t occupancy_of(const derive_occupancy *occupancy, const char *name) {
  for (int32_t i = 0; occupancy && i < occupancy->count; i++)
    if (strcmp(occupancy->names[i], name) == 0) return occupancy->ctas_per_sm[i];
  return 0;
}

static int op_terms(const derive_device *device, const volt8_moe_shape *shape, int32_t top_k, int32_t m,
                    const char *name, const derive_occupancy *occupancy, derive_variant *variant, derive_terms *out) {
  if (!derive_parse_variant(name, variant)) return 0;
  /* one that spills is the model's unknown: its warps alone then (the derivation never picks it) */
  int32_t ctas = occupancy_of(occupancy, name);
  variant->ctas_per_sm = ctas > 0 ? ctas : 0;
  return derive_op_terms(device, shape, top_k, m, variant, out);
}

int derive_forward_explain(const derive_device *device, const volt8_moe_shape *shape, int32_t top_k, int32_t num_tokens,
                           const char *gate_up, const char *down, const derive_occupancy *occupancy,
                           derive_forward *out) {
  memset(out, 0, sizeof *out);
  derive_variant first, second;
  if (!op_terms(device, shape, top_k, num_tokens, gate_up, occupancy, &first, &out->gate_up) ||
      !op_terms(device, shape, top_k, num_tokens, down, occupancy, &second, &out->down))
    return 0;
  if (first.block_m > 1 || second.block_m > 1) out->route_us = derive_route_us(device, top_k, num_tokens);
  if (!second.fused_reduce) out->reduce_us = derive_reduce_us(device, shape, top_k, num_tokens);
  out->kernels = 2 + (out->route_us > 0) + (out->reduce_us > 0);
  out->total_us = out->gate_up.total_us + out->down.total_us + out->route_us + out->reduce_us;
  out->floor_us = derive_forward_bytes(shape, top_k, num_tokens) / (device->dram_gbps * 1e3);
  return 1;
}

/* "DRAM", or "latency (fill 45%)". */
static void limit_text(const derive_terms *terms, char *buf, size_t size) {
  const char *limit = derive_terms_limit(terms);
  if (strcmp(limit, "latency") == 0) snprintf(buf, size, "latency (fill %.0f%%)", 100.0 * terms->fill);
  else snprintf(buf, size, "%s", limit);
}

/* The dispatch's pair at M and its account; after derive_check_domain of every M. */
static volt8_status explain_one(volt8_ctx *ctx, const derive_device *device, const volt8_moe_shape *shape, int32_t top_k,
                                int32_t m, const derive_occupancy *occupancy, volt8_forward_info *choice,
                                derive_forward *forward) {
  *choice = (volt8_forward_info)VOLT8_FORWARD_INFO_INIT;
  volt8_status status = volt8_forward_describe(ctx, shape, NULL, m, top_k, choice);
  if (status != VOLT8_OK) return status;
  if (!derive_forward_explain(device, shape, top_k, m, choice->gate_up, choice->down, occupancy, forward))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "the model cannot read %s or %s", choice->gate_up, choice->down);
  return VOLT8_OK;
}

static volt8_status check_every_m(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t top_k, const int32_t *m_values,
                                  int32_t m_count) {
  for (int32_t i = 0; i < m_count; i++) {
    volt8_status status = derive_check_domain(ctx, shape, top_k, m_values[i]);
    if (status != VOLT8_OK) return status;
  }
  return VOLT8_OK;
}

volt8_status derive_explain_markdown(volt8_ctx *ctx, const derive_device *device, const volt8_moe_shape *shape,
                                     int32_t top_k, const int32_t *m_values, int32_t m_count,
                                     const derive_occupancy *occupancy, FILE *out) {
  volt8_status status = check_every_m(ctx, shape, top_k, m_values, m_count);
  if (status != VOLT8_OK) return status;
  fprintf(out, "| M | gate_up | us | limited by | down | us | limited by | route + reduce (us) | forward (us) | "
               "of it launches (us) | byte floor (us) | floor / forward |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int32_t i = 0; i < m_count; i++) {
    volt8_forward_info choice;
    derive_forward forward;
    status = explain_one(ctx, device, shape, top_k, m_values[i], occupancy, &choice, &forward);
    if (status != VOLT8_OK) return status;
    char gate_up_limit[48], down_limit[48];
    limit_text(&forward.gate_up, gate_up_limit, sizeof gate_up_limit);
    limit_text(&forward.down, down_limit, sizeof down_limit);
    fprintf(out, "| %d | `%s` | %.1f | %s | `%s` | %.1f | %s | %.1f | %.1f | %.1f (%d) | %.1f | %.0f%% |\n", m_values[i],
            choice.gate_up, forward.gate_up.total_us, gate_up_limit, choice.down, forward.down.total_us, down_limit,
            forward.route_us + forward.reduce_us, forward.total_us, forward.kernels * device->launch_us, forward.kernels,
            forward.floor_us, 100.0 * forward.floor_us / forward.total_us);
  }
  return VOLT8_OK;
}

static void print_kernel_json(FILE *out, const char *key, const char *variant, const derive_terms *terms) {
  /* variant names are [a-z0-9_.] and limits plain words: no JSON escapes needed */
  fprintf(out,
          "\"%s\":{\"variant\":\"%s\",\"us\":%.3f,\"limited_by\":\"%s\",\"launch_us\":%.3f,\"dram_us\":%.3f,"
          "\"l2_us\":%.3f,\"issue_us\":%.3f,\"dequant_us\":%.3f,\"tensor\":%s,\"fill\":%.4f}",
          key, variant, terms->total_us, derive_terms_limit(terms), terms->launch_us, terms->dram_us, terms->l2_us,
          terms->issue_us, terms->dequant_us, terms->tensor ? "true" : "false", terms->fill);
}

volt8_status derive_explain_json(volt8_ctx *ctx, const derive_device *device, const volt8_moe_shape *shape,
                                 int32_t top_k, const int32_t *m_values, int32_t m_count,
                                 const derive_occupancy *occupancy, FILE *out) {
  volt8_status status = check_every_m(ctx, shape, top_k, m_values, m_count);
  if (status != VOLT8_OK) return status;
  derive_forward *forwards = calloc((size_t)m_count + 1, sizeof *forwards);
  volt8_forward_info *choices = calloc((size_t)m_count + 1, sizeof *choices);
  if (!forwards || !choices)
    status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "out of memory for the account of %d token counts", (int)m_count);
  /* every row first, so that an error leaves nothing half written */
  for (int32_t i = 0; status == VOLT8_OK && i < m_count; i++)
    status = explain_one(ctx, device, shape, top_k, m_values[i], occupancy, &choices[i], &forwards[i]);
  if (status == VOLT8_OK) {
    fprintf(out, "{\"device\":\"%s\",\"top_k\":%d,\n \"forwards\":[", device->name, top_k);
    for (int32_t i = 0; i < m_count; i++) {
      const derive_forward *f = &forwards[i];
      fprintf(out, "%s\n  {\"m\":%d,", i ? "," : "", m_values[i]);
      print_kernel_json(out, "gate_up", choices[i].gate_up, &f->gate_up);
      fputc(',', out);
      print_kernel_json(out, "down", choices[i].down, &f->down);
      fprintf(out, ",\"route_us\":%.3f,\"reduce_us\":%.3f,\"kernels\":%d,\"forward_us\":%.3f,\"floor_us\":%.3f}",
              f->route_us, f->reduce_us, f->kernels, f->total_us, f->floor_us);
    }
    fprintf(out, "\n]}\n");
  }
  free(forwards);
  free(choices);
  return status;
}
