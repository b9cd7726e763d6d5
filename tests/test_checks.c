/* Data-dependent input an op cannot take (issue 41, item 6): one rule for
 * every op that reads indices, positions or weights from data. A value
 * outside what the op takes fails the call when its data is at hand, and the
 * run that computes it otherwise (loom_realize, loom_item, loom_program_run,
 * an exported library's run), with the same message naming the op the user
 * called and the value; nothing is published, and a KV cache written past
 * its end is refused rather than losing its last row. Values at the edges
 * still work, against PyTorch 1.13's.
 *
 * On the CPU and (LOOM_TEST_DEVICE=cuda) the emulated device; compiled and
 * symbolic programs; exported libraries (CPU). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "loom.h"
#include "scratch.h"
#include "test_device.h"

static loom_tensor *i64s(const int64_t *v, loom_shape s) {
  return loom_from_data(v, s, LOOM_I64, test_device());
}

static loom_tensor *f32s(const float *v, loom_shape s) {
  return loom_from_data(v, s, LOOM_F32, test_device());
}

/* The same values, computed by the run (no data at the call). */
static loom_tensor *lazy(const loom_tensor *t) {
  return loom_dtype_of(t) == LOOM_F32 ? loom_mul_s(t, 1) : loom_add_s(t, 0);
}

/* t is an error tensor of LOOM_ERR_VALUE whose message holds want. */
static void check_refused_now(const char *what, loom_tensor *t, const char *want) {
  const char *msg = loom_error_message(t);
  CHECK_MSG(loom_status_of(t) == LOOM_ERR_VALUE && msg && strstr(msg, want),
            "%s at the call: status %s, message '%s', wanted '%s'", what,
            loom_status_name(loom_status_of(t)), msg ? msg : "(none)", want);
  loom_clear_error();
}

/* t was recorded (the call cannot see the values); realizing it, and asking
 * for its values, fail with want; it stays unrealized. */
static void check_refused_by_run(const char *what, loom_tensor *t, const char *want) {
  CHECK_MSG(loom_status_of(t) == LOOM_OK, "%s: the call failed: %s", what,
            loom_error_message(t) ? loom_error_message(t) : "?");
  loom_clear_error();
  loom_status st = loom_realize(t);
  const char *msg = loom_last_error();
  CHECK_MSG(st == LOOM_ERR_VALUE && msg && strstr(msg, want),
            "%s by the run: status %s, message '%s', wanted '%s'", what, loom_status_name(st),
            msg ? msg : "(none)", want);
  loom_clear_error();
  int64_t v = 0;
  CHECK_EQ_INT(loom_item_i64(loom_sum_all(loom_cast(t, LOOM_I64)), &v), LOOM_ERR_VALUE);
  msg = loom_last_error();
  CHECK_MSG(msg && strstr(msg, want), "%s by loom_item: '%s'", what, msg ? msg : "(none)");
  loom_clear_error();
}

static void check_values(const char *what, loom_tensor *t, const double *want, int n) {
  double got[64] = {0};
  check_set_ctx("%s", what);
  CHECK_OK(loom_copy_to_host(loom_cast(t, LOOM_F64), got, sizeof(double) * (size_t)n));
  for (int i = 0; i < n; i++) CHECK_NEAR(got[i], want[i], 1e-6);
  check_set_ctx("%s", "");
}

/* ------------------------------------------------------------ multinomial */

