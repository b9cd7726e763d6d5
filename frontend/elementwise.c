/* Elementwise ops: broadcasting, type promotion, and the scalar (_s) forms;
 * and those composed of them: where with a scalar, masked_fill, tril and triu
 * (one where over a mask each), sign, GELU's tanh form. */
#include <math.h>

#include "frontend/frontend.h"

typedef enum kind {
  ARITH,   /* result in the promoted dtype */
  TRUEDIV, /* promoted, integers to F32 */
  COMPARE, /* operands promoted, result BOOL */
  LOGIC,   /* operands as BOOL, result BOOL */
} kind;

static loom_dtype compute_dtype(kind k, loom_dtype promoted) {
  if (k == LOGIC) return LOOM_BOOL;
  if (k == TRUEDIV && !loom_dtype_is_float(promoted)) return LOOM_F32;
  return promoted;
}

/* Records op over a and b (broadcast, cast to dtype `dt`). */
static lm_node *record_binary(lm_op op, lm_node *a, lm_node *b, loom_dtype dt,
                              const loom_shape *shape) {
  lm_node *ca = nb_cast(a, dt), *cb = nb_cast(b, dt);
  lm_node *ba = nb_broadcast(ca, *shape), *bb = nb_broadcast(cb, *shape);
  lm_node *r;
  if (op == LM_POW && dt == LOOM_BOOL) {
    /* bool powers (torch refuses them) in F64, cast back: 0^0 is 1 */
    lm_node *fa = nb_cast(ba, LOOM_F64), *fb = nb_cast(bb, LOOM_F64);
    lm_node *p = nb_binary(LM_POW, fa, fb);
    r = nb_cast(p, dt);
    nb_drop(fa, fb, p, NULL);
  } else if ((op == LM_ADD || op == LM_MUL || op == LM_MAX || op == LM_MIN || op == LM_SUB) &&
             dt == LOOM_BOOL) {
    /* bool arithmetic: add/max is or, mul/min is and (torch's semantics) */
    lm_op logic = op == LM_ADD || op == LM_MAX ? LM_OR : LM_AND;
    r = nb_binary(logic, ba, bb);
  } else {
    r = nb_binary(op, ba, bb);
  }
  nb_drop(ca, cb, ba, bb);
  return r;
}

static loom_tensor *binary(const char *name, lm_op op, kind k, const loom_tensor *a,
                           const loom_tensor *b, bool swap) {
  loom_tensor *err;
  if ((err = lm_check(name, a)) || (err = lm_check(name, b))) return err;
  if ((err = lm_check_same_device(name, a->node, b->node))) return err;
  loom_shape shape;
  if (!lm_broadcast_shape(&a->node->shape, &b->node->shape, &shape)) {
    char sa[128], sb[128];
    return lm_error(LOOM_ERR_SHAPE, "%s: shapes %s and %s cannot be broadcast together", name,
                    lm_shape_str(&a->node->shape, sa, sizeof sa),
                    lm_shape_str(&b->node->shape, sb, sizeof sb));
  }
  if (op == LM_SUB && a->node->dtype == LOOM_BOOL && b->node->dtype == LOOM_BOOL)
    return lm_error(LOOM_ERR_DTYPE, "%s: subtracting two bool tensors is not supported", name);
  loom_dtype dt = compute_dtype(k, lm_result_dtype(a->node, b->node));
  lm_node *x = swap ? b->node : a->node, *y = swap ? a->node : b->node;
  return lm_result(record_binary(op, x, y, dt, &shape));
}

#define BINARY(fn, op, k, swap)                                                                    \
  loom_tensor *loom_##fn(const loom_tensor *a, const loom_tensor *b) {                             \
    return binary("loom_" #fn, op, k, a, b, swap);                                                 \
  }
BINARY(add, LM_ADD, ARITH, false)
BINARY(sub, LM_SUB, ARITH, false)
BINARY(mul, LM_MUL, ARITH, false)
BINARY(div, LM_DIV, TRUEDIV, false)
BINARY(pow, LM_POW, ARITH, false)
BINARY(maximum, LM_MAX, ARITH, false)
BINARY(minimum, LM_MIN, ARITH, false)
BINARY(lt, LM_LT, COMPARE, false)
BINARY(le, LM_LE, COMPARE, false)
BINARY(gt, LM_LT, COMPARE, true)
BINARY(ge, LM_LE, COMPARE, true)
BINARY(eq, LM_EQ, COMPARE, false)
BINARY(ne, LM_NE, COMPARE, false)
BINARY(logical_and, LM_AND, LOGIC, false)
BINARY(logical_or, LM_OR, LOGIC, false)

