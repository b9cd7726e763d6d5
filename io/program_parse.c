/* Reading a program's text form back (docs/PROGRAM_FORMAT.md). The text comes
 * from outside, so the parser trusts none of it: each line is checked as it
 * is read, a node is built only from earlier positions and must pass
 * lm_node_verify (planning and lowering trust shapes and arguments), the
 * positions must be the canonical order of the graph the outputs reach, and
 * only then is the graph compiled (lm_program_build). Any problem is
 * LOOM_ERR_CORRUPT with "<file>:<line>: <what was expected>"; nothing leaks.
 *
 * loom_program_load reads the text twice: the first pass declares the weights
 * (names, dtypes, shapes) so that loom_params_load can check the safetensors
 * file beside the text against them and read it; the second pass binds the
 * loaded tensors and compiles. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "io/program_text.h"
#include "runtime/program.h"
#include "runtime/runtime.h"

typedef struct token {
  const char *s;
  size_t len;
} token;

typedef struct parser {
  const char *op;   /* the public function, first in every message */
  const char *name; /* the file (or "<text>"), before the line number */
  const char *text;
  size_t len;
  size_t next; /* offset of the next line */
  int line;    /* number of the current line, from 1 */
  const char *cur, *eol;
  /* what was read; one reference per node held */
  lm_node **nodes; /* [n] graph positions */
  int *node_line;  /* [n] the line defining each */
  int n, cap;
  lm_node **inputs; /* [nin] declared inputs, in the program's order */
  int *input_pos;   /* [nin] where each is placed, or -1 */
  int nin, in_cap;
  int *outs; /* [nout] positions */
  int nout, out_cap;
  int version;
  loom_symbolic_dim syms[LM_PROGRAM_MAX_SYMBOL_LINES]; /* symbol lines (names owned) */
  int nsyms;
  lm_node *srcs[LM_CAT_MAX_SOURCES]; /* one node line's sources */
  /* weights: bound from `weights`, or declared into `declared` */
  const loom_params *weights;
  bool *weight_used; /* [weights' count] */
  loom_params *declared;
} parser;

/* ------------------------------------------------------------ messages */

