/* Cache torture: many processes compile the same kernels through one disk cache while other
 * processes are SIGKILLed at random points (mid-compile, mid-publish) and random bytes of the
 * cache entries are flipped. Every surviving process must end with images identical to a clean
 * compile's; a flipped entry must be recompiled (and then served again); temp files of killed
 * writers are swept once stale; and a run without kills leaves exactly one entry per kernel and no
 * temp file. Workers are tests/cache_race_worker.c. VOLT8_TEST_SEED fixes the random choices. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_support.h"

#ifndef VOLT8_CACHE_RACE_WORKER
#error "VOLT8_CACHE_RACE_WORKER must name the worker (tests/CMakeLists.txt defines it)"
#endif

#define KEYS 4          /* kernels every survivor compiles and checks */
#define VICTIM_KEYS 3   /* extra kernels only victims compile, so they publish often */
#define SURVIVORS 16
#define VICTIMS 24
#define ROUNDS 15
#define MAX_OUTPUT 16384

TestSuite(cache_torture, .timeout = 300);

extern char **environ;

static char work_dir[256];
static unsigned seed;
static char reference[KEYS][65];

static void setup(void) {
  const char *fixed = getenv("VOLT8_TEST_SEED");
  seed = fixed && *fixed ? (unsigned)strtoul(fixed, NULL, 10) : (unsigned)time(NULL) ^ (unsigned)getpid();
  srand(seed);
  snprintf(work_dir, sizeof work_dir, "%s/volt8-torture-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  cr_assert(mkdtemp(work_dir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void) {
  test_remove_tree(work_dir);
}

/* ---- workers ---- */

typedef struct worker {
  pid_t pid;
  int output;          /* read end of its stdout, -1 for victims */
} worker;

static worker spawn_worker(const char *cache, int keys, int rounds, int first_key, int keep_output) {
  char keys_text[16], rounds_text[16], first_text[16];
  snprintf(keys_text, sizeof keys_text, "%d", keys);
  snprintf(rounds_text, sizeof rounds_text, "%d", rounds);
  snprintf(first_text, sizeof first_text, "%d", first_key);
  char *argv[] = {VOLT8_CACHE_RACE_WORKER, (char *)cache, keys_text, rounds_text, first_text, NULL};
  int pipe_fds[2] = {-1, -1};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (keep_output) {
    cr_assert_eq(pipe(pipe_fds), 0);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
    posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  }
  worker w = {0, -1};
  int error = posix_spawn(&w.pid, VOLT8_CACHE_RACE_WORKER, &actions, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  cr_assert_eq(error, 0, "posix_spawn %s: %s", VOLT8_CACHE_RACE_WORKER, strerror(error));
  if (keep_output) {
    close(pipe_fds[1]);
    w.output = pipe_fds[0];
  }
  return w;
}

/* Reads everything the worker printed and waits for it; returns its wait status. */
static int finish_worker(worker *w, char *output, size_t output_size) {
  size_t used = 0;
  ssize_t got;
  while (w->output >= 0 && (got = read(w->output, output + used, output_size - 1 - used)) > 0) used += (size_t)got;
  output[used] = '\0';
  if (w->output >= 0) close(w->output);
  int status = 0;
  cr_assert_eq(waitpid(w->pid, &status, 0), w->pid);
  return status;
}

/* Checks every line of a worker's output against the reference; counts lines per key and loads
 * from the cache. Returns the number of lines. */
static int check_output(const char *output, const char *who, int from_cache[KEYS]) {
  int lines = 0;
  char line[256];
  for (const char *cursor = output; *cursor;) {
    size_t length = strcspn(cursor, "\n");
    snprintf(line, sizeof line, "%.*s", (int)length, cursor);
    cursor += length + (cursor[length] == '\n');
    int key = -1, cached = -1;
    char digest[65] = "";
    cr_assert_eq(sscanf(line, "t%d %64s %d", &key, digest, &cached), 3, "%s printed \"%s\" (seed %u)", who, line, seed);
    cr_assert(key >= 0 && key < KEYS, "%s: key %d (seed %u)", who, key, seed);
    cr_assert_str_eq(digest, reference[key], "%s got a wrong image of t%d (from_cache %d, seed %u)", who, key, cached,
                     seed);
    if (from_cache) from_cache[key] += cached;
    lines++;
  }
  return lines;
}

static void expect_success(int status, const char *who, const char *output) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) cr_skip_test("no NVRTC for compute_70");
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s failed (wait status 0x%x, seed %u): %s", who, status, seed,
            output);
}

