/* volt8 list / compile / demo: the code generation and JIT pipeline, end to end. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tools/tools.h"
#ifdef VOLT8_HAVE_BENCH
#include "derive_explain.h"
#include "derive_occupancy.h"
#endif

volt8_status cli_compile_all(volt8_ctx *ctx, const volt8_moe_shape *shape, compile_totals *totals, int one_line) {
  int32_t count = 0;
  volt8_status status = volt8_variant_count(ctx, shape, &count);
  if (status != VOLT8_OK) return status;
  for (int32_t i = 0; i < count; i++) {
    char name[128];
    status = volt8_variant_name(ctx, shape, i, name, sizeof name);
    if (status != VOLT8_OK) return status;
    double start = cli_now_seconds();
    int32_t from_cache = 0;
    status = volt8_variant_compile(ctx, shape, name, &from_cache);
    double seconds = cli_now_seconds() - start;
    if (status != VOLT8_OK) return status;
    totals->seconds += seconds;
    if (from_cache) totals->from_cache++; else totals->compiled++;
    if (one_line) {
      if (isatty(STDOUT_FILENO) || i + 1 == count)
        printf("%s  kernels: %d/%d (%d compiled, %d from the cache)%s", isatty(STDOUT_FILENO) ? "\r" : "", i + 1, count,
               totals->compiled, totals->from_cache, i + 1 == count ? "\n" : "");
    } else {
      printf("  [%3d/%d] %-44s %s %6.2f s\n", i + 1, count, name, from_cache ? "cached  " : "compiled", seconds);
    }
    fflush(stdout);
  }
  return VOLT8_OK;
}

int cli_cache_store_failures(volt8_ctx *ctx, const char *command, int is_error) {
  int32_t count = 0;
  char why[1024] = "";
  if (volt8_cache_store_failures(ctx, &count, why, sizeof why) != VOLT8_OK || count == 0) return 0;
  fflush(stdout);
  fprintf(stderr, "volt8 %s: %s%d compiled kernel%s not stored in the disk cache (%s); %s\n", command,
          is_error ? "" : "warning: ", count, count == 1 ? " was" : "s were", why,
          is_error ? "the cache is incomplete" : "later runs compile them again");
  return count;
}

/* --choice's token counts, as many as the text lists, each in 1..the tokens a forward takes at top_k
 * (malloc'ed into *out_values); the count, or -1 after an error on stderr naming the item. */
static int parse_choice(const char *text, int32_t top_k, int32_t **out_values) {
  size_t items = volt8_tools_list_length(text);
  int32_t capacity = items > INT32_MAX ? INT32_MAX : (int32_t)items;
  int32_t *values = malloc((size_t)capacity * sizeof *values);
  char error[512];
  int count = -1;
  if (values) count = volt8_tools_flag_token_counts("--choice", text, top_k, values, capacity, error, sizeof error);
  else snprintf(error, sizeof error, "--choice: out of memory for %zu token counts", items);
  if (count < 0) {
    fprintf(stderr, "volt8 list: %s\n", error);
    free(values);
    return -1;
  }
  *out_values = values;
  return count;
}

/* The dispatch's pair at each token count, as the library would serve it: "M GATE_UP DOWN". */
static volt8_status print_choices(volt8_ctx *ctx, const volt8_moe_shape *shape, const int32_t *m_values, int count,
                                  int32_t top_k) {
  for (int i = 0; i < count; i++) {
    volt8_forward_info info = VOLT8_FORWARD_INFO_INIT;
    volt8_status status = volt8_forward_describe(ctx, shape, NULL, m_values[i], top_k, &info);
    if (status != VOLT8_OK) return status;
    printf("%d %s %s\n", m_values[i], info.gate_up, info.down);
  }
  return VOLT8_OK;
}

#ifdef VOLT8_HAVE_BENCH
/* The model's V100 account of the dispatch's pairs (derive_explain.h), with the occupancy the
 * derivation takes: each variant's sm_70 CUBIN. */
static volt8_status print_explained(volt8_ctx *ctx, const volt8_moe_shape *shape, const int32_t *m_values, int count,
                                    int32_t top_k, int32_t jobs, int json) {
  derive_occupancy_set occupancy;
  volt8_status status = derive_occupancy_compile(ctx, shape, jobs, NULL, &occupancy);
  if (status != VOLT8_OK) return status;
  if (json) {
    status = derive_explain_json(ctx, &DERIVE_V100, shape, top_k, m_values, count, &occupancy.view, stdout);
    derive_occupancy_free(&occupancy);
    return status;
  }
  printf("%s, modelled (tuning/derive_model.h); byte floor: the bytes a forward must move over %.0f GB/s; "
         "resident CTAs per SM from %s\n\n",
         DERIVE_V100.name, DERIVE_V100.dram_gbps, occupancy.from);
  status = derive_explain_markdown(ctx, &DERIVE_V100, shape, top_k, m_values, count, &occupancy.view, stdout);
  derive_occupancy_free(&occupancy);
  return status;
}

