/* Programs: loom_input, loom_compile, loom_program_run against the lazy path;
 * captured weights, several inputs and outputs, errors, threads, memory,
 * dump, dot, save/load round trips and refused files. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loom.h"
#include "scratch.h"

static uint64_t live(void) { return loom_get_stats().bytes_live; }

/* max |a - b| / max(1, |b|) over two F32 tensors of equal size */
static double max_rel_diff(loom_tensor *a, loom_tensor *b) {
  int64_t n = loom_numel(b);
  if (loom_numel(a) != n) return INFINITY;
  float *x = malloc(sizeof(float) * (size_t)(n + 1)), *y = malloc(sizeof(float) * (size_t)(n + 1));
  double worst = INFINITY;
  if (loom_copy_to_host(a, x, sizeof(float) * (size_t)n) == LOOM_OK &&
      loom_copy_to_host(b, y, sizeof(float) * (size_t)n) == LOOM_OK) {
    worst = 0;
    for (int64_t i = 0; i < n; i++) {
      double d = fabs((double)x[i] - y[i]) / fmax(1.0, fabs((double)y[i]));
      if (!(d <= worst)) worst = d;
    }
  }
  free(x);
  free(y);
  return worst;
}

/* ------------------------------------------------------------ models */

/* The models of these tests: a function from inputs to outputs, recorded on
 * placeholders for the program and on data for the lazy reference. */
typedef void (*model_fn)(loom_tensor *const *ins, loom_tensor **outs, void *weights);

static void chain(loom_tensor *const *in, loom_tensor **out, void *w) {
  (void)w;
  out[0] = loom_tanh(loom_add_s(loom_mul_s(in[0], 2.0), 1.0));
}

static void softmax_rows(loom_tensor *const *in, loom_tensor **out, void *w) {
  (void)w;
  out[0] = loom_softmax(in[0], -1);
}

typedef struct mlp {
  loom_tensor *w1, *b1, *w2, *b2;
} mlp;

static void mlp_forward(loom_tensor *const *in, loom_tensor **out, void *weights) {
  mlp *m = weights;
  loom_tensor *h = loom_relu(loom_add(loom_matmul(in[0], m->w1), m->b1));
  out[0] = loom_softmax(loom_add(loom_matmul(h, m->w2), m->b2), -1);
}

static loom_tensor *random_tensor(loom_shape shape, unsigned seed) {
  int64_t n = 1;
  for (int d = 0; d < shape.ndim; d++) n *= shape.dim[d];
  float *x = malloc(sizeof(float) * (size_t)(n + 1));
  check_fill_uniform(x, n, seed);
  loom_tensor *t = loom_from_data(x, shape, LOOM_F32, LOOM_CPU);
  free(x);
  return t;
}

static mlp mlp_new(void) {
  return (mlp){random_tensor(LOOM_SHAPE(64, 32), 1), random_tensor(LOOM_SHAPE(32), 2),
               random_tensor(LOOM_SHAPE(32, 10), 3), random_tensor(LOOM_SHAPE(10), 4)};
}

/* Two inputs, three outputs (one of them a weight as is, one an input as is). */
static void multi(loom_tensor *const *in, loom_tensor **out, void *weights) {
  loom_tensor *w = weights;
  loom_tensor *s = loom_add(in[0], in[1]);
  int axis = 1;
  out[0] = loom_sum(loom_mul(s, w), &axis, 1, false);
  out[1] = w;
  out[2] = loom_exp(in[1]);
  out[3] = in[0];
}

/* Compiles `model` on placeholders of the given shapes and checks that runs
 * on two sets of random inputs match the lazy path. */
static void check_model(const char *what, model_fn model, void *weights, int nin, int nout,
                        const loom_shape *shapes) {
  check_set_ctx("%s", what);
  LOOM_SCOPE {
    loom_tensor *ph[4], *outs[4], *lazy_out[4], *data[4], *got[4];
    static const char *names[] = {"x", "y", "z", "t"};
    for (int i = 0; i < nin; i++) ph[i] = loom_input(names[i], shapes[i], LOOM_F32, LOOM_CPU);
    model(ph, outs, weights);
    loom_program *p = loom_compile(outs, nout, ph, nin);
    CHECK_MSG(p != NULL, "%s: compile failed: %s", what, loom_last_error());
    if (p) {
      CHECK_EQ_INT(loom_program_num_inputs(p), nin);
      CHECK_EQ_INT(loom_program_num_outputs(p), nout);
      for (int round = 0; round < 2; round++) {
        for (int i = 0; i < nin; i++) data[i] = random_tensor(shapes[i], 100u * round + i + 7);
        model(data, lazy_out, weights);
        CHECK_OK(loom_program_run(p, data, got));
        for (int o = 0; o < nout; o++) {
          CHECK_MSG(max_rel_diff(got[o], lazy_out[o]) <= 1e-6, "%s: output %d differs by %g", what,
                    o, max_rel_diff(got[o], lazy_out[o]));
          CHECK(loom_shape_of(got[o]).ndim == loom_program_output_shape(p, o).ndim);
        }
      }
      loom_program_free(p);
    }
  }
  check_set_ctx("%s", "");
}

