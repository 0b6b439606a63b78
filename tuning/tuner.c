/* The tuning loop: per M, screen every candidate of gate_up (down held), time the finalists (and the
 * dispatch's own gate_up) again, then the same for down with the winning gate_up; write both tables
 * after every M. */
#include "tuner.h"

#include "bench_gpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "tools/tools.h"

#define BAR_WIDTH 28

typedef struct scored {
  const char *name;
  int32_t index; /* in the code generator's order: ties go to the earlier */
  tuner_measurement result;
} scored;

typedef struct progress {
  const tuner_settings *settings;
  double start;
  int64_t total, done;
} progress;

static double now_seconds(const tuner_settings *settings) {
  return settings->clock ? settings->clock() : bench_wall_seconds();
}

static void format_duration(double seconds, char *buf, size_t size) {
  long whole = (long)(seconds + 0.5);
  if (whole >= 3600) snprintf(buf, size, "%ldh%02ldm", whole / 3600, whole / 60 % 60);
  else if (whole >= 60) snprintf(buf, size, "%ldm%02lds", whole / 60, whole % 60);
  else snprintf(buf, size, "%lds", whole);
}

/* "[#####.....]  45%  130/288  ETA 1m12s" */
static void format_bar(const progress *state, char *buf, size_t size) {
  double fraction = state->total ? (double)state->done / (double)state->total : 1.0;
  if (fraction > 1.0) fraction = 1.0;
  char bar[BAR_WIDTH + 1];
  int filled = (int)(fraction * BAR_WIDTH);
  for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < filled ? '#' : '.';
  bar[BAR_WIDTH] = '\0';
  char eta[32] = "?";
  double elapsed = now_seconds(state->settings) - state->start;
  if (state->done > 0) format_duration(elapsed / (double)state->done * (double)(state->total - state->done), eta, sizeof eta);
  snprintf(buf, size, "[%s] %3d%% %lld/%lld ETA %s", bar, (int)(fraction * 100.0), (long long)state->done,
           (long long)state->total, eta);
}

static void progress_step(progress *state, int32_t m, const char *variant) {
  state->done++;
  FILE *stream = state->settings->progress;
  if (!stream || !state->settings->progress_tty) return;
  char bar[128];
  format_bar(state, bar, sizeof bar);
  fprintf(stream, "\rtune %s  M=%-4d %-36.36s", bar, m, variant);
  fflush(stream);
}

static void progress_result(progress *state, int32_t m, const char *op, const tuning_result_entry *entry) {
  FILE *stream = state->settings->progress;
  if (!stream) return;
  char bar[128];
  format_bar(state, bar, sizeof bar);
  if (state->settings->progress_tty) fputc('\r', stream);
  fprintf(stream, "tune: M=%-4d %-7s %-36s %9.2f us (%d candidates, %d rejected)  %s%s\n", m, op, entry->variant,
          entry->forward_us, entry->candidates, entry->rejected, bar, state->settings->progress_tty ? "    " : "");
  fflush(stream);
}

volt8_status tuner_candidates(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_op op, char ***out_names,
                              int32_t *out_count) {
  *out_names = NULL;
  *out_count = 0;
  const char *op_name = volt8_tuning_op_name(op);
  if (!op_name) return volt8_fail(ctx, VOLT8_ERR_INVALID_ARGUMENT, "tuner: op %d has no candidates", (int)op);
  volt8_variant *variants = NULL;
  int32_t count = 0;
  int32_t arch = volt8_tools_ctx(ctx).target_arch;
  volt8_status status = volt8_catalogue_list(ctx, shape, arch, &variants, &count);
  if (status != VOLT8_OK) return status;
  char **names = calloc(count > 0 ? (size_t)count : 1, sizeof *names);
  int32_t kept = 0;
  int out_of_memory = !names;
  /* A family the target arch runs as a software routine is never served (the dispatch's rule), so
   * timing it would only cost time. */
  for (int32_t i = 0; !out_of_memory && i < count; i++) {
    if (variants[i].op != op || volt8_variant_emulated(&variants[i], arch)) continue;
    char name[VOLT8_VARIANT_NAME_BYTES];
    volt8_variant_format(&variants[i], name, sizeof name);
    out_of_memory = !(names[kept] = strdup(name));
    kept += !out_of_memory;
  }
  free(variants);
  if (out_of_memory) {
    volt8_codegen_names_free(names, kept);
    return volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "tuner: out of memory for the candidates");
  }
  if (kept == 0) {
    free(names);
    return volt8_fail(ctx, VOLT8_ERR_NOT_FOUND, "tuner: the code generator offers no %s variant for this shape", op_name);
  }
  *out_names = names;
  *out_count = kept;
  return VOLT8_OK;
}

