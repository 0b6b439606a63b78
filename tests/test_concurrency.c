/* Concurrent use of one volt8_ctx: threads generate kernel source, compile the same and different
 * keys, look up tuning tables, load and plan checkpoints, and fail, all at once. Every key is
 * compiled once (volt8_jit_compile_count), equal keys give identical images, generated source is
 * the same in every thread, and each thread reads its own failure from volt8_last_error.
 * Built with VOLT8_STANDALONE it is a plain program instead of a Criterion suite (Criterion's
 * sandbox cannot start under ThreadSanitizer): scripts/tsan_tests.sh runs it that way. */
#ifndef VOLT8_STANDALONE
#include <criterion/criterion.h>
#endif

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moe/kernels/catalogue.h"
#include "core/ctx_internal.h"
#include "jit/jit.h"
#include "jit/nvrtc_loader.h"
#include "core/sha256.h"
#include "tiny_checkpoint.h"
#include "dispatch/tuning.h"

#define THREADS 8
#define ROUNDS 3
#define SHARED_VARIANTS 2

/* What a scenario returns besides NULL (passed) and a problem's text. */
static const char skipped[] = "skipped";
static char problem_text[1024];

#define PROBLEM(...) (snprintf(problem_text, sizeof problem_text, __VA_ARGS__), (const char *)problem_text)

static char work_dir[256], cache_dir[300], checkpoint_dir[300], broken_dir[300];

static int remove_one(const char *path, const struct stat *info, int type, struct FTW *walk) {
  (void)info, (void)type, (void)walk;
  return remove(path);
}

