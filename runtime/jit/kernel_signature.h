/* A generated kernel's parameter list as its launcher declares it: each kernel's list is written
 * once, as P(launcher's C type, template type, name) entries, from which both the launcher's argument
 * struct and the table a test compares with the template are made (moe/kernels/kernel_params.h,
 * sampler/sampler_params.h; tests/test_kernel_params.c). */
#ifndef VOLT8_KERNEL_SIGNATURE_H
#define VOLT8_KERNEL_SIGNATURE_H

#include <stddef.h>

/* The argument struct's field of one P(...) entry. */
#define VOLT8_KERNEL_ARGS_FIELD(c_type, type, name) c_type name;
/* The table row of one P(...) entry of args_type. */
#define VOLT8_KERNEL_PARAM_ROW(args_type, c_type, type, name) {type, #name, offsetof(args_type, name), sizeof(c_type)},

typedef struct volt8_kernel_param {
  const char *type;  /* as the template declares it, without const and __restrict__ */
  const char *name;
  size_t offset;     /* of the value in the kernel's argument struct */
  size_t bytes;      /* of the value the launcher passes */
} volt8_kernel_param;

typedef struct volt8_kernel_signature {
  const char *kernel; /* "route", "down (fused reduce)", "rejection rows", ... */
  const volt8_kernel_param *params;
  int count;
} volt8_kernel_signature;

#define VOLT8_MAX_KERNEL_PARAMS 24

/* params[i] = the address of the i-th parameter's value inside args (a struct of the signature). */
void volt8_kernel_params_fill(const volt8_kernel_signature *signature, void *args, void *params[VOLT8_MAX_KERNEL_PARAMS]);

#endif
