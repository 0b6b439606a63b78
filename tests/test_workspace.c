/* The forward's workspace at prefill sizes, checked without a GPU: its bytes in 64 bits, the
 * routed-pair limit and its message, the per-launch counters the route writes, and the load and
 * prepare paths refusing what the limit refuses before they need a device. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/ctx_internal.h"
#include "moe/kernels/catalogue.h"
#include "moe/experts_internal.h"
#include "moe/kernels/moe_layout.h"
#include "test_support.h"

TestSuite(workspace, .timeout = 30);

static volt8_moe_shape shape_of(int32_t hidden, int32_t intermediate, int32_t experts) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.hidden = hidden;
  shape.intermediate = intermediate;
  shape.num_experts = experts;
  shape.intermediate_offset = 0;
  return shape;
}

static unsigned __int128 aligned(unsigned __int128 bytes) {
  return (bytes + VOLT8_DEVICE_ALIGN - 1) / VOLT8_DEVICE_ALIGN * VOLT8_DEVICE_ALIGN;
}

/* The workspace's bytes as moe_layout.h lays it out, in 128 bits. */
static unsigned __int128 expected_bytes(const volt8_moe_shape *shape, int64_t tokens, int64_t top_k) {
  unsigned __int128 pairs = (unsigned __int128)tokens * top_k;
  unsigned __int128 launches = (pairs + VOLT8_LAUNCH_ROWS - 1) / VOLT8_LAUNCH_ROWS;
  unsigned __int128 tiles = ((unsigned __int128)shape->hidden + 31) / 32;
  return aligned(pairs * 4) + 2 * aligned(pairs * 16) + aligned((launches + 1) * 16) +
         aligned(pairs * shape->intermediate * 2) + aligned(pairs * shape->hidden * 4) + aligned(tokens * tiles * 4) +
         aligned((1 + pairs) * 4);
}

static void expect_plan(const volt8_moe_shape *shape, int32_t tokens, int32_t top_k, int32_t expected_top_k) {
  volt8_moe_workspace plan;
  cr_assert_eq(volt8_moe_workspace_plan(NULL, shape, tokens, top_k, &plan), VOLT8_OK, "%d x %d: %s", tokens, top_k,
               volt8_last_error(NULL));
  unsigned __int128 expected = expected_bytes(shape, tokens, expected_top_k);
  cr_assert_eq(plan.max_top_k, expected_top_k);
  cr_assert_eq(plan.pairs, (int64_t)tokens * expected_top_k);
  cr_assert_eq(plan.routed_launches, (plan.pairs + VOLT8_LAUNCH_ROWS - 1) / VOLT8_LAUNCH_ROWS);
  cr_assert(plan.total_bytes == expected, "%d x %d of hidden %d, intermediate %d: %llu bytes, expected %.0f", tokens,
            top_k, shape->hidden, shape->intermediate, (unsigned long long)plan.total_bytes, (double)expected);
}

/* DeepSeek-V3's experts whole (7168 x 2048, 256 experts): z alone is 15 GB at 32768 x 16, past 2^32. */
Test(workspace, bytes_at_32768_tokens_of_16_experts_are_exact) {
  volt8_moe_shape shape = shape_of(7168, 2048, 256);
  expect_plan(&shape, 32768, 16, 16);
  volt8_moe_workspace plan;
  cr_assert_eq(volt8_moe_workspace_plan(NULL, &shape, 32768, 16, &plan), VOLT8_OK);
  cr_assert_eq(plan.region_bytes[VOLT8_WORKSPACE_Z], 524288ull * 7168 * 4);
  cr_assert_eq(plan.routed_launches, 9, "524288 pairs take 9 launches of 65535 rows");
  cr_assert_gt(plan.total_bytes, (uint64_t)UINT32_MAX);
  expect_plan(&shape, 65536, 16, 16);
  expect_plan(&shape, 1 << 20, 16, 16);
}

