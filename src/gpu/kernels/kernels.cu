/* mxrt's GPU kernels, in a subset of CUDA C that also compiles as plain C.
 *
 * `make ptx` compiles this file to kernels.ptx (committed; the library embeds it and loads it
 * with cuModuleLoadData): clang -x cuda --cuda-device-only -nocudainc -nocudalib, no CUDA
 * toolkit needed. The fake driver of the GPU tests (tests/gpu/fake_cuda.c) includes the same file
 * as C and runs these functions on the host when mxrt launches a kernel by name, so the
 * arithmetic the tests check is the arithmetic of this source.
 *
 * Every kernel is a grid-stride loop over `n` elements: any launch shape covers the range.
 * Types are spelled with builtin names (no headers are available to the device build). */

#if defined(__CUDA__)
#define MXRT_KERNEL extern "C" __attribute__((global))
#define MXRT_DEVICE static __attribute__((device)) inline
#define MXRT_INDEX                                                        \
  ((unsigned long long)__nvvm_read_ptx_sreg_ctaid_x() *                   \
       __nvvm_read_ptx_sreg_ntid_x() +                                    \
   __nvvm_read_ptx_sreg_tid_x())
#define MXRT_STRIDE \
  ((unsigned long long)__nvvm_read_ptx_sreg_ntid_x() * __nvvm_read_ptx_sreg_nctaid_x())
#else
/* host twin: the including file provides the launch coordinates of the running "thread" */
#define MXRT_KERNEL static
#define MXRT_DEVICE static inline
#define MXRT_INDEX mxrt_twin_index()
#define MXRT_STRIDE mxrt_twin_stride()
#endif

typedef unsigned long long mxrt_u64;

/* ---- float16 <-> float32, round to nearest even (IEEE 754 binary16) ---- */

MXRT_DEVICE float mxrt_f32_from_bits(unsigned int b) {
  float f;
  __builtin_memcpy(&f, &b, 4);
  return f;
}

MXRT_DEVICE unsigned int mxrt_f32_bits(float f) {
  unsigned int b;
  __builtin_memcpy(&b, &f, 4);
  return b;
}

MXRT_DEVICE float mxrt_half_to_float(unsigned short h) {
  unsigned int sign = (unsigned int)(h & 0x8000u) << 16;
  unsigned int exp = (h >> 10) & 0x1Fu;
  unsigned int man = h & 0x3FFu;
  if (exp == 0x1Fu) return mxrt_f32_from_bits(sign | 0x7F800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return mxrt_f32_from_bits(sign);
    /* subnormal: normalise */
    int e = -1;
    do {
      man <<= 1;
      e++;
    } while ((man & 0x400u) == 0);
    return mxrt_f32_from_bits(sign | ((unsigned int)(127 - 15 - e) << 23) | ((man & 0x3FFu) << 13));
  }
  return mxrt_f32_from_bits(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

MXRT_DEVICE unsigned short mxrt_float_to_half(float f) {
  unsigned int x = mxrt_f32_bits(f);
  unsigned int sign = (x >> 16) & 0x8000u;
  unsigned int exp = x & 0x7F800000u;
  unsigned int man = x & 0x007FFFFFu;
  if (exp == 0x7F800000u) /* infinity, or NaN made quiet keeping its top payload bits */
    return (unsigned short)(sign | 0x7C00u | (man ? 0x0200u : 0u) | (man >> 13));
  int half_exp = (int)(exp >> 23) - 127 + 15;
  if (half_exp >= 0x1F) return (unsigned short)(sign | 0x7C00u);
  if (half_exp <= 0) {
    if (14 - half_exp > 24) return (unsigned short)sign;
    man |= 0x00800000u;
    unsigned int half_man = man >> (14 - half_exp);
    unsigned int round_bit = 1u << (13 - half_exp);
    if ((man & round_bit) != 0 && (man & (3u * round_bit - 1u)) != 0) half_man++;
    return (unsigned short)(sign | half_man);
  }
  unsigned int h = sign | ((unsigned int)half_exp << 10) | (man >> 13);
  unsigned int round_bit = 0x1000u;
  if ((man & round_bit) != 0 && (man & (3u * round_bit - 1u)) != 0) h++;
  return (unsigned short)h;
}

/* ---- out = a OP b for OP in + - * (out may be a or b) ---- */

#define MXRT_BINARY_FLOAT(OPNAME, OP, NAME, T)                                              \
  MXRT_KERNEL void mxrt_##OPNAME##_##NAME(T *out, const T *a, const T *b, mxrt_u64 n) {     \
    for (mxrt_u64 i = MXRT_INDEX; i < n; i += MXRT_STRIDE) out[i] = a[i] OP b[i];          \
  }
/* integers wrap, computed in the unsigned type of the same width */
#define MXRT_BINARY_INT(OPNAME, OP, NAME, T, U)                                             \
  MXRT_KERNEL void mxrt_##OPNAME##_##NAME(T *out, const T *a, const T *b, mxrt_u64 n) {     \
    for (mxrt_u64 i = MXRT_INDEX; i < n; i += MXRT_STRIDE)                                  \
      out[i] = (T)(U)((U)a[i] OP (U)b[i]);                                                  \
  }
