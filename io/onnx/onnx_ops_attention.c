/* Attention (opset 23) and RMSNormalization (23): the transformer ops ONNX
 * gained as whole ops, composed of loom's. */
#include <math.h>
#include <string.h>

#include "io/onnx/onnx.h"

/* [B, T, H*D] as [B, H, T, D]. */
static loom_tensor *split_heads(loom_tensor *x, int64_t heads) {
  loom_shape s = loom_shape_of(x);
  const int perm[] = {0, 2, 1, 3};
  return loom_permute(loom_reshape(x, LOOM_SHAPE(s.dim[0], s.dim[1], heads, s.dim[2] / heads)),
                      perm, 4);
}

/* Each of the heads repeated `times` in place: [h0, h0, h1, h1, ...]. */
static loom_tensor *repeat_heads(loom_tensor *x, int64_t times) {
  loom_shape s = loom_shape_of(x);
  loom_tensor *u = loom_unsqueeze(x, 2);
  loom_tensor *e = loom_expand(u, (loom_shape){5, {s.dim[0], s.dim[1], times, s.dim[2], s.dim[3]}});
  return loom_reshape(e, LOOM_SHAPE(s.dim[0], s.dim[1] * times, s.dim[2], s.dim[3]));
}

/* ONNX's reference order: Q K^T scaled, softcap, + bias (mask, causal,
 * padding), softmax, times V; outputs Y, the present key and value, and the
 * scores at the step qk_matmul_output_mode names. */
