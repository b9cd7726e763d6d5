/* The IR verifier: is a node exactly what its op makes of its sources?
 *
 * The frontend records nothing else, so for its nodes this is a consistency
 * check. For nodes read from a file (io/program_text.c) it is what makes
 * compiling them safe: planning and lowering index buffers by the shapes and
 * arguments accepted here and check none of them again.
 *
 * The rules are the frontend's. Broadcasting and promotion are explicit in the
 * IR, so every elementwise source has the node's shape and, except for
 * comparisons, logic, WHERE's condition and CAST, its dtype. Each op accepts
 * the dtypes the frontend gives it (float math only on floats, no arithmetic
 * on bools: the frontend turns bool add/mul into or/and). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

/* The largest tensor, in bytes (the frontend's lm_check_shape limit). */
#define MAX_BYTES ((int64_t)1 << 56)

typedef struct verdict {
  const lm_node *n;
  char *why;
  size_t len;
} verdict;

const char *lm_type_str(loom_dtype dtype, const loom_shape *s, char *buf, size_t len) {
  char shape[200];
  if (s->ndim < 0 || s->ndim > LOOM_MAX_DIMS)
    snprintf(buf, len, "%s[%d dims]", loom_dtype_name(dtype), s->ndim);
  else
    snprintf(buf, len, "%s%s", loom_dtype_name(dtype), lm_shape_str(s, shape, sizeof shape));
  return buf;
}

/* Writes "<op> <type>: <problem>" into the caller's buffer; always false. */
static bool refuse(const verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool refuse(const verdict *v, const char *fmt, ...) {
  if (!v->why || v->len == 0) return false;
  char type[256];
  int used = snprintf(v->why, v->len, "%s %s: ", lm_op_name(v->n->op),
                      lm_type_str(v->n->dtype, &v->n->shape, type, sizeof type));
  if (used < 0 || (size_t)used >= v->len) return false;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->why + used, v->len - (size_t)used, fmt, ap);
  va_end(ap);
  return false;
}

/* Lowering turns an integer constant into an int64 with a C cast, which is
 * defined only for values in int64's range (not NaN, not infinite). */
static bool fits_int64(loom_dtype d, double v) {
  return lm_dtype_is_float(d) || d == LOOM_BOOL || (v >= -0x1p63 && v < 0x1p63);
}

static const char *type_of(const lm_node *n, char *buf, size_t len) {
  return lm_type_str(n->dtype, &n->shape, buf, len);
}

static const char *shape_str(const loom_shape *s, char *buf, size_t len) {
  return lm_shape_str(s, buf, len);
}

/* ------------------------------------------------------------ shapes and sources */

static bool check_shape(const verdict *v) {
  const loom_shape *s = &v->n->shape;
  if (s->ndim < 0 || s->ndim > LOOM_MAX_DIMS)
    return refuse(v, "%d dims (loom supports 0 to %d)", s->ndim, LOOM_MAX_DIMS);
  for (int d = 0; d < s->ndim; d++)
    if (s->dim[d] < 0) return refuse(v, "dim %d is negative (%lld)", d, (long long)s->dim[d]);
  int64_t numel = lm_shape_numel(s), bytes;
  if (numel < 0 || __builtin_mul_overflow(numel, (int64_t)loom_dtype_size(v->n->dtype), &bytes) ||
      bytes > MAX_BYTES)
    return refuse(v, "too large (more than 2^56 bytes)");
  return true;
}

static bool check_sources(const verdict *v) {
  const lm_node *n = v->n;
  int want = lm_op_table[n->op].arity; /* -1: CAT, ALL_REDUCE: 1 to LM_CAT_MAX_SOURCES */
  char t[256];
  if (want >= 0 && n->nsrc != want)
    return refuse(v, "%d sources, %s takes %d", n->nsrc, lm_op_name(n->op), want);
  if (want < 0 && (n->nsrc < 1 || n->nsrc > LM_CAT_MAX_SOURCES))
    return refuse(v, "%d sources, %s takes 1 to %d", n->nsrc, lm_op_name(n->op),
                  LM_CAT_MAX_SOURCES);
  if (n->nsrc > 0 && !n->src) return refuse(v, "no source list");
  for (int s = 0; s < n->nsrc; s++) {
    const lm_node *x = n->src[s];
    if (!x) return refuse(v, "source %d is NULL", s);
    if (x->shape.ndim < 0 || x->shape.ndim > LOOM_MAX_DIMS || !lm_dtype_valid(x->dtype))
      return refuse(v, "source %d is %s, not a valid type", s, type_of(x, t, sizeof t));
    if (x->device.type != n->device.type || x->device.index != n->device.index)
      return refuse(v, "source %d is on device %d:%d, the node on %d:%d", s, (int)x->device.type,
                    x->device.index, (int)n->device.type, n->device.index);
  }
  return true;
}

