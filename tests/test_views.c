/* Every op on non-contiguous inputs (permuted, sliced with step, expanded, padded,
 * reshaped after permute, chains of views), with size-0 and size-1 dims. */
#include <string.h>

#include "check.h"
#include "loom.h"
#include "ref.h"
#include "test_device.h"

static const loom_shape vshapes[] = {
    LOOM_SHAPE(3, 4), LOOM_SHAPE(2, 1, 5), LOOM_SHAPE(2, 0, 3), LOOM_SHAPE(1, 1),
    LOOM_SHAPE(4),    LOOM_SHAPE(1),       LOOM_SHAPE(0),       LOOM_SHAPE(5, 2, 3),
};
#define NVS ((int)(sizeof vshapes / sizeof vshapes[0]))

static void test_elementwise_on_views(void) {
  const int un[] = {0, 2, 10, 13, 15, 11}; /* neg exp relu square logical_not gelu */
  const loom_dtype dts[] = {LOOM_F32, LOOM_I32, LOOM_F64, LOOM_U8, LOOM_I64, LOOM_BOOL};
  int k = 0;
  for (int v = 1; v < V_NUM; v++)
    for (int si = 0; si < NVS; si++, k++) {
      /* unary ops */
      const ref_unop_case *c = &ref_unops[un[k % 6]];
      loom_dtype d = dts[(k / 6 + k) % 6];
      if (d == LOOM_BOOL && (c->skip_bool || c->op == REF_NEG)) d = LOOM_F32;
      check_unary(c, d, vshapes[si], (ref_view)v);
      /* binary ops: both sides views, same shape */
      const ref_binop_case *b = &ref_binops[(k * 4) % REF_NUM_BINOP_CASES];
      loom_dtype bd = dts[(k + 1) % 5];
      check_binary(b, bd, bd, vshapes[si], vshapes[si], (ref_view)v, (ref_view)((v + k) % V_NUM));
      /* broadcasting against a view: [.., 1] contiguous against the view */
      loom_shape s1 = vshapes[si];
      if (s1.ndim > 0) s1.dim[s1.ndim - 1] = 1;
      if (k % 2)
        check_binary(&ref_binops[0], LOOM_F32, LOOM_F32, s1, vshapes[si], V_CONTIG, (ref_view)v);
      else
        check_binary(&ref_binops[2], LOOM_I64, LOOM_F32, vshapes[si], s1, (ref_view)v, (ref_view)v);
      /* scalar forms */
      if (k % 2)
        check_binary_s("add_s", loom_add_s, NULL, REF_ADD, DOM_ANY, REF_TOL_SIMPLE, LOOM_I32,
                       vshapes[si], 0.5, (ref_view)v);
      else
        check_binary_s("rsub_s", NULL, loom_rsub_s, REF_SUB, DOM_ANY, REF_TOL_SIMPLE, LOOM_F64,
                       vshapes[si], 2, (ref_view)v);
    }
}

static void test_where_cast_on_views(void) {
  for (int v = 1; v < V_NUM; v++)
    for (int si = 0; si < NVS; si += 2) {
      char what[128], b[32];
      loom_shape s = vshapes[si];
      snprintf(what, sizeof what, "where %s view=%s", ref_shape_str(s, b, 32), ref_view_names[v]);
      ref_t *c, *x, *y;
      loom_tensor *tc = ref_make_input(s, LOOM_BOOL, DOM_ANY, (ref_view)v, &c);
      loom_tensor *tx = ref_make_input(s, LOOM_F32, DOM_ANY, (ref_view)((v + 1) % V_NUM), &x);
      loom_tensor *ty = ref_make_input(s, LOOM_I32, DOM_ANY, (ref_view)v, &y);
      ref_t *e = ref_where(c, x, y);
      REF_CHECK(what, e, TK(loom_where(tc, tx, ty)), 0, 0);
      ref_free(e);
      snprintf(what, sizeof what, "cast F32->I32 %s view=%s", ref_shape_str(s, b, 32),
               ref_view_names[v]);
      e = ref_cast(x, LOOM_I32);
      REF_CHECK(what, e, TK(loom_cast(tx, LOOM_I32)), 0, 0);
      ref_free(e);
      snprintf(what, sizeof what, "cast BOOL->F64 %s view=%s", ref_shape_str(s, b, 32),
               ref_view_names[v]);
      e = ref_cast(c, LOOM_F64);
      REF_CHECK(what, e, TK(loom_cast(tc, LOOM_F64)), 0, 0);
      ref_free(e);
      ref_free(c), ref_free(x), ref_free(y);
      ref_release_all();
    }
}

