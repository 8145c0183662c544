"""C micro-kernels for int8 matmul tiles (int8 x int8 -> int32, exact): AVX2 and AVX-512 VNNI.

B is packed so that the k values one instruction consumes for a column sit next to each other:
  AVX2  (pairs):  B[k, j] at B + (k/2)*ldb + j*2 + k%2    (vpmaddwd adds 2 products per lane)
  VNNI  (quads):  B[k, j] at B + (k/4)*ldb + j*4 + k%4    (vpdpbusd adds 4 products per lane)
A[r, k] is at A + r*a_rs + k*a_cs; C[r, j] (int32) at C + r*ldc + j.  K is a multiple of 2 / 4.
Only min(m_rows, MR) rows are touched (a partial tile at the bottom edge of a matrix).

Signedness: vpdpbusd multiplies *unsigned* bytes of its first operand by signed bytes of the
second.  The kernel feeds it B shifted into u8 by flipping its sign bit (b + 128) and the signed
A broadcast, then subtracts the excess 128 * sum_k A[r, k] per row.  That row sum needs one
vpdpbusd per 64 k of a row (against 0x01 bytes), where a per-column sum of B would cost two per
4 k, on the one port this CPU class runs 512-bit vpdpbusd on.  Every step is exact in int32:
|sum| <= 255 * 128 * K stays below 2**31 for K < 65793.
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
/* acc += vpdpbusd(u8, s8) in place.  gcc 12 compiles _mm512_dpbusd_epi32 in a loop with a
   register copy per accumulator per iteration (it does not tie the accumulator to the
   destination), which costs a quarter of the throughput; the asm names the one register. */
__attribute__((target("avx512f"))) static inline __m512i rc_dpbusd(__m512i acc, __m512i u8, __m512i s8) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
  return acc;
}
/* excess[r] = 128 * sum_k A[r*rs + k*cs] for r < m <= 8 (K a multiple of 4), exact in int32.
   A whole tile of contiguous rows (the packed case) advances its eight rows together, 64 bytes
   per vpdpbusd against 0x01 bytes: eight independent chains.  Edge tiles and strided A add up
   scalars. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static inline void rc_i8_row_excess(
    const int8_t* a, int64_t rs, int64_t cs, int64_t K, int64_t m, int32_t* excess) {
  if (cs != 1 || m < 8) {
    for (int64_t r = 0; r < m; ++r) {
      int32_t sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += a[r * rs + k * cs];
      excess[r] = 128 * sum;
    }
    return;
  }
  const __m512i ones = _mm512_set1_epi8(1);
#define RC_SUM0(r) __m512i s##r = _mm512_setzero_si512();
  RC_ROWS8(RC_SUM0)
#undef RC_SUM0
  int64_t k = 0;
  for (; k + 64 <= K; k += 64) {
#define RC_SUM(r) s##r = rc_dpbusd(s##r, ones, _mm512_loadu_si512((const void*)(a + (r) * rs + k)));
    RC_ROWS8(RC_SUM)
#undef RC_SUM
  }
  if (k < K) {
    const __mmask64 tail = (1ULL << (K - k)) - 1; /* 0 < K - k < 64 */
#define RC_TAIL(r) s##r = rc_dpbusd(s##r, ones, _mm512_maskz_loadu_epi8(tail, a + (r) * rs + k));
    RC_ROWS8(RC_TAIL)
#undef RC_TAIL
  }
#define RC_REDUCE(r) excess[r] = 128 * _mm512_reduce_add_epi32(s##r);
  RC_ROWS8(RC_REDUCE)
#undef RC_REDUCE
}
/* (a[0], a[cs], a[2cs], a[3cs]) in every 32-bit lane: vpdpbusd's signed operand */
__attribute__((target("avx512f"))) static inline __m512i rc_i8_quad(const int8_t* a, int64_t cs) {
  int32_t quad;
  if (cs == 1) memcpy(&quad, a, 4);
  else quad = (int32_t)((uint32_t)(uint8_t)a[0] | ((uint32_t)(uint8_t)a[cs] << 8) |
                        ((uint32_t)(uint8_t)a[2 * cs] << 16) | ((uint32_t)(uint8_t)a[3 * cs] << 24));
  return _mm512_set1_epi32(quad);
}
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static inline void refcomp_i8gemm_vnni_8x32(
    const int8_t* restrict A, int64_t a_rs, int64_t a_cs, const int8_t* restrict B, int64_t ldb,
    int32_t* restrict C, int64_t ldc, int64_t K, int64_t m_rows) {
  const __m512i sign_flip = _mm512_set1_epi32((int32_t)0x80808080u);
  int32_t excess[8];
  rc_i8_row_excess(A, a_rs, a_cs, K, m_rows < 8 ? m_rows : 8, excess);
  if (m_rows < 8) {
    for (int64_t r = 0; r < m_rows; ++r) {
      const int8_t* ar = A + r * a_rs;
      __m512i t0 = _mm512_setzero_si512(), t1 = _mm512_setzero_si512();
      for (int64_t k = 0; k < K; k += 4) {
        const int8_t* b = B + (k / 4) * ldb;
        __m512i aq = rc_i8_quad(ar + k * a_cs, a_cs);
        t0 = _mm512_dpbusd_epi32(t0, _mm512_xor_si512(_mm512_loadu_si512((const void*)b), sign_flip), aq);
        t1 = _mm512_dpbusd_epi32(t1, _mm512_xor_si512(_mm512_loadu_si512((const void*)(b + 64)), sign_flip), aq);
      }
      const __m512i row_excess = _mm512_set1_epi32(excess[r]);
      int32_t* cr = C + r * ldc;
      _mm512_storeu_si512((void*)cr, _mm512_add_epi32(_mm512_loadu_si512((const void*)cr), _mm512_sub_epi32(t0, row_excess)));
      _mm512_storeu_si512((void*)(cr + 16), _mm512_add_epi32(_mm512_loadu_si512((const void*)(cr + 16)), _mm512_sub_epi32(t1, row_excess)));
    }
    return;
  }
  /* Accumulators start from C minus the excess: sixteen equal zeros instead made gcc keep one
     zero register and copy every accumulator in and out of the loop body. */
#define RC_LOADC(r) const __m512i row_excess##r = _mm512_set1_epi32(excess[r]); \
    __m512i c##r##0 = _mm512_sub_epi32(_mm512_loadu_si512((const void*)(C + (r) * ldc)), row_excess##r); \
    __m512i c##r##1 = _mm512_sub_epi32(_mm512_loadu_si512((const void*)(C + (r) * ldc + 16)), row_excess##r);
  RC_ROWS8(RC_LOADC)
#undef RC_LOADC
  for (int64_t k = 0; k < K; k += 4) {
    const int8_t* b = B + (k / 4) * ldb;
    const int8_t* a = A + k * a_cs;
    /* 16 columns x 4 k per 64 bytes, as unsigned bytes b + 128 */
    __m512i b0 = _mm512_xor_si512(_mm512_loadu_si512((const void*)b), sign_flip);
    __m512i b1 = _mm512_xor_si512(_mm512_loadu_si512((const void*)(b + 64)), sign_flip);
#define RC_DOT(r) { __m512i aq = rc_i8_quad(a + (r) * a_rs, a_cs); \
                    c##r##0 = rc_dpbusd(c##r##0, b0, aq); \
                    c##r##1 = rc_dpbusd(c##r##1, b1, aq); }
    RC_ROWS8(RC_DOT)
#undef RC_DOT
  }
#define RC_STOREC(r) _mm512_storeu_si512((void*)(C + (r) * ldc), c##r##0); \
                     _mm512_storeu_si512((void*)(C + (r) * ldc + 16), c##r##1);
  RC_ROWS8(RC_STOREC)
#undef RC_STOREC
}
#undef RC_ROWS8
"""
