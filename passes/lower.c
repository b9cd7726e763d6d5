/* Lowering: a fused group of nodes (one materialized root and everything it
 * computes inline) into the kernel description of ir/kernel.h. Views become
 * index arithmetic; nothing of the graph survives but loads from slots. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/plan_internal.h"

#define MAX_SLOTS LM_KERNEL_MAX_SLOTS

typedef struct builder {
  lk_inst *inst;
  int n, cap;
  int nbody_start; /* CSE never reaches back before this (epilogue stays apart) */
  int slot_pos[MAX_SLOTS];
  bool slot_key[MAX_SLOTS];
  int nslots;
  const lm_planner *pl;
  const lm_graph *g;
  const lm_node *root;
  const lm_node *acc_node; /* the reduction whose value is ACC in the epilogue */
  int acc_inst;
  /* row statistics: reductions marked row_root == root, in the order lowered */
  bool rows;
  const lm_node *stat_node[LK_MAX_STATS];
  lk_stat stat[LK_MAX_STATS];
  int nstats;
  /* float constants bound at run time (CPU kernels), and their slot */
  double params[MAX_SLOTS];
  int nparams, params_slot;
  const char *fail;
} builder;

/* The failure that sends the plan back to separate kernels for a row group. */
static const char MISALIGNED[] = "a row statistic is read off its row";

static int emit(builder *b, lk_inst in) {
  if (b->fail) return 0;
  /* Value numbering: an identical instruction is reused. Kernels are small,
   * so a backwards scan is cheap enough. */
  for (int i = b->n - 1; i >= b->nbody_start; i--) {
    if (lk_inst_same(&b->inst[i], &in)) return i;
  }
  if (b->n == b->cap) {
    int ncap = b->cap ? b->cap * 2 : 64;
    lk_inst *grown = realloc(b->inst, sizeof(lk_inst) * (size_t)ncap);
    if (!grown) {
      b->fail = "out of memory";
      return 0;
    }
    b->inst = grown, b->cap = ncap;
  }
  b->inst[b->n] = in;
  return b->n++;
}

static lk_inst inst(lk_op op, loom_dtype dt, int a, int bb, int c) {
  return (lk_inst){.op = op, .dtype = dt, .a = a, .b = bb, .c = c, .slot = -1};
}

static int op1(builder *b, lk_op op, loom_dtype dt, int a) {
  return emit(b, inst(op, dt, a, -1, -1));
}
/* Whether i is (x / k) * k and j is x % k (the same x and k, instructions
 * of b): their sum is x. */
static bool split_and_rest(const builder *b, int i, int j, int *x) {
  if (b->fail || i < 0 || j < 0) return false;
  const lk_inst *mul = &b->inst[i], *rest = &b->inst[j];
  if (mul->op != LK_MUL || rest->op != LK_IMOD) return false;
  const lk_inst *quot = &b->inst[mul->a];
  if (quot->op != LK_IDIV || quot->b != mul->b || rest->b != mul->b || quot->a != rest->a)
    return false;
  *x = rest->a;
  return true;
}

static int op2(builder *b, lk_op op, loom_dtype dt, int a, int c) {
  /* (x / k) * k + x % k is x: a reshape undone by another (a [b*t, V] cast
   * viewed as [b, t, V], and back) keeps its loads affine, so backends see
   * their strides */
  int x;
  if (op == LK_ADD && dt == LOOM_I64 &&
      (split_and_rest(b, a, c, &x) || split_and_rest(b, c, a, &x)))
    return x;
  return emit(b, inst(op, dt, a, c, -1));
}
static int op3(builder *b, lk_op op, loom_dtype dt, int a, int c, int d) {
  return emit(b, inst(op, dt, a, c, d));
}

/* Float constants a kernel keeps in its code: small integers (indices,
 * counts, the 1 of 1 + e^x), halves, infinities and NaN (identities, masks).
 * Any other (a learning rate, an epsilon, a scale) is a parameter bound at run
 * time on the CPU, so that a new value reuses the kernel: a loop whose
 * constant changes every step compiled a kernel every step. */
static bool folded_constant(double v) {
  return !isfinite(v) || (v == floor(v) && fabs(v) <= 65536) || fabs(v) == 0.5;
}

static int param(builder *b, loom_dtype dt, double v) {
  int at = 0;
  while (at < b->nparams && memcmp(&b->params[at], &v, sizeof v) != 0) at++;
  if (at == b->nparams) {
    if (b->nparams == MAX_SLOTS) {
      b->fail = "too many constants for one kernel";
      return 0;
    }
    b->params[b->nparams++] = v;
  }
  if (!b->params_slot) {
    if (b->nslots == MAX_SLOTS) {
      b->fail = "too many inputs for one kernel";
      return 0;
    }
    b->slot_pos[b->nslots] = LM_PARAMS_SLOT;
    b->slot_key[b->nslots] = false;
    b->params_slot = b->nslots++;
  }
  lk_inst in = inst(LK_PARAM, dt, -1, -1, -1);
  in.slot = b->params_slot;
  in.imm_i = at;
  return emit(b, in);
}