static const char *make_work_dir(void) {
  snprintf(work_dir, sizeof work_dir, "%s/volt8-concurrency-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(work_dir)) return PROBLEM("mkdtemp %s: %s", work_dir, strerror(errno));
  snprintf(cache_dir, sizeof cache_dir, "%s/cache", work_dir);
  snprintf(checkpoint_dir, sizeof checkpoint_dir, "%s/checkpoint", work_dir);
  snprintf(broken_dir, sizeof broken_dir, "%s/broken", work_dir);
  if (!tiny_checkpoint_write(checkpoint_dir, 3) || !tiny_checkpoint_write(broken_dir, 2))
    return PROBLEM("cannot write the checkpoints in %s", work_dir);
  char config[400];
  snprintf(config, sizeof config, "%s/config.json", broken_dir);
  FILE *file = fopen(config, "w"); /* the config disagrees with the tensors: every plan fails */
  if (!file || fprintf(file, "{\"hidden_size\": 32}") <= 0 || fclose(file) != 0) return PROBLEM("cannot write %s", config);
  return NULL;
}

static void remove_work_dir(void) {
  if (work_dir[0]) nftw(work_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static volt8_ctx *new_ctx(const char *dir) {
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.target_arch = "sm_70";
  options.cache_dir = dir;
  options.cache_disable = dir == NULL;
  volt8_ctx *ctx = NULL;
  if (volt8_ctx_create(&options, &ctx) != VOLT8_OK) fprintf(stderr, "volt8_ctx_create: %s\n", volt8_last_error(NULL));
  return ctx;
}

static int has_nvrtc(volt8_ctx *ctx) {
  const volt8_nvrtc_lib *lib = NULL;
  if (volt8_nvrtc_for_arch(ctx, 70, &lib) == VOLT8_OK) return 1;
  fprintf(stderr, "skipped: no NVRTC for compute_70: %s\n", volt8_last_error(ctx));
  return 0;
}

/* Opens a context that can compile into *ctx and returns NULL; or returns why not ("no context",
 * or `skipped` when no NVRTC builds compute_70) with *ctx NULL. */
static const char *compiling_ctx(const char *dir, volt8_ctx **ctx) {
  *ctx = new_ctx(dir);
  if (!*ctx) return "no context";
  if (has_nvrtc(*ctx)) return NULL;
  volt8_ctx_destroy(*ctx);
  *ctx = NULL;
  return skipped;
}

/* ---- the work of one thread ---- */

typedef struct worker {
  volt8_ctx *ctx;
  pthread_barrier_t *start;
  int index;
  char failure[512];                           /* first problem seen; "" when none */
  char shared_digest[VOLT8_SHA256_HEX_BYTES];  /* image of the kernel every thread compiles */
  char own_digest[VOLT8_SHA256_HEX_BYTES];     /* image of this thread's own kernel */
  char source_digest[VOLT8_SHA256_HEX_BYTES];  /* generated source of a GEMM variant */
} worker;

static const char shared_source[] = "extern \"C\" __global__ void k(float *p) { p[threadIdx.x] *= 2.0f; }\n";
static const char *const shared_variants[SHARED_VARIANTS] = {"route", "reduce"};

static void digest_hex(const void *data, size_t size, char hex[VOLT8_SHA256_HEX_BYTES]) {
  uint8_t digest[VOLT8_SHA256_BYTES];
  volt8_sha256_digest(data, size, digest);
  volt8_sha256_hex(digest, hex);
}

#define FAIL_IF(condition, ...)                                                        \
  do {                                                                                 \
    if ((condition) && !w->failure[0]) snprintf(w->failure, sizeof w->failure, __VA_ARGS__); \
  } while (0)

static void compile_kernel(worker *w, const char *name, const char *source, char digest[VOLT8_SHA256_HEX_BYTES]) {
  volt8_jit_request request = {name, source, 70, VOLT8_IMAGE_PTX, NULL, 0};
  volt8_jit_image image;
  volt8_status status = volt8_jit_compile(w->ctx, &request, &image);
  FAIL_IF(status != VOLT8_OK, "compile of %s: %s", name, volt8_last_error(w->ctx));
  if (status != VOLT8_OK) return;
  char hex[VOLT8_SHA256_HEX_BYTES];
  digest_hex(image.data, image.size, hex);
  FAIL_IF(digest[0] && strcmp(hex, digest) != 0, "kernel %s changed between rounds", name);
  memcpy(digest, hex, sizeof hex);
  volt8_jit_image_free(&image);
}

static void generate(worker *w) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  char name[VOLT8_VARIANT_NAME_BYTES];
  volt8_status status = volt8_variant_name(w->ctx, &shape, 3, name, sizeof name);
  FAIL_IF(status != VOLT8_OK, "variant_name: %s", volt8_last_error(w->ctx));
  volt8_kernel_source source;
  status = volt8_codegen_emit(w->ctx, &shape, name, &source);
  FAIL_IF(status != VOLT8_OK, "emit %s: %s", name, volt8_last_error(w->ctx));
  if (status != VOLT8_OK) return;
  char hex[VOLT8_SHA256_HEX_BYTES];
  digest_hex(source.source, strlen(source.source), hex);
  FAIL_IF(w->source_digest[0] && strcmp(hex, w->source_digest) != 0, "source of %s changed between rounds", name);
  memcpy(w->source_digest, hex, sizeof hex);
  volt8_kernel_source_free(&source);
}

static void load_and_plan(worker *w) {
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = checkpoint_dir;
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  volt8_status status = volt8_plan(w->ctx, &options, &plan);
  FAIL_IF(status != VOLT8_OK || plan.num_experts != 3, "plan: %s", volt8_last_error(w->ctx));
  volt8_host_checkpoint *host = NULL;
  status = volt8_checkpoint_load_host(w->ctx, &options, &host);
  FAIL_IF(status != VOLT8_OK, "host load: %s", volt8_last_error(w->ctx));
  if (host) FAIL_IF(host->shape.num_experts != 3 || host->shape.hidden != TINY_HIDDEN, "host load shape");
  volt8_host_checkpoint_free(host);
}

static void tuning(worker *w) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  volt8_tuning_match match;
  for (int op = VOLT8_OP_GATE_UP; op <= VOLT8_OP_DOWN; op++) {
    volt8_status status = volt8_tuning_lookup(w->ctx, &shape, (volt8_op)op, 1 + w->index, 8, &match);
    FAIL_IF(status != VOLT8_OK, "tuning lookup: %s", volt8_last_error(w->ctx));
  }
  char warnings[256];
  int32_t count = 0;
  FAIL_IF(volt8_tuning_warnings(warnings, sizeof warnings, &count) != VOLT8_OK, "tuning warnings");
}

/* Fails on purpose, with a message naming this thread, and checks the thread reads it back. */
static void fail_own_way(worker *w, int round) {
  volt8_load_options options = VOLT8_LOAD_OPTIONS_INIT;
  options.checkpoint_dir = broken_dir;
  volt8_plan_report plan = VOLT8_PLAN_REPORT_INIT;
  volt8_status status = volt8_plan(w->ctx, &options, &plan);
  FAIL_IF(status != VOLT8_ERR_FORMAT || !strstr(volt8_last_error(w->ctx), "hidden_size"),
          "plan of the broken checkpoint: %s", volt8_last_error(w->ctx));
  char variant[64];
  snprintf(variant, sizeof variant, "gate_up.missing.thread%d.round%d", w->index, round);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  status = volt8_variant_compile(w->ctx, &shape, variant, NULL);
  FAIL_IF(status != VOLT8_ERR_NOT_FOUND, "unknown variant %s gave %s", variant, volt8_status_string(status));
  FAIL_IF(!strstr(volt8_last_error(w->ctx), variant), "thread %d reads another failure: %s", w->index,
          volt8_last_error(w->ctx));
}

static void *work(void *arg) {
  worker *w = arg;
  pthread_barrier_wait(w->start);
  char own_name[32], own_source[160];
  snprintf(own_name, sizeof own_name, "own%d", w->index);
  snprintf(own_source, sizeof own_source, "extern \"C\" __global__ void own%d(float *p) { p[threadIdx.x] += %d.0f; }\n",
           w->index, w->index);
  for (int round = 0; round < ROUNDS; round++) {
    /* each thread starts somewhere else in the mix */
    for (int step = 0; step < 6; step++) {
      switch ((step + w->index) % 6) {
      case 0: compile_kernel(w, "k", shared_source, w->shared_digest); break;
      case 1: compile_kernel(w, own_name, own_source, w->own_digest); break;
      case 2: generate(w); break;
      case 3: load_and_plan(w); break;
      case 4: tuning(w); break;
      case 5: fail_own_way(w, round); break;
      }
    }
    for (int v = 0; v < SHARED_VARIANTS; v++) {
      volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
      volt8_status status = volt8_variant_compile(w->ctx, &shape, shared_variants[(v + w->index) % SHARED_VARIANTS], NULL);
      FAIL_IF(status != VOLT8_OK, "variant %s: %s", shared_variants[v], volt8_last_error(w->ctx));
    }
  }
  return NULL;
}

static const char *run_workers(volt8_ctx *ctx, worker *workers) {
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, THREADS);
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++) {
    workers[i] = (worker){.ctx = ctx, .start = &start, .index = i};
    if (pthread_create(&threads[i], NULL, work, &workers[i]) != 0) abort();
  }
  for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&start);
  for (int i = 0; i < THREADS; i++) {
    if (workers[i].failure[0]) return PROBLEM("thread %d: %s", i, workers[i].failure);
    if (strcmp(workers[i].shared_digest, workers[0].shared_digest) != 0) return PROBLEM("thread %d got another image of k", i);
    if (strcmp(workers[i].source_digest, workers[0].source_digest) != 0) return PROBLEM("thread %d generated other source", i);
    for (int j = 0; j < i; j++)
      if (strcmp(workers[i].own_digest, workers[j].own_digest) == 0)
        return PROBLEM("threads %d and %d got the same image for different kernels", i, j);
  }
  return NULL;
}

