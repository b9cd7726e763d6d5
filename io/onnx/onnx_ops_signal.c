/* DFT and STFT as products with cos and sin matrices built at import (their
 * angles reduced exactly in integers, then cos and sin in double): O(n^2)
 * per transform and an n-by-n matrix of the dtype, not an FFT. MelWeightMatrix
 * built at import from its scalar inputs. */
#include <math.h>
#include <stdlib.h>

#include "io/onnx/onnx.h"
#include "ir/dtype.h"

/* [rows, cols] of cos (or sin) of 2 pi (r c mod n) / n as dt; NULL when out
 * of memory. */
static loom_tensor *trig_matrix(int64_t rows, int64_t cols, int64_t n, bool sine, loom_dtype dt,
                                loom_device dev) {
  size_t count = (size_t)(rows * cols);
  double *m = malloc((count ? count : 1) * sizeof *m);
  if (!m) return NULL;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      double angle = 2 * M_PI * (double)((r * c) % n) / (double)n;
      m[r * cols + c] = sine ? sin(angle) : cos(angle);
    }
  loom_tensor *t = loom_from_data(m, LOOM_SHAPE(rows, cols), LOOM_F64, dev);
  free(m);
  return loom_cast(t, dt);
}

/* t along its last axis cut or zero-padded to len. */
static loom_tensor *fit_last(loom_tensor *t, int64_t len) {
  int rank = loom_ndim(t);
  int64_t have = loom_shape_of(t).dim[rank - 1];
  if (have > len) return loom_slice(t, rank - 1, 0, len, 1);
  if (have < len) {
    int64_t pads[2] = {0, len - have};
    return loom_pad(t, pads, 2, 0);
  }
  return loom_retain(t);
}

/* The transform of x [..., 1 or 2] (real, or real and imaginary) along axis
 * (of x's dims before the last), as ONNX's DFT: length n; onesided keeps the
 * first n / 2 + 1 bins, or (inverse) reads them as a real signal's. */
static loom_status dft(onnx_node *n, loom_tensor *x, int axis, int64_t len, bool inverse,
                       bool onesided, loom_tensor **out) {
  loom_shape xs = loom_shape_of(x);
  int rank = xs.ndim;
  int64_t parts = xs.dim[rank - 1];
  if (parts != 1 && parts != 2)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "the last dim is %lld; 1 (real) or 2 (complex) expected",
                       (long long)parts);
  if (axis >= rank - 1)
    return onnx_refuse(n, LOOM_ERR_AXIS, "axis %d is the real/imaginary dim", axis);
  if (len < 1) return onnx_refuse(n, LOOM_ERR_VALUE, "dft_length %lld", (long long)len);
  loom_dtype dt = loom_dtype_of(x);
  int perm[LOOM_MAX_DIMS], inv[LOOM_MAX_DIMS], m = 0;
  for (int d = 0; d < rank - 1; d++)
    if (d != axis) perm[m++] = d;
  perm[m++] = axis;
  for (int d = 0; d < rank - 1; d++) inv[perm[d]] = d;
  /* real and imaginary parts, axis last */
  loom_tensor *re =
      loom_permute(loom_squeeze(loom_slice(x, rank - 1, 0, 1, 1), rank - 1), perm, rank - 1);
  loom_tensor *im =
      parts == 2
          ? loom_permute(loom_squeeze(loom_slice(x, rank - 1, 1, 2, 1), rank - 1), perm, rank - 1)
          : NULL;
  int64_t in_len = inverse && onesided ? len / 2 + 1 : len;
  int64_t out_len = !inverse && onesided ? len / 2 + 1 : len;
  re = fit_last(re, in_len);
  if (im) im = fit_last(im, in_len);
  loom_tensor *c = trig_matrix(in_len, out_len, len, false, dt, onnx_device(n));
  loom_tensor *s = trig_matrix(in_len, out_len, len, true, dt, onnx_device(n));
  if (!c || !s)
    return onnx_refuse(n, LOOM_ERR_OOM, "a %lld-point transform's matrices", (long long)len);
  loom_tensor *yr, *yi = NULL;
  if (!inverse) { /* sum x e^(-i angle) */
    yr = loom_matmul(re, c), yi = loom_neg(loom_matmul(re, s));
    if (im) yr = loom_add(yr, loom_matmul(im, s)), yi = loom_add(yi, loom_matmul(im, c));
  } else { /* sum X e^(+i angle) / n */
    if (onesided) {
      /* a real signal's bins: those between 0 and n / 2 stand for two */
      double *w = malloc((size_t)in_len * sizeof *w);
      if (!w) return onnx_refuse(n, LOOM_ERR_OOM, "out of memory");
      for (int64_t k = 0; k < in_len; k++) w[k] = k == 0 || 2 * k == len ? 1 : 2;
      loom_tensor *wt =
          loom_cast(loom_from_data(w, LOOM_SHAPE(in_len, 1), LOOM_F64, onnx_device(n)), dt);
      free(w);
      c = loom_mul(c, wt), s = loom_mul(s, wt);
    }
    yr = loom_matmul(re, c);
    if (im) yr = loom_sub(yr, loom_matmul(im, s));
    yr = loom_div_s(yr, (double)len);
    if (!onesided) {
      yi = loom_matmul(re, s);
      if (im) yi = loom_add(yi, loom_matmul(im, c));
      yi = loom_div_s(yi, (double)len);
    }
  }
  loom_tensor *halves[2] = {loom_unsqueeze(loom_permute(yr, inv, rank - 1), rank - 1),
                            yi ? loom_unsqueeze(loom_permute(yi, inv, rank - 1), rank - 1) : NULL};
  *out = yi ? loom_cat(halves, 2, rank - 1) : halves[0];
  *out = loom_cast(*out, dt);
  return LOOM_OK;
}