static void test_multinomial(void) {
  loom_key key = loom_key_new(7);
  LOOM_SCOPE {
    const float negative[3] = {0.5f, -0.1f, 0.6f}, nan3[3] = {0.5f, NAN, 0.6f},
                inf3[3] = {0.5f, INFINITY, 0.6f}, zeros[3] = {0, 0, 0};
    const float two_rows[6] = {1, 2, 3, 0, 0, 0};
    struct {
      const char *what;
      loom_tensor *probs;
      const char *want;
    } cases[] = {
        {"a negative weight", f32s(negative, LOOM_SHAPE(3)),
         "loom_multinomial_key: weight -0.1 at position 1 of row 0 is not a finite value >= 0"},
        {"a NaN weight", f32s(nan3, LOOM_SHAPE(3)),
         "loom_multinomial_key: weight nan at position 1 of row 0 is not a finite value >= 0"},
        {"an infinite weight", f32s(inf3, LOOM_SHAPE(3)),
         "loom_multinomial_key: weight inf at position 1 of row 0"},
        {"all-zero weights", f32s(zeros, LOOM_SHAPE(3)),
         "loom_multinomial_key: row 0's 3 weights sum to 0 (an invalid multinomial distribution)"},
        {"a row of zeros", f32s(two_rows, LOOM_SHAPE(2, 3)),
         "loom_multinomial_key: row 1's 3 weights sum to 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
      for (int replacement = 0; replacement < 2; replacement++) {
        check_refused_now(cases[i].what, loom_multinomial_key(key, cases[i].probs, 2, replacement),
                          cases[i].want);
        check_refused_by_run(cases[i].what,
                             loom_multinomial_key(key, lazy(cases[i].probs), 2, replacement),
                             cases[i].want);
      }
    /* the edges: zeros among positive weights (never drawn), -0 as 0, F64 */
    const float edge[4] = {0.25f, 0, -0.0f, 0.75f};
    const double edge64[3] = {0, 1e-300, 0};
    for (int replacement = 0; replacement < 2; replacement++) {
      int64_t draws[2] = {-1, -1};
      loom_tensor *d = loom_multinomial_key(key, lazy(f32s(edge, LOOM_SHAPE(4))), 2, replacement);
      CHECK_OK(loom_copy_to_host(d, draws, sizeof draws));
      for (int k = 0; k < 2; k++)
        CHECK_MSG(draws[k] == 0 || draws[k] == 3, "drew %lld", (long long)draws[k]);
      int64_t one = -1;
      loom_tensor *p64 = loom_from_data(edge64, LOOM_SHAPE(3), LOOM_F64, test_device());
      CHECK_OK(loom_copy_to_host(loom_multinomial_key(key, p64, 1, replacement), &one, sizeof one));
      CHECK_EQ_INT(one, 1);
    }
  }
}

/* ------------------------------------------------------------ indices */

/* A selection from a = [[1, 2, 3], [4, 5, 6]]: refused with `refusal`, or
 * giving `want` (n values, torch.gather's and torch.index_select's). */
typedef struct select_case {
  const char *what;
  loom_tensor *(*op)(const loom_tensor *a, int axis, const loom_tensor *index);
  int axis;
  int64_t index[4];
  loom_shape shape;
  const char *refusal;
  int n;
  double want[6];
} select_case;

static void test_gather_and_index_select(void) {
  /* each index at the call, then computed by the run */
  const select_case bad[] = {
      {"gather past the end",
       loom_gather,
       1,
       {0, 3, 2, 0},
       LOOM_SHAPE(2, 2),
       "loom_gather: index 3 at position 1 is outside [0, 3)",
       0,
       {0}},
      {"gather before the start",
       loom_gather,
       -1,
       {0, 2, -1, 0},
       LOOM_SHAPE(2, 2),
       "loom_gather: index -1 at position 2 is outside [0, 3)",
       0,
       {0}},
      {"gather along axis 0",
       loom_gather,
       0,
       {1, 2, 0},
       LOOM_SHAPE(1, 3),
       "loom_gather: index 2 at position 1 is outside [0, 2)",
       0,
       {0}},
      {"index_select past the end",
       loom_index_select,
       1,
       {2, 3},
       LOOM_SHAPE(2),
       "loom_index_select: index 3 at position 1 is outside [0, 3)",
       0,
       {0}},
      {"index_select before the start",
       loom_index_select,
       0,
       {-1, 0},
       LOOM_SHAPE(2),
       "loom_index_select: index -1 at position 0 is outside [0, 2)",
       0,
       {0}},
  };
  const select_case edges[] = {
      {"gather", loom_gather, 1, {0, 2, 2, 0}, LOOM_SHAPE(2, 2), NULL, 4, {1, 3, 6, 4}},
      {"gather along 0", loom_gather, 0, {1, 0, 1}, LOOM_SHAPE(1, 3), NULL, 3, {4, 2, 6}},
      {"index_select", loom_index_select, 1, {2, 0}, LOOM_SHAPE(2), NULL, 4, {3, 1, 6, 4}},
      {"index_select along 0",
       loom_index_select,
       0,
       {1, 0},
       LOOM_SHAPE(2),
       NULL,
       6,
       {4, 5, 6, 1, 2, 3}},
  };
  LOOM_SCOPE {
    const float v[6] = {1, 2, 3, 4, 5, 6};
    loom_tensor *a = f32s(v, LOOM_SHAPE(2, 3));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
      loom_tensor *index = i64s(bad[i].index, bad[i].shape);
      check_refused_now(bad[i].what, bad[i].op(a, bad[i].axis, index), bad[i].refusal);
      check_refused_by_run(bad[i].what, bad[i].op(a, bad[i].axis, lazy(index)), bad[i].refusal);
    }
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) {
      loom_tensor *index = i64s(edges[i].index, edges[i].shape);
      loom_tensor *now = edges[i].op(a, edges[i].axis, index);
      check_values(edges[i].what, now, edges[i].want, edges[i].n);
      check_values(edges[i].what, edges[i].op(a, edges[i].axis, lazy(index)), edges[i].want,
                   edges[i].n);
    }
    /* a flip and a sort's values gather by positions made in range: no check */
    const double flipped[6] = {3, 2, 1, 6, 5, 4};
    check_values("flip", loom_flip(lazy(a), 1), flipped, 6);
  }
}