/* A scalar operand is a 0-d constant of the weakly promoted dtype. */
static loom_tensor *scalar(const char *name, lm_op op, kind k, const loom_tensor *a, double s,
                           bool scalar_first) {
  loom_tensor *err;
  if ((err = lm_check(name, a))) return err;
  lm_node *n = a->node;
  if (op == LM_SUB && n->dtype == LOOM_BOOL)
    return lm_error(LOOM_ERR_DTYPE, "%s: subtraction with a bool tensor is not supported", name);
  loom_dtype dt = compute_dtype(k, lm_scalar_promote(n->dtype, s));
  if (op == LM_POW && lm_dtype_is_int(dt)) { /* the exponent as it is, as torch takes it */
    if (s < 0)
      return lm_error(LOOM_ERR_VALUE,
                      "%s: integers to negative integer powers are not allowed (exponent %.17g)",
                      name, s);
    if (!lm_dtype_holds(dt, s))
      return lm_error(LOOM_ERR_VALUE, "%s: the exponent %.17g does not fit %s", name, s,
                      loom_dtype_name(dt));
  } else if ((err = lm_scalar_value(name, dt, s, &s))) {
    return err;
  }
  lm_node *c = nb_const(s, LOOM_SHAPE0, dt, n->device);
  lm_node *r = scalar_first ? record_binary(op, c, n, dt, &n->shape)
                            : record_binary(op, n, c, dt, &n->shape);
  nb_drop(c, NULL, NULL, NULL);
  return lm_result(r);
}

#define SCALAR(fn, op, k, first)                                                                   \
  loom_tensor *loom_##fn(const loom_tensor *a, double s) {                                         \
    return scalar("loom_" #fn, op, k, a, s, first);                                                \
  }
SCALAR(add_s, LM_ADD, ARITH, false)
SCALAR(sub_s, LM_SUB, ARITH, false)
SCALAR(mul_s, LM_MUL, ARITH, false)
SCALAR(div_s, LM_DIV, TRUEDIV, false)
SCALAR(pow_s, LM_POW, ARITH, false)
SCALAR(maximum_s, LM_MAX, ARITH, false)
SCALAR(minimum_s, LM_MIN, ARITH, false)
SCALAR(lt_s, LM_LT, COMPARE, false)
SCALAR(le_s, LM_LE, COMPARE, false)
SCALAR(gt_s, LM_LT, COMPARE, true)
SCALAR(ge_s, LM_LE, COMPARE, true)
SCALAR(eq_s, LM_EQ, COMPARE, false)
SCALAR(ne_s, LM_NE, COMPARE, false)

loom_tensor *loom_rsub_s(double s, const loom_tensor *a) {
  return scalar("loom_rsub_s", LM_SUB, ARITH, a, s, true);
}
loom_tensor *loom_rdiv_s(double s, const loom_tensor *a) {
  return scalar("loom_rdiv_s", LM_DIV, TRUEDIV, a, s, true);
}

loom_tensor *loom_where(const loom_tensor *cond, const loom_tensor *a, const loom_tensor *b) {
  const char *name = "loom_where";
  loom_tensor *err;
  if ((err = lm_check(name, cond)) || (err = lm_check(name, a)) || (err = lm_check(name, b)))
    return err;
  if ((err = lm_check_same_device(name, cond->node, a->node)) ||
      (err = lm_check_same_device(name, a->node, b->node)))
    return err;
  if (cond->node->dtype != LOOM_BOOL)
    return lm_error(LOOM_ERR_DTYPE, "%s: condition must be bool, got %s", name,
                    loom_dtype_name(cond->node->dtype));
  loom_shape ab, shape;
  if (!lm_broadcast_shape(&a->node->shape, &b->node->shape, &ab) ||
      !lm_broadcast_shape(&cond->node->shape, &ab, &shape)) {
    char sc[128], sa[128], sb[128];
    return lm_error(LOOM_ERR_SHAPE, "%s: shapes %s, %s and %s cannot be broadcast together", name,
                    lm_shape_str(&cond->node->shape, sc, sizeof sc),
                    lm_shape_str(&a->node->shape, sa, sizeof sa),
                    lm_shape_str(&b->node->shape, sb, sizeof sb));
  }
  loom_dtype dt = lm_result_dtype(a->node, b->node);
  lm_node *ca = nb_cast(a->node, dt), *cb = nb_cast(b->node, dt);
  lm_node *bc = nb_broadcast(cond->node, shape), *ba = nb_broadcast(ca, shape),
          *bb = nb_broadcast(cb, shape);
  lm_node *r = nb_where(bc, ba, bb);
  nb_drop(ca, cb, bc, ba);
  nb_drop(bb, NULL, NULL, NULL);
  return lm_result(r);
}

