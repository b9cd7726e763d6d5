/*
 * Shared between the files of backends/llvm/ only; other folders use
 * llvm_backend.h.
 */
#ifndef LOOM_BACKENDS_LLVM_INTERNAL_H
#define LOOM_BACKENDS_LLVM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

#include "backends/llvm/llvm_backend.h"

/* ------------------------------------------------------------------ errors */

/* snprintf into err (when err && errlen); a message is never cut mid-way silently. */
void lm_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------ target.c */

/* Initializes LLVM's native target once; false (with a message) if it failed. */
bool lm_target_init(char *err, size_t errlen);
/* A new target machine for the host (the caller disposes it); NULL on failure. */
LLVMTargetMachineRef lm_target_machine_create(char *err, size_t errlen);
/* The widest vector registers the host has, in bytes (64 AVX-512, 32 AVX, 16 else). */
int lm_target_vector_bytes(void);
/* The host has AMX's tiles and their BF16 products (and AVX-512 for the rest). */
bool lm_target_has_amx_bf16(void);
bool lm_target_has_avx512_bf16(void);

/* ------------------------------------------------------------------ gemm.c */

/* The module defining GEMM block function `symbol` (an lk_gemm_fn) for d. */
loom_status lm_gemm_module(LLVMContextRef ctx, const lk_gemm *d, const char *symbol,
                           LLVMModuleRef *out, char *err, size_t errlen);

/* ------------------------------------------------------------------ codegen */

/* The state of turning one kernel into one LLVM module. */
/* A load needed only where its wrappers' conditions hold (guard.c). */
#define LM_GUARD_MAX_CONDS 8
typedef struct lm_guard {
  int ncond;                    /* 0: not guarded */
  int cond[LM_GUARD_MAX_CONDS]; /* BOOL instructions, all before the load */
  int fill;                     /* the wrappers' constant, where a condition fails */
} lm_guard;

typedef struct lm_cg {
  const lk_kernel *k;
  const char *symbol;
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;        /* where code is being emitted */
  LLVMBuilderRef entry;    /* end of the body's entry block: allocas, loop-invariant loads */
  LLVMValueRef fn;         /* the body function (slot pointers are its noalias params) */
  LLVMValueRef *slot;      /* [nslots] i8* base pointers */
  LLVMValueRef begin, end; /* the range of output points (i64) */
  LLVMValueRef *key;       /* [2 * nslots] Philox key words of a slot, loaded on first use */
  LLVMValueRef dim[LOOM_MAX_DIMS]; /* current index along each domain dim (NULL: none here) */
  LLVMValueRef *val; /* [ninst] instruction values in the current evaluation context */
  LLVMValueRef acc;  /* what LK_ACC means in the epilogue */
  LLVMValueRef stat[LK_MAX_STATS]; /* the current row's statistics (NULL: none yet) */
  int cached_inst;                 /* an instruction read back from the output, or -1 */
  LLVMValueRef cached_at;          /* the output index it is read from */
  lm_guard *guard;                 /* [ninst] (guard.c) */
  int *pass_to;                    /* [ninst] a guarded load's wrapper: the load, else -1 */
  bool *absorbed;                  /* [ninst] an exp only added to big constants (absorb.c) */
  LLVMTypeRef t_void, t_i1, t_i8, t_i32, t_i64, t_f32, t_f64;
  char *err;
  size_t errlen;
  bool failed;
} lm_cg;

/* Records the first codegen error (naming the kernel symbol); returns NULL so
 * emitters can `return lm_cg_fail(...)`. */
