/* Validation and type promotion shared by every op. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "frontend/frontend.h"
#include "runtime/check_step.h"

loom_tensor *lm_check(const char *op, const loom_tensor *t) {
  if (!t) return lm_error(LOOM_ERR_NULL, "%s: tensor argument is NULL", op);
  if (lm_is_freed(t))
    return lm_error(LOOM_ERR_NULL, "%s: the tensor was freed (a handle used after loom_free)", op);
  if (t->status != LOOM_OK) return lm_tensor_ref(t);
  if (!t->node) return lm_error(LOOM_ERR_INTERNAL, "%s: tensor has no node", op);
  return NULL;
}

loom_tensor *lm_check_dtype(const char *op, loom_dtype dtype) {
  if ((int)dtype < 0 || dtype >= LOOM_NUM_DTYPES)
    return lm_error(LOOM_ERR_DTYPE, "%s: unknown dtype %d", op, (int)dtype);
  return NULL;
}

loom_tensor *lm_check_shape(const char *op, const loom_shape *s, loom_dtype dtype) {
  char buf[128];
  if (s->ndim < 0 || s->ndim > LOOM_MAX_DIMS)
    return lm_error(LOOM_ERR_SHAPE, "%s: %d dims (loom supports 0 to %d)", op, s->ndim,
                    LOOM_MAX_DIMS);
  for (int d = 0; d < s->ndim; d++)
    if (s->dim[d] < 0)
      return lm_error(LOOM_ERR_SHAPE, "%s: shape %s has a negative dim", op,
                      lm_shape_str(s, buf, sizeof buf));
  int64_t numel = lm_shape_numel(s), bytes;
  if (numel < 0 || __builtin_mul_overflow(numel, (int64_t)loom_dtype_size(dtype), &bytes) ||
      bytes > ((int64_t)1 << 56))
    return lm_error(LOOM_ERR_SIZE, "%s: shape %s is too large", op,
                    lm_shape_str(s, buf, sizeof buf));
  return NULL;
}

loom_tensor *lm_check_device(const char *op, loom_device device) {
  if (device.type == LOOM_DEVICE_CPU) return NULL;
  if (device.type == LOOM_DEVICE_CUDA && !loom_cuda_available())
    return lm_error(LOOM_ERR_DEVICE, "%s: cuda:%d is not available: %s", op, device.index,
                    loom_cuda_unavailable_reason());
  if (device.type == LOOM_DEVICE_CUDA &&
      (device.index < 0 || device.index >= loom_cuda_device_count()))
    return lm_error(LOOM_ERR_DEVICE, "%s: cuda:%d does not exist (%d devices)", op, device.index,
                    loom_cuda_device_count());
  if (device.type != LOOM_DEVICE_CUDA)
    return lm_error(LOOM_ERR_DEVICE, "%s: unknown device type %d", op, (int)device.type);
  return NULL;
}

loom_tensor *lm_check_same_device(const char *op, const lm_node *a, const lm_node *b) {
  if (lm_device_eq(a->device, b->device)) return NULL;
  char da[32], db[32];
  return lm_error(LOOM_ERR_DEVICE, "%s: tensors on different devices (%s and %s)", op,
                  lm_device_str(a->device, da, sizeof da), lm_device_str(b->device, db, sizeof db));
}

bool lm_axis(int *axis, int ndim) {
  int n = ndim > 0 ? ndim : 1; /* a 0-d tensor accepts axis 0 and -1, as torch */
  if (*axis < -n || *axis >= n) return false;
  if (*axis < 0) *axis += n;
  return true;
}

double lm_option(double value, double fallback) {
  if (value != 0) return value;
  return signbit(value) ? 0.0 : fallback;
}

loom_tensor *lm_result(lm_node *n) {
  if (!n) return lm_error(LOOM_ERR_OOM, "out of memory recording a node");
  return lm_tensor_wrap(n);
}

/* Floats by PyTorch's ranks (wider wins); the enum is not in that order. */
static int float_rank(loom_dtype d) {
  static const int ranks[LOOM_NUM_DTYPES] = {
      [LOOM_BF16] = 0, [LOOM_F16] = 0, [LOOM_F32] = 1, [LOOM_F64] = 2};
  return ranks[d];
}

/* The smallest signed dtype wider than unsigned u: U8 -> I16, U16 -> I32,
 * U32 -> I64. U64 has none (NumPy gives F64, rounding past 2^53; torch 2
 * refuses): loom gives I64, values past 2^63 wrapping as a cast does. */
