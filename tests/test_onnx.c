/* loom_onnx_load on models built here with protobuf-c: a symbolic batch run
 * at several sizes from one program, a dim fixed by the options, an input
 * given at import, and hostile files (garbage, truncation, a nesting bomb,
 * short initializer data, external data leaving the folder, undefined
 * inputs, unsupported ops named all at once), each a clear error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "io/onnx/onnx.h"
#include "loom.h"

static char dir[] = "/tmp/loom_test_onnx_XXXXXX";

static const char *path_of(const char *name) {
  static char buf[4][512];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, sizeof buf[0], "%s/%s", dir, name);
  return p;
}

static void write_bytes(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(data, 1, len, f);
    fclose(f);
  }
}

/* ------------------------------------------------------------ building models */

typedef struct model_parts {
  Onnx__ModelProto model;
  Onnx__OperatorSetIdProto opset, *opsets[1];
  Onnx__GraphProto graph;
  Onnx__NodeProto nodes[4], *node_list[4];
  Onnx__ValueInfoProto in, out, *ins[1], *outs[1];
  Onnx__TypeProto in_type, out_type;
  Onnx__TypeProto__Tensor in_tensor, out_tensor;
  Onnx__TensorShapeProto in_shape;
  Onnx__TensorShapeProto__Dimension dims[2], *dim_list[2];
  Onnx__TensorProto init, *inits[1];
  char *node_in[4][2], *node_out[4][1];
} model_parts;

/* y = op(x [batch, 3] (batch symbolic), w [3]) for each op; w = 1, 2, 3. */
static void build(model_parts *m, const char *const *ops, int nops, bool symbolic) {
  memset(m, 0, sizeof *m);
  onnx__model_proto__init(&m->model);
  onnx__operator_set_id_proto__init(&m->opset);
  onnx__graph_proto__init(&m->graph);
  m->opset.has_version = true, m->opset.version = 17, m->opset.domain = "";
  m->opsets[0] = &m->opset;
  m->model.n_opset_import = 1, m->model.opset_import = m->opsets;
  m->model.has_ir_version = true, m->model.ir_version = 8;
  m->model.graph = &m->graph;
  for (int i = 0; i < 2; i++) {
    onnx__tensor_shape_proto__dimension__init(&m->dims[i]);
    m->dim_list[i] = &m->dims[i];
  }
  if (symbolic) {
    m->dims[0].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
    m->dims[0].dim_param = "batch";
  } else {
    m->dims[0].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    m->dims[0].dim_value = 2;
  }
  m->dims[1].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
  m->dims[1].dim_value = 3;
  onnx__tensor_shape_proto__init(&m->in_shape);
  m->in_shape.n_dim = 2, m->in_shape.dim = m->dim_list;
  onnx__type_proto__tensor__init(&m->in_tensor);
  m->in_tensor.has_elem_type = true, m->in_tensor.elem_type = 1, m->in_tensor.shape = &m->in_shape;
  onnx__type_proto__init(&m->in_type);
  m->in_type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE,
  m->in_type.tensor_type = &m->in_tensor;
  onnx__value_info_proto__init(&m->in);
  m->in.name = "x", m->in.type = &m->in_type;
  m->ins[0] = &m->in;
  onnx__value_info_proto__init(&m->out);
  m->out.name = "y";
  m->outs[0] = &m->out;
  m->graph.n_input = 1, m->graph.input = m->ins;
  m->graph.n_output = 1, m->graph.output = m->outs;
  static const float w[3] = {1, 2, 3};
  static int64_t wdims[1] = {3};
  onnx__tensor_proto__init(&m->init);
  m->init.name = "w", m->init.has_data_type = true, m->init.data_type = 1;
  m->init.n_dims = 1, m->init.dims = wdims;
  m->init.has_raw_data = true, m->init.raw_data.len = sizeof w,
  m->init.raw_data.data = (uint8_t *)w;
  m->inits[0] = &m->init;
  m->graph.n_initializer = 1, m->graph.initializer = m->inits;
  static char *names[5] = {"x", "t1", "t2", "t3", "y"};
  for (int i = 0; i < nops; i++) {
    onnx__node_proto__init(&m->nodes[i]);
    m->node_in[i][0] = names[i], m->node_in[i][1] = "w";
    m->node_out[i][0] = i == nops - 1 ? "y" : names[i + 1];
    m->nodes[i].op_type = (char *)ops[i];
    m->nodes[i].n_input = strcmp(ops[i], "Relu") == 0 ? 1 : 2;
    m->nodes[i].input = m->node_in[i];
    m->nodes[i].n_output = 1, m->nodes[i].output = m->node_out[i];
    m->node_list[i] = &m->nodes[i];
  }
  m->graph.n_node = (size_t)nops, m->graph.node = m->node_list;
}

static size_t save(model_parts *m, const char *path, uint8_t **bytes_out) {
  size_t len = onnx__model_proto__get_packed_size(&m->model);
  uint8_t *bytes = malloc(len);
  onnx__model_proto__pack(&m->model, bytes);
  write_bytes(path, bytes, len);
  if (bytes_out)
    *bytes_out = bytes;
  else
    free(bytes);
  return len;
}

static void expect_error(const char *path, loom_status want, const char *words) {
  loom_clear_error();
  loom_program *p = loom_onnx_load(path, NULL);
  CHECK(p == NULL);
  loom_program_free(p);
  CHECK_EQ_INT(loom_last_status(), want);
  const char *msg = loom_last_error() ? loom_last_error() : "";
  if (!strstr(msg, words)) fprintf(stderr, "message '%s' lacks '%s'\n", msg, words);
  CHECK(strstr(msg, words) != NULL);
}

/* ------------------------------------------------------------ tests */