static void test_reductions_on_views(void) {
  const int ax0[] = {0}, axm1[] = {-1}, ax01[] = {0, 1};
  int k = 0;
  for (int v = 1; v < V_NUM; v++)
    for (int si = 0; si < NVS; si++, k++) {
      loom_shape s = vshapes[si];
      if (s.ndim == 0) continue;
      bool has_empty = ref_shape_numel(s) == 0;
      loom_dtype d = (k % 3 == 0) ? LOOM_I32 : (k % 3 == 1 ? LOOM_F32 : LOOM_F64);
      check_reduce(RK_SUM, d, s, (ref_view)v, DOM_ANY, k % 2 ? axm1 : ax0, 1, k % 4 < 2, LOOM_OK);
      if (s.ndim >= 2) check_reduce(RK_SUM, d, s, (ref_view)v, DOM_ANY, ax01, 2, false, LOOM_OK);
      check_reduce(RK_SUM_ALL, d, s, (ref_view)v, DOM_ANY, NULL, 0, false, LOOM_OK);
      /* max/argmax over an axis that is not empty */
      int ax = -1;
      if (s.dim[s.ndim - 1] == 0) ax = 0;
      if (s.dim[ax < 0 ? s.ndim - 1 : 0] > 0) {
        check_reduce(RK_MAX, d, s, (ref_view)v, DOM_QUANT, &ax, 1, k % 2, LOOM_OK);
        check_reduce(RK_ARGMAX, d, s, (ref_view)v, DOM_QUANT, &ax, 1, k % 2, LOOM_OK);
        check_reduce(RK_ARGMIN, d, s, (ref_view)v, DOM_QUANT, &ax, 1, false, LOOM_OK);
      }
      if (d != LOOM_I32 || !has_empty) {
        check_reduce(RK_SOFTMAX, d, s, (ref_view)v, DOM_ANY, axm1, 1, false, LOOM_OK);
        check_reduce(RK_LOGSUMEXP, d == LOOM_I32 ? LOOM_F32 : d, s, (ref_view)v, DOM_ANY, ax0, 1,
                     false, LOOM_OK);
      }
      if (d != LOOM_I32) check_reduce(RK_MEAN, d, s, (ref_view)v, DOM_ANY, ax0, 1, true, LOOM_OK);
    }
}

