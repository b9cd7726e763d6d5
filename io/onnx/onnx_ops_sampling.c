/* Sampling and rearranging: GridSample (1-D to 3-D, linear, nearest and
 * cubic, padding zeros, border and reflection), AffineGrid, Col2Im,
 * RotaryEmbedding; composed of loom's gathers, products and matmuls. */
#include <string.h>

#include "io/onnx/onnx.h"

/* ------------------------------------------------------------ GridSample */

/* x reflected at lo and hi until it lies between them (ONNX's _gs_reflect). */
static loom_tensor *reflect(loom_tensor *x, double lo, double hi) {
  double range = hi - lo > 0 ? hi - lo : 1;
  loom_tensor *below = loom_lt_s(x, lo), *above = loom_gt_s(x, hi);
  loom_tensor *dx = loom_where(below, loom_rsub_s(lo, x), loom_sub_s(x, hi));
  loom_tensor *folds = loom_floor(loom_div_s(dx, range));
  loom_tensor *r = loom_sub(dx, loom_mul_s(folds, range));
  loom_tensor *even =
      loom_eq_s(loom_sub(folds, loom_mul_s(loom_floor(loom_mul_s(folds, 0.5)), 2)), 0);
  /* below: an even count of folds lands at lo + r, an odd one at hi - r; above, the reverse */
  loom_tensor *at_lo = loom_add_s(r, lo), *at_hi = loom_rsub_s(hi, r);
  loom_tensor *from_below = loom_where(even, at_lo, at_hi),
              *from_above = loom_where(even, at_hi, at_lo);
  return loom_where(below, from_below, loom_where(above, from_above, x));
}

typedef struct {
  int padding;   /* 0 zeros, 1 border, 2 reflection */
  double lo, hi; /* the borders reflection folds at */
  int64_t size;
} grid_axis;

/* A tap's whole-number position as an index into the axis (clamped) and,
 * under zeros padding, whether it lies inside. */
static loom_tensor *tap_index(loom_tensor *pos, const grid_axis *ax, loom_tensor **inside) {
  double last = (double)(ax->size - 1);
  *inside = NULL;
  if (ax->padding == 0) *inside = loom_logical_and(loom_ge_s(pos, 0), loom_le_s(pos, last));
  if (ax->padding == 2) {
    pos = reflect(pos, ax->lo, ax->hi);
    pos = loom_mul(loom_sign(pos), loom_floor(loom_abs(pos))); /* C's truncation */
  }
  return loom_cast(loom_clamp(pos, 0, last), LOOM_I64);
}

/* Keys' cubic convolution weights (A = -0.75) of the four taps around t in [0, 1). */
static void cubic_weights(loom_tensor *t, loom_tensor **w) {
  const double a = -0.75;
  loom_tensor *d[4] = {loom_add_s(t, 1), t, loom_rsub_s(1, t), loom_rsub_s(2, t)};
  for (int i = 0; i < 4; i++) {
    loom_tensor *x = d[i];
    if (i == 0 || i == 3) /* ((a x - 5a) x + 8a) x - 4a */
      w[i] = loom_sub_s(
          loom_mul(loom_add_s(loom_mul(loom_sub_s(loom_mul_s(x, a), 5 * a), x), 8 * a), x), 4 * a);
    else /* ((a + 2) x - (a + 3)) x^2 + 1 */
      w[i] = loom_add_s(loom_mul(loom_sub_s(loom_mul_s(x, a + 2), a + 3), loom_square(x)), 1);
  }
}

