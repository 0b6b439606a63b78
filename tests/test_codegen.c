/* The kernel catalogue and the template engine: variant list, emitted source, determinism, failures
 * that name their cause, names that print and read back, and `volt8 list` agreeing with both. */
#include <criterion/criterion.h>

#include "test_support.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx_internal.h"
#include "core/text_buffer.h"
#include "jit/template.h"
#include "moe/kernels/catalogue.h"
#include "dispatch/dispatch.h"
#include "moe/experts_internal.h"
#include "moe/forward_plan.h"
#include "moe/kernels/single.h"
#include "core/embedded_files.h"

#ifndef VOLT8_SOURCE_DIR
#error "VOLT8_SOURCE_DIR (the source root) must be defined for this suite"
#endif

TestSuite(codegen, .timeout = 300);

typedef struct name_list {
  char **names;
  int32_t count;
} name_list;

static name_list list_ok(volt8_ctx *ctx, const volt8_moe_shape *shape) {
  name_list list = {NULL, 0};
  cr_assert_eq(volt8_codegen_list(ctx, shape, &list.names, &list.count), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_assert_gt(list.count, 0);
  return list;
}

static int count_prefix(const name_list *list, const char *prefix) {
  int found = 0;
  for (int32_t i = 0; i < list->count; i++) found += strncmp(list->names[i], prefix, strlen(prefix)) == 0;
  return found;
}

static int count_infix(const name_list *list, const char *infix) {
  int found = 0;
  for (int32_t i = 0; i < list->count; i++) found += strstr(list->names[i], infix) != NULL;
  return found;
}

static int contains(const name_list *list, const char *name) {
  for (int32_t i = 0; i < list->count; i++)
    if (strcmp(list->names[i], name) == 0) return 1;
  return 0;
}

/* Output of a shell command, or NULL when it failed. */
static char *command_output(const char *command) {
  FILE *pipe = popen(command, "r");
  if (!pipe) return NULL;
  size_t size = 0, capacity = 1 << 16;
  char *text = malloc(capacity);
  size_t got;
  while (text && (got = fread(text + size, 1, capacity - size - 1, pipe)) > 0) {
    size += got;
    if (capacity - size < 4096) {
      char *grown = realloc(text, capacity * 2);
      if (!grown) {
        free(text);
        text = NULL;
        break;
      }
      text = grown;
      capacity *= 2;
    }
  }
  int exit_status = pclose(pipe);
  if (!text) return NULL;
  text[size] = '\0';
  if (exit_status != 0) {
    free(text);
    return NULL;
  }
  return text;
}

static char *joined_names(const name_list *list) {
  size_t bytes = 1;
  for (int32_t i = 0; i < list->count; i++) bytes += strlen(list->names[i]) + 1;
  char *text = malloc(bytes);
  cr_assert_not_null(text);
  text[0] = '\0';
  for (int32_t i = 0; i < list->count; i++) {
    strcat(text, list->names[i]);
    strcat(text, "\n");
  }
  return text;
}

static void shape_argument(const volt8_moe_shape *shape, char *buf, size_t size) {
  snprintf(buf, size, "hidden=%d,intermediate=%d,num_experts=%d,block_n=%d,block_k=%d,intermediate_offset=%d",
           shape->hidden, shape->intermediate, shape->num_experts, shape->block_n, shape->block_k,
           shape->intermediate_offset);
}

Test(codegen, list_is_sorted_and_covers_both_families_of_both_ops) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  name_list list = list_ok(ctx, &shape);
  for (int32_t i = 1; i < list.count; i++)
    cr_expect_lt(strcmp(list.names[i - 1], list.names[i]), 0, "not sorted at %d: %s, %s", i, list.names[i - 1],
                 list.names[i]);
  const char *prefixes[] = {"gate_up.cc.", "gate_up.mma.", "down.cc.", "down.mma.", "down.tok."};
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
    cr_expect_geq(count_prefix(&list, prefixes[i]), 3, "too few %s variants", prefixes[i]);
  cr_expect(contains(&list, "route"));
  cr_expect(contains(&list, "route_parts"));
  cr_expect(contains(&list, "reduce"));
  cr_expect(contains(&list, "single"));
  volt8_codegen_names_free(list.names, list.count);
  volt8_ctx_destroy(ctx);
}

Test(codegen, route_and_reduce_emit) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  const char *names[] = {"route", "reduce", "single", "route_parts"};
  volt8_op ops[] = {VOLT8_OP_ROUTE, VOLT8_OP_REDUCE, VOLT8_OP_SINGLE, VOLT8_OP_ROUTE_PARTS};
  volt8_kind kinds[] = {VOLT8_KIND_ROUTE, VOLT8_KIND_REDUCE, VOLT8_KIND_SINGLE, VOLT8_KIND_ROUTE_PARTS};
  for (int i = 0; i < 4; i++) {
    volt8_kernel_source source;
    cr_assert_eq(volt8_codegen_emit(ctx, &shape, names[i], &source), VOLT8_OK, "%s", volt8_last_error(ctx));
    cr_expect_eq(source.variant.op, ops[i]);
    cr_expect_eq(source.variant.kind, kinds[i]);
    cr_expect_gt(source.threads, 0);
    cr_expect_str_eq(source.name, names[i]);
    cr_expect(strstr(source.entry, "H2560_I160_E512_b128x128_o32") != NULL, "entry %s", source.entry);
    cr_expect(strstr(source.source, source.entry) != NULL, "%s does not define %s", names[i], source.entry);
    volt8_kernel_source_free(&source);
  }
  volt8_ctx_destroy(ctx);
}

/* The one-launch forward's tiles are what the launcher counts its items with (moe/kernels/single.h), and it is
 * offered only where its row tile fits in shared memory. */
