/* What `volt8 doctor` reads from the library (NVRTC candidates, the kernel cache, the tuning tables, the
 * library's path) and the command itself on a machine without a GPU. */
#include <criterion/criterion.h>

#include <dlfcn.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_support.h"
#include "volt8.h"
#include "core/embedded_files.h"
#include "dispatch/tuning.h"
#include "jit/cache.h"

TestSuite(doctor, .timeout = 60);

static char scratch[256];

static void make_scratch(void) { test_make_temp_dir(scratch, sizeof scratch, "volt8-doctor"); }
static void remove_scratch(void) { test_remove_tree(scratch); }

static volt8_nvrtc_candidate candidate_at(volt8_ctx *ctx, int32_t index) {
  volt8_nvrtc_candidate candidate = VOLT8_NVRTC_CANDIDATE_INIT;
  cr_assert_eq(volt8_nvrtc_candidate_get(ctx, index, &candidate), VOLT8_OK, "%s", volt8_last_error(ctx));
  return candidate;
}

/* Every path tried is listed in search order with what became of it; the one serving compute_70 is
 * the .venv's NVRTC 12 that CTest hands over (where there is one). */
Test(doctor, nvrtc_candidates_are_listed_in_search_order_with_their_outcome, .init = make_scratch,
     .fini = remove_scratch) {
  const char *venv_dirs = getenv("VOLT8_NVRTC_DIRS");
  char dirs[4096];
  snprintf(dirs, sizeof dirs, "%s%s%s", scratch, venv_dirs && *venv_dirs ? ":" : "", venv_dirs ? venv_dirs : "");
  setenv("VOLT8_NVRTC_DIRS", dirs, 1);
  setenv("VOLT8_NVRTC", "/nonexistent/volt8-doctor/libnvrtc.so.12", 1);
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  int32_t count = 0, dropped = -1;
  cr_assert_eq(volt8_nvrtc_candidate_count(ctx, &count, &dropped), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert(count >= 5 && dropped == 0, "count %d, dropped %d", count, dropped);
  volt8_nvrtc_candidate first = candidate_at(ctx, 0);
  cr_assert_str_eq(first.path, "/nonexistent/volt8-doctor/libnvrtc.so.12");
  cr_assert_str_eq(first.origin, "VOLT8_NVRTC");
  cr_assert(!first.usable && strstr(first.outcome, "cannot open: No such file"), "%s", first.outcome);
  char expected[512];
  snprintf(expected, sizeof expected, "%s/libnvrtc.so.12", scratch);
  volt8_nvrtc_candidate second = candidate_at(ctx, 1);
  cr_assert_str_eq(second.path, expected);
  cr_assert_str_eq(second.origin, "VOLT8_NVRTC_DIRS");
  cr_assert_str_eq(second.outcome, "no such file");
  const char *order[] = {"VOLT8_NVRTC", "VOLT8_NVRTC_DIRS", "system search", "CUDA_HOME", "CUDA toolkit of the build"};
  size_t place = 0;
  for (int32_t i = 0; i < count; i++) {
    volt8_nvrtc_candidate candidate = candidate_at(ctx, i);
    while (place < sizeof order / sizeof order[0] && strcmp(candidate.origin, order[place]) != 0) place++;
    cr_assert(place < sizeof order / sizeof order[0], "candidate %d (%s) from %s is out of order", i, candidate.path,
              candidate.origin);
    cr_assert_eq(candidate.usable, candidate.version[0] != '\0', "%s", candidate.path);
    cr_assert_eq(candidate.usable, candidate.num_archs > 0, "%s", candidate.path);
  }
  int32_t index = -1;
  volt8_status status = volt8_nvrtc_candidate_for_arch(ctx, 70, &index);
  if (status == VOLT8_OK) {
    volt8_nvrtc_candidate serving = candidate_at(ctx, index);
    cr_assert(serving.usable && strncmp(serving.version, "12.", 3) == 0, "%s %s", serving.path, serving.version);
    int lists_70 = 0;
    for (int32_t a = 0; a < serving.num_archs; a++) lists_70 |= serving.archs[a] == 70;
    cr_assert(lists_70, "%s serves compute_70 but does not list it", serving.path);
    for (int32_t i = 0; i < index; i++) {
      volt8_nvrtc_candidate before = candidate_at(ctx, i);
      for (int32_t a = 0; a < before.num_archs; a++)
        cr_assert_neq(before.archs[a], 70, "%s lists compute_70 and comes first", before.path);
    }
  } else {
    cr_assert_eq(status, VOLT8_ERR_ARCH_UNSUPPORTED);
    cr_assert_eq(index, -1);
  }
  cr_assert_eq(volt8_nvrtc_candidate_for_arch(ctx, 30, &index), VOLT8_ERR_ARCH_UNSUPPORTED);
  cr_assert(strstr(volt8_last_error(ctx), "no NVRTC can compile for compute_30"), "%s", volt8_last_error(ctx));
  cr_assert_eq(volt8_nvrtc_candidate_get(ctx, count, &first), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(ctx), "outside 0.."), "%s", volt8_last_error(ctx));
  volt8_ctx_destroy(ctx);
}

