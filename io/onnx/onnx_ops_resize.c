/* Resize (and the older Upsample): separable interpolation, one axis at a
 * time, following ONNX's reference. The taps and weights of each output
 * position are computed at import from the sizes (they are constants of the
 * program); an axis applies them as index selections times weights, summed.
 * Modes nearest (four rounding rules), linear and cubic, antialiased linear
 * and cubic when downscaling, every coordinate_transformation_mode, axes,
 * keep_aspect_ratio_policy, exclude_outside and tf_crop_and_resize's
 * extrapolation_value. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/onnx/onnx.h"

#define MAX_TAPS 64

typedef enum { NEAREST, LINEAR, CUBIC } resize_mode;

typedef struct resize_opts {
  resize_mode mode;
  char nearest[24];   /* round_prefer_floor, round_prefer_ceil, floor, ceil */
  char transform[24]; /* coordinate_transformation_mode */
  double cubic_a, extrapolation;
  bool antialias, exclude_outside;
} resize_opts;

/* The weights of the taps around a point `ratio` past the left one. */
static int coeffs(const resize_opts *o, double ratio, double scale, double *c) {
  if (o->mode == NEAREST) {
    bool right;
    if (ratio == 1)
      right = true; /* an integer point: itself, the right tap of [x - 1, x] */
    else if (strcmp(o->nearest, "round_prefer_ceil") == 0)
      right = ratio >= 0.5;
    else if (strcmp(o->nearest, "floor") == 0)
      right = false;
    else if (strcmp(o->nearest, "ceil") == 0)
      right = true;
    else
      right = ratio > 0.5;
    c[0] = !right, c[1] = right;
    return 2;
  }
  if (o->mode == LINEAR) {
    if (!o->antialias || scale >= 1) {
      c[0] = 1 - ratio, c[1] = ratio;
      return 2;
    }
    int start = (int)floor(-1 / scale) + 1, n = 2 - 2 * start;
    if (n > MAX_TAPS) return -1;
    double sum = 0;
    for (int i = 0; i < n; i++) {
      double v = 1 - fabs((start + i - ratio) * scale);
      c[i] = v < 0 ? 0 : v > 1 ? 1 : v;
      sum += c[i];
    }
    for (int i = 0; i < n; i++) c[i] /= sum;
    return n;
  }
  double a = o->cubic_a;
  if (!o->antialias || scale >= 1) {
    double r = ratio, s = 1 - ratio;
    c[0] = ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a;
    c[1] = ((a + 2) * r - (a + 3)) * r * r + 1;
    c[2] = ((a + 2) * s - (a + 3)) * s * s + 1;
    c[3] = ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a;
    return 4;
  }
  int start = (int)floor(-2 / scale) + 1, end = 2 - start, n = end - start;
  if (n > MAX_TAPS) return -1;
  double sum = 0;
  for (int i = 0; i < n; i++) {
    double x = fabs(scale * (start + i - ratio)), x2 = x * x, x3 = x2 * x;
    c[i] = x <= 1  ? (a + 2) * x3 - (a + 3) * x2 + 1
           : x < 2 ? a * x3 - 5 * a * x2 + 8 * a * x - 4 * a
                   : 0;
    sum += c[i];
  }
  for (int i = 0; i < n; i++) c[i] /= sum;
  return n;
}

/* Where output position y falls in the input (the reference's x_ori), and
 * whether it lies outside (tf_crop_and_resize only). */
static double source_of(const resize_opts *o, double y, double scale, int64_t in, double out,
                        int64_t out_int, const double *roi, bool *outside) {
  const char *m = o->transform;
  *outside = false;
  if (strcmp(m, "align_corners") == 0) return out == 1 ? 0 : y * (double)(in - 1) / (out - 1);
  if (strcmp(m, "asymmetric") == 0) return y / scale;
  if (strcmp(m, "tf_crop_and_resize") == 0) {
    double x = out == 1 ? (roi[1] - roi[0]) * (double)(in - 1) / 2
                        : y * (roi[1] - roi[0]) * (double)(in - 1) / (out - 1);
    x += roi[0] * (double)(in - 1);
    *outside = x < 0 || x > (double)(in - 1);
    return x;
  }
  if (strcmp(m, "pytorch_half_pixel") == 0) return out == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
  if (strcmp(m, "half_pixel_symmetric") == 0) {
    double adjustment = (double)out_int / out, center = (double)in / 2;
    return center * (1 - adjustment) + (y + 0.5) / scale - 0.5;
  }
  return (y + 0.5) / scale - 0.5; /* half_pixel */
}

