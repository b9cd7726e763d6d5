/*
 * The test oracle: a reference evaluator for loom's ops in plain C loops.
 *
 * A ref_t is a host tensor whose elements are stored as double (exact for every
 * dtype at the magnitudes the tests use); values are kept rounded to their dtype
 * (float32 through (float), ints truncated and wrapped, bool 0/1). Every function
 * implements PyTorch's semantics directly with multi-index loops and returns a new
 * ref_t (free with ref_free), or NULL when the inputs do not fit (shape mismatch).
 *
 * ref.c uses only loom.h's types; the helpers that call libloom (ref_to_loom,
 * ref_from_loom, REF_CHECK) are static inline here, so they link with the suite.
 */
#ifndef LOOM_TESTS_REF_H
#define LOOM_TESTS_REF_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loom.h"
#include "test_device.h"

typedef struct ref_t {
  loom_shape shape;
  loom_dtype dtype;
  int64_t numel;
  double *data; /* row-major, contiguous */
} ref_t;

/* ---------------------------------------------------------------- basics */
int64_t ref_shape_numel(loom_shape s);
bool ref_shape_eq(loom_shape a, loom_shape b);
/* "[3,4]" into buf; returns buf. */
char *ref_shape_str(loom_shape s, char *buf, size_t n);
const char *ref_dtype_str(loom_dtype d);
size_t ref_dtype_size(loom_dtype d);
bool ref_is_float(loom_dtype d);
bool ref_is_int(loom_dtype d);      /* U8 ... U64 (not BOOL) */
bool ref_is_unsigned(loom_dtype d); /* U8 U16 U32 U64 */
/* Rounds v to a value of dtype d: float32 via (float), ints truncate toward zero
 * and wrap (U8 mod 256), BOOL -> v != 0. NaN stays NaN for floats. */
double ref_cvt(double v, loom_dtype d);
/* v modulo 2^bits as a value of integer dtype d (two's complement), and
 * torch's integer pow: by squaring, wrapping; a negative exponent gives 1 for
 * a base of 1, +-1 for -1 by its parity, else 0. */
int64_t ref_int_wrap(uint64_t v, loom_dtype d);
int64_t ref_int_pow(int64_t base, int64_t e, loom_dtype d);
/* PyTorch promotion: bool < int < float; within a category the wider wins. */
loom_dtype ref_promote(loom_dtype a, loom_dtype b);
/* Promotion with a weak Python scalar. */
loom_dtype ref_promote_scalar(loom_dtype a, double s);

ref_t *ref_new(loom_shape s, loom_dtype d); /* zeros */
ref_t *ref_from_values(loom_shape s, loom_dtype d, const double *vals);
ref_t *ref_clone(const ref_t *a);
void ref_free(ref_t *a);
/* Flat index of a multi-index (row-major). */
int64_t ref_offset(loom_shape s, const int64_t *idx);
/* Advances idx in row-major order; returns false after the last index. */
bool ref_next_index(loom_shape s, int64_t *idx);

/* ---------------------------------------------------------------- random inputs */
void ref_seed(uint64_t seed);
uint64_t ref_rand_u64(void);                  /* splitmix64 */
double ref_rand_uniform(void);                /* [0, 1) */
int64_t ref_rand_int(int64_t lo, int64_t hi); /* [lo, hi] */
/* Floats uniform in [lo, hi); ints uniform in [ceil(lo), floor(hi)] (U8 clamped to
 * >= 0); BOOL fair coin. */
ref_t *ref_rand(loom_shape s, loom_dtype d, double lo, double hi);

/* ---------------------------------------------------------------- host data */
/* Packs the data into the dtype's C layout (malloc'd); *bytes gets the size. */
void *ref_pack(const ref_t *a, size_t *bytes);
ref_t *ref_unpack(const void *buf, loom_shape s, loom_dtype d);

/* ---------------------------------------------------------------- comparison */
/* Compares elementwise (NaN == NaN, ints exact when rtol = atol = 0), printing
 * the first mismatches with `what`, shape, index, expected and got. */
bool ref_compare(const char *what, const ref_t *expected, const ref_t *got, double rtol,
                 double atol);
enum { REF_TOL_SIMPLE, REF_TOL_TRANS, REF_TOL_REDUCE };
void ref_tol(loom_dtype d, int kind, double *rtol, double *atol);

/* ---------------------------------------------------------------- creation */
ref_t *ref_full(loom_shape s, double value, loom_dtype d);
ref_t *ref_arange(double start, double stop, double step, loom_dtype d);

