/*
 * The sort kernel of LM_STEP_SORT on CUDA (cuda_sort.c puts the prelude
 * before it; runtime/cuda/cuda_exec.c launches it): for each row of a stored
 * [rows, n] source, the positions of its first k values in order (int64), the
 * same answer as the CPU's (runtime/sort_cpu.c): every value is an unsigned key
 * that orders as the values do (NaN above every number, -0 equal to 0;
 * descending: the key's complement), a row ordered by (key, position).
 *
 * By counting: a value's place is the number of the row's values before it
 * in that order, so the thread holding value i counts them and, when the
 * place is below k, writes i there. A block of 256 threads (LM_CUDA_BLOCK)
 * takes 256 values of one row (a work item; blocks stride over the items);
 * the row's keys pass through shared memory 256 at a time.
 * n^2 comparisons a row, all rows' at once: the frontend sends rows longer
 * than LM_SORT_CUDA_MAX_ROW to the composition (frontend/composites.c).
 * Every parameter is 8 bytes and integral, as runtime/cuda/cuda_exec.c passes
 * them. Uses nothing of the prelude.
 */

/* IEEE bits of `width` bits (sign first) as a key: NaN above +inf, -0 as 0 */
__device__ __forceinline__ unsigned long long lm_float_key(unsigned long long bits, int width,
                                                           unsigned long long exp_mask,
                                                           unsigned long long man_mask) {
  const unsigned long long sign = 1ull << (width - 1), all = sign | (sign - 1);
  if ((bits & exp_mask) == exp_mask && (bits & man_mask)) bits = exp_mask | ((man_mask >> 1) + 1);
  if ((bits & ~sign) == 0) bits = 0;
  return (bits & sign) ? (~bits & all) : (bits | sign);
}

/* dtype: loom_dtype's value (f32 0, f64 1, i32 2, i64 3, u8 4, bf16 6, f16 7, i8 8, i16 9,
 * u16 10, u32 11, u64 12) */
__device__ __forceinline__ unsigned long long lm_sort_key(const void *row, long long i,
                                                          long long dtype) {
  switch (dtype) {
  case 0: return lm_float_key(((const unsigned int *)row)[i], 32, 0x7f800000ull, 0x7fffffull);
  case 1:
    return lm_float_key(((const unsigned long long *)row)[i], 64, 0x7ff0000000000000ull,
                        0xfffffffffffffull);
  case 2: return (unsigned int)((const int *)row)[i] ^ 0x80000000u;
  case 3: return (unsigned long long)((const long long *)row)[i] ^ (1ull << 63);
  case 6: return lm_float_key(((const unsigned short *)row)[i], 16, 0x7f80ull, 0x7full);
  case 7: return lm_float_key(((const unsigned short *)row)[i], 16, 0x7c00ull, 0x3ffull);
  case 8: return (unsigned char)((const signed char *)row)[i] ^ 0x80u;
  case 9: return (unsigned short)((const short *)row)[i] ^ 0x8000u;
  case 10: return ((const unsigned short *)row)[i];
  case 11: return ((const unsigned int *)row)[i];
  case 12: return ((const unsigned long long *)row)[i];
  default: return ((const unsigned char *)row)[i];
  }
}

extern "C" __global__ void __launch_bounds__(256)
    lm_sort_rows(long long *out, const void *src, long long n, long long k, long long dtype,
                 long long descending, long long rows) {
  __shared__ unsigned long long keys[256];
  const unsigned long long flip = descending ? ~0ull : 0ull;
  const long long width = dtype == 1 || dtype == 3 || dtype == 12   ? 8
                          : dtype == 0 || dtype == 2 || dtype == 11 ? 4
                          : dtype == 4 || dtype == 8                ? 1
                                                                    : 2;
  const long long chunks = (n + 255) / 256, items = rows * chunks;
  for (long long item = blockIdx.x; item < items; item += gridDim.x) {
    const long long r = item / chunks, i = item % chunks * 256 + threadIdx.x;
    const void *row = (const char *)src + r * n * width;
    const int mine = i < n;
    const unsigned long long key = mine ? lm_sort_key(row, i, dtype) ^ flip : 0;
    long long place = 0;
    for (long long j0 = 0; j0 < n; j0 += 256) {
      const long long j = j0 + threadIdx.x;
      if (j < n) keys[threadIdx.x] = lm_sort_key(row, j, dtype) ^ flip;
      __syncthreads();
      const long long m = n - j0 < 256 ? n - j0 : 256;
      for (long long t = 0; t < m; t++) place += keys[t] < key || (keys[t] == key && j0 + t < i);
      __syncthreads();
    }
    if (mine && place < k) out[r * k + place] = i;
  }
}
