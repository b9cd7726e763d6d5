/*
 * ir/: the graph every op records into.
 *
 * A node is an op, its sources, and the shape, dtype and device inferred when it
 * was recorded. Once computed, a node turns into an LM_BUFFER leaf holding its
 * data and lets go of its sources, so the graph behind it can be freed.
 *
 * Broadcasting is explicit in the IR: the sources of an elementwise node all
 * have the node's shape (the frontend inserts RESHAPE + EXPAND views).
 * Movement ops (RESHAPE PERMUTE EXPAND SLICE PAD CAT) are views: kernels index
 * through them; nothing is copied unless a consumer needs memory (a BLAS call).
 *
 * Nodes are reference counted (by tensor handles and by consumer nodes) and
 * used by one thread at a time.
 */
#ifndef LOOM_IR_H
#define LOOM_IR_H

#include "base/hash128.h"
#include "ir/dtype.h"
#include "loom.h"

typedef enum lm_op {
  /* leaves */
  LM_BUFFER, /* computed data in node->data */
  LM_CONST,  /* arg.f everywhere */
  LM_IOTA,   /* arg.iota.start + arg.iota.step * (row-major index) */
  LM_RAND,   /* Philox draw: arg.rand */
  LM_INPUT,  /* a program's placeholder (loom_input): a leaf whose data comes
                with each run; `label` is its name */
  /* elementwise unary */
  LM_NEG,
  LM_ABS,
  LM_EXP,
  LM_LOG,
  LM_SQRT,
  LM_RSQRT,
  LM_SIN,
  LM_COS,
  LM_TANH,
  LM_SIGMOID,
  LM_RELU,
  LM_GELU,
  LM_SILU,
  LM_SQUARE,
  LM_RECIPROCAL,
  LM_NOT,
  LM_CAST,
  LM_ERF,
  LM_LOG1P, /* log(1 + x), accurate for small x */
  LM_EXPM1, /* exp(x) - 1, accurate for small x */
  LM_FLOOR,
  LM_CEIL,
  LM_ROUND, /* half to even */
  LM_CLAMP, /* min(max(x, arg.clamp.lo), arg.clamp.hi); an infinite bound is no bound */
  /* elementwise binary (sources share the node's shape and, except
     comparisons and logic, its dtype) */
  LM_ADD,
  LM_SUB,
  LM_MUL,
  LM_DIV,
  LM_POW,
  LM_MAX,
  LM_MIN,
  LM_LT,
  LM_LE,
  LM_EQ,
  LM_NE,
  LM_AND,
  LM_OR,
  LM_WHERE, /* src[0] BOOL ? src[1] : src[2] */
  /* reductions over arg.axes; the node keeps the reduced dims as size 1 */
  LM_RSUM,
  LM_RMAX,
  LM_RMIN,
  LM_RLSE, /* log-sum-exp (floats): m + log(sum(exp(x - m))), m the max */
  LM_ARGMAX,
  LM_ARGMIN, /* one axis, I64 */
  /* movement (views) */
  LM_RESHAPE,
  LM_PERMUTE, /* out dim d is src dim arg.perm[d] */
  LM_EXPAND,  /* size-1 src dims repeat to the node's shape */
  LM_SLICE,   /* out[i] = src[start + i * step] per dim (a negative step reads
                 backwards: loom_flip's) */
  LM_PAD,     /* out[i] = src[i - lo] where in range, else arg.pad.value */
  LM_CAT,     /* sources joined along arg.axis */
  LM_WINDOW,  /* sliding windows over the last two dims: [.., H, W] ->
                 [.., OH, OW, KH, KW], src[.., oh*s0 + kh*d0, ow*s1 + kw*d1] */
  /* compute with a library call */
  LM_MATMUL,    /* [..., M, K] @ [..., K, N], batch dims equal (broadcast by views) */
  LM_ATTENTION, /* softmax(q k^T * arg.attn.scale + mask) v: q [..., Tq, D], k [..., Tk,
                   D], v [..., Tk, Dv] and, with arg.attn.mask, a 4th source [..., Tq, Tk]
                   (bool: true attends; additive: f32 added); causal masks the keys
                   after the query; batch dims equal (broadcast by views); [..., Tq, Dv] */
  /* data-dependent indexing */
  LM_GATHER, /* src[0] [V, ..] rows picked by src[1] (integers, shape S): S + [..];
                indices are clamped to [0, V) (the frontend's are checked first:
                LM_CHECK, so that none reaches it out of range) */
  /* a copy from another device (loom_to), computed when recorded: it holds its
     data from the start and keeps src[0], on the other device, only so that
     autograd can copy its gradient back */
  LM_COPY,
  /* collectives across processes (runtime/dist.c), one library step each;
     arg.coll; every rank runs the same ones in the same order */
  LM_ALL_REDUCE, /* every rank's src[0] combined elementwise by arg.coll.reduce; with
                    several sources (1 to LM_CAT_MAX_SOURCES), their elements joined in
                    order, [total] */
  LM_BROADCAST,  /* rank arg.coll.root's src[0] */
  LM_ALL_GATHER, /* the arg.coll.world ranks' src[0] joined along arg.coll.axis */
  /* (last, so that the earlier ops keep their numbers in graph hashes) a library call:
     attention's gradients from LM_ATTENTION's sources q, k, v (and its mask), its
     output o and o's gradient, arg.attn as the forward's: [..., 3, T, W] with T =
     max(Tq, Tk), W = max(D, Dv), each batch index's dq [Tq, D], dk [Tk, D] and dv
     [Tk, Dv] in the top left of its three [T, W] parts (the rest zeros), so that
     each is a slice of constant bounds where Tq = Tk and D = Dv */
  LM_ATTENTION_GRAD,
  /* (after ATTENTION_GRAD, for the same reason) the order of each row of src[0] along
     its last dim, I64: the source positions of its arg.sort.k first values, from the
     smallest (or, descending, the largest); NaN counts as larger than any number and
     -0 as 0; equal values keep their order (stable). [.., n] -> [.., k]; with
     arg.sort.full, k is n (a sort: k follows n where n is symbolic) */
  LM_SORT,
  /* (after SORT, for the same reason) running sums of src[0] along arg.scan.axis:
     out[.., i, ..] = x[.., 0, ..] + .. + x[.., i, ..] in order (arg.scan.reverse:
     x[.., i, ..] + .. + x[.., n - 1, ..], from the end), so that NaN and inf reach only
     the sums after them; F32 summed in double and rounded once, F64 in double, I64
     wrapping (two's complement); the source's shape and dtype (arg.scan.combine:
     LOOM_REDUCE_SUM, the one combination there is) */
  LM_SCAN,
  /* (after SORT, for the same reason) src[0] itself, once every value passed the
     rule arg.check names; else the run fails with an error naming the public op
     that recorded it (arg.check.op) and the first value that broke it. A library
     step over its stored source (runtime/check_step.c): data-dependent indices,
     positions and probabilities that a kernel cannot refuse. The range of the
     integer rules comes from the shapes of the other sources, which are not
     read (so that it follows a symbolic size): index, src[1] the table:
     [0, src[1] dim arg.check.axis); start, src[1] the tensor and src[2] the
     update: [0, src[1] dim axis - src[2] dim axis] */
  LM_CHECK,
  /* (after CHECK, for the same reason) src[0]'s bits read as the node's dtype, of the
     same element size (loom_bitcast): elementwise. A BOOL node is true where the byte
     is not 0 (BOOL holds 0 or 1); BF16 and F16 live in float registers, so a signaling
     NaN's bits may come back quiet (its quiet bit set) */
  LM_BITCAST,
  LM_NUM_OPS
} lm_op;

