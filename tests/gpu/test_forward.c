/* GPU suite for the forward API: eager vs reference at the TP4 rank offsets, CUDA graph replay
 * bit-identical to eager and stable over 1000 replays, new routing between replays, the capture
 * guard for unprepared variants, early launch where the kernels and the driver have it, and eager
 * forwards replayed from the handle's own graphs (moe/replay.h) bit for bit as launched. */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "checkpoint/models.h"
#include "core/work_counts.h"
#include "dispatch/dispatch.h"
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

/* Eager forwards at few tokens, the handle replaying them from its graphs: two batches (their own
 * tensors, routing and inputs) in the order a, a, b, a, b, b, each forward with out and the workspace
 * poisoned, must give the reference and the bits of the same batch launched directly (replay off);
 * the second sighting captures, the later ones replay with the nodes' arguments set anew, and the last
 * (the arguments of the one before) launches the graph again as it is. Then b again, after the
 * variants it runs are pinned by name and after a prepare that replaces the workspace: neither may
 * launch the graph as it was (the workspace's addresses are among its arguments). Every M up to the
 * first that runs a route pass, and top_k 1 and 16. */
Test(gpu_forward, eager_forwards_replayed_from_graphs_bit_for_bit) {
  volt8_ctx *ctx = gpu_open();
  cr_assert(ctx->eager_replay, "eager replay is off (VOLT8_EAGER_REPLAY_DISABLE=1?)");
  gpu_seed(17);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.num_experts = 64;
  host_problem problem;
  gpu_make_problem(ctx, &shape, &problem);
  const int32_t top_ks[] = {10, 1, 16}, ms[] = {1, 2, 3, 4, 8};
  int replayed_cases = 0;
  for (int k = 0; k < 3; k++) {
    int32_t top_k = top_ks[k];
    volt8_experts *experts = gpu_upload(ctx, &problem, 8, top_k);
    cr_assert_eq(volt8_experts_prepare(experts, ms, 5), VOLT8_OK, "%s", volt8_last_error(ctx));
    for (int i = 0; i < 5; i++) {
      int32_t m = ms[i];
      device_batch batches[2];
      uint16_t *direct[2];
      size_t elements = (size_t)m * shape.hidden;
      char label[128];
      ctx->eager_replay = 0;
      for (int b = 0; b < 2; b++) {
        gpu_make_batch(ctx, &problem, m, top_k, ROUTING_UNIFORM, &batches[b]);
        direct[b] = malloc(elements * 2);
        snprintf(label, sizeof label, "M=%d top_k=%d batch %d, launched directly", m, top_k, b);
        gpu_check_forward(ctx, experts, shape.hidden, &batches[b], NULL, NULL, label);
        cr_assert_eq(ctx->cuda->cuMemcpyDtoH(direct[b], batches[b].d_out, elements * 2), CUDA_SUCCESS);
      }
      ctx->eager_replay = 1;
      int64_t captures0, replays0, repeats0, captures1, replays1, repeats1;
      volt8_experts_replay_counts(experts, &captures0, &replays0, &repeats0);
      const int order[] = {0, 0, 1, 0, 1, 1};
      uint16_t *got = malloc(elements * 2);
      for (int step = 0; step < 6; step++) {
        int b = order[step];
        snprintf(label, sizeof label, "M=%d top_k=%d batch %d, eager forward %d", m, top_k, b, step);
        gpu_check_forward(ctx, experts, shape.hidden, &batches[b], NULL, NULL, label);
        cr_assert_eq(ctx->cuda->cuMemcpyDtoH(got, batches[b].d_out, elements * 2), CUDA_SUCCESS);
        for (size_t e = 0; e < elements; e++)
          cr_assert_eq(got[e], direct[b][e], "%s: out[%zu] = 0x%04x, launched directly 0x%04x", label, e, got[e],
                       direct[b][e]);
      }
      volt8_experts_replay_counts(experts, &captures1, &replays1, &repeats1);
      volt8_forward_info info = VOLT8_FORWARD_INFO_INIT;
      cr_assert_eq(volt8_forward_describe(NULL, NULL, experts, m, top_k, &info), VOLT8_OK);
      printf("M=%d top_k=%d (%s, %s): %lld capture(s), %lld replay(s), %lld as they were\n", m, top_k, info.gate_up,
             info.down, (long long)(captures1 - captures0), (long long)(replays1 - replays0),
             (long long)(repeats1 - repeats0));
      /* A block_m 1 pair has no route pass: the first of these forwards is the sequence's first
       * sighting, the second captures it, and that one and the four after it launch the graph, the
       * last as it was. */
      int unrouted = strstr(info.gate_up, ".bm1.") && (strstr(info.down, ".bm1.") || strncmp(info.down, "down.tok", 8) == 0);
      if (unrouted && !info.single_launch) {
        cr_assert_eq(captures1 - captures0, 1, "M=%d top_k=%d: %lld captures", m, top_k, (long long)(captures1 - captures0));
        cr_assert_eq(replays1 - replays0, 5, "M=%d top_k=%d: %lld replays", m, top_k, (long long)(replays1 - replays0));
        cr_assert_eq(repeats1 - repeats0, 1, "M=%d top_k=%d: %lld graphs launched as they were", m, top_k,
                     (long long)(repeats1 - repeats0));
        /* b again after each change of what its launches would be. First b runs until its graph is
         * launched as it was (so the shortcut is armed), then the change, then b once more: the same
         * bits, through the full path, never the graph as it was. */
        for (int change = 0; change < 2; change++) {
          int64_t captures2, replays2, repeats2, armed = repeats1;
          for (int again = 0; again < 3 && armed == repeats1; again++) {
            snprintf(label, sizeof label, "M=%d top_k=%d batch 1, run %d before change %d", m, top_k, again, change);
            gpu_check_forward(ctx, experts, shape.hidden, &batches[1], NULL, NULL, label);
            volt8_experts_replay_counts(experts, &captures2, &replays2, &armed);
          }
          cr_assert_gt(armed, repeats1, "M=%d top_k=%d: three forwards of batch 1 in a row never launched its graph "
                       "as it was", m, top_k);
          repeats1 = armed;
          if (change == 1) {
            const int32_t larger = 16 + 8 * i; /* past every max_tokens before it: a new workspace */
            cr_assert_eq(volt8_experts_prepare(experts, &larger, 1), VOLT8_OK, "%s", volt8_last_error(ctx));
          }
          snprintf(label, sizeof label, "M=%d top_k=%d batch 1 after %s", m, top_k,
                   change == 0 ? "its variants were pinned" : "a new workspace");
          /* change 0: the forward pins the variants it runs by name (gpu_check_forward sets them) */
          gpu_check_forward(ctx, experts, shape.hidden, &batches[1], change == 0 ? info.gate_up : NULL,
                            change == 0 ? info.down : NULL, label);
          cr_assert_eq(ctx->cuda->cuMemcpyDtoH(got, batches[1].d_out, elements * 2), CUDA_SUCCESS);
          for (size_t e = 0; e < elements; e++)
            cr_assert_eq(got[e], direct[1][e], "%s: out[%zu] = 0x%04x, launched directly 0x%04x", label, e, got[e],
                         direct[1][e]);
          volt8_experts_replay_counts(experts, &captures2, &replays2, &repeats2);
          cr_assert_eq(repeats2, repeats1, "%s: the graph was launched as it was", label);
        }
        cr_assert_eq(volt8_experts_set_variants(experts, NULL, NULL), VOLT8_OK, "%s", volt8_last_error(ctx));
        replayed_cases++;
      } else {
        cr_assert_eq(replays1 - replays0, 0, "M=%d top_k=%d: a routed forward was replayed", m, top_k);
      }
      free(got);
      for (int b = 0; b < 2; b++) {
        free(direct[b]);
        gpu_free_batch(ctx, &batches[b]);
      }
    }
    volt8_experts_destroy(experts);
  }
  cr_assert(replayed_cases >= 3, "only %d cases ran without a route pass", replayed_cases);
  gpu_free_problem(&problem);
  volt8_ctx_destroy(ctx);
}

