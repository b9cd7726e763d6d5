/* Derivative rules: for a node n, the gradient reaching source `which` given
 * the gradient g reaching n. Every rule records ordinary IR nodes, so
 * backward passes fuse, compile and cache like forward ones, and are
 * differentiable again (higher derivatives). */
#include <math.h>
#include <string.h>

#include "frontend/autograd.h"
#include "frontend/frontend.h"

/* Temporaries of one rule, released together; any NULL marks out-of-memory. */
typedef struct arena {
  lm_node *items[512];
  int n;
  bool oom;
} arena;

static lm_node *keep(arena *a, lm_node *x) {
  if (!x || a->n == 512) {
    a->oom = true;
    lm_node_release(x);
    return NULL;
  }
  return a->items[a->n++] = x;
}

static lm_node *result(arena *a, lm_node *x) {
  if (x && !a->oom)
    lm_node_retain(x);
  else
    x = NULL;
  for (int i = 0; i < a->n; i++) lm_node_release(a->items[i]);
  return x;
}

typedef struct ctx {
  arena *a;
  const lm_node *n;
} ctx;

/* A constant shaped like `like`. */
static lm_node *cst(ctx *c, const lm_node *like, double v) {
  return keep(c->a, like ? nb_const(v, like->shape, like->dtype, like->device) : NULL);
}
static lm_node *bin(ctx *c, lm_op op, lm_node *x, lm_node *y) {
  return keep(c->a, nb_binary(op, x, y));
}
static lm_node *un(ctx *c, lm_op op, lm_node *x) { return keep(c->a, nb_unary(op, x)); }
static lm_node *mul(ctx *c, lm_node *x, lm_node *y) { return bin(c, LM_MUL, x, y); }
static lm_node *mul_s(ctx *c, lm_node *x, double v) { return mul(c, x, cst(c, x, v)); }
static lm_node *mask(ctx *c, lm_node *cond, const lm_node *like) {
  return keep(c->a, like ? nb_cast(cond, like->dtype) : NULL);
}
static lm_node *where(ctx *c, lm_node *cond, lm_node *x, lm_node *y) {
  return keep(c->a, nb_where(cond, x, y));
}

/* ------------------------------------------------------------ elementwise */

static lm_node *unary_grad(ctx *c, lm_node *g) {
  lm_node *n = (lm_node *)c->n, *x = n->src[0];
  switch (n->op) {
  case LM_NEG: return un(c, LM_NEG, g);
  case LM_ABS: {
    lm_node *zero = cst(c, x, 0);
    lm_node *pos = mask(c, bin(c, LM_LT, zero, x), x), *neg = mask(c, bin(c, LM_LT, x, zero), x);
    return mul(c, g, bin(c, LM_SUB, pos, neg));
  }
  case LM_EXP: return mul(c, g, n);
  case LM_LOG: return bin(c, LM_DIV, g, x);
  case LM_SQRT: return bin(c, LM_DIV, g, mul_s(c, n, 2));
  case LM_RSQRT: return mul(c, g, mul_s(c, mul(c, n, mul(c, n, n)), -0.5));
  case LM_SIN: return mul(c, g, un(c, LM_COS, x));
  case LM_COS: return un(c, LM_NEG, mul(c, g, un(c, LM_SIN, x)));
  case LM_TANH: return mul(c, g, bin(c, LM_SUB, cst(c, n, 1), mul(c, n, n)));
  case LM_SIGMOID: return mul(c, g, mul(c, n, bin(c, LM_SUB, cst(c, n, 1), n)));
  case LM_RELU: return where(c, bin(c, LM_LT, cst(c, x, 0), x), g, cst(c, g, 0));
  case LM_SQUARE: return mul(c, g, mul_s(c, x, 2));
  case LM_RECIPROCAL: return un(c, LM_NEG, mul(c, g, mul(c, n, n)));
  case LM_LOG1P: return bin(c, LM_DIV, g, bin(c, LM_ADD, cst(c, x, 1), x));
  case LM_EXPM1: return mul(c, g, bin(c, LM_ADD, n, cst(c, n, 1)));
  case LM_ERF: /* 2/sqrt(pi) exp(-x^2) */
    return mul(c, g, mul_s(c, un(c, LM_EXP, un(c, LM_NEG, mul(c, x, x))), 2 / sqrt(M_PI)));
  case LM_GELU: { /* Phi(x) + x phi(x) */
    lm_node *cdf =
        mul_s(c, bin(c, LM_ADD, cst(c, x, 1), un(c, LM_ERF, mul_s(c, x, M_SQRT1_2))), 0.5);
    lm_node *pdf = mul_s(c, un(c, LM_EXP, mul_s(c, mul(c, x, x), -0.5)), 1 / sqrt(2 * M_PI));
    return mul(c, g, bin(c, LM_ADD, cdf, mul(c, x, pdf)));
  }
  case LM_SILU: { /* s (1 + x (1 - s)) */
    lm_node *s = un(c, LM_SIGMOID, x), *one = cst(c, x, 1);
    return mul(c, g, mul(c, s, bin(c, LM_ADD, one, mul(c, x, bin(c, LM_SUB, one, s)))));
  }
  case LM_CAST: return loom_dtype_is_float(x->dtype) ? keep(c->a, nb_cast(g, x->dtype)) : NULL;
  case LM_CLAMP: { /* where lo <= x <= hi, as torch: the bounds themselves pass it */
    lm_node *inside = bin(c, LM_AND, bin(c, LM_LE, cst(c, x, n->arg.clamp.lo), x),
                          bin(c, LM_LE, x, cst(c, x, n->arg.clamp.hi)));
    return where(c, inside, g, cst(c, g, 0));
  }
  default: return NULL;
  }
}

