/* Every ABI entry that takes a size-prefixed struct, handed that struct at each size an older header
 * gave it (and at its own size): the struct sits at the very end of a mapped page whose next page is
 * PROT_NONE, so reading or writing one byte past the caller's block faults, in the plain build as
 * under ASan. Each call reads `size` first and nothing past it: it takes the older struct (its later
 * fields at their defaults), or refuses it naming the entry and the size, and a refused call leaves
 * the block as it was. The sizes are the header's history (docs/design.md, "ABI rules"):
 *   volt8_ctx_options     40 (0.1), 48 (0.1: early_launch_disable), 56 (0.2: nvrtc_dirs), 72 (0.3)
 *   volt8_moe_shape       32 (0.2), 40 (0.3: expert_start, global_experts; checked at its exact size)
 *   volt8_load_options    64 (0.2), 72 (0.3: expert_start, expert_count)
 *   volt8_load_report     48 (0.2), 56 (0.3: workspace_bytes)
 *   volt8_plan_report     280 (0.2), 288 (0.3: max_tokens, max_top_k)
 *   volt8_moe_args        48 (without check_ids, read only when the size holds it), 56: a GPU suite's
 *   volt8_tuning_table_info 1720 (0.4), 1728 (0.4: m_min, m_max)
 *   volt8_expert_tensors  104 (0.4), 112 (0.4: expert, the number messages name)
 * and the structs that never grew at their one size. The GPU entries that need an experts handle
 * (volt8_moe_forward, volt8_graph_capture, volt8_experts_shape, volt8_experts_memory) are in
 * tests/gpu/test_forward.c. */
#include <criterion/criterion.h>

#include "test_support.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tiny_checkpoint.h"
#include "volt8.h"

TestSuite(abi_sizes, .timeout = 120);

/* `bytes` bytes that end where a PROT_NONE page begins. */
typedef struct guarded {
  unsigned char *map;
  size_t map_bytes;
  unsigned char *block;
  size_t bytes;
} guarded;

/* A guarded block holding the first `bytes` of `init` with its size field set to `bytes`. */
static void *guarded_struct(guarded *g, const void *init, size_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  cr_assert(bytes % 8 == 0 && bytes >= sizeof(size_t), "test bug: size %zu", bytes);
  g->map_bytes = ((bytes + page - 1) / page + 1) * page;
  g->map = mmap(NULL, g->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert(g->map != MAP_FAILED, "mmap");
  cr_assert_eq(mprotect(g->map + g->map_bytes - page, page, PROT_NONE), 0, "mprotect");
  g->bytes = bytes;
  g->block = g->map + g->map_bytes - page - bytes;
  memcpy(g->block, init, bytes);
  memcpy(g->block, &bytes, sizeof bytes);
  return g->block;
}

static void guarded_free(guarded *g) { munmap(g->map, g->map_bytes); }

static char checkpoint_dir[256];
static void make_checkpoint(void) {
  snprintf(checkpoint_dir, sizeof checkpoint_dir, "/tmp/volt8-abi-sizes-%ld", (long)getpid());
  cr_assert(tiny_checkpoint_write(checkpoint_dir, 2), "cannot write the checkpoint in %s", checkpoint_dir);
}
static void remove_checkpoint(void) { test_remove_tree(checkpoint_dir); }

/* A refusal that names the entry and the size, and leaves the caller's block untouched. */
static void expect_refused(volt8_ctx *ctx, volt8_status status, const char *entry, const guarded *g,
                           const unsigned char *before) {
  char size_text[32];
  snprintf(size_text, sizeof size_text, "%zu", g->bytes);
  const char *message = volt8_last_error(ctx);
  cr_assert_eq(status, VOLT8_ERR_INVALID_ARGUMENT, "%s took a struct of %zu bytes: %s", entry, g->bytes,
               volt8_status_string(status));
  cr_assert(strstr(message, entry) && strstr(message, size_text), "%s at %zu bytes: the refusal \"%s\" names "
            "neither the entry nor the size", entry, g->bytes, message);
  if (before) cr_assert(memcmp(g->block, before, g->bytes) == 0, "%s changed a struct it refused", entry);
}

static const size_t OLD_SHAPE = offsetof(volt8_moe_shape, expert_start); /* 0.2's 32 bytes */

Test(abi_sizes, ctx_options_at_every_size) {
  const size_t sizes[] = {offsetof(volt8_ctx_options, early_launch_disable), offsetof(volt8_ctx_options, nvrtc_dirs),
                          offsetof(volt8_ctx_options, nvrtc_dir_list), sizeof(volt8_ctx_options)};
  cr_assert_eq(sizes[0], 40);
  cr_assert_eq(sizes[2], 56);
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    volt8_ctx_options init = VOLT8_CTX_OPTIONS_INIT;
    init.device = -1;
    init.cache_disable = 1;
    guarded g;
    volt8_ctx *ctx = NULL;
    volt8_status status = volt8_ctx_create(guarded_struct(&g, &init, sizes[i]), &ctx);
    cr_assert_eq(status, VOLT8_OK, "volt8_ctx_create at %zu bytes: %s", sizes[i], volt8_last_error(NULL));
    volt8_ctx_destroy(ctx);
    guarded_free(&g);
  }
}