/* Writes `line` (consumed) as one line of the log; the log is best effort: a failed write never
 * stops the tuning. */
static void log_line(const tuner_settings *settings, cJSON *line) {
  char *text = line ? cJSON_PrintUnformatted(line) : NULL;
  if (text) {
    fprintf(settings->log, "%s\n", text);
    fflush(settings->log);
  }
  cJSON_free(text);
  cJSON_Delete(line);
}

static cJSON *log_object(const char *kind, int32_t m) {
  cJSON *line = cJSON_CreateObject();
  cJSON_AddStringToObject(line, "kind", kind);
  if (m > 0) cJSON_AddNumberToObject(line, "m", m);
  return line;
}

static void log_number_or_null(cJSON *line, const char *key, double value) {
  if (isfinite(value)) cJSON_AddNumberToObject(line, key, value);
  else cJSON_AddNullToObject(line, key);
}

static void log_shape(const tuner_settings *settings, int32_t measured) {
  if (!settings->log) return;
  const volt8_moe_shape *shape = &settings->shape;
  cJSON *line = log_object("shape", 0);
  cJSON_AddStringToObject(line, "label", settings->label ? settings->label : "");
  cJSON_AddNumberToObject(line, "hidden", shape->hidden);
  cJSON_AddNumberToObject(line, "intermediate", shape->intermediate);
  cJSON_AddNumberToObject(line, "num_experts", shape->num_experts);
  cJSON_AddNumberToObject(line, "intermediate_offset", shape->intermediate_offset);
  cJSON_AddNumberToObject(line, "block_n", shape->block_n);
  cJSON_AddNumberToObject(line, "block_k", shape->block_k);
  cJSON_AddNumberToObject(line, "top_k", settings->top_k);
  cJSON_AddNumberToObject(line, "arch", settings->arch);
  cJSON_AddNumberToObject(line, "measured", measured);
  cJSON_AddStringToObject(line, "device", settings->device ? settings->device : "");
  if (settings->prepare_seconds > 0) cJSON_AddNumberToObject(line, "prepare_ms", settings->prepare_seconds * 1e3);
  log_line(settings, line);
}

/* inputs_ms: the backend's begin of the M (its input sets and their reference). */
static void log_dispatch(const tuner_settings *settings, int32_t m, const volt8_forward_info *choice, double inputs_ms) {
  if (!settings->log) return;
  cJSON *line = log_object("m", m);
  cJSON_AddStringToObject(line, "dispatch_gate_up", choice->gate_up);
  cJSON_AddStringToObject(line, "dispatch_down", choice->down);
  cJSON_AddNumberToObject(line, "inputs_ms", inputs_ms);
  log_line(settings, line);
}

static void log_measure(const tuner_settings *settings, int32_t m, volt8_op op, const char *variant, const char *held,
                        int final, int32_t batches, const tuner_measurement *result) {
  if (!settings->log) return;
  cJSON *line = log_object("measure", m);
  cJSON_AddStringToObject(line, "op", volt8_tuning_op_name(op));
  cJSON_AddStringToObject(line, "variant", variant);
  cJSON_AddStringToObject(line, "held", held ? held : "");
  cJSON_AddStringToObject(line, "pass", final ? "final" : "screen");
  cJSON_AddNumberToObject(line, "batches", batches);
  cJSON_AddNumberToObject(line, "accepted", result->accepted ? 1 : 0);
  log_number_or_null(line, "forward_us", result->accepted ? result->forward_us : NAN);
  log_number_or_null(line, "relative_l2", result->relative_l2);
  cJSON_AddNumberToObject(line, "wall_ms", result->wall_ms);
  log_number_or_null(line, "setup_ms", result->setup_ms);
  log_number_or_null(line, "check_ms", result->check_ms);
  log_number_or_null(line, "timing_ms", result->timing_ms);
  if (!result->accepted) cJSON_AddStringToObject(line, "reason", result->reason);
  log_line(settings, line);
}

