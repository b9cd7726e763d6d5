/* The reference evaluator: PyTorch semantics in naive loops (see ref.h). */
#define REF_NO_LOOM_GLUE
#include "ref.h"

#include <string.h>

/* ================================================================ basics */

int64_t ref_shape_numel(loom_shape s) {
  int64_t n = 1;
  for (int i = 0; i < s.ndim; i++) n *= s.dim[i];
  return n;
}

bool ref_shape_eq(loom_shape a, loom_shape b) {
  if (a.ndim != b.ndim) return false;
  for (int i = 0; i < a.ndim; i++)
    if (a.dim[i] != b.dim[i]) return false;
  return true;
}

char *ref_shape_str(loom_shape s, char *buf, size_t n) {
  size_t used = 0;
  used += (size_t)snprintf(buf + used, n - used, "[");
  for (int i = 0; i < s.ndim && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? "," : "", (long long)s.dim[i]);
  if (used < n) snprintf(buf + used, n - used, "]");
  return buf;
}

const char *ref_dtype_str(loom_dtype d) {
  static const char *names[] = {"F32", "F64", "I32", "I64", "U8",  "BOOL", "BF16",
                                "F16", "I8",  "I16", "U16", "U32", "U64"};
  _Static_assert(sizeof names / sizeof names[0] == LOOM_NUM_DTYPES, "a name for every dtype");
  return (d >= 0 && d < LOOM_NUM_DTYPES) ? names[d] : "?";
}

size_t ref_dtype_size(loom_dtype d) {
  switch (d) {
  case LOOM_F32: return 4;
  case LOOM_F64: return 8;
  case LOOM_I32: return 4;
  case LOOM_I64: return 8;
  case LOOM_U8: return 1;
  case LOOM_I8: return 1;
  case LOOM_I16:
  case LOOM_U16: return 2;
  case LOOM_U32: return 4;
  case LOOM_U64: return 8;
  case LOOM_BOOL: return 1;
  default: return 0;
  }
}

bool ref_is_float(loom_dtype d) { return d == LOOM_F32 || d == LOOM_F64; }
bool ref_is_int(loom_dtype d) {
  return d == LOOM_I32 || d == LOOM_I64 || d == LOOM_U8 || d == LOOM_I8 || d == LOOM_I16 ||
         ref_is_unsigned(d);
}
bool ref_is_unsigned(loom_dtype d) {
  return d == LOOM_U8 || d == LOOM_U16 || d == LOOM_U32 || d == LOOM_U64;
}

double ref_cvt(double v, loom_dtype d) {
  switch (d) {
  case LOOM_F32: return (double)(float)v;
  case LOOM_F64: return v;
  case LOOM_BOOL: return v != 0 ? 1.0 : 0.0;
  default: break;
  }
  if (v != v) return 0; /* as loom's casts: NaN is 0, int64's range saturates */
  double t = trunc(v);
  int64_t x = t >= 0x1p63 ? INT64_MAX : t <= -0x1p63 ? INT64_MIN : (int64_t)t;
  switch (d) {
  case LOOM_I32: return (double)(int32_t)(uint32_t)(uint64_t)x;
  case LOOM_I64: return (double)x;
  case LOOM_U8: return (double)(uint8_t)(uint64_t)x;
  case LOOM_I8: return (double)(int8_t)(uint8_t)(uint64_t)x;
  case LOOM_I16: return (double)(int16_t)(uint16_t)(uint64_t)x;
  case LOOM_U16: return (double)(uint16_t)(uint64_t)x;
  case LOOM_U32: return (double)(uint32_t)(uint64_t)x;
  case LOOM_U64: return t >= 0x1p63 ? (t >= 0x1p64 ? 0x1p64 : t) : (double)(uint64_t)x;
  default: return v;
  }
}

static int dtype_cat(loom_dtype d) { return d == LOOM_BOOL ? 0 : ref_is_int(d) ? 1 : 2; }
static int dtype_rank(loom_dtype d) {
  switch (d) {
  case LOOM_BOOL: return 0;
  case LOOM_F32: return 4;
  case LOOM_F64: return 5;
  default: return -1;
  }
}

/* Integers: the first dtype, smallest first, whose range holds both ranges
 * (NumPy's rule); none for U64 with a signed dtype, where loom gives I64. */
static loom_dtype int_holding_both(loom_dtype a, loom_dtype b) {
  static const struct {
    loom_dtype d;
    double lo, hi;
  } ranges[] = {{LOOM_U8, 0, 255},         {LOOM_I8, -128, 127},
                {LOOM_U16, 0, 65535},      {LOOM_I16, -32768, 32767},
                {LOOM_U32, 0, 0x1p32 - 1}, {LOOM_I32, -0x1p31, 0x1p31 - 1},
                {LOOM_U64, 0, 0x1p64},     {LOOM_I64, -0x1p63, 0x1p63}};
  int n = (int)(sizeof ranges / sizeof ranges[0]), ia = 0, ib = 0;
  while (ranges[ia].d != a) ia++;
  while (ranges[ib].d != b) ib++;
  double lo = fmin(ranges[ia].lo, ranges[ib].lo), hi = fmax(ranges[ia].hi, ranges[ib].hi);
  for (int i = 0; i < n; i++)
    if (ranges[i].lo <= lo && ranges[i].hi >= hi) return ranges[i].d;
  return LOOM_I64;
}

loom_dtype ref_promote(loom_dtype a, loom_dtype b) {
  if (dtype_cat(a) != dtype_cat(b)) return dtype_cat(a) > dtype_cat(b) ? a : b;
  if (dtype_cat(a) == 1) return int_holding_both(a, b);
  return dtype_rank(a) >= dtype_rank(b) ? a : b;
}

loom_dtype ref_promote_scalar(loom_dtype a, double s) {
  bool integral = isfinite(s) && s == trunc(s);
  if (ref_is_float(a)) return a;
  if (!integral) return LOOM_F32;
  return a == LOOM_BOOL ? LOOM_I64 : a;
}

ref_t *ref_new(loom_shape s, loom_dtype d) {
  ref_t *r = calloc(1, sizeof *r);
  r->shape = s;
  r->dtype = d;
  r->numel = ref_shape_numel(s);
  r->data = calloc((size_t)(r->numel ? r->numel : 1), sizeof(double));
  return r;
}

ref_t *ref_from_values(loom_shape s, loom_dtype d, const double *vals) {
  ref_t *r = ref_new(s, d);
  for (int64_t i = 0; i < r->numel; i++) r->data[i] = ref_cvt(vals[i], d);
  return r;
}

