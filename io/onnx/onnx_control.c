/* Control flow: If, Loop and Scan, whose bodies are subgraphs. loom's
 * programs have no control flow, so the import unrolls it:
 *  - If with a condition known at import builds the branch taken; with a
 *    condition computed at run time, both branches and a select between
 *    their outputs (which must then agree in shape and dtype);
 *  - Loop runs its body once per iteration at import (the trip count and the
 *    condition must be known at import, up to MAX_UNROLL iterations), its
 *    scan outputs stacked;
 *  - Scan (opset 9 on) runs its body once per position of its scan inputs.
 * Each body is built in a scope of its own in every trace (onnx_subgraph). */
#include <stdlib.h>
#include <string.h>

#include "io/onnx/onnx.h"

#define MAX_UNROLL 4096
#define MAX_VALUES ONNX_MAX_NODE_IO

static const Onnx__GraphProto *graph_attr(const Onnx__NodeProto *p, const char *name) {
  for (size_t i = 0; i < p->n_attribute; i++)
    if (p->attribute[i]->name && strcmp(p->attribute[i]->name, name) == 0)
      return p->attribute[i]->g;
  return NULL;
}

static int64_t int_attr(const Onnx__NodeProto *p, const char *name, int64_t fallback) {
  for (size_t i = 0; i < p->n_attribute; i++)
    if (p->attribute[i]->name && strcmp(p->attribute[i]->name, name) == 0 && p->attribute[i]->has_i)
      return p->attribute[i]->i;
  return fallback;
}

/* The ints attribute name, or NULL (count 0). */
static const int64_t *ints_attr(const Onnx__NodeProto *p, const char *name, size_t *count) {
  for (size_t i = 0; i < p->n_attribute; i++)
    if (p->attribute[i]->name && strcmp(p->attribute[i]->name, name) == 0) {
      *count = p->attribute[i]->n_ints;
      return p->attribute[i]->ints;
    }
  *count = 0;
  return NULL;
}

static void drop(onnx_ref *r, int n) {
  for (int i = 0; i < n; i++)
    for (int t = 0; t < ONNX_TRACES; t++) onnx_drop(r[i].t[t]), r[i].t[t] = NULL;
}

/* A known scalar's value in every trace (they must agree), as int64. */
static loom_status known_int(onnx_import *im, const char *label, const char *what, const char *name,
                             onnx_ref *r, int64_t *out) {
  if (!r->known)
    return onnx_fail(im, LOOM_ERR_VALUE,
                     "%s: its %s ('%s') is computed from the model's inputs, but loom needs its "
                     "values when it imports the model (it unrolls control flow)",
                     label, what, name);
  int64_t v[ONNX_TRACES] = {0};
  for (int t = 0; t < onnx_ntraces(im); t++) {
    if (loom_numel(r->t[t]) != 1)
      return onnx_fail(im, LOOM_ERR_SHAPE, "%s: its %s holds %lld values, not 1", label, what,
                       (long long)loom_numel(r->t[t]));
    loom_tensor *c = loom_cast(r->t[t], LOOM_I64);
    loom_status st = loom_copy_to_host(c, &v[t], sizeof v[t]);
    loom_free(c);
    if (st) return onnx_fail(im, st, "%s: its %s could not be computed", label, what);
    if (t && v[t] != v[0])
      return onnx_fail(im, LOOM_ERR_SHAPE,
                       "%s: its %s follows the model's symbolic dims (%lld and %lld at two sizes); "
                       "fix the dims (loom_onnx_opts.dims)",
                       label, what, (long long)v[0], (long long)v[t]);
  }
  *out = v[0];
  return LOOM_OK;
}

/* A constant in every trace. */
static onnx_ref constant(onnx_import *im, int64_t value, loom_dtype dtype) {
  onnx_ref r = {.known = true};
  for (int t = 0; t < ONNX_TRACES; t++)
    r.t[t] = onnx_own(loom_full(LOOM_SHAPE0, (double)value, dtype, onnx_import_device(im)));
  return r;
}

