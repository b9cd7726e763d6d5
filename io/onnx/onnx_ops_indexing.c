/* Indexing ops: TopK, CumProd, GatherND, the scatters (ScatterElements,
 * Scatter, ScatterND, TensorScatter, MaxUnpool), CenterCropPad,
 * ReverseSequence. loom has no scatter op: a scatter is composed of a one-hot
 * comparison of the indices with an iota, reductions over the updates that
 * hit each target and a where (scatter_lines). */
#include <string.h>

#include "io/onnx/onnx.h"

/* 0 .. n-1 as I64 on near's device, shaped [1, .., n, .., 1] (rank dims, n
 * at dim `at`). */
static loom_tensor *iota_at(const loom_tensor *near, int64_t n, int rank, int at) {
  loom_shape s = {.ndim = rank};
  for (int d = 0; d < rank; d++) s.dim[d] = d == at ? n : 1;
  return loom_reshape(loom_arange(0, (double)n, 1, LOOM_I64, loom_device_of(near)), s);
}

/* t padded along one axis with value. */
static loom_tensor *pad_axis(const loom_tensor *t, int axis, int64_t before, int64_t after,
                             double value) {
  int rank = loom_ndim(t);
  int64_t pads[2 * LOOM_MAX_DIMS] = {0};
  pads[2 * (rank - 1 - axis)] = before;
  pads[2 * (rank - 1 - axis) + 1] = after;
  return loom_pad(t, pads, 2 * (rank - axis), value);
}

/* The product along axis (dropped), exact for integers: halves multiplied
 * pairwise, log2(n) steps (loom has no product reduction). */
static loom_tensor *prod_axis(loom_tensor *t, int axis) {
  loom_shape s = loom_shape_of(t);
  if (s.dim[axis] == 0) {
    loom_shape o = {0};
    for (int d = 0; d < s.ndim; d++)
      if (d != axis) o.dim[o.ndim++] = s.dim[d];
    return loom_ones(o, loom_dtype_of(t), loom_device_of(t));
  }
  for (int64_t len = s.dim[axis]; len > 1;) {
    if (len % 2) t = pad_axis(t, axis, 0, 1, 1), len++;
    len /= 2;
    t = loom_mul(loom_slice(t, axis, 0, len, 1), loom_slice(t, axis, len, 2 * len, 1));
  }
  return loom_squeeze(t, axis);
}

typedef enum { SCATTER_NONE, SCATTER_ADD, SCATTER_MUL, SCATTER_MAX, SCATTER_MIN } scatter_reduction;

static loom_status reduction_of(onnx_node *n, scatter_reduction *out) {
  char buf[16];
  const char *r = onnx_attr_string(n, "reduction", "none", buf, sizeof buf);
  static const char *names[] = {"none", "add", "mul", "max", "min"};
  for (int i = 0; i < 5; i++)
    if (strcmp(r, names[i]) == 0) {
      *out = (scatter_reduction)i;
      return LOOM_OK;
    }
  return onnx_refuse(n, LOOM_ERR_VALUE, "reduction '%s'; none, add, mul, max or min expected", r);
}

/* base [P, D, R] with updates [P, N, R] written where hot [P, N, D] (update n
 * of line p goes to target d): the targets no update hits keep base; with no
 * reduction the last update that hits a target wins, as ONNX's reference. */
static loom_tensor *scatter_lines(loom_tensor *base, loom_tensor *hot, loom_tensor *upd,
                                  scatter_reduction red) {
  loom_dtype dt = loom_dtype_of(base);
  loom_tensor *hot4 = loom_unsqueeze(hot, 3);   /* [P, N, D, 1] */
  loom_tensor *upd4 = loom_unsqueeze(upd, 2);   /* [P, N, 1, R] */
  loom_tensor *base4 = loom_unsqueeze(base, 1); /* [P, 1, D, R] */
  const int over_n[] = {1};
  switch (red) {
  case SCATTER_ADD:
    return loom_add(base, loom_cast(loom_sum(loom_where_s(hot4, upd4, 0), over_n, 1, false), dt));
  case SCATTER_MUL: return loom_mul(base, prod_axis(loom_where_s(hot4, upd4, 1), 1));
  case SCATTER_MAX:
    return loom_maximum(base, loom_max(loom_where(hot4, upd4, base4), over_n, 1, false));
  case SCATTER_MIN:
    return loom_minimum(base, loom_min(loom_where(hot4, upd4, base4), over_n, 1, false));
  case SCATTER_NONE: break;
  }
  /* the last update hitting each target, gathered: [P, N, D] compares, no
   * [P, N, D, R] product */
  loom_shape hs = loom_shape_of(hot), us = loom_shape_of(upd);
  loom_tensor *pos = iota_at(hot, hs.dim[1], 3, 1);
  loom_tensor *last = loom_max(loom_where_s(hot, pos, -1), over_n, 1, false); /* [P, D] */
  loom_tensor *from = loom_reshape(loom_maximum_s(last, 0), LOOM_SHAPE(hs.dim[0], hs.dim[2], 1));
  loom_tensor *value = loom_gather(
      upd, 1, loom_contiguous(loom_expand(from, LOOM_SHAPE(hs.dim[0], hs.dim[2], us.dim[2]))));
  loom_tensor *hit = loom_reshape(loom_ge_s(last, 0), LOOM_SHAPE(hs.dim[0], hs.dim[2], 1));
  return loom_where(hit, loom_cast(value, dt), base);
}

