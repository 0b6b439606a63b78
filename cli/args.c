/* Argument values, shapes, timing and error reporting shared by the subcommands. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "tools/tools.h"

const char *cli_flag_value(const char *command, int argc, char **argv, int *i) {
  if (*i + 1 >= argc) {
    fprintf(stderr, "volt8 %s: %s needs a value\n", command, argv[*i]);
    return NULL;
  }
  return argv[++*i];
}

int cli_parse_number(const char *command, const char *flag, const char *text, const char *what, long low, long high,
                     int32_t *out) {
  char error[512];
  if (volt8_tools_flag_number(flag, text, what, low, high, out, error, sizeof error) == 0) return 0;
  fprintf(stderr, "volt8 %s: %s\n", command, error);
  return -1;
}

int cli_flag_once(const char *command, volt8_tools_flags_seen *seen, const char *flag) {
  char error[256];
  if (volt8_tools_flag_once(seen, flag, error, sizeof error) == 0) return 0;
  fprintf(stderr, "volt8 %s: %s\n", command, error);
  return -1;
}

int cli_parse_rank(const char *command, const char *text, int32_t tp_size, int32_t *out) {
  char error[512];
  if (volt8_tools_parse_rank(text, tp_size, out, error, sizeof error) == 0) return 0;
  fprintf(stderr, "volt8 %s: %s\n", command, error);
  return -1;
}

int cli_parse_arch(const char *command, const char *flag, const char *text) {
  char error[512];
  if (volt8_tools_flag_arch(flag, text, NULL, error, sizeof error) == 0) return 0;
  fprintf(stderr, "volt8 %s: %s\n", command, error);
  return -1;
}

int cli_parse_path(const char *command, const char *flag, const char *text, const char *what) {
  char error[512];
  if (volt8_tools_flag_path(flag, text, what, error, sizeof error) == 0) return 0;
  fprintf(stderr, "volt8 %s: %s\n", command, error);
  return -1;
}

/* The folder `path` is in ("." for a bare name), into buf; 0, or -1 when it does not fit. */
static int parent_folder(const char *path, char *buf, size_t buf_size) {
  size_t length = strlen(path);
  while (length > 1 && path[length - 1] == '/') length--; /* "dir/" is dir */
  while (length > 0 && path[length - 1] != '/') length--;
  while (length > 1 && path[length - 1] == '/') length--;
  if (length == 0) return snprintf(buf, buf_size, ".") >= (int)buf_size ? -1 : 0;
  if (length >= buf_size) return -1;
  memcpy(buf, path, length);
  buf[length] = '\0';
  return 0;
}

int cli_check_path(const char *command, const char *flag, const char *path, cli_path_use use) {
  struct stat info;
  int wants_folder = use != CLI_FILE_TO_WRITE;
  if (stat(path, &info) == 0) {
    if (wants_folder == !!S_ISDIR(info.st_mode)) return 0;
    fprintf(stderr, "volt8 %s: %s %s is %s (give %s)\n", command, flag, path, S_ISDIR(info.st_mode) ? "a folder" :
            S_ISREG(info.st_mode) ? "a file" : "not a folder nor a file", wants_folder ? "a folder" : "a file's path");
    return -1;
  }
  if (errno != ENOENT || use == CLI_FOLDER_TO_READ) {
    fprintf(stderr, "volt8 %s: %s %s: %s%s\n", command, flag, path, strerror(errno),
            errno == ENOENT ? " (give an existing folder)" : "");
    return -1;
  }
  if (use == CLI_FOLDER_TO_FILL) return 0; /* made with the folders above it */
  char parent[4096];
  if (parent_folder(path, parent, sizeof parent) == 0 && stat(parent, &info) == 0 && S_ISDIR(info.st_mode)) return 0;
  fprintf(stderr, "volt8 %s: %s %s: the folder it would be made in, %s, is not a folder that exists\n", command, flag,
          path, parent);
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

int cli_parse_shape(const char *command, const char *text, volt8_moe_shape *shape) {
  char error[512];
  if (volt8_tools_parse_shape(text, shape, error, sizeof error) == 0) return 0;
  fprintf(stderr, "volt8 %s: --shape \"%s\": %s\n", command, text, error);
  return -1;
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
