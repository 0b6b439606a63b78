/* The volt8 command's arguments: each bad value is refused with exit 2 and a message that names the
 * flag and the text given, unknown arguments are refused by every command, and help, --version and
 * demo --keep DIR do what the README says. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_support.h"
#include "tiny_checkpoint.h"
#include "tools/tools.h"
#include "volt8.h"

TestSuite(cli_args, .timeout = 300);
TestSuite(shape_text, .timeout = 60);

typedef struct cli_result {
  int status; /* exit status, -1 when killed */
  char out[16384], err[16384];
} cli_result;

static void run_volt8(cli_result *result, char *const *args) {
  result->status = test_run_volt8(args, result->out, sizeof result->out, result->err, sizeof result->err);
}

#define VOLT8(result, ...) run_volt8((result), (char *[]){__VA_ARGS__, NULL})

static void args_text(char *const *args, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (; *args && used < size; args++) used += (size_t)snprintf(buf + used, size - used, " %s", *args);
}

/* volt8 ARGS exits 2 with nothing on stdout and every one of `expected` (NULL-terminated) on stderr. */
static void expect_refused(char *const *args, const char *const *expected) {
  cli_result *result = malloc(sizeof *result);
  cr_assert_not_null(result);
  run_volt8(result, args);
  char command[512];
  args_text(args, command, sizeof command);
  cr_assert_eq(result->status, 2, "volt8%s exited %d, expected 2; stderr:\n%s", command, result->status, result->err);
  cr_assert_str_empty(result->out, "volt8%s printed on stdout:\n%s", command, result->out);
  for (; *expected; expected++)
    cr_assert_not_null(strstr(result->err, *expected), "volt8%s: stderr lacks \"%s\":\n%s", command, *expected,
                       result->err);
  free(result);
}

#define REFUSED(args, ...) expect_refused((char *[]){args, NULL}, (const char *[]){__VA_ARGS__, NULL})
#define ARGS(...) __VA_ARGS__

/* bench and tune exist only in builds with bench/ (the sanitized build has none). */
static int is_built(const char *command) {
  cli_result *result = malloc(sizeof *result);
  cr_assert_not_null(result);
  VOLT8(result, (char *)command, "--help");
  int built = strstr(result->err, "this build has no") == NULL;
  free(result);
  return built;
}

/* A checkpoint folder that need not exist: argument errors come before any file is read. */
#define NO_CKPT "/nonexistent/volt8-checkpoint"

Test(cli_args, plan_workspace_sizes_past_their_limits_name_the_flag) {
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--max-tokens", "0"), "--max-tokens 0 is not a valid token count",
          "1..1073741824");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--max-tokens", "1e6"), "--max-tokens \"1e6\" is not a whole number");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--top-k", "70000"), "--top-k 70000 is not a valid top-k", "1..64");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--max-tokens", "67108865", "--top-k", "16"),
          "--max-tokens 67108865 x --top-k 16 = 1073741840 routed pairs, more than the limit of 1073741824");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--max-tokens"), "volt8 plan: --max-tokens needs a value");
}

Test(cli_args, tp_sizes_out_of_range_name_the_value_and_the_valid_range) {
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "0"), "--tp 0 is not a valid TP size", "1..64");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "-1"), "--tp -1 is not a valid TP size", "1..64");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "5000"), "--tp 5000 is not a valid TP size", "1..64");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "99999999999999999999"), "--tp 99999999999999999999 is not a valid TP size");
  REFUSED(ARGS("models", "--tp", "0"), "volt8 models: --tp 0 is not a valid TP size", "1..64");
  REFUSED(ARGS("list", "--model", "reference", "--tp", "65"), "volt8 list: --tp 65 is not a valid TP size", "1..64");
}

Test(cli_args, numbers_with_junk_are_refused_naming_the_text) {
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4x"), "--tp \"4x\" is not a whole number");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", ""), "--tp \"\" is not a whole number");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--rank", "1.5"), "--rank \"1.5\" is not a whole number");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--online-block", "12 8"), "--online-block \"12 8\" is not a whole number");
  REFUSED(ARGS("models", "--tp", "two"), "--tp \"two\" is not a whole number");
  REFUSED(ARGS("list", "--model", "reference", "--tp", "4", "--rank", "0x1"), "--rank \"0x1\" is not a whole number");
}

Test(cli_args, ranks_outside_the_tp_size_give_its_ranks) {
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--rank", "9999"), "--rank 9999 is outside 0..3", "--tp 4");
  REFUSED(ARGS("plan", NO_CKPT, "--rank", "4", "--tp", "4"), "--rank 4 is outside 0..3");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "2", "--rank", "-1"), "--rank -1 is outside 0..1");
  REFUSED(ARGS("list", "--model", "reference", "--tp", "8", "--rank", "8"), "volt8 list: --rank 8 is outside 0..7");
  /* without --tp, list's default TP size of 4 */
  REFUSED(ARGS("list", "--model", "reference", "--rank", "4"), "--rank 4 is outside 0..3");
}

Test(cli_args, a_flag_without_its_value_is_named) {
  REFUSED(ARGS("plan", NO_CKPT, "--tp"), "volt8 plan: --tp needs a value");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--rank"), "volt8 plan: --rank needs a value");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--draft"), "volt8 plan: --draft needs a value");
  REFUSED(ARGS("models", "--tp"), "volt8 models: --tp needs a value");
  REFUSED(ARGS("list", "--model"), "volt8 list: --model needs a value");
  REFUSED(ARGS("list", "--shape"), "volt8 list: --shape needs a value");
  REFUSED(ARGS("compile", "--cache", "/tmp", "--arch"), "volt8 compile: --arch needs a value");
  REFUSED(ARGS("demo", "--model"), "volt8 demo: --model needs a value");
  if (is_built("tune")) REFUSED(ARGS("tune", "--tp"), "volt8 tune: --tp needs a value");
}

