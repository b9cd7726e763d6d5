/* Collectives across processes: run alone (a world of one) and under
 * `mpirun -np 2` and `-np 3` (LOOM_TEST_RANKS says how many). Every dtype
 * and reduction at odd sizes, broadcasts from every root, gathers along
 * every axis, collectives inside a realized graph and a compiled program
 * (saved and loaded too), and each refusal with its message. Without MPI
 * (LOOM_TEST_NO_MPI=1) loom_dist_init must say why. With LOOM_TEST_DEVICE=cuda
 * every tensor is on the device. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "loom.h"
#include "test_device.h"

static int rank, size;

/* Rank r's value i: small integers, exact in every dtype (bool: odd ones). */
static double value(int r, int64_t i, loom_dtype dt) {
  if (dt == LOOM_BOOL) return (double)((r + i) % 3 == 0);
  if (dt == LOOM_U8) return (double)((r * 7 + i) % 31);
  return (double)((r * 5 + i * 3) % 17) - (loom_dtype_is_float(dt) ? 8 : 0);
}

static loom_tensor *rank_tensor(int r, loom_shape s, loom_dtype dt) {
  int64_t n = 1;
  for (int d = 0; d < s.ndim; d++) n *= s.dim[d];
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) v[i] = value(r, i, dt);
  loom_tensor *t = loom_cast(loom_from_data(v, s, LOOM_F64, test_device()), dt);
  free(v);
  return t;
}

static double *as_doubles(loom_tensor *t, int64_t n) {
  double *v = calloc((size_t)(n ? n : 1), sizeof(double));
  loom_tensor *wide = loom_cast(t, LOOM_F64);
  loom_status st = loom_copy_to_host(wide, v, sizeof(double) * (size_t)n);
  CHECK_MSG(st == LOOM_OK, "copy: %s %s", loom_status_name(st),
            loom_last_error() ? loom_last_error() : "");
  return v;
}

/* How far a result of dtype dt may be from want: a rounding of it. */
static double tolerance(loom_dtype dt, double want) {
  double rel = dt == LOOM_BF16 ? 0x1p-8 : dt == LOOM_F16 ? 0x1p-11 : dt == LOOM_F32 ? 1e-6 : 1e-12;
  return loom_dtype_is_float(dt) ? rel * fabs(want) + 1e-12 : 0;
}

static void test_all_reduce(void) {
  const loom_dtype dtypes[] = {LOOM_F32, LOOM_F64,  LOOM_I32,  LOOM_I64,
                               LOOM_U8,  LOOM_BOOL, LOOM_BF16, LOOM_F16};
  const loom_reduction ops[] = {LOOM_REDUCE_SUM, LOOM_REDUCE_MEAN, LOOM_REDUCE_MAX,
                                LOOM_REDUCE_MIN};
  const int64_t sizes[] = {1, 7, 1001};
  for (int d = 0; d < 8; d++)
    for (int o = 0; o < 4; o++)
      for (int k = 0; k < 3; k++) {
        loom_dtype dt = dtypes[d];
        loom_reduction op = ops[o];
        bool refused = (dt == LOOM_BOOL && (op == LOOM_REDUCE_SUM || op == LOOM_REDUCE_MEAN)) ||
                       (op == LOOM_REDUCE_MEAN && !loom_dtype_is_float(dt));
        if (dt == LOOM_U8 && op == LOOM_REDUCE_SUM) continue; /* wraps: not compared */
        LOOM_SCOPE {
          int64_t n = sizes[k];
          loom_tensor *y = loom_all_reduce(rank_tensor(rank, LOOM_SHAPE(n), dt), op);
          if (refused) {
            CHECK_MSG(loom_status_of(y) == LOOM_ERR_DTYPE, "%s %d refused", loom_dtype_name(dt),
                      (int)op);
            continue;
          }
          double *got = as_doubles(y, n);
          int bad = 0;
          for (int64_t i = 0; i < n && bad < 3; i++) {
            double want = op == LOOM_REDUCE_MAX ? -INFINITY : op == LOOM_REDUCE_MIN ? INFINITY : 0;
            for (int r = 0; r < size; r++) {
              double v = value(r, i, dt);
              want = op == LOOM_REDUCE_MAX   ? fmax(want, v)
                     : op == LOOM_REDUCE_MIN ? fmin(want, v)
                                             : want + v;
            }
            if (op == LOOM_REDUCE_MEAN) want /= size;
            double tol = tolerance(dt, want);
            if (!(fabs(got[i] - want) <= tol)) {
              bad++;
              check_fail_at(__FILE__, __LINE__, "all_reduce %s op %d n %lld: [%lld] %g, want %g",
                            loom_dtype_name(dt), (int)op, (long long)n, (long long)i, got[i], want);
            }
          }
          check_passes += bad == 0;
          free(got);
        }
      }
}

