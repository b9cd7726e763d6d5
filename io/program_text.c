/* A compiled program as text: the file loom_program_save writes (the format
 * is docs/PROGRAM_FORMAT.md; io/program_parse.c reads it back), the
 * readable dump of its IR and schedule, and a Graphviz picture. All three
 * write a graph position the same way:
 *
 *   %5 = add f32[8,32] %3 %4
 *   %7 = sum f32[8,1] %6 axes=[1]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "io/program_text.h"
#include "io/step_kinds.h"
#include "runtime/program.h"
#include "runtime/runtime.h"

/* ------------------------------------------------------------ a growing string */

typedef struct lm_step_text {
  char *s;
  size_t len, cap;
  bool oom;                          /* an append failed: the text is incomplete */
  bool from_end;                     /* bounds from the end are written (a symbolic program's) */
  bool follows;                      /* input-free leaves' following dims are written (likewise) */
  const struct computing *computing; /* the listing's: the nodes each step computes */
} text;

static void vput(text *t, const char *fmt, va_list ap) {
  if (t->oom) return;
  va_list again;
  va_copy(again, ap);
  int need = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
  if (need < 0) {
    t->oom = true;
  } else if (t->s && t->len + (size_t)need < t->cap) {
    t->len += (size_t)need;
  } else {
    size_t cap = t->cap ? t->cap : 4096;
    while (cap <= t->len + (size_t)need) cap *= 2;
    char *grown = realloc(t->s, cap);
    if (!grown) {
      t->oom = true;
    } else {
      t->s = grown, t->cap = cap;
      vsnprintf(t->s + t->len, t->cap - t->len, fmt, again);
      t->len += (size_t)need;
    }
  }
  va_end(again);
}

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vput(t, fmt, ap);
  va_end(ap);
}

void lm_step_text_put(lm_step_text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vput(t, fmt, ap);
  va_end(ap);
}

/* Spaces up to column col of the current line (at least one). */
static void pad_to(text *t, size_t line_start, size_t col) {
  size_t at = t->len - line_start;
  put(t, "%*s", at < col ? (int)(col - at) : 1, "");
}

/* ------------------------------------------------------------ numbers */

const char *lm_hex_double(double v, char buf[LM_HEX_DOUBLE_LEN]) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  const char *sign = bits >> 63 ? "-" : "";
  int biased = (int)((bits >> 52) & 0x7ff);
  uint64_t frac = bits & ((UINT64_C(1) << 52) - 1);
  if (biased == 0x7ff) {
    snprintf(buf, LM_HEX_DOUBLE_LEN, "%s%s", sign, frac ? "nan" : "inf");
    return buf;
  }
  if (biased == 0 && frac == 0) {
    snprintf(buf, LM_HEX_DOUBLE_LEN, "%s0x0p+0", sign);
    return buf;
  }
  /* 13 hex digits of fraction, trailing zeros dropped; subnormals 0x0.hhh p-1022 */
  char digits[14];
  int nd = 0;
  for (int i = 0; i < 13; i++) digits[i] = "0123456789abcdef"[(frac >> (48 - 4 * i)) & 0xf];
  for (nd = 13; nd > 0 && digits[nd - 1] == '0'; nd--) {
  }
  digits[nd] = 0;
  int lead = biased ? 1 : 0, exp = biased ? biased - 1023 : -1022;
  snprintf(buf, LM_HEX_DOUBLE_LEN, "%s0x%d%s%sp%+d", sign, lead, nd ? "." : "", digits, exp);
  return buf;
}

/* ------------------------------------------------------------ one position */

static void put_type(text *t, loom_dtype dtype, const loom_shape *s) {
  put(t, "%s[", loom_dtype_name(dtype));
  for (int d = 0; d < s->ndim; d++) put(t, d ? ",%lld" : "%lld", (long long)s->dim[d]);
  put(t, "]");
}

static void put_list(text *t, const char *key, const int64_t *v, int n) {
  put(t, " %s=[", key);
  for (int i = 0; i < n; i++) put(t, i ? ",%lld" : "%lld", (long long)v[i]);
  put(t, "]");
}

/* An optional list of per-dim flags: written only when one is set. */
static void put_flags(text *t, const char *key, const uint8_t *flags, int nd) {
  int64_t v[LOOM_MAX_DIMS];
  bool any = false;
  for (int d = 0; d < nd; d++) v[d] = flags[d], any |= flags[d] != 0;
  if (any) put_list(t, key, v, nd);
}

static void put_f64(text *t, const char *key, double v) {
  char buf[LM_HEX_DOUBLE_LEN];
  put(t, " %s=%s", key, lm_hex_double(v, buf));
}

static const char *rand_kind_name(lm_rand_kind kind) {
  return kind == LM_RAND_UNIFORM ? "uniform" : kind == LM_RAND_NORMAL ? "normal" : "bernoulli";
}

