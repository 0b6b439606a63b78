/* volt8 demo, the main job: a synthetic MTP checkpoint with the real layout, at the per-expert
 * shape of a model of the registry (runtime/checkpoint/models.h; --model, default the reference), is planned
 * for TP4, rank 0 is loaded, and the forward runs on the GPU (eager and graph-replayed, checked against the
 * reference, timed) or, without one, the SM70 kernels are compiled and the reference forward and
 * the rejection sampler run on the CPU. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tools/tools.h"

#define DEMO_TP 4
#define MIB (1024.0 * 1024.0)

/* The model's top-k; the checkpoint holds 8 experts, or 16 when a token routes to more than 8. */
static int32_t demo_top_k = 10;
static int32_t demo_experts(const volt8_model *model) { return model->top_k > 8 ? 16 : 8; }

typedef struct demo_inputs {
  int32_t num_tokens;
  uint16_t *x;
  int32_t *ids;
  float *weights;
  double *reference;
} demo_inputs;

static uint64_t demo_state = 0x5eed1234abcdull;
static double demo_uniform(void) {
  demo_state ^= demo_state << 13;
  demo_state ^= demo_state >> 7;
  demo_state ^= demo_state << 17;
  return (double)(demo_state >> 11) * (1.0 / 9007199254740992.0);
}

static int make_inputs(volt8_ctx *ctx, const volt8_host_checkpoint *host, int32_t num_tokens, demo_inputs *inputs) {
  int32_t hidden = host->shape.hidden, experts = host->shape.num_experts;
  inputs->num_tokens = num_tokens;
  inputs->x = malloc((size_t)num_tokens * hidden * 2);
  inputs->ids = malloc((size_t)num_tokens * demo_top_k * 4);
  inputs->weights = malloc((size_t)num_tokens * demo_top_k * 4);
  inputs->reference = malloc((size_t)num_tokens * hidden * sizeof(double));
  if (!inputs->x || !inputs->ids || !inputs->weights || !inputs->reference) return -1;
  for (size_t i = 0; i < (size_t)num_tokens * hidden; i++) inputs->x[i] = volt8_half_from_double(2.0 * demo_uniform() - 1.0);
  for (int32_t t = 0; t < num_tokens; t++) {
    /* top-k distinct experts: a random rotation of 0..E-1 */
    int32_t start = (int32_t)(demo_uniform() * experts), stride = 1 + 2 * (int32_t)(demo_uniform() * (experts / 2 - 1));
    while (stride > 1 && experts % stride == 0) stride -= 2;
    for (int32_t j = 0; j < demo_top_k; j++) {
      inputs->ids[t * demo_top_k + j] = (start + j * stride) % experts;
      inputs->weights[t * demo_top_k + j] = (float)(0.05 + demo_uniform() / demo_top_k);
    }
  }
  volt8_status status = volt8_reference_moe_forward(ctx, &host->shape, &host->experts, inputs->x, inputs->ids,
                                                    inputs->weights, num_tokens, demo_top_k, inputs->reference);
  return status == VOLT8_OK ? 0 : cli_report(ctx, "demo (reference)", status);
}

static void free_inputs(demo_inputs *inputs) {
  free(inputs->x);
  free(inputs->ids);
  free(inputs->weights);
  free(inputs->reference);
}

static int print_demo_ranks(volt8_ctx *ctx, const volt8_plan_report *plan) {
  printf("memory of a rank's experts, in three columns:\n"
         "  FP16    the rank's slice of the expert weights in FP16\n"
         "  padded  what a loader that pads each rank's slice to whole 128-row scale blocks holds: the E4M3\n"
         "          weights of the padded slice plus its FP16 block scales\n"
         "  volt8   what volt8 keeps: the E4M3 weights of the slice as it is, plus the FP16 block scales it\n"
         "          touches\n");
  printf("the demo checkpoint at TP%d (FP16 / padded / volt8):\n", DEMO_TP);
  for (int32_t rank = 0; rank < DEMO_TP; rank++) {
    volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
    volt8_memory_report memory = VOLT8_MEMORY_REPORT_INIT;
    volt8_status status = volt8_plan_rank(ctx, plan, rank, &shape, &memory);
    if (status != VOLT8_OK) return cli_report(ctx, "demo (plan)", status);
    printf("  rank %d (I=%d at offset %3d): %8.1f / %7.1f / %7.1f MiB\n", rank, shape.intermediate,
           shape.intermediate_offset, memory.fp16_bytes / MIB, memory.padded_bytes / MIB, memory.resident_bytes / MIB);
  }
  return 0;
}