/* Each entry that reads a shape, given 0.2's 32-byte shape: refused naming the entry (not a callee)
 * and the size; and given this header's shape, read to its last byte and no further. */
Test(abi_sizes, shape_takers_refuse_the_old_shape_by_name) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  const volt8_moe_shape init = VOLT8_MOE_SHAPE_INIT;
  static const char *const entries[] = {"volt8_forward_describe", "volt8_shape_layout", "volt8_variant_count",
                                        "volt8_variant_name", "volt8_variant_compile", "volt8_experts_create_from_host",
                                        "volt8_reference_moe_forward"};
  uint8_t w13[1], w2[1];
  uint16_t s13[1], s2[1];
  volt8_host_experts host = {sizeof host, w13, s13, w2, s2};
  for (size_t entry = 0; entry < sizeof entries / sizeof entries[0]; entry++) {
    const size_t sizes[] = {OLD_SHAPE, sizeof(volt8_moe_shape)};
    for (size_t i = 0; i < 2; i++) {
      guarded g;
      const volt8_moe_shape *shape = guarded_struct(&g, &init, sizes[i]);
      unsigned char before[sizeof init];
      memcpy(before, shape, sizes[i]);
      volt8_forward_info info = VOLT8_FORWARD_INFO_INIT;
      volt8_moe_layout layout = VOLT8_MOE_LAYOUT_INIT;
      volt8_experts *experts = NULL;
      int32_t count = 0;
      char name[128];
      volt8_status status = VOLT8_ERR_INTERNAL, expected = VOLT8_OK;
      switch (entry) {
        case 0: status = volt8_forward_describe(ctx, shape, NULL, 8, 10, &info); break;
        case 1: status = volt8_shape_layout(ctx, shape, &layout); break;
        case 2: status = volt8_variant_count(ctx, shape, &count); break;
        case 3: status = volt8_variant_name(ctx, shape, 0, name, sizeof name); break;
        case 4:
          status = volt8_variant_compile(ctx, shape, "no.such.variant", NULL);
          expected = VOLT8_ERR_NOT_FOUND;
          break;
        case 5:
          status = volt8_experts_create_from_host(ctx, shape, &host, 8, 10, &experts);
          expected = VOLT8_ERR_NO_DEVICE; /* a context without a device */
          break;
        default: status = volt8_reference_moe_forward(ctx, shape, &host, NULL, NULL, NULL, 0, 10, NULL); break;
      }
      if (sizes[i] == OLD_SHAPE) expect_refused(ctx, status, entries[entry], &g, before);
      else cr_assert_eq(status, expected, "%s: %s", entries[entry], volt8_last_error(ctx));
      cr_assert_null(experts);
      guarded_free(&g);
    }
  }
  volt8_ctx_destroy(ctx);
}

