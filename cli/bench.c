/* volt8 bench: volt8 FP8 against FP16 cuBLAS baselines and the byte floor (bench/). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tools/tools.h"

#ifdef VOLT8_HAVE_BENCH
#include "bench_options.h"
#include "bench_run.h"
#include "write_file.h"

/* "volt8 bench --m 1,8 ..." for the report. */
static void join_command(int argc, char **argv, char *buf, size_t size) {
  size_t used = (size_t)snprintf(buf, size, "volt8");
  for (int i = 0; i < argc && used < size; i++) used += (size_t)snprintf(buf + used, size - used, " %s", argv[i]);
}

static int write_output(const char *path, char *text, const char *what) {
  if (!path) {
    free(text);
    return 0;
  }
  int error = text ? bench_write_file(path, text) : ENOMEM;
  free(text);
  if (error) {
    fprintf(stderr, "volt8 bench: writing the %s to %s failed: %s\n", what, path, strerror(error));
    return 1;
  }
  fprintf(stderr, "volt8 bench: %s written to %s\n", what, path);
  return 0;
}

/* --variants G,D: each a variant of the shape for the context's arch; else 2 after an error naming it
 * (1 when the variants cannot be listed). */
static int check_variants(volt8_ctx *ctx, const bench_options *options) {
  const char *wanted[2] = {options->gate_up, options->down};
  int found[2] = {0, 0};
  int32_t count = 0;
  volt8_status status = volt8_variant_count(ctx, &options->shape, &count);
  for (int32_t i = 0; status == VOLT8_OK && i < count; i++) {
    char name[VOLT8_VARIANT_NAME_BYTES];
    status = volt8_variant_name(ctx, &options->shape, i, name, sizeof name);
    for (int w = 0; status == VOLT8_OK && w < 2; w++) found[w] |= strcmp(name, wanted[w]) == 0;
  }
  if (status != VOLT8_OK) return cli_report(ctx, "bench", status);
  for (int w = 0; w < 2; w++) {
    if (found[w]) continue;
    char arch[16], shape[256];
    volt8_ctx_target_arch(ctx, arch, sizeof arch);
    volt8_tools_format_shape(&options->shape, shape, sizeof shape);
    fprintf(stderr, "volt8 bench: --variants: %s is not a variant of the shape for %s (volt8 list --arch %s --shape %s "
            "names them)\n", wanted[w], arch, arch, shape);
    return 2;
  }
  return 0;
}

int cli_bench(int argc, char **argv) {
  bench_options options;
  char error[512];
  int parsed = bench_options_parse(argc, argv, &options, error, sizeof error);
  if (parsed == 1) {
    fputs(bench_usage(), stdout);
    return 0;
  }
  if (parsed < 0) {
    fprintf(stderr, "volt8 bench: %s\n%s", error, bench_usage());
    return 2;
  }
  const char *outputs[3][2] = {{"--json", options.json_path}, {"--svg", options.svg_path},
                               {"--markdown", options.markdown_path}};
  for (int i = 0; i < 3; i++)
    if (outputs[i][1] && cli_check_path("bench", outputs[i][0], outputs[i][1], CLI_FILE_TO_WRITE) != 0) return 2;
  volt8_ctx_options context_options = VOLT8_CTX_OPTIONS_INIT;
  context_options.device = options.device;
  context_options.target_arch = options.target_arch;
  volt8_ctx *ctx = NULL;
  volt8_status status = volt8_ctx_create(&context_options, &ctx);
  if (status != VOLT8_OK) return cli_report(NULL, "bench", status);
  int refused = options.gate_up ? check_variants(ctx, &options) : 0;
  if (refused) {
    volt8_ctx_destroy(ctx);
    return refused;
  }
  bench_report *report = calloc(1, sizeof *report);
  char *command = malloc(4096);
  if (!report || !command) {
    fprintf(stderr, "volt8 bench: out of memory\n");
    free(report);
    free(command);
    volt8_ctx_destroy(ctx);
    return 1;
  }
  join_command(argc, argv, command, 4096);
  status = bench_run(ctx, &options, command, stderr, report);
  cli_print_tuning_warnings("bench");
  int rc = status == VOLT8_OK ? 0 : cli_report(ctx, "bench", status);
  if (report->count > 0) {
    bench_report_print(report, stdout);
    rc |= write_output(options.json_path, bench_report_json(report), "JSON report");
    rc |= write_output(options.svg_path, bench_report_svg(report), "plot");
    rc |= write_output(options.markdown_path, bench_report_markdown(report), "Markdown table");
    if (!bench_report_passed(report)) {
      fprintf(stderr, "volt8 bench: volt8 did not run at every M or disagreed with the reference (relative L2 > %.0e)\n",
              BENCH_TOLERANCE);
      rc = 1;
    }
  }
  free(report);
  free(command);
  cli_cache_store_failures(ctx, "bench", 0);
  volt8_ctx_destroy(ctx);
  return rc;
}

#else

int cli_bench(int argc, char **argv) {
  fprintf(stderr, "volt8 bench: this build has no benchmark harness (bench/ was not configured)\n");
  return 2;
}

#endif
