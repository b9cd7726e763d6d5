/* Neural-network ops: products, convolutions, pools, normalizations, softmaxes. */
#include <math.h>
#include <string.h>

#include "io/onnx/onnx.h"

static loom_status op_matmul(onnx_node *n) {
  onnx_out(n, 0, loom_matmul(onnx_in(n, 0), onnx_in(n, 1)));
  return LOOM_OK;
}

/* alpha A' B' + beta C, A' and B' transposed on request. */
static loom_status op_gemm(onnx_node *n) {
  loom_tensor *a = onnx_in(n, 0), *b = onnx_in(n, 1);
  if (onnx_rank(a) != 2 || onnx_rank(b) != 2)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "A and B must be matrices (ranks %d and %d)",
                       onnx_rank(a), onnx_rank(b));
  if (onnx_attr_int(n, "transA", 0)) a = loom_transpose(a, 0, 1);
  if (onnx_attr_int(n, "transB", 0)) b = loom_transpose(b, 0, 1);
  double alpha = onnx_attr_float(n, "alpha", 1), beta = onnx_attr_float(n, "beta", 1);
  loom_tensor *y = loom_matmul(a, b);
  if (alpha != 1) y = loom_mul_s(y, alpha);
  if (onnx_has_in(n, 2) && beta != 0) {
    loom_tensor *c = onnx_in(n, 2);
    y = loom_add(y, beta == 1 ? c : loom_mul_s(c, beta));
  }
  onnx_out(n, 0, y);
  return LOOM_OK;
}

/* ------------------------------------------------------------ windows */

/* A sliding window's geometry over the spatial dims (rank - 2 of them). */
typedef struct window {
  int dims;
  int64_t in[3], kernel[3], stride[3], dilation[3], lo[3], hi[3], out[3];
  /* padding ceil_mode adds past hi, where no window element counts */
  int64_t extra[3];
} window;

static loom_status window_of(onnx_node *n, const loom_shape *x, const int64_t *kernel, window *w) {
  int dims = x->ndim - 2;
  if (dims < 1 || dims > 3)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "a rank-%d input; 1 to 3 spatial dims expected", x->ndim);
  memset(w, 0, sizeof *w);
  w->dims = dims;
  int64_t v[6];
  int count;
  loom_status st;
  for (int d = 0; d < dims; d++) {
    w->in[d] = x->dim[d + 2];
    w->kernel[d] = kernel[d];
    w->stride[d] = w->dilation[d] = 1;
  }
  if ((st = onnx_attr_ints(n, "strides", v, 3, &count))) return st;
  for (int d = 0; d < count && d < dims; d++) w->stride[d] = v[d];
  if ((st = onnx_attr_ints(n, "dilations", v, 3, &count))) return st;
  for (int d = 0; d < count && d < dims; d++) w->dilation[d] = v[d];
  if ((st = onnx_attr_ints(n, "pads", v, 6, &count))) return st;
  if (count >= 0 && count != 2 * dims)
    return onnx_refuse(n, LOOM_ERR_VALUE, "%d pads for %d spatial dims", count, dims);
  for (int d = 0; d < count / 2; d++) w->lo[d] = v[d], w->hi[d] = v[d + dims];
  char buf[16];
  const char *pad = onnx_attr_string(n, "auto_pad", "NOTSET", buf, sizeof buf);
  bool ceil_mode = onnx_attr_int(n, "ceil_mode", 0);
  for (int d = 0; d < dims; d++) {
    const int64_t big = (int64_t)1
                        << 20; /* past any real window; keeps the sizes' arithmetic exact */
    if (w->stride[d] < 1 || w->dilation[d] < 1 || w->kernel[d] < 1 || w->lo[d] < 0 ||
        w->hi[d] < 0 || w->stride[d] > big || w->dilation[d] > big || w->kernel[d] > big ||
        w->lo[d] > big || w->hi[d] > big)
      return onnx_refuse(n, LOOM_ERR_VALUE,
                         "spatial dim %d: kernel %lld, stride %lld, dilation %lld, pads %lld "
                         "and %lld",
                         d, (long long)w->kernel[d], (long long)w->stride[d],
                         (long long)w->dilation[d], (long long)w->lo[d], (long long)w->hi[d]);
    int64_t span = (w->kernel[d] - 1) * w->dilation[d] + 1;
    if (strcmp(pad, "SAME_UPPER") == 0 || strcmp(pad, "SAME_LOWER") == 0) {
      int64_t out = (w->in[d] + w->stride[d] - 1) / w->stride[d];
      int64_t total = (out - 1) * w->stride[d] + span - w->in[d];
      if (total < 0) total = 0;
      w->lo[d] = pad[5] == 'U' ? total / 2 : total - total / 2;
      w->hi[d] = total - w->lo[d];
    } else if (strcmp(pad, "VALID") == 0) {
      w->lo[d] = w->hi[d] = 0;
    } else if (strcmp(pad, "NOTSET")) {
      return onnx_refuse(n, LOOM_ERR_VALUE, "auto_pad '%s'", pad);
    }
    int64_t room = w->in[d] + w->lo[d] + w->hi[d] - span;
    if (room < 0)
      return onnx_refuse(n, LOOM_ERR_SHAPE,
                         "the window (%lld) is larger than spatial dim %d "
                         "padded (%lld)",
                         (long long)span, d, (long long)(w->in[d] + w->lo[d] + w->hi[d]));
    w->out[d] = (ceil_mode ? (room + w->stride[d] - 1) / w->stride[d] : room / w->stride[d]) + 1;
    /* a window must start inside the input or its low padding (as torch, ONNX's reference) */
    if (ceil_mode && (w->out[d] - 1) * w->stride[d] >= w->in[d] + w->lo[d]) w->out[d]--;
    int64_t need = (w->out[d] - 1) * w->stride[d] + span - (w->in[d] + w->lo[d] + w->hi[d]);
    w->extra[d] = need > 0 ? need : 0;
  }
  return LOOM_OK;
}

