/* GPU suite: every gate_up and down variant against the double-precision reference, on fresh
 * random data with poisoned outputs. Skips with the reason where there is no GPU.
 * VOLT8_TARGET_ARCH=sm_70 runs the compute_70 PTX (from the cache) through the driver;
 * VOLT8_GPU_TEST_QUICK=1 shrinks the problem for the sanitizer runs. Every forward check poisons the
 * workspace first, so with early launch (sm_90) each pairing also checks the kernels' waits. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/dispatch.h"
#include "moe/kernels/catalogue.h"
#include "gpu_fixture.h"
#include "moe/experts_internal.h"
#include "reference/reference.h"

TestSuite(gpu_kernels, .timeout = 1200);

typedef struct variant_lists {
  char **names;
  int32_t count;
  const char *gate_up[128], *down[128];
  int32_t gate_up_count, down_count;
} variant_lists;

/* How most tests here begin: the device's context, the seed (printed), and a problem on the
 * reference TP4 shape with num_experts experts and fresh random data. */
static volt8_ctx *open_with_problem(uint64_t seed, int32_t num_experts, volt8_moe_shape *shape, host_problem *problem) {
  volt8_ctx *ctx = gpu_open();
  gpu_seed(seed);
  const volt8_moe_shape reference = VOLT8_MOE_SHAPE_INIT;
  *shape = reference;
  shape->num_experts = num_experts;
  gpu_make_problem(ctx, shape, problem);
  return ctx;
}

/* How those tests end: the experts, the problem and the context, freed in that order. */
static void close_with_problem(volt8_ctx *ctx, volt8_experts *experts, host_problem *problem) {
  volt8_experts_destroy(experts);
  gpu_free_problem(problem);
  volt8_ctx_destroy(ctx);
}

static void list_variants(volt8_ctx *ctx, const volt8_moe_shape *shape, variant_lists *lists) {
  memset(lists, 0, sizeof *lists);
  cr_assert_eq(volt8_codegen_list(ctx, shape, &lists->names, &lists->count), VOLT8_OK, "%s", volt8_last_error(ctx));
  for (int32_t i = 0; i < lists->count; i++) {
    if (strncmp(lists->names[i], "gate_up.", 8) == 0) {
      cr_assert_lt(lists->gate_up_count, 128, "more gate_up variants than the test holds");
      lists->gate_up[lists->gate_up_count++] = lists->names[i];
    }
    if (strncmp(lists->names[i], "down.", 5) == 0) {
      cr_assert_lt(lists->down_count, 128, "more down variants than the test holds");
      lists->down[lists->down_count++] = lists->names[i];
    }
  }
  cr_assert(lists->gate_up_count > 0 && lists->down_count > 0, "no gate_up or down variants listed");
}

/* The first variant of a family ("cc", "mma", "tok", "hmma") in a list, or NULL. */
static const char *find_family(const char *const *names, int32_t count, const char *family) {
  for (int32_t i = 0; i < count; i++) {
    const char *dot = strchr(names[i], '.');
    if (dot && strncmp(dot + 1, family, strlen(family)) == 0 && dot[1 + strlen(family)] == '.') return names[i];
  }
  return NULL;
}

static const char *first_of_family(const char *const *names, int32_t count, const char *family) {
  const char *name = find_family(names, count, family);
  cr_assert_not_null(name, "no %s variant listed", family);
  return name;
}

/* The variant-wide tests are cut into slices, one test a slice, so that a run with --jobs spreads
 * them over processes: each process loads (and the driver turns into machine code) only its slice's
 * kernels. The sanitizer runs (quick mode) keep one slice. */
#define KERNEL_SLICES 8
static int32_t kernel_slices(void) { return gpu_quick_mode() ? 1 : KERNEL_SLICES; }

