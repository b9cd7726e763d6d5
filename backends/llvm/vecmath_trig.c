/*
 * sin and cos as straight-line IR (see vecmath.h).
 *
 * Argument reduction |x| = q pi/2 + r, |r| <= pi/4, r in double-double:
 *  - |x| < 2^19 pi (q <= 2^20): Cody-Waite with pi/2 in three 33-bit parts, so
 *    each q * part is exact, and the differences are accumulated with exact
 *    two-sums (fdlibm's __ieee754_rem_pio2, medium case);
 *  - beyond: Payne-Hanek. The bits of 2/pi that would only add multiples of 4
 *    to x * 2/pi are dropped according to x's exponent (a table of four
 *    53-bit chunks of 2/pi per 32 exponents, built at code generation from
 *    the bits of 2/pi in vecmath_coeffs.h), the products x * chunk are
 *    formed exactly with fma and reduced mod 4 one by one (the idea of SLEEF's
 *    rempi, written here with its own table).
 * Both are evaluated for every element and a select picks one, so the loop
 * stays vectorized (F64 table reads become gathers; F32 arguments need four
 * entries, picked with selects). Their cost: sin/cos take about 4x the time of
 * exp. Then fdlibm's kernels
 * __kernel_sin / __kernel_cos (which take the reduced argument's tail) with
 * minimax polynomials from vecmath_coeffs.h, and the quadrant picks sin or cos
 * and the sign.
 */
#include <math.h>

#include "backends/llvm/vecmath.h"
#include "backends/llvm/vecmath_coeffs.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof *(a)))

/* |x| below which Cody-Waite is exact: q = rint(|x| 2/pi) <= 2^20. */
#define CODY_WAITE_LIMIT (0x1p19 * 3.14159265358979323846)
/* Payne-Hanek table: entry j serves exponents [PH_E0 + 32 j, PH_E0 + 32 j + 32). */
#define PH_E0 20
#define PH_SHIFT 5
#define PH_CHUNKS 4
#define PH_MAX_ENTRIES 32

typedef struct reduced {
  lm_dd r;        /* the reduced argument, |r| <= pi/4 (a bit more after rounding) */
  LLVMValueRef q; /* the quadrant count, an integer-valued double */
} reduced;

/* ------------------------------------------------------------------ Cody-Waite */

static reduced reduce_cody_waite(lm_vm *v, LLVMValueRef a) {
  LLVMValueRef k = lm_vm_rint(v, lm_vm_mul(v, a, lm_vm_const(v, TWO_OVER_PI)));
  LLVMValueRef nk = lm_vm_neg(v, k);
  LLVMValueRef r1 = lm_vm_fma(v, nk, lm_vm_const(v, PIO2_1), a);            /* exact */
  lm_dd d = lm_vm_two_sum(v, r1, lm_vm_mul(v, nk, lm_vm_const(v, PIO2_2))); /* exact */
  lm_dd d2 = lm_vm_two_sum(v, d.hi, lm_vm_mul(v, nk, lm_vm_const(v, PIO2_3)));
  LLVMValueRef lo = lm_vm_fma(v, nk, lm_vm_const(v, PIO2_3T), lm_vm_add(v, d.lo, d2.lo));
  return (reduced){lm_vm_fast_two_sum(v, d2.hi, lo), k};
}

/* ------------------------------------------------------------------ Payne-Hanek */

/* Bit i (1-based, after the binary point) of 2/pi; 0 for i <= 0. */
static int two_over_pi_bit(int i) {
  if (i <= 0) return 0;
  int digit_at = (i - 1) / 4;
  if (digit_at >= (int)sizeof TWO_OVER_PI_HEX - 1) return 0; /* beyond what any entry uses */
  char c = TWO_OVER_PI_HEX[digit_at];
  int d = c <= '9' ? c - '0' : c - 'a' + 10;
  return (d >> (3 - (i - 1) % 4)) & 1;
}

/* Bits [first, first + 53) of 2/pi, times 2^scale, as a double (exact). */
static double two_over_pi_chunk(int first, int scale) {
  uint64_t m = 0;
  for (int i = first; i < first + 53; i++) m = (m << 1) | (uint64_t)two_over_pi_bit(i);
  return ldexp((double)m, scale - (first + 52));
}