ref_t *ref_clone(const ref_t *a) {
  if (!a) return NULL;
  ref_t *r = ref_new(a->shape, a->dtype);
  memcpy(r->data, a->data, (size_t)a->numel * sizeof(double));
  return r;
}

void ref_free(ref_t *a) {
  if (!a) return;
  free(a->data);
  free(a);
}

int64_t ref_offset(loom_shape s, const int64_t *idx) {
  int64_t off = 0;
  for (int i = 0; i < s.ndim; i++) off = off * s.dim[i] + idx[i];
  return off;
}

bool ref_next_index(loom_shape s, int64_t *idx) {
  for (int i = s.ndim - 1; i >= 0; i--) {
    if (++idx[i] < s.dim[i]) return true;
    idx[i] = 0;
  }
  return false;
}

/* Runs the body for every multi-index idx of s (row-major). */
#define FOR_EACH_INDEX(s, idx, ...)                                                                \
  do {                                                                                             \
    int64_t idx[LOOM_MAX_DIMS + 1] = {0};                                                          \
    if (ref_shape_numel(s) > 0) {                                                                  \
      do {                                                                                         \
        __VA_ARGS__                                                                                \
      } while (ref_next_index((s), idx));                                                          \
    }                                                                                              \
  } while (0)

/* Index into `in` (right-aligned broadcast of in onto out) for out index oi. */
static int64_t bcast_offset(loom_shape out, const int64_t *oi, loom_shape in) {
  int64_t off = 0;
  int shift = out.ndim - in.ndim;
  for (int i = 0; i < in.ndim; i++) {
    int64_t j = in.dim[i] == 1 ? 0 : oi[i + shift];
    off = off * in.dim[i] + j;
  }
  return off;
}

/* ================================================================ random */

static uint64_t rng_state = 0x853c49e6748fea9bULL;

void ref_seed(uint64_t seed) { rng_state = seed; }

