/* volt8 plan: validate a checkpoint's MTP experts and print what each rank keeps: a tensor-parallel
 * rank's slice of every expert, and with --ep N an expert-parallel rank's share of the experts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tools/tools.h"

#define MIB (1024.0 * 1024.0)

typedef struct plan_args {
  const char *checkpoint_dir, *draft_dir, *online, *rank_text;
  int32_t tp_size, ep_size, rank, online_block_n;
  int32_t max_tokens, top_k; /* the workspace's sizes; defaults those of a load (VOLT8_LOAD_OPTIONS_INIT) */
  int json;
} plan_args;


/* --online-block: the rows of an online scale block, 1 or 128. */
static int parse_online_block(const char *text, int32_t *out) {
  long value = 0;
  volt8_tools_number verdict = volt8_tools_parse_number(text, 1, 128, &value);
  if (verdict == VOLT8_TOOLS_NUMBER_OK && (value == 1 || value == 128)) {
    *out = (int32_t)value;
    return 0;
  }
  if (verdict == VOLT8_TOOLS_NOT_A_NUMBER) fprintf(stderr, "volt8 plan: --online-block \"%s\" is not a whole number", text);
  else fprintf(stderr, "volt8 plan: --online-block %s is not a valid online scale block height", text);
  fprintf(stderr, " (the rows of an online scale block: 1 or 128)\n");
  return -1;
}

/* --online: how unquantized experts are quantized at load; fp8 is the one way. */
static int parse_online(const char *text) {
  if (strcmp(text, "fp8") == 0) return 0;
  fprintf(stderr, "volt8 plan: --online \"%s\" is not a quantization volt8 knows (fp8)\n", text);
  return -1;
}

static int parse_plan_args(int argc, char **argv, plan_args *args) {
  volt8_load_options defaults = VOLT8_LOAD_OPTIONS_INIT;
  *args = (plan_args){.tp_size = 0, .ep_size = 1, .rank = -1, .online_block_n = 128,
                      .max_tokens = defaults.max_tokens, .top_k = defaults.max_top_k};
  int online_block_given = 0;
  volt8_tools_flags_seen seen = {{0}, 0};
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *value = NULL;
    int bad = 0;
    if (cli_is_one_of(arg, "--json --tp --ep --rank --online-block --draft --online --max-tokens --top-k") &&
        cli_flag_once("plan", &seen, arg) != 0)
      return 2;
    if (strcmp(arg, "--json") == 0) {
      args->json = 1;
      continue;
    }
    if (arg[0] != '-' && !args->checkpoint_dir) {
      args->checkpoint_dir = arg;
      continue;
    }
    if (!cli_is_one_of(arg, "--tp --ep --rank --online-block --draft --online --max-tokens --top-k"))
      return cli_unknown_argument("plan", arg);
    if (!(value = cli_flag_value("plan", argc, argv, &i))) return 2;
    if (strcmp(arg, "--tp") == 0) bad = cli_parse_number("plan", arg, value, "TP size", 1, VOLT8_TOOLS_MAX_TP, &args->tp_size);
    else if (strcmp(arg, "--ep") == 0) bad = cli_parse_number("plan", arg, value, "EP size", 1, VOLT8_TOOLS_MAX_EP, &args->ep_size);
    else if (strcmp(arg, "--rank") == 0) args->rank_text = value; /* checked against the TP size below */
    else if (strcmp(arg, "--online-block") == 0) bad = parse_online_block(value, &args->online_block_n);
    else if (strcmp(arg, "--max-tokens") == 0)
      bad = cli_parse_number("plan", arg, value, "token count", 1, VOLT8_MAX_ROUTED_PAIRS, &args->max_tokens);
    else if (strcmp(arg, "--top-k") == 0)
      bad = cli_parse_number("plan", arg, value, "top-k", 1, VOLT8_TOOLS_MAX_TOP_K, &args->top_k);
    else if (strcmp(arg, "--draft") == 0) bad = cli_parse_path("plan", arg, (args->draft_dir = value), "folder");
    else bad = parse_online(args->online = value);
    if (bad) return 2;
    online_block_given |= strcmp(arg, "--online-block") == 0;
  }
  if (online_block_given && !args->online) {
    fprintf(stderr, "volt8 plan: --online-block needs --online fp8 (checkpoint scales come in 128x128 blocks)\n");
    return 2;
  }
  if (!args->checkpoint_dir || args->tp_size == 0) {
    fprintf(stderr, "volt8 plan: needs %s\nusage: volt8 %s\n", args->checkpoint_dir ? "--tp N" : "CKPT_DIR",
            cli_usage("plan"));
    return 2;
  }
  if (!args->checkpoint_dir[0]) {
    fprintf(stderr, "volt8 plan: CKPT_DIR \"\" names no folder (give the checkpoint's folder)\n");
    return 2;
  }
  if (args->rank_text && cli_parse_rank("plan", args->rank_text, args->tp_size, &args->rank) != 0) return 2;
  if ((int64_t)args->max_tokens * args->top_k > VOLT8_MAX_ROUTED_PAIRS) {
    fprintf(stderr, "volt8 plan: --max-tokens %d x --top-k %d = %lld routed pairs, more than the limit of %d\n",
            args->max_tokens, args->top_k, (long long)args->max_tokens * args->top_k, VOLT8_MAX_ROUTED_PAIRS);
    return 2;
  }
  if (cli_check_path("plan", "CKPT_DIR", args->checkpoint_dir, CLI_FOLDER_TO_READ) != 0 ||
      (args->draft_dir && cli_check_path("plan", "--draft", args->draft_dir, CLI_FOLDER_TO_READ) != 0))
    return 2;
  return 0;
}

