/*
 * Kernel description -> CUDA C (the CUDA twin of backends/llvm/codegen.c).
 *
 * Every instruction becomes one `const T v<i> = <expr>;` line whose meaning
 * is the LLVM backend's (prelude helpers fill the gaps where C++ differs).
 * Output points are spread over threads in one of four shapes (lm_cuda_mode):
 *
 *   elementwise  each thread computes LM_CUDA_VEC consecutive points per
 *                grid-stride step; when they are all in range and the output
 *                (and every input read at "the point's own index + c") is
 *                aligned, those are vector loads and one vector store.
 *   reductions   one thread (short rows), one warp or one block (long rows)
 *                per output point; threads stride over the reduced dims, then
 *                combine with warp shuffles (butterfly) and, for a block, one
 *                slot per warp in shared memory combined in warp order. The
 *                order depends only on the row length and LM_CUDA_BLOCK, so
 *                results are the same for any grid. The epilogue runs on the
 *                point's first thread.
 *   rows         (kernels with row statistics) one block per row: each
 *                statistic by a block reduction as above, every thread
 *                ending with it, then the block's threads stride over the
 *                row's points.
 *
 * Reduction semantics (ir/kernel.h): SUM accumulates in acc_dtype (integers
 * wrap), float sums in double (F64 compensated) and rounded once; integer MAX/MIN are plain; float
 * MAX/MIN and every ARGMAX/ARGMIN carry (value, index) pairs so that NaNs, the first maximum and
 * the sign of a zero maximum come out as the CPU's sequential loop has them; LSE takes the max,
 * then sums exp(v - shift) in double (the CPU in chunks of the values' dtype added to a compensated
 * double total).
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/nvrtc/nvrtc_backend.h"

/* Row lengths up to these run one thread / one warp per output point. */
#define THREAD_ROW_MAX 32
#define WARP_ROW_MAX 1024

/* ------------------------------------------------------------------ text */

typedef struct sb {
  char *p;
  size_t len, cap;
  bool oom;
} sb;

static void sb_vprintf(sb *s, const char *fmt, va_list ap) {
  if (s->oom) return;
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(s->p ? s->p + s->len : NULL, s->p ? s->cap - s->len : 0, fmt, ap);
  if (n >= 0 && s->p && s->len + (size_t)n < s->cap) {
    s->len += (size_t)n;
    va_end(again);
    return;
  }
  size_t need = s->len + (size_t)(n < 0 ? 0 : n) + 1, cap = s->cap ? s->cap : 4096;
  while (cap < need) cap *= 2;
  char *grown = realloc(s->p, cap);
  if (n < 0 || !grown) {
    s->oom = true;
    if (grown) s->p = grown;
    va_end(again);
    return;
  }
  s->p = grown, s->cap = cap;
  vsnprintf(s->p + s->len, s->cap - s->len, fmt, again);
  s->len += (size_t)n;
  va_end(again);
}

static void sb_printf(sb *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sb *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sb_vprintf(s, fmt, ap);
  va_end(ap);
}

/* ------------------------------------------------------------------ state */

/* Elements of slot `slot` at the point's own index + shift, loaded as vectors. */
typedef struct chunk {
  int slot;
  loom_dtype dt;
  int64_t shift;
} chunk;

typedef enum acc_kind {
  ACC_SUM,    /* running sum of acc_dtype */
  ACC_MINMAX, /* integer MAX/MIN: the running extreme */
  ACC_PAIR,   /* float MAX/MIN, ARGMAX/ARGMIN: (value, index) */
  ACC_LSE     /* max, then a double sum of exp(v - shift) */
} acc_kind;

typedef struct cg {
  const lk_kernel *k;
  sb s;
  int ind; /* indentation, in spaces */
  unsigned char *body_needed, *epi_needed;
  int *chunk_of; /* per instruction: the chunk a load reads in the vector path, or -1 */
  chunk *chunks;
  int nchunks;
  lm_cuda_mode mode;
  int64_t outer, red; /* points of the outer and of the reduced dims */
  /* the reduction being generated: the kernel's, or a row statistic's */
  lk_reduce reduce;
  loom_dtype acc_dtype;
  int value;                   /* instruction accumulated */
  const unsigned char *needed; /* instructions it needs */
  int red_first;               /* first reduced dim */
  unsigned char *stat_needed[LK_MAX_STATS];
  acc_kind acc;
  bool want_max;
  int gemm_slot; /* a fused GEMM epilogue: the slot whose loads are the product, else 0 */
} cg;

/* In registers BF16 and F16 are floats; every instruction of theirs that can
 * make a value they cannot hold is rounded to them (as on the CPU). */
static const char *ctype(loom_dtype dt) {
  return lm_dtype_is_half(dt) ? "float" : lm_dtype_info_of(dt)->cuda_type;
}

/* In memory BOOL is one byte, 0 or 1; BF16 and F16 their bits. */
static const char *mtype(loom_dtype dt) {
  return dt == LOOM_BOOL ? "unsigned char" : lm_dtype_info_of(dt)->cuda_type;
}

