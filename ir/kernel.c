/*
 * The kernel description's helpers: canonical hash, listing, validation.
 * See kernel.h for what a kernel means.
 */
#include "ir/kernel.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* The stack-allocated streaming state needs the static-linking declarations. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

/* ------------------------------------------------------------------ op table */

typedef struct op_info {
  const char *name;
  int arity; /* operands a, b, c used in that order */
} op_info;

static const op_info OPS[LK_NUM_OPS] = {
    [LK_DIM] = {"dim", 0},         [LK_IDIV] = {"idiv", 2},   [LK_IMOD] = {"imod", 2},
    [LK_CONST] = {"const", 0},     [LK_LOAD] = {"load", 1},   [LK_RAND] = {"rand", 1},
    [LK_ACC] = {"acc", 0},         [LK_ADD] = {"add", 2},     [LK_SUB] = {"sub", 2},
    [LK_MUL] = {"mul", 2},         [LK_DIV] = {"div", 2},     [LK_MAX] = {"max", 2},
    [LK_MIN] = {"min", 2},         [LK_POW] = {"pow", 2},     [LK_NEG] = {"neg", 1},
    [LK_ABS] = {"abs", 1},         [LK_EXP] = {"exp", 1},     [LK_LOG] = {"log", 1},
    [LK_SQRT] = {"sqrt", 1},       [LK_SIN] = {"sin", 1},     [LK_COS] = {"cos", 1},
    [LK_TANH] = {"tanh", 1},       [LK_ERF] = {"erf", 1},     [LK_FLOOR] = {"floor", 1},
    [LK_CMPLT] = {"cmplt", 2},     [LK_CMPLE] = {"cmple", 2}, [LK_CMPEQ] = {"cmpeq", 2},
    [LK_CMPNE] = {"cmpne", 2},     [LK_AND] = {"and", 2},     [LK_OR] = {"or", 2},
    [LK_NOT] = {"not", 1},         [LK_WHERE] = {"where", 3}, [LK_CAST] = {"cast", 1},
    [LK_STAT] = {"stat", 0},       [LK_PARAM] = {"param", 0}, [LK_SIZE] = {"size", 0},
    [LK_BITCAST] = {"bitcast", 1},
};

static bool op_valid(lk_op op) { return (int)op >= 0 && op < LK_NUM_OPS; }

const char *lk_op_name(lk_op op) { return op_valid(op) ? OPS[op].name : "?"; }

bool lk_inst_rounds(const lk_inst *in) {
  if (!lm_dtype_is_half(in->dtype)) return false;
  switch (in->op) {
  case LK_LOAD:
  case LK_WHERE:
  case LK_NEG:
  case LK_ABS:
  case LK_FLOOR:
  case LK_MAX:
  case LK_MIN:
  case LK_BITCAST: return false; /* values of the dtype already */
  default: return true;
  }
}

static int operand(const lk_inst *in, int which) {
  return which == 0 ? in->a : which == 1 ? in->b : in->c;
}

/* Which of slot / imm_i / imm_f an op reads: the others are normalized away when
 * hashing, so garbage left in an unused field never splits the cache. */
static bool op_uses_slot(lk_op op) {
  return op == LK_LOAD || op == LK_RAND || op == LK_PARAM || op == LK_SIZE;
}
static bool op_uses_imm_i(const lk_inst *in) {
  return in->op == LK_DIM || in->op == LK_RAND || in->op == LK_STAT || in->op == LK_PARAM ||
         in->op == LK_SIZE || (in->op == LK_CONST && !lm_dtype_is_float(in->dtype));
}
static bool op_uses_imm_f(const lk_inst *in) {
  return in->op == LK_CONST && lm_dtype_is_float(in->dtype);
}

/* ------------------------------------------------------------------ hash */

/* Fields are written one by one, little-endian, into a small buffer that is fed to
 * a streaming XXH3-128 state: padding bytes and pointers never reach the hash, and
 * the result equals XXH3_128bits over the whole serialization. */
typedef struct hash_writer {
  XXH3_state_t state;
  unsigned char buf[1024];
  size_t len;
} hash_writer;

