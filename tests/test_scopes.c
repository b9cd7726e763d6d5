/* Scopes: LOOM_SCOPE / loom_scope_begin / end, loom_keep, nesting, lifetimes. */
#include <math.h>

#include "check.h"
#include "loom.h"
#include "ref.h"

static uint64_t live(void) { return loom_get_stats().bytes_live; }

static void test_basic(void) {
  CHECK_EQ_INT(loom_scope_depth(), 0);
  uint64_t b0 = live();
  LOOM_SCOPE {
    CHECK_EQ_INT(loom_scope_depth(), 1);
    loom_tensor *a = loom_arange(0, 1000, 1, LOOM_F32, LOOM_CPU);
    loom_tensor *b = loom_mul_s(a, 2);
    loom_tensor *c = loom_sum_all(b);
    CHECK(loom_item(c) == 999000.0);
    CHECK(live() > b0);
    /* nothing freed by hand: the scope releases a, b, c */
  }
  CHECK_EQ_INT(loom_scope_depth(), 0);
  CHECK_EQ_INT(live(), b0);
  /* the function form */
  loom_scope_begin();
  CHECK_EQ_INT(loom_scope_depth(), 1);
  loom_tensor *x = loom_ones(LOOM_SHAPE(64, 64), LOOM_F64, LOOM_CPU);
  CHECK_OK(loom_realize(x));
  CHECK_OK(loom_scope_end());
  CHECK_EQ_INT(loom_scope_depth(), 0);
  CHECK_EQ_INT(live(), b0);
}

static void test_keep(void) {
  uint64_t b0 = live();
  double in[6] = {1, 2, 3, 4, 5, 6};
  loom_tensor *kept = NULL, *kept_ret = NULL;
  loom_scope_begin();
  {
    loom_tensor *a = loom_from_data(in, LOOM_SHAPE(2, 3), LOOM_F64, LOOM_CPU);
    loom_tensor *b = loom_exp(a);
    loom_tensor *c = loom_add_s(loom_mul_s(b, 0.0), 1.0); /* intermediates belong to the scope */
    kept = loom_add(c, a);
    kept_ret = loom_keep(kept);
  }
  CHECK_OK(loom_scope_end());
  CHECK(kept_ret == kept);
  CHECK(loom_is_realized(kept));
  CHECK_EQ_INT(loom_status_of(kept), LOOM_OK);
  double out[6];
  CHECK_OK(loom_copy_to_host(kept, out, sizeof out));
  for (int i = 0; i < 6; i++) CHECK(out[i] == in[i] + 1);
  /* usable in further computation outside the scope */
  loom_tensor *s = loom_sum_all(kept);
  CHECK(loom_item(s) == 27.0);
  loom_free(s);
  loom_free(kept); /* outside all scopes the caller frees */
  CHECK_EQ_INT(live(), b0);
}

static void test_kept_view_and_referenced(void) {
  uint64_t b0 = live();
  loom_tensor *v = NULL, *w = NULL;
  LOOM_SCOPE {
    loom_tensor *a = loom_arange(0, 12, 1, LOOM_I32, LOOM_CPU);
    loom_tensor *r = loom_reshape(a, LOOM_SHAPE(3, 4));
    v = loom_keep(loom_transpose(r, 0, 1)); /* a view of tensors the scope releases */
    w = loom_keep(loom_slice(r, 1, 1, 4, 2));
  }
  CHECK(loom_is_realized(v));
  ref_t *x = ref_arange(0, 12, 1, LOOM_I32), *rx = ref_reshape(x, LOOM_SHAPE(3, 4));
  ref_t *ev = ref_transpose(rx, 0, 1), *ew = ref_slice(rx, 1, 1, 4, 2);
  REF_CHECK("kept transpose view", ev, v, 0, 0);
  REF_CHECK("kept slice view", ew, w, 0, 0);
  /* a lazy result built on a kept tensor outside the scope */
  loom_tensor *u = loom_add(v, v);
  ref_t *eu = ref_add(ev, ev);
  REF_CHECK("op on kept", eu, u, 0, 0);
  loom_free(u);
  loom_free(v);
  loom_free(w);
  ref_free(x), ref_free(rx), ref_free(ev), ref_free(ew), ref_free(eu);
  CHECK_EQ_INT(live(), b0);
}

static void test_nested(void) {
  uint64_t b0 = live();
  loom_tensor *outer_kept = NULL;
  loom_scope_begin();
  loom_tensor *base = loom_full(LOOM_SHAPE(4), 2.0, LOOM_F32, LOOM_CPU);
  loom_tensor *inner_kept = NULL;
  loom_scope_begin();
  CHECK_EQ_INT(loom_scope_depth(), 2);
  loom_tensor *t = loom_mul(base, base);
  inner_kept = loom_keep(loom_add_s(t, 1)); /* to the outer scope */
  loom_tensor *dropped = loom_exp(t);
  (void)dropped;
  CHECK_OK(loom_scope_end());
  CHECK_EQ_INT(loom_scope_depth(), 1);
  CHECK(loom_is_realized(inner_kept));
  CHECK(loom_item(loom_sum_all(inner_kept)) == 20.0); /* temp belongs to the outer scope */
  LOOM_SCOPE {
    CHECK_EQ_INT(loom_scope_depth(), 2);
    LOOM_SCOPE {
      CHECK_EQ_INT(loom_scope_depth(), 3);
      loom_tensor *deep = loom_mul_s(inner_kept, 10);
      loom_keep(deep);
      CHECK(loom_item(loom_sum_all(deep)) == 200.0);
    }
    CHECK_EQ_INT(loom_scope_depth(), 2);
  }
  outer_kept = loom_keep(loom_mul_s(inner_kept, 3));
  CHECK_OK(loom_scope_end());
  CHECK_EQ_INT(loom_scope_depth(), 0);
  float out[4];
  CHECK_OK(loom_copy_to_host(outer_kept, out, sizeof out));
  for (int i = 0; i < 4; i++) CHECK(out[i] == 15.0f);
  loom_free(outer_kept);
  CHECK_EQ_INT(live(), b0);
}

