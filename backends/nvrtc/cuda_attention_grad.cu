/*
 * The backward of the fused attention kernel (cuda_attention.cu) on CUDA
 * (LM_ATTENTION_GRAD), FlashAttention-2's recomputation in two
 * launches of one kernel, a warp per row, 8 rows a block (blocks stride over
 * the batch indices' ceil(T / 8) items), and rows past Tq (or Tk) of the
 * [.., 3, T, W] output written as zeros, as are the columns past D (or Dv):
 *  - phase 0, a query row i: its log-sum-exp over its keys (the running max
 *    and sum, a lane per key) and delta = g_i . o_i, kept in `stats` for
 *    phase 1; then per chunk of 32 keys p = e^(s - lse), dp = g_i . v_j,
 *    ds = p (dp - delta), and dq_i += ds k_j, each lane holding the dims
 *    lane + 32 c (c < 8: D at most 256);
 *  - phase 1, a key row j: over the queries that see it (i >= j when causal),
 *    a lane per query: p and ds again from the stats, dv_j += p g_i and dk_j
 *    += ds q_i.
 * Both phases compute a score the same way (lm_attn_score, one accumulator in
 * dim order), so phase 1's p is phase 0's. The scale multiplies dq and dk at
 * the end, as on the CPU. Only warps synchronize (no block barrier).
 */
#ifndef LM_CUDA_PRELUDE
#include "cuda_prelude.cuh"
#endif

/* a . b over d dims, one accumulator in dim order */
__device__ __forceinline__ float lm_attn_dot(const float *a, const float *b, long long d) {
  float dot = 0;
  for (long long e = 0; e < d; e++) dot = fmaf(a[e], b[e], dot);
  return dot;
}

/* q . k scaled, masked as the forward does (how 1: a bool byte, 0 hides;
   2: a float added) */
__device__ __forceinline__ float lm_attn_score(const float *a, const float *b, long long d,
                                               float scale, const void *mask, long long how,
                                               long long at) {
  float s = lm_attn_dot(a, b, d) * scale;
  if (how == 1) s = ((const unsigned char *)mask)[at] ? s : -LM_INF_F;
  if (how == 2) s += ((const float *)mask)[at];
  return s;
}