static struct criterion_test_params slice_params(void) {
  static int32_t slices[KERNEL_SLICES] = {0, 1, 2, 3, 4, 5, 6, 7};
  return cr_make_param_array(int32_t, slices, (size_t)kernel_slices());
}

/* Every variant of each op (paired with the first variant of the other op) at each M; slice j takes
 * the variants whose index in the list is j modulo the slices. */
ParameterizedTestParameters(gpu_kernels, every_variant_every_m_seed_shape) { return slice_params(); }

ParameterizedTest(int32_t *slice, gpu_kernels, every_variant_every_m_seed_shape) {
  volt8_moe_shape shape;
  host_problem problem;
  volt8_ctx *ctx = open_with_problem(0x9e3779b97f4a7c15ull, gpu_quick_mode() ? 64 : 512, &shape, &problem);
  variant_lists lists;
  list_variants(ctx, &shape, &lists);
  const int32_t all_m[] = {1, 2, 3, 8, 17, 64}, quick_m[] = {17};
  const int32_t *ms = gpu_quick_mode() ? quick_m : all_m;
  int32_t m_count = gpu_quick_mode() ? 1 : 6, top_k = 10, slices = kernel_slices();
  volt8_experts *experts = gpu_upload(ctx, &problem, 64, top_k);
  for (int32_t mi = 0; mi < m_count; mi++) {
    device_batch batch;
    gpu_make_batch(ctx, &problem, ms[mi], top_k, ROUTING_UNIFORM, &batch);
    char label[96];
    snprintf(label, sizeof label, "seed shape M=%d top_k=%d", ms[mi], top_k);
    for (int32_t g = *slice; g < lists.gate_up_count; g += slices)
      gpu_check_forward(ctx, experts, shape.hidden, &batch, lists.gate_up[g], lists.down[0], label);
    for (int32_t d = *slice; d < lists.down_count; d += slices)
      gpu_check_forward(ctx, experts, shape.hidden, &batch, lists.gate_up[0], lists.down[d], label);
    gpu_free_batch(ctx, &batch);
  }
  close_with_problem(ctx, experts, &problem);
  volt8_codegen_names_free(lists.names, lists.count);
}

/* The shapes the families must serve besides the seed shape: the reference TP4 shape at every offset
 * of 32, a smaller and a larger one, and online (one-row) scales. */
static volt8_moe_shape family_shape(int32_t index) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.num_experts = 64;
  if (index < 4) {
    shape.intermediate_offset = 32 * index;
    return shape;
  }
  const volt8_moe_shape others[3] = {{sizeof shape, 2048, 128, 64, 128, 128, 0},
                                     {sizeof shape, 4096, 256, 64, 128, 128, 0},
                                     {sizeof shape, 2560, 160, 64, 1, 128, 0}};
  return others[index - 4];
}

ParameterizedTestParameters(gpu_kernels, families_over_offsets_and_top_k) {
  static int32_t indices[] = {0, 1, 2, 3, 4, 5, 6}; /* family_shape's four offsets and three others */
  return cr_make_param_array(int32_t, indices, sizeof indices / sizeof indices[0]);
}

/* One variant of each family at every offset, top_k, and the other shapes the kernels must serve
 * (one shape a test). */
