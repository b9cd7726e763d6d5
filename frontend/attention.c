/* torch's F.scaled_dot_product_attention, composed from the core ops (a
 * matmul, the scale and the mask, a softmax, a matmul): its gradients come
 * from the rules of the ops it is made of, and fusion makes one kernel of
 * each elementwise run (the scale, the mask and the softmax of the scores).
 * Where its kernels serve, it is one fused op instead (LM_ATTENTION, and
 * LM_ATTENTION_GRAD for its gradients). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

static const char *shape_text(const loom_tensor *t, char *buf, size_t len) {
  return lm_shape_str(&t->node->shape, buf, len);
}

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

/* What the arguments ask for, once they are known to fit. */
typedef struct attention_args {
  int64_t heads, kv_heads; /* H (dim -3 of q), Hkv (of k and v together); 1 below 3 dims */
  bool grouped;            /* H a multiple of Hkv > 1: query head i uses kv head i / (H / Hkv) */
  loom_shape scores;       /* [batch..., heads, Tq, Tk], q's, k's and v's batch dims broadcast */
  double scale;
} attention_args;

/* torch 2's rules for F.scaled_dot_product_attention's arguments, checked up
 * front so that every refusal names what the caller passed (an inner op's
 * shapes would name tensors the caller never made). */
static loom_tensor *check_attention(const char *op, const loom_tensor *q, const loom_tensor *k,
                                    const loom_tensor *v, const loom_tensor *mask, bool causal,
                                    double scale, attention_args *args) {
  const loom_shape *qs = &q->node->shape, *ks = &k->node->shape, *vs = &v->node->shape;
  char a[128], b[128], c[128], m[128];
  shape_text(q, a, sizeof a), shape_text(k, b, sizeof b), shape_text(v, c, sizeof c);
  if (qs->ndim < 2 || ks->ndim < 2 || vs->ndim < 2 || qs->ndim != ks->ndim || ks->ndim != vs->ndim)
    return lm_error(LOOM_ERR_SHAPE, "%s: q %s, k %s, v %s: need [..., T, D] each, the same rank",
                    op, a, b, c);
  int nd = qs->ndim;
  int64_t tq = qs->dim[nd - 2], d = qs->dim[nd - 1], tk = ks->dim[nd - 2];
  if (ks->dim[nd - 1] != d || vs->dim[nd - 2] != tk)
    return lm_error(LOOM_ERR_SHAPE,
                    "%s: q %s, k %s, v %s: q and k need the same last dim, k and v the same "
                    "length",
                    op, a, b, c);
  loom_dtype dt = q->node->dtype;
  if (!loom_dtype_is_float(dt))
    return lm_error(LOOM_ERR_DTYPE, "%s: q is %s; attention needs floats", op, loom_dtype_name(dt));
  if (k->node->dtype != dt || v->node->dtype != dt)
    return lm_error(LOOM_ERR_DTYPE, "%s: q is %s, k %s, v %s: q, k and v need one dtype", op,
                    loom_dtype_name(dt), loom_dtype_name(k->node->dtype),
                    loom_dtype_name(v->node->dtype));
  const lm_node *on[4] = {q->node, k->node, v->node, mask ? mask->node : NULL};
  for (int i = 1; i < (mask ? 4 : 3); i++)
    if (!lm_device_eq(on[i]->device, q->node->device)) {
      char da[32], db[32];
      return lm_error(LOOM_ERR_DEVICE, "%s: q is on %s, %s on %s (one device for all)", op,
                      lm_device_str(q->node->device, da, sizeof da),
                      i == 1   ? "k"
                      : i == 2 ? "v"
                               : "the mask",
                      lm_device_str(on[i]->device, db, sizeof db));
    }
  /* heads: k's and v's broadcast together; q's a multiple of theirs */
  int64_t h = nd >= 3 ? qs->dim[nd - 3] : 1, hk = nd >= 3 ? ks->dim[nd - 3] : 1;
  int64_t hv = nd >= 3 ? vs->dim[nd - 3] : 1;
  if (hk != hv && hk != 1 && hv != 1)
    return lm_error(LOOM_ERR_SHAPE,
                    "%s: key heads (%lld) and value heads (%lld) differ (k %s, v %s): they must "
                    "be equal, or one of them 1",
                    op, (long long)hk, (long long)hv, b, c);
  int64_t hkv = hk > hv ? hk : hv;
  bool grouped = hkv != h && hkv > 1 && h != 1;
  if (grouped && h % hkv != 0)
    return lm_error(LOOM_ERR_SHAPE,
                    "%s: query heads (%lld) must be a multiple of key/value heads (%lld) (q %s, "
                    "k %s, v %s)",
                    op, (long long)h, (long long)hkv, a, b, c);
  /* the other batch dims broadcast; the scores are [batch..., H, Tq, Tk] */
  loom_shape scores = {nd, {0}};
  for (int x = 0; x < nd - 3; x++) {
    int64_t e[3] = {qs->dim[x], ks->dim[x], vs->dim[x]}, n = 1;
    for (int i = 0; i < 3; i++) {
      if (e[i] != 1 && n != 1 && e[i] != n)
        return lm_error(LOOM_ERR_SHAPE,
                        "%s: the batch dims of q %s, k %s, v %s do not broadcast (dim %d: %lld, "
                        "%lld, %lld)",
                        op, a, b, c, x, (long long)e[0], (long long)e[1], (long long)e[2]);
      if (e[i] != 1) n = e[i];
    }
    scores.dim[x] = n;
  }
  if (nd >= 3) scores.dim[nd - 3] = h > hkv ? h : hkv;
  scores.dim[nd - 2] = tq, scores.dim[nd - 1] = tk;
  if (mask) {
    loom_dtype mt = mask->node->dtype;
    if (mt != LOOM_BOOL && mt != LOOM_F32 && mt != dt)
      return lm_error(LOOM_ERR_DTYPE,
                      "%s: the mask is %s and q %s: a mask is bool (true: attend) or added "
                      "floats of q's dtype or f32, as torch's attn_mask",
                      op, loom_dtype_name(mt), loom_dtype_name(dt));
    loom_shape joined;
    if (!lm_broadcast_shape(&scores, &mask->node->shape, &joined) ||
        !lm_shape_eq(&joined, &scores)) {
      char w[128];
      return lm_error(LOOM_ERR_SHAPE,
                      "%s: the mask %s does not broadcast to the scores' shape %s ([..., Tq, "
                      "Tk] for q %s, k %s)",
                      op, shape_text(mask, m, sizeof m), lm_shape_str(&scores, w, sizeof w), a, b);
    }
    if (causal)
      return lm_error(LOOM_ERR_VALUE,
                      "%s: a mask and causal together (give one: causal is the "
                      "lower triangle)",
                      op);
  }
  /* torch's scale=None is 0 here, a real zero LOOM_ZERO (include/loom.h) */
  if (!(scale >= 0) || isinf(scale))
    return lm_error(LOOM_ERR_VALUE, "%s: scale %g is not a finite value >= 0", op, scale);
  args->heads = h, args->kv_heads = hkv, args->grouped = grouped, args->scores = scores;
  args->scale = lm_option(scale, 1 / sqrt((double)(d > 0 ? d : 1)));
  return NULL;
}

