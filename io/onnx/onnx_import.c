/*
 * loom_onnx_load: an ONNX model's graph recorded with loom's ops and compiled
 * into an ordinary program (docs/onnx.md).
 *
 * The graph is recorded on placeholders at example sizes, once per *trace*:
 * a model with symbolic dims (dim_param, or a dim without a value) is
 * recorded twice, at two different sizes of every symbol, and compiled from
 * the first with loom_compile_symbolic. Shape arithmetic (Shape, Gather,
 * Concat, ... feeding Reshape, Expand, Range, ConstantOfShape) is computed at
 * import in each trace and gives sizes, which loom's symbolic inference
 * follows. A value read from a shape that differs between the traces may size
 * things but not be data where it meets the model's inputs: there it would be
 * a number of one size baked into every run, and the import is refused.
 *
 * Each node is built by its op's function (the op table, onnx_ops*.c) under
 * the op's label, so the nodes it records are made by "onnx_<op>", their
 * sizes are derived (not the user's), and errors name the ONNX node.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/onnx/onnx.h"
#include "runtime/runtime.h"

#define MAX_TRACES ONNX_TRACES
#define MAX_SYMBOLS 8

typedef struct value_slot {
  onnx_value v;
  loom_tensor *trace[MAX_TRACES];
  /* A narrow-typed input as the program takes it, before the cast into its
   * type that trace[] holds. */
  loom_tensor *entry;
  bool from_shape; /* its data came from a Shape or Size of a symbolic value */
  bool defined;
} value_slot;

/* The values a graph defines; a subgraph's scope sees its parents'. */
typedef struct value_scope {
  value_slot *values;
  size_t nvalues, cap;
  size_t *table; /* open addressing over names: index + 1, 0 empty */
  size_t table_cap;
  struct value_scope *parent;
} value_scope;

struct onnx_import {
  onnx_file file;
  const loom_onnx_opts *opts;
  int ntraces, trace;
  value_scope root, *scope;
  loom_device device; /* where every tensor of the import goes */
  int depth;          /* subgraphs being built inside one another */
  int trace_skip;     /* trace sizes start this far into trace_candidates */
  /* Symbols: the ONNX name, loom's name, the traced sizes. */
  int nsymbols;
  char *symbol_onnx[MAX_SYMBOLS];
  char symbol_loom[MAX_SYMBOLS][65];
  int64_t symbol_size[MAX_SYMBOLS][MAX_TRACES];
  /* an input tensor of each trace that has the symbol at symbol_axis (borrowed
   * from its value slot) */
  loom_tensor *symbol_tensor[MAX_SYMBOLS][MAX_TRACES];
  int symbol_axis[MAX_SYMBOLS];
  char error[1024];
  loom_status status;
};

/* ------------------------------------------------------------ values by name */

static size_t name_hash(const char *s) {
  size_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static value_slot *find_in_scope(value_scope *sc, const char *name) {
  if (!sc->table_cap) return NULL;
  for (size_t i = name_hash(name) & (sc->table_cap - 1);; i = (i + 1) & (sc->table_cap - 1)) {
    size_t k = sc->table[i];
    if (!k) return NULL;
    if (strcmp(sc->values[k - 1].v.name, name) == 0) return &sc->values[k - 1];
  }
}

/* The value named so in the current scope or an enclosing one. The pointer
 * lasts until the next add_value. */
static value_slot *find_value(onnx_import *im, const char *name) {
  for (value_scope *sc = im->scope; sc; sc = sc->parent) {
    value_slot *s = find_in_scope(sc, name);
    if (s) return s;
  }
  return NULL;
}

/* A new slot for name; NULL when out of memory. A name defined twice is the
 * caller's to refuse (find_value first). */
static value_slot *add_value(onnx_import *im, const char *name) {
  value_scope *sc = im->scope;
  if (sc->nvalues == sc->cap) {
    size_t cap = sc->cap ? sc->cap * 2 : 64;
    value_slot *v = realloc(sc->values, cap * sizeof *v);
    if (!v) return NULL;
    sc->values = v, sc->cap = cap;
  }
  if (2 * (sc->nvalues + 1) > sc->table_cap) {
    size_t cap = sc->table_cap ? sc->table_cap * 2 : 128;
    size_t *t = calloc(cap, sizeof *t);
    if (!t) return NULL;
    for (size_t k = 0; k < sc->nvalues; k++)
      for (size_t i = name_hash(sc->values[k].v.name) & (cap - 1);; i = (i + 1) & (cap - 1))
        if (!t[i]) {
          t[i] = k + 1;
          break;
        }
    free(sc->table);
    sc->table = t, sc->table_cap = cap;
  }
  value_slot *s = &sc->values[sc->nvalues++];
  memset(s, 0, sizeof *s);
  s->v.name = name;
  for (size_t i = name_hash(name) & (sc->table_cap - 1);; i = (i + 1) & (sc->table_cap - 1))
    if (!sc->table[i]) {
      sc->table[i] = sc->nvalues;
      break;
    }
  return s;
}

static void scope_free(value_scope *sc) {
  for (size_t i = 0; i < sc->nvalues; i++)
    for (int t = 0; t < MAX_TRACES; t++) onnx_drop(sc->values[i].trace[t]);
  for (size_t i = 0; i < sc->nvalues; i++) onnx_drop(sc->values[i].entry);
  free(sc->values);
  free(sc->table);
}

/* ------------------------------------------------------------ for the ops */

loom_status onnx_refuse(onnx_node *n, loom_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(n->why, sizeof n->why, fmt, ap);
  va_end(ap);
  return status;
}

bool onnx_has_in(const onnx_node *n, int i) { return i < n->nin && n->in[i] != NULL; }

loom_tensor *onnx_in(onnx_node *n, int i) {
  if (!onnx_has_in(n, i)) return NULL;
  n->data_reads |= (uint64_t)1 << i;
  return n->in[i]->t;
}

bool onnx_in_dim_fixed(const onnx_node *n, int i, int axis) {
  if (!onnx_has_in(n, i)) return true;
  value_slot *s = find_value(n->im, n->in[i]->name);
  if (!s || axis < 0 || axis >= loom_ndim(n->in[i]->t)) return true;
  int64_t size = loom_shape_of(n->in[i]->t).dim[axis];
  for (int t = 0; t < n->im->ntraces; t++)
    if (s->trace[t] && loom_shape_of(s->trace[t]).dim[axis] != size) return false;
  return true;
}

static loom_status realize_known(onnx_node *n, int i, loom_dtype want, loom_tensor **out) {
  onnx_value *v = n->in[i];
  if (!v->known)
    return onnx_refuse(n, LOOM_ERR_VALUE,
                       "input %d ('%s') is computed from the model's inputs, but loom needs its "
                       "values when it imports the model",
                       i, v->name);
  loom_tensor *c = loom_cast(v->t, want);
  loom_status st = loom_realize(c);
  if (st) {
    const char *message;
    lm_recent_error(&message);
    onnx_refuse(n, st, "input %d ('%s') could not be computed: %s", i, v->name, message);
    loom_free(c);
    return st;
  }
  *out = c;
  return LOOM_OK;
}

loom_status onnx_ints(onnx_node *n, int i, int64_t *out, int cap, int *count) {
  *count = 0;
  if (!onnx_has_in(n, i)) return onnx_refuse(n, LOOM_ERR_VALUE, "input %d is missing", i);
  loom_dtype dt = loom_dtype_of(n->in[i]->t);
  if (!onnx_is_integer(dt) && dt != LOOM_BOOL)
    return onnx_refuse(n, LOOM_ERR_DTYPE, "input %d ('%s') is %s; integers are expected", i,
                       n->in[i]->name, loom_dtype_name(dt));
  int64_t numel = loom_numel(n->in[i]->t);
  if (numel > cap)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "input %d ('%s') holds %lld values; at most %d", i,
                       n->in[i]->name, (long long)numel, cap);
  loom_tensor *c;
  loom_status st = realize_known(n, i, LOOM_I64, &c);
  if (st) return st;
  st = loom_copy_to_host(c, out, (size_t)numel * sizeof *out);
  loom_free(c);
  if (st) return onnx_refuse(n, st, "input %d ('%s') could not be read", i, n->in[i]->name);
  *count = (int)numel;
  return LOOM_OK;
}