static void hw_flush(hash_writer *w) {
  XXH3_128bits_update(&w->state, w->buf, w->len);
  w->len = 0;
}

static void hw_u64(hash_writer *w, uint64_t v) {
  if (w->len + 8 > sizeof w->buf) hw_flush(w);
  for (int i = 0; i < 8; i++) w->buf[w->len++] = (unsigned char)(v >> (8 * i));
}

static void hw_i64(hash_writer *w, int64_t v) { hw_u64(w, (uint64_t)v); }

static void hw_f64(hash_writer *w, double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  hw_u64(w, bits);
}

/* Bumped whenever the serialization (or the meaning of a kernel) changes. */
#define LK_HASH_FORMAT 3

static void hw_begin(hash_writer *w, uint64_t tag) {
  XXH3_128bits_reset(&w->state);
  w->len = 0;
  hw_u64(w, tag);
  hw_u64(w, LK_HASH_FORMAT);
}

static lk_hash hw_digest(hash_writer *w) {
  hw_flush(w);
  XXH128_hash_t h = XXH3_128bits_digest(&w->state);
  return (lk_hash){h.low64, h.high64};
}

/* The kernel's serialization; `sizes` false leaves out its sizes (the extents
 * and I64 constants: lk_kernel_shape_hash). An ordinary kernel hashes as it did
 * before generic kernels existed, so their cache entries stay valid. */
static lk_hash kernel_hash(const lk_kernel *k, bool sizes) {
  hash_writer w;
  hw_begin(&w, sizes ? 0x6c6b65726e656cULL : 0x6c6b7368617065ULL); /* "lkernel", "lkshape" */
  hw_i64(&w, k->ndim);
  for (int d = 0; d < k->ndim && d < LOOM_MAX_DIMS; d++) hw_i64(&w, sizes ? k->dom[d] : 0);
  if (lk_kernel_is_generic(k)) {
    hw_i64(&w, k->size_slot);
    hw_i64(&w, k->nsizes);
    for (int d = 0; d < k->ndim && d < LOOM_MAX_DIMS; d++) hw_i64(&w, k->dom_size[d]);
  }
  if (k->keep_slot) {       /* (kernels that keep nothing hash as before) */
    hw_i64(&w, 0x6b656570); /* "keep" */
    hw_i64(&w, k->keep_slot);
  }
  if (k->nmore) {           /* (nor do kernels of one output) */
    hw_i64(&w, 0x6d6f7265); /* "more" */
    hw_i64(&w, k->nmore);
    for (int m = 0; m < k->nmore && m < LK_MAX_MORE; m++) {
      hw_i64(&w, k->more[m].slot);
      hw_i64(&w, k->more[m].value);
    }
  }
  hw_i64(&w, k->nouter);
  hw_i64(&w, k->reduce);
  hw_i64(&w, k->reduce == LK_RED_NONE ? -1 : (int64_t)k->acc_dtype);
  hw_i64(&w, k->out_dtype);
  hw_i64(&w, k->nslots);
  hw_i64(&w, k->ninst);
  hw_i64(&w, k->nbody);
  hw_i64(&w, k->value);
  hw_i64(&w, k->result);
  hw_i64(&w, k->nstats);
  for (int s = 0; s < k->nstats && s < LK_MAX_STATS; s++) {
    hw_i64(&w, k->stat[s].reduce);
    hw_i64(&w, k->stat[s].acc_dtype);
    hw_i64(&w, k->stat[s].value);
  }
  for (int i = 0; i < k->ninst; i++) {
    const lk_inst *in = &k->inst[i];
    hw_i64(&w, in->op);
    hw_i64(&w, in->dtype);
    hw_i64(&w, in->a);
    hw_i64(&w, in->b);
    hw_i64(&w, in->c);
    hw_i64(&w, op_uses_slot(in->op) ? in->slot : -1);
    bool erased = !sizes && lk_inst_is_size(in);
    hw_i64(&w, op_uses_imm_i(in) && !erased ? in->imm_i : 0);
    hw_f64(&w, op_uses_imm_f(in) && !erased ? in->imm_f : 0.0);
  }
  return hw_digest(&w);
}