/* A candidate left out at this M (skip_pruned), with the M and the pick it was measured against. */
static void log_skip(const tuner_settings *settings, int32_t m, volt8_op op, const char *variant, int32_t before_m,
                     int32_t pick_block_m) {
  if (!settings->log) return;
  cJSON *line = log_object("skip", m);
  cJSON_AddStringToObject(line, "op", volt8_tuning_op_name(op));
  cJSON_AddStringToObject(line, "variant", variant);
  char reason[160];
  snprintf(reason, sizeof reason, "pruned at M=%d or before, its items no larger than the pick's at M=%d (%d pairs)",
           before_m, before_m, pick_block_m);
  cJSON_AddStringToObject(line, "reason", reason);
  log_line(settings, line);
}

static void log_pick(const tuner_settings *settings, volt8_op op, const tuning_result_entry *entry) {
  if (!settings->log) return;
  cJSON *line = log_object("pick", entry->m);
  cJSON_AddStringToObject(line, "op", volt8_tuning_op_name(op));
  cJSON_AddStringToObject(line, "variant", entry->variant);
  log_number_or_null(line, "forward_us", entry->forward_us);
  log_line(settings, line);
}

static int compare_scored(const void *a, const void *b) {
  const scored *left = a, *right = b;
  if (left->result.forward_us != right->result.forward_us)
    return left->result.forward_us < right->result.forward_us ? -1 : 1;
  return (left->index > right->index) - (left->index < right->index);
}

typedef struct op_phase {
  volt8_op op;
  char **names;
  int32_t count;
  const char *held;      /* the other op's variant */
  const char *incumbent; /* this op's variant as the dispatch serves it at this M (NULL: none) */
  /* With pruning: each name's first timing at the M before (its screen, or the forward that pruned
   * it; INFINITY when rejected or not yet timed), and the order of the next screen, fastest first. */
  double *last_us;
  int32_t *order;
  /* With skip_pruned: which names were pruned (or left out) at the M before, that M, and the block_m of
   * its pick (-1: none yet, or the M before found none). */
  unsigned char *pruned_before;
  int32_t before_m, pick_block_m;
} op_phase;

/* The block_m of a candidate (a name of the catalogue's). */
static int32_t name_block_m(const char *name) {
  volt8_variant variant;
  return volt8_variant_parse(name, &variant) ? variant.block_m : 0;
}

/* skip_pruned: a name pruned at a smaller M before this one, whose items are no larger than that M's
 * pick's, is not measured. With more tokens an expert's items fill up: items no larger than the pick's
 * gain nothing on it, so one over the prune factor there stays over it. Larger items may gain, and are
 * screened again. */
static int skipped_here(const op_phase *phase, int32_t m, int32_t i) {
  return phase->pruned_before && phase->pruned_before[i] && phase->pick_block_m > 0 && m > phase->before_m &&
         name_block_m(phase->names[i]) <= phase->pick_block_m;
}

static volt8_status measure_one(const tuner_settings *settings, const tuner_backend *backend, int32_t m,
                                const op_phase *phase, const char *candidate, int32_t batches, double limit_us,
                                tuner_measurement *out) {
  memset(out, 0, sizeof *out);
  out->relative_l2 = NAN;
  out->limit_us = limit_us;
  out->setup_ms = out->check_ms = out->timing_ms = NAN;
  const char *gate_up = phase->op == VOLT8_OP_GATE_UP ? candidate : phase->held;
  const char *down = phase->op == VOLT8_OP_GATE_UP ? phase->held : candidate;
  double start = now_seconds(settings);
  volt8_status status = backend->measure(backend->state, m, gate_up, down, batches, out);
  out->wall_ms = (now_seconds(settings) - start) * 1e3;
  return status;
}