loom_status onnx_doubles(onnx_node *n, int i, double *out, int cap, int *count) {
  *count = 0;
  if (!onnx_has_in(n, i)) return onnx_refuse(n, LOOM_ERR_VALUE, "input %d is missing", i);
  int64_t numel = loom_numel(n->in[i]->t);
  if (numel > cap)
    return onnx_refuse(n, LOOM_ERR_SHAPE, "input %d ('%s') holds %lld values; at most %d", i,
                       n->in[i]->name, (long long)numel, cap);
  loom_tensor *c;
  loom_status st = realize_known(n, i, LOOM_F64, &c);
  if (st) return st;
  st = loom_copy_to_host(c, out, (size_t)numel * sizeof *out);
  loom_free(c);
  if (st) return onnx_refuse(n, st, "input %d ('%s') could not be read", i, n->in[i]->name);
  *count = (int)numel;
  return LOOM_OK;
}

const Onnx__AttributeProto *onnx_attr(const onnx_node *n, const char *name) {
  for (size_t i = 0; i < n->proto->n_attribute; i++) {
    const Onnx__AttributeProto *a = n->proto->attribute[i];
    if (a->name && strcmp(a->name, name) == 0) return a;
  }
  return NULL;
}

int64_t onnx_attr_int(const onnx_node *n, const char *name, int64_t fallback) {
  const Onnx__AttributeProto *a = onnx_attr(n, name);
  return a && a->has_i ? a->i : fallback;
}

double onnx_attr_float(const onnx_node *n, const char *name, double fallback) {
  const Onnx__AttributeProto *a = onnx_attr(n, name);
  return a && a->has_f ? a->f : fallback;
}

const char *onnx_attr_string(const onnx_node *n, const char *name, const char *fallback, char *buf,
                             size_t len) {
  const Onnx__AttributeProto *a = onnx_attr(n, name);
  if (!a || !a->has_s) {
    snprintf(buf, len, "%s", fallback);
    return buf;
  }
  size_t k = a->s.len < len - 1 ? a->s.len : len - 1;
  memcpy(buf, a->s.data, k);
  buf[k] = 0;
  return buf;
}

loom_status onnx_attr_ints(onnx_node *n, const char *name, int64_t *out, int cap, int *count) {
  const Onnx__AttributeProto *a = onnx_attr(n, name);
  *count = -1;
  if (!a) return LOOM_OK;
  if (a->n_ints > (size_t)cap)
    return onnx_refuse(n, LOOM_ERR_VALUE, "attribute %s holds %zu values; at most %d", name,
                       a->n_ints, cap);
  for (size_t i = 0; i < a->n_ints; i++) out[i] = a->ints[i];
  *count = (int)a->n_ints;
  return LOOM_OK;
}

loom_status onnx_attr_floats(onnx_node *n, const char *name, double *out, int cap, int *count) {
  const Onnx__AttributeProto *a = onnx_attr(n, name);
  *count = -1;
  if (!a) return LOOM_OK;
  if (a->n_floats > (size_t)cap)
    return onnx_refuse(n, LOOM_ERR_VALUE, "attribute %s holds %zu values; at most %d", name,
                       a->n_floats, cap);
  for (size_t i = 0; i < a->n_floats; i++) out[i] = a->floats[i];
  *count = (int)a->n_floats;
  return LOOM_OK;
}

