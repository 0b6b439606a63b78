/* `volt8 tune` options and the loop over shapes. */
#include "tune_run.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "derive_model.h"
#include "derive_occupancy.h"
#include "tools/tools.h"
#include "tuner_gpu.h"

static const int32_t DEFAULT_M[] = {1, 2, 4, 8, 16, 32, 64, 128};

void tune_options_default(tune_options *options) {
  memset(options, 0, sizeof *options);
  options->top_k = volt8_model_find(VOLT8_MODEL_REFERENCE)->top_k;
  options->m_count = (int32_t)(sizeof DEFAULT_M / sizeof DEFAULT_M[0]);
  memcpy(options->m_values, DEFAULT_M, sizeof DEFAULT_M);
  options->out_dir = "tuning/tables";
  options->seed = 1;
  options->warmup_batches = 2;
  options->screen_batches = 8;
  options->final_batches = 30;
  options->finalists = 3;
  options->prune_factor = 4;
  options->skip_pruned = 1;
  options->keep_within = 1;
}

const char *tune_usage(void) {
  return "usage: volt8 tune [options]\n"
         "  --model NAME          a model's experts (volt8 models lists them; default reference), with its top-k\n"
         "  --tp 1,2,4,8          the model's TP sizes (rank 1 of each, rank 0 at TP1; default 4)\n"
         "  --shape S             any shape instead (may be repeated)\n"
         "  --m 1,2,4,...         token counts (default 1,2,4,8,16,32,64,128)\n"
         "  --top-k K             experts per token (default: the model's, 10 with --shape)\n"
         "  --out DIR             where the tables go, merged into any already there (default tuning/tables)\n"
         "  --target-arch sm_XX   tune the kernels for this arch (default: the device's)\n"
         "  --device N            CUDA device (default 0)\n"
         "  --seed N --sets N     problem seed and input sets per M (default 1 and by the L2 size)\n"
         "  --screen N --final N --finalists N   timed passes per candidate, per finalist, and how many\n"
         "                        finalists (default 8, 30, 3); the variant served today joins them\n"
         "  --prune F             a candidate whose first timed forward takes more than F times the best screened\n"
         "                        so far at its M is timed no further; candidates go largest block_m first,\n"
         "                        then fastest at the M before first (default 4; 0: every candidate timed in full)\n"
         "  --skip-pruned 0|1     1: a candidate pruned at a smaller M, its items no larger than the pick's there,\n"
         "                        is not measured at later M (default 1; needs --prune)\n"
         "  --keep-within P       the served variant, and the served pair, stay unless a final time beats theirs\n"
         "                        by more than P percent (default 1; 0: any faster time wins)\n"
         "  --resume 0|1          1: an M that both of a shape's tables in --out already hold is not tuned again,\n"
         "                        so a tune cut short goes on where it stopped (default 0)\n"
         "  --jobs N              compile threads (default: processors, at most 16)\n"
         "  --log FILE            every measurement and the dispatch's own picks, as JSON Lines\n"
         "  --derive sm_70        no GPU: derive the tables from the V100 model (tuning/derive_model.h), with each\n"
         "                        variant's occupancy from its sm_70 CUBIN (needs NVRTC 12)\n"
         "  --model-device h200   with --derive: the model with the H200's figures instead, to check it against\n"
         "                        measurements (needs --out other than tuning/tables: never shipped)\n";
}

/* One shape per TP size of `text` ("1,2,4,8"), each at its default rank; "" for the default TP size. */
static int add_tp_shapes(const volt8_model *model, const char *text, tune_options *out, char *error,
                         size_t error_size) {
  int32_t tps[TUNE_MAX_SHAPES] = {VOLT8_TOOLS_DEFAULT_TP};
  int32_t count = *text ? volt8_tools_flag_number_list("--tp", text, "TP size", 1, VOLT8_TOOLS_MAX_TP, tps,
                                                       TUNE_MAX_SHAPES, error, error_size)
                        : 1;
  if (count < 0) return -1;
  if (out->shape_count + count > TUNE_MAX_SHAPES) {
    snprintf(error, error_size, "--tp \"%s\" with the --shape options makes more than %d shapes", text,
             TUNE_MAX_SHAPES);
    return -1;
  }
  for (int32_t i = 0; i < count; i++) {
    int32_t rank = volt8_tools_default_rank(tps[i]);
    snprintf(out->labels[out->shape_count], sizeof out->labels[0], "%s tp%d rank %d", model->name, tps[i], rank);
    if (volt8_tools_rank_shape(model, tps[i], rank, &out->shapes[out->shape_count++], error, error_size) != 0) return -1;
  }
  return 0;
}

