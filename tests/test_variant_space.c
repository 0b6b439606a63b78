/* The variant space codegen/ generates (the build's generated/variant_space.c, from
 * codegen/variant_space.lua or -DVOLT8_VARIANT_SPACE) against the C kinds that read it: every tile and
 * every block_m of a family is a kernel the catalogue lists for some registry rank on some arch, and no
 * two variants of a shape make the same kernel (a field the kind does not read). A space the kinds
 * disagree with fails here, naming the tile and why the catalogue refuses it. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/models.h"
#include "moe/kernels/catalogue.h"
#include "moe/kernels/kind.h"

TestSuite(variant_space, .timeout = 300);

typedef struct gemm_family {
  const volt8_kind_spec *kind;
  const volt8_variant_space *space;
} gemm_family;

static const gemm_family FAMILIES[] = {
    {&volt8_kind_gemm_cc, &volt8_space_cc},     {&volt8_kind_gemm_mma, &volt8_space_mma},
    {&volt8_kind_gemm_hmma, &volt8_space_hmma}, {&volt8_kind_gemm_tile, &volt8_space_tile},
    {&volt8_kind_gemm_raw, &volt8_space_raw},   {&volt8_kind_down_tok, &volt8_space_tok},
};
#define FAMILY_COUNT ((int)(sizeof FAMILIES / sizeof FAMILIES[0]))
static const int32_t ARCHES[] = {70, 80, 89, 90};
#define ARCH_COUNT ((int)(sizeof ARCHES / sizeof ARCHES[0]))
#define MAX_TILES 256
#define MAX_SHAPES 128

/* The default shape and every rank of every registry model at TP 1, 2, 4 and 8. */
static int32_t registry_shapes(volt8_moe_shape *shapes) {
  int32_t count = 0;
  shapes[count++] = (volt8_moe_shape)VOLT8_MOE_SHAPE_INIT;
  for (int32_t m = 0; m < volt8_model_count(); m++)
    for (int32_t tp = 1; tp <= 8; tp *= 2)
      for (int32_t rank = 0; rank < tp && count < MAX_SHAPES; rank++) {
        volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
        if (volt8_model_rank_shape(NULL, volt8_model_at(m), tp, rank, 0, &shape) == VOLT8_OK) shapes[count++] = shape;
      }
  return count;
}

static volt8_variant variant_of(const gemm_family *family, int op, int32_t block_m, const volt8_tile *t) {
  return (volt8_variant){family->kind->kind, (volt8_op)op, block_m, t->block_n, t->warps, t->split_k, t->lanes,
                         t->column_groups, t->min_blocks, t->fetch_bytes, t->fused_reduce};
}

static int same_tile(const volt8_variant *v, const volt8_tile *t) {
  return v->block_n == t->block_n && v->warps == t->warps && v->split_k == t->split_k && v->lanes == t->lanes &&
         v->column_groups == t->column_groups && v->min_blocks == t->min_blocks && v->fetch_bytes == t->fetch_bytes &&
         v->fused_reduce == t->fused_reduce;
}

/* Why the catalogue refuses `variant` for the default shape on sm_90 (its message), into why. */
static void refusal(const volt8_variant *variant, char *why, size_t why_size) {
  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;
  volt8_kernel_source source;
  volt8_status status = volt8_catalogue_emit(NULL, &shape, 90, variant, &source);
  if (status == VOLT8_OK) {
    snprintf(why, why_size, "it fits the default shape on sm_90, yet was not listed");
    volt8_kernel_source_free(&source);
  } else {
    snprintf(why, why_size, "%s", volt8_last_error(NULL));
  }
}

Test(variant_space, the_kinds_link_the_generated_spaces) {
  for (int f = 0; f < FAMILY_COUNT; f++) {
    cr_assert_eq(FAMILIES[f].kind->space, FAMILIES[f].space, "the %s kind does not read volt8_space_%s",
                 FAMILIES[f].kind->family, FAMILIES[f].kind->family);
    cr_assert_gt(FAMILIES[f].space->block_m_count, 0, "%s: no block_m", FAMILIES[f].kind->family);
    cr_assert_gt(FAMILIES[f].space->tile_counts[0] + FAMILIES[f].space->tile_counts[1], 0, "%s: no tile",
                 FAMILIES[f].kind->family);
  }
}

/* Each tile of the space, and each block_m, is listed by the catalogue for some shape on some arch: a
 * tile that no kind's rules accept (a block_n its warps cannot cover, a field out of range) fails. */