static void test_free_inside_scope(void) {
  uint64_t b0 = live();
  LOOM_SCOPE {
    loom_tensor *a = loom_ones(LOOM_SHAPE(100), LOOM_F32, LOOM_CPU);
    loom_tensor *b = loom_add_s(a, 1);
    CHECK(loom_item(loom_sum_all(b)) == 200.0);
    loom_free(b); /* allowed; the scope must not free it again */
    loom_free(a);
    loom_tensor *c = loom_zeros(LOOM_SHAPE(8), LOOM_I64, LOOM_CPU);
    CHECK_OK(loom_realize(c));
    loom_free(c);
  }
  CHECK_EQ_INT(live(), b0);
  /* retain inside a scope: the extra reference belongs to the scope as well */
  loom_tensor *keepme = NULL;
  LOOM_SCOPE {
    loom_tensor *a = loom_arange(0, 5, 1, LOOM_F64, LOOM_CPU);
    loom_tensor *r = loom_retain(a);
    CHECK(r == a);
    keepme = loom_keep(loom_retain(a));
  }
  LOOM_SCOPE { CHECK(loom_item(loom_slice(keepme, 0, 4, 5, 1)) == 4.0); }
  loom_free(keepme);
  CHECK_EQ_INT(live(), b0);
}

static void test_outside_scope_refcounts(void) {
  uint64_t b0 = live();
  loom_tensor *a = loom_arange(0, 10, 1, LOOM_F32, LOOM_CPU);
  loom_tensor *r = loom_retain(a);
  CHECK(r == a);
  loom_free(a);
  loom_tensor *s = loom_sum_all(r); /* still alive through r */
  CHECK(loom_item(s) == 45.0);
  loom_free(s);
  loom_free(r);
  CHECK_EQ_INT(live(), b0);
  /* a tensor made outside a scope, used inside it, survives the scope */
  loom_tensor *x = loom_full(LOOM_SHAPE(3), 4.0, LOOM_F32, LOOM_CPU);
  loom_tensor *y = NULL;
  LOOM_SCOPE {
    loom_tensor *z = loom_mul(x, x);
    y = loom_keep(loom_sqrt(z));
  }
  float out[3];
  CHECK_OK(loom_copy_to_host(x, out, sizeof out));
  CHECK(out[2] == 4.0f);
  CHECK_OK(loom_copy_to_host(y, out, sizeof out));
  CHECK(out[0] == 4.0f && out[1] == 4.0f);
  loom_free(x);
  loom_free(y);
  CHECK_EQ_INT(live(), b0);
}

static void test_many_tensors(void) {
  uint64_t b0 = live();
  loom_tensor *result = NULL;
  LOOM_SCOPE {
    loom_tensor *acc = loom_zeros(LOOM_SHAPE(16, 16), LOOM_F32, LOOM_CPU);
    for (int i = 0; i < 200; i++) {
      acc = loom_add_s(acc, 1.0);
      if (i % 50 == 49) CHECK_OK(loom_realize(acc));
    }
    result = loom_keep(loom_mean_all(acc));
  }
  CHECK(loom_item(result) == 200.0);
  loom_free(result);
  CHECK_EQ_INT(live(), b0);
}

static void test_keep_error_tensor(void) {
  loom_tensor *e = NULL;
  loom_scope_begin();
  loom_tensor *a = loom_ones(LOOM_SHAPE(2), LOOM_F32, LOOM_CPU);
  loom_tensor *b = loom_ones(LOOM_SHAPE(3), LOOM_F32, LOOM_CPU);
  e = loom_keep(loom_add(a, b));
  loom_status st = loom_scope_end();
  CHECK_EQ_INT(loom_status_of(e), LOOM_ERR_SHAPE);
  CHECK_EQ_INT(st, LOOM_ERR_SHAPE);
  loom_free(e);
  loom_clear_error();
}

/* The end of a scope realizes pending assignments even when nothing is kept. */
static void test_scope_end_runs_assignments(void) {
  double v[3] = {1, 2, 3}, out[3];
  loom_tensor *p = loom_from_data(v, LOOM_SHAPE(3), LOOM_F64, LOOM_CPU);
  LOOM_SCOPE { CHECK_OK(loom_assign(p, loom_add_s(p, 1))); }
  CHECK(loom_is_realized(p));
  CHECK_OK(loom_copy_to_host(p, out, sizeof out));
  CHECK(out[0] == 2 && out[1] == 3 && out[2] == 4);
  loom_free(p);
}

int main(void) {
  test_scope_end_runs_assignments();
  /* warm up compilation and the allocator so live-byte counts start settled */
  loom_tensor *w = loom_ones(LOOM_SHAPE(4), LOOM_F32, LOOM_CPU);
  CHECK_OK(loom_realize(w));
  loom_free(w);
  test_basic();
  test_keep();
  test_kept_view_and_referenced();
  test_nested();
  test_free_inside_scope();
  test_outside_scope_refcounts();
  test_many_tensors();
  test_keep_error_tensor();
  CHECK_EQ_INT(loom_scope_depth(), 0);
  return check_report();
}