lk_hash lk_kernel_hash(const lk_kernel *k) { return kernel_hash(k, true); }

lk_hash lk_kernel_shape_hash(const lk_kernel *k) { return kernel_hash(k, false); }

/* ------------------------------------------------------------------ GEMM blocks */

lk_hash lk_gemm_hash(const lk_gemm *g) {
  hash_writer w;
  hw_begin(&w, 0x6c6b67656d6dULL); /* "lkgemm" */
  hw_i64(&w, g->dtype);
  hw_i64(&w, g->mr);
  hw_i64(&w, g->nr);
  hw_i64(&w, g->in_dtype);
  hw_i64(&w, g->amx);
  if (g->dot_pairs) hw_i64(&w, 1); /* earlier tiles keep their hashes */
  /* the functions that read lk_gemm_args.b_rows: an earlier one, cached on
   * disk, would read past its arguments */
  hw_i64(&w, LK_GEMM_ABI);
  return hw_digest(&w);
}

const char *lk_gemm_check(const lk_gemm *g) {
  if (!g) return "no GEMM description";
  if (g->dtype != LOOM_F32 && g->dtype != LOOM_F64) return "GEMM dtype is not F32 or F64";
  if (g->mr < 1 || g->mr > 32 || g->nr < 1 || g->nr > 256) return "GEMM tile out of range";
  bool half_in = g->in_dtype == LOOM_BF16 || g->in_dtype == LOOM_F16;
  if (g->in_dtype != g->dtype && !(half_in && g->dtype == LOOM_F32))
    return "GEMM operands are not of its dtype, nor BF16/F16 with F32 sums";
  if (g->amx &&
      (g->in_dtype != LOOM_BF16 || g->mr != LK_GEMM_AMX_TILE || g->nr != LK_GEMM_AMX_TILE))
    return "an AMX GEMM is BF16 with a 32 x 32 tile";
  if (g->dot_pairs && (g->amx || g->in_dtype != LOOM_BF16 || g->nr != LK_GEMM_AMX_TILE))
    return "a pair-product GEMM is BF16 with 32 columns, not AMX";
  return NULL;
}

static int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

size_t lk_gemm_pack_bytes(const lk_gemm *g, int64_t mc, int64_t kc, int64_t nc) {
  if (lk_gemm_paired(g)) { /* BF16 panels, padded to whole tiles both ways */
    int64_t kp = round_up(kc, LK_GEMM_AMX_K);
    return (size_t)((round_up(nc, g->nr) + round_up(mc, g->mr)) * kp + 64) * 2;
  }
  /* B's panel first, A's block after it, each a whole number of slivers;
   * packing A may write up to 64 elements past it (backends/llvm/gemm.c) */
  int64_t elems = (round_up(nc, g->nr) + round_up(mc, g->mr)) * kc + 64;
  return (size_t)elems * loom_dtype_size(g->dtype);
}

/* ------------------------------------------------------------------ dependencies */

void lk_mark_needed(const lk_kernel *k, int target, unsigned char *needed) {
  needed[target] = 1;
  for (int i = target; i >= 0; i--) { /* operands always come earlier */
    if (!needed[i]) continue;
    const lk_inst *in = &k->inst[i];
    if (in->a >= 0) needed[in->a] = 1;
    if (in->b >= 0) needed[in->b] = 1;
    if (in->c >= 0) needed[in->c] = 1;
  }
}

/* ------------------------------------------------------------------ affine indices */

bool lk_affine_is_own_index(const lk_kernel *k, const lk_affine *ix) {
  if (!ix->ok || ix->k != 0) return false;
  int64_t stride = 1;
  for (int d = k->ndim - 1; d >= 0; d--) {
    if (ix->c[d] != stride && k->dom[d] != 1) return false;
    stride *= k->dom[d];
  }
  return true;
}