static bool source_dtype_is(const verdict *v, int s, loom_dtype want, const char *rule) {
  loom_dtype got = v->n->src[s]->dtype;
  if (got == want) return true;
  return refuse(v, "source %d is %s, it must be %s (%s)", s, loom_dtype_name(got),
                loom_dtype_name(want), rule);
}

static bool shape_is(const verdict *v, const loom_shape *want, const char *rule) {
  if (lm_shape_eq(&v->n->shape, want)) return true;
  char a[200];
  return refuse(v, "the shape must be %s (%s)", shape_str(want, a, sizeof a), rule);
}

/* Views, reductions and gathers keep their (first) source's dtype. */
static bool keeps_dtype(const verdict *v) {
  return source_dtype_is(v, 0, v->n->dtype, "the node's dtype");
}

/* ------------------------------------------------------------ elementwise */

static bool check_unary(const verdict *v) {
  const lm_node *n = v->n;
  lm_op op = n->op;
  if (op == LM_CAST) return true;
  if (op == LM_BITCAST) {
    loom_dtype from = n->src[0]->dtype;
    if (loom_dtype_size(from) == loom_dtype_size(n->dtype)) return true;
    return refuse(v, "bitcast of %s (%zu bytes) to %s (%zu bytes): the sizes must be equal",
                  loom_dtype_name(from), loom_dtype_size(from), loom_dtype_name(n->dtype),
                  loom_dtype_size(n->dtype));
  }
  if (op == LM_NOT)
    return n->dtype == LOOM_BOOL ? source_dtype_is(v, 0, LOOM_BOOL, "not takes bools")
                                 : refuse(v, "not gives bool");
  if (op == LM_CLAMP) {
    if (!lm_dtype_is_numeric(n->dtype)) return refuse(v, "clamp does not take bool");
    double bound[2] = {n->arg.clamp.lo, n->arg.clamp.hi};
    for (int i = 0; i < 2; i++) /* lowering makes finite bounds constants of the dtype */
      if (!isinf(bound[i]) && !lm_dtype_holds(n->dtype, bound[i]))
        return refuse(v, "clamp's bound %g is not a value of %s", bound[i],
                      loom_dtype_name(n->dtype));
  }
  if (lm_op_table[op].float_only && !lm_dtype_is_float(n->dtype))
    return refuse(v, "%s computes in f32 or f64 (the frontend casts other dtypes)", lm_op_name(op));
  if ((op == LM_NEG || op == LM_SQUARE) && !lm_dtype_is_numeric(n->dtype))
    return refuse(v, "%s does not take bool", lm_op_name(op));
  return source_dtype_is(v, 0, n->dtype, "the node's dtype");
}

static bool check_binary(const verdict *v) {
  const lm_node *n = v->n;
  switch (n->op) {
  case LM_LT:
  case LM_LE:
  case LM_EQ:
  case LM_NE:
    if (n->dtype != LOOM_BOOL) return refuse(v, "a comparison gives bool");
    return source_dtype_is(v, 1, n->src[0]->dtype, "a comparison's sources share a dtype");
  case LM_AND:
  case LM_OR:
    if (n->dtype != LOOM_BOOL) return refuse(v, "logic gives bool");
    return source_dtype_is(v, 0, LOOM_BOOL, "logic takes bools") &&
           source_dtype_is(v, 1, LOOM_BOOL, "logic takes bools");
  default:
    if (lm_op_table[n->op].float_only && !lm_dtype_is_float(n->dtype)) /* DIV */
      return refuse(v, "%s computes in f32 or f64 (the frontend casts integers)",
                    lm_op_name(n->op));
    /* ADD SUB MUL POW MAX MIN: the frontend makes bool add/max an or, mul/min an and,
       and takes bool powers in f64 */
    if (!lm_dtype_is_numeric(n->dtype)) return refuse(v, "arithmetic does not take bool");
    break;
  }
  return source_dtype_is(v, 0, n->dtype, "the node's dtype") &&
         source_dtype_is(v, 1, n->dtype, "the node's dtype");
}

static bool check_elementwise(const verdict *v) {
  const lm_node *n = v->n;
  char t[256];
  for (int s = 0; s < n->nsrc; s++)
    if (!lm_shape_eq(&n->src[s]->shape, &n->shape))
      return refuse(v, "source %d is %s; an elementwise op's sources have the node's shape", s,
                    type_of(n->src[s], t, sizeof t));
  if (n->op == LM_WHERE)
    return source_dtype_is(v, 0, LOOM_BOOL, "where's condition") &&
           source_dtype_is(v, 1, n->dtype, "the node's dtype") &&
           source_dtype_is(v, 2, n->dtype, "the node's dtype");
  return n->nsrc == 1 ? check_unary(v) : check_binary(v);
}

/* ------------------------------------------------------------ reductions */