/* 2 after the model's refusal on stderr when an M, the top-k or the shape lies outside its domain,
 * before any CUBIN is compiled; else 0. */
static int explain_refused(volt8_ctx *ctx, const volt8_moe_shape *shape, const int32_t *m_values, int count,
                           int32_t top_k) {
  for (int i = 0; i < count; i++)
    if (derive_check_domain(ctx, shape, top_k, m_values[i]) != VOLT8_OK) {
      fprintf(stderr, "volt8 list: --explain: %s\n", volt8_last_error(ctx));
      return 2;
    }
  return 0;
}
#else
static int explain_refused(volt8_ctx *ctx, const volt8_moe_shape *shape, const int32_t *m_values, int count,
                           int32_t top_k) {
  return 0;
}

static volt8_status print_explained(volt8_ctx *ctx, const volt8_moe_shape *shape, const int32_t *m_values, int count,
                                    int32_t top_k, int32_t jobs, int json) {
  return volt8_fail(ctx, VOLT8_ERR_UNSUPPORTED, "--explain: this build has no derivation model (bench/ was not configured)");
}
#endif

/* Each of the shape's variants' generated source into DIR/ENTRY.cu, its name on a line. */
static volt8_status write_sources(volt8_ctx *ctx, const volt8_moe_shape *shape, const char *dir) {
  char **names = NULL;
  int32_t count = 0;
  volt8_status status = volt8_codegen_list(ctx, shape, &names, &count);
  for (int32_t i = 0; status == VOLT8_OK && i < count; i++) {
    volt8_kernel_source source = {0};
    status = volt8_codegen_emit(ctx, shape, names[i], &source);
    char path[4096];
    FILE *file = NULL;
    if (status == VOLT8_OK && (snprintf(path, sizeof path, "%s/%s.cu", dir, source.entry) >= (int)sizeof path ||
                               !(file = fopen(path, "wb"))))
      status = volt8_fail(ctx, VOLT8_ERR_IO, "--sources %s: cannot write %s.cu there", dir, source.entry);
    if (file && (fputs(source.source, file) < 0) + (fclose(file) != 0))
      status = volt8_fail(ctx, VOLT8_ERR_IO, "--sources %s: writing %s failed", dir, path);
    if (status == VOLT8_OK) printf("%s\n", names[i]);
    volt8_kernel_source_free(&source);
  }
  volt8_codegen_names_free(names, count);
  return status;
}

/* The shape's variant names, one a line. */
static volt8_status print_variants(volt8_ctx *ctx, const volt8_moe_shape *shape) {
  int32_t count = 0;
  volt8_status status = volt8_variant_count(ctx, shape, &count);
  for (int32_t i = 0; status == VOLT8_OK && i < count; i++) {
    char name[128];
    status = volt8_variant_name(ctx, shape, i, name, sizeof name);
    if (status == VOLT8_OK) printf("%s\n", name);
  }
  return status;
}

