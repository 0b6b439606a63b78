/* The C API from start to end: create a context, load one tensor-parallel rank of a checkpoint's MTP
 * experts onto the GPU, prepare the token counts, run a forward, capture it into a CUDA graph and
 * replay it on new inputs, each result checked against the double-precision reference; then destroy
 * everything.
 *
 *   volt8 demo --keep /tmp/ckpt        # writes a synthetic checkpoint and says where
 *   forward /tmp/ckpt
 *
 * Device memory comes from the CUDA driver API, opened at run time as volt8 opens it, so the program
 * starts on machines without a GPU driver too and says there is nothing to run. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <volt8.h>

enum { TP_SIZE = 4, TP_RANK = 1, TOKENS = 8, MAX_TOP_K = 8 };

/* The few driver calls this program makes itself. */
static struct {
  CUresult (*init)(unsigned flags);
  CUresult (*device_get)(CUdevice *device, int ordinal);
  CUresult (*primary_retain)(CUcontext *context, CUdevice device);
  CUresult (*primary_release)(CUdevice device);
  CUresult (*set_current)(CUcontext context);
  CUresult (*mem_alloc)(CUdeviceptr *pointer, size_t bytes);
  CUresult (*mem_free)(CUdeviceptr pointer);
  CUresult (*to_device)(CUdeviceptr to, const void *from, size_t bytes);
  CUresult (*to_host)(void *to, CUdeviceptr from, size_t bytes);
  CUresult (*synchronize)(void);
} cu;

static int open_driver(void) {
  void *library = dlopen("libcuda.so.1", RTLD_NOW);
  if (!library) return 0;
  *(void **)&cu.init = dlsym(library, "cuInit");
  *(void **)&cu.device_get = dlsym(library, "cuDeviceGet");
  *(void **)&cu.primary_retain = dlsym(library, "cuDevicePrimaryCtxRetain");
  *(void **)&cu.primary_release = dlsym(library, "cuDevicePrimaryCtxRelease_v2");
  *(void **)&cu.set_current = dlsym(library, "cuCtxSetCurrent");
  *(void **)&cu.mem_alloc = dlsym(library, "cuMemAlloc_v2");
  *(void **)&cu.mem_free = dlsym(library, "cuMemFree_v2");
  *(void **)&cu.to_device = dlsym(library, "cuMemcpyHtoD_v2");
  *(void **)&cu.to_host = dlsym(library, "cuMemcpyDtoH_v2");
  *(void **)&cu.synchronize = dlsym(library, "cuCtxSynchronize");
  return cu.init && cu.device_get && cu.primary_retain && cu.primary_release && cu.set_current && cu.mem_alloc &&
         cu.mem_free && cu.to_device && cu.to_host && cu.synchronize;
}

/* FP16 bits of values in +-[0.125, 0.25), different for each seed. */
static void fill_x(uint16_t *x, size_t count, unsigned seed) {
  for (size_t i = 0; i < count; i++) {
    unsigned bits = (unsigned)(i * 2654435761u) ^ (seed * 40503u);
    x[i] = (uint16_t)(((bits >> 31) << 15) | (0x3000u + (bits >> 8) % 0x400u));
  }
}

/* Copies out back from the device and compares it with the reference forward of the same inputs. */
static int check(volt8_ctx *ctx, const volt8_host_checkpoint *host, const volt8_moe_args *args, const uint16_t *x,
                 const int32_t *ids, const float *weights, const char *what) {
  size_t count = (size_t)args->num_tokens * (size_t)host->shape.hidden;
  uint16_t *out = malloc(count * sizeof *out);
  double *reference = malloc(count * sizeof *reference), error = -1.0;
  volt8_status status = out && reference ? VOLT8_OK : VOLT8_ERR_OUT_OF_MEMORY;
  if (status == VOLT8_OK && (cu.synchronize() != CUDA_SUCCESS || cu.to_host(out, (CUdeviceptr)args->out, count * 2)))
    status = VOLT8_ERR_CUDA;
  if (status == VOLT8_OK)
    status = volt8_reference_moe_forward(ctx, &host->shape, &host->experts, x, ids, weights, args->num_tokens,
                                         args->top_k, reference);
  if (status == VOLT8_OK) status = volt8_relative_l2_half(ctx, reference, out, count, &error);
  free(out);
  free(reference);
  if (status != VOLT8_OK) {
    fprintf(stderr, "forward: checking the %s: %s %s\n", what, volt8_status_string(status), volt8_last_error(ctx));
    return 0;
  }
  int ok = error <= 1e-3; /* false for NaN too */
  printf("forward: %s, M=%d top-%d: relative L2 against the reference %.1e (%s)\n", what, args->num_tokens,
         args->top_k, error, ok ? "ok" : "WRONG");
  return ok;
}

static int report(volt8_ctx *ctx, const char *call, volt8_status status) {
  fprintf(stderr, "forward: %s: %s: %s\n", call, volt8_status_string(status), volt8_last_error(ctx));
  return 0;
}