static void test_broadcast_gather(void) {
  for (int root = 0; root < size; root++) LOOM_SCOPE {
      loom_tensor *y = loom_broadcast(rank_tensor(rank, LOOM_SHAPE(3, 5), LOOM_I64), root);
      double *got = as_doubles(y, 15);
      bool same = true;
      for (int64_t i = 0; i < 15; i++) same &= got[i] == value(root, i, LOOM_I64);
      CHECK_MSG(same, "broadcast from %d", root);
      free(got);
    }
  for (int axis = 0; axis < 3; axis++) LOOM_SCOPE {
      /* [2, 3, 2] from each rank: rank r's element (a, b, c) lands at that
       * index with the gathered axis offset by r times its size */
      loom_tensor *y = loom_all_gather(rank_tensor(rank, LOOM_SHAPE(2, 3, 2), LOOM_F32), axis);
      loom_shape s = loom_shape_of(y);
      int64_t dims[3] = {2, 3, 2};
      CHECK_EQ_INT((int)s.dim[axis], (int)(dims[axis] * size));
      double *got = as_doubles(y, 12 * size);
      int bad = 0;
      for (int r = 0; r < size; r++)
        for (int64_t a = 0; a < 2; a++)
          for (int64_t b = 0; b < 3; b++)
            for (int64_t c = 0; c < 2; c++) {
              int64_t at[3] = {a, b, c};
              at[axis] += r * dims[axis];
              int64_t out_dims[3] = {2, 3, 2};
              out_dims[axis] *= size;
              int64_t flat = (at[0] * out_dims[1] + at[1]) * out_dims[2] + at[2];
              bad += got[flat] != value(r, (a * 3 + b) * 2 + c, LOOM_F32);
            }
      CHECK_MSG(bad == 0, "all_gather along %d: %d wrong", axis, bad);
      free(got);
    }
}

/* A collective between computing ops, realized lazily and as a program:
 * y = all_reduce(2 x, mean) + 1, summed over rows as a second output. */
/* loom_program_dump's text (free it). */
static char *dump_of(const loom_program *p) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  loom_program_dump(p, f);
  fclose(f);
  return text;
}