Test(codegen, single_launch_tiles_match_the_launcher) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  volt8_kernel_source source;
  cr_assert_eq(volt8_codegen_emit(ctx, &shape, "single", &source), VOLT8_OK, "%s", volt8_last_error(ctx));
  char line[128];
  snprintf(line, sizeof line, "constexpr int kThreads = %d;", source.threads);
  cr_expect(strstr(source.source, line) != NULL, "no %s", line);
  snprintf(line, sizeof line, "constexpr int kGateLanes = %d;", source.threads / VOLT8_SINGLE_GATE_COLUMNS);
  cr_expect(strstr(source.source, line) != NULL, "no %s", line);
  snprintf(line, sizeof line, "constexpr int kDownLanes = %d;", source.threads / VOLT8_SINGLE_DOWN_COLUMNS);
  cr_expect(strstr(source.source, line) != NULL, "no %s", line);
  cr_expect(strstr(source.source, "\n#define VOLT8_MAY_START_EARLY 0") != NULL, "the one-launch forward may start early");
  snprintf(line, sizeof line, "__launch_bounds__(kThreads, %d)", VOLT8_SINGLE_MIN_BLOCKS);
  cr_expect(strstr(source.source, line) != NULL, "no %s", line);
  volt8_kernel_source_free(&source);
  /* Offered exactly where the launcher's rule says it fits, on both sides of the largest hidden. */
  int offered = 0, refused = 0;
  for (shape.hidden = 10240; shape.hidden <= 12288; shape.hidden += 16) {
    name_list list = list_ok(ctx, &shape);
    int fits = volt8_single_fits(&shape);
    cr_expect_eq(contains(&list, "single"), fits, "hidden %d: listed %d, fits %d", shape.hidden, contains(&list, "single"), fits);
    offered += fits;
    refused += !fits;
    volt8_codegen_names_free(list.names, list.count);
  }
  cr_expect(offered > 0 && refused > 0, "the sweep does not cross the limit (%d offered, %d refused)", offered, refused);
  shape.hidden = 12288;
  cr_expect_eq(volt8_codegen_emit(ctx, &shape, "single", &source), VOLT8_ERR_CODEGEN);
  cr_expect(strstr(volt8_last_error(ctx), "shared memory") != NULL, "%s", volt8_last_error(ctx));
  volt8_ctx_destroy(ctx);
}

/* The one-launch forward is opt-in (VOLT8_SINGLE_LAUNCH=1) and serves targets before sm_80 only;
 * its grid follows the environment (read when the context is made). */
Test(codegen, single_launch_follows_the_target_and_the_environment) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  cr_expect_eq(ctx->single_launch, 0, "off unless asked for");
  cr_expect_eq(ctx->single_ctas_per_sm, -1, "as many CTAs an SM as the kernel's launch bounds ask");
  volt8_ctx_destroy(ctx);
  setenv("VOLT8_SINGLE_LAUNCH", "1", 1);
  ctx = test_cpu_ctx("sm_90");
  cr_expect_eq(ctx->single_launch, 0, "sm_90 has early launch instead");
  volt8_ctx_destroy(ctx);
  setenv("VOLT8_SINGLE_LAUNCH_CTAS", "0", 1);
  ctx = test_cpu_ctx(NULL);
  unsetenv("VOLT8_SINGLE_LAUNCH");
  unsetenv("VOLT8_SINGLE_LAUNCH_CTAS");
  cr_expect_eq(ctx->single_launch, 1);
  cr_expect_eq(ctx->single_ctas_per_sm, 0);
  volt8_ctx_destroy(ctx);
}

/* The dispatch's picks at few tokens on an sm_70 target run as one launch (the derived tables pick
 * block_m 1 cc kernels there); more than VOLT8_SINGLE_MAX_PAIRS pairs, the routed picks, forced
 * variants, an sm_90 target and a shape whose tiles do not fit do not. */
Test(codegen, single_launch_serves_the_dispatched_few_token_forwards_of_sm_70) {
  volt8_ctx *ctx = test_cpu_ctx(NULL), *ctx90 = test_cpu_ctx("sm_90");
  ctx->single_launch = 1; /* as VOLT8_SINGLE_LAUNCH=1 sets it */
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  const int32_t ms[] = {1, 2, 4, 8, 16, 25, 26, 64};
  for (int i = 0; i < 8; i++) {
    volt8_variant_choice choice;
    cr_assert_eq(volt8_dispatch_choose(ctx, &shape, ms[i], 10, &choice), VOLT8_OK, "%s", volt8_last_error(ctx));
    int64_t pairs = (int64_t)ms[i] * 10;
    char gate_up[VOLT8_VARIANT_NAME_BYTES], down[VOLT8_VARIANT_NAME_BYTES];
    volt8_variant_format(&choice.gate_up, gate_up, sizeof gate_up);
    volt8_variant_format(&choice.down, down, sizeof down);
    cr_expect_eq(volt8_single_launch_serves(ctx, &shape, 0, pairs, &choice), ms[i] <= 25, "M=%d (%s, %s)", ms[i],
                 gate_up, down);
    cr_expect_not(volt8_single_launch_serves(ctx, &shape, 1, pairs, &choice), "M=%d forced", ms[i]);
    cr_expect_not(volt8_single_launch_serves(ctx90, &shape, 0, pairs, &choice), "M=%d on sm_90", ms[i]);
  }
  volt8_variant_choice choice;
  cr_assert_eq(volt8_dispatch_choose(ctx, &shape, 1, 10, &choice), VOLT8_OK, "%s", volt8_last_error(ctx));
  shape.hidden = 12288;
  cr_expect_not(volt8_single_launch_serves(ctx, &shape, 0, 10, &choice), "a shape whose tiles do not fit");
  volt8_ctx_destroy(ctx);
  volt8_ctx_destroy(ctx90);
}

