/* The embedded Lua code generator: a fresh Lua state per call runs codegen/gen.lua from the
 * embedded files, so calls are independent and safe from any thread. Every Lua API call happens
 * inside one protected C function; results are copied to malloc'ed C strings before the state
 * is closed. */
#define VOLT8_EXPERIMENTAL_API 1 /* defines volt8_variant_count and volt8_variant_name */
#include "jit/codegen.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx_internal.h"
#include "core/embedded_files.h"
#include "core/work_counts.h"

#define GEN_SCRIPT_PATH "codegen/gen.lua"

typedef enum codegen_job_kind { JOB_LIST, JOB_EMIT, JOB_EXPAND } codegen_job_kind;

typedef struct codegen_job {
  codegen_job_kind kind;
  const volt8_moe_shape *shape;
  int32_t arch;                        /* target arch the variant space is for (70: sm_70) */
  const char *variant;                 /* JOB_EMIT */
  const char *template_path;           /* JOB_EXPAND */
  const char *template_text;           /* JOB_EXPAND: NULL reads template_path from the embedded files */
  const char *const *keys, *const *values;
  int32_t value_count;
  char **names;                        /* JOB_LIST result */
  int32_t name_count;
  volt8_kernel_source *source;         /* JOB_EMIT result */
  char *text;                          /* JOB_EXPAND result */
  int out_of_memory;                   /* a C allocation failed while copying results */
} codegen_job;

static char *copy_string(const char *text, size_t bytes) {
  char *copy = malloc(bytes + 1);
  if (copy) {
    memcpy(copy, text, bytes);
    copy[bytes] = '\0';
  }
  return copy;
}

/* VOLT8_READ(path): the embedded file's text, or nil. */
static int read_embedded(lua_State *L) {
  const volt8_embedded_file *file = volt8_embedded_find(luaL_checkstring(L, 1));
  if (file) lua_pushlstring(L, file->data, file->size);
  else lua_pushnil(L);
  return 1;
}

static void set_integer_field(lua_State *L, const char *field, lua_Integer value) {
  lua_pushinteger(L, value);
  lua_setfield(L, -2, field);
}

static void push_shape(lua_State *L, const volt8_moe_shape *shape) {
  lua_createtable(L, 0, 8);
  set_integer_field(L, "hidden", shape->hidden);
  set_integer_field(L, "intermediate", shape->intermediate);
  set_integer_field(L, "num_experts", shape->num_experts);
  set_integer_field(L, "block_n", shape->block_n);
  set_integer_field(L, "block_k", shape->block_k);
  set_integer_field(L, "intermediate_offset", shape->intermediate_offset);
  set_integer_field(L, "expert_start", shape->expert_start);
  set_integer_field(L, "global_experts", shape->global_experts);
}

/* Pushes gen.<function_name> of the module table at the top of the stack. */
static void push_gen_function(lua_State *L, const char *function_name) {
  if (lua_getfield(L, -1, function_name) != LUA_TFUNCTION) luaL_error(L, "gen.lua has no function '%s'", function_name);
}

static void copy_list(lua_State *L, codegen_job *job) {
  luaL_checktype(L, -1, LUA_TTABLE);
  lua_Integer count = (lua_Integer)lua_rawlen(L, -1);
  for (lua_Integer i = 1; i <= count; i++) {
    if (lua_rawgeti(L, -1, i) != LUA_TSTRING) luaL_error(L, "gen.list returned a non-string at index %d", (int)i);
    lua_pop(L, 1);
  }
  job->names = calloc(count > 0 ? (size_t)count : 1, sizeof *job->names);
  if (!job->names) {
    job->out_of_memory = 1;
    return;
  }
  for (lua_Integer i = 1; i <= count; i++) {
    lua_rawgeti(L, -1, i);
    size_t bytes = 0;
    const char *name = lua_tolstring(L, -1, &bytes);
    job->names[i - 1] = copy_string(name, bytes);
    lua_pop(L, 1);
    if (!job->names[i - 1]) {
      job->out_of_memory = 1;
      volt8_codegen_names_free(job->names, (int32_t)(i - 1));
      job->names = NULL;
      return;
    }
  }
  job->name_count = (int32_t)count;
}