static bool check_reduce_dtype(const verdict *v) {
  const lm_node *n = v->n, *x = n->src[0];
  switch (n->op) {
  case LM_RSUM:
    if (x->dtype == LOOM_BOOL) return refuse(v, "sum does not take bool (the frontend casts it)");
    return keeps_dtype(v);
  case LM_RLSE:
    if (!lm_dtype_is_float(x->dtype)) return refuse(v, "logsumexp takes f32 or f64");
    if (n->dtype == x->dtype || (x->dtype == LOOM_F32 && n->dtype == LOOM_F64)) return true;
    return refuse(v, "logsumexp of %s gives %s%s", loom_dtype_name(x->dtype),
                  loom_dtype_name(x->dtype), x->dtype == LOOM_F32 ? " or f64" : "");
  case LM_ARGMAX:
  case LM_ARGMIN:
    if (n->dtype != LOOM_I64) return refuse(v, "%s gives i64", lm_op_name(n->op));
    return true;
  default: return keeps_dtype(v); /* max, min */
  }
}

static bool check_reduce(const verdict *v) {
  const lm_node *n = v->n, *x = n->src[0];
  int nd = x->shape.ndim;
  uint32_t axes = n->arg.axes, all = (1u << nd) - 1;
  char a[200];
  if (nd < 1) return refuse(v, "the source is 0-d; a reduction's source has at least 1 dim");
  if (axes == 0 || (axes & ~all))
    return refuse(v, "axes mask 0x%x does not name 1 or more of the source's %d dims",
                  (unsigned)axes, nd);
  if ((n->op == LM_ARGMAX || n->op == LM_ARGMIN) && (axes & (axes - 1)))
    return refuse(v, "%s reduces one axis, the mask 0x%x names several", lm_op_name(n->op),
                  (unsigned)axes);
  loom_shape want = x->shape;
  bool empty = false;
  for (int d = 0; d < nd; d++)
    if (axes & (1u << d)) empty |= want.dim[d] == 0, want.dim[d] = 1;
  if (!shape_is(v, &want, "the source's shape with the reduced dims 1")) return false;
  bool needs_values =
      n->op == LM_RMAX || n->op == LM_RMIN || n->op == LM_ARGMAX || n->op == LM_ARGMIN;
  if (needs_values && empty)
    return refuse(v, "%s over an empty axis of %s", lm_op_name(n->op),
                  shape_str(&x->shape, a, sizeof a));
  return check_reduce_dtype(v);
}

/* ------------------------------------------------------------ views */

static bool check_reshape(const verdict *v) {
  const lm_node *n = v->n, *x = n->src[0];
  char a[200];
  if (lm_shape_numel(&x->shape) != lm_shape_numel(&n->shape))
    return refuse(v, "a reshape keeps the element count; the source is %s (%lld elements)",
                  shape_str(&x->shape, a, sizeof a), (long long)lm_shape_numel(&x->shape));
  return keeps_dtype(v);
}

static bool same_ndim(const verdict *v, const lm_node *x) {
  if (x->shape.ndim == v->n->shape.ndim) return true;
  char a[200];
  return refuse(v, "the source %s has %d dims, %s keeps them", shape_str(&x->shape, a, sizeof a),
                x->shape.ndim, lm_op_name(v->n->op));
}

static bool check_permute(const verdict *v) {
  const lm_node *n = v->n, *x = n->src[0];
  int nd = n->shape.ndim;
  if (!same_ndim(v, x)) return false;
  uint32_t seen = 0;
  loom_shape want = {nd, {0}};
  for (int d = 0; d < nd; d++) {
    int p = n->arg.perm[d];
    if (p < 0 || p >= nd || (seen & (1u << p)))
      return refuse(v,
                    "perm[%d] = %d is out of range or repeated: perm must be a permutation of "
                    "0..%d",
                    d, p, nd - 1);
    seen |= 1u << p;
    want.dim[d] = x->shape.dim[p];
  }
  return shape_is(v, &want, "dim d of the source's dim perm[d]") && keeps_dtype(v);
}

static bool check_expand(const verdict *v) {
  const lm_node *n = v->n, *x = n->src[0];
  char a[200];
  if (!same_ndim(v, x)) return false;
  for (int d = 0; d < n->shape.ndim; d++)
    if (x->shape.dim[d] != n->shape.dim[d] && x->shape.dim[d] != 1)
      return refuse(v, "dim %d of the source %s is %lld: only size-1 dims expand", d,
                    shape_str(&x->shape, a, sizeof a), (long long)x->shape.dim[d]);
  return keeps_dtype(v);
}

/* Every index start + i * step (0 <= i < count) lies in [0, len). */
static bool slice_in_range(int64_t start, int64_t step, int64_t count, int64_t len) {
  if (count == 0) return start >= 0 && start <= len;
  int64_t span, last;
  if (start < 0 || start >= len) return false;
  if (__builtin_mul_overflow(count - 1, step, &span) || __builtin_add_overflow(start, span, &last))
    return false;
  return last >= 0 && last < len;
}