/* An older caller's shorter struct is written no further than its size. */
Test(doctor, a_shorter_candidate_struct_is_not_written_past_its_size) {
  setenv("VOLT8_NVRTC", "/nonexistent/volt8-doctor/libnvrtc.so.12", 1);
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  volt8_nvrtc_candidate candidate;
  memset(&candidate, 0x5a, sizeof candidate);
  candidate.size = offsetof(volt8_nvrtc_candidate, origin);
  cr_assert_eq(volt8_nvrtc_candidate_get(ctx, 0, &candidate), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_str_eq(candidate.path, "/nonexistent/volt8-doctor/libnvrtc.so.12");
  cr_assert_eq((unsigned char)candidate.origin[0], 0x5a, "written past the caller's size");
  candidate.size = 0;
  cr_assert_eq(volt8_nvrtc_candidate_get(ctx, 0, &candidate), VOLT8_ERR_INVALID_ARGUMENT);
  volt8_ctx_destroy(ctx);
}

static volt8_cache_report cache_report_of(const char *dir) {
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.cache_dir = dir;
  volt8_ctx *ctx = NULL;
  cr_assert_eq(volt8_ctx_create(&options, &ctx), VOLT8_OK, "%s", volt8_last_error(NULL));
  volt8_cache_report report = VOLT8_CACHE_REPORT_INIT;
  cr_assert_eq(volt8_cache_report_get(ctx, &report), VOLT8_OK, "%s", volt8_last_error(ctx));
  volt8_ctx_destroy(ctx);
  return report;
}

static int64_t file_bytes(const char *path) {
  struct stat info;
  cr_assert_eq(stat(path, &info), 0, "stat %s", path);
  return info.st_size;
}

Test(doctor, the_cache_report_counts_entries_and_bytes_and_says_if_it_can_be_written, .init = make_scratch,
     .fini = remove_scratch) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/cache", scratch);
  volt8_cache_report report = cache_report_of(dir);
  cr_assert_str_eq(report.dir, dir);
  cr_assert(!report.exists && report.writable && report.entries == 0 && report.bytes == 0, "%s", report.note);

  volt8_cache_inputs first = {"k1", "source one", 70, VOLT8_IMAGE_PTX, NULL, 0};
  volt8_cache_inputs second = {"k2", "source two", 90, VOLT8_IMAGE_PTX, NULL, 0};
  cr_assert_eq(volt8_cache_store(dir, &first, "12.9", "ptx one", 8), VOLT8_OK);
  cr_assert_eq(volt8_cache_store(dir, &second, "13.0", "ptx two!", 9), VOLT8_OK);
  test_write_text(dir, "tmp/volt8-123.0123456789abcdef", "half an entry"); /* a killed publish's */
  /* what is not the cache's: other files in tmp/ and below it (--cache $HOME makes ~/tmp its temp
   * folder), and files and links under v1/ outside the layout's places */
  char below[600];
  snprintf(below, sizeof below, "%s/tmp/deep", dir);
  cr_assert_eq(mkdir(below, 0755), 0);
  snprintf(below, sizeof below, "%s/tmp/deep/er", dir);
  cr_assert_eq(mkdir(below, 0755), 0);
  test_write_text(below, "volt8-1.0123456789abcdef", "not at the temp files' place");
  test_write_text(below, "big.iso", "a user's file, of any size");
  test_write_text(dir, "tmp/123.leftover", "a user's file");
  char *paths[] = {volt8_cache_entry_path(dir, &first, "12.9"), volt8_cache_entry_path(dir, &second, "13.0")};
  char *folder = strdup(paths[0]);
  *strrchr(folder, '/') = '\0';
  test_write_text(folder, "notes.txt", "not an entry");
  test_write_text(folder, "0000000000000000000000000000000000000000000000000000000000000000.entry.bak", "no");
  char link[700];
  snprintf(link, sizeof link, "%s/%064d.entry", folder, 1);
  cr_assert_eq(symlink(paths[0], link), 0);
  test_write_text(dir, "v1/README.entry", "not at an entry's place");
  char temp[600];
  snprintf(temp, sizeof temp, "%s/tmp/volt8-123.0123456789abcdef", dir);
  int64_t bytes = file_bytes(paths[0]) + file_bytes(paths[1]) + file_bytes(temp);
  report = cache_report_of(dir);
  cr_assert(report.exists && report.writable, "%s", report.note);
  cr_assert_eq(report.entries, 2);
  cr_assert_eq(report.bytes, bytes, "%lld bytes reported, %lld of the cache's own", (long long)report.bytes,
               (long long)bytes);
  free(folder);
  free(paths[0]);
  free(paths[1]);

  char file[512];
  snprintf(file, sizeof file, "%s/not-a-folder", scratch);
  test_write_text(scratch, "not-a-folder", "x");
  report = cache_report_of(file);
  cr_assert(!report.exists && !report.writable, "a regular file was taken for a cache folder");
  cr_assert(strstr(report.note, "is a regular file, not a folder"), "%s", report.note);
  snprintf(file, sizeof file, "%s/not-a-folder/below", scratch);
  report = cache_report_of(file);
  cr_assert(!report.writable && strstr(report.note, "not-a-folder is a regular file"), "%s", report.note);
}

