/* Fused attention on the CPU: out = softmax(q k^T * scale + mask) v,
 * one block of query rows at a time over tiles of keys, with the softmax
 * computed online (a running max and sum per row, the output rescaled when
 * the max grows), so no row of scores longer than a tile is ever stored.
 *
 * This file is self-contained C (no loom header): it is compiled into the
 * library and its text is also written into exported libraries
 * (runtime/export_source.c), so an export computes attention with the same
 * code. Its entry point has a kernel's signature: args are {out, q, k, v,
 * int64 numbers (ATTN_* below), double scale, mask or NULL}, and [begin, end)
 * is a range of work items, each a block of ATTN_QROWS query rows of one batch
 * index. A mask is bool bytes (nonzero: attend) or floats added to the scaled
 * scores, [.., Tq, Tk] through strides. */
#include <math.h>
#include <stdint.h>
#include <string.h>

/* 64-byte vectors pass in registers only with AVX-512: every function taking
 * one is inlined, so no call ever passes one */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define ATTN_QROWS 16 /* query rows of a block: one per lane of a 512-bit vector */
#define ATTN_KTILE 64 /* keys per tile: a multiple of the widest vector */
#define ATTN_MAX_HEAD 256
#define ATTN_MAX_BATCH 6
/* the numbers' positions (args[4]) */
enum {
  ATTN_NBATCH,
  ATTN_TQ,
  ATTN_TK,
  ATTN_D,
  ATTN_DV,
  ATTN_CAUSAL,
  ATTN_MASK,                                  /* 0 none, 1 bool, 2 added */
  ATTN_MASK_COL,                              /* the mask's stride along Tk */
  ATTN_OFFSET,                                /* 4: q, k, v, mask */
  ATTN_ROW = ATTN_OFFSET + 4,                 /* 4 */
  ATTN_BATCH = ATTN_ROW + 4,                  /* ATTN_MAX_BATCH */
  ATTN_BSTRIDE = ATTN_BATCH + ATTN_MAX_BATCH, /* 4 x ATTN_MAX_BATCH */
  ATTN_NUMBERS = ATTN_BSTRIDE + 4 * ATTN_MAX_BATCH
};

/* 16 floats: a 512-bit register with AVX-512, two with AVX2, four with SSE
 * (GCC's and clang's vector extension). */
typedef float attn_vf __attribute__((vector_size(64)));
typedef int32_t attn_vi __attribute__((vector_size(64)));
typedef uint32_t attn_vu __attribute__((vector_size(64)));
typedef float attn_vf_unaligned __attribute__((vector_size(64), aligned(4), may_alias));
#define ATTN_SPLAT(x) ((attn_vf){0} + (float)(x))
#define ATTN_INLINE static inline __attribute__((always_inline))

ATTN_INLINE attn_vf attn_load(const float *p) { return *(const attn_vf_unaligned *)p; }
ATTN_INLINE void attn_store(float *p, attn_vf v) { *(attn_vf_unaligned *)p = v; }
ATTN_INLINE attn_vf attn_select(attn_vi take, attn_vf a, attn_vf b) {
  return (attn_vf)((take & (attn_vi)a) | (~take & (attn_vi)b));
}
ATTN_INLINE attn_vf attn_max(attn_vf a, attn_vf b) { return attn_select(a > b, a, b); }

/* e^x for x <= 0 (scores less their row's max): 2^n * p(r) with x = n ln2 + r,
 * |r| <= ln2 / 2, p the Taylor polynomial of degree 6 (relative error ~2e-7,
 * about 2 float ulps). -inf (a masked score) and x below -87.3 give 0; NaN
 * stays. */
ATTN_INLINE attn_vf attn_exp(attn_vf x) {
  /* (NaN fails the comparison: no NaN reaches the conversion to integers) */
  attn_vf c = attn_select(x >= ATTN_SPLAT(-87.3f), x, ATTN_SPLAT(-87.3f));
  c = attn_select(c > ATTN_SPLAT(0), ATTN_SPLAT(0), c);
  attn_vi ni = __builtin_convertvector(c * 1.44269504f - 0.5f, attn_vi); /* toward 0: round */
  attn_vf n = __builtin_convertvector(ni, attn_vf);
  attn_vf r = c - n * 0.693145752f - n * 1.42860677e-6f;
  attn_vf p = ATTN_SPLAT(1.0f / 720);
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  attn_vf e = p * (attn_vf)((attn_vu)(ni + 127) << 23);
  e = attn_select(x < ATTN_SPLAT(-87.3f), ATTN_SPLAT(0), e);
  return attn_select(x != x, x, e);
}