static loom_status op_dft(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int rank = onnx_rank(x), axis;
  int64_t a = n->opset < 20 ? onnx_attr_int(n, "axis", 1) : -2, len;
  int count;
  loom_status st;
  if (n->opset >= 20 && onnx_has_in(n, 2) && (st = onnx_ints(n, 2, &a, 1, &count))) return st;
  if ((st = onnx_axis(n, a, rank, &axis))) return st;
  bool inverse = onnx_attr_int(n, "inverse", 0), onesided = onnx_attr_int(n, "onesided", 0);
  int64_t along = loom_shape_of(x).dim[axis];
  len = inverse && onesided ? 2 * (along - 1) : along;
  if (onnx_has_in(n, 1) && (st = onnx_ints(n, 1, &len, 1, &count))) return st;
  loom_tensor *y;
  if ((st = dft(n, x, axis, len, inverse, onesided, &y))) return st;
  onnx_out(n, 0, y);
  return LOOM_OK;
}

/* Frames of frame_length every frame_step along the signal [batch, length,
 * 1 or 2], weighted by the window, each transformed: [batch, frames, bins, 2]. */
static loom_status op_stft(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  loom_shape xs = loom_shape_of(x);
  if (xs.ndim != 3)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "a rank-%d signal; [batch, length, 1 or 2] expected",
                       xs.ndim);
  int64_t step, flen;
  int count;
  loom_status st = onnx_ints(n, 1, &step, 1, &count);
  if (st) return st;
  loom_tensor *window = onnx_has_in(n, 2) ? onnx_in(n, 2) : NULL;
  flen = window ? loom_shape_of(window).dim[0] : xs.dim[1];
  if (onnx_has_in(n, 3) && (st = onnx_ints(n, 3, &flen, 1, &count))) return st;
  if (step < 1 || flen < 1 || flen > xs.dim[1])
    return onnx_refuse(n, LOOM_ERR_VALUE, "frame_step %lld and frame_length %lld for %lld samples",
                       (long long)step, (long long)flen, (long long)xs.dim[1]);
  if (window && loom_numel(window) != flen)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "a window of %lld for frames of %lld",
                       (long long)loom_numel(window), (long long)flen);
  int64_t frames = 1 + (xs.dim[1] - flen) / step;
  loom_tensor *f = loom_reshape(loom_arange(0, (double)frames, 1, LOOM_I64, onnx_device(n)),
                                LOOM_SHAPE(frames, 1));
  loom_tensor *j =
      loom_reshape(loom_arange(0, (double)flen, 1, LOOM_I64, onnx_device(n)), LOOM_SHAPE(1, flen));
  loom_tensor *at = loom_reshape(loom_add(loom_mul_s(f, (double)step), j), LOOM_SHAPE(-1));
  loom_tensor *framed = loom_reshape(loom_index_select(x, 1, at),
                                     (loom_shape){4, {xs.dim[0], frames, flen, xs.dim[2]}});
  if (window)
    framed = loom_mul(framed, loom_reshape(loom_cast(window, loom_dtype_of(x)),
                                           (loom_shape){4, {1, 1, flen, 1}}));
  loom_tensor *y;
  if ((st = dft(n, framed, 2, flen, false, onnx_attr_int(n, "onesided", 1) != 0, &y))) return st;
  onnx_out(n, 0, y);
  return LOOM_OK;
}

/* v rounded to the float dtype dt, as numpy's arithmetic in it rounds each step. */
static double rounded(loom_dtype dt, double v) {
  unsigned char bytes[8];
  lm_dtype_store_double(dt, bytes, v);
  return lm_dtype_load_double(dt, bytes);
}

/* a // b for doubles as numpy (and Python) compute it, from fmod: floor(a / b)
 * rounds the quotient first, and so differs where it rounds up to an integer. */
static double floor_divide(double a, double b) {
  double mod = fmod(a, b), div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
  if (div == 0) return copysign(0, a / b);
  double whole = floor(div);
  return div - whole > 0.5 ? whole + 1 : whole;
}

/* The mel filter bank [dft_length / 2 + 1, num_mel_bins], built at import from
 * its five scalar inputs, as ONNX's reference computes it: the band edges'
 * mels in the dtype of the hertz inputs (each step rounded to it), the
 * num_mel_bins + 2 edges spaced evenly over them in double, back to hertz and
 * to spectrogram bins (floor((dft_length + 1) * hz / sample_rate)), then each
 * band a triangle rising from its left edge's bin to its center's and falling
 * to its right edge's. Inputs computed at run time are refused (onnx_ints). */