/* Every variant listed for `target_arch` emits marked, deterministic source of its family. */
static void check_every_variant_emits(const char *target_arch) {
  volt8_ctx *ctx = test_cpu_ctx(target_arch);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  name_list list = list_ok(ctx, &shape);
  for (int32_t i = 0; i < list.count; i++) {
    volt8_kernel_source first, second;
    cr_assert_eq(volt8_codegen_emit(ctx, &shape, list.names[i], &first), VOLT8_OK, "%s", volt8_last_error(ctx));
    cr_assert_eq(volt8_codegen_emit(ctx, &shape, list.names[i], &second), VOLT8_OK, "%s", volt8_last_error(ctx));
    cr_expect_str_eq(first.source, second.source, "%s: two emits differ", list.names[i]);
    cr_expect_str_eq(first.entry, second.entry);
    char header[256];
    snprintf(header, sizeof header, "// generated from %s by runtime/jit/template.c, do not edit\n", first.template_path);
    cr_expect(strncmp(first.source, header, strlen(header)) == 0, "%s starts with: %.80s", list.names[i], first.source);
    cr_expect(strstr(first.source, "volt8 codegen version") != NULL, "%s has no version line", list.names[i]);
    char line_directive[256];
    snprintf(line_directive, sizeof line_directive, "\n#line 1 \"%s\"\n", first.template_path);
    cr_expect(strstr(first.source, line_directive) != NULL, "%s has no %s", list.names[i], line_directive + 1);
    cr_expect(strstr(first.source, "@{") == NULL, "%s keeps an unexpanded @{", list.names[i]);
    cr_expect(strstr(first.source, "#include") == NULL, "%s has an #include", list.names[i]);
    cr_expect(strstr(first.source, first.entry) != NULL, "%s does not define %s", list.names[i], first.entry);
    cr_expect_gt(first.threads, 0);
    const volt8_variant *v = &first.variant;
    cr_expect_str_eq(first.name, list.names[i]);
    if (v->op == VOLT8_OP_GATE_UP || v->op == VOLT8_OP_DOWN) {
      cr_expect_eq(first.threads, 32 * v->warps);
      cr_expect_gt(v->block_m, 0);
      cr_expect_gt(v->block_n, 0);
      cr_expect_geq(v->split_k, 1);
      volt8_kind family = strstr(list.names[i], ".mma.")    ? VOLT8_KIND_GEMM_MMA
                          : strstr(list.names[i], ".tok.")  ? VOLT8_KIND_DOWN_TOK
                          : strstr(list.names[i], ".hmma.") ? VOLT8_KIND_GEMM_HMMA
                          : strstr(list.names[i], ".tile.") ? VOLT8_KIND_GEMM_TILE
                          : strstr(list.names[i], ".raw.")  ? VOLT8_KIND_GEMM_RAW
                                                            : VOLT8_KIND_GEMM_CC;
      cr_expect_eq(v->kind, family, "%s", list.names[i]);
      /* Large items (z in FP16, reduce_half after the down): the tile and raw families only. */
      cr_expect_eq(volt8_kind_large_items(v->kind), family == VOLT8_KIND_GEMM_TILE || family == VOLT8_KIND_GEMM_RAW,
                   "%s", list.names[i]);
      if (family == VOLT8_KIND_DOWN_TOK) cr_expect_eq(v->op, VOLT8_OP_DOWN, "%s", list.names[i]);
      /* ".r1": an hmma down with split_k 1 that forms out itself; its column tiles fit the arrival
       * counters the workspace keeps per token. */
      size_t length = strlen(list.names[i]);
      int marked = length > 3 && strcmp(list.names[i] + length - 3, ".r1") == 0;
      cr_expect_eq(v->fused_reduce, marked, "%s: fused_reduce %d", list.names[i], v->fused_reduce);
      if (marked) {
        cr_expect(v->op == VOLT8_OP_DOWN && family == VOLT8_KIND_GEMM_HMMA && v->split_k == 1, "%s", list.names[i]);
        /* Its twin without the mark is listed: the GPU test compares the two bit for bit. */
        char twin[128];
        snprintf(twin, sizeof twin, "%.*s", (int)(length - 3), list.names[i]);
        cr_expect(contains(&list, twin), "%s has no unfused twin %s", list.names[i], twin);
        cr_expect_geq(v->block_n, VOLT8_ARRIVAL_MIN_BLOCK_N, "%s", list.names[i]);
      }
      /* ".f128" / ".f256": an hmma, cc or tok variant whose weight loads carry that L2 prefetch
       * size; listed for sm_80 and later only. */
      int fetch = strstr(list.names[i], ".f128") ? 128 : strstr(list.names[i], ".f256") ? 256 : 0;
      if (target_arch == NULL) cr_expect_eq(fetch, 0, "%s is listed for sm_70", list.names[i]);
      if (family != VOLT8_KIND_GEMM_MMA) {
        char define[64];
        snprintf(define, sizeof define, "\n#define VOLT8_WEIGHT_FETCH %d\n", fetch);
        cr_expect(strstr(first.source, define) != NULL, "%s lacks %s", list.names[i], define + 1);
      } else {
        cr_expect_eq(fetch, 0, "%s: a weight fetch size on mma", list.names[i]);
        cr_expect(strstr(first.source, "\n#define VOLT8_WEIGHT_FETCH 1") == NULL &&
                      strstr(first.source, "\n#define VOLT8_WEIGHT_FETCH 2") == NULL,
                  "%s sets a weight fetch size", list.names[i]);
      }
    } else {
      cr_expect_eq(v->fused_reduce, 0, "%s", list.names[i]);
    }
    volt8_kernel_source_free(&first);
    volt8_kernel_source_free(&second);
  }
  volt8_codegen_names_free(list.names, list.count);
  volt8_ctx_destroy(ctx);
}

Test(codegen, every_variant_emits_marked_deterministic_source) {
  check_every_variant_emits(NULL);
  check_every_variant_emits("sm_90");
}

