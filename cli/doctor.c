/* volt8 doctor: what this volt8 finds on this machine, for an issue report: the library, the driver
 * and each GPU, every NVRTC candidate and which serves what, the kernel cache, the tuning tables of
 * each GPU and the models they cover. Exit 1 when a GPU present cannot be served, else 0 (no GPU
 * included: the CPU paths need none). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tools/tools.h"

#define MIB (1024.0 * 1024.0)
#define MAX_TP 64

typedef struct doctor_gpu {
  int ordinal;
  char name[128];
  int32_t arch;
  int served;            /* 1: a context opens on it and an NVRTC compiles for its arch */
  char why[1024];        /* when not served */
} doctor_gpu;

static void print_library(void) {
  char path[4096];
  if (volt8_library_path(path, sizeof path) != VOLT8_OK) snprintf(path, sizeof path, "(%s)", volt8_last_error(NULL));
  printf("library: volt8 %s, %s\n", volt8_version_string(), path);
}

/* The driver and its GPUs; the count of GPUs into *out_count (0 without a driver). */
static void find_gpus(doctor_gpu *gpus, int capacity, int *out_count) {
  char reason[512] = "";
  *out_count = 0;
  const volt8_cuda_driver *cuda = volt8_cuda_driver_get(reason, sizeof reason);
  int version = 0, count = 0;
  if (!cuda) {
    printf("driver: none (%s)\nGPUs: none\n", reason);
    return;
  }
  if (cuda->cuDriverGetVersion(&version) == CUDA_SUCCESS)
    printf("driver: CUDA %d.%d (driver API version %d)\n", version / 1000, version % 1000 / 10, version);
  CUresult result = cuda->cuDeviceGetCount(&count);
  if (result != CUDA_SUCCESS) {
    printf("GPUs: none (cuDeviceGetCount: %s)\n", volt8_cuda_error_text(cuda, result));
    return;
  }
  printf("GPUs: %d%s\n", count, count > capacity ? " (the first listed)" : "");
  for (int i = 0; i < count && i < capacity; i++) {
    doctor_gpu *gpu = &gpus[(*out_count)++];
    memset(gpu, 0, sizeof *gpu);
    gpu->ordinal = i;
    volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
    options.device = i;
    volt8_ctx *ctx = NULL;
    if (volt8_ctx_create(&options, &ctx) != VOLT8_OK) {
      snprintf(gpu->why, sizeof gpu->why, "no volt8 context opens on it: %s", volt8_last_error(NULL));
    } else if (volt8_ctx_require_device(ctx) != VOLT8_OK) {
      snprintf(gpu->why, sizeof gpu->why, "%s", volt8_last_error(ctx));
    } else {
      snprintf(gpu->name, sizeof gpu->name, "%s", volt8_tools_ctx(ctx).device_name);
      gpu->arch = volt8_tools_ctx(ctx).device_arch;
    }
    volt8_ctx_destroy(ctx);
    if (gpu->arch > 0 && gpu->arch < 70)
      snprintf(gpu->why, sizeof gpu->why, "sm_%d is older than sm_70, the oldest volt8 runs on", (int)gpu->arch);
    if (gpu->arch) printf("  GPU %d: %s, sm_%d\n", i, gpu->name, (int)gpu->arch);
    else printf("  GPU %d: unusable: %s\n", i, gpu->why);
  }
}

static void print_archs(const volt8_nvrtc_candidate *candidate) {
  printf(", targets compute_");
  for (int32_t a = 0; a < candidate->num_archs; a++) printf("%s%d", a ? " " : "", (int)candidate->archs[a]);
}

/* Which candidate compiles for compute_<arch>; its index, or -1 after saying why none does. */
static int32_t print_server(volt8_ctx *ctx, int32_t arch, const char *what) {
  int32_t index = -1;
  volt8_nvrtc_candidate candidate = VOLT8_NVRTC_CANDIDATE_INIT;
  if (volt8_nvrtc_candidate_for_arch(ctx, arch, &index) == VOLT8_OK &&
      volt8_nvrtc_candidate_get(ctx, index, &candidate) == VOLT8_OK) {
    printf("  compute_%d (%s): [%d] NVRTC %s, %s\n", (int)arch, what, (int)index, candidate.version, candidate.path);
    return index;
  }
  printf("  compute_%d (%s): no NVRTC found compiles for it%s%s\n", (int)arch, what,
         arch < VOLT8_NVRTC_13_LOWEST_ARCH ? ". " : "", arch < VOLT8_NVRTC_13_LOWEST_ARCH ? volt8_nvrtc_compute70_advice : "");
  return -1;
}