/* A rejected candidate, with the reason, on its own line: a disagreement with the reference is a bug
 * to look into, not only a slower candidate. */
static void progress_rejection(progress *state, int32_t m, const char *op, const char *variant, const char *reason) {
  FILE *stream = state->settings->progress;
  if (!stream) return;
  if (state->settings->progress_tty) fputc('\r', stream);
  fprintf(stream, "tune: M=%-4d %-7s %s rejected: %s\n", m, op, variant, reason);
  fflush(stream);
}

/* Whether `name` is the op's variant as the dispatch serves it at this M. */
static int is_served(const op_phase *phase, const char *name) {
  return phase->incumbent && strcmp(name, phase->incumbent) == 0;
}

/* Screens every candidate, times the finalists again, fills `entry`. *out_found = 0 when none passed. */
static volt8_status tune_op(const tuner_settings *settings, const tuner_backend *backend, int32_t m,
                            const op_phase *phase, progress *state, tuner_summary *summary,
                            tuning_result_entry *entry, int *out_found, char *last_reason, size_t reason_size,
                            tuner_measurement *out_incumbent) {
  out_incumbent->accepted = 0;
  out_incumbent->forward_us = INFINITY;
  scored *accepted = calloc((size_t)phase->count, sizeof *accepted);
  if (!accepted) return VOLT8_ERR_OUT_OF_MEMORY;
  int32_t accepted_count = 0, rejected = 0;
  volt8_status status = VOLT8_OK;
  int prune = backend->measured && settings->prune_factor > 0;
  double best_us = INFINITY; /* the best screen time accepted so far */
  for (int32_t n = 0; n < phase->count && status == VOLT8_OK; n++) {
    int32_t i = phase->order ? phase->order[n] : n;
    if (skipped_here(phase, m, i)) {
      summary->skipped++;
      log_skip(settings, m, phase->op, phase->names[i], phase->before_m, phase->pick_block_m);
      progress_step(state, m, phase->names[i]);
      continue; /* stays marked for the next M */
    }
    tuner_measurement result;
    double limit_us = prune && isfinite(best_us) ? settings->prune_factor * best_us : INFINITY;
    status = measure_one(settings, backend, m, phase, phase->names[i], settings->screen_batches, limit_us, &result);
    summary->measurements++;
    if (status == VOLT8_OK)
      log_measure(settings, m, phase->op, phase->names[i], phase->held, 0, settings->screen_batches, &result);
    progress_step(state, m, phase->names[i]);
    if (status != VOLT8_OK) break;
    if (phase->last_us)
      phase->last_us[i] = (result.accepted || result.pruned) && result.forward_us > 0 ? result.forward_us : INFINITY;
    if (phase->pruned_before) phase->pruned_before[i] = (unsigned char)result.pruned;
    if (result.accepted) {
      accepted[accepted_count++] = (scored){phase->names[i], i, result};
      if (result.forward_us < best_us) best_us = result.forward_us;
    } else if (result.pruned) {
      summary->pruned++; /* slower than the bar by far: not a fault, so no line of its own */
    } else {
      rejected++;
      snprintf(last_reason, reason_size, "%s: %.400s", phase->names[i], result.reason);
      progress_rejection(state, m, volt8_tuning_op_name(phase->op), phase->names[i], result.reason);
    }
  }
  summary->rejected += rejected;
  qsort(accepted, (size_t)accepted_count, sizeof *accepted, compare_scored);
  int32_t finalists = backend->measured ? settings->finalists : 0;
  if (finalists > accepted_count) finalists = accepted_count;
  state->total -= (backend->measured ? settings->finalists : 0) - finalists;
  /* The dispatch's own variant joins the finalists when its screen ranked it below them: a screen of a
   * few passes can put it 0.3% behind others that the final then finds slower, and a pick must beat
   * what is served today in the same passes. */
  for (int32_t i = finalists; finalists > 0 && i < accepted_count; i++)
    if (is_served(phase, accepted[i].name)) {
      scored incumbent = accepted[i];
      accepted[i] = accepted[finalists];
      accepted[finalists++] = incumbent;
      state->total++;
      break;
    }
  for (int32_t i = 0; i < finalists && status == VOLT8_OK; i++) {
    tuner_measurement again;
    status = measure_one(settings, backend, m, phase, accepted[i].name, settings->final_batches, INFINITY, &again);
    summary->measurements++;
    if (status == VOLT8_OK)
      log_measure(settings, m, phase->op, accepted[i].name, phase->held, 1, settings->final_batches, &again);
    progress_step(state, m, accepted[i].name);
    if (status == VOLT8_OK && again.accepted) accepted[i].result = again;
    else if (status == VOLT8_OK) accepted[i].result.forward_us = INFINITY; /* failed on the second run: last */
    if (status == VOLT8_OK && again.accepted && is_served(phase, accepted[i].name)) *out_incumbent = again;
  }
  qsort(accepted, (size_t)finalists, sizeof *accepted, compare_scored);
  /* The served variant heads the finalists unless the best beats it by more than keep_within. */
  for (int32_t i = 1; i < finalists && isfinite(accepted[0].result.forward_us); i++)
    if (is_served(phase, accepted[i].name)) {
      if (accepted[i].result.forward_us <= accepted[0].result.forward_us * (1.0 + settings->keep_within)) {
        scored served = accepted[i];
        memmove(accepted + 1, accepted, (size_t)i * sizeof *accepted);
        accepted[0] = served;
      }
      break;
    }
  *out_found = status == VOLT8_OK && accepted_count > 0 && isfinite(accepted[0].result.forward_us);
  if (*out_found) {
    memset(entry, 0, sizeof *entry);
    entry->m = m;
    snprintf(entry->variant, sizeof entry->variant, "%s", accepted[0].name);
    entry->forward_us = accepted[0].result.forward_us;
    entry->relative_l2 = accepted[0].result.relative_l2;
    snprintf(entry->paired_with, sizeof entry->paired_with, "%s", phase->held);
    if (accepted_count > 1 && isfinite(accepted[1].result.forward_us)) {
      snprintf(entry->runner_up, sizeof entry->runner_up, "%s", accepted[1].name);
      entry->runner_up_us = accepted[1].result.forward_us;
    }
    entry->candidates = phase->count;
    entry->rejected = rejected;
    log_pick(settings, phase->op, entry);
  }
  free(accepted);
  return status;
}