/* x resized along axis to out_int positions. */
static loom_status resize_axis(onnx_node *n, const resize_opts *o, loom_tensor *x, int axis,
                               double scale, int64_t out_int, const double *roi,
                               loom_tensor **out) {
  *out = NULL;
  loom_shape s = loom_shape_of(x);
  int64_t in = s.dim[axis];
  double out_width = scale * (double)in;
  double c[MAX_TAPS];
  int taps = coeffs(o, 0.5, scale, c);
  if (taps < 0)
    return onnx_refuse(n, LOOM_ERR_VALUE, "downscaling by %g needs more than %d taps", scale,
                       MAX_TAPS);
  int64_t *idx = malloc((size_t)(out_int ? out_int : 1) * (size_t)taps * sizeof *idx);
  double *w = malloc((size_t)(out_int ? out_int : 1) * (size_t)taps * sizeof *w);
  bool *outside = malloc((size_t)(out_int ? out_int : 1) * sizeof *outside);
  if (!idx || !w || !outside) {
    free(idx), free(w), free(outside);
    return onnx_refuse(n, LOOM_ERR_OOM, "out of memory");
  }
  bool any_outside = false;
  int pad = (taps + 1) / 2;
  for (int64_t y = 0; y < out_int; y++) {
    double x0 = source_of(o, (double)y, scale, in, out_width, out_int, roi, &outside[y]);
    any_outside |= outside[y];
    double xf = floor(x0), ratio = x0 == xf ? 1 : x0 - xf;
    coeffs(o, ratio, scale, c);
    double xp = x0 + pad, p = floor(xp), frac = xp - p;
    int64_t offset = taps % 2 == 0 ? (frac == 0 ? -(taps / 2) : -(taps / 2) + 1)
                                   : (frac <= 0.5 ? -((taps - 1) / 2) : -((taps - 1) / 2) + 1);
    int64_t start = (int64_t)p + offset;
    double sum = 0;
    for (int t = 0; t < taps; t++) {
      int64_t i = start + t - pad;
      double weight = c[t];
      if (o->exclude_outside && (i < 0 || i >= in)) weight = 0;
      idx[y * taps + t] = i < 0 ? 0 : i >= in ? in - 1 : i;
      w[y * taps + t] = weight;
      sum += weight;
    }
    if (o->exclude_outside && sum != 0)
      for (int t = 0; t < taps; t++) w[y * taps + t] /= sum;
  }
  /* per tap: x's rows at the tap's indices times its weights (nearest: one tap) */
  loom_shape ws = {.ndim = s.ndim};
  for (int d = 0; d < s.ndim; d++) ws.dim[d] = d == axis ? out_int : 1;
  loom_tensor *acc = NULL;
  int64_t *col = malloc((size_t)(out_int ? out_int : 1) * sizeof *col);
  double *wc = malloc((size_t)(out_int ? out_int : 1) * sizeof *wc);
  for (int t = 0; col && wc && t < taps; t++) {
    bool used = false;
    for (int64_t y = 0; y < out_int; y++) {
      col[y] = idx[y * taps + t], wc[y] = w[y * taps + t];
      used |= wc[y] != 0;
    }
    if (!used && (acc || t < taps - 1)) continue;
    loom_shape cols_shape = {.ndim = 1, .dim = {out_int}};
    loom_tensor *cols = loom_from_data(col, cols_shape, LOOM_I64, onnx_device(n));
    loom_tensor *rows = loom_index_select(x, axis, cols);
    if (o->mode == NEAREST) {
      /* a 0/1 weight: select rather than multiply, so inf and NaN stay as they are */
      bool *pick = malloc((size_t)(out_int ? out_int : 1));
      for (int64_t y = 0; pick && y < out_int; y++) pick[y] = wc[y] != 0;
      loom_tensor *mask =
          loom_reshape(loom_from_data(pick, LOOM_SHAPE(out_int), LOOM_BOOL, onnx_device(n)), ws);
      free(pick);
      acc = loom_where(mask, rows, acc ? acc : loom_zeros_like(rows));
      continue;
    }
    loom_tensor *weights =
        loom_reshape(loom_from_data(wc, LOOM_SHAPE(out_int), LOOM_F64, onnx_device(n)), ws);
    loom_tensor *term = loom_mul(rows, weights);
    acc = acc ? loom_add(acc, term) : term;
  }
  free(col), free(wc);
  if (acc && any_outside) {
    loom_tensor *mask =
        loom_reshape(loom_from_data(outside, LOOM_SHAPE(out_int), LOOM_BOOL, onnx_device(n)), ws);
    acc = loom_where(mask, loom_full_like(acc, o->extrapolation), acc);
  }
  free(idx), free(w), free(outside);
  if (!acc) return onnx_refuse(n, LOOM_ERR_OOM, "out of memory");
  *out = acc;
  return LOOM_OK;
}

