/* The bench report as printed tables, JSON and Markdown (the SVG plot is in bench_plot.c). */
#include "bench_report.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define MIB (1024.0 * 1024.0)

const char *bench_method_key(bench_method method) {
  static const char *const keys[BENCH_METHOD_COUNT] = {"volt8", "cublaslt_fp16", "cublas_grouped_fp16",
                                                        "sorted_padded_fp16"};
  return method >= 0 && method < BENCH_METHOD_COUNT ? keys[method] : "unknown";
}

const char *bench_method_label(bench_method method) {
  static const char *const labels[BENCH_METHOD_COUNT] = {"volt8 FP8", "cuBLASLt FP16 (A)", "cuBLAS grouped FP16 (B)",
                                                          "sorted+padded cuBLASLt FP16 (C)"};
  return method >= 0 && method < BENCH_METHOD_COUNT ? labels[method] : "unknown";
}

void bench_report_derive(bench_report *report) {
  for (int32_t i = 0; i < report->count; i++) {
    bench_m_result *result = &report->results[i];
    result->floor_us = report->copy_gbps > 0 ? result->bytes_fp8 / (report->copy_gbps * 1e3) : 0.0;
    double volt8_us = result->methods[BENCH_METHOD_VOLT8].ran ? result->methods[BENCH_METHOD_VOLT8].timing.median_us : 0;
    for (int method = 0; method <= BENCH_METHOD_COUNT; method++) { /* BENCH_METHOD_COUNT: the chained volt8 */
      bench_method_result *measured = method < BENCH_METHOD_COUNT ? &result->methods[method] : &result->chained;
      if (!measured->ran || measured->timing.median_us <= 0) continue;
      measured->gbps = measured->bytes / (measured->timing.median_us * 1e3);
      measured->copy_fraction = report->copy_gbps > 0 ? measured->gbps / report->copy_gbps : 0.0;
      measured->volt8_speedup = method != BENCH_METHOD_VOLT8 && method < BENCH_METHOD_COUNT && volt8_us > 0
                                    ? measured->timing.median_us / volt8_us : 0;
    }
  }
}

static void format_us(char *buf, size_t size, const bench_method_result *result) {
  if (!result->ran) snprintf(buf, size, "-");
  else snprintf(buf, size, "%.1f%s", result->timing.median_us, result->timing.host_limited ? "*" : "");
}

/* --chain: the time per forward of a graph of report->chain forwards beside one forward per replay. */
static void print_chained(const bench_report *report, FILE *stream) {
  fprintf(stream, "\n%d forwards in one graph, each on its own routing (weights cold), time per forward:\n", report->chain);
  fprintf(stream, "%5s | %12s | %13s %7s %6s %8s\n", "M", "one/replay_us", "in_chain_us", "GB/s", "%copy", "rel_l2");
  for (int32_t i = 0; i < report->count; i++) {
    const bench_m_result *result = &report->results[i];
    char one[32], chained[32];
    format_us(one, sizeof one, &result->methods[BENCH_METHOD_VOLT8]);
    format_us(chained, sizeof chained, &result->chained);
    if (result->chained.ran)
      fprintf(stream, "%5d | %12s | %13s %7.0f %5.1f%% %8.1e\n", result->m, one, chained, result->chained.gbps,
              100.0 * result->chained.copy_fraction, result->chained.relative_l2);
    else
      fprintf(stream, "%5d | %12s | %13s (%s)\n", result->m, one, "-", result->chained.reason);
  }
}

