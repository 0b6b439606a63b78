/* volt8: demo, list, compile. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *stream) {
  fprintf(stream,
          "usage: volt8 <command> [options]\n"
          "  demo [--model NAME] [--keep]          the main job at a model's per-expert shape (default reference)\n"
          "  list [--arch sm_XX] [--shape S | --model NAME [--tp N] [--rank R]]\n"
          "                                        list the kernel variants for a shape (default sm_70)\n"
          "  models [--tp N]                       the known models, or each rank's shape at TP N\n"
          "  compile --arch sm_XX --cache DIR [--shape S]...\n"
          "                                        fill a kernel cache ahead of time (PTX for compute_XX)\n"
          "  plan CKPT_DIR --tp N [--rank R] [--json] [--draft DIR] [--online fp8 [--online-block 1|128]]\n"
          "                                        validate a checkpoint and print each rank's memory\n"
          "  bench [options]                       time the forward against cuBLASLt FP16 and the byte floor\n"
          "                                        (--model NAME [--tp N] [--rank R], or --shape S)\n"
          "  tune [options]                        measure every variant and write tuning tables (--model NAME --tp ...)\n"
          "  version                               print the library version\n"
          "S is hidden=2560,intermediate=160,num_experts=512,block_n=128,block_k=128,intermediate_offset=32\n"
          "(keys left out keep these defaults: the reference model's TP4 rank 1).\n");
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *command = argv[1];
  if (strcmp(command, "version") == 0) {
    printf("volt8 %s\n", volt8_version_string());
    return 0;
  }
  if (strcmp(command, "demo") == 0) return cli_demo(argc - 1, argv + 1);
  if (strcmp(command, "list") == 0) return cli_list(argc - 1, argv + 1);
  if (strcmp(command, "compile") == 0) return cli_compile(argc - 1, argv + 1);
  if (strcmp(command, "plan") == 0) return cli_plan(argc - 1, argv + 1);
  if (strcmp(command, "bench") == 0) return cli_bench(argc - 1, argv + 1);
  if (strcmp(command, "tune") == 0) return cli_tune(argc - 1, argv + 1);
  if (strcmp(command, "models") == 0) return cli_models(argc - 1, argv + 1);
  fprintf(stderr, "volt8: unknown command \"%s\"\n", command);
  usage(stderr);
  return 2;
}