/* What an attention node's 4th source is. */
typedef enum lm_attention_mask {
  LM_ATTENTION_NO_MASK,
  LM_ATTENTION_BOOL_MASK, /* true: attend */
  LM_ATTENTION_ADD_MASK   /* f32, added to the scaled scores */
} lm_attention_mask;
const char *lm_attention_mask_name(int mask);
int lm_attention_mask_named(const char *s, size_t len); /* -1: none such */

/* The fused attention kernel's largest head dim (D and Dv): its tiles live on
 * the stack (runtime/attention_cpu.c). */
#define LM_ATTENTION_MAX_HEAD 256

/* What an LM_CHECK node asks of its source's values (arg.check). */
typedef enum lm_check_rule {
  LM_CHECK_INDEX,  /* integers in [0, n), or equal to `ignore` where has_ignore */
  LM_CHECK_START,  /* integers in [0, n] (a slice's start: n = size - length) */
  LM_CHECK_WEIGHTS /* floats, rows along the last dim: each finite and >= 0, and
                      some value of each row above 0 (a multinomial distribution) */
} lm_check_rule;
#define LM_CHECK_RULES 3
/* The sources a rule takes (the values, then the shapes giving its range). */
int lm_check_rule_sources(int rule);
/* The rule's name in the program text ("index", ...), NULL outside the enum;
 * and back (-1 for none). */
