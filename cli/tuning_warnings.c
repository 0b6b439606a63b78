/* The tuning warnings a command's lookups left (volt8_tuning_warnings): a table missing, skipped as
 * invalid, or naming a variant the shape does not have. The library records them; the command says them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tools/tools.h"

int cli_print_tuning_warnings(const char *command) {
  int32_t count = 0;
  if (volt8_tuning_warnings(NULL, 0, &count) != VOLT8_OK || count == 0) return 0;
  char *text = NULL;
  for (size_t size = 4096;; size *= 2) {
    char *grown = realloc(text, size);
    if (!grown) break;
    text = grown;
    volt8_tuning_warnings(text, size, NULL);
    if (strlen(text) + 1 < size) break; /* not cut short */
  }
  fflush(stdout);
  if (!text) {
    fprintf(stderr, "volt8 %s: warning: %d tuning warnings (no memory to print them)\n", command, count);
    return count;
  }
  for (const char *line = text; *line;) {
    size_t length = strcspn(line, "\n");
    fprintf(stderr, "volt8 %s: warning: %.*s\n", command, (int)length, line);
    line += length + (line[length] == '\n');
  }
  free(text);
  return count;
}
