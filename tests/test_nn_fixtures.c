/* nn ops against PyTorch: forward values and gradients of sum(out * w) in F64,
 * compared with tests/data/nn_fixtures.txt (made by tests/data/make_nn_fixtures.py,
 * whose header documents the format). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loom.h"

#define FX_MAX_TENSORS 16
#define FX_MAX_PARAMS 8
#define FX_RTOL 1e-10
#define FX_ATOL 1e-12

typedef struct fx_tensor {
  char label[64];
  bool is_int;
  loom_shape shape;
  int64_t numel;
  double *f;
  int64_t *i;
} fx_tensor;

typedef struct fx_param {
  char key[32];
  int n;
  double v[4];
} fx_param;

typedef struct fx_case {
  char name[64], op[64];
  fx_tensor t[FX_MAX_TENSORS];
  int nt;
  fx_param p[FX_MAX_PARAMS];
  int np;
} fx_case;

static void fx_case_free(fx_case *c) {
  for (int i = 0; i < c->nt; i++) {
    free(c->t[i].f);
    free(c->t[i].i);
  }
  memset(c, 0, sizeof *c);
}

/* Reads the next token, skipping '#' comments; false at end of file. */
static bool fx_token(FILE *f, char *buf, size_t n) {
  char fmt[16];
  snprintf(fmt, sizeof fmt, "%%%zus", n - 1);
  for (;;) {
    if (fscanf(f, fmt, buf) != 1) return false;
    if (buf[0] != '#') return true;
    int ch;
    while ((ch = fgetc(f)) != EOF && ch != '\n') {
    }
  }
}

/* Reads one case; returns 1 on success, 0 at end of file, -1 on a malformed file. */
static int fx_read_case(FILE *f, fx_case *c) {
  char tok[64];
  memset(c, 0, sizeof *c);
  if (!fx_token(f, tok, sizeof tok)) return 0;
  if (strcmp(tok, "case") != 0 || fscanf(f, "%63s %63s", c->name, c->op) != 2) return -1;
  for (;;) {
    if (!fx_token(f, tok, sizeof tok)) return -1;
    if (strcmp(tok, "end") == 0) return 1;
    if (strcmp(tok, "param") == 0) {
      if (c->np == FX_MAX_PARAMS) return -1;
      fx_param *p = &c->p[c->np++];
      if (fscanf(f, "%31s %d", p->key, &p->n) != 2 || p->n < 1 || p->n > 4) return -1;
      for (int k = 0; k < p->n; k++)
        if (fscanf(f, "%lf", &p->v[k]) != 1) return -1;
    } else if (strcmp(tok, "tensor") == 0) {
      if (c->nt == FX_MAX_TENSORS) return -1;
      fx_tensor *t = &c->t[c->nt++];
      char dt[8];
      if (fscanf(f, "%63s %7s %d", t->label, dt, &t->shape.ndim) != 3) return -1;
      if (t->shape.ndim < 0 || t->shape.ndim > LOOM_MAX_DIMS) return -1;
      t->is_int = strcmp(dt, "i64") == 0;
      if (!t->is_int && strcmp(dt, "f64") != 0) return -1;
      t->numel = 1;
      for (int d = 0; d < t->shape.ndim; d++) {
        long long v;
        if (fscanf(f, "%lld", &v) != 1 || v < 0) return -1;
        t->shape.dim[d] = v;
        t->numel *= v;
      }
      size_t n = t->numel > 0 ? (size_t)t->numel : 1;
      if (t->is_int) {
        t->i = malloc(n * sizeof *t->i);
        if (!t->i) return -1;
        for (int64_t k = 0; k < t->numel; k++) {
          long long v;
          if (fscanf(f, "%lld", &v) != 1) return -1;
          t->i[k] = v;
        }
      } else {
        t->f = malloc(n * sizeof *t->f);
        if (!t->f) return -1;
        for (int64_t k = 0; k < t->numel; k++)
          if (fscanf(f, "%lf", &t->f[k]) != 1) return -1;
      }
    } else {
      return -1;
    }
  }
}

static int fx_find(const fx_case *c, const char *label) {
  for (int i = 0; i < c->nt; i++)
    if (strcmp(c->t[i].label, label) == 0) return i;
  return -1;
}

static double fx_param_v(const fx_case *c, const char *key, int k, double dflt) {
  for (int i = 0; i < c->np; i++)
    if (strcmp(c->p[i].key, key) == 0) return c->p[i].v[k < c->p[i].n ? k : c->p[i].n - 1];
  return dflt;
}

/* How many values the parameter key has (0: absent). */
static int fx_param_n(const fx_case *c, const char *key) {
  for (int i = 0; i < c->np; i++)
    if (strcmp(c->p[i].key, key) == 0) return c->p[i].n;
  return 0;
}

