/* The benchmark loop: one problem (experts and FP16 copies made once), then per M fresh input
 * sets, volt8's graphs, the baselines' graphs, each checked against the reference and timed. */
#include "bench_run.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baseline_fp16.h"
#include "bench_gpu.h"
#include "bench_graphs.h"
#include "bench_problem.h"
#include "cublas_loader.h"
#include "tools/tools.h"

#define L2_MULTIPLE 4.0
#define MIN_SETS 4
#define MAX_SETS 64
#define LAUNCH_FLOOR_SETS 16 /* graph replays per timed pass of a launch floor */

typedef struct bench_state {
  volt8_ctx *ctx;
  const bench_options *options;
  FILE *progress;
  bench_gpu gpu;
  bench_experts_host host;
  volt8_experts *experts;
  bench_cublas cublas;
  int cublas_open;
  bench_fp16_weights fp16;
  char fp16_unavailable[512];
} bench_state;

static void note(bench_state *state, const char *fmt, const char *detail) {
  if (!state->progress) return;
  fprintf(state->progress, fmt, detail);
  fflush(state->progress);
}

static void utc_now(char *buf, size_t size) {
  time_t now = time(NULL);
  struct tm parts;
  gmtime_r(&now, &parts);
  strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &parts);
}

static void fill_header(bench_state *state, const char *command, bench_report *report) {
  volt8_ctx *ctx = state->ctx;
  const bench_options *options = state->options;
  snprintf(report->command, sizeof report->command, "%s", command ? command : "volt8 bench");
  utc_now(report->date, sizeof report->date);
  snprintf(report->library_version, sizeof report->library_version, "%s", volt8_version_string());
  snprintf(report->device_name, sizeof report->device_name, "%s", volt8_tools_ctx(ctx).device_name);
  snprintf(report->device_arch, sizeof report->device_arch, "sm_%d", volt8_tools_ctx(ctx).device_arch);
  snprintf(report->target_arch, sizeof report->target_arch, "sm_%d", volt8_tools_ctx(ctx).target_arch);
  report->early_launch = volt8_ctx_early_launch(ctx);
  report->sm_count = state->gpu.sm_count;
  report->l2_bytes = state->gpu.l2_bytes;
  report->shape = options->shape;
  report->top_k = options->top_k;
  report->chain = options->chain;
  report->seed = options->seed;
  report->warmup_batches = options->warmup_batches;
  report->timed_batches = options->timed_batches;
}

/* The memory table from the library; computed here only if this build cannot say. */
static void fill_memory(bench_state *state, bench_report *report) {
  volt8_memory_report memory = VOLT8_MEMORY_REPORT_INIT;
  if (volt8_experts_memory(state->experts, &memory) == VOLT8_OK) {
    report->memory = memory;
    return;
  }
  const volt8_moe_shape *shape = &state->options->shape;
  int64_t experts = shape->num_experts, hidden = shape->hidden;
  int64_t padded_intermediate = (shape->intermediate + 127) / 128 * 128;
  memory.weight_bytes = (state->host.dims.w13_bytes_per_expert + state->host.dims.w2_bytes_per_expert) * experts;
  memory.scale_bytes = (state->host.dims.s13_elems_per_expert + state->host.dims.s2_elems_per_expert) * 2 * experts;
  memory.resident_bytes = memory.weight_bytes + memory.scale_bytes;
  memory.fp16_bytes = 2 * memory.weight_bytes;
  memory.padded_bytes = experts * (3 * padded_intermediate * hidden +
                                   2 * 3 * (padded_intermediate / 128) * ((hidden + 127) / 128));
  report->memory = memory;
}

static void fill_libraries(bench_state *state, bench_report *report) {
  if (!state->options->baselines) {
    snprintf(report->cublaslt, sizeof report->cublaslt, "not asked for (--no-baselines)");
    snprintf(report->cublas, sizeof report->cublas, "not asked for (--no-baselines)");
    return;
  }
  const bench_cublas *cublas = &state->cublas;
  if (cublas->lt_unavailable[0]) snprintf(report->cublaslt, sizeof report->cublaslt, "%.250s", cublas->lt_unavailable);
  else snprintf(report->cublaslt, sizeof report->cublaslt, "%.200s (version %zu)", cublas->lt_path, cublas->lt_version);
  if (cublas->grouped_unavailable[0]) snprintf(report->cublas, sizeof report->cublas, "%.250s", cublas->grouped_unavailable);
  else snprintf(report->cublas, sizeof report->cublas, "%.200s (version %d)", cublas->blas_path, cublas->blas_version);
}

