/* Kernel images: what the compiler and the disk cache hand over. */
#include "jit/image.h"

#include <stdlib.h>
#include <string.h>

void volt8_jit_image_free(volt8_jit_image *image) {
  if (!image) return;
  free(image->data);
  memset(image, 0, sizeof *image);
}