/* Pushes the string field and returns it; it stays on the stack, so the pointer stays valid. */
static const char *emit_string_field(lua_State *L, int table, const char *field, size_t *bytes) {
  if (lua_getfield(L, table, field) != LUA_TSTRING) luaL_error(L, "gen.emit result lacks string field '%s'", field);
  return lua_tolstring(L, -1, bytes);
}

static int32_t emit_integer_field(lua_State *L, int table, const char *field) {
  lua_getfield(L, table, field);
  int is_integer = 0;
  lua_Integer value = lua_tointegerx(L, -1, &is_integer);
  lua_pop(L, 1);
  if (!is_integer || value < INT32_MIN || value > INT32_MAX) luaL_error(L, "gen.emit result field '%s' is not an int32", field);
  return (int32_t)value;
}

static void copy_emit(lua_State *L, codegen_job *job) {
  luaL_checktype(L, -1, LUA_TTABLE);
  const int table = lua_absindex(L, -1);
  size_t source_bytes, entry_bytes, template_bytes, op_bytes, family_bytes;
  const char *source = emit_string_field(L, table, "source", &source_bytes);
  const char *entry = emit_string_field(L, table, "entry", &entry_bytes);
  const char *template_path = emit_string_field(L, table, "template", &template_bytes);
  const char *op = emit_string_field(L, table, "op", &op_bytes);
  const char *family = emit_string_field(L, table, "family", &family_bytes);
  volt8_kernel_source *out = job->source;
  if (strcmp(op, "gate_up") == 0) out->op = VOLT8_OP_GATE_UP;
  else if (strcmp(op, "down") == 0) out->op = VOLT8_OP_DOWN;
  else if (strcmp(op, "route") == 0) out->op = VOLT8_OP_ROUTE;
  else if (strcmp(op, "reduce") == 0) out->op = VOLT8_OP_REDUCE;
  else if (strcmp(op, "single") == 0) out->op = VOLT8_OP_SINGLE;
  else luaL_error(L, "gen.emit returned unknown op '%s'", op);
  if (strcmp(family, "cc") == 0) out->family = VOLT8_FAMILY_CUDA_CORE;
  else if (strcmp(family, "mma") == 0) out->family = VOLT8_FAMILY_MMA884;
  else if (strcmp(family, "tok") == 0) out->family = VOLT8_FAMILY_TOKEN;
  else if (strcmp(family, "hmma") == 0) out->family = VOLT8_FAMILY_HMMA16816;
  else if (strcmp(family, "support") == 0) out->family = VOLT8_FAMILY_SUPPORT;
  else luaL_error(L, "gen.emit returned unknown family '%s'", family);
  out->block_m = emit_integer_field(L, table, "block_m");
  out->block_n = emit_integer_field(L, table, "block_n");
  out->threads = emit_integer_field(L, table, "threads");
  out->split_k = emit_integer_field(L, table, "split_k");
  out->warps = emit_integer_field(L, table, "warps");
  out->fused_reduce = emit_integer_field(L, table, "fused_reduce");
  /* No Lua call can fail past this point: the C copies are never leaked by a Lua error. */
  out->variant = copy_string(job->variant, strlen(job->variant));
  out->entry = copy_string(entry, entry_bytes);
  out->template_path = copy_string(template_path, template_bytes);
  out->source = copy_string(source, source_bytes);
  if (!out->variant || !out->entry || !out->template_path || !out->source) {
    job->out_of_memory = 1;
    volt8_kernel_source_free(out);
  }
}