/* Shape ops applied to views: the result of a view of a view. */
static void test_views_of_views(void) {
  for (int v = 0; v < V_NUM; v++)
    for (int si = v % 2; si < NVS; si += 2) {
      loom_shape s = vshapes[si];
      int n = s.ndim;
      if (n == 0) continue;
      char what[160], b[32];
      ref_t *x;
      loom_dtype d = (v + si) % 2 ? LOOM_F32 : LOOM_I64;
      loom_tensor *tx = ref_make_input(s, d, DOM_ANY, (ref_view)v, &x);
      const char *vn = ref_view_names[v];
      ref_shape_str(s, b, 32);
#define VCHECK(label, e, t)                                                                        \
  do {                                                                                             \
    ref_t *e_ = (e);                                                                               \
    snprintf(what, sizeof what, "%s of %s%s", label, vn, b);                                       \
    REF_CHECK(what, e_, TK(t), 0, 0);                                                              \
    ref_free(e_);                                                                                  \
  } while (0)
      VCHECK("reshape(-1)", ref_reshape(x, LOOM_SHAPE(-1)), loom_reshape(tx, LOOM_SHAPE(-1)));
      VCHECK("contiguous", ref_contiguous(x), loom_contiguous(tx));
      VCHECK("slice(-1, 0, end, 2)", ref_slice(x, -1, 0, 100, 2), loom_slice(tx, -1, 0, 100, 2));
      VCHECK("slice(0, -2, end, 1)", ref_slice(x, 0, -2, s.dim[0], 1),
             loom_slice(tx, 0, -2, s.dim[0], 1));
      int64_t pads[4] = {2, 1, 1, 0};
      VCHECK("pad", ref_pad(x, pads, n >= 2 ? 4 : 2, -1), loom_pad(tx, pads, n >= 2 ? 4 : 2, -1));
      int64_t crop[2] = {-1, 0};
      if (s.dim[n - 1] > 0) VCHECK("pad crop", ref_pad(x, crop, 2, 0), loom_pad(tx, crop, 2, 0));
      VCHECK("unsqueeze(1)", ref_unsqueeze(x, 1), loom_unsqueeze(tx, 1));
      VCHECK("flatten", ref_flatten(x, 0, -1), loom_flatten(tx, 0, -1));
      if (n >= 2) {
        VCHECK("transpose", ref_transpose(x, 0, -1), loom_transpose(tx, 0, -1));
        ref_t *tr = ref_transpose(x, 0, 1);
        loom_tensor *ttr = TK(loom_transpose(tx, 0, 1));
        VCHECK("reshape(transpose)", ref_reshape(tr, LOOM_SHAPE(-1)),
               loom_reshape(ttr, LOOM_SHAPE(-1)));
        VCHECK("slice(transpose)", ref_slice(tr, 0, 1, 100, 2), loom_slice(ttr, 0, 1, 100, 2));
        VCHECK("exp-free add(transpose, 1)", ref_add_s(tr, 1), loom_add_s(ttr, 1));
        ref_free(tr);
        VCHECK("flatten(1,-1)", ref_flatten(x, 1, -1), loom_flatten(tx, 1, -1));
      }
      /* expand a size-1 slice of the view */
      ref_t *sl = ref_slice(x, 0, 0, 1, 1);
      loom_tensor *tsl = TK(loom_slice(tx, 0, 0, 1, 1));
      loom_shape es = s;
      es.dim[0] = 3;
      if (s.dim[0] > 0) VCHECK("expand(slice)", ref_expand(sl, es), loom_expand(tsl, es));
      ref_free(sl);
      /* cat of a view with itself and a contiguous tensor */
      {
        ref_t *y;
        loom_tensor *ty = ref_make_input(s, d, DOM_ANY, V_CONTIG, &y);
        const ref_t *rs[3] = {x, y, x};
        loom_tensor *ts[3] = {tx, ty, tx};
        VCHECK("cat(v, c, v)", ref_cat(rs, 3, -1), loom_cat(ts, 3, -1));
        VCHECK("stack(v, c)", ref_stack(rs, 2, 0), loom_stack(ts, 2, 0));
        ref_free(y);
      }
#undef VCHECK
      ref_free(x);
      ref_release_all();
    }
}

static void test_matmul_on_views(void) {
  const loom_dtype dts[] = {LOOM_F32, LOOM_F64, LOOM_I32, LOOM_I64};
  for (int v = 1; v < V_NUM; v++)
    for (int di = 0; di < 4; di++) {
      if ((v + di) % 2) continue;
      check_matmul(dts[di], LOOM_SHAPE(4, 3), LOOM_SHAPE(3, 5), (ref_view)v, V_CONTIG);
      check_matmul(dts[di], LOOM_SHAPE(2, 4, 3), LOOM_SHAPE(3, 2), V_CONTIG, (ref_view)v);
      check_matmul(dts[di], LOOM_SHAPE(1, 3), LOOM_SHAPE(3, 1), (ref_view)v, (ref_view)v);
      check_matmul(dts[di], LOOM_SHAPE(3), LOOM_SHAPE(3, 2), (ref_view)v, (ref_view)v);
      check_matmul(dts[di], LOOM_SHAPE(0, 3), LOOM_SHAPE(3, 2), (ref_view)v, (ref_view)v);
    }
}