const char *lm_check_rule_name(int rule);
int lm_check_rule_named(const char *s, size_t len);
/* Room for the public op's name a check reports (arg.check.op, terminated). */
#define LM_CHECK_OP_LEN 48

typedef enum lm_rand_kind { LM_RAND_UNIFORM, LM_RAND_NORMAL, LM_RAND_BERNOULLI } lm_rand_kind;

/* How a node's data is freed: the runtime's lm_data_free (the CPU's buffer
 * allocator or the device's), stored with the data, so that ir/ frees what a
 * node owns without calling up into the runtime. */
typedef void (*lm_data_release)(loom_device device, void *data, size_t bytes);

typedef struct lm_node lm_node;
struct lm_node {
  lm_op op;
  _Atomic int refs; /* atomic: threads share computed nodes (weights) */
  int nsrc;
  lm_node **src; /* points to src_inline unless nsrc > 3 */
  lm_node *src_inline[3];
  loom_shape shape;
  loom_dtype dtype;
  loom_device device;
  union {
    double f;
    struct {
      double start, step;
      /* 1: start is the node's element count less its traced distance from
         it (n - 1: the index of a flip as version 3 files hold it; loom_flip
         is a reversed slice now), so that it follows a symbolic size */
      uint8_t from_end;
    } iota;
    struct {
      loom_key key;
      lm_rand_kind kind;
      double p;
    } rand;
    uint32_t axes; /* bit a set: axis a reduced */
    int perm[LOOM_MAX_DIMS];
    struct {
      int64_t start[LOOM_MAX_DIMS], step[LOOM_MAX_DIMS];
      /* per dim, LM_SLICE_START/STOP_FROM_END: the bound was given from the
         dim's end (torch's x[-1:], x[:-1]), so a symbolic dim's slice keeps
         its distance from the end (passes/symbolic.c); the start is always
         the concrete one */
      uint8_t from_end[LOOM_MAX_DIMS];
    } slice;
    struct {
      int64_t lo[LOOM_MAX_DIMS];
      double value;
      /* per dim, 1: lo is the output's size less the source's and the high
         pad (the gradient of a slice whose start was from the end), so it
         follows a symbolic output size */
      uint8_t lo_from_end[LOOM_MAX_DIMS];
    } pad;
    int axis;
    struct {
      int64_t kernel[2], stride[2], dilation[2];
    } window;
    struct {
      double lo, hi;
    } clamp;
    struct {
      int reduce; /* loom_reduce_op */
      int root, axis;
      int world; /* the number of ranks when recorded */
    } coll;
    struct {
      double scale;
      bool causal;
      int mask; /* lm_attention_mask */
    } attn;
    struct {
      int64_t k;       /* values kept per row */
      bool descending; /* the largest first */
      bool full;       /* k is the row's length (a sort, not a top-k) */
    } sort;
    struct {
      int axis;     /* the dim scanned */
      int combine;  /* loom_reduce_op: LOOM_REDUCE_SUM */
      bool reverse; /* from the dim's end */
    } scan;
    struct {
      int rule;                 /* lm_check_rule */
      int axis;                 /* the integer rules: the dim of src[1] (and src[2]) */
      bool has_ignore;          /* LM_CHECK_INDEX: `ignore` is allowed too */
      int64_t ignore;           /* (cross-entropy's ignore_index) */
      char op[LM_CHECK_OP_LEN]; /* the public op that recorded it, for the message */
    } check;
  } arg;
  /* An input-free leaf (CONST IOTA RAND): bit d set when the user wrote dim d's
     size (loom_ones(shape) called directly, not by a composite op deriving it
     from another tensor's): a symbolic program keeps it fixed and refuses to
     give it a symbol (passes/symbolic.c). Other nodes: 0. */
  uint8_t fixed_dims;
  /* The public op that was recording when the node was made (the outermost
     one on the thread: lm_recording_op), for messages; NULL outside any (a
     plain op called directly, a node read from a file). A static string. */
  const char *made_by;
  bool requires_grad;            /* gradients flow through it (set when recorded) */
  struct loom_tensor *grad_leaf; /* the handle its gradients accumulate into (weak) */
  char *label;                   /* LM_INPUT: its name (owned) */
  void *data;                    /* LM_BUFFER: contiguous row-major elements */
  size_t bytes;                  /* LM_BUFFER: allocation size */
  lm_data_release release_data;  /* frees data: set with it (never NULL then) */
  /* Scratch for graph walks, owned by ir/: only what any walk needs. What a
   * pass decides about a node lives in the pass's own storage, indexed by the
   * node's pos (planning's records, autograd's gradients). */
  uint64_t visit;     /* the lm_walk_epoch of the walk that last saw it (any walk) */
  int pos;            /* its position in the latest walk that numbers nodes, valid
                         during that walk: lm_graph_build's canonical position
                         (unrealized nodes; planning numbers its stored temporaries
                         after the graph's), autograd's walk order (-1 when made) */
  lm_node *dead_next; /* lm_node_release: the next node to free (a list
                         through the dying nodes, so freeing never allocates) */
};

