/* Ops on shapes and layouts: constants, Shape and the shape arithmetic's
 * ops, reshapes, transposes, slices, gathers, concatenation, padding. Numbers
 * that size things (a Reshape's shape, a Slice's bounds, Expand's shape) are
 * read at import (onnx_ints): loom records shapes, and a symbolic dim's size
 * is followed by its symbolic inference from the traced sizes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/onnx/onnx.h"

#define MAXV 4096 /* numbers a sizing input may hold */

static loom_status op_constant(onnx_node *n) {
  const Onnx__AttributeProto *a = n->proto->n_attribute ? n->proto->attribute[0] : NULL;
  if (!a || n->proto->n_attribute != 1)
    return onnx_refuse(n, LOOM_ERR_VALUE, "a Constant has exactly one attribute");
  const char *name = a->name ? a->name : "";
  char why[512];
  if (strcmp(name, "value") == 0) {
    if (!a->t) return onnx_refuse(n, LOOM_ERR_CORRUPT, "value has no tensor");
    loom_tensor *t = onnx_tensor_from_proto(a->t, NULL, why, sizeof why);
    if (!t) return onnx_refuse(n, LOOM_ERR_CORRUPT, "value: %s", why);
    if (!(t = onnx_on_device(n->im, t, "Constant", "value"))) return onnx_status(n->im);
    onnx_out_narrow(n, 0, t, onnx_dtype_is_narrow(a->t->data_type) ? a->t->data_type : 0);
    return LOOM_OK;
  }
  if (strcmp(name, "value_float") == 0 && a->has_f) {
    float f = a->f;
    onnx_out(n, 0, loom_from_data(&f, LOOM_SHAPE0, LOOM_F32, onnx_device(n)));
  } else if (strcmp(name, "value_int") == 0 && a->has_i) {
    onnx_out(n, 0, loom_from_data(&a->i, LOOM_SHAPE0, LOOM_I64, onnx_device(n)));
  } else if (strcmp(name, "value_floats") == 0) {
    float *f = malloc((a->n_floats ? a->n_floats : 1) * sizeof *f);
    if (!f) return onnx_refuse(n, LOOM_ERR_OOM, "out of memory");
    for (size_t i = 0; i < a->n_floats; i++) f[i] = a->floats[i];
    onnx_out(n, 0, loom_from_data(f, LOOM_SHAPE((int64_t)a->n_floats), LOOM_F32, onnx_device(n)));
    free(f);
  } else if (strcmp(name, "value_ints") == 0) {
    onnx_out(n, 0,
             loom_from_data(a->ints, LOOM_SHAPE((int64_t)a->n_ints), LOOM_I64, onnx_device(n)));
  } else {
    return onnx_refuse(n, LOOM_ERR_DTYPE, "a Constant's %s is not a value loom holds", name);
  }
  return LOOM_OK;
}

/* Dims [start, end) of input 0 as I64 (opset 15's start and end attributes). */
static loom_status op_shape(onnx_node *n) {
  if (!onnx_has_in(n, 0)) return onnx_refuse(n, LOOM_ERR_VALUE, "its input is missing");
  loom_shape s = loom_shape_of(n->in[0]->t);
  int64_t start = onnx_attr_int(n, "start", 0), end = onnx_attr_int(n, "end", s.ndim);
  if (start < 0) start += s.ndim;
  if (end < 0) end += s.ndim;
  start = start < 0 ? 0 : start > s.ndim ? s.ndim : start;
  end = end < start ? start : end > s.ndim ? s.ndim : end;
  onnx_out(n, 0, loom_from_data(s.dim + start, LOOM_SHAPE(end - start), LOOM_I64, onnx_device(n)));
  return LOOM_OK;
}

static loom_status op_size(onnx_node *n) {
  if (!onnx_has_in(n, 0)) return onnx_refuse(n, LOOM_ERR_VALUE, "its input is missing");
  int64_t numel = loom_numel(n->in[0]->t);
  onnx_out(n, 0, loom_from_data(&numel, LOOM_SHAPE0, LOOM_I64, onnx_device(n)));
  return LOOM_OK;
}