uint64_t ref_rand_u64(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double ref_rand_uniform(void) {
  return (double)(ref_rand_u64() >> 11) * (1.0 / 9007199254740992.0);
}

int64_t ref_rand_int(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  return lo + (int64_t)(ref_rand_u64() % (uint64_t)(hi - lo + 1));
}

ref_t *ref_rand(loom_shape s, loom_dtype d, double lo, double hi) {
  ref_t *r = ref_new(s, d);
  for (int64_t i = 0; i < r->numel; i++) {
    double v;
    if (d == LOOM_BOOL)
      v = (double)(ref_rand_u64() & 1);
    else if (ref_is_float(d))
      v = lo + (hi - lo) * ref_rand_uniform();
    else {
      int64_t l = (int64_t)ceil(lo), h = (int64_t)floor(hi);
      if (ref_is_unsigned(d) && l < 0) l = 0;
      if (ref_is_unsigned(d) && h < l) h = l;
      v = (double)ref_rand_int(l, h);
    }
    r->data[i] = ref_cvt(v, d);
  }
  return r;
}

/* ================================================================ host data */

void *ref_pack(const ref_t *a, size_t *bytes) {
  size_t es = ref_dtype_size(a->dtype);
  size_t n = (size_t)a->numel * es;
  unsigned char *buf = malloc(n ? n : 1);
  for (int64_t i = 0; i < a->numel; i++) {
    double v = a->data[i];
    void *p = buf + (size_t)i * es;
    switch (a->dtype) {
    case LOOM_F32: {
      float x = (float)v;
      memcpy(p, &x, 4);
      break;
    }
    case LOOM_F64: memcpy(p, &v, 8); break;
    case LOOM_I32: {
      int32_t x = (int32_t)v;
      memcpy(p, &x, 4);
      break;
    }
    case LOOM_I64: {
      int64_t x = (int64_t)v;
      memcpy(p, &x, 8);
      break;
    }
    case LOOM_U8: {
      uint8_t x = (uint8_t)v;
      memcpy(p, &x, 1);
      break;
    }
    case LOOM_I8: {
      int8_t x = (int8_t)v;
      memcpy(p, &x, 1);
      break;
    }
    case LOOM_I16: {
      int16_t x = (int16_t)v;
      memcpy(p, &x, 2);
      break;
    }
    case LOOM_U16: {
      uint16_t x = (uint16_t)v;
      memcpy(p, &x, 2);
      break;
    }
    case LOOM_U32: {
      uint32_t x = (uint32_t)v;
      memcpy(p, &x, 4);
      break;
    }
    case LOOM_U64: {
      uint64_t x = v >= 0x1p64 ? UINT64_MAX : (uint64_t)v;
      memcpy(p, &x, 8);
      break;
    }
    case LOOM_BOOL: {
      uint8_t x = v != 0;
      memcpy(p, &x, 1);
      break;
    }
    default: break;
    }
  }
  if (bytes) *bytes = n;
  return buf;
}

ref_t *ref_unpack(const void *buf, loom_shape s, loom_dtype d) {
  ref_t *r = ref_new(s, d);
  size_t es = ref_dtype_size(d);
  const unsigned char *b = buf;
  for (int64_t i = 0; i < r->numel; i++) {
    const void *p = b + (size_t)i * es;
    double v = 0;
    switch (d) {
    case LOOM_F32: {
      float x;
      memcpy(&x, p, 4);
      v = x;
      break;
    }
    case LOOM_F64: memcpy(&v, p, 8); break;
    case LOOM_I32: {
      int32_t x;
      memcpy(&x, p, 4);
      v = x;
      break;
    }
    case LOOM_I64: {
      int64_t x;
      memcpy(&x, p, 8);
      v = (double)x;
      break;
    }
    case LOOM_U8: {
      uint8_t x;
      memcpy(&x, p, 1);
      v = x;
      break;
    }
    case LOOM_I8: {
      int8_t x;
      memcpy(&x, p, 1);
      v = x;
      break;
    }
    case LOOM_I16: {
      int16_t x;
      memcpy(&x, p, 2);
      v = x;
      break;
    }
    case LOOM_U16: {
      uint16_t x;
      memcpy(&x, p, 2);
      v = x;
      break;
    }
    case LOOM_U32: {
      uint32_t x;
      memcpy(&x, p, 4);
      v = x;
      break;
    }
    case LOOM_U64: {
      uint64_t x;
      memcpy(&x, p, 8);
      v = (double)x;
      break;
    }
    case LOOM_BOOL: {
      uint8_t x;
      memcpy(&x, p, 1);
      v = x;
      break;
    } /* raw, to catch non-0/1 bytes */
    default: break;
    }
    r->data[i] = v;
  }
  return r;
}

/* ================================================================ comparison */

void ref_tol(loom_dtype d, int kind, double *rtol, double *atol) {
  *rtol = 0, *atol = 0;
  if (d == LOOM_F32) {
    if (kind == REF_TOL_SIMPLE)
      *rtol = 1e-5, *atol = 1e-6;
    else if (kind == REF_TOL_TRANS)
      *rtol = 1e-4, *atol = 1e-5;
    else
      *rtol = 1e-4, *atol = 1e-4;
  } else if (d == LOOM_F64) {
    if (kind == REF_TOL_SIMPLE)
      *rtol = 1e-12, *atol = 1e-12;
    else
      *rtol = 1e-10, *atol = 1e-10;
  }
}

static void fmt_index(loom_shape s, int64_t flat, char *buf, size_t n) {
  int64_t idx[LOOM_MAX_DIMS];
  for (int i = s.ndim - 1; i >= 0; i--) {
    idx[i] = s.dim[i] ? flat % s.dim[i] : 0;
    flat = s.dim[i] ? flat / s.dim[i] : 0;
  }
  loom_shape t = s;
  for (int i = 0; i < s.ndim; i++) t.dim[i] = idx[i];
  ref_shape_str(t, buf, n);
}

bool ref_compare(const char *what, const ref_t *e, const ref_t *g, double rtol, double atol) {
  char sb[128], gb[128];
  if (e->dtype != g->dtype) {
    printf("  %s: dtype %s, expected %s\n", what, ref_dtype_str(g->dtype), ref_dtype_str(e->dtype));
    return false;
  }
  if (!ref_shape_eq(e->shape, g->shape)) {
    printf("  %s: shape %s, expected %s\n", what, ref_shape_str(g->shape, gb, sizeof gb),
           ref_shape_str(e->shape, sb, sizeof sb));
    return false;
  }
  int bad = 0;
  for (int64_t i = 0; i < e->numel; i++) {
    double x = e->data[i], y = g->data[i];
    bool ok;
    if (x != x || y != y)
      ok = (x != x) && (y != y);
    else if (isinf(x) || isinf(y))
      ok = x == y;
    else
      ok = fabs(x - y) <= atol + rtol * fabs(x);
    if (!ok) {
      if (bad < 5) {
        char ib[128];
        fmt_index(e->shape, i, ib, sizeof ib);
        printf("  %s: %s %s mismatch at %s: expected %.9g, got %.9g\n", what,
               ref_dtype_str(e->dtype), ref_shape_str(e->shape, sb, sizeof sb), ib, x, y);
      }
      bad++;
    }
  }
  if (bad > 5) printf("  %s: ... %d mismatches of %lld\n", what, bad, (long long)e->numel);
  return bad == 0;
}

/* ================================================================ creation */

ref_t *ref_full(loom_shape s, double value, loom_dtype d) {
  ref_t *r = ref_new(s, d);
  for (int64_t i = 0; i < r->numel; i++) r->data[i] = ref_cvt(value, d);
  return r;
}

ref_t *ref_arange(double start, double stop, double step, loom_dtype d) {
  if (step == 0) return NULL;
  double nn = ceil((stop - start) / step);
  int64_t n = nn > 0 ? (int64_t)nn : 0;
  ref_t *r = ref_new(LOOM_SHAPE(n), d);
  for (int64_t i = 0; i < n; i++) r->data[i] = ref_cvt(start + (double)i * step, d);
  return r;
}

/* ================================================================ elementwise */

bool ref_broadcast_shape(loom_shape a, loom_shape b, loom_shape *out) {
  loom_shape r;
  r.ndim = a.ndim > b.ndim ? a.ndim : b.ndim;
  for (int i = 0; i < r.ndim; i++) {
    int ia = i - (r.ndim - a.ndim), ib = i - (r.ndim - b.ndim);
    int64_t x = ia >= 0 ? a.dim[ia] : 1, y = ib >= 0 ? b.dim[ib] : 1;
    if (x != y && x != 1 && y != 1) return false;
    r.dim[i] = x == 1 ? y : x;
  }
  for (int i = r.ndim; i < LOOM_MAX_DIMS; i++) r.dim[i] = 0;
  *out = r;
  return true;
}

static bool is_cmp(ref_binop op) { return op >= REF_LT && op <= REF_NE; }

loom_dtype ref_binop_dtype(ref_binop op, loom_dtype a, loom_dtype b) {
  if (is_cmp(op) || op == REF_LOGICAL_AND || op == REF_LOGICAL_OR) return LOOM_BOOL;
  loom_dtype ct = ref_promote(a, b);
  if (op == REF_DIV && !ref_is_float(ct)) return LOOM_F32;
  return ct;
}

int64_t ref_int_wrap(uint64_t v, loom_dtype d) {
  switch (d) {
  case LOOM_U8: return (uint8_t)v;
  case LOOM_I8: return (int8_t)(uint8_t)v;
  case LOOM_I16: return (int16_t)(uint16_t)v;
  case LOOM_U16: return (uint16_t)v;
  case LOOM_U32: return (uint32_t)v;
  case LOOM_I32: return (int32_t)(uint32_t)v;
  case LOOM_BOOL: return v != 0;
  default: return (int64_t)v;
  }
}

int64_t ref_int_pow(int64_t base, int64_t e, loom_dtype d) {
  if (e < 0) return base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0;
  uint64_t r = 1, square = (uint64_t)base;
  for (uint64_t k = (uint64_t)e; k; k >>= 1) {
    if (k & 1) r *= square;
    square *= square;
  }
  return ref_int_wrap(r, d);
}

/* Integers compute modulo 2^64 and wrap to ct: exact, where a product of
 * doubles past 2^53 was not (I64 values past 2^53 still round in a ref_t). */
static double iwrap(uint64_t v, loom_dtype ct) {
  return ct == LOOM_U64 ? (double)v : (double)ref_int_wrap(v, ct);
}
/* An integer value's bits modulo 2^64 (U64's past 2^63 too). */
static uint64_t ibits(double x) { return x >= 0x1p63 ? (uint64_t)x : (uint64_t)(int64_t)x; }

/* One element of a binary op computed in dtype ct (inputs already in ct). */
static double binop_apply(ref_binop op, double x, double y, loom_dtype ct) {
  if (ref_is_int(ct) && (op == REF_ADD || op == REF_SUB || op == REF_MUL)) {
    uint64_t a = ibits(x), b = ibits(y);
    return iwrap(op == REF_ADD ? a + b : op == REF_SUB ? a - b : a * b, ct);
  }
  switch (op) {
  case REF_ADD: return x + y;
  case REF_SUB: return x - y;
  case REF_MUL: return x * y;
  case REF_DIV: return x / y;
  case REF_POW:
    if (ct == LOOM_U64)
      return (double)(uint64_t)ref_int_pow((int64_t)ibits(x), (int64_t)ibits(y), ct);
    return ref_is_float(ct) ? pow(x, y) : (double)ref_int_pow((int64_t)x, (int64_t)y, ct);
  case REF_MAXIMUM: return (x != x || y != y) ? NAN : (x > y ? x : y);
  case REF_MINIMUM: return (x != x || y != y) ? NAN : (x < y ? x : y);
  case REF_LT: return x < y;
  case REF_LE: return x <= y;
  case REF_GT: return x > y;
  case REF_GE: return x >= y;
  case REF_EQ: return x == y;
  case REF_NE: return x != y;
  case REF_LOGICAL_AND: return (x != 0) && (y != 0);
  case REF_LOGICAL_OR: return (x != 0) || (y != 0);
  default: return NAN;
  }
}

static ref_t *binary_impl(ref_binop op, const ref_t *a, const ref_t *b, loom_dtype ct,
                          loom_dtype od) {
  loom_shape os;
  if (!a || !b || !ref_broadcast_shape(a->shape, b->shape, &os)) return NULL;
  bool logical = op == REF_LOGICAL_AND || op == REF_LOGICAL_OR;
  ref_t *r = ref_new(os, od);
  FOR_EACH_INDEX(os, oi, {
    double x = a->data[bcast_offset(os, oi, a->shape)];
    double y = b->data[bcast_offset(os, oi, b->shape)];
    if (!logical) x = ref_cvt(x, ct), y = ref_cvt(y, ct);
    r->data[ref_offset(os, oi)] = ref_cvt(binop_apply(op, x, y, ct), od);
  });
  return r;
}

/* torch.result_type of two tensors: a 0-d tensor decides the dtype only when
 * its category (bool < integer < float) is higher than the other's; so F64[]
 * with F32[7] is F32 (the random-graph fuzzer met it). */
static loom_dtype result_type(const ref_t *a, const ref_t *b) {
  bool a0 = a->shape.ndim == 0, b0 = b->shape.ndim == 0;
  if (a0 == b0) return ref_promote(a->dtype, b->dtype);
  const ref_t *dim = a0 ? b : a, *zero = a0 ? a : b;
  if (dtype_cat(zero->dtype) > dtype_cat(dim->dtype)) return ref_promote(dim->dtype, zero->dtype);
  return dim->dtype;
}

ref_t *ref_binary(ref_binop op, const ref_t *a, const ref_t *b) {
  if (!a || !b) return NULL;
  loom_dtype ct = result_type(a, b);
  loom_dtype od = ref_binop_dtype(op, ct, ct);
  if (op == REF_DIV) ct = od;
  return binary_impl(op, a, b, ct, od);
}

ref_t *ref_binary_s(ref_binop op, const ref_t *a, double s, bool reversed) {
  if (!a) return NULL;
  loom_dtype ct = ref_promote_scalar(a->dtype, s);
  loom_dtype od = ct;
  if (is_cmp(op) || op == REF_LOGICAL_AND || op == REF_LOGICAL_OR)
    od = LOOM_BOOL;
  else if (op == REF_DIV && !ref_is_float(ct))
    od = ct = LOOM_F32;
  /* an integer scalar wraps to ct (torch: u8 + 300 adds 44); pow's exponent
     is taken as it is */
  bool wraps = ref_is_int(ct) && op != REF_POW && s >= -0x1p63 && s < 0x1p63;
  double sc = wraps ? iwrap((uint64_t)(int64_t)s, ct) : ref_cvt(s, ct);
  ref_t *sv = ref_full(LOOM_SHAPE0, sc, ct);
  sv->data[0] = sc;
  ref_t *r = reversed ? binary_impl(op, sv, a, ct, od) : binary_impl(op, a, sv, ct, od);
  ref_free(sv);
  return r;
}

loom_dtype ref_unop_dtype(ref_unop op, loom_dtype a) {
  switch (op) {
  case REF_NEG: return a == LOOM_BOOL ? LOOM_NUM_DTYPES : a;
  case REF_ABS:
  case REF_RELU: return a;
  case REF_SQUARE: return a == LOOM_BOOL ? LOOM_I64 : a;
  case REF_LOGICAL_NOT: return LOOM_BOOL;
  default: return ref_is_float(a) ? a : LOOM_F32;
  }
}

static double unop_apply(ref_unop op, double x) {
  switch (op) {
  case REF_NEG: return -x;
  case REF_ABS: return fabs(x);
  case REF_EXP: return exp(x);
  case REF_LOG: return log(x);
  case REF_SQRT: return sqrt(x);
  case REF_RSQRT: return 1.0 / sqrt(x);
  case REF_SIN: return sin(x);
  case REF_COS: return cos(x);
  case REF_TANH: return tanh(x);
  case REF_SIGMOID: return 1.0 / (1.0 + exp(-x));
  case REF_RELU: return x != x ? x : (x > 0 ? x : 0);
  case REF_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
  case REF_SILU: return x / (1.0 + exp(-x));
  case REF_LOG1P: return log1p(x);
  case REF_EXPM1: return expm1(x);
  case REF_SQUARE: return x * x;
  case REF_RECIPROCAL: return 1.0 / x;
  case REF_LOGICAL_NOT: return x == 0;
  default: return NAN;
  }
}

ref_t *ref_unary(ref_unop op, const ref_t *a) {
  if (!a) return NULL;
  loom_dtype od = ref_unop_dtype(op, a->dtype);
  if (od == LOOM_NUM_DTYPES) return NULL;
  ref_t *r = ref_new(a->shape, od);
  for (int64_t i = 0; i < a->numel; i++) r->data[i] = ref_cvt(unop_apply(op, a->data[i]), od);
  return r;
}

#define BIN(name, op)                                                                              \
  ref_t *ref_##name(const ref_t *a, const ref_t *b) { return ref_binary(op, a, b); }
BIN(add, REF_ADD)
BIN(sub, REF_SUB)
BIN(mul, REF_MUL)
BIN(div, REF_DIV)
BIN(pow, REF_POW)
BIN(maximum, REF_MAXIMUM)
BIN(minimum, REF_MINIMUM) BIN(lt, REF_LT) BIN(le, REF_LE) BIN(gt, REF_GT) BIN(ge, REF_GE)
    BIN(eq, REF_EQ) BIN(ne, REF_NE) BIN(logical_and, REF_LOGICAL_AND)
        BIN(logical_or, REF_LOGICAL_OR)
#undef BIN
#define BINS(name, op)                                                                             \
  ref_t *ref_##name##_s(const ref_t *a, double s) { return ref_binary_s(op, a, s, false); }
            BINS(add, REF_ADD) BINS(sub, REF_SUB) BINS(mul, REF_MUL) BINS(div, REF_DIV)
                BINS(pow, REF_POW) BINS(maximum, REF_MAXIMUM) BINS(minimum, REF_MINIMUM)
                    BINS(lt, REF_LT) BINS(le, REF_LE) BINS(gt, REF_GT) BINS(ge, REF_GE)
                        BINS(eq, REF_EQ) BINS(ne, REF_NE)
#undef BINS
                            ref_t *ref_rsub_s(double s, const ref_t *a) {
  return ref_binary_s(REF_SUB, a, s, true);
}
ref_t *ref_rdiv_s(double s, const ref_t *a) { return ref_binary_s(REF_DIV, a, s, true); }
#define UN(name, op)                                                                               \
  ref_t *ref_##name(const ref_t *a) { return ref_unary(op, a); }
UN(neg, REF_NEG)
UN(abs, REF_ABS)
UN(exp, REF_EXP)
UN(log, REF_LOG)
UN(sqrt, REF_SQRT)
UN(rsqrt, REF_RSQRT)
UN(sin, REF_SIN) UN(cos, REF_COS) UN(tanh, REF_TANH) UN(sigmoid, REF_SIGMOID) UN(relu, REF_RELU)
    UN(gelu, REF_GELU) UN(silu, REF_SILU) UN(log1p, REF_LOG1P) UN(expm1, REF_EXPM1)
        UN(square, REF_SQUARE) UN(reciprocal, REF_RECIPROCAL) UN(logical_not, REF_LOGICAL_NOT)
#undef UN

            ref_t *ref_where(const ref_t *c, const ref_t *a, const ref_t *b) {
  loom_shape s1, os;
  if (!c || !a || !b || c->dtype != LOOM_BOOL) return NULL;
  if (!ref_broadcast_shape(c->shape, a->shape, &s1) || !ref_broadcast_shape(s1, b->shape, &os))
    return NULL;
  loom_dtype od = result_type(a, b);
  ref_t *r = ref_new(os, od);
  FOR_EACH_INDEX(os, oi, {
    double cv = c->data[bcast_offset(os, oi, c->shape)];
    double v =
        cv != 0 ? a->data[bcast_offset(os, oi, a->shape)] : b->data[bcast_offset(os, oi, b->shape)];
    r->data[ref_offset(os, oi)] = ref_cvt(v, od);
  });
  return r;
}

ref_t *ref_clamp(const ref_t *a, double lo, double hi) {
  if (!a || a->dtype == LOOM_BOOL) return NULL;
  loom_dtype od = ref_promote_scalar(ref_promote_scalar(a->dtype, lo), hi);
  ref_t *r = ref_new(a->shape, od);
  for (int64_t i = 0; i < a->numel; i++) {
    double x = a->data[i];
    if (x == x) x = lo != lo ? lo : x < lo ? lo : x; /* max(x, lo) */
    if (x == x) x = hi != hi ? hi : x > hi ? hi : x; /* min(x, hi) */
    r->data[i] = ref_cvt(x, od);
  }
  return r;
}

/* Float -> integer: truncated, saturated at the target's limits, NaN 0. */
static double saturated(double v, loom_dtype d) {
  if (v != v) return 0;
  double t = trunc(v);
  double lo = d == LOOM_I32 ? -0x1p31 : d == LOOM_I64 ? -0x1p63 : d == LOOM_I16 ? -32768 : 0;
  double hi = d == LOOM_I32   ? 0x1p31 - 1
              : d == LOOM_I64 ? 0x1p63
              : d == LOOM_I16 ? 32767
              : d == LOOM_U16 ? 65535
              : d == LOOM_U32 ? 0x1p32 - 1
              : d == LOOM_U64 ? 0x1p64 - 2048 /* the largest double below 2^64 */
                              : 255;
  if (d == LOOM_I64 && t >= hi) return (double)INT64_MAX;
  return t < lo ? lo : t > hi ? hi : t;
}

ref_t *ref_cast(const ref_t *a, loom_dtype d) {
  if (!a) return NULL;
  ref_t *r = ref_new(a->shape, d);
  bool from_float = a->dtype == LOOM_F32 || a->dtype == LOOM_F64;
  bool to_int = d == LOOM_I32 || d == LOOM_I64 || d == LOOM_U8 || d == LOOM_I16 || d == LOOM_U16 ||
                d == LOOM_U32 || d == LOOM_U64;
  for (int64_t i = 0; i < a->numel; i++)
    r->data[i] = from_float && to_int ? saturated(a->data[i], d) : ref_cvt(a->data[i], d);
  return r;
}

ref_t *ref_bitcast(const ref_t *a, loom_dtype d) {
  if (!a || ref_dtype_size(a->dtype) != ref_dtype_size(d) || !ref_dtype_size(d)) return NULL;
  size_t bytes = 0;
  void *buf = ref_pack(a, &bytes);
  ref_t *r = ref_unpack(buf, a->shape, d);
  free(buf);
  if (d == LOOM_BOOL) /* BOOL holds 0 or 1: a byte other than 0 is true */
    for (int64_t i = 0; i < r->numel; i++) r->data[i] = r->data[i] != 0;
  return r;
}

/* ================================================================ reductions */

/* Marks reduced axes; returns the output shape, or false on a bad axis. */
static bool reduce_setup(const ref_t *a, const int *axes, int naxes, bool keepdim,
                         bool red[LOOM_MAX_DIMS], loom_shape *os) {
  memset(red, 0, sizeof(bool) * LOOM_MAX_DIMS);
  if (naxes == 0)
    for (int i = 0; i < a->shape.ndim; i++) red[i] = true;
  for (int k = 0; k < naxes; k++) {
    int ax = axes[k];
    if (ax < 0) ax += a->shape.ndim;
    if (ax < 0 || ax >= a->shape.ndim || red[ax]) return false;
    red[ax] = true;
  }
  loom_shape s = {0, {0}};
  for (int i = 0; i < a->shape.ndim; i++) {
    if (!red[i])
      s.dim[s.ndim++] = a->shape.dim[i];
    else if (keepdim)
      s.dim[s.ndim++] = 1;
  }
  *os = s;
  return true;
}

static int64_t reduce_out_offset(const ref_t *a, const int64_t *ii, const bool *red, loom_shape os,
                                 bool keepdim) {
  int64_t off = 0;
  int j = 0;
  for (int i = 0; i < a->shape.ndim; i++) {
    if (red[i] && !keepdim) continue;
    off = off * os.dim[j] + (red[i] ? 0 : ii[i]);
    j++;
  }
  return off;
}

enum { RED_SUM, RED_MEAN, RED_MAX, RED_MIN };

static ref_t *reduce(int kind, const ref_t *a, const int *axes, int naxes, bool keepdim) {
  bool red[LOOM_MAX_DIMS];
  loom_shape os;
  if (!a || !reduce_setup(a, axes, naxes, keepdim, red, &os)) return NULL;
  int64_t count = 1;
  for (int i = 0; i < a->shape.ndim; i++)
    if (red[i]) count *= a->shape.dim[i];
  loom_dtype od = a->dtype;
  if (kind == RED_SUM && !ref_is_float(a->dtype)) od = a->dtype == LOOM_U64 ? LOOM_U64 : LOOM_I64;
  if (kind == RED_MEAN && !ref_is_float(a->dtype)) return NULL;
  if ((kind == RED_MAX || kind == RED_MIN) && count == 0 && ref_shape_numel(os) > 0) return NULL;
  ref_t *r = ref_new(os, od);
  int64_t on = r->numel;
  bool *seen = calloc((size_t)(on ? on : 1), 1);
  FOR_EACH_INDEX(a->shape, ii, {
    int64_t o = reduce_out_offset(a, ii, red, os, keepdim);
    double x = a->data[ref_offset(a->shape, ii)];
    if (kind == RED_SUM || kind == RED_MEAN)
      r->data[o] += x;
    else if (!seen[o])
      r->data[o] = x;
    else if (r->data[o] != r->data[o]) { /* NaN sticks */
    } else if (x != x)
      r->data[o] = x;
    else if (kind == RED_MAX ? x > r->data[o] : x < r->data[o])
      r->data[o] = x;
    seen[o] = true;
  });
  for (int64_t o = 0; o < on; o++) {
    if (kind == RED_MEAN) r->data[o] = count ? r->data[o] / (double)count : NAN;
    r->data[o] = ref_cvt(r->data[o], od);
  }
  free(seen);
  return r;
}

ref_t *ref_sum(const ref_t *a, const int *axes, int naxes, bool keepdim) {
  return reduce(RED_SUM, a, axes, naxes, keepdim);
}
ref_t *ref_mean(const ref_t *a, const int *axes, int naxes, bool keepdim) {
  return reduce(RED_MEAN, a, axes, naxes, keepdim);
}
ref_t *ref_max(const ref_t *a, const int *axes, int naxes, bool keepdim) {
  return reduce(RED_MAX, a, axes, naxes, keepdim);
}
ref_t *ref_min(const ref_t *a, const int *axes, int naxes, bool keepdim) {
  return reduce(RED_MIN, a, axes, naxes, keepdim);
}
ref_t *ref_sum_all(const ref_t *a) { return reduce(RED_SUM, a, NULL, 0, false); }
ref_t *ref_mean_all(const ref_t *a) { return reduce(RED_MEAN, a, NULL, 0, false); }

/* Calls fn(row offsets) for every 1-D line along `axis`. Returns false on a bad axis. */
static int norm_axis(int axis, int ndim) {
  if (axis < 0) axis += ndim;
  return (axis < 0 || axis >= ndim) ? -1 : axis;
}

static ref_t *arg_reduce(const ref_t *a, int axis, bool keepdim, bool is_max) {
  if (!a) return NULL;
  int ax = norm_axis(axis, a->shape.ndim);
  if (ax < 0) return NULL;
  bool red[LOOM_MAX_DIMS];
  loom_shape os;
  if (!reduce_setup(a, &ax, 1, keepdim, red, &os)) return NULL;
  int64_t n = a->shape.dim[ax];
  if (n == 0 && ref_shape_numel(os) > 0) return NULL;
  ref_t *r = ref_new(os, LOOM_I64);
  double *best = calloc((size_t)(r->numel ? r->numel : 1), sizeof(double));
  FOR_EACH_INDEX(a->shape, ii, {
    int64_t o = reduce_out_offset(a, ii, red, os, keepdim);
    double x = a->data[ref_offset(a->shape, ii)];
    bool take;
    if (ii[ax] == 0)
      take = true;
    else if (best[o] != best[o])
      take = false;
    else if (x != x)
      take = true;
    else
      take = is_max ? x > best[o] : x < best[o];
    if (take) best[o] = x, r->data[o] = (double)ii[ax];
  });
  free(best);
  return r;
}

ref_t *ref_argmax(const ref_t *a, int axis, bool keepdim) {
  return arg_reduce(a, axis, keepdim, true);
}
ref_t *ref_argmin(const ref_t *a, int axis, bool keepdim) {
  return arg_reduce(a, axis, keepdim, false);
}

enum { SM_SOFTMAX, SM_LOG_SOFTMAX, SM_LOGSUMEXP };

static ref_t *softmax_like(int kind, const ref_t *a, int axis) {
  if (!a) return NULL;
  int ax = norm_axis(axis, a->shape.ndim);
  if (ax < 0) return NULL;
  loom_dtype od = ref_is_float(a->dtype) ? a->dtype : LOOM_F32;
  loom_shape ls = a->shape;
  ls.dim[ax] = 1; /* one line per index of ls */
  loom_shape os = a->shape;
  if (kind == SM_LOGSUMEXP) {
    os.ndim = 0;
    for (int i = 0; i < a->shape.ndim; i++)
      if (i != ax) os.dim[os.ndim++] = a->shape.dim[i];
  }
  ref_t *r = ref_new(os, od);
  int64_t n = a->shape.dim[ax], stride = 1;
  for (int i = ax + 1; i < a->shape.ndim; i++) stride *= a->shape.dim[i];
  int64_t lo = 0;
  FOR_EACH_INDEX(ls, li, {
    int64_t base = ref_offset(a->shape, li);
    double m = -INFINITY, s = 0;
    for (int64_t k = 0; k < n; k++) {
      double x = ref_cvt(a->data[base + k * stride], od);
      if (x > m || x != x) m = x;
    }
    double mm = isinf(m) ? 0 : m;
    for (int64_t k = 0; k < n; k++) s += exp(ref_cvt(a->data[base + k * stride], od) - mm);
    if (kind == SM_LOGSUMEXP) {
      r->data[lo++] = ref_cvt(mm + log(s), od);
    } else {
      for (int64_t k = 0; k < n; k++) {
        double x = ref_cvt(a->data[base + k * stride], od);
        double v = kind == SM_SOFTMAX ? exp(x - mm) / s : x - mm - log(s);
        r->data[base + k * stride] = ref_cvt(v, od);
      }
    }
  });
  return r;
}

ref_t *ref_softmax(const ref_t *a, int axis) { return softmax_like(SM_SOFTMAX, a, axis); }
ref_t *ref_log_softmax(const ref_t *a, int axis) { return softmax_like(SM_LOG_SOFTMAX, a, axis); }
ref_t *ref_logsumexp(const ref_t *a, int axis) { return softmax_like(SM_LOGSUMEXP, a, axis); }

/* ================================================================ shape */

ref_t *ref_reshape(const ref_t *a, loom_shape s) {
  if (!a || s.ndim < 0 || s.ndim > LOOM_MAX_DIMS) return NULL;
  int neg = -1;
  int64_t known = 1;
  for (int i = 0; i < s.ndim; i++) {
    if (s.dim[i] == -1) {
      if (neg >= 0) return NULL;
      neg = i;
    } else if (s.dim[i] < 0)
      return NULL;
    else
      known *= s.dim[i];
  }
  if (neg >= 0) {
    if (known == 0 || a->numel % known) return NULL;
    s.dim[neg] = a->numel / known;
  }
  if (ref_shape_numel(s) != a->numel) return NULL;
  ref_t *r = ref_clone(a);
  r->shape = s;
  return r;
}

ref_t *ref_contiguous(const ref_t *a) { return ref_clone(a); }

ref_t *ref_permute(const ref_t *a, const int *perm, int n) {
  if (!a || n != a->shape.ndim) return NULL;
  int p[LOOM_MAX_DIMS];
  bool used[LOOM_MAX_DIMS] = {0};
  loom_shape os = {n, {0}};
  for (int i = 0; i < n; i++) {
    p[i] = norm_axis(perm[i], n);
    if (p[i] < 0 || used[p[i]]) return NULL;
    used[p[i]] = true;
    os.dim[i] = a->shape.dim[p[i]];
  }
  ref_t *r = ref_new(os, a->dtype);
  FOR_EACH_INDEX(os, oi, {
    int64_t ii[LOOM_MAX_DIMS];
    for (int i = 0; i < n; i++) ii[p[i]] = oi[i];
    r->data[ref_offset(os, oi)] = a->data[ref_offset(a->shape, ii)];
  });
  return r;
}

ref_t *ref_transpose(const ref_t *a, int d0, int d1) {
  if (!a) return NULL;
  int n = a->shape.ndim;
  int x = norm_axis(d0, n), y = norm_axis(d1, n);
  if (n == 0 && (d0 == 0 || d0 == -1) && (d1 == 0 || d1 == -1)) return ref_clone(a);
  if (x < 0 || y < 0) return NULL;
  int p[LOOM_MAX_DIMS];
  for (int i = 0; i < n; i++) p[i] = i;
  p[x] = y, p[y] = x;
  return ref_permute(a, p, n);
}

ref_t *ref_expand(const ref_t *a, loom_shape s) {
  if (!a || s.ndim < a->shape.ndim) return NULL;
  int shift = s.ndim - a->shape.ndim;
  for (int i = 0; i < s.ndim; i++) {
    int ai = i - shift;
    if (s.dim[i] == -1) {
      if (ai < 0) return NULL;
      s.dim[i] = a->shape.dim[ai];
    } else if (s.dim[i] < 0)
      return NULL;
    else if (ai >= 0 && a->shape.dim[ai] != 1 && a->shape.dim[ai] != s.dim[i])
      return NULL;
  }
  ref_t *r = ref_new(s, a->dtype);
  FOR_EACH_INDEX(s, oi, { r->data[ref_offset(s, oi)] = a->data[bcast_offset(s, oi, a->shape)]; });
  return r;
}

ref_t *ref_squeeze(const ref_t *a, int axis) {
  if (!a) return NULL;
  int n = a->shape.ndim;
  if (n == 0) return (axis == 0 || axis == -1) ? ref_clone(a) : NULL;
  int ax = norm_axis(axis, n);
  if (ax < 0) return NULL;
  ref_t *r = ref_clone(a);
  if (a->shape.dim[ax] != 1) return r;
  for (int i = ax; i < n - 1; i++) r->shape.dim[i] = r->shape.dim[i + 1];
  r->shape.dim[n - 1] = 0;
  r->shape.ndim = n - 1;
  return r;
}

ref_t *ref_unsqueeze(const ref_t *a, int axis) {
  if (!a) return NULL;
  int n = a->shape.ndim;
  if (axis < 0) axis += n + 1;
  if (axis < 0 || axis > n || n >= LOOM_MAX_DIMS) return NULL;
  ref_t *r = ref_clone(a);
  for (int i = n; i > axis; i--) r->shape.dim[i] = r->shape.dim[i - 1];
  r->shape.dim[axis] = 1;
  r->shape.ndim = n + 1;
  return r;
}

ref_t *ref_flatten(const ref_t *a, int start, int end) {
  if (!a) return NULL;
  int n = a->shape.ndim;
  if (n == 0) {
    if ((start == 0 || start == -1) && (end == 0 || end == -1))
      return ref_reshape(a, LOOM_SHAPE(1));
    return NULL;
  }
  int s = norm_axis(start, n), e = norm_axis(end, n);
  if (s < 0 || e < 0 || s > e) return NULL;
  loom_shape os = {0, {0}};
  for (int i = 0; i < s; i++) os.dim[os.ndim++] = a->shape.dim[i];
  int64_t m = 1;
  for (int i = s; i <= e; i++) m *= a->shape.dim[i];
  os.dim[os.ndim++] = m;
  for (int i = e + 1; i < n; i++) os.dim[os.ndim++] = a->shape.dim[i];
  return ref_reshape(a, os);
}

ref_t *ref_slice(const ref_t *a, int axis, int64_t start, int64_t end, int64_t step) {
  if (!a || step <= 0) return NULL;
  int ax = norm_axis(axis, a->shape.ndim);
  if (ax < 0) return NULL;
  int64_t n = a->shape.dim[ax];
  if (start < 0) start += n;
  if (end < 0) end += n;
  if (start < 0) start = 0;
  if (start > n) start = n;
  if (end < 0) end = 0;
  if (end > n) end = n;
  int64_t len = end > start ? (end - start + step - 1) / step : 0;
  loom_shape os = a->shape;
  os.dim[ax] = len;
  ref_t *r = ref_new(os, a->dtype);
  FOR_EACH_INDEX(os, oi, {
    int64_t ii[LOOM_MAX_DIMS];
    memcpy(ii, oi, sizeof ii);
    ii[ax] = start + oi[ax] * step;
    r->data[ref_offset(os, oi)] = a->data[ref_offset(a->shape, ii)];
  });
  return r;
}

ref_t *ref_pad(const ref_t *a, const int64_t *pads, int npads, double value) {
  if (!a || npads % 2 || npads / 2 > a->shape.ndim) return NULL;
  int n = a->shape.ndim;
  int64_t before[LOOM_MAX_DIMS] = {0};
  loom_shape os = a->shape;
  for (int k = 0; k < npads / 2; k++) {
    int ax = n - 1 - k;
    before[ax] = pads[2 * k];
    os.dim[ax] = a->shape.dim[ax] + pads[2 * k] + pads[2 * k + 1];
    if (os.dim[ax] < 0) return NULL;
  }
  ref_t *r = ref_new(os, a->dtype);
  double pv = ref_cvt(value, a->dtype);
  FOR_EACH_INDEX(os, oi, {
    int64_t ii[LOOM_MAX_DIMS];
    bool in = true;
    for (int i = 0; i < n; i++) {
      ii[i] = oi[i] - before[i];
      if (ii[i] < 0 || ii[i] >= a->shape.dim[i]) in = false;
    }
    r->data[ref_offset(os, oi)] = in ? a->data[ref_offset(a->shape, ii)] : pv;
  });
  return r;
}

ref_t *ref_cat(const ref_t *const *ts, int n, int axis) {
  if (!ts || n <= 0 || !ts[0]) return NULL;
  int nd = ts[0]->shape.ndim;
  int ax = norm_axis(axis, nd);
  if (ax < 0) return NULL;
  loom_shape os = ts[0]->shape;
  loom_dtype od = ts[0]->dtype;
  os.dim[ax] = 0;
  for (int k = 0; k < n; k++) {
    if (!ts[k] || ts[k]->shape.ndim != nd) return NULL;
    for (int i = 0; i < nd; i++)
      if (i != ax && ts[k]->shape.dim[i] != ts[0]->shape.dim[i]) return NULL;
    os.dim[ax] += ts[k]->shape.dim[ax];
    od = ref_promote(od, ts[k]->dtype);
  }
  ref_t *r = ref_new(os, od);
  FOR_EACH_INDEX(os, oi, {
    int64_t ii[LOOM_MAX_DIMS];
    memcpy(ii, oi, sizeof ii);
    int k = 0;
    while (ii[ax] >= ts[k]->shape.dim[ax]) ii[ax] -= ts[k]->shape.dim[ax], k++;
    r->data[ref_offset(os, oi)] = ref_cvt(ts[k]->data[ref_offset(ts[k]->shape, ii)], od);
  });
  return r;
}

ref_t *ref_stack(const ref_t *const *ts, int n, int axis) {
  if (!ts || n <= 0 || !ts[0]) return NULL;
  int nd = ts[0]->shape.ndim;
  if (axis < 0) axis += nd + 1;
  if (axis < 0 || axis > nd) return NULL;
  ref_t **us = calloc((size_t)n, sizeof *us);
  bool ok = true;
  for (int k = 0; k < n; k++) {
    if (!ts[k] || !ref_shape_eq(ts[k]->shape, ts[0]->shape))
      ok = false;
    else
      us[k] = ref_unsqueeze(ts[k], axis);
  }
  ref_t *r = ok ? ref_cat((const ref_t *const *)us, n, axis) : NULL;
  for (int k = 0; k < n; k++) ref_free(us[k]);
  free(us);
  return r;
}

/* ================================================================ matmul */

ref_t *ref_matmul(const ref_t *a, const ref_t *b) {
  if (!a || !b || a->dtype != b->dtype || a->dtype == LOOM_BOOL) return NULL;
  if (a->shape.ndim == 0 || b->shape.ndim == 0) return NULL;
  loom_shape as = a->shape, bs = b->shape;
  bool a1 = as.ndim == 1, b1 = bs.ndim == 1;
  if (a1) as = (loom_shape){2, {1, as.dim[0]}};
  if (b1) bs = (loom_shape){2, {bs.dim[0], 1}};
  int64_t M = as.dim[as.ndim - 2], K = as.dim[as.ndim - 1];
  int64_t K2 = bs.dim[bs.ndim - 2], N = bs.dim[bs.ndim - 1];
  if (K != K2) return NULL;
  loom_shape ab = as, bb = bs, batch;
  ab.ndim -= 2, bb.ndim -= 2;
  if (!ref_broadcast_shape(ab, bb, &batch)) return NULL;
  loom_shape os = batch;
  if (!a1) os.dim[os.ndim++] = M;
  if (!b1) os.dim[os.ndim++] = N;
  ref_t *r = ref_new(os, a->dtype);
  int64_t bn = ref_shape_numel(batch);
  int64_t o = 0;
  for (int64_t bi = 0; bi < bn; bi++) {
    int64_t idx[LOOM_MAX_DIMS] = {0}, rem = bi;
    for (int i = batch.ndim - 1; i >= 0; i--) idx[i] = rem % batch.dim[i], rem /= batch.dim[i];
    int64_t aoff = bcast_offset(batch, idx, ab) * M * K;
    int64_t boff = bcast_offset(batch, idx, bb) * K * N;
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++) s += a->data[aoff + m * K + k] * b->data[boff + k * N + n];
        r->data[o++] = ref_cvt(s, a->dtype);
      }
  }
  return r;
}