loom_status onnx_axis(onnx_node *n, int64_t axis, int rank, int *out) {
  if (axis < -rank || axis >= (rank ? rank : 1))
    return onnx_refuse(n, LOOM_ERR_AXIS, "axis %lld is outside a rank-%d tensor", (long long)axis,
                       rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return LOOM_OK;
}

void onnx_out(onnx_node *n, int i, loom_tensor *t) {
  if (i < 0 || i >= n->nout) {
    loom_free(t);
    return;
  }
  loom_free(n->out[i]);
  n->out[i] = t;
}

void onnx_out_narrow(onnx_node *n, int i, loom_tensor *t, int32_t narrow) {
  onnx_out(n, i, t);
  if (i >= 0 && i < n->nout) n->out_narrow[i] = narrow, n->out_typed[i] = true;
}

int32_t onnx_in_narrow(const onnx_node *n, int i) {
  return onnx_has_in(n, i) ? n->in[i]->narrow : 0;
}

/* An output the op did not type holds the narrow type of the first input
 * held in the same dtype, as ONNX's ops keep their input's type. */
static int32_t narrow_of_output(const onnx_node *n, int o) {
  if (n->out_typed[o]) return n->out_narrow[o];
  for (int i = 0; i < n->nin && n->out[o]; i++)
    if (onnx_in_narrow(n, i) && loom_dtype_of(n->in[i]->t) == loom_dtype_of(n->out[o]))
      return n->in[i]->narrow;
  return 0;
}

/* ------------------------------------------------------------ symbols and inputs */

/* loom's spelling of an ONNX name: letters, digits and '_', not starting with a digit. */
static void loom_name(const char *onnx, char *out, size_t len) {
  size_t k = 0;
  if (!onnx[0] || isdigit((unsigned char)onnx[0])) out[k++] = 'v';
  for (const char *s = onnx; *s && k + 1 < len; s++)
    out[k++] = isalnum((unsigned char)*s) ? *s : '_';
  out[k] = 0;
}

/* Sizes no fixed dim of the model has, so that the symbolic inference never
 * mistakes a fixed dim for a symbol's. */
static const int64_t trace_candidates[] = {
    17,  19,  23,  29,  31,  37,  41,  43,  47,  53,  59,  61,  67,  71,  73,  79,
    83,  89,  97,  101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157, 163,
    167, 173, 179, 181, 191, 193, 197, 199, 211, 223, 227, 229, 233, 239, 241, 251};

static bool size_used(const Onnx__GraphProto *g, int64_t size) {
  for (size_t i = 0; i < g->n_initializer; i++)
    for (size_t d = 0; d < g->initializer[i]->n_dims; d++)
      if (g->initializer[i]->dims[d] == size) return true;
  Onnx__ValueInfoProto **lists[2] = {g->input, g->output};
  size_t counts[2] = {g->n_input, g->n_output};
  for (int l = 0; l < 2; l++)
    for (size_t i = 0; i < counts[l]; i++) {
      const Onnx__TypeProto *t = lists[l][i]->type;
      if (!t || t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !t->tensor_type->shape)
        continue;
      const Onnx__TensorShapeProto *s = t->tensor_type->shape;
      for (size_t d = 0; d < s->n_dim; d++)
        if (s->dim[d]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
            s->dim[d]->dim_value == size)
          return true;
    }
  return false;
}

/* The symbol for an ONNX dim name (made on first sight), or -1 with the error set. */
static int symbol_of(onnx_import *im, const char *onnx_name) {
  for (int s = 0; s < im->nsymbols; s++)
    if (strcmp(im->symbol_onnx[s], onnx_name) == 0) return s;
  if (im->nsymbols == MAX_SYMBOLS) {
    onnx_fail(im, LOOM_ERR_VALUE,
              "the model's inputs have more than %d symbolic dims (fix some with "
              "loom_onnx_opts.dims)",
              MAX_SYMBOLS);
    return -1;
  }
  int s = im->nsymbols;
  im->symbol_onnx[s] = strdup(onnx_name);
  if (!im->symbol_onnx[s]) {
    onnx_fail(im, LOOM_ERR_OOM, "out of memory");
    return -1;
  }
  char base[56];
  loom_name(onnx_name, base, sizeof base);
  snprintf(im->symbol_loom[s], sizeof im->symbol_loom[s], "%s", base);
  for (int k = 0, n = 2; k < s; k++) /* two ONNX names may spell alike */
    if (strcmp(im->symbol_loom[k], im->symbol_loom[s]) == 0) {
      snprintf(im->symbol_loom[s], sizeof im->symbol_loom[s], "%s_%d", base, n++ % 1000);
      k = -1;
    }
  im->nsymbols++;
  /* each trace's size: unused by fixed dims and by the other symbols */
  const Onnx__GraphProto *g = im->file.model->graph;
  int pick = im->trace_skip;
  for (int t = 0; t < MAX_TRACES; t++) {
    for (;; pick++) {
      if (pick == (int)(sizeof trace_candidates / sizeof trace_candidates[0])) {
        onnx_fail(im, LOOM_ERR_VALUE, "no size is free to trace symbol '%s' at", onnx_name);
        return -1;
      }
      int64_t size = trace_candidates[pick];
      bool taken = size_used(g, size);
      for (int k = 0; k < s && !taken; k++)
        for (int u = 0; u < MAX_TRACES; u++) taken |= im->symbol_size[k][u] == size;
      if (!taken) break;
    }
    im->symbol_size[s][t] = trace_candidates[pick++];
  }
  return s;
}

static const loom_onnx_dim *fixed_dim(const onnx_import *im, const char *name) {
  if (!im->opts || !name) return NULL;
  for (int i = 0; i < im->opts->ndims; i++)
    if (im->opts->dims[i].name && strcmp(im->opts->dims[i].name, name) == 0)
      return &im->opts->dims[i];
  return NULL;
}

static loom_tensor *fixed_input(const onnx_import *im, const char *name) {
  if (!im->opts) return NULL;
  for (int i = 0; i < im->opts->ninputs; i++)
    if (im->opts->inputs[i].name && strcmp(im->opts->inputs[i].name, name) == 0)
      return im->opts->inputs[i].value;
  return NULL;
}

static bool is_initializer(const Onnx__GraphProto *g, const char *name) {
  for (size_t i = 0; i < g->n_initializer; i++)
    if (g->initializer[i]->name && strcmp(g->initializer[i]->name, name) == 0) return true;
  return false;
}

/* Whether a dim of an input has this ONNX name (or "<input>_dim<axis>"). */
static bool model_has_dim(const Onnx__GraphProto *g, const char *name) {
  for (size_t i = 0; i < g->n_input; i++) {
    const Onnx__TypeProto *t = g->input[i]->type;
    if (!t || t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !t->tensor_type->shape)
      continue;
    const Onnx__TensorShapeProto *s = t->tensor_type->shape;
    for (size_t d = 0; d < s->n_dim; d++) {
      char unnamed[200];
      const Onnx__TensorShapeProto__Dimension *dim = s->dim[d];
      if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) continue;
      const char *param = dim->dim_param;
      if (dim->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM || !param ||
          !param[0]) {
        snprintf(unnamed, sizeof unnamed, "%.150s_dim%zu",
                 g->input[i]->name ? g->input[i]->name : "", d);
        param = unnamed;
      }
      if (strcmp(param, name) == 0) return true;
    }
  }
  return false;
}

/* A dim fixed by the options that no input has is the caller's mistake. */
static loom_status check_fixed_dims(onnx_import *im) {
  for (int i = 0; im->opts && i < im->opts->ndims; i++) {
    const char *name = im->opts->dims[i].name;
    if (!name || !model_has_dim(im->file.model->graph, name))
      return onnx_fail(im, LOOM_ERR_VALUE,
                       "opts.dims[%d] names '%s', which is no symbolic dim of the model's "
                       "inputs",
                       i, name ? name : "(NULL)");
  }
  return LOOM_OK;
}

/* ------------------------------------------------------------ the import */

typedef struct program_inputs {
  loom_tensor **ins; /* trace 0's placeholders, in the model's order */
  int nins;
  loom_symbolic_dim dims[LOOM_MAX_DIMS * 16];
  int ndims;
} program_inputs;

