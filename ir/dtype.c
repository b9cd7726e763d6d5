/* The dtype table (ir/dtype.h) and the public dtype queries of loom.h. */
#include "ir/dtype.h"

#include <math.h>
#include <stdint.h>

const lm_dtype_info lm_dtype_table[LOOM_NUM_DTYPES + 1] = {
    [LOOM_F32] = {"f32", 4, LM_DTYPE_FLOAT, 32, 24, "float", "float", "F32", "torch.float32"},
    [LOOM_F64] = {"f64", 8, LM_DTYPE_FLOAT, 64, 53, "double", "double", "F64", "torch.float64"},
    [LOOM_I32] = {"i32", 4, LM_DTYPE_SIGNED, 32, 0, "int32_t", "int", "I32", "torch.int32"},
    [LOOM_I64] = {"i64", 8, LM_DTYPE_SIGNED, 64, 0, "int64_t", "long long", "I64", "torch.int64"},
    [LOOM_U8] = {"u8", 1, LM_DTYPE_UNSIGNED, 8, 0, "uint8_t", "unsigned char", "U8", "torch.uint8"},
    [LOOM_BOOL] = {"bool", 1, LM_DTYPE_BOOL, 1, 0, "uint8_t", "bool", "BOOL", "torch.bool"},
    [LOOM_NUM_DTYPES] = {"?", 0, LM_DTYPE_SIGNED, 64, 0, "?", "?", "?", "?"},
};

size_t loom_dtype_size(loom_dtype d) { return lm_dtype_info_of(d)->size; }
const char *loom_dtype_name(loom_dtype d) { return lm_dtype_info_of(d)->name; }
bool loom_dtype_is_float(loom_dtype d) { return lm_dtype_is_float(d); }

bool lm_dtype_holds(loom_dtype d, double v) {
  switch (d) {
  case LOOM_F32:
  case LOOM_F64: return true;
  case LOOM_I32: return v == floor(v) && v >= -2147483648.0 && v <= 2147483647.0;
  case LOOM_I64: return v == floor(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0;
  case LOOM_U8: return v == floor(v) && v >= 0 && v <= 255;
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
  case LOOM_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
  case LOOM_NUM_DTYPES: break;
  }
  return NAN;
}

int64_t lm_dtype_saturate(double v, loom_dtype d) {
  if (d == LOOM_BOOL) return v != 0;
  if (v != v) return 0;
  double lo, hi; /* the dtype's limits, exact in a double but for int64's top */
  switch (d) {
  case LOOM_I32: lo = -0x1p31, hi = 0x1p31 - 1; break;
  case LOOM_U8: lo = 0, hi = 255; break;
  default: lo = -0x1p63, hi = 0x1p63; break;
  }
  if (v <= lo) return (int64_t)lo;
  if (v >= hi) return hi == 0x1p63 ? INT64_MAX : (int64_t)hi;
  return (int64_t)v;
}