/* y = relu(x * w + w) at batches 1, 2 and 9 from one program. */
static void test_symbolic_batch(void) {
  model_parts m;
  const char *ops[] = {"Mul", "Add", "Relu"};
  build(&m, ops, 3, true);
  save(&m, path_of("sym.onnx"), NULL);
  loom_program *p = loom_onnx_load(path_of("sym.onnx"), NULL);
  CHECK(p != NULL);
  if (!p) {
    fprintf(stderr, "%s\n", loom_last_error());
    return;
  }
  CHECK_EQ_INT(loom_program_num_symbols(p), 1);
  CHECK(strcmp(loom_program_symbol_name(p, 0), "batch") == 0);
  const int64_t batches[] = {1, 2, 9};
  for (int b = 0; b < 3; b++) {
    int64_t n = batches[b];
    float x[27], y[27];
    for (int i = 0; i < n * 3; i++) x[i] = (float)(i % 5) - 2;
    loom_tensor *in = loom_from_data(x, LOOM_SHAPE(n, 3), LOOM_F32, LOOM_CPU), *out = NULL;
    CHECK_EQ_INT(loom_program_run(p, &in, &out), LOOM_OK);
    CHECK_EQ_INT(loom_copy_to_host(out, y, (size_t)n * 3 * sizeof *y), LOOM_OK);
    for (int i = 0; i < n * 3; i++) {
      float w = (float)(i % 3 + 1), want = x[i] * w + w;
      CHECK(y[i] == (want > 0 ? want : 0));
    }
    loom_free(in), loom_free(out);
  }
  loom_program_free(p);
  /* the batch fixed at import: no symbols */
  loom_onnx_dim fix = {"batch", 4};
  p = loom_onnx_load(path_of("sym.onnx"), &(loom_onnx_opts){.dims = &fix, .ndims = 1});
  CHECK(p != NULL);
  CHECK_EQ_INT(loom_program_num_symbols(p), 0);
  CHECK_EQ_INT(loom_program_input_shape(p, 0).dim[0], 4);
  loom_program_free(p);
  fix.size = 0;
  loom_clear_error();
  CHECK(loom_onnx_load(path_of("sym.onnx"), &(loom_onnx_opts){.dims = &fix, .ndims = 1}) == NULL);
  CHECK_EQ_INT(loom_last_status(), LOOM_ERR_VALUE);
}

/* An input given at import is a constant: the program takes none. */
static void test_given_input(void) {
  model_parts m;
  const char *ops[] = {"Add"};
  build(&m, ops, 1, false);
  save(&m, path_of("given.onnx"), NULL);
  float x[6] = {1, 2, 3, 4, 5, 6}, y[6];
  loom_tensor *xv = loom_from_data(x, LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU);
  loom_onnx_input given = {"x", xv};
  loom_program *p =
      loom_onnx_load(path_of("given.onnx"), &(loom_onnx_opts){.inputs = &given, .ninputs = 1});
  CHECK(p != NULL);
  CHECK_EQ_INT(loom_program_num_inputs(p), 0);
  loom_tensor *out = NULL;
  CHECK_EQ_INT(loom_program_run(p, NULL, &out), LOOM_OK);
  CHECK_EQ_INT(loom_copy_to_host(out, y, sizeof y), LOOM_OK);
  for (int i = 0; i < 6; i++) CHECK(y[i] == x[i] + (float)(i % 3 + 1));
  loom_free(out);
  loom_program_free(p);
  /* a value of the wrong dtype */
  loom_tensor *wrong = loom_zeros(LOOM_SHAPE(2, 3), LOOM_I64, LOOM_CPU);
  given.value = wrong;
  loom_clear_error();
  CHECK(loom_onnx_load(path_of("given.onnx"), &(loom_onnx_opts){.inputs = &given, .ninputs = 1}) ==
        NULL);
  CHECK_EQ_INT(loom_last_status(), LOOM_ERR_SHAPE);
  loom_free(wrong), loom_free(xv);
}

static void test_hostile_files(void) {
  expect_error(path_of("missing.onnx"), LOOM_ERR_IO, "cannot open");
  loom_clear_error();
  CHECK(loom_onnx_load(NULL, NULL) == NULL);
  CHECK_EQ_INT(loom_last_status(), LOOM_ERR_NULL);
  write_bytes(path_of("garbage.onnx"), "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11);
  expect_error(path_of("garbage.onnx"), LOOM_ERR_CORRUPT, "truncated");

  /* every truncation of a good model is an error or a smaller model, never a crash */
  model_parts m;
  const char *ops[] = {"Mul", "Add"};
  build(&m, ops, 2, true);
  uint8_t *bytes;
  size_t len = save(&m, path_of("good.onnx"), &bytes);
  for (size_t cut = 0; cut < len; cut += 3) {
    write_bytes(path_of("cut.onnx"), bytes, cut);
    loom_clear_error();
    loom_program *p = loom_onnx_load(path_of("cut.onnx"), NULL);
    CHECK(p != NULL || loom_last_status() != LOOM_OK);
    loom_program_free(p);
  }
  free(bytes);

  /* graph > node > attribute > graph > ... 200 deep */
  size_t cap = 200 * 12 + 16, at = cap;
  uint8_t *bomb = malloc(cap);
  size_t inner = 0;
  /* from the graph inwards: node, attribute, its graph, node, ... */
  static const uint8_t tags[3] = {(1 << 3) | 2, (5 << 3) | 2, (6 << 3) | 2};
  for (int level = 0; level < 600; level++) {
    uint8_t tag = level == 599 ? (7 << 3) | 2 : tags[(598 - level) % 3];
    /* the length as a varint, then the tag, written backwards */
    uint8_t v[10];
    int nv = 0;
    size_t x = inner;
    do {
      v[nv++] = (uint8_t)((x & 0x7f) | (x > 0x7f ? 0x80 : 0));
      x >>= 7;
    } while (x);
    if (at < (size_t)nv + 1) break;
    at -= (size_t)nv;
    memcpy(bomb + at, v, (size_t)nv);
    bomb[--at] = tag;
    inner = cap - at;
  }
  write_bytes(path_of("bomb.onnx"), bomb + at, cap - at);
  free(bomb);
  expect_error(path_of("bomb.onnx"), LOOM_ERR_CORRUPT, "nest deeper");

  /* an initializer shorter than its dims */
  build(&m, ops, 2, false);
  m.init.raw_data.len = 8;
  save(&m, path_of("short.onnx"), NULL);
  expect_error(path_of("short.onnx"), LOOM_ERR_CORRUPT, "raw data of 8 bytes");

  /* external data leaving the folder */
  build(&m, ops, 2, false);
  Onnx__StringStringEntryProto loc, *locs[1] = {&loc};
  onnx__string_string_entry_proto__init(&loc);
  loc.key = "location", loc.value = "../../etc/passwd";
  m.init.has_raw_data = false;
  m.init.has_data_location = true,
  m.init.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  m.init.n_external_data = 1, m.init.external_data = locs;
  save(&m, path_of("escape.onnx"), NULL);
  expect_error(path_of("escape.onnx"), LOOM_ERR_CORRUPT, "leaves the model's folder");

  /* a node reading what nothing defines */
  build(&m, ops, 2, false);
  m.node_in[1][0] = "nowhere";
  save(&m, path_of("undefined.onnx"), NULL);
  expect_error(path_of("undefined.onnx"), LOOM_ERR_CORRUPT, "'nowhere'");

  /* unsupported ops: every one named */
  const char *odd[] = {"Mul", "NoSuchOp", "AlsoMissing"};
  build(&m, odd, 3, false);
  save(&m, path_of("odd.onnx"), NULL);
  expect_error(path_of("odd.onnx"), LOOM_ERR_VALUE, "NoSuchOp");
  CHECK(strstr(loom_last_error(), "AlsoMissing") != NULL);
  CHECK(strstr(loom_last_error(), "2 nodes") != NULL);

  /* an opset loom does not read */
  build(&m, ops, 2, false);
  m.opset.version = 3;
  save(&m, path_of("old.onnx"), NULL);
  expect_error(path_of("old.onnx"), LOOM_ERR_VALUE, "opset 3");
}

/* ------------------------------------------------------------ training */

static loom_tensor *fixture_npy(const char *model, const char *file) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/data/onnx/train/%s/%s", LOOM_SOURCE_DIR, model, file);
  loom_tensor *t = loom_npy_read(path, LOOM_CPU);
  if (!t) fprintf(stderr, "%s\n", loom_last_error());
  return t;
}