/* JSON text is UTF-8: a byte that starts no valid sequence (a non-UTF-8 folder name) is written as
 * U+FFFD, so the output always parses. */
static void print_json_string(const char *text) {
  putchar('"');
  size_t left = strlen(text);
  for (const unsigned char *c = (const unsigned char *)text; *c;) {
    size_t sequence = volt8_utf8_sequence_length(c, left);
    if (sequence == 0) printf("\\ufffd"), sequence = 1;
    else if (*c == '"' || *c == '\\') printf("\\%c", *c);
    else if (*c < 0x20 || *c == 0x7F) printf("\\u%04x", *c);
    else fwrite(c, 1, sequence, stdout);
    c += sequence;
    left -= sequence;
  }
  putchar('"');
}

static void print_header_json(const plan_args *args, const volt8_plan_report *plan) {
  printf("{\"checkpoint\": ");
  print_json_string(args->checkpoint_dir);
  printf(", \"route\": \"%s\", \"quant_format\": ", volt8_route_name(plan->route));
  print_json_string(plan->quant_format);
  printf(", \"tensor_prefix\": ");
  print_json_string(plan->tensor_prefix);
  printf(", \"scale_dtype\": \"%s\", \"scale_max_relative_error\": %.9g", plan->scale_dtype, plan->scale_max_relative_error);
  printf(", \"experts\": %d, \"hidden\": %d, \"intermediate\": %d, \"intermediate_per_rank\": %d, \"tp\": %d, \"ep\": %d",
         plan->num_experts, plan->hidden, plan->intermediate, plan->intermediate / plan->tp_size, plan->tp_size,
         args->ep_size);
  printf(", \"block\": [%d, %d], \"max_tokens\": %d, \"top_k\": %d, \"ranks\": [", plan->block_n, plan->block_k,
         plan->max_tokens, plan->max_top_k);
}

static void print_header_text(const plan_args *args, const volt8_plan_report *plan) {
  printf("checkpoint   %s%s%s\n", args->checkpoint_dir, args->draft_dir ? ", draft " : "", args->draft_dir ? args->draft_dir : "");
  printf("experts      %s* : %d x (hidden %d, intermediate %d), %s\n", plan->tensor_prefix, plan->num_experts, plan->hidden,
         plan->intermediate, plan->quant_format);
  printf("route        %s, scale block %dx%d", volt8_route_name(plan->route), plan->block_n, plan->block_k);
  if (plan->route == VOLT8_ROUTE_NATIVE)
    printf(", %s scales, largest FP16 rounding error %.3g", plan->scale_dtype, plan->scale_max_relative_error);
  printf("\ntp %d        intermediate %d per rank\n", plan->tp_size, plan->intermediate / plan->tp_size);
  if (args->ep_size > 1)
    printf("ep %d        experts split in contiguous ranges, the first %d ranks one more\n", args->ep_size,
           plan->num_experts % args->ep_size);
  printf("workspace    for --max-tokens %d x --top-k %d (top-k at most the %d experts)\n", plan->max_tokens,
         plan->max_top_k, plan->num_experts);
  printf("\n%s%4s %14s %12s %10s %12s %12s %13s %9s %9s\n", args->ep_size > 1 ? "  ep   experts " : "", "rank",
         "resident MiB", "weights MiB", "scales MiB", "FP16 MiB", "padded MiB", "workspace MiB", "n_offset", "k_offset");
}

static void print_rank(const plan_args *args, int32_t ep_rank, int32_t rank, int first, const volt8_moe_shape *shape,
                       const volt8_memory_report *memory) {
  int32_t offset = shape->intermediate_offset;
  int32_t expert_start = shape->expert_start, expert_count = shape->num_experts;
  if (args->json) {
    printf("%s{\"rank\": %d, \"ep_rank\": %d, \"expert_start\": %d, \"expert_count\": %d, \"resident_bytes\": %lld, "
           "\"weight_bytes\": %lld, \"scale_bytes\": %lld, \"fp16_bytes\": %lld, \"padded_bytes\": %lld, "
           "\"workspace_bytes\": %lld, \"n_offset\": %d, \"k_offset\": %d}",
           first ? "" : ", ", rank, ep_rank, expert_start, expert_count, (long long)memory->resident_bytes,
           (long long)memory->weight_bytes, (long long)memory->scale_bytes, (long long)memory->fp16_bytes,
           (long long)memory->padded_bytes, (long long)memory->workspace_bytes, offset, offset);
    return;
  }
  if (args->ep_size > 1) printf("%4d %4d..%-4d ", ep_rank, expert_start, expert_start + expert_count - 1);
  printf("%4d %14.2f %12.2f %10.2f %12.2f %12.2f %13.2f %9d %9d\n", rank, memory->resident_bytes / MIB,
         memory->weight_bytes / MIB, memory->scale_bytes / MIB, memory->fp16_bytes / MIB, memory->padded_bytes / MIB,
         memory->workspace_bytes / MIB, offset, offset);
}

