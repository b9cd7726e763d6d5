/* matmul with torch.matmul's rules. Floats are GEMMs (LM_MATMUL; BF16 / F16
 * operands give F32 sums, rounded once); integers become a generated
 * reduction kernel (broadcast multiply, sum over K). */
#include "frontend/frontend.h"

static lm_node *int_matmul(lm_node *a, lm_node *b, int nb) {
  /* a [B.., M, K] -> [B.., M, 1, K]; b [B.., K, N] -> [B.., 1, N, K] */
  int perm[LOOM_MAX_DIMS];
  for (int d = 0; d < nb + 2; d++) perm[d] = d;
  perm[nb] = nb + 1, perm[nb + 1] = nb;
  int64_t M = a->shape.dim[nb], K = a->shape.dim[nb + 1], N = b->shape.dim[nb + 1];
  loom_shape sa = a->shape, sb = a->shape, full = a->shape;
  sa.ndim = sb.ndim = full.ndim = nb + 3;
  sa.dim[nb] = M, sa.dim[nb + 1] = 1, sa.dim[nb + 2] = K;
  sb.dim[nb] = 1, sb.dim[nb + 1] = N, sb.dim[nb + 2] = K;
  full.dim[nb] = M, full.dim[nb + 1] = N, full.dim[nb + 2] = K;
  lm_node *ra = nb_reshape(a, sa);
  lm_node *bt = nb_permute(b, perm);
  lm_node *rb = nb_reshape(bt, sb);
  lm_node *ea = nb_expand(ra, full), *eb = nb_expand(rb, full);
  lm_node *prod = nb_binary(LM_MUL, ea, eb);
  lm_node *s = nb_reduce(LM_RSUM, prod, 1u << (nb + 2));
  lm_node *r = nb_squeeze_axes(s, 1u << (nb + 2));
  nb_drop(ra, bt, rb, ea);
  nb_drop(eb, prod, s, NULL);
  return r;
}

/* Whether a [batch.., M, K] @ b [1.., K, N] (a weight shared by every batch
 * index: a linear layer on [b, t, C]) is one GEMM of batch * M rows: a has
 * every batch dim, b none, and a is not a view that reorders or repeats
 * (its rows would then need copying out, where a batched GEMM reads them in
 * place). Its gradients are then one GEMM each too (the weight's over
 * K = batch * M). */
static bool folds_into_rows(const lm_node *a, const loom_shape *ba, const loom_shape *bb) {
  if (ba->ndim == 0) return false;
  for (int d = 0; d < bb->ndim; d++)
    if (bb->dim[d] != 1) return false;
  return !lm_op_is_view(a->op) || a->op == LM_RESHAPE;
}

/* reshape(reshape(a, [rows, K]) @ reshape(b, [K, N]), batch + [M, N]), dropping
 * N when b was 1-D. */
static loom_tensor *folded_matmul(lm_node *a, lm_node *b, int64_t M, int64_t K, int64_t N,
                                  const loom_shape *batch, int b_ndim, loom_dtype sums) {
  int64_t rows = M * lm_shape_numel(batch);
  lm_node *ra = nb_reshape(a, LOOM_SHAPE(rows, K)), *rb = nb_reshape(b, LOOM_SHAPE(K, N));
  lm_node *src[2] = {ra, rb};
  lm_node *r =
      ra && rb ? lm_node_new(LM_MATMUL, 2, src, LOOM_SHAPE(rows, N), sums, a->device) : NULL;
  loom_shape final = *batch;
  final.dim[final.ndim++] = M;
  if (b_ndim > 1) final.dim[final.ndim++] = N;
  lm_node *f = nb_reshape(r, final);
  nb_drop(ra, rb, r, NULL);
  return lm_result(f);
}

/* t as F32; a transposed view is widened before its transpose, so the cast
 * reads and writes rows (W^T of a BF16 weight: W widened in W's layout, which
 * the GEMM reads as B^T; cast after the transpose it read W column by column:
 * [3072, 768] 1.74 ms). */
static loom_tensor *widen(const loom_tensor *t) {
  if (!nb_is_transpose_last(t->node)) return loom_cast(t, LOOM_F32);
  lm_node *c = nb_cast(t->node->src[0], LOOM_F32), *r = nb_transpose_last(c);
  nb_drop(c, NULL, NULL, NULL);
  return lm_result(r);
}

static loom_tensor *matmul_sums(const loom_tensor *a, const loom_tensor *b, loom_dtype sums);