/* The reference shape at 64 experts, seeded with `salt`, and its experts on the device (up to 64
 * tokens, top_k 10): where the cases that need one small problem start. */
static volt8_experts *upload_small_problem(volt8_ctx *ctx, uint64_t salt, host_problem *problem) {
  gpu_seed(salt);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.num_experts = 64;
  gpu_make_problem(ctx, &shape, problem);
  return gpu_upload(ctx, problem, 64, 10);
}

static void free_small_problem(volt8_experts *experts, host_problem *problem) {
  volt8_experts_destroy(experts);
  gpu_free_problem(problem);
}

Test(gpu_forward, unprepared_variant_during_capture_is_refused) {
  volt8_ctx *ctx = gpu_open();
  host_problem problem;
  volt8_experts *experts = upload_small_problem(ctx, 13, &problem);
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
  gpu_check_output(ctx, problem.shape.hidden, &batch, "graph after prepare", NULL);
  volt8_graph_destroy(graph);
  gpu_free_batch(ctx, &batch);
  free_small_problem(experts, &problem);
  volt8_ctx_destroy(ctx);
}

/* Once prepared, forwards of those token counts at every top-k up to the handle's maximum, eager and
 * captured, run no code generator and read no tuning table (prepare([1, 2, 4, 8]) at top-k up to 16
 * makes 64 choices, more than the 16 a cache of choices once held). */