/* The model with all its experts at TP 1/2/4/8: the largest rank's figures (ranks differ only in the
 * scale blocks their offset makes them touch). */
static int print_model_table(volt8_ctx *ctx, const volt8_plan_report *plan, const volt8_model *model) {
  printf("%s (%d experts, hidden %d, moe intermediate %d), memory per rank:\n", model->description,
         model->num_experts, model->hidden, model->intermediate);
  printf("  TP  I/rank  offsets in the 128 grid            FP16 MiB  padded MiB  volt8 MiB\n");
  volt8_plan_report full = *plan;
  full.num_experts = model->num_experts;
  for (int32_t tp = 1; tp <= 8; tp *= 2) {
    full.tp_size = tp;
    volt8_memory_report largest = VOLT8_MEMORY_REPORT_INIT;
    volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
    char offsets[128] = "";
    size_t used = 0;
    for (int32_t rank = 0; rank < tp; rank++) {
      volt8_memory_report memory = VOLT8_MEMORY_REPORT_INIT;
      volt8_status status = volt8_plan_rank(ctx, &full, rank, &shape, &memory);
      if (status != VOLT8_OK) return cli_report(ctx, "demo (plan)", status);
      used += (size_t)snprintf(offsets + used, sizeof offsets - used, "%s%d", rank ? "," : "", shape.intermediate_offset);
      if (memory.resident_bytes > largest.resident_bytes) largest = memory;
    }
    printf("  %-2d  %6d  %-33s %9.1f  %10.1f  %9.1f\n", tp, shape.intermediate, offsets, largest.fp16_bytes / MIB,
           largest.padded_bytes / MIB, largest.resident_bytes / MIB);
  }
  return 0;
}

static double relative_error(volt8_ctx *ctx, const demo_inputs *inputs, const uint16_t *out, int32_t hidden) {
  double error = 0.0;
  if (volt8_relative_l2_half(ctx, inputs->reference, out, (size_t)inputs->num_tokens * hidden, &error) != VOLT8_OK)
    return -1.0;
  return error;
}