static void test_program(void) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(4, 9), LOOM_F32, test_device());
    loom_tensor *y = loom_add_s(loom_all_reduce(loom_mul_s(x, 2.0), LOOM_REDUCE_MEAN), 1.0);
    int axis = 1;
    loom_tensor *outs[2] = {y, loom_sum(loom_all_gather(y, 0), &axis, 1, false)};
    p = loom_compile(outs, 2, &x, 1);
  }
  CHECK_MSG(p != NULL, "compile: %s", loom_last_error());
  char path[128];
  snprintf(path, sizeof path, "/tmp/loom-test-dist-%d-%d.loom", (int)getpid(), rank);
  loom_program *loaded = NULL;
  if (p && loom_program_save(p, path) == LOOM_OK) loaded = loom_program_load(path);
  CHECK_MSG(loaded != NULL, "save and load: %s", loom_last_error());
  remove(path);
  strcat(path, ".safetensors");
  remove(path);
  for (int which = 0; which < 3; which++) LOOM_SCOPE {
      loom_tensor *x = rank_tensor(rank, LOOM_SHAPE(4, 9), LOOM_F32);
      loom_tensor *outs[2] = {NULL, NULL};
      if (which == 2) { /* lazily */
        outs[0] = loom_add_s(loom_all_reduce(loom_mul_s(x, 2.0), LOOM_REDUCE_MEAN), 1.0);
        int axis = 1;
        outs[1] = loom_sum(loom_all_gather(outs[0], 0), &axis, 1, false);
      } else if (which ? loaded : p) {
        loom_tensor *in = which ? loom_to(x, LOOM_CPU) : x; /* a loaded program runs on the CPU */
        loom_clear_error();
        loom_status st = loom_program_run(which ? loaded : p, &in, outs);
        CHECK_MSG(st == LOOM_OK, "run: %s", loom_last_error());
        if (st != LOOM_OK) continue;
      } else {
        continue;
      }
      double *y = as_doubles(outs[0], 36), *rows = as_doubles(outs[1], 4 * size);
      int bad = 0;
      for (int64_t i = 0; i < 36; i++) {
        double want = 0;
        for (int r = 0; r < size; r++) want += 2 * value(r, i, LOOM_F32);
        bad += !(fabs(y[i] - (want / size + 1)) <= 1e-5);
      }
      for (int64_t row = 0; row < 4 * size; row++) {
        double want = 0;
        for (int64_t j = 0; j < 9; j++) want += y[(row % 4) * 9 + j];
        bad += !(fabs(rows[row] - want) <= 1e-4);
      }
      CHECK_MSG(bad == 0, "%s: %d values wrong",
                which == 2 ? "lazy"
                : which    ? "loaded"
                           : "program",
                bad);
      free(y), free(rows);
    }
  if (p) { /* the dump names the step; an export refuses it */
    char *text = dump_of(p);
    CHECK_STR_CONTAINS(text, "all_reduce ->");
    free(text);
    loom_clear_error();
    bool on_cpu = test_device().type == LOOM_DEVICE_CPU; /* else refused as device code first */
    CHECK_RC(loom_program_export(p, "/tmp", "dist"), on_cpu ? LOOM_ERR_VALUE : LOOM_ERR_DEVICE);
    CHECK_STR_CONTAINS(loom_last_error(), on_cpu ? "collectives" : "an export is CPU code");
  }
  loom_program_free(p);
  loom_program_free(loaded);
}

/* x's all-reduce plus a sum of exp(x) over this rank's own values: the
 * all-reduce runs while the sum computes. */
static loom_tensor *reduce_beside(const loom_tensor *x) {
  loom_tensor *local = loom_sum_all(loom_exp(x));
  return loom_add(loom_all_reduce(x, LOOM_REDUCE_SUM), local);
}

static void test_overlap(void) {
  loom_program *p = NULL;
  LOOM_SCOPE {
    loom_tensor *x = loom_input("x", LOOM_SHAPE(4, 9), LOOM_F32, test_device());
    loom_tensor *y = reduce_beside(x);
    p = loom_compile(&y, 1, &x, 1);
  }
  CHECK_MSG(p != NULL, "compile: %s", loom_last_error());
  if (!p) return;
  char *text = dump_of(p);
  CHECK_STR_CONTAINS(text, "step 0: all_reduce");
  if (test_device().type == LOOM_DEVICE_CPU) /* on a device it goes through the host */
    CHECK_STR_CONTAINS(text, "runs on while steps 1 to");
  free(text);
  for (int repeat = 0; repeat < 3; repeat++) LOOM_SCOPE {
      loom_tensor *x = rank_tensor(rank + repeat, LOOM_SHAPE(4, 9), LOOM_F32), *y = NULL;
      CHECK_OK(loom_program_run(p, &x, &y));
      double *got = as_doubles(y, 36), local = 0;
      for (int64_t i = 0; i < 36; i++) local += exp((float)value(rank + repeat, i, LOOM_F32));
      int bad = 0;
      for (int64_t i = 0; i < 36; i++) {
        double want = local;
        for (int r = 0; r < size; r++) want += value(r + repeat, i, LOOM_F32);
        bad += !(fabs(got[i] - want) <= 1e-5 * fabs(want));
      }
      CHECK_MSG(bad == 0, "repeat %d: %d values wrong", repeat, bad);
      free(got);
    }
  loom_program_free(p);
}