/* ---------------------------------------------------------------- elementwise */
typedef enum ref_binop {
  REF_ADD,
  REF_SUB,
  REF_MUL,
  REF_DIV,
  REF_POW,
  REF_MAXIMUM,
  REF_MINIMUM,
  REF_LT,
  REF_LE,
  REF_GT,
  REF_GE,
  REF_EQ,
  REF_NE,
  REF_LOGICAL_AND,
  REF_LOGICAL_OR,
  REF_NUM_BINOPS
} ref_binop;
typedef enum ref_unop {
  REF_NEG,
  REF_ABS,
  REF_EXP,
  REF_LOG,
  REF_SQRT,
  REF_RSQRT,
  REF_SIN,
  REF_COS,
  REF_TANH,
  REF_SIGMOID,
  REF_RELU,
  REF_GELU,
  REF_SILU,
  REF_LOG1P,
  REF_EXPM1,
  REF_SQUARE,
  REF_RECIPROCAL,
  REF_LOGICAL_NOT,
  REF_NUM_UNOPS
} ref_unop;

bool ref_broadcast_shape(loom_shape a, loom_shape b, loom_shape *out);
/* Result dtype of a binary op on these dtypes. */
loom_dtype ref_binop_dtype(ref_binop op, loom_dtype a, loom_dtype b);
/* Result dtype of a unary op; LOOM_NUM_DTYPES if the op refuses the dtype. */
loom_dtype ref_unop_dtype(ref_unop op, loom_dtype a);
ref_t *ref_binary(ref_binop op, const ref_t *a, const ref_t *b);
/* a op s, or s op a when reversed (rsub, rdiv). */
ref_t *ref_binary_s(ref_binop op, const ref_t *a, double s, bool reversed);
ref_t *ref_unary(ref_unop op, const ref_t *a);

ref_t *ref_add(const ref_t *a, const ref_t *b);
ref_t *ref_sub(const ref_t *a, const ref_t *b);
ref_t *ref_mul(const ref_t *a, const ref_t *b);
ref_t *ref_div(const ref_t *a, const ref_t *b);
ref_t *ref_pow(const ref_t *a, const ref_t *b);
ref_t *ref_maximum(const ref_t *a, const ref_t *b);
ref_t *ref_minimum(const ref_t *a, const ref_t *b);
ref_t *ref_lt(const ref_t *a, const ref_t *b);
ref_t *ref_le(const ref_t *a, const ref_t *b);
ref_t *ref_gt(const ref_t *a, const ref_t *b);
ref_t *ref_ge(const ref_t *a, const ref_t *b);
ref_t *ref_eq(const ref_t *a, const ref_t *b);
ref_t *ref_ne(const ref_t *a, const ref_t *b);
ref_t *ref_logical_and(const ref_t *a, const ref_t *b);
ref_t *ref_logical_or(const ref_t *a, const ref_t *b);
ref_t *ref_add_s(const ref_t *a, double s);
ref_t *ref_sub_s(const ref_t *a, double s);
ref_t *ref_rsub_s(double s, const ref_t *a);
ref_t *ref_mul_s(const ref_t *a, double s);
ref_t *ref_div_s(const ref_t *a, double s);
ref_t *ref_rdiv_s(double s, const ref_t *a);
ref_t *ref_pow_s(const ref_t *a, double s);
ref_t *ref_maximum_s(const ref_t *a, double s);
ref_t *ref_minimum_s(const ref_t *a, double s);
ref_t *ref_neg(const ref_t *a);
ref_t *ref_abs(const ref_t *a);
ref_t *ref_exp(const ref_t *a);
ref_t *ref_log(const ref_t *a);
ref_t *ref_sqrt(const ref_t *a);
ref_t *ref_rsqrt(const ref_t *a);
ref_t *ref_sin(const ref_t *a);
ref_t *ref_cos(const ref_t *a);
ref_t *ref_tanh(const ref_t *a);
ref_t *ref_sigmoid(const ref_t *a);
ref_t *ref_relu(const ref_t *a);
ref_t *ref_gelu(const ref_t *a);
ref_t *ref_silu(const ref_t *a);
ref_t *ref_log1p(const ref_t *a);
ref_t *ref_expm1(const ref_t *a);
ref_t *ref_square(const ref_t *a);
ref_t *ref_reciprocal(const ref_t *a);
ref_t *ref_logical_not(const ref_t *a);
ref_t *ref_where(const ref_t *cond, const ref_t *a, const ref_t *b);
/* torch.clamp: min(max(a, lo), hi), NaN from the value or a bound; NULL for bools. */
ref_t *ref_clamp(const ref_t *a, double lo, double hi);
ref_t *ref_cast(const ref_t *a, loom_dtype d);
/* numpy's view(d): each element's bytes read as d, of the same size (NULL
 * otherwise); to BOOL a byte other than 0 is 1. Exact where the doubles hold the
 * values (not for 64-bit integers past 2^53). */
