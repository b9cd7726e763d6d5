/* loom_print: PyTorch's text form of a tensor (4 decimals or integral floats,
 * aligned columns, summarized with "..." beyond 1000 elements). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

typedef struct fmt {
  loom_dtype dtype;
  bool integral; /* every finite float is a whole number */
  bool sci;      /* scientific notation */
  int width;
  bool summarize;
} fmt;

static double at(const lm_node *n, int64_t i) {
  return lm_dtype_load_double(n->dtype,
                              (const char *)n->data + (size_t)i * loom_dtype_size(n->dtype));
}

static int format_one(const fmt *f, double v, char *buf, size_t len) {
  if (f->dtype == LOOM_BOOL) return snprintf(buf, len, "%s", v != 0 ? "True" : "False");
  if (!loom_dtype_is_float(f->dtype)) return snprintf(buf, len, "%.0f", v);
  if (isnan(v)) return snprintf(buf, len, "nan");
  if (isinf(v)) return snprintf(buf, len, v > 0 ? "inf" : "-inf");
  if (f->sci) return snprintf(buf, len, "%.4e", v);
  if (f->integral) return snprintf(buf, len, "%.0f.", v);
  return snprintf(buf, len, "%.4f", v);
}

/* Element i as text: integers exactly (an I64 through a double lost its low digits). */
static int format_at(const fmt *f, const lm_node *n, int64_t i, char *buf, size_t len) {
  if (n->dtype == LOOM_I64)
    return snprintf(buf, len, "%lld", (long long)((const int64_t *)n->data)[i]);
  return format_one(f, at(n, i), buf, len);
}

/* torch's _Formatter: integral floats print as "3.", others with 4 decimals,
 * scientific when the nonzero finite magnitudes span more than 1000x or
 * reach 1e8 (or go below 1e-4); the width is the widest such value. */
static void choose_format(const lm_node *n, fmt *f) {
  int64_t numel = lm_shape_numel(&n->shape);
  double maxabs = 0, minabs = INFINITY;
  bool any = false;
  f->integral = true;
  f->width = 1;
  char buf[64];
  if (!loom_dtype_is_float(n->dtype)) {
    for (int64_t i = 0; i < numel; i++) {
      int w = format_at(f, n, i, buf, sizeof buf);
      if (w > f->width) f->width = w;
    }
    return;
  }
  for (int64_t i = 0; i < numel; i++) {
    double v = at(n, i);
    if (!isfinite(v) || v == 0) continue;
    any = true;
    if (v != floor(v)) f->integral = false;
    double a = fabs(v);
    if (a > maxabs) maxabs = a;
    if (a < minabs) minabs = a;
  }
  if (any) f->sci = maxabs / minabs > 1000.0 || maxabs > 1.0e8 || (!f->integral && minabs < 1.0e-4);
  for (int64_t i = 0; i < numel; i++) {
    double v = at(n, i);
    if (!isfinite(v) || v == 0) continue;
    int w = format_one(f, v, buf, sizeof buf);
    if (w > f->width) f->width = w;
  }
}

#define EDGE 3
#define LINE_WIDTH 80

static void element(FILE *out, const lm_node *n, const fmt *f, int64_t offset) {
  char buf[64];
  format_at(f, n, offset, buf, sizeof buf);
  fprintf(out, "%*s", f->width, buf);
}

/* torch's _vector_str: wraps to 80 columns, " ..." stands for the middle. */
static void vector_str(FILE *out, const lm_node *n, const fmt *f, int64_t offset, int indent) {
  int64_t len = n->shape.dim[n->shape.ndim - 1];
  int per_line = (LINE_WIDTH - indent) / (f->width + 2);
  if (per_line < 1) per_line = 1;
  bool cut = f->summarize && len > 2 * EDGE;
  int64_t count = cut ? 2 * EDGE + 1 : len;
  fputc('[', out);
  for (int64_t k = 0; k < count; k++) {
    if (k > 0) {
      if (k % per_line == 0)
        fprintf(out, ",\n%*s", indent + 1, "");
      else
        fputs(", ", out);
    }
    if (cut && k == EDGE)
      fputs(" ...", out);
    else
      element(out, n, f, offset + (cut && k > EDGE ? len - (count - k) : k));
  }
  fputc(']', out);
}