static volt8_status set_up(bench_state *state, const char *command, bench_report *report) {
  volt8_ctx *ctx = state->ctx;
  const bench_options *options = state->options;
  volt8_status status = bench_gpu_open(ctx, &state->gpu);
  if (status != VOLT8_OK) return status;
  fill_header(state, command, report);
  note(state, "bench: %s: measuring the copy bandwidth\n", report->device_name);
  status = bench_copy_bandwidth(&state->gpu, (size_t)options->copy_mib << 20, 20, &report->copy_gbps);
  bench_timing_plan floor_plan = {LAUNCH_FLOOR_SETS, options->warmup_batches, options->timed_batches, options->spin_ms};
  if (status == VOLT8_OK) status = bench_launch_floor(&state->gpu, 2, 0x2u, &floor_plan, &report->launch_floor[0]);
  if (status == VOLT8_OK) status = bench_launch_floor(&state->gpu, 3, 0x6u, &floor_plan, &report->launch_floor[1]);
  if (status == VOLT8_OK) status = bench_launch_floor(&state->gpu, 4, 0x4u, &floor_plan, &report->launch_floor[2]);
  if (status == VOLT8_OK)
    status = bench_experts_generate(ctx, &options->shape, options->seed, bench_problem_threads(options->threads),
                                    &state->host);
  int32_t max_tokens = options->m_values[options->m_count - 1];
  volt8_host_experts view = bench_experts_view(&state->host);
  if (status == VOLT8_OK)
    status = volt8_experts_create_from_host(ctx, &options->shape, &view, max_tokens, options->top_k, &state->experts);
  if (status == VOLT8_OK && options->gate_up)
    status = volt8_experts_set_variants(state->experts, options->gate_up, options->down);
  if (status != VOLT8_OK) return status;
  fill_memory(state, report);
  if (options->baselines) {
    status = bench_cublas_open(&state->gpu, &state->cublas);
    state->cublas_open = status == VOLT8_OK;
    if (status == VOLT8_OK) {
      note(state, "bench: dequantizing the experts to FP16 for the baselines%s\n", "");
      if (bench_fp16_weights_create(&state->gpu, &state->host, &state->fp16) != VOLT8_OK)
        snprintf(state->fp16_unavailable, sizeof state->fp16_unavailable, "FP16 weights: %s", volt8_last_error(ctx));
    }
  }
  fill_libraries(state, report);
  return status;
}

static void tear_down(bench_state *state) {
  if (state->fp16.w13 || state->fp16.w2) bench_fp16_weights_destroy(&state->gpu, &state->fp16);
  if (state->cublas_open) bench_cublas_close(&state->gpu, &state->cublas);
  volt8_experts_destroy(state->experts);
  bench_experts_free(&state->host);
  bench_gpu_close(&state->gpu);
}

static void record_failure(bench_method_result *result, volt8_ctx *ctx, volt8_status status) {
  result->ran = 0;
  snprintf(result->reason, sizeof result->reason, "%s: %.490s", volt8_status_string(status), volt8_last_error(ctx));
}

/* What the forward at m runs, as the library says (pinned variants, the dispatch, the one launch). */
static void describe_variants(bench_state *state, int32_t m, bench_m_result *result) {
  volt8_forward_info info = VOLT8_FORWARD_INFO_INIT;
  if (volt8_forward_describe(NULL, NULL, state->experts, m, state->options->top_k, &info) != VOLT8_OK) return;
  result->single_launch = info.single_launch;
  snprintf(result->gate_up, sizeof result->gate_up, "%s", info.gate_up);
  snprintf(result->down, sizeof result->down, "%s", info.down);
  snprintf(result->gate_up_origin, sizeof result->gate_up_origin, "%s", info.gate_up_origin);
  snprintf(result->down_origin, sizeof result->down_origin, "%s", info.down_origin);
}

static volt8_status time_volt8(bench_state *state, const bench_inputs *inputs, const bench_timing_plan *plan,
                               bench_method_result *result) {
  volt8_ctx *ctx = state->ctx;
  int32_t m = inputs->num_tokens;
  bench_graph_set graphs = {NULL, 0};
  volt8_status status = volt8_experts_prepare(state->experts, &m, 1);
  if (status == VOLT8_OK) status = bench_graph_set_capture(ctx, state->experts, inputs, state->gpu.stream, &graphs);
  if (status == VOLT8_OK) status = bench_inputs_poison(ctx, inputs, 0);
  if (status == VOLT8_OK) status = bench_graph_set_launch(&graphs, 0, state->gpu.stream);
  if (status == VOLT8_OK) status = bench_gpu_check(&state->gpu, volt8_tools_ctx(ctx).cuda->cuStreamSynchronize(state->gpu.stream), "volt8 forward");
  if (status == VOLT8_OK) status = bench_inputs_check(ctx, inputs, 0, &result->relative_l2);
  if (status == VOLT8_OK) status = bench_time(&state->gpu, bench_graph_set_launch, &graphs, plan, &result->timing);
  bench_graph_set_destroy(&graphs);
  result->ran = status == VOLT8_OK;
  result->bytes = inputs->bytes_fp8;
  return status;
}