void bench_report_print(const bench_report *report, FILE *stream) {
  const volt8_moe_shape *shape = &report->shape;
  fprintf(stream, "volt8 bench %s on %s (%s, kernels for %s, early launch %s, %d SMs, L2 %.0f MiB)\n",
          report->library_version, report->device_name, report->device_arch, report->target_arch,
          report->early_launch ? "on" : "off", report->sm_count, report->l2_bytes / MIB);
  fprintf(stream, "shape: hidden %d, intermediate %d (offset %d), %d experts, top-%d, block %dx%d; seed %llu\n",
          shape->hidden, shape->intermediate, shape->intermediate_offset, shape->num_experts, report->top_k,
          shape->block_n, shape->block_k, (unsigned long long)report->seed);
  fprintf(stream, "device-to-device copy: %.0f GB/s (read + write); median of %d timed passes after %d warm-up\n",
          report->copy_gbps, report->timed_batches, report->warmup_batches);
  fprintf(stream, "launch floor (graphs of empty kernels, replayed the same way): %.1f us for 2 kernels (no route "
                  "pass, the reduce fused into down), %.1f us for 3 (no route pass), %.1f us for 4 (with one)\n",
          report->launch_floor[0].median_us, report->launch_floor[1].median_us, report->launch_floor[2].median_us);
  fprintf(stream, "cuBLASLt: %s; cuBLAS: %s\n\n", report->cublaslt, report->cublas);
  const volt8_memory_report *memory = &report->memory;
  fprintf(stream, "memory per rank     FP16 %8.1f MiB | padded to 128-row blocks %8.1f MiB | volt8 %8.1f MiB "
                  "(%.1f weights + %.2f scales)\n\n",
          memory->fp16_bytes / MIB, memory->padded_bytes / MIB, memory->resident_bytes / MIB,
          memory->weight_bytes / MIB, memory->scale_bytes / MIB);
  fprintf(stream, "%5s %4s %6s %8s | %9s %7s %6s %8s | %9s %6s %8s | %9s %6s %8s | %9s %6s %8s\n", "M", "sets", "active",
          "floor_us", "volt8_us", "GB/s", "%copy", "rel_l2", "A_us", "A/v8", "rel_l2", "B_us", "B/v8", "rel_l2", "C_us",
          "C/v8", "rel_l2");
  for (int32_t i = 0; i < report->count; i++) {
    const bench_m_result *result = &report->results[i];
    const bench_method_result *volt8 = &result->methods[BENCH_METHOD_VOLT8];
    char times[BENCH_METHOD_COUNT][32];
    for (int method = 0; method < BENCH_METHOD_COUNT; method++)
      format_us(times[method], sizeof times[method], &result->methods[method]);
    fprintf(stream, "%5d %4d %6.1f %8.1f | %9s %7.0f %5.1f%% ", result->m, result->input_sets, result->active_experts,
            result->floor_us, times[0], volt8->gbps, 100.0 * volt8->copy_fraction);
    if (volt8->ran) fprintf(stream, "%8.1e", volt8->relative_l2);
    else fprintf(stream, "%8s", "-");
    for (int method = 1; method < BENCH_METHOD_COUNT; method++) {
      const bench_method_result *baseline = &result->methods[method];
      if (baseline->ran) fprintf(stream, " | %9s %5.2fx %8.1e", times[method], baseline->volt8_speedup, baseline->relative_l2);
      else fprintf(stream, " | %9s %6s %8s", "-", "-", "-");
    }
    fputc('\n', stream);
  }
  fprintf(stream, "\n(A/v8, B/v8, C/v8: the baseline's time over volt8's, so > 1 means volt8 is faster; rel_l2: each "
                  "method's output against the double-precision reference; * the host may have limited the rate)\n");
  if (report->chain > 0) print_chained(report, stream);
  for (int32_t i = 0; i < report->count; i++) {
    const bench_m_result *result = &report->results[i];
    fprintf(stream, "M=%-4d %s%s [%s]  %s [%s]", result->m, result->single_launch ? "one launch for " : "",
            result->gate_up, result->gate_up_origin, result->down, result->down_origin);
    if (result->sorted_capacity > 0) fprintf(stream, "  C: %d rows an expert", result->sorted_capacity);
    fputc('\n', stream);
  }
  for (int method = 1; method < BENCH_METHOD_COUNT; method++) {
    for (int32_t i = 0; i < report->count; i++) {
      if (report->results[i].methods[method].ran) continue;
      fprintf(stream, "%s did not run: %s\n", bench_method_label(method), report->results[i].methods[method].reason);
      break;
    }
  }
  if (report->tuning_warnings[0]) fprintf(stream, "tuning warnings:\n%s", report->tuning_warnings);
}

static cJSON *method_json(const bench_method_result *result, bench_method method) {
  cJSON *object = cJSON_CreateObject();
  cJSON_AddBoolToObject(object, "ran", result->ran);
  if (!result->ran) {
    cJSON_AddStringToObject(object, "reason", result->reason);
    return object;
  }
  cJSON_AddNumberToObject(object, "median_us", result->timing.median_us);
  cJSON_AddNumberToObject(object, "p10_us", result->timing.p10_us);
  cJSON_AddNumberToObject(object, "p90_us", result->timing.p90_us);
  cJSON_AddNumberToObject(object, "min_us", result->timing.min_us);
  cJSON_AddNumberToObject(object, "samples", result->timing.samples);
  cJSON_AddBoolToObject(object, "host_limited", result->timing.host_limited);
  cJSON_AddNumberToObject(object, "bytes", result->bytes);
  cJSON_AddNumberToObject(object, "gbps", result->gbps);
  cJSON_AddNumberToObject(object, "copy_fraction", result->copy_fraction);
  if (isfinite(result->relative_l2)) cJSON_AddNumberToObject(object, "relative_l2", result->relative_l2);
  else cJSON_AddNullToObject(object, "relative_l2");
  if (method != BENCH_METHOD_VOLT8) cJSON_AddNumberToObject(object, "volt8_speedup", result->volt8_speedup);
  return object;
}