Test(gpu_forward, prepared_forwards_run_no_generator_and_read_no_table) {
  volt8_ctx *ctx = gpu_open();
  gpu_seed(15);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.num_experts = 64;
  host_problem problem;
  gpu_make_problem(ctx, &shape, &problem);
  const int32_t ms[] = {1, 2, 4, 8};
  volt8_experts *experts = gpu_upload(ctx, &problem, 8, 16);
  cr_assert_eq(volt8_experts_prepare(experts, ms, 4), VOLT8_OK, "%s", volt8_last_error(ctx));
  volt8_work_counts prepared = volt8_work_counts_now();
  for (int32_t top_k = 16; top_k >= 1; top_k--) {
    for (int i = 0; i < 4; i++) {
      device_batch batch;
      gpu_make_batch(ctx, &problem, ms[i], top_k, ROUTING_UNIFORM, &batch);
      volt8_moe_args args = gpu_batch_args(&batch);
      cr_assert_eq(volt8_moe_forward(experts, &args, NULL), VOLT8_OK, "%s", volt8_last_error(ctx));
      volt8_graph *graph = NULL;
      cr_assert_eq(volt8_graph_capture(experts, &args, NULL, &graph), VOLT8_OK, "M=%d top_k=%d: %s", ms[i], top_k,
                   volt8_last_error(ctx));
      cr_assert_eq(volt8_graph_launch(graph, NULL), VOLT8_OK, "%s", volt8_last_error(ctx));
      char label[64];
      snprintf(label, sizeof label, "prepared M=%d top_k=%d", ms[i], top_k);
      gpu_check_output(ctx, shape.hidden, &batch, label, NULL);
      volt8_graph_destroy(graph);
      gpu_free_batch(ctx, &batch);
      volt8_work_counts now = volt8_work_counts_now();
      cr_assert_eq(now.codegen_runs, prepared.codegen_runs, "%s: the code generator ran", label);
      cr_assert_eq(now.tuning_reads, prepared.tuning_reads, "%s: a tuning table was read", label);
    }
  }
  volt8_experts_destroy(experts);
  gpu_free_problem(&problem);
  volt8_ctx_destroy(ctx);
}

Test(gpu_forward, bad_ids_are_skipped_on_the_device) {
  /* An engine may write ids after capture: ids outside [0, E) must never read outside the weights. */
  volt8_ctx *ctx = gpu_open();
  host_problem problem;
  volt8_experts *experts = upload_small_problem(ctx, 14, &problem);
  device_batch batch;
  gpu_make_batch(ctx, &problem, 4, 10, ROUTING_UNIFORM, &batch);
  /* The reference skips such pairs too. */
  batch.ids[3] = -5;
  batch.ids[17] = 1 << 20;
  gpu_update_ids(ctx, &problem, &batch);
  gpu_check_forward(ctx, experts, problem.shape.hidden, &batch, NULL, NULL, "bad ids skipped");
  gpu_free_batch(ctx, &batch);
  free_small_problem(experts, &problem);
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
  host_problem problem;
  volt8_experts *experts = upload_small_problem(ctx, 15, &problem);
  const int32_t ms[] = {1, 8, 64};
  for (int m = 0; m < 3; m++) {
    device_batch batch;
    gpu_make_batch(ctx, &problem, ms[m], 10, ROUTING_UNIFORM, &batch);
    char label[64];
    snprintf(label, sizeof label, "%s, early launch off, M=%d", arch, ms[m]);
    gpu_check_forward(ctx, experts, problem.shape.hidden, &batch, NULL, NULL, label);
    gpu_free_batch(ctx, &batch);
  }
  free_small_problem(experts, &problem);
  volt8_ctx_destroy(ctx);
}