static int print_nvrtc(volt8_ctx *ctx, doctor_gpu *gpus, int gpu_count) {
  int32_t count = 0, dropped = 0;
  volt8_status status = volt8_nvrtc_candidate_count(ctx, &count, &dropped);
  if (status != VOLT8_OK) return cli_report(ctx, "doctor", status);
  printf("NVRTC candidates, in search order (docs/design.md, \"NVRTC search order\"), with");
  const char *variables[] = {"VOLT8_NVRTC", "VOLT8_NVRTC_ONLY", "VOLT8_NVRTC_DISABLE", "VOLT8_NVRTC_DIRS", "CUDA_HOME"};
  for (size_t v = 0; v < sizeof variables / sizeof variables[0]; v++) {
    const char *value = getenv(variables[v]);
    printf("%s %s%s%s", v ? "," : "", variables[v], value ? "=" : " unset", value ? value : "");
  }
  printf(":\n");
  if (count == 0) printf("  none\n");
  for (int32_t i = 0; i < count; i++) {
    volt8_nvrtc_candidate candidate = VOLT8_NVRTC_CANDIDATE_INIT;
    status = volt8_nvrtc_candidate_get(ctx, i, &candidate);
    if (status != VOLT8_OK) return cli_report(ctx, "doctor", status);
    printf("  [%d] %s (%s): ", (int)i, candidate.path, candidate.origin);
    if (candidate.usable) {
      printf("NVRTC %s", candidate.version);
      print_archs(&candidate);
      printf("\n");
    } else {
      printf("%s\n", candidate.outcome);
    }
  }
  if (dropped) printf("  and %d more tried, past the %d listed\n", (int)dropped, (int)count);
  int32_t for_70 = print_server(ctx, 70, "the PTX of every volt8 target, for V100 and for --target-arch sm_70");
  for (int g = 0; g < gpu_count; g++) {
    doctor_gpu *gpu = &gpus[g];
    if (!gpu->arch || gpu->why[0]) continue;
    char what[160];
    snprintf(what, sizeof what, "GPU %d, %s", gpu->ordinal, gpu->name);
    gpu->served = (gpu->arch == 70 ? for_70 : print_server(ctx, gpu->arch, what)) >= 0;
    if (!gpu->served) snprintf(gpu->why, sizeof gpu->why, "no NVRTC found compiles for compute_%d", (int)gpu->arch);
  }
  return 0;
}

static int print_cache(volt8_ctx *ctx) {
  volt8_cache_report cache = VOLT8_CACHE_REPORT_INIT;
  volt8_status status = volt8_cache_report_get(ctx, &cache);
  if (status != VOLT8_OK) return cli_report(ctx, "doctor", status);
  if (!cache.dir[0]) {
    printf("kernel cache: none (%s)\n", cache.note);
    return 0;
  }
  printf("kernel cache: %s: %s, %lld entries, %.1f MiB, %s%s%s\n", cache.dir, cache.exists ? "exists" : "not made yet",
         (long long)cache.entries, cache.bytes / MIB, cache.writable ? "writable" : "NOT writable",
         cache.note[0] ? ": " : "", cache.note);
  return 0;
}

/* A (model, TP) rank's coverage: bit 0 gate_up, bit 1 down; the smallest and largest M of the tables
 * that cover it. */
typedef struct rank_cover {
  unsigned char ops;
  int32_t m_min, m_max;
} rank_cover;

/* The (model, TP) ranks whose gate_up or down weights have the table's N x K: their bits in
 * covered[model][tp], and the table's M range. */
