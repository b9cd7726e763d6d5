/* Random-graph differential testing: seeded random DAGs of ops (elementwise,
 * broadcasting, views, reductions, softmax, matmul, casts, random draws), built
 * in loom and mirrored in the reference evaluator (tests/support/ref.c), realized
 * with fusion on and off, compared within tolerances derived from a per-node
 * error bound; small F64 graphs also check gradients against central finite
 * differences.
 *
 * LOOM_FUZZ_SEED (default 20261129) and LOOM_FUZZ_GRAPHS (default 150) override
 * the run. A failure prints the seed, the graph index and the op listing;
 * LOOM_FUZZ_ONLY=i runs just graph i of the seed; LOOM_FUZZ_VERBOSE=1 lists
 * every graph before running it (for crashes). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/philox.h"
#include "check.h"
#include "loom.h"
#include "ref.h"

#define MAXN 40

typedef enum {
  OP_INPUT,
  OP_RAND,
  OP_UN,
  OP_BIN,
  OP_BIN_S,
  OP_RESHAPE,
  OP_PERMUTE,
  OP_TRANSPOSE,
  OP_EXPAND,
  OP_SQUEEZE,
  OP_UNSQUEEZE,
  OP_SLICE,
  OP_PAD,
  OP_FLATTEN,
  OP_SUM,
  OP_MEAN,
  OP_MAX,
  OP_SOFTMAX,
  OP_LOG_SOFTMAX,
  OP_MATMUL,
  OP_CAST,
  OP_NUM
} opk;
static const char *const op_names[OP_NUM] = {
    "input",     "rand",   "unary",   "binary",    "binary_s",    "reshape", "permute",
    "transpose", "expand", "squeeze", "unsqueeze", "slice",       "pad",     "flatten",
    "sum",       "mean",   "max",     "softmax",   "log_softmax", "matmul",  "cast"};

/* unary subs */
enum { U_NEG, U_ABS, U_TANH, U_SIGMOID, U_RELU, U_SQUARE, U_EXPC, U_SQRTP, U_LOGP, U_NUM };
static const char *const un_names[U_NUM] = {"neg",         "abs",          "tanh",
                                            "sigmoid",     "relu",         "square",
                                            "exp(clamp4)", "sqrt(|x|+.5)", "log(|x|+.5)"};
/* binary subs */
enum { B_ADD, B_SUB, B_MUL, B_MAX, B_MIN, B_DIVP, B_NUM };
static const char *const bin_names[B_NUM] = {"add",     "sub",     "mul",
                                             "maximum", "minimum", "div(a,|b|+.5)"};
/* scalar subs */
enum { S_ADD, S_SUB, S_RSUB, S_MUL, S_DIV, S_MAX, S_MIN, S_NUM };
static const char *const bs_names[S_NUM] = {"add_s", "sub_s",     "rsub_s",   "mul_s",
                                            "div_s", "maximum_s", "minimum_s"};

typedef struct node {
  int op, sub, a, b;
  double s;
  int iv[LOOM_MAX_DIMS];
  int niv;
  int64_t lv[2 * LOOM_MAX_DIMS];
  int nlv;
  bool keepdim;
  loom_shape shape; /* reshape/expand target, rand shape */
  loom_dtype dt;    /* cast target, rand dtype */
  uint64_t seed;    /* rand key seed */
  ref_t *ref;       /* the reference value */
  double eb;        /* estimated absolute error bound */
  double mx;        /* max |value| (finite) */
  bool is_input;
} node;

typedef struct graph {
  node n[MAXN];
  int nn;
  int nin;
  bool grad;
} graph;

static uint64_t g_seed;
static int g_index;

/* ------------------------------------------------------------------ helpers */
static int rnd(int lo, int hi) { return (int)ref_rand_int(lo, hi); }
static bool coin(double p) { return ref_rand_uniform() < p; }

static double unit_eps(loom_dtype d) {
  return d == LOOM_F32 ? 1.2e-7 : d == LOOM_F64 ? 2.3e-16 : 0;
}

static double max_abs(const ref_t *r) {
  double m = 0;
  for (int64_t i = 0; i < r->numel; i++)
    if (isfinite(r->data[i]) && fabs(r->data[i]) > m) m = fabs(r->data[i]);
  return m;
}

static loom_shape rand_shape(int maxnd, int maxext) {
  loom_shape s = {rnd(0, maxnd), {0}};
  for (int i = 0; i < s.ndim; i++) {
    int r = rnd(0, 9);
    s.dim[i] = r < 3 ? 1 : (r == 9 && coin(0.3)) ? 0 : rnd(1, maxext);
  }
  return s;
}

static ref_t *rand_draw_ref(uint64_t seed, loom_shape s, loom_dtype d) {
  loom_key key = loom_key_new(seed);
  ref_t *r = ref_new(s, d);
  for (int64_t i = 0; i < r->numel; i++)
    r->data[i] = d == LOOM_F32 ? (double)lm_philox_uniform_f32(key.k, (uint64_t)i, 0)
                               : lm_philox_uniform_f64(key.k, (uint64_t)i, 0);
  return r;
}