/* At the pair limit and the largest hidden and intermediate a shape can have, nothing wraps. */
Test(workspace, bytes_at_the_pair_limit_do_not_wrap) {
  volt8_moe_shape shape = shape_of(INT32_MAX / 16 * 16, INT32_MAX / 16 * 16, 2048);
  expect_plan(&shape, VOLT8_MAX_ROUTED_PAIRS / 16, 16, 16);
  expect_plan(&shape, VOLT8_MAX_ROUTED_PAIRS, 1, 1);
  shape = shape_of(16, 16, 1);
  expect_plan(&shape, VOLT8_MAX_ROUTED_PAIRS, 16, 1);
}

/* max_top_k counts at most the model's experts: with expert parallelism, those of every rank. */
Test(workspace, top_k_is_capped_at_the_model_experts) {
  volt8_moe_shape shape = shape_of(256, 640, 6);
  expect_plan(&shape, 40000, 16, 6);
  shape.num_experts = 2;
  shape.global_experts = 6;
  shape.expert_start = 2;
  expect_plan(&shape, 40000, 16, 6);
}

static void expect_refused(const volt8_moe_shape *shape, int32_t tokens, int32_t top_k, const char *first,
                           const char *second) {
  volt8_moe_workspace plan;
  cr_assert_eq(volt8_moe_workspace_plan(NULL, shape, tokens, top_k, &plan), VOLT8_ERR_INVALID_ARGUMENT,
               "%d x %d accepted", tokens, top_k);
  const char *message = volt8_last_error(NULL);
  cr_assert(strstr(message, first) && strstr(message, second), "%d x %d: \"%s\" does not say \"%s\" and \"%s\"", tokens,
            top_k, message, first, second);
}

Test(workspace, sizes_past_the_limit_are_refused_naming_it) {
  volt8_moe_shape shape = shape_of(7168, 2048, 256);
  expect_refused(&shape, VOLT8_MAX_ROUTED_PAIRS / 16 + 1, 16, "max_tokens 67108865 x max_top_k 16",
                 "limit of 1073741824");
  expect_refused(&shape, INT32_MAX, 256, "max_tokens 2147483647 x max_top_k 256", "limit of 1073741824");
  expect_refused(&shape, 0, 16, "max_tokens 0", "positive");
  expect_refused(&shape, -5, 16, "max_tokens -5", "positive");
  expect_refused(&shape, 64, 0, "max_top_k 0", "positive");
  shape.num_experts = 70000;
  expect_refused(&shape, 1, 70000, "max_top_k 70000", "65535");
}

/* The load path refuses them before it asks for a device; 32768 x 16, refused by the old limit of
 * 65535 pairs, passes on to the device check. */
Test(workspace, create_from_host_checks_the_limit_before_the_device) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shape = shape_of(256, 128, 4);
  static uint8_t w13[4 * 2 * 128 * 256], w2[4 * 256 * 128];
  static uint16_t s13[4 * 2 * 2], s2[4 * 2 * 1];
  volt8_host_experts host = {sizeof host, w13, s13, w2, s2};
  volt8_experts *experts = (volt8_experts *)1;
  cr_assert_eq(volt8_experts_create_from_host(ctx, &shape, &host, 32768, 4, &experts), VOLT8_ERR_NO_DEVICE, "%s",
               volt8_last_error(ctx));
  cr_assert_null(experts);
  shape.num_experts = 64;
  cr_assert_eq(volt8_experts_create_from_host(ctx, &shape, &host, VOLT8_MAX_ROUTED_PAIRS / 8, 16, &experts),
               VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(ctx), "limit of 1073741824"), "%s", volt8_last_error(ctx));
  cr_assert_null(experts);
  volt8_ctx_destroy(ctx);
}

