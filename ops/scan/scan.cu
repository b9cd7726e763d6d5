/*
 * The scan kernel of LM_STEP_SCAN on CUDA (ops/scan/scan_nvrtc.c puts the prelude
 * before it; runtime/cuda/cuda_exec.c launches it): the running sums of a
 * stored source read as [outer, n, inner] around the scanned dim, the same
 * sums as the CPU's (ops/scan/scan_cpu.c): F32 summed in double and rounded
 * once, F64 in double, I64 in unsigned 64 bits (an overflow wraps); reversed,
 * from the dim's end. A sum takes only the values before it in the scan's
 * order, so NaN and inf reach only the sums after them.
 *
 * A chain (the n values at one (o, c)) may be cut into `parts`: phase 0
 * writes each part's total into partial[chain * parts + part] (as its 64
 * bits), phase 1 sums each part from the totals of the parts before it; with
 * one part, phase 1 alone.
 *  - inner == 1 (the last dim): a block per (row, part), blocks striding over
 *    them. A tile of the part is LM_SCAN_ITEMS consecutive values a thread:
 *    each thread sums its own, the block scans the threads' totals in shared
 *    memory, and each thread writes its values' sums; a tile's total carries
 *    into the next tile.
 *  - inner > 1: a thread per (chain, part), neighbouring threads on
 *    neighbouring chains (contiguous in memory), a value a step.
 * Launched with 256 threads a block. Every parameter is 8 bytes, as
 * cuda_exec.c passes them.
 */
#define LM_SCAN_ITEMS 8

__device__ __forceinline__ unsigned long long lm_scan_bits(double v) {
  return (unsigned long long)__double_as_longlong(v);
}
__device__ __forceinline__ unsigned long long lm_scan_bits(unsigned long long v) { return v; }
/* (the second argument picks the type) */
__device__ __forceinline__ double lm_scan_value(unsigned long long b, double) {
  return __longlong_as_double((long long)b);
}
__device__ __forceinline__ unsigned long long lm_scan_value(unsigned long long b,
                                                            unsigned long long) {
  return b;
}

/* The sum of a chain's part totals before part p. */
template <typename Acc>
__device__ Acc lm_scan_offset(const unsigned long long *partial, long long chain, long long parts,
                              long long p) {
  Acc s = 0;
  for (long long q = 0; q < p; q++) s += lm_scan_value(partial[chain * parts + q], s);
  return s;
}

/* Part p of row o (inner == 1), by the whole block. */
template <typename In, typename Acc, typename Out>
__device__ void lm_scan_row_part(long long phase, Out *out, const In *src,
                                 unsigned long long *partial, unsigned long long *shared,
                                 long long n, long long parts, long long reverse, long long o,
                                 long long p) {
  const long long s0 = n * p / parts, s1 = n * (p + 1) / parts;
  const In *x = src + o * n;
  Out *y = out + o * n;
  const int t = threadIdx.x;
  if (phase == 0) {
    Acc sum = 0;
    for (long long i = s0 + t; i < s1; i += 256) sum += (Acc)x[reverse ? n - 1 - i : i];
    shared[t] = lm_scan_bits(sum);
    __syncthreads();
    for (int half = 128; half > 0; half >>= 1) {
      if (t < half)
        shared[t] =
            lm_scan_bits(lm_scan_value(shared[t], sum) + lm_scan_value(shared[t + half], sum));
      __syncthreads();
    }
    if (t == 0) partial[o * parts + p] = shared[0];
    __syncthreads(); /* shared is the next item's */
    return;
  }
  Acc carry = parts > 1 ? lm_scan_offset<Acc>(partial, o, parts, p) : (Acc)0;
  for (long long base = s0; base < s1; base += 256 * LM_SCAN_ITEMS) {
    Acc mine[LM_SCAN_ITEMS], run = 0;
    for (int k = 0; k < LM_SCAN_ITEMS; k++) {
      const long long i = base + (long long)t * LM_SCAN_ITEMS + k;
      if (i < s1) run += (Acc)x[reverse ? n - 1 - i : i];
      mine[k] = run;
    }
    /* the threads' totals, scanned: shared[t] the sum of threads 0..t's */
    shared[t] = lm_scan_bits(run);
    __syncthreads();
    for (int step = 1; step < 256; step <<= 1) {
      const Acc earlier = t >= step ? lm_scan_value(shared[t - step], run) : (Acc)0;
      __syncthreads();
      if (t >= step) shared[t] = lm_scan_bits(earlier + lm_scan_value(shared[t], run));
      __syncthreads();
    }
    const Acc before = t > 0 ? carry + lm_scan_value(shared[t - 1], run) : carry;
    for (int k = 0; k < LM_SCAN_ITEMS; k++) {
      const long long i = base + (long long)t * LM_SCAN_ITEMS + k;
      if (i < s1) y[reverse ? n - 1 - i : i] = (Out)(before + mine[k]);
    }
    carry = carry + lm_scan_value(shared[255], run);
    __syncthreads(); /* shared is the next tile's */
  }
}

template <typename In, typename Acc, typename Out>
__device__ void lm_scan(long long phase, void *out_v, const void *src_v,
                        unsigned long long *partial, unsigned long long *shared, long long n,
                        long long inner, long long outer, long long parts, long long reverse) {
  Out *out = (Out *)out_v;
  const In *src = (const In *)src_v;
  if (inner == 1) {
    for (long long item = blockIdx.x; item < outer * parts; item += gridDim.x)
      lm_scan_row_part<In, Acc, Out>(phase, out, src, partial, shared, n, parts, reverse,
                                     item / parts, item % parts);
    return;
  }
  const long long items = outer * inner * parts;
  for (long long item = (long long)blockIdx.x * 256 + threadIdx.x; item < items;
       item += (long long)gridDim.x * 256) {
    const long long c = item % inner, o = item / inner % outer, p = item / inner / outer;
    const long long chain = o * inner + c, s0 = n * p / parts, s1 = n * (p + 1) / parts;
    const In *x = src + o * n * inner + c;
    Out *y = out + o * n * inner + c;
    Acc acc = phase == 1 && parts > 1 ? lm_scan_offset<Acc>(partial, chain, parts, p) : (Acc)0;
    for (long long i = s0; i < s1; i++) {
      const long long at = (reverse ? n - 1 - i : i) * inner;
      acc += (Acc)x[at];
      if (phase == 1) y[at] = (Out)acc;
    }
    if (phase == 0) partial[chain * parts + p] = lm_scan_bits(acc);
  }
}

/* dtype: loom_dtype's value (f32 0, f64 1, i64 3) */
extern "C" __global__ void __launch_bounds__(256)
    lm_scan_rows(long long phase, void *out, const void *src, unsigned long long *partial,
                 long long n, long long inner, long long outer, long long parts, long long dtype,
                 long long reverse) {
  __shared__ unsigned long long shared[256];
  switch (dtype) {
  case 0:
    lm_scan<float, double, float>(phase, out, src, partial, shared, n, inner, outer, parts,
                                  reverse);
    break;
  case 1:
    lm_scan<double, double, double>(phase, out, src, partial, shared, n, inner, outer, parts,
                                    reverse);
    break;
  default:
    lm_scan<long long, unsigned long long, long long>(phase, out, src, partial, shared, n, inner,
                                                      outer, parts, reverse);
    break;
  }
}