ATTN_INLINE float attn_hmax(attn_vf v) {
  float m = v[0];
  for (int i = 1; i < 16; i++) m = v[i] > m ? v[i] : m;
  return m;
}

ATTN_INLINE float attn_hsum(attn_vf v) {
  float s = 0;
  for (int i = 0; i < 16; i++) s += v[i];
  return s;
}

/* Where batch index b's q, k, v and mask start (elements). */
ATTN_INLINE void attn_offsets(const int64_t *num, int64_t b, int64_t off[4]) {
  for (int s = 0; s < 4; s++) off[s] = num[ATTN_OFFSET + s];
  for (int64_t at = b, x = num[ATTN_NBATCH] - 1; x >= 0; x--) { /* last batch dim fastest */
    int64_t size = num[ATTN_BATCH + x], i = at % size;
    at /= size;
    for (int s = 0; s < 4; s++) off[s] += i * num[ATTN_BSTRIDE + s * ATTN_MAX_BATCH + x];
  }
}

/* The mask's term at `at`: 0, or -inf where a bool mask hides the key. */
ATTN_INLINE float attn_mask_at(const void *mask, int64_t how, int64_t at) {
  if (how == 1) return ((const unsigned char *)mask)[at] ? 0.0f : -INFINITY;
  return ((const float *)mask)[at];
}

/* One query row i against every key it sees, a tile's keys in the vector
 * lanes (the tile transposed once): decoding's single rows. */
ATTN_INLINE void attn_row(float *dst, const float *q, const float *k, const float *v,
                          const void *mask, const int64_t *num, float scale, const int64_t off[4],
                          int64_t i) {
  enum { V = ATTN_KTILE / 16 };
  int64_t tk = num[ATTN_TK], d = num[ATTN_D], dv = num[ATTN_DV];
  int64_t kr = num[ATTN_ROW + 1], vr = num[ATTN_ROW + 2];
  int64_t mr = num[ATTN_ROW + 3], mc = num[ATTN_MASK_COL], how = mask ? num[ATTN_MASK] : 0;
  const float *qi = q + off[0] + i * num[ATTN_ROW];
  float kt[ATTN_MAX_HEAD * ATTN_KTILE]; /* the key tile transposed: kt[e * KTILE + j] */
  float acc[ATTN_MAX_HEAD], s[ATTN_KTILE], max = -INFINITY, sum = 0;
  for (int64_t e = 0; e < dv; e++) acc[e] = 0;
  int64_t keys = num[ATTN_CAUSAL] && i + 1 < tk ? i + 1 : tk;
  for (int64_t j0 = 0; j0 < keys; j0 += ATTN_KTILE) {
    int64_t n = keys - j0 < ATTN_KTILE ? keys - j0 : ATTN_KTILE;
    for (int64_t j = 0; j < ATTN_KTILE; j++) {
      const float *kj = k + off[1] + (j0 + (j < n ? j : n - 1)) * kr;
      for (int64_t e = 0; e < d; e++) kt[e * ATTN_KTILE + j] = kj[e];
    }
    attn_vf sv[V] = {{0}};
    for (int64_t e = 0; e < d; e++)
      for (int u = 0; u < V; u++) sv[u] += qi[e] * attn_load(kt + e * ATTN_KTILE + 16 * u);
    for (int u = 0; u < V; u++) attn_store(s + 16 * u, sv[u] * scale);
    for (int64_t j = n; j < ATTN_KTILE; j++) s[j] = -INFINITY;
    for (int64_t j = 0; how && j < n; j++)
      s[j] += attn_mask_at(mask, how, off[3] + i * mr + (j0 + j) * mc);
    attn_vf top = ATTN_SPLAT(-INFINITY);
    for (int u = 0; u < V; u++) top = attn_max(top, attn_load(s + 16 * u));
    float grown = attn_hmax(top);
    /* nothing to attend to in this tile (a row masked throughout ends with
       a sum of 0, and NaN, as softmax gives) */
    if (grown == -INFINITY) continue;
    grown = grown > max ? grown : max;
    attn_vf total = ATTN_SPLAT(0);
    for (int u = 0; u < V; u++) {
      attn_vf p = attn_exp(attn_load(s + 16 * u) - grown);
      attn_store(s + 16 * u, p);
      total += p;
    }
    /* the row's earlier terms, rescaled to the new max (none yet: 0) */
    float rescale = max == -INFINITY ? 0.0f : attn_exp(ATTN_SPLAT(max - grown))[0];
    sum = sum * rescale + attn_hsum(total);
    max = grown;
    for (int64_t e = 0; e < dv; e++) acc[e] *= rescale;
    for (int64_t j = 0; j < n; j++) {
      const float *vj = v + off[2] + (j0 + j) * vr;
      float p = s[j];
      for (int64_t e = 0; e < dv; e++) acc[e] += p * vj[e];
    }
  }
  float inv = 1.0f / sum;
  for (int64_t e = 0; e < dv; e++) dst[e] = acc[e] * inv;
}