extern "C" __global__ void __launch_bounds__(256) lm_attention_grad_f32(
    long long phase, float *out, const float *q, const float *k, const float *v, const void *mask,
    const float *o, const float *g, float *stats, long long scale_bits, long long nbatch,
    long long tq, long long tk, long long d, long long dv, long long causal, long long how,
    long long mc, long long items, long long t, long long w, long long o0, long long o1,
    long long o2, long long o3, long long o4, long long o5, long long r0, long long r1,
    long long r2, long long r3, long long r4, long long r5, long long n0, long long n1,
    long long n2, long long n3, long long n4, long long n5, long long q0, long long q1,
    long long q2, long long q3, long long q4, long long q5, long long k0, long long k1,
    long long k2, long long k3, long long k4, long long k5, long long v0, long long v1,
    long long v2, long long v3, long long v4, long long v5, long long m0, long long m1,
    long long m2, long long m3, long long m4, long long m5, long long a0, long long a1,
    long long a2, long long a3, long long a4, long long a5, long long b0, long long b1,
    long long b2, long long b3, long long b4, long long b5) {
  /* phase 0: q_i and g_i, and ds of the chunk; phase 1: k_j and v_j, p and ds */
  __shared__ float xs[8][256], ys[8][256], ps[8][32], dss[8][32];
  const long long sizes[6] = {n0, n1, n2, n3, n4, n5};
  const long long strides[6][6] = {{q0, q1, q2, q3, q4, q5}, {k0, k1, k2, k3, k4, k5},
                                   {v0, v1, v2, v3, v4, v5}, {m0, m1, m2, m3, m4, m5},
                                   {a0, a1, a2, a3, a4, a5}, {b0, b1, b2, b3, b4, b5}};
  const long long rs[6] = {r0, r1, r2, r3, r4, r5};
  const float scale = (float)__longlong_as_double(scale_bits);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long blocks = (t + 7) / 8, part = t * w;
  for (long long item = blockIdx.x; item < items; item += gridDim.x) {
    const long long b = item / blocks, x = item % blocks * 8 + warp;
    if (x >= t) continue;
    float *first = out + b * 3 * part + (phase ? part : 0) + x * w;
    float *second = first + part; /* phase 1: dv's row */
    if (x >= (phase ? tk : tq)) {
      for (long long e = lane; e < w; e += 32) {
        first[e] = 0;
        if (phase) second[e] = 0;
      }
      continue;
    }
    long long off[6] = {o0, o1, o2, o3, o4, o5};
    for (long long at = b, y = nbatch - 1; y >= 0; y--) {
      const long long at_y = at % sizes[y];
      at /= sizes[y];
      for (int s = 0; s < 6; s++) off[s] += at_y * strides[s][y];
    }
    float acc[8], acc2[8];
    for (int c = 0; c < 8; c++) acc[c] = 0, acc2[c] = 0;
    if (phase == 0) {
      const long long i = x;
      const float *qi = q + off[0] + i * rs[0], *gi = g + off[5] + i * rs[5];
      const float *oi = o + off[4] + i * rs[4];
      for (long long e = lane; e < d; e += 32) xs[warp][e] = qi[e];
      float sum_go = 0;
      for (long long e = lane; e < dv; e += 32) {
        ys[warp][e] = gi[e];
        sum_go = fmaf(gi[e], oi[e], sum_go);
      }
      __syncwarp();
      const float delta = lm_warp_sum(sum_go);
      const long long keys = causal && i + 1 < tk ? i + 1 : tk;
      float max = -LM_INF_F, sum = 0;
      for (long long j0 = 0; j0 < keys; j0 += 32) {
        const long long j = j0 + lane;
        const float s = j < keys ? lm_attn_score(xs[warp], k + off[1] + j * rs[1], d, scale, mask,
                                                 how, off[3] + i * rs[3] + j * mc)
                                 : -LM_INF_F;
        const float top = lm_warp_max(s);
        const float grown = top > max ? top : max;
        const float shift = grown == -LM_INF_F ? 0.0f : grown;
        sum = sum * expf(max - shift) + lm_warp_sum(expf(s - shift));
        max = grown;
      }
      /* a row hiding every key: -inf, and its probabilities NaN, as softmax's */
      const float lse = (max == -LM_INF_F ? 0.0f : max) + logf(sum);
      for (long long j0 = 0; j0 < keys; j0 += 32) {
        const long long j = j0 + lane, n = keys - j0 < 32 ? keys - j0 : 32;
        float ds = 0;
        if (j < keys) {
          const float s = lm_attn_score(xs[warp], k + off[1] + j * rs[1], d, scale, mask, how,
                                        off[3] + i * rs[3] + j * mc);
          const float dp = lm_attn_dot(ys[warp], v + off[2] + j * rs[2], dv);
          ds = expf(s - lse) * (dp - delta);
        }
        dss[warp][lane] = ds;
        __syncwarp();
        for (long long u = 0; u < n; u++) {
          const float *kj = k + off[1] + (j0 + u) * rs[1], f = dss[warp][u];
          for (int c = 0; c < 8; c++)
            if (lane + 32 * c < d) acc[c] = fmaf(f, kj[lane + 32 * c], acc[c]);
        }
        __syncwarp();
      }
      if (lane == 0) stats[2 * (b * tq + i)] = lse, stats[2 * (b * tq + i) + 1] = delta;
      for (int c = 0; c < 8; c++)
        if (lane + 32 * c < w) first[lane + 32 * c] = lane + 32 * c < d ? acc[c] * scale : 0;
    } else {
      const long long j = x;
      const float *kj = k + off[1] + j * rs[1], *vj = v + off[2] + j * rs[2];
      for (long long e = lane; e < d; e += 32) xs[warp][e] = kj[e];
      for (long long e = lane; e < dv; e += 32) ys[warp][e] = vj[e];
      __syncwarp();
      for (long long i0 = causal ? j : 0; i0 < tq; i0 += 32) {
        const long long i = i0 + lane, n = tq - i0 < 32 ? tq - i0 : 32;
        float p = 0, ds = 0;
        if (i < tq) {
          const float s = lm_attn_score(q + off[0] + i * rs[0], xs[warp], d, scale, mask, how,
                                        off[3] + i * rs[3] + j * mc);
          const float dp = lm_attn_dot(g + off[5] + i * rs[5], ys[warp], dv);
          p = expf(s - stats[2 * (b * tq + i)]);
          ds = p * (dp - stats[2 * (b * tq + i) + 1]);
        }
        ps[warp][lane] = p, dss[warp][lane] = ds;
        __syncwarp();
        for (long long u = 0; u < n; u++) {
          const float *qi = q + off[0] + (i0 + u) * rs[0];
          const float *gi = g + off[5] + (i0 + u) * rs[5];
          for (int c = 0; c < 8; c++) {
            if (lane + 32 * c < d) acc[c] = fmaf(dss[warp][u], qi[lane + 32 * c], acc[c]);
            if (lane + 32 * c < dv) acc2[c] = fmaf(ps[warp][u], gi[lane + 32 * c], acc2[c]);
          }
        }
        __syncwarp();
      }
      for (int c = 0; c < 8; c++) {
        const long long e = lane + 32 * c;
        if (e >= w) continue;
        first[e] = e < d ? acc[c] * scale : 0;
        second[e] = e < dv ? acc2[c] : 0;
      }
    }
  }
}