/* The op's arguments, each " key=value", in the order the format fixes. */
static void put_args(text *t, const lm_node *n) {
  int nd = n->shape.ndim;
  int64_t v[LOOM_MAX_DIMS];
  switch (lm_op_table[n->op].arg) {
  case LM_ARG_NONE: break;
  case LM_ARG_VALUE: put_f64(t, "value", n->arg.f); break;
  case LM_ARG_IOTA:
    put_f64(t, "start", n->arg.iota.start);
    put_f64(t, "step", n->arg.iota.step);
    if (t->from_end) put_flags(t, "from_end", &n->arg.iota.from_end, 1);
    break;
  case LM_ARG_RAND:
    put(t, " kind=%s", rand_kind_name(n->arg.rand.kind));
    put_f64(t, "p", n->arg.rand.p);
    put(t, " key=0x%08x,0x%08x", (unsigned)n->arg.rand.key.k[0], (unsigned)n->arg.rand.key.k[1]);
    break;
  case LM_ARG_AXES: {
    int count = 0;
    for (int a = 0; a < LOOM_MAX_DIMS; a++)
      if (n->arg.axes & (1u << a)) v[count++] = a;
    put_list(t, "axes", v, count);
    break;
  }
  case LM_ARG_PERM:
    for (int d = 0; d < nd; d++) v[d] = n->arg.perm[d];
    put_list(t, "perm", v, nd);
    break;
  case LM_ARG_SLICE:
    put_list(t, "start", n->arg.slice.start, nd);
    put_list(t, "step", n->arg.slice.step, nd);
    if (t->from_end) put_flags(t, "from_end", n->arg.slice.from_end, nd);
    break;
  case LM_ARG_PAD:
    put_list(t, "lo", n->arg.pad.lo, nd);
    put_f64(t, "value", n->arg.pad.value);
    if (t->from_end) put_flags(t, "lo_from_end", n->arg.pad.lo_from_end, nd);
    break;
  case LM_ARG_AXIS: put(t, " axis=%d", n->arg.axis); break;
  case LM_ARG_COLL:
    put(t, " reduce=%s root=%d axis=%d world=%d", lm_reduce_op_name(n->arg.coll.reduce),
        n->arg.coll.root, n->arg.coll.axis, n->arg.coll.world);
    break;
  case LM_ARG_CLAMP:
    put_f64(t, "lo", n->arg.clamp.lo);
    put_f64(t, "hi", n->arg.clamp.hi);
    break;
  case LM_ARG_ATTN:
    put_f64(t, "scale", n->arg.attn.scale);
    put(t, " causal=%d mask=%s", (int)n->arg.attn.causal, lm_attention_mask_name(n->arg.attn.mask));
    break;
  case LM_ARG_SORT:
    put(t, " k=%lld descending=%d full=%d", (long long)n->arg.sort.k, (int)n->arg.sort.descending,
        (int)n->arg.sort.full);
    break;
  case LM_ARG_SCAN: {
    const char *combine = lm_reduce_op_name(n->arg.scan.combine);
    put(t, " axis=%d combine=%s reverse=%d", n->arg.scan.axis, combine ? combine : "?",
        (int)n->arg.scan.reverse);
    break;
  }
  case LM_ARG_CHECK:
    put(t, " rule=%s axis=%d", lm_check_rule_name(n->arg.check.rule), n->arg.check.axis);
    if (n->arg.check.has_ignore) put(t, " ignore=%lld", (long long)n->arg.check.ignore);
    put(t, " op=%.*s", LM_CHECK_OP_LEN - 1, n->arg.check.op);
    break;
  case LM_ARG_WINDOW:
    put_list(t, "kernel", n->arg.window.kernel, 2);
    put_list(t, "stride", n->arg.window.stride, 2);
    put_list(t, "dilation", n->arg.window.dilation, 2);
    break;
  }
}

/* Weights are named "w<k>", k counting them in position order: wnum[pos]. */
static int *weight_numbers(const loom_program *p, int *count) {
  int *wnum = malloc(sizeof(int) * (size_t)(p->n + 1));
  *count = 0;
  for (int pos = 0; wnum && pos < p->n; pos++)
    wnum[pos] = p->kind[pos] == LM_SLOT_WEIGHT ? (*count)++ : -1;
  return wnum;
}

/* "%5 = add f32[8,32] %3 %4" (without a newline). Sources come from the
 * program's tables: a node's scratch pos is not kept after compiling. */
static void put_position(text *t, const loom_program *p, int pos, const int *wnum) {
  const lm_node *n = p->nodes[pos];
  put(t, "%%%d = ", pos);
  if (p->kind[pos] == LM_SLOT_INPUT) {
    put(t, "input %d", p->input_of[pos]);
    return;
  }
  if (p->kind[pos] == LM_SLOT_WEIGHT) {
    put(t, "weight w%d ", wnum[pos]);
    put_type(t, n->dtype, &n->shape);
    return;
  }
  put(t, "%s ", lm_op_name(n->op));
  put_type(t, n->dtype, &n->shape);
  for (int s = p->src_start[pos]; s < p->src_start[pos + 1]; s++) put(t, " %%%d", p->src_pos[s]);
  put_args(t, n);
  if (t->follows && lm_op_table[n->op].cls == LM_OPC_LEAF) {
    uint8_t follows[LOOM_MAX_DIMS];
    for (int d = 0; d < n->shape.ndim; d++) follows[d] = !(n->fixed_dims & (1u << d));
    put_flags(t, "follows", follows, n->shape.ndim);
  }
}

static void put_input_declaration(text *t, const loom_program *p, int i) {
  const lm_node *in = p->in_nodes[i];
  put(t, "input %d %s ", i, in->label);
  put_type(t, in->dtype, &in->shape);
}

/* ------------------------------------------------------------ the file */

/* Whether a node of symbolic program p has a bound from the end (only they
 * mean anything there). */
