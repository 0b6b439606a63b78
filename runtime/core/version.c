/* Version queries and status names. */
#include "volt8.h"

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
