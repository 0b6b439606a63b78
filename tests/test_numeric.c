/* Host number formats: E4M3 decode/encode, FP16 rounding, BF16, and the bit-trick identity the
 * kernels rely on. Expected values are computed here by other means than runtime/core/numeric.c. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/numeric.h"

/* E4M3 by the textbook definition: sign, 4-bit exponent with bias 7, 3-bit mantissa. */
static double e4m3_textbook(unsigned code) {
  double sign = (code & 0x80) ? -1.0 : 1.0;
  unsigned exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
  if (exponent == 0) return sign * (mantissa / 8.0) * pow(2.0, 1 - 7);
  return sign * (1.0 + mantissa / 8.0) * pow(2.0, (double)exponent - 7);
}

static uint32_t float_bits(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return bits;
}

static int is_half_nan(uint16_t bits) { return (bits & 0x7C00) == 0x7C00 && (bits & 0x03FF) != 0; }

TestSuite(numeric, .timeout = 30);

Test(numeric, e4m3_decode_all_codes) {
  for (unsigned code = 0; code < 256; code++) {
    float value = volt8_e4m3_to_float((uint8_t)code);
    if ((code & 0x7F) == 0x7F) {
      cr_assert(volt8_e4m3_is_nan((uint8_t)code), "code 0x%02X must be flagged NaN", code);
      cr_assert(isnan(value), "code 0x%02X must decode to NaN, got %g", code, value);
      continue;
    }
    cr_assert(!volt8_e4m3_is_nan((uint8_t)code), "code 0x%02X wrongly flagged NaN", code);
    double expected = e4m3_textbook(code);
    cr_assert((double)value == expected, "code 0x%02X: got %.9g, expected %.9g", code, value, expected);
    cr_assert(!!signbit(value) == !!(code & 0x80), "code 0x%02X: wrong sign", code);
  }
}

Test(numeric, e4m3_decode_landmarks) {
  cr_assert_eq(volt8_e4m3_to_float(0x01), ldexpf(1.0f, -9), "smallest subnormal");
  cr_assert_eq(volt8_e4m3_to_float(0x07), 7.0f * ldexpf(1.0f, -9), "largest subnormal");
  cr_assert_eq(volt8_e4m3_to_float(0x08), ldexpf(1.0f, -6), "smallest normal");
  cr_assert_eq(volt8_e4m3_to_float(0x38), 1.0f);
  cr_assert_eq(volt8_e4m3_to_float(0x7E), 448.0f, "largest finite");
  cr_assert_eq(volt8_e4m3_to_float(0xFE), -448.0f);
  cr_assert_eq(float_bits(volt8_e4m3_to_float(0x80)), float_bits(-0.0f), "0x80 is -0");
}

Test(numeric, e4m3_bit_trick_identity) {
  int checked = 0;
  for (unsigned code = 0; code < 256; code++) {
    if ((code & 0x7F) == 0x7F) continue;
    uint16_t half_bits = (uint16_t)(((code & 0x80) << 8) | ((code & 0x7F) << 7));
    float via_half = volt8_half_to_float(half_bits) * 256.0f;
    cr_assert(via_half == volt8_e4m3_to_float((uint8_t)code) &&
                  !!signbit(via_half) == !!signbit(volt8_e4m3_to_float((uint8_t)code)),
              "code 0x%02X: half 0x%04X * 256 = %.9g, E4M3 value %.9g", code, half_bits, via_half,
              volt8_e4m3_to_float((uint8_t)code));
    checked++;
  }
  cr_assert_eq(checked, 254);
}

Test(numeric, e4m3_encode_round_trip) {
  for (unsigned code = 0; code < 256; code++) {
    if ((code & 0x7F) == 0x7F) continue;
    uint8_t encoded = volt8_e4m3_from_float(volt8_e4m3_to_float((uint8_t)code));
    cr_assert_eq(encoded, code, "code 0x%02X re-encoded as 0x%02X", code, encoded);
  }
}