/* Explicit chains of views with known results (arange data). */
static void test_view_chains(void) {
  ref_t *x = ref_arange(0, 120, 1, LOOM_F32);
  loom_tensor *tx = TK(loom_arange(0, 120, 1, LOOM_F32, test_device()));
  ref_t *r1 = ref_reshape(x, LOOM_SHAPE(2, 3, 4, 5));
  loom_tensor *t1 = TK(loom_reshape(tx, LOOM_SHAPE(2, 3, 4, 5)));
  const int p[] = {3, 1, 0, 2};
  ref_t *r2 = ref_permute(r1, p, 4);
  loom_tensor *t2 = TK(loom_permute(t1, p, 4));
  ref_t *r3 = ref_slice(r2, 0, 1, 5, 2); /* [2,3,2,4] */
  loom_tensor *t3 = TK(loom_slice(t2, 0, 1, 5, 2));
  ref_t *r4 = ref_slice(r3, -1, -3, 100, 2); /* [2,3,2,2] */
  loom_tensor *t4 = TK(loom_slice(t3, -1, -3, 100, 2));
  ref_t *r5 = ref_transpose(r4, 1, 3);
  loom_tensor *t5 = TK(loom_transpose(t4, 1, 3));
  ref_t *r6 = ref_reshape(r5, LOOM_SHAPE(4, -1));
  loom_tensor *t6 = TK(loom_reshape(t5, LOOM_SHAPE(4, -1)));
  int64_t pads[] = {1, 1, -1, 0};
  ref_t *r7 = ref_pad(r6, pads, 4, 0.5);
  loom_tensor *t7 = TK(loom_pad(t6, pads, 4, 0.5));
  ref_t *r8 = ref_unsqueeze(r7, 1);
  loom_tensor *t8 = TK(loom_unsqueeze(t7, 1));
  ref_t *r9 = ref_expand(r8, LOOM_SHAPE(2, 3, 4, 8));
  loom_tensor *t9 = TK(loom_expand(t8, LOOM_SHAPE(2, 3, 4, 8)));
  REF_CHECK("chain reshape", r1, t1, 0, 0);
  REF_CHECK("chain permute", r2, t2, 0, 0);
  REF_CHECK("chain slice", r3, t3, 0, 0);
  REF_CHECK("chain slice 2", r4, t4, 0, 0);
  REF_CHECK("chain transpose", r5, t5, 0, 0);
  REF_CHECK("chain reshape after views", r6, t6, 0, 0);
  REF_CHECK("chain pad", r7, t7, 0, 0);
  REF_CHECK("chain unsqueeze", r8, t8, 0, 0);
  REF_CHECK("chain expand", r9, t9, 0, 0);
  const int ax[] = {1, 3};
  ref_t *r10 = ref_sum(r9, ax, 2, true);
  REF_CHECK("chain sum of expanded", r10, TK(loom_sum(t9, ax, 2, true)), 1e-6, 1e-6);
  ref_t *r11 = ref_mul(r9, r9);
  REF_CHECK("chain expanded * expanded", r11, TK(loom_mul(t9, t9)), 0, 0);
  /* a view of a computed (unrealized) tensor, then a view of a realized one */
  loom_tensor *c = TK(loom_mul_s(t1, 2));
  ref_t *rc = ref_mul_s(r1, 2), *rcv = ref_slice(rc, 2, 1, 4, 2), *rcvt = ref_transpose(rcv, 0, -1);
  loom_tensor *cv = TK(loom_transpose(TK(loom_slice(c, 2, 1, 4, 2)), 0, -1));
  REF_CHECK("view of computed", rcvt, cv, 0, 0);
  CHECK_OK(loom_realize(c));
  loom_tensor *cv2 = TK(loom_transpose(TK(loom_slice(c, 2, 1, 4, 2)), 0, -1));
  REF_CHECK("view of realized", rcvt, cv2, 0, 0);
  ref_t *all[] = {x, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, rc, rcv, rcvt};
  for (int i = 0; i < (int)(sizeof all / sizeof all[0]); i++) ref_free(all[i]);
  ref_release_all();
}

/* size-0 and size-1 dims through everything. */
static void test_degenerate(void) {
  const loom_shape z[] = {LOOM_SHAPE(0), LOOM_SHAPE(0, 3),    LOOM_SHAPE(3, 0), LOOM_SHAPE(1, 0, 1),
                          LOOM_SHAPE(1), LOOM_SHAPE(1, 1, 1), LOOM_SHAPE0};
  for (int i = 0; i < 7; i++) {
    loom_shape s = z[i];
    check_unary(&ref_unops[2], LOOM_F32, s, V_CONTIG);
    check_binary(&ref_binops[0], LOOM_I32, LOOM_I32, s, s, V_CONTIG, V_CONTIG);
    check_binary(&ref_binops[7], LOOM_F32, LOOM_F32, s, LOOM_SHAPE(1), V_CONTIG, V_CONTIG);
    check_reduce(RK_SUM_ALL, LOOM_F32, s, V_CONTIG, DOM_ANY, NULL, 0, false, LOOM_OK);
    check_reduce(RK_SUM, LOOM_I64, s, V_CONTIG, DOM_ANY, NULL, 0, true, LOOM_OK);
    if (s.ndim > 0) {
      const int ax[] = {-1};
      check_reduce(RK_SUM, LOOM_F64, s, V_CONTIG, DOM_ANY, ax, 1, false, LOOM_OK);
      if (s.dim[s.ndim - 1] > 0)
        check_reduce(RK_MAX, LOOM_F32, s, V_CONTIG, DOM_ANY, ax, 1, true, LOOM_OK);
    }
  }
}