static loom_status add_inputs(onnx_import *im, program_inputs *pi) {
  const Onnx__GraphProto *g = im->file.model->graph;
  pi->ins = calloc(g->n_input ? g->n_input : 1, sizeof *pi->ins);
  if (!pi->ins) return onnx_fail(im, LOOM_ERR_OOM, "out of memory");
  for (size_t i = 0; i < g->n_input; i++) {
    const Onnx__ValueInfoProto *vi = g->input[i];
    const char *name = vi->name ? vi->name : "";
    if (is_initializer(g, name)) continue; /* a default the model keeps (IR < 4) */
    if (!name[0]) return onnx_fail(im, LOOM_ERR_CORRUPT, "graph input %zu has no name", i);
    if (find_value(im, name))
      return onnx_fail(im, LOOM_ERR_CORRUPT, "graph input '%s' is defined twice", name);
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
      return onnx_fail(im, LOOM_ERR_DTYPE,
                       "input '%s' is not a tensor (sequences, maps and optionals are not "
                       "loom values)",
                       name);
    const char *type_name;
    int32_t narrow =
        onnx_dtype_is_narrow(tp->tensor_type->elem_type) ? tp->tensor_type->elem_type : 0;
    int dt = onnx_dtype_held(tp->tensor_type->elem_type, &type_name);
    if (dt < 0)
      return onnx_fail(im, LOOM_ERR_DTYPE, "input '%s' is %s, which loom does not hold", name,
                       type_name);
    const Onnx__TensorShapeProto *sp = tp->tensor_type->shape;
    loom_tensor *given = fixed_input(im, name);
    if (given) {
      if (loom_status_of(given))
        return onnx_fail(im, LOOM_ERR_VALUE, "the value given for input '%s' is an error: %s", name,
                         loom_error_message(given));
      loom_shape gs = loom_shape_of(given);
      bool fits = loom_dtype_of(given) == (loom_dtype)dt && (!sp || (int)sp->n_dim == gs.ndim);
      for (size_t d = 0; fits && sp && d < sp->n_dim; d++)
        fits = sp->dim[d]->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ||
               sp->dim[d]->dim_value == gs.dim[d];
      if (!fits)
        return onnx_fail(im, LOOM_ERR_SHAPE,
                         "the value given for input '%s' (%s, %d dims) does not fit its type "
                         "(%s, %zu dims)",
                         name, loom_dtype_name(loom_dtype_of(given)), gs.ndim, type_name,
                         sp ? sp->n_dim : 0);
      value_slot *s = add_value(im, name);
      if (!s) return onnx_fail(im, LOOM_ERR_OOM, "out of memory");
      loom_tensor *c = loom_device_of(given).type == im->device.type &&
                               loom_device_of(given).index == im->device.index
                           ? loom_contiguous(given)
                           : loom_to(given, im->device);
      loom_status rs = loom_realize(c);
      if (rs) {
        loom_free(c);
        return onnx_fail(im, rs, "the value given for input '%s' could not be computed", name);
      }
      if (narrow) {
        loom_tensor *cast = onnx_narrow_cast(c, narrow, true);
        loom_free(c);
        c = cast;
        if (loom_realize(c)) {
          loom_free(c);
          return onnx_fail(im, LOOM_ERR_VALUE,
                           "the value given for input '%s' could not be cast to %s", name,
                           type_name);
        }
      }
      for (int t = 0; t < MAX_TRACES; t++) s->trace[t] = onnx_own(t ? loom_retain(c) : c);
      s->v.known = s->defined = true;
      s->v.narrow = narrow;
      continue;
    }
    if (!sp)
      return onnx_fail(im, LOOM_ERR_SHAPE, "input '%s' has no shape; loom needs at least its rank",
                       name);
    if (sp->n_dim > LOOM_MAX_DIMS)
      return onnx_fail(im, LOOM_ERR_SHAPE, "input '%s' has %zu dims; loom holds at most %d", name,
                       sp->n_dim, LOOM_MAX_DIMS);
    loom_shape shape[MAX_TRACES] = {{.ndim = (int)sp->n_dim}, {.ndim = (int)sp->n_dim}};
    value_slot *s = add_value(im, name);
    if (!s) return onnx_fail(im, LOOM_ERR_OOM, "out of memory");
    for (size_t d = 0; d < sp->n_dim; d++) {
      const Onnx__TensorShapeProto__Dimension *dim = sp->dim[d];
      char unnamed[200];
      const char *param = NULL;
      if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
        if (dim->dim_value < 0 || dim->dim_value > ((int64_t)1 << 40))
          return onnx_fail(im, LOOM_ERR_SHAPE, "input '%s' dim %zu is %lld", name, d,
                           (long long)dim->dim_value);
        for (int t = 0; t < MAX_TRACES; t++) shape[t].dim[d] = dim->dim_value;
        continue;
      }
      if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
          dim->dim_param && dim->dim_param[0]) {
        param = dim->dim_param;
      } else {
        snprintf(unnamed, sizeof unnamed, "%.150s_dim%zu", name, d);
        param = unnamed;
      }
      const loom_onnx_dim *fix = fixed_dim(im, param);
      if (fix) {
        if (fix->size < 1 || fix->size > ((int64_t)1 << 40))
          return onnx_fail(im, LOOM_ERR_VALUE, "dim '%s' fixed at %lld; sizes are at least 1",
                           param, (long long)fix->size);
        for (int t = 0; t < MAX_TRACES; t++) shape[t].dim[d] = fix->size;
        continue;
      }
      int sym = symbol_of(im, param);
      if (sym < 0) return im->status;
      for (int t = 0; t < MAX_TRACES; t++) shape[t].dim[d] = im->symbol_size[sym][t];
      if (pi->ndims == (int)(sizeof pi->dims / sizeof pi->dims[0]))
        return onnx_fail(im, LOOM_ERR_VALUE, "too many symbolic dims");
      pi->dims[pi->ndims++] =
          (loom_symbolic_dim){.input = pi->nins, .axis = (int)d, .symbol = im->symbol_loom[sym]};
      s->v.symbolic = true;
    }
    char lname[65];
    loom_name(name, lname, sizeof lname);
    for (int t = 0; t < MAX_TRACES; t++) {
      s->trace[t] = onnx_own(loom_input(lname, shape[t], (loom_dtype)dt, im->device));
      if (loom_status_of(s->trace[t]))
        return onnx_fail(im, loom_status_of(s->trace[t]), "input '%s': %s", name,
                         loom_error_message(s->trace[t]));
    }
    s->defined = true;
    pi->ins[pi->nins++] = s->trace[0];
    if (narrow) {
      /* the program takes the held dtype; the graph sees the type's values */
      s->entry = s->trace[0];
      s->v.narrow = narrow;
      for (int t = 0; t < MAX_TRACES; t++) {
        loom_tensor *held = s->trace[t];
        s->trace[t] = onnx_own(onnx_narrow_cast(held, narrow, true));
        if (t) onnx_drop(held);
      }
    }
    for (int d = 0; d < pi->ndims; d++)
      if (pi->dims[d].input == pi->nins - 1)
        for (int k = 0; k < im->nsymbols; k++)
          if (!im->symbol_tensor[k][0] && pi->dims[d].symbol == im->symbol_loom[k]) {
            for (int t = 0; t < MAX_TRACES; t++) im->symbol_tensor[k][t] = s->trace[t];
            im->symbol_axis[k] = pi->dims[d].axis;
          }
  }
  return LOOM_OK;
}

loom_tensor *onnx_on_device(onnx_import *im, loom_tensor *t, const char *what, const char *name) {
  if (im->device.type == LOOM_DEVICE_CPU) return t;
  loom_tensor *moved = loom_to(t, im->device);
  loom_free(t);
  loom_status st = loom_realize(moved);
  if (st) {
    onnx_fail(im, st, "%s '%s' could not be copied to the device: %s", what, name,
              loom_error_message(moved));
    loom_free(moved);
    return NULL;
  }
  return moved;
}