Test(doctor, a_disabled_cache_is_reported_with_why) {
  setenv("VOLT8_CACHE_DISABLE", "1", 1);
  volt8_cache_report report = cache_report_of(NULL);
  cr_assert_str_empty(report.dir);
  cr_assert(strstr(report.note, "disabled"), "%s", report.note);
}

/* Writes a table named `name` into dir holding `entries` token counts of `op`. */
static void write_table(const char *dir, const char *name, const char *op, int entries) {
  char text[1024];
  int used = snprintf(text, sizeof text, "{\"__metadata__\": {\"schema_version\": 1, \"measured\": true, \"top_k\": 8}");
  for (int m = 1; m <= entries; m++)
    used += snprintf(text + used, sizeof text - (size_t)used, ", \"%d\": \"%s.cc.bm1.bn4.w4.sk1.l32\"", m, op);
  snprintf(text + used, sizeof text - (size_t)used, "}");
  test_write_text(dir, name, text);
}

static int32_t built_in_tables(int32_t arch) {
  char suffix[32];
  snprintf(suffix, sizeof suffix, "arch=sm_%d,device=any.json", (int)arch);
  int32_t count = 0;
  for (const volt8_embedded_file *file = volt8_embedded_files; file->path; file++)
    count += strncmp(file->path, VOLT8_TUNING_BUILT_IN_PREFIX, strlen(VOLT8_TUNING_BUILT_IN_PREFIX)) == 0 &&
             strstr(file->path, suffix) != NULL;
  return count;
}

/* VOLT8_TUNING_DIR's tables for the arch and this device (or any) come first by name, then the
 * built-in ones; others are left out; a broken one is listed with why the lookup skips it. */
