/* What `volt8 bench` measured, and its three renderings: the printed tables, JSON, and an SVG plot
 * (time and bandwidth against M). Rendering needs no GPU. */
#ifndef VOLT8_BENCH_REPORT_H
#define VOLT8_BENCH_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "bench_gpu.h"
#include "volt8.h"

#define BENCH_MAX_M VOLT8_TOOLS_MAX_M_VALUES
#define BENCH_MAX_CHAIN 256 /* forwards in one graph for --chain */
#define BENCH_JSON_SCHEMA "volt8-bench/1"

typedef enum bench_method {
  BENCH_METHOD_VOLT8 = 0,          /* FP8 experts, volt8's dispatch (or pinned variants) */
  BENCH_METHOD_CUBLASLT_FP16 = 1,  /* baseline A */
  BENCH_METHOD_GROUPED_FP16 = 2,   /* baseline B */
  BENCH_METHOD_SORTED_FP16 = 3,    /* peer C: sorted and padded on the device, batched cuBLASLt */
  BENCH_METHOD_COUNT = 4
} bench_method;

typedef struct bench_method_result {
  int32_t ran;             /* 0: see `reason` */
  char reason[512];
  bench_timing timing;
  double bytes;            /* what this method must move per forward (its own weight format) */
  double gbps;             /* bytes / median time */
  double copy_fraction;    /* gbps / copy bandwidth */
  double relative_l2;      /* set 0's output against the reference */
  double volt8_speedup;    /* this method's median / volt8's median (baselines only) */
} bench_method_result;

typedef struct bench_m_result {
  int32_t m;
  int32_t input_sets;
  double active_experts;   /* mean over the sets */
  double bytes_fp8;        /* the byte floor's bytes: active FP8 weights and scales plus activations */
  double floor_us;         /* bytes_fp8 / copy bandwidth */
  char gate_up[96], down[96];           /* volt8's variants */
  char gate_up_origin[256], down_origin[256]; /* volt8_forward_info's: a tuning table, "heuristic", "pinned" */
  int32_t single_launch;                /* 1: one launch did the work of gate_up and down (and the reduce) */
  bench_method_result methods[BENCH_METHOD_COUNT];
  int32_t sorted_capacity; /* C's rows a slot: every expert's pairs padded to this many (0: C did not run) */
  bench_method_result chained; /* --chain: volt8's time per forward of report->chain forwards in one graph */
} bench_m_result;

typedef struct bench_report {
  char command[1024];
  char date[32];               /* UTC, ISO 8601 */
  char library_version[32];
  char device_name[128];
  char device_arch[16], target_arch[16];
  int32_t early_launch; /* down and the reduce started early without a route pass, an hmma down with one
                         * (volt8_ctx_early_launch) */
  int32_t sm_count;
  int64_t l2_bytes;
  double copy_gbps;
  /* Launch floors (bench_launch_floor): [0] two kernels, the second started early (a forward without
   * a route pass whose down fuses the reduce); [1] three, down and reduce started early (one without
   * a route pass); [2] four, the down started early (a routed forward with an hmma down). */
  bench_timing launch_floor[3];
  volt8_moe_shape shape;
  int32_t top_k;
  int32_t chain; /* forwards a chained graph holds (--chain); 0: not asked for */
  uint64_t seed;
  int32_t warmup_batches, timed_batches;
  volt8_memory_report memory;
  char cublaslt[256], cublas[256]; /* "libcublasLt.so.13 (version 130100)" or why not */
  char tuning_warnings[2048];
  int32_t count;
  bench_m_result results[BENCH_MAX_M];
} bench_report;

/* "volt8", "cublaslt_fp16", "cublas_grouped_fp16", "sorted_padded_fp16" */
const char *bench_method_key(bench_method method);
const char *bench_method_label(bench_method method);

/* Fills gbps, copy_fraction and volt8_speedup from the timings. */
void bench_report_derive(bench_report *report);
void bench_report_print(const bench_report *report, FILE *stream);
/* Malloc'ed texts; NULL when out of memory. */
char *bench_report_json(const bench_report *report);
char *bench_report_svg(const bench_report *report);
char *bench_report_markdown(const bench_report *report);

#endif