ParameterizedTest(int32_t *index, gpu_kernels, families_over_offsets_and_top_k) {
  volt8_ctx *ctx = gpu_open();
  gpu_seed(0x2545f4914f6cdd1dull + (uint64_t)*index);
  const volt8_moe_shape shape = family_shape(*index);
  const int32_t top_ks[] = {1, 8, 10};
  const int32_t all_m[] = {1, 3, 17, 64}, quick_m[] = {3};
  const int32_t *ms = gpu_quick_mode() ? quick_m : all_m;
  int32_t m_count = gpu_quick_mode() ? 1 : 4;
  host_problem problem;
  gpu_make_problem(ctx, &shape, &problem);
  variant_lists lists;
  list_variants(ctx, &shape, &lists);
  /* gate_up family, down family: tok fuses the reduce into down and pairs with a cc gate_up;
   * hmma (m16n8k16) is listed only when the target is sm_80 or newer. */
  const char *families[4][2] = {{"cc", "cc"}, {"mma", "mma"}, {"cc", "tok"}, {"hmma", "hmma"}};
  int family_count = find_family(lists.gate_up, lists.gate_up_count, "hmma") ? 4 : 3;
  cr_log_info("families checked: %d (hmma %s)", family_count, family_count == 4 ? "listed" : "not listed for this target");
  volt8_experts *experts = gpu_upload(ctx, &problem, 64, 10);
  for (int k = gpu_quick_mode() ? 1 : 0; k < (gpu_quick_mode() ? 2 : 3); k++) {
    for (int32_t mi = 0; mi < m_count; mi++) {
      device_batch batch;
      gpu_make_batch(ctx, &problem, ms[mi], top_ks[k], ROUTING_UNIFORM, &batch);
      char label[160];
      snprintf(label, sizeof label, "H=%d I=%d block=%dx%d offset=%d M=%d top_k=%d", shape.hidden, shape.intermediate,
               shape.block_n, shape.block_k, shape.intermediate_offset, ms[mi], top_ks[k]);
      for (int f = 0; f < family_count; f++)
        gpu_check_forward(ctx, experts, shape.hidden, &batch,
                          first_of_family(lists.gate_up, lists.gate_up_count, families[f][0]),
                          first_of_family(lists.down, lists.down_count, families[f][1]), label);
      gpu_free_batch(ctx, &batch);
    }
  }
  close_with_problem(ctx, experts, &problem);
  volt8_codegen_names_free(lists.names, lists.count);
}

/* Skewed routing: one expert gets every token; most experts get none. */
Test(gpu_kernels, skewed_routing) {
  volt8_moe_shape shape;
  host_problem problem;
  volt8_ctx *ctx = open_with_problem(0xda942042e4dd58b5ull, gpu_quick_mode() ? 64 : 512, &shape, &problem);
  variant_lists lists;
  list_variants(ctx, &shape, &lists);
  volt8_experts *experts = gpu_upload(ctx, &problem, 64, 10);
  const routing modes[2] = {ROUTING_ONE_EXPERT, ROUTING_FEW_EXPERTS};
  const char *mode_names[2] = {"one expert gets every token", "most experts get none"};
  for (int mode = 0; mode < (gpu_quick_mode() ? 1 : 2); mode++) {
    device_batch batch;
    gpu_make_batch(ctx, &problem, 64, 10, modes[mode], &batch);
    for (int32_t g = 0; g < lists.gate_up_count; g++)
      gpu_check_forward(ctx, experts, shape.hidden, &batch, lists.gate_up[g], lists.down[0], mode_names[mode]);
    for (int32_t d = 0; d < lists.down_count; d++)
      gpu_check_forward(ctx, experts, shape.hidden, &batch, lists.gate_up[0], lists.down[d], mode_names[mode]);
    gpu_free_batch(ctx, &batch);
  }
  close_with_problem(ctx, experts, &problem);
  volt8_codegen_names_free(lists.names, lists.count);
}

/* The one-launch forward of an sm_70 target (templates/moe_single.cu) under skewed routing: many
 * work items of one expert, and pairs whose h and z rows belong to the same few experts. */
