/*
 * The kernel description: what one fused kernel computes, in a form every
 * backend consumes (LLVM for the CPU, CUDA C for NVRTC). It knows nothing of
 * tensors, views or graphs: passes/ lowers those into it.
 *
 * A kernel iterates over a DOMAIN of up to LOOM_MAX_DIMS dims. The first
 * `nouter` dims are the output's dims (row-major); the remaining dims are
 * reduced (only when `reduce != LK_RED_NONE`; then nouter < ndim is allowed,
 * nouter == 0 reduces everything to one value).
 *
 * The body is a list of SSA instructions (an instruction refers to earlier ones
 * by index). Instructions [0, nbody) are evaluated at every point of the domain.
 * Without a reduction, inst `value` (< nbody) is the value stored to the output
 * at that point. With a reduction, inst `value` (< nbody) is combined into an
 * accumulator over the reduced dims; then instructions [nbody, ninst) are
 * evaluated once per output point (the epilogue: they may use LK_ACC, and body
 * instructions that depend only on outer dims), and inst `result` is stored.
 * Without a reduction, result == value and ninst == nbody.
 *
 * Arguments: the kernel function receives `void *const *args`: args[i] is the
 * base pointer of slot i. Slot 0 is the output buffer (dtype `out_dtype`,
 * contiguous over the outer dims). Other slots are input buffers of the dtype
 * named by the loads from them, or a pointer to a loom_key (two uint32) for
 * LK_RAND. Offsets are in elements, not bytes.
 *
 * The compiled function has the C type lk_fn below and computes the output
 * points whose row-major linear index over the outer dims lies in [begin, end).
 * It must be correct for any split of [0, outer numel) into ranges, so the
 * caller can run ranges on several threads.
 *
 * BF16 and F16 values are floats in registers: an instruction of either dtype
 * yields its float result rounded to the dtype (nearest even), and a
 * reduction of them accumulates in float, rounded where its result is read.
 */
#ifndef LOOM_IR_KERNEL_H
#define LOOM_IR_KERNEL_H

#include <string.h>

#include "ir/dtype.h"
#include "loom.h"

typedef void (*lk_fn)(void *const *args, int64_t begin, int64_t end);

typedef enum lk_op {
  /* --- integer index arithmetic: dtype is always LOOM_I64 ---------------- */
  LK_DIM,  /* the current index along domain dim `imm_i`                    */
  LK_IDIV, /* a / b, both >= 0 (b > 0)                                      */
  LK_IMOD, /* a % b, both >= 0 (b > 0)                                      */
  /* --- leaves ------------------------------------------------------------ */
  LK_CONST, /* imm_f (float dtypes) or imm_i (integer dtypes, BOOL 0/1)      */
  LK_LOAD,  /* element a (an I64 offset) of slot `slot`, typed `dtype`        */
  LK_RAND,  /* uniform [0,1) of `dtype` (F32/F64) from Philox; see below     */
  LK_ACC,   /* epilogue only: the reduction's result, typed `acc_dtype`      */
  LK_STAT,  /* row statistic `imm_i` of the current row (see lk_stat below)  */
  /* --- elementwise, all operands of `dtype` (ints: I64 index math too) --- */
  LK_ADD,
  LK_SUB,
  LK_MUL,
  LK_DIV, /* floats only                                                   */
  LK_MAX,
  LK_MIN, /* NaN-propagating for floats                              */
  LK_POW, /* floats: as C pow. Integers: exact, wrapping (modulo 2^bits);
             a negative exponent gives 1 for a base of 1, +-1 for -1, else 0
             (PyTorch's integer pow)                                         */
  LK_NEG,
  LK_ABS,
  LK_EXP,
  LK_LOG,
  LK_SQRT,
  LK_SIN,
  LK_COS,
  LK_TANH,
  LK_ERF,   /* floats only    */
  LK_FLOOR, /* floats only                                                   */
  /* --- comparisons: operands of the dtype of a, result LOOM_BOOL -------- */
  LK_CMPLT,
  LK_CMPLE,
  LK_CMPEQ,
  LK_CMPNE, /* false when a float is NaN, NE true */
  /* --- logic on BOOL ----------------------------------------------------- */
  LK_AND,
  LK_OR,
  LK_NOT,
  LK_WHERE, /* a (BOOL) ? b : c, b and c of `dtype`                          */
  LK_CAST,  /* a converted to `dtype`, as C does (float->int truncates; to
               BOOL is a != 0; U8 wraps modulo 256)                          */
  /* --- leaves bound at run time ------------------------------------------ */
  LK_PARAM,   /* a float scalar of `dtype`: ((const double *)args[slot])[imm_i],
                 rounded once to dtype. Constants the planner does not fold: the
                 kernel (and its cache entry) serves every value              */
  LK_SIZE,    /* a size of a shape-generic kernel: ((const int64_t *)
                 args[slot])[imm_i] (slot is the kernel's size_slot), as I64
                 or converted to a float `dtype` (a count: a mean's divisor)   */
  LK_BITCAST, /* a's bits (as stored in memory) read as `dtype`, of the same
                 element size; to BOOL is a byte != 0. BF16 and F16 go through
                 their bits: a signaling NaN may come back quiet (kernel.h's top) */
  LK_NUM_OPS
} lk_op;