static loom_status op_grid_sample(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0), *grid = onnx_in(n, 1);
  loom_shape xs = loom_shape_of(x), gs = loom_shape_of(grid);
  int dims = xs.ndim - 2;
  if (dims < 1 || dims > 3 || gs.ndim != xs.ndim || gs.dim[gs.ndim - 1] != dims ||
      gs.dim[0] != xs.dim[0])
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "X of rank %d and grid of rank %d: [N, C, 1 to 3 dims] and [N, dims..., "
                       "%d] expected",
                       xs.ndim, gs.ndim, dims);
  char mbuf[16], pbuf[16];
  const char *mode =
      onnx_attr_string(n, "mode", n->opset < 20 ? "bilinear" : "linear", mbuf, sizeof mbuf);
  const char *pad = onnx_attr_string(n, "padding_mode", "zeros", pbuf, sizeof pbuf);
  int taps = strcmp(mode, "nearest") == 0                                   ? 1
             : strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0 ? 2
             : strcmp(mode, "cubic") == 0 || strcmp(mode, "bicubic") == 0   ? 4
                                                                            : 0;
  if (!taps) return onnx_refuse(n, LOOM_ERR_VALUE, "mode '%s'", mode);
  int padding = strcmp(pad, "zeros") == 0        ? 0
                : strcmp(pad, "border") == 0     ? 1
                : strcmp(pad, "reflection") == 0 ? 2
                                                 : -1;
  if (padding < 0) return onnx_refuse(n, LOOM_ERR_VALUE, "padding_mode '%s'", pad);
  bool align = onnx_attr_int(n, "align_corners", 0) != 0;
  int64_t batch = xs.dim[0], channels = xs.dim[1], q = 1, plane = 1;
  for (int d = 0; d < dims; d++) q *= gs.dim[d + 1], plane *= xs.dim[d + 2];
  loom_dtype dt = loom_dtype_of(x);
  /* per axis: the taps' indices and weights, [N, 1, Q] */
  loom_tensor *index[3][4], *weight[3][4];
  int64_t stride = 1;
  int64_t strides[3];
  for (int d = dims - 1; d >= 0; d--) strides[d] = stride, stride *= xs.dim[d + 2];
  for (int d = 0; d < dims; d++) {
    grid_axis ax = {padding, align ? 0 : -0.5,
                    align ? (double)xs.dim[d + 2] - 1 : xs.dim[d + 2] - 0.5, xs.dim[d + 2]};
    /* the grid's last dim runs x (the last axis) first */
    loom_tensor *g = loom_slice(grid, gs.ndim - 1, dims - 1 - d, dims - d, 1);
    g = loom_reshape(loom_cast(g, LOOM_F32), LOOM_SHAPE(batch, 1, q));
    double size = (double)ax.size;
    loom_tensor *c = align ? loom_mul_s(loom_add_s(g, 1), (size - 1) / 2)
                           : loom_div_s(loom_sub_s(loom_mul_s(loom_add_s(g, 1), size), 1), 2);
    if (taps == 1) c = loom_round(c);
    loom_tensor *outside = loom_logical_or(loom_lt_s(c, ax.lo), loom_gt_s(c, ax.hi));
    if (padding == 1) c = loom_where(outside, loom_clamp(c, 0, size - 1), c);
    if (padding == 2) c = reflect(c, ax.lo, ax.hi);
    loom_tensor *base = taps == 1 ? loom_mul(loom_sign(c), loom_floor(loom_abs(c))) : loom_floor(c);
    loom_tensor *t = loom_sub(c, base), *w[4];
    if (taps == 1) w[0] = loom_ones_like(t);
    if (taps == 2) w[0] = loom_rsub_s(1, t), w[1] = t;
    if (taps == 4) cubic_weights(t, w);
    for (int k = 0; k < taps; k++) {
      loom_tensor *inside;
      loom_tensor *pos = loom_add_s(base, (double)(taps == 4 ? k - 1 : k));
      index[d][k] = loom_mul_s(tap_index(pos, &ax, &inside), (double)strides[d]);
      weight[d][k] = inside ? loom_where_s(inside, w[k], 0) : w[k];
    }
  }
  loom_tensor *flat = loom_reshape(x, LOOM_SHAPE(batch, channels, plane)), *y = NULL;
  int combos = 1;
  for (int d = 0; d < dims; d++) combos *= taps;
  for (int c = 0; c < combos; c++) {
    loom_tensor *at = NULL, *w = NULL;
    for (int d = 0, rest = c; d < dims; d++, rest /= taps) {
      int k = rest % taps;
      at = at ? loom_add(at, index[d][k]) : index[d][k];
      w = w ? loom_mul(w, weight[d][k]) : weight[d][k];
    }
    loom_tensor *v =
        loom_gather(flat, 2, loom_contiguous(loom_expand(at, LOOM_SHAPE(batch, channels, q))));
    loom_tensor *term = loom_mul(v, loom_cast(w, dt));
    y = y ? loom_add(y, term) : term;
  }
  loom_shape ys = {.ndim = xs.ndim};
  ys.dim[0] = batch, ys.dim[1] = channels;
  for (int d = 0; d < dims; d++) ys.dim[d + 2] = gs.dim[d + 1];
  onnx_out(n, 0, loom_reshape(y, ys));
  return LOOM_OK;
}

