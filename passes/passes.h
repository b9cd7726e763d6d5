/*
 * passes/: from a canonical graph to a program: which nodes get memory
 * (fusion), each fused group lowered to a kernel description (ir/kernel.h),
 * and library calls (GEMM) with their operand layouts.
 */
#ifndef LOOM_PASSES_H
#define LOOM_PASSES_H

#include "ir/ir.h"
#include "ir/kernel.h"
#include "ops/scan/scan_plan.h"

typedef enum lm_step_kind {
  LM_STEP_KERNEL,
  LM_STEP_GEMM,
  LM_STEP_ATTENTION,
  LM_STEP_SORT,
  LM_STEP_SCAN,
  LM_STEP_CHECK,
  LM_STEP_COLLECTIVE,
  LM_STEP_KINDS /* how many: each table of step kinds has this many rows */
} lm_step_kind;

/* A kernel reads at most this many buffers and keys (its slots); planning
 * keeps each fused expression to half of it, so that joining a row group's
 * or an epilogue's expressions stays under it. */
#define LM_KERNEL_MAX_SLOTS 256
/* No fused expression is deeper than this many ops: lowering and code
 * generation walk an expression recursively, and a chain of 16,000 ops once
 * overflowed the stack (a 256 KiB thread stack at 100). */
#define LM_FUSION_MAX_DEPTH 24

/* arg_pos of the slot that binds a step's `params` (its float constants,
 * LK_PARAM: the kernel serves every value of them). */
#define LM_PARAMS_SLOT (-2)

/* A GEMM prologue's kernel has at most this many slots (the runtime keeps a
 * copy of its arguments per block on the stack). */
#define LM_PROLOGUE_MAX_SLOTS 16
/* A GEMM operand below this size is stored, not made in blocks by its
 * kernel: it stays in cache between its kernel and the GEMM anyway. */
#define LM_PROLOGUE_MIN_BYTES ((int64_t)1 << 20)

/* C[b] = A[b] @ B[b] for every batch index b, C contiguous [batch.., M, N]. */
/* A GEMM's B that is a convolution's windows over an image x [n, c, h, w]
 * (contiguous, at buffer x_pos): B(p, j) with p = (ci, kh, kw) and j =
 * (ni, oh, ow) is x[ni, ci, oh * stride[0] - pad[0] + kh * dilation[0],
 * ow * stride[1] - pad[1] + kw * dilation[1]], zero outside. Set by
 * lm_pair_gemm_prologues on a forward convolution whose im2col matrix is made
 * in blocks; the CPU then reads B from x (runtime/gemm_windows.c). */
typedef struct lm_gemm_windows {
  bool on;
  int x_pos;
  int64_t n, c, h, w, oh, ow, kh, kw;
  int64_t stride[2], dilation[2], pad[2];
} lm_gemm_windows;

typedef struct lm_gemm {
  loom_dtype dtype;    /* C's and the sums' */
  loom_dtype in_dtype; /* A's and B's: dtype, or BF16 / F16 (with F32 sums:
                          only loom's own GEMM takes them) */
  int nbatch;
  int64_t batch[LOOM_MAX_DIMS];
  int64_t a_bstride[LOOM_MAX_DIMS], b_bstride[LOOM_MAX_DIMS]; /* elements */
  int64_t a_offset, b_offset;
  int64_t M, N, K;
  bool a_trans, b_trans;
  int64_t lda, ldb;
  int a_pos, b_pos;    /* canonical positions of the operands' buffers */
  lm_gemm_windows win; /* B is also windows over an image (win.on) */
  /* filled in by the runtime: loom's own block function for `tile` (NULL:
   * BLAS only), and whether it computes every block or only those it takes
   * unpacked (lk_gemm_unpacked), BLAS the rest */
  lk_gemm_fn fn;
  lk_gemm tile;
  bool fn_for_all;
} lm_gemm;