static lm_node *binary_grad(ctx *c, int which, lm_node *g) {
  lm_node *n = (lm_node *)c->n, *x = n->src[0], *y = n->src[1];
  switch (n->op) {
  case LM_ADD: return g;
  case LM_SUB: return which == 0 ? g : un(c, LM_NEG, g);
  case LM_MUL: return mul(c, g, which == 0 ? y : x);
  case LM_DIV:
    return which == 0 ? bin(c, LM_DIV, g, y) : un(c, LM_NEG, mul(c, g, bin(c, LM_DIV, n, y)));
  case LM_POW:
    if (which == 0) /* y x^(y-1) */
      return mul(c, g, mul(c, y, bin(c, LM_POW, x, bin(c, LM_SUB, y, cst(c, y, 1)))));
    /* x^y log x, 0 where x == 0 and y >= 0 (torch's convention) */
    return where(c, bin(c, LM_AND, bin(c, LM_EQ, x, cst(c, x, 0)), bin(c, LM_LE, cst(c, y, 0), y)),
                 cst(c, g, 0), mul(c, g, mul(c, n, un(c, LM_LOG, x))));
  case LM_MAX:
  case LM_MIN: { /* to the winner; ties split evenly */
    lm_node *self = which == 0 ? x : y, *other = which == 0 ? y : x;
    lm_node *wins = n->op == LM_MAX ? bin(c, LM_LT, other, self) : bin(c, LM_LT, self, other);
    lm_node *tie = mul_s(c, mask(c, bin(c, LM_EQ, x, y), g), 0.5);
    return mul(c, g, bin(c, LM_ADD, mask(c, wins, g), tie));
  }
  default: return NULL;
  }
}

/* ------------------------------------------------------------ reductions */

static lm_node *reduce_grad(ctx *c, lm_node *g) {
  lm_node *n = (lm_node *)c->n, *x = n->src[0];
  lm_node *wide = keep(c->a, nb_expand(g, x->shape));
  if (n->op == LM_RSUM) return wide;
  if (n->op == LM_RLSE) { /* d lse / dx = softmax = exp(x - lse); lse may be wider than x */
    lm_node *lse = keep(c->a, nb_cast(keep(c->a, nb_expand(n, x->shape)), x->dtype));
    lm_node *gx = keep(c->a, nb_cast(wide, x->dtype));
    return mul(c, gx, un(c, LM_EXP, bin(c, LM_SUB, x, lse)));
  }
  if (n->op != LM_RMAX && n->op != LM_RMIN) return NULL;
  /* to every element equal to the extremum, shared evenly (torch's amax) */
  lm_node *hit = mask(c, bin(c, LM_EQ, x, keep(c->a, nb_expand(n, x->shape))), x);
  lm_node *count = keep(c->a, nb_reduce(LM_RSUM, hit, n->arg.axes));
  return mul(c, wide, bin(c, LM_DIV, hit, keep(c->a, nb_expand(count, x->shape))));
}

