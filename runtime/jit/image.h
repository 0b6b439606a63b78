/* A compiled kernel image, as the compiler makes it and the disk cache keeps it (jit.h, cache.h). */
#ifndef VOLT8_IMAGE_H
#define VOLT8_IMAGE_H

#include <stddef.h>
#include <stdint.h>

typedef enum volt8_image_kind { VOLT8_IMAGE_PTX = 0, VOLT8_IMAGE_CUBIN = 1 } volt8_image_kind;

typedef struct volt8_jit_image {
  void *data;                    /* PTX text (NUL-terminated) or CUBIN bytes */
  size_t size;                   /* bytes, the PTX terminator included */
  volt8_image_kind kind;
  int32_t from_cache;            /* 1: loaded from the disk cache */
  char nvrtc_version[32];        /* "12.9" of the NVRTC that built it */
} volt8_jit_image;

/* Frees the data and zeroes the image; NULL and zeroed images are fine. */
void volt8_jit_image_free(volt8_jit_image *image);

#endif