/* 0 copies the input's dim unless allowzero; -1 is inferred. */
static loom_status op_reshape(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int64_t dims[LOOM_MAX_DIMS + 1];
  int count;
  loom_status st;
  if (n->opset < 5 || (!onnx_has_in(n, 1) && onnx_attr(n, "shape"))) {
    st = onnx_attr_ints(n, "shape", dims, LOOM_MAX_DIMS + 1, &count);
  } else {
    st = onnx_ints(n, 1, dims, LOOM_MAX_DIMS + 1, &count);
  }
  if (st) return st;
  if (count > LOOM_MAX_DIMS)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "a shape of %d dims; loom holds at most %d", count,
                       LOOM_MAX_DIMS);
  loom_shape in = loom_shape_of(x), out = {.ndim = count};
  bool allowzero = onnx_attr_int(n, "allowzero", 0);
  for (int d = 0; d < count; d++) {
    if (dims[d] == 0 && !allowzero) {
      if (d >= in.ndim)
        return onnx_refuse(n, LOOM_ERR_SHAPE, "shape[%d] is 0 (copy) but the input has %d dims", d,
                           in.ndim);
      out.dim[d] = in.dim[d];
    } else {
      out.dim[d] = dims[d];
    }
  }
  onnx_out(n, 0, loom_reshape(x, out));
  return LOOM_OK;
}

/* To 2-D: dims before axis, dims from it. */
static loom_status op_flatten(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  loom_shape s = loom_shape_of(x);
  int64_t axis = onnx_attr_int(n, "axis", 1);
  if (axis < -s.ndim || axis > s.ndim)
    return onnx_refuse(n, LOOM_ERR_AXIS, "axis %lld is outside [-%d, %d]", (long long)axis, s.ndim,
                       s.ndim);
  if (axis < 0) axis += s.ndim;
  int64_t a = 1, b = 1;
  for (int d = 0; d < s.ndim; d++) *(d < axis ? &a : &b) *= s.dim[d];
  onnx_out(n, 0, loom_reshape(x, LOOM_SHAPE(a, b)));
  return LOOM_OK;
}

/* Axes from the attribute (before `since`) or input 1; *count -1 when none. */
static loom_status axes_of(onnx_node *n, int64_t since, int64_t *axes, int *count) {
  if (n->opset < since) return onnx_attr_ints(n, "axes", axes, LOOM_MAX_DIMS, count);
  *count = -1;
  if (!onnx_has_in(n, 1)) return LOOM_OK;
  return onnx_ints(n, 1, axes, LOOM_MAX_DIMS, count);
}

static loom_status op_squeeze(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  loom_shape s = loom_shape_of(x);
  int64_t axes[LOOM_MAX_DIMS];
  int count;
  loom_status st = axes_of(n, 13, axes, &count);
  if (st) return st;
  bool drop[LOOM_MAX_DIMS] = {0};
  if (count < 0) {
    for (int d = 0; d < s.ndim; d++) drop[d] = s.dim[d] == 1;
  } else {
    for (int i = 0; i < count; i++) {
      int a;
      if ((st = onnx_axis(n, axes[i], s.ndim, &a))) return st;
      if (s.dim[a] != 1)
        return onnx_refuse(n, LOOM_ERR_SHAPE, "axis %d has size %lld, not 1", a,
                           (long long)s.dim[a]);
      drop[a] = true;
    }
  }
  loom_shape out = {0};
  for (int d = 0; d < s.ndim; d++)
    if (!drop[d]) out.dim[out.ndim++] = s.dim[d];
  onnx_out(n, 0, loom_reshape(x, out));
  return LOOM_OK;
}

static loom_status op_unsqueeze(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  loom_shape s = loom_shape_of(x);
  int64_t axes[LOOM_MAX_DIMS];
  int count;
  loom_status st = axes_of(n, 13, axes, &count);
  if (st) return st;
  if (count < 1) return onnx_refuse(n, LOOM_ERR_VALUE, "no axes");
  int rank = s.ndim + count;
  if (rank > LOOM_MAX_DIMS)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "%d dims; loom holds at most %d", rank, LOOM_MAX_DIMS);
  bool added[LOOM_MAX_DIMS] = {0};
  for (int i = 0; i < count; i++) {
    int a;
    if ((st = onnx_axis(n, axes[i], rank, &a))) return st;
    if (added[a]) return onnx_refuse(n, LOOM_ERR_AXIS, "axis %d is given twice", a);
    added[a] = true;
  }
  loom_shape out = {.ndim = rank};
  for (int d = 0, k = 0; d < rank; d++) out.dim[d] = added[d] ? 1 : s.dim[k++];
  onnx_out(n, 0, loom_reshape(x, out));
  return LOOM_OK;
}