/* Eager vs reference, graph replay vs eager, and replay timings for one token count. */
static int run_gpu_case(volt8_ctx *ctx, volt8_experts *experts, const volt8_host_checkpoint *host, int32_t num_tokens) {
  const volt8_cuda_driver *cuda = volt8_tools_ctx(ctx).cuda;
  int32_t hidden = host->shape.hidden;
  demo_inputs inputs = {0};
  if (make_inputs(ctx, host, num_tokens, &inputs) != 0) return 1;
  size_t x_bytes = (size_t)num_tokens * hidden * 2, pair_bytes = (size_t)num_tokens * demo_top_k * 4;
  CUdeviceptr d_x = 0, d_ids = 0, d_weights = 0, d_out = 0;
  CUstream stream = NULL;
  CUevent start = NULL, stop = NULL;
  uint16_t *eager = malloc(x_bytes), *replayed = malloc(x_bytes);
  volt8_graph *graph = NULL;
  int rc = 1;
  if (!eager || !replayed || cuda->cuMemAlloc(&d_x, x_bytes) || cuda->cuMemAlloc(&d_out, x_bytes) ||
      cuda->cuMemAlloc(&d_ids, pair_bytes) || cuda->cuMemAlloc(&d_weights, pair_bytes) ||
      cuda->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) || cuda->cuEventCreate(&start, 0) ||
      cuda->cuEventCreate(&stop, 0) || cuda->cuMemcpyHtoD(d_x, inputs.x, x_bytes) ||
      cuda->cuMemcpyHtoD(d_ids, inputs.ids, pair_bytes) || cuda->cuMemcpyHtoD(d_weights, inputs.weights, pair_bytes)) {
    fprintf(stderr, "volt8 demo: device allocation or copy failed\n");
    goto done;
  }
  volt8_moe_args args = VOLT8_MOE_ARGS_INIT;
  args.num_tokens = num_tokens;
  args.top_k = demo_top_k;
  args.x = (const void *)d_x;
  args.topk_ids = (const int32_t *)d_ids;
  args.topk_weights = (const float *)d_weights;
  args.out = (void *)d_out;
  volt8_status status = volt8_moe_forward(experts, &args, stream);
  if (status == VOLT8_OK) status = volt8_graph_capture(experts, &args, stream, &graph);
  if (status != VOLT8_OK) {
    rc = cli_report(ctx, "demo (forward)", status);
    goto done;
  }
  cuda->cuStreamSynchronize(stream);
  cuda->cuMemcpyDtoH(eager, d_out, x_bytes);
  const int replays = 200;
  float milliseconds = 0.0f;
  volt8_graph_launch(graph, stream);
  cuda->cuEventRecord(start, stream);
  for (int r = 0; r < replays; r++) volt8_graph_launch(graph, stream);
  cuda->cuEventRecord(stop, stream);
  if (cuda->cuEventSynchronize(stop) != CUDA_SUCCESS || cuda->cuEventElapsedTime(&milliseconds, start, stop) != CUDA_SUCCESS) {
    fprintf(stderr, "volt8 demo: the graph replays failed\n");
    goto done;
  }
  cuda->cuMemcpyDtoH(replayed, d_out, x_bytes);
  double error = relative_error(ctx, &inputs, eager, hidden);
  int identical = memcmp(eager, replayed, x_bytes) == 0;
  printf("  M=%-3d eager vs reference: relative L2 %.1e %s | %d replays bit-identical to eager: %s | %6.1f us per forward\n",
         num_tokens, error, error >= 0 && error <= 1e-3 ? "(ok)" : "(WRONG)", replays, identical ? "yes" : "NO",
         1000.0 * milliseconds / replays);
  rc = (error >= 0 && error <= 1e-3 && identical) ? 0 : 1;
done:
  volt8_graph_destroy(graph);
  if (start) cuda->cuEventDestroy(start);
  if (stop) cuda->cuEventDestroy(stop);
  if (stream) cuda->cuStreamDestroy(stream);
  if (d_x) cuda->cuMemFree(d_x);
  if (d_out) cuda->cuMemFree(d_out);
  if (d_ids) cuda->cuMemFree(d_ids);
  if (d_weights) cuda->cuMemFree(d_weights);
  free(eager);
  free(replayed);
  free_inputs(&inputs);
  return rc;
}

static int run_gpu(volt8_ctx *ctx, const volt8_load_options *options, const volt8_host_checkpoint *host) {
  double started = cli_now_seconds();
  volt8_experts *experts = NULL;
  volt8_status status = volt8_experts_load(ctx, options, &experts);
  if (status != VOLT8_OK) return cli_report(ctx, "demo (load)", status);
  volt8_memory_report memory = VOLT8_MEMORY_REPORT_INIT;
  volt8_experts_memory(experts, &memory);
  printf("loaded rank 0 onto the GPU: %.1f MiB resident, %.1f MiB of forward workspace (%d tokens), %.2f s\n",
         memory.resident_bytes / MIB, memory.workspace_bytes / MIB, options->max_tokens, cli_now_seconds() - started);
  const int32_t ms[] = {1, 8, 64};
  started = cli_now_seconds();
  printf("preparing kernels for M = 1, 8, 64 ...\n");
  fflush(stdout);
  status = volt8_experts_prepare(experts, ms, 3);
  if (status != VOLT8_OK) {
    volt8_experts_destroy(experts);
    return cli_report(ctx, "demo (prepare)", status);
  }
  printf("prepared in %.1f s\n", cli_now_seconds() - started);
  int rc = 0;
  for (int i = 0; i < 3 && rc == 0; i++) rc = run_gpu_case(ctx, experts, host, ms[i]);
  volt8_experts_destroy(experts);
  return rc;
}