static void test_embedding(void) {
  LOOM_SCOPE {
    const float v[6] = {1, 2, 3, 4, 5, 6};
    loom_tensor *table = f32s(v, LOOM_SHAPE(3, 2));
    const int64_t past[3] = {0, 1, 3}, before[2] = {-1, 2};
    loom_tensor *ip = i64s(past, LOOM_SHAPE(3));
    check_refused_now("embedding past the end", loom_embedding_f(ip, table),
                      "loom_embedding_f: index 3 at position 2 is outside [0, 3)");
    check_refused_by_run("embedding past the end", loom_embedding_f(lazy(ip), table),
                         "loom_embedding_f: index 3 at position 2 is outside [0, 3)");
    check_refused_by_run("embedding before the start",
                         loom_embedding_f(lazy(i64s(before, LOOM_SHAPE(1, 2))), table),
                         "loom_embedding_f: index -1 at position 0 is outside [0, 3)");
    /* I32 and U8 indices, and a reshape of realized indices (checked now) */
    const int32_t p32[2] = {1, 5};
    loom_tensor *i32 = loom_from_data(p32, LOOM_SHAPE(2), LOOM_I32, test_device());
    check_refused_by_run("i32 embedding", loom_embedding_f(lazy(i32), table),
                         "loom_embedding_f: index 5 at position 1 is outside [0, 3)");
    check_refused_now("reshaped embedding",
                      loom_embedding_f(loom_reshape(ip, LOOM_SHAPE(1, 3)), table),
                      "loom_embedding_f: index 3 at position 2 is outside [0, 3)");
    loom_params *ps = loom_params_new();
    loom_embedding layer = loom_embedding_new(ps, "e", 3, 2, loom_key_new(1));
    check_refused_by_run("embedding layer", loom_embedding_forward(&layer, lazy(ip)),
                         "loom_embedding_forward: index 3 at position 2 is outside [0, 3)");
    loom_params_free(ps);
    const int64_t edges[2] = {2, 0};
    const double rows[4] = {5, 6, 1, 2};
    check_values("embedding at the edges",
                 loom_embedding_f(lazy(i64s(edges, LOOM_SHAPE(2))), table), rows, 4);
  }
}