/* ------------------------------------------------------------ unary */

typedef enum ukind {
  FLOAT_ONLY, /* integers and bools compute in F32 */
  KEEP,       /* any dtype, kept */
  NO_BOOL,    /* like KEEP, bool refused */
  BOOL_TO_I64,
} ukind;

static loom_tensor *unary(const char *name, lm_op op, ukind k, const loom_tensor *a) {
  loom_tensor *err;
  if ((err = lm_check(name, a))) return err;
  loom_dtype dt = a->node->dtype;
  if (k == FLOAT_ONLY && !loom_dtype_is_float(dt)) dt = LOOM_F32;
  if (k == NO_BOOL && dt == LOOM_BOOL)
    return lm_error(LOOM_ERR_DTYPE, "%s: not supported for bool tensors", name);
  if (k == BOOL_TO_I64 && dt == LOOM_BOOL) dt = LOOM_I64;
  lm_node *c = nb_cast(a->node, dt);
  lm_node *r = nb_unary(op, c);
  nb_drop(c, NULL, NULL, NULL);
  return lm_result(r);
}

#define UNARY(fn, op, k)                                                                           \
  loom_tensor *loom_##fn(const loom_tensor *a) { return unary("loom_" #fn, op, k, a); }
UNARY(neg, LM_NEG, NO_BOOL)
UNARY(abs, LM_ABS, KEEP)
UNARY(exp, LM_EXP, FLOAT_ONLY)
UNARY(log, LM_LOG, FLOAT_ONLY)
UNARY(sqrt, LM_SQRT, FLOAT_ONLY)
UNARY(rsqrt, LM_RSQRT, FLOAT_ONLY)
UNARY(sin, LM_SIN, FLOAT_ONLY)
UNARY(cos, LM_COS, FLOAT_ONLY)
UNARY(tanh, LM_TANH, FLOAT_ONLY)
UNARY(sigmoid, LM_SIGMOID, FLOAT_ONLY)
UNARY(relu, LM_RELU, KEEP)
UNARY(gelu, LM_GELU, FLOAT_ONLY)
UNARY(silu, LM_SILU, FLOAT_ONLY)
UNARY(square, LM_SQUARE, BOOL_TO_I64)
UNARY(reciprocal, LM_RECIPROCAL, FLOAT_ONLY)
UNARY(erf, LM_ERF, FLOAT_ONLY)
UNARY(log1p, LM_LOG1P, FLOAT_ONLY)
UNARY(expm1, LM_EXPM1, FLOAT_ONLY)

/* torch.floor / ceil / round of an integer tensor is its values */
static loom_tensor *rounding(const char *name, lm_op op, const loom_tensor *a) {
  loom_tensor *err;
  if ((err = lm_check(name, a))) return err;
  if (a->node->dtype == LOOM_BOOL)
    return lm_error(LOOM_ERR_DTYPE, "%s: not supported for bool tensors", name);
  if (!loom_dtype_is_float(a->node->dtype)) return loom_detach(a);
  return lm_result(nb_unary(op, a->node));
}
loom_tensor *loom_floor(const loom_tensor *a) { return rounding("loom_floor", LM_FLOOR, a); }
loom_tensor *loom_ceil(const loom_tensor *a) { return rounding("loom_ceil", LM_CEIL, a); }
loom_tensor *loom_round(const loom_tensor *a) { return rounding("loom_round", LM_ROUND, a); }

loom_tensor *loom_clamp(const loom_tensor *a, double lo, double hi) {
  loom_tensor *err;
  if ((err = lm_check("loom_clamp", a))) return err;
  loom_dtype dt = a->node->dtype;
  if (dt == LOOM_BOOL)
    return lm_error(LOOM_ERR_DTYPE, "loom_clamp: not supported for bool tensors");
  dt = lm_scalar_promote(lm_scalar_promote(dt, lo), hi); /* a non-integral bound: F32 */
  double bound[2] = {lo, hi};
  for (int i = 0; i < 2; i++)
    if (!lm_dtype_holds(dt, bound[i]))
      return lm_error(LOOM_ERR_VALUE, "loom_clamp: the %s bound %.17g does not fit %s",
                      i ? "upper" : "lower", bound[i], loom_dtype_name(dt));
  lm_node *c = nb_cast(a->node, dt);
  lm_node *r = nb_unary(LM_CLAMP, c);
  if (r) r->arg.clamp.lo = lo, r->arg.clamp.hi = hi;
  nb_drop(c, NULL, NULL, NULL);
  return lm_result(r);
}

