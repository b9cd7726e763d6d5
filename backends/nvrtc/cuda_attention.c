/*
 * The fused attention kernel of LM_STEP_ATTENTION on CUDA: out = softmax(q
 * k^T * scale + mask) v with the softmax computed online, as the CPU's
 * (runtime/attention_cpu.c), over the same operand layouts: q [.., Tq, D], k
 * [.., Tk, D], v [.., Tk, Dv] read through an offset, a row stride and batch
 * strides each (rows of unit stride), an optional mask [.., Tq, Tk] (bool
 * bytes: nonzero attends; or floats added) through strides, out contiguous.
 *
 * A block of LM_CUDA_BLOCK threads (8 warps) takes `rows` consecutive query
 * rows of one batch index (a work item, grid-stride over the items): 8 for
 * long queries, fewer down to 1 for decoding's short ones, so that 8 / rows
 * warps share each row and split its keys (warp w takes row w % rows and the
 * chunks of 32 keys numbered w / rows modulo 8 / rows). A warp copies its q
 * row to shared memory; keys go 32 at a time, one per lane: the warp stages
 * the chunk's keys 32 dims at a time in shared memory (each load one key's 32
 * consecutive floats, coalesced; rows padded to 33 floats, so that a lane
 * reading its own key's dims hits its own bank), and the lane's score is its
 * key's dot product with q;
 * the warp's max and sum come by shuffles; every lane then rescales the
 * output dims it owns (lane + 32 c, c < 8: Dv at most 256) and adds the
 * chunk's 32 terms, their weights read back from the warp's shared slots.
 * Warps synchronize only with themselves inside the loop (a row's causal
 * limit is its own); at the end the warps of a row merge their (max, sum,
 * dims) through shared memory (the dims where its keys were), rescaling each to the largest max,
 * and the first writes the row. A row seeing no key is NaN (0 / 0), as softmax over -inf gives.
 * Every parameter is 8 bytes and integral (the scale is a double's bits), as
 * runtime/cuda/cuda_exec.c passes them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/nvrtc/nvrtc_backend.h"

_Static_assert(LM_CUDA_BLOCK == 256, "the attention kernel runs 8 warps a block");

/* Both kernels' batch sizes, then the batch strides of q, k, v and the mask. */
#define BATCH_PARAMS                                                                               \
  "  long long n0, long long n1, long long n2, long long n3, long long n4, long long n5,\n"        \
  "  long long q0, long long q1, long long q2, long long q3, long long q4, long long q5,\n"        \
  "  long long k0, long long k1, long long k2, long long k3, long long k4, long long k5,\n"        \
  "  long long v0, long long v1, long long v2, long long v3, long long v4, long long v5,\n"        \
  "  long long m0, long long m1, long long m2, long long m3, long long m4, long long m5"