static bool check_slice(const verdict *v) {
  const lm_node *n = v->n, *x = n->src[0];
  char a[200];
  if (!same_ndim(v, x)) return false;
  for (int d = 0; d < n->shape.ndim; d++) {
    int64_t start = n->arg.slice.start[d], step = n->arg.slice.step[d];
    if (step == 0) return refuse(v, "step[%d] is 0", d);
    if (!slice_in_range(start, step, n->shape.dim[d], x->shape.dim[d]))
      return refuse(v,
                    "dim %d: %lld indices from %lld by %lld do not all lie in [0, %lld) of the "
                    "source %s",
                    d, (long long)n->shape.dim[d], (long long)start, (long long)step,
                    (long long)x->shape.dim[d], shape_str(&x->shape, a, sizeof a));
  }
  return keeps_dtype(v);
}

static bool check_pad(const verdict *v) {
  const lm_node *n = v->n, *x = n->src[0];
  char a[200];
  if (!same_ndim(v, x)) return false;
  for (int d = 0; d < n->shape.ndim; d++) {
    int64_t lo = n->arg.pad.lo[d], low_end;
    if (lo < 0) return refuse(v, "lo[%d] is negative (%lld)", d, (long long)lo);
    if (__builtin_add_overflow(x->shape.dim[d], lo, &low_end) || n->shape.dim[d] < low_end)
      return refuse(v, "dim %d is %lld, less than the source's %lld plus lo %lld (of %s)", d,
                    (long long)n->shape.dim[d], (long long)x->shape.dim[d], (long long)lo,
                    shape_str(&x->shape, a, sizeof a));
  }
  if (!fits_int64(n->dtype, n->arg.pad.value))
    return refuse(v, "the pad value %g is outside the int64 range an integer pad needs",
                  n->arg.pad.value);
  return keeps_dtype(v);
}

static bool check_cat(const verdict *v) {
  const lm_node *n = v->n;
  int nd = n->shape.ndim, ax = n->arg.axis;
  char t[256];
  if (nd < 1) return refuse(v, "cat joins tensors of 1 or more dims");
  if (ax < 0 || ax >= nd) return refuse(v, "axis %d is outside [0, %d)", ax, nd);
  int64_t total = 0;
  for (int s = 0; s < n->nsrc; s++) {
    const lm_node *x = n->src[s];
    bool fits = x->shape.ndim == nd;
    for (int d = 0; d < nd && fits; d++) fits = d == ax || x->shape.dim[d] == n->shape.dim[d];
    if (!fits)
      return refuse(v, "source %d is %s, which does not match the node outside axis %d", s,
                    type_of(x, t, sizeof t), ax);
    if (x->shape.dim[ax] < 1)
      return refuse(v, "source %d is %s, empty along axis %d (the frontend leaves it out)", s,
                    type_of(x, t, sizeof t), ax);
    if (!source_dtype_is(v, s, n->dtype, "the node's dtype")) return false;
    if (__builtin_add_overflow(total, x->shape.dim[ax], &total))
      return refuse(v, "the sources' extents along axis %d overflow", ax);
  }
  if (total != n->shape.dim[ax])
    return refuse(v, "dim %d is %lld, the sources' extents along it add up to %lld", ax,
                  (long long)n->shape.dim[ax], (long long)total);
  return true;
}

/* [.., H, W] -> [.., OH, OW, KH, KW], as frontend/nn.c's windows() makes it. */
static bool check_window(const verdict *v) {
  const lm_node *n = v->n, *x = n->src[0];
  int nd = x->shape.ndim;
  char a[200];
  if (nd < 2 || n->shape.ndim != nd + 2)
    return refuse(v, "the source %s needs 2 or more dims and the node 2 more than it",
                  shape_str(&x->shape, a, sizeof a));
  loom_shape want = x->shape;
  want.ndim = nd + 2;
  for (int i = 0; i < 2; i++) {
    int64_t k = n->arg.window.kernel[i], s = n->arg.window.stride[i];
    int64_t dil = n->arg.window.dilation[i], len = x->shape.dim[nd - 2 + i], span;
    if (k < 0 || s < 1 || dil < 1)
      return refuse(v,
                    "kernel %lld, stride %lld, dilation %lld (dim %d): need kernel >= 0, "
                    "stride >= 1, dilation >= 1",
                    (long long)k, (long long)s, (long long)dil, i);
    if (__builtin_mul_overflow(dil, k - 1, &span) || span >= len)
      return refuse(v, "a window of %lld with dilation %lld does not fit in %lld (source %s)",
                    (long long)k, (long long)dil, (long long)len,
                    shape_str(&x->shape, a, sizeof a));
    want.dim[nd - 2 + i] = (len - (span + 1)) / s + 1;
    want.dim[nd + i] = k;
  }
  return shape_is(v, &want, "[.., (H - span) / stride + 1, .., KH, KW] of the source") &&
         keeps_dtype(v);
}

