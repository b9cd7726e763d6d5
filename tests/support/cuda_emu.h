/*
 * CUDA C on the host, for the emulated device (tests only): the emulator's
 * NVRTC (emu_nvrtc.c) compiles each generated source with the host's C++
 * compiler and this header first, into a shared object that the driver
 * double (fake_cuda.c, FAKE_CUDA_EMULATE=1) loads and launches.
 *
 * Each CUDA thread is a fiber of the launching host thread (cuda_emu_run.c);
 * the blocks of a grid run one after another. `__syncthreads()` and the warp
 * shuffles are the points where fibers switch: a shuffle waits for the 32
 * lanes of its warp, a barrier for every thread of the block that has not
 * returned, and a launch fails, naming the barrier, when they cannot all get
 * there (a divergent barrier, which a GPU leaves undefined). `__shared__`
 * variables are static: one copy, which the block running now owns.
 *
 * Only what loom's generated sources use is here.
 */
#ifndef LOOM_TESTS_CUDA_EMU_H
#define LOOM_TESTS_CUDA_EMU_H

#include "cuda_emu_abi.h"

/* Set by the driver double when it loads the object. */
extern "C" {
lm_emu_runtime *lm_emu_rt = nullptr;
}

#define threadIdx (lm_emu_rt->current->thread_idx)
#define blockIdx (lm_emu_rt->block_idx)
#define blockDim (lm_emu_rt->block_dim)
#define gridDim (lm_emu_rt->grid_dim)

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static

static inline void __syncthreads(void) { lm_emu_rt->sync_block(); }

template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  (void)mask;
  unsigned long long bits = 0;
  __builtin_memcpy(&bits, &v, sizeof v);
  bits = lm_emu_rt->shfl_xor(bits, lane_mask);
  T out;
  __builtin_memcpy(&out, &bits, sizeof out);
  return out;
}

/* A warp's barrier: a shuffle waits for the warp's 32 lanes, as it does. */
static inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)__shfl_xor_sync(mask, 0, 0); }

/* Bit casts and the high half of a product. */
static inline float __int_as_float(int i) {
  float f;
  __builtin_memcpy(&f, &i, 4);
  return f;
}
static inline float __uint_as_float(unsigned int u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
static inline unsigned int __float_as_uint(float f) {
  unsigned int u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
static inline double __longlong_as_double(long long i) {
  double d;
  __builtin_memcpy(&d, &i, 8);
  return d;
}
static inline long long __double_as_longlong(double d) {
  long long i;
  __builtin_memcpy(&i, &d, 8);
  return i;
}
static inline unsigned int __umulhi(unsigned int a, unsigned int b) {
  return (unsigned int)(((unsigned long long)a * b) >> 32);
}

/* Vector types, their constructors and the cache-hinted accesses. */
#define LM_EMU_VEC4(V, T)                                                                          \
  struct alignas(4 * sizeof(T) < 16 ? 4 * sizeof(T) : 16) V {                                      \
    T x, y, z, w;                                                                                  \
  };                                                                                               \
  static inline V make_##V(T x, T y, T z, T w) { return V{x, y, z, w}; }
#define LM_EMU_VEC2(V, T)                                                                          \
  struct alignas(2 * sizeof(T)) V {                                                                \
    T x, y;                                                                                        \
  };                                                                                               \
  static inline V make_##V(T x, T y) { return V{x, y}; }
LM_EMU_VEC4(float4, float)
LM_EMU_VEC4(int4, int)
LM_EMU_VEC4(uchar4, unsigned char)
LM_EMU_VEC4(char4, signed char)
LM_EMU_VEC4(ushort4, unsigned short)
LM_EMU_VEC4(short4, short)
LM_EMU_VEC4(uint4, unsigned int)
LM_EMU_VEC2(double2, double)
LM_EMU_VEC2(longlong2, long long)
LM_EMU_VEC2(ulonglong2, unsigned long long)

template <typename V> static inline V __ldca(const V *p) { return *p; }
template <typename V> static inline void __stwb(V *p, V v) { *p = v; }

/* The math functions the sources call, from the host's libm. Declared here
 * rather than through <cmath>, whose parsing took 0.1 s of every compile
 * (most of the compile), with the float overload of fma CUDA has. */
extern "C" {
double exp(double), log(double), sin(double), cos(double), tanh(double), erf(double);
double sqrt(double), floor(double), fabs(double), pow(double, double);
double fma(double, double, double);
float expf(float), logf(float), sinf(float), cosf(float), tanhf(float), erff(float);
float erfcf(float), copysignf(float, float);
float sqrtf(float), floorf(float), fabsf(float), powf(float, float);
float fmaf(float, float, float);
}
static inline float fma(float a, float b, float c) { return fmaf(a, b, c); }

#endif
