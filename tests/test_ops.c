/* Every op against the reference evaluator (tests/support/ref.c): elementwise,
 * scalar forms, comparisons, where, casts, reductions, shape ops, matmul, creation. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "loom.h"
#include "ref.h"

#define NDT ((int)(sizeof ref_all_dtypes / sizeof ref_all_dtypes[0]))
static const loom_shape un_shapes[] = {
    LOOM_SHAPE0,         LOOM_SHAPE(0),      LOOM_SHAPE(1),
    LOOM_SHAPE(7),       LOOM_SHAPE(3, 4),   LOOM_SHAPE(2, 1, 5),
    LOOM_SHAPE(2, 0, 3), LOOM_SHAPE(33, 17), LOOM_SHAPE(1, 1),
};
#define N_UN_SHAPES ((int)(sizeof un_shapes / sizeof un_shapes[0]))

/* ---------------------------------------------------------------- creation */
static void test_creation(void) {
  for (int di = 0; di < NDT; di++) {
    loom_dtype d = ref_all_dtypes[di];
    char what[96];
    loom_shape s = LOOM_SHAPE(2, 3);
    ref_t *e;
    snprintf(what, sizeof what, "zeros %s", ref_dtype_str(d));
    e = ref_full(s, 0, d);
    REF_CHECK(what, e, TK(loom_zeros(s, d, test_device())), 0, 0);
    ref_free(e);
    snprintf(what, sizeof what, "ones %s", ref_dtype_str(d));
    e = ref_full(s, 1, d);
    REF_CHECK(what, e, TK(loom_ones(s, d, test_device())), 0, 0);
    ref_free(e);
    double fv = d == LOOM_BOOL ? 1 : (ref_is_float(d) ? 2.5 : 7);
    snprintf(what, sizeof what, "full %s", ref_dtype_str(d));
    e = ref_full(LOOM_SHAPE(4, 1, 2), fv, d);
    REF_CHECK(what, e, TK(loom_full(LOOM_SHAPE(4, 1, 2), fv, d, test_device())), 0, 0);
    ref_free(e);
    snprintf(what, sizeof what, "full empty %s", ref_dtype_str(d));
    e = ref_full(LOOM_SHAPE(0, 3), fv, d);
    REF_CHECK(what, e, TK(loom_full(LOOM_SHAPE(0, 3), fv, d, test_device())), 0, 0);
    ref_free(e);
    snprintf(what, sizeof what, "scalar %s", ref_dtype_str(d));
    e = ref_full(LOOM_SHAPE0, fv, d);
    loom_tensor *sc = TK(loom_scalar(fv, d, test_device()));
    REF_CHECK(what, e, sc, 0, 0);
    CHECK_EQ_INT(loom_ndim(sc), 0);
    CHECK_EQ_INT(loom_numel(sc), 1);
    CHECK(loom_item(sc) == ref_cvt(fv, d));
    ref_free(e);
    /* *_like keep shape and dtype */
    ref_t *x;
    loom_tensor *tx = ref_make_input(LOOM_SHAPE(3, 2), d, DOM_ANY, V_PERMUTE, &x);
    snprintf(what, sizeof what, "zeros_like %s", ref_dtype_str(d));
    e = ref_full(x->shape, 0, d);
    REF_CHECK(what, e, TK(loom_zeros_like(tx)), 0, 0);
    ref_free(e);
    snprintf(what, sizeof what, "ones_like %s", ref_dtype_str(d));
    e = ref_full(x->shape, 1, d);
    REF_CHECK(what, e, TK(loom_ones_like(tx)), 0, 0);
    ref_free(e);
    snprintf(what, sizeof what, "full_like %s", ref_dtype_str(d));
    e = ref_full(x->shape, fv, d);
    REF_CHECK(what, e, TK(loom_full_like(tx, fv)), 0, 0);
    ref_free(e);
    ref_free(x);
    /* arange */
    if (d != LOOM_BOOL) {
      snprintf(what, sizeof what, "arange(0,10,1) %s", ref_dtype_str(d));
      e = ref_arange(0, 10, 1, d);
      REF_CHECK(what, e, TK(loom_arange(0, 10, 1, d, test_device())), 0, 0);
      ref_free(e);
      if (!ref_is_unsigned(d)) {
        snprintf(what, sizeof what, "arange(5,-4,-3) %s", ref_dtype_str(d));
        e = ref_arange(5, -4, -3, d);
        REF_CHECK(what, e, TK(loom_arange(5, -4, -3, d, test_device())), 0, 0);
        ref_free(e);
      }
      snprintf(what, sizeof what, "arange(3,3,1) %s", ref_dtype_str(d));
      e = ref_arange(3, 3, 1, d);
      REF_CHECK(what, e, TK(loom_arange(3, 3, 1, d, test_device())), 0, 0);
      ref_free(e);
    }
    if (ref_is_float(d)) {
      snprintf(what, sizeof what, "arange(0,1,0.25) %s", ref_dtype_str(d));
      e = ref_arange(0, 1, 0.25, d);
      REF_CHECK(what, e, TK(loom_arange(0, 1, 0.25, d, test_device())), 1e-6, 1e-7);
      ref_free(e);
      snprintf(what, sizeof what, "arange(-1,1.01,0.1) %s", ref_dtype_str(d));
      e = ref_arange(-1, 1.01, 0.1, d);
      REF_CHECK(what, e, TK(loom_arange(-1, 1.01, 0.1, d, test_device())), 1e-5, 1e-6);
      ref_free(e);
    }
    ref_release_all();
  }
  /* metadata */
  loom_tensor *t = TK(loom_zeros(LOOM_SHAPE(2, 3, 4), LOOM_I32, test_device()));
  CHECK_EQ_INT(loom_numel(t), 24);
  CHECK_EQ_INT(loom_ndim(t), 3);
  CHECK_EQ_INT(loom_dtype_of(t), LOOM_I32);
  CHECK_EQ_INT(loom_device_of(t).type, test_device().type);
  CHECK(ref_shape_eq(loom_shape_of(t), LOOM_SHAPE(2, 3, 4)));
  for (int di = 0; di < NDT; di++) {
    CHECK_EQ_INT(loom_dtype_size(ref_all_dtypes[di]), ref_dtype_size(ref_all_dtypes[di]));
    CHECK(loom_dtype_is_float(ref_all_dtypes[di]) == ref_is_float(ref_all_dtypes[di]));
    CHECK(loom_dtype_name(ref_all_dtypes[di]) != NULL);
  }
  /* from_data copies: changing the source afterwards changes nothing */
  float src[3] = {1, 2, 3};
  loom_tensor *fd = TK(loom_from_data(src, LOOM_SHAPE(3), LOOM_F32, test_device()));
  src[1] = 100;
  float back[3];
  CHECK_OK(loom_copy_to_host(fd, back, sizeof back));
  CHECK(back[0] == 1 && back[1] == 2 && back[2] == 3);
  /* item, eval, realize */
  loom_tensor *a = TK(loom_arange(0, 6, 1, LOOM_F64, test_device()));
  loom_tensor *s1 = TK(loom_sum_all(a)), *s2 = TK(loom_mean_all(a));
  loom_tensor *both[2] = {s1, s2};
  CHECK_OK(loom_eval(both, 2));
  CHECK(loom_is_realized(s1) && loom_is_realized(s2));
  CHECK(loom_item(s1) == 15.0);
  CHECK(loom_item(s2) == 2.5);
  loom_tensor *m = TK(loom_mul_s(a, 2));
  CHECK(!loom_is_realized(m));
  CHECK_OK(loom_realize(m));
  CHECK(loom_is_realized(m));
  CHECK(loom_item(TK(loom_slice(m, 0, 5, 6, 1))) == 10.0);
  ref_release_all();
}

/* ---------------------------------------------------------------- elementwise */
static void test_unary(void) {
  int k = 0;
  for (int oi = 0; oi < REF_NUM_UNOP_CASES; oi++)
    for (int di = 0; di < NDT; di++) {
      const ref_unop_case *c = &ref_unops[oi];
      loom_dtype d = ref_all_dtypes[di];
      if (d == LOOM_BOOL && c->skip_bool) continue;
      check_unary(c, d, un_shapes[(k++ * 5 + oi) % N_UN_SHAPES], V_CONTIG);
    }
  /* special values: NaN, inf, zero through the float ops */
  const double sv[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-30, 80.0, -80.0};
  for (int di = 0; di < 2; di++) {
    loom_dtype d = ref_all_dtypes[di];
    ref_t *x = ref_from_values(LOOM_SHAPE(8), d, sv);
    loom_tensor *tx = TK(ref_to_loom(x));
    const ref_unop_case *cs[] = {&ref_unops[2], &ref_unops[8], &ref_unops[9], &ref_unops[10],
                                 &ref_unops[0], &ref_unops[1], &ref_unops[12]};
    for (int i = 0; i < (int)(sizeof cs / sizeof cs[0]); i++) {
      char what[96];
      snprintf(what, sizeof what, "%s special %s", cs[i]->name, ref_dtype_str(d));
      ref_t *e = ref_unary(cs[i]->op, x);
      double rt, at;
      ref_tol(d, cs[i]->tol, &rt, &at);
      REF_CHECK(what, e, TK(cs[i]->fn(tx)), rt, at);
      ref_free(e);
    }
    ref_free(x);
    ref_release_all();
  }
}

static const loom_shape bshapes[][2] = {
    {LOOM_SHAPE(3, 4), LOOM_SHAPE(3, 4)},
    {LOOM_SHAPE(3, 1), LOOM_SHAPE(1, 4)},
    {LOOM_SHAPE(4), LOOM_SHAPE(2, 3, 4)},
    {LOOM_SHAPE0, LOOM_SHAPE(2, 3)},
    {LOOM_SHAPE(2, 0, 3), LOOM_SHAPE(1, 3)},
    {LOOM_SHAPE(1), LOOM_SHAPE(1)},
    {LOOM_SHAPE(5, 1, 1), LOOM_SHAPE(1, 4, 1)},
    {LOOM_SHAPE(0), LOOM_SHAPE(1)},
    {LOOM_SHAPE(2, 3), LOOM_SHAPE0},
    {LOOM_SHAPE(31, 9), LOOM_SHAPE(31, 1)},
    {LOOM_SHAPE0, LOOM_SHAPE0},
};
#define N_BSHAPES ((int)(sizeof bshapes / sizeof bshapes[0]))