/* Largest |a - b| / (1e-5 + |b|) over the elements (shapes must agree). */
static double rel_err(loom_tensor *a, loom_tensor *b) {
  if (!a || !b || loom_numel(a) != loom_numel(b)) return INFINITY;
  int64_t n = loom_numel(b);
  double *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y), worst = 0;
  loom_tensor *ca = loom_cast(a, LOOM_F64), *cb = loom_cast(b, LOOM_F64);
  if (loom_copy_to_host(ca, x, (size_t)n * sizeof *x) ||
      loom_copy_to_host(cb, y, (size_t)n * sizeof *y))
    worst = INFINITY;
  for (int64_t i = 0; i < n && isfinite(worst); i++) {
    double e = fabs(x[i] - y[i]) / (1e-5 + fabs(y[i]));
    if (e > worst) worst = e;
  }
  loom_free(ca), loom_free(cb);
  free(x), free(y);
  return worst;
}

/* tests/data/make_onnx_train_fixtures.py: models exported by PyTorch, their
 * outputs and the gradients of sum(out * r) for every parameter, which
 * loom_onnx_forward + loom_backward must match; then SGD steps lower the loss. */
static void test_training(const char *name, const char *const *params, int nparams) {
  check_set_ctx("training %s", name);
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/data/onnx/train/%s/model.onnx", LOOM_SOURCE_DIR, name);
  loom_onnx_model *m = loom_onnx_open(path);
  CHECK(m != NULL);
  if (!m) {
    fprintf(stderr, "%s\n", loom_last_error());
    return;
  }
  loom_params *ps = loom_params_new();
  loom_tensor *x = fixture_npy(name, "x.npy"), *r = fixture_npy(name, "r.npy");
  loom_tensor *want = fixture_npy(name, "out.npy");
  double first_loss = 0;
  for (int step = 0; step < 4; step++) {
    LOOM_SCOPE {
      loom_tensor *y = NULL;
      loom_status st = loom_onnx_forward(m, ps, &x, 1, &y, 1);
      CHECK_EQ_INT(st, LOOM_OK);
      if (st) fprintf(stderr, "%s\n", loom_last_error());
      loom_tensor *loss = loom_sum_all(loom_mul(y, r));
      CHECK_EQ_INT(loom_backward(loss), LOOM_OK);
      double value = loom_item(loss);
      if (step == 0) {
        first_loss = value;
        CHECK(rel_err(y, want) < 1e-4);
        for (int i = 0; i < nparams; i++) {
          char file[256];
          snprintf(file, sizeof file, "grad.%s.npy", params[i]);
          loom_tensor *g = fixture_npy(name, file);
          loom_tensor *p = loom_params_get(ps, params[i]);
          CHECK(p != NULL);
          double e = rel_err(loom_grad(p), g);
          if (!(e < 1e-3))
            fprintf(stderr, "%s: gradient of %s: relative error %g\n", name, params[i], e);
          CHECK(e < 1e-3);
          loom_free(g), loom_free(p);
        }
      } else {
        CHECK(value < first_loss); /* plain SGD on sum(out * r) */
      }
      for (int i = 0; i < loom_params_count(ps); i++) {
        if (!loom_params_trainable(ps, i)) continue;
        loom_tensor *p = loom_params_at(ps, i);
        loom_assign(p, loom_sub(p, loom_mul_s(loom_grad(p), 0.01)));
        loom_free(p);
      }
      loom_zero_grad(ps);
    }
  }
  /* every floating-point initializer is trainable (the others, shapes, are buffers) */
  int trainable = 0;
  for (int i = 0; i < loom_params_count(ps); i++) trainable += loom_params_trainable(ps, i);
  CHECK_EQ_INT(trainable, nparams);
  loom_free(x), loom_free(r), loom_free(want);
  loom_params_free(ps);
  loom_onnx_close(m);
  check_set_ctx("%s", "");
}