/* ------------------------------------------------------------ nodes */
/* Grad mode (per thread): while a no-grad region is open, new nodes never
 * require gradients. */
void lm_no_grad_push(void);
void lm_no_grad_pop(void);
bool lm_grad_enabled(void);
/* The public op recording nodes on this thread (per thread, like grad mode):
 * while one runs others, the outermost wins. New nodes take it as made_by,
 * and errors name it first (runtime/error.c). lm_recording_op_enter returns
 * what lm_recording_op_leave restores. */
const char *lm_recording_op_enter(const char *op);
void lm_recording_op_leave(const char *previous);
const char *lm_recording_op(void); /* NULL when none runs */

lm_node *lm_node_new(lm_op op, int nsrc, lm_node *const *src, loom_shape shape, loom_dtype dtype,
                     loom_device device);
void lm_node_retain(lm_node *n);
/* Drops one reference; frees the node (and releases its sources, iteratively)
 * when it was the last. */
void lm_node_release(lm_node *n);
/* Turns a computed node into a leaf owning `data`, releasing its sources. */
void lm_node_set_buffer(lm_node *n, void *data, size_t bytes, lm_data_release release);
/* Computed: holds its data (an LM_BUFFER, or a node keeping its history for
 * autograd), or an LM_INPUT whose data a program run supplies. Every walk over
 * unrealized graphs stops at computed nodes: they are a graph's leaves. */
static inline bool lm_is_computed(const lm_node *n) { return n->data != NULL || n->op == LM_INPUT; }
/*
 * Every graph op described once (ir/op.c): what hashing, the program text's
 * writer and parser, verification, planning's cost rule, the node builders and
 * printing read instead of a switch of their own. An op's shape rule, lowering
 * and gradient rule are code (ir/verify.c, passes/lower.c, frontend/grad_rules.c);
 * docs/adding-ops.md lists every place.
 */
