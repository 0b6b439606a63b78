/* The parameter lists of runtime/moe/kernels/kernel_params.h and runtime/sampler/sampler_params.h, from
 * which the launchers build every argument array, against the parameters each generated kernel
 * declares: for every variant of a few shapes at sm_70 and sm_90 and for the sampler's three
 * kernels, the types (const and __restrict__ aside), names and order, and the bytes the launcher
 * passes for each. The generated source is run through the C preprocessor (`cpp -P`), which
 * resolves the templates' #if branches as NVRTC would. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jit/template.h"
#include "moe/kernels/catalogue.h"
#include "moe/kernels/kernel_params.h"
#include "moe/replay.h"
#include "sampler/sampler_params.h"
#include "test_support.h"

#define MAX_PARAMS 24
#define WORD_BYTES 64

typedef struct declared_params {
  char types[MAX_PARAMS][WORD_BYTES];
  char names[MAX_PARAMS][WORD_BYTES];
  int count;
} declared_params;

static char *preprocess(const char *source) {
  char path[] = "/tmp/volt8_kernel_params_XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0, "mkstemp failed");
  FILE *file = fdopen(fd, "w");
  fputs(source, file);
  fclose(file);
  char command[128];
  snprintf(command, sizeof command, "cpp -P -w -x c %s", path);
  FILE *pipe = popen(command, "r");
  cr_assert(pipe, "cannot run %s", command);
  size_t size = 0, capacity = 1 << 16;
  char *text = malloc(capacity);
  size_t got;
  while ((got = fread(text + size, 1, capacity - size - 1, pipe)) > 0) {
    size += got;
    if (size + 1 == capacity) text = realloc(text, capacity *= 2);
  }
  text[size] = '\0';
  int status = pclose(pipe);
  unlink(path);
  cr_assert_eq(status, 0, "%s failed (status %d)", command, status);
  return text;
}

/* One declared parameter ("const int *__restrict__ topk_ids") as type "int *" and name "topk_ids". */
static void split_param(const char *text, size_t length, char *type, char *name) {
  char words[16][WORD_BYTES];
  int count = 0;
  for (size_t i = 0; i < length && count < 16;) {
    if (text[i] == '*') {
      snprintf(words[count++], WORD_BYTES, "*");
      i++;
    } else if (text[i] == '_' || (text[i] >= 'a' && text[i] <= 'z') || (text[i] >= 'A' && text[i] <= 'Z') ||
               (text[i] >= '0' && text[i] <= '9')) {
      size_t start = i;
      while (i < length && (text[i] == '_' || (text[i] >= 'a' && text[i] <= 'z') || (text[i] >= 'A' && text[i] <= 'Z') ||
                            (text[i] >= '0' && text[i] <= '9')))
        i++;
      if (strncmp(text + start, "const", i - start) != 0 && strncmp(text + start, "__restrict__", i - start) != 0)
        snprintf(words[count++], WORD_BYTES, "%.*s", (int)(i - start), text + start);
    } else {
      i++;
    }
  }
  type[0] = '\0';
  snprintf(name, WORD_BYTES, "%s", count ? words[count - 1] : "");
  for (int i = 0; i + 1 < count; i++) {
    strcat(type, i ? " " : "");
    strcat(type, words[i]);
  }
}

/* 1 when `name` at text + at is the name a __global__ declaration gives its kernel (a host
 * function of the same name, as the sampler's rules have, is not). */
static int is_kernel_name(const char *text, const char *at) {
  for (const char *back = at; back > text; back--) {
    if (*back == ';' || *back == '{' || *back == '}') return 0;
    if (strncmp(back, "__global__", 10) == 0) return 1;
  }
  return 0;
}

/* The parameters of kernel `entry` in the preprocessed source. */
static void declared(const char *text, const char *entry, declared_params *out) {
  memset(out, 0, sizeof *out);
  const char *open = text;
  size_t entry_length = strlen(entry);
  while ((open = strstr(open, entry)) && (open[entry_length] != '(' || !is_kernel_name(text, open))) open += entry_length;
  cr_assert(open, "no __global__ declaration of %s in its generated source", entry);
  open += entry_length + 1;
  const char *close = strchr(open, ')');
  cr_assert(close, "unterminated parameter list of %s", entry);
  for (const char *start = open; start < close && out->count < MAX_PARAMS;) {
    const char *end = memchr(start, ',', (size_t)(close - start));
    if (!end) end = close;
    split_param(start, (size_t)(end - start), out->types[out->count], out->names[out->count]);
    out->count++;
    start = end + 1;
  }
}

