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

/* ------------------------------------------------------------ narrow types */

/* An independent reference for the float formats: the nearest of every
 * finite value (ties to the even code), past the greatest one saturating. */
typedef struct float_format {
  int32_t onnx;
  int exp_bits, mant, bias;
  bool fn, fnuz, ieee; /* NaN at all ones, NaN at 0x80, IEEE specials */
} float_format;

static double format_value(const float_format *f, int code, bool *special) {
  int bits = 1 + f->exp_bits + f->mant, exp = code >> f->mant & ((1 << f->exp_bits) - 1);
  int mant = code & ((1 << f->mant) - 1), all = (1 << f->exp_bits) - 1;
  *special = (f->fn && exp == all && mant == (1 << f->mant) - 1) || (f->ieee && exp == all) ||
             (f->fnuz && code == 1 << (bits - 1));
  double v =
      exp ? ldexp(1 + ldexp(mant, -f->mant), exp - f->bias) : ldexp(mant, 1 - f->bias - f->mant);
  return code >> (bits - 1) ? -v : v;
}

static double reference_round(const float_format *f, double x) {
  if (x != x) return NAN;
  int ncodes = 1 << (1 + f->exp_bits + f->mant);
  double best = 0, max = 0;
  int best_code = -1, max_code = 0;
  for (int c = 0; c < ncodes / 2; c++) { /* the non-negative codes */
    bool special;
    double v = format_value(f, c, &special);
    if (special) continue;
    if (v > max) max = v, max_code = c;
    double d = fabs(fabs(x) - v), bd = fabs(fabs(x) - best);
    if (best_code < 0 || d < bd || (d == bd && c % 2 == 0)) best = v, best_code = c;
  }
  /* past the greatest value lies the next code's value, were it finite */
  double next = max + (max - format_value(f, max_code - 1, &(bool){0}));
  double dn = fabs(fabs(x) - next), db = fabs(fabs(x) - best);
  if (fabs(x) > max && (dn < db || (dn == db && (max_code + 1) % 2 == 0))) best = max;
  if (f->fnuz && best == 0) return 0;
  return x < 0 ? -best : best;
}

/* y = CastLike(x, w) with w an initializer of each narrow type (its odd count
 * packed), the same with the two swapped (w read back), and a model whose
 * input is narrow, cast into its type on entry. */
static void test_narrow_types(void) {
  static const float_format floats[] = {{17, 4, 3, 7, true, false, false},
                                        {18, 4, 3, 8, false, true, false},
                                        {19, 5, 2, 15, false, false, true},
                                        {20, 5, 2, 16, false, true, false},
                                        {23, 2, 1, 1, false, false, false}};
  static const struct {
    int32_t onnx;
    int bits;
    bool is_signed;
  } ints[] = {{21, 4, false}, {22, 4, true}, {25, 2, false}, {26, 2, true}};
  enum { N = 2 * 3 };
  const float xs[N] = {0.3f, -1.0e6f, 3.0e-3f, -2.5f, 1.0e-7f, 17.75f};
  for (int k = 0; k < 9; k++) {
    bool is_float = k < 5;
    int32_t type = is_float ? floats[k].onnx : ints[k - 5].onnx;
    int bits = is_float ? 1 + floats[k].exp_bits + floats[k].mant : ints[k - 5].bits;
    model_parts m;
    const char *ops[] = {"CastLike"};
    build(&m, ops, 1, false);
    m.opset.version = 23;
    /* w: three values packed LSB first; code 1 everywhere, 2 for the last */
    static uint8_t packed[3];
    uint32_t word = 1u | 1u << bits | 2u << 2 * bits;
    for (int b = 0; b < 3; b++) packed[b] = (uint8_t)(word >> 8 * b);
    m.init.data_type = type;
    m.init.raw_data.data = packed, m.init.raw_data.len = (size_t)(3 * bits + 7) / 8;
    save(&m, path_of("narrow.onnx"), NULL);
    loom_clear_error();
    loom_program *p = loom_onnx_load(path_of("narrow.onnx"), NULL);
    CHECK(p != NULL);
    if (!p) {
      fprintf(stderr, "type %d: %s\n", (int)type, loom_last_error());
      continue;
    }
    loom_tensor *in = loom_from_data(xs, LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU), *out = NULL;
    CHECK_EQ_INT(loom_program_run(p, &in, &out), LOOM_OK);
    loom_tensor *back = loom_cast(out, LOOM_F64);
    double y[N];
    CHECK_EQ_INT(loom_copy_to_host(back, y, sizeof y), LOOM_OK);
    for (int i = 0; i < N; i++) {
      double want;
      if (is_float) {
        want = reference_round(&floats[k], xs[i]);
      } else {
        double t = trunc(xs[i]), mod = ldexp(1, bits);
        want = t - mod * floor(t / mod);
        if (ints[k - 5].is_signed && want >= mod / 2) want -= mod;
      }
      if (!(y[i] == want))
        fprintf(stderr, "type %d: x %g gave %g, want %g\n", (int)type, xs[i], y[i], want);
      CHECK(y[i] == want);
    }
    loom_free(in), loom_free(out), loom_free(back);
    loom_program_free(p);

    /* w read back through CastLike(w, x) */
    m.node_in[0][0] = "w", m.node_in[0][1] = "x";
    save(&m, path_of("narrow_w.onnx"), NULL);
    p = loom_onnx_load(path_of("narrow_w.onnx"), NULL);
    CHECK(p != NULL);
    if (p) {
      in = loom_from_data(xs, LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU), out = NULL;
      CHECK_EQ_INT(loom_program_run(p, &in, &out), LOOM_OK);
      float w[3];
      CHECK_EQ_INT(loom_copy_to_host(out, w, sizeof w), LOOM_OK);
      bool special;
      double one = is_float ? format_value(&floats[k], 1, &special) : 1;
      double two = is_float ? format_value(&floats[k], 2, &special) : 2;
      if (!is_float && ints[k - 5].is_signed && bits == 2) two = -2;
      CHECK(w[0] == one && w[1] == one && w[2] == two);
      loom_free(in), loom_free(out);
      loom_program_free(p);
    }

    /* short packed data is refused */
    m.node_in[0][0] = "x", m.node_in[0][1] = "w";
    m.init.raw_data.len = (size_t)(3 * bits + 7) / 8 - 1;
    save(&m, path_of("narrow_short.onnx"), NULL);
    expect_error(path_of("narrow_short.onnx"), LOOM_ERR_CORRUPT, "raw data of");
    m.init.raw_data.len = (size_t)(3 * bits + 7) / 8;

    /* a narrow input: the program takes the held dtype, cast into the type */
    m.in_tensor.elem_type = type;
    m.init.data_type = 1;
    static const float ones[3] = {1, 1, 1};
    m.init.raw_data.data = (uint8_t *)ones, m.init.raw_data.len = sizeof ones;
    save(&m, path_of("narrow_in.onnx"), NULL);
    p = loom_onnx_load(path_of("narrow_in.onnx"), NULL);
    CHECK(p != NULL);
    if (!p) continue;
    loom_dtype held = is_float ? LOOM_F16 : ints[k - 5].is_signed ? LOOM_I8 : LOOM_U8;
    CHECK_EQ_INT(loom_program_input_dtype(p, 0), held);
    loom_tensor *x32 = loom_from_data(xs, LOOM_SHAPE(2, 3), LOOM_F32, LOOM_CPU);
    in = loom_cast(x32, held);
    loom_tensor *given = loom_cast(in, LOOM_F64);
    double gv[N];
    CHECK_EQ_INT(loom_copy_to_host(given, gv, sizeof gv), LOOM_OK);
    out = NULL;
    CHECK_EQ_INT(loom_program_run(p, &in, &out), LOOM_OK);
    float got[N];
    CHECK_EQ_INT(loom_copy_to_host(out, got, sizeof got), LOOM_OK);
    for (int i = 0; i < N; i++) {
      double want;
      if (is_float) {
        want = reference_round(&floats[k], gv[i]);
      } else {
        double mod = ldexp(1, bits);
        want = gv[i] - mod * floor(gv[i] / mod);
        if (ints[k - 5].is_signed && want >= mod / 2) want -= mod;
      }
      if (!(got[i] == (float)want))
        fprintf(stderr, "type %d input: %g gave %g, want %g\n", (int)type, gv[i], got[i], want);
      CHECK(got[i] == (float)want);
    }
    loom_free(x32), loom_free(in), loom_free(given), loom_free(out);
    loom_program_free(p);
  }
}

/* ------------------------------------------- LinearAttention, CausalConvWithState */

/* A model of one opset-27 node over inputs named and shaped as given (a dim
 * of -1 is the symbolic dim "n"; an input named "" is omitted), with int
 * ('i'), float ('f') and string ('s') attributes; its outputs y0 and y1. */
typedef struct one_input {
  const char *name;
  int rank;
  int64_t dim[4];
  int elem_type; /* 0: float */
} one_input;
typedef struct one_attr {
  const char *name;
  char kind;
  int64_t i;
  float f;
  const char *s;
} one_attr;
#define ONE_IN(nm, r, ...)                                                                         \
  {                                                                                                \
    .name = nm, .rank = r, .dim = { __VA_ARGS__ }                                                  \
  }
#define ONE_IN_T(nm, type, r, ...)                                                                 \
  { .name = nm, .rank = r, .dim = {__VA_ARGS__}, .elem_type = type }
#define ONE_INT(nm, v)                                                                             \
  { .name = nm, .kind = 'i', .i = v }
#define ONE_STR(nm, v)                                                                             \
  { .name = nm, .kind = 's', .s = v }
enum { ONE_MAX_IN = 6, ONE_MAX_ATTRS = 4 };
typedef struct one_node_model {
  Onnx__ModelProto model;
  Onnx__OperatorSetIdProto opset, *opsets[1];
  Onnx__GraphProto graph;
  Onnx__NodeProto node, *nodes[1];
  Onnx__ValueInfoProto in[ONE_MAX_IN], out[2], *ins[ONE_MAX_IN], *outs[2];
  Onnx__TypeProto type[ONE_MAX_IN];
  Onnx__TypeProto__Tensor tensor[ONE_MAX_IN];
  Onnx__TensorShapeProto shape[ONE_MAX_IN];
  Onnx__TensorShapeProto__Dimension dim[ONE_MAX_IN][4], *dims[ONE_MAX_IN][4];
  Onnx__AttributeProto attr[ONE_MAX_ATTRS], *attrs[ONE_MAX_ATTRS];
  char *node_in[ONE_MAX_IN], *node_out[2];
} one_node_model;

