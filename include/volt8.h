/* volt8: FP8 (E4M3) MoE draft experts on Volta and newer GPUs.
 *
 * The only public header. Stable C ABI:
 *  - status values are pinned and never renumbered;
 *  - handles are opaque, and every destroy function accepts NULL;
 *  - options structs begin with `size_t size` (set by their *_INIT macro) and only grow at the end;
 *  - device pointers and streams cross as `void *`; the caller owns its tensors.
 *
 * Thread safety:
 *  - From any thread at any time: volt8_version_*, volt8_status_string, volt8_route_name,
 *    volt8_tuning_warnings, volt8_ctx_create, volt8_rejection_sample_host,
 *    volt8_reference_moe_forward, volt8_relative_l2*, volt8_expert_split and volt8_shape_layout.
 *  - One volt8_ctx may serve several threads at once for: volt8_last_error, volt8_ctx_target_arch,
 *    volt8_ctx_require_device, volt8_plan, volt8_plan_rank, volt8_checkpoint_load_host,
 *    volt8_experts_load, volt8_experts_create_from_host, volt8_rejection_prepare and
 *    volt8_rejection_sample (and, of the experimental calls, volt8_shard_rank_shape,
 *    volt8_expert_shard_host, volt8_variant_count, volt8_variant_name, volt8_variant_compile
 *    and volt8_forward_describe without an experts handle).
 *    Threads asking for the same kernel at once share one compile; the disk cache is safe across
 *    processes.
 *  - A volt8_experts or volt8_graph handle is used by one thread at a time; distinct handles
 *    (of one ctx or several) may be used at once.
 *  - Destroy a handle only when no other thread uses it; a ctx outlives the handles made from it.
 */
#ifndef VOLT8_H
#define VOLT8_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define VOLT8_API __declspec(dllexport)
#elif defined(__GNUC__)
#define VOLT8_API __attribute__((visibility("default")))
#else
#define VOLT8_API
#endif

#define VOLT8_VERSION_MAJOR 0
#define VOLT8_VERSION_MINOR 4
#define VOLT8_VERSION_PATCH 0
#define VOLT8_VERSION_NUMBER (VOLT8_VERSION_MAJOR * 10000 + VOLT8_VERSION_MINOR * 100 + VOLT8_VERSION_PATCH)

/* Pinned values: append only. */
typedef enum volt8_status {
  VOLT8_OK = 0,
  VOLT8_ERR_INVALID_ARGUMENT = 1,
  VOLT8_ERR_OUT_OF_MEMORY = 2,
  VOLT8_ERR_NO_DEVICE = 3,
  VOLT8_ERR_ARCH_UNSUPPORTED = 4,
  VOLT8_ERR_COMPILE = 5,
  VOLT8_ERR_CACHE = 6,
  VOLT8_ERR_IO = 7,
  VOLT8_ERR_FORMAT = 8,
  VOLT8_ERR_CUDA = 9,
  VOLT8_ERR_CODEGEN = 10,
  VOLT8_ERR_CAPTURE = 11,
  VOLT8_ERR_NOT_FOUND = 12,
  VOLT8_ERR_UNSUPPORTED = 13,
  VOLT8_ERR_INTERNAL = 14,
  VOLT8_ERR_SCALE_RANGE = 15
} volt8_status;

VOLT8_API int volt8_version_number(void);
VOLT8_API const char *volt8_version_string(void);
/* Static text naming the status; "unknown status" for values outside the enum. */
VOLT8_API const char *volt8_status_string(volt8_status status);

typedef struct volt8_ctx volt8_ctx;

typedef struct volt8_ctx_options {
  size_t size;             /* sizeof(volt8_ctx_options) */
  int32_t device;          /* CUDA device ordinal; -1 = no device (CPU paths only) */
  const char *cache_dir;   /* NULL: VOLT8_CACHE_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/volt8 */
  int32_t cache_disable;   /* 1: no disk cache (VOLT8_CACHE_DISABLE=1 does the same) */
  const char *target_arch; /* NULL: the device's own ("sm_90"); "sm_70" runs compute_70 PTX through the driver */
  int32_t early_launch_disable; /* 1: no early launch (volt8_ctx_early_launch) even where it is
                                 * available (VOLT8_EARLY_LAUNCH_DISABLE=1 does the same) */
  const char *nvrtc_dirs;  /* since 0.2: ':'-separated folders searched for libnvrtc.so.12/.13 after
                            * $VOLT8_NVRTC and an NVRTC already loaded in the process, before
                            * $VOLT8_NVRTC_DIRS and the system loader; NULL: none */
  const char *const *nvrtc_dir_list; /* since 0.3: nvrtc_dir_count folders searched right after those
                                      * of nvrtc_dirs, each taken whole (a ':' is part of its name);
                                      * none NULL or empty, at most VOLT8_NVRTC_DIR_LIST_MAX; copied */
  int32_t nvrtc_dir_count;
} volt8_ctx_options;
#define VOLT8_CTX_OPTIONS_INIT {sizeof(volt8_ctx_options), 0, NULL, 0, NULL, 0, NULL, NULL, 0}
#define VOLT8_NVRTC_DIR_LIST_MAX 64

