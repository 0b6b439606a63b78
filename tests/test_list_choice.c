/* `volt8 list --choice M,... [--tables DIR]`: the dispatch's pair per token count as the library
 * serves it, from the built-in tables, or from DIR's alone (how scripts/fallback_eval.py leaves a
 * shape's own tables out). No GPU. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

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

  /* Only the TP2 table in the folder: the built-in TP4 one is ignored, the nearest (TP2) serves. */
  char dir[4096], path[8192];
  test_make_temp_dir(dir, sizeof dir, "volt8_list_choice");
  snprintf(path, sizeof path, "%s/%s", dir, GATE_UP_TP2);
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
  cr_assert_not_null(strstr(err, "--choice 0 is not a valid token count"), "%s", err);
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
  cr_assert_eq(test_run_volt8(ep_rank, out, sizeof out, err, sizeof err), 2, "%s", err);
  cr_assert_not_null(strstr(err, "volt8 list: --explain: the derivation model is not defined here: the shape holds "
                                 "experts [512, 1024) of 1024"), "%s", err);
  cr_assert_str_empty(out);
}