ref_t *ref_bitcast(const ref_t *a, loom_dtype d);

/* ---------------------------------------------------------------- reductions */
/* NULL on a bad/duplicate axis; naxes == 0 means all axes. */
ref_t *ref_sum(const ref_t *a, const int *axes, int naxes, bool keepdim);
ref_t *ref_mean(const ref_t *a, const int *axes, int naxes, bool keepdim);
ref_t *ref_max(const ref_t *a, const int *axes, int naxes, bool keepdim);
ref_t *ref_min(const ref_t *a, const int *axes, int naxes, bool keepdim);
ref_t *ref_sum_all(const ref_t *a);
ref_t *ref_mean_all(const ref_t *a);
ref_t *ref_argmax(const ref_t *a, int axis, bool keepdim);
ref_t *ref_argmin(const ref_t *a, int axis, bool keepdim);
ref_t *ref_softmax(const ref_t *a, int axis);
ref_t *ref_log_softmax(const ref_t *a, int axis);
ref_t *ref_logsumexp(const ref_t *a, int axis);

/* ---------------------------------------------------------------- shape */
ref_t *ref_reshape(const ref_t *a, loom_shape s);
ref_t *ref_permute(const ref_t *a, const int *perm, int n);
ref_t *ref_transpose(const ref_t *a, int d0, int d1);
ref_t *ref_expand(const ref_t *a, loom_shape s);
ref_t *ref_squeeze(const ref_t *a, int axis);
ref_t *ref_unsqueeze(const ref_t *a, int axis);
ref_t *ref_flatten(const ref_t *a, int start, int end);
ref_t *ref_slice(const ref_t *a, int axis, int64_t start, int64_t end, int64_t step);
ref_t *ref_pad(const ref_t *a, const int64_t *pads, int npads, double value);
ref_t *ref_cat(const ref_t *const *ts, int n, int axis);
ref_t *ref_stack(const ref_t *const *ts, int n, int axis);
ref_t *ref_contiguous(const ref_t *a);

/* ---------------------------------------------------------------- linear algebra */
ref_t *ref_matmul(const ref_t *a, const ref_t *b);

ref_t *ref_lt_s(const ref_t *a, double s);
ref_t *ref_le_s(const ref_t *a, double s);
ref_t *ref_gt_s(const ref_t *a, double s);
ref_t *ref_ge_s(const ref_t *a, double s);
ref_t *ref_eq_s(const ref_t *a, double s);
ref_t *ref_ne_s(const ref_t *a, double s);

/* ---------------------------------------------------------------- libloom glue
 * (ref.c defines REF_NO_LOOM_GLUE: the support library must not call libloom,
 * since it is linked after it.) */
#ifndef REF_NO_LOOM_GLUE
static inline loom_tensor *ref_to_loom(const ref_t *a) {
  size_t bytes = 0;
  void *buf = ref_pack(a, &bytes);
  loom_tensor *t = loom_from_data(buf, a->shape, a->dtype, test_device());
  free(buf);
  return t;
}

/* Realizes t and reads it back; NULL (with a message) if t is an error or the
 * copy fails. */
static inline ref_t *ref_from_loom(loom_tensor *t) {
  if (!t) {
    printf("  ref_from_loom: NULL tensor\n");
    return NULL;
  }
  if (loom_status_of(t) != LOOM_OK) {
    const char *m = loom_error_message(t);
    printf("  ref_from_loom: error tensor %s: %s\n", loom_status_name(loom_status_of(t)),
           m ? m : "(no message)");
    return NULL;
  }
  loom_shape s = loom_shape_of(t);
  loom_dtype d = loom_dtype_of(t);
  if (d < 0 || d >= LOOM_NUM_DTYPES || s.ndim < 0 || s.ndim > LOOM_MAX_DIMS) {
    printf("  ref_from_loom: bad dtype %d or ndim %d\n", (int)d, s.ndim);
    return NULL;
  }
  int64_t n = ref_shape_numel(s);
  size_t bytes = (size_t)n * ref_dtype_size(d);
  void *buf = malloc(bytes ? bytes : 1);
  loom_status st = loom_copy_to_host(t, buf, bytes);
  if (st != LOOM_OK) {
    const char *m = loom_last_error();
    printf("  ref_from_loom: loom_copy_to_host: %s (%s)\n", loom_status_name(st), m ? m : "");
    free(buf);
    return NULL;
  }
  ref_t *r = ref_unpack(buf, s, d);
  free(buf);
  return r;
}