/* ------------------------------------------------------------------ reference evaluation */
static ref_t *ref_eval(const node *nd, ref_t *const *v) {
  const ref_t *A = nd->a >= 0 ? v[nd->a] : NULL, *B = nd->b >= 0 ? v[nd->b] : NULL;
  const int *ax = nd->iv;
  switch (nd->op) {
  case OP_INPUT: return ref_clone(nd->ref);
  case OP_RAND: return rand_draw_ref(nd->seed, nd->shape, nd->dt);
  case OP_UN: {
    static const ref_unop simple[] = {REF_NEG,     REF_ABS,  REF_TANH,
                                      REF_SIGMOID, REF_RELU, REF_SQUARE};
    if (nd->sub < U_EXPC) return ref_unary(simple[nd->sub], A);
    if (nd->sub == U_EXPC) {
      ref_t *c1 = ref_maximum_s(A, -4), *c2 = ref_minimum_s(c1, 4), *r = ref_exp(c2);
      ref_free(c1), ref_free(c2);
      return r;
    }
    ref_t *ab = ref_abs(A), *p = ref_add_s(ab, 0.5);
    ref_t *r = nd->sub == U_SQRTP ? ref_sqrt(p) : ref_log(p);
    ref_free(ab), ref_free(p);
    return r;
  }
  case OP_BIN: {
    static const ref_binop bo[] = {REF_ADD, REF_SUB, REF_MUL, REF_MAXIMUM, REF_MINIMUM};
    if (nd->sub < B_DIVP) return ref_binary(bo[nd->sub], A, B);
    ref_t *ab = ref_abs(B), *p = ref_add_s(ab, 0.5), *r = ref_div(A, p);
    ref_free(ab), ref_free(p);
    return r;
  }
  case OP_BIN_S: {
    static const ref_binop so[] = {REF_ADD, REF_SUB,     REF_SUB,    REF_MUL,
                                   REF_DIV, REF_MAXIMUM, REF_MINIMUM};
    return ref_binary_s(so[nd->sub], A, nd->s, nd->sub == S_RSUB);
  }
  case OP_RESHAPE: return ref_reshape(A, nd->shape);
  case OP_PERMUTE: return ref_permute(A, ax, nd->niv);
  case OP_TRANSPOSE: return ref_transpose(A, ax[0], ax[1]);
  case OP_EXPAND: return ref_expand(A, nd->shape);
  case OP_SQUEEZE: return ref_squeeze(A, ax[0]);
  case OP_UNSQUEEZE: return ref_unsqueeze(A, ax[0]);
  case OP_SLICE: return ref_slice(A, ax[0], nd->lv[0], nd->lv[1], nd->lv[2]);
  case OP_PAD: return ref_pad(A, nd->lv, nd->nlv, nd->s);
  case OP_FLATTEN: return ref_flatten(A, ax[0], ax[1]);
  case OP_SUM: return ref_sum(A, ax, nd->niv, nd->keepdim);
  case OP_MEAN: return ref_mean(A, ax, nd->niv, nd->keepdim);
  case OP_MAX: return ref_max(A, ax, nd->niv, nd->keepdim);
  case OP_SOFTMAX: return ref_softmax(A, ax[0]);
  case OP_LOG_SOFTMAX: return ref_log_softmax(A, ax[0]);
  case OP_MATMUL: return ref_matmul(A, B);
  case OP_CAST: return ref_cast(A, nd->dt);
  default: return NULL;
  }
}

/* ------------------------------------------------------------------ loom build */
static loom_tensor *loom_build(const node *nd, loom_tensor *const *t) {
  loom_tensor *A = nd->a >= 0 ? t[nd->a] : NULL, *B = nd->b >= 0 ? t[nd->b] : NULL;
  const int *ax = nd->iv;
  switch (nd->op) {
  case OP_INPUT: return ref_to_loom(nd->ref);
  case OP_RAND: return loom_rand_key(loom_key_new(nd->seed), nd->shape, nd->dt, test_device());
  case OP_UN:
    switch (nd->sub) {
    case U_NEG: return loom_neg(A);
    case U_ABS: return loom_abs(A);
    case U_TANH: return loom_tanh(A);
    case U_SIGMOID: return loom_sigmoid(A);
    case U_RELU: return loom_relu(A);
    case U_SQUARE: return loom_square(A);
    case U_EXPC: return loom_exp(loom_minimum_s(loom_maximum_s(A, -4), 4));
    case U_SQRTP: return loom_sqrt(loom_add_s(loom_abs(A), 0.5));
    default: return loom_log(loom_add_s(loom_abs(A), 0.5));
    }
  case OP_BIN:
    switch (nd->sub) {
    case B_ADD: return loom_add(A, B);
    case B_SUB: return loom_sub(A, B);
    case B_MUL: return loom_mul(A, B);
    case B_MAX: return loom_maximum(A, B);
    case B_MIN: return loom_minimum(A, B);
    default: return loom_div(A, loom_add_s(loom_abs(B), 0.5));
    }
  case OP_BIN_S:
    switch (nd->sub) {
    case S_ADD: return loom_add_s(A, nd->s);
    case S_SUB: return loom_sub_s(A, nd->s);
    case S_RSUB: return loom_rsub_s(nd->s, A);
    case S_MUL: return loom_mul_s(A, nd->s);
    case S_DIV: return loom_div_s(A, nd->s);
    case S_MAX: return loom_maximum_s(A, nd->s);
    default: return loom_minimum_s(A, nd->s);
    }
  case OP_RESHAPE: return loom_reshape(A, nd->shape);
  case OP_PERMUTE: return loom_permute(A, ax, nd->niv);
  case OP_TRANSPOSE: return loom_transpose(A, ax[0], ax[1]);
  case OP_EXPAND: return loom_expand(A, nd->shape);
  case OP_SQUEEZE: return loom_squeeze(A, ax[0]);
  case OP_UNSQUEEZE: return loom_unsqueeze(A, ax[0]);
  case OP_SLICE: return loom_slice(A, ax[0], nd->lv[0], nd->lv[1], nd->lv[2]);
  case OP_PAD: return loom_pad(A, nd->lv, nd->nlv, nd->s);
  case OP_FLATTEN: return loom_flatten(A, ax[0], ax[1]);
  case OP_SUM: return loom_sum(A, ax, nd->niv, nd->keepdim);
  case OP_MEAN: return loom_mean(A, ax, nd->niv, nd->keepdim);
  case OP_MAX: return loom_max(A, ax, nd->niv, nd->keepdim);
  case OP_SOFTMAX: return loom_softmax(A, ax[0]);
  case OP_LOG_SOFTMAX: return loom_log_softmax(A, ax[0]);
  case OP_MATMUL: return loom_matmul(A, B);
  case OP_CAST: return loom_cast(A, nd->dt);
  default: return NULL;
  }
}