/* Every value of set `index`'s FP16 output is finite: the chained forward wrote it (poisoned outputs
 * are NaN), without a reference of its own (only set 0 has one). */
static volt8_status check_written(volt8_ctx *ctx, const bench_inputs *inputs, int32_t index, uint16_t *scratch) {
  size_t values = (size_t)inputs->num_tokens * inputs->hidden;
  volt8_status status = volt8_cuda_check(
      ctx, volt8_tools_ctx(ctx).cuda->cuMemcpyDtoH(scratch, inputs->sets[index].d_out, values * sizeof *scratch),
      "bench --chain: ", "cuMemcpyDtoH");
  if (status != VOLT8_OK) return status;
  size_t first = bench_first_not_finite(scratch, values);
  if (first < values)
    return volt8_fail(ctx, VOLT8_ERR_INTERNAL, "bench --chain: forward %d of the chain left output value %zu not finite",
                      index, first);
  return VOLT8_OK;
}

/* --chain: volt8's time per forward of options->chain forwards captured in one graph, each on its
 * own input set; set 0's output is checked against the reference, the others for being written. */
static volt8_status time_chained(bench_state *state, const bench_inputs *inputs, const bench_timing_plan *plan,
                                 bench_method_result *result) {
  volt8_ctx *ctx = state->ctx;
  int32_t chain = state->options->chain;
  bench_chain_set chains = {ctx, NULL, 0, chain};
  uint16_t *scratch = malloc((size_t)inputs->num_tokens * inputs->hidden * sizeof *scratch);
  volt8_status status = scratch ? VOLT8_OK : volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "bench --chain: out of memory");
  if (status == VOLT8_OK) status = bench_chain_set_capture(ctx, state->experts, inputs, chain, state->gpu.stream, &chains);
  for (int32_t i = 0; i < chain && status == VOLT8_OK; i++) status = bench_inputs_poison(ctx, inputs, i);
  if (status == VOLT8_OK) status = bench_chain_set_launch(&chains, 0, state->gpu.stream);
  if (status == VOLT8_OK)
    status = bench_gpu_check(&state->gpu, volt8_tools_ctx(ctx).cuda->cuStreamSynchronize(state->gpu.stream), "volt8 chained forwards");
  if (status == VOLT8_OK) status = bench_inputs_check(ctx, inputs, 0, &result->relative_l2);
  for (int32_t i = 1; i < chain && status == VOLT8_OK; i++) status = check_written(ctx, inputs, i, scratch);
  bench_timing_plan chained_plan = *plan;
  chained_plan.sets = chains.count;
  if (status == VOLT8_OK) status = bench_time(&state->gpu, bench_chain_set_launch, &chains, &chained_plan, &result->timing);
  if (status == VOLT8_OK) {
    result->timing.median_us /= chain;
    result->timing.p10_us /= chain;
    result->timing.p90_us /= chain;
    result->timing.min_us /= chain;
  }
  bench_chain_set_destroy(&chains);
  free(scratch);
  result->ran = status == VOLT8_OK;
  result->bytes = inputs->bytes_fp8;
  return status;
}

/* capacity: where the kind is C, its rows an expert slot (else untouched). */
static volt8_status time_baseline(bench_state *state, bench_baseline_kind kind, const bench_inputs *inputs,
                                  const bench_timing_plan *plan, bench_method_result *result, int32_t *capacity) {
  volt8_ctx *ctx = state->ctx;
  if (state->fp16_unavailable[0]) return volt8_fail(ctx, VOLT8_ERR_UNSUPPORTED, "%s", state->fp16_unavailable);
  bench_baseline *baseline = NULL;
  volt8_status status = bench_inputs_poison(ctx, inputs, 0);
  if (status == VOLT8_OK)
    status = bench_baseline_create(&state->gpu, &state->cublas, kind, &state->fp16, &state->options->shape, inputs,
                                   &baseline);
  if (status == VOLT8_OK) status = bench_inputs_check(ctx, inputs, 0, &result->relative_l2);
  if (status == VOLT8_OK) status = bench_time(&state->gpu, bench_baseline_launch, baseline, plan, &result->timing);
  if (status == VOLT8_OK && kind == BENCH_BASELINE_SORTED) *capacity = bench_baseline_capacity(baseline);
  bench_baseline_destroy(baseline);
  result->ran = status == VOLT8_OK;
  result->bytes = inputs->bytes_fp16;
  return status;
}