static loom_status build_if(onnx_import *im, const Onnx__NodeProto *p, const char *label) {
  const Onnx__GraphProto *then_g = graph_attr(p, "then_branch"),
                         *else_g = graph_attr(p, "else_branch");
  onnx_ref cond;
  if (!then_g || !else_g || p->n_input < 1 || !onnx_lookup(im, p->input[0], &cond))
    return onnx_fail(im, LOOM_ERR_CORRUPT, "%s: needs a condition and both branches", label);
  int nout = (int)p->n_output;
  if (nout > MAX_VALUES) return onnx_fail(im, LOOM_ERR_CORRUPT, "%s: %d outputs", label, nout);
  onnx_ref outs[MAX_VALUES], other[MAX_VALUES];
  if (cond.known) {
    int64_t taken;
    loom_status st = known_int(im, label, "condition", p->input[0], &cond, &taken);
    if (st) return st;
    if ((st = onnx_subgraph(im, taken ? then_g : else_g, label, NULL, 0, outs, nout))) return st;
    for (int o = 0; o < nout && !onnx_status(im); o++) onnx_define(im, p->output[o], &outs[o]);
    return onnx_status(im);
  }
  loom_status st = onnx_subgraph(im, then_g, label, NULL, 0, outs, nout);
  if (st) return st;
  if ((st = onnx_subgraph(im, else_g, label, NULL, 0, other, nout))) {
    drop(outs, nout);
    return st;
  }
  for (int o = 0; o < nout; o++) {
    onnx_ref r = {.known = false, .symbolic = true};
    for (int t = 0; t < onnx_ntraces(im) && !onnx_status(im); t++) {
      loom_shape a = loom_shape_of(outs[o].t[t]), b = loom_shape_of(other[o].t[t]);
      bool same = a.ndim == b.ndim && loom_dtype_of(outs[o].t[t]) == loom_dtype_of(other[o].t[t]);
      for (int d = 0; same && d < a.ndim; d++) same = a.dim[d] == b.dim[d];
      if (!same) {
        onnx_fail(im, LOOM_ERR_SHAPE,
                  "%s: the condition is computed at run time and output %d's branches differ in "
                  "shape or dtype, which a compiled program cannot follow",
                  label, o);
        break;
      }
      r.t[t] = onnx_own(loom_where(cond.t[t], outs[o].t[t], other[o].t[t]));
    }
    for (int t = onnx_ntraces(im); t < ONNX_TRACES; t++) r.t[t] = onnx_own(loom_retain(r.t[0]));
    if (onnx_status(im)) {
      drop(&r, 1);
      break;
    }
    onnx_define(im, p->output[o], &r);
  }
  drop(outs, nout), drop(other, nout);
  return onnx_status(im);
}

/* Per-iteration tensors stacked along axis (the scan outputs). */
static loom_status stack_outputs(onnx_import *im, const char *label, onnx_ref *const *steps,
                                 int nsteps, int which, int64_t axis, bool reverse, onnx_ref *out) {
  memset(out, 0, sizeof *out);
  if (nsteps == 0)
    return onnx_fail(im, LOOM_ERR_SHAPE,
                     "%s: no iterations, so its scan output %d has no shape loom can give it",
                     label, which);
  out->known = true;
  for (int t = 0; t < ONNX_TRACES; t++) {
    loom_tensor **ts = malloc((size_t)nsteps * sizeof *ts);
    if (!ts) return onnx_fail(im, LOOM_ERR_OOM, "out of memory");
    for (int i = 0; i < nsteps; i++) {
      ts[i] = steps[reverse ? nsteps - 1 - i : i][which].t[t];
      out->known &= steps[i][which].known;
    }
    int rank = loom_ndim(ts[0]) + 1;
    out->t[t] = onnx_own(loom_stack(ts, nsteps, (int)(axis < 0 ? axis + rank : axis)));
    free(ts);
  }
  return LOOM_OK;
}