static void test_labels(void) {
  LOOM_SCOPE {
    const int64_t bad[2] = {0, 3}, negative[2] = {-1, 0};
    loom_tensor *lb = i64s(bad, LOOM_SHAPE(2)), *ln = i64s(negative, LOOM_SHAPE(2));
    check_refused_by_run("one_hot past the end", loom_one_hot(lazy(lb), 3),
                         "loom_one_hot: index 3 at position 1 is outside [0, 3)");
    check_refused_by_run("one_hot before the start", loom_one_hot(lazy(ln), 3),
                         "loom_one_hot: index -1 at position 0 is outside [0, 3)");
    const int64_t edges[2] = {0, 2};
    const double hot[6] = {1, 0, 0, 0, 0, 1};
    check_values("one_hot at the edges", loom_one_hot(lazy(i64s(edges, LOOM_SHAPE(2))), 3), hot, 6);

    const float x[9] = {1, 2, 3, 0.5f, 0.1f, -1, 2, 2, 2};
    loom_tensor *logits = f32s(x, LOOM_SHAPE(3, 3));
    const int64_t labels_bad[3] = {2, 0, 3}, labels[3] = {2, 0, 1}, ignored[3] = {2, -100, 0};
    loom_tensor *yb = i64s(labels_bad, LOOM_SHAPE(3));
    check_refused_by_run("cross_entropy", loom_cross_entropy(logits, lazy(yb)),
                         "loom_cross_entropy: index 3 at position 2 is outside [0, 3)");
    check_refused_by_run("nll_loss", loom_nll_loss(loom_log_softmax(logits, 1), lazy(yb)),
                         "loom_nll_loss: index 3 at position 2 is outside [0, 3)");
    loom_cross_entropy_opts ignore = {.ignore = true, .ignore_index = -100};
    check_refused_by_run("cross_entropy_ex", loom_cross_entropy_ex(logits, lazy(yb), ignore),
                         "loom_cross_entropy_ex: index 3 at position 2 is outside [0, 3) and not "
                         "the ignored index");
    check_refused_by_run("cross_entropy_ex without ignore",
                         loom_cross_entropy_ex(logits, lazy(i64s(ignored, LOOM_SHAPE(3))),
                                               (loom_cross_entropy_opts){0}),
                         "loom_cross_entropy_ex: index -100 at position 1 is outside [0, 3)");
    /* torch: F.cross_entropy(x, [2, 0, 1]) and with ignore_index=-100 on [2, -100, 0] */
    const double ce = 0.714873016, ce_ignored = 0.753109097;
    check_values("cross_entropy", loom_cross_entropy(logits, lazy(i64s(labels, LOOM_SHAPE(3)))),
                 &ce, 1);
    check_values("cross_entropy_ex ignoring",
                 loom_cross_entropy_ex(logits, lazy(i64s(ignored, LOOM_SHAPE(3))), ignore),
                 &ce_ignored, 1);
    check_values("cross_entropy_ex ignoring, realized",
                 loom_cross_entropy_ex(logits, i64s(ignored, LOOM_SHAPE(3)), ignore), &ce_ignored,
                 1);
  }
}

/* ------------------------------------------------------------ slice_update */

static void test_slice_update(void) {
  LOOM_SCOPE {
    loom_tensor *cache = loom_zeros(LOOM_SHAPE(1, 1, 4, 2), LOOM_F32, test_device());
    loom_tensor *row = loom_ones(LOOM_SHAPE(1, 1, 1, 2), LOOM_F32, test_device());
    const int64_t four = 4, minus = -1, three = 3;
    loom_tensor *p4 = i64s(&four, LOOM_SHAPE0);
    check_refused_now("slice_update past the end", loom_slice_update(cache, 2, p4, row),
                      "loom_slice_update: start 4 is outside [0, 3]");
    check_refused_now("slice_update before the start",
                      loom_slice_update(cache, 2, i64s(&minus, LOOM_SHAPE0), row),
                      "loom_slice_update: start -1 is outside [0, 3]");
    check_refused_by_run("slice_update past the end", loom_slice_update(cache, 2, lazy(p4), row),
                         "loom_slice_update: start 4 is outside [0, 3]");
    loom_tensor *two = loom_ones(LOOM_SHAPE(1, 1, 2, 2), LOOM_F32, test_device());
    check_refused_by_run("two rows from 3",
                         loom_slice_update(cache, 2, lazy(i64s(&three, LOOM_SHAPE0)), two),
                         "loom_slice_update: start 3 is outside [0, 2]");
    const double last[8] = {0, 0, 0, 0, 0, 0, 1, 1};
    check_values("slice_update at the end",
                 loom_slice_update(cache, 2, lazy(i64s(&three, LOOM_SHAPE0)), row), last, 8);
  }
}

/* The KV cache as a decoder writes it: loom_assign(cache, slice_update(cache,
 * 2, pos, row)). A position past the end fails the realization; the
 * assignment is undone (the cache keeps the rows it had, as torch's raising
 * index leaves it) and does not stay pending (a later realization of
 * anything else works). */