static bool has_from_end(const loom_program *p) {
  for (int pos = 0; pos < p->n && p->nsym > 0; pos++) {
    const lm_node *n = p->nodes[pos];
    for (int d = 0; d < n->shape.ndim; d++)
      if ((n->op == LM_SLICE && n->arg.slice.from_end[d]) ||
          (n->op == LM_PAD && n->arg.pad.lo_from_end[d]))
        return true;
    if (n->op == LM_IOTA && n->arg.iota.from_end) return true;
  }
  return false;
}

/* Whether an input-free leaf of symbolic program p has a dim that follows
 * its consumers' sizes (one the program did not write). */
static bool has_follows(const loom_program *p) {
  for (int pos = 0; pos < p->n && p->nsym > 0; pos++) {
    const lm_node *n = p->nodes[pos];
    if (p->kind[pos] == LM_SLOT_NODE && lm_op_table[n->op].cls == LM_OPC_LEAF &&
        n->fixed_dims != (uint8_t)((1u << n->shape.ndim) - 1))
      return true;
  }
  return false;
}

static void put_program(text *t, const loom_program *p, const int *wnum) {
  t->follows = has_follows(p);
  t->from_end = t->follows || has_from_end(p);
  put(t, "%s %d\n", LM_PROGRAM_MAGIC,
      t->follows    ? LM_PROGRAM_VERSION_FOLLOWS
      : t->from_end ? LM_PROGRAM_VERSION_FROM_END
      : p->nsym > 0 ? LM_PROGRAM_VERSION_SYMBOLS
                    : LM_PROGRAM_VERSION);
  for (int i = 0; i < p->nin; i++) {
    put_input_declaration(t, p, i);
    put(t, "\n");
  }
  for (int i = 0; i < p->nin && p->nsym > 0; i++)
    for (int d = 0; d < p->in_nodes[i]->shape.ndim; d++)
      if (p->in_sym[i * LOOM_MAX_DIMS + d] >= 0)
        put(t, "symbol %d %d %s\n", i, d, p->sym_names[p->in_sym[i * LOOM_MAX_DIMS + d]]);
  for (int pos = 0; pos < p->n; pos++) {
    put_position(t, p, pos, wnum);
    put(t, "\n");
  }
  for (int i = 0; i < p->nout; i++) put(t, "output %%%d\n", p->out_pos[i]);
  put(t, "end\n");
}

/* Writes data to path whole or not at all (base/atomic_file.h). */
static loom_status write_file_atomically(const char *op, const char *path, const void *data,
                                         size_t len) {
  lm_atomic_file f;
  if (!lm_atomic_file_open(&f, path, 0666))
    return errno == ENOMEM ? lm_fail(LOOM_ERR_OOM, "%s: out of memory", op)
                           : lm_fail(LOOM_ERR_IO, "%s: '%s': cannot create a file beside it: %s",
                                     op, path, strerror(errno));
  if (!lm_write_all(f.fd, data, len)) {
    loom_status st = lm_fail(LOOM_ERR_IO, "%s: '%s': cannot write: %s", op, path, strerror(errno));
    lm_atomic_file_abandon(&f);
    return st;
  }
  const char *what = NULL;
  if (!lm_atomic_file_commit(&f, true, &what))
    return lm_fail(LOOM_ERR_IO, "%s: '%s': cannot %s it: %s", op, path, what, strerror(errno));
  return LOOM_OK;
}

/* The weights, named as in the text, through the public safetensors writer.
 * Wrapping a weight in a handle retains its node, and reference counts are
 * not atomic: like any use of a tensor, a save runs on one thread at a time
 * (runs of the program on other threads only read the weights' data). */
static loom_status save_weights(const loom_program *p, const int *wnum, const char *path) {
  const char *op = "loom_program_save";
  char *wpath = malloc(strlen(path) + sizeof ".safetensors");
  loom_params *ps = loom_params_new();
  loom_status st = wpath && ps ? LOOM_OK : lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  for (int pos = 0; pos < p->n && st == LOOM_OK; pos++) {
    if (p->kind[pos] != LM_SLOT_WEIGHT) continue;
    char name[32];
    snprintf(name, sizeof name, "w%d", wnum[pos]);
    lm_node_retain(p->nodes[pos]);
    loom_tensor *t = lm_tensor_wrap(p->nodes[pos]); /* consumes the reference */
    st = loom_params_add_buffer(ps, name, t);
    loom_free(t); /* the collection keeps its own */
  }
  if (st == LOOM_OK) {
    strcpy(wpath, path);
    strcat(wpath, ".safetensors");
    st = loom_params_save(ps, wpath);
  }
  loom_params_free(ps);
  free(wpath);
  return st;
}

loom_status loom_program_save(const loom_program *p, const char *path) {
  const char *op = "loom_program_save";
  if (!p || !path) return lm_fail(LOOM_ERR_NULL, "%s: %s is NULL", op, p ? "path" : "program");
  int nweights;
  int *wnum = weight_numbers(p, &nweights);
  text t = {0};
  if (wnum) put_program(&t, p, wnum);
  loom_status st = wnum && !t.oom ? LOOM_OK : lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  /* the weights first: a text on disk never names weights that are not there */
  if (st == LOOM_OK && nweights > 0) st = save_weights(p, wnum, path);
  if (st == LOOM_OK) st = write_file_atomically(op, path, t.s, t.len);
  free(t.s);
  free(wnum);
  return st;
}

/* ------------------------------------------------------------ the dump */