typedef struct lk_inst {
  lk_op op;
  loom_dtype dtype; /* result dtype */
  int a, b, c;      /* operand instruction indices, -1 where unused */
  int slot;         /* LK_LOAD, LK_RAND, LK_PARAM */
  int64_t imm_i;    /* LK_DIM: the dim; LK_CONST: integer value; LK_RAND: stream;
                       LK_PARAM: the index */
  double imm_f;     /* LK_CONST of a float dtype */
} lk_inst;

/*
 * LK_RAND: with counter c = inst a (I64, >= 0), stream s = imm_i (0..2^32-1) and
 * the key k = ((uint32_t *)args[slot])[0..1], computes Philox 4x32-10 on the
 * counter block (lo32(c), hi32(c), s, 0) and key (k[0], k[1]), giving x0..x3:
 *   F32: (x0 >> 8) * 2^-24
 *   F64: ((uint64_t)(x0 >> 5) * 2^26 + (x1 >> 6)) * 2^-53
 * base/philox.h holds the reference implementation in C.
 */

typedef enum lk_reduce {
  LK_RED_NONE = 0,
  LK_RED_SUM,    /* identity 0                                              */
  LK_RED_MAX,    /* identity -inf / the dtype's minimum; NaN propagates     */
  LK_RED_MIN,    /* identity +inf / the dtype's maximum; NaN propagates     */
  LK_RED_ARGMAX, /* acc is I64: row-major index over the reduced dims of the
                    first maximum (a NaN counts as the maximum)             */
  LK_RED_ARGMIN,
  LK_RED_LSE /* F32/F64 only (acc_dtype == value dtype): log(sum(exp(v))) as
                m + log(sum(exp(v - m))), m the max (0 when m is +-inf), like
                torch.logsumexp: extent 0 -> -inf, all -inf -> -inf, any +inf
                -> +inf, any NaN -> NaN                                     */
} lk_reduce;

/* LK_RED_LSE: acc_dtype may be F64 with F32 values: the row's max, exps and
 * sum run in float (the CUDA generator sums in double), max + log(sum) in
 * double, not rounded to float. */
/*
 * Row statistics: a kernel without a reduction (nouter == ndim >= 2) may compute,
 * once per row (a point of dims [0, ndim-1)), reductions over the last dim: stat
 * i accumulates instruction `value` at every point (r, j) of the row, j in
 * [0, dom[ndim-1]), and LK_STAT with imm_i = i is its result (typed acc_dtype,
 * with LSE's meaning as below) everywhere after. A stat's value may use only
 * earlier stats. Softmax and layer norm are one kernel this way: the row is
 * read from memory once and its statistics come from cache.
 */
#define LK_MAX_STATS 8
#define LK_MAX_MORE 4
typedef struct lk_stat {
  lk_reduce reduce; /* SUM, MAX, MIN or LSE */
  loom_dtype acc_dtype;
  int value;
} lk_stat;

