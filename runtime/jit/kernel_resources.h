/* What a kernel variant asks of an SM (registers, spills, shared memory, threads), read from ptxas'
 * report of its CUBIN, and how many of its CTAs the SM then holds at once. No device needed. */
#ifndef VOLT8_KERNEL_RESOURCES_H
#define VOLT8_KERNEL_RESOURCES_H

#include "volt8.h"

/* One SM's limits and allocation rules (the CUDA occupancy calculator's figures). */
typedef struct volt8_sm_limits {
  int32_t arch;                       /* 70 */
  int32_t sm_count;                   /* of the reference part (V100-SXM2: 80) */
  int32_t registers_per_sm;           /* 65536 */
  int32_t max_registers_per_thread;   /* 255 */
  int32_t register_unit;              /* registers are given per warp in units of this many (256) */
  int32_t sub_partitions;             /* each holds a quarter of the registers; a warp lives in one */
  int32_t smem_per_sm_bytes;          /* the largest carveout (96 KiB on sm_70) */
  int32_t smem_unit_bytes;            /* shared memory is given in units of this many bytes (256) */
  int32_t smem_reserved_per_cta_bytes; /* the driver's own share per CTA (0 on sm_70, 1 KiB from sm_80) */
  int32_t max_warps_per_sm;           /* 64 */
  int32_t max_ctas_per_sm;            /* 32 */
} volt8_sm_limits;

/* The limits of `arch` (70, 80 or 90) into *out; VOLT8_ERR_ARCH_UNSUPPORTED naming the known ones. */
volt8_status volt8_sm_limits_for_arch(volt8_ctx *ctx, int32_t arch, volt8_sm_limits *out);

typedef enum volt8_occupancy_limit {
  VOLT8_LIMIT_WARPS = 0,         /* the SM's warp slots: full occupancy for this CTA size */
  VOLT8_LIMIT_CTA_SLOTS = 1,
  VOLT8_LIMIT_REGISTERS = 2,
  VOLT8_LIMIT_SHARED_MEMORY = 3
} volt8_occupancy_limit;

typedef struct volt8_occupancy {
  int32_t ctas_per_sm;    /* 0: one CTA does not fit */
  int32_t warps_per_sm;
  int32_t limit;          /* volt8_occupancy_limit; ties name the earliest in the enum's order */
  int32_t ctas_by_warps, ctas_by_registers, ctas_by_smem;
} volt8_occupancy;

/* Resident CTAs and warps per SM of a kernel using `registers` per thread, `smem_bytes` of shared
 * memory per CTA (static plus dynamic) and `threads` per CTA. VOLT8_ERR_INVALID_ARGUMENT naming the
 * value when one is out of range (threads 1..1024, registers 1..the arch's maximum, smem >= 0). */
volt8_status volt8_occupancy_compute(volt8_ctx *ctx, const volt8_sm_limits *limits, int32_t registers,
                                     int32_t smem_bytes, int32_t threads, volt8_occupancy *out);
/* "warps", "CTA slots", "registers", "shared memory". */
const char *volt8_occupancy_limit_name(int32_t limit);

/* What ptxas reports of one entry function. */
typedef struct volt8_kernel_resources {
  int32_t registers;          /* per thread */
  int32_t spill_store_bytes, spill_load_bytes;
  int32_t stack_frame_bytes;
  int32_t static_smem_bytes;
  int32_t barriers;
} volt8_kernel_resources;

/* Reads the lines ptxas -v writes for `entry` ("Function properties for E", then its stack frame and
 * spill line, then "Used N registers, ... B bytes smem ..."). VOLT8_ERR_FORMAT naming the entry when
 * the log has no such report. */
volt8_status volt8_ptxas_log_parse(volt8_ctx *ctx, const char *log, const char *entry, volt8_kernel_resources *out);

#endif