static loom_dtype signed_above(loom_dtype u) {
  switch (lm_dtype_info_of(u)->bits) {
  case 8: return LOOM_I16;
  case 16: return LOOM_I32;
  default: return LOOM_I64;
  }
}

/* NumPy's (and torch's, where torch has the dtypes) integer promotion: one
 * signedness, the wider; mixed, the signed one if wider than the unsigned,
 * else the smallest signed dtype wider than the unsigned one. */
static loom_dtype promote_ints(loom_dtype a, loom_dtype b) {
  bool ua = lm_dtype_is_unsigned(a), ub = lm_dtype_is_unsigned(b);
  int bits_a = lm_dtype_info_of(a)->bits, bits_b = lm_dtype_info_of(b)->bits;
  if (ua == ub) return bits_a >= bits_b ? a : b;
  loom_dtype u = ua ? a : b, s = ua ? b : a;
  if (lm_dtype_info_of(s)->bits > lm_dtype_info_of(u)->bits) return s;
  return signed_above(u);
}

static int category(loom_dtype d) { return d == LOOM_BOOL ? 0 : loom_dtype_is_float(d) ? 2 : 1; }

/* PyTorch's categories (bool < integer < float): the higher category wins;
 * inside one, integers as promote_ints, floats the wider, BF16 with F16 F32
 * (torch's rule: neither holds the other). */
loom_dtype lm_promote(loom_dtype a, loom_dtype b) {
  int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (a == b || ca == 0) return a;
  if (ca == 1) return promote_ints(a, b);
  if (float_rank(a) == float_rank(b)) return LOOM_F32;
  return float_rank(a) > float_rank(b) ? a : b;
}

/* torch.result_type for two tensors: a 0-d tensor decides the dtype only when
 * its category (bool < integer < float) is higher than the other's. */
loom_dtype lm_result_dtype(const lm_node *a, const lm_node *b) {
  bool a0 = a->shape.ndim == 0, b0 = b->shape.ndim == 0;
  if (a0 == b0) return lm_promote(a->dtype, b->dtype);
  const lm_node *dim = a0 ? b : a, *zero = a0 ? a : b;
  if (category(zero->dtype) > category(dim->dtype)) return lm_promote(dim->dtype, zero->dtype);
  return dim->dtype;
}

loom_dtype lm_scalar_promote(loom_dtype t, double s) {
  if (loom_dtype_is_float(t)) return t;
  bool integral = isfinite(s) && s == floor(s);
  if (!integral) return LOOM_F32;
  return t == LOOM_BOOL ? LOOM_I64 : t;
}

loom_tensor *lm_scalar_value(const char *op, loom_dtype dt, double s, double *value) {
  *value = s;
  if (!lm_dtype_is_int(dt)) return NULL;
  double top = dt == LOOM_U64 ? 0x1p64 : 0x1p63;
  if (!(s >= -0x1p63 && s < top)) /* (integral: lm_scalar_promote made dt an integer) */
    return lm_error(LOOM_ERR_VALUE, "%s: the scalar %.17g is outside the 64-bit integers", op, s);
  if (dt == LOOM_U64 && s < 0) { /* modulo 2^64, carried as a double: exact or refused */
    uint64_t bits = (uint64_t)(int64_t)s;
    *value = (double)bits; /* -1: 2^64, which saturates back to 2^64 - 1 */
    if ((uint64_t)lm_dtype_saturate(*value, dt) != bits)
      return lm_error(LOOM_ERR_VALUE,
                      "%s: the scalar %.17g is %" PRIu64 " as a u64 (modulo 2^64), which a "
                      "double does not hold (subtract %.17g instead)",
                      op, s, bits, -s);
    return NULL;
  }
  if (dt == LOOM_U64) return NULL; /* up to 2^64: the double given */
  *value = (double)lm_dtype_wrap((int64_t)s, dt);
  return NULL;
}