/* x padded by the window's pads (value) and ceil-mode room (value too). */
static loom_tensor *pad_window(loom_tensor *x, const window *w, double value, double extra_value) {
  int rank = w->dims + 2;
  int64_t pads[2 * LOOM_MAX_DIMS] = {0}, extra[2 * LOOM_MAX_DIMS] = {0};
  bool any = false, any_extra = false;
  for (int d = 0; d < w->dims; d++) {
    int k = rank - 1 - (d + 2);
    pads[2 * k] = w->lo[d], pads[2 * k + 1] = w->hi[d];
    extra[2 * k + 1] = w->extra[d];
    any |= w->lo[d] || w->hi[d];
    any_extra |= w->extra[d] != 0;
  }
  loom_tensor *r = any ? loom_pad(x, pads, 2 * rank, value) : loom_retain(x);
  if (any_extra) r = loom_pad(r, extra, 2 * rank, extra_value);
  return r;
}

/* The window's element at offset k (one index per spatial dim) for every output. */
static loom_tensor *window_tap(loom_tensor *padded, const window *w, const int64_t *k) {
  loom_tensor *r = loom_retain(padded);
  for (int d = 0; d < w->dims; d++) {
    int64_t start = k[d] * w->dilation[d];
    loom_tensor *next =
        loom_slice(r, d + 2, start, start + (w->out[d] - 1) * w->stride[d] + 1, w->stride[d]);
    loom_free(r);
    r = next;
  }
  return r;
}

static bool next_offset(const window *w, int64_t *k) {
  for (int d = w->dims - 1; d >= 0; d--) {
    if (++k[d] < w->kernel[d]) return true;
    k[d] = 0;
  }
  return false;
}

static loom_status kernel_shape(onnx_node *n, const loom_shape *x, int64_t *kernel) {
  int count;
  loom_status st = onnx_attr_ints(n, "kernel_shape", kernel, 3, &count);
  if (st) return st;
  if (count != x->ndim - 2)
    return onnx_refuse(n, LOOM_ERR_VALUE, "kernel_shape has %d dims for a rank-%d input", count,
                       x->ndim);
  return LOOM_OK;
}

/* A pool's window from its kernel_shape and the other attributes. */
static loom_status pool_window(onnx_node *n, loom_tensor *x, window *w) {
  loom_shape s = loom_shape_of(x);
  int64_t kernel[3];
  loom_status st = kernel_shape(n, &s, kernel);
  return st ? st : window_of(n, &s, kernel, w);
}

/* x's elements numbered as MaxPool's Indices number them: flat over the
 * whole tensor, each (n, c) plane in row-major order (storage_order 0) or
 * column-major (1: the first spatial dim fastest). A sum of one arange per
 * axis, its step the axis' stride: an arange of the whole, reshaped, would
 * not follow a symbolic batch. */
static loom_tensor *flat_positions(const loom_shape *s, bool column_major, loom_device dev) {
  int64_t stride[LOOM_MAX_DIMS], plane = 1;
  for (int d = s->ndim - 1; d >= 2; d--) stride[d] = plane, plane *= s->dim[d];
  if (column_major)
    for (int64_t d = 2, inner = 1; d < s->ndim; d++) stride[d] = inner, inner *= s->dim[d];
  stride[1] = plane, stride[0] = plane * s->dim[1];
  loom_tensor *r = NULL;
  for (int d = 0; d < s->ndim; d++) {
    loom_shape along = {.ndim = s->ndim};
    for (int e = 0; e < s->ndim; e++) along.dim[e] = e == d ? s->dim[d] : 1;
    loom_tensor *a = loom_reshape(
        loom_arange(0, (double)(s->dim[d] * stride[d]), (double)stride[d], LOOM_I64, dev), along);
    r = r ? loom_add(r, a) : a;
  }
  return r;
}

/* The Indices output: the position of each window's first greatest element,
 * as ONNX's reference finds it (the first element inside the input, then any
 * greater one; -1 for a window of padding only). */
static loom_status op_max_pool(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  window w;
  loom_status st = pool_window(n, x, &w);
  if (st) return st;
  bool indices = n->nout > 1 && n->proto->output[1] && n->proto->output[1][0];
  int64_t storage_order = onnx_attr_int(n, "storage_order", 0);
  if (indices && storage_order != 0 && storage_order != 1)
    return onnx_refuse(n, LOOM_ERR_VALUE, "storage_order %lld; 0 or 1 expected",
                       (long long)storage_order);
  /* pads never win: -inf, or an integer dtype's least value */
  loom_dtype dt = loom_dtype_of(x);
  double least, greatest;
  onnx_int_range(dt, &least, &greatest);
  loom_tensor *padded = pad_window(x, &w, least, least), *positions = NULL;
  if (indices) {
    loom_shape s = loom_shape_of(x);
    positions = pad_window(flat_positions(&s, storage_order == 1, onnx_device(n)), &w, -1, -1);
  }
  int64_t k[3] = {0};
  loom_tensor *r = NULL, *at = NULL;
  do {
    loom_tensor *tap = window_tap(padded, &w, k);
    if (!indices) {
      r = r ? loom_maximum(r, tap) : tap;
      continue;
    }
    loom_tensor *tap_at = window_tap(positions, &w, k);
    if (!r) {
      r = tap, at = tap_at;
      continue;
    }
    loom_tensor *takes =
        loom_logical_and(loom_ge_s(tap_at, 0), loom_logical_or(loom_lt_s(at, 0), loom_gt(tap, r)));
    r = loom_where(takes, tap, r);
    at = loom_where(takes, tap_at, at);
  } while (next_offset(&w, k));
  onnx_out(n, 0, r);
  if (indices) onnx_out(n, 1, at);
  return LOOM_OK;
}