static size_t type_bytes(const char *type) {
  size_t length = strlen(type);
  if (length && type[length - 1] == '*') return 8; /* device pointers are 64-bit */
  if (strcmp(type, "long long") == 0 || strcmp(type, "unsigned long long") == 0) return 8;
  if (strcmp(type, "int") == 0 || strcmp(type, "float") == 0) return 4;
  return 0;
}

/* "" when `signature` matches the declaration; else what differs first. */
static void compare(const volt8_kernel_signature *signature, const declared_params *params, char *why, size_t why_size) {
  why[0] = '\0';
  if (signature->count != params->count) {
    snprintf(why, why_size, "%s lists %d parameters, the template declares %d", signature->kernel, signature->count,
             params->count);
    return;
  }
  for (int i = 0; i < params->count; i++) {
    const volt8_kernel_param *param = &signature->params[i];
    if (strcmp(param->type, params->types[i]) || strcmp(param->name, params->names[i])) {
      snprintf(why, why_size, "%s parameter %d is \"%s %s\" in kernel_params.h, \"%s %s\" in the template",
               signature->kernel, i, param->type, param->name, params->types[i], params->names[i]);
      return;
    }
    if (param->bytes != type_bytes(params->types[i])) {
      snprintf(why, why_size, "%s parameter %d (%s): the launcher passes %zu bytes for a %s", signature->kernel, i,
               param->name, param->bytes, params->types[i]);
      return;
    }
  }
}

static void check_variant(volt8_ctx *ctx, const volt8_moe_shape *shape, const char *variant, const char *arch) {
  volt8_kernel_source source = {0};
  cr_assert_eq(volt8_codegen_emit(ctx, shape, variant, &source), VOLT8_OK, "%s at %s: %s", variant, arch,
               volt8_last_error(ctx));
  char *text = preprocess(source.source);
  declared_params params;
  declared(text, source.entry, &params);
  char why[512];
  compare(volt8_variant_signature(&source.variant), &params, why, sizeof why);
  cr_expect_str_empty(why, "%s at %s (hidden %d, intermediate %d, block_n %d): %s", variant, arch, shape->hidden,
                      shape->intermediate, shape->block_n, why);
  free(text);
  volt8_kernel_source_free(&source);
}

static void check_shape(const char *arch, const volt8_moe_shape *shape) {
  volt8_ctx *ctx = test_cpu_ctx(arch);
  char **names = NULL;
  int32_t count = 0;
  cr_assert_eq(volt8_codegen_list(ctx, shape, &names, &count), VOLT8_OK, "%s", volt8_last_error(ctx));
  check_variant(ctx, shape, "route", arch);
  check_variant(ctx, shape, "reduce", arch);
  for (int32_t i = 0; i < count; i++) check_variant(ctx, shape, names[i], arch);
  volt8_codegen_names_free(names, count);
  volt8_ctx_destroy(ctx);
}

TestSuite(kernel_params, .timeout = 600);

Test(kernel_params, every_variant_of_the_reference_shape_at_sm_70_and_sm_90) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  check_shape("sm_70", &shape);
  check_shape("sm_90", &shape);
}

Test(kernel_params, every_variant_of_a_small_per_channel_shape_at_sm_90) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  shape.hidden = 256;
  shape.intermediate = 128;
  shape.num_experts = 4;
  shape.block_n = 1;
  shape.intermediate_offset = 0;
  check_shape("sm_90", &shape);
}

Test(kernel_params, the_rejection_sampler_kernels) {
  volt8_ctx *ctx = test_cpu_ctx("sm_70");
  const char *const keys[2] = {"ROW_THREADS", "FINISH_THREADS"};
  const char *const values[2] = {"512", "1024"};
  char *source = NULL;
  cr_assert_eq(volt8_template_expand_text(ctx, "templates/rejection_sample.cu", NULL, keys, values, 2, &source), VOLT8_OK,
               "%s", volt8_last_error(ctx));
  char *text = preprocess(source);
  const volt8_kernel_signature *signatures[3] = {&volt8_rejection_rows_signature, &volt8_rejection_walk_signature,
                                                 &volt8_rejection_draw_signature};
  for (int i = 0; i < 3; i++) {
    declared_params params;
    declared(text, signatures[i]->kernel, &params);
    char why[512];
    compare(signatures[i], &params, why, sizeof why);
    cr_expect_str_empty(why, "%s", why);
  }
  free(text);
  free(source);
  volt8_ctx_destroy(ctx);
}

