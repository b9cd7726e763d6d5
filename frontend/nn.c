/* Neural-network ops (torch.nn.functional), composed from the core ops and
 * two IR ops of their own: LM_WINDOW (sliding windows, for convolution and
 * pooling) and LM_GATHER (embedding rows). Everything here records; the
 * gradients come from the rules of the ops they are made of. */
#include <math.h>
#include <string.h>

#include "frontend/frontend.h"

/* Frees the intermediate references a composite made (any NULL ignored). */
static void drop(loom_tensor *a, loom_tensor *b, loom_tensor *c, loom_tensor *d) {
  loom_free(a), loom_free(b), loom_free(c), loom_free(d);
}

LM_PUBLIC(loom_tensor *, loom_linear_f,
          (const loom_tensor *x, const loom_tensor *w, const loom_tensor *b), (x, w, b)) {
  loom_tensor *err;
  if ((err = lm_check("loom_linear_f", w))) return err;
  if (w->node->shape.ndim != 2) {
    char s[128];
    return lm_error(LOOM_ERR_SHAPE, "loom_linear_f: weight must be [out, in], got %s",
                    lm_shape_str(&w->node->shape, s, sizeof s));
  }
  loom_tensor *wt = loom_transpose(w, 0, 1);
  loom_tensor *y = loom_matmul(x, wt);
  loom_tensor *r = b ? loom_add(y, b) : loom_retain(y);
  drop(wt, y, NULL, NULL);
  return r;
}

/* ------------------------------------------------------------ windows */

static int or_default(int v, int dflt) { return v > 0 ? v : dflt; }

/* Sliding windows over the last two dims of a (already padded). */
static loom_tensor *windows(const char *name, const loom_tensor *a, const int64_t kernel[2],
                            const int64_t stride[2], const int64_t dilation[2]) {
  lm_node *n = a->node;
  int nd = n->shape.ndim;
  loom_shape s = n->shape;
  s.ndim = nd + 2;
  for (int i = 0; i < 2; i++) {
    int64_t span = dilation[i] * (kernel[i] - 1) + 1, len = n->shape.dim[nd - 2 + i];
    if (span > len) {
      char sb[128];
      return lm_error(LOOM_ERR_SHAPE, "%s: a %lldx%lld window (dilation %lld) does not fit in %s",
                      name, (long long)kernel[0], (long long)kernel[1], (long long)dilation[i],
                      lm_shape_str(&n->shape, sb, sizeof sb));
    }
    s.dim[nd - 2 + i] = (len - span) / stride[i] + 1;
    s.dim[nd + i] = kernel[i];
  }
  lm_node *w = lm_node_new(LM_WINDOW, 1, &n, s, n->dtype, n->device);
  if (w)
    for (int i = 0; i < 2; i++) {
      w->arg.window.kernel[i] = kernel[i];
      w->arg.window.stride[i] = stride[i];
      w->arg.window.dilation[i] = dilation[i];
    }
  return lm_result(w);
}

static loom_tensor *check_4d(const char *name, const loom_tensor *x) {
  loom_tensor *err;
  if ((err = lm_check(name, x))) return err;
  if (x->node->shape.ndim != 4) {
    char s[128];
    return lm_error(LOOM_ERR_SHAPE, "%s: input must be [N, C, H, W], got %s", name,
                    lm_shape_str(&x->node->shape, s, sizeof s));
  }
  if (!loom_dtype_is_float(x->node->dtype))
    return lm_error(LOOM_ERR_DTYPE, "%s: needs a float input, got %s", name,
                    loom_dtype_name(x->node->dtype));
  return NULL;
}