static const char *save_one_node(const char *op, const one_input *ins, int nin,
                                 const one_attr *attrs, int nattrs) {
  static one_node_model m;
  memset(&m, 0, sizeof m);
  onnx__model_proto__init(&m.model);
  onnx__operator_set_id_proto__init(&m.opset);
  onnx__graph_proto__init(&m.graph);
  m.opset.has_version = true, m.opset.version = 27, m.opset.domain = "";
  m.opsets[0] = &m.opset;
  m.model.n_opset_import = 1, m.model.opset_import = m.opsets;
  m.model.has_ir_version = true, m.model.ir_version = 10;
  m.model.graph = &m.graph;
  int ngraph = 0;
  for (int i = 0; i < nin; i++) {
    m.node_in[i] = (char *)ins[i].name;
    if (!ins[i].name[0]) continue;
    for (int d = 0; d < ins[i].rank; d++) {
      Onnx__TensorShapeProto__Dimension *dim = &m.dim[i][d];
      onnx__tensor_shape_proto__dimension__init(dim);
      if (ins[i].dim[d] < 0) {
        dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
        dim->dim_param = "n";
      } else {
        dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        dim->dim_value = ins[i].dim[d];
      }
      m.dims[i][d] = dim;
    }
    onnx__tensor_shape_proto__init(&m.shape[i]);
    m.shape[i].n_dim = (size_t)ins[i].rank, m.shape[i].dim = m.dims[i];
    onnx__type_proto__tensor__init(&m.tensor[i]);
    m.tensor[i].has_elem_type = true;
    m.tensor[i].elem_type = ins[i].elem_type ? ins[i].elem_type : 1;
    m.tensor[i].shape = &m.shape[i];
    onnx__type_proto__init(&m.type[i]);
    m.type[i].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    m.type[i].tensor_type = &m.tensor[i];
    onnx__value_info_proto__init(&m.in[i]);
    m.in[i].name = (char *)ins[i].name, m.in[i].type = &m.type[i];
    m.ins[ngraph++] = &m.in[i];
  }
  static char *out_names[2] = {"y0", "y1"};
  for (int o = 0; o < 2; o++) {
    onnx__value_info_proto__init(&m.out[o]);
    m.out[o].name = out_names[o];
    m.outs[o] = &m.out[o];
    m.node_out[o] = out_names[o];
  }
  for (int a = 0; a < nattrs; a++) {
    Onnx__AttributeProto *at = &m.attr[a];
    onnx__attribute_proto__init(at);
    at->name = (char *)attrs[a].name, at->has_type = true;
    if (attrs[a].kind == 'i') {
      at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
      at->has_i = true, at->i = attrs[a].i;
    } else if (attrs[a].kind == 'f') {
      at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
      at->has_f = true, at->f = attrs[a].f;
    } else {
      at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
      at->has_s = true, at->s.data = (uint8_t *)attrs[a].s, at->s.len = strlen(attrs[a].s);
    }
    m.attrs[a] = at;
  }
  onnx__node_proto__init(&m.node);
  m.node.op_type = (char *)op;
  m.node.n_input = (size_t)nin, m.node.input = m.node_in;
  m.node.n_output = 2, m.node.output = m.node_out;
  m.node.n_attribute = (size_t)nattrs, m.node.attribute = m.attrs;
  m.nodes[0] = &m.node;
  m.graph.n_node = 1, m.graph.node = m.nodes;
  m.graph.n_input = (size_t)ngraph, m.graph.input = m.ins;
  m.graph.n_output = 2, m.graph.output = m.outs;
  const char *path = path_of("one_node.onnx");
  size_t len = onnx__model_proto__get_packed_size(&m.model);
  uint8_t *bytes = malloc(len);
  onnx__model_proto__pack(&m.model, bytes);
  write_bytes(path, bytes, len);
  free(bytes);
  return path;
}

/* Floats as a tensor of dtype. */
static loom_tensor *floats_as(const float *x, loom_shape s, loom_dtype dtype) {
  loom_tensor *f = loom_from_data(x, s, LOOM_F32, LOOM_CPU), *t = loom_cast(f, dtype);
  loom_free(f);
  return t;
}

/* Runs p on inputs filled with a pattern (their shapes with n = size) and
 * returns its outputs. */
static void run_patterned(loom_program *p, int64_t size, loom_tensor **outs) {
  loom_tensor *ins[ONE_MAX_IN] = {0};
  int nin = loom_program_num_inputs(p);
  for (int i = 0; i < nin; i++) {
    loom_shape s = loom_program_input_shape(p, i);
    for (int d = 0; d < s.ndim; d++)
      if (loom_program_input_dim_symbol(p, i, d)) s.dim[d] = size;
    int64_t count = 1;
    for (int d = 0; d < s.ndim; d++) count *= s.dim[d];
    float *x = malloc((size_t)(count > 0 ? count : 1) * sizeof *x);
    for (int64_t j = 0; j < count; j++) x[j] = (float)((j * 7 + i) % 11 - 5) / 10;
    ins[i] = floats_as(x, s, loom_program_input_dtype(p, i));
    free(x);
  }
  CHECK_EQ_INT(loom_program_run(p, ins, outs), LOOM_OK);
  for (int i = 0; i < nin; i++) loom_free(ins[i]);
}

/* The same outputs from the symbolic program at n = size and from the model
 * loaded with n fixed to size. */
static void check_symbolic_matches_fixed(const char *what, const char *path, int64_t size) {
  loom_clear_error();
  loom_program *sym = loom_onnx_load(path, NULL);
  loom_onnx_dim fix = {"n", size};
  loom_program *fixed = loom_onnx_load(path, &(loom_onnx_opts){.dims = &fix, .ndims = 1});
  CHECK(sym != NULL && fixed != NULL);
  if (!sym || !fixed) {
    fprintf(stderr, "%s: %s\n", what, loom_last_error());
    loom_program_free(sym), loom_program_free(fixed);
    return;
  }
  CHECK_EQ_INT(loom_program_num_symbols(sym), 1);
  loom_tensor *a[2] = {0}, *b[2] = {0};
  run_patterned(sym, size, a);
  run_patterned(fixed, size, b);
  for (int o = 0; o < 2; o++) {
    loom_tensor *fa = loom_cast(a[o], LOOM_F32), *fb = loom_cast(b[o], LOOM_F32);
    int64_t count = loom_numel(fb);
    CHECK_EQ_INT(loom_numel(fa), count);
    float *x = malloc((size_t)(count + 1) * sizeof *x),
          *y = malloc((size_t)(count + 1) * sizeof *y);
    if (loom_numel(fa) == count && count > 0) {
      CHECK_EQ_INT(loom_copy_to_host(fa, x, (size_t)count * sizeof *x), LOOM_OK);
      CHECK_EQ_INT(loom_copy_to_host(fb, y, (size_t)count * sizeof *y), LOOM_OK);
      for (int64_t j = 0; j < count; j++) CHECK_NEAR(x[j], y[j], 1e-6);
    }
    free(x), free(y);
    loom_free(fa), loom_free(fb), loom_free(a[o]), loom_free(b[o]);
  }
  loom_program_free(sym), loom_program_free(fixed);
}

/* LinearAttention and CausalConvWithState (opset 27): values outside the
 * reference's, wrong ranks and shapes, and a symbolic sequence to unroll are
 * refused naming the value; a symbolic batch (and a symbolic conv length)
 * computes what the fixed one does; float16 activations with a float32 state
 * keep the state's dtype (values from onnx.reference). */