/* d/dA = G B^T, d/dB = A^T G. When B is W^T, d/dB is computed as (G^T A)^T,
 * so that W's gradient G^T A is stored in W's own layout: as A^T G it was
 * stored transposed, and whatever read it as W's (an optimizer's update, the
 * sum with an embedding's gradient) read it column by column. */
static lm_node *matmul_grad(ctx *c, int which, lm_node *g) {
  lm_node *n = (lm_node *)c->n;
  /* F32 sums of BF16 / F16 operands: the gradient products take the operands'
   * dtype, as torch's do (loom_matmul's gradient arrives through its cast, so
   * it is of that dtype already and this is exact) */
  if (n->src[0]->dtype != n->dtype) g = keep(c->a, nb_cast(g, n->src[0]->dtype));
  if (which == 0) return keep(c->a, nb_matmul(g, keep(c->a, nb_transpose_last(n->src[1]))));
  if (nb_is_transpose_last(n->src[1]))
    return keep(c->a, nb_transpose_last(
                          keep(c->a, nb_matmul(keep(c->a, nb_transpose_last(g)), n->src[0]))));
  return keep(c->a, nb_matmul(keep(c->a, nb_transpose_last(n->src[0])), g));
}

/* ------------------------------------------------------------ views */

/* The adjoint of out[i] = src[start + i*step] along dim d: g placed at those
 * positions of a zero tensor of length len. */
/* start_from_end: the slice's start was from the end (its pad's lo follows
 * the source's size). */
static lm_node *unslice_dim(ctx *c, lm_node *g, int d, int64_t start, int64_t step, int64_t len,
                            bool start_from_end) {
  int64_t m = g->shape.dim[d];
  int64_t lo[LOOM_MAX_DIMS] = {0}, hi[LOOM_MAX_DIMS] = {0};
  lm_node *cur = g;
  int64_t span = m;
  /* a negative step: g reversed (its start from the end, so that a flip's follows a
   * symbolic m), then placed from the lowest position read, by -step */
  if (step < 0 && m > 1) {
    cur = keep(c->a, nb_reverse(cur, d));
    start += (m - 1) * step, step = -step;
    start_from_end = false;
  } else if (step < 0) {
    step = -step;
  }
  if (step > 1 && m > 0) { /* [.., m, ..] -> [.., m, step, ..] zero-padded -> [.., m*step, ..] */
    loom_shape split = {g->shape.ndim + 1, {0}};
    for (int k = 0, o = 0; k < g->shape.ndim; k++) {
      split.dim[o++] = g->shape.dim[k];
      if (k == d) split.dim[o++] = 1;
    }
    int64_t plo[LOOM_MAX_DIMS] = {0}, phi[LOOM_MAX_DIMS] = {0};
    phi[d + 1] = step - 1;
    lm_node *spread = keep(c->a, nb_pad(keep(c->a, nb_reshape(cur, split)), plo, phi, 0));
    loom_shape merged = g->shape;
    merged.dim[d] = m * step;
    cur = keep(c->a, nb_reshape(spread, merged));
    span = m * step;
  }
  if (!cur) return NULL;
  lo[d] = start;
  hi[d] = len - start - span;
  if (hi[d] < 0) { /* the spread overshoots the end: crop */
    loom_shape cropped = cur->shape;
    cropped.dim[d] = span + hi[d];
    int64_t st[LOOM_MAX_DIMS] = {0}, one[LOOM_MAX_DIMS];
    for (int k = 0; k < LOOM_MAX_DIMS; k++) one[k] = 1;
    cur = keep(c->a, nb_slice(cur, cropped, st, one));
    hi[d] = 0;
  }
  lm_node *padded = nb_pad(cur, lo, hi, 0);
  if (padded && padded != cur && start_from_end) padded->arg.pad.lo_from_end[d] = 1;
  return keep(c->a, padded);
}