static void test_binary(void) {
  int k = 0;
  /* every op, every dtype (same dtype on both sides), rotating broadcast shapes */
  for (int oi = 0; oi < REF_NUM_BINOP_CASES; oi++)
    for (int di = 0; di < NDT; di++) {
      const ref_binop_case *c = &ref_binops[oi];
      loom_dtype d = ref_all_dtypes[di];
      if (d == LOOM_BOOL && c->skip_bool) continue;
      int si = (k++ * 3 + oi) % N_BSHAPES;
      check_binary(c, d, d, bshapes[si][0], bshapes[si][1], V_CONTIG, V_CONTIG);
    }
  /* all broadcast shapes for add and mul on F32, both orders */
  for (int si = 0; si < N_BSHAPES; si++) {
    check_binary(&ref_binops[0], LOOM_F32, LOOM_F32, bshapes[si][0], bshapes[si][1], V_CONTIG,
                 V_CONTIG);
    check_binary(&ref_binops[2], LOOM_I32, LOOM_I32, bshapes[si][1], bshapes[si][0], V_CONTIG,
                 V_CONTIG);
  }
  /* type promotion: every pair of dtypes for add, div and lt (both sides >= 1-D) */
  const int full_ops[] = {0, 3, 7};
  for (int fo = 0; fo < 3; fo++)
    for (int i = 0; i < NDT; i++)
      for (int j = 0; j < NDT; j++) {
        if (i == j || (fo > 0 && i > j)) continue;
        const ref_binop_case *c = &ref_binops[full_ops[fo]];
        check_binary(c, ref_all_dtypes[i], ref_all_dtypes[j], LOOM_SHAPE(2, 3), LOOM_SHAPE(3),
                     V_CONTIG, V_CONTIG);
      }
  /* a few pairs for the others */
  const loom_dtype pairs[][2] = {{LOOM_I32, LOOM_F32}, {LOOM_U8, LOOM_I64},  {LOOM_BOOL, LOOM_I32},
                                 {LOOM_F32, LOOM_F64}, {LOOM_I64, LOOM_F32}, {LOOM_U8, LOOM_I32}};
  const int some_ops[] = {1, 2, 4, 5, 6, 11, 13};
  for (int oi = 0; oi < 7; oi++)
    for (int p = 0; p < 6; p++) {
      const ref_binop_case *c = &ref_binops[some_ops[oi]];
      if (c->skip_bool && (pairs[p][0] == LOOM_BOOL || pairs[p][1] == LOOM_BOOL)) continue;
      check_binary(c, pairs[p][0], pairs[p][1], LOOM_SHAPE(4, 1), LOOM_SHAPE(1, 3), V_CONTIG,
                   V_CONTIG);
    }
  /* NaN propagation of maximum/minimum and comparisons with NaN */
  const double av[] = {NAN, 1, NAN, -INFINITY, 2, 0};
  const double bv[] = {1, NAN, NAN, 3, INFINITY, -0.0};
  for (int di = 0; di < 2; di++) {
    loom_dtype d = ref_all_dtypes[di];
    ref_t *x = ref_from_values(LOOM_SHAPE(6), d, av), *y = ref_from_values(LOOM_SHAPE(6), d, bv);
    loom_tensor *tx = TK(ref_to_loom(x)), *ty = TK(ref_to_loom(y));
    const int ops[] = {5, 6, 7, 11, 12, 0};
    for (int i = 0; i < 6; i++) {
      const ref_binop_case *c = &ref_binops[ops[i]];
      char what[96];
      snprintf(what, sizeof what, "%s NaN/inf %s", c->name, ref_dtype_str(d));
      ref_t *e = ref_binary(c->op, x, y);
      REF_CHECK(what, e, TK(c->fn(tx, ty)), 0, 0);
      ref_free(e);
    }
    ref_free(x);
    ref_free(y);
    ref_release_all();
  }
}

static void test_scalar_forms(void) {
  const double svals[] = {2, 0.5, -1.5};
  int k = 0;
  for (int oi = 0; oi < REF_NUM_BINOP_CASES; oi++) {
    const ref_binop_case *c = &ref_binops[oi];
    if (!c->sfn) continue;
    for (int di = 0; di < NDT; di++) {
      loom_dtype d = ref_all_dtypes[di];
      if (d == LOOM_BOOL && c->skip_bool && c->op != REF_POW) continue;
      for (int si = 0; si < 3; si++) {
        double sv = svals[si];
        /* fractional scalars only for F32, I32 and BOOL (the promotion cases) */
        if (si > 0 && !(d == LOOM_I32 || d == LOOM_BOOL || (d == LOOM_F32 && si == 1) ||
                        (d == LOOM_F64 && si == 2)))
          continue;
        if (c->op == REF_POW && sv < 0 && !ref_is_float(d)) continue;
        if (c->op == REF_POW && d == LOOM_BOOL && si > 0) continue;
        loom_shape s = un_shapes[(k++ * 7) % N_UN_SHAPES];
        check_binary_s(c->name, c->sfn, NULL, c->op, c->dom_a, c->tol, d, s, sv, V_CONTIG);
      }
    }
  }
  /* rsub_s and rdiv_s */
  for (int di = 0; di < NDT; di++) {
    loom_dtype d = ref_all_dtypes[di];
    if (d != LOOM_BOOL)
      check_binary_s("rsub_s", NULL, loom_rsub_s, REF_SUB, DOM_ANY, REF_TOL_SIMPLE, d,
                     LOOM_SHAPE(3, 4), 1, V_CONTIG);
    check_binary_s("rdiv_s", NULL, loom_rdiv_s, REF_DIV, DOM_POS, REF_TOL_SIMPLE, d, LOOM_SHAPE(5),
                   3, V_CONTIG);
  }
  check_binary_s("rsub_s", NULL, loom_rsub_s, REF_SUB, DOM_ANY, REF_TOL_SIMPLE, LOOM_I32,
                 LOOM_SHAPE(4), 0.5, V_CONTIG);
  check_binary_s("rdiv_s", NULL, loom_rdiv_s, REF_DIV, DOM_POS, REF_TOL_SIMPLE, LOOM_F64,
                 LOOM_SHAPE(2, 2), -0.25, V_CONTIG);
}

static void test_where(void) {
  const loom_dtype pairs[][2] = {{LOOM_F32, LOOM_F32}, {LOOM_I32, LOOM_I64},
                                 {LOOM_F32, LOOM_I64}, {LOOM_BOOL, LOOM_BOOL},
                                 {LOOM_U8, LOOM_F64},  {LOOM_I64, LOOM_I64}};
  const loom_shape sh[][3] = {
      {LOOM_SHAPE(3, 4), LOOM_SHAPE(3, 4), LOOM_SHAPE(3, 4)},
      {LOOM_SHAPE(3, 1), LOOM_SHAPE(1, 4), LOOM_SHAPE(3, 4)},
      {LOOM_SHAPE(2, 3), LOOM_SHAPE0, LOOM_SHAPE(3)},
      {LOOM_SHAPE(5), LOOM_SHAPE(2, 1), LOOM_SHAPE(1)},
      {LOOM_SHAPE(0, 2), LOOM_SHAPE(2), LOOM_SHAPE(1, 2)},
      {LOOM_SHAPE0, LOOM_SHAPE(2, 2), LOOM_SHAPE(2, 2)},
  };
  for (int p = 0; p < 6; p++)
    for (int si = 0; si < 6; si += (p == 0 ? 1 : 3)) {
      char what[128], b1[32], b2[32], b3[32];
      loom_shape s0 = sh[si][0], s1 = sh[si][1], s2 = sh[si][2];
      if (s1.ndim == 0 && pairs[p][0] != pairs[p][1]) s1 = LOOM_SHAPE(1);
      snprintf(what, sizeof what, "where %s %s/%s %s %s", ref_shape_str(s0, b1, 32),
               ref_dtype_str(pairs[p][0]), ref_dtype_str(pairs[p][1]), ref_shape_str(s1, b2, 32),
               ref_shape_str(s2, b3, 32));
      ref_t *c, *a, *b;
      loom_tensor *tc = ref_make_input(s0, LOOM_BOOL, DOM_ANY, V_CONTIG, &c);
      loom_tensor *ta = ref_make_input(s1, pairs[p][0], DOM_ANY, V_CONTIG, &a);
      loom_tensor *tb = ref_make_input(s2, pairs[p][1], DOM_ANY, V_CONTIG, &b);
      ref_t *e = ref_where(c, a, b);
      REF_CHECK(what, e, TK(loom_where(tc, ta, tb)), 0, 0);
      ref_free(c), ref_free(a), ref_free(b), ref_free(e);
      ref_release_all();
    }
  /* a computed condition, fused */
  ref_t *a, *b;
  loom_tensor *ta = ref_make_input(LOOM_SHAPE(4, 5), LOOM_F32, DOM_ANY, V_CONTIG, &a);
  loom_tensor *tb = ref_make_input(LOOM_SHAPE(4, 5), LOOM_F32, DOM_ANY, V_CONTIG, &b);
  ref_t *c = ref_gt(a, b), *e = ref_where(c, a, b);
  REF_CHECK("where(a > b, a, b)", e, TK(loom_where(TK(loom_gt(ta, tb)), ta, tb)), 0, 0);
  ref_free(a), ref_free(b), ref_free(c), ref_free(e);
  ref_release_all();
}

/* torch.clamp on every dtype: both bounds, one side open, lo > hi (hi everywhere), a
 * non-integral bound promoting an integer tensor, NaN values and bounds; through a
 * permuted view; bools and bounds an integer dtype cannot hold refused. */