static void utc_now(char *buf, size_t size) {
  time_t now = time(NULL);
  struct tm parts;
  gmtime_r(&now, &parts);
  strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &parts);
}

static volt8_status write_tables(volt8_ctx *ctx, const tuner_settings *settings, const char *date, int measured,
                                 tuning_result_entry *const entries[2], int32_t count, tuner_summary *summary) {
  volt8_op ops[2] = {VOLT8_OP_GATE_UP, VOLT8_OP_DOWN};
  volt8_status status = VOLT8_OK;
  for (int i = 0; i < 2 && status == VOLT8_OK; i++) {
    tuning_table_metadata metadata = {
        .op = volt8_tuning_op_name(ops[i]), .block_n = settings->shape.block_n, .block_k = settings->shape.block_k,
        .arch = settings->arch, .device_token = settings->device_token, .device = settings->device,
        .measured = measured, .method = settings->method, .command = settings->command,
        .nvrtc_version = settings->nvrtc_version, .date = date, .shape = &settings->shape, .top_k = settings->top_k};
    status = volt8_tuning_op_dims(ctx, &settings->shape, ops[i], &metadata.n, &metadata.k);
    if (status == VOLT8_OK)
      status = tuning_table_merge_write(ctx, settings->out_dir, &metadata, entries[i], count, summary->tables[i],
                                        sizeof summary->tables[i]);
  }
  return status;
}