static int run_sampler_on_cpu(void) {
  enum { BATCH = 4, DRAFTS = 3, VOCAB = 100 };
  static float target[BATCH][DRAFTS + 1][VOCAB], draft[BATCH][DRAFTS][VOCAB];
  int32_t num_draft[BATCH] = {3, 3, 2, 0}, draft_ids[BATCH][DRAFTS], out_ids[BATCH][DRAFTS + 1], accepted[BATCH];
  for (int b = 0; b < BATCH; b++)
    for (int i = 0; i <= DRAFTS; i++) {
      double total_p = 0.0, total_q = 0.0;
      for (int v = 0; v < VOCAB; v++) {
        target[b][i][v] = (float)(demo_uniform() * demo_uniform());
        total_p += target[b][i][v];
        if (i < DRAFTS) total_q += draft[b][i][v] = (float)(demo_uniform() * demo_uniform());
      }
      for (int v = 0; v < VOCAB; v++) {
        target[b][i][v] = (float)(target[b][i][v] / total_p);
        if (i < DRAFTS) draft[b][i][v] = (float)(draft[b][i][v] / total_q);
      }
      if (i < DRAFTS) draft_ids[b][i] = (int32_t)(demo_uniform() * VOCAB);
    }
  volt8_rejection_args args = VOLT8_REJECTION_ARGS_INIT;
  args.batch = BATCH;
  args.max_draft = DRAFTS;
  args.num_draft = num_draft;
  args.draft_ids = &draft_ids[0][0];
  args.draft_probs = &draft[0][0][0];
  args.target_probs = &target[0][0][0];
  args.vocab = VOCAB;
  args.seed = 42;
  args.out_ids = &out_ids[0][0];
  args.num_accepted = accepted;
  volt8_status status = volt8_rejection_sample_host(&args);
  if (status != VOLT8_OK) return cli_report(NULL, "demo (sampler)", status);
  printf("rejection sampler (CPU, %d requests, %d drafts, vocab %d): accepted", BATCH, DRAFTS, VOCAB);
  for (int b = 0; b < BATCH; b++) printf(" %d/%d", accepted[b], num_draft[b]);
  printf(", emitted tokens:");
  for (int b = 0; b < BATCH; b++) printf(" %d", out_ids[b][accepted[b]]);
  printf("\n");
  return 0;
}

static int run_cpu(volt8_ctx *ctx, const volt8_host_checkpoint *host) {
  char arch[16];
  volt8_ctx_target_arch(ctx, arch, sizeof arch);
  printf("compiling the %s kernels for rank 0's shape (cached for later runs):\n", arch);
  compile_totals totals = {0, 0, 0.0};
  volt8_status status = cli_compile_all(ctx, &host->shape, &totals, 1);
  const volt8_nvrtc_lib *nvrtc = NULL;
  int32_t target = volt8_tools_ctx(ctx).target_arch;
  /* Without an NVRTC for compute_70 (NVRTC 13 alone) the kernels are skipped, saying how to get one: they
   * only fill the cache for later runs, and the rest of the CPU half does not need them. */
  if (status == VOLT8_ERR_ARCH_UNSUPPORTED && volt8_nvrtc_for_arch(ctx, target, &nvrtc) != VOLT8_OK &&
      target < VOLT8_NVRTC_13_LOWEST_ARCH)
    printf("the %s kernels were not compiled: no NVRTC found here targets compute_%d (volt8 doctor lists those tried). "
           "%s\n", arch, (int)target, volt8_nvrtc_compute70_advice);
  else if (status != VOLT8_OK)
    return cli_report(ctx, "demo (compile)", status);
  for (int32_t m = 1; m <= 8; m *= 8) {
    demo_inputs inputs = {0};
    double started = cli_now_seconds();
    if (make_inputs(ctx, host, m, &inputs) != 0) {
      free_inputs(&inputs);
      return 1;
    }
    double norm = 0.0;
    for (size_t i = 0; i < (size_t)m * host->shape.hidden; i++) norm += inputs.reference[i] * inputs.reference[i];
    printf("reference forward on the CPU, M=%d top-%d: |out| = %.4f, %.2f s\n", m, demo_top_k, sqrt(norm),
           cli_now_seconds() - started);
    free_inputs(&inputs);
  }
  return run_sampler_on_cpu();
}