/* The check can fail: a fused-reduce down's declaration against the unfused list, and a list with
 * two parameters swapped, are both reported. */
Test(kernel_params, a_list_that_differs_from_the_template_is_reported) {
  volt8_ctx *ctx = test_cpu_ctx("sm_90");
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  char **names = NULL;
  int32_t count = 0;
  cr_assert_eq(volt8_codegen_list(ctx, &shape, &names, &count), VOLT8_OK, "%s", volt8_last_error(ctx));
  volt8_kernel_source fused = {0};
  for (int32_t i = 0; i < count && !fused.variant.fused_reduce; i++) {
    volt8_kernel_source_free(&fused);
    cr_assert_eq(volt8_codegen_emit(ctx, &shape, names[i], &fused), VOLT8_OK, "%s", volt8_last_error(ctx));
  }
  cr_assert(fused.variant.fused_reduce, "no fused-reduce down at sm_90 for the reference shape");
  char *text = preprocess(fused.source);
  declared_params params;
  declared(text, fused.entry, &params);
  char why[512];
  compare(&volt8_down_signature, &params, why, sizeof why);
  cr_expect_str_eq(why, "down lists 10 parameters, the template declares 13", "%s", why[0] ? why : "no difference reported");
  volt8_kernel_param swapped[VOLT8_MAX_KERNEL_PARAMS];
  memcpy(swapped, volt8_down_fused_signature.params, sizeof swapped[0] * (size_t)volt8_down_fused_signature.count);
  volt8_kernel_param first = swapped[0];
  swapped[0] = swapped[1];
  swapped[1] = first;
  volt8_kernel_signature wrong = {"down (swapped)", swapped, volt8_down_fused_signature.count};
  compare(&wrong, &params, why, sizeof why);
  cr_expect(strstr(why, "down (swapped) parameter 0 is \"unsigned char * weights\""), "%s", why);
  free(text);
  volt8_kernel_source_free(&fused);
  volt8_codegen_names_free(names, count);
  volt8_ctx_destroy(ctx);
}

/* An eager forward's recorded launch (moe/replay.h) holds each argument's value at an offset aligned
 * to its size, and the pointers built from it give back the values the launcher passed: the down's
 * list (pointers and ints, interleaved) and the route's (a long long among them). A fifth launch is
 * not recorded; the record says so. */
Test(kernel_params, a_recorded_launch_keeps_every_argument_value) {
  volt8_down_args down = {0};
  unsigned char *fields = (unsigned char *)&down;
  for (size_t i = 0; i < sizeof down; i++) fields[i] = (unsigned char)(i * 7 + 1);
  volt8_route_args route = {0};
  route.topk_ids = 0x1000;
  route.num_pairs = 37;
  route.warm_bytes = 1LL << 40;
  route.top_k = 8;
  route.out = 0x2000;
  volt8_launch_record record = {0};
  void *params[VOLT8_MAX_KERNEL_PARAMS];
  const volt8_kernel_signature *signatures[2] = {&volt8_down_fused_signature, &volt8_route_signature};
  void *args[2] = {&down, &route};
  for (int launch = 0; launch < VOLT8_REPLAY_MAX_NODES + 1; launch++) {
    volt8_kernel_params_fill(signatures[launch % 2], args[launch % 2], params);
    volt8_launch_record_add(&record, NULL, "test", 3, 4, 128, launch % 2, signatures[launch % 2], params);
  }
  cr_assert_eq(record.count, VOLT8_REPLAY_MAX_NODES);
  cr_assert(record.overflow);
  for (int launch = 0; launch < VOLT8_REPLAY_MAX_NODES; launch++) {
    const volt8_recorded_launch *recorded = &record.launches[launch];
    const volt8_kernel_signature *signature = signatures[launch % 2];
    cr_assert_eq(recorded->param_count, signature->count);
    cr_assert_eq(recorded->early, launch % 2);
    for (int p = 0; p < signature->count; p++) {
      size_t bytes = signature->params[p].bytes;
      cr_assert_eq(recorded->sizes[p], bytes);
      cr_assert_eq(recorded->offsets[p] % bytes, 0, "%s %s at offset %u", signature->kernel, signature->params[p].name,
                   recorded->offsets[p]);
      cr_assert(recorded->offsets[p] + bytes <= recorded->bytes && recorded->bytes <= sizeof recorded->values);
      cr_assert_eq(memcmp(recorded->values + recorded->offsets[p],
                          (unsigned char *)args[launch % 2] + signature->params[p].offset, bytes), 0,
                   "%s: the value of %s", signature->kernel, signature->params[p].name);
    }
  }
}