/* Negative indices count from the end of a dim of size `size` (a tensor
 * broadcasting to idx, or NULL with a scalar). */
static loom_tensor *wrap_index(loom_tensor *idx, int64_t size) {
  idx = loom_cast(idx, LOOM_I64);
  return loom_where(loom_lt_s(idx, 0), loom_add_s(idx, (double)size), idx);
}

/* ScatterElements along axis: lines are the other dims (as far as indices
 * reach), the axis is the target; data beyond indices' extent is kept. */
static loom_tensor *scatter_along(loom_tensor *data, int axis, loom_tensor *idx,
                                  loom_tensor *updates, scatter_reduction red) {
  loom_shape ds = loom_shape_of(data), is = loom_shape_of(idx);
  int rank = ds.ndim, perm[LOOM_MAX_DIMS], inv[LOOM_MAX_DIMS], k = 0;
  int64_t lines = 1;
  bool partial = false;
  loom_tensor *region = data;
  for (int d = 0; d < rank; d++) {
    if (d == axis) continue;
    perm[k++] = d, lines *= is.dim[d];
    if (is.dim[d] < ds.dim[d]) region = loom_slice(region, d, 0, is.dim[d], 1), partial = true;
  }
  perm[k] = axis;
  for (int d = 0; d < rank; d++) inv[perm[d]] = d;
  int64_t D = ds.dim[axis], N = is.dim[axis];
  loom_tensor *base = loom_reshape(loom_permute(region, perm, rank), LOOM_SHAPE(lines, D, 1));
  loom_tensor *ip =
      loom_reshape(loom_permute(wrap_index(idx, D), perm, rank), LOOM_SHAPE(lines, N, 1));
  loom_tensor *hot = loom_eq(ip, iota_at(ip, D, 3, 2));
  loom_tensor *up = loom_reshape(loom_permute(updates, perm, rank), LOOM_SHAPE(lines, N, 1));
  loom_shape ps = {.ndim = rank};
  for (int d = 0; d < rank; d++) ps.dim[d] = perm[d] == axis ? D : is.dim[perm[d]];
  loom_tensor *r = loom_permute(loom_reshape(scatter_lines(base, hot, up, red), ps), inv, rank);
  if (!partial) return r;
  loom_tensor *inside = loom_ones(loom_shape_of(r), LOOM_BOOL, loom_device_of(r));
  for (int d = 0; d < rank; d++) {
    int64_t short_by = ds.dim[d] - is.dim[d];
    if (d == axis || short_by <= 0) continue;
    r = pad_axis(r, d, 0, short_by, 0), inside = pad_axis(inside, d, 0, short_by, 0);
  }
  return loom_where(inside, r, data);
}

static loom_status op_scatter_elements(onnx_node *n) {
  loom_tensor *data = onnx_in(n, 0), *idx = onnx_in(n, 1), *updates = onnx_in(n, 2);
  int rank = onnx_rank(data), axis;
  scatter_reduction red = SCATTER_NONE;
  loom_status st = onnx_axis(n, onnx_attr_int(n, "axis", 0), rank, &axis);
  if (st || (st = reduction_of(n, &red))) return st;
  loom_shape ds = loom_shape_of(data), is = loom_shape_of(idx), us = loom_shape_of(updates);
  if (is.ndim != rank || us.ndim != rank)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "data, indices and updates have ranks %d, %d, %d", rank,
                       is.ndim, us.ndim);
  for (int d = 0; d < rank; d++)
    if (is.dim[d] != us.dim[d] || (d != axis && is.dim[d] > ds.dim[d]))
      return onnx_refuse(n, LOOM_ERR_SHAPE,
                         "dim %d: indices %lld, updates %lld, data %lld (indices and updates "
                         "agree, and reach no further than data)",
                         d, (long long)is.dim[d], (long long)us.dim[d], (long long)ds.dim[d]);
  onnx_out(n, 0, scatter_along(data, axis, idx, updates, red));
  return LOOM_OK;
}