/* count_include_pad counts the pads (not ceil mode's room) in each window's size. */
static loom_status op_average_pool(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  loom_shape s = loom_shape_of(x);
  window w;
  loom_status st = pool_window(n, x, &w);
  if (st) return st;
  bool include = onnx_attr_int(n, "count_include_pad", 0);
  loom_tensor *padded = pad_window(x, &w, 0, 0);
  loom_shape ones_shape = {.ndim = s.ndim};
  for (int d = 0; d < s.ndim; d++) ones_shape.dim[d] = d < 2 ? 1 : s.dim[d];
  loom_tensor *ones = loom_full(ones_shape, 1, loom_dtype_of(x), onnx_device(n));
  loom_tensor *counted = pad_window(ones, &w, include ? 1 : 0, 0);
  int64_t k[3] = {0};
  loom_tensor *sum = NULL, *count = NULL;
  do {
    loom_tensor *tap = window_tap(padded, &w, k), *c = window_tap(counted, &w, k);
    sum = sum ? loom_add(sum, tap) : tap;
    count = count ? loom_add(count, c) : c;
  } while (next_offset(&w, k));
  onnx_out(n, 0, loom_div(sum, count));
  return LOOM_OK;
}

static loom_status global_pool(onnx_node *n, bool max) {
  loom_tensor *x = onnx_in(n, 0);
  int rank = onnx_rank(x), axes[LOOM_MAX_DIMS], k = 0;
  for (int d = 2; d < rank; d++) axes[k++] = d;
  onnx_out(n, 0, max ? loom_max(x, axes, k, true) : loom_mean(x, axes, k, true));
  return LOOM_OK;
}
static loom_status op_global_average_pool(onnx_node *n) { return global_pool(n, false); }
static loom_status op_global_max_pool(onnx_node *n) { return global_pool(n, true); }

/* x [N, C, spatial..] convolved with k [M, C/groups, kernel..] (and bias b, or
 * NULL) by loom's 2-D convolution: 1-D as 2-D of height 1; 3-D as the sum over
 * the kernel's depth of 2-D convolutions of the depth planes each tap reads
 * (every output depth a row of the batch), the bias added once. pad: per
 * spatial dim, both sides (1-D and 2-D only: a 3-D input comes padded). */
static loom_status conv_spatial(onnx_node *n, int dims, loom_tensor *x, loom_tensor *k,
                                loom_tensor *b, int64_t groups, const int64_t *stride,
                                const int64_t *dil, const int64_t *pad, loom_tensor **out) {
  *out = NULL;
  int first = dims == 3 ? 1 : 0; /* the spatial dim that is loom's height */
  loom_conv2d_opts o = {.groups = (int)groups};
  for (int d = 0; d < 2; d++) {
    int sd = dims == 1 ? d - 1 : first + d; /* 1-D: the added height is dim -1 */
    o.stride[d] = sd < 0 ? 1 : (int)stride[sd];
    o.dilation[d] = sd < 0 ? 1 : (int)dil[sd];
    o.padding[d] = sd < 0 || dims == 3 ? 0 : (int)pad[sd];
  }
  if (dims == 1) {
    *out = loom_squeeze(loom_conv2d_f(loom_unsqueeze(x, 2), loom_unsqueeze(k, 2), b, o), 2);
    return LOOM_OK;
  }
  if (dims == 2) {
    *out = loom_conv2d_f(x, k, b, o);
    return LOOM_OK;
  }
  loom_shape s = loom_shape_of(x), ks = loom_shape_of(k);
  int64_t span = (ks.dim[2] - 1) * dil[0] + 1;
  if (s.dim[2] < span)
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "the kernel's depth (%lld) is deeper than the input's "
                       "(%lld, padded)",
                       (long long)span, (long long)s.dim[2]);
  int64_t depth = (s.dim[2] - span) / stride[0] + 1;
  int to_rows[5] = {0, 2, 1, 3, 4};
  loom_tensor *sum = NULL;
  for (int64_t t = 0; t < ks.dim[2]; t++) {
    int64_t at = t * dil[0];
    loom_tensor *planes = loom_slice(x, 2, at, at + (depth - 1) * stride[0] + 1, stride[0]);
    loom_tensor *rows = loom_reshape(loom_permute(planes, to_rows, 5),
                                     LOOM_SHAPE(s.dim[0] * depth, s.dim[1], s.dim[3], s.dim[4]));
    loom_tensor *tap = loom_squeeze(loom_slice(k, 2, t, t + 1, 1), 2);
    loom_tensor *y = loom_conv2d_f(rows, tap, t == 0 ? b : NULL, o);
    sum = sum ? loom_add(sum, y) : y;
  }
  loom_shape ys = loom_shape_of(sum); /* [N * depth, M, OH, OW] */
  loom_tensor *split =
      loom_reshape(sum, LOOM_SHAPE(s.dim[0], depth, ys.dim[1], ys.dim[2], ys.dim[3]));
  *out = loom_permute(split, to_rows, 5);
  return LOOM_OK;
}