static const char attention_source[] =
    "extern \"C\" __global__ void __launch_bounds__(256)\n"
    "lm_attention_f32(float *out, const float *q, const float *k, const float *v,\n"
    "                 const void *mask, long long scale_bits, long long nbatch, long long tq,\n"
    "                 long long tk, long long d, long long dv, long long causal,\n"
    "                 long long how, long long mc, long long items, long long rows,\n"
    "                 long long o0, long long o1, long long o2, long long o3,\n"
    "                 long long r0, long long r1, long long r2, long long r3,\n" BATCH_PARAMS
    ") {\n"
    "  __shared__ float qs[8][256];\n"
    "  __shared__ float ps[8][32];\n"
    "  /* a warp's 32 keys, 32 dims at a time; after its loop, its output dims */\n"
    "  __shared__ float ks[8][32][33];\n"
    "  __shared__ float part_max[8], part_sum[8];\n"
    "  const long long sizes[6] = {n0, n1, n2, n3, n4, n5};\n"
    "  const long long strides[4][6] = {{q0, q1, q2, q3, q4, q5}, {k0, k1, k2, k3, k4, k5},\n"
    "                                   {v0, v1, v2, v3, v4, v5}, {m0, m1, m2, m3, m4, m5}};\n"
    "  const float scale = (float)__longlong_as_double(scale_bits);\n"
    "  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
    "  const int splits = 8 / (int)rows, split = warp / (int)rows;\n"
    "  const long long blocks = (tq + rows - 1) / rows;\n"
    "  for (long long item = blockIdx.x; item < items; item += gridDim.x) {\n"
    "    const long long b = item / blocks, i = item % blocks * rows + warp % rows;\n"
    "    const int real = i < tq;\n"
    "    const long long row = real ? i : tq - 1;\n"
    "    long long off[4] = {o0, o1, o2, o3};\n"
    "    for (long long at = b, x = nbatch - 1; x >= 0; x--) {\n"
    "      const long long at_x = at % sizes[x];\n"
    "      at /= sizes[x];\n"
    "      for (int s = 0; s < 4; s++) off[s] += at_x * strides[s][x];\n"
    "    }\n"
    "    for (long long e = lane; e < d; e += 32) qs[warp][e] = q[off[0] + row * r0 + e];\n"
    "    __syncwarp();\n"
    "    const long long keys = causal && row + 1 < tk ? row + 1 : tk;\n"
    "    float max = -LM_INF_F, sum = 0, acc[8];\n"
    "    for (int c = 0; c < 8; c++) acc[c] = 0;\n"
    "    for (long long j0 = 32 * split; j0 < keys; j0 += 32 * splits) {\n"
    "      const long long j = j0 + lane, n = keys - j0 < 32 ? keys - j0 : 32;\n"
    "      float dot0 = 0, dot1 = 0;\n"
    "      for (long long e0 = 0; e0 < d; e0 += 32) {\n"
    "        if (e0 + lane < d)\n"
    "          for (long long t = 0; t < n; t++) ks[warp][t][lane] = k[off[1] + (j0 + t) * r1 + e0 "
    "+ lane];\n"
    "        __syncwarp();\n"
    "        const int width = d - e0 < 32 ? (int)(d - e0) : 32;\n"
    "        int e = 0;\n"
    "        for (; e + 2 <= width; e += 2) {\n"
    "          dot0 = fmaf(qs[warp][e0 + e], ks[warp][lane][e], dot0);\n"
    "          dot1 = fmaf(qs[warp][e0 + e + 1], ks[warp][lane][e + 1], dot1);\n"
    "        }\n"
    "        if (e < width) dot0 = fmaf(qs[warp][e0 + e], ks[warp][lane][e], dot0);\n"
    "        __syncwarp();\n"
    "      }\n"
    "      float s = -LM_INF_F;\n"
    "      if (j < keys) {\n"
    "        s = (dot0 + dot1) * scale;\n"
    "        const long long at = off[3] + row * r3 + j * mc;\n"
    "        if (how == 1) s = ((const unsigned char *)mask)[at] ? s : -LM_INF_F;\n"
    "        if (how == 2) s += ((const float *)mask)[at];\n"
    "      }\n"
    "      float top = s;\n"
    "      for (int o = 16; o > 0; o /= 2) {\n"
    "        const float other = __shfl_xor_sync(LM_FULL_MASK, top, o);\n"
    "        top = other > top ? other : top;\n"
    "      }\n"
    "      const float grown = top > max ? top : max;\n"
    "      /* a row that has seen nothing yet shifts by 0: its terms are 0 */\n"
    "      const float shift = grown == -LM_INF_F ? 0.0f : grown;\n"
    "      const float p = expf(s - shift), rescale = expf(max - shift);\n"
    "      float total = p;\n"
    "      for (int o = 16; o > 0; o /= 2) total += __shfl_xor_sync(LM_FULL_MASK, total, o);\n"
    "      sum = sum * rescale + total;\n"
    "      max = grown;\n"
    "      ps[warp][lane] = p;\n"
    "      __syncwarp();\n"
    "      for (int c = 0; c < 8; c++) acc[c] *= rescale;\n"
    "      for (long long t = 0; t < n; t++) {\n"
    "        const float w = ps[warp][t];\n"
    "        const float *vj = v + off[2] + (j0 + t) * r2;\n"
    "        for (int c = 0; c < 8; c++)\n"
    "          if (lane + 32 * c < dv) acc[c] = fmaf(w, vj[lane + 32 * c], acc[c]);\n"
    "      }\n"
    "      __syncwarp();\n"
    "    }\n"
    "    if (lane == 0) part_max[warp] = max, part_sum[warp] = sum;\n"
    "    for (int c = 0; c < 8; c++)\n"
    "      if (lane + 32 * c < dv) (&ks[warp][0][0])[lane + 32 * c] = acc[c];\n"
    "    __syncthreads();\n"
    "    if (split == 0 && real) {\n"
    "      float top = -LM_INF_F, total = 0;\n"
    "      for (int w = warp; w < 8; w += (int)rows) top = part_max[w] > top ? part_max[w] : top;\n"
    "      const float shift = top == -LM_INF_F ? 0.0f : top;\n"
    "      float weight[8];\n"
    "      for (int w = warp, x = 0; w < 8; w += (int)rows, x++) {\n"
    "        weight[x] = expf(part_max[w] - shift);\n"
    "        total += part_sum[w] * weight[x];\n"
    "      }\n"
    "      for (int c = 0; c < 8; c++) {\n"
    "        if (lane + 32 * c >= dv) continue;\n"
    "        float value = 0;\n"
    "        for (int w = warp, x = 0; w < 8; w += (int)rows, x++)\n"
    "          value = fmaf((&ks[w][0][0])[lane + 32 * c], weight[x], value);\n"
    "        out[(b * tq + i) * dv + lane + 32 * c] = value / total;\n"
    "      }\n"
    "    }\n"
    "    __syncthreads();\n"
    "  }\n"
    "}\n";

