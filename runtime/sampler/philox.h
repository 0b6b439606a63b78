/* The host's view of the one random number generator (Philox4x32-10): its text lives in
 * templates/philox.cu, plain C99 that is also CUDA, so kernels and host draw the same bits. */
#ifndef VOLT8_PHILOX_H
#define VOLT8_PHILOX_H

#include "../../templates/philox.cu"

#endif