static cJSON *shape_json(const bench_report *report) {
  cJSON *shape = cJSON_CreateObject();
  cJSON_AddNumberToObject(shape, "hidden", report->shape.hidden);
  cJSON_AddNumberToObject(shape, "intermediate", report->shape.intermediate);
  cJSON_AddNumberToObject(shape, "num_experts", report->shape.num_experts);
  cJSON_AddNumberToObject(shape, "block_n", report->shape.block_n);
  cJSON_AddNumberToObject(shape, "block_k", report->shape.block_k);
  cJSON_AddNumberToObject(shape, "intermediate_offset", report->shape.intermediate_offset);
  cJSON_AddNumberToObject(shape, "top_k", report->top_k);
  return shape;
}

static cJSON *memory_json(const volt8_memory_report *memory) {
  cJSON *object = cJSON_CreateObject();
  cJSON_AddNumberToObject(object, "fp16_bytes", (double)memory->fp16_bytes);
  cJSON_AddNumberToObject(object, "padded_bytes", (double)memory->padded_bytes);
  cJSON_AddNumberToObject(object, "volt8_resident_bytes", (double)memory->resident_bytes);
  cJSON_AddNumberToObject(object, "volt8_weight_bytes", (double)memory->weight_bytes);
  cJSON_AddNumberToObject(object, "volt8_scale_bytes", (double)memory->scale_bytes);
  return object;
}

static cJSON *result_json(const bench_m_result *result, int32_t chain) {
  cJSON *object = cJSON_CreateObject();
  cJSON_AddNumberToObject(object, "m", result->m);
  cJSON_AddNumberToObject(object, "input_sets", result->input_sets);
  cJSON_AddNumberToObject(object, "active_experts", result->active_experts);
  cJSON_AddNumberToObject(object, "floor_bytes", result->bytes_fp8);
  cJSON_AddNumberToObject(object, "floor_us", result->floor_us);
  cJSON *variants = cJSON_AddObjectToObject(object, "variants");
  cJSON_AddStringToObject(variants, "gate_up", result->gate_up);
  cJSON_AddStringToObject(variants, "gate_up_origin", result->gate_up_origin);
  cJSON_AddStringToObject(variants, "down", result->down);
  cJSON_AddStringToObject(variants, "down_origin", result->down_origin);
  cJSON_AddBoolToObject(variants, "single_launch", result->single_launch);
  for (int method = 0; method < BENCH_METHOD_COUNT; method++) {
    cJSON *method_object = method_json(&result->methods[method], method);
    if (method == BENCH_METHOD_SORTED_FP16 && result->methods[method].ran)
      cJSON_AddNumberToObject(method_object, "capacity_rows", result->sorted_capacity);
    cJSON_AddItemToObject(object, bench_method_key(method), method_object);
  }
  if (chain > 0) cJSON_AddItemToObject(object, "volt8_chained", method_json(&result->chained, BENCH_METHOD_VOLT8));
  return object;
}

char *bench_report_json(const bench_report *report) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "schema", BENCH_JSON_SCHEMA);
  cJSON_AddStringToObject(root, "library_version", report->library_version);
  cJSON_AddStringToObject(root, "command", report->command);
  cJSON_AddStringToObject(root, "date", report->date);
  cJSON *device = cJSON_AddObjectToObject(root, "device");
  cJSON_AddStringToObject(device, "name", report->device_name);
  cJSON_AddStringToObject(device, "arch", report->device_arch);
  cJSON_AddStringToObject(device, "target_arch", report->target_arch);
  cJSON_AddBoolToObject(device, "early_launch", report->early_launch);
  cJSON_AddNumberToObject(device, "sm_count", report->sm_count);
  cJSON_AddNumberToObject(device, "l2_bytes", (double)report->l2_bytes);
  cJSON_AddNumberToObject(device, "copy_gbps", report->copy_gbps);
  cJSON *floor = cJSON_AddObjectToObject(root, "launch_floor_us");
  cJSON_AddNumberToObject(floor, "two_kernels", report->launch_floor[0].median_us);
  cJSON_AddNumberToObject(floor, "three_kernels", report->launch_floor[1].median_us);
  cJSON_AddNumberToObject(floor, "four_kernels", report->launch_floor[2].median_us);
  cJSON_AddItemToObject(root, "shape", shape_json(report));
  cJSON_AddItemToObject(root, "memory", memory_json(&report->memory));
  cJSON *settings = cJSON_AddObjectToObject(root, "settings");
  cJSON_AddNumberToObject(settings, "seed", (double)report->seed);
  cJSON_AddNumberToObject(settings, "warmup_batches", report->warmup_batches);
  cJSON_AddNumberToObject(settings, "timed_batches", report->timed_batches);
  cJSON_AddNumberToObject(settings, "chain", report->chain); /* 0: no chained timing */
  cJSON *libraries = cJSON_AddObjectToObject(root, "libraries");
  cJSON_AddStringToObject(libraries, "cublaslt", report->cublaslt);
  cJSON_AddStringToObject(libraries, "cublas", report->cublas);
  cJSON_AddStringToObject(root, "tuning_warnings", report->tuning_warnings);
  cJSON *results = cJSON_AddArrayToObject(root, "results");
  for (int32_t i = 0; i < report->count; i++) cJSON_AddItemToArray(results, result_json(&report->results[i], report->chain));
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  return text;
}