/* Creates a context. A machine without a GPU driver still gets a context (CPU paths work);
 * GPU calls on it then return VOLT8_ERR_NO_DEVICE. `options` may be NULL (defaults). */
VOLT8_API volt8_status volt8_ctx_create(const volt8_ctx_options *options, volt8_ctx **out_ctx);
VOLT8_API void volt8_ctx_destroy(volt8_ctx *ctx);
/* Detailed message of the calling thread's last failed call on ctx ("" if none; a thread that never
 * failed on ctx reads the latest failure on ctx from any thread). The pointer stays valid, showing
 * this thread's later failures, until ctx is destroyed. With ctx == NULL: the message of the last
 * failed call made without a context on this thread (volt8_ctx_create, volt8_rejection_sample_host,
 * calls given a NULL handle). */
VOLT8_API const char *volt8_last_error(const volt8_ctx *ctx);

/* The target arch of ctx ("sm_90", "sm_70"...): the device's, or options.target_arch. */
VOLT8_API volt8_status volt8_ctx_target_arch(volt8_ctx *ctx, char *buf, size_t buf_size);
/* 1 when ctx starts kernels early (programmatic dependent launch): kernels compiled for sm_90 or
 * newer, a driver of CUDA 12.3 or newer, not disabled. In forwards without a route pass (both GEMMs
 * block_m 1: few tokens) down and the reduce then request their weights while the kernel before
 * them finishes, and wait for it before they read its results; in routed forwards an hmma down
 * does the same. 0 otherwise, and without a device. */
VOLT8_API int32_t volt8_ctx_early_launch(const volt8_ctx *ctx);
/* VOLT8_OK when ctx holds a usable GPU, VOLT8_ERR_NO_DEVICE (with a message) otherwise. */
VOLT8_API volt8_status volt8_ctx_require_device(volt8_ctx *ctx);

/* ---- the shape of one rank's experts ---- */

/* Shape constants baked into every generated kernel. */
typedef struct volt8_moe_shape {
  size_t size;                /* sizeof(volt8_moe_shape) */
  int32_t hidden;             /* H: gate_up's K, down's N */
  int32_t intermediate;       /* I: this rank's expert width (gate_up's N per half, down's K) */
  int32_t num_experts;        /* E */
  int32_t block_n, block_k;   /* scale block: (128,128) for checkpoints, (1,128) or (128,128) online */
  int32_t intermediate_offset; /* rank's offset inside the scale grid along I, in [0, block) */
  /* Since 0.3 (the shape's size grew; a caller built against 0.2 is refused, naming the size).
   * Expert parallelism: the rank holds experts [expert_start, expert_start + num_experts) of
   * global_experts and is given global ids; pairs of other experts are skipped (not bad ids), ids
   * outside [0, global_experts) are bad ids. global_experts 0: all experts (expert_start 0). */
  int32_t expert_start;
  int32_t global_experts;
} volt8_moe_shape;
#define VOLT8_MOE_SHAPE_INIT {sizeof(volt8_moe_shape), 2560, 160, 512, 128, 128, 32, 0, 0}

/* Since 0.4: what a shape implies, so that a binding asks instead of copying the rules. The host and
 * device arrays of a rank's experts are w13 [E][2*I][H] (gate rows, then up rows), w2 [E][H][I] and
 * the scale grids below (runtime/moe/kernels/moe_layout.h). */
typedef struct volt8_moe_layout {
  size_t size;               /* sizeof(volt8_moe_layout), set by the caller */
  int32_t model_experts;     /* the model's E: global_experts, or num_experts without expert parallelism */
  int32_t s13_row_blocks;    /* s13 is [E][2][s13_row_blocks][s13_k_blocks]: ceil((off + I) / block_n) */
  int32_t s13_k_blocks;      /* ceil(H / block_k) */
  int32_t s2_row_blocks;     /* s2 is [E][s2_row_blocks][s2_k_blocks]: ceil(H / block_n) */
  int32_t s2_k_blocks;       /* ceil((off + I) / block_k) */
} volt8_moe_layout;
#define VOLT8_MOE_LAYOUT_INIT {sizeof(volt8_moe_layout), 0, 0, 0, 0, 0}

/* The layout of `shape` (ctx may be NULL); VOLT8_ERR_INVALID_ARGUMENT naming the field for a shape
 * the library does not take. Written up to out_layout->size. */
VOLT8_API volt8_status volt8_shape_layout(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_moe_layout *out_layout);
/* Since 0.4: the expert-parallel split: EP rank ep_rank of ep_size over num_experts holds experts
 * [*out_start, *out_start + *out_count), contiguous ranges, the first num_experts % ep_size ranks one
 * expert more (what `volt8 plan --ep` reports). Needs 0 <= ep_rank < ep_size <= num_experts. */
VOLT8_API volt8_status volt8_expert_split(int32_t num_experts, int32_t ep_size, int32_t ep_rank, int32_t *out_start,
                                          int32_t *out_count);


/* ---- resident experts and the MoE forward ---- */