LM_PUBLIC(loom_tensor *, loom_conv2d_f,
          (const loom_tensor *x, const loom_tensor *w, const loom_tensor *b, loom_conv2d_opts o),
          (x, w, b, o)) {
  const char *name = "loom_conv2d_f";
  loom_tensor *err;
  char sx[128], sw[128];
  if ((err = check_4d(name, x)) || (err = lm_check(name, w))) return err;
  const loom_shape *X = &x->node->shape, *W = &w->node->shape;
  for (int i = 0; i < 2; i++) /* 0 (an unset field) takes the default; below it is refused */
    if (o.stride[i] < 0 || o.dilation[i] < 0)
      return lm_error(LOOM_ERR_VALUE,
                      "%s: stride %d and dilation %d (dim %d): each must be at least 1 (0 takes "
                      "the default 1)",
                      name, o.stride[i], o.dilation[i], i);
  if (o.groups < 0)
    return lm_error(LOOM_ERR_VALUE, "%s: groups %d must be at least 1 (0 takes the default 1)",
                    name, o.groups);
  int64_t groups = or_default(o.groups, 1);
  if (W->ndim != 4 || W->dim[0] % groups || X->dim[1] != W->dim[1] * groups)
    return lm_error(LOOM_ERR_SHAPE, "%s: input %s and weight %s (groups %lld) do not fit", name,
                    lm_shape_str(X, sx, sizeof sx), lm_shape_str(W, sw, sizeof sw),
                    (long long)groups);
  int64_t kernel[2] = {W->dim[2], W->dim[3]}, stride[2], dil[2], pads[4];
  for (int i = 0; i < 2; i++) {
    stride[i] = or_default(o.stride[i], 1), dil[i] = or_default(o.dilation[i], 1);
    if (o.padding[i] < 0) return lm_error(LOOM_ERR_VALUE, "%s: negative padding", name);
  }
  pads[0] = pads[1] = o.padding[1], pads[2] = pads[3] = o.padding[0];
  int64_t N = X->dim[0], O = W->dim[0], Cg = W->dim[1], K = Cg * kernel[0] * kernel[1];
  loom_tensor *xp = loom_pad(x, pads, 4, 0.0);
  loom_tensor *win = loom_status_of(xp) ? loom_retain(xp) : windows(name, xp, kernel, stride, dil);
  if (loom_status_of(win)) {
    drop(xp, NULL, NULL, NULL);
    return win;
  }
  int64_t OH = loom_shape_of(win).dim[2], OW = loom_shape_of(win).dim[3];
  /* [N, C, OH, OW, KH, KW] -> [groups, Cg*KH*KW, N*OH*OW]: the im2col matrix,
   * stored transposed so that its kernel runs along OW, which is contiguous in
   * both the image and the matrix; the GEMMs read it either way in place. */
  loom_tensor *split = loom_reshape(win, LOOM_SHAPE(N, groups, Cg, OH, OW, kernel[0], kernel[1]));
  loom_tensor *cols = loom_permute(split, (int[]){1, 2, 5, 6, 0, 3, 4}, 7);
  loom_tensor *colst = loom_reshape(cols, LOOM_SHAPE(groups, K, N * OH * OW));
  loom_tensor *wg = loom_reshape(w, LOOM_SHAPE(groups, O / groups, K));
  loom_tensor *y = loom_matmul(wg, colst); /* [groups, O/groups, N*OH*OW] */
  loom_tensor *y4 = loom_reshape(y, LOOM_SHAPE(groups, O / groups, N, OH, OW));
  loom_tensor *out = loom_permute(y4, (int[]){2, 0, 1, 3, 4}, 5);
  loom_tensor *r = loom_reshape(out, LOOM_SHAPE(N, O, OH, OW));
  drop(xp, win, split, cols);
  loom_free(colst);
  drop(wg, y, NULL, NULL);
  drop(y4, out, NULL, NULL);
  if (b) {
    loom_tensor *bb = loom_reshape(b, LOOM_SHAPE(1, O, 1, 1));
    loom_tensor *rb = loom_add(r, bb);
    drop(bb, r, NULL, NULL);
    r = rb;
  }
  return r;
}

/* Non-overlapping k x k windows of a 4-d x (stride k, no padding) as a view
 * that is a bijection: crop to whole windows, [N, C, OH, k, OW, k], permute to
 * windows()'s [N, C, OH, OW, k, k]. Its gradient is the inverse view, where a
 * WINDOW's sums a spread per kernel offset, each with its bounds checks. */
static loom_tensor *blocks(const char *name, const loom_tensor *x, int64_t k) {
  loom_shape s = loom_shape_of(x);
  int64_t OH = s.dim[2] / k, OW = s.dim[3] / k;
  if (OH == 0 || OW == 0)
    return windows(name, x, (int64_t[]){k, k}, (int64_t[]){k, k}, (int64_t[]){1, 1});
  loom_tensor *rows = loom_slice(x, 2, 0, OH * k, 1), *crop = loom_slice(rows, 3, 0, OW * k, 1);
  loom_tensor *split = loom_reshape(crop, LOOM_SHAPE(s.dim[0], s.dim[1], OH, k, OW, k));
  loom_tensor *win = loom_permute(split, (int[]){0, 1, 2, 4, 3, 5}, 6);
  drop(rows, crop, split, NULL);
  return win;
}