static void test_clamp(void) {
  static const double bounds[][2] = {{-0.5, 0.75}, {-INFINITY, 0.25}, {0, INFINITY},
                                     {1, -1},      {-2, 3},           {-1.5, 2.5}};
  const loom_dtype dts[] = {LOOM_F32, LOOM_F64, LOOM_I32, LOOM_I64, LOOM_U8};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
    for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++)
      for (int view = 0; view < 2; view++) {
        double lo = bounds[b][0], hi = bounds[b][1];
        char what[128];
        snprintf(what, sizeof what, "clamp %s [%g, %g]%s", ref_dtype_str(dts[d]), lo, hi,
                 view ? " permuted" : "");
        ref_t *a;
        loom_tensor *ta =
            ref_make_input(LOOM_SHAPE(4, 7), dts[d], DOM_ANY, view ? V_PERMUTE : V_CONTIG, &a);
        loom_dtype od = ref_promote_scalar(ref_promote_scalar(dts[d], lo), hi);
        if (od == LOOM_U8 && (lo < 0 || hi < 0)) { /* torch refuses these too */
          CHECK_STATUS(TK(loom_clamp(ta, lo, hi)), LOOM_ERR_VALUE);
          ref_free(a);
          ref_release_all();
          continue;
        }
        ref_t *e = ref_clamp(a, lo, hi);
        REF_CHECK(what, e, TK(loom_clamp(ta, lo, hi)), 0, 0);
        ref_free(a), ref_free(e);
        ref_release_all();
      }
  LOOM_SCOPE {
    double v[5] = {-3, NAN, 0.5, 7, -0.0}, got[5];
    loom_tensor *x = loom_from_data(v, LOOM_SHAPE(5), LOOM_F64, test_device());
    CHECK_OK(loom_copy_to_host(loom_clamp(x, -1, 1), got, sizeof got));
    CHECK(got[0] == -1 && isnan(got[1]) && got[2] == 0.5 && got[3] == 1 && got[4] == 0);
    CHECK_OK(loom_copy_to_host(loom_clamp(x, NAN, 1), got, sizeof got));
    for (int i = 0; i < 5; i++) CHECK_MSG(isnan(got[i]), "clamp with a NaN bound: %g", got[i]);
    loom_tensor *flags = loom_from_data(v, LOOM_SHAPE(5), LOOM_F64, LOOM_CPU);
    loom_tensor *bad = loom_clamp(loom_cast(flags, LOOM_BOOL), 0, 1);
    CHECK_STATUS(bad, LOOM_ERR_DTYPE);
    CHECK_STR_CONTAINS(loom_error_message(bad), "loom_clamp");
    loom_tensor *i32 = loom_cast(loom_from_data(v, LOOM_SHAPE(5), LOOM_F64, LOOM_CPU), LOOM_I32);
    bad = loom_clamp(i32, 0, 1e10);
    CHECK_STATUS(bad, LOOM_ERR_VALUE);
    CHECK_STR_CONTAINS(loom_error_message(bad),
                       "loom_clamp: the upper bound 10000000000 does not fit i32");
    CHECK(loom_dtype_of(loom_clamp(i32, 0, 2.5)) == LOOM_F32);
    CHECK(loom_dtype_of(loom_clamp(i32, -1, 2)) == LOOM_I32);
  }
}

static void test_cast(void) {
  for (int i = 0; i < NDT; i++)
    for (int j = 0; j < NDT; j++) {
      loom_dtype from = ref_all_dtypes[i], to = ref_all_dtypes[j];
      char what[96];
      snprintf(what, sizeof what, "cast %s -> %s", ref_dtype_str(from), ref_dtype_str(to));
      /* an explicit zero so BOOL casts see both values */
      ref_t *y = ref_gen(LOOM_SHAPE(4, 6), from, DOM_CAST);
      y->data[0] = 0;
      loom_tensor *ty = TK(ref_to_loom(y));
      ref_t *e = ref_cast(y, to);
      REF_CHECK(what, e, TK(loom_cast(ty, to)), 0, 0);
      ref_free(y), ref_free(e);
      ref_release_all();
    }
  /* float -> int truncates toward zero, negatives included */
  const double v[] = {-2.7, -1.5, -0.5, 0.0, 0.5, 1.5, 2.7, 9.99};
  for (int i = 0; i < 2; i++)
    for (int j = 2; j < 4; j++) {
      char what[96];
      snprintf(what, sizeof what, "cast trunc %s -> %s", ref_dtype_str(ref_all_dtypes[i]),
               ref_dtype_str(ref_all_dtypes[j]));
      ref_t *x = ref_from_values(LOOM_SHAPE(8), ref_all_dtypes[i], v);
      ref_t *e = ref_cast(x, ref_all_dtypes[j]);
      REF_CHECK(what, e, TK(loom_cast(TK(ref_to_loom(x)), ref_all_dtypes[j])), 0, 0);
      ref_free(x), ref_free(e);
      ref_release_all();
    }
  /* cast to the same dtype is a value copy */
  ref_t *x;
  loom_tensor *tx = ref_make_input(LOOM_SHAPE(3, 2), LOOM_F64, DOM_ANY, V_PERMUTE, &x);
  REF_CHECK("cast F64 -> F64 of a view", x, TK(loom_cast(tx, LOOM_F64)), 0, 0);
  ref_free(x);
  ref_release_all();
}

/* loom_bitcast: every pair of dtypes of one element size, through views, against
 * the reference and byte for byte against the input's bytes (exact for the
 * 64-bit integers the reference's doubles round); inside a fused kernel; the
 * specials' bits; BF16 and F16; BOOL's bytes; the refusals. */
static bool same_bytes(const char *what, loom_tensor *t, const void *want, size_t bytes) {
  unsigned char *got = malloc(bytes ? bytes : 1);
  bool ok = loom_copy_to_host(t, got, bytes) == LOOM_OK && memcmp(got, want, bytes) == 0;
  CHECK_MSG(ok, "%s: the bytes differ from the input's (%s)", what,
            loom_last_error() ? loom_last_error() : "");
  free(got);
  return ok;
}

static void test_bitcast(void) {
  const ref_view views[] = {V_CONTIG, V_PERMUTE, V_SLICE, V_EXPAND, V_CHAIN};
  for (int i = 0; i < NDT; i++)
    for (int j = 0; j < NDT; j++) {
      loom_dtype from = ref_all_dtypes[i], to = ref_all_dtypes[j];
      if (ref_dtype_size(from) != ref_dtype_size(to)) continue;
      for (size_t v = 0; v < sizeof views / sizeof views[0]; v++) {
        char what[128];
        snprintf(what, sizeof what, "bitcast %s -> %s (%s)", ref_dtype_str(from), ref_dtype_str(to),
                 ref_view_names[views[v]]);
        ref_t *x;
        loom_tensor *tx = ref_make_input(LOOM_SHAPE(3, 5), from, DOM_ANY, views[v], &x);
        ref_t *e = ref_bitcast(x, to);
        loom_tensor *r = TK(loom_bitcast(tx, to));
        REF_CHECK(what, e, r, 0, 0);
        if (to != LOOM_BOOL) {
          size_t bytes = 0;
          void *want = ref_pack(x, &bytes);
          same_bytes(what, r, want, bytes);
          free(want);
        }
        ref_free(x), ref_free(e);
        ref_release_all();
      }
    }
  LOOM_SCOPE {
    /* the specials' bits, both ways: NaNs with payloads and signs, infinities, -0,
       subnormals, the extremes */
    uint32_t w32[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u, 0xff800000u,
                      0x80000000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x3f800000u};
    loom_tensor *i32 = loom_from_data(w32, LOOM_SHAPE(10), LOOM_U32, test_device());
    loom_tensor *f32 = loom_bitcast(i32, LOOM_F32);
    same_bytes("u32 -> f32 specials", f32, w32, sizeof w32);
    same_bytes("u32 -> f32 -> i32 specials", loom_bitcast(f32, LOOM_I32), w32, sizeof w32);
    uint64_t w64[] = {0x7ff8000000000001ull, 0xfff0000000000000ull, 0x8000000000000000ull,
                      0x0000000000000001ull, 0x7fefffffffffffffull, 0xffffffffffffffffull,
                      0x3ff0000000000001ull};
    loom_tensor *u64 = loom_from_data(w64, LOOM_SHAPE(7), LOOM_U64, test_device());
    loom_tensor *f64 = loom_bitcast(u64, LOOM_F64);
    same_bytes("u64 -> f64 specials", f64, w64, sizeof w64);
    same_bytes("u64 -> f64 -> i64 specials", loom_bitcast(f64, LOOM_I64), w64, sizeof w64);
    /* inside one kernel with arithmetic on both sides: the next float up, and back */
    float fv[4] = {1.0f, -2.5f, 0.0f, 3.0e38f}, up[4];
    loom_tensor *fx = loom_from_data(fv, LOOM_SHAPE(2, 2), LOOM_F32, test_device());
    loom_tensor *next =
        loom_bitcast(loom_add_s(loom_bitcast(loom_mul_s(fx, 1), LOOM_I32), 1), LOOM_F32);
    CHECK_OK(loom_copy_to_host(loom_mul_s(next, 1), up, sizeof up));
    for (int k = 0; k < 4; k++)
      CHECK_MSG(up[k] == nextafterf(fv[k], fv[k] < 0 ? -INFINITY : INFINITY),
                "bitcast next float of %g: %g", (double)fv[k], (double)up[k]);
    /* BF16 and F16 keep their bits; a signaling NaN may come back quiet */
    uint16_t h[] = {0x3c00, 0xc000, 0x0001, 0x8000, 0x7c00, 0xfc00, 0x7bff, 0x7e00, 0x3f80};
    loom_dtype halves[] = {LOOM_F16, LOOM_BF16}, words[] = {LOOM_I16, LOOM_U16};
    loom_tensor *hx = loom_from_data(h, LOOM_SHAPE(9), LOOM_U16, test_device());
    for (int a = 0; a < 2; a++) {
      loom_tensor *half = loom_bitcast(hx, halves[a]);
      same_bytes("u16 -> half", half, h, sizeof h);
      same_bytes("u16 -> half -> other half", loom_bitcast(half, halves[1 - a]), h, sizeof h);
      for (int b = 0; b < 2; b++)
        same_bytes("half -> 16-bit word", loom_bitcast(half, words[b]), h, sizeof h);
      /* a computed half's bits: 1.0 + 1.0 is 2.0 */
      uint16_t got = 0; /* 2.0 is 0x4000 in both */
      loom_tensor *one =
          loom_bitcast(loom_slice(hx, 0, a == 0 ? 0 : 8, a == 0 ? 1 : 9, 1), halves[a]);
      CHECK_OK(loom_copy_to_host(loom_bitcast(loom_add(one, one), LOOM_U16), &got, 2));
      CHECK_MSG(got == 0x4000, "%s 1 + 1 as bits: 0x%04x", loom_dtype_name(halves[a]), got);
    }
    uint16_t snan[2] = {0x7c01, 0x7f81}, back[2]; /* F16's and BF16's */
    loom_tensor *sx = loom_from_data(snan, LOOM_SHAPE(2), LOOM_U16, test_device());
    CHECK_OK(loom_copy_to_host(
        loom_bitcast(loom_bitcast(loom_slice(sx, 0, 0, 1, 1), LOOM_F16), LOOM_U16), back, 2));
    CHECK_OK(loom_copy_to_host(
        loom_bitcast(loom_bitcast(loom_slice(sx, 0, 1, 2, 1), LOOM_BF16), LOOM_U16), back + 1, 2));
    /* (LLVM folds F16's widening and narrowing back, keeping it signaling) */
    CHECK_MSG((back[0] == 0x7c01 || back[0] == 0x7e01) && (back[1] == 0x7f81 || back[1] == 0x7fc1),
              "signaling NaNs: 0x%04x 0x%04x", back[0], back[1]);
    /* BOOL holds 0 or 1: a byte other than 0 is true, both ways */
    uint8_t by[5] = {0, 1, 2, 128, 255}, bo[5];
    loom_tensor *bx = loom_from_data(by, LOOM_SHAPE(5), LOOM_U8, test_device());
    loom_tensor *flags = loom_bitcast(bx, LOOM_BOOL);
    CHECK_OK(loom_copy_to_host(loom_bitcast(flags, LOOM_I8), bo, sizeof bo));
    CHECK(bo[0] == 0 && bo[1] == 1 && bo[2] == 1 && bo[3] == 1 && bo[4] == 1);
    /* the same dtype is the tensor itself; sizes that differ are refused */
    CHECK(loom_dtype_of(loom_bitcast(fx, LOOM_F32)) == LOOM_F32);
    loom_tensor *bad = loom_bitcast(fx, LOOM_F64);
    CHECK_STATUS(bad, LOOM_ERR_DTYPE);
    CHECK_STR_CONTAINS(loom_error_message(bad),
                       "loom_bitcast: f32 has 4-byte elements and f64 8-byte ones");
    CHECK_STATUS(loom_bitcast(hx, LOOM_U8), LOOM_ERR_DTYPE);
    CHECK_STATUS(loom_bitcast(bx, LOOM_F16), LOOM_ERR_DTYPE);
    CHECK_STATUS(loom_bitcast(fx, (loom_dtype)99), LOOM_ERR_DTYPE);
    CHECK_STATUS(loom_bitcast(bad, LOOM_I64), LOOM_ERR_DTYPE); /* its error passes on */
    /* no gradient flows through it */
    loom_tensor *hw = loom_cast(loom_ones(LOOM_SHAPE(3), LOOM_F32, test_device()), LOOM_F16);
    CHECK_OK(loom_set_requires_grad(hw, true));
    loom_tensor *loss = loom_add(loom_sum_all(loom_cast(loom_bitcast(hw, LOOM_BF16), LOOM_F32)),
                                 loom_sum_all(loom_cast(hw, LOOM_F32)));
    CHECK_OK(loom_backward(loss));
    float gsum = 0;
    CHECK_OK(loom_copy_to_host(loom_sum_all(loom_cast(loom_grad(hw), LOOM_F32)), &gsum, 4));
    CHECK_MSG(gsum == 3, "the gradient through a bitcast: %g (3 without it)", (double)gsum);
  }
  loom_clear_error();
}