static void test_linear_attention_and_causal_conv(void) {
  /* B 2, T 3, 2 query heads on 1 KV head, d_k = d_v = 2 */
  const one_input q = ONE_IN("q", 3, 2, 3, 4), k = ONE_IN("k", 3, 2, 3, 2),
                  v = ONE_IN("v", 3, 2, 3, 2), past = ONE_IN("past", 4, 2, 1, 2, 2),
                  decay = ONE_IN("decay", 3, 2, 3, 2), beta = ONE_IN("beta", 3, 2, 3, 1),
                  none = {.name = ""};
  const one_attr heads[2] = {ONE_INT("q_num_heads", 2), ONE_INT("kv_num_heads", 1)};
  const one_input all[6] = {q, k, v, past, decay, beta};
  const struct {
    one_input ins[6];
    one_attr attrs[3];
    int nattrs;
    loom_status want;
    const char *words;
  } refused[] = {
      {{q, k, v, past, decay, beta},
       {heads[0], heads[1], ONE_STR("update_rule", "fast")},
       3,
       LOOM_ERR_VALUE,
       "update_rule 'fast'; one of 'gated_delta', 'linear', 'gated', 'delta'"},
      {{q, k, v, past, decay, beta},
       {heads[0], heads[1], ONE_STR("update_rule", "gated_delta_")},
       3,
       LOOM_ERR_VALUE,
       "update_rule 'gated_delta_'"},
      {{q, k, v, past, decay, beta},
       {heads[0]},
       1,
       LOOM_ERR_VALUE,
       "q_num_heads and kv_num_heads attributes are required"},
      {{q, k, v, past, decay, beta},
       {ONE_INT("q_num_heads", 3), ONE_INT("kv_num_heads", 2)},
       2,
       LOOM_ERR_VALUE,
       "q_num_heads 3 is not a positive multiple of kv_num_heads 2"},
      {{q, k, v, past, decay, beta},
       {heads[0], ONE_INT("kv_num_heads", 0)},
       2,
       LOOM_ERR_VALUE,
       "kv_num_heads 0"},
      {{q, k, v, past, decay, beta},
       {heads[0], heads[1], ONE_STR("update_rule", "linear")},
       3,
       LOOM_ERR_VALUE,
       "update_rule 'linear' does not take the decay input"},
      {{q, k, v, past, none, beta},
       {heads[0], heads[1]},
       2,
       LOOM_ERR_VALUE,
       "update_rule 'gated_delta' needs the decay input"},
      {{q, k, v, past, decay, none},
       {heads[0], heads[1]},
       2,
       LOOM_ERR_VALUE,
       "update_rule 'gated_delta' needs the beta input"},
      {{q, k, v, past, decay, beta},
       {heads[0], heads[1], ONE_STR("update_rule", "gated")},
       3,
       LOOM_ERR_VALUE,
       "update_rule 'gated' does not take the beta input"},
      {{ONE_IN("q", 4, 2, 3, 2, 2), k, v, past, decay, beta},
       {heads[0], heads[1]},
       2,
       LOOM_ERR_SHAPE,
       "query has rank 4; 3 expected"},
      {{q, k, v, ONE_IN("past", 3, 2, 1, 4), decay, beta},
       {heads[0], heads[1]},
       2,
       LOOM_ERR_SHAPE,
       "past_state has rank 3; 4 expected"},
      {{q, k, v, ONE_IN("past", 4, 2, 1, 2, 3), decay, beta},
       {heads[0], heads[1]},
       2,
       LOOM_ERR_SHAPE,
       "past_state is [2, 1, 2, 3]; [2, 1, 2, 2]"},
      {{q, k, v, past, ONE_IN("decay", 3, 2, 3, 3), beta},
       {heads[0], heads[1]},
       2,
       LOOM_ERR_SHAPE,
       "decay's last dim 3 is neither kv_num_heads (1) nor kv_num_heads * d_k (2)"},
      {{q, k, v, past, decay, ONE_IN("beta", 3, 2, 3, 2)},
       {heads[0], heads[1]},
       2,
       LOOM_ERR_SHAPE,
       "beta's last dim 2 is neither kv_num_heads (1) nor 1"},
      {{q, ONE_IN("k", 3, 2, 2, 2), v, past, decay, beta},
       {heads[0], heads[1]},
       2,
       LOOM_ERR_SHAPE,
       "key's batch and sequence [2, 2] differ from query's [2, 3]"},
      {{q, ONE_IN("k", 3, 2, 3, 4), v, past, decay, beta},
       {heads[0], heads[1]},
       2,
       LOOM_ERR_SHAPE,
       "query's head size 2 and key's 4"},
      {{q, k, ONE_IN_T("v", 7, 3, 2, 3, 2), past, decay, beta},
       {heads[0], heads[1]},
       2,
       LOOM_ERR_DTYPE,
       "value is i64; a floating-point tensor expected"},
      {{ONE_IN("q", 3, 2, -1, 4), ONE_IN("k", 3, 2, -1, 2), ONE_IN("v", 3, 2, -1, 2), past,
        ONE_IN("decay", 3, 2, -1, 2), ONE_IN("beta", 3, 2, -1, 1)},
       {heads[0], heads[1]},
       2,
       LOOM_ERR_SHAPE,
       "sequence length follows a symbolic dim"},
      {{ONE_IN("q", 3, 2, 5000, 4), ONE_IN("k", 3, 2, 5000, 2), ONE_IN("v", 3, 2, 5000, 2), past,
        ONE_IN("decay", 3, 2, 5000, 2), ONE_IN("beta", 3, 2, 5000, 1)},
       {heads[0], heads[1]},
       2,
       LOOM_ERR_VALUE,
       "a sequence of 5000 steps; loom unrolls up to 4096"},
  };
  for (size_t c = 0; c < sizeof refused / sizeof refused[0]; c++) {
    check_set_ctx("LinearAttention refusal %zu", c);
    expect_error(
        save_one_node("LinearAttention", refused[c].ins, 6, refused[c].attrs, refused[c].nattrs),
        refused[c].want, refused[c].words);
  }
  check_set_ctx("%s", "LinearAttention without value");
  expect_error(save_one_node("LinearAttention", all, 2, heads, 2), LOOM_ERR_VALUE,
               "input 2 (value) is required");
  check_set_ctx("%s", "LinearAttention, update_rule an int");
  const one_attr int_rule[3] = {heads[0], heads[1], ONE_INT("update_rule", 1)};
  expect_error(save_one_node("LinearAttention", all, 6, int_rule, 3), LOOM_ERR_VALUE,
               "attribute update_rule holds no string");
  /* an empty sequence: an empty output, the past state kept */
  {
    check_set_ctx("%s", "LinearAttention, T = 0");
    one_input ins[6];
    for (int i = 0; i < 6; i++) ins[i] = all[i];
    for (int i = 0; i < 6; i++)
      if (i != 3) ins[i].dim[1] = 0;
    loom_clear_error();
    loom_program *p = loom_onnx_load(save_one_node("LinearAttention", ins, 6, heads, 2), NULL);
    CHECK(p != NULL);
    if (p) {
      loom_tensor *out[2] = {0};
      run_patterned(p, 0, out);
      CHECK_EQ_INT(loom_numel(out[0]), 0);
      CHECK_EQ_INT(loom_shape_of(out[0]).dim[2], 4);
      float st[8];
      CHECK_EQ_INT(loom_copy_to_host(out[1], st, sizeof st), LOOM_OK);
      for (int j = 0; j < 8; j++) CHECK(st[j] == (float)((j * 7 + 3) % 11 - 5) / 10);
      loom_free(out[0]), loom_free(out[1]);
      loom_program_free(p);
    } else {
      fprintf(stderr, "LinearAttention T = 0: %s\n", loom_last_error());
    }
  }
  /* a symbolic batch, for each update rule and decay form */
  static const char *const rules[] = {"linear", "gated", "delta", "gated_delta"};
  for (int r = 0; r < 4; r++)
    for (int per_head = 0; per_head < 2; per_head++) {
      check_set_ctx("LinearAttention %s, decay per %s", rules[r], per_head ? "head" : "key dim");
      bool gating = r == 1 || r == 3, delta = r >= 2;
      one_input ins[6];
      for (int i = 0; i < 6; i++) ins[i] = all[i], ins[i].dim[0] = -1;
      if (per_head) ins[4].dim[2] = 1;
      if (!gating) ins[4] = none;
      if (!delta) ins[5] = none;
      const one_attr attrs[3] = {heads[0], heads[1], ONE_STR("update_rule", rules[r])};
      if (per_head && !gating) continue;
      check_symbolic_matches_fixed(rules[r], save_one_node("LinearAttention", ins, 6, attrs, 3), 5);
    }
  check_set_ctx("%s", "");
  /* float16 activations, a float32 state: the present state stays float32 */
  {
    static const float qv[12] = {-1, 0.75, -0.25, -1.25, 0.5, -0.5, 1.25, 0.25, -0.75, 1, 0, -1};
    static const float kv[6] = {-0.60009765625, 0.7998046875,  0,
                                -0.7998046875,  0.60009765625, -0.199951171875};
    static const float vv[6] = {-0.60009765625, 1.5,          0.300048828125,
                                -0.89990234375, 1.2001953125, 0};
    static const float dv[6] = {-0.10247802734375, -0.1624755859375, -0.1099853515625,
                                -0.1099853515625,  -0.1624755859375, -0.10247802734375};
    static const float bv[3] = {0.5, 0.25, 0.75}, pv[4] = {0, -0.4f, 0.3f, -0.1f};
    static const float want_y[12] = {-0.2059326171875, 0.78369140625,   0.0161590576171875,
                                     -0.26708984375,   0.1153564453125, -0.427490234375,
                                     0.171630859375,   -0.5146484375,   -0.53662109375,
                                     0.48974609375,    0.1837158203125, -0.286376953125};
    static const float want_s[4] = {0.6653329133987427f, -0.38359183073043823f,
                                    -0.2598191499710083f, 0.40507686138153076f};
    const one_input ins[6] = {ONE_IN_T("q", 10, 3, 1, 3, 4),     ONE_IN_T("k", 10, 3, 1, 3, 2),
                              ONE_IN_T("v", 10, 3, 1, 3, 2),     ONE_IN("past", 4, 1, 1, 2, 2),
                              ONE_IN_T("decay", 10, 3, 1, 3, 2), ONE_IN_T("beta", 10, 3, 1, 3, 1)};
    loom_clear_error();
    loom_program *p = loom_onnx_load(save_one_node("LinearAttention", ins, 6, heads, 2), NULL);
    CHECK(p != NULL);
    if (p) {
      CHECK_EQ_INT(loom_program_output_dtype(p, 0), LOOM_F16);
      CHECK_EQ_INT(loom_program_output_dtype(p, 1), LOOM_F32);
      const float *data[6] = {qv, kv, vv, pv, dv, bv};
      loom_tensor *in[6], *out[2] = {0};
      for (int i = 0; i < 6; i++) {
        loom_shape s = {ins[i].rank, {0}};
        for (int d = 0; d < s.ndim; d++) s.dim[d] = ins[i].dim[d];
        in[i] = floats_as(data[i], s, i == 3 ? LOOM_F32 : LOOM_F16);
      }
      CHECK_EQ_INT(loom_program_run(p, in, out), LOOM_OK);
      float y[12], st[4];
      loom_tensor *y32 = loom_cast(out[0], LOOM_F32);
      CHECK_EQ_INT(loom_copy_to_host(y32, y, sizeof y), LOOM_OK);
      CHECK_EQ_INT(loom_copy_to_host(out[1], st, sizeof st), LOOM_OK);
      for (int i = 0; i < 12; i++) CHECK_NEAR(y[i], want_y[i], 1e-3);
      for (int i = 0; i < 4; i++) CHECK_NEAR(st[i], want_s[i], 1e-5);
      for (int i = 0; i < 6; i++) loom_free(in[i]);
      loom_free(y32), loom_free(out[0]), loom_free(out[1]);
      loom_program_free(p);
    } else {
      fprintf(stderr, "LinearAttention f16: %s\n", loom_last_error());
    }
  }
  /* CausalConvWithState: [B 2, C 3, L 4], kernel 3 */
  const one_input x = ONE_IN("x", 3, 2, 3, 4), w = ONE_IN("w", 3, 3, 1, 3), b = ONE_IN("b", 1, 3),
                  state = ONE_IN("state", 3, 2, 3, 2);
  const struct {
    one_input ins[4];
    const char *activation;
    loom_status want;
    const char *words;
  } conv_refused[] = {
      {{x, w, b, state},
       "gelu",
       LOOM_ERR_VALUE,
       "activation 'gelu'; one of 'none', 'silu', 'swish'"},
      {{x, w, b, state}, "Silu", LOOM_ERR_VALUE, "activation 'Silu'"},
      {{ONE_IN("x", 2, 3, 4), w, b, state}, "none", LOOM_ERR_SHAPE, "input has rank 2; 3 expected"},
      {{x, ONE_IN("w", 2, 3, 3), b, state},
       "none",
       LOOM_ERR_SHAPE,
       "weight has rank 2; 3 expected"},
      {{x, ONE_IN("w", 3, 3, 2, 3), b, state},
       "none",
       LOOM_ERR_SHAPE,
       "weight is [3, 2, 3]; [3, 1, k] with k >= 1 expected"},
      {{x, ONE_IN("w", 3, 3, 1, 0), b, state},
       "none",
       LOOM_ERR_SHAPE,
       "weight is [3, 1, 0]; [3, 1, k] with k >= 1 expected"},
      {{x, ONE_IN("w", 3, 2, 1, 3), b, state}, "none", LOOM_ERR_SHAPE, "weight is [2, 1, 3]"},
      {{x, w, ONE_IN("b", 1, 2), state},
       "none",
       LOOM_ERR_SHAPE,
       "bias has 2 values for 3 channels"},
      {{x, w, ONE_IN("b", 2, 3, 1), state}, "none", LOOM_ERR_SHAPE, "bias has rank 2; 1 expected"},
      {{x, w, b, ONE_IN("state", 3, 2, 3, 3)},
       "none",
       LOOM_ERR_SHAPE,
       "past_state is [2, 3, 3]; [2, 3, 2] (batch, channels, kernel size - 1) expected"},
      {{x, w, b, ONE_IN_T("state", 10, 3, 2, 3, 2)},
       "none",
       LOOM_ERR_DTYPE,
       "past_state is f16 and input f32"},
  };
  for (size_t c = 0; c < sizeof conv_refused / sizeof conv_refused[0]; c++) {
    check_set_ctx("CausalConvWithState refusal %zu", c);
    const one_attr act = ONE_STR("activation", conv_refused[c].activation);
    expect_error(save_one_node("CausalConvWithState", conv_refused[c].ins, 4, &act, 1),
                 conv_refused[c].want, conv_refused[c].words);
  }
  check_set_ctx("%s", "CausalConvWithState without weight");
  expect_error(save_one_node("CausalConvWithState", &x, 1, NULL, 0), LOOM_ERR_VALUE,
               "input 1 (weight) is required");
  /* an empty input: an empty output, the past state kept */
  {
    check_set_ctx("%s", "CausalConvWithState, L = 0");
    const one_input ins[4] = {ONE_IN("x", 3, 2, 3, 0), w, b, state};
    loom_clear_error();
    loom_program *p = loom_onnx_load(save_one_node("CausalConvWithState", ins, 4, NULL, 0), NULL);
    CHECK(p != NULL);
    if (p) {
      loom_tensor *out[2] = {0};
      run_patterned(p, 0, out);
      CHECK_EQ_INT(loom_numel(out[0]), 0);
      float st[12];
      CHECK_EQ_INT(loom_copy_to_host(out[1], st, sizeof st), LOOM_OK);
      for (int j = 0; j < 12; j++) CHECK(st[j] == (float)((j * 7 + 3) % 11 - 5) / 10);
      loom_free(out[0]), loom_free(out[1]);
      loom_program_free(p);
    } else {
      fprintf(stderr, "CausalConvWithState L = 0: %s\n", loom_last_error());
    }
  }
  /* symbolic batch and length, with and without a past state and bias, kernels 1 and 3 */
  for (int sym_axis = 0; sym_axis < 3; sym_axis += 2)
    for (int with = 0; with < 4; with++)
      for (int kernel = 1; kernel <= 3; kernel += 2) {
        check_set_ctx("CausalConvWithState symbolic axis %d, inputs %d, kernel %d", sym_axis, with,
                      kernel);
        one_input ins[4] = {x, w, with & 1 ? b : none, with & 2 ? state : none};
        ins[0].dim[sym_axis] = -1;
        ins[1].dim[2] = kernel, ins[3].dim[2] = kernel - 1;
        if (sym_axis == 0) ins[3].dim[0] = -1;
        const one_attr act = ONE_STR("activation", with & 1 ? "silu" : "none");
        check_symbolic_matches_fixed("CausalConvWithState",
                                     save_one_node("CausalConvWithState", ins, 4, &act, 1), 5);
      }
  check_set_ctx("%s", "");
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

/* ------------------------------------------------------------ bits, pools, sampling */

/* A model of one node whose inputs are all the graph's inputs (a dim of -1
 * is the symbol "batch") and whose outputs are its outputs. */
enum { NODE_MAX_IO = 5 };
typedef struct node_model {
  Onnx__ModelProto model;
  Onnx__OperatorSetIdProto opset, *opsets[1];
  Onnx__GraphProto graph;
  Onnx__NodeProto node, *nodes[1];
  Onnx__ValueInfoProto in[NODE_MAX_IO], out[2], *ins[NODE_MAX_IO], *outs[2];
  Onnx__TypeProto type[NODE_MAX_IO];
  Onnx__TypeProto__Tensor tensor[NODE_MAX_IO];
  Onnx__TensorShapeProto shape[NODE_MAX_IO];
  Onnx__TensorShapeProto__Dimension dims[NODE_MAX_IO][LOOM_MAX_DIMS],
      *dim_list[NODE_MAX_IO][LOOM_MAX_DIMS];
  Onnx__AttributeProto attrs[8], *attr_list[8];
  char *in_names[NODE_MAX_IO], *out_names[2];
} node_model;

static void node_model_init(node_model *m, const char *op, int64_t opset, const char *out0,
                            const char *out1) {
  memset(m, 0, sizeof *m);
  onnx__model_proto__init(&m->model);
  onnx__operator_set_id_proto__init(&m->opset);
  onnx__graph_proto__init(&m->graph);
  onnx__node_proto__init(&m->node);
  m->opset.has_version = true, m->opset.version = opset, m->opset.domain = "";
  m->opsets[0] = &m->opset;
  m->model.n_opset_import = 1, m->model.opset_import = m->opsets;
  m->model.has_ir_version = true, m->model.ir_version = 8;
  m->model.graph = &m->graph;
  m->node.op_type = (char *)op, m->node.input = m->in_names, m->node.output = m->out_names;
  m->nodes[0] = &m->node;
  m->graph.n_node = 1, m->graph.node = m->nodes;
  m->graph.input = m->ins, m->graph.output = m->outs;
  const char *outs[2] = {out0, out1};
  for (int i = 0; i < 2 && outs[i]; i++) {
    onnx__value_info_proto__init(&m->out[i]);
    m->out[i].name = m->out_names[i] = (char *)outs[i];
    m->outs[i] = &m->out[i];
    m->node.n_output = m->graph.n_output = (size_t)i + 1;
  }
}

/* A graph input of ONNX elem_type, also the node's next input ("" skips an
 * optional input of the node). */
static void node_model_input(node_model *m, const char *name, int elem_type, const int64_t *dims,
                             int ndim) {
  m->in_names[m->node.n_input++] = (char *)name;
  if (!name[0]) return;
  int i = (int)m->graph.n_input++;
  for (int d = 0; d < ndim; d++) {
    Onnx__TensorShapeProto__Dimension *dim = &m->dims[i][d];
    onnx__tensor_shape_proto__dimension__init(dim);
    if (dims[d] < 0) {
      dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      dim->dim_param = "batch";
    } else {
      dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dim->dim_value = dims[d];
    }
    m->dim_list[i][d] = dim;
  }
  onnx__tensor_shape_proto__init(&m->shape[i]);
  m->shape[i].n_dim = (size_t)ndim, m->shape[i].dim = m->dim_list[i];
  onnx__type_proto__tensor__init(&m->tensor[i]);
  m->tensor[i].has_elem_type = true, m->tensor[i].elem_type = elem_type;
  m->tensor[i].shape = &m->shape[i];
  onnx__type_proto__init(&m->type[i]);
  m->type[i].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  m->type[i].tensor_type = &m->tensor[i];
  onnx__value_info_proto__init(&m->in[i]);
  m->in[i].name = (char *)name, m->in[i].type = &m->type[i];
  m->ins[i] = &m->in[i];
}

static Onnx__AttributeProto *add_attr(node_model *m, const char *name) {
  Onnx__AttributeProto *a = &m->attrs[m->node.n_attribute];
  onnx__attribute_proto__init(a);
  a->name = (char *)name, a->has_type = true;
  m->attr_list[m->node.n_attribute++] = a;
  m->node.attribute = m->attr_list;
  return a;
}
static void attr_string(node_model *m, const char *name, const char *value) {
  Onnx__AttributeProto *a = add_attr(m, name);
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
  a->has_s = true, a->s.data = (uint8_t *)value, a->s.len = strlen(value);
}

static void attr_int(node_model *m, const char *name, int64_t value) {
  Onnx__AttributeProto *a = add_attr(m, name);
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  a->has_i = true, a->i = value;
}
static void attr_float(node_model *m, const char *name, float value) {
  Onnx__AttributeProto *a = add_attr(m, name);
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
  a->has_f = true, a->f = value;
}
static void attr_ints(node_model *m, const char *name, const int64_t *values, int count) {
  Onnx__AttributeProto *a = add_attr(m, name);
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  a->n_ints = (size_t)count, a->ints = (int64_t *)values;
}

/* Saves m and loads it; NULL when the load fails (the reason printed after
 * what, unless what is NULL: a failure expected). */
static loom_program *node_model_load(node_model *m, const char *what, const loom_onnx_opts *opts) {
  size_t len = onnx__model_proto__get_packed_size(&m->model);
  uint8_t *bytes = malloc(len);
  onnx__model_proto__pack(&m->model, bytes);
  write_bytes(path_of("node.onnx"), bytes, len);
  free(bytes);
  loom_clear_error();
  loom_program *p = loom_onnx_load(path_of("node.onnx"), opts);
  if (!p && what) fprintf(stderr, "%s: %s\n", what, loom_last_error());
  return p;
}

/* The load of m fails with want, its message holding words. */
static void node_model_refused(node_model *m, loom_status want, const char *words) {
  size_t len = onnx__model_proto__get_packed_size(&m->model);
  uint8_t *bytes = malloc(len);
  onnx__model_proto__pack(&m->model, bytes);
  write_bytes(path_of("refused.onnx"), bytes, len);
  free(bytes);
  expect_error(path_of("refused.onnx"), want, words);
}

static uint64_t next_random(uint64_t *state) {
  *state ^= *state << 13, *state ^= *state >> 7, *state ^= *state << 17;
  return *state;
}

/* What C's operators give for one element of BitShift (op 4 left, 5 right)
 * and the bitwise ops (0 and, 1 or, 2 xor, 3 not) on bits-bit values held in
 * the low bits of a and b; signed dtypes shift as numpy (ONNX's reference). */
static uint64_t bits_reference(int op, int bits, bool is_signed, uint64_t a, uint64_t b) {
  uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1, e;
  int64_t sa = (int64_t)(a << (64 - bits)) >> (64 - bits),
          sb = (int64_t)(b << (64 - bits)) >> (64 - bits);
  bool out_of_range = (is_signed && sb < 0) || b >= (uint64_t)bits;
  switch (op) {
  case 0: e = a & b; break;
  case 1: e = a | b; break;
  case 2: e = a ^ b; break;
  case 3: e = ~a; break;
  case 4: e = out_of_range ? 0 : a << b; break;
  default:
    if (!is_signed)
      e = out_of_range ? 0 : a >> b;
    else
      e = (uint64_t)(out_of_range ? (sa < 0 ? -1 : 0) : sa >> b);
  }
  return e & mask;
}

/* BitShift and the bitwise ops (composed of wrapping arithmetic: loom has no
 * bitwise op) on every integer dtype, exactly as C's operators: the sign
 * bit, values past 2^53, shifts out of range; x [batch (symbolic), 16]
 * against w [16] broadcast, so the composition also passes the symbolic
 * inference. */
static void test_bits_exact(void) {
  enum { ROWS = 5, COLS = 16, N = ROWS * COLS };
  static const struct {
    int onnx;
    loom_dtype dt;
    bool is_signed;
  } dtypes[] = {{3, LOOM_I8, true},    {5, LOOM_I16, true},  {6, LOOM_I32, true},
                {7, LOOM_I64, true},   {2, LOOM_U8, false},  {4, LOOM_U16, false},
                {12, LOOM_U32, false}, {13, LOOM_U64, false}};
  const char *ops[] = {"BitwiseAnd", "BitwiseOr", "BitwiseXor",
                       "BitwiseNot", "BitShift",  "BitShift"};
  uint64_t state = 88172645463325252ull;
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
    int size = (int)loom_dtype_size(dtypes[d].dt), bits = 8 * size;
    uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1, top = 1ull << (bits - 1);
    uint64_t edges[] = {0, 1, mask, top, top - 1, top + 1, (1ull << 53) + 1, 3};
    static uint64_t x[N], w[COLS], shift[COLS];
    for (int i = 0; i < N; i++) x[i] = (i < 8 ? edges[i] : next_random(&state)) & mask;
    for (int i = 0; i < COLS; i++) {
      w[i] = (i < 8 ? edges[7 - i] : next_random(&state)) & mask;
      /* 0 .. bits + 2, then far out and (signed) a negative shift */
      shift[i] = i < 12 ? (uint64_t)(i * (bits + 2) / 11) : next_random(&state) & mask;
    }
    if (dtypes[d].is_signed) shift[13] = mask; /* -1 */
    for (int op = 0; op < 6; op++) {
      const uint64_t *second = op >= 4 ? shift : w;
      static uint8_t xbytes[N * 8], wbytes[COLS * 8], got[N * 8];
      for (int i = 0; i < N; i++) memcpy(xbytes + i * size, &x[i], (size_t)size);
      for (int i = 0; i < COLS; i++) memcpy(wbytes + i * size, &second[i], (size_t)size);
      node_model m;
      node_model_init(&m, ops[op], 18, "y", NULL);
      const int64_t xdims[2] = {-1, COLS}, wdims[1] = {COLS};
      node_model_input(&m, "x", dtypes[d].onnx, xdims, 2);
      if (op != 3) node_model_input(&m, "w", dtypes[d].onnx, wdims, 1);
      if (op >= 4) attr_string(&m, "direction", op == 4 ? "LEFT" : "RIGHT");
      loom_program *p = node_model_load(&m, ops[op], NULL);
      CHECK(p != NULL);
      if (!p) continue;
      loom_tensor *in[2] = {loom_from_data(xbytes, LOOM_SHAPE(ROWS, COLS), dtypes[d].dt, LOOM_CPU),
                            loom_from_data(wbytes, LOOM_SHAPE(COLS), dtypes[d].dt, LOOM_CPU)},
                  *out = NULL;
      CHECK_EQ_INT(loom_program_run(p, in, &out), LOOM_OK);
      CHECK_EQ_INT(loom_copy_to_host(out, got, (size_t)(N * size)), LOOM_OK);
      int wrong = 0;
      for (int i = 0; i < N; i++) {
        uint64_t want = bits_reference(op, bits, dtypes[d].is_signed, x[i], second[i % COLS]),
                 have = 0;
        memcpy(&have, got + i * size, (size_t)size);
        if (have != want && wrong++ < 3)
          fprintf(stderr, "%s%s %s: %llx, %llx gives %llx, want %llx\n", ops[op],
                  op == 4   ? " LEFT"
                  : op == 5 ? " RIGHT"
                            : "",
                  loom_dtype_name(dtypes[d].dt), (unsigned long long)x[i],
                  (unsigned long long)second[i % COLS], (unsigned long long)have,
                  (unsigned long long)want);
      }
      CHECK(wrong == 0);
      loom_free(in[0]), loom_free(in[1]), loom_free(out);
      loom_program_free(p);
    }
  }
}

