"""C micro-kernels for int8 matmul tiles (int8 x int8 -> int32, exact): AVX2 and AVX-512 VNNI.

B is packed so that the k values one instruction consumes for a column sit next to each other:
  AVX2  (pairs):  B[k, j] at B + (k/2)*ldb + j*2 + k%2    (vpmaddwd adds 2 products per lane)
  VNNI  (quads):  B[k, j] at B + (k/4)*ldb + j*4 + k%4    (vpdpbusd adds 4 products per lane)
A[r, k] is at A + r*a_rs + k*a_cs; C[r, j] (int32) at C + r*ldc + j.  K is a multiple of 2 / 4.
Only min(m_rows, MR) rows are touched (a partial tile at the bottom edge of a matrix).

Signedness: vpdpbusd multiplies *unsigned* bytes of its first operand by signed bytes of the
second.  To multiply signed A by signed B, A is shifted into u8 by flipping its sign bit
(a + 128), and the excess 128 * sum_k B[k, j] is subtracted per column; that column sum is
itself computed with vpdpbusd of 0x80 bytes against B, so the result is exact.
"""

I8GEMM_AVX2_6X16 = r"""
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#define RC_ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)
/* (a[0], a[cs]) sign-extended to int16 and repeated in every 32-bit lane: vpmaddwd's A operand */
__attribute__((target("avx2"))) static inline __m256i rc_i8_pair(const int8_t* a, int64_t cs) {
  int16_t two;
  if (cs == 1) memcpy(&two, a, 2);
  else two = (int16_t)((uint16_t)(uint8_t)a[0] | ((uint16_t)(uint8_t)a[cs] << 8));
  return _mm256_cvtepi8_epi16(_mm_set1_epi16(two));
}
__attribute__((target("avx2"))) static inline void refcomp_i8gemm_avx2_6x16(
    const int8_t* restrict A, int64_t a_rs, int64_t a_cs, const int8_t* restrict B, int64_t ldb,
    int32_t* restrict C, int64_t ldc, int64_t K, int64_t m_rows) {
  if (m_rows < 6) {
    for (int64_t r = 0; r < m_rows; ++r) {
      __m256i t0 = _mm256_loadu_si256((const __m256i*)(C + r * ldc));
      __m256i t1 = _mm256_loadu_si256((const __m256i*)(C + r * ldc + 8));
      for (int64_t k = 0; k < K; k += 2) {
        const int8_t* b = B + (k / 2) * ldb;
        const int8_t* ar_ = A + r * a_rs + k * a_cs;
        __m256i ar = rc_i8_pair(ar_, a_cs);
        t0 = _mm256_add_epi32(t0, _mm256_madd_epi16(ar, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b))));
        t1 = _mm256_add_epi32(t1, _mm256_madd_epi16(ar, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(b + 16)))));
      }
      _mm256_storeu_si256((__m256i*)(C + r * ldc), t0);
      _mm256_storeu_si256((__m256i*)(C + r * ldc + 8), t1);
    }
    return;
  }
#define RC_LOADC(r) __m256i c##r##0 = _mm256_loadu_si256((const __m256i*)(C + (r) * ldc)); \
                    __m256i c##r##1 = _mm256_loadu_si256((const __m256i*)(C + (r) * ldc + 8));
  RC_ROWS6(RC_LOADC)
#undef RC_LOADC
  for (int64_t k = 0; k < K; k += 2) {
    const int8_t* b = B + (k / 2) * ldb;
    const int8_t* a = A + k * a_cs;
    /* 8 columns x 2 k per 16 bytes, widened to 16 int16 lanes */
    __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b));
    __m256i b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(b + 16)));
#define RC_MADD(r) { __m256i ar = rc_i8_pair(a + (r) * a_rs, a_cs); \
                     c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(ar, b0)); \
                     c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(ar, b1)); }
    RC_ROWS6(RC_MADD)
#undef RC_MADD
  }
#define RC_STOREC(r) _mm256_storeu_si256((__m256i*)(C + (r) * ldc), c##r##0); \
                     _mm256_storeu_si256((__m256i*)(C + (r) * ldc + 8), c##r##1);
  RC_ROWS6(RC_STOREC)
#undef RC_STOREC
}
#undef RC_ROWS6
"""