/* --keep [DIR] and --model NAME; DIR is left NULL for a temporary folder. 0, or 2 after an error. */
static int parse_demo_args(int argc, char **argv, int *keep, const char **keep_dir, const char **model_name) {
  volt8_tools_flags_seen seen = {{0}, 0};
  for (int i = 1; i < argc; i++) {
    if ((strcmp(argv[i], "--keep") == 0 || strcmp(argv[i], "--model") == 0) && cli_flag_once("demo", &seen, argv[i]) != 0)
      return 2;
    if (strcmp(argv[i], "--keep") == 0) {
      *keep = 1;
      /* the demo takes no other bare argument, so one after --keep can only be its folder */
      if (i + 1 < argc && argv[i + 1][0] != '-') *keep_dir = argv[++i];
    } else if (strcmp(argv[i], "--model") == 0) {
      if (!(*model_name = cli_flag_value("demo", argc, argv, &i))) return 2;
    } else {
      return cli_unknown_argument("demo", argv[i]);
    }
  }
  return 0;
}

/* A folder the demo may write into: new (in a folder that exists), or empty (it never overwrites
 * files of someone else's). */
static int check_keep_dir(const char *dir) {
  if (cli_check_path("demo", "--keep", dir, CLI_FOLDER_TO_MAKE) != 0) return 2;
  DIR *listing = opendir(dir);
  if (!listing && errno == ENOENT) return 0; /* made by the writer */
  if (!listing) {
    fprintf(stderr, "volt8 demo: --keep %s: %s (give a new or empty folder for the checkpoint)\n", dir, strerror(errno));
    return 2;
  }
  int entries = 0;
  for (struct dirent *entry = readdir(listing); entry; entry = readdir(listing))
    entries += strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0;
  closedir(listing);
  if (entries == 0) return 0;
  fprintf(stderr, "volt8 demo: --keep %s: the folder is not empty (give a new or empty folder for the checkpoint)\n",
          dir);
  return 2;
}

/* A new folder of the demo's own, $TMPDIR/volt8-demo-XXXXXX (mkdtemp: made here, mode 0700). 0, or 1
 * after the reason on stderr. */
static int make_scratch_folder(char *dir, size_t dir_size) {
  const char *parent = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  int written = snprintf(dir, dir_size, "%s/volt8-demo-XXXXXX", parent);
  if (written < 0 || (size_t)written >= dir_size) {
    fprintf(stderr, "volt8 demo: TMPDIR=%.64s...: a path of %d bytes is too long for the demo's folder\n", parent,
            written);
    return 1;
  }
  if (mkdtemp(dir)) return 0;
  fprintf(stderr, "volt8 demo: cannot create a folder in %s (TMPDIR): %s\n", parent, strerror(errno));
  return 1;
}