typedef struct lk_kernel {
  int ndim;                   /* 1..LOOM_MAX_DIMS (a 0-d output has ndim 1, dom {1}) */
  int64_t dom[LOOM_MAX_DIMS]; /* extents >= 0; a reduced extent of 0 leaves the
                                 accumulator at its identity */
  int nouter;                 /* output dims = dom[0..nouter) */
  lk_reduce reduce;
  loom_dtype acc_dtype; /* dtype of the accumulator (and of inst `value`
                           for SUM/MAX/MIN/LSE; ARGMAX/ARGMIN: I64) */
  loom_dtype out_dtype; /* dtype of slot 0 and of inst `result` */
  int nslots;           /* slot 0 is the output */
  int ninst, nbody;
  int value, result;
  lk_inst *inst;
  int nstats; /* row statistics, evaluated before the row's points */
  lk_stat stat[LK_MAX_STATS];
  /* A shape-generic kernel (below) reads sizes at run time from the int64
   * array in slot size_slot (0: none, an ordinary kernel). */
  int size_slot, nsizes;
  int dom_size[LOOM_MAX_DIMS]; /* 0: dom[d] is the extent; i + 1: sizes[i] is,
                                  and dom[d] holds LK_GENERIC_EXTENT_GUESS */
  /* An update in place (passes/in_place.c), 0: none. keep_slot s: slot 0
   * holds slot s's values when the kernel starts (the same buffer, or a copy
   * of it), the kernel has no reduction and no stats, and its value is a
   * WHERE one of whose arms loads slot s at the point's own output index
   * (lk_kernel_keep_arm): a backend may store only the points taking the
   * other arm (a KV cache's new row), or store every point as usual. */
  int keep_slot;
  /* More outputs (passes/multi_output.c), 0: none. A kernel without a
   * reduction, row statistics or a kept slot may also store, at every point,
   * instruction more[i].value (a body instruction, stored as its own dtype) to
   * slot more[i].slot at the point's output index, as slot 0 gets `value`:
   * a value another kernel would have computed and stored for this one to
   * load (an optimizer's new moments, made where the new parameter is). Such a
   * slot is written only: no instruction reads it. */
  int nmore;
  struct lk_output {
    int slot, value;
  } more[LK_MAX_MORE];
} lk_kernel;

/* The instructions read from outside the instruction list (value, result, the
 * stats' values, the more outputs' values), into roots (LK_MAX_ROOTS room;
 * repeats allowed); returns their count. */
#define LK_MAX_ROOTS (2 + LK_MAX_STATS + LK_MAX_MORE)
int lk_kernel_roots(const lk_kernel *k, int *roots);

/* With keep_slot: the WHERE's arm that loads it (1: the true arm, 2: the
 * false arm); 0 when the kernel keeps no slot. */
int lk_kernel_keep_arm(const lk_kernel *k);

/* The points that whoever splits a kernel's output range over threads keeps
 * in one part: a row kernel's rows (dom[nouter - 1] points each), else 1. A
 * backend computes a row's statistics the same way for any range, but a
 * range that cuts a row may reach them by another loop (the LLVM backend's
 * row that stores softmax's exps while summing them, and the cut row that
 * does not, are vectorized each in its own way), so a sum's last bits could
 * depend on where the parts fall, and so on the thread count. */
static inline int64_t lk_kernel_split_unit(const lk_kernel *k) {
  if (k->nstats == 0 || k->nouter < 1 || k->dom[k->nouter - 1] < 1) return 1;
  return k->dom[k->nouter - 1];
}

/* 128-bit hash of the kernel's canonical description (stable across runs). */
typedef struct lk_hash {
  uint64_t lo, hi;
} lk_hash;

lk_hash lk_kernel_hash(const lk_kernel *k);
/* Marks in needed[] (ninst bytes, zeroed by the caller) instruction `target`
 * and every instruction it depends on: what a backend evaluates for it. */
void lk_mark_needed(const lk_kernel *k, int target, unsigned char *needed);
/* An I64 instruction as c[0] DIM 0 + ... + c[ndim-1] DIM ndim-1 + k, when it
 * is one (ok): the index arithmetic of loads, for backends choosing loop and
 * vector shapes. */
