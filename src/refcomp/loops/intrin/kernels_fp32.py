"""C micro-kernels for fp32 matmul tiles: AVX2/FMA 6x16 and 8x8, AVX-512 8x32 and 12x32 register tiles.

Each kernel computes C[0:m, 0:NR] += A[0:m, 0:K] * B[0:K, 0:NR], m = min(m_rows, MR), with
  A[r, k] at A + r*a_rs + k*a_cs   (any strides: row-major, or packed MR-interleaved)
  B[k, j] at B + k*ldb + j         (unit stride along j: vector loads)
  C[r, j] at C + r*ldc + j
The accumulators live in registers for the whole K loop; C is read once and written once.
A partial tile (m_rows < MR, the last rows of a matrix whose height MR does not divide) touches
only its m_rows rows: the 6x16 and 12x32 kernels run the tile's code for that row count, the
others a row at a time.
The `target` attribute lets the helper compile whatever -march the library is built with; the
tensorize registry only offers a kernel when the CPU running refcomp has its features.
"""

# Rows are unrolled by the preprocessor so that every accumulator is a named local (gcc keeps
# them in registers; an array of __m256 sometimes spills).  Every row count 1..6 is its own
# function, so the last, partial tile of M keeps its accumulators in registers too (a row at a
# time, two accumulators wait on the FMA latency: about a quarter of the speed).  The next line
# of B is prefetched 16 k ahead: with KC = 1024 the 64 KiB panel streams from L2 (one core of
# an AVX-512 Xeon running this tile: 89.6 -> 93.4 GFLOP/s at N = 1024).
SGEMM_AVX2_6X16 = r"""
#include <immintrin.h>
#include <stdint.h>
#define RC6_R1(X) X(0)
#define RC6_R2(X) RC6_R1(X) X(1)
#define RC6_R3(X) RC6_R2(X) X(2)
#define RC6_R4(X) RC6_R3(X) X(3)
#define RC6_R5(X) RC6_R4(X) X(4)
#define RC6_R6(X) RC6_R5(X) X(5)
#define RC6_LOADC(r) __m256 c##r##0 = _mm256_loadu_ps(C + (r) * ldc); \
                     __m256 c##r##1 = _mm256_loadu_ps(C + (r) * ldc + 8);
#define RC6_FMA(r) { __m256 ar = _mm256_broadcast_ss(a + (r) * a_rs); \
                     c##r##0 = _mm256_fmadd_ps(ar, b0, c##r##0); \
                     c##r##1 = _mm256_fmadd_ps(ar, b1, c##r##1); }
#define RC6_STOREC(r) _mm256_storeu_ps(C + (r) * ldc, c##r##0); \
                      _mm256_storeu_ps(C + (r) * ldc + 8, c##r##1);
#define RC6_KERNEL(ROWS) \
__attribute__((target("avx2,fma"))) static inline void rc_sgemm_avx2_6x16_m##ROWS( \
    const float* restrict A, int64_t a_rs, int64_t a_cs, const float* restrict B, int64_t ldb, \
    float* restrict C, int64_t ldc, int64_t K) { \
  RC6_R##ROWS(RC6_LOADC) \
  for (int64_t k = 0; k < K; ++k) { \
    const float* b = B + k * ldb; \
    const float* a = A + k * a_cs; \
    _mm_prefetch((const char*)(b + 16 * ldb), _MM_HINT_T0); \
    __m256 b0 = _mm256_loadu_ps(b); \
    __m256 b1 = _mm256_loadu_ps(b + 8); \
    RC6_R##ROWS(RC6_FMA) \
  } \
  RC6_R##ROWS(RC6_STOREC) \
}
RC6_KERNEL(1) RC6_KERNEL(2) RC6_KERNEL(3) RC6_KERNEL(4) RC6_KERNEL(5) RC6_KERNEL(6)
__attribute__((target("avx2,fma"))) static inline void refcomp_sgemm_avx2_6x16(
    const float* restrict A, int64_t a_rs, int64_t a_cs, const float* restrict B, int64_t ldb,
    float* restrict C, int64_t ldc, int64_t K, int64_t m_rows) {
#define RC6_CASE(ROWS) case ROWS: rc_sgemm_avx2_6x16_m##ROWS(A, a_rs, a_cs, B, ldb, C, ldc, K); break;
  switch (m_rows >= 6 ? 6 : m_rows) {
    RC6_CASE(1) RC6_CASE(2) RC6_CASE(3) RC6_CASE(4) RC6_CASE(5) RC6_CASE(6)
    default: break;
  }
#undef RC6_CASE
}
#undef RC6_KERNEL
#undef RC6_STOREC
#undef RC6_FMA
#undef RC6_LOADC
#undef RC6_R6
#undef RC6_R5
#undef RC6_R4
#undef RC6_R3
#undef RC6_R2
#undef RC6_R1
"""

