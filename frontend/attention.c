/* The pieces of attention (torch's tril, triu, masked_fill, where with a
 * scalar, chunk, split, tanh-approximate GELU and
 * F.scaled_dot_product_attention), composed from the core ops: their
 * gradients come from the rules of the ops they are made of, and fusion
 * makes one kernel of each elementwise run (the scale, the mask and the
 * softmax of attention's scores among them). Attention without gradients is
 * one fused op instead (LM_ATTENTION) where its kernels serve. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

static const char *shape_text(const loom_tensor *t, char *buf, size_t len) {
  return lm_shape_str(&t->node->shape, buf, len);
}

/* ------------------------------------------------------------ where, masks */

LM_PUBLIC(loom_tensor *, loom_where_s, (const loom_tensor *cond, const loom_tensor *a, double s),
          (cond, a, s)) {
  loom_tensor *err;
  if ((err = lm_check("loom_where_s", a))) return err;
  int token = lm_composite_begin();
  loom_tensor *c = loom_full(LOOM_SHAPE0, s, lm_scalar_promote(a->node->dtype, s), a->node->device);
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
                    shape_text(mask, sm, sizeof sm), shape_text(a, sa, sizeof sa));
  int token = lm_composite_begin();
  loom_tensor *v = loom_full(LOOM_SHAPE0, value, dt, a->node->device);
  return lm_composite_end(token, loom_where(mask, v, a));
}

/* ------------------------------------------------------------ slice update */

static loom_tensor *slice_update_checked(const loom_tensor *t, int axis, const loom_tensor *start,
                                         const loom_tensor *update) {
  const loom_shape *ts = &t->node->shape, *us = &update->node->shape;
  int64_t size = ts->dim[axis], n = us->dim[axis];
  loom_device dev = t->node->device;
  int token = lm_composite_begin();
  if (n == 0) return lm_composite_end(token, loom_reshape(t, *ts)); /* nothing replaced */
  loom_shape along = *ts;                                           /* [1, .., size, .., 1] */
  for (int d = 0; d < along.ndim; d++) along.dim[d] = d == axis ? size : 1;
  loom_tensor *at = loom_arange(0, (double)size, 1, LOOM_I64, dev);
  /* the start clamped to [0, size - n] (jax's clamp), size - n from the last
   * position (a slice from the end) rather than a number computed from the
   * size, so that over a symbolic size it follows */
  loom_tensor *last = loom_reshape(loom_slice(at, 0, -1, INT64_MAX, 1), LOOM_SHAPE0);
  loom_tensor *first = loom_minimum(loom_maximum_s(loom_cast(start, LOOM_I64), 0),
                                    loom_sub_s(last, (double)(n - 1)));
  /* the window's mask from an iota already in the broadcast shape: the where's
   * kernel computes it inline (an iota reshaped after the comparison is stored) */
  loom_tensor *offset = loom_sub(loom_reshape(at, along), first);
  loom_tensor *inside = n == 1
                            ? loom_eq_s(offset, 0) /* one comparison: inlined where it is read */
                            : loom_logical_and(loom_ge_s(offset, 0), loom_lt_s(offset, (double)n));
  const loom_tensor *rows = update; /* one row broadcasts along the axis */
  if (n > 1)
    rows = loom_index_select(update, axis, loom_clamp(loom_sub(at, first), 0, (double)(n - 1)));
  return lm_composite_end(token, loom_where(inside, rows, t));
}