static volt8_status run_m(bench_state *state, int32_t m, bench_m_result *result) {
  volt8_ctx *ctx = state->ctx;
  const bench_options *options = state->options;
  result->m = m;
  result->input_sets = options->input_sets
                           ? options->input_sets
                           : bench_input_set_count(&state->host, m, options->top_k, state->gpu.l2_bytes, L2_MULTIPLE,
                                                   MIN_SETS, MAX_SETS);
  if (result->input_sets < options->chain) result->input_sets = options->chain; /* a chain needs its own sets */
  bench_inputs inputs;
  volt8_status status = bench_inputs_create(ctx, &state->host, m, options->top_k, result->input_sets, options->seed, 1, 1,
                                            bench_problem_threads(options->threads), &inputs);
  if (status != VOLT8_OK) return status;
  result->active_experts = inputs.active_experts_mean;
  result->bytes_fp8 = inputs.bytes_fp8;
  describe_variants(state, m, result);
  bench_timing_plan plan = {inputs.count, options->warmup_batches, options->timed_batches, options->spin_ms};
  bench_method_result *methods = result->methods;
  if ((status = time_volt8(state, &inputs, &plan, &methods[BENCH_METHOD_VOLT8])) != VOLT8_OK)
    record_failure(&methods[BENCH_METHOD_VOLT8], ctx, status);
  if (options->chain > 0 && (status = time_chained(state, &inputs, &plan, &result->chained)) != VOLT8_OK)
    record_failure(&result->chained, ctx, status);
  else if (options->chain == 0)
    snprintf(result->chained.reason, sizeof result->chained.reason, "not asked for (--chain)");
  for (int method = BENCH_METHOD_CUBLASLT_FP16; method <= BENCH_METHOD_SORTED_FP16; method++) {
    if (!options->baselines) {
      snprintf(methods[method].reason, sizeof methods[method].reason, "not asked for (--no-baselines)");
      continue;
    }
    bench_baseline_kind kind = method == BENCH_METHOD_CUBLASLT_FP16 ? BENCH_BASELINE_LT
                               : method == BENCH_METHOD_GROUPED_FP16 ? BENCH_BASELINE_GROUPED
                                                                     : BENCH_BASELINE_SORTED;
    if ((status = time_baseline(state, kind, &inputs, &plan, &methods[method], &result->sorted_capacity)) != VOLT8_OK)
      record_failure(&methods[method], ctx, status);
  }
  if (state->progress) {
    fprintf(state->progress, "bench: M=%-4d sets %-3d volt8 %8.1f us", m, inputs.count,
            methods[BENCH_METHOD_VOLT8].timing.median_us);
    if (result->chained.ran)
      fprintf(state->progress, " (%.1f us a forward in a chain of %d)", result->chained.timing.median_us, options->chain);
    for (int method = 1; method < BENCH_METHOD_COUNT; method++)
      if (methods[method].ran) fprintf(state->progress, " | %s %8.1f us", bench_method_key(method), methods[method].timing.median_us);
    fputc('\n', state->progress);
    fflush(state->progress);
  }
  bench_inputs_destroy(ctx, &inputs);
  return VOLT8_OK;
}

volt8_status bench_run(volt8_ctx *ctx, const bench_options *options, const char *command, FILE *progress,
                       bench_report *report) {
  memset(report, 0, sizeof *report);
  if (!ctx || !options || options->m_count <= 0 || options->m_count > BENCH_MAX_M)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "bench_run: no context or no token counts");
  bench_state state = {.ctx = ctx, .options = options, .progress = progress};
  volt8_status status = set_up(&state, command, report);
  for (int32_t i = 0; i < options->m_count && status == VOLT8_OK; i++) {
    status = run_m(&state, options->m_values[i], &report->results[i]);
    if (status == VOLT8_OK) report->count = i + 1;
  }
  volt8_tuning_warnings(report->tuning_warnings, sizeof report->tuning_warnings, NULL);
  bench_report_derive(report);
  tear_down(&state);
  return status;
}

int bench_report_passed(const bench_report *report) {
  for (int32_t i = 0; i < report->count; i++) {
    const bench_method_result *volt8 = &report->results[i].methods[BENCH_METHOD_VOLT8];
    if (!volt8->ran || !(volt8->relative_l2 <= BENCH_TOLERANCE)) return 0;
    const bench_method_result *chained = &report->results[i].chained;
    if (report->chain > 0 && (!chained->ran || !(chained->relative_l2 <= BENCH_TOLERANCE))) return 0;
  }
  return report->count > 0;
}