/* Checks that loom tensor `got` equals `expected` (dtype, shape, values). */
static inline bool ref_check_impl(const char *what, const ref_t *expected, loom_tensor *got,
                                  double rtol, double atol) {
  if (!expected) {
    printf("  %s: no expected value (reference refused the inputs)\n", what);
    return false;
  }
  ref_t *g = ref_from_loom(got);
  if (!g) {
    printf("  %s: could not read the result\n", what);
    return false;
  }
  bool ok = ref_compare(what, expected, g, rtol, atol);
  ref_free(g);
  return ok;
}
#define REF_CHECK(what, expected, got, rtol, atol)                                                 \
  check_record(ref_check_impl((what), (expected), (got), (rtol), (atol)), __FILE__, __LINE__,      \
               (what))

/* ---------------------------------------------------------------- tracking
 * Every loom tensor a test makes goes through TK(); ref_release_all() frees
 * them (the suites stay leak-free without relying on scopes). */
#define REF_TRACK_MAX 16384
static loom_tensor *ref_tracked_[REF_TRACK_MAX];
static int ref_ntracked_;
static inline loom_tensor *TK(loom_tensor *t) {
  if (ref_ntracked_ < REF_TRACK_MAX)
    ref_tracked_[ref_ntracked_++] = t;
  else
    fprintf(stderr, "TK: too many tensors\n");
  return t;
}
static inline void ref_release_all(void) {
  for (int i = ref_ntracked_ - 1; i >= 0; i--) loom_free(ref_tracked_[i]);
  ref_ntracked_ = 0;
}

/* ---------------------------------------------------------------- inputs and views */
typedef enum ref_domain {
  DOM_ANY,   /* floats [-2, 2), ints [-5, 5], U8 [0, 10] */
  DOM_POS,   /* floats [0.1, 3), ints [1, 6], U8 [1, 10] */
  DOM_EXPO,  /* pow exponents: floats [-2, 2), ints and U8 [0, 3] */
  DOM_QUANT, /* like ANY but floats are multiples of 0.5: many ties */
  DOM_BIG,   /* floats [995, 1005): softmax stability */
  DOM_CAST,  /* [0.0, 9.9]: convertible to every dtype */
} ref_domain;

static inline ref_t *ref_gen(loom_shape s, loom_dtype d, ref_domain dom) {
  double lo = -2, hi = 2;
  bool fl = ref_is_float(d);
  switch (dom) {
  case DOM_ANY:
  case DOM_QUANT:
    if (!fl) lo = ref_is_unsigned(d) ? 0 : -5, hi = ref_is_unsigned(d) ? 10 : 5;
    break;
  case DOM_POS: lo = fl ? 0.1 : 1, hi = fl ? 3 : (ref_is_unsigned(d) ? 10 : 6); break;
  case DOM_EXPO:
    if (!fl) lo = 0, hi = 3;
    break;
  case DOM_BIG: lo = 995, hi = 1005; break;
  case DOM_CAST: lo = 0, hi = 9.9; break;
  }
  ref_t *r = ref_rand(s, d, lo, hi);
  if (dom == DOM_QUANT && fl)
    for (int64_t i = 0; i < r->numel; i++) r->data[i] = round(r->data[i] * 2) / 2;
  return r;
}

typedef enum ref_view {
  V_CONTIG,          /* loom_from_data */
  V_PERMUTE,         /* permute (reverse) of a contiguous tensor */
  V_SLICE,           /* every second element along the last axis */
  V_EXPAND,          /* expanded from a size-1 (or missing leading) dim */
  V_PAD,             /* pad (1, -1) on the last axis */
  V_RESHAPE_PERMUTE, /* reshape(reshape(permute(b), [-1]), shape) */
  V_CHAIN,           /* slice -> permute -> unsqueeze -> squeeze */
  V_NUM
} ref_view;
static const char *const ref_view_names[V_NUM] = {"contig", "permute",         "slice", "expand",
                                                  "pad",    "reshape-permute", "chain"};

static inline loom_shape ref_reverse_shape(loom_shape s) {
  loom_shape r = s;
  for (int i = 0; i < s.ndim; i++) r.dim[i] = s.dim[s.ndim - 1 - i];
  return r;
}