static void test_kv_cache(void) {
  loom_tensor *cache = loom_zeros(LOOM_SHAPE(1, 1, 4, 2), LOOM_F32, test_device());
  CHECK_OK(loom_realize(cache));
  LOOM_SCOPE {
    loom_tensor *row = loom_ones(LOOM_SHAPE(1, 1, 1, 2), LOOM_F32, test_device());
    for (int64_t p = 0; p < 4; p++) {
      loom_tensor *pos = loom_add_s(i64s(&p, LOOM_SHAPE0), 0); /* computed by the run */
      CHECK_OK(
          loom_assign(cache, loom_slice_update(cache, 2, pos, loom_mul_s(row, (double)p + 1))));
      CHECK_OK(loom_realize(cache));
    }
    const double filled[8] = {1, 1, 2, 2, 3, 3, 4, 4};
    check_values("the cache filled", cache, filled, 8);
    const int64_t past = 4;
    CHECK_OK(loom_assign(cache, loom_slice_update(cache, 2, lazy(i64s(&past, LOOM_SHAPE0)), row)));
    loom_tensor *other = loom_add_s(row, 1);
    loom_clear_error();
    CHECK_EQ_INT(loom_realize(other), LOOM_ERR_VALUE); /* the assignment rode along */
    const char *msg = loom_last_error();
    CHECK_MSG(msg && strstr(msg, "loom_slice_update: start 4 is outside [0, 3]"), "'%s'",
              msg ? msg : "(none)");
    loom_clear_error();
    CHECK_OK(loom_realize(other)); /* not pending any more */
    check_values("the cache as it was", cache, filled, 8);
    CHECK_OK(loom_assign(cache, loom_slice_update(cache, 2, lazy(i64s(&past, LOOM_SHAPE0)), row)));
    loom_clear_error();
    CHECK_EQ_INT(loom_realize(cache), LOOM_ERR_VALUE); /* the cache itself */
    loom_clear_error();
    check_values("the cache as it was, again", cache, filled, 8);
  }
  LOOM_SCOPE {
    loom_tensor *fresh = loom_zeros(LOOM_SHAPE(1, 1, 4, 2), LOOM_F32, test_device());
    CHECK_OK(loom_assign(cache, fresh));
    const double zeros[8] = {0};
    check_values("the cache assigned again", cache, zeros, 8);
  }
  loom_free(cache);
}

/* A training step whose labels (computed by the run) hold one out of range:
 * the step fails and none of its updates is applied, so the parameters and
 * the optimizer's momentum are those of before it, and the steps after it
 * train as if it had never been taken (a bad batch must not end the model:
 * its parameters once kept the failing value for good). */