static loom_status build_loop(onnx_import *im, const Onnx__NodeProto *p, const char *label) {
  const Onnx__GraphProto *body = graph_attr(p, "body");
  if (!body || p->n_input < 2)
    return onnx_fail(im, LOOM_ERR_CORRUPT, "%s: needs a body, a trip count and a condition", label);
  int ncarried = (int)p->n_input - 2, nscan = (int)body->n_output - 1 - ncarried;
  if (ncarried > MAX_VALUES || nscan < 0 || nscan > MAX_VALUES ||
      (int)p->n_output != ncarried + nscan)
    return onnx_fail(im, LOOM_ERR_CORRUPT, "%s: %d carried values, %zu body outputs, %zu outputs",
                     label, ncarried, body->n_output, p->n_output);
  int64_t trips = -1, cond = 1;
  onnx_ref r;
  if (p->input[0][0]) {
    if (!onnx_lookup(im, p->input[0], &r))
      return onnx_fail(im, LOOM_ERR_CORRUPT, "%s: its trip count is undefined", label);
    if (known_int(im, label, "trip count", p->input[0], &r, &trips)) return onnx_status(im);
  }
  if (p->input[1][0]) {
    if (!onnx_lookup(im, p->input[1], &r))
      return onnx_fail(im, LOOM_ERR_CORRUPT, "%s: its condition is undefined", label);
    if (known_int(im, label, "condition", p->input[1], &r, &cond)) return onnx_status(im);
  }
  if (trips < 0 && cond) trips = MAX_UNROLL + 1; /* until the condition says */
  onnx_ref carried[MAX_VALUES];
  for (int i = 0; i < ncarried; i++) {
    if (!onnx_lookup(im, p->input[2 + i], &carried[i])) {
      drop(carried, i);
      return onnx_fail(im, LOOM_ERR_CORRUPT, "%s: its carried value %d is undefined", label, i);
    }
    for (int t = 0; t < ONNX_TRACES; t++) onnx_own(loom_retain(carried[i].t[t]));
  }
  onnx_ref **steps = calloc(MAX_UNROLL + 1, sizeof *steps);
  int nsteps = 0;
  if (!steps) {
    drop(carried, ncarried);
    return onnx_fail(im, LOOM_ERR_OOM, "out of memory");
  }
  for (int64_t it = 0; it < trips && cond && !onnx_status(im); it++) {
    if (it == MAX_UNROLL) {
      onnx_fail(im, LOOM_ERR_VALUE, "%s: more than %d iterations; loom unrolls loops", label,
                MAX_UNROLL);
      break;
    }
    onnx_ref args[2 + MAX_VALUES], outs[1 + 2 * MAX_VALUES];
    args[0] = constant(im, it, LOOM_I64);
    args[1] = constant(im, 1, LOOM_BOOL);
    for (int i = 0; i < ncarried; i++) args[2 + i] = carried[i];
    loom_status st = onnx_subgraph(im, body, label, args, 2 + ncarried, outs, 1 + ncarried + nscan);
    drop(args, 2);
    if (st) break;
    if (known_int(im, label, "body's condition", body->output[0]->name, &outs[0], &cond)) {
      drop(outs, 1 + ncarried + nscan);
      break;
    }
    drop(carried, ncarried);
    for (int i = 0; i < ncarried; i++) carried[i] = outs[1 + i];
    steps[nsteps] = malloc((size_t)(nscan ? nscan : 1) * sizeof **steps);
    for (int s = 0; s < nscan; s++) steps[nsteps][s] = outs[1 + ncarried + s];
    nsteps++;
    drop(outs, 1);
  }
  for (int i = 0; i < ncarried && !onnx_status(im); i++) {
    onnx_define(im, p->output[i], &carried[i]);
    carried[i].t[0] = carried[i].t[1] = NULL;
  }
  for (int s = 0; s < nscan && !onnx_status(im); s++) {
    onnx_ref stacked;
    if (!stack_outputs(im, label, steps, nsteps, s, 0, false, &stacked))
      onnx_define(im, p->output[ncarried + s], &stacked);
  }
  drop(carried, ncarried);
  for (int i = 0; i < nsteps; i++) {
    drop(steps[i], nscan);
    free(steps[i]);
  }
  free(steps);
  return onnx_status(im);
}