int cli_list(int argc, char **argv) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  const char *arch = NULL, *model = NULL, *tp = NULL, *rank = NULL, *tables = NULL, *jobs_text = NULL;
  const char *choice = NULL, *sources = NULL;
  int shape_given = 0, resources = 0, json = 0, explain = 0;
  int32_t top_k = 0;
  volt8_tools_flags_seen seen = {{0}, 0};
  for (int i = 1; i < argc; i++) {
    const char *flag = argv[i];
    if (cli_is_one_of(flag, "--resources --json --explain --shape --arch --model --tp --rank --choice --top-k --tables "
                            "--jobs --sources") &&
        cli_flag_once("list", &seen, flag) != 0)
      return 2;
    if (strcmp(flag, "--resources") == 0 || strcmp(flag, "--json") == 0 || strcmp(flag, "--explain") == 0) {
      *(flag[2] == 'r' ? &resources : flag[2] == 'j' ? &json : &explain) = 1;
      continue;
    }
    if (!cli_is_one_of(flag, "--shape --arch --model --tp --rank --choice --top-k --tables --jobs --sources"))
      return cli_unknown_argument("list", flag);
    const char *value = cli_flag_value("list", argc, argv, &i);
    if (!value) return 2;
    if (strcmp(flag, "--choice") == 0) {
      choice = value;
    } else if (strcmp(flag, "--top-k") == 0) {
      if (cli_parse_number("list", flag, value, "top-k", 1, VOLT8_TOOLS_MAX_TOP_K, &top_k) != 0) return 2;
    } else if (strcmp(flag, "--tables") == 0) {
      if (cli_parse_path("list", flag, value, "folder") != 0) return 2;
      tables = value;
    } else if (strcmp(flag, "--shape") == 0) {
      if (shape_given) {
        fprintf(stderr, "volt8 list: --shape is given twice (list takes one shape)\n");
        return 2;
      }
      if (cli_parse_shape("list", value, &shape) != 0) return 2;
      shape_given = 1;
    } else if (strcmp(flag, "--arch") == 0) {
      if (cli_parse_arch("list", flag, value) != 0) return 2;
      arch = value;
    } else if (strcmp(flag, "--model") == 0) {
      model = value;
    } else if (strcmp(flag, "--tp") == 0) {
      tp = value;
    } else if (strcmp(flag, "--jobs") == 0) {
      jobs_text = value;
    } else if (strcmp(flag, "--sources") == 0) {
      if (cli_parse_path("list", flag, value, "folder") != 0 ||
          cli_check_path("list", flag, value, CLI_FOLDER_TO_READ) != 0)
        return 2;
      sources = value;
    } else {
      rank = value;
    }
  }
  if ((tp || rank) && !model) {
    fprintf(stderr, "volt8 list: --tp and --rank need --model\n");
    return 2;
  }
  if (model && shape_given) {
    fprintf(stderr, "volt8 list: --model and --shape exclude each other\n");
    return 2;
  }
  if ((top_k || tables) && !choice) {
    fprintf(stderr, "volt8 list: --top-k and --tables need --choice\n");
    return 2;
  }
  if (json && !resources && !explain) {
    fprintf(stderr, "volt8 list: --json needs --resources or --explain\n");
    return 2;
  }
  if (jobs_text && !resources && !explain) {
    fprintf(stderr, "volt8 list: --jobs needs --resources or --explain\n");
    return 2;
  }
  if (explain && (!choice || (arch && strcmp(arch, "sm_70") != 0))) {
    fprintf(stderr, "volt8 list: --explain needs --choice and sm_70 (the model is of a V100)\n");
    return 2;
  }
  if (sources && (resources || choice)) {
    fprintf(stderr, "volt8 list: --sources excludes --resources and --choice\n");
    return 2;
  }
  if (resources && choice) {
    fprintf(stderr, "volt8 list: --resources and --choice exclude each other\n");
    return 2;
  }
  int32_t jobs = cli_default_jobs();
  if (jobs_text &&
      cli_parse_number("list", "--jobs", jobs_text, "compile thread count", 1, VOLT8_TOOLS_MAX_JOBS, &jobs) != 0)
    return 2;
  if (model && cli_model_shape("list", model, tp, rank, &shape) != 0) return 2;
  int top_k_given = top_k != 0;
  if (!top_k) top_k = volt8_model_find(model ? model : VOLT8_MODEL_REFERENCE)->top_k;
  /* a token routes to top_k distinct experts of the model */
  int32_t experts = shape.global_experts > 0 ? shape.global_experts : shape.num_experts;
  if (choice && experts > 0 && top_k > experts) {
    fprintf(stderr, "volt8 list: --top-k %d%s is more than the shape's %d experts (a token's experts are distinct)\n",
            top_k, top_k_given ? "" : " (the default)", experts);
    return 2;
  }
  if (tables) {
    DIR *folder = opendir(tables); /* never blocks: a FIFO or device is not a directory */
    if (!folder) {
      fprintf(stderr, "volt8 list: --tables %s: %s (it names the folder of tuning tables to read)\n", tables,
              strerror(errno));
      return 2;
    }
    closedir(folder);
  }
  int32_t *choice_m = NULL;
  int choice_count = choice ? parse_choice(choice, top_k, &choice_m) : 0;
  if (choice_count < 0) return 2;
  if (tables) {
    /* the folder's tables alone, as the dispatch reads $VOLT8_TUNING_DIR, none built in */
    setenv(VOLT8_TUNING_DIR_ENV, tables, 1);
    volt8_tuning_set_built_in(0);
  }
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.target_arch = arch;  /* NULL: sm_70 (no device is opened) */
  volt8_ctx *ctx = NULL;
  volt8_status status = volt8_ctx_create(&options, &ctx);
  if (status != VOLT8_OK) {
    free(choice_m);
    return cli_report(NULL, "list", status);
  }
  int rc = explain ? explain_refused(ctx, &shape, choice_m, choice_count, top_k) : 0;
  if (rc == 0 && resources) {
    rc = cli_print_resources(ctx, &shape, jobs, json);
  } else if (rc == 0) {
    status = explain        ? print_explained(ctx, &shape, choice_m, choice_count, top_k, jobs, json)
             : choice_count ? print_choices(ctx, &shape, choice_m, choice_count, top_k)
             : sources      ? write_sources(ctx, &shape, sources)
                            : print_variants(ctx, &shape);
    rc = status == VOLT8_OK ? 0 : cli_report(ctx, "list", status);
  }
  cli_print_tuning_warnings("list");
  free(choice_m);
  volt8_ctx_destroy(ctx);
  return rc;
}