static void test_refusals(void) {
  LOOM_SCOPE {
    loom_tensor *x = rank_tensor(rank, LOOM_SHAPE(3), LOOM_F32);
    CHECK_STATUS(loom_broadcast(x, size), LOOM_ERR_VALUE);
    CHECK_STATUS(loom_broadcast(x, -1), LOOM_ERR_VALUE);
    CHECK_STATUS(loom_all_gather(x, 1), LOOM_ERR_AXIS);
    CHECK_STATUS(loom_all_reduce(x, LOOM_REDUCE_NONE), LOOM_ERR_VALUE);
    CHECK_STATUS(loom_all_reduce(x, (loom_reduction)42), LOOM_ERR_VALUE);
    CHECK_STATUS(loom_all_reduce(NULL, LOOM_REDUCE_SUM), LOOM_ERR_NULL);
    /* no gradient flows through a collective */
    loom_tensor *w = rank_tensor(rank, LOOM_SHAPE(3), LOOM_F32);
    CHECK_OK(loom_set_requires_grad(w, true));
    CHECK(!loom_requires_grad(loom_all_reduce(w, LOOM_REDUCE_SUM)));
  }
}

/* ------------------------------------------------------------ data-parallel training */

#define ROWS 96
#define GLOBAL_BATCH 48

static loom_dataset *toy_data(void) {
  float x[ROWS * 8];
  int64_t y[ROWS];
  for (int i = 0; i < ROWS; i++) {
    for (int j = 0; j < 8; j++) x[i * 8 + j] = (float)sin(0.37 * i + 0.91 * j);
    y[i] = (i * 7) % 3;
  }
  loom_tensor *tx = loom_from_data(x, LOOM_SHAPE(ROWS, 8), LOOM_F32, test_device());
  loom_tensor *ty = loom_from_data(y, LOOM_SHAPE(ROWS), LOOM_I64, test_device());
  loom_dataset *d = loom_dataset_new(tx, ty);
  loom_free(tx), loom_free(ty);
  return d;
}

typedef struct mlp {
  loom_params *ps;
  loom_linear fc1, fc2;
} mlp;

static mlp mlp_new(uint64_t seed) {
  mlp m = {loom_params_new(), {0}, {0}};
  loom_key k[2];
  loom_key_split(loom_key_new(seed), k, 2);
  m.fc1 = loom_linear_new(m.ps, "fc1", 8, 16, k[0]);
  m.fc2 = loom_linear_new(m.ps, "fc2", 16, 3, k[1]);
  return m;
}

/* Two epochs of AdamW; with ddp, this rank's share of each global batch. */
static void train(mlp *m, bool ddp) {
  loom_dataset *d = toy_data();
  int64_t batch = ddp ? GLOBAL_BATCH / size : GLOBAL_BATCH;
  loom_loader *l = loom_loader_new(d, batch, true, false, loom_key_new(7));
  if (ddp) CHECK_OK(loom_loader_shard(l, rank, size));
  CHECK_EQ_INT((int)loom_loader_batches(l), ROWS / GLOBAL_BATCH);
  loom_optim *o = loom_adamw(m->ps, LOOM_ADAMW_DEFAULTS);
  for (int epoch = 0; epoch < 2; epoch++) {
    loom_tensor *x, *y;
    while (loom_loader_next(l, &x, &y)) LOOM_SCOPE {
        loom_optim_zero_grad(o);
        loom_tensor *h = loom_relu(loom_linear_forward(&m->fc1, x));
        loom_tensor *loss = loom_cross_entropy(loom_linear_forward(&m->fc2, h), y);
        CHECK_OK(loom_backward(loss));
        CHECK_OK(loom_optim_step(o));
        CHECK_OK(loom_realize(loss));
        loom_free(x), loom_free(y);
      }
  }
  loom_optim_free(o);
  loom_loader_free(l);
  loom_dataset_free(d);
}

/* What one step of a fresh model under loom_ddp(opts) runs: its
 * collectives, their bytes, and how many ran on while the step computed. */
typedef struct step_collectives {
  int run, overlapped;
  int64_t bytes;
} step_collectives;

static step_collectives collectives_of_a_step(loom_ddp_opts opts) {
  mlp m = mlp_new(5);
  CHECK_OK(loom_ddp(m.ps, opts));
  loom_optim *o = loom_sgd(m.ps, (loom_sgd_opts){.lr = 0.1});
  loom_stats before = loom_get_stats();
  LOOM_SCOPE {
    loom_tensor *x = rank_tensor(rank, LOOM_SHAPE(4, 8), LOOM_F32);
    loom_tensor *h = loom_relu(loom_linear_forward(&m.fc1, x));
    CHECK_OK(loom_backward(loom_sum_all(loom_linear_forward(&m.fc2, h))));
    CHECK_OK(loom_optim_step(o));
  }
  loom_stats after = loom_get_stats();
  loom_optim_free(o);
  loom_params_free(m.ps);
  return (step_collectives){(int)(after.collectives_run - before.collectives_run),
                            (int)(after.collectives_overlapped - before.collectives_overlapped),
                            (int64_t)(after.collective_bytes - before.collective_bytes)};
}