typedef enum lm_op_class {
  LM_OPC_LEAF,        /* no sources: BUFFER CONST IOTA RAND INPUT */
  LM_OPC_ELEMENTWISE, /* sources of the node's shape, one value per point */
  LM_OPC_REDUCE,      /* over arg.axes, reduced dims kept as 1 */
  LM_OPC_VIEW,        /* indexing only: kernels read through it */
  LM_OPC_LIBRARY,     /* computed by a library call (BLAS) */
  LM_OPC_GATHER,      /* data-dependent rows */
  LM_OPC_COPY,        /* from another device, computed when recorded */
  LM_OPC_COLLECTIVE,  /* across processes, a library step (runtime/dist.c) */
  LM_OPC_SORT,        /* a library step over whole rows of its stored source */
  LM_OPC_SCAN,        /* a library step along one dim of its stored source */
  LM_OPC_CHECK        /* a library step checking its stored source's values */
} lm_op_class;

/* Which member of lm_node.arg an op uses, and so how it is hashed and written. */
typedef enum lm_arg_kind {
  LM_ARG_NONE,
  LM_ARG_VALUE,  /* arg.f: value=<f64> */
  LM_ARG_IOTA,   /* arg.iota: start=<f64> step=<f64> */
  LM_ARG_RAND,   /* arg.rand: kind= p= key= (the key is data, not hashed) */
  LM_ARG_AXES,   /* arg.axes: axes=[...] */
  LM_ARG_AXIS,   /* arg.axis: axis=<int> */
  LM_ARG_PERM,   /* arg.perm: perm=[one per dim] */
  LM_ARG_SLICE,  /* arg.slice: start=[...] step=[...] [from_end=[...]] */
  LM_ARG_PAD,    /* arg.pad: lo=[...] value=<f64> [lo_from_end=[...]] */
  LM_ARG_WINDOW, /* arg.window: kernel=[2] stride=[2] dilation=[2] */
  LM_ARG_CLAMP,  /* arg.clamp: lo=<f64> hi=<f64> */
  LM_ARG_COLL,   /* arg.coll: reduce=<name> root=<int> axis=<int> world=<int> */
  LM_ARG_ATTN,   /* arg.attn: scale=<f64> causal=<0|1> mask=<none|bool|add> */
  LM_ARG_SORT,   /* arg.sort: k=<int> descending=<0|1> full=<0|1> */
  LM_ARG_SCAN,   /* arg.scan: axis=<int> combine=<name> reverse=<0|1> */
  LM_ARG_CHECK   /* arg.check: rule=<name> axis=<int> [ignore=<int>] op=<name> */
} lm_arg_kind;

/* The dtype an op gives, from its (first value) source's. */
typedef enum lm_op_result {
  LM_RES_SOURCE, /* the source's (or, for CAST and leaves, the node's own) */
  LM_RES_BOOL,   /* comparisons and logic */
  LM_RES_I64     /* ARGMAX ARGMIN SORT */
} lm_op_result;

typedef struct lm_op_info {
  const char *name; /* lm_op_name, the program text, listings */
  lm_op_class cls;
  int arity; /* sources; -1: 1 to LM_CAT_MAX_SOURCES (CAT) */
  lm_arg_kind arg;
  lm_op_result result;
  bool float_only; /* computes in f32/f64 only (the frontend casts others) */
  bool differentiable;
  int cost; /* inline cost per element in simple instructions (planning) */
} lm_op_info;

extern const lm_op_info lm_op_table[LM_NUM_OPS];

/* The op's row; NULL outside the enum. */
const lm_op_info *lm_op_info_of(lm_op op);
bool lm_op_is_elementwise(lm_op op);
bool lm_op_is_view(lm_op op);
bool lm_op_is_reduce(lm_op op);
bool lm_op_is_collective(lm_op op);
bool lm_op_is_attention(lm_op op); /* LM_ATTENTION or its gradient */
bool lm_op_is_sort(lm_op op);
bool lm_op_is_scan(lm_op op);
bool lm_op_is_check(lm_op op);
/* loom_reduce_op's name in listings and the program text ("sum", ...), NULL
 * outside the enum; and back (-1 for none). */
const char *lm_reduce_op_name(int reduce);
int lm_reduce_op_named(const char *name, size_t len);
const char *lm_op_name(lm_op op);