/* ------------------------------------------------------------ library and indexing */

static bool check_matmul(const verdict *v) {
  const lm_node *n = v->n, *a = n->src[0], *b = n->src[1];
  int nd = n->shape.ndim;
  char sa[200], sb[200];
  if (n->dtype != LOOM_F32 && n->dtype != LOOM_F64)
    return refuse(v, "matmul is f32 or f64 (the frontend reduces integer products; a product of "
                     "bf16 or f16 operands is f32, its sums, which a cast rounds)");
  if (nd < 2 || a->shape.ndim != nd || b->shape.ndim != nd)
    return refuse(v,
                  "%s @ %s: matmul takes [.., M, K] @ [.., K, N], 2 or more dims each, as many "
                  "as the node",
                  shape_str(&a->shape, sa, sizeof sa), shape_str(&b->shape, sb, sizeof sb));
  loom_shape want = a->shape;
  want.dim[nd - 1] = b->shape.dim[nd - 1];
  bool fits = a->shape.dim[nd - 1] == b->shape.dim[nd - 2];
  for (int d = 0; d < nd - 2; d++) fits &= a->shape.dim[d] == b->shape.dim[d];
  if (!fits)
    return refuse(v, "%s @ %s: inner dims or batch dims differ",
                  shape_str(&a->shape, sa, sizeof sa), shape_str(&b->shape, sb, sizeof sb));
  /* operands of the node's dtype, or both BF16 or both F16 with F32 sums */
  loom_dtype in = lm_dtype_is_half(a->dtype) && n->dtype == LOOM_F32 ? a->dtype : n->dtype;
  return shape_is(v, &want, "[.., M, N]") &&
         source_dtype_is(v, 0, in, "the node's dtype (or bf16 / f16 for an f32 node)") &&
         source_dtype_is(v, 1, in, "the first operand's dtype");
}

/* q [.., Tq, D], k [.., Tk, D], v [.., Tk, Dv] -> [.., Tq, Dv], F32; the
 * gradient's node takes the output o and its gradient [.., Tq, Dv] too and
 * makes [.., 3, max(Tq, Tk), max(D, Dv)]. */
static bool check_attention(const verdict *v) {
  const lm_node *n = v->n;
  bool grad = n->op == LM_ATTENTION_GRAD;
  if (n->nsrc < (grad ? 5 : 3))
    return refuse(v, "%d sources: attention takes q, k, v (and a mask)%s", n->nsrc,
                  grad ? ", its output and the output's gradient" : "");
  const lm_node *q = n->src[0], *k = n->src[1], *val = n->src[2];
  int nd = q->shape.ndim;
  char sq[200], sk[200], sv[200];
  if (n->dtype != LOOM_F32) return refuse(v, "attention is f32 (other dtypes are composed)");
  if (!(n->arg.attn.scale >= 0) || isinf(n->arg.attn.scale))
    return refuse(v, "scale %g is not a finite value >= 0", n->arg.attn.scale);
  bool fits = nd >= 2 && q->shape.ndim == nd && k->shape.ndim == nd && val->shape.ndim == nd;
  for (int d = 0; fits && d < nd - 2; d++)
    fits = q->shape.dim[d] == k->shape.dim[d] && q->shape.dim[d] == val->shape.dim[d];
  fits = fits && q->shape.dim[nd - 1] == k->shape.dim[nd - 1] &&
         k->shape.dim[nd - 2] == val->shape.dim[nd - 2];
  if (!fits)
    return refuse(v,
                  "q %s, k %s, v %s: attention takes [.., Tq, D], [.., Tk, D], [.., Tk, Dv], "
                  "the node's rank and batch dims",
                  shape_str(&q->shape, sq, sizeof sq), shape_str(&k->shape, sk, sizeof sk),
                  shape_str(&val->shape, sv, sizeof sv));
  if (q->shape.dim[nd - 1] > LM_ATTENTION_MAX_HEAD ||
      val->shape.dim[nd - 1] > LM_ATTENTION_MAX_HEAD)
    return refuse(v, "head dims %lld and %lld: the fused kernel takes at most %d",
                  (long long)q->shape.dim[nd - 1], (long long)val->shape.dim[nd - 1],
                  LM_ATTENTION_MAX_HEAD);
  int mask = n->arg.attn.mask;
  int inputs = mask ? 4 : 3;
  if (mask < LM_ATTENTION_NO_MASK || mask > LM_ATTENTION_ADD_MASK ||
      n->nsrc != inputs + (grad ? 2 : 0) || (mask && n->arg.attn.causal))
    return refuse(v,
                  "%d sources with mask=%s%s: attention takes q, k, v and a mask when it has "
                  "one%s",
                  n->nsrc, lm_attention_mask_name(mask), n->arg.attn.causal ? " and causal" : "",
                  grad ? ", then its output and the output's gradient" : "");
  if (mask) {
    const lm_node *m = n->src[3];
    bool ok = m->shape.ndim == nd && m->shape.dim[nd - 2] == q->shape.dim[nd - 2] &&
              m->shape.dim[nd - 1] == k->shape.dim[nd - 2];
    for (int d = 0; ok && d < nd - 2; d++) ok = m->shape.dim[d] == q->shape.dim[d];
    if (!ok)
      return refuse(v, "mask %s: attention's mask is [.., Tq, Tk] with q's batch dims",
                    shape_str(&m->shape, sq, sizeof sq));
    if (!source_dtype_is(v, 3, mask == LM_ATTENTION_BOOL_MASK ? LOOM_BOOL : LOOM_F32,
                         mask == LM_ATTENTION_BOOL_MASK ? "bool" : "f32"))
      return false;
  }
  loom_shape want = q->shape;
  want.dim[nd - 1] = val->shape.dim[nd - 1];
  for (int s = inputs; grad && s < n->nsrc; s++) {
    if (!lm_shape_eq(&n->src[s]->shape, &want))
      return refuse(v, "%s %s: attention's output and its gradient are [.., Tq, Dv] %s",
                    s == inputs ? "output" : "gradient",
                    shape_str(&n->src[s]->shape, sq, sizeof sq), shape_str(&want, sk, sizeof sk));
    if (!source_dtype_is(v, s, LOOM_F32, "f32")) return false;
  }
  if (grad) { /* each batch index's dq, dk and dv in three parts */
    int64_t tq = q->shape.dim[nd - 2], tk = k->shape.dim[nd - 2], d = q->shape.dim[nd - 1];
    int64_t dv = val->shape.dim[nd - 1];
    want.ndim = nd + 1;
    want.dim[nd - 2] = 3, want.dim[nd - 1] = tq > tk ? tq : tk, want.dim[nd] = d > dv ? d : dv;
  }
  return shape_is(v, &want, grad ? "[.., 3, max(Tq, Tk), max(D, Dv)]" : "[.., Tq, Dv]") &&
         source_dtype_is(v, 0, LOOM_F32, "f32") && source_dtype_is(v, 1, LOOM_F32, "f32") &&
         source_dtype_is(v, 2, LOOM_F32, "f32");
}