static lm_node *view_grad(ctx *c, int which, lm_node *g) {
  lm_node *n = (lm_node *)c->n, *x = n->src[which];
  int nd = n->shape.ndim;
  switch (n->op) {
  case LM_RESHAPE: return keep(c->a, nb_reshape(g, x->shape));
  case LM_PERMUTE: {
    int inverse[LOOM_MAX_DIMS];
    for (int d = 0; d < nd; d++) inverse[n->arg.perm[d]] = d;
    return keep(c->a, nb_permute(g, inverse));
  }
  case LM_EXPAND: {
    uint32_t axes = 0;
    for (int d = 0; d < nd; d++)
      if (x->shape.dim[d] != n->shape.dim[d]) axes |= 1u << d;
    return axes ? keep(c->a, nb_reduce(LM_RSUM, g, axes)) : g;
  }
  case LM_SLICE: {
    lm_node *cur = g;
    for (int d = 0; d < nd && cur; d++)
      if (n->arg.slice.start[d] != 0 || n->arg.slice.step[d] != 1 ||
          n->shape.dim[d] != x->shape.dim[d])
        cur = unslice_dim(c, cur, d, n->arg.slice.start[d], n->arg.slice.step[d], x->shape.dim[d],
                          n->arg.slice.from_end[d] & LM_SLICE_START_FROM_END);
    return cur;
  }
  case LM_PAD: {
    int64_t one[LOOM_MAX_DIMS];
    for (int d = 0; d < LOOM_MAX_DIMS; d++) one[d] = 1;
    return keep(c->a, nb_slice(g, x->shape, n->arg.pad.lo, one));
  }
  case LM_WINDOW: { /* each window position scatters back where it read */
    int sd = x->shape.ndim;
    lm_node *total = NULL;
    int64_t start[LOOM_MAX_DIMS] = {0}, one[LOOM_MAX_DIMS];
    for (int d = 0; d < LOOM_MAX_DIMS; d++) one[d] = 1;
    loom_shape pick = g->shape, plane = g->shape;
    pick.dim[sd] = pick.dim[sd + 1] = 1;
    plane.ndim = sd;
    for (int64_t kh = 0; kh < n->arg.window.kernel[0]; kh++)
      for (int64_t kw = 0; kw < n->arg.window.kernel[1]; kw++) {
        start[sd] = kh, start[sd + 1] = kw;
        lm_node *part = keep(c->a, nb_reshape(keep(c->a, nb_slice(g, pick, start, one)), plane));
        for (int i = 0; i < 2 && part; i++)
          part = unslice_dim(c, part, sd - 2 + i, (i ? kw : kh) * n->arg.window.dilation[i],
                             n->arg.window.stride[i], x->shape.dim[sd - 2 + i], false);
        total = total ? bin(c, LM_ADD, total, part) : part;
      }
    return total;
  }
  case LM_CAT: {
    int64_t start[LOOM_MAX_DIMS] = {0}, one[LOOM_MAX_DIMS];
    for (int d = 0; d < LOOM_MAX_DIMS; d++) one[d] = 1;
    for (int i = 0; i < which; i++) start[n->arg.axis] += n->src[i]->shape.dim[n->arg.axis];
    return keep(c->a, nb_slice(g, x->shape, start, one));
  }
  default: return NULL;
  }
}

/* 0, 1, ... along `axis` of an I64 tensor of `shape`. */
static lm_node *iota(ctx *c, loom_shape shape) {
  lm_node *i = keep(c->a, lm_node_new(LM_IOTA, 0, NULL, shape, LOOM_I64, c->n->device));
  if (i) i->arg.iota.start = 0, i->arg.iota.step = 1;
  return i;
}

static lm_node *expand(ctx *c, lm_node *x, loom_shape shape) {
  return keep(c->a, nb_expand(x, shape));
}