Test(gpu_kernels, one_launch_forward_under_skewed_routing) {
  volt8_moe_shape shape;
  host_problem problem;
  volt8_ctx *ctx = open_with_problem(0x3c6ef372fe94f82bull, 64, &shape, &problem);
  ctx->single_launch = ctx->target_arch < 80; /* as VOLT8_SINGLE_LAUNCH=1 sets it */
  if (!ctx->single_launch) {
    gpu_free_problem(&problem);
    volt8_ctx_destroy(ctx);
    cr_skip_test("the one-launch forward serves targets without early launch (VOLT8_TARGET_ARCH=sm_70)");
  }
  const int32_t ms[2] = {8, 25};
  volt8_experts *experts = gpu_upload(ctx, &problem, 25, 10);
  cr_assert_eq(volt8_experts_prepare(experts, ms, 2), VOLT8_OK, "%s", volt8_last_error(ctx));
  const routing modes[2] = {ROUTING_ONE_EXPERT, ROUTING_FEW_EXPERTS};
  const char *mode_names[2] = {"one expert gets every token", "most experts get none"};
  for (int mode = 0; mode < 2; mode++) {
    for (int i = 0; i < 2; i++) {
      volt8_forward_info choice = VOLT8_FORWARD_INFO_INIT;
      cr_assert_eq(volt8_forward_describe(NULL, NULL, experts, ms[i], 10, &choice), VOLT8_OK, "%s", volt8_last_error(ctx));
      cr_assert(choice.single_launch, "M=%d is not one launch (dispatch: %s, %s)", ms[i], choice.gate_up, choice.down);
      device_batch batch;
      gpu_make_batch(ctx, &problem, ms[i], 10, modes[mode], &batch);
      char label[128];
      snprintf(label, sizeof label, "one launch, %s, M=%d", mode_names[mode], ms[i]);
      gpu_check_forward(ctx, experts, shape.hidden, &batch, NULL, NULL, label);
      gpu_free_batch(ctx, &batch);
    }
  }
  close_with_problem(ctx, experts, &problem);
}

/* The forward of one gate_up, down pair against the reference, and the device's count of the
 * batch's bad ids after it. */
