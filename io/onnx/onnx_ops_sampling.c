/* Sampling and rearranging: GridSample (1-D to 3-D, linear, nearest and
 * cubic, padding zeros, border and reflection), AffineGrid, Col2Im,
 * RotaryEmbedding, RoiAlign, DeformConv; composed of loom's gathers, products
 * and matmuls. */
#include <math.h>
#include <stdlib.h>
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

/* flat [A, C, P] at positions at [A, 1, Q] (I64, in [0, P)): [A, C, Q]. */
static loom_tensor *gather_planes(loom_tensor *flat, loom_tensor *at) {
  loom_shape fs = loom_shape_of(flat), as = loom_shape_of(at);
  return loom_gather(flat, 2,
                     loom_contiguous(loom_expand(at, LOOM_SHAPE(fs.dim[0], fs.dim[1], as.dim[2]))));
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
    loom_tensor *v = gather_planes(flat, at);
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
    loom_tensor *i = loom_arange(0, s, 1, LOOM_F64, onnx_device(n));
    loom_tensor *c =
        align ? (s > 1 ? loom_sub_s(loom_mul_s(i, 2 / (s - 1)), 1) : loom_full_like(i, -1))
              : loom_sub_s(loom_mul_s(loom_add_s(i, 0.5), 2 / s), 1);
    loom_shape cs = {.ndim = dims};
    for (int d = 0; d < dims; d++) cs.dim[d] = d == axis ? size[axis + 2] : 1;
    loom_shape full = {.ndim = dims};
    for (int d = 0; d < dims; d++) full.dim[d] = size[d + 2];
    cols[j] = loom_reshape(loom_expand(loom_reshape(c, cs), full), LOOM_SHAPE(points, 1));
  }
  cols[dims] = loom_ones(LOOM_SHAPE(points, 1), LOOM_F64, onnx_device(n));
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
    loom_tensor *k = loom_reshape(loom_arange(0, (double)block[d], 1, LOOM_I64, onnx_device(n)),
                                  LOOM_SHAPE(block[d], 1, 1));
    loom_tensor *l = loom_reshape(loom_arange(0, (double)blocks[d], 1, LOOM_I64, onnx_device(n)),
                                  LOOM_SHAPE(1, blocks[d], 1));
    loom_tensor *p = loom_reshape(loom_arange(0, (double)image[d], 1, LOOM_I64, onnx_device(n)),
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

/* ------------------------------------------------------------ RoiAlign */

/* The dtype the sampling ops compute coordinates and sums in. */
static loom_dtype sampling_dtype(loom_dtype dt) { return dt == LOOM_F64 ? LOOM_F64 : LOOM_F32; }

/* A table of values (doubles) as a tensor of dtype dt and the given shape. */
static loom_tensor *table(const double *values, loom_shape s, loom_dtype dt, loom_device dev) {
  return loom_cast(loom_from_data(values, s, LOOM_F64, dev), dt);
}

/* One axis of RoiAlign's samples, as the reference's
 * pre_calc_for_bilinear_interpolate: bins x grid coordinates per roi
 * ([R, bins * grid]), start + b bin + (i + 0.5) bin / grid in its order of
 * operations; a sample outside [-1, size] is not inside (its weights are
 * 0), else clamped at 0 and at size - 1, where both taps are the last. */
typedef struct roi_axis {
  loom_tensor *tap[2], *weight[2], *inside;
  loom_tensor *used; /* i < this roi's grid, when grids differ (else NULL) */
} roi_axis;

static bool roi_axis_samples(loom_tensor *start, loom_tensor *bin, loom_tensor *grids,
                             double fixed_grid, int64_t bins, int64_t grid, int64_t size,
                             loom_dtype wd, roi_axis *ax) {
  double *tabs = malloc(sizeof(double) * (size_t)(3 * bins * grid));
  if (!tabs) return false;
  double *b = tabs, *c = b + bins * grid, *i = c + bins * grid;
  for (int64_t j = 0; j < bins * grid; j++)
    b[j] = (double)(j / grid), i[j] = (double)(j % grid), c[j] = i[j] + 0.5;
  loom_shape row = LOOM_SHAPE(1, bins * grid);
  loom_tensor *b_tab = table(b, row, wd, loom_device_of(start)),
              *c_tab = table(c, row, wd, loom_device_of(start));
  loom_tensor *offset = loom_mul(c_tab, bin);
  offset = grids ? loom_div(offset, grids) : loom_div_s(offset, fixed_grid);
  loom_tensor *at = loom_add(loom_add(start, loom_mul(b_tab, bin)), offset);
  ax->used = grids ? loom_lt(table(i, row, wd, loom_device_of(start)), grids) : NULL;
  free(tabs);
  double last = (double)(size - 1);
  ax->inside = loom_logical_and(loom_ge_s(at, -1), loom_le_s(at, (double)size));
  at = loom_maximum_s(at, 0);
  loom_tensor *low = loom_floor(at), *edge = loom_ge_s(low, last);
  low = loom_minimum_s(low, last);
  at = loom_where(edge, low, at);
  loom_tensor *l = loom_sub(at, low);
  ax->tap[0] = loom_cast(low, LOOM_I64);
  ax->tap[1] = loom_cast(loom_minimum_s(loom_add_s(low, 1), last), LOOM_I64);
  ax->weight[0] = loom_rsub_s(1, l), ax->weight[1] = l;
  return true;
}

/* Per roi, the grid of samples a bin takes when sampling_ratio is 0:
 * ceil(roi size / bins), computed from the rois' values (known at import) in
 * the reference's arithmetic (float for F32 inputs), and the count it
 * divides by, max(grid_h grid_w, 1). */
typedef struct roi_grids {
  double *h, *w, *count;
  int64_t max_h, max_w;
} roi_grids;

static loom_status adaptive_grids(onnx_node *n, int64_t rois, bool f32, double scale, double off,
                                  bool half_pixel, int64_t ph, int64_t pw, roi_grids *g) {
  if (rois > (1 << 24)) return onnx_refuse(n, LOOM_ERR_SIZE, "%lld rois", (long long)rois);
  double *box = malloc(sizeof(double) * (size_t)(4 * rois + 1));
  g->h = malloc(sizeof(double) * (size_t)(3 * rois + 1));
  if (!box || !g->h) {
    free(box), free(g->h), g->h = NULL;
    return onnx_refuse(n, LOOM_ERR_OOM, "%lld rois", (long long)rois);
  }
  g->w = g->h + rois, g->count = g->w + rois;
  g->max_h = g->max_w = 1;
  int count;
  loom_status st = onnx_doubles(n, 1, box, (int)(4 * rois), &count);
  for (int64_t r = 0; r < rois && !st; r++) {
    double size[2];
    for (int a = 0; a < 2 && !st; a++) { /* a 0: width from x1, x2; 1: height from y1, y2 */
      double lo = box[4 * r + a], hi = box[4 * r + a + 2], bins = (double)(a ? ph : pw);
      if (f32) {
        float s = (float)lo * (float)scale - (float)off, e = (float)hi * (float)scale - (float)off;
        float extent = e - s;
        if (!half_pixel && !(extent >= 1)) extent = 1;
        size[a] = ceilf(extent / (float)bins);
      } else {
        double extent = (hi * scale - off) - (lo * scale - off);
        if (!half_pixel && !(extent >= 1)) extent = 1;
        size[a] = ceil(extent / bins);
      }
      if (!(fabs(size[a]) <= 4096))
        st = onnx_refuse(n, LOOM_ERR_VALUE,
                         "roi %lld (%g, %g, %g, %g) takes a grid of %g samples per bin along "
                         "its %s; loom builds every sample and takes at most 4096",
                         (long long)r, box[4 * r], box[4 * r + 1], box[4 * r + 2], box[4 * r + 3],
                         size[a], a ? "height" : "width");
    }
    if (st) break;
    g->w[r] = size[0], g->h[r] = size[1];
    g->count[r] = size[0] * size[1] > 1 ? size[0] * size[1] : 1;
    if (size[1] > g->max_h) g->max_h = (int64_t)size[1];
    if (size[0] > g->max_w) g->max_w = (int64_t)size[0];
  }
  free(box);
  if (st) free(g->h), g->h = NULL;
  return st;
}

/* Each roi's bins averaged (or the greatest weighted tap taken) over a grid
 * of bilinear samples, as ONNX's reference: the taps of a sample outside
 * [-1, size] weigh 0 at position 0; sampling_ratio 0 takes each roi's grid
 * from its size, which needs the rois' values at import. */
static loom_status op_roi_align(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0), *rois = onnx_in(n, 1), *batch = onnx_in(n, 2);
  loom_shape xs = loom_shape_of(x), rs = loom_shape_of(rois), bs = loom_shape_of(batch);
  if (xs.ndim != 4 || rs.ndim != 2 || rs.dim[1] != 4 || bs.ndim != 1 || bs.dim[0] != rs.dim[0])
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "X of rank %d, rois of rank %d, batch_indices of rank %d: [N, C, H, W], "
                       "[R, 4] and [R] expected",
                       xs.ndim, rs.ndim, bs.ndim);
  if (!onnx_is_float(loom_dtype_of(x)))
    return onnx_refuse(n, LOOM_ERR_DTYPE, "X of dtype %s; ONNX defines it on floats",
                       loom_dtype_name(loom_dtype_of(x)));
  char mbuf[8], cbuf[24];
  const char *mode = onnx_attr_string(n, "mode", "avg", mbuf, sizeof mbuf);
  const char *ctm =
      onnx_attr_string(n, "coordinate_transformation_mode",
                       n->opset < 16 ? "output_half_pixel" : "half_pixel", cbuf, sizeof cbuf);
  bool max_mode = strcmp(mode, "max") == 0, half_pixel = strcmp(ctm, "half_pixel") == 0;
  if (!max_mode && strcmp(mode, "avg"))
    return onnx_refuse(n, LOOM_ERR_VALUE, "mode '%s'; avg or max expected", mode);
  if (!half_pixel && strcmp(ctm, "output_half_pixel"))
    return onnx_refuse(n, LOOM_ERR_VALUE,
                       "coordinate_transformation_mode '%s'; half_pixel or output_half_pixel "
                       "expected",
                       ctm);
  int64_t ph = onnx_attr_int(n, "output_height", 1), pw = onnx_attr_int(n, "output_width", 1),
          ratio = onnx_attr_int(n, "sampling_ratio", 0);
  double scale = onnx_attr_float(n, "spatial_scale", 1), off = half_pixel ? 0.5 : 0;
  if (ph < 1 || pw < 1 || ph > 4096 || pw > 4096 || ratio < 0 || ratio > 4096)
    return onnx_refuse(n, LOOM_ERR_VALUE,
                       "output_height %lld, output_width %lld, sampling_ratio %lld", (long long)ph,
                       (long long)pw, (long long)ratio);
  int64_t nrois = rs.dim[0], channels = xs.dim[1], height = xs.dim[2], width = xs.dim[3];
  loom_dtype dt = loom_dtype_of(x), wd = sampling_dtype(dt);
  roi_grids grids = {.max_h = ratio, .max_w = ratio};
  if (ratio == 0 && !n->in[1]->known)
    return onnx_refuse(n, LOOM_ERR_VALUE,
                       "sampling_ratio 0 sizes each roi's grid of samples from the roi: input 1 "
                       "('%s') is computed from the model's inputs, but loom needs its values "
                       "when it imports the model",
                       n->in[1]->name);
  if (ratio == 0) {
    loom_status st =
        adaptive_grids(n, nrois, wd == LOOM_F32, scale, off, half_pixel, ph, pw, &grids);
    if (st) return st;
  }
  int64_t sy = ph * grids.max_h, sx = pw * grids.max_w, samples = sy * sx;
  if (sy > 65536 || sx > 65536 || (double)nrois * (double)channels * (double)samples > 0x1p28) {
    free(grids.h);
    return onnx_refuse(n, LOOM_ERR_VALUE,
                       "%lld rois x %lld channels x %lld x %lld samples: loom builds every "
                       "sample and takes at most 65536 along an axis and 2^28 in all",
                       (long long)nrois, (long long)channels, (long long)sy, (long long)sx);
  }
  loom_tensor *r = loom_cast(rois, wd), *corner[4];
  for (int k = 0; k < 4; k++)
    corner[k] = loom_sub_s(loom_mul_s(loom_slice(r, 1, k, k + 1, 1), scale), off);
  roi_axis ax[2]; /* 0: y (height), 1: x (width) */
  for (int a = 0; a < 2; a++) {
    loom_tensor *start = corner[1 - a], *extent = loom_sub(corner[3 - a], start);
    if (!half_pixel) extent = loom_maximum_s(extent, 1);
    int64_t bins = a ? pw : ph;
    loom_tensor *g =
        ratio ? NULL : table(a ? grids.w : grids.h, LOOM_SHAPE(nrois, 1), wd, onnx_device(n));
    if (!roi_axis_samples(start, loom_div_s(extent, (double)bins), g, (double)ratio, bins,
                          a ? grids.max_w : grids.max_h, a ? width : height, wd, &ax[a])) {
      free(grids.h);
      return onnx_refuse(n, LOOM_ERR_OOM, "%lld samples' coordinates", (long long)(a ? sx : sy));
    }
  }
  loom_tensor *inside = loom_logical_and(loom_reshape(ax[0].inside, LOOM_SHAPE(nrois, sy, 1)),
                                         loom_reshape(ax[1].inside, LOOM_SHAPE(nrois, 1, sx)));
  loom_tensor *used = NULL;
  if (!ratio)
    used = loom_reshape(loom_logical_and(loom_reshape(ax[0].used, LOOM_SHAPE(nrois, sy, 1)),
                                         loom_reshape(ax[1].used, LOOM_SHAPE(nrois, 1, sx))),
                        LOOM_SHAPE(nrois, 1, samples));
  loom_tensor *planes = loom_index_select(
      loom_reshape(loom_cast(x, wd), LOOM_SHAPE(xs.dim[0], channels, height * width)), 0,
      loom_cast(batch, LOOM_I64));
  loom_tensor *acc = NULL;
  for (int k = 0; k < 4;
       k++) { /* (y_low, x_low), (y_low, x_high), (y_high, x_low), (y_high, x_high) */
    loom_tensor *ty = loom_reshape(ax[0].tap[k / 2], LOOM_SHAPE(nrois, sy, 1)),
                *tx = loom_reshape(ax[1].tap[k % 2], LOOM_SHAPE(nrois, 1, sx));
    loom_tensor *wy = loom_reshape(ax[0].weight[k / 2], LOOM_SHAPE(nrois, sy, 1)),
                *wx = loom_reshape(ax[1].weight[k % 2], LOOM_SHAPE(nrois, 1, sx));
    loom_tensor *at = loom_where_s(inside, loom_add(loom_mul_s(ty, (double)width), tx), 0);
    loom_tensor *w = loom_where_s(inside, loom_mul(wy, wx), 0);
    loom_tensor *term =
        loom_mul(loom_reshape(w, LOOM_SHAPE(nrois, 1, samples)),
                 gather_planes(planes, loom_reshape(at, LOOM_SHAPE(nrois, 1, samples))));
    acc = !acc ? term : max_mode ? loom_maximum(acc, term) : loom_add(acc, term);
  }
  if (used) acc = loom_where_s(used, acc, max_mode ? -INFINITY : 0);
  acc = loom_reshape(acc, LOOM_SHAPE(nrois, channels, ph, grids.max_h, pw, grids.max_w));
  const int grid_axes[2] = {3, 5};
  loom_tensor *y;
  if (max_mode) {
    y = loom_max(acc, grid_axes, 2, false);
    if (!ratio) { /* a roi whose grid is empty gives 0 */
      for (int64_t i = 0; i < nrois; i++) grids.h[i] = grids.h[i] > 0 && grids.w[i] > 0;
      y = loom_where_s(loom_ne_s(table(grids.h, LOOM_SHAPE(nrois, 1, 1, 1), wd, onnx_device(n)), 0),
                       y, 0);
    }
  } else {
    y = loom_sum(acc, grid_axes, 2, false);
    y = ratio ? loom_div_s(y, (double)(ratio * ratio))
              : loom_div(y, table(grids.count, LOOM_SHAPE(nrois, 1, 1, 1), wd, onnx_device(n)));
  }
  free(grids.h);
  onnx_out(n, 0, loom_cast(y, dt));
  return LOOM_OK;
}

