/* The kernel catalogue (catalogue.h): the kinds, a variant's name printed and read back, the variant
 * space of a shape, and each variant's source. */
#include "moe/kernels/catalogue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx_internal.h"
#include "core/work_counts.h"
#include "moe/kernels/kind.h"

/* The kinds in the order their names sort among themselves does not matter: lists are sorted. */
static const volt8_kind_spec *const KINDS[VOLT8_KIND_COUNT] = {
    [VOLT8_KIND_GEMM_CC] = &volt8_kind_gemm_cc,     [VOLT8_KIND_GEMM_MMA] = &volt8_kind_gemm_mma,
    [VOLT8_KIND_GEMM_HMMA] = &volt8_kind_gemm_hmma, [VOLT8_KIND_DOWN_TOK] = &volt8_kind_down_tok,
    [VOLT8_KIND_ROUTE] = &volt8_kind_route,         [VOLT8_KIND_REDUCE] = &volt8_kind_reduce,
    [VOLT8_KIND_SINGLE] = &volt8_kind_single,       [VOLT8_KIND_GEMM_TILE] = &volt8_kind_gemm_tile,
    [VOLT8_KIND_REDUCE_HALF] = &volt8_kind_reduce_half, [VOLT8_KIND_GEMM_RAW] = &volt8_kind_gemm_raw,
    [VOLT8_KIND_ROUTE_PARTS] = &volt8_kind_route_parts,
};

static const char *const OP_NAMES[] = {"gate_up", "down", "route", "reduce", "single", "reduce_half", "route_parts"};

static const volt8_kind_spec *spec_of(const volt8_variant *variant) {
  return (unsigned)variant->kind < VOLT8_KIND_COUNT ? KINDS[variant->kind] : NULL;
}

void volt8_variant_format(const volt8_variant *v, char *buf, size_t buf_size) {
  const volt8_kind_spec *spec = spec_of(v);
  if (!spec || !spec->family) {
    snprintf(buf, buf_size, "%s", spec ? OP_NAMES[spec->op] : "?");
    return;
  }
  int used = snprintf(buf, buf_size, "%s.%s.bm%d.bn%d.w%d.sk%d", OP_NAMES[v->op], spec->family, v->block_m, v->block_n,
                      v->warps, v->split_k);
  const struct {
    const char *key;
    int32_t value;
  } optional[] = {{"l", v->lanes}, {"c", v->column_groups}, {"o", v->min_blocks}, {"f", v->fetch_bytes},
                  {"r", v->fused_reduce}};
  for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++) {
    if (!optional[i].value || used < 0 || (size_t)used >= buf_size) continue;
    used += snprintf(buf + used, buf_size - (size_t)used, ".%s%d", optional[i].key, optional[i].value);
  }
}

int volt8_variant_equal(const volt8_variant *a, const volt8_variant *b) {
  return a->kind == b->kind && a->op == b->op && a->block_m == b->block_m && a->block_n == b->block_n &&
         a->warps == b->warps && a->split_k == b->split_k && a->lanes == b->lanes &&
         a->column_groups == b->column_groups && a->min_blocks == b->min_blocks && a->fetch_bytes == b->fetch_bytes &&
         a->fused_reduce == b->fused_reduce;
}

static int tile_of(const volt8_kind_spec *spec, const volt8_variant *v) {
  if (!spec->family || v->op > VOLT8_OP_DOWN) return 0;
  const volt8_variant_space *kind_space = spec->space;
  int block_m_known = 0;
  for (int32_t i = 0; i < kind_space->block_m_count; i++) block_m_known |= kind_space->block_ms[i] == v->block_m;
  for (int32_t i = 0; block_m_known && i < kind_space->tile_counts[v->op]; i++) {
    const volt8_tile *t = &kind_space->tiles[v->op][i];
    if (t->block_n == v->block_n && t->warps == v->warps && t->split_k == v->split_k && t->lanes == v->lanes &&
        t->column_groups == v->column_groups && t->min_blocks == v->min_blocks && t->fetch_bytes == v->fetch_bytes &&
        t->fused_reduce == v->fused_reduce)
      return 1;
  }
  return 0;
}

