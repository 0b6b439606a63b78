/* volt8 tune: the offline autotuner (tuning/), measured on the GPU or derived for sm_70. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#ifdef VOLT8_HAVE_BENCH
#include "tune_run.h"

int cli_tune(int argc, char **argv) {
  tune_options options;
  char error[8192];
  int parsed = tune_options_parse(argc, argv, &options, error, sizeof error);
  if (parsed == 1) {
    fputs(tune_usage(), stdout);
    return 0;
  }
  if (parsed < 0) {
    fprintf(stderr, "volt8 tune: %s\n%s", error, tune_usage());
    return 2;
  }
  char command[4096];
  size_t used = (size_t)snprintf(command, sizeof command, "volt8");
  for (int i = 0; i < argc && used < sizeof command; i++)
    used += (size_t)snprintf(command + used, sizeof command - used, " %s", argv[i]);
  tune_outcome outcome;
  volt8_status status = tune_run(&options, command, stderr, isatty(fileno(stderr)), &outcome, error, sizeof error);
  cli_print_tuning_warnings("tune");
  if (status != VOLT8_OK) {
    fprintf(stderr, "volt8 tune: %s\n  %s\n", volt8_status_string(status), error);
    return status == VOLT8_ERR_INVALID_ARGUMENT ? 2 : 1; /* what the arguments asked cannot be done */
  }
  if (outcome.m_failed) {
    fprintf(stderr, "volt8 tune: %d token count(s) found no candidate that agrees with the reference\n", outcome.m_failed);
    return 1;
  }
  printf("volt8 tune: %d shape(s) tuned into %s\n", outcome.shapes_done, options.out_dir);
  return 0;
}

#else

int cli_tune(int argc, char **argv) {
  fprintf(stderr, "volt8 tune: this build has no tuner (bench/ was not configured)\n");
  return 2;
}

#endif