static void train_steps(const int *labels_of_step, int steps, float *weights_out) {
  float xs[] = {0, 0, 1, 0, 0, 1, 1, 1};
  loom_tensor *x = loom_from_data(xs, LOOM_SHAPE(4, 2), LOOM_F32, test_device());
  loom_params *ps = loom_params_new();
  loom_linear fc = loom_linear_new(ps, "fc", 2, 3, loom_key_new(4));
  loom_optim *opt = loom_sgd(ps, (loom_sgd_opts){.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < steps; step++) {
    LOOM_SCOPE {
      uint8_t labels[4] = {0, 1, 2, 1};
      if (labels_of_step[step] >= 0) labels[2] = (uint8_t)labels_of_step[step];
      loom_tensor *given = loom_from_data(labels, LOOM_SHAPE(4), LOOM_U8, test_device());
      loom_tensor *loss =
          loom_cross_entropy(loom_linear_forward(&fc, x), loom_cast(given, LOOM_I64)); /* lazy */
      loom_optim_zero_grad(opt);
      CHECK_OK(loom_backward(loss));
      CHECK_OK(loom_optim_step(opt));
      loom_clear_error();
      loom_status st = loom_realize(loss);
      CHECK_EQ_INT(st, labels_of_step[step] >= 3 ? LOOM_ERR_VALUE : LOOM_OK);
      loom_clear_error();
    }
  }
  CHECK_OK(loom_copy_to_host(fc.weight, weights_out, sizeof(float) * 6));
  loom_optim_free(opt), loom_params_free(ps), loom_free(x);
}

static void test_failed_step_undone(void) {
  const int good[] = {-1, -1, -1, -1}, with_bad[] = {-1, -1, 7, -1, -1};
  float want[6] = {0}, got[6] = {0};
  train_steps(good, 4, want);
  train_steps(with_bad, 5, got);
  for (int i = 0; i < 6; i++)
    CHECK_MSG(got[i] == want[i], "weight %d: %g, not %g", i, got[i], want[i]);
}

/* A position computed by the run keeps the cache's write in place (its check
 * runs first, the write after it). */
static void test_in_place(void) {
  if (test_device().type != LOOM_DEVICE_CPU) return; /* (updates in place: the CPU) */
  loom_tensor *cache = loom_zeros(LOOM_SHAPE(8, 3), LOOM_F32, LOOM_CPU);
  CHECK_OK(loom_realize(cache));
  LOOM_SCOPE {
    const int64_t p = 5;
    loom_tensor *row = loom_ones(LOOM_SHAPE(1, 3), LOOM_F32, LOOM_CPU);
    CHECK_OK(loom_assign(cache, loom_slice_update(cache, 0, lazy(i64s(&p, LOOM_SHAPE0)), row)));
    uint64_t before = loom_get_stats().in_place_updates;
    CHECK_OK(loom_realize(cache));
    CHECK_EQ_INT(loom_get_stats().in_place_updates, before + 1);
    double want[24] = {0};
    want[15] = want[16] = want[17] = 1;
    check_values("the cache written in place", cache, want, 24);
  }
  loom_free(cache);
}

/* ------------------------------------------------------------ programs */

static loom_status run1(const loom_program *p, loom_tensor *const *ins, loom_tensor **out) {
  *out = NULL;
  loom_clear_error();
  return loom_program_run(p, ins, out);
}

/* A decoder's step as a program: token ids and the position are inputs. */
static loom_program *decoder_step(loom_tensor *table, int64_t length) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *ins[4] = {
        loom_input("tokens", LOOM_SHAPE(1, 2), LOOM_I64, test_device()),
        loom_input("pos", LOOM_SHAPE0, LOOM_I64, test_device()),
        loom_input("cache", LOOM_SHAPE(1, 1, length, 2), LOOM_F32, test_device()),
        loom_input("row", LOOM_SHAPE(1, 1, 1, 2), LOOM_F32, test_device()),
    };
    loom_tensor *outs[2] = {loom_embedding_f(ins[0], table),
                            loom_slice_update(ins[2], 2, ins[1], ins[3])};
    p = loom_compile(outs, 2, ins, 4);
  }
  return p;
}

