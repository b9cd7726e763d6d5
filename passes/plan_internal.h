/* The planning passes' shared declarations (passes/plan.c runs them in order).
 * One section per file. Not for the rest of loom: passes/passes.h is the
 * interface. */
#ifndef LOOM_PASSES_PLAN_INTERNAL_H
#define LOOM_PASSES_PLAN_INTERNAL_H

#include "passes/passes.h"

/* ------------------------------------------------------------ the planner's records */

/* What planning decides about one node, kept per position by the planner (not
 * in lm_node: no other walk needs it, and computed nodes shared with other
 * threads' plans then never see a write). Zero (inline, unread) until marked. */
typedef struct lm_plan_node {
  int uses;              /* kernels reading it (an inline view passes its readers on) */
  int inner_uses;        /* uses from inside one kernel's expression (epilogue fusion) */
  int group_uses;        /* uses from inside a row kernel's group of kernels */
  int cost;              /* per-element cost of computing it inline */
  int inputs;            /* slots a kernel computing it inline reads (an upper
                            bound: a leaf read twice counts twice) */
  int depth;             /* the longest inline chain below it, itself included */
  bool materialize;      /* it gets memory: a kernel (or GEMM) computes it, whose root it is */
  bool target;           /* one of the graph's targets */
  bool broadcast_use;    /* read through a broadcasting expand */
  bool reaches_stat;     /* an inline path from it reaches a row statistic */
  lm_node *fused_reduce; /* a reduction computed by this node's kernel, this node
                            being its epilogue */
  lm_node *split_reduce; /* while this epilogue's step is lowered: the final
                            reduction of fused_reduce split in two, which its
                            kernel computes instead (split.c's temporary) */
  lm_node *row_root;     /* a row statistic (or its reduction) computed inside
                            this root's kernel; the root itself for the root */
} lm_plan_node;

/* One planning run: the graph and a record per position, for the graph's
 * nodes and then for the temporaries that get memory (partial reductions, at
 * the schedule's temporary positions). */
typedef struct lm_planner {
  const lm_graph *g;
  lm_plan_node *node;
  int cap; /* records allocated */
} lm_planner;

/* The record of an unrealized node with a position (any node of the graph). */
static inline lm_plan_node *lm_plan_of(const lm_planner *pl, const lm_node *n) {
  return &pl->node[n->pos];
}

/* The record of any node planning meets, for reading: leaves (computed, their
 * positions in the graph's table, maybe in other plans at once) and
 * temporaries without a position (a split's views and a fused split's final
 * reduction) have no marks: never materialized, in no group. */
static inline const lm_plan_node *lm_plan_marks(const lm_planner *pl, const lm_node *n) {
  static const lm_plan_node unmarked;
  return lm_is_computed(n) || n->pos < 0 ? &unmarked : &pl->node[n->pos];
}

/* Whether n is an unrealized node the plan gives memory. */
static inline bool lm_materialized(const lm_planner *pl, const lm_node *n) {
  return lm_plan_marks(pl, n)->materialize;
}

/* Whether n has memory: computed, or materialized (lm_view_affine's question). */
static inline bool lm_has_memory(const lm_planner *pl, const lm_node *n) {
  return lm_is_computed(n) || lm_materialized(pl, n);
}

/* lm_view_affine's callback: materialized in planner pl. */
bool lm_planner_stores(const void *pl, const lm_node *n);

/* Nodes collected by a walk (growing array; oom when it could not grow). */
typedef struct node_list {
  lm_node **items;
  int len, cap;
  bool oom;
} node_list;

/* ------------------------------------------------------------ fusion.c */

/* Marks what gets memory (materialize), counts each node's readers (uses) and
 * applies the cost rule; without fuse every computed value. */
void lm_mark(lm_planner *pl, bool fuse);
/* The nodes root computes inline (root included), each once. */
void lm_collect_inline(const lm_planner *pl, lm_node *n, const lm_node *root, uint64_t epoch,
                       node_list *l);
/* Whether every use of r comes from inside root's kernel: 1, 0, or -1 when
 * out of memory. */
int lm_used_only_inside(lm_planner *pl, lm_node *r, lm_node *root);
/* Reductions become their elementwise consumer's epilogue; false when out of memory. */
bool lm_fuse_epilogues(lm_planner *pl);

/* ------------------------------------------------------------ rows.c */

/* Rows too few and long for one thread each are left to split reductions:
 * at most SPLIT_MAX_OUTER outputs of SPLIT_MIN_REDUCED or more values. */
