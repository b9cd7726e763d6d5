/* The graph ops' table (ir/ir.h, lm_op_info): one row per op. */
#include <string.h>

#include "ir/ir.h"

#define LEAF(name, arg)                                                                            \
  { name, LM_OPC_LEAF, 0, arg, LM_RES_SOURCE, false, false, 0 }
/* elementwise: arity, result, float only, differentiable, cost */
#define EW(name, n, res, fl, diff, cost)                                                           \
  { name, LM_OPC_ELEMENTWISE, n, LM_ARG_NONE, res, fl, diff, cost }
#define REDUCE(name, res, diff)                                                                    \
  { name, LM_OPC_REDUCE, 1, LM_ARG_AXES, res, false, diff, 0 }
#define VIEW(name, n, arg)                                                                         \
  { name, LM_OPC_VIEW, n, arg, LM_RES_SOURCE, false, true, 0 }

const lm_op_info lm_op_table[LM_NUM_OPS] = {
    [LM_BUFFER] = LEAF("buffer", LM_ARG_NONE),
    [LM_CONST] = LEAF("const", LM_ARG_VALUE),
    [LM_IOTA] = LEAF("iota", LM_ARG_IOTA),
    /* a Philox draw costs about 8 arithmetic instructions a value */
    [LM_RAND] = {"rand", LM_OPC_LEAF, 0, LM_ARG_RAND, LM_RES_SOURCE, false, false, 8},
    [LM_INPUT] = LEAF("input", LM_ARG_NONE),
    /* transcendental functions cost about 4, square roots and divisions 2 */
    [LM_NEG] = EW("neg", 1, LM_RES_SOURCE, false, true, 1),
    [LM_ABS] = EW("abs", 1, LM_RES_SOURCE, false, true, 1),
    [LM_EXP] = EW("exp", 1, LM_RES_SOURCE, true, true, 4),
    [LM_LOG] = EW("log", 1, LM_RES_SOURCE, true, true, 4),
    [LM_SQRT] = EW("sqrt", 1, LM_RES_SOURCE, true, true, 2),
    [LM_RSQRT] = EW("rsqrt", 1, LM_RES_SOURCE, true, true, 2),
    [LM_SIN] = EW("sin", 1, LM_RES_SOURCE, true, true, 4),
    [LM_COS] = EW("cos", 1, LM_RES_SOURCE, true, true, 4),
    [LM_TANH] = EW("tanh", 1, LM_RES_SOURCE, true, true, 4),
    [LM_SIGMOID] = EW("sigmoid", 1, LM_RES_SOURCE, true, true, 4),
    [LM_RELU] = EW("relu", 1, LM_RES_SOURCE, false, true, 1),
    [LM_GELU] = EW("gelu", 1, LM_RES_SOURCE, true, true, 4),
    [LM_SILU] = EW("silu", 1, LM_RES_SOURCE, true, true, 4),
    [LM_SQUARE] = EW("square", 1, LM_RES_SOURCE, false, true, 1),
    [LM_RECIPROCAL] = EW("reciprocal", 1, LM_RES_SOURCE, true, true, 2),
    [LM_NOT] = EW("not", 1, LM_RES_BOOL, false, false, 1),
    [LM_CAST] = EW("cast", 1, LM_RES_SOURCE, false, true, 1),
    [LM_ERF] = EW("erf", 1, LM_RES_SOURCE, true, true, 4),
    [LM_LOG1P] = EW("log1p", 1, LM_RES_SOURCE, true, true, 6),
    [LM_EXPM1] = EW("expm1", 1, LM_RES_SOURCE, true, true, 6),
    /* not differentiable: torch's gradient of a rounding is zero */
    [LM_FLOOR] = EW("floor", 1, LM_RES_SOURCE, true, false, 1),
    [LM_CEIL] = EW("ceil", 1, LM_RES_SOURCE, true, false, 1),
    [LM_ROUND] = EW("round", 1, LM_RES_SOURCE, true, false, 4),
    [LM_CLAMP] = {"clamp", LM_OPC_ELEMENTWISE, 1, LM_ARG_CLAMP, LM_RES_SOURCE, false, true, 2},
    [LM_ADD] = EW("add", 2, LM_RES_SOURCE, false, true, 1),
    [LM_SUB] = EW("sub", 2, LM_RES_SOURCE, false, true, 1),
    [LM_MUL] = EW("mul", 2, LM_RES_SOURCE, false, true, 1),
    [LM_DIV] = EW("div", 2, LM_RES_SOURCE, true, true, 2),
    [LM_POW] = EW("pow", 2, LM_RES_SOURCE, false, true, 4), /* integers: exact, wrapping */
    [LM_MAX] = EW("maximum", 2, LM_RES_SOURCE, false, true, 1),
    [LM_MIN] = EW("minimum", 2, LM_RES_SOURCE, false, true, 1),
    [LM_LT] = EW("lt", 2, LM_RES_BOOL, false, false, 1),
    [LM_LE] = EW("le", 2, LM_RES_BOOL, false, false, 1),
    [LM_EQ] = EW("eq", 2, LM_RES_BOOL, false, false, 1),
    [LM_NE] = EW("ne", 2, LM_RES_BOOL, false, false, 1),
    [LM_AND] = EW("and", 2, LM_RES_BOOL, false, false, 1),
    [LM_OR] = EW("or", 2, LM_RES_BOOL, false, false, 1),
    [LM_WHERE] = EW("where", 3, LM_RES_SOURCE, false, true, 1),
    [LM_RSUM] = REDUCE("sum", LM_RES_SOURCE, true),
    [LM_RMAX] = REDUCE("max", LM_RES_SOURCE, true),
    [LM_RMIN] = REDUCE("min", LM_RES_SOURCE, true),
    [LM_RLSE] = REDUCE("logsumexp", LM_RES_SOURCE, true),
    [LM_ARGMAX] = REDUCE("argmax", LM_RES_I64, false),
    [LM_ARGMIN] = REDUCE("argmin", LM_RES_I64, false),
    [LM_RESHAPE] = VIEW("reshape", 1, LM_ARG_NONE),
    [LM_PERMUTE] = VIEW("permute", 1, LM_ARG_PERM),
    [LM_EXPAND] = VIEW("expand", 1, LM_ARG_NONE),
    [LM_SLICE] = VIEW("slice", 1, LM_ARG_SLICE),
    [LM_PAD] = VIEW("pad", 1, LM_ARG_PAD),
    [LM_CAT] = VIEW("cat", -1, LM_ARG_AXIS),
    [LM_WINDOW] = VIEW("window", 1, LM_ARG_WINDOW),
    [LM_MATMUL] = {"matmul", LM_OPC_LIBRARY, 2, LM_ARG_NONE, LM_RES_SOURCE, false, true, 0},
    /* recorded only where no gradient flows (frontend/attention.c) */
    [LM_ATTENTION] = {"attention", LM_OPC_LIBRARY, -1, LM_ARG_ATTN, LM_RES_SOURCE, true, false, 0},
    /* a clamped index and a load */
    [LM_GATHER] = {"gather", LM_OPC_GATHER, 2, LM_ARG_NONE, LM_RES_SOURCE, false, true, 2},
    [LM_COPY] = {"copy", LM_OPC_COPY, 1, LM_ARG_NONE, LM_RES_SOURCE, false, true, 0},
    /* several sources: their elements joined, one collective (DDP's gradient buckets) */
    [LM_ALL_REDUCE] = {"all_reduce", LM_OPC_COLLECTIVE, -1, LM_ARG_COLL, LM_RES_SOURCE, false,
                       false, 0},
    [LM_BROADCAST] = {"broadcast", LM_OPC_COLLECTIVE, 1, LM_ARG_COLL, LM_RES_SOURCE, false, false,
                      0},
    [LM_ALL_GATHER] = {"all_gather", LM_OPC_COLLECTIVE, 1, LM_ARG_COLL, LM_RES_SOURCE, false, false,
                       0},
    [LM_ATTENTION_GRAD] = {"attention_grad", LM_OPC_LIBRARY, -1, LM_ARG_ATTN, LM_RES_SOURCE, true,
                           false, 0},
    /* indices: the values' gradient flows through a gather by them (loom_sort) */
    [LM_SORT] = {"sort", LM_OPC_SORT, 1, LM_ARG_SORT, LM_RES_I64, false, false, 0},
    /* the gradient: the scan the other way (frontend/grad_rules.c) */
    [LM_SCAN] = {"scan", LM_OPC_SCAN, 1, LM_ARG_SCAN, LM_RES_SOURCE, false, true, 0},
    /* its source's values, passed on unchanged: no gradient (integers, or a
       distribution that multinomial draws from) */
    [LM_CHECK] = {"check", LM_OPC_CHECK, -1, LM_ARG_CHECK, LM_RES_SOURCE, false, false, 0},
    /* the node's dtype, not its source's, as CAST; no gradient (ONNX's BitCast) */
    [LM_BITCAST] = EW("bitcast", 1, LM_RES_SOURCE, false, false, 1),
};