Test(cli_args, unknown_arguments_are_refused_by_every_command) {
  REFUSED(ARGS("demo", "--bogus"), "volt8 demo: unknown argument \"--bogus\"", "usage: volt8 demo");
  REFUSED(ARGS("demo", "--keep", "--bogus"), "volt8 demo: unknown argument \"--bogus\"");
  REFUSED(ARGS("list", "--bogus"), "volt8 list: unknown argument \"--bogus\"", "usage: volt8 list");
  REFUSED(ARGS("models", "--bogus"), "volt8 models: unknown argument \"--bogus\"");
  REFUSED(ARGS("models", "8"), "volt8 models: unknown argument \"8\"");
  REFUSED(ARGS("compile", "--arch", "sm_70", "--cache", "/tmp", "extra"), "volt8 compile: unknown argument \"extra\"");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--bogus"), "volt8 plan: unknown argument \"--bogus\"", "usage: volt8 plan");
  REFUSED(ARGS("plan", NO_CKPT, "second", "--tp", "4"), "volt8 plan: unknown argument \"second\"");
  REFUSED(ARGS("version", "--bogus"), "volt8 version: unknown argument \"--bogus\"");
  REFUSED(ARGS("help", "plan", "extra"), "volt8 help: unknown argument \"extra\"");
  REFUSED(ARGS("help", "frobnicate"), "volt8 help: unknown command \"frobnicate\"");
  REFUSED(ARGS("frobnicate"), "volt8: unknown command \"frobnicate\"");
  if (is_built("tune")) REFUSED(ARGS("tune", "--bogus"), "volt8 tune: unknown argument \"--bogus\"");
  if (is_built("bench")) REFUSED(ARGS("bench", "--bogus"), "volt8 bench: unknown argument \"--bogus\"");
}

Test(cli_args, plan_says_which_of_its_two_needs_is_missing) {
  REFUSED(ARGS("plan", "--tp", "4"), "volt8 plan: needs CKPT_DIR", "usage: volt8 plan");
  REFUSED(ARGS("plan", NO_CKPT), "volt8 plan: needs --tp N");
}

Test(cli_args, version_and_help_work) {
  cli_result *result = malloc(sizeof *result);
  cr_assert_not_null(result);
  char expected[64];
  snprintf(expected, sizeof expected, "volt8 %s\n", volt8_version_string());
  const char *version_forms[] = {"--version", "version"};
  for (int i = 0; i < 2; i++) {
    VOLT8(result, (char *)version_forms[i]);
    cr_assert_eq(result->status, 0, "volt8 %s exited %d: %s", version_forms[i], result->status, result->err);
    cr_assert_str_eq(result->out, expected, "volt8 %s", version_forms[i]);
  }
  const char *commands[] = {"demo", "list", "models", "compile", "plan", "bench", "tune", "version", "help"};
  const char *help_forms[] = {"help", "--help", "-h"};
  for (int i = 0; i < 3; i++) {
    VOLT8(result, (char *)help_forms[i]);
    cr_assert_eq(result->status, 0, "volt8 %s exited %d: %s", help_forms[i], result->status, result->err);
    for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++) {
      char line[64];
      snprintf(line, sizeof line, "  volt8 %s", commands[c]);
      cr_assert_not_null(strstr(result->out, line), "volt8 %s lacks \"%s\":\n%s", help_forms[i], line, result->out);
    }
  }
  /* bench and tune list their own options; the others give their usage line */
  for (size_t c = 0; c < 5; c++) {
    char usage[64];
    snprintf(usage, sizeof usage, "volt8 %s", commands[c]);
    VOLT8(result, (char *)commands[c], "--help");
    cr_assert_eq(result->status, 0, "volt8 %s --help exited %d: %s", commands[c], result->status, result->err);
    cr_assert_not_null(strstr(result->out, usage), "volt8 %s --help:\n%s", commands[c], result->out);
    VOLT8(result, "help", (char *)commands[c]);
    cr_assert_eq(result->status, 0, "volt8 help %s exited %d: %s", commands[c], result->status, result->err);
    cr_assert_not_null(strstr(result->out, usage), "volt8 help %s:\n%s", commands[c], result->out);
  }
  VOLT8(result, "plan", NO_CKPT, "--tp", "4", "--help");
  cr_assert(result->status == 0 && strstr(result->out, "volt8 plan CKPT_DIR"), "plan ... --help: %d %s", result->status,
            result->err);
  if (is_built("bench")) {
    VOLT8(result, "bench", "--help");
    cr_assert_eq(result->status, 0, "volt8 bench --help exited %d: %s", result->status, result->err);
    cr_assert_not_null(strstr(result->out, "usage: volt8 bench"), "%s", result->out);
  }
  free(result);
}

/* list --resources: its flags need it, --jobs is a thread count, and an arch it cannot report on is
 * said to be one (exit 1: the arguments were fine). */
Test(cli_args, list_resources_arguments_and_the_archs_it_cannot_report_on) {
  REFUSED(ARGS("list", "--json"), "volt8 list: --json needs --resources or --explain");
  REFUSED(ARGS("list", "--jobs", "2"), "volt8 list: --jobs needs --resources or --explain");
  REFUSED(ARGS("list", "--explain"), "volt8 list: --explain needs --choice and sm_70");
  REFUSED(ARGS("list", "--choice", "1", "--explain", "--arch", "sm_90"), "volt8 list: --explain needs --choice and sm_70");
  REFUSED(ARGS("list", "--resources", "--jobs", "0"), "volt8 list: --jobs 0 is not a valid compile thread count", "1..256");
  REFUSED(ARGS("list", "--resources", "--jobs", "257"), "--jobs 257 is not a valid compile thread count");
  REFUSED(ARGS("list", "--resources", "--jobs", "two"), "volt8 list: --jobs \"two\" is not a whole number");
  REFUSED(ARGS("list", "--resources", "--jobs"), "volt8 list: --jobs needs a value");
  REFUSED(ARGS("list", "--resources", "--tp", "4"), "volt8 list: --tp and --rank need --model");
  REFUSED(ARGS("list", "--resources", "--bogus"), "volt8 list: unknown argument \"--bogus\"");
  REFUSED(ARGS("list", "--resources", "--choice", "1,8"), "volt8 list: --resources and --choice exclude each other");
  cli_result *result = malloc(sizeof *result);
  cr_assert_not_null(result);
  VOLT8(result, "list", "--resources", "--arch", "sm_75");
  cr_assert(result->status == 1 && strstr(result->err, "no SM limits are known for sm_75"),
            "list --resources --arch sm_75 exited %d:\n%s", result->status, result->err);
  setenv("VOLT8_NVRTC_DISABLE", "1", 1);
  VOLT8(result, "list", "--resources", "--arch", "sm_70", "--jobs", "1");
  unsetenv("VOLT8_NVRTC_DISABLE");
  cr_assert(result->status == 1 && strstr(result->err, "no NVRTC can compile for compute_70") &&
                strstr(result->err, "needs an NVRTC that makes CUBINs"),
            "list --resources without NVRTC exited %d:\n%s", result->status, result->err);
  cr_assert_str_empty(result->out, "%s", result->out);
  free(result);
}