/* The flat position of each index tuple (indices [.., k] into data's first k
 * dims from dim `from`): [U], negative entries counted from the dim's end. */
static loom_tensor *flat_positions(loom_tensor *idx, loom_shape ds, int from, int k,
                                   int64_t *count) {
  int64_t dims[LOOM_MAX_DIMS], strides[LOOM_MAX_DIMS], m = 1;
  for (int i = k - 1; i >= 0; i--) dims[i] = ds.dim[from + i], strides[i] = m, m *= dims[i];
  *count = m;
  loom_tensor *i64 = loom_reshape(loom_cast(idx, LOOM_I64), LOOM_SHAPE(-1, k));
  loom_tensor *dt = loom_from_data(dims, LOOM_SHAPE(1, k), LOOM_I64, loom_device_of(idx));
  loom_tensor *st = loom_from_data(strides, LOOM_SHAPE(1, k), LOOM_I64, loom_device_of(idx));
  i64 = loom_where(loom_lt_s(i64, 0), loom_add(i64, dt), i64);
  const int last[] = {1};
  return loom_sum(loom_mul(i64, st), last, 1, false);
}

static loom_status op_scatter_nd(onnx_node *n) {
  loom_tensor *data = onnx_in(n, 0), *idx = onnx_in(n, 1), *updates = onnx_in(n, 2);
  scatter_reduction red = SCATTER_NONE;
  loom_status st = reduction_of(n, &red);
  if (st) return st;
  loom_shape ds = loom_shape_of(data), is = loom_shape_of(idx);
  int k = is.ndim ? (int)is.dim[is.ndim - 1] : 0;
  if (is.ndim < 1 || k < 1 || k > ds.ndim)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "indices' last dim %d for rank-%d data", k, ds.ndim);
  int64_t m, rows = 1, u = loom_numel(idx) / k;
  for (int d = k; d < ds.ndim; d++) rows *= ds.dim[d];
  if (loom_numel(updates) != u * rows)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "%lld updates for %lld index tuples of %lld values",
                       (long long)loom_numel(updates), (long long)u, (long long)rows);
  loom_tensor *pos = flat_positions(idx, ds, 0, k, &m);
  loom_tensor *hot = loom_eq(loom_reshape(pos, LOOM_SHAPE(1, u, 1)), iota_at(pos, m, 3, 2));
  loom_tensor *base = loom_reshape(data, LOOM_SHAPE(1, m, rows));
  loom_tensor *up = loom_reshape(updates, LOOM_SHAPE(1, u, rows));
  onnx_out(n, 0, loom_reshape(scatter_lines(base, hot, up, red), ds));
  return LOOM_OK;
}

/* past_cache with update written along axis from write_indices[b] in each
 * batch row b (modulo the axis' size when mode is circular). */
