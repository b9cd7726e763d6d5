/*
 * Symbolic dimensions of a program's graph: which of every node's dims follow
 * the sizes named on its inputs, and how.
 *
 * A program is recorded at example sizes; some input dims are declared
 * symbols. Every dim of every node (a slot) gets an expression over the
 * symbols: a polynomial with integer coefficients (b * t after a flatten,
 * 2 * b after a cat, t - 1 after a slice to the end). Slots that must be equal
 * (an elementwise node and its sources, a matrix product's inner dims, a
 * permuted dim and its source) are joined in one class; a derived slot (a
 * reshape's merged dims, a cat's axis) gets an expression from its sources'
 * once they are known. A dim nothing ties to an input (a constant's, a
 * broadcast's) stays open until its consumers tie it; what stays open is a
 * fixed size; so is a slice of a fixed dim (a position table's first t rows
 * follow t). Two expressions meeting in one class must be the same
 * polynomial: a symbol meeting a fixed size (a weight's) is refused.
 *
 * A reshape splitting a symbolic dim ([b * t, C] -> [b, t, C]) is told apart
 * by the example sizes: each new dim takes the part of the product whose
 * example value it has. Example sizes of symbols must therefore be at least 2
 * (a size of 1 is a broadcast) and the split must be unique.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

/* ------------------------------------------------------------ polynomials */

static int term_cmp(const lm_sym_term *a, const lm_sym_term *b) {
  return memcmp(a->pow, b->pow, sizeof a->pow);
}

/* Sorted terms, like ones merged, zeros dropped; false on overflow or too
 * many terms. */
static bool normalize(lm_sym_expr *e) {
  for (int i = 1; i < e->nterms; i++) /* insertion sort: a few terms */
    for (int j = i; j > 0 && term_cmp(&e->t[j - 1], &e->t[j]) > 0; j--) {
      lm_sym_term tmp = e->t[j];
      e->t[j] = e->t[j - 1], e->t[j - 1] = tmp;
    }
  int out = 0;
  for (int i = 0; i < e->nterms; i++) {
    if (out > 0 && term_cmp(&e->t[out - 1], &e->t[i]) == 0) {
      if (__builtin_add_overflow(e->t[out - 1].coef, e->t[i].coef, &e->t[out - 1].coef))
        return false;
    } else {
      e->t[out++] = e->t[i];
    }
    if (out > 0 && e->t[out - 1].coef == 0) out--;
  }
  e->nterms = out;
  return true;
}

lm_sym_expr lm_sym_const(int64_t v) {
  lm_sym_expr e = {0};
  if (v != 0) e.nterms = 1, e.t[0].coef = v;
  return e;
}

lm_sym_expr lm_sym_symbol(int s) {
  lm_sym_expr e = {.nterms = 1};
  e.t[0].coef = 1;
  e.t[0].pow[s] = 1;
  return e;
}

bool lm_sym_eq(const lm_sym_expr *a, const lm_sym_expr *b) {
  if (a->nterms != b->nterms) return false;
  for (int i = 0; i < a->nterms; i++)
    if (a->t[i].coef != b->t[i].coef || term_cmp(&a->t[i], &b->t[i]) != 0) return false;
  return true;
}

bool lm_sym_is_const(const lm_sym_expr *e) {
  return e->nterms == 0 || (e->nterms == 1 && term_cmp(&e->t[0], &(lm_sym_term){0}) == 0);
}

static bool sym_add(const lm_sym_expr *a, const lm_sym_expr *b, lm_sym_expr *out) {
  lm_sym_expr r = *a;
  for (int i = 0; i < b->nterms; i++) {
    int j = 0;
    while (j < r.nterms && term_cmp(&r.t[j], &b->t[i]) != 0) j++;
    if (j < r.nterms) {
      if (__builtin_add_overflow(r.t[j].coef, b->t[i].coef, &r.t[j].coef)) return false;
    } else {
      if (r.nterms == LM_SYM_TERMS) return false;
      r.t[r.nterms++] = b->t[i];
    }
  }
  if (!normalize(&r)) return false;
  *out = r;
  return true;
}

bool lm_sym_add_term(lm_sym_expr *e, const lm_sym_term *t) {
  lm_sym_expr one = {.nterms = 1, .t = {*t}};
  return sym_add(e, &one, e);
}

/* Along each axis in turn, the values at x0, x0 + 1, x0 + 2 become twice the
 * coefficients of 1, x, x^2 (Newton's form, expanded), so the grid's
 * coefficients come out times 2^k. */
void lm_sym_fit_point(int k, const int64_t *base, int g, int64_t *values) {
  for (int j = 0; j < k; j++, g /= LM_SYM_FIT_GRID) values[j] = base[j] + g % LM_SYM_FIT_GRID;
}

bool lm_sym_fit(int k, const int64_t *example, const int64_t *vals, lm_sym_expr *out) {
  if (k < 0 || k > LM_SYM_FIT_MAX_SYMBOLS) return false;
  int n = 1;
  for (int j = 0; j < k; j++) n *= LM_SYM_FIT_GRID;
  __int128 c[LM_SYM_FIT_MAX_POINTS];
  for (int g = 0; g < n; g++) c[g] = vals[g];
  for (int j = 0, stride = 1; j < k; j++, stride *= LM_SYM_FIT_GRID) {
    __int128 x0 = example[j];
    for (int g = 0; g < n; g++) {
      if ((g / stride) % LM_SYM_FIT_GRID != 0) continue;
      __int128 y0 = c[g], y1 = c[g + stride], y2 = c[g + 2 * stride];
      __int128 d1 = y1 - y0, d2 = y2 - 2 * y1 + y0;
      c[g] = 2 * y0 - 2 * d1 * x0 + d2 * x0 * (x0 + 1);
      c[g + stride] = 2 * d1 - d2 * (2 * x0 + 1);
      c[g + 2 * stride] = d2;
    }
  }
  *out = (lm_sym_expr){0};
  __int128 scale = (__int128)1 << k;
  for (int g = 0; g < n; g++) {
    if (c[g] == 0) continue;
    if (c[g] % scale != 0) return false;
    __int128 coef = c[g] / scale;
    if (coef > INT64_MAX || coef < -INT64_MAX) return false;
    lm_sym_term t = {.coef = (int64_t)coef};
    for (int j = 0, at = g; j < k; j++, at /= LM_SYM_FIT_GRID)
      t.pow[j] = (uint8_t)(at % LM_SYM_FIT_GRID);
    if (!lm_sym_add_term(out, &t)) return false;
  }
  return true;
}