/* A loom tensor (tracked) whose value is *out (caller frees), built through view v.
 * Views that do not apply to the shape (e.g. permute of a 1-D) fall back to contig. */
static inline loom_tensor *ref_make_input(loom_shape s, loom_dtype d, ref_domain dom, ref_view v,
                                          ref_t **out) {
  int n = s.ndim;
  int rev[LOOM_MAX_DIMS];
  for (int i = 0; i < n; i++) rev[i] = n - 1 - i;
  if ((v == V_PERMUTE || v == V_RESHAPE_PERMUTE) && n < 2) v = V_CONTIG;
  if ((v == V_SLICE || v == V_PAD || v == V_CHAIN || v == V_EXPAND) && n < 1) v = V_CONTIG;
  switch (v) {
  case V_PERMUTE:
  case V_RESHAPE_PERMUTE: {
    ref_t *b = ref_gen(ref_reverse_shape(s), d, dom);
    loom_tensor *t = TK(loom_permute(TK(ref_to_loom(b)), rev, n));
    if (v == V_RESHAPE_PERMUTE) t = TK(loom_reshape(TK(loom_reshape(t, LOOM_SHAPE(-1))), s));
    *out = ref_permute(b, rev, n);
    ref_free(b);
    return t;
  }
  case V_SLICE: {
    loom_shape bs = s;
    bs.dim[n - 1] = 2 * s.dim[n - 1] + 1;
    ref_t *b = ref_gen(bs, d, dom);
    loom_tensor *t = TK(loom_slice(TK(ref_to_loom(b)), -1, 1, bs.dim[n - 1], 2));
    *out = ref_slice(b, -1, 1, bs.dim[n - 1], 2);
    ref_free(b);
    return t;
  }
  case V_EXPAND: {
    int k = 0;
    while (k < n - 1 && s.dim[k] == 1) k++;
    loom_shape bs = s;
    bs.dim[k] = 1;
    if (k == 0 && n >= 2) { /* a new leading dim */
      bs.ndim = n - 1;
      for (int i = 0; i < n - 1; i++) bs.dim[i] = s.dim[i + 1];
    }
    ref_t *b = ref_gen(bs, d, dom);
    loom_tensor *t = TK(loom_expand(TK(ref_to_loom(b)), s));
    *out = ref_expand(b, s);
    ref_free(b);
    return t;
  }
  case V_PAD: {
    ref_t *b = ref_gen(s, d, dom);
    int64_t pads[2] = {1, -1}; /* cropping a size-0 dim is an error (as in torch) */
    if (s.dim[n - 1] == 0) pads[0] = pads[1] = 0;
    double pv = dom == DOM_POS ? 2.0 : 1.0;
    loom_tensor *t = TK(loom_pad(TK(ref_to_loom(b)), pads, 2, pv));
    *out = ref_pad(b, pads, 2, pv);
    ref_free(b);
    return t;
  }
  case V_CHAIN: {
    loom_shape bs = ref_reverse_shape(s);
    int64_t m = bs.dim[0];
    bs.dim[0] = 2 * m + 2;
    ref_t *b = ref_gen(bs, d, dom);
    loom_tensor *t = TK(loom_slice(TK(ref_to_loom(b)), 0, 2, 2 * m + 2, 2));
    t = TK(loom_squeeze(TK(loom_unsqueeze(TK(loom_permute(t, rev, n)), 0)), 0));
    ref_t *r1 = ref_slice(b, 0, 2, 2 * m + 2, 2);
    *out = ref_permute(r1, rev, n);
    ref_free(r1);
    ref_free(b);
    return t;
  }
  default: {
    ref_t *b = ref_gen(s, d, dom);
    *out = b;
    return TK(ref_to_loom(b));
  }
  }
}

/* ---------------------------------------------------------------- op tables */
typedef loom_tensor *(*loom_un_fn)(const loom_tensor *);
typedef loom_tensor *(*loom_bin_fn)(const loom_tensor *, const loom_tensor *);
typedef loom_tensor *(*loom_bins_fn)(const loom_tensor *, double);

typedef struct ref_unop_case {
  const char *name;
  loom_un_fn fn;
  ref_unop op;
  ref_domain dom;
  int tol;
  bool skip_bool; /* PyTorch refuses or the brief leaves it open */
} ref_unop_case;