/* Atan, Asin and Acos (a composite: loom has no inverse trigonometry) over
 * magnitudes from 1e-30 to 1e30 and near +-1, against libm: within 1e-6
 * relative in F32 and 1e-14 in F64. */
static void test_inverse_trig(void) {
  enum { ROWS = 200, N = ROWS * 3 };
  static double xs[N];
  for (int i = 0; i < N; i++) {
    double t = (double)(i / 2) / (N / 2 - 1);
    xs[i] = (i % 2 ? -1 : 1) * pow(10, -30 + 60 * t);
  }
  xs[0] = 0, xs[1] = INFINITY, xs[2] = -INFINITY, xs[3] = 1, xs[4] = -1;
  static double unit[N];
  for (int i = 0; i < N; i++) {
    double t = (double)(i / 2) / (N / 2 - 1); /* towards 1 from 0 */
    unit[i] = (i % 2 ? -1 : 1) * (i % 4 < 2 ? t : 1 - pow(10, -12 * t));
  }
  const char *names[] = {"Atan", "Asin", "Acos"};
  double (*ref[])(double) = {atan, asin, acos};
  for (int op = 0; op < 3; op++)
    for (int f64 = 0; f64 < 2; f64++) {
      model_parts m;
      const char *ops[] = {names[op]};
      build(&m, ops, 1, true);
      m.nodes[0].n_input = 1;
      m.in_tensor.elem_type = f64 ? 11 : 1;
      save(&m, path_of("trig.onnx"), NULL);
      loom_clear_error();
      loom_program *p = loom_onnx_load(path_of("trig.onnx"), NULL);
      CHECK(p != NULL);
      if (!p) {
        fprintf(stderr, "%s: %d %s\n", names[op], (int)loom_last_status(), loom_last_error());
        continue;
      }
      const double *x = op ? unit : xs;
      static float xf[N], yf[N];
      static double yd[N];
      for (int i = 0; i < N; i++) xf[i] = (float)x[i];
      loom_tensor *in = f64 ? loom_from_data(x, LOOM_SHAPE(ROWS, 3), LOOM_F64, LOOM_CPU)
                            : loom_from_data(xf, LOOM_SHAPE(ROWS, 3), LOOM_F32, LOOM_CPU);
      loom_tensor *out = NULL;
      CHECK_EQ_INT(loom_program_run(p, &in, &out), LOOM_OK);
      CHECK_EQ_INT(f64 ? loom_copy_to_host(out, yd, sizeof yd)
                       : loom_copy_to_host(out, yf, sizeof yf),
                   LOOM_OK);
      double worst = 0;
      int worst_i = 0;
      for (int i = 0; i < N; i++) {
        double want = ref[op](f64 ? x[i] : (double)xf[i]), got = f64 ? yd[i] : yf[i];
        double err = want == 0 ? fabs(got) : fabs(got - want) / fabs(want);
        if (!(err <= worst)) worst = err, worst_i = i;
      }
      if (worst > (f64 ? 1e-14 : 1e-6))
        fprintf(stderr, "%s %s: relative error %g at x = %.17g\n", names[op], f64 ? "F64" : "F32",
                worst, x[worst_i]);
      CHECK(worst <= (f64 ? 1e-14 : 1e-6));
      loom_free(in), loom_free(out);
      loom_program_free(p);
    }
}

/* y = op(x [3, 2], indices (I64), updates (F32)) with a reduction attribute:
 * build's model with two initializers and three node inputs. */
typedef struct scatter_model {
  model_parts base;
  Onnx__TensorProto inits[2], *init_list[2];
  Onnx__AttributeProto attr, *attrs[1];
  char *node_in[3];
} scatter_model;

static void build_scatter(scatter_model *m, const char *op, const char *reduction,
                          const int64_t *idx, const int64_t *idx_dims, int idx_rank,
                          const float *upd, const int64_t *upd_dims, int upd_rank) {
  memset(m, 0, sizeof *m);
  const char *ops[] = {op};
  build(&m->base, ops, 1, false);
  m->base.opset.version = 18;
  m->base.dims[0].dim_value = 3, m->base.dims[1].dim_value = 2;
  size_t idx_n = 1, upd_n = 1;
  for (int d = 0; d < idx_rank; d++) idx_n *= (size_t)idx_dims[d];
  for (int d = 0; d < upd_rank; d++) upd_n *= (size_t)upd_dims[d];
  const char *names[2] = {"indices", "updates"};
  for (int i = 0; i < 2; i++) {
    Onnx__TensorProto *t = &m->inits[i];
    onnx__tensor_proto__init(t);
    t->name = (char *)names[i], t->has_data_type = true, t->data_type = i ? 1 : 7;
    t->n_dims = (size_t)(i ? upd_rank : idx_rank), t->dims = (int64_t *)(i ? upd_dims : idx_dims);
    t->has_raw_data = true;
    t->raw_data.len = i ? upd_n * sizeof(float) : idx_n * sizeof(int64_t);
    t->raw_data.data = i ? (uint8_t *)upd : (uint8_t *)idx;
    m->init_list[i] = t;
  }
  m->base.graph.n_initializer = 2, m->base.graph.initializer = m->init_list;
  onnx__attribute_proto__init(&m->attr);
  m->attr.name = "reduction", m->attr.has_type = true;
  m->attr.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
  m->attr.has_s = true, m->attr.s.data = (uint8_t *)reduction, m->attr.s.len = strlen(reduction);
  m->attrs[0] = &m->attr;
  m->node_in[0] = "x", m->node_in[1] = "indices", m->node_in[2] = "updates";
  Onnx__NodeProto *node = &m->base.nodes[0];
  node->n_input = 3, node->input = m->node_in;
  node->n_attribute = 1, node->attribute = m->attrs;
}

/* Scatters whose indices repeat: with no reduction the last update wins, as
 * ONNX's reference; mul and max combine every update (values from
 * onnx.reference). */