/* q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv]: softmax(q k^T * scale + mask) v. */
LM_PUBLIC(loom_tensor *, loom_scaled_dot_product_attention,
          (const loom_tensor *q, const loom_tensor *k, const loom_tensor *v,
           const loom_tensor *mask, bool causal, double scale),
          (q, k, v, mask, causal, scale)) {
  const char *op = "loom_scaled_dot_product_attention";
  loom_tensor *err;
  attention_args args = {0};
  if ((err = lm_check(op, q)) || (err = lm_check(op, k)) || (err = lm_check(op, v)) ||
      (mask && (err = lm_check(op, mask))) ||
      (err = check_attention(op, q, k, v, mask, causal, scale, &args)))
    return err;
  const loom_shape *qs = &q->node->shape, *ks = &k->node->shape, *vs = &v->node->shape;
  int nd = qs->ndim;
  int64_t tq = qs->dim[nd - 2], d = qs->dim[nd - 1], tk = ks->dim[nd - 2];
  scale = args.scale;
  loom_shape out_shape = args.scores; /* [batch..., H, Tq, Dv] */
  out_shape.dim[nd - 1] = vs->dim[nd - 1];
  /* grouped-query attention: H query heads over Hkv key/value heads, each
   * key/value head serving H / Hkv consecutive query heads */
  int token = lm_composite_begin();
  const loom_tensor *qq = q, *kk = k, *vv = v, *mm = mask;
  int64_t h = args.heads, hkv = args.kv_heads;
  bool grouped = args.grouped;
  if (grouped) { /* k's or v's heads may be 1: they broadcast over the groups */
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
    if (grouped) fused = loom_reshape(fused, out_shape);
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
  } else if (mm) { /* added; an F32 mask to BF16 or F16 scores rounds once, as torch's add_ */
    scores = loom_add(scores, mm);
    if (loom_dtype_of(scores) != q->node->dtype) scores = loom_cast(scores, q->node->dtype);
  }
  loom_tensor *out = loom_matmul(loom_softmax(scores, -1), vv);
  if (grouped) out = loom_reshape(out, out_shape);
  return lm_composite_end(token, out);
}
