/* Attention (opset 23), RMSNormalization (23), LinearAttention (27) and
 * CausalConvWithState (27): the transformer ops ONNX gained as whole ops,
 * composed of loom's. */
#include <math.h>
#include <stdlib.h>
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
  loom_tensor *bias = loom_zeros(LOOM_SHAPE(tq, tk), dt, onnx_device(n));
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
        loom_reshape(loom_arange(0, (double)tq, 1, LOOM_I64, onnx_device(n)), LOOM_SHAPE(tq, 1));
    loom_tensor *cols =
        loom_reshape(loom_arange(0, (double)tk, 1, LOOM_I64, onnx_device(n)), LOOM_SHAPE(1, tk));
    loom_tensor *later = loom_gt(cols, loom_add_s(rows, (double)past));
    bias = loom_add(bias, loom_where_s(loom_logical_not(later), loom_zeros_like(later), -INFINITY));
    bias = loom_cast(bias, dt);
  }
  if (onnx_has_in(n, 6)) {
    loom_tensor *len = loom_reshape(loom_cast(onnx_in(n, 6), LOOM_I64), LOOM_SHAPE(batch, 1, 1, 1));
    loom_tensor *cols = loom_reshape(loom_arange(0, (double)tk, 1, LOOM_I64, onnx_device(n)),
                                     LOOM_SHAPE(1, 1, 1, tk));
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

/* A string attribute that must be one of choices (NULL-terminated), the
 * first being its default: the choice's index, or -1 refused naming the value. */
static int attr_choice(onnx_node *n, const char *name, const char *const *choices) {
  char buf[64];
  const Onnx__AttributeProto *a = onnx_attr(n, name);
  if (a && !a->has_s) {
    onnx_refuse(n, LOOM_ERR_VALUE, "attribute %s holds no string", name);
    return -1;
  }
  onnx_attr_string(n, name, choices[0], buf, sizeof buf);
  /* a value cut to the buffer or holding a NUL matches no choice */
  bool whole = !a || a->s.len == strlen(buf);
  for (int i = 0; whole && choices[i]; i++)
    if (strcmp(buf, choices[i]) == 0) return i;
  char list[160] = "";
  for (int i = 0; choices[i]; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s'%s'", i ? ", " : "", choices[i]);
  onnx_refuse(n, LOOM_ERR_VALUE, "%s '%s'%s; one of %s expected", name, buf,
              whole ? "" : " (cut here)", list);
  return -1;
}

/* Whether input i's dim at axis follows a symbolic dim of the model: it
 * differs between the import's traces. */
static bool dim_follows_symbol(onnx_node *n, int i, int axis) {
  onnx_ref r;
  int traces = onnx_ntraces(n->im);
  if (traces < 2 || !onnx_lookup(n->im, n->proto->input[i], &r)) return false;
  return loom_shape_of(r.t[0]).dim[axis] != loom_shape_of(r.t[traces - 1]).dim[axis];
}

/* Refuses input i when it is required and omitted, or given and not a
 * floating-point tensor of rank. */
static loom_status check_float_input(onnx_node *n, int i, const char *name, int rank,
                                     bool required) {
  if (!onnx_has_in(n, i))
    return required ? onnx_refuse(n, LOOM_ERR_VALUE, "input %d (%s) is required", i, name)
                    : LOOM_OK;
  loom_tensor *t = onnx_in(n, i);
  if (!onnx_is_float(loom_dtype_of(t)))
    return onnx_refuse(n, LOOM_ERR_DTYPE, "%s is %s; a floating-point tensor expected", name,
                       loom_dtype_name(loom_dtype_of(t)));
  if (onnx_rank(t) != rank)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "%s has rank %d; %d expected", name, onnx_rank(t), rank);
  return LOOM_OK;
}

/* The longest sequence LinearAttention unrolls, as Scan's (onnx_control.c). */
#define LINEAR_ATTENTION_MAX_STEPS 4096

/* LinearAttention's inputs checked against the reference's rules: q, k, v
 * [B, T, H*D], decay [B, T, H_kv or H_kv*d_k], beta [B, T, H_kv or 1],
 * past_state [B, H_kv, d_k, d_v]. */
static loom_status check_linear_attention(onnx_node *n, const char *rule, bool gating, bool delta,
                                          int64_t hq, int64_t hkv, int64_t *dk, int64_t *dv) {
  static const char *const names[] = {"query", "key", "value", "past_state", "decay", "beta"};
  for (int i = 0; i < 6; i++) {
    loom_status st = check_float_input(n, i, names[i], i == 3 ? 4 : 3, i < 3);
    if (st) return st;
  }
  if (gating != onnx_has_in(n, 4))
    return onnx_refuse(n, LOOM_ERR_VALUE, "update_rule '%s' %s the decay input", rule,
                       gating ? "needs" : "does not take");
  if (delta != onnx_has_in(n, 5))
    return onnx_refuse(n, LOOM_ERR_VALUE, "update_rule '%s' %s the beta input", rule,
                       delta ? "needs" : "does not take");
  loom_shape qs = loom_shape_of(onnx_in(n, 0));
  for (int i = 1; i < 6; i++) {
    if (i == 3 || !onnx_has_in(n, i)) continue;
    loom_shape s = loom_shape_of(onnx_in(n, i));
    if (s.dim[0] != qs.dim[0] || s.dim[1] != qs.dim[1])
      return onnx_refuse(n, LOOM_ERR_SHAPE,
                         "%s's batch and sequence [%lld, %lld] differ from query's [%lld, %lld]",
                         names[i], (long long)s.dim[0], (long long)s.dim[1], (long long)qs.dim[0],
                         (long long)qs.dim[1]);
  }
  int64_t kd = loom_shape_of(onnx_in(n, 1)).dim[2], vd = loom_shape_of(onnx_in(n, 2)).dim[2];
  if (qs.dim[2] % hq || kd % hkv || vd % hkv)
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "query's last dim %lld over q_num_heads %lld, or key's %lld and value's "
                       "%lld over kv_num_heads %lld, leave a remainder",
                       (long long)qs.dim[2], (long long)hq, (long long)kd, (long long)vd,
                       (long long)hkv);
  *dk = qs.dim[2] / hq, *dv = vd / hkv;
  if (*dk < 1 || kd / hkv != *dk)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "query's head size %lld and key's %lld differ or are 0",
                       (long long)*dk, (long long)(kd / hkv));
  if (gating) {
    int64_t last = loom_shape_of(onnx_in(n, 4)).dim[2];
    if (last != hkv && last != hkv * *dk)
      return onnx_refuse(n, LOOM_ERR_SHAPE,
                         "decay's last dim %lld is neither kv_num_heads (%lld) nor "
                         "kv_num_heads * d_k (%lld)",
                         (long long)last, (long long)hkv, (long long)(hkv * *dk));
  }
  if (delta) {
    int64_t last = loom_shape_of(onnx_in(n, 5)).dim[2];
    if (last != hkv && last != 1)
      return onnx_refuse(n, LOOM_ERR_SHAPE,
                         "beta's last dim %lld is neither kv_num_heads (%lld) nor 1",
                         (long long)last, (long long)hkv);
  }
  if (onnx_has_in(n, 3)) {
    loom_shape ps = loom_shape_of(onnx_in(n, 3));
    if (ps.dim[0] != qs.dim[0] || ps.dim[1] != hkv || ps.dim[2] != *dk || ps.dim[3] != *dv)
      return onnx_refuse(n, LOOM_ERR_SHAPE,
                         "past_state is [%lld, %lld, %lld, %lld]; [%lld, %lld, %lld, %lld] "
                         "(batch, kv_num_heads, d_k, d_v) expected",
                         (long long)ps.dim[0], (long long)ps.dim[1], (long long)ps.dim[2],
                         (long long)ps.dim[3], (long long)qs.dim[0], (long long)hkv, (long long)*dk,
                         (long long)*dv);
  }
  if (dim_follows_symbol(n, 0, 1))
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "its sequence length follows a symbolic dim; loom unrolls the recurrence "
                       "over a fixed length. Fix the dim (loom_onnx_opts.dims, or --dim NAME=N)");
  if (qs.dim[1] > LINEAR_ATTENTION_MAX_STEPS)
    return onnx_refuse(n, LOOM_ERR_VALUE, "a sequence of %lld steps; loom unrolls up to %d",
                       (long long)qs.dim[1], LINEAR_ATTENTION_MAX_STEPS);
  return LOOM_OK;
}