static loom_status op_transpose(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int rank = onnx_rank(x);
  int64_t perm[LOOM_MAX_DIMS];
  int count, p[LOOM_MAX_DIMS];
  loom_status st = onnx_attr_ints(n, "perm", perm, LOOM_MAX_DIMS, &count);
  if (st) return st;
  if (count >= 0 && count != rank)
    return onnx_refuse(n, LOOM_ERR_AXIS, "perm has %d entries for a rank-%d input", count, rank);
  for (int d = 0; d < rank; d++) p[d] = count < 0 ? rank - 1 - d : (int)perm[d];
  onnx_out(n, 0, loom_permute(x, p, rank));
  return LOOM_OK;
}

static loom_status op_concat(onnx_node *n) {
  loom_tensor *ts[ONNX_MAX_NODE_IO];
  int k = 0;
  for (int i = 0; i < n->nin; i++)
    if (onnx_has_in(n, i)) ts[k++] = onnx_in(n, i);
  if (!k) return onnx_refuse(n, LOOM_ERR_VALUE, "no inputs");
  int axis;
  loom_status st = onnx_axis(n, onnx_attr_int(n, "axis", 0), onnx_rank(ts[0]), &axis);
  if (st) return st;
  onnx_out(n, 0, loom_cat(ts, k, axis));
  return LOOM_OK;
}

/* Sizes from the attribute (before 13) or input 1, else num_outputs (18)
 * pieces of ceil(len / n), else equal pieces. */
static loom_status op_split(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  loom_shape s = loom_shape_of(x);
  int axis;
  loom_status st = onnx_axis(n, onnx_attr_int(n, "axis", 0), s.ndim, &axis);
  if (st) return st;
  int64_t sizes[ONNX_MAX_NODE_IO];
  int count = -1;
  if (n->opset < 13)
    st = onnx_attr_ints(n, "split", sizes, ONNX_MAX_NODE_IO, &count);
  else if (onnx_has_in(n, 1))
    st = onnx_ints(n, 1, sizes, ONNX_MAX_NODE_IO, &count);
  if (st) return st;
  int64_t len = s.dim[axis];
  if (n->nout < 1) return onnx_refuse(n, LOOM_ERR_VALUE, "no outputs");
  if (count < 0) {
    int64_t pieces = n->nout, each = (len + pieces - 1) / pieces;
    if (onnx_attr(n, "num_outputs")) {
      pieces = onnx_attr_int(n, "num_outputs", n->nout);
      if (pieces != n->nout || pieces < 1)
        return onnx_refuse(n, LOOM_ERR_VALUE, "num_outputs %lld but %d outputs", (long long)pieces,
                           n->nout);
      each = (len + pieces - 1) / pieces;
    } else if (len % pieces) {
      return onnx_refuse(n, LOOM_ERR_SHAPE, "%lld does not split into %lld equal pieces",
                         (long long)len, (long long)pieces);
    }
    count = n->nout;
    for (int i = 0; i < count; i++) {
      int64_t left = len - each * i;
      sizes[i] = left < 0 ? 0 : left < each ? left : each;
    }
  }
  if (count != n->nout)
    return onnx_refuse(n, LOOM_ERR_VALUE, "%d sizes for %d outputs", count, n->nout);
  int64_t at = 0;
  for (int i = 0; i < count; i++) {
    if (sizes[i] < 0 || at + sizes[i] > len)
      return onnx_refuse(n, LOOM_ERR_SHAPE, "sizes run past the axis's %lld", (long long)len);
    onnx_out(n, i, loom_slice(x, axis, at, at + sizes[i], 1));
    at += sizes[i];
  }
  if (at != len)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "sizes sum to %lld, not the axis's %lld", (long long)at,
                       (long long)len);
  return LOOM_OK;
}

/* ONNX's clamping of a bound for a step's direction (as NumPy's slices). */
static int64_t clamp_bound(int64_t v, int64_t len, bool negative_step, bool is_end) {
  if (v < 0) v += len;
  if (negative_step) {
    if (v < 0) return is_end ? -1 : -1;
    if (v > len - 1) return len - 1;
    return v;
  }
  return v < 0 ? 0 : v > len ? len : v;
}