static loom_tensor *pool(const char *name, const loom_tensor *x, int kernel, int stride,
                         int padding, bool is_max) {
  loom_tensor *err;
  if ((err = check_4d(name, x))) return err;
  if (kernel <= 0 || stride < 0 || padding < 0 || padding * 2 > kernel)
    return lm_error(LOOM_ERR_VALUE, "%s: kernel %d, stride %d, padding %d are invalid", name,
                    kernel, stride, padding);
  int64_t k[2] = {kernel, kernel}, s[2] = {or_default(stride, kernel), or_default(stride, kernel)};
  int64_t d[2] = {1, 1}, pads[4] = {padding, padding, padding, padding};
  if (s[0] == kernel && padding == 0) {
    loom_tensor *win = blocks(name, x, kernel);
    int axes[2] = {4, 5};
    loom_tensor *r = is_max ? loom_max(win, axes, 2, false) : loom_mean(win, axes, 2, false);
    loom_free(win);
    return r;
  }
  loom_tensor *xp = loom_pad(x, pads, 4, is_max ? -INFINITY : 0.0);
  loom_tensor *win = windows(name, xp, k, s, d);
  int axes[2] = {4, 5};
  loom_tensor *r = is_max ? loom_max(win, axes, 2, false) : loom_mean(win, axes, 2, false);
  drop(xp, win, NULL, NULL);
  return r;
}

LM_PUBLIC(loom_tensor *, loom_max_pool2d,
          (const loom_tensor *x, int kernel, int stride, int padding),
          (x, kernel, stride, padding)) {
  return pool("loom_max_pool2d", x, kernel, stride, padding, true);
}
LM_PUBLIC(loom_tensor *, loom_avg_pool2d,
          (const loom_tensor *x, int kernel, int stride, int padding),
          (x, kernel, stride, padding)) {
  return pool("loom_avg_pool2d", x, kernel, stride, padding, false);
}

/* ------------------------------------------------------------ indices */

static loom_tensor *check_labels(const char *name, const loom_tensor *labels) {
  loom_tensor *err;
  if ((err = lm_check(name, labels))) return err;
  if (!lm_dtype_is_int(labels->node->dtype))
    return lm_error(LOOM_ERR_DTYPE, "%s: indices must be integers, got %s", name,
                    loom_dtype_name(labels->node->dtype));
  return NULL;
}

loom_tensor *lm_gather_rows(const char *name, const loom_tensor *indices, const loom_tensor *weight,
                            bool check) {
  loom_tensor *err;
  if ((err = check_labels(name, indices)) || (err = lm_check(name, weight))) return err;
  const lm_node *w = weight->node, *ix = indices->node;
  if (w->shape.ndim < 1 || ix->shape.ndim + w->shape.ndim - 1 > LOOM_MAX_DIMS)
    return lm_error(LOOM_ERR_SHAPE, "%s: weight needs at least one dim", name);
  if (w->shape.dim[0] == 0 && lm_shape_numel(&ix->shape) > 0) /* no row to pick */
    return lm_error(LOOM_ERR_SHAPE, "%s: the table has no rows, and %lld indices pick from it",
                    name, (long long)lm_shape_numel(&ix->shape));
  if ((err = lm_check_same_device(name, w, ix))) return err;
  loom_tensor *rows = check ? lm_checked_index(name, indices, w, 0, false, 0) : NULL;
  if (rows && (err = lm_check(name, rows))) {
    loom_free(rows);
    return err;
  }
  loom_shape s = ix->shape;
  for (int d = 1; d < w->shape.ndim; d++) s.dim[s.ndim++] = w->shape.dim[d];
  lm_node *src[2] = {weight->node, rows ? rows->node : indices->node};
  loom_tensor *r = lm_result(lm_node_new(LM_GATHER, 2, src, s, w->dtype, w->device));
  loom_free(rows);
  return r;
}

LM_PUBLIC(loom_tensor *, loom_embedding_f, (const loom_tensor *indices, const loom_tensor *weight),
          (indices, weight)) {
  return lm_gather_rows("loom_embedding_f", indices, weight, true);
}