static int cnst(builder *b, loom_dtype dt, double v) {
  if (loom_dtype_is_float(dt) && b->root->device.type == LOOM_DEVICE_CPU && !folded_constant(v))
    return param(b, dt, v);
  lk_inst in = inst(LK_CONST, dt, -1, -1, -1);
  if (loom_dtype_is_float(dt))
    in.imm_f = v;
  else /* loom_full(i32, 1e30), a pad value: as a cast gives it */
    in.imm_i = lm_dtype_saturate(v, dt);
  return emit(b, in);
}

static int iconst(builder *b, int64_t v) {
  lk_inst in = inst(LK_CONST, LOOM_I64, -1, -1, -1);
  in.imm_i = v;
  return emit(b, in);
}

static int dim(builder *b, int d) {
  lk_inst in = inst(LK_DIM, LOOM_I64, -1, -1, -1);
  in.imm_i = d;
  return emit(b, in);
}

static int slot_for(builder *b, const lm_node *n, bool key) {
  int pos = lm_graph_pos(b->g, n);
  for (int s = 1; s < b->nslots; s++)
    if (b->slot_pos[s] == pos && b->slot_key[s] == key) return s;
  if (b->nslots == MAX_SLOTS) {
    b->fail = "too many inputs for one kernel";
    return 0;
  }
  b->slot_pos[b->nslots] = pos;
  b->slot_key[b->nslots] = key;
  return b->nslots++;
}

/* offset + sum of idx[d] * strides[d] over shape s (size-1 and stride-0 dims
 * contribute nothing). */
static int strided(builder *b, const loom_shape *s, const int64_t *strides, int64_t offset,
                   const int *idx) {
  int acc = offset ? iconst(b, offset) : -1;
  for (int d = 0; d < s->ndim; d++) {
    if (s->dim[d] == 1 || strides[d] == 0) continue;
    int term = strides[d] == 1 ? idx[d] : op2(b, LK_MUL, LOOM_I64, idx[d], iconst(b, strides[d]));
    acc = acc < 0 ? term : op2(b, LK_ADD, LOOM_I64, acc, term);
  }
  return acc < 0 ? iconst(b, 0) : acc;
}

/* Row-major linear index of idx in shape s. */
static int linear(builder *b, const loom_shape *s, const int *idx) {
  int64_t strides[LOOM_MAX_DIMS];
  lm_shape_strides(s, strides);
  return strided(b, s, strides, 0, idx);
}

static int value(builder *b, const lm_node *n, const int *idx);

/* Whether n is a row statistic this (row) kernel computes. */
static bool own_stat(const builder *b, const lm_node *n) {
  return b->rows && lm_op_is_reduce(n->op) && lm_plan_marks(b->pl, n)->row_root == b->root;
}

/* Whether value() reads n from its buffer: not the accumulator or a row
 * statistic this kernel computes, nor the root it is computing. */
static bool reads_buffer(const builder *b, const lm_node *n) {
  if (n == b->acc_node || own_stat(b, n)) return false;
  return n != b->root && lm_has_memory(b->pl, n);
}

/* n's buffer at element `at` (an instruction). */
static int load_at(builder *b, const lm_node *n, int at) {
  lk_inst in = inst(LK_LOAD, n->dtype, at, -1, -1);
  in.slot = slot_for(b, n, false);
  return emit(b, in);
}

static int load(builder *b, const lm_node *n, const int *idx) {
  return load_at(b, n, linear(b, &n->shape, idx));
}

/* ------------------------------------------------------------ views */

/* A reshape from `from` to `to` pairs groups of non-1 dims whose products
 * agree: group g is to's dims t[tb[g]..tb[g+1]) and from's s[sb[g]..sb[g+1]). */
typedef struct reshape_groups {
  int t[LOOM_MAX_DIMS], s[LOOM_MAX_DIMS];
  int tb[LOOM_MAX_DIMS + 1], sb[LOOM_MAX_DIMS + 1];
  int n;
} reshape_groups;

static void match_groups(const loom_shape *to, const loom_shape *from, reshape_groups *g) {
  int nt = 0, ns = 0, i = 0, j = 0;
  for (int d = 0; d < to->ndim; d++)
    if (to->dim[d] != 1) g->t[nt++] = d;
  for (int d = 0; d < from->ndim; d++)
    if (from->dim[d] != 1) g->s[ns++] = d;
  g->n = 0;
  g->tb[0] = g->sb[0] = 0;
  while (i < nt && j < ns) {
    int64_t pt = to->dim[g->t[i++]], ps = from->dim[g->s[j++]];
    while (pt != ps) {
      if (pt < ps && i < nt)
        pt *= to->dim[g->t[i++]];
      else if (j < ns)
        ps *= from->dim[g->s[j++]];
      else
        break;
    }
    g->n++;
    g->tb[g->n] = i, g->sb[g->n] = j;
  }
}