/* Buckets of 300 bytes after a first of 16: fc2's bias alone (12 bytes),
 * then fc2's weight with fc1's bias (192 + 64), then fc1's weight (512, more
 * than a bucket: alone). On the CPU, an all-reduce runs while other
 * gradients compute. Fields left zero are DDP's defaults (include/loom.h's
 * options rule): 25 MiB after a first of 16 bytes (fc2's bias, then the
 * rest), a first bucket of 1 MiB but no more than 300 bytes (fc2's and fc1's
 * bias, then fc1's weight), and all of it in one first bucket of 1 MiB. */
static void test_buckets(void) {
  step_collectives c =
      collectives_of_a_step((loom_ddp_opts){.bucket_bytes = 300, .first_bucket_bytes = 16});
  CHECK_EQ_INT(c.run, 3);
  CHECK_EQ_INT(c.bytes, 4 * (3 + 48 + 16 + 128));
  /* (on a device each goes through the host as it comes) */
  CHECK_EQ_INT(c.overlapped >= 1, test_device().type == LOOM_DEVICE_CPU);
  CHECK_EQ_INT(collectives_of_a_step((loom_ddp_opts){.first_bucket_bytes = 16}).run, 2);
  CHECK_EQ_INT(collectives_of_a_step((loom_ddp_opts){.bucket_bytes = 300}).run, 2);
  CHECK_EQ_INT(collectives_of_a_step((loom_ddp_opts){0}).run, 1);
  CHECK_EQ_INT(collectives_of_a_step(LOOM_DDP_DEFAULTS).run, 1);
}

/* 10 rows over 3 ranks: shares of 4, padded by wrapping to 12 (two rows
 * twice), together the epoch's order; errors for a rank out of range. */
static void test_shard(void) {
  LOOM_SCOPE {
    int64_t rows[10];
    for (int i = 0; i < 10; i++) rows[i] = i;
    loom_tensor *x = loom_from_data(rows, LOOM_SHAPE(10), LOOM_I64, test_device());
    loom_dataset *d = loom_dataset_new(x, x);
    int seen[10] = {0}, total = 0;
    for (int r = 0; r < 3; r++) {
      loom_loader *l = loom_loader_new(d, 3, true, false, loom_key_new(3));
      CHECK_OK(loom_loader_shard(l, r, 3));
      CHECK_EQ_INT((int)loom_loader_batches(l), 2); /* 4 rows: 3 + 1 */
      loom_tensor *bx, *by;
      while (loom_loader_next(l, &bx, &by)) {
        int64_t got[3];
        int64_t n = loom_numel(bx);
        CHECK_OK(loom_copy_to_host(bx, got, sizeof(int64_t) * (size_t)n));
        for (int64_t i = 0; i < n; i++) seen[got[i]]++, total++;
        loom_free(bx), loom_free(by);
      }
      loom_loader_free(l);
    }
    CHECK_EQ_INT(total, 12);
    for (int i = 0; i < 10; i++)
      CHECK_MSG(seen[i] >= 1 && seen[i] <= 2, "row %d seen %d", i, seen[i]);
    loom_loader *l = loom_loader_new(d, 3, false, false, loom_key_new(3));
    CHECK_RC(loom_loader_shard(l, 3, 3), LOOM_ERR_VALUE);
    CHECK_RC(loom_loader_shard(l, 0, 0), LOOM_ERR_VALUE);
    CHECK_RC(loom_loader_shard(NULL, 0, 1), LOOM_ERR_NULL);
    loom_loader_free(l);
    loom_dataset_free(d);
  }
}

