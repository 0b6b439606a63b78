/* `volt8 bench` options: defaults are the (reference TP4 rank 1, M = 1..128, top-10). */
#include "bench_options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int32_t DEFAULT_M[] = {1, 2, 4, 8, 16, 32, 64, 128};
static const int32_t QUICK_M[] = {1, 8, 64};

void bench_options_default(bench_options *options) {
  memset(options, 0, sizeof *options);
  volt8_tools_model_rank(NULL, NULL, NULL, &options->shape, &options->top_k, NULL, 0);
  options->m_count = (int32_t)(sizeof DEFAULT_M / sizeof DEFAULT_M[0]);
  memcpy(options->m_values, DEFAULT_M, sizeof DEFAULT_M);
  options->seed = 1;
  options->warmup_batches = 3;
  options->timed_batches = 30;
  options->spin_ms = 5.0;
  options->copy_mib = 512;
  options->baselines = 1;
}

static int compare_ints(const void *a, const void *b) {
  int32_t left = *(const int32_t *)a, right = *(const int32_t *)b;
  return (left > right) - (left < right);
}

const char *bench_usage(void) {
  return "usage: volt8 bench [options]\n"
         "  --model NAME          a model's experts (volt8 models lists them; default reference), with its top-k\n"
         "  --tp N --rank R       the model's TP rank (default: --tp 4 --rank 1, rank 0 at --tp 1; the reference's is\n"
         "                        I=160 at offset 32)\n"
         "  --shape S             any shape instead (hidden=...,intermediate=...,...; see volt8 --help)\n"
         "  --m 1,2,4,...         token counts (default 1,2,4,8,16,32,64,128), each in 1..2^30 / top-k (the routed\n"
         "                        pairs a forward takes)\n"
         "  --top-k K             experts per token (default: the model's, 10 with --shape)\n"
         "  --seed N              weights, inputs and routing (default 1)\n"
         "  --sets N              input sets replayed in turn (default: touched weights >= 4x L2)\n"
         "  --chain N             also time N forwards captured in one graph, each on its own routing, per forward\n"
         "                        (what an engine's graph of N draft steps sees; 2..256, at least N sets are used)\n"
         "  --warmup N --batches N  untimed and timed passes over the sets (default 3 and 30)\n"
         "  --target-arch sm_XX   volt8 kernels for this arch (default: the device's)\n"
         "  --device N            CUDA device (default 0)\n"
         "  --variants G,D        pin volt8's gate_up and down variants\n"
         "  --no-baselines        volt8 and the byte floor only (no A, B or C)\n"
         "  --quick               M = 1,8,64 and 10 timed passes\n"
         "  --json PATH --svg PATH --markdown PATH   also write the report there\n";
}

/* 1 for an option followed by a value, 0 for a flag, -1 for an unknown argument. */
static int takes_a_value(const char *name) {
  static const char *const flags[] = {"--no-baselines", "--quick", "--help", "-h"};
  static const char *const valued[] = {"--tp",     "--rank",   "--shape",  "--m",           "--top-k", "--model",
                                       "--seed",   "--sets",   "--chain",  "--warmup", "--batches",     "--device",
                                       "--target-arch", "--variants", "--json", "--svg", "--markdown"};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
    if (strcmp(name, flags[i]) == 0) return 0;
  for (size_t i = 0; i < sizeof valued / sizeof valued[0]; i++)
    if (strcmp(name, valued[i]) == 0) return 1;
  return -1;
}

/* Splits "GATE_UP,DOWN" into two names pointing into `storage`. */
static int parse_variants(const char *text, char *storage, size_t storage_size, const char **gate_up,
                          const char **down) {
  if (strlen(text) >= storage_size) return -1;
  snprintf(storage, storage_size, "%s", text);
  char *comma = strchr(storage, ',');
  if (!comma || strncmp(storage, "gate_up.", 8) != 0 || strncmp(comma + 1, "down.", 5) != 0 || strchr(comma + 1, ','))
    return -1;
  *comma = '\0';
  *gate_up = storage;
  *down = comma + 1;
  return 0;
}