int volt8_variant_name_op(const char *name, volt8_op *out_op) {
  for (int op = VOLT8_OP_GATE_UP; op <= VOLT8_OP_DOWN; op++) {
    size_t length = strlen(OP_NAMES[op]);
    if (strncmp(name, OP_NAMES[op], length) == 0 && name[length] == '.') {
      *out_op = (volt8_op)op;
      return 1;
    }
  }
  return 0;
}

/* The fields after op.family., in the order names print them; 0 unless they print back as given. */
static int parse_fields(const char *text, volt8_variant *v) {
  int32_t *fields[] = {&v->block_m, &v->block_n, &v->warps, &v->split_k, &v->lanes, &v->column_groups,
                       &v->min_blocks, &v->fetch_bytes, &v->fused_reduce};
  const char *keys[] = {"bm", "bn", "w", "sk", "l", "c", "o", "f", "r"};
  size_t key = 0;
  for (const char *at = text; *at;) {
    while (key < sizeof keys / sizeof keys[0] && strncmp(at, keys[key], strlen(keys[key])) != 0) key++;
    if (key == sizeof keys / sizeof keys[0]) return 0;
    at += strlen(keys[key]);
    char *end = NULL;
    long value = strtol(at, &end, 10);
    if (end == at || value <= 0 || value > 1 << 20 || (*end && *end != '.')) return 0;
    *fields[key++] = (int32_t)value;
    at = *end ? end + 1 : end;
  }
  return v->block_m && v->block_n && v->warps && v->split_k;
}

int volt8_variant_parse(const char *name, volt8_variant *out) {
  memset(out, 0, sizeof *out);
  if (!name) return 0;
  for (int k = 0; k < VOLT8_KIND_COUNT; k++) {
    if (!KINDS[k]->family && strcmp(name, OP_NAMES[KINDS[k]->op]) == 0) {
      *out = (volt8_variant){.kind = (volt8_kind)k, .op = KINDS[k]->op};
      return 1;
    }
  }
  volt8_op op;
  if (!volt8_variant_name_op(name, &op)) return 0;
  const char *family = name + strlen(OP_NAMES[op]) + 1;
  for (int k = 0; k < VOLT8_KIND_COUNT; k++) {
    const char *kind_family = KINDS[k]->family;
    size_t length = kind_family ? strlen(kind_family) : 0;
    if (!kind_family || strncmp(family, kind_family, length) != 0 || family[length] != '.') continue;
    volt8_variant v = {.kind = (volt8_kind)k, .op = op};
    if (!parse_fields(family + length + 1, &v) || !tile_of(KINDS[k], &v)) return 0;
    char printed[VOLT8_VARIANT_NAME_BYTES];
    volt8_variant_format(&v, printed, sizeof printed);
    if (strcmp(printed, name) != 0) return 0;
    *out = v;
    return 1;
  }
  return 0;
}

int volt8_variant_emulated(const volt8_variant *variant, int32_t arch) {
  const volt8_kind_spec *spec = spec_of(variant);
  return spec && spec->emulated_from_arch && arch >= spec->emulated_from_arch;
}

int volt8_kind_large_items(volt8_kind kind) {
  return (unsigned)kind < VOLT8_KIND_COUNT && KINDS[kind]->large_items;
}

/* "H2560_I160_E512_b128x128_o32": the shape part of every entry name; a rank of expert parallelism
 * adds its range ("..._o32_x128of512": E experts from global expert 128 of 512). */
static void shape_key(const volt8_moe_shape *s, char *buf, size_t size) {
  int used = snprintf(buf, size, "H%d_I%d_E%d_b%dx%d_o%d", s->hidden, s->intermediate, s->num_experts, s->block_n,
                      s->block_k, s->intermediate_offset);
  if (s->global_experts != 0 && used >= 0 && (size_t)used < size)
    snprintf(buf + used, size - (size_t)used, "_x%dof%d", s->expert_start, s->global_experts);
}