static const ref_unop_case ref_unops[] = {
    {"neg", loom_neg, REF_NEG, DOM_ANY, REF_TOL_SIMPLE, false},
    {"abs", loom_abs, REF_ABS, DOM_ANY, REF_TOL_SIMPLE, true},
    {"exp", loom_exp, REF_EXP, DOM_ANY, REF_TOL_TRANS, false},
    {"log", loom_log, REF_LOG, DOM_POS, REF_TOL_TRANS, false},
    {"sqrt", loom_sqrt, REF_SQRT, DOM_POS, REF_TOL_TRANS, false},
    {"rsqrt", loom_rsqrt, REF_RSQRT, DOM_POS, REF_TOL_TRANS, false},
    {"sin", loom_sin, REF_SIN, DOM_ANY, REF_TOL_TRANS, false},
    {"cos", loom_cos, REF_COS, DOM_ANY, REF_TOL_TRANS, false},
    {"tanh", loom_tanh, REF_TANH, DOM_ANY, REF_TOL_TRANS, false},
    {"sigmoid", loom_sigmoid, REF_SIGMOID, DOM_ANY, REF_TOL_TRANS, false},
    {"relu", loom_relu, REF_RELU, DOM_ANY, REF_TOL_SIMPLE, true},
    {"gelu", loom_gelu, REF_GELU, DOM_ANY, REF_TOL_TRANS, false},
    {"silu", loom_silu, REF_SILU, DOM_ANY, REF_TOL_TRANS, false},
    {"log1p", loom_log1p, REF_LOG1P, DOM_POS, REF_TOL_TRANS, false},
    {"expm1", loom_expm1, REF_EXPM1, DOM_ANY, REF_TOL_TRANS, false},
    {"square", loom_square, REF_SQUARE, DOM_ANY, REF_TOL_SIMPLE, false},
    {"reciprocal", loom_reciprocal, REF_RECIPROCAL, DOM_POS, REF_TOL_TRANS, false},
    {"logical_not", loom_logical_not, REF_LOGICAL_NOT, DOM_QUANT, REF_TOL_SIMPLE, false},
};
#define REF_NUM_UNOP_CASES ((int)(sizeof ref_unops / sizeof ref_unops[0]))

typedef struct ref_binop_case {
  const char *name;
  loom_bin_fn fn;
  loom_bins_fn sfn; /* scalar form, or NULL */
  ref_binop op;
  ref_domain dom_a, dom_b;
  int tol;
  bool skip_bool;
} ref_binop_case;

static const ref_binop_case ref_binops[] = {
    {"add", loom_add, loom_add_s, REF_ADD, DOM_ANY, DOM_ANY, REF_TOL_SIMPLE, false},
    {"sub", loom_sub, loom_sub_s, REF_SUB, DOM_ANY, DOM_ANY, REF_TOL_SIMPLE, true},
    {"mul", loom_mul, loom_mul_s, REF_MUL, DOM_ANY, DOM_ANY, REF_TOL_SIMPLE, false},
    {"div", loom_div, loom_div_s, REF_DIV, DOM_ANY, DOM_POS, REF_TOL_SIMPLE, false},
    {"pow", loom_pow, loom_pow_s, REF_POW, DOM_POS, DOM_EXPO, REF_TOL_TRANS, true},
    {"maximum", loom_maximum, loom_maximum_s, REF_MAXIMUM, DOM_QUANT, DOM_QUANT, REF_TOL_SIMPLE,
     false},
    {"minimum", loom_minimum, loom_minimum_s, REF_MINIMUM, DOM_QUANT, DOM_QUANT, REF_TOL_SIMPLE,
     false},
    {"lt", loom_lt, loom_lt_s, REF_LT, DOM_QUANT, DOM_QUANT, REF_TOL_SIMPLE, false},
    {"le", loom_le, loom_le_s, REF_LE, DOM_QUANT, DOM_QUANT, REF_TOL_SIMPLE, false},
    {"gt", loom_gt, loom_gt_s, REF_GT, DOM_QUANT, DOM_QUANT, REF_TOL_SIMPLE, false},
    {"ge", loom_ge, loom_ge_s, REF_GE, DOM_QUANT, DOM_QUANT, REF_TOL_SIMPLE, false},
    {"eq", loom_eq, loom_eq_s, REF_EQ, DOM_QUANT, DOM_QUANT, REF_TOL_SIMPLE, false},
    {"ne", loom_ne, loom_ne_s, REF_NE, DOM_QUANT, DOM_QUANT, REF_TOL_SIMPLE, false},
    {"logical_and", loom_logical_and, NULL, REF_LOGICAL_AND, DOM_QUANT, DOM_QUANT, REF_TOL_SIMPLE,
     false},
    {"logical_or", loom_logical_or, NULL, REF_LOGICAL_OR, DOM_QUANT, DOM_QUANT, REF_TOL_SIMPLE,
     false},
};
#define REF_NUM_BINOP_CASES ((int)(sizeof ref_binops / sizeof ref_binops[0]))