void lk_affine_analyze(const lk_kernel *k, lk_affine *af) {
  for (int i = 0; i < k->nbody; i++) {
    const lk_inst *in = &k->inst[i];
    lk_affine *r = &af[i];
    memset(r, 0, sizeof *r);
    if (in->dtype != LOOM_I64) continue;
    const lk_affine *a = in->a >= 0 ? &af[in->a] : NULL, *b = in->b >= 0 ? &af[in->b] : NULL;
    bool ok = true;
    switch (in->op) {
    case LK_DIM: r->c[in->imm_i] = 1; break;
    case LK_CONST: r->k = in->imm_i; break;
    case LK_ADD:
    case LK_SUB: {
      ok = a->ok && b->ok;
      int64_t sign = in->op == LK_ADD ? 1 : -1;
      for (int d = 0; d <= k->ndim && ok; d++) {
        int64_t x = d < k->ndim ? a->c[d] : a->k, y = d < k->ndim ? b->c[d] : b->k;
        int64_t *out = d < k->ndim ? &r->c[d] : &r->k;
        ok = !__builtin_mul_overflow(y, sign, &y) && !__builtin_add_overflow(x, y, out);
      }
      break;
    }
    case LK_MUL: {
      ok = a->ok && b->ok;
      bool a_const = true, b_const = true;
      for (int d = 0; d < k->ndim; d++) a_const &= a->c[d] == 0, b_const &= b->c[d] == 0;
      if (!ok || !(a_const || b_const)) {
        ok = false;
        break;
      }
      const lk_affine *v = a_const ? b : a;
      int64_t m = a_const ? a->k : b->k;
      for (int d = 0; d < k->ndim && ok; d++) ok = !__builtin_mul_overflow(v->c[d], m, &r->c[d]);
      ok = ok && !__builtin_mul_overflow(v->k, m, &r->k);
      break;
    }
    default: ok = false;
    }
    r->ok = ok;
  }
}

/* ------------------------------------------------------------------ listing */

static const char *reduce_name(lk_reduce r) {
  switch (r) {
  case LK_RED_NONE: return "none";
  case LK_RED_SUM: return "sum";
  case LK_RED_MAX: return "max";
  case LK_RED_MIN: return "min";
  case LK_RED_ARGMAX: return "argmax";
  case LK_RED_ARGMIN: return "argmin";
  case LK_RED_LSE: return "lse";
  }
  return "?";
}

static void print_inst(const lk_kernel *k, int i, FILE *f) {
  const lk_inst *in = &k->inst[i];
  fprintf(f, "  %%%d = %s %s", i, loom_dtype_name(in->dtype), lk_op_name(in->op));
  switch (in->op) {
  case LK_DIM:
  case LK_STAT: fprintf(f, " %" PRId64, in->imm_i); break;
  case LK_CONST:
    if (lm_dtype_is_float(in->dtype))
      fprintf(f, " %.17g", in->imm_f);
    else
      fprintf(f, " %" PRId64, in->imm_i);
    break;
  case LK_LOAD: fprintf(f, " slot%d [%%%d]", in->slot, in->a); break;
  case LK_RAND: fprintf(f, " slot%d stream %" PRId64 " [%%%d]", in->slot, in->imm_i, in->a); break;
  case LK_PARAM:
  case LK_SIZE: fprintf(f, " slot%d [%" PRId64 "]", in->slot, in->imm_i); break;
  case LK_CAST: fprintf(f, " %%%d", in->a); break;
  default: {
    int arity = op_valid(in->op) ? OPS[in->op].arity : 3;
    for (int j = 0; j < arity; j++) fprintf(f, "%s%%%d", j ? ", " : " ", operand(in, j));
  }
  }
  for (int s = 0; s < k->nstats && s < LK_MAX_STATS; s++)
    if (i == k->stat[s].value) fprintf(f, "  ; stat %d", s);
  if (i == k->value && i == k->result)
    fputs("  ; value, result", f);
  else if (i == k->value)
    fputs("  ; value", f);
  else if (i == k->result)
    fputs("  ; result", f);
  fputc('\n', f);
}