int bench_options_parse(int argc, char **argv, bench_options *out, char *error, size_t error_size) {
  bench_options_default(out);
  int32_t value = 0;
  int shape_given = 0, top_k_given = 0;
  const char *model_name = NULL, *tp_text = NULL, *rank_text = NULL;
  const char *m_text = NULL; /* read once the top-k is known: it bounds the token counts */
  volt8_tools_flags_seen seen = {{0}, 0};
  error[0] = '\0';
  for (int i = 1; i < argc; i++) {
    const char *name = argv[i];
    const char *next = i + 1 < argc ? argv[i + 1] : NULL;
    int takes_value = takes_a_value(name);
    if (takes_value < 0) {
      snprintf(error, error_size, "unknown argument \"%s\"", name);
      return -1;
    }
    if (strcmp(name, "--help") != 0 && strcmp(name, "-h") != 0 && volt8_tools_flag_once(&seen, name, error, error_size) != 0)
      return -1;
    if (takes_value && !next) {
      snprintf(error, error_size, "%s needs a value", name);
      return -1;
    }
    int bad = 0;
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
      return 1;
    } else if (strcmp(name, "--no-baselines") == 0) {
      out->baselines = 0;
    } else if (strcmp(name, "--quick") == 0) {
      out->m_count = (int32_t)(sizeof QUICK_M / sizeof QUICK_M[0]);
      memcpy(out->m_values, QUICK_M, sizeof QUICK_M);
      m_text = NULL;
      out->timed_batches = 10;
    } else if (strcmp(name, "--tp") == 0) {
      tp_text = next;
    } else if (strcmp(name, "--rank") == 0) {
      rank_text = next;
    } else if (strcmp(name, "--shape") == 0) {
      if (shape_given) {
        snprintf(error, error_size, "--shape is given twice (bench takes one shape)");
        return -1;
      }
      char why[512];
      bad = volt8_tools_parse_shape(next, &out->shape, why, sizeof why);
      if (bad) snprintf(error, error_size, "--shape \"%s\": %s", next, why);
      shape_given = 1;
    } else if (strcmp(name, "--m") == 0) {
      m_text = next;
    } else if (strcmp(name, "--top-k") == 0) {
      bad = volt8_tools_flag_number(name, next, "top-k", 1, VOLT8_TOOLS_MAX_TOP_K, &out->top_k, error, error_size);
      top_k_given = 1;
    } else if (strcmp(name, "--model") == 0) {
      model_name = next;
    } else if (strcmp(name, "--seed") == 0) {
      bad = volt8_tools_flag_number(name, next, "seed", 0, 0x7FFFFFFF, &value, error, error_size);
      out->seed = (uint64_t)value;
    } else if (strcmp(name, "--sets") == 0) {
      bad = volt8_tools_flag_number(name, next, "count of input sets", 1, 256, &out->input_sets, error, error_size);
    } else if (strcmp(name, "--chain") == 0) {
      bad = volt8_tools_flag_number(name, next, "chain length", 2, BENCH_MAX_CHAIN, &out->chain, error, error_size);
    } else if (strcmp(name, "--warmup") == 0) {
      bad = volt8_tools_flag_number(name, next, "count of warm-up passes", 0, 1000, &out->warmup_batches, error, error_size);
    } else if (strcmp(name, "--batches") == 0) {
      bad = volt8_tools_flag_number(name, next, "count of timed passes", 1, 10000, &out->timed_batches, error, error_size);
    } else if (strcmp(name, "--device") == 0) {
      bad = volt8_tools_flag_number(name, next, "device ordinal", 0, 255, &out->device, error, error_size);
    } else if (strcmp(name, "--target-arch") == 0) {
      out->target_arch = next;
      bad = volt8_tools_flag_arch(name, next, NULL, error, error_size);
    } else if (strcmp(name, "--variants") == 0) {
      bad = parse_variants(next, out->variant_storage, sizeof out->variant_storage, &out->gate_up, &out->down);
      if (bad)
        snprintf(error, error_size, "--variants \"%s\" is not GATE_UP,DOWN (a gate_up and a down variant name, "
                 "comma-separated; volt8 list --shape S names them)", next);
    } else if (strcmp(name, "--json") == 0 || strcmp(name, "--svg") == 0 || strcmp(name, "--markdown") == 0) {
      bad = volt8_tools_flag_path(name, next, "file", error, error_size);
      *(name[2] == 'j' ? &out->json_path : name[2] == 's' ? &out->svg_path : &out->markdown_path) = next;
    }
    if (bad) {
      if (!error[0]) snprintf(error, error_size, "bad value \"%s\" for %s", next ? next : "", name);
      return -1;
    }
    if (takes_value) i++;
  }
  if ((tp_text || rank_text || model_name) && shape_given) {
    snprintf(error, error_size, "--%s and --shape exclude each other", model_name ? "model" : tp_text ? "tp" : "rank");
    return -1;
  }
  if (tp_text || rank_text || model_name) {
    int32_t top_k = 0;
    if (volt8_tools_model_rank(model_name, tp_text, rank_text, &out->shape, &top_k, error, error_size) != 0) return -1;
    if (!top_k_given) out->top_k = top_k;
  }
  if (m_text) {
    out->m_count = volt8_tools_flag_token_counts("--m", m_text, out->top_k, out->m_values, BENCH_MAX_M, error,
                                                 error_size);
    if (out->m_count < 0) return -1;
  }
  qsort(out->m_values, (size_t)out->m_count, sizeof out->m_values[0], compare_ints);
  for (int32_t i = 1; i < out->m_count; i++)
    if (out->m_values[i] == out->m_values[i - 1]) {
      snprintf(error, error_size, "--m lists %d twice", out->m_values[i]);
      return -1;
    }
  return 0;
}