/* MaxPool's Indices against a direct reading of ONNX's definition (its
 * reference's loops): the first greatest element of each window inside the
 * input, flat over the whole tensor, row- or column-major within a plane;
 * values with ties, 1-D to 3-D, pads, strides, dilations, ceil_mode, the
 * batch symbolic. */
static void test_max_pool_indices(void) {
  enum { BATCH = 2, CHANNELS = 2 };
  static const struct {
    int dims;
    int64_t in[3], kernel[3], strides[3], dilations[3], pads[6];
    int ceil_mode, storage_order;
  } cases[] = {
      {2, {5, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 0, 0},
      {2, {5, 6}, {2, 3}, {2, 1}, {2, 1}, {0, 1, 1, 0}, 1, 1},
      {2, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 0, 1},
      {1, {7}, {3}, {2}, {1}, {1, 1}, 1, 0},
      {3, {4, 5, 3}, {2, 2, 2}, {1, 2, 1}, {1, 2, 1}, {1, 0, 0, 0, 1, 1}, 0, 1},
      {3, {3, 4, 5}, {2, 1, 3}, {2, 1, 2}, {1, 1, 1}, {0, 0, 1, 1, 0, 1}, 1, 0},
  };
  uint64_t state = 2463534242ull;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int dims = cases[c].dims;
    int64_t plane = 1, out[3], out_plane = 1;
    for (int d = 0; d < dims; d++) {
      int64_t span = (cases[c].kernel[d] - 1) * cases[c].dilations[d] + 1;
      int64_t room = cases[c].in[d] + cases[c].pads[d] + cases[c].pads[d + dims] - span;
      int64_t stride = cases[c].strides[d];
      out[d] = (cases[c].ceil_mode ? (room + stride - 1) / stride : room / stride) + 1;
      if (cases[c].ceil_mode && (out[d] - 1) * stride >= cases[c].in[d] + cases[c].pads[d])
        out[d]--;
      plane *= cases[c].in[d], out_plane *= out[d];
    }
    int64_t planes = BATCH * CHANNELS;
    static float x[BATCH * CHANNELS * 60], y[BATCH * CHANNELS * 60];
    static int64_t idx[BATCH * CHANNELS * 60];
    for (int64_t i = 0; i < planes * plane; i++) x[i] = (float)(next_random(&state) % 6);
    node_model m;
    node_model_init(&m, "MaxPool", 12, "y", "indices");
    int64_t xdims[5] = {-1, CHANNELS};
    for (int d = 0; d < dims; d++) xdims[d + 2] = cases[c].in[d];
    node_model_input(&m, "x", 1, xdims, dims + 2);
    attr_ints(&m, "kernel_shape", cases[c].kernel, dims);
    attr_ints(&m, "strides", cases[c].strides, dims);
    attr_ints(&m, "dilations", cases[c].dilations, dims);
    attr_ints(&m, "pads", cases[c].pads, 2 * dims);
    attr_int(&m, "ceil_mode", cases[c].ceil_mode);
    attr_int(&m, "storage_order", cases[c].storage_order);
    loom_program *p = node_model_load(&m, "MaxPool", NULL);
    CHECK(p != NULL);
    if (!p) continue;
    loom_shape xs = {.ndim = dims + 2, .dim = {BATCH, CHANNELS}};
    for (int d = 0; d < dims; d++) xs.dim[d + 2] = cases[c].in[d];
    loom_tensor *in = loom_from_data(x, xs, LOOM_F32, LOOM_CPU), *outs[2] = {NULL, NULL};
    CHECK_EQ_INT(loom_program_run(p, &in, outs), LOOM_OK);
    CHECK_EQ_INT(loom_copy_to_host(outs[0], y, (size_t)(planes * out_plane) * sizeof *y), LOOM_OK);
    CHECK_EQ_INT(loom_copy_to_host(outs[1], idx, (size_t)(planes * out_plane) * sizeof *idx),
                 LOOM_OK);
    int wrong = 0;
    for (int64_t pl = 0; pl < planes; pl++)
      for (int64_t o = 0; o < out_plane; o++) {
        int64_t at[3] = {0}, rest = o, k[3] = {0}, windows = 1;
        for (int d = dims - 1; d >= 0; d--) at[d] = rest % out[d], rest /= out[d];
        for (int d = 0; d < dims; d++) windows *= cases[c].kernel[d];
        float best = 0;
        int64_t best_at = -1;
        for (int64_t w = 0; w < windows; w++) {
          int64_t wrest = w, flat_row = 0, flat_col = 0, scale = 1;
          bool inside = true;
          for (int d = dims - 1; d >= 0; d--)
            k[d] = wrest % cases[c].kernel[d], wrest /= cases[c].kernel[d];
          for (int d = 0; d < dims; d++) {
            int64_t pos =
                at[d] * cases[c].strides[d] - cases[c].pads[d] + k[d] * cases[c].dilations[d];
            inside = inside && pos >= 0 && pos < cases[c].in[d];
            flat_row = flat_row * cases[c].in[d] + pos, flat_col += pos * scale;
            scale *= cases[c].in[d];
          }
          if (!inside) continue;
          float v = x[pl * plane + flat_row];
          if (best_at < 0 || v > best)
            best = v, best_at = pl * plane + (cases[c].storage_order ? flat_col : flat_row);
        }
        int64_t i = pl * out_plane + o;
        if ((idx[i] != best_at || y[i] != best) && wrong++ < 3)
          fprintf(stderr, "MaxPool case %zu: output %lld is %g at %lld, want %g at %lld\n", c,
                  (long long)i, y[i], (long long)idx[i], best, (long long)best_at);
      }
    CHECK(wrong == 0);
    loom_free(in), loom_free(outs[0]), loom_free(outs[1]);
    loom_program_free(p);
  }
}