static loom_status add_initializers(onnx_import *im, const Onnx__GraphProto *g) {
  if (g->n_sparse_initializer)
    return onnx_fail(im, LOOM_ERR_DTYPE, "sparse initializers ('%s') are not read by loom",
                     g->sparse_initializer[0]->values && g->sparse_initializer[0]->values->name
                         ? g->sparse_initializer[0]->values->name
                         : "?");
  for (size_t i = 0; i < g->n_initializer; i++) {
    const Onnx__TensorProto *tp = g->initializer[i];
    const char *name = tp->name ? tp->name : "";
    if (!name[0]) return onnx_fail(im, LOOM_ERR_CORRUPT, "initializer %zu has no name", i);
    if (find_value(im, name))
      return onnx_fail(im, LOOM_ERR_CORRUPT, "initializer '%s' is defined twice", name);
    char why[512];
    loom_tensor *t = onnx_tensor_from_proto(tp, im->file.dir, why, sizeof why);
    if (!t) return onnx_fail(im, LOOM_ERR_CORRUPT, "initializer '%s': %s", name, why);
    if (!(t = onnx_on_device(im, t, "initializer", name))) return im->status;
    value_slot *s = add_value(im, name);
    if (!s) {
      loom_free(t);
      return onnx_fail(im, LOOM_ERR_OOM, "out of memory");
    }
    s->trace[0] = onnx_own(t);
    for (int k = 1; k < MAX_TRACES; k++) s->trace[k] = onnx_own(loom_retain(t));
    s->v.known = true;
    s->v.narrow = onnx_dtype_is_narrow(tp->data_type) ? tp->data_type : 0;
    s->defined = true;
  }
  return LOOM_OK;
}

/* Whether a known value's data differs between the traces (it holds a
 * traced size). */
static bool differs_between_traces(onnx_import *im, value_slot *s) {
  if (im->ntraces < 2 || !s->from_shape) return false;
  loom_shape a = loom_shape_of(s->trace[0]), b = loom_shape_of(s->trace[1]);
  if (a.ndim != b.ndim) return true;
  for (int d = 0; d < a.ndim; d++)
    if (a.dim[d] != b.dim[d]) return true;
  int64_t n = loom_numel(s->trace[0]);
  bool differ = true;
  double *x = malloc((size_t)(n ? n : 1) * sizeof *x * 2);
  loom_tensor *c0 = loom_cast(s->trace[0], LOOM_F64), *c1 = loom_cast(s->trace[1], LOOM_F64);
  if (x && !loom_copy_to_host(c0, x, (size_t)n * sizeof *x) &&
      !loom_copy_to_host(c1, x + n, (size_t)n * sizeof *x))
    differ = memcmp(x, x + n, (size_t)n * sizeof *x) != 0;
  loom_free(c0), loom_free(c1);
  free(x);
  return differ;
}

static const char *node_label(const Onnx__NodeProto *p, size_t index, char *buf, size_t len) {
  if (p->name && p->name[0])
    snprintf(buf, len, "node '%.120s' (%.60s)", p->name, p->op_type ? p->op_type : "?");
  else
    snprintf(buf, len, "node %zu (%.60s)", index, p->op_type ? p->op_type : "?");
  return buf;
}

static bool domain_is_onnx(const char *d) { return !d || !d[0] || strcmp(d, "ai.onnx") == 0; }

typedef struct unsupported_list {
  char text[700];
  size_t count, len;
} unsupported_list;

/* The nodes of g and of its subgraphs that loom cannot build (the file's
 * nesting is bounded by onnx_read.c's scan). */
static loom_status find_unsupported(onnx_import *im, const Onnx__GraphProto *g,
                                    unsupported_list *u) {
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *p = g->node[i];
    if (p->n_input > ONNX_MAX_NODE_IO || p->n_output > ONNX_MAX_NODE_IO)
      return onnx_fail(im, LOOM_ERR_CORRUPT, "node %zu has %zu inputs and %zu outputs", i,
                       p->n_input, p->n_output);
    for (size_t a = 0; a < p->n_attribute; a++) {
      if (p->attribute[a]->g) find_unsupported(im, p->attribute[a]->g, u);
      for (size_t k = 0; k < p->attribute[a]->n_graphs; k++)
        find_unsupported(im, p->attribute[a]->graphs[k], u);
    }
    if (domain_is_onnx(p->domain) && p->op_type && onnx_find_op(p->op_type)) continue;
    if (u->count++ < 12 && u->len < sizeof u->text - 200) {
      char label[200];
      node_label(p, i, label, sizeof label);
      u->len += (size_t)snprintf(u->text + u->len, sizeof u->text - u->len, "%s%s%s%s",
                                 u->len ? ", " : "", label,
                                 domain_is_onnx(p->domain) ? "" : " in domain ",
                                 domain_is_onnx(p->domain) ? "" : p->domain);
    }
  }
  return im->status;
}

/* Every node loom cannot build, named at once. */
static loom_status check_supported(onnx_import *im) {
  unsupported_list u = {0};
  if (find_unsupported(im, im->file.model->graph, &u)) return im->status;
  size_t unsupported = u.count;
  const char *list = u.text;
  if (!unsupported) return LOOM_OK;
  return onnx_fail(im, LOOM_ERR_VALUE, "%zu node%s of ops loom does not import: %s%s", unsupported,
                   unsupported == 1 ? "" : "s", list, unsupported > 12 ? ", ..." : "");
}