int cli_compile(int argc, char **argv) {
  const char *arch = NULL, *cache = NULL;
  volt8_moe_shape shapes[CLI_MAX_SHAPES];
  int shape_count = 0;
  volt8_tools_flags_seen seen = {{0}, 0};
  for (int i = 1; i < argc; i++) {
    const char *flag = argv[i];
    if (!cli_is_one_of(flag, "--arch --cache --shape")) return cli_unknown_argument("compile", flag);
    if (strcmp(flag, "--shape") != 0 && cli_flag_once("compile", &seen, flag) != 0) return 2; /* --shape repeats */
    const char *value = cli_flag_value("compile", argc, argv, &i);
    if (!value) return 2;
    if (strcmp(flag, "--arch") == 0) {
      if (cli_parse_arch("compile", flag, value) != 0) return 2;
      arch = value;
    } else if (strcmp(flag, "--cache") == 0) {
      if (cli_parse_path("compile", flag, value, "folder") != 0 ||
          cli_check_path("compile", flag, value, CLI_FOLDER_TO_FILL) != 0)
        return 2;
      cache = value;
    } else {
      if (shape_count == CLI_MAX_SHAPES) {
        fprintf(stderr, "volt8 compile: at most %d --shape options\n", CLI_MAX_SHAPES);
        return 2;
      }
      volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
      if (cli_parse_shape("compile", value, &shape) != 0) return 2;
      shapes[shape_count++] = shape;
    }
  }
  if (!arch || !cache) {
    fprintf(stderr, "volt8 compile: --arch sm_XX and --cache DIR are required\n");
    return 2;
  }
  if (shape_count == 0) shapes[shape_count++] = (volt8_moe_shape)VOLT8_MOE_SHAPE_INIT;
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.cache_dir = cache;
  options.target_arch = arch;
  volt8_ctx *ctx = NULL;
  volt8_status status = volt8_ctx_create(&options, &ctx);
  if (status != VOLT8_OK) return cli_report(NULL, "compile", status);
  if (!volt8_tools_ctx(ctx).cache_dir) {
    /* storing is the command's whole purpose: refused before compiling anything that would be lost */
    char why[512] = "";
    int32_t count = 0;
    volt8_cache_store_failures(ctx, &count, why, sizeof why);
    fprintf(stderr, "volt8 compile: --cache %s: nothing would be stored there: %s\n", cache, why);
    volt8_ctx_destroy(ctx);
    return 2;
  }
  compile_totals totals = {0, 0, 0.0};
  for (int s = 0; s < shape_count && status == VOLT8_OK; s++) {
    char text[256];
    volt8_tools_format_shape(&shapes[s], text, sizeof text);
    printf("volt8 compile: %s for %s into %s\n", text, arch, cache);
    status = cli_compile_all(ctx, &shapes[s], &totals, 0);
  }
  if (status == VOLT8_OK) {
    /* the sampler's module is one more kernel image: counted like a variant, as the cache's failures count it */
    double start = cli_now_seconds();
    int64_t compiles_before = volt8_tools_ctx(ctx).nvrtc_compiles;
    status = volt8_rejection_prepare(ctx);
    if (status == VOLT8_OK) {
      int compiled = volt8_tools_ctx(ctx).nvrtc_compiles > compiles_before;
      double seconds = cli_now_seconds() - start;
      totals.seconds += seconds;
      if (compiled) totals.compiled++; else totals.from_cache++;
      printf("volt8 compile: rejection sampler kernels %s %.2f s\n", compiled ? "compiled" : "cached  ", seconds);
    }
  }
  int rc = 0;
  if (status != VOLT8_OK) {
    rc = cli_report(ctx, "compile", status);
  } else {
    printf("volt8 compile: %d compiled, %d already cached, %.1f s\n", totals.compiled, totals.from_cache, totals.seconds);
  }
  /* filling the cache is this command's whole purpose: anything it did not keep is a failure */
  if (cli_cache_store_failures(ctx, "compile", 1) > 0) rc = 1;
  volt8_ctx_destroy(ctx);
  return rc;
}