loom_tensor *lm_one_hot(const char *name, const loom_tensor *labels, int64_t num_classes,
                        bool check) {
  loom_tensor *err;
  if ((err = check_labels(name, labels))) return err;
  if (num_classes <= 0)
    return lm_error(LOOM_ERR_VALUE, "%s: num_classes must be positive, got %lld", name,
                    (long long)num_classes);
  loom_tensor *classes = loom_arange(0, (double)num_classes, 1, LOOM_I64, labels->node->device);
  /* the user's count when loom_one_hot is the op called (a loss's or a
   * gather's is derived from a shape) */
  if (loom_status_of(classes) == LOOM_OK) nb_user_sized(classes->node, "loom_one_hot", 1);
  /* the classes' count gives the labels' range: [0, num_classes) */
  loom_tensor *good = check && !loom_status_of(classes)
                          ? lm_checked_index(name, labels, classes->node, 0, false, 0)
                          : lm_tensor_ref(labels);
  loom_tensor *col = loom_unsqueeze(good, -1);
  loom_tensor *hit = loom_eq(col, classes);
  loom_tensor *r = loom_cast(hit, LOOM_I64);
  drop(good, col, classes, hit);
  return r;
}

LM_PUBLIC(loom_tensor *, loom_one_hot, (const loom_tensor *labels, int64_t num_classes),
          (labels, num_classes)) {
  return lm_one_hot("loom_one_hot", labels, num_classes, true);
}

LM_PUBLIC(loom_tensor *, loom_dropout, (const loom_tensor *x, double p, loom_key key, bool train),
          (x, p, key, train)) {
  loom_tensor *err;
  if ((err = lm_check("loom_dropout", x))) return err;
  if (!(p >= 0 && p <= 1))
    return lm_error(LOOM_ERR_VALUE, "loom_dropout: p %g is outside [0, 1]", p);
  if (!train || p == 0) return lm_tensor_ref(x);
  if (p == 1) return loom_zeros_like(x);
  loom_tensor *keep = loom_bernoulli_key(key, 1 - p, x->node->shape, x->node->device);
  loom_tensor *m = loom_cast(keep, loom_dtype_is_float(x->node->dtype) ? x->node->dtype : LOOM_F32);
  loom_tensor *kept = loom_mul(x, m);
  loom_tensor *r = loom_div_s(kept, 1 - p);
  drop(keep, m, kept, NULL);
  return r;
}

/* ------------------------------------------------------------ normalization */

/* (x - mean) / sqrt(var + eps) over axes (biased variance), inside a composite. */
static loom_tensor *normalize(const loom_tensor *x, const int *axes, int naxes, double eps,
                              loom_tensor **mean, loom_tensor **var) {
  *mean = loom_mean(x, axes, naxes, true);
  loom_tensor *xc = loom_sub(x, *mean);
  *var = loom_mean(loom_square(xc), axes, naxes, true);
  return loom_mul(xc, loom_rsqrt(loom_add_s(*var, eps)));
}

static loom_tensor *affine(loom_tensor *y, const loom_tensor *weight, const loom_tensor *bias,
                           loom_shape shape) {
  if (weight) y = loom_mul(y, loom_reshape(weight, shape));
  if (bias) y = loom_add(y, loom_reshape(bias, shape));
  return y;
}

static bool can_take(const loom_tensor *t, const loom_tensor *value) {
  return !t->status && !value->status && lm_shape_eq(&t->node->shape, &value->node->shape) &&
         t->node->dtype == value->node->dtype;
}

/* Records running = running * (1 - momentum) + batch * momentum for both
 * statistics: both updates or neither (an error leaves them as they were).
 * Returns an error tensor, or NULL. */