static loom_status op_mel_weight_matrix(onnx_node *n) {
  int64_t ints[3];
  double edges[2];
  int count;
  loom_status st;
  for (int i = 0; i < 3; i++)
    if ((st = onnx_ints(n, i, &ints[i], 1, &count))) return st;
  for (int i = 0; i < 2; i++)
    if ((st = onnx_doubles(n, 3 + i, &edges[i], 1, &count))) return st;
  int64_t mels = ints[0], dft_length = ints[1], rate = ints[2];
  const int64_t most = (int64_t)1 << 24;
  if (mels < 1 || dft_length < 1 || rate < 1 || mels > most || dft_length > most ||
      (dft_length / 2 + 1) * mels > most)
    return onnx_refuse(n, LOOM_ERR_VALUE,
                       "num_mel_bins %lld, dft_length %lld, sample_rate %lld (each at least 1, "
                       "the matrix at most 2^24 values)",
                       (long long)mels, (long long)dft_length, (long long)rate);
  if (!onnx_has_in(n, 3)) return onnx_refuse(n, LOOM_ERR_VALUE, "lower_edge_hertz is missing");
  loom_dtype hz_dtype = loom_dtype_of(n->in[3]->t);
  const char *type_name;
  int64_t out_type = onnx_attr_int(n, "output_datatype", 1);
  int out_dtype = onnx_dtype_to_loom((int32_t)out_type, &type_name);
  if (out_dtype < 0)
    return onnx_refuse(n, LOOM_ERR_DTYPE, "output_datatype %s (%lld), which loom does not hold",
                       type_name, (long long)out_type);
  double mel[2];
  for (int i = 0; i < 2; i++) {
    double hz = rounded(hz_dtype, edges[i] / 700);
    mel[i] = rounded(hz_dtype, 2595 * rounded(hz_dtype, log10(rounded(hz_dtype, 1 + hz))));
  }
  double step = rounded(hz_dtype, rounded(hz_dtype, mel[1] - mel[0]) / (double)(mels + 2));
  int64_t bins = dft_length / 2 + 1, *edge = malloc((size_t)(mels + 2) * sizeof *edge);
  double *w = calloc((size_t)(bins * mels), sizeof *w);
  if (!edge || !w) {
    free(edge), free(w);
    return onnx_refuse(n, LOOM_ERR_OOM, "out of memory for a [%lld, %lld] matrix", (long long)bins,
                       (long long)mels);
  }
  st = LOOM_OK;
  for (int64_t k = 0; k < mels + 2 && !st; k++) {
    double hz = 700 * (pow(10, ((double)k * step + mel[0]) / 2595) - 1);
    double at = floor_divide((double)(dft_length + 1) * hz, (double)rate);
    if (!(fabs(at) < 0x1p53)) /* NaN and infinite edges too */
      st = onnx_refuse(n, LOOM_ERR_VALUE,
                       "band edge %lld is %g Hz (lower_edge_hertz %g, upper_edge_hertz %g)",
                       (long long)k, hz, edges[0], edges[1]);
    edge[k] = st ? 0 : (int64_t)at;
  }
  for (int64_t i = 0; i < mels && !st; i++) {
    int64_t left = edge[i], center = edge[i + 1], right = edge[i + 2];
    /* the rows written: [left, center] rising (or the center alone), [center, right) falling */
    int64_t first = center == left ? center : left, last = right > center ? right - 1 : center;
    if (center >= left && (first < 0 || last >= bins)) {
      st = onnx_refuse(n, LOOM_ERR_VALUE,
                       "band %lld spans spectrogram bins %lld to %lld, outside the %lld bins of "
                       "a %lld-point DFT (lower_edge_hertz %g, upper_edge_hertz %g)",
                       (long long)i, (long long)first, (long long)last, (long long)bins,
                       (long long)dft_length, edges[0], edges[1]);
      break;
    }
    if (center == left)
      w[center * mels + i] = 1;
    else
      for (int64_t j = left; j <= center; j++)
        w[j * mels + i] = (double)(j - left) / (double)(center - left);
    for (int64_t j = center; j < right; j++)
      w[j * mels + i] = (double)(right - j) / (double)(right - center);
  }
  if (!st) {
    loom_tensor *m = loom_from_data(w, LOOM_SHAPE(bins, mels), LOOM_F64, onnx_device(n));
    onnx_out(n, 0, loom_cast(m, (loom_dtype)out_dtype));
    loom_free(m);
  }
  free(edge), free(w);
  return st;
}

const onnx_op onnx_ops_signal[] = {
    ONNX_OP(DFT, op_dft),
    ONNX_OP(STFT, op_stft),
    ONNX_OP(MelWeightMatrix, op_mel_weight_matrix),
};
const int onnx_ops_signal_count = sizeof onnx_ops_signal / sizeof onnx_ops_signal[0];