static loom_status build_node(onnx_import *im, const Onnx__NodeProto *p, size_t index) {
  const onnx_op *op = onnx_find_op(p->op_type);
  char label[200];
  node_label(p, index, label, sizeof label);
  if (op->flags & ONNX_CONTROL) return onnx_build_control(im, p, label, im->file.opset);
  onnx_node n = {.im = im,
                 .proto = p,
                 .opset = im->file.opset,
                 .nin = (int)p->n_input,
                 .nout = (int)p->n_output};
  value_slot *slots[ONNX_MAX_NODE_IO] = {0};
  bool all_known = true, symbolic = false;
  for (int i = 0; i < n.nin; i++) {
    const char *name = p->input[i];
    if (!name || !name[0]) continue; /* an omitted optional input */
    value_slot *s = find_value(im, name);
    if (!s || !s->defined)
      return onnx_fail(im, LOOM_ERR_CORRUPT,
                       "%s reads '%s', which no input, initializer or earlier node defines", label,
                       name);
    if (!s->trace[0])
      return onnx_fail(im, LOOM_ERR_VALUE,
                       "%s reads '%s', an output its node does not compute in loom", label, name);
    slots[i] = s;
    all_known &= s->v.known;
    symbolic |= s->v.symbolic;
  }
  for (int o = 0; o < n.nout; o++) {
    const char *name = p->output[o];
    if (name && name[0] && find_in_scope(im->scope, name))
      return onnx_fail(im, LOOM_ERR_CORRUPT, "%s writes '%s', which is already defined", label,
                       name);
  }
  uint64_t reads = 0;
  loom_tensor *outs[MAX_TRACES][ONNX_MAX_NODE_IO] = {{0}};
  int32_t narrow[ONNX_MAX_NODE_IO] = {0};
  onnx_value views[ONNX_MAX_NODE_IO];
  for (int t = 0; t < im->ntraces; t++) {
    im->trace = t;
    for (int i = 0; i < n.nin; i++) {
      n.in[i] = NULL;
      if (!slots[i]) continue;
      views[i] = slots[i]->v;
      views[i].t = slots[i]->trace[t];
      views[i].traced = slots[i]->from_shape;
      n.in[i] = &views[i];
    }
    memset(n.out, 0, sizeof n.out);
    memset(n.out_typed, 0, sizeof n.out_typed);
    n.data_reads = 0;
    /* the node's intermediate tensors are released with the composite's
     * scope; its outputs are the import's */
    int token = lm_composite_begin();
    const char *previous = lm_called_enter(op->label);
    lm_errors_quiet_begin();
    loom_status st = op->build(&n);
    lm_errors_quiet_end();
    lm_called_leave(previous);
    for (int o = 0; o < n.nout; o++)
      if (n.out[o]) lm_scope_untrack(n.out[o]);
    lm_composite_end(token, NULL);
    reads |= n.data_reads;
    for (int o = 0; o < n.nout; o++) outs[t][o] = n.out[o];
    for (int o = 0; o < n.nout; o++) narrow[o] = narrow_of_output(&n, o);
    if (!st)
      for (int o = 0; o < n.nout && !st; o++)
        if (n.out[o] && loom_status_of(n.out[o])) {
          st = loom_status_of(n.out[o]);
          snprintf(n.why, sizeof n.why, "%s", loom_error_message(n.out[o]));
        }
    if (st) {
      for (int k = 0; k <= t; k++)
        for (int o = 0; o < n.nout; o++) onnx_drop(outs[k][o]);
      return onnx_fail(im, st, "%s (opset %lld): %s", label, (long long)n.opset,
                       n.why[0] ? n.why : loom_status_name(st));
    }
  }
  /* A shape-derived number meeting the model's inputs as data. */
  bool from_shape = false;
  for (int i = 0; i < n.nin; i++) {
    if (!slots[i] || !(reads >> i & 1)) continue;
    from_shape |= slots[i]->from_shape;
    if (!all_known && slots[i]->v.known && differs_between_traces(im, slots[i])) {
      for (int k = 0; k < im->ntraces; k++)
        for (int o = 0; o < n.nout; o++) onnx_drop(outs[k][o]);
      return onnx_fail(
          im, LOOM_ERR_SHAPE,
          "%s: input %d ('%s') holds a size of a symbolic dim (computed by Shape or Size) and "
          "is used as data with the model's inputs; loom follows such sizes only into shapes. "
          "Fix the dim (loom_onnx_opts.dims, or --dim NAME=N)",
          label, i, slots[i]->v.name);
    }
  }
  if (op->flags & ONNX_READS_SHAPE) from_shape = symbolic;
  for (int o = 0; o < n.nout; o++) {
    const char *name = p->output[o];
    if (!name || !name[0]) {
      for (int t = 0; t < im->ntraces; t++) onnx_drop(outs[t][o]);
      continue;
    }
    value_slot *s = add_value(im, name);
    if (!s) return onnx_fail(im, LOOM_ERR_OOM, "out of memory");
    s->defined = true;
    for (int t = 0; t < im->ntraces; t++) s->trace[t] = outs[t][o];
    for (int t = im->ntraces; t < MAX_TRACES; t++)
      s->trace[t] = outs[0][o] ? onnx_own(loom_retain(outs[0][o])) : NULL;
    /* a shape is known whatever computes the tensor */
    s->v.known = (all_known || (op->flags & ONNX_READS_SHAPE)) && !(op->flags & ONNX_RANDOM);
    s->v.symbolic = symbolic && !s->v.known;
    s->v.narrow = narrow[o];
    s->from_shape = from_shape;
  }
  return LOOM_OK;
}

/* ------------------------------------------------------------ for onnx_control.c */

int onnx_ntraces(const onnx_import *im) { return im->ntraces; }

loom_device onnx_import_device(const onnx_import *im) { return im->device; }

loom_tensor *onnx_symbol_positions(onnx_node *n, int64_t size, loom_dtype dtype) {
  onnx_import *im = n->im;
  for (int k = 0; k < im->nsymbols; k++) {
    loom_tensor *x = im->symbol_tensor[k][im->trace];
    if (!x || im->symbol_size[k][im->trace] != size) continue;
    loom_tensor *ones = onnx_ones_along(x, im->symbol_axis[k]);
    return loom_cast(loom_sub_s(loom_cumsum(ones, 0), 1), dtype);
  }
  return NULL;
}
loom_device onnx_device(const onnx_node *n) { return n->im->device; }

loom_tensor *onnx_own(loom_tensor *t) {
  if (t && !lm_is_static_error(t)) lm_scope_untrack(t);
  return t;
}

void onnx_drop(loom_tensor *t) {
  if (t && !lm_is_static_error(t)) lm_tensor_release(t);
}

loom_status onnx_status(const onnx_import *im) { return im->status; }

loom_status onnx_fail(onnx_import *im, loom_status st, const char *fmt, ...) {
  if (im->status) return im->status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(im->error, sizeof im->error, fmt, ap);
  va_end(ap);
  im->status = st;
  return st;
}

bool onnx_lookup(onnx_import *im, const char *name, onnx_ref *out) {
  value_slot *s = name && name[0] ? find_value(im, name) : NULL;
  if (!s || !s->trace[0]) return false;
  for (int t = 0; t < MAX_TRACES; t++) out->t[t] = s->trace[t];
  out->known = s->v.known;
  out->symbolic = s->v.symbolic;
  out->narrow = s->v.narrow;
  return true;
}

loom_status onnx_define(onnx_import *im, const char *name, onnx_ref *value) {
  if (!name || !name[0]) {
    for (int t = 0; t < MAX_TRACES; t++) onnx_drop(value->t[t]);
    return LOOM_OK;
  }
  if (find_in_scope(im->scope, name)) {
    for (int t = 0; t < MAX_TRACES; t++) onnx_drop(value->t[t]);
    return onnx_fail(im, LOOM_ERR_CORRUPT, "'%s' is defined twice", name);
  }
  value_slot *s = add_value(im, name);
  if (!s) {
    for (int t = 0; t < MAX_TRACES; t++) onnx_drop(value->t[t]);
    return onnx_fail(im, LOOM_ERR_OOM, "out of memory");
  }
  for (int t = 0; t < MAX_TRACES; t++) s->trace[t] = value->t[t];
  s->v.known = value->known;
  s->v.symbolic = value->symbolic;
  s->v.narrow = value->narrow;
  s->defined = true;
  return LOOM_OK;
}