/* The route writes the item counts of as many launches as the launcher makes of LAUNCH_ROWS rows. */
Test(workspace, the_route_counts_items_per_launch_of_the_launchers_rows) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  volt8_kernel_source source = {0};
  cr_assert_eq(volt8_codegen_emit(ctx, &shape, "route", &source), VOLT8_OK, "%s", volt8_last_error(ctx));
  char expected[64];
  snprintf(expected, sizeof expected, "constexpr int kLaunchRows = %d;", VOLT8_LAUNCH_ROWS);
  cr_assert(strstr(source.source, expected), "the route does not hold \"%s\"", expected);
  volt8_kernel_source_free(&source);
  volt8_ctx_destroy(ctx);
}

/* The route of many pairs: ranges only past the one-CTA route's tile, each of about
 * VOLT8_ROUTE_PART_PAIRS pairs and at most VOLT8_ROUTE_MAX_PARTS of them, and counts that always fit the
 * z region they borrow (num_pairs rows of hidden floats, hidden at least 16) for every expert count the
 * kernels take. */
Test(workspace, route_parts_cut_the_pairs_and_fit_in_z) {
  cr_assert_eq(volt8_route_part_count(1), 0);
  cr_assert_eq(volt8_route_part_count(VOLT8_ROUTE_PARTS_MIN_PAIRS), 0, "the one CTA's tile is enough");
  cr_assert_eq(volt8_route_part_count(VOLT8_ROUTE_PARTS_MIN_PAIRS + 1),
               (VOLT8_ROUTE_PARTS_MIN_PAIRS + VOLT8_ROUTE_PART_PAIRS) / VOLT8_ROUTE_PART_PAIRS);
  cr_assert_eq(volt8_route_part_count(131072), 64);
  cr_assert_eq(volt8_route_part_count(VOLT8_MAX_ROUTED_PAIRS), VOLT8_ROUTE_MAX_PARTS);
  const int64_t pair_counts[] = {VOLT8_ROUTE_PARTS_MIN_PAIRS + 1, 10000, 65536, 131072, 524288, VOLT8_MAX_ROUTED_PAIRS};
  const int32_t expert_counts[] = {1, 256, 512, VOLT8_SHAPE_MAX_EXPERTS};
  for (size_t i = 0; i < sizeof pair_counts / sizeof pair_counts[0]; i++) {
    int32_t parts = volt8_route_part_count(pair_counts[i]);
    cr_assert_gt(parts, 0);
    cr_assert_leq(parts, VOLT8_ROUTE_MAX_PARTS);
    for (size_t e = 0; e < sizeof expert_counts / sizeof expert_counts[0]; e++)
      cr_assert_leq(volt8_route_part_bytes(parts, expert_counts[e]), pair_counts[i] * 16 * 4,
                    "%lld pairs, %d experts: the counts pass z", (long long)pair_counts[i], expert_counts[e]);
  }
  cr_assert_eq(volt8_route_part_bytes(64, 256), (64 * 257 + 1) * 4);
}

/* route_parts' three launches: a CTA a range and one more to count, one to scan, a CTA a range to
 * place; its template takes the route's constants. */
Test(workspace, route_parts_launches_its_three_passes) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  volt8_kernel_source source = {0};
  cr_assert_eq(volt8_codegen_emit(ctx, &shape, "route_parts", &source), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(source.variant.kind, VOLT8_KIND_ROUTE_PARTS);
  char expected[64];
  snprintf(expected, sizeof expected, "constexpr int kLaunchRows = %d;", VOLT8_LAUNCH_ROWS);
  cr_assert(strstr(source.source, expected), "route_parts does not hold \"%s\"", expected);
  const unsigned grids[3] = {64 + 1, 1, 64};
  for (int pass = 0; pass < 3; pass++) {
    volt8_launch_counts counts = {.num_pairs = 131072, .route_parts = 64, .route_pass = pass};
    volt8_launch_size size = volt8_variant_launch_size(&source.variant, &shape, &counts);
    cr_assert_eq(size.grid_x, grids[pass], "pass %d", pass);
    cr_assert_eq(size.grid_y, 1);
    cr_assert_eq(size.threads, (unsigned)source.threads);
  }
  volt8_kernel_source_free(&source);
  volt8_ctx_destroy(ctx);
}