static void test_models_match_lazy(void) {
  loom_shape s1[] = {LOOM_SHAPE(37, 19)};
  check_model("chain", chain, NULL, 1, 1, s1);
  loom_shape s2[] = {LOOM_SHAPE(16, 100)};
  check_model("softmax", softmax_rows, NULL, 1, 1, s2);
  mlp m = mlp_new();
  loom_shape s3[] = {LOOM_SHAPE(8, 64)};
  check_model("mlp", mlp_forward, &m, 1, 1, s3);
  loom_free(m.w1), loom_free(m.b1), loom_free(m.w2), loom_free(m.b2);
  loom_tensor *w = random_tensor(LOOM_SHAPE(3, 5), 9);
  loom_shape s4[] = {LOOM_SHAPE(3, 5), LOOM_SHAPE(3, 5)};
  check_model("multi", multi, w, 2, 4, s4);
  loom_free(w);
}

/* Weights are captured at compile time: assigning to the handle later does
 * not change the program. */
static void test_weights_captured(void) {
  LOOM_SCOPE {
    loom_tensor *w = loom_full(LOOM_SHAPE(4), 2.0, LOOM_F32, LOOM_CPU);
    CHECK_OK(loom_realize(w));
    loom_tensor *x = loom_input("x", LOOM_SHAPE(4), LOOM_F32, LOOM_CPU);
    loom_tensor *y = loom_mul(x, w);
    loom_program *p = loom_compile(&y, 1, &x, 1);
    CHECK(p != NULL);
    CHECK_OK(loom_assign(w, loom_full(LOOM_SHAPE(4), 5.0, LOOM_F32, LOOM_CPU)));
    CHECK_OK(loom_realize(w));
    loom_tensor *in = loom_full(LOOM_SHAPE(4), 3.0, LOOM_F32, LOOM_CPU), *out = NULL;
    CHECK_OK(loom_program_run(p, &in, &out));
    loom_tensor *s = loom_sum_all(out);
    CHECK_NEAR(loom_item(s), 24.0, 0);
    loom_program_free(p);
  }
}

static void test_errors(void) {
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU);
    loom_tensor *z = loom_input("z", LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU);
    loom_tensor *y = loom_add(x, z);
    CHECK_STATUS(x, LOOM_OK);
    /* realizing what depends on a placeholder */
    CHECK_RC(loom_realize(y), LOOM_ERR_VALUE);
    CHECK_STR_CONTAINS(loom_last_error(), "input 'x'");
    CHECK_RC(loom_realize(x), LOOM_ERR_VALUE);
    CHECK(isnan(loom_item(loom_sum_all(z))));
    /* bad names */
    CHECK_STATUS(loom_input("1x", LOOM_SHAPE(2), LOOM_F32, LOOM_CPU), LOOM_ERR_VALUE);
    CHECK_STATUS(loom_input("a-b", LOOM_SHAPE(2), LOOM_F32, LOOM_CPU), LOOM_ERR_VALUE);
    CHECK_STATUS(loom_input(NULL, LOOM_SHAPE(2), LOOM_F32, LOOM_CPU), LOOM_ERR_NULL);
    CHECK_STATUS(loom_input("x", LOOM_SHAPE(-2), LOOM_F32, LOOM_CPU), LOOM_ERR_SHAPE);
    /* compile: a placeholder missing from ins, a non-placeholder, duplicates, NULLs */
    loom_clear_error();
    CHECK(loom_compile(&y, 1, &x, 1) == NULL);
    CHECK_STR_CONTAINS(loom_last_error(), "input 'z', which is not among ins");
    loom_tensor *data = loom_zeros(LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU);
    loom_tensor *bad_ins[] = {x, data};
    CHECK(loom_compile(&y, 1, bad_ins, 2) == NULL);
    CHECK_EQ_INT(loom_last_status(), LOOM_ERR_VALUE);
    loom_clear_error();
    loom_tensor *dup[] = {x, x};
    CHECK(loom_compile(&y, 1, dup, 2) == NULL);
    CHECK_STR_CONTAINS(loom_last_error(), "the same input");
    loom_clear_error();
    CHECK(loom_compile(NULL, 1, &x, 1) == NULL);
    CHECK(loom_compile(&y, 0, &x, 1) == NULL);
    loom_tensor *nul = NULL;
    CHECK(loom_compile(&nul, 1, &x, 1) == NULL);
    loom_tensor *err = loom_reshape(x, LOOM_SHAPE(7));
    CHECK(loom_compile(&err, 1, &x, 1) == NULL);
    /* run: wrong shape, dtype, NULL, an error tensor, a placeholder as data */
    loom_tensor *ins[] = {x, z};
    loom_program *p = loom_compile(&y, 1, ins, 2);
    CHECK(p != NULL);
    if (p) {
      loom_tensor *out = (loom_tensor *)1;
      loom_tensor *good = loom_ones(LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU);
      loom_tensor *wrong_shape[] = {good, loom_ones(LOOM_SHAPE(3, 2), LOOM_F32, LOOM_CPU)};
      loom_clear_error();
      CHECK_RC(loom_program_run(p, wrong_shape, &out), LOOM_ERR_SHAPE);
      CHECK(out == NULL);
      CHECK_STR_CONTAINS(loom_last_error(),
                         "input 1 ('z') has shape [3,2], the program takes [2,3]");
      loom_tensor *wrong_dtype[] = {good, loom_ones(LOOM_SHAPE(2, 3), LOOM_F64, LOOM_CPU)};
      CHECK_RC(loom_program_run(p, wrong_dtype, &out), LOOM_ERR_DTYPE);
      loom_tensor *null_in[] = {good, NULL};
      CHECK_RC(loom_program_run(p, null_in, &out), LOOM_ERR_NULL);
      loom_tensor *err_in[] = {good, err};
      CHECK_RC(loom_program_run(p, err_in, &out), LOOM_ERR_SHAPE);
      loom_tensor *ph_in[] = {good, z};
      CHECK_RC(loom_program_run(p, ph_in, &out), LOOM_ERR_VALUE);
      CHECK_RC(loom_program_run(NULL, ph_in, &out), LOOM_ERR_NULL);
      CHECK_RC(loom_program_run(p, NULL, &out), LOOM_ERR_NULL);
      /* and it still runs */
      loom_tensor *ok_in[] = {good, loom_add_s(good, 1.0)}; /* lazy inputs are realized */
      CHECK_OK(loom_program_run(p, ok_in, &out));
      CHECK_NEAR(loom_item(loom_sum_all(out)), 18.0, 0);
      CHECK(loom_program_input_name(p, 2) == NULL);
      CHECK(strcmp(loom_program_input_name(p, 1), "z") == 0);
      CHECK(strcmp(loom_program_output_name(p, 0), "out0") == 0);
      loom_program_free(p);
    }
    loom_clear_error();
  }
}