LM_PUBLIC(loom_tensor *, loom_slice_update,
          (const loom_tensor *t, int axis, const loom_tensor *start, const loom_tensor *update),
          (t, axis, start, update)) {
  const char *op = "loom_slice_update";
  loom_tensor *err;
  if ((err = lm_check(op, t)) || (err = lm_check(op, start)) || (err = lm_check(op, update)))
    return err;
  const loom_shape *ts = &t->node->shape, *us = &update->node->shape;
  char a[128], b[128];
  if (update->node->dtype != t->node->dtype)
    return lm_error(LOOM_ERR_DTYPE, "%s: update is %s, the tensor %s", op,
                    loom_dtype_name(update->node->dtype), loom_dtype_name(t->node->dtype));
  if (!lm_dtype_is_int(start->node->dtype) || start->node->shape.ndim != 0)
    return lm_error(LOOM_ERR_DTYPE, "%s: start must be a 0-d integer tensor, got %s %s", op,
                    loom_dtype_name(start->node->dtype), shape_text(start, a, sizeof a));
  if (start->node->device.type != t->node->device.type ||
      start->node->device.index != t->node->device.index ||
      update->node->device.type != t->node->device.type ||
      update->node->device.index != t->node->device.index)
    return lm_error(LOOM_ERR_DEVICE, "%s: the tensor, start and update are on different devices",
                    op);
  int nd = ts->ndim;
  if (axis < -nd || axis >= nd || nd == 0)
    return lm_error(LOOM_ERR_AXIS, "%s: axis %d is out of range for %s", op, axis,
                    shape_text(t, a, sizeof a));
  if (axis < 0) axis += nd;
  bool fits = us->ndim == nd && us->dim[axis] <= ts->dim[axis];
  for (int d = 0; fits && d < nd; d++) fits = d == axis || us->dim[d] == ts->dim[d];
  if (!fits)
    return lm_error(LOOM_ERR_SHAPE,
                    "%s: update %s does not fit %s along axis %d (the other dims equal, at most "
                    "the tensor's size along it)",
                    op, shape_text(update, b, sizeof b), shape_text(t, a, sizeof a), axis);
  return slice_update_checked(t, axis, start, update);
}