static void test_ddp(void) {
  /* ranks start apart (their own seeds); loom_ddp makes them rank 0's */
  mlp m = mlp_new(100 + (uint64_t)rank), ref = mlp_new(100);
  loom_ddp_opts small = {.bucket_bytes = 300}; /* several buckets */
  CHECK_OK(loom_ddp(m.ps, small));
  train(&m, true);
  train(&ref, false); /* one process, the whole global batch */
  for (int i = 0; i < loom_params_count(m.ps); i++) LOOM_SCOPE {
      loom_tensor *p = loom_params_at(m.ps, i), *q = loom_params_at(ref.ps, i);
      int64_t n = loom_numel(p);
      double *a = as_doubles(p, n), *b = as_doubles(q, n);
      double worst = 0;
      for (int64_t k = 0; k < n; k++) worst = fmax(worst, fabs(a[k] - b[k]));
      CHECK_MSG(worst <= 1e-5, "%s: %d ranks x batch %d against 1 x %d: differs by %g",
                loom_params_name(m.ps, i), size, GLOBAL_BATCH / size, GLOBAL_BATCH, worst);
      /* every rank holds the same bits */
      loom_tensor *all = loom_all_gather(loom_reshape(p, LOOM_SHAPE(1, n)), 0);
      float *bits = malloc(sizeof(float) * (size_t)(n * size));
      CHECK_OK(loom_copy_to_host(all, bits, sizeof(float) * (size_t)(n * size)));
      CHECK_MSG(memcmp(bits, bits + (size - 1) * n, sizeof(float) * (size_t)n) == 0,
                "%s: rank 0 and rank %d differ", loom_params_name(m.ps, i), size - 1);
      free(bits), free(a), free(b);
    }
  /* rank 0 writes; the others write nothing */
  char path[128];
  snprintf(path, sizeof path, "/tmp/loom-test-ddp-%d-%d.safetensors", (int)getppid(), rank);
  remove(path);
  CHECK_OK(loom_params_save(m.ps, path));
  CHECK_MSG((access(path, F_OK) == 0) == (rank == 0), "rank %d: saved? %d", rank,
            access(path, F_OK) == 0);
  remove(path);
  CHECK_RC(loom_ddp(m.ps, (loom_ddp_opts){.bucket_bytes = -1}), LOOM_ERR_VALUE);
  CHECK_RC(loom_ddp(m.ps, (loom_ddp_opts){.bucket_bytes = 300, .first_bucket_bytes = -1}),
           LOOM_ERR_VALUE);
  CHECK_RC(loom_ddp(NULL, LOOM_DDP_DEFAULTS), LOOM_ERR_NULL);
  loom_params_free(m.ps);
  loom_params_free(ref.ps);
}

/* A collective that times out (FAKE_MPI_FAIL_AT=3: the third call, after a
 * program's check of the ranks and its first all-reduce) fails with
 * LOOM_ERR_DIST naming it, the rank and which of the program's collectives
 * it is, and every later one is refused. It is one that ran on while the
 * program computed: the wait for it times out. */
static void test_failures(void) {
  LOOM_SCOPE {
    loom_tensor *x = rank_tensor(0, LOOM_SHAPE(5), LOOM_F32);
    CHECK_OK(loom_realize(reduce_beside(x))); /* the first goes through */
    loom_clear_error();
    CHECK_RC(loom_realize(reduce_beside(x)), LOOM_ERR_DIST);
    CHECK_STR_CONTAINS(loom_last_error(), "loom_all_reduce on rank 0 of 1");
    CHECK_STR_CONTAINS(loom_last_error(), "collective 1 of 1 of its program, 5 f32 values");
    CHECK_STR_CONTAINS(loom_last_error(), "did not join within 120 s");
    loom_clear_error();
    CHECK_RC(loom_realize(loom_broadcast(x, 0)), LOOM_ERR_DIST);
    CHECK_STR_CONTAINS(loom_last_error(), "an earlier collective failed");
  }
}

/* A data-parallel step whose bucket times out (FAKE_MPI_FAIL_AT=10: after
 * loom_ddp's 4 broadcasts, each with its program's check, and the step's
 * check) fails with LOOM_ERR_DIST, and saving afterwards writes nothing:
 * the parameters' new values were never computed. */