static bool shape_eq(loom_shape a, loom_shape b) {
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; d++)
    if (a.dim[d] != b.dim[d]) return false;
  return true;
}

/* Compares loom tensor got with the fixture tensor want; reports the first mismatch. */
static void fx_compare(const fx_case *c, const char *what, loom_tensor *got,
                       const fx_tensor *want) {
  if (!got) {
    CHECK_MSG(false, "case %s: %s: loom gave no tensor", c->name, what);
    return;
  }
  if (loom_status_of(got) != LOOM_OK) {
    CHECK_MSG(false, "case %s: %s: loom error %s (%s)", c->name, what,
              loom_status_name(loom_status_of(got)),
              loom_error_message(got) ? loom_error_message(got) : "no message");
    return;
  }
  if (!shape_eq(loom_shape_of(got), want->shape) || loom_numel(got) != want->numel) {
    CHECK_MSG(false, "case %s: %s: shape differs (ndim %d vs %d, numel %lld vs %lld)", c->name,
              what, loom_ndim(got), want->shape.ndim, (long long)loom_numel(got),
              (long long)want->numel);
    return;
  }
  size_t n = want->numel > 0 ? (size_t)want->numel : 1;
  if (want->is_int) {
    if (loom_dtype_of(got) != LOOM_I64) {
      CHECK_MSG(false, "case %s: %s: dtype %s, expected I64", c->name, what,
                loom_dtype_name(loom_dtype_of(got)));
      return;
    }
    int64_t *buf = malloc(n * sizeof *buf);
    loom_status st = loom_copy_to_host(got, buf, (size_t)want->numel * sizeof *buf);
    int64_t bad = -1;
    for (int64_t k = 0; st == LOOM_OK && k < want->numel && bad < 0; k++)
      if (buf[k] != want->i[k]) bad = k;
    CHECK_MSG(st == LOOM_OK, "case %s: %s: copy failed: %s", c->name, what, loom_status_name(st));
    if (st == LOOM_OK)
      CHECK_MSG(bad < 0, "case %s: %s: first mismatch at index %lld: loom %lld, torch %lld",
                c->name, what, (long long)bad, (long long)(bad < 0 ? 0 : buf[bad]),
                (long long)(bad < 0 ? 0 : want->i[bad]));
    free(buf);
    return;
  }
  if (loom_dtype_of(got) != LOOM_F64) {
    CHECK_MSG(false, "case %s: %s: dtype %s, expected F64", c->name, what,
              loom_dtype_name(loom_dtype_of(got)));
    return;
  }
  double *buf = malloc(n * sizeof *buf);
  loom_status st = loom_copy_to_host(got, buf, (size_t)want->numel * sizeof *buf);
  int64_t bad = -1, nbad = 0;
  double worst = 0;
  for (int64_t k = 0; st == LOOM_OK && k < want->numel; k++) {
    double g = buf[k], e = want->f[k], diff = fabs(g - e);
    bool same = g == e || (isnan(g) && isnan(e)); /* infinities, NaN */
    if (!same && !(diff <= FX_RTOL * fabs(e) + FX_ATOL)) {
      if (bad < 0) bad = k;
      nbad++;
      if (!(diff <= worst)) worst = diff;
    }
  }
  CHECK_MSG(st == LOOM_OK, "case %s: %s: copy failed: %s", c->name, what, loom_status_name(st));
  if (st == LOOM_OK)
    CHECK_MSG(bad < 0,
              "case %s: %s: %lld of %lld differ; first at index %lld: loom %.17g, torch %.17g "
              "(worst abs diff %g)",
              c->name, what, (long long)nbad, (long long)want->numel, (long long)bad,
              bad < 0 ? 0.0 : buf[bad], bad < 0 ? 0.0 : want->f[bad], worst);
  free(buf);
}

/* The loom tensor made from the fixture input `label`, or NULL. */
static loom_tensor *in_of(const fx_case *c, loom_tensor **ts, const char *label) {
  int i = fx_find(c, label);
  return i < 0 ? NULL : ts[i];
}