static loom_status build_scan(onnx_import *im, const Onnx__NodeProto *p, const char *label,
                              int64_t opset) {
  if (opset < 9)
    return onnx_fail(im, LOOM_ERR_VALUE,
                     "%s: Scan before opset 9 (a batch axis and sequence_lens) is not imported",
                     label);
  const Onnx__GraphProto *body = graph_attr(p, "body");
  int64_t m = int_attr(p, "num_scan_inputs", -1);
  int n = (int)p->n_input - (int)m;
  if (!body || m < 1 || n < 0 || n > MAX_VALUES || m > MAX_VALUES)
    return onnx_fail(im, LOOM_ERR_CORRUPT, "%s: %lld scan inputs of %zu inputs", label,
                     (long long)m, p->n_input);
  int nscan_out = (int)body->n_output - n;
  if (nscan_out < 0 || nscan_out > MAX_VALUES || (int)p->n_output != n + nscan_out)
    return onnx_fail(im, LOOM_ERR_CORRUPT, "%s: %zu body outputs for %d states", label,
                     body->n_output, n);
  size_t n_in_axes, n_in_dirs, n_out_axes, n_out_dirs;
  const int64_t *in_axes = ints_attr(p, "scan_input_axes", &n_in_axes);
  const int64_t *in_dirs = ints_attr(p, "scan_input_directions", &n_in_dirs);
  const int64_t *out_axes = ints_attr(p, "scan_output_axes", &n_out_axes);
  const int64_t *out_dirs = ints_attr(p, "scan_output_directions", &n_out_dirs);
  onnx_ref state[MAX_VALUES], xs[MAX_VALUES];
  for (int i = 0; i < n + (int)m; i++) {
    onnx_ref *r = i < n ? &state[i] : &xs[i - n];
    if (!onnx_lookup(im, p->input[i], r)) {
      drop(state, i < n ? i : n);
      return onnx_fail(im, LOOM_ERR_CORRUPT, "%s: input %d is undefined", label, i);
    }
    if (i < n)
      for (int t = 0; t < ONNX_TRACES; t++) onnx_own(loom_retain(r->t[t]));
  }
  int64_t length = -1;
  int axis_of[MAX_VALUES];
  for (int j = 0; j < m && !onnx_status(im); j++) {
    int rank = loom_ndim(xs[j].t[0]);
    int64_t a = (size_t)j < n_in_axes ? in_axes[j] : 0;
    if (a < -rank || a >= rank) {
      onnx_fail(im, LOOM_ERR_AXIS, "%s: scan input axis %lld of a rank-%d input", label,
                (long long)a, rank);
      break;
    }
    axis_of[j] = (int)(a < 0 ? a + rank : a);
    int64_t len = loom_shape_of(xs[j].t[0]).dim[axis_of[j]];
    if (len != loom_shape_of(xs[j].t[onnx_ntraces(im) - 1]).dim[axis_of[j]])
      onnx_fail(im, LOOM_ERR_SHAPE,
                "%s: its sequence length follows a symbolic dim; loom unrolls Scan over a fixed "
                "length",
                label);
    else if (length >= 0 && len != length)
      onnx_fail(im, LOOM_ERR_SHAPE, "%s: scan inputs of lengths %lld and %lld", label,
                (long long)length, (long long)len);
    length = len;
  }
  if (!onnx_status(im) && length > MAX_UNROLL)
    onnx_fail(im, LOOM_ERR_VALUE, "%s: %lld steps; loom unrolls Scan up to %d", label,
              (long long)length, MAX_UNROLL);
  onnx_ref **steps =
      onnx_status(im) ? NULL : calloc((size_t)(length > 0 ? length : 1), sizeof *steps);
  if (!onnx_status(im) && !steps) onnx_fail(im, LOOM_ERR_OOM, "out of memory");
  int nsteps = 0;
  for (int64_t s = 0; s < length && !onnx_status(im); s++) {
    onnx_ref args[2 * MAX_VALUES], outs[2 * MAX_VALUES];
    for (int i = 0; i < n; i++) args[i] = state[i];
    for (int j = 0; j < m; j++) {
      int64_t at = (size_t)j < n_in_dirs && in_dirs[j] ? length - 1 - s : s;
      args[n + j] = (onnx_ref){.known = xs[j].known, .symbolic = xs[j].symbolic};
      for (int t = 0; t < ONNX_TRACES; t++) {
        loom_tensor *slice = loom_slice(xs[j].t[t], axis_of[j], at, at + 1, 1);
        args[n + j].t[t] = onnx_own(loom_squeeze(slice, axis_of[j]));
        loom_free(slice);
      }
    }
    loom_status st = onnx_subgraph(im, body, label, args, n + (int)m, outs, n + nscan_out);
    drop(args + n, (int)m);
    if (st) break;
    drop(state, n);
    for (int i = 0; i < n; i++) state[i] = outs[i];
    steps[nsteps] = malloc((size_t)(nscan_out ? nscan_out : 1) * sizeof **steps);
    for (int k = 0; k < nscan_out; k++) steps[nsteps][k] = outs[n + k];
    nsteps++;
  }
  for (int i = 0; i < n && !onnx_status(im); i++) {
    onnx_define(im, p->output[i], &state[i]);
    state[i].t[0] = state[i].t[1] = NULL;
  }
  for (int k = 0; k < nscan_out && !onnx_status(im); k++) {
    onnx_ref stacked;
    int64_t axis = (size_t)k < n_out_axes ? out_axes[k] : 0;
    bool reverse = (size_t)k < n_out_dirs && out_dirs[k];
    if (!stack_outputs(im, label, steps, nsteps, k, axis, reverse, &stacked))
      onnx_define(im, p->output[n + k], &stacked);
  }
  drop(state, n);
  for (int i = 0; i < nsteps; i++) {
    drop(steps[i], nscan_out);
    free(steps[i]);
  }
  free(steps);
  return onnx_status(im);
}

loom_status onnx_build_control(onnx_import *im, const Onnx__NodeProto *p, const char *label,
                               int64_t opset) {
  if (strcmp(p->op_type, "If") == 0) return build_if(im, p, label);
  if (strcmp(p->op_type, "Loop") == 0) return build_loop(im, p, label);
  return build_scan(im, p, label, opset);
}

const onnx_op onnx_ops_control[] = {
    ONNX_OP_FLAGS(If, NULL, ONNX_CONTROL),
    ONNX_OP_FLAGS(Loop, NULL, ONNX_CONTROL),
    ONNX_OP_FLAGS(Scan, NULL, ONNX_CONTROL),
};
const int onnx_ops_control_count = sizeof onnx_ops_control / sizeof onnx_ops_control[0];
