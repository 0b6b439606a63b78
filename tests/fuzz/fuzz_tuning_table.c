/* Fuzz target: a tuning table (the JSON files of tuning/tables, or one in $VOLT8_TUNING_DIR).
 *
 * Byte 0 picks the op (bit 0: gate_up / down) and the top_k a forward asks at (bits 1-4); the rest
 * is the table text, parsed from an exact-size copy (no terminating NUL to lean on). An accepted
 * table has 1..4096 entries, ascending and distinct M, each naming a variant of the op; the
 * nearest entry for any M is one of them. The same text is then found through $VOLT8_TUNING_DIR by
 * the lookup, which must serve from it exactly when the parser accepts it and its range covers the
 * count, and otherwise leave a warning (when it does not parse) and fall back to the heuristic. Last,
 * the text is the same shape's table of another device, among other shapes' tables that name no
 * variant of the shape (the built-in tables left out, as list --tables does, so that each input costs
 * a few small reads), read by the dispatch's tables: it serves only when it parses, then only an entry
 * it holds that the shape has, and it serves whenever it parses, covers the count and its entry of the
 * nearest M is one the shape has. */
#include "fuzz_common.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/tuning.h"
#include "dispatch/tuning_shape.h"
#include "moe/kernels/catalogue.h"

static char tables_dir[1024];
/* No table is built in for this shape: a lookup is served by the fuzzed file or by nothing. */
static const volt8_moe_shape shape = {sizeof(volt8_moe_shape), 2560, 48, 64, 128, 128, 0, 0, 0};
static volt8_variant *variants;
static int32_t variant_count;

#define FAR_TABLES 20

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_make_dirs("tuning");
  fuzz_path(tables_dir, sizeof tables_dir, "tuning");
  setenv(VOLT8_TUNING_DIR_ENV, tables_dir, 1);
  fuzz_require(volt8_catalogue_list(fuzz_ctx(), &shape, volt8_codegen_arch(fuzz_ctx()), &variants, &variant_count) == VOLT8_OK, "variant list",
               volt8_last_error(fuzz_ctx()));
  const char *ops[2] = {"gate_up", "down"};
  for (int op = 0; op < 2; op++)
    for (int i = 0; i < FAR_TABLES; i++) {
      char name[VOLT8_TUNING_NAME_BYTES], path[2048], text[256];
      snprintf(name, sizeof name, "op=%s,N=%d,K=%d,block=128x128,arch=sm_70,device=any.json", ops[op], 8192 + 16 * i,
               8192);
      snprintf(path, sizeof path, "%s/%s", tables_dir, name);
      int length = snprintf(text, sizeof text, "{\"__metadata__\": {\"schema_version\": 1}, \"1\": \"%s.not.offered\"}",
                            ops[op]);
      fuzz_write_file(path, text, (size_t)length);
    }
  return 0;
}

static void check_table(const volt8_tuning_table *table, volt8_op op, int32_t top_k) {
  fuzz_require(table->count >= 1 && table->count <= 4096, "entry count", NULL);
  fuzz_require(table->schema_version == VOLT8_TUNING_SCHEMA_VERSION, "schema version", NULL);
  fuzz_require(table->top_k >= 0 && (table->measured >= -1 && table->measured <= 1), "metadata fields", NULL);
  for (int32_t i = 0; i < table->count; i++) {
    const volt8_tuning_entry *entry = &table->entries[i];
    fuzz_require(entry->m >= 1 && entry->m <= VOLT8_TUNING_MAX_M, "M out of range", NULL);
    if (i) fuzz_require(entry->m > table->entries[i - 1].m, "M not ascending and distinct", NULL);
    fuzz_require(memchr(entry->variant, 0, sizeof entry->variant) != NULL, "variant not terminated", NULL);
    volt8_op entry_op;
    fuzz_require(volt8_variant_name_op(entry->variant, &entry_op) && entry_op == op, "variant of another op",
                 entry->variant);
  }
  const int32_t probes[] = {0, 1, 3, 64, 1000, VOLT8_TUNING_MAX_M, INT32_MAX};
  for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
    const volt8_tuning_entry *nearest = volt8_tuning_table_nearest(table, probes[i], top_k);
    fuzz_require(nearest >= table->entries && nearest < table->entries + table->count, "nearest outside the table",
                 NULL);
  }
}

static int offered(const char *variant) { return volt8_variant_find(variants, variant_count, variant) >= 0; }