static void cover(const volt8_tuning_table_info *table, unsigned char covered[][MAX_TP + 1]) {
  if (table->block_n != 128 || table->block_k != 128) return;
  int is_gate_up = strcmp(table->op, "gate_up") == 0;
  for (int32_t m = 0; m < volt8_model_count(); m++) {
    const volt8_model *model = volt8_model_at(m);
    for (int32_t tp = 1; tp <= MAX_TP; tp++) {
      if (model->intermediate % tp != 0) continue;
      int32_t width = model->intermediate / tp;
      if (is_gate_up && table->n == 2 * width && table->k == model->hidden) covered[m][tp] |= 1;
      if (!is_gate_up && table->n == model->hidden && table->k == width) covered[m][tp] |= 2;
    }
  }
}

static void add_cover(rank_cover *rank, unsigned char ops, const volt8_tuning_table_info *table) {
  if (!ops) return;
  rank->m_min = rank->ops && rank->m_min < table->m_min ? rank->m_min : table->m_min;
  rank->m_max = rank->ops && rank->m_max > table->m_max ? rank->m_max : table->m_max;
  rank->ops |= ops;
}

/* Each model's covered TP sizes, with the M their tables hold: once after the list where every TP
 * holds the same, else after each TP. */
static void print_coverage(const rank_cover (*covered)[MAX_TP + 1]) {
  for (int32_t m = 0; m < volt8_model_count(); m++) {
    const rank_cover *ranks = covered[m];
    int32_t first = 0, same = 1;
    for (int32_t tp = 1; tp <= MAX_TP; tp++) {
      if (!ranks[tp].ops) continue;
      if (!first) first = tp;
      same &= ranks[tp].m_min == ranks[first].m_min && ranks[tp].m_max == ranks[first].m_max;
    }
    if (!first) continue;
    char line[512] = "";
    size_t used = 0;
    for (int32_t tp = 1; tp <= MAX_TP && used < sizeof line; tp++) {
      if (!ranks[tp].ops) continue;
      used += (size_t)snprintf(line + used, sizeof line - used, " %d", (int)tp);
      if (ranks[tp].ops != 3 && used < sizeof line)
        used += (size_t)snprintf(line + used, sizeof line - used, " (%s only)", ranks[tp].ops == 1 ? "gate_up" : "down");
      if (!same && used < sizeof line)
        used += (size_t)snprintf(line + used, sizeof line - used, " (M = %d..%d)", (int)ranks[tp].m_min,
                                 (int)ranks[tp].m_max);
    }
    if (same) printf("      %-12s TP%s, M = %d..%d\n", volt8_model_at(m)->name, line, (int)ranks[first].m_min,
                     (int)ranks[first].m_max);
    else printf("      %-12s TP%s\n", volt8_model_at(m)->name, line);
  }
}

/* The tables the lookup reads for target arch on a device named device_name (NULL: device=any). */
static int print_tables(int32_t arch, const char *device_name, const char *heading) {
  int32_t count = 0;
  volt8_status status = volt8_tuning_table_count(arch, device_name, &count);
  if (status != VOLT8_OK) return cli_report(NULL, "doctor", status);
  int32_t models = volt8_model_count();
  rank_cover (*covered)[MAX_TP + 1] = calloc((size_t)models, sizeof *covered);
  unsigned char (*mark)[MAX_TP + 1] = calloc((size_t)models, sizeof *mark);
  if (!covered || !mark) {
    free(covered);
    free(mark);
    fprintf(stderr, "volt8 doctor: out of memory\n");
    return 1;
  }
  int from_dir = 0, measured = 0, skipped = 0, other = 0;
  char others[1024] = "";
  for (int32_t i = 0; i < count && status == VOLT8_OK; i++) {
    volt8_tuning_table_info table = VOLT8_TUNING_TABLE_INFO_INIT;
    status = volt8_tuning_table_get(arch, device_name, i, &table);
    if (status != VOLT8_OK) break;
    from_dir += !table.built_in;
    measured += table.valid && table.measured == 1;
    if (!table.valid) {
      if (!skipped++) printf("%s\n", heading);
      printf("    skipped by the lookup: %s\n", table.problem);
      continue;
    }
    memset(mark, 0, (size_t)models * sizeof *mark);
    cover(&table, mark);
    int any = 0;
    for (int32_t m = 0; m < models; m++)
      for (int32_t tp = 1; tp <= MAX_TP; tp++) {
        any |= mark[m][tp];
        add_cover(&covered[m][tp], mark[m][tp], &table);
      }
    if (!any && other++ < 4) {
      size_t used = strlen(others);
      snprintf(others + used, sizeof others - used, "%s%s", used ? ", " : "", table.origin);
    }
  }
  if (status == VOLT8_OK) {
    if (!skipped) printf("%s\n", heading);
    printf("    %d table%s (%d from %s, %d built in), %d measured on a GPU, the others derived from a model\n", (int)count,
           count == 1 ? "" : "s", from_dir, "VOLT8_TUNING_DIR", (int)count - from_dir, measured);
    if (count > 0) printf("    the models' ranks they cover (both ops unless said):\n");
    print_coverage((const rank_cover (*)[MAX_TP + 1])covered);
    if (other) printf("    %d of no known model's shape: %s%s\n", other, others, other > 4 ? ", ..." : "");
  }
  free(covered);
  free(mark);
  return status == VOLT8_OK ? 0 : cli_report(NULL, "doctor", status);
}