typedef struct volt8_experts volt8_experts;

/* Host copies of one rank's experts in the device layout (E4M3 bytes, FP16 scales holding
 * scale * 2^8); see runtime/moe/kernels/moe_layout.h for the exact layout. */
typedef struct volt8_host_experts {
  size_t size;           /* sizeof(volt8_host_experts) */
  const uint8_t *w13;    /* [E][2*I][H] gate rows then up rows */
  const uint16_t *s13;   /* [E][2][ceil((off+I)/bn)][ceil(H/bk)] */
  const uint8_t *w2;     /* [E][H][I] */
  const uint16_t *s2;    /* [E][ceil(H/bn)][ceil((off+I)/bk)] */
} volt8_host_experts;
#define VOLT8_HOST_EXPERTS_INIT {sizeof(volt8_host_experts), NULL, NULL, NULL, NULL}

/* Uploads `host` into one device allocation and sizes the workspace for up to
 * max_tokens x max_top_k routed pairs (max_top_k capped at E; at most 2^30 pairs). A workspace the
 * GPU has no room for is VOLT8_ERR_OUT_OF_MEMORY, naming its bytes; a scale that is zero, infinite or
 * NaN is VOLT8_ERR_SCALE_RANGE, naming it (as a checkpoint's load refuses it). Nothing stays
 * allocated on failure. */
VOLT8_API volt8_status volt8_experts_create_from_host(volt8_ctx *ctx, const volt8_moe_shape *shape,
                                                      const volt8_host_experts *host, int32_t max_tokens,
                                                      int32_t max_top_k, volt8_experts **out_experts);
VOLT8_API void volt8_experts_destroy(volt8_experts *experts);
/* Since 0.4: the shape of the handle's experts, as loaded or created (with expert parallelism: the
 * rank's num_experts, expert_start and global_experts). Written up to out_shape->size, which the
 * caller sets (VOLT8_MOE_SHAPE_INIT). */
VOLT8_API volt8_status volt8_experts_shape(const volt8_experts *experts, volt8_moe_shape *out_shape);

typedef struct volt8_moe_args {
  size_t size;                /* sizeof(volt8_moe_args) */
  int32_t num_tokens;         /* M */
  int32_t top_k;
  const void *x;              /* device, FP16 [M][hidden] */
  const int32_t *topk_ids;    /* device, [M][top_k] */
  const float *topk_weights;  /* device, [M][top_k] */
  void *out;                  /* device, FP16 [M][hidden] */
  int32_t check_ids;          /* 1: copy topk_ids to the host and reject ids outside [0, E) before any
                                 launch (synchronises; refused while capturing). 0: the device skips
                                 such pairs and counts them (volt8_experts_bad_id_count). */
} volt8_moe_args;
#define VOLT8_MOE_ARGS_INIT {sizeof(volt8_moe_args), 0, 0, NULL, NULL, NULL, NULL, 0}

/* route -> gate_up (+SiLU*up) -> down -> weighted top-k reduce, enqueued on `stream`
 * (a CUstream; NULL = the legacy default stream). No host synchronisation. */
VOLT8_API volt8_status volt8_moe_forward(volt8_experts *experts, const volt8_moe_args *args, void *stream);

/* Routed pairs the last forward skipped because their id was outside [0, E) (synchronises); E is the
 * model's expert count: with expert parallelism, pairs of other ranks' experts are not counted. */
VOLT8_API volt8_status volt8_experts_bad_id_count(volt8_experts *experts, int32_t *out_count);

/* Compiles or loads from the cache every variant that forwards of these token counts use, and grows
 * the workspace to the largest, so nothing compiles or allocates later. A forward that would need
 * an unprepared variant while its stream is capturing returns VOLT8_ERR_CAPTURE. Not during capture. */
VOLT8_API volt8_status volt8_experts_prepare(volt8_experts *experts, const int32_t *m_values, int32_t count);

/* ---- the double-precision reference (tests, bench, demo) ---- */

/* The MoE forward in double on the host, the contract the GPU kernels are checked against:
 * weights dequantized exactly, y = x . W13^T, h = silu(gate) * up rounded to FP16,
 * out[t] = sum_j topk_weights[t][j] * (h . W2^T). Like the GPU, pairs whose id is outside
 * [0, E) contribute nothing; with expert parallelism (shape->global_experts) ids are global and
 * only the shape's experts [expert_start, expert_start + num_experts) contribute, so the outputs of
 * the ranks sum to the output of all experts. x: FP16 bits [num_tokens][H]; topk_ids, topk_weights:
 * [num_tokens][top_k]; out: [num_tokens][H], overwritten. Only the experts routed to are read;
 * a NaN weight code or a non-finite scale in them is VOLT8_ERR_INVALID_ARGUMENT. ctx may be NULL. */
VOLT8_API volt8_status volt8_reference_moe_forward(volt8_ctx *ctx, const volt8_moe_shape *shape,
                                                   const volt8_host_experts *experts, const uint16_t *x,
                                                   const int32_t *topk_ids, const float *topk_weights,
                                                   int32_t num_tokens, int32_t top_k, double *out);