static const char *each_key_compiled_once(void) {
  volt8_ctx *ctx = NULL;
  const char *unusable = compiling_ctx(cache_dir, &ctx);
  if (unusable) return unusable;
  static worker workers[THREADS];
  const char *problem = run_workers(ctx, workers);
  /* k, one kernel per thread, and the shared variants: each missed the empty cache exactly once */
  int64_t expected = 1 + THREADS + SHARED_VARIANTS, compiles = volt8_jit_compile_count(ctx);
  if (!problem && compiles != expected)
    problem = PROBLEM("%lld NVRTC compiles for %lld distinct keys", (long long)compiles, (long long)expected);
  volt8_ctx_destroy(ctx);
  if (problem) return problem;
  /* a second context finds every key in the disk cache */
  ctx = new_ctx(cache_dir);
  problem = run_workers(ctx, workers);
  if (!problem && volt8_jit_compile_count(ctx) != 0)
    problem = PROBLEM("%lld compiles with a full cache", (long long)volt8_jit_compile_count(ctx));
  volt8_ctx_destroy(ctx);
  return problem;
}

static const char *without_a_disk_cache(void) {
  volt8_ctx *ctx = NULL;
  const char *unusable = compiling_ctx(NULL, &ctx);
  if (unusable) return unusable;
  static worker workers[THREADS];
  const char *problem = run_workers(ctx, workers);
  /* Threads asking at once share a compile; later rounds compile again (nothing keeps images). */
  int64_t distinct = 1 + THREADS + SHARED_VARIANTS, compiles = volt8_jit_compile_count(ctx);
  int64_t most = (int64_t)ROUNDS * (THREADS + THREADS + THREADS * SHARED_VARIANTS);
  if (!problem && (compiles < distinct || compiles > most))
    problem = PROBLEM("%lld compiles, expected %lld..%lld", (long long)compiles, (long long)distinct, (long long)most);
  volt8_ctx_destroy(ctx);
  return problem;
}

