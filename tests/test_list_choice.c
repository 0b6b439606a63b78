/* `volt8 list --choice M,... [--tables DIR]`: the dispatch's pair per token count as the library
 * serves it, from the built-in tables, or from DIR's alone (how scripts/fallback_eval.py leaves a
 * shape's own tables out). No GPU. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_support.h"
#include "tools/tools.h"
#include "moe/kernels/moe_layout.h"

#define REFERENCE_TP4 "hidden=2560,intermediate=160,num_experts=512,intermediate_offset=32"
#define TABLE_PREFIX VOLT8_SOURCE_DIR "/tuning/tables/"
#define GATE_UP_TP4 "op=gate_up,N=320,K=2560,block=128x128,arch=sm_90,device=NVIDIA_H200.json"
#define GATE_UP_TP2 "op=gate_up,N=640,K=2560,block=128x128,arch=sm_90,device=NVIDIA_H200.json"

/* The variant a shipped table names at token count `m`. */
static char *table_variant(const char *name, const char *m) {
  char path[8192];
  snprintf(path, sizeof path, "%s%s", TABLE_PREFIX, name);
  size_t bytes = 0;
  char *text = test_read_whole(path, &bytes);
  cJSON *root = cJSON_Parse(text);
  cr_assert_not_null(root, "%s does not parse", name);
  cJSON *entry = cJSON_GetObjectItemCaseSensitive(root, m);
  cJSON *variant = cJSON_IsString(entry) ? entry : cJSON_GetObjectItemCaseSensitive(entry, "variant");
  cr_assert(cJSON_IsString(variant), "%s has no variant at M=%s", name, m);
  char *copy = strdup(variant->valuestring);
  cJSON_Delete(root);
  free(text);
  return copy;
}

/* The gate_up of `volt8 list ... --choice 1` ("1 GATE_UP DOWN"). */
static void gate_up_at_one(char *const *args, char out[128]) {
  char stdout_text[4096], stderr_text[4096];
  cr_assert_eq(test_run_volt8(args, stdout_text, sizeof stdout_text, stderr_text, sizeof stderr_text), 0, "%s",
               stderr_text);
  char down[128];
  cr_assert_eq(sscanf(stdout_text, "1 %127s %127s", out, down), 2, "%s", stdout_text);
  cr_assert(strncmp(down, "down.", 5) == 0, "%s", stdout_text);
}

static void copy_file(const char *from, const char *to) {
  size_t bytes = 0;
  char *text = test_read_whole(from, &bytes);
  FILE *stream = fopen(to, "wb");
  cr_assert(stream && fwrite(text, 1, bytes, stream) == bytes && fclose(stream) == 0, "cannot write %s", to);
  free(text);
}

Test(list_choice, built_in_tables_then_a_folder_alone, .timeout = 120) {
  char *tp4 = table_variant(GATE_UP_TP4, "1"), *tp2 = table_variant(GATE_UP_TP2, "1");
  cr_assert_str_neq(tp4, tp2, "the check needs two tables that differ at M=1");
  char served[128];
  char *built_in[] = {"list", "--arch", "sm_90", "--shape", REFERENCE_TP4, "--choice", "1,8,64", NULL};
  gate_up_at_one(built_in, served);
  cr_assert_str_eq(served, tp4, "the shape's own built-in table serves");

  /* The folder alone, holding the TP2 table's entries under the TP4 shape's name: the built-in TP4
   * table is ignored, the folder's serves. */
  char dir[4096], path[8192];
  test_make_temp_dir(dir, sizeof dir, "volt8_list_choice");
  snprintf(path, sizeof path, "%s/%s", dir, GATE_UP_TP4);
  copy_file(TABLE_PREFIX GATE_UP_TP2, path);
  char *from_folder[] = {"list", "--arch", "sm_90", "--shape", REFERENCE_TP4, "--choice", "1", "--tables", dir, NULL};
  gate_up_at_one(from_folder, served);
  cr_assert_str_eq(served, tp2, "the folder's table serves, not the built-in one");

  /* An empty folder: no table at all, the heuristic's one-row hmma at M=1 on sm_90. */
  remove(path);
  gate_up_at_one(from_folder, served);
  cr_assert(strncmp(served, "gate_up.hmma.bm1.", 17) == 0, "heuristic pick %s", served);
  test_remove_tree(dir);
  free(tp4);
  free(tp2);
}