static loom_status op_tensor_scatter(onnx_node *n) {
  loom_tensor *cache = onnx_in(n, 0), *update = onnx_in(n, 1);
  loom_shape cs = loom_shape_of(cache), us = loom_shape_of(update);
  int rank = cs.ndim, axis;
  loom_status st = onnx_axis(n, onnx_attr_int(n, "axis", -2), rank, &axis);
  if (st) return st;
  if (axis == 0) return onnx_refuse(n, LOOM_ERR_AXIS, "axis 0 is the batch axis");
  char buf[16];
  const char *mode = onnx_attr_string(n, "mode", "linear", buf, sizeof buf);
  bool circular = strcmp(mode, "circular") == 0;
  if (!circular && strcmp(mode, "linear"))
    return onnx_refuse(n, LOOM_ERR_VALUE, "mode '%s'; linear or circular expected", mode);
  if (us.ndim != rank) return onnx_refuse(n, LOOM_ERR_SHAPE, "update has rank %d", us.ndim);
  for (int d = 0; d < rank; d++)
    if (d == axis ? us.dim[d] > cs.dim[d] : us.dim[d] != cs.dim[d])
      return onnx_refuse(n, LOOM_ERR_SHAPE, "dim %d: cache %lld, update %lld", d,
                         (long long)cs.dim[d], (long long)us.dim[d]);
  loom_tensor *start = onnx_has_in(n, 2)
                           ? loom_cast(onnx_in(n, 2), LOOM_I64)
                           : loom_zeros(LOOM_SHAPE(cs.dim[0]), LOOM_I64, onnx_device(n));
  loom_shape bs = {.ndim = rank};
  for (int d = 0; d < rank; d++) bs.dim[d] = d == 0 ? cs.dim[0] : 1;
  loom_tensor *idx = loom_add(loom_reshape(start, bs), iota_at(start, us.dim[axis], rank, axis));
  if (circular) {
    /* idx >= 0: idx mod size = idx - floor(idx / size) size */
    double size = (double)cs.dim[axis];
    idx = loom_sub(idx, loom_mul_s(loom_cast(loom_floor(loom_div_s(idx, size)), LOOM_I64), size));
  }
  idx = loom_expand(idx, us);
  onnx_out(n, 0, scatter_along(cache, axis, idx, update, SCATTER_NONE));
  return LOOM_OK;
}

/* data[batch..., index tuple, ...]: the tuples flattened to rows of data
 * viewed as [B * M, R], one index_select. */
static loom_status op_gather_nd(onnx_node *n) {
  loom_tensor *data = onnx_in(n, 0), *idx = onnx_in(n, 1);
  loom_shape ds = loom_shape_of(data), is = loom_shape_of(idx);
  int64_t b = onnx_attr_int(n, "batch_dims", 0);
  int k = is.ndim ? (int)is.dim[is.ndim - 1] : 0;
  if (b < 0 || b >= is.ndim || b >= ds.ndim || k < 1 || b + k > ds.ndim)
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "batch_dims %lld with indices' last dim %d for rank-%d data and rank-%d "
                       "indices",
                       (long long)b, k, ds.ndim, is.ndim);
  int64_t batch = 1, rows = 1, m;
  for (int d = 0; d < b; d++) {
    if (is.dim[d] != ds.dim[d])
      return onnx_refuse(n, LOOM_ERR_SHAPE, "batch dim %d: data %lld, indices %lld", d,
                         (long long)ds.dim[d], (long long)is.dim[d]);
    batch *= ds.dim[d];
  }
  for (int d = (int)b + k; d < ds.ndim; d++) rows *= ds.dim[d];
  loom_tensor *pos = flat_positions(idx, ds, (int)b, k, &m);
  pos = loom_reshape(pos, LOOM_SHAPE(batch, -1));
  pos = loom_add(pos, loom_mul_s(iota_at(pos, batch, 2, 0), (double)m));
  loom_tensor *rows_of = loom_reshape(data, LOOM_SHAPE(batch * m, rows));
  loom_tensor *g = loom_index_select(rows_of, 0, loom_reshape(pos, LOOM_SHAPE(-1)));
  loom_shape os = {0};
  for (int d = 0; d < is.ndim - 1; d++) os.dim[os.ndim++] = is.dim[d];
  for (int d = (int)b + k; d < ds.ndim; d++) os.dim[os.ndim++] = ds.dim[d];
  onnx_out(n, 0, loom_reshape(g, os));
  return LOOM_OK;
}

static loom_status op_top_k(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int64_t k = 0;
  int count, axis;
  loom_status st = n->opset < 10 ? LOOM_OK : onnx_ints(n, 1, &k, 1, &count);
  if (n->opset < 10) k = onnx_attr_int(n, "k", -1);
  if (st || (st = onnx_axis(n, onnx_attr_int(n, "axis", -1), onnx_rank(x), &axis))) return st;
  int64_t len = loom_shape_of(x).dim[axis];
  if (k < 0 || k > len)
    return onnx_refuse(n, LOOM_ERR_VALUE, "k %lld for an axis of %lld", (long long)k,
                       (long long)len);
  loom_tensor *values = NULL, *indices = NULL;
  if ((st = loom_topk(x, k, axis, onnx_attr_int(n, "largest", 1) != 0, &values, &indices)))
    return onnx_refuse(n, st, "loom_topk failed");
  onnx_out(n, 0, values);
  onnx_out(n, 1, indices);
  return LOOM_OK;
}

