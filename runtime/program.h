/* Compiled programs (loom_program), shared by the files that run, print,
 * save and export them. */
#ifndef LOOM_RUNTIME_PROGRAM_H
#define LOOM_RUNTIME_PROGRAM_H

#include <pthread.h>

#include "ir/ir.h"
#include "passes/passes.h"

/* Which role a graph position plays. */
typedef enum lm_slot_kind {
  LM_SLOT_NODE,   /* computed by the program (or inlined into a kernel) */
  LM_SLOT_INPUT,  /* a placeholder: data from each run */
  LM_SLOT_WEIGHT, /* a realized tensor captured when compiled */
} lm_slot_kind;

struct loom_program {
  /* The canonical graph over the program's own nodes: cloned from the user's
   * graph, so nothing the user later realizes or frees changes it. Weights
   * are the user's computed nodes, shared (their data never changes). The
   * nodes' scratch fields are not used after compiling (a weight's may be
   * rewritten by other threads' walks): positions come from the tables. */
  int n;
  lm_node **nodes;    /* [n] one reference each */
  lm_slot_kind *kind; /* [n] */
  int *input_of;      /* [n] the input index of an LM_SLOT_INPUT position, else -1 */
  int *src_start;     /* [n + 1] node pos's sources are src_pos[src_start[pos]..] */
  int *src_pos;
  int *kernel_of; /* [n] the step whose kernel computes (or inlines) it, or -1 */
  void **keys;    /* [n] an LM_RAND position's key words, else NULL */
  lm_plan *plan;  /* steps (compiled), memory plan */
  int nin, nout;
  int *in_pos;        /* [nin] graph position of each input, or -1 when unused */
  lm_node **in_nodes; /* [nin] the placeholders (one reference each) */
  int *out_pos;       /* [nout] */
  char **out_names;   /* [nout] "out0", ... */
  loom_device device; /* where it runs: every node, input and output is there */
  /* Symbolic dims (loom_compile_symbolic; nsym 0 otherwise): the symbols,
   * their traced sizes, which input dims take them, every node dim's size as
   * an expression over them, and the plans made at other sizes. */
  bool lazy;     /* a lazy graph's family (lm_program_build_lazy): run by realizations,
                    which publish its outputs from their buffers, so its plans merge
                    kernels into more outputs (lm_plan_more_outputs) */
  bool symbolic; /* the fields below are set (bind_lock too) */
  int nsym;
  char **sym_names;     /* [nsym] */
  int64_t *sym_example; /* [nsym] */
  int *in_sym;          /* [nin * LOOM_MAX_DIMS] symbol of input i's dim d, or -1 */
  lm_sym_expr *dims;    /* [n * LOOM_MAX_DIMS] */
  lm_sym_count *counts; /* [ncounts] constants that count symbolic dims */
  int ncounts;
  struct lm_binding *bound;  /* most recently used first (LM_PROGRAM_PLANS*) */
  pthread_mutex_t bind_lock; /* guards `bound` and its entries' users, and template_state */
  /* The plan for every size (runtime/plan_template.c), made at the first run
   * at new sizes: NULL when the plans differ beyond numbers. */
  struct lm_plan_template *plan_template;
  enum { LM_TEMPLATE_UNTRIED, LM_TEMPLATE_MAKING, LM_TEMPLATE_DONE } template_state;
};

/* A program's graph at other sizes of its symbols: nodes with those shapes
 * (weights shared) in the program's positions, planned and compiled. */
#define LM_PROGRAM_PLANS 256            /* at most */
#define LM_PROGRAM_PLANS_KEPT 16        /* always, past the node budget */
#define LM_PROGRAM_PLAN_NODES (1 << 18) /* nodes the plans past those hold, at most */
typedef struct lm_binding {
  struct lm_binding *next;
  int64_t values[LM_SYM_MAX_SYMBOLS];
  lm_node **nodes; /* [n] one reference each; NULL for an instance of the plan template */
  lm_plan *plan;
  int users; /* runs using it now */
} lm_binding;

/* For a run of symbolic program p with inputs ins: checks them (sizes
 * consistent with the symbols, fixed dims, dtypes, devices) and gives the
 * plan to run, NULL meaning the program's own (the traced sizes). A binding
 * given must be handed back with lm_program_unbind. */
loom_status lm_program_bind(const loom_program *p, loom_tensor *const *ins, lm_binding **out);
void lm_program_unbind(const loom_program *p, lm_binding *b);
/* The same for values of the symbols already read and checked (other than
 * the traced ones). */
