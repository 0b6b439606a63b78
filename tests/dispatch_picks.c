/* The dispatch's pick for every registry rank at every token count, for one arch and device, as
 * lines a diff reads: "model tp rank M gate_up down" at each M where the pair changes (M = 1 first), then a count of the points. Run on two builds, the lines compare two
 * lookups (docs/design.md, "Tuning tables"). No GPU: the context is a CPU one told the device's name.
 *
 *   dispatch_picks sm_90 "NVIDIA H200" [max_m]      (device "any": a device with no table of its own) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/models.h"
#include "core/ctx_internal.h"
#include "dispatch/dispatch.h"
#include "dispatch/tuning.h"

/* "sm_90" -> 90; 0 when it is not of that form. */
static int32_t arch_of(const char *text) {
  char *end = NULL;
  long arch = strncmp(text, "sm_", 3) == 0 ? strtol(text + 3, &end, 10) : 0;
  return end && *end == '\0' && arch >= 70 && arch <= 200 ? (int32_t)arch : 0;
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4 || !arch_of(argv[1])) {
    fprintf(stderr, "usage: dispatch_picks sm_XX DEVICE_NAME [max_m]\n");
    return 2;
  }
  int32_t max_m = argc == 4 ? atoi(argv[3]) : 16384;
  if (max_m < 1 || max_m > VOLT8_TUNING_MAX_M) {
    fprintf(stderr, "dispatch_picks: max_m %s is not in 1..%d\n", argv[3], VOLT8_TUNING_MAX_M);
    return 2;
  }
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.cache_disable = 1;
  options.target_arch = argv[1];
  volt8_ctx *ctx = NULL;
  if (volt8_ctx_create(&options, &ctx) != VOLT8_OK) {
    fprintf(stderr, "dispatch_picks: %s\n", volt8_last_error(NULL));
    return 1;
  }
  snprintf(ctx->device_name, sizeof ctx->device_name, "%s", strcmp(argv[2], "any") == 0 ? "" : argv[2]);
  static const int32_t tps[] = {1, 2, 4, 8};
  long long points = 0;
  for (int32_t m = 0; m < volt8_model_count(); m++) {
    const volt8_model *model = volt8_model_at(m);
    for (size_t t = 0; t < sizeof tps / sizeof tps[0]; t++)
      for (int32_t rank = 0; rank < tps[t]; rank++) {
        volt8_moe_shape shape;
        volt8_dispatch_plan *plan = NULL;
        if (volt8_model_rank_shape(ctx, model, tps[t], rank, 0, &shape) != VOLT8_OK ||
            volt8_dispatch_plan_create(ctx, &shape, &plan) != VOLT8_OK) {
          fprintf(stderr, "dispatch_picks: %s TP%d rank %d: %s\n", model->name, tps[t], rank, volt8_last_error(ctx));
          volt8_ctx_destroy(ctx);
          return 1;
        }
        char last[2 * VOLT8_VARIANT_NAME_BYTES + 32] = "";
        for (int32_t tokens = 1; tokens <= max_m; tokens++, points++) {
          volt8_variant_choice choice;
          volt8_dispatch_plan_choose(plan, tokens, model->top_k, &choice, NULL);
          char gate_up[VOLT8_VARIANT_NAME_BYTES], down[VOLT8_VARIANT_NAME_BYTES], line[sizeof last];
          volt8_variant_format(&choice.gate_up, gate_up, sizeof gate_up);
          volt8_variant_format(&choice.down, down, sizeof down);
          snprintf(line, sizeof line, "%s %s", gate_up, down);
          if (strcmp(line, last) != 0) printf("%s %d %d %d %s\n", model->name, tps[t], rank, tokens, line);
          memcpy(last, line, sizeof last);
        }
        volt8_dispatch_plan_destroy(plan);
      }
  }
  printf("points %lld\n", points);
  volt8_ctx_destroy(ctx);
  return 0;
}