/* Reshape: within a group map one to one, or linearize and unravel. */
static void reshape_index(builder *b, const loom_shape *to, const loom_shape *from, const int *idx,
                          int *out) {
  reshape_groups grp;
  match_groups(to, from, &grp);
  const int *t = grp.t, *s = grp.s;
  for (int d = 0; d < from->ndim; d++) out[d] = iconst(b, 0);
  for (int gi = 0; gi < grp.n; gi++) {
    int i0 = grp.tb[gi], i = grp.tb[gi + 1], j0 = grp.sb[gi], j = grp.sb[gi + 1];
    if (i - i0 == 1 && j - j0 == 1) {
      out[s[j0]] = idx[t[i0]];
      continue;
    }
    int lin = -1;
    for (int k = i0; k < i; k++) {
      int d = t[k];
      lin = lin < 0 ? idx[d]
                    : op2(b, LK_ADD, LOOM_I64, op2(b, LK_MUL, LOOM_I64, lin, iconst(b, to->dim[d])),
                          idx[d]);
    }
    int64_t stride = 1;
    for (int k = j - 1; k >= j0; k--) {
      int d = s[k];
      int q = stride == 1 ? lin : op2(b, LK_IDIV, LOOM_I64, lin, iconst(b, stride));
      out[d] = k == j0 ? q : op2(b, LK_IMOD, LOOM_I64, q, iconst(b, from->dim[d]));
      stride *= from->dim[d];
    }
  }
}

static int pad_value(builder *b, const lm_node *n, const int *idx) {
  const lm_node *src = n->src[0];
  int sidx[LOOM_MAX_DIMS] = {0}, valid = -1;
  for (int d = 0; d < n->shape.ndim; d++) {
    int64_t lo = n->arg.pad.lo[d];
    if (lo == 0 && n->shape.dim[d] == src->shape.dim[d]) {
      sidx[d] = idx[d];
      continue;
    }
    int s = lo ? op2(b, LK_SUB, LOOM_I64, idx[d], iconst(b, lo)) : idx[d];
    int ge0 = op1(b, LK_NOT, LOOM_BOOL, op2(b, LK_CMPLT, LOOM_BOOL, s, iconst(b, 0)));
    int lt = op2(b, LK_CMPLT, LOOM_BOOL, s, iconst(b, src->shape.dim[d]));
    int ok = op2(b, LK_AND, LOOM_BOOL, ge0, lt);
    valid = valid < 0 ? ok : op2(b, LK_AND, LOOM_BOOL, valid, ok);
    sidx[d] = emit(b, inst(LK_WHERE, LOOM_I64, ok, s, iconst(b, 0)));
  }
  int v = value(b, src, sidx);
  if (valid < 0) return v;
  return emit(b, inst(LK_WHERE, n->dtype, valid, v, cnst(b, n->dtype, n->arg.pad.value)));
}

static int cat_value(builder *b, const lm_node *n, const int *idx) {
  int ax = n->arg.axis, sidx[LOOM_MAX_DIMS] = {0};
  int64_t offsets[LM_CAT_MAX_SOURCES + 1];
  int k = n->nsrc;
  int result = -1;
  int64_t off = 0;
  if (k > LM_CAT_MAX_SOURCES) { /* the frontend builds trees of smaller cats */
    b->fail = "a cat of more sources than LM_CAT_MAX_SOURCES";
    return 0;
  }
  for (int i = 0; i < k; i++) offsets[i] = off, off += n->src[i]->shape.dim[ax];
  offsets[k] = off;
  for (int i = k - 1; i >= 0; i--) {
    const lm_node *s = n->src[i];
    memcpy(sidx, idx, sizeof(int) * (size_t)n->shape.ndim);
    int local = offsets[i] ? op2(b, LK_SUB, LOOM_I64, idx[ax], iconst(b, offsets[i])) : idx[ax];
    int clamped = op2(b, LK_MIN, LOOM_I64, op2(b, LK_MAX, LOOM_I64, local, iconst(b, 0)),
                      iconst(b, s->shape.dim[ax] - 1));
    sidx[ax] = clamped;
    int v = value(b, s, sidx);
    if (result < 0) {
      result = v;
      continue;
    }
    int in_this = op2(b, LK_CMPLT, LOOM_BOOL, idx[ax], iconst(b, offsets[i + 1]));
    result = emit(b, inst(LK_WHERE, n->dtype, in_this, v, result));
  }
  return result;
}

/* Whether reshaping `from` to `to` unravels: some group of `to`'s dims maps
 * to several of `from`'s, whose indices then take a division each. */
static bool reshape_unravels(const loom_shape *to, const loom_shape *from) {
  reshape_groups grp;
  match_groups(to, from, &grp);
  for (int gi = 0; gi < grp.n; gi++)
    if (grp.sb[gi + 1] - grp.sb[gi] > 1) return true;
  return false;
}

/* Whether the views from n down to its first stored node unravel an index. */
static bool chain_unravels(const lm_planner *pl, const lm_node *n) {
  for (; lm_op_is_view(n->op) && !lm_has_memory(pl, n); n = n->src[0])
    if (n->op == LM_RESHAPE && reshape_unravels(&n->shape, &n->src[0]->shape)) return true;
  return false;
}

/* A chain of views over memory that composes into strides is one load at an
 * affine offset. Lowered view by view, a reshape that merges dims and then
 * splits them again (a stored [N, C, H, W] summed over its flattened
 * [N, C*H*W] rows) divides the index and multiplies it back, which LLVM does
 * not undo, and the loop does not vectorize. Returns -1 if not so. */