static const loom_dtype ref_all_dtypes[] = {LOOM_F32, LOOM_F64,  LOOM_I32, LOOM_I64,
                                            LOOM_U8,  LOOM_BOOL, LOOM_I8,  LOOM_I16,
                                            LOOM_U16, LOOM_U32,  LOOM_U64};

/* ---------------------------------------------------------------- generic checks
 * Each builds inputs through view v, runs the loom op, checks against the
 * reference, and releases every tensor it made. */

static inline void ref_tols_for(loom_dtype d, int kind, double *rt, double *at) {
  ref_tol(d, kind, rt, at);
}

static inline void check_unary(const ref_unop_case *c, loom_dtype d, loom_shape s, ref_view v) {
  char sb[64], what[160];
  snprintf(what, sizeof what, "%s %s %s view=%s", c->name, ref_dtype_str(d),
           ref_shape_str(s, sb, sizeof sb), ref_view_names[v]);
  ref_t *x;
  loom_tensor *tx = ref_make_input(s, d, c->dom, v, &x);
  loom_tensor *ty = TK(c->fn(tx));
  ref_t *e = ref_unary(c->op, x);
  if (!e) { /* the op refuses this dtype */
    check_set_ctx("%s", what);
    CHECK_STATUS(ty, LOOM_ERR_DTYPE);
    check_ctx[0] = 0;
  } else {
    double rt, at;
    ref_tols_for(e->dtype, c->tol, &rt, &at);
    REF_CHECK(what, e, ty, rt, at);
  }
  ref_free(x);
  ref_free(e);
  ref_release_all();
}

static inline void check_binary(const ref_binop_case *c, loom_dtype da, loom_dtype db,
                                loom_shape sa, loom_shape sb_, ref_view va, ref_view vb) {
  char s1[64], s2[64], what[200];
  snprintf(what, sizeof what, "%s %s%s(%s) x %s%s(%s)", c->name, ref_dtype_str(da),
           ref_shape_str(sa, s1, sizeof s1), ref_view_names[va], ref_dtype_str(db),
           ref_shape_str(sb_, s2, sizeof s2), ref_view_names[vb]);
  ref_t *x, *y;
  loom_tensor *tx = ref_make_input(sa, da, c->dom_a, va, &x);
  loom_tensor *ty = ref_make_input(sb_, db, c->dom_b, vb, &y);
  loom_tensor *tz = TK(c->fn(tx, ty));
  ref_t *e = ref_binary(c->op, x, y);
  double rt, at;
  ref_tols_for(e ? e->dtype : LOOM_F32, c->tol, &rt, &at);
  REF_CHECK(what, e, tz, rt, at);
  ref_free(x);
  ref_free(y);
  ref_free(e);
  ref_release_all();
}

/* reversed: 0 = a op s (the _s form), 1 = s op a (rsub_s / rdiv_s via rfn). */
static inline void check_binary_s(const char *name, loom_bins_fn fn,
                                  loom_tensor *(*rfn)(double, const loom_tensor *), ref_binop op,
                                  ref_domain dom, int tol, loom_dtype d, loom_shape s, double sv,
                                  ref_view v) {
  char s1[64], what[200];
  snprintf(what, sizeof what, "%s %s%s(%s) scalar %g", name, ref_dtype_str(d),
           ref_shape_str(s, s1, sizeof s1), ref_view_names[v], sv);
  ref_t *x;
  loom_tensor *tx = ref_make_input(s, d, dom, v, &x);
  loom_tensor *tz = TK(rfn ? rfn(sv, tx) : fn(tx, sv));
  ref_t *e = ref_binary_s(op, x, sv, rfn != NULL);
  double rt, at;
  ref_tols_for(e ? e->dtype : LOOM_F32, tol, &rt, &at);
  REF_CHECK(what, e, tz, rt, at);
  ref_free(x);
  ref_free(e);
  ref_release_all();
}

typedef enum {
  RK_SUM,
  RK_MEAN,
  RK_MAX,
  RK_MIN,
  RK_SUM_ALL,
  RK_MEAN_ALL,
  RK_ARGMAX,
  RK_ARGMIN,
  RK_SOFTMAX,
  RK_LOG_SOFTMAX,
  RK_LOGSUMEXP,
  RK_NUM
} ref_reduce_kind;
static const char *const ref_reduce_names[RK_NUM] = {"sum",     "mean",        "max",      "min",
                                                     "sum_all", "mean_all",    "argmax",   "argmin",
                                                     "softmax", "log_softmax", "logsumexp"};