void lk_kernel_print(const lk_kernel *k, FILE *f) {
  fprintf(f, "kernel dom [");
  for (int d = 0; d < k->ndim && d < LOOM_MAX_DIMS; d++)
    if (lk_dim_is_sized(k, d))
      fprintf(f, "%ssize[%d]", d ? ", " : "", k->dom_size[d] - 1);
    else
      fprintf(f, "%s%" PRId64, d ? ", " : "", k->dom[d]);
  fprintf(f, "] nouter %d reduce %s", k->nouter, reduce_name(k->reduce));
  if (k->reduce != LK_RED_NONE) fprintf(f, " acc %s", loom_dtype_name(k->acc_dtype));
  fprintf(f, " out %s slots %d", loom_dtype_name(k->out_dtype), k->nslots);
  for (int s = 0; s < k->nstats && s < LK_MAX_STATS; s++)
    fprintf(f, "%s%s %s", s ? ", " : " stats ", reduce_name(k->stat[s].reduce),
            loom_dtype_name(k->stat[s].acc_dtype));
  if (k->keep_slot) fprintf(f, " keeps slot%d", k->keep_slot);
  for (int m = 0; m < k->nmore && m < LK_MAX_MORE; m++)
    fprintf(f, "%sslot%d = %%%d", m ? ", " : " also stores ", k->more[m].slot, k->more[m].value);
  fputc('\n', f);
  for (int i = 0; i < k->ninst; i++) {
    if (i == k->nbody) fputs("  -- epilogue --\n", f);
    print_inst(k, i, f);
  }
}

/* ------------------------------------------------------------------ check */

/* Dtype rules of one instruction, given that its operands are in range. */
static const char *check_inst_dtypes(const lk_kernel *k, const lk_inst *in) {
  const lk_inst *ins = k->inst;
  loom_dtype dt = in->dtype;
  loom_dtype da = in->a >= 0 ? ins[in->a].dtype : dt;
  loom_dtype db = in->b >= 0 ? ins[in->b].dtype : dt;
  loom_dtype dc = in->c >= 0 ? ins[in->c].dtype : dt;
  switch (in->op) {
  case LK_DIM:
    if (dt != LOOM_I64) return "dim must be i64";
    if (in->imm_i < 0 || in->imm_i >= k->ndim) return "dim index out of range";
    return NULL;
  case LK_IDIV:
  case LK_IMOD:
    if (dt != LOOM_I64 || da != LOOM_I64 || db != LOOM_I64) return "idiv/imod operands must be i64";
    return NULL;
  case LK_CONST:
    if (dt == LOOM_BOOL && in->imm_i != 0 && in->imm_i != 1) return "bool const must be 0 or 1";
    return NULL;
  case LK_LOAD:
    if (da != LOOM_I64) return "load offset must be i64";
    if (in->slot < 0 || in->slot >= k->nslots) return "load slot out of range";
    if (in->slot == 0 && dt != k->out_dtype) return "load from slot 0 must use the output dtype";
    return NULL;
  case LK_RAND:
    if (!lm_dtype_is_float(dt)) return "rand must be f32 or f64";
    if (da != LOOM_I64) return "rand counter must be i64";
    if (in->slot < 1 || in->slot >= k->nslots) return "rand key slot out of range";
    if (in->imm_i < 0 || in->imm_i > (int64_t)UINT32_MAX) return "rand stream out of range";
    return NULL;
  case LK_ACC:
    if (dt != k->acc_dtype) return "acc dtype differs from the kernel's acc_dtype";
    return NULL;
  case LK_PARAM:
    if (!lm_dtype_is_float(dt)) return "param must be f32 or f64";
    if (in->slot < 1 || in->slot >= k->nslots) return "param slot out of range";
    if (in->imm_i < 0 || in->imm_i > INT32_MAX) return "param index out of range";
    return NULL;
  case LK_SIZE:
    if (dt != LOOM_I64 && !lm_dtype_is_float(dt)) return "size must be i64 or a float";
    if (!lk_kernel_is_generic(k) || in->slot != k->size_slot)
      return "size slot is not the kernel's";
    if (in->imm_i < 0 || in->imm_i >= k->nsizes) return "size index out of range";
    return NULL;
  case LK_STAT:
    if (in->imm_i < 0 || in->imm_i >= k->nstats) return "stat index out of range";
    if (dt != k->stat[in->imm_i].acc_dtype) return "stat dtype differs from its acc_dtype";
    return NULL;
  case LK_ADD:
  case LK_SUB:
  case LK_MUL:
  case LK_MAX:
  case LK_MIN:
    if (!lm_dtype_is_numeric(dt) || da != dt || db != dt)
      return "arithmetic operands must match a numeric dtype";
    return NULL;
  case LK_DIV:
    if (!lm_dtype_is_float(dt) || da != dt || db != dt)
      return "div operands must match a float dtype";
    return NULL;
  case LK_POW:
    if (!lm_dtype_is_numeric(dt) || da != dt || db != dt)
      return "pow operands must match a numeric dtype";
    return NULL;
  case LK_NEG:
  case LK_ABS:
    if (!lm_dtype_is_numeric(dt) || da != dt) return "neg/abs operand must match a numeric dtype";
    return NULL;
  case LK_EXP:
  case LK_LOG:
  case LK_SQRT:
  case LK_SIN:
  case LK_COS:
  case LK_TANH:
  case LK_ERF:
  case LK_FLOOR:
    if (!lm_dtype_is_float(dt) || da != dt) return "math operand must match a float dtype";
    return NULL;
  case LK_CMPLT:
  case LK_CMPLE:
  case LK_CMPEQ:
  case LK_CMPNE:
    if (dt != LOOM_BOOL) return "comparison result must be bool";
    if (da != db) return "comparison operands differ in dtype";
    return NULL;
  case LK_AND:
  case LK_OR:
  case LK_NOT:
    if (dt != LOOM_BOOL || da != LOOM_BOOL || db != LOOM_BOOL) return "logic operands must be bool";
    return NULL;
  case LK_WHERE:
    if (da != LOOM_BOOL) return "where condition must be bool";
    if (db != dt || dc != dt) return "where branches must match the result dtype";
    return NULL;
  case LK_CAST: return NULL;
  case LK_BITCAST:
    if (loom_dtype_size(da) != loom_dtype_size(dt)) return "bitcast changes the element size";
    return NULL;
  case LK_NUM_OPS: break;
  }
  return "unknown op";
}

