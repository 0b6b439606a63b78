/* Codegen scripts and templates compiled into the library (table written at build time). */
#ifndef VOLT8_EMBEDDED_FILES_H
#define VOLT8_EMBEDDED_FILES_H

#include <stddef.h>

typedef struct volt8_embedded_file {
  const char *path; /* relative to the source root: "templates/moe_gemm_cc.cu", "tuning/tables/..." */
  const char *data; /* NUL-terminated */
  size_t size;      /* bytes, terminator excluded */
} volt8_embedded_file;

extern const volt8_embedded_file volt8_embedded_files[]; /* ends with a NULL path */

/* The embedded file at `path`, or NULL. */
const volt8_embedded_file *volt8_embedded_find(const char *path);

#endif