/*
 * For x = M 2^(E-52) (M a 53-bit integer), x * 2^-i is a multiple of 4 when
 * i <= E - 54: those bits of 2/pi are dropped. Entry j serves exponents from
 * Ej = PH_E0 + 32 j and keeps bits from Ej - 53 on, in 53-bit chunks c0, c1,
 * ...; x * c0 < 2^87, x * c1 < 2^34, x * c2 < 2^-19, x * c3 < 2^-72, and the
 * rest is below 2^-125. Chunks are stored times 2^Ej (and x is scaled by
 * 2^-Ej, exactly) so that none of them is subnormal.
 */
static double ph_chunk(int j, int c) {
  int ej = PH_E0 + (j << PH_SHIFT);
  return two_over_pi_chunk(ej - 53 + 53 * c, ej);
}

/* F64: a constant table that the vectorized loop reads with gathers. */
static LLVMValueRef ph_table(lm_vm *v, int entries) {
  const char *name = "lm.vm.two_over_pi";
  LLVMValueRef table = LLVMGetNamedGlobal(v->g->mod, name);
  if (table) return table;
  LLVMValueRef vals[PH_MAX_ENTRIES * PH_CHUNKS];
  for (int j = 0; j < entries; j++)
    for (int c = 0; c < PH_CHUNKS; c++) vals[j * PH_CHUNKS + c] = lm_vm_const(v, ph_chunk(j, c));
  LLVMTypeRef type = LLVMArrayType(v->ft, (unsigned)(entries * PH_CHUNKS));
  table = LLVMAddGlobal(v->g->mod, type, name);
  LLVMSetInitializer(table, LLVMConstArray(v->ft, vals, (unsigned)(entries * PH_CHUNKS)));
  LLVMSetGlobalConstant(table, 1);
  LLVMSetLinkage(table, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(table, LLVMGlobalUnnamedAddr);
  return table;
}

static LLVMValueRef ph_load(lm_vm *v, LLVMValueRef table, LLVMValueRef j, int c) {
  LLVMValueRef at = LLVMBuildAdd(v->b, LLVMBuildMul(v->b, j, lm_vm_const_i(v, PH_CHUNKS), ""),
                                 lm_vm_const_i(v, c), "");
  LLVMValueRef idx[2] = {lm_vm_const_i(v, 0), at};
  LLVMValueRef p = LLVMBuildInBoundsGEP2(v->b, LLVMGlobalGetValueType(table), table, idx, 2, "");
  LLVMValueRef x = LLVMBuildLoad2(v->b, v->ft, p, "");
  LLVMSetAlignment(x, 8);
  return x;
}

/* F32 (exponents up to 127, four entries): selects are cheaper than gathers. */
static LLVMValueRef ph_select(lm_vm *v, LLVMValueRef j, int entries, int c) {
  LLVMValueRef r = lm_vm_const(v, ph_chunk(entries - 1, c));
  for (int i = entries - 2; i >= 0; i--) {
    LLVMValueRef here = LLVMBuildICmp(v->b, LLVMIntEQ, j, lm_vm_const_i(v, i), "");
    r = lm_vm_select(v, here, lm_vm_const(v, ph_chunk(i, c)), r);
  }
  return r;
}

static LLVMValueRef imax(lm_vm *v, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(v->b, LLVMBuildICmp(v->b, LLVMIntSGT, a, b, ""), a, b, "");
}
static LLVMValueRef imin(lm_vm *v, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(v->b, LLVMBuildICmp(v->b, LLVMIntSLT, a, b, ""), a, b, "");
}

/* t - 4 rint(t / 4): exact, in [-2, 2]. */
static LLVMValueRef mod4(lm_vm *v, LLVMValueRef t) {
  LLVMValueRef n = lm_vm_rint(v, lm_vm_mul(v, t, lm_vm_const(v, 0.25)));
  return lm_vm_fma(v, n, lm_vm_const(v, -4.0), t);
}

/* The running sum of the reduction: s in [-1/2, 1/2] plus the rounding errors
 * in e, and the integers taken out of it in q. */
typedef struct ph_acc {
  LLVMValueRef s, e, q;
} ph_acc;

static void ph_add(lm_vm *v, ph_acc *acc, LLVMValueRef t) {
  lm_dd sum = lm_vm_two_sum(v, acc->s, t);
  acc->e = lm_vm_add(v, acc->e, sum.lo);
  LLVMValueRef n = lm_vm_rint(v, sum.hi);
  acc->s = lm_vm_sub(v, sum.hi, n); /* exact */
  acc->q = lm_vm_add(v, acc->q, n);
}

static reduced reduce_payne_hanek(lm_vm *v, LLVMValueRef a) {
  /* F32 arguments are floats: three chunks leave 2^-72, plenty for them */
  int max_exp = v->single ? 127 : 1023, chunks = v->single ? 3 : PH_CHUNKS;
  int entries = ((max_exp - PH_E0) >> PH_SHIFT) + 1;
  /* the entry for a's exponent, clamped (smaller a take the Cody-Waite path) */
  LLVMValueRef bexp = LLVMBuildLShr(v->b, lm_vm_bits(v, a), lm_vm_const_i(v, 52), "");
  LLVMValueRef j = LLVMBuildAShr(v->b, LLVMBuildSub(v->b, bexp, lm_vm_const_i(v, 1023 + PH_E0), ""),
                                 lm_vm_const_i(v, PH_SHIFT), "");
  j = imin(v, imax(v, j, lm_vm_const_i(v, 0)), lm_vm_const_i(v, entries - 1));
  /* a * 2^-Ej, exact: the chunks are stored times 2^Ej */
  LLVMValueRef ej = LLVMBuildAdd(v->b, LLVMBuildShl(v->b, j, lm_vm_const_i(v, PH_SHIFT), ""),
                                 lm_vm_const_i(v, PH_E0), "");
  LLVMValueRef inv =
      lm_vm_from_bits(v, LLVMBuildShl(v->b, LLVMBuildSub(v->b, lm_vm_const_i(v, 1023), ej, ""),
                                      lm_vm_const_i(v, 52), ""));
  LLVMValueRef as = lm_vm_mul(v, a, inv);
  LLVMValueRef c[PH_CHUNKS];
  LLVMValueRef table = v->single ? NULL : ph_table(v, entries);
  for (int i = 0; i < chunks; i++)
    c[i] = v->single ? ph_select(v, j, entries, i) : ph_load(v, table, j, i);
  lm_dd p0 = lm_vm_two_prod(v, as, c[0]);
  lm_dd p1 = lm_vm_two_prod(v, as, c[1]);
  lm_dd p2 = lm_vm_two_prod(v, as, c[2]);
  /* the first term starts the sum: s = t - rint(t) is exact */
  LLVMValueRef t0 = mod4(v, p0.hi), n0 = lm_vm_rint(v, t0);
  ph_acc acc = {lm_vm_sub(v, t0, n0), lm_vm_const(v, 0.0), n0};
  ph_add(v, &acc, mod4(v, p0.lo));
  ph_add(v, &acc, mod4(v, p1.hi));
  /* What is left is below 2^-19. F64 keeps it exact; for F32 arguments an
   * error of 2^-72 in the sum is far below what they need. */
  LLVMValueRef tail = p2.lo;
  if (v->single) {
    tail = lm_vm_add(v, lm_vm_add(v, p1.lo, p2.hi), tail);
  } else {
    ph_add(v, &acc, p1.lo);
    ph_add(v, &acc, p2.hi);
    tail = lm_vm_add(v, tail, lm_vm_mul(v, as, c[3]));
  }
  acc.e = lm_vm_add(v, acc.e, tail);
  lm_dd f = lm_vm_fast_two_sum(v, acc.s, acc.e);
  LLVMValueRef n = lm_vm_rint(v, f.hi);
  acc.q = lm_vm_add(v, acc.q, n);
  lm_dd frac = lm_vm_fast_two_sum(v, lm_vm_sub(v, f.hi, n), f.lo);
  lm_dd pio2 = {lm_vm_const(v, PIO2_HI), lm_vm_const(v, PIO2_LO)};
  return (reduced){lm_vm_dd_mul(v, frac, pio2), acc.q};
}

/* ------------------------------------------------------------------ kernels */

/* sin(x + y) for |x| <= pi/4, |y| tiny. */
static LLVMValueRef kernel_sin(lm_vm *v, lm_dd r) {
  LLVMValueRef x = r.hi, y = r.lo;
  LLVMValueRef z = lm_vm_mul(v, x, x);
  LLVMValueRef s = v->single ? lm_vm_poly(v, z, SIN_S_F32, COUNT(SIN_S_F32))
                             : lm_vm_poly(v, z, SIN_S_F64, COUNT(SIN_S_F64));
  /* x + x^3 S(z) + y (1 - z/2): cos x ~ 1 - z/2 is all y needs */
  LLVMValueRef ycos = lm_vm_fma(v, lm_vm_mul(v, lm_vm_const(v, -0.5), z), y, y);
  return lm_vm_add(v, x, lm_vm_fma(v, lm_vm_mul(v, z, x), s, ycos));
}

/* cos(x + y) for |x| <= pi/4, |y| tiny. */
static LLVMValueRef kernel_cos(lm_vm *v, lm_dd r) {
  LLVMValueRef x = r.hi, y = r.lo;
  LLVMValueRef z = lm_vm_mul(v, x, x);
  LLVMValueRef c = v->single ? lm_vm_poly(v, z, COS_C_F32, COUNT(COS_C_F32))
                             : lm_vm_poly(v, z, COS_C_F64, COUNT(COS_C_F64));
  LLVMValueRef one = lm_vm_const(v, 1.0);
  LLVMValueRef hz = lm_vm_mul(v, lm_vm_const(v, 0.5), z);
  LLVMValueRef w = lm_vm_sub(v, one, hz);
  /* (1 - w) - hz is the rounding error of w (fdlibm's __kernel_cos) */
  LLVMValueRef w_err = lm_vm_sub(v, lm_vm_sub(v, one, w), hz);
  LLVMValueRef tail = lm_vm_fma(v, lm_vm_mul(v, z, z), c, lm_vm_neg(v, lm_vm_mul(v, x, y)));
  return lm_vm_add(v, w, lm_vm_add(v, w_err, tail));
}

/* ------------------------------------------------------------------ sin, cos */

static LLVMValueRef sin_or_cos(lm_vm *v, LLVMValueRef x, bool is_cos) {
  LLVMValueRef a = lm_vm_abs(v, x);
  reduced cw = reduce_cody_waite(v, a);
  reduced ph = reduce_payne_hanek(v, a);
  LLVMValueRef small = lm_vm_lt(v, a, lm_vm_const(v, CODY_WAITE_LIMIT));
  lm_dd r = {lm_vm_select(v, small, cw.r.hi, ph.r.hi), lm_vm_select(v, small, cw.r.lo, ph.r.lo)};
  LLVMValueRef q = lm_vm_select(v, small, cw.q, ph.q);
  if (is_cos) q = lm_vm_add(v, q, lm_vm_const(v, 1.0)); /* cos a = sin(a + pi/2) */
  /* n = q mod 4: 0 -> sin r, 1 -> cos r, 2 -> -sin r, 3 -> -cos r */
  LLVMValueRef n =
      lm_vm_fma(v, lm_vm_floor(v, lm_vm_mul(v, q, lm_vm_const(v, 0.25))), lm_vm_const(v, -4.0), q);
  LLVMValueRef odd =
      lm_vm_or(v, lm_vm_eq(v, n, lm_vm_const(v, 1.0)), lm_vm_eq(v, n, lm_vm_const(v, 3.0)));
  LLVMValueRef negate = lm_vm_le(v, lm_vm_const(v, 2.0), n);
  LLVMValueRef res = lm_vm_select(v, odd, kernel_cos(v, r), kernel_sin(v, r));
  if (!is_cos) { /* sin is odd: the sign of x (also of -0) flips it */
    LLVMValueRef x_neg = LLVMBuildICmp(v->b, LLVMIntSLT, lm_vm_bits(v, x), lm_vm_const_i(v, 0), "");
    negate = LLVMBuildXor(v->b, negate, x_neg, "");
  }
  res = lm_vm_select(v, negate, lm_vm_neg(v, res), res);
  res = lm_vm_select(v, lm_vm_eq(v, a, lm_vm_const(v, INFINITY)), lm_vm_const(v, NAN), res);
  return lm_vm_select(v, lm_vm_is_nan(v, x), x, res);
}

LLVMValueRef lm_vm_sin(lm_vm *v, LLVMValueRef x) { return sin_or_cos(v, x, false); }
LLVMValueRef lm_vm_cos(lm_vm *v, LLVMValueRef x) { return sin_or_cos(v, x, true); }