static loom_tensor *update_running(loom_tensor *running_mean, loom_tensor *running_var,
                                   const loom_tensor *mean, const loom_tensor *var, int64_t C,
                                   double momentum, double unbias) {
  const char *name = "loom_batch_norm";
  loom_tensor *nm, *nv, *err;
  LOOM_NO_GRAD {
    loom_tensor *m = loom_reshape(mean, LOOM_SHAPE(C)), *v = loom_reshape(var, LOOM_SHAPE(C));
    nm = loom_add(loom_mul_s(running_mean, 1 - momentum), loom_mul_s(m, momentum));
    nv = loom_add(loom_mul_s(running_var, 1 - momentum), loom_mul_s(v, momentum * unbias));
  }
  if ((err = lm_check(name, nm)) || (err = lm_check(name, nv))) return err;
  if (!can_take(running_mean, nm) || !can_take(running_var, nv)) {
    char a[128], b[128];
    return lm_error(LOOM_ERR_SHAPE, "%s: running statistics %s %s and %s %s for %lld channels",
                    name, loom_dtype_name(running_mean->node->dtype),
                    lm_shape_str(&running_mean->node->shape, a, sizeof a),
                    loom_dtype_name(running_var->node->dtype),
                    lm_shape_str(&running_var->node->shape, b, sizeof b), (long long)C);
  }
  if (!lm_pending_reserve(2))
    return lm_error(LOOM_ERR_OOM, "%s: out of memory recording the running statistics", name);
  loom_assign(running_mean, nm); /* cannot fail now */
  loom_assign(running_var, nv);
  return NULL;
}

/* eps and momentum: finite and >= 0 (a negative eps can take the root of a
 * negative variance; NaN would make every output NaN without a word). */
static loom_tensor *check_norm_option(const char *op, const char *name, double value) {
  if (value >= 0 && !isinf(value)) return NULL;
  return lm_error(LOOM_ERR_VALUE, "%s: %s %g is not a finite value >= 0", op, name, value);
}

LM_PUBLIC(loom_tensor *, loom_batch_norm,
          (const loom_tensor *x, loom_tensor *running_mean, loom_tensor *running_var,
           const loom_tensor *weight, const loom_tensor *bias, bool train, double momentum,
           double eps),
          (x, running_mean, running_var, weight, bias, train, momentum, eps)) {
  loom_tensor *err;
  if ((err = lm_check("loom_batch_norm", x))) return err;
  if ((err = check_norm_option("loom_batch_norm", "eps", eps)) ||
      (err = check_norm_option("loom_batch_norm", "momentum", momentum)))
    return err;
  int nd = x->node->shape.ndim;
  if (nd < 2)
    return lm_error(LOOM_ERR_SHAPE, "loom_batch_norm: needs [N, C, ...], got %d dims", nd);
  int64_t C = x->node->shape.dim[1];
  loom_shape cshape = {nd, {0}};
  int axes[LOOM_MAX_DIMS], naxes = 0;
  for (int d = 0; d < nd; d++) {
    cshape.dim[d] = d == 1 ? C : 1;
    if (d != 1) axes[naxes++] = d;
  }
  int token = lm_composite_begin();
  loom_tensor *y;
  if (train || !running_mean || !running_var) {
    loom_tensor *mean, *var;
    y = affine(normalize(x, axes, naxes, eps, &mean, &var), weight, bias, cshape);
    /* The running statistics change only with a result: a failed forward
     * pass leaves them as they were, and so does an empty batch (its mean and
     * variance are 0/0; PyTorch keeps the statistics too). */
    int64_t n = lm_shape_numel(&x->node->shape) / (C > 0 ? C : 1);
    if (train && running_mean && running_var && !loom_status_of(y) && n > 0) {
      double unbias = n > 1 ? (double)n / (double)(n - 1) : 1.0;
      loom_tensor *err = update_running(running_mean, running_var, mean, var, C, momentum, unbias);
      if (err) y = err;
    }
  } else {
    loom_tensor *m = loom_reshape(running_mean, cshape), *v = loom_reshape(running_var, cshape);
    y = affine(loom_mul(loom_sub(x, m), loom_rsqrt(loom_add_s(v, eps))), weight, bias, cshape);
  }
  return lm_composite_end(token, y);
}