/* Running products by doubling (Hillis-Steele): log2(n) shifted products. */
static loom_status op_cum_prod(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int axis;
  bool exclusive, reverse;
  loom_status st = onnx_running_axis(n, x, &axis, &exclusive, &reverse);
  if (st) return st;
  int64_t len = loom_shape_of(x).dim[axis];
  loom_tensor *c = reverse ? loom_flip(x, axis) : loom_retain(x);
  if (exclusive && len > 0) c = pad_axis(loom_slice(c, axis, 0, len - 1, 1), axis, 1, 0, 1);
  for (int64_t shift = 1; shift < len; shift *= 2)
    c = loom_mul(c, pad_axis(loom_slice(c, axis, 0, len - shift, 1), axis, shift, 0, 1));
  if (reverse) c = loom_flip(c, axis);
  onnx_out(n, 0, loom_cast(c, loom_dtype_of(x)));
  return LOOM_OK;
}

/* Each axis cropped or zero-padded to its size, centred (the odd one of a
 * difference goes to the end). */
static loom_status op_center_crop_pad(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0);
  int rank = onnx_rank(x), count, naxes;
  int64_t sizes[LOOM_MAX_DIMS], axes[LOOM_MAX_DIMS];
  loom_status st = onnx_ints(n, 1, sizes, LOOM_MAX_DIMS, &count);
  if (st || (st = onnx_attr_ints(n, "axes", axes, LOOM_MAX_DIMS, &naxes))) return st;
  if (naxes < 0)
    for (naxes = 0; naxes < rank; naxes++) axes[naxes] = naxes;
  if (count != naxes) return onnx_refuse(n, LOOM_ERR_VALUE, "%d sizes for %d axes", count, naxes);
  loom_tensor *r = loom_retain(x);
  for (int i = 0; i < naxes; i++) {
    int a;
    if ((st = onnx_axis(n, axes[i], rank, &a))) return st;
    int64_t dim = loom_shape_of(r).dim[a], want = sizes[i];
    if (want < 0) return onnx_refuse(n, LOOM_ERR_VALUE, "size %lld", (long long)want);
    if (want < dim) {
      int64_t from = (dim - want) / 2;
      r = loom_slice(r, a, from, from + want, 1);
    } else if (want > dim) {
      int64_t before = (want - dim) / 2;
      r = pad_axis(r, a, before, want - dim - before, 0);
    }
  }
  onnx_out(n, 0, r);
  return LOOM_OK;
}

/* Along time_axis, the first sequence_lens[b] steps of batch row b reversed:
 * a gather with t -> len - 1 - t below len. */
static loom_status op_reverse_sequence(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0), *lens = onnx_in(n, 1);
  int rank = onnx_rank(x), bax, tax;
  loom_status st = onnx_axis(n, onnx_attr_int(n, "batch_axis", 1), rank, &bax);
  if (st || (st = onnx_axis(n, onnx_attr_int(n, "time_axis", 0), rank, &tax))) return st;
  if (bax == tax) return onnx_refuse(n, LOOM_ERR_AXIS, "batch_axis and time_axis are both %d", bax);
  loom_shape s = loom_shape_of(x);
  loom_tensor *t = iota_at(x, s.dim[tax], rank, tax);
  loom_shape ls = {.ndim = rank};
  for (int d = 0; d < rank; d++) ls.dim[d] = d == bax ? s.dim[bax] : 1;
  loom_tensor *len = loom_reshape(loom_cast(lens, LOOM_I64), ls);
  loom_tensor *src = loom_where(loom_lt(t, len), loom_sub(loom_sub_s(len, 1), t), t);
  /* + 0 shaped as x: joins the iota's length to x's time dim, which a
   * symbolic model's inference cannot learn through the gather's axis */
  loom_tensor *zero = loom_mul_s(loom_cast(loom_eq(x, x), LOOM_I64), 0);
  onnx_out(n, 0, loom_gather(x, tax, loom_add(src, zero)));
  return LOOM_OK;
}

/* X's values written at their indices into zeros of the unpooled shape, then
 * padded to output_shape when given: per (n, c) plane, a one-hot of the
 * pooled plane's size by the unpooled plane's. */