/* 1-D, 2-D and 3-D: loom's convolution (conv_spatial), with asymmetric padding
 * added before it; the node's attributes say how. */
loom_status onnx_conv(onnx_node *n, loom_tensor *x, loom_tensor *wt, loom_tensor *b,
                      loom_tensor **out) {
  *out = NULL;
  loom_shape s = loom_shape_of(x), ws = loom_shape_of(wt);
  if (ws.ndim != s.ndim)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "weight rank %d for input rank %d", ws.ndim, s.ndim);
  int64_t kernel[3] = {0};
  for (int d = 2; d < ws.ndim && d < 5; d++) kernel[d - 2] = ws.dim[d];
  int64_t given[3];
  int count;
  loom_status st = onnx_attr_ints(n, "kernel_shape", given, 3, &count);
  if (st) return st;
  for (int d = 0; d < count && d < 3; d++)
    if (given[d] != kernel[d])
      return onnx_refuse(n, LOOM_ERR_SHAPE, "kernel_shape %lld differs from the weight's %lld",
                         (long long)given[d], (long long)kernel[d]);
  window w;
  if ((st = window_of(n, &s, kernel, &w))) return st;
  for (int d = 0; d < w.dims; d++) w.extra[d] = 0;
  bool symmetric = w.dims < 3; /* 3-D pads first: conv_spatial's planes are unpadded */
  for (int d = 0; d < w.dims; d++) symmetric &= w.lo[d] == w.hi[d];
  loom_tensor *in = symmetric ? loom_retain(x) : pad_window(x, &w, 0, 0);
  int64_t none[3] = {0};
  return conv_spatial(n, w.dims, in, wt, b, onnx_attr_int(n, "group", 1), w.stride, w.dilation,
                      symmetric ? w.lo : none, out);
}

static loom_status op_conv(onnx_node *n) {
  loom_tensor *y;
  loom_status st = onnx_conv(n, onnx_in(n, 0), onnx_in(n, 1), onnx_in(n, 2), &y);
  if (!st) onnx_out(n, 0, y);
  return st;
}

/* The gradient of a convolution as a convolution: the input spread `stride`
 * apart, padded by the kernel's span less the pads, convolved with the
 * weight's groups transposed and flipped. */
