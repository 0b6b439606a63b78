/* Shape arguments, timing and error reporting shared by the subcommands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

int cli_parse_shape(const char *text, volt8_moe_shape *shape) {
  struct { const char *key; int32_t *field; } keys[] = {
      {"hidden", &shape->hidden},         {"intermediate", &shape->intermediate},
      {"num_experts", &shape->num_experts}, {"block_n", &shape->block_n},
      {"block_k", &shape->block_k},       {"intermediate_offset", &shape->intermediate_offset},
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
  snprintf(buf, buf_size, "hidden=%d,intermediate=%d,num_experts=%d,block_n=%d,block_k=%d,intermediate_offset=%d",
           shape->hidden, shape->intermediate, shape->num_experts, shape->block_n, shape->block_k,
           shape->intermediate_offset);
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