Test(doctor, tuning_tables_are_listed_in_lookup_order_with_what_they_hold, .init = make_scratch,
     .fini = remove_scratch) {
  write_table(scratch, "op=gate_up,N=320,K=2560,block=128x128,arch=sm_70,device=any.json", "gate_up", 3);
  test_write_text(scratch, "op=down,N=2560,K=160,block=128x128,arch=sm_70,device=Tesla_V100-SXM2-16GB.json", "{oops");
  write_table(scratch, "op=down,N=2560,K=160,block=128x128,arch=sm_90,device=any.json", "down", 2);
  write_table(scratch, "op=down,N=2560,K=160,block=128x128,arch=sm_70,device=NVIDIA_H200.json", "down", 2);
  write_table(scratch, "op=down,N=02560,K=160,block=128x128,arch=sm_70,device=any.json", "down", 2);
  test_write_text(scratch, "notes.txt", "not a table");
  setenv("VOLT8_TUNING_DIR", scratch, 1);
  int32_t count = 0, built_in = built_in_tables(70);
  cr_assert_eq(volt8_tuning_table_count(70, "Tesla V100-SXM2-16GB", &count), VOLT8_OK, "%s", volt8_last_error(NULL));
  cr_assert_eq(count, 2 + built_in, "%d tables listed, %d built in", count, built_in);
  volt8_tuning_table_info broken = VOLT8_TUNING_TABLE_INFO_INIT, good = VOLT8_TUNING_TABLE_INFO_INIT,
                          last = VOLT8_TUNING_TABLE_INFO_INIT;
  cr_assert_eq(volt8_tuning_table_get(70, "Tesla V100-SXM2-16GB", 0, &broken), VOLT8_OK);
  cr_assert_eq(volt8_tuning_table_get(70, "Tesla V100-SXM2-16GB", 1, &good), VOLT8_OK);
  cr_assert_eq(volt8_tuning_table_get(70, "Tesla V100-SXM2-16GB", count - 1, &last), VOLT8_OK);
  cr_assert(!broken.built_in && !broken.valid && strstr(broken.origin, scratch) &&
                strcmp(broken.device, "Tesla_V100-SXM2-16GB") == 0 && strstr(broken.problem, broken.origin),
            "%s: %s", broken.origin, broken.problem);
  cr_assert(good.valid && !good.built_in && strcmp(good.op, "gate_up") == 0 && good.n == 320 && good.k == 2560 &&
                good.block_n == 128 && good.arch == 70 && strcmp(good.device, "any") == 0,
            "%s", good.origin);
  cr_assert(good.token_counts == 3 && good.measured == 1 && good.top_k == 8 && good.problem[0] == '\0', "%s", good.problem);
  cr_assert(good.m_min == 1 && good.m_max == 3 && broken.m_min == 0 && broken.m_max == 0, "M %d..%d, broken %d..%d",
            good.m_min, good.m_max, broken.m_min, broken.m_max);
  cr_assert(last.built_in && last.valid && strncmp(last.origin, "built-in:tuning/tables/", 23) == 0, "%s", last.origin);
  cr_assert_eq(volt8_tuning_table_count(70, NULL, &count), VOLT8_OK);
  cr_assert_eq(count, 1 + built_in, "device=any only: %d", count);
  cr_assert_eq(volt8_tuning_table_get(70, NULL, count, &last), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(NULL), "outside 0.."), "%s", volt8_last_error(NULL));
}

/* The ranks the tables cover, with the M they hold: once after the TP list where every TP holds the
 * same, after each TP where they differ (a table of large M alone at GLM-4.5 TP3, gate_up only). */
Test(doctor, the_covered_ranks_say_the_m_their_tables_hold, .init = make_scratch, .fini = remove_scratch) {
  setenv("VOLT8_DISABLE_CUDA", "1", 1);
  test_write_text(scratch, "op=gate_up,N=1024,K=5120,block=128x128,arch=sm_70,device=any.json",
                  "{\"__metadata__\": {\"schema_version\": 1, \"top_k\": 8}, \"256\": \"gate_up.cc.bm1.bn4.w4.sk1.l32\", "
                  "\"512\": \"gate_up.cc.bm1.bn4.w4.sk1.l32\"}");
  setenv("VOLT8_TUNING_DIR", scratch, 1);
  static char out[65536], err[16384];
  int status = test_run_volt8((char *[]){"doctor", NULL}, out, sizeof out, err, sizeof err);
  unsetenv("VOLT8_TUNING_DIR");
  cr_assert_eq(status, 0, "volt8 doctor exited %d:\n%s\n%s", status, out, err);
  cr_assert(strstr(out, "      glm-4.5      TP 1 (M = 1..16384) 2 (M = 1..16384) 3 (gate_up only) (M = 256..512) 4 (M = "
                        "1..16384) 8 (M = 1..16384)\n"),
            "%s", out);
  cr_assert(strstr(out, "      reference    TP 1 2 4 8, M = 1..16384\n"), "%s", out);
}