loom_status lm_program_bind_values(const loom_program *p, const int64_t *values, lm_binding **out);
/* The canonical hash (lm_graph.hash) of symbolic program p's graph at values,
 * its inputs leaves, without the slice flags in clear_from_end (NULL, or
 * LOOM_MAX_DIMS per position: those lm_program_build_lazy added): a lazy
 * graph with that hash is that graph. */
loom_status lm_program_graph_hash_at(const loom_program *p, const int64_t *values,
                                     const uint8_t *clear_from_end, lm_hash128 *out);
/* Symbolic program p's graph at the symbols' values, checked and planned but
 * not compiled (for an export's samples); free it with
 * lm_program_binding_free. The op name prefixes error messages. */
loom_status lm_program_plan_at(const char *op, const loom_program *p, const int64_t *values,
                               lm_binding **out);
void lm_program_binding_free(const loom_program *p, lm_binding *b);
/* Plan templates (runtime/plan_template.c): one plan for every size of a
 * symbolic program's symbols in a box around its traced sizes, its numbers
 * polynomials of the symbols. *out NULL (and LOOM_OK): the program has none
 * (its plans differ beyond numbers, it runs on CUDA, or has more than
 * LM_SYM_FIT_MAX_SYMBOLS symbols). */
typedef struct lm_plan_template lm_plan_template;
loom_status lm_plan_template_make(const loom_program *p, lm_plan_template **out);
void lm_plan_template_free(lm_plan_template *t);
/* The plan at values from template t (compiled; free it with
 * lm_plan_free), growing t's box when the plans at its new corners agree;
 * *out NULL (and LOOM_OK) when values stay outside it: plan them alone. */
loom_status lm_plan_template_instance(lm_plan_template *t, const loom_program *p,
                                      const int64_t *values, lm_plan **out);
/* Position pos's shape at the symbols' values. */
loom_shape lm_program_shape_at(const loom_program *p, int pos, const int64_t *values);
/* The symbols' values, "batch=7, seq=12", into buf. */
const char *lm_program_values_str(const loom_program *p, const int64_t *values, char *buf,
                                  size_t len);
void lm_program_free_symbols(loom_program *p);
/* Makes compiled program p take any size along dims (loom_compile_symbolic's
 * checks and inference; its placeholders' sizes are the example). On failure
 * p is left for the caller to free. */
loom_status lm_program_make_symbolic(const char *op, loom_program *p, const loom_symbolic_dim *dims,
                                     int ndims);
/* The same with dims that may also name graph positions (input
 * LM_SYM_DIM_AT(pos)): a size that enters a lazy graph through a node, a
 * slice of a fixed tensor, rather than an input (runtime/realize.c). Such a
 * program is run through lm_program_bind_values only, each size's graph
 * checked against the recorded one, so its numbers are not guessed at
 * (lm_sym_infer's numbers_checked). */
#define LM_SYM_DIM_AT(pos) (-1 - (pos))
#define LM_SYM_DIM_POS(input) (-1 - (input))
loom_status lm_program_make_symbolic_at(const char *op, loom_program *p,
                                        const loom_symbolic_dim *dims, int ndims);
/* Checks a run's inputs against the shapes it takes (want[i]), dtypes and
 * devices. */
loom_status lm_program_check_inputs(const loom_program *p, loom_tensor *const *ins,
                                    const loom_shape *want);

/* Compiles the graph between placeholders and targets (borrowed) into a new
 * program. The op name prefixes error messages. */
loom_status lm_program_build(const char *op, lm_node *const *outs, int nout, lm_node *const *ins,
                             int nin, loom_program **out);

/* Compiles lazy graph g into a symbolic program whose inputs are its
 * leaves, in position order (input i is the i-th leaf, named "leaf<pos>"),
 * and whose outputs are its targets: a lazy graph's family
 * (runtime/realize.c). from_end (NULL, or LOOM_MAX_DIMS per position) adds
 * slice bound flags (LM_SLICE_*_FROM_END) to the copy; dims name the
 * symbols at inputs or graph positions (LM_SYM_DIM_AT), and must be inferable
 * (lm_sym_infer) before anything is compiled. */
loom_status lm_program_build_lazy(const char *op, const lm_graph *g, const uint8_t *from_end,
                                  const loom_symbolic_dim *dims, int ndims, loom_program **out);

/* "out<i>" into buf. */
const char *lm_program_output_label(int i, char buf[16]);

#endif
