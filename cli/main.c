/* volt8: the command table, help and version. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tools/tools.h"

typedef struct cli_command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *usage;   /* after "volt8 " */
  const char *summary; /* under the usage line */
} cli_command;

static const cli_command COMMANDS[] = {
    {"demo", cli_demo, "demo [--model NAME] [--keep [DIR]]",
     "the main job at a model's per-expert shape (default reference); --keep keeps the synthetic\n"
     "checkpoint (in DIR, or in a temporary folder it prints) for `volt8 plan DIR --tp 4`"},
    {"list", cli_list,
     "list [--arch sm_XX] [--shape S | --model NAME [--tp N] [--rank R]] [--choice 1,8,64 [--top-k K] [--tables DIR]] "
     "[--explain [--json]] [--resources [--json] [--jobs N]] [--sources DIR]",
     "list the kernel variants for a shape (default sm_70); --choice: the dispatch's pair at each M\n"
     "(1..2^30 / top-k) instead, --tables: from the tables of DIR alone, --explain: with the derivation\n"
     "model's V100 time and bound of each kernel (bytes: DRAM or L2; m8n8k4 or FP32 issue; dequant), the\n"
     "byte floor (sm_70), --json: as JSON; --resources: each variant's\n"
     "CUBIN, its registers, spills, shared memory and resident CTAs and warps per SM (NVRTC 12 for sm_70);\n"
     "--sources: each variant's generated CUDA source into DIR/ENTRY.cu"},
    {"models", cli_models, "models [--tp N]",
     "the known models, or each rank's shape at TP N of every model N splits (the others on stderr, with why;\n"
     "exit 2 when N splits none)"},
    {"compile", cli_compile, "compile --arch sm_XX --cache DIR [--shape S]...",
     "fill a kernel cache ahead of time (PTX for compute_XX)"},
    {"plan", cli_plan,
     "plan CKPT_DIR --tp N [--ep N] [--rank R] [--json] [--draft DIR] [--online fp8 [--online-block 1|128]]\n"
     "     [--max-tokens N] [--top-k K]",
     "validate a checkpoint and print each rank's memory, with the forward workspace for N tokens of top-k K\n"
     "(default 64 and 16, a load's defaults)"},
    {"bench", cli_bench, "bench [options]",
     "time the forward against three FP16 baselines (cuBLASLt per expert, cuBLAS grouped, sorted and padded on\n"
     "the device then batched cuBLASLt) and the byte floor, each checked against the double reference (--model\n"
     "NAME [--tp N] [--rank R], or --shape S; volt8 bench --help lists the options)"},
    {"tune", cli_tune, "tune [options]",
     "measure every variant and write tuning tables (--model NAME --tp ...; volt8 tune --help lists the options)"},
    {"doctor", cli_doctor, "doctor",
     "what this volt8 finds here, for an issue report: the library, the driver and GPUs, every NVRTC\n"
     "candidate and which serves each GPU and compute_70, the kernel cache, each GPU's tuning tables;\n"
     "exit 1 when a GPU present cannot be served"},
    {"version", NULL, "version", "print the library version (also --version)"},
    {"help", NULL, "help [COMMAND]", "this text, or one command's (also --help, COMMAND --help)"},
};
#define COMMAND_COUNT (sizeof COMMANDS / sizeof COMMANDS[0])

static const cli_command *find_command(const char *name) {
  for (size_t c = 0; c < COMMAND_COUNT; c++)
    if (strcmp(COMMANDS[c].name, name) == 0) return &COMMANDS[c];
  return NULL;
}

const char *cli_usage(const char *command) {
  const cli_command *found = find_command(command);
  return found ? found->usage : command;
}

/* The summary, each of its lines indented under the usage line. */
static void print_command(FILE *stream, const cli_command *command) {
  fprintf(stream, "  volt8 %s\n      ", command->usage);
  for (const char *c = command->summary; *c; c++) {
    fputc(*c, stream);
    if (*c == '\n') fputs("      ", stream);
  }
  fputc('\n', stream);
}

static void usage(FILE *stream) {
  fprintf(stream, "usage: volt8 <command> [options]\n");
  for (size_t c = 0; c < COMMAND_COUNT; c++) print_command(stream, &COMMANDS[c]);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  char text[256];
  volt8_tools_format_shape(&shape, text, sizeof text);
  fprintf(stream,
          "S is %s\n"
          "  (an expert-parallel rank adds expert_start=F,global_experts=E: experts [F, F+num_experts) of E)\n"
          "(keys left out keep these defaults: the reference model's TP4 rank 1).\n",
          text);
}

static int is_help(const char *arg) { return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0; }

/* volt8 help [COMMAND] */
static int help(int argc, char **argv) {
  if (argc > 3) return cli_unknown_argument("help", argv[3]);
  if (argc < 3) {
    usage(stdout);
    return 0;
  }
  const cli_command *command = find_command(argv[2]);
  if (!command) {
    fprintf(stderr, "volt8 help: unknown command \"%s\"\n", argv[2]);
    usage(stderr);
    return 2;
  }
  /* bench and tune print their full option lists themselves */
  if (command->run == cli_bench || command->run == cli_tune) return command->run(2, (char *[]){argv[2], "--help", NULL});
  print_command(stdout, command);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *name = argv[1];
  if (is_help(name) || strcmp(name, "help") == 0) return help(is_help(name) ? 2 : argc, argv);
  if (strcmp(name, "version") == 0 || strcmp(name, "--version") == 0) {
    if (argc > 2) return cli_unknown_argument("version", argv[2]);
    printf("volt8 %s\n", volt8_version_string());
    return 0;
  }
  const cli_command *command = find_command(name);
  if (!command) {
    fprintf(stderr, "volt8: unknown command \"%s\"\n", name);
    usage(stderr);
    return 2;
  }
  if (command->run != cli_bench && command->run != cli_tune && cli_wants_help(argc - 1, argv + 1)) {
    print_command(stdout, command);
    return 0;
  }
  return command->run(argc - 1, argv + 1);
}