/* The number of true entries of each row of a [rows, n] BOOL. */
static lm_node *count_rows(ctx *c, lm_node *hits) {
  lm_node *ones = keep(c->a, nb_cast(hits, LOOM_I64));
  return keep(c->a, nb_squeeze_axes(keep(c->a, nb_reduce(LM_RSUM, ones, 2u)), 2u));
}

/*
 * A table's rows from count gradient rows g [count, rest] at row indices col
 * [count, 1], when the table has more rows than there are indices (a
 * vocabulary's embedding): the one-hot GEMM would cost rows * count * rest.
 * Instead, with each index's stable rank r_i (its place in sorted order) and
 * cum[k] = sum of g_i over r_i < k (in F64: a [count+1, count] GEMM), row v
 * is cum[hi_v] - cum[lo_v], lo_v and hi_v the numbers of indices below v and
 * up to v: rows * count comparisons and one pass over the table.
 */
static lm_node *rows_by_rank(ctx *c, lm_node *col, lm_node *flat, int64_t rows) {
  int64_t count = col->shape.dim[0], rest = flat->shape.dim[1];
  lm_node *row_of = keep(c->a, nb_reshape(col, LOOM_SHAPE(1, count)));
  loom_shape pairs = LOOM_SHAPE(count, count); /* [i, j]: does j sort before i? */
  lm_node *vi = expand(c, col, pairs), *vj = expand(c, row_of, pairs);
  lm_node *earlier = bin(c, LM_LT, expand(c, iota(c, LOOM_SHAPE(1, count)), pairs),
                         expand(c, iota(c, LOOM_SHAPE(count, 1)), pairs));
  lm_node *before =
      bin(c, LM_OR, bin(c, LM_LT, vj, vi), bin(c, LM_AND, bin(c, LM_EQ, vj, vi), earlier));
  lm_node *rank = keep(c->a, nb_reshape(count_rows(c, before), LOOM_SHAPE(1, count)));
  loom_shape prefixes = LOOM_SHAPE(count + 1, count); /* [k, i]: r_i < k */
  lm_node *below_k = bin(c, LM_LT, expand(c, rank, prefixes),
                         expand(c, iota(c, LOOM_SHAPE(count + 1, 1)), prefixes));
  lm_node *cum = keep(
      c->a, nb_matmul(keep(c->a, nb_cast(below_k, LOOM_F64)), keep(c->a, nb_cast(flat, LOOM_F64))));
  loom_shape per_row = LOOM_SHAPE(rows, count); /* [v, i] */
  lm_node *v = expand(c, iota(c, LOOM_SHAPE(rows, 1)), per_row), *iv = expand(c, row_of, per_row);
  lm_node *lo = count_rows(c, bin(c, LM_LT, iv, v)), *hi = count_rows(c, bin(c, LM_LE, iv, v));
  lm_node *at_lo[2] = {cum, lo}, *at_hi[2] = {cum, hi};
  loom_shape out = LOOM_SHAPE(rows, rest);
  lm_node *a =
      cum && lo ? keep(c->a, lm_node_new(LM_GATHER, 2, at_lo, out, LOOM_F64, c->n->device)) : NULL;
  lm_node *b =
      cum && hi ? keep(c->a, lm_node_new(LM_GATHER, 2, at_hi, out, LOOM_F64, c->n->device)) : NULL;
  return keep(c->a, nb_cast(bin(c, LM_SUB, b, a), flat->dtype));
}

/* d/d(table) of a gather: a scatter-add of g's rows, as one-hot(indices)^T @ g
 * (one GEMM) or, for tables of more rows than indices, by rank. */