/* ---------------------------------------------------------------- reductions */
static void test_reductions(void) {
  const int ax0[] = {0}, axm1[] = {-1}, ax02[] = {0, 2}, ax1[] = {1}, ax_m3m1[] = {-3, -1};
  struct {
    const int *axes;
    int n;
  } cfg[] = {{NULL, 0}, {ax0, 1}, {axm1, 1}, {ax02, 2}, {ax1, 1}, {ax_m3m1, 2}};
  loom_shape s3 = LOOM_SHAPE(3, 4, 5);
  for (int di = 0; di < NDT; di++) {
    loom_dtype d = ref_all_dtypes[di];
    for (int ci = 0; ci < 6; ci++) {
      bool kd = ci % 2;
      check_reduce(RK_SUM, d, s3, V_CONTIG, DOM_ANY, cfg[ci].axes, cfg[ci].n, kd, LOOM_OK);
      if (ci % 2 == di % 2) {
        check_reduce(RK_MAX, d, s3, V_CONTIG, DOM_QUANT, cfg[ci].axes, cfg[ci].n, !kd, LOOM_OK);
        check_reduce(RK_MIN, d, s3, V_CONTIG, DOM_QUANT, cfg[ci].axes, cfg[ci].n, kd, LOOM_OK);
      }
      if (ref_is_float(d))
        check_reduce(RK_MEAN, d, s3, V_CONTIG, DOM_ANY, cfg[ci].axes, cfg[ci].n, kd, LOOM_OK);
    }
    check_reduce(RK_SUM_ALL, d, LOOM_SHAPE(7, 3), V_CONTIG, DOM_ANY, NULL, 0, false, LOOM_OK);
    check_reduce(RK_SUM, d, LOOM_SHAPE0, V_CONTIG, DOM_ANY, NULL, 0, false, LOOM_OK);
    if (ref_is_float(d)) {
      check_reduce(RK_MEAN_ALL, d, LOOM_SHAPE(7, 3), V_CONTIG, DOM_ANY, NULL, 0, false, LOOM_OK);
      check_reduce(RK_MEAN, d, LOOM_SHAPE(2, 0, 3), V_CONTIG, DOM_ANY, ax1, 1, false, LOOM_OK);
      check_reduce(RK_MEAN_ALL, d, LOOM_SHAPE(0), V_CONTIG, DOM_ANY, NULL, 0, false, LOOM_OK);
    } else {
      check_reduce(RK_MEAN, d, s3, V_CONTIG, DOM_ANY, ax0, 1, false, LOOM_ERR_DTYPE);
    }
    /* empty axes */
    check_reduce(RK_SUM, d, LOOM_SHAPE(2, 0, 3), V_CONTIG, DOM_ANY, ax1, 1, false, LOOM_OK);
    check_reduce(RK_SUM, d, LOOM_SHAPE(2, 0, 3), V_CONTIG, DOM_ANY, ax0, 1, true, LOOM_OK);
    check_reduce(RK_SUM_ALL, d, LOOM_SHAPE(0, 4), V_CONTIG, DOM_ANY, NULL, 0, false, LOOM_OK);
    check_reduce(RK_MAX, d, LOOM_SHAPE(2, 0, 3), V_CONTIG, DOM_ANY, ax1, 1, false, LOOM_ERR_SHAPE);
    check_reduce(RK_MIN, d, LOOM_SHAPE(2, 0, 3), V_CONTIG, DOM_ANY, ax0, 1, false, LOOM_OK);
    /* a long axis (vector loops with tails) */
    check_reduce(RK_SUM, d, LOOM_SHAPE(3, 301), V_CONTIG, DOM_ANY, axm1, 1, false, LOOM_OK);
    /* argmax / argmin: ties take the first occurrence */
    if (d != LOOM_BOOL) {
      check_reduce(RK_ARGMAX, d, s3, V_CONTIG, DOM_QUANT, &cfg[di % 3 + 1].axes[0], 1, di % 2,
                   LOOM_OK);
      check_reduce(RK_ARGMIN, d, s3, V_CONTIG, DOM_QUANT, ax1, 1, !(di % 2), LOOM_OK);
      check_reduce(RK_ARGMAX, d, LOOM_SHAPE(9), V_CONTIG, DOM_QUANT, ax0, 1, false, LOOM_OK);
      check_reduce(RK_ARGMAX, d, LOOM_SHAPE(2, 0), V_CONTIG, DOM_ANY, axm1, 1, false,
                   LOOM_ERR_SHAPE);
    }
    /* softmax family: ints promote to F32 */
    if (d == LOOM_F32 || d == LOOM_F64 || d == LOOM_I32 || d == LOOM_I64) {
      for (int k = RK_SOFTMAX; k <= RK_LOGSUMEXP; k++) {
        check_reduce((ref_reduce_kind)k, d, s3, V_CONTIG, DOM_ANY, &cfg[1 + (k + di) % 5].axes[0],
                     1, false, LOOM_OK);
        check_reduce((ref_reduce_kind)k, d, LOOM_SHAPE(4, 1), V_CONTIG, DOM_ANY, axm1, 1, false,
                     LOOM_OK);
      }
    }
  }
  /* numerically stable at large values */
  for (int k = RK_SOFTMAX; k <= RK_LOGSUMEXP; k++)
    for (int di = 0; di < 2; di++)
      check_reduce((ref_reduce_kind)k, ref_all_dtypes[di], LOOM_SHAPE(3, 8), V_CONTIG, DOM_BIG,
                   axm1, 1, false, LOOM_OK);
  /* extremes in one row: softmax [1, 0, 0], log_softmax [0, -1000, -2000], lse 1000 */
  const double ext[] = {1000, 0, -1000, -1000, -1000, -1000};
  for (int di = 0; di < 2; di++) {
    loom_dtype d = ref_all_dtypes[di];
    ref_t *x = ref_from_values(LOOM_SHAPE(2, 3), d, ext);
    loom_tensor *tx = TK(ref_to_loom(x));
    ref_t *e1 = ref_softmax(x, 1), *e2 = ref_log_softmax(x, -1), *e3 = ref_logsumexp(x, 1);
    REF_CHECK("softmax extremes", e1, TK(loom_softmax(tx, 1)), 1e-6, 1e-30);
    REF_CHECK("log_softmax extremes", e2, TK(loom_log_softmax(tx, -1)), 1e-6, 1e-4);
    REF_CHECK("logsumexp extremes", e3, TK(loom_logsumexp(tx, 1)), 1e-6, 1e-4);
    ref_free(x), ref_free(e1), ref_free(e2), ref_free(e3);
    ref_release_all();
  }
  /* min / argmin over an empty axis are refused like max / argmax */
  check_reduce(RK_MIN, LOOM_F32, LOOM_SHAPE(3, 0), V_CONTIG, DOM_ANY, axm1, 1, false,
               LOOM_ERR_SHAPE);
  check_reduce(RK_ARGMIN, LOOM_I64, LOOM_SHAPE(0, 2), V_CONTIG, DOM_ANY, ax0, 1, true,
               LOOM_ERR_SHAPE);
  /* NaN propagates through max/min and sum */
  const double v[] = {1, NAN, 3, 4, 5, 6};
  for (int di = 0; di < 2; di++) {
    loom_dtype d = ref_all_dtypes[di];
    ref_t *x = ref_from_values(LOOM_SHAPE(2, 3), d, v);
    loom_tensor *tx = TK(ref_to_loom(x));
    ref_t *e1 = ref_max(x, axm1, 1, false), *e2 = ref_min(x, ax0, 1, false),
          *e3 = ref_sum(x, axm1, 1, false);
    REF_CHECK("max NaN", e1, TK(loom_max(tx, axm1, 1, false)), 0, 0);
    REF_CHECK("min NaN", e2, TK(loom_min(tx, ax0, 1, false)), 0, 0);
    REF_CHECK("sum NaN", e3, TK(loom_sum(tx, axm1, 1, false)), 1e-6, 0);
    ref_free(x), ref_free(e1), ref_free(e2), ref_free(e3);
    ref_release_all();
  }
  /* duplicate / bad axes */
  loom_tensor *t = TK(loom_zeros(s3, LOOM_F32, test_device()));
  const int dup[] = {0, -3}, bad[] = {3}, bad2[] = {-4};
  CHECK_STATUS(TK(loom_sum(t, dup, 2, false)), LOOM_ERR_AXIS);
  CHECK_STATUS(TK(loom_sum(t, bad, 1, false)), LOOM_ERR_AXIS);
  CHECK_STATUS(TK(loom_max(t, bad2, 1, true)), LOOM_ERR_AXIS);
  CHECK_STATUS(TK(loom_argmax(t, 3, false)), LOOM_ERR_AXIS);
  CHECK_STATUS(TK(loom_softmax(t, -4)), LOOM_ERR_AXIS);
  ref_release_all();
}