/* ATTN_QROWS (16) query rows [i0, i0 + rows) at once, one row per vector
 * lane (q transposed once for the block; rows past the end repeat the last):
 * a key's scores are one vector, so are the softmax's running max and sum
 * and each output dim's accumulator, and no key tile is transposed. Keys go
 * 8 at a time, and so do output dims (8 independent sums hide the adds'
 * latency). */
ATTN_INLINE void attn_rows(float *out, const float *q, const float *k, const float *v,
                           const void *mask, const int64_t *num, float scale, const int64_t off[4],
                           int64_t i0, int64_t rows) {
  enum { U = 8 };
  int64_t tk = num[ATTN_TK], d = num[ATTN_D], dv = num[ATTN_DV];
  int64_t qr = num[ATTN_ROW], kr = num[ATTN_ROW + 1], vr = num[ATTN_ROW + 2];
  int64_t mr = num[ATTN_ROW + 3], mc = num[ATTN_MASK_COL], how = mask ? num[ATTN_MASK] : 0;
  int causal = num[ATTN_CAUSAL] != 0;
  attn_vf qt[ATTN_MAX_HEAD], acc[ATTN_MAX_HEAD], st[ATTN_KTILE];
  attn_vf max = ATTN_SPLAT(-INFINITY), sum = ATTN_SPLAT(0);
  attn_vi lane;
  for (int r = 0; r < 16; r++) lane[r] = r;
  for (int64_t e = 0; e < d; e++)
    for (int r = 0; r < 16; r++) qt[e][r] = q[off[0] + (i0 + (r < rows ? r : rows - 1)) * qr + e];
  for (int64_t e = 0; e < dv; e++) acc[e] = ATTN_SPLAT(0);
  int64_t keys = causal && i0 + rows < tk ? i0 + rows : tk;
  for (int64_t j0 = 0; j0 < keys; j0 += ATTN_KTILE) {
    int64_t n = keys - j0 < ATTN_KTILE ? keys - j0 : ATTN_KTILE;
    for (int64_t j = 0; j < n; j += U) { /* scores: st[j][r] = q_r . k_j */
      const float *kj[U];
      for (int u = 0; u < U; u++) kj[u] = k + off[1] + (j0 + (j + u < n ? j + u : n - 1)) * kr;
      attn_vf sc[U] = {{0}};
      for (int64_t e = 0; e < d; e++) {
        attn_vf qe = qt[e];
        for (int u = 0; u < U; u++) sc[u] += kj[u][e] * qe;
      }
      for (int u = 0; u < U; u++) st[j + u] = sc[u] * scale;
    }
    for (int64_t j = (n + U - 1) / U * U; j < ATTN_KTILE; j++) st[j] = ATTN_SPLAT(-INFINITY);
    for (int64_t j = 0; j < ATTN_KTILE; j++) { /* what each row does not see */
      attn_vi hidden = j >= n ? ~(attn_vi){0} : (attn_vi){0};
      int64_t ahead = j0 + j - i0; /* key j0 + j is after query i0 + r where ahead > r */
      if (causal) hidden |= ((attn_vi){0} + (int32_t)(ahead < 16 ? ahead : 16)) > lane;
      st[j] = attn_select(hidden, ATTN_SPLAT(-INFINITY), st[j]);
    }
    for (int64_t j = 0; how && j < n; j++)
      for (int r = 0; r < rows; r++)
        st[j][r] += attn_mask_at(mask, how, off[3] + (i0 + r) * mr + (j0 + j) * mc);
    attn_vf grown = max;
    for (int j = 0; j < ATTN_KTILE; j++) grown = attn_max(st[j], grown);
    /* the terms are e^(score - max); a row that has seen nothing yet (max
       -inf) has only zero terms so far, and shifts by 0 instead */
    attn_vf shift = attn_select(grown == ATTN_SPLAT(-INFINITY), ATTN_SPLAT(0), grown);
    /* the earlier terms' rescaling e^(old max - new), 0 when there were none */
    attn_vf rescale = attn_exp(max - shift);
    sum *= rescale;
    max = grown;
    for (int j = 0; j < ATTN_KTILE; j++) {
      st[j] = attn_exp(st[j] - shift);
      sum += st[j];
    }
    int64_t e = 0;
    for (; e + U <= dv; e += U) { /* acc[e] = acc[e] * rescale + sum_j p[j] v[j][e] */
      attn_vf a[U];
      for (int u = 0; u < U; u++) a[u] = acc[e + u] * rescale;
      for (int64_t j = 0; j < n; j++) {
        const float *vj = v + off[2] + (j0 + j) * vr + e;
        attn_vf p = st[j];
        for (int u = 0; u < U; u++) a[u] += vj[u] * p;
      }
      for (int u = 0; u < U; u++) acc[e + u] = a[u];
    }
    for (; e < dv; e++) {
      attn_vf a = acc[e] * rescale;
      for (int64_t j = 0; j < n; j++) a += v[off[2] + (j0 + j) * vr + e] * st[j];
      acc[e] = a;
    }
  }
  attn_vf inv = 1.0f / sum;
  for (int64_t r = 0; r < rows; r++) {
    float *dst = out + (i0 + r) * dv;
    for (int64_t e = 0; e < dv; e++) dst[e] = acc[e][r] * inv[r];
  }
}

