/* `loom inspect MODEL.onnx`'s view of the file itself: what it declares and
 * which of its nodes loom cannot import, read without building anything, so
 * that a model loom refuses is still described. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/onnx/onnx.h"

static void print_type(FILE *out, const Onnx__ValueInfoProto *vi) {
  const Onnx__TypeProto *t = vi->type;
  if (!t || t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
    fprintf(out, "(not a tensor)");
    return;
  }
  const char *name;
  int held = onnx_dtype_held(t->tensor_type->elem_type, &name);
  if (onnx_dtype_is_narrow(t->tensor_type->elem_type))
    fprintf(out, "%s (held as %s) [", name, loom_dtype_name((loom_dtype)held));
  else
    fprintf(out, "%s [", name);
  const Onnx__TensorShapeProto *s = t->tensor_type->shape;
  for (size_t d = 0; s && d < s->n_dim; d++) {
    const Onnx__TensorShapeProto__Dimension *dim = s->dim[d];
    if (d) fprintf(out, ", ");
    if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
      fprintf(out, "%lld", (long long)dim->dim_value);
    else if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM)
      fprintf(out, "%s", dim->dim_param);
    else
      fprintf(out, "%s_dim%zu", vi->name ? vi->name : "?", d);
  }
  fprintf(out, "%s]", s ? "" : "unknown rank");
}

typedef struct op_count {
  const char *op;
  int count;
  bool supported;
} op_count;

static int by_count(const void *a, const void *b) {
  const op_count *x = a, *y = b;
  return x->count != y->count ? y->count - x->count : strcmp(x->op, y->op);
}

loom_status onnx_describe(const char *path, FILE *out) {
  onnx_file f;
  char why[512];
  loom_status st = onnx_file_read(&f, path, why, sizeof why);
  if (st) {
    fprintf(out, "cannot read %s: %s\n", path, why);
    return st;
  }
  const Onnx__ModelProto *m = f.model;
  const Onnx__GraphProto *g = m->graph;
  fprintf(out, "model: %s (ONNX, IR version %lld, ai.onnx opset %lld%s%s)\n", path,
          (long long)m->ir_version, (long long)f.opset, m->producer_name ? ", from " : "",
          m->producer_name ? m->producer_name : "");
  size_t inputs = 0;
  for (size_t i = 0; i < g->n_input; i++) {
    bool init = false;
    for (size_t k = 0; k < g->n_initializer && !init; k++)
      init = g->initializer[k]->name && g->input[i]->name &&
             strcmp(g->initializer[k]->name, g->input[i]->name) == 0;
    inputs += !init;
  }
  fprintf(out, "inputs: %zu\n", inputs);
  for (size_t i = 0, k = 0; i < g->n_input; i++) {
    bool init = false;
    for (size_t j = 0; j < g->n_initializer && !init; j++)
      init = g->initializer[j]->name && g->input[i]->name &&
             strcmp(g->initializer[j]->name, g->input[i]->name) == 0;
    if (init) continue;
    fprintf(out, "  %zu  %-24s ", k++, g->input[i]->name ? g->input[i]->name : "?");
    print_type(out, g->input[i]);
    fprintf(out, "\n");
  }
  fprintf(out, "outputs: %zu\n", g->n_output);
  for (size_t i = 0; i < g->n_output; i++) {
    fprintf(out, "  %zu  %-24s ", i, g->output[i]->name ? g->output[i]->name : "?");
    print_type(out, g->output[i]);
    fprintf(out, "\n");
  }
  op_count *ops = calloc(g->n_node ? g->n_node : 1, sizeof *ops);
  size_t nops = 0, unsupported = 0;
  for (size_t i = 0; ops && i < g->n_node; i++) {
    const Onnx__NodeProto *p = g->node[i];
    const char *op = p->op_type ? p->op_type : "?";
    bool onnx_domain = !p->domain || !p->domain[0] || strcmp(p->domain, "ai.onnx") == 0;
    size_t k = 0;
    while (k < nops && strcmp(ops[k].op, op) != 0) k++;
    if (k == nops) ops[nops++] = (op_count){op, 0, onnx_domain && onnx_find_op(op) != NULL};
    ops[k].count++;
    unsupported += !ops[k].supported;
  }
  if (ops) qsort(ops, nops, sizeof *ops, by_count);
  fprintf(out, "ops: %zu kinds, %zu nodes\n", nops, g->n_node);
  for (size_t k = 0; k < nops; k++)
    fprintf(out, "  %-24s %d%s\n", ops[k].op, ops[k].count,
            ops[k].supported ? "" : "  (unsupported)");
  unsigned long long bytes = 0;
  for (size_t i = 0; i < g->n_initializer; i++) {
    const Onnx__TensorProto *t = g->initializer[i];
    /* the bytes loom holds them in */
    int dt = onnx_dtype_held(t->data_type, NULL);
    unsigned long long n = 1;
    for (size_t d = 0; d < t->n_dims; d++) n *= t->dims[d] > 0 ? (unsigned long long)t->dims[d] : 0;
    bytes += n * (dt >= 0 ? loom_dtype_size((loom_dtype)dt) : 0);
  }
  fprintf(out, "parameters: %zu initializers, %llu bytes\n", g->n_initializer, bytes);
  fprintf(out, "unsupported nodes: %zu\n", unsupported);
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *p = g->node[i];
    bool onnx_domain = !p->domain || !p->domain[0] || strcmp(p->domain, "ai.onnx") == 0;
    if (onnx_domain && p->op_type && onnx_find_op(p->op_type)) continue;
    fprintf(out, "  node %zu %s%s%s (%s%s%s)\n", i, p->name ? "'" : "", p->name ? p->name : "",
            p->name ? "'" : "", p->op_type ? p->op_type : "?", onnx_domain ? "" : " in ",
            onnx_domain ? "" : p->domain);
  }
  free(ops);
  onnx_file_close(&f);
  return LOOM_OK;
}
