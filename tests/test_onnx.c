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
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return check_report();
}