/* ------------------------------------------------------------------ listing */
static void print_node(const graph *g, int i) {
  const node *nd = &g->n[i];
  char sb[96], sb2[96];
  printf("    n%d = ", i);
  switch (nd->op) {
  case OP_INPUT: printf("input"); break;
  case OP_RAND:
    printf("rand_key(seed=%llu, %s, %s)", (unsigned long long)nd->seed,
           ref_shape_str(nd->shape, sb2, sizeof sb2), ref_dtype_str(nd->dt));
    break;
  case OP_UN: printf("%s(n%d)", un_names[nd->sub], nd->a); break;
  case OP_BIN: printf("%s(n%d, n%d)", bin_names[nd->sub], nd->a, nd->b); break;
  case OP_BIN_S: printf("%s(n%d, %g)", bs_names[nd->sub], nd->a, nd->s); break;
  case OP_RESHAPE:
  case OP_EXPAND:
    printf("%s(n%d, %s)", op_names[nd->op], nd->a, ref_shape_str(nd->shape, sb2, sizeof sb2));
    break;
  case OP_SLICE:
    printf("slice(n%d, axis=%d, %lld, %lld, %lld)", nd->a, nd->iv[0], (long long)nd->lv[0],
           (long long)nd->lv[1], (long long)nd->lv[2]);
    break;
  case OP_PAD:
    printf("pad(n%d, {", nd->a);
    for (int k = 0; k < nd->nlv; k++) printf("%s%lld", k ? "," : "", (long long)nd->lv[k]);
    printf("}, value=%g)", nd->s);
    break;
  case OP_MATMUL: printf("matmul(n%d, n%d)", nd->a, nd->b); break;
  case OP_TRANSPOSE:
  case OP_FLATTEN: printf("%s(n%d, %d, %d)", op_names[nd->op], nd->a, nd->iv[0], nd->iv[1]); break;
  case OP_SQUEEZE:
  case OP_UNSQUEEZE:
  case OP_SOFTMAX:
  case OP_LOG_SOFTMAX: printf("%s(n%d, %d)", op_names[nd->op], nd->a, nd->iv[0]); break;
  case OP_CAST: printf("cast(n%d, %s)", nd->a, ref_dtype_str(nd->dt)); break;
  default:
    printf("%s(n%d, {", op_names[nd->op], nd->a);
    for (int k = 0; k < nd->niv; k++) printf("%s%d", k ? "," : "", nd->iv[k]);
    printf("}");
    if (nd->op == OP_SUM || nd->op == OP_MEAN || nd->op == OP_MAX)
      printf(", keepdim=%d", nd->keepdim);
    printf(")");
  }
  printf("  -> %s%s  (max|x| %.3g, err bound %.3g)\n", ref_dtype_str(nd->ref->dtype),
         ref_shape_str(nd->ref->shape, sb, sizeof sb), nd->mx, nd->eb);
  if (nd->op == OP_INPUT && nd->ref->numel <= 64) {
    printf("       values:");
    for (int64_t k = 0; k < nd->ref->numel; k++) printf(" %.9g", nd->ref->data[k]);
    printf("\n");
  }
}

static void print_graph(const graph *g) {
  for (int i = 0; i < g->nn; i++) print_node(g, i);
}