LLVMValueRef lm_cg_fail(lm_cg *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* codegen.c: the whole module for (checked) kernel k, defining `symbol`. */
loom_status lm_codegen_module(LLVMContextRef ctx, const lk_kernel *k, const char *symbol,
                              LLVMModuleRef *out, char *err, size_t errlen);
/* Size `index` of a generic kernel (LK_SIZE, a run-time extent), loaded in the
 * entry block: nothing the kernel writes aliases it. */
LLVMValueRef lm_emit_size(lm_cg *g, int64_t index);
/* A new alloca of type t in the entry block (so mem2reg promotes it). */
LLVMValueRef lm_entry_alloca(lm_cg *g, LLVMTypeRef t, const char *name);

/* guard.c: finds the guarded loads (false when out of memory) and emits one. */
bool lm_guards_analyze(lm_cg *g);
void lm_guards_free(lm_cg *g);
LLVMValueRef lm_emit_guarded_load(lm_cg *g, int i);

/* ops.c: types, memory access, one instruction. BF16 and F16 are floats in
 * registers (stored as i16): every instruction of theirs that can make a value
 * the dtype cannot hold is rounded to it (lm_emit_round), so a fused kernel
 * computes what the ops would one at a time, as torch does. */
static inline bool lm_in_float(loom_dtype dt) { return dt == LOOM_F32 || lm_dtype_is_half(dt); }
LLVMValueRef lm_emit_round(lm_cg *g, loom_dtype dt, LLVMValueRef v);
LLVMTypeRef lm_type(const lm_cg *g, loom_dtype dt);     /* in registers (BOOL is i1) */
LLVMTypeRef lm_mem_type(const lm_cg *g, loom_dtype dt); /* in memory (BOOL is i8) */
LLVMValueRef lm_emit_load(lm_cg *g, loom_dtype dt, int slot, LLVMValueRef offset);
/* v stored as dt to slot at offset; the output (slot 0, out_dtype) by the second. */
void lm_emit_store(lm_cg *g, loom_dtype dt, int slot, LLVMValueRef offset, LLVMValueRef v);
void lm_emit_store_output(lm_cg *g, LLVMValueRef offset, LLVMValueRef v);
LLVMValueRef lm_emit_max_min(lm_cg *g, loom_dtype dt, LLVMValueRef a, LLVMValueRef b, bool is_max);
/* Instruction i of the kernel, from the operand values already in g->val. */
LLVMValueRef lm_emit_inst(lm_cg *g, int i);

/* reduce.c: the accumulator of a reduction kernel.
 *
 * Float MAX/MIN and every ARGMAX/ARGMIN take two passes over the reduced dims,
 * because LLVM 14 keeps NaN-propagating select reductions scalar:
 *  - float MAX/MIN: the main pass reduces an integer image of the floats that
 *    orders like them (a vectorizable smax/smin) plus a "saw a NaN" flag; only
 *    when that flag is set or the maximum is a zero (whose sign depends on
 *    order) does a second, exact pass repeat the scalar definition;
 *  - ARGMAX/ARGMIN: the main pass finds the extreme value that way (integers:
 *    a plain max/min), the second finds the first index holding it (the first
 *    NaN when there is one) as a vectorizable unsigned-min reduction.
 *  - LSE: the main pass finds the maximum m that way; the second (only when
 *    m is finite) sums exp(v - m) in the values' dtype with reassoc; the
 *    result is m + log(sum) in double, rounded once to acc_dtype (NaN, +-inf:
 *    m itself).
 * MAX/MIN/ARGMAX/ARGMIN results are bit-identical to the scalar definitions in
 * ir/kernel.h. */
typedef enum lm_acc_pass {
  LM_ACC_MAIN,       /* the first pass */
  LM_ACC_EXACT,      /* float MAX/MIN again, by the scalar definition */
  LM_ACC_FIND_FIRST, /* ARGMAX/ARGMIN: the first index holding the extreme */
  LM_ACC_EXP_SUM     /* LSE: sum of exp(v - shift) */
} lm_acc_pass;

typedef struct lm_acc {
  lk_reduce reduce;
  loom_dtype dt;      /* dtype of the reduced value */
  loom_dtype out_dt;  /* dtype of the result (LSE: F64 for F32 values allowed) */
  LLVMValueRef best;  /* alloca: running sum / max / min, or the extreme value
                         (LSE's second pass: the shift s) */
  LLVMValueRef key;   /* alloca iN: float extremes as order keys (main pass), else NULL */
  LLVMValueRef nan;   /* alloca i1: the main pass saw a NaN (float keys only) */
  LLVMValueRef index; /* alloca i64: index of the best value (ARGMAX/ARGMIN only) */
  LLVMValueRef sum;   /* alloca of dt: LSE's sum of exp(v - s), else NULL */
  LLVMValueRef total; /* alloca double: float sums of more than LM_SUM_CHUNK values add
                         each chunk's sum here (lm_acc_flush), else NULL */
  LLVMValueRef comp;  /* alloca double: the compensation of `total` (Neumaier) */
  lm_acc_pass pass;   /* what lm_acc_step emits */
} lm_acc;
/* Textual IR of helper functions the reduction code calls (parsed into every module). */
const char *lm_reduce_prelude_ir(void);
/* An accumulator reducing values of dtype `dt` with `reduce` to `out_dt` (the
 * kernel's reduction, or a row statistic). */
void lm_acc_create(lm_cg *g, lm_acc *acc, lk_reduce reduce, loom_dtype dt, loom_dtype out_dt,
                   int64_t extent); /* extent: values per result */
/* Reductions of at most this many values per result skip the key pass. */
#define LM_ACC_SMALL_EXTENT 16
/*
 * Float sums (SUM, LSE's sum of exponentials) of more values than this run in
 * chunks of at most this many: each chunk is summed in the value's dtype in
 * vector lanes (reassociated), then added to a double total with Neumaier's
 * compensation. A chunk's lanes hold few terms each, so the error no longer
 * grows with the length (the sequential lanes of a 2^24-value F32 mean were off
 * by 2.4e-4); the total costs one scalar step per chunk.
 */
#define LM_SUM_CHUNK 2048
/* Whether the current pass sums in chunks: flush after each. */
bool lm_acc_chunked(const lm_acc *acc);
/* Adds the current chunk's sum to the total and restarts the chunk. */
void lm_acc_flush(lm_cg *g, const lm_acc *acc);
/* *total += x (doubles) with Neumaier's compensation collected in *comp: what
 * each addition rounds away, whichever operand is larger. Plain fadds (no
 * reassoc), so LLVM keeps the order. */
void lm_neumaier_add(lm_cg *g, LLVMValueRef total, LLVMValueRef comp, LLVMValueRef x);
/* Starts a new output point: identities, and the main pass. */
void lm_acc_reset(lm_cg *g, lm_acc *acc);
/* Combines x (the value at reduced linear index `lin`, i64) into the accumulator. */
void lm_acc_step(lm_cg *g, const lm_acc *acc, LLVMValueRef x, LLVMValueRef lin);
/* Whether this reduction may need a second pass over the reduced dims. */
bool lm_acc_has_second_pass(const lm_acc *acc);
/* After the main pass: finishes it and returns an i1, true when the second
 * pass must run. */
LLVMValueRef lm_acc_end_main_pass(lm_cg *g, lm_acc *acc);
/* Emitted where the second pass starts: prepares the accumulator for it. */
void lm_acc_begin_second_pass(lm_cg *g, lm_acc *acc);
/* The reduction's result, of the kernel's acc_dtype. */
LLVMValueRef lm_acc_result(lm_cg *g, const lm_acc *acc);

/* philox.c: LK_RAND. */
LLVMValueRef lm_emit_rand(lm_cg *g, loom_dtype dt, int slot, uint32_t stream, LLVMValueRef counter);

/* mathfn.c: EXP LOG SQRT SIN COS TANH ERF FLOOR POW ABS of a float dtype. */
LLVMValueRef lm_emit_math(lm_cg *g, lk_op op, loom_dtype dt, LLVMValueRef x, LLVMValueRef y);
/* e^x for x <= 0 (-inf included, no NaN), where only a sum of such terms that
 * includes a 1 is wanted (log-sum-exp): F32 results below e^-87 come out as
 * e^-87, which cannot change such a sum, and the exp skips its range checks. */
LLVMValueRef lm_emit_exp_nonpositive(lm_cg *g, loom_dtype dt, LLVMValueRef x);
/* F32 e^x for an exp marked in g->absorbed (absorb.c). */
LLVMValueRef lm_emit_exp_absorbed(lm_cg *g, LLVMValueRef x);
/* absorb.c: marks g->absorbed (false when out of memory). */
bool lm_absorbed_analyze(lm_cg *g);

/* ------------------------------------------------------------------ emit.c */

/* Verifies, optimizes and emits kernel k as an object defining `symbol`;
 * writes the LOOM_DEBUG / LOOM_DUMP output. */
loom_status lm_emit_object_buffer(const lk_kernel *k, const char *symbol, LLVMMemoryBufferRef *out,
                                  char *err, size_t errlen);
/* The same for a GEMM block function. */
loom_status lm_emit_gemm_object_buffer(const lk_gemm *d, const char *symbol,
                                       LLVMMemoryBufferRef *out, char *err, size_t errlen);

#endif