static loom_status op_conv_transpose(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0), *wt = onnx_in(n, 1), *b = onnx_in(n, 2);
  loom_shape s = loom_shape_of(x), ws = loom_shape_of(wt);
  int dims = s.ndim - 2;
  if (dims < 1 || dims > 3 || ws.ndim != s.ndim)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "input rank %d, weight rank %d: 1-D to 3-D only", s.ndim,
                       ws.ndim);
  int64_t groups = onnx_attr_int(n, "group", 1);
  if (groups < 1 || s.dim[1] != ws.dim[0] || ws.dim[0] % groups)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "%lld input channels, weight [%lld, ...], %lld groups",
                       (long long)s.dim[1], (long long)ws.dim[0], (long long)groups);
  int64_t stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1}, lo[3] = {0}, hi[3] = {0}, outpad[3] = {0};
  int64_t v[6], shape_out[3];
  int count, nshape;
  loom_status st;
  if ((st = onnx_attr_ints(n, "strides", v, 3, &count))) return st;
  for (int d = 0; d < count; d++) stride[d] = v[d];
  if ((st = onnx_attr_ints(n, "dilations", v, 3, &count))) return st;
  for (int d = 0; d < count; d++) dil[d] = v[d];
  if ((st = onnx_attr_ints(n, "output_padding", v, 3, &count))) return st;
  for (int d = 0; d < count; d++) outpad[d] = v[d];
  if ((st = onnx_attr_ints(n, "pads", v, 6, &count))) return st;
  bool pads_given = count >= 0;
  if (pads_given && count != 2 * dims)
    return onnx_refuse(n, LOOM_ERR_VALUE, "%d pads for %d spatial dims", count, dims);
  for (int d = 0; d < count / 2; d++) lo[d] = v[d], hi[d] = v[d + dims];
  if ((st = onnx_attr_ints(n, "output_shape", shape_out, 3, &nshape))) return st;
  if (nshape >= 0 && nshape < dims)
    return onnx_refuse(n, LOOM_ERR_VALUE, "an output_shape of %d dims for %d spatial dims", nshape,
                       dims);
  char buf[16];
  const char *pad = onnx_attr_string(n, "auto_pad", "NOTSET", buf, sizeof buf);
  bool same = strncmp(pad, "SAME", 4) == 0;
  for (int d = 0; d < dims; d++) {
    int64_t in = s.dim[d + 2], span = (ws.dim[d + 2] - 1) * dil[d] + 1;
    const int64_t big = (int64_t)1 << 20;
    if (stride[d] < 1 || dil[d] < 1 || stride[d] > big || dil[d] > big || outpad[d] < 0 ||
        outpad[d] > big || lo[d] < -big || lo[d] > big || hi[d] < -big || hi[d] > big)
      return onnx_refuse(n, LOOM_ERR_VALUE, "stride %lld, dilation %lld", (long long)stride[d],
                         (long long)dil[d]);
    if (!pads_given && (nshape >= 0 || same)) {
      /* ONNX's reference: floor division; a negative total pads the output */
      int64_t want = nshape >= 0 ? shape_out[nshape - dims + d] : in * stride[d];
      int64_t total = stride[d] * (in - 1) + outpad[d] + span - want;
      int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      bool upper = strcmp(pad, "SAME_UPPER") == 0;
      lo[d] = upper ? half : total - half;
      hi[d] = total - lo[d];
    }
  }
  /* spread: [.., H, W] -> [.., H, s, W, s] zero-filled, then cut the last s - 1 */
  loom_tensor *spread = loom_retain(x);
  for (int d = 0; d < dims; d++) {
    if (stride[d] == 1) continue;
    int axis = d + 2, r = onnx_rank(spread);
    loom_tensor *u = loom_unsqueeze(spread, axis + 1);
    /* the new axis (axis + 1 of r + 1) is the (r - axis - 1)-th from the end */
    int64_t p2[2 * LOOM_MAX_DIMS] = {0};
    p2[2 * (r - axis - 1) + 1] = stride[d] - 1;
    loom_tensor *padded = loom_pad(u, p2, 2 * (r + 1), 0);
    loom_shape ps = loom_shape_of(padded), merged = {.ndim = r};
    for (int k = 0, m = 0; k < ps.ndim; k++) {
      if (k == axis + 1) continue;
      merged.dim[m++] = k == axis ? ps.dim[axis] * ps.dim[axis + 1] : ps.dim[k];
    }
    loom_tensor *flat = loom_reshape(padded, merged);
    loom_free(spread);
    spread = loom_slice(flat, axis, 0, merged.dim[axis] - (stride[d] - 1), 1);
    loom_free(u), loom_free(padded), loom_free(flat);
  }
  /* pad each side by span - 1 - pad (negative crops), plus output_padding after */
  int64_t pads[2 * LOOM_MAX_DIMS] = {0};
  for (int d = 0; d < dims; d++) {
    int k = dims - 1 - d, span = (int)((ws.dim[d + 2] - 1) * dil[d]);
    pads[2 * k] = span - lo[d];
    pads[2 * k + 1] = span - hi[d] + outpad[d];
  }
  loom_tensor *in = loom_pad(spread, pads, 2 * dims, 0);
  /* weight [C, M/g, k..] -> [M, C/g, k..], flipped */
  int64_t c = ws.dim[0], mg = ws.dim[1];
  loom_shape gshape = {.ndim = ws.ndim + 1, .dim = {groups, c / groups, mg}};
  for (int d = 2; d < ws.ndim; d++) gshape.dim[d + 1] = ws.dim[d];
  int perm[LOOM_MAX_DIMS] = {0, 2, 1, 3, 4, 5};
  loom_tensor *k = loom_permute(loom_reshape(wt, gshape), perm, gshape.ndim);
  loom_shape kshape = {.ndim = ws.ndim, .dim = {groups * mg, c / groups}};
  for (int d = 2; d < ws.ndim; d++) kshape.dim[d] = ws.dim[d];
  k = loom_reshape(k, kshape);
  for (int d = 2; d < ws.ndim; d++) k = loom_flip(k, d);
  int64_t ones[3] = {1, 1, 1}, none[3] = {0};
  loom_tensor *y;
  loom_status cst = conv_spatial(n, dims, in, k, b, groups, ones, dil, none, &y);
  if (!cst) onnx_out(n, 0, y);
  return cst;
}

/* (sum over the window of |x|^p)^(1/p); pads count as zeros. */
static loom_status op_lp_pool(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  window w;
  loom_status st = pool_window(n, x, &w);
  if (st) return st;
  int64_t pi = onnx_attr_int(n, "p", 2);
  if (pi < 1 || pi > 64) return onnx_refuse(n, LOOM_ERR_VALUE, "p %lld", (long long)pi);
  double p = (double)pi;
  loom_tensor *padded = pad_window(loom_pow_s(loom_abs(x), p), &w, 0, 0);
  int64_t k[3] = {0};
  loom_tensor *sum = NULL;
  do {
    loom_tensor *tap = window_tap(padded, &w, k);
    sum = sum ? loom_add(sum, tap) : tap;
  } while (next_offset(&w, k));
  onnx_out(n, 0, loom_pow_s(sum, 1 / p));
  return LOOM_OK;
}

/* ------------------------------------------------------------ normalizations */

/* A per-channel vector [C] shaped to broadcast along dim 1 of a rank-`rank` tensor. */
static loom_tensor *per_channel(loom_tensor *v, int rank) {
  loom_shape s = {.ndim = rank};
  for (int d = 0; d < rank; d++) s.dim[d] = d == 1 ? loom_numel(v) : 1;
  return loom_reshape(v, s);
}

static loom_status op_batch_norm(onnx_node *n) {
  if (onnx_attr_int(n, "training_mode", 0))
    return onnx_refuse(n, LOOM_ERR_VALUE, "training_mode: loom imports models for inference");
  loom_tensor *x = onnx_in(n, 0);
  int rank = onnx_rank(x);
  double eps = onnx_attr_float(n, "epsilon", 1e-5);
  loom_tensor *scale = per_channel(onnx_in(n, 1), rank), *bias = per_channel(onnx_in(n, 2), rank);
  loom_tensor *mean = per_channel(onnx_in(n, 3), rank), *var = per_channel(onnx_in(n, 4), rank);
  loom_tensor *inv = loom_mul(scale, loom_rsqrt(loom_add_s(var, eps)));
  onnx_out(n, 0, loom_add(loom_mul(loom_sub(x, mean), inv), bias));
  return LOOM_OK;
}

