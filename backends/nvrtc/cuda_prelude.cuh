/*
 * The helpers every CUDA source loom compiles starts with (NVRTC's input is
 * this file, then cuda_philox.cuh, then the kernel: CMakeLists.txt embeds the
 * two as lm_cuda_prelude_text). They give CUDA C the semantics of the kernel
 * description where C++ differs or leaves them undefined, so the
 * per-instruction code in cuda_codegen.c stays one line:
 *   - integer + - * and negation wrap (signed overflow is undefined in C++),
 *   - max/min propagate NaN as the CPU's select does,
 *   - argmax/argmin (and float max/min) combine (value, index) pairs: a NaN
 *     beats everything, then the larger (smaller) value, then the lower index,
 *     which is the CPU's sequential "first maximum, first NaN" in any order,
 *   - warp shuffles of every dtype,
 *   - lm_chunk: 4 consecutive elements, loaded and stored as vectors.
 * No #include: NVRTC declares the math functions and intrinsics itself.
 *
 * F32 math uses CUDA's float functions (expf: 2 ulp, logf: 1 ulp, sinf, cosf,
 * tanhf: 2 ulp, powf: 4 ulp; erf through erfcf beyond |x| = 1, within an ulp
 * where 1 + erf cancels), the CPU's are within 1 ulp (they evaluate
 * in double and round once). Compiling with -DLM_PRECISE_F32 makes the F32
 * functions evaluate in double and round once, as the CPU does.
 *
 * The kernels in files of their own include this file when compiled alone
 * (nvcc -c, tools/check_kernel_sources.sh); loom puts it before them instead.
 */
#ifndef LM_CUDA_PRELUDE
#define LM_CUDA_PRELUDE

#define LM_FULL_MASK 0xffffffffu
#define LM_NO_INDEX 0x7fffffffffffffffLL
#define LM_INF_F __int_as_float(0x7f800000)
#define LM_INF_D __longlong_as_double(0x7ff0000000000000LL)
#define LM_NAN_F __int_as_float(0x7fc00000)
#define LM_NAN_D __longlong_as_double(0x7ff8000000000000LL)
#define LM_DEV static __device__ __forceinline__

// Four consecutive elements, aligned for one (or two) vector accesses.
template <typename T> struct alignas(4 * sizeof(T) < 16 ? 4 * sizeof(T) : 16) lm_chunk { T v[4]; };
template <typename T> LM_DEV bool lm_aligned(const void *base, long long at) {
  return ((unsigned long long)((const T *)base + at) & (alignof(lm_chunk<T>) - 1)) == 0;
}
// One 16-byte (uchar4: 4-byte) access, or two, through CUDA's vector types and
// the cache-hinted intrinsics (default caching): in the generated loops NVVM
// turned plain float4 stores into four scalar stores.
#define LM_VEC4(T, V, MAKE)                                                                        \
  LM_DEV lm_chunk<T> lm_load4(const T *p) {                                                        \
    const V x = __ldca((const V *)p);                                                              \
    return lm_chunk<T>{{x.x, x.y, x.z, x.w}};                                                      \
  }                                                                                                \
  LM_DEV void lm_store4(T *p, const lm_chunk<T> &c) {                                              \
    __stwb((V *)p, MAKE(c.v[0], c.v[1], c.v[2], c.v[3]));                                          \
  }
#define LM_VEC2X2(T, V, MAKE)                                                                      \
  LM_DEV lm_chunk<T> lm_load4(const T *p) {                                                        \
    const V x = __ldca((const V *)p), y = __ldca((const V *)p + 1);                                \
    return lm_chunk<T>{{x.x, x.y, y.x, y.y}};                                                      \
  }                                                                                                \
  LM_DEV void lm_store4(T *p, const lm_chunk<T> &c) {                                              \
    __stwb((V *)p, MAKE(c.v[0], c.v[1]));                                                          \
    __stwb((V *)p + 1, MAKE(c.v[2], c.v[3]));                                                      \
  }