# An 8 x 8 tile for N that 16 does not divide but 8 does (a convolution's output width of 56 or
# 24): eight one-vector accumulators, one load of B and eight broadcasts of A per k.
SGEMM_AVX2_8X8 = r"""
#include <immintrin.h>
#include <stdint.h>
#define RC_ROWS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
__attribute__((target("avx2,fma"))) static inline void refcomp_sgemm_avx2_8x8(
    const float* restrict A, int64_t a_rs, int64_t a_cs, const float* restrict B, int64_t ldb,
    float* restrict C, int64_t ldc, int64_t K, int64_t m_rows) {
  if (m_rows < 8) {
    for (int64_t r = 0; r < m_rows; ++r) {
      __m256 t0 = _mm256_loadu_ps(C + r * ldc), t1 = _mm256_setzero_ps();
      int64_t k = 0;
      for (; k + 1 < K; k += 2) {
        t0 = _mm256_fmadd_ps(_mm256_broadcast_ss(A + r * a_rs + k * a_cs), _mm256_loadu_ps(B + k * ldb), t0);
        t1 = _mm256_fmadd_ps(_mm256_broadcast_ss(A + r * a_rs + (k + 1) * a_cs),
                             _mm256_loadu_ps(B + (k + 1) * ldb), t1);
      }
      if (k < K) t0 = _mm256_fmadd_ps(_mm256_broadcast_ss(A + r * a_rs + k * a_cs), _mm256_loadu_ps(B + k * ldb), t0);
      _mm256_storeu_ps(C + r * ldc, _mm256_add_ps(t0, t1));
    }
    return;
  }
#define RC_LOADC(r) __m256 c##r = _mm256_loadu_ps(C + (r) * ldc);
  RC_ROWS8(RC_LOADC)
#undef RC_LOADC
  for (int64_t k = 0; k < K; ++k) {
    const float* a = A + k * a_cs;
    __m256 b0 = _mm256_loadu_ps(B + k * ldb);
#define RC_FMA(r) c##r = _mm256_fmadd_ps(_mm256_broadcast_ss(a + (r) * a_rs), b0, c##r);
    RC_ROWS8(RC_FMA)
#undef RC_FMA
  }
#define RC_STOREC(r) _mm256_storeu_ps(C + (r) * ldc, c##r);
  RC_ROWS8(RC_STOREC)
#undef RC_STOREC
}
#undef RC_ROWS8
"""

SGEMM_AVX512_8X32 = r"""
#include <immintrin.h>
#include <stdint.h>
#define RC_ROWS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
__attribute__((target("avx512f"))) static inline void refcomp_sgemm_avx512_8x32(
    const float* restrict A, int64_t a_rs, int64_t a_cs, const float* restrict B, int64_t ldb,
    float* restrict C, int64_t ldc, int64_t K, int64_t m_rows) {
  if (m_rows < 8) {
    for (int64_t r = 0; r < m_rows; ++r) {
      __m512 t0 = _mm512_loadu_ps(C + r * ldc), t1 = _mm512_loadu_ps(C + r * ldc + 16);
      for (int64_t k = 0; k < K; ++k) {
        __m512 ar = _mm512_set1_ps(A[r * a_rs + k * a_cs]);
        t0 = _mm512_fmadd_ps(ar, _mm512_loadu_ps(B + k * ldb), t0);
        t1 = _mm512_fmadd_ps(ar, _mm512_loadu_ps(B + k * ldb + 16), t1);
      }
      _mm512_storeu_ps(C + r * ldc, t0); _mm512_storeu_ps(C + r * ldc + 16, t1);
    }
    return;
  }
#define RC_LOADC(r) __m512 c##r##0 = _mm512_loadu_ps(C + (r) * ldc); \
                    __m512 c##r##1 = _mm512_loadu_ps(C + (r) * ldc + 16);
  RC_ROWS8(RC_LOADC)
#undef RC_LOADC
  for (int64_t k = 0; k < K; ++k) {
    const float* b = B + k * ldb;
    const float* a = A + k * a_cs;
    __m512 b0 = _mm512_loadu_ps(b);
    __m512 b1 = _mm512_loadu_ps(b + 16);
#define RC_FMA(r) { __m512 ar = _mm512_set1_ps(a[(r) * a_rs]); \
                    c##r##0 = _mm512_fmadd_ps(ar, b0, c##r##0); \
                    c##r##1 = _mm512_fmadd_ps(ar, b1, c##r##1); }
    RC_ROWS8(RC_FMA)
#undef RC_FMA
  }
#define RC_STOREC(r) _mm512_storeu_ps(C + (r) * ldc, c##r##0); \
                     _mm512_storeu_ps(C + (r) * ldc + 16, c##r##1);
  RC_ROWS8(RC_STOREC)
#undef RC_STOREC
}
#undef RC_ROWS8
"""