/* Every (EP rank, TP rank) asked for, EP outer; `rank` in the output is the TP rank. */
static volt8_status print_ranks(volt8_ctx *ctx, const plan_args *args, const volt8_plan_report *plan) {
  int32_t first = args->rank_text ? args->rank : 0, last = args->rank_text ? args->rank : plan->tp_size - 1;
  volt8_status status = VOLT8_OK;
  for (int32_t ep_rank = 0; ep_rank < args->ep_size && status == VOLT8_OK; ep_rank++) {
    volt8_plan_report share = *plan;
    int32_t expert_start = 0;
    volt8_shard_experts(plan->num_experts, args->ep_size, ep_rank, &expert_start, &share.num_experts);
    for (int32_t rank = first; rank <= last && status == VOLT8_OK; rank++) {
      volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
      volt8_memory_report memory = VOLT8_MEMORY_REPORT_INIT;
      status = volt8_plan_rank(ctx, &share, rank, &shape, &memory);
      shape.expert_start = expert_start;
      /* An EP rank's workspace has room for top-k of all the model's experts, as its load does. */
      shape.global_experts = plan->num_experts;
      volt8_moe_workspace workspace;
      if (status == VOLT8_OK && args->ep_size > 1 &&
          (status = volt8_moe_workspace_plan(ctx, &shape, plan->max_tokens, plan->max_top_k, &workspace)) == VOLT8_OK)
        memory.workspace_bytes = (int64_t)workspace.total_bytes;
      if (status == VOLT8_OK) print_rank(args, ep_rank, rank, ep_rank == 0 && rank == first, &shape, &memory);
    }
  }
  return status;
}

/* The checkpoint's plan at --tp, and the flags checked against it: --tp must split its intermediate
 * size and --ep its experts, --online fits unquantized experts only; each is a bad argument (2),
 * found only once the checkpoint is read. 0, or 1 when the checkpoint itself fails. */
static int plan_checkpoint(volt8_ctx *ctx, const plan_args *args, volt8_plan_report *plan) {
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = args->checkpoint_dir;
  options.draft_checkpoint_dir = args->draft_dir;
  options.tp_size = 1; /* the checkpoint as it is; --tp is checked against it below */
  options.mtp_expert_quantization = args->online;
  options.online_block_n = args->online_block_n;
  options.max_tokens = args->max_tokens;
  options.max_top_k = args->top_k;
  volt8_status status = volt8_plan(ctx, &options, plan);
  if (status == VOLT8_ERR_INVALID_ARGUMENT && args->online) {
    fprintf(stderr, "volt8 plan: --online %s does not fit this checkpoint: %s\n", args->online, volt8_last_error(ctx));
    return 2;
  }
  if (status != VOLT8_OK) return cli_report(ctx, "plan", status);
  volt8_shard shard;
  if (volt8_shard_plan(ctx, plan->intermediate, args->tp_size, 0, plan->route, plan->block_n, &shard) != VOLT8_OK) {
    fprintf(stderr, "volt8 plan: --tp %d does not split this checkpoint: %s\n", args->tp_size, volt8_last_error(ctx));
    return 2;
  }
  plan->tp_size = args->tp_size;
  if (args->ep_size > plan->num_experts) {
    fprintf(stderr, "volt8 plan: --ep %d: the checkpoint has %d experts, fewer than the ranks (--ep is 1..%d here)\n",
            args->ep_size, plan->num_experts, plan->num_experts);
    return 2;
  }
  return 0;
}

int cli_plan(int argc, char **argv) {
  plan_args args;
  int rc = parse_plan_args(argc, argv, &args);
  if (rc != 0) return rc;
  volt8_ctx_options ctx_options = VOLT8_CTX_OPTIONS_INIT;
  ctx_options.device = -1;
  volt8_ctx *ctx = NULL;
  volt8_status status = volt8_ctx_create(&ctx_options, &ctx);
  if (status != VOLT8_OK) return cli_report(NULL, "plan", status);
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  rc = plan_checkpoint(ctx, &args, &plan);
  if (rc == 0) {
    if (args.json) print_header_json(&args, &plan);
    else print_header_text(&args, &plan);
    status = print_ranks(ctx, &args, &plan);
    if (args.json) printf("]}\n");
    rc = status == VOLT8_OK ? 0 : cli_report(ctx, "plan", status);
  }
  volt8_ctx_destroy(ctx);
  return rc;
}