int cli_demo(int argc, char **argv) {
  int keep = 0;
  const char *model_name = VOLT8_MODEL_REFERENCE, *keep_dir = NULL;
  int parsed = parse_demo_args(argc, argv, &keep, &keep_dir, &model_name);
  if (parsed != 0) return parsed;
  if (keep_dir && (cli_parse_path("demo", "--keep", keep_dir, "folder") != 0 || check_keep_dir(keep_dir) != 0)) return 2;
  const volt8_model *model = cli_find_model("demo", model_name);
  if (!model) return 2;
  demo_top_k = model->top_k;
  double started = cli_now_seconds();
  volt8_ctx_options ctx_options = VOLT8_CTX_OPTIONS_INIT;
  volt8_ctx *ctx = NULL;
  volt8_status status = volt8_ctx_create(&ctx_options, &ctx);
  if (status != VOLT8_OK) return cli_report(NULL, "demo", status);
  int has_gpu = volt8_ctx_require_device(ctx) == VOLT8_OK;
  printf("volt8 %s demo\n", volt8_version_string());
  if (has_gpu) printf("device: %s (sm_%d)\n", volt8_tools_ctx(ctx).device_name, volt8_tools_ctx(ctx).device_arch);
  else printf("device: none (%s)\n", volt8_last_error(ctx));

  char dir[4096];
  synthetic_written written = {0, 0};
  int rc = 0;
  if (keep_dir) snprintf(dir, sizeof dir, "%s", keep_dir);
  else if ((rc = make_scratch_folder(dir, sizeof dir)) == 0) written.made_folder = 1;
  synthetic_checkpoint spec = {model->hidden, model->intermediate, demo_experts(model), demo_top_k, 48, 7};
  if (rc == 0) {
    printf("writing a synthetic MTP checkpoint of %s (ModelOpt mixed precision, %d E4M3 experts of %dx%d, BF16 "
           "128x128 scales) to %s ...\n", model->description, spec.num_experts, spec.intermediate, spec.hidden, dir);
    fflush(stdout);
    rc = cli_write_synthetic_checkpoint(dir, &spec, &written);
  }
  int checkpoint_written = rc == 0;
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = dir;
  options.tp_size = DEMO_TP;
  options.tp_rank = 0;
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  if (rc == 0) {
    status = volt8_plan(ctx, &options, &plan);
    if (status != VOLT8_OK) rc = cli_report(ctx, "demo (plan)", status);
  }
  if (rc == 0) {
    printf("checkpoint: %s, %d experts, hidden %d, intermediate %d, scales %s\n", plan.quant_format, plan.num_experts,
           plan.hidden, plan.intermediate, plan.scale_dtype);
    rc = print_demo_ranks(ctx, &plan);
    if (rc == 0) rc = print_model_table(ctx, &plan, model);
  }
  volt8_host_checkpoint *host = NULL;
  if (rc == 0) {
    status = volt8_checkpoint_load_host(ctx, &options, &host);
    if (status != VOLT8_OK) rc = cli_report(ctx, "demo (host load)", status);
  }
  if (rc == 0) {
    printf("loaded rank 0 on the host: I=%d at offset %d, block %dx%d\n", host->shape.intermediate,
           host->shape.intermediate_offset, host->shape.block_n, host->shape.block_k);
    rc = has_gpu ? run_gpu(ctx, &options, host) : run_cpu(ctx, host);
  }
  cli_print_tuning_warnings("demo");
  volt8_host_checkpoint_free(host);
  cli_cache_store_failures(ctx, "demo", 0);
  if (keep && checkpoint_written) {
    printf("the checkpoint is kept in %s; next: volt8 plan %s --tp %d\n", dir, dir, DEMO_TP);
  } else {
    /* what the demo wrote, and nothing else: a half-written checkpoint too, --keep or not */
    cli_remove_synthetic_checkpoint(dir, &written);
    if (keep) fprintf(stderr, "volt8 demo: --keep %s: no checkpoint was kept, since writing it failed\n", dir);
  }
  volt8_ctx_destroy(ctx);
  printf("demo %s in %.1f s\n", rc == 0 ? "finished" : "FAILED", cli_now_seconds() - started);
  return rc;
}