/* Every option of tune_usage takes a value. */
static int is_tune_option(const char *name) {
  static const char *const names[] = {"--tp",     "--model",  "--shape", "--m",      "--top-k",     "--out",
                                      "--target-arch", "--device", "--seed", "--sets", "--screen", "--final",
                                      "--finalists",   "--jobs",   "--derive", "--log", "--model-device", "--prune",
                                      "--skip-pruned", "--resume", "--keep-within"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(name, names[i]) == 0) return 1;
  return 0;
}

int tune_options_parse(int argc, char **argv, tune_options *out, char *error, size_t error_size) {
  tune_options_default(out);
  error[0] = '\0';
  const char *model_name = NULL, *tp_text = NULL;
  int top_k_given = 0, shape_given = 0;
  volt8_tools_flags_seen seen = {{0}, 0};
  for (int i = 1; i < argc; i++) {
    const char *name = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) return 1;
    if (is_tune_option(name) && strcmp(name, "--shape") != 0 && volt8_tools_flag_once(&seen, name, error, error_size) != 0)
      return -1; /* --shape repeats: one tune of several shapes */
    if (!next) {
      snprintf(error, error_size, is_tune_option(name) ? "%s needs a value" : "unknown argument \"%s\"", name);
      return -1;
    }
    int bad = 0;
    int32_t value = 0;
    if (strcmp(name, "--tp") == 0) {
      tp_text = next;
    } else if (strcmp(name, "--model") == 0) {
      model_name = next;
    } else if (strcmp(name, "--shape") == 0) {
      volt8_moe_shape shape;
      volt8_tools_model_rank(NULL, NULL, NULL, &shape, NULL, NULL, 0);
      char why[512];
      if (out->shape_count == TUNE_MAX_SHAPES) {
        snprintf(error, error_size, "--shape: at most %d shapes", TUNE_MAX_SHAPES);
        return -1;
      }
      bad = volt8_tools_parse_shape(next, &shape, why, sizeof why);
      if (bad) snprintf(error, error_size, "--shape \"%s\": %s", next, why);
      else out->shapes[out->shape_count++] = shape;
      shape_given = 1;
    } else if (strcmp(name, "--m") == 0) {
      out->m_count = volt8_tools_flag_number_list(name, next, "token count", 1, VOLT8_TUNING_MAX_M, out->m_values,
                                                  VOLT8_TOOLS_MAX_M_VALUES, error, error_size);
      bad = out->m_count < 0;
    } else if (strcmp(name, "--top-k") == 0) {
      bad = volt8_tools_flag_number(name, next, "top-k", 1, VOLT8_TOOLS_MAX_TOP_K, &out->top_k, error, error_size);
      top_k_given = 1;
    } else if (strcmp(name, "--out") == 0) {
      out->out_dir = next;
      bad = volt8_tools_flag_path(name, next, "folder", error, error_size);
    } else if (strcmp(name, "--target-arch") == 0) {
      out->target_arch = next;
      bad = volt8_tools_flag_arch(name, next, NULL, error, error_size);
    } else if (strcmp(name, "--device") == 0) {
      bad = volt8_tools_flag_number(name, next, "device ordinal", 0, 255, &out->device, error, error_size);
    } else if (strcmp(name, "--seed") == 0) {
      bad = volt8_tools_flag_number(name, next, "seed", 0, 0x7FFFFFFF, &value, error, error_size);
      out->seed = (uint64_t)value;
    } else if (strcmp(name, "--sets") == 0) {
      bad = volt8_tools_flag_number(name, next, "count of input sets", 1, 256, &out->input_sets, error, error_size);
    } else if (strcmp(name, "--screen") == 0) {
      bad = volt8_tools_flag_number(name, next, "count of timed passes", 1, 10000, &out->screen_batches, error,
                                    error_size);
    } else if (strcmp(name, "--final") == 0) {
      bad = volt8_tools_flag_number(name, next, "count of timed passes", 1, 10000, &out->final_batches, error,
                                    error_size);
    } else if (strcmp(name, "--finalists") == 0) {
      bad = volt8_tools_flag_number(name, next, "count of finalists", 0, 64, &out->finalists, error, error_size);
    } else if (strcmp(name, "--prune") == 0) {
      bad = volt8_tools_flag_number(name, next, "prune factor", 0, 1000, &out->prune_factor, error, error_size);
    } else if (strcmp(name, "--keep-within") == 0) {
      bad = volt8_tools_flag_number(name, next, "percent", 0, 100, &out->keep_within, error, error_size);
    } else if (strcmp(name, "--skip-pruned") == 0) {
      bad = volt8_tools_flag_number(name, next, "switch", 0, 1, &out->skip_pruned, error, error_size);
    } else if (strcmp(name, "--resume") == 0) {
      bad = volt8_tools_flag_number(name, next, "switch", 0, 1, &out->resume, error, error_size);
    } else if (strcmp(name, "--jobs") == 0) {
      bad = volt8_tools_flag_number(name, next, "compile thread count", 1, VOLT8_TOOLS_MAX_JOBS, &out->jobs, error,
                                    error_size);
    } else if (strcmp(name, "--log") == 0) {
      out->log_path = next;
      bad = volt8_tools_flag_path(name, next, "file", error, error_size);
    } else if (strcmp(name, "--derive") == 0) {
      out->derive_arch = next;
      bad = strcmp(next, "sm_70") != 0; /* the only device with a model */
      if (bad) snprintf(error, error_size, "--derive \"%s\": only sm_70 has a model (a V100's)", next);
    } else if (strcmp(name, "--model-device") == 0) {
      out->model_device = next;
      bad = !derive_device_find(next);
      if (bad) snprintf(error, error_size, "--model-device \"%s\" is not a modelled device (v100, h200)", next);
    } else {
      snprintf(error, error_size, "unknown argument \"%s\"", name);
      return -1;
    }
    if (bad) {
      if (!error[0]) snprintf(error, error_size, "bad value \"%s\" for %s", next, name);
      return -1;
    }
    i++;
  }
  if (model_name && shape_given) {
    snprintf(error, error_size, "--model and --shape exclude each other");
    return -1;
  }
  const volt8_model *model = volt8_tools_find_model(model_name, error, error_size);
  if (!model || (tp_text && add_tp_shapes(model, tp_text, out, error, error_size) != 0)) return -1;
  if (out->shape_count == 0 && add_tp_shapes(model, "", out, error, error_size) != 0) return -1;
  if (model_name && !top_k_given) out->top_k = model->top_k;
  /* a token routes to top_k distinct experts of the model */
  for (int32_t s = 0; s < out->shape_count; s++) {
    int32_t experts = out->shapes[s].global_experts > 0 ? out->shapes[s].global_experts : out->shapes[s].num_experts;
    if (experts > 0 && out->top_k > experts) {
      snprintf(error, error_size, "--top-k %d%s is more than the %d experts of shape %d (a token's experts are distinct)",
               out->top_k, top_k_given ? "" : " (the default)", experts, s + 1);
      return -1;
    }
  }
  if (out->derive_arch && out->target_arch) {
    snprintf(error, error_size, "--derive and --target-arch exclude each other");
    return -1;
  }
  if (out->model_device && (!out->derive_arch || (strcmp(out->model_device, "v100") != 0 &&
                                                  strcmp(out->out_dir, "tuning/tables") == 0))) {
    snprintf(error, error_size, "--model-device %s needs --derive sm_70%s", out->model_device,
             out->derive_arch ? " and an --out other than tuning/tables (such tables are never shipped)" : "");
    return -1;
  }
  return 0;
}

