/*
 * Every dtype described once: what each folder needs to store, name, print,
 * generate code for, export and save a dtype reads this table (ir/dtype.c).
 * A new dtype (BF16, F16) is one row here, plus the code that computes with it
 * (casts and arithmetic in the code generators).
 */
#ifndef LOOM_IR_DTYPE_H
#define LOOM_IR_DTYPE_H

#include <stdbool.h>
#include <stddef.h>

#include "loom.h"

typedef enum lm_dtype_class {
  LM_DTYPE_FLOAT,
  LM_DTYPE_SIGNED,
  LM_DTYPE_UNSIGNED,
  LM_DTYPE_BOOL /* one byte 0 or 1 in memory, one bit in registers */
} lm_dtype_class;

typedef struct lm_dtype_info {
  const char *name; /* loom_dtype_name and the program text: "f32" */
  size_t size;      /* bytes per element in memory */
  lm_dtype_class cls;
  int bits;                /* width in registers: LLVM's iN or the float's width */
  int mantissa;            /* floats: significand bits (unit roundoff 2^-mantissa); else 0 */
  const char *c_type;      /* exported C headers: "float", "int32_t" */
  const char *cuda_type;   /* generated CUDA C */
  const char *safetensors; /* the format's name: "F32" */
  const char *torch;       /* PyTorch's name, for loom_print: "torch.float32" */
} lm_dtype_info;

/* Rows in loom_dtype order, then one for anything outside the enum ("?", size 0). */
extern const lm_dtype_info lm_dtype_table[LOOM_NUM_DTYPES + 1];

static inline const lm_dtype_info *lm_dtype_info_of(loom_dtype d) {
  return &lm_dtype_table[(unsigned)d < (unsigned)LOOM_NUM_DTYPES ? (int)d : LOOM_NUM_DTYPES];
}
static inline bool lm_dtype_valid(loom_dtype d) { return (unsigned)d < (unsigned)LOOM_NUM_DTYPES; }
static inline bool lm_dtype_is_float(loom_dtype d) {
  return lm_dtype_info_of(d)->cls == LM_DTYPE_FLOAT;
}
/* Integers that take arithmetic: U8 I8 I16 U16 I32 U32 I64 U64 (not BOOL). */
static inline bool lm_dtype_is_int(loom_dtype d) {
  lm_dtype_class c = lm_dtype_info_of(d)->cls;
  return lm_dtype_valid(d) && (c == LM_DTYPE_SIGNED || c == LM_DTYPE_UNSIGNED);
}
/* Takes arithmetic: the floats and the integers, not BOOL. */
static inline bool lm_dtype_is_numeric(loom_dtype d) {
  return lm_dtype_is_float(d) || lm_dtype_is_int(d);
}
/* Compared and extended without a sign: U8 U16 U32 U64 and BOOL. */
static inline bool lm_dtype_is_unsigned(loom_dtype d) {
  lm_dtype_class c = lm_dtype_info_of(d)->cls;
  return lm_dtype_valid(d) && (c == LM_DTYPE_UNSIGNED || c == LM_DTYPE_BOOL);
}

/* Whether v is a value of dtype d: any v for floats; an integer in range for
 * the integer dtypes (0 or 1 for BOOL). */
bool lm_dtype_holds(loom_dtype d, double v);

/* The element of dtype d at p as a double (BOOL 0 or 1; I64 beyond 2^53 rounds;
 * NaN outside the enum). */
double lm_dtype_load_double(loom_dtype d, const void *p);
/* Stores v as an element of dtype d at p (floats rounded to nearest, BF16 and
 * F16 through float as torch converts; integers as lm_dtype_saturate). */
void lm_dtype_store_double(loom_dtype d, void *p, double v);
/* BF16 and F16 live in float registers: computed in float, rounded per op. */
static inline bool lm_dtype_is_half(loom_dtype d) { return d == LOOM_BF16 || d == LOOM_F16; }
/* v as integer dtype d: truncated toward zero, saturated at d's limits, NaN 0
 * (what a float -> integer cast computes, and integer constants from doubles:
 * converting an out-of-range double in C is undefined). BOOL is v != 0; U64
 * is returned as its bits (2^63 and up negative). */
int64_t lm_dtype_saturate(double v, loom_dtype d);
/* v modulo 2^bits as a value of integer dtype d (two's complement: 300 as U8
 * is 44, -1 is 255, 2^31 as I32 is INT32_MIN): how PyTorch converts an
 * integer scalar to an integer tensor's dtype. BOOL is v != 0; I64 and U64
 * keep v's bits. */
int64_t lm_dtype_wrap(int64_t v, loom_dtype d);

#endif