loom_tensor *loom_logical_not(const loom_tensor *a) {
  loom_tensor *err;
  if ((err = lm_check("loom_logical_not", a))) return err;
  lm_node *c = nb_cast(a->node, LOOM_BOOL);
  lm_node *r = nb_unary(LM_NOT, c);
  nb_drop(c, NULL, NULL, NULL);
  return lm_result(r);
}

loom_tensor *loom_cast(const loom_tensor *a, loom_dtype dtype) {
  loom_tensor *err;
  if ((err = lm_check("loom_cast", a)) || (err = lm_check_dtype("loom_cast", dtype))) return err;
  return lm_result(nb_cast(a->node, dtype));
}

loom_tensor *loom_bitcast(const loom_tensor *a, loom_dtype dtype) {
  loom_tensor *err;
  const char *op = "loom_bitcast";
  if ((err = lm_check(op, a)) || (err = lm_check_dtype(op, dtype))) return err;
  loom_dtype from = a->node->dtype;
  if (loom_dtype_size(from) != loom_dtype_size(dtype))
    return lm_error(LOOM_ERR_DTYPE,
                    "%s: %s has %zu-byte elements and %s %zu-byte ones; a bitcast keeps the size",
                    op, loom_dtype_name(from), loom_dtype_size(from), loom_dtype_name(dtype),
                    loom_dtype_size(dtype));
  if (from == dtype) return lm_result(nb_cast(a->node, dtype)); /* its own bits */
  return lm_result(lm_node_new(LM_BITCAST, 1, &a->node, a->node->shape, dtype, a->node->device));
}

loom_status lm_copy_node(const char *op, lm_node *n, loom_device device, lm_node **out) {
  *out = NULL;
  loom_status st = lm_realize_nodes(&n, 1);
  lm_node *copy = NULL;
  if (st == LOOM_OK) st = lm_leaf_copy(op, n->shape, n->dtype, device, n->data, n->device, &copy);
  if (st != LOOM_OK) return st;
  if (n->requires_grad && lm_grad_enabled()) {
    lm_node *tracked = lm_node_new(LM_COPY, 1, &n, n->shape, n->dtype, device);
    if (!tracked) {
      lm_node_release(copy);
      return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
    }
    tracked->data = copy->data, tracked->bytes = copy->bytes;
    tracked->release_data = copy->release_data;
    copy->data = NULL;
    lm_node_release(copy);
    copy = tracked;
  }
  *out = copy;
  return LOOM_OK;
}

/* A copy between devices is made now, not recorded: the source is realized
 * and its data copied (queued on the device's stream; a copy to the host
 * waits). No graph spans two devices, so each realization runs on one;
 * gradients cross through the copy's LM_COPY node (frontend/autograd.c). */
loom_tensor *loom_to(const loom_tensor *a, loom_device device) {
  const char *op = "loom_to";
  loom_tensor *err;
  if ((err = lm_check(op, a)) || (err = lm_check_device(op, device))) return err;
  lm_node *n = a->node;
  if (lm_device_eq(n->device, device)) {
    lm_node_retain(n);
    return lm_result(n);
  }
  if (n->op == LM_INPUT)
    return lm_error(LOOM_ERR_DEVICE, "%s: input '%s' has no value to copy outside a program", op,
                    n->label ? n->label : "?");
  lm_node *copy;
  loom_status st = lm_copy_node(op, n, device, &copy);
  return st != LOOM_OK ? lm_error_recorded(st) : lm_result(copy);
}

/* ------------------------------------------------------------ where with a scalar, masks */

LM_PUBLIC(loom_tensor *, loom_where_s, (const loom_tensor *cond, const loom_tensor *a, double s),
          (cond, a, s)) {
  loom_tensor *err;
  if ((err = lm_check("loom_where_s", a))) return err;
  loom_dtype dt = lm_scalar_promote(a->node->dtype, s);
  if (!lm_dtype_holds(dt, s)) /* the value is the result's: wrapped, it would be another */
    return lm_error(LOOM_ERR_VALUE, "loom_where_s: the value %.17g does not fit %s", s,
                    loom_dtype_name(dt));
  int token = lm_composite_begin();
  loom_tensor *c = loom_full(LOOM_SHAPE0, s, dt, a->node->device);
  return lm_composite_end(token, loom_where(cond, a, c));
}