/* The reduction rules a kernel's accumulator and a row statistic share. */
static const char *check_reduce_dtype(lk_reduce r, loom_dtype acc) {
  if (!lm_dtype_valid(acc)) return "invalid acc_dtype";
  if ((r == LK_RED_ARGMAX || r == LK_RED_ARGMIN) && acc != LOOM_I64)
    return "argmax/argmin accumulate i64";
  if (r == LK_RED_SUM && acc == LOOM_BOOL) return "sum of bool is not allowed";
  if (r == LK_RED_LSE && !lm_dtype_is_float(acc)) return "lse accumulates a float dtype";
  return NULL;
}

static const char *check_stats_header(const lk_kernel *k) {
  if (k->nstats < 0 || k->nstats > LK_MAX_STATS) return "nstats out of range";
  if (k->nstats == 0) return NULL;
  if (k->reduce != LK_RED_NONE || k->ndim < 2) return "row statistics need a map kernel of 2+ dims";
  for (int s = 0; s < k->nstats; s++) {
    const lk_stat *st = &k->stat[s];
    if (st->reduce != LK_RED_SUM && st->reduce != LK_RED_MAX && st->reduce != LK_RED_MIN &&
        st->reduce != LK_RED_LSE)
      return "a row statistic is sum, max, min or lse";
    const char *bad = check_reduce_dtype(st->reduce, st->acc_dtype);
    if (bad) return bad;
    if (st->value < 0 || st->value >= k->ninst) return "stat value out of range";
  }
  return NULL;
}