/* The m16n8k16 family is listed for sm_80 and later only; asked for by name on sm_70 it fails
 * with the arch error and the arch it needs, and a table naming it cannot slip through. */
Test(codegen, hmma_family_is_offered_from_sm_80_only) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  const char *archs[3] = {"sm_70", "sm_80", "sm_90"};
  for (int a = 0; a < 3; a++) {
    volt8_ctx *ctx = test_cpu_ctx(archs[a]);
    name_list list = list_ok(ctx, &shape);
    /* An experts handle can load every variant of the space (runtime/moe/experts.c). */
    cr_expect_lt(list.count, VOLT8_MAX_LOADED_KERNELS, "%s lists %d variants", archs[a], list.count);
    int gate_up = count_prefix(&list, "gate_up.hmma."), down = count_prefix(&list, "down.hmma.");
    if (a == 0) {
      cr_expect_eq(gate_up + down, 0, "sm_70 lists %d hmma variants", gate_up + down);
    } else {
      cr_expect_gt(gate_up, 0, "%s lists no gate_up hmma variant", archs[a]);
      cr_expect_gt(down, 0, "%s lists no down hmma variant", archs[a]);
      cr_expect(contains(&list, "gate_up.hmma.bm8.bn16.w4.sk4"), "%s", archs[a]);
      cr_expect(contains(&list, "down.hmma.bm1.bn64.w4.sk1"), "%s", archs[a]);
    }
    /* The rest of the space does not depend on the arch. */
    cr_expect(contains(&list, "gate_up.cc.bm1.bn8.w4.sk1.l16") && contains(&list, "down.mma.bm16.bn32.w4.sk1"), "%s",
              archs[a]);
    /* Weight fetch sizes (f tiles of every family that has them) need sm_80 too. */
    cr_expect_eq(count_infix(&list, ".f128") + count_infix(&list, ".f256") > 0, a > 0, "%s", archs[a]);
    const char *fetch_names[] = {"gate_up.cc.bm1.bn8.w4.sk1.l16.f128", "down.tok.bm1.bn16.w8.sk1.l2.f128"};
    for (int f = 0; f < 2; f++) {
      volt8_kernel_source fetch_source = {0};
      volt8_status fetch_status = volt8_codegen_emit(ctx, &shape, fetch_names[f], &fetch_source);
      cr_expect_eq(fetch_status, a == 0 ? VOLT8_ERR_ARCH_UNSUPPORTED : VOLT8_OK, "%s for %s: %s", fetch_names[f], archs[a],
                   volt8_last_error(ctx));
      if (a == 0) cr_expect(strstr(volt8_last_error(ctx), "needs sm_80") != NULL, "message: %s", volt8_last_error(ctx));
      volt8_kernel_source_free(&fetch_source);
    }
    volt8_kernel_source source = {0};
    volt8_status status = volt8_codegen_emit(ctx, &shape, "gate_up.hmma.bm2.bn16.w4.sk4", &source);
    if (a == 0) {
      cr_expect_eq(status, VOLT8_ERR_ARCH_UNSUPPORTED);
      cr_expect(strstr(volt8_last_error(ctx), "needs sm_80") != NULL, "message: %s", volt8_last_error(ctx));
      cr_expect_null(source.source);
    } else {
      cr_expect_eq(status, VOLT8_OK, "%s", volt8_last_error(ctx));
      cr_expect_eq(source.variant.kind, VOLT8_KIND_GEMM_HMMA);
      cr_expect(strstr(source.source, "mma.sync.aligned.m16n8k16") != NULL);
      volt8_kernel_source_free(&source);
    }
    volt8_codegen_names_free(list.names, list.count);
    volt8_ctx_destroy(ctx);
  }
}

Test(codegen, entries_are_unique_per_variant_and_shape) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shapes[2] = {VOLT8_MOE_SHAPE_INIT, VOLT8_MOE_SHAPE_INIT};
  shapes[1].intermediate_offset = 64;
  char *entries[2][128];
  int counts[2] = {0, 0};
  for (int s = 0; s < 2; s++) {
    name_list list = list_ok(ctx, &shapes[s]);
    cr_assert_leq(list.count, 128);
    for (int32_t i = 0; i < list.count; i++) {
      volt8_kernel_source source;
      cr_assert_eq(volt8_codegen_emit(ctx, &shapes[s], list.names[i], &source), VOLT8_OK, "%s", volt8_last_error(ctx));
      entries[s][counts[s]++] = strdup(source.entry);
      volt8_kernel_source_free(&source);
    }
    volt8_codegen_names_free(list.names, list.count);
  }
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < counts[s]; i++)
      for (int t = 0; t < 2; t++)
        for (int j = 0; j < counts[t]; j++)
          if (s != t || i != j) cr_expect_str_neq(entries[s][i], entries[t][j], "entry used twice");
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < counts[s]; i++) free(entries[s][i]);
  volt8_ctx_destroy(ctx);
}

Test(codegen, unknown_substitution_fails_naming_it) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  const char *keys[] = {"Z_HALF",          "THREADS",         "HIDDEN", "NUM_EXPERTS", "EXPERT_START",
                        "GLOBAL_EXPERTS",  "EXPERT_PARALLEL", "ENTRY"};
  const char *values[] = {"0", "128", "2560", "512", "0", "512", "0", "volt8_reduce_test"};
  char *source = NULL;
  /* ENTRY left out: the template uses it, so expansion must stop at it. */
  cr_assert_eq(volt8_template_expand_text(ctx, "templates/moe_reduce.cu", NULL, keys, values, 7, &source),
               VOLT8_ERR_CODEGEN);
  cr_expect_null(source);
  const char *message = volt8_last_error(ctx);
  cr_expect(strstr(message, "@{ENTRY}") != NULL, "message does not name the substitution: %s", message);
  cr_expect(strstr(message, "templates/moe_reduce.cu:") != NULL, "message does not name the template line: %s",
            message);

  cr_assert_eq(volt8_template_expand_text(ctx, "templates/moe_reduce.cu", NULL, keys, values, 8, &source), VOLT8_OK,
               "%s", volt8_last_error(ctx));
  cr_expect(strstr(source, "@{") == NULL);
  cr_expect(strstr(source, "volt8_reduce_test") != NULL);
  free(source);

  cr_expect_eq(volt8_template_expand_text(ctx, "templates/no_such_template.cu", NULL, keys, values, 4, &source),
               VOLT8_ERR_CODEGEN);
  cr_expect(strstr(volt8_last_error(ctx), "no_such_template.cu") != NULL, "%s", volt8_last_error(ctx));
  volt8_ctx_destroy(ctx);
}