static int affine_load(builder *b, const lm_node *n, const int *idx) {
  const lm_node *base;
  lm_view v;
  if (!chain_unravels(b->pl, n) || !lm_view_affine(n, lm_planner_stores, b->pl, &base, &v) ||
      !reads_buffer(b, base))
    return -1;
  return load_at(b, base, strided(b, &n->shape, v.strides, v.offset, idx));
}

static int view_value(builder *b, const lm_node *n, const int *idx) {
  const lm_node *src = n->src[0];
  int sidx[LOOM_MAX_DIMS] = {0};
  int direct = affine_load(b, n, idx);
  if (direct >= 0) return direct;
  switch (n->op) {
  case LM_RESHAPE: reshape_index(b, &n->shape, &src->shape, idx, sidx); break;
  case LM_PERMUTE:
    for (int d = 0; d < n->shape.ndim; d++) sidx[n->arg.perm[d]] = idx[d];
    break;
  case LM_EXPAND:
    for (int d = 0; d < n->shape.ndim; d++)
      sidx[d] = src->shape.dim[d] == n->shape.dim[d] ? idx[d] : iconst(b, 0);
    break;
  case LM_SLICE:
    for (int d = 0; d < n->shape.ndim; d++) {
      int64_t start = n->arg.slice.start[d], step = n->arg.slice.step[d];
      int v = step == 1 ? idx[d] : op2(b, LK_MUL, LOOM_I64, idx[d], iconst(b, step));
      sidx[d] = start ? op2(b, LK_ADD, LOOM_I64, v, iconst(b, start)) : v;
    }
    break;
  case LM_WINDOW: {
    int nd = src->shape.ndim;
    for (int d = 0; d < nd - 2; d++) sidx[d] = idx[d];
    for (int i = 0; i < 2; i++) {
      int at = op2(b, LK_MUL, LOOM_I64, idx[nd - 2 + i], iconst(b, n->arg.window.stride[i]));
      int off = op2(b, LK_MUL, LOOM_I64, idx[nd + i], iconst(b, n->arg.window.dilation[i]));
      sidx[nd - 2 + i] = op2(b, LK_ADD, LOOM_I64, at, off);
    }
    break;
  }
  case LM_PAD: return pad_value(b, n, idx);
  case LM_CAT: return cat_value(b, n, idx);
  default: b->fail = "not a view"; return 0;
  }
  return value(b, src, sidx);
}

/* ------------------------------------------------------------ leaves */

/* BF16 and F16 draw in F32 and round the result; a uniform draw is floored to
 * the dtype's grid first (k 2^-p, p its significand bits), since rounding
 * could make 1 of a draw below it. */
static int rand_value(builder *b, const lm_node *n, const int *idx) {
  int ctr = linear(b, &n->shape, idx);
  int key = slot_for(b, n, true);
  bool half = lm_dtype_is_half(n->dtype);
  loom_dtype dt = half ? LOOM_F32 : n->dtype;
  loom_dtype ut = n->arg.rand.kind == LM_RAND_BERNOULLI ? LOOM_F32 : dt;
  lk_inst u = inst(LK_RAND, ut, ctr, -1, -1);
  u.slot = key;
  int u1 = emit(b, u);
  if (n->arg.rand.kind == LM_RAND_BERNOULLI) {
    int wide = op1(b, LK_CAST, LOOM_F64, u1);
    return op2(b, LK_CMPLT, LOOM_BOOL, wide, cnst(b, LOOM_F64, n->arg.rand.p));
  }
  int v;
  if (n->arg.rand.kind == LM_RAND_UNIFORM) {
    if (!half) return u1;
    double grid = ldexp(1.0, lm_dtype_info_of(n->dtype)->mantissa);
    v = op2(b, LK_DIV, dt, op1(b, LK_FLOOR, dt, op2(b, LK_MUL, dt, u1, cnst(b, dt, grid))),
            cnst(b, dt, grid));
  } else { /* Box-Muller on two streams: z = sqrt(-2 log(1 - u1)) cos(2 pi u2) */
    u.imm_i = 1;
    int u2 = emit(b, u);
    int one_minus = op2(b, LK_SUB, dt, cnst(b, dt, 1.0), u1);
    int radius =
        op1(b, LK_SQRT, dt, op2(b, LK_MUL, dt, cnst(b, dt, -2.0), op1(b, LK_LOG, dt, one_minus)));
    int angle = op2(b, LK_MUL, dt, cnst(b, dt, 2.0 * M_PI), u2);
    v = op2(b, LK_MUL, dt, radius, op1(b, LK_COS, dt, angle));
  }
  return half ? op1(b, LK_CAST, n->dtype, v) : v;
}

/* start + i * step: in I64 for an integer dtype whose every value, with start
 * and step, is an integer the dtype holds (a one-hot's class index then
 * compares without a round trip through F64), else in F64 and cast. */