/* mkdir -p: 0 when `path` is a directory afterwards; else -1 with errno set, ENOTDIR when it or a
 * folder on its way is something else (a file). */
static int make_directories(const char *path) {
  char partial[4096];
  if (snprintf(partial, sizeof partial, "%s", path) >= (int)sizeof partial) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (char *slash = strchr(partial + 1, '/');; slash = strchr(slash + 1, '/')) {
    if (slash) *slash = '\0';
    if (mkdir(partial, 0755) != 0 && errno != EEXIST) return -1;
    if (!slash) break;
    *slash = '/';
  }
  struct stat info;
  if (stat(path, &info) != 0) return -1;
  if (S_ISDIR(info.st_mode)) return 0;
  errno = ENOTDIR;
  return -1;
}

static void shape_label(const volt8_moe_shape *shape, char *buf, size_t size) {
  snprintf(buf, size, "H=%d I=%d (offset %d) E=%d block %dx%d", shape->hidden, shape->intermediate,
           shape->intermediate_offset, shape->num_experts, shape->block_n, shape->block_k);
}

static void report_summary(FILE *progress, const tuner_summary *summary) {
  if (!progress) return;
  fprintf(progress,
          "tune: %d token counts done, %d measurements, %d rejected, %d timed no further, %d left out\n  %s\n  %s\n",
          summary->m_done, summary->measurements, summary->rejected, summary->pruned, summary->skipped, summary->tables[0],
          summary->tables[1]);
  if (summary->resumed)
    fprintf(progress, "tune: %d token count%s already in the tables, not tuned again (--resume 1)\n", summary->resumed,
            summary->resumed == 1 ? "" : "s");
  if (summary->failures[0]) fprintf(progress, "tune: failures:\n%s", summary->failures);
  fflush(progress);
}