/* ||result - reference|| / ||reference|| into *out_error. A NaN or infinity in either array gives
 * NaN (so `error <= tol` fails); all-zero vs all-zero gives 0; nonzero vs all-zero gives +inf. */
VOLT8_API volt8_status volt8_relative_l2(volt8_ctx *ctx, const double *reference, const double *result,
                                         size_t count, double *out_error);
/* The same with the result given as FP16 bits (the GPU's output). */
VOLT8_API volt8_status volt8_relative_l2_half(volt8_ctx *ctx, const double *reference, const uint16_t *result,
                                              size_t count, double *out_error);

/* ---- CUDA graphs ---- */

typedef struct volt8_graph volt8_graph;
/* Captures one forward with these arguments (pointers are baked in; their contents may change
 * between launches) into an instantiated graph. `stream` (CUstream, NULL = a private stream) is
 * used for the capture only. */
VOLT8_API volt8_status volt8_graph_capture(volt8_experts *experts, const volt8_moe_args *args, void *stream,
                                           volt8_graph **out_graph);
VOLT8_API volt8_status volt8_graph_launch(volt8_graph *graph, void *stream);
VOLT8_API void volt8_graph_destroy(volt8_graph *graph);

/* Warnings of the tuning-table lookup in this process (no table for a shape, a corrupt table
 * skipped), newline-separated into buf; *out_count is how many. */
VOLT8_API volt8_status volt8_tuning_warnings(char *buf, size_t buf_size, int32_t *out_count);

/* Kernels compiled on ctx that its disk cache did not keep (a cache that cannot be written only
 * makes later runs slower, so compiles still succeed): *out_count, and in buf (may be NULL) why
 * the first was not kept, or why ctx has no disk cache at all. */
VOLT8_API volt8_status volt8_cache_store_failures(volt8_ctx *ctx, int32_t *out_count, char *buf, size_t buf_size);


/* ---- checkpoints: loading, planning and memory ---- */

/* How the MTP experts reach E4M3: the checkpoint's own bytes and block scales (native), or
 * FP16/BF16 experts quantized at load (online, only when the caller opts in). */
typedef enum volt8_route {
  VOLT8_ROUTE_NATIVE = 1,
  VOLT8_ROUTE_ONLINE = 2
} volt8_route;

/* Static text: "native", "online", or "unknown". */
VOLT8_API const char *volt8_route_name(int32_t route);

/* Filled by a load when volt8_load_options.report is set. */
typedef struct volt8_load_report {
  size_t size;                      /* sizeof(volt8_load_report), set by the caller */
  int32_t route;                    /* volt8_route */
  int32_t num_experts;
  double scale_max_relative_error;  /* largest |fp16(scale) - scale| / scale; 0 for BF16/F16 scales */
  double online_relative_l2;        /* online: ||W - dequant(quant(W))|| / ||W|| over the rank's slice */
  double online_max_abs_error;      /* online: largest |W - dequant(quant(W))| */
  int64_t staging_peak_bytes;       /* largest host staging held at once (one expert) */
  int64_t workspace_bytes;          /* the forward workspace allocated for max_tokens x max_top_k (0 on the host) */
} volt8_load_report;
#define VOLT8_LOAD_REPORT_INIT {sizeof(volt8_load_report), 0, 0, 0.0, 0.0, 0.0, 0, 0}

typedef struct volt8_load_options {
  size_t size;                      /* sizeof(volt8_load_options) */
  const char *checkpoint_dir;       /* the target's checkpoint (config.json, safetensors) */
  const char *draft_checkpoint_dir; /* NULL: the MTP layer is read from checkpoint_dir */
  int32_t tp_size;                  /* tensor-parallel ranks sharing the experts' intermediate dim */
  int32_t tp_rank;                  /* this rank, in [0, tp_size) */
  int32_t max_tokens, max_top_k;    /* workspace of the loaded experts (volt8_experts_load), at most 2^30
                                       routed pairs (max_tokens x max_top_k, max_top_k capped at E); the
                                       default max_top_k, 16, serves every top-k from 1 to 16 */
  const char *mtp_expert_quantization; /* "fp8": quantize unquantized experts at load; NULL: the
                                          config's "mtp_expert_quantization", else native only */
  int32_t online_block_n;           /* online scale block rows: 1 or 128 (block_k is 128) */
  int32_t mtp_layer;                /* index of the MTP layer to read (mtp.layers.<i>) */
  volt8_load_report *report;        /* optional output */
  int32_t expert_start;             /* expert parallelism: this rank holds experts [expert_start, */
  int32_t expert_count;             /* expert_start + expert_count) of E; count 0: all (start 0) */
} volt8_load_options;
#define VOLT8_LOAD_OPTIONS_INIT {sizeof(volt8_load_options), NULL, NULL, 1, 0, 64, 16, NULL, 128, 0, NULL, 0, 0}

/* Reads, validates and shards the MTP experts of a checkpoint (safetensors, single or indexed;
 * ModelOpt or block-FP8 metadata) and uploads this rank's share into one device allocation,
 * one expert at a time. All-or-nothing: on failure nothing stays allocated. Needs a GPU. */
