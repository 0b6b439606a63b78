/* GPU suite at the registry's models (runtime/checkpoint/models.h): for each model, its TP4 and TP8 rank shapes
 * (rank 0, and the first rank at the largest offset in the 128 grid when that is not 0) with 16
 * experts, through the dispatch at M = 1, 8 and 64 with the model's top-k and at top-16 (M = 1 and
 * 8), and with one variant of each family pinned at the last of those ranks. Skips with the reason where there is no GPU.
 * scripts/gpu_check.sh (model_test_shapes) carries the compute_70 kernels of these same shapes for
 * VOLT8_TARGET_ARCH=sm_70: keep the two in step. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <string.h>

#include "moe/kernels/catalogue.h"
#include "gpu_fixture.h"
#include "checkpoint/models.h"

#define MODEL_TEST_EXPERTS 16
#define MODEL_TEST_MAX_TOP_K 16

TestSuite(gpu_models, .timeout = 1800);

/* The first rank at the largest offset; 0 when every rank sits at offset 0. */
static int32_t widest_offset_rank(const volt8_model *model, int32_t tp) {
  int32_t width = model->intermediate / tp, best = 0;
  for (int32_t rank = 1; rank < tp; rank++)
    if (width * rank % 128 > width * best % 128) best = rank;
  return best;
}

/* The first variant of `family` ("cc", "mma", "tok", "hmma") among `op`'s, or NULL. */
static const char *first_of_family(char **names, int32_t count, const char *op, const char *family) {
  char prefix[32];
  int length = snprintf(prefix, sizeof prefix, "%s.%s.", op, family);
  for (int32_t i = 0; i < count; i++)
    if (strncmp(names[i], prefix, (size_t)length) == 0) return names[i];
  return NULL;
}

/* gate_up and down families run together: tok fuses the reduce into down and pairs with a cc gate_up;
 * hmma is listed only for sm_80 and newer targets. */
static void check_families(volt8_ctx *ctx, volt8_experts *experts, const volt8_moe_shape *shape,
                           const device_batch *batch, const char *label) {
  static const char *const families[4][2] = {{"cc", "cc"}, {"mma", "mma"}, {"cc", "tok"}, {"hmma", "hmma"}};
  char **names = NULL;
  int32_t count = 0;
  cr_assert_eq(volt8_codegen_list(ctx, shape, &names, &count), VOLT8_OK, "%s", volt8_last_error(ctx));
  for (int f = 0; f < 4; f++) {
    const char *gate_up = first_of_family(names, count, "gate_up", families[f][0]);
    const char *down = first_of_family(names, count, "down", families[f][1]);
    if (f == 3 && !gate_up) continue;
    cr_assert(gate_up && down, "%s: no %s / %s variant listed", label, families[f][0], families[f][1]);
    char pinned[256];
    snprintf(pinned, sizeof pinned, "%s, %s/%s", label, families[f][0], families[f][1]);
    gpu_check_forward(ctx, experts, shape->hidden, batch, gate_up, down, pinned);
  }
  volt8_codegen_names_free(names, count);
}

/* Through the dispatch; with `families`, also one variant of each family pinned (at the model's top-k). */
static void check_rank(volt8_ctx *ctx, const volt8_model *model, int32_t tp, int32_t rank, int families) {
  volt8_moe_shape shape;
  cr_assert_eq(volt8_model_rank_shape(ctx, model, tp, rank, MODEL_TEST_EXPERTS, &shape), VOLT8_OK, "%s",
               volt8_last_error(ctx));
  host_problem problem;
  gpu_make_problem(ctx, &shape, &problem);
  volt8_experts *experts = gpu_upload(ctx, &problem, 64, MODEL_TEST_MAX_TOP_K);
  const int32_t all_m[] = {1, 8, 64}, quick_m[] = {8};
  const int32_t *ms = gpu_quick_mode() ? quick_m : all_m;
  int32_t m_count = gpu_quick_mode() ? 1 : 3;
  for (int32_t mi = 0; mi < m_count; mi++) {
    const int32_t top_ks[2] = {model->top_k, MODEL_TEST_MAX_TOP_K};
    for (int k = 0; k < 2; k++) {
      if (k == 1 && ms[mi] > 8) continue; /* top-16 at M = 1 and 8 */
      device_batch batch;
      gpu_make_batch(ctx, &problem, ms[mi], top_ks[k], ROUTING_UNIFORM, &batch);
      char label[192];
      snprintf(label, sizeof label, "%s TP%d rank %d (H=%d I=%d offset %d E=%d) M=%d top_k=%d", model->name, tp, rank,
               shape.hidden, shape.intermediate, shape.intermediate_offset, shape.num_experts, ms[mi], top_ks[k]);
      gpu_check_forward(ctx, experts, shape.hidden, &batch, NULL, NULL, label);
      if (k == 0 && families) check_families(ctx, experts, &shape, &batch, label);
      gpu_free_batch(ctx, &batch);
    }
  }
  volt8_experts_destroy(experts);
  gpu_free_problem(&problem);
}

ParameterizedTestParameters(gpu_models, every_model_at_tp4_and_tp8) {
  static int32_t indices[5] = {0, 1, 2, 3, 4};
  return cr_make_param_array(int32_t, indices, (size_t)volt8_model_count());
}

ParameterizedTest(int32_t *index, gpu_models, every_model_at_tp4_and_tp8) {
  const volt8_model *model = volt8_model_at(*index);
  cr_assert_not_null(model);
  volt8_ctx *ctx = gpu_open();
  gpu_seed(0x6a09e667f3bcc909ull ^ (uint64_t)*index);
  for (int32_t tp = 4; tp <= 8; tp *= 2) {
    /* the families at the rank whose slice sits furthest into its first scale block */
    int32_t widest = widest_offset_rank(model, tp);
    check_rank(ctx, model, tp, 0, widest == 0);
    if (widest) check_rank(ctx, model, tp, widest, 1);
  }
  volt8_ctx_destroy(ctx);
}
