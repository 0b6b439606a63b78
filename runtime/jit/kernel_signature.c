/* Argument arrays from argument structs, by a kernel's parameter table. */
#include "jit/kernel_signature.h"

void volt8_kernel_params_fill(const volt8_kernel_signature *signature, void *args, void *params[VOLT8_MAX_KERNEL_PARAMS]) {
  for (int i = 0; i < signature->count; i++) params[i] = (char *)args + signature->params[i].offset;
}
