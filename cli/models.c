/* volt8 models: the model registry (runtime/checkpoint/models.h) and each model's rank shapes; and the
 * --model NAME [--tp N] [--rank R] arguments of the other subcommands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tools/tools.h"

const volt8_model *cli_find_model(const char *command, const char *name) {
  char error[512];
  const volt8_model *model = volt8_tools_find_model(name, error, sizeof error);
  if (!model) fprintf(stderr, "volt8 %s: %s\n", command, error);
  return model;
}

int cli_model_shape(const char *command, const char *name, const char *tp_text, const char *rank_text,
                    volt8_moe_shape *out) {
  char error[1024];
  if (volt8_tools_model_rank(name, tp_text, rank_text, out, NULL, error, sizeof error) == 0) return 0;
  fprintf(stderr, "volt8 %s: %s\n", command, error);
  return 2;
}

/* With --tp: each model's ranks, one shape a line in the --shape syntax, for every model the TP size
 * splits; a model it does not split gets one line on stderr saying why, and the list goes on. */
static int print_rank_shapes(int32_t tp) {
  int shown = 0;
  for (int32_t m = 0; m < volt8_model_count(); m++) {
    const volt8_model *model = volt8_model_at(m);
    volt8_moe_shape shapes[VOLT8_TOOLS_MAX_TP];
    int32_t rank = 0;
    while (rank < tp && volt8_model_rank_shape(NULL, model, tp, rank, 0, &shapes[rank]) == VOLT8_OK) rank++;
    if (rank < tp) {
      fflush(stdout);
      fprintf(stderr, "volt8 models: %s does not split at TP%d: %s\n", model->name, tp, volt8_last_error(NULL));
      continue;
    }
    for (rank = 0; rank < tp; rank++) {
      char text[256];
      volt8_tools_format_shape(&shapes[rank], text, sizeof text);
      printf("%s tp=%d rank=%d %s\n", model->name, tp, rank, text);
    }
    shown++;
  }
  if (shown) return 0;
  fprintf(stderr, "volt8 models: --tp %d splits none of the models (each rank needs a multiple of 16 of the "
          "intermediate size)\n", tp);
  return 2;
}

/* One line per model, then (with --tp) one shape per rank in the --shape syntax. */
int cli_models(int argc, char **argv) {
  int32_t tp = 0;
  volt8_tools_flags_seen seen = {{0}, 0};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--tp") != 0) return cli_unknown_argument("models", argv[i]);
    if (cli_flag_once("models", &seen, argv[i]) != 0) return 2;
    const char *value = cli_flag_value("models", argc, argv, &i);
    if (!value || cli_parse_number("models", "--tp", value, "TP size", 1, VOLT8_TOOLS_MAX_TP, &tp) != 0) return 2;
  }
  if (tp) return print_rank_shapes(tp);
  for (int32_t m = 0; m < volt8_model_count(); m++) {
    const volt8_model *model = volt8_model_at(m);
    printf("%-12s hidden %5d  moe intermediate %5d  experts %4d  top-%-2d  %s\n", model->name, model->hidden,
           model->intermediate, model->num_experts, model->top_k, model->description);
  }
  return 0;
}