char *bench_report_markdown(const bench_report *report) {
  volt8_text_buffer out = {0};
  volt8_text_printf(&out, "Device: %s (%s; volt8 kernels for %s, early launch %s), copy bandwidth %.0f GB/s. Command: `%s`, %s.\n\n",
              report->device_name, report->device_arch, report->target_arch, report->early_launch ? "on" : "off",
              report->copy_gbps, report->command, report->date);
  volt8_text_printf(&out, "| M | byte floor (us) | volt8 (us) | GB/s | %% of copy | A: cuBLASLt FP16 (us) | A / volt8 | "
                    "B: grouped FP16 (us) | B / volt8 | C: sorted+padded FP16 (us) | C / volt8 | "
                    "rel. L2 volt8 / A / B / C |");
  if (report->chain > 0) volt8_text_printf(&out, " volt8, a forward of %d in one graph (us) |", report->chain);
  volt8_text_printf(&out, "\n|---|---|---|---|---|---|---|---|---|---|---|---|%s\n", report->chain > 0 ? "---|" : "");
  for (int32_t i = 0; i < report->count; i++) {
    const bench_m_result *result = &report->results[i];
    const bench_method_result *volt8 = &result->methods[BENCH_METHOD_VOLT8];
    const bench_method_result *a = &result->methods[BENCH_METHOD_CUBLASLT_FP16];
    const bench_method_result *baselines[3] = {a, &result->methods[BENCH_METHOD_GROUPED_FP16],
                                               &result->methods[BENCH_METHOD_SORTED_FP16]};
    if (volt8->ran)
      volt8_text_printf(&out, "| %d | %.1f | %.1f | %.0f | %.1f%% | ", result->m, result->floor_us, volt8->timing.median_us,
                        volt8->gbps, 100.0 * volt8->copy_fraction);
    else
      volt8_text_printf(&out, "| %d | %.1f | - | - | - | ", result->m, result->floor_us);
    for (int i = 0; i < 3; i++) {
      if (baselines[i]->ran) volt8_text_printf(&out, "%.1f | %.2fx | ", baselines[i]->timing.median_us, baselines[i]->volt8_speedup);
      else volt8_text_printf(&out, "- | - | ");
    }
    /* every method's error against the double reference, "-" where it did not run */
    const bench_method_result *all[4] = {volt8, a, baselines[1], baselines[2]};
    for (int i = 0; i < 4; i++) {
      if (all[i]->ran) volt8_text_printf(&out, "%s%.1e", i ? " / " : "", all[i]->relative_l2);
      else volt8_text_printf(&out, "%s-", i ? " / " : "");
    }
    volt8_text_printf(&out, " |");
    if (report->chain > 0 && result->chained.ran) volt8_text_printf(&out, " %.1f |", result->chained.timing.median_us);
    else if (report->chain > 0) volt8_text_printf(&out, " - |");
    volt8_text_printf(&out, "\n");
  }
  const volt8_memory_report *memory = &report->memory;
  volt8_text_printf(&out, "\nMemory per rank: FP16 %.1f MiB, padded to 128-row blocks %.1f MiB, volt8 %.1f MiB.\n",
              memory->fp16_bytes / MIB, memory->padded_bytes / MIB, memory->resident_bytes / MIB);
  volt8_text_printf(&out, "\nLaunch floor (graphs of empty kernels, replayed the same way): %.1f us for 2 kernels (no route "
                    "pass, the reduce fused into down), %.1f us for 3 (no route pass), %.1f us for 4 (with one).\n",
              report->launch_floor[0].median_us, report->launch_floor[1].median_us, report->launch_floor[2].median_us);
  return volt8_text_take(&out);
}