/* column - row of the last two dims, compared with diagonal (I64 iotas, broadcast). */
static loom_tensor *triangle(const char *op, const loom_tensor *a, int64_t diagonal, bool lower) {
  loom_tensor *err;
  if ((err = lm_check(op, a))) return err;
  const loom_shape *s = &a->node->shape;
  if (s->ndim < 2) {
    char sa[128];
    return lm_error(LOOM_ERR_SHAPE, "%s: needs at least 2 dims, got %s", op,
                    shape_text(a, sa, sizeof sa));
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

/* ------------------------------------------------------------ split, chunk */

/* Pieces of `size` along axis (the last one shorter), as views. */
static loom_status pieces(const char *op, const loom_tensor *a, int64_t size, int axis,
                          loom_tensor **out, int cap, int *n) {
  *n = 0;
  int ax = axis;
  loom_tensor *err = lm_check(op, a);
  if (!err && !out) err = lm_error(LOOM_ERR_NULL, "%s: no array for the pieces", op);
  if (!err) err = lm_check_axis(op, &ax, a->node->shape.ndim);
  if (err) return lm_error_status(err);
  int64_t len = a->node->shape.dim[ax];
  int64_t count = len == 0 ? 1 : (len + size - 1) / size;
  if (count > cap)
    return lm_fail(LOOM_ERR_VALUE,
                   "%s: %lld pieces of %lld along axis %d (length %lld), room for %d", op,
                   (long long)count, (long long)size, axis, (long long)len, cap);
  for (int64_t i = 0; i < count; i++) {
    int64_t start = i * size, end = start + size < len ? start + size : len;
    out[i] = loom_slice(a, ax, start, end, 1);
    if (loom_status_of(out[i]) != LOOM_OK) {
      loom_status st = loom_status_of(out[i]);
      for (int64_t j = 0; j <= i; j++) loom_free(out[j]), out[j] = NULL;
      return st;
    }
  }
  *n = (int)count;
  return LOOM_OK;
}

LM_PUBLIC(loom_status, loom_split,
          (const loom_tensor *a, int64_t size, int axis, loom_tensor **out, int cap, int *n),
          (a, size, axis, out, cap, n)) {
  int ignored;
  if (!n) n = &ignored;
  *n = 0;
  if (size <= 0)
    return lm_fail(LOOM_ERR_VALUE, "loom_split: piece size %lld is not positive", (long long)size);
  return pieces("loom_split", a, size, axis, out, cap, n);
}

LM_PUBLIC(loom_status, loom_chunk,
          (const loom_tensor *a, int chunks, int axis, loom_tensor **out, int *n),
          (a, chunks, axis, out, n)) {
  int ignored;
  if (!n) n = &ignored;
  *n = 0;
  if (chunks <= 0) return lm_fail(LOOM_ERR_VALUE, "loom_chunk: %d chunks is not positive", chunks);
  int ax = axis;
  loom_tensor *err = lm_check("loom_chunk", a);
  if (!err) err = lm_check_axis("loom_chunk", &ax, a->node->shape.ndim);
  if (err) return lm_error_status(err);
  int64_t len = a->node->shape.dim[ax];
  int64_t size = (len + chunks - 1) / chunks; /* torch.chunk: ceil, so maybe fewer chunks */
  return pieces("loom_chunk", a, size > 0 ? size : 1, axis, out, chunks, n);
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

/* ------------------------------------------------------------ attention */

/* The fused kernel (LM_ATTENTION), where it serves: F32 (on the CPU or a
 * CUDA device), a bool or F32 mask if any, head dims up to
 * LM_ATTENTION_MAX_HEAD, nothing empty; where a gradient flows, on the CPU
 * (on CUDA with LOOM_ATTENTION=fused), not into the mask and over at least
 * LM_ATTENTION_TRAIN_MIN_KEYS keys (autograd records the fused backward,
 * LM_ATTENTION_GRAD; a mask's gradient and shorter rows take the
 * composition below: measured on an AMD
 * EPYC Zen 4, 2 threads, 12 heads of D 64, causal, forward and backward:
 * fused/composed 1.03x the time at 64 keys, 1.02x at 80, 0.83x at 96, 0.73x
 * at 128, 0.47x at 256, 0.49x at 1,024);
 * on CUDA, queries of at most LM_ATTENTION_CUDA_MAX_ROWS rows (decoding's),
 * where it is faster than the composition's tiled GEMMs (measured on an H200:
 * a token of GPT-2 124M over 1,024 positions 4.3 against 11.2 ms; 12 heads of
 * 1,024 causal queries 1.0 against 0.38 ms). LOOM_ATTENTION=composite records
 * the composition everywhere, =fused the kernel wherever it can run. NULL
 * where it does not serve. */
enum { LM_ATTENTION_CUDA_MAX_ROWS = 16, LM_ATTENTION_TRAIN_MIN_KEYS = 96 };

static loom_tensor *fused_attention(const loom_tensor *q, const loom_tensor *k,
                                    const loom_tensor *v, const loom_tensor *mask, bool causal,
                                    double scale) {
  const char *how = getenv("LOOM_ATTENTION");
  if (how && !strcmp(how, "composite")) return NULL;
  bool forced = how && !strcmp(how, "fused");
  if (mask && mask->node->dtype != LOOM_BOOL && mask->node->dtype != LOOM_F32) return NULL;
  const lm_node *n[4] = {q->node, k->node, v->node, mask ? mask->node : NULL};
  int nsrc = mask ? 4 : 3;
  bool flows = false; /* a gradient, to q, k or v */
  for (int s = 0; s < nsrc; s++) {
    if ((s < 3 && n[s]->dtype != LOOM_F32) || n[s]->device.type != n[0]->device.type ||
        n[s]->device.index != n[0]->device.index || lm_shape_numel(&n[s]->shape) == 0)
      return NULL;
    if (lm_grad_enabled() && n[s]->requires_grad) {
      if (s == 3) return NULL; /* the mask's gradient: the composition's */
      flows = true;
    }
  }

  int nd = n[0]->shape.ndim, nb = nd - 2;
  int64_t d = n[0]->shape.dim[nd - 1], dv = n[2]->shape.dim[nd - 1];
  if (nb > LOOM_MAX_DIMS - 2 || d > LM_ATTENTION_MAX_HEAD || dv > LM_ATTENTION_MAX_HEAD)
    return NULL;
  loom_shape batch = {nb, {0}};
  for (int x = 0; x < nb; x++) batch.dim[x] = 1;
  for (int s = 0; s < 3; s++) {
    loom_shape b = {nb, {0}}, joined;
    for (int x = 0; x < nb; x++) b.dim[x] = n[s]->shape.dim[x];
    if (!lm_broadcast_shape(&batch, &b, &joined)) return NULL; /* the composition says why */
    batch = joined;
  }
  int64_t tq = n[0]->shape.dim[nb], tk = n[1]->shape.dim[nb];
  if (n[0]->device.type == LOOM_DEVICE_CUDA && tq > LM_ATTENTION_CUDA_MAX_ROWS && !forced)
    return NULL;
  if (flows && tk < LM_ATTENTION_TRAIN_MIN_KEYS && !forced) return NULL;
  /* CUDA's fused backward has run on the emulated device only: until a GPU
   * measures it against the composition, training composes unless forced */
  if (flows && n[0]->device.type == LOOM_DEVICE_CUDA && !forced) return NULL;
  loom_shape mask_full = batch, mask_joined;
  mask_full.ndim = nd, mask_full.dim[nb] = tq, mask_full.dim[nb + 1] = tk;
  if (mask && (!lm_broadcast_shape(&mask_full, &n[3]->shape, &mask_joined) ||
               !lm_shape_eq(&mask_joined, &mask_full)))
    return NULL;
  lm_node *full[4] = {NULL, NULL, NULL, NULL};
  bool made = true;
  for (int s = 0; s < nsrc; s++) {
    loom_shape want = batch;
    want.ndim = nd;
    want.dim[nb] = n[s]->shape.dim[nb], want.dim[nb + 1] = n[s]->shape.dim[nb + 1];
    full[s] = nb_broadcast((lm_node *)n[s], s == 3 ? mask_full : want);
    made &= full[s] != NULL;
  }
  loom_shape out = batch;
  out.ndim = nd;
  out.dim[nb] = tq, out.dim[nb + 1] = dv;
  lm_node *r = made ? lm_node_new(LM_ATTENTION, nsrc, full, out, LOOM_F32, n[0]->device) : NULL;
  if (r) {
    r->arg.attn.scale = scale, r->arg.attn.causal = causal;
    r->arg.attn.mask = !mask                            ? LM_ATTENTION_NO_MASK
                       : mask->node->dtype == LOOM_BOOL ? LM_ATTENTION_BOOL_MASK
                                                        : LM_ATTENTION_ADD_MASK;
  }
  nb_drop(full[0], full[1], full[2], full[3]);
  return lm_result(r);
}

/* q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv]: softmax(q k^T * scale + mask) v. */
LM_PUBLIC(loom_tensor *, loom_scaled_dot_product_attention,
          (const loom_tensor *q, const loom_tensor *k, const loom_tensor *v,
           const loom_tensor *mask, bool causal, double scale),
          (q, k, v, mask, causal, scale)) {
  const char *op = "loom_scaled_dot_product_attention";
  loom_tensor *err;
  if ((err = lm_check(op, q)) || (err = lm_check(op, k)) || (err = lm_check(op, v)) ||
      (mask && (err = lm_check(op, mask))))
    return err;
  const loom_shape *qs = &q->node->shape, *ks = &k->node->shape, *vs = &v->node->shape;
  char a[128], b[128], c[128];
  if (qs->ndim < 2 || ks->ndim < 2 || vs->ndim < 2 || qs->ndim != ks->ndim || ks->ndim != vs->ndim)
    return lm_error(LOOM_ERR_SHAPE, "%s: q %s, k %s, v %s: need [..., T, D] each, the same rank",
                    op, shape_text(q, a, sizeof a), shape_text(k, b, sizeof b),
                    shape_text(v, c, sizeof c));
  int nd = qs->ndim;
  int64_t tq = qs->dim[nd - 2], d = qs->dim[nd - 1], tk = ks->dim[nd - 2];
  if (ks->dim[nd - 1] != d || vs->dim[nd - 2] != tk)
    return lm_error(LOOM_ERR_SHAPE,
                    "%s: q %s, k %s, v %s: q and k need the same last dim, k and v the same "
                    "length",
                    op, shape_text(q, a, sizeof a), shape_text(k, b, sizeof b),
                    shape_text(v, c, sizeof c));
  if (!loom_dtype_is_float(q->node->dtype))
    return lm_error(LOOM_ERR_DTYPE, "%s: q is %s; attention needs floats", op,
                    loom_dtype_name(q->node->dtype));
  if (mask && causal)
    return lm_error(LOOM_ERR_VALUE,
                    "%s: a mask and causal together (give one: causal is the "
                    "lower triangle)",
                    op);
  if (!(scale >= 0) || isinf(scale))
    return lm_error(LOOM_ERR_VALUE, "%s: scale %g is not a finite value >= 0", op, scale);
  if (scale == 0) scale = 1 / sqrt((double)(d > 0 ? d : 1));
  /* grouped-query attention: H query heads over Hkv key/value heads, each
   * key/value head serving H / Hkv consecutive query heads */
  int token = lm_composite_begin();
  const loom_tensor *qq = q, *kk = k, *vv = v, *mm = mask;
  int64_t h = nd >= 3 ? qs->dim[nd - 3] : 1, hkv = nd >= 3 ? ks->dim[nd - 3] : 1;
  bool grouped = nd >= 3 && hkv != h && hkv > 1 && vs->dim[nd - 3] == hkv && h % hkv == 0;
  if (grouped) {
    loom_shape sq = *qs, skv = *ks, sv = *vs;
    sq.ndim = skv.ndim = sv.ndim = nd + 1;
    sq.dim[nd - 3] = hkv, sq.dim[nd - 2] = h / hkv, sq.dim[nd - 1] = tq, sq.dim[nd] = d;
    skv.dim[nd - 2] = 1, skv.dim[nd - 1] = tk, skv.dim[nd] = d;
    sv.dim[nd - 2] = 1, sv.dim[nd - 1] = tk, sv.dim[nd] = vs->dim[nd - 1];
    qq = loom_reshape(q, sq), kk = loom_reshape(k, skv), vv = loom_reshape(v, sv);
    if (mask && mask->node->shape.ndim >= 3) { /* its head dim, grouped the same way */
      loom_shape ms = mask->node->shape;
      int md = ms.ndim;
      int64_t mh = ms.dim[md - 3];
      ms.ndim = md + 1;
      ms.dim[md] = ms.dim[md - 1], ms.dim[md - 1] = ms.dim[md - 2];
      ms.dim[md - 3] = mh == h ? hkv : 1, ms.dim[md - 2] = mh == h ? h / hkv : 1;
      mm = loom_reshape(mask, ms);
    }
  }
  loom_tensor *fused = fused_attention(qq, kk, vv, mm, causal, scale);
  if (fused) {
    if (grouped) {
      loom_shape so = *qs;
      so.dim[nd - 1] = vs->dim[nd - 1];
      fused = loom_reshape(fused, so);
    }
    return lm_composite_end(token, fused);
  }
  loom_tensor *scores = loom_mul_s(loom_matmul(qq, loom_transpose(kk, -2, -1)), scale);
  if (causal) { /* torch's is_causal: query i attends to keys 0..i */
    loom_tensor *rows =
        loom_reshape(loom_arange(0, (double)tq, 1, LOOM_I64, q->node->device), LOOM_SHAPE(tq, 1));
    loom_tensor *later = loom_gt(loom_arange(0, (double)tk, 1, LOOM_I64, q->node->device), rows);
    scores = loom_masked_fill(scores, later, -INFINITY);
  } else if (mm && mm->node->dtype == LOOM_BOOL) { /* true: attend, as torch */
    scores = loom_masked_fill(scores, loom_logical_not(mm), -INFINITY);
  } else if (mm) {
    scores = loom_add(scores, mm); /* additive */
  }
  loom_tensor *out = loom_matmul(loom_softmax(scores, -1), vv);
  if (grouped) {
    loom_shape so = *qs;
    so.dim[nd - 1] = vs->dim[nd - 1];
    out = loom_reshape(out, so);
  }
  return lm_composite_end(token, out);
}
