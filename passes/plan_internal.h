/* The planning passes' shared declarations (passes/plan.c runs them in order).
 * One section per file. Not for the rest of loom: passes/passes.h is the
 * interface. */
#ifndef LOOM_PASSES_PLAN_INTERNAL_H
#define LOOM_PASSES_PLAN_INTERNAL_H

#include "passes/passes.h"

/* Nodes collected by a walk (growing array; oom when it could not grow). */
typedef struct node_list {
  lm_node **items;
  int len, cap;
  bool oom;
} node_list;

/* ------------------------------------------------------------ fusion.c */

/* Marks what gets memory (node->materialize), counts each node's readers
 * (uses) and applies the cost rule; without fuse every computed value. */
void lm_mark(const lm_graph *g, bool fuse);
/* The nodes root computes inline (root included), each once. */
void lm_collect_inline(lm_node *n, const lm_node *root, uint64_t epoch, node_list *l);
/* Whether every use of r comes from inside root's kernel: 1, 0, or -1 when
 * out of memory. */
int lm_used_only_inside(lm_node *r, lm_node *root);
/* Reductions become their elementwise consumer's epilogue; false when out of memory. */
bool lm_fuse_epilogues(const lm_graph *g);

/* ------------------------------------------------------------ rows.c */

/* Rows too few and long for one thread each are left to split reductions:
 * at most SPLIT_MAX_OUTER outputs of SPLIT_MIN_REDUCED or more values. */
#define SPLIT_MAX_OUTER 16
#define SPLIT_MIN_REDUCED 65536

/* Groups row kernels' roots with their statistics; false when out of memory. */
bool lm_fuse_rows(const lm_graph *g);
/* When lowering found a statistic of e's group read off its row: they get
 * kernels again. */
void lm_unfuse_rows(const lm_graph *g, const lm_node *e);

/* ------------------------------------------------------------ split.c */

/* Planning temporaries (released after their step is lowered). */
typedef struct temps {
  lm_node *nodes[64];
  int n;
} temps;

/* Keeps n among t; NULL and *oom when n could not be made. */
lm_node *lm_temp(temps *t, lm_node *n, bool *oom);
/* partial = reduce(reshape(pad(src))) and final = reduce(partial) for r; final,
 * or NULL when r is not worth splitting (*oom when memory ran out). */
lm_node *lm_split_reduction(const lm_node *r, temps *t, bool *oom);

/* ------------------------------------------------------------ gemm_pairing.c */

/* A GEMM step for matmul n (its operands' layouts). */
void lm_plan_gemm(const lm_graph *graph, lm_node *n, lm_step *step);
/* GEMM epilogues; false when out of memory. */
bool lm_pair_gemm_epilogues(const lm_graph *g, lm_schedule *p);
/* GEMM prologues (CPU). */
void lm_pair_gemm_prologues(const lm_graph *g, lm_schedule *p);

/* ------------------------------------------------------------ memory.c */

/* Each step's free_after list; false when out of memory. */
bool lm_plan_frees(lm_schedule *p);

#endif