/* The growing text the generated sources and the tools' reports are written into: bytes and formatted
 * text past several doublings of its first 4 KiB arrive whole and in order, and taking it empties it. */
Test(codegen, text_buffer_grows_and_keeps_every_byte) {
  volt8_text_buffer text = {0};
  cr_assert_null(volt8_text_take(&text), "an empty text is NULL");
  size_t expected_length = 0;
  for (int i = 0; i < 3000; i++) {
    if (i % 3 == 0) volt8_text_append(&text, "ab\0cd", 2); /* the length counts, not a NUL */
    else if (i % 3 == 1) volt8_text_append_string(&text, "xyz");
    else volt8_text_printf(&text, "[%04d]", i);
    expected_length += i % 3 == 0 ? 2 : i % 3 == 1 ? 3 : 6;
    cr_assert_eq(text.length, expected_length, "after append %d", i);
    cr_assert_eq(text.data[text.length], '\0', "no NUL after append %d", i);
  }
  volt8_text_printf(&text, "%s", "");
  volt8_text_printf(&text, "%*d", 9000, 7); /* one append larger than the room left and than a doubling */
  expected_length += 9000;
  char *taken = volt8_text_take(&text);
  cr_assert_not_null(taken);
  cr_assert_eq(strlen(taken), expected_length);
  size_t at = 0;
  for (int i = 0; i < 3000; i++) {
    char piece[8];
    if (i % 3 == 0) snprintf(piece, sizeof piece, "ab");
    else if (i % 3 == 1) snprintf(piece, sizeof piece, "xyz");
    else snprintf(piece, sizeof piece, "[%04d]", i);
    cr_assert(strncmp(taken + at, piece, strlen(piece)) == 0, "piece %d differs at byte %zu", i, at);
    at += strlen(piece);
  }
  cr_assert(taken[at + 8998] == ' ' && taken[at + 8999] == '7', "the wide number is cut");
  free(taken);
  cr_assert(text.data == NULL && text.length == 0 && text.capacity == 0 && !text.failed, "taking leaves it empty");
  volt8_text_printf(&text, "%d", 42);
  taken = volt8_text_take(&text);
  cr_assert_str_eq(taken, "42", "a taken buffer starts anew");
  free(taken);
}

/* Line `number` (from 1) of `text`, without its newline, into `line`; false past the end. */
static bool nth_line(const char *text, int number, char *line, size_t capacity) {
  for (int n = 1; n < number; n++) {
    text = strchr(text, '\n');
    if (!text) return false;
    text++;
  }
  if (!*text) return false;
  size_t length = strcspn(text, "\n");
  if (length >= capacity) length = capacity - 1;
  memcpy(line, text, length);
  line[length] = '\0';
  return true;
}

Test(codegen, substitution_keeps_template_line_numbers) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  volt8_kernel_source source;
  /* route: a template with substitutions and an @{include} (moe_common.cu). Every generated line
   * must be the line of the file and number that the #line directives before it name, so compiler
   * messages point into the templates. Lines holding a substitution are only counted. */
  cr_assert_eq(volt8_codegen_emit(ctx, &shape, "route", &source), VOLT8_OK, "%s", volt8_last_error(ctx));
  const char *text = source.source;
  char line[1024], expected[1024], path[256] = "";
  int number = 0, compared = 0, substituted = 0, includes = 0;
  cr_assert(nth_line(text, 1, line, sizeof line) && strncmp(line, "// generated from templates/moe_route.cu", 40) == 0,
            "%s", line);
  cr_assert(nth_line(text, 2, line, sizeof line) && strncmp(line, "// volt8 codegen version", 24) == 0, "%s", line);
  for (int output = 3; nth_line(text, output, line, sizeof line); output++) {
    if (sscanf(line, "#line %d \"%255[^\"]\"", &number, path) == 2) {
      includes += strcmp(path, "templates/moe_common.cu") == 0;
      continue;
    }
    const volt8_embedded_file *file = volt8_embedded_find(path);
    cr_assert_not_null(file, "generated line %d follows #line for %s, which is not a template", output, path);
    cr_assert(nth_line(file->data, number, expected, sizeof expected), "generated line %d: %s has no line %d", output,
              path, number);
    if (strstr(expected, "@{")) {
      substituted++;
    } else {
      cr_expect_str_eq(line, expected, "generated line %d is not line %d of %s", output, number, path);
      compared++;
    }
    number++;
  }
  cr_expect_eq(includes, 1, "moe_common.cu included %d times", includes);
  cr_expect_gt(substituted, 5);
  const volt8_embedded_file *route = volt8_embedded_find("templates/moe_route.cu");
  cr_assert_not_null(route);
  cr_expect_str_eq(path, "templates/moe_route.cu", "the source ends in %s", path);
  cr_expect(!nth_line(route->data, number, expected, sizeof expected), "the route's lines from %d are missing", number);
  cr_expect_gt(compared, 300);
  volt8_kernel_source_free(&source);
  volt8_ctx_destroy(ctx);
}

/* The layout constants and the work-item start are written once (moe_expert_layout.cu, moe_common.cu)
 * and every routed GEMM family's source carries them from there. */
