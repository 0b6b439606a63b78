/* The subcommands' model, TP and rank values (rank_args.h). */
#include "tools/tools.h"

#include <stdio.h>

int32_t volt8_tools_default_rank(int32_t tp_size) { return tp_size > 1 ? 1 : 0; }

int volt8_tools_parse_rank(const char *text, int32_t tp_size, int32_t *out, char *error, size_t error_size) {
  long value = 0;
  volt8_tools_number verdict = volt8_tools_parse_number(text, 0, tp_size - 1, &value);
  if (verdict == VOLT8_TOOLS_NUMBER_OK) {
    *out = (int32_t)value;
    return 0;
  }
  if (verdict == VOLT8_TOOLS_OUT_OF_RANGE)
    snprintf(error, error_size, "--rank %s is outside 0..%d (the ranks of --tp %d are 0..%d)", text, tp_size - 1,
             tp_size, tp_size - 1);
  else
    snprintf(error, error_size, "--rank \"%s\" is not a whole number (the ranks of --tp %d are 0..%d)", text, tp_size,
             tp_size - 1);
  return -1;
}

const volt8_model *volt8_tools_find_model(const char *name, char *error, size_t error_size) {
  const volt8_model *model = volt8_model_find(name ? name : VOLT8_MODEL_REFERENCE);
  if (!model) {
    char known[256];
    volt8_model_names(known, sizeof known);
    snprintf(error, error_size, "unknown model \"%s\" (known: %s)", name, known);
  }
  return model;
}

int volt8_tools_rank_shape(const volt8_model *model, int32_t tp, int32_t rank, volt8_moe_shape *out, char *error,
                           size_t error_size) {
  if (volt8_model_rank_shape(NULL, model, tp, rank, 0, out) == VOLT8_OK) return 0;
  if (error) snprintf(error, error_size, "%s at --tp %d --rank %d: %s", model->name, tp, rank, volt8_last_error(NULL));
  return -1;
}

int volt8_tools_model_rank(const char *model_name, const char *tp_text, const char *rank_text, volt8_moe_shape *out,
                           int32_t *out_top_k, char *error, size_t error_size) {
  const volt8_model *model = volt8_tools_find_model(model_name, error, error_size);
  if (!model) return -1;
  int32_t tp = VOLT8_TOOLS_DEFAULT_TP, rank = 0;
  if (tp_text && volt8_tools_flag_number("--tp", tp_text, "TP size", 1, VOLT8_TOOLS_MAX_TP, &tp, error, error_size) != 0)
    return -1;
  if (!rank_text) rank = volt8_tools_default_rank(tp);
  else if (volt8_tools_parse_rank(rank_text, tp, &rank, error, error_size) != 0) return -1;
  if (volt8_tools_rank_shape(model, tp, rank, out, error, error_size) != 0) return -1;
  if (out_top_k) *out_top_k = model->top_k;
  return 0;
}