LM_PUBLIC(loom_tensor *, loom_masked_fill,
          (const loom_tensor *a, const loom_tensor *mask, double value), (a, mask, value)) {
  loom_tensor *err;
  if ((err = lm_check("loom_masked_fill", a)) || (err = lm_check("loom_masked_fill", mask)))
    return err;
  loom_dtype dt = a->node->dtype;
  if (!loom_dtype_is_float(dt) && !lm_dtype_holds(dt, value))
    return lm_error(LOOM_ERR_VALUE, "loom_masked_fill: the value %.17g does not fit %s", value,
                    loom_dtype_name(dt));
  loom_shape out;
  char sa[128], sm[128];
  if (!lm_broadcast_shape(&a->node->shape, &mask->node->shape, &out) ||
      !lm_shape_eq(&out, &a->node->shape))
    return lm_error(LOOM_ERR_SHAPE, "loom_masked_fill: the mask %s does not broadcast to %s",
                    lm_shape_str(&mask->node->shape, sm, sizeof sm),
                    lm_shape_str(&a->node->shape, sa, sizeof sa));
  int token = lm_composite_begin();
  loom_tensor *v = loom_full(LOOM_SHAPE0, value, dt, a->node->device);
  return lm_composite_end(token, loom_where(mask, v, a));
}

/* column - row of the last two dims, compared with diagonal (I64 iotas, broadcast). */
static loom_tensor *triangle(const char *op, const loom_tensor *a, int64_t diagonal, bool lower) {
  loom_tensor *err;
  if ((err = lm_check(op, a))) return err;
  const loom_shape *s = &a->node->shape;
  if (s->ndim < 2) {
    char sa[128];
    return lm_error(LOOM_ERR_SHAPE, "%s: needs at least 2 dims, got %s", op,
                    lm_shape_str(&a->node->shape, sa, sizeof sa));
  }
  int64_t rows = s->dim[s->ndim - 2], cols = s->dim[s->ndim - 1];
  loom_device dev = a->node->device;
  int token = lm_composite_begin();
  loom_tensor *row =
      loom_reshape(loom_arange(0, (double)rows, 1, LOOM_I64, dev), LOOM_SHAPE(rows, 1));
  loom_tensor *offset = loom_sub(loom_arange(0, (double)cols, 1, LOOM_I64, dev), row);
  loom_tensor *keep =
      lower ? loom_le_s(offset, (double)diagonal) : loom_ge_s(offset, (double)diagonal);
  loom_tensor *zero = loom_full(LOOM_SHAPE0, 0, a->node->dtype, dev);
  return lm_composite_end(token, loom_where(keep, a, zero));
}

LM_PUBLIC(loom_tensor *, loom_tril, (const loom_tensor *a, int64_t diagonal), (a, diagonal)) {
  return triangle("loom_tril", a, diagonal, true);
}

LM_PUBLIC(loom_tensor *, loom_triu, (const loom_tensor *a, int64_t diagonal), (a, diagonal)) {
  return triangle("loom_triu", a, diagonal, false);
}

/* ------------------------------------------------------------ sign */

LM_PUBLIC(loom_tensor *, loom_sign, (const loom_tensor *a), (a)) {
  loom_tensor *err;
  if ((err = lm_check("loom_sign", a))) return err;
  if (a->node->dtype == LOOM_BOOL) return loom_cast(a, LOOM_BOOL);
  int token = lm_composite_begin();
  loom_dtype dt = a->node->dtype;
  /* (a > 0) - (a < 0); NaN stays NaN, as torch */
  loom_tensor *s = loom_sub(loom_cast(loom_gt_s(a, 0), dt), loom_cast(loom_lt_s(a, 0), dt));
  if (loom_dtype_is_float(dt)) s = loom_where(loom_ne(a, a), a, s);
  return lm_composite_end(token, s);
}

/* ------------------------------------------------------------ GELU, tanh form */

/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's and torch's
 * approximate='tanh'. */
LM_PUBLIC(loom_tensor *, loom_gelu_tanh, (const loom_tensor *a), (a)) {
  loom_tensor *err;
  if ((err = lm_check("loom_gelu_tanh", a))) return err;
  int token = lm_composite_begin();
  loom_dtype out = lm_float_result(a->node->dtype);
  loom_tensor *x = loom_cast(a, lm_compute_dtype(out)); /* BF16, F16: in F32, rounded once */
  loom_tensor *inner = loom_add(x, loom_mul_s(loom_mul(loom_square(x), x), 0.044715));
  loom_tensor *t = loom_tanh(loom_mul_s(inner, sqrt(2.0 / M_PI)));
  return lm_composite_end(token, loom_cast(loom_mul(loom_mul_s(x, 0.5), loom_add_s(t, 1)), out));
}