# bf16 inputs, fp32 accumulation, on AVX2: a bf16 is the top half of an fp32, so widening is a
# zero-extend and a 16-bit shift (exact).  B is plain row-major bf16 (no packing needed).
BF16GEMM_AVX2_6X16 = r"""
#include <immintrin.h>
#include <stdint.h>
#define RC_ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)
/* one bf16 as fp32 in every lane: broadcast the 16 bits (vpbroadcastw), move them up a half */
__attribute__((target("avx2"))) static inline __m256 rc_bf16_bcast(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_set1_epi16((short)*p), 16));
}
__attribute__((target("avx2,fma"))) static inline void refcomp_bf16gemm_avx2_6x16(
    const uint16_t* restrict A, int64_t a_rs, int64_t a_cs, const uint16_t* restrict B, int64_t ldb,
    float* restrict C, int64_t ldc, int64_t K, int64_t m_rows) {
  if (m_rows < 6) {
    for (int64_t r = 0; r < m_rows; ++r) {
      __m256 t0 = _mm256_loadu_ps(C + r * ldc), t1 = _mm256_loadu_ps(C + r * ldc + 8);
      for (int64_t k = 0; k < K; ++k) {
        __m256i braw = _mm256_loadu_si256((const __m256i*)(B + k * ldb));
        __m256 ar = rc_bf16_bcast(A + r * a_rs + k * a_cs);
        t0 = _mm256_fmadd_ps(ar, _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm256_castsi256_si128(braw)), 16)), t0);
        t1 = _mm256_fmadd_ps(ar, _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm256_extracti128_si256(braw, 1)), 16)), t1);
      }
      _mm256_storeu_ps(C + r * ldc, t0); _mm256_storeu_ps(C + r * ldc + 8, t1);
    }
    return;
  }
#define RC_LOADC(r) __m256 c##r##0 = _mm256_loadu_ps(C + (r) * ldc); \
                    __m256 c##r##1 = _mm256_loadu_ps(C + (r) * ldc + 8);
  RC_ROWS6(RC_LOADC)
#undef RC_LOADC
  for (int64_t k = 0; k < K; ++k) {
    const uint16_t* b = B + k * ldb;
    const uint16_t* a = A + k * a_cs;
    __m256i braw = _mm256_loadu_si256((const __m256i*)b);
    __m256 b0 = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm256_castsi256_si128(braw)), 16));
    __m256 b1 = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm256_extracti128_si256(braw, 1)), 16));
#define RC_FMA(r) { __m256 ar = rc_bf16_bcast(a + (r) * a_rs); \
                    c##r##0 = _mm256_fmadd_ps(ar, b0, c##r##0); \
                    c##r##1 = _mm256_fmadd_ps(ar, b1, c##r##1); }
    RC_ROWS6(RC_FMA)
#undef RC_FMA
  }
#define RC_STOREC(r) _mm256_storeu_ps(C + (r) * ldc, c##r##0); \
                     _mm256_storeu_ps(C + (r) * ldc + 8, c##r##1);
  RC_ROWS6(RC_STOREC)
#undef RC_STOREC
}
#undef RC_ROWS6
"""