/* Fused attention (LM_ATTENTION): out [batch.., Tq, Dv], contiguous, from q,
 * k and v read in place through views whose last dim has unit stride; its
 * backward (LM_ATTENTION_GRAD, `backward`): out [batch.., Tq D + Tk D + Tk Dv],
 * each batch index's dq, dk and dv one after the other, contiguous, from the
 * same operands and the forward's output and its gradient. The numbers are
 * what the kernels read (runtime/attention_cpu.c's argument numbers,
 * lm_attention_f32_numbers): sizes, then per operand its offset, row stride
 * and batch strides, in elements. */
enum { LM_ATTENTION_OPERANDS = 6 };
typedef struct lm_attention {
  int nbatch;
  int64_t batch[LOOM_MAX_DIMS];
  int64_t tq, tk, d, dv;
  /* q, k, v, the mask, the forward's output and its gradient; the mask's row
     stride is along Tq, mask_stride along Tk */
  int64_t offset[LM_ATTENTION_OPERANDS], row_stride[LM_ATTENTION_OPERANDS];
  int64_t bstride[LM_ATTENTION_OPERANDS][LOOM_MAX_DIMS], mask_stride;
  int pos[LM_ATTENTION_OPERANDS]; /* canonical positions of their buffers (-1: none) */
  int mask;                       /* lm_attention_mask */
  double scale;
  bool causal;   /* key j > query i masked */
  bool backward; /* LM_ATTENTION_GRAD */
} lm_attention;

/* A sort (LM_SORT): out [rows, k] I64, each row's first k positions in
 * order, from its source stored whole ([rows, n], row-major). */
typedef struct lm_sort {
  loom_dtype dtype; /* the source's */
  int in_pos;       /* canonical position of the source's buffer */
  int64_t rows, n, k;
  bool descending;
} lm_sort;

/* A check (LM_CHECK): its source stored whole ([rows, cols], row-major; the
 * weights rule's rows run along the last dim) passes arg.check's rule into
 * the output, a copy; or the run fails there, naming `op` and the first
 * value that broke the rule (runtime/check_step.c). */
typedef struct lm_check_step {
  loom_dtype dtype; /* the source's */
  int in_pos;       /* canonical position of the source's buffer */
  int rule;         /* lm_check_rule */
  bool has_ignore;
  int64_t lo, hi, ignore;
  int64_t rows, cols;
  char op[LM_CHECK_OP_LEN];
} lm_check_step;
/* The check LM_CHECK node n asks for, at its sizes: its rows and columns (the
 * weights rule's rows run along the last dim; a 0-d source is one row of
 * one), the integer rules' range [lo, hi) from the other sources' shapes
 * (in_pos -1: planning sets it). */
void lm_check_describe(const lm_node *n, lm_check_step *c);

/* A collective across processes (LM_ALL_REDUCE, LM_BROADCAST, LM_ALL_GATHER):
 * the sources' whole buffers, row-major, into the step's output. */
typedef struct lm_collective {
  lm_op op;
  int reduce, root, world; /* as the node's arg.coll */
  int nin;                 /* sources: an all-reduce's are joined, in order */
  int *in_pos;             /* [nin] canonical positions of their buffers (owned) */
  int64_t *in_count;       /* [nin] their elements (owned) */
  loom_dtype dtype;
  int64_t count; /* the elements of all of them */
  /* all_gather: the source as [outer, inner] around the gathered axis (inner
     counts the axis and the dims after it) */
  int64_t outer, inner;
  int number, of; /* it is the program's number-th collective (from 1) of `of` */
  /* the first step reading its output (nsteps: none): an all-reduce may run
     on while the steps before that one compute (runtime/exec.c) */
  int wait_before;
} lm_collective;

/* A step of a plan: the fields every kind has, and its kind's payload (a
 * tagged union: only the member `kind` names is set). Each kind has a row in
 * lm_step_kinds (below: its planning and sources), in the runtime's table
 * (runtime/step_kinds.h: running, profiling, plan templates) and in the
 * formats' (io/step_kinds.h: the listing, exports). */
