/* volt8 models: the model registry (runtime/checkpoint/models.h) and each model's rank shapes; and the
 * --model NAME [--tp N] [--rank R] arguments of the other subcommands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tools/tools.h"

const volt8_model *cli_find_model(const char *command, const char *name) {
  const volt8_model *model = volt8_model_find(name);
  if (!model) {
    char known[256];
    volt8_model_names(known, sizeof known);
    fprintf(stderr, "volt8 %s: unknown model \"%s\" (known: %s)\n", command, name, known);
  }
  return model;
}

#define MODELS_MAX_TP 64

int cli_model_shape(const char *command, const char *name, const char *tp_text, const char *rank_text,
                    volt8_moe_shape *out) {
  const volt8_model *model = cli_find_model(command, name);
  if (!model) return 2;
  int32_t tp = CLI_DEFAULT_TP, rank = 0;
  if (tp_text && cli_parse_number(command, "--tp", tp_text, "TP size", 1, MODELS_MAX_TP, &tp) != 0) return 2;
  if (!rank_text) rank = tp > 1 ? 1 : 0;
  else if (cli_parse_rank(command, rank_text, tp, &rank) != 0) return 2;
  if (volt8_model_rank_shape(NULL, model, tp, rank, 0, out) != VOLT8_OK) {
    fprintf(stderr, "volt8 %s: %s at --tp %d --rank %d: %s\n", command, model->name, tp, rank, volt8_last_error(NULL));
    return 2;
  }
  return 0;
}

/* With --tp: each model's ranks, one shape a line in the --shape syntax, for every model the TP size
 * splits; a model it does not split gets one line on stderr saying why, and the list goes on. */
static int print_rank_shapes(int32_t tp) {
  int shown = 0;
  for (int32_t m = 0; m < volt8_model_count(); m++) {
    const volt8_model *model = volt8_model_at(m);
    volt8_moe_shape shapes[MODELS_MAX_TP];
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
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--tp") != 0) return cli_unknown_argument("models", argv[i]);
    const char *value = cli_flag_value("models", argc, argv, &i);
    if (!value || cli_parse_number("models", "--tp", value, "TP size", 1, MODELS_MAX_TP, &tp) != 0) return 2;
  }
  if (tp) return print_rank_shapes(tp);
  for (int32_t m = 0; m < volt8_model_count(); m++) {
    const volt8_model *model = volt8_model_at(m);
    printf("%-12s hidden %5d  moe intermediate %5d  experts %4d  top-%-2d  %s\n", model->name, model->hidden,
           model->intermediate, model->num_experts, model->top_k, model->description);
  }
  return 0;
}
