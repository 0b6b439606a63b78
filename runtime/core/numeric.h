/* Host conversions between E4M3, FP16, BF16 and float/double, all exact or round-to-nearest-even. */
#ifndef VOLT8_NUMERIC_H
#define VOLT8_NUMERIC_H

#include <stdint.h>

#define VOLT8_E4M3_MAX 448.0f

/* 1 for the two E4M3 NaN codes, 0x7F and 0xFF. */
int volt8_e4m3_is_nan(uint8_t code);
/* Exact value of an E4M3 code (subnormals included); NaN for 0x7F and 0xFF. */
float volt8_e4m3_to_float(uint8_t code);
/* Round-to-nearest-even; magnitudes above 448 (infinities too) saturate to +-448; NaN -> 0x7F. */
uint8_t volt8_e4m3_from_float(float value);

float volt8_half_to_float(uint16_t bits);
double volt8_half_to_double(uint16_t bits);
/* Round-to-nearest-even, one rounding step; overflow -> +-inf; NaN -> quiet NaN of the same sign. */
uint16_t volt8_half_from_double(double value);
uint16_t volt8_half_from_float(float value);

float volt8_bf16_to_float(uint16_t bits);

#endif