static void test_programs(void) {
  LOOM_SCOPE {
    const float v[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    loom_tensor *table = f32s(v, LOOM_SHAPE(5, 2));
    loom_program *p = decoder_step(table, 4);
    CHECK(p != NULL);
    const int64_t good_tokens[2] = {4, 0}, bad_tokens[2] = {1, 5}, at3 = 3, at4 = 4;
    loom_tensor *cache = loom_zeros(LOOM_SHAPE(1, 1, 4, 2), LOOM_F32, test_device());
    loom_tensor *row = loom_ones(LOOM_SHAPE(1, 1, 1, 2), LOOM_F32, test_device());
    loom_tensor *outs[2] = {NULL, NULL};
    loom_tensor *good[4] = {i64s(good_tokens, LOOM_SHAPE(1, 2)), i64s(&at3, LOOM_SHAPE0), cache,
                            row};
    CHECK_OK(p ? run1(p, good, outs) : LOOM_ERR_NULL);
    const double rows[4] = {8, 9, 0, 1}, last[8] = {0, 0, 0, 0, 0, 0, 1, 1};
    if (outs[0]) check_values("program: embedding", outs[0], rows, 4);
    if (outs[1]) check_values("program: slice_update", outs[1], last, 8);
    loom_tensor *bad_token[4] = {i64s(bad_tokens, LOOM_SHAPE(1, 2)), good[1], cache, row};
    loom_tensor *bad_pos[4] = {good[0], i64s(&at4, LOOM_SHAPE0), cache, row};
    loom_tensor *lazy_bad[4] = {lazy(bad_token[0]), good[1], cache, row};
    struct {
      loom_tensor **ins;
      const char *want;
    } cases[] = {
        {bad_token, "loom_embedding_f: index 5 at position 1 is outside [0, 5)"},
        {bad_pos, "loom_slice_update: start 4 is outside [0, 3]"},
        {lazy_bad, "loom_embedding_f: index 5 at position 1 is outside [0, 5)"},
    };
    for (size_t i = 0; p && i < sizeof cases / sizeof *cases; i++) {
      loom_status st = run1(p, cases[i].ins, outs);
      const char *msg = loom_last_error();
      CHECK_MSG(st == LOOM_ERR_VALUE && msg && strstr(msg, cases[i].want),
                "program run %zu: %s '%s', wanted '%s'", i, loom_status_name(st),
                msg ? msg : "(none)", cases[i].want);
      CHECK(outs[0] == NULL && outs[1] == NULL);
    }
    /* the text form keeps the checks and their op */
    char path[256];
    snprintf(path, sizeof path, "/tmp/loom-test-checks-%d.loom", (int)getpid());
    /* (a loaded program runs on the CPU) */
    if (p && test_device().type == LOOM_DEVICE_CPU && loom_program_save(p, path) == LOOM_OK) {
      loom_program *q = loom_program_load(path);
      CHECK(q != NULL);
      loom_status st = q ? run1(q, bad_pos, outs) : LOOM_ERR_NULL;
      const char *msg = loom_last_error();
      CHECK_MSG(st == LOOM_ERR_VALUE && msg && strstr(msg, cases[1].want), "loaded: '%s'",
                msg ? msg : "(none)");
      loom_program_free(q);
      remove(path);
      char weights[300];
      snprintf(weights, sizeof weights, "%s.safetensors", path);
      remove(weights);
    }
    loom_program_free(p);
  }
}

/* A cache whose length is a symbol: the position's range follows it. */
static loom_program *symbolic_step(void) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *ins[3] = {
        loom_input("pos", LOOM_SHAPE0, LOOM_I64, test_device()),
        loom_input("cache", LOOM_SHAPE(1, 1, 6, 2), LOOM_F32, test_device()),
        loom_input("row", LOOM_SHAPE(1, 1, 1, 2), LOOM_F32, test_device()),
    };
    loom_tensor *out = loom_slice_update(ins[1], 2, ins[0], ins[2]);
    loom_symbolic_dim length = {1, 2, "length"};
    p = loom_compile_symbolic(&out, 1, ins, 3, &length, 1);
    if (!p) fprintf(stderr, "compile: %s\n", loom_last_error());
  }
  return p;
}

static void test_symbolic(void) {
  loom_program *p = symbolic_step();
  CHECK(p != NULL);
  for (int64_t length = 3; p && length <= 12; length += 3) LOOM_SCOPE {
      loom_tensor *cache = loom_zeros(LOOM_SHAPE(1, 1, length, 2), LOOM_F32, test_device());
      loom_tensor *row = loom_ones(LOOM_SHAPE(1, 1, 1, 2), LOOM_F32, test_device());
      int64_t last = length - 1, past = length;
      loom_tensor *out = NULL;
      loom_tensor *good[3] = {i64s(&last, LOOM_SHAPE0), cache, row};
      check_set_ctx("length %lld", (long long)length);
      CHECK_OK(run1(p, good, &out));
      double got[24] = {0};
      if (out) {
        CHECK_OK(loom_copy_to_host(loom_cast(out, LOOM_F64), got,
                                   sizeof(double) * (size_t)(2 * length)));
        CHECK_NEAR(got[2 * length - 1], 1, 0);
        CHECK_NEAR(got[2 * length - 3], 0, 0);
      }
      loom_tensor *bad[3] = {i64s(&past, LOOM_SHAPE0), cache, row};
      char want[64];
      snprintf(want, sizeof want, "loom_slice_update: start %lld is outside [0, %lld]",
               (long long)past, (long long)last);
      loom_status st = run1(p, bad, &out);
      const char *msg = loom_last_error();
      CHECK_MSG(st == LOOM_ERR_VALUE && msg && strstr(msg, want), "'%s', wanted '%s'",
                msg ? msg : "(none)", want);
      check_set_ctx("%s", "");
    }
  loom_program_free(p);
}