Test(list_choice, bad_arguments_are_named, .timeout = 60) {
  char out[4096], err[4096];
  char *zero[] = {"list", "--choice", "1,0", NULL};
  cr_assert_eq(test_run_volt8(zero, out, sizeof out, err, sizeof err), 2);
  char expected[96];
  snprintf(expected, sizeof expected, "volt8 list: --choice: item 2, 0, is outside 1..%d", VOLT8_MAX_ROUTED_PAIRS / 10);
  cr_assert_not_null(strstr(err, expected), "%s", err);
  char *alone[] = {"list", "--tables", "/tmp", NULL};
  cr_assert_eq(test_run_volt8(alone, out, sizeof out, err, sizeof err), 2);
  cr_assert_not_null(strstr(err, "--top-k and --tables need --choice"), "%s", err);
  char *top_k[] = {"list", "--choice", "1", "--top-k", "65", NULL};
  cr_assert_eq(test_run_volt8(top_k, out, sizeof out, err, sizeof err), 2);
  cr_assert_not_null(strstr(err, "--top-k 65"), "%s", err);
}

/* A top-k of more experts than the shape has is a bad argument for every --choice; with --explain,
 * a shape outside the V100 model's domain (a rank of expert parallelism) is refused by the model
 * before any CUBIN is compiled. */
Test(list_choice, outside_the_models_domain_is_refused, .timeout = 60) {
  char out[4096], err[4096];
  char *top_k[] = {"list", "--shape", "num_experts=8", "--choice", "1", "--top-k", "16", NULL};
  cr_assert_eq(test_run_volt8(top_k, out, sizeof out, err, sizeof err), 2, "%s", err);
  cr_assert_not_null(strstr(err, "--top-k 16 is more than the shape's 8 experts"), "%s", err);
  cr_assert_str_empty(out);
  char *explained[] = {"list", "--shape", "num_experts=8", "--choice", "1,8", "--top-k", "9", "--explain", NULL};
  cr_assert_eq(test_run_volt8(explained, out, sizeof out, err, sizeof err), 2, "%s", err);
  cr_assert_not_null(strstr(err, "--top-k 9 is more than the shape's 8 experts"), "%s", err);
  char *by_default[] = {"list", "--shape", "num_experts=8", "--choice", "1", NULL};
  cr_assert_eq(test_run_volt8(by_default, out, sizeof out, err, sizeof err), 2, "%s", err);
  cr_assert_not_null(strstr(err, "--top-k 10 (the default) is more than the shape's 8 experts"), "%s", err);
  char *ep_rank[] = {"list", "--shape", REFERENCE_TP4 ",expert_start=512,global_experts=1024", "--choice", "1",
                     "--explain", NULL};
  int status = test_run_volt8(ep_rank, out, sizeof out, err, sizeof err);
  cr_assert_str_empty(out);
  if (strstr(err, "this build has no derivation model")) return; /* built without bench/ (the sanitized build) */
  cr_assert_eq(status, 2, "%s", err);
  cr_assert_not_null(strstr(err, "volt8 list: --explain: the derivation model is not defined here: the shape holds "
                                 "experts [512, 1024) of 1024"), "%s", err);
}

/* The reader of every list: single commas between whole numbers in decimal digits, each in
 * 1..max_m; every other text refused, naming the flag, the item and why. */