static lm_node *gather_grad(ctx *c, lm_node *g) {
  lm_node *n = (lm_node *)c->n, *table = n->src[0], *indices = n->src[1];
  int64_t rows = table->shape.dim[0], count = lm_shape_numel(&indices->shape);
  int64_t rest = rows > 0 ? lm_shape_numel(&table->shape) / rows : 0;
  lm_node *col =
      keep(c->a, nb_cast(keep(c->a, nb_reshape(indices, LOOM_SHAPE(count, 1))), LOOM_I64));
  lm_node *lo = keep(c->a, nb_const(0, col ? col->shape : LOOM_SHAPE0, LOOM_I64, n->device));
  lm_node *hi =
      keep(c->a, nb_const((double)(rows - 1), col ? col->shape : LOOM_SHAPE0, LOOM_I64, n->device));
  col = bin(c, LM_MIN, bin(c, LM_MAX, col, lo), hi); /* the rows the forward read */
  lm_node *flat = keep(c->a, nb_reshape(g, LOOM_SHAPE(count, rest)));
  if (rows > count && count > 0 && col && flat)
    return keep(c->a, nb_reshape(rows_by_rank(c, col, flat, rows), table->shape));
  loom_shape both = LOOM_SHAPE(count, rows);
  lm_node *hot = bin(c, LM_EQ, expand(c, col, both), expand(c, iota(c, LOOM_SHAPE(1, rows)), both));
  lm_node *onehot = keep(c->a, nb_cast(hot, g->dtype));
  lm_node *rows_grad = keep(c->a, nb_matmul(keep(c->a, nb_transpose_last(onehot)), flat));
  return keep(c->a, nb_reshape(rows_grad, table->shape));
}

/* ------------------------------------------------------------ attention */

/* Attention's gradients from core ops, where the gradient is differentiated
 * again (loom_grad_of): the scores recomputed, p = softmax(s), dv = p^T g,
 * ds = p (g v^T - rowsum(p g v^T)), dq = ds k * scale, dk = ds^T q * scale. */
static void composed_attention_grads(ctx *c, lm_node *g, lm_node *r[3]) {
  const lm_node *n = c->n;
  lm_node *q = n->src[0], *k = n->src[1], *v = n->src[2];
  double scale = n->arg.attn.scale;
  int nd = q->shape.ndim;
  uint32_t last = 1u << (nd - 1);
  lm_node *s = mul_s(c, keep(c->a, nb_matmul(q, keep(c->a, nb_transpose_last(k)))), scale);
  if (s && n->arg.attn.causal) { /* key j after query i: column > row */
    loom_shape cols = s->shape, rows = s->shape;
    for (int d = 0; d < nd - 2; d++) cols.dim[d] = rows.dim[d] = 1;
    cols.dim[nd - 2] = 1, rows.dim[nd - 1] = 1;
    lm_node *later =
        bin(c, LM_LT, expand(c, iota(c, rows), s->shape), expand(c, iota(c, cols), s->shape));
    s = where(c, later, cst(c, s, -INFINITY), s);
  } else if (s && n->arg.attn.mask == LM_ATTENTION_BOOL_MASK) {
    s = where(c, n->src[3], s, cst(c, s, -INFINITY));
  } else if (s && n->arg.attn.mask == LM_ATTENTION_ADD_MASK) {
    s = bin(c, LM_ADD, s, n->src[3]);
  }
  lm_node *lse = s ? keep(c->a, nb_reduce(LM_RLSE, s, last)) : NULL;
  lm_node *p = s && lse ? un(c, LM_EXP, bin(c, LM_SUB, s, expand(c, lse, s->shape))) : NULL;
  lm_node *dp = keep(c->a, nb_matmul(g, keep(c->a, nb_transpose_last(v))));
  lm_node *delta = keep(c->a, nb_reduce(LM_RSUM, mul(c, dp, p), last));
  lm_node *ds = p ? mul(c, p, bin(c, LM_SUB, dp, expand(c, delta, p->shape))) : NULL;
  r[0] = mul_s(c, keep(c->a, nb_matmul(ds, k)), scale);
  r[1] = mul_s(c, keep(c->a, nb_matmul(keep(c->a, nb_transpose_last(ds)), q)), scale);
  r[2] = keep(c->a, nb_matmul(keep(c->a, nb_transpose_last(p)), g));
}

/* The fused backward (LM_ATTENTION_GRAD, runtime/attention_cpu.c): one node
 * computing dq, dk and dv of each batch index in three parts, and a view of
 * each (slices of constant bounds where Tq = Tk and D = Dv, as symbolic
 * sizes need). */