I8GEMM_VNNI_8X32 = r"""
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#define RC_ROWS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static inline void refcomp_i8gemm_vnni_8x32(
    const int8_t* restrict A, int64_t a_rs, int64_t a_cs, const int8_t* restrict B, int64_t ldb,
    int32_t* restrict C, int64_t ldc, int64_t K, int64_t m_rows) {
  const __m512i sign_flip = _mm512_set1_epi32((int32_t)0x80808080u);
  __m512i comp0 = _mm512_setzero_si512(), comp1 = _mm512_setzero_si512();
  if (m_rows < 8) {
    for (int64_t r = 0; r < m_rows; ++r) {
      __m512i t0 = _mm512_setzero_si512(), t1 = _mm512_setzero_si512();
      __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
      for (int64_t k = 0; k < K; k += 4) {
        const int8_t* b = B + (k / 4) * ldb;
        const int8_t* ar_ = A + r * a_rs + k * a_cs;
        int32_t quad = (int32_t)((uint32_t)(uint8_t)ar_[0] | ((uint32_t)(uint8_t)ar_[a_cs] << 8) |
                                 ((uint32_t)(uint8_t)ar_[2 * a_cs] << 16) | ((uint32_t)(uint8_t)ar_[3 * a_cs] << 24));
        __m512i ar = _mm512_xor_si512(_mm512_set1_epi32(quad), sign_flip);
        __m512i b0 = _mm512_loadu_si512((const void*)b), b1 = _mm512_loadu_si512((const void*)(b + 64));
        s0 = _mm512_dpbusd_epi32(s0, sign_flip, b0); s1 = _mm512_dpbusd_epi32(s1, sign_flip, b1);
        t0 = _mm512_dpbusd_epi32(t0, ar, b0); t1 = _mm512_dpbusd_epi32(t1, ar, b1);
      }
      int32_t* cr = C + r * ldc;
      _mm512_storeu_si512((void*)cr, _mm512_add_epi32(_mm512_loadu_si512((const void*)cr), _mm512_sub_epi32(t0, s0)));
      _mm512_storeu_si512((void*)(cr + 16), _mm512_add_epi32(_mm512_loadu_si512((const void*)(cr + 16)), _mm512_sub_epi32(t1, s1)));
    }
    return;
  }
#define RC_ZERO(r) __m512i c##r##0 = _mm512_setzero_si512(); __m512i c##r##1 = _mm512_setzero_si512();
  RC_ROWS8(RC_ZERO)
#undef RC_ZERO
  for (int64_t k = 0; k < K; k += 4) {
    const int8_t* b = B + (k / 4) * ldb;
    const int8_t* a = A + k * a_cs;
    __m512i b0 = _mm512_loadu_si512((const void*)b);
    __m512i b1 = _mm512_loadu_si512((const void*)(b + 64));
    comp0 = _mm512_dpbusd_epi32(comp0, sign_flip, b0);
    comp1 = _mm512_dpbusd_epi32(comp1, sign_flip, b1);
#define RC_DOT(r) { int32_t quad; const int8_t* ar_ = a + (r) * a_rs; \
                    if (a_cs == 1) memcpy(&quad, ar_, 4); \
                    else quad = (int32_t)((uint32_t)(uint8_t)ar_[0] | ((uint32_t)(uint8_t)ar_[a_cs] << 8) | \
                                ((uint32_t)(uint8_t)ar_[2 * a_cs] << 16) | ((uint32_t)(uint8_t)ar_[3 * a_cs] << 24)); \
                    __m512i ar = _mm512_xor_si512(_mm512_set1_epi32(quad), sign_flip); \
                    c##r##0 = _mm512_dpbusd_epi32(c##r##0, ar, b0); \
                    c##r##1 = _mm512_dpbusd_epi32(c##r##1, ar, b1); }
    RC_ROWS8(RC_DOT)
#undef RC_DOT
  }
#define RC_STOREC(r) { int32_t* cr = C + (r) * ldc; \
    _mm512_storeu_si512((void*)cr, _mm512_add_epi32(_mm512_loadu_si512((const void*)cr), _mm512_sub_epi32(c##r##0, comp0))); \
    _mm512_storeu_si512((void*)(cr + 16), _mm512_add_epi32(_mm512_loadu_si512((const void*)(cr + 16)), _mm512_sub_epi32(c##r##1, comp1))); }
  RC_ROWS8(RC_STOREC)
#undef RC_STOREC
}
#undef RC_ROWS8
"""