/* Random chains of view, elementwise and reduction ops (fusion across views),
 * checked against the reference at the end and at one realized midpoint. */
typedef struct pair {
  loom_tensor *t;
  ref_t *r;
} pair;

static pair chain_step(pair x, int op, char *log, size_t logn) {
  pair y = {NULL, NULL};
  int n = x.r->shape.ndim;
  loom_shape s = x.r->shape;
  size_t used = strlen(log);
  switch (op) {
  case 0: { /* permute: rotate axes */
    if (n < 2) break;
    int p[LOOM_MAX_DIMS];
    for (int i = 0; i < n; i++) p[i] = (i + 1) % n;
    y.t = TK(loom_permute(x.t, p, n)), y.r = ref_permute(x.r, p, n);
    snprintf(log + used, logn - used, " permute");
    break;
  }
  case 1: { /* slice with a step along a random axis */
    if (n < 1) break;
    int ax = (int)ref_rand_int(0, n - 1);
    int64_t st = ref_rand_int(0, 1), step = ref_rand_int(1, 3);
    y.t = TK(loom_slice(x.t, ax, st, s.dim[ax], step)),
    y.r = ref_slice(x.r, ax, st, s.dim[ax], step);
    snprintf(log + used, logn - used, " slice(%d,%lld,:,%lld)", ax, (long long)st, (long long)step);
    break;
  }
  case 2: { /* elementwise with a broadcast partner */
    loom_shape ps = s;
    for (int i = 0; i < n; i++)
      if (ref_rand_int(0, 2) == 0) ps.dim[i] = 1;
    ref_t *r2 = ref_gen(ps, LOOM_F32, DOM_ANY);
    loom_tensor *t2 = TK(ref_to_loom(r2));
    int which = (int)ref_rand_int(0, 2);
    if (which == 0)
      y.t = TK(loom_add(x.t, t2)), y.r = ref_add(x.r, r2);
    else if (which == 1)
      y.t = TK(loom_mul(t2, x.t)), y.r = ref_mul(r2, x.r);
    else
      y.t = TK(loom_maximum(x.t, t2)), y.r = ref_maximum(x.r, r2);
    ref_free(r2);
    snprintf(log + used, logn - used, " binop%d", which);
    break;
  }
  case 3: { /* unary */
    int which = (int)ref_rand_int(0, 2);
    if (which == 0)
      y.t = TK(loom_tanh(x.t)), y.r = ref_tanh(x.r);
    else if (which == 1)
      y.t = TK(loom_neg(x.t)), y.r = ref_neg(x.r);
    else
      y.t = TK(loom_mul_s(x.t, 0.5)), y.r = ref_mul_s(x.r, 0.5);
    snprintf(log + used, logn - used, " unary%d", which);
    break;
  }
  case 4: { /* pad (possibly cropping) the last axis */
    if (n < 1) break;
    int64_t pads[2] = {ref_rand_int(0, 2), s.dim[n - 1] > 1 ? -1 : 1};
    y.t = TK(loom_pad(x.t, pads, 2, 0.25)), y.r = ref_pad(x.r, pads, 2, 0.25);
    snprintf(log + used, logn - used, " pad(%lld,%lld)", (long long)pads[0], (long long)pads[1]);
    break;
  }
  case 5: { /* reshape: merge the first two axes, or split the first */
    if (n >= 2 && ref_rand_int(0, 1)) {
      y.t = TK(loom_flatten(x.t, 0, 1)), y.r = ref_flatten(x.r, 0, 1);
      snprintf(log + used, logn - used, " flatten01");
    } else if (n >= 1 && n < 5 && s.dim[0] % 2 == 0 && s.dim[0] > 0) {
      loom_shape ns = {n + 1, {0}};
      ns.dim[0] = 2, ns.dim[1] = s.dim[0] / 2;
      for (int i = 1; i < n; i++) ns.dim[i + 1] = s.dim[i];
      y.t = TK(loom_reshape(x.t, ns)), y.r = ref_reshape(x.r, ns);
      snprintf(log + used, logn - used, " split0");
    }
    break;
  }
  case 6: { /* expand a new leading dim, or a size-1 dim */
    if (n >= 5) break;
    loom_shape ns = {n + 1, {0}};
    ns.dim[0] = 2;
    for (int i = 0; i < n; i++) ns.dim[i + 1] = s.dim[i] == 1 ? 3 : -1;
    y.t = TK(loom_expand(x.t, ns)), y.r = ref_expand(x.r, ns);
    snprintf(log + used, logn - used, " expand");
    break;
  }
  case 7: { /* reduce an axis */
    if (n < 2) break;
    int ax = (int)ref_rand_int(-n, n - 1);
    bool kd = ref_rand_int(0, 1);
    if (ref_rand_int(0, 1))
      y.t = TK(loom_sum(x.t, &ax, 1, kd)), y.r = ref_sum(x.r, &ax, 1, kd);
    else if (s.dim[ax < 0 ? ax + n : ax] > 0)
      y.t = TK(loom_max(x.t, &ax, 1, kd)), y.r = ref_max(x.r, &ax, 1, kd);
    snprintf(log + used, logn - used, " reduce(%d,%d)", ax, kd);
    break;
  }
  default: break;
  }
  return y;
}

