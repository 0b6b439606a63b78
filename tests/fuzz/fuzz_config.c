/* Fuzz target: config.json, hf_quant_config.json and the MTP tensor names of a checkpoint.
 *
 * Input: up to four parts separated by "\n----\n":
 *   config.json | hf_quant_config.json | tensor name root (default "mtp.layers.0.") | flags
 * An empty or absent part leaves its file out. The harness writes a tiny checkpoint (2 experts,
 * intermediate 32, hidden 16) under the root; flags pick its layout and the load options:
 *   b BF16 weights (no scales)   f fused gate_up_proj/down_proj   s weight_scale, not _scale_inv
 *   4 4-D ModelOpt scales        F F32 scales   h F16 scales       x expert 1 has no down_proj
 *   n a NaN code in expert 1     d draft folder (tensors and hf_quant_config.json in ckpt/draft)
 *   o mtp_expert_quantization "fp8"   t tp_size 2   r rank 1   1 online_block_n 1   m mtp_layer 1
 * volt8_plan runs on it; where it succeeds, the host load of the same options must succeed and
 * agree with the plan. Either way no checkpoint allocation or mapping may outlive the call. */
#include "fuzz_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"

#define EXPERTS 2
#define INTERMEDIATE 32
#define HIDDEN 16
#define ROOT_BYTES 256
#define FLAG_BYTES 64

static const char *const projections[] = {"gate_proj", "up_proj", "down_proj"};
static char ckpt_dir[1024], draft_dir[1100];
static char written_root[ROOT_BYTES + 1] = "\x01", written_flags[FLAG_BYTES + 1];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_make_dirs("cfg/ckpt/draft");
  fuzz_path(ckpt_dir, sizeof ckpt_dir, "cfg/ckpt");
  snprintf(draft_dir, sizeof draft_dir, "%s/draft", ckpt_dir);
  return 0;
}

static int has(const char *flags, char flag) { return strchr(flags, flag) != NULL; }

static void fill_weights(uint8_t *bytes, size_t count, int bf16, int nan_code) {
  for (size_t i = 0; i < count; i++) {
    if (bf16) bytes[i] = i % 2 ? 0x3c : (uint8_t)(i * 7);
    else bytes[i] = (uint8_t)(((i * 37 + 11) & 0x7e) | ((i & 1) << 7)); /* never 0x7F or 0xFF */
  }
  if (!nan_code || count < 4) return;
  if (bf16) bytes[2] = 0xc0, bytes[3] = 0x7f; /* element 1 = 0x7FC0, a BF16 NaN */
  else bytes[2] = 0x7f;
}

static void add_scale(fuzz_st_builder *builder, const char *weight_name, const char *flags) {
  const char *dtype = has(flags, 'F') ? "F32" : has(flags, 'h') ? "F16" : "BF16";
  const uint8_t f32[4] = {0, 0, 0x80, 0x3b}, f16[2] = {0, 0x1c}, bf16[2] = {0x80, 0x3b}; /* 2^-8 */
  const uint8_t *value = has(flags, 'F') ? f32 : has(flags, 'h') ? f16 : bf16;
  size_t value_bytes = has(flags, 'F') ? 4 : 2;
  char name[ROOT_BYTES + 256];
  int plain = has(flags, 's') || has(flags, '4');
  snprintf(name, sizeof name, "%s_scale%s", weight_name, plain ? "" : "_inv");
  const int64_t shape4[4] = {1, 1, 1, 1};
  fuzz_st_add(builder, name, dtype, shape4, has(flags, '4') ? 4 : 2, value, value_bytes);
}

static void write_checkpoint(const char *root, const char *flags) {
  static uint8_t weights[EXPERTS * 2 * INTERMEDIATE * HIDDEN * 2];
  int bf16 = has(flags, 'b') || has(flags, 'f');
  size_t element_bytes = bf16 ? 2 : 1;
  const char *dtype = bf16 ? "BF16" : "F8_E4M3";
  fuzz_st_builder builder = {0};
  char name[ROOT_BYTES + 128];
  if (has(flags, 'f')) {
    const int64_t gate_up[3] = {EXPERTS, 2 * INTERMEDIATE, HIDDEN}, down[3] = {EXPERTS, HIDDEN, INTERMEDIATE};
    size_t bytes = (size_t)EXPERTS * 2 * INTERMEDIATE * HIDDEN * element_bytes;
    fill_weights(weights, bytes, bf16, has(flags, 'n'));
    snprintf(name, sizeof name, "%smlp.experts.gate_up_proj", root);
    fuzz_st_add(&builder, name, dtype, gate_up, 3, weights, bytes);
    snprintf(name, sizeof name, "%smlp.experts.down_proj", root);
    fuzz_st_add(&builder, name, dtype, down, 3, weights, bytes / 2);
  } else {
    for (int expert = 0; expert < EXPERTS; expert++) {
      for (int p = 0; p < 3; p++) {
        if (expert == 1 && p == 2 && has(flags, 'x')) continue;
        const int64_t shape[2] = {p == 2 ? HIDDEN : INTERMEDIATE, p == 2 ? INTERMEDIATE : HIDDEN};
        size_t bytes = (size_t)INTERMEDIATE * HIDDEN * element_bytes;
        fill_weights(weights, bytes, bf16, expert == 1 && has(flags, 'n'));
        snprintf(name, sizeof name, "%smlp.experts.%d.%s.weight", root, expert, projections[p]);
        fuzz_st_add(&builder, name, dtype, shape, 2, weights, bytes);
        if (!bf16) add_scale(&builder, name, flags);
      }
    }
  }
  char path[1200], stale[1200];
  snprintf(path, sizeof path, "%s/model.safetensors", has(flags, 'd') ? draft_dir : ckpt_dir);
  snprintf(stale, sizeof stale, "%s/model.safetensors", has(flags, 'd') ? ckpt_dir : draft_dir);
  fuzz_remove(stale);
  fuzz_st_write(&builder, path);
}