/* (x - mean) / sqrt(var + eps) over axes, with the mean and 1/sqrt(var + eps). */
static loom_tensor *normalize(loom_tensor *x, const int *axes, int nax, double eps,
                              loom_tensor **mean_out, loom_tensor **inv_out) {
  loom_tensor *mean = loom_mean(x, axes, nax, true);
  loom_tensor *centered = loom_sub(x, mean);
  loom_tensor *var = loom_mean(loom_mul(centered, centered), axes, nax, true);
  loom_tensor *inv = loom_rsqrt(loom_add_s(var, eps));
  if (mean_out) *mean_out = loom_retain(mean);
  if (inv_out) *inv_out = loom_retain(inv);
  return loom_mul(centered, inv);
}

static loom_status op_instance_norm(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int rank = onnx_rank(x), axes[LOOM_MAX_DIMS], k = 0;
  for (int d = 2; d < rank; d++) axes[k++] = d;
  loom_tensor *y = normalize(x, axes, k, onnx_attr_float(n, "epsilon", 1e-5), NULL, NULL);
  y = loom_add(loom_mul(y, per_channel(onnx_in(n, 1), rank)), per_channel(onnx_in(n, 2), rank));
  onnx_out(n, 0, y);
  return LOOM_OK;
}

/* Over the dims from axis on, computed in F32 at least (stash_type 1). */
static loom_status op_layer_norm(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int axes[LOOM_MAX_DIMS], k;
  loom_status st = onnx_trailing_axes(n, onnx_rank(x), axes, &k);
  if (st) return st;
  loom_dtype dt = loom_dtype_of(x);
  loom_dtype work = dt == LOOM_F64 ? LOOM_F64 : LOOM_F32;
  loom_tensor *mean, *inv;
  loom_tensor *y =
      normalize(loom_cast(x, work), axes, k, onnx_attr_float(n, "epsilon", 1e-5), &mean, &inv);
  y = loom_cast(y, dt);
  y = loom_mul(y, onnx_in(n, 1));
  if (onnx_has_in(n, 2)) y = loom_add(y, onnx_in(n, 2));
  onnx_out(n, 0, y);
  onnx_out(n, 1, mean);
  onnx_out(n, 2, inv);
  return LOOM_OK;
}

/* Opset 18's scale and bias are per group; 21's per channel. */
static loom_status op_group_norm(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  loom_shape s = loom_shape_of(x);
  int64_t groups = onnx_attr_int(n, "num_groups", 0);
  if (s.ndim < 3 || groups < 1 || s.dim[1] % groups)
    return onnx_refuse(n, LOOM_ERR_VALUE, "%lld groups of %lld channels", (long long)groups,
                       (long long)(s.ndim > 1 ? s.dim[1] : 0));
  loom_shape g = {.ndim = 3, .dim = {s.dim[0], groups, -1}};
  int axes[] = {2};
  loom_tensor *y =
      normalize(loom_reshape(x, g), axes, 1, onnx_attr_float(n, "epsilon", 1e-5), NULL, NULL);
  loom_tensor *scale = onnx_in(n, 1), *bias = onnx_in(n, 2);
  if (n->opset < 21 && loom_numel(scale) == groups) {
    loom_shape gs = {.ndim = 3, .dim = {1, groups, 1}};
    y = loom_add(loom_mul(y, loom_reshape(scale, gs)), loom_reshape(bias, gs));
    onnx_out(n, 0, loom_reshape(y, s));
  } else {
    y = loom_reshape(y, s);
    onnx_out(n, 0, loom_add(loom_mul(y, per_channel(scale, s.ndim)), per_channel(bias, s.ndim)));
  }
  return LOOM_OK;
}

static loom_status op_mean_variance_norm(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int64_t raw[LOOM_MAX_DIMS] = {0, 2, 3};
  int count, axes[LOOM_MAX_DIMS];
  loom_status st = onnx_attr_ints(n, "axes", raw, LOOM_MAX_DIMS, &count);
  if (st) return st;
  if (count < 0) count = 3;
  for (int i = 0; i < count; i++)
    if ((st = onnx_axis(n, raw[i], onnx_rank(x), &axes[i]))) return st;
  onnx_out(n, 0, normalize(x, axes, count, 1e-9, NULL, NULL));
  return LOOM_OK;
}

static loom_status op_lp_norm(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int axis;
  loom_status st = onnx_axis(n, onnx_attr_int(n, "axis", -1), onnx_rank(x), &axis);
  if (st) return st;
  int64_t p = onnx_attr_int(n, "p", 2);
  if (p != 1 && p != 2)
    return onnx_refuse(n, LOOM_ERR_VALUE, "p %lld is neither 1 nor 2", (long long)p);
  loom_tensor *norm = p == 1 ? loom_sum(loom_abs(x), &axis, 1, true)
                             : loom_sqrt(loom_sum(loom_mul(x, x), &axis, 1, true));
  /* a zero norm leaves zeros (ONNX's reference) */
  onnx_out(n, 0, loom_div(x, loom_where_s(loom_ne_s(norm, 0), norm, 1)));
  return LOOM_OK;
}

