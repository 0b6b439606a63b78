/* Version queries, status names and where the library's code was loaded from. */
#define VOLT8_EXPERIMENTAL_API 1 /* defines volt8_library_path */
#include "volt8.h"
#include "core/errors.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOLT8_STR2(x) #x
#define VOLT8_STR(x) VOLT8_STR2(x)

int volt8_version_number(void) { return VOLT8_VERSION_NUMBER; }

const char *volt8_version_string(void) {
  return VOLT8_STR(VOLT8_VERSION_MAJOR) "." VOLT8_STR(VOLT8_VERSION_MINOR) "." VOLT8_STR(VOLT8_VERSION_PATCH);
}

const char *volt8_status_string(volt8_status status) {
  switch (status) {
    case VOLT8_OK: return "VOLT8_OK: success";
    case VOLT8_ERR_INVALID_ARGUMENT: return "VOLT8_ERR_INVALID_ARGUMENT: invalid argument";
    case VOLT8_ERR_OUT_OF_MEMORY: return "VOLT8_ERR_OUT_OF_MEMORY: out of memory";
    case VOLT8_ERR_NO_DEVICE: return "VOLT8_ERR_NO_DEVICE: no usable GPU or driver";
    case VOLT8_ERR_ARCH_UNSUPPORTED: return "VOLT8_ERR_ARCH_UNSUPPORTED: no compiler or cached kernel for the target arch";
    case VOLT8_ERR_COMPILE: return "VOLT8_ERR_COMPILE: kernel compilation failed";
    case VOLT8_ERR_CACHE: return "VOLT8_ERR_CACHE: kernel cache error";
    case VOLT8_ERR_IO: return "VOLT8_ERR_IO: file input/output error";
    case VOLT8_ERR_FORMAT: return "VOLT8_ERR_FORMAT: malformed input file";
    case VOLT8_ERR_CUDA: return "VOLT8_ERR_CUDA: CUDA driver error";
    case VOLT8_ERR_CODEGEN: return "VOLT8_ERR_CODEGEN: code generation failed";
    case VOLT8_ERR_CAPTURE: return "VOLT8_ERR_CAPTURE: not allowed while the stream is capturing";
    case VOLT8_ERR_NOT_FOUND: return "VOLT8_ERR_NOT_FOUND: not found";
    case VOLT8_ERR_UNSUPPORTED: return "VOLT8_ERR_UNSUPPORTED: unsupported";
    case VOLT8_ERR_INTERNAL: return "VOLT8_ERR_INTERNAL: internal error";
    case VOLT8_ERR_SCALE_RANGE: return "VOLT8_ERR_SCALE_RANGE: a block scale is out of the FP16 range";
  }
  return "unknown status";
}

volt8_status volt8_library_path(char *buf, size_t buf_size) {
  if (!buf || buf_size == 0) return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_library_path: buf is NULL or empty");
  buf[0] = '\0';
  Dl_info info;
  if (!dladdr((void *)volt8_library_path, &info) || !info.dli_fname)
    return volt8_fail(NULL, VOLT8_ERR_NOT_FOUND, "volt8_library_path: the dynamic loader does not know this code's file");
  /* A program the library is linked into is named as it was started (argv[0]), or not at all. */
  const char *named = strchr(info.dli_fname, '/') ? info.dli_fname : "/proc/self/exe";
  char resolved[PATH_MAX];
  if (!realpath(named, resolved))
    return volt8_fail(NULL, VOLT8_ERR_NOT_FOUND, "volt8_library_path: %s: %s", named, strerror(errno));
  int written = snprintf(buf, buf_size, "%s", resolved);
  if (written < 0 || (size_t)written >= buf_size)
    return volt8_fail(NULL, VOLT8_ERR_INVALID_ARGUMENT, "volt8_library_path: the %d-byte path does not fit in %zu bytes",
                      written, buf_size);
  return VOLT8_OK;
}