VOLT8_API volt8_status volt8_experts_load(volt8_ctx *ctx, const volt8_load_options *options,
                                          volt8_experts **out_experts);

/* This rank's experts in host memory, in the device layout (runtime/moe/kernels/moe_layout.h). CPU only. */
typedef struct volt8_host_checkpoint {
  size_t size;                /* sizeof(volt8_host_checkpoint) */
  volt8_moe_shape shape;
  volt8_host_experts experts; /* arrays owned by this struct */
  volt8_load_report report;
} volt8_host_checkpoint;

VOLT8_API volt8_status volt8_checkpoint_load_host(volt8_ctx *ctx, const volt8_load_options *options,
                                                  volt8_host_checkpoint **out_checkpoint);
VOLT8_API void volt8_host_checkpoint_free(volt8_host_checkpoint *checkpoint);

/* Bytes of one rank's experts, and what FP16 and a slice padded to whole 128-row blocks would take. */
typedef struct volt8_memory_report {
  size_t size;              /* sizeof(volt8_memory_report), set by the caller */
  int64_t resident_bytes;   /* the device allocation of weights and scales (alignment included) */
  int64_t weight_bytes;     /* E4M3 bytes */
  int64_t scale_bytes;      /* FP16 scale bytes */
  int64_t workspace_bytes;  /* forward workspace (in a plan: for the options' max_tokens x max_top_k) */
  int64_t fp16_bytes;       /* the same experts in FP16 */
  int64_t padded_bytes;     /* E4M3 with the slice padded to whole 128 blocks, plus its FP16 scales */
} volt8_memory_report;
#define VOLT8_MEMORY_REPORT_INIT {sizeof(volt8_memory_report), 0, 0, 0, 0, 0, 0}

VOLT8_API volt8_status volt8_experts_memory(const volt8_experts *experts, volt8_memory_report *report);

/* What a load would do, found without a GPU: the checkpoint is parsed and every expert validated
 * (native: all weight codes and scale blocks; online: every source value). */
typedef struct volt8_plan_report {
  size_t size;                     /* sizeof(volt8_plan_report), set by the caller */
  int32_t route;                   /* volt8_route */
  int32_t hidden, intermediate;    /* intermediate: the checkpoint's full width */
  int32_t num_experts;
  int32_t tp_size;
  int32_t block_n, block_k;        /* scale block of the resident experts */
  char quant_format[32];           /* "modelopt FP8_PB_WO", "fp8", "unquantized BF16"... */
  char scale_dtype[8];             /* the checkpoint's scale dtype ("BF16", "F32", "F16"); "" online */
  char tensor_prefix[192];         /* e.g. "mtp.layers.0.mlp.experts." */
  double scale_max_relative_error; /* as in volt8_load_report */
  int32_t max_tokens, max_top_k;   /* the options' workspace sizes, for volt8_plan_rank's workspace_bytes
                                      (max_tokens 0: none, workspace_bytes 0) */
} volt8_plan_report;
#define VOLT8_PLAN_REPORT_INIT {sizeof(volt8_plan_report), 0, 0, 0, 0, 0, 0, 0, "", "", "", 0.0, 0, 0}

VOLT8_API volt8_status volt8_plan(volt8_ctx *ctx, const volt8_load_options *options, volt8_plan_report *report);
/* Rank `rank`'s shape and memory under `plan` (either output may be NULL). `shape` has its size set
 * (VOLT8_MOE_SHAPE_INIT) and is filled whole; `memory` is written up to its size. */
VOLT8_API volt8_status volt8_plan_rank(volt8_ctx *ctx, const volt8_plan_report *plan, int32_t rank,
                                       volt8_moe_shape *shape, volt8_memory_report *memory);

/* ---- speculative decoding: the rejection sampler ---- */

/* One verification step of B requests. For request b with n = num_draft[b] drafts x_0..x_{n-1}:
 * draft x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)) (p: target_probs row i,
 * q: draft_probs row i, or one-hot at x_i when draft_probs is NULL); at the first rejection the
 * emitted token is drawn from normalize(max(0, p_i - q_i)) (from p_i when that is all zero);
 * when all n are accepted a bonus token is drawn from p_n. Greedy requests accept while x_i is
 * the argmax of p_i (the lowest token among equal maxima) and emit that argmax where they stop.
 * out_ids[b] = accepted drafts, the emitted token, then -1 up to K+1 entries.
 *
 * Randomness: Philox4x32-10 keyed by `seed`, counter (b, position, offset); the host and the GPU
 * draw the same bits and reduce exactly, so the same inputs, seed and offset give the same tokens
 * on both. Use a fresh offset (or seed) per step. Accuracy: acceptance is resolved to 2^-29; the
 * weights of a draw are rounded down to whole multiples of 2^-39..2^-38 of the row's largest weight
 * (smaller ones are never drawn), so the total probability moved is below V * 2^-38 (6e-7 at
 * V = 151936); a token of probability 0 is never emitted.
 *
 * Invalid input of one request (num_draft outside 0..K, a draft id outside [0, V), a NaN,
 * infinite or negative probability in a row it uses: target rows 0..n, draft rows 0..n-1, or a
 * target row with no positive entry) sets that request's out_ids row to -1 and its num_accepted
 * to 0; so out_ids[b][0] == -1 is the per-request error flag. Other requests are sampled as usual.
 * Limits: 1 <= V <= 2^24, 0 <= K <= 65534. */