/* Before opset 13 the input is seen as 2-D: dims before axis (default 1), dims from it. */
static loom_status softmax_like(onnx_node *n, int kind) {
  loom_tensor *x = onnx_in(n, 0);
  loom_shape s = loom_shape_of(x);
  int axis;
  bool coerce = n->opset < 13;
  loom_status st = onnx_axis(n, onnx_attr_int(n, "axis", coerce ? 1 : -1), s.ndim, &axis);
  if (st) return st;
  loom_tensor *in = loom_retain(x);
  if (coerce) {
    int64_t a = 1, b = 1;
    for (int d = 0; d < s.ndim; d++) *(d < axis ? &a : &b) *= s.dim[d];
    in = loom_reshape(x, LOOM_SHAPE(a, b));
    axis = 1;
  }
  loom_tensor *y;
  if (kind == 0) {
    y = loom_softmax(in, axis);
  } else if (kind == 1) {
    y = loom_log_softmax(in, axis);
  } else {
    loom_tensor *i = loom_argmax(in, axis, true);
    loom_shape is = loom_shape_of(in), cs = {.ndim = is.ndim};
    for (int d = 0; d < is.ndim; d++) cs.dim[d] = d == axis ? is.dim[d] : 1;
    loom_tensor *classes =
        loom_reshape(loom_arange(0, (double)is.dim[axis], 1, LOOM_I64, onnx_device(n)), cs);
    y = loom_cast(loom_eq(i, classes), loom_dtype_of(x));
  }
  onnx_out(n, 0, coerce ? loom_reshape(y, s) : y);
  return LOOM_OK;
}
static loom_status op_softmax(onnx_node *n) { return softmax_like(n, 0); }
static loom_status op_log_softmax(onnx_node *n) { return softmax_like(n, 1); }
static loom_status op_hardmax(onnx_node *n) { return softmax_like(n, 2); }

/* ------------------------------------------------------------ einsum */

/* A term's letters with "..." spelled out as the ellipsis's own letters
 * ('0'... from the right, so broadcast dims line up); false if malformed. */
static bool expand_term(const char *term, size_t len, int rank, int ellipsis_rank, char *out,
                        int *nout) {
  int letters = 0;
  const char *dots = NULL;
  for (size_t i = 0; i < len; i++) {
    if (term[i] == '.') {
      if (dots || i + 2 >= len + 0 || term[i + 1] != '.' || term[i + 2] != '.') return false;
      dots = term + i;
      i += 2;
    } else if ((term[i] >= 'a' && term[i] <= 'z') || (term[i] >= 'A' && term[i] <= 'Z')) {
      letters++;
    } else if (term[i] != ' ') {
      return false;
    }
  }
  int k = dots ? (rank >= 0 ? rank - letters : ellipsis_rank) : 0;
  if (k < 0 || (rank >= 0 && !dots && letters != rank) || letters + k > LOOM_MAX_DIMS) return false;
  int n = 0;
  for (size_t i = 0; i < len; i++) {
    if (term[i] == '.') {
      for (int e = 0; e < k; e++) out[n++] = (char)('0' + (ellipsis_rank - k) + e);
      i += 2;
    } else if (term[i] != ' ') {
      out[n++] = term[i];
    }
  }
  *nout = n;
  return true;
}

/* Every operand brought to the order of all the equation's letters (a
 * repeated letter within a term first takes the diagonal), multiplied, summed
 * over the letters the output lacks, and permuted to the output's order. */