static volt8_status check_shape(volt8_ctx *ctx, const volt8_moe_shape *shape, const char *function,
                                volt8_moe_shape *out_normalized) {
  if (!shape) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "%s: shape is NULL", function);
  if (shape->size != sizeof(volt8_moe_shape))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "%s: shape->size is %zu, expected %zu: initialise the shape with VOLT8_MOE_SHAPE_INIT", function,
                      shape->size, sizeof(volt8_moe_shape));
  volt8_status status = volt8_moe_shape_check(ctx, shape);
  if (status == VOLT8_OK) *out_normalized = volt8_moe_shape_normalized(shape);
  return status;
}

/* 1 when `variant` serves the normalized shape on `arch` (values filled), else 0 with the status and
 * message it fails with (on ctx when `report`). */
static int describe(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t arch, const volt8_variant *variant,
                    volt8_kernel_values *values, int report, volt8_status *out_status) {
  const volt8_kind_spec *spec = spec_of(variant);
  char name[VOLT8_VARIANT_NAME_BYTES], key[96], reason[160] = "";
  volt8_variant_format(variant, name, sizeof name);
  shape_key(shape, key, sizeof key);
  int known = spec && (spec->family ? tile_of(spec, variant) : variant->op == spec->op);
  if (!known) {
    *out_status = report ? volt8_fail(ctx, VOLT8_ERR_NOT_FOUND, "code generator: unknown variant '%s'", name)
                         : VOLT8_ERR_NOT_FOUND;
    return 0;
  }
  int32_t min_arch = spec->min_arch;
  if (variant->fetch_bytes && min_arch < VOLT8_FETCH_MIN_ARCH) min_arch = VOLT8_FETCH_MIN_ARCH;
  if (min_arch && arch < min_arch) {
    *out_status = report ? volt8_fail(ctx, VOLT8_ERR_ARCH_UNSUPPORTED,
                                      "code generator: unsupported arch: variant '%s' needs sm_%d or newer, the target "
                                      "is sm_%d", name, min_arch, arch)
                         : VOLT8_ERR_ARCH_UNSUPPORTED;
    return 0;
  }
  values->count = 0;
  if (!spec->values(variant, shape, arch, values, reason, sizeof reason)) {
    *out_status = report ? volt8_fail(ctx, VOLT8_ERR_CODEGEN, "code generator: variant '%s' does not fit shape %s: %s",
                                      name, key, reason)
                         : VOLT8_ERR_CODEGEN;
    return 0;
  }
  if (spec->expert_range) {
    volt8_values_set(values, "EXPERT_START", shape->expert_start);
    volt8_values_set(values, "GLOBAL_EXPERTS", shape->global_experts ? shape->global_experts : shape->num_experts);
    volt8_values_set(values, "EXPERT_PARALLEL", shape->global_experts != 0);
  }
  *out_status = VOLT8_OK;
  return 1;
}

static int compare_names(const void *a, const void *b) {
  char left[VOLT8_VARIANT_NAME_BYTES], right[VOLT8_VARIANT_NAME_BYTES];
  volt8_variant_format(a, left, sizeof left);
  volt8_variant_format(b, right, sizeof right);
  return strcmp(left, right);
}

/* Every variant the kinds' spaces hold, before the shape and the arch are asked. */
static int32_t space(volt8_variant *out, int32_t capacity) {
  int32_t count = 0;
  for (int k = 0; k < VOLT8_KIND_COUNT; k++) {
    const volt8_kind_spec *spec = KINDS[k];
    if (!spec->family) {
      if (count < capacity) out[count] = (volt8_variant){.kind = (volt8_kind)k, .op = spec->op};
      count++;
      continue;
    }
    const volt8_variant_space *kind_space = spec->space;
    for (int op = VOLT8_OP_GATE_UP; op <= VOLT8_OP_DOWN; op++)
      for (int32_t b = 0; b < kind_space->block_m_count; b++)
        for (int32_t t = 0; t < kind_space->tile_counts[op]; t++, count++) {
          const volt8_tile *tile = &kind_space->tiles[op][t];
          if (count < capacity)
            out[count] = (volt8_variant){(volt8_kind)k, (volt8_op)op, kind_space->block_ms[b], tile->block_n, tile->warps,
                                         tile->split_k, tile->lanes, tile->column_groups, tile->min_blocks,
                                         tile->fetch_bytes, tile->fused_reduce};
        }
  }
  return count;
}