typedef struct lm_step {
  lm_step_kind kind;
  int out;                 /* canonical position of the node this step computes, or a
                              temporary (positions from the graph's size on) */
  loom_dtype dtype;        /* of the output */
  int64_t outer;           /* output elements */
  const void *device_code; /* the CUDA backend's compiled step, filled in by
                              the runtime */
  struct lm_code *code;    /* the runtime's reference keeping fn, gemm.fn or
                              device_code loaded (runtime/compile.h) */
  union {
    struct { /* LM_STEP_KERNEL */
      lk_kernel kernel;
      lk_fn fn;       /* filled in by the runtime */
      int *arg_pos;   /* per slot: the canonical position it binds to (slot 0: out),
                         or LM_PARAMS_SLOT */
      double *params; /* the values of the kernel's LK_PARAMs */
      int nparams;
      bool *arg_key;  /* per slot: true when it binds the key of an LM_RAND node */
      int64_t *sizes; /* filled in by the runtime when fn is a shape-generic kernel's:
                         the sizes it reads (bound after the kernel's last slot) */
      int nsizes;
    };
    lm_gemm gemm;        /* LM_STEP_GEMM */
    lm_collective coll;  /* LM_STEP_COLLECTIVE */
    lm_attention attn;   /* LM_STEP_ATTENTION */
    lm_sort sort;        /* LM_STEP_SORT */
    lm_scan scan;        /* LM_STEP_SCAN */
    lm_check_step check; /* LM_STEP_CHECK */
  };
  /* GEMM epilogues: a GEMM whose only reader is an elementwise kernel runs
   * deferred, in row blocks, each followed by the kernel on those rows while
   * they are in cache; the kernel's slot gemm_slot reads the block. */
  bool deferred;    /* GEMM step: run by its partner; kernel step: run by the
                       GEMMs whose b_producer it is */
  int gemm_partner; /* kernel step: index of its GEMM step, or -1 */
  int gemm_slot;
  /* GEMM prologues (CPU): a large B operand (an im2col matrix) that only GEMMs
   * read is never stored; each GEMM reading it runs its producer kernel on a
   * block of its columns at a time, into a scratch buffer that stays in cache. */
  int b_producer; /* GEMM step: index of the kernel step making B, or -1 */
  /* memory planning: buffers no later step reads, freed after this one */
  int *free_after;
  int nfree;
  /* An update in place (lm_plan_in_place): the leaf position whose values
   * the output starts from (kernel.keep_slot binds it): the runtime hands the
   * step that leaf's buffer when nothing else holds it, else a copy; -1: none. */
  int donor;
} lm_step;

/* A plan (lm_plan_make): the steps that compute a canonical graph, in order,
 * the positions that get memory of their own, and when each is freed. */
typedef struct lm_plan {
  int nnodes; /* size of the canonical graph it was planned for */
  int ntemps; /* temporaries at positions nnodes.. (partial reductions) */
  int nsteps;
  lm_step *steps;
  bool *published;    /* per graph position: a target, whose buffer its node keeps */
  bool *materialized; /* per graph position: an unrealized node a step computes
                         into memory of its own (a kernel's root, a GEMM); every
                         other unrealized node is inlined by the kernels reading it */
  /* An instance of a plan template (runtime/plan_template.c): the steps'
   * arrays, published and materialized belong to the template's plan, but for
   * each collective's in_count and what release_code drops. */
  bool borrows_steps;
  /* Set by the runtime that compiled the steps: drops their code references
   * (lm_plan_free calls it; planning knows nothing of code). */
  void (*release_code)(struct lm_plan *p);
  /* Set by the runtime once every rank was found to run this plan's
   * collectives alike (runtime/dist.c lm_dist_check_plan). */
  _Atomic bool ranks_agree;
} lm_plan;

/* Whether step i is an all-reduce that runs on while the steps after it,
 * up to its coll.wait_before, compute (runtime/exec.c starts it, polls it
 * between them and waits for it before its first reader). */