/* ---------------------------------------------------------------- shape ops */
typedef enum {
  SO_RESHAPE,
  SO_PERMUTE,
  SO_TRANSPOSE,
  SO_EXPAND,
  SO_SQUEEZE,
  SO_UNSQUEEZE,
  SO_FLATTEN,
  SO_SLICE,
  SO_PAD,
  SO_CONTIG
} shape_op;

typedef struct shape_case {
  shape_op op;
  loom_shape in;
  loom_shape arg; /* reshape/expand target */
  int64_t p[6];   /* op parameters */
  int np;
} shape_case;

static const shape_case shape_cases[] = {
    {SO_RESHAPE, LOOM_SHAPE(2, 3, 4), LOOM_SHAPE(6, 4), {0}, 0},
    {SO_RESHAPE, LOOM_SHAPE(2, 3, 4), LOOM_SHAPE(-1, 2), {0}, 0},
    {SO_RESHAPE, LOOM_SHAPE(2, 3, 4), LOOM_SHAPE(4, -1, 3), {0}, 0},
    {SO_RESHAPE, LOOM_SHAPE(6), LOOM_SHAPE(1, 6, 1), {0}, 0},
    {SO_RESHAPE, LOOM_SHAPE(1), LOOM_SHAPE0, {0}, 0},
    {SO_RESHAPE, LOOM_SHAPE0, LOOM_SHAPE(1, 1), {0}, 0},
    {SO_RESHAPE, LOOM_SHAPE(0, 3), LOOM_SHAPE(3, 0, 2), {0}, 0},
    {SO_PERMUTE, LOOM_SHAPE(2, 3, 4), {0}, {2, 0, 1}, 3},
    {SO_PERMUTE, LOOM_SHAPE(2, 3, 4), {0}, {-1, -3, -2}, 3},
    {SO_PERMUTE, LOOM_SHAPE(2, 1, 4, 3), {0}, {3, 1, 0, 2}, 4},
    {SO_PERMUTE, LOOM_SHAPE(5), {0}, {0}, 1},
    {SO_PERMUTE, LOOM_SHAPE(2, 0, 3), {0}, {2, 1, 0}, 3},
    {SO_TRANSPOSE, LOOM_SHAPE(3, 5), {0}, {0, 1}, 2},
    {SO_TRANSPOSE, LOOM_SHAPE(2, 3, 4), {0}, {-1, 0}, 2},
    {SO_TRANSPOSE, LOOM_SHAPE(2, 3, 4), {0}, {1, 1}, 2},
    {SO_EXPAND, LOOM_SHAPE(3, 1), LOOM_SHAPE(3, 4), {0}, 0},
    {SO_EXPAND, LOOM_SHAPE(3, 1), LOOM_SHAPE(2, -1, 5), {0}, 0},
    {SO_EXPAND, LOOM_SHAPE(1), LOOM_SHAPE(0), {0}, 0},
    {SO_EXPAND, LOOM_SHAPE0, LOOM_SHAPE(2, 3), {0}, 0},
    {SO_EXPAND, LOOM_SHAPE(1, 4, 1), LOOM_SHAPE(-1, 4, 3), {0}, 0},
    {SO_SQUEEZE, LOOM_SHAPE(3, 1, 4), {0}, {1}, 1},
    {SO_SQUEEZE, LOOM_SHAPE(3, 1, 4), {0}, {-2}, 1},
    {SO_SQUEEZE, LOOM_SHAPE(3, 1, 4), {0}, {0}, 1}, /* not size 1: no-op */
    {SO_SQUEEZE, LOOM_SHAPE(1), {0}, {0}, 1},
    {SO_UNSQUEEZE, LOOM_SHAPE(3, 4), {0}, {0}, 1},
    {SO_UNSQUEEZE, LOOM_SHAPE(3, 4), {0}, {2}, 1},
    {SO_UNSQUEEZE, LOOM_SHAPE(3, 4), {0}, {-1}, 1},
    {SO_UNSQUEEZE, LOOM_SHAPE0, {0}, {0}, 1},
    {SO_FLATTEN, LOOM_SHAPE(2, 3, 4, 5), {0}, {1, 2}, 2},
    {SO_FLATTEN, LOOM_SHAPE(2, 3, 4, 5), {0}, {0, -1}, 2},
    {SO_FLATTEN, LOOM_SHAPE(2, 3, 4), {0}, {-2, -1}, 2},
    {SO_FLATTEN, LOOM_SHAPE(2, 3), {0}, {1, 1}, 2},
    {SO_SLICE, LOOM_SHAPE(10), {0}, {0, 2, 8, 1}, 4},
    {SO_SLICE, LOOM_SHAPE(10), {0}, {0, 1, 10, 3}, 4},
    {SO_SLICE, LOOM_SHAPE(10), {0}, {0, -3, 100, 1}, 4},
    {SO_SLICE, LOOM_SHAPE(10), {0}, {0, -100, -2, 2}, 4},
    {SO_SLICE, LOOM_SHAPE(10), {0}, {0, 7, 3, 1}, 4},
    {SO_SLICE, LOOM_SHAPE(4, 6), {0}, {1, 1, 5, 2}, 4},
    {SO_SLICE, LOOM_SHAPE(4, 6), {0}, {-2, 0, 1, 1}, 4},
    {SO_SLICE, LOOM_SHAPE(4, 6), {0}, {0, 4, 4, 1}, 4},
    {SO_SLICE, LOOM_SHAPE(3, 0), {0}, {1, 0, 5, 2}, 4},
    {SO_PAD, LOOM_SHAPE(3, 4), {0}, {1, 2}, 2},
    {SO_PAD, LOOM_SHAPE(3, 4), {0}, {1, 2, 0, 1}, 4},
    {SO_PAD, LOOM_SHAPE(3, 4), {0}, {-1, 0, 2, -1}, 4},
    {SO_PAD, LOOM_SHAPE(2, 3, 4), {0}, {0, 0, 0, 0, 1, 1}, 6},
    {SO_PAD, LOOM_SHAPE(2, 0), {0}, {1, 1}, 2},
    {SO_PAD, LOOM_SHAPE(5), {0}, {-2, -3}, 2},
    {SO_CONTIG, LOOM_SHAPE(3, 4), {0}, {0}, 0},
};
#define N_SHAPE_CASES ((int)(sizeof shape_cases / sizeof shape_cases[0]))

/* Runs one shape case on input view v with dtype d. */
static void run_shape_case(const shape_case *c, loom_dtype d, ref_view v) {
  static const char *names[] = {"reshape",   "permute", "transpose", "expand", "squeeze",
                                "unsqueeze", "flatten", "slice",     "pad",    "contiguous"};
  char what[160], b1[64], b2[64];
  snprintf(what, sizeof what, "%s %s%s(%s) arg=%s p=[%lld,%lld,%lld,%lld]", names[c->op],
           ref_dtype_str(d), ref_shape_str(c->in, b1, 64), ref_view_names[v],
           ref_shape_str(c->arg, b2, 64), (long long)c->p[0], (long long)c->p[1],
           (long long)c->p[2], (long long)c->p[3]);
  ref_t *x;
  loom_tensor *tx = ref_make_input(c->in, d, DOM_ANY, v, &x);
  loom_tensor *ty = NULL;
  ref_t *e = NULL;
  int perm[LOOM_MAX_DIMS];
  for (int i = 0; i < c->np; i++) perm[i] = (int)c->p[i];
  switch (c->op) {
  case SO_RESHAPE:
    ty = loom_reshape(tx, c->arg);
    e = ref_reshape(x, c->arg);
    break;
  case SO_PERMUTE:
    ty = loom_permute(tx, perm, c->np);
    e = ref_permute(x, perm, c->np);
    break;
  case SO_TRANSPOSE:
    ty = loom_transpose(tx, perm[0], perm[1]);
    e = ref_transpose(x, perm[0], perm[1]);
    break;
  case SO_EXPAND:
    ty = loom_expand(tx, c->arg);
    e = ref_expand(x, c->arg);
    break;
  case SO_SQUEEZE:
    ty = loom_squeeze(tx, perm[0]);
    e = ref_squeeze(x, perm[0]);
    break;
  case SO_UNSQUEEZE:
    ty = loom_unsqueeze(tx, perm[0]);
    e = ref_unsqueeze(x, perm[0]);
    break;
  case SO_FLATTEN:
    ty = loom_flatten(tx, perm[0], perm[1]);
    e = ref_flatten(x, perm[0], perm[1]);
    break;
  case SO_SLICE:
    ty = loom_slice(tx, perm[0], c->p[1], c->p[2], c->p[3]);
    e = ref_slice(x, perm[0], c->p[1], c->p[2], c->p[3]);
    break;
  case SO_PAD:
    ty = loom_pad(tx, c->p, c->np, 3.0);
    e = ref_pad(x, c->p, c->np, 3.0);
    break;
  case SO_CONTIG:
    ty = loom_contiguous(tx);
    e = ref_contiguous(x);
    break;
  }
  TK(ty);
  REF_CHECK(what, e, ty, 0, 0);
  /* the view feeds a computation too */
  if (e && d != LOOM_BOOL &&
      (c->op == SO_SLICE || c->op == SO_PAD || c->op == SO_EXPAND || c->op == SO_PERMUTE)) {
    ref_t *e2 = ref_mul_s(e, 3);
    char w2[200];
    snprintf(w2, sizeof w2, "%s then mul_s", what);
    REF_CHECK(w2, e2, TK(loom_mul_s(ty, 3)), 0, 0);
    ref_free(e2);
  }
  ref_free(x), ref_free(e);
  ref_release_all();
}