static int iota_value(builder *b, const lm_node *n, const int *idx) {
  double start = n->arg.iota.start, step = n->arg.iota.step;
  double last = start + step * (double)(lm_shape_numel(&n->shape) - 1);
  if (lm_dtype_is_int(n->dtype) && lm_dtype_holds(n->dtype, start) &&
      lm_dtype_holds(n->dtype, last) && step == floor(step) && fabs(step) < 0x1p53) {
    int lin = linear(b, &n->shape, idx);
    int v = step == 1 ? lin : op2(b, LK_MUL, LOOM_I64, lin, cnst(b, LOOM_I64, step));
    if (start != 0) v = op2(b, LK_ADD, LOOM_I64, v, cnst(b, LOOM_I64, start));
    return n->dtype == LOOM_I64 ? v : op1(b, LK_CAST, n->dtype, v);
  }
  int i = op1(b, LK_CAST, LOOM_F64, linear(b, &n->shape, idx));
  int v = op2(b, LK_ADD, LOOM_F64, op2(b, LK_MUL, LOOM_F64, i, cnst(b, LOOM_F64, n->arg.iota.step)),
              cnst(b, LOOM_F64, n->arg.iota.start));
  return n->dtype == LOOM_F64 ? v : op1(b, LK_CAST, n->dtype, v);
}

/* A row of src[0] picked by the value of src[1] (clamped into range: a kernel
 * cannot raise an error, and an unchecked index would read out of bounds). */
static int gather_value(builder *b, const lm_node *n, const int *idx) {
  const lm_node *table = n->src[0], *indices = n->src[1];
  int nidx = indices->shape.ndim, tidx[LOOM_MAX_DIMS];
  int row = value(b, indices, idx);
  if (indices->dtype != LOOM_I64) row = op1(b, LK_CAST, LOOM_I64, row);
  row = op2(b, LK_MIN, LOOM_I64, op2(b, LK_MAX, LOOM_I64, row, iconst(b, 0)),
            iconst(b, table->shape.dim[0] - 1));
  tidx[0] = row;
  for (int d = 1; d < table->shape.ndim; d++) tidx[d] = idx[nidx + d - 1];
  return value(b, table, tidx);
}

/* ------------------------------------------------------------ elementwise */

static int unary_value(builder *b, const lm_node *n, loom_dtype dt, int x) {
  switch (n->op) {
  case LM_NEG: return op1(b, LK_NEG, dt, x);
  case LM_ABS: return dt == LOOM_BOOL ? x : op1(b, LK_ABS, dt, x);
  case LM_EXP: return op1(b, LK_EXP, dt, x);
  case LM_LOG: return op1(b, LK_LOG, dt, x);
  case LM_SQRT: return op1(b, LK_SQRT, dt, x);
  case LM_SIN: return op1(b, LK_SIN, dt, x);
  case LM_COS: return op1(b, LK_COS, dt, x);
  case LM_TANH: return op1(b, LK_TANH, dt, x);
  case LM_RSQRT: return op2(b, LK_DIV, dt, cnst(b, dt, 1), op1(b, LK_SQRT, dt, x));
  case LM_RECIPROCAL: return op2(b, LK_DIV, dt, cnst(b, dt, 1), x);
  case LM_SQUARE: return op2(b, LK_MUL, dt, x, x);
  case LM_RELU: return dt == LOOM_BOOL ? x : op2(b, LK_MAX, dt, x, cnst(b, dt, 0));
  case LM_NOT: return op1(b, LK_NOT, LOOM_BOOL, x);
  case LM_CAST: return op1(b, LK_CAST, dt, x);
  case LM_BITCAST: return op1(b, LK_BITCAST, dt, x);
  case LM_ERF: return op1(b, LK_ERF, dt, x);
  case LM_LOG1P: { /* log(u) * x / (u - 1), u = 1 + x (Goldberg): exact where u rounds */
    int u = op2(b, LK_ADD, dt, cnst(b, dt, 1), x), d = op2(b, LK_SUB, dt, u, cnst(b, dt, 1));
    int as_is = op2(b, LK_OR, LOOM_BOOL, op2(b, LK_CMPEQ, LOOM_BOOL, d, cnst(b, dt, 0)),
                    op2(b, LK_CMPEQ, LOOM_BOOL, u, cnst(b, dt, INFINITY)));
    int r = op2(b, LK_MUL, dt, op1(b, LK_LOG, dt, u), op2(b, LK_DIV, dt, x, d));
    return op3(b, LK_WHERE, dt, as_is, x, r);
  }
  case LM_FLOOR: return op1(b, LK_FLOOR, dt, x);
  case LM_CEIL: /* -floor(-x): ceil(-0.3) is -0, as torch */
    return op1(b, LK_NEG, dt, op1(b, LK_FLOOR, dt, op1(b, LK_NEG, dt, x)));
  case LM_ROUND: { /* floor, up past a half or at one to an even result; x - f is exact */
    int f = op1(b, LK_FLOOR, dt, x), frac = op2(b, LK_SUB, dt, x, f);
    int half_f = op2(b, LK_MUL, dt, f, cnst(b, dt, 0.5));
    int odd = op2(b, LK_CMPNE, LOOM_BOOL, op1(b, LK_FLOOR, dt, half_f), half_f);
    int at_half =
        op2(b, LK_AND, LOOM_BOOL, op2(b, LK_CMPEQ, LOOM_BOOL, frac, cnst(b, dt, 0.5)), odd);
    int up = op2(b, LK_OR, LOOM_BOOL, op2(b, LK_CMPLT, LOOM_BOOL, cnst(b, dt, 0.5), frac), at_half);
    int r = op2(b, LK_ADD, dt, f, op3(b, LK_WHERE, dt, up, cnst(b, dt, 1), cnst(b, dt, 0)));
    /* a zero result takes x's sign (round(-0.3) is -0, as torch) */
    int zero = op2(b, LK_CMPEQ, LOOM_BOOL, r, cnst(b, dt, 0));
    return op3(b, LK_WHERE, dt, zero, op2(b, LK_MUL, dt, x, cnst(b, dt, 0)), r);
  }
  case LM_EXPM1: { /* (u - 1) * (x / log(u)), u = exp(x) (Kahan): x / log(u) is near 1, so
                      the product stays finite up to the float's max, where (u - 1) * x
                      overflowed from x = 84.2 (F32) or 703 (F64) on */
    int u = op1(b, LK_EXP, dt, x), um1 = op2(b, LK_SUB, dt, u, cnst(b, dt, 1));
    int r = op2(b, LK_MUL, dt, um1, op2(b, LK_DIV, dt, x, op1(b, LK_LOG, dt, u)));
    r = op3(b, LK_WHERE, dt, op2(b, LK_CMPEQ, LOOM_BOOL, u, cnst(b, dt, INFINITY)), u, r);
    r = op3(b, LK_WHERE, dt, op2(b, LK_CMPEQ, LOOM_BOOL, um1, cnst(b, dt, -1)), um1, r);
    return op3(b, LK_WHERE, dt, op2(b, LK_CMPEQ, LOOM_BOOL, u, cnst(b, dt, 1)), x, r);
  }
  case LM_CLAMP: { /* max(x, lo) keeps a NaN x and takes a NaN lo; so does min */
    int r = x;
    if (n->arg.clamp.lo != -INFINITY) r = op2(b, LK_MAX, dt, r, cnst(b, dt, n->arg.clamp.lo));
    if (n->arg.clamp.hi != INFINITY) r = op2(b, LK_MIN, dt, r, cnst(b, dt, n->arg.clamp.hi));
    return r;
  }
  case LM_SIGMOID:
  case LM_SILU: {
    int e = op1(b, LK_EXP, dt, op1(b, LK_NEG, dt, x));
    int den = op2(b, LK_ADD, dt, cnst(b, dt, 1), e);
    return op2(b, LK_DIV, dt, n->op == LM_SILU ? x : cnst(b, dt, 1), den);
  }
  case LM_GELU: {
    int erf = op1(b, LK_ERF, dt, op2(b, LK_MUL, dt, x, cnst(b, dt, M_SQRT1_2)));
    int half_x = op2(b, LK_MUL, dt, x, cnst(b, dt, 0.5));
    return op2(b, LK_MUL, dt, half_x, op2(b, LK_ADD, dt, cnst(b, dt, 1), erf));
  }
  default: b->fail = "unknown unary op"; return 0;
  }
}