Test(numeric, e4m3_encode_ties_to_even) {
  /* Between neighbours c and c + 1 (one of them has an even mantissa): the midpoint goes to the
   * even one, anything off the midpoint to the nearer one. Both signs. */
  for (unsigned code = 0; code < 0x7E; code++) {
    for (int negative = 0; negative < 2; negative++) {
      float sign = negative ? -1.0f : 1.0f;
      uint8_t sign_bit = negative ? 0x80 : 0x00;
      double low = e4m3_textbook(code), high = e4m3_textbook(code + 1);
      float middle = (float)((low + high) / 2);
      float step = (float)((high - low) / 64);
      unsigned even = (code & 1) ? code + 1 : code;
      cr_assert_eq(volt8_e4m3_from_float(sign * middle), sign_bit | even, "midpoint %.9g of 0x%02X/0x%02X",
                   sign * middle, code, code + 1);
      cr_assert_eq(volt8_e4m3_from_float(sign * (middle - step)), sign_bit | code, "below midpoint of 0x%02X", code);
      cr_assert_eq(volt8_e4m3_from_float(sign * (middle + step)), sign_bit | (code + 1), "above midpoint of 0x%02X",
                   code);
    }
  }
}

Test(numeric, e4m3_encode_saturates) {
  cr_assert_eq(volt8_e4m3_from_float(448.0f), 0x7E);
  cr_assert_eq(volt8_e4m3_from_float(460.0f), 0x7E);
  cr_assert_eq(volt8_e4m3_from_float(464.0f), 0x7E, "midpoint to the 480 that E4M3 lacks");
  cr_assert_eq(volt8_e4m3_from_float(1.0e9f), 0x7E);
  cr_assert_eq(volt8_e4m3_from_float(INFINITY), 0x7E);
  cr_assert_eq(volt8_e4m3_from_float(-1.0e9f), 0xFE);
  cr_assert_eq(volt8_e4m3_from_float(-INFINITY), 0xFE);
  cr_assert(volt8_e4m3_is_nan(volt8_e4m3_from_float(NAN)));
  cr_assert_eq(volt8_e4m3_from_float(ldexpf(1.0f, -10)), 0x00, "half the smallest subnormal ties to 0");
  cr_assert_eq(volt8_e4m3_from_float(ldexpf(1.0f, -10) * 1.01f), 0x01);
  cr_assert_eq(volt8_e4m3_from_float(ldexpf(1.0f, -30)), 0x00);
  cr_assert_eq(volt8_e4m3_from_float(-0.0f), 0x80);
}

Test(numeric, half_decode_landmarks) {
  cr_assert_eq(volt8_half_to_float(0x3C00), 1.0f);
  cr_assert_eq(volt8_half_to_float(0xC000), -2.0f);
  cr_assert_eq(volt8_half_to_float(0x7BFF), 65504.0f);
  cr_assert_eq(volt8_half_to_float(0x0001), ldexpf(1.0f, -24));
  cr_assert_eq(volt8_half_to_float(0x03FF), 1023.0f * ldexpf(1.0f, -24));
  cr_assert_eq(volt8_half_to_float(0x0400), ldexpf(1.0f, -14));
  cr_assert(isinf(volt8_half_to_float(0x7C00)) && volt8_half_to_float(0x7C00) > 0);
  cr_assert(isinf(volt8_half_to_float(0xFC00)) && volt8_half_to_float(0xFC00) < 0);
  cr_assert(isnan(volt8_half_to_float(0x7E00)));
  cr_assert(isnan(volt8_half_to_float(0xFC01)));
  cr_assert_eq(float_bits(volt8_half_to_float(0x8000)), float_bits(-0.0f));
}

Test(numeric, half_round_trip_all_codes) {
  for (unsigned bits = 0; bits < 65536; bits++) {
    float value = volt8_half_to_float((uint16_t)bits);
    uint16_t again = volt8_half_from_float(value);
    if (is_half_nan((uint16_t)bits)) {
      cr_assert(is_half_nan(again), "NaN 0x%04X re-encoded as 0x%04X", bits, again);
      continue;
    }
    cr_assert_eq(again, bits, "half 0x%04X (%.9g) re-encoded as 0x%04X", bits, value, again);
  }
}