/* src[0] a table [V, ..], src[1] integer indices of shape S: S + [..]. */
static bool check_gather(const verdict *v) {
  const lm_node *n = v->n, *table = n->src[0], *ix = n->src[1];
  char a[200], b[200];
  if (!lm_dtype_is_int(ix->dtype))
    return refuse(v, "indices are %s; they must be u8, i32 or i64", loom_dtype_name(ix->dtype));
  if (table->shape.ndim < 1 || ix->shape.ndim + table->shape.ndim - 1 > LOOM_MAX_DIMS)
    return refuse(v, "a table %s and indices %s do not give 0 to %d dims",
                  shape_str(&table->shape, a, sizeof a), shape_str(&ix->shape, b, sizeof b),
                  LOOM_MAX_DIMS);
  loom_shape want = ix->shape;
  for (int d = 1; d < table->shape.ndim; d++) want.dim[want.ndim++] = table->shape.dim[d];
  if (!shape_is(v, &want, "the indices' shape, then the table's dims after the first"))
    return false;
  if (table->shape.dim[0] < 1 && lm_shape_numel(&n->shape) > 0)
    return refuse(v, "the table %s has no rows to pick from",
                  shape_str(&table->shape, a, sizeof a));
  return keeps_dtype(v);
}

/* Collectives: the source's dtype; its shape, but all_gather's axis times the
 * ranks recorded. */
static bool check_collective(const verdict *v) {
  const lm_node *n = v->n, *x = n->src[0];
  const char *reduce = lm_reduce_op_name(n->arg.coll.reduce);
  if (n->arg.coll.world < 1) return refuse(v, "a world of %d ranks", n->arg.coll.world);
  if (n->op == LM_ALL_REDUCE && (!reduce || n->arg.coll.reduce == LOOM_REDUCE_NONE))
    return refuse(v, "reduction %d is not sum, mean, max or min", n->arg.coll.reduce);
  if (n->op == LM_ALL_REDUCE && n->dtype == LOOM_BOOL && n->arg.coll.reduce != LOOM_REDUCE_MAX &&
      n->arg.coll.reduce != LOOM_REDUCE_MIN)
    return refuse(v, "a bool all_reduce takes max or min, not %s", reduce);
  if (n->op == LM_ALL_REDUCE && n->arg.coll.reduce == LOOM_REDUCE_MEAN &&
      !lm_dtype_is_float(n->dtype))
    return refuse(v, "a mean is of floats");
  if (n->op == LM_BROADCAST && (n->arg.coll.root < 0 || n->arg.coll.root >= n->arg.coll.world))
    return refuse(v, "root %d is not one of %d ranks", n->arg.coll.root, n->arg.coll.world);
  loom_shape want = x->shape;
  if (n->nsrc > 1) { /* joined: [total], every source of the node's dtype */
    int64_t total = 0;
    for (int s = 0; s < n->nsrc; s++) {
      if (n->src[s]->dtype != n->dtype)
        return refuse(v, "source %d is %s, the node %s", s, loom_dtype_name(n->src[s]->dtype),
                      loom_dtype_name(n->dtype));
      total += lm_shape_numel(&n->src[s]->shape);
    }
    want = (loom_shape){1, {total}};
    return shape_is(v, &want, "[the sources' elements]");
  }
  if (n->op == LM_ALL_GATHER) {
    int axis = n->arg.coll.axis;
    if (axis < 0 || axis >= want.ndim) return refuse(v, "axis %d of %d dims", axis, want.ndim);
    if (__builtin_mul_overflow(want.dim[axis], (int64_t)n->arg.coll.world, &want.dim[axis]))
      return refuse(v, "the gathered dim overflows");
  }
  return shape_is(v, &want,
                  n->op == LM_ALL_GATHER ? "the source's, the axis times the ranks"
                                         : "the source's") &&
         keeps_dtype(v);
}