static loom_status op_slice(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  loom_shape s = loom_shape_of(x);
  int64_t starts[LOOM_MAX_DIMS], ends[LOOM_MAX_DIMS], axes[LOOM_MAX_DIMS], steps[LOOM_MAX_DIMS];
  int ns, ne, na = -1, nst = -1;
  loom_status st;
  if (n->opset < 10) {
    if ((st = onnx_attr_ints(n, "starts", starts, LOOM_MAX_DIMS, &ns)) ||
        (st = onnx_attr_ints(n, "ends", ends, LOOM_MAX_DIMS, &ne)) ||
        (st = onnx_attr_ints(n, "axes", axes, LOOM_MAX_DIMS, &na)))
      return st;
  } else {
    if ((st = onnx_ints(n, 1, starts, LOOM_MAX_DIMS, &ns)) ||
        (st = onnx_ints(n, 2, ends, LOOM_MAX_DIMS, &ne)))
      return st;
    if (onnx_has_in(n, 3) && (st = onnx_ints(n, 3, axes, LOOM_MAX_DIMS, &na))) return st;
    if (onnx_has_in(n, 4) && (st = onnx_ints(n, 4, steps, LOOM_MAX_DIMS, &nst))) return st;
  }
  if (ns != ne || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
    return onnx_refuse(n, LOOM_ERR_VALUE, "starts, ends, axes and steps differ in length");
  loom_tensor *r = loom_retain(x);
  for (int i = 0; i < ns; i++) {
    int axis;
    if ((st = onnx_axis(n, na >= 0 ? axes[i] : i, s.ndim, &axis))) {
      loom_free(r);
      return st;
    }
    int64_t step = nst >= 0 ? steps[i] : 1, len = s.dim[axis];
    if (step == 0) {
      loom_free(r);
      return onnx_refuse(n, LOOM_ERR_VALUE, "step 0 on axis %d", axis);
    }
    int64_t b = clamp_bound(starts[i], len, step < 0, false);
    int64_t e = clamp_bound(ends[i], len, step < 0, true);
    loom_tensor *next;
    if (step > 0) {
      next = loom_slice(r, axis, b, e < b ? b : e, step);
    } else {
      /* reversed: flip, then a forward slice from len-1-b */
      int64_t fb = len - 1 - b, fe = len - 1 - e;
      loom_tensor *flipped = loom_flip(r, axis);
      next = loom_slice(flipped, axis, fb, fe < fb ? fb : fe, -step);
      loom_free(flipped);
    }
    loom_free(r);
    r = next;
  }
  onnx_out(n, 0, r);
  return LOOM_OK;
}

/* Negative indices count from the end of x's axis; a length that follows a
 * symbolic dim is counted when the model runs, since a constant would keep
 * the traced one. */
static loom_tensor *wrap_indices(onnx_node *n, loom_tensor *x, int axis, loom_tensor *idx) {
  loom_tensor *i64 = loom_cast(idx, LOOM_I64);
  loom_tensor *end = !onnx_in_dim_fixed(n, 0, axis) ? loom_sum_all(onnx_ones_along(x, axis)) : NULL;
  loom_tensor *wrapped =
      end ? loom_add(i64, end) : loom_add_s(i64, (double)loom_shape_of(x).dim[axis]);
  return loom_where(loom_lt_s(i64, 0), wrapped, i64);
}

static loom_status op_gather(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0), *idx = onnx_in(n, 1);
  loom_shape s = loom_shape_of(x), is = loom_shape_of(idx);
  int axis;
  loom_status st = onnx_axis(n, onnx_attr_int(n, "axis", 0), s.ndim, &axis);
  if (st) return st;
  if (s.ndim - 1 + is.ndim > LOOM_MAX_DIMS)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "the result has %d dims; loom holds at most %d",
                       s.ndim - 1 + is.ndim, LOOM_MAX_DIMS);
  loom_tensor *flat = loom_reshape(wrap_indices(n, x, axis, idx), LOOM_SHAPE(loom_numel(idx)));
  loom_tensor *picked = loom_index_select(x, axis, flat);
  loom_shape out = {.ndim = s.ndim - 1 + is.ndim};
  int k = 0;
  for (int d = 0; d < axis; d++) out.dim[k++] = s.dim[d];
  for (int d = 0; d < is.ndim; d++) out.dim[k++] = is.dim[d];
  for (int d = axis + 1; d < s.ndim; d++) out.dim[k++] = s.dim[d];
  onnx_out(n, 0, loom_reshape(picked, out));
  return LOOM_OK;
}

static loom_status op_gather_elements(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0), *idx = onnx_in(n, 1);
  loom_shape s = loom_shape_of(x);
  int axis;
  loom_status st = onnx_axis(n, onnx_attr_int(n, "axis", 0), s.ndim, &axis);
  if (st) return st;
  onnx_out(n, 0, loom_gather(x, axis, wrap_indices(n, x, axis, idx)));
  return LOOM_OK;
}