/* Reduction `k` over axes (argmax/softmax use axes[0]). expect_err != LOOM_OK checks
 * that loom refuses with that status instead. */
static inline void check_reduce(ref_reduce_kind k, loom_dtype d, loom_shape s, ref_view v,
                                ref_domain dom, const int *axes, int naxes, bool keepdim,
                                loom_status expect_err) {
  char s1[64], what[200], ax[64] = "";
  size_t used = 0;
  for (int i = 0; i < naxes && used < sizeof ax; i++)
    used += (size_t)snprintf(ax + used, sizeof ax - used, "%s%d", i ? "," : "", axes[i]);
  snprintf(what, sizeof what, "%s %s%s(%s) axes={%s} keepdim=%d", ref_reduce_names[k],
           ref_dtype_str(d), ref_shape_str(s, s1, sizeof s1), ref_view_names[v], ax, keepdim);
  ref_t *x;
  loom_tensor *tx = ref_make_input(s, d, dom, v, &x);
  loom_tensor *tz = NULL;
  ref_t *e = NULL;
  int a0 = naxes ? axes[0] : 0;
  switch (k) {
  case RK_SUM:
    tz = loom_sum(tx, axes, naxes, keepdim);
    e = ref_sum(x, axes, naxes, keepdim);
    break;
  case RK_MEAN:
    tz = loom_mean(tx, axes, naxes, keepdim);
    e = ref_mean(x, axes, naxes, keepdim);
    break;
  case RK_MAX:
    tz = loom_max(tx, axes, naxes, keepdim);
    e = ref_max(x, axes, naxes, keepdim);
    break;
  case RK_MIN:
    tz = loom_min(tx, axes, naxes, keepdim);
    e = ref_min(x, axes, naxes, keepdim);
    break;
  case RK_SUM_ALL:
    tz = loom_sum_all(tx);
    e = ref_sum_all(x);
    break;
  case RK_MEAN_ALL:
    tz = loom_mean_all(tx);
    e = ref_mean_all(x);
    break;
  case RK_ARGMAX:
    tz = loom_argmax(tx, a0, keepdim);
    e = ref_argmax(x, a0, keepdim);
    break;
  case RK_ARGMIN:
    tz = loom_argmin(tx, a0, keepdim);
    e = ref_argmin(x, a0, keepdim);
    break;
  case RK_SOFTMAX:
    tz = loom_softmax(tx, a0);
    e = ref_softmax(x, a0);
    break;
  case RK_LOG_SOFTMAX:
    tz = loom_log_softmax(tx, a0);
    e = ref_log_softmax(x, a0);
    break;
  case RK_LOGSUMEXP:
    tz = loom_logsumexp(tx, a0);
    e = ref_logsumexp(x, a0);
    break;
  default: break;
  }
  TK(tz);
  if (expect_err != LOOM_OK) {
    check_set_ctx("%s", what);
    CHECK_STATUS(tz, expect_err);
    check_ctx[0] = 0;
  } else {
    double rt, at;
    int kind = (k >= RK_SOFTMAX) ? REF_TOL_TRANS : REF_TOL_REDUCE;
    ref_tols_for(e ? e->dtype : LOOM_F32, kind, &rt, &at);
    REF_CHECK(what, e, tz, rt, at);
  }
  ref_free(x);
  ref_free(e);
  ref_release_all();
}

static inline void check_matmul(loom_dtype d, loom_shape sa, loom_shape sb_, ref_view va,
                                ref_view vb) {
  char s1[64], s2[64], what[200];
  snprintf(what, sizeof what, "matmul %s %s(%s) @ %s(%s)", ref_dtype_str(d),
           ref_shape_str(sa, s1, sizeof s1), ref_view_names[va], ref_shape_str(sb_, s2, sizeof s2),
           ref_view_names[vb]);
  ref_t *x, *y;
  loom_tensor *tx = ref_make_input(sa, d, DOM_ANY, va, &x);
  loom_tensor *ty = ref_make_input(sb_, d, DOM_ANY, vb, &y);
  loom_tensor *tz = TK(loom_matmul(tx, ty));
  ref_t *e = ref_matmul(x, y);
  double rt, at;
  ref_tols_for(d, REF_TOL_REDUCE, &rt, &at);
  REF_CHECK(what, e, tz, rt, at);
  ref_free(x);
  ref_free(y);
  ref_free(e);
  ref_release_all();
}

#endif /* REF_NO_LOOM_GLUE */

#endif
