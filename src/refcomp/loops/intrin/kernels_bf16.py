"""C micro-kernel for bf16 matmul tiles on AVX512-BF16: C[8, 32] (fp32) += A[8, K] (bf16) * B[K, 32] (bf16).

vdpbf16ps (`_mm512_dpbf16_ps`) takes 16 pairs of bf16 from each operand and adds, to each of
16 fp32 lanes, the two products of its pair.  Pairs run along k, so
  B is packed in pairs:  B[k, j] at B + (k/2)*ldb + j*2 + k%2   (one 64-byte row = 16 columns x 2 k)
  A[r, k] at A + r*a_rs + k*a_cs; the pair (A[r, k], A[r, k+1]) is broadcast as one 32-bit value
  C[r, j] (fp32) at C + r*ldc + j.  K is a multiple of 2.
Only min(m_rows, 8) rows are touched (a partial tile at the bottom edge of a matrix).

Numerics (spec/tensorize.md): the products of two bf16 values are exact in fp32; each instruction
adds its two products to the accumulator with round-to-nearest-even whatever MXCSR says, treats
denormal inputs as zero and flushes denormal results to zero, and raises no exceptions.  So the
result is an fp32 accumulation in pairs, not bit-identical to a one-product-at-a-time loop.
"""

BF16GEMM_AVX512BF16_8X32 = r"""
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#define RC_ROWS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
/* the bf16 pair (a[0], a[cs]) in every 32-bit lane: vdpbf16ps's A operand */
__attribute__((target("avx512f,avx512bf16"))) static inline __m512bh rc_bf16_pair(const uint16_t* a, int64_t cs) {
  uint32_t two;
  if (cs == 1) memcpy(&two, a, 4);
  else two = (uint32_t)a[0] | ((uint32_t)a[cs] << 16);
  return (__m512bh)_mm512_set1_epi32((int32_t)two);
}
__attribute__((target("avx512f,avx512bf16"))) static inline void refcomp_bf16gemm_avx512bf16_8x32(
    const uint16_t* restrict A, int64_t a_rs, int64_t a_cs, const uint16_t* restrict B, int64_t ldb,
    float* restrict C, int64_t ldc, int64_t K, int64_t m_rows) {
  if (m_rows < 8) {
    for (int64_t r = 0; r < m_rows; ++r) {
      __m512 t0 = _mm512_loadu_ps(C + r * ldc), t1 = _mm512_loadu_ps(C + r * ldc + 16);
      for (int64_t k = 0; k < K; k += 2) {
        const uint16_t* b = B + (k / 2) * ldb;
        __m512bh ar = rc_bf16_pair(A + r * a_rs + k * a_cs, a_cs);
        t0 = _mm512_dpbf16_ps(t0, ar, (__m512bh)_mm512_loadu_si512((const void*)b));
        t1 = _mm512_dpbf16_ps(t1, ar, (__m512bh)_mm512_loadu_si512((const void*)(b + 32)));
      }
      _mm512_storeu_ps(C + r * ldc, t0); _mm512_storeu_ps(C + r * ldc + 16, t1);
    }
    return;
  }
#define RC_LOADC(r) __m512 c##r##0 = _mm512_loadu_ps(C + (r) * ldc); \
                    __m512 c##r##1 = _mm512_loadu_ps(C + (r) * ldc + 16);
  RC_ROWS8(RC_LOADC)
#undef RC_LOADC
  for (int64_t k = 0; k < K; k += 2) {
    const uint16_t* b = B + (k / 2) * ldb;
    const uint16_t* a = A + k * a_cs;
    /* 16 columns x 2 k per 64 bytes */
    __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void*)b);
    __m512bh b1 = (__m512bh)_mm512_loadu_si512((const void*)(b + 32));
#define RC_DOT(r) { __m512bh ar = rc_bf16_pair(a + (r) * a_rs, a_cs); \
                    c##r##0 = _mm512_dpbf16_ps(c##r##0, ar, b0); \
                    c##r##1 = _mm512_dpbf16_ps(c##r##1, ar, b1); }
    RC_ROWS8(RC_DOT)
#undef RC_DOT
  }
#define RC_STOREC(r) _mm512_storeu_ps(C + (r) * ldc, c##r##0); \
                     _mm512_storeu_ps(C + (r) * ldc + 16, c##r##1);
  RC_ROWS8(RC_STOREC)
#undef RC_STOREC
}
#undef RC_ROWS8
"""