Test(list_choice, token_counts_parse_strictly) {
  int32_t values[8], count = 0;
  char error[512];
  cr_assert_eq(volt8_tools_flag_number_list("--choice", "1,8,64", "token count", 1, 64, values, 8, error, sizeof error),
               3, "%s", error);
  cr_assert(values[0] == 1 && values[1] == 8 && values[2] == 64);
  const struct {
    const char *text;
    int32_t max_m;
    const char *why;
  } refused[] = {{"", 64, "names no token count"},
                 {"1,,8", 64, "item 2 is empty"},
                 {",1", 64, "item 1 is empty"},
                 {"1,", 64, "item 2 is empty"},
                 {"1,65", 64, "item 2, 65, is outside 1..64"},
                 {"0", 64, "item 1, 0, is outside 1..64"},
                 {"+8", 64, "item 1, \"+8\", is not a whole number in decimal digits"},
                 {" 8", 64, "item 1, \" 8\", is not a whole number in decimal digits"},
                 {"8 ", 64, "item 1, \"8 \", is not a whole number in decimal digits"},
                 {"-1", 64, "item 1, \"-1\", is not a whole number in decimal digits"},
                 {"0x10", 64, "item 1, \"0x10\", is not a whole number in decimal digits"},
                 {"1;2", 64, "item 1, \"1;2\", is not a whole number in decimal digits"},
                 {"08", 64, "item 1, \"08\", has a leading zero"},
                 {"99999999999999999999999", 64, "item 1, 99999999999999999999999, is outside 1..64"},
                 {"4294967297", 65535, "item 1, 4294967297, is outside 1..65535"},
                 {"1,2,3,4,5,6,7,8,9", 64, "lists more than 8 token counts"}};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char expected[512];
    snprintf(expected, sizeof expected, "--choice: %s (token counts are whole numbers in 1..%d separated by single commas)",
             refused[i].why, refused[i].max_m);
    cr_assert_eq(volt8_tools_flag_number_list("--choice", refused[i].text, "token count", 1, refused[i].max_m, values,
                                              8, error, sizeof error),
                 -1, "\"%s\"", refused[i].text);
    cr_assert_str_eq(error, expected, "\"%s\"", refused[i].text);
  }
  /* the token counts of a forward: the bound and its reason come from the routed-pair limit */
  char text[32], expected[512];
  snprintf(text, sizeof text, "1,%d", VOLT8_MAX_ROUTED_PAIRS / 16 + 1);
  cr_assert_eq(volt8_tools_flag_token_counts("--m", text, 16, values, 8, error, sizeof error), -1);
  snprintf(expected, sizeof expected, "--m: item 2, %d, is outside 1..%d (token counts are whole numbers in 1..%d "
           "separated by single commas; a forward takes at most %d routed pairs: %d tokens at top-k 16)",
           VOLT8_MAX_ROUTED_PAIRS / 16 + 1, VOLT8_MAX_ROUTED_PAIRS / 16, VOLT8_MAX_ROUTED_PAIRS / 16,
           VOLT8_MAX_ROUTED_PAIRS, VOLT8_MAX_ROUTED_PAIRS / 16);
  cr_assert_str_eq(error, expected);
  snprintf(text, sizeof text, "1,%d", VOLT8_MAX_ROUTED_PAIRS / 16);
  cr_assert_eq(volt8_tools_flag_token_counts("--m", text, 16, values, 8, error, sizeof error), 2, "%s", error);
  cr_assert_eq(values[1], VOLT8_MAX_ROUTED_PAIRS / 16);
  /* no limit on the text: 20000 counts, 108894 characters, each count once */
  size_t length = 6 * 20000, used = 0;
  char *long_text = malloc(length);
  for (int i = 0; i < 20000; i++) used += (size_t)snprintf(long_text + used, length - used, "%s%d", i ? "," : "", 20000 - i);
  cr_assert_eq(volt8_tools_list_length(long_text), 20000);
  int32_t *many = malloc(20000 * sizeof *many);
  count = volt8_tools_flag_number_list("--choice", long_text, "token count", 1, 65535, many, 20000, error, sizeof error);
  cr_assert(count == 20000 && many[0] == 20000 && many[19999] == 1, "%d: %s", count, error);
  /* ... and a count given twice, anywhere in it, is named with its places */
  memcpy(long_text + used - 1, "7", 1); /* the last count, 1, becomes 7 */
  count = volt8_tools_flag_number_list("--choice", long_text, "token count", 1, 65535, many, 20000, error, sizeof error);
  cr_assert(count == -1 && strstr(error, "--choice: lists 7 twice (items 19994 and 20000; each token count once)"),
            "%d: %s", count, error);
  free(many);
  free(long_text);
}

/* `--choice` takes what a forward takes, M x top-k <= the library's routed-pair bound (not 2^20,
 * as before); a text of 256 characters or more is read whole (before, it "named no token count"). */
