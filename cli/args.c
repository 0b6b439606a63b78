/* Argument values, shapes, timing and error reporting shared by the subcommands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

const char *cli_flag_value(const char *command, int argc, char **argv, int *i) {
  if (*i + 1 >= argc) {
    fprintf(stderr, "volt8 %s: %s needs a value\n", command, argv[*i]);
    return NULL;
  }
  return argv[++*i];
}

/* 1 when all of `text` is one whole number; one past a long's range comes out as LONG_MIN or
 * LONG_MAX, outside every range asked for here. */
static int whole_number(const char *text, long *value) {
  char *end = NULL;
  *value = strtol(text, &end, 10);
  return end != text && *end == '\0';
}

int cli_parse_number(const char *command, const char *flag, const char *text, const char *what, long low, long high,
                     int32_t *out) {
  long value = 0;
  int is_number = whole_number(text, &value);
  if (is_number && value >= low && value <= high) {
    *out = (int32_t)value;
    return 0;
  }
  if (is_number) fprintf(stderr, "volt8 %s: %s %s is not a valid %s", command, flag, text, what);
  else fprintf(stderr, "volt8 %s: %s \"%s\" is not a whole number", command, flag, text);
  fprintf(stderr, " (a %s is a whole number in %ld..%ld)\n", what, low, high);
  return -1;
}

int cli_parse_rank(const char *command, const char *text, int32_t tp_size, int32_t *out) {
  long value = 0;
  int is_number = whole_number(text, &value);
  if (is_number && value >= 0 && value < tp_size) {
    *out = (int32_t)value;
    return 0;
  }
  if (is_number) fprintf(stderr, "volt8 %s: --rank %s is outside 0..%d", command, text, tp_size - 1);
  else fprintf(stderr, "volt8 %s: --rank \"%s\" is not a whole number", command, text);
  fprintf(stderr, " (the ranks of --tp %d are 0..%d)\n", tp_size, tp_size - 1);
  return -1;
}

int cli_is_one_of(const char *arg, const char *names) {
  size_t length = strlen(arg);
  if (length == 0) return 0;
  for (const char *at = strstr(names, arg); at; at = strstr(at + 1, arg))
    if ((at == names || at[-1] == ' ') && (at[length] == ' ' || at[length] == '\0')) return 1;
  return 0;
}

int cli_unknown_argument(const char *command, const char *arg) {
  fprintf(stderr, "volt8 %s: unknown argument \"%s\"\nusage: volt8 %s\n", command, arg, cli_usage(command));
  return 2;
}

int cli_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
  return 0;
}

int cli_parse_shape(const char *text, volt8_moe_shape *shape) {
  struct { const char *key; int32_t *field; } keys[] = {
      {"hidden", &shape->hidden},         {"intermediate", &shape->intermediate},
      {"num_experts", &shape->num_experts}, {"block_n", &shape->block_n},
      {"block_k", &shape->block_k},       {"intermediate_offset", &shape->intermediate_offset},
      {"expert_start", &shape->expert_start}, {"global_experts", &shape->global_experts},
  };
  char *copy = strdup(text);
  if (!copy) return -1;
  int result = 0;
  for (char *save = NULL, *item = strtok_r(copy, ",", &save); item && result == 0; item = strtok_r(NULL, ",", &save)) {
    char *equals = strchr(item, '=');
    if (!equals) {
      fprintf(stderr, "volt8: shape item \"%s\" is not key=value\n", item);
      result = -1;
      break;
    }
    *equals = '\0';
    char *end = NULL;
    long value = strtol(equals + 1, &end, 10);
    size_t k = 0;
    while (k < sizeof keys / sizeof keys[0] && strcmp(keys[k].key, item) != 0) k++;
    if (k == sizeof keys / sizeof keys[0]) {
      fprintf(stderr, "volt8: unknown shape key \"%s\"\n", item);
      result = -1;
    } else if (*end != '\0' || end == equals + 1 || value < 0 || value > 1 << 20) {
      fprintf(stderr, "volt8: shape value \"%s\" for %s is not a number in 0..%d\n", equals + 1, item, 1 << 20);
      result = -1;
    } else {
      *keys[k].field = (int32_t)value;
    }
  }
  free(copy);
  return result;
}

void cli_format_shape(const volt8_moe_shape *shape, char *buf, size_t buf_size) {
  int used = snprintf(buf, buf_size, "hidden=%d,intermediate=%d,num_experts=%d,block_n=%d,block_k=%d,intermediate_offset=%d",
                      shape->hidden, shape->intermediate, shape->num_experts, shape->block_n, shape->block_k,
                      shape->intermediate_offset);
  /* an expert-parallel rank's range; nothing for a shape of all experts, so such lines read as before */
  if (shape->global_experts > 0 && used >= 0 && (size_t)used < buf_size)
    snprintf(buf + used, buf_size - (size_t)used, ",expert_start=%d,global_experts=%d", shape->expert_start,
             shape->global_experts);
}

double cli_now_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

int cli_report(volt8_ctx *ctx, const char *command, volt8_status status) {
  fprintf(stderr, "volt8 %s: %s\n  %s\n", command, volt8_status_string(status), volt8_last_error(ctx));
  return 1;
}