Test(codegen, gemm_families_share_layout_constants_and_work_item_start) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  const char *variants[] = {"gate_up.cc.bm2.bn8.w4.sk1.l16", "down.mma.bm16.bn32.w4.sk1", "down.hmma.bm4.bn128.w4.sk1"};
  const char *templates[] = {"templates/moe_gemm_cc.cu", "templates/moe_gemm_mma.cu", "templates/moe_gemm_hmma.cu"};
  const char *arches[] = {NULL, NULL, "sm_90"};
  for (int v = 0; v < 3; v++) {
    volt8_ctx *ctx = test_cpu_ctx(arches[v]);
    volt8_kernel_source source;
    cr_assert_eq(volt8_codegen_emit(ctx, &shape, variants[v], &source), VOLT8_OK, "%s: %s",
                 variants[v], volt8_last_error(ctx));
    const char *layout = strstr(source.source, "#line 1 \"templates/moe_expert_layout.cu\"");
    cr_assert_not_null(layout, "%s does not include moe_expert_layout.cu", variants[v]);
    cr_expect_null(strstr(layout + 1, "#line 1 \"templates/moe_expert_layout.cu\""), "%s includes it twice", variants[v]);
    const char *declaration = strstr(source.source, "kNumExperts = ");
    cr_assert_not_null(declaration, "%s: no kNumExperts", variants[v]);
    cr_expect(declaration > layout && !strstr(declaration + 1, "kNumExperts = "), "%s: kNumExperts declared outside the layout file",
              variants[v]);
    cr_expect_not_null(strstr(source.source, "  VOLT8_READ_WORK_ITEM(counters["), "%s does not start with the shared work-item read",
                       variants[v]);
    const volt8_embedded_file *family = volt8_embedded_find(templates[v]);
    cr_assert_not_null(family);
    cr_expect_null(strstr(family->data, "@{NUM_EXPERTS}"), "%s spells the expert count itself", templates[v]);
    cr_expect_null(strstr(family->data, "@{SCALE_EXPERT_STRIDE}"), "%s spells the scale layout itself", templates[v]);
    volt8_kernel_source_free(&source);
    volt8_ctx_destroy(ctx);
  }
}

/* An expert-parallel rank's kernels are variants of their own (shape key, entry, hence cache key),
 * with the range as enumerators; a range of all experts is the shape of before, whatever its spelling. */
Test(codegen, expert_range_is_part_of_the_shape_key_and_the_source) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape rank = VOLT8_MOE_SHAPE_INIT, all = VOLT8_MOE_SHAPE_INIT, spelled = VOLT8_MOE_SHAPE_INIT;
  rank.num_experts = 128, rank.expert_start = 256, rank.global_experts = 512;
  spelled.global_experts = 512;  /* start 0, all 512: no expert parallelism */
  const char *variants[] = {"route", "reduce", "gate_up.cc.bm1.bn8.w4.sk1.l16", "down.tok.bm1.bn16.w4.sk1.l2",
                            "down.mma.bm16.bn32.w4.sk1"};
  for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
    volt8_kernel_source ep, plain, same;
    cr_assert_eq(volt8_codegen_emit(ctx, &rank, variants[v], &ep), VOLT8_OK, "%s: %s", variants[v], volt8_last_error(ctx));
    cr_assert_eq(volt8_codegen_emit(ctx, &all, variants[v], &plain), VOLT8_OK, "%s", volt8_last_error(ctx));
    cr_assert_eq(volt8_codegen_emit(ctx, &spelled, variants[v], &same), VOLT8_OK, "%s", volt8_last_error(ctx));
    cr_expect(strstr(ep.entry, "__H2560_I160_E128_b128x128_o32_x256of512") != NULL, "%s: entry %s", variants[v], ep.entry);
    cr_expect(strstr(plain.entry, "__H2560_I160_E512_b128x128_o32") != NULL && !strstr(plain.entry, "of512"),
              "%s: entry %s", variants[v], plain.entry);
    cr_expect_str_eq(same.source, plain.source, "%s: all experts spelled with global_experts is another source", variants[v]);
    cr_expect_not_null(strstr(ep.source, "enum : int { kExpertStart = 256, kGlobalExperts = 512 };"), "%s", variants[v]);
    cr_expect_not_null(strstr(ep.source, "#define VOLT8_EXPERT_PARALLEL 1"), "%s", variants[v]);
    cr_expect_not_null(strstr(plain.source, "enum : int { kExpertStart = 0, kGlobalExperts = 512 };"), "%s", variants[v]);
    cr_expect_not_null(strstr(plain.source, "#define VOLT8_EXPERT_PARALLEL 0"), "%s", variants[v]);
    cr_expect_null(strstr(plain.source, "constexpr int kExpertStart"), "%s: a constexpr would be written into the PTX",
                   variants[v]);
    volt8_kernel_source_free(&ep), volt8_kernel_source_free(&plain), volt8_kernel_source_free(&same);
  }
  volt8_ctx_destroy(ctx);
}

static void expect_invalid_shape(volt8_ctx *ctx, const volt8_moe_shape *shape, const char *field) {
  char **names = NULL;
  int32_t count = 0;
  cr_expect_eq(volt8_codegen_list(ctx, shape, &names, &count), VOLT8_ERR_INVALID_ARGUMENT, "shape with bad %s accepted",
               field);
  char expected[64];
  snprintf(expected, sizeof expected, " %s=", field);
  cr_expect(strstr(volt8_last_error(ctx), expected) != NULL, "message does not name %s: %s", field,
            volt8_last_error(ctx));
  volt8_kernel_source source;
  cr_expect_eq(volt8_codegen_emit(ctx, shape, "route", &source), VOLT8_ERR_INVALID_ARGUMENT);
}