volt8_status volt8_catalogue_list(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t arch,
                                  volt8_variant **out_variants, int32_t *out_count) {
  if (!out_variants || !out_count)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_catalogue_list: out_variants or out_count is NULL");
  *out_variants = NULL;
  *out_count = 0;
  volt8_moe_shape normalized;
  volt8_status status = check_shape(ctx, shape, "volt8_codegen_list", &normalized);
  if (status != VOLT8_OK) return status;
  volt8_count_codegen_run();
  int32_t total = space(NULL, 0);
  volt8_variant *variants = calloc((size_t)total, sizeof *variants);
  volt8_kernel_values *values = malloc(sizeof *values);
  if (!variants || !values) {
    free(variants);
    free(values);
    return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "code generator: out of memory for the variant list");
  }
  space(variants, total);
  int32_t kept = 0;
  for (int32_t i = 0; i < total; i++) {
    volt8_status fits;
    if (describe(ctx, &normalized, arch, &variants[i], values, 0, &fits)) variants[kept++] = variants[i];
  }
  free(values);
  qsort(variants, (size_t)kept, sizeof *variants, compare_names);
  *out_variants = variants;
  *out_count = kept;
  return VOLT8_OK;
}

void volt8_kernel_source_free(volt8_kernel_source *source) {
  if (!source) return;
  free(source->name);
  free(source->entry);
  free(source->source);
  source->name = source->entry = source->source = NULL;
}

/* The source's version line: every value but ENTRY under its lowercase name, or (lists_values 0) the
 * threads; the variant's name and the shape key with them. */
static int32_t parameters_of(const volt8_kind_spec *spec, const volt8_kernel_values *values, const char *name,
                             const char *key, volt8_template_value *out, char (*lowercase)[48]) {
  int32_t count = 0;
  out[count++] = (volt8_template_value){"variant", name, 0};
  out[count++] = (volt8_template_value){"shape", key, 0};
  for (int32_t i = 0; i < values->count; i++) {
    const char *value_name = values->items[i].name;
    if (strcmp(value_name, "ENTRY") == 0 || (!spec->lists_values && strcmp(value_name, "THREADS") != 0)) continue;
    size_t length = 0;
    for (; value_name[length] && length + 1 < sizeof lowercase[count]; length++)
      lowercase[count][length] = (char)(value_name[length] >= 'A' && value_name[length] <= 'Z' ? value_name[length] + 32
                                                                                                : value_name[length]);
    lowercase[count][length] = '\0';
    out[count] = values->items[i];
    out[count].name = lowercase[count];
    count++;
  }
  return count;
}

volt8_status volt8_catalogue_emit(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t arch,
                                  const volt8_variant *variant, volt8_kernel_source *out_source) {
  if (!variant || !out_source)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_catalogue_emit: variant or out_source is NULL");
  memset(out_source, 0, sizeof *out_source);
  volt8_moe_shape normalized;
  volt8_status status = check_shape(ctx, shape, "volt8_codegen_emit", &normalized);
  if (status != VOLT8_OK) return status;
  volt8_kernel_values *values = malloc(sizeof *values);
  if (!values) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "code generator: out of memory");
  if (!describe(ctx, &normalized, arch, variant, values, 1, &status)) {
    free(values);
    return status;
  }
  const volt8_kind_spec *spec = spec_of(variant);
  char name[VOLT8_VARIANT_NAME_BYTES], key[96], entry[VOLT8_VARIANT_NAME_BYTES + 112];
  volt8_variant_format(variant, name, sizeof name);
  shape_key(&normalized, key, sizeof key);
  snprintf(entry, sizeof entry, "volt8_%s__%s", name, key);
  for (char *dot = strchr(entry, '.'); dot; dot = strchr(dot, '.')) *dot = '_';
  values->items[values->count++] = (volt8_template_value){"ENTRY", entry, 0};
  volt8_template_value parameters[VOLT8_MAX_KERNEL_VALUES + 2];
  char lowercase[VOLT8_MAX_KERNEL_VALUES + 2][48];
  int32_t parameter_count = parameters_of(spec, values, name, key, parameters, lowercase);
  char *source = NULL;
  status = volt8_template_source(ctx, spec->template_path, NULL, values->items, values->count, parameters,
                                 parameter_count, &source);
  free(values);
  if (status != VOLT8_OK) return status;
  out_source->variant = *variant;
  out_source->name = strdup(name);
  out_source->entry = strdup(entry);
  out_source->template_path = spec->template_path;
  out_source->source = source;
  out_source->threads = volt8_variant_threads(variant);
  if (!out_source->name || !out_source->entry) {
    volt8_kernel_source_free(out_source);
    return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "code generator: out of memory copying its results");
  }
  return VOLT8_OK;
}