/* "%7", or "%t0" for a step's temporary (a split reduction's partial results). */
static const char *pos_name(const loom_program *p, int pos, char buf[24]) {
  return lm_step_text_pos(p, pos, buf);
}

const char *lm_step_text_pos(const loom_program *p, int pos, char buf[24]) {
  if (pos == LM_PARAMS_SLOT)
    snprintf(buf, 24, "params");
  else if (pos >= p->n)
    snprintf(buf, 24, "%%t%d", pos - p->n);
  else
    snprintf(buf, 24, "%%%d", pos);
  return buf;
}

/* Which steps compute which nodes (each step's kernel its output, and inline
 * every node it reaches without passing a stored one; a node several kernels
 * recompute is in each), as two lists: step i's nodes ascending,
 * node[step_start[i] .. step_start[i + 1]), and node pos's steps ascending,
 * step[node_start[pos] .. node_start[pos + 1]). Memory and time grow with the
 * pairs, not with steps x nodes (a 60,000-op unfused program once took 3.6 GB). */
typedef struct computing {
  int *step_start, *node; /* [nsteps + 1], [pairs] */
  int *node_start, *step; /* [n + 1], [pairs] */
  int *stored_by;         /* [n]: the step storing pos, or -1 */
} computing;

static void computing_free(computing *c) {
  free(c->step_start), free(c->node), free(c->node_start), free(c->step), free(c->stored_by);
}