/* The model refuses what lies outside its domain before any folder is made, CUBIN compiled or
 * table written. */
static volt8_status derive_domain(const tune_options *options, char *error, size_t error_size) {
  for (int32_t s = 0; s < options->shape_count; s++)
    for (int32_t i = 0; i < options->m_count; i++)
      if (derive_check_domain(NULL, &options->shapes[s], options->top_k, options->m_values[i]) != VOLT8_OK) {
        snprintf(error, error_size, "%s", volt8_last_error(NULL));
        return VOLT8_ERR_INVALID_ARGUMENT;
      }
  return VOLT8_OK;
}

static volt8_status derive_all(const tune_options *options, const char *command, FILE *progress, int tty, FILE *log,
                               tune_outcome *outcome, char *error, size_t error_size) {
  volt8_ctx_options context_options = VOLT8_CTX_OPTIONS_INIT;
  context_options.device = -1;
  context_options.target_arch = options->derive_arch;
  volt8_ctx *ctx = NULL;
  volt8_status status = volt8_ctx_create(&context_options, &ctx);
  if (status != VOLT8_OK) {
    snprintf(error, error_size, "%s", volt8_last_error(NULL));
    return status;
  }
  for (int32_t s = 0; s < options->shape_count && status == VOLT8_OK; s++) {
    char label[160];
    shape_label(&options->shapes[s], label, sizeof label);
    if (progress) fprintf(progress, "tune: deriving %s tables for %s\n", options->derive_arch, label);
    const derive_device *device = derive_device_find(options->model_device ? options->model_device : "v100");
    int v100 = device == &DERIVE_V100;
    /* Resident CTAs per SM from the sm_70 CUBINs: under sm_70's limits for the V100, under sm_90's for
     * the H200 check (its driver's JIT of the same PTX taken to need the registers the CUBIN does). */
    derive_occupancy_set occupancy = {0};
    volt8_sm_limits h200_limits;
    if (!v100) status = volt8_sm_limits_for_arch(ctx, 90, &h200_limits);
    if (status == VOLT8_OK)
      status = derive_occupancy_compile(ctx, &options->shapes[s], options->jobs ? options->jobs : bench_host_threads(16),
                                        v100 ? NULL : &h200_limits, &occupancy);
    if (status != VOLT8_OK) break;
    derive_state state = {device, options->shapes[s], options->top_k, &occupancy.view, ctx};
    tuner_backend backend = derive_backend(&state);
    tuner_settings settings = {
        .shape = options->shapes[s], .top_k = options->top_k, .m_values = options->m_values,
        .m_count = options->m_count, .screen_batches = 1, .final_batches = 1, .finalists = 0,
        .out_dir = options->out_dir, .arch = volt8_tools_ctx(ctx).target_arch, .device = device->name,
        .device_token = v100 ? VOLT8_TUNING_ANY_DEVICE : "modelled_H200",
        .method = !v100 ? "derived with the H200's figures in the roofline model of "
                          "tuning/derive_model.h, to check the model; not for shipping"
                        : "derived, not measured on a V100: the roofline model of tuning/derive_model.h (V100-SXM2: 80 "
                          "SMs, 830 GB/s streaming, 2.5 TB/s L2, 14 TFLOP/s FP32, 40 TFLOP/s m8n8k4; resident CTAs per "
                          "SM from each variant's sm_70 CUBIN, __metadata__.ctas_per_sm) ranks every variant at each M",
        .command = command, .nvrtc_version = occupancy.nvrtc_version,
        .progress = progress, .progress_tty = tty, .log = log, .label = options->labels[s]};
    tuner_summary summary;
    status = tuner_run(ctx, &settings, &backend, &summary);
    for (int op = 0; v100 && op < 2 && status == VOLT8_OK; op++)
      status = derive_occupancy_record(ctx, &occupancy, summary.tables[op], op ? "down" : "gate_up");
    derive_occupancy_free(&occupancy);
    report_summary(progress, &summary);
    outcome->m_failed += summary.m_failed;
    if (status == VOLT8_OK) outcome->shapes_done++;
  }
  if (status != VOLT8_OK) snprintf(error, error_size, "%s", volt8_last_error(ctx));
  volt8_ctx_destroy(ctx);
  return status;
}