Test(codegen, invalid_shapes_are_rejected_naming_the_field) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.intermediate = 150;
  expect_invalid_shape(ctx, &shape, "intermediate");
  shape = (volt8_moe_shape)VOLT8_MOE_SHAPE_INIT;
  shape.intermediate_offset = 20;
  expect_invalid_shape(ctx, &shape, "intermediate_offset");
  shape = (volt8_moe_shape)VOLT8_MOE_SHAPE_INIT;
  shape.intermediate_offset = 128;
  expect_invalid_shape(ctx, &shape, "intermediate_offset");
  shape = (volt8_moe_shape)VOLT8_MOE_SHAPE_INIT;
  shape.block_n = 1; /* offset 32 is not allowed with per-row scales */
  expect_invalid_shape(ctx, &shape, "intermediate_offset");
  shape = (volt8_moe_shape)VOLT8_MOE_SHAPE_INIT;
  shape.block_k = 64;
  expect_invalid_shape(ctx, &shape, "block_k");
  shape = (volt8_moe_shape)VOLT8_MOE_SHAPE_INIT;
  shape.hidden = 2568;
  expect_invalid_shape(ctx, &shape, "hidden");
  shape = (volt8_moe_shape)VOLT8_MOE_SHAPE_INIT;
  shape.num_experts = 0;
  expect_invalid_shape(ctx, &shape, "num_experts");
  shape = (volt8_moe_shape)VOLT8_MOE_SHAPE_INIT;
  shape.expert_start = 5; /* a range needs global_experts */
  expect_invalid_shape(ctx, &shape, "expert_start");
  shape = (volt8_moe_shape)VOLT8_MOE_SHAPE_INIT;
  shape.num_experts = 128, shape.expert_start = 448, shape.global_experts = 512;
  expect_invalid_shape(ctx, &shape, "global_experts");
  shape.expert_start = -128;
  expect_invalid_shape(ctx, &shape, "expert_start");

  shape = (volt8_moe_shape)VOLT8_MOE_SHAPE_INIT;
  shape.size = 4;
  char **names = NULL;
  int32_t count = 0;
  cr_expect_eq(volt8_codegen_list(ctx, &shape, &names, &count), VOLT8_ERR_INVALID_ARGUMENT);
  cr_expect_eq(volt8_codegen_list(ctx, NULL, &names, &count), VOLT8_ERR_INVALID_ARGUMENT);
  volt8_ctx_destroy(ctx);
}

Test(codegen, unknown_variant_is_not_found) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  volt8_kernel_source source;
  const char *bad[] = {"gate_up.cc.bm3.bn8.w4.sk1.l16", "down.mma.bm8.bn32.w4.sk1.l4", "gate_up.tok.bm1.bn16.w4.sk1.l2",
                       "down.tok.bm2.bn16.w4.sk1.l2", "gate_up.cc.bm1.bn8.w4.sk1.l16.o7", "down.tok.bm1.bn16.w4.sk1.l2.o10",
                       /* the fused reduce: hmma down tiles that carry the mark only, and only r1 */
                       "gate_up.hmma.bm1.bn8.w8.sk8.r1", "down.cc.bm1.bn64.w4.sk1.l2.r1", "down.hmma.bm1.bn128.w8.sk1.r1",
                       "down.hmma.bm1.bn128.w4.sk1.r2", "down.hmma.bm1.bn128.w4.sk1.r1.o5",
                       /* the weight fetch size: hmma tiles that carry it, 128 or 256 only, before .r */
                       "gate_up.hmma.bm1.bn8.w8.sk8.f64", "gate_up.hmma.bm1.bn8.w8.sk8.f512", "gate_up.hmma.bm1.bn8.w4.sk4.f128",
                       "gate_up.cc.bm1.bn4.w4.sk1.l32.f128", "down.mma.bm8.bn32.w4.sk1.f128", "down.hmma.bm1.bn128.w4.sk1.r1.f128",
                       "sideways", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_expect_eq(volt8_codegen_emit(ctx, &shape, bad[i], &source), VOLT8_ERR_NOT_FOUND, "'%s' accepted", bad[i]);
    cr_expect(strstr(volt8_last_error(ctx), bad[i]) != NULL, "%s", volt8_last_error(ctx));
    cr_expect_null(source.source);
  }
  volt8_ctx_destroy(ctx);
}

/* K = I = 144 and H = 2064 are multiples of 16 but not of 32 or 128: both families must still be offered. */
Test(codegen, unpadded_dimensions_keep_both_families) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.hidden = 2064;
  shape.intermediate = 144;
  shape.intermediate_offset = 96;
  name_list list = list_ok(ctx, &shape);
  const char *prefixes[] = {"gate_up.cc.", "gate_up.mma.", "down.cc.", "down.mma.", "down.tok."};
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
    cr_expect_gt(count_prefix(&list, prefixes[i]), 0, "no %s variant for H=2064 I=144", prefixes[i]);
  volt8_codegen_names_free(list.names, list.count);
  volt8_ctx_destroy(ctx);
}