static size_t count_of(const char *text, const char *part) {
  size_t count = 0;
  for (const char *at = strstr(text, part); at; at = strstr(at + 1, part)) count++;
  return count;
}

/* The README's first two commands: `volt8 demo --keep DIR`, then `volt8 plan DIR --tp 4`. */
Test(cli_args, demo_keep_dir_leaves_a_checkpoint_that_plan_reads) {
  setenv("VOLT8_CACHE_DIR", VOLT8_BINARY_DIR "/tests/demo_cache", 1);
  char parent[] = "/tmp/volt8-keep-XXXXXX", dir[64];
  cr_assert_not_null(mkdtemp(parent));
  snprintf(dir, sizeof dir, "%s/ckpt", parent);
  cli_result *result = malloc(sizeof *result);
  cr_assert_not_null(result);
  VOLT8(result, "demo", "--keep", dir);
  cr_assert_eq(result->status, 0, "volt8 demo --keep %s exited %d:\n%s\n%s", dir, result->status, result->out,
               result->err);
  char said[256];
  snprintf(said, sizeof said, "the checkpoint is kept in %s; next: volt8 plan %s --tp 4\n", dir, dir);
  cr_assert_not_null(strstr(result->out, said), "stdout lacks \"%s\":\n%s", said, result->out);
  cr_assert_eq(count_of(result->out, "  padded  what a loader that pads each rank's slice"), 1,
               "the padded column should be explained once:\n%s", result->out);
  const char *files[] = {"model.safetensors", "config.json"};
  for (int i = 0; i < 2; i++) {
    char path[128];
    struct stat info;
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    cr_assert(stat(path, &info) == 0 && info.st_size > 0, "%s was not kept", path);
  }
  VOLT8(result, "plan", dir, "--tp", "4");
  cr_assert_eq(result->status, 0, "volt8 plan %s --tp 4 exited %d: %s", dir, result->status, result->err);
  cr_assert_not_null(strstr(result->out, "tp 4 "), "%s", result->out);
  /* a second run refuses to write over what is there */
  char refused[160];
  snprintf(refused, sizeof refused, "--keep %s: the folder is not empty", dir);
  REFUSED(ARGS("demo", "--keep", dir), refused);
  free(result);
  test_remove_tree(parent);
}

/* --shape is read one strict way by every command that takes it (runtime/tools/arguments.c): digits
 * alone, each key once, known keys, values in the key's range, and the error names --shape, the text
 * and the key. */
Test(cli_args, every_command_reads_shape_text_one_strict_way) {
  static const struct { const char *text, *said; } cases[] = {
      {"hidden=2048,hidden=2560", "hidden is given twice"},
      {"hidden=+2560", "hidden=\"+2560\": the value is not a whole number in digits"},
      {"hidden= 2560", "hidden=\" 2560\": the value is not a whole number in digits"},
      {"hidden=2560 ", "hidden=\"2560 \": the value is not a whole number in digits"},
      {"hidden=-16", "hidden=\"-16\": the value is not a whole number in digits"},
      {"hidden=0x100", "hidden=\"0x100\""},
      {"hidden=", "hidden=\"\": the value is not a whole number in digits"},
      {"hidden=0", "hidden=0 is not valid (hidden is a multiple of 16 in 16..65536)"},
      {"hidden=99999999999999999999", "hidden=99999999999999999999 is not valid"},
      {"intermediate=24", "intermediate=24 is not valid (intermediate is a multiple of 16"},
      {"num_experts=4096", "num_experts=4096 is not valid (num_experts is a whole number in 1..2048)"},
      {"block_k=64", "block_k=64 is not valid (block_k is 128)"},
      {"block_n=1", "intermediate_offset=32 is not below block_n=1"},
      {"expert_start=4", "expert_start=4 needs global_experts"},
      {"num_experts=8,expert_start=4,global_experts=8", "do not fit in global_experts=8"},
      {"hidden=2560,,num_experts=8", "an empty item"},
      {"hidden=2560,", "an empty item"},
      {"hidden", "item \"hidden\" is not key=value"},
      {"Hidden=2560", "unknown key \"Hidden\""},
      {"", "the shape is empty"},
  };
  const char *commands[] = {"list", "compile", "bench", "tune"};
  for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++) {
    if ((c >= 2) && !is_built(commands[c])) continue;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      char flag_and_text[160];
      snprintf(flag_and_text, sizeof flag_and_text, "--shape \"%s\": ", cases[i].text);
      if (c == 1)
        REFUSED(ARGS("compile", "--arch", "sm_70", "--cache", "/nonexistent/volt8-cache", "--shape", (char *)cases[i].text),
                flag_and_text, cases[i].said);
      else
        REFUSED(ARGS((char *)commands[c], "--shape", (char *)cases[i].text), flag_and_text, cases[i].said);
    }
  }
  REFUSED(ARGS("list", "--shape", "hidden=2048", "--shape", "hidden=1024"), "--shape is given twice");
}

/* Every numeric flag reads digits alone: no sign, space, other base or exponent. */
Test(cli_args, numbers_are_digits_alone) {
  static const char *const texts[] = {"+4", " 4", "4 ", "0x4", "4e0", "4.", "\t4"};
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    char said[64];
    snprintf(said, sizeof said, "\"%s\" is not a whole number", texts[i]);
    char *text = (char *)texts[i];
    REFUSED(ARGS("plan", NO_CKPT, "--tp", text), said);
    REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--rank", text), said);
    REFUSED(ARGS("models", "--tp", text), said);
    REFUSED(ARGS("list", "--model", "reference", "--tp", text), said);
    char choice_said[96];
    snprintf(choice_said, sizeof choice_said, "item 1, \"%s\", is not a whole number", texts[i]);
    REFUSED(ARGS("list", "--choice", text), choice_said);
    REFUSED(ARGS("list", "--resources", "--jobs", text), said);
    if (is_built("bench")) {
      REFUSED(ARGS("bench", "--seed", text), "--seed", said);
      REFUSED(ARGS("bench", "--m", text), "--m", choice_said);
    }
    if (is_built("tune")) {
      REFUSED(ARGS("tune", "--jobs", text), "--jobs", said);
      REFUSED(ARGS("tune", "--tp", text), "--tp", choice_said);
    }
  }
}