/* Compiles the KEYS kernels without a cache: what every process must end up with. */
static void make_reference(void) {
  worker w = spawn_worker("-", KEYS, 1, 0, 1);
  char output[MAX_OUTPUT];
  expect_success(finish_worker(&w, output, sizeof output), "the reference compile", output);
  for (const char *cursor = output; *cursor;) {
    int key = -1, cached = -1;
    char digest[65];
    cr_assert_eq(sscanf(cursor, "t%d %64s %d", &key, digest, &cached), 3, "reference output: %s", output);
    cr_assert(key >= 0 && key < KEYS && cached == 0);
    snprintf(reference[key], sizeof reference[key], "%s", digest);
    cursor += strcspn(cursor, "\n");
    cursor += *cursor == '\n';
  }
  for (int key = 0; key < KEYS; key++) cr_assert(reference[key][0], "no reference image of t%d", key);
}

/* ---- the cache folder ---- */

#define MAX_ENTRIES 256
static char entries[MAX_ENTRIES][512];
static int entry_count, temp_count, other_count;

static int note_file(const char *path, const struct stat *info, int type, struct FTW *walk) {
  (void)info, (void)walk;
  if (type != FTW_F) return 0;
  size_t length = strlen(path);
  if (length > 6 && strcmp(path + length - 6, ".entry") == 0) {
    if (entry_count < MAX_ENTRIES) snprintf(entries[entry_count], sizeof entries[0], "%s", path);
    entry_count++;
  } else if (strstr(path, "/tmp/")) {
    temp_count++;
  } else {
    other_count++;
  }
  return 0;
}

static void scan(const char *cache) {
  entry_count = temp_count = other_count = 0;
  nftw(cache, note_file, 16, FTW_PHYS);
}

/* XORs one random byte of one random entry with a random non-zero mask. */
static void flip_random_byte(const char *cache) {
  scan(cache);
  int count = entry_count < MAX_ENTRIES ? entry_count : MAX_ENTRIES;
  if (count == 0) return;
  const char *path = entries[rand() % count];
  int fd = open(path, O_RDWR);
  if (fd < 0) return; /* replaced meanwhile */
  struct stat info;
  if (fstat(fd, &info) == 0 && info.st_size > 0) {
    off_t at = (off_t)((unsigned)rand() % (unsigned)info.st_size);
    unsigned char byte;
    if (pread(fd, &byte, 1, at) == 1) {
      byte ^= (unsigned char)(1 + rand() % 255);
      if (pwrite(fd, &byte, 1, at) != 1) cr_log_warn("flip of %s failed", path);
    }
  }
  close(fd);
}

static void flip_entry_of(const char *cache, int key) {
  scan(cache);
  char name[16];
  snprintf(name, sizeof name, "t%d", key);
  for (int i = 0; i < entry_count && i < MAX_ENTRIES; i++) {
    FILE *file = fopen(entries[i], "r+b");
    cr_assert(file);
    char header[160];
    size_t got = fread(header, 1, sizeof header, file);
    /* the kernel name follows the 144-byte header; its length is at offset 20 */
    if (got >= 146 && header[20] == (char)strlen(name) && memcmp(header + 144, name, strlen(name)) == 0) {
      fseek(file, -1, SEEK_END); /* the last payload byte */
      int byte = fgetc(file);
      fseek(file, -1, SEEK_END);
      fputc(byte ^ 0x40, file);
      fclose(file);
      return;
    }
    fclose(file);
  }
  cr_assert_fail("no entry of %s to flip (seed %u)", name, seed);
}