static int ascending(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static bool grow(int **v, size_t *cap, size_t need) {
  if (need <= *cap) return true;
  size_t ncap = *cap ? *cap * 2 : 1024;
  while (ncap < need) ncap *= 2;
  int *g = realloc(*v, ncap * sizeof **v);
  if (!g) return false;
  *v = g, *cap = ncap;
  return true;
}

static bool steps_computing(const loom_program *p, computing *c) {
  int n = p->n, nsteps = p->plan->nsteps;
  memset(c, 0, sizeof *c);
  c->step_start = calloc((size_t)nsteps + 1, sizeof(int));
  c->node_start = calloc((size_t)n + 2, sizeof(int));
  c->stored_by = malloc(sizeof(int) * ((size_t)n + 1));
  int *seen = malloc(sizeof(int) * ((size_t)n + 1)); /* the step + 1 that last reached pos */
  int *stack = malloc(sizeof(int) * ((size_t)n + 1));
  size_t cap = 0, pairs = 0;
  bool ok = c->step_start && c->node_start && c->stored_by && seen && stack;
  for (int pos = 0; ok && pos < n; pos++) c->stored_by[pos] = -1, seen[pos] = 0;
  for (int i = 0; ok && i < nsteps; i++)
    if (p->plan->steps[i].out < n) c->stored_by[p->plan->steps[i].out] = i;
  for (int i = 0; ok && i < nsteps; i++) {
    c->step_start[i] = (int)pairs;
    int root = p->plan->steps[i].out, len = 0;
    if (root >= n) continue; /* a temporary: partial results of a split reduction */
    seen[root] = i + 1;
    stack[len++] = root;
    while (ok && len > 0) {
      int pos = stack[--len];
      ok = grow(&c->node, &cap, pairs + 1);
      if (!ok) break;
      c->node[pairs++] = pos;
      for (int s = p->src_start[pos]; s < p->src_start[pos + 1]; s++) {
        int src = p->src_pos[s];
        if (p->kind[src] != LM_SLOT_NODE || c->stored_by[src] >= 0 || seen[src] == i + 1) continue;
        seen[src] = i + 1;
        stack[len++] = src;
      }
    }
    qsort(c->node + c->step_start[i], pairs - (size_t)c->step_start[i], sizeof(int), ascending);
  }
  if (ok) c->step_start[nsteps] = (int)pairs;
  /* the inverse, by counting: steps come out ascending since i runs so */
  c->step = ok ? malloc(sizeof(int) * (pairs + 1)) : NULL;
  ok = ok && c->step;
  for (size_t q = 0; ok && q < pairs; q++) c->node_start[c->node[q] + 1]++;
  for (int pos = 0; ok && pos < n; pos++)
    c->node_start[pos + 1] += c->node_start[pos], seen[pos] = 0;
  for (int i = 0; ok && i < nsteps; i++)
    for (int q = c->step_start[i]; q < c->step_start[i + 1]; q++) {
      int pos = c->node[q];
      c->step[c->node_start[pos] + seen[pos]++] = i;
    }
  free(seen);
  free(stack);
  if (!ok) computing_free(c);
  return ok;
}

static void dump_header(text *t, const loom_program *p) {
  int weights = 0, nodes = 0, of_kind[LM_STEP_KINDS] = {0};
  for (int pos = 0; pos < p->n; pos++)
    weights += p->kind[pos] == LM_SLOT_WEIGHT, nodes += p->kind[pos] == LM_SLOT_NODE;
  for (int i = 0; i < p->plan->nsteps; i++) of_kind[p->plan->steps[i].kind]++;
  put(t, "loom program: %d input%s, %d weight%s, %d node%s, %d output%s; %d step%s (", p->nin,
      p->nin == 1 ? "" : "s", weights, weights == 1 ? "" : "s", nodes, nodes == 1 ? "" : "s",
      p->nout, p->nout == 1 ? "" : "s", p->plan->nsteps, p->plan->nsteps == 1 ? "" : "s");
  for (int k = 0; k < LM_STEP_KINDS; k++) /* kernels and GEMMs always */
    if (of_kind[k] || k == LM_STEP_KERNEL || k == LM_STEP_GEMM)
      put(t, "%s%d %s%s", k == LM_STEP_KERNEL ? "" : ", ", of_kind[k], lm_step_kinds[k]->name,
          of_kind[k] == 1 ? "" : "s");
  put(t, ")\n");
}

#define COMMENT_COLUMN 48

/* A symbolic program's symbols and their traced sizes. */
static void dump_symbols(text *t, const loom_program *p) {
  if (p->nsym == 0) return;
  put(t, "symbols");
  for (int s = 0; s < p->nsym; s++)
    put(t, "%s %s (traced at %lld)", s ? "," : "", p->sym_names[s], (long long)p->sym_example[s]);
  put(t, "\n");
}

/* ", sizes [b*t,64]": node pos's dims over the symbols, when any follows one. */
static void put_symbolic_shape(text *t, const loom_program *p, int pos) {
  if (p->nsym == 0) return;
  const lm_node *n = p->nodes[pos];
  const lm_sym_expr *dims = &p->dims[pos * LOOM_MAX_DIMS];
  bool any = false;
  for (int d = 0; d < n->shape.ndim; d++) any |= !lm_sym_is_const(&dims[d]);
  if (!any) return;
  put(t, ", sizes [");
  for (int d = 0; d < n->shape.ndim; d++) {
    char e[128];
    put(t, "%s%s", d ? "," : "",
        lm_sym_str(&dims[d], (const char *const *)p->sym_names, e, sizeof e));
  }
  put(t, "]");
}

static void dump_inputs(text *t, const loom_program *p) {
  put(t, "inputs\n");
  for (int i = 0; i < p->nin; i++) {
    size_t start = t->len;
    put(t, "  ");
    put_input_declaration(t, p, i);
    pad_to(t, start, COMMENT_COLUMN);
    if (p->in_pos[i] >= 0)
      put(t, "# at %%%d", p->in_pos[i]);
    else
      put(t, "# unused");
    for (int d = 0; d < p->in_nodes[i]->shape.ndim && p->nsym > 0; d++)
      if (p->in_sym[i * LOOM_MAX_DIMS + d] >= 0)
        put(t, ", dim %d any size: %s", d, p->sym_names[p->in_sym[i * LOOM_MAX_DIMS + d]]);
    put(t, "\n");
  }
}

/* A node's line, then where it is computed: "# step 3" when a kernel inlines
 * it ("# steps 2, 3" when two recompute it), "stored" when a step writes it
 * to memory. */
static void dump_nodes(text *t, const loom_program *p, const int *wnum, const computing *c) {
  put(t, "nodes\n");
  for (int pos = 0; pos < p->n; pos++) {
    size_t start = t->len;
    put(t, "  ");
    put_position(t, p, pos, wnum);
    pad_to(t, start, COMMENT_COLUMN);
    if (p->kind[pos] == LM_SLOT_INPUT) put(t, "# %s", p->nodes[pos]->label);
    if (p->kind[pos] == LM_SLOT_WEIGHT) put(t, "# captured");
    if (p->kind[pos] == LM_SLOT_NODE) {
      int first = c->node_start[pos], count = c->node_start[pos + 1] - first;
      put(t, "# step%s", count == 1 ? "" : "s");
      for (int k = 0; k < count; k++) put(t, k ? ", %d" : " %d", c->step[first + k]);
      if (count == 0) put(t, " (none)");
      if (c->stored_by[pos] >= 0) put(t, ", stored");
    }
    for (int i = 0; i < p->nout; i++)
      if (p->out_pos[i] == pos) put(t, ", %s", p->out_names[i]);
    put_symbolic_shape(t, p, pos);
    put(t, "\n");
  }
}

static void dump_outputs(text *t, const loom_program *p) {
  put(t, "outputs\n");
  for (int i = 0; i < p->nout; i++) {
    const lm_node *n = p->nodes[p->out_pos[i]];
    size_t start = t->len;
    put(t, "  output %%%d", p->out_pos[i]);
    pad_to(t, start, COMMENT_COLUMN);
    put(t, "# %s ", p->out_names[i]);
    put_type(t, n->dtype, &n->shape);
    put(t, "\n");
  }
}

void lm_gemm_write_text(text *t, const loom_program *p, int i) {
  const lm_step *s = &p->plan->steps[i];
  const lm_gemm *g = &s->gemm;
  char a[24], b[24], c[24];
  put(t, "  step %d: gemm -> %s %s[%lld,%lld]", i, pos_name(p, s->out, c),
      loom_dtype_name(g->dtype), (long long)g->M, (long long)g->N);
  for (int k = 0; k < p->plan->nsteps; k++)
    if (s->deferred && p->plan->steps[k].gemm_partner == i)
      put(t, "; runs in row blocks inside step %d", k);
  if (s->b_producer >= 0 && g->win.on)
    put(t,
        "; B is read from the windows of %s's image [%lld,%lld,%lld,%lld] (%lldx%lld kernel, "
        "stride %lldx%lld, padding %lldx%lld, dilation %lldx%lld) with loom's GEMM, else made "
        "by step %d's kernel",
        pos_name(p, g->win.x_pos, c), (long long)g->win.n, (long long)g->win.c, (long long)g->win.h,
        (long long)g->win.w, (long long)g->win.kh, (long long)g->win.kw,
        (long long)g->win.stride[0], (long long)g->win.stride[1], (long long)g->win.pad[0],
        (long long)g->win.pad[1], (long long)g->win.dilation[0], (long long)g->win.dilation[1],
        s->b_producer);
  else if (s->b_producer >= 0)
    put(t, "; B is made by step %d's kernel, a block of its columns at a time", s->b_producer);
  put(t, "\n    M %lld N %lld K %lld: A %s%s lda %lld offset %lld, B %s%s ldb %lld offset %lld\n",
      (long long)g->M, (long long)g->N, (long long)g->K, pos_name(p, g->a_pos, a),
      g->a_trans ? " transposed" : "", (long long)g->lda, (long long)g->a_offset,
      pos_name(p, g->b_pos, b), g->b_trans ? " transposed" : "", (long long)g->ldb,
      (long long)g->b_offset);
  if (g->nbatch > 0) {
    put(t, "    batch [");
    for (int d = 0; d < g->nbatch; d++) put(t, d ? ",%lld" : "%lld", (long long)g->batch[d]);
    put(t, "], A strides [");
    for (int d = 0; d < g->nbatch; d++) put(t, d ? ",%lld" : "%lld", (long long)g->a_bstride[d]);
    put(t, "], B strides [");
    for (int d = 0; d < g->nbatch; d++) put(t, d ? ",%lld" : "%lld", (long long)g->b_bstride[d]);
    put(t, "]\n");
  }
}

/* lk_kernel_print's listing, indented under its step. */
static void dump_listing(text *t, const lk_kernel *k) {
  char *listing = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&listing, &size);
  if (!f) {
    t->oom = true;
    return;
  }
  lk_kernel_print(k, f);
  if (fclose(f) != 0 || !listing) {
    free(listing);
    t->oom = true;
    return;
  }
  for (const char *line = listing; *line;) {
    const char *nl = strchr(line, '\n');
    int len = nl ? (int)(nl - line) : (int)strlen(line);
    put(t, "    %.*s\n", len, line);
    line += len + (nl != NULL);
  }
  free(listing);
}