bool lm_collective_runs_on(const lm_plan *p, int i);

/* Plans the graph: decides what is materialized (the plan's `materialized`),
 * lowers every step. Kernels are left for the runtime to compile. Without
 * `fuse` every op that computes gets its own kernel (views and constants stay
 * inline). Its decisions stay in its own records: of the graph's nodes it
 * writes only the unrealized ones' `visit`. */
loom_status lm_plan_make(const lm_graph *g, bool fuse, lm_plan **out, char *err, size_t errlen);
/* Marks the kernel steps of p (planned for lazy graph g) that may update a
 * leaf in place (passes/in_place.c): a published where(c, x, leaf) whose
 * leaf nothing else in p reads. Only for runs that bind g's own leaves
 * (runtime/realize.c): a program's inputs and weights are never taken. */
void lm_plan_in_place(const lm_graph *g, lm_plan *p);
/* Merges into one kernel step a published elementwise kernel and the one
 * later kernel that reads it (passes/multi_output.c: lk_kernel.more); with
 * cpu, also a GEMM's epilogue and its reader. Only for runs that publish
 * targets from their own buffers (runtime/realize.c). */
void lm_plan_more_outputs(lm_plan *p, bool cpu);
void lm_plan_free(lm_plan *p);

/* ------------------------------------------------------------ step kinds (step_kinds.c) */

/* What a step's sources must be when planning makes it. */
typedef enum lm_step_sources {
  LM_SOURCES_FUSED,    /* a kernel: its sources are inlined or read from memory */
  LM_SOURCES_IN_PLACE, /* GEMM, attention: read in place through views
                          (gemm_pairing.c's operand layouts) */
  LM_SOURCES_WHOLE     /* stored whole, row-major (fusion stores them), never
                          fused into as an epilogue */
} lm_step_sources;

struct lm_planner;
/* A step kind's row at the planning layer: its name, which nodes it computes,
 * how it is planned, what its sources must be and which buffers it reads.
 * lm_step_kinds[kind], one row per lm_step_kind. */
typedef struct lm_step_kind_info {
  const char *name; /* the listing's, LOOM_PROFILE's and the dot picture's word */
  /* whether it computes nodes of op (NULL: the kernel, every op lowered) */
  bool (*computes)(lm_op op);
  /* the step for node n; a failure writes err (out of memory) */
  loom_status (*plan)(const struct lm_planner *pl, lm_node *n, lm_step *step, char *err,
                      size_t errlen);
  lm_step_sources sources;
  bool first_source_only; /* reads its node's first source (the others give it
                             shapes only) */
  /* calls read(ctx, pos) for each buffer the step itself reads (a kernel's
     keys excluded; a GEMM partner's or B producer's reads: lm_step_reads) */
  void (*reads)(const lm_step *s, void (*read)(void *ctx, int pos), void *ctx);
} lm_step_kind_info;
extern const lm_step_kind_info *const lm_step_kinds[LM_STEP_KINDS];
/* The word naming step s: its kind's, or a collective's op (all_reduce). */
const char *lm_step_name(const lm_step *s);
/* The kind of step that computes a node of op (LM_STEP_KERNEL: lowered). */
lm_step_kind lm_step_kind_of(lm_op op);
/* Whether step s reads the buffer at pos. */
bool lm_step_reads_pos(const lm_step *s, int pos);

/* ------------------------------------------------------------ symbolic dims (symbolic.c) */

/* A dim's size as a polynomial over a program's symbols (at most
 * LM_SYM_MAX_SYMBOLS): terms c * s0^p0 * s1^p1 ..., sorted, no zero
 * coefficient; 0 is no terms. */
#define LM_SYM_MAX_SYMBOLS 8
#define LM_SYM_TERMS 6
#define LM_SYM_MAX_NODES 65536 /* a symbolic program's graph, at most */
typedef struct lm_sym_term {
  int64_t coef;
  uint8_t pow[LM_SYM_MAX_SYMBOLS];
} lm_sym_term;
typedef struct lm_sym_expr {
  int nterms;
  lm_sym_term t[LM_SYM_TERMS];
} lm_sym_expr;