loom_status onnx_subgraph(onnx_import *im, const Onnx__GraphProto *g, const char *label,
                          const onnx_ref *args, int nargs, onnx_ref *outs, int nouts) {
  for (int o = 0; o < nouts; o++) memset(&outs[o], 0, sizeof outs[o]);
  if ((int)g->n_input != nargs || (int)g->n_output != nouts)
    return onnx_fail(im, LOOM_ERR_CORRUPT,
                     "%s: its subgraph takes %zu inputs and gives %zu outputs; %d and %d expected",
                     label, g->n_input, g->n_output, nargs, nouts);
  if (im->depth == ONNX_MAX_NESTING)
    return onnx_fail(im, LOOM_ERR_VALUE, "%s: subgraphs nest deeper than %d", label,
                     ONNX_MAX_NESTING);
  value_scope scope = {.parent = im->scope};
  im->scope = &scope;
  im->depth++;
  for (int i = 0; i < nargs && !im->status; i++) {
    onnx_ref copy = args[i];
    for (int t = 0; t < MAX_TRACES; t++) copy.t[t] = onnx_own(loom_retain(args[i].t[t]));
    onnx_define(im, g->input[i]->name, &copy);
  }
  if (!im->status) add_initializers(im, g);
  for (size_t i = 0; i < g->n_node && !im->status; i++) build_node(im, g->node[i], i);
  for (int o = 0; o < nouts && !im->status; o++) {
    const char *name = g->output[o]->name;
    onnx_ref r;
    if (!onnx_lookup(im, name, &r)) {
      onnx_fail(im, LOOM_ERR_CORRUPT, "%s: its subgraph's output '%s' is not computed", label,
                name ? name : "");
      break;
    }
    outs[o] = r;
    for (int t = 0; t < MAX_TRACES; t++) outs[o].t[t] = onnx_own(loom_retain(r.t[t]));
  }
  im->depth--;
  im->scope = scope.parent;
  scope_free(&scope);
  if (im->status)
    for (int o = 0; o < nouts; o++)
      for (int t = 0; t < MAX_TRACES; t++) onnx_drop(outs[o].t[t]), outs[o].t[t] = NULL;
  return im->status;
}

static loom_program *compile(onnx_import *im, const program_inputs *pi) {
  const Onnx__GraphProto *g = im->file.model->graph;
  if (!g->n_output) {
    onnx_fail(im, LOOM_ERR_VALUE, "the graph has no outputs");
    return NULL;
  }
  loom_tensor **outs = calloc(g->n_output, sizeof *outs);
  if (!outs) {
    onnx_fail(im, LOOM_ERR_OOM, "out of memory");
    return NULL;
  }
  for (size_t i = 0; i < g->n_output; i++) {
    const char *name = g->output[i]->name ? g->output[i]->name : "";
    value_slot *s = find_value(im, name);
    if (!s || !s->trace[0]) {
      free(outs);
      onnx_fail(im, LOOM_ERR_CORRUPT, "graph output '%s' is not computed by the graph", name);
      return NULL;
    }
    if (s->v.known && differs_between_traces(im, s)) {
      free(outs);
      onnx_fail(im, LOOM_ERR_SHAPE,
                "graph output '%s' holds sizes of symbolic dims, which loom computes only at "
                "import; fix the dims (loom_onnx_opts.dims)",
                name);
      return NULL;
    }
    outs[i] = s->trace[0];
  }
  loom_program *prog = pi->ndims ? loom_compile_symbolic(outs, (int)g->n_output, pi->ins, pi->nins,
                                                         pi->dims, pi->ndims)
                                 : loom_compile(outs, (int)g->n_output, pi->ins, pi->nins);
  free(outs);
  return prog;
}

static void import_free(onnx_import *im) {
  scope_free(&im->root);
  for (int s = 0; s < im->nsymbols; s++) free(im->symbol_onnx[s]);
  onnx_file_close(&im->file);
}

/* ------------------------------------------------------------ recording for training */

struct loom_onnx_model {
  onnx_file file;
  char *path; /* the file's path, for messages */
};

loom_onnx_model *loom_onnx_open(const char *path) {
  const char *api = "loom_onnx_open";
  if (!path) {
    lm_fail(LOOM_ERR_NULL, "%s: path is NULL", api);
    return NULL;
  }
  loom_onnx_model *m = calloc(1, sizeof *m);
  char *copy = strdup(path);
  char why[512];
  loom_status st = m && copy ? onnx_file_read(&m->file, copy, why, sizeof why) : LOOM_ERR_OOM;
  if (st) {
    lm_fail(st, "%s: '%s': %s", api, path, m && copy ? why : "out of memory");
    free(m), free(copy);
    return NULL;
  }
  m->path = copy;
  onnx_import check = {.file = m->file, .scope = NULL};
  check.scope = &check.root;
  if (check_supported(&check)) {
    lm_fail(check.status, "%s: '%s': %s", api, path, check.error);
    loom_onnx_close(m);
    return NULL;
  }
  return m;
}

void loom_onnx_close(loom_onnx_model *m) {
  if (!m) return;
  onnx_file_close(&m->file);
  free(m->path);
  free(m);
}

/* The caller's tensors as the model's inputs: dtypes and fixed dims as declared. */
static loom_status bind_inputs(onnx_import *im, loom_tensor *const *ins, int nin) {
  const Onnx__GraphProto *g = im->file.model->graph;
  int k = 0;
  for (size_t i = 0; i < g->n_input && !im->status; i++) {
    const Onnx__ValueInfoProto *vi = g->input[i];
    const char *name = vi->name ? vi->name : "";
    if (is_initializer(g, name)) continue;
    if (k >= nin) return onnx_fail(im, LOOM_ERR_VALUE, "the model takes more than %d inputs", nin);
    loom_tensor *t = ins[k++];
    if (!t) return onnx_fail(im, LOOM_ERR_NULL, "input %d ('%s') is NULL", k - 1, name);
    if (loom_status_of(t))
      return onnx_fail(im, loom_status_of(t), "input %d ('%s') is an error: %s", k - 1, name,
                       loom_error_message(t));
    const Onnx__TypeProto *tp = vi->type;
    if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
      const char *type_name;
      int dt = onnx_dtype_held(tp->tensor_type->elem_type, &type_name);
      loom_shape s = loom_shape_of(t);
      const Onnx__TensorShapeProto *sp = tp->tensor_type->shape;
      bool fits = dt == (int)loom_dtype_of(t) && (!sp || (int)sp->n_dim == s.ndim);
      for (size_t d = 0; fits && sp && d < sp->n_dim; d++)
        fits = sp->dim[d]->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ||
               sp->dim[d]->dim_value == s.dim[d];
      if (!fits)
        return onnx_fail(im, LOOM_ERR_SHAPE,
                         "input %d ('%s') is %s with %d dims; the model declares %s with %zu",
                         k - 1, name, loom_dtype_name(loom_dtype_of(t)), s.ndim, type_name,
                         sp ? sp->n_dim : 0);
    }
    int32_t narrow = tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE &&
                             onnx_dtype_is_narrow(tp->tensor_type->elem_type)
                         ? tp->tensor_type->elem_type
                         : 0;
    loom_tensor *in = narrow ? onnx_narrow_cast(t, narrow, true) : loom_retain(t);
    onnx_ref r = {.t = {onnx_own(in), onnx_own(loom_retain(in))}, .narrow = narrow};
    onnx_define(im, name, &r);
  }
  if (!im->status && k != nin)
    onnx_fail(im, LOOM_ERR_VALUE, "the model takes %d inputs; %d were given", k, nin);
  return im->status;
}