void lm_kernel_write_text(text *t, const loom_program *p, int i) {
  const lm_step *s = &p->plan->steps[i];
  const computing *c = t->computing;
  char a[24];
  put(t, "  step %d: kernel -> %s %s, %lld output%s", i, pos_name(p, s->out, a),
      loom_dtype_name(s->dtype), (long long)s->outer, s->outer == 1 ? "" : "s");
  if (s->out < p->n) {
    put(t, "; computes");
    for (int q = c->step_start[i]; q < c->step_start[i + 1]; q++) put(t, " %%%d", c->node[q]);
  } else {
    put(t, "; partial results of a split reduction");
  }
  if (s->deferred) {
    put(t, "; not stored: runs in blocks inside the gemm of step");
    for (int k = 0; k < p->plan->nsteps; k++)
      if (p->plan->steps[k].kind == LM_STEP_GEMM && p->plan->steps[k].b_producer == i)
        put(t, " %d", k);
  }
  put(t, "\n    slots:");
  for (int k = 0; k < s->kernel.nslots; k++) {
    put(t, "%s %d %s%s", k ? "," : "", k, s->arg_key[k] ? "key of " : "",
        pos_name(p, s->arg_pos[k], a));
    if (k == 0) put(t, " (out)");
    if (s->gemm_partner >= 0 && k == s->gemm_slot)
      put(t, " (rows of step %d's gemm)", s->gemm_partner);
  }
  put(t, "\n");
  dump_listing(t, &s->kernel);
}

void lm_sort_write_text(text *t, const loom_program *p, int i) {
  const lm_step *s = &p->plan->steps[i];
  const lm_sort *so = &s->sort;
  char o[24], x[24];
  put(t, "  step %d: sort -> %s i64[%lld,%lld], the first %lld of rows of %lld %s%s from %s\n", i,
      pos_name(p, s->out, o), (long long)so->rows, (long long)so->k, (long long)so->k,
      (long long)so->n, loom_dtype_name(so->dtype), so->descending ? ", descending" : "",
      pos_name(p, so->in_pos, x));
}

void lm_check_write_text(text *t, const loom_program *p, int i) {
  const lm_check_step *c = &p->plan->steps[i].check;
  char o[24], x[24];
  put(t, "  step %d: check -> %s, %s's %s rule over %lld rows of %lld %s from %s", i,
      pos_name(p, p->plan->steps[i].out, o), c->op, lm_check_rule_name(c->rule), (long long)c->rows,
      (long long)c->cols, loom_dtype_name(c->dtype), pos_name(p, c->in_pos, x));
  if (c->rule != LM_CHECK_WEIGHTS) put(t, ": [%lld, %lld)", (long long)c->lo, (long long)c->hi);
  if (c->has_ignore) put(t, " or %lld", (long long)c->ignore);
  put(t, "\n");
}