/* x^e of an integer dtype for a known e >= 0 (a pow_s): its squarings and
 * products, which wrap as the dtype's multiplication does (x^3 is x * x * x). */
static int int_pow_known(builder *b, loom_dtype dt, int x, uint64_t e) {
  int r = -1, square = x;
  for (; e; e >>= 1) {
    if (e & 1) r = r < 0 ? square : op2(b, LK_MUL, dt, r, square);
    if (e > 1) square = op2(b, LK_MUL, dt, square, square);
  }
  return r < 0 ? cnst(b, dt, 1) : r;
}

static int binary_value(builder *b, const lm_node *n, loom_dtype dt, int x, int y) {
  static const lk_op map[LM_NUM_OPS] = {
      [LM_ADD] = LK_ADD,  [LM_SUB] = LK_SUB,  [LM_MUL] = LK_MUL,  [LM_DIV] = LK_DIV,
      [LM_POW] = LK_POW,  [LM_MAX] = LK_MAX,  [LM_MIN] = LK_MIN,  [LM_LT] = LK_CMPLT,
      [LM_LE] = LK_CMPLE, [LM_EQ] = LK_CMPEQ, [LM_NE] = LK_CMPNE, [LM_AND] = LK_AND,
      [LM_OR] = LK_OR,
  };
  if (n->op == LM_POW && lm_dtype_is_int(dt) && !b->fail && b->inst[y].op == LK_CONST &&
      b->inst[y].imm_i >= 0)
    return int_pow_known(b, dt, x, (uint64_t)b->inst[y].imm_i);
  return op2(b, map[n->op], dt, x, y);
}

/* An op of BF16 or F16 values runs in F32 and rounds once, as torch's kernels
 * for them do (GELU's erf and products are not rounded one by one). */
static int half_value(builder *b, const lm_node *n, const int *idx) {
  int x[2];
  for (int i = 0; i < n->nsrc; i++) {
    x[i] = value(b, n->src[i], idx);
    if (n->src[i]->dtype != LOOM_F32) x[i] = op1(b, LK_CAST, LOOM_F32, x[i]);
  }
  int r =
      n->nsrc == 1 ? unary_value(b, n, LOOM_F32, x[0]) : binary_value(b, n, LOOM_F32, x[0], x[1]);
  return op1(b, LK_CAST, n->dtype, r);
}

/* The value of node n at multi-index idx (instruction ids of I64 indices in
 * n's shape). */