/* Initializers from ps by name, made there on first use: floating-point ones
 * trainable, the others buffers. */
static loom_status bind_parameters(onnx_import *im, loom_params *ps) {
  const Onnx__GraphProto *g = im->file.model->graph;
  for (size_t i = 0; i < g->n_initializer && !im->status; i++) {
    const Onnx__TensorProto *tp = g->initializer[i];
    const char *name = tp->name ? tp->name : "";
    loom_tensor *t = loom_params_get(ps, name);
    if (!t) {
      char why[512];
      loom_tensor *made = onnx_tensor_from_proto(tp, im->file.dir, why, sizeof why);
      if (!made) return onnx_fail(im, LOOM_ERR_CORRUPT, "initializer '%s': %s", name, why);
      if (!(made = onnx_on_device(im, made, "initializer", name))) return im->status;
      loom_dtype dt = loom_dtype_of(made);
      bool trainable = dt == LOOM_F32 || dt == LOOM_F64 || dt == LOOM_F16 || dt == LOOM_BF16;
      loom_status st =
          trainable ? loom_params_add(ps, name, made) : loom_params_add_buffer(ps, name, made);
      loom_free(made);
      if (st) return onnx_fail(im, st, "initializer '%s' could not join the parameters", name);
      t = loom_params_get(ps, name);
    }
    onnx_ref r = {.t = {onnx_own(t), onnx_own(loom_retain(t))}, .known = true};
    onnx_define(im, name, &r);
  }
  return im->status;
}

loom_status loom_onnx_forward(loom_onnx_model *m, loom_params *ps, loom_tensor *const *ins, int nin,
                              loom_tensor **outs, int nout) {
  const char *api = "loom_onnx_forward";
  for (int o = 0; outs && o < nout; o++) outs[o] = NULL;
  if (!m || !ps || (nin && !ins) || !outs)
    return lm_fail(LOOM_ERR_NULL, "%s: a NULL model, parameters, inputs or outputs", api);
  onnx_import *im = calloc(1, sizeof *im);
  if (!im) return lm_fail(LOOM_ERR_OOM, "%s: out of memory", api);
  im->file = m->file;
  im->scope = &im->root;
  im->ntraces = 1;
  if (nin > 0 && ins[0]) im->device = loom_device_of(ins[0]);
  const Onnx__GraphProto *g = im->file.model->graph;
  if ((int)g->n_output != nout)
    onnx_fail(im, LOOM_ERR_VALUE, "the model gives %zu outputs; room for %d was given", g->n_output,
              nout);
  if (!im->status && !bind_inputs(im, ins, nin) && !bind_parameters(im, ps))
    for (size_t i = 0; i < g->n_node && !im->status; i++) build_node(im, g->node[i], i);
  for (int o = 0; o < nout && !im->status; o++) {
    onnx_ref r;
    if (!onnx_lookup(im, g->output[o]->name, &r))
      onnx_fail(im, LOOM_ERR_CORRUPT, "graph output '%s' is not computed by the graph",
                g->output[o]->name ? g->output[o]->name : "");
    else
      outs[o] = loom_retain(r.t[0]);
  }
  loom_status st = im->status;
  if (st) {
    for (int o = 0; o < nout; o++) loom_free(outs[o]), outs[o] = NULL;
    lm_fail(st, "%s: '%s': %s", api, m->path, im->error);
  }
  scope_free(&im->root);
  free(im);
  return st;
}

/* One import with the symbols traced from trace_skip on; NULL with *st and why set. */
static loom_program *load_once(const char *path, const loom_onnx_opts *opts, int trace_skip,
                               int *nsymbols, loom_status *st, char *why, size_t why_len) {
  onnx_import *im = calloc(1, sizeof *im);
  if (!im) {
    *st = LOOM_ERR_OOM;
    snprintf(why, why_len, "out of memory");
    return NULL;
  }
  im->opts = opts;
  if (opts) im->device = opts->device;
  im->scope = &im->root;
  im->trace_skip = trace_skip;
  loom_program *prog = NULL;
  program_inputs pi = {0};
  *st = onnx_file_read(&im->file, path, why, why_len);
  if (*st) {
    free(im);
    return NULL;
  }
  if (!add_inputs(im, &pi) && !check_fixed_dims(im) &&
      !add_initializers(im, im->file.model->graph) && !check_supported(im)) {
    im->ntraces = im->nsymbols ? 2 : 1;
    const Onnx__GraphProto *g = im->file.model->graph;
    for (size_t i = 0; i < g->n_node && !im->status; i++) build_node(im, g->node[i], i);
    if (!im->status) {
      lm_errors_quiet_begin();
      prog = compile(im, &pi);
      lm_errors_quiet_end();
      const char *message;
      loom_status why_not = lm_recent_error(&message);
      /* an exporter's arange over a symbolic size (a lowered as_strided) */
      const char *hint = message && strstr(message, "follows no input's size")
                             ? "; fix the dims (loom_onnx_opts.dims, --dim NAME=N) to import it"
                             : "";
      if (!prog && !im->status)
        onnx_fail(im, why_not ? why_not : LOOM_ERR_INTERNAL, "%s%s", message, hint);
    }
  }
  *st = im->status;
  *nsymbols = im->nsymbols;
  if (!prog) snprintf(why, why_len, "%s", im->error);
  free(pi.ins);
  import_free(im);
  free(im);
  return prog;
}

/* A symbolic model is traced at sizes its fixed dims do not have; a constant
 * of the graph may still sit next to them (passes/symbolic.c refuses a number
 * within 1 of a traced size, which could be that size): the import is tried
 * again at larger sizes before it is refused. */
#define TRACE_TRIES 3

loom_program *loom_onnx_load(const char *path, const loom_onnx_opts *opts) {
  const char *api = "loom_onnx_load";
  if (!path) {
    lm_fail(LOOM_ERR_NULL, "%s: path is NULL", api);
    return NULL;
  }
  if (opts && ((opts->ndims && !opts->dims) || (opts->ninputs && !opts->inputs) ||
               opts->ndims < 0 || opts->ninputs < 0)) {
    lm_fail(LOOM_ERR_NULL, "%s: opts->dims or opts->inputs is NULL with a count", api);
    return NULL;
  }
  char why[1024], first[1024] = "";
  loom_status st = LOOM_OK, first_st = LOOM_OK;
  int nsymbols = 0;
  for (int t = 0; t < TRACE_TRIES; t++) {
    loom_program *prog = load_once(path, opts, 6 * t, &nsymbols, &st, why, sizeof why);
    if (prog) return prog;
    if (t == 0) first_st = st, snprintf(first, sizeof first, "%s", why);
    if (!nsymbols || st != LOOM_ERR_SHAPE) break;
  }
  lm_fail(first_st, "%s: '%s': %s", api, path, first);
  return NULL;
}