/* ------------------------------------------------------------ AffineGrid */

/* theta [N, dims, dims + 1] applied to the normalized coordinates of size's
 * spatial dims, (x, y[, z], 1) with x the last: [N, spatial..., dims]. */
static loom_status op_affine_grid(onnx_node *n) {
  loom_tensor *theta = onnx_in(n, 0);
  int64_t size[LOOM_MAX_DIMS];
  int count;
  loom_status st = onnx_ints(n, 1, size, LOOM_MAX_DIMS, &count);
  if (st) return st;
  int dims = count - 2;
  loom_shape ts = loom_shape_of(theta);
  if ((dims != 2 && dims != 3) || ts.ndim != 3 || ts.dim[1] != dims || ts.dim[2] != dims + 1)
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "size of %d dims with theta of rank %d: [N, C, H, W] or "
                       "[N, C, D, H, W] and [N, dims, dims + 1] expected",
                       count, ts.ndim);
  bool align = onnx_attr_int(n, "align_corners", 0) != 0;
  int64_t points = 1;
  for (int d = 0; d < dims; d++) points *= size[d + 2];
  /* the homogeneous coordinates, [points, dims + 1]: column j is axis dims - 1 - j */
  loom_tensor *cols[4];
  for (int j = 0; j < dims; j++) {
    int axis = dims - 1 - j;
    double s = (double)size[axis + 2];
    loom_tensor *i = loom_arange(0, s, 1, LOOM_F64, LOOM_CPU);
    loom_tensor *c =
        align ? (s > 1 ? loom_sub_s(loom_mul_s(i, 2 / (s - 1)), 1) : loom_full_like(i, -1))
              : loom_sub_s(loom_mul_s(loom_add_s(i, 0.5), 2 / s), 1);
    loom_shape cs = {.ndim = dims};
    for (int d = 0; d < dims; d++) cs.dim[d] = d == axis ? size[axis + 2] : 1;
    loom_shape full = {.ndim = dims};
    for (int d = 0; d < dims; d++) full.dim[d] = size[d + 2];
    cols[j] = loom_reshape(loom_expand(loom_reshape(c, cs), full), LOOM_SHAPE(points, 1));
  }
  cols[dims] = loom_ones(LOOM_SHAPE(points, 1), LOOM_F64, LOOM_CPU);
  loom_tensor *base = loom_cast(loom_cat(cols, dims + 1, 1), loom_dtype_of(theta));
  /* [N, points, dims] = base @ theta^T */
  loom_tensor *g = loom_matmul(loom_unsqueeze(base, 0), loom_transpose(theta, 1, 2));
  loom_shape os = {.ndim = dims + 2};
  os.dim[0] = size[0], os.dim[dims + 1] = dims;
  for (int d = 0; d < dims; d++) os.dim[d + 1] = size[d + 2];
  onnx_out(n, 0, loom_reshape(g, os));
  return LOOM_OK;
}

/* ------------------------------------------------------------ Col2Im */

/* The blocks [N, C * prod(block), L] summed into the image [N, C, image...]:
 * per spatial dim a 0/1 matrix [block * blocks, image] places each block
 * position, contracted one dim after another with matmuls. */