bool lm_sym_dominates(const lm_sym_expr *a, const lm_sym_expr *b) {
  lm_sym_expr diff = *b;
  for (int i = 0; i < diff.nterms; i++) diff.t[i].coef = -diff.t[i].coef;
  if (!sym_add(a, &diff, &diff)) return false;
  for (int i = 0; i < diff.nterms; i++)
    if (diff.t[i].coef < 0) return false;
  return true;
}

static bool sym_mul(const lm_sym_expr *a, const lm_sym_expr *b, lm_sym_expr *out) {
  lm_sym_expr r = {0};
  for (int i = 0; i < a->nterms; i++)
    for (int j = 0; j < b->nterms; j++) {
      lm_sym_term t = {0};
      if (__builtin_mul_overflow(a->t[i].coef, b->t[j].coef, &t.coef)) return false;
      for (int s = 0; s < LM_SYM_MAX_SYMBOLS; s++) {
        int p = a->t[i].pow[s] + b->t[j].pow[s];
        if (p > 8) return false;
        t.pow[s] = (uint8_t)p;
      }
      lm_sym_expr one = {.nterms = 1, .t = {t}};
      if (!sym_add(&r, &one, &r)) return false;
    }
  *out = r;
  return true;
}

int64_t lm_sym_eval(const lm_sym_expr *e, const int64_t *values) {
  int64_t sum = 0;
  for (int i = 0; i < e->nterms; i++) {
    int64_t v = e->t[i].coef;
    for (int s = 0; s < LM_SYM_MAX_SYMBOLS; s++)
      for (int p = 0; p < e->t[i].pow[s]; p++)
        if (__builtin_mul_overflow(v, values[s], &v)) return INT64_MIN;
    if (__builtin_add_overflow(sum, v, &sum)) return INT64_MIN;
  }
  return sum;
}

/* printf into buf at *used, never past len (a long expression is cut). */
static void append(char *buf, size_t len, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t len, size_t *used, const char *fmt, ...) {
  if (*used + 1 >= len) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *used, len - *used, fmt, ap);
  va_end(ap);
  if (n > 0) *used = *used + (size_t)n < len ? *used + (size_t)n : len - 1;
}

/* The terms in stored order, the constant (stored first) last: "2*t - 1". */
const char *lm_sym_str(const lm_sym_expr *e, const char *const *names, char *buf, size_t len) {
  size_t used = 0;
  if (len == 0) return buf;
  buf[0] = 0;
  if (e->nterms == 0) {
    append(buf, len, &used, "0");
    return buf;
  }
  bool constant_first = term_cmp(&e->t[0], &(lm_sym_term){0}) == 0 && e->nterms > 1;
  for (int k = 0; k < e->nterms; k++) {
    int i = constant_first ? (k + 1) % e->nterms : k;
    int64_t c = e->t[i].coef;
    bool constant = term_cmp(&e->t[i], &(lm_sym_term){0}) == 0;
    if (k > 0)
      append(buf, len, &used, c < 0 ? " - " : " + ");
    else if (c < 0)
      append(buf, len, &used, "-");
    uint64_t m = c < 0 ? -(uint64_t)c : (uint64_t)c;
    bool first = true;
    if (m != 1 || constant) {
      append(buf, len, &used, "%llu", (unsigned long long)m);
      first = false;
    }
    for (int s = 0; s < LM_SYM_MAX_SYMBOLS; s++)
      for (int p = 0; p < e->t[i].pow[s]; p++) {
        append(buf, len, &used, "%s%s", first ? "" : "*", names[s]);
        first = false;
      }
  }
  return buf;
}

/* ------------------------------------------------------------ inference */

typedef struct infer {
  const lm_graph *g;
  const char *const *names;
  const int64_t *example;
  int *parent;       /* union-find over slots (pos * LOOM_MAX_DIMS + d) */
  bool *known;       /* per class root */
  lm_sym_expr *expr; /* per class root, when known */
  int *origin;       /* per class root, when known: the slot that gave its expression */
  bool *derived;     /* per class root: holds a size the graph may have computed from
                        another's (an input-free leaf's the user did not write, a
                        broadcast's), not a number written in it (a slice's length) */
  int at;            /* the node being inferred (messages name it), or -1 */
  bool changed;
  char *err;
  size_t errlen;
  bool failed;
  bool numbers_checked; /* the caller checks each size's graph: no guessing */
} infer;

static int slot(int pos, int d) { return pos * LOOM_MAX_DIMS + d; }

static int find(infer *f, int s) {
  while (f->parent[s] != s) {
    f->parent[s] = f->parent[f->parent[s]];
    s = f->parent[s];
  }
  return s;
}

static int64_t concrete(const infer *f, int s) {
  return f->g->nodes[s / LOOM_MAX_DIMS]->shape.dim[s % LOOM_MAX_DIMS];
}

/* "node 3 (const [37,37], recorded by loom_cumsum)" */
static const char *node_str(const lm_graph *g, int pos, char *buf, size_t len) {
  const lm_node *n = g->nodes[pos];
  char shape[96];
  lm_shape_str(&n->shape, shape, sizeof shape);
  bool weight = lm_is_computed(n) && n->op != LM_INPUT; /* (data: a buffer, or a copy) */
  snprintf(buf, len, "node %d (%s %s%s%s)", pos, weight ? "weight" : lm_op_name(n->op), shape,
           n->made_by ? ", recorded by " : "", n->made_by ? n->made_by : "");
  return buf;
}

static void fail_at(infer *f, int pos, const char *fmt, const char *a, const char *b) {
  if (f->failed) return;
  f->failed = true;
  char what[2048], where[200];
  snprintf(what, sizeof what, fmt, a, b);
  snprintf(f->err, f->errlen, "%s (at %s)", what, node_str(f->g, pos, where, sizeof where));
}