/* An empty path names nothing: it is refused, not read as "no value" (compile --cache "" used to fill
 * the default cache folder). */
Test(cli_args, empty_paths_are_refused) {
  char home[256];
  test_make_temp_dir(home, sizeof home, "volt8-home");
  setenv("HOME", home, 1);
  unsetenv("XDG_CACHE_HOME");
  unsetenv("VOLT8_CACHE_DIR");
  REFUSED(ARGS("compile", "--arch", "sm_70", "--cache", ""), "volt8 compile: --cache \"\" names no folder");
  char cache[300];
  snprintf(cache, sizeof cache, "%s/.cache", home);
  cr_assert_neq(access(cache, F_OK), 0, "compile --cache \"\" made %s", cache);
  REFUSED(ARGS("list", "--choice", "1", "--tables", ""), "volt8 list: --tables \"\" names no folder");
  REFUSED(ARGS("demo", "--keep", ""), "volt8 demo: --keep \"\" names no folder");
  REFUSED(ARGS("plan", "", "--tp", "4"), "volt8 plan: CKPT_DIR \"\" names no folder");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--draft", ""), "volt8 plan: --draft \"\" names no folder");
  if (is_built("bench")) {
    REFUSED(ARGS("bench", "--json", ""), "volt8 bench: --json \"\" names no file");
    REFUSED(ARGS("bench", "--svg", ""), "volt8 bench: --svg \"\" names no file");
    REFUSED(ARGS("bench", "--markdown", ""), "volt8 bench: --markdown \"\" names no file");
  }
  if (is_built("tune")) {
    REFUSED(ARGS("tune", "--out", ""), "volt8 tune: --out \"\" names no folder");
    REFUSED(ARGS("tune", "--log", ""), "volt8 tune: --log \"\" names no file");
  }
  cr_assert_neq(access(cache, F_OK), 0, "%s was made", cache);
  test_remove_tree(home);
}

static volt8_moe_shape parsed_shape(const char *text, int expect_ok) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  char error[512] = "";
  int result = volt8_tools_parse_shape(text, &shape, error, sizeof error);
  cr_assert_eq(result, expect_ok ? 0 : -1, "\"%s\": %s", text, error);
  if (!expect_ok) cr_assert(error[0], "\"%s\" was refused without a message", text);
  return shape;
}

/* The parser writes the shape only when the whole text is good, and reads its own text back. */
Test(shape_text, a_refused_text_leaves_the_shape_as_it_was_and_formatted_text_reads_back) {
  const volt8_moe_shape init = VOLT8_MOE_SHAPE_INIT;
  const char *refused[] = {"hidden=1024,intermediate=+16", "hidden=1024,num_experts=8,bogus=1",
                           "hidden=1024,block_n=1", "num_experts=8,hidden=1024,hidden=1024"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    volt8_moe_shape shape = parsed_shape(refused[i], 0);
    cr_assert_eq(memcmp(&shape, &init, sizeof shape), 0, "\"%s\" changed the shape it refused", refused[i]);
  }
  volt8_moe_shape shape = parsed_shape("num_experts=8,hidden=1024", 1);
  cr_assert(shape.hidden == 1024 && shape.num_experts == 8 && shape.intermediate == init.intermediate &&
                shape.intermediate_offset == init.intermediate_offset,
            "keys left out keep their value");
  const char *texts[] = {"hidden=65536,intermediate=65536,num_experts=2048,block_n=1,intermediate_offset=0",
                         "num_experts=3,expert_start=1048573,global_experts=1048576", "intermediate_offset=112",
                         "hidden=16,intermediate=16,num_experts=1,block_n=128,block_k=128,intermediate_offset=0"};
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    volt8_moe_shape first = parsed_shape(texts[i], 1), again = VOLT8_MOE_SHAPE_INIT;
    char formatted[256], error[512] = "";
    volt8_tools_format_shape(&first, formatted, sizeof formatted);
    cr_assert_eq(volt8_tools_parse_shape(formatted, &again, error, sizeof error), 0, "%s: %s", formatted, error);
    cr_assert_eq(memcmp(&first, &again, sizeof first), 0, "\"%s\" formatted as \"%s\" reads back otherwise", texts[i],
                 formatted);
  }
}

/* The parser's limits are the code generator's: what it accepts the generator lists variants for,
 * and one step past each limit both refuse. */
Test(shape_text, its_limits_are_the_generators) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  const char *at_limit[] = {"hidden=65536", "intermediate=65536", "num_experts=2048",
                            "num_experts=2,expert_start=1048574,global_experts=1048576"};
  for (size_t i = 0; i < sizeof at_limit / sizeof at_limit[0]; i++) {
    volt8_moe_shape shape = parsed_shape(at_limit[i], 1);
    int32_t count = 0;
    cr_assert_eq(volt8_variant_count(ctx, &shape, &count), VOLT8_OK, "%s: %s", at_limit[i], volt8_last_error(ctx));
    cr_assert_gt(count, 0, "%s", at_limit[i]);
  }
  const struct { const char *text; size_t field; int32_t value; } past_limit[] = {
      {"hidden=65552", offsetof(volt8_moe_shape, hidden), 65552},
      {"intermediate=65552", offsetof(volt8_moe_shape, intermediate), 65552},
      {"num_experts=2049", offsetof(volt8_moe_shape, num_experts), 2049},
  };
  for (size_t i = 0; i < sizeof past_limit / sizeof past_limit[0]; i++) {
    parsed_shape(past_limit[i].text, 0);
    volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
    *(int32_t *)((char *)&shape + past_limit[i].field) = past_limit[i].value;
    int32_t count = 0;
    cr_assert_neq(volt8_variant_count(ctx, &shape, &count), VOLT8_OK, "the generator takes %s", past_limit[i].text);
  }
  volt8_ctx_destroy(ctx);
}