static void nvrtc_version(volt8_ctx *ctx, char *buf, size_t size) {
  const volt8_nvrtc_lib *lib = NULL;
  if (volt8_nvrtc_for_arch(ctx, volt8_tools_ctx(ctx).target_arch, &lib) == VOLT8_OK) snprintf(buf, size, "%s", lib->version);
  else snprintf(buf, size, "unknown (kernels from the disk cache)");
}

static volt8_status measure_shape(volt8_ctx *ctx, const tune_options *options, int32_t index, const char *command,
                                  FILE *progress, int tty, FILE *log, tune_outcome *outcome) {
  const volt8_moe_shape *shape = &options->shapes[index];
  char **names = NULL;
  int32_t count = 0;
  volt8_status status = volt8_codegen_list(ctx, shape, &names, &count);
  if (status != VOLT8_OK) return status;
  int32_t jobs = options->jobs ? options->jobs : bench_host_threads(16);
  if (progress) fprintf(progress, "tune: compiling %d variants with %d threads\n", count, jobs);
  double prepare_start = bench_wall_seconds();
  tuner_precompile(ctx, shape, names, count, jobs);
  volt8_codegen_names_free(names, count);

  tuner_gpu_settings gpu_settings = {*shape, options->top_k, options->m_values[options->m_count - 1], options->seed,
                                     options->input_sets, options->warmup_batches, 5.0, 0};
  tuner_gpu *gpu = NULL;
  status = tuner_gpu_open(ctx, &gpu_settings, &gpu);
  if (status != VOLT8_OK) return status;
  double prepare_seconds = bench_wall_seconds() - prepare_start;
  char device_token[128], nvrtc[64], method[512];
  volt8_tuning_device_token(volt8_tools_ctx(ctx).device_name, device_token, sizeof device_token);
  nvrtc_version(ctx, nvrtc, sizeof nvrtc);
  char keep[96] = "";
  if (options->keep_within > 0)
    snprintf(keep, sizeof keep, "; the served variant and pair kept unless beaten by more than %d%%", options->keep_within);
  snprintf(method, sizeof method,
           "measured: each candidate checked against the reference (relative L2 <= 1e-3), then the median of "
           "%d (finalists: %d) graph-replayed passes over rotating input sets%s%s%s", options->screen_batches,
           options->final_batches, keep,
           options->prune_factor > 0 ? "; a candidate whose first timed forward was over the prune factor times the "
                                       "best so far timed no further nor checked" : "",
           options->prune_factor > 0 && options->skip_pruned
               ? ", and not measured at later M where its items were no larger than that M's pick's"
               : "");
  tuner_backend backend = tuner_gpu_backend(gpu);
  tuner_settings settings = {
      .shape = *shape, .top_k = options->top_k, .m_values = options->m_values, .m_count = options->m_count,
      .screen_batches = options->screen_batches, .final_batches = options->final_batches,
      .finalists = options->finalists, .prune_factor = options->prune_factor,
      .skip_pruned = options->skip_pruned, .keep_within = options->keep_within / 100.0, .resume = options->resume,
      .out_dir = options->out_dir,
      .arch = volt8_tools_ctx(ctx).target_arch, .device = volt8_tools_ctx(ctx).device_name, .device_token = device_token, .method = method, .command = command,
      .nvrtc_version = nvrtc, .progress = progress, .progress_tty = tty, .log = log,
      .label = options->labels[index], .prepare_seconds = prepare_seconds};
  tuner_summary summary;
  status = tuner_run(ctx, &settings, &backend, &summary);
  report_summary(progress, &summary);
  outcome->m_failed += summary.m_failed;
  tuner_gpu_close(gpu);
  return status;
}