static void age_temp_files(const char *cache) {
  char temp_dir[400];
  snprintf(temp_dir, sizeof temp_dir, "%s/tmp", cache);
  struct timeval old[2];
  gettimeofday(&old[0], NULL);
  old[0].tv_sec -= 2 * 3600;
  old[1] = old[0];
  FILE *listing = NULL;
  char command[512];
  snprintf(command, sizeof command, "find '%s' -type f 2>/dev/null", temp_dir);
  listing = popen(command, "r");
  cr_assert(listing);
  char path[512];
  while (fgets(path, sizeof path, listing)) {
    path[strcspn(path, "\n")] = '\0';
    utimes(path, old);
  }
  pclose(listing);
}

static void sleep_ms(int ms) {
  struct timespec pause = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&pause, NULL);
}

/* ---- the tests ---- */

Test(cache_torture, kills_and_flips_never_give_a_wrong_kernel, .init = setup, .fini = teardown) {
  make_reference();
  char cache[300];
  snprintf(cache, sizeof cache, "%s/cache", work_dir);

  worker survivors[SURVIVORS];
  for (int i = 0; i < SURVIVORS; i++) survivors[i] = spawn_worker(cache, KEYS, ROUNDS, 0, 1);
  /* victims race on their own keys and the shared ones, and die at a random moment */
  int victims_left = VICTIMS, killed = 0, flips = 0, iterations = 0;
  worker victims[4] = {{0, -1}, {0, -1}, {0, -1}, {0, -1}};
  struct timespec victim_deadline[4];
  int running = SURVIVORS;
  while (running > 0 || victims_left > 0) {
    for (int v = 0; v < 4; v++) {
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      if (victims[v].pid > 0 && (now.tv_sec > victim_deadline[v].tv_sec ||
                                 (now.tv_sec == victim_deadline[v].tv_sec && now.tv_nsec >= victim_deadline[v].tv_nsec))) {
        kill(victims[v].pid, SIGKILL);
        int status;
        waitpid(victims[v].pid, &status, 0);
        killed += WIFSIGNALED(status);
        victims[v].pid = 0;
      }
      if (victims[v].pid == 0 && victims_left > 0) {
        /* half race on the shared kernels, half publish kernels of their own */
        int first_key = victims_left % 2 ? 0 : 100 + victims_left * VICTIM_KEYS;
        victims[v] = spawn_worker(cache, first_key ? VICTIM_KEYS : KEYS + VICTIM_KEYS, 2, first_key, 0);
        victims_left--;
        long delay_ns = (long)(rand() % 400) * 1000000L;
        victim_deadline[v] = now;
        victim_deadline[v].tv_nsec += delay_ns;
        victim_deadline[v].tv_sec += victim_deadline[v].tv_nsec / 1000000000L;
        victim_deadline[v].tv_nsec %= 1000000000L;
      }
    }
    for (int flip = 0; flip < 2; flip++, flips++) flip_random_byte(cache);
    running = 0;
    for (int i = 0; i < SURVIVORS; i++) {
      int status;
      if (survivors[i].pid == 0) continue;
      if (waitpid(survivors[i].pid, &status, WNOHANG) == 0) {
        running++;
        continue;
      }
      survivors[i].pid = 0; /* its output is read below */
      if (WIFEXITED(status) && WEXITSTATUS(status) == 77) cr_skip_test("no NVRTC for compute_70");
      cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "survivor %d failed (wait status 0x%x, seed %u)", i, status,
                seed);
    }
    sleep_ms(5);
    iterations++;
  }
  for (int v = 0; v < 4; v++) {
    if (victims[v].pid > 0) {
      kill(victims[v].pid, SIGKILL);
      waitpid(victims[v].pid, NULL, 0);
    }
  }
  int survivor_compiles = 0;
  for (int i = 0; i < SURVIVORS; i++) {
    char output[MAX_OUTPUT], who[32];
    size_t used = 0;
    ssize_t got;
    while ((got = read(survivors[i].output, output + used, sizeof output - 1 - used)) > 0) used += (size_t)got;
    output[used] = '\0';
    close(survivors[i].output);
    snprintf(who, sizeof who, "survivor %d", i);
    int from_cache[KEYS] = {0};
    cr_assert_eq(check_output(output, who, from_cache), KEYS * ROUNDS, "%s printed too few lines (seed %u): %s", who,
                 seed, output);
    for (int key = 0; key < KEYS; key++) survivor_compiles += ROUNDS - from_cache[key];
  }
  cr_log_info("seed %u: %d of %d victims killed by SIGKILL, %d bytes flipped over %d rounds, survivors compiled %d times",
              seed, killed, VICTIMS, flips, iterations, survivor_compiles);

  /* Whatever the flips left, the next process gets correct kernels and repairs the cache. */
  char output[MAX_OUTPUT];
  worker w = spawn_worker(cache, KEYS, 1, 0, 1);
  expect_success(finish_worker(&w, output, sizeof output), "the first process after the torture", output);
  check_output(output, "the first process after the torture", NULL);

  /* A flipped entry is a miss: recompiled once, then served from the cache again. Stale temp
   * files of killed writers go with that publish. */
  scan(cache);
  cr_log_info("seed %u: %d temp files left by killed writers", seed, temp_count);
  /* what a writer killed between open and rename leaves, in case no kill landed there */
  char planted[400], fresh[400];
  snprintf(planted, sizeof planted, "%s/tmp/volt8-999999.00000000deadbeef", cache);
  snprintf(fresh, sizeof fresh, "%s/tmp/volt8-999998.00000000cafebabe", cache);
  FILE *file = fopen(planted, "w");
  cr_assert(file && fputs("VOLT8KCE half an entry", file) >= 0 && fclose(file) == 0);
  age_temp_files(cache);
  file = fopen(fresh, "w"); /* a writer still at work: must be left alone */
  cr_assert(file && fclose(file) == 0);
  flip_entry_of(cache, 2);
  int from_cache[KEYS] = {0};
  w = spawn_worker(cache, KEYS, 1, 0, 1);
  expect_success(finish_worker(&w, output, sizeof output), "the process after the flip", output);
  check_output(output, "the process after the flip", from_cache);
  for (int key = 0; key < KEYS; key++)
    cr_assert_eq(from_cache[key], key != 2, "t%d from_cache %d after t2's entry was flipped (seed %u)", key,
                 from_cache[key], seed);
  scan(cache);
  cr_assert_eq(access(planted, F_OK), -1, "a stale temp file survived the sweep (seed %u)", seed);
  cr_assert_eq(access(fresh, F_OK), 0, "the sweep removed a fresh temp file (seed %u)", seed);
  cr_assert_eq(temp_count, 1, "%d temp files after the sweep, expected only the fresh one (seed %u)", temp_count, seed);
  cr_assert_eq(unlink(fresh), 0);
  memset(from_cache, 0, sizeof from_cache);
  w = spawn_worker(cache, KEYS, 1, 0, 1);
  expect_success(finish_worker(&w, output, sizeof output), "the process after the repair", output);
  check_output(output, "the process after the repair", from_cache);
  for (int key = 0; key < KEYS; key++) cr_assert_eq(from_cache[key], 1, "t%d not served from the repaired cache", key);
}