/* An arch is "sm_" and digits alone, for the context as for the command line. */
Test(shape_text, arch_text_is_sm_and_digits_alone) {
  const char *refused[] = {"sm_ 70", "sm_+70", "sm_070", "sm_70 ", "sm_7", "sm_", "sm_200", "sm_99999999999999999999",
                           "SM_70", "compute_70"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    cr_assert_eq(volt8_tools_parse_arch(refused[i]), 0, "\"%s\" read as an arch", refused[i]);
    volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
    options.device = -1;
    options.cache_disable = 1;
    options.target_arch = refused[i];
    volt8_ctx *ctx = NULL;
    cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_ERR_INVALID_ARGUMENT, "target_arch \"%s\" accepted", refused[i]);
  }
  cr_assert_eq(volt8_tools_parse_arch("sm_70"), 70);
  cr_assert_eq(volt8_tools_parse_arch("sm_199"), 199);
  cr_assert_eq(volt8_tools_parse_arch("sm_50"), 50);
}

/* ---- every flag of every command: a bad value exits 2, naming the flag, the text and what is valid ---- */

/* Placeholders of the table, made per run: a tiny checkpoint of 7 experts (intermediate 32: TP1 and TP2
 * split it), a regular file, a path under a folder that does not exist, a folder. */
#define AT_CKPT "@ckpt"
#define AT_FILE "@file"
#define AT_MISSING "@missing"
#define AT_DIR "@dir"

typedef struct bad_argument {
  char *args[12];
  const char *said[3]; /* on stderr, each; AT_* are replaced here too */
} bad_argument;