typedef struct volt8_rejection_args {
  size_t size;                 /* sizeof(volt8_rejection_args) */
  int32_t batch;               /* B requests */
  int32_t max_draft;           /* K: row stride of the draft arrays */
  const int32_t *num_draft;    /* [B] draft length of each request, 0..K */
  const int32_t *draft_ids;    /* [B, K] */
  const float *draft_probs;    /* [B, K, V], or NULL when drafts are deterministic (q one-hot) */
  const float *target_probs;   /* [B, K+1, V]: position K is the bonus position */
  int32_t vocab;               /* V */
  const uint8_t *greedy;       /* [B] or NULL: 1 = greedy request (argmax acceptance) */
  uint64_t seed, offset;       /* counter-based RNG: same seed+offset -> same result */
  int32_t *out_ids;            /* [B, K+1]: accepted drafts, then one recovered or bonus token, then -1 */
  int32_t *num_accepted;       /* [B]: accepted draft tokens, 0..num_draft */
} volt8_rejection_args;
#define VOLT8_REJECTION_ARGS_INIT {sizeof(volt8_rejection_args), 0, 0, NULL, NULL, NULL, NULL, 0, NULL, 0, 0, NULL, NULL}

/* The sampler on host pointers (the CPU reference of the GPU path). Any invalid request (above)
 * makes it return VOLT8_ERR_INVALID_ARGUMENT after sampling the others; malformed args (size,
 * NULL arrays, B < 0, K or V out of range) return it before writing anything. The message is
 * volt8_last_error(NULL) (per thread). Safe from any thread. */
VOLT8_API volt8_status volt8_rejection_sample_host(const volt8_rejection_args *args);

/* Compiles (or loads from the disk cache) the sampler kernels for ctx's target arch and, when ctx
 * has a GPU, loads them. Call it before capturing volt8_rejection_sample into a CUDA graph. On a
 * context without a GPU it only compiles, which fills the kernel cache. Not during capture. */
VOLT8_API volt8_status volt8_rejection_prepare(volt8_ctx *ctx);

/* The sampler on device pointers, enqueued on `stream` (a CUstream; NULL = the legacy default
 * stream): three kernel launches, no host synchronisation; capturable once prepared (unprepared
 * and capturing: VOLT8_ERR_CAPTURE). Rows are cut into chunks so that a small batch still uses the
 * whole GPU; the passes share a scratch (16 bytes per row chunk, 264 per summed chunk, 32 per
 * request) taken with cuMemAllocAsync and freed with cuMemFreeAsync on `stream`; a captured graph holds them as an allocation and a free
 * node, and CUDA's rules for such graphs apply (e.g. no cloning into a child graph node). Calls on
 * different streams at once are safe. Probability values are checked on the device: read the
 * per-request flag (out_ids[b][0] == -1) after the stream has run. Pointers must be
 * 4-byte aligned (greedy: any). Outside capture the first call prepares. A captured graph keeps
 * the seed and offset it was captured with. */
