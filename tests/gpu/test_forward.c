/* GPU suite for the forward API: eager vs reference at the TP4 rank offsets, CUDA graph replay
 * bit-identical to eager and stable over 1000 replays, new routing between replays, the capture
 * guard for unprepared variants, and early launch where the kernels and the driver have it. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/experts_internal.h"
#include "gpu_fixture.h"
#include "reference/reference.h"

TestSuite(gpu_forward, .timeout = 1200);

Test(gpu_forward, eager_at_every_tp4_offset) {
  volt8_ctx *ctx = gpu_open();
  gpu_seed(11);
  const int32_t offsets[] = {0, 32, 64, 96}, ms[] = {1, 2, 8, 64};
  for (int o = 0; o < 4; o++) {
    volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
    shape.intermediate_offset = offsets[o];
    if (gpu_quick_mode()) shape.num_experts = 64;
    host_problem problem;
    gpu_make_problem(ctx, &shape, &problem);
    volt8_experts *experts = gpu_upload(ctx, &problem, 64, 10);
    cr_assert_eq(volt8_experts_prepare(experts, ms, 4), VOLT8_OK, "%s", volt8_last_error(ctx));
    for (int m = 0; m < 4; m++) {
      device_batch batch;
      gpu_make_batch(ctx, &problem, ms[m], 10, ROUTING_UNIFORM, &batch);
      char label[96];
      snprintf(label, sizeof label, "offset %d M=%d", offsets[o], ms[m]);
      gpu_check_forward(ctx, experts, shape.hidden, &batch, NULL, NULL, label);
      gpu_free_batch(ctx, &batch);
    }
    volt8_experts_destroy(experts);
    gpu_free_problem(&problem);
    if (gpu_quick_mode()) break;
  }
  volt8_ctx_destroy(ctx);
}

Test(gpu_forward, graph_replay_matches_eager_bit_for_bit) {
  volt8_ctx *ctx = gpu_open();
  gpu_seed(12);
  const volt8_cuda_driver *cuda = ctx->cuda;
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  if (gpu_quick_mode()) shape.num_experts = 64;
  host_problem problem;
  gpu_make_problem(ctx, &shape, &problem);
  const int32_t ms[] = {1, 8, 64};
  volt8_experts *experts = gpu_upload(ctx, &problem, 64, 10);
  cr_assert_eq(volt8_experts_prepare(experts, ms, 3), VOLT8_OK, "%s", volt8_last_error(ctx));
  CUstream stream;
  cr_assert_eq(cuda->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  int replays = gpu_quick_mode() ? 10 : 1000;
  for (int m = 0; m < 3; m++) {
    device_batch batch;
    gpu_make_batch(ctx, &problem, ms[m], 10, ROUTING_UNIFORM, &batch);
    size_t elements = (size_t)ms[m] * shape.hidden;
    uint16_t *eager = malloc(elements * 2), *replayed = malloc(elements * 2);
    volt8_moe_args args = gpu_batch_args(&batch);
    cr_assert_eq(volt8_moe_forward(experts, &args, stream), VOLT8_OK, "%s", volt8_last_error(ctx));
    gpu_check_output(ctx, shape.hidden, &batch, "eager", eager);

    volt8_graph *graph = NULL;
    cr_assert_eq(volt8_graph_capture(experts, &args, stream, &graph), VOLT8_OK, "%s", volt8_last_error(ctx));
    for (int r = 0; r < replays; r++) {
      cr_assert_eq(cuda->cuMemsetD8Async(batch.d_out, 0xFF, elements * 2, stream), CUDA_SUCCESS);
      /* A kernel that read h, z or the route's output before they are written would see NaN or -1. */
      cr_assert_eq(volt8_experts_fill_workspace(experts, 0xFF, stream), VOLT8_OK, "%s", volt8_last_error(ctx));
      cr_assert_eq(volt8_graph_launch(graph, stream), VOLT8_OK, "%s", volt8_last_error(ctx));
      if (r == 0 || r == replays - 1 || r % 97 == 0) {
        cr_assert_eq(cuda->cuStreamSynchronize(stream), CUDA_SUCCESS);
        cr_assert_eq(cuda->cuMemcpyDtoH(replayed, batch.d_out, elements * 2), CUDA_SUCCESS);
        for (size_t i = 0; i < elements; i++)
          cr_assert_eq(replayed[i], eager[i], "M=%d replay %d: out[%zu] = 0x%04x, eager gave 0x%04x", ms[m], r, i,
                       replayed[i], eager[i]);
      }
    }
    /* Same pointers, new ids and weights: the replay follows the new routing. */
    gpu_reroute_batch(ctx, &problem, &batch);
    cr_assert_eq(cuda->cuMemsetD8Async(batch.d_out, 0xFF, elements * 2, stream), CUDA_SUCCESS);
    cr_assert_eq(volt8_graph_launch(graph, stream), VOLT8_OK, "%s", volt8_last_error(ctx));
    char label[64];
    snprintf(label, sizeof label, "M=%d replay after rerouting", ms[m]);
    gpu_check_output(ctx, shape.hidden, &batch, label, NULL);
    volt8_graph_destroy(graph);
    free(eager);
    free(replayed);
    gpu_free_batch(ctx, &batch);
  }
  cuda->cuStreamDestroy(stream);
  volt8_experts_destroy(experts);
  gpu_free_problem(&problem);
  volt8_ctx_destroy(ctx);
}