/* The sampling ops' inputs: exact small values (x / 8, offsets x / k). */
static float sample_value(int64_t i) { return (float)((double)((i * 37) % 23 - 11) / 8.0); }
static float offset_value(int64_t i, double k) { return (float)((double)((i * 13) % 17 - 8) / k); }

static int count_far(const float *got, const float *want, int64_t count, const char *what) {
  int far = 0;
  for (int64_t i = 0; i < count; i++)
    if (!(fabsf(got[i] - want[i]) <= 1e-5f + 1e-4f * fabsf(want[i])) && far++ < 3)
      fprintf(stderr, "%s: y[%lld] = %.9g, want %.9g\n", what, (long long)i, got[i], want[i]);
  return far;
}

/* RoiAlign against ONNX 1.22's reference (onnx.reference's RoiAlign):
 * avg and max, both coordinate modes (opset 10's default is
 * output_half_pixel), spatial scales, sampling_ratio 0 (each roi's grid from
 * its size: the rois given at import) and fixed, rois partly outside X and
 * reversed, batch indices picking the images, X's batch symbolic. */
static void test_roi_align(void) {
  enum { N = 2, C = 2, H = 6, W = 7, R = 4 };
  static const float rois[R * 4] = {0.5f, 1.0f, 5.5f, 4.0f, -2.0f, -1.5f, 3.0f,  7.5f,
                                    4.0f, 3.0f, 2.0f, 1.0f, 1.0f,  0.25f, 6.75f, 5.5f};
  static const int64_t batch_indices[R] = {1, 0, 1, 0};
  static const float want_avg_scaled[] = {
      -0.658203125, 0.001953125,    -0.77734375,  0.15234375,   -0.40234375,  0.52734375,
      0.270507812,  -0.080078125,   0.420898438,  -0.356445312, 0.481445312,  -0.295898438,
      -1.234375,    0.02734375,     -0.25,        0.0234375,    0.3359375,    -0.176757812,
      0.390625,     -0.374755859,   -0.0625,      0.076171875,  -0.375,       0.516113281,
      0.59374994,   0.0312499553,   0.84375,      0.28125,      0.374999791,  0.291666687,
      -0.416666687, -0.499999911,   -0.40625,     -0.96875,     -0.156249866, -0.718749881,
      0.348632812,  -0.23815918,    0.19909668,   -0.387695312, -0.440368652, -0.0543212891,
      -0.335632324, -0.00994873047, -0.131408691, 0.204101562,  0.411132812,  0.284790039};
  static const float want_max_fixed[] = {
      0.32812494,  0.796875,    0.625000119, 0.677083254, 0.796875,    0.744791746, 0.744791627,
      0.619791806, 0.31250006,  0.625,       0.442708313, 0.781250119, 0,           0.15624997,
      0.43750006,  0,           0.65625,     0.833333433, 0,           0.260416627, 0.510416746,
      0,           0.84375,     0.916666746, 0.236111045, 0.812500119, 1.06250024,  0.432870328,
      0.331018448, 0.354166806, 0.275462866, 0.21064806,  0.388889074, 0.826388836, 0.631944299,
      0.393518567, 0.864257753, 1.27115893,  1.09049451,  0.576171875, 0.569335818, 0.719726384,
      0.641818523, 0.86263001,  0.747070432, 0.915473104, 0.701063395, 0.498046994};
  static const float want_avg_half_pixel[] = {-0.058265686,
                                              -0.190536499,
                                              -0.125312805,
                                              0.23374939,
                                              -0.0251846313,
                                              -0.0190048218,
                                              0.153610229,
                                              0.00659942627,
                                              -0.113606773,
                                              -0.0920079574,
                                              -0.0795898438,
                                              0.0283126831,
                                              0.00406901026,
                                              0.0254618321,
                                              0.08984375,
                                              0.00695037842,
                                              0,
                                              0,
                                              0,
                                              0,
                                              0,
                                              0,
                                              0,
                                              0,
                                              0.0151017904,
                                              0.0733140707,
                                              0.106588483,
                                              0.309743166,
                                              -0.0134010315,
                                              -0.0527297258,
                                              -0.158579469,
                                              0.0842510462};
  static const float want_opset_10[] = {
      0.421875, 0.630208552, 0.515625, 0.46875,  0.875,       1.14583325, 1.125,      1.26041663,
      0.171875, 0.515625,    0.46875,  0.328125, 0.651041746, 1.375,      0.49235028, 0.859375};
  static const struct {
    int64_t opset;
    const char *ctm, *mode;
    int64_t ph, pw, ratio;
    float scale;
    const float *want;
  } cases[] = {
      {22, "output_half_pixel", "avg", 3, 2, 0, 0.5f, want_avg_scaled},
      {22, "half_pixel", "max", 2, 3, 3, 1.0f, want_max_fixed},
      {22, "half_pixel", "avg", 2, 2, 0, 1.25f, want_avg_half_pixel},
      {10, NULL, "max", 1, 2, 0, 1.0f, want_opset_10},
  };
  static float x[N * C * H * W], y[R * C * 3 * 3];
  for (int i = 0; i < N * C * H * W; i++) x[i] = sample_value(i);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    node_model m;
    node_model_init(&m, "RoiAlign", cases[c].opset, "y", NULL);
    const int64_t xdims[4] = {-1, C, H, W}, rdims[2] = {R, 4}, bdims[1] = {R};
    node_model_input(&m, "x", 1, xdims, 4);
    node_model_input(&m, "rois", 1, rdims, 2);
    node_model_input(&m, "batch_indices", 7, bdims, 1);
    if (cases[c].ctm) attr_string(&m, "coordinate_transformation_mode", cases[c].ctm);
    attr_string(&m, "mode", cases[c].mode);
    attr_int(&m, "output_height", cases[c].ph);
    attr_int(&m, "output_width", cases[c].pw);
    attr_int(&m, "sampling_ratio", cases[c].ratio);
    attr_float(&m, "spatial_scale", cases[c].scale);
    /* an adaptive grid needs the rois at import */
    loom_tensor *r = loom_from_data(rois, LOOM_SHAPE(R, 4), LOOM_F32, LOOM_CPU);
    loom_onnx_input given = {"rois", r};
    loom_onnx_opts opts = {.inputs = &given, .ninputs = 1};
    loom_program *p = node_model_load(&m, "RoiAlign", cases[c].ratio ? NULL : &opts);
    CHECK(p != NULL);
    if (!p) {
      loom_free(r);
      continue;
    }
    loom_tensor *xt = loom_from_data(x, LOOM_SHAPE(N, C, H, W), LOOM_F32, LOOM_CPU),
                *bt = loom_from_data(batch_indices, LOOM_SHAPE(R), LOOM_I64, LOOM_CPU);
    loom_tensor *ins[3] = {xt, r, bt};
    if (!cases[c].ratio) ins[1] = bt; /* the rois are no input of the program */
    loom_tensor *out = NULL;
    int64_t count = R * C * cases[c].ph * cases[c].pw;
    CHECK_EQ_INT(loom_program_run(p, ins, &out), LOOM_OK);
    CHECK_EQ_INT(loom_copy_to_host(out, y, (size_t)count * sizeof *y), LOOM_OK);
    CHECK(count_far(y, cases[c].want, count, "RoiAlign") == 0);
    loom_free(xt), loom_free(r), loom_free(bt);
    loom_free(out);
    loom_program_free(p);
  }
}

