/*
 * The fused attention kernel of LM_STEP_ATTENTION on CUDA (cuda_attention.c
 * puts the prelude before it; runtime/cuda/cuda_exec.c launches it): out =
 * softmax(q k^T * scale + mask) v with the softmax computed online, as the CPU's
 * (runtime/attention_cpu.c), over the same operand layouts: q [.., Tq, D], k
 * [.., Tk, D], v [.., Tk, Dv] read through an offset, a row stride and batch
 * strides each (rows of unit stride), an optional mask [.., Tq, Tk] (bool
 * bytes: nonzero attends; or floats added) through strides, out contiguous.
 *
 * A block of 256 threads (LM_CUDA_BLOCK: 8 warps) takes `rows` consecutive query
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
 * dims) through shared memory (the dims where its keys were), rescaling each
 * to the largest max, and the first writes the row. A row seeing no key is
 * NaN (0 / 0), as softmax over -inf gives.
 * Every parameter is 8 bytes and integral (the scale is a double's bits), as
 * runtime/cuda/cuda_exec.c passes them.
 */
#ifndef LM_CUDA_PRELUDE
#include "cuda_prelude.cuh"
#endif

extern "C" __global__ void __launch_bounds__(256)
    lm_attention_f32(float *out, const float *q, const float *k, const float *v, const void *mask,
                     long long scale_bits, long long nbatch, long long tq, long long tk,
                     long long d, long long dv, long long causal, long long how, long long mc,
                     long long items, long long rows, long long o0, long long o1, long long o2,
                     long long o3, long long r0, long long r1, long long r2, long long r3,
                     long long n0, long long n1, long long n2, long long n3, long long n4,
                     long long n5, long long q0, long long q1, long long q2, long long q3,
                     long long q4, long long q5, long long k0, long long k1, long long k2,
                     long long k3, long long k4, long long k5, long long v0, long long v1,
                     long long v2, long long v3, long long v4, long long v5, long long m0,
                     long long m1, long long m2, long long m3, long long m4, long long m5) {
  __shared__ float qs[8][256];
  __shared__ float ps[8][32];
  /* a warp's 32 keys, 32 dims at a time; after its loop, its output dims */
  __shared__ float ks[8][32][33];
  __shared__ float part_max[8], part_sum[8];
  const long long sizes[6] = {n0, n1, n2, n3, n4, n5};
  const long long strides[4][6] = {{q0, q1, q2, q3, q4, q5},
                                   {k0, k1, k2, k3, k4, k5},
                                   {v0, v1, v2, v3, v4, v5},
                                   {m0, m1, m2, m3, m4, m5}};
  const float scale = (float)__longlong_as_double(scale_bits);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int splits = 8 / (int)rows, split = warp / (int)rows;
  const long long blocks = (tq + rows - 1) / rows;
  for (long long item = blockIdx.x; item < items; item += gridDim.x) {
    const long long b = item / blocks, i = item % blocks * rows + warp % rows;
    const int real = i < tq;
    const long long row = real ? i : tq - 1;
    long long off[4] = {o0, o1, o2, o3};
    for (long long at = b, x = nbatch - 1; x >= 0; x--) {
      const long long at_x = at % sizes[x];
      at /= sizes[x];
      for (int s = 0; s < 4; s++) off[s] += at_x * strides[s][x];
    }
    for (long long e = lane; e < d; e += 32) qs[warp][e] = q[off[0] + row * r0 + e];
    __syncwarp();
    const long long keys = causal && row + 1 < tk ? row + 1 : tk;
    float max = -LM_INF_F, sum = 0, acc[8];
    for (int c = 0; c < 8; c++) acc[c] = 0;
    for (long long j0 = 32 * split; j0 < keys; j0 += 32 * splits) {
      const long long j = j0 + lane, n = keys - j0 < 32 ? keys - j0 : 32;
      float dot0 = 0, dot1 = 0;
      for (long long e0 = 0; e0 < d; e0 += 32) {
        if (e0 + lane < d)
          for (long long t = 0; t < n; t++)
            ks[warp][t][lane] = k[off[1] + (j0 + t) * r1 + e0 + lane];
        __syncwarp();
        const int width = d - e0 < 32 ? (int)(d - e0) : 32;
        int e = 0;
        for (; e + 2 <= width; e += 2) {
          dot0 = fmaf(qs[warp][e0 + e], ks[warp][lane][e], dot0);
          dot1 = fmaf(qs[warp][e0 + e + 1], ks[warp][lane][e + 1], dot1);
        }
        if (e < width) dot0 = fmaf(qs[warp][e0 + e], ks[warp][lane][e], dot0);
        __syncwarp();
      }
      float s = -LM_INF_F;
      if (j < keys) {
        s = (dot0 + dot1) * scale;
        const long long at = off[3] + row * r3 + j * mc;
        if (how == 1) s = ((const unsigned char *)mask)[at] ? s : -LM_INF_F;
        if (how == 2) s += ((const float *)mask)[at];
      }
      const float top = lm_warp_max(s);
      const float grown = top > max ? top : max;
      /* a row that has seen nothing yet shifts by 0: its terms are 0 */
      const float shift = grown == -LM_INF_F ? 0.0f : grown;
      const float p = expf(s - shift), rescale = expf(max - shift);
      const float total = lm_warp_sum(p);
      sum = sum * rescale + total;
      max = grown;
      ps[warp][lane] = p;
      __syncwarp();
      for (int c = 0; c < 8; c++) acc[c] *= rescale;
      for (long long t = 0; t < n; t++) {
        const float w = ps[warp][t];
        const float *vj = v + off[2] + (j0 + t) * r2;
        for (int c = 0; c < 8; c++)
          if (lane + 32 * c < dv) acc[c] = fmaf(w, vj[lane + 32 * c], acc[c]);
      }
      __syncwarp();
    }
    if (lane == 0) part_max[warp] = max, part_sum[warp] = sum;
    for (int c = 0; c < 8; c++)
      if (lane + 32 * c < dv) (&ks[warp][0][0])[lane + 32 * c] = acc[c];
    __syncthreads();
    if (split == 0 && real) {
      float top = -LM_INF_F, total = 0;
      for (int w = warp; w < 8; w += (int)rows) top = part_max[w] > top ? part_max[w] : top;
      const float shift = top == -LM_INF_F ? 0.0f : top;
      float weight[8];
      for (int w = warp, x = 0; w < 8; w += (int)rows, x++) {
        weight[x] = expf(part_max[w] - shift);
        total += part_sum[w] * weight[x];
      }
      for (int c = 0; c < 8; c++) {
        if (lane + 32 * c >= dv) continue;
        float value = 0;
        for (int w = warp, x = 0; w < 8; w += (int)rows, x++)
          value = fmaf((&ks[w][0][0])[lane + 32 * c], weight[x], value);
        out[(b * tq + i) * dv + lane + 32 * c] = value / total;
      }
    }
    __syncthreads();
  }
}