/* What fixed a dim's size, for a refusal: the leaf it comes from and why its
 * sizes stay fixed. */
static const char *origin_str(const infer *f, int s, char *buf, size_t len) {
  int pos = s / LOOM_MAX_DIMS, d = s % LOOM_MAX_DIMS;
  const lm_node *n = f->g->nodes[pos];
  char at[200];
  node_str(f->g, pos, at, sizeof at);
  if (n->op == LM_INPUT)
    snprintf(buf, len, "dim %d of input '%s' (%s), which has no symbol there", d,
             n->label ? n->label : "?", at);
  else if (lm_is_computed(n))
    snprintf(buf, len, "dim %d of %s, a weight: its sizes are its data's", d, at);
  else if (lm_op_info_of(n->op)->cls == LM_OPC_LEAF && (n->fixed_dims & (1u << d)))
    snprintf(buf, len,
             "dim %d of %s, an input-free tensor whose sizes the program wrote (loom_full, "
             "loom_zeros, loom_ones, loom_arange, the loom_rand ops, loom_one_hot's classes): "
             "they stay fixed, as eager refuses the mismatch at other sizes; make it from the "
             "input (loom_full_like, a slice of a longer tensor, a [1, ..] tensor broadcast) or "
             "give the dim no symbol",
             d, at);
  else
    snprintf(buf, len, "dim %d of %s", d, at);
  return buf;
}

static void set_expr(infer *f, int s, const lm_sym_expr *e) {
  int r = find(f, s);
  if (f->known[r]) {
    if (!lm_sym_eq(&f->expr[r], e)) {
      char a[128], b[128];
      fail_at(f, s / LOOM_MAX_DIMS, "a dim would be both %s and %s",
              lm_sym_str(&f->expr[r], f->names, a, sizeof a), lm_sym_str(e, f->names, b, sizeof b));
    }
    return;
  }
  f->known[r] = true;
  f->expr[r] = *e;
  f->origin[r] = s;
  f->changed = true;
}

static void join(infer *f, int a, int b) {
  int ra = find(f, a), rb = find(f, b);
  if (ra == rb) return;
  if (f->known[ra] && f->known[rb] && !lm_sym_eq(&f->expr[ra], &f->expr[rb])) {
    char x[128], y[1024];
    const lm_sym_expr *ea = &f->expr[ra], *eb = &f->expr[rb];
    int at = f->at >= 0 ? f->at : b / LOOM_MAX_DIMS;
    if (lm_sym_is_const(ea) != lm_sym_is_const(eb)) {
      int fixed = lm_sym_is_const(ea) ? ra : rb;
      char size[32], whose[800];
      lm_sym_str(&f->expr[fixed], f->names, size, sizeof size);
      snprintf(y, sizeof y, "%s, %s", size, origin_str(f, f->origin[fixed], whose, sizeof whose));
      fail_at(f, at, "a dim of size %s meets a fixed dim of size %s",
              lm_sym_str(fixed == ra ? eb : ea, f->names, x, sizeof x), y);
    } else {
      fail_at(f, at, "dims of sizes %s and %s must be equal", lm_sym_str(ea, f->names, x, sizeof x),
              lm_sym_str(eb, f->names, y, sizeof y));
    }
    return;
  }
  if (f->known[rb] && !f->known[ra]) {
    int t = ra;
    ra = rb, rb = t;
  }
  f->derived[ra] |= f->derived[rb];
  f->parent[rb] = ra;
  f->changed = true;
}

static const lm_sym_expr *known_expr(infer *f, int s) {
  int r = find(f, s);
  return f->known[r] ? &f->expr[r] : NULL;
}

static int64_t example_of(const infer *f, const lm_sym_expr *e) {
  return lm_sym_eval(e, f->example);
}

/* The ways to split a term (c * symbols) over a reshape's new dims of the
 * given example sizes, each dim a part of the symbols times a factor of c
 * (counting stops at 2); the first way found in first[]. */
typedef struct splitter {
  const int64_t *example, *sizes;
  int nout, ways;
  long budget; /* picks left: a hostile product of many powers ends here */
  lm_sym_term cur[LOOM_MAX_DIMS], first[LOOM_MAX_DIMS];
} splitter;

static void split(splitter *sp, int k, lm_sym_term rest) {
  if (sp->ways >= 2 || sp->budget <= 0) return;
  if (k == sp->nout) {
    bool whole = rest.coef == 1;
    for (int s = 0; s < LM_SYM_MAX_SYMBOLS; s++) whole = whole && rest.pow[s] == 0;
    if (whole && sp->ways++ == 0) memcpy(sp->first, sp->cur, sizeof sp->cur);
    return;
  }
  uint8_t pick[LM_SYM_MAX_SYMBOLS] = {0}; /* an odometer up to rest's powers */
  for (; sp->budget > 0; sp->budget--) {
    int64_t value = 1;
    bool over = false;
    for (int s = 0; s < LM_SYM_MAX_SYMBOLS; s++)
      for (int p = 0; p < pick[s] && !over; p++)
        over = __builtin_mul_overflow(value, sp->example[s], &value);
    if (!over && value > 0 && sp->sizes[k] % value == 0 &&
        rest.coef % (sp->sizes[k] / value) == 0) {
      lm_sym_term part = {.coef = sp->sizes[k] / value}, left = rest;
      left.coef = rest.coef / part.coef;
      for (int s = 0; s < LM_SYM_MAX_SYMBOLS; s++) {
        part.pow[s] = pick[s];
        left.pow[s] = (uint8_t)(rest.pow[s] - pick[s]);
      }
      sp->cur[k] = part;
      split(sp, k + 1, left);
    }
    int s = 0;
    while (s < LM_SYM_MAX_SYMBOLS && pick[s] == rest.pow[s]) pick[s++] = 0;
    if (s == LM_SYM_MAX_SYMBOLS) return;
    pick[s]++;
  }
}