static const bad_argument BAD_ARGUMENTS[] = {
    {{"demo", "--model", "llama"}, {"volt8 demo: unknown model \"llama\"", "known: deepseek-v3"}},
    {{"demo", "--keep", AT_FILE}, {"volt8 demo: --keep " AT_FILE " is a file (give a folder)"}},
    {{"demo", "--keep", AT_CKPT}, {"volt8 demo: --keep " AT_CKPT ": the folder is not empty"}},
    {{"demo", "--keep", AT_MISSING "/ckpt"}, {"--keep " AT_MISSING "/ckpt: the folder it would be made in", "is not a folder that exists"}},
    {{"models", "--tp", "0"}, {"volt8 models: --tp 0 is not a valid TP size", "1..64"}},
    {{"list", "--arch", "sm_7"}, {"volt8 list: --arch \"sm_7\" is not an arch", "sm_70"}},
    {{"list", "--shape", "hidden=0"}, {"volt8 list: --shape \"hidden=0\": hidden=0 is not valid", "16..65536"}},
    {{"list", "--model", "llama"}, {"volt8 list: unknown model \"llama\"", "known: deepseek-v3"}},
    {{"list", "--model", "reference", "--tp", "3"}, {"volt8 list: reference at --tp 3", "does not divide into 3"}},
    {{"list", "--model", "reference", "--tp", "4", "--rank", "4"}, {"volt8 list: --rank 4 is outside 0..3"}},
    {{"list", "--choice", "0"}, {"volt8 list: --choice: item 1, 0, is outside 1.."}},
    {{"list", "--choice", "1", "--top-k", "0"}, {"volt8 list: --top-k 0 is not a valid top-k", "1..64"}},
    {{"list", "--choice", "1", "--tables", ""}, {"volt8 list: --tables \"\" names no folder"}},
    {{"list", "--resources", "--jobs", "0"}, {"volt8 list: --jobs 0 is not a valid compile thread count", "1..256"}},
    {{"list", "--explain"}, {"volt8 list: --explain needs --choice and sm_70"}},
    {{"list", "--resources", "--choice", "1"}, {"volt8 list: --resources and --choice exclude each other"}},
    {{"list", "--json"}, {"volt8 list: --json needs --resources or --explain"}},
    {{"list", "--sources", AT_FILE}, {"volt8 list: --sources " AT_FILE " is a file (give a folder)"}},
    {{"list", "--sources", AT_DIR, "--choice", "1"}, {"volt8 list: --sources excludes --resources and --choice"}},
    {{"compile", "--arch", "sm_7", "--cache", AT_DIR}, {"volt8 compile: --arch \"sm_7\" is not an arch", "sm_70"}},
    {{"compile", "--arch", "sm_70", "--cache", AT_FILE}, {"volt8 compile: --cache " AT_FILE " is a file (give a folder)"}},
    {{"compile", "--arch", "sm_70", "--cache", AT_DIR, "--shape", "num_experts=4096"},
     {"volt8 compile: --shape \"num_experts=4096\"", "1..2048"}},
    {{"compile", "--cache", AT_DIR}, {"volt8 compile: --arch sm_XX and --cache DIR are required"}},
    {{"plan", AT_MISSING, "--tp", "2"}, {"volt8 plan: CKPT_DIR " AT_MISSING ": No such file or directory"}},
    {{"plan", AT_FILE, "--tp", "2"}, {"volt8 plan: CKPT_DIR " AT_FILE " is a file (give a folder)"}},
    {{"plan", AT_CKPT, "--tp", "0"}, {"volt8 plan: --tp 0 is not a valid TP size", "1..64"}},
    {{"plan", AT_CKPT, "--tp", "3"}, {"volt8 plan: --tp 3 does not split this checkpoint", "32 does not divide into 3"}},
    {{"plan", AT_CKPT, "--tp", "4"}, {"volt8 plan: --tp 4 does not split this checkpoint", "not a multiple of 16"}},
    {{"plan", AT_CKPT, "--tp", "2", "--ep", "0"}, {"volt8 plan: --ep 0 is not a valid EP size"}},
    {{"plan", AT_CKPT, "--tp", "2", "--ep", "8"}, {"volt8 plan: --ep 8: the checkpoint has 7 experts", "1..7"}},
    {{"plan", AT_CKPT, "--tp", "2", "--rank", "2"}, {"volt8 plan: --rank 2 is outside 0..1"}},
    {{"plan", AT_CKPT, "--tp", "2", "--draft", AT_MISSING}, {"volt8 plan: --draft " AT_MISSING ": No such file"}},
    {{"plan", AT_CKPT, "--tp", "2", "--online", "int4"}, {"volt8 plan: --online \"int4\" is not a quantization", "fp8"}},
    {{"plan", AT_CKPT, "--tp", "2", "--online", "fp8"}, {"volt8 plan: --online fp8 does not fit this checkpoint",
                                                        "already FP8"}},
    {{"plan", AT_CKPT, "--tp", "2", "--online", "fp8", "--online-block", "64"},
     {"volt8 plan: --online-block 64 is not a valid online scale block height", "1 or 128"}},
    {{"plan", AT_CKPT, "--tp", "2", "--online-block", "1"}, {"volt8 plan: --online-block needs --online fp8"}},
    {{"plan", AT_CKPT, "--tp", "2", "--json", "extra"}, {"volt8 plan: unknown argument \"extra\""}},
    {{"bench", "--model", "llama"}, {"volt8 bench: unknown model \"llama\"", "known: deepseek-v3"}},
    {{"bench", "--tp", "0"}, {"volt8 bench: --tp 0 is not a valid TP size", "1..64"}},
    {{"bench", "--tp", "4", "--rank", "4"}, {"volt8 bench: --rank 4 is outside 0..3 (the ranks of --tp 4 are 0..3)"}},
    {{"bench", "--shape", "block_k=64"}, {"volt8 bench: --shape \"block_k=64\": block_k=64 is not valid", "128"}},
    {{"bench", "--m", "0"}, {"volt8 bench: --m: item 1, 0, is outside 1..107374182",
                             "at most 1073741824 routed pairs: 107374182 tokens at top-k 10"}},
    {{"bench", "--m", "8,16777217", "--top-k", "64"}, {"volt8 bench: --m: item 2, 16777217, is outside 1..16777216",
                                                     "16777216 tokens at top-k 64"}},
    {{"bench", "--top-k", "65"}, {"volt8 bench: --top-k 65 is not a valid top-k", "1..64"}},
    {{"bench", "--seed", "-1"}, {"volt8 bench: --seed -1 is not a valid seed", "0..2147483647"}},
    {{"bench", "--sets", "0"}, {"volt8 bench: --sets 0 is not a valid count of input sets", "1..256"}},
    {{"bench", "--chain", "1"}, {"volt8 bench: --chain 1 is not a valid chain length", "2..256"}},
    {{"bench", "--warmup", "1001"}, {"volt8 bench: --warmup 1001 is not a valid count of warm-up passes", "0..1000"}},
    {{"bench", "--batches", "0"}, {"volt8 bench: --batches 0 is not a valid count of timed passes", "1..10000"}},
    {{"bench", "--device", "256"}, {"volt8 bench: --device 256 is not a valid device ordinal", "0..255"}},
    {{"bench", "--target-arch", "sm70"}, {"volt8 bench: --target-arch \"sm70\" is not an arch", "sm_70"}},
    {{"bench", "--variants", "gate_up.x"}, {"volt8 bench: --variants \"gate_up.x\" is not GATE_UP,DOWN"}},
    {{"bench", "--target-arch", "sm_70", "--variants", "gate_up.x,down.y"},
     {"volt8 bench: --variants: gate_up.x is not a variant of the shape for sm_70", "volt8 list --arch sm_70 --shape"}},
    {{"bench", "--json", AT_DIR}, {"volt8 bench: --json " AT_DIR " is a folder (give a file's path)"}},
    {{"bench", "--svg", AT_MISSING "/plot.svg"}, {"volt8 bench: --svg " AT_MISSING "/plot.svg: the folder it would be made in"}},
    {{"bench", "--markdown", ""}, {"volt8 bench: --markdown \"\" names no file"}},
    {{"tune", "--model", "llama"}, {"volt8 tune: unknown model \"llama\"", "known: deepseek-v3"}},
    {{"tune", "--tp", "4,0"}, {"volt8 tune: --tp: item 2, 0, is outside 1..64", "TP sizes are whole numbers in 1..64"}},
    {{"tune", "--tp", "3"}, {"volt8 tune: reference at --tp 3", "does not divide into 3"}},
    {{"tune", "--shape", "intermediate_offset=8"}, {"volt8 tune: --shape \"intermediate_offset=8\"", "multiple of 16"}},
    {{"tune", "--m", "1,,8"}, {"volt8 tune: --m: item 2 is empty", "whole numbers in 1..1048576"}},
    {{"tune", "--top-k", "0"}, {"volt8 tune: --top-k 0 is not a valid top-k", "1..64"}},
    {{"tune", "--out", ""}, {"volt8 tune: --out \"\" names no folder"}},
    {{"tune", "--target-arch", "sm_1000"}, {"volt8 tune: --target-arch \"sm_1000\" is not an arch", "50..199"}},
    {{"tune", "--device", "-1"}, {"volt8 tune: --device -1 is not a valid device ordinal", "0..255"}},
    {{"tune", "--seed", "x"}, {"volt8 tune: --seed \"x\" is not a whole number", "0..2147483647"}},
    {{"tune", "--sets", "257"}, {"volt8 tune: --sets 257 is not a valid count of input sets", "1..256"}},
    {{"tune", "--screen", "0"}, {"volt8 tune: --screen 0 is not a valid count of timed passes", "1..10000"}},
    {{"tune", "--final", "10001"}, {"volt8 tune: --final 10001 is not a valid count of timed passes", "1..10000"}},
    {{"tune", "--finalists", "65"}, {"volt8 tune: --finalists 65 is not a valid count of finalists", "0..64"}},
    {{"tune", "--prune", "1001"}, {"volt8 tune: --prune 1001 is not a valid prune factor", "0..1000"}},
    {{"tune", "--skip-pruned", "2"}, {"volt8 tune: --skip-pruned 2 is not a valid switch", "0..1"}},
    {{"tune", "--resume", "-1"}, {"volt8 tune: --resume -1 is not a valid switch", "0..1"}},
    {{"tune", "--keep-within", "101"}, {"volt8 tune: --keep-within 101 is not a valid percent", "0..100"}},
    {{"tune", "--jobs", "0"}, {"volt8 tune: --jobs 0 is not a valid compile thread count", "1..256"}},
    {{"tune", "--log", ""}, {"volt8 tune: --log \"\" names no file"}},
    {{"tune", "--derive", "sm_80"}, {"volt8 tune: --derive \"sm_80\": only sm_70 has a model"}},
    {{"tune", "--derive", "sm_70", "--model-device", "a100"}, {"volt8 tune: --model-device \"a100\" is not a modelled device",
                                                             "v100, h200"}},
    {{"tune", "--model-device", "h200"}, {"volt8 tune: --model-device h200 needs --derive sm_70"}},
    {{"help", "frobnicate"}, {"volt8 help: unknown command \"frobnicate\""}},
    {{"version", "--bogus"}, {"volt8 version: unknown argument \"--bogus\""}},
};
#define BAD_ARGUMENT_COUNT (sizeof BAD_ARGUMENTS / sizeof BAD_ARGUMENTS[0])