/* ------------------------------------------------------------ shapes */
/* numel, or -1 when it overflows int64 */
int64_t lm_shape_numel(const loom_shape *s);
bool lm_shape_eq(const loom_shape *a, const loom_shape *b);
/* "[4,2]" into buf (always terminated); "(9 dims)" for an ndim out of range */
const char *lm_shape_str(const loom_shape *s, char *buf, size_t len);
void lm_shape_strides(const loom_shape *s, int64_t *strides); /* contiguous, in elements */

/* An affine view: element i (multi-index) of the view is at
 * offset + sum(i[d] * strides[d]) in the base buffer. */
typedef struct lm_view {
  loom_shape shape;
  int64_t strides[LOOM_MAX_DIMS];
  int64_t offset;
} lm_view;

/* Whether an unrealized node has memory of its own in the plan being made: a
 * planning decision, which ir/ does not know, so the planner passes it in. */
typedef bool lm_stored_fn(const void *planner, const lm_node *n);

/* Follows movement ops from n down to the first node that is not one, or that
 * has memory of its own (computed, or `stored` by the plan being made): *base.
 * Composes them into one affine view when they compose (no PAD/CAT, reshapes
 * that split or merge only compatible strides). */
bool lm_view_affine(const lm_node *n, lm_stored_fn *stored, const void *planner,
                    const lm_node **base, lm_view *view);

/* ------------------------------------------------------------ verification */
/* True when n is exactly what its op makes of its sources, by the rules the
 * frontend applies when recording (shape, dtype, device, number of sources,
 * arguments); else false, with `why` saying what is wrong: the op, the values
 * involved and what was expected. Sources are taken as verified. A computed
 * node is a leaf: its shape, dtype and data are checked. Lowering trusts what
 * this accepts, so a node read from a file is verified before it is compiled. */
bool lm_node_verify(const lm_node *n, char *why, size_t len);
/* "f32[8,32]" into buf (always terminated; a bad dtype or ndim says so). */
const char *lm_type_str(loom_dtype dtype, const loom_shape *s, char *buf, size_t len);
/* The most sources a CAT may have (lowering's limit). */
#define LM_CAT_MAX_SOURCES 64
/* arg.slice.from_end flags */
#define LM_SLICE_START_FROM_END 1
#define LM_SLICE_STOP_FROM_END 2

/* ------------------------------------------------------------ canonical form */
/* The unrealized graph behind some targets, in a canonical order: a post-order
 * walk from the targets (sources in order), leaves (computed buffers) numbered
 * by first appearance. Pointer values and data never enter `bytes`.
 *
 * Building a graph writes the scratch fields (visit, pos) of its unrealized
 * nodes only, which belong to the building thread. Computed nodes (leaves)
 * may be in graphs other threads build at the same time (shared weights), so
 * their positions live in the graph (`leaves`), never in the node: ask
 * lm_graph_pos for a node's position. */
typedef struct lm_graph {
  lm_node **nodes; /* canonical order */
  int n, cap;
  int *targets; /* positions of the targets */
  int ntargets;
  unsigned char *bytes; /* the canonical serialization */
  size_t nbytes, bytes_cap;
  lm_hash128 hash;
  int *leaves; /* open addressing over leaf positions (-1: empty), keyed by node */
  size_t leaves_cap, nleaves;
} lm_graph;

/* A hash of g with its sizes left out (shapes, slice and pad bounds, arange
 * starts, constants that may be counts): graphs that differ only in sizes
 * share it, so the runtime can find a lazy graph's family (runtime/realize.c).
 * Only a grouping: whether a graph is an instance of another at other sizes is
 * checked by the caller. {0, 0} when out of memory. */
lm_hash128 lm_graph_family_hash(const lm_graph *g);

/* A fresh value for lm_node.visit: marks what one walk has seen. */
uint64_t lm_walk_epoch(void);

/* Collects and serializes; returns LOOM_OK or LOOM_ERR_OOM. */
loom_status lm_graph_build(lm_graph *g, lm_node *const *targets, int ntargets);
void lm_graph_free(lm_graph *g);
/* The position of n, a node of g (nodes[pos] == n; a leaf not in g gives
 * -1). Valid until g's targets are published (they become computed then). */
int lm_graph_pos(const lm_graph *g, const lm_node *n);

#endif