static void line(cg *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(cg *g, const char *fmt, ...) {
  sb_printf(&g->s, "%*s", g->ind, "");
  va_list ap;
  va_start(ap, fmt);
  sb_vprintf(&g->s, fmt, ap);
  va_end(ap);
  sb_printf(&g->s, "\n");
}

static void open_block(cg *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void open_block(cg *g, const char *fmt, ...) {
  sb_printf(&g->s, "%*s", g->ind, "");
  va_list ap;
  va_start(ap, fmt);
  sb_vprintf(&g->s, fmt, ap);
  va_end(ap);
  sb_printf(&g->s, " {\n");
  g->ind += 2;
}

static void close_block(cg *g) {
  g->ind -= 2;
  line(g, "}");
}

/* The extent of dim d as C: a constant, or the generic kernel's size parameter. */
static const char *extent_c(const lk_kernel *k, int d, char *buf, size_t len) {
  if (lk_dim_is_sized(k, d))
    snprintf(buf, len, "lm_z%d", k->dom_size[d] - 1);
  else
    snprintf(buf, len, "%" PRId64 "LL", k->dom[d]);
  return buf;
}

/* The points of dims [from, to) as a C expression. */
static const char *points_c(const lk_kernel *k, int from, int to, char *buf, size_t len) {
  if (!lk_dims_sized(k, from, to)) {
    snprintf(buf, len, "%" PRId64 "LL", lk_extent_product(k, from, to));
    return buf;
  }
  size_t at = (size_t)snprintf(buf, len, "(1LL");
  for (int d = from; d < to && at < len; d++) {
    char e[32];
    at += (size_t)snprintf(buf + at, len - at, " * %s", extent_c(k, d, e, sizeof e));
  }
  if (at < len) snprintf(buf + at, len - at, ")");
  return buf;
}

/* ------------------------------------------------------------------ literals */

/* A float constant exactly: hexadecimal, rounded to float first for F32 (as
 * LLVMConstReal does); infinities and NaN through the prelude's bit casts. */
static void put_float(sb *s, loom_dtype dt, double v) {
  bool f32 = dt != LOOM_F64;
  double x = f32 ? (double)(float)v : v;
  if (isnan(x))
    sb_printf(s, "%s", f32 ? "LM_NAN_F" : "LM_NAN_D");
  else if (isinf(x))
    sb_printf(s, "(%s%s)", x < 0 ? "-" : "", f32 ? "LM_INF_F" : "LM_INF_D");
  else
    sb_printf(s, "(%a%s)", x, f32 ? "f" : "");
}

static void put_int(sb *s, loom_dtype dt, int64_t v) {
  switch (dt) {
  case LOOM_BOOL: sb_printf(s, "%s", v ? "true" : "false"); break;
  case LOOM_I64:
    if (v == INT64_MIN)
      sb_printf(s, "(-9223372036854775807LL - 1)");
    else
      sb_printf(s, "(%" PRId64 "LL)", v);
    break;
  case LOOM_U64: sb_printf(s, "(%" PRIu64 "ULL)", (uint64_t)v); break;
  default: /* I32, U8, I8, I16, U16, U32: truncated, as LLVMConstInt does */
    sb_printf(s, "((%s)%" PRId64 "LL)", ctype(dt), v);
  }
}

static void put_const(sb *s, const lk_inst *in) {
  if (lm_dtype_is_float(in->dtype))
    put_float(s, in->dtype, in->imm_f);
  else
    put_int(s, in->dtype, in->imm_i);
}

/* The lowest (or highest) value of a dtype: the MAX (MIN) identity. */
static void put_extreme(sb *s, loom_dtype dt, bool highest) {
  switch (dt) {
  case LOOM_F32:
  case LOOM_F64:
  case LOOM_BF16:
  case LOOM_F16: put_float(s, dt, highest ? INFINITY : -INFINITY); break;
  case LOOM_I32: sb_printf(s, "%s", highest ? "2147483647" : "(-2147483647 - 1)"); break;
  case LOOM_I64: put_int(s, dt, highest ? INT64_MAX : INT64_MIN); break;
  case LOOM_U8: sb_printf(s, "((unsigned char)%d)", highest ? 255 : 0); break;
  case LOOM_I8: sb_printf(s, "((signed char)%d)", highest ? 127 : -128); break;
  case LOOM_I16: sb_printf(s, "((short)%d)", highest ? 32767 : -32768); break;
  case LOOM_U16: sb_printf(s, "((unsigned short)%d)", highest ? 65535 : 0); break;
  case LOOM_U32: sb_printf(s, "%s", highest ? "4294967295u" : "0u"); break;
  case LOOM_U64: sb_printf(s, "%s", highest ? "18446744073709551615ull" : "0ull"); break;
  default: sb_printf(s, "%s", highest ? "true" : "false"); break;
  }
}

/* ------------------------------------------------------------------ instructions */

static const char *math_name(lk_op op) {
  switch (op) {
  case LK_EXP: return "lm_exp";
  case LK_LOG: return "lm_log";
  case LK_SQRT: return "lm_sqrt";
  case LK_SIN: return "lm_sin";
  case LK_COS: return "lm_cos";
  case LK_TANH: return "lm_tanh";
  case LK_ERF: return "lm_erf";
  case LK_FLOOR: return "lm_floor";
  default: return NULL;
  }
}

static void put_arith(sb *s, const lk_inst *in) {
  static const char *const sym[] = {[LK_ADD] = "+", [LK_SUB] = "-", [LK_MUL] = "*"};
  static const char *const fn[] = {[LK_ADD] = "lm_add", [LK_SUB] = "lm_sub", [LK_MUL] = "lm_mul"};
  if (lm_dtype_is_float(in->dtype))
    sb_printf(s, "v%d %s v%d", in->a, sym[in->op], in->b);
  else
    sb_printf(s, "%s(v%d, v%d)", fn[in->op], in->a, in->b);
}

static void put_neg_abs(sb *s, const lk_inst *in) {
  if (in->op == LK_NEG)
    sb_printf(s, lm_dtype_is_float(in->dtype) ? "-v%d" : "lm_neg(v%d)", in->a);
  else if (lm_dtype_is_float(in->dtype))
    sb_printf(s, "lm_fabs(v%d)", in->a);
  else if (lm_dtype_is_unsigned(in->dtype))
    sb_printf(s, "v%d", in->a);
  else /* wraps: abs(INT_MIN) == INT_MIN, as the CPU's select of the negation */
    sb_printf(s, "lm_iabs(v%d)", in->a);
}

static void put_compare(sb *s, const lk_inst *in) {
  const char *op = in->op == LK_CMPLT   ? "<"
                   : in->op == LK_CMPLE ? "<="
                   : in->op == LK_CMPEQ ? "=="
                                        : "!="; /* true on NaN, as the CPU's une */
  sb_printf(s, "(v%d %s v%d)", in->a, op, in->b);
}

/* C++ conversions are the CPU's: float -> int truncates, ints wrap, U8 and
 * BOOL widen as unsigned, I8 as signed (each unsigned dtype as unsigned); to BOOL is != 0 (NaN:
 * true). Out-of-range float -> int conversions are undefined in the description (C's rule); CUDA
 * saturates. */
static void put_cast(sb *s, const lk_kernel *k, const lk_inst *in) {
  loom_dtype from = k->inst[in->a].dtype, to = in->dtype;
  if (to == LOOM_BOOL)
    sb_printf(s, "(v%d != 0)", in->a);
  else if (lm_dtype_is_float(from) && !lm_dtype_is_float(to))
    sb_printf(s, "lm_to_%s((double)v%d)", loom_dtype_name(to), in->a);
  else
    sb_printf(s, "(%s)v%d", ctype(to), in->a);
}

/* The unsigned integer of a dtype's size, as C. */
static const char *bits_type(loom_dtype dt) {
  switch (loom_dtype_size(dt)) {
  case 1: return "unsigned char";
  case 2: return "unsigned short";
  case 4: return "unsigned";
  default: return "unsigned long long";
  }
}

/* a's bits in memory read as `to` (the CPU's: BOOL a byte != 0; BF16 and F16
 * through the prelude's conversions of their bits, exact for their values). */
static void put_bitcast(sb *s, const lk_kernel *k, const lk_inst *in) {
  loom_dtype from = k->inst[in->a].dtype, to = in->dtype;
  char bits[96];
  if (from == LOOM_F32)
    snprintf(bits, sizeof bits, "__float_as_uint(v%d)", in->a);
  else if (from == LOOM_F64)
    snprintf(bits, sizeof bits, "(unsigned long long)__double_as_longlong(v%d)", in->a);
  else if (lm_dtype_is_half(from))
    snprintf(bits, sizeof bits, "lm_to_%s(v%d)", loom_dtype_name(from), in->a);
  else
    snprintf(bits, sizeof bits, "(%s)v%d", bits_type(from), in->a);
  if (from == to)
    sb_printf(s, "v%d", in->a);
  else if (to == LOOM_BOOL)
    sb_printf(s, "(%s != 0)", bits);
  else if (to == LOOM_F32)
    sb_printf(s, "__uint_as_float(%s)", bits);
  else if (to == LOOM_F64)
    sb_printf(s, "__longlong_as_double((long long)%s)", bits);
  else if (lm_dtype_is_half(to))
    sb_printf(s, "lm_from_%s(%s)", loom_dtype_name(to), bits);
  else
    sb_printf(s, "(%s)%s", ctype(to), bits);
}

static void put_load(cg *g, const lk_inst *in, int i, bool vector) {
  const char *bool_test = in->dtype == LOOM_BOOL ? " != 0" : "";
  bool half = lm_dtype_is_half(in->dtype);
  if (g->gemm_slot > 0 && in->slot == g->gemm_slot) { /* at the point's own index */
    sb_printf(&g->s, "lm_gemm_v");
    return;
  }
  if (half) sb_printf(&g->s, "lm_from_%s", loom_dtype_name(in->dtype));
  if (vector && g->chunk_of[i] >= 0)
    sb_printf(&g->s, "(lm_c%d.v[lm_j]%s)", g->chunk_of[i], bool_test);
  else
    sb_printf(&g->s, "(((const %s *)s%d)[v%d]%s)", mtype(in->dtype), in->slot, in->a, bool_test);
}

/* A float value of `v` stored as out dtype dt: BF16 and F16 as their bits. */
static void put_stored(sb *s, loom_dtype dt, int v) {
  if (lm_dtype_is_half(dt))
    sb_printf(s, "lm_to_%s(v%d)", loom_dtype_name(dt), v);
  else
    sb_printf(s, "(%s)v%d", mtype(dt), v);
}

static void put_expr(cg *g, int i, bool vector) {
  const lk_inst *in = &g->k->inst[i];
  sb *s = &g->s;
  switch (in->op) {
  case LK_DIM: sb_printf(s, "d%d", (int)in->imm_i); return;
  case LK_IDIV:
  case LK_IMOD: /* both >= 0: unsigned division, exact and cheaper */
    sb_printf(s, "(long long)((unsigned long long)v%d %s (unsigned long long)v%d)", in->a,
              in->op == LK_IDIV ? "/" : "%", in->b);
    return;
  case LK_CONST: put_const(s, in); return;
  case LK_LOAD: put_load(g, in, i, vector); return;
  case LK_RAND:
    sb_printf(s, "lm_philox_%s(lm_k%d_0, lm_k%d_1, (unsigned long long)v%d, %" PRIu32 "u)",
              in->dtype == LOOM_F32 ? "f32" : "f64", in->slot, in->slot, in->a,
              (uint32_t)in->imm_i);
    return;
  case LK_ACC: sb_printf(s, "lm_acc"); return;
  case LK_STAT: sb_printf(s, "lm_stat%d", (int)in->imm_i); return;
  case LK_SIZE: /* a generic kernel's size parameter */
    if (in->dtype == LOOM_I64)
      sb_printf(s, "lm_z%lld", (long long)in->imm_i);
    else
      sb_printf(s, "((%s)lm_z%lld)", ctype(in->dtype), (long long)in->imm_i);
    return;
  case LK_PARAM: /* the planner binds these on the CPU only; a device array here */
    sb_printf(s, "((%s)((const double *)s%d)[%lld])", ctype(in->dtype), in->slot,
              (long long)in->imm_i);
    return;
  case LK_ADD:
  case LK_SUB:
  case LK_MUL: put_arith(s, in); return;
  case LK_DIV: sb_printf(s, "v%d / v%d", in->a, in->b); return;
  case LK_MAX:
  case LK_MIN:
    sb_printf(s, "lm_%s(v%d, v%d)", in->op == LK_MAX ? "max" : "min", in->a, in->b);
    return;
  case LK_POW: sb_printf(s, "lm_pow(v%d, v%d)", in->a, in->b); return;
  case LK_NEG:
  case LK_ABS: put_neg_abs(s, in); return;
  case LK_CMPLT:
  case LK_CMPLE:
  case LK_CMPEQ:
  case LK_CMPNE: put_compare(s, in); return;
  case LK_AND: sb_printf(s, "(v%d && v%d)", in->a, in->b); return;
  case LK_OR: sb_printf(s, "(v%d || v%d)", in->a, in->b); return;
  case LK_NOT: sb_printf(s, "(!v%d)", in->a); return;
  case LK_WHERE: sb_printf(s, "(v%d ? v%d : v%d)", in->a, in->b, in->c); return;
  case LK_CAST: put_cast(s, g->k, in); return;
  case LK_BITCAST: put_bitcast(s, g->k, in); return;
  default: break;
  }
  const char *fn = math_name(in->op);
  sb_printf(s, "%s(v%d)", fn ? fn : "lm_unknown_op", in->a);
}

/* The needed instructions [0, upto] as constants v<i>; with `vector`, loads of
 * chunks read the chunk's element lm_j. */
static void emit_eval(cg *g, const unsigned char *needed, int upto, bool vector) {
  for (int i = 0; i <= upto; i++) {
    if (!needed[i]) continue;
    const lk_inst *in = &g->k->inst[i];
    sb_printf(&g->s, "%*sconst %s v%d = ", g->ind, "", ctype(in->dtype), i);
    if (lk_inst_rounds(in)) sb_printf(&g->s, "lm_round_%s(", loom_dtype_name(in->dtype));
    put_expr(g, i, vector);
    sb_printf(&g->s, lk_inst_rounds(in) ? ");\n" : ";\n");
  }
}

/* ------------------------------------------------------------------ indices */

/* Domain dims [from, to) from the row-major linear index `var` over them, in
 * 32-bit arithmetic when they have at most 2^32 points (constant divisors
 * become multiplies either way). */
static void emit_unravel(cg *g, const char *var, const char *q, int from, int to) {
  const lk_kernel *k = g->k;
  if (from == to) return;
  bool narrow =
      !lk_dims_sized(k, from, to) && lk_extent_product(k, from, to) <= (int64_t)UINT32_MAX;
  const char *ut = narrow ? "unsigned int" : "unsigned long long", *suffix = narrow ? "u" : "ull";
  line(g, "%s %s = (%s)%s;", ut, q, ut, var);
  for (int d = to - 1; d > from; d--) {
    if (lk_dim_is_sized(k, d)) {
      line(g, "const long long d%d = (long long)(%s %% (%s)lm_z%d);", d, q, ut, k->dom_size[d] - 1);
      line(g, "%s /= (%s)lm_z%d;", q, ut, k->dom_size[d] - 1);
      continue;
    }
    if (k->dom[d] == 1) {
      line(g, "const long long d%d = 0;", d);
      continue;
    }
    line(g, "const long long d%d = (long long)(%s %% %" PRId64 "%s);", d, q, k->dom[d], suffix);
    line(g, "%s /= %" PRId64 "%s;", q, k->dom[d], suffix);
  }
  line(g, "const long long d%d = (long long)%s;", from, q);
}

static void emit_store_to(cg *g, int slot, loom_dtype dt, const char *at, int value) {
  sb_printf(&g->s, "%*s((%s *)s%d)[%s] = ", g->ind, "", mtype(dt), slot, at);
  put_stored(&g->s, dt, value);
  sb_printf(&g->s, ";\n");
}

static void emit_store(cg *g, const char *at, int value) {
  emit_store_to(g, 0, g->k->out_dtype, at, value);
}

/* The last instruction a plain point evaluates: its value or a more output's. */
static int last_root(const lk_kernel *k) {
  int last = k->value;
  for (int m = 0; m < k->nmore; m++)
    if (k->more[m].value > last) last = k->more[m].value;
  return last;
}

static loom_dtype more_dtype(const lk_kernel *k, int m) { return k->inst[k->more[m].value].dtype; }

/* ------------------------------------------------------------------ header */

static void emit_signature(cg *g, const char *name) {
  sb_printf(&g->s, "extern \"C\" __global__ void __launch_bounds__(%d) %s(void *s0", LM_CUDA_BLOCK,
            name);
  for (int s = 1; s < g->k->nslots; s++)
    if (s != g->k->size_slot) sb_printf(&g->s, ", const void *s%d", s);
  for (int z = 0; z < g->k->nsizes; z++) /* a generic kernel's sizes, by value */
    sb_printf(&g->s, ", const long long lm_z%d", z);
  sb_printf(&g->s, ", long long begin, long long end) {\n");
  g->ind = 2;
}

/* Philox keys: loaded once per thread. */
static void emit_keys(cg *g) {
  const lk_kernel *k = g->k;
  unsigned char *done = calloc((size_t)k->nslots, 1);
  if (!done) {
    g->s.oom = true;
    return;
  }
  for (int i = 0; i < k->ninst; i++) {
    const lk_inst *in = &k->inst[i];
    bool needed = g->body_needed[i] || g->epi_needed[i];
    for (int s = 0; s < k->nstats; s++) needed |= g->stat_needed[s][i];
    if (in->op != LK_RAND || done[in->slot] || !needed) continue;
    done[in->slot] = 1;
    line(g, "const unsigned int lm_k%d_0 = ((const unsigned int *)s%d)[0];", in->slot, in->slot);
    line(g, "const unsigned int lm_k%d_1 = ((const unsigned int *)s%d)[1];", in->slot, in->slot);
  }
  free(done);
}

/* The kernel's listing as a comment, for whoever reads a dumped source. */
static void emit_listing(cg *g, const char *name) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return;
  lk_kernel_print(g->k, f);
  fclose(f);
  sb_printf(&g->s, "// %s\n", name);
  char *save = NULL;
  for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
    sb_printf(&g->s, "// %s\n", l);
  free(text);
}

/* ------------------------------------------------------------------ elementwise */

/* The load reads the point's own row-major index + shift (dims of extent 1
 * always have index 0, so their coefficient does not matter). */
static bool contiguous(const lk_kernel *k, const lk_affine *off, int64_t *shift) {
  if (!off->ok || lk_dims_sized(k, 0, k->nouter)) return false;
  int64_t stride = 1;
  for (int d = k->nouter - 1; d >= 0; d--) {
    if (k->dom[d] != 1 && off->c[d] != stride) return false;
    stride *= k->dom[d];
  }
  *shift = off->k;
  return true;
}

static bool find_chunks(cg *g) {
  const lk_kernel *k = g->k;
  lk_affine *af = calloc((size_t)k->ninst, sizeof *af);
  g->chunks = calloc((size_t)k->ninst, sizeof *g->chunks);
  if (!af || !g->chunks) {
    free(af);
    return false;
  }
  lk_affine_analyze(k, af);
  for (int i = 0; i < k->nbody; i++) {
    const lk_inst *in = &k->inst[i];
    int64_t shift;
    if (in->op != LK_LOAD || !g->body_needed[i] || !contiguous(k, &af[in->a], &shift)) continue;
    int c = 0;
    while (c < g->nchunks && !(g->chunks[c].slot == in->slot && g->chunks[c].dt == in->dtype &&
                               g->chunks[c].shift == shift))
      c++;
    if (c == g->nchunks) g->chunks[g->nchunks++] = (chunk){in->slot, in->dtype, shift};
    g->chunk_of[i] = c;
  }
  free(af);
  return true;
}

/* All LM_CUDA_VEC points in range and every vector access aligned. */
static void emit_vector_condition(cg *g) {
  const char *out = mtype(g->k->out_dtype);
  sb_printf(&g->s, "%*sif (lm_base + %d <= end && lm_aligned<%s>(s0, lm_base)", g->ind, "",
            LM_CUDA_VEC, out);
  for (int m = 0; m < g->k->nmore; m++)
    sb_printf(&g->s, " &&\n%*slm_aligned<%s>(s%d, lm_base)", g->ind + 4, "",
              mtype(more_dtype(g->k, m)), g->k->more[m].slot);
  for (int c = 0; c < g->nchunks; c++)
    sb_printf(&g->s, " &&\n%*slm_aligned<%s>(s%d, lm_base + (%" PRId64 "LL))", g->ind + 4, "",
              mtype(g->chunks[c].dt), g->chunks[c].slot, g->chunks[c].shift);
  sb_printf(&g->s, ") {\n");
  g->ind += 2;
}

static void emit_vector_path(cg *g) {
  const lk_kernel *k = g->k;
  const char *out = mtype(k->out_dtype);
  emit_vector_condition(g);
  for (int c = 0; c < g->nchunks; c++) {
    const char *t = mtype(g->chunks[c].dt);
    line(g, "const lm_chunk<%s> lm_c%d = lm_load4((const %s *)s%d + (lm_base + (%" PRId64 "LL)));",
         t, c, t, g->chunks[c].slot, g->chunks[c].shift);
  }
  line(g, "lm_chunk<%s> lm_out;", out);
  for (int m = 0; m < k->nmore; m++) line(g, "lm_chunk<%s> lm_more%d;", mtype(more_dtype(k, m)), m);
  line(g, "#pragma unroll");
  open_block(g, "for (int lm_j = 0; lm_j < %d; lm_j++)", LM_CUDA_VEC);
  line(g, "const long long lm_p = lm_base + lm_j;");
  emit_unravel(g, "lm_p", "lm_q", 0, k->nouter);
  emit_eval(g, g->body_needed, last_root(k), true);
  sb_printf(&g->s, "%*slm_out.v[lm_j] = ", g->ind, "");
  put_stored(&g->s, k->out_dtype, k->value);
  sb_printf(&g->s, ";\n");
  for (int m = 0; m < k->nmore; m++) {
    sb_printf(&g->s, "%*slm_more%d.v[lm_j] = ", g->ind, "", m);
    put_stored(&g->s, more_dtype(k, m), k->more[m].value);
    sb_printf(&g->s, ";\n");
  }
  close_block(g);
  line(g, "lm_store4((%s *)s0 + lm_base, lm_out);", out);
  for (int m = 0; m < k->nmore; m++)
    line(g, "lm_store4((%s *)s%d + lm_base, lm_more%d);", mtype(more_dtype(k, m)), k->more[m].slot,
         m);
}

/* An update in place (keep_slot, passes/in_place.c): slot 0 starts with the
 * kept slot's values (the runtime gives the step that buffer, or a copy of
 * it), so a point whose WHERE takes the kept arm needs neither that load nor
 * a store. Every point evaluates the condition; only the others evaluate the
 * other arm and store it: a KV cache's new row, not the whole cache. */
static void gen_kept(cg *g) {
  const lk_kernel *k = g->k;
  const lk_inst *w = &k->inst[k->value];
  int arm = lk_kernel_keep_arm(k), other = arm == 1 ? w->c : w->b;
  unsigned char *cond_needed = calloc((size_t)k->ninst, 1);
  unsigned char *other_needed = calloc((size_t)k->ninst, 1);
  if (!cond_needed || !other_needed) {
    free(cond_needed), free(other_needed);
    g->s.oom = true;
    return;
  }
  lk_mark_needed(k, w->a, cond_needed);
  lk_mark_needed(k, other, other_needed);
  for (int i = 0; i < k->ninst; i++) other_needed[i] &= !cond_needed[i];
  line(g, "const long long lm_stride = (long long)gridDim.x * %d;", LM_CUDA_BLOCK);
  open_block(g,
             "for (long long lm_p = begin + (long long)blockIdx.x * %d + threadIdx.x; lm_p < end; "
             "lm_p += lm_stride)",
             LM_CUDA_BLOCK);
  emit_unravel(g, "lm_p", "lm_q", 0, k->nouter);
  emit_eval(g, cond_needed, w->a, false);
  line(g, "if (%sv%d) continue; /* the kept value, already there */", arm == 1 ? "" : "!", w->a);
  emit_eval(g, other_needed, other, false);
  emit_store(g, "lm_p", other);
  close_block(g);
  free(cond_needed), free(other_needed);
}

static void gen_elementwise(cg *g) {
  const lk_kernel *k = g->k;
  if (k->keep_slot) {
    gen_kept(g);
    return;
  }
  if (!find_chunks(g)) {
    g->s.oom = true;
    return;
  }
  line(g, "const long long lm_stride = (long long)gridDim.x * %d;", LM_CUDA_BLOCK * LM_CUDA_VEC);
  open_block(g,
             "for (long long lm_base = begin + ((long long)blockIdx.x * %d + threadIdx.x) * %d; "
             "lm_base < end; lm_base += lm_stride)",
             LM_CUDA_BLOCK, LM_CUDA_VEC);
  emit_vector_path(g);
  g->ind -= 2;
  open_block(g, "} else");
  open_block(g, "for (long long lm_p = lm_base; lm_p < end && lm_p < lm_base + %d; lm_p++)",
             LM_CUDA_VEC);
  emit_unravel(g, "lm_p", "lm_q", 0, k->nouter);
  emit_eval(g, g->body_needed, last_root(k), false);
  emit_store(g, "lm_p", k->value);
  for (int m = 0; m < k->nmore; m++)
    emit_store_to(g, k->more[m].slot, more_dtype(k, m), "lm_p", k->more[m].value);
  close_block(g);
  close_block(g);
  close_block(g);
}

/* ------------------------------------------------------------------ reductions */

static loom_dtype value_dtype(const cg *g) { return g->k->inst[g->value].dtype; }

static const char *max_min(const cg *g) { return g->want_max ? "max" : "min"; }

/* Float sums accumulate in double, each thread's share of an F64 sum with a
 * compensation (lm_ac, lm_two_sum), so the error does not grow with the
 * length; they are combined across threads in double and rounded once. */
static bool float_sum(const cg *g) { return g->acc == ACC_SUM && lm_dtype_is_float(g->acc_dtype); }

/* The type of lm_a (and of the block's shared slots). */
static const char *acc_ctype(const cg *g) {
  if (float_sum(g)) return "double";
  return ctype(g->acc == ACC_SUM ? g->acc_dtype : value_dtype(g));
}

/* The accumulator's variables at their identities (lm_a, and lm_ai for pairs). */
static void emit_acc_init(cg *g) {
  loom_dtype vt = value_dtype(g);
  sb *s = &g->s;
  if (g->acc == ACC_SUM) {
    line(g, "%s lm_a = (%s)0;", acc_ctype(g), acc_ctype(g));
    if (float_sum(g) && g->acc_dtype == LOOM_F64) line(g, "double lm_ac = 0.0;");
    return;
  }
  /* MAX, ARGMAX, LSE's max start at the lowest value; MIN, ARGMIN at the highest */
  sb_printf(s, "%*s%s lm_a = ", g->ind, "", ctype(vt));
  put_extreme(s, vt, !g->want_max);
  sb_printf(s, ";\n");
  if (g->acc == ACC_PAIR) line(g, "long long lm_ai = LM_NO_INDEX;");
}

/* Combines the value v<value> at reduced index lm_r (pass 2: LSE's sum). */
static void emit_acc_step(cg *g, int pass) {
  int x = g->value;
  switch (g->acc) {
  case ACC_SUM:
    if (float_sum(g) && g->acc_dtype == LOOM_F64)
      line(g, "lm_two_sum(lm_a, lm_ac, v%d);", x);
    else if (float_sum(g))
      line(g, "lm_a += (double)v%d;", x);
    else
      line(g, "lm_a = lm_add(lm_a, v%d);", x);
    break;
  case ACC_MINMAX: line(g, "lm_a = lm_%s(v%d, lm_a);", max_min(g), x); break;
  case ACC_PAIR:
    line(g, "lm_arg_take<%s>(lm_a, lm_ai, v%d, lm_r);", g->want_max ? "true" : "false", x);
    break;
  case ACC_LSE:
    if (pass == 1)
      line(g, "lm_a = lm_max(lm_a, v%d);", x);
    else if (value_dtype(g) == LOOM_F64)
      line(g, "lm_two_sum(lm_s, lm_sc, lm_exp(v%d - lm_shift));", x);
    else
      line(g, "lm_s += (double)lm_exp(v%d - lm_shift);", x);
    break;
  }
}

/* `var` (and lm_ai) combined with `other` (and `other_i`). */
static void emit_combine(cg *g, int pass, const char *other, const char *other_i) {
  if (g->acc == ACC_SUM)
    line(g, "lm_a = lm_add(lm_a, %s);", other);
  else if (g->acc == ACC_MINMAX)
    line(g, "lm_a = lm_%s(lm_a, %s);", max_min(g), other);
  else if (g->acc == ACC_PAIR)
    line(g, "lm_arg_take<%s>(lm_a, lm_ai, %s, %s);", g->want_max ? "true" : "false", other,
         other_i);
  else if (pass == 1)
    line(g, "lm_a = lm_max(lm_a, %s);", other);
  else
    line(g, "lm_s = lm_s + %s;", other);
}

/* Warp butterfly, then (blocks) one shared slot per warp combined in warp order
 * by every thread, so every thread of the point holds the result. */
static void emit_acc_combine(cg *g, int pass) {
  if (float_sum(g) && g->acc_dtype == LOOM_F64) line(g, "lm_a += lm_ac;");
  if (g->acc == ACC_LSE && pass == 2 && value_dtype(g) == LOOM_F64) line(g, "lm_s += lm_sc;");
  if (g->mode == LM_CUDA_RED_THREAD) return;
  const char *var = g->acc == ACC_LSE && pass == 2 ? "lm_s" : "lm_a";
  open_block(g, "for (int lm_o = 16; lm_o > 0; lm_o >>= 1)");
  if (g->acc == ACC_PAIR) {
    line(g, "const long long lm_bi = lm_shfl(lm_ai, lm_o);");
    line(g, "const %s lm_b = lm_shfl(lm_a, lm_o);", ctype(value_dtype(g)));
    emit_combine(g, pass, "lm_b", "lm_bi");
  } else {
    line(g, "const auto lm_b = lm_shfl(%s, lm_o);", var);
    emit_combine(g, pass, "lm_b", NULL);
  }
  close_block(g);
  if (g->mode != LM_CUDA_RED_BLOCK) return;
  const char *sh = pass == 2 ? "lm_sh_s" : "lm_sh_a";
  open_block(g, "if (lm_lane == 0)");
  line(g, "%s[lm_warp] = %s;", sh, var);
  if (g->acc == ACC_PAIR) line(g, "lm_sh_i[lm_warp] = lm_ai;");
  close_block(g);
  line(g, "__syncthreads();");
  line(g, "%s = %s[0];", var, sh);
  if (g->acc == ACC_PAIR) line(g, "lm_ai = lm_sh_i[0];");
  open_block(g, "for (int lm_w = 1; lm_w < %d; lm_w++)", LM_CUDA_BLOCK / 32);
  if (g->acc == ACC_PAIR)
    emit_combine(g, pass, "lm_sh_a[lm_w]", "lm_sh_i[lm_w]");
  else {
    char other[32];
    snprintf(other, sizeof other, "%s[lm_w]", sh);
    emit_combine(g, pass, other, NULL);
  }
  close_block(g);
  line(g, "__syncthreads(); // the slots are reused by the next pass or point");
}

/* One pass over the reduced dims: this thread's share of them. */
static void emit_pass(cg *g, int pass) {
  const lk_kernel *k = g->k;
  if (g->red == 0) return; /* the accumulator keeps its identity */
  const char *start = g->mode == LM_CUDA_RED_THREAD ? "0"
                      : g->mode == LM_CUDA_RED_WARP ? "lm_lane"
                                                    : "threadIdx.x";
  int step = g->mode == LM_CUDA_RED_THREAD ? 1 : g->mode == LM_CUDA_RED_WARP ? 32 : LM_CUDA_BLOCK;
  char red[256];
  open_block(g, "for (long long lm_r = %s; lm_r < %s; lm_r += %d)", start,
             points_c(k, g->red_first, k->ndim, red, sizeof red), step);
  emit_unravel(g, "lm_r", "lm_qr", g->red_first, k->ndim);
  emit_eval(g, g->needed, g->value, false);
  emit_acc_step(g, pass);
  close_block(g);
  emit_acc_combine(g, pass);
}

/* LSE: the shift (0 for an infinite max, NaN after a NaN), then the sum of
 * exp(v - shift), skipped after a NaN (uniform over the point's threads). */
static void emit_lse_second_pass(cg *g) {
  const char *t = ctype(value_dtype(g));
  line(g, "const %s lm_shift = lm_a != lm_a ? lm_a : (lm_fabs(lm_a) == (%s)%s ? (%s)0 : lm_a);", t,
       t, value_dtype(g) != LOOM_F64 ? "LM_INF_F" : "LM_INF_D", t);
  line(g, "double lm_s = 0.0;");
  if (value_dtype(g) == LOOM_F64) line(g, "double lm_sc = 0.0;");
  open_block(g, "if (lm_a == lm_a)");
  emit_pass(g, 2);
  close_block(g);
}

/* The reduction's result as `var`, declared unless `assign`. */
static void emit_result_as(cg *g, const char *var, bool assign) {
  const char *at = ctype(g->acc_dtype);
  char lhs[64];
  if (assign)
    snprintf(lhs, sizeof lhs, "%s", var);
  else
    snprintf(lhs, sizeof lhs, "const %s %s", at, var);
  if (g->acc == ACC_LSE)
    line(g, "%s = (%s)((double)lm_shift + lm_log(lm_s));", lhs, at);
  else if (g->reduce == LK_RED_ARGMAX || g->reduce == LK_RED_ARGMIN)
    line(g, "%s = lm_ai == LM_NO_INDEX ? 0 : lm_ai; // empty row: 0", lhs);
  else if (float_sum(g))
    line(g, "%s = (%s)lm_a;", lhs, at);
  else
    line(g, "%s = lm_a;", lhs);
}

static void emit_result(cg *g) { emit_result_as(g, "lm_acc", false); }

static void emit_shared(cg *g) {
  if (g->mode != LM_CUDA_RED_BLOCK) return;
  int warps = LM_CUDA_BLOCK / 32;
  line(g, "__shared__ %s lm_sh_a[%d];", acc_ctype(g), warps);
  if (g->acc == ACC_PAIR) line(g, "__shared__ long long lm_sh_i[%d];", warps);
  if (g->acc == ACC_LSE) line(g, "__shared__ double lm_sh_s[%d];", warps);
}

static void emit_point_loop(cg *g) {
  if (g->mode == LM_CUDA_RED_THREAD)
    open_block(
        g,
        "for (long long lm_p = begin + (long long)blockIdx.x * %d + threadIdx.x; lm_p < end; "
        "lm_p += (long long)gridDim.x * %d)",
        LM_CUDA_BLOCK, LM_CUDA_BLOCK);
  else if (g->mode == LM_CUDA_RED_WARP)
    open_block(g,
               "for (long long lm_p = begin + (((long long)blockIdx.x * %d + threadIdx.x) >> 5); "
               "lm_p < end; lm_p += (long long)gridDim.x * %d)",
               LM_CUDA_BLOCK, LM_CUDA_BLOCK / 32);
  else
    open_block(g, "for (long long lm_p = begin + blockIdx.x; lm_p < end; lm_p += gridDim.x)");
}

static void gen_reduction(cg *g) {
  const lk_kernel *k = g->k;
  emit_shared(g);
  if (g->mode != LM_CUDA_RED_THREAD) line(g, "const int lm_lane = threadIdx.x & 31;");
  if (g->mode == LM_CUDA_RED_BLOCK) line(g, "const int lm_warp = threadIdx.x >> 5;");
  emit_point_loop(g);
  emit_unravel(g, "lm_p", "lm_q", 0, k->nouter);
  emit_acc_init(g);
  emit_pass(g, 1);
  if (g->acc == ACC_LSE) emit_lse_second_pass(g);
  if (g->mode == LM_CUDA_RED_WARP) open_block(g, "if (lm_lane == 0)");
  if (g->mode == LM_CUDA_RED_BLOCK) open_block(g, "if (threadIdx.x == 0)");
  if (g->mode == LM_CUDA_RED_THREAD) open_block(g, "%s", "");
  emit_result(g);
  emit_eval(g, g->epi_needed, k->result, false);
  emit_store(g, "lm_p", k->result);
  close_block(g);
  close_block(g);
}

/* ------------------------------------------------------------------ rows */

/* Makes `reduce` of instruction `value` over dims [first, ndim) the one the
 * reduction emitters generate. */
static void select_reduction(cg *g, lk_reduce reduce, loom_dtype acc_dtype, int value,
                             const unsigned char *needed, int first) {
  g->reduce = reduce;
  g->acc_dtype = acc_dtype;
  g->value = value;
  g->needed = needed;
  g->red_first = first;
  g->red = lk_extent_product(g->k, first, g->k->ndim);
  g->want_max = reduce == LK_RED_MAX || reduce == LK_RED_ARGMAX || reduce == LK_RED_LSE;
  if (reduce == LK_RED_SUM)
    g->acc = ACC_SUM;
  else if (reduce == LK_RED_LSE)
    g->acc = ACC_LSE;
  else if (reduce == LK_RED_ARGMAX || reduce == LK_RED_ARGMIN || lm_dtype_is_float(value_dtype(g)))
    g->acc = ACC_PAIR;
  else
    g->acc = ACC_MINMAX;
}

/* Each block takes whole rows: every statistic as a block reduction (each in
 * its own scope, with its own shared slots; every thread ends with it), then
 * the row's points in [begin, end) strided over the block's threads. */
static void gen_rows(cg *g) {
  const lk_kernel *k = g->k;
  int last = k->ndim - 1;
  char len[32];
  extent_c(k, last, len, sizeof len);
  line(g, "const int lm_lane = threadIdx.x & 31;");
  line(g, "const int lm_warp = threadIdx.x >> 5;");
  line(g, "const long long lm_first = begin / %s, lm_last = (end - 1) / %s;", len, len);
  open_block(
      g, "for (long long lm_row = lm_first + blockIdx.x; lm_row <= lm_last; lm_row += gridDim.x)");
  emit_unravel(g, "lm_row", "lm_q", 0, last);
  g->mode = LM_CUDA_RED_BLOCK;
  for (int s = 0; s < k->nstats; s++) {
    const lk_stat *st = &k->stat[s];
    select_reduction(g, st->reduce, st->acc_dtype, st->value, g->stat_needed[s], last);
    line(g, "%s lm_stat%d;", ctype(st->acc_dtype), s);
    open_block(g, "%s", "");
    emit_shared(g);
    emit_acc_init(g);
    emit_pass(g, 1);
    if (g->acc == ACC_LSE) emit_lse_second_pass(g);
    char var[32];
    snprintf(var, sizeof var, "lm_stat%d", s);
    emit_result_as(g, var, true);
    close_block(g);
  }
  g->mode = LM_CUDA_ROWS;
  open_block(g, "for (long long lm_j = threadIdx.x; lm_j < %s; lm_j += %d)", len, LM_CUDA_BLOCK);
  line(g, "const long long lm_p = lm_row * %s + lm_j;", len);
  line(g, "if (lm_p < begin || lm_p >= end) continue;");
  line(g, "const long long d%d = lm_j;", last);
  emit_eval(g, g->body_needed, k->value, false);
  emit_store(g, "lm_p", k->value);
  close_block(g);
  close_block(g);
}

/* ------------------------------------------------------------------ plan */

static void choose_shape(cg *g) {
  const lk_kernel *k = g->k;
  g->outer = lk_extent_product(k, 0, k->nouter);
  if (k->reduce != LK_RED_NONE)
    select_reduction(g, k->reduce, k->acc_dtype, k->value, g->body_needed, k->nouter);
  if (k->nstats > 0)
    g->mode = LM_CUDA_ROWS;
  else if (k->reduce == LK_RED_NONE)
    g->mode = LM_CUDA_ELEMENTWISE;
  else if (lk_dims_sized(k, k->nouter, k->ndim)) /* a reduction of any length: a block's */
    g->mode = LM_CUDA_RED_BLOCK;
  else if (g->red <= THREAD_ROW_MAX)
    g->mode = LM_CUDA_RED_THREAD;
  else if (g->red <= WARP_ROW_MAX)
    g->mode = LM_CUDA_RED_WARP;
  else
    g->mode = LM_CUDA_RED_BLOCK;
}

static void fill_launch(const cg *g, lm_cuda_launch *launch) {
  if (!launch) return;
  launch->mode = g->mode;
  launch->block = LM_CUDA_BLOCK;
  switch (g->mode) {
  case LM_CUDA_ELEMENTWISE: launch->points_per_block = LM_CUDA_BLOCK * LM_CUDA_VEC; break;
  case LM_CUDA_RED_THREAD: launch->points_per_block = LM_CUDA_BLOCK; break;
  case LM_CUDA_RED_WARP: launch->points_per_block = LM_CUDA_BLOCK / 32; break;
  case LM_CUDA_RED_BLOCK: launch->points_per_block = 1; break;
  case LM_CUDA_ROWS: /* a row of run-time length: 0, the launch reads it */
    launch->points_per_block =
        lk_dim_is_sized(g->k, g->k->ndim - 1) ? 0 : (int)g->k->dom[g->k->ndim - 1];
    break;
  }
}

static bool alloc_state(cg *g) {
  size_t n = (size_t)g->k->ninst;
  g->body_needed = calloc(n, 1);
  g->epi_needed = calloc(n, 1);
  g->chunk_of = malloc(n * sizeof *g->chunk_of);
  if (!g->body_needed || !g->epi_needed || !g->chunk_of) return false;
  for (int s = 0; s < g->k->nstats; s++)
    if (!(g->stat_needed[s] = calloc(n, 1))) return false;
  for (size_t i = 0; i < n; i++) g->chunk_of[i] = -1;
  return true;
}

static void free_state(cg *g) {
  free(g->body_needed);
  free(g->epi_needed);
  free(g->chunk_of);
  free(g->chunks);
  for (int s = 0; s < g->k->nstats; s++) free(g->stat_needed[s]);
}

static void generate(cg *g, const char *name) {
  const lk_kernel *k = g->k;
  lk_mark_needed(k, k->value, g->body_needed);
  for (int m = 0; m < k->nmore; m++) lk_mark_needed(k, k->more[m].value, g->body_needed);
  if (k->reduce != LK_RED_NONE) lk_mark_needed(k, k->result, g->epi_needed);
  for (int s = 0; s < k->nstats; s++) lk_mark_needed(k, k->stat[s].value, g->stat_needed[s]);
  choose_shape(g);
  emit_listing(g, name);
  emit_signature(g, name);
  /* No output points: never launched; emit nothing that divides by a 0 extent. */
  if (g->outer > 0) {
    emit_keys(g);
    if (k->nstats > 0)
      gen_rows(g);
    else if (k->reduce == LK_RED_NONE)
      gen_elementwise(g);
    else
      gen_reduction(g);
  }
  sb_printf(&g->s, "}\n");
}

loom_status lm_cuda_source(const lk_kernel *k, char **source, char name[36], lm_cuda_launch *launch,
                           char *err, size_t errlen) {
  *source = NULL;
  const char *bad = lk_kernel_check(k);
  if (!bad && k->nsizes > LM_CUDA_MAX_SIZES) bad = "more run-time sizes than a launch passes";
  if (bad) {
    snprintf(err, errlen, "CUDA codegen: invalid kernel: %s", bad);
    return LOOM_ERR_COMPILE;
  }
  lk_hash h = lk_kernel_hash(k);
  snprintf(name, 36, "lk_%016" PRIx64 "%016" PRIx64, h.hi, h.lo);
  cg g = {.k = k};
  if (!alloc_state(&g)) {
    free_state(&g);
    snprintf(err, errlen, "CUDA codegen of %s: out of memory", name);
    return LOOM_ERR_OOM;
  }
  sb_printf(&g.s, "%s", lm_cuda_prelude());
  generate(&g, name);
  free_state(&g);
  if (g.s.oom) {
    free(g.s.p);
    snprintf(err, errlen, "CUDA codegen of %s: out of memory", name);
    return LOOM_ERR_OOM;
  }
  fill_launch(&g, launch);
  *source = g.s.p;
  return LOOM_OK;
}

/* ------------------------------------------------------------------ fused GEMM epilogue */

void lm_cuda_gemm_epilogue_name(const lk_kernel *k, int gemm_slot, loom_dtype gemm_dtype,
                                bool a_trans, bool b_trans, char name[36]) {
  /* the kernel's hash, told apart by how the product is read */
  lk_hash h = lk_kernel_hash(k);
  h.lo ^= ((uint64_t)a_trans | (uint64_t)b_trans << 1 | (uint64_t)gemm_dtype << 2 |
           (uint64_t)gemm_slot << 8) *
          0x9E3779B97F4A7C15ULL;
  snprintf(name, 36, "lf_%016" PRIx64 "%016" PRIx64, h.hi, h.lo);
}

static void emit_epilogue_signature(cg *g, const char *name, const char *t) {
  sb_printf(&g->s, "extern \"C\" __global__ void __launch_bounds__(%d) %s(void *s0", LM_CUDA_BLOCK,
            name);
  for (int s = 1; s < g->k->nslots; s++)
    if (s != g->k->size_slot) sb_printf(&g->s, ", const void *s%d", s);
  for (int z = 0; z < g->k->nsizes; z++) sb_printf(&g->s, ", const long long lm_z%d", z);
  sb_printf(&g->s, ",\n    LM_GEMM_PARAMS(%s)) {\n", t);
  g->ind = 2;
}

/* The epilogue at each product of the tile: k's value at its output point. */
static void emit_epilogue_stores(cg *g, const char *t) {
  const lk_kernel *k = g->k;
  open_block(g, "for (int lm_i = 0; lm_i < 4; lm_i++)");
  open_block(g, "for (int lm_jj = 0; lm_jj < 4; lm_jj++)");
  line(g, "const long long lm_r = lm_at.row0 + lm_at.ty + 16 * lm_i,");
  line(g, "    lm_c = lm_at.col0 + lm_at.tx + 16 * lm_jj;");
  line(g, "if (lm_r >= M || lm_c >= N) continue;");
  line(g, "const long long lm_p = lm_at.z * M * N + lm_r * N + lm_c;");
  line(g, "const %s lm_gemm_v = lm_acc[lm_i][lm_jj];", t);
  emit_unravel(g, "lm_p", "lm_q", 0, k->nouter);
  emit_eval(g, g->body_needed, k->value, false);
  emit_store(g, "lm_p", k->value);
  close_block(g);
  close_block(g);
}

loom_status lm_cuda_gemm_epilogue_source(const lk_kernel *k, int gemm_slot, loom_dtype gemm_dtype,
                                         bool a_trans, bool b_trans, char **source, char name[36],
                                         char *err, size_t errlen) {
  *source = NULL;
  const char *bad = lk_kernel_check(k);
  if (!bad && (k->reduce != LK_RED_NONE || k->nstats > 0)) bad = "not an elementwise kernel";
  if (!bad && k->nmore > 0) bad = "an epilogue with more outputs";
  if (!bad && k->nsizes > LM_CUDA_MAX_SIZES) bad = "more run-time sizes than a launch passes";
  if (!bad && (gemm_slot < 1 || gemm_slot >= k->nslots)) bad = "the GEMM's slot is out of range";
  if (!bad && gemm_dtype != LOOM_F32 && gemm_dtype != LOOM_F64) bad = "the GEMM is not F32/F64";
  if (bad) {
    snprintf(err, errlen, "CUDA GEMM epilogue: %s", bad);
    return LOOM_ERR_COMPILE;
  }
  lm_cuda_gemm_epilogue_name(k, gemm_slot, gemm_dtype, a_trans, b_trans, name);
  const char *t = lm_dtype_info_of(gemm_dtype)->cuda_type;
  cg g = {.k = k, .gemm_slot = gemm_slot};
  if (!alloc_state(&g)) {
    free_state(&g);
    snprintf(err, errlen, "CUDA GEMM epilogue %s: out of memory", name);
    return LOOM_ERR_OOM;
  }
  lk_mark_needed(k, k->value, g.body_needed);
  sb_printf(&g.s, "%s%s", lm_cuda_prelude(), lm_cuda_gemm_tile_source());
  emit_listing(&g, name);
  emit_epilogue_signature(&g, name, t);
  emit_keys(&g);
  line(&g, "%s lm_acc[4][4];", t);
  line(&g, "const lm_gemm_place lm_at =");
  line(&g, "    lm_gemm_tile<%s, %s, %s>(LM_GEMM_ARGS, lm_acc);", t, a_trans ? "true" : "false",
       b_trans ? "true" : "false");
  emit_epilogue_stores(&g, t);
  sb_printf(&g.s, "}\n");
  free_state(&g);
  if (g.s.oom) {
    free(g.s.p);
    snprintf(err, errlen, "CUDA GEMM epilogue %s: out of memory", name);
    return LOOM_ERR_OOM;
  }
  *source = g.s.p;
  return LOOM_OK;
}