/* ------------------------------------------------------------------ error bounds */
static void set_bound(node *nd, const graph *g) {
  const node *A = nd->a >= 0 ? &g->n[nd->a] : NULL, *B = nd->b >= 0 ? &g->n[nd->b] : NULL;
  double u = unit_eps(nd->ref->dtype), mo = nd->mx;
  double ea = A ? A->eb : 0, ma = A ? A->mx : 0, eb_ = B ? B->eb : 0, mb = B ? B->mx : 0;
  double K = 1;
  if (A && nd->ref->numel > 0) K = (double)A->ref->numel / (double)nd->ref->numel;
  if (K < 1) K = 1;
  double e = 0;
  switch (nd->op) {
  case OP_INPUT:
  case OP_RAND: e = 0; break;
  case OP_UN:
    switch (nd->sub) {
    case U_NEG:
    case U_ABS:
    case U_RELU: e = ea; break;
    case U_TANH:
    case U_SIGMOID: e = ea + 4 * u; break;
    case U_SQUARE: e = 2 * ma * ea + ea * ea + 2 * u * mo; break;
    case U_EXPC: e = mo * (ea + 4 * u) * 1.01; break;
    case U_SQRTP: e = ea + 4 * u * mo; break;
    default: e = 2 * ea + 4 * u * (mo + 1); break;
    }
    break;
  case OP_BIN:
    switch (nd->sub) {
    case B_ADD:
    case B_SUB: e = ea + eb_ + 2 * u * mo; break;
    case B_MUL: e = ma * eb_ + mb * ea + ea * eb_ + 2 * u * mo; break;
    case B_MAX:
    case B_MIN: e = fmax(ea, eb_); break;
    default: e = 2 * ea + 4 * ma * eb_ + 4 * u * mo; break;
    }
    break;
  case OP_BIN_S:
    e = ea * fmax(1, fabs(nd->sub == S_MUL   ? nd->s
                          : nd->sub == S_DIV ? 1 / nd->s
                                             : 1)) +
        2 * u * mo;
    break;
  case OP_SUM: e = K * ea + u * K * K * ma + 2 * u * mo; break;
  case OP_MEAN: e = ea + u * K * ma + 2 * u * mo; break;
  case OP_MAX: e = ea; break;
  case OP_SOFTMAX: e = 2 * ea + 8 * u * (1 + K); break;
  case OP_LOG_SOFTMAX: e = 2 * ea + 8 * u * (ma + mo + K); break;
  case OP_MATMUL: {
    int64_t k = A->ref->shape.dim[A->ref->shape.ndim - 1];
    e = (double)k * (ma * eb_ + mb * ea + ea * eb_) + u * (double)(k * k + 2) * ma * mb;
    break;
  }
  case OP_CAST: e = ea + 2 * u * mo; break;
  default: e = ea; break; /* views */
  }
  nd->eb = e;
}

/* ------------------------------------------------------------------ generation */
static int pick_node(const graph *g) {
  /* prefer recent nodes */
  if (coin(0.6)) return g->nn - 1 - rnd(0, g->nn > 3 ? 2 : g->nn - 1);
  return rnd(0, g->nn - 1);
}

static loom_dtype pick_input_dtype(bool grad) {
  if (grad) return LOOM_F64;
  int r = rnd(0, 9);
  return r < 7 ? LOOM_F32 : r < 9 ? LOOM_F64 : LOOM_I32;
}

static int add_input(graph *g, loom_shape s, loom_dtype d) {
  node *nd = &g->n[g->nn];
  memset(nd, 0, sizeof *nd);
  nd->op = OP_INPUT, nd->a = nd->b = -1, nd->is_input = true;
  /* quantized values (ties, exact zeros) only where no gradient is taken: kinks */
  nd->ref = ref_gen(s, d, !g->grad && coin(0.15) ? DOM_QUANT : DOM_ANY);
  nd->mx = max_abs(nd->ref);
  g->nin++;
  return g->nn++;
}

static loom_shape shape_small(loom_shape s, bool grad) {
  if (grad)
    for (int i = 0; i < s.ndim; i++)
      if (s.dim[i] > 3) s.dim[i] = 3;
  return s;
}

static bool is_float(const node *n) { return ref_is_float(n->ref->dtype); }