/* NumPy's broadcast of the input's shape with the given one. */
static loom_status op_expand(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int64_t dims[LOOM_MAX_DIMS];
  int count;
  loom_status st = onnx_ints(n, 1, dims, LOOM_MAX_DIMS, &count);
  if (st) return st;
  loom_shape s = loom_shape_of(x);
  int rank = count > s.ndim ? count : s.ndim;
  loom_shape out = {.ndim = rank};
  for (int d = 0; d < rank; d++) {
    int di = d - (rank - s.ndim), dd = d - (rank - count);
    int64_t a = di >= 0 ? s.dim[di] : 1, b = dd >= 0 ? dims[dd] : 1;
    if (a != b && a != 1 && b != 1)
      return onnx_refuse(n, LOOM_ERR_SHAPE, "dim %d: %lld does not broadcast to %lld", d,
                         (long long)a, (long long)b);
    out.dim[d] = a == 1 ? b : a;
  }
  loom_shape grown = {.ndim = rank};
  for (int d = 0; d < rank; d++) {
    int di = d - (rank - s.ndim);
    grown.dim[d] = di >= 0 ? s.dim[di] : 1;
  }
  loom_tensor *r = loom_reshape(x, grown);
  onnx_out(n, 0, loom_expand(r, out));
  return LOOM_OK;
}

static loom_status op_tile(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int64_t reps[LOOM_MAX_DIMS];
  int count;
  loom_status st = onnx_ints(n, 1, reps, LOOM_MAX_DIMS, &count);
  if (st) return st;
  if (count != onnx_rank(x))
    return onnx_refuse(n, LOOM_ERR_SHAPE, "%d repeats for a rank-%d input", count, onnx_rank(x));
  onnx_out(n, 0, loom_repeat(x, reps, count));
  return LOOM_OK;
}

static loom_status op_constant_of_shape(onnx_node *n) {
  int64_t dims[LOOM_MAX_DIMS];
  int count;
  loom_status st = onnx_ints(n, 0, dims, LOOM_MAX_DIMS, &count);
  if (st) return st;
  loom_shape shape = {.ndim = count};
  for (int d = 0; d < count; d++) shape.dim[d] = dims[d];
  double value = 0;
  loom_dtype dt = LOOM_F32;
  const Onnx__AttributeProto *a = onnx_attr(n, "value");
  if (a && a->t) {
    char why[512];
    loom_tensor *v = onnx_tensor_from_proto(a->t, NULL, why, sizeof why);
    if (!v) return onnx_refuse(n, LOOM_ERR_CORRUPT, "value: %s", why);
    if (loom_numel(v) != 1) {
      loom_free(v);
      return onnx_refuse(n, LOOM_ERR_SHAPE, "value holds %lld values, not 1",
                         (long long)loom_numel(v));
    }
    dt = loom_dtype_of(v);
    loom_tensor *d = loom_cast(v, LOOM_F64);
    st = loom_copy_to_host(d, &value, sizeof value);
    loom_free(d);
    loom_free(v);
    if (st) return onnx_refuse(n, st, "value could not be read");
  }
  onnx_out(n, 0, loom_full(shape, value, dt, onnx_device(n)));
  return LOOM_OK;
}

/* start, start + delta, ... before limit: ceil((limit - start) / delta) values. */
static loom_status op_range(onnx_node *n) {
  double v[3];
  for (int i = 0; i < 3; i++) {
    int count;
    loom_status st = onnx_doubles(n, i, &v[i], 1, &count);
    if (st) return st;
    if (count != 1) return onnx_refuse(n, LOOM_ERR_SHAPE, "input %d is not a scalar", i);
  }
  if (v[2] == 0) return onnx_refuse(n, LOOM_ERR_VALUE, "delta is 0");
  loom_dtype dt = loom_dtype_of(n->in[0]->t);
  double count = ceil((v[1] - v[0]) / v[2]);
  if (count <= 0) {
    onnx_out(n, 0, loom_zeros(LOOM_SHAPE(0), dt, onnx_device(n)));
    return LOOM_OK;
  }
  /* an arange over a symbolic size (0 to the batch, from Shape): positions that
   * follow the symbol, where a constant arange would keep the traced length */
  loom_tensor *follows = v[0] == 0 && v[2] == 1 && n->in[1]->traced
                             ? onnx_symbol_positions(n, (int64_t)count, dt)
                             : NULL;
  onnx_out(n, 0,
           follows ? follows
                   : loom_arange(v[0], v[0] + count * v[2] - v[2] / 2, v[2], dt, onnx_device(n)));
  return LOOM_OK;
}