static loom_status op_attention(onnx_node *n) {
  loom_tensor *q = onnx_in(n, 0), *k = onnx_in(n, 1), *v = onnx_in(n, 2);
  int rank = onnx_rank(q);
  if (rank != 3 && rank != 4)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "Q has rank %d; 3 or 4 expected", rank);
  int64_t q_heads = onnx_attr_int(n, "q_num_heads", 0),
          kv_heads = onnx_attr_int(n, "kv_num_heads", 0);
  if (rank == 3) {
    if (q_heads < 1 || kv_heads < 1 || q_heads > (int64_t)1 << 20 || kv_heads > (int64_t)1 << 20)
      return onnx_refuse(n, LOOM_ERR_VALUE,
                         "3-D inputs need q_num_heads and kv_num_heads (%lld, %lld)",
                         (long long)q_heads, (long long)kv_heads);
    q = split_heads(q, q_heads), k = split_heads(k, kv_heads), v = split_heads(v, kv_heads);
  }
  loom_shape qs = loom_shape_of(q);
  if (qs.ndim != 4 || qs.dim[3] < 1)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "a query of %d dims with a head size of %lld", qs.ndim,
                       (long long)(qs.ndim == 4 ? qs.dim[3] : 0));
  int64_t batch = qs.dim[0], tq = qs.dim[2];
  double scale = onnx_attr_float(n, "scale", 1 / sqrt((double)qs.dim[3]));
  int64_t past = 0;
  if (onnx_has_in(n, 4)) {
    past = loom_shape_of(onnx_in(n, 4)).dim[2];
    loom_tensor *ks[2] = {onnx_in(n, 4), k};
    k = loom_cat(ks, 2, 2);
  }
  if (onnx_has_in(n, 5)) {
    loom_tensor *vs[2] = {onnx_in(n, 5), v};
    v = loom_cat(vs, 2, 2);
  }
  loom_tensor *present_k = loom_retain(k), *present_v = loom_retain(v);
  int64_t tk = loom_shape_of(k).dim[2];
  int64_t hq = qs.dim[1], hk = loom_shape_of(k).dim[1];
  if (hq != hk) {
    if (hk < 1 || hq % hk)
      return onnx_refuse(n, LOOM_ERR_SHAPE, "%lld query heads over %lld key heads", (long long)hq,
                         (long long)hk);
    k = repeat_heads(k, hq / hk), v = repeat_heads(v, hq / hk);
  }
  loom_dtype dt = loom_dtype_of(q);
  loom_tensor *scores = loom_mul_s(loom_matmul(q, loom_transpose(k, 2, 3)), scale);
  double softcap = onnx_attr_float(n, "softcap", 0);
  if (softcap > 0) scores = loom_mul_s(loom_tanh(loom_div_s(scores, softcap)), softcap);
  loom_tensor *capped = loom_retain(scores);
  /* the bias: the mask (padded to the keys with "masked"), causality, padding */
  loom_tensor *bias = loom_zeros(LOOM_SHAPE(tq, tk), dt, LOOM_CPU);
  if (onnx_has_in(n, 3)) {
    loom_tensor *mask = onnx_in(n, 3);
    loom_shape ms = loom_shape_of(mask);
    int64_t short_by = tk - ms.dim[ms.ndim - 1];
    bool boolean = loom_dtype_of(mask) == LOOM_BOOL;
    if (short_by > 0) {
      int64_t pads[2] = {0, short_by};
      mask = boolean ? loom_pad(mask, pads, 2, 0) : loom_pad(mask, pads, 2, -INFINITY);
    }
    loom_tensor *m =
        boolean ? loom_where_s(mask, loom_zeros_like(bias), -INFINITY) : loom_cast(mask, dt);
    bias = loom_add(bias, m);
  }
  if (onnx_attr_int(n, "is_causal", 0)) {
    loom_tensor *rows =
        loom_reshape(loom_arange(0, (double)tq, 1, LOOM_I64, LOOM_CPU), LOOM_SHAPE(tq, 1));
    loom_tensor *cols =
        loom_reshape(loom_arange(0, (double)tk, 1, LOOM_I64, LOOM_CPU), LOOM_SHAPE(1, tk));
    loom_tensor *later = loom_gt(cols, loom_add_s(rows, (double)past));
    bias = loom_add(bias, loom_where_s(loom_logical_not(later), loom_zeros_like(later), -INFINITY));
    bias = loom_cast(bias, dt);
  }
  if (onnx_has_in(n, 6)) {
    loom_tensor *len = loom_reshape(loom_cast(onnx_in(n, 6), LOOM_I64), LOOM_SHAPE(batch, 1, 1, 1));
    loom_tensor *cols =
        loom_reshape(loom_arange(0, (double)tk, 1, LOOM_I64, LOOM_CPU), LOOM_SHAPE(1, 1, 1, tk));
    loom_tensor *keep = loom_lt(cols, len);
    bias = loom_add(bias, loom_cast(loom_where_s(keep, loom_zeros_like(cols), -INFINITY), dt));
  }
  scores = loom_add(scores, bias);
  loom_tensor *probs = loom_softmax(scores, 3);
  loom_tensor *y = loom_matmul(probs, v);
  if (rank == 3) {
    const int perm[] = {0, 2, 1, 3};
    y = loom_reshape(loom_permute(y, perm, 4), LOOM_SHAPE(batch, tq, -1));
  }
  onnx_out(n, 0, y);
  onnx_out(n, 1, present_k);
  onnx_out(n, 2, present_v);
  int64_t mode = onnx_attr_int(n, "qk_matmul_output_mode", 0);
  onnx_out(n, 3, loom_retain(mode == 2 ? scores : mode == 3 ? probs : capped));
  return LOOM_OK;
}

/* x / sqrt(mean(x^2) + eps) * scale over the dims from axis on. */
static loom_status op_rms_norm(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int axes[LOOM_MAX_DIMS], k;
  loom_status st = onnx_trailing_axes(n, onnx_rank(x), axes, &k);
  if (st) return st;
  loom_dtype dt = loom_dtype_of(x);
  loom_tensor *w = loom_cast(x, dt == LOOM_F64 ? LOOM_F64 : LOOM_F32);
  loom_tensor *ms = loom_mean(loom_mul(w, w), axes, k, true);
  loom_tensor *y = loom_mul(w, loom_rsqrt(loom_add_s(ms, onnx_attr_float(n, "epsilon", 1e-5))));
  onnx_out(n, 0, loom_mul(loom_cast(y, dt), onnx_in(n, 1)));
  return LOOM_OK;
}

const onnx_op onnx_ops_attention[] = {
    ONNX_OP(Attention, op_attention),
    ONNX_OP(RMSNormalization, op_rms_norm),
};
const int onnx_ops_attention_count = sizeof onnx_ops_attention / sizeof onnx_ops_attention[0];