static void test_shape_ops(void) {
  for (int i = 0; i < N_SHAPE_CASES; i++) {
    run_shape_case(&shape_cases[i], (i % 3 == 0) ? LOOM_I32 : LOOM_F32, V_CONTIG);
    if (i % 4 == 0) run_shape_case(&shape_cases[i], i % 8 ? LOOM_BOOL : LOOM_F64, V_CONTIG);
  }
  /* step must be > 0 */
  loom_tensor *t = TK(loom_zeros(LOOM_SHAPE(5), LOOM_F32, test_device()));
  CHECK_STATUS(TK(loom_slice(t, 0, 0, 5, 0)), LOOM_ERR_VALUE);
  CHECK_STATUS(TK(loom_slice(t, 0, 5, 0, -1)), LOOM_ERR_VALUE);
  CHECK_STATUS(TK(loom_reshape(t, LOOM_SHAPE(2, 3))), LOOM_ERR_SHAPE);
  CHECK_STATUS(TK(loom_reshape(t, LOOM_SHAPE(-1, -1))), LOOM_ERR_SHAPE);
  CHECK_STATUS(
      TK(loom_expand(TK(loom_zeros(LOOM_SHAPE(2, 3), LOOM_F32, test_device())), LOOM_SHAPE(4, 3))),
      LOOM_ERR_SHAPE);
  const int perm_bad[] = {0, 0};
  CHECK_STATUS(
      TK(loom_permute(TK(loom_zeros(LOOM_SHAPE(2, 3), LOOM_F32, test_device())), perm_bad, 2)),
      LOOM_ERR_AXIS);
  CHECK_STATUS(TK(loom_unsqueeze(t, 3)), LOOM_ERR_AXIS);
  CHECK_STATUS(TK(loom_squeeze(t, 1)), LOOM_ERR_AXIS);
  ref_release_all();
}

static void test_cat_stack(void) {
  struct {
    loom_shape s[3];
    int n, axis;
    loom_dtype d[3];
  } cases[] = {
      {{LOOM_SHAPE(2, 3), LOOM_SHAPE(4, 3), LOOM_SHAPE(1, 3)},
       3,
       0,
       {LOOM_F32, LOOM_F32, LOOM_F32}},
      {{LOOM_SHAPE(2, 3), LOOM_SHAPE(2, 1), LOOM_SHAPE(2, 0)},
       3,
       -1,
       {LOOM_I32, LOOM_I32, LOOM_I32}},
      {{LOOM_SHAPE(2, 3, 2), LOOM_SHAPE(2, 2, 2), {0}}, 2, 1, {LOOM_I32, LOOM_F32, 0}},
      {{LOOM_SHAPE(3), LOOM_SHAPE(2), {0}}, 2, 0, {LOOM_U8, LOOM_I64, 0}},
      {{LOOM_SHAPE(3), {0}, {0}}, 1, 0, {LOOM_F64, 0, 0}},
      {{LOOM_SHAPE(2, 2), LOOM_SHAPE(2, 2), {0}}, 2, 1, {LOOM_BOOL, LOOM_BOOL, 0}},
      {{LOOM_SHAPE(1, 2), LOOM_SHAPE(1, 2), {0}}, 2, 0, {LOOM_BOOL, LOOM_F32, 0}},
  };
  for (int ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++) {
    ref_t *r[3];
    loom_tensor *t[3];
    for (int k = 0; k < cases[ci].n; k++)
      t[k] = ref_make_input(cases[ci].s[k], cases[ci].d[k], DOM_ANY, k == 1 ? V_PERMUTE : V_CONTIG,
                            &r[k]);
    char what[96];
    snprintf(what, sizeof what, "cat case %d", ci);
    ref_t *e = ref_cat((const ref_t *const *)r, cases[ci].n, cases[ci].axis);
    REF_CHECK(what, e, TK(loom_cat(t, cases[ci].n, cases[ci].axis)), 0, 0);
    ref_free(e);
    for (int k = 0; k < cases[ci].n; k++) ref_free(r[k]);
    ref_release_all();
  }
  const loom_shape ss[] = {LOOM_SHAPE(2, 3), LOOM_SHAPE0, LOOM_SHAPE(0, 2), LOOM_SHAPE(4)};
  const int axes[] = {0, 1, 2, -1};
  for (int si = 0; si < 4; si++)
    for (int ai = 0; ai < 4; ai++) {
      int nd = ss[si].ndim;
      if (axes[ai] > nd) continue;
      loom_dtype d = (si + ai) % 2 ? LOOM_F32 : LOOM_I64;
      ref_t *r[3];
      loom_tensor *t[3];
      for (int k = 0; k < 3; k++) t[k] = ref_make_input(ss[si], d, DOM_ANY, V_CONTIG, &r[k]);
      char what[96], b[32];
      snprintf(what, sizeof what, "stack 3x%s axis %d", ref_shape_str(ss[si], b, 32), axes[ai]);
      ref_t *e = ref_stack((const ref_t *const *)r, 3, axes[ai]);
      REF_CHECK(what, e, TK(loom_stack(t, 3, axes[ai])), 0, 0);
      ref_free(e);
      for (int k = 0; k < 3; k++) ref_free(r[k]);
      ref_release_all();
    }
  /* mismatches */
  loom_tensor *a = TK(loom_zeros(LOOM_SHAPE(2, 3), LOOM_F32, test_device()));
  loom_tensor *b = TK(loom_zeros(LOOM_SHAPE(2, 4), LOOM_F32, test_device()));
  loom_tensor *ab[2] = {a, b};
  CHECK_STATUS(TK(loom_cat(ab, 2, 0)), LOOM_ERR_SHAPE);
  CHECK_STATUS(TK(loom_stack(ab, 2, 0)), LOOM_ERR_SHAPE);
  CHECK_STATUS(TK(loom_cat(ab, 2, 2)), LOOM_ERR_AXIS);
  ref_release_all();
}

/* ---------------------------------------------------------------- matmul */
static void test_matmul(void) {
  const loom_shape mm[][2] = {
      {LOOM_SHAPE(3), LOOM_SHAPE(3)},          {LOOM_SHAPE(2, 3), LOOM_SHAPE(3, 4)},
      {LOOM_SHAPE(3), LOOM_SHAPE(3, 4)},       {LOOM_SHAPE(2, 3), LOOM_SHAPE(3)},
      {LOOM_SHAPE(2, 2, 3), LOOM_SHAPE(3, 4)}, {LOOM_SHAPE(2, 1, 2, 3), LOOM_SHAPE(3, 3, 2)},
      {LOOM_SHAPE(4, 5), LOOM_SHAPE(5, 1)},    {LOOM_SHAPE(0, 3), LOOM_SHAPE(3, 2)},
      {LOOM_SHAPE(2, 0), LOOM_SHAPE(0, 3)},    {LOOM_SHAPE(1, 1), LOOM_SHAPE(1, 1)},
      {LOOM_SHAPE(17, 33), LOOM_SHAPE(33, 9)}, {LOOM_SHAPE(3), LOOM_SHAPE(2, 3, 5)},
      {LOOM_SHAPE(2, 4, 3), LOOM_SHAPE(3)},
  };
  const loom_dtype dts[] = {LOOM_F32, LOOM_F64, LOOM_I32, LOOM_I64};
  for (int di = 0; di < 4; di++)
    for (int i = 0; i < (int)(sizeof mm / sizeof mm[0]); i++)
      if (di < 2 || i % 2 == 0) check_matmul(dts[di], mm[i][0], mm[i][1], V_CONTIG, V_CONTIG);
  /* transposed (and other) views as inputs: what BLAS sees as trans flags */
  for (int di = 0; di < 4; di++) {
    check_matmul(dts[di], LOOM_SHAPE(5, 3), LOOM_SHAPE(3, 4), V_PERMUTE, V_CONTIG);
    check_matmul(dts[di], LOOM_SHAPE(5, 3), LOOM_SHAPE(3, 4), V_CONTIG, V_PERMUTE);
    check_matmul(dts[di], LOOM_SHAPE(5, 3), LOOM_SHAPE(3, 4), V_PERMUTE, V_PERMUTE);
    check_matmul(dts[di], LOOM_SHAPE(2, 5, 3), LOOM_SHAPE(3, 4), V_SLICE, V_EXPAND);
  }
  /* transpose via loom_transpose on a batched input */
  ref_t *a, *b;
  loom_tensor *ta = ref_make_input(LOOM_SHAPE(2, 3, 4), LOOM_F32, DOM_ANY, V_CONTIG, &a);
  loom_tensor *tb = ref_make_input(LOOM_SHAPE(2, 3, 5), LOOM_F32, DOM_ANY, V_CONTIG, &b);
  ref_t *at = ref_transpose(a, -1, -2), *e = ref_matmul(at, b);
  REF_CHECK("matmul transpose(a) @ b batched", e,
            TK(loom_matmul(TK(loom_transpose(ta, -1, -2)), tb)), 1e-4, 1e-4);
  ref_free(a), ref_free(b), ref_free(at), ref_free(e);
  ref_release_all();
  /* errors */
  loom_tensor *x = TK(loom_zeros(LOOM_SHAPE(4, 2), LOOM_F32, test_device()));
  loom_tensor *y = TK(loom_zeros(LOOM_SHAPE(3, 1), LOOM_F32, test_device()));
  loom_tensor *z = TK(loom_matmul(x, y));
  CHECK_STATUS(z, LOOM_ERR_SHAPE);
  const char *msg = loom_error_message(z);
  CHECK_STR_CONTAINS(msg, "loom_matmul");
  CHECK_MSG(msg && (strstr(msg, "[4,2]") || strstr(msg, "[4, 2]") || strstr(msg, "(4, 2)")),
            "matmul message names [4,2]: %s", msg ? msg : "(null)");
  CHECK_MSG(msg && (strstr(msg, "[3,1]") || strstr(msg, "[3, 1]") || strstr(msg, "(3, 1)")),
            "matmul message names [3,1]: %s", msg ? msg : "(null)");
  loom_tensor *xd = TK(loom_zeros(LOOM_SHAPE(2, 3), LOOM_F64, test_device()));
  loom_tensor *yf = TK(loom_zeros(LOOM_SHAPE(3, 2), LOOM_F32, test_device()));
  CHECK_STATUS(TK(loom_matmul(xd, yf)), LOOM_ERR_DTYPE);
  loom_tensor *xb = TK(loom_zeros(LOOM_SHAPE(2, 2), LOOM_BOOL, test_device()));
  CHECK_STATUS(TK(loom_matmul(xb, xb)), LOOM_ERR_DTYPE);
  loom_tensor *b1 = TK(loom_zeros(LOOM_SHAPE(2, 2, 3), LOOM_F32, test_device()));
  loom_tensor *b2 = TK(loom_zeros(LOOM_SHAPE(3, 3, 2), LOOM_F32, test_device()));
  CHECK_STATUS(TK(loom_matmul(b1, b2)), LOOM_ERR_SHAPE);
  ref_release_all();
}