static volt8_status measure_all(const tune_options *options, const char *command, FILE *progress, int tty, FILE *log,
                                tune_outcome *out_outcome, char *error, size_t error_size) {
  volt8_ctx_options context_options = VOLT8_CTX_OPTIONS_INIT;
  context_options.device = options->device;
  context_options.target_arch = options->target_arch;
  volt8_ctx *ctx = NULL;
  volt8_status status = volt8_ctx_create(&context_options, &ctx);
  if (status == VOLT8_OK) status = volt8_ctx_require_device(ctx);
  /* Kernels for the device's own arch load as CUBINs, which tuner_precompile's threads make: as PTX the
   * driver compiled each at its first load, on this one thread (20-28 s of a rank's first token count
   * in the H100 tunes of 2026-12-06). */
  if (status == VOLT8_OK && volt8_tools_ctx(ctx).target_arch == volt8_tools_ctx(ctx).device_arch)
    status = volt8_tools_ctx_variant_cubin(ctx);
  for (int32_t s = 0; s < options->shape_count && status == VOLT8_OK; s++) {
    char label[160];
    shape_label(&options->shapes[s], label, sizeof label);
    if (progress) fprintf(progress, "tune: %s on %s (kernels for sm_%d)\n", label, volt8_tools_ctx(ctx).device_name, volt8_tools_ctx(ctx).target_arch);
    status = measure_shape(ctx, options, s, command, progress, tty, log, out_outcome);
    if (status == VOLT8_OK) out_outcome->shapes_done++;
  }
  if (status != VOLT8_OK) snprintf(error, error_size, "%s", volt8_last_error(ctx));
  volt8_ctx_destroy(ctx);
  return status;
}

/* The log is written as the tune goes, so that a run cut short keeps what it measured; it is created
 * new (O_EXCL after removing a regular file of that name), so never a FIFO or a device. 0, or -2 for a
 * path that is not a regular file, -1 when it cannot be created. */
static int open_log(const char *path, FILE **out, char *error, size_t error_size) {
  struct stat info;
  if (lstat(path, &info) == 0 && !S_ISREG(info.st_mode)) {
    snprintf(error, error_size, "--log %s: not a regular file", path);
    return -2;
  }
  int fd = -1;
  if (unlink(path) == 0 || errno == ENOENT) fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  *out = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!*out) {
    snprintf(error, error_size, "cannot create --log %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  return 0;
}

volt8_status tune_run(const tune_options *options, const char *command, FILE *progress, int tty,
                      tune_outcome *out_outcome, char *error, size_t error_size) {
  memset(out_outcome, 0, sizeof *out_outcome);
  error[0] = '\0';
  if (options->derive_arch && derive_domain(options, error, error_size) != VOLT8_OK) return VOLT8_ERR_INVALID_ARGUMENT;
  if (make_directories(options->out_dir) != 0 || access(options->out_dir, W_OK) != 0) {
    if (errno == ENOTDIR) {
      snprintf(error, error_size, "--out %s is not a directory (or a folder on its way is not)", options->out_dir);
      return VOLT8_ERR_INVALID_ARGUMENT;
    }
    snprintf(error, error_size, "--out %s: cannot create or write it: %s", options->out_dir, strerror(errno));
    return VOLT8_ERR_IO;
  }
  FILE *log = NULL;
  int log_refused = options->log_path ? open_log(options->log_path, &log, error, error_size) : 0;
  if (log_refused) return log_refused == -2 ? VOLT8_ERR_INVALID_ARGUMENT : VOLT8_ERR_IO;
  volt8_status status = options->derive_arch
                            ? derive_all(options, command, progress, tty, log, out_outcome, error, error_size)
                            : measure_all(options, command, progress, tty, log, out_outcome, error, error_size);
  if (log && fclose(log) != 0 && status == VOLT8_OK) {
    snprintf(error, error_size, "cannot write %s: %s", options->log_path, strerror(errno));
    status = VOLT8_ERR_IO;
  }
  return status;
}