/* The library names its own file: the program it is linked into, or libvolt8.so. */
Test(doctor, the_library_path_is_the_program_it_is_linked_into) {
  char path[PATH_MAX], program[PATH_MAX];
  cr_assert_eq(volt8_library_path(path, sizeof path), VOLT8_OK, "%s", volt8_last_error(NULL));
  cr_assert_not_null(realpath("/proc/self/exe", program));
  cr_assert_str_eq(path, program);
  cr_assert_eq(volt8_library_path(path, 4), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(NULL), "does not fit in 4 bytes"), "%s", volt8_last_error(NULL));
}

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED_BUILD 1
#endif
#endif

Test(doctor, the_shared_library_names_itself) {
#ifdef SANITIZED_BUILD
  cr_skip_test("the shared library carries the shared ASan runtime, which this statically sanitized program "
               "cannot load (the plain run covers it)");
#endif
  char path[PATH_MAX];
  void *shared = dlopen(VOLT8_SHARED_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(shared, "%s", dlerror());
  volt8_status (*shared_path)(char *, size_t);
  *(void **)&shared_path = dlsym(shared, "volt8_library_path");
  cr_assert_not_null(shared_path);
  char expected[PATH_MAX];
  cr_assert_not_null(realpath(VOLT8_SHARED_LIBRARY, expected));
  cr_assert_eq(shared_path(path, sizeof path), VOLT8_OK);
  cr_assert_str_eq(path, expected);
  cr_assert_eq(shared_path(path, 4), VOLT8_ERR_INVALID_ARGUMENT);
  dlclose(shared);
}

/* `volt8 doctor` without a GPU: every section, in order, and exit 0; an argument is refused. */
Test(doctor, the_command_reports_every_section_without_a_gpu, .init = make_scratch, .fini = remove_scratch) {
  setenv("VOLT8_DISABLE_CUDA", "1", 1);
  char cache[512];
  snprintf(cache, sizeof cache, "%s/cache", scratch);
  setenv("VOLT8_CACHE_DIR", cache, 1);
  static char out[65536], err[16384];
  int status = test_run_volt8((char *[]){"doctor", NULL}, out, sizeof out, err, sizeof err);
  cr_assert_eq(status, 0, "volt8 doctor exited %d:\n%s\n%s", status, out, err);
  char cache_line[600];
  snprintf(cache_line, sizeof cache_line, "kernel cache: %s: not made yet, 0 entries, 0.0 MiB, writable", cache);
  const char *sections[] = {"volt8 doctor\n", "library: volt8 ", "driver: none (the CUDA driver is disabled by VOLT8_DISABLE_CUDA=1)",
                            "GPUs: none", "NVRTC candidates, in search order", "  [0] ", "  compute_70 (", cache_line,
                            "tuning tables (", "  no GPU; those a V100 reads (sm_70, device=any):",
                            "      reference    TP 1 2 4 8, M = 1..16384", "torch: ", "verdict: no GPU here"};
  const char *at = out;
  for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
    const char *found = strstr(at, sections[i]);
    cr_assert_not_null(found, "\"%s\" missing or out of order:\n%s", sections[i], out);
    at = found;
  }
  status = test_run_volt8((char *[]){"doctor", "--bogus", NULL}, out, sizeof out, err, sizeof err);
  cr_assert_eq(status, 2, "%s", err);
  cr_assert(strstr(err, "volt8 doctor: unknown argument \"--bogus\""), "%s", err);
}

/* A $VOLT8_TUNING_DIR that serves no table (a file, a FIFO, a missing path) is said in the report, as
 * `volt8 list` says it, and not counted as "0 from VOLT8_TUNING_DIR" alone. */