bool lm_broadcast_shape(const loom_shape *a, const loom_shape *b, loom_shape *out) {
  int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
  out->ndim = nd;
  for (int i = 0; i < nd; i++) {
    int ia = a->ndim - nd + i, ib = b->ndim - nd + i;
    int64_t da = ia >= 0 ? a->dim[ia] : 1, db = ib >= 0 ? b->dim[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    out->dim[i] = da == 1 ? db : da;
  }
  return true;
}

loom_tensor *lm_pair_error(loom_status st, const char *op, const loom_shape *a, const char *sep,
                           const loom_shape *b, const char *fmt, ...) {
  char what[512], sa[128], sb[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return lm_error(st, "%s: %s %s %s: %s", op, lm_shape_str(a, sa, sizeof sa), sep,
                  lm_shape_str(b, sb, sizeof sb), what);
}

loom_tensor *lm_check_fill(const char *op, loom_dtype dtype, double value) {
  if (loom_dtype_is_float(dtype) || dtype == LOOM_BOOL) return NULL;
  if (isfinite(value) && lm_dtype_holds(dtype, trunc(value))) return NULL;
  return lm_error(LOOM_ERR_VALUE, "%s: the value %.17g cannot be converted to %s without overflow",
                  op, value, loom_dtype_name(dtype));
}

loom_tensor *lm_check_axis(const char *op, int *axis, int ndim) {
  int given = *axis;
  if (ndim > 0 && lm_axis(axis, ndim)) return NULL;
  return lm_error(LOOM_ERR_AXIS, "%s: axis %d out of range for %d dims", op, given, ndim);
}

void lm_axis_last(int nd, int ax, int *perm, int *back) {
  for (int d = 0, j = 0; d < nd; d++)
    if (d != ax) perm[j++] = d;
  perm[nd - 1] = ax;
  for (int d = 0; back && d < nd; d++) back[perm[d]] = d;
}

loom_status lm_error_status(loom_tensor *err) {
  loom_status st = err ? loom_status_of(err) : LOOM_OK;
  loom_free(err);
  return st;
}

/* ------------------------------------------------------------ data-dependent input */

/* values under rule: checked now when its data is at hand (the call fails,
 * naming the op the user called and the first value breaking the rule), else
 * by an LM_CHECK node the run checks (the run fails alike). shapes: the
 * rule's other sources, whose dim `axis` gives the range. The integer rules
 * read through reshapes (the same values, in order): a reshaped realized
 * tensor is checked now, a reshaped program input by a step over the input
 * itself (which planning runs first: lm_plan_make). */
static loom_tensor *checked(const char *op, const loom_tensor *values, lm_check_rule rule, int axis,
                            lm_node *const *shapes, bool has_ignore, int64_t ignore) {
  lm_node *x = values->node;
  while (rule != LM_CHECK_WEIGHTS && x->op == LM_RESHAPE && !lm_is_computed(x)) x = x->src[0];
  lm_node *src[3] = {x, NULL, NULL};
  int nsrc = lm_check_rule_sources(rule);
  for (int s = 1; s < nsrc; s++) src[s] = shapes[s - 1];
  lm_node *n = lm_node_new(LM_CHECK, nsrc, src, x->shape, x->dtype, x->device);
  if (!n) return lm_error(LOOM_ERR_OOM, "%s: out of memory", op);
  n->requires_grad = false; /* integers, or the weights of a draw */
  n->arg.check.rule = rule;
  n->arg.check.axis = axis;
  n->arg.check.has_ignore = has_ignore;
  n->arg.check.ignore = has_ignore ? ignore : 0;
  const char *called = lm_called_op();
  snprintf(n->arg.check.op, LM_CHECK_OP_LEN, "%s", called ? called : op);
  if (!x->data && x == values->node) return lm_result(n);
  if (!x->data) {
    loom_tensor *base = lm_result(n);
    loom_tensor *r = loom_reshape(base, values->node->shape);
    loom_free(base);
    return r;
  }
  loom_status st = lm_check_now(n);
  lm_node_release(n);
  return st != LOOM_OK ? lm_error_recorded(st) : lm_tensor_ref(values);
}

loom_tensor *lm_checked_index(const char *op, const loom_tensor *index, const lm_node *table,
                              int axis, bool has_ignore, int64_t ignore) {
  lm_node *shapes[1] = {(lm_node *)table};
  return checked(op, index, LM_CHECK_INDEX, axis, shapes, has_ignore, ignore);
}

loom_tensor *lm_checked_start(const char *op, const loom_tensor *start, const lm_node *t,
                              const lm_node *update, int axis) {
  lm_node *shapes[2] = {(lm_node *)t, (lm_node *)update};
  return checked(op, start, LM_CHECK_START, axis, shapes, false, 0);
}

loom_tensor *lm_checked_weights(const char *op, const loom_tensor *probs) {
  return checked(op, probs, LM_CHECK_WEIGHTS, 0, NULL, false, 0);
}