/* The product of dims [k0, k1) of node pos, when all are known. */
static bool group_product(infer *f, int pos, int k0, int k1, lm_sym_expr *prod) {
  *prod = lm_sym_const(1);
  for (int k = k0; k < k1; k++) {
    const lm_sym_expr *e = known_expr(f, slot(pos, k));
    if (!e || !sym_mul(prod, e, prod)) return false;
  }
  return true;
}

/* A reshape group's product over dims [k0, k1) of node `to` (of shape s): one
 * dim takes it; several take the parts of it their example sizes have, which
 * must be one way (reshape at node pos: the messages name it). */
static void distribute(infer *f, int pos, const lm_sym_expr *prod, int to, int k0, int k1,
                       const loom_shape *s) {
  if (k1 - k0 == 1) {
    set_expr(f, slot(to, k0), prod);
    return;
  }
  if (lm_sym_is_const(prod)) {
    for (int k = k0; k < k1; k++) {
      lm_sym_expr c = lm_sym_const(s->dim[k]);
      set_expr(f, slot(to, k), &c);
    }
    return;
  }
  char a[128];
  if (prod->nterms != 1) {
    fail_at(f, pos, "a reshape splits the dim %s%s, which is not a product",
            lm_sym_str(prod, f->names, a, sizeof a), "");
    return;
  }
  splitter sp = {.example = f->example, .sizes = &s->dim[k0], .nout = k1 - k0, .budget = 1 << 16};
  split(&sp, 0, prod->t[0]);
  if (sp.budget <= 0) {
    fail_at(f, pos, "a reshape splits %s in too many ways to try%s",
            lm_sym_str(prod, f->names, a, sizeof a), "");
    return;
  }
  if (sp.ways != 1) {
    fail_at(f, pos,
            sp.ways ? "a reshape splits %s in more than one way at these example sizes%s: trace "
                      "with distinct sizes for the symbols"
                    : "a reshape splits %s into dims that do not follow its symbols%s",
            lm_sym_str(prod, f->names, a, sizeof a), "");
    return;
  }
  for (int k = k0; k < k1; k++) {
    lm_sym_expr e = {.nterms = 1, .t = {sp.first[k - k0]}};
    set_expr(f, slot(to, k), &e);
  }
}

/* A reshape: dims grouped where the running products of the example sizes
 * meet; a group of one dim on either side maps through a product. */
static void infer_reshape(infer *f, int pos, const lm_node *n, int src_pos) {
  const loom_shape *in = &f->g->nodes[src_pos]->shape, *out = &n->shape;
  int i = 0, o = 0;
  while (i < in->ndim || o < out->ndim) {
    /* a size-1 dim is a group of its own */
    if (o < out->ndim && out->dim[o] == 1) {
      lm_sym_expr one = lm_sym_const(1);
      set_expr(f, slot(pos, o++), &one);
      continue;
    }
    if (i < in->ndim && in->dim[i] == 1) {
      i++;
      continue;
    }
    int i0 = i, o0 = o;
    int64_t pi = i < in->ndim ? in->dim[i++] : 1, po = o < out->ndim ? out->dim[o++] : 1;
    while (pi != po) {
      if (pi < po && i < in->ndim)
        pi *= in->dim[i++];
      else if (o < out->ndim)
        po *= out->dim[o++];
      else
        break;
    }
    if (pi != po) { /* only with zeros: no symbol can be told */
      for (; o0 < o; o0++) {
        lm_sym_expr c = lm_sym_const(out->dim[o0]);
        set_expr(f, slot(pos, o0), &c);
      }
      continue;
    }
    if (i - i0 == 1 && o - o0 == 1) {
      join(f, slot(src_pos, i0), slot(pos, o0));
      continue;
    }
    /* the group's product, from the side that is known, over the other
     * (a constant reshaped for a product whose rows follow a symbol learns
     * them backwards) */
    lm_sym_expr prod;
    if (group_product(f, src_pos, i0, i, &prod))
      distribute(f, pos, &prod, pos, o0, o, out);
    else if (group_product(f, pos, o0, o, &prod))
      distribute(f, pos, &prod, src_pos, i0, i, in);
  }
}

/* v within 1 of a traced size (from 3 up: small bounds are everywhere), or
 * of a half, third or quarter of it (from 2 up) */
static bool near_size(int64_t v, int64_t traced) {
  for (int64_t k = 1; k <= 4; k++)
    if (v >= (k == 1 ? 3 : 2) && v * k - traced <= 1 && traced - v * k <= 1) return true;
  return false;
}