/* The position of the name s[0..len) among names[0..n), or -1. */
static int named(const char *const *names, int n, const char *s, size_t len) {
  for (int i = 0; i < n; i++)
    if (strlen(names[i]) == len && !memcmp(names[i], s, len)) return i;
  return -1;
}

static const char *const reduce_names[] = {"mean", "sum", "none", "max",
                                           "min"}; /* loom_reduction */

const char *lm_reduce_op_name(int reduce) {
  return reduce >= 0 && reduce < (int)(sizeof reduce_names / sizeof *reduce_names)
             ? reduce_names[reduce]
             : NULL;
}

int lm_reduce_op_named(const char *name, size_t len) {
  return named(reduce_names, (int)(sizeof reduce_names / sizeof *reduce_names), name, len);
}

const lm_op_info *lm_op_info_of(lm_op op) {
  return (unsigned)op < (unsigned)LM_NUM_OPS ? &lm_op_table[op] : NULL;
}

const char *lm_op_name(lm_op op) {
  const lm_op_info *i = lm_op_info_of(op);
  return i ? i->name : "?";
}

static bool is_class(lm_op op, lm_op_class cls) {
  const lm_op_info *i = lm_op_info_of(op);
  return i && i->cls == cls;
}

bool lm_op_is_elementwise(lm_op op) { return is_class(op, LM_OPC_ELEMENTWISE); }
bool lm_op_is_view(lm_op op) { return is_class(op, LM_OPC_VIEW); }
bool lm_op_is_reduce(lm_op op) { return is_class(op, LM_OPC_REDUCE); }
bool lm_op_is_collective(lm_op op) { return is_class(op, LM_OPC_COLLECTIVE); }
bool lm_op_is_attention(lm_op op) { return op == LM_ATTENTION || op == LM_ATTENTION_GRAD; }
bool lm_op_is_sort(lm_op op) { return is_class(op, LM_OPC_SORT); }
bool lm_op_is_scan(lm_op op) { return is_class(op, LM_OPC_SCAN); }
bool lm_op_is_check(lm_op op) { return is_class(op, LM_OPC_CHECK); }

static const char *const check_rule_names[LM_CHECK_RULES] = {"index", "start", "weights"};

const char *lm_check_rule_name(int rule) {
  return rule >= 0 && rule < LM_CHECK_RULES ? check_rule_names[rule] : NULL;
}

int lm_check_rule_named(const char *s, size_t len) {
  return named(check_rule_names, LM_CHECK_RULES, s, len);
}

int lm_check_rule_sources(int rule) {
  return rule == LM_CHECK_INDEX ? 2 : rule == LM_CHECK_START ? 3 : 1;
}

static const char *const mask_names[] = {"none", "bool", "add"};

const char *lm_attention_mask_name(int mask) {
  return mask >= 0 && mask < 3 ? mask_names[mask] : "?";
}

int lm_attention_mask_named(const char *s, size_t len) { return named(mask_names, 3, s, len); }