/* ------------------------------------------------------------ exports */

static char dir[256];

typedef int (*run_fn)(const void *const *inputs, void *const *outputs);
typedef int (*run_dims_fn)(const int64_t *dims, const void *const *inputs, void *const *outputs);
typedef const char *(*detail_fn)(void);

static void test_export(void) {
  if (test_device().type != LOOM_DEVICE_CPU) return; /* libraries run on the CPU */
  snprintf(dir, sizeof dir, "/tmp/loom-test-checks-%d", (int)getpid());
  mkdir(dir, 0700);
  LOOM_SCOPE {
    const float v[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    loom_program *p = decoder_step(f32s(v, LOOM_SHAPE(5, 2)), 4);
    CHECK_OK(p ? loom_program_export(p, dir, "decoder") : LOOM_ERR_NULL);
    loom_program_free(p);
    check_library_needs_only_libc(dir, "decoder"); /* its messages need no thread-locals */
    void *lib = check_open_library(dir, "decoder");
    run_fn run = lib ? (run_fn)(uintptr_t)dlsym(lib, "decoder_run") : NULL;
    detail_fn detail = lib ? (detail_fn)(uintptr_t)dlsym(lib, "decoder_error_detail") : NULL;
    CHECK(run != NULL && detail != NULL);
    int64_t tokens[2] = {4, 0}, pos = 3;
    float cache[8] = {0}, row[2] = {1, 1}, emb[4] = {0}, updated[8] = {0};
    const void *ins[4] = {tokens, &pos, cache, row};
    void *outs[2] = {emb, updated};
    if (run && detail) {
      CHECK_EQ_INT(run(ins, outs), 0);
      CHECK_NEAR(emb[0], 8, 0);
      CHECK_NEAR(emb[3], 1, 0);
      CHECK_NEAR(updated[7], 1, 0);
      tokens[1] = 5;
      CHECK_EQ_INT(run(ins, outs), 6); /* DECODER_ERR_VALUE */
      CHECK_MSG(strstr(detail(), "loom_embedding_f: index 5 at position 1 is outside [0, 5)"),
                "detail: %s", detail());
      tokens[1] = 0, pos = 4;
      CHECK_EQ_INT(run(ins, outs), 6);
      CHECK_MSG(strstr(detail(), "loom_slice_update: start 4 is outside [0, 3]"), "detail: %s",
                detail());
    }
    if (lib) dlclose(lib);
    /* one library for every length of the cache: the range follows it */
    p = symbolic_step();
    CHECK_OK(p ? loom_program_export(p, dir, "symstep") : LOOM_ERR_NULL);
    loom_program_free(p);
    lib = check_open_library(dir, "symstep");
    run_dims_fn run_dims = lib ? (run_dims_fn)(uintptr_t)dlsym(lib, "symstep_run_dims") : NULL;
    detail = lib ? (detail_fn)(uintptr_t)dlsym(lib, "symstep_error_detail") : NULL;
    CHECK(run_dims != NULL && detail != NULL);
    for (int64_t length = 2; run_dims && detail && length <= 20; length += 6) {
      float c[40] = {0}, out[40] = {0};
      int64_t at = length - 1;
      const void *in3[3] = {&at, c, row};
      void *out1[1] = {out};
      CHECK_EQ_INT(run_dims(&length, in3, out1), 0);
      CHECK_NEAR(out[2 * length - 1], 1, 0);
      at = length;
      CHECK_EQ_INT(run_dims(&length, in3, out1), 6);
      char want[64];
      snprintf(want, sizeof want, "start %lld is outside [0, %lld]", (long long)length,
               (long long)(length - 1));
      CHECK_MSG(strstr(detail(), want), "detail '%s', wanted '%s'", detail(), want);
    }
    if (lib) dlclose(lib);
  }
  if (!check_failures) check_remove_dir(dir);
}

int main(void) {
  CHECK_OK(loom_set_default_device(test_device()));
  test_multinomial();
  test_gather_and_index_select();
  test_embedding();
  test_labels();
  test_slice_update();
  test_kv_cache();
  test_failed_step_undone();
  test_in_place();
  test_programs();
  test_symbolic();
  test_export();
  return check_report();
}
