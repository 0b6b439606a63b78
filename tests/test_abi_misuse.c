/* ABI misuse: every public function of volt8.h called with NULL pointers, size fields that are 0,
 * too small or too large, out-of-range values and forged reports returns an error status (with a
 * message), never crashes, and never writes past what its caller's struct holds. Destroying one
 * handle leaves its neighbours working. Contexts have no device (device = -1), so GPU entry points
 * answer VOLT8_ERR_NO_DEVICE or VOLT8_ERR_INVALID_ARGUMENT on any machine. */
#include <criterion/criterion.h>

#include "test_support.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tiny_checkpoint.h"
#include "volt8.h"

TestSuite(abi_misuse, .timeout = 120);

/* Sizes a caller may put in a size field by mistake, for a struct of `good` bytes. */
#define BAD_SIZES(good) {0, 1, sizeof(size_t) - 1, (good) + 1, (good) + 4096, SIZE_MAX}
#define BAD_SIZE_COUNT 6

/* A failure with a message: from ctx's, or the thread's when ctx is NULL. */
#define expect_error(ctx, call, expected)                                                                         \
  do {                                                                                                          \
    volt8_status status_ = (call);                                                                              \
    cr_assert_eq(status_, (expected), "%s returned %s, expected %s: %s", #call, volt8_status_string(status_), \
                 volt8_status_string(expected), volt8_last_error(ctx));                                         \
    cr_assert_str_neq(volt8_last_error(ctx), "", "%s failed without a message", #call);                        \
  } while (0)

Test(abi_misuse, version_and_names_take_anything) {
  cr_assert_eq(volt8_version_number(), VOLT8_VERSION_NUMBER);
  cr_assert_not_null(volt8_version_string());
  const int values[] = {INT_MIN, -1, 16, 1000, INT_MAX};
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
    cr_assert_str_eq(volt8_status_string((volt8_status)values[i]), "unknown status");
    cr_assert_str_eq(volt8_route_name(values[i]), "unknown");
  }
  cr_assert_str_eq(volt8_route_name(0), "unknown");
  cr_assert_not_null(volt8_last_error(NULL));
}

Test(abi_misuse, destroy_and_free_accept_null) {
  volt8_ctx_destroy(NULL);
  volt8_experts_destroy(NULL);
  volt8_graph_destroy(NULL);
  volt8_host_checkpoint_free(NULL);
}