static loom_tensor *fx_compute(const fx_case *c, loom_tensor **ts) {
  const char *op = c->op;
#define IN(label) in_of(c, ts, label)
#define P(key, k, d) fx_param_v(c, key, k, d)
  if (strcmp(op, "conv2d") == 0) {
    loom_conv2d_opts o = {{(int)P("stride", 0, 1), (int)P("stride", 1, 1)},
                          {(int)P("padding", 0, 0), (int)P("padding", 1, 0)},
                          {(int)P("dilation", 0, 1), (int)P("dilation", 1, 1)},
                          (int)P("groups", 0, 1)};
    return loom_conv2d_f(IN("x"), IN("weight"), IN("bias"), o);
  }
  if (strcmp(op, "max_pool2d") == 0)
    return loom_max_pool2d(IN("x"), (int)P("kernel", 0, 0), (int)P("stride", 0, 0),
                           (int)P("padding", 0, 0));
  if (strcmp(op, "avg_pool2d") == 0)
    return loom_avg_pool2d(IN("x"), (int)P("kernel", 0, 0), (int)P("stride", 0, 0),
                           (int)P("padding", 0, 0));
  if (strcmp(op, "batch_norm_train") == 0 || strcmp(op, "batch_norm_eval") == 0)
    return loom_batch_norm(IN("x"), IN("running_mean"), IN("running_var"), IN("weight"), IN("bias"),
                           strcmp(op, "batch_norm_train") == 0, P("momentum", 0, 0.1),
                           P("eps", 0, 1e-5));
  if (strcmp(op, "layer_norm") == 0)
    return loom_layer_norm(IN("x"), (int)P("ndims", 0, 1), IN("weight"), IN("bias"),
                           P("eps", 0, 1e-5));
  if (strcmp(op, "embedding") == 0) return loom_embedding_f(IN("indices"), IN("weight"));
  if (strcmp(op, "one_hot") == 0)
    return loom_one_hot(IN("labels"), (int64_t)P("num_classes", 0, 0));
  if (strcmp(op, "cross_entropy") == 0) return loom_cross_entropy(IN("logits"), IN("labels"));
  if (strcmp(op, "nll_loss") == 0) return loom_nll_loss(loom_log_softmax(IN("x"), 1), IN("labels"));
  if (strcmp(op, "bce_with_logits") == 0) return loom_bce_with_logits(IN("logits"), IN("targets"));
  if (strcmp(op, "mse_loss") == 0) return loom_mse_loss(IN("pred"), IN("target"));
  if (strcmp(op, "linear") == 0) return loom_linear_f(IN("x"), IN("weight"), IN("bias"));
  if (strcmp(op, "gelu") == 0) return loom_gelu(IN("x"));
  if (strcmp(op, "silu") == 0) return loom_silu(IN("x"));
  if (strcmp(op, "log_softmax") == 0) return loom_log_softmax(IN("x"), (int)P("axis", 0, -1));
  if (strcmp(op, "softmax") == 0) return loom_softmax(IN("x"), (int)P("axis", 0, -1));
  if (strcmp(op, "gelu_tanh") == 0) return loom_gelu_tanh(IN("x"));
  if (strcmp(op, "tril") == 0) return loom_tril(IN("x"), (int64_t)P("diagonal", 0, 0));
  if (strcmp(op, "triu") == 0) return loom_triu(IN("x"), (int64_t)P("diagonal", 0, 0));
  /* index tensors stand for bool ones (the fixtures hold f64 and i64) */
  if (strcmp(op, "masked_fill") == 0)
    return loom_masked_fill(IN("x"), loom_ne_s(IN("mask"), 0), P("value", 0, 0));
  if (strcmp(op, "where_s") == 0)
    return loom_where_s(loom_ne_s(IN("cond"), 0), IN("x"), P("value", 0, 0));
  if (strcmp(op, "cross_entropy_ex") == 0) {
    loom_cross_entropy_opts o = {P("ignore", 0, 0) != 0, (int64_t)P("ignore_index", 0, 0),
                                 P("label_smoothing", 0, 0), (loom_reduction)P("reduction", 0, 0)};
    return loom_cross_entropy_ex(IN("logits"), IN("labels"), o);
  }
  if (strcmp(op, "var") == 0 || strcmp(op, "std") == 0) {
    int axes[1] = {(int)P("axes", 0, 0)}, naxes = fx_param_n(c, "axes") ? 1 : 0;
    return (op[0] == 'v' ? loom_var : loom_std)(IN("x"), axes, naxes, P("correction", 0, 1),
                                                P("keepdim", 0, 0) != 0);
  }
  if (strcmp(op, "sign") == 0) return loom_sign(IN("x"));
  if (strcmp(op, "repeat") == 0) {
    int64_t reps[LOOM_MAX_DIMS];
    int n = fx_param_n(c, "reps");
    for (int i = 0; i < n && i < LOOM_MAX_DIMS; i++) reps[i] = (int64_t)P("reps", i, 1);
    return loom_repeat(IN("x"), reps, n);
  }
  if (strcmp(op, "index_select") == 0)
    return loom_index_select(IN("x"), (int)P("axis", 0, 0), IN("index"));
  if (strcmp(op, "gather") == 0) return loom_gather(IN("x"), (int)P("axis", 0, 0), IN("index"));
  if (strcmp(op, "flip") == 0) return loom_flip(IN("x"), (int)P("axis", 0, 0));
  if (strcmp(op, "floor") == 0) return loom_floor(IN("x"));
  if (strcmp(op, "ceil") == 0) return loom_ceil(IN("x"));
  if (strcmp(op, "round") == 0) return loom_round(IN("x"));
  if (strcmp(op, "cumsum") == 0) return loom_cumsum(IN("x"), (int)P("axis", 0, 0));
  if (strcmp(op, "sort") == 0) {
    loom_tensor *values = NULL;
    loom_status st =
        loom_sort(IN("x"), (int)P("axis", 0, -1), P("descending", 0, 0) != 0, &values, NULL);
    return st ? NULL : values;
  }
  if (strcmp(op, "topk") == 0) {
    loom_tensor *values = NULL;
    loom_status st = loom_topk(IN("x"), (int64_t)P("k", 0, 1), (int)P("axis", 0, -1),
                               P("largest", 0, 1) != 0, &values, NULL);
    return st ? NULL : values;
  }
  if (strcmp(op, "mha") == 0) {
    loom_mha m = {IN("in_proj_weight"), IN("in_proj_bias"),        IN("out_w"),
                  IN("out_b"),          (int64_t)P("heads", 0, 1), P("causal", 0, 0) != 0};
    return loom_mha_forward(&m, IN("x"));
  }
  if (strcmp(op, "sdpa") == 0) {
    loom_tensor *mask = IN("mask");
    if (mask && P("bool_mask", 0, 0)) mask = loom_ne_s(mask, 0);
    return loom_scaled_dot_product_attention(IN("q"), IN("k"), IN("v"), mask,
                                             P("causal", 0, 0) != 0, P("scale", 0, 0));
  }
#undef IN
#undef P
  return NULL;
}