loom_tensor *loom_matmul(const loom_tensor *a, const loom_tensor *b) {
  const char *name = "loom_matmul";
  loom_tensor *err;
  if ((err = lm_check(name, a)) || (err = lm_check(name, b))) return err;
  if ((err = lm_check_same_device(name, a->node, b->node))) return err;
  const loom_shape *A = &a->node->shape, *B = &b->node->shape;
  if (a->node->dtype != b->node->dtype)
    return lm_pair_error(LOOM_ERR_DTYPE, name, A, "@", B, "dtypes %s and %s differ (cast one)",
                         loom_dtype_name(a->node->dtype), loom_dtype_name(b->node->dtype));
  if (a->node->dtype == LOOM_BOOL)
    return lm_error(LOOM_ERR_DTYPE, "%s: bool tensors cannot be multiplied", name);
  loom_dtype dt = a->node->dtype;
  if (lm_dtype_is_half(dt)) { /* F32 sums, rounded once, as torch's */
    int token = lm_composite_begin();
    /* the CPU's GEMM widens as it packs (and BF16 runs on AMX tiles); CUDA's
     * tiled GEMM reads F32 and F64 only */
    loom_tensor *p = a->node->device.type == LOOM_DEVICE_CPU ? matmul_sums(a, b, LOOM_F32)
                                                             : loom_matmul(widen(a), widen(b));
    return lm_composite_end(token, loom_cast(p, dt));
  }
  return matmul_sums(a, b, dt);
}

/* a @ b (checked alike) with sums of dtype `sums`. */
static loom_tensor *matmul_sums(const loom_tensor *a, const loom_tensor *b, loom_dtype sums) {
  const char *name = "loom_matmul";
  loom_tensor *err;
  const loom_shape *A = &a->node->shape, *B = &b->node->shape;
  if (A->ndim == 0 || B->ndim == 0)
    return lm_pair_error(LOOM_ERR_SHAPE, name, A, "@", B, "both arguments need at least 1 dim");
  /* 1-D operands become matrices; their dim is removed from the result. */
  loom_shape a2 = *A, b2 = *B;
  if (A->ndim == 1) a2 = LOOM_SHAPE(1, A->dim[0]);
  if (B->ndim == 1) b2 = LOOM_SHAPE(B->dim[0], 1);
  int64_t K = a2.dim[a2.ndim - 1];
  if (K != b2.dim[b2.ndim - 2])
    return lm_pair_error(LOOM_ERR_SHAPE, name, A, "@", B, "inner dimensions %lld and %lld differ",
                         (long long)K, (long long)b2.dim[b2.ndim - 2]);
  loom_shape ba = {a2.ndim - 2, {0}}, bb = {b2.ndim - 2, {0}}, batch;
  for (int d = 0; d < ba.ndim; d++) ba.dim[d] = a2.dim[d];
  for (int d = 0; d < bb.ndim; d++) bb.dim[d] = b2.dim[d];
  if (!lm_broadcast_shape(&ba, &bb, &batch))
    return lm_pair_error(LOOM_ERR_SHAPE, name, A, "@", B, "batch dimensions cannot be broadcast");
  bool integer = !loom_dtype_is_float(a->node->dtype);
  int nb = batch.ndim;
  if (nb + 2 + integer > LOOM_MAX_DIMS)
    return lm_pair_error(LOOM_ERR_SHAPE, name, A, "@", B, "too many batch dims");
  int64_t M = a2.dim[a2.ndim - 2], N = b2.dim[b2.ndim - 1];
  loom_shape fa = batch, fb = batch, out = batch;
  fa.ndim = fb.ndim = out.ndim = nb + 2;
  fa.dim[nb] = M, fa.dim[nb + 1] = K;
  fb.dim[nb] = K, fb.dim[nb + 1] = N;
  out.dim[nb] = M, out.dim[nb + 1] = N;
  if ((err = lm_check_shape(name, &out, a->node->dtype))) return err;
  if (!integer && folds_into_rows(a->node, &ba, &bb))
    return folded_matmul(a->node, b->node, M, K, N, &batch, B->ndim, sums);
  lm_node *ra = nb_reshape(a->node, a2), *rb = nb_reshape(b->node, b2);
  lm_node *ea = nb_broadcast(ra, fa), *eb = nb_broadcast(rb, fb);
  lm_node *r = NULL;
  if (integer) {
    r = ea && eb ? int_matmul(ea, eb, nb) : NULL;
  } else if (ea && eb) {
    lm_node *src[2] = {ea, eb};
    r = lm_node_new(LM_MATMUL, 2, src, out, sums, a->node->device);
  }
  /* drop the dims 1-D operands added */
  loom_shape final = batch;
  if (A->ndim > 1) final.dim[final.ndim++] = M;
  if (B->ndim > 1) final.dim[final.ndim++] = N;
  lm_node *f = nb_reshape(r, final);
  nb_drop(ra, rb, ea, eb);
  nb_drop(r, NULL, NULL, NULL);
  return lm_result(f);
}