static loom_status op_col2im(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int64_t image[LOOM_MAX_DIMS], block[LOOM_MAX_DIMS], dil[LOOM_MAX_DIMS], pads[2 * LOOM_MAX_DIMS],
      strides[LOOM_MAX_DIMS];
  int ni, nb, nd, np, ns;
  loom_status st = onnx_ints(n, 1, image, LOOM_MAX_DIMS, &ni);
  if (!st) st = onnx_ints(n, 2, block, LOOM_MAX_DIMS, &nb);
  if (!st) st = onnx_attr_ints(n, "dilations", dil, LOOM_MAX_DIMS, &nd);
  if (!st) st = onnx_attr_ints(n, "pads", pads, 2 * LOOM_MAX_DIMS, &np);
  if (!st) st = onnx_attr_ints(n, "strides", strides, LOOM_MAX_DIMS, &ns);
  if (st) return st;
  int dims = ni;
  loom_shape xs = loom_shape_of(x);
  if (dims < 1 || nb != dims || 2 + 2 * dims > LOOM_MAX_DIMS || xs.ndim != 3 ||
      (nd >= 0 && nd != dims) || (np >= 0 && np != 2 * dims) || (ns >= 0 && ns != dims))
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "input of rank %d, image_shape of %d dims, block_shape of %d", xs.ndim, ni,
                       nb);
  int64_t kernel = 1, blocks[LOOM_MAX_DIMS], total = 1;
  for (int d = 0; d < dims; d++) {
    if (nd < 0) dil[d] = 1;
    if (ns < 0) strides[d] = 1;
    if (np < 0) pads[d] = pads[d + dims] = 0;
    kernel *= block[d];
    blocks[d] =
        (image[d] + pads[d] + pads[d + dims] - dil[d] * (block[d] - 1) - 1) / strides[d] + 1;
    total *= blocks[d];
  }
  if (kernel < 1 || xs.dim[1] % kernel || xs.dim[2] != total)
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "input [%lld, %lld, %lld] for %lld block positions and %lld blocks",
                       (long long)xs.dim[0], (long long)xs.dim[1], (long long)xs.dim[2],
                       (long long)kernel, (long long)total);
  int64_t batch = xs.dim[0], channels = xs.dim[1] / kernel;
  /* t: [N, C, image_<d..., block_>=d..., blocks_>=d...] */
  loom_shape s = {.ndim = 2 + 2 * dims};
  s.dim[0] = batch, s.dim[1] = channels;
  for (int d = 0; d < dims; d++) s.dim[2 + d] = block[d], s.dim[2 + dims + d] = blocks[d];
  loom_tensor *t = loom_reshape(x, s);
  loom_dtype dt = loom_dtype_of(x);
  for (int d = 0; d < dims; d++) {
    int rank = loom_ndim(t),
        rest = dims - d; /* axes: 2 + d images done, then rest blocks, rest counts */
    int k_axis = 2 + d, l_axis = 2 + d + rest, perm[LOOM_MAX_DIMS], m = 0;
    for (int a = 0; a < rank; a++)
      if (a != k_axis && a != l_axis) perm[m++] = a;
    perm[m++] = k_axis, perm[m++] = l_axis;
    loom_tensor *moved = loom_permute(t, perm, rank);
    loom_shape ms = loom_shape_of(moved);
    /* place[k, l, p] = p == l stride + k dilation - pad */
    loom_tensor *k = loom_reshape(loom_arange(0, (double)block[d], 1, LOOM_I64, LOOM_CPU),
                                  LOOM_SHAPE(block[d], 1, 1));
    loom_tensor *l = loom_reshape(loom_arange(0, (double)blocks[d], 1, LOOM_I64, LOOM_CPU),
                                  LOOM_SHAPE(1, blocks[d], 1));
    loom_tensor *p = loom_reshape(loom_arange(0, (double)image[d], 1, LOOM_I64, LOOM_CPU),
                                  LOOM_SHAPE(1, 1, image[d]));
    loom_tensor *src = loom_add(loom_mul_s(l, (double)strides[d]),
                                loom_sub_s(loom_mul_s(k, (double)dil[d]), (double)pads[d]));
    loom_tensor *place =
        loom_reshape(loom_cast(loom_eq(src, p), dt), LOOM_SHAPE(block[d] * blocks[d], image[d]));
    loom_shape flat = ms;
    flat.ndim -= 1, flat.dim[flat.ndim - 1] = block[d] * blocks[d];
    loom_tensor *r = loom_matmul(loom_reshape(moved, flat), place);
    /* r: [N, C, image_<d..., block_>d..., blocks_>d..., image_d]: image_d back after image_<d */
    int rr = loom_ndim(r), back[LOOM_MAX_DIMS], b = 0;
    for (int a = 0; a < 2 + d; a++) back[b++] = a;
    back[b++] = rr - 1;
    for (int a = 2 + d; a < rr - 1; a++) back[b++] = a;
    t = loom_permute(r, back, rr);
  }
  onnx_out(n, 0, loom_contiguous(t));
  return LOOM_OK;
}