static void check_forward_and_bad_ids(volt8_ctx *ctx, volt8_experts *experts, int32_t hidden, const device_batch *batch,
                                      const char *const pair[2], const char *label, int32_t bad_ids) {
  gpu_check_forward(ctx, experts, hidden, batch, pair[0], pair[1], label);
  int32_t counted = -1;
  cr_assert_eq(volt8_experts_bad_id_count(experts, &counted), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_expect_eq(counted, bad_ids, "%s: device counted %d bad ids", label, counted);
}

/* With 2048 experts the route keeps 1024 ids in shared memory at once and places them with four
 * warps: 1280 and 2000 routed pairs take two tiles, uniform and skewed, with a bad id in the second
 * tile. Pairs must still be grouped in pair order for the routed kernels to match the reference. */
Test(gpu_kernels, route_over_several_id_tiles) {
  volt8_ctx *ctx = gpu_open();
  gpu_seed(0x61c8864680b583ebull);
  volt8_moe_shape shape = {sizeof shape, 256, 128, 2048, 128, 128, 0};
  host_problem problem;
  gpu_make_problem(ctx, &shape, &problem);
  volt8_experts *experts = gpu_upload(ctx, &problem, 128, 20);
  const char *pairs[3][2] = {{"gate_up.cc.bm2.bn8.w4.sk1.l16", "down.cc.bm4.bn64.w4.sk1.l2"},
                             {"gate_up.cc.bm4.bn8.w4.sk1.l16", "down.cc.bm2.bn32.w4.sk1.l4"},
                             {"gate_up.mma.bm8.bn16.w2.sk1", "down.mma.bm16.bn32.w4.sk1"}};
  const int32_t ms[2] = {128, 100}, top_ks[2] = {10, 20};
  const routing modes[2] = {ROUTING_UNIFORM, ROUTING_FEW_EXPERTS};
  for (int32_t c = 0; c < 2; c++) {
    for (int32_t mode = 0; mode < 2; mode++) {
      device_batch batch;
      gpu_make_batch(ctx, &problem, ms[c], top_ks[c], modes[mode], &batch);
      int32_t pairs_total = ms[c] * top_ks[c];
      batch.ids[pairs_total - 7] = -3;
      gpu_update_ids(ctx, &problem, &batch);
      for (int p = 0; p < 3; p++) {
        char label[160];
        snprintf(label, sizeof label, "E=2048 M=%d top_k=%d routing %d", ms[c], top_ks[c], mode);
        check_forward_and_bad_ids(ctx, experts, shape.hidden, &batch, pairs[p], label, 1);
      }
      gpu_free_batch(ctx, &batch);
    }
  }
  close_with_problem(ctx, experts, &problem);
}

/* Ids outside [0, E) through both paths: block_m == 1 on both GEMMs (no route launch, the CTAs read
 * topk_ids themselves) and a routed pair of variants; the device count of bad ids is stored by the
 * reduce every forward, so a second forward with fewer bad ids must read the new count, not a sum. */
Test(gpu_kernels, bad_ids_through_block_m_1_and_routed_paths) {
  volt8_moe_shape shape;
  host_problem problem;
  volt8_ctx *ctx = open_with_problem(0x5851f42d4c957f2dull, 64, &shape, &problem);
  volt8_experts *experts = gpu_upload(ctx, &problem, 64, 10);
  int32_t before = -1;
  cr_assert_eq(volt8_experts_bad_id_count(experts, &before), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(before, 0, "before any forward the count is %d", before);
  const char *pairs[5][2] = {{"gate_up.cc.bm1.bn8.w4.sk1.l16", "down.cc.bm1.bn64.w4.sk1.l2"},
                             {"gate_up.cc.bm1.bn4.w4.sk1.l32", "down.cc.bm2.bn64.w4.sk1.l2"},
                             {"gate_up.cc.bm2.bn8.w4.sk1.l16", "down.mma.bm8.bn32.w4.sk1"},
                             {"gate_up.cc.bm1.bn8.w4.sk1.l16", "down.tok.bm1.bn16.w4.sk1.l2"},
                             {"gate_up.cc.bm2.bn8.w4.sk1.l16", "down.tok.bm1.bn32.w4.sk1.l1"}};
  const int32_t ms[2] = {1, 17};
  for (int32_t mi = 0; mi < 2; mi++) {
    for (int32_t bad_count = 3; bad_count >= 1; bad_count -= 2) {
      device_batch batch;
      gpu_make_batch(ctx, &problem, ms[mi], 10, ROUTING_UNIFORM, &batch);
      int32_t pairs_total = ms[mi] * 10;
      for (int32_t b = 0; b < bad_count; b++) batch.ids[(b * 7 + 3) % pairs_total] = b % 2 ? -5 : 1 << 20;
      gpu_update_ids(ctx, &problem, &batch);
      for (int p = 0; p < 5; p++) {
        char label[160];
        snprintf(label, sizeof label, "bad ids M=%d bad=%d %s + %s", ms[mi], bad_count, pairs[p][0], pairs[p][1]);
        check_forward_and_bad_ids(ctx, experts, shape.hidden, &batch, pairs[p], label, bad_count);
      }
      gpu_free_batch(ctx, &batch);
    }
  }
  close_with_problem(ctx, experts, &problem);
}

/* A token-fused down computes each dot product as down.cc.bm1 with the same lanes per row does, and
 * the weighted sum as the reduce does: the two paths must give the same bits, not just pass the
 * reference. top_k 20 runs two staging passes of the fused kernel. */
Test(gpu_kernels, token_fused_down_matches_down_and_reduce_bit_for_bit) {
  volt8_moe_shape shape;
  host_problem problem;
  volt8_ctx *ctx = open_with_problem(0x14057b7ef767814full, 64, &shape, &problem);
  volt8_experts *experts = gpu_upload(ctx, &problem, 64, 20);
  const char *pairs[3][2] = {{"down.cc.bm1.bn64.w4.sk1.l2", "down.tok.bm1.bn16.w8.sk1.l2"},
                             {"down.cc.bm1.bn64.w4.sk1.l2", "down.tok.bm1.bn32.w8.sk1.l2"},
                             {"down.cc.bm1.bn32.w4.sk1.l4", "down.tok.bm1.bn16.w4.sk1.l2"}};
  const int32_t ms[3] = {1, 8, 33}, top_ks[2] = {10, 20};
  size_t bytes = (size_t)64 * shape.hidden * sizeof(uint16_t);
  uint16_t *unfused = malloc(bytes), *fused = malloc(bytes);
  cr_assert(unfused && fused);
  for (int32_t k = 0; k < 2; k++) {
    for (int32_t mi = 0; mi < 3; mi++) {
      device_batch batch;
      gpu_make_batch(ctx, &problem, ms[mi], top_ks[k], ROUTING_UNIFORM, &batch);
      batch.ids[ms[mi] * top_ks[k] / 2] = -1; /* one pair outside [0, E): both paths skip it */
      gpu_update_ids(ctx, &problem, &batch);
      size_t count = (size_t)ms[mi] * shape.hidden;
      for (int p = 0; p < 3; p++) {
        char label[200];
        snprintf(label, sizeof label, "M=%d top_k=%d %s vs %s", ms[mi], top_ks[k], pairs[p][0], pairs[p][1]);
        const char *gate_up = "gate_up.cc.bm1.bn8.w4.sk1.l16";
        gpu_check_forward(ctx, experts, shape.hidden, &batch, gate_up, pairs[p][0], label);
        cr_assert_eq(ctx->cuda->cuMemcpyDtoH(unfused, batch.d_out, count * 2), CUDA_SUCCESS);
        gpu_check_forward(ctx, experts, shape.hidden, &batch, gate_up, pairs[p][1], label);
        cr_assert_eq(ctx->cuda->cuMemcpyDtoH(fused, batch.d_out, count * 2), CUDA_SUCCESS);
        /* Bits agree only where the lanes per row do; otherwise both just pass the reference. */
        int same_lanes = strcmp(strrchr(pairs[p][0], '.'), strrchr(pairs[p][1], '.')) == 0;
        if (same_lanes) {
          size_t differ = 0;
          for (size_t i = 0; i < count; i++) differ += unfused[i] != fused[i];
          cr_expect_eq(differ, 0, "%s: %zu of %zu outputs differ in their bits", label, differ, count);
        }
      }
      gpu_free_batch(ctx, &batch);
    }
  }
  free(unfused);
  free(fused);
  close_with_problem(ctx, experts, &problem);
}

/* A down that fuses the reduce (".r1") forms each z row as the same variant without the mark does
 * and each token's sum as the reduce does, so the two paths must give the same bits. Block_m 1
 * (no route pass) and routed, top_k 10 and 20, with one pair outside [0, E) and, from M = 3, a
 * token none of whose pairs is live (its row must be zeros). Then the fused forward runs twice
 * more without the workspace being reset: each forward must leave the arrival counters at zero. */
Test(gpu_kernels, fused_reduce_down_matches_down_and_reduce_bit_for_bit) {
  volt8_moe_shape shape;
  host_problem problem;
  volt8_ctx *ctx = open_with_problem(0x3c6ef372fe94f82bull, 64, &shape, &problem);
  variant_lists lists;
  list_variants(ctx, &shape, &lists);
  const char *gate_up = NULL;
  for (int32_t i = 0; i < lists.gate_up_count && !gate_up; i++)
    if (strstr(lists.gate_up[i], ".bm1.")) gate_up = lists.gate_up[i];
  cr_assert_not_null(gate_up, "no block_m 1 gate_up listed");
  volt8_experts *experts = gpu_upload(ctx, &problem, 64, 20);
  const int32_t all_m[] = {1, 8, 33}, quick_m[] = {8}, top_ks[2] = {10, 20};
  const int32_t *ms = gpu_quick_mode() ? quick_m : all_m;
  int32_t m_count = gpu_quick_mode() ? 1 : 3, fused_count = 0;
  size_t bytes = (size_t)64 * shape.hidden * sizeof(uint16_t);
  uint16_t *unfused = malloc(bytes), *fused = malloc(bytes);
  cr_assert(unfused && fused);
  for (int32_t d = 0; d < lists.down_count; d++) {
    const char *name = lists.down[d];
    size_t length = strlen(name);
    if (length < 3 || strcmp(name + length - 3, ".r1") != 0) continue;
    char plain[96];
    snprintf(plain, sizeof plain, "%.*s", (int)(length - 3), name);
    fused_count++;
    for (int32_t k = 0; k < (gpu_quick_mode() ? 1 : 2); k++) {
      for (int32_t mi = 0; mi < m_count; mi++) {
        int32_t m = ms[mi], top_k = top_ks[k], bad = 1;
        device_batch batch;
        gpu_make_batch(ctx, &problem, m, top_k, ROUTING_UNIFORM, &batch);
        batch.ids[m * top_k / 2] = -1;
        if (m >= 3) {
          for (int32_t j = 0; j < top_k; j++) batch.ids[top_k + j] = j % 2 ? -2 : 1 << 20;
          bad += top_k;
        }
        gpu_update_ids(ctx, &problem, &batch);
        size_t count = (size_t)m * shape.hidden;
        char label[200];
        snprintf(label, sizeof label, "M=%d top_k=%d %s vs %s", m, top_k, plain, name);
        gpu_check_forward(ctx, experts, shape.hidden, &batch, gate_up, plain, label);
        cr_assert_eq(ctx->cuda->cuMemcpyDtoH(unfused, batch.d_out, count * 2), CUDA_SUCCESS);
        for (int32_t run = 0; run < 3; run++) {
          if (run == 0) {
            gpu_check_forward(ctx, experts, shape.hidden, &batch, gate_up, name, label);
          } else {
            cr_assert_eq(ctx->cuda->cuMemsetD8Async(batch.d_out, 0xFF, count * 2, NULL), CUDA_SUCCESS);
            volt8_moe_args args = gpu_batch_args(&batch);
            cr_assert_eq(volt8_moe_forward(experts, &args, NULL), VOLT8_OK, "%s: %s", label, volt8_last_error(ctx));
            gpu_check_output(ctx, shape.hidden, &batch, label, NULL);
          }
          cr_assert_eq(ctx->cuda->cuMemcpyDtoH(fused, batch.d_out, count * 2), CUDA_SUCCESS);
          size_t differ = 0, zero_row_bad = 0;
          for (size_t i = 0; i < count; i++) differ += unfused[i] != fused[i];
          if (m >= 3)
            for (int32_t c = 0; c < shape.hidden; c++) zero_row_bad += fused[shape.hidden + c] != 0;
          cr_expect_eq(differ, 0, "%s run %d: %zu of %zu outputs differ in their bits", label, run, differ, count);
          cr_expect_eq(zero_row_bad, 0, "%s run %d: %zu outputs of the token with no live pair are not zero", label,
                       run, zero_row_bad);
          int32_t counted = -1;
          cr_assert_eq(volt8_experts_bad_id_count(experts, &counted), VOLT8_OK, "%s", volt8_last_error(ctx));
          cr_expect_eq(counted, bad, "%s run %d: device counted %d bad ids, not %d", label, run, counted, bad);
        }
        gpu_free_batch(ctx, &batch);
      }
    }
  }
  cr_log_info("fused-reduce downs checked: %d", fused_count);
  if (find_family(lists.down, lists.down_count, "hmma")) cr_assert_gt(fused_count, 0, "no fused-reduce down listed");
  free(unfused);
  free(fused);
  close_with_problem(ctx, experts, &problem);
  volt8_codegen_names_free(lists.names, lists.count);
}

static int32_t block_m_of(const char *name) {
  const char *bm = strstr(name, ".bm");
  return bm ? atoi(bm + 3) : 0;
}

/* The first gate_up variant with block_m 1 (routed 0) or above 1 (routed 1) in a list, or NULL. */
static const char *first_gate_up(const variant_lists *lists, int routed) {
  for (int32_t i = 0; i < lists->gate_up_count; i++)
    if ((block_m_of(lists->gate_up[i]) > 1) == routed) return lists->gate_up[i];
  return NULL;
}

/* Early launch (sm_90 and later): down, or the token-fused down, starts while gate_up still runs,
 * and how long gate_up runs decides what an early read would see. So every gate_up variant runs
 * with every token-fused down, and every down with a block_m 1 and a routed gate_up, at the TP4
 * and TP8 ranks and few tokens. gpu_check_forward poisons the workspace: a kernel reading h, z or
 * the route's output before its wait sees NaN or -1. */
ParameterizedTestParameters(gpu_kernels, every_pairing_at_few_tokens_tp4_and_tp8) { return slice_params(); }

/* Slice j checks the forwards whose count (in the order below) is j modulo the slices. */
ParameterizedTest(int32_t *slice, gpu_kernels, every_pairing_at_few_tokens_tp4_and_tp8) {
  volt8_ctx *ctx = gpu_open();
  gpu_seed(0x2545f4914f6cdd1dull);
  const int32_t offsets[2] = {32, 80}, intermediates[2] = {160, 80};
  const int32_t all_m[] = {1, 2}, quick_m[] = {2};
  const int32_t *ms = gpu_quick_mode() ? quick_m : all_m;
  int32_t m_count = gpu_quick_mode() ? 1 : 2, top_k = 10, forwards = 0, checked = 0, slices = kernel_slices();
  for (int s = 0; s < 2; s++) {
    volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
    shape.intermediate = intermediates[s];
    shape.intermediate_offset = offsets[s];
    if (gpu_quick_mode()) shape.num_experts = 64;
    host_problem problem;
    gpu_make_problem(ctx, &shape, &problem);
    variant_lists lists;
    list_variants(ctx, &shape, &lists);
    const char *gate_up_pair[2] = {first_gate_up(&lists, 0), first_gate_up(&lists, 1)};
    cr_assert(gate_up_pair[0] && gate_up_pair[1], "no block_m 1 or no routed gate_up variant listed");
    volt8_experts *experts = gpu_upload(ctx, &problem, 64, top_k);
    for (int32_t mi = 0; mi < m_count; mi++) {
      device_batch batch;
      gpu_make_batch(ctx, &problem, ms[mi], top_k, ROUTING_UNIFORM, &batch);
      char label[96];
      snprintf(label, sizeof label, "I=%d offset %d M=%d", shape.intermediate, shape.intermediate_offset, ms[mi]);
      for (int32_t d = 0; d < lists.down_count; d++) {
        if (strncmp(lists.down[d], "down.tok.", 9) == 0) {
          for (int32_t g = 0; g < lists.gate_up_count; g++) {
            if (forwards++ % slices != *slice) continue;
            checked++;
            gpu_check_forward(ctx, experts, shape.hidden, &batch, lists.gate_up[g], lists.down[d], label);
          }
        }
        for (int g = 0; g < 2; g++) {
          if (forwards++ % slices != *slice) continue;
          checked++;
          gpu_check_forward(ctx, experts, shape.hidden, &batch, gate_up_pair[g], lists.down[d], label);
        }
      }
      gpu_free_batch(ctx, &batch);
    }
    volt8_experts_destroy(experts);
    volt8_codegen_names_free(lists.names, lists.count);
    gpu_free_problem(&problem);
  }
  cr_log_info("slice %d of %d: %d of %d forwards checked (early launch %s)", *slice, slices, checked, forwards,
              volt8_ctx_early_launch(ctx) ? "on" : "off");
  volt8_ctx_destroy(ctx);
}