static void test_failed_step(void) {
  mlp m = mlp_new(5);
  CHECK_OK(loom_ddp(m.ps, LOOM_DDP_DEFAULTS));
  loom_optim *o = loom_sgd(m.ps, (loom_sgd_opts){.lr = 0.1});
  LOOM_SCOPE {
    loom_tensor *x = rank_tensor(rank, LOOM_SHAPE(4, 8), LOOM_F32);
    loom_tensor *h = loom_relu(loom_linear_forward(&m.fc1, x));
    CHECK_OK(loom_backward(loom_sum_all(loom_linear_forward(&m.fc2, h))));
    CHECK_OK(loom_optim_step(o)); /* recorded: it runs when the parameters are realized */
    loom_clear_error();
    CHECK_RC(loom_realize(loom_params_at(m.ps, 0)), LOOM_ERR_DIST);
    CHECK_STR_CONTAINS(loom_last_error(), "collective 1 of 1 of its program");
  }
  char path[128];
  snprintf(path, sizeof path, "/tmp/loom-test-failed-step-%d.safetensors", (int)getpid());
  remove(path);
  loom_clear_error();
  CHECK_RC(loom_params_save(m.ps, path), LOOM_ERR_DIST);
  CHECK_MSG(access(path, F_OK) != 0, "%s was written after a failed step", path);
  remove(path);
  loom_optim_free(o);
  loom_params_free(m.ps);
}

/* Through NCCL on a stream that never finishes (FAKE_CUDA_STREAM_BUSY=1, a
 * peer that is gone): the wait times out, the communicator is aborted, and
 * later collectives are refused. */
static void test_nccl_hang(void) {
  CHECK_OK(loom_dist_set_timeout(0.5));
  LOOM_SCOPE {
    loom_tensor *x = rank_tensor(0, LOOM_SHAPE(5), LOOM_F32);
    loom_clear_error();
    CHECK_RC(loom_realize(loom_all_reduce(x, LOOM_REDUCE_SUM)), LOOM_ERR_DIST);
    CHECK_STR_CONTAINS(loom_last_error(), "ncclAllReduce on cuda:0: the other ranks did not join "
                                          "within 0.5 s");
    loom_clear_error();
    CHECK_RC(loom_realize(loom_broadcast(x, 0)), LOOM_ERR_DIST);
    CHECK_STR_CONTAINS(loom_last_error(), "an earlier collective failed");
  }
}

/* Under mpirun: ranks that run different collectives (LOOM_TEST_FAILURES=
 * mismatch: rank 0 reduces 3 values, the others 4) are told so; a rank that
 * does not join (=hang: rank 1 joins 5 s late) fails rank 0's collective
 * after its 1 s timeout, and the late rank returns (rank 0 left); a rank
 * killed (=killed, under Open MPI's mpirun --enable-recovery, which lets the
 * others live on) fails rank 0's next collective within its timeout. */
static void test_mpi_failures(const char *which) {
  LOOM_SCOPE {
    if (!strcmp(which, "killed")) {
      loom_tensor *x = loom_full(LOOM_SHAPE(5), 1.0, LOOM_F32, test_device());
      CHECK_OK(loom_realize(loom_all_reduce(x, LOOM_REDUCE_SUM))); /* both there */
      if (rank == 1) raise(SIGKILL);
      CHECK_OK(loom_dist_set_timeout(1));
      loom_clear_error();
      CHECK_RC(loom_realize(loom_all_reduce(x, LOOM_REDUCE_SUM)), LOOM_ERR_DIST);
      CHECK_STR_CONTAINS(loom_last_error(), "did not join within 1 s");
    } else if (!strcmp(which, "mismatch")) {
      loom_tensor *x = loom_full(LOOM_SHAPE(rank == 0 ? 3 : 4), 1.0, LOOM_F32, test_device());
      loom_clear_error();
      CHECK_RC(loom_realize(loom_all_reduce(x, LOOM_REDUCE_SUM)), LOOM_ERR_DIST);
      CHECK_STR_CONTAINS(loom_last_error(), "the ranks run different collectives");
    } else {
      loom_tensor *x = loom_full(LOOM_SHAPE(5), 1.0, LOOM_F32, test_device());
      if (rank == 0) {
        CHECK_OK(loom_dist_set_timeout(1));
        loom_clear_error();
        CHECK_RC(loom_realize(loom_all_reduce(x, LOOM_REDUCE_SUM)), LOOM_ERR_DIST);
        CHECK_STR_CONTAINS(loom_last_error(), "did not join within 1 s");
      } else { /* rank 0 gave up and leaves: this one returns too, told so, or done */
        sleep(5);
        loom_status st = loom_realize(loom_all_reduce(x, LOOM_REDUCE_SUM));
        CHECK_MSG(st == LOOM_OK || st == LOOM_ERR_DIST, "late rank: %s", loom_status_name(st));
      }
    }
  }
}