static void infer_node(infer *f, int pos) {
  const lm_graph *g = f->g;
  const lm_node *n = g->nodes[pos];
  int nd = n->shape.ndim;
  if (lm_is_computed(n)) return; /* seeded */
  f->at = pos;
  int src[LM_CAT_MAX_SOURCES];
  for (int s = 0; s < n->nsrc && s < LM_CAT_MAX_SOURCES; s++) src[s] = lm_graph_pos(g, n->src[s]);
  switch (lm_op_info_of(n->op)->cls) {
  case LM_OPC_LEAF: /* CONST IOTA RAND: open, tied by their consumers */ return;
  case LM_OPC_ELEMENTWISE:
    for (int s = 0; s < n->nsrc; s++)
      if (g->nodes[src[s]]->shape.ndim == nd)
        for (int d = 0; d < nd; d++) join(f, slot(pos, d), slot(src[s], d));
    return;
  case LM_OPC_REDUCE:
    for (int d = 0; d < nd; d++) {
      if (n->arg.axes & (1u << d)) {
        lm_sym_expr one = lm_sym_const(1);
        set_expr(f, slot(pos, d), &one);
      } else {
        join(f, slot(pos, d), slot(src[0], d));
      }
    }
    return;
  case LM_OPC_LIBRARY: {
    if (lm_op_is_attention(n->op)) { /* q [.., Tq, D], k [.., Tk, D], v [.., Tk, Dv] */
      int nq = g->nodes[src[0]]->shape.ndim, inputs = n->arg.attn.mask ? 4 : 3;
      for (int d = 0; d < nq - 2; d++)
        for (int s = 1; s < n->nsrc; s++) join(f, slot(src[0], d), slot(src[s], d));
      join(f, slot(src[0], nq - 1), slot(src[1], nq - 1));
      join(f, slot(src[1], nq - 2), slot(src[2], nq - 2));
      if (inputs == 4) { /* the mask [.., Tq, Tk] */
        join(f, slot(src[3], nq - 2), slot(src[0], nq - 2));
        join(f, slot(src[3], nq - 1), slot(src[1], nq - 2));
      }
      for (int s = inputs; s < n->nsrc; s++) { /* the gradient's o and do [.., Tq, Dv] */
        join(f, slot(src[s], nq - 2), slot(src[0], nq - 2));
        join(f, slot(src[s], nq - 1), slot(src[2], nq - 1));
      }
      for (int d = 0; d < nq - 2; d++) join(f, slot(pos, d), slot(src[0], d));
      if (n->op == LM_ATTENTION) {
        join(f, slot(pos, nq - 2), slot(src[0], nq - 2));
        join(f, slot(pos, nq - 1), slot(src[2], nq - 1));
        return;
      }
      /* the gradient's [.., 3, max(Tq, Tk), max(D, Dv)]: each max is one of
       * its sizes where they are equal, or both fixed */
      lm_sym_expr three = lm_sym_const(3);
      set_expr(f, slot(pos, nq - 2), &three);
      for (int x = 0; x < 2; x++) {
        int a = x ? slot(src[0], nq - 1) : slot(src[0], nq - 2),
            b = x ? slot(src[2], nq - 1) : slot(src[1], nq - 2), out = slot(pos, nq - 1 + x);
        const lm_sym_expr *ea = known_expr(f, a), *eb = known_expr(f, b);
        if (!ea || !eb) continue;
        if (find(f, a) == find(f, b) || lm_sym_eq(ea, eb)) {
          join(f, out, a);
        } else if (lm_sym_is_const(ea) && lm_sym_is_const(eb)) {
          lm_sym_expr larger = lm_sym_const(concrete(f, out));
          set_expr(f, out, &larger);
        } else {
          char sa[128], sb[128];
          fail_at(f, pos,
                  "attention's fused gradient over sizes %s and %s: the larger of two different "
                  "symbolic sizes follows no polynomial (LOOM_ATTENTION=composite composes it)",
                  lm_sym_str(ea, f->names, sa, sizeof sa), lm_sym_str(eb, f->names, sb, sizeof sb));
          return;
        }
      }
      return;
    }
    for (int d = 0; d < nd - 2; d++) { /* [..., M, K] @ [..., K, N] */
      join(f, slot(pos, d), slot(src[0], d));
      join(f, slot(pos, d), slot(src[1], d));
    }
    join(f, slot(pos, nd - 2), slot(src[0], nd - 2));
    join(f, slot(pos, nd - 1), slot(src[1], nd - 1));
    join(f, slot(src[0], nd - 1), slot(src[1], nd - 2));
    return;
  }
  case LM_OPC_GATHER: { /* table [V, ..], indices S: S + table's dims after the first */
    int ni = g->nodes[src[1]]->shape.ndim;
    for (int d = 0; d < ni; d++) join(f, slot(pos, d), slot(src[1], d));
    for (int d = ni; d < nd; d++) join(f, slot(pos, d), slot(src[0], d - ni + 1));
    return;
  }
  case LM_OPC_COPY: return;
  case LM_OPC_COLLECTIVE: /* the source's dims; all_gather's axis, a join's total: fixed */
    for (int d = 0; d < nd && n->nsrc == 1; d++)
      if (n->op != LM_ALL_GATHER || d != n->arg.coll.axis) join(f, slot(pos, d), slot(src[0], d));
    return;
  case LM_OPC_SORT: /* the source's dims, but the last: k, or the row's length */
    for (int d = 0; d < nd - 1; d++) join(f, slot(pos, d), slot(src[0], d));
    if (n->arg.sort.full) {
      join(f, slot(pos, nd - 1), slot(src[0], nd - 1));
    } else {
      lm_sym_expr k = lm_sym_const(n->arg.sort.k);
      set_expr(f, slot(pos, nd - 1), &k);
    }
    return;
  case LM_OPC_SCAN:  /* the source's dims, the scanned one too */
  case LM_OPC_CHECK: /* the source itself (the others give the range their shapes) */
    for (int d = 0; d < nd; d++) join(f, slot(pos, d), slot(src[0], d));
    return;
  case LM_OPC_VIEW: break;
  }
  const lm_node *in = g->nodes[src[0]];
  switch (n->op) {
  case LM_RESHAPE: infer_reshape(f, pos, n, src[0]); return;
  case LM_PERMUTE:
    for (int d = 0; d < nd; d++) join(f, slot(pos, d), slot(src[0], n->arg.perm[d]));
    return;
  case LM_EXPAND: /* a broadcast dim is open */
    for (int d = 0; d < nd; d++)
      if (in->shape.dim[d] == n->shape.dim[d]) join(f, slot(pos, d), slot(src[0], d));
    return;
  case LM_SLICE:
    for (int d = 0; d < nd; d++) {
      int64_t start = n->arg.slice.start[d], step = n->arg.slice.step[d];
      int64_t len = n->shape.dim[d], from = in->shape.dim[d];
      bool start_rel = n->arg.slice.from_end[d] & LM_SLICE_START_FROM_END,
           stop_rel = n->arg.slice.from_end[d] & LM_SLICE_STOP_FROM_END;
      /* the whole dim, or the whole dim reversed from its last (a flip: its
       * start from the end follows the size too) */
      if (len == from &&
          ((start == 0 && step == 1) || (start_rel && step == -1 && start == from - 1))) {
        join(f, slot(pos, d), slot(src[0], d));
        continue;
      }
      const lm_sym_expr *e = known_expr(f, slot(src[0], d));
      /* a part of a fixed dim is open: its consumers may make its length a
       * symbol (the first t rows of a position table) */
      if (!e || lm_sym_is_const(e)) continue;
      lm_sym_expr out = lm_sym_const(len);
      bool to_end = step == 1 && start + len == from;
      /* bounds given from the end keep their distance from it (x[-1:], x[:-1]) */
      if (step != 1) { /* every step-th of t: ceil((t - start) / step), no polynomial */
        char a[128], b[32];
        snprintf(b, sizeof b, "%lld", (long long)step);
        fail_at(f, pos,
                "a slice over a dim of size %s with step %s: only unit steps (and a whole dim "
                "reversed, loom_flip's) can follow a symbol",
                lm_sym_str(e, f->names, a, sizeof a), b);
        return;
      }
      if (!lm_sym_is_const(e) && !f->numbers_checked) {
        /* a bound near the traced size, or a simple fraction of it, was likely
         * computed from it (the last row: start = t - 1; the first half: t / 2)
         * and would not follow it */
        int64_t near = !start_rel && near_size(start, from)                         ? start
                       : !to_end && !stop_rel && !start_rel && near_size(len, from) ? len
                                                                                    : -1;
        if (near >= 0) {
          char a[128], b[160];
          snprintf(b, sizeof b, "%lld (the dim is traced at %lld)", (long long)near,
                   (long long)from);
          fail_at(f, pos,
                  "a slice of a dim of size %s has a bound of %s: a bound computed from a "
                  "symbolic size would not follow it; slice to the end, or trace at a size far "
                  "from the slice's bounds",
                  lm_sym_str(e, f->names, a, sizeof a), b);
          return;
        }
      }
      if (start_rel || stop_rel) { /* stop - start, each from the end or fixed */
        lm_sym_expr lo = lm_sym_const(start), hi = lm_sym_const(start + len);
        lm_sym_expr lo_off = lm_sym_const(start - from), hi_off = lm_sym_const(start + len - from);
        lm_sym_expr minus_one = lm_sym_const(-1), neg;
        bool ok =
            (!start_rel || sym_add(e, &lo_off, &lo)) && (!stop_rel || sym_add(e, &hi_off, &hi));
        if (!stop_rel && to_end) hi = *e;
        if (!ok || !sym_mul(&lo, &minus_one, &neg) || !sym_add(&hi, &neg, &out))
          out = lm_sym_const(len);
      } else if (!lm_sym_is_const(e) && to_end) {
        lm_sym_expr minus = lm_sym_const(-start);
        if (!sym_add(e, &minus, &out)) out = lm_sym_const(len);
      }
      set_expr(f, slot(pos, d), &out);
    }
    return;
  case LM_PAD:
    for (int d = 0; d < nd; d++) {
      int64_t grow = n->shape.dim[d] - in->shape.dim[d];
      if (grow == 0) {
        join(f, slot(pos, d), slot(src[0], d));
        continue;
      }
      if (n->arg.pad.lo_from_end[d]) continue; /* open: its consumers give its size */
      const lm_sym_expr *e = known_expr(f, slot(src[0], d));
      lm_sym_expr more = lm_sym_const(grow), out;
      if (e && sym_add(e, &more, &out)) set_expr(f, slot(pos, d), &out);
    }
    return;
  case LM_CAT: {
    int ax = n->arg.axis;
    lm_sym_expr sum = lm_sym_const(0);
    bool all = true;
    for (int s = 0; s < n->nsrc; s++) {
      for (int d = 0; d < nd; d++)
        if (d != ax) join(f, slot(pos, d), slot(src[s], d));
      const lm_sym_expr *e = known_expr(f, slot(src[s], ax));
      if (!e || !sym_add(&sum, e, &sum)) all = false;
    }
    if (all) set_expr(f, slot(pos, ax), &sum);
    return;
  }
  case LM_WINDOW: { /* [.., H, W] -> [.., OH, OW, KH, KW] */
    int lead = in->shape.ndim - 2;
    for (int d = 0; d < lead; d++) join(f, slot(pos, d), slot(src[0], d));
    for (int d = lead; d < nd; d++) {
      const lm_sym_expr *e = d < lead + 2 ? known_expr(f, slot(src[0], d)) : NULL;
      if (e && !lm_sym_is_const(e)) {
        char a[128];
        fail_at(f, pos, "sliding windows over a dim of size %s%s: the window dims must be fixed",
                lm_sym_str(e, f->names, a, sizeof a), "");
        return;
      }
      if (d >= lead + 2 || e) {
        lm_sym_expr c = lm_sym_const(n->shape.dim[d]);
        set_expr(f, slot(pos, d), &c);
      }
    }
    return;
  }
  default: return;
  }
}