static void test_random_chains(void) {
  const loom_shape starts[] = {LOOM_SHAPE(4, 6), LOOM_SHAPE(3, 1, 5), LOOM_SHAPE(8),
                               LOOM_SHAPE(2, 3, 4), LOOM_SHAPE(1, 6)};
  for (int c = 0; c < 60; c++) {
    char log[512];
    ref_t *r0;
    ref_view v0 = (ref_view)(c % V_NUM);
    loom_tensor *t0 = ref_make_input(starts[c % 5], LOOM_F32, DOM_ANY, v0, &r0);
    snprintf(log, sizeof log, "chain %d: %s", c, ref_view_names[v0]);
    pair cur = {t0, ref_clone(r0)};
    ref_free(r0);
    int steps = (int)ref_rand_int(3, 7), mid = (int)ref_rand_int(1, steps - 1);
    pair midp = {NULL, NULL};
    for (int k = 0; k < steps; k++) {
      pair nx = {NULL, NULL};
      for (int tries = 0; tries < 8 && !nx.t; tries++) {
        nx = chain_step(cur, (int)ref_rand_int(0, 7), log, sizeof log);
        if (nx.t && ref_shape_numel(nx.r->shape) > 20000) { /* keep sizes small */
          ref_free(nx.r);
          nx.t = NULL, nx.r = NULL;
        }
      }
      if (!nx.t) break;
      if (k == mid) {
        midp.t = nx.t, midp.r = ref_clone(nx.r);
        if (c % 2)
          CHECK_OK(loom_realize(nx.t)); /* half the chains continue from a realized tensor */
      }
      ref_free(cur.r);
      cur = nx;
    }
    if (midp.t) {
      loom_tensor *both[2] = {cur.t, midp.t};
      if (c % 3 == 0) CHECK_OK(loom_eval(both, 2));
      char w[600];
      snprintf(w, sizeof w, "%s [mid]", log);
      REF_CHECK(w, midp.r, midp.t, 1e-5, 1e-5);
    }
    REF_CHECK(log, cur.r, cur.t, 1e-5, 1e-5);
    ref_free(cur.r);
    ref_free(midp.r);
    ref_release_all();
  }
}

/* Views big enough for the parallel and vectorized paths. */
static void test_big_views(void) {
  const int ax0[] = {0}, ax1[] = {1}, ax02[] = {0, 2};
  const loom_dtype dts[] = {LOOM_F32, LOOM_I32, LOOM_F64, LOOM_U8};
  for (int v = 1; v < V_NUM; v++) {
    loom_dtype d = dts[v % 4];
    loom_shape s = (v % 2) ? LOOM_SHAPE(301, 407) : LOOM_SHAPE(37, 41, 29);
    ref_domain dom = ref_is_float(d) ? DOM_POS : DOM_ANY;
    check_reduce(RK_SUM, d, s, (ref_view)v, dom, ax0, 1, false, LOOM_OK);
    check_reduce(RK_SUM, d, s, (ref_view)v, dom, s.ndim == 3 ? ax02 : ax1, s.ndim == 3 ? 2 : 1,
                 true, LOOM_OK);
    check_reduce(RK_MAX, d, s, (ref_view)v, DOM_QUANT, ax1, 1, false, LOOM_OK);
    check_reduce(RK_ARGMIN, d, s, (ref_view)v, DOM_QUANT, ax0, 1, false, LOOM_OK);
    if (d != LOOM_U8) check_reduce(RK_SOFTMAX, d, s, (ref_view)v, DOM_ANY, ax0, 1, false, LOOM_OK);
    check_unary(&ref_unops[13], d, s, (ref_view)v); /* square */
    check_binary(&ref_binops[0], d, LOOM_F32, s, s, (ref_view)v, (ref_view)((v + 2) % V_NUM));
  }
}