static int stat_value(builder *b, const lm_node *red, const int *idx);

static int value(builder *b, const lm_node *n, const int *idx) {
  if (b->fail) return 0;
  if (n == b->acc_node) return b->acc_inst;
  if (own_stat(b, n)) return stat_value(b, n, idx);
  if (reads_buffer(b, n)) return load(b, n, idx);
  if (lm_op_is_view(n->op)) return view_value(b, n, idx);
  switch (n->op) {
  case LM_CONST: return cnst(b, n->dtype, n->arg.f);
  case LM_IOTA: return iota_value(b, n, idx);
  case LM_RAND: return rand_value(b, n, idx);
  case LM_GATHER: return gather_value(b, n, idx);
  case LM_WHERE: {
    int c = value(b, n->src[0], idx), x = value(b, n->src[1], idx), y = value(b, n->src[2], idx);
    return emit(b, inst(LK_WHERE, n->dtype, c, x, y));
  }
  default: break;
  }
  bool elementwise = lm_op_is_elementwise(n->op) && (n->nsrc == 1 || n->nsrc == 2);
  bool converts = n->op == LM_CAST || n->op == LM_BITCAST; /* from the source's own dtype */
  if (elementwise && lm_dtype_is_half(n->dtype) && !converts) return half_value(b, n, idx);
  if (lm_op_is_elementwise(n->op) && n->nsrc == 1)
    return unary_value(b, n, n->dtype, value(b, n->src[0], idx));
  if (lm_op_is_elementwise(n->op) && n->nsrc == 2) {
    int x = value(b, n->src[0], idx);
    return binary_value(b, n, n->dtype, x, value(b, n->src[1], idx));
  }
  b->fail = "a reduction or matmul was not materialized";
  return 0;
}

/* ------------------------------------------------------------ row statistics */

static const lk_reduce REDUCE_OF[LM_NUM_OPS] = {
    [LM_RSUM] = LK_RED_SUM, [LM_RMAX] = LK_RED_MAX,      [LM_RMIN] = LK_RED_MIN,
    [LM_RLSE] = LK_RED_LSE, [LM_ARGMAX] = LK_RED_ARGMAX, [LM_ARGMIN] = LK_RED_ARGMIN};

/* Whether idx (into red's shape: the root's with the last dim 1) names the
 * kernel's current row: the root's row dims, in order. */
static bool on_own_row(builder *b, const lm_node *red, const int *idx) {
  for (int d = 0; d + 1 < red->shape.ndim; d++) {
    const lk_inst *in = &b->inst[idx[d]];
    if (red->shape.dim[d] != 1 && (in->op != LK_DIM || in->imm_i != d)) return false;
  }
  return true;
}

/* A row statistic: its index the first time, lowering its value over the
 * root's domain (the same dims; the last is the statistic's loop). */
static int stat_value(builder *b, const lm_node *red, const int *idx) {
  if (!on_own_row(b, red, idx)) {
    b->fail = MISALIGNED;
    return 0;
  }
  int s = 0;
  while (s < b->nstats && b->stat_node[s] != red) s++;
  if (s == b->nstats) {
    int full[LOOM_MAX_DIMS];
    for (int d = 0; d < red->shape.ndim; d++) full[d] = dim(b, d);
    int v = value(b, red->src[0], full); /* may lower the statistics it uses first */
    if (b->fail) return 0;
    if (b->nstats == LK_MAX_STATS) {
      b->fail = "too many row statistics for one kernel";
      return 0;
    }
    s = b->nstats++;
    b->stat_node[s] = red;
    b->stat[s] = (lk_stat){.reduce = REDUCE_OF[red->op], .acc_dtype = red->dtype, .value = v};
  }
  lk_inst in = inst(LK_STAT, red->dtype, -1, -1, -1);
  in.imm_i = s;
  return emit(b, in);
}

/* ------------------------------------------------------------ roots */

/* The node whose shape a map iterates: the root, or below a stored reshape
 * that would unravel its index (an im2col's [N*OH*OW, C*KH*KW] of a permuted
 * window) the reshaped value, whose dims need no division. Row-major order is
 * the same, so the output is too. */
static const lm_node *domain_node(const builder *b, const lm_node *root) {
  const lm_node *n = root;
  while (n->op == LM_RESHAPE && !b->rows && (n == root || !lm_materialized(b->pl, n)) &&
         !lm_has_memory(b->pl, n->src[0]) && n->src[0]->shape.ndim > 0 &&
         reshape_unravels(&n->shape, &n->src[0]->shape))
    n = n->src[0];
  return n;
}

static void lower_elementwise(builder *b, const lm_node *root, lk_kernel *k) {
  int idx[LOOM_MAX_DIMS] = {0};
  const lm_node *top = domain_node(b, root);
  k->ndim = top->shape.ndim ? top->shape.ndim : 1;
  k->dom[0] = 1;
  for (int d = 0; d < top->shape.ndim; d++) {
    k->dom[d] = top->shape.dim[d];
    idx[d] = dim(b, d);
  }
  k->nouter = k->ndim;
  k->reduce = LK_RED_NONE;
  k->acc_dtype = k->out_dtype = root->dtype;
  k->value = k->result = value(b, top, idx);
  k->nbody = b->n;
}