Test(cache_torture, a_clean_race_leaves_one_entry_per_kernel_and_no_temp_file, .init = setup, .fini = teardown) {
  make_reference();
  char cache[300];
  snprintf(cache, sizeof cache, "%s/clean", work_dir);
  worker workers[SURVIVORS];
  for (int i = 0; i < SURVIVORS; i++) workers[i] = spawn_worker(cache, KEYS, 2, 0, 1);
  int compiled[KEYS] = {0};
  for (int i = 0; i < SURVIVORS; i++) {
    char output[MAX_OUTPUT], who[32];
    snprintf(who, sizeof who, "worker %d", i);
    expect_success(finish_worker(&workers[i], output, sizeof output), who, output);
    int from_cache[KEYS] = {0};
    cr_assert_eq(check_output(output, who, from_cache), 2 * KEYS, "%s: %s", who, output);
    for (int key = 0; key < KEYS; key++) compiled[key] += 2 - from_cache[key];
  }
  scan(cache);
  cr_assert_eq(entry_count, KEYS, "%d entries for %d kernels (seed %u)", entry_count, KEYS, seed);
  cr_assert_eq(temp_count + other_count, 0, "%d temp and %d other files left (seed %u)", temp_count, other_count, seed);
  for (int key = 0; key < KEYS; key++) cr_assert_geq(compiled[key], 1);
}