static void note_failure(tuner_summary *summary, int32_t m, const char *op, const char *reason) {
  size_t used = strlen(summary->failures);
  snprintf(summary->failures + used, sizeof summary->failures - used, "M=%d %s: no candidate passed (last: %.300s)\n", m,
           op, reason[0] ? reason : "none measured");
  summary->m_failed++;
}

/* skip_pruned: the M just screened, and its pick's block_m (-1: none), for the next M's screen. */
static void note_pick(op_phase *phase, int32_t m, int found, const tuning_result_entry *entry) {
  if (!phase->pruned_before) return;
  phase->before_m = m;
  phase->pick_block_m = found ? name_block_m(entry->variant) : -1;
}

/* The progress steps of an op at one M: each candidate's screen and each finalist's final passes. */
static int64_t steps_per_m(const op_phase *phase, int32_t finals) {
  return phase->count + (finals < phase->count ? finals : phase->count);
}

/* resume: held[i] = 1 where both of out_dir's tables of this shape hold M = m_values[i], made as this
 * backend makes them (measured or derived). A missing table holds nothing; one that does not parse
 * holds nothing here (the merge names its problem when it writes). */
static volt8_status held_m_values(volt8_ctx *ctx, const tuner_settings *settings, int measured, unsigned char *held) {
  static const volt8_op ops[2] = {VOLT8_OP_GATE_UP, VOLT8_OP_DOWN};
  memset(held, 1, (size_t)settings->m_count);
  for (int i = 0; i < 2; i++) {
    const char *op_name = volt8_tuning_op_name(ops[i]);
    int32_t n = 0, k = 0;
    char path[VOLT8_TUNING_ORIGIN_BYTES];
    volt8_status status = volt8_tuning_op_dims(ctx, &settings->shape, ops[i], &n, &k);
    if (status == VOLT8_OK)
      status = tuning_table_path(ctx, settings->out_dir, op_name, n, k, settings->shape.block_n, settings->shape.block_k,
                                 settings->arch, settings->device_token, path, sizeof path);
    if (status != VOLT8_OK) return status;
    /* A table that cannot be read or parsed is not resumed from: its messages go to no context (NULL). */
    char *text = NULL;
    size_t length = 0;
    int missing = 0;
    volt8_tuning_table table = {0};
    int parsed = volt8_tuning_read_file(NULL, path, &text, &length, &missing) == VOLT8_OK && !missing &&
                 volt8_tuning_table_parse(NULL, text, length, path, op_name, &table) == VOLT8_OK;
    free(text);
    for (int32_t j = 0; j < settings->m_count; j++) {
      int has = 0;
      for (int32_t e = 0; parsed && e < table.count && !has; e++) has = table.entries[e].m == settings->m_values[j];
      if (!has || !parsed || table.measured != measured) held[j] = 0;
    }
    if (parsed) volt8_tuning_table_free(&table);
  }
  return VOLT8_OK;
}

/* The served pair's final time (gate_up's final, the served down held) is no slower than the tuned
 * pair's (down's final) by more than keep_within: the served pair is kept, each op's tuned pick its
 * runner-up. The two finals time the same passes over the same input sets, so a pick must beat what
 * is served in them, by more than their spread. The log's
 * pick lines stay the ops' picks, which its measurements of each op were made against; a "kept" line
 * names the pair the tables hold. */
static void keep_served_pair(const tuner_settings *settings, const volt8_forward_info *served_pair,
                             const tuner_measurement *served, tuning_result_entry *gate_up, tuning_result_entry *down) {
  if (settings->log) {
    cJSON *line = log_object("kept", gate_up->m);
    cJSON_AddStringToObject(line, "gate_up", served_pair->gate_up);
    cJSON_AddStringToObject(line, "down", served_pair->down);
    log_number_or_null(line, "forward_us", served->forward_us);
    cJSON_AddStringToObject(line, "tuned_gate_up", gate_up->variant);
    cJSON_AddStringToObject(line, "tuned_down", down->variant);
    log_number_or_null(line, "tuned_us", down->forward_us);
    log_line(settings, line);
  }
  tuning_result_entry *entries[2] = {gate_up, down};
  const char *names[2] = {served_pair->gate_up, served_pair->down};
  for (int op = 0; op < 2; op++) {
    tuning_result_entry *entry = entries[op];
    if (strcmp(entry->variant, names[op]) != 0) {
      snprintf(entry->runner_up, sizeof entry->runner_up, "%s", entry->variant);
      entry->runner_up_us = entry->forward_us;
      snprintf(entry->variant, sizeof entry->variant, "%s", names[op]);
    }
    snprintf(entry->paired_with, sizeof entry->paired_with, "%s", names[1 - op]);
    entry->forward_us = served->forward_us;
    entry->relative_l2 = served->relative_l2;
  }
}

