/* Forward arguments and the capture rule, checked without a GPU. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/ctx_internal.h"
#include "moe/moe_args.h"

TestSuite(forward_args, .timeout = 30);

static const volt8_moe_limits limits = {512, 64, 10};

static volt8_moe_args valid_args(void) {
  static _Alignas(16) char device_like[4096];
  volt8_moe_args args = VOLT8_MOE_ARGS_INIT;
  args.num_tokens = 8;
  args.top_k = 10;
  args.x = device_like;
  args.topk_ids = (const int32_t *)(device_like + 1024);
  args.topk_weights = (const float *)(device_like + 2048);
  args.out = device_like + 3072;
  return args;
}

static void expect_rejected(volt8_moe_args args, const char *needle) {
  volt8_status status = volt8_moe_args_check(NULL, &limits, &args);
  cr_assert_eq(status, VOLT8_ERR_INVALID_ARGUMENT, "accepted; expected an error about %s", needle);
  cr_assert(strstr(volt8_last_error(NULL), needle) != NULL, "message \"%s\" does not name %s", volt8_last_error(NULL),
            needle);
}

Test(forward_args, valid_arguments_pass) {
  volt8_moe_args args = valid_args();
  cr_assert_eq(volt8_moe_args_check(NULL, &limits, &args), VOLT8_OK, "%s", volt8_last_error(NULL));
}

Test(forward_args, null_args_and_bad_size) {
  cr_assert_eq(volt8_moe_args_check(NULL, &limits, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  volt8_moe_args args = valid_args();
  args.size = 8;
  expect_rejected(args, "args->size");
  args = valid_args();
  args.size = sizeof args + 64;
  expect_rejected(args, "args->size");
}

Test(forward_args, token_counts) {
  volt8_moe_args args = valid_args();
  args.num_tokens = 0;
  expect_rejected(args, "num_tokens 0");
  args.num_tokens = -3;
  expect_rejected(args, "num_tokens -3");
  args.num_tokens = 65;
  expect_rejected(args, "prepared maximum");
}

Test(forward_args, top_k_range) {
  volt8_moe_args args = valid_args();
  args.top_k = 0;
  expect_rejected(args, "top_k 0");
  args.top_k = 11;
  expect_rejected(args, "top_k 11");
}

Test(forward_args, null_and_misaligned_pointers) {
  const char *names[4] = {"x", "topk_ids", "topk_weights", "out"};
  for (int i = 0; i < 4; i++) {
    volt8_moe_args args = valid_args();
    const void **fields[4] = {(const void **)&args.x, (const void **)&args.topk_ids, (const void **)&args.topk_weights,
                              (const void **)&args.out};
    *fields[i] = NULL;
    char needle[32];
    snprintf(needle, sizeof needle, "%s is NULL", names[i]);
    expect_rejected(args, needle);
    args = valid_args();
    *fields[i] = (const char *)*fields[i] + 2;
    snprintf(needle, sizeof needle, "%s (", names[i]);
    expect_rejected(args, needle);
  }
}

Test(forward_args, ids_outside_the_experts) {
  int32_t ids[2][3] = {{0, 5, 511}, {3, 512, 1}};
  cr_assert_eq(volt8_moe_ids_check(NULL, &ids[0][0], 1, 3, 512), VOLT8_OK);
  cr_assert_eq(volt8_moe_ids_check(NULL, &ids[0][0], 2, 3, 512), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(NULL), "topk_ids[1][1] = 512") != NULL, "%s", volt8_last_error(NULL));
  ids[0][0] = -1;
  cr_assert_eq(volt8_moe_ids_check(NULL, &ids[0][0], 1, 3, 512), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(NULL), "topk_ids[0][0] = -1") != NULL, "%s", volt8_last_error(NULL));
}

Test(forward_args, capture_rule) {
  cr_assert_eq(volt8_capture_allows_load(NULL, 0, 0, "gate_up.x"), VOLT8_OK, "outside capture anything may compile");
  cr_assert_eq(volt8_capture_allows_load(NULL, 1, 1, "gate_up.x"), VOLT8_OK, "a loaded kernel launches in a capture");
  cr_assert_eq(volt8_capture_allows_load(NULL, 1, 0, "gate_up.x"), VOLT8_ERR_CAPTURE);
  cr_assert(strstr(volt8_last_error(NULL), "gate_up.x") && strstr(volt8_last_error(NULL), "volt8_experts_prepare"),
            "%s", volt8_last_error(NULL));
}

Test(forward_args, public_entry_points_reject_null) {
  volt8_moe_args args = valid_args();
  cr_assert_eq(volt8_moe_forward(NULL, &args, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_eq(volt8_experts_prepare(NULL, NULL, 0), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_eq(volt8_experts_set_variants(NULL, NULL, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  volt8_graph *graph = (volt8_graph *)0x1;
  cr_assert_eq(volt8_graph_capture(NULL, &args, NULL, &graph), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_null(graph);
  cr_assert_eq(volt8_graph_launch(NULL, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  volt8_graph_destroy(NULL);
  int32_t count;
  cr_assert_eq(volt8_experts_bad_id_count(NULL, &count), VOLT8_ERR_INVALID_ARGUMENT);
}

Test(forward_args, early_launch_needs_sm90_kernels_a_recent_driver_and_no_opt_out) {
  /* The waits are compiled in only from sm_90 on: compute_70 PTX on an H200 must launch plainly. */
  cr_assert_eq(volt8_early_launch_usable(90, 12030, 1, 0), 1);
  cr_assert_eq(volt8_early_launch_usable(100, 13000, 1, 0), 1);
  cr_assert_eq(volt8_early_launch_usable(89, 13000, 1, 0), 0, "sm_89 kernels carry no wait");
  cr_assert_eq(volt8_early_launch_usable(70, 13000, 1, 0), 0, "compute_70 PTX carries no wait");
  cr_assert_eq(volt8_early_launch_usable(90, 12020, 1, 0), 0, "stream capture keeps early launches from 12.3 on");
  cr_assert_eq(volt8_early_launch_usable(90, 13000, 0, 0), 0, "no cuLaunchKernelEx");
  cr_assert_eq(volt8_early_launch_usable(90, 13000, 1, 1), 0, "disabled");
}

Test(forward_args, early_launch_is_off_without_a_device) {
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.cache_disable = 1;
  options.target_arch = "sm_90";
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_OK, "%s", volt8_last_error(NULL));
  cr_assert_eq(volt8_ctx_early_launch(ctx), 0);
  cr_assert_eq(volt8_ctx_early_launch(NULL), 0);
  volt8_ctx_destroy(ctx);
}
