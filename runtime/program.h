/* Compiled programs (loom_program), shared by the files that run, print,
 * save and export them. */
#ifndef LOOM_RUNTIME_PROGRAM_H
#define LOOM_RUNTIME_PROGRAM_H

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
  int *kernel_of;   /* [n] the step whose kernel computes (or inlines) it, or -1 */
  void **keys;      /* [n] an LM_RAND position's key words, else NULL */
  lm_schedule *plan; /* steps (compiled), memory plan */
  int nin, nout;
  int *in_pos;        /* [nin] graph position of each input, or -1 when unused */
  lm_node **in_nodes; /* [nin] the placeholders (one reference each) */
  int *out_pos;       /* [nout] */
  char **out_names;   /* [nout] "out0", ... */
  loom_device device; /* where it runs: every node, input and output is there */
};

/* Compiles the graph between placeholders and targets (borrowed) into a new
 * program. The op name prefixes error messages. */
loom_status lm_program_build(const char *op, lm_node *const *outs, int nout, lm_node *const *ins,
                             int nin, loom_program **out);

/* "out<i>" into buf. */
const char *lm_program_output_label(int i, char buf[16]);

/* ------------------------------------------------------------ text form */
/* docs/PROGRAM_FORMAT.md describes it. The first line is the magic word and
 * the version; this loom writes and reads version LM_PROGRAM_VERSION. */
#define LM_PROGRAM_MAGIC "loom-program"
#define LM_PROGRAM_VERSION 1
/* Limits a reader enforces before allocating for them. */
#define LM_PROGRAM_MAX_TEXT ((size_t)1 << 28) /* bytes of a program file */
#define LM_PROGRAM_MAX_ITEMS (1 << 20)        /* positions, inputs, outputs (each) */
#define LM_PROGRAM_MAX_NAME 64                /* characters of an input or weight name */

/* Parses a program's text form and compiles it. `weights` holds the tensors
 * its weight lines name (realized, same dtypes and shapes, no others); NULL
 * when it has none. A malformed text, or one whose nodes fail lm_node_verify,
 * is refused with LOOM_ERR_CORRUPT and a message "<text>:<line>: ..." saying
 * what was expected. Nothing is kept on failure. (A fuzzer can drive this.) */
loom_status lm_program_parse(const char *text, size_t len, const loom_params *weights,
                             loom_program **out);

/* v exactly, in C99 hex-float form, whatever the locale: "0x1.8p+1", "-0x0p+0",
 * "0x0.0000000000001p-1022", "inf", "-inf", "nan", "-nan" (a NaN's payload is
 * not kept). The reader accepts exactly this form. */
#define LM_HEX_DOUBLE_LEN 32
const char *lm_hex_double(double v, char buf[LM_HEX_DOUBLE_LEN]);

#endif