/* One M: gate_up with the dispatch's down, then down with the winning gate_up. */
static volt8_status tune_m(volt8_ctx *ctx, const tuner_settings *settings, const tuner_backend *backend, int32_t m,
                           op_phase phases[2], progress *state, tuner_summary *summary, tuning_result_entry *gate_up,
                           tuning_result_entry *down, int *out_done) {
  *out_done = 0;
  volt8_forward_info start = VOLT8_FORWARD_INFO_INIT;
  volt8_status status = volt8_forward_describe(ctx, &settings->shape, NULL, m, settings->top_k, &start);
  double begun = now_seconds(settings);
  if (status == VOLT8_OK) status = backend->begin_m(backend->state, m);
  if (status != VOLT8_OK) return status;
  log_dispatch(settings, m, &start, (now_seconds(settings) - begun) * 1e3);
  char reason[512] = "";
  int found = 0;
  tuner_measurement served, unused;
  phases[0].held = start.down;
  phases[0].incumbent = start.gate_up;
  phases[1].incumbent = start.down;
  status = tune_op(settings, backend, m, &phases[0], state, summary, gate_up, &found, reason, sizeof reason, &served);
  if (status == VOLT8_OK) note_pick(&phases[0], m, found, gate_up);
  if (status == VOLT8_OK && found) progress_result(state, m, "gate_up", gate_up);
  if (status == VOLT8_OK && !found) note_failure(summary, m, "gate_up", reason);
  if (status == VOLT8_OK && found) {
    phases[1].held = gate_up->variant;
    status = tune_op(settings, backend, m, &phases[1], state, summary, down, &found, reason, sizeof reason, &unused);
    /* Where gate_up's pick is the served one, down's final already timed the served down against the
     * rest with it held; else the served pair's time is gate_up's final of it. */
    if (status == VOLT8_OK && found && served.accepted && strcmp(gate_up->variant, start.gate_up) != 0 &&
        served.forward_us <= down->forward_us * (1.0 + settings->keep_within)) {
      keep_served_pair(settings, &start, &served, gate_up, down);
      note_pick(&phases[0], m, 1, gate_up); /* the block_m that skip_pruned compares with at the next M */
    }
    if (status == VOLT8_OK) note_pick(&phases[1], m, found, down);
    if (status == VOLT8_OK && found) progress_result(state, m, "down", down);
    if (status == VOLT8_OK && !found) note_failure(summary, m, "down", reason);
    *out_done = status == VOLT8_OK && found;
  }
  backend->end_m(backend->state, m);
  return status;
}

/* The next screen's order: by each name's time at the M before, fastest first, so that the prune's
 * bar is about the best from the first candidate on; names not timed there (rejected, or a first M)
 * keep their order after the timed ones. A stable insertion sort: at most a few hundred names. */
static void order_by_last_times(op_phase *phase) {
  for (int32_t i = 0; i < phase->count; i++) phase->order[i] = i;
  for (int32_t i = 1; i < phase->count; i++) {
    int32_t index = phase->order[i];
    int32_t j = i;
    for (; j > 0 && phase->last_us[phase->order[j - 1]] > phase->last_us[index]; j--) phase->order[j] = phase->order[j - 1];
    phase->order[j] = index;
  }
}

/* Orders names by block_m, largest first, keeping the catalogue's order among equals. */
static void order_largest_items_first(char **names, int32_t count) {
  for (int32_t i = 1; i < count; i++) {
    char *name = names[i];
    int32_t block_m = name_block_m(name);
    int32_t j = i;
    for (; j > 0 && name_block_m(names[j - 1]) < block_m; j--) names[j] = names[j - 1];
    names[j] = name;
  }
}