void lm_attention_write_text(text *t, const loom_program *p, int i) {
  const lm_step *s = &p->plan->steps[i];
  const lm_attention *a = &s->attn;
  char o[24], x[24];
  static const char *names[LM_ATTENTION_OPERANDS] = {"q", "k", "v", "mask", "o", "do"};
  if (a->backward)
    put(t,
        "  step %d: attention_grad -> %s f32[3,%lld,%lld], dq dk dv of Tq %lld Dv %lld%s%s%s, "
        "scale %.9g\n",
        i, pos_name(p, s->out, o), (long long)(a->tq > a->tk ? a->tq : a->tk),
        (long long)(a->d > a->dv ? a->d : a->dv), (long long)a->tq, (long long)a->dv,
        a->causal ? " causal" : "", a->mask ? ", mask " : "",
        a->mask ? lm_attention_mask_name(a->mask) : "", a->scale);
  else
    put(t, "  step %d: attention -> %s f32[%lld,%lld]%s%s%s, scale %.9g\n", i,
        pos_name(p, s->out, o), (long long)a->tq, (long long)a->dv, a->causal ? " causal" : "",
        a->mask ? ", mask " : "", a->mask ? lm_attention_mask_name(a->mask) : "", a->scale);
  put(t, "    Tk %lld D %lld:", (long long)a->tk, (long long)a->d);
  for (int k = 0, first = 1; k < LM_ATTENTION_OPERANDS; k++) {
    if (a->pos[k] < 0) continue;
    put(t, "%s %s %s row stride %lld offset %lld", first ? "" : ",", names[k],
        pos_name(p, a->pos[k], x), (long long)a->row_stride[k], (long long)a->offset[k]);
    first = 0;
  }
  if (a->mask) put(t, " column stride %lld", (long long)a->mask_stride);
  put(t, "\n");
  if (a->nbatch > 0) {
    put(t, "    batch [");
    for (int d = 0; d < a->nbatch; d++) put(t, d ? ",%lld" : "%lld", (long long)a->batch[d]);
    for (int k = 0; k < LM_ATTENTION_OPERANDS; k++) {
      if (a->pos[k] < 0) continue;
      put(t, "], %s strides [", names[k]);
      for (int d = 0; d < a->nbatch; d++) put(t, d ? ",%lld" : "%lld", (long long)a->bstride[k][d]);
    }
    put(t, "]\n");
  }
}

void lm_collective_write_text(text *t, const loom_program *p, int i) {
  const lm_step *s = &p->plan->steps[i];
  const lm_collective *c = &s->coll;
  char a[24], b[24];
  put(t, "  step %d: %s -> %s %s, %lld output%s; of", i, lm_op_name(c->op), pos_name(p, s->out, a),
      loom_dtype_name(s->dtype), (long long)s->outer, s->outer == 1 ? "" : "s");
  for (int k = 0; k < c->nin; k++) put(t, "%s %s", k ? "," : "", pos_name(p, c->in_pos[k], b));
  put(t, " (%lld values) over %d ranks", (long long)c->count, c->world);
  if (c->op == LM_ALL_REDUCE) put(t, ", %s", lm_reduce_op_name(c->reduce));
  if (c->op == LM_BROADCAST) put(t, " from rank %d", c->root);
  if (lm_collective_runs_on(p->plan, i) && p->device.type == LOOM_DEVICE_CPU)
    put(t, "; runs on while steps %d to %d compute", i + 1, c->wait_before - 1);
  put(t, "\n");
}

static void dump_schedule(text *t, const loom_program *p, const computing *c) {
  put(t, "schedule\n");
  t->computing = c;
  for (int i = 0; i < p->plan->nsteps; i++)
    lm_step_kind_ios[p->plan->steps[i].kind]->write_text(t, p, i);
  t->computing = NULL;
}

loom_status loom_program_dump(const loom_program *p, FILE *out) {
  const char *op = "loom_program_dump";
  if (!p || !out) return lm_fail(LOOM_ERR_NULL, "%s: %s is NULL", op, p ? "out" : "program");
  int nweights;
  int *wnum = weight_numbers(p, &nweights);
  computing c;
  bool computed = steps_computing(p, &c);
  text t = {0};
  if (wnum && computed) {
    dump_header(&t, p);
    dump_symbols(&t, p);
    dump_inputs(&t, p);
    dump_nodes(&t, p, wnum, &c);
    dump_outputs(&t, p);
    dump_schedule(&t, p, &c);
  }
  bool oom = !wnum || !computed || t.oom;
  free(wnum);
  if (computed) computing_free(&c);
  if (oom) {
    free(t.s);
    return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  }
  bool written = fwrite(t.s, 1, t.len, out) == t.len && fflush(out) == 0;
  free(t.s);
  return written ? LOOM_OK : lm_fail(LOOM_ERR_IO, "%s: cannot write: %s", op, strerror(errno));
}

/* ------------------------------------------------------------ the picture */

static void dot_node_label(text *t, const loom_program *p, int pos, const int *wnum) {
  const lm_node *n = p->nodes[pos];
  if (p->kind[pos] == LM_SLOT_INPUT)
    put(t, "input %d %s\\n", p->input_of[pos], n->label);
  else if (p->kind[pos] == LM_SLOT_WEIGHT)
    put(t, "%%%d weight w%d\\n", pos, wnum[pos]);
  else
    put(t, "%%%d %s\\n", pos, lm_op_name(n->op));
  put_type(t, n->dtype, &n->shape);
}

/* What the picture needs besides the program, each a pass over it (a
 * program of many steps and nodes is drawn in time that grows with them, not
 * with their product): which nodes are stored, and each step's nodes
 * (kernel_of) as buckets, members[first[i] .. first[i + 1]). */
typedef struct picture {
  const int *wnum;
  bool *stored;
  int *first, *members;
} picture;