static void tensor_str(FILE *out, const lm_node *n, const fmt *f, int d, int64_t offset,
                       const int64_t *strides, int indent) {
  const loom_shape *s = &n->shape;
  if (d == s->ndim - 1) {
    vector_str(out, n, f, offset, indent);
    return;
  }
  int64_t len = s->dim[d];
  bool cut = f->summarize && len > 2 * EDGE;
  int64_t count = cut ? 2 * EDGE + 1 : len;
  fputc('[', out);
  for (int64_t k = 0; k < count; k++) {
    if (k > 0) {
      fputc(',', out);
      for (int nl = 0; nl < s->ndim - 1 - d; nl++) fputc('\n', out);
      fprintf(out, "%*s", indent + 1, "");
    }
    int64_t i = cut && k > EDGE ? len - (count - k) : k;
    if (cut && k == EDGE)
      fputs("...", out);
    else
      tensor_str(out, n, f, d + 1, offset + i * strides[d], strides, indent + 1);
  }
  fputc(']', out);
}

/* torch names the dtype when it is not what the values imply: always for an
 * empty tensor (except the default float), and for non-default dtypes. */
static void put_torch_dtype(FILE *out, loom_dtype dt, bool empty) {
  /* implied: float32 always, int64 and bool by values */
  bool implied = dt == LOOM_F32 || (!empty && (dt == LOOM_I64 || dt == LOOM_BOOL));
  if (!implied) fprintf(out, ", dtype=%s", lm_dtype_info_of(dt)->torch);
}

loom_status loom_fprint(FILE *out, loom_tensor *t) {
  if (!out) return lm_fail(LOOM_ERR_NULL, "loom_print: FILE is NULL");
  if (!t) return lm_fail(LOOM_ERR_NULL, "loom_print: tensor is NULL");
  if (t->status != LOOM_OK) {
    fprintf(out, "tensor(error: %s: %s)\n", loom_status_name(t->status), t->message);
    return LOOM_OK;
  }
  loom_status st = lm_realize_nodes(&t->node, 1);
  if (st != LOOM_OK) return st;
  const lm_node *n = t->node;
  lm_node *host = NULL; /* a device tensor's values, copied to print them */
  if (n->device.type == LOOM_DEVICE_CUDA) {
    st = lm_leaf_copy("loom_print", n->shape, n->dtype, LOOM_CPU, n->data, n->device, &host);
    if (st != LOOM_OK) return st;
    n = host;
  }
  fmt f = {.dtype = n->dtype};
  int64_t numel = lm_shape_numel(&n->shape);
  f.summarize = numel > 1000;
  choose_format(n, &f);
  int64_t strides[LOOM_MAX_DIMS];
  lm_shape_strides(&n->shape, strides);
  fputs("tensor(", out);
  if (numel == 0) {
    fputs("[]", out);
    if (n->shape.ndim != 1) {
      fputs(", size=(", out);
      for (int d = 0; d < n->shape.ndim; d++)
        fprintf(out, d ? ", %lld" : "%lld", (long long)n->shape.dim[d]);
      fputs(n->shape.ndim == 1 ? ",)" : ")", out);
    }
  } else if (n->shape.ndim == 0) {
    element(out, n, &f, 0);
  } else {
    tensor_str(out, n, &f, 0, 0, strides, 7);
  }
  if (host) fprintf(out, ", device='cuda:%d'", t->node->device.index);
  put_torch_dtype(out, n->dtype, numel == 0);
  fprintf(out, ")\n");
  lm_node_release(host);
  return LOOM_OK;
}

loom_status loom_print(loom_tensor *t) { return loom_fprint(stdout, t); }
