/* GPU suite: each kernel family's accuracy held to its recorded figure. Every family the target arch
 * lists (accuracy_families.h) runs its pinned pair on the same problem (ACCURACY_SHAPE, M = 64,
 * top-10, uniform routing, fresh random data with outputs and workspace poisoned), and its relative L2
 * against the double-precision reference may be at most 10% above the family's figure for that arch
 * in tests/gpu/accuracy_figures.json (accuracy_figures.h); a family without a figure fails.
 * VOLT8_ACCURACY_RECORD=FILE measures instead and writes the figures into FILE (the arch's families
 * replaced, the other archs kept): run once a mode on a GPU (scripts/gpu_check.sh run accuracy_record),
 * then copy FILE over tests/gpu/accuracy_figures.json; VOLT8_ACCURACY_FIGURES=FILE checks against FILE
 * instead of the committed one (gpu_check's suites phase after an accuracy_record of the same call).
 * The compute_70 kernels of the shape are in the
 * cache scripts/gpu_check.sh prepare carries (gpu_test_shapes). */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy_families.h"
#include "accuracy_figures.h"
#include "gpu_fixture.h"
#include "moe/kernels/catalogue.h"
#include "tools/tools.h"

TestSuite(gpu_accuracy, .timeout = 900);

static int listed(char **names, int32_t count, const char *name) {
  for (int32_t i = 0; i < count; i++)
    if (strcmp(names[i], name) == 0) return 1;
  return 0;
}

Test(gpu_accuracy, every_family_within_its_recorded_figure) {
  volt8_ctx *ctx = gpu_open();
  gpu_seed(0x62ac0ull);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  char error[512] = "";
  cr_assert_eq(volt8_tools_parse_shape(ACCURACY_SHAPE, &shape, error, sizeof error), 0, "%s", error);
  char arch[16];
  snprintf(arch, sizeof arch, "sm_%d", ctx->target_arch);
  const char *record = getenv("VOLT8_ACCURACY_RECORD");
  accuracy_figures *figures = NULL;
  char path[1024];
  const char *given = getenv("VOLT8_ACCURACY_FIGURES"); /* another figures file (a call's own record) */
  if (given && *given) snprintf(path, sizeof path, "%s", given);
  else snprintf(path, sizeof path, "%s/%s", gpu_source_root(), ACCURACY_FIGURES_FILE);
  if (!record || !*record) {
    figures = accuracy_figures_read(path, error, sizeof error);
    cr_assert_not_null(figures, "%s", error);
  }
  host_problem problem;
  gpu_make_problem(ctx, &shape, &problem);
  volt8_experts *experts = gpu_upload(ctx, &problem, ACCURACY_TOKENS, ACCURACY_TOP_K);
  device_batch batch;
  gpu_make_batch(ctx, &problem, ACCURACY_TOKENS, ACCURACY_TOP_K, ROUTING_UNIFORM, &batch);
  char **names = NULL;
  int32_t count = 0;
  cr_assert_eq(volt8_codegen_list(ctx, &shape, &names, &count), VOLT8_OK, "%s", volt8_last_error(ctx));
  const char *measured_names[ACCURACY_FAMILY_COUNT];
  double measured[ACCURACY_FAMILY_COUNT];
  int measured_count = 0, failures = 0;
  for (int f = 0; f < ACCURACY_FAMILY_COUNT; f++) {
    const accuracy_family *family = &ACCURACY_FAMILIES[f];
    if (ctx->target_arch < family->min_arch) continue;
    cr_assert(listed(names, count, family->gate_up) && listed(names, count, family->down),
              "%s: %s / %s is not listed for %s at %s", family->name, family->gate_up, family->down, arch, ACCURACY_SHAPE);
    char label[256];
    snprintf(label, sizeof label, "%s on %s (%s, M=%d, top-%d)", family->name, arch, ACCURACY_SHAPE, ACCURACY_TOKENS,
             ACCURACY_TOP_K);
    double error_l2 = gpu_check_forward(ctx, experts, shape.hidden, &batch, family->gate_up, family->down, label);
    measured_names[measured_count] = family->name;
    measured[measured_count++] = error_l2;
    if (figures) {
      char message[512];
      accuracy_verdict verdict = accuracy_figures_check(figures, arch, family->name, error_l2, message, sizeof message);
      if (verdict != ACCURACY_WITHIN) failures++, cr_log_error("%s", message);
      else cr_log_info("%s", message);
    } else {
      cr_log_info("%s: relative L2 %.3e (recorded into %s)", label, error_l2, record);
    }
  }
  volt8_codegen_names_free(names, count);
  if (!figures)
    cr_assert_eq(accuracy_figures_record(record, arch, measured_names, measured, measured_count, error, sizeof error), 0,
                 "%s", error);
  cr_expect_eq(failures, 0, "%d of %d families off their figures in %s (above)", failures, measured_count, path);
  accuracy_figures_free(figures);
  gpu_free_batch(ctx, &batch);
  volt8_experts_destroy(experts);
  gpu_free_problem(&problem);
  volt8_ctx_destroy(ctx);
}