Test(list_choice, token_counts_within_the_librarys_bound, .timeout = 60) {
  char out[16384], err[4096], text[1024];
  int32_t at_top10 = VOLT8_MAX_ROUTED_PAIRS / 10;
  snprintf(text, sizeof text, "1,%d", at_top10);
  char *largest[] = {"list", "--choice", text, NULL};
  cr_assert_eq(test_run_volt8(largest, out, sizeof out, err, sizeof err), 0, "%s", err);
  char expected[64];
  snprintf(expected, sizeof expected, "\n%d gate_up.", at_top10);
  cr_assert_not_null(strstr(out, expected), "%s", out);
  snprintf(text, sizeof text, "1,%d", at_top10 + 1);
  cr_assert_eq(test_run_volt8(largest, out, sizeof out, err, sizeof err), 2, "%s", out);
  snprintf(expected, sizeof expected, "is outside 1..%d", at_top10);
  cr_assert_not_null(strstr(err, expected), "%s", err);
  snprintf(expected, sizeof expected, "at most %d routed pairs: %d tokens at top-k 10", VOLT8_MAX_ROUTED_PAIRS, at_top10);
  cr_assert_not_null(strstr(err, expected), "%s", err);
  char all_pairs[16], one_more[16];
  snprintf(all_pairs, sizeof all_pairs, "%d", VOLT8_MAX_ROUTED_PAIRS);
  snprintf(one_more, sizeof one_more, "%d", VOLT8_MAX_ROUTED_PAIRS + 1);
  char *top1[] = {"list", "--choice", all_pairs, "--top-k", "1", NULL};
  cr_assert_eq(test_run_volt8(top1, out, sizeof out, err, sizeof err), 0, "%s", err);
  char *beyond[] = {"list", "--choice", one_more, "--top-k", "1", NULL};
  cr_assert_eq(test_run_volt8(beyond, out, sizeof out, err, sizeof err), 2);
  snprintf(expected, sizeof expected, "item 1, %d, is outside 1..%d", VOLT8_MAX_ROUTED_PAIRS + 1, VOLT8_MAX_ROUTED_PAIRS);
  cr_assert_not_null(strstr(err, expected), "%s", err);

  /* 150 counts, 299 characters */
  size_t used = 0;
  for (int i = 0; i < 150; i++) used += (size_t)snprintf(text + used, sizeof text - used, "%s%d", i ? "," : "", 1 + i);
  cr_assert_gt(used, 256);
  char *long_text[] = {"list", "--choice", text, NULL};
  cr_assert_eq(test_run_volt8(long_text, out, sizeof out, err, sizeof err), 0, "%s", err);
  int lines = 0;
  for (const char *c = out; *c; c++) lines += *c == '\n';
  cr_assert_eq(lines, 150, "%s", out);
  snprintf(text + used, sizeof text - used, ",x");
  cr_assert_eq(test_run_volt8(long_text, out, sizeof out, err, sizeof err), 2);
  cr_assert_not_null(strstr(err, "item 151, \"x\", is not a whole number"), "%s", err);
}

/* Every tuning warning of the lookups is printed: a broken table of the shape's own in --tables DIR
 * (the heuristic serves), a $VOLT8_TUNING_DIR that is not a folder. --tables that names no folder
 * is a bad argument. */
Test(list_choice, tuning_warnings_are_printed, .timeout = 60) {
  char dir[4096], path[8192], out[4096], err[16384];
  test_make_temp_dir(dir, sizeof dir, "volt8_list_warnings");
  test_write_text(dir, "op=gate_up,N=320,K=2560,block=128x128,arch=sm_90,device=any.json", "{\"__metadata__\": ");
  char *broken[] = {"list", "--arch", "sm_90", "--shape", REFERENCE_TP4, "--choice", "1,8", "--tables", dir, NULL};
  cr_assert_eq(test_run_volt8(broken, out, sizeof out, err, sizeof err), 0, "%s", err);
  cr_assert(strncmp(out, "1 gate_up.", 10) == 0, "%s", out);
  snprintf(path, sizeof path, "volt8 list: warning: %s/op=gate_up,N=320,K=2560,block=128x128,arch=sm_90,device=any.json: "
           "tuning table is not valid JSON", dir);
  cr_assert_not_null(strstr(err, path), "%s", err);
  cr_assert_not_null(strstr(err, "volt8 list: warning: no tuning table op=down,N=2560,K=160,"), "%s", err);

  snprintf(path, sizeof path, "%s/missing", dir);
  setenv("VOLT8_TUNING_DIR", path, 1);
  char *env_dir[] = {"list", "--arch", "sm_90", "--shape", REFERENCE_TP4, "--choice", "1", NULL};
  cr_assert_eq(test_run_volt8(env_dir, out, sizeof out, err, sizeof err), 0, "%s", err);
  unsetenv("VOLT8_TUNING_DIR");
  char expected[8400];
  snprintf(expected, sizeof expected, "volt8 list: warning: VOLT8_TUNING_DIR=%s is not a directory (No such file", path);
  cr_assert_not_null(strstr(err, expected), "%s", err);

  char fifo[8192];
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  snprintf(path, sizeof path, "%s/op=gate_up,N=320,K=2560,block=128x128,arch=sm_90,device=any.json", dir);
  const char *not_folders[3] = {"/nonexistent/volt8-tables", path, fifo};
  const char *whys[3] = {"No such file or directory", "Not a directory", "Not a directory"};
  for (int i = 0; i < 3; i++) {
    char *bad[] = {"list", "--choice", "1", "--tables", (char *)not_folders[i], NULL};
    cr_assert_eq(test_run_volt8(bad, out, sizeof out, err, sizeof err), 2, "%s: %s", not_folders[i], err);
    snprintf(expected, sizeof expected, "volt8 list: --tables %s: %s", not_folders[i], whys[i]);
    cr_assert_not_null(strstr(err, expected), "%s", err);
    cr_assert_str_empty(out);
  }
  test_remove_tree(dir);
}