# AVX-512 12 x 32: 24 accumulators (of 32 zmm registers), two loads of B and twelve broadcasts
# of A per k, so each B vector feeds twelve FMAs instead of eight (the 8 x 32 tile's).  With
# B's KC x 32 panel streaming from L2 (KC up to 1024: 128 KiB, past a 48 KiB L1), one core
# ran 170 GFLOP/s with 8 rows and 180 with 12 (its FMA ceiling in L1 here is about 180).
# The next B lines are prefetched 16 k ahead (2 KiB: the panel streams from L2).  A tile of
# fewer rows (the last of M) runs the same code for its row count: every count 1..12 is its
# own function, so a partial tile keeps its accumulators in registers too.
SGEMM_AVX512_12X32 = r"""
#include <immintrin.h>
#include <stdint.h>
#define RC12_R1(X) X(0)
#define RC12_R2(X) RC12_R1(X) X(1)
#define RC12_R3(X) RC12_R2(X) X(2)
#define RC12_R4(X) RC12_R3(X) X(3)
#define RC12_R5(X) RC12_R4(X) X(4)
#define RC12_R6(X) RC12_R5(X) X(5)
#define RC12_R7(X) RC12_R6(X) X(6)
#define RC12_R8(X) RC12_R7(X) X(7)
#define RC12_R9(X) RC12_R8(X) X(8)
#define RC12_R10(X) RC12_R9(X) X(9)
#define RC12_R11(X) RC12_R10(X) X(10)
#define RC12_R12(X) RC12_R11(X) X(11)
#define RC12_LOADC(r) __m512 c##r##0 = _mm512_loadu_ps(C + (r) * ldc); \
                      __m512 c##r##1 = _mm512_loadu_ps(C + (r) * ldc + 16);
#define RC12_FMA(r) { __m512 ar = _mm512_set1_ps(a[(r) * a_rs]); \
                      c##r##0 = _mm512_fmadd_ps(ar, b0, c##r##0); \
                      c##r##1 = _mm512_fmadd_ps(ar, b1, c##r##1); }
#define RC12_STOREC(r) _mm512_storeu_ps(C + (r) * ldc, c##r##0); \
                       _mm512_storeu_ps(C + (r) * ldc + 16, c##r##1);
#define RC12_KERNEL(ROWS) \
__attribute__((target("avx512f"))) static inline void rc_sgemm_avx512_12x32_m##ROWS( \
    const float* restrict A, int64_t a_rs, int64_t a_cs, const float* restrict B, int64_t ldb, \
    float* restrict C, int64_t ldc, int64_t K) { \
  RC12_R##ROWS(RC12_LOADC) \
  for (int64_t k = 0; k < K; ++k) { \
    const float* b = B + k * ldb; \
    const float* a = A + k * a_cs; \
    _mm_prefetch((const char*)(b + 16 * ldb), _MM_HINT_T0); \
    _mm_prefetch((const char*)(b + 16 * ldb + 16), _MM_HINT_T0); \
    __m512 b0 = _mm512_loadu_ps(b); \
    __m512 b1 = _mm512_loadu_ps(b + 16); \
    RC12_R##ROWS(RC12_FMA) \
  } \
  RC12_R##ROWS(RC12_STOREC) \
}
RC12_KERNEL(1) RC12_KERNEL(2) RC12_KERNEL(3) RC12_KERNEL(4) RC12_KERNEL(5) RC12_KERNEL(6)
RC12_KERNEL(7) RC12_KERNEL(8) RC12_KERNEL(9) RC12_KERNEL(10) RC12_KERNEL(11) RC12_KERNEL(12)
__attribute__((target("avx512f"))) static inline void refcomp_sgemm_avx512_12x32(
    const float* restrict A, int64_t a_rs, int64_t a_cs, const float* restrict B, int64_t ldb,
    float* restrict C, int64_t ldc, int64_t K, int64_t m_rows) {
#define RC12_CASE(ROWS) case ROWS: rc_sgemm_avx512_12x32_m##ROWS(A, a_rs, a_cs, B, ldb, C, ldc, K); break;
  switch (m_rows >= 12 ? 12 : m_rows) {
    RC12_CASE(1) RC12_CASE(2) RC12_CASE(3) RC12_CASE(4) RC12_CASE(5) RC12_CASE(6)
    RC12_CASE(7) RC12_CASE(8) RC12_CASE(9) RC12_CASE(10) RC12_CASE(11) RC12_CASE(12)
    default: break;
  }
#undef RC12_CASE
}
#undef RC12_KERNEL
#undef RC12_STOREC
#undef RC12_FMA
#undef RC12_LOADC
#undef RC12_R12
#undef RC12_R11
#undef RC12_R10
#undef RC12_R9
#undef RC12_R8
#undef RC12_R7
#undef RC12_R6
#undef RC12_R5
#undef RC12_R4
#undef RC12_R3
#undef RC12_R2
#undef RC12_R1
"""