/* Shapes an entry fills whole: a 32-byte one is refused and left as it was, never written past. */
Test(abi_sizes, filled_shapes_are_never_written_past, .init = make_checkpoint, .fini = remove_checkpoint) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = checkpoint_dir;
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_OK, "%s", volt8_last_error(ctx));
  const volt8_moe_shape init = VOLT8_MOE_SHAPE_INIT;
  const size_t sizes[] = {OLD_SHAPE, sizeof(volt8_moe_shape)};
  for (size_t i = 0; i < 2; i++) {
    for (int entry = 0; entry < 2; entry++) {
      guarded g;
      volt8_moe_shape *shape = guarded_struct(&g, &init, sizes[i]);
      memset((char *)shape + sizeof(size_t), 0x5a, sizes[i] - sizeof(size_t));
      unsigned char before[sizeof init];
      memcpy(before, shape, sizes[i]);
      const char *name = entry ? "volt8_shard_rank_shape" : "volt8_plan_rank";
      volt8_status status = entry ? volt8_shard_rank_shape(ctx, 256, 640, 4, 1, 0, shape)
                                  : volt8_plan_rank(ctx, &plan, 0, shape, NULL);
      if (sizes[i] == OLD_SHAPE) {
        expect_refused(ctx, status, name, &g, before);
      } else {
        cr_assert_eq(status, VOLT8_OK, "%s: %s", name, volt8_last_error(ctx));
        cr_assert_eq(shape->size, sizeof(volt8_moe_shape));
        cr_assert_eq(shape->block_k, 128, "%s did not fill the shape", name);
      }
      guarded_free(&g);
    }
  }
  volt8_ctx_destroy(ctx);
}

/* Load options of 0.2 (64 bytes, before expert_start and expert_count) are read to their end: a plan
 * and a host load of all experts, the experts' load refused for want of a device; the reports of
 * 0.2 (48 and 280 bytes) are filled up to their size. */
Test(abi_sizes, load_options_and_reports_of_older_sizes, .init = make_checkpoint, .fini = remove_checkpoint) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  const size_t option_sizes[] = {offsetof(volt8_load_options, expert_start), sizeof(volt8_load_options)};
  const size_t report_sizes[] = {offsetof(volt8_load_report, workspace_bytes), sizeof(volt8_load_report)};
  const size_t plan_sizes[] = {offsetof(volt8_plan_report, max_tokens), sizeof(volt8_plan_report)};
  cr_assert_eq(option_sizes[0], 64);
  cr_assert_eq(report_sizes[0], 48);
  cr_assert_eq(plan_sizes[0], 280);
  for (size_t o = 0; o < 2; o++) {
    for (size_t r = 0; r < 2; r++) {
      guarded report_block, plan_block, options_block;
      volt8_load_report report_init = VOLT8_LOAD_REPORT_INIT;
      volt8_load_report *report = guarded_struct(&report_block, &report_init, report_sizes[r]);
      volt8_load_options options_init = VOLT8_LOAD_OPTIONS_INIT;
      options_init.checkpoint_dir = checkpoint_dir;
      options_init.report = report;
      volt8_load_options *options = guarded_struct(&options_block, &options_init, option_sizes[o]);
      volt8_plan_report plan_init = VOLT8_PLAN_REPORT_INIT;
      volt8_plan_report *plan = guarded_struct(&plan_block, &plan_init, plan_sizes[r]);
      cr_assert_eq(volt8_plan(ctx, options, plan), VOLT8_OK, "volt8_plan (options %zu, report %zu, plan %zu): %s",
                   option_sizes[o], report_sizes[r], plan_sizes[r], volt8_last_error(ctx));
      cr_assert_eq(plan->num_experts, 2);
      cr_assert_eq(report->route, VOLT8_ROUTE_NATIVE);
      volt8_memory_report memory_init = VOLT8_MEMORY_REPORT_INIT;
      guarded memory_block;
      volt8_memory_report *memory = guarded_struct(&memory_block, &memory_init, sizeof memory_init);
      cr_assert_eq(volt8_plan_rank(ctx, plan, 0, NULL, memory), VOLT8_OK, "volt8_plan_rank (plan %zu): %s",
                   plan_sizes[r], volt8_last_error(ctx));
      cr_assert_gt(memory->weight_bytes, 0);
      cr_assert_eq(memory->workspace_bytes != 0, r == 1, "an older plan report holds no workspace size");
      volt8_host_checkpoint *host = NULL;
      cr_assert_eq(volt8_checkpoint_load_host(ctx, options, &host), VOLT8_OK, "volt8_checkpoint_load_host: %s",
                   volt8_last_error(ctx));
      cr_assert_eq(host->shape.num_experts, 2);
      volt8_host_checkpoint_free(host);
      volt8_experts *experts = NULL;
      cr_assert_eq(volt8_experts_load(ctx, options, &experts), VOLT8_ERR_NO_DEVICE, "volt8_experts_load: %s",
                   volt8_last_error(ctx));
      guarded_free(&memory_block);
      guarded_free(&plan_block);
      guarded_free(&options_block);
      guarded_free(&report_block);
    }
  }
  volt8_ctx_destroy(ctx);
}