loom_status lm_cuda_attention_source(char **source, char name[36], char *err, size_t errlen) {
  return lm_cuda_with_prelude(attention_source, "lm_attention_f32", source, name, err, errlen);
}

/*
 * Its backward (LM_ATTENTION_GRAD), FlashAttention-2's recomputation in two
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
static const char attention_grad_source[] =
    "/* a . b over d dims, one accumulator in dim order */\n"
    "__device__ __forceinline__ float lm_attn_dot(const float *a, const float *b, long long d) {\n"
    "  float dot = 0;\n"
    "  for (long long e = 0; e < d; e++) dot = fmaf(a[e], b[e], dot);\n"
    "  return dot;\n"
    "}\n"
    "\n"
    "/* q . k scaled, masked as the forward does (how 1: a bool byte, 0 hides;\n"
    "   2: a float added) */\n"
    "__device__ __forceinline__ float lm_attn_score(const float *a, const float *b, long long d,\n"
    "                                               float scale, const void *mask, long long how,\n"
    "                                               long long at) {\n"
    "  float s = lm_attn_dot(a, b, d) * scale;\n"
    "  if (how == 1) s = ((const unsigned char *)mask)[at] ? s : -LM_INF_F;\n"
    "  if (how == 2) s += ((const float *)mask)[at];\n"
    "  return s;\n"
    "}\n"
    "\n"
    "__device__ __forceinline__ float lm_warp_sum(float x) {\n"
    "  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(LM_FULL_MASK, x, o);\n"
    "  return x;\n"
    "}\n"
    "\n"
    "extern \"C\" __global__ void __launch_bounds__(256)\n"
    "lm_attention_grad_f32(long long phase, float *out, const float *q, const float *k,\n"
    "                      const float *v, const void *mask, const float *o, const float *g,\n"
    "                      float *stats, long long scale_bits, long long nbatch, long long tq,\n"
    "                      long long tk, long long d, long long dv, long long causal,\n"
    "                      long long how, long long mc, long long items, long long t,\n"
    "                      long long w,\n"
    "                      long long o0, long long o1, long long o2, long long o3, long long o4,\n"
    "                      long long o5,\n"
    "                      long long r0, long long r1, long long r2, long long r3, long long r4,\n"
    "                      long long r5,\n" BATCH_PARAMS ",\n"
    "                      long long a0, long long a1, long long a2, long long a3, long long a4,\n"
    "                      long long a5,\n"
    "                      long long b0, long long b1, long long b2, long long b3, long long b4,\n"
    "                      long long b5) {\n"
    "  /* phase 0: q_i and g_i, and ds of the chunk; phase 1: k_j and v_j, p and ds */\n"
    "  __shared__ float xs[8][256], ys[8][256], ps[8][32], dss[8][32];\n"
    "  const long long sizes[6] = {n0, n1, n2, n3, n4, n5};\n"
    "  const long long strides[6][6] = {{q0, q1, q2, q3, q4, q5}, {k0, k1, k2, k3, k4, k5},\n"
    "                                   {v0, v1, v2, v3, v4, v5}, {m0, m1, m2, m3, m4, m5},\n"
    "                                   {a0, a1, a2, a3, a4, a5}, {b0, b1, b2, b3, b4, b5}};\n"
    "  const long long rs[6] = {r0, r1, r2, r3, r4, r5};\n"
    "  const float scale = (float)__longlong_as_double(scale_bits);\n"
    "  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
    "  const long long blocks = (t + 7) / 8, part = t * w;\n"
    "  for (long long item = blockIdx.x; item < items; item += gridDim.x) {\n"
    "    const long long b = item / blocks, x = item % blocks * 8 + warp;\n"
    "    if (x >= t) continue;\n"
    "    float *first = out + b * 3 * part + (phase ? part : 0) + x * w;\n"
    "    float *second = first + part; /* phase 1: dv's row */\n"
    "    if (x >= (phase ? tk : tq)) {\n"
    "      for (long long e = lane; e < w; e += 32) {\n"
    "        first[e] = 0;\n"
    "        if (phase) second[e] = 0;\n"
    "      }\n"
    "      continue;\n"
    "    }\n"
    "    long long off[6] = {o0, o1, o2, o3, o4, o5};\n"
    "    for (long long at = b, y = nbatch - 1; y >= 0; y--) {\n"
    "      const long long at_y = at % sizes[y];\n"
    "      at /= sizes[y];\n"
    "      for (int s = 0; s < 6; s++) off[s] += at_y * strides[s][y];\n"
    "    }\n"
    "    float acc[8], acc2[8];\n"
    "    for (int c = 0; c < 8; c++) acc[c] = 0, acc2[c] = 0;\n"
    "    if (phase == 0) {\n"
    "      const long long i = x;\n"
    "      const float *qi = q + off[0] + i * rs[0], *gi = g + off[5] + i * rs[5];\n"
    "      const float *oi = o + off[4] + i * rs[4];\n"
    "      for (long long e = lane; e < d; e += 32) xs[warp][e] = qi[e];\n"
    "      float sum_go = 0;\n"
    "      for (long long e = lane; e < dv; e += 32) {\n"
    "        ys[warp][e] = gi[e];\n"
    "        sum_go = fmaf(gi[e], oi[e], sum_go);\n"
    "      }\n"
    "      __syncwarp();\n"
    "      const float delta = lm_warp_sum(sum_go);\n"
    "      const long long keys = causal && i + 1 < tk ? i + 1 : tk;\n"
    "      float max = -LM_INF_F, sum = 0;\n"
    "      for (long long j0 = 0; j0 < keys; j0 += 32) {\n"
    "        const long long j = j0 + lane;\n"
    "        const float s = j < keys ? lm_attn_score(xs[warp], k + off[1] + j * rs[1], d, scale,\n"
    "                                                mask, how, off[3] + i * rs[3] + j * mc)\n"
    "                                 : -LM_INF_F;\n"
    "        float top = s;\n"
    "        for (int u = 16; u > 0; u /= 2) {\n"
    "          const float other = __shfl_xor_sync(LM_FULL_MASK, top, u);\n"
    "          top = other > top ? other : top;\n"
    "        }\n"
    "        const float grown = top > max ? top : max;\n"
    "        const float shift = grown == -LM_INF_F ? 0.0f : grown;\n"
    "        sum = sum * expf(max - shift) + lm_warp_sum(expf(s - shift));\n"
    "        max = grown;\n"
    "      }\n"
    "      /* a row hiding every key: -inf, and its probabilities NaN, as softmax's */\n"
    "      const float lse = (max == -LM_INF_F ? 0.0f : max) + logf(sum);\n"
    "      for (long long j0 = 0; j0 < keys; j0 += 32) {\n"
    "        const long long j = j0 + lane, n = keys - j0 < 32 ? keys - j0 : 32;\n"
    "        float ds = 0;\n"
    "        if (j < keys) {\n"
    "          const float s = lm_attn_score(xs[warp], k + off[1] + j * rs[1], d, scale, mask,\n"
    "                                        how, off[3] + i * rs[3] + j * mc);\n"
    "          const float dp = lm_attn_dot(ys[warp], v + off[2] + j * rs[2], dv);\n"
    "          ds = expf(s - lse) * (dp - delta);\n"
    "        }\n"
    "        dss[warp][lane] = ds;\n"
    "        __syncwarp();\n"
    "        for (long long u = 0; u < n; u++) {\n"
    "          const float *kj = k + off[1] + (j0 + u) * rs[1], f = dss[warp][u];\n"
    "          for (int c = 0; c < 8; c++)\n"
    "            if (lane + 32 * c < d) acc[c] = fmaf(f, kj[lane + 32 * c], acc[c]);\n"
    "        }\n"
    "        __syncwarp();\n"
    "      }\n"
    "      if (lane == 0) stats[2 * (b * tq + i)] = lse, stats[2 * (b * tq + i) + 1] = delta;\n"
    "      for (int c = 0; c < 8; c++)\n"
    "        if (lane + 32 * c < w) first[lane + 32 * c] = lane + 32 * c < d ? acc[c] * scale : "
    "0;\n"
    "    } else {\n"
    "      const long long j = x;\n"
    "      const float *kj = k + off[1] + j * rs[1], *vj = v + off[2] + j * rs[2];\n"
    "      for (long long e = lane; e < d; e += 32) xs[warp][e] = kj[e];\n"
    "      for (long long e = lane; e < dv; e += 32) ys[warp][e] = vj[e];\n"
    "      __syncwarp();\n"
    "      for (long long i0 = causal ? j : 0; i0 < tq; i0 += 32) {\n"
    "        const long long i = i0 + lane, n = tq - i0 < 32 ? tq - i0 : 32;\n"
    "        float p = 0, ds = 0;\n"
    "        if (i < tq) {\n"
    "          const float s = lm_attn_score(q + off[0] + i * rs[0], xs[warp], d, scale, mask, "
    "how,\n"
    "                                        off[3] + i * rs[3] + j * mc);\n"
    "          const float dp = lm_attn_dot(g + off[5] + i * rs[5], ys[warp], dv);\n"
    "          p = expf(s - stats[2 * (b * tq + i)]);\n"
    "          ds = p * (dp - stats[2 * (b * tq + i) + 1]);\n"
    "        }\n"
    "        ps[warp][lane] = p, dss[warp][lane] = ds;\n"
    "        __syncwarp();\n"
    "        for (long long u = 0; u < n; u++) {\n"
    "          const float *qi = q + off[0] + (i0 + u) * rs[0];\n"
    "          const float *gi = g + off[5] + (i0 + u) * rs[5];\n"
    "          for (int c = 0; c < 8; c++) {\n"
    "            if (lane + 32 * c < d) acc[c] = fmaf(dss[warp][u], qi[lane + 32 * c], acc[c]);\n"
    "            if (lane + 32 * c < dv) acc2[c] = fmaf(ps[warp][u], gi[lane + 32 * c], acc2[c]);\n"
    "          }\n"
    "        }\n"
    "        __syncwarp();\n"
    "      }\n"
    "      for (int c = 0; c < 8; c++) {\n"
    "        const long long e = lane + 32 * c;\n"
    "        if (e >= w) continue;\n"
    "        first[e] = e < d ? acc[c] * scale : 0;\n"
    "        second[e] = e < dv ? acc2[c] : 0;\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "}\n";

loom_status lm_cuda_attention_grad_source(char **source, char name[36], char *err, size_t errlen) {
  return lm_cuda_with_prelude(attention_grad_source, "lm_attention_grad_f32", source, name, err,
                              errlen);
}