volt8_status tuner_run(volt8_ctx *ctx, const tuner_settings *settings, const tuner_backend *backend,
                       tuner_summary *out_summary) {
  memset(out_summary, 0, sizeof *out_summary);
  op_phase phases[2] = {{.op = VOLT8_OP_GATE_UP, .pick_block_m = -1}, {.op = VOLT8_OP_DOWN, .pick_block_m = -1}};
  volt8_status status = tuner_candidates(ctx, &settings->shape, VOLT8_OP_GATE_UP, &phases[0].names, &phases[0].count);
  if (status == VOLT8_OK) status = tuner_candidates(ctx, &settings->shape, VOLT8_OP_DOWN, &phases[1].names, &phases[1].count);
  /* Pruning screens the largest items first at the first M (at large M they are the fastest), and at
   * each later M what was fastest at the one before first. */
  int prune = backend->measured && settings->prune_factor > 0;
  for (int i = 0; status == VOLT8_OK && prune && i < 2; i++) {
    order_largest_items_first(phases[i].names, phases[i].count);
    phases[i].last_us = malloc((size_t)phases[i].count * sizeof *phases[i].last_us);
    phases[i].order = malloc((size_t)phases[i].count * sizeof *phases[i].order);
    if (!phases[i].last_us || !phases[i].order) {
      status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "tuner: out of memory");
      break;
    }
    for (int32_t n = 0; n < phases[i].count; n++) phases[i].last_us[n] = INFINITY;
    if (settings->skip_pruned) {
      phases[i].pruned_before = calloc((size_t)phases[i].count, 1);
      if (!phases[i].pruned_before) {
        status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "tuner: out of memory");
        break;
      }
    }
  }
  tuning_result_entry *entries[2] = {calloc((size_t)settings->m_count + 1, sizeof(tuning_result_entry)),
                                     calloc((size_t)settings->m_count + 1, sizeof(tuning_result_entry))};
  if (status == VOLT8_OK && (!entries[0] || !entries[1]))
    status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "tuner: out of memory");
  int32_t finals = backend->measured ? settings->finalists : 0;
  progress state = {settings, now_seconds(settings), 0, 0};
  for (int i = 0; i < 2; i++) state.total += (int64_t)settings->m_count * steps_per_m(&phases[i], finals);
  char date[32];
  utc_now(date, sizeof date);
  if (status == VOLT8_OK) log_shape(settings, backend->measured);
  unsigned char *held = calloc((size_t)settings->m_count + 1, 1);
  if (status == VOLT8_OK && !held) status = volt8_fail(ctx, VOLT8_ERR_OUT_OF_MEMORY, "tuner: out of memory");
  if (status == VOLT8_OK && settings->resume) status = held_m_values(ctx, settings, backend->measured, held);
  int32_t written = 0;
  for (int32_t i = 0; i < settings->m_count && status == VOLT8_OK; i++) {
    if (held[i]) {
      if (settings->log) log_line(settings, log_object("resume", settings->m_values[i]));
      for (int p = 0; p < 2; p++) state.done += steps_per_m(&phases[p], finals);
      out_summary->resumed++;
      continue;
    }
    int done = 0;
    for (int p = 0; p < 2 && phases[p].order; p++) order_by_last_times(&phases[p]);
    status = tune_m(ctx, settings, backend, settings->m_values[i], phases, &state, out_summary, &entries[0][written],
                    &entries[1][written], &done);
    if (status == VOLT8_OK && done) {
      written++;
      out_summary->m_done++;
      status = write_tables(ctx, settings, date, backend->measured, entries, written, out_summary);
    }
  }
  for (int i = 0; i < 2; i++) {
    volt8_codegen_names_free(phases[i].names, phases[i].count);
    free(phases[i].last_us);
    free(phases[i].order);
    free(phases[i].pruned_before);
  }
  free(entries[0]);
  free(entries[1]);
  free(held);
  return status;
}