/* volt8_expert_shard_host's tensors at 0.4's first size (104 bytes, before `expert`) and at its own,
 * and its output at its one size, read to their last byte; a refusal names the caller's expert, or
 * expert 0 for the older struct. */
Test(abi_sizes, expert_tensors_and_host_experts) {
  enum { H = 128, I = 128 };
  static uint8_t gate[I * H], up[I * H], down[H * I];
  memset(gate, 0x38, sizeof gate);
  memset(up, 0x30, sizeof up);
  memset(down, 0x28, sizeof down);
  const float scale = 1.0f;
  volt8_expert_tensors tensors_init = VOLT8_EXPERT_TENSORS_INIT;
  tensors_init.hidden = H;
  tensors_init.intermediate = I;
  tensors_init.weight_dtype = "F8_E4M3";
  tensors_init.scale_dtype = "F32";
  const void *weights[3] = {gate, up, down};
  for (int p = 0; p < 3; p++) {
    tensors_init.weights[p] = weights[p];
    tensors_init.scales[p] = &scale;
  }
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  cr_assert_eq(volt8_shard_rank_shape(NULL, H, I, 1, 0, 0, &shape), VOLT8_OK, "%s", volt8_last_error(NULL));
  volt8_moe_layout layout = VOLT8_MOE_LAYOUT_INIT;
  cr_assert_eq(volt8_shape_layout(NULL, &shape, &layout), VOLT8_OK);
  uint8_t *w13 = malloc(2 * I * H), *w2 = malloc(H * I);
  uint16_t *s13 = malloc(2 * sizeof *s13 * layout.s13_row_blocks * layout.s13_k_blocks),
           *s2 = malloc(sizeof *s2 * layout.s2_row_blocks * layout.s2_k_blocks);
  volt8_host_experts out_init = {sizeof out_init, w13, s13, w2, s2};
  tensors_init.expert = 7;
  const size_t sizes[] = {offsetof(volt8_expert_tensors, expert), sizeof tensors_init};
  cr_assert_eq(sizes[0], 104);
  for (size_t i = 0; i < 2; i++) {
    guarded tensors_block, out_block;
    const volt8_expert_tensors *tensors = guarded_struct(&tensors_block, &tensors_init, sizes[i]);
    const volt8_host_experts *out = guarded_struct(&out_block, &out_init, sizeof out_init);
    memset(w13, 0, 2 * I * H);
    cr_assert_eq(volt8_expert_shard_host(NULL, tensors, 1, 0, 0, out), VOLT8_OK, "%zu bytes: %s", sizes[i],
                 volt8_last_error(NULL));
    cr_assert_eq(w13[0], 0x38);
    cr_assert_eq(w2[0], 0x28);
    up[5 * H + 3] = 0x7f; /* the E4M3 NaN code */
    cr_assert_neq(volt8_expert_shard_host(NULL, tensors, 1, 0, 0, out), VOLT8_OK, "a NaN code was taken");
    const char *expected = i ? "up_proj (expert 7)" : "up_proj (expert 0)";
    cr_assert(strstr(volt8_last_error(NULL), expected), "no \"%s\" in: %s", expected, volt8_last_error(NULL));
    up[5 * H + 3] = 0x30;
    guarded_free(&tensors_block);
    guarded_free(&out_block);
  }
  free(w13);
  free(w2);
  free(s13);
  free(s2);
}