static void dot_node(text *t, const loom_program *p, int pos, const picture *pic,
                     const char *indent) {
  static const char *const style[] = {
      [LM_SLOT_NODE] = "shape=box",
      [LM_SLOT_INPUT] = "shape=invhouse, style=filled, fillcolor=\"#cfe2ff\"",
      [LM_SLOT_WEIGHT] = "shape=cylinder, style=filled, fillcolor=\"#fff3cd\"",
  };
  bool stored = p->kind[pos] == LM_SLOT_NODE && pic->stored[pos];
  put(t, "%sn%d [%s%s, label=\"", indent, pos, style[p->kind[pos]], stored ? ", style=bold" : "");
  dot_node_label(t, p, pos, pic->wnum);
  put(t, "\"];\n");
}

/* One cluster per step with the nodes kernel_of gives it; a step storing a
 * temporary gets a point for it, so the cluster is never empty. */
static void dot_step(text *t, const loom_program *p, int i, const picture *pic) {
  const lm_step *s = &p->plan->steps[i];
  put(t, "  subgraph cluster_%d {\n    label=\"step %d: %s\";\n    style=rounded;\n", i, i,
      lm_step_name(s));
  if (s->out >= p->n)
    put(t, "    t%d [shape=point, xlabel=\"%%t%d\"];\n", s->out - p->n, s->out - p->n);
  for (int q = pic->first[i]; q < pic->first[i + 1]; q++)
    dot_node(t, p, pic->members[q], pic, "    ");
  put(t, "  }\n");
}

static void dot_edges(text *t, const loom_program *p) {
  for (int pos = 0; pos < p->n; pos++)
    for (int s = p->src_start[pos]; s < p->src_start[pos + 1]; s++) {
      bool repeated = false;
      for (int r = p->src_start[pos]; r < s; r++) repeated |= p->src_pos[r] == p->src_pos[s];
      if (!repeated) put(t, "  n%d -> n%d;\n", p->src_pos[s], pos);
    }
  for (int i = 0; i < p->plan->nsteps; i++) { /* temporaries flow to the steps reading them */
    const lm_step *s = &p->plan->steps[i];
    for (int k = 1; s->kind == LM_STEP_KERNEL && k < s->kernel.nslots; k++)
      if (!s->arg_key[k] && s->arg_pos[k] >= p->n && s->out < p->n)
        put(t, "  t%d -> n%d [style=dashed];\n", s->arg_pos[k] - p->n, s->out);
  }
  for (int i = 0; i < p->nout; i++) {
    const lm_node *n = p->nodes[p->out_pos[i]];
    put(t, "  %s [shape=house, style=filled, fillcolor=\"#d1e7dd\", label=\"%s\\n", p->out_names[i],
        p->out_names[i]);
    put_type(t, n->dtype, &n->shape);
    put(t, "\"];\n  n%d -> %s;\n", p->out_pos[i], p->out_names[i]);
  }
}

static bool picture_make(const loom_program *p, picture *pic) {
  int n = p->n, nsteps = p->plan->nsteps;
  pic->stored = calloc((size_t)n + 1, sizeof *pic->stored);
  pic->first = calloc((size_t)nsteps + 2, sizeof *pic->first);
  pic->members = malloc(sizeof(int) * ((size_t)n + 1));
  if (!pic->stored || !pic->first || !pic->members) return false;
  for (int i = 0; i < nsteps; i++)
    if (p->plan->steps[i].out < n) pic->stored[p->plan->steps[i].out] = true;
  for (int pos = 0; pos < n; pos++)
    if (p->kind[pos] == LM_SLOT_NODE && p->kernel_of[pos] >= 0) pic->first[p->kernel_of[pos] + 1]++;
  for (int i = 0; i < nsteps; i++) pic->first[i + 1] += pic->first[i];
  int *cursor = malloc(sizeof(int) * ((size_t)nsteps + 1));
  if (!cursor) return false;
  memcpy(cursor, pic->first, sizeof(int) * (size_t)nsteps);
  for (int pos = 0; pos < n; pos++) /* ascending within each step, as before */
    if (p->kind[pos] == LM_SLOT_NODE && p->kernel_of[pos] >= 0)
      pic->members[cursor[p->kernel_of[pos]]++] = pos;
  free(cursor);
  return true;
}

static void put_dot(text *t, const loom_program *p, const picture *pic) {
  put(t, "digraph loom_program {\n  node [fontname=\"monospace\", fontsize=10];\n"
         "  graph [fontname=\"monospace\", fontsize=10];\n");
  for (int i = 0; i < p->plan->nsteps; i++) dot_step(t, p, i, pic);
  for (int pos = 0; pos < p->n; pos++)
    if (p->kind[pos] != LM_SLOT_NODE || p->kernel_of[pos] < 0) dot_node(t, p, pos, pic, "  ");
  dot_edges(t, p);
  put(t, "}\n");
}

loom_status loom_program_dot(const loom_program *p, const char *path) {
  const char *op = "loom_program_dot";
  if (!p || !path) return lm_fail(LOOM_ERR_NULL, "%s: %s is NULL", op, p ? "path" : "program");
  int nweights;
  picture pic = {weight_numbers(p, &nweights), NULL, NULL, NULL};
  text t = {0};
  bool made = pic.wnum && picture_make(p, &pic);
  if (made) put_dot(&t, p, &pic);
  loom_status st = made && !t.oom ? write_file_atomically(op, path, t.s, t.len)
                                  : lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  free(t.s);
  free((void *)pic.wnum), free(pic.stored), free(pic.first), free(pic.members);
  return st;
}