/* The one-launch forward (templates/moe_single.cu) and the kernels whose arithmetic it runs. */
#define SINGLE_TWIN_GATE_UP "gate_up.cc.bm1.bn4.w4.sk1.l32"
#define SINGLE_TWIN_DOWN "down.cc.bm1.bn128.w8.sk1.l2"

/* Poisons out and the workspace (`poison_workspace`), runs the forward with the given variants
 * (NULL: dispatch) and checks out against the reference, copying it into `copy`. */
static void forward_and_copy(volt8_ctx *ctx, volt8_experts *experts, const device_batch *batch, int32_t hidden,
                             const char *gate_up, const char *down, int poison_workspace, const char *label,
                             uint16_t *copy) {
  cr_assert_eq(volt8_experts_set_variants(experts, gate_up, down), VOLT8_OK);
  volt8_forward_info info = VOLT8_FORWARD_INFO_INIT;
  cr_assert_eq(volt8_forward_describe(NULL, NULL, experts, batch->num_tokens, batch->top_k, &info), VOLT8_OK, "%s",
               volt8_last_error(ctx));
  cr_assert_eq(info.pinned, gate_up != NULL, "%s", label);
  if (gate_up) cr_assert(strcmp(info.gate_up, gate_up) == 0 && strcmp(info.gate_up_origin, "pinned") == 0 &&
                         !info.single_launch, "%s: described as %s (%s)", label, info.gate_up, info.gate_up_origin);
  volt8_moe_args args = gpu_batch_args(batch);
  cr_assert_eq(ctx->cuda->cuMemsetD8Async(batch->d_out, 0xFF, (size_t)batch->num_tokens * hidden * 2, NULL), CUDA_SUCCESS);
  if (poison_workspace)
    cr_assert_eq(volt8_experts_fill_workspace(experts, 0xFF, NULL), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(volt8_moe_forward(experts, &args, NULL), VOLT8_OK, "%s: %s", label, volt8_last_error(ctx));
  gpu_check_output(ctx, hidden, batch, label, copy);
}

/* At each M whose dispatched forward is one launch: against the reference, bit for bit against
 * gate_up.cc.bm1 (32 lanes a row), down.cc.bm1 (2 lanes) and the reduce, with bad ids and a token
 * none of whose ids is live at M >= 2 (their count stored as the reduce stores it); then forwards
 * back to back on new routing with nothing reset between them. Returns the M that ran as one launch. */
static int check_single_launch(volt8_ctx *ctx, const host_problem *problem, int32_t top_k, const int32_t *ms,
                               int32_t m_count, const char *name) {
  const volt8_moe_shape *shape = &problem->shape;
  int32_t max_m = 0;
  for (int32_t i = 0; i < m_count; i++) max_m = ms[i] > max_m ? ms[i] : max_m;
  volt8_experts *experts = gpu_upload(ctx, problem, max_m, top_k);
  cr_assert_eq(volt8_experts_prepare(experts, ms, m_count), VOLT8_OK, "%s", volt8_last_error(ctx));
  int ran = 0;
  for (int32_t i = 0; i < m_count; i++) {
    int32_t m = ms[i];
    volt8_forward_info choice = VOLT8_FORWARD_INFO_INIT;
    cr_assert_eq(volt8_forward_describe(NULL, NULL, experts, m, top_k, &choice), VOLT8_OK, "%s", volt8_last_error(ctx));
    if (!choice.single_launch) {
      printf("%s M=%d top_k=%d: not one launch (dispatch: %s, %s)\n", name, m, top_k, choice.gate_up, choice.down);
      continue;
    }
    ran++;
    device_batch batch;
    gpu_make_batch(ctx, problem, m, top_k, ROUTING_UNIFORM, &batch);
    int32_t bad = 0;
    if (m >= 2) {
      batch.ids[1] = shape->num_experts; /* token 0: one id just past E */
      for (int32_t j = 0; j < top_k; j++) batch.ids[top_k + j] = j % 2 ? -1 - j : 1 << 20; /* token 1: none live */
      bad = top_k + 1;
      gpu_update_ids(ctx, problem, &batch);
    }
    size_t elements = (size_t)m * shape->hidden;
    uint16_t *single = malloc(elements * 2), *twin = malloc(elements * 2);
    char label[256];
    snprintf(label, sizeof label, "%s M=%d top_k=%d, one launch", name, m, top_k);
    forward_and_copy(ctx, experts, &batch, shape->hidden, NULL, NULL, 1, label, single);
    int32_t counted = -1;
    cr_assert_eq(volt8_experts_bad_id_count(experts, &counted), VOLT8_OK, "%s", volt8_last_error(ctx));
    cr_assert_eq(counted, bad, "%s: %d bad ids counted, %d written", label, counted, bad);
    snprintf(label, sizeof label, "%s M=%d top_k=%d, the twin kernels", name, m, top_k);
    forward_and_copy(ctx, experts, &batch, shape->hidden, SINGLE_TWIN_GATE_UP, SINGLE_TWIN_DOWN, 1, label, twin);
    for (size_t e = 0; e < elements; e++)
      cr_assert_eq(single[e], twin[e], "%s M=%d: out[%zu] = 0x%04x in one launch, 0x%04x from %s + %s + reduce", name, m,
                   e, single[e], twin[e], SINGLE_TWIN_GATE_UP, SINGLE_TWIN_DOWN);
    /* Each forward must leave its counters at zero for the next: nothing resets them here. */
    for (int r = 0; r < 2; r++) {
      gpu_reroute_batch(ctx, problem, &batch);
      snprintf(label, sizeof label, "%s M=%d top_k=%d, one launch, back to back %d", name, m, top_k, r);
      forward_and_copy(ctx, experts, &batch, shape->hidden, NULL, NULL, 0, label, NULL);
    }
    free(single);
    free(twin);
    gpu_free_batch(ctx, &batch);
  }
  cr_assert_eq(volt8_experts_set_variants(experts, NULL, NULL), VOLT8_OK);
  volt8_experts_destroy(experts);
  return ran;
}

/* The first rank at the largest offset in the 128 grid (0 when every rank sits at offset 0), as
 * the models suite and scripts/gpu_check.sh (model_test_shapes) pick it. */
static int32_t widest_offset_rank(const volt8_model *model, int32_t tp) {
  int32_t width = model->intermediate / tp, best = 0;
  for (int32_t rank = 1; rank < tp; rank++)
    if (width * rank % 128 > width * best % 128) best = rank;
  return best;
}

Test(gpu_forward, single_launch_matches_the_kernels_it_stands_for) {
  volt8_ctx *ctx = gpu_open();
  ctx->single_launch = ctx->target_arch < 80; /* as VOLT8_SINGLE_LAUNCH=1 sets it */
  if (!ctx->single_launch) {
    volt8_ctx_destroy(ctx);
    cr_skip_test("the one-launch forward serves targets without early launch (VOLT8_TARGET_ARCH=sm_70)");
  }
  gpu_seed(16);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  if (gpu_quick_mode()) shape.num_experts = 64;
  const int32_t ms[] = {1, 2, 4, 8, 16, 25}, model_ms[] = {1, 8};
  /* The default grid (CTAs that fit), one CTA an item, and one CTA an SM (each takes many items). */
  const int32_t grids[] = {-1, 0, 1};
  host_problem problem;
  gpu_make_problem(ctx, &shape, &problem);
  for (int g = 0; g < 3; g++) {
    ctx->single_ctas_per_sm = grids[g];
    char name[96];
    snprintf(name, sizeof name, "reference TP4, %d CTAs an SM (0: one an item, -1: the launch bounds')", grids[g]);
    cr_assert_gt(check_single_launch(ctx, &problem, 10, ms, g == 0 ? 6 : 3, name), 0, "%s: no M ran as one launch", name);
  }
  gpu_free_problem(&problem);
  ctx->single_ctas_per_sm = -1;
  for (int32_t index = 0; index < volt8_model_count() && !gpu_quick_mode(); index++) {
    const volt8_model *model = volt8_model_at(index);
    for (int32_t tp = 4; tp <= 8; tp *= 2) {
      int32_t ranks[2] = {0, widest_offset_rank(model, tp)};
      for (int r = 0; r < (ranks[1] ? 2 : 1); r++) {
        cr_assert_eq(volt8_model_rank_shape(ctx, model, tp, ranks[r], 16, &shape), VOLT8_OK, "%s", volt8_last_error(ctx));
        char name[96];
        snprintf(name, sizeof name, "%s TP%d rank %d", model->name, tp, ranks[r]);
        /* The derived sm_70 tables pick block_m 1 cc gate_ups and cc or tok downs at M = 1 for every model. */
        gpu_make_problem(ctx, &shape, &problem);
        cr_assert_gt(check_single_launch(ctx, &problem, model->top_k, model_ms, 2, name), 0, "%s: M = 1 not one launch", name);
        gpu_free_problem(&problem);
      }
    }
  }
  volt8_ctx_destroy(ctx);
}

Test(gpu_forward, single_launch_is_asked_for) {
  volt8_ctx *ctx = gpu_open();
  cr_assert_eq(ctx->single_launch, 0);
  volt8_ctx_destroy(ctx);
  setenv("VOLT8_SINGLE_LAUNCH", "1", 1);
  ctx = gpu_open();
  unsetenv("VOLT8_SINGLE_LAUNCH");
  cr_assert_eq(ctx->single_launch, ctx->target_arch < 80, "target sm_%d", ctx->target_arch);
  volt8_ctx_destroy(ctx);
}

/* A guarded block: `bytes` bytes ending where a PROT_NONE page begins, holding the first `bytes` of
 * init with its size field set to `bytes` (tests/test_abi_sizes.c does the same for the CPU entries). */
static void *guarded_struct(void **map, size_t *map_bytes, const void *init, size_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  *map_bytes = ((bytes + page - 1) / page + 1) * page;
  unsigned char *base = mmap(NULL, *map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert(base != MAP_FAILED);
  cr_assert_eq(mprotect(base + *map_bytes - page, page, PROT_NONE), 0);
  *map = base;
  unsigned char *block = base + *map_bytes - page - bytes;
  memcpy(block, init, bytes);
  memcpy(block, &bytes, sizeof bytes);
  return block;
}

/* The entries that need an experts handle, each struct at its older size and its own, in a block
 * whose next byte faults: volt8_moe_args of 48 bytes (before check_ids, which is then not read)
 * for an eager forward and a graph capture, the handle's shape and memory report. */
Test(gpu_forward, handle_entries_read_no_byte_past_the_callers_struct) {
  volt8_ctx *ctx = gpu_open();
  gpu_seed(31);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.num_experts = 64;
  host_problem problem;
  gpu_make_problem(ctx, &shape, &problem);
  volt8_experts *experts = gpu_upload(ctx, &problem, 8, 10);
  device_batch batch;
  gpu_make_batch(ctx, &problem, 8, 10, ROUTING_UNIFORM, &batch);
  const volt8_moe_args init = gpu_batch_args(&batch);
  const size_t sizes[] = {offsetof(volt8_moe_args, check_ids), sizeof(volt8_moe_args)};
  for (int i = 0; i < 2; i++) {
    void *map = NULL;
    size_t map_bytes = 0;
    const volt8_moe_args *args = guarded_struct(&map, &map_bytes, &init, sizes[i]);
    cr_assert_eq(volt8_moe_forward(experts, args, NULL), VOLT8_OK, "args of %zu bytes: %s", sizes[i],
                 volt8_last_error(ctx));
    gpu_check_output(ctx, shape.hidden, &batch, sizes[i] == sizeof(volt8_moe_args) ? "args 56" : "args 48", NULL);
    volt8_graph *graph = NULL;
    cr_assert_eq(volt8_graph_capture(experts, args, NULL, &graph), VOLT8_OK, "%s", volt8_last_error(ctx));
    cr_assert_eq(volt8_graph_launch(graph, NULL), VOLT8_OK, "%s", volt8_last_error(ctx));
    gpu_check_output(ctx, shape.hidden, &batch, "graph", NULL);
    volt8_graph_destroy(graph);
    munmap(map, map_bytes);
  }
  const volt8_moe_shape shape_init = VOLT8_MOE_SHAPE_INIT;
  void *map = NULL;
  size_t map_bytes = 0;
  volt8_moe_shape *out_shape = guarded_struct(&map, &map_bytes, &shape_init, sizeof shape_init);
  cr_assert_eq(volt8_experts_shape(experts, out_shape), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(out_shape->num_experts, 64);
  munmap(map, map_bytes);
  out_shape = guarded_struct(&map, &map_bytes, &shape_init, offsetof(volt8_moe_shape, expert_start));
  cr_assert_eq(volt8_experts_shape(experts, out_shape), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(out_shape->num_experts, 64);
  munmap(map, map_bytes);
  const volt8_memory_report memory_init = VOLT8_MEMORY_REPORT_INIT;
  volt8_memory_report *memory = guarded_struct(&map, &map_bytes, &memory_init, sizeof memory_init);
  cr_assert_eq(volt8_experts_memory(experts, memory), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_gt(memory->resident_bytes, 0);
  munmap(map, map_bytes);
  gpu_free_batch(ctx, &batch);
  volt8_experts_destroy(experts);
  gpu_free_problem(&problem);
  volt8_ctx_destroy(ctx);
}