/* Every elementwise op, scalar form and reduction at least once on a view. */
static void test_every_op_on_a_view(void) {
  const loom_shape s = LOOM_SHAPE(3, 1, 4);
  for (int i = 0; i < REF_NUM_UNOP_CASES; i++) {
    loom_dtype d = ref_unops[i].op == REF_LOGICAL_NOT ? LOOM_BOOL : (i % 2 ? LOOM_F64 : LOOM_F32);
    check_unary(&ref_unops[i], d, s, (ref_view)(1 + i % (V_NUM - 1)));
    check_unary(&ref_unops[i], i % 3 ? LOOM_I32 : LOOM_U8, LOOM_SHAPE(2, 5),
                (ref_view)(1 + (i + 3) % (V_NUM - 1)));
  }
  for (int i = 0; i < REF_NUM_BINOP_CASES; i++) {
    const ref_binop_case *c = &ref_binops[i];
    check_binary(c, LOOM_F32, i % 2 ? LOOM_F32 : LOOM_I64, s, LOOM_SHAPE(4),
                 (ref_view)(1 + i % (V_NUM - 1)), (ref_view)(1 + (i + 2) % (V_NUM - 1)));
    if (c->sfn)
      check_binary_s(c->name, c->sfn, NULL, c->op, c->dom_a, c->tol, i % 2 ? LOOM_I32 : LOOM_F32, s,
                     i % 3 ? 2 : 0.5, (ref_view)(1 + (i + 1) % (V_NUM - 1)));
  }
  check_binary_s("rdiv_s", NULL, loom_rdiv_s, REF_DIV, DOM_POS, REF_TOL_SIMPLE, LOOM_I32, s, 3,
                 V_CHAIN);
  const int ax[] = {-1}, ax2[] = {0, 2};
  for (int k = 0; k < RK_NUM; k++) {
    ref_view v = (ref_view)(1 + k % (V_NUM - 1));
    bool two = k <= RK_MIN;
    check_reduce((ref_reduce_kind)k, LOOM_F32, s, v, DOM_QUANT, two ? ax2 : ax, two ? 2 : 1, k % 2,
                 LOOM_OK);
    check_reduce((ref_reduce_kind)k, LOOM_F64, LOOM_SHAPE(5, 6),
                 (ref_view)(1 + (k + 3) % (V_NUM - 1)), DOM_QUANT, ax, 1, false, LOOM_OK);
  }
  /* permute and squeeze of views */
  for (int v = 1; v < V_NUM; v++) {
    ref_t *x;
    loom_tensor *tx = ref_make_input(s, LOOM_I32, DOM_ANY, (ref_view)v, &x);
    const int p[] = {2, 0, 1};
    char what[96];
    snprintf(what, sizeof what, "permute of %s", ref_view_names[v]);
    ref_t *e = ref_permute(x, p, 3);
    REF_CHECK(what, e, TK(loom_permute(tx, p, 3)), 0, 0);
    ref_free(e);
    snprintf(what, sizeof what, "squeeze(1) of %s", ref_view_names[v]);
    e = ref_squeeze(x, 1);
    REF_CHECK(what, e, TK(loom_squeeze(tx, 1)), 0, 0);
    ref_free(e);
    ref_free(x);
    ref_release_all();
  }
}

/* Cats of more pieces than one cat node takes (LM_CAT_MAX_SOURCES) become
 * trees of cats; every element lands where it belongs, also through a sum. */