/* `text` with each placeholder replaced by its path, into buf. */
static void substitute(const char *text, const char *paths[4][2], char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  while (*text && used + 1 < size) {
    int replaced = 0;
    for (int p = 0; p < 4 && !replaced; p++) {
      size_t length = strlen(paths[p][0]);
      if (strncmp(text, paths[p][0], length) == 0) {
        used += (size_t)snprintf(buf + used, size - used, "%s", paths[p][1]);
        text += length;
        replaced = 1;
      }
    }
    if (!replaced) buf[used++] = *text++, buf[used] = '\0';
  }
}

Test(cli_args, every_flag_of_every_command_refuses_a_bad_value_with_exit_2) {
  char root[256], ckpt[300], file[300], missing[300];
  test_make_temp_dir(root, sizeof root, "volt8-args");
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", root);
  snprintf(file, sizeof file, "%s/file", root);
  snprintf(missing, sizeof missing, "%s/missing", root);
  cr_assert(tiny_checkpoint_write(ckpt, 7), "cannot write a checkpoint into %s", ckpt);
  test_write_text(root, "file", "not a folder\n");
  const char *paths[4][2] = {{AT_CKPT, ckpt}, {AT_FILE, file}, {AT_MISSING, missing}, {AT_DIR, root}};
  int bench_built = is_built("bench"), tune_built = is_built("tune");
  for (size_t i = 0; i < BAD_ARGUMENT_COUNT; i++) {
    const bad_argument *row = &BAD_ARGUMENTS[i];
    if ((strcmp(row->args[0], "bench") == 0 && !bench_built) || (strcmp(row->args[0], "tune") == 0 && !tune_built))
      continue;
    static char args[12][512], said[3][512];
    char *argv[13] = {NULL};
    const char *expected[4] = {NULL};
    for (int a = 0; a < 12 && row->args[a]; a++) substitute(row->args[a], paths, args[a], sizeof args[a]), argv[a] = args[a];
    for (int s = 0; s < 3 && row->said[s]; s++) substitute(row->said[s], paths, said[s], sizeof said[s]), expected[s] = said[s];
    expect_refused(argv, expected);
  }
  test_remove_tree(root);
}

/* The table above names every flag each command's usage lists (a flag added without a bad-value case
 * fails here); flags that take no value and cannot be misused are the exceptions. */
Test(cli_args, the_bad_value_table_covers_every_flag_of_every_command) {
  static const char *const commands[] = {"demo", "models", "list", "compile", "plan", "bench", "tune"};
  static const char *const no_misuse = " --help --no-baselines --quick ";
  cli_result *result = malloc(sizeof *result);
  cr_assert_not_null(result);
  for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++) {
    if ((c >= 5) && !is_built(commands[c])) continue;
    VOLT8(result, "help", (char *)commands[c]);
    cr_assert_eq(result->status, 0, "volt8 help %s: %s", commands[c], result->err);
    /* the flags of the usage line ("  volt8 plan CKPT_DIR --tp N ...") and of the option lines of bench
     * and tune ("  --seed N --sets N     what they do"), not those their descriptions mention */
    char *synopsis = calloc(1, sizeof result->out);
    cr_assert_not_null(synopsis);
    for (const char *line = result->out; *line; line += strcspn(line, "\n") + (line[strcspn(line, "\n")] != '\0')) {
      size_t line_length = strcspn(line, "\n");
      if (strncmp(line, "  volt8 ", 8) != 0 && strncmp(line, "  --", 4) != 0) continue;
      const char *description = strncmp(line, "  --", 4) == 0 ? strstr(line + 2, "  ") : NULL;
      size_t kept = description && (size_t)(description - line) < line_length ? (size_t)(description - line) : line_length;
      strncat(synopsis, line, kept);
      strcat(synopsis, " ");
    }
    for (const char *at = strstr(synopsis, "--"); at; at = strstr(at + 2, "--")) {
      char flag[32];
      size_t length = 2 + strspn(at + 2, "abcdefghijklmnopqrstuvwxyz-");
      if (length == 2 || length >= sizeof flag || (at > synopsis && at[-1] != ' ' && at[-1] != '[' && at[-1] != '|'))
        continue;
      snprintf(flag, sizeof flag, "%.*s", (int)length, at);
      char padded[40];
      snprintf(padded, sizeof padded, " %s ", flag);
      if (strstr(no_misuse, padded)) continue;
      int covered = 0;
      for (size_t i = 0; i < BAD_ARGUMENT_COUNT && !covered; i++)
        for (int a = 1; a < 12 && BAD_ARGUMENTS[i].args[a] && !covered; a++)
          covered = strcmp(BAD_ARGUMENTS[i].args[0], commands[c]) == 0 && strcmp(BAD_ARGUMENTS[i].args[a], flag) == 0;
      cr_expect(covered, "volt8 %s %s has no bad-value case in BAD_ARGUMENTS", commands[c], flag);
    }
    free(synopsis);
  }
  free(result);
}

/* The README's commands run verbatim where the only NVRTC is 13 (none targets compute_70): the demo's
 * CPU half completes, one line says the kernels were not compiled and how to get an NVRTC that can,
 * and the demo exits 0; the kept checkpoint serves `volt8 plan`. */
