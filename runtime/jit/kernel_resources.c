/* ptxas' report of a kernel's CUBIN, and the occupancy arithmetic of the CUDA occupancy calculator. */
#include "jit/kernel_resources.h"

#include "core/ctx_internal.h"
#include "jit/jit.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* V100-SXM2, A100-SXM4, H100/H200-SXM5. */
static const volt8_sm_limits known_limits[] = {
    {70, 80, 65536, 255, 256, 4, 96 * 1024, 256, 0, 64, 32},
    {80, 108, 65536, 255, 256, 4, 164 * 1024, 128, 1024, 64, 32},
    {90, 132, 65536, 255, 256, 4, 228 * 1024, 128, 1024, 64, 32},
};

volt8_status volt8_sm_limits_for_arch(volt8_ctx *ctx, int32_t arch, volt8_sm_limits *out) {
  for (size_t i = 0; i < sizeof known_limits / sizeof known_limits[0]; i++) {
    if (known_limits[i].arch == arch) {
      *out = known_limits[i];
      return VOLT8_OK;
    }
  }
  return volt8_fail(ctx, VOLT8_ERR_ARCH_UNSUPPORTED, "no SM limits are known for sm_%d (known: sm_70, sm_80, sm_90)",
                    (int)arch);
}

static int32_t round_up(int32_t value, int32_t unit) { return (value + unit - 1) / unit * unit; }

volt8_status volt8_occupancy_compute(volt8_ctx *ctx, const volt8_sm_limits *limits, int32_t registers,
                                     int32_t smem_bytes, int32_t threads, volt8_occupancy *out) {
  if (threads < 1 || threads > 1024)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "occupancy: %d threads per CTA is outside 1..1024", (int)threads);
  if (registers < 1 || registers > limits->max_registers_per_thread)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "occupancy: %d registers per thread is outside 1..%d",
                      (int)registers, (int)limits->max_registers_per_thread);
  if (smem_bytes < 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "occupancy: %d bytes of shared memory is negative", (int)smem_bytes);
  memset(out, 0, sizeof *out);
  int32_t warps_per_cta = (threads + 31) / 32;
  out->ctas_by_warps = limits->max_warps_per_sm / warps_per_cta;
  /* A warp's registers come from one sub-partition, so each holds a whole number of warps. */
  int32_t registers_per_warp = round_up(registers * 32, limits->register_unit);
  int32_t warps_by_registers = limits->registers_per_sm / limits->sub_partitions / registers_per_warp * limits->sub_partitions;
  out->ctas_by_registers = warps_by_registers / warps_per_cta;
  int32_t smem_per_cta = round_up(smem_bytes + limits->smem_reserved_per_cta_bytes, limits->smem_unit_bytes);
  out->ctas_by_smem = smem_per_cta == 0 ? limits->max_ctas_per_sm : limits->smem_per_sm_bytes / smem_per_cta;
  const int32_t by_limit[] = {out->ctas_by_warps, limits->max_ctas_per_sm, out->ctas_by_registers, out->ctas_by_smem};
  out->limit = VOLT8_LIMIT_WARPS;
  for (int32_t i = 1; i < (int32_t)(sizeof by_limit / sizeof by_limit[0]); i++)
    if (by_limit[i] < by_limit[out->limit]) out->limit = i;
  out->ctas_per_sm = by_limit[out->limit];
  out->warps_per_sm = out->ctas_per_sm * warps_per_cta;
  return VOLT8_OK;
}

const char *volt8_occupancy_limit_name(int32_t limit) {
  static const char *const names[] = {"warps", "CTA slots", "registers", "shared memory"};
  return limit >= 0 && limit < (int32_t)(sizeof names / sizeof names[0]) ? names[limit] : "unknown";
}

/* The number before `unit` on `line` (e.g. "bytes spill stores"), or -1 when the line has none. */
static int32_t number_before(const char *line, size_t line_length, const char *unit) {
  size_t unit_length = strlen(unit);
  for (const char *at = line; at + unit_length <= line + line_length; at++) {
    if (memcmp(at, unit, unit_length) != 0) continue;
    const char *digits = at;
    while (digits > line && digits[-1] == ' ') digits--;
    const char *end = digits;
    while (digits > line && digits[-1] >= '0' && digits[-1] <= '9') digits--;
    if (digits == end) return -1;
    long value = strtol(digits, NULL, 10);
    return value > 0x7FFFFFFF ? -1 : (int32_t)value;
  }
  return -1;
}

static int32_t number_or_zero(const char *line, size_t line_length, const char *unit) {
  int32_t value = number_before(line, line_length, unit);
  return value < 0 ? 0 : value;
}

/* The line after `from` (NULL at the end of the log) and the length of `from`'s. */
static const char *next_line(const char *from, size_t *out_length) {
  const char *end = strchr(from, '\n');
  *out_length = end ? (size_t)(end - from) : strlen(from);
  return end ? end + 1 : NULL;
}

volt8_status volt8_ptxas_log_parse(volt8_ctx *ctx, const char *log, const char *entry, volt8_kernel_resources *out) {
  if (!log || !entry || !out)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_ptxas_log_parse: NULL log, entry or output");
  memset(out, 0, sizeof *out);
  char header[512];
  snprintf(header, sizeof header, "Function properties for %s", entry);
  size_t header_length = strlen(header), length = 0;
  const char *line = log;
  while (line) {
    const char *next = next_line(line, &length);
    const char *found = strstr(line, header);
    /* the name must end there: "for k" is not "for k2" */
    if (found && found + header_length == line + length) {
      line = next;
      break;
    }
    line = next;
  }
  int have_spills = 0, have_registers = 0;
  while (line && !have_registers) {
    const char *next = next_line(line, &length);
    if (number_before(line, length, "bytes spill stores") >= 0) {
      out->stack_frame_bytes = number_or_zero(line, length, "bytes stack frame");
      out->spill_store_bytes = number_or_zero(line, length, "bytes spill stores");
      out->spill_load_bytes = number_or_zero(line, length, "bytes spill loads");
      have_spills = 1;
    } else if (number_before(line, length, "registers") >= 0 && memmem(line, length, "Used ", 5)) {
      out->registers = number_before(line, length, "registers");
      out->barriers = number_or_zero(line, length, "barriers");
      out->static_smem_bytes = number_or_zero(line, length, "bytes smem");
      have_registers = 1;
    } else if (memmem(line, length, "Function properties for ", 24)) {
      break; /* the next function's report: this one had no "Used" line */
    }
    line = next;
  }
  if (!have_spills || !have_registers)
    return volt8_fail(ctx, VOLT8_ERR_FORMAT, "the ptxas report has no %s line for kernel %s",
                      !have_spills ? "stack frame and spill" : "\"Used N registers\"", entry);
  return VOLT8_OK;
}