static const char *check_header(const lk_kernel *k) {
  if (k->ndim < 1 || k->ndim > LOOM_MAX_DIMS) return "ndim out of range";
  int64_t numel = 1;
  for (int d = 0; d < k->ndim; d++) {
    if (k->dom[d] < 0) return "negative domain extent";
    if (k->dom_size[d] > 0) continue; /* a run-time extent (from a valid kernel) */
    if (__builtin_mul_overflow(numel, k->dom[d], &numel)) return "domain size overflows int64";
  }
  if ((int)k->reduce < LK_RED_NONE || k->reduce > LK_RED_LSE) return "unknown reduction";
  if (k->nouter < 0 || k->nouter > k->ndim) return "nouter out of range";
  if (k->reduce == LK_RED_NONE && k->nouter != k->ndim)
    return "nouter must equal ndim without a reduction";
  if (!lm_dtype_valid(k->out_dtype)) return "invalid out_dtype";
  if (k->reduce != LK_RED_NONE) {
    const char *bad = check_reduce_dtype(k->reduce, k->acc_dtype);
    if (bad) return bad;
  }
  if (k->nslots < 1) return "nslots must be at least 1 (slot 0 is the output)";
  if (k->size_slot < 0 || k->size_slot >= k->nslots) return "size slot out of range";
  if (k->nsizes < 0 || (k->nsizes > 0 && !lk_kernel_is_generic(k)))
    return "sizes without a size slot";
  for (int d = 0; d < k->ndim; d++)
    if (k->dom_size[d] < 0 || k->dom_size[d] > k->nsizes) return "extent's size index out of range";
  if (k->ninst < 1 || !k->inst) return "kernel has no instructions";
  if (k->nbody < 1 || k->nbody > k->ninst) return "nbody out of range";
  if (k->reduce == LK_RED_NONE && k->nbody != k->ninst) return "epilogue without a reduction";
  if (k->reduce == LK_RED_NONE && k->result != k->value)
    return "result must equal value without a reduction";
  if (k->value < 0 || k->value >= k->nbody) return "value out of range";
  if (k->result < 0 || k->result >= k->ninst) return "result out of range";
  return check_stats_header(k);
}

int lk_kernel_keep_arm(const lk_kernel *k) {
  if (k->keep_slot <= 0) return 0;
  const lk_inst *w = &k->inst[k->value];
  for (int arm = 1; w->op == LK_WHERE && arm <= 2; arm++) {
    const lk_inst *x = &k->inst[arm == 1 ? w->b : w->c];
    if (x->op == LK_LOAD && x->slot == k->keep_slot) return arm;
  }
  return 0;
}

/* keep_slot's promises that the instructions show (the index is the planner's). */
static const char *check_keep(const lk_kernel *k) {
  if (k->keep_slot == 0) return NULL;
  if (k->keep_slot < 0 || k->keep_slot >= k->nslots || k->keep_slot == k->size_slot)
    return "keep slot out of range";
  if (k->reduce != LK_RED_NONE || k->nstats > 0) return "a kept slot in a reduction";
  if (lk_kernel_keep_arm(k) == 0) return "a kept slot that no arm of the value's where loads";
  return NULL;
}

int lk_kernel_roots(const lk_kernel *k, int *roots) {
  int n = 0;
  roots[n++] = k->value;
  roots[n++] = k->result;
  for (int s = 0; s < k->nstats && s < LK_MAX_STATS; s++) roots[n++] = k->stat[s].value;
  for (int m = 0; m < k->nmore && m < LK_MAX_MORE; m++) roots[n++] = k->more[m].value;
  return n;
}

/* More outputs: plain kernels only, each slot its own and written only. */
static const char *check_more(const lk_kernel *k) {
  if (k->nmore == 0) return NULL;
  if (k->nmore < 0 || k->nmore > LK_MAX_MORE) return "more outputs out of range";
  if (k->reduce != LK_RED_NONE || k->nstats > 0 || k->keep_slot)
    return "more outputs in a reduction, a row kernel or an update in place";
  for (int m = 0; m < k->nmore; m++) {
    const struct lk_output *o = &k->more[m];
    if (o->slot < 1 || o->slot >= k->nslots || o->slot == k->size_slot)
      return "more output's slot out of range";
    if (o->value < 0 || o->value >= k->nbody) return "more output's value out of range";
    for (int j = 0; j < m; j++)
      if (k->more[j].slot == o->slot) return "two more outputs share a slot";
    for (int i = 0; i < k->ninst; i++)
      if (op_uses_slot(k->inst[i].op) && k->inst[i].slot == o->slot)
        return "an instruction reads a more output's slot";
  }
  return NULL;
}

