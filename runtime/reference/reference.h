/* The double-precision MoE reference and the error metric: declared in volt8.h. */
#ifndef VOLT8_REFERENCE_H
#define VOLT8_REFERENCE_H

#include "volt8.h"

#endif