/* ------------------------------------------------------------ DeformConv */

/* A convolution whose taps are moved by offset (per output position, kernel
 * element and offset group) and sampled (multi)linearly, a tap outside X
 * giving 0 (ONNX's reference samples with GridSample, align_corners, zeros
 * padding), scaled by mask, then contracted with W per group: 1 to 3
 * spatial dims. */
static loom_status op_deform_conv(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0), *w = onnx_in(n, 1), *offset = onnx_in(n, 2);
  loom_tensor *bias = onnx_has_in(n, 3) ? onnx_in(n, 3) : NULL,
              *mask = onnx_has_in(n, 4) ? onnx_in(n, 4) : NULL;
  loom_shape xs = loom_shape_of(x), ws = loom_shape_of(w), os = loom_shape_of(offset);
  int dims = xs.ndim - 2;
  if (dims < 1 || dims > 3 || ws.ndim != xs.ndim || os.ndim != xs.ndim)
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "X, W and offset of ranks %d, %d and %d: one rank, 1 to 3 spatial dims "
                       "expected",
                       xs.ndim, ws.ndim, os.ndim);
  loom_dtype dt = loom_dtype_of(x), wd = sampling_dtype(dt);
  if (!onnx_is_float(dt))
    return onnx_refuse(n, LOOM_ERR_DTYPE, "X of dtype %s; ONNX defines it on floats",
                       loom_dtype_name(dt));
  int64_t kernel[3], strides[3], dilations[3], pads[6] = {0}, v[6];
  int count;
  loom_status st = onnx_attr_ints(n, "kernel_shape", kernel, 3, &count);
  if (st) return st;
  if (count >= 0 && count != dims)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "kernel_shape has %d dims for %d spatial dims", count,
                       dims);
  for (int d = 0; d < dims; d++) {
    if (count >= 0 && kernel[d] != ws.dim[d + 2])
      return onnx_refuse(n, LOOM_ERR_SHAPE,
                         "kernel_shape's %lld along spatial dim %d differs from W's %lld",
                         (long long)kernel[d], d, (long long)ws.dim[d + 2]);
    kernel[d] = ws.dim[d + 2], strides[d] = dilations[d] = 1;
  }
  if ((st = onnx_attr_ints(n, "strides", v, 3, &count))) return st;
  for (int d = 0; d < count && d < dims; d++) strides[d] = v[d];
  if ((st = onnx_attr_ints(n, "dilations", v, 3, &count))) return st;
  for (int d = 0; d < count && d < dims; d++) dilations[d] = v[d];
  if ((st = onnx_attr_ints(n, "pads", v, 6, &count))) return st;
  if (count >= 0 && count != 2 * dims)
    return onnx_refuse(n, LOOM_ERR_VALUE, "%d pads for %d spatial dims", count, dims);
  for (int d = 0; d < count; d++) pads[d] = v[d];
  int64_t group = onnx_attr_int(n, "group", 1), offset_group = onnx_attr_int(n, "offset_group", 1);
  int64_t batch = xs.dim[0], channels = xs.dim[1], out_channels = ws.dim[0], taps = 1, outs = 1,
          plane = 1;
  if (group < 1 || offset_group < 1 || channels != ws.dim[1] * group || out_channels % group != 0 ||
      channels % offset_group != 0)
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "X with %lld channels, W of %lld x %lld, group %lld, offset_group %lld: "
                       "C = W's dim 1 x group, oC and C divisible by the groups expected",
                       (long long)channels, (long long)out_channels, (long long)ws.dim[1],
                       (long long)group, (long long)offset_group);
  for (int d = 0; d < dims; d++) {
    int64_t span = (kernel[d] - 1) * dilations[d] + 1;
    if (strides[d] < 1 || dilations[d] < 1 || pads[d] < 0 || pads[d + dims] < 0 ||
        os.dim[d + 2] != (xs.dim[d + 2] + pads[d] + pads[d + dims] - span) / strides[d] + 1 ||
        os.dim[d + 2] < 1)
      return onnx_refuse(n, LOOM_ERR_SHAPE,
                         "spatial dim %d: offset's %lld outputs do not follow from X's %lld, "
                         "kernel %lld, stride %lld, dilation %lld, pads %lld and %lld",
                         d, (long long)os.dim[d + 2], (long long)xs.dim[d + 2],
                         (long long)kernel[d], (long long)strides[d], (long long)dilations[d],
                         (long long)pads[d], (long long)pads[d + dims]);
    taps *= kernel[d], outs *= os.dim[d + 2], plane *= xs.dim[d + 2];
  }
  if (os.dim[0] != batch || os.dim[1] != offset_group * taps * dims)
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "offset of %lld x %lld: [N, offset_group x kernel elements x %d, ...] = "
                       "[%lld, %lld, ...] expected",
                       (long long)os.dim[0], (long long)os.dim[1], dims, (long long)batch,
                       (long long)(offset_group * taps * dims));
  if (mask) {
    loom_shape ms = loom_shape_of(mask);
    bool fits = ms.ndim == os.ndim;
    for (int d = 0; d < os.ndim && fits; d++)
      fits = ms.dim[d] == (d == 1 ? offset_group * taps : os.dim[d]);
    if (!fits)
      return onnx_refuse(n, LOOM_ERR_SHAPE,
                         "mask's shape is not offset's with offset_group x %lld channels",
                         (long long)taps);
  }
  if (bias && (onnx_rank(bias) != 1 || loom_shape_of(bias).dim[0] != out_channels))
    return onnx_refuse(n, LOOM_ERR_SHAPE, "B is not [%lld]", (long long)out_channels);
  int64_t lines = batch * offset_group, per_group = channels / offset_group, points = taps * outs;
  loom_tensor *moved = loom_reshape(loom_cast(offset, wd), LOOM_SHAPE(lines, taps, dims, outs));
  /* per axis: each tap's two whole positions' flat offsets in a plane and weights */
  loom_tensor *at[3][2], *weight[3][2];
  double *base = malloc(sizeof(double) * (size_t)points);
  if (!base) return onnx_refuse(n, LOOM_ERR_OOM, "%lld sampling points", (long long)points);
  int64_t stride_in_plane = plane;
  for (int d = 0; d < dims; d++) {
    int64_t size = xs.dim[d + 2], inner_k = 1, inner_o = 1;
    stride_in_plane /= size;
    for (int e = d + 1; e < dims; e++) inner_k *= kernel[e], inner_o *= os.dim[e + 2];
    for (int64_t p = 0; p < points; p++) { /* where tap k of output o lies, unmoved */
      int64_t k = p / outs, o = p % outs;
      base[p] = (double)(-pads[d] + strides[d] * ((o / inner_o) % os.dim[d + 2]) +
                         dilations[d] * ((k / inner_k) % kernel[d]));
    }
    loom_tensor *pos =
        loom_add(table(base, LOOM_SHAPE(1, taps, outs), wd, onnx_device(n)),
                 loom_reshape(loom_slice(moved, 2, d, d + 1, 1), LOOM_SHAPE(lines, taps, outs)));
    loom_tensor *low = loom_floor(pos), *t = loom_sub(pos, low);
    for (int k = 0; k < 2; k++) {
      loom_tensor *tap = k ? loom_add_s(low, 1) : low;
      loom_tensor *inside = loom_logical_and(loom_ge_s(tap, 0), loom_le_s(tap, (double)(size - 1)));
      weight[d][k] = loom_where_s(inside, k ? t : loom_rsub_s(1, t), 0);
      at[d][k] = loom_mul_s(loom_cast(loom_clamp(tap, 0, (double)(size - 1)), LOOM_I64),
                            (double)stride_in_plane);
    }
  }
  free(base);
  loom_tensor *planes = loom_reshape(loom_cast(x, wd), LOOM_SHAPE(lines, per_group, plane));
  loom_tensor *sampled = NULL;
  for (int c = 0; c < 1 << dims; c++) {
    loom_tensor *where = NULL, *wt = NULL;
    for (int d = 0; d < dims; d++) {
      int k = (c >> d) & 1;
      where = where ? loom_add(where, at[d][k]) : at[d][k];
      wt = wt ? loom_mul(wt, weight[d][k]) : weight[d][k];
    }
    loom_tensor *term =
        loom_mul(loom_reshape(wt, LOOM_SHAPE(lines, 1, points)),
                 gather_planes(planes, loom_reshape(where, LOOM_SHAPE(lines, 1, points))));
    sampled = sampled ? loom_add(sampled, term) : term;
  }
  if (mask)
    sampled = loom_mul(sampled, loom_reshape(loom_cast(mask, wd), LOOM_SHAPE(lines, 1, points)));
  int64_t in_per_group = channels / group, out_per_group = out_channels / group;
  loom_tensor *cols = loom_reshape(sampled, LOOM_SHAPE(batch, group, in_per_group * taps, outs));
  loom_tensor *wmat =
      loom_reshape(loom_cast(w, wd), LOOM_SHAPE(1, group, out_per_group, in_per_group * taps));
  loom_shape ys = os;
  ys.dim[1] = out_channels;
  loom_tensor *y = loom_reshape(loom_matmul(wmat, cols), ys);
  if (bias) {
    loom_shape bs = {.ndim = xs.ndim};
    for (int d = 0; d < xs.ndim; d++) bs.dim[d] = d == 1 ? out_channels : 1;
    y = loom_add(y, loom_reshape(loom_cast(bias, wd), bs));
  }
  onnx_out(n, 0, loom_cast(y, dt));
  return LOOM_OK;
}

const onnx_op onnx_ops_sampling[] = {
    ONNX_OP(GridSample, op_grid_sample), ONNX_OP(AffineGrid, op_affine_grid),
    ONNX_OP(Col2Im, op_col2im),          ONNX_OP(RotaryEmbedding, op_rotary_embedding),
    ONNX_OP(RoiAlign, op_roi_align),     ONNX_OP(DeformConv, op_deform_conv),
};
const int onnx_ops_sampling_count = sizeof onnx_ops_sampling / sizeof onnx_ops_sampling[0];