int32_t volt8_variant_find(const volt8_variant *variants, int32_t count, const char *name) {
  volt8_variant wanted;
  if (!volt8_variant_parse(name, &wanted)) return -1;
  for (int32_t i = 0; i < count; i++)
    if (volt8_variant_equal(&variants[i], &wanted)) return i;
  return -1;
}

int32_t volt8_codegen_arch(const volt8_ctx *ctx) { return ctx && ctx->target_arch ? ctx->target_arch : 70; }

volt8_kernel_load_request volt8_variant_load_request(const volt8_ctx *ctx, const volt8_kernel_source *source,
                                                     const char *const *entries, int32_t num_entries) {
  int32_t cubin = ctx->variant_cubin != 0;
  volt8_kernel_load_request request = {source->entry, source->source, ctx->target_arch,
                                       cubin ? VOLT8_IMAGE_CUBIN : VOLT8_IMAGE_PTX, cubin, entries, num_entries, NULL};
  return request;
}

void volt8_codegen_names_free(char **names, int32_t count) {
  if (!names) return;
  for (int32_t i = 0; i < count; i++) free(names[i]);
  free(names);
}

volt8_status volt8_codegen_list(volt8_ctx *ctx, const volt8_moe_shape *shape, char ***out_names, int32_t *out_count) {
  if (!out_names || !out_count)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_codegen_list: out_names or out_count is NULL");
  *out_names = NULL;
  *out_count = 0;
  volt8_variant *variants = NULL;
  int32_t count = 0;
  volt8_status status = volt8_catalogue_list(ctx, shape, volt8_codegen_arch(ctx), &variants, &count);
  if (status != VOLT8_OK) return status;
  char **names = calloc(count > 0 ? (size_t)count : 1, sizeof *names);
  for (int32_t i = 0; names && i < count; i++) {
    char name[VOLT8_VARIANT_NAME_BYTES];
    volt8_variant_format(&variants[i], name, sizeof name);
    if (!(names[i] = strdup(name))) {
      volt8_codegen_names_free(names, i);
      names = NULL;
    }
  }
  free(variants);
  if (!names) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "code generator: out of memory for the variant names");
  *out_names = names;
  *out_count = count;
  return VOLT8_OK;
}

volt8_status volt8_codegen_emit(volt8_ctx *ctx, const volt8_moe_shape *shape, const char *name,
                                volt8_kernel_source *out_source) {
  if (!name || !out_source)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_codegen_emit: variant or out_source is NULL");
  memset(out_source, 0, sizeof *out_source);
  volt8_variant variant;
  if (!volt8_variant_parse(name, &variant))
    return volt8_fail(ctx, VOLT8_ERR_NOT_FOUND, "code generator: unknown variant '%s'", name);
  return volt8_catalogue_emit(ctx, shape, volt8_codegen_arch(ctx), &variant, out_source);
}

volt8_launch_size volt8_variant_launch_size(const volt8_variant *variant, const volt8_moe_shape *shape,
                                           const volt8_launch_counts *counts) {
  return spec_of(variant)->launch_size(variant, shape, counts);
}

int32_t volt8_variant_threads(const volt8_variant *variant) {
  const volt8_kind_spec *spec = spec_of(variant);
  return spec->fixed_threads ? spec->fixed_threads : spec->threads(variant);
}

const volt8_kernel_signature *volt8_variant_signature(const volt8_variant *variant) {
  const volt8_kind_spec *spec = spec_of(variant);
  return spec->fixed_signature ? spec->fixed_signature : spec->signature(variant);
}