/* Fills *nd (a, b, params) for a random op; returns false if it does not apply. */
static bool gen_op(graph *g, node *nd) {
  memset(nd, 0, sizeof *nd);
  nd->a = pick_node(g), nd->b = -1;
  const node *A = &g->n[nd->a];
  loom_shape s = A->ref->shape;
  int n = s.ndim;
  int64_t numel = A->ref->numel;
  bool fl = is_float(A);
  int r = rnd(0, 99);
  if (r < 18) {
    nd->op = OP_UN;
    nd->sub = rnd(0, U_NUM - 1);
    if (nd->sub == U_SQUARE && A->mx > (fl ? 30 : 1000)) return false;
    if (!fl && (nd->sub == U_TANH || nd->sub == U_SIGMOID || nd->sub >= U_EXPC) && coin(0.7))
      return false;
  } else if (r < 36) {
    nd->op = OP_BIN;
    nd->sub = rnd(0, B_NUM - 1);
    int tries = 0;
    loom_shape o;
    do nd->b = rnd(0, g->nn - 1);
    while (!ref_broadcast_shape(s, g->n[nd->b].ref->shape, &o) && ++tries < 10);
    if (tries >= 10) {
      if (g->nn >= MAXN - 2 || !coin(0.5)) return false;
      /* a new input broadcasting against A */
      loom_shape bs = s;
      for (int i = 0; i < n; i++)
        if (coin(0.4)) bs.dim[i] = 1;
      if (coin(0.3) && bs.ndim > 0) { /* drop leading dims */
        int k = rnd(1, bs.ndim);
        memmove(bs.dim, bs.dim + k, sizeof(int64_t) * (size_t)(bs.ndim - k));
        bs.ndim -= k;
      }
      nd->b = add_input(g, shape_small(bs, g->grad), pick_input_dtype(g->grad));
      A = &g->n[nd->a];
    }
    if (nd->sub == B_MUL && A->mx * g->n[nd->b].mx > 1e6) return false;
    {
      /* torch promotion: a 0-d tensor does not widen a dimensioned one of its
       * category (F32[n] + F64[] is F32); ref_promote lacks this rule */
      const ref_t *x = A->ref, *y = g->n[nd->b].ref;
      loom_dtype xd = x->dtype, yd = y->dtype;
      if (nd->sub == B_DIVP && !ref_is_float(yd)) yd = LOOM_F32; /* |b| + 0.5 */
      if (xd != yd && ref_is_float(xd) == ref_is_float(yd) &&
          ((x->shape.ndim == 0) != (y->shape.ndim == 0)))
        return false;
    }
    if (coin(0.5) && nd->b != nd->a && coin(0.5)) {
      int t = nd->a;
      nd->a = nd->b, nd->b = t;
    }
  } else if (r < 44) {
    nd->op = OP_BIN_S;
    nd->sub = rnd(0, S_NUM - 1);
    static const double sv[] = {0.5, -1.5, 2, 3, -0.25, 1, 0};
    nd->s = sv[rnd(0, 6)];
    if (nd->sub == S_DIV && nd->s == 0) nd->s = 2;
    if (nd->sub == S_MUL && A->mx > 1e5) return false;
  } else if (r < 50) {
    nd->op = OP_RESHAPE;
    loom_shape t = {rnd(0, 4), {0}};
    if (numel == 0) {
      if (t.ndim == 0) t.ndim = 1;
      for (int i = 0; i < t.ndim; i++) t.dim[i] = rnd(1, 3);
      t.dim[rnd(0, t.ndim - 1)] = 0;
    } else {
      int64_t rem = numel;
      if (t.ndim == 0 && rem != 1) t.ndim = 1;
      for (int i = 0; i < t.ndim; i++) {
        if (i == t.ndim - 1) {
          t.dim[i] = rem;
          break;
        }
        int64_t divs[64];
        int nd_ = 0;
        for (int64_t d = 1; d <= rem && nd_ < 64; d++)
          if (rem % d == 0) divs[nd_++] = d;
        t.dim[i] = divs[rnd(0, nd_ - 1)];
        rem /= t.dim[i];
      }
      /* shuffle the factors */
      for (int i = t.ndim - 1; i > 0; i--) {
        int j = rnd(0, i);
        int64_t x = t.dim[i];
        t.dim[i] = t.dim[j], t.dim[j] = x;
      }
      if (t.ndim > 0 && coin(0.3)) t.dim[rnd(0, t.ndim - 1)] = -1;
    }
    nd->shape = t;
  } else if (r < 55) {
    if (n < 1) return false;
    nd->op = OP_PERMUTE;
    nd->niv = n;
    for (int i = 0; i < n; i++) nd->iv[i] = i;
    for (int i = n - 1; i > 0; i--) {
      int j = rnd(0, i), x = nd->iv[i];
      nd->iv[i] = nd->iv[j], nd->iv[j] = x;
    }
  } else if (r < 58) {
    if (n < 1) return false;
    nd->op = OP_TRANSPOSE;
    nd->iv[0] = rnd(-n, n - 1), nd->iv[1] = rnd(-n, n - 1);
  } else if (r < 63) {
    nd->op = OP_EXPAND;
    loom_shape t = s;
    bool any = false;
    for (int i = 0; i < n; i++) {
      if (s.dim[i] == 1 && coin(0.7))
        t.dim[i] = rnd(g->grad ? 2 : 2, g->grad ? 3 : 4), any = true;
      else if (coin(0.3))
        t.dim[i] = -1;
    }
    if (n < 4 && coin(0.4)) {
      memmove(t.dim + 1, t.dim, sizeof(int64_t) * (size_t)n);
      t.ndim = n + 1;
      t.dim[0] = rnd(1, 3);
      any = true;
    }
    if (!any) return false;
    nd->shape = t;
  } else if (r < 66) {
    int k = -1;
    for (int i = 0; i < n; i++)
      if (s.dim[i] == 1 && (k < 0 || coin(0.5))) k = i;
    if (k < 0) return false;
    nd->op = OP_SQUEEZE;
    nd->iv[0] = coin(0.3) ? k - n : k;
  } else if (r < 69) {
    if (n >= 5) return false;
    nd->op = OP_UNSQUEEZE;
    nd->iv[0] = rnd(-(n + 1), n);
  } else if (r < 74) {
    if (n < 1) return false;
    nd->op = OP_SLICE;
    int ax = rnd(0, n - 1);
    int64_t e = s.dim[ax];
    nd->iv[0] = coin(0.3) ? ax - n : ax;
    nd->lv[0] = rnd(-(int)e - 1, (int)e);
    nd->lv[1] = coin(0.2) ? INT64_MAX : rnd(-(int)e - 1, (int)e + 1);
    nd->lv[2] = coin(0.6) ? 1 : rnd(2, 3);
    if (nd->lv[1] == INT64_MAX) nd->lv[1] = e + 10;
  } else if (r < 78) {
    if (n < 1) return false;
    nd->op = OP_PAD;
    int np = rnd(1, n < 2 ? n : 2);
    nd->nlv = 2 * np;
    for (int k = 0; k < np; k++) {
      int64_t d = s.dim[n - 1 - k];
      int64_t lo = rnd(-1, 2), hi = rnd(-1, 2);
      /* as torch: negative pads crop first, so they must fit the dim by themselves */
      if (d + (lo < 0 ? lo : 0) + (hi < 0 ? hi : 0) < 0) lo = 0, hi = 0;
      nd->lv[2 * k] = lo, nd->lv[2 * k + 1] = hi;
    }
    static const double pv[] = {0, 0, 1.5, -2};
    nd->s = pv[rnd(0, 3)];
    if (!fl && nd->s != 0) nd->s = -2;
  } else if (r < 80) {
    if (n < 1) return false;
    nd->op = OP_FLATTEN;
    nd->iv[0] = rnd(0, n - 1);
    nd->iv[1] = rnd(nd->iv[0], n - 1);
    if (coin(0.3)) nd->iv[1] -= n;
  } else if (r < 90) {
    int kind = rnd(0, 2);
    nd->op = kind == 0 ? OP_SUM : kind == 1 ? OP_MEAN : OP_MAX;
    if (nd->op == OP_MEAN && !fl) return false;
    nd->keepdim = coin(0.5);
    nd->niv = n ? rnd(0, n) : 0;
    int perm[LOOM_MAX_DIMS];
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
      int j = rnd(0, i), x = perm[i];
      perm[i] = perm[j], perm[j] = x;
    }
    for (int i = 0; i < nd->niv; i++) nd->iv[i] = coin(0.3) ? perm[i] - n : perm[i];
    if (nd->op == OP_MAX) {
      if (nd->niv == 0 && numel == 0) return false;
      for (int i = 0; i < nd->niv; i++)
        if (s.dim[perm[i]] == 0) return false;
    }
  } else if (r < 94) {
    if (n < 1 || !fl) return false;
    nd->op = coin(0.5) ? OP_SOFTMAX : OP_LOG_SOFTMAX;
    nd->iv[0] = rnd(-n, n - 1);
  } else if (r < 97) {
    if (n < 1 || !fl) return false;
    nd->op = OP_MATMUL;
    /* a partner from the graph, else a new input */
    for (int tries = 0; tries < 8; tries++) {
      int b = rnd(0, g->nn - 1);
      ref_t *m = ref_matmul(A->ref, g->n[b].ref);
      if (m) {
        ref_free(m);
        nd->b = b;
        break;
      }
    }
    if (nd->b < 0) {
      if (g->nn >= MAXN - 2) return false;
      int64_t K = s.dim[n - 1];
      loom_shape bs;
      int form = rnd(0, 2);
      if (form == 0)
        bs = (loom_shape){1, {K}};
      else if (form == 1 || n < 3)
        bs = (loom_shape){2, {K, rnd(0, 9) == 0 ? 0 : rnd(1, g->grad ? 3 : 5)}};
      else {
        bs = (loom_shape){3, {coin(0.5) ? 1 : s.dim[n - 3], K, rnd(1, 4)}};
      }
      nd->b = add_input(g, bs, A->ref->dtype);
      A = &g->n[nd->a];
    }
  } else if (r < 99) {
    if (g->grad) return false;
    nd->op = OP_CAST;
    loom_dtype d = A->ref->dtype;
    nd->dt = d == LOOM_F32 ? LOOM_F64 : d == LOOM_F64 ? LOOM_F32 : LOOM_F32;
  } else {
    if (g->nn >= MAXN - 2) return false;
    nd->op = OP_RAND;
    nd->a = -1;
    nd->seed = ref_rand_u64();
    nd->shape = shape_small(rand_shape(4, 5), g->grad);
    nd->dt = g->grad ? LOOM_F64 : (coin(0.7) ? LOOM_F32 : LOOM_F64);
  }
  return true;
}