LM_PUBLIC(loom_tensor *, loom_layer_norm,
          (const loom_tensor *x, int ndims, const loom_tensor *weight, const loom_tensor *bias,
           double eps),
          (x, ndims, weight, bias, eps)) {
  loom_tensor *err;
  if ((err = lm_check("loom_layer_norm", x)) ||
      (err = check_norm_option("loom_layer_norm", "eps", eps)))
    return err;
  int nd = x->node->shape.ndim;
  if (ndims < 1 || ndims > nd)
    return lm_error(LOOM_ERR_AXIS, "loom_layer_norm: cannot normalize %d of %d dims", ndims, nd);
  int axes[LOOM_MAX_DIMS];
  loom_shape wshape = {ndims, {0}};
  for (int i = 0; i < ndims; i++) {
    axes[i] = nd - ndims + i;
    wshape.dim[i] = x->node->shape.dim[nd - ndims + i];
  }
  int token = lm_composite_begin();
  loom_tensor *mean, *var;
  loom_dtype out = lm_float_result(x->node->dtype), dt = lm_compute_dtype(out);
  loom_tensor *w = weight ? loom_cast(weight, dt) : NULL, *b = bias ? loom_cast(bias, dt) : NULL;
  loom_tensor *y = normalize(loom_cast(x, dt), axes, ndims, eps, &mean, &var);
  return lm_composite_end(token, loom_cast(affine(y, w, b, wshape), out));
}

/* ------------------------------------------------------------ losses */

LM_PUBLIC(loom_tensor *, loom_mse_loss, (const loom_tensor *pred, const loom_tensor *target),
          (pred, target)) {
  int token = lm_composite_begin();
  loom_tensor *d = loom_sub(pred, target), *err; /* then BF16, F16 in F32, rounded once */
  if ((err = lm_check("loom_mse_loss", d))) return lm_composite_end(token, err);
  loom_dtype out = lm_float_result(d->node->dtype);
  loom_tensor *m = loom_mean_all(loom_square(loom_cast(d, lm_compute_dtype(out))));
  return lm_composite_end(token, loom_cast(m, out));
}

/* [N, C] scores and [N] integer labels, or an error naming the op. */
static loom_tensor *check_scores(const char *name, const loom_tensor *scores,
                                 const loom_tensor *labels) {
  loom_tensor *err;
  if ((err = lm_check(name, scores)) || (err = check_labels(name, labels))) return err;
  const loom_shape *s = &scores->node->shape, *l = &labels->node->shape;
  char sa[128], sb[128];
  if (s->ndim != 2 || l->ndim != 1 || l->dim[0] != s->dim[0])
    return lm_error(LOOM_ERR_SHAPE, "%s: needs [N, C] scores and [N] labels, got %s and %s", name,
                    lm_shape_str(s, sa, sizeof sa), lm_shape_str(l, sb, sizeof sb));
  return NULL;
}

LM_PUBLIC(loom_tensor *, loom_nll_loss, (const loom_tensor *log_probs, const loom_tensor *labels),
          (log_probs, labels)) {
  loom_tensor *err;
  if ((err = check_scores("loom_nll_loss", log_probs, labels))) return err;
  const loom_shape *s = &log_probs->node->shape;
  int token = lm_composite_begin();
  /* Selected, not multiplied by a 0/1 mask: a -inf score of another class
   * (a logit of -inf) times 0 would make the loss NaN. */
  loom_tensor *good = lm_checked_index("loom_nll_loss", labels, log_probs->node, 1, false, 0);
  loom_tensor *mask = loom_cast(lm_one_hot("loom_nll_loss", good, s->dim[1], false), LOOM_BOOL);
  loom_tensor *none = loom_zeros_like(log_probs);
  loom_tensor *picked = loom_sum(loom_where(mask, log_probs, none), (int[]){1}, 1, false);
  return lm_composite_end(token, loom_neg(loom_mean_all(picked)));
}

LM_PUBLIC(loom_tensor *, loom_cross_entropy, (const loom_tensor *logits, const loom_tensor *labels),
          (logits, labels)) {
  loom_tensor *err;
  if ((err = check_scores("loom_cross_entropy", logits, labels))) return err;
  int token = lm_composite_begin();
  loom_dtype out = lm_float_result(logits->node->dtype); /* BF16, F16: in F32, rounded once */
  loom_tensor *log_probs = loom_log_softmax(loom_cast(logits, lm_compute_dtype(out)), 1);
  return lm_composite_end(token, loom_cast(loom_nll_loss(log_probs, labels), out));
}

/* torch's F.cross_entropy(logits, labels, ignore_index, reduction,
 * label_smoothing): logits [N, C, d...] (or [C]), labels [N, d...] (or 0-d). */