int main(int argc, char **argv) {
  CHECK_OK(loom_set_default_device(test_device()));
  LOOM_SCOPE { /* before loom_dist_init: refused */
    loom_tensor *x = loom_full(LOOM_SHAPE(2), 1.0, LOOM_F32, test_device());
    CHECK_STATUS(loom_all_reduce(x, LOOM_REDUCE_SUM), LOOM_ERR_DIST);
    CHECK_STR_CONTAINS(loom_error_message(loom_all_reduce(x, LOOM_REDUCE_SUM)),
                       "call loom_dist_init first");
  }
  CHECK_EQ_INT(loom_dist_size(), 1);
  loom_clear_error();
  loom_status st = loom_dist_init(&argc, &argv);
  if (getenv("LOOM_TEST_NO_MPI")) {
    CHECK_RC(st, LOOM_ERR_DIST);
    CHECK_STR_CONTAINS(loom_last_error(), getenv("FAKE_MPI_FAIL") ? "refused" : "libloom_mpi.so");
    const char *why = NULL;
    CHECK(loom_dist_available(&why) == (getenv("FAKE_MPI_FAIL") != NULL) && why != NULL);
    return check_report();
  }
  CHECK_MSG(st == LOOM_OK, "loom_dist_init: %s", loom_last_error());
  const char *nccl = getenv("LOOM_NCCL"), *about = NULL;
  if (test_device().type == LOOM_DEVICE_CUDA && nccl) { /* through the NCCL named, or the host */
    bool want = strcmp(nccl, "0") != 0;
    CHECK_EQ_INT(loom_dist_nccl_available(&about), want);
    CHECK_STR_CONTAINS(about, want ? "NCCL 2." : "LOOM_NCCL=0");
  }
  if (st != LOOM_OK) return check_report();
  rank = loom_dist_rank(), size = loom_dist_size();
  const char *ranks = getenv("LOOM_TEST_RANKS");
  CHECK_EQ_INT(size, ranks ? atoi(ranks) : 1);
  CHECK(rank >= 0 && rank < size);
  CHECK_RC(loom_dist_init(&argc, &argv), LOOM_ERR_DIST); /* once */
  loom_clear_error();
  CHECK_RC(loom_dist_set_timeout(0), LOOM_ERR_VALUE);
  CHECK_OK(loom_dist_set_timeout(120));
  check_set_ctx("rank %d of %d", rank, size);
  const char *failures = getenv("LOOM_TEST_FAILURES");
  if (failures && size > 1) {
    test_mpi_failures(failures);
    if (!strcmp(failures, "killed")) /* MPI_Finalize would wait for the dead rank */
      _exit(check_report());
    CHECK_OK(loom_dist_finalize());
    return check_report();
  }
  if (failures && !strcmp(failures, "nccl_hang")) {
    test_nccl_hang();
    return check_report();
  }
  if (failures && !strcmp(failures, "failed_step")) {
    test_failed_step();
    return check_report();
  }
  if (failures) {
    test_failures();
    return check_report();
  }
  test_all_reduce();
  test_broadcast_gather();
  test_program();
  test_overlap();
  test_refusals();
  test_shard();
  test_buckets();
  test_ddp();
  LOOM_SCOPE {
    loom_tensor *late = rank_tensor(rank, LOOM_SHAPE(2), LOOM_F32);
    loom_tensor *pending = loom_all_reduce(late, LOOM_REDUCE_SUM); /* realized after finalizing */
    CHECK_OK(loom_dist_finalize());
    loom_clear_error();
    CHECK_RC(loom_realize(pending), LOOM_ERR_DIST);
    CHECK_STR_CONTAINS(loom_last_error(), "not initialized");
    CHECK_RC(loom_dist_finalize(), LOOM_ERR_DIST);
  }
  return check_report();
}