/* Sort: a numeric source of at least one dim, I64 positions [.., k], k at
 * most the last dim's length (and equal to it for a whole sort). */
static bool check_sort(const verdict *v) {
  const lm_node *n = v->n, *x = n->src[0];
  char a[200];
  if (x->dtype == LOOM_BOOL) return refuse(v, "sorts numbers, not bool");
  if (n->dtype != LOOM_I64)
    return refuse(v, "gives i64 positions, not %s", loom_dtype_name(n->dtype));
  if (x->shape.ndim < 1) return refuse(v, "sorts along the last dim of a source with none");
  int64_t len = x->shape.dim[x->shape.ndim - 1], k = n->arg.sort.k;
  if (k < 0 || k > len || (n->arg.sort.full && k != len))
    return refuse(v, "k %lld of a source %s: %s", (long long)k, shape_str(&x->shape, a, sizeof a),
                  n->arg.sort.full ? "a whole sort keeps the row's length"
                                   : "it must be 0 to the last dim's length");
  loom_shape want = x->shape;
  want.dim[want.ndim - 1] = k;
  return shape_is(v, &want, "the source's, the last dim k");
}

/* Scan: running sums along a dim of the source, its shape and dtype: F32,
 * F64 or I64 (the frontend casts the others: integers and bools to I64, as
 * torch.cumsum gives, halves to F32). */
static bool check_scan(const verdict *v) {
  const lm_node *n = v->n, *x = n->src[0];
  int axis = n->arg.scan.axis;
  if (n->arg.scan.combine != LOOM_REDUCE_SUM)
    return refuse(v, "combine %d: sums are the one scan there is (%d, sum)", n->arg.scan.combine,
                  (int)LOOM_REDUCE_SUM);
  if (x->dtype != LOOM_F32 && x->dtype != LOOM_F64 && x->dtype != LOOM_I64)
    return refuse(v, "scans f32, f64 or i64, not %s", loom_dtype_name(x->dtype));
  if (axis < 0 || axis >= x->shape.ndim)
    return refuse(v, "axis %d of a source of %d dims", axis, x->shape.ndim);
  return shape_is(v, &x->shape, "the source's") && keeps_dtype(v);
}

/* Check: the source's shape and dtype; integers for the integer rules,
 * floats of at least one dim for weights; the sources the rule takes, the
 * axis a dim of each shape source (a start's update no longer than the tensor
 * along it); the public op's name for the message. */