/* x grown by lo and hi along axis as mode says: edge repeats the border,
 * reflect mirrors without repeating it, wrap continues from the other end. */
static loom_status pad_axis(onnx_node *n, const char *mode, loom_tensor *x, int axis, int64_t lo,
                            int64_t hi, loom_tensor **out) {
  int64_t len = loom_shape_of(x).dim[axis];
  bool reflect = strcmp(mode, "reflect") == 0, wrap = strcmp(mode, "wrap") == 0;
  if (lo < 0 || hi < 0 || (reflect && (lo >= len || hi >= len)) ||
      (wrap && (lo > len || hi > len)) || len == 0)
    return onnx_refuse(n, LOOM_ERR_VALUE, "%s padding of %lld and %lld on axis %d of size %lld",
                       mode, (long long)lo, (long long)hi, axis, (long long)len);
  loom_tensor *parts[3];
  int k = 0;
  if (lo) {
    if (reflect)
      parts[k++] = loom_flip(loom_slice(x, axis, 1, lo + 1, 1), axis);
    else if (wrap)
      parts[k++] = loom_slice(x, axis, len - lo, len, 1);
    else {
      loom_shape s = loom_shape_of(x);
      s.dim[axis] = lo;
      parts[k++] = loom_expand(loom_slice(x, axis, 0, 1, 1), s);
    }
  }
  parts[k++] = x;
  if (hi) {
    if (reflect)
      parts[k++] = loom_flip(loom_slice(x, axis, len - 1 - hi, len - 1, 1), axis);
    else if (wrap)
      parts[k++] = loom_slice(x, axis, 0, hi, 1);
    else {
      loom_shape s = loom_shape_of(x);
      s.dim[axis] = hi;
      parts[k++] = loom_expand(loom_slice(x, axis, len - 1, len, 1), s);
    }
  }
  *out = k == 1 ? loom_retain(x) : loom_cat(parts, k, axis);
  return LOOM_OK;
}

/* Pads as [x1_begin, x2_begin, ..., x1_end, ...]; modes constant, edge, reflect, wrap. */
static loom_status op_pad(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int rank = onnx_rank(x);
  char buf[16];
  const char *mode = onnx_attr_string(n, "mode", "constant", buf, sizeof buf);
  if (strcmp(mode, "constant") && strcmp(mode, "edge") && strcmp(mode, "reflect") &&
      strcmp(mode, "wrap"))
    return onnx_refuse(n, LOOM_ERR_VALUE, "mode '%s'", mode);
  int64_t pads[2 * LOOM_MAX_DIMS], axes[LOOM_MAX_DIMS];
  int np, na = -1;
  double value = 0;
  loom_status st;
  if (n->opset < 11) {
    st = onnx_attr_ints(n, "pads", pads, 2 * LOOM_MAX_DIMS, &np);
    value = onnx_attr_float(n, "value", 0);
  } else {
    st = onnx_ints(n, 1, pads, 2 * LOOM_MAX_DIMS, &np);
    if (!st && onnx_has_in(n, 2)) {
      int c;
      st = onnx_doubles(n, 2, &value, 1, &c);
    }
    if (!st && onnx_has_in(n, 3)) st = onnx_ints(n, 3, axes, LOOM_MAX_DIMS, &na);
  }
  if (st) return st;
  int naxes = na >= 0 ? na : rank;
  if (np != 2 * naxes) return onnx_refuse(n, LOOM_ERR_VALUE, "%d pads for %d axes", np, naxes);
  int64_t lo[LOOM_MAX_DIMS] = {0}, hi[LOOM_MAX_DIMS] = {0};
  for (int i = 0; i < naxes; i++) {
    int a = i;
    if (na >= 0 && (st = onnx_axis(n, axes[i], rank, &a))) return st;
    lo[a] = pads[i], hi[a] = pads[i + naxes];
  }
  if (strcmp(mode, "constant")) {
    loom_tensor *r = loom_retain(x);
    for (int d = 0; d < rank && !st; d++) {
      loom_tensor *next = NULL;
      if ((st = pad_axis(n, mode, r, d, lo[d], hi[d], &next))) break;
      r = next;
    }
    if (!st) onnx_out(n, 0, r);
    return st;
  }
  /* loom_pad: (before, after) pairs from the last axis; negative pads crop */
  int64_t tp[2 * LOOM_MAX_DIMS];
  for (int d = 0; d < rank; d++) tp[2 * d] = lo[rank - 1 - d], tp[2 * d + 1] = hi[rank - 1 - d];
  onnx_out(n, 0, loom_pad(x, tp, 2 * rank, value));
  return LOOM_OK;
}

