/* GPU suite for checkpoint loading: experts loaded onto the device from fixture checkpoints run the
 * forward that the reference computes on the same rank loaded on the host; memory matches the
 * plan; a failed load leaves nothing allocated. Fixtures are written by tests/fixtures/
 * make_checkpoints.py (safetensors + numpy), run with $VOLT8_PYTHON, the .venv's or the system's python3. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_fixture.h"
#include "core/numeric.h"
#include "../tiny_checkpoint.h"

TestSuite(gpu_load, .timeout = 600);

static char fixture_dir[512];

static void write_fixtures(void) {
  gpu_write_checkpoints("load", "--group native --group online --group scales", fixture_dir, sizeof fixture_dir);
}

static void remove_fixtures(void) { gpu_remove_folder(fixture_dir); }

/* Loads one rank on the device and on the host, runs M tokens through both, compares. */
static void check_case(volt8_ctx *ctx, const char *case_dir, int32_t tp, int32_t rank, const char *online,
                       int32_t online_block_n) {
  char dir[1024], label[1200];
  snprintf(dir, sizeof dir, "%s/%s", fixture_dir, case_dir);
  snprintf(label, sizeof label, "%s tp %d rank %d%s", case_dir, tp, rank, online ? " online" : "");
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = dir;
  options.tp_size = tp;
  options.tp_rank = rank;
  options.mtp_expert_quantization = online;
  options.online_block_n = online_block_n;
  volt8_host_checkpoint *host = NULL;
  cr_assert_eq(volt8_checkpoint_load_host(ctx, &options, &host), VOLT8_OK, "%s: host load: %s", label,
               volt8_last_error(ctx));
  volt8_experts *experts = NULL;
  cr_assert_eq(volt8_experts_load(ctx, &options, &experts), VOLT8_OK, "%s: device load: %s", label, volt8_last_error(ctx));

  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_OK, "%s: plan: %s", label, volt8_last_error(ctx));
  volt8_memory_report planned = VOLT8_MEMORY_REPORT_INIT, loaded = VOLT8_MEMORY_REPORT_INIT;
  cr_assert_eq(volt8_plan_rank(ctx, &plan, rank, NULL, &planned), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(volt8_experts_memory(experts, &loaded), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(loaded.resident_bytes, planned.resident_bytes, "%s: resident %lld bytes, plan said %lld", label,
               (long long)loaded.resident_bytes, (long long)planned.resident_bytes);

  host_problem problem = {0};
  problem.shape = host->shape;
  cr_assert_eq(volt8_moe_dims_compute(ctx, &host->shape, &problem.dims), VOLT8_OK);
  problem.w13 = (uint8_t *)host->experts.w13;
  problem.s13 = (uint16_t *)host->experts.s13;
  problem.w2 = (uint8_t *)host->experts.w2;
  problem.s2 = (uint16_t *)host->experts.s2;
  int32_t top_k = host->shape.num_experts < 4 ? host->shape.num_experts : 4;
  const int32_t ms[] = {1, 8, 33};
  for (int m = 0; m < 3; m++) {
    device_batch batch;
    gpu_make_batch(ctx, &problem, ms[m], top_k, ROUTING_UNIFORM, &batch);
    char full[1300];
    snprintf(full, sizeof full, "%s M=%d top_k=%d", label, ms[m], top_k);
    gpu_check_forward(ctx, experts, host->shape.hidden, &batch, NULL, NULL, full);
    gpu_free_batch(ctx, &batch);
  }
  volt8_experts_destroy(experts);
  volt8_host_checkpoint_free(host);
}

Test(gpu_load, loaded_experts_match_the_reference) {
  volt8_ctx *ctx = gpu_open();
  write_fixtures();
  gpu_seed(21);
  check_case(ctx, "real_shape", 4, 1, NULL, 128);
  check_case(ctx, "real_shape", 4, 3, NULL, 128);
  check_case(ctx, "bf16_fused", 4, 1, "fp8", 1);
  remove_fixtures();
  volt8_ctx_destroy(ctx);
}

/* An unquantized weight of 65504 quantized online: its block's scale once made it 65520 (infinite
 * in FP16) and the forward NaN or infinite; now the forward is finite and matches the reference. */
Test(gpu_load, online_weight_of_fp16_max_gives_a_finite_forward) {
  volt8_ctx *ctx = gpu_open();
  snprintf(fixture_dir, sizeof fixture_dir, "/tmp/volt8-gpu-fp16-max-XXXXXX");
  cr_assert_not_null(mkdtemp(fixture_dir));
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/fp16_max", fixture_dir);
  cr_assert(tiny_online_checkpoint_write(dir, 2, 128, 65504.0f), "cannot write %s", dir);
  gpu_seed(25);
  check_case(ctx, "fp16_max", 1, 0, "fp8", 128);
  check_case(ctx, "fp16_max", 1, 0, "fp8", 1);
  remove_fixtures();
  volt8_ctx_destroy(ctx);
}

Test(gpu_load, failed_load_leaves_nothing_allocated) {
  volt8_ctx *ctx = gpu_open();
  write_fixtures();
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/scale_zero", fixture_dir);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = dir;
  gpu_count_allocations(ctx);
  int64_t live_before = gpu_live_allocations();
  volt8_experts *experts = (volt8_experts *)0x1;
  volt8_status status = volt8_experts_load(ctx, &options, &experts);
  cr_assert_eq(status, VOLT8_ERR_SCALE_RANGE, "status %d: %s", status, volt8_last_error(ctx));
  cr_assert_null(experts);
  cr_assert(strstr(volt8_last_error(ctx), "expert 1") != NULL, "%s", volt8_last_error(ctx));
  cr_assert_eq(gpu_live_allocations(), live_before, "the failed load left %lld device allocations",
               (long long)(gpu_live_allocations() - live_before));
  remove_fixtures();
  volt8_ctx_destroy(ctx);
}

/* Host experts with a zero or a non-finite block scale (the GEMMs count their sums in units of each
 * block's scale): refused naming the scale, nothing left allocated. */
Test(gpu_load, host_experts_with_a_zero_or_infinite_scale_are_refused) {
  volt8_ctx *ctx = gpu_open();
  gpu_seed(0x5ca1eull);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.num_experts = 4;
  host_problem problem;
  gpu_make_problem(ctx, &shape, &problem);
  gpu_count_allocations(ctx);
  int64_t live_before = gpu_live_allocations();
  volt8_host_experts host = {sizeof host, problem.w13, problem.s13, problem.w2, problem.s2};
  const struct {
    uint16_t *scales;
    int64_t at;
    uint16_t bits;
    const char *says;
  } cases[] = {
      {problem.s13, problem.dims.s13_elems_per_expert * 2 + 3, 0x0000, "s13 of expert 2 holds the scale 0x0000 (zero) at element 3"},
      {problem.s13, 1, 0x8000, "s13 of expert 0 holds the scale 0x8000 (zero) at element 1"},
      {problem.s2, problem.dims.s2_elems_per_expert + 0, 0x7C00, "s2 of expert 1 holds the scale 0x7C00 (not finite) at element 0"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    uint16_t kept = cases[c].scales[cases[c].at];
    cases[c].scales[cases[c].at] = cases[c].bits;
    volt8_experts *experts = (volt8_experts *)0x1;
    volt8_status status = volt8_experts_create_from_host(ctx, &shape, &host, 8, 4, &experts);
    cr_expect_eq(status, VOLT8_ERR_SCALE_RANGE, "%s: status %d: %s", cases[c].says, status, volt8_last_error(ctx));
    cr_expect_null(experts);
    cr_expect(strstr(volt8_last_error(ctx), cases[c].says) != NULL, "\"%s\" lacks \"%s\"", volt8_last_error(ctx),
              cases[c].says);
    cases[c].scales[cases[c].at] = kept;
  }
  cr_assert_eq(gpu_live_allocations(), live_before, "the refused uploads left %lld device allocations",
               (long long)(gpu_live_allocations() - live_before));
  volt8_experts *experts = NULL;
  cr_assert_eq(volt8_experts_create_from_host(ctx, &shape, &host, 8, 4, &experts), VOLT8_OK, "%s", volt8_last_error(ctx));
  volt8_experts_destroy(experts);
  gpu_free_problem(&problem);
  volt8_ctx_destroy(ctx);
}