/* Every warning the library recorded while the tables were listed and read (a $VOLT8_TUNING_DIR that
 * serves nothing, a table skipped), in the report itself: what `volt8 list` says on stderr. */
static void print_tuning_warnings(void) {
  int32_t count = 0;
  if (volt8_tuning_warnings(NULL, 0, &count) != VOLT8_OK || count == 0) return;
  size_t size = 4096;
  char *text = NULL;
  for (;; size *= 2) {
    char *grown = realloc(text, size);
    if (!grown) break;
    text = grown;
    volt8_tuning_warnings(text, size, NULL);
    if (strlen(text) + 1 < size) break;
  }
  if (!text) {
    printf("  warning: %d tuning warnings (no memory to print them)\n", (int)count);
    return;
  }
  for (const char *line = text; *line;) {
    size_t length = strcspn(line, "\n");
    printf("  warning: %.*s\n", (int)length, line);
    line += length + (line[length] == '\n');
  }
  free(text);
}

int cli_doctor(int argc, char **argv) {
  if (argc > 1) return cli_unknown_argument("doctor", argv[1]);
  printf("volt8 doctor\n");
  print_library();
  doctor_gpu gpus[16];
  int gpu_count = 0;
  find_gpus(gpus, 16, &gpu_count);
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  volt8_ctx *ctx = NULL;
  volt8_status status = volt8_ctx_create(&options, &ctx);
  if (status != VOLT8_OK) return cli_report(NULL, "doctor", status);
  int rc = print_nvrtc(ctx, gpus, gpu_count);
  if (rc == 0) rc = print_cache(ctx);
  const char *tuning_dir = getenv("VOLT8_TUNING_DIR");
  printf("tuning tables (VOLT8_TUNING_DIR %s%s, then the built-in ones):\n", tuning_dir && *tuning_dir ? "= " : "unset",
         tuning_dir && *tuning_dir ? tuning_dir : "");
  for (int g = 0; g < gpu_count && rc == 0; g++) {
    if (!gpus[g].arch) continue;
    char heading[256];
    snprintf(heading, sizeof heading, "  GPU %d, %s, sm_%d:", gpus[g].ordinal, gpus[g].name, (int)gpus[g].arch);
    rc = print_tables(gpus[g].arch, gpus[g].name, heading);
  }
  if (rc == 0 && gpu_count == 0) rc = print_tables(70, NULL, "  no GPU; those a V100 reads (sm_70, device=any):");
  if (rc == 0) print_tuning_warnings();
  volt8_ctx_destroy(ctx);
  printf("torch: not checked by this command, which runs no Python (python -m volt8 doctor adds it)\n");
  if (rc != 0) return rc;
  int unserved = 0;
  for (int g = 0; g < gpu_count; g++)
    if (!gpus[g].served) {
      printf("GPU %d cannot be served: %s\n", gpus[g].ordinal, gpus[g].why);
      unserved++;
    }
  if (gpu_count == 0) printf("verdict: no GPU here; the CPU paths (plan, compile, the reference) need none\n");
  else if (!unserved) printf("verdict: every GPU can be served\n");
  return unserved ? 1 : 0;
}
