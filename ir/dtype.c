/* The dtype table (ir/dtype.h) and the public dtype queries of loom.h. */
#include "ir/dtype.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

const lm_dtype_info lm_dtype_table[LOOM_NUM_DTYPES + 1] = {
    [LOOM_F32] = {"f32", 4, LM_DTYPE_FLOAT, 32, 24, "float", "float", "F32", "torch.float32"},
    [LOOM_F64] = {"f64", 8, LM_DTYPE_FLOAT, 64, 53, "double", "double", "F64", "torch.float64"},
    [LOOM_I32] = {"i32", 4, LM_DTYPE_SIGNED, 32, 0, "int32_t", "int", "I32", "torch.int32"},
    [LOOM_I64] = {"i64", 8, LM_DTYPE_SIGNED, 64, 0, "int64_t", "long long", "I64", "torch.int64"},
    [LOOM_U8] = {"u8", 1, LM_DTYPE_UNSIGNED, 8, 0, "uint8_t", "unsigned char", "U8", "torch.uint8"},
    [LOOM_BOOL] = {"bool", 1, LM_DTYPE_BOOL, 1, 0, "uint8_t", "bool", "BOOL", "torch.bool"},
    [LOOM_BF16] = {"bf16", 2, LM_DTYPE_FLOAT, 16, 8, "uint16_t", "unsigned short", "BF16",
                   "torch.bfloat16"},
    [LOOM_F16] = {"f16", 2, LM_DTYPE_FLOAT, 16, 11, "uint16_t", "unsigned short", "F16",
                  "torch.float16"},
    [LOOM_I8] = {"i8", 1, LM_DTYPE_SIGNED, 8, 0, "int8_t", "signed char", "I8", "torch.int8"},
    [LOOM_I16] = {"i16", 2, LM_DTYPE_SIGNED, 16, 0, "int16_t", "short", "I16", "torch.int16"},
    [LOOM_U16] = {"u16", 2, LM_DTYPE_UNSIGNED, 16, 0, "uint16_t", "unsigned short", "U16",
                  "torch.uint16"},
    [LOOM_U32] = {"u32", 4, LM_DTYPE_UNSIGNED, 32, 0, "uint32_t", "unsigned int", "U32",
                  "torch.uint32"},
    [LOOM_U64] = {"u64", 8, LM_DTYPE_UNSIGNED, 64, 0, "uint64_t", "unsigned long long", "U64",
                  "torch.uint64"},
    [LOOM_NUM_DTYPES] = {"?", 0, LM_DTYPE_SIGNED, 64, 0, "?", "?", "?", "?"},
};

size_t loom_dtype_size(loom_dtype d) { return lm_dtype_info_of(d)->size; }
const char *loom_dtype_name(loom_dtype d) { return lm_dtype_info_of(d)->name; }
bool loom_dtype_is_float(loom_dtype d) { return lm_dtype_is_float(d); }

