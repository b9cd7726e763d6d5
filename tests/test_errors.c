/* Errors: statuses, messages, error tensors and their propagation, the first-error
 * record and the error handler. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "loom.h"
#include "ref.h"

static int handler_calls;
static loom_status handler_last;
static char handler_msg[512];
static void *handler_ud;
static void count_handler(loom_status s, const char *msg, void *ud) {
  handler_calls++;
  handler_last = s;
  handler_ud = ud;
  snprintf(handler_msg, sizeof handler_msg, "%s", msg ? msg : "");
}

/* A returned tensor is never NULL and carries `st`. */
#define CHECK_ERR(expr, st)                                                                        \
  do {                                                                                             \
    loom_tensor *e_t_ = TK(expr);                                                                  \
    CHECK_MSG(e_t_ != NULL, "%s returned NULL", #expr);                                            \
    if (e_t_) {                                                                                    \
      loom_status e_s_ = loom_status_of(e_t_);                                                     \
      CHECK_MSG(e_s_ == (st), "%s: status %s (%s), expected %s", #expr, loom_status_name(e_s_),    \
                loom_error_message(e_t_) ? loom_error_message(e_t_) : "no message",                \
                loom_status_name(st));                                                             \
      if (e_s_ != LOOM_OK) CHECK_MSG(loom_error_message(e_t_) != NULL, "%s: no message", #expr);   \
    }                                                                                              \
  } while (0)

static bool has_shape(const char *msg, loom_shape s) {
  if (!msg) return false;
  char a[64], b[64], c[64];
  ref_shape_str(s, a, sizeof a);
  /* also "[2, 3]" and "(2, 3)" */
  size_t n = 0;
  n += (size_t)snprintf(b + n, sizeof b - n, "[");
  for (int i = 0; i < s.ndim; i++)
    n += (size_t)snprintf(b + n, sizeof b - n, "%s%lld", i ? ", " : "", (long long)s.dim[i]);
  snprintf(b + n, sizeof b - n, "]");
  snprintf(c, sizeof c, "(%s", b + 1);
  c[strlen(c) - 1] = ')';
  return strstr(msg, a) || strstr(msg, b) || strstr(msg, c);
}

static void test_null_inputs(void) {
  loom_tensor *x = TK(loom_ones(LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU));
  const int ax[] = {0};
  CHECK_ERR(loom_add(NULL, x), LOOM_ERR_NULL);
  CHECK_ERR(loom_add(x, NULL), LOOM_ERR_NULL);
  CHECK_ERR(loom_mul_s(NULL, 2), LOOM_ERR_NULL);
  CHECK_ERR(loom_rsub_s(1, NULL), LOOM_ERR_NULL);
  CHECK_ERR(loom_lt(NULL, NULL), LOOM_ERR_NULL);
  CHECK_ERR(loom_where(NULL, x, x), LOOM_ERR_NULL);
  CHECK_ERR(loom_exp(NULL), LOOM_ERR_NULL);
  CHECK_ERR(loom_neg(NULL), LOOM_ERR_NULL);
  CHECK_ERR(loom_cast(NULL, LOOM_F64), LOOM_ERR_NULL);
  CHECK_ERR(loom_bitcast(NULL, LOOM_I32), LOOM_ERR_NULL);
  CHECK_ERR(loom_sum(NULL, ax, 1, false), LOOM_ERR_NULL);
  CHECK_ERR(loom_sum_all(NULL), LOOM_ERR_NULL);
  CHECK_ERR(loom_argmax(NULL, 0, false), LOOM_ERR_NULL);
  CHECK_ERR(loom_softmax(NULL, 0), LOOM_ERR_NULL);
  CHECK_ERR(loom_reshape(NULL, LOOM_SHAPE(6)), LOOM_ERR_NULL);
  CHECK_ERR(loom_permute(x, NULL, 2), LOOM_ERR_NULL);
  CHECK_ERR(loom_transpose(NULL, 0, 1), LOOM_ERR_NULL);
  CHECK_ERR(loom_slice(NULL, 0, 0, 1, 1), LOOM_ERR_NULL);
  CHECK_ERR(loom_pad(x, NULL, 2, 0), LOOM_ERR_NULL);
  CHECK_ERR(loom_cat(NULL, 2, 0), LOOM_ERR_NULL);
  loom_tensor *with_null[2] = {x, NULL};
  CHECK_ERR(loom_cat(with_null, 2, 0), LOOM_ERR_NULL);
  CHECK_ERR(loom_stack(with_null, 2, 0), LOOM_ERR_NULL);
  CHECK_ERR(loom_matmul(NULL, x), LOOM_ERR_NULL);
  CHECK_ERR(loom_contiguous(NULL), LOOM_ERR_NULL);
  CHECK_ERR(loom_from_data(NULL, LOOM_SHAPE(2), LOOM_F32, LOOM_CPU), LOOM_ERR_NULL);
  CHECK_ERR(loom_zeros_like(NULL), LOOM_ERR_NULL);
  CHECK_RC(loom_realize(NULL), LOOM_ERR_NULL);
  CHECK_RC(loom_eval(NULL, 1), LOOM_ERR_NULL);
  float buf[6];
  CHECK_RC(loom_copy_to_host(NULL, buf, sizeof buf), LOOM_ERR_NULL);
  CHECK_RC(loom_copy_to_host(x, NULL, sizeof buf), LOOM_ERR_NULL);
  CHECK_RC(loom_print(NULL), LOOM_ERR_NULL);
  loom_clear_error();
  CHECK(isnan(loom_item(NULL)));
  CHECK_EQ_INT(loom_last_status(), LOOM_ERR_NULL);
  CHECK(loom_status_of(NULL) != LOOM_OK);
  loom_free(NULL); /* ignored */
  CHECK(1);
  ref_release_all();
}

static void test_shape_errors(void) {
  loom_tensor *a = TK(loom_ones(LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU));
  loom_tensor *b = TK(loom_ones(LOOM_SHAPE(4), LOOM_F32, LOOM_CPU));
  struct {
    const char *name;
    loom_bin_fn fn;
  } ops[] = {{"loom_add", loom_add}, {"loom_sub", loom_sub},         {"loom_mul", loom_mul},
             {"loom_div", loom_div}, {"loom_maximum", loom_maximum}, {"loom_lt", loom_lt},
             {"loom_eq", loom_eq},   {"loom_pow", loom_pow}};
  for (int i = 0; i < (int)(sizeof ops / sizeof ops[0]); i++) {
    loom_tensor *e = TK(ops[i].fn(a, b));
    check_set_ctx("%s [2,3] x [4]", ops[i].name);
    CHECK_STATUS(e, LOOM_ERR_SHAPE);
    const char *m = loom_error_message(e);
    CHECK_STR_CONTAINS(m, ops[i].name);
    CHECK_MSG(has_shape(m, LOOM_SHAPE(2, 3)) && has_shape(m, LOOM_SHAPE(4)),
              "message names both shapes: %s", m ? m : "(null)");
  }
  check_ctx[0] = 0;
  loom_tensor *c = TK(loom_ones(LOOM_SHAPE(2, 3), LOOM_BOOL, LOOM_CPU));
  CHECK_ERR(loom_where(c, a, b), LOOM_ERR_SHAPE);
  CHECK_ERR(loom_where(TK(loom_ones(LOOM_SHAPE(5), LOOM_BOOL, LOOM_CPU)), a, a), LOOM_ERR_SHAPE);
  CHECK_ERR(loom_reshape(a, LOOM_SHAPE(4, 2)), LOOM_ERR_SHAPE);
  CHECK_ERR(loom_reshape(a, LOOM_SHAPE(-1, 4)), LOOM_ERR_SHAPE);
  CHECK_ERR(loom_expand(a, LOOM_SHAPE(2, 4)), LOOM_ERR_SHAPE);
  CHECK_ERR(loom_expand(a, LOOM_SHAPE(3)), LOOM_ERR_SHAPE);
  loom_tensor *ab[2] = {a, b};
  CHECK_ERR(loom_cat(ab, 2, 0), LOOM_ERR_SHAPE);
  CHECK_ERR(loom_matmul(a, a), LOOM_ERR_SHAPE);
  /* negative dims, too many dims */
  CHECK_ERR(loom_zeros(LOOM_SHAPE(-1, 2), LOOM_F32, LOOM_CPU), LOOM_ERR_SHAPE);
  CHECK_ERR(loom_full(LOOM_SHAPE(3, -5), 1.0, LOOM_I32, LOOM_CPU), LOOM_ERR_SHAPE);
  float d4[4] = {0};
  CHECK_ERR(loom_from_data(d4, LOOM_SHAPE(-4), LOOM_F32, LOOM_CPU), LOOM_ERR_SHAPE);
  loom_shape nine = LOOM_SHAPE(1, 1, 1, 1, 1, 1, 1, 1);
  nine.ndim = 9;
  CHECK_ERR(loom_zeros(nine, LOOM_F32, LOOM_CPU), LOOM_ERR_SHAPE);
  CHECK_ERR(loom_reshape(a, nine), LOOM_ERR_SHAPE);
  loom_shape neg = {-1, {0}};
  CHECK_ERR(loom_ones(neg, LOOM_F32, LOOM_CPU), LOOM_ERR_SHAPE);
  /* eight dims is fine; a ninth by unsqueeze is not */
  loom_tensor *e8 = TK(loom_ones(LOOM_SHAPE(1, 2, 1, 2, 1, 2, 1, 2), LOOM_F32, LOOM_CPU));
  CHECK_STATUS(e8, LOOM_OK);
  CHECK(loom_item(TK(loom_sum_all(e8))) == 16.0);
  loom_tensor *e9 = TK(loom_unsqueeze(e8, 0));
  CHECK_MSG(loom_status_of(e9) == LOOM_ERR_SHAPE || loom_status_of(e9) == LOOM_ERR_AXIS,
            "unsqueeze of an 8-D tensor: %s", loom_status_name(loom_status_of(e9)));
  /* item of a tensor with != 1 element */
  loom_clear_error();
  CHECK(isnan(loom_item(a)));
  CHECK_EQ_INT(loom_last_status(), LOOM_ERR_SHAPE);
  loom_clear_error();
  CHECK(isnan(loom_item(TK(loom_zeros(LOOM_SHAPE(0), LOOM_F32, LOOM_CPU)))));
  CHECK_EQ_INT(loom_last_status(), LOOM_ERR_SHAPE);
  loom_clear_error();
  CHECK(loom_item(TK(loom_full(LOOM_SHAPE(1, 1), 4.0, LOOM_I64, LOOM_CPU))) == 4.0);
  CHECK_EQ_INT(loom_last_status(), LOOM_OK);
  ref_release_all();
}

static void test_axis_errors(void) {
  loom_tensor *a = TK(loom_ones(LOOM_SHAPE(2, 3, 4), LOOM_F32, LOOM_CPU));
  const int ax3[] = {3}, axm4[] = {-4}, dup[] = {1, -2};
  CHECK_ERR(loom_sum(a, ax3, 1, false), LOOM_ERR_AXIS);
  CHECK_ERR(loom_mean(a, axm4, 1, true), LOOM_ERR_AXIS);
  CHECK_ERR(loom_max(a, dup, 2, false), LOOM_ERR_AXIS);
  CHECK_ERR(loom_min(a, ax3, 1, false), LOOM_ERR_AXIS);
  CHECK_ERR(loom_argmax(a, 3, false), LOOM_ERR_AXIS);
  CHECK_ERR(loom_argmin(a, -4, false), LOOM_ERR_AXIS);
  CHECK_ERR(loom_softmax(a, 3), LOOM_ERR_AXIS);
  CHECK_ERR(loom_log_softmax(a, -4), LOOM_ERR_AXIS);
  CHECK_ERR(loom_logsumexp(a, 5), LOOM_ERR_AXIS);
  const int p_bad[] = {0, 1, 3}, p_dup[] = {0, 1, 1};
  CHECK_ERR(loom_permute(a, p_bad, 3), LOOM_ERR_AXIS);
  CHECK_ERR(loom_permute(a, p_dup, 3), LOOM_ERR_AXIS);
  CHECK_ERR(loom_transpose(a, 0, 3), LOOM_ERR_AXIS);
  CHECK_ERR(loom_squeeze(a, 3), LOOM_ERR_AXIS);
  CHECK_ERR(loom_unsqueeze(a, 4), LOOM_ERR_AXIS);
  CHECK_ERR(loom_unsqueeze(a, -5), LOOM_ERR_AXIS);
  CHECK_ERR(loom_flatten(a, 0, 3), LOOM_ERR_AXIS);
  CHECK_ERR(loom_slice(a, 3, 0, 1, 1), LOOM_ERR_AXIS);
  loom_tensor *aa[2] = {a, a};
  CHECK_ERR(loom_cat(aa, 2, 3), LOOM_ERR_AXIS);
  CHECK_ERR(loom_stack(aa, 2, 4), LOOM_ERR_AXIS);
  CHECK_ERR(loom_stack(aa, 2, -5), LOOM_ERR_AXIS);
  ref_release_all();
}

static void test_dtype_value_size_errors(void) {
  loom_tensor *i = TK(loom_ones(LOOM_SHAPE(3), LOOM_I32, LOOM_CPU));
  loom_tensor *f = TK(loom_ones(LOOM_SHAPE(3), LOOM_F32, LOOM_CPU));
  loom_tensor *bo = TK(loom_ones(LOOM_SHAPE(3), LOOM_BOOL, LOOM_CPU));
  const int ax[] = {0};
  CHECK_ERR(loom_neg(bo), LOOM_ERR_DTYPE);
  CHECK_ERR(loom_mean(i, ax, 1, false), LOOM_ERR_DTYPE);
  CHECK_ERR(loom_mean_all(i), LOOM_ERR_DTYPE);
  CHECK_ERR(loom_where(f, f, f), LOOM_ERR_DTYPE);
  CHECK_ERR(loom_where(i, f, f), LOOM_ERR_DTYPE);
  CHECK_ERR(loom_matmul(i, f), LOOM_ERR_DTYPE);
  CHECK_ERR(loom_matmul(bo, bo), LOOM_ERR_DTYPE);
  CHECK_ERR(loom_rand_key(loom_key_new(1), LOOM_SHAPE(3), LOOM_I32, LOOM_CPU), LOOM_ERR_DTYPE);
  CHECK_ERR(loom_randn_key(loom_key_new(1), LOOM_SHAPE(3), LOOM_BOOL, LOOM_CPU), LOOM_ERR_DTYPE);
  loom_tensor *bad = TK(loom_cast(f, (loom_dtype)LOOM_NUM_DTYPES));
  CHECK_MSG(loom_status_of(bad) == LOOM_ERR_DTYPE || loom_status_of(bad) == LOOM_ERR_VALUE,
            "cast to dtype 6: %s", loom_status_name(loom_status_of(bad)));
  loom_tensor *badz = TK(loom_zeros(LOOM_SHAPE(2), (loom_dtype)99, LOOM_CPU));
  CHECK_MSG(loom_status_of(badz) == LOOM_ERR_DTYPE || loom_status_of(badz) == LOOM_ERR_VALUE,
            "zeros of dtype 99: %s", loom_status_name(loom_status_of(badz)));
  /* values */
  CHECK_ERR(loom_slice(f, 0, 0, 3, 0), LOOM_ERR_VALUE);
  CHECK_ERR(loom_slice(f, 0, 3, 0, -1), LOOM_ERR_VALUE);
  CHECK_ERR(loom_arange(0, 5, 0, LOOM_F32, LOOM_CPU), LOOM_ERR_VALUE);
  /* sizes */
  CHECK_ERR(loom_zeros(LOOM_SHAPE(1LL << 40, 1LL << 40), LOOM_F32, LOOM_CPU), LOOM_ERR_SIZE);
  CHECK_ERR(loom_full(LOOM_SHAPE(1LL << 32, 1LL << 32, 4), 1.0, LOOM_F64, LOOM_CPU), LOOM_ERR_SIZE);
  CHECK_ERR(loom_expand(TK(loom_ones(LOOM_SHAPE(1, 1), LOOM_F32, LOOM_CPU)),
                        LOOM_SHAPE(1LL << 40, 1LL << 40)),
            LOOM_ERR_SIZE);
  CHECK_ERR(loom_rand_key(loom_key_new(1), LOOM_SHAPE(1LL << 40, 1LL << 40), LOOM_F32, LOOM_CPU),
            LOOM_ERR_SIZE);
#if !defined(__SANITIZE_ADDRESS__)
  /* representable but not allocatable (4 PiB): an error status, not a crash */
  loom_tensor *huge = TK(loom_zeros(LOOM_SHAPE(1LL << 50), LOOM_F32, LOOM_CPU));
  loom_status hs = loom_status_of(huge);
  if (hs == LOOM_OK) hs = loom_realize(huge);
  CHECK_MSG(hs == LOOM_ERR_OOM || hs == LOOM_ERR_SIZE, "4 PiB tensor: %s", loom_status_name(hs));
#endif
  ref_release_all();
}

static void test_buffer_device_scope_errors(void) {
  loom_tensor *f = TK(loom_ones(LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU));
  float buf[8];
  CHECK_RC(loom_copy_to_host(f, buf, 5 * sizeof(float)), LOOM_ERR_BUFFER);
  CHECK_RC(loom_copy_to_host(f, buf, 8 * sizeof(float)), LOOM_ERR_BUFFER);
  CHECK_RC(loom_copy_to_host(f, buf, 6 * sizeof(float) - 1), LOOM_ERR_BUFFER);
  CHECK_OK(loom_copy_to_host(f, buf, 6 * sizeof(float)));
  CHECK(buf[5] == 1.0f);
  /* devices */
  CHECK_ERR(loom_zeros(LOOM_SHAPE(2), LOOM_F32, LOOM_CUDA(99)), LOOM_ERR_DEVICE);
  CHECK_ERR(loom_to(f, LOOM_CUDA(99)), LOOM_ERR_DEVICE);
  CHECK_RC(loom_set_default_device(LOOM_CUDA(99)), LOOM_ERR_DEVICE);
  CHECK_EQ_INT(loom_default_device().type, LOOM_DEVICE_CPU);
  if (!loom_cuda_available()) {
    CHECK(loom_cuda_unavailable_reason() != NULL);
    CHECK_EQ_INT(loom_cuda_device_count(), 0);
    CHECK_ERR(loom_zeros(LOOM_SHAPE(2), LOOM_F32, LOOM_CUDA(0)), LOOM_ERR_DEVICE);
    CHECK_ERR(loom_from_data(buf, LOOM_SHAPE(2), LOOM_F32, LOOM_CUDA(0)), LOOM_ERR_DEVICE);
    CHECK_ERR(loom_to(f, LOOM_CUDA(0)), LOOM_ERR_DEVICE);
    CHECK_ERR(loom_rand_key(loom_key_new(3), LOOM_SHAPE(2), LOOM_F32, LOOM_CUDA(0)),
              LOOM_ERR_DEVICE);
    CHECK_RC(loom_set_default_device(LOOM_CUDA(0)), LOOM_ERR_DEVICE);
  } else {
    printf("note: CUDA is available; device-mismatch checks run\n");
    loom_tensor *g = TK(loom_ones(LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CUDA(0)));
    CHECK_STATUS(g, LOOM_OK);
    CHECK_ERR(loom_add(f, g), LOOM_ERR_DEVICE);
    CHECK(loom_item(TK(loom_sum_all(TK(loom_to(g, LOOM_CPU))))) == 6.0);
  }
  /* scope misuse */
  int depth = loom_scope_depth();
  CHECK_EQ_INT(depth, 0);
  CHECK_RC(loom_scope_end(), LOOM_ERR_SCOPE);
  CHECK_EQ_INT(loom_scope_depth(), 0);
  ref_release_all();
}

static void test_propagation(void) {
  loom_tensor *a = TK(loom_ones(LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU));
  loom_tensor *b = TK(loom_ones(LOOM_SHAPE(5), LOOM_F32, LOOM_CPU));
  loom_tensor *e = TK(loom_add(a, b));
  CHECK_STATUS(e, LOOM_ERR_SHAPE);
  const char *m0 = loom_error_message(e);
  char m[512];
  snprintf(m, sizeof m, "%s", m0 ? m0 : "");
  const int ax[] = {0};
  loom_tensor *outs[] = {
      TK(loom_exp(e)),
      TK(loom_add(e, a)),
      TK(loom_mul(a, e)),
      TK(loom_add_s(e, 1)),
      TK(loom_sum(e, ax, 1, false)),
      TK(loom_reshape(e, LOOM_SHAPE(-1))),
      TK(loom_transpose(e, 0, 1)),
      TK(loom_matmul(e, a)),
      TK(loom_where(e, a, a)),
      TK(loom_cast(e, LOOM_I32)),
      TK(loom_bitcast(e, LOOM_I32)),
      TK(loom_softmax(e, 0)),
      TK(loom_contiguous(e)),
      TK(loom_slice(e, 0, 0, 1, 1)),
      TK(loom_zeros_like(e)),
      /* a chain: one check at the end */
      TK(loom_sum_all(TK(loom_relu(TK(loom_mul_s(TK(loom_add(TK(loom_exp(e)), a)), 2)))))),
  };
  for (int i = 0; i < (int)(sizeof outs / sizeof outs[0]); i++) {
    check_set_ctx("propagation case %d", i);
    CHECK_STATUS(outs[i], LOOM_ERR_SHAPE);
    CHECK_STR_EQ(loom_error_message(outs[i]), m);
  }
  loom_tensor *cat_in[2] = {a, e};
  CHECK_STATUS(TK(loom_cat(cat_in, 2, 0)), LOOM_ERR_SHAPE);
  check_ctx[0] = 0;
  /* an axis error propagates as an axis error */
  loom_tensor *ea = TK(loom_transpose(a, 0, 7));
  CHECK_STATUS(TK(loom_neg(TK(loom_exp(ea)))), LOOM_ERR_AXIS);
  /* consuming an error tensor */
  float buf[6];
  CHECK_RC(loom_realize(e), LOOM_ERR_SHAPE);
  CHECK_RC(loom_copy_to_host(e, buf, sizeof buf), LOOM_ERR_SHAPE);
  loom_tensor *both[2] = {a, e};
  CHECK_RC(loom_eval(both, 2), LOOM_ERR_SHAPE);
  CHECK(isnan(loom_item(e)));
  /* the good tensor is still good */
  CHECK(loom_item(TK(loom_sum_all(a))) == 6.0);
  ref_release_all();
}

static void test_first_error_and_handler(void) {
  loom_clear_error();
  CHECK(loom_last_error() == NULL);
  CHECK_EQ_INT(loom_last_status(), LOOM_OK);
  loom_tensor *a = TK(loom_ones(LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU));
  loom_tensor *b = TK(loom_ones(LOOM_SHAPE(4), LOOM_F32, LOOM_CPU));
  CHECK(loom_item(TK(loom_sum_all(a))) == 6.0); /* successes do not set it */
  CHECK(loom_last_error() == NULL);
  TK(loom_mul(a, b));          /* first: shape */
  TK(loom_transpose(a, 0, 9)); /* second: axis */
  CHECK_STR_CONTAINS(loom_last_error(), "loom_mul");
  CHECK_EQ_INT(loom_last_status(), LOOM_ERR_SHAPE);
  loom_clear_error();
  CHECK(loom_last_error() == NULL);
  CHECK_EQ_INT(loom_last_status(), LOOM_OK);
  TK(loom_transpose(a, 0, 9));
  CHECK_EQ_INT(loom_last_status(), LOOM_ERR_AXIS);
  CHECK(loom_last_error() != NULL);
  loom_clear_error();
  /* the handler sees each error as it happens */
  int ud = 42;
  handler_calls = 0;
  loom_set_error_handler(count_handler, &ud);
  TK(loom_add(a, b));
  CHECK_EQ_INT(handler_calls, 1);
  CHECK_EQ_INT(handler_last, LOOM_ERR_SHAPE);
  CHECK(handler_ud == &ud);
  CHECK_STR_CONTAINS(handler_msg, "loom_add");
  TK(loom_neg(TK(loom_ones(LOOM_SHAPE(2), LOOM_BOOL, LOOM_CPU))));
  CHECK_EQ_INT(handler_calls, 2);
  CHECK_EQ_INT(handler_last, LOOM_ERR_DTYPE);
  float buf[2];
  CHECK_RC(loom_copy_to_host(a, buf, sizeof buf), LOOM_ERR_BUFFER);
  CHECK_EQ_INT(handler_calls, 3);
  CHECK_EQ_INT(handler_last, LOOM_ERR_BUFFER);
  loom_set_error_handler(NULL, NULL);
  TK(loom_add(a, b));
  CHECK_EQ_INT(handler_calls, 3);
  loom_clear_error();
  /* status names */
  for (int s = 0; s < LOOM_NUM_STATUS; s++) {
    const char *n = loom_status_name((loom_status)s);
    CHECK_MSG(n != NULL && n[0], "status name %d", s);
    for (int t = 0; t < s; t++)
      if (n && loom_status_name((loom_status)t))
        CHECK(strcmp(n, loom_status_name((loom_status)t)) != 0);
  }
  ref_release_all();
}

int main(void) {
  test_null_inputs();
  test_shape_errors();
  test_axis_errors();
  test_dtype_value_size_errors();
  test_buffer_device_scope_errors();
  test_propagation();
  test_first_error_and_handler();
  return check_report();
}