static bool is_expected(const char *label) {
  size_t n = strlen(label);
  return strcmp(label, "out") == 0 || strcmp(label, "w") == 0 || strncmp(label, "grad_", 5) == 0 ||
         (n > 6 && strcmp(label + n - 6, "_after") == 0);
}

static void fx_run(const fx_case *c) {
  check_set_ctx("%s", c->name);
  LOOM_SCOPE {
    loom_tensor *ts[FX_MAX_TENSORS] = {0};
    char gl[80];
    for (int i = 0; i < c->nt; i++) {
      const fx_tensor *t = &c->t[i];
      ts[i] = loom_from_data(t->is_int ? (const void *)t->i : (const void *)t->f, t->shape,
                             t->is_int ? LOOM_I64 : LOOM_F64, LOOM_CPU);
      snprintf(gl, sizeof gl, "grad_%s", t->label);
      if (!is_expected(t->label) && fx_find(c, gl) >= 0)
        CHECK_OK(loom_set_requires_grad(ts[i], true));
    }
    loom_tensor *out = fx_compute(c, ts);
    int io = fx_find(c, "out"), iw = fx_find(c, "w");
    CHECK_MSG(out != NULL && io >= 0, "case %s: unknown op %s or no out", c->name, c->op);
    if (out && io >= 0) {
      if (iw >= 0) CHECK_OK(loom_backward(loom_sum_all(loom_mul(out, ts[iw]))));
      fx_compare(c, "output", out, &c->t[io]);
      for (int i = 0; i < c->nt; i++) {
        const char *lab = c->t[i].label;
        size_t n = strlen(lab);
        if (strncmp(lab, "grad_", 5) == 0) {
          int src = fx_find(c, lab + 5);
          char what[96];
          snprintf(what, sizeof what, "gradient of %s", lab + 5);
          fx_compare(c, what, src >= 0 ? loom_grad(ts[src]) : NULL, &c->t[i]);
        } else if (n > 6 && strcmp(lab + n - 6, "_after") == 0) {
          char base[64];
          snprintf(base, sizeof base, "%.*s", (int)(n - 6), lab);
          int src = fx_find(c, base);
          fx_compare(c, lab, src >= 0 ? ts[src] : NULL, &c->t[i]);
        }
      }
    }
  }
  check_set_ctx("%s", "");
}

int main(void) {
  const char *path = LOOM_SOURCE_DIR "/tests/data/nn_fixtures.txt";
  FILE *f = fopen(path, "r");
  CHECK_MSG(f != NULL, "cannot open %s", path);
  if (f) {
    static fx_case c;
    int rc, ncases = 0;
    while ((rc = fx_read_case(f, &c)) == 1) {
      fx_run(&c);
      fx_case_free(&c);
      ncases++;
    }
    CHECK_MSG(rc == 0, "%s: malformed after %d cases", path, ncases);
    fx_case_free(&c);
    CHECK_MSG(ncases >= 20, "only %d cases in %s", ncases, path);
    fclose(f);
  }
  CHECK_EQ_INT(loom_get_stats().bytes_live, 0);
  return check_report();
}