static int run_job(lua_State *L) {
  codegen_job *job = lua_touserdata(L, 1);
  luaL_openlibs(L);
  lua_pushcfunction(L, read_embedded);
  lua_setglobal(L, "VOLT8_READ");
  const volt8_embedded_file *script = volt8_embedded_find(GEN_SCRIPT_PATH);
  if (!script) return luaL_error(L, "%s is not embedded in the library", GEN_SCRIPT_PATH);
  if (luaL_loadbufferx(L, script->data, script->size, "@" GEN_SCRIPT_PATH, "t") != LUA_OK) return lua_error(L);
  lua_call(L, 0, 1);
  luaL_checktype(L, -1, LUA_TTABLE);
  switch (job->kind) {
  case JOB_LIST:
    push_gen_function(L, "list");
    push_shape(L, job->shape);
    lua_pushinteger(L, job->arch);
    lua_call(L, 2, 1);
    copy_list(L, job);
    break;
  case JOB_EMIT:
    push_gen_function(L, "emit");
    lua_pushstring(L, job->variant);
    push_shape(L, job->shape);
    lua_pushinteger(L, job->arch);
    lua_call(L, 3, 1);
    copy_emit(L, job);
    break;
  case JOB_EXPAND:
    push_gen_function(L, "expand_template");
    lua_pushstring(L, job->template_path);
    lua_createtable(L, 0, job->value_count);
    for (int32_t i = 0; i < job->value_count; i++) {
      lua_pushstring(L, job->values[i]);
      lua_setfield(L, -2, job->keys[i]);
    }
    if (job->template_text)
      lua_pushstring(L, job->template_text);
    else
      lua_pushnil(L);
    lua_call(L, 3, 1);
    size_t bytes = 0;
    const char *text = lua_tolstring(L, -1, &bytes);
    if (!text) return luaL_error(L, "gen.expand_template returned no text");
    job->text = copy_string(text, bytes);
    if (!job->text) job->out_of_memory = 1;
    break;
  }
  return 0;
}

/* Lua reports a caller's mistake with these prefixes; everything else is a generator failure. */
static volt8_status status_for_message(const char *message) {
  if (strncmp(message, "invalid shape", 13) == 0) return VOLT8_ERR_INVALID_ARGUMENT;
  if (strncmp(message, "unknown variant", 15) == 0) return VOLT8_ERR_NOT_FOUND;
  if (strncmp(message, "unsupported arch", 16) == 0) return VOLT8_ERR_ARCH_UNSUPPORTED;
  return VOLT8_ERR_CODEGEN;
}

/* The arch the variant space is listed for: ctx's target arch; sm_70 without a ctx. */
static int32_t codegen_arch(const volt8_ctx *ctx) { return ctx && ctx->target_arch ? ctx->target_arch : 70; }

static volt8_status run(volt8_ctx *ctx, codegen_job *job) {
  volt8_count_codegen_run();
  lua_State *L = luaL_newstate();
  if (!L) return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "code generator: cannot create a Lua state");
  lua_pushcfunction(L, run_job);
  lua_pushlightuserdata(L, job);
  int result = lua_pcall(L, 1, 0, 0);
  volt8_status status = VOLT8_OK;
  if (result == LUA_ERRMEM) {
    status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "code generator: Lua ran out of memory");
  } else if (result != LUA_OK) {
    const char *message = lua_tostring(L, -1);
    if (!message) message = "(error object is not a string)";
    status = volt8_fail(ctx, status_for_message(message), "code generator: %s", message);
  } else if (job->out_of_memory) {
    status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "code generator: out of memory copying its results");
  }
  lua_close(L);
  return status;
}

static volt8_status check_shape(volt8_ctx *ctx, const volt8_moe_shape *shape, const char *function) {
  if (!shape) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "%s: shape is NULL", function);
  if (shape->size != sizeof(volt8_moe_shape))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "%s: shape->size is %zu, expected %zu: initialise the shape with VOLT8_MOE_SHAPE_INIT", function,
                      shape->size, sizeof(volt8_moe_shape));
  return VOLT8_OK;
}