LM_VEC4(float, float4, make_float4)
LM_VEC4(int, int4, make_int4)
LM_VEC4(unsigned char, uchar4, make_uchar4)
LM_VEC4(signed char, char4, make_char4)
LM_VEC4(unsigned short, ushort4, make_ushort4)
LM_VEC4(short, short4, make_short4)
LM_VEC4(unsigned int, uint4, make_uint4)
LM_VEC2X2(double, double2, make_double2)
LM_VEC2X2(long long, longlong2, make_longlong2)
LM_VEC2X2(unsigned long long, ulonglong2, make_ulonglong2)

// Integer arithmetic wraps, like the CPU's (and unlike C++ signed overflow).
LM_DEV int lm_add(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
LM_DEV int lm_sub(int a, int b) { return (int)((unsigned)a - (unsigned)b); }
LM_DEV int lm_mul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
LM_DEV int lm_neg(int a) { return (int)(0u - (unsigned)a); }
LM_DEV long long lm_add(long long a, long long b) {
  return (long long)((unsigned long long)a + (unsigned long long)b);
}
LM_DEV long long lm_sub(long long a, long long b) {
  return (long long)((unsigned long long)a - (unsigned long long)b);
}
LM_DEV long long lm_mul(long long a, long long b) {
  return (long long)((unsigned long long)a * (unsigned long long)b);
}
LM_DEV long long lm_neg(long long a) { return (long long)(0ull - (unsigned long long)a); }
LM_DEV unsigned char lm_add(unsigned char a, unsigned char b) { return (unsigned char)(a + b); }
LM_DEV unsigned char lm_sub(unsigned char a, unsigned char b) { return (unsigned char)(a - b); }
LM_DEV unsigned char lm_mul(unsigned char a, unsigned char b) {
  return (unsigned char)((unsigned)a * (unsigned)b);
}
LM_DEV unsigned char lm_neg(unsigned char a) { return (unsigned char)(0u - a); }
// I8: computed in unsigned, its low byte kept (two's complement, as the CPU's i8).
LM_DEV signed char lm_add(signed char a, signed char b) {
  return (signed char)(unsigned char)((unsigned)a + (unsigned)b);
}
LM_DEV signed char lm_sub(signed char a, signed char b) {
  return (signed char)(unsigned char)((unsigned)a - (unsigned)b);
}
LM_DEV signed char lm_mul(signed char a, signed char b) {
  return (signed char)(unsigned char)((unsigned)a * (unsigned)b);
}
LM_DEV signed char lm_neg(signed char a) { return (signed char)(unsigned char)(0u - (unsigned)a); }
// I16 and U16: as I8 (C++ computes a u16 product in int, which can overflow).
LM_DEV short lm_add(short a, short b) { return (short)(unsigned short)((unsigned)a + (unsigned)b); }
LM_DEV short lm_sub(short a, short b) { return (short)(unsigned short)((unsigned)a - (unsigned)b); }
LM_DEV short lm_mul(short a, short b) { return (short)(unsigned short)((unsigned)a * (unsigned)b); }
LM_DEV short lm_neg(short a) { return (short)(unsigned short)(0u - (unsigned)a); }
LM_DEV unsigned short lm_add(unsigned short a, unsigned short b) {
  return (unsigned short)((unsigned)a + (unsigned)b);
}
LM_DEV unsigned short lm_sub(unsigned short a, unsigned short b) {
  return (unsigned short)((unsigned)a - (unsigned)b);
}
LM_DEV unsigned short lm_mul(unsigned short a, unsigned short b) {
  return (unsigned short)((unsigned)a * (unsigned)b);
}
LM_DEV unsigned short lm_neg(unsigned short a) { return (unsigned short)(0u - (unsigned)a); }
// U32 and U64: C++'s unsigned arithmetic wraps already.
LM_DEV unsigned lm_add(unsigned a, unsigned b) { return a + b; }
LM_DEV unsigned lm_sub(unsigned a, unsigned b) { return a - b; }
LM_DEV unsigned lm_mul(unsigned a, unsigned b) { return a * b; }
LM_DEV unsigned lm_neg(unsigned a) { return 0u - a; }
LM_DEV unsigned long long lm_add(unsigned long long a, unsigned long long b) { return a + b; }
LM_DEV unsigned long long lm_sub(unsigned long long a, unsigned long long b) { return a - b; }
LM_DEV unsigned long long lm_mul(unsigned long long a, unsigned long long b) { return a * b; }
LM_DEV unsigned long long lm_neg(unsigned long long a) { return 0ull - a; }
LM_DEV float lm_add(float a, float b) { return a + b; }
LM_DEV double lm_add(double a, double b) { return a + b; }
// s + c += x, Knuth's two-sum: c collects what each addition rounds away
// (F64 sums; --fmad=false and no fast math keep the order). Nothing is lost
// once s is infinite or NaN: inf - inf would make a sum with an inf NaN.
LM_DEV void lm_two_sum(double &s, double &c, double x) {
  const double t = s + x, z = t - s;
  c += t - t == 0.0 ? (s - (t - z)) + (x - z) : 0.0;
  s = t;
}
template <typename T> LM_DEV T lm_iabs(T a) { return a < 0 ? lm_neg(a) : a; }
// Integer powers, exact and wrapping (in U, unsigned), by squaring. A negative
// exponent gives 1 for a base of 1, +-1 for -1, else 0 (PyTorch's).
template <typename T, typename U> LM_DEV T lm_ipow(T a, U e) {
  U r = 1, s = (U)a;
  for (; e; e >>= 1) {
    if (e & 1) r *= s;
    s *= s;
  }
  return (T)r;
}
template <typename T> LM_DEV T lm_ipow_below_zero(T a, T e) {
  return a == 1 ? (T)1 : a == (T)-1 ? ((e & 1) ? (T)-1 : (T)1) : (T)0;
}
LM_DEV int lm_pow(int a, int e) {
  return e < 0 ? lm_ipow_below_zero(a, e) : lm_ipow<int, unsigned>(a, (unsigned)e);
}
LM_DEV long long lm_pow(long long a, long long e) {
  return e < 0 ? lm_ipow_below_zero(a, e)
               : lm_ipow<long long, unsigned long long>(a, (unsigned long long)e);
}
LM_DEV unsigned char lm_pow(unsigned char a, unsigned char e) {
  return lm_ipow<unsigned char, unsigned>(a, e);
}
LM_DEV signed char lm_pow(signed char a, signed char e) {
  return e < 0 ? lm_ipow_below_zero(a, e) : lm_ipow<signed char, unsigned>(a, (unsigned)e);
}
LM_DEV short lm_pow(short a, short e) {
  return e < 0 ? lm_ipow_below_zero(a, e) : lm_ipow<short, unsigned>(a, (unsigned)e);
}
LM_DEV unsigned short lm_pow(unsigned short a, unsigned short e) {
  return lm_ipow<unsigned short, unsigned>(a, e);
}
LM_DEV unsigned lm_pow(unsigned a, unsigned e) { return lm_ipow<unsigned, unsigned>(a, e); }
LM_DEV unsigned long long lm_pow(unsigned long long a, unsigned long long e) {
  return lm_ipow<unsigned long long, unsigned long long>(a, e);
}
// float -> integer dtype: truncated, saturated at the dtype's limits, NaN 0
// (as the CPU's llvm.fptosi.sat); C's own conversion is undefined out of range.
template <typename T> LM_DEV T lm_sat(double x, double lo, double hi, T tlo, T thi) {
  return x != x ? (T)0 : x <= lo ? tlo : x >= hi ? thi : (T)x;
}
LM_DEV int lm_to_i32(double x) {
  return lm_sat<int>(x, -2147483648.0, 2147483647.0, (int)(-2147483647 - 1), 2147483647);
}
LM_DEV long long lm_to_i64(double x) {
  return lm_sat<long long>(x, -9223372036854775808.0, 9223372036854775808.0,
                           (long long)(-9223372036854775807LL - 1), 9223372036854775807LL);
}
LM_DEV unsigned char lm_to_u8(double x) {
  return lm_sat<unsigned char>(x, 0.0, 255.0, (unsigned char)0, (unsigned char)255);
}
LM_DEV signed char lm_to_i8(double x) {
  return lm_sat<signed char>(x, -128.0, 127.0, (signed char)-128, (signed char)127);
}
LM_DEV short lm_to_i16(double x) {
  return lm_sat<short>(x, -32768.0, 32767.0, (short)-32768, (short)32767);
}
LM_DEV unsigned short lm_to_u16(double x) {
  return lm_sat<unsigned short>(x, 0.0, 65535.0, (unsigned short)0, (unsigned short)65535);
}
LM_DEV unsigned lm_to_u32(double x) {
  return lm_sat<unsigned>(x, 0.0, 4294967295.0, 0u, 4294967295u);
}
LM_DEV unsigned long long lm_to_u64(double x) {
  return lm_sat<unsigned long long>(x, 0.0, 18446744073709551616.0, 0ull, 18446744073709551615ull);
}

// max/min: a NaN operand gives NaN (the CPU's select: a wins if NaN or greater).
template <typename T> LM_DEV T lm_max(T a, T b) { return (a != a || a > b) ? a : b; }
template <typename T> LM_DEV T lm_min(T a, T b) { return (a != a || a < b) ? a : b; }

// (value, index) pairs: b replaces a when it is a NaN and a is not, or beats it,
// or ties it (or both are NaN) at a lower index.
template <bool MAX, typename T> LM_DEV void lm_arg_take(T &a, long long &ai, T b, long long bi) {
  bool an = a != a, bn = b != b;
  bool take =
      (an || bn) ? (bn && (!an || bi < ai)) : ((MAX ? b > a : b < a) || (b == a && bi < ai));
  if (take) {
    a = b;
    ai = bi;
  }
}

// Warp shuffles (butterfly: every lane ends with the same combination).
LM_DEV float lm_shfl(float v, int o) { return __shfl_xor_sync(LM_FULL_MASK, v, o); }
LM_DEV double lm_shfl(double v, int o) { return __shfl_xor_sync(LM_FULL_MASK, v, o); }
LM_DEV int lm_shfl(int v, int o) { return __shfl_xor_sync(LM_FULL_MASK, v, o); }
LM_DEV long long lm_shfl(long long v, int o) { return __shfl_xor_sync(LM_FULL_MASK, v, o); }
LM_DEV unsigned char lm_shfl(unsigned char v, int o) {
  return (unsigned char)__shfl_xor_sync(LM_FULL_MASK, (int)v, o);
}
LM_DEV signed char lm_shfl(signed char v, int o) {
  return (signed char)__shfl_xor_sync(LM_FULL_MASK, (int)v, o);
}
LM_DEV short lm_shfl(short v, int o) { return (short)__shfl_xor_sync(LM_FULL_MASK, (int)v, o); }
LM_DEV unsigned short lm_shfl(unsigned short v, int o) {
  return (unsigned short)__shfl_xor_sync(LM_FULL_MASK, (int)v, o);
}
LM_DEV unsigned lm_shfl(unsigned v, int o) { return __shfl_xor_sync(LM_FULL_MASK, v, o); }
LM_DEV unsigned long long lm_shfl(unsigned long long v, int o) {
  return __shfl_xor_sync(LM_FULL_MASK, v, o);
}
LM_DEV bool lm_shfl(bool v, int o) { return __shfl_xor_sync(LM_FULL_MASK, (int)v, o) != 0; }
// A warp's sum and largest value, in every lane (attention's rows of scores).
LM_DEV float lm_warp_sum(float x) {
  for (int o = 16; o > 0; o /= 2) x += lm_shfl(x, o);
  return x;
}
LM_DEV float lm_warp_max(float x) {
  for (int o = 16; o > 0; o /= 2) {
    const float other = lm_shfl(x, o);
    x = other > x ? other : x;
  }
  return x;
}

// Math. Double: CUDA's functions. Float: CUDA's float functions, or in double
// rounded once with LM_PRECISE_F32 (the CPU's way).
LM_DEV double lm_exp(double x) { return exp(x); }
LM_DEV double lm_log(double x) { return log(x); }
LM_DEV double lm_sin(double x) { return sin(x); }
LM_DEV double lm_cos(double x) { return cos(x); }
LM_DEV double lm_tanh(double x) { return tanh(x); }
LM_DEV double lm_erf(double x) { return erf(x); }
LM_DEV double lm_pow(double x, double y) { return pow(x, y); }
LM_DEV double lm_sqrt(double x) { return sqrt(x); }
LM_DEV double lm_floor(double x) { return floor(x); }
LM_DEV double lm_fabs(double x) { return fabs(x); }
#ifdef LM_PRECISE_F32
LM_DEV float lm_exp(float x) { return (float)exp((double)x); }
LM_DEV float lm_log(float x) { return (float)log((double)x); }
LM_DEV float lm_sin(float x) { return (float)sin((double)x); }
LM_DEV float lm_cos(float x) { return (float)cos((double)x); }
LM_DEV float lm_tanh(float x) { return (float)tanh((double)x); }
LM_DEV float lm_erf(float x) { return (float)erf((double)x); }
LM_DEV float lm_pow(float x, float y) { return (float)pow((double)x, (double)y); }
#else
LM_DEV float lm_exp(float x) { return expf(x); }
LM_DEV float lm_log(float x) { return logf(x); }
LM_DEV float lm_sin(float x) { return sinf(x); }
LM_DEV float lm_cos(float x) { return cosf(x); }
LM_DEV float lm_tanh(float x) { return tanhf(x); }
// erff is within 2 ulp, which 1 + erf(x) (GELU) magnifies where erf nears
// -1; 1 - erfcf(|x|) is within an ulp of erf there (erfcf keeps its
// relative accuracy), which is what torch's float erf gives.
LM_DEV float lm_erf(float x) {
  float a = fabsf(x);
  return a < 1.0f ? erff(x) : copysignf(1.0f - erfcf(a), x);
}
LM_DEV float lm_pow(float x, float y) { return powf(x, y); }
#endif
LM_DEV float lm_sqrt(float x) { return sqrtf(x); }
LM_DEV float lm_floor(float x) { return floorf(x); }
LM_DEV float lm_fabs(float x) { return fabsf(x); }

// BF16 and F16 are their bits in memory and floats in registers, every result
// rounded to nearest even as on the CPU (ir/dtype.c has the same in C).
LM_DEV float lm_from_bf16(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
LM_DEV float lm_round_bf16(float x) {
  const unsigned u = __float_as_uint(x);
  if (x != x) return __uint_as_float((u | 0x400000u) & 0xffff0000u);
  return __uint_as_float((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}
LM_DEV unsigned short lm_to_bf16(float x) {
  return (unsigned short)(__float_as_uint(lm_round_bf16(x)) >> 16);
}
LM_DEV float lm_from_f16(unsigned short h) {
  const unsigned s = (unsigned)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return __uint_as_float(s | 0x7f800000u | (m << 13));
  if (e != 0u) return __uint_as_float(s | ((e + 112u) << 23) | (m << 13));
  const float v = (float)m * 0x1p-24f;
  return s ? -v : v;
}
LM_DEV unsigned short lm_to_f16(float x) {
  const unsigned u = __float_as_uint(x), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a >= 0x47800000u)
    return (unsigned short)(s | (a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x1ffu) : 0x7c00u));
  if (a < 0x38800000u)
    return (unsigned short)(s | (__float_as_uint(__uint_as_float(a) + 0.5f) - 0x3f000000u));
  const unsigned h = a - 0x38000000u;
  return (unsigned short)(s | ((h + 0xfffu + ((h >> 13) & 1u)) >> 13));
}
LM_DEV float lm_round_f16(float x) { return lm_from_f16(lm_to_f16(x)); }

// The high 32 bits of a 32 x 32-bit product, for Philox (cuda_philox.cuh).
LM_DEV unsigned int lm_mulhi(unsigned int a, unsigned int b) { return __umulhi(a, b); }

#endif