/* DeformConv against ONNX 1.22's reference (2-D) and, for 1-D and 3-D (which
 * that reference does not take), a direct N-d reading of it that agrees with
 * it on 2-D: groups, offset groups, strides, dilations, pads, mask and bias,
 * taps moved outside X. */
static void test_deform_conv(void) {
  static const float want_2d_groups[] = {
      -0.387382814, -0.490039047, -0.356679725, -0.295117166,  -0.17921875,  -0.77519526,
      -0.746855481, -0.526718727, -0.318359333, -0.0644921791, -0.167773424, 0.234062513,
      0.131367154,  0.214433599,  -0.304101606, -0.181601562,  0.280429687,  0.0827929641,
      0.399121114,  0.777187506,  0.74570312,   -0.051523448,  0.516835979,  0.870976583,
      0.869726551,  0.303125024,  0.828964837,  1.20507811,    1.12812501,   0.886718747,
      1.1395508,    0.788476564,  0.834335949,  0.523437466,   1.02439451,   0.771093782};
  static const float want_2d_batch[] = {-0.896484375,
                                        -0.583984375,
                                        -0.32421875,
                                        0.078125,
                                        -0.5859375,
                                        -0.5078125,
                                        -0.1875,
                                        -0.5,
                                        -0.47265625,
                                        0.07421875,
                                        -0.017578125,
                                        -0.251953125,
                                        0.25,
                                        -0.2265625,
                                        -0.09375,
                                        -0.078125,
                                        0,
                                        0.009765625,
                                        0.55078125,
                                        0.458984375,
                                        0.224609375,
                                        0.421875,
                                        0.1328125,
                                        0.5,
                                        0.75,
                                        0.5,
                                        0.4921875,
                                        -0.4296875,
                                        -1.6171875,
                                        0.125,
                                        -0.712890625,
                                        -0.01953125,
                                        -0.841796875,
                                        -0.455078125,
                                        -0.63671875,
                                        -1.4609375,
                                        -0.1875,
                                        1.015625,
                                        -0.8359375,
                                        -0.125,
                                        0.486328125,
                                        -0.091796875,
                                        0.044921875,
                                        0.166015625,
                                        -0.84375,
                                        0.59375,
                                        1.4921875,
                                        -0.359375,
                                        0.462890625,
                                        0.9921875,
                                        0.34375,
                                        0.544921875,
                                        0.654296875,
                                        -0.2265625};
  static const float want_1d[] = {-0.305664062, -0.192749023, -0.121459961, 0.428710938,
                                  0.339477539,  -0.431762695, -0.101196289, 0.0515136719,
                                  -0.218505859, 0.180664062,  0.252685547,  -0.220825195};
  static const float want_3d[] = {-0.511935766,   -0.5, -0.448640043,  -0.769368498,
                                  -0.493127893,   -0.5, -0.309082024,  -0.353678381,
                                  -0.424678097,   -0.5, -0.57246456,   -0.446614583,
                                  0.00434027845,  0,    -0.0394965485, 0.0107421735,
                                  0.000289351563, 0,    0.3106192,     -0.0519386205,
                                  0.000687211752, 0,    0.104492186,   0.202148433};
  static const struct {
    int dims;
    int64_t x[5], w[5], strides[3], dilations[3], pads[6], group, offset_group;
    bool mask, bias;
    double offset_scale;
    const float *want;
  } cases[] = {
      {2,
       {1, 4, 5, 6},
       {4, 2, 2, 3},
       {2, 1},
       {1, 2},
       {1, 0, 0, 1},
       2,
       2,
       true,
       true,
       5.0,
       want_2d_groups},
      {2,
       {2, 2, 4, 4},
       {3, 2, 2, 2},
       {1, 1},
       {1, 1},
       {0, 0, 0, 0},
       1,
       1,
       false,
       true,
       2.0,
       want_2d_batch},
      {1, {2, 2, 7}, {2, 2, 3}, {2}, {2}, {1, 2}, 1, 2, true, false, 4.0, want_1d},
      {3,
       {1, 2, 3, 4, 3},
       {2, 1, 2, 2, 2},
       {1, 2, 1},
       {1, 1, 2},
       {0, 1, 1, 1, 0, 0},
       2,
       1,
       true,
       true,
       3.0,
       want_3d},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int dims = cases[c].dims, rank = dims + 2;
    int64_t outs[3], taps = 1, nx = 1, nw = 1, no = 1;
    loom_shape xs = {.ndim = rank}, ws = {.ndim = rank}, os = {.ndim = rank}, ms, ys;
    for (int d = 0; d < rank; d++) {
      xs.dim[d] = cases[c].x[d], ws.dim[d] = cases[c].w[d];
      nx *= xs.dim[d], nw *= ws.dim[d];
    }
    for (int d = 0; d < dims; d++) {
      int64_t span = (ws.dim[d + 2] - 1) * cases[c].dilations[d] + 1;
      outs[d] = (xs.dim[d + 2] + cases[c].pads[d] + cases[c].pads[d + dims] - span) /
                    cases[c].strides[d] +
                1;
      taps *= ws.dim[d + 2], no *= outs[d];
      os.dim[d + 2] = outs[d];
    }
    os.dim[0] = xs.dim[0], os.dim[1] = cases[c].offset_group * taps * dims;
    ms = os, ms.dim[1] = cases[c].offset_group * taps;
    ys = os, ys.dim[1] = ws.dim[0];
    int64_t noff = os.dim[0] * os.dim[1] * no, nmask = ms.dim[0] * ms.dim[1] * no,
            ny = ys.dim[0] * ys.dim[1] * no;
    static float x[256], w[256], off[1024], mask[512], bias[8], y[64];
    for (int64_t i = 0; i < nx; i++) x[i] = sample_value(i);
    for (int64_t i = 0; i < nw; i++) w[i] = sample_value(i + 5) * 0.5f;
    for (int64_t i = 0; i < noff; i++) off[i] = offset_value(i, cases[c].offset_scale);
    for (int64_t i = 0; i < nmask; i++) mask[i] = sample_value(i) / 2 + 0.25f;
    for (int64_t i = 0; i < ws.dim[0]; i++) bias[i] = 0.5f * (float)(i + 1) - 1;
    node_model m;
    node_model_init(&m, "DeformConv", 22, "y", NULL);
    int64_t bdims[1] = {ws.dim[0]};
    node_model_input(&m, "x", 1, xs.dim, rank);
    node_model_input(&m, "w", 1, ws.dim, rank);
    node_model_input(&m, "offset", 1, os.dim, rank);
    node_model_input(&m, cases[c].bias ? "b" : "", 1, bdims, 1);
    if (cases[c].mask) node_model_input(&m, "mask", 1, ms.dim, rank);
    attr_ints(&m, "strides", cases[c].strides, dims);
    attr_ints(&m, "dilations", cases[c].dilations, dims);
    attr_ints(&m, "pads", cases[c].pads, 2 * dims);
    attr_int(&m, "group", cases[c].group);
    attr_int(&m, "offset_group", cases[c].offset_group);
    loom_program *p = node_model_load(&m, "DeformConv", NULL);
    CHECK(p != NULL);
    if (!p) continue;
    loom_tensor *ins[5];
    int nin = 0;
    ins[nin++] = loom_from_data(x, xs, LOOM_F32, LOOM_CPU);
    ins[nin++] = loom_from_data(w, ws, LOOM_F32, LOOM_CPU);
    ins[nin++] = loom_from_data(off, os, LOOM_F32, LOOM_CPU);
    if (cases[c].bias) ins[nin++] = loom_from_data(bias, LOOM_SHAPE(ws.dim[0]), LOOM_F32, LOOM_CPU);
    if (cases[c].mask) ins[nin++] = loom_from_data(mask, ms, LOOM_F32, LOOM_CPU);
    loom_tensor *out = NULL;
    CHECK_EQ_INT(loom_program_run(p, ins, &out), LOOM_OK);
    CHECK_EQ_INT(loom_copy_to_host(out, y, (size_t)ny * sizeof *y), LOOM_OK);
    CHECK(count_far(y, cases[c].want, ny, "DeformConv") == 0);
    for (int i = 0; i < nin; i++) loom_free(ins[i]);
    loom_free(out);
    loom_program_free(p);
  }
}

