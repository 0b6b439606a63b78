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

/* A whole number in [low, high], else -1. */
static long parse_number(const char *text, long low, long high) {
  char *end = NULL;
  long value = text ? strtol(text, &end, 10) : -1;
  return text && end != text && *end == '\0' && value >= low && value <= high ? value : -1;
}

int cli_model_shape(const char *command, const char *name, const char *tp_text, const char *rank_text,
                    volt8_moe_shape *out) {
  const volt8_model *model = cli_find_model(command, name);
  if (!model) return 2;
  long tp = tp_text ? parse_number(tp_text, 1, 64) : CLI_DEFAULT_TP;
  long rank = rank_text ? parse_number(rank_text, 0, 63) : (tp > 1 ? 1 : 0);
  if (tp < 0 || rank < 0) {
    fprintf(stderr, "volt8 %s: bad value \"%s\" for %s\n", command, tp < 0 ? tp_text : rank_text,
            tp < 0 ? "--tp" : "--rank");
    return 2;
  }
  if (volt8_model_rank_shape(NULL, model, (int32_t)tp, (int32_t)rank, 0, out) != VOLT8_OK) {
    fprintf(stderr, "volt8 %s: %s at --tp %ld --rank %ld: %s\n", command, model->name, tp, rank, volt8_last_error(NULL));
    return 2;
  }
  return 0;
}

/* One line per model, then (with --tp) one shape per rank in the --shape syntax. */
int cli_models(int argc, char **argv) {
  const char *tp_text = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--tp") == 0 && i + 1 < argc) {
      tp_text = argv[++i];
    } else {
      fprintf(stderr, "volt8 models: unexpected argument \"%s\" (usage: volt8 models [--tp N])\n", argv[i]);
      return 2;
    }
  }
  long tp = tp_text ? parse_number(tp_text, 1, 64) : 0;
  if (tp < 0) {
    fprintf(stderr, "volt8 models: bad value \"%s\" for --tp\n", tp_text);
    return 2;
  }
  for (int32_t m = 0; m < volt8_model_count(); m++) {
    const volt8_model *model = volt8_model_at(m);
    if (!tp) {
      printf("%-12s hidden %5d  moe intermediate %5d  experts %4d  top-%-2d  %s\n", model->name, model->hidden,
             model->intermediate, model->num_experts, model->top_k, model->description);
      continue;
    }
    for (int32_t rank = 0; rank < tp; rank++) {
      volt8_moe_shape shape;
      char text[256];
      if (volt8_model_rank_shape(NULL, model, (int32_t)tp, rank, 0, &shape) != VOLT8_OK) {
        fprintf(stderr, "volt8 models: %s at TP%ld: %s\n", model->name, tp, volt8_last_error(NULL));
        return 2;
      }
      cli_format_shape(&shape, text, sizeof text);
      printf("%s tp=%ld rank=%d %s\n", model->name, tp, rank, text);
    }
  }
  return 0;
}
