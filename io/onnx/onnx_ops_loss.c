/* The losses ONNX has as ops: NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss, with class weights, an ignored index and the
 * reductions none, sum and mean (the mean weighted by the weights of the
 * targets counted). */
#include <string.h>

#include "io/onnx/onnx.h"

/* -input[n, target[n, ...], ...] weighted; its output and log_prob (SCE). */
static loom_status nll(onnx_node *n, loom_tensor *logp, loom_tensor *target, loom_tensor *weight) {
  char buf[16];
  const char *reduction = onnx_attr_string(n, "reduction", "mean", buf, sizeof buf);
  if (strcmp(reduction, "mean") && strcmp(reduction, "sum") && strcmp(reduction, "none"))
    return onnx_refuse(n, LOOM_ERR_VALUE, "reduction '%s'", reduction);
  const Onnx__AttributeProto *ignore_attr = onnx_attr(n, "ignore_index");
  int64_t ignore = onnx_attr_int(n, "ignore_index", 0);
  loom_tensor *t = loom_cast(target, LOOM_I64);
  loom_tensor *counted =
      ignore_attr ? loom_ne_s(t, (double)ignore) : loom_ones_like(loom_cast(t, LOOM_BOOL));
  loom_tensor *safe = ignore_attr ? loom_where_s(counted, t, 0) : loom_retain(t);
  loom_tensor *picked = loom_squeeze(loom_gather(logp, 1, loom_unsqueeze(safe, 1)), 1);
  loom_dtype dt = loom_dtype_of(logp);
  loom_tensor *w =
      weight ? loom_reshape(loom_index_select(weight, 0, loom_reshape(safe, LOOM_SHAPE(-1))),
                            loom_shape_of(safe))
             : loom_ones_like(picked);
  w = loom_mul(w, loom_cast(counted, dt));
  loom_tensor *loss = loom_neg(loom_mul(picked, w));
  if (strcmp(reduction, "sum") == 0)
    loss = loom_sum_all(loss);
  else if (strcmp(reduction, "mean") == 0)
    loss = loom_div(loom_sum_all(loss), loom_sum_all(w));
  onnx_out(n, 0, loss);
  return LOOM_OK;
}

static loom_status op_nll_loss(onnx_node *n) {
  return nll(n, onnx_in(n, 0), onnx_in(n, 1), onnx_in(n, 2));
}

static loom_status op_softmax_cross_entropy(onnx_node *n) {
  loom_tensor *logp = loom_log_softmax(onnx_in(n, 0), 1);
  loom_status st = nll(n, logp, onnx_in(n, 1), onnx_in(n, 2));
  if (!st) onnx_out(n, 1, loom_retain(logp));
  return st;
}

const onnx_op onnx_ops_loss[] = {
    ONNX_OP(NegativeLogLikelihoodLoss, op_nll_loss),
    ONNX_OP(SoftmaxCrossEntropyLoss, op_softmax_cross_entropy),
};
const int onnx_ops_loss_count = sizeof onnx_ops_loss / sizeof onnx_ops_loss[0];