typedef struct lk_affine {
  bool ok;
  int64_t c[LOOM_MAX_DIMS];
  int64_t k;
} lk_affine;
/* af[i] for every body instruction i < nbody (af has nbody entries; not ok
 * for non-I64 instructions and for ones that are not affine, or overflow). */
void lk_affine_analyze(const lk_kernel *k, lk_affine *af);
/* Whether an index is the point's own row-major index over all of k's dims
 * (the index the output is stored at, in a kernel without a reduction). */
bool lk_affine_is_own_index(const lk_kernel *k, const lk_affine *ix);
/* out = k over regrouped domain dims (kernel_regroup.c): the last outer dim
 * split where the index divides it by a constant, then adjacent dims merged
 * where every load offset and Philox counter weighs them as one row-major dim.
 * The same values, over longer rows and affine offsets. Returns out's
 * instructions (the caller frees them), NULL when out of memory. */
lk_inst *lk_kernel_regroup_dims(const lk_kernel *k, lk_kernel *out);
/*
 * Shape-generic kernels (ir/kernel_generic.c). A kernel's SIZES are its domain
 * extents and the values of its size constants, in that order (dom[0..ndim),
 * then each such LK_CONST in instruction order): every I64 constant (strides,
 * offsets, bounds) and every float constant holding an integer of magnitude
 * at most 65536 other than -0 (a count: the n of a mean). Its SHAPE HASH
 * covers all the rest: the same computation over other sizes (a batch of 7
 * instead of 3, a sequence one longer) has the same shape hash. Generalizing
 * a kernel makes the sizes marked in `lift` run-time values: lifted extents
 * are dom_size entries, lifted constants LK_SIZE instructions, all read from
 * one int64 array in a new last slot. The generic kernel, given the concrete
 * kernel's values of the lifted sizes, computes exactly what the concrete
 * kernel does, and so it does for any other kernel of the same shape hash
 * whose sizes agree with it where it did not lift (the runtime's record of
 * the shape knows which those are: runtime/compile.c).
 *
 * Backends choose strategies (vector widths, chunked sums, row blocking) from
 * constant extents; a lifted extent counts as LK_GENERIC_EXTENT_GUESS where a
 * guess serves, and as unknown where the choice must hold for every size.
 * Lifted extents must be >= 1 (an empty kernel is never generalized).
 */
#define LK_GENERIC_EXTENT_GUESS 4096
static inline bool lk_inst_is_size(const lk_inst *in) {
  if (in->op != LK_CONST) return false;
  if (in->dtype == LOOM_I64) return true;
  double v = in->imm_f;
  return lm_dtype_is_float(in->dtype) && v >= -65536 && v <= 65536 && v == (double)(int64_t)v &&
         !(v == 0 && __builtin_signbit(v));
}
int lk_kernel_count_sizes(const lk_kernel *k);
void lk_kernel_sizes(const lk_kernel *k, int64_t *sizes); /* count entries */
lk_hash lk_kernel_shape_hash(const lk_kernel *k);
/* out = k generalized over the sizes i with lift[i] set (count entries), and
 * values[0..out->nsizes) the lifted sizes' values in k: the array the generic
 * kernel is run with. k must not be generic already. Returns out's
 * instructions (the caller frees them); NULL when out of memory. */
lk_inst *lk_kernel_generalize(const lk_kernel *k, const unsigned char *lift, lk_kernel *out,
                              int64_t *values);
/* out = k with a size constant of its own for every use: value numbering
 * merges constants that happen to be equal (a cat's boundary of 16 with a
 * row stride of 16), which would make that size's kernel another shape. The
 * same values; the runtime hashes and generalizes this form. Returns out's
 * instructions (the caller frees them), NULL when out of memory. */
lk_inst *lk_kernel_unshare_sizes(const lk_kernel *k, lk_kernel *out);
static inline bool lk_kernel_is_generic(const lk_kernel *k) { return k->size_slot > 0; }
/* Whether dim d's extent is a run-time size of generic kernel k:
 * sizes[k->dom_size[d] - 1]. */