/* A fused chain of several ops checked end to end. */
static void test_chains(void) {
  ref_t *a, *b;
  loom_tensor *ta = ref_make_input(LOOM_SHAPE(6, 5), LOOM_F32, DOM_ANY, V_CONTIG, &a);
  loom_tensor *tb = ref_make_input(LOOM_SHAPE(5), LOOM_F32, DOM_ANY, V_CONTIG, &b);
  /* sum(relu(a * b + 1) , -1) / 5 */
  ref_t *r1 = ref_mul(a, b), *r2 = ref_add_s(r1, 1), *r3 = ref_relu(r2);
  const int ax[] = {-1};
  ref_t *r4 = ref_sum(r3, ax, 1, false), *r5 = ref_div_s(r4, 5);
  loom_tensor *t5 = TK(loom_div_s(
      TK(loom_sum(TK(loom_relu(TK(loom_add_s(TK(loom_mul(ta, tb)), 1)))), ax, 1, false)), 5));
  REF_CHECK("chain sum(relu(a*b+1))/5", r5, t5, 1e-5, 1e-5);
  /* the same subexpression used twice, and the intermediate read as well */
  loom_tensor *t1 = TK(loom_mul(ta, tb));
  loom_tensor *t6 = TK(loom_add(TK(loom_exp(t1)), TK(loom_neg(t1))));
  ref_t *r6a = ref_exp(r1), *r6b = ref_neg(r1), *r6 = ref_add(r6a, r6b);
  REF_CHECK("chain exp(x) + -x", r6, t6, 1e-5, 1e-5);
  REF_CHECK("chain intermediate a*b", r1, t1, 1e-6, 1e-7);
  /* softmax of a matmul */
  ref_t *w;
  loom_tensor *tw = ref_make_input(LOOM_SHAPE(5, 3), LOOM_F32, DOM_ANY, V_CONTIG, &w);
  ref_t *r7 = ref_matmul(a, w), *r8 = ref_softmax(r7, -1);
  REF_CHECK("chain softmax(a @ w)", r8, TK(loom_softmax(TK(loom_matmul(ta, tw)), -1)), 1e-4, 1e-5);
  ref_t *all[] = {a, b, r1, r2, r3, r4, r5, r6a, r6b, r6, w, r7, r8};
  for (int i = 0; i < (int)(sizeof all / sizeof all[0]); i++) ref_free(all[i]);
  ref_release_all();
}

/* Sizes big enough for the parallel paths, and value edge cases. */
static void test_large_and_edges(void) {
  ref_t *a, *b;
  loom_tensor *ta = ref_make_input(LOOM_SHAPE(513, 1031), LOOM_F32, DOM_POS, V_CONTIG, &a);
  loom_tensor *tb = ref_make_input(LOOM_SHAPE(1031), LOOM_F32, DOM_ANY, V_CONTIG, &b);
  ref_t *r1 = ref_mul(a, b), *r2 = ref_exp(r1);
  REF_CHECK("large exp(a*b)", r2, TK(loom_exp(TK(loom_mul(ta, tb)))), 1e-4, 1e-5);
  const int ax0[] = {0}, ax1[] = {-1};
  ref_t *s0 = ref_sum(a, ax0, 1, false), *s1 = ref_sum(a, ax1, 1, true), *sa = ref_sum_all(a);
  REF_CHECK("large sum axis 0", s0, TK(loom_sum(ta, ax0, 1, false)), 1e-4, 1e-4);
  REF_CHECK("large sum axis -1", s1, TK(loom_sum(ta, ax1, 1, true)), 1e-4, 1e-4);
  REF_CHECK("large sum_all", sa, TK(loom_sum_all(ta)), 1e-4, 1e-4);
  ref_t *mx = ref_max(a, ax0, 1, false), *am = ref_argmax(a, 1, false);
  REF_CHECK("large max axis 0", mx, TK(loom_max(ta, ax0, 1, false)), 0, 0);
  REF_CHECK("large argmax axis 1", am, TK(loom_argmax(ta, 1, false)), 0, 0);
  ref_t *sm = ref_softmax(a, -1);
  REF_CHECK("large softmax", sm, TK(loom_softmax(ta, -1)), 1e-4, 1e-7);
  ref_t *tr = ref_transpose(a, 0, 1);
  REF_CHECK("large transpose copy", tr, TK(loom_contiguous(TK(loom_transpose(ta, 0, 1)))), 0, 0);
  ref_t *all[] = {a, b, r1, r2, s0, s1, sa, mx, am, sm, tr};
  for (int i = 0; i < (int)(sizeof all / sizeof all[0]); i++) ref_free(all[i]);
  ref_release_all();
  check_matmul(LOOM_F32, LOOM_SHAPE(130, 257), LOOM_SHAPE(257, 70), V_CONTIG, V_PERMUTE);
  check_matmul(LOOM_F64, LOOM_SHAPE(3, 64, 65), LOOM_SHAPE(65, 66), V_CONTIG, V_CONTIG);
  check_matmul(LOOM_I64, LOOM_SHAPE(40, 50), LOOM_SHAPE(50, 30), V_PERMUTE, V_CONTIG);

  /* U8 arithmetic wraps; integral scalars keep U8 */
  ref_t *u = ref_from_values(LOOM_SHAPE(4), LOOM_U8, (const double[]){250, 16, 0, 128});
  loom_tensor *tu = TK(ref_to_loom(u));
  ref_t *e1 = ref_add_s(u, 10), *e2 = ref_mul(u, u), *e3 = ref_sub_s(u, 1), *e4 = ref_neg(u);
  REF_CHECK("U8 add_s wraps", e1, TK(loom_add_s(tu, 10)), 0, 0);
  REF_CHECK("U8 mul wraps", e2, TK(loom_mul(tu, tu)), 0, 0);
  REF_CHECK("U8 sub_s wraps", e3, TK(loom_sub_s(tu, 1)), 0, 0);
  REF_CHECK("U8 neg wraps", e4, TK(loom_neg(tu)), 0, 0);
  ref_free(u), ref_free(e1), ref_free(e2), ref_free(e3), ref_free(e4);
  /* integer true division by zero */
  ref_t *n = ref_from_values(LOOM_SHAPE(3), LOOM_I32, (const double[]){1, -1, 0});
  ref_t *z = ref_full(LOOM_SHAPE(3), 0, LOOM_I32), *q = ref_div(n, z);
  REF_CHECK("I32 / 0 -> inf, -inf, nan", q, TK(loom_div(TK(ref_to_loom(n)), TK(ref_to_loom(z)))), 0,
            0);
  ref_free(n), ref_free(z), ref_free(q);
  /* casts to BOOL: -0.0 is false, NaN is true */
  ref_t *c = ref_from_values(LOOM_SHAPE(5), LOOM_F32, (const double[]){-0.0, 0.1, -0.1, NAN, 0});
  ref_t *cb = ref_cast(c, LOOM_BOOL);
  REF_CHECK("cast F32 -> BOOL specials", cb, TK(loom_cast(TK(ref_to_loom(c)), LOOM_BOOL)), 0, 0);
  ref_free(c), ref_free(cb);
  /* float -> integer out of range: saturated at the target's limits, NaN 0 */
  const double wild[] = {INFINITY, -INFINITY, NAN, 3e9, -3e9, 300.7, -1.5, 1e30, -1e30, 255.9};
  for (int f = 0; f < 2; f++) {
    loom_dtype from = f ? LOOM_F64 : LOOM_F32;
    ref_t *w = ref_from_values(LOOM_SHAPE(10), from, wild);
    const loom_dtype tos[] = {LOOM_I32, LOOM_I64, LOOM_U8};
    for (int t = 0; t < 3; t++) {
      char what[64];
      snprintf(what, sizeof what, "cast %s -> %s out of range", loom_dtype_name(from),
               loom_dtype_name(tos[t]));
      ref_t *e = ref_cast(w, tos[t]);
      REF_CHECK(what, e, TK(loom_cast(TK(ref_to_loom(w)), tos[t])), 0, 0);
      ref_free(e);
    }
    ref_free(w);
  }
  /* loom_to the same device is the same values */
  ref_t *x;
  loom_tensor *tx = ref_make_input(LOOM_SHAPE(3, 4), LOOM_I64, DOM_ANY, V_PERMUTE, &x);
  loom_tensor *tt = TK(loom_to(tx, test_device()));
  REF_CHECK("to(the same device)", x, tt, 0, 0);
  ref_free(x);
  ref_release_all();
}