Test(cli_args, demo_with_only_nvrtc_13_finishes_and_says_how_to_get_compute_70) {
  char parent[256], dir[300];
  test_make_temp_dir(parent, sizeof parent, "volt8-nvrtc13-demo");
  snprintf(dir, sizeof dir, "%s/cache", parent);
  setenv("VOLT8_CACHE_DIR", dir, 1); /* empty: nothing compiled earlier can stand in */
  struct stat info;
  setenv("VOLT8_NVRTC", stat(VOLT8_CUDA_NVRTC13, &info) == 0 ? VOLT8_CUDA_NVRTC13 : "/nonexistent/libnvrtc.so.13", 1);
  setenv("VOLT8_NVRTC_ONLY", "1", 1);
  snprintf(dir, sizeof dir, "%s/ckpt", parent);
  cli_result *result = malloc(sizeof *result);
  cr_assert_not_null(result);
  VOLT8(result, "demo", "--keep", dir);
  cr_assert_eq(result->status, 0, "volt8 demo exited %d:\n%s\n%s", result->status, result->out, result->err);
  cr_assert_str_empty(result->err, "the demo reported an error: %s", result->err);
  const char *line = strstr(result->out, "the sm_70 kernels were not compiled: no NVRTC found here targets compute_70 "
                                         "(volt8 doctor lists those tried). ");
  cr_assert_not_null(line, "no line says the kernels were not compiled:\n%s", result->out);
  const char *end = strchr(line, '\n');
  cr_assert(end && (size_t)(end - line) > strlen(volt8_nvrtc_compute70_advice) &&
                strncmp(end - strlen(volt8_nvrtc_compute70_advice), volt8_nvrtc_compute70_advice,
                        strlen(volt8_nvrtc_compute70_advice)) == 0,
            "the line does not end with the advice:\n%s", result->out);
  const char *after[] = {"reference forward on the CPU, M=8", "rejection sampler (CPU", "demo finished"};
  for (size_t i = 0; i < sizeof after / sizeof after[0]; i++)
    cr_assert(strstr(end, after[i]), "the CPU half stopped before \"%s\":\n%s", after[i], result->out);
  VOLT8(result, "plan", dir, "--tp", "4");
  cr_assert_eq(result->status, 0, "volt8 plan %s --tp 4 exited %d: %s", dir, result->status, result->err);
  free(result);
  test_remove_tree(parent);
}


/* A flag given twice is refused, exit 2, naming it, in every command: the last value used to win
 * silently (plan --tp 4 --tp 2 planned TP 2, bench --m 1 --m 8 ran M = 8 alone). A list gives each value
 * once too (list --choice 1,1 as bench --m 8,1,8). compile's and tune's --shape repeat by design. */
Test(cli_args, a_flag_given_twice_is_refused_naming_it) {
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--tp", "2"), "volt8 plan: --tp is given twice");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--json", "--json"), "volt8 plan: --json is given twice");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--top-k", "8", "--top-k", "8"), "volt8 plan: --top-k is given twice");
  REFUSED(ARGS("models", "--tp", "2", "--tp", "4"), "volt8 models: --tp is given twice");
  REFUSED(ARGS("list", "--choice", "1", "--choice", "8"), "volt8 list: --choice is given twice");
  REFUSED(ARGS("list", "--arch", "sm_70", "--arch", "sm_90"), "volt8 list: --arch is given twice");
  REFUSED(ARGS("list", "--resources", "--resources"), "volt8 list: --resources is given twice");
  REFUSED(ARGS("list", "--model", "reference", "--tp", "4", "--tp", "2"), "volt8 list: --tp is given twice");
  REFUSED(ARGS("list", "--choice", "1,1"), "volt8 list: --choice: lists 1 twice (items 1 and 2");
  REFUSED(ARGS("list", "--choice", "8,1,8"), "--choice: lists 8 twice (items 1 and 3");
  REFUSED(ARGS("compile", "--arch", "sm_70", "--arch", "sm_70", "--cache", "/nonexistent/volt8-cache"),
          "volt8 compile: --arch is given twice");
  REFUSED(ARGS("demo", "--model", "reference", "--model", "glm-4.5"), "volt8 demo: --model is given twice");
  REFUSED(ARGS("demo", "--keep", "--keep"), "volt8 demo: --keep is given twice");
  if (is_built("bench")) {
    REFUSED(ARGS("bench", "--m", "1", "--m", "8"), "volt8 bench: --m is given twice");
    REFUSED(ARGS("bench", "--quick", "--quick"), "volt8 bench: --quick is given twice");
    REFUSED(ARGS("bench", "--m", "8,1,8"), "--m: lists 8 twice");
  }
  if (is_built("tune")) {
    REFUSED(ARGS("tune", "--tp", "1", "--tp", "2"), "volt8 tune: --tp is given twice");
    REFUSED(ARGS("tune", "--tp", "1,2,1"), "--tp: lists 1 twice");
  }
}

/* One range for a value of one kind, whichever command reads it: TP sizes 1..64 (plan took 1..4096),
 * top-k 1..64 (plan took 1..65535), compile threads 1..256. */
Test(cli_args, a_value_of_one_kind_has_one_range_in_every_command) {
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "65"), "volt8 plan: --tp 65 is not a valid TP size", "1..64");
  REFUSED(ARGS("models", "--tp", "65"), "volt8 models: --tp 65 is not a valid TP size", "1..64");
  REFUSED(ARGS("list", "--model", "reference", "--tp", "65"), "volt8 list: --tp 65 is not a valid TP size", "1..64");
  REFUSED(ARGS("plan", NO_CKPT, "--tp", "4", "--top-k", "65"), "volt8 plan: --top-k 65 is not a valid top-k", "1..64");
  REFUSED(ARGS("list", "--choice", "1", "--top-k", "65"), "volt8 list: --top-k 65 is not a valid top-k", "1..64");
  REFUSED(ARGS("list", "--resources", "--jobs", "257"), "--jobs 257 is not a valid compile thread count", "1..256");
  if (is_built("bench")) {
    REFUSED(ARGS("bench", "--tp", "65"), "--tp 65 is not a valid TP size", "1..64");
    REFUSED(ARGS("bench", "--top-k", "65"), "--top-k 65 is not a valid top-k", "1..64");
  }
  if (is_built("tune")) {
    REFUSED(ARGS("tune", "--tp", "65"), "--tp: item 1, 65, is outside 1..64");
    REFUSED(ARGS("tune", "--tp", "1", "--top-k", "65"), "--top-k 65 is not a valid top-k", "1..64");
    REFUSED(ARGS("tune", "--tp", "1", "--jobs", "257"), "--jobs 257 is not a valid compile thread count", "1..256");
  }
}