static loom_status bad(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static loom_status bad(parser *p, const char *fmt, ...) {
  char what[800];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return lm_fail(LOOM_ERR_CORRUPT, "%s: %s:%d: %s", p->op, p->name, p->line, what);
}

static loom_status out_of_memory(const parser *p) {
  return lm_fail(LOOM_ERR_OOM, "%s: %s: out of memory", p->op, p->name);
}

/* A token for a message: at most 60 characters (lines hold printable ASCII). */
static const char *quote(token t, char buf[72]) {
  if (t.len > 60)
    snprintf(buf, 72, "%.57s...", t.s);
  else
    snprintf(buf, 72, "%.*s", (int)t.len, t.s);
  return buf;
}

/* ------------------------------------------------------------ lines and tokens */

/* The next line into cur..eol (*got false at the end of the text). A line is
 * printable ASCII ending in '\n', with tokens separated by single spaces. */
static loom_status next_line(parser *p, bool *got) {
  *got = false;
  if (p->next >= p->len) return LOOM_OK;
  p->line++;
  const char *start = p->text + p->next;
  const char *nl = memchr(start, '\n', p->len - p->next);
  if (!nl) return bad(p, "the line does not end with a newline (is the file truncated?)");
  for (const char *c = start; c < nl; c++)
    if (*c < 0x20 || *c > 0x7e)
      return bad(p, "byte 0x%02x at column %d: lines hold printable ASCII only",
                 (unsigned)(unsigned char)*c, (int)(c - start) + 1);
  if (nl == start) return bad(p, "an empty line");
  if (start[0] == ' ' || nl[-1] == ' ' || memmem(start, (size_t)(nl - start), "  ", 2))
    return bad(p, "tokens are separated by single spaces (no leading, trailing or doubled ones)");
  p->cur = start, p->eol = nl;
  p->next = (size_t)(nl - p->text) + 1;
  *got = true;
  return LOOM_OK;
}

static bool take(parser *p, token *t) {
  t->s = p->cur, t->len = 0;
  if (p->cur >= p->eol) return false;
  const char *space = memchr(p->cur, ' ', (size_t)(p->eol - p->cur));
  const char *end = space ? space : p->eol;
  t->len = (size_t)(end - p->cur);
  p->cur = space ? space + 1 : p->eol;
  return true;
}

static loom_status take_expected(parser *p, token *t, const char *what) {
  return take(p, t) ? LOOM_OK : bad(p, "the line ends where %s was expected", what);
}

static loom_status line_done(parser *p, const char *after) {
  token t;
  char q[72];
  return take(p, &t) ? bad(p, "unexpected '%s' after %s", quote(t, q), after) : LOOM_OK;
}

static bool is(token t, const char *word) {
  return t.len == strlen(word) && memcmp(t.s, word, t.len) == 0;
}

/* ------------------------------------------------------------ numbers, names, types */

/* A decimal integer as the writer prints it: -?(0|[1-9][0-9]*), no "-0". */
static bool parse_i64(const char *s, size_t len, int64_t *out) {
  bool neg = len > 0 && s[0] == '-';
  size_t i = neg;
  if (i == len || (s[i] == '0' && len - i > 1) || (neg && s[i] == '0')) return false;
  uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    unsigned digit = (unsigned)(s[i] - '0');
    if (v > (limit - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return true;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1; /* upper case is not the written form */
}

/* A double in lm_hex_double's form and nothing else: the value is rebuilt,
 * written again and must give back the token, so every accepted text is
 * exact and canonical. */
static bool parse_f64(token t, double *out) {
  size_t i = t.len > 0 && t.s[0] == '-';
  bool neg = i == 1;
  double v;
  if (t.len - i == 3 && memcmp(t.s + i, "inf", 3) == 0) {
    v = neg ? -INFINITY : INFINITY;
  } else if (t.len - i == 3 && memcmp(t.s + i, "nan", 3) == 0) {
    v = neg ? -NAN : NAN;
  } else {
    if (t.len - i < 6 || memcmp(t.s + i, "0x", 2) != 0) return false;
    i += 2;
    int lead = hex_digit(t.s[i++]);
    if (lead != 0 && lead != 1) return false;
    uint64_t frac = 0;
    int nfrac = 0;
    if (i < t.len && t.s[i] == '.')
      for (i++; i < t.len && hex_digit(t.s[i]) >= 0 && nfrac < 13; i++, nfrac++)
        frac = frac << 4 | (uint64_t)hex_digit(t.s[i]);
    if (i + 2 >= t.len || t.s[i] != 'p' || (t.s[i + 1] != '+' && t.s[i + 1] != '-')) return false;
    int64_t exp;
    if (t.len - i - 2 > 5 || !parse_i64(t.s + i + 2, t.len - i - 2, &exp)) return false;
    if (t.s[i + 1] == '-') exp = -exp;
    frac <<= 4 * (13 - nfrac);
    v = ldexp((double)((uint64_t)lead << 52 | frac), (int)exp - 52);
    if (neg) v = -v;
  }
  char again[LM_HEX_DOUBLE_LEN];
  lm_hex_double(v, again);
  if (strlen(again) != t.len || memcmp(again, t.s, t.len) != 0) return false;
  *out = v;
  return true;
}

/* "[a,b,c]" or "[]": the count, -1 when malformed, -2 for more than max. */
static int parse_list(const char *s, size_t len, int64_t *v, int max) {
  if (len < 2 || s[0] != '[' || s[len - 1] != ']') return -1;
  if (len == 2) return 0;
  int count = 0;
  for (size_t at = 1; at < len;) {
    const char *end = memchr(s + at, ',', len - 1 - at);
    size_t item = end ? (size_t)(end - s) - at : len - 1 - at;
    if (count == max) return -2;
    if (!parse_i64(s + at, item, &v[count++])) return -1;
    at += item + 1;
    if (end && at == len - 1) return -1; /* "[1,]" */
  }
  return count;
}

static loom_status take_name(parser *p, const char *what, token *name) {
  char q[72];
  loom_status st = take_expected(p, name, what);
  if (st == LOOM_OK && !lm_is_name(name->s, name->len))
    st = bad(p, "%s '%s' is not 1 to %d letters, digits or '_' (not starting with a digit)", what,
             quote(*name, q), LM_PROGRAM_MAX_NAME);
  return st;
}

/* "f32[8,32]": a dtype and a shape (the verifier judges the dims). */
static loom_status take_type(parser *p, loom_dtype *dtype, loom_shape *shape) {
  token t;
  char q[72];
  loom_status st = take_expected(p, &t, "a type like f32[8,32]");
  if (st != LOOM_OK) return st;
  const char *open = memchr(t.s, '[', t.len);
  if (!open) return bad(p, "expected a type like f32[8,32], got '%s'", quote(t, q));
  size_t name_len = (size_t)(open - t.s);
  int found = -1;
  for (int d = 0; d < LOOM_NUM_DTYPES; d++)
    if (strlen(loom_dtype_name((loom_dtype)d)) == name_len &&
        memcmp(loom_dtype_name((loom_dtype)d), t.s, name_len) == 0)
      found = d;
  if (found < 0)
    return bad(p,
               "unknown dtype in '%s' (expected f32, f64, i32, i64, u8, bool, bf16, f16, i8, "
               "i16, u16, u32 or u64)",
               quote(t, q));
  int ndim = parse_list(open, t.len - name_len, shape->dim, LOOM_MAX_DIMS);
  if (ndim == -2) return bad(p, "'%s' has more than %d dims", quote(t, q), LOOM_MAX_DIMS);
  if (ndim < 0) return bad(p, "malformed shape in '%s' (expected [d0,d1,...])", quote(t, q));
  *dtype = (loom_dtype)found;
  shape->ndim = ndim;
  return LOOM_OK;
}

/* "%k" naming a position below limit. */
static bool parse_ref(token t, int limit, int *out) {
  int64_t v;
  if (t.len < 2 || t.s[0] != '%' || !parse_i64(t.s + 1, t.len - 1, &v) || v < 0 || v >= limit)
    return false;
  *out = (int)v;
  return true;
}

/* ------------------------------------------------------------ op arguments */

/* The value of the next token, which must be "key=value". */
static loom_status take_arg(parser *p, const char *key, token *value) {
  token t;
  char q[72];
  size_t k = strlen(key);
  if (!take(p, &t)) return bad(p, "the line ends where %s=... was expected", key);
  if (t.len <= k || memcmp(t.s, key, k) != 0 || t.s[k] != '=')
    return bad(p, "expected %s=..., got '%s'", key, quote(t, q));
  value->s = t.s + k + 1, value->len = t.len - k - 1;
  return LOOM_OK;
}

static loom_status arg_f64(parser *p, const char *key, double *out) {
  token v;
  char q[72];
  loom_status st = take_arg(p, key, &v);
  if (st == LOOM_OK && !parse_f64(v, out))
    st = bad(p, "%s=%s is not a float in its exact hex form (like 0x1.8p+1, -0x0p+0, inf, nan)",
             key, quote(v, q));
  return st;
}

/* A list of exactly `want` integers in [lo, hi]. */
static loom_status arg_list(parser *p, const char *key, int want, int64_t lo, int64_t hi,
                            int64_t *out) {
  token v;
  char q[72];
  int64_t vals[LOOM_MAX_DIMS];
  loom_status st = take_arg(p, key, &v);
  if (st != LOOM_OK) return st;
  int count = parse_list(v.s, v.len, vals, LOOM_MAX_DIMS);
  if (count == -1) return bad(p, "%s=%s is not a list of integers like [0,1]", key, quote(v, q));
  if (count != want)
    return bad(p, "%s=%s has %s entries, expected %d", key, quote(v, q),
               count < 0    ? "too many"
               : count == 0 ? "no"
                            : "another number of",
               want);
  for (int i = 0; i < count; i++) {
    if (vals[i] < lo || vals[i] > hi)
      return bad(p, "%s=%s: entry %d (%lld) is outside [%lld, %lld]", key, quote(v, q), i,
                 (long long)vals[i], (long long)lo, (long long)hi);
    out[i] = vals[i];
  }
  return LOOM_OK;
}

/* An optional list of per-dim flags in [0, max] (absent: all 0), from format
 * version `since`. */
static loom_status arg_flags_since(parser *p, int since, const char *key, int want, int max,
                                   uint8_t *out) {
  size_t k = strlen(key);
  if (p->version < since || (size_t)(p->eol - p->cur) <= k || memcmp(p->cur, key, k) != 0 ||
      p->cur[k] != '=')
    return LOOM_OK; /* (in an older version, the line's end then refuses it) */
  int64_t v[LOOM_MAX_DIMS];
  loom_status st = arg_list(p, key, want, 0, max, v);
  for (int d = 0; d < want && st == LOOM_OK; d++) out[d] = (uint8_t)v[d];
  return st;
}

/* Bounds from the end (version 3). */
static loom_status arg_flags(parser *p, const char *key, int want, int max, uint8_t *out) {
  return arg_flags_since(p, LM_PROGRAM_VERSION_FROM_END, key, want, max, out);
}

/* An input-free leaf's dims are fixed (sizes the program wrote) but those
 * `follows=` lists (version 4), and an arange's whose start is from the end
 * (version 3: a flip's index, sized by its source): a symbolic program refuses
 * to give a fixed dim a symbol. */
static loom_status arg_follows(parser *p, lm_node *n) {
  uint8_t follows[LOOM_MAX_DIMS] = {0};
  loom_status st =
      arg_flags_since(p, LM_PROGRAM_VERSION_FOLLOWS, "follows", n->shape.ndim, 1, follows);
  n->fixed_dims = (uint8_t)((1u << n->shape.ndim) - 1);
  for (int d = 0; d < n->shape.ndim; d++)
    if (follows[d] || (n->op == LM_IOTA && n->arg.iota.from_end))
      n->fixed_dims &= (uint8_t) ~(1u << d);
  return st;
}

static loom_status arg_int(parser *p, const char *key, int *out) {
  token v = {NULL, 0};
  char q[72];
  int64_t x;
  loom_status st = take_arg(p, key, &v);
  if (st == LOOM_OK && (!parse_i64(v.s, v.len, &x) || x < INT_MIN || x > INT_MAX))
    st = bad(p, "%s=%s is not an integer like 0 or 1", key, quote(v, q));
  if (st == LOOM_OK) *out = (int)x;
  return st;
}

static loom_status arg_ints(parser *p, const char *key, int want, int *out) {
  int64_t v[LOOM_MAX_DIMS];
  loom_status st = arg_list(p, key, want, INT_MIN, INT_MAX, v);
  for (int i = 0; i < want && st == LOOM_OK; i++) out[i] = (int)v[i];
  return st;
}

/* axes=[a,b]: increasing, each below LOOM_MAX_DIMS; the verifier checks them
 * against the source. */
static loom_status arg_axes(parser *p, uint32_t *mask) {
  token v;
  char q[72];
  int64_t axes[LOOM_MAX_DIMS];
  loom_status st = take_arg(p, "axes", &v);
  if (st != LOOM_OK) return st;
  int count = parse_list(v.s, v.len, axes, LOOM_MAX_DIMS);
  bool ok = count > 0;
  for (int i = 0; i < count && ok; i++)
    ok = axes[i] >= 0 && axes[i] < LOOM_MAX_DIMS && (i == 0 || axes[i] > axes[i - 1]);
  if (!ok)
    return bad(p, "axes=%s: expected 1 to %d increasing axes in [0, %d), like [1] or [0,2]",
               quote(v, q), LOOM_MAX_DIMS, LOOM_MAX_DIMS);
  *mask = 0;
  for (int i = 0; i < count; i++) *mask |= 1u << axes[i];
  return LOOM_OK;
}

static loom_status arg_rand(parser *p, lm_node *n) {
  static const char *const kinds[] = {"uniform", "normal", "bernoulli"};
  token v;
  char q[72];
  loom_status st = take_arg(p, "kind", &v);
  if (st != LOOM_OK) return st;
  int kind = -1;
  for (int k = 0; k < 3; k++)
    if (is(v, kinds[k])) kind = k;
  if (kind < 0) return bad(p, "kind=%s: expected uniform, normal or bernoulli", quote(v, q));
  n->arg.rand.kind = (lm_rand_kind)kind;
  if ((st = arg_f64(p, "p", &n->arg.rand.p)) != LOOM_OK) return st;
  if ((st = take_arg(p, "key", &v)) != LOOM_OK) return st;
  /* 0x%08x,0x%08x: two words of Philox key, lower-case hex */
  bool ok =
      v.len == 21 && memcmp(v.s, "0x", 2) == 0 && v.s[10] == ',' && memcmp(v.s + 11, "0x", 2) == 0;
  uint32_t words[2] = {0, 0};
  for (int w = 0; w < 2 && ok; w++)
    for (int i = 0; i < 8 && ok; i++) {
      int d = hex_digit(v.s[2 + 11 * w + i]);
      ok = d >= 0;
      words[w] = words[w] << 4 | (uint32_t)(ok ? d : 0);
    }
  if (!ok)
    return bad(p, "key=%s: expected two 8-digit hex words like 0x0000002a,0x00000000", quote(v, q));
  n->arg.rand.key.k[0] = words[0], n->arg.rand.key.k[1] = words[1];
  return LOOM_OK;
}

static loom_status arg_coll(parser *p, lm_node *n) {
  token v = {NULL, 0};
  char q[72];
  loom_status st = take_arg(p, "reduce", &v);
  if (st != LOOM_OK) return st;
  n->arg.coll.reduce = lm_reduce_op_named(v.s, v.len);
  if (n->arg.coll.reduce < 0)
    return bad(p, "reduce=%s: expected mean, sum, none, max or min", quote(v, q));
  if ((st = arg_int(p, "root", &n->arg.coll.root)) != LOOM_OK) return st;
  if ((st = arg_int(p, "axis", &n->arg.coll.axis)) != LOOM_OK) return st;
  return arg_int(p, "world", &n->arg.coll.world);
}

/* A check's: rule=<name> axis=<int> [ignore=<int>] op=<name> (the op's name
 * as the verifier takes it: letters, digits, '_'). */
static loom_status arg_check(parser *p, lm_node *n) {
  token v = {NULL, 0};
  char q[72];
  loom_status st = take_arg(p, "rule", &v);
  if (st != LOOM_OK) return st;
  if ((n->arg.check.rule = lm_check_rule_named(v.s, v.len)) < 0)
    return bad(p, "rule=%s: expected index, start or weights", quote(v, q));
  if ((st = arg_int(p, "axis", &n->arg.check.axis)) != LOOM_OK) return st;
  static const char ignore[] = "ignore=";
  if ((size_t)(p->eol - p->cur) > strlen(ignore) && !memcmp(p->cur, ignore, strlen(ignore))) {
    n->arg.check.has_ignore = true;
    if ((st = take_arg(p, "ignore", &v)) != LOOM_OK) return st;
    if (!parse_i64(v.s, v.len, &n->arg.check.ignore))
      return bad(p, "ignore=%s is not an integer", quote(v, q));
  }
  if ((st = take_arg(p, "op", &v)) != LOOM_OK) return st;
  if (v.len == 0 || v.len >= LM_CHECK_OP_LEN)
    return bad(p, "op=%s: expected a name of 1 to %d characters", quote(v, q), LM_CHECK_OP_LEN - 1);
  memcpy(n->arg.check.op, v.s, v.len);
  n->arg.check.op[v.len] = 0;
  return LOOM_OK;
}

/* The op's arguments, in the order the format fixes. Lists have one entry
 * per dim of the node (window's two per spatial dim). */
static loom_status parse_args(parser *p, lm_node *n) {
  int nd = n->shape.ndim;
  loom_status st = LOOM_OK;
  switch (lm_op_table[n->op].arg) {
  case LM_ARG_NONE: return LOOM_OK;
  case LM_ARG_VALUE: return arg_f64(p, "value", &n->arg.f);
  case LM_ARG_IOTA:
    st = arg_f64(p, "start", &n->arg.iota.start);
    if (st == LOOM_OK) st = arg_f64(p, "step", &n->arg.iota.step);
    return st != LOOM_OK ? st : arg_flags(p, "from_end", 1, 1, &n->arg.iota.from_end);
  case LM_ARG_RAND: return arg_rand(p, n);
  case LM_ARG_AXES: return arg_axes(p, &n->arg.axes);
  case LM_ARG_PERM: return arg_ints(p, "perm", nd, n->arg.perm);
  case LM_ARG_SLICE:
    st = arg_list(p, "start", nd, INT64_MIN, INT64_MAX, n->arg.slice.start);
    if (st == LOOM_OK) st = arg_list(p, "step", nd, INT64_MIN, INT64_MAX, n->arg.slice.step);
    return st != LOOM_OK
               ? st
               : arg_flags(p, "from_end", nd, LM_SLICE_START_FROM_END | LM_SLICE_STOP_FROM_END,
                           n->arg.slice.from_end);
  case LM_ARG_PAD:
    st = arg_list(p, "lo", nd, INT64_MIN, INT64_MAX, n->arg.pad.lo);
    if (st == LOOM_OK) st = arg_f64(p, "value", &n->arg.pad.value);
    return st != LOOM_OK ? st : arg_flags(p, "lo_from_end", nd, 1, n->arg.pad.lo_from_end);
  case LM_ARG_AXIS: return arg_int(p, "axis", &n->arg.axis);
  case LM_ARG_COLL: return arg_coll(p, n);
  case LM_ARG_CLAMP:
    st = arg_f64(p, "lo", &n->arg.clamp.lo);
    return st != LOOM_OK ? st : arg_f64(p, "hi", &n->arg.clamp.hi);
  case LM_ARG_ATTN: {
    int causal = 0;
    st = arg_f64(p, "scale", &n->arg.attn.scale);
    if (st == LOOM_OK) st = arg_int(p, "causal", &causal);
    if (st == LOOM_OK && causal != 0 && causal != 1)
      return bad(p, "causal=%d: expected 0 or 1", causal);
    n->arg.attn.causal = causal == 1;
    token m = {NULL, 0};
    char q[72];
    if (st == LOOM_OK) st = take_arg(p, "mask", &m);
    if (st == LOOM_OK && (n->arg.attn.mask = lm_attention_mask_named(m.s, m.len)) < 0)
      return bad(p, "mask=%s: expected none, bool or add", quote(m, q));
    return st;
  }
  case LM_ARG_SORT: {
    token v = {NULL, 0};
    char q[72];
    int descending = 0, full = 0;
    st = take_arg(p, "k", &v);
    if (st == LOOM_OK && !parse_i64(v.s, v.len, &n->arg.sort.k))
      return bad(p, "k=%s is not an integer", quote(v, q));
    if (st == LOOM_OK) st = arg_int(p, "descending", &descending);
    if (st == LOOM_OK) st = arg_int(p, "full", &full);
    if (st == LOOM_OK && ((descending != 0 && descending != 1) || (full != 0 && full != 1)))
      return bad(p, "descending=%d full=%d: expected 0 or 1", descending, full);
    n->arg.sort.descending = descending == 1;
    n->arg.sort.full = full == 1;
    return st;
  }
  case LM_ARG_SCAN: {
    token v = {NULL, 0};
    char q[72];
    int reverse = 0;
    st = arg_int(p, "axis", &n->arg.scan.axis);
    if (st == LOOM_OK) st = take_arg(p, "combine", &v);
    if (st == LOOM_OK && (n->arg.scan.combine = lm_reduce_op_named(v.s, v.len)) < 0)
      return bad(p, "combine=%s: expected sum", quote(v, q));
    if (st == LOOM_OK) st = arg_int(p, "reverse", &reverse);
    if (st == LOOM_OK && reverse != 0 && reverse != 1)
      return bad(p, "reverse=%d: expected 0 or 1", reverse);
    n->arg.scan.reverse = reverse == 1;
    return st;
  }
  case LM_ARG_CHECK: return arg_check(p, n);
  case LM_ARG_WINDOW:
    st = arg_list(p, "kernel", 2, INT64_MIN, INT64_MAX, n->arg.window.kernel);
    if (st == LOOM_OK) st = arg_list(p, "stride", 2, INT64_MIN, INT64_MAX, n->arg.window.stride);
    if (st == LOOM_OK)
      st = arg_list(p, "dilation", 2, INT64_MIN, INT64_MAX, n->arg.window.dilation);
    return st;
  }
  return LOOM_OK;
}

/* ------------------------------------------------------------ growing the tables */

static bool grow_positions(parser *p) {
  if (p->n < p->cap) return true;
  int cap = p->cap ? 2 * p->cap : 64;
  lm_node **nodes = realloc(p->nodes, sizeof *nodes * (size_t)cap);
  if (nodes) p->nodes = nodes;
  int *lines = nodes ? realloc(p->node_line, sizeof *lines * (size_t)cap) : NULL;
  if (lines) p->node_line = lines;
  if (!nodes || !lines) return false;
  p->cap = cap;
  return true;
}

static bool grow_inputs(parser *p) {
  if (p->nin < p->in_cap) return true;
  int cap = p->in_cap ? 2 * p->in_cap : 8;
  lm_node **inputs = realloc(p->inputs, sizeof *inputs * (size_t)cap);
  if (inputs) p->inputs = inputs;
  int *pos = inputs ? realloc(p->input_pos, sizeof *pos * (size_t)cap) : NULL;
  if (pos) p->input_pos = pos;
  if (!inputs || !pos) return false;
  p->in_cap = cap;
  return true;
}

static bool grow_outputs(parser *p) {
  if (p->nout < p->out_cap) return true;
  int cap = p->out_cap ? 2 * p->out_cap : 8;
  int *outs = realloc(p->outs, sizeof *outs * (size_t)cap);
  if (!outs) return false;
  p->outs = outs, p->out_cap = cap;
  return true;
}

/* ------------------------------------------------------------ the lines */

/* "input <i> <name> <type>": the program's i-th input. */
static loom_status parse_input_declaration(parser *p) {
  token t, name;
  char q[72], why[512];
  int64_t index;
  loom_dtype dtype;
  loom_shape shape;
  loom_status st = take_expected(p, &t, "the input's index");
  if (st == LOOM_OK && (!parse_i64(t.s, t.len, &index) || index != p->nin))
    st = bad(p, "expected input %d (inputs are declared in order), got '%s'", p->nin, quote(t, q));
  if (st == LOOM_OK) st = take_name(p, "the input's name", &name);
  if (st == LOOM_OK) st = take_type(p, &dtype, &shape);
  if (st == LOOM_OK) st = line_done(p, "the input's type");
  if (st == LOOM_OK && p->nin == LM_PROGRAM_MAX_ITEMS)
    st = bad(p, "more than %d inputs", LM_PROGRAM_MAX_ITEMS);
  if (st != LOOM_OK) return st;
  if (!grow_inputs(p)) return out_of_memory(p);
  char *label = strndup(name.s, name.len);
  lm_node *in = label ? lm_node_new(LM_INPUT, 0, NULL, shape, dtype, LOOM_CPU) : NULL;
  if (!in) {
    free(label);
    return out_of_memory(p);
  }
  in->label = label;
  if (!lm_node_verify(in, why, sizeof why)) {
    lm_node_release(in);
    return bad(p, "%s", why);
  }
  p->inputs[p->nin] = in;
  p->input_pos[p->nin++] = -1;
  return LOOM_OK;
}

/* "symbol <input> <axis> <name>": a declared input's dim that takes any size
 * (format version 2), in increasing input and axis order. */
static loom_status parse_symbol(parser *p) {
  token t[2], name;
  char q[72];
  int64_t v[2];
  const char *what[2] = {"the symbol's input", "the symbol's axis"};
  loom_status st = LOOM_OK;
  for (int k = 0; k < 2 && st == LOOM_OK; k++) {
    st = take_expected(p, &t[k], what[k]);
    if (st == LOOM_OK && !parse_i64(t[k].s, t[k].len, &v[k]))
      st = bad(p, "%s '%s' is not a number", what[k], quote(t[k], q));
  }
  if (st == LOOM_OK && (v[0] < 0 || v[0] >= p->nin))
    st = bad(p, "symbol on input %lld, which is not declared (there are %d inputs)",
             (long long)v[0], p->nin);
  if (st == LOOM_OK && (v[1] < 0 || v[1] >= p->inputs[v[0]]->shape.ndim))
    st = bad(p, "symbol on dim %lld of input %lld, which has %d dims", (long long)v[1],
             (long long)v[0], p->inputs[v[0]]->shape.ndim);
  if (st == LOOM_OK && p->nsyms > 0) {
    const loom_symbolic_dim *last = &p->syms[p->nsyms - 1];
    if (last->input > v[0] || (last->input == v[0] && last->axis >= v[1]))
      st = bad(p, "symbol lines come in increasing input and axis order");
  }
  if (st == LOOM_OK) st = take_name(p, "the symbol's name", &name);
  if (st == LOOM_OK) st = line_done(p, "the symbol's name");
  if (st == LOOM_OK && p->nsyms == LM_PROGRAM_MAX_SYMBOL_LINES)
    st = bad(p, "more than %d symbol lines", LM_PROGRAM_MAX_SYMBOL_LINES);
  if (st != LOOM_OK) return st;
  char *symbol = strndup(name.s, name.len);
  if (!symbol) return out_of_memory(p);
  p->syms[p->nsyms++] = (loom_symbolic_dim){(int)v[0], (int)v[1], symbol};
  return LOOM_OK;
}

/* "%k = input <i>": where input i enters the graph. */
static loom_status parse_input_use(parser *p, lm_node **out) {
  token t;
  char q[72];
  int64_t i;
  loom_status st = take_expected(p, &t, "the input's index");
  if (st == LOOM_OK && (!parse_i64(t.s, t.len, &i) || i < 0 || i >= p->nin))
    st = bad(p, "input '%s' is not declared (there are %d inputs)", quote(t, q), p->nin);
  if (st == LOOM_OK && p->input_pos[i] >= 0)
    st = bad(p, "input %lld is already at %%%d", (long long)i, p->input_pos[i]);
  if (st == LOOM_OK) st = line_done(p, "the input's index");
  if (st != LOOM_OK) return st;
  p->input_pos[i] = p->n;
  lm_node_retain(p->inputs[i]);
  *out = p->inputs[i];
  return LOOM_OK;
}

/* The index of the weight named name in ps, or -1 (through the collection's
 * public accessors: its layout is the frontend's). */
static int weight_index(const loom_params *ps, const char *name) {
  int count = ps ? loom_params_count(ps) : 0;
  for (int i = 0; i < count; i++)
    if (strcmp(loom_params_name(ps, i), name) == 0) return i;
  return -1;
}

/* First pass of a load: a placeholder of the declared type joins the
 * collection loom_params_load fills from the safetensors file. */
static loom_status declare_weight(parser *p, const char *name, loom_dtype dtype,
                                  const loom_shape *shape, lm_node **out) {
  char why[512];
  if (weight_index(p->declared, name) >= 0) return bad(p, "weight '%s' appears twice", name);
  lm_node *ph = lm_node_new(LM_CONST, 0, NULL, *shape, dtype, LOOM_CPU);
  if (!ph) return out_of_memory(p);
  if (!lm_node_verify(ph, why, sizeof why)) {
    lm_node_release(ph);
    return bad(p, "weight '%s': %s", name, why);
  }
  lm_node_retain(ph);
  loom_tensor *t = lm_tensor_wrap(ph); /* consumes one reference */
  loom_status st = loom_params_add_buffer(p->declared, name, t);
  loom_free(t); /* the collection keeps its own */
  if (st != LOOM_OK) {
    lm_node_release(ph);
    return st;
  }
  *out = ph;
  return LOOM_OK;
}

/* Second pass (or a caller's weights): the named tensor, which must have the
 * declared type and data. */
static loom_status bind_weight(parser *p, const char *name, loom_dtype dtype,
                               const loom_shape *shape, lm_node **out) {
  char want[256], got[256], why[512];
  int i = weight_index(p->weights, name);
  lm_type_str(dtype, shape, want, sizeof want);
  if (i < 0) return bad(p, "weight '%s' (%s) is not among the weights given", name, want);
  if (p->weight_used[i]) return bad(p, "weight '%s' appears twice", name);
  loom_tensor *held = loom_params_at(p->weights, i);
  const lm_node *w = held->node; /* the collection keeps it alive */
  loom_free(held);
  if (!w || !lm_is_computed(w) || w->op == LM_INPUT || w->device.type != LOOM_DEVICE_CPU)
    return bad(p, "weight '%s' has no data on the CPU (realize it first)", name);
  if (w->dtype != dtype || !lm_shape_eq(&w->shape, shape))
    return bad(p, "weight '%s' is %s here, %s in the weights given", name, want,
               lm_type_str(w->dtype, &w->shape, got, sizeof got));
  if (!lm_node_verify(w, why, sizeof why)) return bad(p, "weight '%s': %s", name, why);
  p->weight_used[i] = true;
  lm_node_retain((lm_node *)w);
  *out = (lm_node *)w;
  return LOOM_OK;
}

/* "%k = weight <name> <type>" */
static loom_status parse_weight(parser *p, lm_node **out) {
  token name;
  loom_dtype dtype;
  loom_shape shape;
  loom_status st = take_name(p, "the weight's name", &name);
  if (st == LOOM_OK) st = take_type(p, &dtype, &shape);
  if (st == LOOM_OK) st = line_done(p, "the weight's type");
  if (st != LOOM_OK) return st;
  char text[LM_PROGRAM_MAX_NAME + 1];
  snprintf(text, sizeof text, "%.*s", (int)name.len, name.s);
  return p->declared ? declare_weight(p, text, dtype, &shape, out)
                     : bind_weight(p, text, dtype, &shape, out);
}

/* An op a program's text may name: not the leaves with data of their own
 * (BUFFER, COPY: weights are declared instead) nor INPUT (declared). */
static lm_op op_named(token t) {
  for (int op = 0; op < LM_NUM_OPS; op++)
    if (op != LM_BUFFER && op != LM_INPUT && op != LM_COPY && is(t, lm_op_name((lm_op)op)))
      return (lm_op)op;
  return LM_NUM_OPS;
}

/* "%k = <op> <type> %a %b ... key=value ...": a node over earlier positions. */
static loom_status parse_node(parser *p, token opname, lm_node **out) {
  char q[72], why[512];
  lm_op op = op_named(opname);
  if (op == LM_NUM_OPS)
    return bad(p, "unknown op '%s' (docs/PROGRAM_FORMAT.md lists them)", quote(opname, q));
  loom_dtype dtype;
  loom_shape shape;
  loom_status st = take_type(p, &dtype, &shape);
  int nsrc = 0;
  while (st == LOOM_OK && p->cur < p->eol && *p->cur == '%') {
    token t;
    int pos;
    take(p, &t);
    if (!parse_ref(t, p->n, &pos))
      st = bad(p, "source '%s' is not an earlier position (this line defines %%%d)", quote(t, q),
               p->n);
    else if (nsrc == LM_CAT_MAX_SOURCES)
      st = bad(p, "more than %d sources", LM_CAT_MAX_SOURCES);
    else
      p->srcs[nsrc++] = p->nodes[pos];
  }
  if (st != LOOM_OK) return st;
  lm_node *n = lm_node_new(op, nsrc, p->srcs, shape, dtype, LOOM_CPU);
  if (!n) return out_of_memory(p);
  st = parse_args(p, n);
  if (st == LOOM_OK && lm_op_table[op].cls == LM_OPC_LEAF) st = arg_follows(p, n);
  if (st == LOOM_OK) st = line_done(p, "the node");
  if (st == LOOM_OK && !lm_node_verify(n, why, sizeof why)) st = bad(p, "%s", why);
  if (st != LOOM_OK) {
    lm_node_release(n);
    return st;
  }
  *out = n;
  return LOOM_OK;
}

/* "%k = ...": position k, the next one. */
static loom_status parse_position(parser *p, token first) {
  token eq, form;
  char q[72];
  int k;
  if (!parse_ref(first, INT_MAX, &k) || k != p->n)
    return bad(p, "expected position %%%d here (positions are numbered in order), got '%s'", p->n,
               quote(first, q));
  loom_status st = take_expected(p, &eq, "'='");
  if (st == LOOM_OK && !is(eq, "="))
    st = bad(p, "expected '=' after %%%d, got '%s'", k, quote(eq, q));
  if (st == LOOM_OK) st = take_expected(p, &form, "input, weight or an op");
  if (st == LOOM_OK && p->n == LM_PROGRAM_MAX_ITEMS)
    st = bad(p, "more than %d positions", LM_PROGRAM_MAX_ITEMS);
  if (st != LOOM_OK) return st;
  if (!grow_positions(p)) return out_of_memory(p);
  lm_node *n = NULL;
  if (is(form, "input"))
    st = parse_input_use(p, &n);
  else if (is(form, "weight"))
    st = parse_weight(p, &n);
  else
    st = parse_node(p, form, &n);
  if (st != LOOM_OK) return st;
  p->nodes[p->n] = n;
  p->node_line[p->n++] = p->line;
  return LOOM_OK;
}

/* "output %k" */
static loom_status parse_output(parser *p) {
  token t;
  char q[72];
  int pos = -1;
  loom_status st = take_expected(p, &t, "a position");
  if (st == LOOM_OK && !parse_ref(t, p->n, &pos))
    st = bad(p, "output '%s' is not a position (there are %d)", quote(t, q), p->n);
  if (st == LOOM_OK) st = line_done(p, "the output");
  if (st == LOOM_OK && p->nout == LM_PROGRAM_MAX_ITEMS)
    st = bad(p, "more than %d outputs", LM_PROGRAM_MAX_ITEMS);
  if (st != LOOM_OK) return st;
  if (!grow_outputs(p)) return out_of_memory(p);
  p->outs[p->nout++] = pos;
  return LOOM_OK;
}

/* "loom-program <version>" */
static loom_status parse_header(parser *p) {
  size_t magic = strlen(LM_PROGRAM_MAGIC);
  p->line = 1;
  if (p->len < magic + 1 || memcmp(p->text, LM_PROGRAM_MAGIC " ", magic + 1) != 0)
    return bad(p, "not a loom program: the first line must be '%s %d'", LM_PROGRAM_MAGIC,
               LM_PROGRAM_VERSION);
  p->line = 0;
  bool got;
  token word, version;
  char q[72];
  int64_t v;
  loom_status st = next_line(p, &got);
  if (st != LOOM_OK) return st;
  take(p, &word);
  if (!take(p, &version) || !parse_i64(version.s, version.len, &v) || v < 0)
    return bad(p, "the format version '%s' is not a number", quote(version, q));
  if (v < LM_PROGRAM_VERSION || v > LM_PROGRAM_VERSION_FOLLOWS)
    return bad(p, "written by format version %lld, this loom reads versions %d to %d", (long long)v,
               LM_PROGRAM_VERSION, LM_PROGRAM_VERSION_FOLLOWS);
  p->version = (int)v;
  return line_done(p, "the version");
}

/* Inputs, positions, outputs, in that order, then "end" and nothing more. */
static loom_status parse_body(parser *p) {
  enum { INPUTS, SYMBOLS, POSITIONS, OUTPUTS } section = INPUTS;
  char q[72];
  for (;;) {
    bool got;
    token first;
    loom_status st = next_line(p, &got);
    if (st != LOOM_OK) return st;
    if (!got) return bad(p, "the text ends without 'end' (is it truncated?)");
    take(p, &first);
    if (is(first, "input")) {
      st = section == INPUTS ? parse_input_declaration(p)
                             : bad(p, "input declarations come before the symbols and positions");
    } else if (is(first, "symbol")) {
      st = p->version < LM_PROGRAM_VERSION_SYMBOLS
               ? bad(p, "symbol lines need format version %d or later", LM_PROGRAM_VERSION_SYMBOLS)
           : section <= SYMBOLS ? parse_symbol(p)
                                : bad(p, "symbol lines come before the positions");
      section = SYMBOLS;
    } else if (first.s[0] == '%') {
      if (section < SYMBOLS && p->version >= LM_PROGRAM_VERSION_SYMBOLS)
        st = bad(p,
                 "format version %d has symbol lines before the positions (version %d has "
                 "none)",
                 p->version, LM_PROGRAM_VERSION);
      else
        st = section != OUTPUTS ? parse_position(p, first)
                                : bad(p, "positions come before the outputs");
      section = POSITIONS;
    } else if (is(first, "output")) {
      st = p->n > 0 ? parse_output(p) : bad(p, "an output before any position");
      section = OUTPUTS;
    } else if (is(first, "end")) {
      if (p->nout == 0) return bad(p, "a program needs at least one output before 'end'");
      if ((st = line_done(p, "'end'")) != LOOM_OK) return st;
      break;
    } else {
      st = bad(p, "expected 'input', 'symbol', '%%<position>', 'output' or 'end', got '%s'",
               quote(first, q));
    }
    if (st != LOOM_OK) return st;
  }
  if (p->next < p->len) {
    p->line++;
    return bad(p, "text after 'end'");
  }
  return LOOM_OK;
}

/* The positions must be the graph's canonical order (a post-order walk from
 * the outputs, sources in order): every position used, none out of place.
 * Then a saved program reads back to the same positions, and saving it again
 * writes the same text. */
static loom_status check_canonical(parser *p) {
  lm_node **targets = malloc(sizeof *targets * (size_t)p->nout);
  if (!targets) return out_of_memory(p);
  for (int i = 0; i < p->nout; i++) targets[i] = p->nodes[p->outs[i]];
  lm_graph g;
  loom_status st = lm_graph_build(&g, targets, p->nout);
  free(targets);
  if (st != LOOM_OK) {
    lm_graph_free(&g);
    return out_of_memory(p);
  }
  for (int i = 0; i < p->n && st == LOOM_OK; i++) {
    if (i < g.n && g.nodes[i] == p->nodes[i]) continue;
    int reached = -1;
    for (int j = 0; j < g.n && reached < 0; j++)
      if (g.nodes[j] == p->nodes[i]) reached = j;
    p->line = p->node_line[i];
    if (reached < 0)
      st = bad(p, "position %%%d is not used by any output", i);
    else
      st = bad(p,
               "position %%%d is out of order: walking from the outputs (sources in order, "
               "then the node) reaches it as position %%%d",
               i, reached);
  }
  lm_graph_free(&g);
  return st;
}

static loom_status check_weights_used(parser *p) {
  int count = loom_params_count(p->weights);
  for (int i = 0; i < count; i++)
    if (!p->weight_used[i])
      return lm_fail(LOOM_ERR_CORRUPT, "%s: %s: the weights given hold '%s', which it does not use",
                     p->op, p->name, loom_params_name(p->weights, i));
  return LOOM_OK;
}

static loom_status parse_all(parser *p) {
  lm_no_grad_push(); /* a program computes values only, whatever the weights */
  loom_status st = parse_header(p);
  if (st == LOOM_OK) st = parse_body(p);
  if (st == LOOM_OK) st = check_canonical(p);
  lm_no_grad_pop();
  return st;
}

static void parser_free(parser *p) {
  for (int i = 0; i < p->n; i++) lm_node_release(p->nodes[i]);
  for (int i = 0; i < p->nin; i++) lm_node_release(p->inputs[i]);
  free(p->nodes);
  free(p->node_line);
  free(p->inputs);
  free(p->input_pos);
  free(p->outs);
  free(p->weight_used);
  for (int i = 0; i < p->nsyms; i++) free((char *)p->syms[i].symbol);
}

/* ------------------------------------------------------------ entry points */

/* Parses with weights bound from `weights` (or none), then compiles. */
static loom_status parse_and_build(const char *op, const char *name, const char *text, size_t len,
                                   const loom_params *weights, loom_program **out) {
  parser p = {.op = op, .name = name, .text = text, .len = len, .weights = weights};
  p.weight_used = calloc((size_t)loom_params_count(weights) + 1, sizeof *p.weight_used);
  loom_status st = p.weight_used ? parse_all(&p) : out_of_memory(&p);
  if (st == LOOM_OK) st = check_weights_used(&p);
  lm_node **outs = st == LOOM_OK ? malloc(sizeof *outs * (size_t)p.nout) : NULL;
  if (st == LOOM_OK && !outs) st = out_of_memory(&p);
  if (st == LOOM_OK) {
    for (int i = 0; i < p.nout; i++) outs[i] = p.nodes[p.outs[i]];
    st = lm_program_build(op, outs, p.nout, p.inputs, p.nin, out);
  }
  if (st == LOOM_OK && p.nsyms > 0 &&
      (st = lm_program_make_symbolic(op, *out, p.syms, p.nsyms)) != LOOM_OK) {
    loom_program_free(*out); /* a text edited into symbols the graph cannot follow */
    *out = NULL;
    if (st != LOOM_ERR_OOM) st = LOOM_ERR_CORRUPT; /* the message names op and the node */
  }
  free(outs);
  parser_free(&p);
  return st;
}

loom_status lm_program_parse(const char *text, size_t len, const loom_params *weights,
                             loom_program **out) {
  const char *op = "lm_program_parse";
  if (!out) return lm_fail(LOOM_ERR_NULL, "%s: out is NULL", op);
  *out = NULL;
  if (!text && len > 0) return lm_fail(LOOM_ERR_NULL, "%s: text is NULL", op);
  return parse_and_build(op, "<text>", text ? text : "", len, weights, out);
}

/* The whole file, refused before allocating when it is larger than any
 * program text may be. */
static loom_status read_text(const char *op, const char *path, char **text, size_t *len) {
  *text = NULL, *len = 0;
  int fd = lm_open_for_reading(path);
  if (fd < 0) return lm_fail(LOOM_ERR_IO, "%s: '%s': cannot open: %s", op, path, strerror(errno));
  struct stat sb;
  loom_status st = LOOM_OK;
  if (fstat(fd, &sb) != 0)
    st = lm_fail(LOOM_ERR_IO, "%s: '%s': cannot stat: %s", op, path, strerror(errno));
  else if (!S_ISREG(sb.st_mode))
    st = lm_fail(LOOM_ERR_IO, "%s: '%s': not a regular file", op, path);
  else if ((uint64_t)sb.st_size > LM_PROGRAM_MAX_TEXT)
    st = lm_fail(LOOM_ERR_CORRUPT, "%s: '%s': %lld bytes; a program text is at most %zu", op, path,
                 (long long)sb.st_size, LM_PROGRAM_MAX_TEXT);
  char *buf = st == LOOM_OK ? malloc((size_t)sb.st_size + 1) : NULL;
  if (st == LOOM_OK && !buf) st = lm_fail(LOOM_ERR_OOM, "%s: '%s': out of memory", op, path);
  size_t got = 0;
  while (st == LOOM_OK && got < (size_t)sb.st_size) {
    ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) st = lm_fail(LOOM_ERR_IO, "%s: '%s': cannot read: %s", op, path, strerror(errno));
    if (r <= 0) break; /* a file that shrank is read as it is now */
    got += (size_t)r;
  }
  close(fd);
  if (st != LOOM_OK) {
    free(buf);
    return st;
  }
  *text = buf, *len = got;
  return LOOM_OK;
}

/* The first pass: every weight line's name, dtype and shape, as placeholders
 * in a new collection (*declared, possibly empty). */
static loom_status declare_weights(const char *op, const char *path, const char *text, size_t len,
                                   loom_params **declared) {
  parser p = {.op = op, .name = path, .text = text, .len = len};
  p.declared = *declared = loom_params_new();
  loom_status st = p.declared ? parse_all(&p) : out_of_memory(&p);
  parser_free(&p);
  return st;
}

/* loom_params_load's failure, as loom_program_load reports it: a missing or
 * unreadable weights file is LOOM_ERR_IO, one that does not fit the program
 * LOOM_ERR_CORRUPT; the message keeps what loom_params_load said. */
static loom_status weights_failed(const char *op, const char *path, loom_status st,
                                  bool had_error) {
  char inner[1024] = "";
  if (!had_error && loom_last_error()) snprintf(inner, sizeof inner, "%s", loom_last_error());
  if (!had_error) loom_clear_error(); /* the first error on this thread becomes ours */
  loom_status mine = st == LOOM_ERR_IO || st == LOOM_ERR_OOM ? st : LOOM_ERR_CORRUPT;
  return lm_fail(mine, "%s: '%s': its weights: %s", op, path,
                 inner[0] ? inner : loom_status_name(st));
}

static loom_status load_weights(const char *op, const char *path, loom_params *declared) {
  char *wpath = malloc(strlen(path) + sizeof ".safetensors");
  if (!wpath) return lm_fail(LOOM_ERR_OOM, "%s: out of memory", op);
  strcpy(wpath, path);
  strcat(wpath, ".safetensors");
  bool had_error = loom_last_status() != LOOM_OK;
  loom_status st = loom_params_load(declared, wpath);
  free(wpath);
  return st == LOOM_OK ? LOOM_OK : weights_failed(op, path, st, had_error);
}

loom_program *loom_program_load(const char *path) {
  const char *op = "loom_program_load";
  if (!path) {
    lm_fail(LOOM_ERR_NULL, "%s: path is NULL", op);
    return NULL;
  }
  char *text;
  size_t len;
  loom_params *declared = NULL;
  loom_program *p = NULL;
  loom_status st = read_text(op, path, &text, &len);
  if (st == LOOM_OK) st = declare_weights(op, path, text, len, &declared);
  bool has_weights = loom_params_count(declared) > 0;
  if (st == LOOM_OK && has_weights) st = load_weights(op, path, declared);
  if (st == LOOM_OK) parse_and_build(op, path, text, len, has_weights ? declared : NULL, &p);
  loom_params_free(declared);
  free(text);
  return p;
}