Test(variant_space, every_tile_and_block_m_is_a_kernel_of_some_shape) {
  static volt8_moe_shape shapes[MAX_SHAPES];
  int32_t shape_count = registry_shapes(shapes);
  cr_assert_gt(shape_count, 20, "the registry gave %d shapes", shape_count);
  static char tile_listed[FAMILY_COUNT][2][MAX_TILES];
  static char block_m_listed[FAMILY_COUNT][MAX_TILES];
  memset(tile_listed, 0, sizeof tile_listed);
  memset(block_m_listed, 0, sizeof block_m_listed);
  for (int f = 0; f < FAMILY_COUNT; f++)
    cr_assert(FAMILIES[f].space->tile_counts[0] <= MAX_TILES && FAMILIES[f].space->tile_counts[1] <= MAX_TILES &&
                  FAMILIES[f].space->block_m_count <= MAX_TILES,
              "%s: more than %d tiles or block_m values", FAMILIES[f].kind->family, MAX_TILES);
  for (int32_t s = 0; s < shape_count; s++)
    for (int a = 0; a < ARCH_COUNT; a++) {
      volt8_variant *variants = NULL;
      int32_t count = 0;
      cr_assert_eq(volt8_catalogue_list(NULL, &shapes[s], ARCHES[a], &variants, &count), VOLT8_OK, "%s",
                   volt8_last_error(NULL));
      for (int32_t i = 0; i < count; i++)
        for (int f = 0; f < FAMILY_COUNT; f++) {
          const volt8_variant_space *space = FAMILIES[f].space;
          if (variants[i].kind != FAMILIES[f].kind->kind) continue;
          for (int32_t t = 0; t < space->tile_counts[variants[i].op]; t++)
            if (same_tile(&variants[i], &space->tiles[variants[i].op][t])) tile_listed[f][variants[i].op][t] = 1;
          for (int32_t b = 0; b < space->block_m_count; b++)
            if (variants[i].block_m == space->block_ms[b]) block_m_listed[f][b] = 1;
        }
      free(variants);
    }
  char name[VOLT8_VARIANT_NAME_BYTES], why[512];
  for (int f = 0; f < FAMILY_COUNT; f++) {
    const volt8_variant_space *space = FAMILIES[f].space;
    for (int op = VOLT8_OP_GATE_UP; op <= VOLT8_OP_DOWN; op++)
      for (int32_t t = 0; t < space->tile_counts[op]; t++) {
        if (tile_listed[f][op][t]) continue;
        volt8_variant variant = variant_of(&FAMILIES[f], op, space->block_ms[0], &space->tiles[op][t]);
        volt8_variant_format(&variant, name, sizeof name);
        refusal(&variant, why, sizeof why);
        cr_assert_fail("the space's tile of %s is a kernel of no shape (%d registry ranks, sm_70/80/89/90) at any block_m: %s",
                       name, shape_count, why);
      }
    for (int32_t b = 0; b < space->block_m_count; b++)
      cr_assert(block_m_listed[f][b], "%s: block_m %d is a kernel of no shape with any of its tiles",
                FAMILIES[f].kind->family, space->block_ms[b]);
  }
}

typedef struct normalized_source {
  char name[VOLT8_VARIANT_NAME_BYTES];
  char *text; /* the source with its variant's name and entry replaced by '@' */
} normalized_source;

static char *without(const char *text, const char *entry, const char *name) {
  size_t length = strlen(text);
  char *out = malloc(length + 1);
  cr_assert_not_null(out);
  size_t entry_length = strlen(entry), name_length = strlen(name), used = 0;
  for (size_t at = 0; at < length;) {
    if (strncmp(text + at, entry, entry_length) == 0) {
      out[used++] = '@';
      at += entry_length;
    } else if (strncmp(text + at, name, name_length) == 0) {
      out[used++] = '@';
      at += name_length;
    } else {
      out[used++] = text[at++];
    }
  }
  out[used] = '\0';
  return out;
}

static int compare_text(const void *a, const void *b) {
  return strcmp(((const normalized_source *)a)->text, ((const normalized_source *)b)->text);
}

/* Two variants of one shape whose sources differ only in their names would be one kernel twice: the
 * space sets a field (lanes on an mma tile, say) that the kind does not read. */
Test(variant_space, no_two_variants_of_a_shape_make_the_same_kernel) {
  volt8_moe_shape shapes[2] = {VOLT8_MOE_SHAPE_INIT, VOLT8_MOE_SHAPE_INIT};
  cr_assert_eq(volt8_model_rank_shape(NULL, volt8_model_find("deepseek-v3"), 8, 3, 0, &shapes[1]), VOLT8_OK, "%s",
               volt8_last_error(NULL));
  const int32_t arches[] = {70, 90};
  for (int s = 0; s < 2; s++)
    for (int a = 0; a < 2; a++) {
      volt8_variant *variants = NULL;
      int32_t count = 0;
      cr_assert_eq(volt8_catalogue_list(NULL, &shapes[s], arches[a], &variants, &count), VOLT8_OK, "%s",
                   volt8_last_error(NULL));
      normalized_source *sources = calloc((size_t)count, sizeof *sources);
      cr_assert_not_null(sources);
      for (int32_t i = 0; i < count; i++) {
        volt8_kernel_source source;
        cr_assert_eq(volt8_catalogue_emit(NULL, &shapes[s], arches[a], &variants[i], &source), VOLT8_OK, "%s",
                     volt8_last_error(NULL));
        snprintf(sources[i].name, sizeof sources[i].name, "%s", source.name);
        sources[i].text = without(source.source, source.entry, source.name);
        volt8_kernel_source_free(&source);
      }
      qsort(sources, (size_t)count, sizeof *sources, compare_text);
      for (int32_t i = 1; i < count; i++)
        cr_assert(strcmp(sources[i - 1].text, sources[i].text) != 0,
                  "%s and %s make the same kernel (shape %d, sm_%d): the space sets a field the kind does not read",
                  sources[i - 1].name, sources[i].name, s, arches[a]);
      for (int32_t i = 0; i < count; i++) free(sources[i].text);
      free(sources);
      free(variants);
    }
}