VOLT8_API volt8_status volt8_rejection_sample(volt8_ctx *ctx, const volt8_rejection_args *args, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* VOLT8_H */

/* ---- experimental: outside the stable ABI ----
 * Declared only where VOLT8_EXPERIMENTAL_API is defined before this header is included (volt8's
 * tools and tests do). Exported for the Python binding and the tools, but any release may change or
 * remove these calls without a new major version. */
#if defined(VOLT8_EXPERIMENTAL_API) && !defined(VOLT8_H_EXPERIMENTAL)
#define VOLT8_H_EXPERIMENTAL

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel variants by name. A name ("gate_up.cc.bm1.bn8.w4.sk1.l16") is printed from the variant's
 * parameters for logs, tuning tables and `volt8 list`; its format may change with the variant space. */
/* Number of kernel variants the code generator offers for `shape` on ctx's target arch. */
VOLT8_API volt8_status volt8_variant_count(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t *out_count);
/* Name of variant `index` (`volt8 list --shape S` lists them). */
VOLT8_API volt8_status volt8_variant_name(volt8_ctx *ctx, const volt8_moe_shape *shape, int32_t index,
                                          char *buf, size_t buf_size);
/* Generates, compiles (or loads from the disk cache) variant `name` for ctx's target arch.
 * `out_from_cache` (may be NULL) is set to 1 when the image came from the cache. */
VOLT8_API volt8_status volt8_variant_compile(volt8_ctx *ctx, const volt8_moe_shape *shape, const char *name,
                                             int32_t *out_from_cache);

/* Pins the gate_up and down variants by name (tests, bench, tuner); NULL restores the dispatch
 * policy. */
VOLT8_API volt8_status volt8_experts_set_variants(volt8_experts *experts, const char *gate_up_variant,
                                                  const char *down_variant);

/* What a forward of (num_tokens, top_k) runs. */
typedef struct volt8_forward_info {
  size_t size;              /* sizeof(volt8_forward_info), set by the caller */
  int32_t single_launch;    /* 1: one kernel runs the whole forward (templates/moe_single.cu), doing the
                             * work of gate_up and down below */
  int32_t pinned;           /* 1: the variants were pinned by name (volt8_experts_set_variants) */
  char gate_up[96], down[96]; /* the variants */
  char gate_up_origin[256], down_origin[256]; /* "pinned", "heuristic", the tuning table that named it
                             * and the M it serves ("built-in:tuning/tables/op=...json (M=8)"), its
                             * device in its name */
} volt8_forward_info;
#define VOLT8_FORWARD_INFO_INIT {sizeof(volt8_forward_info), 0, 0, "", "", "", ""}

/* Either experts (its context, shape and pinned variants; ctx and shape NULL), or ctx and shape (the
 * dispatch on ctx's target arch, no device needed). The forward decides the same way. */
VOLT8_API volt8_status volt8_forward_describe(volt8_ctx *ctx, const volt8_moe_shape *shape, volt8_experts *experts,
                                              int32_t num_tokens, int32_t top_k, volt8_forward_info *out_info);

/* One expert's gate, up and down matrices as an engine's weight loader holds them: the whole
 * checkpoint tensors (not sharded), row-major, in host memory. */
typedef struct volt8_expert_tensors {
  size_t size;                  /* sizeof(volt8_expert_tensors) */
  int32_t hidden, intermediate; /* H, and the checkpoint's full I */
  const char *weight_dtype;     /* "F8_E4M3" (native), or "BF16", "F16", "F32" (quantized online) */
  const char *scale_dtype;      /* native: "F32", "BF16" or "F16"; unused online */
  const void *weights[3];       /* gate [I][H], up [I][H], down [H][I] */
  const void *scales[3];        /* native: their 128x128 block grids [ceil(rows/128)][ceil(cols/128)] */
  const char *names[3];         /* the weights' names in messages (NULL: gate_proj, up_proj, down_proj) */
  int32_t expert;               /* since 0.4 (the struct grew; the older size is read as expert 0): the
                                 * expert's number in messages, its global id in the layer */
} volt8_expert_tensors;
#define VOLT8_EXPERT_TENSORS_INIT {sizeof(volt8_expert_tensors), 0, 0, NULL, NULL, {NULL, NULL, NULL}, \
                                   {NULL, NULL, NULL}, {NULL, NULL, NULL}, 0}

/* The shape of tensor-parallel rank tp_rank of tp_size's experts, for experts of hidden x
 * intermediate (the checkpoint's full width): native when online_block_n is 0, else quantized online
 * with scale blocks of online_block_n (1 or 128) rows. num_experts is 1: set it, and expert_start
 * and global_experts for expert parallelism, to the experts the rank holds. out_shape has its size
 * set (VOLT8_MOE_SHAPE_INIT) and is filled whole. */
VOLT8_API volt8_status volt8_shard_rank_shape(volt8_ctx *ctx, int32_t hidden, int32_t intermediate, int32_t tp_size,
                                              int32_t tp_rank, int32_t online_block_n, volt8_moe_shape *out_shape);

/* Rank tp_rank of tp_size's share of one expert, made as volt8_experts_load and
 * volt8_checkpoint_load_host make it from a checkpoint: native (online_block_n 0, F8_E4M3 weights):
 * the rank's gate and up rows and down columns byte for byte and the scale blocks they touch,
 * validated and converted; online (online_block_n 1 or 128, unquantized weights): the rank's slice
 * quantized on its own grid. Writes one expert in the layout of volt8_shard_rank_shape's shape into
 * out's four arrays (the caller's, each one expert long), and only when the whole expert is good;
 * keeps nothing. CPU only; ctx may be NULL (the message is then volt8_last_error(NULL)). */
VOLT8_API volt8_status volt8_expert_shard_host(volt8_ctx *ctx, const volt8_expert_tensors *tensors, int32_t tp_size,
                                               int32_t tp_rank, int32_t online_block_n,
                                               const volt8_host_experts *out);

/* ---- what the library found (volt8 doctor) ---- */
/* The text fields of these reports hold a text whole, or, where it is longer than the field, its start
 * ending with "..." (a path cut is never passed off as a whole one). */

/* The path of the file holding the library's code (libvolt8.so.0, or a program it is linked into)
 * into buf; VOLT8_ERR_NOT_FOUND when the loader cannot tell. */
VOLT8_API volt8_status volt8_library_path(char *buf, size_t buf_size);