static void test_scatter_duplicates(void) {
  static const float x[6] = {10, 11, 12, 13, 14, 15};
  static const int64_t el_idx[6] = {1, 1, 1, 1, 0, 1}, el_dims[2] = {3, 2};
  static const float el_upd[6] = {1, 2, 3, 4, 5, 6};
  static const int64_t nd_idx[3] = {1, -2, 2}, nd_idx_dims[2] = {3, 1}, nd_upd_dims[2] = {3, 2};
  static const float nd_upd[6] = {2, 3, 4, 5, 6, 7};
  static const struct {
    const char *op, *reduction;
    float want[6];
  } cases[] = {
      {"ScatterElements", "none", {5, 11, 3, 6, 14, 15}},
      {"ScatterElements", "add", {15, 11, 16, 25, 14, 15}},
      {"ScatterND", "none", {10, 11, 4, 5, 6, 7}},
      {"ScatterND", "mul", {10, 11, 96, 195, 84, 105}},
      {"ScatterND", "max", {10, 11, 12, 13, 14, 15}},
      {"ScatterND", "min", {10, 11, 2, 3, 6, 7}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    scatter_model m;
    bool nd = strcmp(cases[c].op, "ScatterND") == 0;
    build_scatter(&m, cases[c].op, cases[c].reduction, nd ? nd_idx : el_idx,
                  nd ? nd_idx_dims : el_dims, 2, nd ? nd_upd : el_upd, nd ? nd_upd_dims : el_dims,
                  2);
    save(&m.base, path_of("scatter.onnx"), NULL);
    loom_clear_error();
    loom_program *p = loom_onnx_load(path_of("scatter.onnx"), NULL);
    CHECK(p != NULL);
    if (!p) {
      fprintf(stderr, "%s %s: %s\n", cases[c].op, cases[c].reduction, loom_last_error());
      continue;
    }
    float y[6];
    loom_tensor *in = loom_from_data(x, LOOM_SHAPE(3, 2), LOOM_F32, LOOM_CPU), *out = NULL;
    CHECK_EQ_INT(loom_program_run(p, &in, &out), LOOM_OK);
    CHECK_EQ_INT(loom_copy_to_host(out, y, sizeof y), LOOM_OK);
    for (int i = 0; i < 6; i++) {
      if (y[i] != cases[c].want[i])
        fprintf(stderr, "%s %s: y[%d] = %g, want %g\n", cases[c].op, cases[c].reduction, i, y[i],
                cases[c].want[i]);
      CHECK(y[i] == cases[c].want[i]);
    }
    loom_free(in), loom_free(out);
    loom_program_free(p);
  }
}

/* BitCast (opset 26) refused where the sizes differ or loom lacks the dtype, the
 * message naming the node's op and both dtypes; a float's bits as I32 and back. */
static void test_bitcast(void) {
  static const struct {
    int64_t to;
    const char *words; /* NULL: loads */
  } cases[] = {
      {11, "BitCast"}, /* f32 -> f64 */
      {11, "f32 has 4-byte elements and f64 8-byte ones"},
      {8, "bitcast to string (8), which loom does not hold"},
      {6, NULL}, /* f32 -> i32 */
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    model_parts m;
    const char *ops[] = {"BitCast"};
    build(&m, ops, 1, false);
    m.opset.version = 26;
    m.nodes[0].n_input = 1;
    Onnx__AttributeProto to, *attrs[1] = {&to};
    onnx__attribute_proto__init(&to);
    to.name = "to", to.has_type = true, to.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    to.has_i = true, to.i = cases[c].to;
    m.nodes[0].n_attribute = 1, m.nodes[0].attribute = attrs;
    save(&m, path_of("bitcast.onnx"), NULL);
    if (cases[c].words) {
      expect_error(path_of("bitcast.onnx"), LOOM_ERR_DTYPE, cases[c].words);
      continue;
    }
    loom_clear_error();
    loom_program *p = loom_onnx_load(path_of("bitcast.onnx"), NULL);
    CHECK(p != NULL);
    if (!p) continue;
    float x[6] = {1, -2, 0.5f, -0.0f, INFINITY, 3};
    int32_t y[6];
    loom_tensor *in = loom_from_data(x, LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU), *out = NULL;
    CHECK_EQ_INT(loom_program_run(p, &in, &out), LOOM_OK);
    CHECK_EQ_INT(loom_dtype_of(out), LOOM_I32);
    CHECK_EQ_INT(loom_copy_to_host(out, y, sizeof y), LOOM_OK);
    CHECK(memcmp(x, y, sizeof y) == 0);
    loom_free(in), loom_free(out);
    loom_program_free(p);
  }
}

/* y = op(x, w, b) with x a graph input of the given dims, w and b (F32)
 * initializers, and INTS, INT or STRING attributes: build's model, one node,
 * opset 18. */
typedef struct conv_model {
  model_parts base;
  Onnx__TensorShapeProto__Dimension dims[5], *dim_list[5];
  Onnx__TensorProto inits[2], *init_list[2];
  Onnx__AttributeProto attrs[8], *attr_list[8];
  char *node_in[3];
  int64_t bias_dims[1];
} conv_model;

typedef struct conv_attr {
  const char *name;
  int n; /* INTS: how many; 0: an INT (v[0]) or, with s, a STRING */
  int64_t v[6];
  const char *s;
} conv_attr;

static void build_conv(conv_model *m, const char *op, const int64_t *xdims, int rank,
                       const float *w, const int64_t *wdims, const float *b, int64_t nb,
                       const conv_attr *attrs, int nattrs) {
  memset(m, 0, sizeof *m);
  const char *ops[] = {op};
  build(&m->base, ops, 1, false);
  m->base.opset.version = 18;
  for (int d = 0; d < rank; d++) {
    onnx__tensor_shape_proto__dimension__init(&m->dims[d]);
    m->dims[d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    m->dims[d].dim_value = xdims[d];
    m->dim_list[d] = &m->dims[d];
  }
  m->base.in_shape.n_dim = (size_t)rank, m->base.in_shape.dim = m->dim_list;
  m->bias_dims[0] = nb;
  size_t wn = 1;
  for (int d = 0; d < rank; d++) wn *= (size_t)wdims[d];
  const char *names[2] = {"w", "b"};
  for (int i = 0; i < (b ? 2 : 1); i++) {
    Onnx__TensorProto *t = &m->inits[i];
    onnx__tensor_proto__init(t);
    t->name = (char *)names[i], t->has_data_type = true, t->data_type = 1;
    t->n_dims = i ? 1 : (size_t)rank, t->dims = (int64_t *)(i ? m->bias_dims : wdims);
    t->has_raw_data = true;
    t->raw_data.len = (i ? (size_t)nb : wn) * sizeof(float);
    t->raw_data.data = (uint8_t *)(i ? b : w);
    m->init_list[i] = t;
  }
  m->base.graph.n_initializer = b ? 2 : 1, m->base.graph.initializer = m->init_list;
  for (int a = 0; a < nattrs; a++) {
    Onnx__AttributeProto *at = &m->attrs[a];
    onnx__attribute_proto__init(at);
    at->name = (char *)attrs[a].name, at->has_type = true;
    if (attrs[a].n) {
      at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
      at->n_ints = (size_t)attrs[a].n, at->ints = (int64_t *)attrs[a].v;
    } else if (!attrs[a].s) {
      at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
      at->has_i = true, at->i = attrs[a].v[0];
    } else {
      at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
      at->has_s = true, at->s.data = (uint8_t *)attrs[a].s, at->s.len = strlen(attrs[a].s);
    }
    m->attr_list[a] = at;
  }
  m->node_in[0] = "x", m->node_in[1] = "w", m->node_in[2] = "b";
  Onnx__NodeProto *node = &m->base.nodes[0];
  node->n_input = b ? 3 : 2, node->input = m->node_in;
  node->n_attribute = (size_t)nattrs, node->attribute = m->attr_list;
}

/* ONNX's definitions in direct loops over spatial dims (1 to 3; unused dims
 * of size 1): ConvTranspose scatters x[i] * w[k] to o = i * stride + k * dil
 * - lo; Conv gathers x[o * stride + k * dil - lo], zero outside. Weights
 * [C, M/g, k..] and [M, C/g, k..]; y [N, M, out..] starts at the bias. */
typedef struct conv_geom {
  int64_t n, c, m, groups, in[3], k[3], out[3], stride[3], dil[3], lo[3];
} conv_geom;

static void conv_reference(const conv_geom *g, bool transpose, const float *x, const float *w,
                           const float *b, double *y) {
  int64_t outs = g->out[0] * g->out[1] * g->out[2], ins = g->in[0] * g->in[1] * g->in[2];
  int64_t taps = g->k[0] * g->k[1] * g->k[2], cg = g->c / g->groups, mg = g->m / g->groups;
  for (int64_t i = 0; i < g->n * g->m * outs; i++) y[i] = b ? b[(i / outs) % g->m] : 0;
  for (int64_t nn = 0; nn < g->n; nn++)
    for (int64_t gr = 0; gr < g->groups; gr++)
      for (int64_t ci = 0; ci < cg; ci++)
        for (int64_t mi = 0; mi < mg; mi++)
          for (int64_t p = 0; p < (transpose ? ins : outs); p++)
            for (int64_t t = 0; t < taps; t++) {
              int64_t pos[3] = {p / (g->in[1] * g->in[2]), p / g->in[2] % g->in[1], p % g->in[2]};
              if (!transpose)
                pos[0] = p / (g->out[1] * g->out[2]), pos[1] = p / g->out[2] % g->out[1],
                pos[2] = p % g->out[2];
              int64_t kk[3] = {t / (g->k[1] * g->k[2]), t / g->k[2] % g->k[1], t % g->k[2]};
              int64_t other[3], at = 0;
              bool inside = true;
              for (int d = 0; d < 3; d++) {
                other[d] = pos[d] * g->stride[d] + kk[d] * g->dil[d] - g->lo[d];
                int64_t lim = transpose ? g->out[d] : g->in[d];
                inside &= other[d] >= 0 && other[d] < lim;
                at = at * lim + other[d];
              }
              if (!inside) continue;
              int64_t c = gr * cg + ci, m = gr * mg + mi;
              double wv = transpose ? w[((c * mg + mi) * taps) + t] : w[((m * cg + ci) * taps) + t];
              if (transpose)
                y[(nn * g->m + m) * outs + at] += x[(nn * g->c + c) * ins + p] * wv;
              else
                y[(nn * g->m + m) * outs + p] += x[(nn * g->c + c) * ins + at] * wv;
            }
}

/* ConvTranspose and Conv in 1-D, 2-D and 3-D with every attribute at once
 * (strides, asymmetric pads, output_padding, dilations, groups, a bias; and
 * output_shape and auto_pad, each as the pads it implies) against
 * conv_reference; before, 3-D was refused ("1-D and 2-D only", "3-D
 * convolutions are not in loom"). */
static void test_conv_spatial(void) {
  /* per case, three numbers each (depth, height, width; a 1-D or 2-D case's
     unused dims 1 or 0): input, kernel, strides, dilations, pads before and
     after, output_padding */
  static const struct {
    const char *op;
    int dims;
    const char *geometry;
    int64_t groups;
    const char *auto_pad; /* or NULL: the pads given; "shape": output_shape */
  } cases[] = {
      {"ConvTranspose", 3, "2 3 2  2 3 2  2 1 3  1 2 1  1 0 1  0 1 2  1 0 2", 2, NULL},
      {"ConvTranspose", 3, "3 2 2  3 1 2  2 2 1  1 1 2  0 0 0  0 0 0  0 1 0", 1, NULL},
      /* output_shape: totals 2, 0 and 1, the odd one's extra pad first (ONNX's reference) */
      {"ConvTranspose", 3, "3 2 3  3 2 2  2 1 2  1 1 1  1 0 1  1 0 0  0 0 0", 2, "shape"},
      /* SAME: totals 1, 1 and 0 (stride 2, kernel 3; stride 1, kernel 2; 2, 2) */
      {"ConvTranspose", 3, "3 2 2  3 2 2  2 1 2  1 1 1  0 0 0  1 1 0  0 0 0", 1, "SAME_UPPER"},
      {"ConvTranspose", 3, "3 2 2  3 2 2  2 1 2  1 1 1  1 1 0  0 0 0  0 0 0", 1, "SAME_LOWER"},
      {"ConvTranspose", 2, "1 3 2  1 2 3  1 2 3  1 2 1  0 1 1  0 0 2  0 1 2", 2, NULL},
      {"ConvTranspose", 1, "1 1 4  1 1 3  1 1 2  1 1 2  0 0 1  0 0 2  0 0 1", 2, NULL},
      {"Conv", 3, "5 4 6  2 3 2  2 1 2  1 2 2  1 0 0  0 2 1  0 0 0", 2, NULL},
      {"Conv", 3, "3 3 3  3 3 3  1 1 1  1 1 1  1 1 1  1 1 1  0 0 0", 1, NULL},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    bool transpose = cases[c].op[4] == 'T';
    int dims = cases[c].dims, first = 3 - dims;
    check_set_ctx("%s %d-D case %zu", cases[c].op, dims, c);
    conv_geom g = {
        .n = 2, .c = 4, .m = transpose ? 2 * cases[c].groups : 4, .groups = cases[c].groups};
    int64_t hi[3], outpad[3], *fields[7] = {g.in, g.k, g.stride, g.dil, g.lo, hi, outpad};
    const char *at_text = cases[c].geometry;
    for (int f = 0; f < 7; f++)
      for (int d = 0; d < 3; d++) fields[f][d] = strtoll(at_text, (char **)&at_text, 10);
    for (int d = 0; d < 3; d++) {
      int64_t span = (g.k[d] - 1) * g.dil[d] + 1;
      g.out[d] = transpose ? g.stride[d] * (g.in[d] - 1) + outpad[d] + span - g.lo[d] - hi[d]
                           : (g.in[d] + g.lo[d] + hi[d] - span) / g.stride[d] + 1;
    }
    int64_t xdims[5] = {g.n, g.c},
            wdims[5] = {transpose ? g.c : g.m, transpose ? g.m / g.groups : g.c / g.groups};
    for (int d = 0; d < dims; d++) xdims[2 + d] = g.in[first + d], wdims[2 + d] = g.k[first + d];
    int64_t xn = g.n * g.c * g.in[0] * g.in[1] * g.in[2], wn = wdims[0] * wdims[1];
    for (int d = 0; d < dims; d++) wn *= wdims[2 + d];
    int64_t yn = g.n * g.m * g.out[0] * g.out[1] * g.out[2];
    float *x = malloc(sizeof(float) * (size_t)xn), *w = malloc(sizeof(float) * (size_t)wn);
    float b[8], *y = malloc(sizeof(float) * (size_t)yn);
    double *want = malloc(sizeof(double) * (size_t)yn);
    for (int64_t i = 0; i < xn; i++) x[i] = (float)((i * 7 + 3) % 11 - 5) / 4;
    for (int64_t i = 0; i < wn; i++) w[i] = (float)((i * 5 + 1) % 9 - 4) / 2;
    for (int i = 0; i < 8; i++) b[i] = (float)i - 2.5f;
    conv_attr at[8];
    int na = 0;
    at[na] = (conv_attr){"strides", dims, {0}, NULL};
    for (int d = 0; d < dims; d++) at[na].v[d] = g.stride[first + d];
    na++;
    at[na] = (conv_attr){"dilations", dims, {0}, NULL};
    for (int d = 0; d < dims; d++) at[na].v[d] = g.dil[first + d];
    na++;
    at[na++] = (conv_attr){"group", 0, {g.groups}, NULL};
    at[na] = (conv_attr){"kernel_shape", dims, {0}, NULL};
    for (int d = 0; d < dims; d++) at[na].v[d] = g.k[first + d];
    na++;
    at[na] = (conv_attr){"output_padding", dims, {0}, NULL};
    for (int d = 0; d < dims; d++) at[na].v[d] = outpad[first + d];
    if (transpose) na++;
    const char *how = cases[c].auto_pad;
    if (!how) {
      at[na] = (conv_attr){"pads", 2 * dims, {0}, NULL};
      for (int d = 0; d < dims; d++)
        at[na].v[d] = g.lo[first + d], at[na].v[dims + d] = hi[first + d];
      na++;
    } else if (strcmp(how, "shape") == 0) {
      at[na] = (conv_attr){"output_shape", dims, {0}, NULL};
      for (int d = 0; d < dims; d++) at[na].v[d] = g.out[first + d];
      na++;
    } else {
      at[na++] = (conv_attr){"auto_pad", 0, {0}, how};
    }
    conv_model m;
    build_conv(&m, cases[c].op, xdims, dims + 2, w, wdims, b, g.m, at, na);
    save(&m.base, path_of("conv.onnx"), NULL);
    conv_reference(&g, transpose, x, w, b, want);
    loom_clear_error();
    loom_program *p = loom_onnx_load(path_of("conv.onnx"), NULL);
    CHECK(p != NULL);
    if (!p) {
      fprintf(stderr, "%s\n", loom_last_error());
    } else {
      loom_shape xs = {.ndim = dims + 2};
      for (int d = 0; d < dims + 2; d++) xs.dim[d] = xdims[d];
      loom_tensor *in = loom_from_data(x, xs, LOOM_F32, LOOM_CPU), *out = NULL;
      CHECK_EQ_INT(loom_program_run(p, &in, &out), LOOM_OK);
      CHECK_EQ_INT(loom_numel(out), yn);
      if (loom_numel(out) == yn) {
        CHECK_EQ_INT(loom_copy_to_host(out, y, sizeof(float) * (size_t)yn), LOOM_OK);
        int bad = 0;
        for (int64_t i = 0; i < yn; i++)
          if (fabs(y[i] - want[i]) > 1e-5 * (1 + fabs(want[i])) && bad++ < 3)
            fprintf(stderr, "%s case %zu: y[%lld] = %g, want %g\n", cases[c].op, c, (long long)i,
                    y[i], want[i]);
        CHECK(bad == 0);
      }
      loom_free(in), loom_free(out);
      loom_program_free(p);
    }
    free(x), free(w), free(y), free(want);
  }
  check_set_ctx("%s", "");
}

/* MelWeightMatrix built at import from known scalars (values from ONNX's
 * reference: 4 bands of a 64-point DFT at 8000 Hz over 200 to 3800 Hz, as
 * F64); refused where an input is computed at run time or a band leaves the
 * spectrogram's bins. */
static void test_mel_weight_matrix(void) {
  static const struct {
    int row, col;
    double v;
  } want[] = {
      {2, 0, 0.5},      {3, 0, 1},        {4, 0, 2.0 / 3},  {4, 1, 1.0 / 3},  {5, 0, 1.0 / 3},
      {5, 1, 2.0 / 3},  {6, 1, 1},        {7, 1, 0.75},     {7, 2, 0.25},     {8, 1, 0.5},
      {8, 2, 0.5},      {9, 1, 0.25},     {9, 2, 0.75},     {10, 2, 1},       {11, 2, 0.8},
      {11, 3, 0.2},     {12, 2, 0.6},     {12, 3, 0.4},     {13, 2, 0.4},     {13, 3, 0.6},
      {14, 2, 0.2},     {14, 3, 0.8},     {15, 3, 1},       {16, 3, 6.0 / 7}, {17, 3, 5.0 / 7},
      {18, 3, 4.0 / 7}, {19, 3, 3.0 / 7}, {20, 3, 2.0 / 7}, {21, 3, 1.0 / 7},
  };
  static const struct {
    double upper;
    const char *input3; /* lower_edge_hertz's name: "x" is the graph's input */
    const char *words;  /* NULL: loads */
  } cases[] = {
      {3800, "lower", NULL},
      {3800, "x", "needs its values when it imports"},
      {9000, "lower", "outside the 33 bins of a 64-point DFT"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    model_parts m;
    const char *ops[] = {"MelWeightMatrix"};
    build(&m, ops, 1, false);
    static const int64_t ints[3] = {4, 64, 8000};
    double hz[2] = {200, cases[c].upper};
    static const char *names[5] = {"mels", "dft_length", "rate", "lower", "upper"};
    Onnx__TensorProto inits[5], *init_list[5];
    for (int i = 0; i < 5; i++) {
      onnx__tensor_proto__init(&inits[i]);
      inits[i].name = (char *)names[i], inits[i].has_data_type = true;
      inits[i].data_type = i < 3 ? 7 : 11; /* INT64, DOUBLE */
      inits[i].has_raw_data = true, inits[i].raw_data.len = 8;
      inits[i].raw_data.data = i < 3 ? (uint8_t *)&ints[i] : (uint8_t *)&hz[i - 3];
      init_list[i] = &inits[i];
    }
    m.graph.n_initializer = 5, m.graph.initializer = init_list;
    if (strcmp(cases[c].input3, "x") == 0) m.in_shape.n_dim = 0; /* a scalar, given at run time */
    char *node_in[5] = {"mels", "dft_length", "rate", (char *)cases[c].input3, "upper"};
    Onnx__AttributeProto type, *attrs[1] = {&type};
    onnx__attribute_proto__init(&type);
    type.name = "output_datatype", type.has_type = true;
    type.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, type.has_i = true, type.i = 11;
    m.nodes[0].n_input = 5, m.nodes[0].input = node_in;
    m.nodes[0].n_attribute = 1, m.nodes[0].attribute = attrs;
    save(&m, path_of("mel.onnx"), NULL);
    if (cases[c].words) {
      expect_error(path_of("mel.onnx"), LOOM_ERR_VALUE, cases[c].words);
      continue;
    }
    loom_clear_error();
    loom_program *p = loom_onnx_load(path_of("mel.onnx"), NULL);
    CHECK(p != NULL);
    if (!p) {
      fprintf(stderr, "%s\n", loom_last_error());
      continue;
    }
    float x[6] = {0};
    double y[33 * 4], expect[33 * 4] = {0};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
      expect[want[k].row * 4 + want[k].col] = want[k].v;
    loom_tensor *in = loom_from_data(x, LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU), *out = NULL;
    CHECK_EQ_INT(loom_program_run(p, &in, &out), LOOM_OK);
    CHECK_EQ_INT(loom_dtype_of(out), LOOM_F64);
    CHECK_EQ_INT(loom_numel(out), 33 * 4);
    if (loom_numel(out) == 33 * 4 && loom_copy_to_host(out, y, sizeof y) == LOOM_OK)
      for (int i = 0; i < 33 * 4; i++)
        CHECK_MSG(fabs(y[i] - expect[i]) <= 1e-15, "mel[%d][%d] = %.17g, want %.17g", i / 4, i % 4,
                  y[i], expect[i]);
    loom_free(in), loom_free(out);
    loom_program_free(p);
  }
}

int main(void) {
  if (!mkdtemp(dir)) return 1;
  test_symbolic_batch();
  test_given_input();
  test_hostile_files();
  const char *cnn[] = {"conv1.weight", "conv1.bias", "conv2.weight",
                       "conv2.bias",   "fc.weight",  "fc.bias"};
  test_training("cnn", cnn, 6);
  const char *block[] = {"ln1.weight", "ln1.bias",   "qkv.weight",  "qkv.bias",   "proj.weight",
                         "proj.bias",  "ln2.weight", "ln2.bias",    "fc1.weight", "fc1.bias",
                         "fc2.weight", "fc2.bias",   "head.weight", "head.bias"};
  test_training("transformer", block, 14);
  test_inverse_trig();
  test_scatter_duplicates();
  test_bitcast();
  test_conv_spatial();
  test_mel_weight_matrix();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return check_report();
}