static void graph_free(graph *g) {
  for (int i = 0; i < g->nn; i++) ref_free(g->n[i].ref);
  g->nn = 0;
}

/* Generates a graph; false if the reference refused something (a generator bug). */
static bool gen_graph(graph *g, int nops) {
  int nin = rnd(1, 3);
  for (int i = 0; i < nin; i++)
    add_input(g, shape_small(rand_shape(4, 5), g->grad), pick_input_dtype(g->grad));
  int done = 0, fails = 0;
  while (done < nops && g->nn < MAXN - 1 && fails < 200) {
    node nd;
    if (!gen_op(g, &nd)) {
      fails++;
      continue;
    }
    ref_t *vals[MAXN];
    for (int i = 0; i < g->nn; i++) vals[i] = g->n[i].ref;
    nd.ref = ref_eval(&nd, vals);
    if (!nd.ref) {
      printf("  generator: reference refused %s (seed %llu graph %d)\n", op_names[nd.op],
             (unsigned long long)g_seed, g_index);
      fails++;
      continue;
    }
    nd.mx = max_abs(nd.ref);
    g->n[g->nn] = nd;
    set_bound(&g->n[g->nn], g);
    g->nn++;
    done++;
  }
  return true;
}

/* ------------------------------------------------------------------ forward check */
static void tols(const node *nd, double *rt, double *at) {
  loom_dtype d = nd->ref->dtype;
  if (!ref_is_float(d)) {
    *rt = 0, *at = 0;
    return;
  }
  ref_tol(d, REF_TOL_TRANS, rt, at);
  *at += 16 * nd->eb;
}