/* ------------------------------------------------------------ RotaryEmbedding */

/* Rotates the first rotary_embedding_dim of each head (halves, or
 * interleaved pairs) by the cached cos and sin at each position (ONNX 23). */
static loom_status op_rotary_embedding(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0), *cosc = onnx_in(n, 1), *sinc = onnx_in(n, 2);
  loom_shape xs = loom_shape_of(x);
  int rank = xs.ndim;
  if (rank != 3 && rank != 4)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "a rank-%d input; 3 or 4 expected", rank);
  loom_tensor *h; /* [B, S, heads, head] */
  const int swap[] = {0, 2, 1, 3};
  if (rank == 4) {
    h = loom_permute(x, swap, 4);
  } else {
    int64_t heads = onnx_attr_int(n, "num_heads", 0);
    if (heads < 1 || xs.dim[2] % heads)
      return onnx_refuse(n, LOOM_ERR_VALUE, "num_heads %lld for a hidden size of %lld",
                         (long long)heads, (long long)xs.dim[2]);
    h = loom_reshape(x, (loom_shape){4, {xs.dim[0], xs.dim[1], heads, xs.dim[2] / heads}});
  }
  loom_shape hs = loom_shape_of(h);
  int64_t head = hs.dim[3], rd = onnx_attr_int(n, "rotary_embedding_dim", 0);
  if (rd == 0) rd = head;
  if (rd < 2 || rd > head || rd % 2)
    return onnx_refuse(n, LOOM_ERR_VALUE, "rotary_embedding_dim %lld for heads of %lld",
                       (long long)rd, (long long)head);
  if (onnx_has_in(n, 3)) {
    loom_tensor *ids = loom_reshape(loom_cast(onnx_in(n, 3), LOOM_I64), LOOM_SHAPE(-1));
    cosc = loom_index_select(cosc, 0, ids), sinc = loom_index_select(sinc, 0, ids);
  }
  loom_shape cs4 = {4, {hs.dim[0], hs.dim[1], 1, rd / 2}};
  if (loom_numel(cosc) != hs.dim[0] * hs.dim[1] * (rd / 2) || loom_numel(sinc) != loom_numel(cosc))
    return onnx_refuse(n, LOOM_ERR_SHAPE, "caches of %lld values for [%lld, %lld, %lld]",
                       (long long)loom_numel(cosc), (long long)hs.dim[0], (long long)hs.dim[1],
                       (long long)(rd / 2));
  cosc = loom_reshape(cosc, cs4), sinc = loom_reshape(sinc, cs4);
  bool interleaved = onnx_attr_int(n, "interleaved", 0) != 0;
  loom_tensor *rot = loom_slice(h, 3, 0, rd, 1);
  loom_tensor *x1 = interleaved ? loom_slice(rot, 3, 0, rd, 2) : loom_slice(rot, 3, 0, rd / 2, 1);
  loom_tensor *x2 = interleaved ? loom_slice(rot, 3, 1, rd, 2) : loom_slice(rot, 3, rd / 2, rd, 1);
  loom_tensor *re = loom_sub(loom_mul(cosc, x1), loom_mul(sinc, x2));
  loom_tensor *im = loom_add(loom_mul(sinc, x1), loom_mul(cosc, x2));
  loom_tensor *parts[2] = {re, im};
  rot = interleaved ? loom_reshape(loom_stack(parts, 2, 4), loom_shape_of(rot))
                    : loom_cat(parts, 2, 3);
  if (rd < head) {
    loom_tensor *all[2] = {rot, loom_slice(h, 3, rd, head, 1)};
    rot = loom_cat(all, 2, 3);
  }
  onnx_out(n, 0, rank == 4 ? loom_permute(rot, swap, 4) : loom_reshape(rot, xs));
  return LOOM_OK;
}

const onnx_op onnx_ops_sampling[] = {
    ONNX_OP(GridSample, op_grid_sample),
    ONNX_OP(AffineGrid, op_affine_grid),
    ONNX_OP(Col2Im, op_col2im),
    ONNX_OP(RotaryEmbedding, op_rotary_embedding),
};
const int onnx_ops_sampling_count = sizeof onnx_ops_sampling / sizeof onnx_ops_sampling[0];