/* The dtype of a reduced value against its accumulator's. */
static const char *check_reduced_value(lk_reduce r, loom_dtype value, loom_dtype acc) {
  if ((r == LK_RED_SUM || r == LK_RED_MAX || r == LK_RED_MIN) && value != acc)
    return "reduced value dtype differs from acc_dtype";
  /* LSE may widen: F32 values, an F64 result (the sum is in double anyway) */
  if (r == LK_RED_LSE && value != acc && !(value == LOOM_F32 && acc == LOOM_F64))
    return "lse value must be acc_dtype, or f32 with an f64 acc_dtype";
  return NULL;
}

static const char *check_value_result(const lk_kernel *k, const unsigned char *reduced_dep) {
  const lk_inst *v = &k->inst[k->value], *r = &k->inst[k->result];
  if (r->dtype != k->out_dtype) return "result dtype differs from out_dtype";
  const char *bad = check_reduced_value(k->reduce, v->dtype, k->acc_dtype);
  if (bad) return bad;
  if (k->reduce != LK_RED_NONE && reduced_dep[k->result]) return "result depends on a reduced dim";
  return NULL;
}

/* A stat's value may use earlier stats only: latest[i] is the highest stat
 * instruction i depends on (-1 for none). */
static const char *check_stat_values(const lk_kernel *k) {
  if (k->nstats == 0) return NULL;
  int *latest = malloc(sizeof(int) * (size_t)k->ninst);
  if (!latest) return "out of memory while checking the kernel";
  for (int i = 0; i < k->ninst; i++) {
    const lk_inst *in = &k->inst[i];
    latest[i] = in->op == LK_STAT ? (int)in->imm_i : -1;
    for (int j = 0; j < OPS[in->op].arity; j++)
      if (latest[operand(in, j)] > latest[i]) latest[i] = latest[operand(in, j)];
  }
  const char *bad = NULL;
  for (int s = 0; s < k->nstats && !bad; s++) {
    const lk_stat *st = &k->stat[s];
    bad = check_reduced_value(st->reduce, k->inst[st->value].dtype, st->acc_dtype);
    if (!bad && latest[st->value] >= s) bad = "a stat's value uses itself or a later stat";
  }
  free(latest);
  return bad;
}

/* One instruction's structure: op, operands in range and earlier, unused ones -1,
 * ACC and reduced dims only where they have a value. */
static const char *check_inst(const lk_kernel *k, int i, unsigned char *reduced_dep) {
  const lk_inst *in = &k->inst[i];
  bool epilogue = i >= k->nbody;
  if (!op_valid(in->op)) return "unknown op";
  if (!lm_dtype_valid(in->dtype)) return "invalid dtype";
  for (int j = 0; j < 3; j++) {
    int o = operand(in, j);
    if (j >= OPS[in->op].arity) {
      if (o != -1) return "unused operand must be -1";
      continue;
    }
    if (o < 0 || o >= i) return "operand index out of range (must name an earlier instruction)";
    if (epilogue && o < k->nbody && reduced_dep[o])
      return "epilogue uses a body instruction that depends on a reduced dim";
    reduced_dep[i] |= reduced_dep[o];
  }
  if (in->op == LK_ACC && (!epilogue || k->reduce == LK_RED_NONE))
    return "acc outside the epilogue";
  if (in->op == LK_DIM && in->imm_i >= k->nouter && in->imm_i < k->ndim) {
    if (epilogue) return "epilogue uses a reduced dim";
    reduced_dep[i] = 1;
  }
  return check_inst_dtypes(k, in);
}

const char *lk_kernel_check(const lk_kernel *k) {
  if (!k) return "NULL kernel";
  const char *msg = check_header(k);
  if (msg) return msg;
  unsigned char *reduced_dep = calloc((size_t)k->ninst, 1);
  if (!reduced_dep) return "out of memory while checking the kernel";
  for (int i = 0; i < k->ninst && !msg; i++) msg = check_inst(k, i, reduced_dep);
  if (!msg) msg = check_value_result(k, reduced_dep);
  if (!msg) msg = check_stat_values(k);
  if (!msg) msg = check_keep(k);
  if (!msg) msg = check_more(k);
  free(reduced_dep);
  return msg;
}