Test(codegen, public_variant_count_and_name) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  name_list list = list_ok(ctx, &shape);
  int32_t count = 0;
  cr_assert_eq(volt8_variant_count(ctx, &shape, &count), VOLT8_OK, "%s", volt8_last_error(ctx));
  cr_expect_eq(count, list.count);
  char name[128];
  for (int32_t i = 0; i < count; i++) {
    cr_assert_eq(volt8_variant_name(ctx, &shape, i, name, sizeof name), VOLT8_OK, "%s", volt8_last_error(ctx));
    cr_expect_str_eq(name, list.names[i]);
  }
  cr_expect_eq(volt8_variant_name(ctx, &shape, count, name, sizeof name), VOLT8_ERR_INVALID_ARGUMENT);
  cr_expect_eq(volt8_variant_name(ctx, &shape, -1, name, sizeof name), VOLT8_ERR_INVALID_ARGUMENT);
  cr_expect_eq(volt8_variant_name(ctx, &shape, 0, name, 3), VOLT8_ERR_INVALID_ARGUMENT);
  cr_expect_eq(volt8_variant_count(ctx, &shape, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  volt8_codegen_names_free(list.names, list.count);
  volt8_ctx_destroy(ctx);
}

/* The target arch reaches every way into the catalogue: the list for an sm_90 ctx and `volt8 list --arch
 * sm_90` agree, and `volt8 list --sources DIR` writes each listed variant's source as emitted; hmma
 * sources differ between sm_80 (bit-level conversion) and sm_90 (the FP8 instruction). */
Test(codegen, target_arch_reaches_the_cli) {
  const char *archs[2] = {"sm_90", NULL};
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.intermediate_offset = 96;
  char argument[256], command[8192], dir[4096];
  shape_argument(&shape, argument, sizeof argument);
  for (int a = 0; a < 2; a++) {
    volt8_ctx *ctx = test_cpu_ctx(archs[a]);
    name_list list = list_ok(ctx, &shape);
    char *embedded = joined_names(&list);
    snprintf(command, sizeof command, "'%s' list %s%s --shape %s", VOLT8_CLI_PATH, archs[a] ? "--arch " : "",
             archs[a] ? archs[a] : "", argument);
    char *cli = command_output(command);
    cr_assert_not_null(cli, "failed: %s", command);
    cr_expect_str_eq(cli, embedded, "%s differs from the catalogue's list", command);
    cr_expect_eq(strstr(cli, ".hmma.") != NULL, archs[a] != NULL, "%s", command);
    free(cli);
    test_make_temp_dir(dir, sizeof dir, "volt8_sources");
    snprintf(command, sizeof command, "'%s' list %s%s --shape %s --sources '%s'", VOLT8_CLI_PATH,
             archs[a] ? "--arch " : "", archs[a] ? archs[a] : "", argument, dir);
    cli = command_output(command);
    cr_assert_not_null(cli, "failed: %s", command);
    cr_expect_str_eq(cli, embedded, "%s names other variants", command);
    for (int32_t i = 0; i < list.count; i += 7) {
      volt8_kernel_source source;
      cr_assert_eq(volt8_codegen_emit(ctx, &shape, list.names[i], &source), VOLT8_OK, "%s", volt8_last_error(ctx));
      char path[8192];
      snprintf(path, sizeof path, "%s/%s.cu", dir, source.entry);
      size_t bytes = 0;
      char *written = test_read_whole(path, &bytes);
      cr_expect_str_eq(written, source.source, "%s is not %s's source", path, list.names[i]);
      free(written);
      volt8_kernel_source_free(&source);
    }
    test_remove_tree(dir);
    free(cli);
    free(embedded);
    volt8_codegen_names_free(list.names, list.count);
    volt8_ctx_destroy(ctx);
  }
  const char *variant = "gate_up.hmma.bm2.bn16.w4.sk4";
  const char *conversions[2] = {"constexpr bool kFp8Convert = 1;", "constexpr bool kFp8Convert = 0;"};
  for (int a = 0; a < 2; a++) {
    volt8_ctx *ctx = test_cpu_ctx(a == 0 ? "sm_90" : "sm_80");
    volt8_kernel_source source;
    cr_assert_eq(volt8_codegen_emit(ctx, &shape, variant, &source), VOLT8_OK, "%s", volt8_last_error(ctx));
    cr_expect(strstr(source.source, conversions[a]) != NULL, "%s source lacks %s", a == 0 ? "sm_90" : "sm_80",
              conversions[a]);
    volt8_kernel_source_free(&source);
    volt8_ctx_destroy(ctx);
  }
}

/* Every variant of every kind's space prints to a name that reads back to the same variant; names
 * differing in any part, or naming no tile of the space, read back to none. */
Test(codegen, names_print_from_the_variant_and_read_back) {
  const char *archs[2] = {"sm_70", "sm_90"};
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  int checked = 0;
  for (int a = 0; a < 2; a++) {
    volt8_variant *variants = NULL;
    int32_t count = 0;
    cr_assert_eq(volt8_catalogue_list(NULL, &shape, a == 0 ? 70 : 90, &variants, &count), VOLT8_OK, "%s",
                 volt8_last_error(NULL));
    for (int32_t i = 0; i < count; i++) {
      char name[VOLT8_VARIANT_NAME_BYTES];
      volt8_variant_format(&variants[i], name, sizeof name);
      volt8_variant read;
      cr_assert(volt8_variant_parse(name, &read), "%s (%s) does not read back", name, archs[a]);
      cr_assert(volt8_variant_equal(&read, &variants[i]), "%s reads back as another variant", name);
      cr_expect_eq(volt8_variant_find(variants, count, name), i, "%s", name);
      volt8_op op;
      cr_expect_eq(volt8_variant_name_op(name, &op), read.op <= VOLT8_OP_DOWN, "%s", name);
      checked++;
    }
    free(variants);
  }
  cr_expect_gt(checked, 150);
  const char *not_names[] = {"gate_up.cc.bm1.bn4.w4.sk1.l32.", "gate_up.cc.bm01.bn4.w4.sk1.l32", "gate_up.cc.bm1.bn4.w4.sk1",
                             "gate_up.cc.bm1.bn4.sk1.w4.l32", "gate_up.cc.bm1.bn4.w4.sk1.l32.x1", "up.cc.bm1.bn4.w4.sk1.l32",
                             "gate_up.cc.bm1.bn4.w4.sk1.l32.r1", "gate_up.cc.bm+1.bn4.w4.sk1.l32", "Route", "route.", ""};
  for (size_t i = 0; i < sizeof not_names / sizeof not_names[0]; i++) {
    volt8_variant read;
    cr_expect_not(volt8_variant_parse(not_names[i], &read), "'%s' reads as a variant", not_names[i]);
  }
}