bool lm_dtype_holds(loom_dtype d, double v) {
  switch (d) {
  case LOOM_F32:
  case LOOM_F64:
  case LOOM_BF16:
  case LOOM_F16: return true;
  case LOOM_I32: return v == floor(v) && v >= -2147483648.0 && v <= 2147483647.0;
  case LOOM_I64: return v == floor(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0;
  case LOOM_U8: return v == floor(v) && v >= 0 && v <= 255;
  case LOOM_I8: return v == floor(v) && v >= -128 && v <= 127;
  case LOOM_I16: return v == floor(v) && v >= -32768 && v <= 32767;
  case LOOM_U16: return v == floor(v) && v >= 0 && v <= 65535;
  case LOOM_U32: return v == floor(v) && v >= 0 && v <= 4294967295.0;
  case LOOM_U64: return v == floor(v) && v >= 0 && v < 18446744073709551616.0;
  case LOOM_BOOL: return v == 0 || v == 1;
  case LOOM_NUM_DTYPES: break;
  }
  return false;
}

double lm_dtype_load_double(loom_dtype d, const void *p) {
  switch (d) {
  case LOOM_F32: return *(const float *)p;
  case LOOM_F64: return *(const double *)p;
  case LOOM_I32: return *(const int32_t *)p;
  case LOOM_I64: return (double)*(const int64_t *)p;
  case LOOM_U8: return *(const uint8_t *)p;
  case LOOM_I8: return *(const int8_t *)p;
  case LOOM_I16: return *(const int16_t *)p;
  case LOOM_U16: return *(const uint16_t *)p;
  case LOOM_U32: return *(const uint32_t *)p;
  case LOOM_U64: return (double)*(const uint64_t *)p;
  case LOOM_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
  case LOOM_BF16: return loom_bf16_to_float(*(const uint16_t *)p);
  case LOOM_F16: return loom_f16_to_float(*(const uint16_t *)p);
  case LOOM_NUM_DTYPES: break;
  }
  return NAN;
}

void lm_dtype_store_double(loom_dtype d, void *p, double v) {
  switch (d) {
  case LOOM_F32: *(float *)p = (float)v; break;
  case LOOM_F64: *(double *)p = v; break;
  case LOOM_BF16: *(uint16_t *)p = loom_float_to_bf16((float)v); break;
  case LOOM_F16: *(uint16_t *)p = loom_float_to_f16((float)v); break;
  case LOOM_I32: *(int32_t *)p = (int32_t)lm_dtype_saturate(v, d); break;
  case LOOM_I64: *(int64_t *)p = lm_dtype_saturate(v, d); break;
  case LOOM_I8: *(int8_t *)p = (int8_t)lm_dtype_saturate(v, d); break;
  case LOOM_I16: *(int16_t *)p = (int16_t)lm_dtype_saturate(v, d); break;
  case LOOM_U16: *(uint16_t *)p = (uint16_t)lm_dtype_saturate(v, d); break;
  case LOOM_U32: *(uint32_t *)p = (uint32_t)lm_dtype_saturate(v, d); break;
  case LOOM_U64: *(uint64_t *)p = (uint64_t)lm_dtype_saturate(v, d); break;
  case LOOM_U8:
  case LOOM_BOOL: *(uint8_t *)p = (uint8_t)lm_dtype_saturate(v, d); break;
  case LOOM_NUM_DTYPES: break;
  }
}

/* ------------------------------------------------------------------ 16-bit floats */

static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float loom_bf16_to_float(uint16_t bits) { return bits_float((uint32_t)bits << 16); }

/* The top half of the float, rounded to nearest even on the bits cut off; a
 * NaN keeps its sign and top payload, made quiet. */
uint16_t loom_float_to_bf16(float value) {
  uint32_t u = float_bits(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float loom_f16_to_float(uint16_t bits) {
  uint32_t sign = (uint32_t)(bits & 0x8000u) << 16, exp = (bits >> 10) & 0x1fu, man = bits & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
  /* zero or subnormal: man * 2^-24, exact in a float */
  float mag = (float)man * 0x1p-24f;
  return sign ? -mag : mag;
}

/* Nearest even (Giesen's float_to_half_fast3_rtne): overflow to inf from
 * 65520 (the midpoint past the largest half), gradual underflow below 2^-14
 * by one float addition, whose rounding is the subnormal's. */
uint16_t loom_float_to_f16(float value) {
  uint32_t u = float_bits(value), sign = (u >> 16) & 0x8000u, abs = u & 0x7fffffffu;
  if (abs >= 0x47800000u) /* 65536 and up: inf, or a quiet NaN keeping its top payload */
    return (uint16_t)(sign | (abs > 0x7f800000u ? 0x7e00u | ((abs >> 13) & 0x1ffu) : 0x7c00u));
  if (abs < 0x38800000u) /* below 2^-14: 0.5 + |x| leaves the subnormal's bits at the bottom */
    return (uint16_t)(sign | (float_bits(bits_float(abs) + 0.5f) - 0x3f000000u));
  uint32_t h = abs - 0x38000000u; /* rebiased: exponent 127 - 15 = 112 less */
  h += 0xfffu + ((h >> 13) & 1u); /* nearest even on the 13 bits cut off; 65520 carries to inf */
  return (uint16_t)(sign | (h >> 13));
}

int64_t lm_dtype_saturate(double v, loom_dtype d) {
  if (d == LOOM_BOOL) return v != 0;
  if (v != v) return 0;
  double lo, hi; /* the dtype's limits, exact in a double but for int64's top */
  switch (d) {
  case LOOM_I32: lo = -0x1p31, hi = 0x1p31 - 1; break;
  case LOOM_U8: lo = 0, hi = 255; break;
  case LOOM_I8: lo = -128, hi = 127; break;
  case LOOM_I16: lo = -32768, hi = 32767; break;
  case LOOM_U16: lo = 0, hi = 65535; break;
  case LOOM_U32: lo = 0, hi = 0x1p32 - 1; break;
  case LOOM_U64: /* its bits in an int64_t: 2^63 and up are negative there */
    if (!(v > 0)) return 0;
    return v >= 0x1p64 ? (int64_t)UINT64_MAX : (int64_t)(uint64_t)v;
  default: lo = -0x1p63, hi = 0x1p63; break;
  }
  if (v <= lo) return (int64_t)lo;
  if (v >= hi) return hi == 0x1p63 ? INT64_MAX : (int64_t)hi;
  return (int64_t)v;
}

int64_t lm_dtype_wrap(int64_t v, loom_dtype d) {
  switch (d) {
  case LOOM_BOOL: return v != 0;
  case LOOM_U8: return (int64_t)(uint8_t)(uint64_t)v;
  case LOOM_I8: return (int64_t)(int8_t)(uint8_t)(uint64_t)v;
  case LOOM_I16: return (int64_t)(int16_t)(uint16_t)(uint64_t)v;
  case LOOM_U16: return (int64_t)(uint16_t)(uint64_t)v;
  case LOOM_U32: return (int64_t)(uint32_t)(uint64_t)v;
  case LOOM_I32: return (int64_t)(int32_t)(uint32_t)(uint64_t)v;
  default: return v;
  }
}
