/* Host number formats. Rounding is done by hand so the caller's floating-point rounding mode
 * never changes a result. */
#include "core/numeric.h"

#include <math.h>
#include <string.h>

/* Round a non-negative double below 2^52 to the nearest integer, ties to even. */
static double round_half_even(double value) {
  double floor_value = floor(value);
  double fraction = value - floor_value;
  if (fraction > 0.5) return floor_value + 1.0;
  if (fraction < 0.5) return floor_value;
  return fmod(floor_value, 2.0) == 0.0 ? floor_value : floor_value + 1.0;
}

int volt8_e4m3_is_nan(uint8_t code) { return (code & 0x7F) == 0x7F; }

float volt8_e4m3_to_float(uint8_t code) {
  if (volt8_e4m3_is_nan(code)) return (code & 0x80) ? -NAN : NAN;
  int exponent = (code >> 3) & 0xF;
  int mantissa = code & 0x7;
  /* subnormal: mantissa/8 * 2^-6; normal: (8 + mantissa)/8 * 2^(exponent - 7) */
  float magnitude = exponent == 0 ? ldexpf((float)mantissa, -9) : ldexpf((float)(8 + mantissa), exponent - 10);
  return (code & 0x80) ? -magnitude : magnitude;
}

uint8_t volt8_e4m3_from_float(float value) {
  if (isnan(value)) return 0x7F;
  uint8_t sign = signbit(value) ? 0x80 : 0x00;
  double magnitude = fabs((double)value);
  if (magnitude >= VOLT8_E4M3_MAX) return sign | 0x7E;
  if (magnitude < ldexp(1.0, -6)) {
    /* subnormal steps of 2^-9; 8 steps round up into the smallest normal, code 0x08 */
    return sign | (uint8_t)round_half_even(ldexp(magnitude, 9));
  }
  int exponent;
  frexp(magnitude, &exponent); /* magnitude in [2^(exponent-1), 2^exponent) */
  int unbiased = exponent - 1;
  double significand = round_half_even(ldexp(magnitude, 3 - unbiased)); /* in [8, 16] */
  if (significand == 16.0) {
    significand = 8.0;
    unbiased += 1;
  }
  /* magnitudes below 448 never round past 448 (1.75 * 2^8), so the NaN code cannot appear */
  return sign | (uint8_t)((unbiased + 7) << 3) | (uint8_t)((int)significand - 8);
}

double volt8_half_to_double(uint16_t bits) {
  int exponent = (bits >> 10) & 0x1F;
  int mantissa = bits & 0x3FF;
  double magnitude;
  if (exponent == 0x1F) {
    magnitude = mantissa ? NAN : INFINITY;
  } else if (exponent == 0) {
    magnitude = ldexp((double)mantissa, -24);
  } else {
    magnitude = ldexp((double)(1024 + mantissa), exponent - 25);
  }
  return (bits & 0x8000) ? -magnitude : magnitude;
}

float volt8_half_to_float(uint16_t bits) { return (float)volt8_half_to_double(bits); }

uint16_t volt8_half_from_double(double value) {
  uint16_t sign = signbit(value) ? 0x8000 : 0x0000;
  if (isnan(value)) return sign | 0x7E00;
  double magnitude = fabs(value);
  /* 65520 is the midpoint between 65504 (the largest half) and 2^16; the tie goes to the even 2^16 = inf */
  if (magnitude >= 65520.0) return sign | 0x7C00;
  if (magnitude < ldexp(1.0, -14)) {
    /* subnormal steps of 2^-24; 1024 steps round up into the smallest normal, 0x0400 */
    return sign | (uint16_t)round_half_even(ldexp(magnitude, 24));
  }
  int exponent;
  frexp(magnitude, &exponent);
  int unbiased = exponent - 1;
  double significand = round_half_even(ldexp(magnitude, 10 - unbiased)); /* in [1024, 2048] */
  if (significand == 2048.0) {
    significand = 1024.0;
    unbiased += 1;
  }
  return sign | (uint16_t)((unbiased + 15) << 10) | (uint16_t)((int)significand - 1024);
}

uint16_t volt8_half_from_float(float value) { return volt8_half_from_double((double)value); }

float volt8_bf16_to_float(uint16_t bits) {
  uint32_t word = (uint32_t)bits << 16;
  float value;
  memcpy(&value, &word, sizeof value);
  return value;
}