Test(gpu_forward, unprepared_variant_during_capture_is_refused) {
  volt8_ctx *ctx = gpu_open();
  gpu_seed(13);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.num_experts = 64;
  host_problem problem;
  gpu_make_problem(ctx, &shape, &problem);
  volt8_experts *experts = gpu_upload(ctx, &problem, 64, 10);
  device_batch batch;
  gpu_make_batch(ctx, &problem, 8, 10, ROUTING_UNIFORM, &batch);
  volt8_moe_args args = gpu_batch_args(&batch);
  volt8_graph *graph = NULL;
  cr_assert_eq(volt8_graph_capture(experts, &args, NULL, &graph), VOLT8_ERR_CAPTURE, "%s", volt8_last_error(ctx));
  cr_assert_null(graph);
  cr_assert(strstr(volt8_last_error(ctx), "prepare") != NULL, "message: %s", volt8_last_error(ctx));
  /* The stream is usable afterwards: prepare, then the same capture succeeds. */
  const int32_t m = 8;
  cr_assert_eq(volt8_experts_prepare(experts, &m, 1), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(volt8_graph_capture(experts, &args, NULL, &graph), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(volt8_graph_launch(graph, NULL), VOLT8_OK, "%s", volt8_last_error(ctx));
  gpu_check_output(ctx, shape.hidden, &batch, "graph after prepare", NULL);
  volt8_graph_destroy(graph);
  gpu_free_batch(ctx, &batch);
  volt8_experts_destroy(experts);
  gpu_free_problem(&problem);
  volt8_ctx_destroy(ctx);
}

Test(gpu_forward, bad_ids_are_skipped_on_the_device) {
  /* An engine may write ids after capture: ids outside [0, E) must never read outside the weights. */
  volt8_ctx *ctx = gpu_open();
  gpu_seed(14);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.num_experts = 64;
  host_problem problem;
  gpu_make_problem(ctx, &shape, &problem);
  volt8_experts *experts = gpu_upload(ctx, &problem, 64, 10);
  device_batch batch;
  gpu_make_batch(ctx, &problem, 4, 10, ROUTING_UNIFORM, &batch);
  /* The reference skips such pairs too. */
  batch.ids[3] = -5;
  batch.ids[17] = 1 << 20;
  gpu_update_ids(ctx, &problem, &batch);
  gpu_check_forward(ctx, experts, shape.hidden, &batch, NULL, NULL, "bad ids skipped");
  gpu_free_batch(ctx, &batch);
  volt8_experts_destroy(experts);
  gpu_free_problem(&problem);
  volt8_ctx_destroy(ctx);
}

Test(gpu_forward, early_launch_where_the_kernels_and_the_driver_have_it) {
  /* Every forward check poisons the workspace first, so with early launch on, the kernels suite
   * checks each variant's wait; this makes sure it is on where it should be, and can be turned off. */
  volt8_ctx *ctx = gpu_open();
  int driver_version = 0;
  cr_assert_eq(ctx->cuda->cuDriverGetVersion(&driver_version), CUDA_SUCCESS);
  const char *disabled = getenv("VOLT8_EARLY_LAUNCH_DISABLE");
  int expected = ctx->target_arch >= 90 && driver_version >= 12030 && !(disabled && strcmp(disabled, "1") == 0);
  printf("early launch: %s (target sm_%d, driver %d)\n", volt8_ctx_early_launch(ctx) ? "on" : "off", ctx->target_arch,
         driver_version);
  cr_assert_eq(volt8_ctx_early_launch(ctx), expected, "target sm_%d, driver %d", ctx->target_arch, driver_version);
  volt8_ctx_destroy(ctx);

  /* The option turns it off; the forward is then still right. */
  char arch[16];
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = 0;
  options.early_launch_disable = 1;
  options.target_arch = getenv("VOLT8_TARGET_ARCH");
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_OK, "%s", volt8_last_error(NULL));
  cr_assert_eq(volt8_ctx_early_launch(ctx), 0);
  cr_assert_eq(volt8_ctx_target_arch(ctx, arch, sizeof arch), VOLT8_OK);
  gpu_seed(15);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.num_experts = 64;
  host_problem problem;
  gpu_make_problem(ctx, &shape, &problem);
  volt8_experts *experts = gpu_upload(ctx, &problem, 64, 10);
  const int32_t ms[] = {1, 8, 64};
  for (int m = 0; m < 3; m++) {
    device_batch batch;
    gpu_make_batch(ctx, &problem, ms[m], 10, ROUTING_UNIFORM, &batch);
    char label[64];
    snprintf(label, sizeof label, "%s, early launch off, M=%d", arch, ms[m]);
    gpu_check_forward(ctx, experts, shape.hidden, &batch, NULL, NULL, label);
    gpu_free_batch(ctx, &batch);
  }
  volt8_experts_destroy(experts);
  gpu_free_problem(&problem);
  volt8_ctx_destroy(ctx);
}
