/* How every part of volt8 reports a failure: a volt8_status plus a message on the context. */
#ifndef VOLT8_ERRORS_H
#define VOLT8_ERRORS_H

#include "core/cuda_driver.h"
#include "volt8.h"

/* Records a formatted message as ctx's last error (ctx may be NULL) and returns `status`. The
 * message is also kept per thread, so volt8_last_error on the failing thread reads its own failure
 * even while other threads fail on the same ctx. Scratch contexts made with calloc (their
 * last_error read directly by the code that made them) need no set-up and hold no per-thread copy. */
volt8_status volt8_fail(volt8_ctx *ctx, volt8_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends text to ctx's last error (e.g. a compiler log) and returns `status`. */
volt8_status volt8_fail_append(volt8_ctx *ctx, volt8_status status, const char *text);
void volt8_clear_error(volt8_ctx *ctx);
/* VOLT8_OK for CUDA_SUCCESS; else "<prefix><what> failed: <driver's text>" on ctx, as
 * VOLT8_ERR_OUT_OF_MEMORY for CUDA_ERROR_OUT_OF_MEMORY and VOLT8_ERR_CUDA for the rest. */
volt8_status volt8_cuda_check(volt8_ctx *ctx, CUresult result, const char *prefix, const char *what);

#endif