/* The same text as the same shape's table of another device, through the dispatch's tables. */
static void check_other_device(const uint8_t *text, size_t size, volt8_op op, int32_t top_k,
                               const volt8_tuning_table *table) {
  volt8_ctx *ctx = fuzz_ctx();
  int32_t n = 0, k = 0;
  char name[VOLT8_TUNING_NAME_BYTES], path[2048];
  fuzz_require(volt8_tuning_op_dims(ctx, &shape, op, &n, &k) == VOLT8_OK, "op dims", NULL);
  fuzz_require(volt8_tuning_table_name(ctx, volt8_tuning_op_name(op), n, k, 128, 128, 70, "Fuzz_GPU", name,
                                       sizeof name) == VOLT8_OK,
               "table name", NULL);
  snprintf(path, sizeof path, "%s/%s", tables_dir, name);
  fuzz_write_file(path, text, size);
  int32_t tokens = 5, ask_top_k = top_k ? top_k : 8;
  volt8_shape_tables tables;
  volt8_tuning_set_built_in(0);
  fuzz_require(volt8_shape_tables_load(ctx, &shape, op, variants, variant_count, &tables) == VOLT8_OK, "tables",
               volt8_last_error(ctx));
  volt8_tuning_set_built_in(1);
  int32_t index = -1;
  const volt8_shape_table *served = NULL;
  const volt8_tuning_entry *entry = volt8_shape_tables_pick(&tables, tokens, ask_top_k, &index, &served);
  int from_text = entry && strcmp(served->loaded.origin, path) == 0;
  fuzz_require(!entry || from_text, "another shape's table served", served ? served->loaded.origin : NULL);
  fuzz_require(!from_text || table, "the dispatch's tables served a table the parser refuses", path);
  if (from_text) {
    int held = 0;
    for (int32_t i = 0; i < table->count && !held; i++) held = strcmp(table->entries[i].variant, entry->variant) == 0;
    fuzz_require(held && offered(entry->variant) && index >= 0, "a variant the table or shape lacks served",
                 entry->variant);
  }
  int should = table != NULL && size <= VOLT8_TUNING_MAX_TABLE_BYTES &&
               volt8_tuning_table_covers(table, tokens, ask_top_k) &&
               offered(volt8_tuning_table_nearest(table, tokens, ask_top_k)->variant);
  fuzz_require(!should || from_text, "a table covering the count, its nearest entry offered, did not serve", path);
  volt8_shape_tables_free(&tables);
  fuzz_remove(path);
}

/* The same text through the file lookup. */
static void check_lookup(const uint8_t *text, size_t size, volt8_op op, int32_t top_k, const volt8_tuning_table *table) {
  int parsed = table != NULL;
  volt8_ctx *ctx = fuzz_ctx();
  int32_t n = 0, k = 0;
  char name[VOLT8_TUNING_NAME_BYTES], path[2048];
  fuzz_require(volt8_tuning_op_dims(ctx, &shape, op, &n, &k) == VOLT8_OK, "op dims", NULL);
  fuzz_require(volt8_tuning_table_name(ctx, volt8_tuning_op_name(op), n, k, 128, 128, 70, VOLT8_TUNING_ANY_DEVICE, name,
                                       sizeof name) == VOLT8_OK,
               "table name", NULL);
  snprintf(path, sizeof path, "%s/%s", tables_dir, name);
  fuzz_write_file(path, text, size);
  volt8_tuning_warnings_reset();
  volt8_tuning_match match;
  fuzz_require(volt8_tuning_lookup(ctx, &shape, op, 5, top_k, &match) == VOLT8_OK, "lookup", volt8_last_error(ctx));
  /* The file reader hands the parser the same bytes plus a terminating NUL, which must not matter. */
  if (size <= VOLT8_TUNING_MAX_TABLE_BYTES)
    fuzz_require((match.source == VOLT8_TUNING_SOURCE_ENV_DIR) == (parsed && volt8_tuning_table_covers(table, 5, top_k)),
                 "lookup and parser disagree", path);
  fuzz_require(match.source != VOLT8_TUNING_SOURCE_BUILT_IN, "a built-in table for a shape that has none", NULL);
  int32_t warnings = -1;
  char small[7];
  fuzz_require(volt8_tuning_warnings(small, sizeof small, &warnings) == VOLT8_OK && strlen(small) < sizeof small,
               "warnings into a small buffer", NULL);
  if (size <= VOLT8_TUNING_MAX_TABLE_BYTES)
    fuzz_require((warnings == 0) == parsed, "a warning iff the table did not parse", NULL);
  fuzz_remove(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  volt8_op op = data[0] & 1 ? VOLT8_OP_DOWN : VOLT8_OP_GATE_UP;
  int32_t top_k = (data[0] >> 1) & 15;
  const char *op_name = volt8_tuning_op_name(op);
  size_t text_size = size - 1;
  char *text = malloc(text_size ? text_size : 1);
  fuzz_require(text != NULL, "malloc", NULL);
  if (text_size) memcpy(text, data + 1, text_size);
  volt8_ctx *ctx = fuzz_ctx();
  volt8_tuning_table table;
  volt8_status status = volt8_tuning_table_parse(ctx, text, text_size, "fuzz", op_name, &table);
  if (status == VOLT8_OK) {
    check_table(&table, op, top_k);
  } else {
    fuzz_require(status == VOLT8_ERR_FORMAT, "unexpected status", volt8_status_string(status));
    fuzz_require(table.entries == NULL && table.count == 0, "a rejected table kept entries", NULL);
  }
  free(text);
  check_lookup(data + 1, text_size, op, top_k, status == VOLT8_OK ? &table : NULL);
  check_other_device(data + 1, text_size, op, top_k, status == VOLT8_OK ? &table : NULL);
  volt8_tuning_table_free(&table);
  return 0;
}