static loom_status op_einsum(onnx_node *n) {
  char buf[256];
  const char *eq = onnx_attr_string(n, "equation", "", buf, sizeof buf);
  const char *arrow = strstr(eq, "->");
  size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
  int nin = 0;
  loom_tensor *ops[ONNX_MAX_NODE_IO];
  for (int i = 0; i < n->nin; i++)
    if (onnx_has_in(n, i)) ops[nin++] = onnx_in(n, i);
  char terms[ONNX_MAX_NODE_IO][LOOM_MAX_DIMS + 1];
  int term_len[ONNX_MAX_NODE_IO], ellipsis_rank = 0;
  /* the ellipsis's rank: the most dims any operand's "..." covers */
  const char *start = eq;
  for (int t = 0; t < nin; t++) {
    const char *comma = memchr(start, ',', (size_t)(eq + lhs_len - start));
    size_t len = comma ? (size_t)(comma - start) : (size_t)(eq + lhs_len - start);
    int letters = 0;
    for (size_t i = 0; i < len; i++) letters += start[i] != '.' && start[i] != ' ';
    if (memchr(start, '.', len) && onnx_rank(ops[t]) - letters > ellipsis_rank)
      ellipsis_rank = onnx_rank(ops[t]) - letters;
    start = comma ? comma + 1 : eq + lhs_len;
    if (!comma && t + 1 < nin)
      return onnx_refuse(n, LOOM_ERR_VALUE, "equation '%s' has fewer terms than %d inputs", eq,
                         nin);
  }
  start = eq;
  char all[2 * LOOM_MAX_DIMS + 1];
  int nall = 0;
  int count[128] = {0};
  for (int t = 0; t < nin; t++) {
    const char *comma = memchr(start, ',', (size_t)(eq + lhs_len - start));
    size_t len = comma ? (size_t)(comma - start) : (size_t)(eq + lhs_len - start);
    if (!expand_term(start, len, onnx_rank(ops[t]), ellipsis_rank, terms[t], &term_len[t]))
      return onnx_refuse(n, LOOM_ERR_VALUE, "equation '%s': term %d does not fit a rank-%d input",
                         eq, t, onnx_rank(ops[t]));
    start = comma ? comma + 1 : eq;
    for (int i = 0; i < term_len[t]; i++) {
      unsigned char c = (unsigned char)terms[t][i];
      if (!count[c] && nall < 2 * LOOM_MAX_DIMS) all[nall++] = (char)c;
      count[c]++;
    }
  }
  char out[LOOM_MAX_DIMS + 1];
  int nout = 0;
  if (arrow) {
    if (!expand_term(arrow + 2, strlen(arrow + 2), -1, ellipsis_rank, out, &nout))
      return onnx_refuse(n, LOOM_ERR_VALUE, "equation '%s': its output term", eq);
  } else { /* the ellipsis, then the letters seen once, in order */
    for (int e = 0; e < ellipsis_rank; e++) out[nout++] = (char)('0' + e);
    for (char c = 'A'; c <= 'z'; c++)
      if (((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) && count[(unsigned char)c] == 1)
        out[nout++] = c;
  }
  if (nall > LOOM_MAX_DIMS)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "equation '%s' has %d letters; loom holds %d dims", eq,
                       nall, LOOM_MAX_DIMS);
  loom_tensor *product = NULL;
  for (int t = 0; t < nin; t++) {
    loom_tensor *x = loom_retain(ops[t]);
    char letters[LOOM_MAX_DIMS + 1];
    int nl = term_len[t];
    memcpy(letters, terms[t], (size_t)nl);
    /* a repeated letter: its diagonal */
    for (int p = 0; p < nl; p++)
      for (int q = p + 1; q < nl; q++) {
        if (letters[p] != letters[q]) continue;
        loom_shape s = loom_shape_of(x);
        loom_shape es = {.ndim = s.ndim};
        for (int d = 0; d < s.ndim; d++) es.dim[d] = d == p || d == q ? s.dim[d] : 1;
        loom_shape rs = es, cs = es;
        rs.dim[q] = 1, cs.dim[p] = 1;
        loom_tensor *rows =
            loom_reshape(loom_arange(0, (double)s.dim[p], 1, LOOM_I64, onnx_device(n)), rs);
        loom_tensor *cols =
            loom_reshape(loom_arange(0, (double)s.dim[q], 1, LOOM_I64, onnx_device(n)), cs);
        x = loom_sum(loom_where(loom_eq(rows, cols), x, loom_zeros_like(x)), &q, 1, false);
        memmove(letters + q, letters + q + 1, (size_t)(nl - q - 1));
        nl--, q--;
      }
    /* to the order of all the letters, size 1 where it lacks one */
    int perm[LOOM_MAX_DIMS], np = 0;
    loom_shape full = {.ndim = nall};
    loom_shape xs = loom_shape_of(x);
    for (int a = 0; a < nall; a++) {
      full.dim[a] = 1;
      for (int i = 0; i < nl; i++)
        if (letters[i] == all[a]) perm[np++] = i, full.dim[a] = xs.dim[i];
    }
    x = loom_reshape(loom_permute(x, perm, np), full);
    product = product ? loom_mul(product, x) : x;
  }
  if (!product) return onnx_refuse(n, LOOM_ERR_VALUE, "no inputs");
  int sum_axes[LOOM_MAX_DIMS], ns = 0, perm[LOOM_MAX_DIMS], kept = 0;
  char remaining[LOOM_MAX_DIMS];
  for (int a = 0; a < nall; a++) {
    bool in_out = memchr(out, all[a], (size_t)nout) != NULL;
    if (!in_out)
      sum_axes[ns++] = a;
    else
      remaining[kept++] = all[a];
  }
  loom_tensor *r = ns ? loom_sum(product, sum_axes, ns, false) : product;
  for (int o = 0; o < nout; o++) {
    char *at = memchr(remaining, out[o], (size_t)kept);
    if (!at)
      return onnx_refuse(n, LOOM_ERR_VALUE, "equation '%s': output letter '%c' is in no input", eq,
                         out[o]);
    perm[o] = (int)(at - remaining);
  }
  if (nout != kept)
    return onnx_refuse(n, LOOM_ERR_VALUE, "equation '%s': a repeated output letter", eq);
  onnx_out(n, 0, nout ? loom_permute(r, perm, nout) : r);
  return LOOM_OK;
}

const onnx_op onnx_ops_nn[] = {
    ONNX_OP(MatMul, op_matmul),
    ONNX_OP(Einsum, op_einsum),
    ONNX_OP(Gemm, op_gemm),
    ONNX_OP(Conv, op_conv),
    ONNX_OP(ConvTranspose, op_conv_transpose),
    ONNX_OP(LpPool, op_lp_pool),
    ONNX_OP(MaxPool, op_max_pool),
    ONNX_OP(AveragePool, op_average_pool),
    ONNX_OP(GlobalAveragePool, op_global_average_pool),
    ONNX_OP(GlobalMaxPool, op_global_max_pool),
    ONNX_OP(BatchNormalization, op_batch_norm),
    ONNX_OP(InstanceNormalization, op_instance_norm),
    ONNX_OP(LayerNormalization, op_layer_norm),
    ONNX_OP(GroupNormalization, op_group_norm),
    ONNX_OP(MeanVarianceNormalization, op_mean_variance_norm),
    ONNX_OP(LpNormalization, op_lp_norm),
    ONNX_OP(Softmax, op_softmax),
    ONNX_OP(LogSoftmax, op_log_softmax),
    ONNX_OP(Hardmax, op_hardmax),
};
const int onnx_ops_nn_count = sizeof onnx_ops_nn / sizeof onnx_ops_nn[0];