lm_sym_expr lm_sym_const(int64_t v);
lm_sym_expr lm_sym_symbol(int s);
bool lm_sym_eq(const lm_sym_expr *a, const lm_sym_expr *b);
bool lm_sym_is_const(const lm_sym_expr *e);
/* e at the symbols' values; INT64_MIN on overflow. */
int64_t lm_sym_eval(const lm_sym_expr *e, const int64_t *values);
const char *lm_sym_str(const lm_sym_expr *e, const char *const *names, char *buf, size_t len);
/* e += t; false on overflow or too many terms (e unchanged). */
bool lm_sym_add_term(lm_sym_expr *e, const lm_sym_term *t);
/* Whether a >= b for all symbol values of at least 1, as far as a - b having
 * no negative coefficient shows (false when unsure). */
bool lm_sym_dominates(const lm_sym_expr *a, const lm_sym_expr *b);

/* Fitting a number that follows sizes: vals[g] at the LM_SYM_FIT_GRID^k grid
 * points g (symbol j at base[j] + digit j of g in base LM_SYM_FIT_GRID,
 * symbol 0 the lowest digit) -> out, the polynomial with each symbol at most
 * squared through them. False unless its coefficients are integers and it
 * has at most LM_SYM_TERMS terms; k is at most LM_SYM_FIT_MAX_SYMBOLS. (Three
 * points fit any quadratic: what the fit gives elsewhere is a claim the
 * caller checks at other points.) */
#define LM_SYM_FIT_GRID 3
#define LM_SYM_FIT_MAX_SYMBOLS 4
#define LM_SYM_FIT_MAX_POINTS 81 /* 3^4 */
bool lm_sym_fit(int k, const int64_t *base, const int64_t *vals, lm_sym_expr *out);
/* Grid point g of that fit: values[j] = base[j] + digit j of g. */
void lm_sym_fit_point(int k, const int64_t *base, int g, int64_t *values);

/* Dim (pos, axis) of a graph is symbol `symbol`: an input's, or a node's
 * whose size does not follow from its sources (a slice's length). */
typedef struct lm_sym_seed {
  int pos, axis, symbol;
} lm_sym_seed;

/* A constant whose value is a count of symbolic dims (a mean's divisor):
 * its value at other sizes. */
typedef struct lm_sym_count {
  int pos;
  lm_sym_expr value;
} lm_sym_count;

/* Every dim of g's nodes as an expression over the nsym symbols (dims[pos *
 * LOOM_MAX_DIMS + d]), given which input dims are which symbols and the
 * symbols' sizes in the traced graph (each at least 2), and the constants
 * that count symbolic dims (counts[0..*ncounts), room for g->n). Refuses
 * (with err) a symbol meeting a fixed size (an input's, a weight's, or an
 * input-free leaf's the user wrote: lm_node.fixed_dims), a reshape that
 * splits a symbolic dim other than one way, sliding windows over a symbolic
 * dim, a dim nothing ties to an input that holds a size the graph may have
 * computed (an input-free leaf's a composite op sized, a broadcast's) equal to
 * a symbol's or a symbolic dim's traced size, and any other constant equal
 * to the traced size of a symbolic dim or its reciprocal (it may have been
 * computed from it, and would not follow it), and slice bounds likewise near
 * one, unless numbers_checked: the caller compares the graph at every other
 * size with the one recorded there (a lazy family), so a number that did not
 * follow is caught there rather than guessed. */
loom_status lm_sym_infer(const lm_graph *g, const char *const *names, const int64_t *example,
                         int nsym, const lm_sym_seed *seeds, int nseeds, bool numbers_checked,
                         lm_sym_expr *dims, lm_sym_count *counts, int *ncounts, char *err,
                         size_t errlen);

#endif