/* One NVRTC candidate, as ctx's search tried it (docs/design.md, "NVRTC search order"). */
typedef struct volt8_nvrtc_candidate {
  size_t size;          /* sizeof(volt8_nvrtc_candidate), set by VOLT8_NVRTC_CANDIDATE_INIT */
  char path[512];       /* a path, or a bare soname for the system loader's search */
  char origin[48];      /* "VOLT8_NVRTC", "already loaded", "options.nvrtc_dirs", "VOLT8_NVRTC_DIRS",
                           "system search", "CUDA_HOME", "CUDA toolkit of the build" */
  int32_t usable;       /* 1: loaded, and it compiles for each of archs */
  char version[16];     /* "12.9" when usable, else "" */
  int32_t num_archs;
  int32_t archs[64];    /* the compute_XX it lists (nvrtcGetSupportedArchs), ascending as it lists them */
  char outcome[512];    /* what the search found: "NVRTC 13.0 supports compute_75..compute_121", "no such
                           file", "not loaded: ...", "same library as ...", "NVRTC 11.0 skipped: ..." */
} volt8_nvrtc_candidate;
#define VOLT8_NVRTC_CANDIDATE_INIT {sizeof(volt8_nvrtc_candidate), "", "", 0, "", 0, {0}, ""}

/* Searches for NVRTC as ctx's first compile would (once per ctx) and gives the number of candidates
 * tried, in search order; *out_dropped (may be NULL): candidates tried but not kept for this list. */
VOLT8_API volt8_status volt8_nvrtc_candidate_count(volt8_ctx *ctx, int32_t *out_count, int32_t *out_dropped);
/* Candidate `index` of that list into *out (out->size set by the caller). */
VOLT8_API volt8_status volt8_nvrtc_candidate_get(volt8_ctx *ctx, int32_t index, volt8_nvrtc_candidate *out);
/* The index in that list of the candidate that compiles for compute_<arch> (70 for compute_70), or
 * VOLT8_ERR_ARCH_UNSUPPORTED with the message a compile would give. */
VOLT8_API volt8_status volt8_nvrtc_candidate_for_arch(volt8_ctx *ctx, int32_t arch, int32_t *out_index);

/* ctx's kernel cache folder and what it holds. */
typedef struct volt8_cache_report {
  size_t size;          /* sizeof(volt8_cache_report), set by VOLT8_CACHE_REPORT_INIT */
  char dir[1024];       /* "" when ctx has no disk cache */
  char note[512];       /* why there is none; or why it cannot be written; else "" */
  int32_t exists;       /* 1: the folder exists */
  int32_t writable;     /* 1: entries can be published (the folder, or where it would be made, is writable) */
  int64_t entries;      /* kernel entries of this cache format, every arch and NVRTC version: the files
                           v1/sm_<arch>/<ih[0:2]>/<ih>/<key>.entry, and nothing else under the folder */
  int64_t bytes;        /* bytes of those entries and of the cache's own temp files in tmp/
                           (volt8-<pid>.<16 hex digits>); other files there are not the cache's */
} volt8_cache_report;
#define VOLT8_CACHE_REPORT_INIT {sizeof(volt8_cache_report), "", "", 0, 0, 0, 0}

/* Reads ctx's cache folder without changing it (symbolic links are not followed). */
VOLT8_API volt8_status volt8_cache_report_get(volt8_ctx *ctx, volt8_cache_report *out);

/* One tuning table the lookup could read (docs/design.md, "Tuning tables"). */
typedef struct volt8_tuning_table_info {
  size_t size;          /* sizeof(volt8_tuning_table_info), set by VOLT8_TUNING_TABLE_INFO_INIT */
  char origin[1024];    /* its path in $VOLT8_TUNING_DIR, or "built-in:tuning/tables/<name>" */
  int32_t built_in;     /* 1: built into the library */
  char op[8];           /* "gate_up" or "down" */
  int32_t n, k;         /* the op's weight matrix per expert */
  int32_t block_n, block_k;
  int32_t arch;         /* 70 for sm_70 */
  char device[128];     /* the device token of its name, or "any" */
  int32_t valid;        /* 1: it parses; 0: the lookup skips it (problem says why) */
  int32_t token_counts; /* M keys */
  int32_t measured;     /* 1 measured, 0 derived from a model, -1 not said */
  int32_t top_k;        /* the top-k it was measured at; 0 not said */
  char problem[512];    /* why it does not parse, else "" */
  int32_t m_min, m_max; /* its smallest and largest M (0 when it does not parse): the counts it speaks for
                         * run from half the smallest up (a table of large M alone leaves the small to others) */
} volt8_tuning_table_info;
#define VOLT8_TUNING_TABLE_INFO_INIT {sizeof(volt8_tuning_table_info), "", 0, "", 0, 0, 0, 0, 0, "", 0, 0, 0, 0, "", 0, 0}

/* The tables for target `arch` (70) on a device named `device_name` (NULL: device=any only), in
 * lookup order: $VOLT8_TUNING_DIR's, then the built-in ones, each group by name. The list is made at
 * each call; *out_count is its length. */
VOLT8_API volt8_status volt8_tuning_table_count(int32_t arch, const char *device_name, int32_t *out_count);
/* Table `index` of that list into *out (out->size set by the caller). */
VOLT8_API volt8_status volt8_tuning_table_get(int32_t arch, const char *device_name, int32_t index,
                                             volt8_tuning_table_info *out);

#ifdef __cplusplus
}
#endif

#endif /* VOLT8_EXPERIMENTAL_API */