/* The reduction `red` over its domain (non-reduced axes first, then the
 * reduced ones); returns the epilogue's ACC instruction. */
static int lower_reduction(builder *b, const lm_node *red, lk_kernel *k) {
  const lm_node *src = red->src[0];
  int idx[LOOM_MAX_DIMS] = {0}, nd = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int d = 0; d < src->shape.ndim; d++) {
      bool reduced = red->arg.axes & (1u << d);
      if (reduced != (pass == 1)) continue;
      k->dom[nd] = src->shape.dim[d];
      idx[d] = dim(b, nd);
      if (pass == 0) k->nouter = nd + 1;
      nd++;
    }
  k->ndim = nd;
  k->reduce = REDUCE_OF[red->op];
  k->acc_dtype = red->dtype;
  k->value = value(b, src, idx);
  k->nbody = b->n;
  b->nbody_start = b->n;
  return emit(b, inst(LK_ACC, k->acc_dtype, -1, -1, -1));
}

/* A reduction with its consumer as epilogue: the consumer's index follows the
 * reduction's output order (the plan only fuses through reshapes). */
static void lower_reduce(builder *b, const lm_node *root, lk_kernel *k) {
  const lm_plan_node *marks = lm_plan_marks(b->pl, root);
  const lm_node *red = marks->split_reduce   ? marks->split_reduce
                       : marks->fused_reduce ? marks->fused_reduce
                                             : root;
  int acc = lower_reduction(b, red, k);
  k->out_dtype = root->dtype;
  if (red == root) {
    k->result = acc;
    return;
  }
  loom_shape outer = {0, {0}};
  int idx_outer[LOOM_MAX_DIMS], idx[LOOM_MAX_DIMS];
  for (int d = 0; d < red->shape.ndim; d++)
    if (!(red->arg.axes & (1u << d))) {
      idx_outer[outer.ndim] = dim(b, outer.ndim);
      outer.dim[outer.ndim++] = red->shape.dim[d];
    }
  reshape_index(b, &outer, &root->shape, idx_outer, idx);
  b->acc_node = marks->fused_reduce; /* what the epilogue reads, split or not */
  b->acc_inst = acc;
  k->result = value(b, root, idx);
}

static loom_status lower(const lm_planner *pl, lm_node *root, bool rows, bool *misaligned,
                         lm_step *step, char *err, size_t errlen) {
  builder b = {.pl = pl, .g = pl->g, .root = root, .nslots = 1, .rows = rows};
  b.slot_pos[0] = root->pos;
  lk_kernel *k = &step->kernel;
  memset(k, 0, sizeof *k);
  k->nouter = 0;
  if (lm_op_is_reduce(root->op) || lm_plan_marks(pl, root)->fused_reduce)
    lower_reduce(&b, root, k);
  else
    lower_elementwise(&b, root, k);
  step->arg_pos = malloc(sizeof(int) * (size_t)b.nslots);
  step->arg_key = malloc(sizeof(bool) * (size_t)b.nslots);
  if (!step->arg_pos || !step->arg_key) b.fail = "out of memory";
  if (b.fail) {
    free(b.inst);
    free(step->arg_pos);
    free(step->arg_key);
    step->arg_pos = NULL;
    step->arg_key = NULL;
    if (misaligned) *misaligned = b.fail == MISALIGNED;
    snprintf(err, errlen, "lowering %s: %s", lm_op_name(root->op), b.fail);
    return strcmp(b.fail, "out of memory") == 0 ? LOOM_ERR_OOM : LOOM_ERR_INTERNAL;
  }
  memcpy(step->arg_pos, b.slot_pos, sizeof(int) * (size_t)b.nslots);
  memcpy(step->arg_key, b.slot_key, sizeof(bool) * (size_t)b.nslots);
  step->nparams = b.nparams;
  step->params = NULL;
  if (b.nparams && !(step->params = malloc(sizeof(double) * (size_t)b.nparams))) {
    free(b.inst);
    free(step->arg_pos), free(step->arg_key);
    step->arg_pos = NULL, step->arg_key = NULL;
    snprintf(err, errlen, "lowering %s: out of memory", lm_op_name(root->op));
    return LOOM_ERR_OOM;
  }
  if (b.nparams) memcpy(step->params, b.params, sizeof(double) * (size_t)b.nparams);
  k->inst = b.inst;
  k->ninst = b.n;
  k->nslots = b.nslots;
  k->nstats = b.nstats;
  memcpy(k->stat, b.stat, sizeof b.stat);
  if (k->reduce == LK_RED_NONE) k->nbody = k->ninst;
  step->kind = LM_STEP_KERNEL;
  step->out = root->pos;
  step->dtype = root->dtype;
  step->outer = lm_shape_numel(&root->shape);
  return LOOM_OK;
}

loom_status lm_lower(const lm_planner *pl, lm_node *root, lm_step *step, char *err, size_t errlen) {
  return lower(pl, root, false, NULL, step, err, errlen);
}

loom_status lm_lower_rows(const lm_planner *pl, lm_node *root, lm_step *step, bool *misaligned,
                          char *err, size_t errlen) {
  *misaligned = false;
  return lower(pl, root, true, misaligned, step, err, errlen);
}