volt8_status volt8_codegen_list(volt8_ctx *ctx, const volt8_moe_shape *shape, char ***out_names, int32_t *out_count) {
  if (!out_names || !out_count)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_codegen_list: out_names or out_count is NULL");
  *out_names = NULL;
  *out_count = 0;
  volt8_status status = check_shape(ctx, shape, "volt8_codegen_list");
  if (status != VOLT8_OK) return status;
  codegen_job job = {.kind = JOB_LIST, .shape = shape, .arch = codegen_arch(ctx)};
  status = run(ctx, &job);
  if (status != VOLT8_OK) return status;
  *out_names = job.names;
  *out_count = job.name_count;
  return VOLT8_OK;
}

volt8_status volt8_codegen_emit(volt8_ctx *ctx, const volt8_moe_shape *shape, const char *variant,
                                volt8_kernel_source *out_source) {
  if (!variant || !out_source)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_codegen_emit: variant or out_source is NULL");
  memset(out_source, 0, sizeof *out_source);
  volt8_status status = check_shape(ctx, shape, "volt8_codegen_emit");
  if (status != VOLT8_OK) return status;
  codegen_job job = {.kind = JOB_EMIT, .shape = shape, .arch = codegen_arch(ctx), .variant = variant, .source = out_source};
  return run(ctx, &job);
}

static volt8_status expand(volt8_ctx *ctx, const char *template_path, const char *template_text, const char *const *keys,
                           const char *const *values, int32_t count, char **out_source) {
  if (!template_path || !out_source || count < 0 || (count > 0 && (!keys || !values)))
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT,
                      "volt8_codegen_expand_template: template_path, out_source, keys or values is NULL");
  *out_source = NULL;
  for (int32_t i = 0; i < count; i++) {
    if (!keys[i] || !values[i])
      return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_codegen_expand_template: key or value %d is NULL", i);
  }
  codegen_job job = {.kind = JOB_EXPAND, .template_path = template_path, .template_text = template_text, .keys = keys,
                     .values = values, .value_count = count};
  volt8_status status = run(ctx, &job);
  if (status == VOLT8_OK) *out_source = job.text;
  return status;
}

volt8_status volt8_codegen_expand_template(volt8_ctx *ctx, const char *template_path, const char *const *keys,
                                           const char *const *values, int32_t count, char **out_source) {
  return expand(ctx, template_path, NULL, keys, values, count, out_source);
}

volt8_status volt8_codegen_expand_text(volt8_ctx *ctx, const char *template_path, const char *template_text,
                                       const char *const *keys, const char *const *values, int32_t count,
                                       char **out_source) {
  if (!template_text)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_codegen_expand_text: template_text is NULL");
  return expand(ctx, template_path, template_text, keys, values, count, out_source);
}

void volt8_kernel_source_free(volt8_kernel_source *source) {
  if (!source) return;
  free(source->variant);
  free(source->entry);
  free(source->template_path);
  free(source->source);
  source->variant = source->entry = source->template_path = source->source = NULL;
}

void volt8_codegen_names_free(char **names, int32_t count) {
  if (!names) return;
  for (int32_t i = 0; i < count; i++) free(names[i]);
  free(names);
}

volt8_status volt8_variant_count(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t *out_count) {
  if (!out_count) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_count: out_count is NULL");
  char **names = NULL;
  volt8_status status = volt8_codegen_list(ctx, shape, &names, out_count);
  volt8_codegen_names_free(names, *out_count);
  return status;
}

volt8_status volt8_variant_name(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t index, char *buf,
                                size_t buf_size) {
  if (!buf || buf_size == 0)
    return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_name: buf is NULL or buf_size is 0");
  buf[0] = '\0';
  char **names = NULL;
  int32_t count = 0;
  volt8_status status = volt8_codegen_list(ctx, shape, &names, &count);
  if (status != VOLT8_OK) return status;
  if (index < 0 || index >= count) {
    status = volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_name: index %d is outside [0, %d)", index, count);
  } else if (strlen(names[index]) + 1 > buf_size) {
    status = volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "volt8_variant_name: '%s' needs %zu bytes, buf_size is %zu",
                        names[index], strlen(names[index]) + 1, buf_size);
  } else {
    memcpy(buf, names[index], strlen(names[index]) + 1);
  }
  volt8_codegen_names_free(names, count);
  return status;
}