static void fused_attention_grads(ctx *c, lm_node *g, lm_node *r[3]) {
  const lm_node *n = c->n;
  const loom_shape *qs = &n->src[0]->shape;
  int nd = qs->ndim;
  int64_t tq = qs->dim[nd - 2], d = qs->dim[nd - 1], tk = n->src[1]->shape.dim[nd - 2];
  int64_t dv = n->src[2]->shape.dim[nd - 1];
  lm_node *src[6]; /* q, k, v, [mask], the output and its gradient */
  int ns = 0;
  for (int s = 0; s < n->nsrc; s++) src[ns++] = n->src[s];
  src[ns++] = (lm_node *)n;
  src[ns++] = g;
  loom_shape packed = *qs;
  packed.ndim = nd + 1;
  packed.dim[nd - 2] = 3, packed.dim[nd - 1] = tq > tk ? tq : tk, packed.dim[nd] = d > dv ? d : dv;
  lm_node *all = keep(c->a, lm_node_new(LM_ATTENTION_GRAD, ns, src, packed, LOOM_F32, n->device));
  if (!all) return;
  all->arg.attn = n->arg.attn;
  int64_t start[LOOM_MAX_DIMS] = {0}, step[LOOM_MAX_DIMS];
  for (int x = 0; x < nd + 1; x++) step[x] = 1;
  for (int s = 0; s < 3; s++) {
    loom_shape part = *qs, piece = packed;
    part.dim[nd - 2] = s == 0 ? tq : tk;
    part.dim[nd - 1] = s == 2 ? dv : d;
    piece.dim[nd - 2] = 1, piece.dim[nd - 1] = part.dim[nd - 2], piece.dim[nd] = part.dim[nd - 1];
    start[nd - 2] = s;
    r[s] = keep(c->a, nb_reshape(keep(c->a, nb_slice(all, piece, start, step)), part));
  }
}

bool lm_attention_grads(const lm_node *n, lm_node *g, lm_node *out[3]) {
  arena a = {.n = 0};
  ctx c = {&a, n};
  lm_node *r[3] = {NULL, NULL, NULL};
  for (int s = 0; s < 3; s++) out[s] = NULL;
  if (lm_grad_enabled())
    composed_attention_grads(&c, g, r);
  else
    fused_attention_grads(&c, g, r);
  for (int s = 0; s < 3 && !a.oom; s++)
    if (n->src[s]->requires_grad) {
      a.oom |= r[s] == NULL;
      if (r[s]) lm_node_retain(r[s]), out[s] = r[s];
    }
  bool ok = !a.oom;
  result(&a, NULL);
  for (int s = 0; s < 3 && !ok; s++) lm_node_release(out[s]), out[s] = NULL;
  return ok;
}

lm_node *lm_grad_rule(const lm_node *n, int which, lm_node *g, bool *oom) {
  arena a = {.n = 0};
  ctx c = {&a, n};
  lm_node *r = NULL;
  const lm_node *x = n->src[which];
  *oom = false;
  if (!x->requires_grad || !loom_dtype_is_float(x->dtype)) return NULL;
  if (lm_op_is_view(n->op))
    r = view_grad(&c, which, g);
  else if (lm_op_is_reduce(n->op))
    r = reduce_grad(&c, g);
  else if (n->op == LM_GATHER)
    r = which == 0 ? gather_grad(&c, g) : NULL;
  else if (n->op == LM_MATMUL)
    r = matmul_grad(&c, which, g);
  else if (n->op == LM_SCAN) /* each value reaches the sums after it: the scan the other way */
    r = keep(&a, nb_scan(g, n->arg.scan.axis, !n->arg.scan.reverse));
  else if (n->op == LM_WHERE)
    r = which == 0
            ? NULL
            : where(&c, n->src[0], which == 1 ? g : cst(&c, g, 0), which == 1 ? cst(&c, g, 0) : g);
  else if (lm_op_is_elementwise(n->op) && n->nsrc == 1)
    r = unary_grad(&c, g);
  else if (lm_op_is_elementwise(n->op) && n->nsrc == 2)
    r = binary_grad(&c, which, g);
  if (r == g && r) {
    lm_node_retain(g);
    result(&a, NULL);
    return g;
  }
  *oom = a.oom;
  return result(&a, r);
}