/* float16: each result computed in float32 and rounded once */
#define MXRT_BINARY_HALF(OPNAME, OP)                                                        \
  MXRT_KERNEL void mxrt_##OPNAME##_f16(unsigned short *out, const unsigned short *a,        \
                                       const unsigned short *b, mxrt_u64 n) {               \
    for (mxrt_u64 i = MXRT_INDEX; i < n; i += MXRT_STRIDE)                                  \
      out[i] = mxrt_float_to_half(mxrt_half_to_float(a[i]) OP mxrt_half_to_float(b[i]));   \
  }
#define MXRT_BINARY_ALL(OPNAME, OP)                                                         \
  MXRT_BINARY_FLOAT(OPNAME, OP, f32, float)                                                 \
  MXRT_BINARY_FLOAT(OPNAME, OP, f64, double)                                                \
  MXRT_BINARY_INT(OPNAME, OP, i32, int, unsigned int)                                       \
  MXRT_BINARY_INT(OPNAME, OP, i64, long long, unsigned long long)                           \
  MXRT_BINARY_INT(OPNAME, OP, i8, signed char, unsigned char)                               \
  MXRT_BINARY_INT(OPNAME, OP, u8, unsigned char, unsigned char)                             \
  MXRT_BINARY_HALF(OPNAME, OP)

MXRT_BINARY_ALL(add, +)
MXRT_BINARY_ALL(sub, -)
MXRT_BINARY_ALL(mul, *)

/* float16 sums rounded once: accumulate in float32, round at the end (the KVStore's reduce) */
MXRT_KERNEL void mxrt_widen_f16(float *acc, const unsigned short *x, mxrt_u64 n) {
  for (mxrt_u64 i = MXRT_INDEX; i < n; i += MXRT_STRIDE) acc[i] = mxrt_half_to_float(x[i]);
}

MXRT_KERNEL void mxrt_acc_f16(float *acc, const unsigned short *x, mxrt_u64 n) {
  for (mxrt_u64 i = MXRT_INDEX; i < n; i += MXRT_STRIDE) acc[i] += mxrt_half_to_float(x[i]);
}

MXRT_KERNEL void mxrt_narrow_f16(unsigned short *out, const float *acc, mxrt_u64 n) {
  for (mxrt_u64 i = MXRT_INDEX; i < n; i += MXRT_STRIDE) out[i] = mxrt_float_to_half(acc[i]);
}

/* ---- every element set to a bit pattern of 1, 2, 4 or 8 bytes ---- */

#define MXRT_FILL(BITS, T)                                                               \
  MXRT_KERNEL void mxrt_fill_b##BITS(T *out, T value, mxrt_u64 n) {                      \
    for (mxrt_u64 i = MXRT_INDEX; i < n; i += MXRT_STRIDE) out[i] = value;              \
  }

MXRT_FILL(8, unsigned char)
MXRT_FILL(16, unsigned short)
MXRT_FILL(32, unsigned int)
MXRT_FILL(64, unsigned long long)