/* The recurrence of ONNX's reference, one step per position, in F32 whatever
 * the inputs' dtype (as the reference): per KV head a state S [d_k, d_v],
 *   S <- exp(g_t) S                        (gated rules; g per head or per key dim)
 *   v_t <- beta_t (v_t - S^T k_t)          (delta rules, from the decayed S)
 *   S <- S + k_t v_t^T;  o_t = scale q_t^T S
 * each of a KV head's q_num_heads / kv_num_heads query heads reading its S.
 * chunk_size only tunes a chunked kernel's speed (the output is the
 * recurrence's whatever its value, as in the reference), so any is taken. */
static loom_status op_linear_attention(onnx_node *n) {
  static const char *const rules[] = {"gated_delta", "linear", "gated", "delta", NULL};
  int rule = attr_choice(n, "update_rule", rules);
  if (rule < 0) return LOOM_ERR_VALUE;
  if (!onnx_attr(n, "q_num_heads") || !onnx_attr(n, "kv_num_heads"))
    return onnx_refuse(n, LOOM_ERR_VALUE,
                       "the q_num_heads and kv_num_heads attributes are required");
  int64_t hq = onnx_attr_int(n, "q_num_heads", 0), hkv = onnx_attr_int(n, "kv_num_heads", 0);
  if (hq < 1 || hkv < 1 || hq % hkv)
    return onnx_refuse(n, LOOM_ERR_VALUE,
                       "q_num_heads %lld is not a positive multiple of kv_num_heads %lld",
                       (long long)hq, (long long)hkv);
  bool gating = rule == 0 || rule == 2, delta = rule == 0 || rule == 3;
  int64_t dk = 0, dv = 0;
  loom_status st = check_linear_attention(n, rules[rule], gating, delta, hq, hkv, &dk, &dv);
  if (st) return st;
  loom_tensor *query = onnx_in(n, 0);
  int64_t batch = loom_shape_of(query).dim[0], steps = loom_shape_of(query).dim[1];
  int64_t group = hq / hkv;
  double scale = onnx_attr_float(n, "scale", 0);
  if (scale == 0) scale = 1 / sqrt((double)dk);
  /* [B, H, T, D] in F32; the gate exp(decay) [B, H_kv, T, d_k or 1], beta [B, H_kv or 1, T, 1] */
  loom_tensor *q = loom_cast(split_heads(query, hq), LOOM_F32);
  loom_tensor *k = loom_cast(split_heads(onnx_in(n, 1), hkv), LOOM_F32);
  loom_tensor *v = loom_cast(split_heads(onnx_in(n, 2), hkv), LOOM_F32);
  loom_tensor *gate = NULL, *beta = NULL;
  if (gating) {
    gate = loom_exp(loom_cast(split_heads(onnx_in(n, 4), hkv), LOOM_F32));
  }
  if (delta) {
    loom_tensor *b = onnx_in(n, 5);
    beta = loom_cast(split_heads(b, loom_shape_of(b).dim[2]), LOOM_F32);
  }
  loom_tensor *state = onnx_has_in(n, 3)
                           ? loom_cast(onnx_in(n, 3), LOOM_F32)
                           : loom_zeros(LOOM_SHAPE(batch, hkv, dk, dv), LOOM_F32, onnx_device(n));
  loom_tensor **outs = calloc((size_t)(steps > 0 ? steps : 1), sizeof *outs);
  if (!outs) return onnx_refuse(n, LOOM_ERR_OOM, "out of memory");
  for (int64_t t = 0; t < steps; t++) {
    loom_tensor *k_t = loom_slice(k, 2, t, t + 1, 1), *v_t = loom_slice(v, 2, t, t + 1, 1);
    if (gating) state = loom_mul(state, loom_transpose(loom_slice(gate, 2, t, t + 1, 1), 2, 3));
    if (delta)
      v_t = loom_mul(loom_slice(beta, 2, t, t + 1, 1), loom_sub(v_t, loom_matmul(k_t, state)));
    state = loom_add(state, loom_mul(loom_transpose(k_t, 2, 3), v_t));
    /* the query heads of a KV head side by side: [B, H_kv, group, d_k] */
    loom_tensor *q_t =
        loom_reshape(loom_slice(q, 2, t, t + 1, 1), LOOM_SHAPE(batch, hkv, group, dk));
    outs[t] =
        loom_reshape(loom_mul_s(loom_matmul(q_t, state), scale), LOOM_SHAPE(batch, hq, 1, dv));
  }
  loom_dtype dt = loom_dtype_of(query);
  loom_tensor *y;
  if (steps == 0) {
    y = loom_zeros(LOOM_SHAPE(batch, 0, hq * dv), dt, onnx_device(n));
  } else {
    const int perm[] = {0, 2, 1, 3};
    y = loom_cat(outs, (int)steps, 2);
    y = loom_cast(loom_reshape(loom_permute(y, perm, 4), LOOM_SHAPE(batch, steps, hq * dv)), dt);
  }
  free(outs);
  onnx_out(n, 0, y);
  onnx_out(n, 1, loom_cast(state, onnx_has_in(n, 3) ? loom_dtype_of(onnx_in(n, 3)) : dt));
  return LOOM_OK;
}