/* Waiters of a compile that fails get the failure and its message too. */
static void *compile_broken(void *arg) {
  volt8_ctx *ctx = arg;
  const char *source = "extern \"C\" __global__ void broken(float *p) { p[0] = volt8_no_such_name; }\n";
  volt8_jit_request request = {"broken", source, 70, VOLT8_IMAGE_PTX, NULL, 0};
  volt8_jit_image image;
  volt8_status status = volt8_jit_compile(ctx, &request, &image);
  if (status == VOLT8_ERR_COMPILE && strstr(volt8_last_error(ctx), "volt8_no_such_name")) return NULL;
  return (void *)"a failed compile did not report its log to every waiting thread";
}

static const char *a_failed_compile_fails_every_waiter(void) {
  volt8_ctx *ctx = NULL;
  const char *unusable = compiling_ctx(cache_dir, &ctx);
  if (unusable) return unusable;
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&threads[i], NULL, compile_broken, ctx) != 0) abort();
  const char *problem = NULL;
  for (int i = 0; i < THREADS; i++) {
    void *result = NULL;
    pthread_join(threads[i], &result);
    if (result && !problem) problem = PROBLEM("thread %d: %s", i, (const char *)result);
  }
  volt8_ctx_destroy(ctx);
  return problem;
}

/* Contexts created and destroyed on several threads while others use their own. */
static void *churn_contexts(void *arg) {
  (void)arg;
  for (int i = 0; i < 20; i++) {
    volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
    options.device = -1;
    options.cache_disable = 1;
    volt8_ctx *ctx = NULL;
    if (volt8_ctx_create(&options, &ctx) != VOLT8_OK) return (void *)"volt8_ctx_create failed";
    if (volt8_ctx_require_device(ctx) != VOLT8_ERR_NO_DEVICE || !strstr(volt8_last_error(ctx), "no GPU"))
      return (void *)"the no-device message of a fresh context is wrong";
    int32_t count = 0;
    volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
    if (volt8_variant_count(ctx, &shape, &count) != VOLT8_OK || count <= 0) return (void *)"variant_count failed";
    volt8_ctx_destroy(ctx);
    if (volt8_ctx_create(NULL, NULL) != VOLT8_ERR_INVALID_ARGUMENT || !strstr(volt8_last_error(NULL), "out_ctx"))
      return (void *)"the context-free message is not this thread's";
  }
  return NULL;
}

static const char *contexts_created_and_destroyed_on_many_threads(void) {
  pthread_t threads[4];
  for (int i = 0; i < 4; i++)
    if (pthread_create(&threads[i], NULL, churn_contexts, NULL) != 0) abort();
  const char *problem = NULL;
  for (int i = 0; i < 4; i++) {
    void *result = NULL;
    pthread_join(threads[i], &result);
    if (result && !problem) problem = PROBLEM("thread %d: %s", i, (const char *)result);
  }
  return problem;
}

/* ---- runners ---- */

typedef struct scenario {
  const char *name;
  const char *(*run)(void);
} scenario;

static const scenario scenarios[] = {
    {"one_ctx_many_threads_each_key_compiled_once", each_key_compiled_once},
    {"one_ctx_many_threads_without_a_disk_cache", without_a_disk_cache},
    {"a_failed_compile_fails_every_waiter", a_failed_compile_fails_every_waiter},
    {"contexts_created_and_destroyed_on_many_threads", contexts_created_and_destroyed_on_many_threads},
};

static const char *run_scenario(const scenario *s) {
  const char *problem = make_work_dir();
  if (!problem) problem = s->run();
  remove_work_dir();
  return problem;
}

#ifndef VOLT8_STANDALONE

TestSuite(concurrency, .timeout = 600);

static void expect_pass(size_t index) {
  const char *problem = run_scenario(&scenarios[index]);
  if (problem == skipped) cr_skip_test("no NVRTC for compute_70");
  cr_assert_null(problem, "%s: %s", scenarios[index].name, problem);
}

Test(concurrency, one_ctx_many_threads_each_key_compiled_once) { expect_pass(0); }
Test(concurrency, one_ctx_many_threads_without_a_disk_cache) { expect_pass(1); }
Test(concurrency, a_failed_compile_fails_every_waiter) { expect_pass(2); }
Test(concurrency, contexts_created_and_destroyed_on_many_threads) { expect_pass(3); }

#else

int main(void) {
  int failed = 0;
  for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
    const char *problem = run_scenario(&scenarios[i]);
    printf("%s %s%s%s\n", problem == skipped ? "SKIP" : problem ? "FAIL" : "PASS", scenarios[i].name,
           problem && problem != skipped ? ": " : "", problem && problem != skipped ? problem : "");
    failed |= problem && problem != skipped;
  }
  return failed;
}

#endif