static inline __attribute__((always_inline)) void attn_items(void *const *args, int64_t begin,
                                                             int64_t end) {
  const int64_t *num = args[4];
  float scale = (float)*(const double *)args[5];
  int64_t tq = num[ATTN_TQ], blocks = (tq + ATTN_QROWS - 1) / ATTN_QROWS;
  for (int64_t item = begin; item < end; item++) {
    int64_t b = item / blocks, i0 = item % blocks * ATTN_QROWS;
    int64_t rows = tq - i0 < ATTN_QROWS ? tq - i0 : ATTN_QROWS;
    int64_t off[4];
    attn_offsets(num, b, off);
    float *o = (float *)args[0] + b * tq * num[ATTN_DV];
    if (rows == 1)
      attn_row(o + i0 * num[ATTN_DV], args[1], args[2], args[3], args[6], num, scale, off, i0);
    else
      attn_rows(o, args[1], args[2], args[3], args[6], num, scale, off, i0, rows);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512dq,avx2,fma"))) static void
attn_items_avx512(void *const *args, int64_t begin, int64_t end) {
  attn_items(args, begin, end);
}
__attribute__((target("avx2,fma"))) static void attn_items_avx2(void *const *args, int64_t begin,
                                                                int64_t end) {
  attn_items(args, begin, end);
}
#endif

/* The numbers the kernel reads, from the step's description: offset,
 * row_stride and bstride for q, k, v and the mask; bstride[s * pitch + x] is
 * operand s's stride along batch dim x. Returns how many (at most 64), or 0
 * for more batch dims or wider heads than it takes. */
int lm_attention_f32_numbers(int nbatch, const int64_t *batch, int64_t tq, int64_t tk, int64_t d,
                             int64_t dv, int causal, int mask, int64_t mask_stride,
                             const int64_t *offset, const int64_t *row_stride,
                             const int64_t *bstride, int pitch, int64_t *num) {
  if (nbatch < 0 || nbatch > ATTN_MAX_BATCH || d > ATTN_MAX_HEAD || dv > ATTN_MAX_HEAD) return 0;
  memset(num, 0, sizeof *num * ATTN_NUMBERS);
  num[ATTN_NBATCH] = nbatch, num[ATTN_TQ] = tq, num[ATTN_TK] = tk;
  num[ATTN_D] = d, num[ATTN_DV] = dv, num[ATTN_CAUSAL] = causal != 0;
  num[ATTN_MASK] = mask, num[ATTN_MASK_COL] = mask_stride;
  for (int s = 0; s < (mask ? 4 : 3); s++) {
    num[ATTN_OFFSET + s] = offset[s];
    num[ATTN_ROW + s] = row_stride[s];
    for (int x = 0; x < nbatch; x++)
      num[ATTN_BSTRIDE + s * ATTN_MAX_BATCH + x] = bstride[s * pitch + x];
  }
  for (int x = 0; x < nbatch; x++) num[ATTN_BATCH + x] = batch[x];
  return ATTN_NUMBERS;
}

/* Work items: every batch index's blocks of query rows. */
int64_t lm_attention_f32_items(const int64_t *num) {
  int64_t items = (num[ATTN_TQ] + ATTN_QROWS - 1) / ATTN_QROWS;
  for (int64_t x = 0; x < num[ATTN_NBATCH]; x++) items *= num[ATTN_BATCH + x];
  return items;
}

void lm_attention_f32(void *const *args, int64_t begin, int64_t end) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) {
    attn_items_avx512(args, begin, end);
    return;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    attn_items_avx2(args, begin, end);
    return;
  }
#endif
  attn_items(args, begin, end);
}