static int choose_outputs(const graph *g, int *outs) {
  int k = rnd(1, 3), m = 0;
  /* the last node always, plus random others */
  outs[m++] = g->nn - 1;
  while (m < k) {
    int c = rnd(0, g->nn - 1);
    bool dup = false;
    for (int j = 0; j < m; j++) dup |= outs[j] == c;
    if (!dup)
      outs[m++] = c;
    else if (g->nn <= m)
      break;
    else if (coin(0.3))
      break;
  }
  return m;
}

/* Builds in loom and compares; returns number of failures. */
static int run_forward(const graph *g, const int *outs, int nout, bool fused, int mode,
                       int mid_realize) {
  int bad = 0;
  loom_set_fusion(fused);
  LOOM_SCOPE {
    loom_tensor *t[MAXN];
    for (int i = 0; i < g->nn; i++) {
      t[i] = loom_build(&g->n[i], t);
      if (i == mid_realize && loom_status_of(t[i]) == LOOM_OK) loom_realize(t[i]);
    }
    loom_tensor *ot[3];
    for (int j = 0; j < nout; j++) ot[j] = t[outs[j]];
    if (mode == 0) {
      loom_status st = loom_eval(ot, nout);
      if (st != LOOM_OK)
        printf("  loom_eval failed: %s (%s)\n", loom_status_name(st),
               loom_last_error() ? loom_last_error() : "");
    } else if (mode == 1) {
      for (int j = 0; j < nout; j++) loom_realize(ot[j]);
    }
    for (int j = 0; j < nout; j++) {
      const node *nd = &g->n[outs[j]];
      char what[128];
      snprintf(what, sizeof what, "n%d (%s, mode %d)", outs[j], fused ? "fused" : "unfused", mode);
      double rt, at;
      tols(nd, &rt, &at);
      ref_t *got = ref_from_loom(ot[j]);
      if (!got) {
        printf("  %s: could not read\n", what);
        bad++;
        /* find the first error node */
        for (int i = 0; i < g->nn; i++)
          if (loom_status_of(t[i]) != LOOM_OK) {
            printf("  first error at n%d: %s\n", i,
                   loom_error_message(t[i]) ? loom_error_message(t[i]) : "");
            break;
          }
      } else {
        if (!ref_compare(what, nd->ref, got, rt, at)) bad++;
        ref_free(got);
      }
    }
  }
  loom_clear_error();
  return bad;
}

/* ------------------------------------------------------------------ gradient check */
static double ref_loss(const graph *g, ref_t *const *inputs, int out, const ref_t *w) {
  ref_t *v[MAXN];
  for (int i = 0; i < g->nn; i++) v[i] = NULL;
  for (int i = 0; i <= out; i++)
    v[i] = g->n[i].is_input ? ref_clone(inputs[i]) : ref_eval(&g->n[i], v);
  double s = 0;
  for (int64_t k = 0; k < w->numel; k++) s += v[out]->data[k] * w->data[k];
  for (int i = 0; i <= out; i++) ref_free(v[i]);
  return s;
}

static bool depends_on_input(const graph *g, int i) {
  const node *nd = &g->n[i];
  if (nd->is_input) return true;
  return (nd->a >= 0 && depends_on_input(g, nd->a)) || (nd->b >= 0 && depends_on_input(g, nd->b));
}