static inline bool lk_dim_is_sized(const lk_kernel *k, int d) { return k->dom_size[d] > 0; }
static inline bool lk_dims_sized(const lk_kernel *k, int from, int to) {
  for (int d = from; d < to; d++)
    if (lk_dim_is_sized(k, d)) return true;
  return false;
}
/* The points of dims [from, to) for a backend's choices: a run-time extent
 * counts as LK_GENERIC_EXTENT_GUESS (never 0: a generic kernel is never
 * empty), and a product past int64 as INT64_MAX; where a choice must hold for
 * every size, backends ask lk_dims_sized. */
static inline int64_t lk_extent_product(const lk_kernel *k, int from, int to) {
  int64_t n = 1;
  for (int d = from; d < to; d++)
    if (__builtin_mul_overflow(n, k->dom[d], &n)) return INT64_MAX;
  return n;
}
/* Whether two instructions compute the same value (value numbering). */
static inline bool lk_inst_same(const lk_inst *x, const lk_inst *y) {
  return x->op == y->op && x->dtype == y->dtype && x->a == y->a && x->b == y->b && x->c == y->c &&
         x->slot == y->slot && x->imm_i == y->imm_i &&
         memcmp(&x->imm_f, &y->imm_f, sizeof x->imm_f) == 0;
}
/* After rebuilding k's instructions into out (n of them, instruction i of k
 * now at map[i]): out's count and the roots read from outside the list. */
static inline void lk_kernel_remap_roots(const lk_kernel *k, lk_kernel *out, const int *map,
                                         int n) {
  if (k->nbody == k->ninst) out->nbody = n;
  out->ninst = n;
  out->value = map[k->value];
  out->result = map[k->result];
  for (int s = 0; s < k->nstats && s < LK_MAX_STATS; s++)
    out->stat[s].value = map[k->stat[s].value];
  for (int m = 0; m < k->nmore && m < LK_MAX_MORE; m++) out->more[m].value = map[k->more[m].value];
}

/* Whether a backend rounds instruction `in`'s float result to its dtype: a
 * BF16 or F16 result of anything but a load, select, negation, abs, floor, max,
 * min or bitcast (which give values of the dtype already). */
bool lk_inst_rounds(const lk_inst *in);
/* Readable listing, for LOOM_DEBUG and tests. */
void lk_kernel_print(const lk_kernel *k, FILE *f);
const char *lk_op_name(lk_op op);
/* Checks operand indices, dtypes and the body/epilogue split; returns NULL when
 * valid, else a static description of the first problem. */
const char *lk_kernel_check(const lk_kernel *k);

/*
 * A block matrix product a backend generates whole (the CPU's own GEMM, in
 * place of BLAS): C = A @ B, or C += A @ B, for one m x n x k block, in BLIS's
 * design: panels of B and blocks of A packed into scratch, a register-blocked
 * microkernel of mr x nr sums over each packed sliver pair. Operands are
 * strided both ways (a transposed operand is only other strides), so one
 * function per dtype and tile serves every layout.
 */
typedef struct lk_gemm {
  loom_dtype dtype;    /* F32 or F64: sums and C */
  loom_dtype in_dtype; /* A's and B's: dtype, or BF16 / F16 with F32 sums
                          (widened to F32 as they are packed) */
  int mr, nr;          /* the microkernel's tile: rows x columns of sums in
                          registers (nr a multiple of the vector width) */
  bool amx;            /* BF16 through the CPU's matrix tiles (AMX-BF16):
                          mr = nr = LK_GEMM_AMX_TILE, four 16 x 16 tiles of
                          sums; the caller has the OS's leave to use them */
  bool dot_pairs;      /* BF16 through AVX512-BF16's dot products of term
                          pairs (vdpbf16ps): packed as for AMX, nr =
                          LK_GEMM_AMX_TILE columns, mr rows of vectors */
} lk_gemm;
#define LK_GEMM_AMX_TILE 32
/* AMX sums 32 terms a tile step: its kc is a multiple of this, and the
 * panels of both paired tiles are padded to it */
#define LK_GEMM_AMX_K 32

/* The tile packs A's rows and B's term pairs for BF16 pair products (AMX's
 * layout, backends/llvm/gemm.c), not the F32 slivers. */