static loom_status resize(onnx_node *n, bool upsample) {
  loom_tensor *x = onnx_in(n, 0);
  loom_shape s = loom_shape_of(x);
  int rank = s.ndim;
  resize_opts o = {.cubic_a = onnx_attr_float(n, "cubic_coeff_a", -0.75),
                   .extrapolation = onnx_attr_float(n, "extrapolation_value", 0),
                   .antialias = onnx_attr_int(n, "antialias", 0) != 0,
                   .exclude_outside = onnx_attr_int(n, "exclude_outside", 0) != 0};
  char buf[32];
  const char *mode = onnx_attr_string(n, "mode", "nearest", buf, sizeof buf);
  if (strcmp(mode, "nearest") == 0)
    o.mode = NEAREST;
  else if (strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0)
    o.mode = LINEAR;
  else if (strcmp(mode, "cubic") == 0)
    o.mode = CUBIC;
  else
    return onnx_refuse(n, LOOM_ERR_VALUE, "mode '%s'", mode);
  bool old = upsample || n->opset < 11; /* Upsample and opset 10: asymmetric, floor */
  onnx_attr_string(n, "nearest_mode", old ? "floor" : "round_prefer_floor", o.nearest,
                   sizeof o.nearest);
  onnx_attr_string(n, "coordinate_transformation_mode", old ? "asymmetric" : "half_pixel",
                   o.transform, sizeof o.transform);
  static const char *const transforms[] = {"half_pixel",         "half_pixel_symmetric",
                                           "pytorch_half_pixel", "align_corners",
                                           "asymmetric",         "tf_crop_and_resize"};
  bool known = false;
  for (size_t i = 0; i < sizeof transforms / sizeof *transforms; i++)
    known |= strcmp(o.transform, transforms[i]) == 0;
  if (!known)
    return onnx_refuse(n, LOOM_ERR_VALUE, "coordinate_transformation_mode '%s'", o.transform);
  /* axes, scales or sizes, roi */
  int64_t axes_raw[LOOM_MAX_DIMS];
  int naxes;
  loom_status st = onnx_attr_ints(n, "axes", axes_raw, LOOM_MAX_DIMS, &naxes);
  if (st) return st;
  int axes[LOOM_MAX_DIMS];
  if (naxes < 0) {
    naxes = rank;
    for (int d = 0; d < rank; d++) axes[d] = d;
  } else {
    for (int i = 0; i < naxes; i++)
      if ((st = onnx_axis(n, axes_raw[i], rank, &axes[i]))) return st;
  }
  double scales[LOOM_MAX_DIMS], roi[2 * LOOM_MAX_DIMS];
  int64_t sizes[LOOM_MAX_DIMS];
  int nscales = 0, nsizes = 0, nroi = 0;
  int scales_at = upsample || n->opset < 11 ? 1 : 2, sizes_at = 3, roi_at = 1;
  if (onnx_has_in(n, scales_at) && loom_numel(onnx_in(n, scales_at)) > 0 &&
      (st = onnx_doubles(n, scales_at, scales, LOOM_MAX_DIMS, &nscales)))
    return st;
  if (!upsample && n->opset >= 11 && onnx_has_in(n, sizes_at) &&
      loom_numel(onnx_in(n, sizes_at)) > 0 &&
      (st = onnx_ints(n, sizes_at, sizes, LOOM_MAX_DIMS, &nsizes)))
    return st;
  if (upsample && nscales == 0 && onnx_attr(n, "scales")) {
    int c;
    if ((st = onnx_attr_floats(n, "scales", scales, LOOM_MAX_DIMS, &c))) return st;
    nscales = c;
  }
  if (!upsample && n->opset >= 11 && onnx_has_in(n, roi_at) && loom_numel(onnx_in(n, roi_at)) > 0 &&
      (st = onnx_doubles(n, roi_at, roi, 2 * LOOM_MAX_DIMS, &nroi)))
    return st;
  if ((nscales > 0) == (nsizes > 0))
    return onnx_refuse(n, LOOM_ERR_VALUE, "exactly one of scales and sizes must be given");
  int given = nscales ? nscales : nsizes;
  if (given != naxes)
    return onnx_refuse(n, LOOM_ERR_VALUE, "%d scales or sizes for %d axes", given, naxes);
  if (nroi && nroi != 2 * naxes)
    return onnx_refuse(n, LOOM_ERR_VALUE, "roi holds %d values for %d axes", nroi, naxes);
  double axis_scale[LOOM_MAX_DIMS], axis_roi[LOOM_MAX_DIMS][2];
  int64_t axis_out[LOOM_MAX_DIMS];
  for (int i = 0; i < naxes; i++) {
    int64_t in = s.dim[axes[i]];
    axis_roi[i][0] = nroi ? roi[i] : 0;
    axis_roi[i][1] = nroi ? roi[naxes + i] : 1;
    if (nscales) {
      if (!(scales[i] > 0)) return onnx_refuse(n, LOOM_ERR_VALUE, "scale %g", scales[i]);
      axis_scale[i] = scales[i];
      axis_out[i] = (int64_t)(scales[i] * (double)in);
    } else {
      if (sizes[i] < 0) return onnx_refuse(n, LOOM_ERR_VALUE, "size %lld", (long long)sizes[i]);
      axis_out[i] = sizes[i];
      axis_scale[i] = in ? (double)sizes[i] / (double)in : 1;
    }
  }
  char policy_buf[16];
  const char *policy =
      onnx_attr_string(n, "keep_aspect_ratio_policy", "stretch", policy_buf, sizeof policy_buf);
  if (nsizes && strcmp(policy, "stretch")) {
    bool larger = strcmp(policy, "not_smaller") == 0;
    if (!larger && strcmp(policy, "not_larger"))
      return onnx_refuse(n, LOOM_ERR_VALUE, "keep_aspect_ratio_policy '%s'", policy);
    double pick = axis_scale[0];
    for (int i = 1; i < naxes; i++)
      pick = larger ? fmax(pick, axis_scale[i]) : fmin(pick, axis_scale[i]);
    for (int i = 0; i < naxes; i++) {
      axis_scale[i] = pick;
      axis_out[i] = (int64_t)(pick * (double)s.dim[axes[i]] + 0.5);
    }
  }
  loom_dtype dt = loom_dtype_of(x);
  loom_tensor *r = loom_cast(x, LOOM_F64);
  for (int i = 0; i < naxes; i++) {
    int64_t in = s.dim[axes[i]];
    bool identity = fabs(axis_scale[i] - 1) < 1e-9 && axis_out[i] == in &&
                    fabs(axis_roi[i][0]) < 1e-9 && fabs(axis_roi[i][1] - 1) < 1e-9;
    if (identity) continue;
    loom_tensor *next = NULL;
    if ((st = resize_axis(n, &o, r, axes[i], axis_scale[i], axis_out[i], axis_roi[i], &next)))
      return st;
    r = next;
  }
  if (onnx_is_float(dt))
    r = loom_cast(r, dt);
  else {
    double lo, hi;
    onnx_int_range(dt, &lo, &hi);
    r = loom_cast(loom_clamp(loom_round(r), lo, hi), dt);
  }
  onnx_out(n, 0, r);
  return LOOM_OK;
}

static loom_status op_resize(onnx_node *n) { return resize(n, false); }
static loom_status op_upsample(onnx_node *n) { return resize(n, true); }

const onnx_op onnx_ops_resize[] = {
    ONNX_OP(Resize, op_resize),
    ONNX_OP(Upsample, op_upsample),
};
const int onnx_ops_resize_count = sizeof onnx_ops_resize / sizeof onnx_ops_resize[0];