/* Expects t to be a good tensor of dtype d and shape s with these values. */
static void expect_vals(const char *what, loom_tensor *t, loom_dtype d, loom_shape s,
                        const double *v) {
  ref_t *e = ref_from_values(s, d, v);
  REF_CHECK(what, e, t, 1e-6, 1e-6);
  ref_free(e);
}

/* 0-d inputs, weak scalars at float32 precision, clamping, infinities. */
static void test_zero_d_and_edges(void) {
  loom_tensor *sc = TK(loom_scalar(3, LOOM_F32, test_device()));
  const int ax0[] = {0}, axm1[] = {-1};
  expect_vals("sum(0-d, {0})", TK(loom_sum(sc, ax0, 1, false)), LOOM_F32, LOOM_SHAPE0,
              (double[]){3});
  expect_vals("max(0-d, {-1}, keepdim)", TK(loom_max(sc, axm1, 1, true)), LOOM_F32, LOOM_SHAPE0,
              (double[]){3});
  expect_vals("softmax(0-d)", TK(loom_softmax(sc, 0)), LOOM_F32, LOOM_SHAPE0, (double[]){1});
  expect_vals("argmax(0-d)", TK(loom_argmax(sc, 0, false)), LOOM_I64, LOOM_SHAPE0, (double[]){0});
  expect_vals("squeeze(0-d)", TK(loom_squeeze(sc, 0)), LOOM_F32, LOOM_SHAPE0, (double[]){3});
  expect_vals("unsqueeze(0-d, -1)", TK(loom_unsqueeze(sc, -1)), LOOM_F32, LOOM_SHAPE(1),
              (double[]){3});
  expect_vals("flatten(0-d)", TK(loom_flatten(sc, 0, -1)), LOOM_F32, LOOM_SHAPE(1), (double[]){3});
  expect_vals("reshape(0-d, [-1])", TK(loom_reshape(sc, LOOM_SHAPE(-1))), LOOM_F32, LOOM_SHAPE(1),
              (double[]){3});
  expect_vals("expand(0-d, [2,2])", TK(loom_expand(sc, LOOM_SHAPE(2, 2))), LOOM_F32,
              LOOM_SHAPE(2, 2), (double[]){3, 3, 3, 3});
  loom_tensor *one[1] = {sc};
  CHECK_STATUS(TK(loom_cat(one, 1, 0)), LOOM_ERR_SHAPE);
  CHECK_STATUS(TK(loom_cat(one, 0, 0)), LOOM_ERR_VALUE);
  CHECK_STATUS(TK(loom_matmul(sc, sc)), LOOM_ERR_SHAPE);
  /* a weak scalar is compared at the tensor's precision: torch.tensor([0.1]) == 0.1 */
  float f01 = 0.1f;
  loom_tensor *x = TK(loom_from_data(&f01, LOOM_SHAPE(1), LOOM_F32, test_device()));
  expect_vals("F32 0.1 eq_s 0.1", TK(loom_eq_s(x, 0.1)), LOOM_BOOL, LOOM_SHAPE(1), (double[]){1});
  expect_vals("F32 0.1 gt_s 0.1", TK(loom_gt_s(x, 0.1)), LOOM_BOOL, LOOM_SHAPE(1), (double[]){0});
  expect_vals("F32 0.1 sub_s 0.1", TK(loom_sub_s(x, 0.1)), LOOM_F32, LOOM_SHAPE(1), (double[]){0});
  /* integer pow with negative bases */
  loom_tensor *xi =
      TK(loom_from_data((int32_t[]){-2, -3, 2, 0}, LOOM_SHAPE(4), LOOM_I32, test_device()));
  expect_vals("I32 pow_s 3", TK(loom_pow_s(xi, 3)), LOOM_I32, LOOM_SHAPE(4),
              (double[]){-8, -27, 8, 0});
  expect_vals("I32 pow_s 0", TK(loom_pow_s(xi, 0)), LOOM_I32, LOOM_SHAPE(4),
              (double[]){1, 1, 1, 1});
  /* argmax/argmin treat NaN as the extreme (first NaN), as torch */
  loom_tensor *xn =
      TK(loom_from_data((float[]){1, NAN, 5, NAN}, LOOM_SHAPE(4), LOOM_F32, test_device()));
  expect_vals("argmax with NaN", TK(loom_argmax(xn, 0, false)), LOOM_I64, LOOM_SHAPE0,
              (double[]){1});
  expect_vals("argmin with NaN", TK(loom_argmin(xn, 0, false)), LOOM_I64, LOOM_SHAPE0,
              (double[]){1});
  /* slice clamps extreme bounds; pad can crop to exactly zero */
  loom_tensor *a = TK(loom_arange(0, 10, 1, LOOM_I64, test_device()));
  expect_vals("slice(MIN, MAX, 3)", TK(loom_slice(a, 0, INT64_MIN, INT64_MAX, 3)), LOOM_I64,
              LOOM_SHAPE(4), (double[]){0, 3, 6, 9});
  expect_vals("slice(-100, -50)", TK(loom_slice(a, 0, -100, -50, 1)), LOOM_I64, LOOM_SHAPE(0),
              NULL);
  expect_vals("pad(-5, -5)", TK(loom_pad(a, (int64_t[]){-5, -5}, 2, 0)), LOOM_I64, LOOM_SHAPE(0),
              NULL);
  CHECK_STATUS(TK(loom_pad(a, (int64_t[]){1, 1, 1, 1}, 4, 0)), LOOM_ERR_VALUE);
  CHECK_STATUS(TK(loom_pad(a, (int64_t[]){1, 1, 1}, 3, 0)), LOOM_ERR_VALUE);
  /* infinities through the softmax family */
  loom_tensor *ninf = TK(loom_full(LOOM_SHAPE(2), -INFINITY, LOOM_F32, test_device()));
  expect_vals("logsumexp(-inf, -inf)", TK(loom_logsumexp(ninf, 0)), LOOM_F32, LOOM_SHAPE0,
              (double[]){-INFINITY});
  loom_tensor *mi =
      TK(loom_from_data((float[]){-INFINITY, 0}, LOOM_SHAPE(2), LOOM_F32, test_device()));
  expect_vals("softmax(-inf, 0)", TK(loom_softmax(mi, 0)), LOOM_F32, LOOM_SHAPE(2),
              (double[]){0, 1});
  /* BOOL: + and * are logical (torch); subtraction is refused */
  loom_tensor *bt =
      TK(loom_from_data((uint8_t[]){1, 1, 0}, LOOM_SHAPE(3), LOOM_BOOL, test_device()));
  loom_tensor *bu =
      TK(loom_from_data((uint8_t[]){1, 0, 0}, LOOM_SHAPE(3), LOOM_BOOL, test_device()));
  expect_vals("bool + bool", TK(loom_add(bt, bu)), LOOM_BOOL, LOOM_SHAPE(3), (double[]){1, 1, 0});
  expect_vals("bool * bool", TK(loom_mul(bt, bu)), LOOM_BOOL, LOOM_SHAPE(3), (double[]){1, 0, 0});
  CHECK_STATUS(TK(loom_sub(bt, bu)), LOOM_ERR_DTYPE);
  CHECK_STATUS(TK(loom_sub_s(bt, 1)), LOOM_ERR_DTYPE);
  CHECK_STATUS(TK(loom_rsub_s(1, bt)), LOOM_ERR_DTYPE);
  loom_clear_error();
  ref_release_all();
}

/* log1p and expm1 where log(1 + x) and exp(x) - 1 lose every digit: tiny x,
 * the edges (-1, infinities, NaN), in both float widths against libm. */
static void test_log1p_expm1(void) {
  const double xs[] = {1e-30, -3e-12, 1e-7, 0.25, -0.5, 3, -1, 700, -700, INFINITY, -INFINITY, NAN};
  const int n = (int)(sizeof xs / sizeof xs[0]);
  for (int dt = LOOM_F32; dt <= LOOM_F64; dt++) LOOM_SCOPE {
      loom_tensor *x =
          loom_cast(loom_from_data(xs, LOOM_SHAPE(n), LOOM_F64, test_device()), (loom_dtype)dt);
      double l[12], e[12];
      CHECK_OK(loom_copy_to_host(loom_cast(loom_log1p(x), LOOM_F64), l, sizeof l));
      CHECK_OK(loom_copy_to_host(loom_cast(loom_expm1(x), LOOM_F64), e, sizeof e));
      for (int i = 0; i < n; i++) {
        double v = dt == LOOM_F32 ? (double)(float)xs[i] : xs[i];
        double wl = dt == LOOM_F32 ? (double)log1pf((float)v) : log1p(v);
        double we = dt == LOOM_F32 ? (double)expm1f((float)v) : expm1(v);
        double tol = dt == LOOM_F32 ? 4e-7 : 1e-15;
        bool ok_l = (isnan(wl) && isnan(l[i])) || wl == l[i] || fabs(l[i] - wl) <= tol * fabs(wl);
        bool ok_e = (isnan(we) && isnan(e[i])) || we == e[i] || fabs(e[i] - we) <= tol * fabs(we);
        CHECK_MSG(ok_l, "%s log1p(%.17g) = %.17g, libm %.17g", loom_dtype_name(dt), v, l[i], wl);
        CHECK_MSG(ok_e, "%s expm1(%.17g) = %.17g, libm %.17g", loom_dtype_name(dt), v, e[i], we);
      }
    }
}

int main(void) {
  ref_seed(0x1234);
  test_log1p_expm1();
  test_creation();
  test_unary();
  test_binary();
  test_scalar_forms();
  test_where();
  test_clamp();
  test_cast();
  test_bitcast();
  test_reductions();
  test_shape_ops();
  test_cat_stack();
  test_matmul();
  test_chains();
  test_large_and_edges();
  test_zero_d_and_edges();
  loom_stats st = loom_get_stats();
  printf("graphs compiled %llu, kernels compiled %llu (%.2f s), kernels launched %llu\n",
         (unsigned long long)st.graphs_compiled, (unsigned long long)st.kernels_compiled,
         (double)st.compile_ns * 1e-9, (unsigned long long)st.kernels_launched);
  return check_report();
}