LM_PUBLIC(loom_tensor *, loom_cross_entropy_ex,
          (const loom_tensor *logits, const loom_tensor *labels, loom_cross_entropy_opts o),
          (logits, labels, o)) {
  const char *name = "loom_cross_entropy_ex";
  loom_tensor *err;
  if ((err = lm_check(name, logits)) || (err = check_labels(name, labels))) return err;
  const loom_shape *s = &logits->node->shape, *l = &labels->node->shape;
  bool single = s->ndim == 1; /* [C] against a 0-d label */
  int class_axis = single ? 0 : 1;
  bool fits = s->ndim >= 1 && l->ndim == s->ndim - 1;
  for (int i = 0, j = 0; fits && i < s->ndim; i++)
    if (i != class_axis) fits = s->dim[i] == l->dim[j++];
  char sa[128], sb[128];
  if (!fits)
    return lm_error(LOOM_ERR_SHAPE,
                    "%s: needs [N, C, d...] scores and [N, d...] labels (or [C] and one label), "
                    "got %s and %s",
                    name, lm_shape_str(s, sa, sizeof sa), lm_shape_str(l, sb, sizeof sb));
  if (!(o.label_smoothing >= 0 && o.label_smoothing <= 1))
    return lm_error(LOOM_ERR_VALUE, "%s: label_smoothing %g is outside [0, 1]", name,
                    o.label_smoothing);
  if (o.reduction != LOOM_REDUCE_MEAN && o.reduction != LOOM_REDUCE_SUM &&
      o.reduction != LOOM_REDUCE_NONE)
    return lm_error(LOOM_ERR_VALUE, "%s: reduction %d is not mean, sum or none", name,
                    (int)o.reduction);
  int64_t classes = s->dim[class_axis];
  int token = lm_composite_begin();
  /* labels in [0, C), or the ignored one */
  loom_tensor *good =
      lm_checked_index(name, labels, logits->node, class_axis, o.ignore, o.ignore_index);
  if ((err = lm_check(name, good))) return lm_composite_end(token, err);
  /* classes last: [N, d..., C] */
  int perm[LOOM_MAX_DIMS];
  lm_axis_last(s->ndim, class_axis, perm, NULL);
  loom_dtype out = lm_float_result(logits->node->dtype); /* BF16, F16: in F32, rounded once */
  loom_tensor *wide = loom_cast(logits, lm_compute_dtype(out));
  loom_tensor *scores = single ? wide : loom_permute(wide, perm, s->ndim);
  loom_tensor *log_probs = loom_log_softmax(scores, -1);
  loom_tensor *valid = o.ignore ? loom_ne_s(good, (double)o.ignore_index)
                                : loom_ones(*l, LOOM_BOOL, labels->node->device);
  loom_tensor *safe = loom_where_s(valid, good, 0); /* ignored: any class, then zeroed */
  /* selected, not multiplied by a 0/1 mask (a -inf score times 0 is NaN) */
  loom_tensor *hit = loom_cast(lm_one_hot(name, safe, classes, false), LOOM_BOOL);
  loom_tensor *picked = loom_sum(loom_where_s(hit, log_probs, 0), (int[]){-1}, 1, false);
  loom_tensor *per = loom_neg(picked);
  if (o.label_smoothing > 0) {
    loom_tensor *uniform = loom_neg(loom_mean(log_probs, (int[]){-1}, 1, false));
    per = loom_add(loom_mul_s(per, 1 - o.label_smoothing), loom_mul_s(uniform, o.label_smoothing));
  }
  per = loom_where_s(valid, per, 0);
  loom_tensor *r;
  if (o.reduction == LOOM_REDUCE_NONE)
    r = per;
  else if (o.reduction == LOOM_REDUCE_SUM)
    r = loom_sum_all(per);
  else /* over the labels not ignored: NaN when every one is, as torch */
    r = loom_div(loom_sum_all(per), loom_sum_all(loom_cast(valid, per->node->dtype)));
  return lm_composite_end(token, loom_cast(r, out));
}

/* max(x, 0) - x*y + log(1 + exp(-|x|)): stable for large |x|. */
LM_PUBLIC(loom_tensor *, loom_bce_with_logits,
          (const loom_tensor *logits, const loom_tensor *targets), (logits, targets)) {
  int token = lm_composite_begin();
  loom_tensor *soft = loom_log(loom_add_s(loom_exp(loom_neg(loom_abs(logits))), 1.0));
  loom_tensor *per = loom_add(loom_sub(loom_relu(logits), loom_mul(logits, targets)), soft);
  return lm_composite_end(token, loom_mean_all(per));
}