/* The reports that never grew, each at its one size, and the tuning table's at 1720 bytes (0.4 before
 * m_min and m_max) and 1728; the sampler's args on the host and, without a device, on the GPU. */
Test(abi_sizes, reports_and_sampler_args) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  guarded g;
  volt8_moe_layout layout_init = VOLT8_MOE_LAYOUT_INIT;
  volt8_moe_layout *layout = guarded_struct(&g, &layout_init, sizeof layout_init);
  cr_assert_eq(volt8_shape_layout(ctx, &shape, layout), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(layout->model_experts, 512);
  guarded_free(&g);

  volt8_forward_info info_init = VOLT8_FORWARD_INFO_INIT;
  const size_t info_sizes[] = {offsetof(volt8_forward_info, down), sizeof info_init};
  for (size_t i = 0; i < 2; i++) {
    volt8_forward_info *info = guarded_struct(&g, &info_init, info_sizes[i]);
    cr_assert_eq(volt8_forward_describe(ctx, &shape, NULL, 8, 10, info), VOLT8_OK, "%s", volt8_last_error(ctx));
    cr_assert(strncmp(info->gate_up, "gate_up.", 8) == 0, "%s", info->gate_up);
    guarded_free(&g);
  }

  int32_t candidates = 0;
  cr_assert_eq(volt8_nvrtc_candidate_count(ctx, &candidates, NULL), VOLT8_OK);
  cr_assert_gt(candidates, 0);
  volt8_nvrtc_candidate candidate_init = VOLT8_NVRTC_CANDIDATE_INIT;
  volt8_nvrtc_candidate *candidate = guarded_struct(&g, &candidate_init, sizeof candidate_init);
  cr_assert_eq(volt8_nvrtc_candidate_get(ctx, 0, candidate), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_neq(candidate->origin[0], '\0');
  guarded_free(&g);

  volt8_cache_report cache_init = VOLT8_CACHE_REPORT_INIT;
  volt8_cache_report *cache = guarded_struct(&g, &cache_init, sizeof cache_init);
  cr_assert_eq(volt8_cache_report_get(ctx, cache), VOLT8_OK, "%s", volt8_last_error(ctx));
  guarded_free(&g);

  int32_t tables = 0;
  cr_assert_eq(volt8_tuning_table_count(70, NULL, &tables), VOLT8_OK);
  cr_assert_gt(tables, 0);
  volt8_tuning_table_info table_init = VOLT8_TUNING_TABLE_INFO_INIT;
  const size_t table_sizes[] = {offsetof(volt8_tuning_table_info, m_min), sizeof table_init};
  cr_assert_eq(table_sizes[0], 1720);
  for (size_t i = 0; i < 2; i++) {
    volt8_tuning_table_info *table = guarded_struct(&g, &table_init, table_sizes[i]);
    cr_assert_eq(volt8_tuning_table_get(70, NULL, 0, table), VOLT8_OK, "%s", volt8_last_error(NULL));
    cr_assert_eq(table->valid, 1, "%s", table->problem);
    guarded_free(&g);
  }

  volt8_rejection_args args_init = VOLT8_REJECTION_ARGS_INIT;
  int32_t out_ids[1], accepted[1];
  args_init.vocab = 4;
  args_init.out_ids = out_ids;
  args_init.num_accepted = accepted;
  const volt8_rejection_args *args = guarded_struct(&g, &args_init, sizeof args_init);
  cr_assert_eq(volt8_rejection_sample_host(args), VOLT8_OK, "%s", volt8_last_error(NULL));
  cr_assert_eq(volt8_rejection_sample(ctx, args, NULL), VOLT8_ERR_NO_DEVICE, "%s", volt8_last_error(ctx));
  guarded_free(&g);
  volt8_ctx_destroy(ctx);
}
