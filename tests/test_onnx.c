/* loom_onnx_load on models built here with protobuf-c: a symbolic batch run
 * at several sizes from one program, a dim fixed by the options, an input
 * given at import, and hostile files (garbage, truncation, a nesting bomb,
 * short initializer data, external data leaving the folder, undefined
 * inputs, unsupported ops named all at once), each a clear error; what RNN,
 * GRU, LSTM and Det refuse; training models exported by PyTorch. */
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

/* ------------------------------------------------------------ RNN, GRU, LSTM, Det */

/* y = Y_h of op(x [seq, 1, 2], W [1, w_rows, 2], R [1, r_rows, r_cols]) with
 * the attributes given (NULL: absent); x's seq is symbolic when asked. */
typedef struct recurrent_model {
  model_parts base;
  Onnx__TensorProto inits[3], *init_list[3];
  Onnx__AttributeProto attrs[4], *attr_list[4];
  Onnx__TensorShapeProto__Dimension dims[3], *dim_list[3];
  ProtobufCBinaryData activation_names[3];
  char *node_in[5], *node_out[2];
  int64_t w_dims[3], r_dims[3], lens_dims[1];
  float w[64], r[64];
  int32_t lens[1];
} recurrent_model;

typedef struct recurrent_spec {
  const char *op;
  int64_t w_rows, r_rows, r_cols, hidden_size; /* hidden_size 0: no attribute */
  const char *direction;
  const char *activations[3];
  int nactivations;
  bool symbolic_seq;
  int32_t known_length; /* > 0: sequence_lens = {known_length}, an initializer */
} recurrent_spec;