static bool check_check(const verdict *v) {
  const lm_node *n = v->n, *x = n->src[0];
  int rule = n->arg.check.rule, axis = n->arg.check.axis;
  const char *name = lm_check_rule_name(rule);
  if (!name) return refuse(v, "rule %d is not index, start or weights", rule);
  if (n->nsrc != lm_check_rule_sources(rule))
    return refuse(v, "%d sources, the %s rule takes %d", n->nsrc, name,
                  lm_check_rule_sources(rule));
  if (!shape_is(v, &x->shape, "the source's") || !keeps_dtype(v)) return false;
  if (rule == LM_CHECK_WEIGHTS ? !lm_dtype_is_float(x->dtype) || x->shape.ndim < 1
                               : !lm_dtype_is_int(x->dtype))
    return refuse(v, "the %s rule does not take %s values%s", name, loom_dtype_name(x->dtype),
                  rule == LM_CHECK_WEIGHTS ? " (floats of at least one dim)" : " (integers)");
  for (int s = 1; s < n->nsrc; s++)
    if (axis < 0 || axis >= n->src[s]->shape.ndim)
      return refuse(v, "axis %d is not a dim of source %d", axis, s);
  if (rule == LM_CHECK_START && n->src[2]->shape.dim[axis] > n->src[1]->shape.dim[axis])
    return refuse(v, "an update of %lld along axis %d does not fit a tensor of %lld",
                  (long long)n->src[2]->shape.dim[axis], axis,
                  (long long)n->src[1]->shape.dim[axis]);
  if (n->arg.check.has_ignore && rule != LM_CHECK_INDEX)
    return refuse(v, "the %s rule allows no ignored value", name);
  size_t len = strnlen(n->arg.check.op, LM_CHECK_OP_LEN);
  bool word = len > 0 && len < LM_CHECK_OP_LEN; /* (written into programs and exported C) */
  for (size_t i = 0; i < len && word; i++) {
    char c = n->arg.check.op[i];
    word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  if (!word)
    return refuse(v, "the op it reports for is not named by 1 to %d letters, digits or '_'",
                  LM_CHECK_OP_LEN - 1);
  return true;
}

/* ------------------------------------------------------------ leaves */

static bool check_leaf(const verdict *v) {
  const lm_node *n = v->n;
  switch (n->op) {
  case LM_BUFFER: return refuse(v, "a buffer without data");
  case LM_IOTA:
    if (!isfinite(n->arg.iota.start) || !isfinite(n->arg.iota.step) || n->arg.iota.step == 0)
      return refuse(v, "start %g and step %g must be finite, the step not 0", n->arg.iota.start,
                    n->arg.iota.step);
    return true;
  case LM_RAND: {
    lm_rand_kind kind = n->arg.rand.kind;
    double p = n->arg.rand.p;
    if ((int)kind < LM_RAND_UNIFORM || kind > LM_RAND_BERNOULLI)
      return refuse(v, "unknown random kind %d", (int)kind);
    if (!(p >= 0 && p <= 1)) return refuse(v, "p %g is outside [0, 1]", p);
    if (kind == LM_RAND_BERNOULLI && n->dtype != LOOM_BOOL)
      return refuse(v, "a bernoulli draw is bool");
    if (kind != LM_RAND_BERNOULLI && !lm_dtype_is_float(n->dtype))
      return refuse(v, "a uniform or normal draw is f32 or f64");
    return true;
  }
  case LM_INPUT:
    if (!n->label || !n->label[0]) return refuse(v, "an input without a name");
    return true;
  case LM_CONST:
    if (!fits_int64(n->dtype, n->arg.f))
      return refuse(v, "the value %g is outside the int64 range an integer constant needs",
                    n->arg.f);
    return true;
  default: return true;
  }
}

/* A computed node: a leaf holding its row-major elements. */
static bool check_data(const verdict *v) {
  const lm_node *n = v->n;
  size_t need = (size_t)lm_shape_numel(&n->shape) * loom_dtype_size(n->dtype);
  if (n->bytes < need)
    return refuse(v, "holds %zu bytes of data, its shape needs %zu", n->bytes, need);
  return true;
}

bool lm_node_verify(const lm_node *n, char *why, size_t len) {
  if (why && len) why[0] = 0;
  if (!n) {
    if (why && len) snprintf(why, len, "NULL node");
    return false;
  }
  verdict v = {n, why, len};
  if ((int)n->op < 0 || n->op >= LM_NUM_OPS) return refuse(&v, "unknown op %d", (int)n->op);
  if (!lm_dtype_valid(n->dtype)) return refuse(&v, "unknown dtype %d", (int)n->dtype);
  if (n->device.type != LOOM_DEVICE_CPU && n->device.type != LOOM_DEVICE_CUDA)
    return refuse(&v, "unknown device type %d", (int)n->device.type);
  if (!check_shape(&v)) return false;
  if (lm_is_computed(n) && n->op != LM_INPUT) return check_data(&v);
  if (!check_sources(&v)) return false;
  if (lm_op_table[n->op].arity == 0) return check_leaf(&v);
  if (lm_op_is_elementwise(n->op)) return check_elementwise(&v);
  if (lm_op_is_reduce(n->op)) return check_reduce(&v);
  switch (n->op) {
  case LM_RESHAPE: return check_reshape(&v);
  case LM_PERMUTE: return check_permute(&v);
  case LM_EXPAND: return check_expand(&v);
  case LM_SLICE: return check_slice(&v);
  case LM_PAD: return check_pad(&v);
  case LM_CAT: return check_cat(&v);
  case LM_WINDOW: return check_window(&v);
  case LM_MATMUL: return check_matmul(&v);
  case LM_ATTENTION:
  case LM_ATTENTION_GRAD: return check_attention(&v);
  case LM_GATHER: return check_gather(&v);
  case LM_ALL_REDUCE:
  case LM_BROADCAST:
  case LM_ALL_GATHER: return check_collective(&v);
  case LM_SORT: return check_sort(&v);
  case LM_SCAN: return check_scan(&v);
  case LM_CHECK: return check_check(&v);
  default: return refuse(&v, "no rule for this op");
  }
}