static loom_status op_trilu(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int64_t k = 0;
  int count;
  if (onnx_has_in(n, 1)) {
    loom_status st = onnx_ints(n, 1, &k, 1, &count);
    if (st) return st;
  }
  onnx_out(n, 0, onnx_attr_int(n, "upper", 1) ? loom_triu(x, k) : loom_tril(x, k));
  return LOOM_OK;
}

/* Inference: the input, and a mask of ones. */
static loom_status op_dropout(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  if (onnx_has_in(n, 2)) {
    int64_t training;
    int count;
    loom_status st = onnx_ints(n, 2, &training, 1, &count);
    if (st) return st;
    double ratio = 0.5;
    if (onnx_has_in(n, 1) && (st = onnx_doubles(n, 1, &ratio, 1, &count))) return st;
    if (training && ratio != 0)
      return onnx_refuse(n, LOOM_ERR_VALUE,
                         "training mode with ratio %g: loom imports models for inference", ratio);
  }
  onnx_out(n, 0, loom_retain(x));
  if (n->nout > 1) onnx_out(n, 1, loom_full(loom_shape_of(x), 1, LOOM_BOOL, onnx_device(n)));
  return LOOM_OK;
}

static loom_status op_cumsum(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int axis;
  bool exclusive, reverse;
  loom_status st = onnx_running_axis(n, x, &axis, &exclusive, &reverse);
  if (st) return st;
  loom_tensor *r = reverse ? loom_flip(x, axis) : loom_retain(x);
  loom_tensor *c = loom_cumsum(r, axis);
  if (exclusive) c = loom_sub(c, r);
  if (reverse) c = loom_flip(c, axis);
  onnx_out(n, 0, loom_cast(c, loom_dtype_of(x)));
  return LOOM_OK;
}

static loom_status op_one_hot(onnx_node *n) {
  loom_tensor *idx = onnx_in(n, 0), *values = onnx_in(n, 2);
  double depth_v;
  int count;
  loom_status st = onnx_doubles(n, 1, &depth_v, 1, &count);
  if (st) return st;
  int64_t depth = (int64_t)depth_v;
  if (depth < 1) return onnx_refuse(n, LOOM_ERR_VALUE, "depth %lld", (long long)depth);
  int rank = onnx_rank(idx) + 1, axis;
  if ((st = onnx_axis(n, onnx_attr_int(n, "axis", -1), rank, &axis))) return st;
  loom_tensor *i = loom_cast(idx, LOOM_I64);
  i = loom_where(loom_lt_s(i, 0), loom_add_s(i, (double)depth), i);
  loom_tensor *classes = loom_arange(0, (double)depth, 1, LOOM_I64, onnx_device(n));
  loom_shape cs = {.ndim = rank};
  for (int d = 0; d < rank; d++) cs.dim[d] = d == axis ? depth : 1;
  loom_tensor *hot = loom_eq(loom_unsqueeze(i, axis), loom_reshape(classes, cs));
  loom_tensor *off = loom_slice(values, 0, 0, 1, 1), *on = loom_slice(values, 0, 1, 2, 1);
  onnx_out(n, 0, loom_where(hot, loom_reshape(on, LOOM_SHAPE0), loom_reshape(off, LOOM_SHAPE0)));
  return LOOM_OK;
}

static loom_status op_eye_like(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  loom_shape s = loom_shape_of(x);
  if (s.ndim != 2) return onnx_refuse(n, LOOM_ERR_SHAPE, "a rank-%d input; 2 expected", s.ndim);
  loom_dtype dt = loom_dtype_of(x);
  if (onnx_attr(n, "dtype")) {
    const char *name;
    int d = onnx_dtype_to_loom((int32_t)onnx_attr_int(n, "dtype", 1), &name);
    if (d < 0) return onnx_refuse(n, LOOM_ERR_DTYPE, "dtype %s", name);
    dt = (loom_dtype)d;
  }
  int64_t k = onnx_attr_int(n, "k", 0);
  loom_tensor *r = loom_arange(0, (double)s.dim[0], 1, LOOM_I64, onnx_device(n));
  loom_tensor *c = loom_arange(0, (double)s.dim[1], 1, LOOM_I64, onnx_device(n));
  loom_tensor *eq = loom_eq(loom_add_s(loom_reshape(r, LOOM_SHAPE(s.dim[0], 1)), (double)k),
                            loom_reshape(c, LOOM_SHAPE(1, s.dim[1])));
  onnx_out(n, 0, loom_cast(eq, dt));
  return LOOM_OK;
}