static void place_json(const char *folder, const char *name, const uint8_t *text, size_t size, int present) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", folder, name);
  if (present) fuzz_write_file(path, text, size);
  else fuzz_remove(path);
}

static void check_plan(volt8_ctx *ctx, const volt8_load_options *options, const volt8_plan_report *plan) {
  fuzz_require(plan->route == VOLT8_ROUTE_NATIVE || plan->route == VOLT8_ROUTE_ONLINE, "plan route", NULL);
  fuzz_require(plan->hidden == HIDDEN && plan->intermediate == INTERMEDIATE, "plan sizes", plan->tensor_prefix);
  fuzz_require(plan->num_experts >= 1 && plan->num_experts <= EXPERTS, "plan expert count", plan->tensor_prefix);
  fuzz_require(memchr(plan->quant_format, 0, sizeof plan->quant_format) && memchr(plan->tensor_prefix, 0, sizeof plan->tensor_prefix),
               "plan strings terminated", NULL);
  for (int32_t rank = 0; rank < options->tp_size; rank++) {
    volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
    volt8_memory_report memory = VOLT8_MEMORY_REPORT_INIT;
    fuzz_require(volt8_plan_rank(ctx, plan, rank, &shape, &memory) == VOLT8_OK, "plan_rank of a valid plan",
                 volt8_last_error(ctx));
    fuzz_require(memory.weight_bytes > 0 && memory.resident_bytes >= memory.weight_bytes + memory.scale_bytes,
                 "memory report", NULL);
  }
  volt8_host_checkpoint *host = NULL;
  volt8_status status = volt8_checkpoint_load_host(ctx, options, &host);
  fuzz_require(status == VOLT8_OK, "host load of a checkpoint the plan accepted", volt8_last_error(ctx));
  fuzz_require(host->shape.hidden == HIDDEN && host->shape.num_experts == plan->num_experts &&
                   host->shape.intermediate == INTERMEDIATE / options->tp_size,
               "host shape differs from the plan", NULL);
  fuzz_require(host->report.route == plan->route, "host route differs from the plan", NULL);
  volt8_host_checkpoint_free(host);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *parts[4];
  size_t part_sizes[4];
  int count = fuzz_split(data, size, parts, part_sizes, 4);
  char root[ROOT_BYTES + 1] = "mtp.layers.0.", flags[FLAG_BYTES + 1] = "";
  if (count > 2 && part_sizes[2] > 0 && part_sizes[2] <= ROOT_BYTES && !memchr(parts[2], 0, part_sizes[2]) &&
      !memchr(parts[2], '"', part_sizes[2]) && !memchr(parts[2], '\\', part_sizes[2])) {
    memcpy(root, parts[2], part_sizes[2]);
    root[part_sizes[2]] = '\0';
  }
  if (count > 3) snprintf(flags, sizeof flags, "%.*s", (int)(part_sizes[3] < FLAG_BYTES ? part_sizes[3] : FLAG_BYTES), parts[3]);
  flags[strcspn(flags, "\n")] = '\0';
  if (strcmp(root, written_root) != 0 || strcmp(flags, written_flags) != 0) {
    write_checkpoint(root, flags);
    snprintf(written_root, sizeof written_root, "%s", root);
    snprintf(written_flags, sizeof written_flags, "%s", flags);
  }
  int draft = has(flags, 'd');
  place_json(ckpt_dir, "config.json", parts[0], part_sizes[0], count > 0 && part_sizes[0] > 0);
  place_json(draft ? draft_dir : ckpt_dir, "hf_quant_config.json", count > 1 ? parts[1] : NULL, count > 1 ? part_sizes[1] : 0,
             count > 1 && part_sizes[1] > 0);
  place_json(draft ? ckpt_dir : draft_dir, "hf_quant_config.json", NULL, 0, 0);

  volt8_ctx *ctx = fuzz_ctx();
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = ckpt_dir;
  options.draft_checkpoint_dir = draft ? draft_dir : NULL;
  options.tp_size = has(flags, 't') ? 2 : 1;
  options.tp_rank = has(flags, 't') && has(flags, 'r') ? 1 : 0;
  options.mtp_expert_quantization = has(flags, 'o') ? "fp8" : NULL;
  options.online_block_n = has(flags, '1') ? 1 : 128;
  options.mtp_layer = has(flags, 'm') ? 1 : 0;
  volt8_load_report load_report = VOLT8_LOAD_REPORT_INIT;
  options.report = &load_report;
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  int64_t live = volt8_checkpoint_live_allocations();
  volt8_status status = volt8_plan(ctx, &options, &plan);
  fuzz_require(volt8_checkpoint_live_allocations() == live, "the plan left an allocation or mapping", NULL);
  if (getenv("VOLT8_FUZZ_VERBOSE"))
    fprintf(stderr, "  plan [%s|%s]: %s %s\n", root, flags, volt8_status_string(status),
            status == VOLT8_OK ? plan.quant_format : volt8_last_error(ctx));
  if (status == VOLT8_OK) {
    check_plan(ctx, &options, &plan);
    fuzz_require(volt8_checkpoint_live_allocations() == live, "the host load left an allocation or mapping", NULL);
  } else {
    fuzz_require(volt8_last_error(ctx)[0] != '\0', "failure without a message", volt8_status_string(status));
    fuzz_require(status != VOLT8_ERR_INTERNAL && status != VOLT8_ERR_OUT_OF_MEMORY && status != VOLT8_ERR_NO_DEVICE,
                 "unexpected status", volt8_last_error(ctx));
  }
  return 0;
}