/* ------------------------------------------------------------ size-valued constants */

/* A mean divides its sum by a constant holding the count (frontend/reduce.c),
 * a variance by the count less its correction (frontend/reduce.c too):
 * DIV(RSUM(x), CONST), the sum maybe reshaped and the constant a broadcast
 * scalar, with the constant equal to the reduced dims' product, or that
 * less 1. That constant becomes the product's expression (less 1). */
static bool mean_count(const lm_graph *g, const lm_sym_expr *dims, const lm_node *n,
                       lm_sym_count *out) {
  if (n->op != LM_DIV) return false;
  const lm_node *sum = n->src[0], *c = n->src[1];
  while (sum->op == LM_RESHAPE) sum = sum->src[0];
  while (c->op == LM_RESHAPE || c->op == LM_EXPAND) c = c->src[0]; /* a scalar broadcast */
  if (sum->op != LM_RSUM || c->op != LM_CONST) return false;
  const lm_node *x = sum->src[0];
  int xpos = lm_graph_pos(g, x);
  lm_sym_expr count = lm_sym_const(1);
  int64_t concrete_count = 1;
  for (int d = 0; d < x->shape.ndim; d++) {
    if (!(sum->arg.axes & (1u << d))) continue;
    concrete_count *= x->shape.dim[d];
    if (!sym_mul(&count, &dims[slot(xpos, d)], &count)) return false;
  }
  double less = (double)concrete_count - c->arg.f;
  /* (over fixed dims too: the count then stays as it is, and a 6 is not
     taken for a symbol traced at 5) */
  if (!(less == 0 || less == 1)) return false;
  lm_sym_expr correction = lm_sym_const(-(int64_t)less);
  if (!sym_add(&count, &correction, &out->value)) return false;
  out->pos = lm_graph_pos(g, c);
  return true;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The traced sizes of symbolic dims, and one more or less: what a constant
 * computed from one would hold (from 3 up: 1, 2 and 0.5 are everywhere).
 * sizes: the traced sizes of symbolic dims, sorted; *near: the one v is near. */
static bool is_symbolic_size(const int64_t *sizes, int nsizes, double v, int64_t *near) {
  if (!(v >= 3 && v <= 9007199254740992.0) || v != floor(v)) return false;
  for (int64_t k = (int64_t)v - 1; k <= (int64_t)v + 1; k++)
    if (bsearch(&k, sizes, (size_t)nsizes, sizeof *sizes, cmp_i64)) {
      *near = k;
      return true;
    }
  return false;
}

static loom_status find_counts(const lm_graph *g, const char *const *names, const lm_sym_expr *dims,
                               lm_sym_count *counts, int *ncounts, bool numbers_checked, char *err,
                               size_t errlen) {
  *ncounts = 0;
  int64_t *sizes = malloc(sizeof *sizes * ((size_t)g->n * LOOM_MAX_DIMS + 1));
  if (!sizes) {
    snprintf(err, errlen, "out of memory");
    return LOOM_ERR_OOM;
  }
  int nsizes = 0;
  for (int pos = 0; pos < g->n; pos++)
    for (int d = 0; d < g->nodes[pos]->shape.ndim; d++)
      if (!lm_sym_is_const(&dims[slot(pos, d)])) sizes[nsizes++] = g->nodes[pos]->shape.dim[d];
  qsort(sizes, (size_t)nsizes, sizeof *sizes, cmp_i64);
  for (int pos = 0; pos < g->n; pos++) {
    lm_sym_count c;
    if (mean_count(g, dims, g->nodes[pos], &c)) {
      bool seen = false;
      for (int i = 0; i < *ncounts && !seen; i++) seen = counts[i].pos == c.pos;
      if (!seen) counts[(*ncounts)++] = c;
    }
  }
  for (int pos = 0; pos < g->n && !numbers_checked; pos++) {
    const lm_node *n = g->nodes[pos];
    /* the values a node holds besides its sizes: a constant's, an arange's
     * start (a position offset), clamp bounds, a pad's value */
    double values[2];
    int nvalues = 0;
    const char *what = "a constant";
    if (n->op == LM_CONST) {
      bool counted = false;
      for (int i = 0; i < *ncounts && !counted; i++) counted = counts[i].pos == pos;
      if (!counted) values[nvalues++] = n->arg.f;
    } else if (n->op == LM_IOTA && !n->arg.iota.from_end) { /* (from the end: it follows) */
      values[nvalues++] = n->arg.iota.start, what = "an arange's start";
    } else if (n->op == LM_CLAMP) {
      values[nvalues++] = n->arg.clamp.lo, values[nvalues++] = n->arg.clamp.hi,
      what = "a clamp bound";
    } else if (n->op == LM_PAD) {
      values[nvalues++] = n->arg.pad.value, what = "a pad value";
    }
    for (int k = 0; k < nvalues; k++) {
      double v = fabs(values[k]);
      int64_t near = 0;
      if (!(is_symbolic_size(sizes, nsizes, v, &near) ||
            (v > 0 && is_symbolic_size(sizes, nsizes, 1 / v, &near))))
        continue;
      free(sizes);
      char dim[128] = "?"; /* the symbolic dim it is near, by name */
      for (int q = 0; q < g->n * LOOM_MAX_DIMS && dim[0] == '?'; q++)
        if (q % LOOM_MAX_DIMS < g->nodes[q / LOOM_MAX_DIMS]->shape.ndim &&
            !lm_sym_is_const(&dims[q]) &&
            g->nodes[q / LOOM_MAX_DIMS]->shape.dim[q % LOOM_MAX_DIMS] == near)
          lm_sym_str(&dims[q], names, dim, sizeof dim);
      snprintf(err, errlen,
               "%s %.17g (at node %d, %s%s%s) is within 1 of the traced size of a symbolic dim "
               "(%s, traced at %lld), or of its reciprocal: a value computed from a symbolic size "
               "(other than a mean's or a variance's count) would not follow it. Trace at sizes "
               "no value of the graph is near",
               what, values[k], pos, lm_op_name(n->op), n->made_by ? ", recorded by " : "",
               n->made_by ? n->made_by : "", dim, (long long)near);
      return LOOM_ERR_SHAPE;
    }
  }
  free(sizes);
  return LOOM_OK;
}

static void propagate(infer *f) {
  for (int pass = 0; pass < 64 && !f->failed; pass++) {
    f->changed = false;
    for (int pos = 0; pos < f->g->n && !f->failed; pos++) infer_node(f, pos);
    if (!f->changed) break;
  }
}

/* Whether a symbol (its input maybe outside the graph: a program whose
 * output only has its shape) or a symbolic class is v at the traced sizes:
 * *like its expression. */
static bool symbolic_traced_at(infer *f, int nsym, int64_t v, lm_sym_expr *like) {
  for (int s = 0; s < nsym; s++)
    if (f->example[s] == v) {
      *like = lm_sym_symbol(s);
      return true;
    }
  for (int s = 0; s < f->g->n * LOOM_MAX_DIMS; s++)
    if (f->parent[s] == s && f->known[s] && !lm_sym_is_const(&f->expr[s]) &&
        example_of(f, &f->expr[s]) == v) {
      *like = f->expr[s];
      return true;
    }
  return false;
}

static bool all_known(infer *f, int pos) {
  for (int d = 0; d < f->g->nodes[pos]->shape.ndim; d++)
    if (!f->known[find(f, slot(pos, d))]) return false;
  return true;
}

loom_status lm_sym_infer(const lm_graph *g, const char *const *names, const int64_t *example,
                         int nsym, const lm_sym_seed *seeds, int nseeds, bool numbers_checked,
                         lm_sym_expr *dims, lm_sym_count *counts, int *ncounts, char *err,
                         size_t errlen) {
  if (g->n > LM_SYM_MAX_NODES) {
    snprintf(err, errlen, "the graph has %d nodes; a symbolic program has at most %d", g->n,
             LM_SYM_MAX_NODES);
    return LOOM_ERR_VALUE;
  }
  int nslots = g->n * LOOM_MAX_DIMS;
  infer f = {.g = g,
             .names = names,
             .example = example,
             .at = -1,
             .err = err,
             .errlen = errlen,
             .numbers_checked = numbers_checked};
  f.parent = malloc(sizeof(int) * (size_t)(nslots + 1));
  f.known = calloc((size_t)nslots + 1, sizeof(bool));
  f.expr = calloc((size_t)nslots + 1, sizeof(lm_sym_expr));
  f.origin = malloc(sizeof(int) * (size_t)(nslots + 1));
  f.derived = calloc((size_t)nslots + 1, sizeof(bool));
  if (!f.parent || !f.known || !f.expr || !f.origin || !f.derived) {
    free(f.parent), free(f.known), free(f.expr), free(f.origin), free(f.derived);
    snprintf(err, errlen, "out of memory");
    return LOOM_ERR_OOM;
  }
  for (int s = 0; s < nslots; s++) f.parent[s] = s;
  for (int pos = 0; pos < g->n; pos++) { /* sizes the graph may have computed */
    const lm_node *n = g->nodes[pos];
    bool leaf = !lm_is_computed(n) && lm_op_info_of(n->op)->cls == LM_OPC_LEAF;
    for (int d = 0; d < n->shape.ndim && !lm_is_computed(n); d++)
      f.derived[slot(pos, d)] = (leaf && !(n->fixed_dims & (1u << d))) ||
                                (n->op == LM_EXPAND && n->src[0]->shape.dim[d] != n->shape.dim[d]);
  }
  /* leaves with data and inputs: their sizes, or the symbols named on them;
   * input-free leaves the user sized (loom_ones(shape)): those sizes, fixed
   * (a lazy family's user code sizes them anew at each size: open there) */
  for (int pos = 0; pos < g->n; pos++) {
    const lm_node *n = g->nodes[pos];
    bool user_sized = !lm_is_computed(n) && !numbers_checked &&
                      lm_op_info_of(n->op)->cls == LM_OPC_LEAF && n->fixed_dims;
    if (!lm_is_computed(n) && !user_sized) continue;
    for (int d = 0; d < n->shape.ndim; d++) {
      if (user_sized && !(n->fixed_dims & (1u << d))) continue;
      lm_sym_expr c = lm_sym_const(n->shape.dim[d]);
      for (int i = 0; i < nseeds; i++)
        if (seeds[i].pos == pos && seeds[i].axis == d) c = lm_sym_symbol(seeds[i].symbol);
      set_expr(&f, slot(pos, d), &c);
    }
  }
  for (int i = 0; i < nseeds; i++) /* seeds at nodes (a slice's length: lazy families) */
    if (!lm_is_computed(g->nodes[seeds[i].pos])) {
      lm_sym_expr c = lm_sym_symbol(seeds[i].symbol);
      set_expr(&f, slot(seeds[i].pos, seeds[i].axis), &c);
    }
  /* to a fixed point; then what stays open is a fixed size: the first open
   * node's dims first, and to a fixed point again, so that what follows from
   * them (a reshape merging a symbol with a slice of a fixed dim) is derived
   * from them rather than fixed at its traced size too */
  propagate(&f);
  for (int first = 0; !f.failed;) {
    while (first < g->n && all_known(&f, first)) first++;
    if (first == g->n) break;
    f.at = first;
    for (int d = 0; d < g->nodes[first]->shape.ndim && !f.failed; d++) {
      int s = slot(first, d);
      if (f.known[find(&f, s)]) continue;
      /* a size no input gives that a symbolic dim has at the traced sizes was
       * likely computed from it (a flip's, a cumsum's length inside the op):
       * fixed, it would keep the traced value */
      lm_sym_expr like;
      if (!numbers_checked && f.derived[find(&f, s)] &&
          symbolic_traced_at(&f, nsym, concrete(&f, s), &like)) {
        char a[160], b[128];
        snprintf(a, sizeof a, "dim %d, of size %lld,", d, (long long)concrete(&f, s));
        fail_at(&f, first,
                "%s follows no input's size yet equals %s at the traced sizes: a size computed "
                "from a symbolic dim would keep its traced value at other sizes. Make it follow "
                "the symbol, or trace at sizes it does not equal",
                a, lm_sym_str(&like, names, b, sizeof b));
        break;
      }
      lm_sym_expr c = lm_sym_const(concrete(&f, s));
      set_expr(&f, s, &c);
    }
    propagate(&f);
  }
  /* every dim has its expression, and it gives the example's size */
  for (int pos = 0; pos < g->n && !f.failed; pos++)
    for (int d = 0; d < LOOM_MAX_DIMS; d++) {
      int s = slot(pos, d);
      if (d >= g->nodes[pos]->shape.ndim) {
        dims[s] = lm_sym_const(0);
        continue;
      }
      const lm_sym_expr *e = known_expr(&f, s);
      if (!e || example_of(&f, e) != concrete(&f, s)) {
        char a[128], b[32];
        snprintf(b, sizeof b, "%lld", (long long)concrete(&f, s));
        fail_at(&f, pos, e ? "dim %s does not give the traced size %s" : "a dim%s has no size%s",
                e ? lm_sym_str(e, names, a, sizeof a) : "", e ? b : "");
        break;
      }
      if (!lm_sym_is_const(e) && concrete(&f, s) < 2) { /* t - 1 traced at t = 2 */
        char a[128], b[32];
        snprintf(b, sizeof b, "%lld", (long long)concrete(&f, s));
        fail_at(&f, pos,
                "dim %s is %s at the traced sizes: a size of 0 or 1 there cannot be told from a "
                "broadcast or an empty tensor; trace at larger sizes",
                lm_sym_str(e, names, a, sizeof a), b);
        break;
      }
      dims[s] = *e;
    }
  free(f.parent), free(f.known), free(f.expr), free(f.origin), free(f.derived);
  if (f.failed) return LOOM_ERR_SHAPE;
  return find_counts(g, names, dims, counts, ncounts, numbers_checked, err, errlen);
}