/* DepthToSpace (DCR or CRD) and SpaceToDepth as a reshape, a permute, a reshape. */
static loom_status space_depth(onnx_node *n, bool to_space) {
  loom_tensor *x = onnx_in(n, 0);
  loom_shape s = loom_shape_of(x);
  int64_t b = onnx_attr_int(n, "blocksize", 0);
  if (s.ndim != 4 || b < 1 || b > (int64_t)1 << 20)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "a rank-%d input with blocksize %lld", s.ndim,
                       (long long)b);
  int64_t N = s.dim[0], C = s.dim[1], H = s.dim[2], W = s.dim[3];
  char buf[8];
  const char *mode = onnx_attr_string(n, "mode", "DCR", buf, sizeof buf);
  loom_tensor *r;
  if (to_space) {
    if (C % (b * b)) return onnx_refuse(n, LOOM_ERR_SHAPE, "%lld channels", (long long)C);
    int64_t c = C / (b * b);
    if (strcmp(mode, "CRD") == 0) {
      const int p[] = {0, 1, 4, 2, 5, 3};
      r = loom_permute(loom_reshape(x, (loom_shape){6, {N, c, b, b, H, W}}), p, 6);
    } else {
      const int p[] = {0, 3, 4, 1, 5, 2};
      r = loom_permute(loom_reshape(x, (loom_shape){6, {N, b, b, c, H, W}}), p, 6);
    }
    onnx_out(n, 0, loom_reshape(r, LOOM_SHAPE(N, c, H * b, W * b)));
  } else {
    if (H % b || W % b)
      return onnx_refuse(n, LOOM_ERR_SHAPE, "%lldx%lld", (long long)H, (long long)W);
    const int p[] = {0, 3, 5, 1, 2, 4};
    r = loom_permute(loom_reshape(x, (loom_shape){6, {N, C, H / b, b, W / b, b}}), p, 6);
    onnx_out(n, 0, loom_reshape(r, LOOM_SHAPE(N, C * b * b, H / b, W / b)));
  }
  return LOOM_OK;
}
static loom_status op_depth_to_space(onnx_node *n) { return space_depth(n, true); }
static loom_status op_space_to_depth(onnx_node *n) { return space_depth(n, false); }

const onnx_op onnx_ops_tensor[] = {
    ONNX_OP(Constant, op_constant),
    ONNX_OP_FLAGS(Shape, op_shape, ONNX_READS_SHAPE),
    ONNX_OP_FLAGS(Size, op_size, ONNX_READS_SHAPE),
    ONNX_OP(Reshape, op_reshape),
    ONNX_OP(Flatten, op_flatten),
    ONNX_OP(Squeeze, op_squeeze),
    ONNX_OP(Unsqueeze, op_unsqueeze),
    ONNX_OP(Transpose, op_transpose),
    ONNX_OP(Concat, op_concat),
    ONNX_OP(Split, op_split),
    ONNX_OP(Slice, op_slice),
    ONNX_OP(Gather, op_gather),
    ONNX_OP(GatherElements, op_gather_elements),
    ONNX_OP(Expand, op_expand),
    ONNX_OP(Tile, op_tile),
    ONNX_OP(ConstantOfShape, op_constant_of_shape),
    ONNX_OP(Range, op_range),
    ONNX_OP(Pad, op_pad),
    ONNX_OP(Trilu, op_trilu),
    ONNX_OP(Dropout, op_dropout),
    ONNX_OP(CumSum, op_cumsum),
    ONNX_OP(OneHot, op_one_hot),
    ONNX_OP(EyeLike, op_eye_like),
    ONNX_OP(DepthToSpace, op_depth_to_space),
    ONNX_OP(SpaceToDepth, op_space_to_depth),
};
const int onnx_ops_tensor_count = sizeof onnx_ops_tensor / sizeof onnx_ops_tensor[0];