static void test_many_way_cat(void) {
  const int counts[] = {63, 64, 65, 80, 200, 4097};
  for (int c = 0; c < 6; c++) {
    int n = counts[c];
    LOOM_SCOPE {
      loom_tensor **parts = malloc(sizeof *parts * (size_t)n);
      for (int i = 0; i < n; i++) /* piece i: [2, 1 + i % 3] filled with i */
        parts[i] = loom_full(LOOM_SHAPE(2, 1 + i % 3), i, LOOM_F64, test_device());
      loom_tensor *all = loom_cat(parts, n, 1);
      int64_t cols = loom_shape_of(all).dim[1];
      double *got = malloc(sizeof(double) * (size_t)(2 * cols));
      CHECK_OK(loom_copy_to_host(all, got, sizeof(double) * (size_t)(2 * cols)));
      int64_t at = 0;
      int bad = 0;
      for (int i = 0; i < n; i++)
        for (int j = 0; j < 1 + i % 3; j++, at++) bad += got[at] != i || got[cols + at] != i;
      CHECK_MSG(bad == 0 && at == cols, "cat of %d pieces: %d misplaced", n, bad);
      double want = 0;
      for (int i = 0; i < n; i++) want += 2.0 * i * (1 + i % 3);
      CHECK_NEAR(loom_item(loom_sum_all(all)), want, 0);
      free(got);
      free(parts);
    }
  }
}

/* Realized pieces are inputs a kernel reads: more of them than one kernel
 * takes (LM_KERNEL_MAX_SLOTS, 256) are split over several kernels. A stack
 * of n, a sum of n and a program of n placeholders, at the planner's limit
 * of 128 and the kernel's of 256 and past them, fused and unfused. */
static void test_many_inputs(void) {
  const int counts[] = {127, 128, 129, 255, 256, 257, 300};
  for (int fuse = 0; fuse < 2; fuse++) {
    bool was = loom_fusion_enabled();
    loom_set_fusion(fuse);
    for (int c = 0; c < 7; c++) {
      int n = counts[c];
      LOOM_SCOPE {
        loom_tensor **parts = malloc(sizeof *parts * (size_t)n);
        double want = 0;
        for (int i = 0; i < n; i++) {
          parts[i] = loom_full(LOOM_SHAPE(3), i, LOOM_F32, test_device());
          CHECK_OK(loom_realize(parts[i]));
          want += 3.0 * i;
        }
        loom_tensor *sum = parts[0];
        for (int i = 1; i < n; i++) sum = loom_add(sum, parts[i]);
        check_set_ctx("%d inputs, fusion %s", n, fuse ? "on" : "off");
        CHECK_NEAR(loom_item(loom_sum_all(loom_stack(parts, n, 0))), want, 0);
        CHECK_NEAR(loom_item(loom_sum_all(sum)), want, 0);
        loom_tensor **ins = malloc(sizeof *ins * (size_t)n), **outs = NULL;
        for (int i = 0; i < n; i++) {
          char name[16];
          snprintf(name, sizeof name, "x%d", i);
          ins[i] = loom_input(name, LOOM_SHAPE(3), LOOM_F32, test_device());
        }
        loom_tensor *total = ins[0];
        for (int i = 1; i < n; i++) total = loom_add(total, loom_mul_s(ins[i], 2.0));
        loom_program *p = loom_compile(&total, 1, ins, n);
        CHECK_MSG(p != NULL, "compiling a program of %d inputs: %s", n, loom_last_error());
        loom_tensor *out = NULL;
        if (p) CHECK_OK(loom_program_run(p, parts, &out));
        if (out) CHECK_NEAR(loom_item(loom_sum_all(out)), 2 * want, 0);
        loom_free(out);
        loom_program_free(p);
        check_set_ctx("%s", "");
        free(ins);
        free(outs);
        free(parts);
      }
    }
    loom_set_fusion(was);
  }
}

int main(void) {
  ref_seed(0xfeed);
  test_elementwise_on_views();
  test_where_cast_on_views();
  test_reductions_on_views();
  test_views_of_views();
  test_matmul_on_views();
  test_view_chains();
  test_degenerate();
  test_random_chains();
  test_big_views();
  test_every_op_on_a_view();
  test_many_way_cat();
  test_many_inputs();
  loom_stats st = loom_get_stats();
  printf("graphs compiled %llu, kernels compiled %llu (%.2f s), kernels launched %llu\n",
         (unsigned long long)st.graphs_compiled, (unsigned long long)st.kernels_compiled,
         (double)st.compile_ns * 1e-9, (unsigned long long)st.kernels_launched);
  return check_report();
}