/* Refusals of BitShift, the bitwise ops, MaxPool's indices, RoiAlign and
 * DeformConv: each names the node and the value. */
static void test_bits_pools_sampling_refusals(void) {
  static const struct {
    const char *op, *direction;
    int x_type, w_type;
    loom_status want;
    const char *words;
  } bit_cases[] = {
      {"BitwiseAnd", NULL, 1, 1, LOOM_ERR_DTYPE, "BitwiseAnd) (opset 18): an input of dtype f32"},
      {"BitwiseNot", NULL, 1, 1, LOOM_ERR_DTYPE,
       "an input of dtype f32; ONNX defines it on integers"},
      {"BitwiseXor", NULL, 6, 7, LOOM_ERR_DTYPE, "inputs of two dtypes, i32 and i64"},
      {"BitShift", "LEFT", 2, 4, LOOM_ERR_DTYPE, "inputs of two dtypes, u8 and u16"},
      {"BitShift", "UP", 2, 2, LOOM_ERR_VALUE, "direction 'UP'; LEFT or RIGHT expected"},
  };
  for (size_t c = 0; c < sizeof bit_cases / sizeof bit_cases[0]; c++) {
    node_model m;
    node_model_init(&m, bit_cases[c].op, 18, "y", NULL);
    const int64_t dims[2] = {2, 3};
    node_model_input(&m, "x", bit_cases[c].x_type, dims, 2);
    if (strcmp(bit_cases[c].op, "BitwiseNot"))
      node_model_input(&m, "w", bit_cases[c].w_type, dims, 2);
    if (bit_cases[c].direction) attr_string(&m, "direction", bit_cases[c].direction);
    node_model_refused(&m, bit_cases[c].want, bit_cases[c].words);
  }
  node_model m;
  node_model_init(&m, "MaxPool", 12, "y", "indices");
  const int64_t xdims[4] = {1, 1, 4, 4}, kernel[2] = {2, 2};
  node_model_input(&m, "x", 1, xdims, 4);
  attr_ints(&m, "kernel_shape", kernel, 2);
  attr_int(&m, "storage_order", 2);
  node_model_refused(&m, LOOM_ERR_VALUE, "MaxPool) (opset 12): storage_order 2; 0 or 1 expected");

  static const struct {
    const char *mode;
    int64_t roi_cols, ratio;
    loom_status want;
    const char *words;
  } roi_cases[] = {
      {"sum", 4, 2, LOOM_ERR_VALUE, "RoiAlign) (opset 16): mode 'sum'; avg or max expected"},
      {"avg", 5, 2, LOOM_ERR_SHAPE, "[N, C, H, W], [R, 4] and [R] expected"},
      {"avg", 4, 0, LOOM_ERR_VALUE,
       "sampling_ratio 0 sizes each roi's grid of samples from the roi: input 1 ('rois')"},
  };
  const int64_t roi_x[4] = {1, 1, 4, 4}, roi_batch[1] = {3};
  for (size_t c = 0; c < sizeof roi_cases / sizeof roi_cases[0]; c++) {
    node_model_init(&m, "RoiAlign", 16, "y", NULL);
    const int64_t rdims[2] = {3, roi_cases[c].roi_cols};
    node_model_input(&m, "x", 1, roi_x, 4);
    node_model_input(&m, "rois", 1, rdims, 2);
    node_model_input(&m, "batch_indices", 7, roi_batch, 1);
    attr_string(&m, "mode", roi_cases[c].mode);
    attr_int(&m, "sampling_ratio", roi_cases[c].ratio);
    node_model_refused(&m, roi_cases[c].want, roi_cases[c].words);
  }
  /* a roi whose adaptive grid loom would build sample by sample */
  static const float huge_roi[4] = {0, 0, 1e6f, 1};
  loom_tensor *huge = loom_from_data(huge_roi, LOOM_SHAPE(1, 4), LOOM_F32, LOOM_CPU);
  loom_onnx_input given = {"rois", huge};
  node_model_init(&m, "RoiAlign", 16, "y", NULL);
  const int64_t one_roi[2] = {1, 4}, one_batch[1] = {1};
  node_model_input(&m, "x", 1, roi_x, 4);
  node_model_input(&m, "rois", 1, one_roi, 2);
  node_model_input(&m, "batch_indices", 7, one_batch, 1);
  loom_clear_error();
  CHECK(node_model_load(&m, NULL, &(loom_onnx_opts){.inputs = &given, .ninputs = 1}) == NULL);
  CHECK_EQ_INT(loom_last_status(), LOOM_ERR_VALUE);
  CHECK(strstr(loom_last_error(), "roi 0 (0, 0, 1e+06, 1) takes a grid of 1e+06 samples per bin "
                                  "along its width") != NULL);
  loom_free(huge);

  static const struct {
    int64_t x[4], w[4], offset[4], group;
    int rank;
    const char *words;
  } deform_cases[] = {
      {{1, 2, 4, 4},
       {2, 2, 2, 2},
       {1, 7, 3, 3},
       1,
       4,
       "offset of 1 x 7: [N, offset_group x kernel elements x 2, ...] = [1, 8, ...] expected"},
      {{1, 2, 4, 4},
       {2, 2, 2, 2},
       {1, 8, 3, 3},
       2,
       4,
       "X with 2 channels, W of 2 x 2, group 2, offset_group 1"},
      {{1, 2, 4, 4},
       {2, 2, 2, 2},
       {1, 8, 2, 3},
       1,
       4,
       "spatial dim 0: offset's 2 outputs do not follow from X's 4, kernel 2"},
      {{1, 2}, {2, 2}, {1, 2}, 1, 2, "X, W and offset of ranks 2, 2 and 2"},
  };
  for (size_t c = 0; c < sizeof deform_cases / sizeof deform_cases[0]; c++) {
    node_model_init(&m, "DeformConv", 19, "y", NULL);
    node_model_input(&m, "x", 1, deform_cases[c].x, deform_cases[c].rank);
    node_model_input(&m, "w", 1, deform_cases[c].w, deform_cases[c].rank);
    node_model_input(&m, "offset", 1, deform_cases[c].offset, deform_cases[c].rank);
    attr_int(&m, "group", deform_cases[c].group);
    node_model_refused(&m, LOOM_ERR_SHAPE, deform_cases[c].words);
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

/* ------------------------------------------------------------ external data */

/* y = x * w with w in a side file at an offset that is no page's start: a
 * small w read, a large one (past 1 MiB) mapped; both give the file's values. */
static void test_external_data(void) {
  for (int large = 0; large < 2; large++) {
    int64_t n = large ? (1 << 18) + 3 : 5;
    float *w = malloc((size_t)n * sizeof *w);
    for (int64_t i = 0; i < n; i++) w[i] = (float)(i % 1000) - 500.5f;
    const long offset = 4099;
    FILE *f = fopen(path_of("weights.bin"), "wb");
    CHECK(f != NULL);
    if (!f) {
      free(w);
      return;
    }
    for (long i = 0; i < offset; i++) fputc(0x5a, f);
    fwrite(w, sizeof *w, (size_t)n, f);
    fclose(f);
    model_parts m;
    const char *ops[] = {"Mul"};
    build(&m, ops, 1, false);
    m.dims[1].dim_value = n;
    int64_t wdims[1] = {n};
    m.init.dims = wdims;
    char offset_text[32], length_text[32];
    snprintf(offset_text, sizeof offset_text, "%ld", offset);
    snprintf(length_text, sizeof length_text, "%lld", (long long)(n * 4));
    Onnx__StringStringEntryProto e[3], *entries[3] = {&e[0], &e[1], &e[2]};
    for (int k = 0; k < 3; k++) onnx__string_string_entry_proto__init(&e[k]);
    e[0].key = "location", e[0].value = "weights.bin";
    e[1].key = "offset", e[1].value = offset_text;
    e[2].key = "length", e[2].value = length_text;
    m.init.has_raw_data = false;
    m.init.has_data_location = true;
    m.init.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    m.init.n_external_data = 3, m.init.external_data = entries;
    save(&m, path_of("external.onnx"), NULL);
    loom_clear_error();
    loom_program *p = loom_onnx_load(path_of("external.onnx"), NULL);
    CHECK_MSG(p != NULL, "external data (%s): %s", large ? "mapped" : "read", loom_last_error());
    if (p) {
      loom_tensor *x = loom_ones(LOOM_SHAPE(2, n), LOOM_F32, LOOM_CPU), *y = NULL;
      CHECK_OK(loom_program_run(p, &x, &y));
      float *got = malloc((size_t)(2 * n) * sizeof *got);
      CHECK_OK(loom_copy_to_host(y, got, (size_t)(2 * n) * sizeof *got));
      bool same = true;
      for (int64_t i = 0; i < 2 * n; i++) same &= got[i] == w[i % n];
      CHECK_MSG(same, "external data (%s): values differ from the file's",
                large ? "mapped" : "read");
      free(got);
      loom_free(x), loom_free(y);
      loom_program_free(p);
    }
    /* the file shorter than offset + length */
    e[1].value = "999999999";
    save(&m, path_of("external_short.onnx"), NULL);
    expect_error(path_of("external_short.onnx"), LOOM_ERR_CORRUPT, "from offset 999999999");
    free(w);
  }
}

/* ------------------------------------------------------------ aranges over a symbol */

/* As PyTorch 2's exporter writes an as_strided over the batch: n = Shape(x)[0],
 * r = Range(0, n, 1), y = Gather(x, r): x itself; and Gather(x, -1 - r): x
 * upside down through negative indices; at batches 1, 2 and 7 from one
 * program (loom_onnx_load refused both, the arange's length and the wrap's
 * end being the traced batch, before they followed the symbol). */
static void test_range_over_symbol(void) {
  for (int upside_down = 0; upside_down < 2; upside_down++) {
    node_model m;
    node_model_init(&m, "Gather", 18, "y", NULL);
    const int64_t dims[2] = {-1, 3};
    node_model_input(&m, "x", 1, dims, 2);
    static Onnx__NodeProto nodes[5], *list[5];
    static char *io[5][3] = {{"x"},
                             {"shape", "zero"},
                             {"zero", "n", "one"},
                             {"minus_one", "positions"},
                             {"x", "positions"}};
    static char *outs[5][1] = {{"shape"}, {"n"}, {"positions"}, {"back"}, {"y"}};
    static const char *ops[5] = {"Shape", "Gather", "Range", "Sub", "Gather"};
    static const size_t nin[5] = {1, 2, 3, 2, 2};
    io[4][1] = upside_down ? "back" : "positions";
    for (int i = 0; i < 5; i++) {
      onnx__node_proto__init(&nodes[i]);
      nodes[i].op_type = (char *)ops[i];
      nodes[i].n_input = nin[i], nodes[i].input = io[i];
      nodes[i].n_output = 1, nodes[i].output = outs[i];
      list[i] = &nodes[i];
    }
    static int64_t values[3] = {0, 1, -1};
    static Onnx__TensorProto consts[3], *clist[3];
    static const char *names[3] = {"zero", "one", "minus_one"};
    for (int i = 0; i < 3; i++) {
      onnx__tensor_proto__init(&consts[i]);
      consts[i].name = (char *)names[i], consts[i].has_data_type = true;
      consts[i].data_type = 7; /* int64 */
      consts[i].has_raw_data = true, consts[i].raw_data.len = 8;
      consts[i].raw_data.data = (uint8_t *)&values[i];
      clist[i] = &consts[i];
    }
    m.graph.n_node = 5, m.graph.node = list;
    m.graph.n_initializer = 3, m.graph.initializer = clist;
    size_t len = onnx__model_proto__get_packed_size(&m.model);
    uint8_t *bytes = malloc(len);
    onnx__model_proto__pack(&m.model, bytes);
    write_bytes(path_of("range.onnx"), bytes, len);
    free(bytes);
    loom_clear_error();
    loom_program *p = loom_onnx_load(path_of("range.onnx"), NULL);
    CHECK_MSG(p != NULL, "Range over a symbolic size: %s", loom_last_error());
    if (!p) continue;
    CHECK_EQ_INT(loom_program_num_symbols(p), 1);
    const int64_t batches[] = {1, 2, 7};
    for (int b = 0; b < 3; b++) {
      int64_t rows = batches[b];
      float x[21], y[21] = {0};
      for (int i = 0; i < rows * 3; i++) x[i] = (float)i * 0.5f - 3;
      loom_tensor *in = loom_from_data(x, LOOM_SHAPE(rows, 3), LOOM_F32, LOOM_CPU), *out = NULL;
      CHECK_OK(loom_program_run(p, &in, &out));
      CHECK_OK(loom_copy_to_host(out, y, (size_t)rows * 3 * sizeof *y));
      bool same = true;
      for (int i = 0; i < rows * 3; i++)
        same &= y[i] == x[upside_down ? (rows - 1 - i / 3) * 3 + i % 3 : i];
      CHECK_MSG(same, "Range over a symbolic size at batch %lld%s", (long long)rows,
                upside_down ? ", negative indices" : "");
      loom_free(in), loom_free(out);
    }
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
  test_narrow_types();
  test_external_data();
  test_range_over_symbol();
  test_linear_attention_and_causal_conv();
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
  test_bits_exact();
  test_max_pool_indices();
  test_roi_align();
  test_deform_conv();
  test_bits_pools_sampling_refusals();
  test_bitcast();
  test_conv_spatial();
  test_mel_weight_matrix();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return check_report();
}