/* Loads the rank, runs an eager forward and a graph replay, and checks both. */
static int run(volt8_ctx *ctx, const char *checkpoint_dir) {
  volt8_load_options load = VOLT8_LOAD_OPTIONS_INIT;
  load.checkpoint_dir = checkpoint_dir;
  load.tp_size = TP_SIZE;
  load.tp_rank = TP_RANK;
  load.max_tokens = TOKENS;
  load.max_top_k = MAX_TOP_K;
  volt8_host_checkpoint *host = NULL; /* the same rank on the host, for the reference */
  volt8_experts *experts = NULL;
  volt8_graph *graph = NULL;
  volt8_moe_args args = VOLT8_MOE_ARGS_INIT;
  volt8_status status;
  int ok = 0;
  if ((status = volt8_checkpoint_load_host(ctx, &load, &host)) != VOLT8_OK)
    return report(ctx, "volt8_checkpoint_load_host", status);
  if ((status = volt8_experts_load(ctx, &load, &experts)) != VOLT8_OK) {
    volt8_host_checkpoint_free(host);
    return report(ctx, "volt8_experts_load", status);
  }
  const int32_t token_counts[] = {1, TOKENS}; /* every count the graphs below will see */
  int32_t hidden = host->shape.hidden, experts_count = host->shape.num_experts;
  int32_t top_k = experts_count < MAX_TOP_K ? experts_count : MAX_TOP_K;
  size_t x_count = (size_t)TOKENS * (size_t)hidden, pairs = (size_t)TOKENS * (size_t)top_k;
  uint16_t *x = malloc(x_count * sizeof *x);
  int32_t *ids = malloc(pairs * sizeof *ids);
  float *weights = malloc(pairs * sizeof *weights);
  CUdeviceptr d_x = 0, d_ids = 0, d_weights = 0, d_out = 0;
  if ((status = volt8_experts_prepare(experts, token_counts, 2)) != VOLT8_OK) {
    report(ctx, "volt8_experts_prepare", status);
    goto done;
  }
  if (!x || !ids || !weights || cu.mem_alloc(&d_x, x_count * 2) || cu.mem_alloc(&d_out, x_count * 2) ||
      cu.mem_alloc(&d_ids, pairs * sizeof *ids) || cu.mem_alloc(&d_weights, pairs * sizeof *weights)) {
    fprintf(stderr, "forward: out of host or device memory\n");
    goto done;
  }
  for (size_t p = 0; p < pairs; p++) {
    ids[p] = (int32_t)((p / top_k + p % top_k) % experts_count); /* top_k distinct experts a token */
    weights[p] = 1.0f / top_k;
  }
  fill_x(x, x_count, 1);
  if (cu.to_device(d_x, x, x_count * 2) || cu.to_device(d_ids, ids, pairs * sizeof *ids) ||
      cu.to_device(d_weights, weights, pairs * sizeof *weights)) {
    fprintf(stderr, "forward: copying the inputs to the device failed\n");
    goto done;
  }
  args.num_tokens = TOKENS;
  args.top_k = top_k;
  args.x = (const void *)d_x;
  args.topk_ids = (const int32_t *)d_ids;
  args.topk_weights = (const float *)d_weights;
  args.out = (void *)d_out;
  /* NULL streams: the legacy default stream here, a private stream for the capture. */
  if ((status = volt8_moe_forward(experts, &args, NULL)) != VOLT8_OK) {
    report(ctx, "volt8_moe_forward", status);
    goto done;
  }
  if (!check(ctx, host, &args, x, ids, weights, "eager forward")) goto done;
  if ((status = volt8_graph_capture(experts, &args, NULL, &graph)) != VOLT8_OK) {
    report(ctx, "volt8_graph_capture", status);
    goto done;
  }
  fill_x(x, x_count, 2); /* the graph keeps the pointers; their contents may change */
  if (cu.to_device(d_x, x, x_count * 2)) {
    fprintf(stderr, "forward: copying the new x to the device failed\n");
    goto done;
  }
  if ((status = volt8_graph_launch(graph, NULL)) != VOLT8_OK) {
    report(ctx, "volt8_graph_launch", status);
    goto done;
  }
  ok = check(ctx, host, &args, x, ids, weights, "graph replay on new x");
done:
  volt8_graph_destroy(graph);
  volt8_experts_destroy(experts);
  volt8_host_checkpoint_free(host);
  if (d_x) cu.mem_free(d_x);
  if (d_out) cu.mem_free(d_out);
  if (d_ids) cu.mem_free(d_ids);
  if (d_weights) cu.mem_free(d_weights);
  free(x);
  free(ids);
  free(weights);
  return ok;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: forward CHECKPOINT_DIR (one that `volt8 demo --keep DIR` wrote will do)\n");
    return 2;
  }
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT; /* device 0, the default kernel cache */
  volt8_ctx *ctx = NULL;
  volt8_status status = volt8_ctx_create(&options, &ctx);
  if (status != VOLT8_OK) {
    fprintf(stderr, "forward: volt8_ctx_create: %s: %s\n", volt8_status_string(status), volt8_last_error(NULL));
    return 1;
  }
  if (volt8_ctx_require_device(ctx) != VOLT8_OK) {
    printf("forward: volt8 %s, nothing to run (%s)\n", volt8_version_string(), volt8_last_error(ctx));
    volt8_ctx_destroy(ctx);
    return 0;
  }
  /* volt8 runs on the device's primary context; this thread allocates in it too. */
  CUdevice device = 0;
  CUcontext primary = NULL;
  int ok = 0;
  if (!open_driver() || cu.init(0) || cu.device_get(&device, options.device) ||
      cu.primary_retain(&primary, device)) {
    fprintf(stderr, "forward: the CUDA driver could not be opened\n");
  } else {
    ok = cu.set_current(primary) == CUDA_SUCCESS && run(ctx, argv[1]);
    cu.primary_release(device);
  }
  volt8_ctx_destroy(ctx);
  return ok ? 0 : 1;
}