Test(doctor, a_tuning_dir_that_serves_nothing_is_a_warning_in_the_report, .init = make_scratch,
     .fini = remove_scratch) {
  setenv("VOLT8_DISABLE_CUDA", "1", 1);
  setenv("VOLT8_CACHE_DISABLE", "1", 1);
  char file[512], fifo[512], missing[512];
  test_write_text(scratch, "plain", "{}");
  snprintf(file, sizeof file, "%s/plain", scratch);
  snprintf(fifo, sizeof fifo, "%s/fifo", scratch);
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  snprintf(missing, sizeof missing, "%s/missing", scratch);
  const char *dirs[] = {file, fifo, missing};
  const char *whys[] = {"is not a directory (it is a regular file)", "is not a directory (it is a FIFO)",
                        "is not a directory (No such file or directory)"};
  for (size_t i = 0; i < 3; i++) {
    setenv("VOLT8_TUNING_DIR", dirs[i], 1);
    static char out[65536], err[16384];
    int status = test_run_volt8((char *[]){"doctor", NULL}, out, sizeof out, err, sizeof err);
    cr_assert_eq(status, 0, "volt8 doctor exited %d:\n%s\n%s", status, out, err);
    char expected[1200];
    snprintf(expected, sizeof expected, "  warning: VOLT8_TUNING_DIR=%s %s: no table is read from it\n", dirs[i],
             whys[i]);
    const char *tables = strstr(out, "tuning tables (");
    cr_assert(tables && strstr(tables, expected), "no \"%s\" in the tables' section:\n%s", expected, out);
  }
}

/* The listing's own check: a folder this process may not list is a warning too (checked in a child
 * that runs as another user when this is root, which lists any folder). */
Test(doctor, an_unreadable_tuning_dir_is_a_warning, .init = make_scratch, .fini = remove_scratch) {
  char locked[512];
  snprintf(locked, sizeof locked, "%s/locked", scratch);
  cr_assert_eq(mkdir(locked, 0755), 0);
  test_write_text(locked, "op=down,N=2560,K=160,block=128x128,arch=sm_70,device=any.json", "{}");
  cr_assert_eq(chmod(locked, 0), 0);
  cr_assert_eq(chmod(scratch, 0755), 0);
  int channel[2];
  cr_assert_eq(pipe(channel), 0);
  pid_t child = fork();
  cr_assert_neq(child, -1);
  if (child == 0) {
    close(channel[0]);
    char text[4096] = "";
    int32_t count = -1, warnings = 0;
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) snprintf(text, sizeof text, "cannot become nobody");
    else {
      setenv("VOLT8_TUNING_DIR", locked, 1);
      volt8_tuning_warnings_reset();
      if (volt8_tuning_table_count(70, NULL, &count) == VOLT8_OK) volt8_tuning_warnings(text, sizeof text, &warnings);
    }
    dprintf(channel[1], "%d|%s", (int)warnings, text);
    _exit(0);
  }
  close(channel[1]);
  char reply[4200] = "";
  ssize_t got = read(channel[0], reply, sizeof reply - 1);
  close(channel[0]);
  int child_status = 0;
  waitpid(child, &child_status, 0);
  chmod(locked, 0755);
  cr_assert(got > 0 && WIFEXITED(child_status), "the child said nothing");
  char expected[700];
  snprintf(expected, sizeof expected, "1|VOLT8_TUNING_DIR=%s cannot be read (Permission denied): no table is read from it",
           locked);
  cr_assert(strncmp(reply, expected, strlen(expected)) == 0, "expected \"%s\", got \"%s\"", expected, reply);
}

/* A text longer than its field is cut with a mark: the cache folder's path of 1500 bytes keeps 1020 of
 * them and "...", in the library's report and in the command's line. */
Test(doctor, a_cut_path_ends_with_a_mark, .init = make_scratch, .fini = remove_scratch) {
  char dir[1600];
  int used = snprintf(dir, sizeof dir, "%s/", scratch);
  memset(dir + used, 'd', 1500 - (size_t)used);
  dir[1500] = '\0';
  volt8_cache_report report = cache_report_of(dir);
  cr_assert_eq(strlen(report.dir), sizeof report.dir - 1);
  cr_assert(strncmp(report.dir, dir, sizeof report.dir - 4) == 0 && strcmp(report.dir + sizeof report.dir - 4, "...") == 0,
            "the cut path has no mark: ...%s", report.dir + sizeof report.dir - 12);
  setenv("VOLT8_DISABLE_CUDA", "1", 1);
  setenv("VOLT8_CACHE_DIR", dir, 1);
  static char out[65536], err[16384];
  cr_assert_eq(test_run_volt8((char *[]){"doctor", NULL}, out, sizeof out, err, sizeof err), 0, "%s", err);
  char expected[1200];
  snprintf(expected, sizeof expected, "kernel cache: %s: not made yet", report.dir);
  cr_assert(strstr(out, expected), "no \"...%s\" in:\n%s", expected + strlen(expected) - 30, out);
}