Test(numeric, half_encode_ties_and_limits) {
  struct {
    double value;
    uint16_t expected;
    const char *what;
  } cases[] = {
      {1.0 + 0x1p-11, 0x3C00, "tie between 1 and its successor goes to the even 1"},
      {1.0 + 3 * 0x1p-11, 0x3C02, "tie between 0x3C01 and 0x3C02 goes to the even 0x3C02"},
      {1.0 + 0x1p-11 + 0x1p-40, 0x3C01, "just above a tie rounds up"},
      {1.0 + 0x1p-11 - 0x1p-40, 0x3C00, "just below a tie rounds down"},
      {65504.0, 0x7BFF, "largest finite"},
      {65519.99, 0x7BFF, "below the overflow midpoint"},
      {65520.0, 0x7C00, "overflow midpoint ties to the even 2^16, which is inf"},
      {1.0e6, 0x7C00, "overflow"},
      {-1.0e6, 0xFC00, "negative overflow"},
      {INFINITY, 0x7C00, "inf"},
      {0x1p-24, 0x0001, "smallest subnormal"},
      {0x1p-25, 0x0000, "half the smallest subnormal ties to 0"},
      {0x1p-25 + 0x1p-50, 0x0001, "just above that rounds up"},
      {3 * 0x1p-25, 0x0002, "subnormal tie goes to even"},
      {5 * 0x1p-25, 0x0002, "subnormal tie goes to even (down)"},
      {0x1p-14 - 0x1p-25, 0x0400, "tie between the largest subnormal and the smallest normal"},
      {0x1p-14 - 0x1p-24, 0x03FF, "largest subnormal"},
      {-0.0, 0x8000, "negative zero"},
      {-0x1p-30, 0x8000, "negative underflow keeps the sign"},
      {2049.0, 0x6800, "integer tie 2049 -> 2048"},
      {2051.0, 0x6802, "integer tie 2051 -> 2052"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = volt8_half_from_double(cases[i].value);
    cr_assert_eq(got, cases[i].expected, "%s: %.17g -> 0x%04X, expected 0x%04X", cases[i].what, cases[i].value, got,
                 cases[i].expected);
  }
  cr_assert(is_half_nan(volt8_half_from_double(NAN)));
  cr_assert_eq(volt8_half_from_float(0.1f), 0x2E66);
}

#ifdef __FLT16_MAX__
/* The compiler's own double -> _Float16 conversion (libgcc, correctly rounded) as a second opinion. */
Test(numeric, half_encode_matches_compiler) {
  unsigned seed = 12345;
  for (int i = 0; i < 200000; i++) {
    seed = seed * 1103515245u + 12345u;
    double mantissa = (double)(seed >> 8) / (1 << 24) + 1.0;
    seed = seed * 1103515245u + 12345u;
    int exponent = (int)(seed >> 16) % 44 - 28; /* subnormals to overflow */
    double value = ldexp(mantissa, exponent) * ((seed & 1) ? -1.0 : 1.0);
    if (i % 3 == 0) value = (double)volt8_half_to_float((uint16_t)(seed >> 8)) + ldexp(1.0, exponent - 11);
    if (isnan(value)) continue;
    _Float16 compiled = (_Float16)value;
    uint16_t expected;
    memcpy(&expected, &compiled, sizeof expected);
    uint16_t got = volt8_half_from_double(value);
    cr_assert_eq(got, expected, "seed %u: %.17g -> 0x%04X, compiler says 0x%04X", seed, value, got, expected);
  }
}
#endif

Test(numeric, bf16_decode) {
  cr_assert_eq(volt8_bf16_to_float(0x3F80), 1.0f);
  cr_assert_eq(volt8_bf16_to_float(0xC000), -2.0f);
  cr_assert_eq(volt8_bf16_to_float(0x3E00), 0.125f);
  cr_assert_eq(volt8_bf16_to_float(0x0001), ldexpf(1.0f, -133), "subnormal");
  cr_assert(isinf(volt8_bf16_to_float(0x7F80)));
  cr_assert(isnan(volt8_bf16_to_float(0x7FC0)));
}