#define SPLIT_MAX_OUTER 16
#define SPLIT_MIN_REDUCED 65536

/* Groups row kernels' roots with their statistics; false when out of memory. */
bool lm_fuse_rows(lm_planner *pl);
/* When lowering found a statistic of e's group read off its row: they get
 * kernels again. */
void lm_unfuse_rows(lm_planner *pl, const lm_node *e);

/* ------------------------------------------------------------ split.c */

/* Planning temporaries (released after their step is lowered). */
typedef struct temps {
  lm_node *nodes[64];
  int n;
} temps;

/* Keeps n among t; NULL and *oom when n could not be made. */
lm_node *lm_temp(temps *t, lm_node *n, bool *oom);
/* partial = reduce(reshape(pad(src))) and final = reduce(partial) for r; final,
 * or NULL when r is not worth splitting (*oom when memory ran out). None of
 * them has a position yet: the caller gives partial one, and memory. */
lm_node *lm_split_reduction(const lm_node *r, temps *t, bool *oom);

/* ------------------------------------------------------------ gemm_pairing.c */

/* A GEMM operand's layout when it can be read in place: its buffer's node
 * (*base) and BLAS parameters. */
bool lm_gemm_operand(const lm_planner *pl, const lm_node *operand, const lm_node **base,
                     lm_view *view);
/* The same for any library op's operand: a GEMM's (above) or attention's
 * (rows of unit stride). */
bool lm_library_operand(const lm_planner *pl, const lm_node *consumer, const lm_node *operand,
                        const lm_node **base, lm_view *view);
/* A fused attention step for n (its operands' layouts). */
loom_status lm_plan_attention(const lm_planner *pl, lm_node *n, lm_step *step, char *err,
                              size_t errlen);
/* A GEMM step for matmul n (its operands' layouts). */
loom_status lm_plan_gemm(const lm_planner *pl, lm_node *n, lm_step *step, char *err, size_t errlen);
/* GEMM epilogues; false when out of memory. */
bool lm_pair_gemm_epilogues(lm_planner *pl, lm_plan *p);
/* GEMM prologues (CPU). */
void lm_pair_gemm_prologues(const lm_graph *g, lm_plan *p);

/* ------------------------------------------------------------ plan.c: library steps */

/* A library step's common fields: it computes n, alone. */
void lm_library_step(lm_step *step, lm_step_kind kind, const lm_node *n);
/* The steps of collectives, sorts and checks: each reads its sources whole
 * (fusion.c stores them). */
loom_status lm_plan_collective(const lm_planner *pl, lm_node *n, lm_step *step, char *err,
                               size_t errlen);
loom_status lm_plan_sort(const lm_planner *pl, lm_node *n, lm_step *step, char *err, size_t errlen);
loom_status lm_plan_scan(const lm_planner *pl, lm_node *n, lm_step *step, char *err, size_t errlen);
loom_status lm_plan_check(const lm_planner *pl, lm_node *n, lm_step *step, char *err,
                          size_t errlen);

/* ------------------------------------------------------------ lower.c */

/* Lowers one materialized node into a kernel. */
loom_status lm_lower(const lm_planner *pl, lm_node *root, lm_step *step, char *err, size_t errlen);
/* The same for the root of a row group: the reductions marked row_root == root
 * become the kernel's row statistics. *misaligned (with a failure) when one of
 * them is read other than at the kernel's own row: the plan then gives them
 * kernels of their own. */
loom_status lm_lower_rows(const lm_planner *pl, lm_node *root, lm_step *step, bool *misaligned,
                          char *err, size_t errlen);

/* ------------------------------------------------------------ memory.c */

/* Calls read(ctx, pos, i) for each position step i reads (a deferred GEMM's
 * operands at its partner, a GEMM's B producer's at the GEMM). */
void lm_step_reads(const lm_plan *p, int i, void (*read)(void *ctx, int pos, int step), void *ctx);
/* Each step's free_after list; false when out of memory. */
bool lm_plan_frees(lm_plan *p);

/* ------------------------------------------------------------ overlap.c */

/* Reorders the steps of a plan with collectives: each as soon as its sources
 * are made, the steps reading its result as late as they can go, so that it
 * runs while the steps between compute. False when out of memory. Before
 * the GEMM pairing (step indices are not yet stored anywhere). */
bool lm_plan_overlap_collectives(lm_plan *p);
/* Numbers the collectives and sets each one's wait_before. */
void lm_plan_collective_waits(lm_plan *p);

#endif