Test(abi_misuse, ctx_create) {
  volt8_ctx *ctx = (volt8_ctx *)0x1;
  expect_error(NULL, volt8_ctx_create(NULL, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  expect_error(NULL, volt8_ctx_create(&options, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  const size_t sizes[] = BAD_SIZES(sizeof options);
  for (int i = 0; i < BAD_SIZE_COUNT; i++) {
    options.size = sizes[i];
    ctx = (volt8_ctx *)0x1;
    expect_error(NULL, volt8_ctx_create(&options, &ctx), VOLT8_ERR_INVALID_ARGUMENT);
    cr_assert_null(ctx, "size %zu: *out_ctx not cleared", sizes[i]);
  }
  options = (volt8_ctx_options)VOLT8_CTX_OPTIONS_INIT;
  const char *const archs[] = {"", "sm_", "sm_7", "sm_700", "sm_70x", "compute_70", "sm_-70", "sm_99999999999999999999"};
  for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
    options.target_arch = archs[i];
    expect_error(NULL, volt8_ctx_create(&options, &ctx), VOLT8_ERR_INVALID_ARGUMENT);
  }
  options = (volt8_ctx_options)VOLT8_CTX_OPTIONS_INIT;
  options.device = 4096; /* absent: still a context, with no device */
  options.cache_disable = 1;
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_OK, "%s", volt8_last_error(NULL));
  expect_error(ctx, volt8_ctx_require_device(ctx), VOLT8_ERR_NO_DEVICE);
  volt8_ctx_destroy(ctx);
  options.device = INT32_MIN;
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_OK, "%s", volt8_last_error(NULL));
  expect_error(ctx, volt8_ctx_require_device(ctx), VOLT8_ERR_NO_DEVICE);
  volt8_ctx_destroy(ctx);
}

Test(abi_misuse, ctx_queries) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  char arch[16];
  expect_error(NULL, volt8_ctx_target_arch(NULL, arch, sizeof arch), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_ctx_target_arch(ctx, NULL, sizeof arch), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_ctx_target_arch(ctx, arch, 0), VOLT8_ERR_INVALID_ARGUMENT);
  memset(arch, 'x', sizeof arch);
  expect_error(ctx, volt8_ctx_target_arch(ctx, arch, 3), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_eq(arch[3], 'x', "wrote past buf_size");
  expect_error(NULL, volt8_ctx_require_device(NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_ctx_require_device(ctx), VOLT8_ERR_NO_DEVICE);
  volt8_ctx_destroy(ctx);
}

/* volt8_experts_shape needs a handle and a sized output; volt8_forward_describe either a handle or a
 * context and a shape, positive counts, and writes no more than the caller's size. */
Test(abi_misuse, experts_shape_and_forward_describe) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  expect_error(NULL, volt8_experts_shape(NULL, &shape), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(NULL, volt8_experts_shape(NULL, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_forward_info info = VOLT8_FORWARD_INFO_INIT;
  expect_error(ctx, volt8_forward_describe(ctx, &shape, NULL, 8, 10, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  info.size = 0;
  expect_error(ctx, volt8_forward_describe(ctx, &shape, NULL, 8, 10, &info), VOLT8_ERR_INVALID_ARGUMENT);
  info.size = sizeof info;
  expect_error(NULL, volt8_forward_describe(NULL, &shape, NULL, 8, 10, &info), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_forward_describe(ctx, NULL, NULL, 8, 10, &info), VOLT8_ERR_INVALID_ARGUMENT);
  const int32_t bad_counts[][2] = {{0, 10}, {-1, 10}, {8, 0}, {8, -3}, {1 << 21, 1 << 10}, {1 << 29, 4}, {INT32_MAX, INT32_MAX}};
  for (size_t i = 0; i < sizeof bad_counts / sizeof bad_counts[0]; i++)
    expect_error(ctx, volt8_forward_describe(ctx, &shape, NULL, bad_counts[i][0], bad_counts[i][1], &info),
                 VOLT8_ERR_INVALID_ARGUMENT);
  const size_t sizes[] = BAD_SIZES(sizeof shape);
  for (int i = 0; i < BAD_SIZE_COUNT; i++) {
    shape.size = sizes[i];
    expect_error(ctx, volt8_forward_describe(ctx, &shape, NULL, 8, 10, &info), VOLT8_ERR_INVALID_ARGUMENT);
  }
  shape = (volt8_moe_shape)VOLT8_MOE_SHAPE_INIT;
  /* An older caller's shorter struct: its fields filled, nothing past them. */
  unsigned char room[sizeof info + 16];
  memset(room, 'x', sizeof room);
  volt8_forward_info *short_info = (volt8_forward_info *)room;
  short_info->size = offsetof(volt8_forward_info, down);
  cr_assert_eq(volt8_forward_describe(ctx, &shape, NULL, 8, 10, short_info), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(strncmp(short_info->gate_up, "gate_up.", 8) == 0, "%s", short_info->gate_up);
  cr_assert_eq(room[offsetof(volt8_forward_info, down)], 'x', "wrote past out_info->size");
  volt8_ctx_destroy(ctx);
}

/* volt8_shape_layout and volt8_expert_split: what a shape implies and the expert-parallel split,
 * refused for NULLs, unset sizes and values outside their ranges, and written up to the caller's size. */
Test(abi_misuse, shape_layout_and_expert_split) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  volt8_moe_layout layout = VOLT8_MOE_LAYOUT_INIT;
  expect_error(NULL, volt8_shape_layout(NULL, NULL, &layout), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(NULL, volt8_shape_layout(NULL, &shape, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  layout.size = 0;
  expect_error(NULL, volt8_shape_layout(NULL, &shape, &layout), VOLT8_ERR_INVALID_ARGUMENT);
  layout.size = sizeof layout;
  volt8_moe_shape bad = shape;
  bad.intermediate_offset = 128;
  expect_error(NULL, volt8_shape_layout(NULL, &bad, &layout), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(NULL), "intermediate_offset") != NULL, "%s", volt8_last_error(NULL));
  cr_assert_eq(volt8_shape_layout(NULL, &shape, &layout), VOLT8_OK, "%s", volt8_last_error(NULL));
  cr_assert(layout.model_experts == 512 && layout.s13_row_blocks == 2 && layout.s13_k_blocks == 20 &&
            layout.s2_row_blocks == 20 && layout.s2_k_blocks == 2);
  unsigned char room[sizeof layout + 8];
  memset(room, 'x', sizeof room);
  volt8_moe_layout *short_layout = (volt8_moe_layout *)room;
  short_layout->size = offsetof(volt8_moe_layout, s13_k_blocks);
  cr_assert_eq(volt8_shape_layout(NULL, &shape, short_layout), VOLT8_OK, "%s", volt8_last_error(NULL));
  cr_assert_eq(room[offsetof(volt8_moe_layout, s13_k_blocks)], 'x', "wrote past out_layout->size");

  int32_t start = -1, count = -1;
  expect_error(NULL, volt8_expert_split(6, 2, 0, NULL, &count), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(NULL, volt8_expert_split(6, 2, 0, &start, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  const int32_t bad_splits[][3] = {{0, 1, 0}, {6, 0, 0}, {6, 7, 0}, {6, 2, 2}, {6, 2, -1}, {INT32_MIN, 1, 0}};
  for (size_t i = 0; i < sizeof bad_splits / sizeof bad_splits[0]; i++)
    expect_error(NULL, volt8_expert_split(bad_splits[i][0], bad_splits[i][1], bad_splits[i][2], &start, &count),
                 VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_eq(start, -1, "an error left an output written");
  cr_assert_eq(volt8_expert_split(6, 4, 1, &start, &count), VOLT8_OK);
  cr_assert(start == 2 && count == 2, "rank 1 of 4 over 6: %d, %d", start, count);
}

Test(abi_misuse, variants) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  int32_t count = -1;
  expect_error(ctx, volt8_variant_count(ctx, NULL, &count), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_variant_count(ctx, &shape, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  const size_t sizes[] = BAD_SIZES(sizeof shape);
  for (int i = 0; i < BAD_SIZE_COUNT; i++) {
    shape.size = sizes[i];
    expect_error(ctx, volt8_variant_count(ctx, &shape, &count), VOLT8_ERR_INVALID_ARGUMENT);
    expect_error(ctx, volt8_variant_compile(ctx, &shape, "route", NULL), VOLT8_ERR_INVALID_ARGUMENT);
  }
  shape = (volt8_moe_shape)VOLT8_MOE_SHAPE_INIT;
  volt8_moe_shape bad_values[] = {shape, shape, shape, shape, shape, shape};
  bad_values[0].hidden = -16;
  bad_values[1].intermediate = INT32_MAX;
  bad_values[2].num_experts = 0;
  bad_values[3].block_k = 0;
  bad_values[4].intermediate_offset = 4096;
  bad_values[5].hidden = INT32_MIN;
  for (size_t i = 0; i < sizeof bad_values / sizeof bad_values[0]; i++) {
    volt8_status status = volt8_variant_count(ctx, &bad_values[i], &count);
    cr_assert_neq(status, VOLT8_OK, "shape %zu accepted", i);
    cr_assert_str_neq(volt8_last_error(ctx), "");
  }

  char name[128];
  expect_error(ctx, volt8_variant_name(ctx, &shape, 0, NULL, sizeof name), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_variant_name(ctx, &shape, 0, name, 0), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_variant_name(ctx, &shape, -1, name, sizeof name), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_variant_name(ctx, &shape, INT32_MAX, name, sizeof name), VOLT8_ERR_INVALID_ARGUMENT);
  memset(name, 'x', sizeof name);
  expect_error(ctx, volt8_variant_name(ctx, &shape, 0, name, 4), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_eq(name[4], 'x', "wrote past buf_size");
  expect_error(ctx, volt8_variant_name(ctx, NULL, 0, name, sizeof name), VOLT8_ERR_INVALID_ARGUMENT);

  expect_error(NULL, volt8_variant_compile(NULL, &shape, "route", NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_variant_compile(ctx, NULL, "route", NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_variant_compile(ctx, &shape, NULL, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_variant_compile(ctx, &shape, "gate_up.no.such.variant", NULL), VOLT8_ERR_NOT_FOUND);
  expect_error(ctx, volt8_variant_compile(ctx, &shape, "", NULL), VOLT8_ERR_NOT_FOUND);
  volt8_ctx_destroy(ctx);
}

Test(abi_misuse, experts_without_a_device) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  static const uint8_t byte = 0;
  static const uint16_t half = 0x3c00;
  volt8_host_experts host = {sizeof host, &byte, &half, &byte, &half};
  volt8_experts *experts = (volt8_experts *)0x1;
  expect_error(NULL, volt8_experts_create_from_host(NULL, &shape, &host, 1, 1, &experts), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_experts_create_from_host(ctx, NULL, &host, 1, 1, &experts), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_experts_create_from_host(ctx, &shape, NULL, 1, 1, &experts), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_experts_create_from_host(ctx, &shape, &host, 1, 1, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  const size_t sizes[] = BAD_SIZES(sizeof host);
  for (int i = 0; i < BAD_SIZE_COUNT; i++) {
    host.size = sizes[i];
    experts = (volt8_experts *)0x1;
    volt8_status status = volt8_experts_create_from_host(ctx, &shape, &host, 1, 1, &experts);
    cr_assert(status == VOLT8_ERR_INVALID_ARGUMENT || status == VOLT8_ERR_NO_DEVICE, "host size %zu: %s", sizes[i],
              volt8_status_string(status));
    cr_assert_null(experts);
  }
  host.size = sizeof host;
  host.w2 = NULL;
  expect_error(ctx, volt8_experts_create_from_host(ctx, &shape, &host, 1, 1, &experts), VOLT8_ERR_INVALID_ARGUMENT);
  host.w2 = &byte;
  volt8_status status = volt8_experts_create_from_host(ctx, &shape, &host, -1, INT32_MIN, &experts);
  cr_assert(status == VOLT8_ERR_INVALID_ARGUMENT || status == VOLT8_ERR_NO_DEVICE, "%s", volt8_status_string(status));

  volt8_moe_args args = VOLT8_MOE_ARGS_INIT;
  int32_t count = 0;
  const int32_t m_values[] = {1};
  volt8_graph *graph = (volt8_graph *)0x1;
  expect_error(NULL, volt8_moe_forward(NULL, &args, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(NULL, volt8_moe_forward(NULL, NULL, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(NULL, volt8_experts_bad_id_count(NULL, &count), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(NULL, volt8_experts_bad_id_count(NULL, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(NULL, volt8_experts_prepare(NULL, m_values, 1), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(NULL, volt8_experts_set_variants(NULL, "gate_up.x", NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(NULL, volt8_graph_capture(NULL, &args, NULL, &graph), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_null(graph, "a failed capture must leave *out_graph NULL");
  expect_error(NULL, volt8_graph_capture(NULL, &args, NULL, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(NULL, volt8_graph_launch(NULL, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  volt8_memory_report memory = VOLT8_MEMORY_REPORT_INIT;
  expect_error(NULL, volt8_experts_memory(NULL, &memory), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(NULL, volt8_experts_memory(NULL, NULL), VOLT8_ERR_INVALID_ARGUMENT);

  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = "/nonexistent";
  experts = (volt8_experts *)0x1;
  expect_error(NULL, volt8_experts_load(NULL, &options, &experts), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_experts_load(ctx, &options, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_experts_load(ctx, NULL, &experts), VOLT8_ERR_NO_DEVICE);
  cr_assert_null(experts);
  const size_t option_sizes[] = BAD_SIZES(sizeof options);
  for (int i = 0; i < BAD_SIZE_COUNT; i++) {
    options.size = option_sizes[i];
    status = volt8_experts_load(ctx, &options, &experts);
    cr_assert(status == VOLT8_ERR_INVALID_ARGUMENT || status == VOLT8_ERR_NO_DEVICE, "options size %zu: %s",
              option_sizes[i], volt8_status_string(status));
  }
  volt8_ctx_destroy(ctx);
}

Test(abi_misuse, reference_and_errors) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.hidden = 16, shape.intermediate = 16, shape.num_experts = 1, shape.intermediate_offset = 0;
  uint8_t w13[2 * 16 * 16] = {0}, w2[16 * 16] = {0};
  uint16_t s13[2] = {0x3c00, 0x3c00}, s2[1] = {0x3c00}, x[16] = {0};
  int32_t ids[1] = {0};
  float weights[1] = {1.0f};
  double out[16];
  volt8_host_experts host = {sizeof host, w13, s13, w2, s2};
  cr_assert_eq(volt8_reference_moe_forward(ctx, &shape, &host, x, ids, weights, 1, 1, out), VOLT8_OK, "%s",
               volt8_last_error(ctx));
  expect_error(ctx, volt8_reference_moe_forward(ctx, NULL, &host, x, ids, weights, 1, 1, out), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_reference_moe_forward(ctx, &shape, NULL, x, ids, weights, 1, 1, out), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_reference_moe_forward(ctx, &shape, &host, NULL, ids, weights, 1, 1, out), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_reference_moe_forward(ctx, &shape, &host, x, NULL, weights, 1, 1, out), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_reference_moe_forward(ctx, &shape, &host, x, ids, NULL, 1, 1, out), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_reference_moe_forward(ctx, &shape, &host, x, ids, weights, 1, 1, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_reference_moe_forward(ctx, &shape, &host, x, ids, weights, -1, 1, out), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_reference_moe_forward(ctx, &shape, &host, x, ids, weights, 1, 0, out), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_reference_moe_forward(ctx, &shape, &host, x, ids, weights, INT32_MAX, INT32_MAX, out),
               VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(NULL, volt8_reference_moe_forward(NULL, &shape, NULL, x, ids, weights, 1, 1, out), VOLT8_ERR_INVALID_ARGUMENT);
  const size_t sizes[] = BAD_SIZES(sizeof host);
  for (int i = 0; i < BAD_SIZE_COUNT; i++) {
    host.size = sizes[i];
    expect_error(ctx, volt8_reference_moe_forward(ctx, &shape, &host, x, ids, weights, 1, 1, out), VOLT8_ERR_INVALID_ARGUMENT);
    shape.size = sizes[i];
    host.size = sizeof host;
    expect_error(ctx, volt8_reference_moe_forward(ctx, &shape, &host, x, ids, weights, 1, 1, out), VOLT8_ERR_INVALID_ARGUMENT);
    shape.size = sizeof shape;
  }

  double reference[2] = {1, 2}, error = 0;
  uint16_t halves[2] = {0x3c00, 0x4000};
  expect_error(ctx, volt8_relative_l2(ctx, NULL, reference, 2, &error), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_relative_l2(ctx, reference, NULL, 2, &error), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_relative_l2(ctx, reference, reference, 2, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_relative_l2_half(ctx, NULL, halves, 2, &error), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_relative_l2_half(ctx, reference, NULL, 2, &error), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_relative_l2_half(ctx, reference, halves, 2, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_eq(volt8_relative_l2_half(NULL, reference, halves, 2, &error), VOLT8_OK);
  cr_assert_float_eq(error, 0.0, 1e-12);

  char warnings[8];
  int32_t count = -1;
  expect_error(NULL, volt8_tuning_warnings(NULL, sizeof warnings, &count), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_eq(volt8_tuning_warnings(NULL, 0, NULL), VOLT8_OK);
  memset(warnings, 'x', sizeof warnings);
  cr_assert_eq(volt8_tuning_warnings(warnings, 1, &count), VOLT8_OK);
  cr_assert_eq(warnings[0], '\0');
  cr_assert_eq(warnings[1], 'x', "wrote past buf_size");
  volt8_ctx_destroy(ctx);
}

Test(abi_misuse, sampler) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  int32_t num_draft[1] = {1}, draft_ids[1] = {0}, out_ids[2], accepted[1];
  float target[2 * 2] = {0.5f, 0.5f, 0.5f, 0.5f};
  volt8_rejection_args args = VOLT8_REJECTION_ARGS_INIT;
  args.batch = 1, args.max_draft = 1, args.vocab = 2;
  args.num_draft = num_draft, args.draft_ids = draft_ids, args.target_probs = target;
  args.out_ids = out_ids, args.num_accepted = accepted;
  cr_assert_eq(volt8_rejection_sample_host(&args), VOLT8_OK, "%s", volt8_last_error(NULL));
  expect_error(NULL, volt8_rejection_sample_host(NULL), VOLT8_ERR_INVALID_ARGUMENT);
  const size_t sizes[] = BAD_SIZES(sizeof args);
  for (int i = 0; i < BAD_SIZE_COUNT; i++) {
    args.size = sizes[i];
    expect_error(NULL, volt8_rejection_sample_host(&args), VOLT8_ERR_INVALID_ARGUMENT);
    expect_error(ctx, volt8_rejection_sample(ctx, &args, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  }
  args.size = sizeof args;
  volt8_rejection_args broken[6];
  for (int i = 0; i < 6; i++) broken[i] = args;
  broken[0].batch = -1;
  broken[1].max_draft = -1;
  broken[2].vocab = 0;
  broken[3].out_ids = NULL;
  broken[4].target_probs = NULL;
  broken[5].vocab = INT32_MAX;
  for (int i = 0; i < 6; i++) {
    expect_error(NULL, volt8_rejection_sample_host(&broken[i]), VOLT8_ERR_INVALID_ARGUMENT);
    expect_error(ctx, volt8_rejection_sample(ctx, &broken[i], NULL), VOLT8_ERR_INVALID_ARGUMENT);
  }
  expect_error(NULL, volt8_rejection_sample(NULL, &args, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_rejection_sample(ctx, NULL, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_rejection_sample(ctx, &args, NULL), VOLT8_ERR_NO_DEVICE);
  expect_error(NULL, volt8_rejection_prepare(NULL), VOLT8_ERR_INVALID_ARGUMENT);
  volt8_ctx_destroy(ctx);
}

/* ---- checkpoints and plans ---- */

static char checkpoint_dir[256];

static void make_checkpoint(void) {
  snprintf(checkpoint_dir, sizeof checkpoint_dir, "/tmp/volt8-abi-misuse-%ld", (long)getpid());
  cr_assert(tiny_checkpoint_write(checkpoint_dir, 2), "cannot write the checkpoint in %s", checkpoint_dir);
}

static void remove_checkpoint(void) {
  char command[512];
  snprintf(command, sizeof command, "rm -rf '%s'", checkpoint_dir);
  cr_assert_eq(system(command), 0);
}

Test(abi_misuse, checkpoint_load_host, .init = make_checkpoint, .fini = remove_checkpoint) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = checkpoint_dir;
  volt8_host_checkpoint *host = (volt8_host_checkpoint *)0x1;
  expect_error(ctx, volt8_checkpoint_load_host(ctx, &options, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_checkpoint_load_host(ctx, NULL, &host), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_null(host);
  const size_t sizes[] = {0, 1, sizeof(size_t), sizeof options + 1, SIZE_MAX};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    options.size = sizes[i];
    expect_error(ctx, volt8_checkpoint_load_host(ctx, &options, &host), VOLT8_ERR_INVALID_ARGUMENT);
  }
  options = (volt8_load_options)VOLT8_LOAD_OPTIONS_INIT;
  volt8_load_options broken[8];
  for (int i = 0; i < 8; i++) broken[i] = options, broken[i].checkpoint_dir = checkpoint_dir;
  broken[0].checkpoint_dir = NULL;
  broken[1].tp_size = 0;
  broken[2].tp_rank = 1;
  broken[3].tp_rank = -1;
  broken[4].online_block_n = 7;
  broken[5].mtp_layer = -1;
  broken[6].mtp_expert_quantization = "int4";
  broken[7].tp_size = INT32_MIN;
  for (int i = 0; i < 8; i++)
    expect_error(ctx, volt8_checkpoint_load_host(ctx, &broken[i], &host), VOLT8_ERR_INVALID_ARGUMENT);
  options.checkpoint_dir = "/nonexistent/volt8";
  volt8_status status = volt8_checkpoint_load_host(ctx, &options, &host);
  cr_assert(status == VOLT8_ERR_NOT_FOUND || status == VOLT8_ERR_IO, "%s", volt8_status_string(status));
  options.checkpoint_dir = checkpoint_dir;
  options.tp_size = 3; /* 32 does not split three ways */
  expect_error(ctx, volt8_checkpoint_load_host(ctx, &options, &host), VOLT8_ERR_INVALID_ARGUMENT);

  /* A report whose size field is unset is refused; one from a newer header gets what this one knows. */
  options.tp_size = 1;
  volt8_load_report report = VOLT8_LOAD_REPORT_INIT;
  report.size = 0;
  options.report = &report;
  expect_error(ctx, volt8_checkpoint_load_host(ctx, &options, &host), VOLT8_ERR_INVALID_ARGUMENT);
  struct {
    volt8_load_report report;
    unsigned char canary[64];
  } larger;
  memset(&larger, 0xa5, sizeof larger);
  larger.report.size = sizeof larger;
  options.report = &larger.report;
  cr_assert_eq(volt8_checkpoint_load_host(ctx, &options, &host), VOLT8_OK, "%s", volt8_last_error(ctx));
  for (size_t i = 0; i < sizeof larger.canary; i++) cr_assert_eq(larger.canary[i], 0xa5, "wrote past the report");
  cr_assert_eq(larger.report.num_experts, 2);
  volt8_host_checkpoint_free(host);
  volt8_ctx_destroy(ctx);
}

Test(abi_misuse, plan_and_plan_rank, .init = make_checkpoint, .fini = remove_checkpoint) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = checkpoint_dir;
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  expect_error(ctx, volt8_plan(ctx, &options, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_plan(ctx, NULL, &plan), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(NULL, volt8_plan(NULL, NULL, &plan), VOLT8_ERR_INVALID_ARGUMENT);
  plan.size = 0;
  expect_error(ctx, volt8_plan(ctx, &options, &plan), VOLT8_ERR_INVALID_ARGUMENT);
  plan.size = 1;
  expect_error(ctx, volt8_plan(ctx, &options, &plan), VOLT8_ERR_INVALID_ARGUMENT);
  struct {
    volt8_plan_report plan;
    unsigned char canary[64];
  } larger;
  memset(&larger, 0x5a, sizeof larger);
  larger.plan.size = SIZE_MAX;
  cr_assert_eq(volt8_plan(ctx, &options, &larger.plan), VOLT8_OK, "%s", volt8_last_error(ctx));
  for (size_t i = 0; i < sizeof larger.canary; i++) cr_assert_eq(larger.canary[i], 0x5a, "wrote past the plan report");
  cr_assert_eq(larger.plan.num_experts, 2);
  /* an older caller's report: only its own bytes are written */
  struct {
    size_t size;
    int32_t route;
    unsigned char canary[64];
  } older;
  memset(&older, 0x3c, sizeof older);
  older.size = offsetof(volt8_plan_report, hidden);
  cr_assert_eq(volt8_plan(ctx, &options, (volt8_plan_report *)&older), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(older.route, VOLT8_ROUTE_NATIVE);
  for (size_t i = 0; i < sizeof older.canary; i++) cr_assert_eq(older.canary[i], 0x3c, "wrote past an older report");

  plan = (volt8_plan_report)VOLT8_PLAN_REPORT_INIT;
  cr_assert_eq(volt8_plan(ctx, &options, &plan), VOLT8_OK, "%s", volt8_last_error(ctx));
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  volt8_memory_report memory = VOLT8_MEMORY_REPORT_INIT;
  cr_assert_eq(volt8_plan_rank(ctx, &plan, 0, &shape, &memory), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_eq(volt8_plan_rank(ctx, &plan, 0, NULL, NULL), VOLT8_OK);
  expect_error(ctx, volt8_plan_rank(ctx, NULL, 0, &shape, &memory), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_plan_rank(ctx, &plan, -1, &shape, &memory), VOLT8_ERR_INVALID_ARGUMENT);
  expect_error(ctx, volt8_plan_rank(ctx, &plan, 1, &shape, &memory), VOLT8_ERR_INVALID_ARGUMENT);
  memory.size = 0;
  expect_error(ctx, volt8_plan_rank(ctx, &plan, 0, &shape, &memory), VOLT8_ERR_INVALID_ARGUMENT);
  memory.size = sizeof memory;
  volt8_plan_report forged = plan;
  forged.size = 0;
  expect_error(ctx, volt8_plan_rank(ctx, &forged, 0, &shape, &memory), VOLT8_ERR_INVALID_ARGUMENT);

  /* Reports a caller filled in by hand: any values give an error or sizes that do not overflow. */
  const int32_t values[] = {INT32_MIN, -128, -1, 0, 1, 15, 16, 128, 4096, 1 << 20, 1 << 24, 1 << 26, INT32_MAX - 15, INT32_MAX};
  const size_t value_count = sizeof values / sizeof values[0];
  const int32_t tp_sizes[] = {1, 2, INT32_MIN, 0, INT32_MAX};
  for (size_t h = 0; h < value_count; h++) {
    for (size_t i = 0; i < value_count; i++) {
      for (size_t e = 0; e < value_count * 5; e++) {
        forged = plan;
        forged.hidden = values[h];
        forged.intermediate = values[i];
        forged.num_experts = values[e % value_count];
        forged.tp_size = tp_sizes[e / value_count];
        forged.block_n = (h + e) % 3 ? 128 : values[i];
        forged.route = (int32_t)((h + i + e) % 3);
        volt8_status status = volt8_plan_rank(ctx, &forged, 0, &shape, &memory);
        if (status == VOLT8_OK)
          cr_assert(memory.resident_bytes > 0 && memory.padded_bytes > 0 && memory.fp16_bytes > 0,
                    "hidden %d intermediate %d experts %d tp %d: a report with non-positive sizes", forged.hidden,
                    forged.intermediate, forged.num_experts, forged.tp_size);
        else
          cr_assert_str_neq(volt8_last_error(ctx), "");
      }
    }
  }
  volt8_ctx_destroy(ctx);
}

Test(abi_misuse, error_text_taken_before_a_call_shows_its_failure) {
  /* printf("%d %s", f(ctx), volt8_last_error(ctx)) may evaluate volt8_last_error first */
  volt8_ctx *ctx = test_cpu_ctx(NULL), *other = test_cpu_ctx(NULL);
  const char *message = volt8_last_error(ctx);
  cr_assert_str_eq(message, "");
  expect_error(ctx, volt8_ctx_target_arch(ctx, NULL, 8), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(message, "volt8_ctx_target_arch"), "the text read before the call is stale: \"%s\"", message);
  cr_assert_eq(volt8_ctx_require_device(other), VOLT8_ERR_NO_DEVICE);
  cr_assert(strstr(message, "volt8_ctx_target_arch"), "a failure on another ctx changed this one's text: \"%s\"", message);
  cr_assert(strstr(volt8_last_error(other), "no GPU"), "%s", volt8_last_error(other));
  volt8_ctx_destroy(other);
  volt8_ctx_destroy(ctx);
}

/* ---- neighbours of a destroyed handle ---- */

Test(abi_misuse, destroying_one_ctx_leaves_its_neighbours_working, .init = make_checkpoint, .fini = remove_checkpoint) {
  volt8_ctx *contexts[3] = {test_cpu_ctx(NULL), test_cpu_ctx(NULL), test_cpu_ctx(NULL)};
  cr_assert_eq(volt8_ctx_require_device(contexts[0]), VOLT8_ERR_NO_DEVICE); /* leaves a message in [0] */
  volt8_ctx_destroy(contexts[1]);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  int32_t count = 0;
  char arch[16];
  for (int i = 0; i < 3; i += 2) {
    cr_assert_eq(volt8_variant_count(contexts[i], &shape, &count), VOLT8_OK, "%s", volt8_last_error(contexts[i]));
    cr_assert_gt(count, 0);
    cr_assert_eq(volt8_ctx_target_arch(contexts[i], arch, sizeof arch), VOLT8_OK);
  }
  cr_assert(strstr(volt8_last_error(contexts[0]), "no GPU") != NULL, "the message of [0] was lost: %s",
            volt8_last_error(contexts[0]));
  cr_assert_str_eq(volt8_last_error(contexts[2]), "", "[2] has a message it never caused");

  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = checkpoint_dir;
  volt8_host_checkpoint *first = NULL, *second = NULL;
  cr_assert_eq(volt8_checkpoint_load_host(contexts[0], &options, &first), VOLT8_OK, "%s", volt8_last_error(contexts[0]));
  cr_assert_eq(volt8_checkpoint_load_host(contexts[2], &options, &second), VOLT8_OK, "%s", volt8_last_error(contexts[2]));
  volt8_host_checkpoint_free(first);
  volt8_ctx_destroy(contexts[0]);
  uint16_t x[TINY_HIDDEN] = {0x3c00};
  int32_t ids[2] = {0, 1};
  float weights[2] = {0.5f, 0.5f};
  double out[TINY_HIDDEN];
  cr_assert_eq(volt8_reference_moe_forward(contexts[2], &second->shape, &second->experts, x, ids, weights, 1, 2, out),
               VOLT8_OK, "%s", volt8_last_error(contexts[2]));
  volt8_host_checkpoint_free(second);
  volt8_ctx_destroy(contexts[2]);
}