/* ------------------------------------------------------------ threads */

typedef struct run_job {
  const loom_program *p;
  int index;
  int bad;
} run_job;

static void *run_many(void *arg) {
  run_job *job = arg;
  for (int r = 0; r < 20; r++) {
    LOOM_SCOPE {
      loom_tensor *in = loom_full(LOOM_SHAPE(8, 64), 0.01 * (job->index + r), LOOM_F32, LOOM_CPU);
      loom_tensor *out = NULL;
      if (loom_program_run(job->p, &in, &out) != LOOM_OK) {
        job->bad++;
      } else { /* softmax rows sum to 1 and each row of a constant input is the same */
        float v[80];
        loom_copy_to_host(out, v, sizeof v);
        for (int i = 0; i < 8; i++) {
          double s = 0;
          for (int j = 0; j < 10; j++) s += v[i * 10 + j];
          job->bad += fabs(s - 1) > 1e-5 || v[i * 10 + 3] != v[3];
        }
      }
    }
  }
  return NULL;
}

static void test_concurrent_runs(void) {
  mlp m = mlp_new();
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(8, 64), LOOM_F32, LOOM_CPU), *y;
    mlp_forward(&x, &y, &m);
    loom_program *p = loom_compile(&y, 1, &x, 1);
    CHECK(p != NULL);
    pthread_t th[4];
    run_job jobs[4];
    for (int i = 0; i < 4 && p; i++) {
      jobs[i] = (run_job){p, i, 0};
      pthread_create(&th[i], NULL, run_many, &jobs[i]);
    }
    for (int i = 0; i < 4 && p; i++) {
      pthread_join(th[i], NULL);
      CHECK_EQ_INT(jobs[i].bad, 0);
    }
    loom_program_free(p);
  }
  loom_free(m.w1), loom_free(m.b1), loom_free(m.w2), loom_free(m.b2);
}

static void test_memory(void) {
  uint64_t before = live();
  mlp m = mlp_new();
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(8, 64), LOOM_F32, LOOM_CPU), *y;
    mlp_forward(&x, &y, &m);
    loom_program *p = loom_compile(&y, 1, &x, 1);
    loom_free(m.w1), loom_free(m.b1), loom_free(m.w2), loom_free(m.b2); /* the program holds them */
    uint64_t steady = 0;
    for (int i = 0; i < 50 && p; i++) {
      LOOM_SCOPE {
        loom_tensor *in = random_tensor(LOOM_SHAPE(8, 64), (unsigned)i), *out;
        CHECK_OK(loom_program_run(p, &in, &out));
      }
      if (i == 1) steady = live();
      if (i > 1) CHECK_EQ_INT(live(), steady);
    }
    loom_program_free(p);
  }
  CHECK_EQ_INT(live(), before);
}

int main(void) {
  test_models_match_lazy();
  test_weights_captured();
  test_errors();
  test_concurrent_runs();
  test_memory();
  return check_report();
}