static loom_status op_max_unpool(onnx_node *n) {
  loom_tensor *x = onnx_in(n, 0), *idx = onnx_in(n, 1);
  loom_shape xs = loom_shape_of(x);
  int64_t kernel[LOOM_MAX_DIMS], pads[2 * LOOM_MAX_DIMS], strides[LOOM_MAX_DIMS];
  int nk, np, ns, sp = xs.ndim - 2;
  loom_status st = onnx_attr_ints(n, "kernel_shape", kernel, LOOM_MAX_DIMS, &nk);
  if (!st) st = onnx_attr_ints(n, "pads", pads, 2 * LOOM_MAX_DIMS, &np);
  if (!st) st = onnx_attr_ints(n, "strides", strides, LOOM_MAX_DIMS, &ns);
  if (st) return st;
  if (sp < 1 || nk != sp || (np >= 0 && np != 2 * sp) || (ns >= 0 && ns != sp))
    return onnx_refuse(n, LOOM_ERR_SHAPE,
                       "a rank-%d input with %d kernel dims, %d pads, %d strides", xs.ndim, nk, np,
                       ns);
  loom_shape inferred = xs;
  for (int d = 0; d < sp; d++)
    inferred.dim[d + 2] = (xs.dim[d + 2] - 1) * (ns < 0 ? 1 : strides[d]) -
                          (np < 0 ? 0 : pads[d] + pads[sp + d]) + kernel[d];
  int64_t planes = xs.dim[0] * xs.dim[1], pooled = 1, plane = 1;
  for (int d = 0; d < sp; d++) pooled *= xs.dim[d + 2], plane *= inferred.dim[d + 2];
  /* MaxPool's indices are flat over the whole tensor but within their own
   * (n, c) plane: made local to it, and one outside it refused when the
   * model runs (the index_select of a plane-sized tensor checks them) */
  loom_tensor *idx2 = loom_reshape(loom_cast(idx, LOOM_I64), LOOM_SHAPE(planes, pooled));
  /* the planes' offsets as an arange's step: a constant plane size could
   * read as a traced symbolic size to loom_compile_symbolic */
  loom_tensor *offsets = loom_reshape(
      loom_arange(0, (double)(planes * plane), (double)plane, LOOM_I64, onnx_device(n)),
      LOOM_SHAPE(planes, 1));
  loom_tensor *local = loom_sub(idx2, offsets);
  loom_tensor *checked = loom_index_select(loom_zeros(LOOM_SHAPE(plane), LOOM_I64, onnx_device(n)),
                                           0, loom_reshape(local, LOOM_SHAPE(-1)));
  local = loom_add(local, loom_reshape(checked, LOOM_SHAPE(planes, pooled)));
  loom_tensor *hot = loom_eq(loom_unsqueeze(local, 2), iota_at(local, plane, 3, 2));
  loom_tensor *base = loom_zeros(LOOM_SHAPE(planes, plane, 1), loom_dtype_of(x), onnx_device(n));
  loom_tensor *y =
      scatter_lines(base, hot, loom_reshape(x, LOOM_SHAPE(planes, pooled, 1)), SCATTER_NONE);
  y = loom_reshape(y, inferred);
  if (onnx_has_in(n, 2)) {
    int64_t want[LOOM_MAX_DIMS];
    int count;
    if ((st = onnx_ints(n, 2, want, LOOM_MAX_DIMS, &count))) return st;
    if (count != xs.ndim)
      return onnx_refuse(n, LOOM_ERR_SHAPE, "output_shape has %d dims for a rank-%d input", count,
                         xs.ndim);
    for (int d = 0; d < count; d++) {
      if (want[d] < inferred.dim[d])
        return onnx_refuse(n, LOOM_ERR_SHAPE, "output_shape[%d] %lld is below the unpooled %lld", d,
                           (long long)want[d], (long long)inferred.dim[d]);
      if (want[d] > inferred.dim[d]) y = pad_axis(y, d, 0, want[d] - inferred.dim[d], 0);
    }
  }
  onnx_out(n, 0, y);
  return LOOM_OK;
}

const onnx_op onnx_ops_indexing[] = {
    ONNX_OP(TopK, op_top_k),
    ONNX_OP(CumProd, op_cum_prod),
    ONNX_OP(GatherND, op_gather_nd),
    ONNX_OP(ScatterElements, op_scatter_elements),
    ONNX_OP(Scatter, op_scatter_elements),
    ONNX_OP(ScatterND, op_scatter_nd),
    ONNX_OP(TensorScatter, op_tensor_scatter),
    ONNX_OP(MaxUnpool, op_max_unpool),
    ONNX_OP(CenterCropPad, op_center_crop_pad),
    ONNX_OP(ReverseSequence, op_reverse_sequence),
};
const int onnx_ops_indexing_count = sizeof onnx_ops_indexing / sizeof onnx_ops_indexing[0];