static int run_grad(const graph *g, int out) {
  const node *O = &g->n[out];
  if (!is_float(O) || O->ref->numel == 0 || !depends_on_input(g, out)) return 0;
  for (int64_t k = 0; k < O->ref->numel; k++)
    if (!isfinite(O->ref->data[k])) return 0;
  ref_t *w = ref_rand(O->ref->shape, O->ref->dtype, -1, 1);
  int bad = 0;
  loom_set_fusion(coin(0.5));
  LOOM_SCOPE {
    loom_tensor *t[MAXN];
    for (int i = 0; i <= out; i++) {
      t[i] = loom_build(&g->n[i], t);
      if (g->n[i].is_input) loom_set_requires_grad(t[i], true);
    }
    loom_tensor *lw = ref_to_loom(w);
    loom_tensor *loss = loom_sum_all(loom_mul(t[out], lw));
    loom_status st = loom_backward(loss);
    if (st != LOOM_OK) {
      printf("  backward failed: %s (%s)\n", loom_status_name(st),
             loom_last_error() ? loom_last_error() : "");
      bad++;
    } else {
      ref_t *inputs[MAXN];
      for (int i = 0; i < g->nn; i++) inputs[i] = g->n[i].is_input ? g->n[i].ref : NULL;
      for (int i = 0; i <= out; i++) {
        if (!g->n[i].is_input) continue;
        ref_t *x = ref_clone(g->n[i].ref);
        ref_t *fd = ref_new(x->shape, x->dtype);
        double gscale = 0;
        for (int64_t k = 0; k < x->numel; k++) {
          double x0 = x->data[k], h = 1e-6 * fmax(1, fabs(x0));
          inputs[i] = x;
          x->data[k] = x0 + h;
          double fp = ref_loss(g, inputs, out, w);
          x->data[k] = x0 - h;
          double fm = ref_loss(g, inputs, out, w);
          x->data[k] = x0;
          fd->data[k] = (fp - fm) / (2 * h);
          gscale = fmax(gscale, fabs(fd->data[k]));
        }
        inputs[i] = g->n[i].ref;
        loom_tensor *gr = loom_grad(t[i]);
        char what[96];
        snprintf(what, sizeof what, "grad of n%d (loss = sum(n%d * w))", i, out);
        if (!gr) {
          bool allzero = true;
          for (int64_t k = 0; k < fd->numel; k++) allzero &= fabs(fd->data[k]) < 1e-6;
          if (!allzero) {
            printf("  %s: loom has no gradient, finite differences are not zero\n", what);
            bad++;
          }
        } else {
          ref_t *got = ref_from_loom(gr);
          if (!got || !ref_compare(what, fd, got, 1e-4, 1e-5 * (1 + gscale))) bad++;
          ref_free(got);
        }
        ref_free(x);
        ref_free(fd);
      }
    }
  }
  loom_clear_error();
  ref_free(w);
  return bad;
}

/* ------------------------------------------------------------------ main */
static bool run_graph(uint64_t seed, int index) {
  ref_seed(seed * 1000003ULL + (uint64_t)index * 7919ULL + 17);
  g_seed = seed, g_index = index;
  static graph g;
  memset(&g, 0, sizeof g);
  g.grad = coin(0.2);
  int nops = rnd(3, 12);
  gen_graph(&g, nops);
  int outs[3];
  int nout = choose_outputs(&g, outs);
  int mode = rnd(0, 2); /* 0 eval all, 1 realize each, 2 read back directly */
  int mid = coin(0.25) ? rnd(0, g.nn - 1) : -1;
  if (getenv("LOOM_FUZZ_VERBOSE")) { /* before running: a crash still shows the graph */
    printf("graph %d (mode %d, outputs", index, mode);
    for (int j = 0; j < nout; j++) printf(" n%d", outs[j]);
    printf(", mid-realize n%d, grad %d)\n", mid, g.grad);
    print_graph(&g);
    fflush(stdout);
  }
  int bad = run_forward(&g, outs, nout, true, mode, mid);
  bad += run_forward(&g, outs, nout, false, mode, mid);
  int gout = -1;
  if (g.grad && !bad) {
    gout = outs[0];
    bad += run_grad(&g, gout);
  }
  loom_set_fusion(true);
  if (bad) {
    printf("FAIL: seed %llu graph %d (%s; outputs", (unsigned long long)seed, index,
           mode == 0   ? "one loom_eval"
           : mode == 1 ? "loom_realize each"
                       : "read back");
    for (int j = 0; j < nout; j++) printf(" n%d", outs[j]);
    if (mid >= 0) printf("; n%d realized while building", mid);
    if (gout >= 0) printf("; gradient of n%d", gout);
    printf(")\n  reproduce: LOOM_FUZZ_SEED=%llu LOOM_FUZZ_ONLY=%d test_random_graphs\n",
           (unsigned long long)seed, index);
    print_graph(&g);
  }
  check_record(bad == 0, __FILE__, __LINE__, "random graph");
  graph_free(&g);
  return bad == 0;
}

int main(void) {
  const char *es = getenv("LOOM_FUZZ_SEED"), *eg = getenv("LOOM_FUZZ_GRAPHS"),
             *eo = getenv("LOOM_FUZZ_ONLY");
  uint64_t seed = es ? strtoull(es, NULL, 10) : 20261129ULL;
  int ngraphs = eg ? atoi(eg) : 150;
  int lo = 0, hi = ngraphs;
  if (eo) lo = atoi(eo), hi = lo + 1;
  int failed = 0, run = 0;
  for (int i = lo; i < hi; i++) {
    run++;
    if (!run_graph(seed, i)) failed++;
  }
  printf("seed %llu\ngraphs run: %d\n", (unsigned long long)seed, run);
  printf("graphs failed: %d\n", failed);
  return check_report();
}