static void build_recurrent(recurrent_model *m, const recurrent_spec *s) {
  memset(m, 0, sizeof *m);
  const char *ops[] = {s->op};
  build(&m->base, ops, 1, false);
  m->base.opset.version = 14;
  for (int d = 0; d < 3; d++) {
    onnx__tensor_shape_proto__dimension__init(&m->dims[d]);
    m->dims[d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    m->dims[d].dim_value = d == 0 ? 3 : d == 1 ? 1 : 2;
    m->dim_list[d] = &m->dims[d];
  }
  if (s->symbolic_seq) {
    m->dims[0].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
    m->dims[0].dim_param = "seq";
  }
  m->base.in_shape.n_dim = 3, m->base.in_shape.dim = m->dim_list;
  m->w_dims[0] = 1, m->w_dims[1] = s->w_rows, m->w_dims[2] = 2;
  m->r_dims[0] = 1, m->r_dims[1] = s->r_rows, m->r_dims[2] = s->r_cols;
  m->lens_dims[0] = 1, m->lens[0] = s->known_length;
  for (int i = 0; i < 64; i++) m->w[i] = 0.01f * (float)(i % 7), m->r[i] = -0.02f * (float)(i % 5);
  const char *names[3] = {"W", "R", "lens"};
  int ninits = s->known_length > 0 ? 3 : 2;
  for (int i = 0; i < ninits; i++) {
    Onnx__TensorProto *t = &m->inits[i];
    onnx__tensor_proto__init(t);
    t->name = (char *)names[i], t->has_data_type = true, t->data_type = i == 2 ? 6 : 1;
    t->n_dims = i == 2 ? 1 : 3, t->dims = i == 0 ? m->w_dims : i == 1 ? m->r_dims : m->lens_dims;
    t->has_raw_data = true;
    t->raw_data.len = i == 2 ? sizeof m->lens
                             : (size_t)(i ? s->r_rows * s->r_cols : s->w_rows * 2) * sizeof(float);
    t->raw_data.data = i == 0 ? (uint8_t *)m->w : i == 1 ? (uint8_t *)m->r : (uint8_t *)m->lens;
    m->init_list[i] = t;
  }
  m->base.graph.n_initializer = (size_t)ninits, m->base.graph.initializer = m->init_list;
  int nattrs = 0;
  if (s->hidden_size) {
    Onnx__AttributeProto *a = &m->attrs[nattrs++];
    onnx__attribute_proto__init(a);
    a->name = "hidden_size", a->has_type = true,
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = true, a->i = s->hidden_size;
  }
  if (s->direction) {
    Onnx__AttributeProto *a = &m->attrs[nattrs++];
    onnx__attribute_proto__init(a);
    a->name = "direction", a->has_type = true,
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    a->has_s = true, a->s.data = (uint8_t *)s->direction, a->s.len = strlen(s->direction);
  }
  if (s->nactivations) {
    Onnx__AttributeProto *a = &m->attrs[nattrs++];
    onnx__attribute_proto__init(a);
    a->name = "activations", a->has_type = true,
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
    for (int k = 0; k < s->nactivations; k++)
      m->activation_names[k] =
          (ProtobufCBinaryData){strlen(s->activations[k]), (uint8_t *)s->activations[k]};
    a->n_strings = (size_t)s->nactivations, a->strings = m->activation_names;
  }
  for (int k = 0; k < nattrs; k++) m->attr_list[k] = &m->attrs[k];
  m->node_in[0] = "x", m->node_in[1] = "W", m->node_in[2] = "R", m->node_in[3] = "";
  m->node_in[4] = "lens";
  m->node_out[0] = "", m->node_out[1] = "y";
  Onnx__NodeProto *node = &m->base.nodes[0];
  node->name = "rec";
  node->n_input = s->known_length > 0 ? 5 : 3, node->input = m->node_in;
  node->n_output = 2, node->output = m->node_out;
  node->n_attribute = (size_t)nattrs, node->attribute = m->attr_list;
}

/* The load fails with want, and the message names the node and holds words. */
static void expect_node_error(const char *path, loom_status want, const char *node,
                              const char *words) {
  expect_error(path, want, words);
  const char *msg = loom_last_error() ? loom_last_error() : "";
  if (!strstr(msg, node)) fprintf(stderr, "message '%s' does not name '%s'\n", msg, node);
  CHECK(strstr(msg, node) != NULL);
}

/* What RNN, GRU, LSTM and Det refuse, each naming the node and the value:
 * sizes that disagree with the weights, an unknown activation or direction,
 * a wrong number of activations, ScaledTanh without its values, a sequence
 * length that follows a symbolic dim (loom unrolls over it) or a known one
 * out of range, and Det of non-square or too large matrices. A well-formed
 * LSTM of the same builder loads. */
static void test_recurrent_refusals(void) {
  static const struct {
    recurrent_spec spec;
    loom_status want;
    const char *words;
  } cases[] = {
      {{"LSTM", 12, 12, 3, 0, NULL, {NULL}, 0, false, 0}, LOOM_OK, NULL},
      {{"LSTM", 12, 12, 3, 4, NULL, {NULL}, 0, false, 0}, LOOM_ERR_SHAPE, "hidden_size is 4"},
      {{"LSTM", 10, 12, 3, 3, NULL, {NULL}, 0, false, 0}, LOOM_ERR_SHAPE, "W is [1, 10, 2]"},
      {{"GRU", 6, 9, 2, 0, NULL, {NULL}, 0, false, 0}, LOOM_ERR_SHAPE, "R is [1, 9, 2]"},
      {{"RNN", 3, 3, 3, 0, NULL, {"Swish"}, 1, false, 0}, LOOM_ERR_VALUE, "'Swish'"},
      {{"RNN", 3, 3, 3, 0, "sideways", {NULL}, 0, false, 0},
       LOOM_ERR_VALUE,
       "direction 'sideways'"},
      {{"RNN", 3, 3, 3, 0, "bidirectional", {NULL}, 0, false, 0}, LOOM_ERR_SHAPE, "W is [1, 3, 2]"},
      {{"LSTM", 12, 12, 3, 0, NULL, {"Sigmoid", "Tanh"}, 2, false, 0},
       LOOM_ERR_VALUE,
       "2 activations"},
      {{"GRU", 9, 9, 3, 0, NULL, {"Sigmoid", "ScaledTanh"}, 2, false, 0},
       LOOM_ERR_VALUE,
       "ScaledTanh"},
      {{"RNN", 3, 3, 3, 0, NULL, {NULL}, 0, true, 0}, LOOM_ERR_SHAPE, "follows a symbolic dim"},
      {{"RNN", 3, 3, 3, 0, NULL, {NULL}, 0, false, 5}, LOOM_ERR_VALUE, "sequence_lens[0] is 5"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    recurrent_model m;
    build_recurrent(&m, &cases[c].spec);
    save(&m.base, path_of("recurrent.onnx"), NULL);
    check_set_ctx("recurrent case %zu", c);
    if (cases[c].want != LOOM_OK) {
      expect_node_error(path_of("recurrent.onnx"), cases[c].want, "rec", cases[c].words);
      continue;
    }
    loom_clear_error();
    loom_program *p = loom_onnx_load(path_of("recurrent.onnx"), NULL);
    CHECK(p != NULL);
    if (!p) fprintf(stderr, "recurrent case %zu: %s\n", c, loom_last_error());
    loom_program_free(p);
  }
  check_set_ctx("%s", "");
  static const struct {
    int64_t rows, cols;
    loom_status want;
    const char *words;
  } dets[] = {{2, 3, LOOM_ERR_SHAPE, "2 x 3"}, {65, 65, LOOM_ERR_VALUE, "up to 64 x 64"}};
  for (size_t c = 0; c < sizeof dets / sizeof dets[0]; c++) {
    model_parts m;
    const char *ops[] = {"Det"};
    build(&m, ops, 1, false);
    m.opset.version = 22, m.model.ir_version = 10;
    m.dims[0].dim_value = dets[c].rows, m.dims[1].dim_value = dets[c].cols;
    m.nodes[0].n_input = 1, m.nodes[0].name = "det";
    save(&m, path_of("det.onnx"), NULL);
    expect_node_error(path_of("det.onnx"), dets[c].want, "det", dets[c].words);
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
  test_recurrent_refusals();
  const char *recurrent[] = {"lstm.weight_ih_l0",
                             "lstm.weight_hh_l0",
                             "lstm.bias_ih_l0",
                             "lstm.bias_hh_l0",
                             "lstm.weight_ih_l0_reverse",
                             "lstm.weight_hh_l0_reverse",
                             "lstm.bias_ih_l0_reverse",
                             "lstm.bias_hh_l0_reverse",
                             "gru.weight_ih_l0",
                             "gru.weight_hh_l0",
                             "gru.bias_ih_l0",
                             "gru.bias_hh_l0",
                             "head.weight",
                             "head.bias"};
  test_training("recurrent", recurrent, 14);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return check_report();
}