static inline bool lk_gemm_paired(const lk_gemm *t) { return t->amx || t->dot_pairs; }

/* What the generated function reads (every field 8 bytes, in this order). */
typedef struct lk_gemm_args {
  int64_t m, n, k;
  const void *a;
  int64_t a_row, a_col; /* A(i, p) is a[i * a_row + p * a_col] */
  const void *b;
  int64_t b_row, b_col; /* B(p, j) is b[p * b_row + j * b_col] */
  void *c;
  int64_t ldc;           /* C(i, j) is c[i * ldc + j] */
  int64_t accumulate;    /* nonzero: C += A @ B; zero: C = A @ B (C not read) */
  int64_t mc, kc, nc;    /* blocking: A blocks mc x kc, B panels kc x nc (>= 1) */
  void *pack;            /* lk_gemm_pack_bytes(g, mc, kc, nc) bytes, 64-aligned */
  int64_t b_in_place;    /* nonzero, with b_col == 1: B's whole slivers are read in
                            place, not packed (lk_gemm_b_in_place) */
  const int64_t *b_rows; /* non-NULL, with b_row == 0 and b_col == 1: B's row p
                            starts at b + b_rows[p] (k entries): a convolution's
                            windows read from the image, runtime/conv_cpu.c.
                            Such a B is always packed. */
} lk_gemm_args;

typedef void (*lk_gemm_fn)(const lk_gemm_args *args);
/* lk_gemm_args' layout, in the generated functions' hashes */
#define LK_GEMM_ABI 2

/* Products whose A rows and B columns are contiguous along k (a_col == 1,
 * b_row == 1: activations against a layer's weight read as W^T) with few rows
 * or few outputs for their sum are computed unpacked, each output a vector
 * dot product: packing would copy more than it saves. */
#define LK_GEMM_DOT_MAX_ROWS 4
#define LK_GEMM_DOT_TERMS_PER_OUTPUT 64
static inline bool lk_gemm_unpacked(int64_t m, int64_t n, int64_t k, int64_t a_col, int64_t b_row) {
  return a_col == 1 && b_row == 1 && k > 0 &&
         (m <= LK_GEMM_DOT_MAX_ROWS || m * n * LK_GEMM_DOT_TERMS_PER_OUTPUT <= k);
}

/* Products of few rows against B's contiguous rows (b_col == 1: a token
 * against a layer stored [in, out], GPT-2's Conv1D) are computed unpacked too,
 * B's rows swept once each, scaled by A's terms into the rows' sums. */
static inline bool lk_gemm_swept(int64_t m, int64_t k, int64_t b_col) {
  return b_col == 1 && k > 0 && m <= LK_GEMM_DOT_MAX_ROWS;
}

/* B's rows contiguous (b_col == 1), its whole slivers are read where they are
 * (lk_gemm_args.b_in_place) when few tiles of rows share each (packing would
 * copy about as much as they read) or the slivers are short: measured on an
 * AVX-512 Xeon, reading in place won up to 5 tiles of rows and at kc 32 with
 * 11, and lost from 10 tiles at kc 256 (a strided sliver of 256 rows meets
 * itself in L1's sets). */
#define LK_GEMM_IN_PLACE_MAX_TILES 5
#define LK_GEMM_IN_PLACE_SHORT_KC 64
static inline bool lk_gemm_b_in_place(const lk_gemm *t, int64_t m, int64_t kc, int64_t b_col) {
  return b_col == 1 && t->in_dtype == t->dtype && !lk_gemm_paired(t) &&
         ((m + t->mr - 1) / t->mr <= LK_GEMM_IN_PLACE_MAX_TILES || kc <= LK_GEMM_IN_PLACE_SHORT_KC);
}

/* Scratch the generated function needs for its packed panels. */
size_t lk_gemm_pack_bytes(const lk_gemm *g, int64_t mc, int64_t kc, int64_t nc);
lk_hash lk_gemm_hash(const lk_gemm *g);
/* NULL when g is one a backend can generate, else what is wrong. */
const char *lk_gemm_check(const lk_gemm *g);

#endif