/* CausalConvWithState: a depthwise 1-D convolution over [past_state (zeros
 * when absent), input] along the length, no padding, SiLU (alias swish) in
 * F32 when asked; present_state is the last k - 1 positions of that
 * concatenation. */
static loom_status op_causal_conv_with_state(onnx_node *n) {
  static const char *const activations[] = {"none", "silu", "swish", NULL};
  int activation = attr_choice(n, "activation", activations);
  if (activation < 0) return LOOM_ERR_VALUE;
  static const char *const names[] = {"input", "weight", "bias", "past_state"};
  static const int ranks[] = {3, 3, 1, 3};
  for (int i = 0; i < 4; i++) {
    loom_status st = check_float_input(n, i, names[i], ranks[i], i < 2);
    if (st) return st;
  }
  loom_tensor *x = onnx_in(n, 0), *w = onnx_in(n, 1);
  loom_dtype dt = loom_dtype_of(x);
  for (int i = 1; i < 4; i++)
    if (onnx_has_in(n, i) && loom_dtype_of(onnx_in(n, i)) != dt)
      return onnx_refuse(n, LOOM_ERR_DTYPE, "%s is %s and input %s; one dtype expected", names[i],
                         loom_dtype_name(loom_dtype_of(onnx_in(n, i))), loom_dtype_name(dt));
  loom_shape xs = loom_shape_of(x), ws = loom_shape_of(w);
  int64_t channels = xs.dim[1], kernel = ws.dim[2];
  if (ws.dim[0] != channels || ws.dim[1] != 1 || kernel < 1)
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "weight is [%lld, %lld, %lld]; [%lld, 1, k] with k >= 1 expected "
                       "(channels, 1, kernel size)",
                       (long long)ws.dim[0], (long long)ws.dim[1], (long long)kernel,
                       (long long)channels);
  if (onnx_has_in(n, 2) && loom_shape_of(onnx_in(n, 2)).dim[0] != channels)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "bias has %lld values for %lld channels",
                       (long long)loom_shape_of(onnx_in(n, 2)).dim[0], (long long)channels);
  loom_tensor *padded;
  if (onnx_has_in(n, 3)) {
    loom_shape ps = loom_shape_of(onnx_in(n, 3));
    if (ps.dim[0] != xs.dim[0] || ps.dim[1] != channels || ps.dim[2] != kernel - 1)
      return onnx_refuse(n, LOOM_ERR_SHAPE,
                         "past_state is [%lld, %lld, %lld]; [%lld, %lld, %lld] (batch, channels, "
                         "kernel size - 1) expected",
                         (long long)ps.dim[0], (long long)ps.dim[1], (long long)ps.dim[2],
                         (long long)xs.dim[0], (long long)channels, (long long)(kernel - 1));
    loom_tensor *parts[2] = {onnx_in(n, 3), x};
    padded = loom_cat(parts, 2, 2);
  } else {
    const int64_t pads[2] = {kernel - 1, 0};
    padded = loom_pad(x, pads, 2, 0);
  }
  /* a sum over the kernel's taps, in F32: loom's convolutions need a fixed
   * length, and this one follows a symbolic one (each tap's window bounded
   * from the end, which loom's symbolic inference follows) */
  int64_t length = xs.dim[2] + kernel - 1;
  loom_tensor *wide = loom_cast(padded, LOOM_F32), *taps = loom_cast(w, LOOM_F32);
  loom_tensor *y = NULL;
  for (int64_t j = 0; j < kernel; j++) {
    loom_tensor *tap = loom_squeeze(loom_slice(taps, 2, j, j + 1, 1), 2); /* [C, 1] */
    int64_t end = j == kernel - 1 ? length : j - (kernel - 1);
    loom_tensor *term = loom_mul(loom_slice(wide, 2, j, end, 1), tap);
    y = y ? loom_add(y, term) : term;
  }
  if (onnx_has_in(n, 2)) y = loom_add(y, loom_unsqueeze(loom_cast(onnx_in(n, 2), LOOM_F32), 1));
  y = loom_cast(y, dt);
  if (activation > 0) y = loom_cast(loom_silu(loom_cast(y, LOOM_F32)), dt);
  onnx_out(n, 0, y);
  onnx_out(n, 1,
           kernel == 1 ? loom_slice(padded, 2, 0, 0, 1)
                       : loom_slice(padded, 2, 1 - kernel, length, 1));
  return LOOM_OK;
}

const onnx_op onnx_ops_attention[] = {
    ONNX_OP(Attention, op_attention),
    ONNX_OP(RMSNormalization, op_rms_norm),
    ONNX_OP(LinearAttention, op_linear_attention),
    ONNX_OP(CausalConvWithState, op_causal_conv_with_state),
};
const int onnx_ops_attention_count = sizeof onnx_ops_attention / sizeof onnx_ops_attention[0];
